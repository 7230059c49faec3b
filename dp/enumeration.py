"""Interleaved 1F1B (v > 1) on any workload: every split into S·v chunks, priced at once.

The fallback of :mod:`nest_cp.dp.interleaved` for workloads that are not identical
blocks between fixed ends.  Every split into K = S·v chunks (C(L − 1, K − 1) of them,
at most ``MAX_SPLITS``) is priced from the range matrices of
:mod:`nest_cp.dp.compose`, vectorised over splits.  For a fixed split each stage
independently takes the fastest mode that fits (a mode changes only its own stage's
chunk times and memory, never its sync), and the split with the least
R·max τ + max exposed wins: exact by exhaustion.  Ties: the first split in
lexicographic order of its cuts, the first fastest mode.
"""

from __future__ import annotations

import itertools

import numpy as np

from nest_cp.dp.compose import RangePrices, Shape
from nest_cp.dp.geometry import StageGeometry
from nest_cp.dp.kernel import INF
from nest_cp.model.plan import Stage

MAX_SPLITS = 50_000  # splits per chunk count the enumeration prices at once at most


class SplitEnumeration:
    """Every split into K chunks of one shape, priced at once, over any layout."""

    def __init__(self, prices: RangePrices, shape: Shape, limit: int):
        self.prices, self.shape, self.limit = prices, shape, limit
        table, num_chunks = shape.table, shape.num_chunks
        num_layers = table.num_layers
        cuts = np.array(list(itertools.combinations(range(1, num_layers), num_chunks - 1)),
                        dtype=np.int64).reshape(-1, num_chunks - 1)
        count = len(cuts)
        self.first = np.concatenate((np.zeros((count, 1), dtype=np.int64), cuts), axis=1)
        self.last = np.concatenate((cuts - 1, np.full((count, 1), num_layers - 1)), axis=1)
        self.modes = table.modes
        num_stages = shape.num_stages
        self.own = [list(range(stage, num_chunks, num_stages)) for stage in range(num_stages)]
        self.dense = self._stage_sums(table.dense_range)
        self.expert = self._stage_sums(table.expert_range)
        self.forward = self._stage_sums(table.fwd_range)
        self.backward = self._stage_sums(table.bwd_range)
        params_max = self._stage_max(table.params_max_range)
        kv_max = None if table.kv_max_range is None else self._stage_max(table.kv_max_range)
        fixed = prices.fixed_memory(table, shape.dp, shape.zero, self.dense + self.expert,
                                    params_max, kv_max)
        in_flight = shape.in_flight()[None, :]
        self.memory = np.stack([fixed + in_flight * self._stage_max(table.kept_range[mode])
                                + self._stage_max(table.work_range[mode])
                                for mode in self.modes], axis=2)  # [split, stage, mode]

    def _chunk_values(self, matrix: np.ndarray) -> np.ndarray:
        return matrix[self.first, self.last]

    def _stage_sums(self, matrix: np.ndarray) -> np.ndarray:
        values = self._chunk_values(matrix)
        return np.stack([values[:, chunks].sum(axis=1) for chunks in self.own], axis=1)

    def _stage_max(self, matrix: np.ndarray) -> np.ndarray:
        values = self._chunk_values(matrix)
        return np.stack([values[:, chunks].max(axis=1) for chunks in self.own], axis=1)

    def fits_somewhere(self) -> bool:
        return bool((self.memory <= self.limit).any(axis=2).all(axis=1).any())

    def least_memory(self) -> int:
        return int(self.memory.min(axis=2).max(axis=1).min())

    def search(self, geometries: list[StageGeometry], may_beat, offer) -> int:
        shape, table = self.shape, self.shape.table
        fits = self.memory <= self.limit
        last_chunk = shape.num_chunks - 1
        stage_times = np.full(fits.shape, INF, dtype=np.int64)
        for stage, geometry in enumerate(geometries):
            for index, mode in enumerate(self.modes):
                chunk_times = [self.prices.chunk_time(table, geometry, mode, shape.gather_dp,
                                                      chunk > 0, chunk < last_chunk)[
                    self.first[:, chunk], self.last[:, chunk]] for chunk in self.own[stage]]
                stage_times[:, stage, index] = np.max(chunk_times, axis=0)
        stage_times = np.where(fits, stage_times, INF)
        tau = stage_times.min(axis=2).max(axis=1)
        exposed = np.stack([self.prices.exposed(table, geometry, shape.dp, shape.zero,
                                                self.dense[:, stage], self.expert[:, stage],
                                                self.backward[:, stage],
                                                self.forward[:, stage])
                            for stage, geometry in enumerate(geometries)], axis=1)
        objective = np.where(tau < INF, shape.rounds * tau + exposed.max(axis=1), INF)
        best = int(objective.argmin())
        if objective[best] >= INF or not may_beat(int(objective[best]), 0):
            return 1
        chosen = stage_times[best].argmin(axis=1)  # the first fastest fitting mode
        stages = tuple(Stage(int(self.first[best, chunk]), int(self.last[best, chunk]),
                             self.modes[chosen[chunk % shape.num_stages]])
                       for chunk in range(shape.num_chunks))
        offer(int(objective[best]), 0, stages)
        return 1
