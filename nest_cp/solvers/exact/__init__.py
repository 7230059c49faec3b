"""Exact backends: one model per sub-problem, solved by CP-SAT or a MILP (DESIGN §4–§5).

``nest_cp.solvers.cpsat.solve`` and ``nest_cp.solvers.milp.solve`` are the registry entry points;
this package holds what they share: sub-problem enumeration and bounds
(subproblems, bounds), exact integer prices (pricing), rank groups (groups),
full and structured placement (placement), the one model skeleton (skeleton) and
its cost and memory families (terms), the two solver adapters (adapters), the
clock (budget) and the search that combines statuses (driver).
"""

from nest_cp.solvers.exact.driver import solve_exact
from nest_cp.solvers.exact.placement import canonical_placement
from nest_cp.solvers.exact.subproblems import (
    ChunkOption,
    Shape,
    SubProblem,
    build_subproblem,
    enumerate_subproblems,
    shapes_by_bound,
)

__all__ = ["ChunkOption", "Shape", "SubProblem", "build_subproblem", "canonical_placement",
           "enumerate_subproblems", "shapes_by_bound", "solve_exact"]
