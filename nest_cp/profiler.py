"""Analytic per-layer profiles of transformer models (DESIGN §1.1, source (a)).

``profile_workload(spec, device, seq_len, microbatches, configs)`` turns public model
hyperparameters (:class:`TransformerSpec`) and a device (:class:`DeviceSpec`) into the
layer chain ``embedding, block.0 .. block.{L-1}, head`` with one
:class:`~nest_cp.model.LayerProfile` per (IntraConfig(tp, ep), microbatch b).
Notation below: s sequence length, b microbatch, h hidden, f FFN hidden, a heads,
h_kv = kv_heads * h / a (GQA), V vocabulary, E experts, k top-k, t = tp, e = ep,
T = s*b tokens of one device, R = k*T expert-token copies of one device.

**Parameters per device** (Megatron-LM sharding, Shoeybi et al. 2019): the attention
matrices (QKV column-parallel, output row-parallel) and the MLP matrices are split by t,
as are the biases of column-parallel layers; norms and row-parallel biases are replicated.
The word embedding and the LM head are vocabulary-parallel (split by t, V padded to a multiple
of 128*t as Megatron's ``make-vocab-size-divisible-by`` does); learned position
and token-type embeddings are replicated. A tied LM head holds no parameters of its own
(the word embedding is counted once; the copy Megatron keeps on the last pipeline stage and
its gradient all-reduce are not modelled). MoE: the router is dense (replicated); each device
holds E/e experts (``expert_params``), each expert's matrices split by t.

**Compute** (roofline per op group): time = max(FLOPs / (peak * efficiency), bytes moved /
memory bandwidth) — the efficiency derates FLOP/s only — summed over the groups of a layer:
GEMMs (weights, inputs and outputs moved once), the attention core (QK^T and AV, 4*b*s^2*h/t
FLOPs, full s^2 even for causal models as in the usual model-FLOPs count; the s^2 scores cross
memory about four times: written, read and written by softmax, read by AV — no flash
attention), and the memory-bound element-wise ops (norms, residual adds, activation, embedding
gather, cross-entropy). Backward (data + weight gradients) is twice the forward for every
group, both in FLOPs and in bytes moved. ``flops`` is the model FLOPs of one microbatch's
forward on the device (GEMM and attention FLOPs; DESIGN §1.1). Under expert parallelism every
device runs its dense layers for b samples and, with balanced routing, its E/e experts
receive R = k*s*b tokens (the e ranks together process b*e samples and send k*s*b*e token
copies to E experts).

**Activation memory** follows Korthikanti et al. 2022, "Reducing Activation Recomputation in
Large Transformer Models" (arXiv 2205.05198), §4.1 and Table 2, the *tensor parallelism
without sequence parallelism* row: s*b*h*(10 + 24/t + 5*a*s/(h*t)) bytes per block (16-bit
activations, 1-byte dropout masks). Its terms, kept separately so they adapt:

- replicated over t: the inputs of the two norms (4sbh), of the QKV GEMM (2sbh) and of the
  MLP (2sbh), and the two dropout masks (2sbh, only for models trained with dropout);
- split by t: Q, K, V (2sbh + 4*s*b*h_kv: GQA keeps narrower K and V) and the output
  projection input (2sbh); the scores: softmax output 2*a*s^2*b, plus with dropout its mask
  a*s^2*b and the dropped-out probabilities 2*a*s^2*b (hence 5*a*s^2*b, or 2*a*s^2*b without
  dropout);
- MLP, split by t: 4*s*b*f for GeLU (activation input, second GEMM input; 16sbh at f = 4h),
  6*s*b*f for SwiGLU (gate and up outputs and their product);
- MoE instead of the MLP: router logits and probabilities in fp32 (8*s*b*E), the routed
  token copies (2Rh, input of the expert GEMMs), the expert intermediates (6Rf/t gated or
  4Rf/t) and the expert outputs kept for the weighted combine (2Rh).

With t = 1, dropout, GeLU, f = 4h and h_kv = h this is exactly 34*s*b*h + 5*a*s^2*b. The
embedding keeps the token ids (4sb, int32), its dropout mask (sbh) and, for BERT, its norm's
input (2sbh); the head keeps the inputs of its norm(s) and GEMMs and the fp32 logits of the
cross-entropy 4*s*b*V/t (Korthikanti §4.1). ``ckpt_bytes`` (recomputation) is the layer
input: 2sbh (token ids for the embedding).
``out_bytes`` is the layer output 2sbh (bf16); the head's output is the fp32 loss (4 bytes).

**Collectives per microbatch** (volumes per device, bytes; nest_cp.model.Collective):

- block, t > 1: Megatron's two all-reduces of 2sbh in forward (after attention and MLP) and
  two in backward (gradients of the QKV and MLP inputs). A MoE block reduces the expert
  output after the combine, so it has the same four.
- block, e > 1: all-to-all dispatch and combine in forward and both again in backward over
  the e ranks, each of volume 2*k*s*b*h: every routed token copy of the device, of which the
  cost formula's (e-1)/e factor removes the share that stays local.
- embedding, t > 1: the vocabulary-parallel all-reduce of 2sbh in forward (identity in
  backward).
- head, t > 1: the all-reduce of the LM-head input gradient (2sbh) in backward and the
  vocabulary-parallel cross-entropy's three fp32 all-reduces of 4sb (max, sum of exponentials,
  target logit) in forward.

Every byte count is an exact integer (divisions by t round up).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from enum import Enum

from nest_cp.errors import InstanceFormatError
from nest_cp.model import (
    Collective,
    CollectiveGroup,
    CollectiveKind,
    IntraConfig,
    Layer,
    LayerProfile,
    Phase,
    Workload,
)
from nest_cp.ticks import ceil_div

BF16_BYTES = 2
FP32_BYTES = 4
TOKEN_ID_BYTES = 4


class ModelKind(str, Enum):
    """Decoder (causal LM: final norm + LM head) or encoder (BERT: pooler + MLM head)."""

    DECODER = "decoder"
    ENCODER = "encoder"


class Norm(str, Enum):
    """LayerNorm (scale and shift: 2h parameters) or RMSNorm (scale only: h)."""

    LAYERNORM = "layernorm"
    RMSNORM = "rmsnorm"


def _check(ok: bool, expected: str, got: object) -> None:
    if not ok:
        raise ValueError(f"expected {expected}, got {got!r}")


@dataclass(frozen=True, slots=True)
class TransformerSpec:
    """Public hyperparameters of a transformer; ``num_experts`` 1 means a dense MLP."""

    name: str
    kind: ModelKind
    hidden: int
    ffn_hidden: int
    num_layers: int
    num_heads: int
    vocab: int
    num_kv_heads: int | None = None  # None: multi-head attention (= num_heads)
    gated_mlp: bool = False  # SwiGLU: gate, up and down matrices
    num_experts: int = 1
    top_k: int = 1
    tied_embeddings: bool = False
    norm: Norm = Norm.LAYERNORM
    bias: bool = True
    dropout: bool = True
    learned_positions: int = 0  # 0: rotary positions, no parameters
    token_types: int = 0
    default_seq_len: int = 2048
    vocab_multiple: int = 128  # Megatron pads V to a multiple of this times t; 1: no padding

    def __post_init__(self) -> None:
        for name in ("hidden", "ffn_hidden", "num_layers", "num_heads", "vocab",
                     "num_experts", "top_k", "default_seq_len", "vocab_multiple"):
            value = getattr(self, name)
            _check(isinstance(value, int) and value >= 1, f"{name} >= 1", value)
        _check(self.hidden % self.num_heads == 0, "hidden divisible by num_heads", self.hidden)
        _check(self.num_heads % self.kv_heads == 0, "num_heads divisible by num_kv_heads",
               self.num_kv_heads)
        _check(self.top_k <= self.num_experts, f"top_k <= num_experts = {self.num_experts}",
               self.top_k)
        _check(isinstance(self.kind, ModelKind), "a ModelKind", self.kind)
        _check(isinstance(self.norm, Norm), "a Norm", self.norm)

    @property
    def kv_heads(self) -> int:
        return self.num_heads if self.num_kv_heads is None else self.num_kv_heads

    @property
    def kv_hidden(self) -> int:
        """h_kv: width of K and V (kv_heads * head dimension)."""
        return self.kv_heads * (self.hidden // self.num_heads)

    @property
    def is_moe(self) -> bool:
        return self.num_experts > 1

    @property
    def norm_params(self) -> int:
        return (2 if self.norm is Norm.LAYERNORM else 1) * self.hidden

    @property
    def mlp_matrices(self) -> int:
        return 3 if self.gated_mlp else 2

    @property
    def description(self) -> str:
        """One line for listings: kind, depth, widths, heads, experts, vocabulary, sequence."""
        kv = f" ({self.kv_heads} kv)" if self.kv_heads != self.num_heads else ""
        experts = f", {self.num_experts} experts top-{self.top_k}" if self.is_moe else ""
        return (f"{self.kind.value}, {self.num_layers} layers, h {self.hidden}, "
                f"f {self.ffn_hidden}, {self.num_heads} heads{kv}{experts}, V {self.vocab}, "
                f"seq {self.default_seq_len}")

    def vocab_shard(self, tp: int) -> int:
        """Vocabulary rows per device: V padded to a multiple of vocab_multiple * t, over t."""
        multiple = self.vocab_multiple * tp
        return -(-self.vocab // multiple) * multiple // tp


@dataclass(frozen=True, slots=True)
class DeviceSpec:
    """An accelerator: dense bf16 peak, HBM bandwidth and capacity, achievable FLOP/s fraction."""

    name: str
    peak_flops: float
    mem_bandwidth_Bps: float
    hbm_bytes: int
    efficiency: float

    def __post_init__(self) -> None:
        _check(self.peak_flops > 0, "peak_flops > 0", self.peak_flops)
        _check(self.mem_bandwidth_Bps > 0, "mem_bandwidth_Bps > 0", self.mem_bandwidth_Bps)
        _check(isinstance(self.hbm_bytes, int) and self.hbm_bytes >= 1, "hbm_bytes >= 1",
               self.hbm_bytes)
        _check(0 < self.efficiency <= 1, "efficiency in (0, 1]", self.efficiency)

    @property
    def description(self) -> str:
        """One line for listings: peak, achievable fraction, bandwidth and capacity."""
        capacity = (f"{self.hbm_bytes // 2**30} GiB" if self.hbm_bytes % 2**30 == 0
                    else f"{self.hbm_bytes / 1e9:g} GB")
        return (f"{self.peak_flops / 1e12:g} TFLOP/s bf16 x {self.efficiency:g}, "
                f"{self.mem_bandwidth_Bps / 1e12:g} TB/s, {capacity} HBM")


@dataclass(frozen=True, slots=True)
class _OpGroup:
    """Forward FLOPs and bytes moved of a group of ops timed together by the roofline."""

    flops: int
    bytes_moved: int


def _gemm(tokens: int, rows: int, cols: int, tp: int) -> _OpGroup:
    """A (tokens x rows) @ (rows x cols/t) GEMM split by t (column- or row-parallel alike)."""
    weights = ceil_div(rows * cols, tp)
    flops = 2 * tokens * weights
    moved = BF16_BYTES * (weights + tokens * rows + ceil_div(tokens * cols, tp))
    return _OpGroup(flops, moved)


def _memory_op(bytes_moved: int) -> _OpGroup:
    return _OpGroup(0, bytes_moved)


def _seconds(groups: Iterable[_OpGroup], device: DeviceSpec, scale: int) -> float:
    """Roofline time of the groups, each scaled by ``scale`` (1 forward, 2 backward)."""
    achievable = device.peak_flops * device.efficiency
    return sum(max(scale * g.flops / achievable, scale * g.bytes_moved / device.mem_bandwidth_Bps)
               for g in groups)


@dataclass(frozen=True, slots=True)
class _Shape:
    """The sizes one profile is computed for."""

    spec: TransformerSpec
    seq_len: int
    microbatch: int
    config: IntraConfig

    @property
    def tokens(self) -> int:
        return self.seq_len * self.microbatch

    @property
    def routed_tokens(self) -> int:
        """R = k * s * b: expert-token copies a device sends and (balanced) receives."""
        return self.spec.top_k * self.tokens

    @property
    def tp(self) -> int:
        return self.config.tp

    @property
    def activation(self) -> int:
        """2sbh: one bf16 activation of the hidden width."""
        return BF16_BYTES * self.tokens * self.spec.hidden


# ------------------------------------------------------------------ parameters


def _mlp_params(spec: TransformerSpec, tp: int) -> int:
    """One MLP (or one expert) per device: matrices and first biases split by t."""
    matrices = ceil_div(spec.mlp_matrices * spec.hidden * spec.ffn_hidden, tp)
    biases = ceil_div((spec.mlp_matrices - 1) * spec.ffn_hidden, tp) + spec.hidden
    return matrices + (biases if spec.bias else 0)


def _attention_params(spec: TransformerSpec, tp: int) -> int:
    qkv_width = spec.hidden + 2 * spec.kv_hidden
    matrices = ceil_div(spec.hidden * (qkv_width + spec.hidden), tp)
    biases = ceil_div(qkv_width, tp) + spec.hidden
    return matrices + (biases if spec.bias else 0)


def _block_params(spec: TransformerSpec, config: IntraConfig) -> tuple[int, int]:
    """(dense, expert) parameters of one block on one device."""
    dense = _attention_params(spec, config.tp) + 2 * spec.norm_params
    if not spec.is_moe:
        return dense + _mlp_params(spec, config.tp), 0
    router = spec.hidden * spec.num_experts
    experts = (spec.num_experts // config.ep) * _mlp_params(spec, config.tp)
    return dense + router, experts


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


def _attention_act_bytes(shape: _Shape) -> int:
    """Korthikanti Table 2 (TP, no SP) attention terms, GQA-adapted, without the norm input."""
    spec, tokens, tp = shape.spec, shape.tokens, shape.tp
    replicated = shape.activation + (tokens * spec.hidden if spec.dropout else 0)
    qkv_out = BF16_BYTES * tokens * (2 * spec.hidden + 2 * spec.kv_hidden)  # Q, K, V, proj in
    score_bytes_per_entry = 5 if spec.dropout else 2
    scores = score_bytes_per_entry * spec.num_heads * shape.seq_len * tokens
    return replicated + ceil_div(qkv_out + scores, tp)


def _mlp_act_bytes(shape: _Shape) -> int:
    """MLP (or MoE) terms, including the MLP input and dropout mask (replicated)."""
    spec, tokens, tp = shape.spec, shape.tokens, shape.tp
    replicated = shape.activation + (tokens * spec.hidden if spec.dropout else 0)
    per_token_inner = (6 if spec.gated_mlp else 4) * spec.ffn_hidden
    if not spec.is_moe:
        return replicated + ceil_div(per_token_inner * tokens, tp)
    routed = shape.routed_tokens
    router = 2 * FP32_BYTES * tokens * spec.num_experts
    copies = 2 * BF16_BYTES * routed * spec.hidden  # expert inputs and outputs
    return replicated + router + copies + ceil_div(per_token_inner * routed, tp)


def _block_act_bytes(shape: _Shape) -> int:
    norm_inputs = 2 * shape.activation
    return norm_inputs + _attention_act_bytes(shape) + _mlp_act_bytes(shape)


def _embedding_act_bytes(shape: _Shape) -> int:
    """Token ids, the dropout mask and (encoder) the embedding norm's input."""
    mask = shape.tokens * shape.spec.hidden if shape.spec.dropout else 0
    norm_input = shape.activation if shape.spec.kind is ModelKind.ENCODER else 0
    return TOKEN_ID_BYTES * shape.tokens + mask + norm_input


