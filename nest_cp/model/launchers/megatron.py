"""Megatron-LM at startup: the arguments it declares and the checks it asserts on them.

Pinned release: Megatron-Core **core_v0.15.3** (NVIDIA/Megatron-LM tag ``core_v0.15.3``,
commit 309ffca6a40553362d44fd17efc56b772fa1aa44, February 2026), the last release whose
``megatron/training/arguments.py`` declares the arguments with argparse (from core_v0.16.0
the model arguments moved out of that file).  Sources, each cited with its line at that
commit (the assertion's words are quoted in each rule):

- ``ARGS``: ``megatron/training/arguments.py``, function ``validate_args`` (line 347) and
  the ``add_argument`` calls for the declarations in :data:`MEGATRON_ARGUMENTS`;
- ``STATE``: ``megatron/core/parallel_state.py`` ``initialize_model_parallel`` (line 514):
  the dense rank generator (line 732, order ``tp-cp-ep-dp-pp`` with ep = 1) and the expert
  one (line 755, the same order with cp = 1);
- ``CONFIG``: ``megatron/core/transformer/transformer_config.py`` ``TransformerConfig``
  (``cp_comm_type`` line 594, its check in ``__post_init__`` line 1491);
- ``BATCH``: ``megatron/core/num_microbatches_calculator.py``,
  ``ConstantNumMicroBatchesCalculator.__init__`` (class at line 298, assertion line 341);
- ``BRIDGE``: NVIDIA-NeMo/Megatron-Bridge release v0.2.2 (commit
  0465189601951c14ad592bd8eefbb673929e25bc, January 2026, the Bridge of the Megatron-Core
  0.15 line), ``src/megatron/bridge/training/config.py`` ``ConfigContainer.validate``
  (line 1184; its Megatron-FSDP check at line 1243);
- ``FSDP_GUIDE``: the Megatron-Core developer guide, "Megatron-FSDP User Guide", section
  "Required Configurations" (docs.nvidia.com/megatron-core/developer-guide/latest/
  discussions/megatron-fsdp-user-guide/megatron-fsdp-user-guide.html).

A :class:`MegatronLaunch` is what the checks read: the parsed arguments (argparse
destinations, defaults filled in by :func:`megatron_parser`), the environment the launch
sets, and the world size.  The CUDA_DEVICE_MAX_CONNECTIONS rule for tensor and context
parallelism is asserted on GPUs before Blackwell (compute capability < 10); the rules take
that case, the stricter one.

Context parallelism (``--context-parallel-size`` c, ``--cp-comm-type``): the world is
t·p·c·(data-parallel size), the sequence a multiple of 2c, and CUDA_DEVICE_MAX_CONNECTIONS=1
(each cited in :data:`RULES`).  ``--cp-comm-type`` takes one value for every layer or one
per layer (``nargs='+'``, line 2706, no ``choices``); Transformer Engine names the values
``p2p``, ``all_gather``, ``a2a`` and ``a2a+p2p`` (``TransformerConfig.cp_comm_type``
docstring, line 598; the argument's help says ``allgather``), and ``a2a+p2p`` needs
``--hierarchical-context-parallel-sizes`` (line 435), which nest-cp never writes.  Under
``a2a`` Transformer Engine splits the heads over the c ranks; that divisibility is asserted
inside Transformer Engine, which is not pinned here, so nest-cp keeps it as the profiler's
rule (a2a (t, c) pairs whose heads do not split are never profiled).
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from dataclasses import dataclass, field

from nest_cp.model.launchers import Rule, violations

MEGATRON_VERSION = "Megatron-Core core_v0.15.3 (commit 309ffca6a40553362d44fd17efc56b772fa1aa44)"
ARGS = "Megatron-LM core_v0.15.3 megatron/training/arguments.py validate_args"
STATE = ("Megatron-LM core_v0.15.3 megatron/core/parallel_state.py initialize_model_parallel")
CONFIG = ("Megatron-LM core_v0.15.3 megatron/core/transformer/transformer_config.py "
          "TransformerConfig")
BATCH = ("Megatron-LM core_v0.15.3 megatron/core/num_microbatches_calculator.py:341 "
         "ConstantNumMicroBatchesCalculator.__init__")
BRIDGE = ("Megatron-Bridge v0.2.2 src/megatron/bridge/training/config.py:1243 "
          "ConfigContainer.validate (Megatron FSDP config checks)")
FSDP_GUIDE = "Megatron-Core developer guide, Megatron-FSDP User Guide, Required Configurations"


@dataclass(frozen=True, slots=True)
class MegatronArgument:
    """One argument as Megatron-LM declares it: ``value_type`` None for a flag.

    ``dest`` and ``default`` matter for the flags written negatively
    (``--no-gradient-accumulation-fusion`` stores False into ``gradient_accumulation_fusion``;
    a flag whose default is True is a store_false flag).
    """

    flag: str
    value_type: type | None
    choices: tuple[str, ...] = ()
    dest: str | None = None
    default: object = None
    nargs: str | None = None  # '+' for a list (--cp-comm-type)


MEGATRON_ARGUMENTS: tuple[MegatronArgument, ...] = (
    MegatronArgument("--tensor-model-parallel-size", int, default=1),
    MegatronArgument("--pipeline-model-parallel-size", int, default=1),
    MegatronArgument("--expert-model-parallel-size", int, default=1),
    # context parallelism (arguments.py _add_distributed_args, lines 2704-2711)
    MegatronArgument("--context-parallel-size", int, default=1),
    MegatronArgument("--cp-comm-type", str, default=["p2p"], nargs="+"),
    MegatronArgument("--num-layers", int),
    MegatronArgument("--seq-length", int),
    MegatronArgument("--micro-batch-size", int),
    MegatronArgument("--global-batch-size", int),
    MegatronArgument("--decoder-first-pipeline-num-layers", int),
    MegatronArgument("--decoder-last-pipeline-num-layers", int),
    MegatronArgument("--pipeline-model-parallel-layout", str),
    MegatronArgument("--num-virtual-stages-per-pipeline-rank", int),
    MegatronArgument("--num-layers-per-virtual-pipeline-stage", int),
    MegatronArgument("--recompute-granularity", str, ("full", "selective")),
    MegatronArgument("--recompute-method", str, ("uniform", "block")),
    MegatronArgument("--recompute-num-layers", int),
    MegatronArgument("--use-distributed-optimizer", None),
    MegatronArgument("--use-megatron-fsdp", None),
    MegatronArgument("--data-parallel-sharding-strategy", str,
                     ("no_shard", "optim", "optim_grads", "optim_grads_params"),
                     default="no_shard"),
    MegatronArgument("--ckpt-format", str,
                     ("torch", "torch_dist", "zarr", "torch_dcp", "fsdp_dtensor"),
                     default="torch_dist"),
    MegatronArgument("--no-gradient-accumulation-fusion", None,
                     dest="gradient_accumulation_fusion", default=True),
    MegatronArgument("--overlap-grad-reduce", None),
    MegatronArgument("--overlap-param-gather", None),
    MegatronArgument("--no-overlap-p2p-communication", None, dest="overlap_p2p_comm",
                     default=True),
    MegatronArgument("--sequence-parallel", None),
    MegatronArgument("--use-tp-pp-dp-mapping", None),
    MegatronArgument("--attention-backend", str, ("flash", "fused", "unfused", "local", "auto"),
                     default="auto"),
    # the model (arguments.py _add_network_size_args, lines 1549-1662; --vocab-size line 2760,
    # --seq-length 2850, --num-experts 3037, --moe-ffn-hidden-size 3047, --moe-router-topk
    # 3094, --disable-bias-linear 2191, dropouts 1876-1878)
    MegatronArgument("--hidden-size", int),
    MegatronArgument("--ffn-hidden-size", int),
    MegatronArgument("--num-attention-heads", int),
    MegatronArgument("--kv-channels", int),
    MegatronArgument("--group-query-attention", None),
    MegatronArgument("--num-query-groups", int, default=1),
    MegatronArgument("--max-position-embeddings", int),
    MegatronArgument("--position-embedding-type", str,
                     ("learned_absolute", "rope", "mrope", "relative", "none"),
                     default="learned_absolute"),
    MegatronArgument("--normalization", str, ("LayerNorm", "RMSNorm"), default="LayerNorm"),
    MegatronArgument("--swiglu", None),
    MegatronArgument("--disable-bias-linear", None, dest="add_bias_linear", default=True),
    MegatronArgument("--add-qkv-bias", None),
    MegatronArgument("--untie-embeddings-and-output-weights", None),
    MegatronArgument("--attention-dropout", float, default=0.1),
    MegatronArgument("--hidden-dropout", float, default=0.1),
    MegatronArgument("--vocab-size", int),
    MegatronArgument("--make-vocab-size-divisible-by", int, default=128),
    MegatronArgument("--num-experts", int),
    MegatronArgument("--moe-ffn-hidden-size", int),
    MegatronArgument("--moe-router-topk", int, default=2),
    # precision (arguments.py _add_mixed_precision_args: --fp16 line 2518, --bf16 2520,
    # --accumulate-allreduce-grads-in-fp32 2543, --grad-reduce-in-bf16 2522)
    MegatronArgument("--fp16", None),
    MegatronArgument("--bf16", None),
    MegatronArgument("--accumulate-allreduce-grads-in-fp32", None),
    MegatronArgument("--grad-reduce-in-bf16", None),
)
KNOWN_FLAGS = {argument.flag: argument for argument in MEGATRON_ARGUMENTS}


def megatron_parser() -> argparse.ArgumentParser:
    """An argparse parser of exactly the cited arguments (as Megatron: no abbreviations)."""
    parser = argparse.ArgumentParser(prog="megatron", allow_abbrev=False, exit_on_error=False)
    for argument in MEGATRON_ARGUMENTS:
        dest = {"dest": argument.dest} if argument.dest else {}
        if argument.value_type is None:
            negative = argument.default is True  # store_false: --no-..., --disable-...
            parser.add_argument(argument.flag, action="store_false" if negative
                                else "store_true", **dest)
        else:
            many = {"nargs": argument.nargs} if argument.nargs else {}
            parser.add_argument(argument.flag, type=argument.value_type,
                                choices=argument.choices or None, default=argument.default,
                                **dest, **many)
    return parser


@dataclass(frozen=True, slots=True)
class MegatronLaunch:
    """Parsed arguments (argparse destinations), the environment the launch sets, world size.

    ``env`` maps a variable to its value, or to None when the launch unsets it.
    """

    args: Mapping[str, object]
    world_size: int
    env: Mapping[str, str | None] = field(default_factory=dict)

    @classmethod
    def parse(cls, argv: list[str], world_size: int,
              env: Mapping[str, str | None] | None = None) -> MegatronLaunch:
        return cls(vars(megatron_parser().parse_args(argv)), world_size, dict(env or {}))

    def __getattr__(self, name: str) -> object:  # launch.tensor_model_parallel_size, ...
        try:
            return self.args[name]
        except KeyError:
            raise AttributeError(name) from None

    @property
    def model_size(self) -> int:
        """t·p·c, validate_args' ``total_model_size`` (arguments.py line 371)."""
        return (self.tensor_model_parallel_size * self.pipeline_model_parallel_size
                * self.context_parallel_size)

    @property
    def data_parallel_size(self) -> int:
        """world / (t·p·c), as validate_args sets it (line 385)."""
        return self.world_size // self.model_size

    @property
    def interleaved(self) -> bool:
        """Whether Megatron derives a virtual pipeline size > 1 from the arguments."""
        layout = self.pipeline_model_parallel_layout
        if layout is not None:
            return len(layout.split("|")) > self.pipeline_model_parallel_size
        virtual = self.num_virtual_stages_per_pipeline_rank
        return (virtual or 1) > 1 or self.num_layers_per_virtual_pipeline_stage is not None


