"""The exact search: one model per sub-problem, pruned by bound, statuses combined.

Why this stays exact.  Every plan belongs to exactly one sub-problem (c, b, S, d,
z, v); each model is exact for its sub-problem (nest_cp.solvers.exact.skeleton: the split
into S·v chunks, the recompute mode per stage, the placement, every term of the
cost model, multi-channel collectives and the two-phase sync included); so the
minimum over sub-problems is the optimum.  Shapes (c, b, S, d, v) come out of
nest_cp.solvers.exact.subproblems.shapes_by_bound lazily, in order of their compute
bound; once that bound reaches the incumbent, the shape and all later ones hold no
better plan and are pruned without ever being built.  A shape's
sub-problems (one per ZeRO stage) are built only when reached; their memory-aware
bound and the sharper bound with communication (nest_cp.solvers.exact.bounds: the
larger of every group on its cheapest path and the per-rank node count of
nest_cp.solvers.exact.rank_bounds) may prune them too.  Every model carries the cutoff
objective <= incumbent − 1, so a solver's INFEASIBLE there means "nothing better
here".

How statuses combine.  A sub-problem is *resolved* when its solver proved
OPTIMAL or INFEASIBLE (with or without cutoff) or it was pruned.  CP-SAT's proofs
count only when a second solve without presolve confirms them
(nest_cp.solvers.cpsat_solver); one it contradicts comes back FEASIBLE with the
lower of the two bounds, and the result is then never OPTIMAL.  The result is
OPTIMAL iff every sub-problem is resolved and a plan exists; INFEASIBLE iff every
sub-problem is resolved and none has a plan (then no cutoff was ever active);
otherwise FEASIBLE with a plan, UNKNOWN without.  The bound is the minimum over
sub-problems of what is proven about each: the incumbent for resolved ones, the
solver's bound (at least the communication bound) for those stopped by the
limit, the compute bound for those built but never solved, and for the shapes
never reached the bound the lazy enumeration would have yielded next (a bound on
all of them, as it yields in non-decreasing order).

The time limit bounds the whole search.  One Deadline (nest_cp.solvers.exact.budget) is
checked while shapes are enumerated, sub-problems built, bounds computed and
models built, and every solver gets only the time left; a step the deadline
interrupts leaves its sub-problem open with the bound known for it.  A model
whose estimated size (skeleton.estimate_terms) cannot be built in the time left
at the rate measured so far is not started.  Two passes: first every sub-problem
gets at most FIRST_PASS_SHARE of the limit, so one hard sub-problem cannot starve
the others of an incumbent; then the unresolved ones, best bound first, share
what is left.

Work limits.  With ``options.work_limit`` the same two passes share work units
(budget.Work) instead of seconds: in pass 1 each sub-problem's solver runs get at most
FIRST_PASS_SHARE of the work limit, in pass 2 what is left; each run is charged the work
its solver counted (never a clock reading), and once the work is spent the sub-problems
and shapes not reached stay open, exactly as with the time limit.  Which sub-problems
are solved and how far is then the same on any machine at any load.  The time limit
remains a wall-clock cap over everything; if it ends a step (an enumeration, a bound, a
model build, a solver run) the result is marked ``wall_capped`` (stats and message):
that result depends on the machine.

The referee.  Every plan a solver returns is re-evaluated with nest_cp.cost.evaluate,
and the solver's own numbers are checked against the evaluator's: its objective
may not be below the plan's price (the model would under-price), an OPTIMAL
objective must equal it, and its bound may not be above it (the bound would cut
off a plan that exists).  Any violation is a model bug and raises ModelMismatch
(an InternalError: exit 3).  CP-SAT is exact, so its comparisons are exact.  The
MILP solves in floating point (and PuLP reads CBC's values back to about 8
digits), so its comparisons allow ``objective_tolerance_rel`` (1e-7 relative);
for the same reason its proofs hold only within that tolerance: a sub-problem it
resolves contributes the bound it proved (less the tolerance), not the
incumbent, and an OPTIMAL (or INFEASIBLE) result says so in
``SolveResult.tolerance_rel``.  With v = 1 every model is feasible by construction
(memory is settled before the model is built), so an INFEASIBLE from the MILP
without a cutoff is a numerical failure: the sub-problem stays open and the
result's message says so.  With v > 1 a stage's memory couples its chunks and is a
model constraint, so a model may truly be infeasible (the MILP's INFEASIBLE is then
a proof within its tolerance), and a MILP plan over memory by less than the
tolerance leaves its sub-problem open with the solver's bound, noted in the message.
"""

