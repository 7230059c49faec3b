"""The cpsat backend: known optima, statuses, hints and the structural gap."""

from __future__ import annotations

import pytest
from ortools.sat.python import cp_model

from nest_cp.cost.evaluate import evaluate
from nest_cp.harness.generators import latency_trap_instance, random_instance
from nest_cp.io.readers import load_instance
from nest_cp.model.errors import InternalError, ModelMismatch
from nest_cp.model.instance import (
    IntraConfig,
)
from nest_cp.model.network import NetworkModel
from nest_cp.model.plan import Plan, uniform_stages
from nest_cp.model.result import Space, Status
from nest_cp.solvers.exact import enumerate_subproblems
from nest_cp.solvers.exact.adapters import CpSatAdapter, MilpAdapter, RawOutcome, RawStatus
from nest_cp.solvers.exact.placement import canonical_placement
from nest_cp.solvers.exact.skeleton import build_model, hint_model
from nest_cp.solvers.registry import SolveOptions, solve

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
    hint = Plan(IntraConfig(), 1, 0, 16, uniform_stages(12, 4, "full"))
    result = solve(instance, "cpsat", _options(Space.FULL, time_limit_s=2.0, hint=hint))
    assert result.status is Status.FEASIBLE
    assert result.bound_ticks is not None and result.bound_ticks < result.objective_ticks


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


def _lying(monkeypatch, adapter_class, status: RawStatus, objective_shift: int,
           bound_shift: int) -> None:
    """Make ``adapter_class`` report ``status`` with its objective and bound shifted."""
    real = adapter_class.solve

    def solve_and_lie(self, time_limit_s, seed, workers, work_limit=None):
        outcome = real(self, time_limit_s, seed, workers, work_limit)
        if outcome.objective is None:
            return outcome
        return RawOutcome(status, outcome.objective + objective_shift,
                          outcome.objective + bound_shift)

    monkeypatch.setattr(adapter_class, "solve", solve_and_lie)


@pytest.mark.parametrize("status, objective_shift, bound_shift, expected", [
    (RawStatus.FEASIBLE, -1, -5, "below the evaluator's"),
    (RawStatus.FEASIBLE, 0, 1, "bound [0-9]+ is above"),
    (RawStatus.OPTIMAL, 1, 1, "proved [0-9]+ ticks optimal"),
])
def test_solver_numbers_that_disagree_with_the_evaluator_are_internal_errors(
        monkeypatch, data_dir, status, objective_shift, bound_shift, expected):
    """The solver's own objective and bound are refereed against the evaluator's price of its
    plan, FEASIBLE included: one tick off is a ModelMismatch (an InternalError, exit 3)."""
    _lying(monkeypatch, CpSatAdapter, status, objective_shift, bound_shift)
    with pytest.raises(ModelMismatch, match=expected) as info:
        solve(load_instance(data_dir / "worked_example.json"), "cpsat", _options(Space.FULL))
    assert isinstance(info.value, InternalError)


def test_milp_objective_outside_its_tolerance_is_an_internal_error(monkeypatch, data_dir):
    """The MILP's objective may differ from the evaluator's by its 1e-7 relative tolerance,
    not by more (27,099,000 ticks allow 3.2 ticks): 100 ticks off is a ModelMismatch."""
    _lying(monkeypatch, MilpAdapter, RawStatus.OPTIMAL, 100, 100)
    with pytest.raises(ModelMismatch):
        solve(load_instance(data_dir / "worked_example.json"), "milp",
              _options(Space.FULL, milp_solver="highs"))


def test_model_invalid_is_an_internal_error(monkeypatch, data_dir):
    """CP-SAT rejecting a model as invalid is nest-cp's bug: an InternalError (exit 3), not a
    RuntimeError and never an answer."""
    monkeypatch.setattr(cp_model.CpSolver, "solve", lambda self, model: cp_model.MODEL_INVALID)
    with pytest.raises(InternalError, match="invalid"):
        solve(load_instance(data_dir / "worked_example.json"), "cpsat", _options(Space.FULL))