def _world(launch: MegatronLaunch) -> str | None:
    model = launch.model_size
    if launch.world_size % model:
        return f"world size {launch.world_size} is not a multiple of t·p·c = {model}"
    return None


def _context_sequence(launch: MegatronLaunch) -> str | None:
    cp, sequence = launch.context_parallel_size, launch.seq_length
    if cp > 1 and sequence is not None and sequence % (2 * cp):
        return f"--seq-length {sequence} is not a multiple of 2 x --context-parallel-size {cp}"
    return None


CP_COMM_TYPES = ("p2p", "all_gather", "a2a", "a2a+p2p")


def _context_comm(launch: MegatronLaunch) -> str | None:
    if launch.context_parallel_size == 1:
        return None
    kinds = launch.cp_comm_type
    unknown = [kind for kind in kinds if kind not in CP_COMM_TYPES]
    if unknown:
        return f"--cp-comm-type {unknown[0]} is none of {', '.join(CP_COMM_TYPES)}"
    if len(kinds) > 1 and len(kinds) != launch.num_layers:
        return f"{len(kinds)} --cp-comm-type values for {launch.num_layers} layers"
    if "a2a+p2p" in kinds:
        return "--cp-comm-type a2a+p2p without --hierarchical-context-parallel-sizes"
    return None


