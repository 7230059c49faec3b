"""Placement-free lower bounds per shape: the cheap first filter of the certification.

For a shape (c, b, S, d, z), every term the placement decides is priced on its
cheapest possible tier — the cheapest tier that admits the group's size: pipeline
pairs (2 devices), TP groups (t), EP groups (e), dense sync (d·e), expert sync and
ZeRO-3 gathers (d) — so each stage's τ and sync are at most their real values
in every plan of the shape.  With τ_lb = min over memory-feasible splits of max
over stages of that τ, and σ_lb the same for the sync,

    T >= (m + S − 1)·τ_lb + σ_lb

(the two minimisations are separate, which can only lower the sum).  Exposed
sync under ``overlap_grad_reduce`` is bounded by 0.

Block chains are done with per-stage-kind arrays over block counts (the bound
then costs O(S·n) per cap of a binary search), explicit spans with
:func:`nest_cp.solvers.certify.split.min_max_split`.  A stage's prices are replaced by
their suffix minima over block counts (still at most the real price, and
non-decreasing), so the blocks a stage may take under a cap form a prefix and
the stages can share n blocks iff their largest counts sum to at least n.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import Enum

import numpy as np

from nest_cp.cost import terms as cost
from nest_cp.model.instance import Instance, RecomputeMode
from nest_cp.solvers.certify.chain import FAMILIES, LayerPrices, LinearTicks, Span, Tier
from nest_cp.solvers.certify.split import BlockChain, Catalogue, Shape, min_max_split

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
        self.overlap = instance.training.overlap_grad_reduce
        self._tau_cache: dict = {}
        self._fit_cache: dict = {}
        self._tau_rows: dict = {}
        self._sync_rows: dict = {}
        self._params: dict = {}

    # ------------------------------------------------------------ shared prices

    def stage_tau(self, span: Span, receives: bool, sends: bool, sender_last: int | None,
                  raised: tuple | None = None) -> float:
        """τ of a stage with every term on its cheapest tier (ZeRO-3 gathers dropped).

        ``raised = (family, k_min)``: that family's groups priced only on tiers above
        k_min (some group of it lies there); inf when no such tier exists.
        """
        prices, config = self.prices, self.prices.config
        value = prices.compute(span)
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
        if sends:
            value += cheapest_tier(self.tiers, 2, lambda tier: prices.transfer(span.last, tier))
        if receives:
            senders = [sender_last] if sender_last is not None else self._possible_senders()
            value += min(cheapest_tier(self.tiers, 2, lambda tier, s=s: prices.transfer(s, tier))
                         for s in senders)
        return value

    def _possible_senders(self) -> list[int]:
        """Last layers a block-chain stage's predecessor may end with: a block, or the head."""
        chain = self.chain
        return [chain.head] + ([0] if chain.head else [])

    def stage_sync(self, span: Span, dp: int, zero: int) -> int:
        """Dense + expert gradient sync of a stage on their cheapest tiers (0 with overlap)."""
        if self.overlap:
            return 0
        prices, config = self.prices, self.prices.config
        dense = cheapest_tier(self.tiers, dp * config.ep,
                              lambda tier: prices.dense_sync(span, dp, zero, tier))
        expert = cheapest_tier(self.tiers, dp, lambda tier: prices.expert_sync(span, dp, zero,
                                                                               tier))
        return dense + expert

    # ------------------------------------------------------------ per shape

    def bound(self, shape: Shape) -> ShapeBound:
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
                                  span.first - 1 if option.stage > 0 else None)

        tau_lb = min_max_split(catalogue, tau)
        if math.isinf(tau_lb):
            return ShapeBound(shape, math.inf, math.inf)
        sync_lb = min_max_split(catalogue, lambda o: self.stage_sync(o.span, shape.dp,
                                                                    shape.zero))
        return ShapeBound(shape, tau_lb, sync_lb)

    def raised(self, shape: Shape, k_min: dict) -> float:
        """Bound on the shape's plans where some intra group of a family f lies above its
        innermost admitting tier k_min[f]: one stage pays that family on a higher tier."""
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
        lows = np.array([self._min_blocks(s, shape.num_stages) for s in range(len(rows))])
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
        """Most blocks a stage of this kind fits in memory with (-1: not even the fewest)."""
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

    def _tau_row(self, kind: Kind, mode: RecomputeMode, raised: tuple | None = None
                 ) -> np.ndarray:
        """Suffix minima over block counts of the cheap τ of a stage of this kind."""
        key = (kind, mode, raised)
        if key not in self._tau_rows:
            row = np.full(self.chain.blocks + 1, INF, dtype=np.int64)
            for blocks in range(self.chain.blocks + 1):
                span = self._kind_span(kind, blocks, mode)
                if span is not None:
                    value = self.stage_tau(span, kind in (Kind.MIDDLE, Kind.LAST),
                                           kind in (Kind.FIRST, Kind.MIDDLE), None, raised)
                    row[blocks] = INF if math.isinf(value) else value
            self._tau_rows[key] = np.minimum.accumulate(row[::-1])[::-1]
        return self._tau_rows[key]

    def _block_tau(self, shape: Shape) -> float:
        num_stages, m = shape.num_stages, shape.num_microbatches
        key = (num_stages, min(m, num_stages), shape.zero, shape.dp if shape.zero else 0)
        if key not in self._tau_cache:
            rows = self._stage_rows(shape, lambda kind, mode: self._tau_row(kind, mode))
            self._tau_cache[key] = self._min_max(rows, shape)
        return self._tau_cache[key]

    def _block_sync(self, shape: Shape) -> float:
        if self.overlap:
            return 0

        def row(kind: Kind, mode: RecomputeMode) -> np.ndarray:
            key = (kind, shape.dp, shape.zero)
            if key not in self._sync_rows:
                self._sync_rows[key] = self._sync_row(kind, shape.dp, shape.zero)
            return self._sync_rows[key]

        return self._min_max(self._stage_rows(shape, row), shape)

    def _sync_row(self, kind: Kind, dp: int, zero: int) -> np.ndarray:
        """Suffix minima over block counts of the cheapest dense + expert sync of a stage."""
        if kind not in self._params:
            spans = [self._kind_span(kind, blocks, RecomputeMode.NONE)
                     for blocks in range(self.chain.blocks + 1)]
            self._params[kind] = (
                np.array([s is not None for s in spans]),
                np.array([self.prices.dense_params(s) if s else 0 for s in spans], dtype=object),
                np.array([self.prices.expert_params(s) if s else 0 for s in spans],
                         dtype=object))
        valid, dense, expert = self._params[kind]
        total = np.zeros(len(valid), dtype=object)
        kind_of_sync = cost.sync_collective(zero)
        grad_bytes, tick_s = self.prices.optimizer.grad_bytes, self.prices.tick_s
        for group, params in ((dp * self.prices.config.ep, dense), (dp, expert)):
            if group > 1:
                total = total + np.min(np.stack([
                    LinearTicks.of_collective(kind_of_sync, grad_bytes, group, tier.path,
                                              tick_s).of(params)
                    for tier in self.tiers if tier.admits(group)]), axis=0)
        row = np.where(valid, total, INF).astype(np.int64)
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
        """Least cap under which the stages' largest block counts reach n (rows are
        non-decreasing up to where they turn INF).  With ``one_of``, one stage (any)
        takes its row from ``one_of`` instead (whose values are at least ``rows``')."""
        matrix = np.stack(rows)
        other = None if one_of is None else np.stack(one_of)
        lows = np.array([self._min_blocks(s, shape.num_stages) for s in range(len(rows))])
        finite = np.unique(matrix[matrix < INF] if other is None else other[other < INF])
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

        if not holds(int(finite[-1])):
            return math.inf
        low, high = 0, finite.size - 1
        while low < high:
            middle = (low + high) // 2
            if holds(int(finite[middle])):
                high = middle
            else:
                low = middle + 1
        return int(finite[low])

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
    stage is still to come."""
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