def _head_act_bytes(shape: _Shape) -> int:
    """Inputs of the head's norms and GEMMs (2sbh each) and the fp32 logits 4sbV/t."""
    inputs = 2 if shape.spec.kind is ModelKind.DECODER else 4  # + MLM transform and its norm
    logits = FP32_BYTES * shape.tokens * shape.spec.vocab_shard(shape.tp)
    return inputs * shape.activation + logits


# ------------------------------------------------------------------ compute


def _attention_ops(shape: _Shape) -> list[_OpGroup]:
    spec, tokens, tp = shape.spec, shape.tokens, shape.tp
    qkv = _gemm(tokens, spec.hidden, spec.hidden + 2 * spec.kv_hidden, tp)
    proj = _gemm(tokens, spec.hidden, spec.hidden, tp)
    core_flops = 4 * shape.seq_len * tokens * ceil_div(spec.hidden, tp)
    scores = BF16_BYTES * ceil_div(spec.num_heads, tp) * shape.seq_len * tokens
    qkv_io = BF16_BYTES * tokens * ceil_div(2 * spec.hidden + 2 * spec.kv_hidden, tp)
    return [qkv, _OpGroup(core_flops, 4 * scores + qkv_io), proj]


def _mlp_ops(shape: _Shape, tokens: int, experts: int) -> list[_OpGroup]:
    """The MLP GEMMs of ``experts`` local experts (1 for a dense MLP) over ``tokens`` tokens."""
    spec, tp = shape.spec, shape.tp
    first = _gemm(tokens, spec.hidden, (spec.mlp_matrices - 1) * spec.ffn_hidden, tp)
    second = _gemm(tokens, spec.ffn_hidden, spec.hidden, tp)
    extra_weights = BF16_BYTES * (experts - 1) * (
        ceil_div((spec.mlp_matrices - 1) * spec.hidden * spec.ffn_hidden, tp)
        + ceil_div(spec.ffn_hidden * spec.hidden, tp))
    act = (6 if spec.gated_mlp else 4) * ceil_div(tokens * spec.ffn_hidden, tp)
    return [first, second, _memory_op(extra_weights + act)]


