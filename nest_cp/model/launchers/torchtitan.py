"""torchtitan at startup: its parallel dimensions, batch arithmetic and model lookup.

Pinned release: torchtitan **v0.2.2** (pytorch/torchtitan tag ``v0.2.2``, commit
73a0e6979dd10b6b1904098eb3c8f62c18ab87ce, February 2026).  Sources, file, function and
line at that tag:

- ``DIMS``: ``torchtitan/distributed/parallel_dims.py`` ``ParallelDims._validate`` (line
  35; the assertion at line 53);
- ``TRAIN``: ``torchtitan/train.py`` ``Trainer.__init__`` (line 76; the batch assertion at
  line 202, the model lookup ``get_train_spec(job_config.model.name)`` at line 117 and
  ``model_args[job_config.model.flavor]`` at line 138);
- ``PIPE``: ``torchtitan/distributed/pipeline_parallel.py`` ``build_pipeline_schedule``,
  line 189: 'Batch size ... must be divisible by microbatch_size';
- ``JOB``: ``torchtitan/config/job_config.py``, the config manager's dataclasses
  (``Model`` line 100, ``Training`` 243, ``Parallelism`` 312, ``ActivationCheckpoint``
  651, ``Experimental`` 928);
- ``SPEC``: ``torchtitan/protocols/train_spec.py`` ``get_train_spec`` (line 71): a model
  name torchtitan does not ship is 'not registered' (line 87) unless a module given as
  ``[experimental] custom_import`` registers it (``register_train_spec``, line 62);
- ``FLAVORS``: ``torchtitan/models/llama3/__init__.py`` ``llama3_args`` (lines 29-100) with
  ``models/llama3/model/args.py`` ``TransformerModelArgs`` (vocab 128256, line 33) and
  ``model/model.py`` ``FeedForward.__init__`` (the SwiGLU width, lines 332-336).
"""

from __future__ import annotations

from dataclasses import dataclass

from nest_cp.model.launchers import Rule, violations

TORCHTITAN_VERSION = "torchtitan v0.2.2 (commit 73a0e6979dd10b6b1904098eb3c8f62c18ab87ce)"
DIMS = "torchtitan v0.2.2 torchtitan/distributed/parallel_dims.py:53 ParallelDims._validate"
TRAIN = "torchtitan v0.2.2 torchtitan/train.py:202 Trainer.__init__"
PIPE = ("torchtitan v0.2.2 torchtitan/distributed/pipeline_parallel.py:189 "
        "build_pipeline_schedule")
JOB = "torchtitan v0.2.2 torchtitan/config/job_config.py:312 Parallelism"
SPEC = "torchtitan v0.2.2 torchtitan/protocols/train_spec.py:71 get_train_spec"
FLAVORS = "torchtitan v0.2.2 torchtitan/models/llama3/__init__.py:29 llama3_args"


@dataclass(frozen=True, slots=True)
class Flavor:
    """One model flavor torchtitan ships: Llama 3 (RMSNorm, SwiGLU, rotary positions, no
    biases, untied output, no experts) of these sizes."""

    name: str
    flavor: str
    num_layers: int
    hidden: int
    heads: int
    kv_heads: int
    ffn_hidden: int
    vocab: int


