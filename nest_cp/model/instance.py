"""The problem model: workload, cluster and training setup (DESIGN §1).

Three frozen dataclasses describe an instance; each validates itself in
``__post_init__`` and raises :class:`InstanceFormatError` naming the offending
field (relative to the object; the loader prefixes the path and file).
Units live in the field names.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from enum import Enum
from fractions import Fraction

import networkx as nx

from nest_cp.model.errors import InstanceFormatError
from nest_cp.model.launchers import ModelFacts
from nest_cp.model.launchers.search import Launcher, SearchFacts, SearchShape, admits
from nest_cp.model.limits import MAX_DEVICES, MAX_LAYERS, MAX_TICKS
from nest_cp.model.ticks import exact


def _require(ok: bool, field_name: str, expected: str, got: object) -> None:
    if not ok:
        raise InstanceFormatError(f"expected {expected}, got {got!r}", field=field_name)


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: object) -> bool:
    return (_is_int(value) or isinstance(value, float)) and math.isfinite(value)


def _nonneg_int(value: object, name: str) -> None:
    _require(_is_int(value) and value >= 0, name, "an integer >= 0", value)


def _pos_int(value: object, name: str) -> None:
    _require(_is_int(value) and value >= 1, name, "an integer >= 1", value)


def _choices(values: tuple, name: str, check: Callable[[object, str], None],
             distinct: str) -> None:
    """A non-empty list of distinct allowed values (``name``), each passing ``check``."""
    _require(len(values) >= 1, name, "a non-empty list", values)
    for index, value in enumerate(values):
        check(value, f"{name}[{index}]")
    _require(len(set(values)) == len(values), name, distinct,
             [getattr(value, "value", value) for value in values])


def _nonneg_number(value: object, name: str) -> None:
    _require(_is_number(value) and value >= 0, name, "a finite number >= 0", value)


def _pos_number(value: object, name: str) -> None:
    _require(_is_number(value) and value > 0, name, "a finite number > 0", value)


def _efficiency(value: object) -> None:
    _require(_is_number(value) and 0 < value <= 1, "efficiency", "a number in (0, 1]", value)


# --------------------------------------------------------------------- workload


class CollectiveKind(str, Enum):
    """Collective primitives of DESIGN §3 (point-to-point is priced separately)."""

    ALL_REDUCE = "all_reduce"
    ALL_GATHER = "all_gather"
    REDUCE_SCATTER = "reduce_scatter"
    ALL_TO_ALL = "all_to_all"


class CollectiveGroup(str, Enum):
    """Which ranks of a stage replica take part: the t tensor ranks or the e expert ranks."""

    TP = "tp"
    EP = "ep"


class Phase(str, Enum):
    FWD = "fwd"
    BWD = "bwd"


@dataclass(frozen=True, slots=True)
class Collective:
    """One intra-layer collective per microbatch: ``volume_bytes`` per device over a group."""

    kind: CollectiveKind
    volume_bytes: int
    group: CollectiveGroup
    phase: Phase

    def __post_init__(self) -> None:
        _require(isinstance(self.kind, CollectiveKind), "kind",
                 "one of " + ", ".join(k.value for k in CollectiveKind), self.kind)
        _nonneg_int(self.volume_bytes, "volume_bytes")
        _require(isinstance(self.group, CollectiveGroup), "group", "'tp' or 'ep'", self.group)
        _require(isinstance(self.phase, Phase), "phase", "'fwd' or 'bwd'", self.phase)


@dataclass(frozen=True, slots=True)
class IntraConfig:
    """Intra-layer configuration: tensor width ``tp``, expert width ``ep`` and context width
    ``cp`` (the sequence split over ``cp`` ranks; cost model v4, docs/context-parallelism.md).
    """

    tp: int = 1
    ep: int = 1
    cp: int = 1

    def __post_init__(self) -> None:
        _pos_int(self.tp, "tp")
        _pos_int(self.ep, "ep")
        _pos_int(self.cp, "cp")

    @property
    def devices(self) -> int:
        """Devices of one stage replica, a = t * c * e."""
        return self.tp * self.cp * self.ep

    @property
    def label(self) -> str:
        """``tp=T, ep=E`` and, when c > 1, ``, cp=C``: how messages name a configuration."""
        return f"tp={self.tp}, ep={self.ep}" + (f", cp={self.cp}" if self.cp > 1 else "")


class CpComm(str, Enum):
    """How context-parallel ranks exchange attention inputs: a ring of point-to-point K/V
    transfers (Megatron's and torchtitan's default) or all-to-alls (Ulysses)."""

    P2P = "p2p"
    A2A = "a2a"


@dataclass(frozen=True, slots=True)
class LayerProfile:
    """Per-device cost of one layer under one configuration and microbatch size (DESIGN §1.1).

    The optional fields are ``None`` when unknown: ``wgrad_s`` (the weight-gradient part
    of ``bwd_s``; SDP backward masking and overlap), ``sel_fwd_s`` / ``sel_act_bytes``
    (selective recomputation of the attention core: forward time recomputed and the
    activation bytes kept), ``flops`` (model FLOPs of one microbatch's forward on this
    device; MFU) and ``sel_flops`` (forward FLOPs recomputed by selective recomputation;
    HFU).  ``sdp_units`` > 0 marks a layer maskable by SDP (DESIGN §7) with
    ``sdp_fraction`` of its params, compute and activations in those units.
    """

    fwd_s: float
    bwd_s: float
    dense_params: int
    expert_params: int
    act_bytes: int
    ckpt_bytes: int
    out_bytes: int
    collectives: tuple[Collective, ...] = ()
    flops: float | None = None
    wgrad_s: float | None = None
    sel_fwd_s: float | None = None
    sel_act_bytes: int | None = None
    sel_flops: float | None = None
    sdp_units: int = 0
    sdp_fraction: float = 0.0
    attn_fwd_s: float | None = None  # the attention core's part of fwd_s (context parallelism)
    attn_bwd_s: float | None = None  # ... and of bwd_s
    cp_kv_bytes: int = 0  # K and V one rank holds for one microbatch (p2p ring volume)
    cp_a2a_bytes: int = 0  # Q, K, V and output one rank holds for one microbatch (a2a volume)

    def __post_init__(self) -> None:
        _nonneg_number(self.fwd_s, "fwd_s")
        _nonneg_number(self.bwd_s, "bwd_s")
        for name in ("dense_params", "expert_params", "act_bytes", "ckpt_bytes", "out_bytes"):
            _nonneg_int(getattr(self, name), name)
        _require(isinstance(self.collectives, tuple), "collectives", "a tuple", self.collectives)
        for name in ("flops", "sel_flops"):
            if getattr(self, name) is not None:
                _nonneg_number(getattr(self, name), name)
        if self.wgrad_s is not None:
            _nonneg_number(self.wgrad_s, "wgrad_s")
            _require(self.wgrad_s <= self.bwd_s, "wgrad_s", f"at most bwd_s = {self.bwd_s}",
                     self.wgrad_s)
        _require((self.sel_fwd_s is None) == (self.sel_act_bytes is None), "sel_act_bytes",
                 "sel_fwd_s and sel_act_bytes given together",
                 "only one of them" if (self.sel_fwd_s is None) != (self.sel_act_bytes is None)
                 else None)
        if self.sel_fwd_s is not None:
            _nonneg_number(self.sel_fwd_s, "sel_fwd_s")
            _require(self.sel_fwd_s <= self.fwd_s, "sel_fwd_s", f"at most fwd_s = {self.fwd_s}",
                     self.sel_fwd_s)
            _nonneg_int(self.sel_act_bytes, "sel_act_bytes")
            _require(self.sel_act_bytes <= self.act_bytes, "sel_act_bytes",
                     f"at most act_bytes = {self.act_bytes}", self.sel_act_bytes)
        _nonneg_int(self.sdp_units, "sdp_units")
        _require(_is_number(self.sdp_fraction) and 0 <= self.sdp_fraction <= 1, "sdp_fraction",
                 "a fraction in [0, 1]", self.sdp_fraction)
        for name, whole in (("attn_fwd_s", "fwd_s"), ("attn_bwd_s", "bwd_s")):
            value = getattr(self, name)
            if value is not None:
                _nonneg_number(value, name)
                _require(value <= getattr(self, whole), name,
                         f"at most {whole} = {getattr(self, whole)}", value)
        _nonneg_int(self.cp_kv_bytes, "cp_kv_bytes")
        _nonneg_int(self.cp_a2a_bytes, "cp_a2a_bytes")
        _require(self.cp_kv_bytes == 0 or (self.attn_fwd_s is not None
                                           and self.attn_bwd_s is not None),
                 "attn_fwd_s", "attn_fwd_s and attn_bwd_s beside cp_kv_bytes > 0 (the ring "
                 "hides its transfers behind the attention core)",
                 None if self.attn_fwd_s is None else self.attn_bwd_s)

    @property
    def params(self) -> int:
        return self.dense_params + self.expert_params

    @property
    def has_selective(self) -> bool:
        """Whether the profile allows selective recomputation (sel_fwd_s and sel_act_bytes)."""
        return self.sel_fwd_s is not None


@dataclass(frozen=True, slots=True)
class Layer:
    """One layer of the chain with its profile per (configuration, microbatch size)."""

    name: str
    profiles: Mapping[tuple[IntraConfig, int], LayerProfile]

    def __post_init__(self) -> None:
        _require(isinstance(self.name, str) and self.name != "", "name", "a non-empty string",
                 self.name)
        _require(len(self.profiles) > 0, "profiles", "at least one profile", self.profiles)

    def profile(self, config: IntraConfig, microbatch: int) -> LayerProfile:
        return self.profiles[(config, microbatch)]


class AttentionKind(str, Enum):
    """Fused flash-style attention, or materialised scores (batched GEMMs + softmax)."""

    FLASH = "flash"
    MATERIALIZED = "materialized"


class PositionKind(str, Enum):
    """How the model encodes positions: learned absolute embeddings or rotary (no weights)."""

    LEARNED = "learned"
    ROPE = "rope"


class NormKind(str, Enum):
    LAYERNORM = "layernorm"
    RMSNORM = "rmsnorm"


class MlpKind(str, Enum):
    """The MLP: GeLU on one up-projection, or SwiGLU (gated, two up-projections)."""

    GELU = "gelu"
    SWIGLU = "swiglu"


@dataclass(frozen=True, slots=True)
class ModelShape:
    """The architecture the profiles were made for, so a launcher can build that model.

    Prices never read it (the profiles carry every number); exporters turn it into the
    launcher's model arguments.  ``max_positions`` is the learned position table's length
    (0 under rotary positions); ``head_dim`` the width of one attention head.
    """

    name: str
    num_layers: int
    hidden: int
    ffn_hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    vocab: int
    positions: PositionKind = PositionKind.ROPE
    max_positions: int = 0
    norm: NormKind = NormKind.RMSNORM
    mlp: MlpKind = MlpKind.SWIGLU
    bias: bool = False  # biases on every linear layer (GPT)
    qkv_bias: bool = False  # biases on the query, key and value projections only (Qwen2)
    tied_embeddings: bool = False
    dropout: bool = False
    num_experts: int = 1
    top_k: int = 1
    expert_ffn_hidden: int = 0  # 0: ffn_hidden
    decoder: bool = True  # False: an encoder (BERT), which the launchers' GPT models are not
    latent_attention: bool = False  # multi-head latent attention (DeepSeek)

    def __post_init__(self) -> None:
        _require(isinstance(self.name, str) and self.name != "", "name", "a non-empty string",
                 self.name)
        for name in ("num_layers", "hidden", "ffn_hidden", "heads", "kv_heads", "head_dim",
                     "vocab", "num_experts", "top_k"):
            _pos_int(getattr(self, name), name)
        for name in ("max_positions", "expert_ffn_hidden"):
            _nonneg_int(getattr(self, name), name)
        _require(self.heads % self.kv_heads == 0, "kv_heads", f"a divisor of the {self.heads} "
                 f"heads", self.kv_heads)
        _require(self.top_k <= self.num_experts, "top_k", f"at most the {self.num_experts} "
                 f"experts", self.top_k)
        for name, kind in (("positions", PositionKind), ("norm", NormKind), ("mlp", MlpKind)):
            _require(isinstance(getattr(self, name), kind), name, "one of " + ", ".join(
                repr(k.value) for k in kind), getattr(self, name))
        _require((self.positions is PositionKind.LEARNED) == (self.max_positions > 0),
                 "max_positions", "> 0 exactly with learned positions", self.max_positions)
        for name in ("bias", "qkv_bias", "tied_embeddings", "dropout", "decoder",
                     "latent_attention"):
            _require(isinstance(getattr(self, name), bool), name, "true or false",
                     getattr(self, name))

    @property
    def expert_width(self) -> int:
        return self.expert_ffn_hidden or self.ffn_hidden

    @property
    def llama(self) -> bool:
        """A Llama-style decoder: RMSNorm, SwiGLU, rotary positions, no biases or dropout,
        untied output, plain (grouped-query) attention of heads x head_dim = hidden."""
        return (self.positions is PositionKind.ROPE and self.norm is NormKind.RMSNORM
                and self.mlp is MlpKind.SWIGLU and not (self.bias or self.qkv_bias)
                and not (self.dropout or self.tied_embeddings) and self.decoder
                and not self.latent_attention and self.head_dim * self.heads == self.hidden)

    @property
    def facts(self) -> ModelFacts:
        """The architecture as the launchers' rules compare it (launchers.ModelFacts)."""
        return ModelFacts(self.name, self.num_layers, self.hidden, self.heads, self.kv_heads,
                          self.ffn_hidden, self.vocab, self.llama, self.num_experts,
                          self.top_k, self.expert_width if self.num_experts > 1 else 0,
                          self.description)

    @property
    def description(self) -> str:
        """One line: name, depth, widths, heads, experts, vocabulary, positions, norm, MLP."""
        experts = (f", {self.num_experts} experts top-{self.top_k} of width "
                   f"{self.expert_width}" if self.num_experts > 1 else "")
        return (f"{self.name}: {self.num_layers} layers, hidden {self.hidden}, ffn "
                f"{self.ffn_hidden}, {self.heads} heads ({self.kv_heads} kv) of "
                f"{self.head_dim}{experts}, vocab {self.vocab}, {self.positions.value} "
                f"positions, {self.norm.value}, {self.mlp.value}")


