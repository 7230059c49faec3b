"""The structured DP planner against the brute-force oracle, on random tiny instances."""

from __future__ import annotations

import itertools
from fractions import Fraction

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from dp.kernel import INF, backtrack, fill_table
from dp.planner import solve as dp_solve
from dp.pricing import linear_collective
from nest_cp.backends import SolveOptions, check_result
from nest_cp.brute import solve as brute_solve
from nest_cp.io import load_instance
from nest_cp.model import (
    Cluster,
    Collective,
    CollectiveGroup,
    CollectiveKind,
    GraphNetwork,
    HierarchicalNetwork,
    Instance,
    IntraConfig,
    Layer,
    LayerProfile,
    Link,
    Optimizer,
    Phase,
    Tier,
    TrainingSetup,
    Workload,
)
from nest_cp.network import Path, collective_ticks
from nest_cp.result import Status

OPTIONS = SolveOptions()
CONFIGS = (IntraConfig(1, 1), IntraConfig(2, 1), IntraConfig(1, 2), IntraConfig(2, 2))
MILLI = st.sampled_from([0.0005, 0.001, 0.0013, 0.002, 0.0031, 0.004])


@st.composite
def profiles(draw, config: IntraConfig) -> LayerProfile:
    """One layer profile: dense or expert parameters, TP/EP collectives when t, e > 1."""
    collectives = []
    if config.tp > 1:
        collectives.append(Collective(CollectiveKind.ALL_REDUCE, draw(st.integers(0, 10**8)),
                                      CollectiveGroup.TP, Phase.FWD))
    if config.ep > 1:
        collectives.append(Collective(CollectiveKind.ALL_TO_ALL, draw(st.integers(0, 10**8)),
                                      CollectiveGroup.EP, Phase.BWD))
    act = draw(st.integers(0, 4 * 10**9))
    return LayerProfile(
        fwd_s=draw(MILLI), bwd_s=draw(MILLI),
        dense_params=draw(st.integers(0, 10**9)),
        expert_params=draw(st.sampled_from([0, 0, 10**8, 7 * 10**8])),
        act_bytes=act, ckpt_bytes=draw(st.integers(0, act)),
        out_bytes=draw(st.integers(1, 10**7)), collectives=tuple(collectives))


