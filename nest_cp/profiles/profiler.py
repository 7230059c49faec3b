"""Analytic per-layer profiles of transformer models (DESIGN §1.1, source (a); v2 semantics).

``profile_workload(spec, device, seq_len, microbatches, configs, options)`` turns a model
description (:class:`~nest_cp.profiles.transformer.TransformerSpec`) and a kernel-level device
model (:class:`~nest_cp.profiles.kernels.DeviceSpec`) into the chain ``embedding, block.0 ..
block.{L-1}, head`` with one :class:`~nest_cp.model.instance.LayerProfile` per
(IntraConfig(tp, ep), microbatch b).
Notation: s sequence, b microbatch, T = s*b tokens of one device, h hidden, f FFN width,
a heads, h_kv = kv heads * head width, V vocabulary, E experts, k top-k, t = tp, e = ep,
R = k*T routed token copies a device receives (balanced routing). The full derivation, with
every formula and the fields filled, is ``docs/profiler.md``; in brief:

**Ops.** Every layer is a list of ops (:class:`_Op`): GEMMs, the attention core and
memory-bound kernels. Each op has a forward time, a data-gradient time and a weight-gradient
time, each priced by :mod:`nest_cp.profiles.kernels` from that pass's own FLOPs and bytes: a linear
layer ``y = x W`` (T x K times K x N) runs the forward GEMM (T, N, K), the data gradient
``dx = dy W^T`` (T, K, N) and the weight gradient ``dW = x^T dy`` (K, N, T), each with its own
tile/wave quantisation; flash attention's backward executes 2.5x its forward FLOPs at its
own (lower) efficiency; a memory-bound op moves its own bytes forward and backward.
``bwd_s`` = data + weight gradients, ``wgrad_s`` = weight gradients (GEMM weight gradients
and the embedding's scatter-add; norm scale gradients are fused into the norm's backward and
counted as data gradient). ``flops`` is the model FLOPs of one microbatch's forward on the
device: every GEMM's 2*M*N*K and the attention core's 4*b*s^2*(a/t)*d over the full square
(the convention of Narayanan et al. SC'21 Eq. 3 and Megatron-LM's throughput counter; a
causal flash kernel executes about half, which the time reflects but ``flops`` does not).

**Attention** is an instance choice (:class:`AttentionKind`): ``flash`` (default; fused,
the s^2 scores never reach HBM, only the fp32 log-sum-exp per head and token is kept) or
``materialized`` (QK^T and AV as batched GEMMs, softmax and dropout as memory-bound ops, the
scores kept for backward; NEST's traced graphs and Korthikanti et al.'s Table 2 assume it).

**Parameters per device** (Megatron-LM sharding): QKV/FC1 column-parallel, output/FC2
row-parallel, all split by t; norms and row-parallel biases replicated; the word embedding
and LM head vocabulary-parallel (V padded to a multiple of 128*t); learned position and
token-type embeddings replicated; a tied head holds no parameters of its own. MoE: the
router and shared experts are dense (shared experts split by t), each device holds E/e
routed experts (``expert_params``), each split by t. MLA: the down-projections and their
norms are replicated over t, the up-projections and the output projection split by heads.

**Activation memory** follows Korthikanti et al. 2022 (arXiv 2205.05198) Table 2: without
sequence parallelism s*b*h*(10 + 24/t + 5*a*s/(h*t)) bytes per GPT block (dropout, GeLU,
f = 4h, materialised attention), generalised term by term (GQA's narrower K and V, SwiGLU's
6*s*b*f, no dropout masks without dropout, MoE router, token copies and expert
intermediates, MLA's latent tensors); with ``sequence_parallel`` the replicated terms are
split by t too (s*b*h*(34 + 5*a*s/h)/t). Flash attention replaces the 5*a*s^2*b score bytes
by the 4*a*s*b log-sum-exp. ``ckpt_bytes`` (full recomputation) is the layer input.
Selective recomputation (``sel_fwd_s``, ``sel_act_bytes``, ``sel_flops``) reruns the
attention core alone and keeps everything but the core's own stored tensors (the scores, or
the log-sum-exp); the embedding and the head have no core: nothing rerun, everything kept.

**Collectives per microbatch** (nest_cp.model.instance.Collective; volumes per device in bytes, the
full tensor for all-gather and reduce-scatter, as DESIGN §3 prices them): without sequence
parallelism a block all-reduces 2sbh twice forward and twice backward (t > 1); with it, each
all-reduce becomes an all-gather + reduce-scatter pair and the backward re-gathers the two
sequence-split GEMM inputs for their weight gradients (Megatron/TE keep the inputs sharded).
e > 1: all-to-all dispatch and combine of the 2*k*s*b*h routed token bytes, forward and
backward. Embedding: the vocabulary-parallel all-reduce (reduce-scatter with SP) forward;
head: the input-gradient all-reduce backward and the cross-entropy's three fp32 all-reduces
of 4sb forward (an all-gather of the input forward and a reduce-scatter backward with SP).

**SDP units** (DESIGN §7): a transformer block is maskable; at neuron level it has U width
slices, U = the kv-head groups on the device (kv_heads / t; heads / t for MLA), each holding
1/U of the attention heads and 1/U of the MLP (and expert) neurons. ``sdp_fraction`` is the
share of the block's parameters in those slices (all projection and MLP matrices and their
column biases; norms, router and row-parallel biases stay shared). Embedding and head: 0.

**Context parallelism** (c = ``cp`` > 1; docs/context-parallelism.md): a microbatch's b·s
tokens are split evenly over the c ranks (Megatron's 2c chunks, rank i keeping chunks i and
2c−1−i, which balances causal attention), so T = s·b/c and every token-proportional figure
(compute, act, ckpt, out, TP and EP collective bytes) is that of s·b/c tokens; the attention
core's FLOPs are the whole sequence's ÷ c (each rank's queries against every key), and its
kernel runs at length s/c under p2p (one K/V chunk per ring step) or s under a2a (all
tokens, heads/c).  The profiles carry ``attn_fwd_s`` / ``attn_bwd_s`` (the core's part of
the block's times; 0 for embedding and head) and ``cp_kv_bytes`` = the K and V one rank
holds, b·(s/c)·kv_heads_per_device·(qk_dim + v_dim)·2 bytes, or under a2a ``cp_a2a_bytes``
= its Q, K, V and attention output.  Only flash attention (Megatron's context parallelism
runs through fused attention kernels); s must be divisible by 2c (Megatron's slicing) and,
under a2a, heads/t and kv_heads/t by c (:func:`context_configs` drops the (t, c) pairs that
break it, with a note; :func:`profile_workload` refuses them).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

from nest_cp.model.errors import InstanceFormatError
from nest_cp.model.instance import (
    AttentionKind,
    Collective,
    CollectiveGroup,
    CollectiveKind,
    CpComm,
    IntraConfig,
    Layer,
    LayerProfile,
    MlpKind,
    NormKind,
    Phase,
    Workload,
)
from nest_cp.model.ticks import ceil_div
from nest_cp.profiles.kernels import (
    DeviceSpec,
    attention_seconds,
    causal_fraction,
    gemm_seconds,
    memory_seconds,
)
from nest_cp.profiles.transformer import (
    ModelKind,
    TransformerSpec,
    model_shape,
)

__all__ = ["AttentionKind", "MlpKind", "ModelKind", "NormKind", "ProfileOptions",
           "TransformerSpec", "profile_workload", "total_params"]

BF16_BYTES = 2
FP32_BYTES = 4
TOKEN_ID_BYTES = 4
FLASH_BACKWARD_FLOPS = 2.5  # FlashAttention: 5 matmuls backward (with recomputation) vs 2
LOGGER = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class ProfileOptions:
    """Instance choices of how the model runs: attention kernel, sequence parallelism and how
    context-parallel ranks exchange attention inputs (used only for c > 1)."""

    attention: AttentionKind = AttentionKind.FLASH
    sequence_parallel: bool = False
    cp_comm: CpComm = CpComm.P2P

    def __post_init__(self) -> None:
        if not isinstance(self.attention, AttentionKind):
            raise ValueError(f"expected an AttentionKind, got {self.attention!r}")
        if not isinstance(self.sequence_parallel, bool):
            raise ValueError(f"expected true or false, got {self.sequence_parallel!r}")
        if not isinstance(self.cp_comm, CpComm):
            raise ValueError(f"expected a CpComm, got {self.cp_comm!r}")


@dataclass(frozen=True, slots=True)
class _Op:
    """One op of a layer: times of its three passes, its model FLOPs and two tags."""

    name: str
    fwd_s: float
    dgrad_s: float
    wgrad_s: float
    flops: float
    core: bool = False  # the attention core: rerun by selective recomputation
    sliced: bool = False  # carried by the block's SDP width slices


@dataclass(frozen=True, slots=True)
class _Shape:
    """The sizes one profile is computed for."""

    spec: TransformerSpec
    seq_len: int
    microbatch: int
    config: IntraConfig
    options: ProfileOptions
    device: DeviceSpec

    @property
    def tokens(self) -> int:
        """Tokens of one microbatch on one device: s·b, or s·b/c with context parallelism."""
        return self.local_seq * self.microbatch

    @property
    def local_seq(self) -> int:
        """s/c: the sequence positions one context rank holds (s when c = 1)."""
        return self.seq_len // self.config.cp

    @property
    def tp(self) -> int:
        return self.config.tp

    @property
    def sp(self) -> bool:
        """Sequence parallelism in effect (only meaningful with t > 1)."""
        return self.options.sequence_parallel and self.tp > 1

    @property
    def shard_tokens(self) -> int:
        """Tokens a replicated op (norm, residual, dropout) handles: T, or T/t with SP."""
        return ceil_div(self.tokens, self.tp) if self.sp else self.tokens

    @property
    def routed_tokens(self) -> int:
        return self.spec.top_k * self.tokens

    @property
    def activation(self) -> int:
        """2sbh: one bf16 activation of the hidden width."""
        return BF16_BYTES * self.tokens * self.spec.hidden

    @property
    def shard_activation(self) -> int:
        """2sbh, or its sequence-parallel shard."""
        return BF16_BYTES * self.shard_tokens * self.spec.hidden


# ------------------------------------------------------------------ op builders


def _linear(shape: _Shape, name: str, tokens: int, fan_in: int, fan_out: int,
            sliced: bool = True, batch: int = 1) -> _Op:
    """``batch`` linear layers y = x W, x: tokens x fan_in, W: fan_in x fan_out (per device)."""
    device = shape.device
    return _Op(name,
               fwd_s=gemm_seconds(device, tokens, fan_out, fan_in, batch),
               dgrad_s=gemm_seconds(device, tokens, fan_in, fan_out, batch),
               wgrad_s=gemm_seconds(device, fan_in, fan_out, tokens, batch),
               flops=2.0 * tokens * fan_in * fan_out * batch, sliced=sliced)


def _memory(shape: _Shape, name: str, fwd_bytes: int, bwd_bytes: int, sliced: bool = False,
            core: bool = False) -> _Op:
    device = shape.device
    return _Op(name, memory_seconds(device, fwd_bytes), memory_seconds(device, bwd_bytes), 0.0,
               0.0, core=core, sliced=sliced)


def _norm(shape: _Shape, name: str, width: int, tokens: int | None = None) -> _Op:
    """A norm over ``width`` features: forward reads x, writes y; backward reads dy, x."""
    tokens = shape.shard_tokens if tokens is None else tokens
    size = BF16_BYTES * tokens * width
    return _memory(shape, name, 2 * size, 3 * size)


def _residual(shape: _Shape, name: str) -> _Op:
    """(Bias-)dropout-add: reads branch and residual, writes the sum (and a 1-byte mask)."""
    size, mask = shape.shard_activation, (shape.shard_tokens * shape.spec.hidden
                                          if shape.spec.dropout else 0)
    return _memory(shape, name, 3 * size + mask, 3 * size + mask)


def _activation_fn(shape: _Shape, tokens: int, width: int, batch: int = 1) -> _Op:
    """GeLU (read x, write y; backward read dy, x, write dx) or SwiGLU (two inputs)."""
    inputs = 2 if shape.spec.gated_mlp else 1
    size = BF16_BYTES * tokens * width * batch
    return _memory(shape, "activation", (inputs + 1) * size, (2 * inputs + 2) * size, sliced=True)


# ------------------------------------------------------------------ attention


@dataclass(frozen=True, slots=True)
class _Heads:
    """Attention widths on one device."""

    heads: int  # query heads per device
    qk_dim: int  # per head
    v_dim: int  # per head
    kv_heads: int  # key/value heads per device (query heads for MLA)

    @property
    def q_width(self) -> int:
        return self.heads * self.qk_dim

    @property
    def out_width(self) -> int:
        return self.heads * self.v_dim


def _heads(shape: _Shape) -> _Heads:
    spec, tp = shape.spec, shape.tp
    latent = spec.latent_attention
    if latent is not None:
        heads = spec.num_heads // tp
        return _Heads(heads, latent.qk_head_dim, latent.v_head_dim, heads)
    return _Heads(spec.num_heads // tp, spec.head_size, spec.head_size, spec.kv_heads // tp)


def _core_model_flops(shape: _Shape, heads: _Heads) -> float:
    """QK^T and AV over the full s x s square for b samples (model FLOPs); with context
    parallelism a rank's s/c queries against all s keys, the square ÷ c."""
    return 2.0 * shape.microbatch * (shape.local_seq * shape.seq_len) * heads.heads * (
        heads.qk_dim + heads.v_dim)  # the integer product is s**2 at c = 1, as before


