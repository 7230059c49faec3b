"""Every CP-SAT solver nest-cp runs, and the second proof behind an OPTIMAL or INFEASIBLE.

:func:`new_solver` is the one place that sets a CP-SAT solver's parameters (time
limit, workers, seed, and the presolve workaround below).  :class:`CheckedSolver`
solves a model like ``CpSolver.solve`` and reads like a ``CpSolver`` afterwards
(``objective_value``, ``best_objective_bound``, ``value``, ``wall_time``), but an
OPTIMAL or INFEASIBLE it returns has been proven twice: the first run's answer is
checked by a second, independent run of the same model with CP-SAT's presolve
off, in the time left, hinted with the first run's solution when it has one.

Agreement: the second run is OPTIMAL at the same objective (INFEASIBLE when the
first was INFEASIBLE: with a cutoff, "nothing below the cutoff").  Otherwise the
status is FEASIBLE with the lower of the two runs' bounds (UNKNOWN when no run
found a solution), and ``note`` says why.  A second run that contradicts the
first, rather than merely running out of time, is a solver disagreement: it is
logged as a WARNING and the model is saved as a text proto, named by its hash,
for an upstream report.  The lower bound is sound as long as one of the two runs is
right; a run that claims INFEASIBLE while the other found a solution is refuted and
its claim dropped.

Why: CP-SAT 9.15 has proven wrong optima (google/or-tools issue 5293).

Work limits.  With ``work_limit`` (deterministic time, CP-SAT's ``max_deterministic_time``)
a run stops on work rather than on the clock; with one worker and a fixed seed CP-SAT then
takes the same path on any machine at any load, and the second run gets the work the first
left (``work_limit`` less the first run's ``deterministic_time``), so whether it confirms
does not depend on speed either.  The time limit stays as a safety net (it should be set
generously); a run that stopped without a proof near it is reported as ``wall_capped``:
the clock, not the work, may have ended it, so its answer depends on the machine.
"""

from __future__ import annotations

import hashlib
import logging
import math
from collections.abc import Callable
from pathlib import Path

from ortools.sat.python import cp_model

logger = logging.getLogger(__name__)

DEFAULT_DISAGREEMENT_DIR = Path(".nest-cp-cache") / "solver-disagreements"
MIN_TIME_S = 0.01  # CP-SAT needs a positive time limit
MIN_WORK = 0.001  # nor can its deterministic time limit be 0 (it would mean "none")
WALL_CAPPED_SHARE = 0.9  # a run stopped past this share of its time limit: the clock ended it
_PROVEN = (cp_model.OPTIMAL, cp_model.INFEASIBLE)
_WITH_SOLUTION = (cp_model.OPTIMAL, cp_model.FEASIBLE)


def new_solver(time_limit_s: float, workers: int = 1, seed: int = 0,
               presolve: bool = True, work_limit: float | None = None) -> cp_model.CpSolver:
    """A CP-SAT solver with nest-cp's parameters; ``presolve=False`` for second proofs;
    ``work_limit``: CP-SAT's deterministic time limit (module docstring)."""
    solver = cp_model.CpSolver()
    parameters = solver.parameters
    parameters.max_time_in_seconds = max(MIN_TIME_S, time_limit_s)
    if work_limit is not None:
        parameters.max_deterministic_time = max(MIN_WORK, work_limit)
    parameters.num_workers = workers
    parameters.random_seed = seed
    # Workaround for google/or-tools issue 5293: in OR-Tools 9.15 presolve's inclusion
    # detection makes CP-SAT prove wrong optima (a relaxation "optimal" at 1,644,202,000
    # whose true optimum is 267,060,000; tests/data/certify/).  Remove it once an OR-Tools
    # release fixes the issue and tests/test_solver_trust.py's upstream-defect test fails.
    parameters.presolve_inclusion_work_limit = 0
    if not presolve:
        parameters.cp_model_presolve = False
    return solver


