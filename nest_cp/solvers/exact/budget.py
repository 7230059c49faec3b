"""The one clock of an exact solve: a deadline that every long step checks.

A time limit bounds the whole solve (sub-problem enumeration, bounds, model
building, every solver call), so each of those loops calls
:meth:`Deadline.check` now and then; past the deadline it raises
:class:`OutOfTime`, which the driver catches at the sub-problem it was working
on.  That sub-problem then stays open with the bound already known for it, so
stopping early never costs correctness, only strength of the bound.
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
