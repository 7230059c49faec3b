"""Tick-exact price tables of the DP, vectorised over layer ranges.

Every number here is the integer the plan evaluator computes (DESIGN §3):
per-layer terms (compute, intra-layer collectives, point-to-point transfers) come
straight from :mod:`nest_cp.cost.terms`; terms rounded once per *stage* (ZeRO-3
gathers, gradient sync) are ring collectives whose tick count is
``ceil((slope * volume + offset) / denominator)`` with integers derived exactly
from the same fractions :func:`nest_cp.model.network.collective_ticks` uses, so a whole
matrix of layer ranges is priced with integer numpy arithmetic.

Range matrices are ``L x L`` arrays indexed ``[first_layer, last_layer]``; only
entries with ``first_layer <= last_layer`` are meaningful.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from nest_cp.cost import terms as cost
from nest_cp.model.instance import (
    CollectiveKind,
    CpComm,
    Instance,
    IntraConfig,
    Phase,
    RecomputeMode,
)
from nest_cp.model.network import Path, collective_seconds, exact

INT64_SAFE = 2**62


@dataclass(frozen=True, slots=True)
class LinearTicks:
    """ticks(v) = ceil((slope * v + offset) / denominator) for a volume v > 0, else 0.

    (Volumes <= 0 only occur below the diagonal of range matrices, which is never read.)
    """

    slope: int
    offset: int
    denominator: int

    def of(self, volume: int) -> int:
        if volume <= 0:
            return 0
        return -(-(self.slope * volume + self.offset) // self.denominator)

    def of_array(self, volumes: np.ndarray) -> np.ndarray:
        """The same, elementwise over an int64 array, exactly.

        In int64 when no product can overflow; otherwise in float64 (a sum of non-negative
        terms, so a few ulps of relative error), whose ceiling is exact wherever the float
        lies farther from an integer than that error can reach, and in Python integers for
        the few entries that do not.
        """
        volumes = np.asarray(volumes, dtype=np.int64)
        largest = int(np.abs(volumes).max(initial=0))
        if self.slope * max(largest, 1) + abs(self.offset) < INT64_SAFE and \
                self.denominator < INT64_SAFE:
            ticks = -(-(self.slope * volumes + self.offset) // self.denominator)
            return np.where(volumes <= 0, 0, ticks)
        if self.slope < 0 or self.offset < 0 or largest >= 2**53:  # no float shortcut
            distinct, inverse = np.unique(volumes, return_inverse=True)
            priced = np.array([self.of(int(v)) for v in distinct.tolist()], dtype=np.int64)
            return priced[inverse].reshape(volumes.shape)
        scaled = (float(self.slope) * volumes.astype(np.float64) + float(self.offset)) \
            / float(self.denominator)
        error = 1e-12 * (np.abs(scaled) + 1.0)  # far above float64's few ulps of rounding
        ticks = np.ceil(scaled)
        unsure = (ticks - scaled < error) | (scaled - (ticks - 1) < error)
        ticks = ticks.astype(np.int64)
        if unsure.any():
            distinct, inverse = np.unique(volumes[unsure], return_inverse=True)
            ticks[unsure] = np.array([self.of(int(v)) for v in distinct.tolist()],
                                     dtype=np.int64)[inverse]
        return np.where(volumes <= 0, 0, ticks)


def linear_collective(kind: CollectiveKind, bytes_per_unit: int, group_size: int, path: Path,
                      tick_s: float) -> LinearTicks:
    """Exact linear form of ``collective_ticks(kind, bytes_per_unit * v, group_size, path)``."""
    tick = exact(tick_s)
    fixed = collective_seconds(kind, 0, group_size, path)
    slope = (collective_seconds(kind, bytes_per_unit, group_size, path) - fixed) / tick
    offset = fixed / tick
    common = math.lcm(slope.denominator, offset.denominator)
    return LinearTicks(slope=int(slope * common), offset=int(offset * common),
                       denominator=int(common))


def range_sums(values: np.ndarray) -> np.ndarray:
    """sums[first, last] = values[first] + ... + values[last] (garbage below the diagonal)."""
    prefix = np.concatenate(([0], np.cumsum(np.asarray(values, dtype=np.int64))))
    return prefix[None, 1:] - prefix[:-1, None]


def range_maxima(values: np.ndarray) -> np.ndarray:
    """maxima[first, last] = max(values[first..last]) (0 below the diagonal)."""
    values = np.asarray(values, dtype=np.int64)
    num = len(values)
    maxima = np.zeros((num, num), dtype=np.int64)
    for first_layer in range(num):
        maxima[first_layer, first_layer:] = np.maximum.accumulate(values[first_layer:])
    return maxima


class LayerTable:
    """Per-layer and per-range quantities of one (configuration, microbatch) choice.

    Arrays are int64; ``*_range`` are L x L range matrices (sums, or maxima for
    ``params_max_range`` and ``work_range``).  Per recompute mode (DESIGN §3.2 a, every
    allowed mode): ``rerun_range`` the forward compute rerun, ``kept_range`` the
    activation bytes kept per microbatch, ``work_range`` the working set.  ``cache``
    holds the planner's derived range matrices.
    """

    def __init__(self, instance: Instance, config: IntraConfig, microbatch: int):
        self.instance, self.config, self.microbatch = instance, config, microbatch
        tick_s = instance.training.tick_s
        self.modes = tuple(mode for mode in RecomputeMode
                           if mode in instance.training.recompute_modes)
        self.profiles = [layer.profile(config, microbatch) for layer in instance.workload.layers]
        fwd_bwd = np.array([cost.compute_ticks(p, tick_s) for p in self.profiles],
                           dtype=np.int64)
        self.fwd, self.bwd = fwd_bwd[:, 0], fwd_bwd[:, 1]
        self.compute = fwd_bwd.sum(axis=1)
        self.out_bytes = self._column("out_bytes")
        self.compute_range = range_sums(self.compute)
        self.fwd_range = range_sums(self.fwd)
        self.bwd_range = range_sums(self.bwd)
        self.dense_range = range_sums(self._column("dense_params"))
        self.expert_range = range_sums(self._column("expert_params"))
        self.params_range = self.dense_range + self.expert_range
        self.params_max_range = range_maxima(self._column("dense_params")
                                             + self._column("expert_params"))
        self.rerun_range = {mode: range_sums([cost.recompute_compute_ticks(p, mode, tick_s)
                                              for p in self.profiles]) for mode in self.modes}
        self.kept_range = {mode: range_sums([cost.kept_activation_bytes([p], mode)
                                             for p in self.profiles]) for mode in self.modes}
        self.work_range = {mode: range_maxima([cost.working_set_bytes([p], mode)
                                               for p in self.profiles]) for mode in self.modes}
        # context parallelism (docs/context-parallelism.md): the p2p ring's K/V buffers are
        # 2 · the largest cp_kv_bytes of a stage's layers, beside its other memory
        self.kv_max_range = range_maxima(self._column("cp_kv_bytes")) \
            if config.cp > 1 and instance.training.cp_comm is CpComm.P2P else None
        self.cache: dict = {}
        self._collectives: dict[tuple, np.ndarray] = {}
        self._contexts: dict[tuple, tuple[np.ndarray, np.ndarray]] = {}
        self._transfers: dict[Path, np.ndarray] = {}

    @property
    def num_layers(self) -> int:
        return len(self.profiles)

    def _column(self, name: str) -> np.ndarray:
        return np.array([getattr(p, name) for p in self.profiles], dtype=np.int64)

    def collective_range(self, tp_paths: tuple[Path, ...], ep_paths: tuple[Path, ...],
                         phase: Phase | None = None, tp_local: bool = False) -> np.ndarray:
        """Intra-layer collective ticks of every layer range (of ``phase``, or all), each
        collective on the slowest of the given TP or EP group paths (cost model §3).

        ``tp_local``: every TP group of the stage replica lies inside one tier-0 domain, so
        with ``tp_comm_overlap`` each layer's TP collectives of a direction are charged only
        what its compute in that direction leaves exposed (cost model §5 e)."""
        hide = tp_local and self.instance.training.tp_comm_overlap
        key = (tp_paths, ep_paths, phase, hide)
        if key not in self._collectives:
            tick_s = self.instance.training.tick_s
            paths = cost.GroupPaths(tp=tp_paths, ep=ep_paths)
            per_layer = [cost.layer_collective_ticks(
                p, self.config, paths, tick_s, phase,
                (int(fwd), int(bwd)) if hide else None)
                for p, fwd, bwd in zip(self.profiles, self.fwd, self.bwd, strict=True)]
            self._collectives[key] = range_sums(per_layer)
        return self._collectives[key]

    def context_range(self, pairs: tuple[Path, ...], groups: tuple[Path, ...]
                      ) -> tuple[np.ndarray, np.ndarray]:
        """(forward + backward, forward) exposed context-parallel ticks of every layer range
        on a stage replica whose CP rings have the pair paths ``pairs`` and the group paths
        ``groups`` (:func:`nest_cp.cost.terms.context_ticks`, layer by layer, summed as the
        evaluator sums a chunk's layers); the forward part is what recomputation reruns."""
        key = (pairs, groups)
        if key not in self._contexts:
            training = self.instance.training
            paths = cost.ContextPaths(pairs=pairs, groups=groups)
            per_layer = np.array([cost.context_ticks(p, self.config, training.cp_comm, paths,
                                                     training.tick_s)
                                  for p in self.profiles], dtype=np.int64).reshape(-1, 2)
            self._contexts[key] = (range_sums(per_layer.sum(axis=1)),
                                   range_sums(per_layer[:, 0]))
        return self._contexts[key]

    def transfers(self, path: Path) -> np.ndarray:
        """transfers[layer] = ticks to send that layer's output over ``path``."""
        if path not in self._transfers:
            tick_s = self.instance.training.tick_s
            self._transfers[path] = np.array(
                [cost.transfer_ticks(int(v), path, tick_s) for v in self.out_bytes],
                dtype=np.int64)
        return self._transfers[path]


def zero3_gather_form(instance: Instance, dp: int, path: Path) -> LinearTicks:
    """One ZeRO-3 all-gather of a stage's weights as a linear form in its parameter count."""
    training = instance.training
    return linear_collective(CollectiveKind.ALL_GATHER, training.optimizer.weight_bytes, dp,
                             path, training.tick_s)


def sync_forms(instance: Instance, zero: int, group_size: int,
               path: Path) -> tuple[LinearTicks, LinearTicks | None]:
    """A stage's gradient sync over ``group_size`` ranks as linear forms in its parameters:
    the gradient phase (all-reduce for ZeRO-0, else reduce-scatter, of P·g) and, for ZeRO 1
    and 2, the all-gather of the updated weights (P·w; None otherwise), each rounded alone
    as :func:`nest_cp.cost.terms.gradient_sync_parts` rounds them (cost model §5 c)."""
    training = instance.training
    reduce = linear_collective(cost.sync_collective(zero), training.optimizer.grad_bytes,
                               group_size, path, training.tick_s)
    gather = linear_collective(CollectiveKind.ALL_GATHER, training.optimizer.weight_bytes,
                               group_size, path, training.tick_s) \
        if cost.gathers_weights(zero) else None
    return reduce, gather