def _batch(launch: MegatronLaunch) -> str | None:
    step = launch.micro_batch_size * launch.data_parallel_size
    if launch.global_batch_size is None or launch.global_batch_size % step:
        return (f"--global-batch-size {launch.global_batch_size} is not a multiple of "
                f"micro batch x data-parallel size = {launch.micro_batch_size} x "
                f"{launch.data_parallel_size}")
    return None


def _one_virtual_form(launch: MegatronLaunch) -> str | None:
    given = [name for name in ("num_layers_per_virtual_pipeline_stage",
                               "num_virtual_stages_per_pipeline_rank",
                               "pipeline_model_parallel_layout")
             if launch.args.get(name) is not None]
    return f"more than one of {', '.join(given)}" if len(given) > 1 else None


def _layout_stages(launch: MegatronLaunch) -> str | None:
    layout = launch.pipeline_model_parallel_layout
    if layout is None:
        return None
    chunks = len(layout.split("|"))
    if chunks % launch.pipeline_model_parallel_size:
        return (f"the layout's {chunks} chunks are not a multiple of "
                f"--pipeline-model-parallel-size {launch.pipeline_model_parallel_size}")
    return None


def _even_split(launch: MegatronLaunch) -> str | None:
    uneven = any(launch.args.get(name) is not None for name in (
        "pipeline_model_parallel_layout", "num_virtual_stages_per_pipeline_rank",
        "num_layers_per_virtual_pipeline_stage", "decoder_first_pipeline_num_layers",
        "decoder_last_pipeline_num_layers"))
    stages = launch.pipeline_model_parallel_size
    if not uneven and launch.num_layers % stages:
        return f"--num-layers {launch.num_layers} is not a multiple of {stages} stages"
    return None


