"""The ``milp`` backend: the exact model of nest_cp.solvers.exact as a MILP (PuLP; CBC or HiGHS)."""

from __future__ import annotations

from nest_cp.model.instance import Instance
from nest_cp.model.result import SolveOptions, SolveResult
from nest_cp.solvers.exact.adapters import MilpAdapter
from nest_cp.solvers.exact.driver import solve_exact


def solve(instance: Instance, options: SolveOptions) -> SolveResult:
    """Optimal plan of ``options.space``; ``options.milp_solver`` picks CBC or HiGHS."""
    return solve_exact(instance, options, "milp", lambda: MilpAdapter(options.milp_solver))
