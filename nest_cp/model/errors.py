"""Domain errors of nest-cp.

Every failure a user can cause (a malformed file, an inconsistent plan, an
option a backend cannot honour) is a :class:`NestCpError`, so the command line
prints a single line and exits with code 2 instead of a traceback.  An
:class:`InternalError` is nest-cp's own fault (a backend's answer the evaluator
rejects) and exits with code 3; :mod:`nest_cp.model.exits` decides every exit code.
"""

from __future__ import annotations


class NestCpError(Exception):
    """Base class of every error nest-cp raises on purpose."""


class InstanceFormatError(NestCpError, ValueError):
    """An instance (or one of the files it references) is malformed.

    The message names the file, the field (a dotted path such as
    ``cluster.tiers[1].size``) and what was expected.
    """

    def __init__(self, message: str, *, file: str | None = None, field: str | None = None):
        self.file = file
        self.field = field
        self.detail = message
        where = ": ".join(part for part in (file, field) if part)
        super().__init__(f"{where}: {message}" if where else message)


class PlanFormatError(InstanceFormatError):
    """A plan file is malformed (wrong JSON shape, wrong types)."""


class InternalError(NestCpError):
    """A bug of nest-cp, never the user's input: a backend's answer the evaluator rejects."""


class InvalidPlan(InternalError, ValueError):
    """A backend returned a plan that does not fit, or does not evaluate to its objective."""


class ModelMismatch(InternalError):
    """An exact solver's proven objective or bound differs from the evaluator's: a model bug."""


class BackendOptionError(NestCpError, ValueError):
    """A backend cannot run with the options given (e.g. brute force over too many placements).

    ``option`` names the option at fault as a :class:`nest_cp.model.result.SolveOptions` field
    or ``extra`` key (``"degrees"``), so the command line can blame the user's flag.
    """

    def __init__(self, message: str, *, option: str | None = None):
        self.option = option
        super().__init__(message)


class InfeasibleInstance(NestCpError):
    """No plan of the searched space fits in memory; ``reason`` says by how much at best."""

    def __init__(self, reason: str):
        self.reason = reason
        super().__init__(reason)
