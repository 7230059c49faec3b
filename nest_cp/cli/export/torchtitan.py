"""torchtitan: the job TOML of a plan (training batch, [parallelism], activation checkpointing).

Target: torchtitan v0.2.2 (tag ``v0.2.2``, commit
73a0e6979dd10b6b1904098eb3c8f62c18ab87ce), whose startup checks
:mod:`nest_cp.model.launchers.torchtitan` transcribes with file and line.  Keys are those
of its ``torchtitan/config/job_config.py``, listed once in :data:`TORCHTITAN_KEYS` (the
tests parse the output with tomllib and check every key against it).

Model and precision: ``[model] name, flavor`` is the shipped flavor of exactly the priced
architecture (``llama3`` ``debugmodel``/``8B``/``70B``/``405B``: Llama 3 70B is
``llama3``/``70B``).  A plan of any other architecture (GPT-3, Mixtral, ...) cannot start
in torchtitan as exported, so it is refused (BackendOptionError, exit 2) with the reason
the search gives under ``--launcher torchtitan`` (``launchers.torchtitan.model_problem``);
an instance recording no model gets a job without ``[model]`` and a warning that torchtitan
then trains its default debug model.  ``[training] mixed_precision_param`` is ``bfloat16``
for 2-byte weights (fp16 has no spelling: a warning) or ``float32``; torchtitan always
reduces gradients in float32 and runs no mixed precision with TP or PP without FSDP, each
a warning where the plan priced otherwise.

Mapping:

- c > 1 -> ``context_parallel_degree`` c (PyTorch's ring-style context-parallel SDPA with
  the ``headtail`` load balancer, priced as the p2p ring; FSDP always runs over
  dp_shard x cp, so ZeRO 0 becomes FSDP over the c context ranks, with a warning).
  Refused (exit 2, the rule cited, ``launchers.search``): ``cp_comm`` a2a (torchtitan has
  no Ulysses), c > 1 beside e > 1 (its expert ranks follow the tensor ranks like its context
  ranks), and a sequence that is not a multiple of 2·t·c.
- t, S -> ``tensor_parallel_degree``, ``pipeline_parallel_degree``; e ->
  ``expert_parallel_degree`` (torchtitan's "dp2ep": the expert ranks are taken
  from the FSDP shard dimension, which must be a multiple of e).
- data parallelism over d·e ranks: ZeRO 0 -> DDP (``data_parallel_replicate_degree``
  d·e), ZeRO 1/2 -> FSDP without resharding after forward (parameters gathered
  once per step; ZeRO-2's memory and traffic; ZeRO-1 has no torchtitan
  equivalent), ZeRO 3 -> FSDP resharding after every forward (gathers in every
  microbatch's forward and backward, as DESIGN §3 charges).
- schedule ``1F1B`` (v = 1) or ``Interleaved1F1B`` (v > 1, chunk k on rank
  k mod S, torchtitan's looped assignment); the split as
  ``module_fqns_per_model_part``, one list per chunk, in torchtitan's Llama
  module names (``tok_embeddings``, ``layers.N``, ``norm``, ``output``).
- ``pipeline_parallel_microbatch_size`` b, ``global_batch_size`` m·b·d·e; with a
  pipeline ``local_batch_size`` m·b (the schedule splits it into m microbatches), without
  one ``local_batch_size`` b (torchtitan accumulates m steps: global / (local x d·e)).
- tensor parallelism: torchtitan's TP plan always shards norms by sequence (Megatron's
  sequence parallelism); a plan priced without it gets a warning.  Attention: torchtitan's
  models run scaled_dot_product_attention (flash kernels); materialised attention gets a
  warning.

Every config is checked against :mod:`nest_cp.model.launchers.torchtitan` before it is
written, and the export carries a runnable launch script (one torchrun per node rank,
``-m torchtitan.train --job.config_file``) beside the TOML.
- recompute -> ``[activation_checkpoint] mode`` ``none`` / ``full`` /
  ``selective``; torchtitan's selective mode is its op-level policy, not
  DESIGN's attention-core recomputation, so ``selective`` comes with a warning.

Rank order (torchtitan/distributed/parallel_dims.py, fixed): the mesh
[pp, dp_replicate, dp_shard, cp, tp] with expert ranks innermost in dp_shard,
i.e. the layout (t, e, replica, stage).  The launch table (as TOML comments)
realises the placement under it; when some host's ranks are not consecutive it
starts several agents there and warns.
"""