@st.composite
def hierarchical(draw, num_devices: int) -> HierarchicalNetwork:
    """2-3 tiers whose product covers the devices, faster inside."""
    sizes = [draw(st.sampled_from([1, 2, 3])) for _ in range(draw(st.integers(1, 2)))]
    covered = 1
    for size in sizes:
        covered *= size
    sizes.append(-(-num_devices // covered))
    tiers = [Tier(f"tier{k}", size, draw(st.sampled_from([1e9, 1e10, 1e11])),
                  draw(st.sampled_from([0.0, 1e-6, 1e-5])))
             for k, size in enumerate(sizes)]
    return HierarchicalNetwork(tuple(tiers))


@st.composite
def graph(draw, num_devices: int) -> GraphNetwork:
    """Devices hung on one or two switches, plus random direct links."""
    switches = ("s0", "s1")
    links = [Link(device, switches[draw(st.integers(0, 1))],
                  draw(st.sampled_from([1e9, 1e10, 1e11])), draw(st.sampled_from([1e-6, 1e-5])))
             for device in range(num_devices)]
    links.append(Link("s0", "s1", draw(st.sampled_from([1e9, 5e9])), 1e-5))
    for _ in range(draw(st.integers(0, 3))):
        a, b = draw(st.integers(0, num_devices - 1)), draw(st.integers(0, num_devices - 1))
        if a != b:
            links.append(Link(a, b, 2e11, 1e-7))
    return GraphNetwork(switches, tuple(links))


@st.composite
def instances(draw, graph_network: bool = False) -> Instance:
    """A tiny random instance: <= 4 layers, <= 8 devices, tight or loose memory."""
    num_layers = draw(st.integers(1, 4))
    num_devices = draw(st.integers(1, 6 if graph_network else 8))
    configs = draw(st.lists(st.sampled_from(CONFIGS), min_size=1, max_size=2, unique=True))
    microbatches = draw(st.sampled_from([(1,), (1, 2)]))
    layers = tuple(
        Layer(f"layer{index}", {(config, b): draw(profiles(config))
                                for config in configs for b in microbatches})
        for index in range(num_layers))
    network = draw(graph(num_devices) if graph_network else hierarchical(num_devices))
    hbm = draw(st.sampled_from([8 * 10**9, 3 * 10**10, 10**12]))
    cluster = Cluster(num_devices, hbm, network)
    training = TrainingSetup(
        global_batch=draw(st.integers(1, 12)), seq_len=1, microbatches=microbatches,
        optimizer=Optimizer(2, 2, 12),
        zero_stages=tuple(sorted(draw(st.sets(st.sampled_from([0, 1, 3]), min_size=1)))),
        allow_recompute=draw(st.booleans()))
    return Instance(Workload("random", layers), cluster, training)


def assert_dp_matches_brute(instance: Instance) -> None:
    dp_result = dp_solve(instance, OPTIONS)
    brute_result = brute_solve(instance, OPTIONS)
    assert dp_result.status is brute_result.status
    assert dp_result.objective_ticks == brute_result.objective_ticks
    check_result(instance, dp_result)


@settings(max_examples=40, deadline=None, derandomize=True)
@given(instances())
def test_dp_equals_brute_force_on_hierarchical_networks(instance):
    """DP objective and status equal the structured brute-force optimum (tiered networks)."""
    assert_dp_matches_brute(instance)


@settings(max_examples=20, deadline=None, derandomize=True)
@given(instances(graph_network=True))
def test_dp_equals_brute_force_on_graph_networks(instance):
    """DP objective and status equal the structured brute-force optimum (arbitrary graphs)."""
    assert_dp_matches_brute(instance)


def test_worked_example_optimum(data_dir):
    """DP finds DESIGN §3.1's optimum 27,099,000 ticks, which brute force confirms."""
    instance = load_instance(data_dir / "worked_example.json")
    result = dp_solve(instance, OPTIONS)
    assert result.status is Status.OPTIMAL
    assert result.objective_ticks == 27_099_000
    assert brute_solve(instance, OPTIONS).objective_ticks == 27_099_000
    check_result(instance, result)


def test_nothing_fits_is_infeasible_with_reason(data_dir):
    """An instance whose every stage overflows HBM is INFEASIBLE with the excess in bytes."""
    instance = load_instance(data_dir / "worked_example.json")
    small = Cluster(4, 10**9, instance.cluster.network)
    instance = Instance(instance.workload, small, instance.training)
    result = dp_solve(instance, OPTIONS)
    assert result.status is Status.INFEASIBLE and result.plan is None
    assert "exceeds usable HBM by" in result.message
    assert brute_solve(instance, OPTIONS).status is Status.INFEASIBLE


@settings(max_examples=60, deadline=None, derandomize=True)
@given(kind=st.sampled_from(list(CollectiveKind)), bytes_per_unit=st.integers(1, 16),
       group=st.integers(2, 4096), volume=st.integers(0, 10**12),
       bandwidth=st.sampled_from([1e9, 1.25e10, 9e11, 3.3e10]),
       latency=st.sampled_from([0.0, 1e-6, 3e-4, 1.7e-5]))
def test_linear_ticks_equal_collective_ticks(kind, bytes_per_unit, group, volume, bandwidth,
                                             latency):
    """The DP's integer linear form prices a collective to the tick like nest_cp.network."""
    path = Path(Fraction(str(bandwidth)), Fraction(str(latency)))
    form = linear_collective(kind, bytes_per_unit, group, path, 1e-9)
    expected = collective_ticks(kind, bytes_per_unit * volume, group, path, 1e-9)
    if volume == 0:
        expected = 0  # cost.py prices stages without parameters at zero
    assert form.of(volume) == expected


def test_kernel_minimises_the_largest_stage():
    """The kernel's value is the least max stage cost over all splits; backtracking attains it."""
    weights = [4, 1, 3, 5, 2]  # per-layer cost; a stage costs the sum of its layers
    num_stages, width = 3, len(weights) - 3 + 1
    table = np.full((num_stages, width, width), INF, dtype=np.int64)
    for stage in range(num_stages):
        for first_offset in range(width):
            for last_offset in range(first_offset, width):
                table[stage, first_offset, last_offset] = sum(
                    weights[stage + first_offset:stage + last_offset + 1])
    value, choice = fill_table(table)
    split = backtrack(choice)
    exhaustive = min(
        max(sum(weights[first:end]) for first, end in zip((0, *cuts), (*cuts, len(weights))))
        for cuts in itertools.combinations(range(1, len(weights)), num_stages - 1))
    assert int(value[0, 0]) == exhaustive
    assert max(sum(weights[first:last + 1]) for first, last in split) == exhaustive
    assert [first for first, _ in split] == [0] + [last + 1 for _, last in split[:-1]]
