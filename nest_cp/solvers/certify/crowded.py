r"""The crowded-node bound: a stage that keeps a pipeline neighbour in its node cannot also
keep its sync groups there.

Covers every plan of a shape (c, b, S, d, z) on a block chain (``c = 1``, geometry) in
which the τ_max is at least a given τ_lb (the path bound's τ for the main plans, the
raised bound's for the raised ones), when

(C) every present intra family has k_min = 0 and joins all a = t·e ranks at level 0
    (``geo.joined[0] == a``), the dense sync group has d·e > 1 members, and
    (d + 1)·a exceeds every tier-0 domain.

Claim.  For any τ_1 > τ_lb every such plan P has
T(P) >= min(A, B), A = (m + S − 1)·τ_1 + σ_lb, B = (m + S − 1)·τ_lb + max(σ_lb, σ_1),
σ_lb the placement-free sync bound and σ_1 the min-max below; the bound is the largest
min(A, B) over the candidate τ_1 (each is a valid bound, so the largest is).

Rows (block chains, per stage over block counts, the least over the modes that fit,
suffix minima so non-decreasing and at most the real value, as in
:meth:`~nest_cp.solvers.certify.bounds.FastBounds._stage_rows`): N_s the cheap τ
(``FastBounds._tau_row``: every term on its cheapest tier); I_s the *isolated* τ, the
cheap τ with every transfer the stage has (a first stage sends only, a last one
receives only) on its cheapest tier k >= 1 admitting a pair; R_s the least over the
present families of the cheap τ with that family *raised* (priced only above its k_min,
``stage_tau(raised=...)``); Y_s the placement-free sync row (``_sync_row``); Z_s the
same with the dense group priced only on tiers >= 1, on at most e·⌊G_0 / 2a⌋ ring
channels.

Proof.  Fix P.  If τ_max(P) >= τ_1, T(P) = (m + S − 1)·τ_max + T_sync >= A (T_sync >=
σ_lb, bounds step 3).  Otherwise every τ(s, r) < τ_1; let c_s be P's block counts.

1. N_s(c_s) <= τ(s, r) < τ_1 for every stage (bounds step 2).
2. Take a stage s with min(I_s, R_s)(c_s) >= τ_1 and any replica r.  If some group of
   a present family at (s, r) lay above its k_min, τ(s, r) >= R_s(c_s) >= τ_1 (bounds,
   "Raised bound"): so none does, and since the families join all a ranks at level 0
   with k_min = 0, the a ranks of (s, r) lie in one tier-0 domain D (geometry's lemma,
   J_0 = a).  If no boundary of (s, r) had class 0, each it has would have a pair on
   a tier k >= 1 and cost at least that pair's transfer (a receive is its slowest
   pair's), so τ(s, r) >= I_s(c_s) >= τ_1: so some boundary to a neighbour stage s' has
   class 0, every rank j of (s', r) shares a tier-0 domain with rank j of (s, r), and
   D holds all 2a of their devices.  If every dense-sync group of s (one per tensor
   index, over the d·e ranks of the replicas and expert indices) lay on tier 0, each
   would lie in D (it holds a member of replica r, which is in D), and their union is
   every rank of stage s in every replica: D would hold d·a + a devices (disjoint from
   (s', r)'s: the placement is injective), more than any tier-0 domain (C).  So some
   dense group G of s lies on a tier t_d >= 1 (it admits d·e).  Its ring channels
   (cost model §5 a: its fewest members in a tier-0 domain it touches, capped by
   ``Tier.channel_cap``) are at most e·⌊G_0 / 2a⌋, G_0 the largest tier-0 domain: the
   above holds for every replica r' (the count c_s, and so the test, is the stage's),
   so each (s, r') with a member of G in a tier-0 domain brings its a ranks and its
   neighbour's a there, at most ⌊G_0 / 2a⌋ such replicas per domain, each with e
   members of G.  A ring collective's price never rises with its channels (chain's
   ``collective_path`` proof), so G pays at least its tier-t_d price on that many
   channels, and as in bounds step 3 the exposed sync of s is at least the least over
   such t_d and every tier admitting the expert group of E(dense(t_d) + expert(t_e)):
   T_sync(P) >= Z_s(c_s).
3. So with V_s(c) = INF where N_s(c) >= τ_1, else max(Y_s(c), Z_s(c)) where
   min(I_s, R_s)(c) >= τ_1, else Y_s(c) — non-decreasing in c, as its three regions are
   a prefix, a middle and a suffix of the counts of non-decreasing rows, and each
   piece is non-decreasing and the later pieces no lower — T_sync(P) >= max_s V_s(c_s)
   >= σ_1, the min-max of the V rows over the block counts
   (``FastBounds._min_max``, a lower bound on it).  With τ_max(P) >= τ_lb,
   T(P) >= B.  ∎

Candidates τ_1: the values just above τ_lb where a region of some row changes (a value
of min(I, R), and one past a value of N), ascending, at most ``CANDIDATES`` of them — a
count, not a clock: the same on any machine.
"""

from __future__ import annotations

import math

import numpy as np

from nest_cp.solvers.certify.bounds import INF, FastBounds, Kind
from nest_cp.solvers.certify.geometry import Geometry

CANDIDATES = 400