from __future__ import annotations

from nest_cp.cli.export.common import (
    ExportFormat,
    ExportResult,
    common_warnings,
    one_recompute_mode,
    placement_warning,
    plan_summary,
    split_text,
)
from nest_cp.cli.export.ranks import (
    Axis,
    RankMap,
    RankOrder,
    launch_table,
    node_selection,
    rank_map,
)
from nest_cp.cli.export.view import LayerKind, PlanView, Precision
from nest_cp.model.errors import BackendOptionError, InternalError
from nest_cp.model.instance import AttentionKind, ModelShape, RecomputeMode
from nest_cp.model.launchers.search import (
    TORCHTITAN_CP_EXPERTS,
    TORCHTITAN_CP_RING,
    TORCHTITAN_SEQ,
)
from nest_cp.model.launchers.torchtitan import (
    TORCHTITAN_VERSION,
    Flavor,
    TorchtitanLaunch,
    choice_problems,
    flavor_for,
    model_problem,
    startup_violations,
)

TORCHTITAN_SOURCE = (f"pytorch/torchtitan torchtitan/config/job_config.py at "
                     f"{TORCHTITAN_VERSION}; its startup checks transcribed in "
                     f"nest_cp/model/launchers/torchtitan.py")
TORCHTITAN_ORDER = RankOrder("pp-dp_replicate-dp_shard-cp-tp (torchtitan ParallelDims; ep "
                             "innermost in dp_shard)",
                             (Axis.TP, Axis.CP, Axis.EP, Axis.REPLICA, Axis.STAGE))

# section -> key -> type, as job_config.py declares them at v0.2.2 (Job line 18, Model 100,
# Training 243 with mixed_precision_param 282, Parallelism 312, ActivationCheckpoint 651)
TORCHTITAN_KEYS: dict[str, dict[str, type]] = {
    "job": {"description": str},
    "model": {"name": str, "flavor": str},
    "training": {"local_batch_size": int, "global_batch_size": int, "seq_len": int,
                 "mixed_precision_param": str},
    "parallelism": {
        "data_parallel_replicate_degree": int, "data_parallel_shard_degree": int,
        "fsdp_reshard_after_forward": str, "tensor_parallel_degree": int,
        "pipeline_parallel_degree": int, "pipeline_parallel_schedule": str,
        "pipeline_parallel_microbatch_size": int, "module_fqns_per_model_part": list,
        "expert_parallel_degree": int, "context_parallel_degree": int,
    },
    "activation_checkpoint": {"mode": str, "selective_ac_option": str},
}


