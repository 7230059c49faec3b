"""Structured space v3b-R (issue 31): replica blocks of rank layouts.

A layout with ``replica_block`` k splits the replica index r = r_in + k·r_out, r_in taking
the replica's place in the order and r_out outermost (class R of
reports/structured_v3_analysis.md: k replicas of a stage side by side, then the next
stage).  These tests check the placement against that definition and the rule for where
it applies, the DP against brute force and structured CP-SAT on a small three-tier
instance where a replica block strictly beats every v3a layout (evaluator prices), and that
the exports' rank map realises such a placement.
"""

from __future__ import annotations

import itertools
import math
import random
from types import SimpleNamespace

import numpy as np
import pytest

from nest_cp.cli.export.deepspeed import DEEPSPEED_ORDER
from nest_cp.cli.export.megatron import DEFAULT_ORDER, TP_PP_DP_ORDER
from nest_cp.cli.export.ranks import rank_map
from nest_cp.cli.export.torchtitan import TORCHTITAN_ORDER
from nest_cp.cost.evaluate import Evaluator
from nest_cp.dp.geometry import LayoutGeometries, PathIds, rank_devices
from nest_cp.dp.planner import solve as dp_solve
from nest_cp.harness.generators import random_instance
from nest_cp.model.instance import Cluster, HierarchicalNetwork, IntraConfig, Tier
from nest_cp.model.network import NetworkModel
from nest_cp.model.plan import MEGATRON_LAYOUT, Dim, RankLayout, structured_layouts
from nest_cp.model.result import SolveOptions, Space, Status
from nest_cp.solvers.brute import solve as brute_solve
from nest_cp.solvers.cpsat import solve as cpsat_solve
from tests.test_dp_v3a import _small, _tier_speeds_swapped, assert_fast_geometry

# h3-dense-l6-d12 with tiers 1 and 2 swapped: two replicas of a stage per node pay
BLOCKED_CASE = ("h3-dense-l6-d12", True)


@pytest.mark.parametrize(("config", "num_stages", "dp", "block"), [
    (IntraConfig(1, 1), 3, 4, 2), (IntraConfig(2, 1), 2, 6, 3), (IntraConfig(2, 2), 3, 4, 2)])
