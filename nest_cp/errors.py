"""Domain errors of nest-cp.

Every failure a user can cause (a malformed file, an inconsistent plan) is one
of these, so the CLI can print a single line and exit with code 2 instead of a
traceback.
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


class InvalidPlan(NestCpError, ValueError):
    """A plan is well-formed but does not fit the instance (a solver bug if a backend made it)."""


class BackendOptionError(NestCpError, ValueError):
    """A backend cannot run with the options given (e.g. brute force over too many placements)."""


class InfeasibleInstance(NestCpError):
    """No plan of the searched space fits in memory; ``reason`` says by how much at best."""

    def __init__(self, reason: str):
        self.reason = reason
        super().__init__(reason)