def export_torchtitan(view: PlanView, gpus_per_node: int) -> ExportResult:
    """The job TOML (module doc) with the launch table as comments; BackendOptionError for
    a plan whose model torchtitan does not build."""
    unbuilt = model_problem(None if view.model is None else view.model.facts)
    if unbuilt is not None:
        raise BackendOptionError(f"torchtitan cannot start this plan as exported: {unbuilt}; "
                                 f"export it for megatron, or plan a model torchtitan builds",
                                 option="format")
    _check_context(view)
    warnings = common_warnings(view)
    parallelism, dp_warnings = _data_parallel(view)
    warnings += dp_warnings
    parallelism |= {"tensor_parallel_degree": view.tp,
                    "pipeline_parallel_degree": view.num_stages,
                    "pipeline_parallel_schedule": "Interleaved1F1B" if view.virtual_stages > 1
                    else "1F1B",
                    "pipeline_parallel_microbatch_size": view.microbatch}
    if view.num_stages > 1:
        parallelism["module_fqns_per_model_part"] = _module_names(view)
    if view.ep > 1:
        parallelism["expert_parallel_degree"] = view.ep
    if view.cp > 1:
        parallelism["context_parallel_degree"] = view.cp
        warnings.append("torchtitan v0.2.2 exchanges K/V with PyTorch's context-parallel SDPA, "
                        "whose rotate method in training is PyTorch's default (job_config's "
                        "context_parallel_rotate_method reaches only validation, "
                        "components/validate.py line 213); the plan prices a p2p ring that "
                        "overlaps each step with attention")
    mode, recompute_warnings = one_recompute_mode(view, "torchtitan")
    warnings += recompute_warnings
    checkpoint = {"mode": mode.value}
    if mode is RecomputeMode.SELECTIVE:
        checkpoint["selective_ac_option"] = "op"
        warnings.append("selective recomputation exported as torchtitan's op-level selective "
                        "checkpointing, a different policy from the plan's (attention core "
                        "only): memory and time will differ")
    local = view.microbatch * (view.num_microbatches if view.num_stages > 1 else 1)
    model, model_warnings = _model_section(view)
    precision, precision_warnings = _precision(view, parallelism)
    config = {
        "job": {"description": f"nest-cp plan: {plan_summary(view)}"},
        **({"model": model} if model else {}),
        "training": {"local_batch_size": local,
                     "global_batch_size": view.samples_per_iteration, "seq_len": view.seq_len,
                     "mixed_precision_param": precision},
        "parallelism": parallelism,
        "activation_checkpoint": checkpoint,
    }
    warnings += model_warnings + precision_warnings
    _check_rules(view, config)
    warnings += _model_warnings(view)
    ranks = rank_map(view, TORCHTITAN_ORDER, gpus_per_node)
    warnings += placement_warning(ranks, "torchtitan's fixed rank order")
    header = ["# torchtitan job for a nest-cp plan (nest-cp export --format torchtitan).",
              f"# plan: {plan_summary(view)}", f"# split: {split_text(view)}",
              f"# targets {TORCHTITAN_VERSION}",
              f"# keys: {TORCHTITAN_SOURCE}", f"# model: {_model_note(view)}"]
    header += [f"# warning: {warning}" for warning in warnings]
    footer = ["", f"# launch: the launch script (--script), or per node rank, rank order "
              f"{ranks.order.name}; hosts of {ranks.gpus_per_node} GPUs:",
              "#   CUDA_VISIBLE_DEVICES=<gpus> torchrun --nnodes "
              f"{len(ranks.nodes)} --node-rank <node_rank> --nproc-per-node <count of gpus> "
              "... -m torchtitan.train --job.config_file THIS_FILE"]
    footer += launch_table(ranks)
    text = "\n".join(header) + "\n\n" + dumps_toml(config) + "\n".join(footer) + "\n"
    return ExportResult(ExportFormat.TORCHTITAN, text, tuple(warnings), ranks, config=config,
                        files={"launch_script": launch_script(view, ranks)})


def torchtitan_launch(config: dict, world_size: int) -> TorchtitanLaunch:
    """What torchtitan v0.2.2 reads from a job document."""
    parallelism, training = config["parallelism"], config["training"]
    model = config.get("model", {})
    return TorchtitanLaunch(
        world_size=world_size, dp_replicate=parallelism["data_parallel_replicate_degree"],
        dp_shard=parallelism["data_parallel_shard_degree"],
        tp=parallelism["tensor_parallel_degree"], pp=parallelism["pipeline_parallel_degree"],
        local_batch_size=training["local_batch_size"],
        global_batch_size=training["global_batch_size"],
        pp_microbatch_size=parallelism["pipeline_parallel_microbatch_size"],
        model_name=model.get("name", "llama3"), model_flavor=model.get("flavor", "debugmodel"),
        cp=parallelism.get("context_parallel_degree", 1), seq_len=training.get("seq_len"))


def _check_context(view: PlanView) -> None:
    """BackendOptionError for a c > 1 plan torchtitan cannot run as priced (module doc)."""
    if view.cp == 1:
        return
    problem = None
    if view.cp_comm != "p2p":
        problem = f"cp_comm {view.cp_comm} ({TORCHTITAN_CP_RING})"
    elif view.ep > 1:
        problem = (f"context parallelism (c = {view.cp}) beside expert parallelism (e = "
                   f"{view.ep}) ({TORCHTITAN_CP_EXPERTS})")
    elif view.seq_len % (2 * view.tp * view.cp):
        problem = (f"sequence {view.seq_len} is not a multiple of 2·t·c = "
                   f"{2 * view.tp * view.cp} ({TORCHTITAN_SEQ})")
    if problem is not None:
        raise BackendOptionError(f"torchtitan cannot run this plan as priced: {problem}",
                                 option="format")


def _check_rules(view: PlanView, config: dict) -> None:
    """InternalError when the config breaks a cited startup rule (the mapping is meant not to)."""
    broken = (startup_violations(torchtitan_launch(config, view.world_size))
              + choice_problems(config))
    if broken:
        raise InternalError(f"the torchtitan export breaks a startup rule: {broken[0]}")