def _uneven_with_virtual(launch: MegatronLaunch) -> str | None:
    uneven = (launch.decoder_first_pipeline_num_layers is not None
              or launch.decoder_last_pipeline_num_layers is not None)
    if uneven and launch.num_layers_per_virtual_pipeline_stage is not None:
        return "first/last stage layer counts with --num-layers-per-virtual-pipeline-stage"
    return None


def _interleaved_depth(launch: MegatronLaunch) -> str | None:
    if not launch.interleaved:
        return None
    least = 2 if launch.overlap_p2p_comm else 3
    if launch.pipeline_model_parallel_size < least:
        return (f"the interleaved schedule needs --pipeline-model-parallel-size >= {least}, "
                f"got {launch.pipeline_model_parallel_size}")
    return None


def _overlap_param_gather(launch: MegatronLaunch) -> str | None:
    if not launch.overlap_param_gather:
        return None
    if not (launch.use_distributed_optimizer or launch.use_megatron_fsdp):
        return "--overlap-param-gather without the distributed optimizer or Megatron-FSDP"
    if not launch.overlap_grad_reduce:
        return "--overlap-param-gather without --overlap-grad-reduce"
    return None


def _fsdp_connections(launch: MegatronLaunch) -> str | None:
    if launch.use_megatron_fsdp and launch.env.get("CUDA_DEVICE_MAX_CONNECTIONS") == "1":
        return "Megatron-FSDP with CUDA_DEVICE_MAX_CONNECTIONS=1"
    return None


def _fsdp_checkpoint(launch: MegatronLaunch) -> str | None:
    if launch.use_megatron_fsdp and launch.ckpt_format != "fsdp_dtensor":
        return f"Megatron-FSDP with --ckpt-format {launch.ckpt_format}"
    if launch.ckpt_format == "fsdp_dtensor" and not launch.use_megatron_fsdp:
        return "--ckpt-format fsdp_dtensor without --use-megatron-fsdp"
    return None


def _tensor_connections(launch: MegatronLaunch) -> str | None:
    split = launch.tensor_model_parallel_size > 1 or launch.context_parallel_size > 1
    if split and not launch.use_megatron_fsdp \
            and launch.env.get("CUDA_DEVICE_MAX_CONNECTIONS") != "1":
        return ("tensor or context parallelism without CUDA_DEVICE_MAX_CONNECTIONS=1 (asserted "
                "before Blackwell)")
    return None


