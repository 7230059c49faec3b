"""The stage-by-stage bound of interleaved shapes (v > 1, planner
``_interleaved_stagewise_bounds``) against exhaustive search over every split into S·v chunks
and every injective placement, and the pruned DP against the unbounded one on interleaved
instances."""

from __future__ import annotations

import dataclasses
import itertools
import math
from types import SimpleNamespace

import numpy as np
import pytest
from exhaustive import canonical_placements, shape_optimum
from tiers import slow_unless
from unbounded import same_optimum_unbounded

from nest_cp.cost import terms as cost
from nest_cp.dp import planner
from nest_cp.dp.compose import Shape
from nest_cp.dp.kernel import fill_table
from nest_cp.dp.node_bounds import crossing_tp_paths
from nest_cp.harness.generators import random_instance
from nest_cp.model.instance import IntraConfig, RecomputeMode
from nest_cp.model.result import SolveOptions
from nest_cp.solvers.registry import solve


def _blocks_instance(seed: int, tier_sizes: tuple[int, ...], overlap: bool,
                     num_layers: int = 5):
    """An embedding, identical blocks and a head (the presets' shape, searched by block
    counting), t in {1, 2}, ZeRO 0, 1 and 3, v in {1, 2}, communication heavy."""
    instance = random_instance(seed, num_layers=num_layers, tier_sizes=tier_sizes,
                               configs=(IntraConfig(), IntraConfig(tp=2)), zero_stages=(0, 1, 3),
                               global_batch=8, comm_scale=50, virtual_stages=(1, 2),
                               recompute_modes=(RecomputeMode.NONE,), identical_blocks=True)
    return dataclasses.replace(instance, training=dataclasses.replace(
        instance.training, overlap_grad_reduce=overlap, overlap_param_gather=overlap))


