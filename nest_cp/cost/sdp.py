r"""Subnetwork data parallelism (DESIGN §7): units, masks, designs and the SDP composition.

Every worker (a t·e rank group, one replica of a one-stage plan) trains the shared
part of the model and the *units* its mask row holds.  This module is the SDP half
of the cost model and of the referee: :func:`unit_table` rounds every share of every
layer once (the primitives), :func:`design_mask` builds the two structured designs,
:func:`plan_violations` says why an SDP plan is meaningless, and :func:`price_sdp` composes
a plan's per-worker times, memory and sync exactly as DESIGN §7 states:

    τ_w   = Σ_{shares w runs} (fwd + bwd) [− Σ_{units w does not hold} wgrad: backward masking]
            + recompute + intra-layer collectives on w's own TP / EP groups,
    sync_w = max_j ( shared all-reduce over all d + Σ_{u held} all-reduce over u's holders
            [+ Σ_u broadcast of u's weights over all d: backward masking] ),
    T     = m · max_w τ_w + max_w exposed(sync_w),
    T_eff = T · d · C_full / Σ_w C_w   (an exact rational).

With ``tp_comm_overlap`` and every TP group of worker w inside one tier-0 domain, each
layer's TP collectives of one direction show only max(⌈C/t⌉, C − X) (docs/cost-model.md
§5 e, also for the rerun forward of full recomputation), X being w's *own* ticks of the
layer in that direction: the shares of the layer w runs, less the weight gradients of the
units it does not hold under backward masking.

With ZeRO 1 or 2 each all-reduce is a reduce-scatter then an all-gather of the weights
over the same group (docs/cost-model.md §5 c); the broadcasts stay in the gradient phase.  A
worker's sync then has two phases, each the slowest rank's: exposed(sync_w) is the
gradient phase's part beyond R_w (with ``overlap_grad_reduce``, else all of it) plus the
gathers' part beyond F_w, the forward ticks inside τ_w (with ``overlap_param_gather``).

*Shares.*  A layer splits into its shared part and its units.  Block level: a layer
with ``sdp_units`` > 0 is one unit carrying all of it (its shared part is empty);
neuron level: U width slices, each carrying f/U of the layer's *width* quantities
(fwd, bwd, wgrad, selective forward, params, activation bytes) and the shared part
1 − f of them plus the layer's *boundary* quantities: its intra-layer collectives
(the residual stream does not narrow) and its checkpoint (the layer input kept under
full recomputation).  Layers without units are shared whole.  Every time share is
rounded up to ticks once, every parameter and byte share up to whole units once.

*Modelling choices where DESIGN §7 is silent* (docs/cost-model.md §6): C_full is
Σ (fwd + bwd) over every share of every layer, so a worker holding every unit has
C_w = C_full and coverage 1 gives T_eff = T; the broadcast of backward masking sends
a unit's dense and expert weights of rank j to rank j of every worker; a worker's
rank j pays its collectives one after another (shared dense over the d·e ranks of
j's tensor index, shared expert over the d ranks j, then each held unit's pair).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum
from fractions import Fraction

import numpy as np

from nest_cp.cost import terms as cost
from nest_cp.model.instance import (
    Collective,
    Instance,
    IntraConfig,
    LayerProfile,
    Optimizer,
    Phase,
    RecomputeMode,
    SdpLevel,
    SdpMasking,
    Strategy,
)
from nest_cp.model.network import NetworkModel, Path
from nest_cp.model.plan import Plan, SdpMask
from nest_cp.model.ticks import exact, to_ticks

MAX_MASK_ERRORS = 3  # mask violations reported per kind (a bad mask could have thousands)


class SdpDesign(str, Enum):
    """The structured designs of DESIGN §7."""

    GROUPED = "grouped"  # d/h groups of h consecutive workers; unit u held by group u mod d/h
    CYCLIC = "cyclic"    # worker w holds the k = U h / d units from w U / d on (mod U)


# ------------------------------------------------------------------ shares (primitives)


@dataclass(frozen=True, slots=True)
class Share:
    """One share of one layer, its shared part or one unit, each term rounded once."""

    layer: int
    fwd_ticks: int
    bwd_ticks: int
    wgrad_ticks: int
    sel_fwd_ticks: int
    dense_params: int
    expert_params: int
    act_bytes: int
    sel_act_bytes: int
    ckpt_bytes: int
    collectives: tuple[Collective, ...]

    @property
    def params(self) -> int:
        return self.dense_params + self.expert_params

    @property
    def compute_ticks(self) -> int:
        """fwd + bwd of one microbatch: what FLOP-equivalence counts (DESIGN §7 C_w)."""
        return self.fwd_ticks + self.bwd_ticks


@dataclass(frozen=True, slots=True)
class UnitTable:
    """The shares of every layer for one (configuration, microbatch, level).

    ``shared[l]`` is layer l's shared part (empty for a block at block level);
    ``units`` lists every unit in layer order; ``blocks`` are the unit ranges a
    structured design is applied to: all units at block level, each maskable layer's
    slices at neuron level.
    """

    level: SdpLevel
    shared: tuple[Share, ...]
    units: tuple[Share, ...]
    blocks: tuple[range, ...]
    full_compute_ticks: int  # C_full: fwd + bwd of every share of the model on one worker

    @property
    def num_units(self) -> int:
        return len(self.units)


def unit_table(instance: Instance, config: IntraConfig, microbatch: int,
               level: SdpLevel) -> UnitTable:
    """Round every share of every layer once (DESIGN §7's primitive terms)."""
    tick_s = instance.training.tick_s
    shared, units, blocks = [], [], []
    for index, layer in enumerate(instance.workload.layers):
        profile = layer.profile(config, microbatch)
        count = profile.sdp_units
        if count == 0:
            shared.append(_share(profile, index, Fraction(1), True, tick_s))
        elif level is SdpLevel.BLOCK:
            shared.append(_share(profile, index, Fraction(0), False, tick_s))
            units.append(_share(profile, index, Fraction(1), True, tick_s))
        else:
            fraction = exact(profile.sdp_fraction)
            shared.append(_share(profile, index, 1 - fraction, True, tick_s))
            first = len(units)
            units.extend(_share(profile, index, fraction / count, False, tick_s)
                         for _ in range(count))
            blocks.append(range(first, len(units)))
    if level is SdpLevel.BLOCK:
        blocks = [range(len(units))] if units else []
    full = sum(s.compute_ticks for s in shared) + sum(u.compute_ticks for u in units)
    return UnitTable(level, tuple(shared), tuple(units), tuple(blocks), full)


def _share(profile: LayerProfile, layer: int, fraction: Fraction, boundary: bool,
           tick_s: float) -> Share:
    """``fraction`` of the layer's width quantities; its collectives and checkpoint only
    when ``boundary``."""
    def ticks(seconds: float | None) -> int:
        return to_ticks(exact(seconds or 0) * fraction, tick_s)

    def whole(amount: int | None) -> int:
        return math.ceil((amount or 0) * fraction)

    return Share(layer=layer, fwd_ticks=ticks(profile.fwd_s), bwd_ticks=ticks(profile.bwd_s),
                 wgrad_ticks=ticks(profile.wgrad_s), sel_fwd_ticks=ticks(profile.sel_fwd_s),
                 dense_params=whole(profile.dense_params),
                 expert_params=whole(profile.expert_params), act_bytes=whole(profile.act_bytes),
                 sel_act_bytes=whole(profile.sel_act_bytes),
                 ckpt_bytes=profile.ckpt_bytes if boundary else 0,
                 collectives=profile.collectives if boundary else ())


def broadcast_ticks(volume_bytes: int, group_size: int, path: Path | None,
                    tick_s: float) -> int:
    """One broadcast of ``volume_bytes`` to ``group_size`` devices: v/β + (g − 1)·α."""
    if path is None or group_size <= 1 or volume_bytes == 0:
        return 0
    return to_ticks(volume_bytes / path.bandwidth_Bps + (group_size - 1) * path.latency_s,
                    tick_s)


# ------------------------------------------------------------------ designs


def design_mask(table: UnitTable, design: SdpDesign, workers: int,
                holders: int) -> tuple[tuple[int, ...], ...] | None:
    """The mask of a structured design, or None where the design does not apply.

    Grouped needs h | d and (d / h) | U of every block; cyclic needs d | U of every block.
    """
    if not table.blocks or not 1 <= holders <= workers:
        return None
    rows: list[list[int]] = [[] for _ in range(workers)]
    for block in table.blocks:
        count = len(block)
        if design is SdpDesign.GROUPED:
            if workers % holders or count % (workers // holders):
                return None
            groups = workers // holders
            for position, unit in enumerate(block):
                first = (position % groups) * holders
                for worker in range(first, first + holders):
                    rows[worker].append(unit)
        else:
            if count % workers:
                return None
            stride, held = count // workers, count * holders // workers
            for worker in range(workers):
                rows[worker].extend(block[(worker * stride + step) % count]
                                    for step in range(held))
    return tuple(tuple(sorted(row)) for row in rows)


# ------------------------------------------------------------------ validity


def plan_violations(instance: Instance, plan: Plan) -> list[tuple[str, str]]:
    """(plan field, message) for everything that makes an SDP plan meaningless (DESIGN §7)."""
    training, sdp = instance.training, plan.sdp
    found: list[tuple[str, str]] = []
    if Strategy.SDP not in training.strategies:
        found.append(("strategy", f"strategy 'sdp' not allowed (allowed: "
                                  f"{[s.value for s in training.strategies]})"))
    if sdp.level not in training.sdp.levels:
        found.append(("sdp.level", f"SDP level {sdp.level.value!r} not allowed (allowed: "
                                   f"{[level.value for level in training.sdp.levels]})"))
    if sdp.masking not in training.sdp.maskings:
        found.append(("sdp.masking", f"masking {sdp.masking.value!r} not allowed (allowed: "
                                     f"{[m.value for m in training.sdp.maskings]})"))
    if plan.zero > 2:
        found.append(("zero", f"SDP plans use ZeRO 0, 1 or 2, got {plan.zero}"))
    if plan.num_chunks != 1 or plan.virtual_stages != 1:
        found.append(("stages", f"SDP plans have one stage holding every layer (S = 1, v = 1), "
                                f"got {plan.num_chunks} stages with v = {plan.virtual_stages}"))
    workers = plan.num_replicas
    if not training.sdp.allows(sdp.holders, workers):
        found.append(("sdp.holders", f"h = {sdp.holders} holders of d = {workers} workers not "
                                     f"allowed (C = {Fraction(sdp.holders, workers)})"))
    if not instance.workload.has_profile(plan.config, plan.microbatch):
        return found  # the evaluator reports the unknown configuration
    table = unit_table(instance, plan.config, plan.microbatch, sdp.level)
    return found + mask_violations(table, sdp, workers)


def mask_violations(table: UnitTable, sdp: SdpMask, workers: int) -> list[tuple[str, str]]:
    """A valid mask: one row per worker, every unit held by exactly h workers, balanced rows."""
    if not table.num_units:
        return [("sdp.level", f"no maskable units at level {table.level.value!r} (every layer "
                              f"has sdp_units = 0 for this configuration)")]
    if len(sdp.mask) != workers:
        return [("sdp.mask", f"{len(sdp.mask)} rows, expected one per worker (d = {workers})")]
    holders, units = sdp.holders, table.num_units
    found: list[tuple[str, str]] = []
    if holders > workers:
        found.append(("sdp.holders", f"h = {holders} exceeds d = {workers} workers"))
    counts = [0] * units
    for worker, row in enumerate(sdp.mask):
        bad = [u for u in row if not 0 <= u < units]
        if bad:
            found.append((f"sdp.mask[{worker}]", f"worker {worker} holds unit {bad[0]}, out of "
                                                 f"range 0..{units - 1}"))
        elif len(set(row)) != len(row):
            found.append((f"sdp.mask[{worker}]", f"worker {worker} lists a unit twice"))
        else:
            for unit in row:
                counts[unit] += 1
    if found:
        return found[:MAX_MASK_ERRORS]
    wrong = [unit for unit in range(units) if counts[unit] != holders]
    found += [("sdp.mask", f"unit {unit} held by {counts[unit]} workers, expected h = {holders}")
              for unit in wrong[:MAX_MASK_ERRORS]]
    for block in table.blocks:
        expected = Fraction(len(block) * holders, workers)
        what = "units" if table.level is SdpLevel.BLOCK else \
            f"slices of layer {table.units[block[0]].layer}"
        if expected.denominator != 1:
            found.append(("sdp.holders", f"h = {holders} cannot balance {len(block)} {what} "
                                         f"over d = {workers} workers ({expected} each)"))
            continue
        unequal = [w for w, row in enumerate(sdp.mask)
                   if sum(unit in block for unit in row) != expected]
        found += [(f"sdp.mask[{w}]", f"worker {w} holds {sum(u in block for u in sdp.mask[w])} "
                                     f"{what}, expected U h / d = {expected} like every worker")
                  for w in unequal[:MAX_MASK_ERRORS]]
    return found


# ------------------------------------------------------------------ reports


@dataclass(frozen=True, slots=True)
class WorkerReport:
    """One worker's terms: τ_w and its parts, C_w, R_w, sync and memory (DESIGN §7)."""

    worker: int
    units: int
    time_ticks: int
    compute_ticks: int
    recompute_ticks: int
    collective_ticks: int
    backward_ticks: int
    sync_ticks: int
    exposed_sync_ticks: int
    memory_bytes: int
    gather_ticks: int = 0  # of sync_ticks: the weight all-gathers (ZeRO 1, 2)
    forward_ticks: int = 0  # F_w, which an overlapped weight gather hides behind

    def as_dict(self) -> dict:
        return {name: getattr(self, name) for name in self.__slots__}


@dataclass(frozen=True, slots=True)
class SdpReport:
    """An SDP plan priced: per-worker reports, T, T_eff, memory saved and connectivity."""

    level: SdpLevel
    masking: SdpMasking
    holders: int
    workers: tuple[WorkerReport, ...]
    num_microbatches: int
    tau_max_ticks: int
    sync_ticks: int
    exposed_sync_ticks: int
    objective_ticks: int
    full_compute_ticks: int
    effective: Fraction
    memory_limit_bytes: int
    plain_memory_bytes: int
    algebraic_connectivity: float | None
    connected: bool

    @property
    def coverage(self) -> Fraction:
        return Fraction(self.holders, len(self.workers))

    @property
    def memory_bytes(self) -> int:
        return max(worker.memory_bytes for worker in self.workers)

    @property
    def memory_saved_bytes(self) -> int:
        """Per-device memory below the same plan with plain data parallelism."""
        return self.plain_memory_bytes - self.memory_bytes

    @property
    def effective_ticks(self) -> int:
        """T_eff rounded up to whole ticks (for display; compare ``effective`` exactly)."""
        return math.ceil(self.effective)

    @property
    def violations(self) -> tuple[str, ...]:
        return tuple(f"worker {w.worker} needs {w.memory_bytes} bytes per device, exceeds "
                     f"usable HBM {self.memory_limit_bytes} by "
                     f"{w.memory_bytes - self.memory_limit_bytes}"
                     for w in self.workers if w.memory_bytes > self.memory_limit_bytes)

    def as_dict(self) -> dict:
        return {"level": self.level.value, "masking": self.masking.value,
                "holders": self.holders, "coverage": fraction_text(self.coverage),
                "effective_ticks": self.effective_ticks,
                "effective_exact": fraction_text(self.effective),
                "full_compute_ticks": self.full_compute_ticks,
                "memory_bytes": self.memory_bytes, "plain_memory_bytes": self.plain_memory_bytes,
                "memory_saved_bytes": self.memory_saved_bytes,
                "algebraic_connectivity": self.algebraic_connectivity,
                "connected": self.connected,
                "workers": [worker.as_dict() for worker in self.workers]}


def fraction_text(value: Fraction) -> str:
    """``"p/q"`` (or ``"p"``): an exact rational for JSON."""
    return str(value)


# ------------------------------------------------------------------ the composition


def price_sdp(instance: Instance, plan: Plan, network: NetworkModel) -> SdpReport:
    """Price a placed, structurally valid SDP plan (DESIGN §7).  Never raises for a plan
    that merely does not fit: the report's ``violations`` say so."""
    training, sdp = instance.training, plan.sdp
    table = unit_table(instance, plan.config, plan.microbatch, sdp.level)
    workers = plan.num_replicas
    microbatches = cost.num_microbatches(training.global_batch, plan.microbatch, plan.config,
                                         workers)
    mode = plan.stages[0].recompute
    holder_sets = _holder_sets(sdp.mask, table.num_units)
    rank_sync = [_RankSync(network, plan, table, holder_sets, rank, training.optimizer,
                           training.tick_s) for rank in range(plan.config.devices)]
    reports = []
    for worker, row in enumerate(sdp.mask):
        held = set(row)
        run = _run_shares(table, held, sdp.masking)
        own = own_layer_ticks(table, held, sdp.masking)
        forward, backward = (sum(ticks[phase] for ticks in own.values()) for phase in (0, 1))
        compute = forward + backward
        paths = cost.GroupPaths.of_replica(network, plan.placement[0][worker], plan.config)
        hiding = own if training.tp_comm_overlap and paths.tp_local else None
        collectives = _collective_ticks(run, plan.config, paths, training.tick_s, hiding)
        recompute = _recompute_ticks(run, mode, plan.config, paths, training.tick_s, hiding)
        parts = [rank_sync[rank].worker(row) for rank in range(plan.config.devices)]
        reduce, gather = (max(part[phase] for part in parts) for phase in (0, 1))
        reports.append(WorkerReport(
            worker=worker, units=len(row), time_ticks=compute + recompute + collectives,
            compute_ticks=compute, recompute_ticks=recompute, collective_ticks=collectives,
            backward_ticks=backward, sync_ticks=reduce + gather,
            exposed_sync_ticks=cost.exposed_sync_ticks(
                reduce, backward, training.overlap_grad_reduce, gather, forward,
                training.overlap_param_gather),
            gather_ticks=gather, forward_ticks=forward,
            memory_bytes=_memory_bytes(table, held, run, sdp.masking, mode, training.optimizer,
                                       plan.zero, workers, sdp.holders)))
    tau_max = max(r.time_ticks for r in reports)
    exposed = max(r.exposed_sync_ticks for r in reports)
    total = cost.iteration_ticks(microbatches, 1, tau_max, exposed)
    flop_ticks = sum(r.compute_ticks for r in reports)
    full = table.full_compute_ticks
    profiles = [layer.profile(plan.config, plan.microbatch) for layer in instance.workload.layers]
    plain = cost.stage_memory_bytes([profiles], mode, cost.in_flight(0, 1, microbatches),
                                    training.optimizer, plan.zero, workers)
    connectivity, connected = worker_graph_connectivity(sdp.mask, table.num_units)
    return SdpReport(
        level=sdp.level, masking=sdp.masking, holders=sdp.holders, workers=tuple(reports),
        num_microbatches=microbatches, tau_max_ticks=tau_max,
        sync_ticks=max(r.sync_ticks for r in reports), exposed_sync_ticks=exposed,
        objective_ticks=total, full_compute_ticks=full,
        effective=effective_ticks(total, workers, full, flop_ticks),
        memory_limit_bytes=instance.cluster.usable_hbm_bytes, plain_memory_bytes=plain,
        algebraic_connectivity=connectivity, connected=connected)


def effective_ticks(total: int, workers: int, full_compute: int, worker_compute: int) -> Fraction:
    """T_eff = T · d · C_full / Σ_w C_w, exactly (T itself when no worker computes)."""
    if worker_compute == 0:
        return Fraction(total)
    return Fraction(total * workers * full_compute, worker_compute)


def _holder_sets(mask: Sequence[Sequence[int]], units: int) -> list[tuple[int, ...]]:
    """For every unit, the workers holding it, ascending."""
    holders: list[list[int]] = [[] for _ in range(units)]
    for worker, row in enumerate(mask):
        for unit in row:
            holders[unit].append(worker)
    return [tuple(workers) for workers in holders]


def _run_shares(table: UnitTable, held: set[int], masking: SdpMasking) -> list[Share]:
    """Shares a worker runs forward: the shared parts and the held units (forward masking)
    or every unit (backward masking)."""
    if masking is SdpMasking.BACKWARD:
        return [*table.shared, *table.units]
    return [*table.shared, *(table.units[u] for u in sorted(held))]


def own_layer_ticks(table: UnitTable, held: set[int],
                    masking: SdpMasking) -> dict[int, tuple[int, int]]:
    """layer -> (fwd, bwd) ticks of one microbatch the worker holding the units ``held``
    computes of it: the shares it runs, less the weight gradients of the units it does not
    hold under backward masking.  Their sums are F_w and R_w (C_w = F_w + R_w); each layer's
    is the X its TP collectives hide behind under ``tp_comm_overlap`` (docs/cost-model.md
    §5 e).  A layer's entry depends only on the units of that layer in ``held``."""
    own: dict[int, tuple[int, int]] = {}
    for share in _run_shares(table, held, masking):
        fwd, bwd = own.get(share.layer, (0, 0))
        own[share.layer] = (fwd + share.fwd_ticks, bwd + share.bwd_ticks)
    if masking is SdpMasking.BACKWARD:
        for index, unit in enumerate(table.units):
            if index not in held:
                fwd, bwd = own[unit.layer]
                own[unit.layer] = (fwd, bwd - unit.wgrad_ticks)
    return own


def _collective_ticks(run: list[Share], config: IntraConfig, paths: cost.GroupPaths,
                      tick_s: float, hiding: dict[int, tuple[int, int]] | None,
                      phase: Phase | None = None) -> int:
    """Σ over the shares run of their layer's collectives (of ``phase``, or all), each
    layer's TP ones hidden behind ``hiding[layer]`` when given (docs/cost-model.md §5 e).

    Only one share of a layer carries its collectives (module docstring), so per share is
    per layer; a share carries them as a profile does, the one field
    :func:`nest_cp.cost.terms.layer_collective_ticks` reads."""
    return sum(cost.layer_collective_ticks(share, config, paths, tick_s, phase,
                                           None if hiding is None else hiding[share.layer])
               for share in run if share.collectives)


def _recompute_ticks(run: list[Share], mode: RecomputeMode, config: IntraConfig,
                     paths: cost.GroupPaths, tick_s: float,
                     hiding: dict[int, tuple[int, int]] | None) -> int:
    """Full: the forward of every share run, and its forward collectives once more (hidden
    as the first time); selective: the attention cores' forward; none: 0 (DESIGN §3.2 a)."""
    if mode is RecomputeMode.FULL:
        return sum(s.fwd_ticks for s in run) + _collective_ticks(run, config, paths, tick_s,
                                                                 hiding, Phase.FWD)
    if mode is RecomputeMode.SELECTIVE:
        return sum(s.sel_fwd_ticks for s in run)
    return 0


class _RankSync:
    """Rank j's collectives of every worker, one after another (module docstring): the shared
    all-reduces over all d workers, each held unit's over its holders, and under backward
    masking every unit's weight broadcast.  Each unit's price is computed once for all the
    workers holding it."""

    def __init__(self, network: NetworkModel, plan: Plan, table: UnitTable,
                 holder_sets: list[tuple[int, ...]], rank: int, optimizer: Optimizer,
                 tick_s: float):
        self.network, self.plan, self.rank = network, plan, rank
        self.optimizer, self.tick_s = optimizer, tick_s
        everyone = tuple(range(plan.num_replicas))
        reduce, gather = self._all_reduce(sum(s.dense_params for s in table.shared),
                                          sum(s.expert_params for s in table.shared), everyone)
        if plan.sdp.masking is SdpMasking.BACKWARD:  # broadcasts: in the gradient phase
            path = self._expert_path(everyone)
            reduce += sum(broadcast_ticks(unit.params * optimizer.weight_bytes,
                                          len(everyone), path, tick_s)
                          for unit in table.units)
        self.shared = (reduce, gather)
        self.units = [self._all_reduce(unit.dense_params, unit.expert_params, holders)
                      for unit, holders in zip(table.units, holder_sets, strict=True)]

    def worker(self, row: Sequence[int]) -> tuple[int, int]:
        """The rank's sync ticks for the worker holding the units ``row``: (gradient phase,
        weight gathers), each summed over its collectives."""
        return tuple(self.shared[phase] + sum(self.units[unit][phase] for unit in row)
                     for phase in (0, 1))

    def _dense_path(self, workers: Sequence[int]) -> Path | None:
        """Dense gradients: the e ranks of each worker that share rank j's tensor index."""
        config, placement = self.plan.config, self.plan.placement[0]
        tensor = self.rank % config.tp
        return self.network.group_path([placement[w][tensor + config.tp * e]
                                        for w in workers for e in range(config.ep)])

    def _expert_path(self, workers: Sequence[int]) -> Path | None:
        """Expert gradients (and weight broadcasts): rank j of each worker."""
        return self.network.group_path([self.plan.placement[0][w][self.rank] for w in workers])

    def _all_reduce(self, dense_params: int, expert_params: int,
                    workers: Sequence[int]) -> tuple[int, int]:
        """One parameter set's gradient sync over ``workers``: (all-reduce or reduce-scatter,
        weight all-gather); ZeRO 1/2 split the all-reduce in two (docs/cost-model.md §5 c)."""
        ep, zero = self.plan.config.ep, self.plan.zero
        dense = cost.gradient_sync_parts(dense_params, self.optimizer, zero, len(workers) * ep,
                                         self._dense_path(workers), self.tick_s)
        expert = cost.gradient_sync_parts(expert_params, self.optimizer, zero, len(workers),
                                          self._expert_path(workers), self.tick_s)
        return dense[0] + expert[0], dense[1] + expert[1]


def mask_memory_bytes(table: UnitTable, mask: Sequence[Sequence[int]], holders: int,
                      masking: SdpMasking, mode: RecomputeMode, optimizer: Optimizer,
                      zero: int) -> int:
    """The largest worker memory of a mask (memory does not depend on the placement)."""
    return max(worker_memory_bytes(table, row, len(mask), holders, masking, mode, optimizer,
                                   zero) for row in mask)


def worker_memory_bytes(table: UnitTable, row: Sequence[int], workers: int, holders: int,
                        masking: SdpMasking, mode: RecomputeMode, optimizer: Optimizer,
                        zero: int) -> int:
    """The memory of the worker holding the units ``row`` (DESIGN §7)."""
    held = set(row)
    return _memory_bytes(table, held, _run_shares(table, held, masking), masking, mode,
                         optimizer, zero, workers, holders)


def _memory_bytes(table: UnitTable, held: set[int], run: list[Share], masking: SdpMasking,
                  mode: RecomputeMode, optimizer: Optimizer, zero: int, workers: int,
                  holders: int) -> int:
    """State (shared sharded over d, held units over h, unheld units' weights under backward
    masking) + one microbatch of kept activations + the recompute working set."""
    shared = sum(s.params for s in table.shared)
    own = sum(table.units[u].params for u in held)
    state = cost.state_bytes(shared, optimizer, zero, workers) + \
        cost.state_bytes(own, optimizer, zero, holders)
    if masking is SdpMasking.BACKWARD:
        others = sum(unit.params for index, unit in enumerate(table.units) if index not in held)
        state += others * optimizer.weight_bytes
    return state + kept_bytes(run, mode) + working_set_bytes(run, mode)


def kept_bytes(run: Sequence[Share], mode: RecomputeMode) -> int:
    """Activation bytes one microbatch keeps over the shares run: act, ckpt or sel_act."""
    if mode is RecomputeMode.FULL:
        return sum(s.ckpt_bytes for s in run)
    if mode is RecomputeMode.SELECTIVE:
        return sum(s.sel_act_bytes for s in run)
    return sum(s.act_bytes for s in run)


def working_set_bytes(run: Sequence[Share], mode: RecomputeMode) -> int:
    """The largest held share of one layer rebuilt while recomputing (0 without recompute)."""
    if mode is RecomputeMode.NONE:
        return 0
    per_layer: dict[int, int] = {}
    for share in run:
        rebuilt = share.act_bytes if mode is RecomputeMode.FULL else \
            share.act_bytes - share.sel_act_bytes
        per_layer[share.layer] = per_layer.get(share.layer, 0) + rebuilt
    return max(per_layer.values(), default=0)


def worker_graph_connectivity(mask: Sequence[Sequence[int]],
                              units: int) -> tuple[float | None, bool]:
    """(algebraic connectivity, connected) of the worker graph: workers adjacent when they
    share a unit (unweighted).  None for a single worker."""
    workers = len(mask)
    if workers < 2:
        return None, True
    incidence = np.zeros((workers, units), dtype=np.int64)
    for worker, row in enumerate(mask):
        incidence[worker, list(row)] = 1
    adjacency = (incidence @ incidence.T) > 0
    np.fill_diagonal(adjacency, False)
    laplacian = np.diag(adjacency.sum(axis=1)) - adjacency.astype(np.float64)
    second = float(np.sort(np.linalg.eigvalsh(laplacian))[1])
    return max(second, 0.0), _connected(adjacency)


def _connected(adjacency: np.ndarray) -> bool:
    """Breadth-first search from worker 0 over the boolean adjacency matrix."""
    seen = np.zeros(len(adjacency), dtype=bool)
    seen[0] = True
    frontier = seen.copy()
    while frontier.any():
        reached = adjacency[frontier].any(axis=0) & ~seen
        seen |= reached
        frontier = reached
    return bool(seen.all())
