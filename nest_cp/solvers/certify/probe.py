"""The layout probe: candidate plans of a shape from placement classes wider than the
structured space, each priced by the evaluator (an upper-side step of the certificate).

Given a shape (c, b, S, d, z) and a split (its stages and recomputation), the probe lays
the ranks out by every layout of a fixed list of classes
(:mod:`nest_cp.solvers.certify.layouts`: device orders D, padded blocks Pad, replica blocks
R, stage blocks S, piecewise P), prices each placement with the evaluator and returns the
cheapest feasible plan.  Each candidate is a plan of the full space, so the cheapest one is
a valid upper end of the certificate whatever the bounds say; nothing here is a bound.

The enumeration is fixed by the shape and the caps below (no clock, no solver, no work
units), so the probe finds the same plan on any machine at any load.  Its cost is the
evaluator's price of at most :data:`MAX_LAYOUTS` placements per (shape, split).
"""

from __future__ import annotations

import itertools
import logging
from dataclasses import dataclass

from nest_cp.cost.evaluate import Evaluator
from nest_cp.model.instance import HierarchicalNetwork, Strategy
from nest_cp.model.plan import Plan
from nest_cp.solvers.certify.layouts import device_orders, placements

logger = logging.getLogger(__name__)

CLASSES = ("D", "Pad", "R", "S", "P")  # in the order they are priced
MAX_BLOCK = 8               # R and S: inner blocks up to this size, and every divisor
MAX_PIECEWISE_STAGES = 16   # P only for S up to this
MAX_SEGMENTS = ((6, 3), (MAX_PIECEWISE_STAGES, 2))  # P: (S up to, segments at most)
MAX_LAYOUTS = 2000          # layouts enumerated (and at most priced) per (shape, split)


@dataclass(frozen=True, slots=True)
class ProbeResult:
    """The cheapest plan the probe found, its evaluator price and its layout's name, and how
    many distinct placements were priced."""

    plan: Plan | None
    ticks: int | None
    layout: str | None
    priced: int


class LayoutProbe:
    """The probe for one instance: its evaluator and device orders, reused across shapes."""

    def __init__(self, evaluator: Evaluator):
        network = evaluator.instance.cluster.network
        self.evaluator = evaluator
        self.hierarchical = isinstance(network, HierarchicalNetwork)
        if self.hierarchical:
            self.node = network.tiers[0].size
            self.devices = device_orders(network, evaluator.instance.cluster.num_devices)

    def applies(self, plan: Plan) -> bool:
        """Whether the classes place this plan: a hierarchical network, plain data
        parallelism, v = 1, c = 1 (the layouts order t, e, stage and replica only)."""
        return (self.hierarchical and plan.strategy is Strategy.DP and plan.virtual_stages == 1
                and plan.config.cp == 1)

    def best(self, split: Plan, below: int | None = None) -> ProbeResult:
        """The cheapest feasible plan with ``split``'s shape and stages over the classes'
        placements (``split``'s own placement is ignored); ``below``: the plan is kept
        only if it costs less (None: any feasible plan)."""
        if not self.applies(split):
            return ProbeResult(None, None, None, 0)
        best_plan, best_ticks, best_layout = None, below, None
        seen: set = set()
        for name, placement in itertools.islice(self._candidates(split), MAX_LAYOUTS):
            if placement is None or placement in seen:
                continue
            seen.add(placement)
            plan = split.with_placement(placement)
            evaluation = self.evaluator.evaluate(plan)
            if evaluation.feasible and (best_ticks is None or
                                        evaluation.objective_ticks < best_ticks):
                best_plan, best_ticks, best_layout = plan, evaluation.objective_ticks, name
        return ProbeResult(best_plan, best_ticks if best_plan is not None else None,
                           best_layout, len(seen))

    def _candidates(self, split: Plan):
        """(class and layout name, placement or None) in a fixed order: the classes of
        :data:`CLASSES`, P with the segment cap of :data:`MAX_SEGMENTS`."""
        stages = split.num_stages
        segments = next((most for up_to, most in MAX_SEGMENTS if stages <= up_to), 1)
        for name in CLASSES:
            for layout, placement in placements(name, split, self.devices, self.node,
                                                MAX_BLOCK, MAX_PIECEWISE_STAGES, segments):
                yield f"{name}: {layout}", placement