def flavor_of(model: ModelShape) -> Flavor | None:
    """The torchtitan flavor of exactly this architecture (launchers.torchtitan
    FLAVOR_TABLE), if torchtitan ships one: a Llama 3 of the same sizes."""
    return flavor_for(model.facts)


def _model_section(view: PlanView) -> tuple[dict, list[str]]:
    """[model] name and flavor of the priced architecture (the export has refused a model
    torchtitan does not build), or none and a warning when the instance records no model."""
    model = view.model
    if model is None:
        return {}, ["the instance records no model architecture: the job has no [model] "
                    "section and torchtitan trains its default (llama3 debugmodel), not the "
                    "model the plan was priced for; add [model] name and flavor"]
    flavor = flavor_of(model)
    if flavor is None:
        raise InternalError(f"the torchtitan export reached a model torchtitan does not "
                            f"build: {model.description}")
    return {"name": flavor.name, "flavor": flavor.flavor}, (
        [view.model_note] if view.model_note else [])


def _precision(view: PlanView, parallelism: dict) -> tuple[str, list[str]]:
    """``[training] mixed_precision_param`` for the priced weights, and what torchtitan runs
    differently (job_config.py lines 282-296; distributed/utils.py maybe_enable_amp, line
    243: no mixed precision with TP or PP unless FSDP is on)."""
    warnings = view.precision_warnings("torchtitan")
    if view.precision is Precision.FP32:
        return "float32", warnings
    if view.precision is Precision.FP16:
        warnings.append("fp16 has no torchtitan spelling (mixed_precision_param is bfloat16 "
                        "or float32): exported bfloat16, the same bytes with bf16's range")
    fsdp = parallelism["data_parallel_shard_degree"] > 1 or view.cp > 1  # fsdp_enabled
    if not fsdp and (view.tp > 1 or view.num_stages > 1):
        warnings.append(f"torchtitan runs no mixed precision with tensor or pipeline "
                        f"parallelism unless FSDP is on (distributed/utils.py line 251): this "
                        f"ZeRO-{view.zero} plan trains in float32, twice the weight memory "
                        f"and another speed than priced")
    if view.grad_bytes != 4 and view.data_parallel > 1:
        warnings.append(f"torchtitan reduces gradients in float32 (mixed_precision_reduce, "
                        f"its only choice): {4 // view.grad_bytes if view.grad_bytes else 0}x "
                        f"the {view.grad_bytes}-byte gradient traffic priced")
    return "bfloat16", warnings


def _model_note(view: PlanView) -> str:
    attention = "unrecorded" if view.attention is None else view.attention.value
    return (f"attention {attention} (torchtitan runs scaled_dot_product_attention); gradient "
            f"reduction overlapped with backward (FSDP/DDP always overlap); sequence "
            f"parallel {'on' if view.sequence_parallel else 'off'} (torchtitan's TP plan "
            f"always shards by sequence when tensor_parallel_degree > 1)")


def _model_warnings(view: PlanView) -> list[str]:
    """What torchtitan's models run differently from the profiles: SP off, materialised scores."""
    found = []
    if view.tp > 1 and not view.sequence_parallel:
        found.append(f"the plan was priced without sequence parallelism, but torchtitan's "
                     f"tensor parallelism (tp={view.tp}) always uses it: less activation "
                     f"memory, different TP collectives than planned")
    if not view.overlap_grad_reduce and view.data_parallel > 1:
        found.append("the plan was priced without overlapping gradient reduction with the "
                     "backward pass, but torchtitan's FSDP and DDP always overlap it: less "
                     "exposed sync than planned")
    if view.attention is AttentionKind.MATERIALIZED:
        found.append("the profiles assume materialised attention; torchtitan runs "
                     "scaled_dot_product_attention (flash kernels): less memory and time than "
                     "planned")
    return found


