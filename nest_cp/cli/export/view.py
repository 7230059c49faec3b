"""The one adapter between a plan and the exporters: everything they read, read here.

Exporters never touch :class:`nest_cp.model.plan.Plan` or the instance directly; they
read a :class:`PlanView`.  When the plan format grows (DESIGN §3.2: virtual
stages, per-stage recompute modes, overlapped gradient reduction), only
:func:`plan_view` changes.

A view is built from a plan the evaluator has accepted as meaningful for the
instance (a plan whose split, configuration or placement does not fit the
instance is bad input, :class:`PlanFormatError`); a plan over memory is still
exported, with a warning, since the user may know better than the profile.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from nest_cp.cost import terms as cost
from nest_cp.cost.evaluate import Evaluation, evaluate
from nest_cp.model.errors import PlanFormatError
from nest_cp.model.instance import (
    AttentionKind,
    CollectiveGroup,
    CollectiveKind,
    Instance,
    ModelShape,
    Optimizer,
    Precision,
    RecomputeMode,
    precision_of,
)
from nest_cp.model.plan import Placement, Plan
from nest_cp.profiles.presets import MODELS
from nest_cp.profiles.transformer import model_shape

RECOMPUTE_STRENGTH = {RecomputeMode.NONE: 0, RecomputeMode.SELECTIVE: 1, RecomputeMode.FULL: 2}


class LayerKind(str, Enum):
    """What a layer of the chain is to a launcher: the embedding, a decoder block, the head."""

    EMBEDDING = "embedding"
    DECODER = "decoder"
    HEAD = "head"


EMBEDDING_NAMES = ("embed", "tok_embeddings", "wte")
HEAD_NAMES = ("head", "lm_head", "output", "loss", "final")


@dataclass(frozen=True, slots=True)
class Chunk:
    """Chunk ``index`` of the layer chain (layer order), run by pipeline stage ``stage``."""

    index: int
    stage: int
    first_layer: int
    last_layer: int

    @property
    def layers(self) -> range:
        return range(self.first_layer, self.last_layer + 1)


@dataclass(frozen=True, slots=True)
class PlanView:
    """A plan as the launchers see it (all degrees, the chunks, the rank placement).

    ``chunks`` lists the S·v contiguous chunks in layer order, chunk k on stage
    k mod S; ``stage_recompute[s]`` is stage s's mode; ``placement[s][r][j]`` the
    device of rank (stage s, replica r, j = t_index + t·c_index + t·c·e_index).
    """

    tp: int
    ep: int
    microbatch: int
    zero: int
    replicas: int
    num_stages: int
    virtual_stages: int
    chunks: tuple[Chunk, ...]
    stage_recompute: tuple[RecomputeMode, ...]
    overlap_grad_reduce: bool
    placement: Placement
    num_microbatches: int
    global_batch: int
    seq_len: int
    layer_names: tuple[str, ...]
    layer_kinds: tuple[LayerKind, ...]
    sequence_parallel: bool
    num_devices: int
    fits_memory: bool
    memory_note: str = ""
    attention: AttentionKind | None = None  # the kernel the profiles assume, if recorded
    overlap_param_gather: bool = False  # the ZeRO 1/2 weight all-gather priced as hidden
    sequence_parallel_note: str = ""  # why the export's SP differs from the profiles', if so
    precision: Precision = Precision.BF16  # the weights' precision the plan priced
    precision_note: str = ""  # why the precision is a guess, if it is
    grad_bytes: int = 2  # bytes per gradient element the data-parallel reduction was priced at
    model: ModelShape | None = None  # the architecture profiled, if known
    model_note: str = ""  # where ``model`` came from when the workload does not record it
    cp: int = 1  # context width c (DESIGN §3.4)
    cp_comm: str = "p2p"  # how the c ranks exchange K/V: "p2p" (ring) or "a2a" (Ulysses)

    @property
    def devices_per_replica(self) -> int:
        """a = t·c·e."""
        return self.tp * self.cp * self.ep

    @property
    def world_size(self) -> int:
        """Ranks the launcher starts: a·S·d (idle devices run nothing)."""
        return self.devices_per_replica * self.num_stages * self.replicas

    @property
    def data_parallel(self) -> int:
        """Ranks that hold each dense parameter shard: d·e (EP ranks are data-parallel)."""
        return self.replicas * self.ep

    @property
    def samples_per_iteration(self) -> int:
        """m·b·e·d: what the plan's iteration time was charged for (at least B)."""
        return self.num_microbatches * self.microbatch * self.data_parallel

    def decoder_count(self, chunk: Chunk) -> int:
        return sum(self.layer_kinds[layer] is LayerKind.DECODER for layer in chunk.layers)

    @property
    def num_decoder_layers(self) -> int:
        return sum(kind is LayerKind.DECODER for kind in self.layer_kinds)

    def stage_chunks(self, stage: int) -> tuple[Chunk, ...]:
        return tuple(chunk for chunk in self.chunks if chunk.stage == stage)

    def precision_warnings(self, launcher: str) -> list[str]:
        """What every launcher's precision warnings start with: why the precision is a guess,
        if it is, and fp32 weights priced with narrower gradients, which no launcher spells
        (each reduces fp32 gradients when the weights are fp32)."""
        warnings = [self.precision_note] if self.precision_note else []
        if self.precision is Precision.FP32 and self.grad_bytes != 4:
            warnings.append(f"fp32 weights with {self.grad_bytes}-byte gradients have no "
                            f"{launcher} spelling: it reduces fp32 gradients (4 bytes)")
        return warnings


