"""The options every backend takes and the one result record it returns (DESIGN §5)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from enum import Enum

from nest_cp.errors import BackendOptionError
from nest_cp.plan import Plan


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
    """Plan, objective and bound in ticks, status, wall time and which backend produced it."""

    backend: str
    status: Status
    plan: Plan | None = None
    objective_ticks: int | None = None
    bound_ticks: int | None = None
    wall_time_s: float = 0.0
    space: Space = Space.STRUCTURED
    message: str = ""
    stats: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.status is Status.OPTIMAL and self.plan is not None and \
                self.bound_ticks is not None and self.bound_ticks != self.objective_ticks:
            raise ValueError(f"expected bound == objective for OPTIMAL, got bound "
                             f"{self.bound_ticks} and objective {self.objective_ticks}")
        if self.status in (Status.OPTIMAL, Status.FEASIBLE) and self.plan is None:
            raise ValueError(f"expected a plan with status {self.status.value}")


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
