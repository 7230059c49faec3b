"""The cpsat backend: known optima, statuses, hints and the structural gap."""

from __future__ import annotations

import pytest
from ortools.sat.python import cp_model

from nest_cp.backends import SolveOptions, solve
from nest_cp.evaluate import evaluate
from nest_cp.exact import enumerate_subproblems
from nest_cp.exact.adapters import CpSatAdapter
from nest_cp.exact.instances import random_instance
from nest_cp.exact.placement import canonical_placement
from nest_cp.exact.skeleton import build_model, hint_model
from nest_cp.io import load_instance
from nest_cp.model import (
    Cluster,
    GraphNetwork,
    Instance,
    IntraConfig,
    Layer,
    LayerProfile,
    Link,
    TrainingSetup,
    Workload,
)
from nest_cp.network import NetworkModel
from nest_cp.plan import Plan, uniform_stages
from nest_cp.result import Space, Status

WORKED_OPTIMUM_TICKS = 27_099_000  # DESIGN §3.1
MEGATRON_WORKED_TICKS = 35_552_000  # DESIGN §3.1


def _options(space: Space, **kwargs) -> SolveOptions:
    return SolveOptions(space=space, time_limit_s=kwargs.pop("time_limit_s", 30.0), seed=0,
                        workers=1, **kwargs)


def test_worked_example_full_space_optimum(data_dir):
    """CP-SAT proves DESIGN §3.1's optimum of 27,099,000 ticks in the full space."""
    result = solve(load_instance(data_dir / "worked_example.json"), "cpsat",
                   _options(Space.FULL))
    assert result.status is Status.OPTIMAL
    assert result.objective_ticks == result.bound_ticks == WORKED_OPTIMUM_TICKS


def test_worked_example_structured_space_optimum(data_dir):
    """The structured optimum of §3.1 is also 27,099,000 (d = 1 on one tier-0 pair is a layout)."""
    result = solve(load_instance(data_dir / "worked_example.json"), "cpsat",
                   _options(Space.STRUCTURED))
    assert result.status is Status.OPTIMAL
    assert result.objective_ticks == WORKED_OPTIMUM_TICKS


def test_hint_is_used_and_optimum_unchanged(data_dir):
    """A worse hint (the §3.1 Megatron plan) never changes the proven optimum."""
    instance = load_instance(data_dir / "worked_example.json")
    hint = Plan(IntraConfig(), 1, 0, 2, uniform_stages(2, 2))
    result = solve(instance, "cpsat", _options(Space.FULL, hint=hint))
    assert result.status is Status.OPTIMAL
    assert result.objective_ticks == WORKED_OPTIMUM_TICKS < MEGATRON_WORKED_TICKS


def test_memory_infeasible_instance_is_infeasible():
    """With HBM below one layer's weights and optimizer state, CP-SAT proves INFEASIBLE."""
    instance = random_instance(0, hbm_bytes=10**9)
    for space in (Space.FULL, Space.STRUCTURED):
        result = solve(instance, "cpsat", _options(space))
        assert result.status is Status.INFEASIBLE and result.plan is None


def test_time_limited_run_is_feasible_not_optimal():
    """On 12 layers and 64 devices, 2 s yield FEASIBLE with bound < objective, never OPTIMAL."""
    instance = random_instance(1, num_layers=12, tier_sizes=(8, 8), global_batch=128,
                               comm_scale=100, configs=(IntraConfig(), IntraConfig(2, 1)))
    hint = Plan(IntraConfig(), 1, 0, 16, uniform_stages(12, 4, "all"))
    result = solve(instance, "cpsat", _options(Space.FULL, time_limit_s=2.0, hint=hint))
    assert result.status is Status.FEASIBLE
    assert result.bound_ticks is not None and result.bound_ticks < result.objective_ticks


def latency_trap_instance() -> Instance:
    """Three devices, all pairs at 100 GB/s, but the pair (0, 1) has 1 ms latency.

    Links: 0–1 at 100 GB/s, 1 ms; 0–2 at 100 GB/s, 1 µs; 1–2 at 50 GB/s, 1 µs.  The
    widest path 0–1 is the direct link (1 ms); 0–2 is direct (1 µs); 1–2 goes via 0
    (100 GB/s, 1.001 ms).  One bandwidth level, so the canonical order is 0, 1, 2.
    Two layers whose weights do not fit on one device force S = 2, and a·S·d ≤ 3
    forces d = 1: every layout then puts the two stages on positions 0 and 1 of the
    canonical order, devices 0 and 1, paying 1 ms per transfer, while the full space
    puts them on devices 0 and 2 (1 µs).  So the structural gap is strictly positive.
    """
    profile = LayerProfile(fwd_s=1e-3, bwd_s=2e-3, dense_params=10**9, expert_params=0,
                           act_bytes=10**9, ckpt_bytes=10**7, out_bytes=10**6)
    layers = tuple(Layer(f"block{i}", {(IntraConfig(), 1): profile}) for i in range(2))
    links = (Link(0, 1, 1e11, 1e-3), Link(0, 2, 1e11, 1e-6), Link(1, 2, 5e10, 1e-6))
    cluster = Cluster(3, 20 * 10**9, GraphNetwork((), links), name="latency-trap")
    training = TrainingSetup(global_batch=4, seq_len=1, microbatches=(1,), zero_stages=(0,),
                             allow_recompute=False)
    return Instance(Workload("two-blocks", layers), cluster, training, name="latency-trap")


def test_structural_gap_is_strictly_positive_on_latency_trap():
    """On latency_trap_instance the full optimum beats every structured plan."""
    instance = latency_trap_instance()
    full = solve(instance, "cpsat", _options(Space.FULL))
    structured = solve(instance, "cpsat", _options(Space.STRUCTURED))
    assert full.status is Status.OPTIMAL and structured.status is Status.OPTIMAL
    assert structured.objective_ticks > full.objective_ticks
    assert sorted(device for stage in full.plan.placement for replica in stage
                  for device in replica) == [0, 2]


def _fixed_to_hint_is_feasible(instance, plan) -> bool:
    """Build the full model of ``plan``'s sub-problem, pin every variable to the hint, solve."""
    network = NetworkModel(instance.cluster)
    sub = next(s for s in enumerate_subproblems(instance) if s.matches(plan))
    adapter = CpSatAdapter()
    handles = build_model(adapter, instance, sub, network, Space.FULL, None)
    hint_model(adapter, handles, plan)
    solver = cp_model.CpSolver()
    solver.parameters.fix_variables_to_their_hinted_value = True
    solver.parameters.num_workers = 1
    return solver.solve(adapter.model) in (cp_model.OPTIMAL, cp_model.FEASIBLE)


@pytest.mark.parametrize("graph", [False, True])
def test_canonical_hint_satisfies_symmetry_cuts_and_keeps_objective(graph):
    """A shuffled placement, made canonical, evaluates the same and fits every symmetry cut."""
    instance = random_instance(3, num_layers=3, tier_sizes=(2, 2, 2), graph=graph)
    shuffled = ((((7,), (2,)), ((4,), (1,)), ((6,), (0,))))
    plan = Plan(IntraConfig(), 1, 0, 2, uniform_stages(3, 3), shuffled)
    canonical = plan.with_placement(canonical_placement(shuffled, NetworkModel(instance.cluster)))
    assert evaluate(instance, canonical).objective_ticks == evaluate(instance, plan).objective_ticks
    assert _fixed_to_hint_is_feasible(instance, plan)
