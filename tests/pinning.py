"""Test helper: the objective an exact model gives a plan pinned into it."""

from __future__ import annotations

from ortools.sat.python import cp_model

from nest_cp.solvers.exact.adapters import CpSatAdapter
from nest_cp.solvers.exact.skeleton import build_model, hint_model


def pinned_cpsat(instance, sub, network, space, plan) -> int | None:
    """CP-SAT's objective of ``sub``'s model with every variable fixed to ``plan`` (None when
    the model refuses the plan)."""
    adapter = CpSatAdapter()
    handles = build_model(adapter, instance, sub, network, space, None)
    hint_model(adapter, handles, plan)
    solver = cp_model.CpSolver()
    solver.parameters.fix_variables_to_their_hinted_value = True
    solver.parameters.num_workers = 1
    solver.parameters.random_seed = 0
    status = solver.solve(adapter.model)
    if status == cp_model.INFEASIBLE:
        return None
    assert status == cp_model.OPTIMAL
    return round(solver.objective_value)
