r"""A sub-problem lower bound from what one rank's node can hold (hierarchical networks).

:func:`nest_cp.solvers.exact.bounds.communication_lower_bound` prices every group on the
cheapest path a group of its size can have, each group on its own.  On small nodes
(tier-0 domains of G_0 devices) those cheapest paths exclude one another: with G_0 = 2 a
rank of a middle stage cannot share its node with the rank it receives from, the rank it
receives the gradient from *and* its data-parallel partner.  This bound counts them.

Setting.  Fix a plan P of the sub-problem (c, b, S, d, z, v) on a hierarchical network
(docs/cost-model.md §1: tier-k domains are blocks of G_k devices) and one chunk k of its
split (on stage s = k mod S) with option o (its span and recompute mode).  Take the rank
ρ = (s, replica 0, j = 0) and its device; its *mates* are the other devices of that
device's tier-0 domain that P uses.  P is injective, so ρ has at most G_0 − 1 mates
(G_0 capped at N).

Lemma (a group seen from one member).  Let G be a group of g ≥ 2 ranks holding ρ, n' of
whose other members are mates of ρ, n' ≤ n.  If n' = g − 1, G lies in ρ's node: tier 0.
Else G has a member outside ρ's node, so it spans a tier K ≥ 1 whose domains hold g
devices (min(G_K, N) ≥ g), and ρ's node holds n' + 1 ≤ min(n, g − 2) + 1 of its members,
so its channel count k (docs/cost-model.md §5 a: the fewest members in a tier-0 domain
it touches) is at most that; it runs on tier K with k channels, and NCCL's channels
price each k exactly on :meth:`~nest_cp.model.network.NetworkModel.channel_path` (K, k)
(k beyond ``channel_cap`` prices as the cap).  So any term priced on G costs at least
its least price over :func:`mate_paths` (g, n): tier 0 when n ≥ g − 1, and every tier
K ≥ 1 that admits g with 1 .. min(n, g − 2) + 1 channels.  Those paths only grow with n,
so that least price never rises with n, which the steps below use to take n as large as
allowed.  (Tier 0 need not be the fastest: an outer tier may be faster, so "more mates"
is never assumed to price faster, only "at most n mates" to allow more paths.)

The groups of ρ and their mates.  Its TP group (t ranks of its replica with its EP and
CP index), its dense sync group (the d·e·c ranks with its TP index, one per (replica,
CP index, EP index); c = 1 without context parallelism, DESIGN §3.4), its EP group (its
replica's e ranks with its TP and CP index: inside the dense group), its shard group
(the d·c ranks with its TP and EP index, one per (replica, CP index): the expert sync and
the ZeRO-3 gather group, docs/cost-model.md §3 and DESIGN §3.4; also inside the dense
group), with c > 1 its CP group (its replica's c ranks with its TP and EP index, a ring
in CP-index order: inside the dense group, so are ρ's ring successor and the pair they
form), and its pipeline partners
(the ranks with its replica and j on the stages of chunks k − 1 and k + 1, when those
chunks exist).  The TP group meets the dense group in ρ alone (their members differ in TP
index), and the partners sit on other stages (S ≥ 2 whenever a partner exists), so the
mates of ρ in the TP group (n_t), in the dense group (n_d) and among the partners (n_p for
the sender, n_n for the receiver of the output: 0 or 1 each; one shared device when both
partners are on the same stage, S = 2 with v > 1) are distinct devices:
n_t + n_d + n_p + n_n ≤ G_0 − 1.  The EP, shard and CP groups lie inside the dense group,
so their mates number at most min(n_d, e − 1), min(n_d, d·c − 1) and min(n_d, c − 1), and
ρ's ring pair (ρ and its successor) has at most min(n_d, 1).

Claim.  T(P) ≥ rounds·τ_ρ + σ_ρ for v = 1, where for some allocation (n_t, n_d, n_p, n_n)
within the budget, τ_ρ = compute(o) + the span's collectives on ρ's TP and EP groups'
mate paths (with ``tp_comm_overlap``, when n_t = t − 1, at most the overlapped price on
tier 0, cost model §5 e: a replica whose TP groups all lie in tier-0 domains hides them,
one that does not pays them in full) + the ZeRO-3 gathers on the shard mate paths + with
c > 1 the span's context price on one ring pair's (p2p) or one CP group's (a2a) mate
paths (:meth:`~nest_cp.solvers.exact.pricing.ChunkPricing.cheapest_context`) + the
receive into o on the sender's pair paths + the receive of the gradient of o's output on
the receiver's pair paths, and σ_ρ = the exposed sync of o's dense and expert phases on
the dense and shard mate paths; so T(P) ≥ min over allocations of rounds·τ_ρ + σ_ρ =:
value(k, o), and with P's split, T(P) ≥ max over chunks of value(k, o_k) ≥ the least
over splits of that max (:func:`split_min_max`).

Proof.  τ(s, 0) (DESIGN §3, §3.2 a, b, f) holds per collective its slowest group, which
costs at least its price on ρ's group; each receive its slowest j, at least ρ's pair's
price; the ZeRO-3 gathers (z = 3) at least ρ's shard group's price; the context
communication (c > 1), per layer and direction its slowest ring pair (CP group), at least
its charge on ρ's ring pair (CP group), which summed over the span is the context price on
that pair's (group's) one path.  By the lemma each of
these is at least its least price over the mate paths of its group's n.  So
τ_chunk ≥ τ(s, 0) ≥ τ_ρ.  With v = 1 T_sync ≥ the exposed sync of stage s
(``cost.exposed_sync_ticks``: its RS_s (AG_s) is its slowest dense group's plus its
slowest expert group's, each at least ρ's group's price, and the exposed part never falls
as they grow), so T_sync ≥ σ_ρ, and T = rounds·τ_chunk + T_sync ≥ rounds·τ_ρ + σ_ρ.  Both
prices never rise with any n (the Lemma's paths only grow with it), so the least over
allocations is attained with n_d as large as the budget leaves (which the code takes).
With v > 1 a stage's sync depends on all its chunks: value(k, o) = rounds·τ_ρ alone, and
the bound adds the cheapest-path module's
:func:`~nest_cp.solvers.exact.bounds.interleaved_sync_bound`, a bound on T_sync of every
plan (T = rounds·τ_chunk + T_sync, so the two add).  ∎

On graph networks there are no tier-0 domains to count: the bound is 0 (no information).
"""

