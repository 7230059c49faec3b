"""The structured DP planner (DESIGN §4, §5): exact optimum of structured space v2 in seconds.

``solve(instance, options) -> SolveResult`` is the ``dp`` backend.  See
:mod:`nest_cp.dp.planner` for the outer choices, the bounds and the tie rule;
:mod:`nest_cp.dp.suffix` for plain 1F1B (v = 1, the min-max recurrence over pipeline
suffixes) and :mod:`nest_cp.dp.interleaved` for interleaved 1F1B (v > 1, block counting,
or :mod:`nest_cp.dp.enumeration` of every split), each with its correctness argument;
:mod:`nest_cp.dp.kernel` for the min-max table, :mod:`nest_cp.dp.geometry` for what a
rank layout places where, :mod:`nest_cp.dp.compose` for chunk time, sync and memory of
layer ranges and :mod:`nest_cp.dp.pricing` for the tick-exact per-layer tables.
"""

from nest_cp.dp.planner import solve

__all__ = ["solve"]