def _attention_core(shape: _Shape, heads: _Heads) -> list[_Op]:
    spec, seq, device = shape.spec, shape.seq_len, shape.device
    model_flops = _core_model_flops(shape, heads)
    if shape.options.attention is AttentionKind.FLASH:
        executed = model_flops * (causal_fraction(seq) if spec.causal else 1.0)
        # the kernel's length: a ring step's s/c queries and keys under p2p, else s
        length = shape.local_seq if shape.options.cp_comm is CpComm.P2P else seq
        return [_Op("attention", attention_seconds(device, executed, length, backward=False),
                    attention_seconds(device, FLASH_BACKWARD_FLOPS * executed, length,
                                      backward=True),
                    0.0, model_flops, core=True, sliced=True)]
    batch = shape.microbatch * heads.heads
    scores = heads.heads * seq * shape.tokens  # s x s entries per head and sample
    qk = _Op("scores", gemm_seconds(device, seq, seq, heads.qk_dim, batch),
             2 * gemm_seconds(device, seq, heads.qk_dim, seq, batch), 0.0,
             2.0 * seq * seq * heads.qk_dim * batch, core=True, sliced=True)
    softmax = _memory(shape, "softmax", 2 * BF16_BYTES * scores, 3 * BF16_BYTES * scores,
                      sliced=True, core=True)
    ops = [qk, softmax]
    if spec.dropout:
        ops.append(_memory(shape, "attention dropout", 5 * scores, 5 * scores, sliced=True,
                           core=True))
    ops.append(_Op("context", gemm_seconds(device, seq, heads.v_dim, seq, batch),
                   gemm_seconds(device, seq, seq, heads.v_dim, batch)
                   + gemm_seconds(device, seq, heads.v_dim, seq, batch), 0.0,
                   2.0 * seq * seq * heads.v_dim * batch, core=True, sliced=True))
    return ops


