"""The backend registry: one entry point, one result record, one referee.

``solve(instance, backend, options)`` runs a backend and checks the plan it
returns with the plan evaluator: the plan must fit and evaluate to exactly the
objective the backend reports, or :class:`InvalidPlan` is raised (a backend
bug, never silently passed on).  Backends are imported lazily by name so each
lives in its own module and a missing optional solver fails only its backend.

An instance whose launcher cannot build its model (``launchers.search.model_problem``:
torchtitan builds only the models it ships) admits no plan at all; every backend's answer
is then INFEASIBLE with that reason, given here before any search.
"""

from __future__ import annotations

import dataclasses
import importlib
import logging
import time
from collections.abc import Callable

from nest_cp.cost.evaluate import Evaluation, evaluate
from nest_cp.model.errors import BackendOptionError, InvalidPlan
from nest_cp.model.instance import Instance, Strategy
from nest_cp.model.launchers.search import model_problem, one_recompute_mode
from nest_cp.model.result import CUTOFF_TICKS, SolveOptions, SolveResult, Status

# name -> "module:function"; each function has the signature (Instance, SolveOptions) -> SolveResult
BACKENDS: dict[str, str] = {
    "dp": "nest_cp.dp.planner:solve",
    "brute": "nest_cp.solvers.brute:solve",
    "cpsat": "nest_cp.solvers.cpsat:solve",
    "milp": "nest_cp.solvers.milp:solve",
    "manual": "nest_cp.solvers.baselines:solve_manual",
    "phaze": "nest_cp.solvers.baselines:solve_phaze",
    "mcmc": "nest_cp.solvers.baselines:solve_mcmc",
    "fixed": "nest_cp.solvers.baselines:solve_fixed",
}


# The SDP search (DESIGN §7) of the backends that search SDP plans, same signature.  On an
# instance allowing "sdp" the registry runs it beside the plain search and attaches its
# result as ``SolveResult.sdp``; the other backends search plain plans only.
SDP_BACKENDS: dict[str, str] = {
    "dp": "nest_cp.dp.sdp:solve_sdp",
    "brute": "nest_cp.solvers.brute_sdp:solve",
    "cpsat": "nest_cp.solvers.exact.sdp_driver:solve_cpsat",
    "milp": "nest_cp.solvers.exact.sdp_driver:solve_milp",
}


# The options each backend honours: SolveOptions fields and ``extra`` keys.  Anything else
# given to it would be silently ignored, so the command line refuses it (exit 2).
# ``rank_by`` (which of the best plain and the best SDP plan is reported first) applies to
# the backends that search SDP plans.
HONOURED_OPTIONS: dict[str, frozenset[str]] = {
    "dp": frozenset({"rank_by", "time_limit_s"}),  # time_limit_s with extra "stop_after_s"
    "brute": frozenset({"space", "max_placements", "rank_by"}),
    "cpsat": frozenset({"space", "time_limit_s", "seed", "workers", "hint", "rank_by",
                        "work_limit"}),
    "milp": frozenset({"space", "time_limit_s", "seed", "workers", "hint", "milp_solver",
                       "rank_by", "work_limit"}),
    "manual": frozenset(),
    "phaze": frozenset({"flat_bandwidth_Bps", "flat_latency_s"}),
    "mcmc": frozenset({"time_limit_s", "seed", "budget", "chains"}),
    "fixed": frozenset({"degrees", "microbatch", "zero", "virtual_stages", "recompute"}),
}


# The backends that search context parallelism (c > 1, cost model v4): the exact ones, and
# the baselines whose systems express it (manual: Megatron-LM's --context-parallel-size;
# fixed: the user's c; mcmc: FlexFlow's SOAP space splits a sample's sequence dimension).
# phaze searches the instance restricted to c = 1 (:func:`_context_restricted`; Phaze and
# Piper search tensor, pipeline and data parallelism only, docs/baselines.md): its plans are
# plans of the whole instance, but it says nothing about the plans with c > 1.
# ``verify --certify-full`` bounds every c too (nest_cp.solvers.certify).
CONTEXT_BACKENDS = frozenset({"brute", "dp", "cpsat", "milp", "manual", "fixed", "mcmc"})