from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass, field

from nest_cp.cost.evaluate import evaluate
from nest_cp.model.errors import ModelMismatch
from nest_cp.model.instance import Instance
from nest_cp.model.network import NetworkModel
from nest_cp.model.plan import Plan, contiguous_placement
from nest_cp.model.progress import Progress, ticks_text
from nest_cp.model.result import SolveResult, Space, Status
from nest_cp.solvers.exact.adapters import RawOutcome, RawStatus, check_solver_numbers, proven_bound
from nest_cp.solvers.exact.bounds import communication_lower_bound
from nest_cp.solvers.exact.budget import Deadline, OutOfTime, Work, limit_text, work_stats
from nest_cp.solvers.exact.pricing import ChunkPricing
from nest_cp.solvers.exact.skeleton import build_model, estimate_terms, extract_plan, hint_model
from nest_cp.solvers.exact.subproblems import (
    Shape,
    SubProblem,
    admitted_zeros,
    build_subproblem,
    count_shapes,
    shape_label,
    shapes_by_bound,
)

logger = logging.getLogger(__name__)

FIRST_PASS_SHARE = 0.1  # fraction of the time limit one sub-problem may take in pass 1
ASSUMED_TERMS_PER_S = 50_000  # model-building rate assumed before any model is measured
SLOW_STEP_S = 0.5  # steps longer than this are logged at INFO (-v), so long runs show progress


@dataclass(slots=True)
class _Open:
    """A sub-problem not resolved: its shape, ZeRO stage, what is proven, and the built model
    input (None when building it was interrupted)."""

    bound: float
    shape: Shape
    zero: int
    sub: SubProblem | None = None


@dataclass(slots=True)
class _Search:
    """Incumbent and proof state across sub-problems."""

    best_plan: Plan | None = None
    best_ticks: int | None = None
    open: list[_Open] = field(default_factory=list)  # sub-problems not resolved
    unreached_bound: float = math.inf  # bound on every shape the enumeration never yielded
    tolerance_bounds: list[int] = field(default_factory=list)  # floating proofs' bounds
    solver_runs: int = 0  # models solved (a sub-problem may be solved in both passes)
    pruned: int = 0
    skipped_models: int = 0  # models not started: too big for the time left
    largest_skipped: int = 0  # the estimated terms of the largest of them
    disagreements: int = 0  # proofs a second solve contradicted: the result is never OPTIMAL
    notes: list[str] = field(default_factory=list)

    def offer(self, plan: Plan, ticks: int) -> None:
        if self.best_ticks is None or ticks < self.best_ticks:
            self.best_plan, self.best_ticks = plan, ticks
            logger.info("incumbent %d ticks (%s)", ticks, _label_of(plan))


def solve_exact(instance: Instance, options, backend: str, make_adapter) -> SolveResult:
    """Solve ``instance`` exactly in ``options.space`` with the adapter's solver, within
    ``options.time_limit_s`` for the whole search and, when given, ``options.work_limit``
    work units for its solver runs (module docstring)."""
    start = time.monotonic()
    deadline = Deadline(start + options.time_limit_s)
    run = _Run(instance, options, NetworkModel(instance.cluster), make_adapter, deadline,
               backend)
    _offer_hint(instance, options.space, run.hint, run.network, run.search)
    pending = run.first_pass()
    run.second_pass(pending)
    return _result(backend, options.space, run.search, time.monotonic() - start,
                   run.tolerance_rel, run.work)


