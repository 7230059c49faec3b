"""Megatron-LM: the training arguments of a plan and a torchrun launch that places its ranks.

Argument names and types are those of NVIDIA/Megatron-LM
``megatron/training/arguments.py`` at release core_v0.15.3 (commit
309ffca6a40553362d44fd17efc56b772fa1aa44; :data:`MEGATRON_VERSION`), listed once in
:data:`MEGATRON_ARGUMENTS`; the exporter can emit no other name, and the tests
parse its output with an argparse parser built from exactly this list.  Beside
the arguments a plan decides (parallel degrees, batch, layer split, recomputation,
optimizer sharding, overlap) the export writes the model the plan was priced for and its
precision; data, tokenizer and optimizer hyperparameters stay the user's.

Model and precision (from the workload's recorded architecture, ``workload.model``, and
the optimizer convention of :func:`nest_cp.cli.export.view.precision_of`):
``--hidden-size --ffn-hidden-size --num-attention-heads`` (``--kv-channels`` when the head
width is not hidden/heads), ``--group-query-attention --num-query-groups`` for fewer
key/value heads, ``--max-position-embeddings`` and ``--position-embedding-type
learned_absolute|rope``, ``--normalization``, ``--swiglu``, ``--disable-bias-linear``,
``--untie-embeddings-and-output-weights``, zero dropouts for a model without dropout,
``--num-experts --moe-ffn-hidden-size --moe-router-topk`` for experts, ``--vocab-size``
(read only by the NullTokenizer: a warning says the tokenizer must match); ``--bf16`` or
``--fp16`` for 2-byte weights, with ``--grad-reduce-in-bf16`` when bf16 gradients were
priced at 2 bytes (Megatron otherwise reduces bf16 gradients in fp32) and
``--accumulate-allreduce-grads-in-fp32`` when fp16 gradients were priced at 4.

Mapping (DESIGN §2 and §3 -> Megatron):

- t, e, S -> ``--tensor-model-parallel-size``, ``--expert-model-parallel-size``,
  ``--pipeline-model-parallel-size``; Megatron's data-parallel size is then
  world / (t·c·S) = d·e, its expert data-parallel size d, expert tensor
  parallelism its default t: exactly the plan's groups.
- c > 1 -> ``--context-parallel-size c --cp-comm-type p2p|a2a`` (the instance's
  ``training.cp_comm``), with CUDA_DEVICE_MAX_CONNECTIONS=1 as for TP; gradients are then
  reduced over Megatron's data-parallel group with context parallelism (d·e·c ranks), as
  priced.  Refused (exit 2, the rule cited, ``launchers.search``): c > 1 beside e > 1
  (Megatron's expert ranks follow the tensor ranks like its context ranks, so its expert
  groups are not the plan's) and a sequence that is not a multiple of 2c.
- b and the batch -> ``--micro-batch-size b``, ``--global-batch-size m·b·d·e``.
- the split -> nothing when every chunk holds as many decoder layers (Megatron's
  even split), ``--decoder-first/last-pipeline-num-layers`` when only the first
  and last stage differ, else ``--pipeline-model-parallel-layout`` (``E`` the
  embedding, ``t`` a decoder layer, ``L`` the output layer and loss, ``|``
  between chunks in chunk order), which also carries interleaving; an even
  interleaved split uses ``--num-virtual-stages-per-pipeline-rank``.
- recompute ``full`` -> ``--recompute-granularity full --recompute-method uniform
  --recompute-num-layers 1`` (every layer keeps only its input, DESIGN §3);
  ``selective`` -> ``--recompute-granularity selective`` (core attention).
- ZeRO 1 -> ``--use-distributed-optimizer``; 2 and 3 -> Megatron-FSDP
  (``--use-megatron-fsdp --data-parallel-sharding-strategy optim_grads`` or
  ``optim_grads_params``, with what Megatron-FSDP requires: ``--use-distributed-optimizer
  --no-gradient-accumulation-fusion --ckpt-format fsdp_dtensor``, the default rank order,
  and CUDA_DEVICE_MAX_CONNECTIONS unset, where plain TP needs it set to 1).
- the attention kernel the workload records -> ``--attention-backend flash`` (flash) or
  ``unfused`` (materialised scores); unrecorded -> Megatron's default, with a warning.

Every exported argument list is parsed with the cited parser and checked against the
startup rules of :mod:`nest_cp.model.launchers.megatron` before it is written.
- overlapped gradient reduction -> ``--overlap-grad-reduce`` (and
  ``--overlap-param-gather`` with the distributed optimizer).
- sequence parallelism as the workload records it (else: the profile's TP collectives
  are all-gather/reduce-scatter) with t > 1 -> ``--sequence-parallel``.

Rank order (megatron/core/parallel_state.py ``initialize_model_parallel``):
``tp-cp-ep-dp-pp`` (tensor index fastest, pipeline stage slowest), i.e. the
layout (t, c, e, replica, stage), or ``tp-cp-ep-pp-dp`` with
``--use-tp-pp-dp-mapping``, the layout (t, c, e, stage, replica).  The second is
offered only when e = c or S = 1: otherwise Megatron requires the dense and
expert data-parallel sizes to match under it (world/(t·c·S) = world/(t·e·S)).
The exporter takes the first order under which every host runs consecutive
global ranks (one torchrun per host); otherwise it keeps the default order,
launches several agents on the hosts that need them and warns (:mod:`nest_cp.cli.export.ranks`).
"""

