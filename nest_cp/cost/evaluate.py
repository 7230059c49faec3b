"""The plan evaluator: the referee every backend's plan is checked against (DESIGN §3, §3.2).

This module owns the *composition* of the cost model: how a plan's iteration time,
per-stage memory and utilisation are put together from the primitive terms of
:mod:`nest_cp.cost.terms` (which price one collective, one transfer, one stage's state
bytes ...).  Nothing else in the tree composes a whole plan's price the same way;
a search that prices many plans (brute force, the MCMC baseline) keeps one
:class:`Evaluator` and calls it, and the DP and the exact models restate the
composition only as different algorithms (tables, constraints) checked against it.

``evaluate(instance, plan)`` walks every chunk, stage, replica and rank of the plan,
prices each term on the devices the plan actually uses, and returns an
:class:`Evaluation` with the per-stage and per-chunk breakdown, the iteration time in
ticks, MFU / HFU and the list of violations.  Plans without a placement get the
default Megatron layout (t, e, replica, stage).

Written for clarity; it scales only by never pricing the same thing twice.  Identical
layers on identical groups price identically, so each primitive term is priced once
per distinct value of its arguments (:class:`_Terms`: a layer's collectives on its
groups' paths, a transfer on a pair's path, a gradient sync on a group's path) and
reused by every replica, chunk and later plan that repeats it.  That is
memoisation by value, not a second algorithm: the walk below is the composition.

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
(R_s = the stage's backward ticks of one microbatch); for ZeRO 1 and 2 the sync is a
reduce-scatter RS_s then an all-gather AG_s of the weights, exposed as the sum of the
reduce-scatter's part (as above) and AG_s, or max(0, AG_s − F_s) with
``overlap_param_gather`` (F_s = the stage's forward ticks of one microbatch; cost model
§5 c, d in docs/cost-model.md).  Memory of stage s: its state, ZeRO-3 buffers,
in-flight microbatches times the largest chunk's kept activations, and the recompute
working set (:func:`nest_cp.cost.terms.stage_memory_bytes`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from nest_cp.cost import terms as cost
from nest_cp.cost.sdp import SdpReport, plan_violations, price_sdp
from nest_cp.model.instance import (
    Instance,
    IntraConfig,
    LayerProfile,
    Phase,
    RecomputeMode,
    Strategy,
    TrainingSetup,
)
from nest_cp.model.launchers.search import Launcher, SearchShape, one_recompute_mode, shape_problems
from nest_cp.model.network import NetworkModel, Path, exact
from nest_cp.model.plan import MEGATRON_LAYOUT, Plan, contiguous_placement, rank_index


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
    # TP collective ticks (the rerun forward's included) that tp_comm_overlap hid behind
    # the GEMMs on that replica (cost model §5 e); the charged rest is in the terms above
    tp_hidden_ticks: int = 0
    # exposed context-parallel communication, forward and backward (cost model v4; the
    # rerun forward's part is in recompute_ticks)
    context_ticks: int = 0

    def as_dict(self) -> dict:
        return {"chunk": self.index, "stage": self.stage, "first_layer": self.first_layer,
                "last_layer": self.last_layer, **_terms_of(self),
                "tp_hidden_ticks": self.tp_hidden_ticks}


# The time terms a chunk reports, and a stage reports of its slowest chunk.
_TIME_TERMS = ("time_ticks", "compute_ticks", "recompute_ticks", "collective_ticks",
               "context_ticks", "recv_activation_ticks", "recv_gradient_ticks",
               "zero_gather_ticks")


def _terms_of(report: ChunkReport | StageReport) -> dict[str, int]:
    """The time terms; ``context_ticks`` only when context parallelism exposes some."""
    return {term: getattr(report, term) for term in _TIME_TERMS
            if term != "context_ticks" or report.context_ticks}


def _of_slowest_chunk(term: str) -> property:
    """A :class:`StageReport` attribute: ``term`` of the stage's slowest chunk."""
    return property(lambda stage: getattr(stage.slowest_chunk, term),
                    doc=f"``{term}`` of the stage's slowest chunk.")


