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
    """``(value, choice)`` of the recurrence above for ``weight`` of shape (S, W, W).

    With W = 1 (as many stages as layers) every stage takes one layer and the table is a
    running maximum from the last stage; otherwise it is filled one stage at a time, the
    last stage first by :func:`_last_stage`.
    """
    num_stages, width, _ = weight.shape
    value = np.full((num_stages + 1, width), INF, dtype=np.int64)
    value[num_stages, width - 1] = 0
    choice = np.zeros((num_stages, width), dtype=np.int64)
    if width == 1:
        np.maximum.accumulate(np.maximum(weight[::-1, 0, 0], 0), out=value[num_stages - 1::-1, 0])
        return value, choice
    rows = np.arange(width)
    _last_stage(weight[num_stages - 1], value, choice)
    for stage in range(num_stages - 2, -1, -1):
        candidates = np.maximum(weight[stage], value[stage + 1][None, :])
        choice[stage] = candidates.argmin(axis=1)
        value[stage] = candidates[rows, choice[stage]]
    return value, choice


def _last_stage(weight: np.ndarray, value: np.ndarray, choice: np.ndarray) -> None:
    """The last stage's row of the recurrence, in place: it must end at the last layer
    (value[S] is INF but at W − 1, where it is 0), so where max(weight[f, W − 1], 0) < INF
    that is the value and W − 1 the choice (every other candidate is INF at least); the
    other rows are minimised in full."""
    width = weight.shape[1]
    last = np.maximum(weight[:, width - 1], 0)
    value[-2], choice[-1] = last, width - 1
    open_rows = np.flatnonzero(last >= INF)
    if len(open_rows):
        candidates = np.maximum(weight[open_rows], value[-1][None, :])
        best = candidates.argmin(axis=1)
        choice[-1, open_rows] = best
        value[-2, open_rows] = candidates[np.arange(len(open_rows)), best]


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
    view = np.ndarray((num_stages, width, width), dtype=matrix.dtype, buffer=matrix,
                      strides=(row_stride + col_stride, row_stride, col_stride))
    view.flags.writeable = False  # (as_strided does the same, several times slower)
    return view


def vector_windows(vector: np.ndarray, num_stages: int) -> np.ndarray:
    """Read-only (S, W) view: ``vector_windows[stage] = vector[stage:stage + W]``."""
    vector = np.ascontiguousarray(vector)
    width = len(vector) - num_stages + 1
    (stride,) = vector.strides
    view = np.ndarray((num_stages, width), dtype=vector.dtype, buffer=vector,
                      strides=(stride, stride))
    view.flags.writeable = False
    return view