def llama_ffn_width(hidden: int, multiplier: float | None, multiple_of: int) -> int:
    """torchtitan's SwiGLU width (model.py lines 332-336): 2/3 of 4·hidden, times the
    multiplier, rounded up to ``multiple_of``."""
    width = int(2 * (4 * hidden) / 3)
    if multiplier is not None:
        width = int(multiplier * width)
    return multiple_of * ((width + multiple_of - 1) // multiple_of)


# llama3_args at v0.2.2 (lines 51, 82, 91): dim, n_layers, n_heads, n_kv_heads,
# ffn_dim_multiplier, multiple_of; vocab_size the TransformerModelArgs default 128256
FLAVOR_TABLE: tuple[Flavor, ...] = (
    Flavor("llama3", "8B", 32, 4096, 32, 8, llama_ffn_width(4096, 1.3, 1024), 128256),
    Flavor("llama3", "70B", 80, 8192, 64, 8, llama_ffn_width(8192, 1.3, 4096), 128256),
    Flavor("llama3", "405B", 126, 16384, 128, 8, llama_ffn_width(16384, 1.2, 4096), 128256),
)


def flavor_named(layers: int, hidden: int, heads: int, kv_heads: int, ffn_hidden: int,
                 vocab: int) -> Flavor | None:
    """The shipped flavor of these sizes (the caller checks the model is Llama-like)."""
    for flavor in FLAVOR_TABLE:
        if (flavor.num_layers, flavor.hidden, flavor.heads, flavor.kv_heads,
                flavor.ffn_hidden, flavor.vocab) == (layers, hidden, heads, kv_heads,
                                                     ffn_hidden, vocab):
            return flavor
    return None


# models/__init__.py line 7, _supported_models; llama3's flavors: llama3/__init__.py lines
# 29-100 (llama3_args keys)
SHIPPED_MODELS = frozenset({"deepseek_v3", "flux", "gpt_oss", "llama3", "llama3_ft", "llama4",
                            "qwen3"})
LLAMA3_FLAVORS = frozenset({"debugmodel", "debugmodel_flex_attn", "debugmodel_varlen_attn",
                            "8B", "8B_flex", "8B_varlen", "70B", "405B"})
# the config manager's Literal fields the export writes (job_config.py lines 282, 336, 652):
# torchtitan's parser refuses any other value
CHOICES: dict[tuple[str, str], tuple[str, ...]] = {
    ("training", "mixed_precision_param"): ("bfloat16", "float32"),
    ("parallelism", "fsdp_reshard_after_forward"): ("default", "always", "never"),
    ("activation_checkpoint", "mode"): ("selective", "full", "memory_budget", "none"),
}


@dataclass(frozen=True, slots=True)
class TorchtitanLaunch:
    """The [parallelism], [training] and [model] values torchtitan checks, the world size,
    and the model names the user's ``[experimental] custom_import`` registers."""

    world_size: int
    dp_replicate: int
    dp_shard: int
    tp: int
    pp: int
    local_batch_size: int
    global_batch_size: int
    pp_microbatch_size: int
    model_name: str = "llama3"
    model_flavor: str = "debugmodel"
    registered: frozenset[str] = frozenset()


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


def _model_lookup(launch: TorchtitanLaunch) -> str | None:
    if launch.model_name in launch.registered:
        return None  # the user's TrainSpec: its flavors are the user's
    if launch.model_name not in SHIPPED_MODELS:
        return f"model {launch.model_name!r} is neither shipped nor registered"
    if launch.model_name == "llama3" and launch.model_flavor not in LLAMA3_FLAVORS:
        return f"llama3 has no flavor {launch.model_flavor!r}"
    return None


RULES: tuple[Rule[TorchtitanLaunch], ...] = (
    Rule("parallel dims", f"{DIMS}: 'Invalid parallel dims: dp_replicate(...) * dp_shard(...) "
         "* cp(...) * tp(...) * pp(...) != WORLD_SIZE(...)'", _dims),
    Rule("gradient accumulation", f"{TRAIN}: 'global batch size must be multiple of local "
         "batch size times data-parallel degree'", _accumulation),
    Rule("pipeline microbatch", f"{PIPE}: 'Batch size (...) must be divisible by "
         "microbatch_size (...)'", _pipeline_microbatch),
    Rule("model lookup", f"{SPEC}: 'TrainSpec (...) is not registered' (line 87); "
         "torchtitan v0.2.2 torchtitan/train.py:138 model_args[job_config.model.flavor] "
         "(a KeyError for another flavor)", _model_lookup),
)


def startup_violations(launch: TorchtitanLaunch) -> list[str]:
    """Every rule of :data:`RULES` the job breaks ('name: problem (source)')."""
    return violations(RULES, launch)


def choice_problems(document: dict) -> list[str]:
    """'section.key: value not in (...)' for every written Literal field torchtitan's config
    manager would refuse (:data:`CHOICES`)."""
    return [f"{section}.{key}: {document[section][key]!r} not in {allowed}"
            for (section, key), allowed in CHOICES.items()
            if key in document.get(section, {}) and document[section][key] not in allowed]
