r"""The shared-split bound: every replica has the same block counts, so a pipeline boundary
that cannot leave a node under the cap leaves it in no replica, and all replicas cut their
stages into node runs at the same few places.

Covers the *main* plans of a shape (c, b, S, d, z) on a block chain (``c = 1``, geometry),
S >= 2, when tier 0 is a capacity level whose joined ranks are all a = t·e ranks of a stage
(``geo.joined[0] == a``).  The packed path bound (:mod:`~nest_cp.solvers.certify.packed`)
counts the node runs of d replica paths, but lets each path take its own block counts, so
each replica may cut where its own counts make a cut cheap.  In a plan the counts are the
plan's, shared by all replicas: e.g. BERT-large on 512 H100s, S = 15, d = 34, under the
cap 665,934 ticks a stage holds two blocks only with both neighbours in its node, and the
24 blocks leave room for one-block stages at four places; so every replica cuts its 15
stages at the same two or three boundaries, and every such choice leaves each replica
with two runs of more than four stages, or one of 7-8 and two of 3-4 stages in a vector
whose splits have no other sizes (so the small runs share nodes only with each other):
68 nodes' worth for 64 nodes (``tests/test_certify_shared.py`` spells the cases out).

Rows (block chains, per stage over block counts, the least over the modes that fit,
suffix minima, so non-decreasing and at most the real value): for a stage s and flags
(i, o) in {0, 1}², ``R^{io}_s`` the least ``combo_rows`` entry (paths step 2) over the
combos whose input class is 0 (i = 0; none at stage 0) or >= 1 admitting a pair (i = 1),
and likewise the output (o; none at the last stage).  Stage 0 has only i = 0, the last
stage only o = 0.  For a cap, the *mask* M_s(c) is the set of (i, o) with R^{io}_s(c) <=
cap; it only grows as c falls (the rows are non-decreasing).

A *run split* of the stages is a partition into consecutive runs; it is *allowed* by masks
(M_s) when every run has |R|·a <= G_0 (the largest tier-0 domain) and every stage s has
(i, o) in M_s with i = 1 iff s starts a run and s > 0, o = 1 iff s ends a run and s < S − 1.
For weights u >= 0 on run sizes (devices) let W_u(M) be the least Σ u(|R|·a) over the
allowed splits (+inf when there is none), Z(M) the sizes of runs that occur in allowed
splits, and B_u(M) = Σ over tier-0 domains D of the most Σ u a multiset of sizes from Z(M)
of total at most |D| can have (the unbounded knapsack, :func:`packed.knapsack`).  ``pack(M)``
holds when d·W_u(M) <= B_u(M) for every u of the family below.

Claim.  Every main plan P has τ_max(P) >= τ_shared, the least row value cap (at least
τ_path) at which some block counts (c_s), each at least the fewest its stage must hold,
with Σ c_s >= n and M_s(c_s) non-empty for every s, have ``pack((M_s(c_s)))``.  So
T(P) >= (m + S − 1)·τ_shared + σ_lb.

Proof.  Fix a main plan P with block counts (c_s) (one split for all replicas: a plan has
one list of stages, DESIGN §2), and cap = τ_max(P).

1. Take a replica r and its level-0 runs (the maximal runs of stages joined by class-0
   boundaries, geometry).  A stage s of r starting a run (s > 0) has an input boundary of
   class >= 1 admitting a pair (it holds one), otherwise class 0; likewise its output.  So
   τ(s, r) >= R^{io}_s(c_s) with its (i, o) (paths step 2: the least over the combos it may
   have), and τ(s, r) <= cap: (i, o) is in M_s(c_s).  With J_0 = a a run R is |R|·a
   distinct devices in one tier-0 domain (geometry's lemma), so |R|·a <= G_0.  Hence r's
   runs are a split allowed by (M_s(c_s)), for every r with the same masks.
2. The items (packed step 2): every run of every replica is |R|·a devices inside one
   tier-0 domain, and items are disjoint (the placement is injective, DESIGN §2).  Their
   sizes are in Z(M).  For u >= 0 the items inside a domain D have total size <= |D|, so
   their weight is at most the knapsack's optimum over Z(M); summed over domains, the
   weight of all items is <= B_u(M), and by 1 it is >= d·W_u(M).  So ``pack`` holds at
   P's counts.
3. The search (``holds``) tries, per stage, only the largest count of each mask; P's count
   c_s is at most the largest count with its mask, so P's masks with those counts (Σ >= n)
   are tried, and ``pack`` depends only on the masks.  ``holds`` is monotone in the cap:
   a larger cap only grows every mask, which keeps every allowed split allowed (W_u falls)
   and every size in Z (B_u rises).  It changes only at row values.  So the least row value
   at which it holds is <= τ_max(P) (bisection, :func:`split.least_passing`); it is raised
   to τ_path, which P's τ_max is at least too (paths, packed).  With T_sync(P) >= σ_lb,
   T(P) = (m + S − 1)·τ_max(P) + T_sync(P) >= the claim.  ∎

The search tries only *maximal* mask vectors: those where no stage can take a larger mask
(a smaller count) with the total still >= n; a vector whose masks are each within a
maximal one's passes ``pack`` only if that one does (step 3's monotonicity).  It stops
after ``LEAVES`` vectors and then counts the cap as holding (it has not refuted it): a
count, not a clock, so the bound is the same on any machine; it is then only weaker.

Weights (any u >= 0 is sound, the choice only decides the strength), per vector, for the
sizes t of Z: the count of runs of at least t devices; and, for t <= G_0 / 2, two per run
of more than G_0 / 2 devices and one per run of t..G_0 / 2 (two large runs never share a
node, a large one and a mid one may).  The knapsack sees only the sizes this vector's
splits have, which is what the packed path bound, over every path's sizes, cannot do.
Dropped, so it stays a relaxation: levels above tier 0, sides, and which replica takes
which split (each weight's least split for every replica).
"""

