"""Size limits every backend can honour exactly.

Ticks are integers, and every backend must agree on them to the tick: the DP uses
int64 arrays, CP-SAT int64 coefficients, and the MILP double-precision floats,
which represent integers exactly only up to 2**53.  An instance whose iteration
time could exceed :data:`MAX_TICKS` is therefore rejected when it is loaded, with
a message saying to use a coarser tick, instead of overflowing in one backend
and not in another.
"""

from __future__ import annotations

import math
from fractions import Fraction
from typing import TYPE_CHECKING

from nest_cp.errors import InstanceFormatError

if TYPE_CHECKING:
    from nest_cp.model import Instance

MAX_TICKS = 2**53        # integers exact in every backend (doubles in the MILP)
MAX_DEVICES = 2**20      # devices in a cluster
MAX_LAYERS = 100_000     # layers in a workload chain


def iteration_ticks_upper_bound(instance: Instance) -> int:
    """A bound on the iteration time of every plan, in ticks.

    Every transfer and collective is priced at the slowest bandwidth and the largest
    latency of the network (a graph path's latency at most the sum of all links'),
    a group of g ranks as 2 v / bandwidth + 2 g latency, and recomputation adds one more
    forward.  With m <= B / (b e d) + 1 microbatches and S <= L stages, the bound is
    convex in d (terms in 1/d and in d), so its maximum over d is at d = 1 or d = N / a.
    """
    from nest_cp.model import CollectiveGroup, GraphNetwork
    from nest_cp.network import exact

    network, devices = instance.cluster.network, instance.cluster.num_devices
    if isinstance(network, GraphNetwork):
        bandwidth = min(exact(link.bandwidth_Bps) for link in network.links)
        latency = sum(exact(link.latency_s) for link in network.links)
    else:
        bandwidth = min(exact(tier.bandwidth_Bps) for tier in network.tiers)
        latency = max(exact(tier.latency_s) for tier in network.tiers)
    training = instance.training
    optimizer, layers = training.optimizer, instance.workload.num_layers

    def transfer(volume_bytes: int, group: int) -> Fraction:  # >= any collective of g ranks
        return 2 * Fraction(volume_bytes) / bandwidth + 2 * group * latency

    tick = exact(training.tick_s)
    worst = 0
    for config, microbatch in instance.choices:
        profiles = [layer.profile(config, microbatch) for layer in instance.workload.layers]
        params = sum(p.params for p in profiles)
        stage = sum(
            2 * exact(p.fwd_s) + exact(p.bwd_s)
            + sum(transfer(c.volume_bytes, config.tp if c.group is CollectiveGroup.TP
                           else config.ep) for c in p.collectives)
            for p in profiles)
        stage += 2 * transfer(max(p.out_bytes for p in profiles), 1)
        sync = 2 * transfer(params * optimizer.grad_bytes, devices)
        # each primitive term is rounded up once: at most one tick more per term
        terms = sum(3 + len(p.collectives) for p in profiles) + 4
        for dp in {1, max(1, devices // config.devices)}:
            gather = 2 * transfer(params * optimizer.weight_bytes, dp) \
                if 3 in training.zero_stages else 0
            steps = Fraction(training.global_batch, microbatch * config.ep * dp) + 1 + layers
            ticks = -(-(steps * (stage + gather) + sync) // tick) + math.ceil(steps) * terms + 2
            worst = max(worst, ticks)
    return worst


def check_tick_range(instance: Instance) -> None:
    """Raise InstanceFormatError when an iteration could exceed MAX_TICKS."""
    bound = iteration_ticks_upper_bound(instance)
    if bound >= MAX_TICKS:
        raise InstanceFormatError(
            f"expected iteration times below 2**53 ticks (exact in every backend), but one "
            f"could reach about 10**{len(str(bound)) - 1} ticks; use a coarser tick or check "
            f"the profile times and bandwidths", field="training.tick_s")
