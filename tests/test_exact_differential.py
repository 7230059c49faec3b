"""Differential tests: CP-SAT == MILP == brute (full space), CP-SAT == MILP == DP (structured).

Seeded random tiny instances; objectives are compared, never plans.  Every
result also passes nest_cp.backends.check_result (solve() referees it).
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nest_cp.backends import SolveOptions, solve
from nest_cp.generators import latency_trap_instance, random_instance
from nest_cp.model import IntraConfig
from nest_cp.result import Space, Status

pytest.importorskip("nest_cp.brute", reason="the shared brute-force oracle is not available")

WIDE_CONFIGS = (IntraConfig(), IntraConfig(2, 1), IntraConfig(1, 2))

# name -> keyword arguments of random_instance; tiny enough for the brute-force oracle (N <= 5)
FULL_KINDS = {
    "two-tier": dict(tier_sizes=(2, 2)),
    "three-tier": dict(tier_sizes=(2, 1, 2), comm_scale=30),
    "graph": dict(tier_sizes=(2, 2), graph=True, comm_scale=30),
    "memory-tight": dict(tier_sizes=(2, 2), hbm_bytes=16 * 10**9, comm_scale=10),
    "partial-domains": dict(tier_sizes=(2, 2, 2), num_devices=5, comm_scale=50,
                            configs=(IntraConfig(), IntraConfig(2, 1))),
    "tp-ep-zero": dict(tier_sizes=(2, 2), configs=WIDE_CONFIGS, zero_stages=(0, 3),
                       comm_scale=10),
}

# the structured space is cheap for every backend: N = 8
STRUCTURED_KINDS = {
    "three-tier-8": dict(tier_sizes=(2, 2, 2), num_layers=4, comm_scale=30, global_batch=16),
    "graph-8": dict(tier_sizes=(2, 4), num_layers=4, graph=True, comm_scale=30),
    "tp-ep-zero-8": dict(tier_sizes=(2, 4), num_layers=4, configs=WIDE_CONFIGS,
                         zero_stages=(0, 1, 3), comm_scale=10, global_batch=16),
    "memory-tight-8": dict(tier_sizes=(4, 2), num_layers=5, hbm_bytes=14 * 10**9,
                           comm_scale=10),
}


def _objective(instance, backend: str, space: Space, solver: str = "cbc"):
    options = SolveOptions(space=space, time_limit_s=30.0, seed=0, workers=1,
                           milp_solver=solver)
    result = solve(instance, backend, options)
    assert result.status in (Status.OPTIMAL, Status.INFEASIBLE), result.message
    return result.status, result.objective_ticks


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("kind", sorted(FULL_KINDS))
def test_full_space_cpsat_milp_brute_agree(kind, seed):
    """CP-SAT, MILP (CBC) and brute force find the same full-space optimum (or all INFEASIBLE)."""
    instance = random_instance(seed, **FULL_KINDS[kind])
    brute = _objective(instance, "brute", Space.FULL)
    assert _objective(instance, "cpsat", Space.FULL) == brute
    assert _objective(instance, "milp", Space.FULL) == brute


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("kind", sorted(STRUCTURED_KINDS))
def test_structured_space_cpsat_milp_dp_agree(kind, seed):
    """CP-SAT, MILP (HiGHS) and the DP find the same structured-space optimum."""
    pytest.importorskip("nest_cp.dp.planner", reason="the DP planner is not available")
    instance = random_instance(seed, **STRUCTURED_KINDS[kind])
    dp = _objective(instance, "dp", Space.STRUCTURED)
    assert _objective(instance, "cpsat", Space.STRUCTURED) == dp
    assert _objective(instance, "milp", Space.STRUCTURED, "highs") == dp


@pytest.mark.parametrize("seed", [0, 1])
def test_infeasible_agrees(seed):
    """When no stage fits in memory, every backend and both spaces report INFEASIBLE."""
    instance = random_instance(seed, tier_sizes=(2, 2), hbm_bytes=4 * 10**9)
    expected = (Status.INFEASIBLE, None)
    assert _objective(instance, "brute", Space.FULL) == expected
    for backend in ("cpsat", "milp"):
        for space in (Space.FULL, Space.STRUCTURED):
            assert _objective(instance, backend, space) == expected


def test_latency_trap_structural_gap_agrees_with_oracles():
    """On the latency trap the DP equals structured CP-SAT, brute equals full CP-SAT, gap > 0."""
    pytest.importorskip("nest_cp.dp.planner", reason="the DP planner is not available")
    instance = latency_trap_instance()
    full = _objective(instance, "cpsat", Space.FULL)
    structured = _objective(instance, "cpsat", Space.STRUCTURED)
    assert full == _objective(instance, "brute", Space.FULL)
    assert structured == _objective(instance, "dp", Space.STRUCTURED)
    assert structured[1] > full[1]


@settings(max_examples=8, deadline=None, derandomize=True)
@given(seed=st.integers(0, 10**6), graph=st.booleans(), zero=st.sampled_from([0, 1, 3]))
def test_full_optimum_never_above_structured_optimum(seed, graph, zero):
    """Full space ⊇ structured space: CP-SAT's full optimum ≤ its structured optimum."""
    instance = random_instance(seed, tier_sizes=(2, 4), num_layers=3, graph=graph,
                               zero_stages=(zero,), comm_scale=30)
    full = _objective(instance, "cpsat", Space.FULL)
    structured = _objective(instance, "cpsat", Space.STRUCTURED)
    assert full[0] == structured[0]
    if full[0] is Status.OPTIMAL:
        assert full[1] <= structured[1]