@dataclass(frozen=True, slots=True)
class StageReport:
    """One pipeline stage: its chunks (one when v = 1), sync and memory.

    ``time_ticks`` and its terms (``compute_ticks`` ...) are those of the stage's slowest
    chunk.  ``sync_ticks`` is the stage's whole gradient sync: its gradient phase
    (all-reduce, or reduce-scatter for ZeRO >= 1) plus ``gather_ticks``, the all-gather of
    the updated weights (ZeRO 1 and 2, docs/cost-model.md §5 c); ``exposed_sync_ticks`` the part
    the iteration waits for (all of it unless gradient reduction overlaps the
    ``backward_ticks`` of one microbatch, or the weight gather the ``forward_ticks``).
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
    gather_ticks: int = 0
    forward_ticks: int = 0

    @property
    def reduce_ticks(self) -> int:
        """The gradient phase of the sync: all-reduce (ZeRO-0) or reduce-scatter."""
        return self.sync_ticks - self.gather_ticks

    @property
    def slowest_chunk(self) -> ChunkReport:
        """The chunk with the largest time (the first of them on a tie)."""
        return max(self.chunks, key=lambda chunk: chunk.time_ticks)

    time_ticks = _of_slowest_chunk("time_ticks")
    compute_ticks = _of_slowest_chunk("compute_ticks")
    recompute_ticks = _of_slowest_chunk("recompute_ticks")
    collective_ticks = _of_slowest_chunk("collective_ticks")
    context_ticks = _of_slowest_chunk("context_ticks")
    recv_activation_ticks = _of_slowest_chunk("recv_activation_ticks")
    recv_gradient_ticks = _of_slowest_chunk("recv_gradient_ticks")
    zero_gather_ticks = _of_slowest_chunk("zero_gather_ticks")

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
                "recompute": s.recompute.value, **_terms_of(s), "sync_ticks": s.sync_ticks,
                "backward_ticks": s.backward_ticks, "exposed_sync_ticks": s.exposed_sync_ticks,
                **({"gather_ticks": s.gather_ticks, "forward_ticks": s.forward_ticks}
                   if s.gather_ticks else {}),
                "in_flight": s.in_flight, "memory_bytes": s.memory_bytes,
                "memory_limit_bytes": s.memory_limit_bytes,
                "chunks": [c.as_dict() for c in s.chunks],
            } for s in self.stages],
        }


def evaluate(instance: Instance, plan: Plan, network: NetworkModel | None = None) -> Evaluation:
    """Evaluate ``plan`` on ``instance``; never raises for a plan that merely does not fit."""
    return Evaluator(instance, network).evaluate(plan)


class Evaluator:
    """The referee for one instance; a search keeps one to evaluate many of its plans.

    ``evaluate(plan)`` is the module's :func:`evaluate`.  Identical terms price
    identically, so the evaluator prices each primitive term once per distinct value of
    its arguments (:class:`_Terms`: a layer's collectives on a group's path, a transfer
    on a pair's path, a sync on a group's path) and every replica, chunk and later plan
    that repeats it reuses the integer.  Nothing else is kept between plans.
    """

    def __init__(self, instance: Instance, network: NetworkModel | None = None):
        self.instance = instance
        self.network = network or NetworkModel(instance.cluster)
        self._terms = _Terms(instance.training, self.network)

    def evaluate(self, plan: Plan) -> Evaluation:
        instance = self.instance
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
            order = self.network.canonical_order()
            plan = plan.with_placement(
                MEGATRON_LAYOUT.placement(plan.config, plan.num_stages, plan.num_replicas, order)
                if plan.config.cp == 1 else
                contiguous_placement(plan.config, plan.num_stages, plan.num_replicas, order))
        if plan.strategy is Strategy.SDP:
            return _sdp_evaluation(instance, plan, self.network)
        return _price(instance, plan, self._terms)

    def stage_memory_bytes(self, plan: Plan, stage: int) -> int:
        """Bytes per device of pipeline stage ``stage``: the memory :meth:`evaluate` checks.

        Memory does not depend on the placement, so ``plan`` may have none; its chunks
        must be well-formed (contiguous, profiled; the caller builds them).
        """
        return _stage_memory(self.instance, plan, _chunk_profiles(self.instance, plan), stage)


class _Terms:
    """The primitive terms of :mod:`nest_cp.cost.terms` on one instance, memoised by value.

    Each method returns what the :mod:`nest_cp.cost.terms` function it names returns for the
    same arguments (the first time, it is that call); the instance's tick length and
    optimizer are fixed.  No second algorithm: only the repeats are skipped.
    """

    def __init__(self, training: TrainingSetup, network: NetworkModel):
        self.network, self.tick_s, self.optimizer = network, training.tick_s, training.optimizer
        self.tp_comm_overlap = training.tp_comm_overlap
        self.cp_comm = training.cp_comm
        self._memo: dict[tuple, object] = {}

    def _once(self, key: tuple, price: Callable[[], object]):
        """The memoised value of ``key``, computed by ``price()`` the first time (never None)."""
        value = self._memo.get(key)
        if value is None:
            value = self._memo[key] = price()
        return value

    def compute(self, profile: LayerProfile) -> tuple[int, int]:
        """:func:`cost.compute_ticks`: (fwd, bwd) of one layer and microbatch."""
        return self._once(("compute", profile), lambda: cost.compute_ticks(profile, self.tick_s))

    def rerun(self, profile: LayerProfile, mode: RecomputeMode) -> int:
        """:func:`cost.recompute_compute_ticks`: the forward compute ``mode`` reruns."""
        return self._once(("rerun", profile, mode),
                          lambda: cost.recompute_compute_ticks(profile, mode, self.tick_s))

    def collectives(self, layers: tuple[LayerProfile, ...], config: IntraConfig,
                    paths: cost.GroupPaths, phase: Phase | None = None,
                    hide: bool = True) -> int:
        """Σ over ``layers`` (one chunk) of :meth:`layer_collectives`."""
        return self._once(("collectives", layers, config, paths, phase, hide), lambda: sum(
            self.layer_collectives(profile, config, paths, phase, hide) for profile in layers))

    def layer_collectives(self, profile: LayerProfile, config: IntraConfig,
                          paths: cost.GroupPaths, phase: Phase | None = None,
                          hide: bool = True) -> int:
        """:func:`cost.layer_collective_ticks`: one layer's collectives on the groups ``paths``,
        its TP collectives hidden behind its compute where ``tp_comm_overlap`` applies to
        the stage replica (cost model §5 e; ``hide=False``: what they would cost in full)."""
        hides = hide and self.tp_comm_overlap and paths.tp_local
        hiding = self.compute(profile) if hides else None
        return self._once(("layer collectives", profile, config, paths, phase, hides),
                          lambda: cost.layer_collective_ticks(profile, config, paths, self.tick_s,
                                                              phase, hiding))

    def tp_hidden(self, layers: tuple[LayerProfile, ...], config: IntraConfig,
                  paths: cost.GroupPaths, full_recompute: bool) -> int:
        """The TP collective ticks tp_comm_overlap hides on one chunk and stage replica."""
        if not (self.tp_comm_overlap and paths.tp_local):
            return 0
        phases = (None, Phase.FWD) if full_recompute else (None,)
        return sum(self.collectives(layers, config, paths, phase, hide=False)
                   - self.collectives(layers, config, paths, phase) for phase in phases)

    def context(self, layers: tuple[LayerProfile, ...], config: IntraConfig,
                paths: cost.ContextPaths) -> tuple[int, int]:
        """Σ over ``layers`` (one chunk) of :func:`cost.context_ticks`, (forward, backward)."""
        def price() -> tuple[int, int]:
            parts = [cost.context_ticks(p, config, self.cp_comm, paths, self.tick_s)
                     for p in layers]
            return sum(f for f, _ in parts), sum(b for _, b in parts)
        return self._once(("context", layers, config, paths), price)

    def transfer(self, volume_bytes: int, path: Path) -> int:
        """:func:`cost.transfer_ticks`: one point-to-point transfer."""
        return self._once(("transfer", volume_bytes, path),
                          lambda: cost.transfer_ticks(volume_bytes, path, self.tick_s))

    def gradient_sync(self, params: int, zero: int, group_size: int,
                      path: Path | None) -> tuple[int, int]:
        """:func:`cost.gradient_sync_parts`: one sync's (gradient phase, weight gather)."""
        return self._once(("sync", params, zero, group_size, path), lambda: (
            cost.gradient_sync_parts(params, self.optimizer, zero, group_size, path,
                                     self.tick_s)))

    def iteration_flops(self, layer_flops: tuple[float, ...], config: IntraConfig,
                        microbatch: int, global_batch: int) -> Fraction:
        """:func:`cost.flops_per_iteration`: B samples' worth of the given forward FLOPs."""
        return self._once(("flops", layer_flops, config, microbatch, global_batch),
                          lambda: cost.flops_per_iteration(layer_flops, config, microbatch,
                                                           global_batch))

    def zero3_gather(self, params: int, dp: int, path: Path | None) -> int:
        """:func:`cost.zero3_gather_ticks`: a chunk's ZeRO-3 all-gathers per microbatch."""
        return self._once(("gather", params, dp, path), lambda: cost.zero3_gather_ticks(
            params, self.optimizer, dp, path, self.tick_s))


