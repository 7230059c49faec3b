"""The exact SDP search: one model per SDP sub-problem, pruned by bound (DESIGN §7).

Sub-problems.  Every SDP plan has one (c, b, d, h, level, masking, z, recompute
mode); the model of nest_cp.solvers.exact.sdp_model is exact for it, so the least T_eff over
sub-problems is the optimum of the space.  Within a sub-problem T_eff = T · scale
with a constant scale (Σ_w C_w does not depend on the mask), so each model minimises
the integer T and the sub-problems are compared by T_eff, exactly, as rationals.
ZeRO: z = 1 and z = 2 price SDP time identically (each all-reduce a reduce-scatter
plus a weight all-gather, cost model §5 c) and z = 2 never needs more memory, so of
those only the largest allowed is searched; z = 0 (one all-reduce, rounded once, no
gather to overlap) prices time differently and is searched too when allowed.  A
(d, h) whose blocks cannot be balanced (U·h/d not an integer) holds no valid mask
and no model.

Order, pruning and statuses.  Sub-problems are visited by their compute bound
T_eff >= m·⌈Σ_w C_w / d⌉·scale; one whose bound reaches the incumbent holds nothing
better and is pruned, and every model carries the cutoff T·scale < incumbent.  The
hint (``options.sdp_hint``, the DP's SDP plan) starts the incumbent when it lies in
the space.  Two passes as in nest_cp.solvers.exact.driver: first each model gets at most
FIRST_PASS_SHARE of the limit, then the open ones, best bound first, share the rest.
The result is OPTIMAL iff every sub-problem is resolved (solved, infeasible or
pruned) and a plan exists, INFEASIBLE iff all are resolved without a plan, else
FEASIBLE / UNKNOWN with the least bound of the open ones.  A full-space sub-problem
needing more than MAX_HOLDER_SETS holder-set variables is not modelled: it stays
open with its compute bound, and the message says so.

The referee.  Every plan a solver returns is evaluated; the solver's T must equal
the evaluator's (CP-SAT exactly, the MILP within its tolerance) and its bound may
not exceed it, or ModelMismatch (exit 3) is raised.
"""

from __future__ import annotations

import itertools
import logging
import math
import time
from dataclasses import dataclass, field
from fractions import Fraction

from nest_cp.cost import terms as cost
from nest_cp.cost.evaluate import evaluate
from nest_cp.cost.sdp import unit_table
from nest_cp.model.errors import ModelMismatch
from nest_cp.model.instance import Instance, RecomputeMode
from nest_cp.model.network import NetworkModel
from nest_cp.model.plan import Plan
from nest_cp.model.result import SolveOptions, SolveResult, Space, Status
from nest_cp.solvers.exact.adapters import (
    CpSatAdapter,
    MilpAdapter,
    RawOutcome,
    RawStatus,
    check_solver_numbers,
    proven_bound,
)
from nest_cp.solvers.exact.budget import Deadline, OutOfTime, Work, limit_text, work_stats
from nest_cp.solvers.exact.sdp_model import (
    MAX_HOLDER_SETS,
    SdpSubProblem,
    build_sdp_model,
    compute_sums,
    extract_sdp_plan,
    full_space_size,
    hint_sdp_model,
    structured_designs,
    worker_compute,
)

logger = logging.getLogger(__name__)

FIRST_PASS_SHARE = 0.1
MODE_ORDER = (RecomputeMode.NONE, RecomputeMode.SELECTIVE, RecomputeMode.FULL)


def solve_cpsat(instance: Instance, options: SolveOptions) -> SolveResult:
    """The best SDP plan of ``options.space``, proven by CP-SAT when time allows."""
    return solve_sdp_exact(instance, options, "cpsat", CpSatAdapter)


def solve_milp(instance: Instance, options: SolveOptions) -> SolveResult:
    """The same model as a MILP (``options.milp_solver``: CBC or HiGHS)."""
    return solve_sdp_exact(instance, options, "milp", lambda: MilpAdapter(options.milp_solver))