def _pp_last(launch: MegatronLaunch) -> str | None:
    """Under --use-tp-pp-dp-mapping (order tp-cp-ep-pp-dp) with a pipeline, the dense
    data-parallel size world/(t·p·c) must equal the expert one world/(t·e·p)."""
    ep, cp = launch.expert_model_parallel_size, launch.context_parallel_size
    if launch.use_tp_pp_dp_mapping and launch.pipeline_model_parallel_size > 1 and ep != cp:
        return (f"--use-tp-pp-dp-mapping with a pipeline and expert size {ep} != context size "
                f"{cp} (dense and expert data-parallel sizes differ)")
    return None


def _selective_method(launch: MegatronLaunch) -> str | None:
    if launch.recompute_granularity == "selective" and launch.recompute_method is not None:
        return f"selective recomputation with --recompute-method {launch.recompute_method}"
    return None


def _fsdp_rank_order(launch: MegatronLaunch) -> str | None:
    if launch.use_megatron_fsdp and launch.use_tp_pp_dp_mapping:
        return "Megatron-FSDP with --use-tp-pp-dp-mapping"
    return None


def _fsdp_required(launch: MegatronLaunch) -> str | None:
    if not launch.use_megatron_fsdp:
        return None
    missing = [flag for flag, ok in (
        ("--use-distributed-optimizer", launch.use_distributed_optimizer),
        ("--no-gradient-accumulation-fusion", not launch.gradient_accumulation_fusion),
        ("--data-parallel-sharding-strategy optim_grads[_params]",
         launch.data_parallel_sharding_strategy in ("optim_grads", "optim_grads_params")))
        if not ok]
    return f"Megatron-FSDP without {', '.join(missing)}" if missing else None


def _local_attention(launch: MegatronLaunch) -> str | None:
    if launch.attention_backend == "local":
        return "--attention-backend local (needs --spec local, which the export does not set)"
    return None


def _line(number: int) -> str:
    """``ARGS`` at one line of the pinned arguments.py."""
    return f"{ARGS}, line {number}"


def _model_required(launch: MegatronLaunch) -> str | None:
    missing = [name for name in ("num_layers", "hidden_size", "num_attention_heads",
                                 "max_position_embeddings") if launch.args.get(name) is None]
    return f"missing --{', --'.join(m.replace('_', '-') for m in missing)}" if missing else None


def _head_width(launch: MegatronLaunch) -> str | None:
    hidden, heads = launch.hidden_size, launch.num_attention_heads
    if launch.kv_channels is None and None not in (hidden, heads) and hidden % heads:
        return (f"--hidden-size {hidden} is not a multiple of --num-attention-heads {heads} "
                f"and --kv-channels is not given")
    return None


def _positions(launch: MegatronLaunch) -> str | None:
    table, sequence = launch.max_position_embeddings, launch.seq_length
    if None not in (table, sequence) and table < sequence:
        return f"--max-position-embeddings {table} < --seq-length {sequence}"
    return None


def _one_precision(launch: MegatronLaunch) -> str | None:
    return "both --fp16 and --bf16" if launch.fp16 and launch.bf16 else None


def _experts(launch: MegatronLaunch) -> str | None:
    ep = launch.expert_model_parallel_size
    if ep <= 1:
        return None
    if launch.num_experts is None:
        return f"--expert-model-parallel-size {ep} without --num-experts"
    if launch.num_experts % ep:
        return f"--num-experts {launch.num_experts} is not a multiple of {ep}"
    if launch.fp16:
        return "expert parallelism with --fp16"
    return None