def _sdp_evaluation(instance: Instance, plan: Plan, network: NetworkModel) -> Evaluation:
    """An SDP plan (DESIGN §7), priced by :func:`nest_cp.cost.sdp.price_sdp`; no MFU or HFU."""
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
        found.append(("config", f"unknown configuration: no profile for {plan.config.label}, "
                                f"microbatch={plan.microbatch}"))
    if plan.config.cp not in training.context_parallel:
        found.append(("config.cp", f"context width {plan.config.cp} not allowed (allowed: "
                                   f"{list(training.context_parallel)})"))
    if plan.config.cp > 1 and plan.strategy is Strategy.SDP:
        found.append(("config.cp", f"context width {plan.config.cp} in an SDP plan (SDP plans "
                                   f"keep c = 1)"))
    if plan.microbatch not in training.microbatches:
        found.append(("microbatch", f"microbatch {plan.microbatch} not allowed "
                                    f"(allowed: {list(training.microbatches)})"))
    if plan.zero not in training.zero_stages:
        found.append(("zero", f"ZeRO stage {plan.zero} not allowed "
                              f"(allowed: {list(training.zero_stages)})"))
    if plan.virtual_stages not in training.virtual_stages and plan.strategy is Strategy.DP:
        # The allowed counts choose a pipeline schedule; an SDP plan has no pipeline (S = 1,
        # v = 1, DESIGN §7, checked by sdp.plan_violations), so they do not restrict it.
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
        found.extend(_launcher_violations(instance, plan))
    return found


