"""The one result record every backend returns (DESIGN §5)."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum

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
