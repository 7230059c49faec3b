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

On a tiered network a rank layout is a mixed-radix numbering of the canonical order
(device ids), so :class:`LayoutGeometries` works from the layout's strides instead of
its (S, d, t·e) device array (10^5 devices): a tier and a channel count k only depend on
device ids modulo the period (the least common multiple of the domain sizes below N)
and on id differences below the period, so the replicas of a stage repeat with period
period / gcd(replica stride, period), the inner stages with period / gcd(stage stride,
period) (with gcd(replica stride, period) in place of the period when the replicas placed
cover a whole class of residues, :func:`_inner_stage_period`), and only that many are
placed, with canonical strides (the same residues, no larger; the replica stride reduced
to that gcd then, :func:`_class_stride`) so that layouts and d that place alike share the
work, and the inner stages' replicas once per residue of their first position
(:meth:`LayoutGeometries._by_residue`); the groups of the d
replicas (d·e ranks) are arithmetic progressions whose k has a closed form
(:func:`_progression_fewest`).  A layout whose node tail is in effect (structured space
v3c, :class:`~nest_cp.model.plan.NodeTail`) or whose gathered ends are (v3d,
:func:`~nest_cp.model.plan.gathered_end_positions`) has no stride form: on the canonical
order it is priced from the few replicas (and stages) that stand for all
(:meth:`LayoutGeometries._tail_geometries`, :meth:`LayoutGeometries._gathered_geometries`),
elsewhere from its whole device array.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from nest_cp.dp.node_bounds import capped_group_paths
from nest_cp.model.instance import IntraConfig
from nest_cp.model.network import NetworkModel, Path
from nest_cp.model.plan import (
    Dim,
    RankLayout,
    context_groups,
    expert_groups,
    gathered_end_starts,
    rank_index,
    tensor_groups,
)

CODE_BITS = 62  # the four bitmasks of a replica share one int64 code
DATA_KEPT = 512  # v3a layouts' data-parallel group paths kept (asked twice per outer choice)
POSITIONS_KEPT = 2**18  # group path ids kept by (box, digits, least position)
BOXES_KEPT = 4096  # multi-dimensional group boxes whose k per residue is kept (G_0 ints each)


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
    # every TP group inside one tier-0 domain (tiered networks only): where
    # tp_comm_overlap hides the TP collectives behind the GEMMs (cost model §5 e)
    tp_local: bool = False
    # context width c > 1 (docs/context-parallelism.md): the paths of consecutive ranks of
    # its CP rings (the wrap included), where p2p sends K/V, and of its CP groups, where
    # a2a's all-to-alls run; empty for c = 1
    context_pairs: tuple[int, ...] = ()
    context_groups: tuple[int, ...] = ()
    _hash: int = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_hash", hash((self.tp_groups, self.ep_groups,
                                                self.recv_activation, self.recv_gradient,
                                                self.tp_local, self.context_pairs,
                                                self.context_groups)))

    def __hash__(self) -> int:
        return self._hash


@dataclass(frozen=True, slots=True)
class StageGeometry:
    """Distinct replica path combinations and data-parallel group path ids of one stage.

    Hashed once at construction: the planner's caches are keyed by geometries, and a
    stage of many replica combinations would be hashed anew on every lookup."""

    replicas: tuple[ReplicaPaths, ...]
    # d-replica group of each rank j (ZeRO-3, expert sync); with context width c > 1 the
    # d·c group of each (tensor, expert) index (the c context ranks hold the same weights)
    replica_groups: tuple[int, ...]
    dense_groups: tuple[int, ...]  # d·e (c > 1: d·e·c) group of each tensor rank t (dense sync)
    _hash: int = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_hash", hash((self.replicas, self.replica_groups,
                                                self.dense_groups)))

    def __hash__(self) -> int:
        return self._hash


def layout_config(config: IntraConfig) -> IntraConfig:
    """The configuration a rank layout numbers a stage replica by: with context width c the
    context index rides inside the expert digit (ranks j = t_index + t·(c_index + c·e_index)
    number a (t, c·e) replica exactly), so the context ranks sit between the tensor and the
    expert ranks in every layout, as brute force's structured space places them."""
    return config if config.cp == 1 else IntraConfig(config.tp, config.cp * config.ep)


def effective_order(layout: RankLayout, config: IntraConfig, num_stages: int,
                    dp: int) -> tuple[Dim, ...]:
    """The layout's order without radix-1 dimensions: equal orders give equal placements."""
    return _order_without_ones(layout, config.tp > 1, config.ep > 1, num_stages > 1, dp > 1)


@functools.cache
def _order_without_ones(layout: RankLayout, tp: bool, ep: bool, stage: bool,
                        replica: bool) -> tuple[Dim, ...]:
    """:func:`effective_order` by which radices exceed 1 (the planner asks it for 24 layouts
    of every outer choice, millions of times at 10^5 devices)."""
    kept = {Dim.TP: tp, Dim.EP: ep, Dim.STAGE: stage, Dim.REPLICA: replica}
    return tuple(dim for dim in layout.order if kept[dim])


def layout_strides(layout: RankLayout, config: IntraConfig, num_stages: int,
                   dp: int) -> dict[Dim, int]:
    """The weight of each dimension in the layout's mixed-radix positions (innermost 1); with
    a replica block in effect the replica's is r_in's (:func:`replica_box`)."""
    block = layout.block(config, num_stages, dp)
    radix = {Dim.TP: config.tp, Dim.EP: config.ep, Dim.STAGE: num_stages,
             Dim.REPLICA: block if block > 1 else dp}
    strides, weight = {}, 1
    for dim in layout.order:
        strides[dim] = weight
        weight *= radix[dim]
    return strides


def tp_groups_leave_nodes(layout: RankLayout, config: IntraConfig, num_stages: int, dp: int,
                          node_size: int) -> bool:
    """Whether every TP group of the layout has each of its t >= 2 members in its own tier-0
    domain (quality 1, :mod:`nest_cp.dp.node_bounds`), read from the strides alone.

    The t ranks of a TP group sit at positions base + i·σ_T, i < t (mixed-radix positions,
    :func:`layout_strides`; a spare-first offset shifts every position alike).  Every
    device order of the structured space keeps blocks of G_0 consecutive positions whole
    tier-0 domains (the canonical order's ids; :func:`nest_cp.model.plan.digit_device_order`
    reads the slot innermost).  Two members differ by at least σ_T positions, so with
    σ_T >= G_0 no block holds two of them.  False with context width c > 1 (its ranks ride
    in the expert digit, :func:`layout_config`)."""
    if config.tp < 2 or config.cp > 1:
        return False
    return layout_strides(layout, config, num_stages, dp)[Dim.TP] >= node_size


