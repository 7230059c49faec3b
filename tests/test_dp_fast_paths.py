"""The structured DP's fast paths against the computations they stand for.

At 10^5 devices the DP prices stage geometries from a rank layout's strides
(:class:`nest_cp.dp.geometry.LayoutGeometries`: a few replicas and stages, canonical strides,
data-parallel groups as progressions with a closed-form channel count k, docs/cost-model.md
§5 a), builds ring-collective forms and sync floors in integers, prices range matrices once
per distinct total, and shortcuts two kernel cases.  Each must give exactly what the
straightforward computation gives; these tests compare them on random inputs.
"""

from __future__ import annotations

import math
import random
from fractions import Fraction

import numpy as np
import pytest

from nest_cp.cost import terms as cost
from nest_cp.dp import pricing
from nest_cp.dp.compose import RangePrices, SyncFloor, _slowest, _ticks
from nest_cp.dp.geometry import (
    LayoutGeometries,
    PathIds,
    _GroupPathCodes,
    _inner_stage_period,
    _progression_fewest,
    fastest_group_paths,
    rank_devices,
    stage_geometries,
)
from nest_cp.dp.kernel import INF, fill_table, least_max, vector_windows, windows
from nest_cp.dp.pricing import LayerTable, LinearTicks
from nest_cp.model.instance import (
    Cluster,
    CollectiveKind,
    GraphNetwork,
    HierarchicalNetwork,
    IntraConfig,
    Link,
    RecomputeMode,
    Tier,
)
from nest_cp.model.network import NetworkModel
from nest_cp.model.plan import all_layouts
from nest_cp.profiles.presets import build_instance


