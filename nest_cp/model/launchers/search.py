"""What a launcher accepts, as rules over a plan's shape: the space every backend searches.

An instance names its launcher (``training.launcher``).  Under ``none`` every plan of the
cost model's space is allowed (the papers' model, the benchmark grid).  Under
``megatron``, ``torchtitan`` or ``deepspeed`` the backends search only plans that launcher
starts as exported and runs as priced: each rule below names the launcher code it comes
from (the same pinned sources as the startup checks of the sibling modules, which the
exporters apply to what they write).

A rule reads plain values, never an instance or a plan, so the DP can apply it to whole
arrays of candidate shapes at once: ``admits(facts, shape)`` is written with arithmetic and
``&``/``|`` that work on Python ints and numpy arrays alike.  The shape is
(t, e, b, d, S, v, z, c); ``facts`` are the instance's global batch, sequence length and
context-parallel exchange (``p2p`` or ``a2a``) and the head counts and model its workload
records (None: not recorded, and the rule reading it is then not checked).

Context parallelism (c > 1): Megatron-LM takes either exchange and a sequence of a
multiple of 2c; torchtitan only its ring (p2p), a sequence of a multiple of 2·t·c and
sharded parameters; DeepSpeed none from its config (see the DeepSpeed rule).  Under
Megatron-LM and torchtitan c > 1 and e > 1 exclude each other: both number the expert
ranks right after the tensor ranks (Megatron's expert rank generator has no context digit,
torchtitan's sparse mesh puts ``ep`` where the dense mesh puts ``cp``), so a context group
and an expert group of theirs share min(c, e) ranks, where the plan's (DESIGN §3.4: ranks
j = t_index + t·c_index + t·c·e_index) share one; no rank map realises both groups.

One rule reads no shape: torchtitan builds only the models it ships (``torchtitan``
``model_problem``), so under ``torchtitan`` an instance whose recorded model it does not
ship admits no shape at all.  :func:`model_problem` says why in one line, and the backend
registry answers "no plan" with it before searching (``nest_cp.solvers.registry``).

Besides the shape rules, every launcher applies one recompute setting to all stages
(``--recompute-granularity``, ``activation_checkpoint.mode``,
``activation_checkpointing``), so a plan whose stages recompute differently is not run as
priced: :func:`one_recompute_mode` says so, and the backend registry searches such an
instance one recompute mode at a time (``nest_cp.solvers.registry``).

SDP plans (cost model §6) have no launcher spelling; an instance allowing them must say
``launcher: none`` (the instance model refuses the combination).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from typing import Any

from nest_cp.model.launchers import ModelFacts
from nest_cp.model.launchers.deepspeed import AUTOTP, GROUPS, PIPE
from nest_cp.model.launchers.deepspeed import CONFIG as DS_CONFIG
from nest_cp.model.launchers.megatron import ARGS, BATCH
from nest_cp.model.launchers.torchtitan import BUILDS, FLAVORS, TRAIN
from nest_cp.model.launchers.torchtitan import model_problem as torchtitan_model_problem


class Launcher(str, Enum):
    """The training launcher a plan is for (``none``: the cost model's whole space)."""

    NONE = "none"
    MEGATRON = "megatron"
    TORCHTITAN = "torchtitan"
    DEEPSPEED = "deepspeed"


@dataclass(frozen=True, slots=True)
class SearchFacts:
    """What the rules read from the instance: the global batch, the recorded head counts and
    the recorded model architecture."""

    global_batch: int
    heads: int | None = None
    kv_heads: int | None = None
    sequence_parallel: bool | None = None
    fp16: bool = False  # the optimizer prices fp16 weights (instance model precision_of)
    model: ModelFacts | None = None  # workload.model as the launchers compare it
    seq_len: int | None = None  # training.seq_len
    cp_comm: str = "p2p"  # training.cp_comm: how the c ranks exchange K/V (p2p or a2a)


@dataclass(frozen=True, slots=True)
class SearchShape:
    """A candidate's outer choices; each field an int or a numpy array (broadcast)."""

    tp: Any
    ep: Any
    microbatch: Any
    dp: Any
    num_stages: Any
    virtual_stages: Any = 1
    zero: Any = 0
    cp: Any = 1


@dataclass(frozen=True, slots=True)
class ShapeRule:
    """``admits(facts, shape)`` is true (elementwise) for the shapes the launcher accepts;
    ``requires`` says in words what it asks, ``source`` where the launcher asserts it."""

    name: str
    requires: str
    source: str
    admits: Callable[[SearchFacts, SearchShape], Any]


MCORE_ATTENTION = ("Megatron-LM core_v0.15.3 megatron/core/transformer/attention.py:168-169 "
                   "Attention.__init__: divide(num_attention_heads, tp) and "
                   "divide(num_query_groups, tp) (megatron.core.utils.divide asserts "
                   "divisibility)")
MEGATRON_RECOMPUTE = ("Megatron-LM core_v0.15.3 megatron/training/arguments.py:2010 "
                      "_add_training_args: --recompute-granularity and --recompute-method are "
                      "single arguments applied to every layer")
TORCHTITAN_CHECKPOINT = ("torchtitan v0.2.2 torchtitan/config/job_config.py:652 "
                         "ActivationCheckpoint.mode is one value for the model")
DEEPSPEED_CHECKPOINT = ("DeepSpeed v0.19.3 deepspeed/runtime/pipe/module.py:134 "
                        "PipelineModule.__init__: activation_checkpoint_interval is one value "
                        "for every stage")
DEEPSPEED_SCHEDULE = ("DeepSpeed v0.19.3 deepspeed/runtime/pipe/engine.py:385 "
                      "PipelineEngine.train_batch runs schedule.TrainSchedule, plain 1F1B; the "
                      "pipeline engine has no interleaved schedule")
TORCHTITAN_SEQUENCE = ("torchtitan v0.2.2 torchtitan/models/llama3/infra/parallelize.py:161 "
                       "apply_tp: the norms are SequenceParallel() (lines 181, 219, 233)")
TORCHTITAN_FSDP = ("torchtitan v0.2.2 torchtitan/config/job_config.py:336 "
                   "Parallelism.fsdp_reshard_after_forward")
MEGATRON_CP_EXPERTS = ("Megatron-LM core_v0.15.3 megatron/core/parallel_state.py:732-763 "
                       "initialize_model_parallel: the dense RankGenerator has cp and ep = 1, "
                       "the expert one ep and cp = 1, both in order tp-cp-ep-dp-pp, so expert "
                       "and context ranks both follow the tensor ranks")
TORCHTITAN_CP_EXPERTS = ("torchtitan v0.2.2 torchtitan/distributed/parallel_dims.py:143-158 "
                         "ParallelDims.build_mesh: the dense mesh [pp, batch, cp, tp] and the "
                         "sparse mesh [pp, dp_replicate, efsdp, ep, etp] put cp and ep both "
                         "right above tp")
TORCHTITAN_SEQ = ("torchtitan v0.2.2 torchtitan/models/llama3/infra/parallelize.py:69 "
                  "parallelize_llama: 'Sequence length ... must be divisible by the product of "
                  "TP degree ... and 2 * CP degree' (parallel_dims.py:372 seq_len_divisor = "
                  "tp * (cp * 2))")
TORCHTITAN_CP_FSDP = ("torchtitan v0.2.2 torchtitan/distributed/parallel_dims.py:334 "
                      "fsdp_enabled is dp_shard_enabled or cp_enabled, and parallelize.py:125 "
                      "applies FSDP over dp_shard x cp")
TORCHTITAN_CP_RING = ("torchtitan v0.2.2 torchtitan/distributed/context_parallel.py:27 "
                      "apply_cp_to_attention_module: PyTorch's _ContextParallel, which passes "
                      "K/V shards between the ranks; torchtitan has no head-scattering (Ulysses) "
                      "context parallelism")
DEEPSPEED_ULYSSES = ("DeepSpeed v0.19.3 deepspeed/__init__.py:203-206 initialize: "
                     "sequence_parallel_size in the config builds only a (data_parallel, "
                     "sequence_parallel) mesh; without an mpu from the script, "
                     "utils/groups.py:845-851 _get_sequence_data_parallel_group returns the "
                     "data_parallel group, over which runtime/engine.py:3565 reduces the "
                     "gradients (d ranks, not d·c), and the all-to-all attention is "
                     "deepspeed.sequence.layer.DistributedAttention in the script (layer.py:351)")


def _batch(facts: SearchFacts, shape: SearchShape) -> Any:
    return facts.global_batch % (shape.microbatch * shape.ep * shape.dp) == 0


def _heads(facts: SearchFacts, shape: SearchShape) -> Any:
    admitted = shape.tp == shape.tp  # all true, in the shape's own type
    for count in (facts.heads, facts.kv_heads):
        if count is not None:
            admitted = admitted & (count % shape.tp == 0)
    return admitted


def _interleaved_depth(facts: SearchFacts, shape: SearchShape) -> Any:
    return (shape.virtual_stages == 1) | (shape.num_stages >= 2)


def _no_zero_with_pipeline(facts: SearchFacts, shape: SearchShape) -> Any:
    return (shape.zero < 2) | (shape.num_stages == 1)


def _no_autotp_with_pipeline(facts: SearchFacts, shape: SearchShape) -> Any:
    return (shape.tp == 1) | (shape.num_stages == 1)


def _no_autotp_with_zero_3(facts: SearchFacts, shape: SearchShape) -> Any:
    return (shape.tp == 1) | (shape.zero <= 2)


def _no_interleaving(facts: SearchFacts, shape: SearchShape) -> Any:
    return shape.virtual_stages == 1


def _no_zero_one(facts: SearchFacts, shape: SearchShape) -> Any:
    return shape.zero != 1


def _experts_sharded(facts: SearchFacts, shape: SearchShape) -> Any:
    return (shape.ep == 1) | (shape.zero != 0)


def _experts_not_fp16(facts: SearchFacts, shape: SearchShape) -> Any:
    if facts.fp16:
        return shape.ep == 1
    return shape.ep == shape.ep


def _sequence_parallel_tp(facts: SearchFacts, shape: SearchShape) -> Any:
    if facts.sequence_parallel is not False:
        return shape.tp == shape.tp
    return shape.tp == 1


def _context_sequence(facts: SearchFacts, shape: SearchShape) -> Any:
    if facts.seq_len is None:
        return shape.cp == shape.cp
    return (shape.cp == 1) | (facts.seq_len % (2 * shape.cp) == 0)


def _context_sequence_tp(facts: SearchFacts, shape: SearchShape) -> Any:
    if facts.seq_len is None:
        return shape.cp == shape.cp
    return (shape.cp == 1) | (facts.seq_len % (2 * shape.tp * shape.cp) == 0)


def _context_or_experts(facts: SearchFacts, shape: SearchShape) -> Any:
    return (shape.cp == 1) | (shape.ep == 1)


def _context_p2p(facts: SearchFacts, shape: SearchShape) -> Any:
    if facts.cp_comm == "p2p":
        return shape.cp == shape.cp
    return shape.cp == 1


def _context_sharded(facts: SearchFacts, shape: SearchShape) -> Any:
    return (shape.cp == 1) | (shape.zero != 0)


def _no_context(facts: SearchFacts, shape: SearchShape) -> Any:
    return shape.cp == 1


def _model_built(facts: SearchFacts, shape: SearchShape) -> Any:
    if torchtitan_model_problem(facts.model) is None:
        return shape.tp == shape.tp  # all true, in the shape's own type
    return shape.tp != shape.tp  # all false: no shape of a model torchtitan cannot build


_BATCH_WORDS = "global batch a multiple of b·e·d"

SHAPE_RULES: dict[Launcher, tuple[ShapeRule, ...]] = {
    Launcher.NONE: (),
    Launcher.MEGATRON: (
        ShapeRule("global batch", _BATCH_WORDS, f"{BATCH}: 'global batch size (...) is not "
                  "divisible by micro batch size (...) times data parallel size'", _batch),
        ShapeRule("heads", "t divides the attention heads and the query groups",
                  MCORE_ATTENTION, _heads),
        ShapeRule("experts in fp16", "e = 1 when the optimizer prices fp16 weights",
                  f"{ARGS}, line 1042: 'Expert parallelism is not supported with fp16 "
                  "training'", _experts_not_fp16),
        ShapeRule("interleaved depth", "v = 1 or S >= 2", f"{ARGS}, line 605: 'When interleaved "
                  "schedule is used, pipeline-model-parallel size should be greater than 1'",
                  _interleaved_depth),
        ShapeRule("context sequence", "c = 1 or the sequence a multiple of 2c", f"{ARGS}, line "
                  "844: 'seq-length should be a multiple of 2 * context-parallel-size if "
                  "context-parallel-size > 1'", _context_sequence),
        ShapeRule("context and experts", "c = 1 or e = 1", f"{MEGATRON_CP_EXPERTS}: a context "
                  "group and an expert group share min(c, e) ranks, the plan's share one",
                  _context_or_experts),
    ),
    Launcher.TORCHTITAN: (
        ShapeRule("model", f"a model torchtitan ships, {BUILDS}, of exactly the recorded "
                  "sizes", f"{FLAVORS}: torchtitan builds model_args[flavor] of a shipped "
                  "model (torchtitan v0.2.2 torchtitan/train.py:138)", _model_built),
        ShapeRule("global batch", _BATCH_WORDS, f"{TRAIN}: 'global batch size must be "
                  "multiple of local batch size times data-parallel degree'", _batch),
        ShapeRule("ZeRO-1", "z in {0, 2, 3}", f"{TORCHTITAN_FSDP}: FSDP shards parameters, "
                  "gradients and optimizer state together (never/always: ZeRO-2/3); nothing "
                  "shards the optimizer state alone", _no_zero_one),
        ShapeRule("experts and ZeRO 0", "e = 1 or z >= 1", "torchtitan v0.2.2 "
                  "torchtitan/distributed/parallel_dims.py:98 ParallelDims.build_mesh: expert "
                  "parallelism takes its ranks from the FSDP shard dimension (efsdp x ep = "
                  "dp_shard x cp), so e > 1 shards parameters", _experts_sharded),
        ShapeRule("sequence parallelism", "t = 1 unless the profiles assume sequence "
                  "parallelism", f"{TORCHTITAN_SEQUENCE}: torchtitan's tensor-parallel plan "
                  "always shards the norms by sequence", _sequence_parallel_tp),
        ShapeRule("context sequence", "c = 1 or the sequence a multiple of 2·t·c",
                  f"{TORCHTITAN_SEQ}; the same assertion asks 2·t at c = 1, not checked here",
                  _context_sequence_tp),
        ShapeRule("context exchange", "c = 1 unless cp_comm is p2p", TORCHTITAN_CP_RING,
                  _context_p2p),
        ShapeRule("context and ZeRO 0", "c = 1 or z >= 1", f"{TORCHTITAN_CP_FSDP}: c > 1 shards "
                  "parameters over the context ranks", _context_sharded),
        ShapeRule("context and experts", "c = 1 or e = 1", f"{TORCHTITAN_CP_EXPERTS}: a "
                  "context group and an expert group share min(c, e) ranks, the plan's share "
                  "one", _context_or_experts),
    ),
    Launcher.DEEPSPEED: (
        ShapeRule("train batch", _BATCH_WORDS, f"{DS_CONFIG}: 'train_batch_size is not equal "
                  "to micro_batch_per_gpu * gradient_acc_step * world_size'", _batch),
        ShapeRule("ZeRO-2/3 with a pipeline", "z <= 1 or S = 1", f"{PIPE}: 'ZeRO-2 and "
                  "ZeRO-3 are incompatible with pipeline parallelism'", _no_zero_with_pipeline),
        ShapeRule("AutoTP with a pipeline", "t = 1 or S = 1", f"{GROUPS}: the AutoTP mesh "
                  "has only data_parallel and tensor_parallel axes", _no_autotp_with_pipeline),
        ShapeRule("AutoTP with ZeRO-3", "t = 1 or z <= 2", f"{AUTOTP}: 'Currently, the "
                  "compatibility between 'autotp' and 'zero_stage = 3' has not been "
                  "validated'", _no_autotp_with_zero_3),
        ShapeRule("interleaving", "v = 1", DEEPSPEED_SCHEDULE, _no_interleaving),
        ShapeRule("context parallelism", "c = 1", f"{DEEPSPEED_ULYSSES}: a config cannot "
                  "express Ulysses sequence parallelism as priced", _no_context),
    ),
}

ONE_MODE_SOURCE: dict[Launcher, str] = {
    Launcher.MEGATRON: MEGATRON_RECOMPUTE,
    Launcher.TORCHTITAN: TORCHTITAN_CHECKPOINT,
    Launcher.DEEPSPEED: DEEPSPEED_CHECKPOINT,
}


def one_recompute_mode(launcher: Launcher) -> bool:
    """Whether the launcher applies one recompute setting to every stage (all but none)."""
    return launcher in ONE_MODE_SOURCE


def model_problem(launcher: Launcher, facts: SearchFacts) -> str | None:
    """Why ``launcher`` cannot build the instance's recorded model (then it admits no shape:
    the instance has no plan), or None.  Only torchtitan builds models from a table of its
    own; Megatron-LM takes the sizes as arguments and DeepSpeed wraps the user's model."""
    if launcher is Launcher.TORCHTITAN:
        return torchtitan_model_problem(facts.model)
    return None


def admits(launcher: Launcher, facts: SearchFacts, shape: SearchShape) -> Any:
    """Whether (elementwise, for arrays) every shape rule of the launcher admits ``shape``."""
    admitted = True
    for rule in SHAPE_RULES[launcher]:
        admitted = admitted & rule.admits(facts, shape)
    return admitted


def shape_problems(launcher: Launcher, facts: SearchFacts, shape: SearchShape) -> list[str]:
    """'launcher rule: needs ...' for every rule a scalar ``shape`` breaks, in rule order."""
    return [f"{launcher.value} {rule.name}: needs {rule.requires} ({rule.source})"
            for rule in SHAPE_RULES[launcher] if not bool(rule.admits(facts, shape))]


def context_problem(launcher: Launcher, facts: SearchFacts, cp: int) -> str | None:
    """Why ``launcher`` admits no plan of context width ``cp`` at all, or None: the first
    context rule refusing the shape the context rules like best (t = e = 1, z = 3)."""
    shape = SearchShape(tp=1, ep=1, microbatch=1, dp=1, num_stages=1, zero=3, cp=cp)
    problems = [problem for problem in shape_problems(launcher, facts, shape)
                if problem.startswith(f"{launcher.value} context")]
    return problems[0] if problems else None


def rules_applied(launcher: Launcher, facts: SearchFacts) -> list[str]:
    """One line per rule restricting the search (what ``solve`` and the gap tables print)."""
    lines = [f"{rule.name}: {rule.requires} [{rule.source}]"
             for rule in SHAPE_RULES[launcher]]
    if any(rule.admits is _heads for rule in SHAPE_RULES[launcher]) and facts.heads is None:
        lines.append("heads: not checked, the workload records no head counts")
    if any(rule.admits in (_context_sequence, _context_sequence_tp)
           for rule in SHAPE_RULES[launcher]) and facts.seq_len is None:
        lines.append("sequence: not checked, no sequence length given")
    if any(rule.admits is _model_built for rule in SHAPE_RULES[launcher]) \
            and facts.model is None:
        lines.append("model: not checked, the workload records no model architecture (the "
                     "export warns that torchtitan then trains its default debugmodel)")
    if one_recompute_mode(launcher):
        lines.append(f"one recompute mode: every stage the same [{ONE_MODE_SOURCE[launcher]}]")
    return lines


__all__ = ["Launcher", "SearchFacts", "SearchShape", "ShapeRule", "SHAPE_RULES", "admits",
           "context_problem", "model_problem", "one_recompute_mode", "rules_applied",
           "shape_problems"]