LOGGER = logging.getLogger(__name__)


# The backends that give every stage one recompute mode themselves under a launcher (the
# baselines choose the mode by their own rule); the registry searches the others one
# recompute mode at a time (:func:`one_mode_instances`).
ONE_MODE_BACKENDS = frozenset({"manual", "mcmc", "fixed"})


def backend_function(name: str, registry: dict[str, str] = BACKENDS
                     ) -> Callable[[Instance, SolveOptions], SolveResult]:
    if name not in registry:
        raise ValueError(f"expected a backend among {', '.join(registry)}, got {name!r}")
    module_name, function_name = registry[name].split(":")
    return getattr(importlib.import_module(module_name), function_name)


def solve(instance: Instance, backend: str, options: SolveOptions | None = None) -> SolveResult:
    """Run ``backend`` on ``instance`` and certify its plan(s) with the evaluator."""
    result = run_unrefereed(instance, backend, options)
    check_result(instance, result)
    return result


def run_unrefereed(instance: Instance, backend: str,
                   options: SolveOptions | None = None) -> SolveResult:
    """:func:`solve` without the referee's check, for timing the two apart (benchmarks);
    anything that uses the result calls :func:`check_result` on it."""
    options = options or SolveOptions()
    backend_function(backend)  # an unknown name is refused even where nothing is searched
    unbuilt = model_problem(instance.training.launcher, instance.search_facts)
    if unbuilt is not None:  # the launcher admits no shape: the space is empty
        return SolveResult(backend, Status.INFEASIBLE, space=options.space,
                           message=f"no plan: {unbuilt}")
    if backend not in CONTEXT_BACKENDS and allows_context(instance):
        return _context_restricted(instance, backend, options)
    if one_recompute_mode(instance.training.launcher) and backend not in ONE_MODE_BACKENDS \
            and len(instance.training.recompute_modes) > 1:
        return _solve_per_mode(instance, backend, options)
    return _solve_strategies(instance, backend, options)


def context_note(instance: Instance, backend: str) -> str | None:
    """The one line saying ``backend`` searched c = 1 only of the instance's widths, or None
    when it searches every width the instance allows."""
    if backend in CONTEXT_BACKENDS or not allows_context(instance):
        return None
    return (f"the {backend} backend searches no context parallelism, as the system it "
            f"reproduces has none (searched c = 1 only of the allowed "
            f"{list(instance.training.context_parallel)})")


def allows_context(instance: Instance) -> bool:
    """Whether some plan of the instance may use a context width c > 1."""
    return any(config.cp > 1 for config, _ in instance.choices)


def _context_restricted(instance: Instance, backend: str,
                        options: SolveOptions) -> SolveResult:
    """``backend`` (which does not search context parallelism) on the instance restricted
    to c = 1, with the result weakened to what that search proves about the whole instance.

    Its plan is a plan of the instance (the evaluator prices it on the instance itself),
    but plans with c > 1 were not searched: OPTIMAL becomes FEASIBLE and the bound is
    dropped; INFEASIBLE becomes UNKNOWN.  The SDP search is kept as it is (SDP plans keep
    c = 1).  Without c = 1 among the allowed widths nothing can be searched: refused.
    """
    widths = list(instance.training.context_parallel)
    if 1 not in widths or not any(config.cp == 1 for config in instance.workload.configs):
        raise BackendOptionError(
            f"expected c = 1 among training.context_parallel, and profiles for it, for "
            f"--backend {backend}, which searches no context parallelism, got "
            f"{widths}; use --backend {', '.join(sorted(CONTEXT_BACKENDS))} or price plans "
            f"with evaluate", option="backend")
    restricted = dataclasses.replace(instance, training=dataclasses.replace(
        instance.training, context_parallel=(1,)))
    note = context_note(instance, backend)
    LOGGER.info(note)  # the message carries it to the caller (the command line prints it)
    result = run_unrefereed(restricted, backend, options)
    status = {Status.OPTIMAL: Status.FEASIBLE, Status.INFEASIBLE: Status.UNKNOWN}.get(
        result.status, result.status)
    return dataclasses.replace(result, status=status, bound_ticks=None,
                               message="; ".join(filter(None, (note, result.message))))


