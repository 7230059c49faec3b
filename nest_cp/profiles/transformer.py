"""Transformer hyperparameters: the model description the profiler expands (DESIGN §1.1).

One frozen dataclass, :class:`TransformerSpec`, covers the families nest-cp profiles:
GPT-2/3 and BERT (LayerNorm, GeLU, biases, learned positions), Llama 2/3 and Mistral
(RMSNorm, SwiGLU, rotary, GQA), Qwen2 (the same with QKV biases), Mixtral (top-k MoE) and
DeepSeek-V3 (multi-head latent attention, fine-grained MoE with shared experts, dense first
layers). :mod:`nest_cp.profiles.hfconfig` builds one from a Hugging Face ``config.json`` or from an
instance file's ``transformer`` description.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from nest_cp.model.instance import MlpKind, ModelShape, NormKind, PositionKind


def _check(ok: bool, expected: str, got: object) -> None:
    if not ok:
        raise ValueError(f"expected {expected}, got {got!r}")


class ModelKind(str, Enum):
    """Decoder (causal LM: final norm + LM head) or encoder (BERT: pooler + MLM head)."""

    DECODER = "decoder"
    ENCODER = "encoder"


@dataclass(frozen=True, slots=True)
class LatentAttention:
    """DeepSeek-V2/V3 multi-head latent attention (MLA) sizes.

    Queries: h -> q_lora_rank (down, then RMSNorm) -> heads * (nope + rope) (up); keys and
    values: h -> kv_lora_rank + rope (down; the rope part is one shared key head), RMSNorm of
    the kv_lora_rank part, -> heads * (nope + v) (up). ``q_lora_rank`` 0: a plain h -> heads *
    (nope + rope) query projection (DeepSeek-V2-Lite).
    """

    q_lora_rank: int
    kv_lora_rank: int
    qk_nope_head_dim: int
    qk_rope_head_dim: int
    v_head_dim: int

    def __post_init__(self) -> None:
        _check(isinstance(self.q_lora_rank, int) and self.q_lora_rank >= 0, "q_lora_rank >= 0",
               self.q_lora_rank)
        for name in ("kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim"):
            value = getattr(self, name)
            _check(isinstance(value, int) and value >= 1, f"{name} >= 1", value)

    @property
    def qk_head_dim(self) -> int:
        return self.qk_nope_head_dim + self.qk_rope_head_dim


@dataclass(frozen=True, slots=True)
class TransformerSpec:
    """Public hyperparameters of a transformer.

    ``num_experts`` 1 means dense MLPs of width ``ffn_hidden``. With experts, each MoE
    layer routes every token to ``top_k`` of ``num_experts`` experts of width
    ``expert_ffn_hidden`` (default ``ffn_hidden``) and also runs ``shared_experts`` always-on
    experts of that width; the first ``dense_layers`` layers keep a dense MLP of width
    ``ffn_hidden``. ``head_dim`` defaults to hidden / heads. ``bias`` puts biases on every
    linear layer (GPT, BERT); ``qkv_bias`` only on the query, key and value projections
    (Qwen2). ``latent_attention`` replaces grouped-query attention by MLA.
    """

    name: str
    kind: ModelKind
    hidden: int
    ffn_hidden: int
    num_layers: int
    num_heads: int
    vocab: int
    num_kv_heads: int | None = None  # None: multi-head attention (= num_heads)
    head_dim: int | None = None
    activation: MlpKind = MlpKind.GELU
    num_experts: int = 1
    top_k: int = 1
    expert_ffn_hidden: int | None = None
    shared_experts: int = 0
    dense_layers: int = 0
    tied_embeddings: bool = False
    norm: NormKind = NormKind.LAYERNORM
    bias: bool = True
    qkv_bias: bool = False
    dropout: bool = True
    learned_positions: int = 0  # 0: rotary positions, no parameters
    token_types: int = 0
    default_seq_len: int = 2048
    vocab_multiple: int = 128  # Megatron pads V to a multiple of this times t; 1: no padding
    latent_attention: LatentAttention | None = None

    def __post_init__(self) -> None:
        for name in ("hidden", "ffn_hidden", "num_layers", "num_heads", "vocab",
                     "num_experts", "top_k", "default_seq_len", "vocab_multiple"):
            value = getattr(self, name)
            _check(isinstance(value, int) and not isinstance(value, bool) and value >= 1,
                   f"{name} >= 1", value)
        for name in ("shared_experts", "dense_layers", "learned_positions", "token_types"):
            value = getattr(self, name)
            _check(isinstance(value, int) and not isinstance(value, bool) and value >= 0,
                   f"{name} >= 0", value)
        if self.head_dim is None:
            _check(self.hidden % self.num_heads == 0, "hidden divisible by num_heads",
                   self.hidden)
        else:
            _check(isinstance(self.head_dim, int) and self.head_dim >= 1, "head_dim >= 1",
                   self.head_dim)
        _check(self.num_kv_heads is None or (
            isinstance(self.num_kv_heads, int) and self.num_kv_heads >= 1), "num_kv_heads >= 1",
            self.num_kv_heads)
        _check(self.num_heads % self.kv_heads == 0, "num_heads divisible by num_kv_heads",
               self.num_kv_heads)
        _check(self.top_k <= self.num_experts, f"top_k <= num_experts = {self.num_experts}",
               self.top_k)
        _check(self.dense_layers <= self.num_layers, f"dense_layers <= {self.num_layers}",
               self.dense_layers)
        _check(self.expert_ffn_hidden is None or (
            isinstance(self.expert_ffn_hidden, int) and self.expert_ffn_hidden >= 1),
            "expert_ffn_hidden >= 1", self.expert_ffn_hidden)
        _check(self.is_moe or (self.shared_experts == 0 and self.dense_layers == 0),
               "shared experts and dense layers only with num_experts > 1",
               (self.shared_experts, self.dense_layers))
        _check(isinstance(self.kind, ModelKind), "a ModelKind", self.kind)
        _check(isinstance(self.norm, NormKind), "a Norm", self.norm)
        _check(isinstance(self.activation, MlpKind), "an Activation", self.activation)
        _check(self.latent_attention is None or isinstance(self.latent_attention,
                                                           LatentAttention),
               "a LatentAttention or None", self.latent_attention)

    # ------------------------------------------------------------- derived sizes

    @property
    def kv_heads(self) -> int:
        return self.num_heads if self.num_kv_heads is None else self.num_kv_heads

    @property
    def head_size(self) -> int:
        """Width of one attention head (query/key; the value width for MLA differs)."""
        return self.head_dim if self.head_dim is not None else self.hidden // self.num_heads

    @property
    def q_hidden(self) -> int:
        """Width of all query heads (= hidden unless head_dim says otherwise)."""
        return self.num_heads * self.head_size

    @property
    def kv_hidden(self) -> int:
        """h_kv: width of K (and of V) over all kv heads."""
        return self.kv_heads * self.head_size

    @property
    def is_moe(self) -> bool:
        return self.num_experts > 1

    @property
    def gated_mlp(self) -> bool:
        return self.activation is MlpKind.SWIGLU

    @property
    def mlp_matrices(self) -> int:
        return 3 if self.gated_mlp else 2

    @property
    def expert_width(self) -> int:
        return self.expert_ffn_hidden if self.expert_ffn_hidden is not None else self.ffn_hidden

    @property
    def norm_params(self) -> int:
        return (2 if self.norm is NormKind.LAYERNORM else 1) * self.hidden

    @property
    def causal(self) -> bool:
        return self.kind is ModelKind.DECODER

    def is_moe_layer(self, block: int) -> bool:
        """Whether block ``block`` (0-based) has an MoE instead of a dense MLP."""
        return self.is_moe and block >= self.dense_layers

    @property
    def description(self) -> str:
        """One line for listings: kind, depth, widths, heads, experts, vocabulary, sequence."""
        kv = f" ({self.kv_heads} kv)" if self.kv_heads != self.num_heads else ""
        if self.latent_attention is not None:
            kv = " (MLA)"
        experts = ""
        if self.is_moe:
            shared = f" + {self.shared_experts} shared" if self.shared_experts else ""
            experts = f", {self.num_experts} experts top-{self.top_k}{shared}"
        return (f"{self.kind.value}, {self.num_layers} layers, h {self.hidden}, "
                f"f {self.ffn_hidden}, {self.num_heads} heads{kv}{experts}, V {self.vocab}, "
                f"seq {self.default_seq_len}")

    def vocab_shard(self, tp: int) -> int:
        """Vocabulary rows per device: V padded to a multiple of vocab_multiple * t, over t."""
        multiple = self.vocab_multiple * tp
        return -(-self.vocab // multiple) * multiple // tp


def model_shape(spec: TransformerSpec) -> ModelShape:
    """The architecture a workload records for launchers (instance model ModelShape)."""
    return ModelShape(
        name=spec.name, num_layers=spec.num_layers, hidden=spec.hidden,
        ffn_hidden=spec.ffn_hidden, heads=spec.num_heads, kv_heads=spec.kv_heads,
        head_dim=spec.head_size, vocab=spec.vocab,
        positions=PositionKind.LEARNED if spec.learned_positions else PositionKind.ROPE,
        max_positions=spec.learned_positions, norm=spec.norm,
        mlp=spec.activation, bias=spec.bias, qkv_bias=spec.qkv_bias,
        tied_embeddings=spec.tied_embeddings, dropout=spec.dropout,
        num_experts=spec.num_experts, top_k=spec.top_k,
        expert_ffn_hidden=spec.expert_ffn_hidden or 0, decoder=spec.kind is ModelKind.DECODER,
        latent_attention=spec.latent_attention is not None)
