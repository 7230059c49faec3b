r"""Plain 1F1B (v = 1): the min-max suffix recurrence over stages, walked along a Pareto front.

For one outer choice (c, b, S, d, z) and layout, stage s (0 = first) holding layers
f..l in recompute mode ρ costs τ_ρ(s, f, l) per microbatch and needs memory

    mem_ρ(s, f, l) = state(params) + [z = 3] 2·w·max layer params
                     + k_s · kept_ρ(f..l) + work_ρ(f..l),    k_s = min(S − s, m),

(:mod:`nest_cp.dp.compose`).  The mode of a stage changes only that stage's τ and
memory (never its sync), so each stage takes the fastest mode that fits:

    τ_eff(s, f, l) = min over allowed ρ with mem_ρ(s, f, l) <= HBM of τ_ρ(s, f, l)

(∞ if none fits).  Per entry τ_none <= τ_selective <= τ_full, so this is the first
mode in the order none, selective, full that fits.  With exposed(s, f, l)
the stage's exposed gradient sync, T = (m + S − 1)·max_s τ_s + max_s exposed_s is
minimised exactly by walking the Pareto front of (max τ, max exposed) with the
min-max kernel V_w(s, f) = min_{l >= f} max(w(s, f, l), V_w(s + 1, l + 1))
(:mod:`nest_cp.dp.kernel`):

    Y_0 = ∞;  τ_k = V_w(0, 0) with w = τ_eff where exposed <= Y_k (∞ elsewhere);
    σ_k = V_w(0, 0) with w = exposed where τ_eff <= τ_k;
    candidate T_k = (m + S − 1)·τ_k + σ_k;  Y_{k+1} = σ_k − 1,

until the τ pass is infeasible or cannot beat the incumbent.  A plan P with
(τ_P, σ_P) and k the last step with Y_k >= σ_P has τ_P >= τ_k and σ_P >= σ_k (else
Y_{k+1} = σ_k − 1 >= σ_P), so T_P >= T_k: min_k T_k is the optimum of the outer
choice and layout, attained by the σ pass's split.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cached_property

import numpy as np

from nest_cp.dp.compose import RangePrices, RangeSet, Shape
from nest_cp.dp.geometry import StageGeometry
from nest_cp.dp.kernel import INF, backtrack, fill_table, least_max, windows
from nest_cp.model.instance import RecomputeMode
from nest_cp.model.plan import Stage

STAGE_TIMES_BYTES = 2**25  # per-stage chunk times kept per layer table (32 MiB)


class SuffixMemory:
    """Which (stage, first, last) fit in memory in which mode, as (S, W, W) arrays.

    Memory does not depend on the layout: one instance serves every layout of a shape.
    """

    def __init__(self, prices: RangePrices, shape: Shape, limit: int):
        table, num_stages = shape.table, shape.num_stages
        width = table.num_layers - num_stages + 1
        self.ordered = np.triu(np.ones((width, width), dtype=bool))
        self.fixed = windows(prices.fixed_memory(table, shape.dp, shape.zero, table.params_range,
                                                 table.params_max_range, table.kv_max_range),
                             num_stages)
        self.in_flight = shape.in_flight()[:, None, None]
        self.table, self.num_stages = table, num_stages
        self.spare = limit - self.fixed

    @cached_property
    def fits(self) -> dict[RecomputeMode, np.ndarray]:
        """Per allowed mode, in the order none, selective, full: (S, W, W), whether the
        stage on those layers fits in that mode (priced when first asked: the memory check
        of a shape, :attr:`least_memory`, needs none of it)."""
        return {mode: self.ordered & (self._activations(mode) <= self.spare)
                for mode in self.table.modes}

    def _activations(self, mode: RecomputeMode) -> np.ndarray:
        """In-flight kept activations plus the working set of every stage in ``mode``."""
        return self.in_flight * windows(self.table.kept_range[mode], self.num_stages) \
            + windows(self.table.work_range[mode], self.num_stages)

    def split_memory(self, firsts: np.ndarray, lasts: np.ndarray) -> np.ndarray:
        """Per stage s of the split (layers ``firsts[s]`` .. ``lasts[s]``), its least bytes
        over the allowed modes: :attr:`least_memory` at those entries, priced alone."""
        stages = np.arange(self.num_stages)
        in_flight = self.in_flight[:, 0, 0]
        least = np.min([in_flight * self.table.kept_range[mode][firsts, lasts]
                        + self.table.work_range[mode][firsts, lasts]
                        for mode in self.table.modes], axis=0)
        return self.fixed[stages, firsts - stages, lasts - stages] + least

    @property
    def least_memory(self) -> np.ndarray:
        """(S, W, W) least bytes of each stage over the allowed modes (INF: not a stage)."""
        least = np.min([self._activations(mode) for mode in self.table.modes], axis=0)
        return np.where(self.ordered, self.fixed + least, INF)

    def effective(self, times: dict[RecomputeMode, np.ndarray]) -> np.ndarray:
        """τ_eff: ``times`` of the first mode that fits, in the order none, selective, full
        (INF where none fits).

        Per entry τ_none <= τ_selective <= τ_full (the reruns add sel_fwd <= fwd ticks, and
        full also the forward collectives), so the first mode that fits is the fastest.
        """
        effective = np.full(self.ordered.shape, INF, dtype=np.int64)
        for mode in reversed(tuple(self.fits)):
            effective = np.where(self.fits[mode], times[mode], effective)
        return effective

    def mode(self, stage: int, first_offset: int, last_offset: int) -> RecomputeMode | None:
        """The mode τ_eff took at one entry: the first that fits (None: none fits)."""
        index = (stage, first_offset, last_offset)
        return next((mode for mode, fits in self.fits.items() if fits[index]), None)


def per_stage(geometries: list[StageGeometry], matrix_of) -> np.ndarray:
    """(S, W, W): stage s's window of the L x L matrix of its geometry."""
    num_stages = len(geometries)
    stages_of: dict[StageGeometry, list[int]] = {}
    for stage, geometry in enumerate(geometries):
        stages_of.setdefault(geometry, []).append(stage)
    if len(stages_of) == 1:
        return windows(matrix_of(geometries[0]), num_stages)
    stacked = None
    for geometry, stages in stages_of.items():
        view = windows(matrix_of(geometry), num_stages)
        if stacked is None:
            stacked = np.empty(view.shape, dtype=np.int64)
        stacked[stages] = view[stages]
    return stacked


