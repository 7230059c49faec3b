r"""The divided-channel bound: stage replicas that each fill part of one node divide their
sync groups' ring channels.

Covers every plan of a shape (c, b, S, d, z) on a block chain (``c = 1``, geometry) whose
τ_max is at least a given τ_lb (the path bound's τ for the main plans, the raised
bound's for the raised ones), when

(D) every present intra family has k_min = 0 and joins all a = t·e ranks at level 0
    (``geo.joined[0] == a``), a fits the largest tier-0 domain, the dense sync group has
    more than one member, and d·a exceeds every tier-0 domain.

Let G_0 be the largest tier-0 domain, q = ⌊G_0 / a⌋ (>= 1: J_0 = a ranks fit one domain)
and k_d = ⌊d / ⌈d / q⌉⌋.

Claim.  For any τ_1 > τ_lb every such plan P has
T(P) >= min(A, B), A = (m + S − 1)·τ_1 + σ_lb, B = (m + S − 1)·τ_lb + max(σ_lb, σ_1),
σ_lb the placement-free sync bound and σ_1 the min-max below; the bound is the largest
min(A, B) over the candidate τ_1 (each is a valid bound, so the largest is).

Rows (block chains, per stage over block counts, the least over the modes that fit,
suffix minima, so non-decreasing and at most the real value, as in
:meth:`~nest_cp.solvers.certify.bounds.FastBounds._stage_rows`): N_s the cheap τ
(``FastBounds._tau_row``: every term on its cheapest tier); R_s the least over the
present families of the cheap τ with that family *raised* (priced only above its k_min,
``stage_tau(raised=...)``); Y_s the placement-free sync row (``_sync_row``); W_s the same
with the dense group priced only on tiers >= 1 on at most e·k_d ring channels and the
expert group only on tiers >= 1 on at most k_d.

Proof.  Fix P.  If τ_max(P) >= τ_1, T(P) = (m + S − 1)·τ_max + T_sync >= A (T_sync >=
σ_lb, bounds step 3).  Otherwise every τ(s, r) < τ_1; let c_s be P's block counts.

1. N_s(c_s) <= τ(s, r) < τ_1 for every stage and replica (bounds step 2).
2. Take a stage s with R_s(c_s) >= τ_1.  For every replica r: if some group of a
   present family at (s, r) lay above its k_min, τ(s, r) >= R_s(c_s) >= τ_1 (bounds,
   "Raised bound"); so none does, and since the families join all a ranks at level 0
   with k_min = 0, the a ranks of (s, r) lie in one tier-0 domain (geometry's lemma,
   J_0 = a).  So a tier-0 domain D holds whole stage replicas of s: n_D of them, with
   n_D·a <= |D| <= G_0, so n_D <= q.  Take a dense sync group G of s (one per tensor
   index: rank (i, j) of every replica for every expert index j) and an expert sync group
   H (one per tensor and expert index: that rank of every replica).  G has e·n_D members
   in D and H has n_D (each replica whose (s, r) lies in D brings all its ranks there,
   and no other replica brings any).  If G (or H) lay on tier 0 it would lie in one
   domain D, so n_D = d and D would hold d·a > G_0 devices (D): so both lie on tiers
   >= 1 (each admits its size).  H touches n >= ⌈d / q⌉ domains (each holds at most q
   of its d members), so its fewest members in a touched domain — its ring channels
   (cost model §5 a, capped further by ``Tier.channel_cap``) — is at most d / n, an
   integer, so at most ⌊d / ⌈d / q⌉⌋ = k_d; G's fewest is e times H's in the same
   domains, at most e·k_d.  A ring collective's price never rises with its channels
   (chain's ``collective_path`` proof), so each pays at least its price on its tier
   with that many channels, and as in bounds step 3 the exposed sync of s is at least
   the least over such tiers of E(dense + expert): T_sync(P) >= W_s(c_s), and >= Y_s(c_s)
   (bounds step 3).
3. So with V_s(c) = INF where N_s(c) >= τ_1, else max(Y_s(c), W_s(c)) where
   R_s(c) >= τ_1, else Y_s(c) — non-decreasing in c: R_s >= N_s entrywise (a family
   priced on fewer tiers), so the three regions are a prefix, a middle and a suffix of
   the counts of non-decreasing rows, each piece is non-decreasing and the later pieces
   are no lower — T_sync(P) >= max_s V_s(c_s) >= σ_1, the min-max of the V rows over the
   block counts (``FastBounds._min_max``, a lower bound on it).  With τ_max(P) >= τ_lb,
   T(P) >= B.  ∎

Unlike the crowded-node bound (:mod:`~nest_cp.solvers.certify.crowded`), which asks a
stage to keep a pipeline neighbour in its node and so stops at the isolated τ, this one
asks only that no group of the stage be raised, so τ_1 reaches the raised τ: on
MoE shapes with a = e stage-replica ranks and q small (Mixtral-8x7B on 8-GPU nodes, e = 4:
q = 2, and an odd d gives k_d = 1) the expert sync, the largest term, is then priced on
one channel instead of eight.

Candidates τ_1: the values just above τ_lb where a region of some row changes (a value
of R, and one past a value of N), ascending, at most ``crowded.CANDIDATES`` of them — a
count, not a clock: the same on any machine (:func:`crowded.threshold_split`, which the
crowded-node bound shares).
"""

