"""Stage prices of one (configuration, microbatch) choice, per tier, with the evaluator's integers.

A *tier* here is a bottleneck a group can be priced on (DESIGN §1.2): on a
hierarchical network tier k is the path of the tier-k domains, with the domain
size G_k as its *containment capacity* (a group priced on tier k lies inside one
tier-k domain); on a graph the tiers are every (pair bandwidth, pair latency)
combination without a capacity (no containment is reasoned about there), which
is a superset of the bottlenecks any group can have.

:class:`LayerPrices` holds per-layer prices on every tier and prefix sums; its
range sums and per-stage terms price one stage span exactly as
:func:`nest_cp.cost.evaluate.evaluate` composes it, given the tier each of its
families sits on and, for a group spanning tier k >= 1, that it runs the most
ring channels a group of its size can have there (:meth:`Tier.collective_path`;
with fewer channels the real price is higher, so these prices are lower bounds —
the identity and inequality every bound of this package starts from; a test
checks the identity against the evaluator):

- compute: Σ (fwd + bwd) + the recompute mode's rerun (full: Σ fwd, selective:
  Σ sel_fwd) — :func:`nest_cp.cost.terms.compute_ticks`,
  :func:`~nest_cp.cost.terms.recompute_compute_ticks`;
- intra-layer collectives per family (TP, EP): Σ over the family's collectives
  priced on the family's tier, and under full recomputation the forward ones
  once more (DESIGN §3.2 a, f); with ``tp_comm_overlap`` the TP family on
  hierarchical tier 0 is priced as the evaluator exposes it (cost model §5 e,
  "TP overlap" below);
- a transfer of the span's last layer output on a pair's tier;
- gradient sync of the span's dense parameters over d·e·c ranks and expert
  parameters over d·c ranks (c the context width: the c ranks of a CP group hold
  the same parameters, docs/context-parallelism.md), as its two phases (all-reduce
  or reduce-scatter, then for ZeRO 1 and 2 the weights' all-gather, each rounded
  alone, cost model §5 c), and the ZeRO-3 gathers over d·c ranks, each rounded once
  per stage;
- with c > 1, the exposed context exchange (:meth:`LayerPrices.context`): per layer
  :func:`nest_cp.cost.terms.context_ticks` with the ring's slowest pair on the tier's
  own path (p2p) or the CP group on the tier's fastest path for c devices (a2a), and
  under any recomputation the forward part once more, as the evaluator charges it;
- the span's forward and backward ticks of one microbatch, which an overlapped
  weight gather and gradient reduction hide behind (§3.2 c, §5 d).

Terms rounded per layer (compute, collectives, the context exchange) are summed per
layer like the evaluator; terms rounded per stage are priced on the stage's totals.
Memory is the evaluator's own :func:`nest_cp.cost.terms.stage_memory_bytes` with the
context width (ZeRO shards over d·c ranks, the p2p ring's K/V buffers).

Context exchange (c > 1).  A stage replica pays Σ over its layers of context_ticks on
its CP paths: p2p the slowest consecutive pair of its rings, a2a its slowest CP group.
Fix one pair (p2p) or one CP group (a2a) of the replica; it is a pair (a group of c
distinct devices, the placement being injective) lying on some tier k that admits 2
(c), and its path is tier k's own path (a transfer runs one channel) or no faster than
:meth:`Tier.collective_path` of c (a2a, its docstring), exactly as for the other
groups below.  context_ticks never falls when the pair's transfer or the group's
all-to-all gets slower ((c − 1)·max(0, P − X) and 2·A are non-decreasing in P and A),
and the slowest pair / group costs at least the fixed one, so the replica's exposed
exchange is at least :meth:`LayerPrices.context` on tier k — the same k for every
layer of the stage, since the fixed pair is the replica's.

Why every group's price is at least one of these tiers'.  Hierarchical: a
group's path is the path of its tier with as many ring channels as its fewest
members in one tier-0 domain (DESIGN §1.2, cost model §5 a), and a tier-k group
fits one tier-k domain, so tier k *admits* its size.  A tier prices a collective
over g devices on :meth:`Tier.collective_path`, the fastest path any g-device
group of that tier can have (its docstring proves it), so every price here is at
most the real one.  Graph: a group's bottleneck is (least bandwidth, largest
latency) over its pairs, one of the (bandwidth, latency) combinations listed;
every pair of the group is at least that fast (bandwidth >=, latency <=), so the
group is a clique of that combination's pair graph and the combination's tier,
whose ``largest_group`` is that graph's largest clique, *admits* its size;
graph collectives run one channel (§5 a).  Point-to-point transfers run one
channel on every network, so they are priced on the tier's own path.  Paths come
from :class:`~nest_cp.model.network.NetworkModel`, so β is already the effective
bandwidth (§5 b).

TP overlap (cost model §5 e).  With ``tp_comm_overlap`` a stage replica whose TP
groups all lie on tier 0 of a hierarchy (``GroupPaths.tp_local``; never on a
graph) pays, per layer and direction, f(C) = max(⌈C/t⌉, C − X) of the sum C of its
TP collectives (each on its slowest group) instead of C, X the layer's compute in
that direction; the rerun forward of full recomputation likewise; every other
stage replica pays C.  Chain prices the TP family on hierarchical tier 0 with f of
the tier-0 sums (:func:`nest_cp.cost.terms.layer_collective_ticks` with the
layer's compute as ``hiding``, the evaluator's own call) and on every other tier
in full.  Lemma: for every TP group g0 of a stage replica, the replica's TP
collectives cost at least chain's TP price on g0's tier (so every bound below that
prices "the family on the tier of one of its groups" stays a lower bound).  Proof,
per layer and direction (then summed; EP collectives are never hidden and are
priced apart): let C be the replica's TP sum and C_k chain's plain sum on g0's
tier k; C >= C_k (each collective costs at least its price on g0, at least the
tier's price, as above).  If k >= 1 the replica is not tp_local (g0 leaves a
tier-0 domain) and pays C >= C_k, chain's price there.  If k = 0 the replica pays
C or f(C), both >= f(C) (f(C) <= C: ⌈C/t⌉ <= C and C − X <= C for C, X >= 0,
t >= 1), and f(C) >= f(C_0) as f never falls when C grows (both its terms are
non-decreasing, and f(0) = 0 below every f(C > 0) >= 1); f(C_0) is chain's tier-0
price.  ∎  Since f(C_0) <= C_0, the overlapped tier-0 price is never above the
plain one, and a minimum over tiers stays the minimum over the prices used.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

import networkx as nx
import numpy as np

from nest_cp.cost import terms as cost
from nest_cp.model.instance import (
    CollectiveGroup,
    CpComm,
    Instance,
    IntraConfig,
    LayerProfile,
    Phase,
    RecomputeMode,
)
from nest_cp.model.network import NetworkModel, Path, collective_seconds
from nest_cp.model.ticks import exact

FAMILIES = (CollectiveGroup.TP, CollectiveGroup.EP)


@dataclass(frozen=True, slots=True)
class Tier:
    """A bottleneck path and, on a hierarchical network, the domains that realise it.

    ``capacity`` is the number of devices of one domain (None: no containment is
    modelled for this tier) and ``domains`` the device count of every domain.
    """

    index: int
    path: Path
    capacity: int | None
    domains: tuple[int, ...] = ()
    # channel_paths[k - 1]: a collective's path with k ring channels, k up to the most that
    # are faster (NetworkModel.channel_path); empty on graphs and a lone path on tier 0
    channel_paths: tuple[Path, ...] = ()
    node_size: int = 1  # G_0: devices of one tier-0 domain (hierarchical networks)
    # a group on this tier lies inside one tier-0 domain (hierarchical tier 0): where
    # tp_comm_overlap hides TP collectives (cost model §5 e)
    node_local: bool = False
    # graphs: the most devices whose every pair is at least as fast as ``path`` (bandwidth
    # >= and latency <=), the largest clique of that pair graph; None: not limited
    largest_group: int | None = None

    def admits(self, group_size: int) -> bool:
        """Whether a group of ``group_size`` distinct devices can be priced on this tier."""
        if self.largest_group is not None and self.largest_group < group_size:
            return False
        return self.capacity is None or max(self.domains, default=0) >= group_size

    def collective_path(self, group_size: int) -> Path:
        """The fastest path a collective over ``group_size`` distinct devices that lie on
        this tier can be priced on (cost model §5 a).

        Proof that no such group is priced on a faster one.  On tier K >= 1 of a hierarchy
        a group is not inside one tier-0 domain, so it touches n >= 2 of them, and
        n >= ceil(g / G_0) as each holds at most G_0 of its devices; its channel count k,
        its fewest members in a touched domain, is then at most
        g // max(2, ceil(g / G_0)).  Its β = max(β_K, min(k·β_K, β_0)) never falls as k
        grows and stops rising at ``max_useful_channels`` (the path list's length), with
        the latency fixed, so every ring collective's seconds are least at the largest k
        allowed: k = min(that cap, the list's length).  Tier 0, graphs (one channel) and
        one-channel tiers: the tier's own path, the only one.
        """
        return self.channel_path(self.channel_cap(group_size))

    def channel_cap(self, group_size: int) -> int:
        """The most ring channels worth telling apart for a ``group_size`` group on this tier:
        min(g // max(2, ceil(g / G_0)), the path list's length), 1 where there is one path
        (:meth:`collective_path`'s proof: no group of that size runs more, and more would
        price no faster)."""
        if len(self.channel_paths) <= 1:
            return 1
        touched = max(2, -(-group_size // self.node_size))
        return max(1, min(len(self.channel_paths), group_size // touched))

    def channel_path(self, channels: int) -> Path:
        """The path of a collective on this tier whose group has ``channels`` (>= 1) members
        in every tier-0 domain it touches, capped at the path list's length (more price no
        faster, cost model §5 a); the tier's own path where there is one path."""
        if len(self.channel_paths) <= 1:
            return self.path
        return self.channel_paths[min(channels, len(self.channel_paths)) - 1]


def network_tiers(network: NetworkModel) -> tuple[Tier, ...]:
    """Tiers of a hierarchical network (with capacities) or the candidate paths of a graph.

    The outermost tier of a hierarchy whose single domain holds every device needs
    no containment and gets capacity None.
    """
    num_devices = network.num_devices
    if network.is_hierarchical:
        tiers = []
        sizes = network.cluster.network.domain_sizes()
        for index, size in enumerate(sizes):
            full, rest = divmod(num_devices, size)
            domains = (size,) * full + ((rest,) if rest else ())
            capacity = None if len(domains) == 1 else size
            channels = tuple(network.channel_path(index, k)
                             for k in range(1, network.max_useful_channels(index) + 1))
            tiers.append(Tier(index, network.tier_path(index), capacity, domains, channels,
                              sizes[0], node_local=index == 0))
            if len(domains) == 1:
                break
        return tuple(tiers)
    pairs = {(a, b): network.pair_path(a, b) for a in range(num_devices)
             for b in range(a + 1, num_devices)}
    bandwidths = sorted({p.bandwidth_Bps for p in pairs.values()}, reverse=True)
    latencies = sorted({p.latency_s for p in pairs.values()})
    return tuple(Tier(index, Path(bandwidth, latency), None,
                      largest_group=_largest_clique(num_devices, [
                          pair for pair, path in pairs.items()
                          if path.bandwidth_Bps >= bandwidth and path.latency_s <= latency]))
                 for index, (bandwidth, latency) in enumerate(
                     itertools.product(bandwidths, latencies)))


MAX_CLIQUE_DEVICES = 64  # larger graphs keep every tier unlimited (maximum clique is NP-hard)


def _largest_clique(num_devices: int, edges: list[tuple[int, int]]) -> int | None:
    """The most devices whose every pair is one of ``edges`` (None above
    ``MAX_CLIQUE_DEVICES`` devices: not computed, no limit)."""
    if num_devices > MAX_CLIQUE_DEVICES:
        return None
    graph = nx.Graph()
    graph.add_nodes_from(range(num_devices))
    graph.add_edges_from(edges)
    return max(len(clique) for clique in nx.find_cliques(graph))


@dataclass(frozen=True, slots=True)
class Span:
    """Layers ``first..last`` of one stage with its recompute mode."""

    first: int
    last: int
    mode: RecomputeMode

    @property
    def layers(self) -> range:
        return range(self.first, self.last + 1)


def _prefix(values) -> np.ndarray:
    return np.concatenate(([0], np.cumsum(np.asarray(values, dtype=object)))).astype(object)


class LayerPrices:
    """Per-layer, per-tier prices of one (configuration, microbatch) choice."""

    def __init__(self, instance: Instance, config: IntraConfig, microbatch: int,
                 tiers: tuple[Tier, ...]):
        self.instance, self.config, self.microbatch = instance, config, microbatch
        self.tiers = tiers
        training = instance.training
        self.tick_s, self.optimizer = training.tick_s, training.optimizer
        self.tp_overlap = training.tp_comm_overlap
        self.cp_comm = training.cp_comm
        self.profiles: list[LayerProfile] = [layer.profile(config, microbatch)
                                             for layer in instance.workload.layers]
        tick = self.tick_s
        fwd_bwd = [cost.compute_ticks(p, tick) for p in self.profiles]
        self._compute = _prefix([f + b for f, b in fwd_bwd])
        self._forward = _prefix([f for f, _ in fwd_bwd])
        self._backward = _prefix([b for _, b in fwd_bwd])
        self._rerun = {mode: _prefix([cost.recompute_compute_ticks(p, mode, tick)
                                      if mode is not RecomputeMode.SELECTIVE or p.has_selective
                                      else 0 for p in self.profiles])
                       for mode in RecomputeMode}
        self._dense = _prefix([p.dense_params for p in self.profiles])
        self._expert = _prefix([p.expert_params for p in self.profiles])
        # collectives[family][tier] / forward-only: prefix sums of per-layer ticks
        self._collectives: dict[tuple[CollectiveGroup, int, bool], np.ndarray] = {}
        for family in FAMILIES:
            for tier in tiers:
                for forward_only in (False, True):
                    per_layer = [self._layer_family_ticks(p, family, tier, forward_only)
                                 for p in self.profiles]
                    self._collectives[family, tier.index, forward_only] = _prefix(per_layer)
        # context[tier] / forward-only: prefix sums of per-layer exposed context ticks (c > 1)
        self._context: dict[tuple[int, bool], np.ndarray] = {}
        if config.cp > 1:
            for tier in tiers:
                per_layer = [self._layer_context_ticks(p, tier) for p in self.profiles]
                self._context[tier.index, False] = _prefix([f + b for f, b in per_layer])
                self._context[tier.index, True] = _prefix([f for f, _ in per_layer])
        self.has_family = {family: cost.group_size(family, config) > 1 and any(
            c.group is family for p in self.profiles for c in p.collectives)
            for family in FAMILIES}
        self._memo: dict = {}

    @property
    def num_layers(self) -> int:
        return len(self.profiles)

    def _layer_family_ticks(self, profile: LayerProfile, family: CollectiveGroup, tier: Tier,
                            forward_only: bool) -> int:
        """One layer's collectives of ``family`` (the forward ones, or all) on a group of
        ``tier``, by the evaluator's :func:`~nest_cp.cost.terms.layer_collective_ticks`: the
        other family's paths are None (priced 0), and the TP family on a tier-0 group is
        hidden behind the layer's compute when ``tp_comm_overlap`` is set (the module
        docstring, "TP overlap")."""
        size = cost.group_size(family, self.config)
        if size <= 1:
            return 0
        path = tier.collective_path(size)
        paths = cost.GroupPaths(tp=(path if family is CollectiveGroup.TP else None,),
                                ep=(path if family is CollectiveGroup.EP else None,))
        hides = family is CollectiveGroup.TP and self.tp_overlap and tier.node_local
        return cost.layer_collective_ticks(
            profile, self.config, paths, self.tick_s, Phase.FWD if forward_only else None,
            cost.compute_ticks(profile, self.tick_s) if hides else None)

    @property
    def context_size(self) -> int:
        """The devices one context price is taken on: a ring pair (p2p) or a CP group of c
        (a2a); 1 without context parallelism (nothing to price)."""
        if self.config.cp == 1:
            return 1
        return 2 if self.cp_comm is CpComm.P2P else self.config.cp

    def _layer_context_ticks(self, profile: LayerProfile, tier: Tier) -> tuple[int, int]:
        """One layer's exposed context exchange (forward, backward) with its ring pair on
        ``tier``'s own path (p2p) or its CP group on ``tier``'s fastest path for c devices
        (a2a), by the evaluator's :func:`~nest_cp.cost.terms.context_ticks`."""
        paths = cost.ContextPaths(pairs=(tier.path,),
                                  groups=(tier.collective_path(self.config.cp),))
        return cost.context_ticks(profile, self.config, self.cp_comm, paths, self.tick_s)

    # ------------------------------------------------------------ range sums

    def compute(self, span: Span) -> int:
        """Σ (fwd + bwd) + the mode's recomputed forward compute."""
        return int(self._compute[span.last + 1] - self._compute[span.first]
                   + self._rerun[span.mode][span.last + 1] - self._rerun[span.mode][span.first])

    def backward(self, span: Span) -> int:
        """R_s: Σ bwd of one microbatch (recompute, receives and collectives excluded)."""
        return int(self._backward[span.last + 1] - self._backward[span.first])

    def forward(self, span: Span) -> int:
        """F_s: Σ fwd of one microbatch (recompute and collectives excluded)."""
        return int(self._forward[span.last + 1] - self._forward[span.first])

    def collectives(self, span: Span, family: CollectiveGroup, tier: int) -> int:
        """The family's collectives of the span on ``tier`` (forward ones again under full
        recomputation; TP on tier 0 as ``tp_comm_overlap`` exposes it, the module docstring's
        "TP overlap")."""
        total = self._collectives[family, tier, False]
        value = total[span.last + 1] - total[span.first]
        if span.mode is RecomputeMode.FULL:
            forward = self._collectives[family, tier, True]
            value += forward[span.last + 1] - forward[span.first]
        return int(value)

    def context(self, span: Span, tier: int) -> int:
        """The span's exposed context exchange with its ring pair (p2p) or CP group (a2a) on
        ``tier``, the forward part again under any recomputation (0 for c = 1; the module
        docstring's "Context exchange")."""
        if self.config.cp == 1:
            return 0
        total = self._context[tier, False]
        value = total[span.last + 1] - total[span.first]
        if span.mode is not RecomputeMode.NONE:
            forward = self._context[tier, True]
            value += forward[span.last + 1] - forward[span.first]
        return int(value)

    def dense_group(self, dp: int) -> int:
        """Ranks of one dense sync group: d·e·c."""
        return dp * self.config.ep * self.config.cp

    def expert_group(self, dp: int) -> int:
        """Ranks of one expert sync group (and of the ZeRO shards): d·c."""
        return dp * self.config.cp

    def dense_params(self, span: Span) -> int:
        return int(self._dense[span.last + 1] - self._dense[span.first])

    def expert_params(self, span: Span) -> int:
        return int(self._expert[span.last + 1] - self._expert[span.first])

    # ------------------------------------------------------------ per-stage terms

    def transfer(self, last_layer: int, tier: int) -> int:
        """One point-to-point transfer of ``last_layer``'s output on ``tier``."""
        return self._memoised(("p2p", last_layer, tier), lambda: cost.transfer_ticks(
            self.profiles[last_layer].out_bytes, self.tiers[tier].path, self.tick_s))

    def dense_sync_parts(self, span: Span, dp: int, zero: int, tier: int,
                         channels: int | None = None) -> tuple[int, int]:
        """(gradient phase, weight gather) of one dense sync group (d·e·c ranks) on ``tier``,
        with ``channels`` ring channels (None: the most a group of its size can have)."""
        return self._sync_parts(self.dense_params(span), self.dense_group(dp), zero, tier,
                                channels)

    def expert_sync_parts(self, span: Span, dp: int, zero: int, tier: int,
                          channels: int | None = None) -> tuple[int, int]:
        """(gradient phase, weight gather) of one expert sync group (d·c ranks) on ``tier``,
        with ``channels`` ring channels (None: the most a group of its size can have)."""
        return self._sync_parts(self.expert_params(span), self.expert_group(dp), zero, tier,
                                channels)

    def dense_sync(self, span: Span, dp: int, zero: int, tier: int) -> int:
        """The whole dense sync of one group on ``tier``: both phases."""
        return sum(self.dense_sync_parts(span, dp, zero, tier))

    def expert_sync(self, span: Span, dp: int, zero: int, tier: int) -> int:
        """The whole expert sync of one group on ``tier``: both phases."""
        return sum(self.expert_sync_parts(span, dp, zero, tier))

    def _group_path(self, tier: int, size: int, channels: int | None) -> Path:
        """A ``size`` group's path on ``tier``: with ``channels`` ring channels, or (None) the
        most its size allows (:meth:`Tier.collective_path`)."""
        tier_ = self.tiers[tier]
        return tier_.collective_path(size) if channels is None else tier_.channel_path(channels)

    def _sync_parts(self, params: int, size: int, zero: int, tier: int,
                    channels: int | None) -> tuple[int, int]:
        return self._memoised(("sync", params, size, zero, tier, channels), lambda: (
            cost.gradient_sync_parts(params, self.optimizer, zero, size,
                                     self._group_path(tier, size, channels), self.tick_s)))

    def zero_gather(self, span: Span, dp: int, zero: int, tier: int,
                    channels: int | None = None) -> int:
        """The ZeRO-3 gathers of one group (d·c ranks) on ``tier``, with ``channels`` ring
        channels (None: the most a group of its size can have)."""
        if zero != 3:
            return 0
        params = self.dense_params(span) + self.expert_params(span)
        size = self.expert_group(dp)
        return self._memoised(("gather", params, size, tier, channels),
                              lambda: cost.zero3_gather_ticks(
                                  params, self.optimizer, size,
                                  self._group_path(tier, size, channels), self.tick_s))

    def memory(self, span: Span, in_flight: int, zero: int, dp: int) -> int:
        """Bytes per device of a stage holding ``span`` (``cost.stage_memory_bytes``)."""
        key = ("memory", span, in_flight, zero, dp if zero else 0)
        return self._memoised(key, lambda: cost.stage_memory_bytes(
            [self.profiles[span.first:span.last + 1]], span.mode, in_flight, self.optimizer,
            zero, dp, self.config.cp, self.cp_comm))

    def _memoised(self, key, price) -> int:
        if key not in self._memo:
            self._memo[key] = price()
        return self._memo[key]



@dataclass(frozen=True, slots=True)
class LinearTicks:
    """ticks(units) = ceil((slope·units + offset) / denominator) for units > 0, 0 otherwise.

    The exact integer form of ``collective_ticks(kind, bytes_per_unit·units, group, path)``
    (a ring collective's seconds are affine in the volume), so a whole array of
    parameter counts is priced with integer numpy arithmetic; a differential test
    checks it against :func:`nest_cp.model.network.collective_ticks`.
    """

    slope: int
    offset: int
    denominator: int

    @classmethod
    def of_collective(cls, kind, bytes_per_unit: int, group_size: int, path: Path,
                      tick_s: float) -> LinearTicks:
        if group_size <= 1:
            return cls(0, 0, 1)
        offset = collective_seconds(kind, 0, group_size, path) / exact(tick_s)
        slope = collective_seconds(kind, bytes_per_unit, group_size, path) / exact(tick_s) \
            - offset
        common = math.lcm(slope.denominator, offset.denominator)
        return cls(int(slope * common), int(offset * common), int(common))

    def of(self, units: np.ndarray) -> np.ndarray:
        """Elementwise ticks of an integer array (Python integers: no overflow)."""
        units = np.asarray(units, dtype=object)
        ticks = -((-(self.slope * units + self.offset)) // self.denominator)
        return np.where(units > 0, ticks, 0)
