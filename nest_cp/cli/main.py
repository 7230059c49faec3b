"""The ``nest-cp`` command group: every command module and the harness commands wired in.

One command group per module beside this one (instance, evaluate, solve, plans: export and
show, calibrate, sweep); the harness commands (``verify``, ``table``, ``soak`` from
:mod:`nest_cp.verify.cli`, ``compare``) are wired in here and nowhere else.  Exit codes
follow the one contract of :mod:`nest_cp.model.exits`; a reader that stops reading early
(``nest-cp solve -o plan.json | head -1``) does not change them (:class:`_ReaderMayLeave`).
"""

from __future__ import annotations

import io
import logging
import os
import sys
import time

import click

from nest_cp.cli.calibrate import calibrate_command
from nest_cp.cli.evaluate import evaluate_command
from nest_cp.cli.instance import instance
from nest_cp.cli.plans import export_command, show_command
from nest_cp.cli.solve import solve_command
from nest_cp.cli.sweep import sweep_command
from nest_cp.harness.compare import compare_command
from nest_cp.model.exits import GuardedGroup
from nest_cp.verify.cli import soak_command, table_command, verify_command


class _ReaderMayLeave(io.RawIOBase):
    """Standard output whose reader may close the pipe: the rest of the output is dropped.

    Whether ``head -1`` has exited before a command's last write is a race, so a closed
    pipe must not decide the exit code (click would turn BrokenPipeError into exit 1, "no
    plan"), nor print a traceback.  Files are written before anything is printed, so the
    command's own code (0 for a plan written) is the deterministic answer.
    """

    def __init__(self, fd: int):
        super().__init__()
        self._fd = fd
        self._reader_left = False

    def writable(self) -> bool:
        return True

    def fileno(self) -> int:
        return self._fd

    def isatty(self) -> bool:
        return os.isatty(self._fd)

    def write(self, data) -> int:
        if not self._reader_left:
            try:
                return os.write(self._fd, data)
            except BrokenPipeError:
                self._reader_left = True
        return len(data)


def _let_the_reader_leave() -> bool:
    """Put :class:`_ReaderMayLeave` under the process's stdout (not under a test runner's);
    whether it did, i.e. whether the command runs as its own process."""
    stream = sys.stdout
    if stream is None or stream is not sys.__stdout__ or not isinstance(stream, io.TextIOWrapper):
        return False
    stream.flush()
    sys.stdout = io.TextIOWrapper(io.BufferedWriter(_ReaderMayLeave(stream.fileno())),
                                  encoding=stream.encoding, errors=stream.errors,
                                  line_buffering=stream.line_buffering)
    return True


def _process_age_s() -> float:
    """Seconds since this process started (Linux /proc; 0 where it cannot be read): the
    interpreter's start-up and imports, which a command's --time-limit counts too."""
    try:
        with open("/proc/self/stat") as stat, open("/proc/uptime") as uptime:
            start_ticks = int(stat.read().rsplit(")", 1)[1].split()[19])  # field 22
            up_s = float(uptime.read().split()[0])
        return max(0.0, up_s - start_ticks / os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError, IndexError):
        return 0.0


class _MainGroup(GuardedGroup):
    """The ``nest-cp`` group: :func:`_let_the_reader_leave` before anything is printed."""

    def main(self, *args, **kwargs):
        """Also hands the commands ``obj["started"]``, the ``time.monotonic()`` the command
        started at: the process's start when it runs as its own process, now under a test
        runner (whose process started long before)."""
        own_process = _let_the_reader_leave()
        started = time.monotonic() - (_process_age_s() if own_process else 0.0)
        kwargs.setdefault("obj", {"started": started})
        return super().main(*args, **kwargs)


@click.group(cls=_MainGroup)
@click.version_option(package_name="nest-cp")
@click.option("-v", "--verbose", count=True, help="Log progress (-v) or details (-vv).")
def main(verbose: int) -> None:
    """Plan distributed training: parallelism, memory and placement, certified."""
    level = logging.WARNING if verbose == 0 else logging.INFO if verbose == 1 else logging.DEBUG
    logging.basicConfig(level=level, format="%(levelname)s %(name)s: %(message)s")


for command in (instance, evaluate_command, solve_command, export_command, show_command,
                calibrate_command, verify_command, table_command, compare_command, soak_command,
                sweep_command):
    main.add_command(command)