from __future__ import annotations

import shlex

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
from nest_cp.model.instance import (
    AttentionKind,
    MlpKind,
    ModelShape,
    NormKind,
    PositionKind,
    RecomputeMode,
)
from nest_cp.model.launchers.megatron import (
    KNOWN_FLAGS,
    MEGATRON_ARGUMENTS,
    MEGATRON_VERSION,
    MegatronArgument,
    MegatronLaunch,
    megatron_parser,
    startup_violations,
)
from nest_cp.model.launchers.search import MEGATRON_CP_EXPERTS

MEGATRON_SOURCE = ("NVIDIA/Megatron-LM megatron/training/arguments.py at that release; its "
                   "startup checks transcribed in nest_cp/model/launchers/megatron.py")

DEFAULT_ORDER = RankOrder("tp-cp-ep-dp-pp",
                          (Axis.TP, Axis.CP, Axis.EP, Axis.REPLICA, Axis.STAGE))
TP_PP_DP_ORDER = RankOrder("tp-cp-ep-pp-dp (--use-tp-pp-dp-mapping)",
                           (Axis.TP, Axis.CP, Axis.EP, Axis.STAGE, Axis.REPLICA))
ATTENTION_BACKEND = {AttentionKind.FLASH: "flash", AttentionKind.MATERIALIZED: "unfused"}


class _Args:
    """The argument list under construction; refuses any name not in MEGATRON_ARGUMENTS."""

    def __init__(self):
        self.items: list[str] = []

    def add(self, flag: str, value: object = None) -> None:
        if flag not in KNOWN_FLAGS:
            raise InternalError(f"{flag} is not among the cited Megatron-LM arguments")
        self.items.append(flag)
        if value is not None:
            self.items.append(str(value))


def export_megatron(view: PlanView, gpus_per_node: int) -> ExportResult:
    """Megatron-LM arguments and a launch script realising the placement (module doc)."""
    args, warnings = _Args(), common_warnings(view)
    args.add("--tensor-model-parallel-size", view.tp)
    args.add("--pipeline-model-parallel-size", view.num_stages)
    if view.ep > 1:
        args.add("--expert-model-parallel-size", view.ep)
    _context_args(view, args)
    args.add("--num-layers", view.num_decoder_layers)
    args.add("--seq-length", view.seq_len)
    args.add("--micro-batch-size", view.microbatch)
    args.add("--global-batch-size", view.samples_per_iteration)
    warnings += _model_args(view, args)
    warnings += _precision_args(view, args)
    _split_args(view, args)
    warnings += _recompute_args(view, args)
    warnings += _optimizer_args(view, args)
    if view.sequence_parallel:
        args.add("--sequence-parallel")
    if view.attention is not None:
        args.add("--attention-backend", ATTENTION_BACKEND[view.attention])
    ranks = _choose_order(view, gpus_per_node)
    if ranks.order is TP_PP_DP_ORDER:
        args.add("--use-tp-pp-dp-mapping")
    warnings += placement_warning(ranks, "Megatron-LM's rank orders (tp-cp-ep-dp-pp, "
                                  "tp-cp-ep-pp-dp)")
    env = launch_environment(view)
    if view.zero >= 2 and (view.tp > 1 or view.cp > 1):
        warnings.append("Megatron-FSDP needs CUDA_DEVICE_MAX_CONNECTIONS unset (the script "
                        "unsets it); with tp > 1 or cp > 1 Megatron then warns that TP/CP "
                        "communication overlaps less well than with 1, which the plan's time "
                        "does not charge")
    broken = startup_violations(MegatronLaunch.parse(args.items, view.world_size, env),
                                model_given=view.model is not None)
    if broken:  # the mapping above is meant to satisfy every rule: a bug here, not bad input
        raise InternalError(f"the Megatron-LM export breaks a startup rule: {broken[0]}")
    text = _launch_script(view, args.items, ranks, warnings, env)
    return ExportResult(ExportFormat.MEGATRON, text, tuple(warnings), ranks,
                        args=tuple(args.items), env=env)


