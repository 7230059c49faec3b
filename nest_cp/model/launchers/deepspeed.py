"""DeepSpeed at startup: the batch it asserts, and what its pipeline engine and AutoTP refuse.

Sources (each rule quotes the assertion or names the construction):

- ``CONFIG``: deepspeedai/DeepSpeed ``deepspeed/runtime/config.py`` at commit
  3a890ec57fb78fa08d97336dcee1931c40acfc34, ``DeepSpeedConfig._batch_assertion``;
- ``PIPE``: deepspeedai/DeepSpeed ``deepspeed/runtime/pipe/engine.py`` at commit
  03f6f75c5caadf213b53a7b3f5438bb46a30d278, ``PipelineEngine.__init__``;
- ``GROUPS``: deepspeedai/DeepSpeed ``deepspeed/utils/groups.py`` at commit
  0899bfad02577b690dde15565b4b92bd729687f0, ``_init_tp_mesh_device``: AutoTP builds a
  two-axis mesh (world / autotp_size, autotp_size) named data_parallel and
  tensor_parallel; it has no pipeline axis, so beside a pipeline its "data-parallel" group
  would average gradients of different stages.

A :class:`DeepSpeedLaunch` holds the plan's degrees as DeepSpeed sees them.
:func:`refusals` lists what DeepSpeed cannot run at all (the export exits 2), and
:data:`RULES` what a written config must satisfy.
"""

from __future__ import annotations

from dataclasses import dataclass

from nest_cp.model.launchers import Rule, violations

CONFIG = ("DeepSpeed deepspeed/runtime/config.py@3a890ec57fb78fa08d97336dcee1931c40acfc34 "
          "DeepSpeedConfig._batch_assertion")
PIPE = ("DeepSpeed deepspeed/runtime/pipe/engine.py@03f6f75c5caadf213b53a7b3f5438bb46a30d278 "
        "PipelineEngine.__init__")
GROUPS = ("DeepSpeed deepspeed/utils/groups.py@0899bfad02577b690dde15565b4b92bd729687f0 "
          "_init_tp_mesh_device")


@dataclass(frozen=True, slots=True)
class DeepSpeedLaunch:
    """The degrees and batch settings DeepSpeed reads (``data_parallel``: d·e ranks)."""

    zero_stage: int
    pipeline_stages: int
    autotp_size: int
    data_parallel: int
    train_batch_size: int
    micro_batch: int
    accumulation_steps: int


def _zero_with_pipeline(launch: DeepSpeedLaunch) -> str | None:
    if launch.pipeline_stages > 1 and launch.zero_stage >= 2:
        return f"ZeRO-{launch.zero_stage} with {launch.pipeline_stages} pipeline stages"
    return None


def _autotp_with_pipeline(launch: DeepSpeedLaunch) -> str | None:
    if launch.pipeline_stages > 1 and launch.autotp_size > 1:
        return (f"AutoTP (autotp_size {launch.autotp_size}) beside {launch.pipeline_stages} "
                f"pipeline stages")
    return None


def _batch(launch: DeepSpeedLaunch) -> str | None:
    product = launch.micro_batch * launch.accumulation_steps * launch.data_parallel
    if launch.train_batch_size != product:
        return (f"train_batch_size {launch.train_batch_size} != micro {launch.micro_batch} x "
                f"accumulation {launch.accumulation_steps} x data parallel "
                f"{launch.data_parallel}")
    return None


REFUSALS: tuple[Rule[DeepSpeedLaunch], ...] = (
    Rule("ZeRO-2/3 with a pipeline", f"{PIPE}: 'ZeRO-2 and ZeRO-3 are incompatible with "
         "pipeline parallelism'", _zero_with_pipeline),
    Rule("AutoTP with a pipeline", f"{GROUPS}: the AutoTP mesh has only data_parallel and "
         "tensor_parallel axes", _autotp_with_pipeline),
)
RULES: tuple[Rule[DeepSpeedLaunch], ...] = (
    Rule("train batch", f"{CONFIG}: 'train_batch_size is not equal to micro_batch_per_gpu * "
         "gradient_acc_step * world_size'; {PIPE}: the same with the pipeline grid's "
         "data-parallel size", _batch),
)


def refusals(launch: DeepSpeedLaunch) -> list[str]:
    """What DeepSpeed cannot run at all for this plan ('name: problem (source)')."""
    return violations(REFUSALS, launch)


def startup_violations(launch: DeepSpeedLaunch) -> list[str]:
    return violations(RULES, launch)
