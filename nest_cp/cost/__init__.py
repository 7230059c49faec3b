"""Floor 3, the cost model: a plan priced in integer ticks (docs/ says how).

- :mod:`.terms`: every primitive cost term, rounded up to ticks once;
- :mod:`.sdp`: the pricing of subnetwork data parallelism (masks, coverage, T_eff);
- :mod:`.evaluate`: the one plan evaluator, the referee every backend's plan must match
  to the tick.

Imports only :mod:`nest_cp.model`.
"""