from __future__ import annotations

import math
from functools import partial

from nest_cp.cost import terms as cost
from nest_cp.model.instance import CollectiveGroup
from nest_cp.model.network import NetworkModel, Path
from nest_cp.solvers.exact.budget import Deadline
from nest_cp.solvers.exact.placement import channel_cap
from nest_cp.solvers.exact.pricing import GATHER, REDUCE, ChunkPricing
from nest_cp.solvers.exact.subproblems import ChunkOption, SubProblem, split_min_max


def mate_paths(network: NetworkModel, group_size: int, mates: int) -> list[Path]:
    """The paths a group of ``group_size`` ranks may run on when one member's tier-0
    domain holds at most ``mates`` of its other members (module docstring, Lemma); [] for
    one rank (no communication)."""
    if group_size <= 1:
        return []
    inside = [network.channel_path(0, 1)] if mates >= group_size - 1 else []
    channels = min(mates, group_size - 2) + 1  # at most this many when it leaves the node
    sizes = network.cluster.network.domain_sizes()
    return inside + [network.channel_path(tier, count)
                     for tier, size in enumerate(sizes) if tier > 0
                     and min(size, network.num_devices) >= group_size
                     for count in range(1, min(channels, channel_cap(network, tier,
                                                                     group_size)) + 1)]


