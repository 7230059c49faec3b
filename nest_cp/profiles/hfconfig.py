"""Model descriptions: a Hugging Face ``config.json`` or a ``transformer`` mapping, as a spec.

Two inputs describe a model without Python:

- a **Hugging Face config** (``model_type`` one of :data:`HF_MODEL_TYPES`): the keys each
  family's ``transformers`` configuration class defines, read with that class's documented
  defaults. What is read, per type (a missing required key is an error naming it):

  ======================  ==========================================================
  llama, mistral          hidden_size, intermediate_size, num_hidden_layers,
                          num_attention_heads, [num_key_value_heads, head_dim,
                          vocab_size 32000, tie_word_embeddings false, attention_bias
                          false, mlp_bias false]; RMSNorm, SwiGLU, rotary, no dropout
  qwen2                   as llama, with QKV biases (Qwen2's attention), vocab 151936
  mixtral                 as mistral + num_local_experts, num_experts_per_tok
  gpt2 (GPT-3 shapes)     n_embd, n_layer, n_head, [n_positions 1024, vocab_size 50257,
                          n_inner 4*n_embd, tie_word_embeddings true]; LayerNorm, GeLU,
                          biases, learned positions, dropout (resid/embd/attn_pdrop > 0)
  bert                    hidden_size, num_hidden_layers, num_attention_heads,
                          intermediate_size, [vocab_size 30522, max_position_embeddings
                          512, type_vocab_size 2]; the MLM decoder tied
  deepseek_v3             hidden_size, intermediate_size (dense layers),
                          moe_intermediate_size, num_hidden_layers, num_attention_heads,
                          n_routed_experts, num_experts_per_tok, n_shared_experts,
                          first_k_dense_replace, q_lora_rank, kv_lora_rank,
                          qk_nope_head_dim, qk_rope_head_dim, v_head_dim, vocab_size,
                          [tie_word_embeddings false]
  ======================  ==========================================================

  DeepSeek-V3 simplifications (what matters for parameters, FLOPs and memory is kept): the
  multi-token-prediction module (``num_nextn_predict_layers``; not part of the published
  671B) is left out; the router's sigmoid scoring, group-limited routing and bias are priced
  as a plain top-k router GEMM; routing is balanced; ``moe_layer_freq`` must be 1.

- a **transformer description** (instance files, ``workload: {"transformer": {...}}``) with
  the fields of :class:`~nest_cp.profiles.transformer.TransformerSpec` by name: ``name``, ``kind``
  (decoder/encoder), ``hidden``, ``ffn_hidden``, ``num_layers``, ``num_heads``, ``vocab``,
  optional ``num_kv_heads``, ``head_dim``, ``activation`` (gelu/swiglu), ``norm``
  (layernorm/rmsnorm), ``bias``, ``qkv_bias``, ``dropout``, ``tied_embeddings``,
  ``learned_positions``, ``token_types``, ``num_experts``, ``top_k``, ``expert_ffn_hidden``,
  ``shared_experts``, ``dense_layers``, ``default_seq_len``, ``vocab_multiple`` and
  ``latent_attention`` (``q_lora_rank``, ``kv_lora_rank``, ``qk_nope_head_dim``,
  ``qk_rope_head_dim``, ``v_head_dim``).

Every error is an :class:`~nest_cp.model.errors.InstanceFormatError` whose field is the key.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import fields
from typing import Any

from nest_cp.model.errors import InstanceFormatError
from nest_cp.model.instance import MlpKind, NormKind
from nest_cp.model.limits import MAX_INT, MAX_LAYERS, MAX_MODEL_WIDTH
from nest_cp.profiles.transformer import (
    LatentAttention,
    ModelKind,
    TransformerSpec,
)

MAX_BLOCKS = MAX_LAYERS - 2  # transformer blocks: the chain adds an embedding and a head
HF_MODEL_TYPES = ("llama", "mistral", "qwen2", "mixtral", "gpt2", "bert", "deepseek_v3")


class _Keys:
    """Typed reads of a config mapping; every failure names the key."""

    def __init__(self, data: Mapping[str, Any], prefix: str):
        self.data = data
        self.prefix = prefix

    def _field(self, key: str) -> str:
        return f"{self.prefix}.{key}" if self.prefix else key

    def fail(self, key: str, expected: str, got: object) -> None:
        raise InstanceFormatError(f"expected {expected}, got {got!r}", field=self._field(key))

    def integer(self, key: str, default: int | None = None, minimum: int = 1,
                maximum: int = MAX_INT) -> int:
        if key not in self.data or self.data[key] is None:
            if default is None:
                raise InstanceFormatError(
                    f"expected the key {key!r} (an integer >= {minimum}), got nothing",
                    field=self._field(key))
            return default
        value = self.data[key]
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
            self.fail(key, f"an integer >= {minimum}", value)
        if value > maximum:
            self.fail(key, f"an integer <= {maximum}"
                      + (" (the workload chain adds an embedding and a head)"
                         if maximum == MAX_BLOCKS else ""), value)
        return value

    def layers(self, key: str) -> int:
        """A block count, refused before anything is built when the chain would exceed
        MAX_LAYERS (a config with 10^9 layers would otherwise be profiled layer by layer)."""
        return self.integer(key, maximum=MAX_BLOCKS)

    def width(self, key: str, default: int | None = None) -> int:
        """A model dimension (hidden, FFN or vocabulary size), refused at its key above
        MAX_MODEL_WIDTH before anything is profiled (10^12 would otherwise surface as a
        tick-range error on the profiled layers)."""
        return self.integer(key, default, maximum=MAX_MODEL_WIDTH)

    def boolean(self, key: str, default: bool) -> bool:
        value = self.data.get(key, default)
        if value is None:
            return default
        if not isinstance(value, bool):
            self.fail(key, "true or false", value)
        return value

    def number(self, key: str, default: float) -> float:
        value = self.data.get(key, default)
        if value is None:
            return default
        if isinstance(value, bool) or not isinstance(value, int | float):
            self.fail(key, "a number", value)
        return float(value)

    def string(self, key: str, default: str | None = None) -> str:
        value = self.data.get(key, default)
        if value is None:
            raise InstanceFormatError(f"expected the key {key!r} (a string), got nothing",
                                      field=self._field(key))
        if not isinstance(value, str) or not value:
            self.fail(key, "a non-empty string", value)
        return value


def _build(prefix: str, **kwargs: Any) -> TransformerSpec:
    try:
        return TransformerSpec(**kwargs)
    except ValueError as exc:
        raise InstanceFormatError(f"inconsistent model description: {exc}",
                                  field=prefix or "model") from None


def _swiglu_act(keys: _Keys) -> None:
    act = keys.string("hidden_act", "silu")
    if act not in ("silu", "swish"):
        keys.fail("hidden_act", "'silu' (SwiGLU)", act)


def _llama(keys: _Keys, name: str, qkv_bias: bool = False, vocab: int = 32000,
           experts: bool = False) -> TransformerSpec:
    _swiglu_act(keys)
    heads = keys.integer("num_attention_heads")
    hidden = keys.width("hidden_size")
    kwargs: dict[str, Any] = {}
    if experts:
        kwargs.update(num_experts=keys.integer("num_local_experts"),
                      top_k=keys.integer("num_experts_per_tok"))
    head_dim = keys.integer("head_dim", 0, minimum=0) or None
    if head_dim is not None and head_dim * heads == hidden:
        head_dim = None
    return _build(keys.prefix, name=name, kind=ModelKind.DECODER, hidden=hidden,
                  ffn_hidden=keys.width("intermediate_size"),
                  num_layers=keys.layers("num_hidden_layers"), num_heads=heads,
                  num_kv_heads=keys.integer("num_key_value_heads", heads),
                  head_dim=head_dim, vocab=keys.width("vocab_size", vocab),
                  activation=MlpKind.SWIGLU, norm=NormKind.RMSNORM,
                  bias=keys.boolean("mlp_bias", False) and keys.boolean("attention_bias", False),
                  qkv_bias=qkv_bias or keys.boolean("attention_bias", False),
                  tied_embeddings=keys.boolean("tie_word_embeddings", False), dropout=False,
                  default_seq_len=min(keys.integer("max_position_embeddings", 4096), 4096),
                  **kwargs)


def _gpt2(keys: _Keys, name: str) -> TransformerSpec:
    hidden = keys.width("n_embd")
    positions = keys.integer("n_positions", 1024)
    dropout = any(keys.number(key, 0.1) > 0 for key in ("resid_pdrop", "embd_pdrop",
                                                         "attn_pdrop"))
    return _build(keys.prefix, name=name, kind=ModelKind.DECODER, hidden=hidden,
                  ffn_hidden=keys.width("n_inner", 4 * hidden),
                  num_layers=keys.layers("n_layer"), num_heads=keys.integer("n_head"),
                  vocab=keys.width("vocab_size", 50257), activation=MlpKind.GELU,
                  norm=NormKind.LAYERNORM, bias=True, dropout=dropout,
                  tied_embeddings=keys.boolean("tie_word_embeddings", True),
                  learned_positions=positions, default_seq_len=positions)


def _bert(keys: _Keys, name: str) -> TransformerSpec:
    positions = keys.integer("max_position_embeddings", 512)
    return _build(keys.prefix, name=name, kind=ModelKind.ENCODER,
                  hidden=keys.width("hidden_size"),
                  ffn_hidden=keys.width("intermediate_size"),
                  num_layers=keys.layers("num_hidden_layers"),
                  num_heads=keys.integer("num_attention_heads"),
                  vocab=keys.width("vocab_size", 30522), tied_embeddings=True,
                  norm=NormKind.LAYERNORM, bias=True,
                  dropout=keys.number("hidden_dropout_prob", 0.1) > 0,
                  learned_positions=positions,
                  token_types=keys.integer("type_vocab_size", 2, minimum=0),
                  default_seq_len=positions)


def _deepseek_v3(keys: _Keys, name: str) -> TransformerSpec:
    if keys.integer("moe_layer_freq", 1) != 1:
        keys.fail("moe_layer_freq", "1 (every layer after the dense ones is MoE)",
                  keys.data.get("moe_layer_freq"))
    _swiglu_act(keys)
    latent = LatentAttention(q_lora_rank=keys.integer("q_lora_rank", 0, minimum=0),
                             kv_lora_rank=keys.integer("kv_lora_rank"),
                             qk_nope_head_dim=keys.integer("qk_nope_head_dim"),
                             qk_rope_head_dim=keys.integer("qk_rope_head_dim"),
                             v_head_dim=keys.integer("v_head_dim"))
    return _build(keys.prefix, name=name, kind=ModelKind.DECODER,
                  hidden=keys.width("hidden_size"),
                  ffn_hidden=keys.width("intermediate_size"),
                  num_layers=keys.layers("num_hidden_layers"),
                  num_heads=keys.integer("num_attention_heads"),
                  head_dim=latent.qk_head_dim, vocab=keys.width("vocab_size"),
                  activation=MlpKind.SWIGLU, norm=NormKind.RMSNORM, bias=False, dropout=False,
                  num_experts=keys.integer("n_routed_experts"),
                  top_k=keys.integer("num_experts_per_tok"),
                  expert_ffn_hidden=keys.width("moe_intermediate_size"),
                  shared_experts=keys.integer("n_shared_experts", 0, minimum=0),
                  dense_layers=keys.integer("first_k_dense_replace", 0, minimum=0),
                  tied_embeddings=keys.boolean("tie_word_embeddings", False),
                  default_seq_len=4096, latent_attention=latent)


_HF_READERS: dict[str, Callable[[_Keys, str], TransformerSpec]] = {
    "llama": _llama,
    "mistral": _llama,
    "qwen2": lambda keys, name: _llama(keys, name, qkv_bias=True, vocab=151936),
    "mixtral": lambda keys, name: _llama(keys, name, experts=True),
    "gpt2": _gpt2,
    "bert": _bert,
    "deepseek_v3": _deepseek_v3,
}


def spec_from_hf_config(config: Any, name: str | None = None,
                        prefix: str = "") -> TransformerSpec:
    """A TransformerSpec from a parsed Hugging Face ``config.json`` mapping."""
    if not isinstance(config, Mapping):
        raise InstanceFormatError(f"expected a config.json mapping, got {type(config).__name__}",
                                  field=prefix or "hf_config")
    keys = _Keys(config, prefix)
    model_type = keys.string("model_type")
    if model_type not in _HF_READERS:
        keys.fail("model_type", "one of " + ", ".join(HF_MODEL_TYPES), model_type)
    label = name or _name_of(config, model_type)
    return _HF_READERS[model_type](keys, label)


def _name_of(config: Mapping[str, Any], model_type: str) -> str:
    for key in ("_name_or_path", "name"):
        value = config.get(key)
        if isinstance(value, str) and value:
            return value.rstrip("/").split("/")[-1]
    return model_type


_ENUMS = {"kind": ModelKind, "norm": NormKind, "activation": MlpKind}
_BOOLS = {"bias", "qkv_bias", "dropout", "tied_embeddings"}
_OPTIONAL_INTS = {"num_kv_heads", "head_dim", "expert_ffn_hidden"}
_LATENT = tuple(f.name for f in fields(LatentAttention))


def spec_from_description(description: Any, prefix: str = "transformer") -> TransformerSpec:
    """A TransformerSpec from an instance file's ``transformer`` mapping (field names)."""
    if not isinstance(description, Mapping):
        raise InstanceFormatError(f"expected a mapping, got {description!r}", field=prefix)
    keys = _Keys(description, prefix)
    allowed = {f.name for f in fields(TransformerSpec)}
    for key in description:
        if key not in allowed:
            keys.fail(str(key), "one of the fields " + ", ".join(sorted(allowed)),
                      "unknown field")
    kwargs: dict[str, Any] = {"name": keys.string("name", "transformer")}
    for key in ("hidden", "ffn_hidden", "num_heads", "vocab"):
        kwargs[key] = keys.integer(key)
    kwargs["num_layers"] = keys.layers("num_layers")
    kwargs["kind"] = ModelKind.DECODER
    for key, enum in _ENUMS.items():
        if key in description:
            try:
                kwargs[key] = enum(description[key])
            except ValueError:
                keys.fail(key, "one of " + ", ".join(repr(e.value) for e in enum),
                          description[key])
    for key in _BOOLS & set(description):
        kwargs[key] = keys.boolean(key, False)
    for key in _OPTIONAL_INTS & set(description):
        kwargs[key] = keys.integer(key)
    for key in ("num_experts", "top_k", "default_seq_len", "vocab_multiple"):
        if key in description:
            kwargs[key] = keys.integer(key)
    for key in ("shared_experts", "dense_layers", "learned_positions", "token_types"):
        if key in description:
            kwargs[key] = keys.integer(key, minimum=0)
    if "latent_attention" in description:
        latent = _Keys(description["latent_attention"] or {}, f"{prefix}.latent_attention")
        if not isinstance(description["latent_attention"], Mapping):
            keys.fail("latent_attention", "a mapping", description["latent_attention"])
        kwargs["latent_attention"] = LatentAttention(**{
            key: latent.integer(key, minimum=0 if key == "q_lora_rank" else 1)
            for key in _LATENT})
    return _build(prefix, **kwargs)