def _context_args(view: PlanView, args: _Args) -> None:
    """--context-parallel-size and --cp-comm-type for c > 1; BackendOptionError for a plan
    Megatron cannot run as priced (module doc)."""
    if view.cp == 1:
        return
    if view.ep > 1:
        raise BackendOptionError(f"Megatron-LM cannot run this plan as priced: context "
                                 f"parallelism (c = {view.cp}) beside expert parallelism (e = "
                                 f"{view.ep}) ({MEGATRON_CP_EXPERTS})", option="format")
    if view.seq_len % (2 * view.cp):
        raise BackendOptionError(f"Megatron-LM cannot run this plan: sequence {view.seq_len} "
                                 f"is not a multiple of 2c = {2 * view.cp} (core_v0.15.3 "
                                 f"arguments.py line 844)", option="format")
    args.add("--context-parallel-size", view.cp)
    args.add("--cp-comm-type", view.cp_comm)


NORMALIZATION = {NormKind.LAYERNORM: "LayerNorm", NormKind.RMSNORM: "RMSNorm"}
POSITIONS = {PositionKind.LEARNED: "learned_absolute", PositionKind.ROPE: "rope"}


def _model_args(view: PlanView, args: _Args) -> list[str]:
    """The architecture the profiles were made for, as Megatron's model arguments."""
    model = view.model
    if model is None:
        experts = " and --num-experts" if view.ep > 1 else ""
        return [f"the instance records no model architecture: Megatron needs --hidden-size, "
                f"--num-attention-heads, --max-position-embeddings{experts} and the rest of the "
                f"model, which the plan's profiles fix but this export cannot name; add the "
                f"model's arguments yourself, and --bf16/--fp16 is as exported"]
    warnings = [view.model_note] if view.model_note else []
    args.add("--hidden-size", model.hidden)
    args.add("--ffn-hidden-size", model.ffn_hidden)
    args.add("--num-attention-heads", model.heads)
    if model.head_dim * model.heads != model.hidden:
        args.add("--kv-channels", model.head_dim)
    if model.kv_heads != model.heads:
        args.add("--group-query-attention")
        args.add("--num-query-groups", model.kv_heads)
    args.add("--max-position-embeddings", model.max_positions or view.seq_len)
    args.add("--position-embedding-type", POSITIONS[model.positions])
    args.add("--normalization", NORMALIZATION[model.norm])
    if model.mlp is MlpKind.SWIGLU:
        args.add("--swiglu")
    if not model.bias:
        args.add("--disable-bias-linear")
        if model.qkv_bias:
            args.add("--add-qkv-bias")
    if not model.tied_embeddings:
        args.add("--untie-embeddings-and-output-weights")
    if not model.dropout:
        args.add("--attention-dropout", 0.0)
        args.add("--hidden-dropout", 0.0)
    if model.num_experts > 1:
        args.add("--num-experts", model.num_experts)
        args.add("--moe-ffn-hidden-size", model.expert_width)
        args.add("--moe-router-topk", model.top_k)
    args.add("--vocab-size", model.vocab)
    return warnings + _model_warnings(view, model)


def _model_warnings(view: PlanView, model: ModelShape) -> list[str]:
    """What Megatron's GPT model cannot take from the recorded architecture."""
    found = [f"Megatron takes the vocabulary from the tokenizer (--tokenizer-type, "
             f"--vocab-file): it must have {model.vocab} tokens, as priced (Megatron pads it to "
             f"a multiple of 128·t); --vocab-size {model.vocab} is read only by the "
             f"NullTokenizer"]
    if model.num_layers != view.num_decoder_layers:
        found.append(f"the model records {model.num_layers} layers but the workload chains "
                     f"{view.num_decoder_layers} decoder layers: exported --num-layers "
                     f"{view.num_decoder_layers}, as priced")
    if not model.decoder:
        found.append(f"{model.name} is an encoder; Megatron's pretrain_gpt.py builds a decoder "
                     f"(run pretrain_bert.py with these arguments)")
    if model.latent_attention:
        found.append(f"{model.name} uses multi-head latent attention, whose arguments "
                     f"(--multi-latent-attention, --q-lora-rank, ...) this export does not "
                     f"write: add them, or Megatron builds grouped-query attention")
    return found


