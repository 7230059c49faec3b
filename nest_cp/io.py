"""Reading and writing instances and plans as JSON or YAML.

Every malformed input raises :class:`InstanceFormatError` (or
:class:`PlanFormatError`) whose message names the file, the dotted field path
and what was expected.  Sections ``workload`` and ``cluster`` of an instance may
be a path to another file (relative to the instance) or ``{"preset": NAME, ...}``.
Consecutive identical layers are written once with ``"repeat": k``.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable
from fractions import Fraction
from pathlib import Path as FsPath
from typing import Any

import yaml

from nest_cp.errors import InstanceFormatError, NestCpError, PlanFormatError
from nest_cp.limits import (
    MAX_INPUT_BYTES,
    MAX_INT,
    MAX_INT_DIGITS,
    MAX_LAYERS,
    MAX_PROVENANCE_ENTRIES,
    MAX_YAML_NODES,
)
from nest_cp.model import (
    Cluster,
    Collective,
    CollectiveGroup,
    CollectiveKind,
    GraphNetwork,
    HierarchicalNetwork,
    Instance,
    IntraConfig,
    Layer,
    LayerProfile,
    Link,
    Optimizer,
    Phase,
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
from nest_cp.plan import Plan, SdpMask, Stage

# ------------------------------------------------------------------ file access


def read_document(path: str | FsPath, error: type[InstanceFormatError] = InstanceFormatError
                  ) -> Any:
    """Parse a JSON or YAML file (by extension; JSON otherwise), within the input limits.

    Files over MAX_INPUT_BYTES (``/dev/zero`` included), integers of more than
    MAX_INT_DIGITS digits and YAML documents whose aliases expand to more than
    MAX_YAML_NODES values are refused with a message saying so; an over-long
    integer is reported at its field by the reader (it parses to a :class:`LongInteger`).
    """
    path = FsPath(path)
    try:
        with path.open("rb") as handle:
            raw = handle.read(MAX_INPUT_BYTES + 1)
        if len(raw) > MAX_INPUT_BYTES:
            raise error(f"expected a file of at most {MAX_INPUT_BYTES // 2**20} MiB, got a "
                        f"larger one", file=str(path))
        text = raw.decode("utf-8")
    except FileNotFoundError:
        raise error("expected an existing file, got none", file=str(path)) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise error(f"expected a readable UTF-8 file ({exc.__class__.__name__})",
                    file=str(path)) from None
    if path.suffix.lower() in (".yaml", ".yml"):
        try:
            return yaml.load(text, Loader=_StrictYamlLoader)  # noqa: S506 - a SafeLoader
        except _DuplicateKey as exc:
            raise error(f"expected each key once, got {exc.key!r} twice", file=str(path),
                        field=exc.key) from None
        except _TooLarge as exc:
            raise error(str(exc), file=str(path)) from None
        except yaml.YAMLError as exc:
            line = getattr(getattr(exc, "problem_mark", None), "line", None)
            at = f" (line {line + 1})" if line is not None else ""
            raise error(f"expected valid YAML{at}", file=str(path)) from None
        except RecursionError:
            raise error("expected YAML nested less deeply", file=str(path)) from None
    try:
        return json.loads(text, object_pairs_hook=_unique_keys, parse_int=_integer)
    except _DuplicateKey as exc:
        raise error(f"expected each key once, got {exc.key!r} twice", file=str(path),
                    field=exc.key) from None
    except json.JSONDecodeError as exc:
        raise error(f"expected valid JSON (line {exc.lineno}, column {exc.colno}: {exc.msg})",
                    file=str(path)) from None
    except RecursionError:
        raise error("expected JSON nested less deeply", file=str(path)) from None


class LongInteger:
    """An integer literal too long to read (more than MAX_INT_DIGITS digits).

    Kept as a placeholder so the field reading it reports the error with its path
    (``training.global_batch: expected an integer ..., got a 4000-digit integer``).
    """

    def __init__(self, digits: int):
        self.digits = digits

    def __repr__(self) -> str:
        return f"a {self.digits}-digit integer"


def _integer(text: str) -> int | LongInteger:
    digits = len(text.lstrip("+-"))
    return LongInteger(digits) if digits > MAX_INT_DIGITS else int(text)


class _TooLarge(ValueError):
    """A YAML document whose aliases expand past MAX_YAML_NODES values."""


class _DuplicateKey(ValueError):
    def __init__(self, key: str):
        super().__init__(key)
        self.key = key


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict:
    """JSON objects with a repeated key are rejected (json keeps the last one silently)."""
    result: dict = {}
    for key, value in pairs:
        if key in result:
            raise _DuplicateKey(str(key))
        result[key] = value
    return result


class _StrictYamlLoader(yaml.SafeLoader):
    """A SafeLoader that rejects repeated keys and reads 80e9 or 1e-6 as floats (YAML 1.2).

    PyYAML follows YAML 1.1, where a float needs a dot (8.0e9), so numbers copied from
    JSON would otherwise arrive as strings.  It also refuses alias "bombs": anchors
    referenced so often that the document expands to more than MAX_YAML_NODES values
    (aliases are resolved by reference, but every reader of the result walks the
    expansion), and reads over-long integers as :class:`LongInteger`.
    """

    def get_single_node(self):
        node = super().get_single_node()
        if node is not None:
            _expanded_size(node, {}, set())
        return node

    def construct_mapping(self, node, deep=False):
        seen = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if key in seen:
                raise _DuplicateKey(str(key))
            seen.add(key)
        return super().construct_mapping(node, deep=deep)

    def construct_yaml_int(self, node):
        digits = len(self.construct_scalar(node).replace("_", "").lstrip("+-"))
        if digits > MAX_INT_DIGITS:
            return LongInteger(digits)
        return super().construct_yaml_int(node)


_StrictYamlLoader.add_constructor("tag:yaml.org,2002:int", _StrictYamlLoader.construct_yaml_int)
_StrictYamlLoader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"""^[-+]?(?:[0-9][0-9_]*)(?:\.[0-9_]*)?[eE][-+]?[0-9]+$"""),
    list("-+0123456789"))


def _expanded_size(node, sizes: dict[int, int], active: set[int]) -> int:
    """Values ``node`` stands for with every alias expanded; _TooLarge past MAX_YAML_NODES."""
    key = id(node)
    if key in sizes:
        return sizes[key]
    if key in active:
        raise _TooLarge("expected YAML without recursive aliases, got an anchor inside itself")
    active.add(key)
    if isinstance(node, yaml.SequenceNode):
        children = node.value
    elif isinstance(node, yaml.MappingNode):
        children = [child for pair in node.value for child in pair]
    else:
        children = []
    size = 1 + sum(_expanded_size(child, sizes, active) for child in children)
    active.discard(key)
    if size > MAX_YAML_NODES:
        raise _TooLarge(f"expected at most {MAX_YAML_NODES} values with YAML aliases expanded, "
                        f"got more (an alias bomb?)")
    sizes[key] = size
    return size


def write_document(data: Any, path: str | FsPath) -> None:
    """Write JSON, or YAML when the extension says so; written to a temp file then renamed."""
    path = FsPath(path)
    if path.suffix.lower() in (".yaml", ".yml"):
        text = yaml.safe_dump(data, sort_keys=False)
    else:
        text = json.dumps(data, indent=1) + "\n"
    tmp = path.with_name(path.name + ".tmp")
    try:
        tmp.write_text(text, encoding="utf-8")
        tmp.replace(path)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise NestCpError(f"{path}: cannot write ({exc.strerror or exc})") from None


# ------------------------------------------------------------------ field readers


class _Reader:
    """Typed access to a parsed document that reports errors with file and field path."""

    def __init__(self, file: str | None, error: type[InstanceFormatError]):
        self.file = file
        self.error = error

    def fail(self, field: str, expected: str, got: Any) -> None:
        raise self.error(f"expected {expected}, got {_show(got)}", file=self.file, field=field)

    def mapping(self, value: Any, field: str, allowed: set[str] | None = None,
                required: tuple[str, ...] = ()) -> dict:
        if not isinstance(value, dict):
            self.fail(field, "a mapping", value)
        for key in required:
            if key not in value:
                self.fail(_join(field, key), "this field to be present", "nothing")
        if allowed is not None:
            for key in value:
                if key not in allowed:
                    self.fail(_join(field, str(key)),
                              "one of the fields " + ", ".join(sorted(allowed)), "unknown field")
        return value

    def seq(self, value: Any, field: str, nonempty: bool = True) -> list:
        if not isinstance(value, list) or (nonempty and not value):
            self.fail(field, "a non-empty list" if nonempty else "a list", value)
        return value

    def integer(self, value: Any, field: str, minimum: int = 0) -> int:
        if isinstance(value, LongInteger):
            self.fail(field, f"an integer >= {minimum} of at most {MAX_INT_DIGITS} digits", value)
        if isinstance(value, float) and math.isfinite(value) and value.is_integer():
            value = int(value)
        if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
            self.fail(field, f"an integer >= {minimum}", value)
        if value > MAX_INT:
            self.fail(field, f"an integer >= {minimum} and below 2**63 (at most "
                             f"{MAX_INT_DIGITS} digits)", value)
        return value

    def number(self, value: Any, field: str, positive: bool = False) -> float:
        ok = isinstance(value, int | float) and not isinstance(value, bool) and \
            abs(value) <= MAX_INT and math.isfinite(value) and (value > 0 if positive else
                                                               value >= 0)
        if not ok:
            self.fail(field, ("a finite number > 0" if positive else "a finite number >= 0")
                      + " below 2**63", value)
        return value

    def positive(self, value: Any, field: str) -> float:
        return self.number(value, field, positive=True)

    def boolean(self, value: Any, field: str) -> bool:
        if not isinstance(value, bool):
            self.fail(field, "true or false", value)
        return value

    def provenance(self, value: Any, field: str) -> None:
        """Where the numbers come from: a text, or a mapping of names to texts, numbers or
        lists of texts (nothing deeper, so it stays small whatever the file holds)."""
        expected = (f"a string or a mapping of at most {MAX_PROVENANCE_ENTRIES} names to "
                    f"strings, numbers or lists of strings")
        if isinstance(value, str):
            return
        if not isinstance(value, dict) or len(value) > MAX_PROVENANCE_ENTRIES:
            self.fail(field, expected, value)
        for key, entry in value.items():
            texts = entry if isinstance(entry, list) else [entry]
            if not isinstance(key, str) or len(texts) > MAX_PROVENANCE_ENTRIES or not all(
                    isinstance(text, str | int | float | bool) or text is None
                    for text in texts) or (isinstance(entry, list) and not all(
                        isinstance(text, str) for text in texts)):
                self.fail(_join(field, str(key)), expected, entry)

    def string(self, value: Any, field: str) -> str:
        if not isinstance(value, str) or not value:
            self.fail(field, "a non-empty string", value)
        return value

    def choice(self, value: Any, field: str, enum: type) -> Any:
        try:
            return enum(value)
        except ValueError:
            self.fail(field, "one of " + ", ".join(repr(e.value) for e in enum), value)

    def build(self, field: str, factory: Callable[..., Any], **kwargs: Any) -> Any:
        """Construct a model object, prefixing its own validation errors with ``field``."""
        try:
            return factory(**kwargs)
        except InstanceFormatError as exc:
            raise self.error(exc.detail, file=self.file,
                             field=_join(field, exc.field or "")) from None


def _join(prefix: str, name: str) -> str:
    if not prefix:
        return name
    if not name:
        return prefix
    return f"{prefix}{name}" if name.startswith("[") else f"{prefix}.{name}"


def _show(value: Any) -> str:
    if isinstance(value, int) and not isinstance(value, bool) and value > MAX_INT:
        return f"a {len(str(value))}-digit integer"
    text = repr(value) if not isinstance(value, dict | list) else _summary(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _summary(value: dict | list) -> str:
    """A short description of a container: never walks it (it may be an expanded alias web)."""
    count = len(value)
    if isinstance(value, dict):
        return f"a mapping of {count} {'entry' if count == 1 else 'entries'}"
    return f"a list of {count} {'item' if count == 1 else 'items'}"


# ------------------------------------------------------------------ instance


_PROFILE_FIELDS = {"tp", "ep", "microbatch", "fwd_s", "bwd_s", "dense_params", "expert_params",
                   "act_bytes", "ckpt_bytes", "out_bytes", "collectives", "flops", "wgrad_s",
                   "sel_fwd_s", "sel_act_bytes", "sel_flops", "sdp_units", "sdp_fraction"}
_OPTIONAL_SECONDS = ("flops", "wgrad_s", "sel_fwd_s", "sel_flops")  # numbers or null


def load_instance(path: str | FsPath) -> Instance:
    """Load an instance file; raise InstanceFormatError naming file and field on bad input."""
    path = FsPath(path)
    data = read_document(path)
    return instance_from_dict(data, file=str(path), base_dir=path.parent)


def instance_from_dict(data: Any, file: str | None = None,
                       base_dir: FsPath | None = None) -> Instance:
    reader = _Reader(file, InstanceFormatError)
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


def _section(reader: _Reader, value: Any, field: str, base_dir: FsPath | None,
             parse: Callable, preset: Callable, model: Callable | None = None) -> Any:
    """A section inline, as a path to another file, ``{"preset": NAME}`` or (workload) a model.

    A workload may be ``{"transformer": {...}}`` or ``{"hf_config": {...} | PATH}`` with
    profiler options beside it; the profiler expands it (nest_cp.presets).
    """
    if isinstance(value, str):
        target = (base_dir or FsPath(".")) / value
        sub = _Reader(str(target), reader.error)
        return parse(sub, read_document(target, reader.error), "")
    keys = [key for key in ("preset", *_MODEL_KEYS) if isinstance(value, dict) and key in value]
    if model is None:
        keys = [key for key in keys if key == "preset"]
    if len(keys) > 1:
        reader.fail(_join(field, keys[1]), f"only one of {', '.join(keys)}", "both")
    if keys:
        key = keys[0]
        options = {k: v for k, v in value.items() if k != key}
        try:
            if key == "preset":
                return preset(reader.string(value["preset"], _join(field, "preset")), options,
                              base_dir)
            return model(key, value[key], options, base_dir)
        except InstanceFormatError as exc:
            if exc.file is not None and exc.file != reader.file:  # inside a referenced file
                raise
            raise reader.error(exc.detail, file=reader.file,
                               field=_join(field, exc.field or key)) from None
    return parse(reader, value, field)


def _workload_preset(name: str, options: dict, training: TrainingSetup,
                     base_dir: FsPath | None) -> Workload:
    from nest_cp import presets

    return presets.workload_from_preset(name, options, training, base_dir)


def _workload_model(kind: str, value: Any, options: dict, training: TrainingSetup,
                    base_dir: FsPath | None) -> Workload:
    from nest_cp import presets

    return presets.workload_from_model(kind, value, options, training, base_dir)


def _cluster_preset(name: str, options: dict, base_dir: FsPath | None) -> Cluster:
    from nest_cp import presets

    return presets.cluster_from_preset(name, options, base_dir)


def _training(reader: _Reader, value: Any, field: str) -> TrainingSetup:
    allowed = {"global_batch", "seq_len", "microbatches", "optimizer", "zero_stages",
               "recompute", "allow_recompute", "virtual_stages", "overlap_grad_reduce",
               "schedule", "tick_s", "strategies", "sdp"}
    value = reader.mapping(value, field, allowed, ("global_batch", "seq_len"))
    kwargs: dict[str, Any] = {
        "global_batch": reader.integer(value["global_batch"], _join(field, "global_batch"), 1),
        "seq_len": reader.integer(value["seq_len"], _join(field, "seq_len"), 1),
    }
    if "microbatches" in value:
        sizes = reader.seq(value["microbatches"], _join(field, "microbatches"))
        kwargs["microbatches"] = tuple(
            reader.integer(v, _join(field, f"microbatches[{i}]"), 1) for i, v in enumerate(sizes))
    if "zero_stages" in value:
        stages = reader.seq(value["zero_stages"], _join(field, "zero_stages"))
        kwargs["zero_stages"] = tuple(
            reader.integer(v, _join(field, f"zero_stages[{i}]")) for i, v in enumerate(stages))
    if "optimizer" in value:
        opt_field = _join(field, "optimizer")
        opt = reader.mapping(value["optimizer"], opt_field,
                             {"name", "weight_bytes", "grad_bytes", "state_bytes"})
        kwargs["optimizer"] = reader.build(opt_field, Optimizer, **{
            key: (reader.string(v, _join(opt_field, key)) if key == "name"
                  else reader.integer(v, _join(opt_field, key)))
            for key, v in opt.items()})
    if "recompute" in value and "allow_recompute" in value:
        reader.fail(_join(field, "allow_recompute"),
                    "either recompute (the allowed modes) or the older allow_recompute, not both",
                    "both")
    if "recompute" in value:
        modes = reader.seq(value["recompute"], _join(field, "recompute"))
        kwargs["recompute_modes"] = tuple(
            reader.choice(v, _join(field, f"recompute[{i}]"), RecomputeMode)
            for i, v in enumerate(modes))
    if "allow_recompute" in value:  # the v1 boolean: true = none or full, false = none
        allow = reader.boolean(value["allow_recompute"], _join(field, "allow_recompute"))
        kwargs["recompute_modes"] = (RecomputeMode.NONE, RecomputeMode.FULL) if allow \
            else (RecomputeMode.NONE,)
    if "virtual_stages" in value:
        counts = reader.seq(value["virtual_stages"], _join(field, "virtual_stages"))
        kwargs["virtual_stages"] = tuple(
            reader.integer(v, _join(field, f"virtual_stages[{i}]"), 1)
            for i, v in enumerate(counts))
    if "overlap_grad_reduce" in value:
        kwargs["overlap_grad_reduce"] = reader.boolean(value["overlap_grad_reduce"],
                                                       _join(field, "overlap_grad_reduce"))
    if "schedule" in value:
        kwargs["schedule"] = reader.choice(value["schedule"], _join(field, "schedule"), Schedule)
    if "tick_s" in value:
        kwargs["tick_s"] = reader.number(value["tick_s"], _join(field, "tick_s"), positive=True)
    if "strategies" in value:
        names = reader.seq(value["strategies"], _join(field, "strategies"))
        kwargs["strategies"] = tuple(reader.choice(v, _join(field, f"strategies[{i}]"), Strategy)
                                     for i, v in enumerate(names))
    if "sdp" in value:
        kwargs["sdp"] = _sdp_setup(reader, value["sdp"], _join(field, "sdp"))
    return reader.build(field, TrainingSetup, **kwargs)


def _sdp_setup(reader: _Reader, value: Any, field: str) -> SdpSetup:
    """``{"levels", "maskings", "holders" | "coverages"}``; coverages as numbers or "p/q"."""
    value = reader.mapping(value, field, {"levels", "maskings", "holders", "coverages"})
    kwargs: dict[str, Any] = {}
    for key, enum in (("levels", SdpLevel), ("maskings", SdpMasking)):
        if key in value:
            items = reader.seq(value[key], _join(field, key))
            kwargs[key] = tuple(reader.choice(v, _join(field, f"{key}[{i}]"), enum)
                                for i, v in enumerate(items))
    if "holders" in value:
        items = reader.seq(value["holders"], _join(field, "holders"))
        kwargs["holders"] = tuple(reader.integer(v, _join(field, f"holders[{i}]"), 1)
                                  for i, v in enumerate(items))
    if "coverages" in value:
        items = reader.seq(value["coverages"], _join(field, "coverages"))
        kwargs["coverages"] = tuple(_coverage(reader, v, _join(field, f"coverages[{i}]"))
                                    for i, v in enumerate(items))
    return reader.build(field, SdpSetup, **kwargs)


def _coverage(reader: _Reader, value: Any, field: str) -> Fraction:
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


def _cluster(reader: _Reader, value: Any, field: str) -> Cluster:
    value = reader.mapping(value, field, {"name", "num_devices", "hbm_bytes", "hbm_reserve",
                                          "network", "provenance", "peak_flops_per_s"},
                           ("num_devices", "hbm_bytes", "network"))
    if "provenance" in value:
        reader.provenance(value["provenance"], _join(field, "provenance"))
    net_field = _join(field, "network")
    net = reader.mapping(value["network"], net_field, None, ("kind",))
    kind = net["kind"]
    if kind == "hierarchical":
        reader.mapping(net, net_field, {"kind", "tiers"}, ("tiers",))
        tiers = []
        for index, tier in enumerate(reader.seq(net["tiers"], _join(net_field, "tiers"))):
            tier_field = _join(net_field, f"tiers[{index}]")
            tier = reader.mapping(tier, tier_field, {"name", "size", "bandwidth_Bps", "latency_s"},
                                  ("size", "bandwidth_Bps", "latency_s"))
            tiers.append(reader.build(
                tier_field, Tier, name=reader.string(tier.get("name", f"tier{index}"),
                                                     _join(tier_field, "name")),
                size=reader.integer(tier["size"], _join(tier_field, "size"), 1),
                bandwidth_Bps=reader.number(tier["bandwidth_Bps"],
                                            _join(tier_field, "bandwidth_Bps"), positive=True),
                latency_s=reader.number(tier["latency_s"], _join(tier_field, "latency_s"))))
        network: Any = HierarchicalNetwork(tuple(tiers))
    elif kind == "graph":
        reader.mapping(net, net_field, {"kind", "switches", "links"}, ("links",))
        switches = tuple(reader.string(s, _join(net_field, f"switches[{i}]"))
                         for i, s in enumerate(reader.seq(net.get("switches", []),
                                                          _join(net_field, "switches"), False)))
        links = []
        for index, link in enumerate(reader.seq(net["links"], _join(net_field, "links"))):
            link_field = _join(net_field, f"links[{index}]")
            link = reader.mapping(link, link_field, {"a", "b", "bandwidth_Bps", "latency_s"},
                                  ("a", "b", "bandwidth_Bps", "latency_s"))
            ends = {}
            for end in ("a", "b"):
                node = link[end]
                if not (isinstance(node, str) or (isinstance(node, int)
                                                  and not isinstance(node, bool))):
                    reader.fail(_join(link_field, end), "a device id or a switch name", node)
                ends[end] = node
            links.append(reader.build(
                link_field, Link, a=ends["a"], b=ends["b"],
                bandwidth_Bps=reader.number(link["bandwidth_Bps"],
                                            _join(link_field, "bandwidth_Bps"), positive=True),
                latency_s=reader.number(link["latency_s"], _join(link_field, "latency_s"))))
        network = reader.build(net_field, GraphNetwork, switches=switches, links=tuple(links))
    else:
        reader.fail(_join(net_field, "kind"), "'hierarchical' or 'graph'", kind)
    return reader.build(
        field, Cluster,
        num_devices=reader.integer(value["num_devices"], _join(field, "num_devices"), 1),
        hbm_bytes=reader.integer(value["hbm_bytes"], _join(field, "hbm_bytes"), 1),
        hbm_reserve=reader.number(value.get("hbm_reserve", 0.0), _join(field, "hbm_reserve")),
        network=network, name=reader.string(value.get("name", "cluster"), _join(field, "name")),
        peak_flops_per_s=_optional(value, "peak_flops_per_s", field, reader.positive))


def _workload(reader: _Reader, value: Any, field: str) -> Workload:
    value = reader.mapping(value, field, {"name", "layers", "provenance"}, ("layers",))
    if "provenance" in value:
        reader.provenance(value["provenance"], _join(field, "provenance"))
    layers: list[Layer] = []
    for index, layer in enumerate(reader.seq(value["layers"], _join(field, "layers"))):
        layer_field = _join(field, f"layers[{index}]")
        layer = reader.mapping(layer, layer_field, {"name", "repeat", "profiles"},
                               ("name", "profiles"))
        name = reader.string(layer["name"], _join(layer_field, "name"))
        repeat = reader.integer(layer.get("repeat", 1), _join(layer_field, "repeat"), 1)
        if len(layers) + repeat > MAX_LAYERS:
            reader.fail(_join(layer_field, "repeat"), f"at most {MAX_LAYERS} layers in all",
                        len(layers) + repeat)
        profiles = {}
        for p_index, raw in enumerate(reader.seq(layer["profiles"],
                                                 _join(layer_field, "profiles"))):
            p_field = _join(layer_field, f"profiles[{p_index}]")
            key, profile = _profile(reader, raw, p_field)
            if key in profiles:
                reader.fail(p_field, "one profile per (tp, ep, microbatch)",
                            f"a second profile for tp={key[0].tp}, ep={key[0].ep}, "
                            f"microbatch={key[1]}")
            profiles[key] = profile
        built = reader.build(layer_field, Layer, name=name, profiles=profiles)
        layers.extend([built] if repeat == 1 else
                      [Layer(f"{name}[{i}]", profiles) for i in range(repeat)])
    return reader.build(field, Workload,
                        name=reader.string(value.get("name", "workload"), _join(field, "name")),
                        layers=tuple(layers))


def _profile(reader: _Reader, raw: Any, field: str) -> tuple[tuple[IntraConfig, int], LayerProfile]:
    raw = reader.mapping(raw, field, _PROFILE_FIELDS,
                         ("fwd_s", "bwd_s", "act_bytes", "ckpt_bytes", "out_bytes"))
    config = reader.build(field, IntraConfig,
                          tp=reader.integer(raw.get("tp", 1), _join(field, "tp"), 1),
                          ep=reader.integer(raw.get("ep", 1), _join(field, "ep"), 1))
    microbatch = reader.integer(raw.get("microbatch", 1), _join(field, "microbatch"), 1)
    collectives = []
    for index, coll in enumerate(reader.seq(raw.get("collectives", []),
                                            _join(field, "collectives"), False)):
        c_field = _join(field, f"collectives[{index}]")
        coll = reader.mapping(coll, c_field, {"kind", "volume_bytes", "group", "phase"},
                              ("kind", "volume_bytes", "group", "phase"))
        collectives.append(Collective(
            kind=reader.choice(coll["kind"], _join(c_field, "kind"), CollectiveKind),
            volume_bytes=reader.integer(coll["volume_bytes"], _join(c_field, "volume_bytes")),
            group=reader.choice(coll["group"], _join(c_field, "group"), CollectiveGroup),
            phase=reader.choice(coll["phase"], _join(c_field, "phase"), Phase)))
    profile = reader.build(
        field, LayerProfile,
        fwd_s=reader.number(raw["fwd_s"], _join(field, "fwd_s")),
        bwd_s=reader.number(raw["bwd_s"], _join(field, "bwd_s")),
        dense_params=reader.integer(raw.get("dense_params", 0), _join(field, "dense_params")),
        expert_params=reader.integer(raw.get("expert_params", 0), _join(field, "expert_params")),
        act_bytes=reader.integer(raw["act_bytes"], _join(field, "act_bytes")),
        ckpt_bytes=reader.integer(raw["ckpt_bytes"], _join(field, "ckpt_bytes")),
        out_bytes=reader.integer(raw["out_bytes"], _join(field, "out_bytes")),
        collectives=tuple(collectives),
        sel_act_bytes=_optional(raw, "sel_act_bytes", field, reader.integer),
        sdp_units=reader.integer(raw.get("sdp_units", 0), _join(field, "sdp_units")),
        sdp_fraction=reader.number(raw.get("sdp_fraction", 0.0), _join(field, "sdp_fraction")),
        **{name: _optional(raw, name, field, reader.number) for name in _OPTIONAL_SECONDS})
    return (config, microbatch), profile


def _optional(raw: dict, name: str, field: str, read: Callable[[Any, str], Any]) -> Any:
    """An optional profile field: absent or null is None, else read and checked."""
    value = raw.get(name)
    return None if value is None else read(value, _join(field, name))


# ------------------------------------------------------------------ writing instances


def instance_to_dict(instance: Instance) -> dict:
    """The inline JSON form of an instance (presets expanded)."""
    return {
        "name": instance.name,
        "workload": workload_to_dict(instance.workload),
        "cluster": cluster_to_dict(instance.cluster),
        "training": training_to_dict(instance.training),
    }


def save_instance(instance: Instance, path: str | FsPath) -> None:
    write_document(instance_to_dict(instance), path)


def training_to_dict(training: TrainingSetup) -> dict:
    opt = training.optimizer
    return {
        "global_batch": training.global_batch, "seq_len": training.seq_len,
        "microbatches": list(training.microbatches),
        "optimizer": {"name": opt.name, "weight_bytes": opt.weight_bytes,
                      "grad_bytes": opt.grad_bytes, "state_bytes": opt.state_bytes},
        "zero_stages": list(training.zero_stages),
        "recompute": [mode.value for mode in training.recompute_modes],
        "virtual_stages": list(training.virtual_stages),
        "overlap_grad_reduce": training.overlap_grad_reduce,
        "schedule": training.schedule.value, "tick_s": training.tick_s,
        **_strategies_to_dict(training),
    }


def _strategies_to_dict(training: TrainingSetup) -> dict:
    """``strategies`` and ``sdp``, written only when SDP is allowed (older files unchanged)."""
    if training.strategies == (Strategy.DP,) and training.sdp == SdpSetup():
        return {}
    sdp: dict[str, Any] = {"levels": [level.value for level in training.sdp.levels],
                           "maskings": [masking.value for masking in training.sdp.maskings]}
    if training.sdp.holders:
        sdp["holders"] = list(training.sdp.holders)
    if training.sdp.coverages:
        sdp["coverages"] = [str(c) if c.denominator > 1 else int(c)
                            for c in training.sdp.coverages]
    return {"strategies": [strategy.value for strategy in training.strategies], "sdp": sdp}


def cluster_to_dict(cluster: Cluster) -> dict:
    network = cluster.network
    if isinstance(network, HierarchicalNetwork):
        net = {"kind": "hierarchical", "tiers": [
            {"name": t.name, "size": t.size, "bandwidth_Bps": t.bandwidth_Bps,
             "latency_s": t.latency_s} for t in network.tiers]}
    else:
        net = {"kind": "graph", "switches": list(network.switches), "links": [
            {"a": link.a, "b": link.b, "bandwidth_Bps": link.bandwidth_Bps,
             "latency_s": link.latency_s} for link in network.links]}
    data = {"name": cluster.name, "num_devices": cluster.num_devices,
            "hbm_bytes": cluster.hbm_bytes, "hbm_reserve": cluster.hbm_reserve, "network": net}
    if cluster.peak_flops_per_s is not None:
        data["peak_flops_per_s"] = cluster.peak_flops_per_s
    return data


def workload_to_dict(workload: Workload) -> dict:
    layers: list[dict] = []
    previous = None
    for layer in workload.layers:
        if previous is not None and layer.profiles == previous.profiles and layers:
            layers[-1]["repeat"] = layers[-1].get("repeat", 1) + 1
            continue
        layers.append({"name": layer.name.split("[")[0],
                       "profiles": [_profile_to_dict(c, b, p) for (c, b), p in sorted(
                           layer.profiles.items(), key=lambda kv: (kv[0][0].tp, kv[0][0].ep,
                                                                   kv[0][1]))]})
        previous = layer
    return {"name": workload.name, "layers": layers}


def _profile_to_dict(config: IntraConfig, microbatch: int, p: LayerProfile) -> dict:
    data = {"tp": config.tp, "ep": config.ep, "microbatch": microbatch, "fwd_s": p.fwd_s,
            "bwd_s": p.bwd_s, "dense_params": p.dense_params, "expert_params": p.expert_params,
            "act_bytes": p.act_bytes, "ckpt_bytes": p.ckpt_bytes, "out_bytes": p.out_bytes,
            "collectives": [{"kind": c.kind.value, "volume_bytes": c.volume_bytes,
                             "group": c.group.value, "phase": c.phase.value}
                            for c in p.collectives]}
    optional = {"flops": p.flops, "wgrad_s": p.wgrad_s, "sel_fwd_s": p.sel_fwd_s,
                "sel_act_bytes": p.sel_act_bytes, "sel_flops": p.sel_flops}
    data.update({name: value for name, value in optional.items() if value is not None})
    if p.sdp_units:
        data.update(sdp_units=p.sdp_units, sdp_fraction=p.sdp_fraction)
    return data


# ------------------------------------------------------------------ plans


def plan_to_dict(plan: Plan) -> dict:
    data = {"config": {"tp": plan.config.tp, "ep": plan.config.ep},
            "microbatch": plan.microbatch, "zero": plan.zero,
            "virtual_stages": plan.virtual_stages,
            "stages": [{"first_layer": s.first_layer, "last_layer": s.last_layer,
                        "recompute": s.recompute.value} for s in plan.stages],
            "dp": plan.num_replicas}
    if plan.placement is not None:
        data["placement"] = [[list(ranks) for ranks in replicas] for replicas in plan.placement]
    if plan.sdp is not None:
        data["strategy"] = plan.strategy.value
        data["sdp"] = {"level": plan.sdp.level.value, "masking": plan.sdp.masking.value,
                       "holders": plan.sdp.holders,
                       "mask": [list(units) for units in plan.sdp.mask]}
    return data


def save_plan(plan: Plan, path: str | FsPath) -> None:
    write_document(plan_to_dict(plan), path)


def load_plan(path: str | FsPath) -> Plan:
    path = FsPath(path)
    return plan_from_dict(read_document(path, PlanFormatError), file=str(path))


def plan_from_dict(data: Any, file: str | None = None) -> Plan:
    reader = _Reader(file, PlanFormatError)
    reader.mapping(data, "", {"config", "microbatch", "zero", "stages", "dp", "placement",
                              "virtual_stages", "strategy", "sdp"}, ("stages",))
    config_raw = reader.mapping(data.get("config", {}), "config", {"tp", "ep"})
    config = reader.build("config", IntraConfig,
                          tp=reader.integer(config_raw.get("tp", 1), "config.tp", 1),
                          ep=reader.integer(config_raw.get("ep", 1), "config.ep", 1))
    stages = []
    for index, stage in enumerate(reader.seq(data["stages"], "stages")):
        s_field = f"stages[{index}]"
        stage = reader.mapping(stage, s_field, {"first_layer", "last_layer", "recompute"},
                               ("first_layer", "last_layer"))
        stages.append(Stage(
            first_layer=reader.integer(stage["first_layer"], _join(s_field, "first_layer")),
            last_layer=reader.integer(stage["last_layer"], _join(s_field, "last_layer")),
            recompute=_recompute_mode(reader, stage.get("recompute", "none"),
                                      _join(s_field, "recompute"))))
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


def _sdp_mask(reader: _Reader, value: Any, field: str) -> SdpMask:
    """``{"level", "masking", "holders", "mask": [[units of worker 0], ...]}``."""
    value = reader.mapping(value, field, {"level", "masking", "holders", "mask"},
                           ("level", "masking", "holders", "mask"))
    rows = reader.seq(value["mask"], _join(field, "mask"))
    mask = tuple(tuple(reader.integer(unit, f"{field}.mask[{w}][{k}]")
                       for k, unit in enumerate(reader.seq(row, f"{field}.mask[{w}]", False)))
                 for w, row in enumerate(rows))
    return reader.build(
        field, SdpMask, level=reader.choice(value["level"], _join(field, "level"), SdpLevel),
        masking=reader.choice(value["masking"], _join(field, "masking"), SdpMasking),
        holders=reader.integer(value["holders"], _join(field, "holders"), 1), mask=mask)


def _recompute_mode(reader: _Reader, value: Any, field: str) -> RecomputeMode:
    """A stage's mode "none", "selective" or "full"; the v1 booleans true / false: full / none."""
    if isinstance(value, bool):
        return RecomputeMode.FULL if value else RecomputeMode.NONE
    return reader.choice(value, field, RecomputeMode)
