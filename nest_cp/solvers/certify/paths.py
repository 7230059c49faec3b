"""One replica's path: a cheap lower bound, and the uniform plan it suggests.

Bound (block chains, intra groups on their innermost tiers).  Every plan of the
shape has some replica, and τ_max is at least that replica's slowest stage, whose
price depends on the replica's combos (:mod:`nest_cp.solvers.certify.geometry`).  For a cap
on τ, each (stage, combo) can hold at most x blocks — the largest count whose
cheapest memory-feasible mode prices within the cap, transfers on the combo's
tiers (:meth:`nest_cp.solvers.certify.bounds.FastBounds.combo_rows`); the cap is feasible
iff some arc path holds all n blocks, a longest-path DP over the arcs.  Binary
search on the cap gives τ_path, and (m + S − 1)·τ_path + σ_lb bounds the shape
(σ_lb the placement-free sync bound).  Packing and the other replicas are
ignored; the relaxation (:mod:`nest_cp.solvers.certify.relax`) adds them.

Suggestion.  The path and split that attain τ_path, taken by every replica, with
each stage's sync on its cheapest admitting tier, is a relaxation solution; when
:mod:`nest_cp.solvers.certify.realise` places it and the evaluator prices it at the bound,
the shape is solved without a model.
"""

from __future__ import annotations

import math

import numpy as np

from nest_cp.solvers.certify.geometry import NONE, Arc, Geometry
from nest_cp.solvers.certify.split import Catalogue

INF = np.iinfo(np.int64).max // 4


class PathBound:
    """τ_path of one shape and the path and block counts attaining it."""

    def __init__(self, shape, geo: Geometry, fast, arcs: list[Arc]):
        self.shape, self.geo, self.fast, self.arcs = shape, geo, fast, arcs
        self.combos = sorted({combo for arc in arcs for _, combo in arc.combos()})
        self.rows = {combo: fast.combo_rows(shape, geo.k_min, combo) for combo in self.combos}
        self._order = sorted(arcs, key=lambda a: -a.start)
        self._starts = geo.start_nodes()
        self.tau = self._search()

    def _search(self) -> float:
        caps = np.unique(np.concatenate([np.stack(r).ravel() for r in self.rows.values()]))
        caps = caps[caps < INF]
        if caps.size == 0 or self._longest(int(caps[-1]))[0] < self.fast.chain.blocks:
            return math.inf
        low, high = 0, caps.size - 1
        while low < high:
            middle = (low + high) // 2
            if self._longest(int(caps[middle]))[0] >= self.fast.chain.blocks:
                high = middle
            else:
                low = middle + 1
        return int(caps[low])

    def _longest(self, cap: int) -> tuple[int, dict]:
        """Most blocks one path can hold under ``cap``, and the best arc out of each node."""
        most = {combo: self.fast.largest_blocks(self.rows[combo], self.shape, cap)
                for combo in self.combos}
        value: dict = {}
        choice: dict = {}
        for arc in self._order:
            held = 0
            for stage, combo in arc.combos():
                blocks = most[combo][stage]
                if blocks < 0:
                    break
                held += int(blocks)
            else:
                if arc.end_class == NONE:
                    rest = 0
                else:
                    rest = value.get(arc.next_node, -1)
                    if rest < 0:
                        continue
                if held + rest > value.get(arc.node, -1):
                    value[arc.node], choice[arc.node] = held + rest, (arc, most)
        return max(value.get(start, -1) for start in self._starts), choice

    def solution(self, catalogue: Catalogue, sync_class) -> dict | None:
        """The relaxation solution every replica taking the best path (None if not built).

        ``sync_class(stage, name, option, runs)`` picks the tier of a stage's sync term;
        ``runs`` are the run lengths per capacity level through the stage.
        """
        if math.isinf(self.tau):
            return None
        best, choice = self._longest(int(self.tau))
        node = next(start for start in self._starts if start in choice)
        path = []
        while True:
            arc, most = choice[node]
            path.append(arc)
            if arc.end_class == NONE:
                break
            node = arc.next_node
        largest = [0] * self.shape.num_stages
        for arc in path:
            for stage, combo in arc.combos():
                largest[stage] = int(most[combo][stage])
        counts = _balanced(largest, [catalogue.min_blocks(s) for s in range(len(largest))],
                           catalogue.chain.blocks)
        options = []
        for stage, blocks in enumerate(counts):
            fitting = [o for o in catalogue.options[stage] if o.blocks == blocks]
            if not fitting:
                return None
            options.append(fitting[0])  # modes in order none, selective, full: least rerun
        runs = {stage: arc.runs for arc in path for stage, _ in arc.combos()}
        classes = {}
        for stage, option in enumerate(options):
            for name in ("dense", "expert", "g"):
                tier = sync_class(stage, name, option, runs[stage])
                if tier is not None:
                    classes[f"{name}_{stage}"] = tier
        return {"options": options, "flows": {arc: self.shape.dp for arc in path},
                "classes": classes}


def _balanced(largest: list[int], lowest: list[int], total: int) -> list[int]:
    """Counts within [lowest, largest] summing to ``total``, taking from the largest first
    (balanced stages keep the largest stage's sync small)."""
    counts = list(largest)
    excess = sum(counts) - total
    while excess > 0:
        stage = max((s for s in range(len(counts)) if counts[s] > lowest[s]),
                    key=lambda s: (counts[s], -s))
        counts[stage] -= 1
        excess -= 1
    return counts
