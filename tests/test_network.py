"""Network queries: tiers, widest paths, canonical order and collective prices in ticks."""

from fractions import Fraction
from pathlib import Path

import numpy as np

from nest_cp import CollectiveKind, NetworkModel, load_instance, to_ticks
from nest_cp.model.network import Path as NetPath
from nest_cp.model.network import collective_ticks, p2p_ticks

DATA = Path(__file__).parent / "data"


def _graph_network() -> NetworkModel:
    return NetworkModel(load_instance(DATA / "graph_three_devices.json").cluster)


def test_widest_path_pairs():
    """Pairs of graph_three_devices.json, worked out by hand.

    Links: 0-s 10 GB/s 1 us, 2-s 10 GB/s 1 us, 1-s 5 GB/s 2 us, 0-1 5 GB/s 1 us,
    1-2 1 GB/s 0.1 us.
    - (0, 2): only via s, bottleneck 10 GB/s, latency 2 us.
    - (0, 1): widest bottleneck 5 GB/s via s (3 us) or direct (1 us): the least latency
      among widest paths is 1 us. The 1 GB/s route is never taken despite its low latency.
    - (1, 2): 5 GB/s via s (3 us) or via 0 (1 + 1 + 1 us = 3 us); the direct 1 GB/s link is
      narrower.
    """
    net = _graph_network()
    assert net.pair_path(0, 2) == NetPath(Fraction(10**10), Fraction(2, 10**6))
    assert net.pair_path(1, 0) == NetPath(Fraction(5 * 10**9), Fraction(1, 10**6))
    assert net.pair_path(1, 2) == NetPath(Fraction(5 * 10**9), Fraction(3, 10**6))


def test_graph_group_bottleneck_is_worst_bandwidth_and_latency():
    """A group is priced on its narrowest pair bandwidth and its largest pair latency."""
    group = _graph_network().group_path([0, 1, 2])
    assert group == NetPath(Fraction(5 * 10**9), Fraction(3, 10**6))


def test_graph_canonical_order_keeps_wide_pairs_adjacent():
    """Devices 0 and 2 share a 10 GB/s bottleneck, so they come first, then device 1."""
    assert _graph_network().canonical_order() == (0, 2, 1)


def test_parallel_links_are_separate_paths():
    """graph_parallel_links.json joins device 0 to switch s twice: 100 GB/s at 10 us and
    50 GB/s at 1 us.  Pair (0, 1) is bottlenecked at 50 GB/s by 1-s, so both parallel links
    are widest paths and the faster one wins: 1 + 1 = 2 us (keeping only the widest parallel
    link, as before, gave 11 us).  Pair (0, 2) needs 100 GB/s: only the slow link, 11 us."""
    net = NetworkModel(load_instance(DATA / "graph_parallel_links.json").cluster)
    assert net.pair_path(0, 1) == NetPath(Fraction(5 * 10**10), Fraction(2, 10**6))
    assert net.pair_path(0, 2) == NetPath(Fraction(10**11), Fraction(11, 10**6))
    assert net.pair_path(1, 2) == NetPath(Fraction(5 * 10**10), Fraction(2, 10**6))


def test_hierarchical_tier_of_pairs_and_groups():
    """Tier domains are blocks of consecutive ids: 2 per node, 4 nodes per spine."""
    net = NetworkModel(load_instance(DATA / "two_tier_tp2.json").cluster)
    assert net.tier_of([0, 1]) == 0
    assert net.tier_of([1, 2]) == 1
    assert net.tier_of([0, 7]) == 1
    assert net.group_path([5]) is None
    assert net.canonical_order() == tuple(range(8))


