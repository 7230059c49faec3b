"""Reference formulas of the Megatron-LM papers and estimator, to check the profiler against.

Written from the published formulas (``../shared/fidelity/README.md`` §3 restates them), not
from Megatron's code:

- FLOPs per iteration, Narayanan et al. 2021 (SC'21, arXiv 2104.04473) Eq. 3, for a dense
  GPT (f = 4h, multi-head attention): with full recomputation
  ``96 B s l h^2 (1 + s/(6h) + V/(16 l h))``; without, the transformer part counts three
  passes instead of four: ``72 B s l h^2 (1 + s/(6h)) + 6 B s h V``.
- Parameters: ``12 l h^2 (1 + 13/(12h) + (V + s)/(12 l h))`` (tied embeddings, learned
  positions, biases; the final norm left out).
- Memory per GPU of the first pipeline stage (Megatron-LM's theoretical memory estimator,
  ``megatron/training/theoretical_memory_usage.py``): weights and optimizer
  ``P_shard * (18, or 6 + 12/d with the distributed optimizer)`` with
  ``P_shard = (P_transformer / p + V h) / t`` (+ ``V h / t`` for an untied head when p = 1);
  activations: per layer and microbatch (Korthikanti et al. 2022, Table 2)
  ``s b h (10 + 24/t + 5 a s/(h t))`` without sequence parallelism,
  ``s b h (34 + 5 a s / h) / t`` with it, without the ``5 a s / h`` term under selective
  recomputation, ``2 s b h`` under full recomputation.  With sequence parallelism and
  selective recomputation the estimator (Megatron-LM main, ``compute_activation_memory``,
  read at commit 00caa53) writes the 34 as ``18 + 4 f / h`` for an FFN of width f, which is
  34 for f = 4h and follows a narrower or wider FFN (31 for Llama 3 405B's f = 3.25h); this
  module uses that form.  The first stage holds p microbatches of its l/p layers
  (``min(m, p)`` when fewer), i.e. ``l`` layer-microbatches, times ``1 + (p - 1)/(p v)``
  with v > 1 virtual stages; plus the embedding's input (8 s b p) and dropout mask
  (s b h p), and for p = 1 the output layer's input and fp32 logits
  ``4 s b h (1 + V/h) / t``.  The estimator does not cap the interleaved count at the
  v m chunk-microbatches a short iteration has (its 1F1B branch does cap, at m); the
  ``cap_in_flight`` option applies the same cap to v > 1, as Megatron's scheduler runs it.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum


class Recompute(str, Enum):
    NONE = "none"
    SELECTIVE = "selective"
    FULL = "full"


def sc21_flops(batch: int, seq: int, layers: int, hidden: int, vocab: int,
               full_recompute: bool) -> float:
    """Model FLOPs of one iteration (SC'21 Eq. 3; without recompute: 72 and 6BshV)."""
    if full_recompute:
        return 96.0 * batch * seq * layers * hidden**2 * (
            1 + seq / (6 * hidden) + vocab / (16 * layers * hidden))
    return 72.0 * batch * seq * layers * hidden**2 * (1 + seq / (6 * hidden)) \
        + 6.0 * batch * seq * hidden * vocab


def gpt_params(layers: int, hidden: int, vocab: int, seq: int) -> float:
    """12 l h^2 (1 + 13/(12h) + (V + s)/(12 l h))."""
    return 12.0 * layers * hidden**2 * (1 + 13 / (12 * hidden) + (vocab + seq)
                                         / (12 * layers * hidden))


@dataclass(frozen=True, slots=True)
class MegatronRun:
    """A GPT run as Megatron's estimator sees it (dense, MHA-style sizes)."""

    layers: int
    hidden: int
    heads: int
    ffn_hidden: int
    vocab: int  # padded
    seq: int
    microbatch: int
    tp: int
    pp: int
    dp: int
    num_microbatches: int
    vp: int = 1
    sequence_parallel: bool = True
    recompute: Recompute = Recompute.SELECTIVE
    distributed_optimizer: bool = True
    untied: bool = True
    kv_heads: int | None = None
    gated: bool = False


def transformer_params(run: MegatronRun) -> float:
    """Transformer-layer parameters (attention with GQA, MLP, norms; final norm)."""
    kv = run.kv_heads or run.heads
    attention = 2 * run.hidden**2 * (1 + kv / run.heads)
    mlp = (3 if run.gated else 2) * run.hidden * run.ffn_hidden
    return run.layers * (attention + mlp + 2 * run.hidden) + run.hidden


def weight_and_optimizer_bytes(run: MegatronRun) -> float:
    embedding = run.vocab * run.hidden
    shard = (transformer_params(run) / run.pp + embedding) / run.tp
    if run.untied and run.pp == 1:
        shard += embedding / run.tp
    per_param = 6 + 12 / run.dp if run.distributed_optimizer else 18
    return shard * per_param


def layer_activation_bytes(run: MegatronRun) -> float:
    """Korthikanti Table 2 per layer and microbatch (the fidelity README's forms)."""
    sbh = run.seq * run.microbatch * run.hidden
    if run.recompute is Recompute.FULL:
        return 2.0 * sbh
    scores = 5 * run.heads * run.seq / run.hidden if run.recompute is Recompute.NONE else 0.0
    if run.sequence_parallel:
        if run.recompute is Recompute.SELECTIVE:
            return sbh * (18 + 4 * run.ffn_hidden / run.hidden) / run.tp
        return sbh * (34 + scores) / run.tp
    return sbh * (10 + 24 / run.tp + scores / run.tp)


def activation_bytes(run: MegatronRun, cap_in_flight: bool = False) -> float:
    """First-stage activations (Megatron's estimator structure, module docstring).

    ``cap_in_flight``: with v > 1, hold at most the v m chunk-microbatches an iteration has
    (the estimator's own cap for v = 1, applied to the interleaved count).
    """
    sb = run.seq * run.microbatch
    memory = layer_activation_bytes(run) * run.layers
    extra = 8 * sb * run.pp + sb * run.hidden * run.pp
    memory += extra / run.tp
    if run.vp > 1:
        penalty = 1 + (run.pp - 1) / (run.pp * run.vp)
        memory *= min(penalty, run.num_microbatches / run.pp) if cap_in_flight else penalty
    elif run.pp > 1:
        memory *= min(1.0, run.num_microbatches / run.pp)
    if run.pp == 1:
        memory += sb * run.hidden * 4 * (1 + run.vocab / run.hidden) / run.tp
    return memory


def memory_bytes(run: MegatronRun, cap_in_flight: bool = False) -> float:
    """Megatron's theoretical memory of the first pipeline stage, bytes per GPU."""
    return weight_and_optimizer_bytes(run) + activation_bytes(run, cap_in_flight)
