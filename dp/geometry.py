"""Where a rank layout puts each stage, reduced to the network paths its costs depend on.

For fixed (configuration, S, d, layout) the placement is fixed (DESIGN §4), so
every placement-dependent term of stage s is a function of a few bottleneck
:class:`~nest_cp.model.network.Path` values:

- per replica r: the paths of its TP groups (the t ranks sharing an expert index)
  and of its EP groups (the e ranks sharing a tensor index), on which each
  intra-layer collective costs its slowest group (DESIGN §3.2 f), and the sets of
  pair paths of its receive-activation and receive-gradient transfers, one pair per
  intra-stage rank j.  The activation comes from stage s − 1 and the gradient from
  stage s + 1; with ``wrap`` (interleaved 1F1B, v > 1) stage 0 receives activations
  from stage S − 1 and stage S − 1 gradients from stage 0 (chunk boundaries
  S − 1 → S, DESIGN §3.2 b);
- the paths of the d-replica groups of each rank j (ZeRO-3 gathers, expert sync)
  and of the d·e groups of each tensor rank t (dense sync).

Replicas with the same paths cost the same, so a :class:`StageGeometry` keeps
each distinct combination once.  On a hierarchical network a pair's path is its
tier's and a group's is :meth:`NetworkModel.channel_path` of the tier it spans and
its fewest members in one tier-0 domain (cost model §5 a), and the whole
computation is vectorised over ranks (with :meth:`NetworkModel.tier_of_pairs` and
a sort of the groups' tier-0 domain ids); on a graph it is done rank by rank, with
:meth:`NetworkModel.group_path`, which is also the reference the vectorised
computation is tested against.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from nest_cp.model.instance import IntraConfig
from nest_cp.model.network import NetworkModel, Path
from nest_cp.model.plan import Dim, RankLayout, expert_groups, tensor_groups

CODE_BITS = 62  # the four bitmasks of a replica share one int64 code


class PathIds:
    """Integer ids of the bottleneck paths met so far: tier k has id k on a tiered network
    (the path of its point-to-point pairs and one-channel groups); multi-channel group
    paths (cost model §5 a) get the next ids as they are met."""

    def __init__(self, network: NetworkModel):
        self.paths: list[Path] = [network.tier_path(tier) for tier in range(network.num_tiers)]
        self._ids: dict[Path, int] = {}
        for tier, path in enumerate(self.paths):
            self._ids.setdefault(path, tier)

    def id_of(self, path: Path) -> int:
        if path not in self._ids:
            self._ids[path] = len(self.paths)
            self.paths.append(path)
        return self._ids[path]


@dataclass(frozen=True, slots=True)
class ReplicaPaths:
    """Path ids one stage replica is priced on; sorted tuples of distinct ids.

    ``tp_groups`` / ``ep_groups``: the paths of its TP / EP groups (empty when the group
    has one device and never communicates).
    """

    tp_groups: tuple[int, ...]
    ep_groups: tuple[int, ...]
    recv_activation: tuple[int, ...]
    recv_gradient: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class StageGeometry:
    """Distinct replica path combinations and data-parallel group path ids of one stage."""

    replicas: tuple[ReplicaPaths, ...]
    replica_groups: tuple[int, ...]  # d-replica group of each rank j (ZeRO-3, expert sync)
    dense_groups: tuple[int, ...]    # d*e group of each tensor rank t (dense sync)


def effective_order(layout: RankLayout, config: IntraConfig, num_stages: int,
                    dp: int) -> tuple[Dim, ...]:
    """The layout's order without radix-1 dimensions: equal orders give equal placements."""
    radix = {Dim.TP: config.tp, Dim.EP: config.ep, Dim.STAGE: num_stages, Dim.REPLICA: dp}
    return tuple(dim for dim in layout.order if radix[dim] > 1)


