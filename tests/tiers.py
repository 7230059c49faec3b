"""The suite's two tiers. `make test` runs the fast one (`-m "not slow"`, a few minutes on two
cores); `make test-slow` runs the tests marked ``slow``, and CI runs both. A long cross-check
keeps its first seed in the fast tier, so every kind of instance is still checked on every
`make test`; its further seeds, and the 200-seed soak sample, wait for the slow tier (and
`make soak` draws 10,000 seeds of the same kinds)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import pytest

SLOW = pytest.mark.slow


def first_fast(values: Iterable) -> list:
    """``values`` for ``parametrize``: the first runs in the fast tier, the rest are slow."""
    values = list(values)
    return values[:1] + [pytest.param(value, marks=SLOW) for value in values[1:]]


def slow_unless(cases: Sequence[tuple], fast) -> list:
    """Tuple ``cases`` for ``parametrize``: those ``fast(case)`` accepts run in the fast tier,
    the others are slow."""
    return [case if fast(case) else pytest.param(*case, marks=SLOW) for case in cases]


def examples(fast: int, slow: int) -> list:
    """Example counts for ``parametrize`` of a test that runs a derandomized hypothesis check
    with that many examples: ``fast`` in the fast tier, ``slow`` in the slow one."""
    return [fast, pytest.param(slow, marks=SLOW)]
