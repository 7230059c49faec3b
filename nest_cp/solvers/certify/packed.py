"""The packed path bound: the path bound with every replica's runs packed into domains.

Covers the *main* plans of a shape (c, b, S, d, z) on a block chain, like the path
bound (:mod:`nest_cp.solvers.certify.paths`), whose search it extends with one
counting argument over all d replicas at once.  It is the cheap stand-in for the
relaxation's packing rows (:mod:`nest_cp.solvers.certify.relax`, step 4) where that
model does not finish: e.g. at 512 H100s, S = 14 and d = 36, one replica may keep
its stages in two runs of 7 per 8-device node, but 36 replicas cannot (72 runs of 7
devices, 64 nodes).

Claim.  For a capacity level ℓ whose joined ranks are all a ranks of a stage
(J_ℓ = a) and any weights u >= 0 on item sizes, let w(D) be the most weight a set
of items of total size <= |D| can have (an unbounded knapsack over the sizes that
occur) and B = Σ over tier-ℓ domains D of w(D).  Let W(cap) be the least weight
Σ u(|R|·a) over the level-ℓ runs R of a replica path (:func:`replica_arcs`) that
holds the chain's n blocks under ``cap`` (``PathBound._longest``'s rows).  Then
every main plan has τ_max >= the least row value cap with ``holds(cap)`` (the path
bound's condition) and d·W(cap) <= B; so T >= (m + S − 1)·that + σ_lb.

Proof.  Fix a main plan P and let cap = τ_max(P).

1. Every replica r's boundary classes form a path of arcs holding its stage counts
   (c_s), with c_s <= the row's largest count under cap (the path bound's proof,
   steps 1-3); so the path holds >= n blocks under cap and its weight is >= W(cap)
   (W is the least over all such paths).
2. Items (geometry's lemma and its remark): every maximal level-ℓ run R of r — the
   run an arc *emits* at ℓ, of ``runs[ℓ]`` stages — gives a/J_ℓ = 1 item: the a
   ranks of its |R| stages, |R|·a distinct devices inside one tier-ℓ domain.  With
   J_ℓ = a no run is cut early: the stage's a ranks lie in one tier-ℓ domain (its
   joined groups lie on tiers <= ℓ), so a break of class > ℓ has every pair leave
   that domain, not just some.  Items of different runs or replicas are disjoint
   (the placement is injective, DESIGN §2).
3. Each item lies in one tier-ℓ domain, and the items in a domain D have total
   size <= |D|, so their weight is <= w(D) (the knapsack's optimum, u >= 0).
   Summing over domains: Σ_r weight(path_r) <= B, and by 1 that is >= d·W(cap).
4. W(cap) never rises with the cap (a larger cap only raises the rows' largest
   counts, so every path that held n blocks still does), and neither does the path
   bound's condition; both change only at row values.  So the least row value v
   satisfying both is <= cap = τ_max(P) (binary search over the row values).  Each
   (level, u) gives its own valid bound; the largest is taken.  The rest is the path
   bound's step 5: T(P) = (m + S − 1)·τ_max(P) + T_sync(P), T_sync(P) >= σ_lb.  ∎

Weights tried (any u >= 0 is sound, the choice only decides the strength): the
count of items of at least t devices, and the volume plus G_ℓ per such item, for the
sizes t that occur.  Dropped, so it stays a relaxation: the common split of the
replicas (each path takes its own least weight), the levels' nesting and the sides.
"""

from __future__ import annotations

import math

import numpy as np

from nest_cp.solvers.certify.geometry import NONE
from nest_cp.solvers.certify.paths import PathBound, arc_blocks
from nest_cp.solvers.certify.split import least_passing


def knapsack(capacity: int, weights: dict[int, int]) -> int:
    """Most Σ u over a multiset of items (sizes ``weights``' keys, repeats allowed) of
    total size <= ``capacity``: the exact unbounded knapsack by dynamic programming."""
    best = [0] * (capacity + 1)
    for room in range(1, capacity + 1):
        best[room] = max([best[room - 1]] + [best[room - size] + value
                                              for size, value in weights.items()
                                              if size <= room])
    return best[capacity]


class PackedPathBound:
    """τ of the packed path bound of one shape (module docstring); ``tau`` is at least
    the path bound's (it is the path bound when no weight says more)."""

    def __init__(self, path: PathBound):
        self.path = path
        self.shape, self.geo = path.shape, path.geo
        self.tau = path.tau
        if math.isfinite(self.tau):
            self.tau = self._search()

    def _weights(self) -> list[tuple[int, dict[int, int], int]]:
        """(level, u by item size, budget B) for every weight tried."""
        geo = self.geo
        found = []
        for level in range(geo.levels):
            joined = geo.joined[level]
            if joined != geo.ranks:
                continue  # runs may be cut early (module docstring, step 2)
            sizes = sorted({arc.runs[level] * joined for arc in self.path.arcs
                            if level in arc.emits})
            if not sizes:
                continue
            capacity = geo.capacity(level)
            domains = geo.tiers[level].domains
            for threshold in sizes:
                if threshold <= 1:
                    continue
                # a path has at most S·a // threshold runs of >= threshold devices
                large = self.shape.num_stages * geo.ranks // threshold
                count = {size: int(size >= threshold) for size in sizes}
                volume = {size: size + capacity * int(size >= threshold) for size in sizes}
                for weights, heaviest in ((count, large),
                                          (volume, self.shape.num_stages * geo.ranks +
                                           capacity * large)):
                    budget = sum(knapsack(size, weights) for size in domains)
                    if self.shape.dp * heaviest > budget:  # else every path passes
                        found.append((level, weights, budget))
        return found

    def _search(self) -> float:
        caps = self.path.caps()
        current = int(self.path.tau)
        for level, weights, budget in self._weights():
            if self._holds(current, level, weights, budget):
                continue
            current = least_passing(caps[caps > current], lambda cap, level=level,
                                    weights=weights, budget=budget:
                                    self._holds(cap, level, weights, budget))
            if math.isinf(current):
                return math.inf
        return current

    def _holds(self, cap: int, level: int, weights: dict[int, int], budget: int) -> bool:
        """Whether d paths holding n blocks under ``cap`` can have weight <= ``budget``:
        d·W(cap) <= B, W by a longest-path DP per weight (most blocks at each weight)."""
        path, shape = self.path, self.shape
        limit = budget // shape.dp  # W(cap) must be <= this
        blocks = path.fast.chain.blocks
        most = path.most_blocks(cap)
        joined = self.geo.joined[level]
        # value[node][w]: most blocks a path from node holds with weight exactly... at most w
        value: dict = {}
        for arc in path._order:
            held = arc_blocks(arc, most)
            if held is None:
                continue
            weight = weights[arc.runs[level] * joined] if level in arc.emits else 0
            if weight > limit:
                continue
            if arc.end_class == NONE:
                rest = np.zeros(limit + 1, dtype=np.int64)
            else:
                rest = value.get(arc.next_node)
                if rest is None:
                    continue
            shifted = np.full(limit + 1, -1, dtype=np.int64)
            shifted[weight:] = rest[:limit + 1 - weight]
            candidate = np.where(shifted >= 0, shifted + held, -1)
            old = value.get(arc.node)
            value[arc.node] = candidate if old is None else np.maximum(old, candidate)
        return any(int(value[start][-1]) >= blocks for start in path._starts
                   if start in value)