def run_spent(run: cp_model.CpSolver, status, time_limit_s: float) -> tuple[float, bool]:
    """The deterministic time one run did, and whether its clock may have ended it (it
    stopped without a proof past WALL_CAPPED_SHARE of ``time_limit_s``)."""
    capped = status not in _PROVEN and run.wall_time >= WALL_CAPPED_SHARE * max(
        MIN_TIME_S, time_limit_s)
    return run.response_proto.deterministic_time, capped


def charge_run(work, run: cp_model.CpSolver, status, time_limit_s: float) -> None:
    """Charge one run's deterministic time to ``work`` (a budget.Work, or None: nothing to
    record) and note there a stop by the clock under a work limit."""
    if work is None:
        return
    units, capped = run_spent(run, status, time_limit_s)
    work.charge(units)
    work.wall_capped = work.wall_capped or (capped and work.deterministic)


class CheckedSolver:
    """Solves a model twice when the first answer is a proof (module docstring).

    ``first_run(model, time_limit_s)`` replaces the first run and returns the solver and
    its status (a seam for tests, which inject a wrong answer); by default it is
    :func:`new_solver`'s solver with presolve on.
    """

    def __init__(self, time_limit_s: float, workers: int = 1, seed: int = 0, label: str = "",
                 disagreement_dir: Path | None = DEFAULT_DISAGREEMENT_DIR,
                 first_run: Callable[[cp_model.CpModel, float], tuple] | None = None,
                 work_limit: float | None = None):
        self.time_limit_s, self.workers, self.seed, self.label = time_limit_s, workers, seed, label
        self.work_limit = work_limit
        self.deterministic_time = 0.0  # work both runs did (CP-SAT's deterministic time)
        self.wall_capped = False  # a run stopped without a proof near its time limit
        self.disagreement_dir = disagreement_dir
        self._first_run = first_run or self._default_first_run
        self.status = cp_model.UNKNOWN
        self.objective_value = math.nan
        self.best_objective_bound = -math.inf
        self.wall_time = 0.0
        self.note: str | None = None  # why an answer was not confirmed
        self.disagreed = False
        self.saved_model: Path | None = None
        self._values: cp_model.CpSolver | None = None  # the run whose solution is read

    def _default_first_run(self, model: cp_model.CpModel, time_limit_s: float):
        solver = new_solver(time_limit_s, self.workers, self.seed, work_limit=self.work_limit)
        return solver, solver.solve(model)

    # ------------------------------------------------------------ solving

    def solve(self, model: cp_model.CpModel):
        """Solve ``model``; the status (a cp_model status) after the second proof."""
        first, status = self._first_run(model, self.time_limit_s)
        if status == cp_model.MODEL_INVALID:  # nest-cp's bug: nothing to read or check
            self.status = status
            return status
        self.wall_time = first.wall_time
        self._account(first, status, self.time_limit_s)
        self._adopt(first, status)
        if status not in _PROVEN:
            return status
        time_left = self.time_limit_s - first.wall_time
        second = new_solver(time_left, self.workers, self.seed, presolve=False,
                            work_limit=None if self.work_limit is None
                            else self.work_limit - first.deterministic_time)
        second_status = second.solve(self._hinted(model, first, status))
        self.wall_time += second.wall_time
        self._account(second, second_status, time_left)
        if _agree(first, status, second, second_status):
            return status
        return self._downgrade(model, (first, status), (second, second_status))

    def _account(self, run: cp_model.CpSolver, status, time_limit_s: float) -> None:
        """Add the run's deterministic time; note a run the clock may have stopped."""
        units, capped = run_spent(run, status, time_limit_s)
        self.deterministic_time += units
        self.wall_capped = self.wall_capped or capped

    def _adopt(self, run: cp_model.CpSolver, status) -> None:
        """Read like ``run`` (its objective, bound and, if it has one, its solution)."""
        self.status = status
        self.objective_value = run.objective_value
        self.best_objective_bound = run.best_objective_bound
        self._values = run if status in _WITH_SOLUTION else None

    @staticmethod
    def _hinted(model: cp_model.CpModel, first: cp_model.CpSolver,
                status) -> cp_model.CpModel:
        """The model hinted with the first run's solution (as it is without one)."""
        if status not in _WITH_SOLUTION:
            return model
        hinted = model.clone()
        hinted.clear_hints()
        solution = list(first.response_proto.solution)
        hinted.proto.solution_hint.vars.extend(range(len(solution)))
        hinted.proto.solution_hint.values.extend(solution)
        return hinted

    def _downgrade(self, model: cp_model.CpModel, first: tuple, second: tuple):
        """FEASIBLE (UNKNOWN without a solution) with the lower of the two runs' bounds."""
        runs = [first, second]
        solved = [(run, status) for run, status in runs if status in _WITH_SOLUTION]
        # an INFEASIBLE beside a solution is refuted: its bound is dropped, not used
        bounds = [_bound(run, status) for run, status in runs
                  if not (status == cp_model.INFEASIBLE and solved)]
        contradicts = second[1] in _PROVEN or (second[1] in _WITH_SOLUTION and (
            first[1] == cp_model.INFEASIBLE
            or second[0].objective_value < first[0].objective_value))
        said = (f"CP-SAT's {_name(first[1])} (objective {_objective(*first)}) and its check "
                f"without presolve ({_name(second[1])}, objective {_objective(*second)})")
        self.disagreed = bool(contradicts)
        if contradicts:
            self.note = f"{self.label}: {said} disagree; not proven"
            self.saved_model = self._save(model, said, first[0], second[0])
            logger.warning("%s; model saved to %s (google/or-tools issue 5293?)", self.note,
                           self.saved_model)
        else:
            self.note = f"{self.label}: {said}: the check did not finish; not proven"
            logger.info(self.note)
        if solved:
            best, _ = min(solved, key=lambda pair: pair[0].objective_value)
            self._adopt(best, cp_model.FEASIBLE)
            self.best_objective_bound = min(bounds + [best.objective_value])
            self.status = cp_model.FEASIBLE
        else:
            self.status = cp_model.UNKNOWN
            self.best_objective_bound = min(bounds, default=-math.inf)
        return self.status

    def _save(self, model: cp_model.CpModel, said: str, first: cp_model.CpSolver,
              second: cp_model.CpSolver) -> Path | None:
        """Write the model as a text proto named by its hash, the two answers and the two
        runs' parameters on top (as comments)."""
        if self.disagreement_dir is None:
            return None
        text = str(model.proto)
        path = self.disagreement_dir / f"{hashlib.sha256(text.encode()).hexdigest()[:16]}.pb.txt"
        header = (f"# {said} disagree (OR-Tools {_ortools_version()})\n"
                  f"# first run: {_one_line(first.parameters)}\n"
                  f"# second run: {_one_line(second.parameters)}\n")
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(header + text, encoding="utf-8")
        except OSError as error:
            logger.warning("could not save the disagreeing model to %s: %s", path, error)
            return None
        return path

    # ------------------------------------------------------------ reading like a CpSolver

    def value(self, var) -> int:
        if self._values is None:
            raise RuntimeError("no solution to read: the status has none")
        return self._values.value(var)

    def status_name(self, status=None) -> str:
        return _name(self.status if status is None else status)


def _agree(first: cp_model.CpSolver, status, second: cp_model.CpSolver,
           second_status) -> bool:
    if status == cp_model.INFEASIBLE:
        return second_status == cp_model.INFEASIBLE
    return second_status == cp_model.OPTIMAL and \
        round(second.objective_value) == round(first.objective_value)


def _bound(run: cp_model.CpSolver, status) -> float:
    """What one run claims as a lower bound on the objective (+inf: claims infeasible)."""
    if status == cp_model.INFEASIBLE:
        return math.inf
    if status == cp_model.OPTIMAL:
        return run.objective_value
    bound = run.best_objective_bound
    return bound if math.isfinite(bound) else -math.inf


def _objective(run: cp_model.CpSolver, status) -> str:
    return f"{run.objective_value:,.0f}" if status in _WITH_SOLUTION else "none"


def _name(status) -> str:
    return getattr(status, "name", str(status))


def _one_line(parameters) -> str:
    return ", ".join(str(parameters).splitlines())


def _ortools_version() -> str:
    import ortools

    return ortools.__version__