def _precision_args(view: PlanView, args: _Args) -> list[str]:
    """--bf16 or --fp16 for the priced weights, and the gradient reduction's width."""
    warnings = view.precision_warnings("Megatron")
    if view.precision is Precision.FP32:
        return warnings
    if view.precision is Precision.FP16 and view.ep > 1:
        raise BackendOptionError("Megatron-LM cannot run this plan: expert parallelism with "
                                 "fp16 weights (core_v0.15.3 arguments.py line 1042: 'Expert "
                                 "parallelism is not supported with fp16 training')",
                                 option="format")
    args.add("--bf16" if view.precision is Precision.BF16 else "--fp16")
    if view.precision is Precision.BF16 and view.grad_bytes == 2:
        args.add("--grad-reduce-in-bf16")  # else bf16 forces fp32 reduction (line 741)
    elif view.precision is Precision.FP16 and view.grad_bytes == 4:
        args.add("--accumulate-allreduce-grads-in-fp32")
    elif view.grad_bytes not in (2, 4):
        warnings.append(f"{view.grad_bytes}-byte gradients have no Megatron spelling: it "
                        f"reduces them in {'fp32' if view.precision is Precision.BF16 else 'fp16'}")
    return warnings


def launch_environment(view: PlanView) -> dict[str, str | None]:
    """What the launch script sets (a value) or unsets (None) before torchrun.

    Megatron-LM asserts CUDA_DEVICE_MAX_CONNECTIONS=1 with tensor or context parallelism
    before Blackwell, and asserts it is not 1 under Megatron-FSDP (model.launchers.megatron).
    """
    if view.zero >= 2:
        return {"CUDA_DEVICE_MAX_CONNECTIONS": None}
    if view.tp > 1 or view.cp > 1:
        return {"CUDA_DEVICE_MAX_CONNECTIONS": "1"}
    return {}


def layout_string(view: PlanView) -> str:
    """``--pipeline-model-parallel-layout``: E, t and L per chunk, '|' between chunks.

    Megatron builds an embedding on the first chunk and the output layer with the
    loss on the last even when the workload names no such layers.
    """
    parts = []
    last = len(view.chunks) - 1
    for chunk in view.chunks:
        letters = "".join({LayerKind.EMBEDDING: "E", LayerKind.DECODER: "t",
                           LayerKind.HEAD: "L"}[view.layer_kinds[layer]]
                          for layer in chunk.layers)
        if chunk.index == 0 and not letters.startswith("E"):
            letters = "E" + letters
        if chunk.index == last and not letters.endswith("L"):
            letters += "L"
        parts.append(letters)
    return "|".join(parts)


def _split_args(view: PlanView, args: _Args) -> None:
    counts = [view.decoder_count(chunk) for chunk in view.chunks]
    stages, v = view.num_stages, view.virtual_stages
    if len(set(counts)) == 1 and counts[0] >= 1:
        if v > 1:
            args.add("--num-virtual-stages-per-pipeline-rank", v)
        return
    if v == 1 and stages >= 2 and min(counts) >= 1 and len(set(counts[1:-1])) <= 1:
        middle = counts[1] if stages > 2 else None
        if stages == 2 or counts[0] != middle:
            args.add("--decoder-first-pipeline-num-layers", counts[0])
        if stages > 2 and counts[-1] != middle:
            args.add("--decoder-last-pipeline-num-layers", counts[-1])
        return
    args.add("--pipeline-model-parallel-layout", layout_string(view))


def _recompute_args(view: PlanView, args: _Args) -> list[str]:
    mode, warnings = one_recompute_mode(view, "Megatron-LM")
    if mode is RecomputeMode.FULL:
        args.add("--recompute-granularity", "full")
        args.add("--recompute-method", "uniform")
        args.add("--recompute-num-layers", 1)
    elif mode is RecomputeMode.SELECTIVE:
        args.add("--recompute-granularity", "selective")
    return warnings