class _Run:
    """One exact search: the instance, options, incumbent and the global deadline."""

    def __init__(self, instance: Instance, options, network: NetworkModel, make_adapter,
                 deadline: Deadline, backend: str):
        self.instance, self.options, self.network = instance, options, network
        self.backend = backend
        self.make_adapter, self.deadline = make_adapter, deadline
        self.hint = _placed(options.hint, network)
        self.search = _Search()
        self.work = Work(options.work_limit)
        self.tolerance_rel = make_adapter().objective_tolerance_rel
        self._sharp_bounds: dict[str, float] = {}  # sub-problem label -> communication bound
        self._built_terms, self._built_s = 0, 0.0  # measured model-building rate

    # ------------------------------------------------------------ passes

    def first_pass(self) -> list[_Open]:
        """Walk the shapes in bound order; each sub-problem gets at most FIRST_PASS_SHARE
        (of the time limit, or of the work limit when there is one)."""
        cap_s = self.options.time_limit_s * FIRST_PASS_SHARE
        pending: list[_Open] = []
        shapes = shapes_by_bound(self.instance, self.deadline)
        reached = 0
        with self._progress("pass 1", count_shapes(self.instance)) as progress:
            for bound, shape in shapes:
                if self._prunable(bound):
                    break  # every later shape has a bound at least as large
                if shape is None or self.deadline.expired() or self.work.exhausted():
                    self.search.unreached_bound = bound
                    self._note_clock(shape is None or self.deadline.expired())
                    break
                reached += 1
                for zero in admitted_zeros(self.instance, shape):
                    self._visit(_Open(bound, shape, zero), self.deadline if
                                self.work.deterministic else self.deadline.sooner(cap_s),
                                pending, FIRST_PASS_SHARE)
                self._report(progress, [bound] + [item.bound for item in pending])
            self._report(progress, [item.bound for item in pending], steps=0)  # final status
        return self._sorted(pending, reached)

    def _sorted(self, pending: list[_Open], reached: int) -> list[_Open]:
        logger.info("pass 1: %d shapes reached, %d sub-problems open, %.1f s and %.3f work "
                    "units left", reached, len(pending), self.deadline.remaining(),
                    self.work.left())
        return sorted(pending, key=lambda entry: entry.bound)

    def second_pass(self, pending: list[_Open]) -> None:
        """The unresolved sub-problems, best bound first, share what is left of the limit."""
        still_open: list[_Open] = []
        with self._progress("pass 2", len(pending)) as progress:
            for index, item in enumerate(pending):
                self._visit(item, self.deadline, still_open)
                self._report(progress, [entry.bound for entry in pending[index + 1:]]
                             + [entry.bound for entry in still_open])
        self.search.open = still_open

    def _progress(self, name: str, total: int) -> Progress:
        return Progress(f"{self.backend} {name}", total, show_bar=self.options.progress,
                        logger=logger)

    def _report(self, progress: Progress, open_bounds: list[float], steps: int = 1) -> None:
        """One step done; the status is the incumbent and the bound proven so far (the least
        of the incumbent and every bound still open, the unreached shapes' included)."""
        if not progress.active:
            return
        best = self.search.best_ticks
        bound = min(open_bounds + [self.search.unreached_bound]
                    + ([best] if best is not None else []), default=math.inf)
        progress.advance(steps, status=f"best {ticks_text(best)}, bound "
                                f"{ticks_text(bound if math.isfinite(bound) else None)} ticks")

    # ------------------------------------------------------------ one sub-problem

    def _note_clock(self, stopped_by_clock: bool) -> None:
        """With a work limit, a step the clock ended makes the result machine-dependent."""
        if stopped_by_clock and self.work.deterministic:
            self.work.wall_capped = True

    def _visit(self, item: _Open, deadline: Deadline, still_open: list[_Open],
               work_share: float | None = None) -> None:
        """Resolve ``item`` by ``deadline`` (and with at most ``work_share`` of the work
        limit, None: what is left) if possible, else append it (tightened) to
        ``still_open``."""
        if self._prunable(item.bound):
            self.search.pruned += 1
            return
        if deadline.expired() or self.work.exhausted():
            self._note_clock(self.deadline.expired())
            still_open.append(item)
            return
        try:
            if item.sub is None:
                began = time.monotonic()
                item.sub = build_subproblem(self.instance, item.shape, item.zero, deadline)
                if time.monotonic() - began > SLOW_STEP_S:
                    logger.info("%s: %d stage options built in %.1f s", item.sub.label,
                                sum(map(len, item.sub.options)), time.monotonic() - began)
                if not item.sub.feasible:
                    return  # no memory-feasible split: resolved without a model
                item.bound = max(item.bound, item.sub.lower_bound_ticks)
                if self._prunable(item.bound):
                    self.search.pruned += 1
                    return
            item.bound = max(item.bound, self._sharp_bound(item.sub, deadline))
            if self._prunable(item.bound):
                self.search.pruned += 1
                return
            proven = self._solve(item.sub, deadline, work_share)
        except OutOfTime:
            self._note_clock(True)
            still_open.append(item)
            return
        if proven is not None:
            item.bound = max(item.bound, proven)
            still_open.append(item)

    def _prunable(self, bound: float) -> bool:
        best = self.search.best_ticks
        return best is not None and bound >= best

    def _sharp_bound(self, sub: SubProblem, deadline: Deadline) -> float:
        if sub.label not in self._sharp_bounds:
            training = self.instance.training
            self._sharp_bounds[sub.label] = communication_lower_bound(
                sub, ChunkPricing(self.instance, sub), self.network,
                training.overlap_grad_reduce, deadline, training.overlap_param_gather)
        return self._sharp_bounds[sub.label]

    def _solve(self, sub: SubProblem, deadline: Deadline,
               work_share: float | None = None) -> float | None:
        """Build and solve one model by ``deadline`` (with ``work_share`` of the work limit);
        None when resolved, else its bound."""
        estimate = estimate_terms(sub, self.network, self.options.space)
        if estimate / self._rate() > deadline.remaining():
            self.search.skipped_models += 1
            self.search.largest_skipped = max(self.search.largest_skipped, estimate)
            logger.info("%s: model of about %d terms cannot be built in %.1f s; left open",
                        sub.label, estimate, deadline.remaining())
            raise OutOfTime
        adapter = self.make_adapter()
        adapter.deadline = deadline
        cutoff = self.search.best_ticks
        began = time.monotonic()
        handles = build_model(adapter, self.instance, sub, self.network, self.options.space,
                              cutoff)
        hint = self.hint
        if hint is not None and sub.matches(hint) and (
                self.options.space is Space.FULL or handles.placement.contains(hint.placement)):
            hint_model(adapter, handles, hint)
        building_s = time.monotonic() - began
        self._built_terms += adapter.terms
        self._built_s += building_s
        outcome = adapter.solve_within(deadline, building_s, self.options.seed,
                                       self.options.workers, sub.label,
                                       self.work.share(work_share))
        self.work.charge(outcome.work)
        self._note_clock(outcome.wall_capped)
        self.search.solver_runs += 1
        return self._judge(sub, handles, adapter, outcome, cutoff)

    def _rate(self) -> float:
        """Terms per second this run has built models at (an assumption before the first)."""
        if self._built_s < 0.05:
            return ASSUMED_TERMS_PER_S
        return self._built_terms / self._built_s

    def _judge(self, sub: SubProblem, handles, adapter, outcome: RawOutcome,
               cutoff: int | None) -> float | None:
        """Referee the solver's answer; None when the sub-problem is resolved, else its bound."""
        tolerance = adapter.objective_tolerance_rel
        if outcome.note:  # a proof the second solve did not confirm: the message says so
            self.search.notes.append(outcome.note)
        self.search.disagreements += outcome.disagreed
        if outcome.status in (RawStatus.OPTIMAL, RawStatus.FEASIBLE):
            plan = extract_plan(handles, adapter.value)
            evaluation = evaluate(self.instance, plan, self.network)
            if not evaluation.feasible:
                if tolerance > 0 and _over_memory_within(evaluation, tolerance):
                    note = (f"{sub.label}: the MILP's plan exceeds memory by less than its "
                            f"floating-point tolerance ({evaluation.violations[0]}); the "
                            f"sub-problem stays open")
                    logger.warning(note)
                    self.search.notes.append(note)
                    return (-math.inf if outcome.bound is None
                            else proven_bound(tolerance, outcome.bound))
                raise ModelMismatch(f"{sub.label}: the solver's plan is infeasible: "
                                    f"{evaluation.violations[0]}")
            check_solver_numbers(sub.label, outcome, evaluation.objective_ticks, tolerance)
            self.search.offer(plan, evaluation.objective_ticks)
        if outcome.status is RawStatus.INFEASIBLE and tolerance > 0 and cutoff is None \
                and sub.virtual_stages == 1:
            note = (f"{sub.label}: the MILP reported a feasible-by-construction model "
                    f"infeasible (a numerical failure); the sub-problem stays open")
            logger.warning(note)
            self.search.notes.append(note)
            return -math.inf
        if outcome.status is RawStatus.OPTIMAL:
            if tolerance > 0:
                self.search.tolerance_bounds.append(proven_bound(tolerance, outcome.bound))
            return None
        if outcome.status is RawStatus.INFEASIBLE:
            if tolerance > 0:  # nothing below the cutoff (or nothing fits), within tolerance
                self.search.tolerance_bounds.append(
                    math.inf if cutoff is None else proven_bound(tolerance, cutoff))
            return None
        if outcome.bound is None:
            return -math.inf
        return proven_bound(tolerance, outcome.bound)


