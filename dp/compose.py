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
                                             + cp_r + [ρ ≠ none] fwd cp_r
                                             + [activation] act_r(out_{f−1})
                                             + [gradient] grad_r(out_l) )
              + [z = 3] max over g's d-groups of 2 · gather(params),

with cp_r the exposed context-parallel communication of the layers on r's CP groups
(0 for c = 1; docs/context-parallelism.md) and, with context width c, the d-groups the
d·c ranks of a (tensor, expert) index and the dense groups d·e·c ranks;

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

and the memory pieces state(params) + [z = 3] buffers (§3.2 d) + [p2p, c > 1] the ring's
two K/V buffers.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from nest_cp.cost import terms as cost
from nest_cp.dp import pricing
from nest_cp.dp.geometry import PathIds, ReplicaPaths, StageGeometry
from nest_cp.dp.pricing import LayerTable
from nest_cp.model.instance import CollectiveKind, Instance, Phase, RecomputeMode
from nest_cp.model.network import Path, collective_seconds
from nest_cp.model.ticks import exact

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
        self._forms: dict[tuple, object] = {}
        self._ring = _RingForms(instance, ids)

    # ------------------------------------------------------------ chunk time

    def chunk_time(self, table: LayerTable, geometry: StageGeometry, mode: RecomputeMode,
                   gather_dp: int, activation: bool = True, gradient: bool = True,
                   at: RangeSet | None = None) -> np.ndarray:
        """τ of every layer range as a chunk of a stage with ``geometry`` in ``mode``.

        ``gather_dp`` is d under ZeRO-3 and 1 otherwise (no gathers).  ``at``: price only
        those ranges (an array shaped like its index arrays).  Either is kept in the table's
        cache and returned read-only.
        """
        full = mode is RecomputeMode.FULL
        rerun = mode is not RecomputeMode.NONE  # reruns the forward's context communication
        if at is not None:
            key = ("time-at", geometry, mode, gather_dp, activation, gradient, at.key)
            return self._cached(table, key, lambda: _read_only(self._communication(
                table, geometry, full, gather_dp, activation, gradient, at.index, rerun)
                + table.compute_range[at.index] + table.rerun_range[mode][at.index]))
        key = ("time", geometry.replicas, mode, activation, gradient)
        time = self._cached(table, key, lambda: _read_only(self._communication(
            table, geometry, full, 1, activation, gradient, rerun=rerun)
            + (table.compute_range + table.rerun_range[mode])))
        if gather_dp == 1 or not geometry.replica_groups:
            return time
        gathers = self._cached(table, ("gathers", geometry.replica_groups, gather_dp),
                               lambda: self._gathers(table, geometry, gather_dp))
        return self._cached(table, key + (geometry.replica_groups, gather_dp),
                            lambda: _read_only(time + gathers))

    def _communication(self, table: LayerTable, geometry: StageGeometry, full: bool,
                       gather_dp: int, activation: bool, gradient: bool,
                       at: tuple[np.ndarray, np.ndarray] | None = None,
                       rerun: bool = False) -> np.ndarray:
        """The slowest replica's collectives, receives and exposed context communication
        (``rerun``: its forward part twice), plus the ZeRO-3 gathers at the ranges ``at``
        (without gathers if ``at`` is None: :meth:`chunk_time` adds them)."""
        worst = None
        for replica in geometry.replicas:
            rerun_context = rerun and bool(replica.context_pairs or replica.context_groups)
            key = ("replica", replica, full, activation, gradient, rerun_context)
            term = self._cached(table, key, lambda replica=replica, again=rerun_context:
                                self._replica_time(table, replica, full, activation, gradient,
                                                   again))
            term = term if at is None else term[at]
            worst = term if worst is None else np.maximum(worst, term)
        if at is not None and gather_dp > 1 and geometry.replica_groups:
            worst = worst + 2 * _slowest([self.gather_form(gather_dp, path)
                                          for path in geometry.replica_groups],
                                         table.params_range[at])
        return worst

    def _gathers(self, table: LayerTable, geometry: StageGeometry,
                 gather_dp: int) -> np.ndarray:
        """The ZeRO-3 gathers of every layer range (twice the slowest d-group's all-gather of
        its parameters, docs/cost-model.md §3), priced once per distinct parameter total."""
        (params,), index = distinct_ranges(table, (table.params_range,))
        return _read_only(2 * _slowest([self.gather_form(gather_dp, path)
                                        for path in geometry.replica_groups], params)[index])

    def _replica_time(self, table: LayerTable, replica: ReplicaPaths, full: bool,
                      activation: bool, gradient: bool, rerun_context: bool = False
                      ) -> np.ndarray:
        """Collectives (rerun forward ones too under full recompute), receives and exposed
        context communication (its forward part again under any recompute:
        ``rerun_context``) of a replica."""
        paths = self.ids.paths
        tp = tuple(paths[p] for p in replica.tp_groups)
        ep = tuple(paths[p] for p in replica.ep_groups)
        time_matrix = table.collective_range(tp, ep, tp_local=replica.tp_local)
        if full:
            time_matrix = time_matrix + table.collective_range(tp, ep, Phase.FWD,
                                                               tp_local=replica.tp_local)
        if replica.context_pairs or replica.context_groups:
            both, forward = table.context_range(
                tuple(paths[p] for p in replica.context_pairs),
                tuple(paths[p] for p in replica.context_groups))
            time_matrix = time_matrix + both + (forward if rerun_context else 0)
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
        the slowest dense group's plus the slowest expert group's (cost model §5 c).  With
        context width c the groups have d·e·c and d·c ranks (docs/context-parallelism.md)."""
        reduce = np.zeros(np.shape(dense), dtype=np.int64)
        gather = np.zeros(np.shape(dense), dtype=np.int64)
        config = table.config
        for params, size, groups in ((dense, dp * config.ep * config.cp, geometry.dense_groups),
                                     (expert, dp * config.cp, geometry.replica_groups)):
            if not groups or not np.any(np.asarray(params) > 0):  # nothing to sync: 0
                continue
            forms = [self.sync_forms(zero, size, path) for path in groups]
            reduce = reduce + _slowest([form for form, _ in forms], params)
            if forms[0][1] is not None:
                gather = gather + _slowest([form for _, form in forms], params)
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

        def build() -> np.ndarray:  # priced once per distinct (dense, expert, bwd, fwd)
            columns, inverse = distinct_ranges(table, (table.dense_range, table.expert_range,
                                                       table.bwd_range, table.fwd_range))
            return self.exposed(table, geometry, dp, zero, *columns)[inverse]

        return self._cached(table, key, build)

    # ------------------------------------------------------------ memory

    def fixed_memory(self, table: LayerTable, dp: int, zero: int, params: np.ndarray,
                     params_max: np.ndarray, kv_max: np.ndarray | None = None) -> np.ndarray:
        """state(params) + [z = 3] 2 · w · params_max + 2 · kv_max: the bytes that do not
        depend on the activations (elementwise over parameter totals, largest-layer
        parameters and, for the p2p ring of context width c > 1, the largest ``cp_kv_bytes``
        of the stage's layers: ``kv_max``, None without a ring); on the table's own range
        matrix, priced once per distinct total.  With context width c the ZeRO shards are
        over d·c ranks (docs/context-parallelism.md)."""
        optimizer = self.instance.training.optimizer
        shards = dp * table.config.cp
        if params is table.params_range:
            (totals,), index = distinct_ranges(table, (table.params_range,))
            fixed = cost.state_bytes(totals, optimizer, zero, shards)[index]
        else:
            fixed = cost.state_bytes(np.asarray(params, dtype=np.int64), optimizer, zero, shards)
        if zero == 3:
            fixed = fixed + 2 * np.asarray(params_max, dtype=np.int64) * optimizer.weight_bytes
        if kv_max is not None:
            fixed = fixed + 2 * np.asarray(kv_max, dtype=np.int64)
        return fixed

    # ------------------------------------------------------------ forms and cache

    def gather_form(self, dp: int, path: int) -> pricing.LinearTicks:
        """One ZeRO-3 all-gather over ``dp`` replicas on the path with id ``path``
        (:func:`nest_cp.dp.pricing.zero3_gather_form`)."""
        return self._form(("gather", dp, path), lambda: self._ring.form(
            CollectiveKind.ALL_GATHER, self.instance.training.optimizer.weight_bytes, dp, path))

    def sync_forms(self, zero: int, size: int, path: int
                   ) -> tuple[pricing.LinearTicks, pricing.LinearTicks | None]:
        """Sync over ``size`` ranks on the path with id ``path``: the forms of its gradient
        phase and of its weight gather (None unless ZeRO 1 or 2), as
        :func:`nest_cp.dp.pricing.sync_forms` builds them."""
        kind, gathers = cost.sync_collective(zero), cost.gathers_weights(zero)
        key = ("sync", kind, gathers, size, path)
        optimizer = self.instance.training.optimizer
        return self._form(key, lambda: (
            self._ring.form(kind, optimizer.grad_bytes, size, path),
            self._ring.form(CollectiveKind.ALL_GATHER, optimizer.weight_bytes, size, path)
            if gathers else None))

    def ring_rates(self, kind: CollectiveKind, bytes_per_unit: int,
                   path: int) -> tuple[int, int, int, int] | None:
        """X and Y of :class:`_RingForms` for a collective on the path with id ``path`` (its
        forms over g ranks: slope X·(g − 1)/g, offset Y·(g − 1)), or None when the cost
        model's forms are not of that shape."""
        return self._ring.rates(kind, bytes_per_unit, path)

    def sync_floor(self, zero: int, size: int, paths: tuple[Path, ...]) -> SyncFloor:
        """The sync over ``size`` ranks on each of ``paths`` (the fastest a group of that size
        may have), summarised for the planner's lower bound on the exposed sync: see
        :class:`SyncFloor`.  With ring forms (:class:`_RingForms`) its rates are the least
        X and Y over the paths scaled by (g − 1)/g and g − 1, so those are found once per
        (z, paths) (:meth:`_floor_rates`); otherwise from the forms themselves."""
        key = ("floor", zero, size, paths)
        if key not in self._forms:
            rates = self._form(("floor rates", zero, paths),
                               lambda: self._floor_rates(zero, paths))
            self._forms[key] = SyncFloor.of_ring(rates, size) if rates is not None else \
                SyncFloor.of([self.sync_forms(zero, size, self.ids.id_of(path))
                              for path in paths])
        return self._forms[key]

    def _floor_rates(self, zero: int, paths: tuple[Path, ...]
                     ) -> tuple[int, int, int, int] | None:
        """Summed over the sync's phases, the least X and the least Y (:class:`_RingForms`)
        over ``paths``, as numerator, denominator, numerator, denominator; None unless every
        phase on every path is a ring form."""
        optimizer = self.instance.training.optimizer
        phases = [(cost.sync_collective(zero), optimizer.grad_bytes)]
        if cost.gathers_weights(zero):
            phases.append((CollectiveKind.ALL_GATHER, optimizer.weight_bytes))
        path_ids = [self.ids.id_of(path) for path in paths]
        per_unit, latency = (0, 1), (0, 1)
        for kind, bytes_per_unit in phases:
            rates = [self._ring.rates(kind, bytes_per_unit, path) for path in path_ids]
            if None in rates:
                return None
            per_unit = _ratio_sum(per_unit, _least_ratio(rate[:2] for rate in rates))
            latency = _ratio_sum(latency, _least_ratio(rate[2:] for rate in rates))
        return (*per_unit, *latency)

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


def _read_only(matrix: np.ndarray) -> np.ndarray:
    matrix.flags.writeable = False
    return matrix


def _slowest(forms: list[pricing.LinearTicks], volumes: np.ndarray) -> np.ndarray:
    """The largest of the forms' ticks at each volume, elementwise (0 at volumes <= 0, which
    :class:`~nest_cp.dp.pricing.LinearTicks` prices at 0): only positive volumes are priced,
    none when there are none (a kind a workload does not have), and only by the forms no
    other form is at least as slow as everywhere (:func:`_undominated`)."""
    volumes = np.asarray(volumes, dtype=np.int64)
    positive = volumes > 0
    if positive.all():
        return np.max([_ticks(form, volumes) for form in _undominated(forms)], axis=0)
    slowest = np.zeros(volumes.shape, dtype=np.int64)
    if positive.any():
        priced = volumes[positive]
        slowest[positive] = np.max([_ticks(form, priced) for form in _undominated(forms)],
                                   axis=0)
    return slowest


def _ticks(form: pricing.LinearTicks, volumes: np.ndarray) -> np.ndarray:
    """``form.of_array(volumes)`` for positive int64 volumes, in int64 arithmetic wherever
    it cannot overflow (where of_array would leave int64 for floats and a check).

    ceil((s·v + o) / D) = ⌊(s·v + c) / D⌋ with c = o + D − 1.  With s = s_hi·2^K + s_lo
    (s_lo < 2^K), c = q_c·D + r_c and s_hi·v = q·D + r, that is 2^K·q + q_c + ⌊B / D⌋ with
    B = 2^K·r + s_lo·v + r_c < 2^K·(D + v) + D: K is chosen so that B, s_hi·v and the
    result stay below 2^62; otherwise (or for negative coefficients) of_array prices it.
    """
    slope, offset, denominator = form.slope, form.offset, form.denominator
    if slope < 0 or offset < 0:
        return form.of_array(volumes)
    largest = int(volumes.max(initial=0))
    carry = offset + denominator - 1
    if slope * largest + carry < pricing.INT64_SAFE:
        return (slope * volumes + carry) // denominator
    shift = 61 - (denominator + largest).bit_length()
    if shift < 0 or (slope >> shift) * largest >= pricing.INT64_SAFE or \
            (slope * largest + carry) // denominator >= pricing.INT64_SAFE:
        return form.of_array(volumes)
    high, low = slope >> shift, slope & ((1 << shift) - 1)
    whole, rest = divmod(carry, denominator)
    quotient, remainder = np.divmod(high * volumes, denominator)
    return (quotient << shift) + whole \
        + ((remainder << shift) + low * volumes + rest) // denominator


def _undominated(forms: list[pricing.LinearTicks]) -> list[pricing.LinearTicks]:
    """Some of the forms, every other one dominated by a kept one: its slope / denominator
    and offset / denominator both at least the other's (compared exactly), so its ticks at
    least the other's at every positive volume (the ceiling is monotone); the maximum over
    the kept forms is the maximum over all.  Steepest first, as it usually dominates."""
    kept: list[pricing.LinearTicks] = []
    for form in sorted(forms, key=lambda f: f.slope / f.denominator, reverse=True):
        if not any(other.slope * form.denominator >= form.slope * other.denominator
                   and other.offset * form.denominator >= form.offset * other.denominator
                   for other in kept):
            kept.append(form)
    return kept


def distinct_ranges(table: LayerTable, matrices: tuple[np.ndarray, ...]
                    ) -> tuple[tuple[np.ndarray, ...], np.ndarray]:
    """The distinct tuples of entries of some L x L range matrices, as one array per
    matrix, and the L x L index of each entry's tuple in them; kept in the table's cache.

    A term that is a function of those entries alone (as every sync and gather price is)
    is priced on the distinct tuples only and read back through the index: a workload of
    identical blocks has a few L of them, not L²."""
    key = ("distinct", tuple(id(matrix) for matrix in matrices))
    found = table.cache.get(key)
    if found is None or any(kept is not matrix for kept, matrix in zip(found[0], matrices)):
        rows, inverse = np.unique(np.stack([m.ravel() for m in matrices], axis=1), axis=0,
                                  return_inverse=True)
        found = (matrices, tuple(np.ascontiguousarray(rows.T)),
                 inverse.reshape(matrices[0].shape))
        table.cache[key] = found
    return found[1], found[2]


def parameter_kinds(table: LayerTable) -> tuple[tuple[int, bool, int], ...]:
    """For the dense and the expert parameters: their total over the layers, whether every
    layer holds some, and the ranks per replica their sync runs over (e·c, c: the sync
    groups have d·e·c and d·c ranks, with c = 1 d·e and d); kept in the table's cache."""
    if "kinds" not in table.cache:
        config = table.config
        table.cache["kinds"] = tuple(
            (int(params[0, -1]), bool((np.diag(params) > 0).all()), per_replica)
            for params, per_replica in ((table.dense_range, config.ep * config.cp),
                                        (table.expert_range, config.cp)))
    return table.cache["kinds"]


def whole_totals(table: LayerTable) -> tuple[int, int, int]:
    """The parameters, forward ticks and backward ticks of all the layers, as Python ints
    kept in the table's cache (the planner's bounds read them on every outer choice)."""
    if "whole" not in table.cache:
        last = table.num_layers - 1
        table.cache["whole"] = (int(table.params_range[0, last]),
                                int(table.fwd_range[0, last]), int(table.bwd_range[0, last]))
    return table.cache["whole"]


class SyncFloor(NamedTuple):
    """A stage sync over g ranks on any of a few paths, summed over its phases (gradient
    phase, then the weight gather if any): the least over the paths of slope / denominator
    (``slope_rate``) and of offset / denominator (``offset_rate``) of each phase's form, as
    numerators over one ``denominator``.  A phase of P > 0 parameters on any of the paths
    costs at least slope·P / denominator + offset / denominator ticks.  (A tuple of ints:
    the planner keeps one per group size, tens of thousands, and the collector skips them.)"""

    slope_rate: int
    offset_rate: int
    denominator: int

    @classmethod
    def of(cls, path_forms: list[tuple[pricing.LinearTicks, pricing.LinearTicks | None]]
           ) -> SyncFloor:
        """From the (gradient phase, weight gather or None) forms on each path."""
        forms = [tuple(form for form in phases if form is not None) for phases in path_forms]
        slope, offset = (0, 1), (0, 1)  # (numerator, denominator)
        for phase in range(len(forms[0])):
            slope = _ratio_sum(slope, _least_ratio(
                (phases[phase].slope, phases[phase].denominator) for phases in forms))
            offset = _ratio_sum(offset, _least_ratio(
                (phases[phase].offset, phases[phase].denominator) for phases in forms))
        return cls._over_one_denominator(slope, offset)

    @classmethod
    def of_ring(cls, rates: tuple[int, int, int, int], size: int) -> SyncFloor:
        """From :meth:`RangePrices._floor_rates`: ring forms over g = ``size`` ranks have slope
        X·(g − 1)/g and offset Y·(g − 1) per denominator, and the least over the paths of
        each is the least X (Y) scaled alike."""
        steps = size - 1
        return cls._over_one_denominator((rates[0] * steps, rates[1] * size),
                                         (rates[2] * steps, rates[3]))

    @classmethod
    def _over_one_denominator(cls, slope: tuple[int, int],
                              offset: tuple[int, int]) -> SyncFloor:
        denominator = math.lcm(slope[1], offset[1])
        return cls(slope[0] * (denominator // slope[1]), offset[0] * (denominator // offset[1]),
                   denominator)


def _least_ratio(ratios) -> tuple[int, int]:
    """The least of some (numerator, positive denominator) ratios, compared exactly."""
    least = None
    for ratio in ratios:
        if least is None or ratio[0] * least[1] < least[0] * ratio[1]:
            least = ratio
    return least


def _ratio_sum(first: tuple[int, int], second: tuple[int, int]) -> tuple[int, int]:
    """first + second as (numerator, denominator) ratios, reduced."""
    numerator = first[0] * second[1] + second[0] * first[1]
    denominator = first[1] * second[1]
    common = math.gcd(numerator, denominator)
    return numerator // common, denominator // common


class _RingForms:
    """Exact linear forms of ring collectives (:func:`nest_cp.dp.pricing.linear_collective`),
    built in integers.

    A ring collective of kind κ over g ranks on a path (β, α) takes
    c_κ·(g − 1)/g·V/β + c_κ·(g − 1)·α seconds (c = 2 for an all-reduce, else 1; DESIGN
    §3, :func:`nest_cp.model.network.collective_seconds`), so in ticks its slope per unit
    is X·(g − 1)/g and its offset Y·(g − 1), with X = c_κ·bytes/(β·tick) and Y = c_κ·α/tick
    fixed per (κ, bytes, path).  X and Y are read off ``collective_seconds`` at g = 2 and
    checked against :func:`~nest_cp.dp.pricing.linear_collective` at g = 2 and 3; where that
    check fails (a cost model of another shape) every form is built by it instead.  The
    planner builds tens of thousands of these at 10^5 devices (one per d).
    """

    def __init__(self, instance: Instance, ids: PathIds):
        self.tick_s = instance.training.tick_s
        self.ids = ids
        self._rates: dict[tuple, tuple[int, int, int, int] | None] = {}

    def form(self, kind: CollectiveKind, bytes_per_unit: int, size: int,
             path: int) -> pricing.LinearTicks:
        rates = self.rates(kind, bytes_per_unit, path)
        if rates is None:
            return pricing.linear_collective(kind, bytes_per_unit, size, self.ids.paths[path],
                                             self.tick_s)
        return _ring_form(*rates, size)

    def rates(self, kind: CollectiveKind, bytes_per_unit: int,
              path: int) -> tuple[int, int, int, int] | None:
        """X and Y of the class docstring as numerator, denominator, numerator, denominator
        (in lowest terms), or None when the forms are not of that shape."""
        key = (kind, bytes_per_unit, path)
        if key not in self._rates:
            self._rates[key] = self._ring_rates(kind, bytes_per_unit, self.ids.paths[path])
        return self._rates[key]

    def _ring_rates(self, kind: CollectiveKind, bytes_per_unit: int,
                    path: Path) -> tuple[int, int, int, int] | None:
        """:meth:`rates`, found."""
        tick = exact(self.tick_s)
        fixed = collective_seconds(kind, 0, 2, path)
        per_unit = 2 * (collective_seconds(kind, bytes_per_unit, 2, path) - fixed) / tick
        latency = fixed / tick
        rates = (per_unit.numerator, per_unit.denominator, latency.numerator,
                 latency.denominator)
        checked = all(_ring_form(*rates, size) == pricing.linear_collective(
            kind, bytes_per_unit, size, path, self.tick_s) for size in (2, 3))
        return rates if checked else None


def _ring_form(per_unit: int, per_unit_den: int, latency: int, latency_den: int,
               size: int) -> pricing.LinearTicks:
    """The form with slope (per_unit / per_unit_den)·(g − 1)/g and offset (latency /
    latency_den)·(g − 1), g = ``size``, both fractions in lowest terms, over the least
    common denominator (as :func:`nest_cp.dp.pricing.linear_collective`)."""
    steps = size - 1
    slope_num, slope_den = per_unit * steps, per_unit_den * size
    common = math.gcd(slope_num, slope_den)
    slope_num, slope_den = slope_num // common, slope_den // common
    offset_num, offset_den = latency * steps, latency_den
    common = math.gcd(offset_num, offset_den)
    offset_num, offset_den = offset_num // common, offset_den // common
    denominator = math.lcm(slope_den, offset_den)
    return pricing.LinearTicks(slope=slope_num * (denominator // slope_den),
                               offset=offset_num * (denominator // offset_den),
                               denominator=denominator)


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
        """d·c under ZeRO-3 (the gathers' group size: the shards are over the d replicas
        and the c context ranks), 1 otherwise (no gathers)."""
        return self.dp * self.table.config.cp if self.zero == 3 else 1

    def in_flight(self) -> np.ndarray:
        """In-flight (chunk-)microbatches of every stage (:func:`nest_cp.cost.terms.in_flight`)."""
        return np.array([cost.in_flight(stage, self.num_stages, self.microbatches, self.virtual)
                         for stage in range(self.num_stages)], dtype=np.int64)
