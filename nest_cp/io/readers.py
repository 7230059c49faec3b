"""Reading instances and plans from JSON or YAML (or from parsed dictionaries).

Every malformed input raises :class:`InstanceFormatError` (or
:class:`PlanFormatError`) whose message names the file, the dotted field path
and what was expected.  Sections ``workload`` and ``cluster`` of an instance may
be a path to another file (relative to the instance) or ``{"preset": NAME, ...}``
(resolved by :mod:`nest_cp.profiles.presets`); ``"repeat": k`` repeats a layer.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from fractions import Fraction
from pathlib import Path as FsPath
from typing import Any

from nest_cp.io.fields import FieldReader, join_field
from nest_cp.model.documents import read_document
from nest_cp.model.errors import InstanceFormatError, PlanFormatError
from nest_cp.model.instance import (
    AttentionKind,
    Cluster,
    Collective,
    CollectiveGroup,
    CollectiveKind,
    CpComm,
    GraphNetwork,
    HierarchicalNetwork,
    Instance,
    IntraConfig,
    Layer,
    LayerProfile,
    Link,
    MlpKind,
    ModelShape,
    NormKind,
    Optimizer,
    Phase,
    PositionKind,
    RecomputeMode,
    Schedule,
    SdpLevel,
    SdpMasking,
    SdpSetup,
    Strategy,
    Tier,
    TrainingSetup,
    Workload,
)
from nest_cp.model.launchers.search import Launcher
from nest_cp.model.limits import MAX_INT, MAX_LAYERS
from nest_cp.model.plan import Plan, SdpMask, Stage

# ------------------------------------------------------------------ instance


_PROFILE_FIELDS = {"tp", "ep", "cp", "microbatch", "fwd_s", "bwd_s", "dense_params",
                   "expert_params", "act_bytes", "ckpt_bytes", "out_bytes", "collectives",
                   "flops", "wgrad_s", "sel_fwd_s", "sel_act_bytes", "sel_flops", "sdp_units",
                   "sdp_fraction", "attn_fwd_s", "attn_bwd_s", "cp_kv_bytes", "cp_a2a_bytes"}
_OPTIONAL_SECONDS = ("flops", "wgrad_s", "sel_fwd_s", "sel_flops", "attn_fwd_s",
                     "attn_bwd_s")  # numbers or null


def load_instance(path: str | FsPath) -> Instance:
    """Load an instance file; raise InstanceFormatError naming file and field on bad input."""
    path = FsPath(path)
    data = read_document(path)
    return instance_from_dict(data, file=str(path), base_dir=path.parent)


def instance_from_dict(data: Any, file: str | None = None,
                       base_dir: FsPath | None = None) -> Instance:
    reader = FieldReader(file, InstanceFormatError)
    _refuse_the_other_kind(reader, data, "workload", "stages")
    reader.mapping(data, "", {"name", "workload", "cluster", "training", "provenance"},
                   ("workload", "cluster", "training"))
    if "provenance" in data:
        reader.provenance(data["provenance"], "provenance")
    training = _training(reader, data["training"], "training")
    cluster = _section(reader, data["cluster"], "cluster", base_dir,
                       lambda r, v, f: _cluster(r, v, f), _cluster_preset)
    workload = _section(reader, data["workload"], "workload", base_dir,
                        lambda r, v, f: _workload(r, v, f),
                        lambda name, opts, base: _workload_preset(name, opts, training, base),
                        lambda kind, value, opts, base: _workload_model(kind, value, opts,
                                                                        training, base))
    name = reader.string(data.get("name", FsPath(file).stem if file else "instance"), "name")
    return reader.build("", Instance, workload=workload, cluster=cluster, training=training,
                        name=name)


_MODEL_KEYS = ("transformer", "hf_config")  # workload sections the profiler expands

_KINDS = {"workload": "an instance file (workload, cluster, training)",
          "stages": "a plan file (stages, dp, placement)"}


def _refuse_the_other_kind(reader: FieldReader, data: Any, own_key: str,
                           other_key: str) -> None:
    """A plan given where an instance belongs, or the reverse (``solve p.json``,
    ``evaluate p.json x.json``): say which file is which rather than that a field is
    missing."""
    if isinstance(data, dict) and own_key not in data and other_key in data:
        raise reader.error(f"expected {_KINDS[own_key]}, got {_KINDS[other_key]}",
                           file=reader.file)


def _section(reader: FieldReader, value: Any, field: str, base_dir: FsPath | None,
             parse: Callable, preset: Callable, model: Callable | None = None) -> Any:
    """A section inline, as a path to another file, ``{"preset": NAME}`` or (workload) a model.

    A workload may be ``{"transformer": {...}}`` or ``{"hf_config": {...} | PATH}`` with
    profiler options beside it; the profiler expands it (nest_cp.profiles.presets).
    """
    if isinstance(value, str):
        target = (base_dir or FsPath(".")) / value
        sub = FieldReader(str(target), reader.error)
        return parse(sub, read_document(target, reader.error), "")
    keys = [key for key in ("preset", *_MODEL_KEYS) if isinstance(value, dict) and key in value]
    if model is None:
        keys = [key for key in keys if key == "preset"]
    if len(keys) > 1:
        reader.fail(join_field(field, keys[1]), f"only one of {', '.join(keys)}", "both")
    if keys:
        key = keys[0]
        options = {k: v for k, v in value.items() if k != key}
        try:
            if key == "preset":
                return preset(reader.string(value["preset"], join_field(field, "preset")), options,
                              base_dir)
            return model(key, value[key], options, base_dir)
        except InstanceFormatError as exc:
            if exc.file is not None and exc.file != reader.file:  # inside a referenced file
                raise
            # the profiler blames a training field (a context width it cannot split) as is
            blamed = exc.field if (exc.field or "").startswith("training.") \
                else join_field(field, exc.field or key)
            raise reader.error(exc.detail, file=reader.file, field=blamed) from None
    return parse(reader, value, field)


def _workload_preset(name: str, options: dict, training: TrainingSetup,
                     base_dir: FsPath | None) -> Workload:
    from nest_cp.profiles import presets

    return presets.workload_from_preset(name, options, training, base_dir)


def _workload_model(kind: str, value: Any, options: dict, training: TrainingSetup,
                    base_dir: FsPath | None) -> Workload:
    from nest_cp.profiles import presets

    return presets.workload_from_model(kind, value, options, training, base_dir)


def _cluster_preset(name: str, options: dict, base_dir: FsPath | None) -> Cluster:
    from nest_cp.profiles import presets

    return presets.cluster_from_preset(name, options, base_dir)


def _efficiency(reader: FieldReader, value: dict, field: str) -> float:
    """A tier's or link's ``efficiency`` (default 1): a number > 0 here; the model's own
    check (at most 1) is reported under the same field by ``reader.build``."""
    return reader.number(value.get("efficiency", 1.0), join_field(field, "efficiency"),
                         positive=True)


def _training(reader: FieldReader, value: Any, field: str) -> TrainingSetup:
    allowed = {"global_batch", "seq_len", "microbatches", "optimizer", "zero_stages",
               "recompute", "allow_recompute", "virtual_stages", "overlap_grad_reduce",
               "overlap_param_gather", "tp_comm_overlap", "schedule", "tick_s", "strategies", "sdp",
               "launcher", "context_parallel", "cp_comm"}
    value = reader.mapping(value, field, allowed, ("global_batch", "seq_len"))
    kwargs: dict[str, Any] = {
        "global_batch": reader.integer(value["global_batch"], join_field(field, "global_batch"), 1),
        "seq_len": reader.integer(value["seq_len"], join_field(field, "seq_len"), 1),
    }
    if "microbatches" in value:
        kwargs["microbatches"] = reader.integers(value["microbatches"],
                                                 join_field(field, "microbatches"), 1)
    if "zero_stages" in value:
        kwargs["zero_stages"] = reader.integers(value["zero_stages"],
                                                join_field(field, "zero_stages"))
    if "optimizer" in value:
        opt_field = join_field(field, "optimizer")
        opt = reader.mapping(value["optimizer"], opt_field,
                             {"name", "weight_bytes", "grad_bytes", "state_bytes"})
        kwargs["optimizer"] = reader.build(opt_field, Optimizer, **{
            key: (reader.string(v, join_field(opt_field, key)) if key == "name"
                  else reader.integer(v, join_field(opt_field, key)))
            for key, v in opt.items()})
    if "recompute" in value and "allow_recompute" in value:
        reader.fail(join_field(field, "allow_recompute"),
                    "either recompute (the allowed modes) or the older allow_recompute, not both",
                    "both")
    if "recompute" in value:
        kwargs["recompute_modes"] = reader.choices(value["recompute"],
                                                   join_field(field, "recompute"), RecomputeMode)
    if "allow_recompute" in value:  # the v1 boolean: true = none or full, false = none
        allow = reader.boolean(value["allow_recompute"], join_field(field, "allow_recompute"))
        kwargs["recompute_modes"] = (RecomputeMode.NONE, RecomputeMode.FULL) if allow \
            else (RecomputeMode.NONE,)
    if "virtual_stages" in value:
        kwargs["virtual_stages"] = reader.integers(value["virtual_stages"],
                                                   join_field(field, "virtual_stages"), 1)
    for flag in ("overlap_grad_reduce", "overlap_param_gather", "tp_comm_overlap"):
        if flag in value:
            kwargs[flag] = reader.boolean(value[flag], join_field(field, flag))
    if "schedule" in value:
        kwargs["schedule"] = reader.choice(value["schedule"], join_field(field, "schedule"),
                                           Schedule)
    if "launcher" in value:
        kwargs["launcher"] = reader.choice(value["launcher"], join_field(field, "launcher"),
                                           Launcher)
    if "tick_s" in value:
        kwargs["tick_s"] = reader.number(value["tick_s"], join_field(field, "tick_s"),
                                         positive=True)
    if "strategies" in value:
        kwargs["strategies"] = reader.choices(value["strategies"],
                                              join_field(field, "strategies"), Strategy)
    if "sdp" in value:
        kwargs["sdp"] = _sdp_setup(reader, value["sdp"], join_field(field, "sdp"))
    if "context_parallel" in value:
        kwargs["context_parallel"] = reader.integers(value["context_parallel"],
                                                     join_field(field, "context_parallel"), 1)
    if "cp_comm" in value:
        kwargs["cp_comm"] = reader.choice(value["cp_comm"], join_field(field, "cp_comm"), CpComm)
    return reader.build(field, TrainingSetup, **kwargs)


def _sdp_setup(reader: FieldReader, value: Any, field: str) -> SdpSetup:
    """``{"levels", "maskings", "holders" | "coverages"}``; coverages as numbers or "p/q"."""
    value = reader.mapping(value, field, {"levels", "maskings", "holders", "coverages"})
    kwargs: dict[str, Any] = {}
    for key, enum in (("levels", SdpLevel), ("maskings", SdpMasking)):
        if key in value:
            kwargs[key] = reader.choices(value[key], join_field(field, key), enum)
    if "holders" in value:
        kwargs["holders"] = reader.integers(value["holders"], join_field(field, "holders"), 1)
    if "coverages" in value:
        items = reader.seq(value["coverages"], join_field(field, "coverages"))
        kwargs["coverages"] = tuple(_coverage(reader, v, join_field(field, f"coverages[{i}]"))
                                    for i, v in enumerate(items))
    return reader.build(field, SdpSetup, **kwargs)


def _coverage(reader: FieldReader, value: Any, field: str) -> Fraction:
    """A coverage C in (0, 1]: a number read as the decimal it prints as, or "p/q"."""
    expected = "a coverage in (0, 1]: a number or a fraction such as \"1/3\""
    if isinstance(value, str) and len(value) <= 32:
        try:
            coverage = Fraction(value.strip())
        except (ValueError, ZeroDivisionError):
            coverage = None
    elif isinstance(value, int | float) and not isinstance(value, bool) and \
            math.isfinite(value) and abs(value) <= MAX_INT:
        coverage = Fraction(str(value))
    else:
        coverage = None
    if coverage is None or not 0 < coverage <= 1:
        reader.fail(field, expected, value)
    return coverage


def _cluster(reader: FieldReader, value: Any, field: str) -> Cluster:
    value = reader.mapping(value, field, {"name", "num_devices", "hbm_bytes", "hbm_reserve",
                                          "network", "provenance", "peak_flops_per_s"},
                           ("num_devices", "hbm_bytes", "network"))
    if "provenance" in value:
        reader.provenance(value["provenance"], join_field(field, "provenance"))
    net_field = join_field(field, "network")
    net = reader.mapping(value["network"], net_field, None, ("kind",))
    kind = net["kind"]
    if kind == "hierarchical":
        reader.mapping(net, net_field, {"kind", "tiers"}, ("tiers",))
        tiers = []
        for index, tier in enumerate(reader.seq(net["tiers"], join_field(net_field, "tiers"))):
            tier_field = join_field(net_field, f"tiers[{index}]")
            tier = reader.mapping(tier, tier_field,
                                  {"name", "size", "bandwidth_Bps", "latency_s", "efficiency"},
                                  ("size", "bandwidth_Bps", "latency_s"))
            tiers.append(reader.build(
                tier_field, Tier, name=reader.string(tier.get("name", f"tier{index}"),
                                                     join_field(tier_field, "name")),
                size=reader.integer(tier["size"], join_field(tier_field, "size"), 1),
                bandwidth_Bps=reader.number(tier["bandwidth_Bps"],
                                            join_field(tier_field, "bandwidth_Bps"), positive=True),
                latency_s=reader.number(tier["latency_s"], join_field(tier_field, "latency_s")),
                efficiency=_efficiency(reader, tier, tier_field)))
        network: Any = HierarchicalNetwork(tuple(tiers))
    elif kind == "graph":
        reader.mapping(net, net_field, {"kind", "switches", "links"}, ("links",))
        switches = tuple(reader.string(s, join_field(net_field, f"switches[{i}]"))
                         for i, s in enumerate(reader.seq(
                             net.get("switches", []), join_field(net_field, "switches"), False)))
        links = []
        for index, link in enumerate(reader.seq(net["links"], join_field(net_field, "links"))):
            link_field = join_field(net_field, f"links[{index}]")
            link = reader.mapping(link, link_field,
                                  {"a", "b", "bandwidth_Bps", "latency_s", "efficiency"},
                                  ("a", "b", "bandwidth_Bps", "latency_s"))
            ends = {}
            for end in ("a", "b"):
                node = link[end]
                if not (isinstance(node, str) or (isinstance(node, int)
                                                  and not isinstance(node, bool))):
                    reader.fail(join_field(link_field, end), "a device id or a switch name", node)
                ends[end] = node
            links.append(reader.build(
                link_field, Link, a=ends["a"], b=ends["b"],
                bandwidth_Bps=reader.number(link["bandwidth_Bps"],
                                            join_field(link_field, "bandwidth_Bps"), positive=True),
                latency_s=reader.number(link["latency_s"], join_field(link_field, "latency_s")),
                efficiency=_efficiency(reader, link, link_field)))
        network = reader.build(net_field, GraphNetwork, switches=switches, links=tuple(links))
    else:
        reader.fail(join_field(net_field, "kind"), "'hierarchical' or 'graph'", kind)
    return reader.build(
        field, Cluster,
        num_devices=reader.integer(value["num_devices"], join_field(field, "num_devices"), 1),
        hbm_bytes=reader.integer(value["hbm_bytes"], join_field(field, "hbm_bytes"), 1),
        hbm_reserve=reader.number(value.get("hbm_reserve", 0.0), join_field(field, "hbm_reserve")),
        network=network,
        name=reader.string(value.get("name", "cluster"), join_field(field, "name")),
        peak_flops_per_s=_optional(value, "peak_flops_per_s", field, reader.positive))


def _workload(reader: FieldReader, value: Any, field: str) -> Workload:
    value = reader.mapping(value, field, {"name", "layers", "provenance", "attention",
                                          "sequence_parallel", "heads", "kv_heads", "model"},
                           ("layers",))
    if "provenance" in value:
        reader.provenance(value["provenance"], join_field(field, "provenance"))
    layers: list[Layer] = []
    for index, layer in enumerate(reader.seq(value["layers"], join_field(field, "layers"))):
        layer_field = join_field(field, f"layers[{index}]")
        layer = reader.mapping(layer, layer_field, {"name", "repeat", "profiles"},
                               ("name", "profiles"))
        name = reader.string(layer["name"], join_field(layer_field, "name"))
        repeat = reader.integer(layer.get("repeat", 1), join_field(layer_field, "repeat"), 1)
        if len(layers) + repeat > MAX_LAYERS:
            reader.fail(join_field(layer_field, "repeat"), f"at most {MAX_LAYERS} layers in all",
                        len(layers) + repeat)
        profiles = {}
        for p_index, raw in enumerate(reader.seq(layer["profiles"],
                                                 join_field(layer_field, "profiles"))):
            p_field = join_field(layer_field, f"profiles[{p_index}]")
            key, profile = _profile(reader, raw, p_field)
            if key in profiles:
                reader.fail(p_field, "one profile per (tp, ep, cp, microbatch)",
                            f"a second profile for {key[0].label}, microbatch={key[1]}")
            profiles[key] = profile
        built = reader.build(layer_field, Layer, name=name, profiles=profiles)
        layers.extend([built] if repeat == 1 else
                      [Layer(f"{name}[{i}]", profiles) for i in range(repeat)])
    recorded = {}  # how the profiles were made, for launchers (optional)
    if "attention" in value:
        recorded["attention"] = reader.choice(value["attention"],
                                              join_field(field, "attention"), AttentionKind)
    if "sequence_parallel" in value:
        recorded["sequence_parallel"] = reader.boolean(value["sequence_parallel"],
                                                       join_field(field, "sequence_parallel"))
    for name in ("heads", "kv_heads"):
        if name in value:
            recorded[name] = reader.integer(value[name], join_field(field, name), 1)
    if "model" in value:
        recorded["model"] = _model_shape(reader, value["model"], join_field(field, "model"))
    return reader.build(field, Workload,
                        name=reader.string(value.get("name", "workload"),
                                           join_field(field, "name")),
                        layers=tuple(layers), **recorded)


_MODEL_INTS = {"num_layers": 1, "hidden": 1, "ffn_hidden": 1, "heads": 1, "kv_heads": 1,
               "head_dim": 1, "vocab": 1, "max_positions": 0, "num_experts": 1, "top_k": 1,
               "expert_ffn_hidden": 0}
_MODEL_CHOICES = {"positions": PositionKind, "norm": NormKind, "mlp": MlpKind}
_MODEL_FLAGS = ("bias", "qkv_bias", "tied_embeddings", "dropout", "decoder", "latent_attention")


def _model_shape(reader: FieldReader, value: Any, field: str) -> ModelShape:
    """``workload.model``: the architecture profiled (instance model ModelShape)."""
    required = ("name", "num_layers", "hidden", "ffn_hidden", "heads", "kv_heads", "head_dim",
                "vocab")
    value = reader.mapping(value, field, {"name", *_MODEL_INTS, *_MODEL_CHOICES, *_MODEL_FLAGS},
                           required)
    fields: dict[str, Any] = {"name": reader.string(value["name"], join_field(field, "name"))}
    for name, minimum in _MODEL_INTS.items():
        if name in value:
            fields[name] = reader.integer(value[name], join_field(field, name), minimum)
    for name, kind in _MODEL_CHOICES.items():
        if name in value:
            fields[name] = reader.choice(value[name], join_field(field, name), kind)
    for name in _MODEL_FLAGS:
        if name in value:
            fields[name] = reader.boolean(value[name], join_field(field, name))
    return reader.build(field, ModelShape, **fields)


def _profile(reader: FieldReader, raw: Any, field: str
             ) -> tuple[tuple[IntraConfig, int], LayerProfile]:
    raw = reader.mapping(raw, field, _PROFILE_FIELDS,
                         ("fwd_s", "bwd_s", "act_bytes", "ckpt_bytes", "out_bytes"))
    config = reader.build(field, IntraConfig,
                          tp=reader.integer(raw.get("tp", 1), join_field(field, "tp"), 1),
                          ep=reader.integer(raw.get("ep", 1), join_field(field, "ep"), 1),
                          cp=reader.integer(raw.get("cp", 1), join_field(field, "cp"), 1))
    microbatch = reader.integer(raw.get("microbatch", 1), join_field(field, "microbatch"), 1)
    collectives = []
    for index, coll in enumerate(reader.seq(raw.get("collectives", []),
                                            join_field(field, "collectives"), False)):
        c_field = join_field(field, f"collectives[{index}]")
        coll = reader.mapping(coll, c_field, {"kind", "volume_bytes", "group", "phase"},
                              ("kind", "volume_bytes", "group", "phase"))
        collectives.append(Collective(
            kind=reader.choice(coll["kind"], join_field(c_field, "kind"), CollectiveKind),
            volume_bytes=reader.integer(coll["volume_bytes"], join_field(c_field, "volume_bytes")),
            group=reader.choice(coll["group"], join_field(c_field, "group"), CollectiveGroup),
            phase=reader.choice(coll["phase"], join_field(c_field, "phase"), Phase)))
    profile = reader.build(
        field, LayerProfile,
        fwd_s=reader.number(raw["fwd_s"], join_field(field, "fwd_s")),
        bwd_s=reader.number(raw["bwd_s"], join_field(field, "bwd_s")),
        dense_params=reader.integer(raw.get("dense_params", 0), join_field(field, "dense_params")),
        expert_params=reader.integer(raw.get("expert_params", 0),
                                     join_field(field, "expert_params")),
        act_bytes=reader.integer(raw["act_bytes"], join_field(field, "act_bytes")),
        ckpt_bytes=reader.integer(raw["ckpt_bytes"], join_field(field, "ckpt_bytes")),
        out_bytes=reader.integer(raw["out_bytes"], join_field(field, "out_bytes")),
        collectives=tuple(collectives),
        sel_act_bytes=_optional(raw, "sel_act_bytes", field, reader.integer),
        sdp_units=reader.integer(raw.get("sdp_units", 0), join_field(field, "sdp_units")),
        sdp_fraction=reader.number(raw.get("sdp_fraction", 0.0), join_field(field, "sdp_fraction")),
        cp_kv_bytes=reader.integer(raw.get("cp_kv_bytes", 0), join_field(field, "cp_kv_bytes")),
        cp_a2a_bytes=reader.integer(raw.get("cp_a2a_bytes", 0),
                                    join_field(field, "cp_a2a_bytes")),
        **{name: _optional(raw, name, field, reader.number) for name in _OPTIONAL_SECONDS})
    return (config, microbatch), profile


def _optional(raw: dict, name: str, field: str, read: Callable[[Any, str], Any]) -> Any:
    """An optional profile field: absent or null is None, else read and checked."""
    value = raw.get(name)
    return None if value is None else read(value, join_field(field, name))


# ------------------------------------------------------------------ plans



def load_plan(path: str | FsPath) -> Plan:
    path = FsPath(path)
    return plan_from_dict(read_document(path, PlanFormatError), file=str(path))


def plan_from_dict(data: Any, file: str | None = None) -> Plan:
    reader = FieldReader(file, PlanFormatError)
    _refuse_the_other_kind(reader, data, "stages", "workload")
    reader.mapping(data, "", {"config", "microbatch", "zero", "stages", "dp", "placement",
                              "virtual_stages", "strategy", "sdp"}, ("stages",))
    config_raw = reader.mapping(data.get("config", {}), "config", {"tp", "ep", "cp"})
    config = reader.build("config", IntraConfig,
                          tp=reader.integer(config_raw.get("tp", 1), "config.tp", 1),
                          ep=reader.integer(config_raw.get("ep", 1), "config.ep", 1),
                          cp=reader.integer(config_raw.get("cp", 1), "config.cp", 1))
    stages = []
    for index, stage in enumerate(reader.seq(data["stages"], "stages")):
        s_field = f"stages[{index}]"
        stage = reader.mapping(stage, s_field, {"first_layer", "last_layer", "recompute"},
                               ("first_layer", "last_layer"))
        stages.append(Stage(
            first_layer=reader.integer(stage["first_layer"], join_field(s_field, "first_layer")),
            last_layer=reader.integer(stage["last_layer"], join_field(s_field, "last_layer")),
            recompute=_recompute_mode(reader, stage.get("recompute", "none"),
                                      join_field(s_field, "recompute"))))
    placement = None
    if data.get("placement") is not None:
        placement = tuple(
            tuple(tuple(reader.integer(dev, f"placement[{s}][{r}][{j}]")
                        for j, dev in enumerate(reader.seq(ranks, f"placement[{s}][{r}]")))
                  for r, ranks in enumerate(reader.seq(replicas, f"placement[{s}]")))
            for s, replicas in enumerate(reader.seq(data["placement"], "placement")))
    return reader.build(
        "", Plan, config=config,
        microbatch=reader.integer(data.get("microbatch", 1), "microbatch", 1),
        zero=reader.integer(data.get("zero", 0), "zero"),
        num_replicas=reader.integer(data.get("dp", 1), "dp", 1), stages=tuple(stages),
        placement=placement,
        virtual_stages=reader.integer(data.get("virtual_stages", 1), "virtual_stages", 1),
        strategy=reader.choice(data.get("strategy", "dp"), "strategy", Strategy),
        sdp=None if data.get("sdp") is None else _sdp_mask(reader, data["sdp"], "sdp"))


def _sdp_mask(reader: FieldReader, value: Any, field: str) -> SdpMask:
    """``{"level", "masking", "holders", "mask": [[units of worker 0], ...]}``."""
    value = reader.mapping(value, field, {"level", "masking", "holders", "mask"},
                           ("level", "masking", "holders", "mask"))
    rows = reader.seq(value["mask"], join_field(field, "mask"))
    mask = tuple(tuple(reader.integer(unit, f"{field}.mask[{w}][{k}]")
                       for k, unit in enumerate(reader.seq(row, f"{field}.mask[{w}]", False)))
                 for w, row in enumerate(rows))
    return reader.build(
        field, SdpMask, level=reader.choice(value["level"], join_field(field, "level"), SdpLevel),
        masking=reader.choice(value["masking"], join_field(field, "masking"), SdpMasking),
        holders=reader.integer(value["holders"], join_field(field, "holders"), 1), mask=mask)


def _recompute_mode(reader: FieldReader, value: Any, field: str) -> RecomputeMode:
    """A stage's mode "none", "selective" or "full"; the v1 booleans true / false: full / none."""
    if isinstance(value, bool):
        return RecomputeMode.FULL if value else RecomputeMode.NONE
    return reader.choice(value, field, RecomputeMode)
