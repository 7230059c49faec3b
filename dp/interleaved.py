r"""Interleaved 1F1B (v > 1): exact search over splits into S·v chunks (DESIGN §3.2 b).

With K = S·v chunks, chunk k on stage k mod S, a stage's memory (its parameters
over all its chunks, in-flight count × its largest chunk activation, working set)
and its sync (gradients of all its chunks, exposed part minus their backward and,
for the weight gather, their forward)
couple chunks that are not adjacent in the chain, so the v = 1 suffix recurrence
does not apply.  For one outer choice (c, b, S, d, v, z) and layout, with
R = v·m + S − 1, we minimise

    T = R · max_k τ_k + max_s exposed_s        subject to memory_s <= HBM,

by one of two exact methods.

**Block counting** (workloads of n identical layers, "blocks", between at most one
leading and one trailing layer — every preset: embedding, blocks, head).  A chunk
is then described by its block count n_k and its *kind*: the first chunk (the
leading layer and n_0 blocks), the last (n_{K−1} blocks and the trailing layer),
or a middle chunk (n_k >= 1 blocks).  Every middle chunk receives an activation
from a block and sends one, so its time F_{s,mid,ρ}(n) depends only on its stage s,
the stage's mode ρ and n; likewise the first and last chunk.  The one exception is
a first chunk holding the leading layer alone: chunk 1 then receives the leading
layer's output, so this case is a separate *variant* (variant 1: n_0 = 0; variant 0:
n_0 >= 1).  Each F is read off the very range matrices v = 1 uses, at a
representative range of the kind (same layers, same neighbours), and is
non-decreasing in n.

For caps (τ*, Y), stage s with N_s blocks in all is *feasible* iff for some allowed
mode ρ the blocks can be dealt to its chunks with every chunk time <= τ* (n_k <=
u_k(τ*), the largest count with F <= τ*), memory <= HBM and exposed_s(N_s) <= Y.
Memory depends on the deal only through the largest chunk activation A, so with
A_max(N) = ⌊(HBM − state(N) − buffers − work_ρ) / in_flight_s⌋ the deal exists iff
every chunk's bound min(u_k, cnt_k(A_max(N))) is at least its least count and
their sum is at least N, where cnt_k(A) is the largest count whose kept
activation is <= A (box constraints with a fixed sum).  Exposed sync depends on
N_s alone.  So stages decouple given (τ*, Y): with G_s the feasible totals of
stage s, the split exists iff some N_s ∈ G_s sum to n — an interval sum when every
G_s is an interval (the usual case), a subset-sum table otherwise.  Feasibility is
monotone in τ* and in Y, so

    τ_j = least τ* (over the values F takes) feasible with Y_j,
    σ_j = least Y (over the values exposed takes) feasible with τ_j,
    candidate R·τ_j + σ_j,   Y_{j+1} = σ_j − 1,

is the Pareto walk of :mod:`nest_cp.dp.suffix` with binary searches for the passes,
exact by the same argument.  A feasible (τ_j, σ_j) is turned into a plan by
choosing the N_s (greedy over intervals, or backtracking the subset-sum table), the
first feasible mode of each stage and a balanced deal within the bounds; its chunk
times are <= τ_j and its exposed syncs <= σ_j, so (by minimality) its objective is
exactly the candidate — which is checked.  Points that cannot beat the incumbent are
skipped without their passes: τ values with R·τ + σ_min unable to win (σ_min, the
largest over the stages of the least exposed sync any total of theirs has, bounds every
σ_j), and, at τ_j, the Y values with R·τ_j + Y unable to win (every later point has a
larger τ); when none of those is feasible, Y_{j+1} is the largest of them.

**Split enumeration** (any other workload, when C(L − 1, K − 1) is at most
``MAX_SPLITS``; :mod:`nest_cp.dp.enumeration`): every split into K chunks is priced.
Larger non-block workloads with v > 1 are refused with a clear error rather than
searched inexactly.

Ties: the least objective; in block counting the Pareto point with the least τ,
the first variant, the greedy N_s from the first stage, the first feasible mode;
in enumeration the first split in lexicographic order of its cuts.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum

import numpy as np

from nest_cp.dp.compose import RangePrices, RangeSet, Shape
from nest_cp.dp.enumeration import MAX_SPLITS, SplitEnumeration
from nest_cp.dp.geometry import StageGeometry
from nest_cp.dp.kernel import INF
from nest_cp.dp.pricing import LayerTable
from nest_cp.model.plan import Stage


@dataclass(frozen=True, slots=True)
class Blocks:
    """The chain: ``leading`` (0 or 1) layers, ``count`` identical blocks, ``trailing`` (0 or 1)."""

    leading: int
    count: int
    trailing: int

    @property
    def num_layers(self) -> int:
        return self.leading + self.count + self.trailing


def block_structure(table: LayerTable) -> Blocks | None:
    """The longest run of identical consecutive layer profiles, if at most one layer
    precedes and one follows it; None otherwise (kept in the table's cache)."""
    if "blocks" not in table.cache:
        table.cache["blocks"] = _block_structure(table)
    return table.cache["blocks"]


def _block_structure(table: LayerTable) -> Blocks | None:
    profiles, best = table.profiles, (0, 0)
    start = 0
    for index in range(1, len(profiles) + 1):
        if index == len(profiles) or profiles[index] != profiles[start]:
            if index - start > best[1] - best[0]:
                best = (start, index)
            start = index
    leading, trailing = best[0], len(profiles) - best[1]
    if leading > 1 or trailing > 1:
        return None
    return Blocks(leading, best[1] - best[0], trailing)


def exact_method_available(table: LayerTable, num_chunks: int) -> bool:
    """Whether v > 1 with ``num_chunks`` chunks can be searched exactly here."""
    return block_structure(table) is not None or \
        math.comb(table.num_layers - 1, num_chunks - 1) <= MAX_SPLITS


class Interleaved:
    """The exact v > 1 search of one shape (c, b, S, d, v, z), over any layout."""

    def __init__(self, prices: RangePrices, shape: Shape, limit: int):
        blocks = block_structure(shape.table)
        if blocks is not None:
            self.method = _BlockCounts(prices, shape, limit, blocks)
        else:
            self.method = SplitEnumeration(prices, shape, limit)

    def fits_somewhere(self) -> bool:
        """Whether some split and modes fit memory (every time allowed)."""
        return self.method.fits_somewhere()

    def least_memory(self) -> int:
        """The least, over splits and modes, of the largest stage memory."""
        return self.method.least_memory()

    def search(self, geometries: list[StageGeometry], may_beat: Callable[[int, int], bool],
               offer: Callable[[int, int, tuple[Stage, ...]], None]) -> int:
        """Offer the best plan(s) of one layout; ``may_beat(T, variant)`` and
        ``offer(T, variant, stages)`` carry the variant for the tie rule.  Returns the
        number of feasibility checks (or priced split batches) run."""
        return self.method.search(geometries, may_beat, offer)


# ------------------------------------------------------------------ block counting


class _Kind(Enum):
    FIRST = "first"                # chunk 0: the leading layer (if any) and n >= 1 blocks
    LEADING_ONLY = "leading-only"  # chunk 0 of variant 1: the leading layer alone (n = 0)
    AFTER_LEADING = "after"        # chunk 1 of variant 1: n >= 1 blocks after the leading layer
    MIDDLE = "middle"              # n >= 1 blocks between blocks
    LAST = "last"                  # chunk K − 1: blocks and the trailing layer (if any)


KINDS = tuple(_Kind)
NO_KIND = len(KINDS)  # the id of an unused slot: its vectors are all "too many blocks"


def _chunk_kinds(num_chunks: int, variant: int) -> list[_Kind]:
    kinds = [_Kind.MIDDLE] * num_chunks
    kinds[0], kinds[-1] = _Kind.FIRST, _Kind.LAST
    if variant == 1:
        kinds[0], kinds[1] = _Kind.LEADING_ONLY, _Kind.AFTER_LEADING
    return kinds


def _receives(kind: _Kind) -> tuple[bool, bool]:
    """(receives an activation, receives a gradient) of a chunk of ``kind`` (K >= 4)."""
    return kind not in (_Kind.FIRST, _Kind.LEADING_ONLY), kind is not _Kind.LAST


class _KindRanges:
    """Where a chunk of each kind with n blocks is read in the range matrices.

    For kind k and n blocks: layers first[k, n]..last[k, n] at a position with the same
    layers and neighbours as any such chunk (a middle chunk after block 0, a last chunk
    after a block), valid for least[k] <= n <= largest[k].
    """

    def __init__(self, blocks: Blocks):
        self.blocks = blocks
        count = np.arange(blocks.count + 1)
        leading, last_layer = blocks.leading, blocks.num_layers - 1
        zeros = np.zeros_like(count)
        spans = {
            _Kind.FIRST: (zeros, leading + count - 1, 1, blocks.count),
            _Kind.LEADING_ONLY: (zeros, zeros, 0, 0),
            _Kind.AFTER_LEADING: (zeros + leading, leading + count - 1, 1, blocks.count),
            _Kind.MIDDLE: (zeros + leading + 1, leading + count, 1, blocks.count - 1),
            _Kind.LAST: (last_layer - blocks.trailing - count + 1, zeros + last_layer,
                         0 if blocks.trailing else 1, blocks.count - 1),
        }
        self.least = np.array([spans[kind][2] for kind in KINDS] + [0], dtype=np.int64)
        largest = np.array([spans[kind][3] for kind in KINDS] + [-1], dtype=np.int64)
        self.first = np.clip([spans[kind][0] for kind in KINDS] + [zeros], 0, last_layer)
        self.last = np.clip([spans[kind][1] for kind in KINDS] + [zeros], 0, last_layer)
        self.below = count[None, :] < self.least[:, None]
        self.valid = ~self.below & (count[None, :] <= largest[:, None])

    @property
    def at(self) -> RangeSet:
        """Every kind's ranges, for pricing them alone."""
        return RangeSet(("kinds", self.blocks), self.first, self.last)

    def read(self, matrix: np.ndarray) -> np.ndarray:
        """(kinds + 1, n + 1): the matrix at every kind's ranges (see :meth:`mask`)."""
        return self.mask(matrix[self.first, self.last])

    def mask(self, values: np.ndarray) -> np.ndarray:
        """Values at the ranges, 0 below a kind's least count and INF above its largest (so
        each row of a quantity that grows with the count stays sorted)."""
        return np.where(self.valid, values, np.where(self.below, 0, INF))


@dataclass
class _Slots:
    """The chunks of every stage grouped by kind: slot i of stage s holds mult[s, i]
    chunks of kind id kind[s, i] (NO_KIND: unused), each with at least least[s, i] blocks."""

    kind: np.ndarray
    mult: np.ndarray
    least: np.ndarray
    chunks: list[list[list[int]]]  # chunk indices of each slot


def _slots(ranges: _KindRanges, num_stages: int, num_chunks: int, variant: int) -> _Slots:
    per_stage: list[dict[_Kind, list[int]]] = [{} for _ in range(num_stages)]
    for chunk, kind in enumerate(_chunk_kinds(num_chunks, variant)):
        per_stage[chunk % num_stages].setdefault(kind, []).append(chunk)
    width = max(len(groups) for groups in per_stage)
    kind_ids = np.full((num_stages, width), NO_KIND, dtype=np.int64)
    mult = np.zeros((num_stages, width), dtype=np.int64)
    chunks = []
    for stage, groups in enumerate(per_stage):
        chunks.append(list(groups.values()))
        for slot, (kind, members) in enumerate(groups.items()):
            kind_ids[stage, slot] = KINDS.index(kind)
            mult[stage, slot] = len(members)
    return _Slots(kind_ids, mult, ranges.least[kind_ids], chunks)


class _BlockCounts:
    """Block counting: per-stage feasible totals and their sum (see the module docstring)."""

    def __init__(self, prices: RangePrices, shape: Shape, limit: int, blocks: Blocks):
        self.prices, self.shape, self.limit, self.blocks = prices, shape, limit, blocks
        table = shape.table
        self.modes = table.modes
        self.ranges = _KindRanges(blocks)
        self.variants = [0, 1] if blocks.leading else [0]
        self.slots = {variant: _slots(self.ranges, shape.num_stages, shape.num_chunks, variant)
                      for variant in self.variants}
        self.totals = np.arange(blocks.count + 1)
        self.stage_index = np.arange(shape.num_stages)[:, None]
        self._ends = self._stage_ends()
        self._kept = [self.ranges.read(table.kept_range[mode]) for mode in self.modes]
        self._counts = self._memory_counts(limit)

    # ------------------------------------------------------------ stage totals

    def _stage_ends(self) -> dict[str, np.ndarray]:
        """Per stage: dense, expert, forward, backward sums of its leading / trailing layer, and the
        largest layer parameters and working sets (every stage holds blocks; stage 0 the
        leading layer, stage S − 1 the trailing one)."""
        table, blocks, num_stages = self.shape.table, self.blocks, self.shape.num_stages
        block = blocks.leading
        ends = {name: np.zeros(num_stages, dtype=np.int64)
                for name in ("dense", "expert", "forward", "backward")}
        ends["params_max"] = np.full(num_stages, table.params_max_range[block, block])
        kv_max = table.kv_max_range  # the p2p ring's K/V (context parallelism), or None
        if kv_max is not None:
            ends["kv_max"] = np.full(num_stages, kv_max[block, block])
        for mode in self.modes:
            ends[mode] = np.full(num_stages, table.work_range[mode][block, block])
        layers = {0: range(blocks.leading),
                  num_stages - 1: range(blocks.num_layers - blocks.trailing, blocks.num_layers)}
        for stage in (0, num_stages - 1):
            for layer in layers[stage]:
                ends["dense"][stage] += table.dense_range[layer, layer]
                ends["expert"][stage] += table.expert_range[layer, layer]
                ends["forward"][stage] += table.fwd_range[layer, layer]
                ends["backward"][stage] += table.bwd_range[layer, layer]
                ends["params_max"][stage] = max(ends["params_max"][stage],
                                                table.params_max_range[layer, layer])
                if kv_max is not None:
                    ends["kv_max"][stage] = max(ends["kv_max"][stage], kv_max[layer, layer])
                for mode in self.modes:
                    ends[mode][stage] = max(ends[mode][stage],
                                            table.work_range[mode][layer, layer])
        return ends

    def _totals(self, name: str, range_matrix: np.ndarray) -> np.ndarray:
        """(S, n + 1): a per-block additive quantity of a stage holding N blocks."""
        block = self.blocks.leading
        return range_matrix[block, block] * self.totals[None, :] + self._ends[name][:, None]

    # ------------------------------------------------------------ memory

    def _memory_counts(self, limit: int) -> dict[int, np.ndarray]:
        """Per variant cnt[s, slot, ρ, N]: the most blocks a chunk of the slot may hold when
        its stage holds N blocks in mode ρ (its kept activation <= A_max(N)); −1 if none."""
        table, shape = self.shape.table, self.shape
        fixed = self.prices.fixed_memory(
            table, shape.dp, shape.zero,
            self._totals("dense", table.dense_range) + self._totals("expert", table.expert_range),
            self._ends["params_max"][:, None],
            self._ends["kv_max"][:, None] if "kv_max" in self._ends else None)
        in_flight = shape.in_flight()[:, None]
        used = sorted({int(kind) for slots in self.slots.values() for kind in slots.kind.flat})
        by_kind = np.full((len(KINDS) + 1, len(self.modes), *fixed.shape), -1, dtype=np.int64)
        for index, mode in enumerate(self.modes):
            spare = limit - fixed - self._ends[mode][:, None]
            largest_activation = np.where(spare >= 0, spare // in_flight, -1)  # [s, N]
            for kind in used:
                by_kind[kind, index] = np.searchsorted(self._kept[index][kind],
                                                       largest_activation, side="right") - 1
        # [kind, ρ, s, N] -> [s, slot, ρ, N]
        return {variant: by_kind[slots.kind, :, self.stage_index]
                for variant, slots in self.slots.items()}

    def fits_somewhere(self) -> bool:
        return any(self._feasible(self._stage_sets(variant, self._no_time_caps(variant), None))
                   for variant in self.variants)

    def least_memory(self) -> int:
        """Binary search on the HBM limit for the least one some split fits."""
        def fits(limit: int) -> bool:
            counts = self._memory_counts(limit)
            return any(self._feasible(self._stage_sets(
                variant, self._no_time_caps(variant), None, counts[variant]))
                for variant in self.variants)

        low, high = 0, 2**62
        if not fits(high):
            return INF
        while low < high:
            middle = (low + high) // 2
            if fits(middle):
                high = middle
            else:
                low = middle + 1
        return low

    def _no_time_caps(self, variant: int) -> np.ndarray:
        slots = self.slots[variant]
        return np.full((*slots.mult.shape, len(self.modes)), self.blocks.count, dtype=np.int64)

    # ------------------------------------------------------------ feasibility

    def _stage_sets(self, variant: int, caps: np.ndarray, exposed_ok: np.ndarray | None,
                    counts: np.ndarray | None = None) -> np.ndarray:
        """ok[s, ρ, N]: stage s can hold N blocks in mode ρ with chunk bounds ``caps[s,
        slot, ρ]`` (time) and the memory counts; ``exposed_ok[s, N]`` the sync cap."""
        slots = self.slots[variant]
        counts = self._counts[variant] if counts is None else counts
        bound = np.minimum(caps[..., None], counts)  # [s, slot, ρ, N]
        used = slots.mult > 0
        slot_ok = (bound >= slots.least[:, :, None, None]) | ~used[:, :, None, None]
        capacity = (slots.mult[:, :, None, None] * np.maximum(bound, 0)).sum(axis=1)
        least_total = (slots.mult * slots.least).sum(axis=1)
        ok = slot_ok.all(axis=1) & (capacity >= self.totals) \
            & (self.totals >= least_total[:, None, None])
        if exposed_ok is not None:
            ok &= exposed_ok[:, None, :]
        return ok

    def _feasible(self, ok: np.ndarray) -> bool:
        return _assign(ok.any(axis=1), self.blocks.count) is not None

    # ------------------------------------------------------------ one layout

    def search(self, geometries: list[StageGeometry], may_beat, offer) -> int:
        checks = 0
        tables = self._layout_tables(geometries)
        for variant in self.variants:
            checks += self._walk(variant, *tables, lambda objective, variant=variant:
                                 may_beat(objective, variant),
                                 lambda objective, stages, variant=variant:
                                 offer(objective, variant, stages))
        return checks

    def _layout_tables(self, geometries: list[StageGeometry]):
        """times[g, kind, ρ, n] (chunk time of n blocks on a stage of distinct geometry g),
        the geometry id of every stage, and exposed[s, N], on this layout."""
        shape, table = self.shape, self.shape.table
        distinct = list(dict.fromkeys(geometries))
        geometry_id = np.array([distinct.index(g) for g in geometries], dtype=np.int64)
        times = np.empty((len(distinct), len(KINDS) + 1, len(self.modes), len(self.totals)),
                         dtype=np.int64)
        receives = [_receives(kind) for kind in KINDS] + [(True, True)]
        for index, geometry in enumerate(distinct):
            for mode_index, mode in enumerate(self.modes):
                for flags in set(receives):
                    read = self.ranges.mask(self.prices.chunk_time(
                        table, geometry, mode, shape.gather_dp, *flags, at=self.ranges.at))
                    for kind, kind_flags in enumerate(receives):
                        if kind_flags == flags:
                            times[index, kind, mode_index] = read[kind]
        dense = self._totals("dense", table.dense_range)
        expert = self._totals("expert", table.expert_range)
        forward = self._totals("forward", table.fwd_range)
        backward = self._totals("backward", table.bwd_range)
        exposed = np.empty_like(dense)
        for index, geometry in enumerate(distinct):
            stages = geometry_id == index
            exposed[stages] = self.prices.exposed(table, geometry, shape.dp, shape.zero,
                                                  dense[stages], expert[stages],
                                                  backward[stages], forward[stages])
        return times, geometry_id, exposed

    def _walk(self, variant: int, kind_times: np.ndarray, geometry_id: np.ndarray,
              exposed: np.ndarray, may_beat, offer) -> int:
        times = kind_times[geometry_id[:, None], self.slots[variant].kind]  # [s, slot, ρ, n]
        tau_values = np.unique(times[times < INF])
        sync_values = np.unique(exposed)
        rounds, checks = self.shape.rounds, 0

        def sets(tau: int, sync_cap: int) -> np.ndarray:
            caps = (times <= tau).sum(axis=-1) - 1
            return self._stage_sets(variant, caps, exposed <= sync_cap)

        def feasible(tau: int, sync_cap: int) -> bool:
            nonlocal checks
            checks += 1
            return self._feasible(sets(tau, sync_cap))

        if len(tau_values) == 0:
            return checks
        floor = _sync_floor(sets(int(tau_values[-1]), INF), exposed)
        sync_cap = INF
        while True:
            useful = _count_true_prefix(len(tau_values), lambda index: may_beat(
                rounds * int(tau_values[index]) + floor))
            tau = least_feasible(tau_values[:useful], lambda value, cap=sync_cap:
                                 feasible(value, cap))
            if tau is None:
                return checks
            # Every later point has τ' >= τ, so only σ with rounds·τ + σ able to win matter.
            capped = sync_values[sync_values <= sync_cap]
            affordable = capped[:_count_true_prefix(
                len(capped), lambda index, tau=tau, capped=capped: may_beat(
                    rounds * tau + int(capped[index])))]
            if len(affordable) == 0:
                return checks
            sigma = least_feasible(affordable, lambda value, tau=tau: feasible(tau, value))
            if sigma is None:  # σ(τ) exceeds them all: later points lie under the largest
                sync_cap = int(affordable[-1])
                continue
            objective = rounds * tau + sigma
            stages, actual = self._plan(variant, sets(tau, sigma), times, exposed, tau)
            if actual != objective:
                raise RuntimeError(f"dp: interleaved plan prices {actual} ticks, "
                                   f"its Pareto point {objective} (a bug)")
            offer(objective, stages)
            if sigma == 0:
                return checks
            sync_cap = sigma - 1

    # ------------------------------------------------------------ the plan

    def _plan(self, variant: int, ok: np.ndarray, times: np.ndarray, exposed: np.ndarray,
              tau: int) -> tuple[tuple[Stage, ...], int]:
        """A split and modes within the caps, and its objective from the same tables."""
        slots, blocks = self.slots[variant], self.blocks
        totals = _assign(ok.any(axis=1), blocks.count)
        caps = (times <= tau).sum(axis=-1) - 1
        counts = [0] * self.shape.num_chunks
        modes, worst_time, worst_sync = [], 0, 0
        for stage, total in enumerate(totals):
            mode_index = int(np.argmax(ok[stage, :, total]))
            modes.append(self.modes[mode_index])
            bounds = np.minimum(caps[stage, :, mode_index],
                                self._counts[variant][stage, :, mode_index, total])
            deal = _deal(total, [(int(slots.least[stage, slot]), int(bounds[slot]), members)
                                 for slot, members in enumerate(slots.chunks[stage])])
            for slot, members in enumerate(slots.chunks[stage]):
                for chunk in members:
                    counts[chunk] = deal[chunk]
                    worst_time = max(worst_time, int(times[stage, slot, mode_index,
                                                           deal[chunk]]))
            worst_sync = max(worst_sync, int(exposed[stage, total]))
        stages, first = [], 0
        for chunk, count in enumerate(counts):
            size = count + (blocks.leading if chunk == 0 else 0) \
                + (blocks.trailing if chunk == len(counts) - 1 else 0)
            stages.append(Stage(first, first + size - 1,
                                modes[chunk % self.shape.num_stages]))
            first += size
        return tuple(stages), self.shape.rounds * worst_time + worst_sync


def _deal(total: int, slot_bounds: list[tuple[int, int, list[int]]]) -> dict[int, int]:
    """Blocks per chunk: each chunk between its least and its bound, summing to ``total``,
    as even as possible (the next block to the emptiest chunk, the earliest on ties)."""
    deal, bound = {}, {}
    for least, largest, members in slot_bounds:
        for chunk in members:
            deal[chunk], bound[chunk] = least, largest
    for _ in range(total - sum(deal.values())):
        open_chunks = [chunk for chunk in sorted(deal) if deal[chunk] < bound[chunk]]
        deal[min(open_chunks, key=lambda chunk: deal[chunk])] += 1
    return deal


def _assign(feasible_totals: np.ndarray, count: int) -> list[int] | None:
    """Totals N_s with feasible_totals[s, N_s] summing to ``count``, or None.

    Intervals: the least of each, then the rest dealt greedily from stage 0.  Otherwise
    a subset-sum table over the stages, backtracked.
    """
    if not feasible_totals.any(axis=1).all():
        return None
    num_totals = feasible_totals.shape[1]
    first = feasible_totals.argmax(axis=1)
    last = num_totals - 1 - feasible_totals[:, ::-1].argmax(axis=1)
    if (feasible_totals.sum(axis=1) == last - first + 1).all():
        if not first.sum() <= count <= last.sum():
            return None
        totals, rest = first.tolist(), count - int(first.sum())
        for stage, room in enumerate((last - first).tolist()):
            totals[stage] += min(rest, room)
            rest -= min(rest, room)
        return totals
    reach = [np.zeros(count + 1, dtype=bool)]
    reach[0][0] = True
    for row in feasible_totals:
        sums = np.convolve(reach[-1].astype(np.int64), row[:count + 1].astype(np.int64))
        reach.append(sums[:count + 1] > 0)
    if not reach[-1][count]:
        return None
    totals, rest = [], count
    for stage in range(len(feasible_totals) - 1, -1, -1):
        options = [total for total in range(min(rest, num_totals - 1) + 1)
                   if feasible_totals[stage, total] and reach[stage][rest - total]]
        totals.append(options[0])
        rest -= options[0]
    return totals[::-1]


def _sync_floor(ok: np.ndarray, exposed: np.ndarray) -> int:
    """A lower bound on σ of every split the walk may price: the largest, over the stages,
    of the least exposed[s, N] among the totals N stage s can hold at all (``ok`` at the
    largest τ and no sync cap, a superset of every later set; the totals' sum is ignored,
    which only loosens the bound).  INF when some stage can hold no total."""
    holdable = ok.any(axis=1)  # [s, N]
    if not holdable.any(axis=1).all():
        return INF
    return int(np.where(holdable, exposed, INF).min(axis=1).max())


def least_feasible(values: np.ndarray, feasible) -> int | None:
    """The least of the sorted ``values`` where the monotone ``feasible`` holds, or None
    when it fails at the largest (binary search)."""
    if len(values) == 0 or not feasible(int(values[-1])):
        return None
    low, high = 0, len(values) - 1
    while low < high:
        middle = (low + high) // 2
        if feasible(int(values[middle])):
            high = middle
        else:
            low = middle + 1
    return int(values[low])


def _count_true_prefix(length: int, predicate) -> int:
    """How many leading indices satisfy the monotone (true, then false) ``predicate``."""
    low, high = 0, length
    while low < high:
        middle = (low + high) // 2
        if predicate(middle):
            low = middle + 1
        else:
            high = middle
    return low