def classify_layer(name: str, index: int, num_layers: int) -> LayerKind:
    """Embedding if the first layer is named like one, head if the last is, else decoder."""
    lowered = name.lower()
    if index == 0 and lowered.startswith(EMBEDDING_NAMES):
        return LayerKind.EMBEDDING
    if index == num_layers - 1 and lowered.startswith(HEAD_NAMES):
        return LayerKind.HEAD
    return LayerKind.DECODER


def checked_evaluation(instance: Instance, plan: Plan, file: str | None = None) -> Evaluation:
    """The evaluator's verdict on ``plan``; PlanFormatError when it does not fit the instance."""
    evaluation = evaluate(instance, plan)
    if evaluation.malformed_fields:
        raise PlanFormatError(f"expected a plan that fits the instance: "
                              f"{evaluation.violations[0]}", file=file,
                              field=evaluation.malformed_fields[0])
    return evaluation


def plan_view(instance: Instance, plan: Plan, file: str | None = None) -> PlanView:
    """The view of ``plan`` on ``instance`` (module doc); ``file`` names the plan in errors."""
    evaluation = checked_evaluation(instance, plan, file)
    placed = evaluation.plan  # the evaluator fills in the default layout
    config, training = plan.config, instance.training
    num_stages = placed.num_stages
    chunks = tuple(Chunk(index, placed.stage_of_chunk(index), chunk.first_layer,
                         chunk.last_layer) for index, chunk in enumerate(placed.stages))
    modes = tuple(placed.stage_recompute(stage) for stage in range(num_stages))
    layers = instance.workload.layers
    names = tuple(layer.name for layer in layers)
    over = [v for v in evaluation.violations if "exceeds usable HBM" in v]
    return PlanView(
        tp=config.tp, ep=config.ep, microbatch=plan.microbatch, zero=plan.zero,
        replicas=plan.num_replicas, num_stages=num_stages,
        virtual_stages=placed.virtual_stages, chunks=chunks, stage_recompute=modes,
        overlap_grad_reduce=training.overlap_grad_reduce,
        overlap_param_gather=training.overlap_param_gather, placement=placed.placement,
        num_microbatches=cost.num_microbatches(training.global_batch, plan.microbatch, config,
                                               plan.num_replicas),
        global_batch=training.global_batch, seq_len=training.seq_len, layer_names=names,
        layer_kinds=tuple(classify_layer(name, index, len(names))
                          for index, name in enumerate(names)),
        num_devices=instance.cluster.num_devices, fits_memory=not over,
        memory_note=over[0] if over else "", attention=instance.workload.attention,
        grad_bytes=training.optimizer.grad_bytes, cp=config.cp, cp_comm=training.cp_comm.value,
        **_precision(training.optimizer), **_model(instance, names),
        **_sequence_parallel(instance, plan))


def _precision(optimizer: Optimizer) -> dict:
    precision, note = precision_of(optimizer)
    return {"precision": precision, "precision_note": note}


def _model(instance: Instance, names: tuple[str, ...]) -> dict:
    """The recorded architecture; for an instance file written before workloads recorded it,
    the preset the workload is named after when its depth matches (said in ``model_note``)."""
    workload = instance.workload
    if workload.model is not None:
        return {"model": workload.model}
    preset = MODELS.get(workload.name)
    decoders = sum(classify_layer(name, index, len(names)) is LayerKind.DECODER
                   for index, name in enumerate(names))
    if preset is None or preset.num_layers != decoders:
        return {}
    return {"model": model_shape(preset),
            "model_note": f"the instance records no model; its workload is named after the "
                          f"preset {workload.name!r} ({decoders} layers), whose architecture "
                          f"is exported"}


def _sequence_parallel(instance: Instance, plan: Plan) -> dict:
    """Megatron sequence parallelism of the plan: as the workload records it, else as its
    profiles show it (TP collectives all all-gather/reduce-scatter), with a note when the
    record and the profiles disagree (the export follows the record)."""
    if plan.config.tp == 1:  # Megatron turns sequence parallelism off without TP
        return {"sequence_parallel": False}
    kinds = {collective.kind for layer in instance.workload.layers
             for collective in layer.profile(plan.config, plan.microbatch).collectives
             if collective.group is CollectiveGroup.TP}
    shown = bool(kinds) and kinds <= {CollectiveKind.ALL_GATHER, CollectiveKind.REDUCE_SCATTER}
    recorded = instance.workload.sequence_parallel
    if recorded is None:
        return {"sequence_parallel": shown}
    note = "" if not kinds or recorded == shown else (
        f"the workload records sequence_parallel {str(recorded).lower()} but its "
        f"tp={plan.config.tp} profiles' TP collectives say {str(shown).lower()}: exported as "
        f"recorded")
    return {"sequence_parallel": recorded, "sequence_parallel_note": note}
