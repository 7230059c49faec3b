r"""The structured DP planner: exact optimum of the structured space v3a (DESIGN §3.2, §4).

Outer choices.  For every (configuration c = (t, e, context width), microbatch b) of
``instance.choices``,
pipeline depth S, data-parallel degree d with a·S·d <= N, allowed virtual-stage
count v (v > 1 only with S >= 2, S·v <= L and m = ceil(B / (b·e·d)) a multiple of
S), allowed ZeRO stage z and rank layout λ (any of the 24 orders of (t, e, stage,
replica), on a network of three tiers or more also read through another device order
and with the spare nodes first, with replica blocks, with a node tail and with gathered
ends, docs/certificates.md; layouts with equal placements deduplicated), the placement is
fixed, and
with it m and the path of every group and pair (:mod:`nest_cp.dp.geometry`).  The
layers are split into K = S·v chunks, chunk k on stage k mod S, every stage in an
allowed recompute mode shared by its chunks.  A chunk of layers f..l costs
τ(f, l) per microbatch and a stage its exposed sync and memory, exactly as
:func:`nest_cp.cost.evaluate.evaluate` prices them (:mod:`nest_cp.dp.compose`): compute,
the mode's rerun (full: the forward collectives too), each collective on its
slowest TP / EP group, receives on the actual pairs (wrapping S − 1 → 0 when
v > 1), ZeRO-3 gathers and buffers, in-flight counts of 1F1B or of Megatron's
interleaved schedule, the sync as an all-reduce (z = 0) or a reduce-scatter (and for
z ∈ {1, 2} an all-gather of the weights), each group on its multi-channel path (cost
model §5 a, c) and each phase minus the compute it overlaps (§5 d); with a context width
above 1 also each replica's exposed ring or all-to-alls (on its slowest CP group, the
forward part again under recomputation), the p2p ring's K/V buffers, and the sync and
ZeRO shards over the d·c ranks (docs/context-parallelism.md; the context ranks sit
between the tensor and the expert ranks in every layout,
:func:`nest_cp.dp.geometry.layout_config`).  The objective is

    T = (v·m + S − 1) · max_k τ_k + max_s exposed_s.

Per outer choice and layout (the inner searches, each exact, each with its state,
recurrence and correctness argument in its docstring):

- v = 1 (:mod:`nest_cp.dp.suffix`): each stage takes the fastest mode that fits,
  the min-max suffix recurrence V(s, f) = min_l max(τ_eff(s, f, l), V(s + 1, l + 1))
  over layer suffixes (:mod:`nest_cp.dp.kernel`), walked along the Pareto front of
  (max τ, max exposed sync);
- v > 1 (:mod:`nest_cp.dp.interleaved`): chunks of one stage are not adjacent, so
  the recurrence does not carry over; on workloads of identical blocks between at
  most one leading and one trailing layer (every preset) a chunk is a block count
  and, given caps on τ and on the exposed sync, stages decouple into sets of
  feasible block totals whose sum must be the block count — the same Pareto walk
  with binary searches; on any other workload every split is enumerated
  (refused with a clear error when there are too many).

Bounds and pruning (all exact).  Each outer (c, b, S, d, v) has a compute bound
(v·m + S − 1)·τ_lb(S·v), where τ_lb(K) is the kernel's min-max split into K chunks
of chunk times with every collective and receive on its cheapest possible path
(placement, memory, recompute and ZeRO ignored).  Per z the bound is refined by the
ZeRO-3 gathers of the chunk holding the most parameters and the exposed gradient
sync (the parts never overlapped, of the stage holding the most parameters; and the
mean over stages of the sync minus the compute it may overlap), on their cheapest
paths; with t >= 2 on a tiered network (once a plan is known) it is raised by a case
split on where the TP groups lie (:meth:`_Search._shape_bound`,
:mod:`nest_cp.dp.node_bounds`: per-node counting ties the data-parallel groups' ring
channels to the TP groups' placement, so a bound cannot price 8 NIC channels for the
sync and an in-node TP group at once); the least over the z that fit somewhere is the
outer's refined bound, priced for every d of its (c, b, S, v) at once and rounded down
(:meth:`_Search._group_bounds`, :mod:`nest_cp.dp.vector_bounds`: at 10^5 devices tens of
thousands of outers are refined, too many to price one by one).  When an outer first
reaches the top of the queue its bound is raised once more by the same argument stage by
stage (v = 1: :meth:`_Search._stagewise_bound`, priced with up to ``STAGEWISE_BATCH``
other d of its (c, b, S) that may still win, and rounded down:
:meth:`_Search._stagewise_bounds`; v > 1 on block workloads: a stage's slowest chunk
costs at least the mean of its v chunks, so the stage weights of its layers' union over
v, the stages' block counts relaxed to intervals:
:meth:`_Search._interleaved_stagewise_bounds`; where the plan leaves a domain above which
bandwidth falls, the weights count what a stage pays for lying whole in one domain or not:
:meth:`_Search._stage_weights`), and it is queued again if that rose.  Outers
are searched best first, in increasing order of their refined bound, refining them
lazily in the order of their compute bound (:meth:`_Search._best_first`), until no
bound left may beat the incumbent.  Per layout the bound is refined by the layout's
own sync group paths (on networks with a domain tier also stage by stage, each stage on
its own groups: :meth:`_Search._layout_stagewise_bound`) and its mean chunk time
(receives counted on the layout's own receiving paths), and for v = 1 with S >= 2 by the
tiers its pipeline pairs run on (block counts, no geometry built:
:meth:`_Search._layout_receive_bound`), by the
min-max split of the layout's own chunk times in the fastest allowed mode, memory ignored
(:func:`~nest_cp.dp.suffix.fastest_tau`, before the shape's memory tables are built), and
by the same min-max split of the cheapest times restricted to splits that fit memory
(placement-free, so one pass serves every layout); the walk itself stops once rounds·τ_k
plus the layout's sync bound cannot win.  Memory never grows with d (ZeRO
shards shrink, in-flight counts do not grow as m falls), so a (c, b, S, v, z)
that fits nowhere at d = N // (a·S) is skipped for every d.  ZeRO 1 and 2 price τ
and sync identically and 2 only shrinks memory: only the larger allowed one is
searched (and z = 0 and z = 3 only where they differ from it, d·e·c > 1).  With a
context width above 1 the bounds are the placement-free ones and the layout's own (each
argued for a group of g ranks, with g = d·e·c and d·c), without the TP case split.  Layouts
whose order without radix-1 dimensions coincides give equal placements, and layouts whose
stages meet the same paths (equal stage geometries) are priced alike: only the
first of either is searched (a spare-first layout shifted by a multiple of its device
order's translation is known to be such a copy of its spare-last twin before any geometry
is built: :meth:`_Search._translated_twins`).

Ties (a deterministic rule).  Least objective; then the least key (index in
``instance.choices``, S, d, v, z, index in the network's ``structured_layouts`` (v2's 24
of ``all_layouts()`` first), variant of the
interleaved search); within it the inner search's rule (:mod:`nest_cp.dp.suffix`,
:mod:`nest_cp.dp.interleaved`): the Pareto point with the least τ, the fastest
recompute mode that fits, none before selective before full.
"""

from __future__ import annotations

import heapq
import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from nest_cp.cost import terms as cost
from nest_cp.dp.compose import (
    RangePrices,
    Shape,
    SyncFloor,
    distinct_ranges,
    parameter_kinds,
    whole_totals,
)
from nest_cp.dp.geometry import (
    LayoutGeometries,
    PathIds,
    effective_order,
    fastest_group_paths,
    layout_config,
    layout_strides,
    rank_devices,
    rank_end_devices,
    replica_box,
    tp_groups_leave_nodes,
)
from nest_cp.dp.interleaved import (
    Blocks,
    Interleaved,
    block_structure,
    exact_method_available,
)
from nest_cp.dp.kernel import (
    INF,
    least_max,
    min_max_exceeds,
    min_max_values,
    superset_minimum,
    vector_windows,
    windows,
)
from nest_cp.dp.node_bounds import capped_group_paths, crossing_tp_paths, node_cap, tp_qualities
from nest_cp.dp.pricing import LayerTable, range_sums
from nest_cp.dp.suffix import SuffixMemory, fastest_tau, pareto_walk, single_stage
from nest_cp.dp.vector_bounds import lower_ticks, path_classes, ring_terms
from nest_cp.model.errors import BackendOptionError
from nest_cp.model.instance import CollectiveKind, Instance, IntraConfig
from nest_cp.model.launchers.search import Launcher
from nest_cp.model.network import NetworkModel
from nest_cp.model.plan import Dim, Plan, RankLayout, Stage
from nest_cp.model.progress import Progress, ticks_text
from nest_cp.model.result import CUTOFF_TICKS, SolveResult, Space, Status

logger = logging.getLogger(__name__)

CHEAPEST_KEPT = 16  # (K, W, W) cheapest-time arrays kept for reuse across outer choices
STOP_AFTER_S = "stop_after_s"  # options.extra key: stop after this many seconds (the hint)
REFINED_PER_SEARCH = 256  # best first: outer choices refined, at most, between two searches
STAGEWISE_KEPT = 4096  # stage-by-stage bounds kept (per (table, S, d, z)) before clearing
STAGEWISE_BLOCK = 2**21  # entries of the (d, L, L) stage weights priced at once (16 MiB)
STAGEWISE_BATCH = 48  # values of d priced together by the vector stage-by-stage bound
LEAVING, WHOLE, SHARED = 1, 2, 3  # how a stage may lie in a domain (_Search._domain_rows)
VECTOR_MIN_DPS = 64  # (c, b, S, v) with fewer values of d are bounded one outer at a time
LAYOUT_KEYS_KEPT = 2**16  # layout-list keys kept (per (c, S, d)) before clearing
DEEPENED_KEPT = 2**16  # outers whose deeper bounds per z are kept for their floor and search
OUTER_PARTS_KEPT = 256  # outers whose layouts' groups and geometries are kept (floored)
INSIDE, CROSSING = 1, 2  # bits of the TP classes met (_class_codes)
DOMAIN_SEEDS = 8  # outers whose stage divides a domain weighed for the first search
BISECTIONS = 8  # steps of the vector stage-by-stage bound's bisection (many stages)
DOMAIN_PARTS_KEPT = 16  # (layer table, R) whose domain weights' shared parts are kept
SPAN_ROUNDS = 3  # rounds of the stage-by-stage bound over spans of d (_spanned_stagewise)
UNKNOWN = np.iinfo(np.int64).max  # an upper end of a bound's known range, none known yet


@dataclass(frozen=True, slots=True)
class Outer:
    """One outer choice (c, b, S, d, v) and its compute lower bound on T."""

    lower_bound: int
    choice_index: int
    num_stages: int
    dp: int
    virtual: int
    chunk_bound: int  # lower bound on max τ, lower_bound = (v m + S - 1) * chunk_bound

    @property
    def key(self) -> tuple[int, ...]:
        return (self.choice_index, self.num_stages, self.dp, self.virtual)


class _Outers:
    """The sorted outer choices as int64 columns, iterated as :class:`Outer` records."""

    def __init__(self, *columns: np.ndarray):
        self.columns = columns

    def __len__(self) -> int:
        return len(self.columns[0])

    def __iter__(self):
        for start in range(0, len(self), 4096):
            for values in zip(*(column[start:start + 4096].tolist() for column in self.columns)):
                yield Outer(*values)


@dataclass
class Best:
    """Incumbent plan, objective and key, and the least memory excess seen (for the reason).

    The plan is kept as a builder until asked for: its placement lists every device (10^5
    of them), and most incumbents are beaten before the search ends."""

    objective: int | None = None
    key: tuple[int, ...] = ()
    excess_bytes: int | None = None
    excess_where: str = ""
    layout: str = ""  # the incumbent's rank layout (RankLayout.name)
    build: Callable[[], Plan] | None = None
    _plan: Plan | None = None

    @property
    def plan(self) -> Plan | None:
        if self.build is not None:
            self._plan, self.build = self.build(), None
        return self._plan

    def may_beat(self, lower_bound: int, key: tuple[int, ...]) -> bool:
        """Whether a plan with this bound and key could still win under the tie rule."""
        return self.objective is None or (lower_bound, key) < (self.objective, self.key)

    def note_excess(self, excess: int, where: str) -> None:
        if excess > 0 and (self.excess_bytes is None or excess < self.excess_bytes):
            self.excess_bytes, self.excess_where = excess, where


@dataclass
class Stats:
    """Counters reported in ``SolveResult.stats``."""

    outer_total: int = 0
    outer_searched: int = 0
    outer_unfit: int = 0  # dropped unsearched: no split fits memory at any ZeRO stage
    layouts_searched: int = 0
    dp_passes: int = 0


def solve(instance: Instance, options=None,
          layouts: tuple[RankLayout, ...] | None = None) -> SolveResult:
    """The optimal plan of the structured space, or INFEASIBLE with the memory reason.

    ``options.progress`` draws a progress bar over the outer choices on a terminal
    (:mod:`nest_cp.model.progress`; ``-v`` logs its lines instead).  The DP has no
    randomness and, by default, no time limit: it runs to the proven optimum.
    ``options.extra[STOP_AFTER_S]`` makes it anytime (``solve --backend dp --time-limit``,
    and the DP hint of the exact backends): it stops after the lesser of that many seconds
    and ``options.time_limit_s`` (:func:`stop_after_seconds`), the deadline being checked before
    every outer choice, every layout and every step of the inner walks.  Stopped, it
    returns the incumbent FEASIBLE with the bound min(incumbent, β), or UNKNOWN without a
    plan, where β is the least bound of the outer choices not searched to the end.  β is
    a valid bound on the structured space: (1) every plan of an outer choice already
    searched to the end costs at least the incumbent (the inner searches are exact and
    offer every plan that may beat it), and one dropped by its bound too; (2) every other
    outer choice has a bound (its compute or its refined bound, module docstring "Bounds
    and pruning") of at least β (:meth:`_Search._best_first`); (3) the plans of the one
    being searched that were already offered are at least the incumbent, the rest at
    least β.  Stopped while the outer choices were still being listed, β = 0 (no time is
    negative).
    ``options.extra[CUTOFF_TICKS]`` = C (the registry's search one recompute mode at a time:
    the best objective of the parts searched before, whose plan wins ties) starts the search
    with C as the incumbent's objective and a key below every key, so only plans of fewer
    than C ticks are accepted and every bound at least C prunes, as an incumbent's would.
    The optimum is then unchanged wherever it is below C; where no plan is, the result is
    UNKNOWN with the bound C (every plan of the space costs at least C: the search ran to
    the end, each pruning exact), or with min(C, β) when stopped.
    ``layouts`` restricts the rank layouts (default: every layout of the structured space on
    the instance's network, :attr:`NetworkModel.structured_layouts`: v2's 24 of
    ``all_layouts()``, then v3a's other device orders and spare-first offsets), e.g.
    ``all_layouts()`` for structured space v2.  Raises BackendOptionError for v > 1 on a
    workload neither made of identical blocks nor small enough to enumerate.
    """
    start = time.perf_counter()
    stop_after = stop_after_seconds(options)
    cutoff = (getattr(options, "extra", None) or {}).get(CUTOFF_TICKS)
    search = _Search(instance, options, layouts,
                     None if stop_after is None else start + stop_after, cutoff)
    best = search.run()
    elapsed = time.perf_counter() - start
    stats = {"outer_choices": search.stats.outer_total,
             "outer_searched": search.stats.outer_searched,
             "outer_unfit": search.stats.outer_unfit,
             "layouts_searched": search.stats.layouts_searched,
             "dp_passes": search.stats.dp_passes}
    if best.layout:  # a plan was found (a cutoff alone has none)
        stats["layout"] = best.layout
    if search.stopped_bound is not None:
        return _stopped(best, search.stopped_bound, elapsed, stats)
    if best.plan is None and cutoff is not None:
        return _cut_off(cutoff, elapsed, stats)
    if best.plan is None:
        return SolveResult(backend="dp", status=Status.INFEASIBLE, wall_time_s=elapsed,
                           space=Space.STRUCTURED, message=_infeasible_reason(best),
                           stats=stats)
    return SolveResult(backend="dp", status=Status.OPTIMAL, plan=best.plan,
                       objective_ticks=best.objective, bound_ticks=best.objective,
                       wall_time_s=elapsed, space=Space.STRUCTURED, stats=stats)


def stop_after_seconds(options) -> float | None:
    """Seconds the search may run: None (to the end) unless ``extra[STOP_AFTER_S]`` is set,
    then the lesser of it and ``options.time_limit_s`` (the registry shares the time limit
    out among the parts of a solve: one per recompute mode under a launcher, plain and
    SDP), so a time-limited DP keeps within the share it is given.  Set both: with
    ``time_limit_s`` left at its default (60 s) a longer STOP_AFTER_S stops at 60 s."""
    extra = getattr(options, "extra", None) or {}
    if extra.get(STOP_AFTER_S) is None:
        return None
    return min(float(extra[STOP_AFTER_S]), getattr(options, "time_limit_s", math.inf))


def _stopped(best: Best, unsearched_bound: int, elapsed: float, stats: dict) -> SolveResult:
    """The result of a search stopped at its time limit (see :func:`solve`)."""
    if best.plan is None:  # with a cutoff C, β <= C bounds the space (see :func:`solve`)
        return SolveResult(backend="dp", status=Status.UNKNOWN, wall_time_s=elapsed,
                           space=Space.STRUCTURED, stats=stats,
                           bound_ticks=None if best.objective is None
                           else min(unsearched_bound, best.objective),
                           message="stopped at the time limit before finding a plan")
    return SolveResult(backend="dp", status=Status.FEASIBLE, plan=best.plan,
                       objective_ticks=best.objective,
                       bound_ticks=min(best.objective, unsearched_bound),
                       wall_time_s=elapsed, space=Space.STRUCTURED, stats=stats,
                       message="stopped at the time limit")


def _cut_off(cutoff: int, elapsed: float, stats: dict) -> SolveResult:
    """The result of a search to the end that found no plan below its cutoff C: every plan
    of the space costs at least C (see :func:`solve`)."""
    return SolveResult(backend="dp", status=Status.UNKNOWN, bound_ticks=int(cutoff),
                       wall_time_s=elapsed, space=Space.STRUCTURED, stats=stats,
                       message=f"no plan below the cutoff of {int(cutoff)} ticks")


class _TimeUp(Exception):
    """The deadline passed inside one outer choice."""


class _NotRingForms(Exception):
    """A collective of a spanned bound (:meth:`_Search._spanned_ring_price`) is not a
    ring form: no bound over a span of d is priced."""


def _runs(candidates: np.ndarray, domain_rows: tuple[np.ndarray, np.ndarray],
          count: int) -> list[np.ndarray]:
    """``candidates`` (sorted) cut into about ``count`` runs of consecutive entries, none
    across a change of the tier or kind of ``domain_rows`` (:meth:`_Search._domain_rows`),
    each part of the same tier and kind getting runs in proportion to its size."""
    tiers, kinds = domain_rows
    cuts = np.flatnonzero((np.diff(tiers) != 0) | (np.diff(kinds) != 0)) + 1
    parts = np.split(candidates, cuts)
    runs = []
    for part in parts:
        share = max(1, round(count * len(part) / len(candidates)))
        runs += [run for run in np.array_split(part, min(share, len(part))) if len(run)]
    return runs


def _spans(lows: np.ndarray, highs: np.ndarray
           ) -> tuple[np.ndarray, np.ndarray, int, np.ndarray]:
    """Every d of the rows' spans ``lows[i] .. highs[i]`` (each at least one d), ascending
    within a row, with the row each belongs to, the row count and where each row's d
    start (for ``reduceat``)."""
    lengths = highs - lows + 1
    owner = np.repeat(np.arange(len(lows)), lengths)
    starts = np.cumsum(lengths) - lengths
    members = lows[owner] + np.arange(int(lengths.sum())) - starts[owner]
    return members, owner, len(lows), starts


def _infeasible_reason(best: Best) -> str:
    if best.excess_bytes is None:
        return "no plan fits: the structured space is empty"
    return (f"no plan fits: stage memory exceeds usable HBM by {best.excess_bytes} bytes "
            f"at best ({best.excess_where})")


