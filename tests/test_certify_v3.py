"""The full-space certificate under cost model v3 (docs/cost-model.md §5 a-d): its bounds
never exceed an optimum found by exhaustive search.

Instances are the worked example (two nodes of two devices: 1e11 B/s inside a node, 1e10
B/s between) and variants of it whose optimum runs (a) a tier-1 sync group with two members
per node (two ring channels), (c) ZeRO 1 / 2 under Megatron's 2/4/12 optimizer (reduce-scatter
plus all-gather) and (d) both overlap flags.  Whole instances are checked against the brute
force of the full space, each shape against the exhaustive optimum of that shape.
"""

from __future__ import annotations

import dataclasses
import itertools
from pathlib import Path

import numpy as np
import pytest
from exhaustive import shape_bound, tally_shape_bounds

from nest_cp import IntraConfig, Plan, Stage, evaluate, load_instance
from nest_cp.harness.generators import random_instance
from nest_cp.model.instance import (
    CollectiveKind,
    HierarchicalNetwork,
    Instance,
    Layer,
    Optimizer,
    RecomputeMode,
    Tier,
)
from nest_cp.model.network import NetworkModel, collective_ticks
from nest_cp.model.result import Space, Status
from nest_cp.solvers.certify import certify_full
from nest_cp.solvers.certify.bounds import INF, FastBounds, Kind
from nest_cp.solvers.certify.chain import LayerPrices, network_tiers
from nest_cp.solvers.certify.split import block_chain, shapes
from nest_cp.solvers.registry import SolveOptions, solve

DATA = Path(__file__).parent / "data"
WIDE = (IntraConfig(), IntraConfig(2, 1), IntraConfig(1, 2))
MEGATRON_OPTIMIZER = Optimizer(name="adam", weight_bytes=2, grad_bytes=4, state_bytes=12)


def _worked() -> Instance:
    return load_instance(DATA / "worked_example.json")


def _training(instance: Instance, **changes) -> Instance:
    return dataclasses.replace(instance, training=dataclasses.replace(instance.training,
                                                                      **changes))


def _light(instance: Instance, dense_params: int = 10**7, global_batch: int = 4) -> Instance:
    """The worked example with lighter layers and a smaller batch: data parallelism over
    both nodes (a tier-1 sync group, two members per node) becomes worth its sync."""
    layers = tuple(Layer(layer.name, {key: dataclasses.replace(profile,
                                                               dense_params=dense_params)
                                      for key, profile in layer.profiles.items()})
                   for layer in instance.workload.layers)
    workload = dataclasses.replace(instance.workload, layers=layers)
    return _training(dataclasses.replace(instance, workload=workload),
                     global_batch=global_batch)


def v3_instances() -> dict[str, Instance]:
    """Small instances whose optimum (or a shape of it) the v3 rules change."""
    light = _light(_worked())
    zero = _training(light, optimizer=MEGATRON_OPTIMIZER, zero_stages=(1, 2))
    return {
        "a-worked": _worked(),
        "a-channels": light,
        "c-zero12": zero,
        "c-zero012-heavier": _training(_light(_worked(), 2 * 10**7), optimizer=MEGATRON_OPTIMIZER,
                                       zero_stages=(0, 1, 2)),
        "d-both-flags": _training(zero, overlap_grad_reduce=True, overlap_param_gather=True),
        "d-both-flags-heavier": _training(_light(_worked(), 2 * 10**7),
                                          optimizer=MEGATRON_OPTIMIZER, zero_stages=(0, 1, 2),
                                          overlap_grad_reduce=True, overlap_param_gather=True),
        "d-reduce-only": _training(zero, overlap_grad_reduce=True),
        # TP and EP groups and a slower spine: the per-shape bounds are loose on some shapes
        "mixed-tp-ep": _training(random_instance(1, num_layers=3, tier_sizes=(2, 2),
                                                 configs=WIDE, zero_stages=(0, 1, 2),
                                                 comm_scale=20, identical_blocks=True),
                                 optimizer=MEGATRON_OPTIMIZER, overlap_grad_reduce=True,
                                 overlap_param_gather=True),
    }


# ---------------------------------------------------------------------- whole instances


@pytest.mark.parametrize("name", sorted(v3_instances()))
def test_certificate_bound_below_the_brute_force_optimum(name):
    """bound <= brute-force full-space optimum <= certified plan; OPTIMAL means equal."""
    instance = v3_instances()[name]
    brute = solve(instance, "brute", SolveOptions(space=Space.FULL))
    assert brute.status is Status.OPTIMAL
    certificate = certify_full(instance, None, time_limit_s=30.0, seed=0)
    assert certificate.bound_ticks <= brute.objective_ticks <= certificate.objective_ticks
    if certificate.status is Status.OPTIMAL:
        assert certificate.objective_ticks == brute.objective_ticks


