"""The placement relaxation counts ring channels from its own placement (cost model §5 a,
DESIGN §3.3 a; relax.py's proof step 3a): each checked against exhaustive search of the
shape's full space (tests/exhaustive.py)."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import pytest
from exhaustive import canonical_placements, shape_bound, shape_optimum

from nest_cp import IntraConfig, Plan, Stage, evaluate, load_instance
from nest_cp.model.instance import GraphNetwork, HierarchicalNetwork, Instance, Layer, Link, Tier
from nest_cp.model.network import NetworkModel
from nest_cp.solvers.certify.bounds import FastBounds
from nest_cp.solvers.certify.chain import LayerPrices, network_tiers
from nest_cp.solvers.certify.split import block_chain, shapes

DATA = Path(__file__).parent / "data"


def _case(tiers: tuple[Tier, ...], num_devices: int, out_bytes: int, dense_params: int,
          global_batch: int = 8) -> Instance:
    """The worked example's two layers (fwd 1 ms, bwd 2 ms) with the given boundary tensor
    and parameters, on ``tiers``."""
    instance = load_instance(DATA / "worked_example.json")
    layers = tuple(Layer(layer.name, {key: dataclasses.replace(
        profile, dense_params=dense_params, out_bytes=out_bytes, act_bytes=10**8)
        for key, profile in layer.profiles.items()}) for layer in instance.workload.layers)
    return dataclasses.replace(
        instance, workload=dataclasses.replace(instance.workload, layers=layers),
        cluster=dataclasses.replace(instance.cluster, num_devices=num_devices,
                                    network=HierarchicalNetwork(tiers)),
        training=dataclasses.replace(instance.training, global_batch=global_batch))


def _shape(instance: Instance, num_stages: int, dp: int):
    return next(s for s in shapes(instance) if s.num_stages == num_stages and s.dp == dp
                and s.config == IntraConfig() and s.zero == 0)


def _placement_free(instance: Instance, shape) -> int:
    prices = LayerPrices(instance, shape.config, shape.microbatch,
                         network_tiers(NetworkModel(instance.cluster)))
    return FastBounds(instance, prices, block_chain(prices)).bound(shape).total


# four nodes of two devices; two ring channels double the spine's 1e10 B/s
FOUR_PAIRS = (Tier("node", 2, 1e11, 1e-6), Tier("spine", 4, 1e10, 1e-5))


def _hierarchy_optimum(instance: Instance, shape) -> int:
    """The shape's exhaustive optimum (t = e = 1) on a hierarchy of full domains, over its
    canonical placements (tests/exhaustive.py); every case here has a plan."""
    sizes = tuple(tier.size for tier in instance.cluster.network.tiers)
    optimum = shape_optimum(instance, shape, canonical_placements(
        sizes, shape.num_stages * shape.dp))
    assert optimum < math.inf
    return optimum


def test_pipeline_in_node_or_two_channels_is_bounded_exactly():
    """Pipeline in node (one channel) vs two channels across nodes: bound = exhaustive optimum."""
    # S = 2, d = 4 on four 2-device nodes: a replica pipeline inside a node leaves each stage's
    # sync group one member per node; two channels need the pipeline to cross nodes.  The
    # optimum (42,063,000) is in node with one channel; the placement-free bound prices two
    # channels with an in-node pipeline (27,063,000).
    instance = _case(FOUR_PAIRS, 8, 10**8, 10**8)
    shape = _shape(instance, 2, 4)
    in_node = Plan(IntraConfig(), 1, 0, 4, (Stage(0, 0), Stage(1, 1)),
                   (((0,), (2,), (4,), (6,)), ((1,), (3,), (5,), (7,))))
    assert evaluate(instance, in_node).objective_ticks == 42_063_000
    assert _placement_free(instance, shape) == 27_063_000
    assert shape_bound(instance, shape) == _hierarchy_optimum(instance, shape) == 42_063_000


def test_partial_node_cannot_hold_a_second_channel():
    """A partial tier-0 domain holds no second channel: bound = exhaustive optimum."""
    # Four devices in nodes of three (3 + 1): a d = 4 sync group has one member in the partial
    # node, so one channel; the placement-free bound prices two.
    instance = _case((Tier("node", 3, 1e11, 1e-6), Tier("spine", 2, 5e10, 1e-5)), 4,
                     10**6, 10**9)
    shape = _shape(instance, 1, 4)
    optimum = shape_optimum(instance, shape)
    assert shape_bound(instance, shape) == optimum > _placement_free(instance, shape)


@pytest.mark.parametrize("out_bytes, dense_params, batch",
                         [(10**6, 10**8, 8), (3 * 10**7, 10**8, 16), (10**8, 10**7, 8)])
def test_channel_rows_never_exceed_the_shape_optimum(out_bytes, dense_params, batch):
    """Variants of the four-node case: the bound of S = 2, d = 4 is at most its optimum."""
    instance = _case(FOUR_PAIRS, 8, out_bytes, dense_params, batch)
    shape = _shape(instance, 2, 4)
    assert shape_bound(instance, shape) <= _hierarchy_optimum(instance, shape)


def test_three_tier_shape_bounded_below_its_optimum():
    """A drawn three-tier shape is bounded above placement-free and at most its optimum."""
    # Nodes of 2, pods of 2, 8 devices (benchmarks.certify_shapes seed 28), S = 2, d = 4:
    # the relaxation was not tight here (65.08 vs 69.10 ms) until the side rows (relax.py's
    # proof step 5a) tied each sync term's outermost class to replicas on both pods.
    instance = load_instance(DATA / "channels_three_tier_loose.json")
    shape = _shape(instance, 2, 4)
    bound, optimum = shape_bound(instance, shape), _hierarchy_optimum(instance, shape)
    assert _placement_free(instance, shape) < bound == optimum == 69_100_000


def test_channel_paths_agree_with_the_network():
    """Tier.channel_path(c) is the network's c-channel path; collective_path(g) its cap's."""
    network = NetworkModel(_case(FOUR_PAIRS, 8, 10**6, 10**8).cluster)
    spine = network_tiers(network)[1]
    assert [spine.channel_path(c) for c in (1, 2, 3)] == \
        [network.channel_path(1, 1), network.channel_path(1, 2), network.channel_path(1, 2)]
    assert spine.channel_cap(4) == 2 and spine.channel_cap(2) == 1
    assert spine.collective_path(4) == spine.channel_path(2)


# ---------------------------------------------------------------------- graphs


def _paired_graph() -> Instance:
    """Four devices: fast links inside the pairs {0, 1} and {2, 3} (1e11 B/s), one slow
    switch joining all four (1e10 B/s): no three devices are all fast to each other."""
    links = (Link(0, 1, 1e11, 1e-6), Link(2, 3, 1e11, 1e-6),
             *(Link(device, "sw", 1e10, 5e-6) for device in range(4)))
    instance = _case(FOUR_PAIRS, 8, 10**6, 10**9)
    return dataclasses.replace(instance, cluster=dataclasses.replace(
        instance.cluster, num_devices=4, network=GraphNetwork(("sw",), links)))


def test_graph_tiers_admit_only_their_largest_clique():
    """On a graph a tier admits at most its largest clique: bound = the shape's one plan."""
    # Paired graph, S = 1, d = 4: the one plan up to relabelling replicas (one stage, no
    # recomputation, all four devices in the sync group) syncs on the switch; the old rule
    # (every combination admits every size) prices it below.
    instance = _paired_graph()
    tiers = network_tiers(NetworkModel(instance.cluster))
    fast = [t for t in tiers if t.path.bandwidth_Bps == 1e11]
    assert fast and all(t.largest_group == 2 for t in fast)
    shape = _shape(instance, 1, 4)
    only = Plan(IntraConfig(), 1, 0, 4, (Stage(0, 1),), (((0,), (1,), (2,), (3,)),))
    bound = shape_bound(instance, shape)
    assert bound == evaluate(instance, only).objective_ticks
    unlimited = tuple(dataclasses.replace(t, largest_group=None) for t in tiers)
    prices = LayerPrices(instance, shape.config, shape.microbatch, unlimited)
    assert FastBounds(instance, prices, block_chain(prices)).bound(shape).total < bound
