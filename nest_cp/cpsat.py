"""The ``cpsat`` backend: the exact model of nest_cp.exact solved by OR-Tools CP-SAT."""

from __future__ import annotations

from nest_cp.exact.adapters import CpSatAdapter
from nest_cp.exact.driver import solve_exact
from nest_cp.model import Instance
from nest_cp.result import SolveOptions, SolveResult


def solve(instance: Instance, options: SolveOptions) -> SolveResult:
    """Optimal plan of ``options.space`` (full or structured), proven by CP-SAT when time allows."""
    return solve_exact(instance, options, "cpsat", CpSatAdapter)
