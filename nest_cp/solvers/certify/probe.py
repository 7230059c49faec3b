"""The layout probe: candidate plans of a shape from placement classes wider than the
structured space, each priced by the evaluator (an upper-side step of the certificate).

Given a shape (c, b, S, d, z) and a split (its stages and recomputation), the probe lays
the ranks out by every layout of a fixed list of classes
(:mod:`nest_cp.solvers.certify.layouts`: device orders D, padded blocks Pad, replica blocks
R, stage blocks S, piecewise P), prices each placement with the evaluator and returns the
cheapest feasible plan.  Each candidate is a plan of the full space, so the cheapest one is
a valid upper end of the certificate whatever the bounds say; nothing here is a bound.

The split matters as much as the placement: each placement is first priced with the
given split, and the few cheapest are then re-split by steepest descent over one-layer
moves between stages (:meth:`LayoutProbe._climb`), each step priced by the evaluator.

The enumeration and the descent are fixed by the shape and the caps below (no clock, no
solver, no work units; ties go to the earlier candidate), so the probe finds the same plan
on any machine at any load.  Its cost is at most :data:`MAX_LAYOUTS` +
:data:`CLIMB_EVALUATIONS` evaluator calls per (shape, split).
"""

from __future__ import annotations

import dataclasses
import itertools
import logging
from dataclasses import dataclass

from nest_cp.cost.evaluate import Evaluator
from nest_cp.model.instance import HierarchicalNetwork, Strategy
from nest_cp.model.plan import Plan, Stage
from nest_cp.solvers.certify.layouts import device_orders, placements

logger = logging.getLogger(__name__)

CLASSES = ("D", "Pad", "R", "S", "P")  # in the order they are priced
MAX_BLOCK = 8               # R and S: inner blocks up to this size, and every divisor
MAX_PIECEWISE_STAGES = 16   # P only for S up to this
MAX_SEGMENTS = ((6, 3), (MAX_PIECEWISE_STAGES, 2))  # P: (S up to, segments at most)
MAX_LAYOUTS = 1000          # layouts enumerated (and at most priced) per (shape, split)
CLIMB_PLACEMENTS = 2        # the cheapest placements re-split by steepest descent
CLIMB_EVALUATIONS = 1000    # evaluations the re-splitting may spend per (shape, split)


@dataclass(frozen=True, slots=True)
class ProbeResult:
    """The cheapest plan the probe found (None: none below the limit), its evaluator price,
    the name of the layout it started from, and how many evaluations were spent."""

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
        """The cheapest feasible plan found at ``split``'s shape (``split``'s own placement
        is ignored): every class placement priced with ``split``'s stages, then the
        :data:`CLIMB_PLACEMENTS` cheapest re-split by :meth:`_climb`; ``below``: a plan is
        kept only if it costs less (None: any feasible plan).  ``priced`` counts the
        evaluations."""
        if not self.applies(split):
            return ProbeResult(None, None, None, 0)
        ranked, seen = [], set()
        for index, (name, placement) in enumerate(
                itertools.islice(self._candidates(split), MAX_LAYOUTS)):
            if placement is None or placement in seen:
                continue
            seen.add(placement)
            evaluation = self.evaluator.evaluate(split.with_placement(placement))
            if evaluation.feasible:
                ranked.append((evaluation.objective_ticks, index, name, placement))
        ranked.sort(key=lambda entry: entry[:2])
        best = ProbeResult(None, below, None, len(seen))
        left = CLIMB_EVALUATIONS
        for ticks, _, name, placement in ranked[:CLIMB_PLACEMENTS]:
            plan, ticks, left = self._climb(split.with_placement(placement), ticks, left)
            if best.ticks is None or ticks < best.ticks:
                best = ProbeResult(plan, ticks, name, best.priced)
        priced = len(seen) + CLIMB_EVALUATIONS - left
        return ProbeResult(best.plan, best.ticks if best.plan is not None else None,
                           best.layout, priced)

    def _climb(self, plan: Plan, ticks: int, left: int) -> tuple[Plan, int, int]:
        """Re-split ``plan`` on its placement by steepest descent: each round prices every
        move of one layer from a stage of two or more layers to another stage (the stages
        between shift by one layer; recomputation modes stay with the stage indices) and
        takes the cheapest feasible one if it is cheaper, until none is or ``left``
        evaluations are spent; returns the plan, its price and the evaluations left."""
        while left > 0:
            improved = None
            for stages in _moves(plan.stages):
                if left <= 0:
                    break
                left -= 1
                candidate = dataclasses.replace(plan, stages=stages)
                evaluation = self.evaluator.evaluate(candidate)
                if evaluation.feasible and evaluation.objective_ticks < (
                        ticks if improved is None else improved[0]):
                    improved = (evaluation.objective_ticks, candidate)
            if improved is None:
                break
            ticks, plan = improved
        return plan, ticks, left

    def _candidates(self, split: Plan):
        """(class and layout name, placement or None) in a fixed order: the classes of
        :data:`CLASSES`, P with the segment cap of :data:`MAX_SEGMENTS`."""
        stages = split.num_stages
        segments = next((most for up_to, most in MAX_SEGMENTS if stages <= up_to), 1)
        for name in CLASSES:
            for layout, placement in placements(name, split, self.devices, self.node,
                                                MAX_BLOCK, MAX_PIECEWISE_STAGES, segments):
                yield f"{name}: {layout}", placement


def _moves(stages: tuple[Stage, ...]):
    """Every split that moves one layer from stage ``source`` (of two or more layers) to
    stage ``target``, the stages' sizes otherwise kept, in (source, target) order."""
    sizes = [stage.last_layer - stage.first_layer + 1 for stage in stages]
    for source, target in itertools.permutations(range(len(stages)), 2):
        if sizes[source] < 2:
            continue
        moved = list(sizes)
        moved[source] -= 1
        moved[target] += 1
        first, out = stages[0].first_layer, []
        for stage, size in zip(stages, moved):
            out.append(Stage(first, first + size - 1, stage.recompute))
            first += size
        yield tuple(out)
