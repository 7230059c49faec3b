"""DeepSpeed: the config of a plan (batch, ZeRO, precision, pipeline, tensor parallelism).

Target: DeepSpeed v0.19.3 (tag ``v0.19.3``, commit
0c36f6d3efb806c07a44e5c2c9b18a81d204b821), whose startup checks
:mod:`nest_cp.model.launchers.deepspeed` transcribes with file and line.  Keys are those
that version reads (``deepspeed/runtime/constants.py``, ``runtime/config.py``,
``runtime/precision_config.py``, ``runtime/zero/config.py``,
``runtime/tensor_parallel/config.py``), listed once in :data:`DEEPSPEED_KEYS`.

Mapping: ``train_micro_batch_size_per_gpu`` b, ``gradient_accumulation_steps``
m (the pipeline engine runs one microbatch per accumulation step),
``train_batch_size`` m·b·d·e (DeepSpeed checks micro × accumulation × data
parallel ranks); ``zero_optimization.stage`` z with ``overlap_comm`` for
overlapped reduction; ``bf16`` or ``fp16`` ``{"enabled": true}`` for the priced 2-byte
weights (:func:`nest_cp.cli.export.view.precision_of`) and ``communication_data_type``
``fp32`` when the plan priced 4-byte gradients beside them; ``pipeline.stages`` S,
``pipeline.partition`` ``uniform`` when every stage holds as many layers, and
``pipeline.activation_checkpoint_interval`` 1 (every layer keeps only its
input) under full recomputation; ``tensor_parallel.autotp_size`` t.

What the config cannot carry is a warning, on stderr and as a ``# warning:`` line at the
top of the file (DeepSpeed reads config files with hjson, which takes ``#`` comments): the
model itself (DeepSpeed's config has none: the training script builds it; the warning
names the architecture priced); the pipeline, which DeepSpeed builds from
``PipelineModule(num_stages=..., partition_method=...)`` in the training script, whose
partition methods (``uniform``, ``parameters``, ``type:REGEX``) take no explicit
boundaries, so an uneven split has no DeepSpeed spelling; expert parallelism (the MoE
layer's ``ep_size`` in code); selective recomputation; and, with AutoTP, the ``mpu`` the
script must pass so that DeepSpeed's batch check counts data-parallel ranks only.  Rank
order (runtime/pipe/topology.py ``PipeModelDataParallelTopology``: axes pipe, data,
model, the last fastest; expert groups are consecutive data-parallel ranks) is the
layout (t, e, replica, stage); the launch table is in ``--json`` and ``--rank-map``.

What DeepSpeed v0.19.3 cannot run at all is refused (exit 2, one line, the rule cited):
ZeRO-2/3 beside a pipeline (the pipeline engine asserts against it), AutoTP beside a
pipeline (AutoTP's mesh has no pipeline axis), AutoTP with ZeRO-3 (the engine asserts
against it before v0.19.4) and context parallelism (c > 1): DeepSpeed's Ulysses sequence
parallelism cannot be expressed by a config as priced (a config's ``sequence_parallel_size``
builds the groups, but without an ``mpu`` from the training script the gradients are
reduced over the d data-parallel ranks, not d·c, and the all-to-all attention is code;
``launchers.deepspeed`` ``ULYSSES``).  Beside the config the export gives DeepSpeed's hostfile
(``nodeK slots=N``, N the host's GPUs in use, one line per host in node-rank order; the
CLI writes it next to the config) and, only when some host's GPUs are not 0..N-1, the
``--include`` filter naming them; a placement that launcher cannot realise (several
agents on a host, or a host's ranks not on increasing GPU ids) is a warning pointing to
the launch table, which torchrun realises.
"""

from __future__ import annotations

import json

from nest_cp.cli.export.common import (
    ExportFormat,
    ExportResult,
    common_warnings,
    one_recompute_mode,
    placement_warning,
    plan_summary,
    split_text,
)
from nest_cp.cli.export.ranks import Axis, RankMap, RankOrder, host_name, rank_map
from nest_cp.cli.export.view import PlanView, Precision
from nest_cp.model.errors import BackendOptionError, InternalError
from nest_cp.model.instance import RecomputeMode
from nest_cp.model.launchers.deepspeed import (
    DEEPSPEED_VERSION,
    DeepSpeedLaunch,
    refusals,
    startup_violations,
)

DEEPSPEED_SOURCE = ("deepspeed/runtime/constants.py, config.py, precision_config.py, "
                    "zero/config.py and tensor_parallel/config.py at that version; its startup "
                    "checks transcribed in nest_cp/model/launchers/deepspeed.py")
DEEPSPEED_ORDER = RankOrder("pipe-data-model (DeepSpeed PipeModelDataParallelTopology)",
                            (Axis.TP, Axis.CP, Axis.EP, Axis.REPLICA, Axis.STAGE))

