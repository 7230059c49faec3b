"""Exact backends: one model per sub-problem, solved by CP-SAT or a MILP (DESIGN §4–§5)."""

from nest_cp.exact.driver import ModelMismatch, solve_exact
from nest_cp.exact.subproblems import StageOption, SubProblem, enumerate_subproblems

__all__ = ["ModelMismatch", "StageOption", "SubProblem", "enumerate_subproblems", "solve_exact"]