def _attention_ops(shape: _Shape) -> list[_Op]:
    spec, tokens = shape.spec, shape.tokens
    heads = _heads(shape)
    latent = spec.latent_attention
    ops: list[_Op] = []
    if latent is None:
        width = heads.q_width + 2 * heads.kv_heads * heads.qk_dim
        ops.append(_linear(shape, "qkv", tokens, spec.hidden, width))
        if not spec.learned_positions:
            rotated = BF16_BYTES * tokens * (heads.q_width + heads.kv_heads * heads.qk_dim)
            ops.append(_memory(shape, "rotary", 2 * rotated, 2 * rotated, sliced=True))
    else:
        if latent.q_lora_rank:
            ops += [_linear(shape, "q down", tokens, spec.hidden, latent.q_lora_rank, False),
                    _norm(shape, "q norm", latent.q_lora_rank, tokens),
                    _linear(shape, "q up", tokens, latent.q_lora_rank, heads.q_width)]
        else:
            ops.append(_linear(shape, "q", tokens, spec.hidden, heads.q_width))
        kv_down = latent.kv_lora_rank + latent.qk_rope_head_dim
        kv_up = heads.heads * (latent.qk_nope_head_dim + latent.v_head_dim)
        rotated = BF16_BYTES * tokens * (heads.heads + 1) * latent.qk_rope_head_dim
        ops += [_linear(shape, "kv down", tokens, spec.hidden, kv_down, False),
                _norm(shape, "kv norm", latent.kv_lora_rank, tokens),
                _linear(shape, "kv up", tokens, latent.kv_lora_rank, kv_up),
                _memory(shape, "rotary", 2 * rotated, 2 * rotated, sliced=True)]
    ops += _attention_core(shape, heads)
    ops.append(_linear(shape, "proj", tokens, heads.out_width, spec.hidden))
    return ops


