"""The structured DP planner (DESIGN §4, §5): exact optimum of the structured space in seconds.

``solve(instance, options) -> SolveResult`` is the ``dp`` backend; see :mod:`dp.planner` for
the state, the recurrence and the bounds, :mod:`dp.kernel` for the min-max table,
:mod:`dp.geometry` for what a rank layout places where and :mod:`dp.pricing` for the
tick-exact range prices.
"""

from dp.planner import solve

__all__ = ["solve"]