@dataclass(frozen=True, slots=True)
class Workload:
    """An ordered chain of layers, each profiled for the same (configuration, microbatch) keys.

    ``attention`` and ``sequence_parallel`` record how the profiles were made (the attention
    kernel, Megatron sequence parallelism with t > 1), for launchers; None when the profiles
    do not say.  They change no price: the profiles' numbers already carry them.
    """

    name: str
    layers: tuple[Layer, ...]
    attention: AttentionKind | None = None
    sequence_parallel: bool | None = None
    heads: int | None = None  # attention heads of the model profiled (launcher rules)
    kv_heads: int | None = None  # its key/value heads, Megatron's query groups
    model: ModelShape | None = None  # the architecture profiled, for launchers (no price)

    def __post_init__(self) -> None:
        _require(self.model is None or isinstance(self.model, ModelShape), "model",
                 "a ModelShape or None", self.model)
        for name in ("heads", "kv_heads"):
            count = getattr(self, name)
            _require(count is None or (_is_int(count) and count >= 1), name,
                     "a positive integer", count)
        _require(self.attention is None or isinstance(self.attention, AttentionKind),
                 "attention", "one of " + ", ".join(repr(k.value) for k in AttentionKind),
                 self.attention)
        _require(self.sequence_parallel is None or isinstance(self.sequence_parallel, bool),
                 "sequence_parallel", "true or false", self.sequence_parallel)
        _require(1 <= len(self.layers) <= MAX_LAYERS, "layers",
                 f"between 1 and {MAX_LAYERS} layers", len(self.layers))
        keys = set(self.layers[0].profiles)
        for index, layer in enumerate(self.layers):
            missing = keys.symmetric_difference(layer.profiles)
            if missing:
                config, microbatch = sorted(missing, key=_key_order)[0]
                raise InstanceFormatError(
                    f"expected a profile for {config.label}, "
                    f"microbatch={microbatch} like every other layer",
                    field=f"layers[{index}].profiles")

    @property
    def num_layers(self) -> int:
        return len(self.layers)

    @property
    def configs(self) -> tuple[IntraConfig, ...]:
        """Every profiled configuration, ordered by (tp, ep, cp)."""
        return tuple(sorted({c for c, _ in self.layers[0].profiles},
                            key=lambda c: (c.tp, c.ep, c.cp)))

    def microbatches(self, config: IntraConfig) -> tuple[int, ...]:
        return tuple(sorted(b for c, b in self.layers[0].profiles if c == config))

    def has_profile(self, config: IntraConfig, microbatch: int) -> bool:
        return (config, microbatch) in self.layers[0].profiles


