"""The one clock of an exact solve: a deadline that every long step checks.

A time limit bounds the whole solve (sub-problem enumeration, bounds, model
building, every solver call), so each of those loops calls
:meth:`Deadline.check` now and then; past the deadline it raises
:class:`OutOfTime`, which the driver catches at the sub-problem it was working
on.  That sub-problem then stays open with the bound already known for it, so
stopping early never costs correctness, only strength of the bound.

With a work limit (:class:`Work`) the deadline is only a safety net: the solver runs are
bounded by deterministic work, so the result does not depend on the machine's speed or
load, unless the deadline still ends something first, which the result then reports
(``Work.wall_capped``).
"""

from __future__ import annotations

import math
import time


class OutOfTime(Exception):
    """The deadline passed in the middle of a step (never escapes the exact driver)."""


class Deadline:
    """A point in ``time.monotonic()`` time; ``check`` is cheap enough for inner loops."""

    CHECK_EVERY = 8  # calls of tick() between two clock reads

    def __init__(self, at: float = math.inf):
        self.at = at
        self._calls = 0

    @classmethod
    def after(cls, seconds: float) -> Deadline:
        return cls(time.monotonic() + seconds)

    def remaining(self) -> float:
        return self.at - time.monotonic()

    def expired(self) -> bool:
        return time.monotonic() >= self.at

    def check(self) -> None:
        """Raise OutOfTime when the deadline has passed."""
        if self.expired():
            raise OutOfTime

    def tick(self) -> None:
        """check(), but reading the clock only every CHECK_EVERY calls (for inner loops)."""
        self._calls += 1
        if self._calls % self.CHECK_EVERY == 0:
            self.check()

    def sooner(self, seconds: float) -> Deadline:
        """The earlier of this deadline and ``seconds`` from now."""
        return Deadline(min(self.at, time.monotonic() + seconds))


class Work:
    """A deterministic work budget shared by a search's solver runs (``limit`` None: none).

    Units are *work units*: one is one unit of CP-SAT's deterministic time (about a second
    of one core on an idle machine; OR-Tools documents it as "deterministic time, close to
    seconds").  A MILP run is charged what :meth:`~nest_cp.solvers.exact.adapters.
    MilpAdapter.solve` reports (HiGHS's node and simplex-iteration counts, converted at
    fixed rates; CBC's whole node allotment, PuLP reporting no count).  Every charge is a
    count the solver makes, never a clock reading, so which sub-problems a search solves,
    and how far, is the same on an idle and a loaded machine.

    ``wall_capped`` records that the search's wall-clock cap (its Deadline) rather than
    this budget stopped something: the result then depends on the machine and says so.
    """

    def __init__(self, limit: float | None = None):
        if limit is not None and not (math.isfinite(limit) and limit > 0):
            raise ValueError(f"expected a finite work limit > 0, got {limit}")
        self.limit = limit
        self.used = 0.0
        self.wall_capped = False

    @property
    def deterministic(self) -> bool:
        return self.limit is not None

    def left(self) -> float:
        """Work units left (inf without a limit)."""
        return math.inf if self.limit is None else self.limit - self.used

    def exhausted(self) -> bool:
        return self.left() <= 0

    def share(self, fraction: float | None = None) -> float | None:
        """What one run may use: ``fraction`` of the limit, at most what is left (None
        without a limit)."""
        if self.limit is None:
            return None
        allowed = self.left() if fraction is None else min(self.left(), fraction * self.limit)
        return max(0.0, allowed)

    def charge(self, units: float) -> None:
        self.used += units


def work_stats(work: Work) -> dict:
    """The work a search did, for its result's stats (nothing without a work limit)."""
    if not work.deterministic:
        return {}
    return {"work_limit": work.limit, "work_used": round(work.used, 6),
            "wall_capped": work.wall_capped}


def limit_text(work: Work) -> str:
    """What stopped a search, for its result's message."""
    if not work.deterministic:
        return "time limit"
    if work.wall_capped:
        return "wall-clock cap (the result depends on the machine's speed)"
    return "work limit"