def _optimizer_args(view: PlanView, args: _Args) -> list[str]:
    """The distributed optimizer or Megatron-FSDP for ZeRO 1-3, and the overlap flags the plan
    was priced with; a warning where Megatron cannot run the priced overlap."""
    if view.zero == 1:
        args.add("--use-distributed-optimizer")
    elif view.zero in (2, 3):  # Megatron-FSDP's required configuration (launchers.megatron)
        args.add("--use-megatron-fsdp")
        args.add("--data-parallel-sharding-strategy",
                 "optim_grads" if view.zero == 2 else "optim_grads_params")
        args.add("--use-distributed-optimizer")
        args.add("--no-gradient-accumulation-fusion")
        args.add("--ckpt-format", "fsdp_dtensor")
    if view.overlap_grad_reduce:
        args.add("--overlap-grad-reduce")
    if not (view.overlap_param_gather and view.zero in (1, 2)):
        return []  # the weight all-gather was priced exposed, as Megatron runs it by default
    if view.overlap_grad_reduce:
        args.add("--overlap-param-gather")
        return []
    return ["the plan was priced with the weight all-gather hidden behind the forward "
            "(overlap_param_gather), which Megatron-LM runs only with --overlap-grad-reduce; "
            "exported without it, the all-gather is exposed and the run is slower than priced"]


def _choose_order(view: PlanView, gpus_per_node: int) -> RankMap:
    """Megatron's default order, or the tp-pp-dp order when only it gives one agent per host."""
    default = rank_map(view, DEFAULT_ORDER, gpus_per_node)
    if default.one_agent_per_host or (view.ep != view.cp and view.num_stages > 1) \
            or view.zero >= 2:  # parallel_state.py line 765 (launchers.megatron "pp-last")
        return default  # Megatron-FSDP takes the default order only (launchers.megatron)
    alternative = rank_map(view, TP_PP_DP_ORDER, gpus_per_node)
    return alternative if alternative.one_agent_per_host else default


def _launch_script(view: PlanView, args: list[str], ranks: RankMap, warnings: list[str],
                   env: dict[str, str | None]) -> str:
    """A bash script: the arguments, the launch table, and one torchrun per node rank."""
    lines = ["#!/usr/bin/env bash",
             "# Megatron-LM launch for a nest-cp plan (nest-cp export --format megatron).",
             f"# plan: {plan_summary(view)}",
             f"# split: {split_text(view)}",
             f"# targets {MEGATRON_VERSION}",
             f"# arguments: {MEGATRON_SOURCE}",
             f"# rank order: {ranks.order.name}; {len(ranks.nodes)} torchrun agents on hosts of "
             f"{ranks.gpus_per_node} GPUs (nodeK = devices K*{ranks.gpus_per_node}.."
             f"K*{ranks.gpus_per_node}+{ranks.gpus_per_node - 1}).",
             "# usage, on the host of each node rank (replace nodeK by the host's name):",
             "#   bash THIS_FILE NODE_RANK MASTER_ADDR TRAINING_SCRIPT [data, tokenizer and "
             "optimizer arguments ...]"]
    lines += [f"# warning: {warning}" for warning in warnings]
    lines += ["set -euo pipefail", "MEGATRON_ARGS=("]
    lines += [f"  {' '.join(shlex.quote(part) for part in pair)}" for pair in _pairs(args)]
    lines += [")"]
    lines += launch_table(ranks)
    lines += node_selection(ranks, "SCRIPT", "training script")
    for name, value in env.items():
        lines.append(f"unset {name}  # Megatron-FSDP asserts it is not 1" if value is None
                     else f"export {name}={value}  # Megatron asserts it for "
                     f"{'TP' if view.cp == 1 else 'TP and CP'}")
    lines += ['echo "node rank $NODE_RANK on $HOST: GPUs $GPUS" >&2',
              'exec torchrun --nnodes "${#NODES[@]}" --node-rank "$NODE_RANK" '
              '--nproc-per-node "$NPROC" \\',
              '  --master-addr "$MASTER_ADDR" --master-port 6000 "$SCRIPT" '
              '"${MEGATRON_ARGS[@]}" "$@"']
    return "\n".join(lines) + "\n"


def _pairs(args: list[str]) -> list[list[str]]:
    """The argument list grouped as [flag, value] or [flag], one per line of the script."""
    grouped: list[list[str]] = []
    for item in args:
        if item.startswith("--"):
            grouped.append([item])
        else:
            grouped[-1].append(item)
    return grouped


__all__ = ["MEGATRON_ARGUMENTS", "MegatronArgument", "export_megatron", "launch_environment",
           "layout_string", "megatron_parser"]
