"""Integer cost terms of DESIGN §3 and §3.2, shared by the evaluator and every backend.

This module owns the *primitive* terms: each function prices one term of the model
(a layer's compute and recompute, one intra-layer collective on its groups' paths,
one point-to-point transfer, one gradient sync, a ZeRO-3 gather, a stage's state
bytes, kept activations and working set, in-flight counts, T from τ and sync) from
already-chosen quantities, so a backend that enumerates tiers (the DP) or builds a
solver model (CP-SAT, MILP) gets exactly the integers the plan evaluator computes.
Group and pair bottlenecks come from :mod:`nest_cp.model.network`, tick rounding from
:mod:`nest_cp.model.ticks`.  The composition of these terms into a plan's time and memory
lives once, in the evaluator (:mod:`nest_cp.cost.evaluate`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from nest_cp.model.instance import (
    Collective,
    CollectiveGroup,
    CollectiveKind,
    CpComm,
    IntraConfig,
    LayerProfile,
    Optimizer,
    Phase,
    RecomputeMode,
)
from nest_cp.model.network import NetworkModel, Path, collective_ticks, p2p_ticks
from nest_cp.model.plan import context_groups, expert_groups, tensor_groups
from nest_cp.model.ticks import ceil_div, exact, to_ticks


def num_microbatches(global_batch: int, microbatch: int, config: IntraConfig, dp: int) -> int:
    """m = ceil(B / (b * e * d)): microbatches each replica runs per iteration."""
    return ceil_div(global_batch, microbatch * config.ep * dp)


def in_flight(stage: int, num_stages: int, microbatches: int, virtual_stages: int = 1) -> int:
    """Microbatches (chunk-microbatches when v > 1) stage s holds in flight (s = 0 first).

    v = 1: k_s = min(S - s, m) (1F1B).  v > 1: n_s = min(v m, 2 (S - s - 1) + (v - 1) S + 1),
    Megatron's interleaved warm-up count plus one (DESIGN §3.2 b).
    """
    if virtual_stages == 1:
        return min(num_stages - stage, microbatches)
    return min(virtual_stages * microbatches,
               2 * (num_stages - stage - 1) + (virtual_stages - 1) * num_stages + 1)


def iteration_ticks(microbatches: int, num_stages: int, tau_max: int, sync: int,
                    virtual_stages: int = 1) -> int:
    """T = (v m + S - 1) * tau_max + T_sync (tau_max is the slowest chunk when v > 1)."""
    return (virtual_stages * microbatches + num_stages - 1) * tau_max + sync


def compute_ticks(profile: LayerProfile, tick_s: float) -> tuple[int, int]:
    """(fwd, bwd) ticks of one layer and microbatch, each rounded up once."""
    return to_ticks(exact(profile.fwd_s), tick_s), to_ticks(exact(profile.bwd_s), tick_s)


def recompute_compute_ticks(profile: LayerProfile, mode: RecomputeMode, tick_s: float) -> int:
    """Forward compute one layer reruns per microbatch: fwd (full), sel_fwd (selective), 0.

    Rounded up once; the same tick count as the layer's forward in :func:`compute_ticks`.
    Full recomputation also reruns the forward collectives (:func:`layer_collective_ticks`
    with ``Phase.FWD``).
    """
    if mode is RecomputeMode.FULL:
        return to_ticks(exact(profile.fwd_s), tick_s)
    if mode is RecomputeMode.SELECTIVE:
        if profile.sel_fwd_s is None:
            raise ValueError("selective recomputation needs sel_fwd_s in the profile")
        return to_ticks(exact(profile.sel_fwd_s), tick_s)
    return 0


def group_size(group: CollectiveGroup, config: IntraConfig) -> int:
    return config.tp if group is CollectiveGroup.TP else config.ep


@dataclass(frozen=True, slots=True)
class GroupPaths:
    """Bottleneck paths of one stage replica's intra-layer groups (DESIGN §3.2 f).

    ``tp``: one path per TP group (the t ranks sharing an expert index, e groups);
    ``ep``: one path per EP group (the e ranks sharing a tensor index, t groups).
    None stands for a one-device group, which never communicates.
    """

    tp: tuple[Path | None, ...]
    ep: tuple[Path | None, ...]
    # every TP group of the stage replica inside one tier-0 domain (hierarchical networks):
    # where tp_comm_overlap hides TP collectives behind the GEMMs (cost model §5 e)
    tp_local: bool = False

    @classmethod
    def of_replica(cls, network: NetworkModel, devices: Sequence[int],
                   config: IntraConfig) -> GroupPaths:
        """The groups of a stage replica whose rank j sits on ``devices[j]``."""
        return cls.of_replicas(network, [devices], config)[0]

    @classmethod
    def of_replicas(cls, network: NetworkModel, replicas: Sequence[Sequence[int]],
                    config: IntraConfig) -> list[GroupPaths]:
        """:meth:`of_replica` of each replica of a stage (``replicas[r][j]``: rank j's device)."""
        hierarchical = network.is_hierarchical
        inner = network.tier_path(0) if hierarchical else None

        def path(devices: Sequence[int], group: tuple[int, ...]) -> tuple[Path | None, bool]:
            """The group's path, and whether it lies inside one tier-0 domain."""
            if len(group) == 1:
                return None, True
            members = [devices[j] for j in group]
            return network.group_path(members), hierarchical and network.tier_of(members) == 0

        tp, ep = tensor_groups(config), expert_groups(config)
        lone_ep = tuple(None for _ in ep) if all(len(group) == 1 for group in ep) else None
        inside = _inside_tier0(network, replicas, tp) if lone_ep is not None else None
        shared = None  # the one record of every replica whose TP groups lie inside tier 0
        groups = []
        for index, devices in enumerate(replicas):
            if inside is not None and inside[index]:
                if shared is None:
                    shared = cls(tp=tuple(None if len(group) == 1 else inner for group in tp),
                                 ep=lone_ep, tp_local=True)
                groups.append(shared)
                continue
            tp_paths = [path(devices, group) for group in tp]
            groups.append(cls(tp=tuple(found for found, _ in tp_paths),
                              ep=lone_ep if lone_ep is not None else tuple(
                                  path(devices, group)[0] for group in ep),
                              tp_local=hierarchical and all(inside for _, inside in tp_paths)))
        return groups

    @classmethod
    def replica_span(cls, path: Path | None) -> GroupPaths:
        """Every collective priced on one path: DESIGN §3's span of the whole t·e group.

        Not the model any more (§3.2 f prices each group on its own span); kept for
        the backends that have not moved to per-group pricing yet.
        """
        return cls((path,), (path,))

    def of(self, group: CollectiveGroup) -> tuple[Path | None, ...]:
        return self.tp if group is CollectiveGroup.TP else self.ep


def intra_collective_ticks(collective: Collective, config: IntraConfig, paths: GroupPaths,
                           tick_s: float) -> int:
    """One intra-layer collective of one microbatch: the price on its slowest group."""
    size = group_size(collective.group, config)
    return max((collective_ticks(collective.kind, collective.volume_bytes, size, path, tick_s)
                if path is not None else 0 for path in paths.of(collective.group)), default=0)


def layer_collective_ticks(profile: LayerProfile, config: IntraConfig, paths: GroupPaths,
                           tick_s: float, phase: Phase | None = None,
                           hiding: tuple[int, int] | None = None) -> int:
    """Σ over the layer's collectives (of ``phase``, or all) of each one's slowest group.

    ``hiding`` = the layer's (fwd, bwd) compute ticks when ``tp_comm_overlap`` applies to
    the stage replica (cost model §5 e: its TP groups inside tier-0 domains): then the TP
    collectives of each direction are exposed only as :func:`tp_overlap_exposed` of their
    sum behind that direction's compute; EP collectives are never hidden.
    """
    total = 0
    for direction, compute in zip((Phase.FWD, Phase.BWD), hiding or (None, None),
                                  strict=True):
        if phase is not None and direction is not phase:
            continue
        tp = sum(intra_collective_ticks(c, config, paths, tick_s) for c in profile.collectives
                 if c.phase is direction and c.group is CollectiveGroup.TP)
        ep = sum(intra_collective_ticks(c, config, paths, tick_s) for c in profile.collectives
                 if c.phase is direction and c.group is CollectiveGroup.EP)
        total += ep + (tp if compute is None else tp_overlap_exposed(tp, compute, config.tp))
    return total


def tp_overlap_exposed(collective_ticks: int, compute_ticks: int, tp: int) -> int:
    """What Megatron's ``--tp-comm-overlap`` leaves exposed of one layer's TP collectives in
    one direction (cost model §5 e): the GEMM of ``compute_ticks`` runs in t chunks and hides
    each chunk's communication behind the next one's compute, so at least one chunk of the
    C ticks shows, and all that the compute is too short to cover: max(ceil(C/t), C − X)."""
    if collective_ticks == 0:
        return 0
    return max(ceil_div(collective_ticks, tp), collective_ticks - compute_ticks)


@dataclass(frozen=True, slots=True)
class ContextPaths:
    """Paths of one stage replica's context-parallel groups (cost model v4).

    ``pairs``: the distinct paths of consecutive ranks of every CP ring (c_index order,
    the wrap from c − 1 back to 0 included), where the p2p ring sends K/V; ``groups``: one
    path per CP group, where the a2a all-to-alls run (multi-channel as any collective).
    Empty for c = 1.
    """

    pairs: tuple[Path, ...] = ()
    groups: tuple[Path | None, ...] = ()

    @classmethod
    def of_replica(cls, network: NetworkModel, devices: Sequence[int],
                   config: IntraConfig) -> ContextPaths:
        """The CP groups of a stage replica whose rank j sits on ``devices[j]``."""
        if config.cp == 1:
            return cls()
        rings = [[devices[j] for j in group] for group in context_groups(config)]
        pairs = {network.pair_path(ring[k], ring[(k + 1) % len(ring)])
                 for ring in rings for k in range(len(ring))
                 if ring[k] != ring[(k + 1) % len(ring)]}
        return cls(pairs=tuple(sorted(pairs, key=lambda p: (p.bandwidth_Bps, p.latency_s))),
                   groups=tuple(network.group_path(ring) for ring in rings))


def context_ticks(profile: LayerProfile, config: IntraConfig, comm: CpComm,
                  paths: ContextPaths, tick_s: float) -> tuple[int, int]:
    """Exposed context-parallel communication of one layer and microbatch, (forward,
    backward), on the slowest CP group of the stage replica (cost model v4).

    p2p: the forward runs c ring steps, each computing one K/V chunk (X = ceil(attn_fwd
    ticks / c)) while the next chunk travels (P = the transfer of ``cp_kv_bytes`` on the
    slowest consecutive pair), so (c − 1)·max(0, P − X) shows; the backward moves K/V and
    their gradients, (c − 1)·max(0, P2 − Xb) with P2 the transfer of 2·``cp_kv_bytes`` and
    Xb = ceil(attn_bwd ticks / c).  a2a: two all-to-alls of ``cp_a2a_bytes`` over the CP
    group in each direction, never hidden.  Recomputation reruns the forward part (the
    evaluator charges it again).  c = 1 costs (0, 0).
    """
    cp = config.cp
    if cp == 1:
        return 0, 0
    if comm is CpComm.A2A:
        if profile.cp_a2a_bytes == 0:
            return 0, 0
        once = max((collective_ticks(CollectiveKind.ALL_TO_ALL, profile.cp_a2a_bytes, cp, path,
                                     tick_s) for path in paths.groups if path is not None),
                   default=0)
        return 2 * once, 2 * once
    if profile.cp_kv_bytes == 0 or not paths.pairs:
        return 0, 0
    exposed = []
    for volume, attention_s in ((profile.cp_kv_bytes, profile.attn_fwd_s),
                                (2 * profile.cp_kv_bytes, profile.attn_bwd_s)):
        step = ceil_div(to_ticks(exact(attention_s), tick_s), cp)
        transfer = max(p2p_ticks(volume, path, tick_s) for path in paths.pairs)
        exposed.append((cp - 1) * max(0, transfer - step))
    return exposed[0], exposed[1]


def cp_buffer_bytes(profiles: Sequence[LayerProfile], cp: int, comm: CpComm) -> int:
    """The p2p ring's two K/V buffers while a layer computes: 2·max ``cp_kv_bytes`` over the
    stage's layers when c > 1 under p2p, else 0 (cost model v4)."""
    if cp == 1 or comm is not CpComm.P2P:
        return 0
    return 2 * max(p.cp_kv_bytes for p in profiles)


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
    """The gradient phase of the sync: an all-reduce for ZeRO-0, a reduce-scatter for ZeRO
    1-3 (Megatron's distributed optimizer, docs/cost-model.md §5 c; ZeRO-3's gathers are in τ)."""
    return CollectiveKind.ALL_REDUCE if zero == 0 else CollectiveKind.REDUCE_SCATTER


def gathers_weights(zero: int) -> bool:
    """Whether the sync ends with an all-gather of the updated weights (ZeRO 1 and 2)."""
    return zero in (1, 2)


def gradient_sync_parts(params: int, optimizer: Optimizer, zero: int, group_size_: int,
                        path: Path | None, tick_s: float) -> tuple[int, int]:
    """(gradient phase, weight gather) of one sync of ``params`` parameters, each rounded alone.

    z = 0: (all-reduce of P·g, 0); z = 1, 2: (reduce-scatter of P·g, all-gather of P·w);
    z = 3: (reduce-scatter of P·g, 0).  A stage without parameters of a kind (e.g. no expert
    parameters) runs no collective.
    """
    if path is None or group_size_ <= 1 or params == 0:
        return 0, 0
    reduce = collective_ticks(sync_collective(zero), params * optimizer.grad_bytes, group_size_,
                              path, tick_s)
    gather = collective_ticks(CollectiveKind.ALL_GATHER, params * optimizer.weight_bytes,
                              group_size_, path, tick_s) if gathers_weights(zero) else 0
    return reduce, gather


def gradient_sync_ticks(params: int, optimizer: Optimizer, zero: int, group_size_: int,
                        path: Path | None, tick_s: float) -> int:
    """One whole gradient synchronisation: the sum of :func:`gradient_sync_parts`."""
    return sum(gradient_sync_parts(params, optimizer, zero, group_size_, path, tick_s))


def exposed_sync_ticks(reduce: int, backward: int, overlap: bool, gather: int = 0,
                       forward: int = 0, overlap_gather: bool = False) -> int:
    """The part of a stage's gradient sync the iteration waits for (docs/cost-model.md §3, §5 d).

    With ``overlap_grad_reduce`` the gradient phase runs in buckets during the backward of
    the last microbatch: max(0, reduce - R), R = the stage's backward ticks of one
    microbatch; with ``overlap_param_gather`` the weight gather runs behind the next
    iteration's first forward: max(0, gather - F), F = its forward ticks.  The exposed sync
    is the sum of the two parts.
    """
    return ((max(0, reduce - backward) if overlap else reduce)
            + (max(0, gather - forward) if overlap_gather else gather))


def state_bytes(params, optimizer: Optimizer, zero: int, dp: int):
    """W * (w/δ3 + g/δ2 + o/δ1), each of the three terms rounded up to whole bytes.

    δi = d when ZeRO stage z >= i, else 1.  ``params`` may be an int or an int64 array
    (the DP prices whole range matrices with this same function).
    """
    return (ceil_div(params * optimizer.weight_bytes, dp if zero >= 3 else 1)
            + ceil_div(params * optimizer.grad_bytes, dp if zero >= 2 else 1)
            + ceil_div(params * optimizer.state_bytes, dp if zero >= 1 else 1))


def zero3_buffer_bytes(profiles: Sequence[LayerProfile], optimizer: Optimizer, zero: int) -> int:
    """ZeRO-3 gather buffers (DESIGN §3.2 d): the unsharded weights of the layer computing
    and of the one prefetched, 2 * max over the stage's layers of params * w; 0 for z < 3."""
    if zero != 3:
        return 0
    return 2 * max(p.params for p in profiles) * optimizer.weight_bytes


def kept_activation_bytes(profiles: Sequence[LayerProfile], mode: RecomputeMode) -> int:
    """Activation bytes one microbatch leaves on a device over ``profiles`` (one chunk).

    none: Σ act_bytes; full: Σ ckpt_bytes; selective: Σ sel_act_bytes (DESIGN §3.2 a).
    """
    if mode is RecomputeMode.FULL:
        return sum(p.ckpt_bytes for p in profiles)
    if mode is RecomputeMode.SELECTIVE:
        return sum(_selective_act_bytes(p) for p in profiles)
    return sum(p.act_bytes for p in profiles)


def working_set_bytes(profiles: Sequence[LayerProfile], mode: RecomputeMode) -> int:
    """Bytes rebuilt while one layer is recomputed: full, the largest act_bytes; selective,
    the largest act_bytes - sel_act_bytes; none, 0 (DESIGN §3.2 a)."""
    if mode is RecomputeMode.FULL:
        return max(p.act_bytes for p in profiles)
    if mode is RecomputeMode.SELECTIVE:
        return max(p.act_bytes - _selective_act_bytes(p) for p in profiles)
    return 0


def _selective_act_bytes(profile: LayerProfile) -> int:
    if profile.sel_act_bytes is None:
        raise ValueError("selective recomputation needs sel_act_bytes in the profile")
    return profile.sel_act_bytes


def stage_memory_bytes(chunks: Sequence[Sequence[LayerProfile]], mode: RecomputeMode,
                       in_flight_: int, optimizer: Optimizer, zero: int, dp: int,
                       cp: int = 1, cp_comm: CpComm = CpComm.P2P) -> int:
    """Bytes on one device of a pipeline stage whose chunks hold ``chunks`` (DESIGN §3, §3.2).

    W_s (w/δ3 + g/δ2 + o/δ1) + [z = 3] buffers + in_flight * max over chunks of the
    chunk's kept activations + the working set; with v = 1 (one chunk) the activations
    are §3's k_s A_s.  ``in_flight_`` is :func:`in_flight`'s count for the stage.  With
    context width ``cp`` the ZeRO shards are over d·c ranks and the p2p ring adds its K/V
    buffers (:func:`cp_buffer_bytes`; cost model v4).
    """
    layers = [p for chunk in chunks for p in chunk]
    params = sum(p.params for p in layers)
    return (state_bytes(params, optimizer, zero, dp * cp)
            + zero3_buffer_bytes(layers, optimizer, zero)
            + in_flight_ * max(kept_activation_bytes(chunk, mode) for chunk in chunks)
            + working_set_bytes(layers, mode) + cp_buffer_bytes(layers, cp, cp_comm))


def throughput(global_batch: int, total_ticks: int, tick_s: float) -> float:
    """Samples per second of an iteration of ``total_ticks``."""
    return float(global_batch / (total_ticks * exact(tick_s))) if total_ticks else math.inf


def flops_per_iteration(layer_flops: Sequence[float], config: IntraConfig, microbatch: int,
                        global_batch: int) -> Fraction:
    """B samples' worth of the given per-device, per-microbatch forward FLOPs (DESIGN §3.2 e).

    A layer's ``flops`` is one device's share of one microbatch step, which runs on the
    t·c·e devices of a replica and processes b·e samples: per sample flops·t·c·e / (b·e).
    """
    per_step = sum(exact(f) for f in layer_flops) * config.devices
    return per_step * global_batch / (microbatch * config.ep)


def utilisation(flops: Fraction, total_ticks: int, tick_s: float, devices: int,
                peak_flops_per_s: float) -> float | None:
    """flops / (T * devices * peak): MFU or HFU of an iteration; None for T = 0."""
    if total_ticks == 0:
        return None
    return float(flops / (total_ticks * exact(tick_s) * devices * exact(peak_flops_per_s)))


def _inside_tier0(network: NetworkModel, replicas: Sequence[Sequence[int]],
                  tp: Sequence[tuple[int, ...]]) -> np.ndarray | None:
    """Per replica, whether each of its TP groups has distinct devices inside one tier-0
    domain (then its path is tier 0's, docs/cost-model.md §5 a, and §5 e may hide it),
    computed over all replicas at once; None on a graph network or without replicas."""
    if not network.is_hierarchical or not replicas:
        return None
    devices = np.asarray(replicas, dtype=np.int64).reshape(len(replicas), -1)
    inside = np.ones(len(replicas), dtype=bool)
    for group in tp:
        if len(group) > 1:
            members = np.sort(devices[:, list(group)], axis=1)
            inside &= (network.tier_of_pairs(members[:, 0], members[:, -1]) == 0) \
                & (np.diff(members, axis=1) != 0).all(axis=1)
    return inside
