r"""The DP's SDP search: the best SDP plan of the structured space (DESIGN §7).

Space.  For every (configuration c, microbatch b) of ``instance.choices``, worker count
d >= 2 with a·d <= N, allowed level, masking and holder count h, ZeRO stage z = 0 and
the larger allowed of 1 and 2 (1 and 2 price time identically — each all-reduce split
into a reduce-scatter and an all-gather, cost model §5 c — and 2 only shrinks memory;
0 keeps the all-reduces), an allowed recompute mode, a design (grouped, cyclic:
:func:`nest_cp.cost.sdp.design_mask`) and a rank layout λ of the network's structured
layouts (S = 1; structured space v3a: v2's 24 orders on the canonical device order,
then on three tiers or more the other device orders and the spare-first offsets,
``NetworkModel.structured_layouts``; layouts giving equal placements searched once).
Objective: the least T_eff, exactly as a rational; ties to the least T, then the least
key (choice index, d, h, level, masking, z, mode, design, layout).

Sub-problems.  (c, b, d, h, level, masking, z) fixes m = ceil(B / (b·e·d)) and, because
every unit is held by exactly h workers, Σ_w C_w (forward masking: d·C_shared +
h·Σ_u C_u; backward: d·C_all − (d − h)·Σ_u wgrad_u), so within a sub-problem T_eff
is T times a constant, and

    T ≥ m·ceil(Σ_w C_w / d) + (cheapest sync floor)   ⇒   a bound on T_eff.

Sub-problems are visited in order of that bound and skipped once it cannot beat the
incumbent; a sub-problem whose average worker memory (a lower bound on the largest)
exceeds HBM under its leanest mode is skipped too.

Pricing (a different algorithm from the evaluator: vectorised over the d × U mask
matrix M).  With per-unit vectors from :func:`nest_cp.cost.sdp.unit_table` (the same rounded
shares the evaluator uses):

    C_w    = C_shared + M·C_u                    (backward: C_all − Σ wgrad_u + M·wgrad)
    τ_w    = C_w + recompute_w + coll_shared(σ_w) + M·coll_u(σ_w)
             (tp_comm_overlap, σ_w's TP groups tier-0 local: each share's TP part per
             direction max(⌈C/t⌉, C − X_{w,l}), X_{w,l} = shared_l + M·(u's ticks in l)
             [backward masking: every unit's, less the unheld ones' wgrad], §5 e)
    RS_w   = max_j ( shared_j + M·unit_sync[:, j] + broadcast_j )   (gradient phase)
    AG_w   = max_j ( shared_j + M·unit_sync[:, j] )                  (weight gathers)
    exposed_w = [overlap_grad_reduce ? max(0, RS_w − R_w) : RS_w]
                + [overlap_param_gather ? max(0, AG_w − F_w) : AG_w]      (§5 d)
    mem_w  = state(P_shared, d) + state(M·P_u, h) [+ (ΣP_u − M·P_u)·w] + kept_w + max_l view_{w,l}

where σ_w are the paths of worker w's own TP / EP groups (workers with equal paths
share one computation), unit_sync[u, j] prices unit u's sync (each phase apart) on
the path of its holders' ranks (multi-channel on tiered networks, §5 a), and R_w /
F_w are the backward / forward ticks inside τ_w.  ``tests/test_sdp_backends.py`` checks
these numbers against the evaluator.
"""

from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass, field
from fractions import Fraction

import numpy as np

from nest_cp.cost import terms as cost
from nest_cp.cost.sdp import (
    SdpDesign,
    UnitTable,
    broadcast_ticks,
    design_mask,
    effective_ticks,
    unit_table,
)
from nest_cp.dp.geometry import fastest_group_paths, rank_devices
from nest_cp.dp.planner import stop_after_seconds
from nest_cp.model.instance import (
    CollectiveGroup,
    Instance,
    IntraConfig,
    Phase,
    RecomputeMode,
    SdpLevel,
    SdpMasking,
    Strategy,
)
from nest_cp.model.network import NetworkModel, Path
from nest_cp.model.plan import Plan, RankLayout, SdpMask, Stage
from nest_cp.model.result import SolveResult, Space, Status

logger = logging.getLogger(__name__)

MODE_ORDER = (RecomputeMode.NONE, RecomputeMode.SELECTIVE, RecomputeMode.FULL)  # time grows
MASKS_KEPT = 8  # design masks cached by the search


@dataclass(frozen=True, slots=True)
class _Mask:
    """A design's mask: its rows, its d × U 0/1 matrix and every unit's holder set."""

    rows: tuple[tuple[int, ...], ...]
    matrix: np.ndarray
    holder_sets: list[tuple[int, ...]]


@dataclass(frozen=True, slots=True)
class SubProblem:
    """(c, b, d, h, level, masking, z) with its bound on T_eff and Σ_w C_w."""

    bound: Fraction
    choice_index: int
    workers: int
    holders: int
    level: SdpLevel
    masking: SdpMasking
    zero: int
    worker_compute: int  # Σ_w C_w, the same for every mask of the sub-problem

    @property
    def key(self) -> tuple:
        return (self.choice_index, self.workers, self.holders, _index(SdpLevel, self.level),
                _index(SdpMasking, self.masking), self.zero)