# key (or section) -> type, or section -> {key -> type}, as DeepSpeed v0.19.3 reads them:
# runtime/constants.py lines 19, 95, 107 (batch), 127-131 (bf16), 169-172 (fp16), 278
# (communication_data_type); runtime/zero/config.py (stage line 95, overlap_comm line 138);
# runtime/config.py get_pipeline_config (line 413); runtime/tensor_parallel/config.py
# (autotp_size line 45)
DEEPSPEED_KEYS: dict[str, type | dict[str, type]] = {
    "train_batch_size": int,
    "train_micro_batch_size_per_gpu": int,
    "gradient_accumulation_steps": int,
    "zero_optimization": {"stage": int, "overlap_comm": bool},
    "bf16": {"enabled": bool},
    "fp16": {"enabled": bool},
    "communication_data_type": str,
    "pipeline": {"stages": int, "partition": str, "activation_checkpoint_interval": int},
    "tensor_parallel": {"autotp_size": int},
}
HALF = {Precision.BF16: "bf16", Precision.FP16: "fp16"}


def export_deepspeed(view: PlanView, gpus_per_node: int) -> ExportResult:
    """The DeepSpeed config and hostfile (module doc); BackendOptionError for a plan
    DeepSpeed cannot run."""
    launch = DeepSpeedLaunch(zero_stage=view.zero, pipeline_stages=view.num_stages,
                             autotp_size=view.tp, data_parallel=view.data_parallel,
                             train_batch_size=view.samples_per_iteration,
                             micro_batch=view.microbatch,
                             accumulation_steps=view.num_microbatches,
                             bf16=view.precision is Precision.BF16,
                             fp16=view.precision is Precision.FP16,
                             sequence_parallel=view.cp)
    refused = refusals(launch)
    if refused:
        raise BackendOptionError(f"DeepSpeed cannot run this plan: {refused[0]}; solve an "
                                 f"instance made with --launcher deepspeed for a plan it runs, "
                                 f"or export this one for megatron or torchtitan",
                                 option="format")
    broken = startup_violations(launch)
    if broken:
        raise InternalError(f"the DeepSpeed export breaks a startup rule: {broken[0]}")
    warnings = common_warnings(view)
    config: dict = {
        "train_batch_size": view.samples_per_iteration,
        "train_micro_batch_size_per_gpu": view.microbatch,
        "gradient_accumulation_steps": view.num_microbatches,
        "zero_optimization": {"stage": view.zero, "overlap_comm": view.overlap_grad_reduce},
    }
    warnings += _precision(view, config)
    mode, recompute_warnings = one_recompute_mode(view, "DeepSpeed")
    warnings += recompute_warnings
    if view.num_stages > 1:
        config["pipeline"] = _pipeline(view, mode, warnings)
    elif mode is not RecomputeMode.NONE:
        warnings.append(f"{mode.value} recomputation without pipeline stages has no DeepSpeed "
                        f"config key: enable activation checkpointing in the model code")
    if mode is RecomputeMode.SELECTIVE and view.num_stages > 1:
        warnings.append("selective recomputation has no DeepSpeed config key: exported no "
                        "recomputation; checkpoint the attention core in the model code")
    if view.tp > 1:
        config["tensor_parallel"] = {"autotp_size": view.tp}
        warnings.append(f"AutoTP: pass mpu=deepspeed.utils.groups to deepspeed.initialize "
                        f"(after groups._init_tp_mesh_device(tensor_model_parallel_size="
                        f"{view.tp})); without an mpu DeepSpeed checks train_batch_size "
                        f"against all {view.world_size} ranks, not the {view.data_parallel} "
                        f"data-parallel ones, and refuses this config (runtime/config.py "
                        f"lines 695-708, 919)")
    if view.ep > 1:
        warnings.append(f"expert parallelism is not a DeepSpeed config key: build the MoE "
                        f"layers with ep_size={view.ep} (deepspeed.moe.layer.MoE)")
    if view.sequence_parallel:
        warnings.append(f"Megatron sequence parallelism (priced with tp={view.tp}) has no "
                        f"DeepSpeed config key: shard norms and dropout by sequence in the "
                        f"model code, or activation memory exceeds the plan's")
    if view.attention is not None:
        warnings.append(f"the profiles assume {view.attention.value} attention, which no "
                        f"DeepSpeed config key selects: the model code must run it")
    warnings += _model_warnings(view)
    ranks = rank_map(view, DEEPSPEED_ORDER, gpus_per_node)
    warnings += placement_warning(ranks, "DeepSpeed's fixed rank order")
    hostfile, include, launcher_warning = deepspeed_hosts(ranks)
    warnings += launcher_warning
    files = {"hostfile": hostfile} | ({"include": include} if include else {})
    return ExportResult(ExportFormat.DEEPSPEED, _text(view, config, warnings),
                        tuple(warnings), ranks, config=config, files=files)


