"""DeepSpeed at startup: the batch it asserts, and what its engines and AutoTP refuse.

Pinned release: DeepSpeed **v0.19.3** (deepspeedai/DeepSpeed tag ``v0.19.3``, commit
0c36f6d3efb806c07a44e5c2c9b18a81d204b821, July 2026).  Every release from v0.16.4 (the
first with AutoTP training) through v0.19.3 asserts against ZeRO-3 beside AutoTP (checked
tag by tag); v0.19.4 lifts it.  Sources, file, function and line at v0.19.3:

- ``CONFIG``: ``deepspeed/runtime/config.py`` ``DeepSpeedConfig._batch_assertion`` (line
  907; the assertion at line 919), with the world size it uses set in
  ``DeepSpeedConfig.__init__`` (lines 695-708: the ``mpu``'s data-parallel world size when
  the script passes one, else every rank, tensor-parallel ones included);
- ``PRECISION``: ``deepspeed/runtime/config.py`` ``DeepSpeedConfig._initialize_params``,
  line 809: 'bfloat16 and fp16 modes cannot be simultaneously enabled';
- ``PIPE``: ``deepspeed/runtime/pipe/engine.py`` ``PipelineEngine.__init__``, line 76;
- ``AUTOTP``: ``deepspeed/runtime/engine.py``
  ``DeepSpeedEngine._configure_tensor_parallel_states`` (line 624), the assertion at line
  633: 'Currently, the compatibility between 'autotp' and 'zero_stage = 3' has not been
  validated';
- ``GROUPS``: ``deepspeed/utils/groups.py`` ``_init_tp_mesh_device`` (line 136): AutoTP
  builds a two-axis mesh (world / autotp_size, autotp_size) named data_parallel and
  tensor_parallel; it has no pipeline axis, so beside a pipeline its "data-parallel" group
  would average gradients of different stages.

- ``ULYSSES``: ``deepspeed/__init__.py`` ``initialize`` (line 93): a config holding
  ``sequence_parallel_size`` and ``data_parallel_size`` builds a (data_parallel,
  sequence_parallel) mesh (lines 203-206), and nothing else; without an ``mpu`` from the
  script, ``utils/groups.py`` ``_get_sequence_data_parallel_group`` (line 845) returns the
  mesh's data_parallel group (line 851), over which ``runtime/engine.py``
  ``_reduce_non_expert_gradients`` (line 3559) reduces the gradients (line 3565): d ranks,
  where Ulysses needs d·c (the sequence ranks hold the same parameters and see different
  tokens).  The d·c group comes from an mpu the training script builds
  (``runtime/sequence_parallel/parallel_state_sp.py`` ``get_sequence_data_parallel_group``,
  line 67), and the all-to-all attention is ``deepspeed.sequence.layer.DistributedAttention``
  (line 351) or ``UlyssesSPAttentionHF`` in the script: code, not config.

A :class:`DeepSpeedLaunch` holds the plan's degrees as DeepSpeed sees them.
:func:`refusals` lists what DeepSpeed cannot run at all (the export exits 2), and
:data:`RULES` what a written config must satisfy.
"""

from __future__ import annotations

from dataclasses import dataclass

from nest_cp.model.launchers import Rule, violations

DEEPSPEED_VERSION = "DeepSpeed v0.19.3 (commit 0c36f6d3efb806c07a44e5c2c9b18a81d204b821)"
CONFIG = ("DeepSpeed v0.19.3 deepspeed/runtime/config.py:919 "
          "DeepSpeedConfig._batch_assertion")
PRECISION = ("DeepSpeed v0.19.3 deepspeed/runtime/config.py:809 "
             "DeepSpeedConfig._initialize_params")
PIPE = "DeepSpeed v0.19.3 deepspeed/runtime/pipe/engine.py:76 PipelineEngine.__init__"
AUTOTP = ("DeepSpeed v0.19.3 deepspeed/runtime/engine.py:633 "
          "DeepSpeedEngine._configure_tensor_parallel_states")
GROUPS = "DeepSpeed v0.19.3 deepspeed/utils/groups.py:136 _init_tp_mesh_device"
ULYSSES = ("DeepSpeed v0.19.3 deepspeed/__init__.py:203-206 initialize with "
           "utils/groups.py:851 _get_sequence_data_parallel_group and runtime/engine.py:3565 "
           "_reduce_non_expert_gradients")