def _block_ops(shape: _Shape) -> list[_OpGroup]:
    spec, hidden_io = shape.spec, shape.activation
    elementwise = _memory_op(2 * 2 * hidden_io + 2 * 3 * hidden_io)  # two norms, two residuals
    ops = [*_attention_ops(shape), elementwise]
    if not spec.is_moe:
        return ops + _mlp_ops(shape, shape.tokens, 1)
    router = _gemm(shape.tokens, spec.hidden, spec.num_experts, 1)
    permute = _memory_op(4 * BF16_BYTES * shape.routed_tokens * spec.hidden)
    local_experts = spec.num_experts // shape.config.ep
    return ops + [router, permute] + _mlp_ops(shape, shape.routed_tokens, local_experts)


def _embedding_ops(shape: _Shape) -> list[_OpGroup]:
    spec = shape.spec
    passes = 2 + (2 if spec.learned_positions else 0) + (2 if spec.kind is ModelKind.ENCODER
                                                         else 0)
    return [_memory_op(passes * shape.activation + TOKEN_ID_BYTES * shape.tokens)]


def _head_ops(shape: _Shape) -> list[_OpGroup]:
    spec, tokens, tp = shape.spec, shape.tokens, shape.tp
    logits = _gemm(tokens, spec.hidden, spec.vocab_shard(tp) * tp, tp)
    cross_entropy = _memory_op(5 * FP32_BYTES * tokens * spec.vocab_shard(tp))
    if spec.kind is ModelKind.DECODER:
        return [_memory_op(2 * shape.activation), logits, cross_entropy]  # final norm first
    return [_gemm(tokens, spec.hidden, spec.hidden, 1),  # MLM transform
            _memory_op(4 * shape.activation),  # its GeLU and norm
            _gemm(shape.microbatch, spec.hidden, spec.hidden, 1),  # pooler on [CLS]
            logits, cross_entropy]