def _key_order(key: tuple[IntraConfig, int]) -> tuple[int, int, int, int]:
    return (key[0].tp, key[0].ep, key[0].cp, key[1])


# ---------------------------------------------------------------------- cluster


@dataclass(frozen=True, slots=True)
class Tier:
    """One network tier: ``size`` domains of the tier below form one domain of this tier."""

    name: str
    size: int
    bandwidth_Bps: float
    latency_s: float
    efficiency: float = 1.0  # the share of bandwidth_Bps collectives reach (cost model §5 b)

    def __post_init__(self) -> None:
        _require(isinstance(self.name, str) and self.name != "", "name", "a non-empty string",
                 self.name)
        _pos_int(self.size, "size")
        _pos_number(self.bandwidth_Bps, "bandwidth_Bps")
        _nonneg_number(self.latency_s, "latency_s")
        _efficiency(self.efficiency)


@dataclass(frozen=True, slots=True)
class HierarchicalNetwork:
    """Tiers from innermost outwards; tier-k domains are blocks of G_k consecutive device ids."""

    tiers: tuple[Tier, ...]

    def __post_init__(self) -> None:
        _require(len(self.tiers) >= 1, "tiers", "at least one tier", len(self.tiers))

    def domain_sizes(self) -> tuple[int, ...]:
        """G_k = size_0 * ... * size_k for every tier k."""
        sizes, product = [], 1
        for tier in self.tiers:
            product *= tier.size
            sizes.append(product)
        return tuple(sizes)


