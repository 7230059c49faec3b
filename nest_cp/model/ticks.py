"""Exact numbers and the one conversion from seconds to integer ticks (DESIGN §3).

Every float of an instance (seconds, bytes per second) is read as the decimal it
prints as (``Fraction(str(x))``), so 1e6 B / 1e10 B/s is exactly 1e-4 s; each
primitive cost term is rounded *up* to whole ticks once by :func:`to_ticks`, and
everything after that is integer arithmetic in every backend.
"""

from __future__ import annotations

import math
from fractions import Fraction


def exact(value: float | int) -> Fraction:
    """The exact decimal value of an instance number (``Fraction(str(x))``)."""
    if isinstance(value, int):
        return Fraction(value)
    return Fraction(str(value))


def to_ticks(seconds: Fraction, tick_s: float) -> int:
    """Seconds to integer ticks, rounded up: the one conversion every backend uses."""
    return math.ceil(Fraction(seconds) / exact(tick_s))


def ceil_div(numerator, denominator):
    """ceil(numerator / denominator) for non-negative integers (or int64 arrays), no floats."""
    return -(-numerator // denominator)
