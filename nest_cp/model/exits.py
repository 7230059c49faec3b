"""The exit-code contract of every ``nest-cp`` command, decided in one place.

====  =====================================================================
code  meaning
====  =====================================================================
0     a plan (or a feasible evaluation, a certified run, a written file)
1     an answer that is not a plan: no plan fits, a plan over memory, a
      certificate that failed, a solve that stopped without a plan
2     bad input or option: a malformed or inconsistent file, an option the
      backend cannot honour; one line on stderr naming file, field and
      what was expected
3     internal error: a backend's answer the evaluator rejects (a bug)
130   interrupted (Ctrl-C)
====  =====================================================================

A closed stdout (``nest-cp solve inst.json -o plan.json | head``) is no error: files are
written before anything is printed, the rest of the output is dropped, and the code is
the command's own.

:func:`exit_code_for` maps an exception to its code and :func:`error_line` to
its one line; :class:`GuardedCommand` and :class:`GuardedGroup` apply both to
every click command, including click's own usage errors, which are reduced to
one line instead of click's usage block.
"""

from __future__ import annotations

import logging
import sys
from enum import IntEnum

import click

from nest_cp.model.errors import InternalError, NestCpError

logger = logging.getLogger(__name__)


class ExitCode(IntEnum):
    OK = 0
    NO_PLAN = 1
    BAD_INPUT = 2
    INTERNAL = 3
    INTERRUPTED = 130


def exit_code_for(error: BaseException) -> ExitCode:
    """The exit code of a command that stopped with ``error``."""
    if isinstance(error, KeyboardInterrupt | click.exceptions.Abort):
        return ExitCode.INTERRUPTED
    if isinstance(error, InternalError):
        return ExitCode.INTERNAL
    if isinstance(error, NestCpError | click.ClickException | OSError):
        return ExitCode.BAD_INPUT
    return ExitCode.INTERNAL


def error_line(error: BaseException) -> str:
    """One line for stderr: ``error: ...``, ``internal error: ...`` or ``interrupted``."""
    code = exit_code_for(error)
    if code is ExitCode.INTERRUPTED:
        return "interrupted"
    if isinstance(error, click.ClickException):
        text = error.format_message()
        if isinstance(error, click.UsageError) and error.ctx is not None:
            text = f"{error.ctx.command_path}: {text}"
    elif isinstance(error, OSError) and not isinstance(error, NestCpError):
        text = f"{error.filename or ''}: {error.strerror or error}"
    else:
        text = str(error) or type(error).__name__
    text = " ".join(text.split())  # one line, whatever the message held
    prefix = "internal error" if code is ExitCode.INTERNAL else "error"
    return f"{prefix}: {text}"


def _guarded_main(command: click.Command, args, prog_name, complete_var, standalone_mode,
                  extra: dict):
    """Run ``command`` with click's standalone handling replaced by the contract above."""
    try:
        result = click.Command.main(command, args, prog_name, complete_var,
                                    standalone_mode=False, **extra)
    except click.exceptions.Exit as done:  # --help, --version
        result = done.exit_code
    except (Exception, KeyboardInterrupt) as error:  # noqa: BLE001 - every error gets a code
        if not standalone_mode:
            raise
        if exit_code_for(error) is ExitCode.INTERNAL:
            logger.debug("internal error", exc_info=error)  # the traceback, with -vv
        click.echo(error_line(error), err=True)
        sys.exit(exit_code_for(error))
    if not standalone_mode:
        return result
    sys.exit(result if isinstance(result, int) else ExitCode.OK)


class GuardedCommand(click.Command):
    """A click command whose errors follow the exit-code contract."""

    def main(self, args=None, prog_name=None, complete_var=None, standalone_mode=True,
             **extra):
        return _guarded_main(self, args, prog_name, complete_var, standalone_mode, extra)


class GuardedGroup(click.Group):
    """A click group whose errors (its own and its commands') follow the contract."""

    command_class = GuardedCommand

    def main(self, args=None, prog_name=None, complete_var=None, standalone_mode=True,
             **extra):
        return _guarded_main(self, args, prog_name, complete_var, standalone_mode, extra)


GuardedGroup.group_class = GuardedGroup