@dataclass(frozen=True, slots=True)
class Link:
    """An undirected link of an arbitrary network."""

    a: int | str
    b: int | str
    bandwidth_Bps: float
    latency_s: float
    efficiency: float = 1.0  # the share of bandwidth_Bps transfers reach (cost model §5 b)

    def __post_init__(self) -> None:
        _pos_number(self.bandwidth_Bps, "bandwidth_Bps")
        _nonneg_number(self.latency_s, "latency_s")
        _efficiency(self.efficiency)
        _require(self.a != self.b, "b", "a link between two different nodes", self.b)


@dataclass(frozen=True, slots=True)
class GraphNetwork:
    """Devices 0..N-1 and named switches joined by links (DESIGN §1.2, arbitrary).

    A multigraph: two nodes may be joined by several links, each a path of its own.
    """

    switches: tuple[str, ...]
    links: tuple[Link, ...]

    def __post_init__(self) -> None:
        _require(len(set(self.switches)) == len(self.switches), "switches",
                 "distinct switch names", self.switches)
        for name in self.switches:
            _require(isinstance(name, str), "switches", "string switch names", name)

    def graph(self, num_devices: int) -> nx.Graph:
        """The networkx graph of which nodes are linked, for connectivity questions.

        Parallel links collapse here to the widest (then fastest) one; prices never use
        this graph: nest_cp.model.network treats every parallel link as a path of its own.
        """
        graph = nx.Graph()
        graph.add_nodes_from(range(num_devices))
        graph.add_nodes_from(self.switches)
        for link in self.links:
            old = graph.get_edge_data(link.a, link.b)
            if old is None or (link.bandwidth_Bps, -link.latency_s) > (
                    old["bandwidth_Bps"], -old["latency_s"]):
                graph.add_edge(link.a, link.b, bandwidth_Bps=link.bandwidth_Bps,
                               latency_s=link.latency_s)
        return graph


Network = HierarchicalNetwork | GraphNetwork


@dataclass(frozen=True, slots=True)
class Cluster:
    """N identical devices with ``hbm_bytes`` each, of which ``hbm_reserve`` is kept back.

    ``peak_flops_per_s`` is one device's dense peak for the profiles' datatype (MFU and
    HFU need it; ``None`` when unknown).
    """

    num_devices: int
    hbm_bytes: int
    network: Network
    hbm_reserve: float = 0.0
    name: str = "cluster"
    peak_flops_per_s: float | None = None

    def __post_init__(self) -> None:
        _pos_int(self.num_devices, "num_devices")
        _require(self.num_devices <= MAX_DEVICES, "num_devices", f"at most {MAX_DEVICES} devices",
                 self.num_devices)
        _pos_int(self.hbm_bytes, "hbm_bytes")
        _require(isinstance(self.name, str) and self.name != "", "name", "a non-empty string",
                 self.name)
        _require(_is_number(self.hbm_reserve) and 0 <= self.hbm_reserve < 1, "hbm_reserve",
                 "a fraction in [0, 1)", self.hbm_reserve)
        if self.peak_flops_per_s is not None:
            _pos_number(self.peak_flops_per_s, "peak_flops_per_s")
        if isinstance(self.network, HierarchicalNetwork):
            covered = self.network.domain_sizes()[-1]
            _require(covered >= self.num_devices, "network.tiers",
                     f"tier sizes whose product is >= num_devices = {self.num_devices}", covered)
        elif isinstance(self.network, GraphNetwork):
            nodes = set(range(self.num_devices)) | set(self.network.switches)
            for index, link in enumerate(self.network.links):
                for end in ("a", "b"):
                    _require(getattr(link, end) in nodes, f"network.links[{index}].{end}",
                             f"a device id in 0..{self.num_devices - 1} or a switch name",
                             getattr(link, end))
            graph = self.network.graph(self.num_devices)
            devices = list(range(self.num_devices))
            component = nx.node_connected_component(graph, 0)
            unreachable = [dev for dev in devices if dev not in component]
            _require(not unreachable, "network.links", "a network connecting every device",
                     f"device {unreachable[0]} unreachable from device 0" if unreachable else "")
        else:
            _require(False, "network", "a hierarchical or graph network", self.network)

    @property
    def usable_hbm_bytes(self) -> int:
        """hbm_bytes * (1 - reserve), rounded down to whole bytes."""
        return math.floor(self.hbm_bytes * (1 - Fraction(str(self.hbm_reserve))))


