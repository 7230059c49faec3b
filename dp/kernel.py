"""The min-max suffix kernel every DP pass of the planner runs, and its backtracking.

Stage ``stage`` (0 = first) of an S-stage pipeline over L layers can only start at
layers ``stage .. stage + W - 1`` with W = L - S + 1 (every stage is non-empty), so
its first and last layers are stored as window offsets

    first_layer = stage + first_offset,   last_layer = stage + last_offset,

and the next stage then starts at offset ``last_offset`` of its own window.  With
``weight[stage, first_offset, last_offset]`` the cost of that stage (``INF`` when it
is not allowed), the table is

    value[S, W - 1] = 0,   value[S, other] = INF,
    value[stage, first_offset] = min over last_offset >= first_offset of
        max(weight[stage, first_offset, last_offset], value[stage + 1, last_offset]),

and ``value[0, 0]`` is the least possible maximum stage cost over every contiguous
split.  Ties go to the smallest ``last_offset`` (the shortest stage).
"""

from __future__ import annotations

import numpy as np

INF = np.iinfo(np.int64).max // 4


def fill_table(weight: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(value, choice)`` of the recurrence above for ``weight`` of shape (S, W, W)."""
    num_stages, width, _ = weight.shape
    value = np.full((num_stages + 1, width), INF, dtype=np.int64)
    value[num_stages, width - 1] = 0
    choice = np.zeros((num_stages, width), dtype=np.int64)
    rows = np.arange(width)
    for stage in range(num_stages - 1, -1, -1):
        candidates = np.maximum(weight[stage], value[stage + 1][None, :])
        choice[stage] = candidates.argmin(axis=1)
        value[stage] = candidates[rows, choice[stage]]
    return value, choice


def backtrack(choice: np.ndarray) -> list[tuple[int, int]]:
    """The (first_layer, last_layer) of every stage of the split ``fill_table`` chose."""
    stages, first_offset = [], 0
    for stage in range(choice.shape[0]):
        last_offset = int(choice[stage, first_offset])
        stages.append((stage + first_offset, stage + last_offset))
        first_offset = last_offset
    return stages


def windows(matrix: np.ndarray, num_stages: int) -> np.ndarray:
    """Read-only (S, W, W) view: ``windows[stage] = matrix[stage:stage + W, stage:stage + W]``.

    ``matrix`` is an L x L range matrix indexed [first_layer, last_layer]; no copy is made.
    """
    matrix = np.ascontiguousarray(matrix)
    width = matrix.shape[0] - num_stages + 1
    row_stride, col_stride = matrix.strides
    return np.lib.stride_tricks.as_strided(
        matrix, shape=(num_stages, width, width),
        strides=(row_stride + col_stride, row_stride, col_stride), writeable=False)


def vector_windows(vector: np.ndarray, num_stages: int) -> np.ndarray:
    """Read-only (S, W) view: ``vector_windows[stage] = vector[stage:stage + W]``."""
    width = len(vector) - num_stages + 1
    return np.lib.stride_tricks.sliding_window_view(np.ascontiguousarray(vector), width)[
        :num_stages]
