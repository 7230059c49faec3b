"""The milp backend (CBC and HiGHS): known optima, statuses and warm starts."""

from __future__ import annotations

import pytest

from nest_cp.harness.generators import random_instance
from nest_cp.io.readers import load_instance
from nest_cp.model.instance import IntraConfig
from nest_cp.model.plan import Plan, uniform_stages
from nest_cp.model.result import Space, Status
from nest_cp.solvers.exact.adapters import MilpAdapter
from nest_cp.solvers.registry import SolveOptions, solve

WORKED_OPTIMUM_TICKS = 27_099_000  # DESIGN §3.1


def _options(space: Space, solver: str, **kwargs) -> SolveOptions:
    return SolveOptions(space=space, time_limit_s=kwargs.pop("time_limit_s", 30.0), seed=0,
                        workers=1, milp_solver=solver, **kwargs)


@pytest.mark.parametrize("solver", ["cbc", "highs"])
@pytest.mark.parametrize("space", [Space.FULL, Space.STRUCTURED])
def test_worked_example_optimum(data_dir, solver, space):
    """Both MILP solvers prove DESIGN §3.1's optimum of 27,099,000 ticks in both spaces, as
    an optimum within their 1e-7 relative tolerance: the bound is what they proved."""
    result = solve(load_instance(data_dir / "worked_example.json"), "milp",
                   _options(space, solver))
    assert result.status is Status.OPTIMAL and result.tolerance_rel == 1e-7
    assert result.objective_ticks == WORKED_OPTIMUM_TICKS
    assert WORKED_OPTIMUM_TICKS * (1 - 3e-7) - 1 <= result.bound_ticks < WORKED_OPTIMUM_TICKS
    assert result.status_text == "OPTIMAL~1e-07"


@pytest.mark.parametrize("solver", ["cbc", "highs"])
def test_warm_start_keeps_optimum(data_dir, solver):
    """Warm-starting from the §3.1 Megatron plan still ends at the proven optimum."""
    instance = load_instance(data_dir / "worked_example.json")
    hint = Plan(IntraConfig(), 1, 0, 2, uniform_stages(2, 2))
    result = solve(instance, "milp", _options(Space.FULL, solver, hint=hint))
    assert result.status is Status.OPTIMAL
    assert result.objective_ticks == WORKED_OPTIMUM_TICKS


@pytest.mark.parametrize("solver", ["cbc", "highs"])
def test_memory_infeasible_instance_is_infeasible(solver):
    """With HBM below one layer's weights and optimizer state, the MILP reports INFEASIBLE."""
    result = solve(random_instance(0, hbm_bytes=10**9), "milp", _options(Space.FULL, solver))
    assert result.status is Status.INFEASIBLE and result.plan is None


def test_time_limited_run_is_never_optimal():
    """On 12 layers and 64 devices, a 2 s HiGHS run stops FEASIBLE with bound < objective."""
    instance = random_instance(1, num_layers=12, tier_sizes=(8, 8), global_batch=128,
                               comm_scale=100, configs=(IntraConfig(), IntraConfig(2, 1)))
    hint = Plan(IntraConfig(), 1, 0, 16, uniform_stages(12, 4, "full"))
    result = solve(instance, "milp", _options(Space.FULL, "highs", time_limit_s=2.0, hint=hint))
    assert result.status is Status.FEASIBLE
    assert result.bound_ticks is not None and result.bound_ticks < result.objective_ticks


def test_cbc_proves_an_optimum_that_sits_on_a_term_upper_bound():
    """One layer, 3 devices, only d = 3 with ZeRO-2 fits: the optimum puts the sync term
    exactly at its largest value, where CBC's preprocessing once declared the feasible model
    infeasible (a review reproducer); the MILP must agree with the brute-force oracle."""
    from nest_cp.model.instance import (
        Cluster,
        HierarchicalNetwork,
        Instance,
        Layer,
        LayerProfile,
        Tier,
        TrainingSetup,
        Workload,
    )

    profile = LayerProfile(fwd_s=0.003, bwd_s=0.009, dense_params=250_000_000,
                           expert_params=1_000_000_000, act_bytes=8_000_000_000,
                           ckpt_bytes=100_000, out_bytes=100_000)
    workload = Workload("one-layer", (Layer("l0", {(IntraConfig(), 1): profile}),))
    network = HierarchicalNetwork((Tier("t0", 2, 1e11, 1e-6), Tier("t1", 1, 1e9, 1e-5),
                                   Tier("t2", 2, 1e9, 0.0)))
    instance = Instance(workload, Cluster(3, 17 * 10**9, network),
                        TrainingSetup(global_batch=8, seq_len=1, zero_stages=(2,)))
    oracle = solve(instance, "brute", SolveOptions(space=Space.FULL))
    for space in (Space.STRUCTURED, Space.FULL):
        result = solve(instance, "milp", SolveOptions(space=space, milp_solver="cbc"))
        assert (result.status, result.objective_ticks) == (Status.OPTIMAL,
                                                           oracle.objective_ticks)


def test_memory_within_the_milp_tolerance_is_told_apart_from_a_model_bug(data_dir):
    """With v > 1 memory is a MILP constraint, which holds only within the solver's
    tolerance: a plan one byte over is in that band (the sub-problem stays open), a plan 10%
    over is outside it (the driver raises ModelMismatch)."""
    import dataclasses

    from nest_cp.cost.evaluate import evaluate
    from nest_cp.solvers.exact.driver import _over_memory_within

    instance = load_instance(data_dir / "worked_example.json")
    plan = Plan(IntraConfig(), 1, 0, 2, uniform_stages(2, 2))
    memory = max(stage.memory_bytes for stage in evaluate(instance, plan).stages)
    for hbm, within in ((memory - 1, True), (memory * 9 // 10, False)):
        cluster = dataclasses.replace(instance.cluster, hbm_bytes=hbm)
        evaluation = evaluate(dataclasses.replace(instance, cluster=cluster), plan)
        assert not evaluation.feasible
        assert _over_memory_within(evaluation, MilpAdapter.objective_tolerance_rel) is within