# ----------------------------------------------------------------- training set-up


@dataclass(frozen=True, slots=True)
class Optimizer:
    """Bytes per parameter for weights, gradients and optimizer state (Adam mixed: 2/2/12)."""

    weight_bytes: int = 2
    grad_bytes: int = 2
    state_bytes: int = 12
    name: str = "adam-mixed"

    def __post_init__(self) -> None:
        for name in ("weight_bytes", "grad_bytes", "state_bytes"):
            _nonneg_int(getattr(self, name), name)


class Precision(str, Enum):
    """The training precision of the weights the plan priced (mixed precision keeps fp32
    master weights in the optimizer state either way)."""

    BF16 = "bf16"
    FP16 = "fp16"
    FP32 = "fp32"


def precision_of(optimizer: Optimizer) -> tuple[Precision, str]:
    """The weights' precision by the optimizer convention, and a note when it is a guess.

    4-byte weights are fp32; 2-byte weights are fp16 when the optimizer's name says fp16
    (``adam-megatron-fp16``, Megatron's fp16 recipe), else bf16 (``adam-megatron``, the
    presets' default, and the generic ``adam-mixed``).  Other widths (fp8 weights) have no
    launcher precision flag: bf16 with a note.
    """
    if optimizer.weight_bytes == 4:
        return Precision.FP32, ""
    if optimizer.weight_bytes == 2:
        return (Precision.FP16 if "fp16" in optimizer.name.lower() else Precision.BF16), ""
    return Precision.BF16, (f"the optimizer prices {optimizer.weight_bytes}-byte weights, which "
                            f"no launcher precision flag gives: exported bf16 (2 bytes)")


class Schedule(str, Enum):
    ONE_F_ONE_B = "1f1b"


class RecomputeMode(str, Enum):
    """Activation recomputation of a pipeline stage (DESIGN §3.2 a).

    ``NONE`` keeps every activation; ``SELECTIVE`` recomputes the attention core
    (profile fields ``sel_fwd_s`` / ``sel_act_bytes``); ``FULL`` keeps only each layer's
    input and reruns the whole forward, intra-layer collectives included.

    A mode has no truth value (``bool(mode)`` raises TypeError): the field it replaces was
    a boolean, and a str enum would otherwise be truthy even for ``NONE``.  Compare with
    ``is`` instead.
    """

    NONE = "none"
    SELECTIVE = "selective"
    FULL = "full"

    def __bool__(self) -> bool:
        raise TypeError(f"a recompute mode has no truth value (got {self.value!r}); compare "
                        f"it with RecomputeMode.NONE / SELECTIVE / FULL")


class Strategy(str, Enum):
    """How the model is replicated over data-parallel workers (DESIGN §1.3)."""

    DP = "dp"    # plain data parallelism (with ZeRO)
    SDP = "sdp"  # subnetwork data parallelism (DESIGN §7)


class SdpLevel(str, Enum):
    """What an SDP unit is: a whole transformer block, or one width slice of a block."""

    BLOCK = "block"
    NEURON = "neuron"


class SdpMasking(str, Enum):
    """Forward masking runs only the held subnetwork; backward masking runs the full forward
    and data gradient and masks weight gradients and optimizer state (DESIGN §7)."""

    FORWARD = "forward"
    BACKWARD = "backward"


@dataclass(frozen=True, slots=True)
class SdpSetup:
    """The SDP choices a plan may make (DESIGN §7).

    ``holders``: the allowed h (workers holding each unit); ``coverages``: the allowed
    C = h/d as exact fractions.  At most one of them is given; with neither, every
    h < d is allowed (h = d is plain data parallelism).
    """

    levels: tuple[SdpLevel, ...] = (SdpLevel.BLOCK,)
    maskings: tuple[SdpMasking, ...] = (SdpMasking.FORWARD,)
    holders: tuple[int, ...] = ()
    coverages: tuple[Fraction, ...] = ()

    def __post_init__(self) -> None:
        for name, enum in (("levels", SdpLevel), ("maskings", SdpMasking)):
            values = getattr(self, name)
            _require(len(values) >= 1, name, "a non-empty list", values)
            for index, value in enumerate(values):
                _require(isinstance(value, enum), f"{name}[{index}]",
                         "one of " + ", ".join(repr(e.value) for e in enum), value)
            _require(len(set(values)) == len(values), name, "distinct values",
                     [v.value for v in values])
        _require(not (self.holders and self.coverages), "coverages",
                 "either holders or coverages, not both", "both")
        for index, count in enumerate(self.holders):
            _pos_int(count, f"holders[{index}]")
        for index, coverage in enumerate(self.coverages):
            _require(isinstance(coverage, Fraction) and 0 < coverage <= 1,
                     f"coverages[{index}]", "a fraction in (0, 1]", coverage)

    def allows(self, holders: int, workers: int) -> bool:
        """Whether h = ``holders`` of d = ``workers`` is an allowed SDP choice."""
        if not 1 <= holders <= workers:
            return False
        if self.holders:
            return holders in self.holders
        if self.coverages:
            return Fraction(holders, workers) in self.coverages
        return holders < workers

    def holder_counts(self, workers: int) -> tuple[int, ...]:
        """Every allowed h for d = ``workers``, ascending (what :meth:`allows` accepts)."""
        if self.holders:
            found = {h for h in self.holders if h <= workers}
        elif self.coverages:
            found = {int(c * workers) for c in self.coverages if (c * workers).denominator == 1}
        else:
            found = set(range(1, workers))
        return tuple(sorted(h for h in found if h >= 1))