def _tiered(rng: random.Random, num_devices: int) -> NetworkModel:
    """1-3 tiers above nodes of 2-8 devices (sizes not all powers of two), slower outward,
    efficiencies below 1: multi-channel paths occur."""
    sizes = [rng.choice([2, 3, 4, 6, 8])] + [rng.choice([2, 3, 4])
                                             for _ in range(rng.randint(0, 2))]
    sizes.append(max(1, -(-num_devices // math.prod(sizes))))
    bandwidth, tiers = 2e11, []
    for index, size in enumerate(sizes):
        tiers.append(Tier(f"tier{index}", size, bandwidth, rng.choice([0.0, 1e-6]),
                          efficiency=rng.choice([1.0, 0.8])))
        bandwidth /= rng.choice((2, 3, 8, 20))
    return NetworkModel(Cluster(num_devices, 10**9, HierarchicalNetwork(tuple(tiers))))


# ------------------------------------------------------------------ geometry


@pytest.mark.parametrize("seed", range(6))
def test_layout_geometries_equal_those_of_the_placement(seed):
    """One LayoutGeometries (its caches shared) over many layouts, configurations, depths,
    replica counts and wrap flags gives the stage geometries of the placement's device array,
    with the same path ids met in the same order."""
    rng = random.Random(seed)
    network = _tiered(rng, rng.choice([600, 1000, 2048, 3000]))
    order = np.array(network.canonical_order(), dtype=np.int64)
    fast_ids, array_ids = PathIds(network), PathIds(network)
    fast = LayoutGeometries(network, fast_ids, order)
    for _ in range(60):
        config = IntraConfig(rng.choice([1, 2, 3, 4, 8]), rng.choice([1, 1, 2, 3]))
        num_stages = rng.choice([1, 2, 3, 5, 9, 17, 24])
        most = network.num_devices // (config.devices * num_stages)
        if most < 1:
            continue
        dp = rng.randint(1, most) if rng.random() < 0.5 else rng.randint(max(1, most - 40), most)
        layout, wrap = rng.choice(all_layouts()), rng.random() < 0.5
        expected = stage_geometries(network, array_ids, rank_devices(
            layout, config, num_stages, dp, order), config, wrap)
        assert fast(layout, config, num_stages, dp, wrap) == expected
    assert fast_ids.paths == array_ids.paths
    assert len(fast_ids.paths) > network.num_tiers  # multi-channel paths were met


def test_layout_geometries_on_a_graph_are_those_of_the_placement():
    """Off tiered networks the placement's device array is used as before."""
    rng = random.Random(3)
    links = [Link(device, rng.choice(["s0", "s1"]), rng.choice((1e10, 1e11)), 1e-6)
             for device in range(12)]
    links.append(Link("s0", "s1", 5e9, 1e-5))
    network = NetworkModel(Cluster(12, 10**9, GraphNetwork(("s0", "s1"), tuple(links))))
    order = np.array(network.canonical_order(), dtype=np.int64)
    fast_ids, array_ids = PathIds(network), PathIds(network)
    fast = LayoutGeometries(network, fast_ids, order)
    for layout in all_layouts()[:6]:
        config = IntraConfig(2, 1)
        expected = stage_geometries(network, array_ids, rank_devices(layout, config, 2, 3, order),
                                    config, True)
        assert fast(layout, config, 2, 3, True) == expected


@pytest.mark.parametrize("seed", range(4))
def test_layout_geometries_of_deep_pipelines_with_every_replica_class(seed):
    """Deep pipelines (up to 40 stages) at the largest d, where the replicas placed cover a
    whole class modulo the period and one inner stage stands for many
    (:func:`_inner_stage_period`): the stage geometries of the placement's device array."""
    rng = random.Random(100 + seed)
    network = _tiered(rng, rng.choice([1024, 2048, 3000]))
    order = np.array(network.canonical_order(), dtype=np.int64)
    fast_ids, array_ids = PathIds(network), PathIds(network)
    fast = LayoutGeometries(network, fast_ids, order)
    for _ in range(30):
        config = IntraConfig(rng.choice([1, 2, 3, 4, 8]), 1)
        num_stages = rng.choice([9, 17, 24, 33, 40])
        most = network.num_devices // (config.devices * num_stages)
        if most < 1:
            continue
        dp = rng.randint(max(1, most - 3), most)
        layout, wrap = rng.choice(all_layouts()), rng.random() < 0.5
        expected = stage_geometries(network, array_ids, rank_devices(
            layout, config, num_stages, dp, order), config, wrap)
        assert fast(layout, config, num_stages, dp, wrap) == expected
    assert fast_ids.paths == array_ids.paths


def test_inner_stage_period_repeats_the_replica_classes():
    """Inner stages s and s + p (p of :func:`_inner_stage_period`) meet the same first
    positions modulo M over their placed replicas r < min(d, M / gcd(σ_R, M)), counted."""
    rng = random.Random(5)
    for _ in range(3000):
        modulus = rng.choice([1, 2, 8, 12, 32, 96, 160, 256])
        stage_stride, replica_stride = rng.randint(1, 600), rng.randint(1, 600)
        replicas = min(rng.randint(1, 400), modulus // math.gcd(replica_stride, modulus))
        stride = replica_stride if replicas > 1 else 0  # as the planner passes it
        period = _inner_stage_period(modulus, stage_stride, stride, replicas)
        assert (modulus // math.gcd(stage_stride, modulus)) % period == 0
        met = [{(stage * stage_stride + r * replica_stride) % modulus for r in range(replicas)}
               for stage in range(1, 6 + period)]
        assert all(met[index] == met[index + period] for index in range(5))


def test_progression_fewest_counts_the_members():
    """The closed-form k of {start + i·stride : i < count} is its fewest members in one
    tier-0 domain it touches, counted."""
    rng = random.Random(1)
    for _ in range(3000):
        domain, stride, count = rng.randint(1, 12), rng.randint(1, 30), rng.randint(2, 60)
        starts = np.arange(3 * domain + 2)
        for start, fewest in zip(starts.tolist(),
                                 _progression_fewest(starts, stride, count, domain).tolist()):
            members: dict[int, int] = {}
            for index in range(count):
                domain_id = (start + index * stride) // domain
                members[domain_id] = members.get(domain_id, 0) + 1
            assert fewest == min(members.values())


@pytest.mark.parametrize("seed", range(4))
def test_canonical_progression_keeps_tier_and_channels(seed):
    """A data-parallel group's canonical (stride, count) gives every first member the path id
    the group itself has."""
    rng = random.Random(seed)
    network = _tiered(rng, 4096)
    fast = LayoutGeometries(network, PathIds(network), np.arange(network.num_devices))
    groups = _GroupPathCodes(network, fast.ids)
    for _ in range(80):
        stride = rng.choice([1, 2, 3, 4, 5, 8, 16, 33, 64, 100, 257])
        count = rng.randint(2, (network.num_devices - fast.period - 1) // stride + 1)
        starts = np.arange(fast.period)
        canonical = fast._canonical_progression(stride, count)
        assert canonical[1] <= count and canonical[0] <= stride
        assert (groups.of_box(starts, [canonical]) == groups.of_box(starts, [(stride, count)])
                ).all()


# ------------------------------------------------------------------ forms and pricing


@pytest.fixture(scope="module")
def mixtral():
    """A preset with expert parameters and EP, on a network with multi-channel paths."""
    instance = build_instance(model="mixtral-8x7b", devices=1024, network="nest-h100-spineleaf")
    network = NetworkModel(instance.cluster)
    ids = PathIds(network)
    for size in (2, 3, 8, 100, 1000):
        for path in fastest_group_paths(network, size):
            ids.id_of(path)
    return instance, network, ids


def test_ring_forms_are_those_of_linear_collective(mixtral):
    """The DP's integer-built sync and gather forms equal pricing.sync_forms and
    pricing.zero3_gather_form on every path, group size and ZeRO stage (built from ring
    rates, not by the fallback)."""
    instance, _, ids = mixtral
    prices = RangePrices(instance, ids)
    optimizer = instance.training.optimizer
    for path in range(len(ids.paths)):
        for kind, unit in ((CollectiveKind.ALL_REDUCE, optimizer.grad_bytes),
                           (CollectiveKind.REDUCE_SCATTER, optimizer.grad_bytes),
                           (CollectiveKind.ALL_GATHER, optimizer.weight_bytes)):
            assert prices._ring.rates(kind, unit, path) is not None
    rng = random.Random(2)
    for size in [2, 3, 4, 7, 8, 9] + [rng.randint(2, 200_000) for _ in range(30)]:
        for path in range(len(ids.paths)):
            assert prices.gather_form(size, path) == pricing.zero3_gather_form(
                instance, size, ids.paths[path])
            for zero in range(4):
                assert prices.sync_forms(zero, size, path) == pricing.sync_forms(
                    instance, zero, size, ids.paths[path])


def test_sync_floor_from_rates_equals_floor_from_forms(mixtral):
    """The planner's sync floor scaled from the least ring rates equals the one taken over
    the forms themselves, as exact rates."""
    instance, network, ids = mixtral
    prices = RangePrices(instance, ids)
    for size in (2, 3, 5, 8, 16, 17, 100, 999, 1024):
        paths = fastest_group_paths(network, size)
        for zero in range(4):
            fast = prices.sync_floor(zero, size, paths)
            slow = SyncFloor.of([prices.sync_forms(zero, size, ids.id_of(path))
                                 for path in paths])
            assert (Fraction(fast.slope_rate, fast.denominator),
                    Fraction(fast.offset_rate, fast.denominator)) == \
                (Fraction(slow.slope_rate, slow.denominator),
                 Fraction(slow.offset_rate, slow.denominator))


def test_ticks_equal_the_exact_ceiling():
    """The int64 evaluation of a form (direct, in two limbs, or by of_array) is the exact
    ceil((slope·v + offset) / denominator) wherever the result fits."""
    rng = random.Random(4)
    limbs = 0
    for _ in range(5000):
        bits = rng.choice([8, 30, 40, 50, 62, 70])
        form = LinearTicks(rng.randrange(0, 2**rng.randint(1, bits)),
                           rng.randrange(0, 2**rng.randint(1, bits + 10)),
                           rng.randrange(1, 2**rng.randint(1, 45)))
        largest = 2**rng.randint(1, 44)
        volumes = np.array([rng.randrange(1, largest) for _ in range(20)] + [largest],
                           dtype=np.int64)
        exact = [-(-(form.slope * v + form.offset) // form.denominator)
                 for v in volumes.tolist()]
        if max(exact) >= pricing.INT64_SAFE:
            continue
        assert _ticks(form, volumes).tolist() == exact
        limbs += form.slope * largest + form.offset + form.denominator > pricing.INT64_SAFE
    assert limbs > 100


def test_slowest_is_the_largest_form_at_positive_volumes():
    """Dropping dominated forms and unpriced volumes keeps the elementwise maximum."""
    rng = random.Random(5)
    for _ in range(500):
        forms = [LinearTicks(rng.randint(0, 50), rng.randint(0, 500), rng.randint(1, 40))
                 for _ in range(rng.randint(1, 4))]
        volumes = np.array([rng.randint(-5, 1000) for _ in range(30)], dtype=np.int64)
        expected = np.max([form.of_array(volumes) for form in forms], axis=0)
        assert (_slowest(forms, volumes) == expected).all()


@pytest.mark.parametrize("model", ["mixtral-8x7b", "gpt3-175b"])
def test_range_prices_equal_pricing_every_range(model):
    """Exposed sync, ZeRO-3 gathers and fixed memory priced once per distinct total equal
    the same terms priced on the whole range matrices."""
    instance = build_instance(model=model, devices=1024, network="nest-h100-spineleaf")
    network = NetworkModel(instance.cluster)
    ids = PathIds(network)
    prices = RangePrices(instance, ids)
    geometries = LayoutGeometries(network, ids, np.array(network.canonical_order()))
    rng = random.Random(6)
    for _ in range(8):
        config, microbatch = rng.choice(instance.choices)
        table = LayerTable(instance, config, microbatch)
        dp = rng.choice([2, 3, 8]) * (2 if config.devices < 8 else 1)
        stage = geometries(rng.choice(all_layouts()), config, 2, dp, False)[1]
        for zero in range(4):
            direct = prices.exposed(table, stage, dp, zero, table.dense_range,
                                    table.expert_range, table.bwd_range, table.fwd_range)
            assert (prices.exposed_range(table, stage, dp, zero) == direct).all()
            optimizer = instance.training.optimizer
            fixed = cost.state_bytes(table.params_range, optimizer, zero, dp)
            if zero == 3:
                fixed = fixed + 2 * table.params_max_range * optimizer.weight_bytes
            assert (prices.fixed_memory(table, dp, zero, table.params_range,
                                        table.params_max_range) == fixed).all()
        for mode in table.modes:
            without = prices.chunk_time(table, stage, mode, 1)
            gathers = np.max([2 * prices.gather_form(dp, path).of_array(table.params_range)
                              for path in stage.replica_groups], axis=0)
            assert (prices.chunk_time(table, stage, mode, dp) == without + gathers).all()
            full = mode is RecomputeMode.FULL
            assert (without == prices._communication(table, stage, full, 1, True, True)
                    + table.compute_range + table.rerun_range[mode]).all()


# ------------------------------------------------------------------ kernel


def _recurrence(weight: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The kernel's recurrence entry by entry (ties to the smallest last offset)."""
    num_stages, width, _ = weight.shape
    value = np.full((num_stages + 1, width), INF, dtype=np.int64)
    value[num_stages, width - 1] = 0
    choice = np.zeros((num_stages, width), dtype=np.int64)
    for stage in range(num_stages - 1, -1, -1):
        for first in range(width):
            candidates = [max(int(weight[stage, first, last]), int(value[stage + 1, last]))
                          for last in range(width)]
            choice[stage, first] = candidates.index(min(candidates))
            value[stage, first] = min(candidates)
    return value, choice


def test_fill_table_is_the_recurrence():
    """Values and choices of the kernel, with its W = 1 and last-stage shortcuts, equal the
    recurrence entry by entry, INF entries and ties included; its values-only twin
    ``least_max`` gives the same least."""
    rng = np.random.default_rng(7)
    for _ in range(600):
        num_layers = int(rng.integers(1, 9))
        num_stages = int(rng.integers(1, num_layers + 1))
        width = num_layers - num_stages + 1
        shape = (num_stages, width, width)
        weight = rng.integers(0, 6, size=shape) if rng.random() < 0.7 else \
            rng.integers(INF - 2, INF + 2, size=shape)
        weight = np.where(rng.random(shape) < 0.3, INF, weight)
        value, choice = fill_table(weight)
        expected_value, expected_choice = _recurrence(weight)
        assert (value == expected_value).all() and (choice == expected_choice).all()
        assert least_max(weight) == expected_value[0, 0]


def test_windows_are_read_only_views_of_each_stage_range():
    """windows[s] = matrix[s:s + W, s:s + W] and vector_windows[s] = vector[s:s + W], read-only
    views sharing the input's memory."""
    matrix = np.arange(81, dtype=np.int64).reshape(9, 9) * 7
    vector = np.arange(9, dtype=np.int64) * 5
    for num_stages in range(1, 10):
        width = 9 - num_stages + 1
        view, vector_view = windows(matrix, num_stages), vector_windows(vector, num_stages)
        assert view.shape == (num_stages, width, width)
        assert vector_view.shape == (num_stages, width)
        for stage in range(num_stages):
            assert (view[stage] == matrix[stage:stage + width, stage:stage + width]).all()
            assert (vector_view[stage] == vector[stage:stage + width]).all()
        assert not view.flags.writeable and not vector_view.flags.writeable
        assert np.shares_memory(view, matrix) and np.shares_memory(vector_view, vector)


@pytest.mark.parametrize("seed", range(4))
def test_chunk_time_bounds_equal_the_min_max_table_of_every_chunk_count(seed):
    """The suffix recurrence of ``_chunk_time_bounds`` gives, for every K, the value of the
    kernel's min-max table on the cheapest chunk times (its definition), also with c > 1."""
    from nest_cp.dp.planner import _Search
    from nest_cp.harness.generators import random_cp_instance, random_instance

    rng = random.Random(seed)
    instance = random_cp_instance(
        seed, configs=(IntraConfig(1, 1), IntraConfig(2, 1, cp=2), IntraConfig(1, 1, cp=4)),
        tier_sizes=(2, 4), num_layers=rng.randint(3, 9)) if seed % 2 else random_instance(
        seed, num_layers=rng.randint(3, 9), tier_sizes=(2, 4, 2),
        configs=(IntraConfig(1, 1), IntraConfig(2, 1), IntraConfig(4, 1)))
    search = _Search(instance, None, None)
    for choice_index in range(len(instance.choices)):
        table = search._table(choice_index)
        expected = {}
        for num_chunks in range(1, table.num_layers + 1):
            width = table.num_layers - num_chunks + 1
            weight = np.where(np.triu(np.ones((width, width), dtype=bool)),
                              search._cheapest_times(table, num_chunks), INF)
            expected[num_chunks] = int(fill_table(weight)[0][0, 0])
        assert search._chunk_time_bounds(choice_index) == expected


@pytest.mark.parametrize("seed", range(3))
def test_split_memory_reads_the_least_memory_table_and_the_fit_witness_agrees(seed):
    """``SuffixMemory.split_memory`` of every split into S contiguous stages is the
    least-memory table at that split's entries, and the memory check with its balanced-split
    witness (``_fits_at_most_replicas``) answers as the least over splits of the largest
    stage memory does, under a limit (the median of those leasts) that some shapes fit and
    others do not."""
    import itertools

    from nest_cp.dp.compose import Shape
    from nest_cp.dp.planner import _Search
    from nest_cp.dp.suffix import SuffixMemory
    from nest_cp.harness.generators import random_instance
    from nest_cp.model.instance import RecomputeMode

    instance = random_instance(seed, num_layers=6, tier_sizes=(2, 4, 2),
                               configs=(IntraConfig(1, 1), IntraConfig(2, 1)),
                               zero_stages=(0, 1, 3), global_batch=8,
                               recompute_modes=(RecomputeMode.NONE, RecomputeMode.FULL))
    search = _Search(instance, None, None)
    shapes = []  # the widest shape of each (c, b, S, z), as the memory check prices it
    for choice_index, (config, microbatch) in enumerate(instance.choices):
        table = search._table(choice_index)
        for stages in range(1, table.num_layers + 1):
            dp = instance.cluster.num_devices // (config.devices * stages)
            if dp < 1:
                continue
            microbatches = cost.num_microbatches(instance.training.global_batch, microbatch,
                                                 config, dp)
            for zero in instance.training.zero_stages:
                shape = Shape(table, stages, dp, 1, zero, microbatches)
                least = SuffixMemory(search.prices, shape, search.limit).least_memory
                for cuts in itertools.combinations(range(1, table.num_layers), stages - 1):
                    firsts = np.array((0, *cuts))
                    lasts = np.array((*cuts, table.num_layers)) - 1
                    assert (SuffixMemory(search.prices, shape, search.limit).split_memory(
                        firsts, lasts) == least[np.arange(stages), firsts - np.arange(stages),
                                                lasts - np.arange(stages)]).all()
                shapes.append((shape, least_max(least)))
    search.limit = int(np.median([least for _, least in shapes]))
    answers = set()
    for shape, least in shapes:
        assert search._fits_at_most_replicas(shape) == (least <= search.limit)
        answers.add(least <= search.limit)
    assert answers == {True, False}