def rank_devices(layout: RankLayout, config: IntraConfig, num_stages: int, dp: int,
                 device_order: np.ndarray) -> np.ndarray:
    """devices[stage, replica, rank]: the layout's placement as an (S, d, a) array."""
    return device_order[layout.positions(config, num_stages, dp)]


def stage_geometries(network: NetworkModel, ids: PathIds, devices: np.ndarray,
                     config: IntraConfig, wrap: bool = False) -> list[StageGeometry]:
    """One :class:`StageGeometry` per stage of the placement ``devices[stage, replica, rank]``.

    ``wrap``: the first and last stage also exchange the chunk boundaries of
    interleaved 1F1B (stage 0 receives from S − 1, S − 1 from 0).
    """
    if network.is_hierarchical:
        geometries = _hierarchical_geometries(network, ids, devices, config, wrap)
        if geometries is not None:
            return geometries
    return _graph_geometries(network, ids, devices, config, wrap)


def fastest_group_paths(network: NetworkModel, group_size: int) -> list[Path]:
    """On a tiered network, the fastest path each tier can give a group of ``group_size``
    distinct devices (group_size >= 2): for every tier whose domains hold that many.

    A group spanning tier K >= 1 touches two tier-0 domains at least, so it has at most
    min(group_size // 2, G_0) members in the one it has fewest in, and its path
    (cost model §5 a) is at most as fast as :meth:`NetworkModel.channel_path` with that
    many channels: no collective over such a group costs less than on one of these paths.
    """
    domains = network.cluster.network.domain_sizes()
    channels = min(group_size // 2, domains[0])
    return [network.channel_path(tier, channels) for tier, size in enumerate(domains)
            if size >= group_size]


def _senders(num_stages: int, wrap: bool) -> tuple[list[int | None], list[int | None]]:
    """The stage each stage receives its activation from and its gradient from (None: none)."""
    activation = [s - 1 if s > 0 else (num_stages - 1 if wrap else None)
                  for s in range(num_stages)]
    gradient = [s + 1 if s < num_stages - 1 else (0 if wrap else None)
                for s in range(num_stages)]
    if num_stages == 1:
        activation, gradient = [None], [None]
    return activation, gradient


# ------------------------------------------------------------------ hierarchical


def _fewest_per_domain(devices: np.ndarray, axis: int, domain_size: int) -> np.ndarray:
    """k of the group along ``axis``: its fewest members in one tier-0 domain it touches.

    Vectorised over the other axes: the domain ids of each group are sorted (a rank layout
    on the canonical order of a tiered network, ids 0..N-1, gives them in order, so the
    sort is skipped then), and k is the shortest run of equal ids (a group's devices are
    distinct).
    """
    domains = np.moveaxis(devices, axis, -1) // domain_size
    if not (domains[..., 1:] >= domains[..., :-1]).all():  # rank layouts on the canonical
        domains = np.sort(domains, axis=-1)                 # order are sorted already
    size = domains.shape[-1]
    index = np.arange(size)
    starts = np.ones(domains.shape, dtype=bool)
    starts[..., 1:] = domains[..., 1:] != domains[..., :-1]
    ends = np.ones(domains.shape, dtype=bool)
    ends[..., :-1] = starts[..., 1:]
    run_start = np.maximum.accumulate(np.where(starts, index, 0), axis=-1)
    return np.where(ends, index - run_start + 1, size).min(axis=-1)


class _GroupPathCodes:
    """Path ids of collective groups on a tiered network, vectorised over groups.

    A group spanning tier K with k members at least in every tier-0 domain it touches runs
    on :meth:`NetworkModel.channel_path` (K, k) (cost model §5 a).  k only matters up to
    :meth:`NetworkModel.max_useful_channels` (K), so (K, min(k, that)) is coded as one
    small integer and each code met is turned into a path id once.
    """

    def __init__(self, network: NetworkModel, ids: PathIds):
        self.network, self.ids = network, ids
        self.useful = np.array([network.max_useful_channels(tier)
                                for tier in range(network.num_tiers)], dtype=np.int64)
        self.stride = int(self.useful.max())
        self.domain_size = network.cluster.network.domain_sizes()[0]  # G_0
        self._path_ids = np.full(network.num_tiers * self.stride, -1, dtype=np.int64)

    def of(self, devices: np.ndarray, axis: int) -> np.ndarray:
        """The path id of the group along ``axis`` (one group per remaining index)."""
        tiers = np.asarray(self.network.tier_of_pairs(devices.min(axis=axis),
                                                      devices.max(axis=axis)), dtype=np.int64)
        codes = tiers * self.stride
        if self.stride > 1:  # some tier runs faster with more channels
            channels = _fewest_per_domain(devices, axis, self.domain_size)
            codes = codes + np.minimum(channels, self.useful[tiers]) - 1
        for code in np.unique(codes[self._path_ids[codes] < 0]).tolist():
            tier, channels = divmod(code, self.stride)
            self._path_ids[code] = self.ids.id_of(self.network.channel_path(tier, channels + 1))
        return self._path_ids[codes]


def _row_sets(values: np.ndarray) -> list[tuple[int, ...]]:
    """The sorted distinct values of each row of a 2-D array."""
    ordered = np.sort(values, axis=1)
    fresh = np.ones(ordered.shape, dtype=bool)
    fresh[:, 1:] = ordered[:, 1:] != ordered[:, :-1]
    return [tuple(row[keep].tolist()) for row, keep in zip(ordered, fresh)]


def _bit_mask(indices: np.ndarray, axis: int) -> np.ndarray:
    """Bitmask of the (small, non-negative) ``indices`` along ``axis``."""
    return np.bitwise_or.reduce(np.left_shift(np.int64(1), indices), axis=axis)


def _hierarchical_geometries(network: NetworkModel, ids: PathIds, devices: np.ndarray,
                             config: IntraConfig, wrap: bool) -> list[StageGeometry] | None:
    """The stage geometries, vectorised over ranks; None when a replica's path sets do not
    fit one int64 code (more than ``CODE_BITS`` bits), for the rank-by-rank fallback.

    Each replica is coded as four bitmasks: of the TP and of the EP groups' paths (bits
    indexing the distinct group path ids of the placement) and of the tiers of its
    activation and gradient pairs (point-to-point: a pair's path is its tier's, id = tier).
    """
    num_stages, dp, _ = devices.shape
    num_tiers = network.num_tiers
    groups = _GroupPathCodes(network, ids)
    by_index = devices.reshape(num_stages, dp, config.ep, config.tp)  # [s, r, e_index, t_index]
    no_group = np.zeros((num_stages, dp, 0), dtype=np.int64)
    tp_ids = groups.of(by_index, 3) if config.tp > 1 else no_group
    ep_ids = groups.of(by_index, 2) if config.ep > 1 else no_group
    local_ids, local = np.unique(np.concatenate((tp_ids.ravel(), ep_ids.ravel())),
                                 return_inverse=True)
    width = len(local_ids)
    if 2 * width + 2 * num_tiers > CODE_BITS:
        return None
    zeros = np.zeros((num_stages, dp), dtype=np.int64)
    tp_mask = _bit_mask(local[:tp_ids.size].reshape(tp_ids.shape), 2) if tp_ids.size else zeros
    ep_mask = _bit_mask(local[tp_ids.size:].reshape(ep_ids.shape), 2) if ep_ids.size else zeros
    activation_from, gradient_from = _senders(num_stages, wrap)

    def pair_mask(senders: list[int | None]) -> np.ndarray:
        """[s, r] = bitmask of the tiers of the pairs from stage senders[s] to stage s."""
        mask = zeros.copy()
        stages = [s for s in range(num_stages) if senders[s] is not None]
        if stages:
            source = devices[[senders[s] for s in stages]]
            target = devices[stages]
            tiers = network.tier_of_pairs(np.minimum(source, target), np.maximum(source, target))
            mask[stages] = _bit_mask(tiers, 2)
        return mask

    codes = tp_mask + (ep_mask << width) + (pair_mask(activation_from) << 2 * width) \
        + (pair_mask(gradient_from) << 2 * width + num_tiers)
    no_groups = [()] * num_stages
    replica_sets = _row_sets(groups.of(devices, 1)) if dp > 1 else no_groups
    dense_sets = no_groups
    if dp * config.ep > 1:
        by_tensor_rank = devices.reshape(num_stages, dp * config.ep, config.tp)
        dense_sets = _row_sets(groups.of(by_tensor_rank, 1))

    def group_ids(mask: int) -> tuple[int, ...]:  # local_ids ascend: so do the ids
        return tuple(int(local_ids[bit]) for bit in range(width) if mask >> bit & 1)

    def tiers_of(mask: int) -> tuple[int, ...]:
        return tuple(tier for tier in range(num_tiers) if mask >> tier & 1)

    decoded: dict[int, ReplicaPaths] = {}
    known: dict[tuple, StageGeometry] = {}
    geometries = []
    for stage, code_set in enumerate(_row_sets(codes)):
        for code in code_set:
            if code not in decoded:
                pairs = code >> 2 * width
                decoded[code] = ReplicaPaths(
                    group_ids(code % (1 << width)), group_ids((code >> width) % (1 << width)),
                    tiers_of(pairs % (1 << num_tiers)), tiers_of(pairs >> num_tiers))
        key = (code_set, replica_sets[stage], dense_sets[stage])
        if key not in known:
            known[key] = StageGeometry(tuple(decoded[code] for code in code_set),
                                       replica_sets[stage], dense_sets[stage])
        geometries.append(known[key])
    return geometries


# ------------------------------------------------------------------------ graph


def _graph_geometries(network: NetworkModel, ids: PathIds, devices: np.ndarray,
                      config: IntraConfig, wrap: bool) -> list[StageGeometry]:
    num_stages, dp, num_ranks = devices.shape
    placement = devices.tolist()
    activation_from, gradient_from = _senders(num_stages, wrap)

    def group(members: list[int]) -> int:
        path = network.group_path(members)
        return -1 if path is None else ids.id_of(path)

    def groups(ranks: list[int], rank_groups) -> tuple[int, ...]:
        found = {group([ranks[j] for j in members]) for members in rank_groups}
        return tuple(sorted(found - {-1}))

    def pairs(sender: int | None, receiver: int, replica: int) -> tuple[int, ...]:
        if sender is None:
            return ()
        return tuple(sorted({ids.id_of(network.pair_path(placement[sender][replica][j],
                                                         placement[receiver][replica][j]))
                             for j in range(num_ranks)}))

    geometries = []
    for stage in range(num_stages):
        replicas = tuple(sorted(
            {ReplicaPaths(tp_groups=groups(placement[stage][replica], tensor_groups(config)),
                          ep_groups=groups(placement[stage][replica], expert_groups(config)),
                          recv_activation=pairs(activation_from[stage], stage, replica),
                          recv_gradient=pairs(gradient_from[stage], stage, replica))
             for replica in range(dp)},
            key=lambda r: (r.tp_groups, r.ep_groups, r.recv_activation, r.recv_gradient)))
        replica_groups = tuple(sorted(
            {group([placement[stage][r][j] for r in range(dp)]) for j in range(num_ranks)}
        )) if dp > 1 else ()
        dense_groups = tuple(sorted(
            {group([placement[stage][r][t + config.tp * e]
                    for r in range(dp) for e in range(config.ep)])
             for t in range(config.tp)})) if dp * config.ep > 1 else ()
        geometries.append(StageGeometry(replicas, replica_groups, dense_groups))
    return geometries