def _mlp_ops(shape: _Shape, tokens: int, width: int, name: str, batch: int = 1) -> list[_Op]:
    """The MLP (or ``batch`` grouped experts, ``tokens`` each) of per-device width ``width``."""
    spec = shape.spec
    inner = (2 if spec.gated_mlp else 1) * width
    return [_linear(shape, f"{name} fc1", tokens, spec.hidden, inner, batch=batch),
            _activation_fn(shape, tokens, width, batch),
            _linear(shape, f"{name} fc2", tokens, width, spec.hidden, batch=batch)]


def _moe_ops(shape: _Shape) -> list[_Op]:
    spec, tp = shape.spec, shape.tp
    local = spec.num_experts // shape.config.ep
    per_expert = ceil_div(shape.routed_tokens, local)
    copies = BF16_BYTES * shape.routed_tokens * spec.hidden
    ops = [_linear(shape, "router", shape.shard_tokens, spec.hidden, spec.num_experts, False),
           _memory(shape, "permute", 4 * copies, 4 * copies)]
    ops += _mlp_ops(shape, per_expert, ceil_div(spec.expert_width, tp), "expert", local)
    if spec.shared_experts:
        ops += _mlp_ops(shape, shape.tokens, ceil_div(spec.shared_experts * spec.expert_width,
                                                      tp), "shared")
    return ops


def _block_ops(shape: _Shape, moe: bool) -> list[_Op]:
    ops = [_norm(shape, "norm1", shape.spec.hidden), *_attention_ops(shape),
           _residual(shape, "residual1"), _norm(shape, "norm2", shape.spec.hidden)]
    if moe:
        ops += _moe_ops(shape)
    else:
        ops += _mlp_ops(shape, shape.tokens, ceil_div(shape.spec.ffn_hidden, shape.tp), "mlp")
    return ops + [_residual(shape, "residual2")]


