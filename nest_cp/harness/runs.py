"""Training runs as sources describe them, and nest-cp's prediction of each.

A :class:`Run` is a model (preset name, HF config or transformer description file) trained
on a preset network with a Megatron-style plan (tp, pp, dp, ep, microbatch, recompute, ZeRO
stage): what a measured row of ``nest-cp calibrate`` or of the fidelity report
(``reports/fidelity/``) says. :func:`predict` profiles the model on a device, builds the plan
(Megatron's split: blocks evenly over the stages, the embedding on the first stage, the head
on the last; extra blocks go to the middle stages first, as Llama 3 405B's first and last
stages hold one layer less), evaluates it with the plan evaluator and reports iteration time,
model TF/s per GPU, MFU and the first stage's memory.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

from nest_cp.cost import terms as cost
from nest_cp.cost.evaluate import evaluate
from nest_cp.model.errors import InstanceFormatError
from nest_cp.model.instance import (
    Cluster,
    Instance,
    IntraConfig,
    Optimizer,
    RecomputeMode,
    TrainingSetup,
)
from nest_cp.model.plan import Plan, Stage
from nest_cp.profiles.kernels import DeviceSpec
from nest_cp.profiles.profiler import AttentionKind, ProfileOptions
from nest_cp.profiles.transformer import TransformerSpec

__all__ = ["Prediction", "RecomputeMode", "Run", "build", "load_model", "megatron_chunks",
           "model_flops_per_iteration", "predict", "predict_many"]


@dataclass(frozen=True, slots=True)
class Run:
    """One training run: model, hardware and the plan the source ran."""

    name: str
    model: TransformerSpec
    network: str
    devices: int
    tp: int
    pp: int
    dp: int
    microbatch: int
    global_batch: int
    seq_len: int
    ep: int = 1
    vp: int = 1
    recompute: RecomputeMode = RecomputeMode.NONE
    zero: int = 1
    attention: AttentionKind = AttentionKind.FLASH
    sequence_parallel: bool = True
    overlap_grad_reduce: bool = True
    overlap_param_gather: bool = False  # --overlap-param-gather (docs/cost-model.md §5 d)
    tp_comm_overlap: bool = False  # --tp-comm-overlap (docs/cost-model.md §5 e)

    @property
    def devices_used(self) -> int:
        return self.tp * self.ep * self.pp * self.dp


@dataclass(frozen=True, slots=True)
class Prediction:
    """nest-cp's numbers for a run."""

    iteration_s: float
    tflops_per_gpu: float
    mfu: float
    first_stage_memory_bytes: int
    feasible: bool
    model_flops_per_iteration: float


def megatron_chunks(num_blocks: int, pp: int, vp: int,
                    recompute: RecomputeMode) -> tuple[Stage, ...]:
    """Chunks over [embedding, blocks..., head]: blocks evenly over the pp*vp chunks (extras
    to the middle chunks first), the embedding in the first chunk, the head in the last.
    Chunk k runs on stage k mod pp (Megatron's virtual pipeline)."""
    chunks = pp * vp
    if not 1 <= chunks <= num_blocks:
        raise InstanceFormatError(f"expected 1 <= pp x vp <= {num_blocks} blocks, got "
                                  f"{pp} x {vp}", field="pp")
    base, extra = divmod(num_blocks, chunks)
    sizes = [base] * chunks
    order = list(range(1, chunks - 1)) + [0, chunks - 1] if chunks > 2 else list(range(chunks))
    for index in order[:extra]:
        sizes[index] += 1
    stages, first = [], 0
    for index, size in enumerate(sizes):
        last = first + size + (index == 0) + (index == chunks - 1) - 1
        stages.append(Stage(first, last, recompute))
        first = last + 1
    return tuple(stages)