def _model_flops(groups: Sequence[_OpGroup]) -> float:
    """Model FLOPs of the forward pass on one device."""
    return float(sum(g.flops for g in groups))


# ------------------------------------------------------------------ collectives


def _collective(kind: CollectiveKind, volume: int, group: CollectiveGroup,
                phase: Phase) -> Collective:
    return Collective(kind, volume, group, phase)


def _block_collectives(shape: _Shape) -> tuple[Collective, ...]:
    found: list[Collective] = []
    if shape.tp > 1:
        for phase in (Phase.FWD, Phase.FWD, Phase.BWD, Phase.BWD):
            found.append(_collective(CollectiveKind.ALL_REDUCE, shape.activation,
                                     CollectiveGroup.TP, phase))
    if shape.spec.is_moe and shape.config.ep > 1:
        volume = BF16_BYTES * shape.routed_tokens * shape.spec.hidden
        for phase in (Phase.FWD, Phase.FWD, Phase.BWD, Phase.BWD):
            found.append(_collective(CollectiveKind.ALL_TO_ALL, volume, CollectiveGroup.EP,
                                     phase))
    return tuple(found)


def _embedding_collectives(shape: _Shape) -> tuple[Collective, ...]:
    if shape.tp == 1:
        return ()
    return (_collective(CollectiveKind.ALL_REDUCE, shape.activation, CollectiveGroup.TP,
                        Phase.FWD),)