@dataclass(slots=True)
class SdpBest:
    """The incumbent SDP plan and what it took to find it."""

    effective: Fraction | None = None
    objective: int | None = None
    key: tuple = ()
    plan: Plan | None = None
    design: SdpDesign | None = None
    layout: RankLayout | None = None
    excess_bytes: int | None = None
    excess_where: str = ""
    average_excess_bytes: Fraction | None = None  # least excess of an average worker
    subproblems: int = 0
    searched: int = 0
    candidates: int = 0

    def may_beat(self, bound: Fraction, key: tuple = ()) -> bool:
        return self.effective is None or (bound, key) < (self.effective, self.key)

    def offer(self, effective: Fraction, objective: int, key: tuple) -> bool:
        """Whether (T_eff, T, key) beats the incumbent under the tie rule."""
        return self.effective is None or (effective, objective, key) < (
            self.effective, self.objective, self.key)


def solve_sdp(instance: Instance, options=None) -> SolveResult:
    """The DP's best SDP plan (OPTIMAL over the structured SDP space) or INFEASIBLE.

    Anytime like the plain DP (:func:`nest_cp.dp.planner.solve`): with
    ``options.extra[STOP_AFTER_S]`` it stops after :func:`stop_after_seconds`, the deadline
    checked before every sub-problem and every layout, and returns the incumbent FEASIBLE
    with the T_eff bound min(incumbent, β), or UNKNOWN without a plan, where β is the
    least bound of the sub-problems not searched to the end.  β is valid: a sub-problem
    searched to the end offered every plan that may beat the incumbent, one skipped by its
    bound or its memory has none below the incumbent or none at all, and every plan of the
    others, the one being searched included, has a T_eff of at least its sub-problem's
    bound (module docstring, "Sub-problems").
    """
    start = time.perf_counter()
    stop_after = stop_after_seconds(options)
    search = _SdpSearch(instance, None if stop_after is None else start + stop_after)
    best = search.run()
    elapsed = time.perf_counter() - start
    stats = {"sdp_subproblems": best.subproblems, "sdp_searched": best.searched,
             "sdp_candidates": best.candidates}
    if search.stopped_bound is not None:
        return _stopped(best, search.stopped_bound, elapsed, stats)
    if best.plan is None:
        return SolveResult(backend="dp", status=Status.INFEASIBLE, wall_time_s=elapsed,
                           space=Space.STRUCTURED, message=_infeasible_reason(best),
                           stats=stats)
    stats.update(design=best.design.value, layout=best.layout.name)
    return SolveResult(backend="dp", status=Status.OPTIMAL, plan=best.plan,
                       objective_ticks=best.objective, wall_time_s=elapsed,
                       space=Space.STRUCTURED, stats=stats, effective=best.effective,
                       effective_bound=best.effective)


def _stopped(best: SdpBest, unsearched_bound: Fraction, elapsed: float,
             stats: dict) -> SolveResult:
    """The result of an SDP search stopped at its time limit (see :func:`solve_sdp`)."""
    if best.plan is None:
        return SolveResult(backend="dp", status=Status.UNKNOWN, wall_time_s=elapsed,
                           space=Space.STRUCTURED, stats=stats,
                           message="stopped at the time limit before finding an SDP plan")
    stats.update(design=best.design.value, layout=best.layout.name)
    return SolveResult(backend="dp", status=Status.FEASIBLE, plan=best.plan,
                       objective_ticks=best.objective, wall_time_s=elapsed,
                       space=Space.STRUCTURED, stats=stats, effective=best.effective,
                       effective_bound=min(best.effective, unsearched_bound),
                       message="stopped at the time limit")


class _Stopped(Exception):
    """The deadline passed inside one sub-problem."""


def price_plan(instance: Instance, plan: Plan) -> tuple[int, int]:
    """(T, the largest worker memory) of a placed SDP plan, priced by this module's
    vectorised algorithm: what the differential tests compare with the evaluator."""
    search = _SdpSearch(instance)
    choice_index = instance.choices.index((plan.config, plan.microbatch))
    vectors = search._vectors(choice_index, plan.sdp.level)
    masking, workers, holders = plan.sdp.masking, plan.num_replicas, plan.sdp.holders
    sub = SubProblem(Fraction(0), choice_index, workers, holders, plan.sdp.level, masking,
                     plan.zero, vectors.worker_compute(masking, workers, holders))
    matrix = vectors.matrix(plan.sdp.mask)
    mode = plan.stages[0].recompute
    rounds = cost.num_microbatches(instance.training.global_batch, plan.microbatch,
                                   plan.config, workers)
    total = search._iteration_ticks(vectors, matrix,
                                    _holder_sets(plan.sdp.mask, vectors.table.num_units),
                                    plan.placement, sub, mode, plan.config, rounds)
    memory = vectors.memory(matrix, sub, mode, instance.training.optimizer, plan.zero)
    return total, int(memory.max())


