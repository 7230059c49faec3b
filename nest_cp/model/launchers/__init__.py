"""What each training launcher checks at startup, one module per launcher, each rule cited.

A rule is a predicate over plain values (degrees, batch sizes, argument values,
environment), never over a plan or an instance object, so the exporters
(:mod:`nest_cp.cli.export`) check what they write against it and a search can test a
candidate plan with the same predicate.  Every rule names the launcher's file, function
and assertion at a pinned commit: what it checks is what that code asserts.

- :mod:`.megatron`: Megatron-LM's argument validation (``validate_args``), its
  microbatch calculator and Megatron-FSDP's requirements;
- :mod:`.deepspeed`: DeepSpeed's batch assertion, its pipeline engine and AutoTP;
- :mod:`.torchtitan`: torchtitan's parallel dimensions and batch arithmetic.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

Subject = TypeVar("Subject")


@dataclass(frozen=True, slots=True)
class Rule(Generic[Subject]):
    """One startup check: ``problem(subject)`` is None when it passes, else what fails.

    ``source`` cites the launcher code that asserts it (repository, file, function and the
    assertion's own words, at a pinned commit).
    """

    name: str
    source: str
    problem: Callable[[Subject], str | None]


def violations(rules: tuple[Rule, ...], subject: object) -> list[str]:
    """'name: what fails (source)' for every rule ``subject`` breaks, in rule order."""
    found = []
    for rule in rules:
        problem = rule.problem(subject)
        if problem is not None:
            found.append(f"{rule.name}: {problem} ({rule.source})")
    return found


__all__ = ["Rule", "violations"]