def _precision(view: PlanView, config: dict) -> list[str]:
    """The bf16/fp16 block for 2-byte weights and, when the plan priced 4-byte gradients
    beside them, ``communication_data_type`` fp32 (DeepSpeed otherwise reduces gradients in
    the weights' type: runtime/engine.py line 1293, communication_data_type)."""
    warnings = view.precision_warnings("DeepSpeed")
    if view.precision is Precision.FP32:
        return warnings
    config[HALF[view.precision]] = {"enabled": True}
    if view.grad_bytes == 4:
        config["communication_data_type"] = "fp32"
    elif view.grad_bytes != 2:
        warnings.append(f"{view.grad_bytes}-byte gradients have no DeepSpeed spelling: it "
                        f"reduces them in {HALF[view.precision]}")
    return warnings


def _model_warnings(view: PlanView) -> list[str]:
    """DeepSpeed's config carries no model: the training script builds it."""
    if view.model is None:
        return ["DeepSpeed's config carries no model and the instance records no model "
                "architecture: the training script must build the model the plan was priced "
                "for"]
    note = [view.model_note] if view.model_note else []
    return note + [f"DeepSpeed's config carries no model: the training script must build the "
                   f"priced architecture, {view.model.description}, sequence {view.seq_len}"]


def _text(view: PlanView, config: dict, warnings: list[str]) -> str:
    """The config as JSON under '#' comment lines: DeepSpeed reads config files with hjson
    (runtime/config.py line 683, DeepSpeedConfig.__init__; __init__.py deepspeed.initialize
    via tensor_parallel/init_utils.py load_ds_config line 24), which takes them."""
    header = ["# DeepSpeed config for a nest-cp plan (nest-cp export --format deepspeed).",
              f"# plan: {plan_summary(view)}",
              f"# targets {DEEPSPEED_VERSION}: it passes that release's startup checks as "
              f"nest-cp transcribes them; AutoTP with ZeRO-3, which v0.16.4-v0.19.3 refuse, is "
              f"never exported",
              f"# keys: {DEEPSPEED_SOURCE}",
              "# DeepSpeed reads this file with hjson, which allows these comment lines; a "
              "strict JSON reader needs them removed"]
    header += [f"# warning: {warning}" for warning in warnings]
    return "\n".join(header) + "\n" + json.dumps(config, indent=2) + "\n"


def deepspeed_hosts(ranks: RankMap) -> tuple[str, str, list[str]]:
    """The hostfile (``nodeK slots=N`` per host, N its GPUs in use, node-rank order), the
    ``--include`` filter (``nodeK:g,g@...``) when some host's GPUs are not 0..N-1 (else
    empty: the hostfile alone selects them), and a warning when DeepSpeed's launcher cannot
    realise the ranks."""
    lines = [f"{host_name(node.host)} slots={len(node.gpus)}" for node in ranks.nodes]
    include = ""
    realisable = ranks.one_agent_per_host and all(
        list(node.gpus) == sorted(node.gpus) for node in ranks.nodes)
    if realisable and any(list(node.gpus) != list(range(len(node.gpus)))
                          for node in ranks.nodes):
        include = "@".join(f"{host_name(node.host)}:{','.join(map(str, node.gpus))}"
                           for node in ranks.nodes)
    unordered = [host_name(node.host) for node in ranks.nodes
                 if list(node.gpus) != sorted(node.gpus)]
    warnings = []
    if not realisable:
        lines = [f"{host_name(host)} slots={ranks.gpus_per_node}"
                 for host in dict.fromkeys(node.host for node in ranks.nodes)]
        warnings.append("DeepSpeed's launcher starts one agent per hostfile line with its "
                        "local ranks on increasing GPU ids, which cannot realise this placement"
                        + (f" (hosts {', '.join(unordered[:4])} run ranks on GPUs out of order)"
                           if unordered else "")
                        + ": start the ranks with torchrun from the launch table (--rank-map)")
    return "\n".join(lines) + "\n", include, warnings


def _pipeline(view: PlanView, mode: RecomputeMode, warnings: list[str]) -> dict:
    sizes = [len(chunk.layers) for chunk in view.chunks]
    uniform = len(set(sizes)) == 1
    warnings.append(f"DeepSpeed takes the pipeline from PipelineModule(num_stages="
                    f"{view.num_stages}, partition_method=...) in the training script; the "
                    f"config's pipeline section must match it")
    if view.virtual_stages > 1:
        layers = len(view.layer_kinds)
        uniform = layers % view.num_stages == 0
        warnings.append(f"interleaved 1F1B ({view.virtual_stages} virtual stages) has no "
                        f"DeepSpeed pipeline schedule: exported {view.num_stages} plain stages "
                        f"of contiguous layers, not the plan's chunks ({split_text(view)})")
    elif not uniform:
        warnings.append(f"the plan's uneven split ({split_text(view)}) cannot be expressed: "
                        f"DeepSpeed's partition methods (uniform, parameters, type:REGEX) take "
                        f"no explicit stage boundaries; exported 'parameters' (balanced by "
                        f"parameter count)")
    return {"stages": view.num_stages, "partition": "uniform" if uniform else "parameters",
            "activation_checkpoint_interval": 1 if mode is RecomputeMode.FULL else 0}
