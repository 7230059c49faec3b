r"""Paths a group may have once its tensor-parallel groups are placed (issue 35).

:func:`nest_cp.dp.geometry.fastest_group_paths` (g) prices a group of g ranks as if it
could have min(g // 2, G_0) members in every tier-0 domain (node) it touches: up to
G_0 ring channels (cost model §5 a), e.g. 8 NICs of a DGX node.  Ranks of one node are
shared by every kind of group, though.  Counting the ranks a node holds links the
channel count of the data-parallel groups to where the tensor-parallel groups lie; the
planner's case-split bound (:meth:`nest_cp.dp.planner._Search._shape_bound`) reads both
halves of the argument from here.

Assumption: an injective placement (every rank on its own device), nothing else; so
the facts hold for every rank layout, however the devices are ordered.

Quality.  Call the quality q(α) of a TP group α (the t ranks of one stage replica with
one EP index) t if it lies inside one tier-0 domain, and otherwise its channel count
k(α), its fewest members in a node it touches (1 <= k(α) <= t // 2, as it touches two
nodes at least).  Either way α has at least q(α) members in every node it touches.  Let
h = the least quality over the plan's TP groups.

Fact 1 (good TP groups cap the data-parallel channels).  Take any data-parallel group
of a stage: its dense group (the d·e ranks with one TP index, one per (replica, EP
index)), its expert group or its ZeRO-3 gather group (the d ranks with one (EP, TP)
index, one per replica).  Its members belong to pairwise distinct TP groups (they differ
in replica or EP index), and distinct TP groups are disjoint.  If a node X holds n of
its members, X holds members of n distinct TP groups, each at least h of them, and X
has at most G_0 devices: n·h <= G_0.  So no node holds more than c = ⌊G_0 / h⌋ members
of the group: its k (the fewest members in a node it touches) is at most c, and if it
lies inside one node it has at most c members.  It touches ⌈g / c⌉ nodes at least, so a
tier-K domain holding it has ⌈g / c⌉ nodes at least: G_K >= ⌈g / c⌉·G_0 (for c = G_0
that is G_K >= g, G_K being a multiple of G_0).  A group of g members therefore runs
(cost model §5 a) on one of :func:`capped_group_paths` (g, c) or on a slower path: tier
0 only if g <= c, a tier K >= 1 whose domains hold ⌈g / c⌉ nodes with at most
min(g // 2, G_0, c) channels.  (On Llama 3's RoCE network, pods of 384 nodes: with
every TP group in its node, c = 1, a data-parallel group of 385 or more replicas leaves
its pod and runs on the 1:7 tier above it.)

Fact 2 (a poor TP group is slow).  If h < t, a TP group α of quality h leaves its node:
it spans a tier K >= 1 whose domains hold t devices, with k(α) = h channels, so each TP
collective of its stage replica is priced (§3, §5 a) on one of
:func:`crossing_tp_paths` (t, h) or on a slower path, and never hidden (§5 e needs
every TP group of the replica inside one node).

With t = G_0 (t = 8 on 8-GPU nodes): either every TP group lies in a node and every
data-parallel group that leaves a node runs one channel, or some TP group runs its
collectives across nodes on at most h channels while the data-parallel groups run at
most ⌊8 / h⌋.
"""

from __future__ import annotations

from nest_cp.model.network import NetworkModel, Path


def tp_qualities(network: NetworkModel, tp: int) -> tuple[int, ...]:
    """The values the least TP-group quality h can take (module docstring): 1 .. t // 2
    (capped at G_0) when a TP group can leave its node (some tier above the node holds t
    devices), and t when t <= G_0 (a TP group fits a node); () for t = 1 (no channels to
    count: callers keep the fastest paths)."""
    if tp == 1:
        return ()
    domains = network.cluster.network.domain_sizes()
    crossing = range(1, min(tp // 2, domains[0]) + 1) if any(
        size >= tp for size in domains[1:]) else range(0)
    return tuple(crossing) + ((tp,) if tp <= domains[0] else ())


def node_cap(network: NetworkModel, quality: int) -> int:
    """c = ⌊G_0 / h⌋ (Fact 1): the most members of one data-parallel group a node holds when
    every TP group has quality h or more."""
    return network.cluster.network.domain_sizes()[0] // quality


def capped_group_paths(network: NetworkModel, group_size: int, cap: int,
                       above: int = -1) -> tuple[Path, ...]:
    """The fastest paths a group of ``group_size`` >= 2 ranks may run on when no node holds
    more than ``cap`` >= 1 of its members (Fact 1): per tier whose domains hold
    ⌈group_size / cap⌉ nodes, tier 0 only if group_size <= cap, and tiers K >= 1 with
    min(group_size // 2, G_0, cap) channels (where no domain holds that many nodes, so no
    plan keeps ``cap`` members per node, the tiers holding group_size devices, as for
    cap = G_0: more paths, a weaker but still valid claim).  With ``cap`` = G_0 (no cap
    beyond a node's size: domains holding group_size devices) these are
    :func:`~nest_cp.dp.geometry.fastest_group_paths`' paths, which it computes by this
    function.  With ``above``: only the tiers above it (a group that leaves its tier-``above``
    domain spans one of them)."""
    domains = network.cluster.network.domain_sizes()
    channels = min(group_size // 2, domains[0], cap)
    tiers = _holding_tiers(domains, group_size, cap, above)
    if not tiers:  # no placement keeps ``cap`` per node: any domain of group_size devices,
        tiers = _holding_tiers(domains, group_size, domains[0], above)  # a weaker claim
    return tuple(network.channel_path(tier, channels) for tier in tiers)


def _holding_tiers(domains: tuple[int, ...], group_size: int, cap: int,
                   above: int) -> list[int]:
    """The tiers above ``above`` whose domains hold ⌈group_size / cap⌉ nodes (tier 0 only
    if group_size <= cap)."""
    nodes = -(-group_size // cap)
    return [tier for tier, size in enumerate(domains)
            if tier > above and size >= nodes * domains[0] and (tier > 0 or group_size <= cap)]


def crossing_tp_paths(network: NetworkModel, tp: int, channels: int,
                      above: int = 0) -> tuple[Path, ...]:
    """The fastest paths a TP group of ``tp`` >= 2 ranks that leaves its node with
    ``channels`` members in the node it has fewest in may run on (Fact 2): tiers K >= 1
    whose domains hold ``tp`` devices, with that many channels.  With ``above`` >= 1, the
    paths of such a group that leaves its tier-``above`` domain: tiers K > ``above``."""
    domains = network.cluster.network.domain_sizes()
    return tuple(network.channel_path(tier, channels) for tier, size in enumerate(domains)
                 if tier > max(above, 0) and size >= tp)
