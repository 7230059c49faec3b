"""DeepSpeed: the config JSON of a plan (batch, ZeRO, pipeline, tensor parallelism).

Keys are those DeepSpeed reads: deepspeedai/DeepSpeed ``deepspeed/runtime/constants.py``
(commit ac2f3a347d5c7467879ff60f3324718eef881dc6: ``train_batch_size``,
``train_micro_batch_size_per_gpu``, ``gradient_accumulation_steps``),
``deepspeed/runtime/config.py`` (commit 3a890ec57fb78fa08d97336dcee1931c40acfc34:
``get_pipeline_config``'s ``pipeline`` section, ``zero_optimization``) and the
AutoTP training section ``tensor_parallel.autotp_size``; listed once in
:data:`DEEPSPEED_KEYS`.

Mapping: ``train_micro_batch_size_per_gpu`` b, ``gradient_accumulation_steps``
m (the pipeline engine runs one microbatch per accumulation step),
``train_batch_size`` m·b·d·e (DeepSpeed checks micro × accumulation × data
parallel ranks); ``zero_optimization.stage`` z with ``overlap_comm`` for
overlapped reduction; ``pipeline.stages`` S, ``pipeline.partition``
``uniform`` when every stage holds as many layers, and
``pipeline.activation_checkpoint_interval`` 1 (every layer keeps only its
input) under full recomputation; ``tensor_parallel.autotp_size`` t.

What the JSON cannot carry is warned about: DeepSpeed builds the pipeline from
``PipelineModule(num_stages=..., partition_method=...)`` in the training script
and its partition methods (``uniform``, ``parameters``, ``type:REGEX``) take no
explicit boundaries, so an uneven split has no DeepSpeed spelling; expert
parallelism is the MoE layer's ``ep_size`` in code; ``PipelineModule`` is
documented as incompatible with ZeRO-2 and ZeRO-3; selective recomputation has
no config key.  Rank order (runtime/pipe/topology.py
``PipeModelDataParallelTopology``: axes pipe, data, model, the last fastest;
expert groups are consecutive data-parallel ranks) is the layout
(t, e, replica, stage); the launch table is in ``--json`` and ``--rank-map``.

What DeepSpeed cannot run at all is refused (exit 2, one line, the rule cited in
:mod:`nest_cp.model.launchers.deepspeed`): ZeRO-2/3 beside a pipeline (the pipeline
engine asserts against it) and AutoTP beside a pipeline (AutoTP's mesh has no pipeline
axis).  Beside the config the export writes a hostfile for DeepSpeed's launcher
(``nodeK slots=N``, one line per host in node-rank order) and the ``--include`` filter
naming each host's GPUs; a placement that launcher cannot realise (several agents on a
host, or a host's ranks not on increasing GPU ids) is a warning pointing to the launch
table, which torchrun realises.
"""

from __future__ import annotations

import json

from nest_cp.cli.export.common import (
    ExportFormat,
    ExportResult,
    common_warnings,
    one_recompute_mode,
    placement_warning,
    split_text,
)
from nest_cp.cli.export.ranks import RankMap, RankOrder, host_name, rank_map
from nest_cp.cli.export.view import PlanView
from nest_cp.model.errors import BackendOptionError, InternalError
from nest_cp.model.instance import RecomputeMode
from nest_cp.model.launchers.deepspeed import DeepSpeedLaunch, refusals, startup_violations
from nest_cp.model.plan import Dim

DEEPSPEED_SOURCE = ("deepspeedai/DeepSpeed deepspeed/runtime/constants.py at commit "
                    "ac2f3a347d5c7467879ff60f3324718eef881dc6 and deepspeed/runtime/config.py "
                    "at commit 3a890ec57fb78fa08d97336dcee1931c40acfc34")
DEEPSPEED_ORDER = RankOrder("pipe-data-model (DeepSpeed PipeModelDataParallelTopology)",
                            (Dim.TP, Dim.EP, Dim.REPLICA, Dim.STAGE))

# key (or section) -> type, or section -> {key -> type}
DEEPSPEED_KEYS: dict[str, type | dict[str, type]] = {
    "train_batch_size": int,
    "train_micro_batch_size_per_gpu": int,
    "gradient_accumulation_steps": int,
    "zero_optimization": {"stage": int, "overlap_comm": bool},
    "pipeline": {"stages": int, "partition": str, "activation_checkpoint_interval": int},
    "tensor_parallel": {"autotp_size": int},
}


def export_deepspeed(view: PlanView, gpus_per_node: int) -> ExportResult:
    """The DeepSpeed config and hostfile (module doc); BackendOptionError for a plan
    DeepSpeed cannot run."""
    launch = DeepSpeedLaunch(zero_stage=view.zero, pipeline_stages=view.num_stages,
                             autotp_size=view.tp, data_parallel=view.data_parallel,
                             train_batch_size=view.samples_per_iteration,
                             micro_batch=view.microbatch,
                             accumulation_steps=view.num_microbatches)
    refused = refusals(launch)
    if refused:
        raise BackendOptionError(f"DeepSpeed cannot run this plan: {refused[0]}; export it "
                                 f"for megatron or torchtitan", option="format")
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
    ranks = rank_map(view, DEEPSPEED_ORDER, gpus_per_node)
    warnings += placement_warning(ranks, "DeepSpeed's fixed rank order")
    hostfile, include, launcher_warning = deepspeed_hosts(ranks)
    warnings += launcher_warning
    text = json.dumps(config, indent=2) + "\n"
    return ExportResult(ExportFormat.DEEPSPEED, text, tuple(warnings), ranks, config=config,
                        files={"hostfile": hostfile, "include": include})


def deepspeed_hosts(ranks: RankMap) -> tuple[str, str, list[str]]:
    """The hostfile (``nodeK slots=N`` per host, node-rank order), the ``--include`` filter
    (``nodeK:g,g@...``) and a warning when DeepSpeed's launcher cannot realise the ranks."""
    lines = [f"{host_name(node.host)} slots={ranks.gpus_per_node}" for node in ranks.nodes]
    include = "@".join(f"{host_name(node.host)}:{','.join(map(str, node.gpus))}"
                       for node in ranks.nodes)
    unordered = [host_name(node.host) for node in ranks.nodes
                 if list(node.gpus) != sorted(node.gpus)]
    warnings = []
    if not ranks.one_agent_per_host or unordered:
        lines = sorted(set(lines), key=lines.index)
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