def test_replica_block_positions_follow_the_definition(config, num_stages, dp, block):
    """With order (t, e, replica, stage) and block k, rank (s, r, j) sits at position
    j + a·(r mod k + k·(s + S·(r div k))): r_in in the replica's place, r_out outermost."""
    layout = RankLayout(MEGATRON_LAYOUT.order, replica_block=block)
    positions = layout.positions(config, num_stages, dp)
    width = config.devices
    for stage, replica, rank in itertools.product(range(num_stages), range(dp), range(width)):
        expected = rank + width * (replica % block
                                   + block * (stage + num_stages * (replica // block)))
        assert positions[stage, replica, rank] == expected
    assert sorted(positions.ravel().tolist()) == list(range(width * num_stages * dp))


def test_a_replica_block_applies_only_where_it_moves_a_rank():
    """k must divide d with 1 < k < d and a dimension of radix > 1 must lie outside the
    replica; elsewhere the layout places as the one without the block (same positions)."""
    config = IntraConfig(1, 1)
    blocked = RankLayout(MEGATRON_LAYOUT.order, replica_block=2)
    assert blocked.block(config, 3, 4) == 2
    for num_stages, dp in ((3, 3), (3, 2), (1, 4)):  # k ∤ d, k = d, S = 1
        assert blocked.block(config, num_stages, dp) == 1
        assert (blocked.positions(config, num_stages, dp)
                == MEGATRON_LAYOUT.positions(config, num_stages, dp)).all()
    outermost = RankLayout((Dim.TP, Dim.EP, Dim.STAGE, Dim.REPLICA), replica_block=2)
    assert outermost.block(config, 3, 4) == 1  # r_in and r_out adjacent
    with pytest.raises(ValueError, match="replica block"):
        RankLayout(MEGATRON_LAYOUT.order, replica_block=0)


def test_structured_layouts_end_with_the_replica_blocks():
    """After v3a's layouts: every block k > 1 dividing n_0, on both replica-inner orders and
    every device order; named with the block; none on two tiers or graphs."""
    layouts = structured_layouts((4, 2, 2))
    blocked = [layout for layout in layouts if layout.replica_block > 1]
    assert layouts[:96] == structured_layouts((4, 2, 2))[:96]
    assert all(layout.replica_block == 1 for layout in layouts[:96])
    assert len(blocked) == 2 * 2 * 2  # k in {2, 4}, two orders, two device orders
    assert blocked[0].name == "t,e,replica,stage/replicas-of-2"
    assert blocked[-1].name == "e,t,replica,stage@021/replicas-of-4"
    assert not any(layout.replica_block > 1 for layout in structured_layouts((4, 2)))


@pytest.mark.parametrize("seed", range(6))
def test_translated_geometries_of_replica_blocks_equal_those_of_the_placement(seed):
    """The DP's geometries of blocked layouts (a few replicas along r_in and r_out, a few
    stages) and their data-parallel group paths equal those of the whole device array, at
    shapes where the block applies."""
    rng = random.Random(seed)
    sizes = [(4, 3, 4), (8, 2, 3), (2, 2, 2, 3), (4, 4, 4), (2, 3, 5), (8, 1, 4)][seed]
    tiers = [Tier(f"tier{index}", size, rng.choice([1e9, 1e10, 5e10, 2e11]),
                  rng.choice([0.0, 1e-6, 1e-5]), efficiency=rng.choice([1.0, 0.8]))
             for index, size in enumerate(sizes)]
    network = NetworkModel(Cluster(math.prod(sizes), 10**9, HierarchicalNetwork(tuple(tiers))))
    fast_ids, array_ids = PathIds(network), PathIds(network)
    fast = LayoutGeometries(network, fast_ids, np.array(network.canonical_order()))
    blocked = [layout for layout in network.structured_layouts if layout.replica_block > 1]
    checked = 0
    for _ in range(60):
        config = IntraConfig(rng.choice([1, 2, 3]), rng.choice([1, 1, 2]))
        num_stages = rng.choice([2, 3, 5])
        layout, wrap = rng.choice(blocked), rng.random() < 0.5
        most = network.num_devices // (config.devices * num_stages * layout.replica_block)
        if most < 2:
            continue
        dp = layout.replica_block * rng.randint(2, most)
        assert layout.block(config, num_stages, dp) == layout.replica_block
        devices = rank_devices(layout, config, num_stages, dp,
                               np.array(network.layout_order(layout)), network.node_size)
        assert_fast_geometry(fast, fast_ids, array_ids, devices, layout, config, num_stages,
                             dp, wrap)
        checked += 1
    assert checked > 5


def test_replica_blocks_beat_every_v3a_layout_on_the_small_case():
    """On the small case the DP's plan uses a replica block and costs strictly less, by the
    evaluator's prices, than the DP's best over the v3a layouts alone."""
    instance = _small(*BLOCKED_CASE)
    evaluator = Evaluator(instance)
    layouts = NetworkModel(instance.cluster).structured_layouts
    best = dp_solve(instance)
    v3a = dp_solve(instance, layouts=tuple(layout for layout in layouts
                                           if layout.replica_block == 1))
    assert "replicas-of-" in best.stats["layout"]
    assert evaluator.evaluate(best.plan).objective_ticks == best.objective_ticks
    assert best.objective_ticks < evaluator.evaluate(v3a.plan).objective_ticks


def test_dp_equals_brute_force_with_replica_blocks():
    """Brute force over every structured placement (replica blocks included) finds the
    DP's optimum."""
    instance = _small(*BLOCKED_CASE)
    brute = brute_solve(instance, SolveOptions(space=Space.STRUCTURED))
    assert brute.status is Status.OPTIMAL
    assert brute.objective_ticks == dp_solve(instance).objective_ticks


def test_dp_equals_structured_cpsat_with_replica_blocks():
    """Structured CP-SAT (one worker, fixed seed) selects among the placements with replica
    blocks and proves the DP's optimum."""
    instance = _small(*BLOCKED_CASE)
    exact = cpsat_solve(instance, SolveOptions(space=Space.STRUCTURED, workers=1, seed=0,
                                               time_limit_s=120.0))
    assert exact.status is Status.OPTIMAL
    assert exact.objective_ticks == dp_solve(instance).objective_ticks


def test_dp_equals_structured_milp_with_replica_blocks():
    """The MILP (HiGHS, the second independent solver on the shared skeleton) proves the
    DP's optimum where a replica block wins."""
    from nest_cp.solvers.registry import solve as backend_solve

    instance = _small(*BLOCKED_CASE)
    exact = backend_solve(instance, "milp", SolveOptions(space=Space.STRUCTURED, workers=1,
                                                         seed=0, time_limit_s=120.0,
                                                         milp_solver="highs"))
    assert exact.status is Status.OPTIMAL
    assert exact.objective_ticks == dp_solve(instance).objective_ticks


def test_rank_map_realises_a_replica_block_placement():
    """Under every framework rank order the rank map puts each global rank on the device the
    blocked placement gives its role, every device once, and its launcher agents cover the
    world (a host holding two replicas of a stage may need several agents)."""
    network = NetworkModel(Cluster(24, 10**9, HierarchicalNetwork((
        Tier("node", 4, 2e11, 1e-6), Tier("leaf", 3, 1e10, 3e-6),
        Tier("spine", 2, 5e10, 5e-6)))))
    config, num_stages, dp = IntraConfig(2, 1), 3, 4
    for layout in (layout for layout in network.structured_layouts
                   if layout.block(config, num_stages, dp) > 1):
        placement = network.layout_placement(layout, config, num_stages, dp)
        view = SimpleNamespace(tp=config.tp, cp=1, ep=config.ep, num_stages=num_stages,
                               replicas=dp, world_size=config.devices * num_stages * dp,
                               placement=placement)
        for order in (DEFAULT_ORDER, TP_PP_DP_ORDER, DEEPSPEED_ORDER, TORCHTITAN_ORDER):
            ranks = rank_map(view, order, network.node_size)
            for entry in ranks.entries:
                j = entry.tp_index + config.tp * entry.ep_index
                assert entry.device == placement[entry.stage][entry.replica][j]
            assert sorted(entry.device for entry in ranks.entries) == list(range(24))
            assert sum(len(node.gpus) for node in ranks.nodes) == 24


@pytest.mark.parametrize(("tier_sizes", "seed", "swapped"), [
    ((2, 3, 2), 1, True), ((2, 3, 2), 2, True), ((4, 2, 2), 3, False), ((4, 2, 2), 4, False)])
def test_dp_equals_brute_force_on_random_instances_where_blocks_win(tier_sizes, seed, swapped):
    """On seeded random three-tier instances where a replica block lowers the DP's optimum
    below v3a's, brute force over the structured placements finds the same optimum and the
    evaluator prices the DP's plan at it."""
    instance = random_instance(seed, num_layers=4, tier_sizes=tier_sizes)
    if swapped:
        instance = _tier_speeds_swapped(instance)
    dp = dp_solve(instance)
    v3a = dp_solve(instance, layouts=tuple(
        layout for layout in NetworkModel(instance.cluster).structured_layouts
        if layout.replica_block == 1))
    assert dp.objective_ticks < v3a.objective_ticks
    brute = brute_solve(instance, SolveOptions(space=Space.STRUCTURED))
    assert brute.status is Status.OPTIMAL and brute.objective_ticks == dp.objective_ticks
    assert Evaluator(instance).evaluate(dp.plan).objective_ticks == dp.objective_ticks