class ThresholdSplit:
    """A bound split on a threshold τ_1 of τ_max (:func:`threshold_split`): the rows every
    such bound needs, built once the subclass's :meth:`_applies` says it applies; the
    subclass gives the case's τ rows (:meth:`_case_rows`) and the sync rows off the case
    (:meth:`_off_rows`)."""

    def __init__(self, shape, geo: Geometry, fast: FastBounds):
        self.shape, self.geo, self.fast = shape, geo, fast
        self.applies = self._applies()
        if not self.applies:
            return
        self.sigma = fast.bound(shape).sync
        self.normal = fast._stage_rows(shape, lambda kind, mode: fast._tau_row(kind, mode))
        self.case = self._case_rows()
        self.sync = fast._stage_rows(shape, lambda kind, mode: fast._sync_row(
            kind, shape.dp, shape.zero))
        self.off = self._off_rows()

    def _applies(self) -> bool:
        raise NotImplementedError

    def _case_rows(self) -> list[np.ndarray]:
        raise NotImplementedError

    def _off_rows(self) -> list[np.ndarray]:
        raise NotImplementedError

    def bound(self, tau_lb: float) -> float:
        """The largest min(A, B) over the candidate τ_1 (-inf when the bound does not
        apply or no candidate helps)."""
        if not self.applies:
            return -math.inf
        return threshold_split(self.fast, self.shape, self.sigma, self.normal, self.case,
                               self.sync, self.off, tau_lb)


class CrowdedBound(ThresholdSplit):
    """The rows of the module docstring for one shape; :meth:`bound` per τ_lb."""

    def _case_rows(self) -> list[np.ndarray]:
        return self.fast._stage_rows(self.shape, self._crowd_row)

    def _off_rows(self) -> list[np.ndarray]:
        # a tier-0 domain holds at most this many stage replicas, each beside its neighbour
        # (step 2): the dense group's members in it, and so its ring channels
        shape, fast = self.shape, self.fast
        most = max(1, max(self.geo.tiers[0].domains) // (2 * self.geo.ranks)) \
            * shape.config.ep
        return fast._stage_rows(shape, lambda kind, mode: fast._sync_row(
            kind, shape.dp, shape.zero, dense_from=1, dense_channels=most))

    def _applies(self) -> bool:
        geo, shape, fast = self.geo, self.shape, self.fast
        config = fast.prices.config
        if fast.chain is None or config.cp > 1 or geo.levels < 1:
            return False
        if any(k != 0 for k in geo.k_min.values()) or geo.joined[0] != geo.ranks:
            return False
        if fast.prices.dense_group(shape.dp) <= 1:
            return False
        return (shape.dp + 1) * geo.ranks > max(geo.tiers[0].domains)

    def _crowd_row(self, kind: Kind, mode) -> np.ndarray:
        """Suffix minima of min(isolated τ, raised τ) of a stage of this kind."""
        fast, prices = self.fast, self.fast.prices
        row = np.full(fast.chain.blocks + 1, INF, dtype=np.int64)
        outer = [t.index for t in fast.tiers if t.index >= 1 and t.admits(2)]
        receives = kind in (Kind.MIDDLE, Kind.LAST)
        sends = kind in (Kind.FIRST, Kind.MIDDLE)
        for blocks in range(fast.chain.blocks + 1):
            span = fast._kind_span(kind, blocks, mode)
            if span is None:
                continue
            isolated = fast.stage_tau(span, False, False, None)
            if sends:
                isolated += min((prices.transfer(span.last, k) for k in outer), default=math.inf)
            if receives:
                isolated += min((prices.transfer(s, k) for s in fast._possible_senders()
                                 for k in outer), default=math.inf)
            raised = min((fast.stage_tau(span, receives, sends, None, (family, lowest))
                          for family, lowest in self.geo.k_min.items()), default=math.inf)
            value = min(isolated, raised)
            row[blocks] = INF if math.isinf(value) else value
        return np.minimum.accumulate(row[::-1])[::-1]


def threshold_split(fast: FastBounds, shape, sigma: float, normal: list[np.ndarray],
                    split: list[np.ndarray], sync: list[np.ndarray], off: list[np.ndarray],
                    tau_lb: float) -> float:
    """max over τ_1 of min(A, B), the split on a threshold τ_1 of τ_max that the crowded-node
    and the divided-channel bounds share (each module's docstring argues its rows).

    Per stage and block, ``normal`` is the least τ of a plan outside the case the bound
    excludes, ``split`` the least τ inside it; ``sync`` the stage's least sync and ``off``
    its least sync outside the case.  A: τ_max >= τ_1, so T >= rounds·τ_1 + σ.  B: τ_max <
    τ_1, so a block whose ``normal`` row reaches τ_1 is impossible and one whose ``split``
    row reaches it pays ``off``: T >= rounds·τ_lb + the min-max of those sync rows.  The
    candidates are the row values above τ_lb (at most CANDIDATES); -inf when none helps."""
    if not math.isfinite(tau_lb):
        return -math.inf
    rounds, best = shape.rounds, -math.inf
    inner, outer = np.stack(split), np.stack(normal)
    values = np.concatenate((inner[inner < INF], outer[outer < INF] + 1))
    candidates = np.unique(values[values > tau_lb])[:CANDIDATES]
    for tau_1 in candidates:
        tau_1 = int(tau_1)
        first = rounds * tau_1 + sigma
        if first <= best:
            continue
        rows = [np.where(n >= tau_1, INF, np.where(c >= tau_1, np.maximum(y, z), y))
                for n, c, y, z in zip(normal, split, sync, off, strict=True)]
        sigma_1 = fast._min_max(rows, shape)
        second = rounds * tau_lb + max(sigma, sigma_1)
        best = max(best, min(first, second))
    return best
