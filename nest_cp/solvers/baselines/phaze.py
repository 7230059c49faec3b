"""``phaze``: the Phaze/Piper planner, blind to the network.

Phaze (Wang et al., ICML'24) and Piper (Tarnawski et al., NeurIPS'21) search
tensor, pipeline and data parallelism with a dynamic program but price every
transfer with one bandwidth: they do not see the network's tiers and emit no
placement.  This baseline reproduces that blindness with our own structured
DP (``nest_cp.dp.planner:solve``):

1. Plan on a copy of the instance whose network is one flat tier spanning all
   devices, with the slowest tier's bandwidth and latency (on a graph: the
   narrowest device pair's), or ``extra["flat_bandwidth_Bps"]`` /
   ``extra["flat_latency_s"]``.
2. Keep the DP's degrees, split, ZeRO stage and recomputation flags, and run
   them with the framework's default rank order — Megatron's (t, e, replica,
   stage) over the real network's canonical order — since a network-blind
   planner has no placement of its own.
3. Re-evaluate on the real network with the plan evaluator and report that
   objective.  Memory does not depend on the network, so the plan still fits.

Context parallelism: Phaze and Piper split neither the sequence nor any activation
dimension across devices (their space is tensor, pipeline and data parallelism), so this
baseline searches c = 1 only; the registry runs it on the instance restricted to c = 1 and
says so (``nest_cp.solvers.registry.context_note``).

Under a launcher (``training.launcher``) the DP searches the flat instance under the
same rules (its shape masks; the registry runs it one recompute mode at a time, as it
does the DP), so the plan is one the launcher starts; the placement does not enter the
rules.

The status is FEASIBLE (no bound: nothing is proven about the real network),
INFEASIBLE when the DP proves that nothing fits (memory is network-independent,
so that proof carries over), UNKNOWN otherwise.
"""

from __future__ import annotations

import dataclasses
import logging
import time

from nest_cp.cost.evaluate import Evaluator
from nest_cp.dp.planner import solve as dp_solve
from nest_cp.model.instance import HierarchicalNetwork, Instance, Tier
from nest_cp.model.network import NetworkModel
from nest_cp.model.plan import MEGATRON_LAYOUT
from nest_cp.model.result import SolveOptions, SolveResult, Status
from nest_cp.solvers.baselines._common import empty_result, feasible_result

logger = logging.getLogger(__name__)


def solve_phaze(instance: Instance, options: SolveOptions) -> SolveResult:
    """Network-blind DP plan, re-evaluated on the real network (module docstring)."""
    started = time.perf_counter()
    referee = Evaluator(instance)
    network = referee.network
    flat = flat_instance(instance, network, options.extra)
    blind = dp_solve(flat, options)
    if blind.plan is None:
        status = Status.INFEASIBLE if blind.status is Status.INFEASIBLE else Status.UNKNOWN
        return empty_result("phaze", status, started,
                            f"network-blind DP found no plan: {blind.message}")
    plan = blind.plan
    plan = plan.with_placement(MEGATRON_LAYOUT.placement(
        plan.config, plan.num_stages, plan.num_replicas, network.canonical_order()))
    logger.debug("phaze: flat objective %s ticks", blind.objective_ticks)
    return feasible_result("phaze", referee, plan, started, stats={
        "flat_objective_ticks": blind.objective_ticks,
        "flat_bandwidth_Bps": flat.cluster.network.tiers[0].bandwidth_Bps,
        "flat_latency_s": flat.cluster.network.tiers[0].latency_s,
        "dp_status": blind.status.value})


def flat_instance(instance: Instance, network: NetworkModel, extra: dict) -> Instance:
    """A copy of ``instance`` on one flat tier with the slowest bandwidth and its latency."""
    bandwidth_Bps, latency_s = _slowest_path(network)
    tier = Tier(name="flat", size=instance.cluster.num_devices,
                bandwidth_Bps=float(extra.get("flat_bandwidth_Bps", bandwidth_Bps)),
                latency_s=float(extra.get("flat_latency_s", latency_s)))
    cluster = dataclasses.replace(instance.cluster, network=HierarchicalNetwork((tier,)))
    return dataclasses.replace(instance, cluster=cluster)


def _slowest_path(network: NetworkModel) -> tuple[float, float]:
    """(bandwidth_Bps, latency_s) of the narrowest link class any two devices can meet
    (effective bandwidths: × efficiency).

    Hierarchical: the slowest of the tiers the cluster's devices span (latency
    breaks ties).  Graph: the narrowest device pair's bottleneck.
    """
    devices = network.num_devices
    if devices == 1:
        return 1.0, 0.0  # a single device never communicates
    cluster_network = network.cluster.network
    if isinstance(cluster_network, HierarchicalNetwork):
        spanned = [network.tier_path(tier) for tier in range(network.tier_of((0, devices - 1))
                                                             + 1)]
        path = min(spanned, key=lambda path: (path.bandwidth_Bps, -path.latency_s))
        return float(path.bandwidth_Bps), float(path.latency_s)
    pairs = (network.pair_path(a, b) for a in range(devices) for b in range(a + 1, devices))
    path = min(pairs, key=lambda path: (path.bandwidth_Bps, -path.latency_s))
    return float(path.bandwidth_Bps), float(path.latency_s)