def _infeasible_reason(best: SdpBest) -> str:
    if best.excess_bytes is None and best.average_excess_bytes is not None:
        return (f"no SDP plan fits: even an average worker exceeds usable HBM by at least "
                f"{math.ceil(best.average_excess_bytes)} bytes")
    if best.excess_bytes is None:
        return ("no SDP plan fits: no structured design applies (grouped needs h | d and "
                "(d/h) | U, cyclic d | U) to any allowed (d, h)")
    return (f"no SDP plan fits: worker memory exceeds usable HBM by {best.excess_bytes} bytes "
            f"at best ({best.excess_where})")


def _index(enum, member) -> int:
    return list(enum).index(member)


class _SdpSearch:
    """Sub-problems in bound order, then designs, modes and layouts, priced vectorised."""

    def __init__(self, instance: Instance, deadline: float | None = None):
        self.instance = instance
        self.deadline = deadline  # perf_counter() time to stop at, or None
        self.stopped_bound: Fraction | None = None  # β of solve_sdp once stopped
        self.network = NetworkModel(instance.cluster)
        self._orders: dict[tuple[int, ...], np.ndarray] = {}  # by the layout's digits
        self.limit = instance.cluster.usable_hbm_bytes
        training = instance.training
        split = sorted(set(training.zero_stages) & {1, 2})[-1:]
        self.zeros = [0] * (0 in training.zero_stages) + split  # z 1 and 2 sync alike
        self.modes = [mode for mode in MODE_ORDER if mode in training.recompute_modes]
        self.vectors: dict[tuple[int, SdpLevel], _UnitVectors] = {}
        self.best = SdpBest()
        self._ticks: dict[tuple, int] = {}
        self._masks: dict[tuple, _Mask | None] = {}
        self._floors: dict[tuple, int] = {}  # cheapest prices of the bounds, memoised
        self._group_paths: dict[tuple, cost.GroupPaths] = {}
        self._paths: dict[tuple[int, ...], Path] = {}

    # ------------------------------------------------------------ outer loop

    def run(self) -> SdpBest:
        if not self.zeros:
            return self.best
        subproblems = self._subproblems()
        self.best.subproblems = len(subproblems)
        ordered = sorted(subproblems, key=lambda s: (float(s.bound), s.key))
        for position, sub in enumerate(ordered):
            if not self.best.may_beat(sub.bound, sub.key):
                continue
            try:
                self._check_deadline()
                if self._memory_ruled_out(sub):
                    continue
                self.best.searched += 1
                self._search(sub)
            except _Stopped:
                self.stopped_bound = min(rest.bound for rest in ordered[position:])
                break
        return self.best

    def _order_of(self, layout: RankLayout) -> np.ndarray:
        """The device order ``layout`` reads its positions through, as an array."""
        if layout.digits not in self._orders:
            self._orders[layout.digits] = np.array(self.network.layout_order(layout),
                                                   dtype=np.int64)
        return self._orders[layout.digits]

    def _check_deadline(self) -> None:
        if self.deadline is not None and time.perf_counter() >= self.deadline:
            raise _Stopped

    def _subproblems(self) -> list[SubProblem]:
        training, devices = self.instance.training, self.instance.cluster.num_devices
        found = []
        for choice_index, (config, microbatch) in enumerate(self.instance.choices):
            if config.cp > 1:  # SDP plans keep c = 1 (docs/context-parallelism.md)
                continue
            for level in training.sdp.levels:
                vectors = self._vectors(choice_index, level)
                if not vectors.table.num_units:
                    continue
                for workers, holders, zero in self._shapes(config, devices):
                    rounds = cost.num_microbatches(training.global_batch, microbatch, config,
                                                   workers)
                    floor = self._shared_sync_floor(vectors, workers, config, zero) \
                        + self._unit_sync_floor(vectors, workers, holders, config, zero)
                    for masking in training.sdp.maskings:
                        total = vectors.worker_compute(masking, workers, holders)
                        bound = effective_ticks(
                            rounds * -(-total // workers)
                            + self._exposed_floor(vectors, workers, masking, zero, floor),
                            workers, vectors.table.full_compute_ticks, total)
                        found.append(SubProblem(bound, choice_index, workers, holders,
                                                level, masking, zero, total))
        return found

    def _shapes(self, config: IntraConfig, devices: int):
        """Every allowed (d, h, z) of a configuration."""
        for workers in range(2, devices // config.devices + 1):
            for holders in self.instance.training.sdp.holder_counts(workers):
                for zero in self.zeros:
                    yield workers, holders, zero

    def _exposed_floor(self, vectors: _UnitVectors, workers: int, masking: SdpMasking,
                       zero: int, floor: int) -> int:
        """A floor on every worker's exposed sync, from ``floor`` on its shared and held
        units' syncs (both phases).

        Every worker's sync_w = RS_w + AG_w is at least ``floor`` plus, under backward
        masking, the broadcasts; exposed_w >= sync_w − [overlap_grad_reduce] R_w −
        [overlap_param_gather, z ∈ {1, 2}] F_w (cost model §5 d, as max(0, x − y) >=
        x − y), and R_w, F_w are at most the backward and forward of the shared part and
        every unit.
        """
        training = self.instance.training
        if masking is SdpMasking.BACKWARD:
            floor += self._broadcast_floor(vectors, workers)
        if training.overlap_grad_reduce:
            floor -= vectors.backward_ceiling
        if training.overlap_param_gather and cost.gathers_weights(zero):
            floor -= vectors.forward_ceiling
        return max(0, floor)

    def _vectors(self, choice_index: int, level: SdpLevel) -> _UnitVectors:
        key = (choice_index, level)
        if key not in self.vectors:
            config, microbatch = self.instance.choices[choice_index]
            self.vectors[key] = _UnitVectors(unit_table(self.instance, config, microbatch,
                                                        level), self.instance.workload.num_layers)
        return self.vectors[key]

    def _shared_sync_floor(self, vectors: _UnitVectors, workers: int, config: IntraConfig,
                           zero: int) -> int:
        """The shared sync on the fastest path any d·e (d) distinct devices may have."""
        if not self.network.is_hierarchical:
            return 0
        training, floor = self.instance.training, 0
        for params, size in ((vectors.shared_dense, workers * config.ep),
                             (vectors.shared_expert, workers)):
            if params and size > 1:
                floor += self._cheapest(lambda path, params=params, size=size:
                                        cost.gradient_sync_ticks(params, training.optimizer,
                                                                 zero, size, path,
                                                                 training.tick_s), size)
        return floor

    def _cheapest(self, price, size: int) -> int:
        """min of price(path) over :func:`fastest_group_paths` (size): no group of ``size``
        distinct devices runs on a faster path (cost model §5 a)."""
        return min(price(path) for path in fastest_group_paths(self.network, size))

    def _unit_sync_floor(self, vectors: _UnitVectors, workers: int, holders: int,
                         config: IntraConfig, zero: int) -> int:
        """Every worker holds U_b·h/d units of each design block b and syncs each over its h
        holders: at least the cheapest U_b·h/d such syncs of the block."""
        if not self.network.is_hierarchical:
            return 0
        training, floor = self.instance.training, 0
        for block in vectors.table.blocks:
            held = len(block) * holders // workers
            if not held or len(block) * holders % workers:
                continue
            prices = []
            for unit in block:
                price = 0
                for params, size in ((int(vectors.dense[unit]), holders * config.ep),
                                     (int(vectors.expert[unit]), holders)):
                    if params and size > 1:
                        key = ("sync", params, size, zero)
                        if key not in self._floors:
                            self._floors[key] = self._cheapest(
                                lambda path, params=params, size=size:
                                cost.gradient_sync_ticks(params, training.optimizer, zero,
                                                         size, path, training.tick_s), size)
                        price += self._floors[key]
                prices.append(price)
            floor += sum(sorted(prices)[:held])
        return floor

    def _broadcast_floor(self, vectors: _UnitVectors, workers: int) -> int:
        """Backward masking: every unit's weights broadcast over d ranks, fastest path."""
        if not self.network.is_hierarchical:
            return 0
        training = self.instance.training
        volumes, counts = np.unique(vectors.params, return_counts=True)
        return sum(int(count) * self._cheapest(
            lambda path, volume=int(volume): broadcast_ticks(
                volume * training.optimizer.weight_bytes, workers, path, training.tick_s),
            workers) for volume, count in zip(volumes, counts, strict=True))

    def _memory_ruled_out(self, sub: SubProblem) -> bool:
        """Average worker memory under the leanest allowed mode exceeds HBM (exact bound)."""
        vectors = self._vectors(sub.choice_index, sub.level)
        least = min(vectors.average_memory(sub, mode, self.instance.training.optimizer,
                                           sub.zero) for mode in self.modes)
        if least <= self.limit:
            return False
        if self.best.average_excess_bytes is None or \
                least - self.limit < self.best.average_excess_bytes:
            self.best.average_excess_bytes = least - self.limit
        return True

    # ------------------------------------------------------------ one sub-problem

    def _search(self, sub: SubProblem) -> None:
        vectors = self._vectors(sub.choice_index, sub.level)
        config, microbatch = self.instance.choices[sub.choice_index]
        training = self.instance.training
        rounds = cost.num_microbatches(training.global_batch, microbatch, config, sub.workers)
        masks_seen: set = set()
        for design in SdpDesign:
            mask = self._mask(sub, design)
            if mask is None or mask.rows in masks_seen:
                continue
            masks_seen.add(mask.rows)
            rows, matrix = mask.rows, mask.matrix
            mode = self._fitting_mode(sub, vectors, matrix, config, microbatch, design)
            if mode is None:
                continue
            placements: set = set()
            for layout_index, layout in enumerate(self.network.structured_layouts):
                self._check_deadline()
                devices = rank_devices(layout, config, 1, sub.workers, self._order_of(layout),
                                       self.network.node_size)[0]
                if devices.tobytes() in placements:
                    continue
                placements.add(devices.tobytes())
                workers = [tuple(row) for row in devices.tolist()]
                key = sub.key + (_index(RecomputeMode, mode), _index(SdpDesign, design),
                                 layout_index)
                self.best.candidates += 1
                total = self._iteration_ticks(vectors, matrix, mask.holder_sets,
                                              (tuple(workers),), sub, mode, config, rounds)
                effective = effective_ticks(total, sub.workers,
                                            vectors.table.full_compute_ticks,
                                            sub.worker_compute)
                if self.best.offer(effective, total, key):
                    self._accept(sub, rows, (tuple(workers),), mode, config, microbatch,
                                 effective, total, key, design, layout)

    def _mask(self, sub: SubProblem, design: SdpDesign) -> _Mask | None:
        """A design's mask for the sub-problem's (c, b, level, d, h), kept for the other
        masking (the few most recent only: a mask matrix has d·U entries)."""
        key = (sub.choice_index, sub.level, design, sub.workers, sub.holders)
        if key not in self._masks:
            vectors = self._vectors(sub.choice_index, sub.level)
            rows = design_mask(vectors.table, design, sub.workers, sub.holders)
            if len(self._masks) >= MASKS_KEPT:
                self._masks.pop(next(iter(self._masks)))
            self._masks[key] = None if rows is None else _Mask(
                rows, vectors.matrix(rows), _holder_sets(rows, vectors.table.num_units))
        return self._masks[key]

    def _fitting_mode(self, sub: SubProblem, vectors: _UnitVectors, matrix: np.ndarray,
                      config: IntraConfig, microbatch: int, design: SdpDesign
                      ) -> RecomputeMode | None:
        """The fastest allowed recompute mode under which every worker fits."""
        optimizer = self.instance.training.optimizer
        least = None
        for mode in self.modes:
            memory = int(vectors.memory(matrix, sub, mode, optimizer, sub.zero).max())
            if memory <= self.limit:
                return mode
            least = memory if least is None else min(least, memory)
        excess = least - self.limit
        if self.best.excess_bytes is None or excess < self.best.excess_bytes:
            self.best.excess_bytes = excess
            self.best.excess_where = (f"config tp={config.tp}, ep={config.ep}, b={microbatch}, "
                                      f"d={sub.workers}, h={sub.holders}, {sub.level.value} "
                                      f"level, {sub.masking.value} masking, {design.value}")
        return None

    def _accept(self, sub: SubProblem, rows, placement, mode: RecomputeMode,
                config: IntraConfig, microbatch: int, effective: Fraction, total: int,
                key: tuple, design: SdpDesign, layout: RankLayout) -> None:
        best = self.best
        best.effective, best.objective, best.key = effective, total, key
        best.design, best.layout = design, layout
        layers = self.instance.workload.num_layers
        best.plan = Plan(config, microbatch, sub.zero, sub.workers,
                         (Stage(0, layers - 1, mode),), placement,
                         strategy=Strategy.SDP,
                         sdp=SdpMask(sub.level, sub.masking, sub.holders, rows))
        logger.debug("SDP incumbent T_eff %s (T %d) at %s", effective, total, key)

    # ------------------------------------------------------------ pricing

    def _iteration_ticks(self, vectors: _UnitVectors, matrix: np.ndarray, holder_sets,
                         placement, sub: SubProblem, mode: RecomputeMode, config: IntraConfig,
                         rounds: int) -> int:
        """T = m·max_w τ_w + max_w exposed(sync_w) of one candidate."""
        tick_s, training = self.instance.training.tick_s, self.instance.training
        workers = placement[0]
        signatures: dict[cost.GroupPaths, list[int]] = {}
        for worker, devices in enumerate(workers):
            key = devices if config.devices > 1 else ()
            if key not in self._group_paths:
                self._group_paths[key] = cost.GroupPaths.of_replica(self.network, devices,
                                                                    config)
            signatures.setdefault(self._group_paths[key], []).append(worker)
        compute, backward = vectors.compute(matrix, sub.masking)
        tau = compute + vectors.rerun(matrix, sub.masking, mode)
        for paths, members in signatures.items():
            hiding = training.tp_comm_overlap and paths.tp_local
            tau[members] += vectors.collective_ticks(matrix[members], sub.masking, mode,
                                                     config, paths, tick_s, hiding)
        reduce, gather = self._sync(vectors, matrix, holder_sets, workers, sub, config)
        if training.overlap_grad_reduce:
            reduce = np.maximum(reduce - backward, 0)
        if training.overlap_param_gather:
            gather = np.maximum(gather - vectors.forward(matrix, sub.masking), 0)
        return rounds * int(tau.max()) + int((reduce + gather).max())

    def _sync(self, vectors: _UnitVectors, matrix: np.ndarray, holder_sets, workers,
              sub: SubProblem, config: IntraConfig) -> tuple[np.ndarray, np.ndarray]:
        """(RS_w, AG_w): each phase of the sync of the slowest rank j of each worker
        (module docstring); the broadcasts of backward masking are in the gradient phase.

        A unit's sync depends only on its volume and its holder set, so it is priced
        once per distinct (holder set, dense params, expert params).
        """
        training = self.instance.training
        everyone = tuple(range(sub.workers))
        distinct: dict[tuple, int] = {}
        groups = np.array([distinct.setdefault(
            (holders, int(vectors.dense[u]), int(vectors.expert[u])), len(distinct))
            for u, holders in enumerate(holder_sets)],
            dtype=np.int64)
        worst = np.zeros((2, sub.workers), dtype=np.int64)
        for rank in range(config.devices):
            shared = np.add(
                self._parts(vectors.shared_dense, everyone, workers, rank, config, sub.zero,
                            dense=True),
                self._parts(vectors.shared_expert, everyone, workers, rank, config, sub.zero,
                            dense=False))
            priced = np.array([np.add(
                self._parts(dense, holders, workers, rank, config, sub.zero, dense=True),
                self._parts(expert, holders, workers, rank, config, sub.zero, dense=False))
                for holders, dense, expert in distinct], dtype=np.int64).reshape(-1, 2)
            per_unit = priced[groups] if len(groups) else np.zeros((0, 2), dtype=np.int64)
            if sub.masking is SdpMasking.BACKWARD:
                path = self._path(tuple(workers[w][rank] for w in everyone))
                volumes, counts = np.unique(vectors.params, return_counts=True)
                shared[0] += sum(int(count) * broadcast_ticks(
                    int(volume) * training.optimizer.weight_bytes, sub.workers, path,
                    training.tick_s) for volume, count in zip(volumes, counts, strict=True))
            worst = np.maximum(worst, shared[:, None] + (matrix @ per_unit).T)
        return worst[0], worst[1]

    def _parts(self, params: int, members: tuple[int, ...], workers, rank: int,
               config: IntraConfig, zero: int, dense: bool) -> tuple[int, int]:
        """One gradient sync of rank ``rank`` over the workers ``members``, (gradient phase,
        weight gather) as :func:`nest_cp.cost.terms.gradient_sync_parts` (cached)."""
        if params == 0:
            return 0, 0
        if dense:
            tensor = rank % config.tp
            devices = tuple(workers[w][tensor + config.tp * e] for w in members
                            for e in range(config.ep))
        else:
            devices = tuple(workers[w][rank] for w in members)
        if len(devices) <= 1:
            return 0, 0
        path = self._path(devices)
        key = (params, len(devices), path, zero)
        if key not in self._ticks:
            training = self.instance.training
            self._ticks[key] = cost.gradient_sync_parts(params, training.optimizer, zero,
                                                        len(devices), path, training.tick_s)
        return self._ticks[key]

    def _path(self, devices: tuple[int, ...]) -> Path:
        """:meth:`NetworkModel.group_path` of ``devices`` (multi-channel on tiered networks,
        cost model §5 a), cached per device tuple."""
        if devices not in self._paths:
            self._paths[devices] = self.network.group_path(devices)
        return self._paths[devices]


def _holder_sets(rows, units: int) -> list[tuple[int, ...]]:
    holders: list[list[int]] = [[] for _ in range(units)]
    for worker, row in enumerate(rows):
        for unit in row:
            holders[unit].append(worker)
    return [tuple(members) for members in holders]


@dataclass
class _UnitVectors:
    """A unit table as numpy vectors, with the sums and caches the pricing needs."""

    table: UnitTable
    num_layers: int
    _collectives: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        units, shared = self.table.units, self.table.shared

        def vector(name: str) -> np.ndarray:
            return np.array([getattr(u, name) for u in units], dtype=np.int64)

        def total(name: str) -> int:
            return sum(getattr(s, name) for s in shared)

        self.fwd, self.bwd, self.wgrad = vector("fwd_ticks"), vector("bwd_ticks"), \
            vector("wgrad_ticks")
        self.sel_fwd, self.dense, self.expert = vector("sel_fwd_ticks"), \
            vector("dense_params"), vector("expert_params")
        self.params = self.dense + self.expert
        self.act, self.sel_act, self.ckpt = vector("act_bytes"), vector("sel_act_bytes"), \
            vector("ckpt_bytes")
        self.shared_fwd, self.shared_bwd = total("fwd_ticks"), total("bwd_ticks")
        self.shared_fwd_by_layer = np.array([s.fwd_ticks for s in shared], dtype=np.int64)
        self.shared_bwd_by_layer = np.array([s.bwd_ticks for s in shared], dtype=np.int64)
        self.shared_sel_fwd = total("sel_fwd_ticks")
        self.shared_dense, self.shared_expert = total("dense_params"), total("expert_params")
        self.shared_act, self.shared_sel_act = total("act_bytes"), total("sel_act_bytes")
        self.shared_ckpt = total("ckpt_bytes")
        self.unit_layer = np.array([u.layer for u in units], dtype=np.int64)
        self.layer_of = np.zeros((len(units), self.num_layers), dtype=np.int64)
        self.layer_of[np.arange(len(units)), self.unit_layer] = 1
        self.shared_by_layer = {
            mode: np.array([_rebuilt(s.act_bytes, s.sel_act_bytes, mode) for s in shared],
                           dtype=np.int64) for mode in MODE_ORDER}

    # compute -----------------------------------------------------------

    @property
    def shared_compute(self) -> int:
        return self.shared_fwd + self.shared_bwd

    @property
    def backward_ceiling(self) -> int:
        """No worker's backward ticks R_w exceed the shared ones plus every unit's."""
        return self.shared_bwd + int(self.bwd.sum())

    @property
    def forward_ceiling(self) -> int:
        """No worker's forward ticks F_w exceed the shared ones plus every unit's."""
        return self.shared_fwd + int(self.fwd.sum())

    def worker_compute(self, masking: SdpMasking, workers: int, holders: int) -> int:
        """Σ_w C_w: the same for every mask holding each unit exactly h times."""
        units = int((self.fwd + self.bwd).sum())
        if masking is SdpMasking.BACKWARD:
            return workers * (self.shared_compute + units) - (workers - holders) * int(
                self.wgrad.sum())
        return workers * self.shared_compute + holders * units

    def compute(self, matrix: np.ndarray, masking: SdpMasking) -> tuple[np.ndarray, np.ndarray]:
        """(C_w, R_w) for every worker."""
        if masking is SdpMasking.BACKWARD:
            masked = int(self.wgrad.sum()) - matrix @ self.wgrad
            return (self.shared_compute + int((self.fwd + self.bwd).sum()) - masked,
                    self.shared_bwd + int(self.bwd.sum()) - masked)
        return (self.shared_compute + matrix @ (self.fwd + self.bwd),
                self.shared_bwd + matrix @ self.bwd)

    def forward(self, matrix: np.ndarray, masking: SdpMasking) -> np.ndarray:
        """F_w: the forward ticks of every worker (every unit's under backward masking)."""
        if masking is SdpMasking.BACKWARD:
            return np.full(len(matrix), self.forward_ceiling, dtype=np.int64)
        return self.shared_fwd + matrix @ self.fwd

    def rerun(self, matrix: np.ndarray, masking: SdpMasking, mode: RecomputeMode) -> np.ndarray:
        """Recomputed forward compute of every worker (collectives added by the caller)."""
        if mode is RecomputeMode.NONE:
            return np.zeros(len(matrix), dtype=np.int64)
        shared, per_unit = (self.shared_fwd, self.fwd) if mode is RecomputeMode.FULL else \
            (self.shared_sel_fwd, self.sel_fwd)
        if masking is SdpMasking.BACKWARD:
            return np.full(len(matrix), shared + int(per_unit.sum()), dtype=np.int64)
        return shared + matrix @ per_unit

    def collective_ticks(self, matrix: np.ndarray, masking: SdpMasking, mode: RecomputeMode,
                         config: IntraConfig, paths: cost.GroupPaths, tick_s: float,
                         hiding: bool) -> np.ndarray:
        """Every worker's intra-layer collective ticks per microbatch on ``paths``, the rerun
        forward's included under full recomputation; with ``hiding`` (``tp_comm_overlap``
        on a worker whose TP groups are tier-0 local) each share's TP collectives of one
        direction show max(⌈C/t⌉, C − X), X the worker's own ticks of the share's layer
        (cost model §5 e)."""
        shared, units = self.collective_parts(config, paths, tick_s)
        own = self.own_layer_ticks(matrix, masking) if hiding else None
        reruns = 2 if mode is RecomputeMode.FULL else 1

        def ticks(parts: np.ndarray, layers: np.ndarray) -> np.ndarray:
            """(1 or d) × shares: the collectives of shares with ``parts`` (see
            :meth:`collective_parts`) in the layers ``layers``."""
            tp_fwd, tp_bwd = parts[0][None, :], parts[1][None, :]
            if own is not None:
                tp_fwd = _tp_exposed(tp_fwd, own[0][:, layers], config.tp)
                tp_bwd = _tp_exposed(tp_bwd, own[1][:, layers], config.tp)
            return reruns * (tp_fwd + parts[2][None, :]) + tp_bwd + parts[3][None, :]

        total = ticks(shared, np.arange(self.num_layers)).sum(axis=1)
        per_unit = ticks(units, self.unit_layer)
        if masking is SdpMasking.FORWARD:
            per_unit = per_unit * matrix
        total = total + per_unit.sum(axis=1)
        return np.broadcast_to(total, (len(matrix),)).astype(np.int64)

    def own_layer_ticks(self, matrix: np.ndarray,
                        masking: SdpMasking) -> tuple[np.ndarray, np.ndarray]:
        """(fwd, bwd): d × L ticks each worker computes of each layer, the shares it runs,
        less the weight gradients of the units it does not hold (backward masking)."""
        held = matrix.astype(np.int64)
        if masking is SdpMasking.BACKWARD:
            fwd = self.shared_fwd_by_layer + self.fwd @ self.layer_of
            bwd = self.shared_bwd_by_layer + (self.bwd - self.wgrad) @ self.layer_of
            return (np.broadcast_to(fwd, (len(held), self.num_layers)),
                    bwd + held @ (self.wgrad[:, None] * self.layer_of))
        return (self.shared_fwd_by_layer + held @ (self.fwd[:, None] * self.layer_of),
                self.shared_bwd_by_layer + held @ (self.bwd[:, None] * self.layer_of))

    def collective_parts(self, config: IntraConfig, paths: cost.GroupPaths, tick_s: float
                         ) -> tuple[np.ndarray, np.ndarray]:
        """(shared, units): 4 × L and 4 × U collective ticks of each share on ``paths``,
        rows TP forward, TP backward, EP forward, EP backward."""
        key = (config, paths)
        if key not in self._collectives:
            kinds = [(group, phase) for group in (CollectiveGroup.TP, CollectiveGroup.EP)
                     for phase in (Phase.FWD, Phase.BWD)]

            def parts(shares) -> np.ndarray:
                return np.array([[sum(cost.intra_collective_ticks(c, config, paths, tick_s)
                                      for c in share.collectives
                                      if (c.group, c.phase) == kind) for share in shares]
                                 for kind in kinds], dtype=np.int64).reshape(4, len(shares))

            self._collectives[key] = (parts(self.table.shared), parts(self.table.units))
        return self._collectives[key]

    # memory ------------------------------------------------------------

    def matrix(self, rows) -> np.ndarray:
        """The d × U 0/1 mask matrix of ``rows``."""
        matrix = np.zeros((len(rows), self.table.num_units), dtype=bool)
        for worker, row in enumerate(rows):
            matrix[worker, list(row)] = 1
        return matrix

    def _kept(self, mode: RecomputeMode) -> tuple[int, np.ndarray]:
        if mode is RecomputeMode.FULL:
            return self.shared_ckpt, self.ckpt
        if mode is RecomputeMode.SELECTIVE:
            return self.shared_sel_act, self.sel_act
        return self.shared_act, self.act

    def memory(self, matrix: np.ndarray, sub: SubProblem, mode: RecomputeMode, optimizer,
               zero: int) -> np.ndarray:
        """mem_w of every worker (module docstring)."""
        held = matrix @ self.params
        state = cost.state_bytes(self.shared_dense + self.shared_expert, optimizer, zero,
                                 sub.workers) + cost.state_bytes(held, optimizer, zero,
                                                                 sub.holders)
        shared_kept, unit_kept = self._kept(mode)
        rebuilt = np.array([_rebuilt(int(a), int(s), mode) for a, s in
                            zip(self.act, self.sel_act, strict=True)], dtype=np.int64)
        if sub.masking is SdpMasking.BACKWARD:
            state = state + (int(self.params.sum()) - held) * optimizer.weight_bytes
            kept = shared_kept + int(unit_kept.sum())
            view = self.shared_by_layer[mode] + rebuilt @ self.layer_of
            working = int(view.max()) if mode is not RecomputeMode.NONE else 0
            return state + kept + working
        kept = shared_kept + matrix @ unit_kept
        if mode is RecomputeMode.NONE:
            return state + kept
        view = self.shared_by_layer[mode][None, :] + matrix @ (rebuilt[:, None] * self.layer_of)
        return state + kept + view.max(axis=1)

    def average_memory(self, sub: SubProblem, mode: RecomputeMode, optimizer,
                       zero: int) -> Fraction:
        """Memory of the average worker without rounding: at most the largest worker's."""
        share = Fraction(sub.holders, sub.workers)
        held = share * int(self.params.sum())
        shared = self.shared_dense + self.shared_expert

        def state(params, shards: int) -> Fraction:
            return params * (Fraction(optimizer.weight_bytes, shards if zero >= 3 else 1)
                             + Fraction(optimizer.grad_bytes, shards if zero >= 2 else 1)
                             + Fraction(optimizer.state_bytes, shards if zero >= 1 else 1))

        shared_kept, unit_kept = self._kept(mode)
        total = state(shared, sub.workers) + state(held, sub.holders) + shared_kept
        if sub.masking is SdpMasking.BACKWARD:
            return total + (int(self.params.sum()) - held) * optimizer.weight_bytes + int(
                unit_kept.sum())
        return total + share * int(unit_kept.sum())


def _tp_exposed(collective: np.ndarray, compute: np.ndarray, tp: int) -> np.ndarray:
    """:func:`nest_cp.cost.terms.tp_overlap_exposed` elementwise: max(⌈C/t⌉, C − X), which
    is 0 where C = 0 (X >= 0)."""
    return np.maximum(-(-collective // tp), collective - compute)


def _rebuilt(act: int, sel_act: int, mode: RecomputeMode) -> int:
    """Bytes a share rebuilds while recomputed: act (full), act − sel_act (selective), 0."""
    if mode is RecomputeMode.FULL:
        return act
    if mode is RecomputeMode.SELECTIVE:
        return act - sel_act
    return 0