def _interleaved_shapes(search, instance, virtual: int):
    """Every (t = 2, S, d, v, z) shape interleaving allows: (Shape, exhaustive description)."""
    devices = instance.cluster.num_devices
    for choice_index, (config, microbatch) in enumerate(instance.choices):
        if config.tp != 2:
            continue
        table = search._table(choice_index)
        for stages in range(2, table.num_layers // virtual + 1):
            for dp in range(1, devices // (config.devices * stages) + 1):
                microbatches = cost.num_microbatches(instance.training.global_batch,
                                                     microbatch, config, dp)
                if microbatches % stages:
                    continue
                for zero in instance.training.zero_stages:
                    yield choice_index, Shape(table, stages, dp, virtual, zero, microbatches), \
                        SimpleNamespace(config=config, microbatch=microbatch, zero=zero, dp=dp,
                                        num_stages=stages, virtual=virtual)


def _optimum(instance, tier_sizes, shape, exhaustive_shape) -> float:
    """The least objective of the shape over every split and injective placement."""
    return shape_optimum(instance, exhaustive_shape, canonical_placements(
        tier_sizes, shape.table.config.devices * shape.num_stages * shape.dp))


# nodes of 2 with t = 2 (t fills the node: c = 1), nodes of 4 with t = 2 (c = 2)
@pytest.mark.parametrize("tier_sizes, overlap", slow_unless(
    [((2, 2, 2), False), ((2, 2, 2), True), ((4, 2), False), ((4, 2), True)],
    lambda case: case[0] == (4, 2)))
def test_interleaved_stagewise_bound_never_exceeds_the_exhaustive_optimum(tier_sizes, overlap):
    """For every interleaved shape (v = 2, t = 2): the stage-by-stage bound is at most the
    least objective over every split into S·v chunks and every injective placement; it rises
    above the case-split bound :meth:`_shape_bound` on some shapes and stays below the
    optimum on others (a relaxation: the chunks' mean time, each stage's count set by its
    hull)."""
    raised = loose = compared = 0
    for seed in range(2):
        instance = _blocks_instance(seed, tier_sizes, overlap)
        search = planner._Search(instance, SolveOptions(), ())
        for choice_index, shape, exhaustive_shape in _interleaved_shapes(search, instance, 2):
            chunk = search._chunk_time_bounds(choice_index)[shape.num_chunks]
            bound = search._shape_bound(shape, chunk)
            stagewise = int(search._interleaved_stagewise_bounds(
                shape.table, shape.num_stages, shape.virtual, shape.zero,
                np.array([shape.dp]))[0])
            optimum = _optimum(instance, tier_sizes, shape, exhaustive_shape)
            if optimum == math.inf:
                continue
            compared += 1
            assert stagewise <= optimum, (shape, stagewise, optimum)
            raised += stagewise > bound
            loose += stagewise < optimum
    assert compared and raised and loose


@pytest.mark.parametrize("tier_sizes, overlap", slow_unless(
    [((2, 2, 2), False), ((2, 2, 2), True), ((4, 2), False), ((4, 2), True)],
    lambda case: case == ((4, 2), True)))
def test_block_count_bound_with_one_chunk_a_stage(tier_sizes, overlap):
    """v = 1 (S >= 2, one chunk a stage), as the planner's stage-by-stage bound on block
    workloads (``_counted_stagewise``): the bound over block counts is at most the min-max
    over contiguous splits of the same stage weights (a relaxation of it), equal to it on
    most shapes, and at most the least objective over every split and injective
    placement."""
    compared = equal = 0
    for seed in range(2):
        instance = _blocks_instance(seed, tier_sizes, overlap)
        search = planner._Search(instance, SolveOptions(), ())
        for _, shape, exhaustive_shape in _interleaved_shapes(search, instance, 1):
            assert search._counted_stagewise(shape.table, shape.num_stages, 1)
            dps = np.array([shape.dp])
            counted = int(search._interleaved_stagewise_bounds(
                shape.table, shape.num_stages, 1, shape.zero, dps)[0])
            ranged = int(search._stagewise_bounds(shape.table, shape.num_stages, shape.zero,
                                                  dps, np.zeros(1, dtype=np.int64), None)[0])
            assert counted <= ranged, (shape, counted, ranged)
            equal += counted == ranged
            optimum = _optimum(instance, tier_sizes, shape, exhaustive_shape)
            if optimum == math.inf:
                continue
            compared += 1
            assert counted <= optimum, (shape, counted, optimum)
    assert compared and equal * 2 > compared


def _least_max_weight(weights: np.ndarray, multiplicity: list[int], count: int) -> int:
    """The least over every choice of a block count per stage (``multiplicity[k]`` stages
    of kind k) summing to ``count`` of the largest weight chosen: the X* the block-count
    test must never exceed (INF where no choice has every weight finite)."""
    kinds = [kind for kind, many in enumerate(multiplicity) for _ in range(many)]
    best = planner.INF
    for counts in itertools.product(range(count + 1), repeat=len(kinds)):
        if sum(counts) == count:
            best = min(best, max(int(weights[kind, n]) for kind, n in zip(kinds, counts)))
    return best


def _hull_scan(weights: np.ndarray, multiplicity: np.ndarray, count: int) -> int:
    """The block-count test as its docstring states it, by trying every value of the row
    in increasing order: the least finite X passing it, INF where none does."""
    before = np.minimum.accumulate(weights, axis=1)
    after = np.minimum.accumulate(weights[:, ::-1], axis=1)[:, ::-1]
    for limit in sorted(set(weights.ravel().tolist())):
        if limit >= planner.INF:
            break
        fewest = (before > limit).sum(axis=1)
        most = (after <= limit).sum(axis=1) - 1
        used = multiplicity > 0
        if np.all(fewest[used] <= count) and (multiplicity * fewest).sum() <= count <= \
                (multiplicity * most).sum():
            return limit
    return planner.INF


def test_block_count_test_is_its_hull_scan_and_never_above_the_least_max():
    """``_least_counted`` equals the hull test tried value by value, on rows with few and
    with many INF entries (a stage that cannot hold that many blocks), and never exceeds
    the exact least largest weight over every choice of counts.  A bisection over the
    sorted values that lets an INF middle fail the test, as the block-count test once
    had, returns INF on many of these rows: above a finite least largest weight."""
    rng = np.random.default_rng(11)
    compared = finite = 0
    for _ in range(400):
        kinds, count = int(rng.integers(1, 4)), int(rng.integers(0, 6))
        multiplicity = rng.integers(0, 3, size=kinds)
        multiplicity[0] = max(int(multiplicity[0]), 1)
        weights = rng.integers(0, 20, size=(3, kinds, count + 1)).astype(np.int64)
        weights[rng.random(weights.shape) < rng.random()] = planner.INF
        got = planner._least_counted(weights, multiplicity, count)
        for row, value in zip(weights, got.tolist()):
            assert value == _hull_scan(row, multiplicity, count)
            if multiplicity.sum() <= 4:
                least = _least_max_weight(row, multiplicity.tolist(), count)
                assert value <= least
                compared += 1
                finite += least < planner.INF
    assert compared > 300 and finite > 100


def test_interleaved_stagewise_bound_is_zero_without_blocks():
    """On a workload that is not identical blocks the bound does not apply: 0 for every d."""
    instance = dataclasses.replace(_blocks_instance(0, (2, 2, 2), False),
                                   workload=random_instance(1, num_layers=5,
                                                            configs=(IntraConfig(),
                                                                     IntraConfig(tp=2)),
                                                            ).workload)
    search = planner._Search(instance, SolveOptions(), ())
    table = search._table(1)
    assert table.config.tp == 2
    assert search._interleaved_stagewise_bounds(table, 2, 2, 0, np.array([1, 2])).tolist() \
        == [0, 0]


@pytest.mark.parametrize("seed", range(3))
def test_pruning_never_changes_the_interleaved_optimum(seed, monkeypatch):
    """On block workloads allowing v in {1, 2} (8 devices, nodes of 2 and of 4 by seed, both
    overlap flags by seed): the DP with every bound finds the objective the DP with every
    bound replaced by 0 (all outers searched) finds, and prunes some outer."""
    instance = _blocks_instance(seed, ((2, 2, 2), (4, 2))[seed % 2], bool(seed % 2),
                                num_layers=6)
    # every bound zeroed, the interleaved stage-by-stage bound among them
    pruned, exhaustive = same_optimum_unbounded(instance, monkeypatch,
                                                lambda i: solve(i, "dp", SolveOptions()))
    assert pruned.stats["outer_searched"] < exhaustive.stats["outer_searched"]


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_crossing_chunk_bound_is_the_least_over_crossing_stages(seed):
    """τ_h of :meth:`_Search._crossing_chunk_bound` against the kernel's min-max with the
    chunks k ≡ s (mod S) on their crossing times and the others on their cheapest ones, one
    s at a time, least over s, for every S·v <= L, v in {1, 2, 3}, and both the node and
    the tier-1 domain: equal for v = 1 (one recurrence for every K); with v >= 2 (by block
    counts) never above it, and equal where the receive after the leading layer is a
    block's (a middle chunk's receives are then the same at every place).  Both kinds of
    v >= 2 workload occur over the seeds and some values are finite."""
    instance = _blocks_instance(seed, ((2, 2, 2), (2, 4), (4, 2))[seed], overlap=True,
                                num_layers=10 + seed)
    search = planner._Search(instance, SolveOptions(), ())
    finite = 0
    for choice_index, (config, _) in enumerate(instance.choices):
        if config.tp != 2:
            continue
        table = search._table(choice_index)
        blocks = planner.block_structure(table)
        _, activation, _ = search._cheapest_ranges(table)
        alike = blocks.leading == 0 or activation[1] == activation[2]
        for virtual in (1, 2, 3):
            for num_stages in range(1 if virtual == 1 else 2,
                                    table.num_layers // virtual + 1):
                chunks = num_stages * virtual
                width = table.num_layers - chunks + 1
                ordered = np.triu(np.ones((width, width), dtype=bool))
                cheapest = search._cheapest_times(table, chunks)
                cheap = np.where(ordered, cheapest, planner.INF)
                for above in (0, 1):
                    found = search._crossing_chunk_bound(table, chunks, 1, num_stages, above)
                    if not crossing_tp_paths(search.network, 2, 1, above):
                        assert found == planner.INF
                        continue
                    extra = planner.windows(search._crossing_extra(table, 1, above), chunks)
                    cross = np.where(ordered, cheapest + extra, planner.INF)
                    crosses = np.arange(chunks) % num_stages
                    expected = min(int(fill_table(np.where(
                        (crosses == stage)[:, None, None], cross, cheap))[0][0, 0])
                        for stage in range(num_stages))
                    assert found <= expected, (virtual, num_stages, above, found, expected)
                    if virtual == 1 or alike:
                        assert found == expected, (virtual, num_stages, above, found,
                                                   expected)
                    finite += found < planner.INF
    assert finite
