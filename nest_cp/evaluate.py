"""The plan evaluator: the referee every backend's plan is checked against (DESIGN §3, §3.2).

Written for clarity, not speed.  ``evaluate(instance, plan)`` walks every chunk,
stage, replica and rank of the plan, prices each term with :mod:`nest_cp.cost` on
the devices the plan actually uses, and returns an :class:`Evaluation` with the
per-stage and per-chunk breakdown, the iteration time in ticks, MFU / HFU and the
list of violations.  Plans without a placement get the default Megatron layout
(t, e, replica, stage).

The composition.  The layers are split into S·v chunks (v = 1: a chunk is a stage);
chunk k runs on stage s = k mod S with that stage's recompute mode.  Per microbatch,
chunk k on replica r costs

    τ_c(k, r) = Σ (fwd + bwd) + recompute + collectives + recv activation + recv gradient
                + [z = 3] ZeRO-3 gathers of the chunk's parameters,

where recompute is Σ fwd plus the forward collectives once more (full), Σ sel_fwd
(selective) or 0; each intra-layer collective is priced on its own TP or EP group
and costs its slowest group; the receives come from chunks k − 1 and k + 1 on the
same intra-stage rank j (the slowest j pays).  With τ = max over chunks and replicas,

    T = (v·m + S − 1)·τ + max_s exposed(sync_s),

exposed(sync_s) = sync_s, or max(0, sync_s − R_s) with ``overlap_grad_reduce``
(R_s = the stage's backward ticks of one microbatch).  Memory of stage s: its state,
ZeRO-3 buffers, in-flight microbatches times the largest chunk's kept activations,
and the recompute working set (:func:`nest_cp.cost.stage_memory_bytes`).
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

from nest_cp import cost
from nest_cp.model import Instance, LayerProfile, Phase, RecomputeMode, Strategy
from nest_cp.network import NetworkModel, exact
from nest_cp.plan import MEGATRON_LAYOUT, Plan
from nest_cp.sdp import SdpReport, plan_violations, price_sdp


@dataclass(frozen=True, slots=True)
class ChunkReport:
    """One chunk (a stage when v = 1): its time per microbatch on the slowest replica.

    The terms are those of that replica; ``recompute_ticks`` is everything recomputation
    adds (the forward compute rerun, and under full recomputation the forward
    collectives once more).
    """

    index: int
    stage: int
    first_layer: int
    last_layer: int
    time_ticks: int
    compute_ticks: int
    recompute_ticks: int
    collective_ticks: int
    recv_activation_ticks: int
    recv_gradient_ticks: int
    zero_gather_ticks: int

    def as_dict(self) -> dict:
        return {"chunk": self.index, "stage": self.stage, "first_layer": self.first_layer,
                "last_layer": self.last_layer, "time_ticks": self.time_ticks,
                "compute_ticks": self.compute_ticks, "recompute_ticks": self.recompute_ticks,
                "collective_ticks": self.collective_ticks,
                "recv_activation_ticks": self.recv_activation_ticks,
                "recv_gradient_ticks": self.recv_gradient_ticks,
                "zero_gather_ticks": self.zero_gather_ticks}


@dataclass(frozen=True, slots=True)
class StageReport:
    """One pipeline stage: its chunks (one when v = 1), sync and memory.

    ``time_ticks`` and its terms (``compute_ticks`` ...) are those of the stage's slowest
    chunk.  ``sync_ticks`` is the stage's whole gradient sync, ``exposed_sync_ticks`` the
    part the iteration waits for (all of it unless gradient reduction overlaps the
    ``backward_ticks`` of one microbatch).
    """

    index: int
    recompute: RecomputeMode
    chunks: tuple[ChunkReport, ...]
    sync_ticks: int
    backward_ticks: int
    exposed_sync_ticks: int
    in_flight: int
    memory_bytes: int
    memory_limit_bytes: int

    @property
    def slowest_chunk(self) -> ChunkReport:
        """The chunk with the largest time (the first of them on a tie)."""
        return max(self.chunks, key=lambda chunk: chunk.time_ticks)

    @property
    def time_ticks(self) -> int:
        return self.slowest_chunk.time_ticks

    @property
    def compute_ticks(self) -> int:
        return self.slowest_chunk.compute_ticks

    @property
    def recompute_ticks(self) -> int:
        return self.slowest_chunk.recompute_ticks

    @property
    def collective_ticks(self) -> int:
        return self.slowest_chunk.collective_ticks

    @property
    def recv_activation_ticks(self) -> int:
        return self.slowest_chunk.recv_activation_ticks

    @property
    def recv_gradient_ticks(self) -> int:
        return self.slowest_chunk.recv_gradient_ticks

    @property
    def zero_gather_ticks(self) -> int:
        return self.slowest_chunk.zero_gather_ticks

    @property
    def first_layer(self) -> int:
        """The first layer the stage holds (with v > 1 its chunks are not contiguous)."""
        return self.chunks[0].first_layer

    @property
    def last_layer(self) -> int:
        """The last layer the stage holds (with v > 1 its chunks are not contiguous)."""
        return self.chunks[-1].last_layer

    @property
    def fits(self) -> bool:
        return self.memory_bytes <= self.memory_limit_bytes


@dataclass(frozen=True, slots=True)
class Evaluation:
    """Outcome of evaluating a plan; ``objective_ticks`` is None when the plan is malformed.

    ``tau_max_ticks`` is the slowest chunk's time (the slowest stage's when v = 1);
    ``sync_ticks`` the largest stage sync, ``exposed_sync_ticks`` the T_sync of the
    objective (equal unless gradient reduction overlaps).  ``mfu`` / ``hfu`` are None
    where a profile lacks ``flops`` (HFU: a selective stage lacks ``sel_flops``) or the
    cluster its ``peak_flops_per_s``.
    """

    plan: Plan
    violations: tuple[str, ...]
    stages: tuple[StageReport, ...] = ()
    malformed_fields: tuple[str, ...] = ()  # plan fields of the violations that stop pricing
    num_microbatches: int = 0
    tau_max_ticks: int = 0
    sync_ticks: int = 0
    exposed_sync_ticks: int = 0
    objective_ticks: int | None = None
    iteration_time_s: float | None = None
    throughput_samples_per_s: float | None = None
    throughput_tokens_per_s: float | None = None
    mfu: float | None = None
    hfu: float | None = None
    sdp: SdpReport | None = None  # SDP plans (DESIGN §7): per-worker terms, T_eff

    @property
    def feasible(self) -> bool:
        return not self.violations

    @property
    def effective(self) -> Fraction | None:
        """FLOP-equivalent time T_eff (DESIGN §7): the objective itself for plain plans."""
        if self.objective_ticks is None:
            return None
        return self.sdp.effective if self.sdp is not None else Fraction(self.objective_ticks)

    @property
    def chunks(self) -> tuple[ChunkReport, ...]:
        """Every chunk in layer order."""
        return tuple(sorted((c for s in self.stages for c in s.chunks), key=lambda c: c.index))

    def as_dict(self) -> dict:
        return {
            "feasible": self.feasible,
            "violations": list(self.violations),
            "objective_ticks": self.objective_ticks,
            "iteration_time_s": self.iteration_time_s,
            "throughput_samples_per_s": self.throughput_samples_per_s,
            "throughput_tokens_per_s": self.throughput_tokens_per_s,
            "mfu": self.mfu,
            "hfu": self.hfu,
            "virtual_stages": self.plan.virtual_stages,
            "strategy": self.plan.strategy.value,
            **({"sdp": self.sdp.as_dict()} if self.sdp is not None else {}),
            "num_microbatches": self.num_microbatches,
            "tau_max_ticks": self.tau_max_ticks,
            "sync_ticks": self.sync_ticks,
            "exposed_sync_ticks": self.exposed_sync_ticks,
            "stages": [{
                "stage": s.index, "first_layer": s.first_layer, "last_layer": s.last_layer,
                "recompute": s.recompute.value, "time_ticks": s.time_ticks,
                "compute_ticks": s.compute_ticks, "recompute_ticks": s.recompute_ticks,
                "collective_ticks": s.collective_ticks,
                "recv_activation_ticks": s.recv_activation_ticks,
                "recv_gradient_ticks": s.recv_gradient_ticks,
                "zero_gather_ticks": s.zero_gather_ticks, "sync_ticks": s.sync_ticks,
                "backward_ticks": s.backward_ticks, "exposed_sync_ticks": s.exposed_sync_ticks,
                "in_flight": s.in_flight, "memory_bytes": s.memory_bytes,
                "memory_limit_bytes": s.memory_limit_bytes,
                "chunks": [c.as_dict() for c in s.chunks],
            } for s in self.stages],
        }


def evaluate(instance: Instance, plan: Plan, network: NetworkModel | None = None) -> Evaluation:
    """Evaluate ``plan`` on ``instance``; never raises for a plan that merely does not fit."""
    network = network or NetworkModel(instance.cluster)
    problems = _structural_violations(instance, plan)
    if plan.strategy is Strategy.SDP:  # its own rules first: they explain the rest
        problems = plan_violations(instance, plan) + problems
    elif Strategy.DP not in instance.training.strategies:
        problems.append(("strategy", f"strategy 'dp' not allowed (allowed: "
                                     f"{[s.value for s in instance.training.strategies]})"))
    if problems:
        return Evaluation(plan=plan, violations=tuple(text for _, text in problems),
                          malformed_fields=tuple(name for name, _ in problems))
    if plan.placement is None:
        plan = plan.with_placement(MEGATRON_LAYOUT.placement(
            plan.config, plan.num_stages, plan.num_replicas, network.canonical_order()))
    if plan.strategy is Strategy.SDP:
        return _sdp_evaluation(instance, plan, network)
    return _price(instance, plan, network)


def _sdp_evaluation(instance: Instance, plan: Plan, network: NetworkModel) -> Evaluation:
    """An SDP plan (DESIGN §7), priced by :func:`nest_cp.sdp.price_sdp`; MFU and HFU are null."""
    report = price_sdp(instance, plan, network)
    training = instance.training
    seconds = report.objective_ticks * exact(training.tick_s)
    samples = float(training.global_batch / seconds) if seconds else None
    return Evaluation(
        plan=plan, violations=report.violations, num_microbatches=report.num_microbatches,
        tau_max_ticks=report.tau_max_ticks, sync_ticks=report.sync_ticks,
        exposed_sync_ticks=report.exposed_sync_ticks, objective_ticks=report.objective_ticks,
        iteration_time_s=float(seconds), throughput_samples_per_s=samples,
        throughput_tokens_per_s=samples * training.seq_len if samples is not None else None,
        sdp=report)


# ------------------------------------------------------------------ structure


def _structural_violations(instance: Instance, plan: Plan) -> list[tuple[str, str]]:
    """(plan field, message) for everything that makes a plan meaningless, not merely too big."""
    workload, training = instance.workload, instance.training
    found: list[tuple[str, str]] = []
    if not workload.has_profile(plan.config, plan.microbatch):
        found.append(("config", f"unknown configuration: no profile for tp={plan.config.tp}, "
                     f"ep={plan.config.ep}, microbatch={plan.microbatch}"))
    if plan.microbatch not in training.microbatches:
        found.append(("microbatch", f"microbatch {plan.microbatch} not allowed "
                                    f"(allowed: {list(training.microbatches)})"))
    if plan.zero not in training.zero_stages:
        found.append(("zero", f"ZeRO stage {plan.zero} not allowed "
                              f"(allowed: {list(training.zero_stages)})"))
    if plan.virtual_stages not in training.virtual_stages:
        found.append(("virtual_stages", f"{plan.virtual_stages} virtual stages not allowed "
                                        f"(allowed: {list(training.virtual_stages)})"))
    found.extend(_split_violations(instance, plan))
    shaped = plan.num_chunks % plan.virtual_stages == 0
    if shaped:
        found.extend(_interleaving_violations(instance, plan))
        used, available = plan.num_devices_used, instance.cluster.num_devices
        if used > available:
            found.append(("dp", f"plan needs a*S*d = {used} devices, cluster has {available}"))
        if plan.placement is not None:
            found.extend(_placement_violations(plan, available))
    return found


def _split_violations(instance: Instance, plan: Plan) -> list[tuple[str, str]]:
    """Contiguous non-empty chunks covering every layer, with allowed recompute modes."""
    allowed = instance.training.recompute_modes
    found: list[tuple[str, str]] = []
    expected_first = 0
    for index, stage in enumerate(plan.stages):
        if stage.first_layer != expected_first:
            found.append((f"stages[{index}].first_layer",
                          f"stage {index} starts at layer {stage.first_layer}, expected "
                          f"{expected_first} (stages must be contiguous)"))
        if stage.last_layer < stage.first_layer:
            found.append((f"stages[{index}].last_layer",
                          f"stage {index} is empty (layers {stage.first_layer}.."
                          f"{stage.last_layer})"))
        if stage.recompute not in allowed:
            found.append((f"stages[{index}].recompute",
                          f"stage {index} recomputes {stage.recompute.value!r}, not allowed "
                          f"(allowed: {[m.value for m in allowed]})"))
        expected_first = stage.last_layer + 1
    num_layers = instance.workload.num_layers
    if expected_first != num_layers:
        found.append(("stages", f"stages cover layers 0..{expected_first - 1}, expected "
                                f"0..{num_layers - 1}"))
    if plan.num_chunks % plan.virtual_stages:
        found.append(("stages", f"{plan.num_chunks} stages do not split into "
                                f"{plan.virtual_stages} chunks per pipeline stage (expected a "
                                f"multiple of virtual_stages = {plan.virtual_stages})"))
    return found


def _interleaving_violations(instance: Instance, plan: Plan) -> list[tuple[str, str]]:
    """With v > 1: S >= 2, m a multiple of S (Megatron's rule), one mode per stage."""
    v, num_stages = plan.virtual_stages, plan.num_stages
    if v == 1:
        return []
    found: list[tuple[str, str]] = []
    if num_stages < 2:
        found.append(("virtual_stages", f"{v} virtual stages need at least 2 pipeline stages, "
                                        f"got S = {num_stages}"))
    else:
        microbatches = cost.num_microbatches(instance.training.global_batch, plan.microbatch,
                                             plan.config, plan.num_replicas)
        if microbatches % num_stages:
            found.append(("virtual_stages", f"{v} virtual stages need the microbatches per "
                                            f"replica m = {microbatches} to be a multiple of "
                                            f"S = {num_stages}"))
    for chunk in range(num_stages, plan.num_chunks):
        stage = plan.stage_of_chunk(chunk)
        mode, expected = plan.stages[chunk].recompute, plan.stage_recompute(stage)
        if mode is not expected:
            found.append((f"stages[{chunk}].recompute",
                          f"chunk {chunk} of pipeline stage {stage} recomputes {mode.value!r}, "
                          f"but its chunk {stage} recomputes {expected.value!r} (the chunks of a "
                          f"stage share one mode)"))
    return found


def _placement_violations(plan: Plan, num_devices: int) -> list[tuple[str, str]]:
    found: list[tuple[str, str]] = []
    placement = plan.placement
    shape_ok = len(placement) == plan.num_stages and all(
        len(replicas) == plan.num_replicas and all(len(ranks) == plan.devices_per_replica
                                         for ranks in replicas)
        for replicas in placement)
    if not shape_ok:
        return [("placement", f"placement shape is not [S={plan.num_stages}][d={plan.num_replicas}]"
                              f"[a={plan.devices_per_replica}]")]
    seen: dict[int, tuple[int, int, int]] = {}
    for stage, replicas in enumerate(placement):
        for replica, ranks in enumerate(replicas):
            for rank, device in enumerate(ranks):
                if not (isinstance(device, int) and 0 <= device < num_devices):
                    found.append((f"placement[{stage}][{replica}][{rank}]",
                                  f"rank (stage {stage}, replica {replica}, rank {rank}) on "
                                  f"device {device!r}, out of range 0..{num_devices - 1}"))
                elif device in seen:
                    found.append((f"placement[{stage}][{replica}][{rank}]",
                                  f"device {device} reused by ranks {seen[device]} and "
                                  f"{(stage, replica, rank)}"))
                else:
                    seen[device] = (stage, replica, rank)
    return found


# ------------------------------------------------------------------ pricing


def _price(instance: Instance, plan: Plan, network: NetworkModel) -> Evaluation:
    training = instance.training
    tick_s, optimizer = training.tick_s, training.optimizer
    num_stages, dp, virtual = plan.num_stages, plan.num_replicas, plan.virtual_stages
    microbatches = cost.num_microbatches(training.global_batch, plan.microbatch, plan.config, dp)
    limit = instance.cluster.usable_hbm_bytes
    profiles = [[instance.workload.layers[layer].profile(plan.config, plan.microbatch)
                 for layer in chunk.layers] for chunk in plan.stages]
    chunks = [_price_chunk(instance, plan, network, profiles, k) for k in range(plan.num_chunks)]

    reports, violations = [], []
    for s in range(num_stages):
        own = plan.chunks_of_stage(s)
        layers = [p for k in own for p in profiles[k]]
        mode = plan.stage_recompute(s)
        sync = _sync_ticks(network, plan, s, layers, optimizer, tick_s)
        backward = sum(cost.compute_ticks(p, tick_s)[1] for p in layers)
        in_flight = cost.in_flight(s, num_stages, microbatches, virtual)
        memory = cost.stage_memory_bytes([profiles[k] for k in own], mode, in_flight, optimizer,
                                         plan.zero, dp)
        if memory > limit:
            violations.append(f"stage {s} needs {memory} bytes per device, exceeds usable HBM "
                              f"{limit} by {memory - limit}")
        reports.append(StageReport(
            index=s, recompute=mode, chunks=tuple(chunks[k] for k in own), sync_ticks=sync,
            backward_ticks=backward,
            exposed_sync_ticks=cost.exposed_sync_ticks(sync, backward,
                                                       training.overlap_grad_reduce),
            in_flight=in_flight, memory_bytes=memory, memory_limit_bytes=limit))

    tau_max = max(chunk.time_ticks for chunk in chunks)
    exposed = max(report.exposed_sync_ticks for report in reports)
    total = cost.iteration_ticks(microbatches, num_stages, tau_max, exposed, virtual)
    seconds = total * exact(tick_s)
    samples = float(training.global_batch / seconds) if seconds else None  # None: zero-cost profile
    mfu, hfu = _utilisation(instance, plan, profiles, total)
    return Evaluation(
        plan=plan, violations=tuple(violations), stages=tuple(reports),
        num_microbatches=microbatches, tau_max_ticks=tau_max,
        sync_ticks=max(report.sync_ticks for report in reports), exposed_sync_ticks=exposed,
        objective_ticks=total, iteration_time_s=float(seconds),
        throughput_samples_per_s=samples,
        throughput_tokens_per_s=samples * training.seq_len if samples is not None else None,
        mfu=mfu, hfu=hfu)


def _price_chunk(instance: Instance, plan: Plan, network: NetworkModel,
                 profiles: list[list[LayerProfile]], chunk: int) -> ChunkReport:
    """τ_c of one chunk: its terms on the slowest replica."""
    tick_s, config, dp = instance.training.tick_s, plan.config, plan.num_replicas
    stage = plan.stage_of_chunk(chunk)
    mode = plan.stage_recompute(stage)
    layers = profiles[chunk]
    compute = sum(sum(cost.compute_ticks(p, tick_s)) for p in layers)
    rerun = sum(cost.recompute_compute_ticks(p, mode, tick_s) for p in layers)
    zero_gather = 0
    if plan.zero == 3:
        params = sum(p.params for p in layers)
        zero_gather = max(cost.zero3_gather_ticks(
            params, instance.training.optimizer, dp,
            network.group_path([plan.placement[stage][r][j] for r in range(dp)]), tick_s)
            for j in range(config.devices))
    worst = (-1, 0, 0, 0, 0)  # (time, recompute, collectives, recv activation, recv gradient)
    for r in range(dp):
        paths = cost.GroupPaths.of_replica(network, plan.placement[stage][r], config)
        collectives = sum(cost.layer_collective_ticks(p, config, paths, tick_s) for p in layers)
        recompute = rerun
        if mode is RecomputeMode.FULL:  # the rerun forward repeats its collectives
            recompute += sum(cost.layer_collective_ticks(p, config, paths, tick_s, Phase.FWD)
                             for p in layers)
        recv_act = _recv_ticks(network, plan, profiles, chunk - 1, chunk, r, tick_s)
        recv_grad = _recv_ticks(network, plan, profiles, chunk + 1, chunk, r, tick_s)
        time = compute + recompute + collectives + recv_act + recv_grad + zero_gather
        worst = max(worst, (time, recompute, collectives, recv_act, recv_grad))
    chunk_stage = plan.stages[chunk]
    return ChunkReport(
        index=chunk, stage=stage, first_layer=chunk_stage.first_layer,
        last_layer=chunk_stage.last_layer, time_ticks=worst[0], compute_ticks=compute,
        recompute_ticks=worst[1], collective_ticks=worst[2], recv_activation_ticks=worst[3],
        recv_gradient_ticks=worst[4], zero_gather_ticks=zero_gather)


def _recv_ticks(network: NetworkModel, plan: Plan, profiles: list[list[LayerProfile]],
                sender: int, receiver: int, replica: int, tick_s: float) -> int:
    """Receive the boundary tensor from chunk ``sender``: the slowest intra-stage rank pays.

    From the previous chunk it is that chunk's last layer's output (activation); from
    the next chunk it is the gradient of the receiver's own last layer output.  Each
    rank j receives from the rank j of the sender's pipeline stage.
    """
    if sender < 0 or sender >= plan.num_chunks:
        return 0
    boundary = min(sender, receiver)  # the chunk whose last layer produces the tensor
    volume = profiles[boundary][-1].out_bytes
    sources = plan.placement[plan.stage_of_chunk(sender)][replica]
    targets = plan.placement[plan.stage_of_chunk(receiver)][replica]
    return max(cost.transfer_ticks(volume, network.pair_path(src, dst), tick_s)
               for src, dst in zip(sources, targets, strict=True))


def _sync_ticks(network: NetworkModel, plan: Plan, stage: int, layers: list[LayerProfile],
                optimizer, tick_s: float) -> int:
    """Data-parallel gradient sync of one stage: dense over d*e ranks, expert over d ranks."""
    config, dp, placement = plan.config, plan.num_replicas, plan.placement[stage]
    dense = sum(p.dense_params for p in layers)
    expert = sum(p.expert_params for p in layers)
    dense_ticks = max(
        cost.gradient_sync_ticks(
            dense, optimizer, plan.zero, dp * config.ep,
            network.group_path([placement[r][t + config.tp * e]
                                for r in range(dp) for e in range(config.ep)]), tick_s)
        for t in range(config.tp))
    expert_ticks = max(
        cost.gradient_sync_ticks(expert, optimizer, plan.zero, dp,
                                 network.group_path([placement[r][j] for r in range(dp)]), tick_s)
        for j in range(config.devices))
    return dense_ticks + expert_ticks


def _utilisation(instance: Instance, plan: Plan, profiles: list[list[LayerProfile]],
                 total_ticks: int) -> tuple[float | None, float | None]:
    """(MFU, HFU) of DESIGN §3.2 e; None where FLOPs or the device peak are unknown."""
    peak = instance.cluster.peak_flops_per_s
    layers = [p for chunk in profiles for p in chunk]
    if peak is None or any(p.flops is None for p in layers):
        return None, None
    config, microbatch, batch = plan.config, plan.microbatch, instance.training.global_batch
    tick_s, devices = instance.training.tick_s, plan.num_devices_used
    model = 3 * cost.flops_per_iteration([p.flops for p in layers], config, microbatch, batch)
    mfu = cost.utilisation(model, total_ticks, tick_s, devices, peak)
    rerun: list[float] = []
    for chunk, chunk_layers in enumerate(profiles):
        mode = plan.stage_recompute(plan.stage_of_chunk(chunk))
        if mode is RecomputeMode.FULL:
            rerun += [p.flops for p in chunk_layers]
        elif mode is RecomputeMode.SELECTIVE:
            if any(p.sel_flops is None for p in chunk_layers):
                return mfu, None
            rerun += [p.sel_flops for p in chunk_layers]
    hardware = model + cost.flops_per_iteration(rerun, config, microbatch, batch)
    return mfu, cost.utilisation(hardware, total_ticks, tick_s, devices, peak)