def replica_box(layout: RankLayout, strides: dict[Dim, int], config: IntraConfig,
                num_stages: int, dp: int) -> list[tuple[int, int]]:
    """(stride, count) of the replicas' position offsets: [(σ_R, d)], or with a replica
    block k in effect [(σ_r_in, k), (a·S·k, d / k)] (r_out outermost)."""
    block = layout.block(config, num_stages, dp)
    if block == 1:
        return [(strides[Dim.REPLICA], dp)]
    return [(strides[Dim.REPLICA], block), (config.devices * num_stages * block, dp // block)]


def rank_devices(layout: RankLayout, config: IntraConfig, num_stages: int, dp: int,
                 device_order: np.ndarray, node: int = 1) -> np.ndarray:
    """devices[stage, replica, rank]: the layout's placement as an (S, d, a) array, on
    ``device_order`` (the order the layout reads its positions through; ``node``: the unit
    of its spare-first offset, :meth:`RankLayout.offset`)."""
    return layout.devices(config, num_stages, dp, device_order, node)


def rank_end_devices(layout: RankLayout, config: IntraConfig, num_stages: int, dp: int,
                     device_order: np.ndarray, node: int = 1,
                     stages: np.ndarray | None = None) -> np.ndarray:
    """devices[stage, replica, (rank 0, rank a − 1)]: two columns of :func:`rank_devices`
    (the ranks numbered as :func:`layout_config` numbers them), without placing the ranks
    between; ``stages``: only those stages (rows), every one by default."""
    numbered = layout_config(config)
    order = np.asarray(device_order, dtype=np.int64)
    if stages is None:
        stages = np.arange(num_stages, dtype=np.int64)
    ranks = np.array([0, numbered.devices - 1], dtype=np.int64)
    positions = layout.position(stages[:, None, None],
                                np.arange(dp, dtype=np.int64)[None, :, None],
                                ranks[None, None, :], numbered, num_stages, dp)
    return order[positions + layout.offset(numbered, num_stages, dp, len(order), node)]


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
    return rank_geometries(network, ids, devices, config, wrap)


class LayoutGeometries:
    """:func:`stage_geometries` of the placement of a rank layout on ``device_order``.

    On a tiered network with ``device_order`` its canonical order (device ids 0..N-1), a
    layout read through it (v2's layouts, and v3a's spare-first ones, whose origin, a
    multiple of the node size, only shifts every id: :meth:`_origin`) is computed from the
    layout's strides (module docstring): the replicas' path combinations from a few
    replicas placed with canonical strides (:meth:`_replica_paths`, kept per canonical
    placement: outer choices with other d often share it), the data-parallel groups as
    progressions (:meth:`_data_groups`).  Otherwise (a graph, or a layout of structured
    space v3a read through another device order, whose tier-1 domains are not blocks of
    consecutive positions), or when a replica's path sets do not fit one code, from the
    placement's device array (:meth:`order_of` the layout) — for a v3a layout on a tiered
    network only of the few stages and replicas that stand for all
    (:meth:`_translated`).
    """

    def __init__(self, network: NetworkModel, ids: PathIds, device_order: np.ndarray):
        self.network, self.ids, self.device_order = network, ids, device_order
        self.strided = network.is_hierarchical and np.array_equal(
            device_order, np.arange(network.num_devices))
        self._orders: dict[tuple[int, ...], np.ndarray] = {(): device_order}
        self._translations: dict[tuple[int, ...] | None, int] = {}  # see translation
        self._data_of_layout: dict[tuple, tuple[list, list]] = {}
        self.translated = network.is_hierarchical and network.digit_radices is not None
        if self.strided or self.translated:
            self.groups = _GroupPathCodes(network, ids)
        if self.strided:
            self.period = _period(network)
        self._replicas: dict[tuple, list[tuple[ReplicaPaths, ...]] | None] = {}
        self._data: dict[tuple, tuple[list, list]] = {}
        self._assembled: dict[tuple, tuple[StageGeometry, ...]] = {}
        self._translated_replicas: dict[tuple, tuple[list | None, Callable]] = {}
        self._arrays: dict[tuple, tuple[StageGeometry, ...]] = {}  # the last arrayed one's
        self._tails: dict[tuple, tuple[np.ndarray, list, list]] = {}  # the last node tail's

    def order_of(self, layout: RankLayout) -> np.ndarray:
        """The device order ``layout`` reads its positions through, as an array."""
        if layout.digits not in self._orders:
            self._orders[layout.digits] = np.array(self.network.layout_order(layout),
                                                   dtype=np.int64)
        return self._orders[layout.digits]

    def _strided(self, layout: RankLayout) -> bool:
        """Whether the strides (and an origin) describe the placement: layouts on the
        canonical order, spare nodes last (v2's) or first."""
        return self.strided and not layout.digits

    def _origin(self, layout: RankLayout, config: IntraConfig, num_stages: int,
                dp: int) -> int:
        """The first position of a strided layout modulo the period: shifting every id by
        a multiple of the period keeps every residue and difference, so every tier and k
        (:meth:`_canonical`)."""
        return layout.offset(config, num_stages, dp, self.network.num_devices,
                             self.network.node_size) % self.period

    def __call__(self, layout: RankLayout, config: IntraConfig, num_stages: int, dp: int,
                 wrap: bool = False) -> list[StageGeometry]:
        if config.cp > 1:  # from the device array (context parallelism has no strided form)
            devices = rank_devices(layout, layout_config(config), num_stages, dp,
                                   self.order_of(layout), self.network.node_size)
            if self.network.is_hierarchical:
                return tiered_context_geometries(self.network, self.ids, devices, config,
                                                 wrap)
            return rank_geometries(self.network, self.ids, devices, config, wrap)
        if layout.ends_gathered(config, num_stages, dp) and self.strided and self.translated:
            gathered = self._gathered_geometries(config, num_stages, dp, wrap)
            if gathered is not None:
                return list(gathered)
        if layout.tailed(config, num_stages, dp) and self.strided:
            tailed = self._tail_geometries(layout, config, num_stages, dp, wrap)
            if tailed is not None:
                return list(tailed)
        if layout.arrayed(config, num_stages, dp):
            return list(self._array_geometries(layout, config, num_stages, dp, wrap))
        if self._strided(layout) and layout.block(config, num_stages, dp) == 1:
            strides = layout_strides(layout, config, num_stages, dp)
            radix = {Dim.TP: config.tp, Dim.EP: config.ep, Dim.STAGE: num_stages,
                     Dim.REPLICA: dp}
            canonical = {dim: self._canonical(strides[dim]) if radix[dim] > 1 else 0
                         for dim in radix}
            origin = self._origin(layout, config, num_stages, dp)
            replica_key, replicas = self._replica_paths(canonical, strides[Dim.REPLICA],
                                                        config, num_stages, dp, wrap, origin)
            if replicas is not None:
                data_key, data = self._data_groups(canonical, strides, config, num_stages, dp,
                                                   origin)
                key = (replica_key, data_key)
                if key not in self._assembled:
                    self._assembled[key] = tuple(_assembled(replicas, *data))
                return list(self._assembled[key])
        if self.translated:
            translated = self._translated(layout, config, num_stages, dp, wrap)
            if translated is not None:
                return list(translated)
        devices = rank_devices(layout, config, num_stages, dp, self.order_of(layout),
                               self.network.node_size)
        return stage_geometries(self.network, self.ids, devices, config, wrap)

    def data_groups(self, layout: RankLayout, config: IntraConfig, num_stages: int,
                    dp: int) -> tuple[tuple, list, list] | None:
        """The part of :meth:`__call__` a stage's sync depends on, without placing any
        replica: (a key equal for equal groups, per stage the path ids of its d-replica
        groups, per stage those of its d·e groups), equal to the ``replica_groups`` and
        ``dense_groups`` of the geometries :meth:`__call__` returns.  None off the strided
        case (a graph, an order other than the canonical one); for a v3a layout on a tiered
        network from :meth:`_translated_data` (the key: the sets themselves).  None with
        context width c > 1 (its groups are found rank by rank, :meth:`__call__`); a layout
        with a replica block in effect (:meth:`RankLayout.block`) is not strided.  For a
        node tail in effect (:meth:`RankLayout.tailed`) from its geometries
        (:meth:`_array_geometries`), for gathered ends as progressions
        (:meth:`_gathered_data`; the key: the sets themselves), so the planner's sync bound
        needs no device array."""
        if config.cp > 1:
            return None
        if layout.ends_gathered(config, num_stages, dp) and self.translated \
                and not layout.digits:
            replica_sets, dense_sets = self._gathered_data(config, num_stages, dp)
            return (tuple(replica_sets), tuple(dense_sets)), replica_sets, dense_sets
        if layout.tailed(config, num_stages, dp) and self.strided:
            replica_sets, dense_sets = self._tail_parts(layout, config, num_stages, dp)[1:]
            return (tuple(replica_sets), tuple(dense_sets)), replica_sets, dense_sets
        if layout.arrayed(config, num_stages, dp):
            geometries = self._array_geometries(layout, config, num_stages, dp, False)
            replica_sets = [geometry.replica_groups for geometry in geometries]
            dense_sets = [geometry.dense_groups for geometry in geometries]
            return (tuple(replica_sets), tuple(dense_sets)), replica_sets, dense_sets
        if not self._strided(layout) or layout.block(config, num_stages, dp) > 1:
            if not self.translated:
                return None
            replica_sets, dense_sets = self._translated_data(layout, config, num_stages, dp)
            return (tuple(replica_sets), tuple(dense_sets)), replica_sets, dense_sets
        strides = layout_strides(layout, config, num_stages, dp)
        radix = {Dim.TP: config.tp, Dim.EP: config.ep, Dim.STAGE: num_stages,
                 Dim.REPLICA: dp}
        canonical = {dim: self._canonical(strides[dim]) if radix[dim] > 1 else 0
                     for dim in radix}
        key, (replica_sets, dense_sets) = self._data_groups(
            canonical, strides, config, num_stages, dp,
            self._origin(layout, config, num_stages, dp))
        return key, replica_sets, dense_sets

    def _gathered_data(self, config: IntraConfig, num_stages: int,
                       dp: int) -> tuple[list, list]:
        """Per stage, the path ids of the d-replica and d·e groups of gathered ends in
        effect (canonical order, spare last), without the device array: replica r of stage
        s has rank j at position start_s + stride_s·r + j
        (:func:`~nest_cp.model.plan.gathered_end_starts`), and the EP members of a rank
        sit at stride t (j = t_index + t·e_index), so every group is a box of positions
        (:meth:`_GroupPathCodes.of_positions`)."""
        start, strides = gathered_end_starts(config, num_stages, dp)
        first = start[:, None] + np.arange(config.devices, dtype=np.int64)[None, :]
        replica_ids = np.zeros(first.shape, dtype=np.int64)
        dense_ids = np.zeros((num_stages, config.tp), dtype=np.int64)
        for stride in np.unique(strides):
            rows = strides == stride
            lowest = first[rows]
            replica_ids[rows] = self.groups.of_positions(
                lowest.ravel(), [(int(stride), dp)], ()).reshape(lowest.shape)
            lowest = first[rows, :config.tp]
            dense_ids[rows] = self.groups.of_positions(
                lowest.ravel(), [(config.tp, config.ep), (int(stride), dp)],
                ()).reshape(lowest.shape)
        return _row_sets(replica_ids), _row_sets(dense_ids)

    def _gathered_geometries(self, config: IntraConfig, num_stages: int, dp: int,
                             wrap: bool) -> tuple[StageGeometry, ...] | None:
        """The stage geometries of gathered ends in effect (canonical order, spare last),
        from a few replicas and stages instead of the whole device array; None when a
        replica's path sets do not fit one code (:func:`_stage_replicas`).

        With a = t·e and P the period (:func:`_period`), rank (s, r, j) sits at b(s, r) + j
        with b(0, r) = a·r, b(S − 1, r) = a·d·(S − 1) + a·r and b(s, r) = a·d + a·(s − 1) +
        a·(S − 2)·r in between (:func:`~nest_cp.model.plan.gathered_end_positions`), and a
        replica's paths (its groups, its receives from the same replica of a neighbouring
        stage, wrapped or not) depend on its ranks' and its senders' positions only through
        their residues modulo P and their differences (module docstring).  Replica r + R,
        R = P / gcd(a, P), has every one of those positions moved by a·R or a·(S − 2)·R,
        multiples of P: the same paths, so replicas r < min(d, R) stand for all.  An inner
        stage 2 <= s <= S − 3 receives from the middle stages s ± 1, at b ∓ a, so it meets
        the paths of stage s + R, moved by a·R: the first, the last, stages 1 and S − 2
        (whose senders include an end stage) and the inner stages 2 .. R + 1 stand for all.
        The data-parallel groups are :meth:`_gathered_data`'s progressions."""
        width = config.devices
        period = self.period // math.gcd(width, self.period)  # R
        replicas = np.arange(min(dp, period), dtype=np.int64)
        last = num_stages - 1
        stages = sorted({0, 1, last - 1, last, *range(2, min(2 + period, last - 1))})
        row = {stage: index for index, stage in enumerate(stages)}
        ranks = np.arange(width, dtype=np.int64)

        first, stride = gathered_end_starts(config, num_stages, dp)

        def placed(of_stages: list[int]) -> np.ndarray:
            stage = np.array(of_stages, dtype=np.int64)[:, None]
            start = first[stage] + stride[stage] * replicas[None, :]
            return start[:, :, None] + ranks[None, None, :]

        computed = _stage_replicas(self.network, self.groups, placed(stages), config,
                                   *_receive_pairs(stages, num_stages, wrap, placed))
        if computed is None:
            return None
        replica_sets, dense_sets = self._gathered_data(config, num_stages, dp)
        return tuple(_assembled(
            [computed[row[stage] if stage in row else row[2 + (stage - 2) % period]]
             for stage in range(num_stages)], replica_sets, dense_sets))

    def _tail_parts(self, layout: RankLayout, config: IntraConfig, num_stages: int,
                    dp: int) -> tuple[np.ndarray, list, list]:
        """(starts[stage, replica], per stage the path ids of its d-replica groups, of its
        d·e groups) of a node tail in effect (:meth:`NodeTail.starts`, canonical order, spare
        last), the groups from the starts alone; the last one kept, as the planner asks for
        the data-parallel groups, then the geometries.

        Every stage replica's a ranks lie in one tier-0 domain (a divides n_0 and its start
        is a multiple of a), so the d-replica group of any rank j of a stage has one member
        in the tier-0 domain of each replica's start, and the d·e group of any tensor rank e
        members there; its least and largest members lie in the tier-0 domains of the least
        and largest start, so in the same domain of every tier as those of rank 0 (tensor
        rank 0): every j (every tensor rank) of a stage has the tier and the k of rank 0's
        group (tensor rank 0's), the one group priced here."""
        key = (layout, config, num_stages, dp)
        if key not in self._tails:
            starts = layout.node_tail.starts(config, num_stages, dp)
            no_groups = [()] * num_stages
            replica_sets = _row_sets(self.groups.of(starts[:, :, None], 1)) \
                if dp > 1 else no_groups
            dense_sets = no_groups
            if dp * config.ep > 1:
                members = starts[:, :, None] + config.tp * np.arange(config.ep)[None, None, :]
                dense_sets = _row_sets(self.groups.of(
                    members.reshape(num_stages, dp * config.ep, 1), 1))
            self._tails = {key: (starts, replica_sets, dense_sets)}
        return self._tails[key]

    def _tail_geometries(self, layout: RankLayout, config: IntraConfig, num_stages: int,
                         dp: int, wrap: bool) -> tuple[StageGeometry, ...] | None:
        """The stage geometries of a node tail in effect, from a few replicas instead of the
        whole device array; None when a replica's path sets do not fit one code.

        Replica r's head stages sit at h_r + a·s + j (h_r its run's start), its m tail
        stages in one tier-0 domain at n_0·(its tail node) + a·(s − r_h) + j
        (:class:`~nest_cp.model.plan.NodeTail`).  Its paths are its groups' and its
        receives': inside its head run they depend on h_r modulo the period P only, and the
        differences (module docstring); in its tail, all in one tier-0 domain at the same
        offsets for every replica, they are the same for every replica; the receive from
        its last head stage into its first tail stage (and with ``wrap`` between its first
        and its last stage) joins two tier-0 domains rank for rank, each stage replica's a
        ranks lying in one (:meth:`_tail_parts`), so every such pair has the tier of the
        two starts.  Replicas equal in h_r modulo P and in those one or two tiers have the
        same paths on every stage: one of each such class is placed."""
        starts, replica_sets, dense_sets = self._tail_parts(layout, config, num_stages, dp)
        head = layout.node_tail.packing(config, num_stages, dp)[0]
        last = num_stages - 1
        columns = [starts[0] % self.period,
                   self.network.tier_of_pairs(starts[head - 1], starts[head])]
        if wrap:
            columns.append(self.network.tier_of_pairs(starts[0], starts[last]))
        _, kept = np.unique(np.stack([np.asarray(column, dtype=np.int64)
                                      for column in columns], axis=1),
                            axis=0, return_index=True)
        devices = starts[:, np.sort(kept), None] \
            + np.arange(config.devices, dtype=np.int64)[None, None, :]
        activation_from, gradient_from = _senders(num_stages, wrap)
        replicas = _stage_replicas(self.network, self.groups, devices, config,
                                   _sender_devices(devices, activation_from),
                                   _sender_devices(devices, gradient_from))
        if replicas is None:
            return None
        return tuple(_assembled(replicas, replica_sets, dense_sets))

    def _array_geometries(self, layout: RankLayout, config: IntraConfig, num_stages: int,
                          dp: int, wrap: bool) -> tuple[StageGeometry, ...]:
        """The stage geometries of a layout whose node tail or gathered ends are in effect,
        from its whole device array (the head blocks and the tails' nodes, the two
        replica-inner end stages around stage-inner middle ones, have no stride form); the
        last one kept, as the planner asks for the data-parallel groups, then the
        geometries."""
        key = (layout, config, num_stages, dp, wrap)
        if key not in self._arrays:
            devices = rank_devices(layout, config, num_stages, dp, self.order_of(layout),
                                   self.network.node_size)
            self._arrays = {key: tuple(stage_geometries(self.network, self.ids, devices,
                                                        config, wrap))}
        return self._arrays[key]

    def translation(self, layout: RankLayout) -> int:
        """T, a translation of positions that changes no cost.

        Write a position as its slot (p mod n_0) and P = p // n_0, a mixed-radix number
        whose digits, read from 1 (innermost) to L − 1, are the indices of the tiers in
        the layout's device order (:func:`nest_cp.model.plan.digit_device_order`).  Two
        positions lie in one tier-k domain iff P and Q agree on the set D_k of digits of
        the tiers above k (in one tier-0 domain iff P = Q).  Add c = w_j (the weight of
        digit j) times any integer to both, both staying < N: digits below j do not change,
        and the carry into digit i >= j depends only on digits j .. i − 1.  If for every k
        the digits of D_k from j on are j, j + 1, ..., m (a run starting at j, or none),
        the carries into the digits of D_k are equal for P and Q whenever they agree on
        D_k, so every agreement is kept, and with it every pair's tier, every group's tier
        and its members per tier-0 domain (blocks of n_0 positions, T a multiple of n_0).
        T = n_0·w_j for the least such j (j = L − 1 always qualifies: N / n_top); e.g. 021
        on three tiers: j = 1, T = n_0 (any whole-node shift).  Kept per device order (the
        planner asks for it for every layout of every outer choice)."""
        found = self._translations.get(layout.digits)
        if found is None:
            found = self._translations[layout.digits] = self._fresh_translation(layout)
        return found

    def _fresh_translation(self, layout: RankLayout) -> int:
        """:meth:`translation` computed afresh."""
        radices = self.network.digit_radices
        read = (0, *(layout.digits or range(1, len(radices))))  # tier of each digit
        index_of = {tier: index for index, tier in enumerate(read)}
        agreements = [{index_of[tier] for tier in range(k + 1, len(radices))}
                      for k in range(len(radices) - 1)]
        weight = radices[0]
        for digit in range(1, len(radices)):
            if all(sorted(d for d in agree if d >= digit)
                   == list(range(digit, digit + sum(d >= digit for d in agree)))
                   for agree in agreements):
                return weight
            weight *= radices[read[digit]]
        return weight

    def _translated_positions(self, layout: RankLayout, config: IntraConfig,
                              num_stages: int, dp: int) -> tuple[dict[Dim, int], int, int]:
        """(strides, offset, T) of a v3a layout: rank (s, r, j) sits at position offset +
        s·σ_S + r·σ_R + (its rank offset), read through the layout's device order."""
        strides = layout_strides(layout, config, num_stages, dp)
        offset = layout.offset(config, num_stages, dp, self.network.num_devices,
                               self.network.node_size)
        return strides, offset, self.translation(layout)

    def _representative_stages(self, stage_stride: int, translation: int, num_stages: int,
                               period: int | None = None
                               ) -> tuple[list[int], Callable[[int], int]]:
        """The stages that stand for all: the first, the last and the inner stages 1 .. p,
        p = T / gcd(σ_S, T): inner stage s and s + p are translates by a multiple of T with
        their neighbours (:meth:`translation`); and the map stage -> its row among them.
        ``period``: a p that also serves (a divisor of it), for the replicas' path
        combinations (:func:`_inner_stage_period`), not the data-parallel groups."""
        if period is None:
            period = translation // math.gcd(stage_stride, translation)
        stages = sorted({0, num_stages - 1, *range(1, min(period, num_stages - 2) + 1)})
        row = {stage: index for index, stage in enumerate(stages)}
        return stages, lambda stage: row[stage if stage in row else 1 + (stage - 1) % period]

    def _translated(self, layout: RankLayout, config: IntraConfig, num_stages: int, dp: int,
                    wrap: bool) -> tuple[StageGeometry, ...] | None:
        """The stage geometries of a v3a layout on a tiered network, from few replicas.

        Replica r's ranks and the ranks it receives from lie at positions r·σ_R from
        replica 0's, so replicas r and r + T / gcd(σ_R, T) are translates by a multiple of
        T and meet the same paths (:meth:`translation`); with a replica block, at
        r_in·σ_in + r_out·σ_out, the same along each of the two (:func:`replica_box`); stages as
        :meth:`_representative_stages`.  Their path combinations are computed from the
        devices of those few replicas and stages, the data-parallel groups (all d replicas)
        of those stages by :meth:`_translated_data`.  None when the path sets do not fit one
        code (:func:`_stage_replicas`)."""
        strides, offset, translation = self._translated_positions(layout, config,
                                                                  num_stages, dp)
        box = replica_box(layout, strides, config, num_stages, dp)
        if len(box) > 1:  # a replica block: representatives along r_in and r_out, uncached
            computed, row_of = self._blocked_replicas(layout, config, num_stages, wrap,
                                                      strides, offset, translation, box)
        else:
            replicas = min(dp, translation // math.gcd(strides[Dim.REPLICA], translation))
            replica_stride = _class_stride(translation, strides[Dim.REPLICA], replicas)
            key = (layout.digits, config, num_stages, wrap, offset, replicas, replica_stride,
                   strides[Dim.STAGE], strides[Dim.TP], strides[Dim.EP])
            if key not in self._translated_replicas:
                if len(self._translated_replicas) >= DATA_KEPT:
                    self._translated_replicas.clear()
                self._translated_replicas[key] = self._fresh_translated_replicas(
                    layout, config, num_stages, wrap, strides, offset, translation, replicas,
                    replica_stride)
            computed, row_of = self._translated_replicas[key]
        if computed is None:
            return None
        replica_sets, dense_sets = self._translated_data(layout, config, num_stages, dp)
        return tuple(_assembled([computed[row_of(stage)] for stage in range(num_stages)],
                                replica_sets, dense_sets))

    def _blocked_replicas(self, layout: RankLayout, config: IntraConfig, num_stages: int,
                          wrap: bool, strides: dict[Dim, int], offset: int, translation: int,
                          box: list[tuple[int, int]]) -> tuple[list | None, Callable]:
        """:meth:`_translated`'s path combinations under a replica block: along each of r_in
        and r_out the replicas repeat every T / gcd(stride, T) (:func:`replica_box`), so
        that many along each stand for all; stages as :meth:`_representative_stages`."""
        replicas = np.zeros(1, dtype=np.int64)  # offsets of the representative replicas
        for stride, count in box:
            kept = min(count, translation // math.gcd(stride, translation))
            replicas = (replicas[None, :] + stride * np.arange(kept)[:, None]).ravel()
        stages, row_of = self._representative_stages(strides[Dim.STAGE], translation,
                                                     num_stages)
        offsets = offset + replicas[None, :, None] + _rank_offsets(strides, config)
        return self._placed_paths(layout, config, num_stages, wrap, strides, stages,
                                  offsets), row_of

    def _fresh_translated_replicas(self, layout: RankLayout, config: IntraConfig,
                                   num_stages: int, wrap: bool, strides: dict[Dim, int],
                                   offset: int, translation: int, replicas: int,
                                   replica_stride: int) -> tuple[list | None, Callable]:
        """:meth:`_translated`'s path combinations of the representative stages (and the map
        stage -> row), from ``replicas`` replicas ``replica_stride`` apart
        (:func:`_class_stride`), kept per what they depend on: d only through those two."""
        stages, row_of = self._representative_stages(
            strides[Dim.STAGE], translation, num_stages,
            _inner_stage_period(translation, strides[Dim.STAGE], replica_stride, replicas))
        offsets = offset + replica_stride * np.arange(replicas)[None, :, None] \
            + _rank_offsets(strides, config)
        return self._placed_paths(layout, config, num_stages, wrap, strides, stages,
                                  offsets), row_of

    def _placed_paths(self, layout: RankLayout, config: IntraConfig, num_stages: int,
                      wrap: bool, strides: dict[Dim, int], stages: list[int],
                      offsets: np.ndarray) -> list | None:
        """:func:`_stage_replicas` of ``stages`` with the replicas at ``offsets``."""
        order = self.order_of(layout)

        def placed(of_stages: list[int]) -> np.ndarray:
            return order[strides[Dim.STAGE] * np.array(of_stages, dtype=np.int64)[
                :, None, None] + offsets]

        return _stage_replicas(self.network, self.groups, placed(stages), config,
                               *_receive_pairs(stages, num_stages, wrap, placed))

    def _translated_data(self, layout: RankLayout, config: IntraConfig, num_stages: int,
                         dp: int) -> tuple[list, list]:
        """Per stage, the path ids of the d-replica and d·e groups of a v3a layout, from
        the representative stages (:meth:`_representative_stages`: stage s and s + p place
        every group as a translate by a multiple of T).  A group is a box of positions
        (replica stride σ_R, and for the d·e groups the EP stride); its channel count k is
        counted in positions (tier-0 domains are blocks of n_0 positions), its tier from
        its least and largest device (:meth:`_GroupPathCodes.of_positions`).  Kept for
        the last few layouts: the planner asks for them, then for the geometries."""
        key = (layout, config, num_stages, dp)
        if key in self._data_of_layout:
            return self._data_of_layout[key]
        strides, offset, translation = self._translated_positions(layout, config,
                                                                  num_stages, dp)
        stages, row_of = self._representative_stages(strides[Dim.STAGE], translation,
                                                     num_stages)
        first = offset + strides[Dim.STAGE] * np.array(stages, dtype=np.int64)[:, None] \
            + _rank_offsets(strides, config)[None, :]  # [row, j]: replica 0's positions

        def path_ids(lowest: np.ndarray, box: list[tuple[int, int]]) -> np.ndarray:
            """Each group's path id, computed once per residue of its least position
            modulo T, from the group at that residue (groups of one residue are
            translates by multiples of T, and the group at the residue lies within the
            others' positions), so that layouts and outer choices share them."""
            residues, inverse = np.unique(lowest % translation, return_inverse=True)
            ids = self.groups.of_positions(residues, box, layout.digits)
            return ids[inverse.reshape(lowest.shape)]

        no_groups = [()] * len(stages)
        replicas = replica_box(layout, strides, config, num_stages, dp)
        replica_sets = _row_sets(path_ids(first, replicas)) if dp > 1 else no_groups
        dense_sets = _row_sets(path_ids(
            first[:, :config.tp], [(strides[Dim.EP], config.ep), *replicas])) \
            if dp * config.ep > 1 else no_groups
        found = ([replica_sets[row_of(stage)] for stage in range(num_stages)],
                 [dense_sets[row_of(stage)] for stage in range(num_stages)])
        if len(self._data_of_layout) >= DATA_KEPT:
            self._data_of_layout.clear()
        self._data_of_layout[key] = found
        return found

    def _canonical(self, stride: int) -> int:
        """A stride of the same residue modulo the period, no larger, and at least the period
        if it is: ids built with it have the same residues, and every difference it makes is
        the same below the period and stays at least the period above it, so every tier and
        k is the same (no domain that separates devices is larger than the period, and a
        group whose members lie a period or more apart has one per tier-0 domain)."""
        return stride if stride < self.period else self.period + stride % self.period

    def _canonical_box(self, box: list[tuple[int, int]]) -> tuple[tuple[int, int], ...]:
        """A box of (stride, count) whose groups have the tier and k of ``box``'s from any
        first member (modulo the period) and no larger a span: a single progression made
        canonical (:meth:`_canonical_progression`), a wider box as it is."""
        merged = _merged_box(box)
        if len(merged) > 1:
            return tuple(merged)
        return (self._canonical_progression(*merged[0]),)

    def _canonical_progression(self, stride: int, count: int) -> tuple[int, int]:
        """(stride, count) of a progression whose groups have the tier and k of those of
        (``stride``, ``count``) from every first member, no longer than them.

        The stride is :meth:`_canonical`.  At least G_0 apart, members have a tier-0 domain
        each (k = 1), and the tier only depends on the span while it is below the period:
        the count is cut to the least whose span reaches the period.  Closer, with
        :func:`_progression_fewest`'s notation, once the span reaches (period_q + 2)·G_0 (and
        the period) every first member sees the first domain full up to its start, a whole
        period of inner domains, and a last domain holding 1 + ⌊r / stride⌋ members, r the
        last member's offset in it, which repeats when the count grows by G_0 / gcd(stride,
        G_0): the count is reduced modulo that above the threshold.
        """
        stride, domain = self._canonical(stride), self.groups.domain_size
        if stride >= domain:
            return stride, min(count, 1 + -(-self.period // stride))
        common = math.gcd(stride, domain)
        threshold = 1 + -(-max((stride // common + 2) * domain, self.period) // stride)
        if count < threshold:
            return stride, count
        return stride, threshold + (count - threshold) % (domain // common)

    def _replica_paths(self, canonical: dict[Dim, int], replica_stride: int,
                       config: IntraConfig, num_stages: int, dp: int, wrap: bool,
                       origin: int = 0
                       ) -> tuple[tuple, list[tuple[ReplicaPaths, ...]] | None]:
        """Per stage, the distinct path combinations of its replicas (None: too many paths
        for one code), from replicas r < period / gcd(replica stride, period) placed with
        the ``canonical`` strides (:meth:`_canonical`; the replica stride
        :func:`_class_stride`); kept per canonical placement, which is returned first (as
        the key): outer choices whose d and layout differ often place alike."""
        replicas = min(dp, self.period // math.gcd(replica_stride, self.period))
        strides = {**canonical, Dim.REPLICA: _class_stride(
            self.period, canonical[Dim.REPLICA], replicas) if replicas > 1 else 0}
        key = (config, num_stages, replicas, wrap, tuple(strides.values()), origin)
        if key not in self._replicas:
            self._replicas[key] = self._fresh_replica_paths(strides, config, num_stages,
                                                            replicas, wrap, origin)
        return key, self._replicas[key]

    def _fresh_replica_paths(self, strides: dict[Dim, int], config: IntraConfig,
                             num_stages: int, replicas: int, wrap: bool,
                             origin: int = 0) -> list[tuple[ReplicaPaths, ...]] | None:
        """:meth:`_replica_paths`, from a few stages: an inner stage s (neither first nor
        last) is placed at s·(stage stride) and receives from its neighbours a stage stride
        away, so it only depends on s modulo :func:`_inner_stage_period` (at most
        period / gcd(stage stride, period)); the first and last stage, and the inner stages
        1 .. that period, stand for all."""
        stages, row_of = self._representative_stages(
            strides[Dim.STAGE], self.period, num_stages,
            _inner_stage_period(self.period, strides[Dim.STAGE], strides[Dim.REPLICA],
                                replicas))
        offsets = origin + strides[Dim.REPLICA] * np.arange(replicas)[None, :, None] \
            + _rank_offsets(strides, config)

        def placed(of_stages: list[int]) -> np.ndarray:
            return strides[Dim.STAGE] * np.array(of_stages, dtype=np.int64)[:, None, None] \
                + offsets

        if replicas > 1 and len(stages) > 3:  # two inner stages or more
            computed = self._by_residue(strides, config, num_stages, replicas, wrap, origin,
                                        stages, placed)
        else:
            computed = _stage_replicas(self.network, self.groups, placed(stages), config,
                                       *_receive_pairs(stages, num_stages, wrap, placed))
        if computed is None:
            return None
        return [computed[row_of(stage)] for stage in range(num_stages)]

    def _by_residue(self, strides: dict[Dim, int], config: IntraConfig, num_stages: int,
                    replicas: int, wrap: bool, origin: int, stages: list[int],
                    placed: Callable[[list[int]], np.ndarray]
                    ) -> list[tuple[ReplicaPaths, ...]] | None:
        """:func:`_stage_replicas` of ``stages`` (the first, the last and inner ones), each
        replica of an inner stage placed once per residue of its first position modulo the
        period.  Replica r of inner stage s starts at b = origin + s·σ_S + r·σ_R and receives
        from the ranks σ_S before and after its own, so its code depends on b modulo the
        period only (module docstring: residues and differences); one inner replica per
        distinct residue met is placed (where it lies, with its senders), and each inner
        stage reads its replicas' codes back by residue.  The replicas placed are those of
        the stages up to translation by multiples of the period, so the same group paths
        are met and the codes (their bits index those paths) are those
        :func:`_stage_replicas` gives."""
        period, stage_stride = self.period, strides[Dim.STAGE]
        last = num_stages - 1
        inner = np.array(stages[1:-1], dtype=np.int64)
        starts = origin + stage_stride * inner[:, None] \
            + strides[Dim.REPLICA] * np.arange(replicas)[None, :]
        _, first, inverse = np.unique(starts % period, return_index=True,
                                      return_inverse=True)
        inverse = inverse.reshape(starts.shape)
        at_residues = starts.ravel()[first][:, None] + _rank_offsets(strides, config)[None, :]
        length = max(replicas, len(first))

        def padded(devices: np.ndarray) -> np.ndarray:  # repeats of a replica: same codes
            return np.concatenate([devices, np.repeat(devices[-1:], length - len(devices),
                                                      axis=0)])

        rows = [padded(placed([0])[0]), padded(at_residues), padded(placed([last])[0])]
        activation_from, gradient_from = _senders(num_stages, wrap)
        receives = []
        for sender_of, step in ((activation_from, -stage_stride), (gradient_from, stage_stride)):
            ends = [(row, sender_of[stage]) for row, stage in ((0, 0), (2, last))
                    if sender_of[stage] is not None]
            receivers = [row for row, _ in ends] + [1]
            sources = [padded(placed([sender])[0]) for _, sender in ends] \
                + [padded(at_residues + step)]
            receives.append((receivers, np.stack(sources)))
        coded = _replica_codes(self.network, self.groups, np.stack(rows), config, *receives)
        if coded is None:
            return None
        codes, decode = coded
        return decode(np.concatenate([codes[0, None, :replicas], codes[1][inverse],
                                      codes[2, None, :replicas]]))

    def _data_groups(self, canonical: dict[Dim, int], strides: dict[Dim, int],
                     config: IntraConfig, num_stages: int, dp: int,
                     origin: int = 0) -> tuple[tuple, tuple[list, list]]:
        """Per stage, the path ids of its d-replica groups (one per rank j: the progression
        from replica 0's device by the replica stride) and of its d·e groups (one per tensor
        rank t: the box of the EP and replica strides), as :func:`_row_sets`; from first
        members placed with the ``canonical`` strides and canonical boxes
        (:meth:`_canonical_box`), kept per those, which are returned first (as the key)."""
        replica_box = self._canonical_box([(strides[Dim.REPLICA], dp)]) if dp > 1 else None
        dense_box = self._canonical_box([(strides[Dim.EP], config.ep),
                                         (strides[Dim.REPLICA], dp)]) \
            if dp * config.ep > 1 else None
        key = (config, num_stages, canonical[Dim.STAGE], canonical[Dim.TP], canonical[Dim.EP],
               replica_box, dense_box, origin)
        if key not in self._data:
            first = origin + canonical[Dim.STAGE] * np.arange(num_stages)[:, None] \
                + _rank_offsets(canonical, config)  # [s, j]: replica 0's devices
            no_groups = [()] * num_stages
            replica_sets = _row_sets(self.groups.of_box(first, replica_box)) \
                if replica_box else no_groups
            if config.ep == 1 and dense_box == replica_box:  # the same groups
                dense_sets = replica_sets
            else:
                dense_sets = _row_sets(self.groups.of_box(first[:, :config.tp], dense_box)) \
                    if dense_box else no_groups
            self._data[key] = (replica_sets, dense_sets)
        return key, self._data[key]


def _class_stride(modulus: int, replica_stride: int, replicas: int) -> int:
    """A replica stride that places the replicas' first positions on the same residues
    modulo ``modulus`` (M) as ``replica_stride`` (σ_R) does, for ``replicas`` = min(d,
    M / gcd(σ_R, M)) replicas: g = gcd(σ_R, M) when they are all M / g (r·σ_R modulo M,
    r < M / g, is then every multiple of g, as r·g is), else σ_R.  With it the placement
    no longer depends on d or σ_R beyond g, so outer choices share it; the replicas are
    placed in another order, and the planner reads each stage's replicas as a set.  The
    positions stay within those of the original replicas (g <= σ_R)."""
    coset = math.gcd(replica_stride, modulus)
    return coset if replicas == modulus // coset else replica_stride


def _inner_stage_period(modulus: int, stage_stride: int, replica_stride: int,
                        replicas: int) -> int:
    """p such that inner stages s and s + p have the same set of replica path combinations,
    when the replicas' paths depend on their first position only modulo ``modulus`` (M: the
    period, or a layout's translation T) and ``replicas`` = min(d, M / gcd(σ_R, M)) of them
    are placed (σ_R the replica stride; 0 with one replica).

    Replica r of inner stage s (its ranks and the neighbours it receives from, a stage
    stride away) is replica 0 of stage 0 moved by s·σ_S + r·σ_R, so its paths depend only
    on b = s·σ_S + r·σ_R modulo M.  Always p = M / gcd(σ_S, M) (then s·σ_S ≡ (s + p)·σ_S).
    When the replicas placed are all of M / g, g = gcd(σ_R, M), the values r·σ_R modulo M
    are every multiple of g (σ_R / g is prime to M / g), so stage s meets b over the whole
    class s·σ_S + gℤ modulo M: a set that depends on s·σ_S modulo g alone, so p = g /
    gcd(σ_S, g), which divides the first (often 1: every inner stage alike)."""
    coset = math.gcd(replica_stride, modulus)
    if replicas == modulus // coset:
        modulus = coset
    return modulus // math.gcd(stage_stride, modulus)


def _rank_offsets(strides: dict[Dim, int], config: IntraConfig) -> np.ndarray:
    """offsets[j]: intra-stage rank j = t + tp·e at t·(TP stride) + e·(EP stride)."""
    return (strides[Dim.TP] * np.arange(config.tp)[None, :]
            + strides[Dim.EP] * np.arange(config.ep)[:, None]).ravel()


def fastest_group_paths(network: NetworkModel, group_size: int) -> tuple[Path, ...]:
    """On a tiered network, the fastest path each tier can give a group of ``group_size``
    distinct devices (group_size >= 2): for every tier whose domains hold that many.

    A group spanning tier K >= 1 touches two tier-0 domains at least, so it has at most
    min(group_size // 2, G_0) members in the one it has fewest in, and its path
    (cost model §5 a) is at most as fast as :meth:`NetworkModel.channel_path` with that
    many channels: no collective over such a group costs less than on one of these paths.
    Kept per network and size (the planner's bounds ask for them on every outer choice).
    """
    known = _fastest_by_size(network)
    if group_size not in known:  # no cap on the members per node beyond its size G_0
        known[group_size] = capped_group_paths(network, group_size,
                                               network.cluster.network.domain_sizes()[0])
    return known[group_size]


@functools.lru_cache(maxsize=16)
def _fastest_by_size(network: NetworkModel) -> dict[int, tuple[Path, ...]]:
    """The table :func:`fastest_group_paths` fills for ``network`` (the last few kept)."""
    return {}


def _receive_pairs(stages: list[int], num_stages: int, wrap: bool, placed) -> list[tuple]:
    """For the activation and then the gradient: the indices in ``stages`` of the stages
    that receive one, and ``placed`` (stages -> device array) of their senders."""
    pairs = []
    for senders in _senders(num_stages, wrap):
        receivers = [index for index, stage in enumerate(stages) if senders[stage] is not None]
        pairs.append((receivers, placed([senders[stages[index]] for index in receivers])))
    return pairs


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


def _progression_fewest(start: np.ndarray, stride: int, count: int,
                        domain_size: int) -> np.ndarray:
    """k of each group {start + i·stride : i < count} (count >= 2), elementwise over
    ``start``: its fewest members in one tier-0 domain (size G_0) it touches, in closed form.

    With stride >= G_0 every member has a domain of its own (k = 1).  Otherwise, with
    start reduced modulo G_0, the group touches domains q = 0..Q, Q = ⌊(start + (count − 1)·
    stride) / G_0⌋, every one (consecutive members are closer than G_0), and domain q holds

        c(q) = min(count, ⌈((q + 1)·G_0 − start) / stride⌉) − max(0, ⌈(q·G_0 − start) / stride⌉)

    members.  For 0 < q < Q neither clip applies, and shifting q by stride / gcd(stride, G_0)
    shifts both bounds by a whole number of members, so c repeats with that period there:
    k is the least c over q = 0, Q and the first period's worth of q in between.
    """
    start = np.asarray(start, dtype=np.int64)
    if stride >= domain_size:
        return np.ones(start.shape, dtype=np.int64)
    start = start % domain_size
    last = (start + (count - 1) * stride) // domain_size  # Q
    period = stride // math.gcd(stride, domain_size)
    ends = last[..., None]
    domains = np.concatenate((np.minimum(np.arange(period + 1), ends), ends), axis=-1)
    offsets = start[..., None]
    members = np.minimum(count, -((offsets - (domains + 1) * domain_size) // stride)) \
        - np.maximum(0, -((offsets - domains * domain_size) // stride))
    return members.min(axis=-1)


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
        self._box_channels: dict[tuple, np.ndarray] = {}  # see _channels_of_box
        self._position_ids: dict[tuple, dict[int, int]] = {}  # see of_positions
        self._positions_kept = 0  # entries of the dicts of _position_ids

    def of(self, devices: np.ndarray, axis: int) -> np.ndarray:
        """The path id of the group along ``axis`` (one group per remaining index)."""
        tiers = np.asarray(self.network.tier_of_pairs(devices.min(axis=axis),
                                                      devices.max(axis=axis)), dtype=np.int64)
        channels = _fewest_per_domain(devices, axis, self.domain_size) \
            if self.stride > 1 else None  # some tier runs faster with more channels
        return self._ids_of(tiers, channels)

    def of_box(self, lowest: np.ndarray, box: list[tuple[int, int]]) -> np.ndarray:
        """The path id of each group {lowest + Σ_i x_i·stride_i : x_i < count_i}, elementwise
        over ``lowest``, for a ``box`` of (stride, count) of a mixed-radix layout (each
        stride at least the span of the smaller ones, so ``lowest`` is the least member).

        Dimensions that continue one another (stride = the smaller one's stride × count) are
        one progression; a single progression gets k in closed form
        (:func:`_progression_fewest`), a wider box from its members, once per distinct
        residue of ``lowest`` modulo G_0 (k depends on nothing else).
        """
        lowest = np.asarray(lowest, dtype=np.int64)
        box = _merged_box(box)
        span = sum((count - 1) * stride for stride, count in box)
        tiers = np.asarray(self.network.tier_of_pairs(lowest, lowest + span), dtype=np.int64)
        channels = None
        if self.stride > 1 and len(box) == 1:
            channels = _progression_fewest(lowest, *box[0], self.domain_size)
        elif self.stride > 1:
            channels = self._channels_of_box(tuple(box))[lowest % self.domain_size]
        return self._ids_of(tiers, channels)

    def of_positions(self, lowest: np.ndarray, box: list[tuple[int, int]],
                     digits: tuple[int, ...]) -> np.ndarray:
        """:meth:`of_box` for groups of positions read through the device order of
        ``digits`` (:func:`nest_cp.model.plan.digit_device_order`), whose blocks of G_0
        positions are whole tier-0 domains: k is counted on the positions as :meth:`of_box`
        does, the tier by :func:`_digit_tiers`.  Kept per (box, digits, least position) (at
        most ``POSITIONS_KEPT`` before clearing): the planner asks for the groups of many
        layouts and outer choices, most of them met before, and a few lookups cost less
        than the few vectorised steps on small arrays."""
        lowest = np.asarray(lowest, dtype=np.int64)
        box = tuple(_merged_box(box))
        known = self._position_ids.get((box, digits))
        if known is None:
            known = self._position_ids[box, digits] = {}
        flat = lowest.ravel().tolist()
        missing = sorted({position for position in flat if position not in known})
        if missing:
            if self._positions_kept + len(missing) > POSITIONS_KEPT:
                self._position_ids.clear()
                self._positions_kept = 0
                known = self._position_ids[box, digits] = {}
                missing = sorted(set(flat))
            found = self.fresh_positions(np.array(missing, dtype=np.int64), list(box), digits)
            known.update(zip(missing, found.tolist()))
            self._positions_kept += len(missing)
        return np.array([known[position] for position in flat],
                        dtype=np.int64).reshape(lowest.shape)

    def fresh_positions(self, lowest: np.ndarray, box: list[tuple[int, int]],
                        digits: tuple[int, ...]) -> np.ndarray:
        """:meth:`of_positions` computed afresh (vectorised over ``lowest``)."""
        lowest = np.asarray(lowest, dtype=np.int64)
        box = _merged_box(box)
        radices = self.network.digit_radices
        tiers = _digit_tiers(lowest, box, radices,
                             (0, *(digits or range(1, len(radices)))))
        channels = None
        if self.stride > 1 and len(box) == 1:
            channels = _progression_fewest(lowest, *box[0], self.domain_size)
        elif self.stride > 1:
            channels = self._channels_of_box(tuple(box))[lowest % self.domain_size]
        return self._ids_of(tiers, channels)

    def _channels_of_box(self, box: tuple[tuple[int, int], ...]) -> np.ndarray:
        """k of the group {p + Σ_i x_i·stride_i : x_i < count_i} of a merged ``box``
        (:func:`_merged_box`, two dimensions or more) for each residue p modulo G_0, as an
        array indexed by it: tier-0 domains are blocks of G_0 ids (positions), so k only
        depends on the least member modulo G_0.  Kept per box (the last ``BOXES_KEPT``): the
        planner meets a box again for other layouts and outer choices."""
        found = self._box_channels.get(box)
        if found is None:
            members = np.zeros(1, dtype=np.int64)
            for stride, count in box:
                members = (members[None, :] + stride * np.arange(count)[:, None]).ravel()
            members.sort()
            residues = np.arange(self.domain_size, dtype=np.int64)
            found = _fewest_per_domain(residues[:, None] + members[None, :], 1,
                                       self.domain_size)
            if len(self._box_channels) >= BOXES_KEPT:
                self._box_channels.clear()
            self._box_channels[box] = found
        return found

    def _ids_of(self, tiers: np.ndarray, channels: np.ndarray | None) -> np.ndarray:
        """Path ids of groups spanning ``tiers`` with ``channels`` members at least in every
        tier-0 domain they touch (None: no tier has more than one useful channel)."""
        codes = tiers * self.stride
        if channels is not None:
            codes = codes + np.minimum(channels, self.useful[tiers]) - 1
        fresh = self._path_ids[codes] < 0
        if not fresh.any():  # every code met before (the common case)
            return self._path_ids[codes]
        for code in np.unique(codes[fresh]).tolist():
            tier, channels = divmod(code, self.stride)
            self._path_ids[code] = self.ids.id_of(self.network.channel_path(tier, channels + 1))
        return self._path_ids[codes]


def _digit_tiers(lowest: np.ndarray, box: list[tuple[int, int]], radices: tuple[int, ...],
                 read: tuple[int, ...]) -> np.ndarray:
    """The tier of each group {lowest + Σ_i x_i·stride_i : x_i < count_i} of positions
    read through a device order: ``read[i]`` is the tier whose index read digit i holds
    (read[0] = 0, the slot), W_i = ∏_{j<i} radices[read[j]] its weight.

    The group lies in one tier-k domain iff its members agree on D_k, the digits of the
    tiers above k, and its tier is the number of k < L − 1 for which it does not (as
    :meth:`NetworkModel.tier_of_pairs` counts the domains separating two ids).  Split D_k
    into its top run [m, L − 1] (the longest run of outermost digits inside D_k) and the
    rest.  Agreement on the top run is floor(p / W_m) being equal, and every member lies
    between the least and the largest, lowest and lowest + span, with floor monotone: it
    holds iff it holds for those two.  A digit i of the rest only depends on p modulo
    W_{i+1}, and along each box dimension (x_i·stride_i) mod W_{i+1} repeats with period
    W_{i+1} / gcd(stride_i, W_{i+1}): the members with every x_i below that period take
    every value the group's do, so only they are compared (a single progression in closed
    form, :func:`_arc_leaves_block`).  On the canonical order every D_k is a top run (two
    ids per group); under 021 on three tiers D_1 is the inner digit.
    """
    span = sum((count - 1) * stride for stride, count in box)
    tiers = np.zeros(lowest.shape, dtype=np.int64)
    for top_weight, rest in _digit_levels(radices, read):
        varies = lowest // top_weight != (lowest + span) // top_weight \
            if top_weight is not None else np.zeros(lowest.shape, dtype=bool)
        for weight, modulus, radix in rest:
            if len(box) == 1:
                varies |= _arc_leaves_block(lowest, *box[0], weight, modulus)
                continue
            members = np.zeros(1, dtype=np.int64)
            for stride, count in box:
                kept = min(count, modulus // math.gcd(stride, modulus))
                members = (members[None, :] + stride * np.arange(kept)[:, None]).ravel()
            values = (lowest[..., None] + members) // weight % radix
            varies |= (values != values[..., :1]).any(axis=-1)
        tiers += varies
    return tiers


@functools.lru_cache(maxsize=64)
def _digit_levels(radices: tuple[int, ...], read: tuple[int, ...]
                  ) -> tuple[tuple[int | None, tuple[tuple[int, int, int], ...]], ...]:
    """What :func:`_digit_tiers` compares per level k < L − 1, from the digits alone: W_m
    of the top run of D_k (None when it is empty) and (W_i, W_{i+1}, the radix of digit
    i) of every other digit i of D_k, in increasing i.  Kept per (radices, read): the
    planner asks for it on every group box."""
    size = len(radices)
    weights = [1]
    for tier in read:
        weights.append(weights[-1] * radices[tier])
    index_of = {tier: index for index, tier in enumerate(read)}
    levels = []
    for level in range(size - 1):
        agree = {index_of[tier] for tier in range(level + 1, size)}
        top = size
        while top - 1 >= 1 and top - 1 in agree:
            top -= 1
        rest = tuple((weights[digit], weights[digit + 1], radices[read[digit]])
                     for digit in sorted(agree - set(range(top, size))))
        levels.append((weights[top] if top < size else None, rest))
    return tuple(levels)


def _arc_leaves_block(lowest: np.ndarray, stride: int, count: int, block: int,
                      modulus: int) -> np.ndarray:
    """Whether {lowest + r·stride : r < count} (count >= 2) meets two blocks of ``block``
    residues modulo ``modulus`` (a multiple of ``block``; equal to it: never): whether a
    digit of weight ``block`` and radix modulus / block varies over the progression.

    Modulo M = ``modulus`` the members are an arithmetic progression on a circle of M
    points, c = min(count, M / gcd(stride, M)) of them distinct, each a step s' = min(s,
    M − s) from the last (s = stride mod M), always in the same direction.  The blocks are
    arcs of length B <= M / 2 that do not wrap.  If the c points lie in one block, each step
    moves by s' < B inside it in that direction, so they fill the arc from the first point
    to the last, of length (c − 1)·s', forward (s' = s) or backward; conversely that arc
    holds them all.  So they lie in one block iff that arc's two ends do (an end beyond
    [0, M) lies in no block of the first point's)."""
    step = stride % modulus
    if step == 0 or modulus == block:  # no step, or a radix-1 digit: it never varies
        return np.zeros(np.shape(lowest), dtype=bool)
    distinct = min(count, modulus // math.gcd(step, modulus))
    first = np.asarray(lowest, dtype=np.int64) % modulus
    if step <= modulus - step:
        last = first + (distinct - 1) * step
    else:
        last = first - (distinct - 1) * (modulus - step)
    return first // block != last // block


def _row_sets(values: np.ndarray) -> list[tuple[int, ...]]:
    """The sorted distinct values of each row of a 2-D array; rows of at most 64 values
    through Python sets (the planner's are mostly a few rows of a stage's ranks, where
    numpy's cost per call outweighs the work)."""
    if values.shape[1] <= 64:
        return [tuple(sorted(set(row))) for row in values.tolist()]
    ordered = np.sort(values, axis=1)
    fresh = np.ones(ordered.shape, dtype=bool)
    fresh[:, 1:] = ordered[:, 1:] != ordered[:, :-1]
    return [tuple(row[keep].tolist()) for row, keep in zip(ordered, fresh)]


def _bit_mask(indices: np.ndarray, axis: int) -> np.ndarray:
    """Bitmask of the (small, non-negative) ``indices`` along ``axis``."""
    return np.bitwise_or.reduce(np.left_shift(np.int64(1), indices), axis=axis)


def _merged_box(box: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """``box`` by increasing stride without count-1 dimensions, dimensions that continue
    one another (stride = the previous stride × count) merged into one."""
    merged: list[tuple[int, int]] = []
    for stride, count in sorted(dim for dim in box if dim[1] > 1):
        if merged and merged[-1][0] * merged[-1][1] == stride:
            merged[-1] = (merged[-1][0], merged[-1][1] * count)
        else:
            merged.append((stride, count))
    return merged


def _period(network: NetworkModel) -> int:
    """The least common multiple of the domain sizes below N (1 if none).

    Two ids of one residue modulo it lie at the same offset in every domain that can
    separate devices, so the tier of ids (a, a + δ) and the member counts per tier-0
    domain of a group {a + offsets} spanning tier 1 or more depend on a only through it.
    """
    sizes = [size for size in network.cluster.network.domain_sizes()
             if size < network.num_devices]
    return math.lcm(*sizes) if sizes else 1


def _explicit_data_groups(groups: _GroupPathCodes, devices: np.ndarray,
                          config: IntraConfig) -> tuple[list, list]:
    """Per stage, the path ids of its d-replica and d·e groups from the device array."""
    num_stages, dp, _ = devices.shape
    no_groups = [()] * num_stages
    replica_sets = _row_sets(groups.of(devices, 1)) if dp > 1 else no_groups
    dense_sets = no_groups
    if dp * config.ep > 1:
        by_tensor_rank = devices.reshape(num_stages, dp * config.ep, config.tp)
        dense_sets = _row_sets(groups.of(by_tensor_rank, 1))
    return replica_sets, dense_sets


def _hierarchical_geometries(network: NetworkModel, ids: PathIds, devices: np.ndarray,
                             config: IntraConfig, wrap: bool) -> list[StageGeometry] | None:
    """The stage geometries, vectorised over ranks; None when a replica's path sets do not
    fit one int64 code (more than ``CODE_BITS`` bits), for the rank-by-rank fallback."""
    groups = _GroupPathCodes(network, ids)
    activation_from, gradient_from = _senders(devices.shape[0], wrap)
    replicas = _stage_replicas(network, groups, devices, config,
                               _sender_devices(devices, activation_from),
                               _sender_devices(devices, gradient_from))
    if replicas is None:
        return None
    return _assembled(replicas, *_explicit_data_groups(groups, devices, config))


def _assembled(replicas: list[tuple[ReplicaPaths, ...]], replica_sets: list,
               dense_sets: list) -> list[StageGeometry]:
    """The stage geometries from their parts (equal stages share one object)."""
    known: dict[tuple, StageGeometry] = {}
    geometries = []
    for key in zip(replicas, replica_sets, dense_sets):
        if key not in known:
            known[key] = StageGeometry(*key)
        geometries.append(known[key])
    return geometries


def _sender_devices(devices: np.ndarray, senders: list[int | None]
                    ) -> tuple[list[int], np.ndarray]:
    """The stages with a sender among ``senders`` (per stage of ``devices``) and, for each,
    the sender stage's devices."""
    stages = [stage for stage, sender in enumerate(senders) if sender is not None]
    return stages, devices[[senders[stage] for stage in stages]]


def _stage_replicas(network: NetworkModel, groups: _GroupPathCodes, devices: np.ndarray,
                    config: IntraConfig, activation: tuple[list[int], np.ndarray],
                    gradient: tuple[list[int], np.ndarray]
                    ) -> list[tuple[ReplicaPaths, ...]] | None:
    """Per stage of ``devices[stage, replica, rank]``, the distinct :class:`ReplicaPaths`
    of its replicas, in code order; None when they do not fit one int64 code (more than
    ``CODE_BITS`` bits).  ``activation`` / ``gradient``: the stages that receive them and
    the devices they receive from, rank for rank (:func:`_sender_devices`)."""
    coded = _replica_codes(network, groups, devices, config, activation, gradient)
    if coded is None:
        return None
    codes, decode = coded
    return decode(codes)


def _replica_codes(network: NetworkModel, groups: _GroupPathCodes, devices: np.ndarray,
                   config: IntraConfig, activation: tuple[list[int], np.ndarray],
                   gradient: tuple[list[int], np.ndarray]) -> tuple[np.ndarray, Callable] | None:
    """:func:`_stage_replicas` in two steps: each replica's code ([stage, replica]), and a
    function from rows of codes to each row's distinct :class:`ReplicaPaths` in code order
    (rows may gather codes of any rows: a code means the same paths throughout).

    Each replica is coded as four bitmasks: of the TP and of the EP groups' paths (bits
    indexing the distinct group path ids of the placement) and of the tiers of its
    activation and gradient pairs (point-to-point: a pair's path is its tier's, id = tier).
    """
    num_stages, dp, _ = devices.shape
    num_tiers = network.num_tiers
    by_index = devices.reshape(num_stages, dp, config.ep, config.tp)  # [s, r, e_index, t_index]
    no_group = np.zeros((num_stages, dp, 0), dtype=np.int64)
    tp_ids = groups.of(by_index, 3) if config.tp > 1 else no_group
    ep_ids = groups.of(by_index, 2) if config.ep > 1 else no_group
    local_ids, local = np.unique(np.concatenate((tp_ids.ravel(), ep_ids.ravel())),
                                 return_inverse=True)
    width = len(local_ids)
    if 2 * width + 2 * num_tiers + 1 > CODE_BITS:
        return None
    zeros = np.zeros((num_stages, dp), dtype=np.int64)
    # [s, r] = 1 when every TP group of the stage replica lies inside one tier-0 domain
    tp_local = (network.tier_of_pairs(by_index.min(axis=3), by_index.max(axis=3)) == 0
                ).all(axis=2).astype(np.int64)
    tp_mask = _bit_mask(local[:tp_ids.size].reshape(tp_ids.shape), 2) if tp_ids.size else zeros
    ep_mask = _bit_mask(local[tp_ids.size:].reshape(ep_ids.shape), 2) if ep_ids.size else zeros

    def pair_mask(stages: list[int], source: np.ndarray) -> np.ndarray:
        """[s, r] = bitmask of the tiers of the pairs from ``source`` to those stages."""
        mask = zeros.copy()
        if stages:
            target = devices[stages]
            tiers = network.tier_of_pairs(np.minimum(source, target), np.maximum(source, target))
            mask[stages] = _bit_mask(tiers, 2)
        return mask

    codes = tp_mask + (ep_mask << width) + (pair_mask(*activation) << 2 * width) \
        + (pair_mask(*gradient) << 2 * width + num_tiers) \
        + (tp_local << 2 * width + 2 * num_tiers)

    def group_ids(mask: int) -> tuple[int, ...]:  # local_ids ascend: so do the ids
        return tuple(int(local_ids[bit]) for bit in range(width) if mask >> bit & 1)

    def tiers_of(mask: int) -> tuple[int, ...]:
        return tuple(tier for tier in range(num_tiers) if mask >> tier & 1)

    decoded: dict[int, ReplicaPaths] = {}

    def decode(rows: np.ndarray) -> list[tuple[ReplicaPaths, ...]]:
        replicas = []
        for code_set in _row_sets(rows):
            for code in code_set:
                if code not in decoded:
                    pairs = code >> 2 * width
                    decoded[code] = ReplicaPaths(
                        group_ids(code % (1 << width)),
                        group_ids((code >> width) % (1 << width)),
                        tiers_of(pairs % (1 << num_tiers)),
                        tiers_of((pairs >> num_tiers) % (1 << num_tiers)),
                        bool(pairs >> 2 * num_tiers))
            replicas.append(tuple(decoded[code] for code in code_set))
        return replicas

    return codes, decode


# ------------------------------------------------------------------------ rank by rank


def rank_geometries(network: NetworkModel, ids: PathIds, devices: np.ndarray,
                    config: IntraConfig, wrap: bool) -> list[StageGeometry]:
    """:func:`stage_geometries` rank by rank, on any network and context width: the graph
    networks' form, the tiered networks' fallback (:func:`_hierarchical_geometries` returns
    None when a replica's paths overflow its code) and the reference the vectorised forms
    are tested against.  ``devices[stage, replica, j]`` with j = t_index + t·c_index +
    t·c·e_index.  Per replica: the paths of its TP and EP groups, of its receives, whether
    every TP group lies inside one tier-0 domain (``tp_local``, as
    :class:`nest_cp.cost.terms.GroupPaths` decides it), and with context width c > 1 the
    paths of its CP rings' consecutive pairs and of its CP groups
    (docs/context-parallelism.md); the data-parallel groups are the d·c ranks of each
    (tensor, expert) index (ZeRO-3 gathers, expert sync) and the d·e·c ranks of each tensor
    index (dense sync), as the evaluator groups them."""
    num_stages, dp, _ = devices.shape
    placement = devices.tolist()
    activation_from, gradient_from = _senders(num_stages, wrap)
    tp, cp, ep = config.tp, config.cp, config.ep

    def group(members: list[int]) -> int:  # -1: no path (one device)
        path = network.group_path(members)
        return -1 if path is None else ids.id_of(path)

    def groups(ranks: list[int], rank_groups) -> tuple[int, ...]:
        return tuple(sorted({group([ranks[j] for j in members])
                             for members in rank_groups} - {-1}))

    def pairs(sender: int | None, receiver: int, replica: int) -> tuple[int, ...]:
        if sender is None:
            return ()
        return tuple(sorted({ids.id_of(network.pair_path(one, other)) for one, other in
                             zip(placement[sender][replica], placement[receiver][replica],
                                 strict=True)}))

    def tp_local(ranks: list[int]) -> bool:
        return network.is_hierarchical and all(
            len(members) == 1 or network.tier_of([ranks[j] for j in members]) == 0
            for members in tensor_groups(config))

    def ring_pairs(ranks: list[int]) -> tuple[int, ...]:
        found: set[int] = set()
        for ring in context_groups(config):
            members = [ranks[j] for j in ring]
            found |= {ids.id_of(network.pair_path(members[k], members[(k + 1) % cp]))
                      for k in range(cp) if members[k] != members[(k + 1) % cp]}
        return tuple(sorted(found))

    geometries = []
    for stage in range(num_stages):
        ranks_of = placement[stage]
        replicas = tuple(sorted(
            {ReplicaPaths(tp_groups=groups(ranks_of[replica], tensor_groups(config)),
                          ep_groups=groups(ranks_of[replica], expert_groups(config)),
                          recv_activation=pairs(activation_from[stage], stage, replica),
                          recv_gradient=pairs(gradient_from[stage], stage, replica),
                          tp_local=tp_local(ranks_of[replica]),
                          context_pairs=ring_pairs(ranks_of[replica]),
                          context_groups=groups(ranks_of[replica], context_groups(config)))
             for replica in range(dp)},
            key=_replica_order))
        replica_groups = tuple(sorted(
            {group([ranks_of[r][rank_index(config, t, c, e)]
                    for r in range(dp) for c in range(cp)])
             for t in range(tp) for e in range(ep)} - {-1}))
        dense_groups = tuple(sorted(
            {group([ranks_of[r][rank_index(config, t, c, e)]
                    for r in range(dp) for c in range(cp) for e in range(ep)])
             for t in range(tp)} - {-1}))
        geometries.append(StageGeometry(replicas, replica_groups, dense_groups))
    return geometries


def _replica_order(replica: ReplicaPaths) -> tuple:
    """The order of a stage's distinct replicas in :func:`rank_geometries` (a fixed one,
    so that equal placements give equal geometries)."""
    return (replica.tp_groups, replica.ep_groups, replica.recv_activation,
            replica.recv_gradient, replica.tp_local, replica.context_pairs,
            replica.context_groups)


def tiered_context_geometries(network: NetworkModel, ids: PathIds, devices: np.ndarray,
                              config: IntraConfig, wrap: bool) -> list[StageGeometry]:
    """:func:`rank_geometries` on a tiered network with context width c > 1, vectorised
    over ranks and stages: the same geometries (tests/test_dp_cp.py compares the two).  A
    stage's (d, a) device array is read as (d, e, c, t) (rank j = t_index + t·c_index +
    t·c·e_index), so each kind of group lies along one axis or a block of axes and
    :class:`_GroupPathCodes` prices all of them at once; a pair's path is its tier's
    (:meth:`NetworkModel.tier_of_pairs`)."""
    num_stages, dp, _ = devices.shape
    tp, cp, ep = config.tp, config.cp, config.ep
    codes = _GroupPathCodes(network, ids)
    tier_ids = np.array([ids.id_of(network.tier_path(tier)) for tier in range(network.num_tiers)],
                        dtype=np.int64)
    activation_from, gradient_from = _senders(num_stages, wrap)
    shaped = devices.reshape(num_stages, dp, ep, cp, tp)

    def pair_ids(one: np.ndarray, other: np.ndarray) -> np.ndarray:
        return tier_ids[np.asarray(network.tier_of_pairs(np.minimum(one, other),
                                                         np.maximum(one, other)))]

    # every stage at once (the per-stage work is Python sets of the few distinct rows)
    tensor = codes.of(shaped, 4) if tp > 1 else None  # (S, d, e, c)
    expert = codes.of(shaped, 2) if ep > 1 else None  # (S, d, c, t)
    context = codes.of(shaped, 3)  # (S, d, e, t)
    ring = pair_ids(shaped, np.roll(shaped, -1, axis=3))
    inner = np.asarray(network.tier_of_pairs(shaped.min(axis=4), shaped.max(axis=4))) == 0 \
        if tp > 1 else np.ones((num_stages, dp, ep, cp), dtype=bool)
    local = inner.reshape(num_stages, dp, -1).all(axis=2)
    receives = []
    for senders in (activation_from, gradient_from):  # -1 where a stage receives none
        found = np.full(devices.shape, -1, dtype=np.int64)
        stages = [stage for stage in range(num_stages) if senders[stage] is not None]
        if stages:
            found[stages] = pair_ids(devices[[senders[stage] for stage in stages]],
                                     devices[stages])
        receives.append(found)

    def columns(values: np.ndarray | None) -> np.ndarray:  # (S, d, k) per replica
        return np.zeros((num_stages, dp, 0), dtype=np.int64) if values is None else \
            values.reshape(num_stages, dp, -1)

    parts = [columns(tensor), columns(expert), columns(receives[0]), columns(receives[1]),
             local[:, :, None].astype(np.int64), columns(ring), columns(context)]
    widths = [part.shape[2] for part in parts]
    stage_column = np.broadcast_to(np.arange(num_stages)[:, None, None], (num_stages, dp, 1))
    rows = np.unique(np.concatenate([stage_column, *parts], axis=2).reshape(
        num_stages * dp, -1), axis=0)
    replicas: list[set] = [set() for _ in range(num_stages)]
    for row in rows.tolist():
        split, at = [], 1
        for width in widths:
            split.append(row[at:at + width])
            at += width
        tensor_ids, expert_ids, act_ids, grad_ids, tp_local, ring_ids, context_ids = (
            tuple(sorted(set(part) - {-1})) for part in split)  # -1: no receive
        replicas[row[0]].add(ReplicaPaths(
            tp_groups=tensor_ids, ep_groups=expert_ids, recv_activation=act_ids,
            recv_gradient=grad_ids, tp_local=bool(split[4][0]),
            context_pairs=ring_ids, context_groups=context_ids))
    # the d·c ranks of each (tensor, expert) index, the d·e·c ranks of each tensor index
    shard = np.moveaxis(shaped, (2, 4), (1, 2)).reshape(num_stages, ep, tp, dp * cp)
    dense = np.moveaxis(shaped, 4, 1).reshape(num_stages, tp, dp * ep * cp)
    shard_ids = codes.of(shard, 3).reshape(num_stages, -1) if dp * cp > 1 else None
    dense_ids = codes.of(dense, 2).reshape(num_stages, -1) if dp * ep * cp > 1 else None
    return [StageGeometry(
        tuple(sorted(replicas[stage], key=_replica_order)),
        () if shard_ids is None else tuple(sorted(set(shard_ids[stage].tolist()))),
        () if dense_ids is None else tuple(sorted(set(dense_ids[stage].tolist()))))
        for stage in range(num_stages)]