def _launcher_violations(instance: Instance, plan: Plan) -> list[tuple[str, str]]:
    """What the instance's launcher would not start as exported or run as priced
    (nest_cp.model.launchers.search): its shape rules and one recompute mode for all."""
    launcher = instance.training.launcher
    if launcher is Launcher.NONE:
        return []
    shape = SearchShape(plan.config.tp, plan.config.ep, plan.microbatch, plan.num_replicas,
                        plan.num_stages, plan.virtual_stages, plan.zero, plan.config.cp)
    found = [("launcher", problem)
             for problem in shape_problems(launcher, instance.search_facts, shape)]
    modes = {stage.recompute for stage in plan.stages}
    if one_recompute_mode(launcher) and len(modes) > 1:
        found.append(("launcher", f"{launcher.value} one recompute mode: the stages recompute "
                                  f"{'/'.join(sorted(m.value for m in modes))}; "
                                  f"{launcher.value} applies one setting to every stage"))
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
    devices = [device for replicas in placement for ranks in replicas for device in ranks]
    if all(isinstance(device, int) for device in devices) and len(set(devices)) == len(devices) \
            and 0 <= min(devices) and max(devices) < num_devices:
        return []  # injective into the cluster; otherwise find every offending rank below
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


def _price(instance: Instance, plan: Plan, terms: _Terms) -> Evaluation:
    training = instance.training
    tick_s, num_stages, virtual = training.tick_s, plan.num_stages, plan.virtual_stages
    microbatches = cost.num_microbatches(training.global_batch, plan.microbatch, plan.config,
                                         plan.num_replicas)
    limit = instance.cluster.usable_hbm_bytes
    profiles = _chunk_profiles(instance, plan)
    groups = [_distinct(cost.GroupPaths.of_replicas(terms.network, plan.placement[s],
                                                    plan.config))
              for s in range(num_stages)]
    if plan.config.cp == 1:  # no context groups: one empty record shared by every replica
        context = [([cost.ContextPaths()], [0] * plan.num_replicas)] * num_stages
    else:
        context = [_distinct([cost.ContextPaths.of_replica(terms.network, devices, plan.config)
                              for devices in plan.placement[s]])
                   for s in range(num_stages)]
    arrays = [np.array(devices) for devices in plan.placement]  # [replica, rank] per stage
    boundaries = _boundary_ticks(terms, plan, profiles, arrays)
    chunks = [_price_chunk(plan, terms, profiles, groups, context, boundaries, k)
              for k in range(plan.num_chunks)]

    reports, violations = [], []
    for s in range(num_stages):
        own = plan.chunks_of_stage(s)
        layers = [p for k in own for p in profiles[k]]
        reduce, gather = _sync_ticks(terms, plan, arrays[s], layers)
        forward = sum(terms.compute(p)[0] for p in layers)
        backward = sum(terms.compute(p)[1] for p in layers)
        memory = _stage_memory(instance, plan, profiles, s)
        if memory > limit:
            violations.append(f"stage {s} needs {memory} bytes per device, exceeds usable HBM "
                              f"{limit} by {memory - limit}")
        reports.append(StageReport(
            index=s, recompute=plan.stage_recompute(s), chunks=tuple(chunks[k] for k in own),
            sync_ticks=reduce + gather, backward_ticks=backward,
            exposed_sync_ticks=cost.exposed_sync_ticks(
                reduce, backward, training.overlap_grad_reduce, gather, forward,
                training.overlap_param_gather),
            gather_ticks=gather, forward_ticks=forward if gather else 0,
            in_flight=cost.in_flight(s, num_stages, microbatches, virtual),
            memory_bytes=memory, memory_limit_bytes=limit))

    tau_max = max(chunk.time_ticks for chunk in chunks)
    exposed = max(report.exposed_sync_ticks for report in reports)
    total = cost.iteration_ticks(microbatches, num_stages, tau_max, exposed, virtual)
    seconds = total * exact(tick_s)
    samples = float(training.global_batch / seconds) if seconds else None  # None: zero-cost profile
    mfu, hfu = _utilisation(instance, plan, terms, profiles, total)
    return Evaluation(
        plan=plan, violations=tuple(violations), stages=tuple(reports),
        num_microbatches=microbatches, tau_max_ticks=tau_max,
        sync_ticks=max(report.sync_ticks for report in reports), exposed_sync_ticks=exposed,
        objective_ticks=total, iteration_time_s=float(seconds),
        throughput_samples_per_s=samples,
        throughput_tokens_per_s=samples * training.seq_len if samples is not None else None,
        mfu=mfu, hfu=hfu)