def _over_memory_within(evaluation, tolerance: float) -> bool:
    """Whether the plan's only fault is memory, each stage over by at most ``tolerance`` of
    the limit (a MILP's memory constraint holds only that far when v > 1)."""
    return not evaluation.malformed_fields and all(
        stage.memory_bytes <= stage.memory_limit_bytes * (1 + tolerance) + 1
        for stage in evaluation.stages)


def _label_of(plan: Plan) -> str:
    return shape_label(plan.config, plan.microbatch, plan.num_stages, plan.num_replicas,
                       plan.zero, plan.virtual_stages)


def _placed(hint: Plan | None, network: NetworkModel) -> Plan | None:
    """The hint with an explicit placement (the evaluator's default layout when it has none)."""
    if hint is None or hint.placement is not None or \
            hint.num_devices_used > network.num_devices:
        return hint
    return hint.with_placement(contiguous_placement(
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
    return plan.placement in network.structured_placements(plan.config, plan.num_stages,
                                                           plan.num_replicas)


def _result(backend: str, space: Space, search: _Search, wall_time_s: float,
            tolerance_rel: float, work: Work | None = None) -> SolveResult:
    work = work or Work()
    open_bounds = [item.bound for item in search.open]
    if search.unreached_bound < math.inf:
        open_bounds.append(search.unreached_bound)
    stats = {"solver_runs": search.solver_runs, "subproblems_pruned": search.pruned,
             "subproblems_open": len(search.open), "models_skipped": search.skipped_models,
             "shapes_unreached": search.unreached_bound < math.inf,
             "solver_disagreements": search.disagreements,
             **work_stats(work)}
    limited = bool(open_bounds)  # stopped by the time limit with something unresolved
    if not open_bounds:
        if search.best_plan is None:
            return SolveResult(backend, Status.INFEASIBLE, wall_time_s=wall_time_s, space=space,
                               message="no plan fits in memory", stats=stats,
                               tolerance_rel=tolerance_rel if search.tolerance_bounds else 0.0)
        bound = min([search.best_ticks, *search.tolerance_bounds])
        if not search.disagreements:
            return SolveResult(backend, Status.OPTIMAL, search.best_plan, search.best_ticks,
                               bound, wall_time_s, space, stats=stats,
                               tolerance_rel=tolerance_rel if search.tolerance_bounds else 0.0)
        # a solver's proof was contradicted by its second solve: the bound (the lower of the
        # two runs') holds if one of them is right, but the result is not OPTIMAL
        open_bounds = [bound]
    bound = min(open_bounds + search.tolerance_bounds, default=-math.inf)
    skipped = ([f"{search.skipped_models} sub-problem model(s) too large to build in the time "
                f"left, never started (the largest about {search.largest_skipped:,} terms)"]
               if limited and search.skipped_models else [])
    message = "; ".join(([limit_text(work)] if limited else []) + skipped + search.notes)
    if search.best_plan is None:
        return SolveResult(backend, Status.UNKNOWN, bound_ticks=_int_or_none(bound),
                           wall_time_s=wall_time_s, space=space, message=message, stats=stats,
                           tolerance_rel=tolerance_rel if search.tolerance_bounds else 0.0)
    bound = min(bound, search.best_ticks)
    return SolveResult(backend, Status.FEASIBLE, search.best_plan, search.best_ticks,
                       _int_or_none(bound), wall_time_s, space, message=message, stats=stats,
                       tolerance_rel=tolerance_rel if search.tolerance_bounds else 0.0)


def _int_or_none(value) -> int | None:
    return int(value) if math.isfinite(value) else None