class _Search:
    """The outer enumeration with bounds, and the inner searches of each outer choice."""

    def __init__(self, instance: Instance, options, layouts: tuple[RankLayout, ...] | None,
                 deadline: float | None = None, cutoff: int | None = None):
        self.deadline = deadline  # perf_counter() time to stop at, or None
        self.stopped_bound: int | None = None  # least bound of the unsearched, if stopped
        self.instance = instance
        self.options = options
        self.network = NetworkModel(instance.cluster)
        self.layouts = self.network.structured_layouts if layouts is None else layouts
        self.ids = PathIds(self.network)
        self.prices = RangePrices(instance, self.ids)
        self.device_order = np.array(self.network.canonical_order(), dtype=np.int64)
        self.geometries = LayoutGeometries(self.network, self.ids, self.device_order)
        self.limit = instance.cluster.usable_hbm_bytes
        self.tables: dict[int, LayerTable] = {}
        self.fits: dict[tuple, bool] = {}
        self._cheapest: dict[tuple, np.ndarray] = {}
        self._sync_bounds: dict[tuple, tuple[LayerTable, int]] = {}
        self._floors: dict[tuple, SyncFloor] = {}  # (z, size, cap) -> fastest (capped) paths'
        self._paths: dict[tuple, tuple] = {}  # (size, cap, above) -> group paths
        self._domain_tier_list: tuple[int, ...] | None = None
        self._qualities: dict[int, tuple[tuple[int, int], ...]] = {}  # t -> (h, cap)
        self._gather_forms: dict[tuple, tuple] = {}  # (d, cap) -> gather forms (bounds)
        self._distinct_layouts: dict[tuple, list[tuple[int, RankLayout]]] = {}
        self._placements: dict[tuple, dict[tuple, int]] = {}  # placement key -> position
        self._ring_terms: dict[tuple, list] = {}  # see _ring_classes
        self._size_codes: dict[tuple, tuple] = {}  # (cap, above) -> see _size_classes
        self._path_rates: dict[tuple, list] = {}  # (kind, bytes, paths) -> ring rates
        self._replica_blocks = sorted({layout.replica_block for layout in self.layouts} - {1})
        self._array_layouts = [(index, layout) for index, layout in enumerate(self.layouts)
                               if layout.node_tail is not None or layout.gathered_ends]
        self._layout_totals: dict[tuple, tuple[int, int]] = {}  # (layers, receives)
        self._layout_syncs: dict[tuple, tuple[LayerTable, int]] = {}
        self._stage_parts_kept: dict[tuple, tuple] = {}  # see _stage_parts
        self._stagewise: dict[tuple, tuple[LayerTable, int]] = {}
        self._masks: dict[tuple[int, int], np.ndarray] = {}  # (L, S) -> unordered-range mask
        self._groups: dict[tuple, np.ndarray | bool] = {}  # (c, S, v) -> bound per d
        self._unclassed: set[tuple] = set()  # (c, S, v) whose bounds lack the class bound
        self._zero_bounds: dict[tuple, np.ndarray] = {}  # (c, S, v, z) -> bound per d
        self._stagewise_rows: dict[tuple, np.ndarray] = {}  # (c, S, z) -> per d, -1 unknown
        self._free_zeros: dict[bool, tuple[int, ...]] = {}  # _zero_stages without a launcher
        self._received: dict[tuple, tuple] = {}  # see _layout_receive_bound
        self._spanned: dict[tuple, int] = {}  # (c, S, v, z) -> incumbent spans were tried at
        self._layout_keys: dict[tuple, tuple] = {}  # see _layouts_key
        self._leaving_replicas: dict[tuple, bool] = {}  # see _replica_leaves
        self._classes: dict[tuple, frozenset | None] = {}  # see _tp_classes: TP classes met
        self._pair_tiers: dict[tuple[int, int], np.ndarray] = {}  # see _pair_tier_table
        self._domain_parts: dict[tuple, tuple] = {}  # see _domain_weights
        self._kind_rows: dict[tuple, np.ndarray] = {}  # (c, S) -> see _kind_codes
        self._kind_index: dict[frozenset | None, int] = {}  # kinds -> index in _kinds_seen
        self._kinds_seen: list[frozenset | None] = []
        self._met: dict[tuple, tuple] = {}  # (t, kinds) -> see _met_qualities
        self._class_bounds: dict[tuple, tuple[LayerTable, int]] = {}  # (table, S, d, v, z)
        self._outer_parts: dict[tuple, tuple[dict, dict]] = {}  # see _search_outer
        self._deepened: dict[tuple, tuple] = {}  # outer key -> (incumbent, z -> bound)
        # a cutoff is an incumbent without a plan whose key () loses no tie (solve's docstring)
        self.best = Best() if cutoff is None else Best(objective=int(cutoff))
        self.stats = Stats()

    # ------------------------------------------------------------ outer loop

    def run(self) -> Best:
        try:
            outers = self._outer_choices()
        except _TimeUp:  # nothing searched: every objective is >= 0 ticks
            self.stopped_bound = 0
            return self.best
        self.stats.outer_total = len(outers)
        show = bool(getattr(self.options, "progress", False))
        with Progress("dp", len(outers), show_bar=show, logger=logger) as progress:
            self._best_first(outers, progress)
        if self.best.objective is None and self.stopped_bound is None:
            self._measure_excess(outers)
        return self.best

    def _best_first(self, outers: _Outers, progress: Progress) -> None:
        """Search the outer choices in increasing order of their refined bound
        (:meth:`_refined_bound`), until none left may beat the incumbent.

        The outers come sorted by their compute bound β_c (``outer.lower_bound``), and
        β_c <= β_r, the refined bound.  An outer is refined when its β_c is below every
        refined bound waiting (a heap); the heap's least is searched once no unrefined
        outer has a smaller β_c.  So at any moment every outer not yet searched has
        (bound, key) at least that of the heap's least or of the next unrefined outer —
        the least of which, when the deadline passes, is the bound on everything left
        (``stopped_bound``; the outer being searched then is that least).  An outer whose
        β_r cannot beat the incumbent (with its key, a prefix of its plans' keys) is
        dropped: the incumbent only improves.  The search ends when neither the heap's
        least nor the next unrefined outer may beat it.  At most ``REFINED_PER_SEARCH``
        outers are refined between two searches (so a plan comes early even where
        millions of outers have a compute bound below the first refined ones): the heap's
        least may then be searched before an unrefined outer of smaller compute bound,
        which changes neither the bound on what is left (the least of the three) nor the
        plan that wins.  Until there is an incumbent the refined bound is the fastest-path
        one alone (``split`` False in :meth:`_shape_bound`, cheaper: a plan comes early) and
        no outer is deepened; after, an outer popped from the heap the first time is
        deepened (:meth:`_deeper_bound`, another valid bound on its plans): if that is
        larger it is pushed back with it, else it goes on to the next stage.  Before its
        search, with an incumbent, an outer's layout floor is priced (:meth:`_search_outer`
        with ``floor``: the least bound of the layouts its search would walk, each a bound
        on that layout's plans, the others dropped by a comparison the search repeats
        against an incumbent no worse): if larger it is pushed back with it, else searched.
        Deepenings and floors together are at most ``REFINED_PER_SEARCH`` between two
        searches: past that the popped outer is searched as it is (an anytime plan: without
        the cap, on ``meta-h100-roce`` at 65,536 floors and deepenings took 10 s after the
        first plan with one search).  Every entry of the heap so holds a valid bound of its
        outer (the stage it has reached: 0 refined, 1 deepened, 2 floored), and an outer's
        layouts are walked, cap aside, only once no outer of smaller bound waits, with the
        incumbent that order has found (walks cost most under a poor one).
        Which plan wins does not depend on the order: every plan is accepted by (objective,
        key), and every pruning compares (bound, key prefix) with the incumbent's
        (objective, key).  So on a network with a domain tier one outer, the domain seed
        (:meth:`_domain_seed`), is searched to the end before all the others and skipped
        at its turn; stopped during it, the least compute bound bounds everything.
        """
        seeded = None  # the domain seed's key, once searched to the end
        try:
            seed = self._domain_seed(outers)
            if seed is not None:
                self.stats.outer_searched += 1
                self._search_outer(seed)
                seeded = seed.key
        except _TimeUp:  # every plan costs at least the least compute bound
            self.stopped_bound = int(outers.columns[0][0]) if len(outers) else 0
            return
        stream = iter(outers)
        head = next(stream, None)
        waiting: list[tuple[int, tuple[int, ...], int, Outer]] = []  # (bound, key, stage, ·)
        searching = None
        bounded_now = 0
        try:
            while True:
                refined_now = 0
                while head is not None and (not waiting or (head.lower_bound, head.key)
                                            < waiting[0][:2]):
                    if not self.best.may_beat(head.lower_bound, head.key):
                        head = None  # sorted: no later outer may either
                        break
                    if waiting and refined_now >= REFINED_PER_SEARCH:
                        break  # search the best waiting one first (an anytime plan)
                    self._check_time()
                    refined = self._refined_bound(head)
                    refined_now += 1
                    self.stats.outer_unfit += refined >= INF
                    if refined < INF and self.best.may_beat(refined, head.key):
                        heapq.heappush(waiting, (refined, head.key, 0, head))
                    head = next(stream, None)
                if waiting and not self.best.may_beat(*waiting[0][:2]):
                    waiting.clear()  # a heap: no waiting one may either
                if not waiting:
                    if head is None:
                        return
                    continue
                refined, _, stage, searching = heapq.heappop(waiting)
                # the deeper bound, then the floor, each computed only now (costlier) and
                # together at most REFINED_PER_SEARCH between two searches, as above (an
                # anytime plan); a larger one pushes the outer back at its stage
                for step, raised_bound in ((1, self._deeper_bound), (2, self._search_outer)):
                    if stage >= step or bounded_now >= REFINED_PER_SEARCH or \
                            self.best.objective is None:
                        continue
                    self._check_time()
                    bounded_now += 1
                    raised = raised_bound(searching, refined)
                    if raised > refined:
                        if self.best.may_beat(raised, searching.key):
                            heapq.heappush(waiting, (raised, searching.key, step, searching))
                        searching = None
                        break
                if searching is None:
                    continue
                if searching.key == seeded:  # searched to the end first
                    searching = None
                    continue
                self._check_time()
                bounded_now = 0
                self.stats.outer_searched += 1
                self._search_outer(searching)
                searching = None
                progress.advance(status=f"best {ticks_text(self.best.objective)} ticks")
        except _TimeUp:
            left = [refined] if searching is not None else []
            left += [waiting[0][0]] if waiting else []
            left += [head.lower_bound] if head is not None else []
            self.stopped_bound = min(left, default=self.best.objective or 0)

    def _domain_seed(self, outers: _Outers) -> Outer | None:
        """On a network with a domain tier (:meth:`_domain_tiers`), the outer choice searched
        first, before any bound is asked (a dive for a good first incumbent): of the first
        ``DOMAIN_SEEDS`` outers in compute-bound order whose stage (a·d devices) divides a
        domain of such a tier, the one of least refined bound; None elsewhere.  Until a
        plan is known the refined bound prices every group on the fastest paths, blind to
        the domains: on ``meta-h100-roce`` at 65,536 devices the first outer it chose
        spread one stage over ten pods (a plan of 8.0 s per iteration against 1.45 s), and
        every bound then had to be priced against that plan.  A stage dividing a pod can
        keep its sync inside one.  The order of the searches changes neither the plan that
        wins (module docstring, "Ties") nor any pruning's validity; the seed is not searched
        again when its turn comes."""
        tiers = self._domain_tiers()
        if not tiers or not len(outers):
            return None
        columns = outers.columns
        choices, dps = columns[1], columns[3]
        sizes = np.array([config.devices for config, _ in self.instance.choices],
                         dtype=np.int64)[choices] * dps
        aligned = np.zeros(len(dps), dtype=bool)
        for tier in tiers:
            aligned |= self.network.cluster.network.domain_sizes()[tier] % sizes == 0
        best = None
        for index in np.flatnonzero(aligned)[:DOMAIN_SEEDS].tolist():
            self._check_time()
            outer = Outer(*(int(column[index]) for column in columns))
            bound = self._refined_bound(outer)
            if bound < INF and (best is None or (bound, outer.key) < best[:2]):
                best = (bound, outer.key, outer)
        return None if best is None else best[2]

    def _refined_bound(self, outer: Outer) -> int:
        """The outer's bound of :meth:`_group_bounds` (priced with every d of its (c, b, S,
        v) at once, on the first of them to ask), or where that cannot be priced so (a cost
        model without ring forms) or is not worth it (fewer than ``VECTOR_MIN_DPS`` values
        of d) :meth:`_exact_refined_bound`, which is also the one for c > 1 (the vector
        pass prices the groups and the TP case split as c = 1 has them).  Bounds priced
        before there was an incumbent are priced again at the first ask after, with the
        class bound (:meth:`_group_bounds`).  With an incumbent, where the stage-by-stage
        bound of every z at the outer's d is already known (:meth:`_stagewise_of`, priced
        with other d of its row), the larger of that and the least over z of the larger of
        each z's row and vector bounds (each a bound on that z's plans)."""
        key = (outer.choice_index, outer.num_stages, outer.virtual)
        bounds = self._groups.get(key)
        if bounds is None or (key in self._unclassed and self.best.objective is not None):
            table = self._table(outer.choice_index)
            few = self.instance.cluster.num_devices // (table.config.devices
                                                        * outer.num_stages) < VECTOR_MIN_DPS
            bounds = self._groups[key] = False if few or table.config.cp > 1 else \
                self._group_bounds(outer)
        if bounds is False:
            return self._exact_refined_bound(outer)
        bound = int(bounds[outer.dp - 1])
        if self.best.objective is None or bound >= INF:
            return bound
        # where every z's stage-by-stage bound at this d is already known (priced with other
        # d of its row, :meth:`_stagewise_of`): the least over z of it and the z's vector
        # bound, each a bound on that z's plans (most such outers are then never deepened)
        table = self._table(outer.choice_index)
        least = INF
        for zero in self._zero_stages(table, outer.dp, outer.num_stages, outer.virtual):
            found = self._stagewise_rows.get(key + (zero,))
            known = -1 if found is None else int(found[0][outer.dp - 1])
            if known < 0:
                return bound
            least = min(least, max(known, self._known_bound(key + (zero,), outer.dp)))
        return max(bound, least)

    def _group_bounds(self, outer: Outer) -> np.ndarray | bool:
        """For every d of the outer's (c, b, S, v) (entry d − 1), a lower bound on the cost
        of every plan of (c, b, S, d, v): the least over the ZeRO stages worth searching
        (:meth:`_zero_stages`, here as masks over d), over those some split fits in memory,
        of :meth:`_vector_shape_bound`, itself at most :meth:`_shape_bound` (both halves,
        fastest-path and case split) of the same shape (:mod:`nest_cp.dp.vector_bounds`),
        raised, once there is an incumbent and where t >= 2 (:meth:`_class_terms`), by
        :meth:`_vector_class_bound` at the d where it may still beat the incumbent (the
        others are never searched: the incumbent only improves) and some class term exceeds
        it (elsewhere their least cannot), and by
        :meth:`_vector_domain_bound` of every tier of :meth:`_domain_tiers` (the domain
        bound's case A where no stage fits a domain; none on networks without such a tier);
        INF where none fits (no plan).  False when a collective is not a ring form.  The
        bound of each z is kept (``_zero_bounds``) for :meth:`_deeper_bound` and
        :meth:`_stagewise_of` (its bisection starts there), the fastest-path and case-split
        part per (table, S, v, form) in the table's cache (priced again with an incumbent,
        below); ``_unclassed`` holds the (c, b, S, v) priced without an incumbent, so
        without the class bound."""
        table = self._table(outer.choice_index)
        config, num_stages, virtual = table.config, outer.num_stages, outer.virtual
        dps = np.arange(1, self.instance.cluster.num_devices // (config.devices * num_stages)
                        + 1, dtype=np.int64)
        microbatches = cost.num_microbatches(self.instance.training.global_batch,
                                             table.microbatch, config, dps)
        rounds = virtual * microbatches + num_stages - 1
        least = np.full(len(dps), INF, dtype=np.int64)
        objective = self.best.objective
        group = (outer.choice_index, num_stages, virtual)
        if objective is None:
            self._unclassed.add(group)
        else:
            self._unclassed.discard(group)
        for zero, mask in self._zero_masks(table, dps, num_stages, virtual).items():
            if not mask.any():
                continue
            form = ("vector shape bound", num_stages, virtual, cost.sync_collective(zero),
                    cost.gathers_weights(zero), zero == 3)
            if form not in table.cache:  # ZeRO 1 and 2 are priced alike
                table.cache[form] = self._vector_shape_bound(table, num_stages, virtual, zero,
                                                             dps, rounds, outer.chunk_bound)
            bound = table.cache[form]
            if bound is None:
                return False
            terms = None if objective is None else self._class_terms(
                table, num_stages, virtual, zero, dps, rounds, outer.chunk_bound)
            if terms is not None:  # the class bound, a least of terms, raises no other d
                wanted = mask & (bound <= objective) & (terms.max(axis=0) > bound)
                bound = np.maximum(bound, self._vector_class_bound(
                    terms, table, (num_stages, virtual, zero), dps, rounds, outer.chunk_bound,
                    wanted))
            for tier in self._domain_tiers():
                bound = np.maximum(bound, self._vector_domain_bound(
                    table, num_stages, virtual, zero, dps, rounds, outer.chunk_bound, tier,
                    None if objective is None else mask & (bound <= objective)))
                bound = np.maximum(bound, self._vector_replica_bound(
                    table, num_stages, virtual, dps, rounds, outer.chunk_bound, tier))
            self._zero_bounds[outer.choice_index, num_stages, virtual, zero] = bound
            if not np.any(bound[mask] < least[mask]):
                continue
            shape = Shape(table, num_stages, 1, virtual, zero, int(microbatches[0]))
            if self._fits_at_most_replicas(shape):  # per (c, b, S, v, z): any d will do
                least = np.where(mask, np.minimum(least, bound), least)
        return least

    def _vector_domain_bound(self, table: LayerTable, num_stages: int, virtual: int,
                             zero: int, dps: np.ndarray, rounds: np.ndarray, chunk_bound: int,
                             tier: int, wanted: np.ndarray | None = None) -> np.ndarray:
        """The bound of :meth:`_domain_bound_at` (tier P = ``tier``) where no stage fits a
        tier-P domain, a·d > G_P and d >= 2, for every d of ``dps`` at once, each entry at
        most the exact one; 0 elsewhere (no claim) and with e > 1 or c > 1.

        That bound is there the larger of R·max(τ_lb, gathers) + sync (the vector shape
        bound already holds it) and its case A, the lesser of

        - a TP group leaves its domain (t >= 2): R·max(τ_lb, gathers, τ_A) + sync, τ_A =
          :meth:`_crossing_chunk_bound` (min(t // 2, G_0), S, above P), by (3);
        - none does: by (1) every stage has a group of ranks j leaving its domain, and the
          least over the TP qualities h of :meth:`_tp_qualities` (or h = t, c = G_0 for
          t = 1) of R·max(τ_lb, gathers, gathers_c, τ_h) + sync_P,c, sync_P,c the sync on
          :func:`capped_group_paths` (d, c, P), by (3).

        Each part is priced as :meth:`_vector_shape_bound` prices its own: τ_lb, τ_A, τ_h
        exact (they do not depend on d), gathers and gathers_c by :meth:`_vector_parts`,
        sync_P,c by :meth:`_vector_sync` (cap c, above P: the same two bounds of
        :meth:`_fresh_sync_bound` with every ring form's ceiling dropped, then
        :func:`lower_ticks`, :mod:`nest_cp.dp.vector_bounds`), each at most the exact one;
        R >= 0, and max, + and the least never fall as a part falls.  A term whose τ is
        INF (no plan has it) is left out, as that least would leave it.  By (4), at the d
        whose :meth:`_tp_classes` are known (:meth:`_class_codes`, asked at the entries of
        ``wanted`` a·d > G_P, those that may still beat the incumbent: the others are never
        searched) only the terms of the classes met are kept, as there: the h = t term if
        some visited layout is "inside", the h = 1 term and the TP term if one is
        "crossing"; elsewhere every term is kept (a least over more terms: no larger).  The
        rounds R = v·m + S − 1 are the shape's (``rounds``), and the
        chunk bounds are for K = S·v chunks, as in (3) and A, which hold for any v.  The
        sync parts are kept per (table, S, z, c, P) in the table's cache (they do not
        depend on v)."""
        config = table.config
        domain = self.network.cluster.network.domain_sizes()[tier]
        claimed = (config.devices * dps > domain) & (dps > 1)
        if config.ep > 1 or config.cp > 1 or not claimed.any():
            return np.zeros(len(dps), dtype=np.int64)
        num_chunks = num_stages * virtual
        fast = self._vector_parts(table, num_stages, virtual, zero, dps, None)
        if fast is None:
            return np.zeros(len(dps), dtype=np.int64)
        tau = np.maximum(chunk_bound, fast[0])
        codes = np.zeros(len(dps), dtype=np.int64)  # 0: the classes are not known
        if wanted is not None and config.tp > 1:
            codes = self._class_codes(config, num_stages, dps, wanted & claimed)
        least = np.full(len(dps), INF, dtype=np.int64)
        if config.tp > 1:
            crossing = self._crossing_chunk_bound(
                table, num_chunks, min(config.tp // 2, self.network.node_size), num_stages,
                above=tier)
            if crossing < INF:
                least = np.where((codes == 0) | (codes & CROSSING > 0),
                                 rounds * np.maximum(tau, crossing) + fast[1], INF)
        leaving = np.full(len(dps), INF, dtype=np.int64)
        for quality, cap in self._tp_qualities(config.tp) or \
                ((config.tp, self.network.node_size),):
            crossing = self._off_node_chunk_bound(table, num_chunks) \
                if quality == config.tp else self._crossing_chunk_bound(
                    table, num_chunks, quality, num_stages)
            met = (codes == 0) | (codes & INSIDE > 0 if quality == config.tp else
                                  codes & CROSSING > 0 if quality == 1 else False)
            if crossing >= INF or not met.any():
                continue
            capped = self._vector_parts(table, num_stages, virtual, zero, dps, cap)
            key = ("vector domain sync", num_stages, zero, cap, tier, len(dps))
            if key not in table.cache:
                table.cache[key] = self._vector_sync(table, num_stages, zero, dps, cap, tier)
            sync = table.cache[key]
            if capped is None or sync is None:
                return np.zeros(len(dps), dtype=np.int64)
            leaving = np.where(met, np.minimum(leaving, rounds * np.maximum(
                np.maximum(tau, capped[0]), crossing) + sync), leaving)
        bound = np.minimum(least, leaving)  # INF where no term is left: claimed no further
        return np.where(claimed & (bound < INF), bound, 0)

    def _class_terms(self, table: LayerTable, num_stages: int, virtual: int, zero: int,
                     dps: np.ndarray, rounds: np.ndarray, chunk_bound: int) -> np.ndarray | None:
        """The terms of :meth:`_layout_class_bound` of (c, b, S, d, v, z) for every d of
        ``dps`` at once, each at most the exact one: row 0 "inside", rounds·max(τ_lb, τ_t,
        gathers_c) + sync_c with c = ⌊G_0 / t⌋ (0 where t does not divide G_0: no layout
        is then "inside"), row 1 "crossing", rounds·max(τ_×, gathers) + sync (0 where
        τ_× = 0, as there).  The gathers and sync are :meth:`_vector_parts`' (on the paths
        of c, or the fastest ones), each at most the exact term's
        (:mod:`nest_cp.dp.vector_bounds`), and τ_lb, τ_t, τ_× the exact ones (they do not
        depend on d); rounds >= 0, and max and + never fall as a part falls.  None where
        no layout has a class (t = 1, e > 1, c > 1, graphs: :meth:`_tp_classes`) or a
        collective is not a ring form."""
        config = table.config
        if config.tp == 1 or config.ep > 1 or config.cp > 1 or \
                not self.network.is_hierarchical:
            return None
        num_chunks = num_stages * virtual
        terms = np.zeros((2, len(dps)), dtype=np.int64)
        if self.network.node_size % config.tp == 0:
            parts = self._vector_parts(table, num_stages, virtual, zero, dps,
                                       node_cap(self.network, config.tp))
            if parts is None:
                return None
            terms[0] = rounds * np.maximum(max(
                chunk_bound, self._off_node_chunk_bound(table, num_chunks)), parts[0]) \
                + parts[1]
        crossing = self._all_crossing_chunk_bound(table, num_chunks)
        if crossing > 0:
            parts = self._vector_parts(table, num_stages, virtual, zero, dps, None)
            if parts is None:
                return None
            terms[1] = rounds * np.maximum(crossing, parts[0]) + parts[1]
        return terms

    def _vector_class_bound(self, terms: np.ndarray, table: LayerTable, form: tuple[int, ...],
                            dps: np.ndarray, rounds: np.ndarray, chunk_bound: int,
                            wanted: np.ndarray) -> np.ndarray:
        """:meth:`_layout_class_bound` of (c, b, S, d, v, z) for the d of ``wanted`` (a mask
        over ``dps``) at once, each entry at most the exact one; 0 elsewhere (no claim).
        The kinds met are :meth:`_tp_kinds` (c, S, d), by :meth:`_kind_codes`, and each
        entry the least of their terms: :meth:`_class_terms` ``terms`` for "inside" and
        1, and for a kind (m, r) rounds·max(τ_lb, τ_m, gathers_r) + sync_r with the parts
        of :meth:`_vector_parts` (cap r), each at most the exact term (as there; the least
        never falls as a term falls), so at most the exact class bound of its d, itself at
        most the cost of every plan the search visits there.  ``form``: (S, v, z)."""
        num_stages, virtual, zero = form
        codes = np.where(wanted, self._kind_codes(table.config, num_stages, dps, wanted), -1)
        least = np.zeros(len(dps), dtype=np.int64)
        rows: dict = {"inside": terms[0], 1: terms[1]}
        for code in np.unique(codes[codes >= 0]).tolist():
            kinds = self._kinds_seen[code]
            if not kinds:
                continue
            for kind in kinds:
                if kind not in rows:
                    quality, cap = kind
                    tau = max(chunk_bound, self._kind_tau(table, num_stages,
                                                          num_stages * virtual, quality))
                    parts = self._vector_parts(table, num_stages, virtual, zero, dps, cap)
                    rows[kind] = None if parts is None else np.full(len(dps), INF) \
                        if tau >= INF else rounds * np.maximum(tau, parts[0]) + parts[1]
            if any(rows[kind] is None for kind in kinds):
                continue
            at = codes == code
            least[at] = np.min([rows[kind][at] for kind in kinds], axis=0)
        return least

    def _class_codes(self, config: IntraConfig, num_stages: int, dps: np.ndarray,
                     wanted: np.ndarray) -> np.ndarray:
        """:meth:`_tp_classes` (c, S, d) as bits per entry of ``dps`` (``INSIDE``,
        ``CROSSING``; 0 for None or no class), asked at the ``wanted`` entries only (others
        0 unless asked before), kept per (c, S) over d: the microbatch sizes, v and z of
        one (c, S) share them."""
        codes = self._kind_codes(config, num_stages, dps, wanted)
        bits = np.array([0 if classes is None else ("inside" in classes) * INSIDE
                         + ("crossing" in classes) * CROSSING
                         for classes in map(_classes_of_kinds, self._kinds_seen)] + [0],
                        dtype=np.int64)
        return bits[codes]  # (code -1, not asked: the last entry, 0)

    def _kind_codes(self, config: IntraConfig, num_stages: int, dps: np.ndarray,
                    wanted: np.ndarray | None = None) -> np.ndarray:
        """Per entry of ``dps``, the index in ``_kinds_seen`` of :meth:`_tp_kinds` (c, S, d),
        found at the ``wanted`` entries (all by default), -1 at the others unless found
        before; kept per (c, S) over d (the microbatch sizes, v and z of one (c, S) share
        them), for :meth:`_class_codes` and :meth:`_met_rows` both."""
        row = self._kind_rows.get((config, num_stages))
        if row is None:
            size = self.instance.cluster.num_devices // (config.devices * num_stages)
            row = self._kind_rows[config, num_stages] = np.full(size, -1, dtype=np.int64)
        unknown = row[dps - 1] < 0
        for index in np.flatnonzero(unknown if wanted is None else wanted & unknown).tolist():
            kinds = self._tp_kinds(config, num_stages, int(dps[index]))
            if kinds not in self._kind_index:
                self._kind_index[kinds] = len(self._kinds_seen)
                self._kinds_seen.append(kinds)
            row[dps[index] - 1] = self._kind_index[kinds]
        return row[dps - 1]

    def _zero_masks(self, table: LayerTable, dps: np.ndarray, num_stages: int,
                    virtual: int) -> dict[int, np.ndarray]:
        """:meth:`_zero_stages` for every d at once: per allowed ZeRO stage, the d where it
        is worth searching (the same rule, elementwise)."""
        config = table.config
        allowed = {zero: np.broadcast_to(self.instance.admits(
            config, table.microbatch, dps, num_stages, virtual, zero), dps.shape)
            for zero in self.instance.training.zero_stages}
        syncs = dps * config.ep * config.cp > 1
        never = np.zeros(len(dps), dtype=bool)
        one, two = allowed.get(1, never), allowed.get(2, never)
        masks = {}
        if 1 in allowed:
            masks[1] = one & ~two
        if 2 in allowed:
            masks[2] = two
        if 0 in allowed:
            masks[0] = allowed[0] & (syncs | ~(one | two))
        if 3 in allowed:
            masks[3] = allowed[3] & (syncs | ~(one | two | masks.get(0, never)))
        return masks

    def _vector_shape_bound(self, table: LayerTable, num_stages: int, virtual: int,
                            zero: int, dps: np.ndarray, rounds: np.ndarray,
                            chunk_bound: int) -> np.ndarray | None:
        """:meth:`_shape_bound` (split) of (c, b, S, d, v, z) for every d of ``dps`` at
        once, each entry at most the exact one: the same terms, the gathers and sync by
        :meth:`_vector_gathers` and :meth:`_vector_sync` (rounded down), the compute and
        crossing bounds exact (they do not depend on d).  None when a collective is not a
        ring form."""
        fast = self._vector_parts(table, num_stages, virtual, zero, dps, None)
        if fast is None:
            return None
        bound = rounds * np.maximum(chunk_bound, fast[0]) + fast[1]
        qualities = self._tp_qualities(table.config.tp)
        if not qualities:
            return bound
        least = np.full(len(dps), INF, dtype=np.int64)
        for quality, cap in qualities:
            crossing = self._off_node_chunk_bound(table, num_stages * virtual) \
                if quality == table.config.tp else self._crossing_chunk_bound(
                    table, num_stages * virtual, quality, num_stages)
            if crossing >= INF:  # no plan has this least quality
                continue
            capped = self._vector_parts(table, num_stages, virtual, zero, dps, cap)
            if capped is None:
                return None
            least = np.minimum(least, rounds * np.maximum(
                max(chunk_bound, crossing), capped[0]) + capped[1])
        return np.maximum(bound, least)

    def _vector_parts(self, table: LayerTable, num_stages: int, virtual: int, zero: int,
                      dps: np.ndarray, cap: int | None
                      ) -> tuple[np.ndarray, np.ndarray] | None:
        """(gathers, sync) of :meth:`_vector_shape_bound` on the paths of ``cap``, kept per
        (table, S, v, z, cap) in the table's cache."""
        key = ("vector parts", num_stages, virtual, zero, cap, len(dps))
        if key not in table.cache:
            gathers = self._vector_gathers(table, num_stages * virtual, zero, dps, cap)
            sync = self._vector_sync(table, num_stages, zero, dps, cap)
            table.cache[key] = None if gathers is None or sync is None else (gathers, sync)
        return table.cache[key]

    def _vector_gathers(self, table: LayerTable, num_chunks: int, zero: int,
                        dps: np.ndarray, cap: int | None) -> np.ndarray | None:
        """:meth:`_gather_bound` for every d (entry d − 1), rounded down: the ceilings of
        its ring forms dropped (:mod:`nest_cp.dp.vector_bounds`)."""
        gathers = np.zeros(len(dps), dtype=np.int64)
        if zero != 3 or not self.network.is_hierarchical:
            return gathers
        heaviest = np.array([-(-whole_totals(table)[0] // num_chunks)])
        bytes_per_unit = self.instance.training.optimizer.weight_bytes
        for mask, paths in path_classes(self.network, dps, cap):
            least = self._least_ring_price(CollectiveKind.ALL_GATHER, bytes_per_unit, paths,
                                           dps[mask], heaviest)
            if least is None:
                return None
            gathers[mask] = np.maximum(0, lower_ticks(2 * least[:, 0]))
        return gathers

    def _sync_phases(self, zero: int) -> list[tuple[CollectiveKind, int, bool]]:
        """The collectives of a ZeRO stage's data-parallel sync, each with its bytes per
        parameter and whether it is exposed in full (not overlapped): the gradient sync, and
        the parameter gather where z gathers weights."""
        training = self.instance.training
        optimizer = training.optimizer
        phases = [(cost.sync_collective(zero), optimizer.grad_bytes,
                   not training.overlap_grad_reduce)]
        if cost.gathers_weights(zero):
            phases.append((CollectiveKind.ALL_GATHER, optimizer.weight_bytes,
                           not training.overlap_param_gather))
        return phases

    def _vector_sync(self, table: LayerTable, num_stages: int, zero: int, dps: np.ndarray,
                     cap: int | None, above: int = -1) -> np.ndarray | None:
        """:meth:`_fresh_sync_bound` (default paths, or ``cap``'s; with ``above``, the
        paths of :meth:`_group_paths` (size, cap, above)) for every d (entry d − 1), rounded
        down: the same two bounds with every ceiling of a ring form dropped
        (:mod:`nest_cp.dp.vector_bounds`)."""
        if not self.network.is_hierarchical:
            return np.zeros(len(dps), dtype=np.int64)
        training, phases = self.instance.training, self._sync_phases(zero)
        _, forward, backward = whole_totals(table)
        count = len(dps)
        heaviest_bound = np.zeros(count)
        total = np.zeros(count)
        for params, every_layer, per_replica in parameter_kinds(table):
            if params == 0:
                continue
            classes = self._ring_classes(table.config.devices, per_replica, cap, tuple(phases),
                                         above)
            heaviest = -(-params // num_stages)
            holders = num_stages if every_layer else 1
            for whole_mask, slope_sum, offset_sum, full_terms in classes:
                mask = whole_mask[:count]
                kept = int(np.count_nonzero(mask))  # its first entries: the d <= count
                if kept == 0:
                    continue
                if slope_sum is None:  # not a ring form
                    return None
                total[mask] += slope_sum[:kept] * params + holders * offset_sum[:kept]
                heavy = None  # per path, summed over the phases paid in full
                for phase_terms in full_terms:
                    prices = [slope[:kept] * heaviest + offset[:kept]
                              for slope, offset in phase_terms]
                    heavy = prices if heavy is None else [
                        old + new for old, new in zip(heavy, prices)]
                if heavy is not None:
                    heaviest_bound[mask] = np.maximum(heaviest_bound[mask],
                                                      np.min(heavy, axis=0))
        hidden = (backward if training.overlap_grad_reduce else 0) \
            + (forward if training.overlap_param_gather and cost.gathers_weights(zero) else 0)
        mean = (total - hidden) / num_stages
        return np.maximum(0, np.maximum(lower_ticks(heaviest_bound), lower_ticks(mean, hidden)))

    def _ring_classes(self, devices: int, per_replica: int, cap: int | None,
                      phases: tuple, above: int = -1) -> list:
        """:meth:`_vector_sync`'s ring terms of every d = 1 .. N // a at once (a =
        ``devices``), kept per (a, ranks per replica, cap, phases, above): per class of
        :func:`path_classes` (sizes, cap, above) over the group sizes d·``per_replica``,
        (its mask over d, the sum over the phases of the least slope over its paths, the
        same of the offsets, per phase paid in full the (slope, offset) of each path; the
        last three None when a path's form is not a ring form).  Every term is elementwise
        in d, and a class's paths come from its least size, which is also its least among
        d = 1 .. n whenever the class meets them, so :meth:`_vector_sync`'s d = 1 .. n (any
        S) read the first entries: the same floats as priced alone."""
        key = (devices, per_replica, cap, phases, above)
        if key not in self._ring_terms:
            sizes = np.arange(1, self.instance.cluster.num_devices // devices + 1,
                              dtype=np.int64) * per_replica
            classes = []
            for mask, paths in path_classes(self.network, sizes, cap, above):
                slopes, offsets, full_terms = [], [], []  # per phase: least over paths
                for kind, bytes_per_unit, full in phases:
                    rates = [self.prices.ring_rates(kind, bytes_per_unit, self.ids.id_of(path))
                             for path in paths]
                    if any(rate is None for rate in rates):
                        slopes = None
                        break
                    terms = [ring_terms(rate, sizes[mask]) for rate in rates]
                    slopes.append(np.min([slope for slope, _ in terms], axis=0))
                    offsets.append(np.min([offset for _, offset in terms], axis=0))
                    if full:
                        full_terms.append(terms)
                classes.append((mask, None, None, None) if slopes is None else
                               (mask, sum(slopes), sum(offsets), full_terms))
            self._ring_terms[key] = classes
        return self._ring_terms[key]

    def _exact_refined_bound(self, outer: Outer) -> int:
        """The least over the ZeRO stages worth searching of the bound
        :meth:`_search_outer` checks first, (v·m + S − 1)·max(τ_lb, gathers) + sync (each
        term a bound: module docstring), over those some split fits in memory; INF when
        none fits (then the outer has no plan).  With an incumbent, the case split of
        :meth:`_shape_bound` raises it, computed only if the fastest-path least may still
        beat the incumbent (else that least already drops the outer)."""
        table = self._table(outer.choice_index)
        microbatches = cost.num_microbatches(self.instance.training.global_batch,
                                             table.microbatch, table.config, outer.dp)
        shapes = []
        least = INF
        for zero in self._zero_stages(table, outer.dp, outer.num_stages, outer.virtual):
            shape = Shape(table, outer.num_stages, outer.dp, outer.virtual, zero,
                          microbatches)
            bound = self._shape_bound(shape, outer.chunk_bound, split=False)
            shapes.append((bound, shape))
            if bound < least and self._fits_at_most_replicas(shape):
                least = bound
        if self.best.objective is None or not self.best.may_beat(least, outer.key):
            return least
        # the z whose fastest-path bound cannot beat the incumbent cannot either, split
        return min((self._shape_bound(shape, outer.chunk_bound) for bound, shape in shapes
                    if self.best.may_beat(bound, outer.key)
                    and self._fits_at_most_replicas(shape)), default=least)

    def _deeper_bound(self, outer: Outer, refined: int) -> int:
        """The outer's refined bound raised by the case split of :meth:`_shape_bound`, the
        stage-by-stage bound of :meth:`_stagewise_of` (batched over d, with the domain
        weights), the layout-class bound of :meth:`_layout_class_bound` (unless the vector
        bound of :meth:`_group_bounds` already holds it) and the domain bound
        of :meth:`_domain_bound` (per outer, the costliest: last), each computed only where
        the bounds before it may still beat the incumbent: the least over the ZeRO stages
        worth searching, that fit somewhere, of the largest of them (each a bound on that
        z's plans); ``refined`` with t = 1, c > 1 or on graphs (the domain bound is then
        left to :meth:`_search_outer`: deepening every such outer costs more than it
        saves)."""
        table = self._table(outer.choice_index)
        split = table.config.tp > 1 and table.config.cp == 1
        if not split or not self.network.is_hierarchical:  # t = 1: searched as refined
            return refined
        microbatches = cost.num_microbatches(self.instance.training.global_batch,
                                             table.microbatch, table.config, outer.dp)
        group = (outer.choice_index, outer.num_stages, outer.virtual)
        least = INF
        if len(self._deepened) >= DEEPENED_KEPT:
            self._deepened.clear()
        deepened: dict[int, int] = {}
        self._deepened[outer.key] = (self.best.objective, deepened)
        # the z of least vector bound first: the least so far then stops the others' bounds
        # soonest (the least over z does not depend on the order)
        zeros = sorted(self._zero_stages(table, outer.dp, outer.num_stages, outer.virtual),
                       key=lambda zero: self._known_bound(group + (zero,), outer.dp))
        for zero in zeros:
            shape = Shape(table, outer.num_stages, outer.dp, outer.virtual, zero,
                          microbatches)
            if not self._fits_at_most_replicas(shape):
                continue
            vector = self._zero_bounds.get((outer.choice_index, outer.num_stages, outer.virtual,
                                             zero))
            bound = int(vector[outer.dp - 1]) if vector is not None else \
                self._shape_bound(shape, outer.chunk_bound, split)
            classless = vector is None or group in self._unclassed
            # the stage-by-stage bound first: mostly read from its rows (priced for many d
            # at once), it drops most outers before the class bound is priced one by one
            if split and bound < least and self.best.may_beat(bound, outer.key + (zero,)):
                bound = max(bound, self._stagewise_of(outer, shape))
            if classless and bound < least and self.best.may_beat(bound, outer.key + (zero,)):
                bound = max(bound, self._layout_class_bound(shape, outer.chunk_bound))
            if bound < least and self.best.may_beat(bound, outer.key + (zero,)):
                bound = max(bound, self._domain_bound(shape, outer.chunk_bound,
                                                        outer.key + (zero,)))
                deepened[zero] = bound  # both priced: kept for the floor and the search
            elif not self.best.may_beat(bound, outer.key + (zero,)):
                deepened[zero] = bound  # ruled out: the floor and the search skip this z
            least = min(least, bound)
            if least <= refined:  # the other z can only lower it further
                return refined
        return max(refined, least)

    def _known_bound(self, key: tuple[int, ...], dp: int) -> int:
        """The vector bound of (c, b, S, v, z) = ``key`` at d (:meth:`_group_bounds`), 0 where
        none is kept."""
        vector = self._zero_bounds.get(key)
        return 0 if vector is None else int(vector[dp - 1])

    def _stagewise_of(self, outer: Outer, shape: Shape) -> int:
        """:meth:`_stagewise_bounds` (v = 1) or :meth:`_interleaved_stagewise_bounds`
        (v > 1) of the outer's d and ``shape.zero``, priced together with every other d of
        its (c, b, S, v) whose bound of :meth:`_group_bounds` may still beat the incumbent
        (those the search may ask next), kept per (c, b, S, v, z); with the domain weights
        of :meth:`_stage_weights` (``domain``)."""
        key = (outer.choice_index, outer.num_stages, outer.virtual, shape.zero)
        if key not in self._stagewise_rows:
            size = self.instance.cluster.num_devices // (shape.table.config.devices
                                                         * outer.num_stages)
            # per d: the bound (-1 unknown) and the threshold it was found at (INF: exact)
            self._stagewise_rows[key] = (np.full(size, -1, dtype=np.int64),
                                         np.full(size, INF, dtype=np.int64))
        row, checked = self._stagewise_rows[key]
        objective = self.best.objective
        counted = self._counted_stagewise(shape.table, outer.num_stages, outer.virtual)
        threshold = INF if objective is None or outer.num_stages == 1 or counted \
            else objective  # the bound over block counts is found whole, without one
        index = outer.dp - 1
        if row[index] < 0 or (row[index] <= threshold < checked[index]):  # stale, as below
            stale = (row < 0) | ((row <= threshold) & (checked > threshold))
            group = self._groups.get((outer.choice_index, outer.num_stages, outer.virtual))
            wanted = np.zeros(len(row), dtype=bool)
            if isinstance(group, np.ndarray) and objective is not None:
                wanted = group <= objective
            wanted &= stale
            candidates = np.flatnonzero(wanted)
            if len(candidates) > STAGEWISE_BATCH and \
                    self._spanned.get(key, INF) > objective:  # first over spans of d
                self._spanned[key] = objective  # tried: again only under a better incumbent
                candidates = self._spanned_stagewise(outer, shape, (row, checked),
                                                     candidates, threshold)
            if row[index] >= 0 and not row[index] <= threshold < checked[index]:
                return int(row[index])  # found over a span
            if len(candidates) > STAGEWISE_BATCH:  # the least bounds: searched first
                candidates = candidates[np.argpartition(group[candidates],
                                                        STAGEWISE_BATCH)[:STAGEWISE_BATCH]]
            dps = np.union1d(candidates, [outer.dp - 1]) + 1
            if counted:
                row[dps - 1] = self._interleaved_stagewise_bounds(
                    shape.table, outer.num_stages, outer.virtual, shape.zero, dps, domain=True)
                checked[dps - 1] = threshold
                return int(row[outer.dp - 1])
            lows = self._zero_bounds.get((outer.choice_index, outer.num_stages, 1, shape.zero))
            row[dps - 1] = self._stagewise_bounds(
                shape.table, outer.num_stages, shape.zero, dps,
                np.zeros(len(dps), dtype=np.int64) if lows is None else lows[dps - 1],
                None if threshold >= INF else threshold, domain=True)
            checked[dps - 1] = threshold
        return int(row[outer.dp - 1])

    @staticmethod
    def _counted_stagewise(table: LayerTable, num_stages: int, virtual: int) -> bool:
        """Whether :meth:`_stagewise_of` bounds (c, b, S, v) by stage block counts
        (:meth:`_interleaved_stagewise_bounds`, whose argument holds for v = 1 as well,
        each stage one chunk): v > 1, or v = 1 with S >= 2 on a workload of blocks, where
        its test over counts costs O(L) a d against the range min-max's O(L²)."""
        return virtual > 1 or num_stages > 1 and block_structure(table) is not None

    def _spanned_stagewise(self, outer: Outer, shape: Shape, rows: tuple[np.ndarray, ...],
                           candidates: np.ndarray, threshold: int) -> np.ndarray:
        """The stage-by-stage bounds of :meth:`_stagewise_of` over spans of d: the sorted
        ``candidates`` (d − 1 of its row) are cut into at most ``STAGEWISE_BATCH`` runs of
        consecutive ones, each run's span of d bounded at once (``highs`` of
        :meth:`_stagewise_bounds` / :meth:`_interleaved_stagewise_bounds`, a bound on
        every plan of each d of the span); where that exceeds the incumbent it is kept as
        each candidate's bound (found at ``threshold``).  The others are cut again, at
        most ``SPAN_ROUNDS`` times while more than ``STAGEWISE_BATCH`` are left; they are
        returned, to be bounded d by d (``rows``: the (c, b, S, v, z) row of bounds and
        the thresholds they were found at, filled here).  Runs do not cross a change of
        :meth:`_domain_rows` (a span's domain weights need its d to agree).  On a cost
        model without ring forms nothing is found here."""
        table, num_stages, virtual, zero = shape.table, outer.num_stages, outer.virtual, \
            shape.zero
        row, checked = rows
        objective = self.best.objective
        lows = self._zero_bounds.get((outer.choice_index, num_stages, 1, zero))
        for _ in range(SPAN_ROUNDS):
            if len(candidates) <= STAGEWISE_BATCH:
                break
            runs = _runs(candidates, self._domain_rows(table.config, num_stages, virtual,
                                                       candidates + 1), STAGEWISE_BATCH)
            firsts = np.array([run[0] for run in runs]) + 1
            lasts = np.array([run[-1] for run in runs]) + 1
            try:
                if self._counted_stagewise(table, num_stages, virtual):
                    bounds = self._interleaved_stagewise_bounds(
                        table, num_stages, virtual, zero, firsts, domain=True, highs=lasts)
                else:
                    known = np.zeros(len(runs), dtype=np.int64) if lows is None else \
                        np.array([int(lows[run].min()) for run in runs], dtype=np.int64)
                    bounds = self._stagewise_bounds(
                        table, num_stages, zero, firsts, known,
                        None if threshold >= INF else threshold, domain=True, highs=lasts)
            except _NotRingForms:
                break
            above = bounds > objective
            for run, bound, kept in zip(runs, bounds.tolist(), above.tolist()):
                if kept:
                    row[run], checked[run] = bound, threshold
            if not above.any():
                break
            candidates = np.concatenate([run for run, kept in zip(runs, above) if not kept]
                                        or [candidates[:0]])
        return candidates

    def _check_time(self) -> None:
        if self.deadline is not None and time.perf_counter() >= self.deadline:
            raise _TimeUp

    def _may_beat_in_time(self, objective: int, key: tuple[int, ...]) -> bool:
        """``best.may_beat`` for the inner searches, which ask it at every step of their
        walks: the deadline is checked there too, so one outer choice cannot overrun it."""
        self._check_time()
        return self.best.may_beat(objective, key)

    def _outer_choices(self) -> _Outers:
        """Every (c, b, S, d, v), sorted by (lower bound, key): built as arrays, handed out
        as :class:`Outer` records one at a time (there are millions at 10^5 devices)."""
        training = self.instance.training
        num_layers = self.instance.workload.num_layers
        num_devices = self.instance.cluster.num_devices
        columns: list[list[np.ndarray]] = [[] for _ in range(6)]
        for choice_index, (config, microbatch) in enumerate(self.instance.choices):
            if config.devices > num_devices:
                continue
            self._check_time()
            chunk_bounds = self._chunk_time_bounds(choice_index)
            bound_of = np.array([0] + [chunk_bounds[k] for k in range(1, num_layers + 1)],
                                dtype=np.int64)
            stages = np.concatenate([np.full(num_devices // (config.devices * s), s)
                                     for s in range(1, num_layers + 1)]).astype(np.int64)
            dps = np.concatenate([np.arange(1, num_devices // (config.devices * s) + 1)
                                  for s in range(1, num_layers + 1)]).astype(np.int64)
            microbatches = cost.num_microbatches(training.global_batch, microbatch, config, dps)
            for virtual in training.virtual_stages:
                keep = np.ones(len(stages), dtype=bool) if virtual == 1 else (
                    (stages >= 2) & (microbatches % stages == 0)
                    & (stages * virtual <= num_layers))
                keep &= self._launch_admits(config, microbatch, dps, stages, virtual)
                chunk_bound = bound_of[np.minimum(stages[keep] * virtual, num_layers)]
                rounds = virtual * microbatches[keep] + stages[keep] - 1
                for column, values in zip(columns, (
                        rounds * chunk_bound, np.full(keep.sum(), choice_index),
                        stages[keep], dps[keep], np.full(keep.sum(), virtual), chunk_bound)):
                    column.append(np.asarray(values, dtype=np.int64))
        arrays = [np.concatenate(column) if column else np.zeros(0, dtype=np.int64)
                  for column in columns]
        order = np.lexsort(arrays[4::-1])  # by bound, then choice, S, d, v
        return _Outers(*(array[order] for array in arrays))

    def _launch_admits(self, config: IntraConfig, microbatch: int, dps: np.ndarray,
                       stages: np.ndarray, virtual: int) -> np.ndarray:
        """Which (S, d) the instance's launcher admits under some allowed ZeRO stage."""
        admitted = np.zeros(len(stages), dtype=bool)
        for zero in self.instance.training.zero_stages:
            admitted |= np.broadcast_to(self.instance.admits(config, microbatch, dps, stages,
                                                             virtual, zero), admitted.shape)
        return admitted

    def _chunk_time_bounds(self, choice_index: int) -> dict[int, int]:
        """For every chunk count K, the least max τ over splits into K chunks with every
        term on its cheapest possible path: a lower bound for any S·v = K, d, z, layout.

        It is ``fill_table`` of :meth:`_cheapest_times` (K) at [0, 0] for every K, found for
        all K by one recurrence over layer suffixes.  A chunk's weight there depends on its
        layers f..l only: the activation receive is added iff the chunk is not the first,
        that is iff f > 0 (the first chunk starts at layer 0, every other after it), and the
        gradient receive iff it is not the last, iff l < L − 1.  So with c(f, l) that weight
        (INF for l < f) and h_k(f) the least maximum weight over splits of layers f..L − 1
        into k chunks (INF when fewer than k layers are left),

            h_1(f) = c(f, L − 1),   h_k(f) = min over l >= f of max(c(f, l), h_{k−1}(l + 1)),

        and the bound for K is h_K(0): L steps of O(L²) instead of one O(K·W²) table per K.
        """
        return self._min_max_per_chunk_count(self._table(choice_index), 0)

    def _min_max_per_chunk_count(self, table: LayerTable, first_tier: int) -> dict[int, int]:
        """The recurrence of :meth:`_chunk_time_bounds` for every K, with the receives on
        their cheapest path over every tier (``first_tier`` 0), or over the tiers
        ``first_tier`` .. (1: off the node, :meth:`_off_node_chunk_bound`; above a domain
        tier: :meth:`_domain_bound`)."""
        weight = self._suffix_weight(table, first_tier)
        num_layers = table.num_layers
        least = weight[:, num_layers - 1].copy()  # h_1
        bounds = {1: int(least[0])}
        for num_chunks in range(2, num_layers + 1):
            after = np.append(least[1:], INF)  # h_{k-1}(l + 1), by l
            least = np.maximum(weight, after[None, :]).min(axis=1)
            bounds[num_chunks] = int(least[0])
        return bounds

    def _suffix_weight(self, table: LayerTable, first_tier: int = 0) -> np.ndarray:
        """L x L: c(f, l) of :meth:`_chunk_time_bounds`, a chunk's weight as a function of
        its layers f..l alone (INF for l < f), receives as :meth:`_min_max_per_chunk_count`
        has them."""
        base, activation, received = self._cheapest_ranges(table)
        if first_tier > 0:
            activation, received = self._receives_from(table, first_tier)
        lasts = np.arange(table.num_layers)
        weight = base + activation[:, None] + np.where(lasts < table.num_layers - 1,
                                                        received, 0)
        return np.where(lasts[None, :] >= lasts[:, None], weight, INF)

    def _cheapest_ranges(self, table: LayerTable) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The parts of :meth:`_cheapest_times`: the L x L range sums of compute plus every
        collective on its cheapest path, and per layer the cheapest receive of the
        activation before it and of the gradient after it; kept in the table's cache."""
        if "cheapest" not in table.cache:
            per_layer = table.compute.copy()
            receives = (np.zeros_like(per_layer), np.zeros_like(per_layer))
            if self.network.is_hierarchical:
                network, config = self.network, table.config
                if config.tp > 1:
                    options = [np.diag(table.collective_range((path,), ()))
                               for path in fastest_group_paths(network, config.tp)]
                    if network.cluster.network.domain_sizes()[0] >= config.tp:
                        # inside one tier-0 domain the TP collectives may be hidden (§5 e)
                        options.append(np.diag(table.collective_range(
                            (network.tier_path(0),), (), tp_local=True)))
                    per_layer += np.min(options, axis=0)
                if config.ep > 1:
                    per_layer += np.min([np.diag(table.collective_range((), (path,)))
                                         for path in fastest_group_paths(network, config.ep)],
                                        axis=0)
                receives = self._least_receives(table, 0)
            table.cache["cheapest"] = (range_sums(per_layer), *receives)
        return table.cache["cheapest"]

    def _least_receives(self, table: LayerTable,
                        first_tier: int) -> tuple[np.ndarray, np.ndarray]:
        """Per layer, the cheapest receive over the tiers ``first_tier`` .. of the activation
        before it (the output of the layer before; 0 for the first) and of the gradient
        after it (its own output's transfer)."""
        received = np.min([table.transfers(self.network.tier_path(tier))
                           for tier in range(first_tier, self.network.num_tiers)], axis=0)
        return np.concatenate(([0], received[:-1])), received

    def _receives_from(self, table: LayerTable,
                       first_tier: int) -> tuple[np.ndarray, np.ndarray]:
        """As :meth:`_cheapest_ranges`' receives (activation before, gradient after each
        layer), each on its cheapest path among the tiers ``first_tier`` .. (1: off the
        node); kept in the table's cache."""
        key = ("receives from", first_tier)
        if key not in table.cache:
            table.cache[key] = self._least_receives(table, first_tier)
        return table.cache[key]

    def _stage_receives(self, table: LayerTable, tier: int, off_node: bool = False
                        ) -> tuple[tuple[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]]:
        """Per layer, a stage's receives near and above tier P: ((activation before it on
        its cheapest path, or off the node with ``off_node``; above P), (the gradient after
        it, likewise)), :meth:`_cheapest_ranges` and :meth:`_receives_from` (P + 1), the
        gradient after the last layer 0 (no stage follows it); kept in the table's cache."""
        key = ("stage receives", tier, off_node)
        if key not in table.cache:
            _, activation, gradient = self._cheapest_ranges(table)
            if off_node:
                activation, gradient = self._receives_from(table, 1)
            far_activation, far_gradient = self._receives_from(table, tier + 1)
            inner = np.arange(table.num_layers) < table.num_layers - 1
            table.cache[key] = ((activation, far_activation),
                                (gradient * inner, far_gradient * inner))
        return table.cache[key]

    def _off_node_chunk_bound(self, table: LayerTable, num_chunks: int) -> int:
        """τ_in(K): a lower bound on max_k τ_k of every plan with K = S·v chunks whose TP
        groups of t = G_0 ranks each lie inside one node (t = G_0 on a tiered network with a
        tier above the node; 0 otherwise, no claim).

        Such a TP group fills its node, so every node holds the ranks of one stage replica
        (one TP group) and no other.  A chunk k >= 1 receives its activation from chunk
        k − 1, which runs on stage (k − 1) mod S, another stage than chunk k's (S >= 2 when
        K >= 2: v > 1 needs S >= 2, DESIGN §3.2 b), over pairs (rank j of one stage to rank
        j of the other, same replica): each pair joins two TP groups, so two nodes, and runs
        on a tier K >= 1 (the point-to-point transfer is priced on the pair's tier path,
        cost model §3, no channels), at least the cheapest of those tiers' transfer of the
        layer output; the gradient receive of chunk k < K − 1 likewise.  Every other term of
        :meth:`_chunk_time_bounds`' chunk weight is at most the chunk's own (its docstring),
        so the same min-max over splits with these receives bounds max_k τ_k from below.
        Kept per (layer table, K)."""
        network = self.network
        if not network.is_hierarchical or network.num_tiers < 2 or \
                table.config.tp != network.node_size or table.config.cp > 1:
            return 0
        return self._chunk_bound_from(table, num_chunks, 1)

    def _chunk_bound_from(self, table: LayerTable, num_chunks: int, first_tier: int) -> int:
        """:meth:`_min_max_per_chunk_count` (``first_tier``) at K = ``num_chunks``, the
        bounds of every K kept per (layer table, first tier)."""
        key = ("chunk bounds from", first_tier)
        if key not in table.cache:
            table.cache[key] = self._min_max_per_chunk_count(table, first_tier)
        return table.cache[key][num_chunks]

    def _cheapest_times(self, table: LayerTable, num_chunks: int,
                        first_tier: int = 0) -> np.ndarray:
        """(K, W, W) chunk times with collectives and receives on their cheapest path.

        Memory, recompute, ZeRO-3 gathers and the real placement are ignored, so each
        entry is at most the real τ of that chunk, for any d, z, mode and layout: each
        collective costs at least its price on one group, a group of g devices runs on a
        path no faster than one of :func:`fastest_group_paths` (g), and a transfer runs on
        a tier's path.  With ``first_tier``, the receives on the tiers ``first_tier`` ..
        (chunks whose pairs all leave a domain below it: :meth:`_domain_bound_at`).  The
        last few arrays are kept (read-only).
        """
        key = (table.config, table.microbatch, num_chunks, first_tier)
        if key in self._cheapest:
            return self._cheapest[key]
        base, activation, received = self._cheapest_ranges(table)
        if first_tier > 0:
            activation, received = self._receives_from(table, first_tier)
        weight = windows(base, num_chunks).copy()
        weight[1:] += vector_windows(activation, num_chunks)[1:, :, None]
        weight[:-1] += vector_windows(received, num_chunks)[:-1, None, :]
        weight.flags.writeable = False
        if len(self._cheapest) >= CHEAPEST_KEPT:
            self._cheapest.pop(next(iter(self._cheapest)))
        self._cheapest[key] = weight
        return weight

    def _table(self, choice_index: int) -> LayerTable:
        if choice_index not in self.tables:
            config, microbatch = self.instance.choices[choice_index]
            self.tables[choice_index] = LayerTable(self.instance, config, microbatch)
        return self.tables[choice_index]

    def _zero_stages(self, table: LayerTable, dp: int, num_stages: int,
                     virtual: int) -> list[int] | tuple[int, ...]:
        """The ZeRO stages worth searching: 0, the larger allowed of 1 and 2, and 3.

        Stages 1 and 2 price τ and sync identically (reduce-scatter then all-gather, cost
        model §5 c) and 2 only shrinks memory, so the larger allowed one is at least as
        good (it is the one reported on ties).  Stage 0 syncs by an all-reduce instead,
        which may be cheaper or dearer (separate rounding, g != w, overlap), so it is
        searched too — except with d = e = 1, where no sync runs, τ is the same and memory
        is no smaller than under 1 or 2.  With d = e = 1, stage 3 prices like them and only
        adds its gather buffers, so it is dropped unless it is the only one allowed.
        "Allowed" is by the instance and, for this shape, by its launcher.
        """
        config = table.config
        syncs = dp * config.ep * config.cp > 1  # the c context ranks sync too
        free = self.instance.training.launcher is Launcher.NONE  # every shape admitted
        if free and syncs in self._free_zeros:  # then a function of syncs alone
            return self._free_zeros[syncs]
        allowed = {zero for zero in self.instance.training.zero_stages
                   if self.instance.admits(config, table.microbatch, dp, num_stages, virtual,
                                           zero)}
        kept = sorted(allowed & {1, 2})[-1:]
        if 0 in allowed and (syncs or not kept):
            kept.insert(0, 0)
        if 3 in allowed and (syncs or not kept):
            kept.append(3)
        if free:
            self._free_zeros[syncs] = tuple(kept)
            return self._free_zeros[syncs]
        return kept

    def _layouts(self, config: IntraConfig, num_stages: int,
                 dp: int) -> list[tuple[int, RankLayout]]:
        """(index, layout) of the layouts with distinct placements, first of each kept; per
        configuration, which of S and d exceed 1 (all the effective orders depend on),
        whether a spare-first offset moves anything (a whole node spare: otherwise such a
        layout places as its spare-last twin) and which replica blocks divide d
        (:meth:`RankLayout.block`; elsewhere a blocked layout places as its unblocked
        twin), and where a node tail or gathered ends apply (:meth:`RankLayout.arrayed`;
        elsewhere such a layout places as its order alone).  Equal effective orders on one
        device order with the same offset and block give equal placements; an arrayed
        layout is kept on its own (the node tail and gathered ends share their order)."""
        key = self._layouts_key(config, num_stages, dp)
        if key not in self._distinct_layouts:
            numbered, spare_node, tails = layout_config(config), key[3], key[5]
            seen, kept = {}, []  # placement key -> its position in kept
            for index, layout in enumerate(self.layouts):
                order = (effective_order(layout, numbered, num_stages, dp), layout.digits,
                         layout.spare_first and spare_node,
                         layout.block(numbered, num_stages, dp),
                         index if index in tails else None)
                if order not in seen:
                    seen[order] = len(kept)
                    kept.append((index, layout))
            self._distinct_layouts[key] = kept
            self._placements[key] = seen
        return self._distinct_layouts[key]

    def _translated_twins(self, config: IntraConfig, num_stages: int,
                          dp: int) -> frozenset[int]:
        """The indices of the layouts of :meth:`_layouts` whose geometries, and data-parallel
        groups, equal those of a layout before them in that list: the spare-first ones whose
        offset o (:meth:`RankLayout.offset`) is a multiple of the translation T of their
        device order (:meth:`LayoutGeometries.translation`) and whose spare-last twin's
        placement (the same order, device order and replica block) is listed earlier.

        Every rank of such a layout sits at its twin's position + o, read through the same
        device order (spare-first layouts have no node tail or gathered ends, so their
        positions are the order's mixed-radix ones shifted by o).  Shifting every position
        by a multiple of T keeps every pair's tier, every group's tier and its members per
        tier-0 domain (:meth:`LayoutGeometries.translation`'s argument; T is a multiple of
        the node size), and those are all a stage geometry and a data-parallel group's path
        read (cost model §5 a); the layouts' strides, and so their TP classes and crossing
        test, are equal too.  :meth:`_search_outer` checks a layout's bounds in turn (each
        a function of the shape and of those equal parts) and then skips a geometry already
        searched; the twin, earlier and with a smaller key, was either dropped by one of
        those bounds, which then drops this layout too (a larger key, an incumbent no
        worse), or put its geometry in the searched set, so this layout is skipped there.
        Passing over it at once changes nothing but the work.  Empty where the device order
        is not read through digits (a graph, or a canonical order other than ids 0..N−1)."""
        layouts = self._layouts(config, num_stages, dp)
        key = self._layouts_key(config, num_stages, dp)
        geometries = self.geometries
        if not key[3] or not geometries.translated:  # no spare node: nothing shifted
            return frozenset()
        numbered, positions = layout_config(config), self._placements[key]
        twins = set()
        for position, (index, layout) in enumerate(layouts):
            if not layout.spare_first or not (layout.digits or geometries.strided):
                continue
            offset = layout.offset(numbered, num_stages, dp, self.instance.cluster.num_devices,
                                   self.network.node_size)
            twin = (effective_order(layout, numbered, num_stages, dp), layout.digits, False,
                    layout.block(numbered, num_stages, dp), None)
            if offset % geometries.translation(layout) == 0 and \
                    positions.get(twin, position) < position:
                twins.add(index)
        return frozenset(twins)

    def _layouts_key(self, config: IntraConfig, num_stages: int, dp: int) -> tuple:
        """What :meth:`_layouts` depends on (its docstring): (c, S > 1, d > 1, spare node,
        replica blocks dividing d, arrayed layouts); equal keys give equal lists.  Kept
        per (c, S, d): deepening asks it for every outer (:meth:`_tp_classes`), for each z."""
        found = self._layout_keys.get((config, num_stages, dp))
        if found is not None:
            return found
        if len(self._layout_keys) >= LAYOUT_KEYS_KEPT:
            self._layout_keys.clear()
        spare_node = self.instance.cluster.num_devices - config.devices * num_stages * dp \
            >= self.network.node_size
        blocks = tuple(block for block in self._replica_blocks if block < dp and dp % block == 0)
        numbered = layout_config(config)  # the context ranks ride in the expert digit
        tails = tuple(index for index, layout in self._array_layouts
                      if layout.arrayed(numbered, num_stages, dp))
        key = (config, num_stages > 1, dp > 1, spare_node, blocks, tails)
        self._layout_keys[(config, num_stages, dp)] = key
        return key

    # ------------------------------------------------------------ one outer choice

    def _search_outer(self, outer: Outer, floor: int | None = None) -> int:
        """Every z and layout of one (c, b, S, d, v) that its bounds do not rule out (INF
        returned).  With ``floor``, none is searched: the least of the bounds the layouts
        that would be walked pass (the shape's and the layout's, each a bound on the
        layout's plans: its sync bounds, :meth:`_layout_sync_bound` and
        :meth:`_layout_stagewise_bound`, where its data-parallel groups are known before any
        replica is placed, as on tiered networks, so no geometry is built; else those and
        its layout bound; INF if none passes), so a bound on every plan of the outer the
        search may accept, or ``floor`` as soon as one is no larger.  The layouts' groups
        and geometries a floor builds are kept for the outer's search (of the last
        ``OUTER_PARTS_KEPT`` outers floored), which may come after other outers' searches
        when the floor pushes the outer back."""
        table = self._table(outer.choice_index)
        config, num_stages, dp, virtual = table.config, outer.num_stages, outer.dp, outer.virtual
        microbatches = cost.num_microbatches(self.instance.training.global_batch,
                                             table.microbatch, config, dp)
        layouts = self._layouts(config, num_stages, dp)
        twins = self._translated_twins(config, num_stages, dp)
        # per layout, its geometries and its data-parallel groups (any z): kept from the
        # outer's floor until its search, which drops them
        parts = self._outer_parts.pop(outer.key, None) or ({}, {})
        if floor is not None:
            if len(self._outer_parts) >= OUTER_PARTS_KEPT:  # the oldest first
                del self._outer_parts[next(iter(self._outer_parts))]
            self._outer_parts[outer.key] = parts
        geometries: dict[int, tuple] = parts[0]
        data: dict[int, tuple | None] = parts[1]
        fastest: dict[tuple[int, int], int] = {}  # per (layout, gather group size): any z
        # the z whose stage-by-stage and domain bounds the deepening priced, under the same
        # incumbent (so they would come out the same here)
        objective, deepened = (self._deepened.get(outer.key) if floor is not None else
                               self._deepened.pop(outer.key, None)) or (None, {})
        stale: dict[int, int] = {}  # bounds priced under an older incumbent: still bounds
        if objective != self.best.objective:
            stale, deepened = deepened, {}
            if floor is not None:  # the floor's, for the search
                self._deepened[outer.key] = (self.best.objective, deepened)
        least = INF
        # per z, a bound known before pricing any (the deepening's or the floor's, else the
        # larger of the vector one of its (c, b, S, v) and one priced under an older
        # incumbent; each at most the case split's or holding without it); None: none
        knowns: dict[int, int | None] = {}
        for zero in self._zero_stages(table, dp, num_stages, virtual):
            vector = self._zero_bounds.get((outer.choice_index, num_stages, virtual, zero))
            knowns[zero] = deepened.get(zero)
            if knowns[zero] is None and (vector is not None or zero in stale):
                knowns[zero] = max(-1 if vector is None else int(vector[dp - 1]),
                                   stale.get(zero, -1))
        zeros = list(knowns)
        if floor is not None:  # the z of least known bound first: a layout passing ends it
            zeros.sort(key=lambda zero: knowns[zero] or 0)
        for zero in zeros:
            shape = Shape(table, num_stages, dp, virtual, zero, microbatches)
            tau_bound = max(outer.chunk_bound, self._gather_bound(shape))
            sync_bound = self._sync_bound(shape)
            # with a known bound of z the shape's case split is priced once a layout passes
            # its own bounds (most never do): ``shaped``
            known = knowns[zero]
            shaped = known is None
            bound = self._shape_bound(shape, outer.chunk_bound) if shaped else known
            # cheaper first, each only while the shape may still win: the stage-by-stage
            # bound (read from its rows) and the TP-placement one, then the domain bound
            if config.tp > 1 and config.cp == 1 and self.network.is_hierarchical:
                if zero not in deepened and self.best.may_beat(bound, outer.key + (zero,)):
                    bound = max(bound, self._stagewise_of(outer, shape))
                if self.best.may_beat(bound, outer.key + (zero,)):
                    bound = max(bound, self._layout_class_bound(shape, outer.chunk_bound))
            if zero not in deepened and self.best.may_beat(bound, outer.key + (zero,)):
                bound = max(bound, self._domain_bound(shape, outer.chunk_bound,
                                                        outer.key + (zero,)))
            deepened[zero] = bound
            if not self.best.may_beat(bound, outer.key + (zero,)) or \
                    not self._fits_at_most_replicas(shape):
                continue
            crossing = None  # the bound of layouts whose TP groups all leave their nodes
            inner = None  # built when a layout first passes its bounds (most never do)
            # a lower bound on max_k τ_k of every plan of the shape, any layout: the layout's
            # T >= rounds·tau_floor + its own sync bound (each bounds its part of T)
            tau_floor = tau_bound
            searched = set()
            for layout_index, layout in layouts:
                key = outer.key + (zero, layout_index)
                if not self.best.may_beat(bound, key):
                    break
                if layout_index in twins:  # priced as an earlier layout: no win
                    continue
                self._check_time()
                if self.network.is_hierarchical and tp_groups_leave_nodes(
                        layout, config, num_stages, dp, self.network.node_size):
                    if crossing is None:  # no replica placed: the strides tell
                        crossing = self._all_crossing_bound(shape)
                    if not self.best.may_beat(max(bound, crossing), key):
                        continue
                if layout_index not in data:
                    data[layout_index] = self.geometries.data_groups(layout, config,
                                                                     num_stages, dp)
                groups = data[layout_index]
                if groups is not None:  # the sync bounds first: they need no replica placed
                    layout_sync = max(sync_bound, self._layout_sync_bound(shape, *groups))
                    tau_layout = self._layout_tau(shape, layout_index, layout, tau_floor,
                                                  layout_sync, key)
                    if not self.best.may_beat(max(bound, shape.rounds * tau_layout
                                                  + layout_sync), key):
                        continue
                    received = self._layout_receive_bound(shape, layout_index, layout)
                    if not self.best.may_beat(max(bound, received + layout_sync), key):
                        continue
                    staged = self._layout_stagewise_bound(shape, *groups)
                    if not self.best.may_beat(max(bound, staged), key):
                        continue
                    if not shaped:
                        shaped, bound = True, max(bound, self._shape_bound(shape,
                                                                           outer.chunk_bound))
                        deepened[zero] = bound
                        if not self.best.may_beat(bound, key):
                            continue  # (and the next layout's first test ends the loop)
                    if floor is not None:
                        least = min(least, max(bound, shape.rounds * tau_layout + layout_sync,
                                               received + layout_sync, staged))
                        if least <= floor:
                            return floor
                        continue
                if layout_index not in geometries:
                    geometries[layout_index] = tuple(self.geometries(
                        layout, config, num_stages, dp, virtual > 1))
                geometry = geometries[layout_index]
                if geometry in searched:  # priced alike, a later key: no win
                    continue
                searched.add(geometry)
                if groups is None:
                    groups = (geometry, [g.replica_groups for g in geometry],
                              [g.dense_groups for g in geometry])
                    layout_sync = max(sync_bound, self._layout_sync_bound(shape, *groups))
                    staged = self._layout_stagewise_bound(shape, *groups)
                    tau_layout = self._layout_tau(shape, layout_index, layout, tau_floor,
                                                  layout_sync, key)
                layout_bound = max(max(self._layout_bound(shape, geometry),
                                       shape.rounds * tau_layout) + layout_sync, staged)
                if not self.best.may_beat(max(bound, layout_bound), key):
                    continue
                if not shaped:
                    shaped, bound = True, max(bound, self._shape_bound(shape, outer.chunk_bound))
                    deepened[zero] = bound
                    if not self.best.may_beat(bound, key):
                        continue
                if floor is not None:
                    least = min(least, max(bound, layout_bound))
                    if least <= floor:
                        return floor
                    continue
                if virtual == 1 and num_stages > 1:  # the layout's own chunk times: most
                    # layouts stop here, before the shape's memory tables are built
                    found = (layout_index, shape.gather_dp)
                    if found not in fastest:
                        fastest[found] = fastest_tau(self.prices, shape, list(geometry))
                    layout_bound = max(layout_bound, shape.rounds * fastest[found] + layout_sync)
                    if not self.best.may_beat(max(bound, layout_bound), key):
                        continue
                if inner is None:
                    inner, bound, tau_floor = self._inner(shape, tau_bound, sync_bound, bound)
                    if inner is None:  # no split fits memory, on any layout
                        break
                    layout_bound = max(layout_bound, shape.rounds * max(tau_floor, tau_layout)
                                       + layout_sync)
                    if not self.best.may_beat(max(bound, layout_bound), key):
                        continue
                self.stats.layouts_searched += 1
                self._search_layout(shape, inner, list(geometry), key, layout, layout_sync)
        return least

    def _layout_tau(self, shape: Shape, layout_index: int, layout: RankLayout, tau: int,
                    sync: int, key: tuple[int, ...]) -> int:
        """A lower bound on max_k τ_k of every plan of the shape on this layout: ``tau`` (a
        bound for every layout) raised, with v = 1 and e = c = 1 on a network with a domain
        tier P, to :meth:`_replica_event` M (S, P) where one of the layout's replicas does
        not lie whole in a tier-P domain (:meth:`_replica_leaves`): the argument of
        :meth:`_replica_bound_at`, whose premise (some replica not whole) the layout's
        placement then has.  Asked only where R·M + ``sync`` (the layout's sync bound)
        cannot beat the incumbent with ``key`` (else the raise would prune nothing) and
        M > ``tau``."""
        if self.best.objective is None:
            return tau
        for tier in self._domain_tiers():
            least = self._replica_event(shape.table, shape.num_stages, shape.virtual, tier)
            if tau < least < INF and not self.best.may_beat(shape.rounds * least + sync,
                                                            key) and \
                    self._replica_leaves(layout_index, layout, shape.table.config,
                                         shape.num_stages, shape.dp, tier):
                tau = least
        return tau

    def _layout_receive_bound(self, shape: Shape, layout_index: int, layout: RankLayout) -> int:
        """A lower bound on rounds·max_s τ_s of every plan of the shape on this layout (v = 1,
        S >= 2, a workload of identical blocks between at most one leading and one trailing
        layer, a network with a domain tier, :meth:`_domain_tiers`, where pairs that cross a
        domain's border pay much more; 0 elsewhere: on the H100 spine-leaf at 131,072
        devices it cost 3.4 s more than it saved), from the tiers of its pipeline pairs,
        before any geometry is built.

        Replica r of stage s receives its activation from replica r of s − 1 over the pairs
        rank j to rank j, as slowly as the slowest of them (cost model §3), each on its
        tier's path: at least the least transfer of a layer output (any layer but the
        first) over the tiers from the larger of those of the pairs of rank 0 and of rank
        a − 1 (:meth:`_receives_from`); its gradient from s + 1 likewise (any layer but the
        last).  τ_s is its slowest replica's, at least its compute and collectives at their
        cheapest (:meth:`_cheapest_ranges`) plus those two receives, so at least
        cheapest(U_s) + x_s, x_s the largest over its replicas of their two receive floors.
        With blocks, cheapest(U_s) is a function of s's block count N_s and of whether s is
        the first, a middle or the last stage, so rounds·τ_s >= H_k(N_s) for its kind k =
        (position, x_s); :func:`_least_counted` over these kinds, each with its number of
        stages, gives a value at most max_s H(N_s) of every split (the argument of
        :meth:`_interleaved_stagewise_bounds`, one chunk a stage).  Kept per (layout, layer
        table, S, d)."""
        table, num_stages, dp = shape.table, shape.num_stages, shape.dp
        blocks = block_structure(table)
        if shape.virtual > 1 or num_stages < 2 or blocks is None or \
                not self._domain_tiers():
            return 0
        found = (layout_index, id(table), num_stages, dp)
        if found in self._received and self._received[found][0] is table:
            return self._received[found][1]
        if len(self._received) >= LAYOUT_KEYS_KEPT:
            self._received.clear()
        tiers = self._pipeline_pair_tiers(layout, table.config, num_stages, dp)
        count_tiers = self.network.num_tiers
        key = "least receives per tier"
        if key not in table.cache:  # per first tier (the last entry: no receive)
            table.cache[key] = tuple(np.array(
                [int(self._receives_from(table, tier)[side][window].min())
                 for tier in range(count_tiers)] + [0], dtype=np.int64)
                for side, window in ((0, slice(1, None)), (1, slice(None, -1))))
        activation, gradient = table.cache[key]
        none = np.full((1, dp), count_tiers)
        extra = (activation[np.vstack([none, tiers])]
                 + gradient[np.vstack([tiers, none])]).max(axis=1)  # x_s
        key = "cheapest per block count"  # per position (first, middle, last), kept
        if key not in table.cache:
            base = self._cheapest_ranges(table)[0]
            table.cache[key] = np.array([np.where(usable, base[first, last], INF)
                                         for first, last, usable in _block_count_ranges(
                                             blocks, table.num_layers, 1)])
        position = np.minimum(np.arange(num_stages), 1)
        position[-1] = 2
        span = int(extra.max()) + 1  # a stage's kind (position, x_s) as one code
        codes, multiplicity = np.unique(position * span + extra, return_counts=True)
        chosen = table.cache[key][codes // span]
        weights = np.where(chosen >= INF, INF, np.minimum(
            shape.rounds * (chosen + (codes % span)[:, None]), INF))
        bound = int(_least_counted(weights[None], multiplicity, blocks.count)[0])
        self._received[found] = (table, bound)
        return bound

    def _pipeline_pair_tiers(self, layout: RankLayout, config: IntraConfig, num_stages: int,
                             dp: int) -> np.ndarray:
        """(S − 1, d): per stage boundary and replica, the larger tier of the pipeline pairs
        of ranks 0 and a − 1 (:func:`rank_end_devices`).  Where the layout reads the
        canonical order through its mixed-radix positions (no digit order, node tail or
        gathered ends; c = 1), a rank's id is the offset plus its digits' strides, and its
        pair's id σ_S more, so the pair's tier is a function of the id modulo M, the
        largest domain that may separate two ids (every smaller one divides it): read from
        a table over the M residues (:meth:`_pair_tier_table`), without placing any rank."""
        if config.cp > 1 or not self._canonical_positions(layout, config, num_stages, dp):
            ends = rank_end_devices(layout, config, num_stages, dp,
                                    self.geometries.order_of(layout), self.network.node_size)
            # (which id of a pair is the smaller does not matter: a domain separates both)
            return self.network.tier_of_pairs(ends[:-1], ends[1:]).max(axis=2)
        strides = layout_strides(layout, config, num_stages, dp)
        modulus = max(self.network.separating_sizes, default=1)
        # a step of M or more crosses every domain below M, as M does (ids stay below 2N)
        table = self._pair_tier_table(min(strides[Dim.STAGE], modulus), modulus)
        replicas = np.arange(dp, dtype=np.int64)
        replica_ids = np.zeros(dp, dtype=np.int64)
        for stride, count in replica_box(layout, strides, config, num_stages, dp):  # r_in first
            replica_ids += replicas % count * stride
            replicas //= count
        last_rank = (config.tp - 1) * strides[Dim.TP] + (config.ep - 1) * strides[Dim.EP]
        first = layout.offset(config, num_stages, dp, self.network.num_devices,
                              self.network.node_size) \
            + np.arange(num_stages - 1, dtype=np.int64) * strides[Dim.STAGE]
        ids = (first[:, None] + replica_ids[None, :]) % modulus
        return np.maximum(table[ids], table[(ids + last_rank) % modulus])

    def _canonical_positions(self, layout: RankLayout, config: IntraConfig, num_stages: int,
                             dp: int) -> bool:
        """Whether the layout's ids are its mixed-radix positions plus its offset: it reads
        the canonical order (ids 0..N−1, a tiered network) with no digit order, and no node
        tail or gathered ends is in effect at this shape."""
        return self.geometries.strided and not layout.digits and \
            not layout.arrayed(config, num_stages, dp)

    def _pair_tier_table(self, step: int, modulus: int) -> np.ndarray:
        """The tier of the pair (u, u + ``step``) for every residue u < ``modulus`` (the
        largest domain that may separate two ids), kept per step."""
        found = self._pair_tiers.get((step, modulus))
        if found is None:
            if len(self._pair_tiers) >= LAYOUT_KEYS_KEPT:
                self._pair_tiers.clear()
            units = np.arange(modulus, dtype=np.int64)
            found = self._pair_tiers[step, modulus] = np.asarray(
                self.network.tier_of_pairs(units, units + step), dtype=np.int64)
        return found

    def _replica_leaves(self, layout_index: int, layout: RankLayout, config: IntraConfig,
                        num_stages: int, dp: int, tier: int) -> bool:
        """Whether some replica of the layout's placement (:func:`rank_devices`, every rank
        of (c, S, d)) has ranks in two tier-P domains (blocks of G_P consecutive ids), kept
        per (layout, c, S, d, P) (cleared past ``LAYOUT_KEYS_KEPT``).  Where the layout
        reads the canonical order (ids 0..N−1) through its mixed-radix positions (no digit
        order, node tail or gathered ends), a position grows with each digit, so a
        replica's least and largest ids are those of rank 0 of its first stage and rank
        a − 1 of its last (:func:`rank_end_devices` of those two stages), and so are its
        least and largest domains."""
        found = (layout_index, config, num_stages, dp, tier)
        if found not in self._leaving_replicas:
            if len(self._leaving_replicas) >= LAYOUT_KEYS_KEPT:
                self._leaving_replicas.clear()
            order = self.geometries.order_of(layout)
            if self._canonical_positions(layout, config, num_stages, dp):
                ends = rank_end_devices(layout, config, num_stages, dp, order,
                                        self.network.node_size,
                                        np.array([0, num_stages - 1], dtype=np.int64))
                domains = np.stack([ends[0, :, 0], ends[-1, :, 1]])[:, :, None]
            else:
                domains = rank_devices(layout, config, num_stages, dp, order,
                                       self.network.node_size)
            domains = domains // self.network.cluster.network.domain_sizes()[tier]
            self._leaving_replicas[found] = bool(np.any(domains.min(axis=(0, 2))
                                                        != domains.max(axis=(0, 2))))
        return self._leaving_replicas[found]

    def _inner(self, shape: Shape, tau_bound: int, sync_bound: int, bound: int):
        """The inner search of a shape (layout-free: memory does not depend on the
        layout), the shape's bound and a lower bound on max_k τ_k of its plans, for v = 1
        both refined by the min-max split restricted to splits that fit memory (module
        docstring: the split's chunk times, cheapest paths and the modes' reruns, are at most
        the real ones); (None, bound, tau_bound) when no split fits."""
        if shape.virtual > 1:
            _require_exact_method(shape.table, shape.num_chunks)
            return Interleaved(self.prices, shape, self.limit), bound, tau_bound
        table, num_stages = shape.table, shape.num_stages
        inner = SuffixMemory(self.prices, shape, self.limit)
        cheapest = self._cheapest_times(table, num_stages)
        self.stats.dp_passes += 1
        fitting = least_max(inner.effective(
            {mode: cheapest + windows(table.rerun_range[mode], num_stages)
             for mode in table.modes}))
        if fitting >= INF:
            return None, bound, tau_bound
        tau_floor = max(tau_bound, fitting)
        return inner, max(bound, shape.rounds * tau_floor + sync_bound), tau_floor

    def _search_layout(self, shape: Shape, inner, geometries, key: tuple[int, ...],
                       layout: RankLayout, sync_floor: int = 0) -> None:
        """The inner search of one layout (``sync_floor``: a lower bound on the exposed
        sync of its plans, the layout's sync bound, where the walk may stop early)."""
        if shape.num_stages == 1:
            self.stats.dp_passes += single_stage(
                self.prices, shape, inner, geometries[0],
                lambda objective: self._may_beat_in_time(objective, key),
                lambda objective, stages: self._accept(shape, stages, objective, key, layout))
            return
        if shape.virtual == 1:
            self.stats.dp_passes += pareto_walk(
                self.prices, shape, inner, geometries,
                lambda objective: self._may_beat_in_time(objective, key),
                lambda objective, stages: self._accept(shape, stages, objective, key, layout),
                sync_floor)
            return
        self.stats.dp_passes += inner.search(
            geometries,
            lambda objective, variant: self._may_beat_in_time(objective, key + (variant,)),
            lambda objective, variant, stages: self._accept(shape, stages, objective,
                                                            key + (variant,), layout))

    def _accept(self, shape: Shape, stages: tuple[Stage, ...], objective: int,
                key: tuple[int, ...], layout: RankLayout) -> None:
        if not self.best.may_beat(objective, key):
            return
        table = shape.table

        def build() -> Plan:
            placement = layout.placement(layout_config(table.config), shape.num_stages, shape.dp,
                                         self.geometries.order_of(layout),  # an array
                                         self.network.node_size)
            return Plan(table.config, table.microbatch, shape.zero, shape.dp, stages,
                        placement, shape.virtual)

        self.best.objective, self.best.key, self.best.build = objective, key, build
        self.best.layout = layout.name
        logger.debug("incumbent %d ticks at key %s", objective, key)

    # ------------------------------------------------------------ memory

    def _widest_shape(self, table: LayerTable, num_stages: int, virtual: int, zero: int,
                      valid_only: bool) -> Shape | None:
        """The shape at the largest d = N // (a·S) (with ``valid_only``, the largest d
        whose m is a multiple of S when v > 1), where memory is least."""
        training = self.instance.training
        largest = self.instance.cluster.num_devices // (table.config.devices * num_stages)
        for dp in range(largest, 0, -1):
            microbatches = cost.num_microbatches(training.global_batch, table.microbatch,
                                                 table.config, dp)
            if not valid_only or virtual == 1 or microbatches % num_stages == 0:
                return Shape(table, num_stages, dp, virtual, zero, microbatches)
        return None

    def _fits_at_most_replicas(self, shape: Shape) -> bool:
        """Whether some split fits memory at the largest d, cached per (c, b, S, v, z).

        Stage memory never grows with d (ZeRO shards shrink, in-flight counts do not grow
        as m falls), so if no split fits at the largest d, none fits at any d.  With v = 1
        one of the two balanced splits (:func:`_balanced_splits`) fitting, each stage in
        its least-memory mode, is a witness (no excess to note: the least is not above
        the limit); else the least over splits of the largest stage memory decides.
        """
        table = shape.table
        key = (table.config, table.microbatch, shape.num_stages, shape.virtual, shape.zero)
        if key not in self.fits:
            widest = self._widest_shape(table, shape.num_stages, shape.virtual, shape.zero,
                                        valid_only=False)
            if shape.virtual == 1:
                memory = SuffixMemory(self.prices, widest, self.limit)
                if any(memory.split_memory(firsts, lasts).max() <= self.limit
                       for firsts, lasts in _balanced_splits(table.num_layers,
                                                             shape.num_stages)):
                    self.fits[key] = True
                    return True
                self.stats.dp_passes += 1
                least = least_max(memory.least_memory)
                self.fits[key] = least <= self.limit
                self.best.note_excess(least - self.limit, _where(widest))
            else:
                self.stats.dp_passes += 1
                _require_exact_method(table, widest.num_chunks)
                self.fits[key] = Interleaved(self.prices, widest, self.limit).fits_somewhere()
        return self.fits[key]

    def _measure_excess(self, outers) -> None:
        """No plan fits: the least excess over the interleaved shapes too (v = 1 is measured
        on the way), for the INFEASIBLE reason."""
        seen = set()
        for outer in outers:
            table = self._table(outer.choice_index)
            for zero in self._zero_stages(table, outer.dp, outer.num_stages, outer.virtual):
                key = (outer.choice_index, outer.num_stages, outer.virtual, zero)
                if outer.virtual == 1 or key in seen:
                    continue
                seen.add(key)
                widest = self._widest_shape(table, outer.num_stages, outer.virtual, zero,
                                            valid_only=True)
                if widest is not None:
                    least = Interleaved(self.prices, widest, self.limit).least_memory()
                    if least < INF:  # INF: no split at all
                        self.best.note_excess(least - self.limit, _where(widest))

    # ------------------------------------------------------------ bounds

    def _layout_bound(self, shape: Shape, geometries: tuple) -> int:
        """(v·m + S − 1) times the mean chunk time on this layout, a lower bound on T − sync.

        A chunk's time is its slowest replica's compute, collectives and receives (cost
        model §3.2; :meth:`RangePrices.chunk_time`), so at least its compute plus, for every
        one of its layers, the layer's collectives on the replica of its stage where they are
        cheapest, plus the cheapest receive any replica of its stage has (a replica's sum is
        at least the least of each part).  Every layer is in one chunk, and each of the
        K − 1 chunks after the first receives an activation (from the chunk before, its
        stage's receiving pairs; with v > 1 stage 0 receives across the wrap) and each of
        the K − 1 before the last a gradient, each a transfer of one layer's output on one
        of the paths of the layout's receiving pairs.  So Σ_k τ_k >= Σ_layers (compute +
        the least such collective price over the stages) + (K − 1)·(a + g), with a (g) the
        least transfer of any layer output but the last over the paths the layout's
        replicas receive activations (gradients) on (0 when none), and max_k τ_k >= that
        sum / K.  The parts are kept per (table, geometries): the ZeRO stages of an outer
        choice, and outer choices with equal placements, share them.
        """
        table = shape.table
        key = (id(table), geometries)
        parts = self._layout_totals.get(key)
        if parts is None:
            paths = self.ids.paths
            cheapest = None
            received: tuple[set, set] = (set(), set())
            for geometry in set(geometries):
                for replica in geometry.replicas:
                    per_layer = np.diag(table.collective_range(
                        tuple(paths[p] for p in replica.tp_groups),
                        tuple(paths[p] for p in replica.ep_groups),
                        tp_local=replica.tp_local))
                    cheapest = per_layer if cheapest is None else np.minimum(cheapest,
                                                                             per_layer)
                    received[0].update(replica.recv_activation)
                    received[1].update(replica.recv_gradient)
            floors = tuple(min((int(table.transfers(paths[p])[:-1].min(initial=INF))
                                for p in ids), default=0) for ids in received)
            parts = (int(table.compute.sum()) + int(cheapest.sum()), sum(floors))
            self._layout_totals[key] = parts
        total = parts[0] + (shape.num_chunks - 1) * parts[1]
        return shape.rounds * -(-total // shape.num_chunks)

    def _layout_sync_bound(self, shape: Shape, groups_key: tuple, replica_groups: list,
                           dense_groups: list) -> int:
        """A lower bound on max_s exposed_s on this layout, from its own sync groups' paths:
        per stage, the path ids of its d-replica groups and of its d·e groups (those of its
        :class:`~nest_cp.dp.geometry.StageGeometry`); ``groups_key`` is equal for equal
        groups.

        :meth:`_fresh_sync_bound` must hold for every layout, so it prices a group of g
        ranks on the fastest path any g devices may have — with as many channels as a
        tier-0 domain has members (cost model §5 a), e.g. 8 NICs of a DGX node.  A layout
        that puts its tensor ranks in one node gives its data-parallel groups one member per
        node, one channel: up to 8 times slower.  Here each group is priced on the path the
        layout actually gives it:

        For each kind of parameters (dense over d·e·c ranks, expert over d·c; c the
        context width), the stage s* holding the most of them holds at least ceil(P / S).
        Its exposed sync is at least
        its parts the iteration waits for in full (RS without overlap_grad_reduce, AG
        without overlap_param_gather; the others are >= 0, §5 d), each the price on the
        kind's slowest group of s* (§5 c), so at least the largest over s*'s groups of
        the price; prices never fall as the parameter count grows, and s* is one of the
        stages, so the least over the stages' distinct group sets bounds it.  The largest
        over the kinds is taken (0 with both overlaps).  Every step of
        :meth:`_fresh_sync_bound` holds as well with, for each kind, the paths of this
        layout's groups of that kind in place of the fastest paths (each stage's phase costs
        at least its price on any one of its groups, one of those paths): the larger of the
        two is returned.  Kept per (layer table, S, d, z, groups).
        """
        if not self.network.is_hierarchical:
            return 0
        training = self.instance.training
        in_full = (not training.overlap_grad_reduce, not training.overlap_param_gather)
        table = shape.table
        key = (id(table), shape.num_stages, shape.dp, shape.zero, groups_key)
        found = self._layout_syncs.get(key)
        if found is not None and found[0] is table:
            return found[1]
        kinds = (dense_groups, replica_groups)
        unions = [tuple(self.ids.paths[path] for path in sorted(set().union(*stage_groups)))
                  for stage_groups in kinds]
        bound = self._fresh_sync_bound(shape, lambda kind, size: unions[kind])
        for (params, _, per_replica), stage_groups in zip(parameter_kinds(table), kinds):
            if not any(in_full):
                break
            size = shape.dp * per_replica
            if size <= 1 or params == 0:
                continue
            heaviest = -(-params // shape.num_stages)
            prices = []
            for groups in set(stage_groups):
                forms = [self.prices.sync_forms(shape.zero, size, path) for path in groups]
                prices.append(sum(max(phase[index].of(heaviest) for phase in forms)
                                  for index, full in enumerate(in_full)
                                  if full and forms and forms[0][index] is not None))
            bound = max(bound, min(prices))
        self._layout_syncs[key] = (table, bound)
        return bound

    def _layout_stagewise_bound(self, shape: Shape, groups_key: tuple, replica_groups: list,
                                dense_groups: list) -> int:
        """A lower bound on T over every plan of the shape on this layout (any split and
        recompute), stage by stage with each stage's own sync groups (``replica_groups`` /
        ``dense_groups``: per stage the path ids of its d-replica and d·e groups, as
        :meth:`_layout_sync_bound` takes them): for v = 1 below, for v > 1 on workloads of
        blocks by :meth:`_interleaved_layout_bound`.  0 (no claim) for v > 1 on other
        workloads, a context width above 1 (whose groups span d·e·c ranks), a layout whose
        stages all have the same groups (then it adds little to the cheaper
        :meth:`_stagewise_of`) or a network without a domain tier (:meth:`_domain_tiers`:
        where no tier is slower per device than the one below it, a stage whose groups
        straddle a border pays little more than the others, and on the H100 spine-leaf at
        131,072 devices the bound cost 0.9 s for two outers dropped).

        T = rounds·max_s τ_s + max_s exposed_s >= rounds·τ_s + exposed_s for every stage s.
        For s on layers f..l: τ_s >= cheapest(f, l) (:meth:`_stage_time_floor` at quality t:
        compute and every collective on its cheapest path, receives dropped; the crossing
        extra of a lower quality is >= 0), plus under ZeRO-3 the gathers of its layers'
        parameters on its slowest d-group (§3.2 d: at least its price on each of s's groups);
        exposed_s is each phase's sum over the kinds of its price on the kind's slowest group
        of s (cost model §5 c), so at least the largest over s's groups of that kind, less the
        compute it overlaps (max(0, x − y) does not fall as x grows, §5 d).  Unlike
        :meth:`_layout_sync_bound`, which must serve every split and so prices the stage with
        the most parameters on the fastest path any stage has, each stage is priced on its
        own groups: a layout whose stages straddle the border of a domain above which
        bandwidth falls (a stage of 2,928 devices on pods of 3,072) pays that border on the
        stages that straddle it, whatever the split.  So T >= the least over contiguous
        splits of max_s W_s(f_s, l_s), W_s = rounds·(cheapest + gathers_s) + exposed_s: a
        recurrence over stages with stage-dependent weights, V(s, f) = min_{l >= f} max(
        W_s(f, l), V(s + 1, l + 1)), V(S, L) = 0.  Kept per (layer table, S, d, v, z, groups)."""
        if shape.table.config.cp > 1 or not self._domain_tiers() or (
                shape.virtual > 1 and block_structure(shape.table) is None):
            return 0
        table, num_stages, dp, zero = shape.table, shape.num_stages, shape.dp, shape.zero
        if list(replica_groups).count(replica_groups[0]) == num_stages and \
                list(dense_groups).count(dense_groups[0]) == num_stages:
            return 0  # every stage alike: left to the cheaper bounds (see above)
        key = ("stagewise", id(table), num_stages, dp, shape.virtual, zero, groups_key)
        found = self._layout_syncs.get(key)
        if found is not None and found[0] is table:
            return found[1]
        _, inverse = distinct_ranges(table, (table.dense_range, table.expert_range,
                                             table.bwd_range, table.fwd_range,
                                             table.params_range))
        time = self._stage_time_floor(table, table.config.tp)
        signatures = [(frozenset(dense_groups[stage]), frozenset(replica_groups[stage]))
                      for stage in range(num_stages)]
        weights = {}
        for signature in set(signatures):
            gathers, exposed = self._stage_parts(table, dp, zero, signature,
                                                 shape.gather_dp > 1)
            stage_time = time if gathers is None else time + gathers[inverse]
            if shape.virtual > 1:  # the slowest of v chunks: at least their mean
                stage_time = -(-stage_time // shape.virtual)
            weights[signature] = np.minimum(shape.rounds * stage_time + exposed[inverse], INF)
        if shape.virtual > 1:
            bound = self._interleaved_layout_bound(table, shape.virtual, signatures, weights)
            self._layout_syncs[key] = (table, bound)
            return bound
        # the kernel's recurrence on each stage's window of its own weights
        staged = np.stack([windows(weights[signature], num_stages)[stage]
                           for stage, signature in enumerate(signatures)])
        bound = least_max(staged + self._unordered(table.num_layers, num_stages))
        self._layout_syncs[key] = (table, bound)
        return bound

    def _interleaved_layout_bound(self, table: LayerTable, virtual: int, signatures: list,
                                  weights: dict) -> int:
        """:meth:`_layout_stagewise_bound` for v > 1 on a workload of identical blocks
        between at most one leading and one trailing layer: stage s's chunks hold layers
        U_s, and W_s(U_s) (``weights[signatures[s]]`` read at the contiguous range of the
        same totals) bounds R·max_{k ∈ s} τ_k + exposed_s, as in
        :meth:`_interleaved_stagewise_bounds` (the slowest chunk costs at least the mean of
        the v, the floors are range sums and the gather on one fixed group of s is
        subadditive; the sync is a function of U_s's totals).  With N_s the blocks of s
        (N_0 >= v − lead, N_{S−1} >= v − trail, the others >= v, Σ_s N_s = n), T >= X* =
        max_s W_s(N_s) for the plan's own counts; for a threshold X the counts with
        W_s(N) <= X lie between the least and the largest such N of each stage, so X* passes
        the test that every stage has one and n lies between the sums of those least and
        largest counts.  The least candidate value passing it (monotone: the sets only
        grow) is at most X*, so at most T."""
        blocks = block_structure(table)
        ranges = _block_count_ranges(blocks, table.num_layers, virtual)
        last_stage = len(signatures) - 1
        classes: dict[tuple, int] = {}  # (kind, signature) -> stages of it
        for stage, signature in enumerate(signatures):
            kind = 0 if stage == 0 else 2 if stage == last_stage else 1
            classes[kind, signature] = classes.get((kind, signature), 0) + 1
        rows = [np.where(ranges[kind][2], weights[signature][ranges[kind][0], ranges[kind][1]],
                         INF) for kind, signature in classes]
        return int(_least_counted(np.array(rows)[None], np.array(list(classes.values())),
                                  blocks.count)[0])

    def _stage_parts(self, table: LayerTable, dp: int, zero: int, signature: tuple,
                     gathered: bool) -> tuple[np.ndarray | None, np.ndarray]:
        """Per distinct range of :func:`distinct_ranges`, the parts of
        :meth:`_layout_stagewise_bound`'s W_s for a stage whose d·e and d-replica groups run
        on the path ids of ``signature``: the ZeRO-3 gathers on its slowest d-group (None
        unless ``gathered``) and the exposed sync; kept per (layer table, d, z, signature),
        which many (S, layout) share (at most ``LAYOUT_KEYS_KEPT`` before clearing)."""
        key = (id(table), dp, zero, signature, gathered)
        found = self._stage_parts_kept.get(key)
        if found is not None and found[0] is table:
            return found[1]
        params = distinct_ranges(table, (table.dense_range, table.expert_range,
                                         table.bwd_range, table.fwd_range,
                                         table.params_range))[0][4]
        exposed = self._exposed_floors(table, zero, [(dp * table.config.ep, signature[0]),
                                                     (dp, signature[1])], np.max)
        gathers = None
        if gathered and signature[1]:
            gathers = 2 * np.max([self.prices.gather_form(dp, path).of_array(params)
                                  for path in signature[1]], axis=0)
        if len(self._stage_parts_kept) >= LAYOUT_KEYS_KEPT:
            self._stage_parts_kept.clear()
        self._stage_parts_kept[key] = (table, (gathers, exposed))
        return gathers, exposed

    def _exposed_floors(self, table: LayerTable, zero: int, groups: list, pick) -> np.ndarray:
        """Per distinct range of :func:`distinct_ranges`, the exposed sync of a stage whose
        groups of the dense and of the expert kind have ``groups`` = [(size, path ids)] ranks
        and paths: each phase summed over the kinds of ``pick`` (np.min: the least price over
        the paths, np.max: the largest) of its price, less the compute it overlaps (cost
        model §5 c, d); a kind of one rank, no parameters or no paths adds nothing."""
        training = self.instance.training
        columns, _ = distinct_ranges(table, (table.dense_range, table.expert_range,
                                             table.bwd_range, table.fwd_range,
                                             table.params_range))
        dense, expert, backward, forward, _ = columns
        reduce = np.zeros(len(dense), dtype=np.int64)
        gather = np.zeros(len(dense), dtype=np.int64)
        for volumes, (size, paths) in zip((dense, expert), groups):
            if size <= 1 or not np.any(volumes > 0) or not paths:
                continue
            forms = [self.prices.sync_forms(zero, size, path) for path in paths]
            reduce = reduce + pick([form.of_array(volumes) for form, _ in forms], axis=0)
            if forms[0][1] is not None:
                gather = gather + pick([form.of_array(volumes) for _, form in forms], axis=0)
        if training.overlap_grad_reduce:
            reduce = np.maximum(0, reduce - backward)
        if training.overlap_param_gather:
            gather = np.maximum(0, gather - forward)
        return reduce + gather

    def _shape_bound(self, shape: Shape, chunk_bound: int, split: bool = True) -> int:
        """A lower bound on T over every plan of the shape (c, b, S, d, v, z), any split,
        recompute and placement (not only the rank layouts): the larger of

        - the fastest-path bound (v·m + S − 1)·max(τ_lb, gathers) + sync (module docstring
          "Bounds and pruning"; ``chunk_bound`` = τ_lb(S·v)), and
        - with t >= 2 on a tiered network, the least over the values h the least quality of
          the plan's TP groups may take (:func:`tp_qualities`: t if every TP group lies in
          a node, else the channel count 1 .. t // 2 of the poorest; the facts are in
          :mod:`nest_cp.dp.node_bounds`) of

              rounds·max(τ_lb, gathers_c, τ_h) + sync_c,   c = ⌊G_0 / h⌋.

          By Fact 1 no node holds more than c members of any sync or ZeRO-3 gather group,
          so each such group of g ranks runs on one of :func:`capped_group_paths` (g, c)
          or a slower one; every step of :meth:`_gather_bound` and
          :meth:`_fresh_sync_bound` holds with those paths in place of the fastest ones
          (both use only "each group runs on one of these paths or a slower one, and a
          price never falls on a slower path or for more parameters"): gathers_c and
          sync_c.  For h < t, by Fact 2 the stage replica of a TP group of quality h pays
          every TP collective at least on one of :func:`crossing_tp_paths` (t, h), so
          the chunks of that stage cost at least their crossing times and
          max_k τ_k >= τ_h = :meth:`_crossing_chunk_bound` (h).  For h = t every TP group
          lies inside a node, so max_k τ_k >= τ_t = :meth:`_off_node_chunk_bound` (its
          receives off the node when t = G_0; else 0).

        Every plan has one least quality h, so costs at least that h's term (T =
        rounds·max_k τ_k + max_s exposed_s, and the term bounds both parts), hence at
        least the least term.  ``split`` False: the first bound alone (cheaper; the
        planner's choice until it holds a plan, so that one comes early).
        """
        fast = shape.rounds * max(chunk_bound, self._gather_bound(shape)) \
            + self._sync_bound(shape)
        tp = shape.table.config.tp
        # (the case split is argued for c = 1; with context parallelism the fast bound alone)
        qualities = self._tp_qualities(tp) if split and shape.table.config.cp == 1 else ()
        if not qualities:
            return fast
        least = INF
        for quality, cap in qualities:
            crossing = self._off_node_chunk_bound(shape.table, shape.num_chunks) \
                if quality == tp else self._crossing_chunk_bound(
                    shape.table, shape.num_chunks, quality, shape.num_stages)
            least = min(least, shape.rounds * max(
                chunk_bound, self._gather_bound(shape, cap), crossing)
                + self._sync_bound(shape, cap))
        return max(fast, least)

    def _tp_qualities(self, tp: int) -> tuple[tuple[int, int], ...]:
        """(h, c = ⌊G_0 / h⌋) for the least TP-group qualities h of :func:`tp_qualities`
        worth a term in :meth:`_shape_bound` and :meth:`_stagewise_bound`, kept per t: of
        the h with one c only the largest (``tp_qualities`` ascends), whose term is the
        least: the same c, and τ_h falls as h grows (more channels, :func:`crossing_tp_paths`;
        τ_t = 0).  () on graphs or t = 1."""
        if tp not in self._qualities:
            qualities = tp_qualities(self.network, tp) if self.network.is_hierarchical else ()
            best_of_cap = {node_cap(self.network, quality): quality for quality in qualities}
            self._qualities[tp] = tuple(sorted((quality, cap)
                                               for cap, quality in best_of_cap.items()))
        return self._qualities[tp]

    def _group_paths(self, size: int, cap: int | None, above: int = -1) -> tuple:
        """:func:`fastest_group_paths` (size) (``cap`` None) or :func:`capped_group_paths`
        (size, cap, above), kept per (size, cap, above)."""
        key = (size, cap, above)
        if key not in self._paths:
            self._paths[key] = fastest_group_paths(self.network, size) \
                if cap is None and above < 0 else capped_group_paths(
                    self.network, size, self.network.node_size if cap is None else cap,
                    above)
        return self._paths[key]

    def _crossing_chunk_bound(self, table: LayerTable, num_chunks: int, channels: int,
                              num_stages: int | None = None, above: int = 0) -> int:
        """τ_h of :meth:`_shape_bound` (h = ``channels``): the least over splits into
        ``num_chunks`` chunks of max_k w_k, where every chunk's w_k is its cheapest-path
        time (:meth:`_cheapest_times`) except one chunk, chosen freely, priced with its TP
        collectives on :func:`crossing_tp_paths` (t, h) (unhidden; EP collectives and
        receives still on their cheapest paths).  A plan with a TP group of quality h
        has a chunk (of that group's stage) costing at least its crossing time and every
        other chunk at least its cheapest time, so its max τ is at least this (the
        minimum also ranges over the split and over which chunk crosses).  Exact min-max
        over splits by the kernel's recurrence with one more bit of state, "the
        crossing chunk is still to come":

            A(k, f) = the kernel's value (every chunk k.. on its cheapest time),
            B(K, ·) = INF,
            B(k, f) = min over l of min(max(cross(k, f, l), A(k + 1, l)),
                                        max(cheap(k, f, l), B(k + 1, l))),

        and τ_h = B(0, 0).  With ``num_stages`` S < K (interleaved, v = K / S): a TP group
        belongs to one stage, and all v chunks of that stage (k ≡ s mod S, cost model §3.2
        b) share it, so all of them cost at least their crossing times: τ_h is then the
        least over s of the kernel's value with the chunks k ≡ s (mod S) on crossing times
        and the others on cheapest ones (at least the one-chunk value above).  INF when no
        tier above the node holds t devices.  With ``above`` >= 1, the same for a TP group
        that leaves its tier-``above`` domain (its paths :func:`crossing_tp_paths` (t, h,
        above)).  B(0, 0) of every K at once by :meth:`_crossing_per_chunk_count`; with S < K
        on a workload of blocks the block-count bound of :meth:`_counted_crossing_bound`
        (at most the value above), else the recurrence above for every s side by side.  Kept
        per (layer table, K, h, S, above)."""
        if num_stages is None or num_stages >= num_chunks:
            num_stages = num_chunks
        key = ("crossing bound", num_chunks, channels, num_stages, above)
        if key in table.cache:
            return table.cache[key]
        if not crossing_tp_paths(self.network, table.config.tp, channels, above):
            table.cache[key] = INF
            return INF
        if num_stages == num_chunks:
            table.cache[key] = self._crossing_per_chunk_count(table, channels, above)[
                num_chunks]
            return table.cache[key]
        blocks = block_structure(table)
        if blocks is not None:
            table.cache[key] = self._counted_crossing_bound(table, blocks, num_chunks,
                                                            num_stages, channels, above)
            return table.cache[key]
        cheapest = self._cheapest_times(table, num_chunks)
        extra = windows(self._crossing_extra(table, channels, above), num_chunks)
        width = table.num_layers - num_chunks + 1
        ordered = np.triu(np.ones((width, width), dtype=bool))
        cheap = np.where(ordered, cheapest, INF)
        cross = np.where(ordered, cheapest + extra, INF)
        value = np.full((num_stages, width), INF, dtype=np.int64)  # every s at once (row s)
        value[:, width - 1] = 0
        for chunk in range(num_chunks - 1, -1, -1):
            crossing = chunk % num_stages  # the row whose chunk crosses
            across = np.maximum(cross[chunk], value[crossing][None, :]).min(axis=1)
            value = np.maximum(cheap[chunk][None], value[:, None, :]).min(axis=2)
            value[crossing] = across
        table.cache[key] = int(value[:, 0].min())
        return table.cache[key]

    def _counted_crossing_bound(self, table: LayerTable, blocks: Blocks, num_chunks: int,
                                num_stages: int, channels: int, above: int) -> int:
        """τ_h of :meth:`_crossing_chunk_bound` with S < K on a workload of blocks
        (:func:`~nest_cp.dp.interleaved.block_structure`), by block counts instead of the
        recurrence over splits, at most its value.

        Chunk 0 holds layer 0 and chunk K − 1 layer L − 1 (each chunk holds a layer), so
        with N_k the blocks of chunk k, chunk 0's layers are [0, lead + N_0 − 1] and chunk
        K − 1's [L − trail − N_{K−1}, L − 1], functions of the count; every other chunk
        holds N_k >= 1 consecutive blocks, whose weight (cheapest or crossing) is at least
        the least over the places N blocks may take (the blocks' totals are the same
        anywhere; only the receives before and after may differ): the weights per kind of
        :meth:`_crossing_count_weights`.  The crossing stage s runs chunk 0 and v − 1 middle
        chunks (s = 0), chunk K − 1 and v − 1 middle ones (s = S − 1), or v middle ones;
        the others run on their cheapest times.  For the split of any plan with stage s
        crossing, its max over chunks X is at least every chunk's kind weight at its count,
        so those counts pass the test of :func:`_least_counted` at X, and the least value
        passing it is at most X.  The least over the three cases of s is so at most τ_h."""
        key = ("crossing counts", channels, above)
        if key not in table.cache:
            table.cache[key] = self._crossing_count_weights(table, blocks, channels, above)
        weights = table.cache[key]
        virtual = num_chunks // num_stages
        rest = num_chunks - virtual
        # per case of s, the chunks of each kind: (first, first crossing, middle, middle
        # crossing, last, last crossing)
        cases = [(0, 1, rest - 1, virtual - 1, 1, 0), (1, 0, rest - 1, virtual - 1, 0, 1)]
        if num_stages >= 3:
            cases.append((1, 0, rest - 2, virtual, 1, 0))
        return min(int(_least_counted(weights, np.array(case), blocks.count)[0])
                   for case in cases)

    def _crossing_count_weights(self, table: LayerTable, blocks: Blocks, channels: int,
                                above: int) -> np.ndarray:
        """(1, 6, n + 1): per block count N, the weight of a first chunk, a middle one and a
        last one (K >= 2), each on its cheapest time and on its crossing time
        (:meth:`_crossing_per_chunk_count`'s c and x), INF where no chunk of the kind holds
        N blocks (a middle chunk at least one, no first chunk the last layer, no last
        chunk the first); the first and last chunks' ranges those of
        :func:`_block_count_ranges` (v = 1), a middle chunk's the least over the places of
        its blocks."""
        cheap = self._suffix_weight(table)
        extra = self._crossing_extra(table, channels, above)
        last_layer, counts = table.num_layers - 1, np.arange(blocks.count + 1)
        (firsts, first_lasts, first_usable), _, (starts, lasts, last_usable) = \
            _block_count_ranges(blocks, table.num_layers, 1)
        first_usable = first_usable & (first_lasts < last_layer)  # not the last chunk too
        last_usable = last_usable & (starts >= 1)  # not the first chunk too
        # a middle chunk: blocks from f to f + N − 1, neither layer 0 nor L − 1
        places = np.arange(max(blocks.leading, 1),
                           min(blocks.leading + blocks.count, last_layer))[:, None]
        ends = places + counts[None, :] - 1
        usable = (counts[None, :] >= 1) & (ends < min(blocks.leading + blocks.count,
                                                        last_layer))
        ends = np.clip(ends, 0, last_layer)
        places = np.broadcast_to(places, ends.shape)
        middle = np.where(usable, cheap[places, ends], INF)
        crossed = np.where(usable, middle + extra[places, ends], INF)
        kinds = [np.where(first_usable, cheap[firsts, first_lasts], INF),
                 np.where(first_usable, cheap[firsts, first_lasts]
                          + extra[firsts, first_lasts], INF),
                 middle.min(axis=0, initial=INF), crossed.min(axis=0, initial=INF),
                 np.where(last_usable, cheap[starts, lasts], INF),
                 np.where(last_usable, cheap[starts, lasts] + extra[starts, lasts], INF)]
        return np.minimum(np.stack(kinds), INF)[None]

    def _crossing_per_chunk_count(self, table: LayerTable, channels: int,
                                  above: int) -> dict[int, int]:
        """τ_h of :meth:`_crossing_chunk_bound` with S = K (one crossing chunk) for every K,
        by one recurrence over layer suffixes (as :meth:`_chunk_time_bounds`: a chunk's
        cheapest time is a function of its layers f..l alone, c(f, l), and so is its
        crossing time x(f, l) = c(f, l) + :meth:`_crossing_extra`): with h_k of that
        docstring and g_k(f) the least maximum weight over splits of f..L − 1 into k chunks
        of which one, chosen freely, weighs its crossing time,

            g_1(f) = x(f, L − 1),
            g_k(f) = min over l >= f of min(max(x(f, l), h_{k−1}(l + 1)),
                                            max(c(f, l), g_{k−1}(l + 1))),

        and τ_h(K) = g_K(0), the recurrence B of :meth:`_crossing_chunk_bound` read from the
        end.  Kept per (layer table, h, above)."""
        key = ("crossing per K", channels, above)
        if key not in table.cache:
            cheap = self._suffix_weight(table)
            cross = np.where(cheap < INF, cheap + self._crossing_extra(table, channels, above),
                             INF)
            last = table.num_layers - 1
            every, crossed = cheap[:, last].copy(), cross[:, last].copy()  # h_1, g_1
            bounds = {1: int(crossed[0])}
            for num_chunks in range(2, table.num_layers + 1):
                every_after = np.append(every[1:], INF)  # h_{k-1}(l + 1), by l
                crossed_after = np.append(crossed[1:], INF)
                crossed = np.minimum(np.maximum(cross, every_after[None, :]),
                                     np.maximum(cheap, crossed_after[None, :])).min(axis=1)
                every = np.maximum(cheap, every_after[None, :]).min(axis=1)
                bounds[num_chunks] = int(crossed[0])
            table.cache[key] = bounds
        return table.cache[key]

    def _tp_classes(self, config: IntraConfig, num_stages: int, dp: int) -> frozenset | None:
        """Where the TP groups lie in the distinct layouts of (c, S, d) the search visits
        (:meth:`_layouts`): "inside" for a layout with TP stride 1 and t dividing G_0 (its
        ranks j are the innermost digit and every other stride and the spare-first offset
        are multiples of t, so a TP group is t consecutive positions from a multiple of t,
        inside one block of G_0 positions: one node, quality t; a node-tail layout, v3c,
        places rank j at j + a·s from a run or tail start that is a multiple of a inside
        whole nodes, gathered ends, v3d, at j + a·i for an integer i, so the same holds,
        tests/test_dp_node_bounds.py), "crossing" for one of
        :func:`~nest_cp.dp.geometry.tp_groups_leave_nodes` (quality 1); None when some
        layout is neither (or t = 1, e > 1, c > 1, a graph).

        Kept per (:meth:`_layouts_key`, S, min(d, M)), M = max(G_0, 2): the layouts
        visited are fixed by the first, and a layout's class reads only its TP stride σ_T,
        as σ_T >= G_0 and σ_T = 1.  σ_T is the product of the radices of the dimensions
        before TP in its order (:func:`~nest_cp.dp.geometry.layout_strides`): t, e, S and
        the replica's, the block k in effect (fixed by the blocks dividing d, in the key)
        or else d.  So d enters σ_T = d·R only as a factor, R >= 1 an integer; for
        d >= M both d·R and M·R are at least M >= G_0 and at least 2 (neither is 1), so
        the class is the same with d replaced by M; for d < M nothing changes.  At 10^5
        devices thousands of d share one (c, S)."""
        return _classes_of_kinds(self._tp_kinds(config, num_stages, dp))

    def _tp_kinds(self, config: IntraConfig, num_stages: int, dp: int) -> frozenset | None:
        """Where the TP groups lie in the distinct layouts of (c, S, d) the search visits,
        one kind per layout: "inside" (:meth:`_tp_classes`), 1 (every TP group has each
        member in its own node), or a pair (m, r) when every TP group of the layout leaves
        its node with at most m members in any node, so that its quality
        (:mod:`nest_cp.dp.node_bounds`: the fewest members in a node it touches) is at most
        m, and no node holds more than r members of any of its sync groups; None when some
        layout is none of these (or t = 1, e > 1, c > 1, a graph).

        m = 1 for the layouts of :func:`~nest_cp.dp.geometry.tp_groups_leave_nodes` (σ_T >=
        G_0: "crossing").  A layout whose positions are its order's mixed-radix ones (no
        node tail or gathered ends in effect, :meth:`RankLayout.arrayed`) places the t
        ranks of a TP group at o + b + i·σ_T, i < t (the spare-first offset o a multiple
        of G_0, b the other digits' part): with 1 < σ_T < G_0 and (t − 1)·σ_T >= G_0 the
        group spans more than G_0 consecutive positions, so it touches two blocks of G_0
        at least (tier-0 domains: the argument of ``tp_groups_leave_nodes``), and a block
        of G_0 consecutive positions holds at most ⌈G_0 / σ_T⌉ terms of the progression:
        m = min(⌈G_0 / σ_T⌉, t // 2) (a group in two nodes or more has at most t // 2 in
        the one it has fewest in).  With e = c = 1 a sync group (and a ZeRO-3 gather group)
        is the d replicas of one rank (s, j): its members' positions differ in the replica
        digits only, so by at least σ_R, the least replica stride (:func:`layout_strides`,
        the inner one under a replica block: the outer's weight is a multiple of it).  Two
        mixed-radix positions whose lowest differing digit has weight w differ by a
        non-zero multiple of w, and a block of G_0 consecutive positions holds at most
        ⌈G_0 / σ_R⌉ of the members: r = ⌈G_0 / σ_R⌉.  Kept per
        (:meth:`_layouts_key`, S, min(d, M)) by the argument of :meth:`_tp_classes`
        (σ_T >= G_0 for d >= M either way; σ_R is a product of the radices t, e and S
        before the replica digit, so it does not depend on d)."""
        clamp = max(self.network.node_size, 2) if self.network.is_hierarchical else dp
        key = (self._layouts_key(config, num_stages, dp), num_stages, min(dp, clamp))
        if key not in self._classes:
            node, tp = self.network.node_size, config.tp
            kinds: set | None = set()
            if tp == 1 or config.ep > 1 or config.cp > 1 or not self.network.is_hierarchical:
                kinds = None
            for _, layout in self._layouts(config, num_stages, dp) if kinds is not None \
                    else ():
                stride = layout_strides(layout, config, num_stages, dp)[Dim.TP]
                if tp_groups_leave_nodes(layout, config, num_stages, dp, node):
                    kinds.add(1)
                elif node % tp == 0 and stride == 1:
                    kinds.add("inside")
                elif not layout.arrayed(config, num_stages, dp) and (tp - 1) * stride >= node:
                    replica = layout_strides(layout, config, num_stages, dp)[Dim.REPLICA]
                    kinds.add((min(-(-node // stride), tp // 2), -(-node // replica)))
                else:
                    kinds = None
                    break
            self._classes[key] = None if kinds is None else frozenset(kinds)
        return self._classes[key]

    def _met_qualities(self, config: IntraConfig, num_stages: int,
                       dp: int) -> tuple[tuple[int, int], ...]:
        """The pairs (h, c) of :meth:`_tp_qualities` (t) that stand for a least quality h_s
        a stage may have on the layouts the search visits at (c, S, d) (the structured
        space, :meth:`_tp_kinds`): h_s = t on an "inside" layout, h_s <= m on a layout of
        kind m (each of the stage's TP groups has quality <= m < t).  A pair (h, c) stands
        for the qualities h' of :func:`tp_qualities` with ⌊G_0 / h'⌋ = c (h is the largest
        of them, :meth:`_tp_qualities`), so it is kept where one of those may occur.  Every
        pair where some layout's kind is unknown, or where none is kept (no layout: the
        bounds then hold for every placement)."""
        qualities = self._tp_qualities(config.tp)
        kinds = self._tp_kinds(config, num_stages, dp) if qualities else None
        return self._met_of_kinds(config, kinds)

    def _met_of_kinds(self, config: IntraConfig, kinds: frozenset | None
                      ) -> tuple[tuple[int, int], ...]:
        """:meth:`_met_qualities` of layouts of these TP kinds (:meth:`_tp_kinds`), kept per
        (t, kinds)."""
        qualities = self._tp_qualities(config.tp)
        if kinds is None or not qualities:
            return qualities
        if (config.tp, kinds) not in self._met:
            most = max((kind if kind == 1 else kind[0] for kind in kinds if kind != "inside"),
                       default=0)

            def occurs(quality: int) -> bool:
                return quality == config.tp and "inside" in kinds or quality < config.tp \
                    and quality <= most

            met = tuple((quality, cap) for quality, cap in qualities if any(
                occurs(raw) for raw in tp_qualities(self.network, config.tp)
                if node_cap(self.network, raw) == cap))
            self._met[config.tp, kinds] = met or qualities
        return self._met[config.tp, kinds]

    def _met_rows(self, config: IntraConfig, num_stages: int, dps: np.ndarray) -> np.ndarray:
        """:meth:`_met_qualities` (c, S, d) for every d of ``dps``: per pair of
        :meth:`_tp_qualities` (rows) and d (columns), whether it is met; kept per (c, S)
        over d (the microbatch sizes, v and z of one (c, S) share them)."""
        qualities = self._tp_qualities(config.tp)
        codes = self._kind_codes(config, num_stages, dps) if qualities else \
            np.zeros(len(dps), dtype=np.int64)
        bits = np.array([sum(1 << bit for bit, pair in enumerate(qualities)
                             if pair in self._met_of_kinds(config, kinds))
                         for kinds in self._kinds_seen] or [0], dtype=np.int64)
        return (bits[codes][None, :] >> np.arange(len(qualities))[:, None]) & 1 == 1

    def _layout_class_bound(self, shape: Shape, chunk_bound: int) -> int:
        """A lower bound on T over the plans of the shape in the structured space (the
        layouts the search visits, :meth:`_layouts`), from where their TP groups lie
        (:meth:`_tp_kinds`); 0 when some layout's TP groups may lie elsewhere.

        The DP is exact over its structured space, so a bound needs to hold for those
        plans only.  Each of them uses one visited layout, so it costs at least its
        layout's kind term, and the least over the kinds met bounds them all:

        - "inside": every TP group in one node, least quality h = t, so :meth:`_shape_bound`'s
          h = t term, rounds·max(τ_lb, τ_t, gathers_c) + sync_c with c = ⌊G_0 / t⌋ (Fact 1
          of :mod:`nest_cp.dp.node_bounds`; τ_t of :meth:`_off_node_chunk_bound`, whose
          premise this is; the other h of that case split cannot occur);
        - 1 ("crossing"): :meth:`_all_crossing_bound`;
        - (m, r): every stage's least quality h_s is at most m (< t), so its chunks cost at
          least their crossing times at h_s (Fact 2, as in :meth:`_shape_bound`) and
          max_k τ_k >= τ_m, the least of :meth:`_crossing_chunk_bound` over the qualities
          h <= m of :func:`tp_qualities`; no node holds more than r members of a sync or
          ZeRO-3 gather group, so each runs on :func:`capped_group_paths` (g, r) or a
          slower path and every step of :meth:`_gather_bound` and
          :meth:`_fresh_sync_bound` holds there: rounds·max(τ_lb, τ_m, gathers_r) + sync_r
          (τ_m of :meth:`_kind_tau`).

        Kept per (layer table, S, d, v, z)."""
        table = shape.table
        key = (id(table), shape.num_stages, shape.dp, shape.virtual, shape.zero)
        found = self._class_bounds.get(key)
        if found is not None and found[0] is table:
            return found[1]
        kinds = self._tp_kinds(table.config, shape.num_stages, shape.dp)
        if not kinds:
            return 0
        bound = min(self._kind_term(shape, chunk_bound, kind) for kind in kinds)
        if len(self._class_bounds) >= STAGEWISE_KEPT:
            self._class_bounds.clear()
        self._class_bounds[key] = (table, bound)
        return bound

    def _kind_term(self, shape: Shape, chunk_bound: int, kind) -> int:
        """The term of :meth:`_layout_class_bound` of one kind of :meth:`_tp_kinds`, a lower
        bound on T over the plans of the shape on a layout of that kind."""
        table = shape.table
        if kind == 1:
            return self._all_crossing_bound(shape)
        if kind == "inside":
            cap = node_cap(self.network, table.config.tp)
            tau = self._off_node_chunk_bound(table, shape.num_chunks)
        else:
            quality, cap = kind
            tau = self._kind_tau(table, shape.num_stages, shape.num_chunks, quality)
        return min(INF, shape.rounds * max(chunk_bound, tau, self._gather_bound(shape, cap))
                   + self._sync_bound(shape, cap))

    def _kind_tau(self, table: LayerTable, num_stages: int, num_chunks: int,
                  quality: int) -> int:
        """τ_m of :meth:`_layout_class_bound` (m = ``quality``): the least over the
        qualities h <= m, h < t, of :func:`tp_qualities` of :meth:`_crossing_chunk_bound`
        (h); 0 where there is none (no claim)."""
        return min((self._crossing_chunk_bound(table, num_chunks, raw, num_stages)
                    for raw in tp_qualities(self.network, table.config.tp)
                    if raw <= quality and raw < table.config.tp), default=0)

    def _all_crossing_bound(self, shape: Shape) -> int:
        """A lower bound on T over the plans of the shape whose every TP group has each of
        its members in its own node (quality 1: the layouts of
        :func:`~nest_cp.dp.geometry.tp_groups_leave_nodes`), any split and recompute:

            rounds·max(τ_×, gathers) + sync,

        τ_× the least over splits into K = S·v chunks of the largest chunk weight
        cheapest(k) + crossing(k) (:meth:`_cheapest_times`, :meth:`_crossing_extra` with
        h = 1).  Every chunk runs on the replicas of its stage, each of whose TP groups has
        quality 1, so by Fact 2 (:mod:`nest_cp.dp.node_bounds`) every TP collective of the
        chunk is priced on one of :func:`crossing_tp_paths` (t, 1) or a slower path and
        never hidden (cost model §5 e): the chunk's τ is at least its compute, its TP
        collectives on the cheapest crossing path, its EP collectives and receives on their
        cheapest paths (the terms of :meth:`_cheapest_times`; reruns, gathers dropped,
        >= 0), which is at least cheapest(k) + crossing(k) (per layer that sum holds the
        larger of the cheapest crossing TP price and the cheapest TP price over every path,
        each at most the TP price paid).  So max_k τ_k >= τ_× for the plan's own split, and
        >= the ZeRO-3 gather bound (:meth:`_gather_bound`); the sync is at least
        :meth:`_sync_bound` (every placement).  T = rounds·max_k τ_k + max_s exposed_s.
        0 (no pruning) when no tier above the node holds t devices."""
        crossing = self._all_crossing_chunk_bound(shape.table, shape.num_chunks)
        if crossing == 0:
            return 0
        return shape.rounds * max(crossing, self._gather_bound(shape)) + self._sync_bound(shape)

    def _all_crossing_chunk_bound(self, table: LayerTable, num_chunks: int) -> int:
        """τ_× of :meth:`_all_crossing_bound` for K = ``num_chunks``; 0 when no tier above
        the node holds t devices.  Kept per (layer table, K)."""
        key = ("all crossing", num_chunks)
        if key not in table.cache:
            if not crossing_tp_paths(self.network, table.config.tp, 1):
                table.cache[key] = 0
            else:
                cheapest = self._cheapest_times(table, num_chunks)
                extra = windows(self._crossing_extra(table, 1), num_chunks)
                width = table.num_layers - num_chunks + 1
                ordered = np.triu(np.ones((width, width), dtype=bool))
                table.cache[key] = least_max(np.where(ordered, cheapest + extra, INF))
        return table.cache[key]

    def _domain_bound(self, shape: Shape, chunk_bound: int, key: tuple[int, ...],
                      exact: bool = False) -> int:
        """A lower bound on T over every plan of the shape (any split, recompute and
        injective placement) from the tiers above a domain that cannot hold the plan: the
        largest over the tiers P = 1 .. (the top tier excluded) above which the bandwidth
        per device falls (:meth:`_domain_tiers`) of :meth:`_domain_bound_at`; 0 (no claim)
        on graphs or with e > 1 or c > 1.  ``key`` (the shape's, a prefix of its plans'):
        the costlier parts are priced only where they may reach the incumbent (and, unless
        ``exact``, only as far as it)."""
        config = shape.table.config
        if config.ep > 1 or config.cp > 1:
            return 0
        return max((max(self._replica_bound_at(shape, chunk_bound, tier),
                        self._domain_bound_at(shape, chunk_bound, tier, key, exact))
                    for tier in self._domain_tiers()), default=0)

    def _replica_bound_at(self, shape: Shape, chunk_bound: int, tier: int) -> int:
        """With v = 1 and e = c = 1, a lower bound on T over every plan of the shape (any
        split, recompute and injective placement) when the tier-P domains (P = ``tier``)
        cannot hold every replica whole; 0 otherwise (no claim).

        Call replica r *whole* if its a·S ranks (every stage's) lie in one tier-P domain.
        Whole replicas are disjoint sets of a·S devices, so at most W_rep of them
        (:meth:`_whole_capacity` of a·S).  If d > W_rep, some replica r is not whole.
        Its ranks are joined by its TP groups (stage s's t ranks of replica r) and its
        pipeline pairs (rank j of stages s and s + 1), which connect them all, so one of
        these leaves a domain.  (A) A pipeline pair of stages s and s + 1 leaves: it runs on
        a tier above P (cost model §3: a transfer on its pair's path, no channels), so
        replica r of stage s + 1 receives its activation, and replica r of stage s its
        gradient, at least at the cheapest price above P (:meth:`_receives_from` P + 1).
        (B) No pipeline pair of r leaves: then each chain of ranks j (one per stage) lies in
        one domain D_j, and a TP group of r that leaves has ranks j, j' with D_j ≠ D_j', so
        every stage's TP group of r leaves, and every stage's chunk costs at least its
        cheapest time plus :meth:`_crossing_extra` (k = min(t // 2, G_0), P) (argument (3)
        of :meth:`_domain_bound_at`; :meth:`_leaving_time`).  τ_s, its slowest replica's
        time, is at least that replica's cheapest time (or the crossing one) plus both its
        receives (each at least its cheapest price), so max_s τ_s >= M, the lesser of the
        least over contiguous splits into S stages and boundaries of the largest such stage
        time with that boundary's receives above P (A), and the least over splits of the
        largest crossing stage time (B) (:meth:`_replica_event_min_max`, kept per (layer
        table, S, P)).  T = R·max_s τ_s + max_s exposed_s >= R·max(τ_lb, gathers, M) +
        sync, with the placement-free :meth:`_gather_bound` and :meth:`_sync_bound`."""
        table, num_stages = shape.table, shape.num_stages
        least = self._replica_event(table, num_stages, shape.virtual, tier)
        if least >= INF or \
                shape.dp <= self._whole_capacity(table.config.devices * num_stages, tier):
            return 0
        tau = max(chunk_bound, self._gather_bound(shape), least)
        return shape.rounds * tau + self._sync_bound(shape)

    def _vector_replica_bound(self, table: LayerTable, num_stages: int, virtual: int,
                              dps: np.ndarray, rounds: np.ndarray, chunk_bound: int,
                              tier: int) -> np.ndarray:
        """Per d of ``dps``, :meth:`_replica_bound_at`'s R·max(τ_lb, M) (its gathers and
        sync dropped, each at least 0) where d > W_rep, 0 elsewhere (no claim): a lower
        bound on T over every plan of (c, b, S, d, v = 1)."""
        least = self._replica_event(table, num_stages, virtual, tier)
        if least >= INF:
            return np.zeros(len(dps), dtype=np.int64)
        capacity = self._whole_capacity(table.config.devices * num_stages, tier)
        return np.where(dps > capacity, rounds * max(chunk_bound, least), 0)

    def _replica_event(self, table: LayerTable, num_stages: int, virtual: int,
                       tier: int) -> int:
        """:meth:`_replica_event_min_max`, kept per (layer table, S, P); INF where the
        argument of :meth:`_replica_bound_at` is not made (v > 1, e > 1 or c > 1)."""
        config = table.config
        if virtual > 1 or config.ep > 1 or config.cp > 1:
            return INF
        key = ("replica event", num_stages, tier)
        if key not in table.cache:
            table.cache[key] = self._replica_event_min_max(table, num_stages, tier)
        return table.cache[key]

    def _replica_event_min_max(self, table: LayerTable, num_stages: int, tier: int) -> int:
        """M of :meth:`_replica_bound_at`: the lesser of (A) the least over splits into S
        stages and boundaries of the largest stage time (cheapest time plus both receives
        at their cheapest prices) where that boundary's two stages pay their receive across
        it above tier P (the stage before its gradient, the one after its activation; INF
        for S = 1), and (B) the least over splits of the largest crossing stage time
        (:meth:`_leaving_time` plus both cheapest receives; INF where no TP group can
        leave).  (A) is a DP from the last stage over (stage s, its first layer, x): x = 0
        the far boundary still to come, 1 at s's left boundary (its activation above P), 2
        passed; V(S, 2, L) = 0, every other end INF:

            V(s, 0, f) = min over l of min(max(X_00, V(s + 1, 0)), max(X_01, V(s + 1, 1)))
            V(s, 1, f) = min over l of max(X_10, V(s + 1, 2))
            V(s, 2, f) = min over l of max(X_00, V(s + 1, 2))

        (X_io the stage time of layers f..l with its activation above P if i = 1 and its
        gradient above P if o = 1; a second far boundary only raises stage times, so one is
        all the least needs) and (A) = V(0, 0, 0)."""
        base = self._cheapest_ranges(table)[0]
        (activation, far_activation), (gradient, far_gradient) = \
            self._stage_receives(table, tier)
        unordered = np.where(np.triu(np.ones(base.shape, dtype=bool)), 0, INF)
        near = np.minimum(base + unordered + activation[:, None] + gradient[None, :], INF)
        crossing = INF
        leaving = self._leaving_time(table, tier)
        if leaving is not None:
            crossing = least_max(windows(np.minimum(
                leaving + unordered + activation[:, None] + gradient[None, :], INF),
                num_stages))
        if num_stages == 1:
            return crossing
        out_far = np.minimum(base + unordered + activation[:, None] + far_gradient[None, :],
                             INF)
        in_far = np.minimum(base + unordered + far_activation[:, None] + gradient[None, :], INF)
        width = table.num_layers - num_stages + 1
        after = np.full((3, width), INF, dtype=np.int64)  # V(S, x, ·)
        after[2, width - 1] = 0
        for stage in range(num_stages - 1, -1, -1):
            window = slice(stage, stage + width)
            near_0, out_far_1, in_far_2, near_2 = (
                np.maximum(weight[window, window], after[state][None, :]).min(axis=1)
                for weight, state in ((near, 0), (out_far, 1), (in_far, 2), (near, 2)))
            after = np.stack((np.minimum(near_0, out_far_1), in_far_2, near_2))
        return min(crossing, int(after[0, 0]))

    def _domain_tiers(self) -> tuple[int, ...]:
        """The tiers P >= 1, below the top one, whose next tier has less bandwidth per
        device (the others' domains are no cheaper to stay in); () on graphs."""
        if self._domain_tier_list is None:
            network = self.network
            tiers = () if not network.is_hierarchical else tuple(
                tier for tier in range(1, network.num_tiers - 1)
                if network.tier_path(tier + 1).bandwidth_Bps
                < network.tier_path(tier).bandwidth_Bps)
            self._domain_tier_list = tiers
        return self._domain_tier_list

    def _domain_bound_at(self, shape: Shape, chunk_bound: int, tier: int,
                         key: tuple[int, ...], exact: bool = False) -> int:
        """With e = c = 1, a lower bound on T over every plan of the shape (any split,
        recompute and injective placement; see (4) for the layouts) from the tier-P domains
        (P = ``tier`` >= 1, G_P devices each: e.g. the pods of 3,072 GPUs of Llama 3's RoCE
        network, above which bandwidth drops 7-fold), when a·S·d > G_P (the plan cannot lie
        in one domain) and, for v > 1, 2·a·d > G_P (no domain holds two stages); 0
        otherwise.
        R = v·m + S − 1, τ_lb = ``chunk_bound``, and gathers and sync the placement-free
        bounds of :meth:`_gather_bound` and :meth:`_sync_bound`, so T >= R·max(τ_lb,
        gathers) + sync always.

        Call stage s *whole* if its a·d ranks lie in one tier-P domain.

        (1) A stage that is not whole has its TP group of some replica, or its group of the
        d ranks j (one per replica) for some j, leaving its tier-P domain: otherwise the TP
        group of replica 0 lies in one domain D, every group of ranks j holds replica 0's
        rank j, so lies in D, and every replica's TP group holds one of those ranks, so
        lies in D.  (With e = c = 1 the group of ranks j is the stage's dense and expert
        sync group and its ZeRO-3 gather group; with t = 1 or d = 1 one kind is absent and
        the argument holds without it.)

        (2) If stage s is whole in D, every stage s' ≠ s has a rank outside D (D's other
        G_P − a·d < a·d devices cannot hold s', the placement being injective), so the
        pipeline pairs between s and s' (rank j of replica r to rank j of replica r, a
        bijection of their ranks) include one that leaves D, which runs on a tier K > P:
        its transfer (§3, no channels) costs at least the least over those tiers.  If
        instead D may hold q = ⌊G_P / (a·d)⌋ >= 2 stages, every stage with a rank outside D
        (whole elsewhere or not whole) is joined to s by such a pair, and a run of
        neighbouring stages all whole in D has at most q of them
        (:meth:`_domain_stagewise`).

        (3) A TP group that leaves its domain spans a tier K > P and touches two nodes, so
        has at most k = min(t // 2, G_0) members in the node it has fewest in: its
        collectives run (§3.2 f, §5 a) on K with at most k channels, no faster than on
        :func:`crossing_tp_paths` (t, k, P), and are never hidden (§5 e): every chunk of its
        stage costs at least its cheapest time (:meth:`_cheapest_times`) plus
        :meth:`_crossing_extra` (k, P) of its layers (the argument of
        :meth:`_crossing_chunk_bound`).  A group of ranks j that leaves its domain (d >= 2)
        spans a tier K > P, so runs on one of :func:`capped_group_paths` (d, G_0, P) or a
        slower path; the stage's reduce-scatter (all-reduce) and weight gather cost at least
        their price on it (§5 c: per kind, the slowest group's; the group carries both
        kinds), so exposed_s is at least :meth:`_capped_stage_floors` (G_0, above P) of
        s's layers, x_P (max(0, x − y) does not fall as x grows).  If the least quality h
        of s's TP groups is known (:mod:`nest_cp.dp.node_bounds`), the group has at most
        c = ⌊G_0 / h⌋ members in a node (Fact 1, stage by stage), so the same holds on
        :func:`capped_group_paths` (d, c, P): x_P,c; under ZeRO-3 the gathers of s's chunks
        (the slowest gather group's, the leaving group one of them, §3.2 d) are at least
        gathers_P,c of the same floors; and with h < t s's TP collectives cost their
        crossing extra crossing_h (Fact 2, as in :meth:`_stagewise_bound`).

        (4) h ranges over :func:`tp_qualities`.  On the layouts the search visits it ranges
        over those of :meth:`_met_qualities` (e.g. h = t alone where every layout has its
        TP groups inside nodes, :meth:`_tp_classes`), and with no crossing layout no TP
        group leaves its node, so none leaves its domain; the DP is exact over those
        plans, so a bound on them suffices (:meth:`_layout_class_bound`), and the cases
        below keep only those.

        The bound is the largest of the valid ones below (each a bound on every plan):

        - A: if some TP group leaves its domain, max_k τ_k >= :meth:`_crossing_chunk_bound`
          (k, S, above P) = τ_A by (3), so T >= R·max(τ_lb, gathers, τ_A) + sync.  If none
          does and a·d > G_P (no stage can be whole), every stage has a group of ranks j
          leaving its domain (1); with h the least quality of the plan's TP groups, every
          such group runs on :func:`capped_group_paths` (d, c, P) or slower (3), and every
          step of :meth:`_fresh_sync_bound` holds with those paths (each stage pays each
          phase at least on one of its groups, here a leaving one): sync_P,c; with
          :meth:`_shape_bound`'s case split on h (τ_h, gathers_c), T >= the least over h of
          R·max(τ_lb, gathers_c, τ_h) + sync_P,c.  So T >= the lesser of the two.
        - v = 1, stage by stage: T = R·max_s τ_s + max_s exposed_s >= R·τ_s + exposed_s
          for every s.  For s on layers f..l: whole, τ_s >= its cheapest time with the
          receives it has (activation unless s = 0, gradient unless s = S − 1) on the tiers
          above P, by (2) (S >= 2: a·S·d > G_P >= a·d), so R·τ_s >= R·X(f, l)
          (:meth:`_cheapest_times` from tier P + 1), or with q >= 2 those of its receives
          from neighbours not whole in its domain; not whole (d >= 2 or t >= 2), R·τ_s +
          exposed_s >= R·cheapest(f, l) + the least of R·crossing_P(f, l) (a TP group
          leaves, (3), :meth:`_crossing_extra` (k, P)) and, over h, R·[h < t]·crossing_h(f,
          l) + R·gathers_P,c(f, l) + x_P,c(f, l) (a group of ranks j leaves, (1) and (3));
          a term for an absent kind of group left out.  So T >= the min-max over
          contiguous splits of H(f, l), the lesser of the two weights where both cases may
          occur (whole needs a·d <= G_P; not whole needs a TP group or d >= 2), whole
          stages in runs of at most q per domain: the stage-state DP of
          :meth:`_domain_stagewise`.
        - v > 1 with a·d <= G_P (and q = 1: 0 otherwise): every stage whole gives
          max_k τ_k >= τ_P (every chunk boundary joins two stages, (2)),
          :meth:`_chunk_bound_from` (K, P + 1); else a stage s is not whole: a TP group
          leaves (A's τ_A) or a group of ranks j does,
          and exposed_s >= x_P(U_s) for its layers U_s, which on a workload of blocks have
          the totals (all x_P reads) of a contiguous range of as many layers, at least v
          (:meth:`_interleaved_stagewise_bounds`), so exposed_s >= E_P, the least x_P over
          such ranges (0 on other workloads).  T >= the least of R·max(τ_lb, gathers, τ_P)
          + sync, R·max(τ_lb, gathers, τ_A) + sync and R·max(τ_lb, gathers) + max(sync,
          E_P).

        The cached parts are kept per (layer table, K, P); x_P is priced per shape.  Unless
        ``exact``, the stage-by-stage bound (v = 1) is only decided against the incumbent:
        the least t that cannot beat it with ``key`` if it reaches t, else a lower bound on
        it below t (:meth:`_domain_stagewise` with ``threshold``): the bound is only ever
        compared with the incumbent, and the incumbent only improves."""
        table, num_stages, dp = shape.table, shape.num_stages, shape.dp
        network, config = self.network, table.config
        domain = network.cluster.network.domain_sizes()[tier]
        devices = config.devices * dp  # a stage's
        slots = domain // devices  # q: the whole stages a domain may hold
        if devices * num_stages <= domain or (slots > 1 and shape.virtual > 1):
            return 0
        rounds = shape.rounds
        tau = max(chunk_bound, self._gather_bound(shape))
        sync = self._sync_bound(shape)
        may_be_whole = devices <= domain
        channels = min(config.tp // 2, network.node_size)
        tp_term = rounds * max(tau, self._crossing_chunk_bound(
            table, shape.num_chunks, channels, num_stages, above=tier)) + sync \
            if config.tp > 1 else INF
        # (h, c): the least quality of the TP groups (of the plan, or of a stage) and the
        # cap it puts on the members of a group of ranks j in a node (node_bounds, Fact 1)
        qualities = self._met_qualities(config, num_stages, dp) or \
            ((config.tp, network.node_size),)
        classes = self._tp_classes(config, num_stages, dp) if config.tp > 1 else None
        if classes and "crossing" not in classes:  # no TP group leaves its node, nor domain
            tp_term = INF
        bound = rounds * tau + sync
        if not may_be_whole and dp > 1:
            least = INF  # every stage has a group of ranks j leaving its domain
            for quality, cap in qualities:
                crossing = self._off_node_chunk_bound(table, shape.num_chunks) \
                    if quality == config.tp else self._crossing_chunk_bound(
                        table, shape.num_chunks, quality, num_stages)
                least = min(least, rounds * max(tau, self._gather_bound(shape, cap), crossing)
                            + self._fresh_sync_bound(shape, lambda kind, size, cap=cap:
                                                     self._group_paths(size, cap, tier)))
            bound = max(bound, min(tp_term, least))
        if not may_be_whole:  # (the stage-by-stage bound, without whole stages, is left out)
            return bound
        whole = rounds * max(tau, self._chunk_bound_from(table, shape.num_chunks, tier + 1)) \
            + sync
        # the rest is at most R·τ_P + sync (v = 1: the min-max of the weights of whole stages
        # each joined to none, every boundary leaving, one of the stage-by-stage bound's
        # assignments, when the domains may hold every stage whole: S <= W), and for v > 1
        # the TP term: where that may beat the incumbent it would not prune the shape, so it
        # is left out
        capacity = self._whole_capacity(devices, tier)
        if self.best.objective is None or (shape.virtual > 1 or num_stages <= capacity) \
                and self.best.may_beat(max(bound, whole if shape.virtual == 1
                                           else min(whole, tp_term)), key):
            return bound
        if shape.virtual == 1:
            objective = self.best.objective  # (not None: no bound may beat None)
            threshold = None if exact else objective + self.best.may_beat(objective, key)
            return max(bound, self._domain_stagewise(
                shape, tier, qualities, slots,
                classes == {"inside"} and config.tp == network.node_size, threshold))
        exposed = None if dp == 1 else \
            self._capped_stage_floors(shape, network.node_size, above=tier)[1]
        least = 0
        if exposed is not None and block_structure(table) is not None:
            layers = np.arange(table.num_layers)
            least = int(exposed[layers[None, :] - layers[:, None] + 1 >= shape.virtual].min())
        split = INF if exposed is None else rounds * tau + max(sync, least)
        return max(bound, min(whole, tp_term, split))

    def _domain_stagewise(self, shape: Shape, tier: int, qualities: tuple[tuple[int, int], ...],
                          slots: int, off_node: bool, threshold: int | None = None) -> int:
        """:meth:`_domain_bound_at`'s stage-by-stage bound (v = 1) for a shape whose stages
        may be whole (a·d <= G_P), q = ``slots`` = ⌊G_P / (a·d)⌋ >= 1 of them to a domain,
        the plan in no one domain (a·S·d > G_P, so S > q): the least over contiguous splits
        and over the assignments below of the largest stage weight.

        A stage not whole weighs N(f, l) = R·cheapest(f, l) + the least of
        R·crossing_P(f, l) (a TP group leaves the domain) and, over the least quality h of
        the stage's TP groups, R·[h < t]·crossing_h(f, l) + R·gathers_P,c(f, l) +
        x_P,c(f, l) (a group of ranks j leaves it, with at most c = ⌊G_0 / h⌋ members in a
        node: Fact 1 of :mod:`nest_cp.dp.node_bounds` holds stage by stage, and with h < t
        the stage's TP collectives cost their crossing extra, Fact 2, as in
        :meth:`_stagewise_bound`); INF where no group can leave (t = d = 1).  A whole stage
        weighs R·X_io(f, l), its cheapest time with its activation receive (s > 0) on the
        tiers above P if i = 1 (on its cheapest path else) and its gradient receive
        (s < S − 1) there if o = 1 (:meth:`_cheapest_times`' terms).

        Call the boundary between stages s and s + 1 *joined* if both are whole in the same
        domain, *leaving* otherwise.  (a) A whole stage next to a leaving boundary pays its
        receive across it above P: if the neighbour is whole in another domain every pair
        between them leaves the stage's domain; if it is not whole it has a rank outside
        the stage's domain D, and the pairs between the two stages are a bijection of their
        ranks, so one pair joins that rank to one in D (argument (2) of
        :meth:`_domain_bound_at`; τ_s is its slowest replica's).  (b) A run of stages whole
        and joined lies in one domain, so has at most q stages (the placement is
        injective).  (c) A domain D of |D| devices holds at most ⌊|D| / (a·d)⌋ whole
        stages (disjoint sets of a·d devices), so a plan has at most W whole stages: the sum
        over the tier-P domains, blocks of G_P consecutive ids with a last one of N mod G_P
        devices where that is not 0 (:meth:`_whole_capacity`).  Every plan thus has an
        assignment (each stage whole or not, each boundary between whole stages joined or
        leaving, runs of at most q, at most W whole stages) whose weights are at most its
        R·τ_s + exposed_s, so T >= its largest weight.

        The least over splits and assignments is a DP from the last stage over (stage s,
        its first layer, r = the whole stages joined to s on its left, 0 .. q − 1):

            V(s, r, f) = min over l of
                r >= 1: min(max(R·X_01, V(s + 1, 0)), max(R·X_00, V(s + 1, r + 1)) if r + 1 < q)
                r = 0:  min(max(min(N, R·X_11), V(s + 1, 0)), max(R·X_10, V(s + 1, 1)) if q > 1)

        with the layers l + 1 .. in V(s + 1, ·) (the receives absent at the ends are 0:
        X's i is moot for s = 0, o for s = S − 1) and the bound V(0, 0, 0).  q = 1 is the
        old ``alone`` case (every whole stage pays both receives above P); q = 2 is at
        least the old ``shared`` one (one of a middle stage's receives).  Where S > W (c)
        binds: the min-max is then over the assignments with at most W whole stages
        (:func:`_domain_min_max` with ``capacity``; elsewhere every assignment has at most
        S <= W of them).  With ``off_node``
        (every TP group fills its node, t = G_0: a node holds one stage replica, so every
        pipeline pair joins two nodes) every receive is on the tiers above the node
        (:meth:`_off_node_chunk_bound`'s argument).

        With ``threshold`` t, only whether the bound reaches t is decided
        (:func:`_domain_split_below`, a forward pass of the same states over 0/1 sets, cheaper
        than the min-max): t if it does, else the largest value it is known to reach (0, or
        a smaller threshold it reached before) — a lower bound either way.  What is known is
        kept per shape as (lower, upper), lower <= bound < upper, and a call it settles (the
        threshold at most lower, or at least upper) prices nothing."""
        table, num_stages = shape.table, shape.num_stages
        # asked again by the outer's floor and search after its deepening: kept per shape
        key = ("domain stagewise", num_stages, shape.dp, shape.zero, tier, qualities, slots,
               off_node)
        lower, upper = table.cache.get(key, (0, UNKNOWN))
        if lower + 1 == upper or threshold is not None and not lower < threshold < upper:
            return lower
        weights = self._domain_weights(shape, tier, qualities, off_node)
        capacity = self._whole_capacity(table.config.devices * shape.dp, tier)
        self.stats.dp_passes += 1
        if threshold is None:
            lower = _domain_min_max(weights, num_stages, slots, capacity)
            upper = lower + 1
        elif _domain_split_below(weights, num_stages, slots, threshold, capacity):
            upper = threshold
        else:
            lower = threshold
        table.cache[key] = lower, upper
        return lower

    def _whole_capacity(self, devices: int, tier: int) -> int:
        """W: how many disjoint sets of ``devices`` (a stage's a·d) the tier-P domains may
        hold, each whole in one, over the cluster's N devices: ⌊N / G_P⌋ domains of G_P
        and, where N mod G_P is not 0, a last one of that many (domains are blocks of
        consecutive ids, :meth:`NetworkModel.tier_of_pairs`)."""
        domain = self.network.cluster.network.domain_sizes()[tier]
        total = self.instance.cluster.num_devices
        return total // domain * (domain // devices) + total % domain // devices

    def _domain_weights(self, shape: Shape, tier: int, qualities: tuple[tuple[int, int], ...],
                        off_node: bool) -> tuple[np.ndarray, ...]:
        """The five L x L weights of :meth:`_domain_stagewise`'s recurrence over a stage's
        layers f..l (INF where f > l): R·X_11 (whole, joined to no stage), R·X_10 (whole,
        joined on the right only), R·X_01 (on the left only), R·X_00 (on both sides) and N
        (not whole; INF where no group can leave)."""
        table, rounds = shape.table, shape.rounds
        config = table.config
        # every weight as an L x L matrix over the stage's layers f..l, read per stage through
        # its window: layer 0 (L − 1) starts (ends) only the first (last) stage, and has no
        # activation (gradient) receive
        # the parts every z of (c, b, S, d) shares (R is the same): the wholes R·X_io, INF
        # where unordered, and the TP terms R·crossing; kept for the last few (table, R)
        found = (id(table), rounds, tier, off_node)
        if found not in self._domain_parts or self._domain_parts[found][0] is not table:
            if len(self._domain_parts) >= DOMAIN_PARTS_KEPT:
                self._domain_parts.clear()
            key = ("domain wholes", tier, off_node)  # X_io per microbatch, kept per table
            if key not in table.cache:
                base = self._cheapest_ranges(table)[0]
                activation, gradient = self._stage_receives(table, tier, off_node)
                table.cache[key] = {(into, out): base + activation[into][:, None]
                                    + gradient[out][None, :]
                                    for into in (0, 1) for out in (0, 1)}
            unordered = self._unordered(table.num_layers, 1)  # (X finite: far below INF)
            wholes = tuple(rounds * table.cache[key][into, out] + unordered
                           for into, out in ((1, 1), (1, 0), (0, 1), (0, 0)))
            crossing = None if config.tp == 1 else rounds * self._crossing_extra(
                table, min(config.tp // 2, self.network.node_size), tier)
            self._domain_parts[found] = (table, wholes, crossing, {})
        _, wholes, penalty, extras = self._domain_parts[found]
        for quality, cap in qualities if shape.dp > 1 else ():
            gathers, split = self._capped_stage_floors(shape, cap, above=tier)
            if gathers is not None:  # ZeRO-3: the chunk's gathers, one group of them on γ
                split = split + rounds * gathers
            if quality < config.tp:
                if quality not in extras:  # per quality h, priced when first asked
                    extras[quality] = rounds * self._crossing_extra(table, quality)
                split = split + extras[quality]
            penalty = split if penalty is None else np.minimum(penalty, split)
        leaving = np.full(wholes[3].shape, INF, dtype=np.int64) if penalty is None else \
            np.minimum(wholes[3] + penalty, INF)
        return (*wholes, leaving)

    def _crossing_extra(self, table: LayerTable, channels: int, above: int = 0) -> np.ndarray:
        """L x L: per layer range, the TP collectives on :func:`crossing_tp_paths` (t, h,
        ``above``) (the cheapest of them per layer, unhidden) minus the TP part of
        :meth:`_cheapest_times` (the cheapest over every path, hiding allowed): what a
        chunk pays beyond its cheapest time when its TP group has quality h < t (and
        leaves its tier-``above`` domain).  Kept in the table's cache (recomputed if the
        cache was cleared)."""
        key = ("crossing", channels, above)
        if key not in table.cache:
            network, config = self.network, table.config
            crossing = np.min([np.diag(table.collective_range((path,), ()))
                               for path in crossing_tp_paths(network, config.tp, channels,
                                                             above)],
                              axis=0)
            options = [np.diag(table.collective_range((path,), ()))
                       for path in fastest_group_paths(network, config.tp)]
            if network.cluster.network.domain_sizes()[0] >= config.tp:
                options.append(np.diag(table.collective_range(
                    (network.tier_path(0),), (), tp_local=True)))
            table.cache[key] = range_sums(np.maximum(crossing - np.min(options, axis=0), 0))
        return table.cache[key]

    def _stagewise_bound(self, shape: Shape) -> int:
        """For v = 1 and t >= 2 on a tiered network, a lower bound on T over every plan of
        the shape in the structured space (any split, recompute and visited layout; with
        no layouts, any injective placement), stage by stage:

            T = rounds·max_s τ_s + max_s exposed_s >= max_s (rounds·τ_s + exposed_s).

        Per stage s, let h_s be the least quality of s's own TP groups
        (:mod:`nest_cp.dp.node_bounds`).  Fact 1 holds stage by stage: a sync or gather
        group of s has its members in distinct TP groups *of s*, each with at least h_s
        members in every node it touches, so no node holds more than c_s = ⌊G_0 / h_s⌋ of
        them.  So, for s holding layers f..l:

        - τ_s >= cheapest(f, l) (the compute and collectives of :meth:`_cheapest_ranges`)
          + its receives (:meth:`_stage_floor`: on their cheapest paths, off the node where
          h_s = t = G_0) +
          [h_s < t] crossing(f, l) (:meth:`_crossing_extra`, Fact 2: the replica with the
          TP group of quality h_s pays its TP collectives on a crossing path) + [z = 3]
          2·(least over :func:`capped_group_paths` (d, c_s) of the all-gather of the
          layers' parameters) (its gathers run over d-groups of s, each on one of those
          paths or a slower one, §3.2 d);
        - exposed_s >= the exposed sync with each phase's slowest-group price replaced by
          the least over :func:`capped_group_paths` (g, c_s) of its price (per kind: dense
          g = d·e, expert g = d): every group of s runs on one of them or a slower path,
          prices never fall on slower paths, and max(0, x − y) does not fall as x grows
          (cost model §5 c, d).

        So rounds·τ_s + exposed_s >= H(f, l) = min over the possible h of those sums (the
        pairs of :meth:`_met_qualities`: the h_s a stage of a visited layout may have), and
        T >= the least over contiguous splits of max_s H(s): the kernel's min-max
        recurrence (:func:`fill_table`) on H.  Kept per (layer table, S, d, z)."""
        table, num_stages = shape.table, shape.num_stages
        key = (id(table), num_stages, shape.dp, shape.zero)
        found = self._stagewise.get(key)
        if found is not None and found[0] is table:
            return found[1]
        config = table.config
        least = None
        for quality, cap in self._met_qualities(config, num_stages, shape.dp):
            time = self._stage_floor(table, quality, 1)
            gathers, exposed = self._capped_stage_floors(shape, cap)
            if gathers is not None:
                time = time + gathers
            total = shape.rounds * time
            total += exposed
            least = total if least is None else np.minimum(least, total, out=least)
        weight = windows(least, num_stages) + self._unordered(table.num_layers, num_stages)
        self.stats.dp_passes += 1
        bound = least_max(weight)
        if len(self._stagewise) >= STAGEWISE_KEPT:
            self._stagewise.clear()
        self._stagewise[key] = (table, bound)
        return bound

    def _stagewise_bounds(self, table: LayerTable, num_stages: int, zero: int,
                          dps: np.ndarray, lows: np.ndarray,
                          threshold: int | None, domain: bool = False,
                          highs: np.ndarray | None = None) -> np.ndarray:
        """For every d of ``dps``, a lower bound on the cost of every plan of (c, b, S, d,
        v = 1, z), each at most :meth:`_stagewise_bound`'s: the same stage weights H(f, l)
        (:meth:`_stage_weights`), so the min-max over contiguous splits of these H is at
        most the exact one.  With S = 1 that
        min-max is H(0, L − 1) itself; with few stages (S·W² <= 8·L²) or no ``threshold``
        the min-max itself (:func:`min_max_values`); otherwise a lower bound on it by
        bisection with :func:`min_max_exceeds` between ``lows`` (valid bounds of the same
        plans) and ``threshold`` (the incumbent's objective): ``threshold`` + 1 where the
        min-max exceeds it, else mid + 1 for the largest mid it was shown to exceed
        (``BISECTIONS`` steps), else ``lows``.  ``STAGEWISE_BLOCK`` stage weights at a
        time.  With ``domain``, on the weights of :meth:`_stage_weights` raised where the
        plan leaves a domain (so possibly above :meth:`_stagewise_bound`).  With ``highs``,
        one bound per span ``dps[i] .. highs[i]`` of d, on every plan of each of them
        (:meth:`_stage_weights`; ``lows`` then bounds them all)."""
        least, inverse = self._stage_weights(table, num_stages, 1, zero, dps, domain, highs)
        num_layers = table.num_layers
        if num_stages == 1:  # one stage holds every layer
            return least[:, inverse[0, num_layers - 1]]
        ranges = np.where(np.triu(np.ones((num_layers, num_layers), dtype=bool)), inverse, -1)
        least = np.concatenate([least, np.full((len(dps), 1), INF, dtype=np.int64)], axis=1)
        bounds = np.empty(len(dps), dtype=np.int64)
        block_size = max(1, STAGEWISE_BLOCK // (num_layers * num_layers))
        for start in range(0, len(dps), block_size):
            self.stats.dp_passes += 1
            weights = least[start:start + block_size][:, ranges]
            width = num_layers - num_stages + 1
            if threshold is None or num_stages * width * width <= 8 * num_layers ** 2:
                bounds[start:start + block_size] = min_max_values(weights, num_stages)
                continue
            superset = superset_minimum(weights)
            high = np.full(len(weights), threshold, dtype=np.int64)
            low = np.minimum(lows[start:start + block_size], high)  # the bound so far
            above = min_max_exceeds(superset, num_stages, high)
            low[above] = threshold + 1
            for _ in range(BISECTIONS):  # min-max > low − 1, and not shown > high
                open_rows = ~above & (low < high)
                if not open_rows.any():
                    break
                middle = (low + high) // 2
                exceeds = min_max_exceeds(superset, num_stages, middle) & open_rows
                low = np.where(exceeds, middle + 1, low)
                high = np.where(open_rows & ~exceeds, middle, high)
            bounds[start:start + block_size] = low
        return bounds

    def _interleaved_stagewise_bounds(self, table: LayerTable, num_stages: int,
                                      virtual: int, zero: int, dps: np.ndarray,
                                      domain: bool = False,
                                      highs: np.ndarray | None = None) -> np.ndarray:
        """For v > 1 and t >= 2 on a tiered network, for every d of ``dps`` a lower bound on
        the cost of every plan of (c, b, S, d, v, z) (any split into K = S·v non-empty
        chunks, recompute and injective placement), stage by stage, on a workload of
        identical blocks between at most one leading and one trailing layer
        (:func:`~nest_cp.dp.interleaved.block_structure`; 0 on any other workload).

        Stage s runs the chunks k ≡ s (mod S) (cost model §3.2 b); with R = v·m + S − 1

            T = R·max_k τ_k + max_s exposed_s >= R·max_{k ∈ s} τ_k + exposed_s   for every s.

        Let U_s be the layers of s's chunks, h_s the least quality of s's own TP groups
        and c_s = ⌊G_0 / h_s⌋ (:mod:`nest_cp.dp.node_bounds`).  Every chunk of s runs on
        s's replicas, so the argument of :meth:`_stagewise_bound` holds chunk by chunk:
        τ_k >= cheapest(k) + [h_s < t]·crossing(k) + [z = 3]·2·AG_c_s(P_k) + receives(k)
        (reruns dropped, >= 0), AG on the path of one fixed group of s, at least the least
        over :func:`capped_group_paths` (d, c_s), and the receives of s's chunks at least
        those :meth:`_stage_floor` counts for U_s (a function of whether s = 0 or S − 1).
        cheapest and crossing are sums over layers (:meth:`_cheapest_ranges`,
        :meth:`_crossing_extra` are range sums), and an
        all-gather form ⌈(a·P + b) / q⌉ (a, b >= 0; 0 at P = 0) is subadditive in P (a sum
        of ceilings is at least the ceiling of the sum, and b counts once at least), so

            max_{k ∈ s} τ_k >= ⌈Σ_{k ∈ s} τ_k / v⌉ >= ⌈(floor_h_s(U_s) + gathers_c_s(U_s)) / v⌉,

        the totals over U_s, floor_h_s with those receives (:meth:`_stage_floor`).
        exposed_s is the stage's sync over all of U_s (cost model §5 c, d; gradients of
        all its chunks, minus their backward and forward), a function of U_s's totals
        bounded as in :meth:`_stagewise_bound`.  So
        R·max_{k ∈ s} τ_k + exposed_s >= H_v(U_s) of :meth:`_stage_weights` (the least
        over h of the bound with h_s = h), a function of U_s's totals alone.

        With blocks, U_s's totals are those of its block count N_s and of whether it
        holds the leading layer (s = 0, which runs chunk 0) or the trailing one (s = S − 1,
        which runs chunk K − 1; S >= 2): the contiguous range of the same layers,
        [0, lead + N − 1], [lead, lead + N − 1] or [L − trail − N, L − 1], so
        H_first(N), H_mid(N), H_last(N).  Every chunk holds a layer, so N_0 >= v − lead,
        N_{S−1} >= v − trail, N_s >= v otherwise, and Σ_s N_s = n blocks.  Hence
        T >= X* = max_s H(N_s) for the plan's own counts.  For a threshold X let A_t(X) be
        the counts N of kind t with H_t(N) <= X (within those limits): X* is a value of
        some H and the plan's counts lie in A_first(X*), A_mid(X*) (S − 2 of them) and
        A_last(X*), so n lies between the sums of the least and of the largest members
        of these sets.  The least value X of the H meeting that test (monotone in X: the
        sets only grow) is at most X*, so at most T.  The test relaxes each set to its
        hull, so the bound can be below the exact min-max over counts, never above.  With
        ``domain``, H_v is the raised weight of :meth:`_stage_weights` (every step above
        holds for any bound H_v(U_s) on R·max_{k ∈ s} τ_k + exposed_s that is a function of
        U_s's totals).  With ``highs``, one bound per span ``dps[i] .. highs[i]`` of d, on
        every plan of each of them (:meth:`_stage_weights`)."""
        blocks = block_structure(table)
        if blocks is None:
            return np.zeros(len(dps), dtype=np.int64)
        least, inverse = self._stage_weights(table, num_stages, virtual, zero, dps, domain,
                                             highs)
        weights = np.stack([np.where(usable[None, :], least[:, inverse[first, last]], INF)
                            for first, last, usable in _block_count_ranges(
                                blocks, table.num_layers, virtual)], axis=1)  # (D, 3, n + 1)
        return _least_counted(weights, np.array([1, num_stages - 2, 1]), blocks.count)

    def _stage_weights(self, table: LayerTable, num_stages: int, virtual: int, zero: int,
                       dps: np.ndarray, domain: bool = False, highs: np.ndarray | None = None
                       ) -> tuple[np.ndarray, np.ndarray]:
        """Per d of ``dps`` (rows) and distinct range (columns, read back per L x L range
        through the returned index, :func:`distinct_ranges`), the stage weight

            H_v(f, l) = min over the TP qualities h of :meth:`_met_qualities` (c, S, d) of
                        R·⌈(time floor_h(f, l) + gathers_c(f, l)) / v⌉ + exposed_c(f, l),

        R = v·m + S − 1, the floors of :meth:`_stage_floor` (compute, collectives and the
        stage's least receives) and :meth:`_vector_stage_floors` (rounded down).  With v = 1 this is
        :meth:`_stagewise_bound`'s H with its gathers and exposed sync rounded down; with
        v > 1 it is the weight of a stage whose chunks hold the layers of f..l in all
        (:meth:`_interleaved_stagewise_bounds`).  H is a function of a range's totals
        (parameters, compute, time floors), so it is priced once per distinct tuple of
        them.

        With ``domain``, for the d of :meth:`_domain_rows` H is raised to the larger of H
        and the least of the weights a stage has where it lies in the tier-P domains: whole
        in one (if a·d <= G_P), with the time floor :meth:`_whole_time` (its cheapest time
        and the receives one replica pays) in place of floor_h, each h's gathers and sync as
        above (they are the stage's own, paid by every replica: the argument of
        :meth:`_stagewise_bound` holds for any stage); or not, with a TP group leaving its
        domain (the time floor :meth:`_leaving_time`, gathers and sync as above) or a group
        of ranks j leaving it (:meth:`_leaving_weights`).  Each is a bound on R·max_{k ∈ s}
        τ_k + exposed_s of a stage in that case, so the least of them on any stage, and the
        larger of it and H too.

        With ``highs``, row i stands for every d of ``dps[i] .. highs[i]`` and its weights
        are at most each one's: R is the least of theirs, the qualities met at any
        of them, the floors of :meth:`_vector_stage_floors` over the span, and the domain
        weights only where all of them have the same tier and kind of
        :meth:`_domain_rows` (H only grows with R and those floors, and falls as the
        qualities grow; without the domain weights it is at most the raised one)."""
        config = table.config
        qualities = self._tp_qualities(config.tp)
        floors = tuple(self._stage_floor(table, quality, virtual) for quality, _ in qualities)
        spans = None if highs is None else _spans(dps, highs)
        every = dps if spans is None else spans[0]  # each d of the rows
        tiers, kinds = self._domain_rows(config, num_stages, virtual, every) if domain else \
            (np.full(len(dps), -1, dtype=np.int64), np.zeros(len(dps), dtype=np.int64))
        if spans is not None and domain:  # kept where every d of the span agrees
            starts = spans[3]
            same = (np.minimum.reduceat(tiers, starts) == np.maximum.reduceat(tiers, starts)) \
                & (np.minimum.reduceat(kinds, starts) == np.maximum.reduceat(kinds, starts))
            tiers = np.where(same, tiers[starts], -1)
            kinds = np.where(same, kinds[starts], 0)
        groups = sorted(set(zip(tiers[tiers >= 0].tolist(), kinds[tiers >= 0].tolist())))
        extra = {(LEAVING, tier): self._leaving_time(table, tier) for tier, _ in groups}
        extra.update({(kind, tier): self._whole_time(table, tier, kind == SHARED)
                      for tier, kind in groups if kind != LEAVING})
        extra = {key: matrix for key, matrix in extra.items() if matrix is not None}
        columns, inverse = distinct_ranges(table, (table.dense_range, table.expert_range,
                                                   table.bwd_range, table.fwd_range,
                                                   table.params_range) + floors
                                           + tuple(extra.values()))
        extra = dict(zip(extra, columns[5 + len(floors):]))
        microbatches = cost.num_microbatches(self.instance.training.global_batch,
                                             table.microbatch, config, every)
        # per (h, c) and d: whether a stage of the layouts visited at d may have that h
        met = self._met_rows(config, num_stages, every)
        if spans is not None:
            microbatches = np.minimum.reduceat(microbatches, spans[3])
            met = np.logical_or.reduceat(met, spans[3], axis=1)
        rounds = (virtual * microbatches + num_stages - 1)[:, None]
        least = np.full((len(dps), len(columns[0])), INF, dtype=np.int64)
        # per d of the domain rows: the least over h of the weight of a stage whose TP group
        # leaves its domain, or that lies whole in one (INF where it cannot)
        placed = np.full((len(dps), len(columns[0])), INF, dtype=np.int64)
        for (_, cap), floor, occurs in zip(qualities, columns[5:5 + len(floors)], met):
            if not occurs.any():  # no stage of the layouts visited at any d has this h
                continue
            gathers, exposed = self._vector_stage_floors(table, zero, dps, cap, columns[:5],
                                                         highs=highs)
            total = rounds * _chunk_share(floor, gathers, virtual) + exposed
            np.minimum(least, np.where(occurs[:, None], total, INF), out=least)
            for (kind, tier), matrix in extra.items():
                rows = (tiers == tier if kind == LEAVING else (tiers == tier) & (kinds == kind)) \
                    & occurs
                placed[rows] = np.minimum(placed[rows], rounds[rows] * _chunk_share(
                    matrix, None if gathers is None else gathers[rows], virtual) + exposed[rows])
        for tier in np.unique(tiers[tiers >= 0]).tolist():
            rows = np.flatnonzero(tiers == tier)
            leaving_weights = self._leaving_weights(
                table, virtual, zero, dps[rows], rounds[rows], tier, columns,
                tuple(zip(qualities, columns[5:5 + len(floors)], met[:, rows])),
                None if highs is None else highs[rows])
            least[rows] = np.maximum(least[rows], np.minimum(placed[rows], leaving_weights))
        return least, inverse

    def _domain_rows(self, config: IntraConfig, num_stages: int, virtual: int,
                     dps: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Per d of ``dps``, the tier P of :meth:`_stage_weights`' domain weights (−1: none)
        and how a stage may lie in the tier-P domains: LEAVING where none holds a stage
        (a·d > G_P), else (v = 1, the plan in no one domain, a·S·d > G_P) WHOLE where none
        holds two (2·a·d > G_P) and SHARED where none holds three (3·a·d > G_P) — the
        premises of :meth:`_domain_bound_at`'s (1) and (2).  P is the largest such tier of
        :meth:`_domain_tiers`; none with e > 1 or c > 1."""
        tiers = np.full(len(dps), -1, dtype=np.int64)
        kinds = np.zeros(len(dps), dtype=np.int64)
        if config.ep > 1 or config.cp > 1:
            return tiers, kinds
        devices = config.devices * dps  # a stage's
        for tier in self._domain_tiers():  # ascending: a larger P overwrites
            domain = self.network.cluster.network.domain_sizes()[tier]
            kind = np.where(devices > domain, LEAVING, np.where(
                2 * devices > domain, WHOLE, np.where(3 * devices > domain, SHARED, 0)))
            if virtual > 1 or num_stages == 1:
                kind = np.where(kind == LEAVING, LEAVING, 0)
            kind = np.where(num_stages * devices > domain, kind, 0)
            tiers = np.where(kind > 0, tier, tiers)
            kinds = np.where(kind > 0, kind, kinds)
        return tiers, kinds

    def _whole_time(self, table: LayerTable, tier: int, shared: bool) -> np.ndarray:
        """L x L: a lower bound on the slowest replica's time of a stage of layers f..l (S
        >= 2, v = 1) lying whole in a tier-P domain D: its cheapest time
        (:meth:`_cheapest_ranges`) plus its activation (f > 0) and gradient (l < L − 1)
        receives each on its cheapest path above P; with ``shared`` (2·a·d <= G_P < 3·a·d)
        for a stage with both (a middle one) one of them there and the other on its
        cheapest path (the lesser choice), the first and last stages their one receive on
        its cheapest path.  0 below the diagonal.

        A replica r of s receives from replica r of each neighbour, the slowest of its rank
        pairs (cost model §3), so across D's border when that neighbour replica has a rank
        outside D, and it pays its compute, its collectives (at least their cheapest
        prices) and both receives.  D holds s's a·d devices and G_P − a·d others: with
        2·a·d > G_P fewer than a·d, so fewer than d replicas of s − 1 and s + 1 together lie
        wholly in D, and some r has both neighbour replicas with a rank outside D (both
        receives above P); with ``shared`` fewer than 2·a·d, so s − 1 and s + 1 do not both
        lie wholly in D, and some replica r receives across from the one that does not.
        Kept in the table's cache (one array per (table, P, shared): :func:`distinct_ranges`
        keeps by identity)."""
        key = ("whole time", tier, shared)
        if key not in table.cache:
            last = table.num_layers - 1
            cheapest = self._cheapest_ranges(table)[0]
            (activation, far_activation), (gradient, far_gradient) = \
                self._stage_receives(table, tier)
            if shared:
                receives = np.minimum(far_activation[:, None] + gradient[None, :],
                                      activation[:, None] + far_gradient[None, :])
                receives[0, :] = gradient
                receives[:, last] = activation
            else:
                receives = far_activation[:, None] + far_gradient[None, :]
            table.cache[key] = np.triu(cheapest + receives)
        return table.cache[key]

    def _leaving_time(self, table: LayerTable, tier: int) -> np.ndarray | None:
        """L x L: the range's cheapest time (:meth:`_cheapest_ranges`, receives dropped)
        plus its TP collectives' extra on a path of a TP group that leaves its tier-``tier``
        domain (:meth:`_crossing_extra` (k = min(t // 2, G_0), P)); None where no TP group
        can leave it (t = 1, or no tier above P holds t devices).  Kept in the table's
        cache (one array per (table, P): :func:`distinct_ranges` keeps by identity)."""
        config = table.config
        channels = min(config.tp // 2, self.network.node_size)
        key = ("leaving time", tier)
        if key not in table.cache:
            table.cache[key] = None if config.tp == 1 or not crossing_tp_paths(
                self.network, config.tp, channels, tier) else \
                self._cheapest_ranges(table)[0] + self._crossing_extra(table, channels, tier)
        return table.cache[key]

    def _leaving_weights(self, table: LayerTable, virtual: int, zero: int, dps: np.ndarray,
                         rounds: np.ndarray, tier: int, columns: tuple[np.ndarray, ...],
                         floors: tuple[tuple[tuple[int, int], np.ndarray, np.ndarray], ...],
                         highs: np.ndarray | None = None) -> np.ndarray:
        """For a stage not whole in a tier-P domain (P = ``tier``, e = c = 1; every stage
        where a·d > G_P), per d (rows) and distinct range (columns, as
        :meth:`_stage_weights`), the least over h of R·⌈(time floor_h + gathers_P,c) / v⌉ +
        exposed_P,c: :meth:`_vector_stage_floors` (c, above P), INF for d = 1 (no group of
        ranks j); ``floors``: per (h, c), floor_h's column and per d whether h_s may be
        h there (:meth:`_met_qualities`; the others left out).

        Such a stage s has, by (1) of :meth:`_domain_bound_at`, its TP group of some replica
        or its group of the d ranks j for some j leaving its domain.  If a TP group leaves,
        every chunk k of s pays at least its cheapest time plus :meth:`_crossing_extra` (k,
        P) (that replica's TP collectives on a crossing path above P, (3)), and s's gathers
        and exposed sync are at least those of :meth:`_stage_weights` with c = ⌊G_0 / h_s⌋
        (Fact 1, stage by stage): the weight ``placed`` there.  If a group of ranks j leaves
        (d >= 2), it is one of s's sync groups and, under ZeRO-3, of its gather groups, and
        runs on :func:`capped_group_paths` (d, c_s, P) or a slower path, so s's exposed sync
        and gathers are at least their prices there (the floors of
        :meth:`_capped_stage_floors` (c_s, above P), each phase on the slowest group, §5 c,
        §3.2 d), and its chunks cost at least floor_h_s (:meth:`_stage_floor`).  In
        both cases the sums over s's chunks give R·max_{k ∈ s} τ_k + exposed_s >= the
        weight, as in :meth:`_interleaved_stagewise_bounds` (v = 1: one chunk).  With
        ``highs``, row i stands for the d of ``dps[i] .. highs[i]`` (:meth:`_stage_weights`),
        INF where all of them are 1."""
        least = np.full((len(dps), len(columns[0])), INF, dtype=np.int64)
        largest = dps if highs is None else highs
        if not np.any(largest > 1):
            return least
        for (_, cap), floor, occurs in floors:
            if not occurs.any():
                continue
            gathers, exposed = self._vector_stage_floors(table, zero, dps, cap, columns[:5],
                                                         above=tier, highs=highs)
            least = np.minimum(least, np.where(occurs[:, None], rounds * _chunk_share(
                floor, gathers, virtual) + exposed, INF))
        return np.where(largest[:, None] > 1, least, INF)

    def _vector_stage_floors(self, table: LayerTable, zero: int, dps: np.ndarray, cap: int,
                             columns: tuple[np.ndarray, ...], above: int = -1,
                             highs: np.ndarray | None = None
                             ) -> tuple[np.ndarray | None, np.ndarray]:
        """:meth:`_capped_stage_floors` (``above`` alike) for every d of ``dps`` (rows) and
        every distinct range (columns of :func:`distinct_ranges`: dense, expert, backward,
        forward and parameter totals), rounded down: every ring form's ceiling dropped, the
        least over the capped paths of the real prices, max(0, x − y) of those (it does not
        fall as x grows), then :func:`lower_ticks` (:mod:`nest_cp.dp.vector_bounds`).  A
        form that is not a ring form is priced exactly, d by d.  The group sizes' paths are
        read from :meth:`_size_classes` (the classes of :func:`path_classes`, found once).

        With ``highs``, row i stands for every d of ``dps[i] .. highs[i]`` and holds at most
        each one's floors: each collective's price is the least, over the path classes its
        group sizes meet there, of the price at the class's least size met (a class has one
        set of paths, and on a path a ring form's slope X·(g − 1)/g and offset Y·(g − 1)
        never fall as g grows), 0 where a size is 1 (no group); every step after is
        monotone in those prices.  A form that is not a ring form raises
        :class:`_NotRingForms` (no such bound)."""
        training = self.instance.training
        optimizer = training.optimizer
        dense, expert, backward, forward, params = columns
        count, width = len(dps), len(dense)
        reduce = np.zeros((count, width))
        gather = np.zeros((count, width))
        phases = [(reduce, cost.sync_collective(zero), optimizer.grad_bytes)]
        if cost.gathers_weights(zero):
            phases.append((gather, CollectiveKind.ALL_GATHER, optimizer.weight_bytes))
        spans = None if highs is None else _spans(dps, highs)
        for volumes, per_replica in ((dense, table.config.ep), (expert, 1)):
            if not np.any(volumes > 0):
                continue
            if spans is not None:
                for out, kind, bytes_per_unit in phases:
                    out += self._spanned_ring_price(kind, bytes_per_unit, spans, per_replica,
                                                    cap, above, volumes)
                continue
            sizes = dps * per_replica
            for rows, paths in self._size_classes(sizes, cap, above):
                for out, kind, bytes_per_unit in phases:
                    least = self._least_ring_price(kind, bytes_per_unit, paths, sizes[rows],
                                                   volumes)
                    if least is None:
                        return self._exact_stage_floors(table, zero, dps, cap, above)
                    out[rows] += least
        scale = 0
        if training.overlap_grad_reduce:
            np.maximum(np.subtract(reduce, backward[None, :], out=reduce), 0, out=reduce)
            scale = max(scale, int(backward.max(initial=0)))
        if training.overlap_param_gather:
            np.maximum(np.subtract(gather, forward[None, :], out=gather), 0, out=gather)
            scale = max(scale, int(forward.max(initial=0)))
        exposed = np.maximum(0, lower_ticks(np.add(reduce, gather, out=reduce), scale))
        if zero != 3:
            return None, exposed
        if spans is not None:
            gathers = 2 * self._spanned_ring_price(CollectiveKind.ALL_GATHER,
                                                   optimizer.weight_bytes, spans, 1, cap,
                                                   above, params)
            return np.maximum(0, lower_ticks(gathers)), exposed
        gathers = np.zeros((count, width))
        for rows, paths in self._size_classes(dps, cap, above):
            least = self._least_ring_price(CollectiveKind.ALL_GATHER, optimizer.weight_bytes,
                                           paths, dps[rows], params)
            if least is None:
                return self._exact_stage_floors(table, zero, dps, cap, above)
            gathers[rows] = 2 * least
        return np.maximum(0, lower_ticks(gathers)), exposed

    def _size_classes(self, sizes: np.ndarray, cap: int, above: int = -1) -> list:
        """:func:`path_classes` (``sizes``, ``cap``, ``above``) as (rows, paths) pairs, rows
        an index array into ``sizes`` or a full slice where one class holds them all: the
        classes of every group size 2 .. N are found once per (cap, above) and read back
        (a class's paths are those of any of its sizes, :func:`path_classes`)."""
        codes, classes = self._size_code_table(cap, above)
        met = codes[sizes]
        first = int(met[0])
        if first >= 0 and (met == first).all():
            return [(slice(None), classes[first])]
        return [(np.flatnonzero(met == code), classes[code])
                for code in np.unique(met[met >= 0]).tolist()]

    def _size_code_table(self, cap: int, above: int) -> tuple[np.ndarray, list]:
        """Per group size 0 .. N, the index of its class of :func:`path_classes` (``cap``,
        ``above``) (−1 below 2: no group), and each class's paths; kept per (cap, above)."""
        key = (cap, above)
        if key not in self._size_codes:
            every = np.arange(self.instance.cluster.num_devices + 1, dtype=np.int64)
            codes = np.full(len(every), -1, dtype=np.int32)
            found = path_classes(self.network, every, cap, above)
            for index, (mask, _) in enumerate(found):
                codes[mask] = index
            self._size_codes[key] = (codes, [paths for _, paths in found])
        return self._size_codes[key]

    def _spanned_ring_price(self, kind: CollectiveKind, bytes_per_unit: int, spans: tuple,
                            per_replica: int, cap: int, above: int,
                            volumes: np.ndarray) -> np.ndarray:
        """(rows, len(volumes)) floats: per row of ``spans`` (:func:`_spans`: the d each row
        stands for), at most the least ring price (:meth:`_least_ring_price`) of the
        collective over g = d·``per_replica`` ranks for each of its d: the least over the
        classes of :meth:`_size_classes` its sizes meet of the price at the least size met
        in the class (:meth:`_vector_stage_floors`), 0 where a size is 1.  Raises
        :class:`_NotRingForms` where a path's forms are not ring forms."""
        members, owner, count, _ = spans
        sizes = members * per_replica
        codes, classes = self._size_code_table(cap, above)
        met = codes[sizes]
        least = np.full((count, len(volumes)), np.inf)
        least[owner[met < 0]] = 0.0  # a group of one rank: no collective
        for code in np.unique(met[met >= 0]).tolist():
            where = np.flatnonzero(met == code)
            # members ascend within a row: the first one of the class is its least size
            rows, first = np.unique(owner[where], return_index=True)
            price = self._least_ring_price(kind, bytes_per_unit, classes[code],
                                           sizes[where[first]], volumes)
            if price is None:
                raise _NotRingForms
            least[rows] = np.minimum(least[rows], price)
        return least

    def _least_ring_price(self, kind: CollectiveKind, bytes_per_unit: int, paths: tuple,
                          sizes: np.ndarray, volumes: np.ndarray) -> np.ndarray | None:
        """(len(sizes), len(volumes)) floats: the least over ``paths`` of the real price
        (slope·V + offset, 0 at V = 0, as :class:`~nest_cp.dp.pricing.LinearTicks`) of the
        collective over g = ``sizes`` ranks; None when a path's forms are not ring forms."""
        key = (kind, bytes_per_unit, paths)
        if key not in self._path_rates:
            self._path_rates[key] = [self.prices.ring_rates(kind, bytes_per_unit,
                                                            self.ids.id_of(path))
                                     for path in paths]
        rates = self._path_rates[key]
        if any(rate is None for rate in rates):
            return None
        terms = [ring_terms(rate, sizes) for rate in rates]
        # a path whose slope and offset are both the least at every size prices every
        # volume >= 0 at the least (rounding is monotone): the others need no pricing
        slopes = np.array([slope for slope, _ in terms])
        offsets = np.array([offset for _, offset in terms])
        dominant = (slopes <= slopes.min(axis=0)).all(axis=1) \
            & (offsets <= offsets.min(axis=0)).all(axis=1)
        if dominant.any():
            terms = [terms[int(dominant.argmax())]]
        least = None
        for slope, offset in terms:
            price = slope[:, None] * volumes[None, :] + offset[:, None]
            least = price if least is None else np.minimum(least, price, out=least)
        return np.where(volumes[None, :] > 0, least, 0.0)

    def _exact_stage_floors(self, table: LayerTable, zero: int, dps: np.ndarray,
                            cap: int, above: int = -1) -> tuple[np.ndarray | None, np.ndarray]:
        """:meth:`_vector_stage_floors` where a form is not a ring form: each d priced
        exactly by :meth:`_capped_stage_floors`, read back per distinct range."""
        training = self.instance.training
        rows_gathers, rows_exposed = [], []
        for dp in dps.tolist():
            microbatches = cost.num_microbatches(training.global_batch, table.microbatch,
                                                 table.config, dp)
            gathers, exposed = self._capped_stage_floors(
                Shape(table, 1, dp, 1, zero, microbatches), cap, distinct=True, above=above)
            rows_exposed.append(exposed)
            rows_gathers.append(np.zeros_like(exposed) if gathers is None else gathers)
        return (np.array(rows_gathers) if zero == 3 else None), np.array(rows_exposed)

    def _stage_time_floor(self, table: LayerTable, quality: int) -> np.ndarray:
        """L x L: the compute and collectives of :meth:`_cheapest_ranges`, plus, for a TP
        quality h < t, :meth:`_crossing_extra` (h); kept in the table's cache."""
        key = ("stage time floor", quality)
        if key not in table.cache:
            floor = self._cheapest_ranges(table)[0]
            if quality < table.config.tp:
                floor = floor + self._crossing_extra(table, quality)
            table.cache[key] = floor
        return table.cache[key]

    def _stage_floor(self, table: LayerTable, quality: int, virtual: int) -> np.ndarray:
        """L x L: :meth:`_stage_time_floor` (h) plus the least receives a stage of S >= 2
        whose chunks hold the layers of f..l in all pays (0 for S = 1, where f..l is every
        layer): with v = 1 the activation before f (f > 0) and the gradient after l (l <
        L − 1), each on its cheapest path; with v > 1, ρ times 2v less one for f = 0 and one
        for l = L − 1, ρ the least such transfer of any layer output but the last.

        A chunk k >= 1 receives its activation from chunk k − 1 and a chunk k < K − 1 its
        gradient from chunk k + 1, on pairs of its own replica's ranks with those of another
        stage (v = 1: the stages before and after; v > 1: stage (k ∓ 1) mod S, never its
        own with S >= 2), so between distinct devices, each a transfer of one layer's output
        on the pair's tier path (cost model §3, no channels), paid in full by every replica
        (§3.2): at least the least over the tiers of it.  Where h = t = G_0 (each TP group
        of the stage fills its node, so that node holds no rank of another stage) every
        pair leaves the node: the least over the tiers above it.  With v = 1 that is
        :meth:`_cheapest_times`' receives; with v > 1 the stage's v chunks pay 2v receives,
        one less when it runs chunk 0 (stage 0, the ranges from f = 0 stand for it) and one
        less when it runs chunk K − 1 (stage S − 1, l = L − 1): each at least ρ.  So every
        replica's τ_k summed over the stage's chunks is at least this floor summed over
        their layers plus those receives.  Kept in the table's cache (one array per (table,
        h, v): :func:`distinct_ranges` keeps by identity)."""
        key = ("stage floor", quality, virtual)
        if key not in table.cache:
            config, network = table.config, self.network
            off_node = quality == config.tp == network.node_size and network.num_tiers >= 2
            activation, gradient = self._receives_from(table, 1 if off_node else 0)
            gradient = np.concatenate((gradient[:-1], [0]))  # none after the last layer
            if virtual == 1:
                receives = activation[:, None] + gradient[None, :]
            else:
                least = int(min(activation[1:].min(initial=INF), gradient[:-1].min(initial=INF)))
                ends = np.arange(table.num_layers)
                count = 2 * virtual - (ends == 0)[:, None] - (ends == ends[-1])[None, :]
                receives = count * (0 if least >= INF else least)
            table.cache[key] = self._stage_time_floor(table, quality) + np.triu(receives)
        return table.cache[key]

    def _unordered(self, num_layers: int, num_stages: int) -> np.ndarray:
        """(W, W): INF where the last offset precedes the first (no such stage), else 0;
        added to a window of stage weights, as the kernel wants them (kept per (L, S))."""
        key = (num_layers, num_stages)
        if key not in self._masks:
            width = num_layers - num_stages + 1
            self._masks[key] = np.where(np.triu(np.ones((width, width), dtype=bool)), 0, INF)
        return self._masks[key]

    def _capped_stage_floors(self, shape: Shape, cap: int, distinct: bool = False,
                             above: int = -1) -> tuple[np.ndarray | None, np.ndarray]:
        """L x L floors of :meth:`_stagewise_bound` for a stage of layers f..l whose groups
        have at most ``cap`` members per node: the ZeRO-3 gathers (None unless z = 3 and
        d > 1) and the exposed sync, each phase at the least price over
        :func:`capped_group_paths`; with ``distinct``, per distinct range of
        :func:`distinct_ranges` instead of L x L.  With ``above``, every group on the paths
        of the tiers above it (groups that leave their tier-``above`` domain).  Kept per
        distinct range in the table's cache per (d, z, cap, above): they do not depend on
        S, and the domain bound asks them for every S of a d."""
        table, zero, dp = shape.table, shape.zero, shape.dp
        columns, inverse = distinct_ranges(table, (table.dense_range, table.expert_range,
                                                   table.bwd_range, table.fwd_range,
                                                   table.params_range))
        key = ("capped floors", dp, zero, cap, above)
        if key not in table.cache:
            exposed = self._exposed_floors(table, zero, [
                (size, tuple(self.ids.id_of(path)
                             for path in self._group_paths(size, cap, above))
                 if size > 1 else ()) for size in (dp * table.config.ep, dp)], np.min)
            gathers = None
            if shape.gather_dp > 1:
                gathers = 2 * np.min([self.prices.gather_form(dp, self.ids.id_of(path))
                                      .of_array(columns[4])
                                      for path in self._group_paths(dp, cap, above)], axis=0)
            for kept in (gathers, exposed):
                if kept is not None:
                    kept.flags.writeable = False  # (shared by every caller)
            table.cache[key] = gathers, exposed
        gathers, exposed = table.cache[key]
        if distinct:
            return gathers, exposed
        return None if gathers is None else gathers[inverse], exposed[inverse]

    def _gather_bound(self, shape: Shape, cap: int | None = None) -> int:
        """ZeRO-3: the cheapest possible gathers of the chunk holding the most parameters.

        That chunk holds at least ceil(P / K) of them, its gathers run over groups of g =
        d·c ranks (d replicas, c context ranks; g = d without context parallelism), each on
        a path no faster than one of :func:`fastest_group_paths` (g) (with ``cap``: of
        :func:`capped_group_paths` (g, cap), for plans with at most ``cap`` members of a
        group per node, :meth:`_shape_bound` case A), and a gather costs no less for more
        parameters."""
        size = shape.gather_dp
        if size == 1 or not self.network.is_hierarchical:
            return 0
        table = shape.table
        heaviest = -(-whole_totals(table)[0] // shape.num_chunks)
        forms = self._gather_forms.get((size, cap))
        if forms is None:  # kept per (g, cap): one g serves many (table, S)
            paths = self._group_paths(size, cap)
            forms = self._gather_forms[size, cap] = tuple(
                self.prices.gather_form(size, self.ids.id_of(path)) for path in paths)
        return min(2 * form.of(heaviest) for form in forms)

    def _sync_bound(self, shape: Shape, cap: int | None = None) -> int:
        """:meth:`_fresh_sync_bound`, once per (layer table, S, d, z, cap): the layouts and
        recompute choices of one shape share it.  With ``cap``, on the paths of
        :func:`capped_group_paths` (size, cap) (:meth:`_shape_bound` case A)."""
        key = (id(shape.table), shape.num_stages, shape.dp, shape.zero, cap)
        found = self._sync_bounds.get(key)
        if found is None or found[0] is not shape.table:
            found = (shape.table, self._fresh_sync_bound(shape, cap=cap))
            self._sync_bounds[key] = found
        return found[1]

    def _fresh_sync_bound(self, shape: Shape, paths_of=None, cap: int | None = None) -> int:
        """A lower bound on max_s exposed_s, from the fastest paths a sync group may have
        (``paths_of(kind, size)``, kind 0 dense and 1 expert: paths one of which every
        group of the kind runs on or on a slower one; default the fastest paths of any
        ``size`` devices; with ``cap``, :func:`capped_group_paths` (size, cap), the paths of
        plans with at most ``cap`` members of a group per node, :meth:`_shape_bound`).

        Stage s's sync has a gradient phase RS_s and a weight gather AG_s (ZeRO 1 and 2;
        cost model §5 c), each the sum over the kinds (dense over d·e·c ranks, expert over
        d·c; c the context width) of its price on the kind's slowest group, so at least
        its price on any one
        group; a group of g devices runs on a path no faster than one of
        :func:`fastest_group_paths` (g) (§5 a), and a price never falls as the parameter
        count grows.  Two bounds, of which the larger is returned:

        - Parts the iteration always waits for in full (RS without overlap_grad_reduce, AG
          without overlap_param_gather, §5 d): the stage holding the most parameters of
          a kind, at least ceil(P / S), pays them on one of its groups' paths — at least
          the least, over the fastest paths, of those parts' prices at ceil(P / S).
        - max_s exposed_s >= (Σ_s exposed_s) / S >= (Σ_s (RS_s + AG_s) − [overlap_grad_reduce]
          Σ_s R_s − [overlap_param_gather] Σ_s F_s) / S, as max(0, x − y) >= x − y; Σ_s R_s
          (Σ_s F_s) is the backward (forward) of every layer.  On a path p a phase costs
          ceil((a_p·P_s + b_p) / den_p) >= α_p·P_s + β_p (α_p = a_p / den_p, β_p =
          b_p / den_p) for P_s > 0, and stages may run on different paths, so Σ_s of it >=
          (min_p α_p)·P + H·(min_p β_p), H the stages holding parameters of the kind (all S
          when every layer has some, at least one otherwise).
        """
        if not self.network.is_hierarchical:
            return 0
        training = self.instance.training
        table, num_stages = shape.table, shape.num_stages
        _, forward, backward = whole_totals(table)
        in_full = (not training.overlap_grad_reduce, not training.overlap_param_gather)
        heaviest_bound, total, denominator = 0, 0, 1  # total / denominator: Σ_s (RS_s + AG_s)
        for kind, (params, every_layer, per_replica) in enumerate(parameter_kinds(table)):
            size = shape.dp * per_replica
            if size <= 1 or params == 0:
                continue
            if paths_of is None:
                paths = self._group_paths(size, cap)
                floor = self._floors.get((shape.zero, size, cap))
                if floor is None:  # kept per (z, size, cap): one serves many (table, S)
                    floor = self.prices.sync_floor(shape.zero, size, paths)
                    self._floors[shape.zero, size, cap] = floor
            else:
                paths = paths_of(kind, size)
                floor = self.prices.sync_floor(shape.zero, size, paths)
            if any(in_full):
                heaviest = -(-params // num_stages)
                heaviest_bound = max(heaviest_bound, min(
                    sum(form.of(heaviest) for form, full in zip(self.prices.sync_forms(
                        shape.zero, size, self.ids.id_of(path)), in_full)
                        if full and form is not None)
                    for path in paths))
            holders = num_stages if every_layer else 1
            common = math.lcm(denominator, floor.denominator)
            total = total * (common // denominator) + (
                floor.slope_rate * params + holders * floor.offset_rate) \
                * (common // floor.denominator)
            denominator = common
        hidden = (backward if training.overlap_grad_reduce else 0) \
            + (forward if training.overlap_param_gather and cost.gathers_weights(shape.zero)
               else 0)
        return max(heaviest_bound, -((hidden * denominator - total)
                                     // (denominator * num_stages)))


def _domain_min_max(weights: tuple[np.ndarray, ...], num_stages: int, slots: int,
                    capacity: int | None = None) -> int:
    """V(0, 0, 0) of :meth:`_Search._domain_stagewise`'s recurrence for its five weights
    (:meth:`_Search._domain_weights`), S = ``num_stages`` and q = ``slots``, one stage at a
    time from the last (q = 1, no state: the kernel's recurrence on the stages' windows).
    With ``capacity`` W < S, the least over the assignments with at most W whole stages:
    the recurrence's value V is at most it, and it is the least weight u >= V with an
    assignment of every weight at most u and at most W whole stages
    (:func:`_domain_split_below`, monotone in u), found by bisection over the weights'
    finite values (INF if none)."""
    whole_alone, joined_right, joined_left, inside, leaving = weights
    alone = np.minimum(whole_alone, leaving)
    if slots == 1:
        least = least_max(windows(alone, num_stages))
    else:
        width = alone.shape[0] - num_stages + 1
        after = np.full((slots, width), INF, dtype=np.int64)  # V(S, r, ·)
        after[:, width - 1] = 0
        # not joined, joined on the right only, on the left only (each with the V(s + 1, r)
        # of its r: 0, 1, 0), and joined on both sides (r + 1 for r = 1 .. q − 2)
        stacked = np.stack((alone, joined_right, joined_left))
        for stage in range(num_stages - 1, -1, -1):
            window = slice(stage, stage + width)
            least = np.maximum(stacked[:, window, window], after[[0, 1, 0], None, :]).min(axis=2)
            value = np.empty_like(after)
            value[0] = np.minimum(least[0], least[1])
            value[1:] = least[2]
            if slots > 2:  # r >= 1: joined on the left, its activation receive near
                value[1:-1] = np.minimum(value[1:-1], np.maximum(
                    inside[None, window, window], after[2:, None, :]).min(axis=2))
            after = value
        least = int(after[0, 0])
    if capacity is None or capacity >= num_stages or least >= INF or \
            _domain_split_below(weights, num_stages, slots, least + 1, capacity):
        return least
    values = np.unique(np.concatenate([weight[weight < INF] for weight in weights]))
    values = values[values > least]
    low, high = 0, len(values)  # the answer is values[high], or INF where high = len
    while low < high:
        middle = (low + high) // 2
        if _domain_split_below(weights, num_stages, slots, int(values[middle]) + 1, capacity):
            high = middle
        else:
            low = middle + 1
    return int(values[high]) if high < len(values) else INF


def _domain_split_below(weights: tuple[np.ndarray, ...], num_stages: int, slots: int,
                        threshold: int, capacity: int | None = None) -> bool:
    """Whether :func:`_domain_min_max` (``weights``, S, q, ``capacity``) < ``threshold``:
    whether some split into S stages and assignment of the recurrence (with at most W =
    ``capacity`` whole stages) has every stage weight below it.

    The recurrence's states forward, as sets of layers: x_s[r] holds the layers stage s may
    start at with r whole stages joined to it on its left, stages 0 .. s − 1 all below the
    threshold; x_0 = {0} at r = 0.  A stage on layers f..l whose weight is below the
    threshold takes f in x_s[r] to l + 1 in x_{s+1}[r'] by the recurrence's moves (r = 0:
    alone to r' = 0, joined on the right to 1 if q > 1; r >= 1: joined on the left to 0,
    on both sides to r + 1 if r + 1 < q), and the answer is whether layer L is in some
    x_S[r].  The recurrence's windows (stage s starts at a layer of s .. s + W − 1) need no
    check: every stage takes a layer at least, and a stage starting later leaves too few
    layers for the S-th to end at L − 1.  A set is a 0/1 row and a move a 0/1 matrix, so a
    step is a product clipped to 1 (float32: sums of at most 2·(L + 1) ones, exact); an
    empty x_s ends it early; with q = 1 (one state) x_S = x_0 · A^S (:func:`_reached_in`).
    With W < S and a split below, one with no whole stage (the same pass over the moves of
    stages not whole alone) has at most W, else :func:`_domain_whole_count` decides
    whether one has.

    First a witness: if one of the two balanced splits (:func:`_balanced_splits`) has every
    stage below the threshold as a stage alone — weight min(R·X_11, N), or N (not whole)
    where W < S — that split with every stage alone (and none whole where W < S) is such
    an assignment, and the passes below would find it: the answer is yes without them."""
    whole_alone, joined_right, joined_left, inside, leaving = weights
    num_layers = whole_alone.shape[0]
    counted = capacity is not None and capacity < num_stages
    alone = np.minimum(whole_alone, leaving)  # a stage joined to none, whole or not
    witness = leaving if counted else alone
    for firsts, lasts in _balanced_splits(num_layers, num_stages):
        if witness[firsts, lasts].max() < threshold:
            return True
    moves = np.zeros((5, num_layers + 1, num_layers + 1), dtype=np.float32)
    for move, weight in zip(moves, (alone, joined_right,
                                    joined_left, inside)):  # [f, l + 1]: f..l below it
        move[:num_layers, 1:] = weight < threshold
    if slots == 1:  # one state: x_S = x_0 · A^S, by squaring (a set per power of two)
        below = bool(_reached_in(moves[0], num_stages)[num_layers])
    else:
        below = _reached_in_states(moves[:4], num_stages, slots)
    if not below or not counted:
        return below
    moves[4, :num_layers, 1:] = leaving < threshold  # stages not whole only
    return bool(_reached_in(moves[4], num_stages)[num_layers]) or \
        _domain_whole_count(weights, num_stages, slots, threshold) <= capacity


def _balanced_splits(num_layers: int, num_stages: int) -> tuple[tuple[np.ndarray, ...], ...]:
    """The two splits of L layers into S <= L contiguous stages of ⌊L / S⌋ or ⌈L / S⌉
    layers, the longer ones first or last, as (first layers, last layers) arrays."""
    base, extra = divmod(num_layers, num_stages)
    splits = []
    for longer in (np.arange(num_stages) < extra, np.arange(num_stages) >= num_stages - extra):
        lasts = np.cumsum(base + longer) - 1
        splits.append((lasts - (base + longer) + 1, lasts))
    return tuple(splits)


def _reached_in_states(moves: np.ndarray, num_stages: int, slots: int) -> bool:
    """Whether :func:`_domain_split_below`'s forward pass over the states r = 0 .. q − 1
    (``moves``: alone, joined on the right, on the left, on both sides, 0/1 matrices [f,
    l + 1]) reaches layer L after S stages."""
    alone, joined_right, joined_left, inside = moves
    num_layers = alone.shape[0] - 1
    starts = np.zeros((slots, num_layers + 1), dtype=np.float32)  # x_s[r], 0/1
    starts[0, 0] = 1
    for _ in range(num_stages):
        reached = np.empty_like(starts)
        reached[0] = starts[0] @ alone
        if slots > 1:
            reached[0] += starts[1:].sum(axis=0) @ joined_left
            reached[1] = starts[0] @ joined_right
        if slots > 2:
            reached[2:] = starts[1:-1] @ inside
        starts = np.minimum(reached, 1, out=reached)
        if not starts.any():
            return False
    return bool(starts[:, num_layers].any())


def _reached_in(move: np.ndarray, steps: int) -> np.ndarray:
    """The 0/1 set of layers reached from layer 0 in exactly ``steps`` moves of ``move``
    (a 0/1 matrix [f, l + 1], as in :func:`_domain_split_below`): x · A^steps with A's
    powers of two by squaring, each product clipped to 1 (float32 sums of at most L + 1
    ones, exact), so log2(steps) matrix products in place of ``steps`` vector ones."""
    reached = np.zeros(move.shape[0], dtype=np.float32)
    reached[0] = 1
    power = move
    while steps:
        if steps & 1:
            reached = np.minimum(reached @ power, 1)
            if not reached.any():
                break
        steps >>= 1
        if steps:
            power = np.minimum(power @ power, 1)
    return reached


def _domain_whole_count(weights: tuple[np.ndarray, ...], num_stages: int, slots: int,
                        threshold: int) -> int:
    """The fewest whole stages of an assignment of :func:`_domain_split_below`'s moves
    (every stage weight below ``threshold``), or S + 1 where there is none: the same
    forward pass with, per state (r, layer), the fewest whole stages that reach it instead
    of a 0/1 (a stage not whole adds none, a whole one one: alone with R·X_11, joined
    with the others), the least over the moves into it.  What is reached next depends on
    the state only, so the fewest so far is all a state needs to keep.  Stage s starts at
    a layer of s .. s + W − 1 (W = L − S + 1: every stage takes a layer at least), so each
    step reads the moves' W x W window."""
    whole_alone, joined_right, joined_left, inside, leaving = weights
    num_layers = whole_alone.shape[0]
    width = num_layers - num_stages + 1
    none = num_stages + 1  # unreached: more whole stages than there are stages
    masks = []
    for weight in (leaving, whole_alone, joined_right, joined_left, inside):
        mask = np.zeros((num_layers + 1, num_layers + 1), dtype=bool)
        mask[:num_layers, 1:] = weight < threshold
        masks.append(mask)

    def step(rows: np.ndarray, mask: np.ndarray) -> np.ndarray:  # least over the moves in
        return np.min(np.broadcast_to(rows[..., :, None], rows.shape + (width,)),
                      axis=-2, where=mask, initial=none)

    counts = np.full((slots, width), none, dtype=np.int16)  # per (r, start layer − s)
    counts[0, 0] = 0
    for stage in range(num_stages):
        # [f − s, l + 1 − (s + 1)]: stage s on layers f..l, the next one starting at l + 1
        leaving, whole_alone, joined_right, joined_left, inside = (
            mask[stage:stage + width, stage + 1:stage + 1 + width] for mask in masks)
        reached = np.full_like(counts, none)
        reached[0] = np.minimum(step(counts[0], leaving), step(counts[0], whole_alone) + 1)
        if slots > 1:
            reached[0] = np.minimum(reached[0], step(counts[1:].min(axis=0), joined_left) + 1)
            reached[1] = step(counts[0], joined_right) + 1
        if slots > 2:
            reached[2:] = step(counts[1:-1], inside) + 1
        counts = np.minimum(reached, none, out=reached)
        if counts.min() >= none:
            return none
    return int(counts[:, width - 1].min())


def _block_count_ranges(blocks: Blocks, num_layers: int, virtual: int
                        ) -> tuple[tuple[np.ndarray, np.ndarray, np.ndarray], ...]:
    """For a stage first, in the middle or last, per block count N = 0 .. n: the first and
    last layer of the contiguous range with the totals of its layers ([0, lead + N − 1],
    [lead, lead + N − 1], [L − trail − N, L − 1], clipped to the layers) and whether such
    a stage may hold N blocks (each of its v chunks a layer: N >= v − lead, v, v − trail)."""
    counts = np.arange(blocks.count + 1)
    ranges = []
    for first, last, fewest in (
            (np.zeros_like(counts), blocks.leading + counts - 1, virtual - blocks.leading),
            (np.full_like(counts, blocks.leading), blocks.leading + counts - 1, virtual),
            (num_layers - blocks.trailing - counts, np.full_like(counts, num_layers - 1),
             virtual - blocks.trailing)):
        ranges.append((np.clip(first, 0, num_layers - 1), np.clip(last, 0, num_layers - 1),
                       counts >= max(fewest, 0)))
    return tuple(ranges)


def _classes_of_kinds(kinds: frozenset | None) -> frozenset | None:
    """:meth:`_Search._tp_classes` of layouts of these TP kinds: "inside" and "crossing"
    (kind 1), None where a kind is neither (or the kinds are unknown)."""
    if kinds is None or any(kind not in ("inside", 1) for kind in kinds):
        return None
    return frozenset("inside" if kind == "inside" else "crossing" for kind in kinds)


def _least_counted(weights: np.ndarray, multiplicity: np.ndarray, count: int) -> np.ndarray:
    """Per row of ``weights`` (rows x kinds x block counts 0 .. n, INF where a stage of the
    kind cannot hold that many), the least value X < INF of the row such that choosing, for
    each of the ``multiplicity[k]`` stages of each kind k, a count with weight <= X can sum
    to n = ``count`` blocks, the sets of allowed counts relaxed to their hulls: every kind
    with stages non-empty and Σ_k m_k·fewest_k(X) <= n <= Σ_k m_k·most_k(X); INF where no
    value does.  The plan's own counts meet it at X* = their largest weight, so the result
    is at most X* (the argument of :meth:`_Search._interleaved_stagewise_bounds`).

    Each of the three conditions holds exactly from a threshold on: the sets only grow
    with X, so "non-empty" from the least weight of the kind, fewest_k(X) (the count of N
    whose least weight over N' <= N is above X) only falls and most_k(X) (one less than
    the count of N whose least weight over N' >= N is at most X) only rises.  The answer
    is the largest of the three thresholds, each a value of the row, found from the
    values sorted with their multiplicities, so without a search over X (a bisection over
    the sorted values would also have to skip the INF entries, at which the test fails
    whatever the counts)."""
    rows, kinds, width = weights.shape
    multiplicity = np.asarray(multiplicity, dtype=np.int64)
    before = np.minimum.accumulate(weights, axis=2)  # at N: the least over N' <= N
    after = np.minimum.accumulate(weights[:, :, ::-1], axis=2)[:, :, ::-1]  # over N' >= N
    index = np.arange(rows)
    present = before[:, multiplicity > 0, -1].max(axis=1)  # every kind used non-empty
    per_value = np.repeat(multiplicity, width)

    def ordered(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        flat = values.reshape(rows, kinds * width)
        order = np.argsort(flat, axis=1, kind="stable")
        return np.take_along_axis(flat, order, axis=1), per_value[order]

    # Σ m_k·fewest_k(X) <= n: the least sorted value with at most n weighted values above
    values, weight = ordered(before)
    above = weight.sum(axis=1, keepdims=True) - np.cumsum(weight, axis=1)
    fewest = values[index, (above > count).sum(axis=1)]
    # Σ m_k·most_k(X) >= n: the least sorted value with n + Σ m_k weighted values up to it
    values, weight = ordered(after)
    reached = np.cumsum(weight, axis=1) >= count + multiplicity.sum()
    most = np.where(reached.any(axis=1), values[index, reached.argmax(axis=1)], INF)
    least = np.maximum(np.maximum(fewest, most), present)
    return np.minimum(least, INF)


def _chunk_share(time: np.ndarray, gathers: np.ndarray | None, virtual: int) -> np.ndarray:
    """A stage's time floor per distinct range plus its gathers (per d, or none), shared
    among its v chunks: ⌈(time + gathers) / v⌉, at most its slowest chunk's."""
    total = time[None, :] if gathers is None else time + gathers
    return total if virtual == 1 else -(-total // virtual)


def _interleaving_allowed(num_stages: int, virtual: int, microbatches: int,
                          num_layers: int) -> bool:
    """DESIGN §3.2 b: v > 1 needs S >= 2, m a multiple of S, and S·v non-empty chunks."""
    if virtual == 1:
        return True
    return num_stages >= 2 and microbatches % num_stages == 0 and \
        num_stages * virtual <= num_layers


def _require_exact_method(table: LayerTable, num_chunks: int) -> None:
    if not exact_method_available(table, num_chunks):
        raise BackendOptionError(
            f"expected, for --backend dp with virtual stages, a workload of identical layers "
            f"between at most one leading and one trailing layer, or at most "
            f"{table.num_layers} layers few enough to enumerate every split into "
            f"{num_chunks} chunks; got neither (use virtual_stages [1] or another backend)",
            option="virtual_stages")


def _where(shape: Shape) -> str:
    config = shape.table.config
    text = (f"config {config.label}, b={shape.table.microbatch}, "
            f"S={shape.num_stages}, d={shape.dp}, z={shape.zero}")
    return text if shape.virtual == 1 else f"{text}, v={shape.virtual}"