def sdp_subproblems(instance: Instance, deadline: Deadline | None = None
                    ) -> tuple[list[SdpSubProblem], bool]:
    """Every SDP sub-problem with a balanced mask, by compute bound on T_eff (then label),
    and whether the enumeration finished before ``deadline``."""
    training, devices = instance.training, instance.cluster.num_devices
    deadline = deadline or Deadline()
    zeros = sdp_zero_stages(training.zero_stages)
    if not zeros:
        return [], True
    found = []
    for config, microbatch in instance.choices:
        if config.cp > 1:  # SDP plans keep c = 1 (docs/context-parallelism.md)
            continue
        for level in training.sdp.levels:
            table = unit_table(instance, config, microbatch, level)
            if not table.num_units:
                continue
            sizes = [len(block) for block in table.blocks]
            sums = compute_sums(table)
            for workers in range(2, devices // config.devices + 1):
                if deadline.expired():  # no time to visit them: no time to sort them either
                    return found, False
                rounds = cost.num_microbatches(training.global_batch, microbatch, config,
                                               workers)
                for holders in training.sdp.holder_counts(workers):
                    if any(size * holders % workers for size in sizes):
                        continue
                    for masking in training.sdp.maskings:
                        total = worker_compute(table, masking, workers, holders, sums)
                        for mode, zero in itertools.product(MODE_ORDER, zeros):
                            if mode in training.recompute_modes:
                                found.append(SdpSubProblem(
                                    config, microbatch, workers, holders, level, masking, zero,
                                    mode, rounds, table, total))
    return _by_bound(found), True


def sdp_zero_stages(allowed) -> list[int]:
    """The ZeRO stages worth searching for SDP (module docstring): 0 when allowed, and the
    largest allowed of 1 and 2."""
    sharded = [zero for zero in allowed if zero in (1, 2)]
    return sorted(({0} & set(allowed)) | ({max(sharded)} if sharded else set()))


def _by_bound(found: list[SdpSubProblem]) -> list[SdpSubProblem]:
    return sorted(found, key=lambda sub: (sub.lower_bound_ticks * sub.scale, sub.label))


@dataclass(slots=True)
class _Open:
    bound: Fraction  # on T_eff
    sub: SdpSubProblem | None  # None: the sub-problems never enumerated


@dataclass(slots=True)
class _Search:
    best_plan: Plan | None = None
    best_effective: Fraction | None = None
    best_ticks: int | None = None
    open: list[_Open] = field(default_factory=list)
    tolerance_bounds: list[Fraction] = field(default_factory=list)
    solver_runs: int = 0
    pruned: int = 0
    too_large: int = 0  # full-space sub-problems not modelled (MAX_HOLDER_SETS)
    disagreements: int = 0  # proofs a second solve contradicted: the result is never OPTIMAL
    notes: list[str] = field(default_factory=list)

    def offer(self, plan: Plan, effective: Fraction, ticks: int) -> None:
        if self.best_effective is None or (effective, ticks) < (self.best_effective,
                                                                self.best_ticks):
            self.best_plan, self.best_effective, self.best_ticks = plan, effective, ticks
            logger.info("SDP incumbent T_eff %s (T %d)", effective, ticks)

    def prunable(self, bound: Fraction) -> bool:
        return self.best_effective is not None and bound >= self.best_effective


def solve_sdp_exact(instance: Instance, options: SolveOptions, backend: str,
                    make_adapter) -> SolveResult:
    """Solve the SDP space of ``options.space`` exactly within ``options.time_limit_s``
    and, when given, ``options.work_limit`` work units for the solver runs, shared like the
    seconds are (two passes; nest_cp.solvers.exact.driver explains the work limit)."""
    start = time.monotonic()
    run = _Run(instance, options, make_adapter, Deadline(start + options.time_limit_s))
    run.offer_hint()
    pending = []
    subproblems, complete = sdp_subproblems(instance, run.deadline)
    if not complete:  # nothing is proven about the sub-problems never enumerated
        run.search.notes.append("the time limit ended the enumeration of SDP sub-problems")
        run.note_clock(True)
    first_deadline = run.deadline if run.work.deterministic else \
        run.deadline.sooner(options.time_limit_s * FIRST_PASS_SHARE)
    for sub in subproblems:
        run.visit(_Open(sub.lower_bound_ticks * sub.scale, sub), first_deadline, pending,
                  FIRST_PASS_SHARE)
    still_open: list[_Open] = []
    for item in sorted(pending, key=lambda entry: entry.bound):
        run.visit(item, run.deadline, still_open)
    if not complete:
        still_open.append(_Open(Fraction(0), None))
    run.search.open = still_open
    return _result(backend, options.space, run.search, time.monotonic() - start,
                   run.tolerance_rel, run.work)


class _Run:
    def __init__(self, instance: Instance, options: SolveOptions, make_adapter,
                 deadline: Deadline):
        self.instance, self.options, self.make_adapter = instance, options, make_adapter
        self.deadline = deadline
        self.network = NetworkModel(instance.cluster)
        self.search = _Search()
        self.work = Work(options.work_limit)
        self.tolerance_rel = make_adapter().objective_tolerance_rel
        self.hint = options.sdp_hint

    def note_clock(self, stopped_by_clock: bool) -> None:
        """With a work limit, a step the clock ended makes the result machine-dependent."""
        if stopped_by_clock and self.work.deterministic:
            self.work.wall_capped = True

    def offer_hint(self) -> None:
        """A feasible hint inside the searched space starts the incumbent."""
        hint = self.hint
        if hint is None or hint.sdp is None or hint.placement is None:
            return
        if self.options.space is Space.STRUCTURED and not self._structured(hint):
            return
        evaluation = evaluate(self.instance, hint, self.network)
        if evaluation.feasible:
            self.search.offer(hint, evaluation.effective, evaluation.objective_ticks)

    def _structured(self, plan: Plan) -> bool:
        table = unit_table(self.instance, plan.config, plan.microbatch, plan.sdp.level)
        probe = SdpSubProblem(plan.config, plan.microbatch, plan.num_replicas,
                              plan.sdp.holders, plan.sdp.level, plan.sdp.masking, plan.zero,
                              plan.stages[0].recompute, 0, table)
        return any(rows == plan.sdp.mask for _, rows in structured_designs(probe)) and \
            plan.placement in self.network.structured_placements(plan.config, 1,
                                                                 plan.num_replicas)

    def visit(self, item: _Open, deadline: Deadline, still_open: list[_Open],
              work_share: float | None = None) -> None:
        """Resolve ``item`` by ``deadline`` (with at most ``work_share`` of the work limit,
        None: what is left) if possible, else append it (tightened) to ``still_open``."""
        if self.search.prunable(item.bound):
            self.search.pruned += 1
            return
        space, sub = self.options.space, item.sub
        if deadline.expired() or self.work.exhausted():
            self.note_clock(self.deadline.expired())
            still_open.append(item)
            return
        if space is Space.FULL and full_space_size(sub) > MAX_HOLDER_SETS:
            self.search.too_large += 1
            still_open.append(item)
            return
        try:
            fitting = structured_designs(sub, self.instance.training.optimizer,
                                         self.instance.cluster.usable_hbm_bytes, deadline)
            if space is Space.STRUCTURED and not fitting:
                return  # no design applies or fits: the structured sub-problem is empty
            proven = self._solve(sub, deadline, fitting, work_share)
        except OutOfTime:
            self.note_clock(True)
            still_open.append(item)
            return
        if proven is not None:
            item.bound = max(item.bound, proven)
            still_open.append(item)

    def _solve(self, sub: SdpSubProblem, deadline: Deadline, fitting: list,
               work_share: float | None = None) -> Fraction | None:
        """Build and solve one model; None when resolved, else its proven bound on T_eff."""
        adapter = self.make_adapter()
        adapter.deadline = deadline
        best = self.search.best_effective
        cutoff = None if best is None else math.ceil(best / sub.scale)
        began = time.monotonic()
        handles = build_sdp_model(adapter, self.instance, sub, self.network, self.options.space,
                                  cutoff, fitting)
        if self.hint is not None and sub.matches(self.hint):
            hint_sdp_model(adapter, handles, self.hint)
        building_s = time.monotonic() - began
        outcome = adapter.solve_within(deadline, building_s, self.options.seed,
                                       self.options.workers, sub.label,
                                       self.work.share(work_share))
        self.work.charge(outcome.work)
        self.note_clock(outcome.wall_capped)
        self.search.solver_runs += 1
        return self._judge(sub, handles, adapter, outcome, cutoff, bool(fitting))

    def _judge(self, sub: SdpSubProblem, handles, adapter, outcome: RawOutcome,
               cutoff: int | None, known_feasible: bool) -> Fraction | None:
        """None when the sub-problem is resolved, else its proven bound on T_eff.

        A MILP's INFEASIBLE without a cutoff on a model known to be feasible (a design
        fits memory, and its mask with any placement is a solution) is a numerical
        failure: the sub-problem stays open.  Without a fitting design it is the
        solver's claim that no mask fits memory, as CP-SAT's would be.
        """
        tolerance = adapter.objective_tolerance_rel
        if outcome.note:  # a proof the second solve did not confirm: the message says so
            self.search.notes.append(outcome.note)
        self.search.disagreements += outcome.disagreed
        if outcome.status in (RawStatus.OPTIMAL, RawStatus.FEASIBLE):
            plan = extract_sdp_plan(handles, adapter.value)
            evaluation = evaluate(self.instance, plan, self.network)
            if not evaluation.feasible:
                raise ModelMismatch(f"{sub.label}: the solver's SDP plan is infeasible: "
                                    f"{evaluation.violations[0]}")
            check_solver_numbers(sub.label, outcome, evaluation.objective_ticks, tolerance,
                                     "SDP plan")
            self.search.offer(plan, evaluation.effective, evaluation.objective_ticks)
        if outcome.status is RawStatus.INFEASIBLE and tolerance > 0 and cutoff is None \
                and known_feasible:
            note = (f"{sub.label}: the MILP reported a model infeasible that a fitting design "
                    f"solves (a numerical failure); the sub-problem stays open")
            self.search.notes.append(note)
            return Fraction(0)
        if outcome.status is RawStatus.OPTIMAL:
            if tolerance > 0:
                self.search.tolerance_bounds.append(
                    proven_bound(tolerance, outcome.bound) * sub.scale)
            return None
        if outcome.status is RawStatus.INFEASIBLE:
            if tolerance > 0 and cutoff is not None:
                self.search.tolerance_bounds.append(proven_bound(tolerance, cutoff) * sub.scale)
            return None
        if outcome.bound is None:
            return sub.lower_bound_ticks * sub.scale
        return max(proven_bound(tolerance, outcome.bound), sub.lower_bound_ticks) * sub.scale


def _result(backend: str, space: Space, search: _Search, wall_time_s: float,
            tolerance_rel: float, work: Work | None = None) -> SolveResult:
    work = work or Work()
    stats = {"sdp_solver_runs": search.solver_runs, "sdp_subproblems_pruned": search.pruned,
             "sdp_subproblems_open": len(search.open), **work_stats(work)}
    tolerance = tolerance_rel if search.tolerance_bounds else 0.0
    if not search.open:
        if search.best_plan is None:
            return SolveResult(backend, Status.INFEASIBLE, wall_time_s=wall_time_s, space=space,
                               message="no SDP plan fits in memory", stats=stats)
        bound = min([search.best_effective, *search.tolerance_bounds])
        if search.disagreements:  # a contradicted proof (driver.py): not OPTIMAL
            return SolveResult(backend, Status.FEASIBLE, search.best_plan, search.best_ticks,
                               None, wall_time_s, space, message="; ".join(search.notes),
                               stats=stats, tolerance_rel=tolerance,
                               effective=search.best_effective, effective_bound=bound)
        return SolveResult(backend, Status.OPTIMAL, search.best_plan, search.best_ticks, None,
                           wall_time_s, space, stats=stats, tolerance_rel=tolerance,
                           effective=search.best_effective, effective_bound=bound)
    bound = min([item.bound for item in search.open] + search.tolerance_bounds)
    notes = list(search.notes)
    if search.too_large:
        notes.append(f"{search.too_large} full-space sub-problems need more than "
                     f"{MAX_HOLDER_SETS} holder-set variables and were not modelled")
    message = "; ".join([f"{limit_text(work)} or model size", *notes])
    if search.best_plan is None:
        return SolveResult(backend, Status.UNKNOWN, wall_time_s=wall_time_s, space=space,
                           message=message, stats=stats, tolerance_rel=tolerance,
                           effective_bound=bound)
    return SolveResult(backend, Status.FEASIBLE, search.best_plan, search.best_ticks, None,
                       wall_time_s, space, message=message, stats=stats,
                       tolerance_rel=tolerance, effective=search.best_effective,
                       effective_bound=min(bound, search.best_effective))
