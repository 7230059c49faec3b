"""The backend registry: one entry point, one result record, one referee.

``solve(instance, backend, options)`` runs a backend and checks the plan it
returns with the plan evaluator: the plan must fit and evaluate to exactly the
objective the backend reports, or :class:`InvalidPlan` is raised (a backend
bug, never silently passed on).  Backends are imported lazily by name so each
lives in its own module and a missing optional solver fails only its backend.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable

from nest_cp.errors import BackendOptionError, InvalidPlan
from nest_cp.evaluate import evaluate
from nest_cp.model import Instance, RecomputeMode
from nest_cp.result import SolveOptions, SolveResult, Status

# name -> "module:function"; each function has the signature (Instance, SolveOptions) -> SolveResult
BACKENDS: dict[str, str] = {
    "dp": "nest_cp.dp.planner:solve",
    "brute": "nest_cp.brute:solve",
    "cpsat": "nest_cp.cpsat:solve",
    "milp": "nest_cp.milp:solve",
    "manual": "nest_cp.baselines:solve_manual",
    "phaze": "nest_cp.baselines:solve_phaze",
    "mcmc": "nest_cp.baselines:solve_mcmc",
    "fixed": "nest_cp.baselines:solve_fixed",
}


# Backends that search DESIGN §3's choices only (v = 1, recompute none or full, no
# overlapped gradient reduction) until they move to §3.2 (issue 13): on an instance that
# allows more they would call a v1 optimum OPTIMAL, so they refuse it.
V1_ONLY_BACKENDS = ("cpsat", "milp")


# The options each backend honours: SolveOptions fields and ``extra`` keys.  Anything else
# given to it would be silently ignored, so the command line refuses it (exit 2).
HONOURED_OPTIONS: dict[str, frozenset[str]] = {
    "dp": frozenset(),
    "brute": frozenset({"space", "max_placements"}),
    "cpsat": frozenset({"space", "time_limit_s", "seed", "workers", "hint"}),
    "milp": frozenset({"space", "time_limit_s", "seed", "workers", "hint", "milp_solver"}),
    "manual": frozenset(),
    "phaze": frozenset({"flat_bandwidth_Bps", "flat_latency_s"}),
    "mcmc": frozenset({"time_limit_s", "seed", "budget", "chains"}),
    "fixed": frozenset({"degrees", "microbatch", "zero"}),
}


def backend_function(name: str) -> Callable[[Instance, SolveOptions], SolveResult]:
    if name not in BACKENDS:
        raise ValueError(f"expected a backend among {', '.join(BACKENDS)}, got {name!r}")
    module_name, function_name = BACKENDS[name].split(":")
    return getattr(importlib.import_module(module_name), function_name)


def solve(instance: Instance, backend: str, options: SolveOptions | None = None) -> SolveResult:
    """Run ``backend`` on ``instance`` and certify its plan with the evaluator."""
    options = options or SolveOptions()
    if backend in V1_ONLY_BACKENDS:
        _require_v1_choices(instance, backend)
    result = backend_function(backend)(instance, options)
    check_result(instance, result)
    return result


def _require_v1_choices(instance: Instance, backend: str) -> None:
    """BackendOptionError naming the DESIGN §3.2 choices ``backend`` cannot search yet."""
    training = instance.training
    beyond = []
    if set(training.recompute_modes) != {RecomputeMode.NONE, RecomputeMode.FULL} and \
            set(training.recompute_modes) != {RecomputeMode.NONE}:
        beyond.append("recompute " + "/".join(m.value for m in training.recompute_modes))
    if training.virtual_stages != (1,):
        beyond.append(f"virtual_stages {list(training.virtual_stages)}")
    if training.overlap_grad_reduce:
        beyond.append("overlap_grad_reduce")
    if beyond:
        raise BackendOptionError(
            f"expected an instance with recompute none/full, virtual_stages [1] and no "
            f"overlap_grad_reduce for --backend {backend} (it does not search DESIGN §3.2's "
            f"choices yet), got {', '.join(beyond)}; use --backend brute or a baseline")


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