def test_instances_exercise_the_v3_rules():
    """The optima use what they are named for: two channels per tier-1 sync group (a),
    ZeRO 1 / 2 (c), and a sync the overlap flags hide (d)."""
    instances = v3_instances()
    network = NetworkModel(instances["a-worked"].cluster)
    optima = {name: solve(instance, "brute", SolveOptions(space=Space.FULL))
              for name, instance in instances.items()}
    plan = optima["a-channels"].plan
    sync_group = [plan.placement[0][r][0] for r in range(plan.num_replicas)]
    assert network.tier_of(sync_group) == 1 and network.channels_of(sync_group) == 2
    assert optima["c-zero12"].plan.zero in (1, 2)
    flagged, plain = optima["d-both-flags"], optima["c-zero12"]
    assert flagged.objective_ticks < optima["d-reduce-only"].objective_ticks \
        < plain.objective_ticks


def test_worked_example_four_replicas_shape_is_tight():
    """S = 1, d = 4 on the worked example: the shape's plans all cost 312,060,000 ticks (two
    channels between the nodes), and the shape's placement-free bound is exactly that."""
    instance = _worked()
    plan = Plan(IntraConfig(), 1, 0, 4, (Stage(0, 1),), (((0,), (1,), (2,), (3,)),))
    assert evaluate(instance, plan).objective_ticks == 312_060_000
    shape = next(s for s in shapes(instance) if s.num_stages == 1 and s.dp == 4)
    assert shape_bound(instance, shape) == 312_060_000


# ---------------------------------------------------------------------- per shape


@pytest.mark.parametrize("name", sorted(v3_instances()))
def test_shape_bounds_never_exceed_the_shape_optimum(name):
    """Per shape (S <= 2), the certificate's bound (placement-free, path, relaxation, raised)
    <= the exhaustive optimum of the shape; some shape is bounded exactly, and on the TP / EP
    instance exhaustive search finds shapes bounded strictly below their optimum."""
    instance = v3_instances()[name]
    tight, loose = tally_shape_bounds(
        instance, [shape for shape in shapes(instance) if shape.num_stages <= 2], name)
    assert tight >= 1
    assert loose >= 1 or name != "mixed-tp-ep"


# ---------------------------------------------------------------------- primitives


def _clusters() -> list[HierarchicalNetwork]:
    return [HierarchicalNetwork((Tier("node", 4, 1e11, 1e-6), Tier("pod", 2, 1.5e10, 5e-6),
                                 Tier("spine", 2, 2e10, 1e-5))),
            HierarchicalNetwork((Tier("node", 3, 9e10, 1e-6, efficiency=0.8),
                                 Tier("spine", 4, 1e10, 1e-5, efficiency=0.5)))]


@pytest.mark.parametrize("index", [0, 1])
def test_collective_path_is_never_slower_than_a_real_group(index):
    """For every group of 2..N devices of a hierarchy (partial domains, efficiency, a slow
    middle tier), a collective on its tier's ``collective_path`` costs at most the
    evaluator's price on the group's own path, and equally for some group of each size."""
    network_spec = _clusters()[index]
    cluster = dataclasses.replace(_worked().cluster, num_devices=11, network=network_spec)
    network = NetworkModel(cluster)
    tiers = network_tiers(network)
    volume, tight = 4 * 10**8, set()
    for size in range(2, network.num_devices + 1):
        for group in itertools.combinations(range(network.num_devices), size):
            tier = network.tier_of(group)
            if tier >= len(tiers):
                continue
            real = collective_ticks(CollectiveKind.ALL_REDUCE, volume, size,
                                    network.group_path(group), 1e-9)
            bound = collective_ticks(CollectiveKind.ALL_REDUCE, volume, size,
                                     tiers[tier].collective_path(size), 1e-9)
            assert bound <= real, (group, bound, real)
            if bound == real:
                tight.add((size, tier))
    assert {size for size, _ in tight} == set(range(2, network.num_devices + 1))


@pytest.mark.parametrize("name", ["c-zero12", "d-both-flags", "d-reduce-only"])
def test_block_sync_rows_are_suffix_minima_of_stage_sync(name):
    """The block-chain sync row (LinearTicks over block counts) is the suffix minimum of
    the exact per-span stage_sync, for every kind of stage and degree."""
    instance = v3_instances()[name]
    prices = LayerPrices(instance, IntraConfig(), 1,
                         network_tiers(NetworkModel(instance.cluster)))
    fast = FastBounds(instance, prices, block_chain(prices))
    assert fast.chain is not None
    for kind, dp, zero in itertools.product(Kind, (1, 2, 3, 4), instance.training.zero_stages):
        exact = [fast.stage_sync(span, dp, zero) if span is not None else INF
                 for span in (fast._kind_span(kind, blocks, RecomputeMode.NONE)
                              for blocks in range(fast.chain.blocks + 1))]
        expected = np.minimum.accumulate(np.array(exact, dtype=np.int64)[::-1])[::-1]
        assert list(fast._sync_row(kind, dp, zero)) == list(expected)
