"""The raised plans' path bound: replica paths cut at the stages whose groups are raised.

Bound.  Covers the *raised* plans of a shape (c, b, S, d, z) on a block chain: some
intra-layer group of a present family f lies above k_min[f]
(:mod:`nest_cp.solvers.certify.geometry`).  Claim: every such plan has
T >= (m + S − 1)·τ_rp + σ_lb, σ_lb the placement-free sync bound and τ_rp the search
below (+inf when no family can be raised).  The raised bound of
:mod:`nest_cp.solvers.certify.bounds` values every stage but one at its cheapest
transfers, so it misses what the path bound (:mod:`nest_cp.solvers.certify.paths`)
charges a main plan for the runs of stages that cannot share a node; this bound charges
it on every stretch of the replica whose groups all lie on k_min.

Terms.  In a plan, stage s of replica r is *raised* when some group of some family f of
that stage replica lies above k_min[f], else *main*.  A *segment* of r is a maximal
run of consecutive main stages.

Lemma (segment breaks).  A boundary between a main stage s and a raised stage s' = s ± 1
of the same replica has class >= 1.  Proof: let G' be a raised group of family f at s'
(on a tier k' > k := k_min[f]) and G the group of s with the same rank indices j (the
pairs of a boundary join rank j to rank j, DESIGN §3); G lies on k (s is main), so in one
tier-k domain D.  If the boundary had class 0, every device of G' would share a tier-0
domain with its partner in G, hence lie in D (domains are nested blocks), and G' would
lie on a tier <= k: a contradiction.  ∎

Proof of the bound.  Fix a raised plan P and a replica r holding a raised stage;
cap = τ_max(P) >= τ(s, r) for every s (§3).

1. Segments are paths.  Cut r's stages at its raised stages.  The replica-path lemma
   (geometry) holds for every segment on its own: its proof uses only that the
   stages of a run are main (their joined groups lie on k_min) and that consecutive
   ones are joined by boundaries of class <= ℓ; a segment's runs are such runs, only
   shorter where a raised stage cuts them, and shortening a run never breaks
   run·J_ℓ <= G_ℓ.  So the first segment (from stage 0, if stage 0 is main) is a path
   of :func:`~nest_cp.solvers.certify.geometry.replica_arcs` from a start node, and a
   segment starting at s0 >= 1 (after a raised stage) a path of
   :func:`~nest_cp.solvers.certify.geometry.segment_arcs` from the fresh node at s0:
   no runs before (the run through the raised stage is cut), sides not tracked, and
   its first in-class FREE, any class >= 1 (segment breaks lemma).  A segment that a
   raised stage ends has its last boundary of class >= 1 (same lemma), so it ends
   with an arc of some end class >= 1, as a cut path of arcs does.
2. Main stages.  A stage of a segment gets the combo of its arc; exactly as step 2 of
   :mod:`~nest_cp.solvers.certify.paths`, τ(s, r) is at least its ``combo_rows``
   entry at c_s; for the FREE in-class the row is the least over the classes >= 1
   admitting a pair, at most the row of the real class.
3. Raised stages.  A raised stage s pays some family f on a tier above k_min[f]:
   τ(s, r) >= ``stage_tau`` with that family raised (the raised bound's argument,
   bounds module docstring), at least the least over families; these rows are
   :meth:`~nest_cp.solvers.certify.bounds.FastBounds._tau_row` cut to the modes
   that fit, non-decreasing in the count.
4. So every stage s has c_s <= its largest count within cap (the row of its role),
   and r is a sequence, over stages 0..S−1, of segments and raised stages with at
   least one raised stage: the DP below (``_held``) maximises Σ largest counts over
   every such sequence, so it reaches >= Σ c_s = n: ``holds(cap)``.  ``holds`` is
   monotone in the cap and changes only at row values, so the least row value that
   holds (binary search over all of them) is <= τ_max(P).
5. T(P) = (m + S − 1)·τ_max(P) + T_sync(P) and T_sync(P) >= σ_lb.  ∎

Both this bound and the raised bound of ``bounds`` hold for every raised plan; the
search keeps the larger.
"""

from __future__ import annotations

import math

import numpy as np

from nest_cp.solvers.certify.geometry import FREE, FRESH, NONE, Arc, Geometry, segment_arcs
from nest_cp.solvers.certify.split import least_passing

