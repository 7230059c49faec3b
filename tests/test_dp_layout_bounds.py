"""The planner's per-layout sync bound (issue 35) against exhaustive search over splits."""

from __future__ import annotations

import pytest
from tiers import SLOW

from nest_cp.dp import planner
from nest_cp.model.result import SolveOptions


def _least_max_exposed(search, table, shape, layout) -> int:
    """min over every contiguous split (v = 1) of max_s exposed_s on ``layout``: the exact
    least sync part of a plan of that shape and layout, by the min-max kernel."""
    import numpy as np

    from nest_cp.dp.kernel import INF, fill_table
    from nest_cp.dp.suffix import per_stage

    config = table.config
    geometries = search.geometries(layout, config, shape.num_stages, shape.dp)
    exposed = per_stage(geometries, lambda geometry: search.prices.exposed_range(
        table, geometry, shape.dp, shape.zero))
    width = exposed.shape[1]
    ordered = np.triu(np.ones((width, width), dtype=bool))
    return int(fill_table(np.where(ordered, exposed, INF))[0][0, 0])


def _shapes(search, instance, first_dp: int, virtuals=(1,)):
    """(config, table, shape) for every config, S, d >= ``first_dp``, v in ``virtuals``
    the planner allows and ZeRO stage of ``instance``."""
    from nest_cp.cost import terms as cost
    from nest_cp.dp.compose import Shape

    devices = instance.cluster.num_devices
    for choice_index, (config, microbatch) in enumerate(instance.choices):
        table = search._table(choice_index)
        for stages in range(1, table.num_layers + 1):
            for dp in range(first_dp, devices // (config.devices * stages) + 1):
                microbatches = cost.num_microbatches(instance.training.global_batch,
                                                     microbatch, config, dp)
                for virtual in virtuals:
                    if not planner._interleaving_allowed(stages, virtual, microbatches,
                                                         table.num_layers):
                        continue
                    for zero in instance.training.zero_stages:
                        yield config, table, Shape(table, stages, dp, virtual, zero,
                                                   microbatches)


@pytest.mark.parametrize("overlap", [False, True])
def test_the_layout_sync_bound_never_exceeds_the_least_exposed_sync(overlap):
    """On small multi-channel networks, for every (config, S, d, z) and layout, the
    planner's per-layout sync bound is at most the least max_s exposed_s over every split
    (exhaustive), tight on some shapes and strict on others; and the data groups it reads
    are the geometries' own."""
    import dataclasses

    from nest_cp.harness.generators import random_instance
    from nest_cp.model.instance import IntraConfig
    from nest_cp.model.plan import all_layouts

    tight = strict = 0
    for seed in range(2):
        instance = random_instance(seed, num_layers=4, tier_sizes=(4, 2, 2),
                                   configs=(IntraConfig(), IntraConfig(tp=2)),
                                   zero_stages=(0, 1, 3), global_batch=16, comm_scale=50)
        instance = dataclasses.replace(instance, training=dataclasses.replace(
            instance.training, overlap_grad_reduce=overlap))
        search = planner._Search(instance, SolveOptions(), all_layouts())
        for config, table, shape in _shapes(search, instance, 2):
            stages, dp = shape.num_stages, shape.dp
            for layout in all_layouts()[::6]:
                key, replica_groups, dense_groups = search.geometries.data_groups(
                    layout, config, stages, dp)
                geometries = search.geometries(layout, config, stages, dp)
                assert replica_groups == [g.replica_groups for g in geometries]
                assert dense_groups == [g.dense_groups for g in geometries]
                bound = search._layout_sync_bound(shape, key, replica_groups, dense_groups)
                least = _least_max_exposed(search, table, shape, layout)
                assert 0 <= bound <= least
                tight += bound == least
                strict += bound < least
    assert tight and strict


@pytest.mark.parametrize("tier_sizes", [(2, 2, 2), (4, 2)])
def test_the_layout_bound_never_exceeds_the_layouts_optimum(tier_sizes):
    """On block workloads (v in {1, 2}), for every (config, S, d, v, z) and layout, the
    per-layout mean-chunk bound with its receives is at most the least objective of that
    layout (the inner search with no incumbent, exact over the layout's splits and modes)
    and above the same bound without receives on some shapes (not vacuous)."""
    import math

    from nest_cp.harness.generators import random_instance
    from nest_cp.model.instance import IntraConfig, RecomputeMode
    from nest_cp.model.plan import all_layouts

    compared = raised = 0
    for seed in range(2):
        instance = random_instance(seed, num_layers=5, tier_sizes=tier_sizes,
                                   configs=(IntraConfig(), IntraConfig(tp=2)),
                                   zero_stages=(0, 3), global_batch=8, comm_scale=50,
                                   virtual_stages=(1, 2), identical_blocks=True,
                                   recompute_modes=(RecomputeMode.NONE,))
        search = planner._Search(instance, SolveOptions(), all_layouts())
        for config, table, shape in _shapes(search, instance, 1, (1, 2)):
            stages, dp = shape.num_stages, shape.dp
            for layout in all_layouts()[::5]:
                geometry = tuple(search.geometries(layout, config, stages, dp,
                                                   shape.virtual > 1))
                bound = search._layout_bound(shape, geometry)
                search.best = planner.Best()
                inner, _, _ = search._inner(shape, 0, 0, 0)
                if inner is None:
                    continue
                search._search_layout(shape, inner, list(geometry), (0,), layout)
                optimum = search.best.objective
                if optimum is None:
                    continue
                compared += 1
                assert bound <= optimum, (shape, layout, bound, optimum)
                layers = search._layout_totals[id(table), geometry][0]
                raised += bound > shape.rounds * math.ceil(layers / shape.num_chunks)
    assert compared and raised


@pytest.mark.parametrize("tier_sizes, overlap, virtuals", [
    ((2, 2, 2), True, (1,)), ((4, 2, 2), False, (2,)),
    pytest.param((2, 2, 2), False, (1,), marks=SLOW),
    pytest.param((4, 2, 2), True, (1, 2), marks=SLOW)])
def test_the_stage_by_stage_layout_bound_never_exceeds_the_layouts_optimum(tier_sizes,
                                                                           overlap, virtuals):
    """v = 1, on hierarchies whose bandwidth falls outwards (a domain tier): for every
    (config, S, d, z) and layout, the stage-by-stage bound priced on each stage's own sync
    groups is at most the least objective of that layout (the inner
    search with no incumbent, exact over the layout's splits and recompute modes), and
    above the per-layout sync bound plus the compute bound on some shapes (not vacuous)."""
    import dataclasses

    from nest_cp.harness.generators import random_instance
    from nest_cp.model.instance import IntraConfig, RecomputeMode
    from nest_cp.model.plan import all_layouts

    compared, raised = 0, dict.fromkeys(virtuals, 0)
    for seed in range(2):
        instance = random_instance(seed, num_layers=5, tier_sizes=tier_sizes,
                                   configs=(IntraConfig(), IntraConfig(tp=2)),
                                   zero_stages=(0, 1, 3), global_batch=8, comm_scale=50,
                                   recompute_modes=(RecomputeMode.NONE, RecomputeMode.FULL),
                                   virtual_stages=(1, 2), identical_blocks=True)
        instance = dataclasses.replace(instance, training=dataclasses.replace(
            instance.training, overlap_grad_reduce=overlap, overlap_param_gather=overlap))
        search = planner._Search(instance, SolveOptions(), all_layouts())
        chunks = {}
        for config, table, shape in _shapes(search, instance, 2, virtuals):
            stages, dp = shape.num_stages, shape.dp
            choice = next(index for index, (c, b) in enumerate(instance.choices)
                          if c == config and b == table.microbatch)
            if choice not in chunks:
                chunks[choice] = search._chunk_time_bounds(choice)
            chunk = chunks[choice][shape.num_chunks]
            for layout in all_layouts()[::5]:
                groups = search.geometries.data_groups(layout, config, stages, dp)
                bound = search._layout_stagewise_bound(shape, *groups)
                geometry = list(search.geometries(layout, config, stages, dp, shape.virtual > 1))
                search.best = planner.Best()
                inner, _, _ = search._inner(shape, 0, 0, 0)
                if inner is None:
                    continue
                search._search_layout(shape, inner, geometry, (0,), layout)
                optimum = search.best.objective
                if optimum is None:
                    continue
                compared += 1
                assert bound <= optimum, (shape, layout, bound, optimum)
                before = shape.rounds * chunk + max(
                    search._sync_bound(shape), search._layout_sync_bound(shape, *groups))
                raised[shape.virtual] += bound > max(before, search._shape_bound(shape, chunk))
    assert compared and all(raised.values()), raised


def test_the_fastest_mode_bound_and_the_walks_sync_floor_keep_the_layouts_optimum():
    """v = 1, S >= 2, for every (config, S, d, z) and layout: rounds times the min-max of
    the fastest allowed mode's chunk times (:func:`~nest_cp.dp.suffix.fastest_tau`, the
    check before a layout's memory tables are built) plus the least max exposed sync is at
    most the layout's optimum (the walk with no incumbent), equal to it on some shapes; so
    is the bound from the tiers of the layout's pipeline pairs (_layout_receive_bound, no
    geometry built), never above the first and above the compute bound on some shapes;
    and the walk stopped by the least max exposed sync as its floor finds that optimum
    under a cutoff just above it and nothing under the optimum itself, as the walk
    without one."""
    import itertools

    from nest_cp.dp.suffix import fastest_tau
    from nest_cp.harness.generators import random_instance
    from nest_cp.model.instance import IntraConfig, RecomputeMode
    from nest_cp.model.plan import all_layouts

    compared = tight = received_above = 0
    for seed in range(2):
        instance = random_instance(seed, num_layers=5, tier_sizes=(2, 2, 2),
                                   configs=(IntraConfig(), IntraConfig(tp=2)),
                                   zero_stages=(0, 3), global_batch=8, comm_scale=50,
                                   recompute_modes=(RecomputeMode.NONE, RecomputeMode.FULL),
                                   identical_blocks=True)
        search = planner._Search(instance, SolveOptions(), all_layouts())
        for config, table, shape in _shapes(search, instance, 1):
            if shape.num_stages < 2:
                continue
            inner, _, _ = search._inner(shape, 0, 0, 0)
            if inner is None:
                continue
            chunk = search._chunk_time_bounds(next(
                index for index, (c, b) in enumerate(instance.choices)
                if c == config and b == table.microbatch))[shape.num_chunks]
            for layout_index, layout in list(enumerate(all_layouts()))[::5]:
                geometry = list(search.geometries(layout, config, shape.num_stages, shape.dp))
                least = _least_max_exposed(search, table, shape, layout)
                search.best = planner.Best()
                search._search_layout(shape, inner, geometry, (0,), layout)
                optimum = search.best.objective
                if optimum is None:  # no split fits memory
                    continue
                found = {}
                for floor, above in itertools.product((least, 0), (1, 0)):
                    search.best = planner.Best(objective=optimum + above)  # a cutoff
                    search._search_layout(shape, inner, geometry, (0,), layout, floor)
                    found[floor, above] = search.best.objective if search.best.plan \
                        else None
                assert found[least, 1] == found[0, 1] == optimum
                assert found[least, 0] is found[0, 0] is None
                bound = shape.rounds * fastest_tau(search.prices, shape, geometry) + least
                compared += 1
                assert bound <= optimum, (shape, layout, bound, optimum)
                tight += bound == optimum
                received = search._layout_receive_bound(shape, layout_index, layout)
                assert received + least <= bound, (shape, layout, received, bound)
                received_above += received > shape.rounds * chunk
    assert compared and tight and received_above