@dataclass(frozen=True, slots=True)
class DeepSpeedLaunch:
    """The degrees, batch and precision DeepSpeed reads (``data_parallel``: d·e ranks).

    ``batch_world`` is the world size DeepSpeed's batch check divides by: the data-parallel
    ranks when the training script passes an ``mpu`` (the pipeline engine always does; with
    AutoTP the script must), else every rank.
    """

    zero_stage: int
    pipeline_stages: int
    autotp_size: int
    data_parallel: int
    train_batch_size: int
    micro_batch: int
    accumulation_steps: int
    batch_world: int = 0  # 0: data_parallel
    bf16: bool = False
    fp16: bool = False
    communication_data_type: str | None = None
    sequence_parallel: int = 1  # the plan's context width c (Ulysses sequence parallelism)


def _ulysses(launch: DeepSpeedLaunch) -> str | None:
    if launch.sequence_parallel > 1:
        return (f"Ulysses sequence parallelism of size {launch.sequence_parallel}: a config's "
                f"sequence_parallel_size builds the groups but reduces gradients over the "
                f"data-parallel ranks only; the d·c reduction and the all-to-all attention "
                f"are the training script's (an mpu and DistributedAttention)")
    return None


def _zero_with_pipeline(launch: DeepSpeedLaunch) -> str | None:
    if launch.pipeline_stages > 1 and launch.zero_stage >= 2:
        return f"ZeRO-{launch.zero_stage} with {launch.pipeline_stages} pipeline stages"
    return None


def _autotp_with_pipeline(launch: DeepSpeedLaunch) -> str | None:
    if launch.pipeline_stages > 1 and launch.autotp_size > 1:
        return (f"AutoTP (autotp_size {launch.autotp_size}) beside {launch.pipeline_stages} "
                f"pipeline stages")
    return None


def _autotp_with_zero_3(launch: DeepSpeedLaunch) -> str | None:
    if launch.autotp_size > 1 and launch.zero_stage >= 3:
        return f"AutoTP (autotp_size {launch.autotp_size}) with ZeRO-{launch.zero_stage}"
    return None


def _batch(launch: DeepSpeedLaunch) -> str | None:
    world = launch.batch_world or launch.data_parallel
    product = launch.micro_batch * launch.accumulation_steps * world
    if launch.train_batch_size != product:
        return (f"train_batch_size {launch.train_batch_size} != micro {launch.micro_batch} x "
                f"accumulation {launch.accumulation_steps} x world size {world}")
    return None


def _one_precision(launch: DeepSpeedLaunch) -> str | None:
    return "bf16 and fp16 both enabled" if launch.bf16 and launch.fp16 else None


def _communication_type(launch: DeepSpeedLaunch) -> str | None:
    if launch.communication_data_type not in (None, "fp16", "bf16", "fp32"):
        return f"communication_data_type {launch.communication_data_type!r}"
    return None


REFUSALS: tuple[Rule[DeepSpeedLaunch], ...] = (
    Rule("ZeRO-2/3 with a pipeline", f"{PIPE}: 'ZeRO-2 and ZeRO-3 are incompatible with "
         "pipeline parallelism'", _zero_with_pipeline),
    Rule("AutoTP with a pipeline", f"{GROUPS}: the AutoTP mesh has only data_parallel and "
         "tensor_parallel axes", _autotp_with_pipeline),
    Rule("AutoTP with ZeRO-3", f"{AUTOTP}: 'Currently, the compatibility between 'autotp' "
         "and 'zero_stage = 3' has not been validated' (lifted in v0.19.4)",
         _autotp_with_zero_3),
    Rule("Ulysses from a config", f"{ULYSSES}: without an mpu the gradients are reduced over "
         "the data_parallel mesh group, not data x sequence", _ulysses),
)
RULES: tuple[Rule[DeepSpeedLaunch], ...] = (
    Rule("train batch", f"{CONFIG}: 'train_batch_size is not equal to micro_batch_per_gpu * "
         "gradient_acc_step * world_size'; the world size is the mpu's data-parallel size "
         "(config.py:700; the pipeline engine passes its grid, __init__.py deepspeed.initialize "
         "line 243)", _batch),
    Rule("one precision", f"{PRECISION}: 'bfloat16 and fp16 modes cannot be simultaneously "
         "enabled'", _one_precision),
    Rule("communication type", "DeepSpeed v0.19.3 deepspeed/runtime/config.py:205 "
         "get_communication_data_type: 'Invalid communication_data_type. Supported data "
         "types: ['fp16', 'bf16', 'fp32']' (zero/stage3.py:384 and stage_1_and_2.py:308 "
         "assert the same under reduce-scatter)", _communication_type),
)


def refusals(launch: DeepSpeedLaunch) -> list[str]:
    """What DeepSpeed cannot run at all for this plan ('name: problem (source)')."""
    return violations(REFUSALS, launch)


def startup_violations(launch: DeepSpeedLaunch) -> list[str]:
    """Every rule of :data:`RULES` the written config breaks ('name: problem (source)')."""
    return violations(RULES, launch)
