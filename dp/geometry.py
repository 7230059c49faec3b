"""Where a rank layout puts each stage, reduced to the network paths its costs depend on.

For fixed (configuration, S, d, layout) the placement is fixed (DESIGN §4), so
every placement-dependent term of stage s is a function of a few bottleneck
:class:`~nest_cp.network.Path` values:

- per replica r: the path of its t·e group (intra-layer collectives) and the sets
  of pair paths of its receive-activation (from stage s−1) and receive-gradient
  (from stage s+1) transfers, one pair per intra-stage rank j;
- the paths of the d-replica groups of each rank j (ZeRO-3 gathers, expert sync)
  and of the d·e groups of each tensor rank t (dense sync).

Replicas with the same paths cost the same, so a :class:`StageGeometry` keeps
each distinct combination once.  On a hierarchical network a path is a tier and
the whole computation is vectorised over ranks; on a graph it is done rank by rank.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from nest_cp.model import IntraConfig
from nest_cp.network import NetworkModel, Path
from nest_cp.plan import Dim, RankLayout


class PathIds:
    """Integer ids of the bottleneck paths met so far: tier k has id k on a tiered network."""

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
    """Path ids one stage replica is priced on (group -1: a single device); sorted id tuples."""

    group: int
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
    stage = np.arange(num_stages)[:, None, None]
    replica = np.arange(dp)[None, :, None]
    rank = np.arange(config.devices)[None, None, :]
    digits = {Dim.TP: rank % config.tp, Dim.EP: rank // config.tp, Dim.STAGE: stage,
              Dim.REPLICA: replica}
    radix = {Dim.TP: config.tp, Dim.EP: config.ep, Dim.STAGE: num_stages, Dim.REPLICA: dp}
    position, weight = np.zeros((num_stages, dp, config.devices), dtype=np.int64), 1
    for dim in layout.order:
        position = position + digits[dim] * weight
        weight *= radix[dim]
    return device_order[position]


def stage_geometries(network: NetworkModel, ids: PathIds, devices: np.ndarray,
                     config: IntraConfig) -> list[StageGeometry]:
    """One :class:`StageGeometry` per stage of the placement ``devices[stage, replica, rank]``."""
    if network.is_hierarchical:
        return _hierarchical_geometries(network, devices, config)
    return _graph_geometries(network, ids, devices, config)


# ------------------------------------------------------------------ hierarchical


def _tiers(network: NetworkModel, lowest: np.ndarray, highest: np.ndarray) -> np.ndarray:
    """Tier spanning each (lowest, highest) device pair: the first domain holding both."""
    domains = network.cluster.network.domain_sizes()
    tiers = np.zeros(np.shape(lowest), dtype=np.int64)
    for size in domains:
        tiers += (lowest // size) != (highest // size)
    return tiers


def _row_sets(values: np.ndarray) -> list[tuple[int, ...]]:
    """The sorted distinct values of each row of a 2-D array."""
    ordered = np.sort(values, axis=1)
    fresh = np.ones(ordered.shape, dtype=bool)
    fresh[:, 1:] = ordered[:, 1:] != ordered[:, :-1]
    return [tuple(row[keep].tolist()) for row, keep in zip(ordered, fresh)]


def _mask_tiers(mask: int, num_tiers: int) -> tuple[int, ...]:
    return tuple(tier for tier in range(num_tiers) if mask >> tier & 1)


def _hierarchical_geometries(network: NetworkModel, devices: np.ndarray,
                             config: IntraConfig) -> list[StageGeometry]:
    num_stages, dp, _ = devices.shape
    num_tiers = network.num_tiers
    group_tier = (_tiers(network, devices.min(axis=2), devices.max(axis=2))
                  if config.devices > 1 else np.full((num_stages, dp), -1))
    # pair_mask[s, r] = bitmask of the tiers of the pairs between stage s-1 and s of replica r
    pair_mask = np.zeros((num_stages + 1, dp), dtype=np.int64)
    if num_stages > 1:
        low = np.minimum(devices[:-1], devices[1:])
        high = np.maximum(devices[:-1], devices[1:])
        pair_mask[1:num_stages] = np.bitwise_or.reduce(
            np.left_shift(1, _tiers(network, low, high)), axis=2)
    codes = (group_tier + 1) + (num_tiers + 1) * (
        pair_mask[:num_stages] + (1 << num_tiers) * pair_mask[1:])
    no_groups = [()] * num_stages
    replica_sets = (_row_sets(_tiers(network, devices.min(axis=1), devices.max(axis=1)))
                    if dp > 1 else no_groups)
    dense_sets = no_groups
    if dp * config.ep > 1:
        by_tensor_rank = devices.reshape(num_stages, dp * config.ep, config.tp)
        dense_sets = _row_sets(_tiers(network, by_tensor_rank.min(axis=1),
                                      by_tensor_rank.max(axis=1)))
    decoded: dict[int, ReplicaPaths] = {}
    known: dict[tuple, StageGeometry] = {}
    geometries = []
    for stage, code_set in enumerate(_row_sets(codes)):
        for code in code_set:
            if code not in decoded:
                masks = code // (num_tiers + 1)
                decoded[code] = ReplicaPaths(
                    group=code % (num_tiers + 1) - 1,
                    recv_activation=_mask_tiers(masks % (1 << num_tiers), num_tiers),
                    recv_gradient=_mask_tiers(masks >> num_tiers, num_tiers))
        key = (code_set, replica_sets[stage], dense_sets[stage])
        if key not in known:
            known[key] = StageGeometry(tuple(decoded[code] for code in code_set),
                                       replica_sets[stage], dense_sets[stage])
        geometries.append(known[key])
    return geometries


# ------------------------------------------------------------------------ graph


def _graph_geometries(network: NetworkModel, ids: PathIds, devices: np.ndarray,
                      config: IntraConfig) -> list[StageGeometry]:
    num_stages, dp, num_ranks = devices.shape
    placement = devices.tolist()

    def group(members: list[int]) -> int:
        path = network.group_path(members)
        return -1 if path is None else ids.id_of(path)

    def pairs(sender: int, receiver: int, replica: int) -> tuple[int, ...]:
        if not 0 <= sender < num_stages:
            return ()
        return tuple(sorted({ids.id_of(network.pair_path(placement[sender][replica][j],
                                                         placement[receiver][replica][j]))
                             for j in range(num_ranks)}))

    geometries = []
    for stage in range(num_stages):
        replicas = tuple(sorted(
            {ReplicaPaths(group=group(placement[stage][replica]),
                          recv_activation=pairs(stage - 1, stage, replica),
                          recv_gradient=pairs(stage + 1, stage, replica))
             for replica in range(dp)},
            key=lambda r: (r.group, r.recv_activation, r.recv_gradient)))
        replica_groups = tuple(sorted(
            {group([placement[stage][r][j] for r in range(dp)]) for j in range(num_ranks)}
        )) if dp > 1 else ()
        dense_groups = tuple(sorted(
            {group([placement[stage][r][t + config.tp * e]
                    for r in range(dp) for e in range(config.ep)])
             for t in range(config.tp)})) if dp * config.ep > 1 else ()
        geometries.append(StageGeometry(replicas, replica_groups, dense_groups))
    return geometries