def _head_collectives(shape: _Shape) -> tuple[Collective, ...]:
    if shape.tp == 1:
        return ()
    statistics = _collective(CollectiveKind.ALL_REDUCE, FP32_BYTES * shape.tokens,
                             CollectiveGroup.TP, Phase.FWD)
    input_grad = _collective(CollectiveKind.ALL_REDUCE, shape.activation, CollectiveGroup.TP,
                             Phase.BWD)
    return (statistics, statistics, statistics, input_grad)


# ------------------------------------------------------------------ profiles


def _profile(ops: Sequence[_OpGroup], device: DeviceSpec, params: tuple[int, int],
             act: int, ckpt: int, out: int, collectives: tuple[Collective, ...]) -> LayerProfile:
    return LayerProfile(fwd_s=_seconds(ops, device, 1), bwd_s=_seconds(ops, device, 2),
                        dense_params=params[0], expert_params=params[1], act_bytes=act,
                        ckpt_bytes=ckpt, out_bytes=out, collectives=collectives,
                        flops=_model_flops(ops))


def _embedding_profile(shape: _Shape, device: DeviceSpec) -> LayerProfile:
    return _profile(_embedding_ops(shape), device, (_embedding_params(shape.spec, shape.tp), 0),
                    _embedding_act_bytes(shape), TOKEN_ID_BYTES * shape.tokens,
                    shape.activation, _embedding_collectives(shape))


