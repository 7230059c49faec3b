"""The ``cpsat`` backend: the exact model of nest_cp.solvers.exact solved by OR-Tools CP-SAT."""

from __future__ import annotations

from nest_cp.model.instance import Instance
from nest_cp.model.result import SolveOptions, SolveResult
from nest_cp.solvers.exact.adapters import CpSatAdapter
from nest_cp.solvers.exact.driver import solve_exact


def solve(instance: Instance, options: SolveOptions) -> SolveResult:
    """Optimal plan of ``options.space`` (full or structured), proven by CP-SAT when time allows."""
    return solve_exact(instance, options, "cpsat", CpSatAdapter)
