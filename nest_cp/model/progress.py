"""Progress of long work: one reporter for verify, compare, soak, mcmc, dp and exact search.

A :class:`Progress` counts steps towards a known total and carries a short
status text (for a solver: best objective and bound so far).  It shows itself
in two ways, both on stderr and never on stdout:

- a **bar** (click's progress bar) when it was asked for, stderr is a terminal
  and the caller's logger is quiet (no ``-v``): piped or redirected output
  stays clean;
- **log lines** through the caller's logger at INFO level (``nest-cp -v``),
  at most one every ``log_every_s`` seconds plus a last one at the end, so a
  solver's progress lands in a log file, not in a bar the log would mangle.

Why click's bar and no other library: click is already a dependency, its bar
handles an unknown terminal width, shows a rate and an ETA, and hides itself
when its file is not a terminal; what it lacks (the status text of a solver,
log lines instead of a bar under ``-v``) is the few lines of this module.
tqdm would add a dependency for the same picture.

Nothing here keeps module state: every reporter is an object its caller owns
and closes (it is a context manager).
"""

from __future__ import annotations

import logging
import sys
import time
from typing import TextIO

import click

DEFAULT_LOG_EVERY_S = 5.0


def stderr_is_terminal() -> bool:
    """Whether stderr is a terminal (the only place a bar is ever drawn)."""
    isatty = getattr(sys.stderr, "isatty", None)
    return bool(isatty and isatty())


class Progress:
    """``total`` steps of work named ``label``; a bar, log lines, or nothing (module doc)."""

    def __init__(self, label: str, total: int, *, show_bar: bool = True,
                 logger: logging.Logger | None = None,
                 log_every_s: float = DEFAULT_LOG_EVERY_S, stream: TextIO | None = None):
        self.label, self.total = label, max(0, int(total))
        self.done, self.status = 0, ""
        self._logger = logger
        self._log_every_s = log_every_s
        self._logging = logger is not None and logger.isEnabledFor(logging.INFO)
        self._last_log = time.monotonic()
        self._bar = None
        if show_bar and not self._logging and (stream is not None or stderr_is_terminal()):
            self._bar = click.progressbar(length=self.total, label=label,
                                          file=stream or sys.stderr, show_pos=True,
                                          item_show_func=lambda status: status)
            self._bar.__enter__()

    @property
    def active(self) -> bool:
        """Whether anybody sees this reporter (callers skip costly status texts otherwise)."""
        return self._bar is not None or self._logging

    def advance(self, steps: int = 1, status: str | None = None) -> None:
        """``steps`` more steps done; ``status`` replaces the status text when given."""
        self.done += steps
        if status is not None:
            self.status = status
        if self._bar is not None:
            self._bar.update(steps, self.status or None)
        if self._logging and time.monotonic() - self._last_log >= self._log_every_s:
            self._log()

    def close(self) -> None:
        """Finish the bar, or log the final line; closing twice does nothing."""
        if self._bar is not None:
            self._bar.__exit__(None, None, None)
            self._bar = None
        elif self._logging:
            self._log()
            self._logging = False

    def _log(self) -> None:
        self._last_log = time.monotonic()
        tail = f", {self.status}" if self.status else ""
        self._logger.info("%s: %d/%d%s", self.label, self.done, self.total, tail)

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()


def ticks_text(value: int | float | None) -> str:
    """An objective or bound in ticks for a status text; '-' when there is none yet."""
    if value is None or value in (float("inf"), float("-inf")):
        return "-"
    return str(int(value))
