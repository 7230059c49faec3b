"""A sub-problem lower bound with communication, for pruning before a model is built.

For a group of g devices the cheapest bottleneck it can have is among the
*candidate paths*: on a hierarchical network the tiers with a domain of at
least g devices, each with every channel count k a group of g devices can have
there (cost model §5 a: a group leaving its tier-0 domain touches two of them
with k members each at least, so k <= g/2, and no k beyond
``max_useful_channels`` prices faster; so the paths of k = 1..min(g/2, that) hold
the price of every k, the cheapest among them); on a graph every (pair
bandwidth, pair latency) combination.
Pricing every term on its cheapest candidate under-estimates it, so with

    τ_lb(k, o)    = compute(o) + Σ each collective on the cheapest path of its group size
                    (with tp_comm_overlap, at most the EP ones so priced plus the TP ones
                    overlapped on the tier-0 path: cost model §5 e)
                    + min gather(o)
                    + min context(o)   (c > 1: DESIGN §3.4, ChunkPricing.cheapest_context)
                    + min transfer(out of layer o.first − 1)   (k > 0)
                    + min transfer(out of layer o.last)        (k < S·v − 1)
    sync_lb(s, o) = exposed(min RS_dense(o) + min RS_expert(o), R(o),
                            min AG_dense(o) + min AG_expert(o), F(o))

with exposed(RS, R, AG, F) = max(0, RS − R) or RS, plus max(0, AG − F) or AG, as the
overlap flags say (cost model §5 c, d: the stage's RS_s (AG_s) is its slowest dense
group's plus its slowest expert group's, each at least the cheapest candidate's, and
exposed grows with both), every plan of the sub-problem has T ≥ (v·m + S − 1)·min_split max_k τ_lb +
min_split max_s sync_lb (minimising the two separately can only lower the sum).
With context width c > 1 (DESIGN §3.4) the same holds with the groups' sizes of §3.4:
the ZeRO-3 gathers and the expert sync run over the d·c ranks of a shard group, the
dense sync over d·e·c ranks, and the context term is each stage replica's exposed ring
(all-to-alls), at least its price on one fixed ring pair (CP group) of the replica, so at
least the least such price over the candidate paths of a pair (a group of c) —
:meth:`~nest_cp.solvers.exact.pricing.ChunkPricing.cheapest_context`.
The boundary volume into chunk k is known from o.first alone, so one DP over
(chunk, first layer) computes each min-max exactly.  With v > 1 a stage's sync
depends on all its chunks, which that DP does not see; instead, of P parameters of
a kind some stage holds at least ⌈P / S⌉ and a sync's price grows with its
parameters, so T_sync ≥ that sync (RS + AG) on the cheapest path; with an
overlap flag the largest exposed sync is at least the average, ≥ (Σ_kind,phase
slope·P − [overlap_grad_reduce]·R − [overlap_param_gather]·F) / S with R (F) the
backward (forward) of all layers (a phase of P parameters costs at least slope·P,
and max(0, x − R) ≥ x − R).
"""

from __future__ import annotations

import math
from functools import partial

from nest_cp.cost import terms as cost
from nest_cp.model.instance import RecomputeMode
from nest_cp.model.network import NetworkModel, Path
from nest_cp.solvers.exact.budget import Deadline
from nest_cp.solvers.exact.placement import channel_cap
from nest_cp.solvers.exact.pricing import GATHER, REDUCE, ChunkPricing
from nest_cp.solvers.exact.rank_bounds import rank_lower_bound
from nest_cp.solvers.exact.subproblems import ChunkOption, SubProblem, split_min_max


def candidate_paths(network: NetworkModel, group_size: int) -> list[Path]:
    """Every bottleneck a group of ``group_size`` distinct devices can have (a superset)."""
    if group_size <= 1:
        return []
    num_devices = network.num_devices
    if network.is_hierarchical:
        sizes = network.cluster.network.domain_sizes()
        return [network.channel_path(tier, channels) for tier, size in enumerate(sizes)
                if min(size, num_devices) >= group_size
                for channels in range(1, channel_cap(network, tier, group_size) + 1)]
    pairs = [network.pair_path(a, b) for a in range(num_devices)
             for b in range(a + 1, num_devices)]
    return [Path(bandwidth, latency) for bandwidth in {p.bandwidth_Bps for p in pairs}
            for latency in {p.latency_s for p in pairs}]


def local_tp_path(network: NetworkModel, overlaps_tp: bool, tp: int) -> Path | None:
    """The path of a TP group of ``tp`` devices inside one tier-0 domain, when
    ``tp_comm_overlap`` (``overlaps_tp``) can hide TP collectives there (cost model §5 e);
    None when it cannot: the flag off, no TP group, a graph network (no tier-0 domains) or
    tier-0 domains smaller than a TP group."""
    if not overlaps_tp or tp <= 1 or not network.is_hierarchical:
        return None
    if min(network.cluster.network.domain_sizes()[0], network.num_devices) < tp:
        return None
    return network.channel_path(0, 1)


