r"""The sync-path bound: a stage whose dense sync stays inside a domain it nearly fills
sends its pipeline transfers out of that domain.

Covers the *main* plans of a shape (c, b, S, d, z) on a block chain (``c = 1``,
geometry; every intra group on its k_min tier), S >= 2, with a dense sync group of
g = d·e > 1 ranks.  For a capacity level ℓ whose domains admit g let F_ℓ = ⌊(G_ℓ − g)
/ e⌋, G_ℓ the largest tier-ℓ domain; the level *forces* a stage when F_ℓ < d (every
stage: some replica has each of its boundaries above ℓ) or, for a middle stage,
F_ℓ < 2d (some replica has one of its two boundaries above ℓ).

Claim.  For any Θ every main plan P has T(P) >= min(A, B),
A = (m + S − 1)·τ_path + Θ, B = (m + S − 1)·τ_Θ + σ_lb, with τ_path the (packed) path
bound's τ, σ_lb the placement-free sync bound and τ_Θ the path bound's search with every
combo row raised to the floor X_s below; the bound is the largest min(A, B) over the
candidate Θ (each is a valid bound, so the largest is).

Rows (block chains, per stage over block counts, the least over the modes that fit,
suffix minima, so non-decreasing and at most the real value): Y_s the placement-free
sync row, H^ℓ_s the same with the dense group priced only on tiers > ℓ
(``FastBounds._sync_row(dense_from=ℓ + 1)``), and K^ℓ_s the least ``combo_rows`` entry
over the transfer classes a forced stage can have: both boundaries (the ones it has) of
a class > ℓ admitting a pair, or for a middle stage forced by F_ℓ < 2d only, one of them.
X_s(c) = INF where Y_s(c) >= Θ; else the largest K^ℓ_s(c) over the levels ℓ that force
s and have H^ℓ_s(c) >= Θ (0 when none).  X_s is non-decreasing: its regions are a
prefix (no level applies), middles (each level's region starts where its H row reaches
Θ and never ends before INF, so the max only grows) and an INF suffix.

Proof.  Fix a main plan P with block counts c_s.  If T_sync(P) >= Θ, T(P) >= A (τ_max(P)
>= τ_path, paths and packed).  Otherwise, for every stage s:

1. Y_s(c_s) <= T_sync(P) < Θ (bounds step 3), so X_s(c_s) < INF.
2. Let ℓ force s with H^ℓ_s(c_s) >= Θ > T_sync(P).  If some dense group of s lay on a
   tier > ℓ, s's exposed sync would be at least H^ℓ_s(c_s) (bounds step 3 with that
   group fixed, priced only on the tiers > ℓ that admit it), more than T_sync(P) >= it:
   so every dense group G of s lies on a tier <= ℓ, inside one tier-ℓ domain D
   (domains nest, geometry).  G holds e ranks (its tensor index, every expert index) of
   every stage replica (s, r).  If the boundary of (s, r) to a neighbour s' has class
   <= ℓ, each of those e ranks has its partner of (s', r) (the same rank index, DESIGN
   §3) in its own tier-ℓ domain, D: e devices of D outside G, and distinct for distinct
   (r, s') (the placement is injective).  So at most F_ℓ (replica, side) pairs have a
   class <= ℓ.  With F_ℓ < d some replica r has none: each boundary of (s, r) has a class
   > ℓ, admitting a pair (it holds one).  With F_ℓ < 2d and s a middle stage (two sides),
   some replica has at most one.  Either way τ_max(P) >= τ(s, r) >= K^ℓ_s(c_s) (paths
   step 2: the row of the boundary classes (s, r) has, the least over those it may have).
3. So τ_max(P) >= X_s(c_s) for every s.  Any replica's path (paths steps 1-3) keeps
   c_s within its combo row under the cap τ_max(P), and within X_s too: the path bound's
   search with rows max(combo row, X_s) holds at τ_max(P) (its proof needs only
   non-decreasing rows at most τ_max(P) at c_s), so τ_max(P) >= τ_Θ, and with
   T_sync(P) >= σ_lb, T(P) >= B.  ∎

Candidates Θ: the values of the H^ℓ and Y rows above σ_lb.  A rises with Θ and B never
does (a larger Θ only lowers X), so min(A, B) is largest where they cross; a bisection
over the sorted candidates finds it with a logarithmic number of path searches — a
count, not a clock: the same on any machine.
"""

from __future__ import annotations

import math

import numpy as np

