"""Placement-free lower bounds per shape: the cheap first filter of the certification.

Placement-free bound.  Covers every plan of a shape (c, b, S, d, z), on any
network.  Claim: T >= (m + S − 1)·τ_lb + σ_lb, where τ_lb (σ_lb) is the least over
memory-feasible splits and recompute vectors of the largest stage value of
:meth:`FastBounds.stage_tau` (:meth:`FastBounds.stage_sync`).

Proof.  Fix a plan P of the shape.

1. Cheapest tier.  A group of g devices lies on some tier k (§1.2: the smallest
   whose domain holds it); a tier-k domain then holds >= g devices, so tier k
   *admits* g (on a graph every (bandwidth, latency) combination is a tier, a
   group's bottleneck is one of them, and the group is a clique of g devices in
   that combination's pair graph, so within the tier's ``largest_group``: chain's
   module docstring).  On tier k the group runs with some number
   of ring channels (cost model §5 a), and its path is never faster than
   :meth:`~nest_cp.solvers.certify.chain.Tier.collective_path` of g, on which
   chain prices every group term (a ring collective's ticks never rise with β).
   A term priced on one group therefore costs at least the least price over the
   tiers admitting g (:func:`cheapest_tier`).
2. τ per stage.  τ(s, r) (DESIGN §3, §3.2 a, f) is compute + the mode's rerun
   (the evaluator's integers, chain) + per collective its slowest group + the two
   receives (each its slowest pair) + ZeRO-3 gathers.  Fix one group g0 of a
   family: each of the family's collectives costs at least its price on g0's
   path, so (step 1: chain prices g0's tier with the most channels a group of its
   size can have there) the family's sum is at least
   ``collectives(span, f, tier(g0))`` and by 1 at least its cheapest admitting
   tier's (forward ones again under full recomputation, §3.2 a).  With
   ``tp_comm_overlap`` (cost model §5 e) chain prices TP on tier 0 as the
   overlap exposes it and on higher tiers in full; its "TP overlap" lemma gives
   the same inequality for every g0 (a stage replica pays its TP collectives in
   full unless all its TP groups lie on tier 0, and the exposed part of a sum
   never exceeds the sum nor falls as it grows), and the least over admitting
   tiers is taken over those very prices.  Each receive
   costs at least one pair's price, so by 1 at least the cheapest tier admitting
   2 (a transfer runs one channel on the tier's own path), with the sender's real
   last layer (or, on a block chain, the least over the layers it can be).
   Gathers (>= 0) are dropped (for c = 1).  With context width c > 1 (docs/context-parallelism.md)
   τ(s, r) also holds the replica's exposed context exchange; fixing one ring pair
   (p2p) or one CP group (a2a) of the replica, it is at least chain's
   ``context(span, tier)`` on that pair's (group's) tier (chain's "Context exchange"),
   which admits 2 (c), so by 1 at least its cheapest admitting tier's; every other term
   is the same function of the profiles at c as above.  With c > 1 the TP, EP and
   context terms are bounded together instead (:meth:`FastBounds._joint_intra`: each
   family on the largest tier of its groups, the tiers constrained by what the groups
   they join can fit), which is at least each family's own cheapest tier, and the
   ZeRO-3 gathers are kept: each of the replica's gathers runs over d·c ranks and costs
   at least one group's, at least its price on the cheapest tier admitting d·c (step 1;
   an all-gather's ticks never fall as the path slows).  So τ(s, r) >= stage_tau(s).
3. Sync per stage.  T_sync(P) = max over stages of the exposed sync
   E(RS_s, AG_s) (§3.2 c, cost model §5 c, d): RS_s (AG_s) is the gradient phase
   (weight gather) of the slowest dense group plus that of the slowest expert
   group, dense groups d·e·c ranks and expert groups d·c (c = 1 without context
   parallelism: a CP group's c ranks hold the same parameters), and
   E(RS, AG) = (max(0, RS − R_s) or RS) + (max(0, AG − F_s) or AG) as the overlap
   flags say (``cost.exposed_sync_ticks``), R_s / F_s the span's backward /
   forward ticks.  Fix any dense group G_d and expert group G_e: a max is at
   least each of its terms, so RS_s >= RS(G_d) + RS(G_e) and AG_s >= AG(G_d) +
   AG(G_e), and E never falls when either argument grows, so E(RS_s, AG_s) >=
   E(RS(G_d) + RS(G_e), AG(G_d) + AG(G_e)).  G_d lies on a tier t_d admitting d·e·c,
   and by 1 each of its phases costs at least its price on t_d (both phases run
   on the group's one path); likewise G_e on t_e.  So the exposed sync is at least
   the least over admitting pairs (t_d, t_e) of E of those prices
   (:meth:`FastBounds.stage_sync`).
4. P's split is one of those minimised over (its stages fit in memory with
   k_s = min(S − s, m) in flight, §3, priced by the evaluator's own memory function at
   the shape's c; the catalogue offers exactly those), so
   τ_max(P) >= max_s stage_tau(s) >= τ_lb and T_sync(P) >= σ_lb; minimising the two
   separately can only lower the sum.  T(P) = (m + S − 1)·τ_max + T_sync (§3).  ∎

Block chains (:mod:`nest_cp.solvers.certify.split`) are done with per-stage rows
over block counts; :meth:`FastBounds._min_max` states why its search is exact on
such rows.  Explicit spans use :func:`nest_cp.solvers.certify.split.min_max_split`.

Raised bound (:meth:`FastBounds.raised`).  Covers the other side of the main /
raised split of a shape (:mod:`nest_cp.solvers.certify.geometry`): the plans in which
some group of a present family f lies above k_min[f].  Claim: each costs at least
(m + S − 1)·τ_raised + σ_lb, τ_raised the min-max of step 4 with one stage (any)
valued by ``stage_tau`` with f priced only on the tiers above k_min[f] that admit
it.  Proof: such a group G belongs to some stage s* of some replica; G lies on a
tier k > k_min[f] admitting |G|, every collective of f at stage s* costs at least
its price on G (its slowest group is no cheaper), at least chain's price on tier k
(step 1's channels; with ``tp_comm_overlap``, k >= 1, so a raised TP group makes its
stage replica pay in full, chain's plain tier-k price: its "TP overlap" lemma with
g0 = G), so τ(s*, r) >= that raised
value; every other stage is bounded as in 2; the rest is step 4 with the one
raised stage chosen by the minimisation (:meth:`FastBounds._min_max` with
``one_of``, :func:`_span_min_max_with_one`).  The least over families covers every
raised plan.  ∎  A shape whose family has no tier above k_min gets +inf for it.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from enum import Enum

import numpy as np

from nest_cp.cost import terms as cost
from nest_cp.model.instance import CollectiveKind, Instance, RecomputeMode
from nest_cp.solvers.certify.chain import FAMILIES, LayerPrices, LinearTicks, Span, Tier
from nest_cp.solvers.certify.split import (
    BlockChain,
    Catalogue,
    Shape,
    least_passing,
    min_max_split,
)

INF = np.iinfo(np.int64).max // 4


class Kind(Enum):
    """Where a stage sits: it decides which ends it holds and which transfers it receives."""

    FIRST = "first"
    MIDDLE = "middle"
    LAST = "last"
    ONLY = "only"


def kind_of(stage: int, num_stages: int) -> Kind:
    if num_stages == 1:
        return Kind.ONLY
    if stage == 0:
        return Kind.FIRST
    return Kind.LAST if stage == num_stages - 1 else Kind.MIDDLE


@dataclass(frozen=True, slots=True)
class ShapeBound:
    """(m + S − 1)·τ_lb + σ_lb of one shape; ``tau`` is inf when nothing fits in memory."""

    shape: Shape
    tau: float
    sync: float

    @property
    def total(self) -> float:
        if math.isinf(self.tau):
            return math.inf
        return self.shape.rounds * self.tau + self.sync


def cheapest_tier(tiers: tuple[Tier, ...], group_size: int, price) -> int:
    """min over the tiers admitting ``group_size`` of price(tier index); 0 for one device."""
    if group_size <= 1:
        return 0
    return min(price(tier.index) for tier in tiers if tier.admits(group_size))


class FastBounds:
    """Cheap bounds for every shape of one (configuration, microbatch) choice."""

    def __init__(self, instance: Instance, prices: LayerPrices, chain: BlockChain | None):
        self.instance, self.prices, self.chain = instance, prices, chain
        self.tiers = prices.tiers
        self.limit = instance.cluster.usable_hbm_bytes
        self.modes = [m for m in RecomputeMode if m in instance.training.recompute_modes]
        training = instance.training
        self.overlap = training.overlap_grad_reduce
        self.overlap_gather = training.overlap_param_gather
        self._tau_cache: dict = {}
        self._fit_cache: dict = {}
        self._tau_rows: dict = {}
        self._sync_rows: dict = {}
        self._params: dict = {}

    # ------------------------------------------------------------ shared prices

    def stage_tau(self, span: Span, receives: bool, sends: bool, sender_last: int | None,
                  raised: tuple | None = None, gather: tuple | None = None) -> float:
        """τ of a stage with every term on its cheapest tier (ZeRO-3 gathers dropped): at
        most τ(s, r) of every replica of every plan holding ``span`` there (the module
        docstring, step 2; with ``raised``, "Raised bound").

        ``raised = (family, k_min)``: that family's groups priced only on tiers above
        k_min (some group of it lies there); inf when no such tier exists.  ``gather =
        (d, z)`` (c > 1 shapes, :meth:`_gather_of`): the ZeRO-3 gathers are kept, on the
        cheapest tier admitting their d·c ranks (the module docstring, step 2).
        """
        prices, config = self.prices, self.prices.config
        value = prices.compute(span)
        if config.cp > 1 and raised is None:
            value += self._joint_intra(span)
            if gather is not None:
                dp, zero = gather
                value += cheapest_tier(self.tiers, prices.expert_group(dp),
                                       lambda tier: prices.zero_gather(span, dp, zero, tier))
            return value + self._transfers(span, receives, sends, sender_last)
        for family in FAMILIES:
            if not prices.has_family[family]:
                continue
            size = cost.group_size(family, config)
            if raised is not None and raised[0] is family:
                higher = [t.index for t in self.tiers if t.admits(size) and t.index > raised[1]]
                if not higher:
                    return math.inf
                value += min(prices.collectives(span, family, k) for k in higher)
            else:
                value += cheapest_tier(self.tiers, size,
                                       lambda tier, f=family: prices.collectives(span, f, tier))
        return value + self._transfers(span, receives, sends, sender_last)

    def _transfers(self, span: Span, receives: bool, sends: bool,
                   sender_last: int | None) -> int:
        """The stage's two receives, each on the cheapest tier admitting a pair (step 2)."""
        prices, value = self.prices, 0
        if sends:
            value += cheapest_tier(self.tiers, 2, lambda tier: prices.transfer(span.last, tier))
        if receives:
            senders = [sender_last] if sender_last is not None else self._possible_senders()
            value += min(cheapest_tier(self.tiers, 2, lambda tier, s=s: prices.transfer(s, tier))
                         for s in senders)
        return value

    @staticmethod
    def _gather_of(shape: Shape) -> tuple | None:
        """(d, z) when stage_tau keeps the shape's ZeRO-3 gathers (c > 1, z = 3), else None."""
        return (shape.dp, shape.zero) if shape.config.cp > 1 and shape.zero == 3 else None

    def _joint_intra(self, span: Span) -> float:
        """The intra-layer terms of a stage replica with context width c > 1: its TP and EP
        collectives and its context exchange, each family on one tier, the tiers chosen
        together so that the groups they join fit the domains (inf if no choice does).

        Proof.  Fix a stage replica and, per present family f (TP, EP with collectives; CP,
        the c ranks of a context group), k_f the largest tier any of its groups lies on —
        for CP under p2p the largest tier of a ring pair; on a hierarchy every pair of a
        ring then lies in one tier-k_f domain and the ring is connected by them, so the
        whole group does too (domains partition the devices).  A group (a ring pair) of f
        lies on tier k_f, so tier k_f admits its size (2 for a pair), and the family's term
        is at least chain's price on k_f (steps 1 and 2, and chain's "Context exchange";
        with ``tp_comm_overlap`` its "TP overlap" lemma for that group).  On a graph
        there are no capacity tiers and the choice is each family's cheapest admitting
        tier, as in step 2 (a ring of c devices need not be a clique of its slowest pair's
        speed, so only its pair is admitted).  For every capacity tier k, the families F
        with k_f <= k have every group inside a tier-k domain; the ranks j = t_index +
        t·c_index + t·c·e_index reachable from one rank through groups of F vary exactly
        F's coordinates, so
        ∏_{f∈F} |f| distinct devices (the placement is injective) share one tier-k domain:
        ∏ <= the largest tier-k domain.  The replica's (k_f) is therefore one of the choices
        minimised over, and its intra terms are at least that choice's sum.  ∎  Families
        with no collectives are left out (they cost nothing; dropping a constraint only
        lowers the minimum)."""
        prices, config = self.prices, self.prices.config
        families = []  # (group size, [(tier, price)])
        for family in FAMILIES:
            if prices.has_family[family]:
                size = cost.group_size(family, config)
                families.append((size, [(t.index, prices.collectives(span, family, t.index))
                                        for t in self.tiers if t.admits(size)]))
        # the context family's tier admits its pair (p2p) or group (a2a); containment of
        # the whole ring (size c) is the capacity rows' job, on hierarchies only
        families.append((config.cp, [(t.index, prices.context(span, t.index))
                                     for t in self.tiers if t.admits(prices.context_size)]))
        capacities = [(t.index, max(t.domains)) for t in self.tiers if t.capacity is not None]
        if not capacities:  # a graph: nothing is contained, each family at its cheapest
            return sum(min((price for _, price in options), default=math.inf)
                       for _, options in families)
        best = math.inf
        for choice in itertools.product(*(options for _, options in families)):
            if all(math.prod(size for (size, _), (tier, _) in zip(families, choice, strict=True)
                             if tier <= level) <= largest for level, largest in capacities):
                best = min(best, sum(price for _, price in choice))
        return best

    def _possible_senders(self) -> list[int]:
        """Last layers a block-chain stage's predecessor may end with: a block, or the head."""
        chain = self.chain
        return [chain.head] + ([0] if chain.head else [])

    def stage_sync(self, span: Span, dp: int, zero: int) -> int:
        """The exposed sync of a stage with its dense and expert groups on the pair of
        admitting tiers that exposes least: at most the stage's exposed sync in every plan
        (the module docstring, step 3)."""
        prices = self.prices
        dense = self._sync_parts(prices.dense_group(dp),
                                 lambda tier: prices.dense_sync_parts(span, dp, zero, tier))
        expert = self._sync_parts(prices.expert_group(dp),
                                  lambda tier: prices.expert_sync_parts(span, dp, zero, tier))
        backward, forward = prices.backward(span), prices.forward(span)
        return min(cost.exposed_sync_ticks(d[0] + e[0], backward, self.overlap, d[1] + e[1],
                                           forward, self.overlap_gather)
                   for d in dense for e in expert)

    def _sync_parts(self, group: int, parts) -> list:
        """(gradient phase, weight gather) of one group on every tier admitting it."""
        if group <= 1:
            return [(0, 0)]
        return [parts(tier.index) for tier in self.tiers if tier.admits(group)]

    def _exposed(self, reduce: np.ndarray, gather: np.ndarray, backward: np.ndarray,
                 forward: np.ndarray) -> np.ndarray:
        """``cost.exposed_sync_ticks`` elementwise on integer (object) arrays."""
        reduce = np.maximum(0, reduce - backward) if self.overlap else reduce
        gather = np.maximum(0, gather - forward) if self.overlap_gather else gather
        return reduce + gather

    # ------------------------------------------------------------ per shape

    def bound(self, shape: Shape) -> ShapeBound:
        """The placement-free bound of the shape (proof: the module docstring)."""
        if self.chain is None:
            return self._span_bound(shape)
        tau = self._block_tau(shape)
        if math.isinf(tau):
            return ShapeBound(shape, math.inf, math.inf)
        return ShapeBound(shape, tau, self._block_sync(shape))

    def _span_bound(self, shape: Shape) -> ShapeBound:
        catalogue = Catalogue(self.instance, self.prices, shape, None)
        num_stages = shape.num_stages

        def tau(option) -> int:
            span = option.span
            return self.stage_tau(span, option.stage > 0, option.stage < num_stages - 1,
                                  span.first - 1 if option.stage > 0 else None,
                                  gather=self._gather_of(shape))

        tau_lb = min_max_split(catalogue, tau)
        if math.isinf(tau_lb):
            return ShapeBound(shape, math.inf, math.inf)
        sync_lb = min_max_split(catalogue, lambda o: self.stage_sync(o.span, shape.dp,
                                                                    shape.zero))
        return ShapeBound(shape, tau_lb, sync_lb)

    def raised(self, shape: Shape, k_min: dict) -> float:
        """Bound on the shape's plans where some intra group of a family f lies above its
        innermost admitting tier k_min[f]: one stage pays that family on a higher tier
        (proof: the module docstring, "Raised bound").  +inf when no family can be raised."""
        best = math.inf
        for family, lowest in k_min.items():
            value = self._raised_tau(shape, (family, lowest))
            if not math.isinf(value):
                best = min(best, shape.rounds * value + self._sync_value(shape))
        return best

    def _sync_value(self, shape: Shape) -> float:
        if self.chain is None:
            catalogue = Catalogue(self.instance, self.prices, shape, None)
            return min_max_split(catalogue, lambda o: self.stage_sync(o.span, shape.dp,
                                                                     shape.zero))
        return self._block_sync(shape)

    def _raised_tau(self, shape: Shape, raised: tuple) -> float:
        num_stages = shape.num_stages
        if self.chain is None:
            catalogue = Catalogue(self.instance, self.prices, shape, None)
            return _span_min_max_with_one(
                catalogue,
                lambda o: self.stage_tau(o.span, o.stage > 0, o.stage < num_stages - 1,
                                         o.span.first - 1 if o.stage > 0 else None),
                lambda o: self.stage_tau(o.span, o.stage > 0, o.stage < num_stages - 1,
                                         o.span.first - 1 if o.stage > 0 else None, raised))
        normal = self._stage_rows(shape, lambda kind, mode: self._tau_row(kind, mode))
        high = self._stage_rows(shape, lambda kind, mode: self._tau_row(kind, mode, raised))
        return self._min_max(normal, shape, high)

    def combo_rows(self, shape: Shape, k_min: dict, combo: tuple[int, int]
                   ) -> list[np.ndarray]:
        """Per stage, over block counts: compute + intra collectives on their k_min tiers
        + the input transfer on tier combo[0] and the output on combo[1] (-1: none), the
        least over modes that fit, suffix minima (block chains only)."""
        return self._stage_rows(shape, lambda kind, mode: self._combo_row(kind, mode, k_min,
                                                                          combo))

    def _combo_row(self, kind: Kind, mode: RecomputeMode, k_min: dict,
                   combo: tuple[int, int]) -> np.ndarray:
        key = ("combo", kind, mode, tuple(sorted((f.value, k) for f, k in k_min.items())),
               combo)
        if key not in self._tau_rows:
            prices = self.prices
            row = np.full(self.chain.blocks + 1, INF, dtype=np.int64)
            for blocks in range(self.chain.blocks + 1):
                span = self._kind_span(kind, blocks, mode)
                if span is None:
                    continue
                value = prices.compute(span) + sum(prices.collectives(span, family, tier)
                                                   for family, tier in k_min.items())
                if combo[0] >= 0:
                    value += min(prices.transfer(sender, combo[0])
                                 for sender in self._possible_senders())
                if combo[1] >= 0:
                    value += prices.transfer(span.last, combo[1])
                row[blocks] = value
            self._tau_rows[key] = np.minimum.accumulate(row[::-1])[::-1]
        return self._tau_rows[key]

    def largest_blocks(self, rows: list[np.ndarray], shape: Shape, cap: int) -> np.ndarray:
        """Per stage, the most blocks whose row value is within ``cap`` (-1: not even the
        fewest the stage must hold)."""
        matrix = np.stack(rows)
        lows = self.fewest_blocks(shape.num_stages)
        counts = (matrix <= cap).sum(axis=1)
        return np.where(counts > lows, counts - 1, -1)

    # ------------------------------------------------------------ block chains

    def _kind_span(self, kind: Kind, blocks: int, mode: RecomputeMode) -> Span | None:
        chain = self.chain
        if kind is Kind.ONLY:
            return Span(0, chain.num_layers - 1, mode) if blocks == chain.blocks else None
        if kind is Kind.FIRST:
            size = chain.head + blocks
            return Span(0, size - 1, mode) if size >= 1 else None
        if kind is Kind.LAST:
            size = blocks + chain.tail
            return Span(chain.num_layers - size, chain.num_layers - 1, mode) \
                if size >= 1 else None
        return Span(chain.head, chain.head + blocks - 1, mode) if blocks >= 1 else None

    def _max_fit(self, kind: Kind, in_flight: int, mode: RecomputeMode, zero: int,
                 dp: int) -> int:
        """Most blocks a stage of this kind fits in memory with (-1: not even the fewest).

        Binary search is exact: a stage's bytes (§3, §3.2 a, d: state of its parameters,
        in-flight activations, the working set and ZeRO-3 buffers, each a sum or a max of
        non-negative per-layer terms) never fall when it gains a block."""
        key = (kind, in_flight, mode, zero, dp if zero else 0)
        if key not in self._fit_cache:
            fitting = [blocks for blocks in range(self.chain.blocks + 1)
                       if (span := self._kind_span(kind, blocks, mode)) is not None]
            low, high, best = 0, len(fitting) - 1, -1
            while low <= high:  # memory grows with the blocks of a span
                middle = (low + high) // 2
                span = self._kind_span(kind, fitting[middle], mode)
                if self.prices.memory(span, in_flight, zero, dp) <= self.limit:
                    best, low = fitting[middle], middle + 1
                else:
                    high = middle - 1
            self._fit_cache[key] = best
        return self._fit_cache[key]

    def _tau_row(self, kind: Kind, mode: RecomputeMode, raised: tuple | None = None,
                 gather: tuple | None = None) -> np.ndarray:
        """Suffix minima over block counts of the cheap τ of a stage of this kind."""
        key = (kind, mode, raised, gather)
        if key not in self._tau_rows:
            row = np.full(self.chain.blocks + 1, INF, dtype=np.int64)
            for blocks in range(self.chain.blocks + 1):
                span = self._kind_span(kind, blocks, mode)
                if span is not None:
                    value = self.stage_tau(span, kind in (Kind.MIDDLE, Kind.LAST),
                                           kind in (Kind.FIRST, Kind.MIDDLE), None, raised,
                                           gather)
                    row[blocks] = INF if math.isinf(value) else value
            self._tau_rows[key] = np.minimum.accumulate(row[::-1])[::-1]
        return self._tau_rows[key]

    def _block_tau(self, shape: Shape) -> float:
        num_stages, m = shape.num_stages, shape.num_microbatches
        key = (num_stages, min(m, num_stages), shape.zero, shape.dp if shape.zero else 0)
        if key not in self._tau_cache:
            gather = self._gather_of(shape)
            rows = self._stage_rows(shape, lambda kind, mode: self._tau_row(kind, mode,
                                                                            gather=gather))
            self._tau_cache[key] = self._min_max(rows, shape)
        return self._tau_cache[key]

    def _block_sync(self, shape: Shape) -> float:
        def row(kind: Kind, mode: RecomputeMode) -> np.ndarray:
            key = (kind, shape.dp, shape.zero)
            if key not in self._sync_rows:
                self._sync_rows[key] = self._sync_row(kind, shape.dp, shape.zero)
            return self._sync_rows[key]

        return self._min_max(self._stage_rows(shape, row), shape)

    def _sync_row(self, kind: Kind, dp: int, zero: int, dense_from: int = 0,
                  dense_channels: int | None = None, expert_from: int = 0,
                  expert_channels: int | None = None) -> np.ndarray:
        """Suffix minima over block counts of :meth:`stage_sync` (the same least over pairs
        of admitting tiers, each phase priced by :class:`LinearTicks`); ``dense_from``: the
        dense group only on tiers from that index, ``dense_channels``: on at most that
        many ring channels (:mod:`~nest_cp.solvers.certify.crowded`); ``expert_from`` and
        ``expert_channels`` likewise for the expert group
        (:mod:`~nest_cp.solvers.certify.divided`)."""
        if kind not in self._params:
            spans = [self._kind_span(kind, blocks, RecomputeMode.NONE)
                     for blocks in range(self.chain.blocks + 1)]

            def column(value) -> np.ndarray:
                return np.array([value(s) if s else 0 for s in spans], dtype=object)

            prices = self.prices
            self._params[kind] = (
                np.array([s is not None for s in spans]), column(prices.dense_params),
                column(prices.expert_params), column(prices.backward), column(prices.forward))
        valid, dense, expert, backward, forward = self._params[kind]
        optimizer, tick_s = self.prices.optimizer, self.prices.tick_s

        def parts(group: int, params: np.ndarray, lowest: int = 0,
                  channels: int | None = None) -> list[tuple]:
            """(gradient phase, weight gather) arrays of one group on each admitting tier
            from index ``lowest``, on at most ``channels`` ring channels."""
            if group <= 1:
                return [(0, 0)]
            found = []
            for tier in self.tiers:
                if not tier.admits(group) or tier.index < lowest:
                    continue
                path = tier.collective_path(group) if channels is None else \
                    tier.channel_path(max(1, min(tier.channel_cap(group), channels)))
                reduce = LinearTicks.of_collective(cost.sync_collective(zero),
                                                   optimizer.grad_bytes, group, path, tick_s)
                gather = LinearTicks.of_collective(CollectiveKind.ALL_GATHER,
                                                   optimizer.weight_bytes, group, path, tick_s)
                found.append((reduce.of(params),
                              gather.of(params) if cost.gathers_weights(zero) else 0))
            return found

        exposed = [self._exposed(d[0] + e[0], d[1] + e[1], backward, forward)
                   for d in parts(self.prices.dense_group(dp), dense, dense_from,
                                  dense_channels)
                   for e in parts(self.prices.expert_group(dp), expert, expert_from,
                                  expert_channels)]
        least = np.min(np.stack([np.broadcast_to(np.asarray(x, dtype=object), valid.shape)
                                 for x in exposed]), axis=0)
        row = np.where(valid, least, INF).astype(np.int64)
        return np.minimum.accumulate(row[::-1])[::-1]

    def _stage_rows(self, shape: Shape, row_of) -> list[np.ndarray]:
        """Per stage: the least value over modes that fit, INF past what fits in memory."""
        rows = []
        num_stages, m = shape.num_stages, shape.num_microbatches
        blocks = np.arange(self.chain.blocks + 1)
        for stage in range(num_stages):
            kind = kind_of(stage, num_stages)
            in_flight = cost.in_flight(stage, num_stages, m)
            best = np.full(self.chain.blocks + 1, INF, dtype=np.int64)
            for mode in self.modes:
                fit = self._max_fit(kind, in_flight, mode, shape.zero, shape.dp)
                best = np.minimum(best, np.where(blocks <= fit, row_of(kind, mode), INF))
            rows.append(best)
        return rows

    def _min_max(self, rows: list[np.ndarray], shape: Shape,
                 one_of: list[np.ndarray] | None = None) -> float:
        """min over block counts (c_s) with Σ c_s = n, c_s >= the stage's fewest, of
        max_s row_s(c_s) — or a lower bound on it; with ``one_of``, one stage (any) is
        valued by its ``one_of`` row instead.  +inf when no counts qualify.

        Rows are non-decreasing in the count (INF counts as largest): each is a minimum,
        over modes, of a suffix-minimum row cut to INF past the counts that fit, and a
        minimum of non-decreasing rows is non-decreasing.  ``one_of`` rows are >= ``rows``
        entrywise (a raised family is priced on a subset of the tiers).

        Proof.  For a cap, ``largest`` is per stage the most blocks whose row value is
        <= cap (a prefix of counts, by monotonicity), -1 when not even the fewest qualify.
        If counts (c_s) have max_s row_s(c_s) <= cap then every c_s <= largest_s, so
        Σ largest_s >= n (with ``one_of``: the raised stage s* has c_{s*} <= its ``one_of``
        largest, so Σ largest − (largest_{s*} − raised_{s*}) >= n, and the code takes the
        least loss over s*): ``holds(cap)``.  ``holds`` is monotone in the cap and changes
        only at values occurring in some row (normal or ``one_of``); so the least such
        value that holds is <= the true min-max.  All of them are candidates: a min-max
        whose binding stage is a normal one ends on a normal row's value, and searching
        the ``one_of`` values alone overshot it.  ∎
        """
        matrix = np.stack(rows)
        other = None if one_of is None else np.stack(one_of)
        lows = self.fewest_blocks(shape.num_stages)
        # candidate caps: every finite value of every row, normal and raised (see the proof)
        values = matrix if other is None else np.concatenate((matrix.ravel(), other.ravel()))
        finite = np.unique(values[values < INF])
        if finite.size == 0:
            return math.inf

        def largest(values: np.ndarray, cap: int) -> np.ndarray:
            counts = (values <= cap).sum(axis=1)  # a prefix of block counts (monotone rows)
            return np.where(counts > lows, counts - 1, -1)  # -1: not even the fewest fit

        def holds(cap: int) -> bool:
            most = largest(matrix, cap)
            if other is None:
                return bool(np.all(most >= 0)) and int(most.sum()) >= self.chain.blocks
            raised = largest(other, cap)
            usable = (most >= 0) & (raised >= 0)
            if not np.all(most >= 0) or not np.any(usable):
                return False
            loss = np.where(usable, most - raised, np.iinfo(np.int64).max)
            return int(most.sum()) - int(loss.min()) >= self.chain.blocks

        return least_passing(finite, holds)

    def fewest_blocks(self, num_stages: int) -> np.ndarray:
        """Per stage of a split into ``num_stages``, the fewest blocks it must hold."""
        return np.array([self._min_blocks(stage, num_stages) for stage in range(num_stages)],
                        dtype=np.int64)

    def _min_blocks(self, stage: int, num_stages: int) -> int:
        chain = self.chain
        if num_stages == 1:
            return chain.blocks
        if stage == 0:
            return max(0, 1 - chain.head)
        if stage == num_stages - 1:
            return max(0, 1 - chain.tail)
        return 1


def _span_min_max_with_one(catalogue: Catalogue, normal, raised) -> float:
    """min over splits of max over stages, one stage (any) valued by ``raised`` and the
    others by ``normal``.  value[s, first, pending] over suffixes; ``pending``: the raised
    stage is still to come.

    Exact: every split of offered options with one stage marked raised is one path of
    this DP (stages in order, each option starting where the previous one ended), and
    the DP keeps at every (stage, first layer, pending) the least max over the suffixes;
    max is monotone, so the least suffix value gives the least total."""
    num_layers = catalogue.prices.num_layers
    value = {(catalogue.num_stages, num_layers, False): 0}
    for stage in reversed(range(catalogue.num_stages)):
        for option in catalogue.options[stage]:
            after = option.span.last + 1
            for pending in (False, True):
                candidates = []
                rest = value.get((stage + 1, after, pending))
                if rest is not None:
                    candidates.append(max(normal(option), rest))
                rest = value.get((stage + 1, after, False))
                if pending and rest is not None:
                    candidates.append(max(raised(option), rest))
                if candidates:
                    key = (stage, option.span.first, pending)
                    value[key] = min(value.get(key, math.inf), min(candidates))
    return value.get((0, 0, True), math.inf)