def build(run: Run, device: DeviceSpec, optimizer: Optimizer,
          workloads: dict | None = None) -> tuple[Instance, Plan]:
    """The instance (profiled for the run's configuration only) and the run's plan.

    ``workloads`` caches profiles (and instances) across runs priced on the same device:
    runs that share the model, sequence, widths, microbatch and profile options share one
    profile, and runs that also share the cluster and training setup one instance (named
    after the first of them).
    """
    from nest_cp.profiles.presets import network_cluster, profile_model

    config = IntraConfig(run.tp, run.ep)
    training = TrainingSetup(global_batch=run.global_batch, seq_len=run.seq_len,
                             microbatches=(run.microbatch,), optimizer=optimizer,
                             zero_stages=(run.zero,), recompute_modes=(run.recompute,),
                             virtual_stages=(run.vp,),
                             overlap_grad_reduce=run.overlap_grad_reduce,
                             overlap_param_gather=run.overlap_param_gather,
                             tp_comm_overlap=run.tp_comm_overlap)
    options = ProfileOptions(attention=run.attention,
                             sequence_parallel=run.sequence_parallel and run.tp > 1)
    key = (run.model, run.seq_len, config, run.microbatch, options)
    workload = None if workloads is None else workloads.get(key)
    if workload is None:
        workload = profile_model(run.model, device, training, (config,), options)
        if workloads is not None:
            workloads[key] = workload
    instance_key = (key, run.network, run.devices, training)
    instance = None if workloads is None else workloads.get(instance_key)
    if instance is None:
        cluster = _with_device(network_cluster(run.network, run.devices), device)
        instance = Instance(workload=workload, cluster=cluster, training=training,
                            name=run.name)
        if workloads is not None:
            workloads[instance_key] = instance
    plan = Plan(config, run.microbatch, run.zero, run.dp,
                megatron_chunks(run.model.num_layers, run.pp, run.vp, run.recompute),
                virtual_stages=run.vp)
    return instance, plan


def _with_device(cluster: Cluster, device: DeviceSpec) -> Cluster:
    return replace(cluster, hbm_bytes=device.hbm_bytes, peak_flops_per_s=device.peak_flops)


def predict_many(runs: list[Run], device: DeviceSpec,
                 optimizer: Optimizer) -> list[Prediction]:
    """:func:`predict` for every run, profiling each distinct model shape once."""
    workloads: dict = {}
    return [predict(run, device, optimizer, workloads) for run in runs]


def predict(run: Run, device: DeviceSpec, optimizer: Optimizer,
            workloads: dict | None = None) -> Prediction:
    """Evaluate the run's plan on the device; raise InstanceFormatError if it is malformed."""
    instance, plan = build(run, device, optimizer, workloads)
    evaluation = evaluate(instance, plan)
    if evaluation.objective_ticks is None:
        raise InstanceFormatError(f"expected a plan that fits the run: "
                                  f"{evaluation.violations[0]}", field=run.name)
    seconds = evaluation.iteration_time_s
    flops = model_flops_per_iteration(instance, plan)
    mfu = evaluation.mfu  # the evaluator's 3F / (T * devices * peak), DESIGN §3.2 e
    if mfu is None:
        raise InstanceFormatError("expected profiles with FLOPs and a device peak",
                                  field=run.name)
    return Prediction(iteration_s=seconds, tflops_per_gpu=mfu * device.peak_flops / 1e12,
                      mfu=mfu, first_stage_memory_bytes=evaluation.stages[0].memory_bytes,
                      feasible=evaluation.feasible, model_flops_per_iteration=3 * flops)


def model_flops_per_iteration(instance: Instance, plan: Plan) -> float:
    """F = B x forward model FLOPs per sample (DESIGN §3.2 e), without the factor 3."""
    config, microbatch = plan.config, plan.microbatch
    flops = [layer.profile(config, microbatch).flops or 0.0 for layer in instance.workload.layers]
    return float(cost.flops_per_iteration(flops, config, microbatch,
                                          instance.training.global_batch))


def load_model(value: str, base_dir: Path) -> TransformerSpec:
    """A preset model name, or a JSON/YAML file: an HF config.json or a description."""
    from nest_cp.model.documents import read_document
    from nest_cp.profiles.hfconfig import spec_from_description, spec_from_hf_config
    from nest_cp.profiles.presets import MODELS

    if value in MODELS:
        return MODELS[value]
    path = base_dir / value
    if path.suffix.lower() not in (".json", ".yaml", ".yml"):
        raise InstanceFormatError(f"expected a preset model ({', '.join(sorted(MODELS))}) or a "
                                  f"model file, got {value!r}", field="model")
    data = read_document(path)
    try:
        if isinstance(data, dict) and "model_type" in data:
            return spec_from_hf_config(data, name=path.stem)
        if isinstance(data, dict):  # "_source"-style keys are comments
            data = {key: item for key, item in data.items() if not str(key).startswith("_")}
        return spec_from_description(data, prefix="")
    except InstanceFormatError as exc:
        raise InstanceFormatError(exc.detail, file=str(path), field=exc.field) from None
