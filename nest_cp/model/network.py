"""Network queries and collective prices in integer ticks (DESIGN §1.2, §3).

Exact arithmetic: every float of an instance (seconds, bytes per second) is read
as the decimal it prints as (``Fraction(str(x))``), so 1e6 B / 1e10 B/s is
exactly 1e-4 s, and each primitive term is rounded *up* to whole ticks once by
:func:`to_ticks`.  Everything after that is integer arithmetic.

Group prices: a group of devices is priced on its *bottleneck* ``Path``: on a
hierarchical network the tier that spans it, with as many parallel ring channels as the
group's fewest members in one tier-0 domain (docs/cost-model.md §5 a); on a graph, the
smallest widest-path bandwidth over its pairs and the largest latency over its pairs (each pair's
latency is the least latency among its widest paths).  A graph may hold parallel
links between two nodes: each is a path of its own.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from functools import cached_property

import networkx as nx
import numpy as np

from nest_cp.model.instance import (
    Cluster,
    CollectiveKind,
    GraphNetwork,
    HierarchicalNetwork,
    IntraConfig,
)
from nest_cp.model.plan import (
    Placement,
    RankLayout,
    digit_device_order,
    digit_radices,
    structured_layouts,
)
from nest_cp.model.ticks import exact, to_ticks


@dataclass(frozen=True, slots=True)
class Path:
    """Bottleneck bandwidth (B/s) and latency (s) of a device pair or group, as exact fractions.

    Hashed once at construction: the evaluator memoises prices by path, and hashing two
    fractions on every lookup would cost more than the lookup saves.
    """

    bandwidth_Bps: Fraction
    latency_s: Fraction
    _hash: int = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_hash", hash((self.bandwidth_Bps, self.latency_s)))

    def __hash__(self) -> int:
        return self._hash


def collective_seconds(kind: CollectiveKind | str, volume_bytes: int, group_size: int,
                       path: Path) -> Fraction:
    """Ring cost of DESIGN §3 for ``volume_bytes`` per device over ``group_size`` devices."""
    if group_size <= 1:
        return Fraction(0)
    steps = group_size - 1
    if kind == CollectiveKind.ALL_REDUCE:
        return 2 * Fraction(steps, group_size) * volume_bytes / path.bandwidth_Bps \
            + 2 * steps * path.latency_s
    if kind in (CollectiveKind.ALL_GATHER, CollectiveKind.REDUCE_SCATTER,
                CollectiveKind.ALL_TO_ALL):
        return Fraction(steps, group_size) * volume_bytes / path.bandwidth_Bps \
            + steps * path.latency_s
    raise ValueError(f"expected a collective kind, got {kind!r}")


def collective_ticks(kind: CollectiveKind | str, volume_bytes: int, group_size: int,
                     path: Path, tick_s: float) -> int:
    """One collective, rounded up to ticks once."""
    if group_size <= 1:
        return 0
    return to_ticks(collective_seconds(kind, volume_bytes, group_size, path), tick_s)


def p2p_ticks(volume_bytes: int, path: Path, tick_s: float) -> int:
    """One point-to-point transfer v/beta + alpha, rounded up to ticks."""
    return to_ticks(volume_bytes / path.bandwidth_Bps + path.latency_s, tick_s)


def effective_bandwidth(tier_or_link) -> Fraction:
    """β of a tier or graph link: bandwidth_Bps × efficiency, exactly (docs/cost-model.md §5 b).

    On graphs links are scaled before the widest-path search, so routing and the canonical
    device order see effective bandwidths."""
    return exact(tier_or_link.bandwidth_Bps) * exact(tier_or_link.efficiency)


class NetworkModel:
    """Pair and group bottlenecks of a cluster's network, and its canonical device order."""

    def __init__(self, cluster: Cluster):
        self.cluster = cluster
        self.num_devices = cluster.num_devices
        network = cluster.network
        if isinstance(network, HierarchicalNetwork):
            self._domains = network.domain_sizes()
            # the domains that may separate two of the N ids (the others hold all of them),
            # and whether ids up to 2N fit 32 bits (numpy divides those about 3x faster)
            self.separating_sizes = tuple(size for size in self._domains
                                          if size < self.num_devices)
            self._narrow = 2 * self.num_devices <= np.iinfo(np.int32).max
            self._tier_paths = tuple(Path(effective_bandwidth(t), exact(t.latency_s))
                                     for t in network.tiers)
        else:
            self._domains = self.separating_sizes = ()
            self._narrow = False
            self._tier_paths = ()
        self._channel_paths: dict[tuple[int, int], Path] = {}
        self._layout_orders: dict[tuple[int, ...], tuple[int, ...]] = {}  # by digits

    @property
    def is_hierarchical(self) -> bool:
        return isinstance(self.cluster.network, HierarchicalNetwork)

    # ---------------------------------------------------------- hierarchical

    def tier_of_pairs(self, lowest, highest):
        """Tier of each device pair: the smallest tier whose domain holds both devices.

        ``lowest`` and ``highest`` are device ids, ints or integer numpy arrays (elementwise,
        broadcast); a group's tier is that of its smallest and largest id.  Domains are
        nested blocks of consecutive ids, so the tier is the number of tiers whose domains
        separate the two; ``num_tiers`` means no tier holds both (hierarchical networks only).
        A domain of N ids or more separates no two of them; id arrays (of ids below 2N) are
        divided as 32-bit integers where 2N fits.
        """
        if isinstance(lowest, np.ndarray) and lowest.dtype.itemsize > 4 and self._narrow \
                and np.ndim(highest) > 0:
            lowest, highest = lowest.astype(np.int32), np.asarray(highest).astype(np.int32)
        # (one domain of N ids where none may separate: arrays still give arrays)
        return sum((lowest // size) != (highest // size)
                   for size in self.separating_sizes or (self.num_devices,))

    def tier_of(self, devices: Iterable[int]) -> int:
        """Smallest tier whose domain holds all ``devices`` (hierarchical networks only)."""
        devices = list(devices)
        low, high = min(devices), max(devices)
        tier = int(self.tier_of_pairs(low, high))
        if tier >= len(self._domains):
            raise ValueError(f"devices {low} and {high} lie in no common tier domain")
        return tier

    def tier_path(self, tier: int) -> Path:
        return self._tier_paths[tier]

    def channel_path(self, tier: int, channels: int) -> Path:
        """The path of a collective over a group spanning ``tier`` with at least ``channels``
        members in every tier-0 domain it touches (docs/cost-model.md §5 a): NCCL runs one ring
        channel per member's link, β = max(β_K, min(k·β_K, β_0)); latency as the tier's.

        Tier 0 and k = 1 are the tier's own path.  Point-to-point transfers never use this.
        """
        if tier == 0 or channels <= 1:
            return self._tier_paths[tier]
        key = (tier, channels)
        path = self._channel_paths.get(key)
        if path is None:
            own, inner = self._tier_paths[tier], self._tier_paths[0]
            bandwidth = max(own.bandwidth_Bps, min(channels * own.bandwidth_Bps,
                                                   inner.bandwidth_Bps))
            path = own if bandwidth == own.bandwidth_Bps else Path(bandwidth, own.latency_s)
            self._channel_paths[key] = path
        return path

    def max_useful_channels(self, tier: int) -> int:
        """The k beyond which more channels price no faster on ``tier`` (1 for tier 0): the
        least k with k·β_K >= β_0, at most the tier-0 domain size."""
        if tier == 0:
            return 1
        own, inner = self._tier_paths[tier].bandwidth_Bps, self._tier_paths[0].bandwidth_Bps
        needed = max(1, -(-inner // own))  # ceil(β_0 / β_K)
        return int(min(needed, self._domains[0]))

    def channels_of(self, devices: Sequence[int]) -> int:
        """k: the fewest members ``devices`` (distinct) have in any tier-0 domain they touch."""
        size = self._domains[0]
        return min(Counter(device // size for device in devices).values())

    @property
    def num_tiers(self) -> int:
        return len(self._tier_paths)

    # ---------------------------------------------------------- both kinds

    def pair_path(self, a: int, b: int) -> Path:
        """Bottleneck of the device pair (a, b); a != b."""
        if self._tier_paths:  # hierarchical: the innermost domain (block of ids) holding both
            for tier, size in enumerate(self._domains):
                if a // size == b // size:
                    return self._tier_paths[tier]
            raise ValueError(f"devices {a} and {b} lie in no common tier domain")
        return self._graph_pairs[(min(a, b), max(a, b))]

    def pair_path_sets(self, first: np.ndarray, second: np.ndarray
                       ) -> tuple[list[frozenset[Path]], list[int]]:
        """For the pairs (first[r, j], second[r, j]) (int arrays of one shape, a != b), per
        row r the set of its pairs' paths (:meth:`pair_path`), as the distinct sets and
        each row's index among them: on a hierarchical network a pair's path is its
        tier's (:meth:`tier_of_pairs` of the two ids), so the tiers are found at once;
        elsewhere pair by pair."""
        if not self.is_hierarchical:
            index: dict[frozenset[Path], int] = {}
            rows = [index.setdefault(frozenset(map(self.pair_path, one, other)), len(index))
                    for one, other in zip(first.tolist(), second.tolist(), strict=True)]
            return list(index), rows
        tiers = self.tier_of_pairs(np.minimum(first, second), np.maximum(first, second))
        if np.any(tiers >= len(self._domains)):
            row, rank = (int(v[0]) for v in np.nonzero(tiers >= len(self._domains)))
            raise ValueError(f"devices {first[row, rank]} and {second[row, rank]} lie in no "
                             "common tier domain")
        masks = np.bitwise_or.reduce(np.left_shift(1, tiers), axis=1)
        distinct, rows = np.unique(masks, return_inverse=True)
        return ([frozenset(self._tier_paths[tier] for tier in range(len(self._domains))
                           if mask >> tier & 1) for mask in distinct.tolist()],
                rows.reshape(-1).tolist())

    def group_path(self, devices: Sequence[int]) -> Path | None:
        """Bottleneck of a group (None for a single device, which never communicates); an
        int numpy array of ids is read at once on a hierarchical network."""
        if isinstance(devices, np.ndarray) and not self.is_hierarchical:
            devices = devices.ravel().tolist()
        elif isinstance(devices, np.ndarray):
            distinct = np.unique(devices)
            if len(distinct) <= 1:
                return None
            counts = np.unique(distinct // self._domains[0], return_counts=True)[1]
            return self.channel_path(self.tier_of((int(distinct[0]), int(distinct[-1]))),
                                     int(counts.min()))
        if len(devices) <= 1:
            return None
        if self.is_hierarchical:
            distinct = set(devices)
            if len(distinct) <= 1:
                return None
            return self.channel_path(self.tier_of(distinct), self.channels_of(distinct))
        devices = sorted(set(devices))
        if len(devices) <= 1:
            return None
        bandwidth, latency = None, Fraction(0)
        for index, a in enumerate(devices):
            for b in devices[index + 1:]:
                path = self._graph_pairs[(a, b)]
                bandwidth = path.bandwidth_Bps if bandwidth is None else min(
                    bandwidth, path.bandwidth_Bps)
                latency = max(latency, path.latency_s)
        return Path(bandwidth, latency)

    def canonical_order(self) -> tuple[int, ...]:
        """The device order of the structured space (DESIGN §4).

        Hierarchical: ids 0..N-1.  Graph: single-linkage clustering by widest-path
        bandwidth — devices joined by the widest bottleneck become neighbours first;
        clusters merging at one bandwidth are concatenated in order of their
        smallest id, inner order kept.  Deterministic and locality-preserving: any
        set of devices that is connected at bandwidth >= w is a contiguous block.
        """
        if self.is_hierarchical:
            return tuple(range(self.num_devices))
        clusters = [[device] for device in range(self.num_devices)]
        for bandwidth in sorted({p.bandwidth_Bps for p in self._graph_pairs.values()},
                                reverse=True):
            merged: list[list[int]] = []
            for cluster in sorted(clusters, key=min):
                for target in merged:
                    if self._graph_pairs[(min(target[0], cluster[0]), max(
                            target[0], cluster[0]))].bandwidth_Bps >= bandwidth:
                        target.extend(cluster)
                        break
                else:
                    merged.append(list(cluster))
            clusters = merged
        return tuple(device for cluster in sorted(clusters, key=min) for device in cluster)

    @cached_property
    def node_size(self) -> int:
        """G_0, the devices of a tier-0 domain (1 on a graph): the unit of a layout's
        ``spare_first`` offset."""
        if self.is_hierarchical:
            return self._domains[0]
        return 1

    @cached_property
    def digit_radices(self) -> tuple[int, ...] | None:
        """:func:`nest_cp.model.plan.digit_radices` of this network (None on a graph)."""
        if not self.is_hierarchical:
            return None
        return digit_radices(tuple(tier.size for tier in self.cluster.network.tiers),
                             self.num_devices)

    @cached_property
    def structured_layouts(self) -> tuple[RankLayout, ...]:
        """The rank layouts of the structured space on this network (v3a: v2's 24, then the
        other device orders and the spare-first offsets, :func:`structured_layouts`)."""
        return structured_layouts(self.digit_radices)

    def layout_order(self, layout: RankLayout) -> tuple[int, ...]:
        """The device order ``layout`` reads its positions through: the canonical order, or
        its device order δ (:func:`nest_cp.model.plan.digit_device_order`)."""
        known = self._layout_orders
        if layout.digits not in known:
            known[layout.digits] = self.canonical_order() if not layout.digits else tuple(
                digit_device_order(self.digit_radices, layout.digits).tolist())
        return known[layout.digits]

    def layout_placement(self, layout: RankLayout, config, num_stages: int,
                         dp: int) -> Placement:
        """The placement of ``layout`` at this shape on this network."""
        return layout.placement(config, num_stages, dp, self.layout_order(layout),
                                self.node_size)

    def structured_placements(self, config, num_stages: int, dp: int) -> list[Placement]:
        """The distinct placements of the structured space at this shape, in layout order.

        The layouts order (t, e, stage, replica); with c > 1 the context index rides inside
        the expert digit (ranks j = t_index + t·(c_index + c·e_index) number a (t, c·e)
        replica exactly), so the context ranks sit between the tensor and the expert ranks
        in every layout (DESIGN §3.4; the DP's and brute force's structured space)."""
        if config.cp > 1:
            config = IntraConfig(config.tp, config.cp * config.ep)
        seen: dict[Placement, None] = {}
        for layout in self.structured_layouts:
            seen.setdefault(self.layout_placement(layout, config, num_stages, dp))
        return list(seen)

    @cached_property
    def _graph_pairs(self) -> dict[tuple[int, int], Path]:
        """Widest-path bandwidth and least latency among widest paths, for every device pair.

        The network is a multigraph: parallel links between two nodes are separate paths
        (their bandwidths are not added).  For each bandwidth threshold B (from the widest
        down) the links of at least B form a graph in which a node pair is joined by its
        fastest such link; a device pair first connected at B has widest bottleneck B,
        and its least latency among those paths is the shortest path there.
        """
        network = self.cluster.network
        if not isinstance(network, GraphNetwork):
            return {}
        links = [(link.a, link.b, effective_bandwidth(link), exact(link.latency_s))
                 for link in network.links]
        pairs: dict[tuple[int, int], Path] = {}
        devices = range(self.num_devices)
        for bandwidth in sorted({bw for _, _, bw, _ in links}, reverse=True):
            wide = nx.Graph()
            wide.add_nodes_from(devices)
            for a, b, link_bandwidth, latency in links:
                if link_bandwidth >= bandwidth and (
                        not wide.has_edge(a, b) or latency < wide[a][b]["lat"]):
                    wide.add_edge(a, b, lat=latency)
            for source in devices:
                lengths = nx.single_source_dijkstra_path_length(wide, source, weight="lat")
                for target in devices:
                    if target > source and (source, target) not in pairs and target in lengths:
                        pairs[(source, target)] = Path(bandwidth, Fraction(lengths[target]))
            if len(pairs) == self.num_devices * (self.num_devices - 1) // 2:
                break
        return pairs
