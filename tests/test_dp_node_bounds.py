"""The planner's bounds that link TP placement to data-parallel channels (issue 35,
dp/node_bounds.py) against exhaustive search over every injective placement."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
from dp_shapes import v1_shapes
from exhaustive import canonical_placements, shape_optimum
from tiers import SLOW, slow_unless
from unbounded import same_optimum_unbounded

from nest_cp.dp import planner
from nest_cp.dp.node_bounds import capped_group_paths, crossing_tp_paths, tp_qualities
from nest_cp.harness.generators import random_instance
from nest_cp.model.instance import IntraConfig, RecomputeMode
from nest_cp.model.network import NetworkModel
from nest_cp.model.result import SolveOptions


def _instance(seed: int, tier_sizes: tuple[int, ...], configs, overlap: bool):
    instance = random_instance(seed, num_layers=3, tier_sizes=tier_sizes, configs=configs,
                               zero_stages=(0, 1, 3), global_batch=8, comm_scale=50,
                               recompute_modes=(RecomputeMode.NONE,))
    return dataclasses.replace(instance, training=dataclasses.replace(
        instance.training, overlap_grad_reduce=overlap, overlap_param_gather=overlap))


# nodes of 2 with t = 2 (t fills the node: c = 1), nodes of 4 with t = 2 (c = 2); the
# fast tier takes the two-tier case (2 s), the three-tier ones search ten times longer
@pytest.mark.parametrize("tier_sizes, overlap", slow_unless(
    [((2, 2, 2), False), ((2, 2, 2), True), ((4, 2), False), ((4, 2), True)],
    lambda case: case == ((4, 2), False)))
def test_node_bounds_never_exceed_the_exhaustive_optimum(tier_sizes, overlap):
    """For every shape, the case-split bound and the stage-by-stage bound are at most the
    least objective over every split and every injective placement (one per class of
    tests/exhaustive.py's canonical placements); both rise above the fastest-path bound on
    some shapes, and the larger of them is tight on some."""
    raised = tight = 0
    for seed in range(2):
        instance = _instance(seed, tier_sizes, (IntraConfig(), IntraConfig(tp=2)), overlap)
        search = planner._Search(instance, SolveOptions(), ())
        for choice_index, shape, exhaustive_shape in v1_shapes(search, instance, min_dp=2):
            chunk = search._chunk_time_bounds(choice_index)[shape.num_chunks]
            fast = shape.rounds * max(chunk, search._gather_bound(shape)) \
                + search._sync_bound(shape)
            bound = search._shape_bound(shape, chunk)
            stagewise = search._stagewise_bound(shape) if shape.table.config.tp > 1 else 0
            optimum = shape_optimum(instance, exhaustive_shape, canonical_placements(
                tier_sizes, shape.table.config.devices * shape.num_stages * shape.dp))
            if optimum == math.inf:
                continue
            assert fast <= bound <= optimum, (shape, fast, bound, optimum)
            assert stagewise <= optimum, (shape, stagewise, optimum)
            raised += max(bound, stagewise) > fast
            tight += max(bound, stagewise) == optimum
    assert raised and tight


def test_the_paths_follow_the_node_counting():
    """On 8-device nodes: t = 8 can lie in a node (quality 8, cap 1: one channel, no group
    of two inside a node) or cross it with 1 to 4 channels; t = 16 only crosses."""
    instance = random_instance(0, tier_sizes=(8, 4, 2))
    network = NetworkModel(instance.cluster)
    assert tp_qualities(network, 1) == ()
    assert tp_qualities(network, 8) == (1, 2, 3, 4, 8)
    assert tp_qualities(network, 16) == (1, 2, 3, 4, 5, 6, 7, 8)
    one_channel = capped_group_paths(network, 16, 1)
    assert one_channel == (network.tier_path(1), network.tier_path(2))[:len(one_channel)]
    assert network.tier_path(0) not in capped_group_paths(network, 2, 1)
    assert network.tier_path(0) in capped_group_paths(network, 2, 2)
    assert crossing_tp_paths(network, 8, 4)[0] == network.channel_path(1, 4)



@pytest.mark.parametrize("seed", range(4))
def test_pruning_never_changes_the_optimum_when_tp_fills_a_node(seed, monkeypatch):
    """test_dp_v3's medium instances (t in {1, 2}, e in {1, 2}, v in {1, 2}, both overlap
    flags by seed) on nodes of 2, where t = 2 fills a node (c = 1): the DP with every bound
    finds the objective the DP with every bound replaced by 0 (all outers searched) finds."""
    from test_dp_v3 import medium_v3_instance

    from nest_cp.model.instance import HierarchicalNetwork, Tier
    from nest_cp.solvers.registry import solve

    instance = medium_v3_instance(seed)
    network = HierarchicalNetwork((Tier("node", 2, 1e11, 1e-6, efficiency=0.8),
                                   Tier("rack", 4, 1e10, 1e-5),
                                   Tier("spine", 2, 5e9, 2e-5, efficiency=0.7)))
    instance = dataclasses.replace(instance, cluster=dataclasses.replace(
        instance.cluster, network=network))
    # every bound zeroed
    pruned, exhaustive = same_optimum_unbounded(instance, monkeypatch,
                                                lambda i: solve(i, "dp", SolveOptions()))
    assert pruned.stats["outer_searched"] < exhaustive.stats["outer_searched"]


def _tp_groups(placement: tuple[int, ...], config: IntraConfig, num_stages: int, dp: int):
    """The TP groups of a device tuple (stage-major, then replica, then rank j = t_index +
    t·e_index): one per (stage, replica, EP index)."""
    size = config.devices
    return [[placement[(stage * dp + replica) * size + config.tp * expert + index]
             for index in range(config.tp)]
            for stage in range(num_stages) for replica in range(dp)
            for expert in range(config.ep)]


def test_tp_groups_leave_nodes_reads_the_placement():
    """Where tp_groups_leave_nodes says so, every TP group of the layout's placement has
    each member in its own node, on every structured layout (device orders, spare-first,
    replica blocks) of networks with 2- and 4-device nodes, for many shapes; and it says
    so somewhere."""
    from nest_cp.dp.geometry import rank_devices, tp_groups_leave_nodes

    said = 0
    for tier_sizes in ((2, 2, 3), (4, 3, 2), (2, 4, 2)):
        instance = random_instance(0, tier_sizes=tier_sizes)
        network = NetworkModel(instance.cluster)
        node = network.node_size
        for config in (IntraConfig(tp=2), IntraConfig(tp=4), IntraConfig(tp=2, ep=2)):
            for num_stages in (1, 2, 3):
                for dp in range(1, network.num_devices // (config.devices * num_stages) + 1):
                    for layout in network.structured_layouts:
                        if not tp_groups_leave_nodes(layout, config, num_stages, dp, node):
                            continue
                        said += 1
                        devices = rank_devices(layout, config, num_stages, dp, np.array(
                            network.layout_order(layout)), node)
                        for group in _tp_groups(tuple(np.ravel(devices).tolist()), config,
                                                num_stages, dp):
                            assert len({device // node for device in group}) == len(group), \
                                (tier_sizes, config, num_stages, dp, layout.name)
    assert said


def test_inside_class_reads_the_placement():
    """Where _tp_classes calls a visited layout "inside" (TP stride 1, t | G_0), every TP
    group of its placement lies in one node, node-tail layouts (structured space v3c, whose
    positions are not the strides') included; node tails apply on some of these shapes."""
    from nest_cp.dp.geometry import Dim, layout_strides

    tails = inside = 0
    for tier_sizes in ((4, 3, 2), (4, 2, 2), (2, 4, 2)):
        instance = random_instance(0, tier_sizes=tier_sizes)
        search = planner._Search(instance, SolveOptions(), None)
        network = search.network
        node = network.node_size
        for config in (IntraConfig(tp=2), IntraConfig(tp=4)):
            if node % config.tp:
                continue
            for num_stages in (2, 3, 4):
                for dp in range(1, network.num_devices // (config.devices * num_stages) + 1):
                    if "inside" not in (search._tp_classes(config, num_stages, dp) or ()):
                        continue
                    for _, layout in search._layouts(config, num_stages, dp):
                        if layout_strides(layout, config, num_stages, dp)[Dim.TP] != 1:
                            continue
                        inside += 1
                        tails += layout.tailed(config, num_stages, dp)
                        devices = layout.devices(config, num_stages, dp, np.array(
                            network.layout_order(layout)), node)
                        for group in _tp_groups(tuple(np.ravel(devices).tolist()), config,
                                                num_stages, dp):
                            assert len({device // node for device in group}) == 1, \
                                (tier_sizes, config, num_stages, dp, layout.name)
    assert inside and tails


def test_straddling_kinds_read_the_placement():
    """Where _tp_kinds gives a visited layout the kind (m, r) (TP groups straddling nodes),
    every TP group of its placement touches two nodes or more and has at most m members in
    one of them (its quality), and every sync group (the d replicas of a rank) has at most
    r members in a node, on nodes of 4 and 8 (TP strides between 1 and G_0, spare nodes,
    replica blocks); kinds with r = 1 and with r > 1 both occur."""
    from nest_cp.dp.geometry import Dim, layout_strides

    caps = set()
    for tier_sizes in ((8, 4, 2), (8, 2, 3), (4, 4, 4)):
        instance = random_instance(0, tier_sizes=tier_sizes)
        search = planner._Search(instance, SolveOptions(), None)
        network, node = search.network, search.network.node_size
        for config in (IntraConfig(tp=4), IntraConfig(tp=8)):
            for num_stages in range(1, 8):
                for dp in range(1, network.num_devices // (config.devices * num_stages) + 1):
                    pairs = [kind for kind in search._tp_kinds(config, num_stages, dp) or ()
                             if isinstance(kind, tuple)]
                    for _, layout in search._layouts(config, num_stages, dp) if pairs else ():
                        stride = layout_strides(layout, config, num_stages, dp)[Dim.TP]
                        if layout.arrayed(config, num_stages, dp) or not 1 < stride < node:
                            continue
                        (most, cap), = [kind for kind in pairs if kind == (
                            min(-(-node // stride), config.tp // 2), kind[1])
                            and kind[1] == -(-node // layout_strides(
                                layout, config, num_stages, dp)[Dim.REPLICA])]
                        devices = layout.devices(config, num_stages, dp, np.array(
                            network.layout_order(layout)), node)
                        placement = tuple(np.ravel(devices).tolist())
                        for group in _tp_groups(placement, config, num_stages, dp):
                            nodes = [device // node for device in group]
                            assert len(set(nodes)) >= 2, (tier_sizes, config, layout.name)
                            assert min(nodes.count(n) for n in nodes) <= most
                        for stage in range(num_stages):
                            for rank in range(config.devices):
                                nodes = [placement[(stage * dp + replica) * config.devices
                                                   + rank] // node for replica in range(dp)]
                                assert max(nodes.count(n) for n in nodes) <= cap, \
                                    (tier_sizes, config, num_stages, dp, layout.name, cap)
                        caps.add(cap == 1)
    assert caps == {True, False}


def test_met_qualities_hold_every_stage_of_the_visited_layouts():
    """Every stage of every visited layout's placement has a least TP quality h_s that a
    pair of _met_qualities stands for (the same cap ⌊G_0 / h_s⌋, h >= h_s), on 8- and
    4-device nodes (TP strides between 1 and G_0 among them, node tails, spare nodes,
    replica blocks); and the pairs are fewer than _tp_qualities' on some shapes where
    _tp_classes knows nothing (a layout of kind m > 1)."""
    from nest_cp.dp.node_bounds import node_cap

    checked = narrowed = 0
    for tier_sizes in ((8, 4, 2), (8, 2, 3), (4, 4, 4)):
        instance = random_instance(0, tier_sizes=tier_sizes)
        search = planner._Search(instance, SolveOptions(), None)
        network, node = search.network, search.network.node_size
        for config in (IntraConfig(tp=2), IntraConfig(tp=4), IntraConfig(tp=8)):
            for num_stages in range(1, 8):
                for dp in range(1, network.num_devices // (config.devices * num_stages) + 1):
                    met = search._met_qualities(config, num_stages, dp)
                    narrowed += len(met) < len(search._tp_qualities(config.tp)) and \
                        search._tp_classes(config, num_stages, dp) is None
                    for _, layout in search._layouts(config, num_stages, dp):
                        devices = layout.devices(config, num_stages, dp, np.array(
                            network.layout_order(layout)), node)
                        groups = _tp_groups(tuple(np.ravel(devices).tolist()), config,
                                            num_stages, dp)
                        per_stage = len(groups) // num_stages
                        for stage in range(num_stages):
                            # a group's quality: its fewest members in a node it touches (t
                            # for a group in one node), dp/node_bounds.py
                            least = min(network.channels_of(group) for group in
                                        groups[stage * per_stage:(stage + 1) * per_stage])
                            cap = node_cap(network, least)
                            assert any(c == cap and h >= least for h, c in met), \
                                (tier_sizes, config, num_stages, dp, layout.name, least, met)
                            checked += 1
    assert checked and narrowed


def test_tp_classes_kept_by_clamped_replicas_match_each_shape():
    """_tp_classes, kept per (layouts, S, min(d, G_0)), equals the classes read from the
    strides of every visited layout at each (c, S, d) itself, replica blocks and spare
    nodes included; many d share an entry and both classes and None occur."""
    from nest_cp.dp.geometry import Dim, layout_strides, tp_groups_leave_nodes

    met, shapes = set(), 0
    for tier_sizes in ((4, 4, 4), (2, 8, 4), (8, 4, 2)):
        instance = random_instance(0, tier_sizes=tier_sizes)
        search = planner._Search(instance, SolveOptions(), None)
        network, node = search.network, search.network.node_size
        for config in (IntraConfig(tp=2), IntraConfig(tp=4), IntraConfig(tp=8)):
            for num_stages in (1, 2, 3, 4):
                for dp in range(1, network.num_devices // (config.devices * num_stages) + 1):
                    classes = set()
                    for _, layout in search._layouts(config, num_stages, dp):
                        stride = layout_strides(layout, config, num_stages, dp)[Dim.TP]
                        assert tp_groups_leave_nodes(layout, config, num_stages, dp,
                                                     node) == (stride >= node)
                        if stride >= node:
                            classes.add("crossing")
                        elif node % config.tp == 0 and stride == 1:
                            classes.add("inside")
                        else:
                            classes = None
                            break
                    expected = None if classes is None else frozenset(classes)
                    assert search._tp_classes(config, num_stages, dp) == expected, \
                        (tier_sizes, config, num_stages, dp)
                    met.add(expected)
                    shapes += 1
    assert len(search._classes) < shapes and None in met
    assert any(m and "crossing" in m for m in met) and any(m and "inside" in m for m in met)


@pytest.mark.parametrize("tier_sizes", [(2, 2, 2), pytest.param((2, 3), marks=SLOW)])
def test_all_crossing_bound_never_exceeds_the_exhaustive_optimum(tier_sizes):
    """For every t = 2 shape, the bound of the layouts whose TP groups all leave their nodes
    is at most the least objective over every split and every placement whose TP groups
    all do (one per class of canonical placements); it rises above the shape's case-split
    bound on some shapes and is tight on some."""
    raised = tight = 0
    for seed in range(2):
        instance = _instance(seed, tier_sizes, (IntraConfig(tp=2),), False)
        search = planner._Search(instance, SolveOptions(), ())
        node = search.network.node_size
        for choice_index, shape, exhaustive_shape in v1_shapes(search, instance):
            config = shape.table.config
            chunk = search._chunk_time_bounds(choice_index)[shape.num_chunks]
            bound = search._all_crossing_bound(shape)

            def crossing(placement, shape=shape, config=config, node=node) -> bool:
                flat = tuple(device for stage in placement for replica in stage
                             for device in replica)
                return all(len({device // node for device in group}) == len(group)
                           for group in _tp_groups(flat, config, shape.num_stages, shape.dp))

            optimum = shape_optimum(instance, exhaustive_shape, canonical_placements(
                tier_sizes, config.devices * shape.num_stages * shape.dp), only=crossing)
            if optimum == math.inf:
                continue
            assert bound <= optimum, (shape, bound, optimum)
            raised += bound > search._shape_bound(shape, chunk)
            tight += bound == optimum
    assert raised and tight



# nodes of 2 (t = 2 fills a node: the bound rises); nodes of 4 (only checked not to exceed)
@pytest.mark.parametrize("tier_sizes, rises", [((2, 2, 2), True),
                                               pytest.param((4, 2), False, marks=SLOW)])
def test_layout_class_bound_never_exceeds_the_structured_optimum(tier_sizes, rises):
    """For every t = 2 shape, the bound from where the structured layouts put their TP
    groups is at most the least objective over every split and every placement of the
    structured space at that shape (network.structured_placements); on nodes of 2 it rises
    above the case-split bound on some shapes and is tight on some.  (Not above the
    stage-by-stage bound there, which counts the same off-node receives stage by stage.)"""
    raised = tight = known = 0
    for seed in range(2):
        instance = _instance(seed, tier_sizes, (IntraConfig(tp=2),), False)
        search = planner._Search(instance, SolveOptions(), None)
        network = search.network
        for choice_index, shape, exhaustive_shape in v1_shapes(search, instance):
            config = shape.table.config
            chunk = search._chunk_time_bounds(choice_index)[shape.num_chunks]
            bound = search._layout_class_bound(shape, chunk)
            known += search._tp_classes(config, shape.num_stages, shape.dp) is not None
            placements = [tuple(device for stage in placement for replica in stage
                                for device in replica)
                          for placement in network.structured_placements(
                              config, shape.num_stages, shape.dp)]
            optimum = shape_optimum(instance, exhaustive_shape, placements)
            if optimum == math.inf:
                continue
            assert bound <= optimum, (shape, bound, optimum)
            raised += bound > search._shape_bound(shape, chunk)
            tight += bound == optimum
    assert known and (not rises or (raised and tight))


def test_straddling_kind_terms_never_exceed_their_layouts_optimum():
    """t = 4 on nodes of 4 and of 8, where some visited layouts put each TP group in two
    nodes (a kind (m, r) of _tp_kinds, S >= 2): on every such layout, the class bound's
    term of its kind is at most the least objective over every split of the shape placed
    by that layout, and it rises above the case-split bound on some; the class bound
    itself is at most the least objective over every structured placement."""
    from nest_cp.dp.geometry import Dim, layout_strides

    met = raised = 0
    for seed, tier_sizes in ((0, (4, 2, 2)), (1, (4, 2, 2)), (4, (8, 2))):
        instance = _instance(seed, tier_sizes, (IntraConfig(tp=4),), seed == 1)
        search = planner._Search(instance, SolveOptions(), None)
        network, node = search.network, search.network.node_size
        for choice_index, shape, exhaustive_shape in v1_shapes(search, instance, min_dp=2):
            config, num_stages, dp = shape.table.config, shape.num_stages, shape.dp
            kinds = search._tp_kinds(config, num_stages, dp) or ()
            if not any(isinstance(kind, tuple) for kind in kinds):
                continue
            chunk = search._chunk_time_bounds(choice_index)[shape.num_chunks]
            placements = []
            for _, layout in search._layouts(config, num_stages, dp):
                devices = tuple(np.ravel(layout.devices(config, num_stages, dp, np.array(
                    network.layout_order(layout)), node)).tolist())
                placements.append(devices)
                strides = layout_strides(layout, config, num_stages, dp)
                if layout.arrayed(config, num_stages, dp) or not 1 < strides[Dim.TP] < node:
                    continue
                kind = (min(-(-node // strides[Dim.TP]), config.tp // 2),
                        -(-node // strides[Dim.REPLICA]))
                assert kind in kinds
                optimum = shape_optimum(instance, exhaustive_shape, [devices])
                if optimum == math.inf:
                    continue
                term = search._kind_term(shape, chunk, kind)
                assert term <= optimum, (shape, layout.name, kind, term, optimum)
                met += 1
                raised += term > search._shape_bound(shape, chunk)
            optimum = shape_optimum(instance, exhaustive_shape, placements)
            assert search._layout_class_bound(shape, chunk) <= optimum
    assert met and raised


def test_off_node_receive_bound_never_exceeds_the_exhaustive_optimum():
    """On nodes of 2 (t = 2 fills a node), for every v = 1 shape: rounds·τ_in, the min-max
    chunk bound with every receive off the node, is at most the least objective over every
    split and every placement whose TP groups each lie inside one node, tight on some
    shapes, and above rounds·τ_lb (receives on any tier) on some."""
    raised = tight = 0
    for seed in range(2):
        instance = _instance(seed, (2, 2, 2), (IntraConfig(tp=2),), False)
        search = planner._Search(instance, SolveOptions(), ())
        node = search.network.node_size
        for choice_index, shape, exhaustive_shape in v1_shapes(search, instance):
            config = shape.table.config
            chunk = search._chunk_time_bounds(choice_index)[shape.num_chunks]
            floor = search._off_node_chunk_bound(shape.table, shape.num_chunks)

            def inside(placement, shape=shape, config=config, node=node) -> bool:
                flat = tuple(device for stage in placement for replica in stage
                             for device in replica)
                return all(len({device // node for device in group}) == 1
                           for group in _tp_groups(flat, config, shape.num_stages, shape.dp))

            optimum = shape_optimum(instance, exhaustive_shape, canonical_placements(
                (2, 2, 2), config.devices * shape.num_stages * shape.dp), only=inside)
            if optimum == math.inf:
                continue
            assert shape.rounds * floor <= optimum, (shape, floor, optimum)
            raised += floor > chunk
            tight += shape.rounds * floor + search._sync_bound(shape, 1) == optimum
    assert raised and tight
