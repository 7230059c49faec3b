"""torchtitan at startup: its parallel dimensions and batch arithmetic.

Sources:

- ``DIMS``: pytorch/torchtitan ``torchtitan/distributed/parallel_dims.py`` at commit
  73bb964d8f66f585d977b40fe3de88301cdd03cd, ``ParallelDims._validate``;
- ``TRAIN``: pytorch/torchtitan ``torchtitan/train.py`` at commit
  e9f53473bd120ca46cd5d34f15e7725287c35c66, ``Trainer.__init__`` (gradient accumulation);
- ``JOB``: pytorch/torchtitan ``torchtitan/config/job_config.py`` at commit
  6404b932421f5ce382e7dac5ad381b2c17b1373c, ``Parallelism.pipeline_parallel_microbatch_size``
  ("The global training batch size must be evenly divisible by
  pipeline_parallel_microbatch_size").
"""

from __future__ import annotations

from dataclasses import dataclass

from nest_cp.model.launchers import Rule, violations

DIMS = ("torchtitan torchtitan/distributed/parallel_dims.py@"
        "73bb964d8f66f585d977b40fe3de88301cdd03cd ParallelDims._validate")
TRAIN = "torchtitan torchtitan/train.py@e9f53473bd120ca46cd5d34f15e7725287c35c66 Trainer"
JOB = ("torchtitan torchtitan/config/job_config.py@6404b932421f5ce382e7dac5ad381b2c17b1373c "
       "Parallelism.pipeline_parallel_microbatch_size")


@dataclass(frozen=True, slots=True)
class TorchtitanLaunch:
    """The [parallelism] and [training] values torchtitan checks, and the world size."""

    world_size: int
    dp_replicate: int
    dp_shard: int
    tp: int
    pp: int
    local_batch_size: int
    global_batch_size: int
    pp_microbatch_size: int


def _dims(launch: TorchtitanLaunch) -> str | None:
    product = launch.dp_replicate * launch.dp_shard * launch.tp * launch.pp
    if product != launch.world_size:
        return (f"dp_replicate x dp_shard x tp x pp = {product} != world size "
                f"{launch.world_size}")
    return None


def _accumulation(launch: TorchtitanLaunch) -> str | None:
    step = launch.local_batch_size * launch.dp_replicate * launch.dp_shard
    if launch.global_batch_size % step:
        return (f"global_batch_size {launch.global_batch_size} is not a multiple of "
                f"local_batch_size x data-parallel degree = {step}")
    return None


def _pipeline_microbatch(launch: TorchtitanLaunch) -> str | None:
    if launch.pp > 1 and launch.local_batch_size % launch.pp_microbatch_size:
        return (f"local_batch_size {launch.local_batch_size} is not a multiple of "
                f"pipeline_parallel_microbatch_size {launch.pp_microbatch_size}")
    return None


RULES: tuple[Rule[TorchtitanLaunch], ...] = (
    Rule("parallel dims", f"{DIMS}: 'Invalid parallel dims: dp_replicate(...) * dp_shard(...) "
         "* cp(...) * tp(...) * pp(...) != WORLD_SIZE(...)'", _dims),
    Rule("gradient accumulation", f"{TRAIN}: 'global batch size must be multiple of local "
         "batch size times data-parallel degree'", _accumulation),
    Rule("pipeline microbatch", JOB, _pipeline_microbatch),
)


def startup_violations(launch: TorchtitanLaunch) -> list[str]:
    return violations(RULES, launch)