@dataclass(frozen=True, slots=True)
class TrainingSetup:
    """Global batch, sequence length and the choices a plan may make (DESIGN §1.3)."""

    global_batch: int
    seq_len: int
    microbatches: tuple[int, ...] = (1,)
    optimizer: Optimizer = field(default_factory=Optimizer)
    zero_stages: tuple[int, ...] = (0,)
    recompute_modes: tuple[RecomputeMode, ...] = (RecomputeMode.NONE, RecomputeMode.FULL)
    virtual_stages: tuple[int, ...] = (1,)  # allowed v of interleaved 1F1B; (1,) = plain 1F1B
    overlap_grad_reduce: bool = False
    overlap_param_gather: bool = False  # Megatron's --overlap-param-gather (cost model §5 d)
    tp_comm_overlap: bool = False  # Megatron's --tp-comm-overlap (cost model §5 e)
    schedule: Schedule = Schedule.ONE_F_ONE_B
    tick_s: float = 1e-9
    strategies: tuple[Strategy, ...] = (Strategy.DP,)  # replication strategies (DESIGN §7)
    sdp: SdpSetup = field(default_factory=SdpSetup)
    launcher: Launcher = Launcher.NONE  # whose startup rules restrict the search
    context_parallel: tuple[int, ...] = (1,)  # allowed context widths c (cost model v4)
    cp_comm: CpComm = CpComm.P2P  # how context-parallel ranks exchange K/V

    def __post_init__(self) -> None:
        _pos_int(self.global_batch, "global_batch")
        _pos_int(self.seq_len, "seq_len")
        _choices(self.microbatches, "microbatches", _pos_int, "distinct sizes")
        _choices(self.zero_stages, "zero_stages", lambda stage, name: _require(
            stage in (0, 1, 2, 3) and _is_int(stage), name, "a ZeRO stage in 0..3", stage),
            "distinct stages")
        _choices(self.recompute_modes, "recompute", lambda mode, name: _require(
            isinstance(mode, RecomputeMode), name,
            "one of " + ", ".join(repr(m.value) for m in RecomputeMode), mode), "distinct modes")
        _choices(self.virtual_stages, "virtual_stages", _pos_int, "distinct counts")
        _require(isinstance(self.overlap_grad_reduce, bool), "overlap_grad_reduce",
                 "true or false", self.overlap_grad_reduce)
        _require(isinstance(self.overlap_param_gather, bool), "overlap_param_gather",
                 "true or false", self.overlap_param_gather)
        _require(isinstance(self.tp_comm_overlap, bool), "tp_comm_overlap", "true or false",
                 self.tp_comm_overlap)
        _require(isinstance(self.schedule, Schedule), "schedule", "'1f1b'", self.schedule)
        _pos_number(self.tick_s, "tick_s")
        _require(len(self.strategies) >= 1, "strategies", "a non-empty list", self.strategies)
        for index, strategy in enumerate(self.strategies):
            _require(isinstance(strategy, Strategy), f"strategies[{index}]", "'dp' or 'sdp'",
                     strategy)
        _require(len(set(self.strategies)) == len(self.strategies), "strategies",
                 "distinct strategies", [s.value for s in self.strategies])
        _require(isinstance(self.sdp, SdpSetup), "sdp", "SDP choices", self.sdp)
        _require(isinstance(self.launcher, Launcher), "launcher",
                 "one of " + ", ".join(repr(k.value) for k in Launcher), self.launcher)
        _require(self.launcher is not Launcher.TORCHTITAN or self.overlap_grad_reduce,
                 "overlap_grad_reduce", "true under launcher 'torchtitan' (its FSDP and DDP "
                 "always overlap the gradient reduction with the backward pass, so a plan "
                 "priced without it is not priced as it runs)", self.overlap_grad_reduce)
        _choices(self.context_parallel, "context_parallel", _pos_int, "distinct widths")
        _require(isinstance(self.cp_comm, CpComm), "cp_comm",
                 "one of " + ", ".join(repr(k.value) for k in CpComm), self.cp_comm)
        _require(self.launcher is Launcher.NONE or Strategy.SDP not in self.strategies,
                 "launcher", "'none' when SDP plans are allowed (no launcher runs SDP plans)",
                 self.launcher.value)


