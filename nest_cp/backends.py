"""The backend registry: one entry point, one result record, one referee.

``solve(instance, backend, options)`` runs a backend and checks the plan it
returns with the plan evaluator: the plan must fit and evaluate to exactly the
objective the backend reports, or :class:`InvalidPlan` is raised (a backend
bug, never silently passed on).  Backends are imported lazily by name so each
lives in its own module and a missing optional solver fails only its backend.
"""

from __future__ import annotations

import importlib
import math
from collections.abc import Callable
from dataclasses import dataclass, field

from nest_cp.errors import BackendOptionError, InvalidPlan
from nest_cp.evaluate import evaluate
from nest_cp.model import Instance
from nest_cp.plan import Plan
from nest_cp.result import SolveResult, Space, Status

# name -> "module:function"; each function has the signature (Instance, SolveOptions) -> SolveResult
BACKENDS: dict[str, str] = {
    "dp": "dp.planner:solve",
    "brute": "nest_cp.brute:solve",
    "cpsat": "nest_cp.cpsat:solve",
    "milp": "nest_cp.milp:solve",
    "manual": "nest_cp.baselines:solve_manual",
    "phaze": "nest_cp.baselines:solve_phaze",
    "mcmc": "nest_cp.baselines:solve_mcmc",
    "fixed": "nest_cp.baselines:solve_fixed",
}


@dataclass(frozen=True, slots=True)
class SolveOptions:
    """Options every backend accepts; a backend ignores those that do not apply to it."""

    space: Space = Space.STRUCTURED
    time_limit_s: float = 60.0
    seed: int = 0
    workers: int = 1
    milp_solver: str = "cbc"          # milp: "cbc" or "highs"
    hint: Plan | None = None          # cpsat hint / milp warm start
    progress: bool = False            # progress bar on stderr for long runs
    extra: dict = field(default_factory=dict)  # backend-specific (budget, flat bandwidth, degrees)

    def __post_init__(self) -> None:
        if not isinstance(self.space, Space):
            raise BackendOptionError(f"expected space 'full' or 'structured', got {self.space!r}")
        if not (math.isfinite(self.time_limit_s) and self.time_limit_s > 0):
            raise BackendOptionError(f"expected a finite time limit > 0 s, got {self.time_limit_s}")
        if self.workers < 1:
            raise BackendOptionError(f"expected workers >= 1, got {self.workers}")
        if self.milp_solver not in ("cbc", "highs"):
            raise BackendOptionError(f"expected milp_solver 'cbc' or 'highs', "
                                     f"got {self.milp_solver!r}")


def backend_function(name: str) -> Callable[[Instance, SolveOptions], SolveResult]:
    if name not in BACKENDS:
        raise ValueError(f"expected a backend among {', '.join(BACKENDS)}, got {name!r}")
    module_name, function_name = BACKENDS[name].split(":")
    return getattr(importlib.import_module(module_name), function_name)


def solve(instance: Instance, backend: str, options: SolveOptions | None = None) -> SolveResult:
    """Run ``backend`` on ``instance`` and certify its plan with the evaluator."""
    options = options or SolveOptions()
    result = backend_function(backend)(instance, options)
    check_result(instance, result)
    return result


def check_result(instance: Instance, result: SolveResult) -> None:
    """Raise InvalidPlan unless the result's plan fits and evaluates to its objective."""
    if result.plan is None:
        if result.status in (Status.OPTIMAL, Status.FEASIBLE):
            raise InvalidPlan(f"{result.backend}: status {result.status.value} without a plan")
        return
    evaluation = evaluate(instance, result.plan)
    if not evaluation.feasible:
        raise InvalidPlan(f"{result.backend}: returned plan is infeasible: "
                          f"{evaluation.violations[0]}")
    if evaluation.objective_ticks != result.objective_ticks:
        raise InvalidPlan(f"{result.backend}: reported objective {result.objective_ticks} ticks "
                          f"but the plan evaluates to {evaluation.objective_ticks}")
    if result.bound_ticks is not None and result.bound_ticks > result.objective_ticks:
        raise InvalidPlan(f"{result.backend}: bound {result.bound_ticks} above objective "
                          f"{result.objective_ticks}")