from __future__ import annotations

import math

import numpy as np

from nest_cp.solvers.certify.bounds import INF
from nest_cp.solvers.certify.geometry import NONE
from nest_cp.solvers.certify.packed import knapsack
from nest_cp.solvers.certify.paths import PathBound
from nest_cp.solvers.certify.split import largest_per_class, least_passing

LEAVES = 5_000  # mask vectors one cap's search may check before it gives up (holds)
FLAGS = ((0, 0), (0, 1), (1, 0), (1, 1))  # (starts a run, ends a run), bit j of a mask


class SharedSplitBound:
    """τ_shared of one shape (module docstring); ``tau`` is at least ``path.tau`` (it is
    that when the bound does not apply or says nothing more)."""

    def __init__(self, path: PathBound, floor: float | None = None):
        """``floor``: a τ every main plan is already known to reach (the packed path bound's);
        the search starts there.  Default: the path bound's τ."""
        self.path = path
        self.shape, self.geo, self.fast = path.shape, path.geo, path.fast
        self.tau = path.tau if floor is None else max(path.tau, floor)
        self.applies = self._applies()
        self.leaves = 0  # mask vectors checked by the last search
        if self.applies and math.isfinite(self.tau):
            self.lows = [int(low) for low in self.fast.fewest_blocks(self.shape.num_stages)]
            self.rows = self._flag_rows()
            self.tau = self._search()

    def _applies(self) -> bool:
        geo, shape, fast = self.geo, self.shape, self.fast
        return (fast.chain is not None and shape.num_stages >= 2 and geo.levels >= 1
                and geo.joined[0] == geo.ranks and geo.ranks <= geo.capacity(0))

    def _flag_rows(self) -> np.ndarray:
        """R^{io}_s per stage, flag and count (INF where the flag is impossible)."""
        fast, shape, geo = self.fast, self.shape, self.geo
        cut = [t.index for t in geo.tiers if t.index >= 1 and t.admits(2)]
        last = shape.num_stages - 1
        cache: dict = {}
        rows = np.full((shape.num_stages, len(FLAGS), fast.chain.blocks + 1), INF,
                       dtype=np.int64)
        for stage in range(shape.num_stages):
            for bit, (starts, ends) in enumerate(FLAGS):
                if (stage == 0 and starts) or (stage == last and ends):
                    continue
                ins = [NONE] if stage == 0 else cut if starts else [0]
                outs = [NONE] if stage == last else cut if ends else [0]
                for combo in ((cin, cout) for cin in ins for cout in outs):
                    if combo not in cache:
                        cache[combo] = fast.combo_rows(shape, geo.k_min, combo)
                    rows[stage, bit] = np.minimum(rows[stage, bit], cache[combo][stage])
        return rows

    def _search(self) -> float:
        caps = np.unique(self.rows[self.rows < INF])
        caps = np.concatenate(([int(self.tau)], caps[caps > self.tau]))
        return least_passing(caps, self.holds)

    # ------------------------------------------------------------------ the count search

    def _classes(self, cap: int) -> list[list[tuple[int, int]]] | None:
        """Per stage, (largest count, mask) of each mask, fewest flags first; None when a
        stage has no count it may hold."""
        allowed = self.rows <= cap  # stage, flag, count
        weights = np.array([1 << bit for bit in range(len(FLAGS))], dtype=np.int64)
        masks = np.tensordot(weights, allowed, axes=([0], [1]))  # stage, count
        found = []
        for stage, low in enumerate(self.lows):
            row = masks[stage]
            classes = largest_per_class(self.fast.chain.blocks, low,
                                        lambda count, row=row: int(row[count]) or None)
            if not classes:
                return None
            found.append(classes)
        return found

    def holds(self, cap: int) -> bool:
        """Whether some maximal mask vector at ``cap`` passes ``pack`` (module docstring);
        True, too, when the search checked ``LEAVES`` vectors without finding one."""
        classes = self._classes(cap)
        if classes is None:
            return False
        blocks = self.fast.chain.blocks
        stages = len(classes)
        most_after = [0] * (stages + 1)  # most blocks the stages from s on can hold
        least_after = [0] * (stages + 1)  # fewest: every later stage at its last class
        for stage in reversed(range(stages)):
            most_after[stage] = most_after[stage + 1] + classes[stage][0][0]
            least_after[stage] = least_after[stage + 1] + classes[stage][-1][0]
        if most_after[0] < blocks:
            return False
        self.leaves = 0
        checked: dict[tuple, bool] = {}
        chosen = [0] * stages  # class index per stage

        def descend(stage: int, total: int, step: float) -> bool:
            """``step``: the least drop to its next class of a stage chosen so far (inf
            when none has one); a vector is maximal iff its surplus over ``blocks`` is
            below the drop of every stage not at its last class, and the surplus is at
            least ``total`` + the fewest blocks of the stages left − ``blocks``, so a
            branch where that reaches ``step`` holds no maximal vector."""
            if stage == stages:
                self.leaves += 1
                key = tuple(classes[s][i][1] for s, i in enumerate(chosen))
                if key not in checked:
                    checked[key] = self.pack(list(key))
                return checked[key] or self.leaves >= LEAVES
            options = classes[stage]
            for index, (count, _) in enumerate(options):
                if total + count + most_after[stage + 1] < blocks:
                    break  # fewer blocks from here on
                drop = (min(step, count - options[index + 1][0])
                        if index + 1 < len(options) else step)
                if total + count + least_after[stage + 1] - blocks >= drop:
                    continue  # not maximal whatever follows; a smaller count may be
                chosen[stage] = index
                if descend(stage + 1, total + count, drop):
                    return True
            return False

        return descend(0, 0, math.inf)

    # ------------------------------------------------------------------ the packing test

    def _runs(self, masks: list[int]) -> list[tuple[int, int]]:
        """Every run (first, last) some allowed split has."""
        stages, geo = len(masks), self.geo
        longest = geo.capacity(0) // geo.ranks

        def fits(stage: int, starts: bool, ends: bool) -> bool:
            return bool(masks[stage] >> FLAGS.index((int(starts), int(ends))) & 1)

        def run_ok(first: int, last: int) -> bool:
            return all(fits(s, s == first and first > 0, s == last and last < stages - 1)
                       for s in range(first, last + 1))

        candidates = [(first, last) for first in range(stages)
                      for last in range(first, min(stages, first + longest))
                      if run_ok(first, last)]
        # keep the runs on some split: reachable from stage 0 and reaching the end
        reach = {0}
        for first, last in sorted(candidates):
            if first in reach:
                reach.add(last + 1)
        back = {stages}
        for first, last in sorted(candidates, reverse=True):
            if last + 1 in back:
                back.add(first)
        return [(first, last) for first, last in candidates
                if first in reach and last + 1 in back]

    def pack(self, masks: list[int]) -> bool:
        """``pack`` of the module docstring for one mask vector."""
        runs = self._runs(masks)
        stages, ranks = len(masks), self.geo.ranks
        if not any(last == stages - 1 for _, last in runs):
            return False  # no allowed split
        sizes = sorted({(last - first + 1) * ranks for first, last in runs})
        largest = self.geo.capacity(0)
        domains: dict[int, int] = {}
        for size in self.geo.tiers[0].domains:
            domains[size] = domains.get(size, 0) + 1
        for weights in _weights(sizes, largest):
            budget = sum(count * knapsack(size, weights) for size, count in domains.items())
            least = [0] + [math.inf] * stages  # least weight of a split of the first s stages
            for first, last in sorted(runs, key=lambda run: run[1]):
                candidate = least[first] + weights[(last - first + 1) * ranks]
                least[last + 1] = min(least[last + 1], candidate)
            if self.shape.dp * least[stages] > budget:
                return False
        return True


def _weights(sizes: list[int], largest: int) -> list[dict[int, int]]:
    """The weights tried on one vector's run sizes (module docstring)."""
    found = []
    for threshold in sizes:
        found.append({size: int(size >= threshold) for size in sizes})
        if 2 * threshold <= largest:
            found.append({size: 2 if 2 * size > largest else int(size >= threshold)
                          for size in sizes})
    return found