def stage_times(prices: RangePrices, shape: Shape,
                geometries: list[StageGeometry]) -> dict[RecomputeMode, np.ndarray]:
    """Per allowed mode, τ_ρ(s, f, l) of every stage (:func:`per_stage` of the chunk times of
    its geometry), read-only.  They depend on the layer table, the geometries (so S) and
    the gathers' group size alone, and a layout's geometries recur across outer choices
    (other d and z), so they are kept in the table's cache, per (geometries, gather group
    size), at most ``STAGE_TIMES_BYTES`` of them (cleared when full)."""
    table = shape.table
    kept = table.cache.setdefault("stage times", {})
    key = (tuple(geometries), shape.gather_dp)
    if key not in kept:
        times = {mode: per_stage(geometries, lambda g, mode=mode: prices.chunk_time(
            table, g, mode, shape.gather_dp)) for mode in table.modes}
        for matrix in times.values():
            matrix.flags.writeable = False
        size = sum(matrix.nbytes for matrix in times.values())
        if sum(entry[1] for entry in kept.values()) + size > STAGE_TIMES_BYTES:
            kept.clear()
        kept[key] = (times, size)
    return kept[key][0]


def fastest_tau(prices: RangePrices, shape: Shape, geometries: list[StageGeometry]) -> int:
    """A lower bound on max_s τ_s of every plan of the shape on these geometries (v = 1):
    the min-max over contiguous splits of each stage's time in the first allowed mode of
    none, selective, full, memory ignored.  That mode's τ is at most every allowed mode's
    at each entry (:meth:`SuffixMemory.effective`), and τ_eff is one of them or INF, so
    this is at most the walk's first τ pass (τ_eff, no sync cap), hence at most max_s τ_s
    of every plan the walk may offer."""
    table = shape.table
    times = stage_times(prices, shape, geometries)[table.modes[0]]
    width = table.num_layers - shape.num_stages + 1
    ordered = np.triu(np.ones((width, width), dtype=bool))
    return least_max(np.where(ordered, times, INF))