def test_tier_of_pairs_equals_tier_of_elementwise():
    """The vectorised tier of device pairs is tier_of of each pair (two-tier network), and
    on Llama 3's four tiers (int64 arrays, divided as 32-bit ids) the count of domains
    separating the two ids, priced in Python integers."""
    net = NetworkModel(load_instance(DATA / "two_tier_tp2.json").cluster)
    low, high = np.triu_indices(8, 1)
    assert net.tier_of_pairs(low, high).tolist() == [net.tier_of((a, b))
                                                     for a, b in zip(low, high)]
    from nest_cp.profiles.presets import network_cluster

    cluster = network_cluster("meta-h100-roce", 8192)
    net = NetworkModel(cluster)
    sizes = cluster.network.domain_sizes()
    rng = np.random.default_rng(3)
    low = rng.integers(0, 8192, size=(40, 50), dtype=np.int64)
    high = np.minimum(low + rng.integers(0, 4000, size=low.shape), 8191)
    expected = [[sum(a // size != b // size for size in sizes) for a, b in zip(*row)]
                for row in zip(low.tolist(), high.tolist())]
    assert net.tier_of_pairs(low, high).tolist() == expected
    assert len(set(sum(expected, []))) == 4  # node, rack, pod and above all met


def test_tick_conversion_is_exact_for_decimal_inputs():
    """1e6 B over 1e10 B/s is exactly 100,000 ticks, not 100,001 from float noise."""
    path = NetPath(Fraction(str(1e10)), Fraction(str(1e-5)))
    assert p2p_ticks(10**6, path, 1e-9) == 110_000
    assert to_ticks(Fraction(3, 10), 1e-9) == 300_000_000


def test_collective_formulas():
    """Ring costs: all-reduce 2(g-1)/g v/b + 2(g-1)a; others (g-1)/g v/b + (g-1)a; g=1 free."""
    path = NetPath(Fraction(10**9), Fraction(1, 10**6))
    assert collective_ticks(CollectiveKind.ALL_REDUCE, 4 * 10**9, 4, path, 1e-9) == \
        6 * 10**9 + 6_000
    assert collective_ticks(CollectiveKind.ALL_TO_ALL, 4 * 10**9, 4, path, 1e-9) == \
        3 * 10**9 + 3_000
    assert collective_ticks(CollectiveKind.ALL_GATHER, 10**9, 1, path, 1e-9) == 0


def test_ticks_round_up_once():
    """A collective of 1 byte still costs a whole tick (rounded up, never down)."""
    path = NetPath(Fraction(10**12), Fraction(0))
    assert collective_ticks(CollectiveKind.ALL_GATHER, 1, 2, path, 1e-9) == 1


def _group_paths_one_by_one(network, replicas, config):
    """GroupPaths.of_replicas as its definition reads: every group's path from its devices,
    local when every TP group lies inside one tier-0 domain."""
    from nest_cp.cost.terms import GroupPaths
    from nest_cp.model.plan import expert_groups, tensor_groups

    def path(devices, group):
        return None if len(group) == 1 else network.group_path([devices[j] for j in group])

    return [GroupPaths(
        tp=tuple(path(devices, group) for group in tensor_groups(config)),
        ep=tuple(path(devices, group) for group in expert_groups(config)),
        tp_local=network.is_hierarchical and all(
            len(group) == 1 or network.tier_of([devices[j] for j in group]) == 0
            for group in tensor_groups(config)))
        for devices in replicas]


def test_group_paths_of_many_replicas_equal_one_by_one():
    """The replicas whose TP groups all lie inside one tier-0 domain share one record
    (found over all replicas at once); each record equals the one built group by group,
    on random placements with groups inside and across domains and repeated devices."""
    import random

    from nest_cp.cost.terms import GroupPaths
    from nest_cp.model.instance import Cluster, HierarchicalNetwork, IntraConfig, Tier

    rng = random.Random(7)
    for _ in range(60):
        sizes = (rng.choice([2, 4, 8]), rng.choice([2, 3]), 4)
        network = NetworkModel(Cluster(sizes[0] * sizes[1] * sizes[2], 10**9, HierarchicalNetwork(
            tuple(Tier(f"t{i}", size, 1e11 / 4**i, 1e-6) for i, size in enumerate(sizes)))))
        config = IntraConfig(rng.choice([1, 2, 4]), rng.choice([1, 1, 2]))
        devices = network.cluster.num_devices
        replicas = []
        for _ in range(rng.randint(1, 12)):
            start = rng.randrange(devices - config.devices + 1)
            draw = rng.random()
            ranks = list(range(start, start + config.devices)) if draw < 0.5 else \
                [start] * config.devices if draw < 0.6 else \
                [rng.randrange(devices) for _ in range(config.devices)]
            replicas.append(ranks)
        assert GroupPaths.of_replicas(network, replicas, config) == \
            _group_paths_one_by_one(network, replicas, config)


def test_pair_path_sets_and_array_groups_equal_one_by_one():
    """The referee's array forms: per row the set of its pairs' paths (distinct sets and
    each row's index) and a group's path from an id array equal pair_path and group_path
    on lists, on random two- and three-tier networks (pairs inside and across domains,
    repeated devices) and on a graph network."""
    import random

    from nest_cp.model.instance import Cluster, HierarchicalNetwork, Tier

    rng = random.Random(11)
    networks = [_graph_network()]
    for _ in range(30):
        sizes = (rng.choice([1, 2, 4, 8]), rng.choice([2, 3]), 4)
        networks.append(NetworkModel(Cluster(sizes[0] * sizes[1] * sizes[2], 10**9,
                                             HierarchicalNetwork(tuple(
                                                 Tier(f"t{i}", size, 1e11 / 4**i, 1e-6)
                                                 for i, size in enumerate(sizes))))))
    compared = 0
    for network in networks:
        devices = network.cluster.num_devices
        for _ in range(5):
            rows, ranks = rng.randint(1, 6), rng.randint(1, 4)
            first = np.array([[rng.randrange(devices) for _ in range(ranks)]
                              for _ in range(rows)])
            second = np.array([[(a + rng.randrange(1, devices)) % devices for a in row]
                               for row in first.tolist()])
            distinct, index = network.pair_path_sets(first, second)
            expected = [frozenset(map(network.pair_path, one, other))
                        for one, other in zip(first.tolist(), second.tolist())]
            assert [distinct[i] for i in index] == expected
            assert len(distinct) == len(set(expected))
            for row in first.tolist() + [[row[0]] * 3 for row in first.tolist()]:
                assert network.group_path(np.array(row)) == network.group_path(row)
                compared += 1
    assert compared