def one_mode_instances(instance: Instance) -> list[Instance]:
    """The instance once per allowed recompute mode, each allowing only that mode.

    A launcher applies one recompute setting to every stage (launchers.search), so its
    space is the union of these instances' spaces: the best of their optima is the optimum
    and the least of their bounds a bound.
    """
    training = instance.training
    return [dataclasses.replace(instance, training=dataclasses.replace(
        training, recompute_modes=(mode,))) for mode in training.recompute_modes]


def _solve_per_mode(instance: Instance, backend: str, options: SolveOptions) -> SolveResult:
    """The search under one recompute mode at a time, merged (:func:`merge_parts`); each part
    gets an equal share of the time still left, so the limit bounds the whole solve.

    The DP searches each part below the best objective of the parts before it
    (``CUTOFF_TICKS``, :func:`nest_cp.dp.planner.solve`): a plan of a later part that does
    not beat it would lose the merge's tie to the earlier one, so the merged plan is the
    same, and the later part's bound still bounds its space (plain plans only: an instance
    allowing SDP is searched without it)."""
    started = time.monotonic()
    parts = []
    restricted = one_mode_instances(instance)
    cuts = backend == "dp" and Strategy.SDP not in instance.training.strategies
    for index, part in enumerate(restricted):
        left = options.time_limit_s - (time.monotonic() - started)
        share = max(left / (len(restricted) - index), MIN_SDP_TIME_S)
        hint = options.hint
        if hint is not None and any(stage.recompute not in part.training.recompute_modes
                                    for stage in hint.stages):
            hint = None  # a hint of another mode is no plan of this part
        extra = options.extra
        found = [earlier.objective_ticks for earlier in parts if earlier.plan is not None]
        if cuts and found:
            extra = {**extra, CUTOFF_TICKS: min(found)}
        parts.append(_solve_strategies(part, backend, dataclasses.replace(
            options, time_limit_s=share, hint=hint, extra=extra)))
    labels = [part.training.recompute_modes[0].value for part in restricted]
    return merge_parts(backend, parts, labels, time.monotonic() - started)


def merge_parts(backend: str, parts: list[SolveResult], labels: list[str],
                wall_time_s: float) -> SolveResult:
    """One result over a union of disjoint spaces searched apart (``labels`` name them).

    The plan is the best found (the earliest part's on a tie); the bound the least of the
    parts' bounds (an infeasible part bounds nothing below +inf; a part without a bound
    leaves the union without one). The union is OPTIMAL when every part is OPTIMAL or
    INFEASIBLE, or when the bound reaches the best plan's objective (a part stopped or cut
    off, :func:`_solve_per_mode`, whose bound is no lower: no plan of it is better),
    INFEASIBLE when every part is, else FEASIBLE with a plan or UNKNOWN without.
    """
    found = [part for part in parts if part.plan is not None]
    best = min(found, key=lambda part: part.objective_ticks, default=None)
    proven = [part.bound_ticks for part in parts if part.status is not Status.INFEASIBLE]
    bound = None if None in proven else min(proven, default=None)
    settled = all(part.status in (Status.OPTIMAL, Status.INFEASIBLE) for part in parts)
    if best is None:
        status = Status.INFEASIBLE if all(part.status is Status.INFEASIBLE
                                          for part in parts) else Status.UNKNOWN
    else:
        proven = bound is not None and bound >= best.objective_ticks
        status = Status.OPTIMAL if settled or proven else Status.FEASIBLE
    if best is not None and bound is not None:
        bound = min(bound, best.objective_ticks)
    message = "; ".join(f"{label}: {part.message}" for label, part in
                        zip(labels, parts, strict=True) if part.message)
    return SolveResult(
        backend, status, plan=None if best is None else best.plan,
        objective_ticks=None if best is None else best.objective_ticks,
        bound_ticks=bound, wall_time_s=wall_time_s, space=parts[0].space,
        message=message, tolerance_rel=max(part.tolerance_rel for part in parts),
        stats={"per_recompute_mode": {label: {"status": part.status.value, **part.stats}
                                      for label, part in zip(labels, parts, strict=True)}})


