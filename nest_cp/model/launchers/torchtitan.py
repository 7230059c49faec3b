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
  name torchtitan does not ship is 'not registered' (line 87) (nest-cp's exports name only
  shipped models and write no ``[experimental] custom_import``);
- ``FLAVORS``: ``torchtitan/models/llama3/__init__.py`` ``llama3_args`` (lines 29-100) with
  ``models/llama3/model/args.py`` ``TransformerModelArgs`` (vocab 128256, line 33;
  ``multiple_of`` 256, line 34), ``model/model.py`` ``Attention.__init__`` (no kv heads
  given: as many as heads, lines 194-197) and ``FeedForward.__init__`` (the SwiGLU width of
  ``4 * dim``, lines 332-336 and 378);
- ``SHIPPED_MODELS``: ``torchtitan/models/__init__.py`` line 7, ``_supported_models``;
- ``CP_SEQ``: ``torchtitan/models/llama3/infra/parallelize.py`` ``parallelize_llama``
  (line 54; the assertion at line 69) with ``parallel_dims.py`` ``seq_len_divisor`` (line
  365: tp · 2 · cp).

Context parallelism: ``[parallelism] context_parallel_degree`` c (job_config.py line 428)
joins the product the parallel dims must equal (parallel_dims.py line 53) and the sequence
must be a multiple of 2·t·c (``CP_SEQ``; the same assertion asks 2·t at c = 1, which
:data:`RULES` does not check).  torchtitan runs PyTorch's ring-style context-parallel SDPA
(``distributed/context_parallel.py`` line 27 ``apply_cp_to_attention_module``) with the
``headtail`` load balancer (job_config.py line 431, Megatron's 2c chunks); it has no
Ulysses (head-scattering) exchange.

Which models torchtitan builds (:func:`model_problem`): torchtitan builds a model from its
own table, ``model_args[flavor]`` of a shipped model name, never from sizes it is given.
So a plan runs in torchtitan as priced only when that table holds the priced architecture:
a Llama 3 (``llama3``: RMSNorm, SwiGLU, rotary positions, no biases, untied output,
model.py lines 204-209, 338-340, 382-383, 448-458) of exactly the instance's sizes
(:data:`FLAVOR_TABLE`).  The other models v0.2.2 ships match no model nest-cp records:

- ``llama3_ft`` is ``llama3_args`` again (``llama3_ft/__init__.py`` line 23);
- ``llama4`` (``llama4/__init__.py`` line 29): its full-size flavors are 48 layers of width
  5120 with 16 or 128 routed experts top-1 beside a shared one (``MoEArgs`` defaults,
  ``models/moe/moe.py`` line 22);
- ``qwen3`` (``qwen3/__init__.py`` line 32) normalises queries and keys per head
  (``qk_norm``), which a ``workload.model`` record does not describe, and its MoE flavors
  route top-8 of 64 or 128 experts;
- ``deepseek_v3`` (``deepseek_v3/__init__.py`` line 29) has shared experts, dense first
  layers and latent-attention ranks a record does not carry, so no record is known to
  equal one of its flavors;
- ``gpt_oss`` (``gpt_oss/__init__.py`` line 29) has attention sinks (``model/model.py``
  line 194), biased expert gates (``gate_bias``) and 8, 32 or 128 experts top-4;
- ``flux`` is an image model.

Mixtral 8x7B (8 experts top-2) and GPT-3 (LayerNorm, GeLU, biases, learned positions) are
therefore not built.
"""

from __future__ import annotations

from dataclasses import dataclass

from nest_cp.model.launchers import ModelFacts, Rule, violations

TORCHTITAN_VERSION = "torchtitan v0.2.2 (commit 73a0e6979dd10b6b1904098eb3c8f62c18ab87ce)"
DIMS = "torchtitan v0.2.2 torchtitan/distributed/parallel_dims.py:53 ParallelDims._validate"
TRAIN = "torchtitan v0.2.2 torchtitan/train.py:202 Trainer.__init__"
PIPE = ("torchtitan v0.2.2 torchtitan/distributed/pipeline_parallel.py:189 "
        "build_pipeline_schedule")
JOB = "torchtitan v0.2.2 torchtitan/config/job_config.py:312 Parallelism"
SPEC = "torchtitan v0.2.2 torchtitan/protocols/train_spec.py:71 get_train_spec"
FLAVORS = "torchtitan v0.2.2 torchtitan/models/llama3/__init__.py:29 llama3_args"
CP_SEQ = "torchtitan v0.2.2 torchtitan/models/llama3/infra/parallelize.py:69 parallelize_llama"


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


# llama3_args at v0.2.2 (debugmodel line 30, 8B 51, 70B 82, 405B 91): dim, n_layers,
# n_heads, n_kv_heads (debugmodel: none given, so n_heads, model.py lines 194-197),
# ffn_dim_multiplier, multiple_of (debugmodel: the default 256, args.py line 34); vocab_size
# the TransformerModelArgs default 128256 (args.py line 33) except debugmodel's 2048.  The
# _flex and _varlen flavors are the same sizes with another attention kernel.
FLAVOR_TABLE: tuple[Flavor, ...] = (
    Flavor("llama3", "debugmodel", 6, 256, 16, 16, llama_ffn_width(256, None, 256), 2048),
    Flavor("llama3", "8B", 32, 4096, 32, 8, llama_ffn_width(4096, 1.3, 1024), 128256),
    Flavor("llama3", "70B", 80, 8192, 64, 8, llama_ffn_width(8192, 1.3, 4096), 128256),
    Flavor("llama3", "405B", 126, 16384, 128, 8, llama_ffn_width(16384, 1.2, 4096), 128256),
)
BUILDS = ("llama3 " + "/".join(flavor.flavor for flavor in FLAVOR_TABLE)
          + " (Llama 3: RMSNorm, SwiGLU, rotary positions, no biases, untied output)")


def flavor_for(model: ModelFacts) -> Flavor | None:
    """The shipped flavor of exactly this architecture: a dense Llama-style model of the
    same layers, hidden, heads, kv heads, SwiGLU width and vocabulary; else None."""
    if not model.llama or model.num_experts != 1:
        return None
    for flavor in FLAVOR_TABLE:
        if (flavor.num_layers, flavor.hidden, flavor.heads, flavor.kv_heads,
                flavor.ffn_hidden, flavor.vocab) == (model.num_layers, model.hidden,
                                                     model.heads, model.kv_heads,
                                                     model.ffn_hidden, model.vocab):
            return flavor
    return None


def model_problem(model: ModelFacts | None) -> str | None:
    """Why torchtitan v0.2.2 cannot build the priced model (module doc), or None when it
    ships its flavor or the instance records no model (then nothing is checked)."""
    if model is None or flavor_for(model) is not None:
        return None
    return (f"torchtitan v0.2.2 builds no model of this architecture ({model.description}); "
            f"it builds {BUILDS} ({FLAVORS})")


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
    """The [parallelism], [training] and [model] values torchtitan checks, and the world
    size."""

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
    cp: int = 1  # context_parallel_degree
    seq_len: int | None = None  # [training] seq_len


def _dims(launch: TorchtitanLaunch) -> str | None:
    product = launch.dp_replicate * launch.dp_shard * launch.cp * launch.tp * launch.pp
    if product != launch.world_size:
        return (f"dp_replicate x dp_shard x cp x tp x pp = {product} != world size "
                f"{launch.world_size}")
    return None


def _context_sequence(launch: TorchtitanLaunch) -> str | None:
    divisor = launch.tp * 2 * launch.cp
    if launch.cp > 1 and launch.seq_len is not None and launch.seq_len % divisor:
        return (f"seq_len {launch.seq_len} is not a multiple of tp x 2 x cp = {launch.tp} x 2 "
                f"x {launch.cp}")
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
    if launch.model_name not in SHIPPED_MODELS:
        return f"model {launch.model_name!r} is not shipped"
    if launch.model_name == "llama3" and launch.model_flavor not in LLAMA3_FLAVORS:
        return f"llama3 has no flavor {launch.model_flavor!r}"
    return None


RULES: tuple[Rule[TorchtitanLaunch], ...] = (
    Rule("parallel dims", f"{DIMS}: 'Invalid parallel dims: dp_replicate(...) * dp_shard(...) "
         "* cp(...) * tp(...) * pp(...) != WORLD_SIZE(...)'", _dims),
    Rule("context sequence", f"{CP_SEQ}: 'Sequence length (...) must be divisible by the "
         "product of TP degree (...) and 2 * CP degree (...)' (checked for cp > 1)",
         _context_sequence),
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
