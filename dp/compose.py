"""Chunk time, gradient sync and memory of layer ranges, composed as the evaluator composes them.

The evaluator (:mod:`nest_cp.cost.evaluate`) prices one plan term by term; this module
prices *every* layer range ``[first_layer, last_layer]`` at once for one stage's
geometry, as L x L int64 matrices built from the primitives of :mod:`nest_cp.cost.terms`
(through :class:`~nest_cp.dp.pricing.LayerTable`).  Same integers, different
algorithm; the differential tests against brute force guard it.

For a chunk (a stage when v = 1) of layers f..l on a stage with geometry g and
recompute mode ρ (DESIGN §3, §3.2):

    τ(f, l) = Σ (fwd + bwd) + rerun_ρ
              + max over g's replicas r of ( coll_r + [ρ = full] fwd coll_r
                                             + [activation] act_r(out_{f−1})
                                             + [gradient] grad_r(out_l) )
              + [z = 3] max over g's d-groups of 2 · gather(params),

where each collective costs its slowest TP or EP group of the replica (§3.2 f);
``activation`` / ``gradient`` say whether the chunk receives them (not the first /
last chunk).  Per stage, over the stage's parameter totals (all its chunks), with
each phase of the sync (gradient phase RS: all-reduce for z = 0, reduce-scatter
otherwise; weight gather AG: an all-gather for z ∈ {1, 2}, else none) priced on its
slowest group (cost model §5 c):

    RS = max over dense groups of RS(dense) + max over d-groups of RS(expert),
    AG likewise,
    exposed = [overlap_grad_reduce ? max(0, RS − Σ bwd) : RS]
              + [overlap_param_gather ? max(0, AG − Σ fwd) : AG]   (§3.2 c, §5 d),

and the memory pieces state(params) + [z = 3] buffers (§3.2 d).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from nest_cp.cost import terms as cost
from nest_cp.dp import pricing
from nest_cp.dp.geometry import PathIds, ReplicaPaths, StageGeometry
from nest_cp.dp.pricing import LayerTable
from nest_cp.model.instance import Instance, Phase, RecomputeMode

CACHE_ENTRIES = 4096  # matrices kept per (configuration, microbatch); cleared when full


@dataclass(frozen=True, eq=False)
class RangeSet:
    """Some layer ranges: arrays of first and last layers, named by a hashable ``key``."""

    key: object
    first: np.ndarray
    last: np.ndarray

    @property
    def index(self) -> tuple[np.ndarray, np.ndarray]:
        """The (first, last) index into a range matrix."""
        return self.first, self.last


class RangePrices:
    """The composed range matrices of one instance, cached per layer table."""

    def __init__(self, instance: Instance, ids: PathIds):
        self.instance = instance
        self.ids = ids
        self._forms: dict[tuple, pricing.LinearTicks] = {}

    # ------------------------------------------------------------ chunk time

    def chunk_time(self, table: LayerTable, geometry: StageGeometry, mode: RecomputeMode,
                   gather_dp: int, activation: bool = True, gradient: bool = True,
                   at: RangeSet | None = None) -> np.ndarray:
        """τ of every layer range as a chunk of a stage with ``geometry`` in ``mode``.

        ``gather_dp`` is d under ZeRO-3 and 1 otherwise (no gathers).  ``at``: price only
        those ranges (an array shaped like its index arrays).
        """
        full = mode is RecomputeMode.FULL
        if at is not None:
            key = ("time-at", geometry, full, gather_dp, activation, gradient, at.key)
            communication = self._cached(table, key, lambda: self._communication(
                table, geometry, full, gather_dp, activation, gradient, at.index))
            return communication + table.compute_range[at.index] \
                + table.rerun_range[mode][at.index]
        key = ("time", geometry, full, gather_dp, activation, gradient)
        communication = self._cached(table, key, lambda: self._communication(
            table, geometry, full, gather_dp, activation, gradient))
        return communication + (table.compute_range + table.rerun_range[mode])

    def _communication(self, table: LayerTable, geometry: StageGeometry, full: bool,
                       gather_dp: int, activation: bool, gradient: bool,
                       at: tuple[np.ndarray, np.ndarray] | None = None) -> np.ndarray:
        """The slowest replica's collectives and receives, plus the ZeRO-3 gathers (at the
        ranges ``at`` only, if given)."""
        worst = None
        for replica in geometry.replicas:
            key = ("replica", replica, full, activation, gradient)
            term = self._cached(table, key, lambda replica=replica: self._replica_time(
                table, replica, full, activation, gradient))
            term = term if at is None else term[at]
            worst = term if worst is None else np.maximum(worst, term)
        if gather_dp > 1 and geometry.replica_groups:
            params = table.params_range if at is None else table.params_range[at]
            gathers = [2 * self.gather_form(gather_dp, path).of_array(params)
                       for path in geometry.replica_groups]
            worst = worst + np.max(gathers, axis=0)
        return worst

    def _replica_time(self, table: LayerTable, replica: ReplicaPaths, full: bool,
                      activation: bool, gradient: bool) -> np.ndarray:
        """Collectives (rerun forward ones too under full recompute) and receives of a replica."""
        paths = self.ids.paths
        tp = tuple(paths[p] for p in replica.tp_groups)
        ep = tuple(paths[p] for p in replica.ep_groups)
        time_matrix = table.collective_range(tp, ep)
        if full:
            time_matrix = time_matrix + table.collective_range(tp, ep, Phase.FWD)
        if activation and replica.recv_activation:
            sent = np.max([table.transfers(paths[p]) for p in replica.recv_activation], axis=0)
            time_matrix = time_matrix + np.concatenate(([0], sent[:-1]))[:, None]
        if gradient and replica.recv_gradient:
            sent = np.max([table.transfers(paths[p]) for p in replica.recv_gradient], axis=0)
            time_matrix = time_matrix + sent[None, :]
        return time_matrix

    # ------------------------------------------------------------ sync

    def sync(self, table: LayerTable, geometry: StageGeometry, dp: int, zero: int,
             dense: np.ndarray, expert: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """A stage's gradient sync for (arrays of) its dense and expert parameter totals:
        (RS_s, AG_s), its gradient phase and its weight gather (0 unless ZeRO 1 or 2), each
        the slowest dense group's plus the slowest expert group's (cost model §5 c)."""
        reduce = np.zeros(np.shape(dense), dtype=np.int64)
        gather = np.zeros(np.shape(dense), dtype=np.int64)
        for params, size, groups in ((dense, dp * table.config.ep, geometry.dense_groups),
                                     (expert, dp, geometry.replica_groups)):
            if not groups:
                continue
            forms = [self.sync_forms(zero, size, path) for path in groups]
            reduce = reduce + np.max([form.of_array(params) for form, _ in forms], axis=0)
            if forms[0][1] is not None:
                gather = gather + np.max([form.of_array(params) for _, form in forms], axis=0)
        return reduce, gather

    def exposed(self, table: LayerTable, geometry: StageGeometry, dp: int, zero: int,
                dense: np.ndarray, expert: np.ndarray, backward: np.ndarray,
                forward: np.ndarray) -> np.ndarray:
        """The part of the sync the iteration waits for, elementwise: the gradient phase
        beyond the stage's ``backward`` ticks with overlap_grad_reduce (else all of it) plus
        the weight gather beyond its ``forward`` ticks with overlap_param_gather (else all of
        it), as :func:`nest_cp.cost.terms.exposed_sync_ticks` (cost model §5 d)."""
        reduce, gather = self.sync(table, geometry, dp, zero, dense, expert)
        training = self.instance.training
        if training.overlap_grad_reduce:
            reduce = np.maximum(0, reduce - backward)
        if training.overlap_param_gather:
            gather = np.maximum(0, gather - forward)
        return reduce + gather

    def exposed_range(self, table: LayerTable, geometry: StageGeometry, dp: int,
                      zero: int) -> np.ndarray:
        """exposed(f, l) of a stage holding layers f..l (v = 1), as an L x L matrix."""
        key = ("exposed", geometry.dense_groups, geometry.replica_groups, dp,
               cost.sync_collective(zero), cost.gathers_weights(zero))
        return self._cached(table, key, lambda: self.exposed(
            table, geometry, dp, zero, table.dense_range, table.expert_range, table.bwd_range,
            table.fwd_range))

    # ------------------------------------------------------------ memory

    def fixed_memory(self, table: LayerTable, dp: int, zero: int, params: np.ndarray,
                     params_max: np.ndarray) -> np.ndarray:
        """state(params) + [z = 3] 2 · w · params_max: the bytes that do not depend on the
        activations (elementwise over parameter totals and largest-layer parameters)."""
        optimizer = self.instance.training.optimizer
        fixed = cost.state_bytes(np.asarray(params, dtype=np.int64), optimizer, zero, dp)
        if zero == 3:
            fixed = fixed + 2 * np.asarray(params_max, dtype=np.int64) * optimizer.weight_bytes
        return fixed

    # ------------------------------------------------------------ forms and cache

    def gather_form(self, dp: int, path: int) -> pricing.LinearTicks:
        """One ZeRO-3 all-gather over ``dp`` replicas on the path with id ``path``."""
        return self._form(("gather", dp, path), lambda: pricing.zero3_gather_form(
            self.instance, dp, self.ids.paths[path]))

    def sync_forms(self, zero: int, size: int, path: int
                   ) -> tuple[pricing.LinearTicks, pricing.LinearTicks | None]:
        """Sync over ``size`` ranks on the path with id ``path``: the forms of its gradient
        phase and of its weight gather (None unless ZeRO 1 or 2)."""
        key = ("sync", cost.sync_collective(zero), cost.gathers_weights(zero), size, path)
        return self._form(key, lambda: pricing.sync_forms(self.instance, zero, size,
                                                          self.ids.paths[path]))

    def _form(self, key: tuple, build):
        if key not in self._forms:
            self._forms[key] = build()
        return self._forms[key]

    @staticmethod
    def _cached(table: LayerTable, key: tuple, build) -> np.ndarray:
        cache = table.cache
        if key not in cache:
            if len(cache) >= CACHE_ENTRIES:
                cache.clear()
            cache[key] = build()
        return cache[key]


@dataclass(frozen=True, slots=True)
class Shape:
    """One outer choice below the layout: (c, b) by its table, S, d, v, z, and m."""

    table: LayerTable
    num_stages: int
    dp: int
    virtual: int
    zero: int
    microbatches: int

    @property
    def rounds(self) -> int:
        """v·m + S − 1: the multiple of τ in T (DESIGN §3.2 b)."""
        return self.virtual * self.microbatches + self.num_stages - 1

    @property
    def num_chunks(self) -> int:
        return self.num_stages * self.virtual

    @property
    def gather_dp(self) -> int:
        """d under ZeRO-3 (the gathers' group size), 1 otherwise (no gathers)."""
        return self.dp if self.zero == 3 else 1

    def in_flight(self) -> np.ndarray:
        """In-flight (chunk-)microbatches of every stage (:func:`nest_cp.cost.terms.in_flight`)."""
        return np.array([cost.in_flight(stage, self.num_stages, self.microbatches, self.virtual)
                         for stage in range(self.num_stages)], dtype=np.int64)
