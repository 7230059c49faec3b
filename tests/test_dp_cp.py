"""The DP searches context parallelism (docs/context-parallelism.md): c is an outer choice
beside t and e, priced to the tick, with the context ranks placed by the rank layouts as
brute force's structured space places them (just outside the tensor ranks)."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
from dp_shapes import v1_shapes
from exhaustive import canonical_placements, shape_optimum
from tiers import SLOW
from unbounded import without_dp_bounds

from nest_cp import IntraConfig, Plan, Stage, evaluate
from nest_cp.dp import planner
from nest_cp.harness.generators import random_cp_instance
from nest_cp.model.instance import (
    Cluster,
    CpComm,
    HierarchicalNetwork,
    Instance,
    Layer,
    LayerProfile,
    Optimizer,
    RecomputeMode,
    Tier,
    TrainingSetup,
    Workload,
)
from nest_cp.model.launchers.search import Launcher
from nest_cp.model.plan import all_layouts
from nest_cp.model.result import SolveOptions, Space, Status
from nest_cp.solvers.registry import CONTEXT_BACKENDS, context_note, solve

STRUCTURED = SolveOptions(space=Space.STRUCTURED)
FULL = SolveOptions(space=Space.FULL)
C = IntraConfig
MODES = (RecomputeMode.NONE, RecomputeMode.SELECTIVE, RecomputeMode.FULL)

# Small CP instances: (configurations, keyword arguments of random_cp_instance); 2 and 3
# tiers, c in {1, 2, 4}, with tensor and expert widths beside them, ZeRO 0 to 3, every
# recompute mode, interleaving (by block counting and by enumeration).
SHAPES = [
    dict(configs=(C(), C(cp=2), C(tp=2)), tier_sizes=(2, 2)),
    dict(configs=(C(), C(cp=2), C(cp=4), C(tp=2, cp=2)), tier_sizes=(2, 2, 2), num_layers=2),
    dict(configs=(C(cp=2), C(cp=2, ep=2), C(ep=2)), tier_sizes=(2, 2), zero_stages=(0, 1, 3),
         recompute_modes=MODES),
    dict(configs=(C(cp=2),), tier_sizes=(2, 2)),
    dict(configs=(C(cp=2), C(cp=4)), tier_sizes=(2, 2, 2), num_layers=2),
    dict(configs=(C(cp=2), C(tp=2, cp=2)), tier_sizes=(2, 2, 2), num_layers=2,
         zero_stages=(0, 1, 3)),
    dict(configs=(C(cp=2, ep=2), C(cp=4)), tier_sizes=(2, 2), zero_stages=(0, 3),
         recompute_modes=MODES),
    dict(configs=(C(), C(cp=2)), tier_sizes=(2, 2), num_layers=4, virtual_stages=(1, 2),
         identical_blocks=True),
    dict(configs=(C(cp=2),), tier_sizes=(2, 2), num_layers=4, virtual_stages=(2,)),
]


def _cp_instance(seed: int, comm: str) -> Instance:
    """One small CP instance per (seed, comm): the seed picks the shape, the volumes of
    communication against compute and the memory and batch that make c matter."""
    return random_cp_instance(seed, cp_comm=comm, comm_scale=(1, 10, 50)[seed % 3],
                              hbm_bytes=(12, 20, 40)[seed % 5 % 3] * 10**9,
                              global_batch=(2, 4, 8)[seed % 7 % 3],
                              **SHAPES[seed % len(SHAPES)])


@pytest.mark.parametrize("comm", ["p2p", "a2a"])
@pytest.mark.parametrize("seed", [seed if seed < 6 else pytest.param(seed, marks=SLOW)
                                  for seed in range(18)])
def test_dp_equals_structured_brute_force_with_context_widths(seed, comm):
    """DP = brute force over the structured space (status and objective), every c allowed;
    the registry referees the DP's plan: the evaluator prices it at the DP's objective."""
    instance = _cp_instance(seed, comm)
    found = solve(instance, "dp")
    brute = solve(instance, "brute", STRUCTURED)
    assert found.status is brute.status
    assert found.objective_ticks == brute.objective_ticks
    if found.plan is not None:
        assert evaluate(instance, found.plan).objective_ticks == found.objective_ticks


@pytest.mark.parametrize("seed", range(8))
def test_dp_equals_structured_brute_force_on_graphs(seed):
    """The same on random graphs (the CP rings' pairs and groups on their graph paths)."""
    instance = random_cp_instance(seed, cp_comm=("p2p", "a2a")[seed % 2],
                                  comm_scale=(1, 10, 50)[seed % 3],
                                  hbm_bytes=(12, 20, 40)[seed % 5 % 3] * 10**9,
                                  global_batch=(2, 4, 8)[seed % 7 % 3], graph=True,
                                  **SHAPES[seed % len(SHAPES)])
    found = solve(instance, "dp")
    brute = solve(instance, "brute", STRUCTURED)
    assert found.status is brute.status
    assert found.objective_ticks == brute.objective_ticks


@pytest.mark.parametrize("comm", ["p2p", "a2a"])
@pytest.mark.parametrize("seed", [0, 3, 9, 12])
def test_dp_against_full_space_brute_force(seed, comm):
    """On 4-device instances the DP is never better than the full space's optimum and equals
    it whenever the full optimum is a plan of the structured space (the structured brute
    force reaches it)."""
    instance = _cp_instance(seed, comm)
    found = solve(instance, "dp")
    full = solve(instance, "brute", FULL)
    structured = solve(instance, "brute", STRUCTURED)
    assert found.status is full.status
    if full.status is Status.OPTIMAL:
        assert found.objective_ticks >= full.objective_ticks
        if structured.objective_ticks == full.objective_ticks:
            assert found.objective_ticks == full.objective_ticks


def test_dp_chooses_c_above_1_when_it_wins():
    """Among the instances above, some optimum needs c > 1 and the DP finds it: the search
    over c is not vacuous."""
    chosen = [solve(_cp_instance(seed, "p2p"), "dp").plan for seed in (1, 4, 10)]
    assert any(plan is not None and plan.config.cp > 1 for plan in chosen)


def _worked_example(comm: CpComm, hbm_bytes: int, zero_stages: tuple[int, ...]) -> Instance:
    """docs/context-parallelism.md's worked example as an instance: one layer at (t, e, c, b)
    = (1, 1, 2, 1) on two nodes of two devices, B = 4."""
    profile = LayerProfile(fwd_s=2e-3, bwd_s=4e-3, attn_fwd_s=1e-3, attn_bwd_s=2e-3,
                           dense_params=10**9, expert_params=0, act_bytes=10**9,
                           ckpt_bytes=10**8, out_bytes=10**6, cp_kv_bytes=5 * 10**7,
                           cp_a2a_bytes=2 * 10**8)
    cluster = Cluster(4, hbm_bytes, HierarchicalNetwork((
        Tier("node", 2, 1e11, 1e-6), Tier("spine", 2, 1e10, 1e-5))))
    training = TrainingSetup(
        global_batch=4, seq_len=8, microbatches=(1,),
        optimizer=Optimizer(name="adam-megatron", weight_bytes=2, grad_bytes=4, state_bytes=12),
        zero_stages=zero_stages, recompute_modes=(RecomputeMode.NONE,),
        context_parallel=(2,), cp_comm=comm)
    workload = Workload("one-attention-layer", (Layer("block", {(C(cp=2), 1): profile}),))
    return Instance(workload, cluster, training, name="cp-worked")


def test_dp_reproduces_the_worked_example_with_zero1():
    """With ZeRO 1 and 12e9 B of HBM only d = 2 fits (10.1e9 B; d = 1 shards four ways
    fewer: 13.1e9), so the DP's optimum is the worked example's plan (A) with ZeRO 1, its
    rings inside the nodes: 237,064,000 ticks, as the page computes."""
    found = solve(_worked_example(CpComm.P2P, 12 * 10**9, (1,)), "dp")
    assert found.status is Status.OPTIMAL
    assert found.objective_ticks == 237_064_000
    plan = found.plan
    assert (plan.config.cp, plan.num_replicas, plan.zero) == (2, 2, 1)
    assert all(sorted(replica) in ([0, 1], [2, 3]) for replica in plan.placement[0])


def test_dp_reproduces_the_worked_example_a2a_with_zero1():
    """The a2a case (C) under the same memory: the DP's optimum is (C)'s placement with ZeRO
    1, priced as the evaluator prices that plan by hand."""
    instance = _worked_example(CpComm.A2A, 12 * 10**9, (1,))
    found = solve(instance, "dp")
    hand = evaluate(instance, Plan(C(cp=2), 1, 1, 2, (Stage(0, 0),), (((0, 1), (2, 3)),)))
    assert hand.feasible and found.objective_ticks == hand.objective_ticks


def test_dp_worked_example_p2p_optimum_is_brute_forces():
    """Without the memory squeeze d = 1 wins (m = 4, a sync over the two ranks of one node);
    the DP finds brute force's full-space optimum."""
    instance = _worked_example(CpComm.P2P, 80 * 10**9, (0, 1))
    assert solve(instance, "dp").objective_ticks == \
        solve(instance, "brute", FULL).objective_ticks


@pytest.mark.parametrize("launcher", [Launcher.MEGATRON, Launcher.DEEPSPEED])
@pytest.mark.parametrize("seed", [2, 6, 15])
def test_dp_respects_launcher_rules_for_context_widths(seed, launcher):
    """Under a launcher the DP chooses only the c its rules admit (Megatron: not beside e > 1;
    DeepSpeed: c = 1), as brute force does: same optimum, and an admitted plan."""
    instance = _cp_instance(seed, "p2p")
    instance = dataclasses.replace(instance, training=dataclasses.replace(
        instance.training, launcher=launcher))
    found = solve(instance, "dp")
    brute = solve(instance, "brute", STRUCTURED)
    assert found.status is brute.status
    assert found.objective_ticks == brute.objective_ticks
    if found.plan is not None:
        config = found.plan.config
        assert config.cp == 1 or (launcher is Launcher.MEGATRON and config.ep == 1)


def test_dp_is_a_context_backend():
    """The registry no longer restricts the DP to c = 1: no note, OPTIMAL kept."""
    instance = _cp_instance(1, "p2p")
    assert "dp" in CONTEXT_BACKENDS and context_note(instance, "dp") is None
    assert solve(instance, "dp").status is Status.OPTIMAL


@pytest.mark.parametrize("comm", ["p2p", "a2a"])
@pytest.mark.parametrize("tier_sizes", [(2, 2), (2, 2, 2)])
def test_bounds_with_context_widths_never_exceed_the_exhaustive_optimum(tier_sizes, comm):
    """For every shape with c > 1, the shape bound (compute, ZeRO-3 gathers over d·c ranks,
    sync over d·e·c and d·c ranks on their fastest paths) is at most the least objective
    over every split, recompute vector and injective placement (one per class of
    tests/exhaustive.py's canonical placements); its gather and sync parts are positive
    on some shapes (the group sizes are not vacuous)."""
    configs = (C(cp=2), C(cp=2, ep=2)) if tier_sizes == (2, 2) else (C(cp=2), C(cp=4))
    positive = 0
    for seed in range(2):
        instance = random_cp_instance(seed, configs, num_layers=2, tier_sizes=tier_sizes,
                                      cp_comm=comm, zero_stages=(0, 1, 3), comm_scale=10,
                                      recompute_modes=(RecomputeMode.NONE,))
        search = planner._Search(instance, SolveOptions(), all_layouts())
        shapes = v1_shapes(search, instance, keep=lambda config: config.cp > 1)
        for choice_index, shape, exhaustive_shape in shapes:
            chunk = search._chunk_time_bounds(choice_index)[shape.num_chunks]
            bound = search._shape_bound(shape, chunk)
            slots = shape.table.config.devices * shape.num_stages * shape.dp
            if slots > 4 and shape.dp > 1:
                continue  # (exhaustive search beyond 4 ranks only for d = 1)
            optimum = shape_optimum(instance, exhaustive_shape,
                                    canonical_placements(tier_sizes, slots))
            if optimum == math.inf:
                continue
            assert bound <= optimum, (shape, bound, optimum)
            positive += search._gather_bound(shape) + search._sync_bound(shape) > 0
    assert positive


@pytest.mark.parametrize("seed", [1, 4, 8, 11])
def test_pruning_never_changes_the_optimum_with_context_widths(seed, monkeypatch):
    """The DP with every bound zeroed (tests/unbounded.py) finds the same optimum."""
    instance = _cp_instance(seed, "p2p" if seed % 2 else "a2a")
    pruned = solve(instance, "dp")
    without_dp_bounds(monkeypatch)
    assert solve(instance, "dp").objective_ticks == pruned.objective_ticks


@pytest.mark.parametrize("tier_sizes", [(2, 2), (2, 2, 2), (4, 2, 2)])
def test_tiered_context_geometries_equal_the_rank_by_rank_ones(tier_sizes):
    """On tiered networks the vectorised context geometries are the rank-by-rank ones (the
    reference, on any network) for every configuration with c > 1, S, d, layout and wrap."""
    from nest_cp.dp.geometry import (
        PathIds,
        layout_config,
        rank_devices,
        rank_geometries,
        tiered_context_geometries,
    )
    from nest_cp.model.network import NetworkModel

    configs = (C(cp=2), C(tp=2, cp=2), C(cp=2, ep=2), C(cp=4), C(tp=2, cp=4))
    instance = random_cp_instance(0, configs, num_layers=2, tier_sizes=tier_sizes)
    network = NetworkModel(instance.cluster)
    ids = PathIds(network)
    compared = 0
    for config in configs:
        for stages in (1, 2, 3):  # 3: a middle stage, receiving both ways
            for dp in range(1, network.num_devices // (config.devices * stages) + 1):
                for layout in all_layouts()[::5]:
                    devices = rank_devices(layout, layout_config(config), stages, dp,
                                           np.array(network.layout_order(layout)),
                                           network.node_size)
                    for wrap in (False, True):
                        assert tiered_context_geometries(network, ids, devices, config, wrap) \
                            == rank_geometries(network, ids, devices, config, wrap)
                        compared += 1
    assert compared


def _overlap_instance(seed: int, overlap: bool) -> Instance:
    instance = random_cp_instance(seed, (C(tp=2, cp=2),), num_layers=2, tier_sizes=(4, 2),
                                  cp_comm=("p2p", "a2a")[seed % 2],
                                  global_batch=(2, 4)[seed % 2])
    return dataclasses.replace(instance, training=dataclasses.replace(
        instance.training, tp_comm_overlap=overlap))


@pytest.mark.parametrize("seed", range(4))
def test_dp_equals_brute_force_with_tp_overlap_beside_context_widths(seed):
    """With tp_comm_overlap (TP collectives hidden where a replica's TP groups lie in one
    tier-0 domain, docs/cost-model.md §5 e) and (t, c) = (2, 2): DP = brute force."""
    instance = _overlap_instance(seed, True)
    found = solve(instance, "dp")
    brute = solve(instance, "brute", STRUCTURED)
    assert found.status is brute.status
    assert found.objective_ticks == brute.objective_ticks


def test_tp_overlap_beside_context_widths_is_priced():
    """On those instances the overlap lowers some optimum: it is priced, not ignored."""
    assert any(solve(_overlap_instance(seed, True), "dp").objective_ticks
               < solve(_overlap_instance(seed, False), "dp").objective_ticks
               for seed in range(4))