def _block_profile(shape: _Shape, device: DeviceSpec) -> LayerProfile:
    return _profile(_block_ops(shape), device, _block_params(shape.spec, shape.config),
                    _block_act_bytes(shape), shape.activation, shape.activation,
                    _block_collectives(shape))


def _head_profile(shape: _Shape, device: DeviceSpec) -> LayerProfile:
    return _profile(_head_ops(shape), device, (_head_params(shape.spec, shape.tp), 0),
                    _head_act_bytes(shape), shape.activation, FP32_BYTES,
                    _head_collectives(shape))


def _validate_config(spec: TransformerSpec, config: IntraConfig) -> None:
    if spec.kv_heads % config.tp != 0:
        raise InstanceFormatError(
            f"expected a tensor width dividing the {spec.kv_heads} kv heads of {spec.name}, "
            f"got {config.tp}", field="tp")
    if spec.num_experts % config.ep != 0:
        raise InstanceFormatError(
            f"expected an expert width dividing the {spec.num_experts} experts of {spec.name}, "
            f"got {config.ep}", field="ep")


def profile_workload(spec: TransformerSpec, device: DeviceSpec, seq_len: int,
                     microbatches: Sequence[int], configs: Sequence[IntraConfig]) -> Workload:
    """The chain embedding, num_layers blocks, head, profiled for every (config, microbatch).

    Raises InstanceFormatError (field ``tp``/``ep``/``microbatches``/``seq_len``/``configs``)
    for a tensor width that does not divide the kv heads (Megatron's GQA; no KV replication),
    an expert width that does not divide the experts (only 1 for dense models), a sequence
    longer than the learned positions, no configuration, or non-positive sizes.
    """
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
    embedding, block, head = {}, {}, {}
    for config in configs:
        for microbatch in sorted(set(microbatches)):
            shape = _Shape(spec, seq_len, microbatch, config)
            key = (config, microbatch)
            embedding[key] = _embedding_profile(shape, device)
            block[key] = _block_profile(shape, device)
            head[key] = _head_profile(shape, device)
    layers = (Layer("embedding", embedding),
              *(Layer(f"block.{index}", block) for index in range(spec.num_layers)),
              Layer("head", head))
    return Workload(name=spec.name, layers=layers)


def total_params(workload: Workload, config: IntraConfig | None = None,
                 microbatch: int | None = None) -> int:
    """Parameters held per device summed over every layer (default: tp = ep = 1, first b)."""
    config = config or IntraConfig()
    microbatch = microbatch or workload.microbatches(config)[0]
    return sum(layer.profile(config, microbatch).params for layer in workload.layers)