def communication_lower_bound(sub: SubProblem, pricing: ChunkPricing,
                              network: NetworkModel, overlap: bool = False,
                              deadline: Deadline | None = None,
                              overlap_gather: bool = False) -> float:
    """The larger of :func:`cheapest_path_bound` and
    :func:`~nest_cp.solvers.exact.rank_bounds.rank_lower_bound` (each a lower bound on every
    plan of the sub-problem, so their maximum is one); +inf if no split exists.

    Raises :class:`~nest_cp.solvers.exact.budget.OutOfTime` when ``deadline`` passes first.
    """
    deadline = deadline or Deadline()
    cheapest, interleaved_sync = _cheapest_path_bound(sub, pricing, network, overlap, deadline,
                                                      overlap_gather)
    if math.isinf(cheapest):
        return cheapest
    return max(cheapest, rank_lower_bound(sub, pricing, network, overlap, deadline,
                                          overlap_gather, interleaved_sync))


def cheapest_path_bound(sub: SubProblem, pricing: ChunkPricing, network: NetworkModel,
                        overlap: bool = False, deadline: Deadline | None = None,
                        overlap_gather: bool = False) -> float:
    """(v·m + S − 1)·τ_lb + sync_lb of the module docstring; +inf if no split exists.

    Raises :class:`~nest_cp.solvers.exact.budget.OutOfTime` when ``deadline`` passes first.
    """
    return _cheapest_path_bound(sub, pricing, network, overlap, deadline or Deadline(),
                                overlap_gather)[0]


def _cheapest_path_bound(sub: SubProblem, pricing: ChunkPricing, network: NetworkModel,
                         overlap: bool, deadline: Deadline,
                         overlap_gather: bool) -> tuple[float, int]:
    """:func:`cheapest_path_bound` and its T_sync bound for v > 1 (0 for v = 1)."""
    config = sub.config
    group_paths = {size: candidate_paths(network, size) for size in {config.tp, config.ep}}
    pair_paths = candidate_paths(network, 2)
    shard_paths = candidate_paths(network, pricing.shard_size())
    dense_paths = candidate_paths(network, pricing.dense_sync_size())
    context_paths = candidate_paths(network, pricing.context_group_size())
    local_tp = local_tp_path(network, pricing.overlaps_tp, config.tp)

    def cheapest(price, option: ChunkOption, paths: list[Path]) -> int:
        return min((price(option, path) for path in paths), default=0)

    def tau(chunk: int, option: ChunkOption) -> int:
        total = sub.compute[option] + pricing.cheapest_collectives(option, group_paths, local_tp) \
            + cheapest(pricing.zero_gather, option, shard_paths) \
            + pricing.cheapest_context(option, context_paths)
        if chunk > 0:
            total += cheapest(pricing.transfer_into, option, pair_paths)
        if chunk < sub.num_chunks - 1:
            total += cheapest(pricing.transfer, option, pair_paths)
        return total

    def sync(chunk: int, option: ChunkOption) -> int:
        if sub.virtual_stages > 1:
            return 0  # bounded below for the whole split by interleaved_sync_bound
        reduce, gather = (cheapest(partial(pricing.dense_sync, phase=phase), option,
                                   dense_paths)
                          + cheapest(partial(pricing.expert_sync, phase=phase), option,
                                     shard_paths) for phase in (REDUCE, GATHER))
        return cost.exposed_sync_ticks(reduce, pricing.backward(option), overlap, gather,
                                       pricing.forward(option), overlap_gather)

    tau_lb = split_min_max(sub, tau, deadline)
    sync_lb = split_min_max(sub, sync, deadline)
    if tau_lb is None or sync_lb is None:
        return math.inf, 0
    interleaved_sync = 0
    if sub.virtual_stages > 1:
        sync_lb = interleaved_sync = interleaved_sync_bound(sub, pricing, {
            "dense": (pricing.dense_sync_size(), dense_paths),
            "expert": (pricing.shard_size(), shard_paths)}, overlap, overlap_gather)
    return sub.rounds * tau_lb + sync_lb, interleaved_sync


def interleaved_sync_bound(sub: SubProblem, pricing: ChunkPricing, groups: dict,
                           overlap: bool, overlap_gather: bool) -> int:
    """T_sync's lower bound for v > 1 (module docstring); groups[kind] = (size, paths)."""
    whole = ChunkOption(0, pricing.num_layers - 1, RecomputeMode.NONE)
    params = {"dense": pricing.dense_params(whole), "expert": pricing.expert_params(whole)}
    if not overlap and not (overlap_gather and pricing.gathers_weights):
        return max((min(pricing.sync_of(-(-params[kind] // sub.num_stages), size, path)
                        for path in paths)
                    for kind, (size, paths) in groups.items() if paths), default=0)
    slopes = 0
    for kind, (size, paths) in groups.items():
        for phase in (REDUCE, GATHER):
            forms = [pricing.sync_ticks(size, path, phase) for path in paths]
            if params[kind] and forms and all(form is not None for form in forms):
                slopes += min(form.slope for form in forms) * params[kind]
    hidden = (pricing.backward(whole) if overlap else 0) \
        + (pricing.forward(whole) if overlap_gather else 0)
    return max(0, math.ceil((slopes - hidden) / sub.num_stages))