def _embedding_ops(shape: _Shape) -> list[_Op]:
    """Gather (and add positions / token types), dropout; backward: scatter-add (wgrad)."""
    spec, size = shape.spec, shape.activation
    tables = 1 + (1 if spec.learned_positions else 0) + (1 if spec.token_types else 0)
    fwd = TOKEN_ID_BYTES * shape.tokens + tables * 2 * size + (size // 2 if spec.dropout else 0)
    if spec.kind is ModelKind.ENCODER:
        fwd += 2 * size
    scatter = tables * (size + 2 * 2 * size)  # read dy; read and write fp32 gradient rows
    device = shape.device
    return [_Op("embedding", memory_seconds(device, fwd), 0.0, memory_seconds(device, scatter),
                0.0)]


def _head_ops(shape: _Shape) -> list[_Op]:
    spec, tokens, tp = shape.spec, shape.tokens, shape.tp
    vocab = spec.vocab_shard(tp)
    logits = BF16_BYTES * tokens * vocab
    # vocabulary-parallel cross-entropy in fp32: cast (read 2, write 4), max (read 4),
    # exp and sum (read 4, write 4) forward; softmax - one-hot (read 4, write 4) and the cast
    # back for the GEMM (read 4, write 2) backward: 18 and 14 bytes per logit.
    cross_entropy = _memory(shape, "cross-entropy", 9 * logits, 7 * logits)
    head = [_linear(shape, "logits", tokens, spec.hidden, vocab, False), cross_entropy]
    if spec.kind is ModelKind.DECODER:
        return [_norm(shape, "final norm", spec.hidden), *head]
    return [_linear(shape, "mlm transform", tokens, spec.hidden, spec.hidden, False),
            _memory(shape, "mlm gelu and norm", 4 * shape.activation, 5 * shape.activation),
            _linear(shape, "pooler", shape.microbatch, spec.hidden, spec.hidden, False), *head]


# ------------------------------------------------------------------ parameters


def _mlp_params(spec: TransformerSpec, width: int, tp: int) -> tuple[int, int]:
    """(sliced, replicated) parameters of one MLP of width ``width``, split by t."""
    matrices = ceil_div(spec.mlp_matrices * spec.hidden * width, tp)
    column_biases = ceil_div((spec.mlp_matrices - 1) * width, tp) if spec.bias else 0
    return matrices + column_biases, spec.hidden if spec.bias else 0


def _attention_params(spec: TransformerSpec, tp: int) -> tuple[int, int]:
    """(sliced, replicated) attention parameters per device."""
    latent = spec.latent_attention
    out_bias = spec.hidden if spec.bias else 0
    if latent is not None:
        heads = spec.num_heads
        if latent.q_lora_rank:
            replicated = spec.hidden * latent.q_lora_rank + latent.q_lora_rank
            q_up = latent.q_lora_rank * heads * latent.qk_head_dim
        else:
            replicated, q_up = 0, spec.hidden * heads * latent.qk_head_dim
        replicated += spec.hidden * (latent.kv_lora_rank + latent.qk_rope_head_dim) \
            + latent.kv_lora_rank
        kv_up = latent.kv_lora_rank * heads * (latent.qk_nope_head_dim + latent.v_head_dim)
        out = heads * latent.v_head_dim * spec.hidden
        return ceil_div(q_up + kv_up + out, tp), replicated + out_bias
    qkv_width = spec.q_hidden + 2 * spec.kv_hidden
    sliced = ceil_div(spec.hidden * qkv_width + spec.q_hidden * spec.hidden, tp)
    if spec.bias or spec.qkv_bias:
        sliced += ceil_div(qkv_width, tp)
    return sliced, out_bias


def _block_params(spec: TransformerSpec, config: IntraConfig,
                  moe: bool) -> tuple[int, int, int]:
    """(dense, expert, sliced) parameters of one block on one device."""
    tp = config.tp
    attn_sliced, attn_rep = _attention_params(spec, tp)
    dense = attn_sliced + attn_rep + 2 * spec.norm_params
    if not moe:
        mlp_sliced, mlp_rep = _mlp_params(spec, spec.ffn_hidden, tp)
        return dense + mlp_sliced + mlp_rep, 0, attn_sliced + mlp_sliced
    router = spec.hidden * spec.num_experts
    shared_sliced, shared_rep = (_mlp_params(spec, spec.shared_experts * spec.expert_width, tp)
                                 if spec.shared_experts else (0, 0))
    expert_sliced, expert_rep = _mlp_params(spec, spec.expert_width, tp)
    experts = (spec.num_experts // config.ep) * (expert_sliced + expert_rep)
    sliced = attn_sliced + shared_sliced + (spec.num_experts // config.ep) * expert_sliced
    return dense + router + shared_sliced + shared_rep, experts, sliced


def _embedding_params(spec: TransformerSpec, tp: int) -> int:
    words = spec.vocab_shard(tp) * spec.hidden
    positions = (spec.learned_positions + spec.token_types) * spec.hidden
    norm = spec.norm_params if spec.kind is ModelKind.ENCODER else 0
    return words + positions + norm


def _head_params(spec: TransformerSpec, tp: int) -> int:
    """Final norm and LM head (decoder) or pooler, MLM transform and decoder bias (encoder)."""
    lm_head = 0 if spec.tied_embeddings else spec.vocab_shard(tp) * spec.hidden
    if spec.kind is ModelKind.DECODER:
        return spec.norm_params + lm_head
    dense = spec.hidden * spec.hidden + (spec.hidden if spec.bias else 0)
    decoder_bias = spec.vocab_shard(tp) if spec.bias else 0
    return 2 * dense + spec.norm_params + lm_head + decoder_bias


# ------------------------------------------------------------------ activations


def _split(shape: _Shape, replicated: int) -> int:
    """Bytes of a tensor replicated over t, or its share under sequence parallelism."""
    return ceil_div(replicated, shape.tp) if shape.sp else replicated


def _mask(shape: _Shape) -> int:
    """A 1-byte dropout mask of the hidden width (0 without dropout)."""
    return shape.tokens * shape.spec.hidden if shape.spec.dropout else 0


def _core_act_bytes(shape: _Shape, heads: _Heads) -> int:
    """What the attention core alone keeps: scores (materialised) or log-sum-exp (flash)."""
    if shape.options.attention is AttentionKind.FLASH:
        return FP32_BYTES * heads.heads * shape.tokens
    per_entry = 5 if shape.spec.dropout else 2  # softmax out (+ mask + dropped-out probs)
    return per_entry * heads.heads * shape.seq_len * shape.tokens


def _attention_act_bytes(shape: _Shape) -> int:
    """Korthikanti Table 2 attention terms (without the norm input), generalised."""
    spec, tokens = shape.spec, shape.tokens
    heads = _heads(shape)
    latent = spec.latent_attention
    replicated = _split(shape, shape.activation + _mask(shape))  # QKV input, dropout mask
    q = BF16_BYTES * tokens * heads.q_width
    k = BF16_BYTES * tokens * heads.kv_heads * heads.qk_dim
    v = BF16_BYTES * tokens * heads.kv_heads * heads.v_dim
    out = BF16_BYTES * tokens * heads.out_width
    kept = replicated + q + k + v + out + _core_act_bytes(shape, heads)
    if latent is not None:  # latent tensors: inputs of the two norms and two up-projections
        kept += 2 * BF16_BYTES * tokens * (latent.q_lora_rank + latent.kv_lora_rank) \
            + BF16_BYTES * tokens * latent.qk_rope_head_dim
    return kept


def _mlp_act_bytes(shape: _Shape, moe: bool) -> int:
    """MLP (or MoE) terms, including the MLP input and dropout mask."""
    spec, tokens, tp = shape.spec, shape.tokens, shape.tp
    replicated = _split(shape, shape.activation + _mask(shape))
    per_token = (6 if spec.gated_mlp else 4)  # intermediates kept, bytes per neuron
    if not moe:
        return replicated + ceil_div(per_token * tokens * spec.ffn_hidden, tp)
    routed = shape.routed_tokens
    router = 2 * FP32_BYTES * shape.shard_tokens * spec.num_experts  # logits, probabilities
    copies = 2 * BF16_BYTES * routed * spec.hidden  # expert inputs and outputs
    experts = ceil_div(per_token * routed * spec.expert_width, tp)
    shared = ceil_div(per_token * tokens * spec.shared_experts * spec.expert_width, tp)
    return replicated + router + copies + experts + shared


def _block_act_bytes(shape: _Shape, moe: bool) -> int:
    norm_inputs = _split(shape, 2 * shape.activation)
    return norm_inputs + _attention_act_bytes(shape) + _mlp_act_bytes(shape, moe)


def _embedding_act_bytes(shape: _Shape) -> int:
    """Token ids, the dropout mask and (encoder) the embedding norm's input."""
    norm_input = shape.activation if shape.spec.kind is ModelKind.ENCODER else 0
    return TOKEN_ID_BYTES * shape.tokens + _split(shape, _mask(shape) + norm_input)


def _head_act_bytes(shape: _Shape) -> int:
    """Inputs of the head's norms and GEMMs (2sbh each) and the fp32 logits 4sbV/t."""
    inputs = 2 if shape.spec.kind is ModelKind.DECODER else 4  # + MLM transform and its norm
    logits = FP32_BYTES * shape.tokens * shape.spec.vocab_shard(shape.tp)
    return _split(shape, shape.activation) + (inputs - 1) * shape.activation + logits


# ------------------------------------------------------------------ collectives


def _tp_pair(shape: _Shape, phase: Phase, gather_first: bool) -> list[Collective]:
    """One TP all-reduce of 2sbh, or (SP) an all-gather and a reduce-scatter of it."""
    volume = shape.activation
    if not shape.sp:
        return [Collective(CollectiveKind.ALL_REDUCE, volume, CollectiveGroup.TP, phase)]
    kinds = (CollectiveKind.ALL_GATHER, CollectiveKind.REDUCE_SCATTER)
    return [Collective(kind, volume, CollectiveGroup.TP, phase)
            for kind in (kinds if gather_first else kinds[::-1])]


def _block_collectives(shape: _Shape, moe: bool) -> tuple[Collective, ...]:
    found: list[Collective] = []
    if shape.tp > 1:
        for _ in range(2):  # attention, MLP
            found += _tp_pair(shape, Phase.FWD, gather_first=True)
            found += _tp_pair(shape, Phase.BWD, gather_first=False)
        if shape.sp:  # weight-gradient re-gathers of the QKV and FC1 inputs
            found += [Collective(CollectiveKind.ALL_GATHER, shape.activation, CollectiveGroup.TP,
                                 Phase.BWD)] * 2
    if moe and shape.config.ep > 1:
        volume = BF16_BYTES * shape.routed_tokens * shape.spec.hidden
        for phase in (Phase.FWD, Phase.FWD, Phase.BWD, Phase.BWD):
            found.append(Collective(CollectiveKind.ALL_TO_ALL, volume, CollectiveGroup.EP,
                                    phase))
    return tuple(found)


def _embedding_collectives(shape: _Shape) -> tuple[Collective, ...]:
    if shape.tp == 1:
        return ()
    if shape.sp:
        return (Collective(CollectiveKind.REDUCE_SCATTER, shape.activation, CollectiveGroup.TP,
                           Phase.FWD),
                Collective(CollectiveKind.ALL_GATHER, shape.activation, CollectiveGroup.TP,
                           Phase.BWD))
    return (Collective(CollectiveKind.ALL_REDUCE, shape.activation, CollectiveGroup.TP,
                       Phase.FWD),)


def _head_collectives(shape: _Shape) -> tuple[Collective, ...]:
    if shape.tp == 1:
        return ()
    statistics = Collective(CollectiveKind.ALL_REDUCE, FP32_BYTES * shape.tokens,
                            CollectiveGroup.TP, Phase.FWD)
    if shape.sp:
        gather = Collective(CollectiveKind.ALL_GATHER, shape.activation, CollectiveGroup.TP,
                            Phase.FWD)
        backward = (Collective(CollectiveKind.REDUCE_SCATTER, shape.activation,
                               CollectiveGroup.TP, Phase.BWD),
                    Collective(CollectiveKind.ALL_GATHER, shape.activation, CollectiveGroup.TP,
                               Phase.BWD))
        return (gather, statistics, statistics, statistics, *backward)
    input_grad = Collective(CollectiveKind.ALL_REDUCE, shape.activation, CollectiveGroup.TP,
                            Phase.BWD)
    return (statistics, statistics, statistics, input_grad)


# ------------------------------------------------------------------ profiles


def _launched(shape: _Shape, ops: Sequence[_Op],
              collectives: Sequence[Collective]) -> list[_Op]:
    """The ops with the device's fixed time per kernel (``kernel_fixed_s``) added to every
    pass that launches one (forward, data gradient, weight gradient with work to do), and
    one more op for the launches of the layer's collective kernels (their transfer time is
    the cost model's; their launch is compute-stream time like any kernel's)."""
    gap = shape.device.kernel_fixed_s
    if not gap:
        return list(ops)
    launched = [replace(op, fwd_s=max(op.fwd_s, gap) if op.fwd_s > 0 else 0.0,
                        dgrad_s=max(op.dgrad_s, gap) if op.dgrad_s > 0 else 0.0,
                        wgrad_s=max(op.wgrad_s, gap) if op.wgrad_s > 0 else 0.0)
                for op in ops]
    forward = sum(c.phase is Phase.FWD for c in collectives)
    backward = len(collectives) - forward
    if collectives:
        launched.append(_Op("collective launches", gap * forward, gap * backward, 0.0, 0.0))
    return launched


def _profile(ops: Sequence[_Op], params: tuple[int, int], act: int, ckpt: int, out: int,
             collectives: tuple[Collective, ...], selective: int | None = None,
             sdp: tuple[int, float] = (0, 0.0),
             context: dict[str, int] | None = None) -> LayerProfile:
    """Sum the ops; ``selective`` is the core's kept bytes (None: no selective recompute);
    ``context`` the context-parallel volumes of a profile with c > 1 (None: c = 1)."""
    fwd = math.fsum(op.fwd_s for op in ops)
    wgrad = math.fsum(op.wgrad_s for op in ops)
    bwd = math.fsum(op.dgrad_s for op in ops) + wgrad
    fields = {}
    core = [op for op in ops if op.core]
    if selective is not None:
        fields = {"sel_fwd_s": min(fwd, math.fsum(op.fwd_s for op in core)),
                  "sel_act_bytes": act - selective,
                  "sel_flops": math.fsum(op.flops for op in core)}
    if context is not None:
        fields |= context | {
            "attn_fwd_s": min(fwd, math.fsum(op.fwd_s for op in core)),
            "attn_bwd_s": min(bwd, math.fsum(op.dgrad_s + op.wgrad_s for op in core))}
    return LayerProfile(fwd_s=fwd, bwd_s=bwd, wgrad_s=min(wgrad, bwd), dense_params=params[0],
                        expert_params=params[1], act_bytes=act, ckpt_bytes=ckpt, out_bytes=out,
                        collectives=collectives, flops=math.fsum(op.flops for op in ops),
                        sdp_units=sdp[0], sdp_fraction=sdp[1], **fields)


def _context_volumes(shape: _Shape, attention: bool) -> dict[str, int] | None:
    """``cp_kv_bytes`` (p2p) or ``cp_a2a_bytes`` (a2a) of one rank and microbatch for c > 1
    (0 for a layer without attention); None for c = 1."""
    if shape.config.cp == 1:
        return None
    if not attention:
        return {"cp_kv_bytes": 0, "cp_a2a_bytes": 0}
    heads = _heads(shape)
    kv = BF16_BYTES * shape.tokens * heads.kv_heads * (heads.qk_dim + heads.v_dim)
    if shape.options.cp_comm is CpComm.P2P:
        return {"cp_kv_bytes": kv, "cp_a2a_bytes": 0}
    q_out = BF16_BYTES * shape.tokens * (heads.q_width + heads.out_width)
    return {"cp_kv_bytes": 0, "cp_a2a_bytes": kv + q_out}


def _embedding_profile(shape: _Shape) -> LayerProfile:
    collectives = _embedding_collectives(shape)
    return _profile(_launched(shape, _embedding_ops(shape), collectives),
                    (_embedding_params(shape.spec, shape.tp), 0),
                    _embedding_act_bytes(shape), TOKEN_ID_BYTES * shape.tokens,
                    shape.shard_activation, collectives, selective=0,
                    context=_context_volumes(shape, attention=False))


def _block_profile(shape: _Shape, moe: bool) -> LayerProfile:
    dense, expert, sliced = _block_params(shape.spec, shape.config, moe)
    units = max(1, _heads(shape).kv_heads)
    fraction = min(1.0, sliced / (dense + expert)) if dense + expert else 0.0
    collectives = _block_collectives(shape, moe)
    return _profile(_launched(shape, _block_ops(shape, moe), collectives), (dense, expert),
                    _block_act_bytes(shape, moe), shape.shard_activation,
                    shape.shard_activation, collectives,
                    selective=_core_act_bytes(shape, _heads(shape)), sdp=(units, fraction),
                    context=_context_volumes(shape, attention=True))


def _head_profile(shape: _Shape) -> LayerProfile:
    collectives = _head_collectives(shape)
    return _profile(_launched(shape, _head_ops(shape), collectives),
                    (_head_params(shape.spec, shape.tp), 0),
                    _head_act_bytes(shape), shape.shard_activation, FP32_BYTES,
                    collectives, selective=0, context=_context_volumes(shape, attention=False))


def _a2a_splits(spec: TransformerSpec, config: IntraConfig) -> bool:
    """Whether a2a can split a tensor rank's heads and kv heads over the c context ranks."""
    heads = (spec.num_heads if spec.latent_attention is not None else spec.kv_heads)
    return (spec.num_heads // config.tp) % config.cp == 0 \
        and (heads // config.tp) % config.cp == 0


def context_problem(spec: TransformerSpec, seq_len: int, config: IntraConfig,
                    options: ProfileOptions) -> tuple[str, str] | None:
    """(field, what was expected) when ``config``'s context width c cannot run ``spec`` at
    ``seq_len``, else None: Megatron slices the sequence into 2c chunks (s divisible by 2c),
    runs context parallelism through fused (flash) attention, and under a2a splits the
    heads of each tensor rank over the c ranks (heads/t and kv_heads/t divisible by c)."""
    cp = config.cp
    if cp == 1:
        return None
    if seq_len % (2 * cp):
        return ("training.context_parallel",
                f"a context width c with the sequence length {seq_len} divisible by 2c "
                f"(Megatron's 2c chunks), got c = {cp}")
    if options.attention is not AttentionKind.FLASH:
        return ("attention", f"flash attention with context width c = {cp} (context "
                             f"parallelism runs through fused attention kernels)")
    if options.cp_comm is CpComm.A2A and not _a2a_splits(spec, config):
        return ("training.context_parallel",
                f"under cp_comm 'a2a' the heads and kv heads of a tensor rank (tp = "
                f"{config.tp}) divisible by the context width c, got c = {cp}")
    return None


def context_configs(spec: TransformerSpec, configs: Sequence[IntraConfig],
                    options: ProfileOptions) -> tuple[IntraConfig, ...]:
    """``configs`` without the (t, c) pairs a2a cannot split (heads/t or kv_heads/t not
    divisible by c), each dropped with a logged note; every other problem of
    :func:`context_problem` is left for :func:`profile_workload` to refuse."""
    kept = []
    for config in configs:
        if config.cp > 1 and options.cp_comm is CpComm.A2A and not _a2a_splits(spec, config):
            LOGGER.warning("%s: dropped tp=%d with cp=%d under a2a (the heads of a tensor rank "
                           "do not split over %d context ranks)", spec.name, config.tp,
                           config.cp, config.cp)
            continue
        kept.append(config)
    return tuple(kept)


def _validate_config(spec: TransformerSpec, config: IntraConfig) -> None:
    heads = spec.num_heads if spec.latent_attention is not None else spec.kv_heads
    if heads % config.tp != 0:
        kind = "heads" if spec.latent_attention is not None else "kv heads"
        raise InstanceFormatError(
            f"expected a tensor width dividing the {heads} {kind} of {spec.name}, "
            f"got {config.tp}", field="tp")
    if spec.num_experts % config.ep != 0:
        raise InstanceFormatError(
            f"expected an expert width dividing the {spec.num_experts} experts of {spec.name}, "
            f"got {config.ep}", field="ep")


def _validate_sizes(spec: TransformerSpec, seq_len: int, microbatches: Sequence[int],
                    configs: Sequence[IntraConfig]) -> None:
    if not (isinstance(seq_len, int) and seq_len >= 1):
        raise InstanceFormatError(f"expected an integer >= 1, got {seq_len!r}", field="seq_len")
    if spec.learned_positions and seq_len > spec.learned_positions:
        raise InstanceFormatError(f"expected at most the {spec.learned_positions} learned "
                                  f"positions of {spec.name}, got {seq_len}", field="seq_len")
    if not configs:
        raise InstanceFormatError("expected at least one (tp, ep) configuration, got none",
                                  field="configs")
    if not microbatches or any(not isinstance(b, int) or b < 1 for b in microbatches):
        raise InstanceFormatError(f"expected microbatch sizes >= 1, got {list(microbatches)}",
                                  field="microbatches")
    for config in configs:
        _validate_config(spec, config)


def _validate_context(spec: TransformerSpec, seq_len: int, configs: Sequence[IntraConfig],
                      options: ProfileOptions) -> None:
    for config in configs:
        problem = context_problem(spec, seq_len, config, options)
        if problem is not None:
            raise InstanceFormatError(f"expected {problem[1]}", field=problem[0])


def profile_workload(spec: TransformerSpec, device: DeviceSpec, seq_len: int,
                     microbatches: Sequence[int], configs: Sequence[IntraConfig],
                     options: ProfileOptions | None = None) -> Workload:
    """The chain embedding, num_layers blocks, head, profiled for every (config, microbatch).

    Raises InstanceFormatError (field ``tp``/``ep``/``microbatches``/``seq_len``/``configs``)
    for a tensor width that does not divide the kv heads (Megatron's GQA; no KV replication),
    an expert width that does not divide the experts (only 1 for dense models), a sequence
    longer than the learned positions, no configuration, or non-positive sizes; and (field
    ``context_parallel``/``attention``) for a context width :func:`context_problem` rejects.
    """
    options = options or ProfileOptions()
    _validate_sizes(spec, seq_len, microbatches, configs)
    _validate_context(spec, seq_len, configs, options)
    embedding, dense_block, moe_block, head = {}, {}, {}, {}
    for config in configs:
        for microbatch in sorted(set(microbatches)):
            shape = _Shape(spec, seq_len, microbatch, config, options, device)
            key = (config, microbatch)
            embedding[key] = _embedding_profile(shape)
            dense_block[key] = _block_profile(shape, moe=False)
            if spec.is_moe:
                moe_block[key] = _block_profile(shape, moe=True)
            head[key] = _head_profile(shape)
    blocks = tuple(Layer(f"block.{index}",
                         moe_block if spec.is_moe_layer(index) else dense_block)
                   for index in range(spec.num_layers))
    return Workload(name=spec.name, layers=(Layer("embedding", embedding), *blocks,
                                            Layer("head", head)),
                    attention=options.attention, sequence_parallel=options.sequence_parallel,
                    heads=spec.num_heads,
                    kv_heads=spec.num_heads if spec.latent_attention is not None
                    else spec.kv_heads, model=model_shape(spec))


def total_params(workload: Workload, config: IntraConfig | None = None,
                 microbatch: int | None = None) -> int:
    """Parameters held per device summed over every layer (default: tp = ep = 1, first b)."""
    config = config or IntraConfig()
    microbatch = microbatch or workload.microbatches(config)[0]
    return sum(layer.profile(config, microbatch).params for layer in workload.layers)