@dataclass(frozen=True, slots=True)
class Instance:
    """Workload + cluster + training setup: one planning problem."""

    workload: Workload
    cluster: Cluster
    training: TrainingSetup
    name: str = "instance"

    def __post_init__(self) -> None:
        usable = [b for b in self.training.microbatches
                  if any(self.workload.has_profile(c, b) for c in self.workload.configs)]
        _require(bool(usable), "training.microbatches",
                 "at least one microbatch size the workload is profiled for",
                 list(self.training.microbatches))
        _require(bool(self.choices), "training.context_parallel",
                 "at least one context width the workload is profiled for (with an allowed "
                 "microbatch size)", list(self.training.context_parallel))
        if RecomputeMode.SELECTIVE in self.training.recompute_modes:
            _check_selective_profiles(self)
        if Strategy.SDP in self.training.strategies:
            _check_sdp_profiles(self)
        _check_tick_range(self)

    @property
    def choices(self) -> tuple[tuple[IntraConfig, int], ...]:
        """Every (configuration, microbatch) pair a plan may use: profiled and allowed (its
        context width among ``training.context_parallel``)."""
        return tuple((config, size) for config in self.workload.configs
                     if config.cp in self.training.context_parallel
                     for size in sorted(set(self.training.microbatches))
                     if self.workload.has_profile(config, size))

    @property
    def launcher(self) -> Launcher:
        return self.training.launcher

    @property
    def search_facts(self) -> SearchFacts:
        """What the launcher's rules read from this instance (launchers.search)."""
        workload = self.workload
        return SearchFacts(self.training.global_batch, workload.heads, workload.kv_heads,
                           workload.sequence_parallel,
                           precision_of(self.training.optimizer)[0] is Precision.FP16,
                           None if workload.model is None else workload.model.facts,
                           self.training.seq_len, self.training.cp_comm.value)

    def admits(self, config: IntraConfig, microbatch, dp, num_stages, virtual_stages=1,
               zero=0):
        """Whether the launcher accepts the shape (any argument may be a numpy array: then
        elementwise); always true under ``launcher: none``."""
        if self.training.launcher is Launcher.NONE:
            return True
        return admits(self.training.launcher, self.search_facts,
                      SearchShape(config.tp, config.ep, microbatch, dp, num_stages,
                                  virtual_stages, zero, config.cp))


def _check_selective_profiles(instance: Instance) -> None:
    """Selective recomputation allowed: every profile a plan may use must say what it costs."""
    for config, microbatch in instance.choices:
        for index, layer in enumerate(instance.workload.layers):
            if not layer.profile(config, microbatch).has_selective:
                raise InstanceFormatError(
                    f"expected sel_fwd_s and sel_act_bytes in every profile when 'selective' "
                    f"is allowed, got none in layer {index} ({layer.name!r}) for {config.label}, "
                    f"microbatch={microbatch}", field="training.recompute")


def _check_sdp_profiles(instance: Instance) -> None:
    """SDP allowed: some layer must be maskable, and backward masking needs wgrad_s."""
    profiles = [(index, layer.name, config, microbatch, layer.profile(config, microbatch))
                for config, microbatch in instance.choices
                for index, layer in enumerate(instance.workload.layers)]
    if not any(profile.sdp_units for *_, profile in profiles):
        raise InstanceFormatError(
            "expected some layer with sdp_units > 0 when 'sdp' is allowed (a maskable block), "
            "got none", field="training.strategies")
    if SdpMasking.BACKWARD not in instance.training.sdp.maskings:
        return
    for index, name, config, microbatch, profile in profiles:
        if profile.sdp_units and profile.wgrad_s is None:
            raise InstanceFormatError(
                f"expected wgrad_s in every maskable profile when 'backward' masking is "
                f"allowed, got none in layer {index} ({name!r}) for {config.label}, "
                f"microbatch={microbatch}", field="training.sdp.maskings")