def pareto_walk(prices: RangePrices, shape: Shape, memory: SuffixMemory,
                geometries: list[StageGeometry], may_beat: Callable[[int], bool],
                offer: Callable[[int, tuple[Stage, ...]], None], sync_floor: int = 0) -> int:
    """Offer every point of the (max τ, max exposed) front that may beat the incumbent.

    ``may_beat(T)`` says whether objective T could still win; ``offer(T, stages)``
    hands over a plan's split.  ``sync_floor``: a lower bound on max_s exposed_s of every
    plan of the shape on these geometries (the layout's sync bound).  The walk stops at
    step k once rounds·τ_k + ``sync_floor`` cannot win: every plan not yet offered has
    σ_P <= Y_k, so τ_P >= τ_k (the argument above), and T_P >= rounds·τ_k + σ_P.
    Returns the number of kernel passes run.
    """
    table = shape.table
    tau = memory.effective(stage_times(prices, shape, geometries))
    exposed = None  # priced once a first point may win (most walks stop before)
    rounds, passes, sync_cap = shape.rounds, 0, INF
    while True:
        passes += 2
        tau_value, _ = fill_table(tau if exposed is None else
                                  np.where(exposed <= sync_cap, tau, INF))
        tau_k = int(tau_value[0, 0])
        if tau_k >= INF or not may_beat(rounds * tau_k + sync_floor):
            return passes
        if exposed is None:
            exposed = per_stage(geometries, lambda g: prices.exposed_range(
                table, g, shape.dp, shape.zero))
        sync_value, choice = fill_table(np.where(tau <= tau_k, exposed, INF))
        sigma = int(sync_value[0, 0])
        objective = rounds * tau_k + sigma
        if may_beat(objective):
            split = backtrack(choice)
            offer(objective, tuple(
                Stage(first, last, memory.mode(stage, first - stage, last - stage))
                for stage, (first, last) in enumerate(split)))
        if sigma == 0:
            return passes
        sync_cap = sigma - 1


def single_stage(prices: RangePrices, shape: Shape, memory: SuffixMemory,
                 geometry: StageGeometry, may_beat: Callable[[int], bool],
                 offer: Callable[[int, tuple[Stage, ...]], None]) -> int:
    """:func:`pareto_walk` for S = 1, where the only split puts every layer on the one stage:
    its τ and exposed sync are read at that one range instead of over whole matrices.

    The walk's front has then one point, (τ_eff(0, L − 1), exposed(0, L − 1)), with τ_eff
    the first mode that fits (none, selective, full); the same objective and mode are
    offered here.  Returns the number of ranges priced (1, or 0 when no mode fits).
    """
    table = shape.table
    last = table.num_layers - 1
    mode = memory.mode(0, 0, last)
    if mode is None:
        return 0
    whole = RangeSet(("whole",), np.array([0]), np.array([last]))
    tau = int(prices.chunk_time(table, geometry, mode, shape.gather_dp, at=whole)[0])
    if not may_beat(shape.rounds * tau):
        return 1
    totals = [np.array([matrix[0, last]]) for matrix in (
        table.dense_range, table.expert_range, table.bwd_range, table.fwd_range)]
    sigma = int(prices.exposed(table, geometry, shape.dp, shape.zero, *totals)[0])
    objective = shape.rounds * tau + sigma
    if may_beat(objective):
        offer(objective, (Stage(0, last, mode),))
    return 1
