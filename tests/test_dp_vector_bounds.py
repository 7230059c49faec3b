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

from nest_cp.cost import terms as cost
from nest_cp.dp import planner
from nest_cp.dp.compose import Shape, parameter_kinds, whole_totals
from nest_cp.dp.kernel import (
    INF,
    fill_table,
    min_max_exceeds,
    min_max_values,
    superset_minimum,
    windows,
)
from nest_cp.dp.suffix import per_stage, stage_times
from nest_cp.dp.vector_bounds import lower_ticks, path_classes, ring_terms
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
    the larger of :meth:`_shape_bound` and :meth:`_domain_bound` (at least the first) and
    the vector stage-by-stage bound at most
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
            # the vector bound also holds the domain bound's case A (_vector_domain_bound)
            ceiling = max(exact, search._domain_bound(shape, chunk, (choice_index,)))
            assert exact - _slack(exact, shape.rounds) <= vector <= ceiling, \
                (shape, vector, exact, ceiling)
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


def _sync_priced_alone(search, table, num_stages: int, zero: int, dps: np.ndarray, cap):
    """The vector sync bound of d = ``dps`` priced from their own path classes only (what
    _vector_sync computed before its ring terms were kept over every d)."""
    training, phases = search.instance.training, search._sync_phases(zero)
    _, forward, backward = whole_totals(table)
    heaviest_bound, total = np.zeros(len(dps)), np.zeros(len(dps))
    for params, every_layer, per_replica in parameter_kinds(table):
        if params == 0:
            continue
        sizes = dps * per_replica
        heaviest = -(-params // num_stages)
        holders = num_stages if every_layer else 1
        for mask, paths in path_classes(search.network, sizes, cap):
            slopes, offsets, heavy = [], [], None
            for kind, bytes_per_unit, full in phases:
                terms = [ring_terms(search.prices.ring_rates(kind, bytes_per_unit,
                                                             search.ids.id_of(path)),
                                    sizes[mask]) for path in paths]
                slopes.append(np.min([slope for slope, _ in terms], axis=0))
                offsets.append(np.min([offset for _, offset in terms], axis=0))
                if full:
                    prices = [slope * heaviest + offset for slope, offset in terms]
                    heavy = prices if heavy is None else [
                        old + new for old, new in zip(heavy, prices)]
            total[mask] += sum(slopes) * params + holders * sum(offsets)
            if heavy is not None:
                heaviest_bound[mask] = np.maximum(heaviest_bound[mask], np.min(heavy, axis=0))
    hidden = (backward if training.overlap_grad_reduce else 0) \
        + (forward if training.overlap_param_gather and cost.gathers_weights(zero) else 0)
    mean = (total - hidden) / num_stages
    return np.maximum(0, np.maximum(lower_ticks(heaviest_bound), lower_ticks(mean, hidden)))


@pytest.mark.parametrize("overlap", [False, True])
def test_vector_sync_reads_the_ring_terms_kept_over_every_d(overlap):
    """_vector_sync of d = 1 .. N // (a·S), reading ring terms kept once over every d of
    the configuration, equals the same bound priced from those d alone, entry for entry,
    for every S, ZeRO stage and cap (S asked in an order where a short range comes first)."""
    compared = 0
    for tier_sizes in ((2, 3, 4), (4, 2, 2)):
        instance = _instance(0, tier_sizes, (IntraConfig(), IntraConfig(tp=2),
                                             IntraConfig(ep=2)), overlap)
        search = planner._Search(instance, SolveOptions(), ())
        for choice_index in range(len(instance.choices)):
            table = search._table(choice_index)
            most = instance.cluster.num_devices // table.config.devices
            caps = [None, *(cap for _, cap in search._tp_qualities(table.config.tp))]
            for num_stages in sorted(range(1, most + 1), key=lambda stages: -stages):
                dps = np.arange(1, most // num_stages + 1, dtype=np.int64)
                for zero in (0, 1, 3):
                    for cap in caps:
                        kept = search._vector_sync(table, num_stages, zero, dps, cap)
                        alone = _sync_priced_alone(search, table, num_stages, zero, dps, cap)
                        assert np.array_equal(kept, alone), (tier_sizes, num_stages, zero, cap)
                        compared += 1
    assert compared


def test_stage_times_kept_per_geometries_equal_those_priced_afresh():
    """suffix.stage_times, kept per (geometries, gather group size) in the table's cache,
    equals per_stage of the chunk times priced afresh for every v = 1 shape and layout,
    read-only; shapes of other d and z read the same kept arrays."""
    instance = _instance(0, (2, 2, 2), (IntraConfig(), IntraConfig(tp=2)), False)
    search = planner._Search(instance, SolveOptions(), None)
    checked = shared = 0
    for _, shape, _ in v1_shapes(search, instance):
        for _, layout in search._layouts(shape.table.config, shape.num_stages, shape.dp):
            geometries = search.geometries(layout, shape.table.config, shape.num_stages,
                                           shape.dp)
            entries = len(shape.table.cache.get("stage times", {}))
            times = stage_times(search.prices, shape, geometries)
            shared += len(shape.table.cache["stage times"]) == entries
            for mode, matrix in times.items():
                assert not matrix.flags.writeable
                assert np.array_equal(matrix, per_stage(
                    geometries, lambda g, mode=mode, shape=shape: search.prices.chunk_time(
                        shape.table, g, mode, shape.gather_dp)))
            checked += 1
    assert checked and shared


def test_vector_class_bound_never_exceeds_the_exact_one():
    """Per (c, S, v, z) on networks of nodes of 2, 4 and 8 with t = 2, 4, 8: the d-vector
    of the class bound of the structured layouts is at most :meth:`_layout_class_bound` at
    every d, within rounding of it (0 exactly where it is 0), and both classes occur; with
    an incumbent the group bounds of every z hold it at the d that may beat the incumbent,
    and lie between it and the largest of the exact class, case-split and domain bounds
    (the last where a stage of t·d leaves its tier-1 domain)."""
    from nest_cp.harness.generators import random_instance

    met, compared, raised = set(), 0, 0
    for tier_sizes in ((2, 4, 4), (4, 4, 4), (8, 4, 2)):
        configs = tuple(IntraConfig(tp=tp) for tp in (2, 4, 8))
        instance = random_instance(0, num_layers=4, tier_sizes=tier_sizes, configs=configs,
                                   zero_stages=(0, 1, 3), virtual_stages=(1, 2),
                                   comm_scale=50)
        search = planner._Search(instance, SolveOptions(), None)
        search.best.objective = INF - 1  # an incumbent no shape reaches: every d wanted
        training = instance.training
        for choice_index, (config, microbatch) in enumerate(instance.choices):
            table = search._table(choice_index)
            chunks = search._chunk_time_bounds(choice_index)
            for num_stages in range(1, table.num_layers + 1):
                dps = np.arange(1, instance.cluster.num_devices // (config.devices * num_stages)
                                + 1, dtype=np.int64)
                microbatches = cost.num_microbatches(training.global_batch, microbatch,
                                                     config, dps)
                for virtual in (1, 2):
                    if num_stages * virtual > table.num_layers or (
                            virtual > 1 and num_stages < 2):
                        continue
                    chunk = chunks[num_stages * virtual]
                    rounds = virtual * microbatches + num_stages - 1
                    outer = planner.Outer(0, choice_index, num_stages, 1, virtual, chunk)
                    grouped = search._group_bounds(outer) is not False
                    for zero in (0, 1, 3):
                        terms = search._class_terms(table, num_stages, virtual, zero, dps,
                                                    rounds, chunk)
                        vector = search._vector_class_bound(
                            terms, table, (num_stages, virtual, zero), dps, rounds, chunk,
                            np.ones(len(dps), dtype=bool))
                        for dp in dps.tolist():
                            shape = Shape(table, num_stages, dp, virtual, zero,
                                          int(microbatches[dp - 1]))
                            exact = search._layout_class_bound(shape, chunk)
                            entry = int(vector[dp - 1])
                            assert exact - _slack(exact, shape.rounds) <= entry <= exact, \
                                (tier_sizes, config, num_stages, dp, virtual, zero)
                            assert (entry == 0) == (exact == 0)
                            met.add(search._tp_classes(config, num_stages, dp))
                            compared += 1
                            group = search._zero_bounds.get(
                                (choice_index, num_stages, virtual, zero))
                            if not grouped or group is None or zero not in \
                                    search._zero_stages(table, dp, num_stages, virtual):
                                continue
                            ceiling = max(exact, search._shape_bound(shape, chunk),
                                          search._domain_bound(shape, chunk, (choice_index,)))
                            assert entry <= int(group[dp - 1]) <= ceiling
                            raised += int(group[dp - 1]) > search._shape_bound(shape, chunk)
    assert compared and raised
    assert any(m and "crossing" in m for m in met) and any(m and "inside" in m for m in met)


def test_layout_floor_never_exceeds_the_outers_optimum():
    """The layout floor of an outer choice (_search_outer with ``floor``, an incumbent no
    shape reaches: nothing dropped) is at most the least objective the search of that
    outer alone finds, and above its refined bound on some outers; a floor at or above
    the least layout bound is returned as soon as a layout is priced."""
    from nest_cp.harness.generators import random_instance

    compared = raised = 0
    for tier_sizes in ((2, 2, 2), (4, 2)):
        configs = (IntraConfig(), IntraConfig(tp=2))
        instance = random_instance(1, num_layers=3, tier_sizes=tier_sizes, configs=configs,
                                   zero_stages=(0, 1, 3), comm_scale=50)
        search = planner._Search(instance, SolveOptions(), None)
        for outer in search._outer_choices():
            search.best = planner.Best(objective=INF - 1)
            refined = search._refined_bound(outer)
            floor = search._search_outer(outer, -1)
            assert search._search_outer(outer, floor) == floor
            search.best = planner.Best()
            search._search_outer(outer)
            optimum = search.best.objective
            assert optimum is None or floor <= optimum, (outer, floor, optimum)
            assert optimum is None or refined <= optimum
            compared += optimum is not None
            raised += optimum is not None and floor > refined
    assert compared and raised


def test_layout_floor_pricing_the_case_split_late_is_the_eager_floor():
    """An outer's layout floor where its vector bound is known (the case split of
    _shape_bound priced once a layout passes its own bounds) equals the floor with the case
    split priced first (no vector bound known), under no incumbent and under the optimum;
    on some outers the floor without the case split is lower (so pricing it late, not
    leaving it out, is what keeps the floors equal)."""
    from nest_cp.harness.generators import random_instance

    compared = raised = 0
    for tier_sizes in ((4, 4, 8),):  # 128 devices: the vector bounds (64 d and more)
        configs = (IntraConfig(), IntraConfig(tp=2))
        instance = random_instance(1, num_layers=3, tier_sizes=tier_sizes, configs=configs,
                                   zero_stages=(0, 1, 3), comm_scale=50)
        optimum = planner.solve(instance, SolveOptions()).objective_ticks
        for objective in (INF - 1, optimum):
            late, early, without = (planner._Search(instance, SolveOptions(), None,
                                                    cutoff=objective) for _ in range(3))
            without._shape_bound = lambda shape, chunk_bound, split=True: 0
            for outer in late._outer_choices():
                for search in (late, without):
                    search._refined_bound(outer)  # the vector bounds of its (c, b, S, v)
                early._zero_bounds.clear()
                floors = [search._search_outer(outer, -1) for search in (late, early, without)]
                assert floors[0] == floors[1], (outer, objective, floors)
                compared += 1
                raised += floors[2] < floors[0]
    assert compared and raised


def test_size_classes_read_back_are_the_path_classes_of_the_sizes_asked():
    """_size_classes (path classes found once over every group size, read back) gives each
    size of a batch the paths path_classes gives it in that batch alone, for every cap and
    every tier a group must leave, on batches of sizes in any order (1 belongs to none)."""
    compared = 0
    rng = np.random.default_rng(3)
    for tier_sizes in ((2, 3, 4), (4, 2, 2), (2, 2, 2)):
        instance = _instance(0, tier_sizes, (IntraConfig(), IntraConfig(tp=2)), False)
        search = planner._Search(instance, SolveOptions(), ())
        devices = instance.cluster.num_devices
        tiers = len(search.network.cluster.network.domain_sizes())
        for cap in sorted({*(cap for _, cap in search._tp_qualities(2)), 1, tier_sizes[0]}):
            for above in range(-1, tiers - 1):
                for _ in range(6):
                    sizes = rng.integers(1, devices + 1, size=int(rng.integers(1, 9)))
                    expected = {}
                    for mask, paths in path_classes(search.network, sizes, cap, above):
                        expected.update({int(size): paths for size in sizes[mask]})
                    read = {}
                    for rows, paths in search._size_classes(sizes, cap, above):
                        read.update({int(size): paths for size in sizes[rows]})
                    assert read == expected, (tier_sizes, cap, above, sizes)
                    compared += len(expected)
    assert compared


def test_refined_bound_raised_by_known_stage_rows_never_exceeds_the_outers_optimum():
    """Once every z's stage-by-stage bound of an outer's d is known (its deepening priced
    them with other d), its refined bound is the least over z of that and the z's vector
    bound: on outers where that rises above the vector bound alone, it is at most the
    least objective the search of that outer alone finds (and it rises on some)."""
    from nest_cp.harness.generators import random_instance

    raised = 0
    configs = (IntraConfig(), IntraConfig(tp=2))
    for seed in range(2, 5):
        instance = random_instance(seed, num_layers=4, tier_sizes=(4, 4, 8), configs=configs,
                                   zero_stages=(0, 1, 3), comm_scale=50)
        optimum = planner.solve(instance, SolveOptions()).objective_ticks
        # an incumbent twice the optimum: most d are still wanted, so their rows priced
        search = planner._Search(instance, SolveOptions(), None, cutoff=2 * optimum)
        outers = list(search._outer_choices())
        vectors = {outer.key: search._refined_bound(outer) for outer in outers}
        for outer in outers:  # the stage-by-stage rows, priced as the deepening prices them
            search._deeper_bound(outer, vectors[outer.key])
        for outer in outers:
            refined = search._refined_bound(outer)
            assert refined >= vectors[outer.key]
            if refined == vectors[outer.key] or refined >= INF:
                continue
            search.best = planner.Best()
            search._search_outer(outer)
            alone = search.best.objective
            assert alone is None or refined <= alone, (outer, refined, alone)
            search.best = planner.Best(objective=2 * optimum)
            raised += alone is not None
    assert raised
