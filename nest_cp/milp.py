"""The ``milp`` backend: the exact model of nest_cp.exact as a MILP (PuLP; CBC or HiGHS)."""

from __future__ import annotations

from nest_cp.exact.adapters import MilpAdapter
from nest_cp.exact.driver import solve_exact
from nest_cp.model import Instance
from nest_cp.result import SolveOptions, SolveResult


def solve(instance: Instance, options: SolveOptions) -> SolveResult:
    """Optimal plan of ``options.space``; ``options.milp_solver`` picks CBC or HiGHS."""
    return solve_exact(instance, options, "milp", lambda: MilpAdapter(options.milp_solver))
