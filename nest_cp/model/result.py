"""The options every backend takes and the one result record it returns (DESIGN §5)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from enum import Enum
from fractions import Fraction

from nest_cp.model.errors import BackendOptionError
from nest_cp.model.plan import Plan


class Status(str, Enum):
    """What a backend proved. FEASIBLE is never presented as OPTIMAL."""

    OPTIMAL = "OPTIMAL"      # objective proven minimal over the backend's space
    FEASIBLE = "FEASIBLE"    # a plan, and a bound below it; stopped at a limit
    INFEASIBLE = "INFEASIBLE"  # proven: no plan of the space fits
    UNKNOWN = "UNKNOWN"      # neither a plan nor a proof


class Space(str, Enum):
    FULL = "full"
    STRUCTURED = "structured"


@dataclass(frozen=True, slots=True)
class SolveResult:
    """Plan, objective and bound in ticks, status, wall time and which backend produced it.

    ``tolerance_rel`` says how far the claims hold: 0 means exactly, to the tick (the
    DP, CP-SAT, brute force); a MILP solving in floating point proves OPTIMAL and its
    bounds only up to its relative tolerance (1e-7), and then ``bound_ticks`` is the
    bound it actually proved, which may lie a few tolerances below ``objective_ticks``
    (the solver's own reading of the objective carries one, its bound another).
    """

    backend: str
    status: Status
    plan: Plan | None = None
    objective_ticks: int | None = None
    bound_ticks: int | None = None
    wall_time_s: float = 0.0
    space: Space = Space.STRUCTURED
    message: str = ""
    stats: dict = field(default_factory=dict)
    tolerance_rel: float = 0.0
    # SDP (DESIGN §7): a search for SDP plans minimises the FLOP-equivalent time T_eff, an
    # exact rational; ``objective_ticks`` stays the plan's iteration time T
    effective: Fraction | None = None        # T_eff of ``plan``
    effective_bound: Fraction | None = None  # proven lower bound on T_eff over the space
    sdp: SolveResult | None = None           # the SDP search beside this (plain) one

    def __post_init__(self) -> None:
        if not (math.isfinite(self.tolerance_rel) and 0 <= self.tolerance_rel < 1):
            raise ValueError(f"expected a relative tolerance in [0, 1), got {self.tolerance_rel}")
        if self.status is Status.OPTIMAL and self.plan is not None and \
                self.bound_ticks is not None and not self._bound_proves_optimum():
            raise ValueError(f"expected bound == objective for OPTIMAL (within "
                             f"{self.tolerance_rel:g} relative), got bound {self.bound_ticks} "
                             f"and objective {self.objective_ticks}")
        if self.status in (Status.OPTIMAL, Status.FEASIBLE) and self.plan is None:
            raise ValueError(f"expected a plan with status {self.status.value}")
        if self.status is Status.OPTIMAL and self.effective is not None and \
                self.effective_bound is not None and not self._effective_bound_proves_optimum():
            raise ValueError(f"expected T_eff bound == T_eff for OPTIMAL, got bound "
                             f"{self.effective_bound} and T_eff {self.effective}")

    def _bound_proves_optimum(self) -> bool:
        objective, bound = self.objective_ticks, self.bound_ticks
        if self.tolerance_rel == 0:
            return bound == objective
        return objective * (1 - 3 * self.tolerance_rel) - 1 <= bound <= objective

    def _effective_bound_proves_optimum(self) -> bool:
        effective, bound = self.effective, self.effective_bound
        if self.tolerance_rel == 0:
            return bound == effective
        return effective * (1 - 3 * Fraction(self.tolerance_rel)) - 1 <= bound <= effective

    @property
    def status_text(self) -> str:
        """The status as shown to people: OPTIMAL within a tolerance says so."""
        return status_text(self.status.value, self.tolerance_rel)


def status_text(status: str, tolerance_rel: float | None) -> str:
    """``OPTIMAL``, or ``OPTIMAL~1e-07`` for an optimum proven only within that relative
    tolerance (the tables' legends explain the mark)."""
    if status == Status.OPTIMAL.value and tolerance_rel:
        return f"{status}~{tolerance_rel:g}"
    return status


MAX_WORKERS = 64  # solver threads per solve; more only oversubscribes any machine we run on


# SolveOptions.extra key: another part of a search over a union of spaces (one recompute mode
# at a time, nest_cp.solvers.registry) holds a plan of this many ticks that wins ties; a
# backend honouring it searches only for plans strictly below it (nest_cp.dp.planner.solve)
CUTOFF_TICKS = "cutoff_ticks"


@dataclass(frozen=True, slots=True)
class SolveOptions:
    """Options every backend accepts; a backend ignores those that do not apply to it, so
    the command line refuses them (``nest_cp.solvers.registry.HONOURED_OPTIONS`` lists what each
    backend honours)."""

    space: Space = Space.STRUCTURED
    time_limit_s: float = 60.0
    seed: int = 0
    workers: int = 1
    milp_solver: str = "cbc"          # milp: "cbc" or "highs"
    hint: Plan | None = None          # cpsat hint / milp warm start
    sdp_hint: Plan | None = None      # the same for the SDP search (DESIGN §7)
    progress: bool = False            # progress bar on stderr for long runs
    extra: dict = field(default_factory=dict)  # backend-specific (budget, flat bandwidth, degrees)
    # cpsat/milp: deterministic work units for the solver runs (None: the time limit alone
    # decides); time_limit_s then stays a wall-clock cap (nest_cp.solvers.exact.budget.Work)
    work_limit: float | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.space, Space):
            raise BackendOptionError(f"expected space 'full' or 'structured', got {self.space!r}",
                                     option="space")
        if not (math.isfinite(self.time_limit_s) and self.time_limit_s > 0):
            raise BackendOptionError(f"expected a finite time limit > 0 s, got {self.time_limit_s}",
                                     option="time_limit_s")
        if not 1 <= self.workers <= MAX_WORKERS:
            raise BackendOptionError(f"expected between 1 and {MAX_WORKERS} workers, got "
                                     f"{self.workers}", option="workers")
        if self.work_limit is not None and not (
                isinstance(self.work_limit, int | float) and math.isfinite(self.work_limit)
                and self.work_limit > 0):
            raise BackendOptionError(f"expected a finite work limit > 0, got {self.work_limit}",
                                     option="work_limit")
        if self.milp_solver not in ("cbc", "highs"):
            raise BackendOptionError(f"expected milp_solver 'cbc' or 'highs', "
                                     f"got {self.milp_solver!r}", option="milp_solver")
