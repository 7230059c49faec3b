"""Integer cost terms of DESIGN §3, shared by the evaluator and every backend.

Each function prices one term of the model from already-chosen quantities, so a
backend that enumerates tiers (the DP) or builds a solver model (CP-SAT, MILP)
gets exactly the integers the plan evaluator computes.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from nest_cp.model import (
    CollectiveGroup,
    CollectiveKind,
    IntraConfig,
    LayerProfile,
    Optimizer,
)
from nest_cp.network import Path, collective_ticks, p2p_ticks
from nest_cp.ticks import ceil_div, exact, to_ticks


def num_microbatches(global_batch: int, microbatch: int, config: IntraConfig, dp: int) -> int:
    """m = ceil(B / (b * e * d)): microbatches each replica runs per iteration."""
    return ceil_div(global_batch, microbatch * config.ep * dp)


def in_flight(stage: int, num_stages: int, microbatches: int) -> int:
    """k_s = min(S - s, m): microbatches stage s holds under 1F1B (s = 0 is the first stage)."""
    return min(num_stages - stage, microbatches)


def iteration_ticks(microbatches: int, num_stages: int, tau_max: int, sync: int) -> int:
    """T = (m + S - 1) * tau_max + T_sync."""
    return (microbatches + num_stages - 1) * tau_max + sync


def compute_ticks(profile: LayerProfile, tick_s: float) -> tuple[int, int]:
    """(fwd, bwd) ticks of one layer and microbatch, each rounded up once."""
    return to_ticks(exact(profile.fwd_s), tick_s), to_ticks(exact(profile.bwd_s), tick_s)


def group_size(group: CollectiveGroup, config: IntraConfig) -> int:
    return config.tp if group is CollectiveGroup.TP else config.ep


def layer_collective_ticks(profile: LayerProfile, config: IntraConfig, path: Path | None,
                           tick_s: float) -> int:
    """Intra-layer collectives of one microbatch (fwd and bwd) on the replica group's bottleneck."""
    if path is None:
        return 0
    return sum(collective_ticks(c.kind, c.volume_bytes, group_size(c.group, config), path, tick_s)
               for c in profile.collectives)


def transfer_ticks(volume_bytes: int, path: Path, tick_s: float) -> int:
    """Pipeline point-to-point transfer of one activation or gradient."""
    return p2p_ticks(volume_bytes, path, tick_s)


def zero3_gather_ticks(params: int, optimizer: Optimizer, dp: int, path: Path | None,
                       tick_s: float) -> int:
    """ZeRO-3 all-gathers of a stage's weights per microbatch: one in fwd, one in bwd."""
    if path is None or dp <= 1 or params == 0:
        return 0
    once = collective_ticks(CollectiveKind.ALL_GATHER, params * optimizer.weight_bytes, dp,
                            path, tick_s)
    return 2 * once


def sync_collective(zero: int) -> CollectiveKind:
    """Gradient sync per iteration: all-reduce for ZeRO <= 2, reduce-scatter for ZeRO-3."""
    return CollectiveKind.REDUCE_SCATTER if zero == 3 else CollectiveKind.ALL_REDUCE


def gradient_sync_ticks(params: int, optimizer: Optimizer, zero: int, group_size_: int,
                        path: Path | None, tick_s: float) -> int:
    """One gradient synchronisation of ``params`` parameters over ``group_size_`` ranks.

    A stage without parameters of a kind (e.g. no expert parameters) runs no collective.
    """
    if path is None or group_size_ <= 1 or params == 0:
        return 0
    return collective_ticks(sync_collective(zero), params * optimizer.grad_bytes, group_size_,
                            path, tick_s)


def state_bytes(params, optimizer: Optimizer, zero: int, dp: int):
    """W * (w/δ3 + g/δ2 + o/δ1), each of the three terms rounded up to whole bytes.

    δi = d when ZeRO stage z >= i, else 1.  ``params`` may be an int or an int64 array
    (the DP prices whole range matrices with this same function).
    """
    return (ceil_div(params * optimizer.weight_bytes, dp if zero >= 3 else 1)
            + ceil_div(params * optimizer.grad_bytes, dp if zero >= 2 else 1)
            + ceil_div(params * optimizer.state_bytes, dp if zero >= 1 else 1))


def activation_bytes(profiles: Sequence[LayerProfile], recompute: bool, in_flight_: int) -> int:
    """k_s * A_s + [recompute] * A_work_s for the layers of one stage."""
    if recompute:
        kept = sum(p.ckpt_bytes for p in profiles)
        work = max(p.act_bytes for p in profiles)
        return in_flight_ * kept + work
    return in_flight_ * sum(p.act_bytes for p in profiles)


def stage_memory_bytes(profiles: Sequence[LayerProfile], recompute: bool, in_flight_: int,
                       optimizer: Optimizer, zero: int, dp: int) -> int:
    """Bytes on one device of a stage (DESIGN §3 memory)."""
    params = sum(p.params for p in profiles)
    return state_bytes(params, optimizer, zero, dp) + activation_bytes(profiles, recompute,
                                                                        in_flight_)


def throughput(global_batch: int, total_ticks: int, tick_s: float) -> float:
    """Samples per second of an iteration of ``total_ticks``."""
    return float(global_batch / (total_ticks * exact(tick_s))) if total_ticks else math.inf