from nest_cp.solvers.certify.bounds import INF, FastBounds
from nest_cp.solvers.certify.geometry import NONE, Arc, Geometry
from nest_cp.solvers.certify.packed import PackedPathBound
from nest_cp.solvers.certify.paths import PathBound
from nest_cp.solvers.certify.split import best_of_crossing


class SyncPathBound:
    """The rows of the module docstring for one shape; :meth:`bound` per (τ_path, σ_lb)."""

    def __init__(self, shape, geo: Geometry, fast: FastBounds, arcs: list[Arc]):
        self.shape, self.geo, self.fast, self.arcs = shape, geo, fast, arcs
        self.levels = self._forcing_levels()
        self.applies = bool(self.levels)
        if not self.applies:
            return
        self.sync = fast._stage_rows(shape, lambda kind, mode: fast._sync_row(
            kind, shape.dp, shape.zero))
        self.high, self.forced = {}, {}
        for level, both in self.levels:
            self.high[level] = fast._stage_rows(shape, lambda kind, mode, lowest=level + 1:
                                                fast._sync_row(kind, shape.dp, shape.zero,
                                                               dense_from=lowest))
            self.forced[level] = self._forced_rows(level, both)

    def _forcing_levels(self) -> list[tuple[int, bool]]:
        """(level, whether it forces both boundaries of every stage) for every level that
        forces some stage (module docstring)."""
        geo, shape, fast = self.geo, self.shape, self.fast
        prices = fast.prices
        group = prices.dense_group(shape.dp)
        if fast.chain is None or prices.config.cp > 1 or shape.num_stages < 2 or group <= 1:
            return []
        ep, found = prices.config.ep, []
        for level in range(geo.levels):
            largest = max(geo.tiers[level].domains)
            if group > largest:
                continue  # no dense group lies on a tier <= level
            room = (largest - group) // ep
            if room < 2 * shape.dp:
                found.append((level, room < shape.dp))
        return found

    def _forced_rows(self, level: int, both: bool) -> list[np.ndarray]:
        """Per stage, K^ℓ_s: the least combo row a forced stage can have (0, no constraint,
        for the end stages of a level that forces only one side of middle stages)."""
        fast, shape, geo = self.fast, self.shape, self.geo
        above = [t.index for t in geo.tiers if t.index > level and t.admits(2)]
        every = [t.index for t in geo.tiers if t.admits(2)]
        last = shape.num_stages - 1
        found = []
        for stage in range(shape.num_stages):
            ins = [NONE] if stage == 0 else above
            outs = [NONE] if stage == last else above
            if both:
                combos = [(cin, cout) for cin in ins for cout in outs]
            elif stage in (0, last):
                found.append(np.zeros(fast.chain.blocks + 1, dtype=np.int64))  # not forced
                continue
            else:
                combos = [(cin, cout) for cin in above for cout in every] + \
                    [(cin, cout) for cin in every for cout in above]
            row = np.full(fast.chain.blocks + 1, INF, dtype=np.int64)
            for combo in combos:
                row = np.minimum(row, fast.combo_rows(shape, geo.k_min, combo)[stage])
            found.append(row)
        return found

    def _floor(self, theta: int) -> list[np.ndarray]:
        floors = []
        for stage, sync in enumerate(self.sync):
            floor = np.zeros_like(sync)
            for level, _ in self.levels:
                forced = self.high[level][stage] >= theta
                floor = np.maximum(floor, np.where(forced, self.forced[level][stage], 0))
            floors.append(np.where(sync >= theta, INF, floor))
        return floors

    def tau(self, theta: int) -> float:
        """τ_Θ: the packed path bound's search with the combo rows raised to X at Θ."""
        path = PathBound(self.shape, self.geo, self.fast, self.arcs, self._floor(theta))
        return PackedPathBound(path).tau

    def bound(self, tau_path: float, sigma_lb: float) -> float:
        """The largest min(A, B) over the candidate Θ (-inf when the bound does not apply)."""
        if not self.applies or not math.isfinite(tau_path):
            return -math.inf
        rounds = self.shape.rounds
        values = np.concatenate([np.stack(rows).ravel() for rows in
                                 [self.sync, *self.high.values()]])
        candidates = np.unique(values[(values < INF) & (values > sigma_lb)])
        if candidates.size == 0:
            return -math.inf

        taus: dict[int, float] = {}

        def pair(index: int) -> tuple[float, float]:
            theta = int(candidates[index])
            if theta not in taus:
                taus[theta] = self.tau(theta)
            return rounds * tau_path + theta, rounds * taus[theta] + sigma_lb

        # A rises with Θ and B never does: the best min(A, B) is where they cross
        return best_of_crossing(pair, len(candidates))