INF = np.iinfo(np.int64).max // 4


class RaisedPathBound:
    """τ_rp of one shape on a block chain (module docstring); ``tau`` is +inf when no
    family can be raised or no sequence of segments and raised stages fits."""

    def __init__(self, shape, geo: Geometry, fast, arcs: list[Arc]):
        self.shape, self.geo, self.fast = shape, geo, fast
        self.arcs = list(arcs) + segment_arcs(shape.num_stages, geo)
        combos = sorted({combo for arc in self.arcs for _, combo in arc.combos()})
        pair_classes = [t.index for t in geo.tiers if t.index >= 1 and t.admits(2)]
        self.rows = {}
        for combo in combos:
            if combo[0] == FREE:
                if not pair_classes:
                    continue
                rows = [fast.combo_rows(shape, geo.k_min, (k, combo[1])) for k in pair_classes]
                self.rows[combo] = [np.min(np.stack(column), axis=0) for column in zip(*rows)]
            else:
                self.rows[combo] = fast.combo_rows(shape, geo.k_min, combo)
        self.raised_rows = self._raised_rows()
        self._order = sorted(self.arcs, key=lambda a: -a.start)
        self._starts = geo.start_nodes()
        self.tau = self._search()

    def _raised_rows(self) -> list[np.ndarray] | None:
        """Per stage, the least over families of its raised τ row (module docstring, 3)."""
        fast, shape = self.fast, self.shape
        found = None
        for family, lowest in self.geo.k_min.items():
            rows = fast._stage_rows(shape, lambda kind, mode, r=(family, lowest):
                                    fast._tau_row(kind, mode, r))
            found = rows if found is None else [np.minimum(a, b) for a, b in zip(found, rows)]
        return found

    def _search(self) -> float:
        if self.raised_rows is None:
            return math.inf  # no family to raise: the shape has no raised plan
        values = [np.stack(self.raised_rows).ravel()] + \
            [np.stack(rows).ravel() for rows in self.rows.values()]
        caps = np.unique(np.concatenate(values))
        caps = caps[caps < INF]
        blocks = self.fast.chain.blocks
        return least_passing(caps, lambda cap: self._held(cap) >= blocks)

    def _held(self, cap: int) -> int:
        """Most blocks a replica with at least one raised stage can hold under ``cap``
        (-1: none), over every sequence of segments and raised stages (proof, step 4).

        raised[p]: a raised stage at p, then anything; after[p]: the best start at p
        after a raised stage (another raised stage or a fresh segment, 0 at the end);
        value[node, pending]: a segment from ``node`` to its end, then (if not the end)
        a raised stage; ``pending``: no raised stage yet, so the chain may not end."""
        fast, shape = self.fast, self.shape
        num_stages = shape.num_stages
        most = {combo: fast.largest_blocks(rows, shape, cap) for combo, rows in self.rows.items()}
        raised_most = fast.largest_blocks(self.raised_rows, shape, cap)
        raised = [-1] * (num_stages + 1)
        after = [-1] * (num_stages + 1)
        after[num_stages] = 0
        value: dict = {}
        zeros = (0,) * (self.geo.levels - 1)
        index = 0
        for position in reversed(range(num_stages)):
            if raised_most[position] >= 0 and after[position + 1] >= 0:
                raised[position] = int(raised_most[position]) + after[position + 1]
            while index < len(self._order) and self._order[index].start == position:
                self._relax_arc(self._order[index], most, raised, value)
                index += 1
            fresh = value.get(((position, zeros, FRESH), False), -1)
            after[position] = max(raised[position], fresh)
        starts = [value.get((start, True), -1) for start in self._starts]
        return max([raised[0], *starts])

    def _relax_arc(self, arc: Arc, most: dict, raised: list[int], value: dict) -> None:
        held = 0
        for stage, combo in arc.combos():
            row = most.get(combo)
            if row is None or row[stage] < 0:
                return
            held += int(row[stage])
        end = arc.start + arc.length
        for pending in (False, True):
            if arc.end_class == NONE:
                rest = -1 if pending else 0
            else:
                rest = max(value.get((arc.next_node, pending), -1), raised[end])
            if rest >= 0 and held + rest > value.get((arc.node, pending), -1):
                value[(arc.node, pending)] = held + rest