def _iteration_ticks_upper_bound(instance: Instance, global_batch: int | None = None,
                                 layers: tuple[Layer, ...] | None = None) -> int:
    """A bound on the iteration time of every plan, in ticks (of a workload made of
    ``layers`` instead of the instance's own, if given).

    Every transfer and collective is priced at the slowest bandwidth and the largest
    latency of the network (a graph path's latency at most the sum of all links'),
    a group of g ranks as 2 v / bandwidth + 2 g latency, and recomputation adds one more
    forward with its collectives.  With m <= B / (b e d) + 1 microbatches, S <= L stages and
    v virtual stages (T = (v m + S - 1) tau + sync, a chunk costing at most a whole stage),
    the bound is convex in d (terms in 1/d and in d), so its maximum over d is at d = 1 or
    d = N / a.
    """
    network, devices = instance.cluster.network, instance.cluster.num_devices
    if isinstance(network, GraphNetwork):
        bandwidth = min(exact(link.bandwidth_Bps) * exact(link.efficiency)
                        for link in network.links)
        latency = sum(exact(link.latency_s) for link in network.links)
    else:
        bandwidth = min(exact(tier.bandwidth_Bps) * exact(tier.efficiency)
                        for tier in network.tiers)
        latency = max(exact(tier.latency_s) for tier in network.tiers)
    training = instance.training
    chain = instance.workload.layers if layers is None else layers
    optimizer, num_layers = training.optimizer, len(chain)

    def transfer(volume_bytes: int, group: int) -> Fraction:  # >= any collective of g ranks
        return 2 * Fraction(volume_bytes) / bandwidth + 2 * group * latency

    tick = exact(training.tick_s)
    worst = 0
    grouped = _grouped(chain)
    for config, microbatch in instance.choices:
        profiles = [(layer.profile(config, microbatch), count) for layer, count in grouped]
        params = sum(count * p.params for p, count in profiles)
        stage = sum(
            count * (2 * exact(p.fwd_s) + exact(p.bwd_s)
                     + 2 * sum(transfer(c.volume_bytes, config.tp if c.group is CollectiveGroup.TP
                                        else config.ep) for c in p.collectives))
            for p, count in profiles)
        if config.cp > 1:  # context parallelism: the exposed ring (forward, its rerun,
            # backward; each <= (c - 1) transfers of 2 cp_kv_bytes) and six all-to-alls
            stage += sum(count * (3 * (config.cp - 1) * transfer(2 * p.cp_kv_bytes, 1)
                                  + 6 * transfer(p.cp_a2a_bytes, config.cp))
                         for p, count in profiles)
        stage += 2 * transfer(max(p.out_bytes for p, _ in profiles), 1)
        sync = 2 * transfer(params * optimizer.grad_bytes, devices)
        # each primitive term is rounded up once: at most one tick more per term
        cp_terms = 3 * config.cp + 6 if config.cp > 1 else 0
        terms = sum(count * (3 + 2 * len(p.collectives) + cp_terms)
                    for p, count in profiles) + 4
        sync_terms = 0
        if Strategy.SDP in training.strategies:  # DESIGN §7: one all-reduce and one
            # broadcast per unit, each rounded once, and up to four rounded shares per unit
            units = sum(count * (p.sdp_units + 1) for p, count in profiles)
            sync += 2 * transfer(params * (optimizer.grad_bytes + optimizer.weight_bytes),
                                 devices) + 2 * units * transfer(0, devices)
            terms += 4 * units
            sync_terms = 2 * units
        for dp in {1, max(1, devices // config.devices)}:
            gather = 2 * transfer(params * optimizer.weight_bytes, dp) \
                if 3 in training.zero_stages else 0
            batch = training.global_batch if global_batch is None else global_batch
            steps = max(training.virtual_stages) * (
                Fraction(batch, microbatch * config.ep * dp) + 1) + num_layers
            ticks = -(-(steps * (stage + gather) + sync) // tick) + math.ceil(steps) * terms \
                + sync_terms + 2
            worst = max(worst, ticks)
    return worst


def _grouped(layers: Iterable[Layer]) -> list[tuple[Layer, int]]:
    """Each layer with distinct profile objects and how many layers share them, in
    first-seen order: a transformer's blocks share their profiles, so the bound prices
    them once, not once a layer (a sum over the layers is the same sum over the groups,
    each times its count)."""
    counts: Counter[tuple[int, ...]] = Counter()
    first: dict[tuple[int, ...], Layer] = {}
    for layer in layers:
        key = tuple(map(id, layer.profiles.values()))
        counts[key] += 1
        first.setdefault(key, layer)
    return [(first[key], count) for key, count in counts.items()]


def _check_tick_range(instance: Instance) -> None:
    """Raise InstanceFormatError when an iteration could exceed MAX_TICKS.

    The field blamed is the one at fault: ``training.global_batch`` when the bound
    would hold with a batch of one sample (the microbatch count alone overflows); else
    ``workload.layers[i]`` when layer i's compute of one microbatch alone exceeds it (its
    sizes or times are out of range); else ``workload.layers`` when every layer alone,
    with one sample, stays within it (the number of layers is out of range);
    ``training.tick_s`` (a tick too fine for the times and bandwidths) otherwise.
    """
    bound = _iteration_ticks_upper_bound(instance)
    if bound < MAX_TICKS:
        return
    if _iteration_ticks_upper_bound(instance, global_batch=1) < MAX_TICKS:
        raise InstanceFormatError(
            f"expected a global batch whose iteration stays below 2**53 ticks (exact in every "
            f"backend), got {_magnitude(instance.training.global_batch)} samples",
            field="training.global_batch")
    layers, tick = instance.workload.layers, exact(instance.training.tick_s)
    distinct = _distinct_layers(instance)
    for index, layer in distinct:
        compute = max(exact(profile.fwd_s) * 2 + exact(profile.bwd_s)
                      for profile in layer.profiles.values()) / tick
        if compute >= MAX_TICKS:
            raise InstanceFormatError(
                f"expected layer times below 2**53 ticks (exact in every backend), got layer "
                f"{layer.name!r} computing one microbatch in about {_magnitude(int(compute))} "
                f"ticks; check the sizes it was profiled from (or use a coarser "
                f"training.tick_s)", field=f"workload.layers[{index}]")
    if len(layers) > 1 and all(
            _iteration_ticks_upper_bound(instance, global_batch=1, layers=(layer,)) < MAX_TICKS
            for _, layer in distinct):
        raise InstanceFormatError(
            f"expected a chain whose iteration stays below 2**53 ticks (exact in every "
            f"backend), got {len(layers):,} layers reaching about {_magnitude(bound)} ticks "
            f"over every plan, each layer alone within range; use fewer layers (or a coarser "
            f"training.tick_s)", field="workload.layers")
    raise InstanceFormatError(
        f"expected iteration times below 2**53 ticks (exact in every backend), but one "
        f"could reach about {_magnitude(bound)} ticks; use a coarser tick or check "
        f"the profile times and bandwidths", field="training.tick_s")


def _distinct_layers(instance: Instance) -> list[tuple[int, Layer]]:
    """(index, layer) of the first layer of each group of :func:`_grouped`."""
    seen: set[tuple[int, ...]] = set()
    found = []
    for index, layer in enumerate(instance.workload.layers):
        key = tuple(map(id, layer.profiles.values()))
        if key not in seen:
            seen.add(key)
            found.append((index, layer))
    return found


def _magnitude(value: int) -> str:
    """``10**17`` style, without converting a huge integer to decimal digits."""
    return f"10**{int(value.bit_length() * math.log10(2))}" if value >= 10**6 else str(value)