def launch_script(view: PlanView, ranks: RankMap) -> str:
    """A bash script starting the node rank given as $1: CUDA_VISIBLE_DEVICES from the launch
    table, then ``torchrun -m torchtitan.train --job.config_file`` the TOML given as $3."""
    lines = ["#!/usr/bin/env bash",
             "# torchtitan launch for a nest-cp plan (nest-cp export --format torchtitan "
             "--script).",
             f"# plan: {plan_summary(view)}",
             f"# rank order: {ranks.order.name}; {len(ranks.nodes)} torchrun agents on hosts "
             f"of {ranks.gpus_per_node} GPUs (nodeK = devices K*{ranks.gpus_per_node}.."
             f"K*{ranks.gpus_per_node}+{ranks.gpus_per_node - 1}).",
             "# usage, on the host of each node rank (replace nodeK by the host's name):",
             "#   bash THIS_FILE NODE_RANK MASTER_ADDR JOB.toml [torchtitan overrides ...]",
             "set -euo pipefail"]
    lines += launch_table(ranks)
    lines += node_selection(ranks, "CONFIG", "job TOML")
    lines += [
              'echo "node rank $NODE_RANK on $HOST: GPUs $GPUS" >&2',
              'exec torchrun --nnodes "${#NODES[@]}" --node-rank "$NODE_RANK" '
              '--nproc-per-node "$NPROC" \\',
              '  --master-addr "$MASTER_ADDR" --master-port 29500 -m torchtitan.train '
              '--job.config_file "$CONFIG" "$@"']
    return "\n".join(lines) + "\n"


def _data_parallel(view: PlanView) -> tuple[dict, list[str]]:
    """Replicate/shard degrees and resharding for the plan's ZeRO stage (module doc)."""
    ranks, warnings = view.data_parallel, []
    if view.zero == 0 and view.cp > 1:
        warnings.append(f"torchtitan applies FSDP whenever context parallelism is on "
                        f"(parallel_dims.py line 334), so with c = {view.cp} and ZeRO 0 the "
                        f"export shards parameters over the {view.cp} context ranks (HSDP: "
                        f"replicate {ranks}, shard {view.cp}); the plan replicates them (less "
                        f"memory, more traffic than planned)")
        return {"data_parallel_replicate_degree": ranks, "data_parallel_shard_degree": 1,
                "fsdp_reshard_after_forward": "never"}, warnings
    if view.zero == 0:
        if view.ep == 1:
            return {"data_parallel_replicate_degree": ranks, "data_parallel_shard_degree": 1}, []
        warnings.append(f"torchtitan takes expert-parallel ranks from FSDP's shard dimension, "
                        f"so with e = {view.ep} and ZeRO 0 the export shards parameters over "
                        f"the {view.ep} expert ranks (HSDP: replicate {view.replicas}, shard "
                        f"{view.ep}); the plan replicates them (less memory, more traffic than "
                        f"planned)")
        return {"data_parallel_replicate_degree": view.replicas,
                "data_parallel_shard_degree": view.ep,
                "fsdp_reshard_after_forward": "never"}, warnings
    if view.zero == 1:
        warnings.append("ZeRO-1 has no torchtitan equivalent: exported FSDP without resharding "
                        "after forward (ZeRO-2: gradients sharded too, less memory than "
                        "planned, same traffic)")
    return {"data_parallel_replicate_degree": 1, "data_parallel_shard_degree": ranks,
            "fsdp_reshard_after_forward": "always" if view.zero == 3 else "never"}, warnings


def _module_names(view: PlanView) -> list[list[str]]:
    """One list of torchtitan Llama module names per chunk (chunk order)."""
    names, decoder, last = [], 0, len(view.chunks) - 1
    for chunk in view.chunks:
        part = []
        if chunk.index == 0 and view.layer_kinds[0] is not LayerKind.EMBEDDING:
            part.append("tok_embeddings")
        for layer in chunk.layers:
            kind = view.layer_kinds[layer]
            if kind is LayerKind.EMBEDDING:
                part.append("tok_embeddings")
            elif kind is LayerKind.HEAD:
                part += ["norm", "output"]
            else:
                part.append(f"layers.{decoder}")
                decoder += 1
        if chunk.index == last and view.layer_kinds[-1] is not LayerKind.HEAD:
            part += ["norm", "output"]
        names.append(part)
    return names


def dumps_toml(document: dict[str, dict]) -> str:
    """TOML for tables of strings, integers, booleans and lists of those (all we write)."""
    out = []
    for section, table in document.items():
        out.append(f"[{section}]")
        out += [f"{key} = {_toml_value(value)}" for key, value in table.items()]
        out.append("")
    return "\n".join(out) + "\n"


def _toml_value(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value(item) for item in value) + "]"
    raise TypeError(f"expected a TOML scalar or list, got {type(value).__name__}")
