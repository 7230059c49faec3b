"""The structured DP planner (DESIGN §4, §5): exact optimum of the structured space in seconds.

``solve(instance, options) -> SolveResult`` is the ``dp`` backend; see :mod:`nest_cp.dp.planner` for
the state, the recurrence and the bounds, :mod:`nest_cp.dp.kernel` for the min-max table,
:mod:`nest_cp.dp.geometry` for what a rank layout places where and :mod:`nest_cp.dp.pricing` for the
tick-exact range prices.
"""

from nest_cp.dp.planner import solve

__all__ = ["solve"]