RULES: tuple[Rule[MegatronLaunch], ...] = (
    Rule("world size", f"{_line(375)}: 'world size (...) is not divisible by "
         "total_model_size' (t·p·c, line 371)", _world),
    Rule("context sequence", f"{_line(844)}: 'seq-length should be a multiple of 2 * "
         "context-parallel-size if context-parallel-size > 1'", _context_sequence),
    Rule("context comm type", f"{CONFIG} line 598: cp_comm_type 'can be \"p2p\" or "
         "\"all_gather\" or \"a2a\" or \"a2a+p2p\"', line 1493: one value or one per layer; "
         f"{_line(436)}: '--hierarchical-context-parallel-sizes must be set when a2a+p2p is used "
         "in cp comm'", _context_comm),
    Rule("global batch", f"{BATCH}: 'global batch size (...) is not divisible by micro batch "
         "size (...) times data parallel size'", _batch),
    Rule("one virtual-pipeline form", f"{_line(537)}: 'No more than one of the following "
         "arguments can be set at the same time'", _one_virtual_form),
    Rule("layout length", f"{_line(550)}: 'The length of pipeline_model_parallel_layout must "
         "be divisible by pipeline_model_parallel_size'", _layout_stages),
    Rule("even split", f"{_line(600)}: 'Number of layers should be divisible by the "
         "pipeline-model-parallel size'", _even_split),
    Rule("uneven split and virtual stages", f"{_line(560)}: 'please use "
         "--num-virtual-stages-per-pipeline-rank to specify virtual pipeline parallel degree "
         "when enable uneven pipeline parallelism'", _uneven_with_virtual),
    Rule("interleaved depth", f"{_line(605)}: 'When interleaved schedule is used, "
         "pipeline-model-parallel size should be greater than 1' (line 609: > 2 without p2p "
         "overlap)", _interleaved_depth),
    Rule("overlap param gather", f"{_line(627)}: '--overlap-param-gather only supported with "
         "distributed optimizer or megatron fsdp', line 629: 'Must use --overlap-param-gather "
         "with --overlap-grad-reduce'", _overlap_param_gather),
    Rule("FSDP connections", f"{_line(716)}: 'FSDP always requires CUDA_DEVICE_MAX_CONNECTIONS "
         "value large than one'", _fsdp_connections),
    Rule("FSDP checkpoint format", f"{_line(719)}: 'Megatron FSDP only supports fsdp_dtensor "
         "checkpoint format', line 1064: '--ckpt-format fsdp_dtensor is only tested with "
         "Megatron FSDP'", _fsdp_checkpoint),
    Rule("TP connections", f"{_line(959)}: 'Using tensor model parallelism or context "
         "parallelism require setting the environment variable CUDA_DEVICE_MAX_CONNECTIONS to "
         "1' (when t > 1 or c > 1, line 935)", _tensor_connections),
    Rule("pp-last order", f"{STATE}, line 765: 'When not using pp-last rank ordering, the "
         "data parallel size of the attention and moe layers must be the same'", _pp_last),
    Rule("selective recompute", f"{_line(916)}: 'recompute method is not yet supported for "
         "selective recomputing granularity'", _selective_method),
    Rule("FSDP rank order", f"{BRIDGE}: 'use_tp_pp_dp_mapping is not supported with "
         "Megatron FSDP'", _fsdp_rank_order),
    Rule("FSDP required flags", FSDP_GUIDE, _fsdp_required),
    Rule("local attention", f"{_line(379)}: '--attention-backend local is only supported with "
         "--spec local'", _local_attention),
    Rule("model size given", f"{_line(822)}: required_args = ['num_layers', 'hidden_size', "
         "'num_attention_heads', 'max_position_embeddings'] (_check_arg_is_not_none, line "
         "1227)", _model_required),
    Rule("head width", f"{_line(840)}: 'assert args.hidden_size % args.num_attention_heads == "
         "0' when --kv-channels is not given", _head_width),
    Rule("position table", f"{_line(856)}: 'max_position_embeddings (...) must be greater "
         "than or equal to seq_length (...)'", _positions),
    Rule("one precision", f"{_line(724)} and line 734: 'assert not args.bf16', 'assert not "
         "args.fp16'", _one_precision),
    Rule("experts", f"{_line(1038)}: 'num_experts must be non None to use expert model "
         "parallelism', line 1040: 'Number of experts should be a multiple of expert model "
         "parallel_size', line 1042: 'Expert parallelism is not supported with fp16 "
         "training'", _experts),
)


# rules on arguments only the model supplies: without a recorded model the export leaves them
# to the user (with a warning) and its check skips them
MODEL_RULES = frozenset({"model size given", "experts"})


def startup_violations(launch: MegatronLaunch, model_given: bool = True) -> list[str]:
    """Every rule of :data:`RULES` the launch breaks ('name: problem (source)'); without
    ``model_given`` the :data:`MODEL_RULES` are not checked."""
    rules = RULES if model_given else tuple(r for r in RULES if r.name not in MODEL_RULES)
    return violations(rules, launch)