def rank_lower_bound(sub: SubProblem, pricing: ChunkPricing, network: NetworkModel,
                     overlap: bool = False, deadline: Deadline | None = None,
                     overlap_gather: bool = False, interleaved_sync: int = 0) -> float:
    """The least over splits of the largest value(k, o) of the module docstring, plus
    ``interleaved_sync`` (a bound on T_sync, v > 1 only); 0 on graph networks, +inf when no
    split exists.

    Raises :class:`~nest_cp.solvers.exact.budget.OutOfTime` when ``deadline`` passes first.
    """
    if not network.is_hierarchical:
        return 0
    deadline = deadline or Deadline()
    config = sub.config
    budget = min(network.cluster.network.domain_sizes()[0], network.num_devices) - 1
    shared_partner = sub.num_stages == 2 and sub.virtual_stages > 1
    paths = _MatePaths(network)
    overlaps_tp = pricing.overlaps_tp and config.tp > 1

    def value(chunk: int, option: ChunkOption) -> int:
        has_in, has_out = chunk > 0, chunk < sub.num_chunks - 1
        partner_slots = ([(1, 1), (0, 0)] if shared_partner and has_in and has_out else
                         [(n_in, n_out) for n_in in range(2 if has_in else 1)
                          for n_out in range(2 if has_out else 1)])
        best = math.inf
        for n_in, n_out in partner_slots:
            partner_budget = budget - (1 if shared_partner and n_in else n_in + n_out)
            if partner_budget < 0:
                continue
            for n_tp in range(min(config.tp - 1, partner_budget) + 1):
                n_dense = min(pricing.dense_sync_size() - 1, partner_budget - n_tp)
                best = min(best, _allocation_value(
                    sub, pricing, paths, option, overlaps_tp, overlap, overlap_gather,
                    n_in if has_in else None, n_out if has_out else None, n_tp, n_dense))
        return best

    found = split_min_max(sub, value, deadline)
    if found is None:
        return math.inf
    return found + (interleaved_sync if sub.virtual_stages > 1 else 0)


class _MatePaths:
    """:func:`mate_paths`, memoised per (group size, mates)."""

    def __init__(self, network: NetworkModel):
        self.network = network
        self._memo: dict[tuple[int, int], list[Path]] = {}

    def __call__(self, group_size: int, mates: int) -> list[Path]:
        key = (group_size, min(mates, group_size - 1))
        if key not in self._memo:
            self._memo[key] = mate_paths(self.network, *key)
        return self._memo[key]


def _allocation_value(sub: SubProblem, pricing: ChunkPricing, paths: _MatePaths,
                      option: ChunkOption, overlaps_tp: bool, overlap: bool,
                      overlap_gather: bool, n_in: int | None, n_out: int | None, n_tp: int,
                      n_dense: int) -> int:
    """rounds·τ_ρ + σ_ρ (v = 1; rounds·τ_ρ for v > 1) for one allocation of ρ's mates
    (module docstring); ``n_in`` / ``n_out`` None: no such partner."""
    config, shard, context = sub.config, pricing.shard_size(), pricing.context_group_size()
    tp_paths = paths(config.tp, n_tp)
    ep_paths = paths(config.ep, min(n_dense, config.ep - 1))
    shard_paths = paths(shard, min(n_dense, shard - 1))
    dense_paths = paths(pricing.dense_sync_size(), n_dense)
    context_paths = paths(context, min(n_dense, context - 1))
    local_tp = tp_paths[0] if overlaps_tp and n_tp == config.tp - 1 else None

    def cheapest(price, path_list: list[Path]) -> int:
        return min((price(option, path) for path in path_list), default=0)

    tau = (pricing.compute(option)
           + pricing.collectives_on(option, {CollectiveGroup.TP: tp_paths,
                                             CollectiveGroup.EP: ep_paths}, local_tp)
           + cheapest(pricing.zero_gather, shard_paths)
           + pricing.cheapest_context(option, context_paths))
    if n_in is not None:
        tau += cheapest(pricing.transfer_into, paths(2, n_in))
    if n_out is not None:
        tau += cheapest(pricing.transfer, paths(2, n_out))
    if sub.virtual_stages > 1:
        return sub.rounds * tau
    reduce, gather = (cheapest(partial(pricing.dense_sync, phase=phase), dense_paths)
                      + cheapest(partial(pricing.expert_sync, phase=phase), shard_paths)
                      for phase in (REDUCE, GATHER))
    return sub.rounds * tau + cost.exposed_sync_ticks(
        reduce, pricing.backward(option), overlap, gather, pricing.forward(option),
        overlap_gather)
