"""The exact search: one model per sub-problem, pruned by bound, statuses combined.

Why this stays exact.  Every plan belongs to exactly one sub-problem (c, b, S, d,
z); each model is exact for its sub-problem (nest_cp.exact.skeleton); so the
minimum over sub-problems is the optimum.  Sub-problems are visited in order of
their compute bound (nest_cp.exact.subproblems); once that bound reaches the
incumbent, the sub-problem and all later ones hold no better plan and are
pruned.  Just before a model is built, the sharper bound with the cheapest
possible communication (nest_cp.exact.bounds) may prune it too.  Every model
carries the cutoff objective <= incumbent − 1, so a solver's INFEASIBLE there
means "nothing better here", as good as a proof for that sub-problem.

How statuses combine.  A sub-problem is *resolved* when its solver proved
OPTIMAL or INFEASIBLE (with or without cutoff) or it was pruned.  The result is
OPTIMAL iff every sub-problem is resolved and a plan exists; INFEASIBLE iff every
sub-problem is resolved and none has a plan (then no cutoff was ever active);
otherwise FEASIBLE with a plan, UNKNOWN without.  The bound is the minimum over
sub-problems of what is proven about each: the incumbent for resolved ones, the
solver's bound (at least the communication bound) for those stopped by the
limit, and the compute bound for those never reached.  The time limit is global:
each model gets what is left of it.

Every plan a solver returns is re-evaluated with nest_cp.evaluate; the result
carries the evaluator's objective.  When CP-SAT (exact integers) proves a
sub-problem optimal and the evaluator disagrees with its objective, that is a
modelling bug and raises ModelMismatch instead of being passed on.

The MILP solves in floating point and PuLP reads CBC's values back to about 8
digits, so its optimality holds within ``objective_tolerance_rel`` (1e-7 relative),
and two of its answers are not taken as proofs: an "optimal" objective further than
that from the evaluator's keeps the plan but leaves the sub-problem open, bounded by
the solver's number less its tolerance; and INFEASIBLE without a cutoff (every
sub-problem model is feasible by construction, memory being settled before the model
is built) is a numerical failure, so the sub-problem stays open too.  The time limit
covers building models: a sub-problem whose model is built after the deadline stays
open.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from nest_cp.errors import ModelMismatch
from nest_cp.evaluate import evaluate
from nest_cp.exact.adapters import RawStatus
from nest_cp.exact.bounds import communication_lower_bound
from nest_cp.exact.pricing import StagePricing
from nest_cp.exact.skeleton import build_model, extract_plan, hint_model
from nest_cp.exact.subproblems import SubProblem, enumerate_subproblems
from nest_cp.model import Instance
from nest_cp.network import NetworkModel
from nest_cp.plan import MEGATRON_LAYOUT, Plan, all_layouts
from nest_cp.progress import Progress, ticks_text
from nest_cp.result import SolveResult, Space, Status

logger = logging.getLogger(__name__)

FIRST_PASS_SHARE = 0.1  # fraction of the time limit one sub-problem may take in pass 1


@dataclass(slots=True)
class _Search:
    """Incumbent and proof state across sub-problems."""

    best_plan: Plan | None = None
    best_ticks: int | None = None
    open_bounds: list = field(default_factory=list)  # bounds of sub-problems not resolved
    solver_runs: int = 0  # models solved (a sub-problem may be solved in both passes)
    pruned: int = 0

    def offer(self, plan: Plan, ticks: int) -> None:
        if self.best_ticks is None or ticks < self.best_ticks:
            self.best_plan, self.best_ticks = plan, ticks


def solve_exact(instance: Instance, options, backend: str,
                make_adapter: Callable[[], object]) -> SolveResult:
    """Solve ``instance`` exactly in ``options.space`` with the adapter's solver.

    Two passes: first every sub-problem gets at most FIRST_PASS_SHARE of the limit,
    so one hard sub-problem cannot starve the others of an incumbent; then the
    unresolved ones, best bound first, share what is left.
    """
    start = time.monotonic()
    run = _Run(instance, options, NetworkModel(instance.cluster), make_adapter,
               deadline=start + options.time_limit_s)
    _offer_hint(instance, options.space, run.hint, run.network, run.search)
    pending = [(sub, sub.lower_bound_ticks) for sub in enumerate_subproblems(instance)
               if sub.feasible]  # no memory-feasible split: resolved without a model
    for label, cap_s in ((f"{backend} pass 1", options.time_limit_s * FIRST_PASS_SHARE),
                         (f"{backend} pass 2", math.inf)):
        if not pending:
            break
        with Progress(label, len(pending), show_bar=options.progress,
                      logger=logger) as progress:
            pending = run.sweep(sorted(pending, key=lambda item: item[1]) if cap_s == math.inf
                                else pending, cap_s, progress)
    run.search.open_bounds = [bound for _, bound in pending]
    return _result(backend, options.space, run.search, time.monotonic() - start)


class _Run:
    """One exact search: the instance, options, incumbent and the global deadline."""

    def __init__(self, instance: Instance, options, network: NetworkModel, make_adapter,
                 deadline: float):
        self.instance, self.options, self.network = instance, options, network
        self.make_adapter, self.deadline = make_adapter, deadline
        self.hint = _placed(options.hint, network)
        self.search = _Search()
        self._sharp_bounds: dict[str, float] = {}  # sub-problem label -> communication bound

    def sweep(self, pending: list, cap_s: float, progress: Progress) -> list:
        """Solve each (sub-problem, bound) with at most ``cap_s``; return those unresolved.

        ``progress`` advances once per sub-problem with the incumbent and the bound
        proven so far: the least of the incumbent, the bounds of sub-problems left
        open and those of sub-problems not reached yet.
        """
        unresolved = []
        for index, (sub, known_bound) in enumerate(pending):
            still_open = self._visit(sub, known_bound, cap_s)
            if still_open is not None:
                unresolved.append((sub, still_open))
            if progress.active:
                best = self.search.best_ticks
                bound = min([b for _, b in pending[index + 1:]] + [b for _, b in unresolved]
                            + ([best] if best is not None else []), default=None)
                progress.advance(status=f"best {ticks_text(best)}, "
                                        f"bound {ticks_text(bound)} ticks")
        return unresolved

    def _visit(self, sub: SubProblem, known_bound: float, cap_s: float) -> float | None:
        """Prune or solve one sub-problem; None when resolved, else the bound it keeps."""
        best = self.search.best_ticks
        if best is not None and known_bound >= best:
            self.search.pruned += 1
            return None
        remaining = self.deadline - time.monotonic()
        if remaining <= 0:
            return known_bound
        bound = max(known_bound, self._sharp_bound(sub))
        if best is not None and bound >= best:
            self.search.pruned += 1
            return None
        proven = _solve_subproblem(self.instance, self.options, self.hint, self.network,
                                   sub, time.monotonic() + min(remaining, cap_s),
                                   self.make_adapter, self.search)
        return None if proven is None else max(proven, bound)

    def _sharp_bound(self, sub: SubProblem) -> float:
        if sub.label not in self._sharp_bounds:
            self._sharp_bounds[sub.label] = communication_lower_bound(
                sub, StagePricing(self.instance, sub), self.network)
        return self._sharp_bounds[sub.label]


def _solve_subproblem(instance, options, hint: Plan | None, network, sub: SubProblem,
                      deadline: float, make_adapter, search: _Search) -> float | None:
    """Solve one sub-problem by ``deadline``; None when resolved, else its proven bound."""
    adapter = make_adapter()
    cutoff = search.best_ticks
    handles = build_model(adapter, instance, sub, network, options.space, cutoff)
    if hint is not None and sub.matches(hint) and (
            options.space is Space.FULL or handles.placement.contains(hint.placement)):
        hint_model(adapter, handles, hint)
    time_left = deadline - time.monotonic()
    if time_left <= 0:  # building the model used up the time
        return -math.inf
    outcome = adapter.solve(time_left, options.seed, options.workers)
    search.solver_runs += 1
    logger.debug("%s: %s objective=%s bound=%s", sub.label, outcome.status.value,
                 outcome.objective, outcome.bound)
    floating = adapter.objective_tolerance_rel > 0
    if outcome.status in (RawStatus.OPTIMAL, RawStatus.FEASIBLE):
        plan = extract_plan(handles, adapter.value)
        evaluation = evaluate(instance, plan, network)
        if not evaluation.feasible:
            raise ModelMismatch(f"{sub.label}: solver plan infeasible: "
                                f"{evaluation.violations[0]}")
        search.offer(plan, evaluation.objective_ticks)
        band = adapter.objective_tolerance_rel * abs(outcome.objective) + 0.5
        if outcome.status is RawStatus.OPTIMAL and \
                abs(evaluation.objective_ticks - outcome.objective) > band:
            if not floating:
                raise ModelMismatch(f"{sub.label}: solver proved {outcome.objective} ticks, "
                                    f"evaluator says {evaluation.objective_ticks}")
            logger.warning("%s: MILP objective %s differs from the plan's %d ticks; the "
                           "sub-problem stays open", sub.label, outcome.objective,
                           evaluation.objective_ticks)
            return min(evaluation.objective_ticks, _floating_bound(adapter, outcome.objective))
    if outcome.status is RawStatus.INFEASIBLE and floating and cutoff is None:
        logger.warning("%s: MILP reports a feasible-by-construction model infeasible; the "
                       "sub-problem stays open", sub.label)
        return -math.inf
    if outcome.status in (RawStatus.OPTIMAL, RawStatus.INFEASIBLE):
        return None
    if outcome.bound is None:
        return -math.inf
    return _floating_bound(adapter, outcome.bound)


def _floating_bound(adapter, value: float) -> int:
    """The integer bound a solver's number proves, less the adapter's tolerance."""
    return math.ceil(value * (1 - adapter.objective_tolerance_rel) - 1e-6)


def _placed(hint: Plan | None, network: NetworkModel) -> Plan | None:
    """The hint with an explicit placement (the evaluator's default layout when it has none)."""
    if hint is None or hint.placement is not None or \
            hint.num_devices_used > network.num_devices:
        return hint
    return hint.with_placement(MEGATRON_LAYOUT.placement(
        hint.config, hint.num_stages, hint.num_replicas, network.canonical_order()))


def _offer_hint(instance: Instance, space: Space, hint: Plan | None, network: NetworkModel,
                search: _Search) -> None:
    """A feasible hint inside the searched space starts the incumbent (exact: it is a plan)."""
    if hint is None or (space is Space.STRUCTURED and not _is_structured(hint, network)):
        return
    evaluation = evaluate(instance, hint, network)
    if evaluation.feasible:
        search.offer(hint, evaluation.objective_ticks)


def _is_structured(plan: Plan, network: NetworkModel) -> bool:
    order = network.canonical_order()
    return any(layout.placement(plan.config, plan.num_stages, plan.num_replicas, order)
               == plan.placement for layout in all_layouts())


def _result(backend: str, space: Space, search: _Search, wall_time_s: float) -> SolveResult:
    stats = {"solver_runs": search.solver_runs, "subproblems_pruned": search.pruned,
             "subproblems_open": len(search.open_bounds)}
    if not search.open_bounds:
        if search.best_plan is None:
            return SolveResult(backend, Status.INFEASIBLE, wall_time_s=wall_time_s, space=space,
                               message="no plan fits in memory", stats=stats)
        return SolveResult(backend, Status.OPTIMAL, search.best_plan, search.best_ticks,
                           search.best_ticks, wall_time_s, space, stats=stats)
    bound = min(search.open_bounds)
    if search.best_plan is None:
        return SolveResult(backend, Status.UNKNOWN, bound_ticks=_int_or_none(bound),
                           wall_time_s=wall_time_s, space=space, message="time limit",
                           stats=stats)
    bound = min(bound, search.best_ticks)
    return SolveResult(backend, Status.FEASIBLE, search.best_plan, search.best_ticks,
                       _int_or_none(bound), wall_time_s, space, message="time limit",
                       stats=stats)


def _int_or_none(value) -> int | None:
    return int(value) if math.isfinite(value) else None
