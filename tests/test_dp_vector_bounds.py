"""The planner's bounds priced for every d at once (issue 35, dp/vector_bounds.py) against
the exact one-shape bounds they relax, against exhaustive search over every placement, and
the kernel's stacked min-max and threshold test against the kernel itself."""

from __future__ import annotations

import math

import numpy as np
import pytest
from dp_shapes import v1_shapes
from exhaustive import canonical_placements, shape_optimum
from test_dp_node_bounds import _instance
from tiers import slow_unless

from nest_cp.dp import planner
from nest_cp.dp.kernel import (
    INF,
    fill_table,
    min_max_exceeds,
    min_max_values,
    superset_minimum,
    windows,
)
from nest_cp.dp.vector_bounds import lower_ticks
from nest_cp.model.instance import IntraConfig
from nest_cp.model.result import SolveOptions


def _slack(exact: int, rounds: int) -> int:
    """What rounding down may take off an exact bound: the ceilings dropped and 1 tick and
    the relative margin per rounded term (a few of them), the per-chunk ones ``rounds``
    times: far below a tick in ten thousand of the bound."""
    return 4 * (rounds + 2) + exact // 2**26


@pytest.mark.parametrize("tier_sizes, overlap", slow_unless(
    [((2, 2, 2), False), ((2, 2, 2), True), ((4, 2), False), ((4, 2), True)],
    lambda case: case == ((4, 2), True)))
def test_vector_bounds_never_exceed_the_exact_bounds_or_the_optimum(tier_sizes, overlap):
    """Per shape (c, S, d >= 2, z), v = 1: the d-vector of the case-split bound is at most
    :meth:`_shape_bound` and the vector stage-by-stage bound at most
    :meth:`_stagewise_bound`, each within rounding of it (so not vacuous), and both at most
    the least objective over every split and injective placement."""
    compared = 0
    for seed in range(2):
        instance = _instance(seed, tier_sizes, (IntraConfig(), IntraConfig(tp=2)), overlap)
        search = planner._Search(instance, SolveOptions(), ())
        for choice_index, shape, exhaustive_shape in v1_shapes(search, instance, min_dp=2):
            if shape.zero not in search._zero_stages(shape.table, shape.dp, shape.num_stages,
                                                     1):
                continue
            chunk = search._chunk_time_bounds(choice_index)[shape.num_chunks]
            outer = planner.Outer(0, choice_index, shape.num_stages, shape.dp, 1, chunk)
            search._group_bounds(outer)
            vector = int(search._zero_bounds[choice_index, shape.num_stages, 1,
                                             shape.zero][shape.dp - 1])
            exact = search._shape_bound(shape, chunk)
            assert exact - _slack(exact, shape.rounds) <= vector <= exact, (shape, vector, exact)
            optimum = shape_optimum(instance, exhaustive_shape, canonical_placements(
                tier_sizes, shape.table.config.devices * shape.num_stages * shape.dp))
            assert optimum == math.inf or vector <= optimum
            if shape.table.config.tp == 1:
                continue
            stagewise = search._stagewise_bound(shape)
            vector_stagewise = int(search._stagewise_bounds(
                shape.table, shape.num_stages, shape.zero, np.array([shape.dp]),
                np.zeros(1, dtype=np.int64), None)[0])
            assert stagewise - _slack(stagewise, shape.rounds) <= vector_stagewise <= stagewise
            assert optimum == math.inf or vector_stagewise <= optimum
            compared += 1
    assert compared


@pytest.mark.parametrize("num_stages", [1, 2, 3, 5])
def test_stacked_min_max_is_the_kernel_and_the_threshold_test_is_sound(num_stages):
    """On random range matrices: :func:`min_max_values` equals the kernel's value; the
    threshold test never claims "exceeds" at or above that value, and on matrices monotone
    under range inclusion (where its relaxation is exact) it answers exactly."""
    rng = np.random.default_rng(num_stages)
    num_layers = 7
    upper = np.triu(np.ones((num_layers, num_layers), dtype=bool))
    for monotone in (False, True):
        weights = rng.integers(0, 100, size=(40, num_layers, num_layers))
        if monotone:  # layer costs summed over the range: larger ranges cost more
            costs = rng.integers(0, 30, size=(40, num_layers))
            sums = np.concatenate([np.zeros((40, 1), dtype=np.int64), costs.cumsum(axis=1)],
                                  axis=1)
            weights = sums[:, None, 1:] - sums[:, :-1, None]
        weights = np.where(upper, weights, INF)
        values = min_max_values(weights, num_stages)
        expected = [int(fill_table(windows(matrix, num_stages))[0][0, 0])
                    for matrix in weights]
        assert values.tolist() == expected
        superset = superset_minimum(weights)
        for offset in (-2, -1, 0, 1):
            threshold = values + offset
            exceeds = min_max_exceeds(superset, num_stages, threshold)
            assert not np.any(exceeds & (values <= threshold))
            if monotone:
                assert np.array_equal(exceeds, values > threshold)


def test_lower_ticks_rounds_down():
    """Below the real value it approximates, by at most a tick and the relative margin."""
    values = np.array([0.0, 0.5, 1.0, 12345.999, 1e12 + 0.25])
    ticks = lower_ticks(values)
    assert np.all(ticks <= values)
    assert np.all(values - ticks <= 2 + np.abs(values) * 2**-29)
