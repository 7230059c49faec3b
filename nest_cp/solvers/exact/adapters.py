"""Two thin adapters that let one skeleton build a CP-SAT model and a MILP.

Both expose the same verbs: new_bool, new_int (a cost term), new_integer (an
integer that must stay integral, e.g. a rounding carry), add, add_floor (a linear
floor enforced by literals), add_cutoff (objective <= incumbent − 1), total,
minimize, hint, solve, value.  The MILP adapter
declares cost terms continuous: each is pushed down onto the largest enforced
floor, a sum of integer prices times binaries (and integer carries), so it is
integral at an optimum.
Enforcement in the MILP is a big-M with M = the floor's largest coefficient:
the stage picks exactly one option, so Σ_o opt·price <= M and the relaxed floor
is <= 0, which the term's lower bound 0 already implies.

Both adapters count the terms they are handed (``terms``) and check their
``deadline`` while the model is built, so building a model that cannot be
finished in time stops with :class:`~nest_cp.solvers.exact.budget.OutOfTime`.  A solver
failure that is nest-cp's fault (an invalid model) is an :class:`InternalError`.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import sys
import time
from dataclasses import dataclass, replace
from enum import Enum

import highspy
import numpy as np
import pulp
from ortools.sat.python import cp_model

from nest_cp.model.errors import InternalError, ModelMismatch
from nest_cp.solvers.cpsat_solver import CheckedSolver
from nest_cp.solvers.exact.budget import Deadline, OutOfTime

logger = logging.getLogger(__name__)

class RawStatus(str, Enum):
    OPTIMAL = "optimal"        # proven optimal (or proven: nothing below the cutoff)
    FEASIBLE = "feasible"      # a solution, stopped by the limit
    INFEASIBLE = "infeasible"  # proven infeasible
    UNKNOWN = "unknown"        # stopped by the limit without a solution


@dataclass(frozen=True, slots=True)
class RawOutcome:
    """What a solver proved about one sub-problem model; bound is None when unknown; note
    says why a proof the solver claimed was not accepted (its second proof failed), and
    disagreed whether the second proof contradicted it (rather than running out of time)."""

    status: RawStatus
    objective: float | None
    bound: float | None
    note: str | None = None
    disagreed: bool = False
    work: float = 0.0  # work units the solver runs did (budget.Work), a count, not a clock
    wall_capped: bool = False  # a run ended near its time limit without a proof


def proven_bound(tolerance: float, value: float) -> int:
    """The integer bound a solver's number proves, less the adapter's relative tolerance
    (exact integers for CP-SAT, tolerance 0)."""
    if tolerance == 0:
        return math.ceil(value - 1e-9)
    return math.ceil(value * (1 - tolerance) - 1e-6)


def check_solver_numbers(label: str, outcome: RawOutcome, evaluated: int, tolerance: float,
                         what: str = "plan") -> None:
    """ModelMismatch unless the solver's objective and bound agree with the evaluator's
    price ``evaluated`` of its own ``what`` (within ``tolerance``; exactly for CP-SAT)."""
    band = tolerance * abs(evaluated) + (0.5 if tolerance > 0 else 0)
    objective = outcome.objective
    if objective is None or objective < evaluated - band:
        raise ModelMismatch(f"{label}: the solver's objective {objective} is below the "
                            f"evaluator's {evaluated} ticks for the same {what}")
    if outcome.status is RawStatus.OPTIMAL and objective > evaluated + band:
        raise ModelMismatch(f"{label}: the solver proved {objective} ticks optimal, the "
                            f"evaluator prices its {what} at {evaluated}")
    if outcome.bound is not None and outcome.bound > evaluated + band:
        raise ModelMismatch(f"{label}: the solver's bound {outcome.bound} is above the "
                            f"evaluator's {evaluated} ticks for a {what} it found")


class _Building:
    """Term counting and deadline checks shared by both adapters while a model is built."""

    def __init__(self):
        self.terms = 0
        self.deadline = Deadline()
        self.label = "sub-problem"  # the model's name in the solver's notes

    def _count(self, terms: int) -> None:
        self.terms += terms
        self.deadline.tick()

    def solve_within(self, deadline: Deadline, building_s: float, seed: int, workers: int,
                     label: str, work_limit: float | None = None) -> RawOutcome:
        """Solve the built model in what is left of ``deadline`` (raises OutOfTime when
        nothing is) and, with ``work_limit``, in that many work units.  The MILP's own
        overhead, PuLP writing the model out, grows like building it took, so that much
        more is kept back for it."""
        time_left = deadline.remaining() - (building_s if self.objective_tolerance_rel > 0
                                            else 0.0)
        if time_left <= 0:
            raise OutOfTime
        self.label = label
        outcome = self.solve(time_left, seed, workers, work_limit)
        logger.info("%s: %s objective=%s bound=%s (%d terms, built in %.2f s, %.3f work "
                    "units)", label, outcome.status.value, outcome.objective, outcome.bound,
                    self.terms, building_s, outcome.work)
        return outcome


class CpSatAdapter(_Building):
    """OR-Tools CP-SAT: exact integer arithmetic, so its objective is exact to the tick."""

    objective_tolerance_rel = 0.0

    def __init__(self):
        super().__init__()
        self.model = cp_model.CpModel()
        self._solver: CheckedSolver | None = None

    def new_bool(self, name: str):
        self._count(1)
        return self.model.new_bool_var(name)

    def new_int(self, name: str, lower: int, upper: int):
        self._count(1)
        return self.model.new_int_var(lower, max(lower, upper), name)

    def new_integer(self, name: str, lower: int, upper: int):
        return self.new_int(name, lower, upper)

    def add(self, constraint) -> None:
        self._count(1)
        if isinstance(constraint, bool):  # a constant comparison, e.g. 0 == 0
            if not constraint:
                self.model.add_bool_or([])
            return
        self.model.add(constraint)

    def add_floor(self, term, expr, literals: list, big_m: int) -> None:
        self._count(1 + len(literals))
        constraint = self.model.add(term >= expr)
        if literals:
            constraint.only_enforce_if(literals)

    def add_cutoff(self, objective, cutoff_ticks: int) -> None:
        """Only solutions better than ``cutoff_ticks`` (the incumbent) are wanted."""
        self.add(objective <= cutoff_ticks - 1)

    def total(self, terms):
        terms = list(terms)
        self._count(len(terms))
        return cp_model.LinearExpr.sum(terms)

    def minimize(self, expr) -> None:
        self.model.minimize(expr)

    def hint(self, var, value: int) -> None:
        self.model.add_hint(var, value)

    def solve(self, time_limit_s: float, seed: int, workers: int,
              work_limit: float | None = None) -> RawOutcome:
        """Solve in ``time_limit_s`` (and ``work_limit`` units of deterministic time); an
        OPTIMAL or INFEASIBLE is proven twice (a second CP-SAT run without presolve,
        :class:`~nest_cp.solvers.cpsat_solver.CheckedSolver`), else it comes back FEASIBLE
        or UNKNOWN with the lower bound and a note."""
        solver = self.checked_solver(time_limit_s, seed, workers, work_limit)
        status = solver.solve(self.model)
        self._solver = solver
        note, disagreed = solver.note, solver.disagreed
        spent = {"work": solver.deterministic_time, "wall_capped": solver.wall_capped}
        if status == cp_model.MODEL_INVALID:
            raise InternalError(f"CP-SAT rejected the model as invalid: {self.model.validate()}")
        if status == cp_model.INFEASIBLE:
            return RawOutcome(RawStatus.INFEASIBLE, None, None, **spent)
        # the objective has integer coefficients, so its value and bound are integers that
        # CP-SAT reports as doubles (428400000.00000006): read them back as integers
        raw_bound = solver.best_objective_bound
        bound = math.ceil(raw_bound - 1e-6) if math.isfinite(raw_bound) else None
        if status in (cp_model.OPTIMAL, cp_model.FEASIBLE):
            objective = round(solver.objective_value)
            if status == cp_model.OPTIMAL:
                return RawOutcome(RawStatus.OPTIMAL, objective, objective, **spent)
            return RawOutcome(RawStatus.FEASIBLE, objective, bound, note, disagreed, **spent)
        return RawOutcome(RawStatus.UNKNOWN, None, bound, note, disagreed, **spent)

    def checked_solver(self, time_limit_s: float, seed: int, workers: int,
                       work_limit: float | None = None) -> CheckedSolver:
        """The solver of :meth:`solve` (a seam: tests hand in a wrong first answer)."""
        return CheckedSolver(time_limit_s, workers, seed, label=self.label,
                             work_limit=work_limit)

    def value(self, var) -> int:
        return int(self._solver.value(var))


class MilpAdapter(_Building):
    """PuLP with CBC (default) or HiGHS through highspy.

    Both solve in floating point, and PuLP reads CBC's solution file, which prints
    values with about 8 significant digits: the objective read back can differ
    from the exact value of the same plan by ~1e-8 relative.  Plans are read from
    the binaries (rounded) and re-priced exactly; ``objective_tolerance_rel`` is
    the band within which the solver's number is compared with the evaluator's.
    """

    objective_tolerance_rel = 1e-7
    proof_gap_abs = 0.5  # the solver stops as "optimal" once objective - bound < this
    # binaries may sit 1e-8 off 0/1 (HiGHS' default lets 1e-6 through, which a big-M of
    # 1e9 ticks turns into a floor hundreds of ticks low)
    integrality_tolerance = 1e-8
    HIGHS_LARGE_MATRIX_VALUE = 1e15  # HiGHS' default large_matrix_value: larger is an error
    MIN_CHECK_S = 0.05  # less time left than this: the check without presolve is not run
    # a work unit of a MILP run (_work_options): HiGHS's MIP interrupt checks, CBC's nodes
    CALLS_PER_WORK_UNIT = 10  # measured: 2-26 checks per CPU second, by model
    NODES_PER_WORK_UNIT = 50

    def __init__(self, solver_name: str = "cbc"):
        super().__init__()
        self.problem = pulp.LpProblem("nest_cp", pulp.LpMinimize)
        self.solver_name = solver_name
        self._names = 0
        self._hinted = False
        self._cutoff_ticks: int | None = None

    def new_bool(self, name: str):
        self._count(1)
        return self.problem.add_variable(self._unique(name), cat=pulp.LpBinary)

    def new_int(self, name: str, lower: int, upper: int):
        # Cost terms are continuous and minimised onto their floors, so the upper bound is
        # redundant; stating it made CBC's preprocessing declare feasible models infeasible
        # when the optimum sat exactly on it (CBC 2.10).
        del upper
        self._count(1)
        return self.problem.add_variable(self._unique(name), lowBound=lower)

    def new_integer(self, name: str, lower: int, upper: int):
        """An integer variable (a rounding carry); its upper bound is implied, not stated."""
        del upper
        self._count(1)
        return self.problem.add_variable(self._unique(name), lowBound=lower, cat=pulp.LpInteger)

    def add(self, constraint) -> None:
        self._count(1)
        if isinstance(constraint, bool):
            if not constraint:
                raise InternalError("the MILP model holds a constant constraint that is false")
            return
        self.problem += constraint

    def add_floor(self, term, expr, literals: list, big_m: int) -> None:
        self._count(1 + len(literals))
        slack = big_m * (len(literals) - pulp.lpSum(literals)) if literals else 0
        self.problem += term >= expr - slack

    def add_cutoff(self, objective, cutoff_ticks: int) -> None:
        """Only solutions better than ``cutoff_ticks`` (the incumbent) are wanted; kept to
        judge two runs that land on the cutoff (:meth:`_second_opinion`)."""
        self._cutoff_ticks = cutoff_ticks
        self.add(objective <= cutoff_ticks - 1)

    def total(self, terms):
        terms = list(terms)
        self._count(len(terms))
        return pulp.lpSum(terms)

    def minimize(self, expr) -> None:
        self.problem += expr

    def hint(self, var, value: int) -> None:
        var.setInitialValue(value)
        self._hinted = True

    def solve(self, time_limit_s: float, seed: int, workers: int,
              work_limit: float | None = None) -> RawOutcome:
        """Solve in ``time_limit_s`` (and ``work_limit`` work units: :meth:`_work_options`);
        an OPTIMAL or INFEASIBLE is proven twice: the same solver solves the model again
        without presolve in the time (and work) left, started from the first run's plan,
        and must agree, else the outcome is FEASIBLE (UNKNOWN without a plan) with the
        lower of the two bounds and a note.  An INFEASIBLE beside an optimum on the cutoff
        itself (within the tolerance) is agreement: both say nothing beats the incumbent
        by more than the tolerance.

        Not the other MILP solver: HiGHS took 10-30 times CBC's time to prove the cutoff
        models of small instances infeasible.  CBC keeps its preprocessing ("preprocess
        off" made the CBC 2.10 binary crash on an SDP model)."""
        began = time.monotonic()
        first = self._solve_with(time_limit_s, seed, workers, work_limit=work_limit)
        if first.status not in (RawStatus.OPTIMAL, RawStatus.INFEASIBLE):
            return first
        kept = {var.name: var.varValue for var in self.problem.variables()}
        self._hinted = first.status is RawStatus.OPTIMAL  # CBC's warm start: the first plan
        if not self._hinted:  # no stale values as HiGHS's start after an INFEASIBLE
            for var in self.problem.variables():
                var.varValue = None
        time_left = time_limit_s - (time.monotonic() - began)
        work_left = None if work_limit is None else work_limit - first.work
        if time_left < self.MIN_CHECK_S or (work_left is not None and work_left <= 0):
            # CBC 2.10 started warm with a limit of ~0.01 s exits with an error (seen on the
            # soak's seed 27 under load); a check with no time proves nothing anyway.  With
            # a work limit, running out of time here is the clock's doing: machine-dependent
            second = RawOutcome(RawStatus.UNKNOWN, None, None, wall_capped=work_limit is not None
                                and time_left < self.MIN_CHECK_S)
        else:
            second = self._solve_with(time_left, seed, workers, presolve=False,
                                      work_limit=work_left)
        spent = {"work": first.work + second.work,
                 "wall_capped": first.wall_capped or second.wall_capped}
        if second.objective is not None and not self._solution_holds():
            # a run stopped at once (the time left was tiny) can report its start or an
            # unfinished point as a solution; only a point the model admits is one
            logger.info("%s: the check without presolve returned a point the model does "
                        "not admit; it proves nothing", self.label)
            second = RawOutcome(RawStatus.UNKNOWN, None, None)
        return replace(self._second_opinion(first, second, kept), **spent)

    def _solution_holds(self) -> bool:
        """Whether the variables' values satisfy every bound, integrality and constraint of
        the model (within a loose relative tolerance: this catches non-solutions, it does
        not re-derive the solver's own tolerances)."""
        slack = 1e-6
        for var in self.problem.variables():
            value = var.varValue
            if value is None:
                return False
            if var.cat == pulp.LpInteger and abs(value - round(value)) > 1e-5:
                return False
            if (var.lowBound is not None and value < var.lowBound - slack * (1 + abs(value))) \
                    or (var.upBound is not None and value > var.upBound + slack * (1 + abs(value))):
                return False
        for constraint in self.problem.constraints():
            scale = 1 + abs(constraint.constant) + sum(
                abs(coefficient * var.varValue) for var, coefficient in constraint.items())
            left = constraint.value()  # the row's activity plus its constant
            if left is None:
                return False
            if (constraint.sense == pulp.LpConstraintLE and left > slack * scale) or \
                    (constraint.sense == pulp.LpConstraintGE and left < -slack * scale) or \
                    (constraint.sense == pulp.LpConstraintEQ and abs(left) > slack * scale):
                return False
        return True

    def _second_opinion(self, first: RawOutcome, second: RawOutcome,
                        kept: dict) -> RawOutcome:
        """The outcome both runs support (the variables then hold the plan it reports)."""
        band = self.objective_tolerance_rel * abs(first.objective or 0) + 0.5
        if first.status is second.status is RawStatus.INFEASIBLE:
            return first
        if {first.status, second.status} == {RawStatus.OPTIMAL, RawStatus.INFEASIBLE} and \
                self._on_cutoff(first if first.status is RawStatus.OPTIMAL else second):
            # one run proved nothing below the cutoff, the other an optimum on the cutoff
            # itself: both say "nothing better than the incumbent" within the tolerance (a
            # floor may give way by a tick's fraction of its big-M), which is all an
            # INFEASIBLE under a cutoff claims (the driver keeps the cutoff less the
            # tolerance as the bound)
            logger.info("%s: one run infeasible, the other optimal on the cutoff %d within "
                        "the tolerance: nothing better than the incumbent", self.label,
                        self._cutoff_ticks)
            return RawOutcome(RawStatus.INFEASIBLE, None, None)
        if first.status is second.status is RawStatus.OPTIMAL and \
                abs(first.objective - second.objective) <= band:
            return RawOutcome(RawStatus.OPTIMAL, second.objective,
                              min(first.bound, second.bound))
        planned = [outcome for outcome in (first, second) if outcome.objective is not None]
        bounds = []
        for outcome in (first, second):
            if outcome.status is RawStatus.INFEASIBLE:
                if not planned:  # (an INFEASIBLE beside a plan is refuted: no bound)
                    bounds.append(math.inf)
            else:
                bounds.append(-math.inf if outcome.bound is None else outcome.bound)
        disagreed = second.status in (RawStatus.OPTIMAL, RawStatus.INFEASIBLE) or (
            second.objective is not None and (first.objective is None
                                              or second.objective < first.objective - band))
        said = (f"{self.label}: {self.solver_name.upper()}'s {first.status.value} (objective "
                f"{first.objective}) and its check without presolve ({second.status.value}, "
                f"objective {second.objective})")
        note = f"{said} {'disagree' if disagreed else 'could not be checked'}; not proven"
        (logger.warning if disagreed else logger.info)(note)
        bound = min(bounds, default=-math.inf)
        if not planned:
            return RawOutcome(RawStatus.UNKNOWN, None, bound if math.isfinite(bound) else None,
                              note, disagreed)
        best = min(planned, key=lambda outcome: outcome.objective)
        if best is first:  # the variables hold the second run's values: put the first's back
            for var in self.problem.variables():
                var.varValue = kept[var.name]
        bound = min(bound, best.objective)
        return RawOutcome(RawStatus.FEASIBLE, best.objective,
                          bound if math.isfinite(bound) else None, note, disagreed)

    def _on_cutoff(self, outcome: RawOutcome) -> bool:
        """Whether an optimum sits on the cutoff (objective <= incumbent − 1) within the
        tolerance band, i.e. is no better than the incumbent within the tolerance."""
        cutoff = self._cutoff_ticks
        if cutoff is None or outcome.objective is None:
            return False
        band = self.objective_tolerance_rel * abs(cutoff) + 0.5
        return outcome.objective >= cutoff - 1 - band

    def _solve_with(self, time_limit_s: float, seed: int, workers: int,
                    presolve: bool = True, work_limit: float | None = None) -> RawOutcome:
        solver_name = self.solver_name
        if solver_name == "highs" and self._beyond_highs():
            logger.warning("a constraint coefficient reaches %g, which HiGHS refuses: the "
                           "model is left unsolved (its sub-problem stays open)",
                           self.HIGHS_LARGE_MATRIX_VALUE)
            return RawOutcome(RawStatus.UNKNOWN, None, None)
        time_limit_s = max(time_limit_s, 0.01)
        nodes = None if solver_name == "highs" else self._work_options(work_limit)
        # gaps: the objective is an integer at integer solutions, so an absolute gap < 1
        # proves optimality; the relative gap is 0 (HiGHS defaults to 1e-4)
        if solver_name == "highs":
            solver = _HighsWithStart(msg=False, timeLimit=time_limit_s, gapRel=0.0,
                                     gapAbs=self.proof_gap_abs, threads=workers, random_seed=seed,
                                     mip_feasibility_tolerance=self.integrality_tolerance,
                                     presolve="on" if presolve else "off")
            solver.work_calls = None if work_limit is None else max(
                1, math.floor(work_limit * self.CALLS_PER_WORK_UNIT))
        else:
            solver = pulp.PULP_CBC_CMD(msg=False, timeLimit=time_limit_s, gapRel=0.0,
                                       gapAbs=self.proof_gap_abs, threads=workers,
                                       warmStart=self._hinted, maxNodes=nodes,
                                       options=[f"randomCbcSeed {seed + 1}",
                                                f"integerTolerance {self.integrality_tolerance}",
                                                *([] if presolve else ["presolve off"])])
        began = time.monotonic()
        try:
            self.problem.solve(solver)
        except pulp.PulpSolverError as exc:
            # the solver process failed (CBC exits non-zero on some tiny time limits): it
            # claims nothing, so the sub-problem stays open rather than the run crashing
            logger.warning("%s: %s failed (%s); its answer is unknown", self.label,
                           solver_name.upper(), str(exc).split(",")[0])
            for var in self.problem.variables():
                var.varValue = None
            return RawOutcome(RawStatus.UNKNOWN, None, None,
                              **self._spent(solver, nodes, RawOutcome(RawStatus.UNKNOWN, None,
                                                                      None), True))
        outcome = self._outcome(solver_name)
        return replace(outcome, **self._spent(solver, nodes, outcome,
                                              time.monotonic() - began >= 0.9 * time_limit_s))


    def _work_options(self, work_limit: float | None) -> int | None:
        """CBC's node limit that stands for ``work_limit`` work units (None: no limit).

        A MILP run's work is a count its solver makes the same way on any machine (with
        one thread), converted at a fixed rate measured once on instances/small so that a
        unit takes roughly a second of one core, like CP-SAT's deterministic time:

        * HiGHS: the MIP solver's interrupt checks (kCallbackMipInterrupt), which it makes
          at fixed points of its search, root processing included; the run is
          interrupted at CALLS_PER_WORK_UNIT checks per unit (highspy reports no
          iteration count to the callback, and HiGHS's node limit leaves the root,
          often most of the work here, unbounded).
        * CBC: branch-and-bound nodes, NODES_PER_WORK_UNIT per unit (``maxNodes``); its
          root processing is not limited, and PuLP reports no count, so a run is charged
          its whole allotment."""
        if work_limit is None:
            return None
        return max(1, math.floor(work_limit * self.NODES_PER_WORK_UNIT))

    def _spent(self, solver, nodes: int | None, outcome: RawOutcome,
               near_time_limit: bool) -> dict:
        """The work one run did and whether the clock rather than the work ended it.

        HiGHS: its interrupt checks (:meth:`_work_options`) and its stopping reason;
        through PuLP CBC reports neither, so a CBC run is charged its whole node allotment
        and counts as stopped by the clock when it ended near its time limit unproven."""
        if isinstance(solver, _HighsWithStart):
            if solver.work_calls is None:
                return {}
            return {"work": solver.calls / self.CALLS_PER_WORK_UNIT,
                    "wall_capped": solver.stopped_by_time}
        if nodes is None:
            return {}
        proven = outcome.status in (RawStatus.OPTIMAL, RawStatus.INFEASIBLE)
        return {"work": nodes / self.NODES_PER_WORK_UNIT,
                "wall_capped": near_time_limit and not proven}

    def _beyond_highs(self) -> bool:
        """Whether a constraint has an entry HiGHS refuses (its ``large_matrix_value``).

        HiGHS drops such rows, and PuLP then misreads the solution (an IndexError); a
        rounding carry over a stage's exact fractions can need such a coefficient (the
        least common denominator of its terms' tick prices)."""
        return any(abs(coefficient) >= self.HIGHS_LARGE_MATRIX_VALUE
                   for constraint in self.problem.constraints()
                   for coefficient in constraint.values())

    def _outcome(self, solver_name: str) -> RawOutcome:
        sol_status = self.problem.sol_status
        objective = pulp.value(self.problem.objective)
        bound = self._highs_bound(solver_name)
        if sol_status == pulp.LpSolutionOptimal:
            # what the solver proved: its dual bound (HiGHS), or at least the objective less
            # the absolute gap at which it stops (CBC reports no bound through PuLP)
            proven = objective - self.proof_gap_abs if bound is None else min(bound, objective)
            return RawOutcome(RawStatus.OPTIMAL, objective, proven)
        if sol_status == pulp.LpSolutionIntegerFeasible:
            return RawOutcome(RawStatus.FEASIBLE, objective, bound)
        if pulp.LpStatusInfeasible in (sol_status, self.problem.status):
            return RawOutcome(RawStatus.INFEASIBLE, None, None)
        return RawOutcome(RawStatus.UNKNOWN, None, bound)

    def _highs_bound(self, solver_name: str) -> float | None:
        """HiGHS's proven dual bound; CBC's is not reported through PuLP (None)."""
        model = getattr(self.problem, "solverModel", None)
        if solver_name != "highs" or model is None:
            return None
        bound = model.getInfo().mip_dual_bound
        return bound if math.isfinite(bound) else None

    def value(self, var) -> int:
        return int(round(var.varValue or 0))

    def _unique(self, name: str) -> str:
        self._names += 1
        return f"{name}_{self._names}"


class _HighsWithStart(pulp.HiGHS):
    """pulp.HiGHS that hands the variables' initial values to HiGHS as a partial start.

    pulp.HiGHS ignores initial values; HiGHS completes a sparse start itself (or
    drops it when it cannot), so a hint never changes what is proven.
    """

    def createAndConfigureSolver(self, lp):
        # highspy prints its banner on stdout when a Highs object is built, before
        # output_flag can be cleared; it would land in the middle of CLI output.
        with _c_stdout_silenced():
            super().createAndConfigureSolver(lp)

    stopped_by_time = False  # the last run ended at its time limit
    work_calls: int | None = None  # interrupt the run at this many MIP interrupt checks
    calls = 0  # MIP interrupt checks the last run made (its work: MilpAdapter._work_options)

    def _count_call(self, kind, message, out, into, user) -> None:
        """HiGHS's MIP interrupt check: count it, interrupt at ``work_calls``."""
        del kind, message, out, user
        self.calls += 1
        if self.calls >= self.work_calls:
            into.user_interrupt = True

    def callSolver(self, lp):
        hinted = [(var.index, var.varValue) for var in lp.variables()
                  if var.varValue is not None]
        if hinted:
            index, value = zip(*hinted, strict=True)
            lp.solverModel.setSolution(len(index), np.array(index, dtype=np.int32),
                                       np.array(value, dtype=np.float64))
        self.calls = 0
        if self.work_calls is not None:
            lp.solverModel.setCallback(self._count_call, None)
            lp.solverModel.startCallback(highspy.cb.HighsCallbackType.kCallbackMipInterrupt)
        lp.solverModel.run()
        self.stopped_by_time = lp.solverModel.getModelStatus() == \
            highspy.HighsModelStatus.kTimeLimit

    def findSolutionValues(self, lp):
        """PuLP's reading, with a stop on work (our interrupt, or a node limit: statuses
        PuLP reads wrong or not at all) read like a time limit: a plan if one was found,
        else none."""
        model = lp.solverModel
        if model.getModelStatus() not in (highspy.HighsModelStatus.kSolutionLimit,
                                          highspy.HighsModelStatus.kInterrupt):
            return super().findSolutionValues(lp)
        lp.solverModel = _StatusAs(model, highspy.HighsModelStatus.kTimeLimit)
        try:
            return super().findSolutionValues(lp)
        finally:
            lp.solverModel = model


class _StatusAs:
    """A highspy model that reports another model status (everything else passes through)."""

    def __init__(self, model, status):
        self._model, self._status = model, status

    def getModelStatus(self):  # noqa: N802 (highspy's name)
        return self._status

    def __getattr__(self, name):
        return getattr(self._model, name)


@contextlib.contextmanager
def _c_stdout_silenced():
    """Send file descriptor 1 to /dev/null for the block (C libraries write to it directly)."""
    sys.stdout.flush()
    saved = os.dup(1)
    try:
        with open(os.devnull, "wb") as devnull:
            os.dup2(devnull.fileno(), 1)
        yield
    finally:
        os.dup2(saved, 1)
        os.close(saved)