from __future__ import annotations

import numpy as np

from nest_cp.solvers.certify.bounds import FastBounds
from nest_cp.solvers.certify.crowded import ThresholdSplit
from nest_cp.solvers.certify.geometry import Geometry


def divided_channels(replicas: int, per_domain: int) -> int:
    """The most channels a sync group with one member in each of ``replicas`` stage
    replicas can run when a tier-0 domain holds at most ``per_domain`` of them:
    ⌊d / ⌈d / q⌉⌋ (module docstring, step 2)."""
    return replicas // -(-replicas // per_domain)


class DividedBound(ThresholdSplit):
    """The rows of the module docstring for one shape (the case's rows: the raised ones);
    :meth:`bound` per τ_lb."""

    def _case_rows(self) -> list[np.ndarray]:
        shape, fast, raised = self.shape, self.fast, None
        for family, lowest in self.geo.k_min.items():
            rows = fast._stage_rows(shape, lambda kind, mode, r=(family, lowest):
                                    fast._tau_row(kind, mode, r))
            raised = rows if raised is None else \
                [np.minimum(a, b) for a, b in zip(raised, rows, strict=True)]
        return raised

    def _off_rows(self) -> list[np.ndarray]:
        shape, fast = self.shape, self.fast
        channels = divided_channels(shape.dp, max(self.geo.tiers[0].domains) // self.geo.ranks)
        return fast._stage_rows(shape, lambda kind, mode: fast._sync_row(
            kind, shape.dp, shape.zero, dense_from=1,
            dense_channels=shape.config.ep * channels, expert_from=1,
            expert_channels=channels))

    def _applies(self) -> bool:
        return bool(self.geo.k_min) and replicas_divide_nodes(self.geo, self.shape, self.fast)


def replicas_divide_nodes(geo: Geometry, shape, fast: FastBounds) -> bool:
    """Whether the divided-channel and short-run bounds' premise holds: a block chain, no
    context parallelism, a tier above the node, every stage replica whole in one node (no
    intra family raised, tier 0 joining all a ranks), a dense sync group of two or more, and
    a <= G_0 < d·a (a >= G_0 leaves no main stage replica to divide; d·a <= G_0 lets a node
    hold every replica of a stage)."""
    if fast.chain is None or fast.prices.config.cp > 1 or geo.levels < 1:
        return False
    if any(k != 0 for k in geo.k_min.values()) or geo.joined[0] != geo.ranks:
        return False
    if fast.prices.dense_group(shape.dp) <= 1:
        return False
    return geo.ranks <= max(geo.tiers[0].domains) < shape.dp * geo.ranks
