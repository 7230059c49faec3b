"""What each training launcher checks at startup, one module per launcher, each rule cited.

A rule is a predicate over plain values (degrees, batch sizes, argument values,
environment), never over a plan or an instance object, so the exporters
(:mod:`nest_cp.cli.export`) check what they write against it and a search can test a
candidate plan with the same predicate.  Every rule names the launcher's file, function
and assertion at a pinned commit: what it checks is what that code asserts.

- :mod:`.megatron`: Megatron-LM's argument validation (``validate_args``), its
  microbatch calculator and Megatron-FSDP's requirements;
- :mod:`.deepspeed`: DeepSpeed's batch assertion, its pipeline engine and AutoTP;
- :mod:`.torchtitan`: torchtitan's parallel dimensions, batch arithmetic and the models it
  builds.

A launcher that builds the model itself from a shipped table (torchtitan) reads the priced
architecture as :class:`ModelFacts`, plain values the instance model fills in from its
``workload.model`` record.
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


@dataclass(frozen=True, slots=True)
class ModelFacts:
    """The priced model as a launcher's model lookup compares it (instance model ModelShape).

    ``llama`` is true for a Llama-style decoder: RMSNorm, SwiGLU, rotary positions, no
    biases, no dropout, untied output, plain multi-head (grouped-query) attention with
    heads x head_dim = hidden; ``num_experts`` > 1 for a mixture of experts of ``top_k``
    experts per token, each of width ``expert_ffn_hidden``.  ``description`` is the
    record's one line, for messages.
    """

    name: str
    num_layers: int
    hidden: int
    heads: int
    kv_heads: int
    ffn_hidden: int
    vocab: int
    llama: bool
    num_experts: int = 1
    top_k: int = 1
    expert_ffn_hidden: int = 0
    description: str = ""


def violations(rules: tuple[Rule, ...], subject: object) -> list[str]:
    """'name: what fails (source)' for every rule ``subject`` breaks, in rule order."""
    found = []
    for rule in rules:
        problem = rule.problem(subject)
        if problem is not None:
            found.append(f"{rule.name}: {problem} ({rule.source})")
    return found


__all__ = ["ModelFacts", "Rule", "violations"]