def _solve_strategies(instance: Instance, backend: str, options: SolveOptions) -> SolveResult:
    """The plain search, and beside it the SDP search when the instance allows SDP.

    The result is the plain search's, with the SDP search's attached as ``sdp``; on an
    instance allowing only SDP the plain one is INFEASIBLE (no plain plan is allowed).
    With both strategies the plain search gets half the time limit and the SDP search
    whatever is left, so the limit bounds the whole solve.
    """
    strategies = instance.training.strategies
    if Strategy.SDP not in strategies:
        return backend_function(backend)(instance, options)
    if backend not in SDP_BACKENDS:
        if Strategy.DP not in strategies:
            raise BackendOptionError(
                f"expected a backend that searches SDP plans ({', '.join(SDP_BACKENDS)}) for "
                f"an instance allowing only 'sdp', got --backend {backend}")
        return backend_function(backend)(instance, options)
    started = time.monotonic()
    if Strategy.DP in strategies:
        plain = backend_function(backend)(instance, dataclasses.replace(
            options, time_limit_s=options.time_limit_s / 2))
    else:
        plain = SolveResult(backend, Status.INFEASIBLE, space=options.space,
                            message="no plan fits: plain data parallelism is not allowed "
                                    "(training.strategies)")
    left = max(options.time_limit_s - (time.monotonic() - started), MIN_SDP_TIME_S)
    found = backend_function(backend, SDP_BACKENDS)(
        instance, dataclasses.replace(options, time_limit_s=left))
    return dataclasses.replace(plain, sdp=found)


MIN_SDP_TIME_S = 0.01  # what the SDP search still gets when the plain one used the limit up


def check_result(instance: Instance, result: SolveResult) -> Evaluation | None:
    """Raise InvalidPlan unless every plan of the result (the plain one and the SDP one)
    fits and evaluates to its objective (and an SDP plan to its T_eff); the plain plan's
    evaluation (None without one), for a caller that reports it."""
    evaluation = _check_one(instance, result, Strategy.DP)
    if result.sdp is not None:
        _check_one(instance, result.sdp, Strategy.SDP)
    return evaluation


def _check_one(instance: Instance, result: SolveResult, strategy: Strategy
               ) -> Evaluation | None:
    if result.plan is not None and result.plan.strategy is not strategy:
        raise InvalidPlan(f"{result.backend}: returned a {result.plan.strategy.value!r} plan "
                          f"where a {strategy.value!r} plan was expected")
    if result.plan is None:
        if result.status in (Status.OPTIMAL, Status.FEASIBLE):
            raise InvalidPlan(f"{result.backend}: status {result.status.value} without a plan")
        return None
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
    if result.effective is not None and result.effective != evaluation.effective:
        raise InvalidPlan(f"{result.backend}: reported T_eff {result.effective} but the plan "
                          f"evaluates to {evaluation.effective}")
    if result.effective_bound is not None and result.effective is not None and \
            result.effective_bound > result.effective:
        raise InvalidPlan(f"{result.backend}: T_eff bound {result.effective_bound} above "
                          f"T_eff {result.effective}")
    return evaluation
