"""Shapes (the outer choices) and the stage options of a shape's split.

A *shape* fixes (c, b, S, d, z): everything that is not split, recomputation or
placement (c here is the whole intra-layer configuration: t, e and the context
width).  Every plan of the full space with v = 1 (DESIGN §2, §4) fixes exactly
one configuration c, microbatch b, depth S, degree d with a·S·d <= N and ZeRO
stage z, so it belongs to exactly one shape of :func:`shapes` (m = ceil(B / (b·e·d))
follows); a lower bound per shape and the minimum over shapes bound the whole
space.

Splits.  When the chain is a *block chain* — at most one distinct layer before
and one after n identical blocks (embedding + identical transformer blocks +
head, as every model of the paper grid) — a stage is a block count plus the
fixed ends: stage 0 holds the first layer and c_0 >= 0 blocks, the last stage
c_{S−1} >= 0 blocks and the last layer, a middle stage c_s >= 1 blocks, with
Σ c_s = n.  Lemma: every contiguous split of non-empty stages is one such count
vector, and every price of a stage (compute, rerun, collectives on any tier, the
out_bytes it sends, its bytes in memory, its gradient bytes) equals that of the
representative span of its count.  Proof: stages are contiguous and cover the
chain in order, so stage 0 starts with the head and the last stage ends with the
tail (S = 1: one stage holds all); a middle stage holds only blocks; every price
is a function of the stage's multiset of layer profiles (and its last layer's
out_bytes), and identical blocks have identical profiles.  ∎  Any other chain is
split into explicit spans.

A stage option is a span (a representative one for block counts) with a
recompute mode; only options that fit in memory at their position (k_s =
min(S − s, m) microbatches in flight, DESIGN §3) are offered: a plan whose stage
does not fit is infeasible, not a plan.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass

from nest_cp.cost import terms as cost
from nest_cp.model.instance import Instance, IntraConfig, RecomputeMode
from nest_cp.solvers.certify.chain import LayerPrices, Span


def shape_label(config: IntraConfig, microbatch: int, num_stages: int, dp: int,
                zero: int) -> str:
    """The label of the shape (c, b, S, d, z): :attr:`Shape.label`, and the shape a plan
    belongs to."""
    context = f",cp={config.cp}" if config.cp > 1 else ""
    return (f"tp={config.tp},ep={config.ep}{context},b={microbatch},S={num_stages},d={dp},"
            f"z={zero}")


@dataclass(frozen=True, slots=True)
class Shape:
    """One (c, b, S, d, z) and its microbatch count m."""

    choice: int  # index into instance.choices
    config: IntraConfig
    microbatch: int
    num_stages: int
    dp: int
    zero: int
    num_microbatches: int

    @property
    def rounds(self) -> int:
        """m + S − 1: how many τ_max an iteration lasts."""
        return self.num_microbatches + self.num_stages - 1

    @property
    def label(self) -> str:
        return shape_label(self.config, self.microbatch, self.num_stages, self.dp, self.zero)

    @property
    def devices(self) -> int:
        return self.config.devices * self.num_stages * self.dp


def shapes(instance: Instance) -> Iterator[Shape]:
    """Every shape with a·S·d <= N, each ZeRO stage allowed (by the instance and for the
    shape by its launcher)."""
    num_devices, training = instance.cluster.num_devices, instance.training
    for choice, (config, microbatch) in enumerate(instance.choices):
        for num_stages in range(1, instance.workload.num_layers + 1):
            for dp in range(1, num_devices // (config.devices * num_stages) + 1):
                m = cost.num_microbatches(training.global_batch, microbatch, config, dp)
                for zero in sorted(set(training.zero_stages)):
                    if instance.admits(config, microbatch, dp, num_stages, 1, zero):
                        yield Shape(choice, config, microbatch, num_stages, dp, zero, m)


@dataclass(frozen=True, slots=True)
class StageOption:
    """Stage ``stage`` takes ``span`` (``blocks`` of the block chain, None for explicit spans)."""

    stage: int
    span: Span
    blocks: int | None

    @property
    def mode(self) -> RecomputeMode:
        return self.span.mode


@dataclass(frozen=True, slots=True)
class BlockChain:
    """``head`` layers before and ``tail`` after ``blocks`` identical layers (head, tail <= 1)."""

    head: int
    blocks: int
    tail: int

    @property
    def num_layers(self) -> int:
        return self.head + self.blocks + self.tail


def block_chain(prices: LayerPrices) -> BlockChain | None:
    """The block structure of the chain for this choice, or None if it has none."""
    profiles = prices.profiles
    num_layers = len(profiles)
    for head in (0, 1):
        for tail in (0, 1):
            middle = profiles[head:num_layers - tail]
            if len(middle) >= 2 and all(p == middle[0] for p in middle):
                return BlockChain(head, len(middle), tail)
    return None


class Catalogue:
    """The memory-feasible stage options of one shape."""

    def __init__(self, instance: Instance, prices: LayerPrices, shape: Shape,
                 chain: BlockChain | None):
        self.instance, self.prices, self.shape, self.chain = instance, prices, shape, chain
        self.limit = instance.cluster.usable_hbm_bytes
        modes = instance.training.recompute_modes
        self.modes = [mode for mode in RecomputeMode if mode in modes]
        self.options: list[list[StageOption]] = [
            [option for option in self._candidates(stage) if self._fits(option)]
            for stage in range(shape.num_stages)]

    @property
    def num_stages(self) -> int:
        return self.shape.num_stages

    def _candidates(self, stage: int) -> Iterator[StageOption]:
        num_stages, num_layers = self.shape.num_stages, self.prices.num_layers
        if self.chain is not None:
            chain = self.chain
            for blocks in range(chain.blocks + 1):
                span = self._block_span(stage, blocks)
                if span is None:
                    continue
                for mode in self.modes:
                    yield StageOption(stage, Span(span[0], span[1], mode), blocks)
            return
        firsts = [0] if stage == 0 else range(stage, num_layers - (num_stages - stage) + 1)
        for first in firsts:
            lasts = [num_layers - 1] if stage == num_stages - 1 else range(
                first, num_layers - (num_stages - stage) + 1)
            for last in lasts:
                for mode in self.modes:
                    yield StageOption(stage, Span(first, last, mode), None)

    def _block_span(self, stage: int, blocks: int) -> tuple[int, int] | None:
        """The representative span of ``blocks`` blocks at ``stage``; None if not allowed."""
        chain, num_stages = self.chain, self.shape.num_stages
        first_stage, last_stage = stage == 0, stage == num_stages - 1
        if num_stages == 1:
            return (0, chain.num_layers - 1) if blocks == chain.blocks else None
        if first_stage:
            size = chain.head + blocks
            return (0, size - 1) if size >= 1 else None
        if last_stage:
            size = blocks + chain.tail
            return (chain.num_layers - size, chain.num_layers - 1) if size >= 1 else None
        return (chain.head, chain.head + blocks - 1) if blocks >= 1 else None

    def _fits(self, option: StageOption) -> bool:
        shape = self.shape
        in_flight = cost.in_flight(option.stage, shape.num_stages, shape.num_microbatches)
        return self.prices.memory(option.span, in_flight, shape.zero, shape.dp) <= self.limit

    def spans_of(self, chosen: list[StageOption]) -> list[Span]:
        """The actual spans of a split given one option per stage (block counts laid out)."""
        if self.chain is None:
            return [option.span for option in chosen]
        spans, first = [], 0
        for index, option in enumerate(chosen):
            size = option.blocks + (self.chain.head if index == 0 else 0) + (
                self.chain.tail if index == len(chosen) - 1 else 0)
            spans.append(Span(first, first + size - 1, option.mode))
            first += size
        return spans

    def min_blocks(self, stage: int) -> int:
        """Fewest blocks a stage may hold (block chains only)."""
        if self.num_stages == 1:
            return self.chain.blocks
        if stage == 0:
            return max(0, 1 - self.chain.head)
        if stage == self.num_stages - 1:
            return max(0, 1 - self.chain.tail)
        return 1


def min_max_split(catalogue: Catalogue, value) -> float:
    """min over splits made of offered options of max over stages of ``value(option)``.

    +inf when no split exists.  Exact on explicit spans: every split of offered
    options is one path of the DP over (stage, first layer), which keeps per state
    the least max over suffixes (max is monotone).  Block chains:
    :func:`_block_min_max`.
    """
    if catalogue.chain is not None:
        return _block_min_max(catalogue, value)
    num_layers = catalogue.prices.num_layers
    best = {(catalogue.num_stages, num_layers): 0}
    for stage in reversed(range(catalogue.num_stages)):
        for option in catalogue.options[stage]:
            rest = best.get((stage + 1, option.span.last + 1))
            if rest is None:
                continue
            candidate = max(value(option), rest)
            key = (stage, option.span.first)
            best[key] = min(best.get(key, candidate), candidate)
    return best.get((0, 0), math.inf)


def _block_min_max(catalogue: Catalogue, value) -> float:
    """Least cap such that the stages can share every block with each stage's value <= cap.

    Per stage, the block counts whose cheapest option is within the cap; the blocks
    can be shared iff a choice of one count per stage sums to n (a reachability
    bitset over totals, so no monotonicity is assumed); binary search on the cap.
    Exact: ``holds`` is monotone in the cap and changes only at the option values,
    all of which are candidates, so the least one that holds is the min-max.
    """
    per_stage: list[dict[int, int]] = []  # blocks -> least value over the stage's options
    for stage in range(catalogue.num_stages):
        cheapest: dict[int, int] = {}
        for option in catalogue.options[stage]:
            price = value(option)
            cheapest[option.blocks] = min(cheapest.get(option.blocks, price), price)
        if not cheapest:
            return math.inf
        per_stage.append(cheapest)
    total = catalogue.chain.blocks
    mask = (1 << (total + 1)) - 1

    def holds(cap) -> bool:
        reach = 1  # bit k: some choice for the stages so far holds k blocks
        for cheapest in per_stage:
            step = 0
            for blocks, price in cheapest.items():
                if price <= cap:
                    step |= reach << blocks
            reach = step & mask
            if not reach:
                return False
        return bool(reach >> total & 1)

    return least_passing(sorted({price for cheapest in per_stage
                                 for price in cheapest.values()}), holds)


def least_passing(caps, holds) -> float:
    """The least of the ascending ``caps`` that ``holds``, by bisection (``holds`` is
    monotone: true from some cap on); inf when none does."""
    if len(caps) == 0 or not holds(int(caps[-1])):
        return math.inf
    low, high = 0, len(caps) - 1
    while low < high:
        middle = (low + high) // 2
        if holds(int(caps[middle])):
            high = middle
        else:
            low = middle + 1
    return int(caps[low])


def best_of_crossing(pair, count: int) -> float:
    """max over indices i < ``count`` of min(A_i, B_i), where ``pair(i)`` = (A_i, B_i) with A
    never falling and B never rising in i: the first index where A >= B by bisection, the
    best at it or the index before it (the sync-path and short-run bounds' threshold
    search)."""
    low, high = 0, count - 1
    while low < high:
        middle = (low + high) // 2
        first, second = pair(middle)
        if first >= second:
            high = middle
        else:
            low = middle + 1
    best = min(pair(low))
    if low > 0:
        best = max(best, min(pair(low - 1)))
    return best


def largest_per_class(most: int, least: int, key) -> list[tuple[int, object]]:
    """(count, class) for the largest count of each class, counts from ``most`` down to
    ``least``, in the order first met; ``key(count)`` names a count's class, or None for a
    count left out (the shared-split and short-run count searches: within a class every
    count passes the same tests, so the largest one dominates)."""
    found, seen = [], set()
    for count in range(most, least - 1, -1):
        name = key(count)
        if name is not None and name not in seen:
            seen.add(name)
            found.append((count, name))
    return found
