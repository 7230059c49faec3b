"""A sub-problem lower bound with communication, for pruning before a model is built.

For a group of g devices the cheapest bottleneck it can have is among the
*candidate paths*: on a hierarchical network the tiers with a domain of at
least g devices; on a graph every (pair bandwidth, pair latency) combination.
Pricing every term on its cheapest candidate under-estimates it, so with

    τ_lb(k, o)    = compute(o) + Σ each collective on the cheapest path of its group size
                    + min gather(o)
                    + min transfer(out of layer o.first − 1)   (k > 0)
                    + min transfer(out of layer o.last)        (k < S·v − 1)
    sync_lb(s, o) = min dense(o) + min expert(o), less R(o) with overlap (at least 0)

every plan of the sub-problem has T ≥ (v·m + S − 1)·min_split max_k τ_lb +
min_split max_s sync_lb (minimising the two separately can only lower the sum).
The boundary volume into chunk k is known from o.first alone, so one DP over
(chunk, first layer) computes each min-max exactly.  With v > 1 a stage's sync
depends on all its chunks, which that DP does not see; instead, of P parameters of
a kind some stage holds at least ⌈P / S⌉ and a sync's price grows with its
parameters, so T_sync ≥ that sync on the cheapest path; with overlapped reduction
the largest exposed sync is at least the average, ≥ (Σ_kind slope·P − R) / S with
R the backward of all layers (a sync of P parameters costs at least slope·P).
"""

from __future__ import annotations

import math

from nest_cp.model.instance import RecomputeMode
from nest_cp.model.network import NetworkModel, Path
from nest_cp.solvers.exact.budget import Deadline
from nest_cp.solvers.exact.pricing import ChunkPricing
from nest_cp.solvers.exact.subproblems import ChunkOption, SubProblem


def candidate_paths(network: NetworkModel, group_size: int) -> list[Path]:
    """Every bottleneck a group of ``group_size`` distinct devices can have (a superset)."""
    if group_size <= 1:
        return []
    num_devices = network.num_devices
    if network.is_hierarchical:
        sizes = network.cluster.network.domain_sizes()
        return [network.tier_path(tier) for tier, size in enumerate(sizes)
                if min(size, num_devices) >= group_size]
    pairs = [network.pair_path(a, b) for a in range(num_devices)
             for b in range(a + 1, num_devices)]
    return [Path(bandwidth, latency) for bandwidth in {p.bandwidth_Bps for p in pairs}
            for latency in {p.latency_s for p in pairs}]


def communication_lower_bound(sub: SubProblem, pricing: ChunkPricing,
                              network: NetworkModel, overlap: bool = False,
                              deadline: Deadline | None = None) -> float:
    """(v·m + S − 1)·τ_lb + sync_lb of the module docstring; +inf if no split exists.

    Raises :class:`~nest_cp.solvers.exact.budget.OutOfTime` when ``deadline`` passes first.
    """
    deadline = deadline or Deadline()
    config = sub.config
    group_paths = {size: candidate_paths(network, size) for size in {config.tp, config.ep}}
    pair_paths = candidate_paths(network, 2)
    shard_paths = candidate_paths(network, sub.dp)
    dense_paths = candidate_paths(network, sub.dp * config.ep)

    def cheapest(price, option: ChunkOption, paths: list[Path]) -> int:
        return min((price(option, path) for path in paths), default=0)

    def tau(chunk: int, option: ChunkOption) -> int:
        total = sub.compute[option] + pricing.cheapest_collectives(option, group_paths) \
            + cheapest(pricing.zero_gather, option, shard_paths)
        if chunk > 0:
            total += cheapest(pricing.transfer_into, option, pair_paths)
        if chunk < sub.num_chunks - 1:
            total += cheapest(pricing.transfer, option, pair_paths)
        return total

    def sync(chunk: int, option: ChunkOption) -> int:
        if sub.virtual_stages > 1:
            return 0  # bounded below for the whole split by _interleaved_sync_bound
        total = cheapest(pricing.dense_sync, option, dense_paths) + \
            cheapest(pricing.expert_sync, option, shard_paths)
        return max(0, total - pricing.backward(option)) if overlap else total

    tau_lb = _min_max(sub, tau, deadline)
    sync_lb = _min_max(sub, sync, deadline)
    if tau_lb is None or sync_lb is None:
        return math.inf
    if sub.virtual_stages > 1:
        sync_lb = _interleaved_sync_bound(sub, pricing, {
            "dense": (sub.dp * config.ep, dense_paths),
            "expert": (sub.dp, shard_paths)}, overlap)
    return sub.rounds * tau_lb + sync_lb


def _interleaved_sync_bound(sub: SubProblem, pricing: ChunkPricing, groups: dict,
                            overlap: bool) -> int:
    """T_sync's lower bound for v > 1 (module docstring); groups[kind] = (size, paths)."""
    whole = ChunkOption(0, pricing.num_layers - 1, RecomputeMode.NONE)
    params = {"dense": pricing.dense_params(whole), "expert": pricing.expert_params(whole)}
    if not overlap:
        return max((min(pricing.sync_of(-(-params[kind] // sub.num_stages), size, path)
                        for path in paths)
                    for kind, (size, paths) in groups.items() if paths), default=0)
    slopes = 0
    for kind, (size, paths) in groups.items():
        forms = [pricing.sync_ticks(size, path) for path in paths]
        if params[kind] and forms and all(form is not None for form in forms):
            slopes += min(form.slope for form in forms) * params[kind]
    return max(0, math.ceil((slopes - pricing.backward(whole)) / sub.num_stages))


def _min_max(sub: SubProblem, value, deadline: Deadline) -> int | None:
    """min over contiguous splits of max over chunks of value(chunk, option)."""
    num_layers = max(o.last_layer for o in sub.options[-1]) + 1 if sub.options[-1] else 0
    best = {(sub.num_chunks, num_layers): 0}
    for chunk in reversed(range(sub.num_chunks)):
        for option in sub.options[chunk]:
            deadline.tick()
            rest = best.get((chunk + 1, option.last_layer + 1))
            if rest is None:
                continue
            candidate = max(value(chunk, option), rest)
            key = (chunk, option.first_layer)
            best[key] = min(best.get(key, candidate), candidate)
    return best.get((0, 0))
