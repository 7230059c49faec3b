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


def least_max(weight: np.ndarray) -> int:
    """``fill_table(weight)[0][0, 0]``, the least over splits of the largest stage weight,
    by the same recurrence with values only (no choices kept for a backtrack)."""
    num_stages, width, _ = weight.shape
    value = np.full(width, INF, dtype=np.int64)
    value[width - 1] = 0
    for stage in range(num_stages - 1, -1, -1):
        value = np.maximum(weight[stage], value[None, :]).min(axis=1)
    return int(value[0])


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


def superset_minimum(weights: np.ndarray) -> np.ndarray:
    """w̃(f, l) = min of w over the ranges [f', l'] ⊇ [f, l] (f' <= f <= l <= l'), for each
    L x L range matrix w of a stack (count, L, L) (below the diagonal: meaningless)."""
    superset = np.minimum.accumulate(weights, axis=1)  # over f' <= f
    return np.minimum.accumulate(superset[:, :, ::-1], axis=2)[:, :, ::-1]  # over l' >= l


def min_max_exceeds(superset: np.ndarray, num_stages: int,
                    threshold: np.ndarray) -> np.ndarray:
    """For each L x L range matrix w of a stack (count, L, L), given as
    :func:`superset_minimum` (w), whether every split of the L layers into ``num_stages``
    contiguous non-empty stages has a stage with w > its ``threshold`` (count,): then
    ``fill_table(windows(w, S))[0][0, 0]``, the least over splits of the largest stage
    weight, exceeds it.

    Proof.  Let w̃(f, l) = min of w over the ranges [f', l'] ⊇ [f, l] (f' <= f, l' >= l):
    w̃ <= w, so if every split has a stage with w̃ > threshold, every split has one with
    w > threshold.  w̃ is monotone under inclusion ([a, b] ⊆ [f, l] gives w̃(a, b) <=
    w̃(f, l): every superset of [f, l] is one of [a, b]), so "w̃ <= threshold" holds on
    every sub-range of a range where it holds.  Greedy — each stage runs from the layer
    after the previous one as far as w̃ <= threshold allows — then uses the fewest stages
    g of any split whose stages all have w̃ <= threshold (by induction the i-th greedy stage
    ends no earlier than the i-th stage of any such split: the next greedy stage starts
    inside or before that split's next stage and its range from there is a sub-range of
    it, so allowed).  A split into exactly S <= L stages with all w̃ <= threshold exists
    iff g <= S (from g stages, splitting stages gives sub-ranges, still allowed; and every
    such split has at least g stages), so the answer is "greedy needs more than S stages
    or gets stuck (a layer with w̃ > threshold alone)".  Costs O(L²) per matrix instead of
    the recurrence's O(S·W²)."""
    count, num_layers, _ = superset.shape
    allowed = (superset <= threshold[:, None, None]) \
        & np.triu(np.ones((num_layers, num_layers), dtype=bool))
    reach = allowed.sum(axis=2)  # [·, f]: layers f .. f + reach - 1 form an allowed stage
    rows = np.arange(count)
    first = np.zeros(count, dtype=np.int64)
    stages = np.zeros(count, dtype=np.int64)
    stuck = np.zeros(count, dtype=bool)
    for _ in range(min(num_stages, num_layers)):
        open_rows = first < num_layers
        step = np.where(open_rows, reach[rows, np.minimum(first, num_layers - 1)], 0)
        stuck |= open_rows & (step == 0)
        stages += open_rows
        first = first + step
    return stuck | (first < num_layers)


def min_max_values(weights: np.ndarray, num_stages: int) -> np.ndarray:
    """``fill_table(windows(w, S))[0][0, 0]`` for each L x L range matrix w of a stack
    (count, L, L) at once (INF below the diagonal: no such stage): the same recurrence,
    one stage at a time from the last, the stack's matrices side by side (values only)."""
    count, num_layers, _ = weights.shape
    width = num_layers - num_stages + 1
    value = np.full((count, width), INF, dtype=np.int64)
    value[:, width - 1] = 0
    for stage in range(num_stages - 1, -1, -1):
        window = weights[:, stage:stage + width, stage:stage + width]
        value = np.maximum(window, value[:, None, :]).min(axis=2)
    return value[:, 0]
