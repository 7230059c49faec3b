"""Megatron-LM at startup: the arguments it declares and the checks it asserts on them.

Sources (the assertion's words are quoted in each rule; they are greppable at the commit):

- ``ARGS``: NVIDIA/Megatron-LM ``megatron/training/arguments.py`` at commit
  000c4ac24f61159c138b0975def722c65245983c, function ``validate_args`` (and the
  ``add_argument`` calls for the declarations in :data:`MEGATRON_ARGUMENTS`);
- ``BATCH``: NVIDIA/Megatron-LM ``megatron/core/num_microbatches_calculator.py`` at commit
  6337108c7250d675e5ac652dfa5132979e239d44, ``ConstantNumMicroBatchesCalculator.__init__``;
- ``BRIDGE``: NVIDIA-NeMo/Megatron-Bridge ``src/megatron/bridge/training/config.py`` at
  commit 4feb11f80e19fda2937f983688218300436e2177 (its Megatron-FSDP checks);
- ``FSDP_GUIDE``: the Megatron-Core developer guide, "Megatron-FSDP User Guide", section
  "Required Configurations" (docs.nvidia.com/megatron-core/developer-guide/latest/
  discussions/megatron-fsdp-user-guide/megatron-fsdp-user-guide.html).

A :class:`MegatronLaunch` is what the checks read: the parsed arguments (argparse
destinations, defaults filled in by :func:`megatron_parser`), the environment the launch
sets, and the world size.  The CUDA_DEVICE_MAX_CONNECTIONS rule for tensor parallelism
is asserted on GPUs before Blackwell (compute capability < 10); the rules take that
case, the stricter one.
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from dataclasses import dataclass, field

from nest_cp.model.launchers import Rule, violations

ARGS = ("Megatron-LM megatron/training/arguments.py@000c4ac24f61159c138b0975def722c65245983c "
        "validate_args")
BATCH = ("Megatron-LM megatron/core/num_microbatches_calculator.py@"
         "6337108c7250d675e5ac652dfa5132979e239d44 ConstantNumMicroBatchesCalculator")
BRIDGE = ("Megatron-Bridge src/megatron/bridge/training/config.py@"
          "4feb11f80e19fda2937f983688218300436e2177 (Megatron FSDP config checks)")
FSDP_GUIDE = "Megatron-Core developer guide, Megatron-FSDP User Guide, Required Configurations"


@dataclass(frozen=True, slots=True)
class MegatronArgument:
    """One argument as Megatron-LM declares it: ``value_type`` None for a flag.

    ``dest`` and ``default`` matter for the flags written negatively
    (``--no-gradient-accumulation-fusion`` stores False into ``gradient_accumulation_fusion``).
    """

    flag: str
    value_type: type | None
    choices: tuple[str, ...] = ()
    dest: str | None = None
    default: object = None


MEGATRON_ARGUMENTS: tuple[MegatronArgument, ...] = (
    MegatronArgument("--tensor-model-parallel-size", int, default=1),
    MegatronArgument("--pipeline-model-parallel-size", int, default=1),
    MegatronArgument("--expert-model-parallel-size", int, default=1),
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
)
KNOWN_FLAGS = {argument.flag: argument for argument in MEGATRON_ARGUMENTS}


def megatron_parser() -> argparse.ArgumentParser:
    """An argparse parser of exactly the cited arguments (as Megatron: no abbreviations)."""
    parser = argparse.ArgumentParser(prog="megatron", allow_abbrev=False, exit_on_error=False)
    for argument in MEGATRON_ARGUMENTS:
        dest = {"dest": argument.dest} if argument.dest else {}
        if argument.value_type is None:
            negative = argument.flag.startswith("--no-")
            parser.add_argument(argument.flag, action="store_false" if negative
                                else "store_true", **dest)
        else:
            parser.add_argument(argument.flag, type=argument.value_type,
                                choices=argument.choices or None, default=argument.default,
                                **dest)
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
    def data_parallel_size(self) -> int:
        """world / (t·p) (context parallelism 1), as validate_args sets it."""
        return self.world_size // (self.tensor_model_parallel_size
                                   * self.pipeline_model_parallel_size)

    @property
    def interleaved(self) -> bool:
        """Whether Megatron derives a virtual pipeline size > 1 from the arguments."""
        layout = self.pipeline_model_parallel_layout
        if layout is not None:
            return len(layout.split("|")) > self.pipeline_model_parallel_size
        virtual = self.num_virtual_stages_per_pipeline_rank
        return (virtual or 1) > 1 or self.num_layers_per_virtual_pipeline_stage is not None


def _world(launch: MegatronLaunch) -> str | None:
    model = launch.tensor_model_parallel_size * launch.pipeline_model_parallel_size
    if launch.world_size % model:
        return f"world size {launch.world_size} is not a multiple of t·p = {model}"
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
    if launch.tensor_model_parallel_size > 1 and not launch.use_megatron_fsdp \
            and launch.env.get("CUDA_DEVICE_MAX_CONNECTIONS") != "1":
        return ("tensor parallelism without CUDA_DEVICE_MAX_CONNECTIONS=1 (asserted before "
                "Blackwell)")
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


RULES: tuple[Rule[MegatronLaunch], ...] = (
    Rule("world size", f"{ARGS}: 'world size (...) is not divisible by total_model_size'",
         _world),
    Rule("global batch", f"{BATCH}: 'global batch size (...) is not divisible by micro batch "
         "size (...) times data parallel size'", _batch),
    Rule("one virtual-pipeline form", f"{ARGS}: 'No more than one of the following arguments "
         "can be set at the same time'", _one_virtual_form),
    Rule("layout length", f"{ARGS}: 'The length of pipeline_model_parallel_layout must be "
         "divisible by pipeline_model_parallel_size'", _layout_stages),
    Rule("even split", f"{ARGS}: 'Number of layers should be divisible by the "
         "pipeline-model-parallel size'", _even_split),
    Rule("uneven split and virtual stages", f"{ARGS}: 'please use "
         "--num-virtual-stages-per-pipeline-rank to specify virtual pipeline parallel degree "
         "when enable uneven pipeline parallelism'", _uneven_with_virtual),
    Rule("interleaved depth", f"{ARGS}: 'When interleaved schedule is used, "
         "pipeline-model-parallel size should be greater than 1' (> 2 without p2p overlap)",
         _interleaved_depth),
    Rule("overlap param gather", f"{ARGS}: '--overlap-param-gather only supported with "
         "distributed optimizer or megatron fsdp', 'Must use --overlap-param-gather with "
         "--overlap-grad-reduce'", _overlap_param_gather),
    Rule("FSDP connections", f"{ARGS}: 'FSDP always requires CUDA_DEVICE_MAX_CONNECTIONS "
         "value large than one'", _fsdp_connections),
    Rule("FSDP checkpoint format", f"{ARGS}: 'Megatron FSDP only supports fsdp_dtensor "
         "checkpoint format', '--ckpt-format fsdp_dtensor is only tested with Megatron FSDP'",
         _fsdp_checkpoint),
    Rule("TP connections", f"{ARGS}: 'Using tensor model parallelism or context parallelism "
         "require setting the environment variable CUDA_DEVICE_MAX_CONNECTIONS to 1'",
         _tensor_connections),
    Rule("selective recompute", f"{ARGS}: 'recompute method is not yet supported for "
         "selective recomputing granularity'", _selective_method),
    Rule("FSDP rank order", f"{BRIDGE}: 'use_tp_pp_dp_mapping is not supported with "
         "Megatron FSDP'", _fsdp_rank_order),
    Rule("FSDP required flags", FSDP_GUIDE, _fsdp_required),
    Rule("local attention", f"{ARGS}: '--attention-backend local is only supported with "
         "--spec local'", _local_attention),
)


def startup_violations(launch: MegatronLaunch) -> list[str]:
    """Every rule of :data:`RULES` the launch breaks ('name: problem (source)')."""
    return violations(RULES, launch)