def _chunk_profiles(instance: Instance, plan: Plan) -> list[tuple[LayerProfile, ...]]:
    """The profiles of each chunk's layers under the plan's configuration and microbatch."""
    return [tuple(instance.workload.layers[layer].profile(plan.config, plan.microbatch)
                  for layer in chunk.layers) for chunk in plan.stages]


def _stage_memory(instance: Instance, plan: Plan, profiles: list[tuple[LayerProfile, ...]],
                  stage: int) -> int:
    """Bytes per device of pipeline stage ``stage`` (all its chunks; DESIGN §3, §3.2 b, d)."""
    training = instance.training
    microbatches = cost.num_microbatches(training.global_batch, plan.microbatch, plan.config,
                                         plan.num_replicas)
    in_flight = cost.in_flight(stage, plan.num_stages, microbatches, plan.virtual_stages)
    return cost.stage_memory_bytes([profiles[k] for k in plan.chunks_of_stage(stage)],
                                   plan.stage_recompute(stage), in_flight, training.optimizer,
                                   plan.zero, plan.num_replicas, plan.config.cp,
                                   training.cp_comm)


def _distinct(items: list) -> tuple[list, list[int]]:
    """The distinct items in first-seen order, and each item's index among them."""
    index: dict = {}
    ids = [index.setdefault(item, len(index)) for item in items]
    return list(index), ids


