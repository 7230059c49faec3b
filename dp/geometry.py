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
each distinct combination once.  On a hierarchical network a path is a tier and
the whole computation is vectorised over ranks (with
:meth:`NetworkModel.tier_of_pairs`); on a graph it is done rank by rank.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from nest_cp.model.instance import IntraConfig
from nest_cp.model.network import NetworkModel, Path
from nest_cp.model.plan import Dim, RankLayout, expert_groups, tensor_groups

MAX_CODED_TIERS = 15  # four tier bitmasks share one int64 code per replica


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
    if network.is_hierarchical and network.num_tiers <= MAX_CODED_TIERS:
        return _hierarchical_geometries(network, devices, config, wrap)
    return _graph_geometries(network, ids, devices, config, wrap)


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


def _group_tiers(network: NetworkModel, devices: np.ndarray, axis: int) -> np.ndarray:
    """Tier spanning the devices along ``axis`` (one group per remaining index)."""
    return network.tier_of_pairs(devices.min(axis=axis), devices.max(axis=axis))


def _row_sets(values: np.ndarray) -> list[tuple[int, ...]]:
    """The sorted distinct values of each row of a 2-D array."""
    ordered = np.sort(values, axis=1)
    fresh = np.ones(ordered.shape, dtype=bool)
    fresh[:, 1:] = ordered[:, 1:] != ordered[:, :-1]
    return [tuple(row[keep].tolist()) for row, keep in zip(ordered, fresh)]


def _mask_tiers(mask: int, num_tiers: int) -> tuple[int, ...]:
    return tuple(tier for tier in range(num_tiers) if mask >> tier & 1)


def _tier_mask(tiers: np.ndarray, axis: int) -> np.ndarray:
    """Bitmask of the tiers along ``axis``."""
    return np.bitwise_or.reduce(np.left_shift(np.int64(1), tiers), axis=axis)


def _hierarchical_geometries(network: NetworkModel, devices: np.ndarray,
                             config: IntraConfig, wrap: bool) -> list[StageGeometry]:
    num_stages, dp, _ = devices.shape
    num_tiers = network.num_tiers
    by_index = devices.reshape(num_stages, dp, config.ep, config.tp)  # [s, r, e_index, t_index]
    zeros = np.zeros((num_stages, dp), dtype=np.int64)
    tp_mask = _tier_mask(_group_tiers(network, by_index, 3), 2) if config.tp > 1 else zeros
    ep_mask = _tier_mask(_group_tiers(network, by_index, 2), 2) if config.ep > 1 else zeros
    activation_from, gradient_from = _senders(num_stages, wrap)

    def pair_mask(senders: list[int | None]) -> np.ndarray:
        """[s, r] = bitmask of the tiers of the pairs from stage senders[s] to stage s."""
        mask = zeros.copy()
        stages = [s for s in range(num_stages) if senders[s] is not None]
        if stages:
            source = devices[[senders[s] for s in stages]]
            target = devices[stages]
            tiers = network.tier_of_pairs(np.minimum(source, target), np.maximum(source, target))
            mask[stages] = _tier_mask(tiers, 2)
        return mask

    width = 1 << num_tiers
    codes = tp_mask + width * (ep_mask + width * (
        pair_mask(activation_from) + width * pair_mask(gradient_from)))
    no_groups = [()] * num_stages
    replica_sets = _row_sets(_group_tiers(network, devices, 1)) if dp > 1 else no_groups
    dense_sets = no_groups
    if dp * config.ep > 1:
        by_tensor_rank = devices.reshape(num_stages, dp * config.ep, config.tp)
        dense_sets = _row_sets(_group_tiers(network, by_tensor_rank, 1))
    decoded: dict[int, ReplicaPaths] = {}
    known: dict[tuple, StageGeometry] = {}
    geometries = []
    for stage, code_set in enumerate(_row_sets(codes)):
        for code in code_set:
            if code not in decoded:
                masks = [(code >> (num_tiers * part)) % width for part in range(4)]
                decoded[code] = ReplicaPaths(*(_mask_tiers(mask, num_tiers) for mask in masks))
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
