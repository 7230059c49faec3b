"""One replica's path: a cheap lower bound, and the uniform plan it suggests.

Bound.  Covers the *main* plans of a shape (c, b, S, d, z) on a block chain: every
intra-layer group on its innermost admitting tier k_min
(:mod:`nest_cp.solvers.certify.geometry`).  Claim: every such plan has
T >= (m + S − 1)·τ_path + σ_lb, with σ_lb the placement-free sync bound
(:meth:`nest_cp.solvers.certify.bounds.FastBounds.bound`) and τ_path from the search
below; τ_path = +inf (no main plan) when no replica path exists.

Proof.  Fix a main plan P, any replica r, and write c_s for the blocks stage s
holds (:mod:`nest_cp.solvers.certify.split`: the counts determine every stage's
layers up to identical blocks).

1. By the replica-path lemma (geometry), r's boundary classes form a path of
   arcs from a start node, and give stage s the combo (c_in, c_out) of its arc.
2. For stage s of r, τ(s, r) (DESIGN §3, §3.2 a, f) is at least the
   ``combo_rows`` entry at c_s: compute and the mode's rerun are the evaluator's
   integers (chain); every collective of a present family costs its slowest group,
   and all groups lie on k_min, so it costs at least its tier-k_min price (chain
   prices a group with the most ring channels its size allows there, cost model
   §5 a; forward ones twice under full recomputation; with ``tp_comm_overlap``, TP
   on tier 0 at the exposed part, §5 e, which chain's "TP overlap" lemma shows is
   still at most what the stage replica pays); the activation received from s − 1 costs
   its slowest pair, at least the pair of the largest tier c_in (a max is at least
   each of its terms — tiers need not be monotone in price), with the sender's
   last layer one of ``_possible_senders`` (the row takes the least); likewise the
   gradient from s + 1 on c_out with s's own last layer; ZeRO-3 gathers (>= 0) are
   dropped.  The mode is one that fits in memory at stage s (k_s = min(S − s, m),
   §3), and the row is the least over those modes.  Suffix minima over counts
   only lower a row, so every row is non-decreasing and still <= the real value.
3. Let cap = τ_max(P) (§3: the largest τ(s, r') over stages and replicas), so
   τ(s, r) <= cap for every s.  By 2, c_s <= x_s(cap), the most blocks whose row
   value is <= cap (non-decreasing rows: a prefix of counts); and c_s is at least
   the fewest the stage must hold, so no stage of r's path is -1.  Hence the
   longest-path DP over arcs (its value at a node is the most blocks a path from
   there can hold) gives >= Σ_s c_s = n along r's path: ``holds(cap)``.
4. ``holds`` is monotone in the cap, and changes only at values that occur in
   some row, so the least row value v with ``holds(v)`` (binary search over all
   of them) is <= cap = τ_max(P).  No arc at all means no replica path, so by 1 no
   main plan: +inf (``self.rows`` is then empty).
5. T(P) = (m + S − 1)·τ_max(P) + T_sync(P) (§3) and T_sync(P) >= σ_lb, which
   bounds every plan of the shape.  ∎

Packing and the other replicas are ignored here; the relaxation
(:mod:`nest_cp.solvers.certify.relax`) adds them.

Suggestion (not a bound).  The path and split that attain τ_path, taken by every
replica, with each stage's sync on its cheapest admitting tier, is a relaxation
solution; :mod:`nest_cp.solvers.certify.realise` may place it, and only the
evaluator's price of the placed plan counts.
"""

from __future__ import annotations

import math

import numpy as np

from nest_cp.solvers.certify.geometry import NONE, Arc, Geometry
from nest_cp.solvers.certify.split import Catalogue, least_passing

INF = np.iinfo(np.int64).max // 4


class PathBound:
    """τ_path of one shape and the path and block counts attaining it."""

    def __init__(self, shape, geo: Geometry, fast, arcs: list[Arc],
                 floor: list[np.ndarray] | None = None):
        """``floor``: per stage, a non-decreasing row over block counts that τ_max is also
        at least (:mod:`~nest_cp.solvers.certify.syncpath`); every combo row is raised to
        it, so step 3 holds as long as the floor does."""
        self.shape, self.geo, self.fast, self.arcs = shape, geo, fast, arcs
        self.combos = sorted({combo for arc in arcs for _, combo in arc.combos()})
        self.rows = {combo: fast.combo_rows(shape, geo.k_min, combo) for combo in self.combos}
        if floor is not None:
            self.rows = {combo: [np.maximum(row, low) for row, low in zip(rows, floor,
                                                                          strict=True)]
                         for combo, rows in self.rows.items()}
        self._order = sorted(arcs, key=lambda a: -a.start)
        self._starts = geo.start_nodes()
        self.tau = self._search()

    def _search(self) -> float:
        if not self.rows:
            return math.inf  # no replica path exists: the shape has no main plan
        return least_passing(self.caps(), lambda cap: self._longest(cap)[0]
                             >= self.fast.chain.blocks)

    def caps(self) -> np.ndarray:
        """The finite stage times a cap can usefully take, ascending."""
        caps = np.unique(np.concatenate([np.stack(r).ravel() for r in self.rows.values()]))
        return caps[caps < INF]

    def most_blocks(self, cap: int) -> dict:
        """Per combination and stage, the most blocks a stage can hold under ``cap``."""
        return {combo: self.fast.largest_blocks(self.rows[combo], self.shape, cap)
                for combo in self.combos}

    def _longest(self, cap: int) -> tuple[int, dict]:
        """Most blocks one path can hold under ``cap``, and the best arc out of each node."""
        most = self.most_blocks(cap)
        value: dict = {}
        choice: dict = {}
        for arc in self._order:
            held = arc_blocks(arc, most)
            if held is None:
                continue
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


def arc_blocks(arc, most: dict) -> int | None:
    """The blocks an arc's stages hold, each at most ``most[combo][stage]`` (the largest count
    under a cap); None when one of them can hold none (the arc cannot be taken)."""
    held = 0
    for stage, combo in arc.combos():
        count = most[combo][stage]
        if count < 0:
            return None
        held += int(count)
    return held