def _price_chunk(plan: Plan, terms: _Terms, profiles: list[tuple[LayerProfile, ...]],
                 groups: list[tuple[list[cost.GroupPaths], list[int]]],
                 context: list[tuple[list[cost.ContextPaths], list[int]]],
                 boundaries: list[list[int]], chunk: int) -> ChunkReport:
    """τ_c of one chunk: its terms on the slowest replica.

    ``groups[s]`` are the distinct paths of the TP and EP groups of stage s's replicas
    and, per replica r, the index of its own among them; ``context[s]`` the same for the
    CP groups (context parallelism: the exposed ring or all-to-alls, forward and
    backward, and under any recomputation the forward part again); ``boundaries[k][r]`` the
    transfer across the boundary after chunk k (:func:`_boundary_ticks`): the chunk
    receives its activation over the boundary before it and its gradient over the one
    after it.
    """
    config, dp = plan.config, plan.num_replicas
    stage = plan.stage_of_chunk(chunk)
    mode = plan.stage_recompute(stage)
    layers = profiles[chunk]
    compute = sum(sum(terms.compute(p)) for p in layers)
    rerun = sum(terms.rerun(p, mode) for p in layers)
    zero_gather = 0
    if plan.zero == 3:  # the shards are over the d replicas and the c context ranks
        params = sum(p.params for p in layers)
        zero_gather = max(terms.zero3_gather(params, dp * config.cp, terms.network.group_path(
            [plan.placement[stage][r][rank_index(config, t, c, e)]
             for r in range(dp) for c in range(config.cp)]))
            for t in range(config.tp) for e in range(config.ep))
    # Replicas whose TP / EP groups lie on the same paths pay the same collectives.
    distinct, path_index = groups[stage]
    collectives_on = [terms.collectives(layers, config, paths) for paths in distinct]
    rerun_on = [rerun + (terms.collectives(layers, config, paths, Phase.FWD)
                         if mode is RecomputeMode.FULL else 0)  # the rerun forward
                for paths in distinct]                          # repeats its collectives
    # Context parallelism per distinct CP paths: (forward + backward, forward rerun).
    context_paths, context_index = context[stage]
    context_on = []
    for paths in context_paths:
        forward, backward = terms.context(layers, config, paths)
        context_on.append((forward + backward,
                           forward if mode is not RecomputeMode.NONE else 0))
    # A replica is its group paths and its two receives; each distinct case is priced once.
    recv_acts = boundaries[chunk - 1] if chunk > 0 else [0] * dp
    recv_grads = boundaries[chunk] if chunk + 1 < plan.num_chunks else [0] * dp
    # (time, recompute, collectives, recv activation, recv gradient, index of the paths,
    #  context)
    worst = (-1, 0, 0, 0, 0, 0, 0)
    for index, cp_index, recv_act, recv_grad in set(zip(path_index, context_index, recv_acts,
                                                        recv_grads, strict=True)):
        exposed, rerun_exposed = context_on[cp_index]
        collectives, recompute = collectives_on[index], rerun_on[index] + rerun_exposed
        time = compute + recompute + collectives + exposed + recv_act + recv_grad + zero_gather
        worst = max(worst, (time, recompute, collectives, recv_act, recv_grad, index, exposed))
    chunk_stage = plan.stages[chunk]
    return ChunkReport(
        index=chunk, stage=stage, first_layer=chunk_stage.first_layer,
        last_layer=chunk_stage.last_layer, time_ticks=worst[0], compute_ticks=compute,
        recompute_ticks=worst[1], collective_ticks=worst[2], recv_activation_ticks=worst[3],
        recv_gradient_ticks=worst[4], zero_gather_ticks=zero_gather,
        tp_hidden_ticks=terms.tp_hidden(layers, config, distinct[worst[5]],
                                        mode is RecomputeMode.FULL),
        context_ticks=worst[6])


def _boundary_ticks(terms: _Terms, plan: Plan, profiles: list[tuple[LayerProfile, ...]],
                    arrays: list[np.ndarray]) -> list[list[int]]:
    """Ticks of the point-to-point transfer across each chunk boundary, per replica.

    ``[k][r]``: chunk k's last layer output between chunk k and chunk k + 1 of replica r —
    forward the activation k → k + 1, backward its gradient k + 1 → k, the same volume
    on the same pairs, so both receives cost this.  Rank j of one stage talks to rank j
    of the other, and the slowest j pays.  A pair's path does not depend on the
    direction, so with v > 1 every boundary between the same two stages shares the paths.
    ``arrays``: each stage's devices, [replica, rank].
    """
    # (stage, stage) -> the distinct path sets of the replicas' pairs, and each replica's
    paths: dict[tuple[int, int], tuple[list[frozenset[Path]], list[int]]] = {}
    ticks = []
    for chunk in range(plan.num_chunks - 1):
        ends = (plan.stage_of_chunk(chunk), plan.stage_of_chunk(chunk + 1))
        if ends not in paths:  # ranks match one to one (placement checked)
            paths[ends] = terms.network.pair_path_sets(arrays[ends[0]], arrays[ends[1]])
        distinct, path_index = paths[ends]
        volume = profiles[chunk][-1].out_bytes
        # replicas whose pairs lie on the same paths pay the same transfer: price each once
        slowest = [max(terms.transfer(volume, path) for path in replica_paths)
                   for replica_paths in distinct]
        ticks.append([slowest[index] for index in path_index])
    return ticks


def _sync_ticks(terms: _Terms, plan: Plan, placement: np.ndarray,
                layers: list[LayerProfile]) -> tuple[int, int]:
    """Data-parallel gradient sync of one stage, dense over d*e*c ranks, expert over d*c
    ranks (the c context ranks hold the same parameters; cost model v4): (gradient phase,
    weight gather), each the slowest dense group's plus the slowest expert group's
    (docs/cost-model.md §5 c); ``placement``: the stage's devices, [replica, rank]."""
    config, dp = plan.config, plan.num_replicas
    group_path = terms.network.group_path
    dense = sum(p.dense_params for p in layers)
    expert = sum(p.expert_params for p in layers)
    contexts = range(config.cp)
    dense_parts = [terms.gradient_sync(dense, plan.zero, dp * config.ep * config.cp,
                                       group_path(placement[:, [rank_index(config, t, c, e)
                                                                for c in contexts
                                                                for e in range(config.ep)]]))
                   for t in range(config.tp)]
    expert_parts = [terms.gradient_sync(expert, plan.zero, dp * config.cp,
                                        group_path(placement[:, [rank_index(config, t, c, e)
                                                                 for c in contexts]]))
                    for t in range(config.tp) for e in range(config.ep)]
    return tuple(max(part[phase] for part in dense_parts)
                 + max(part[phase] for part in expert_parts) for phase in (0, 1))


def _utilisation(instance: Instance, plan: Plan, terms: _Terms,
                 profiles: list[tuple[LayerProfile, ...]],
                 total_ticks: int) -> tuple[float | None, float | None]:
    """(MFU, HFU) of DESIGN §3.2 e; None where FLOPs or the device peak are unknown."""
    peak = instance.cluster.peak_flops_per_s
    layers = [p for chunk in profiles for p in chunk]
    if peak is None or any(p.flops is None for p in layers):
        return None, None
    config, microbatch, batch = plan.config, plan.microbatch, instance.training.global_batch
    tick_s, devices = instance.training.tick_s, plan.num_devices_used
    model = 3 * terms.iteration_flops(tuple(p.flops for p in layers), config, microbatch, batch)
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
    hardware = model + terms.iteration_flops(tuple(rerun), config, microbatch, batch)
    return mfu, cost.utilisation(hardware, total_ticks, tick_s, devices, peak)
