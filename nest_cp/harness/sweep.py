"""Network co-design sweeps: what network a model needs, with a certificate per point.

``nest-cp sweep INSTANCE --vary PARAM=VALUES [--vary PARAM=VALUES] --out DIR`` replaces one
or two network or cluster parameters of INSTANCE over a grid (the product of the two value
lists) and, at every point:

- plans with the DP and prices its plan with the evaluator (docs/cost-model.md): the plan's
  degrees t/e/p/d/z/b/v, the iteration time, throughput in samples and tokens per second,
  and MFU where the profiles carry FLOPs and the cluster a peak;
- certifies the optimum over the full space of plans as an interval [bound, best]: on points
  of at most :data:`EXACT_MAX_DEVICES` devices (the size of the largest instance
  ``nest-cp verify`` certifies with its exact backends, instances/small) CP-SAT over the full
  space, hinted with the DP plan; at scale the full-space certificate of ``nest-cp verify
  --certify-full`` (:func:`nest_cp.verify.fullcert.certify_instance`); each with one worker,
  a fixed seed and the time limit per point.  The status says what was proven: OPTIMAL
  (bound = best), FEASIBLE (a bound below the best plan: the time ran out), open (no bound),
  INFEASIBLE (no plan fits), ERROR (a backend failed, or a bound lies above a plan);
- with prices, the point's cost and whether it lies on the Pareto front of cost against the
  DP plan's throughput.

Every point's instance is written to ``DIR/instances/`` before anything is solved, so a
point can be rerun alone (``nest-cp solve``, ``nest-cp verify --certify-full``); every
solve is cached by :mod:`nest_cp.verify.cache` (keyed by the instance's content, the
options and the code), so an interrupted sweep resumes and a repeated one solves nothing.
A bad sweep (an unknown parameter or tier, an empty range, a value the field cannot take)
is a :class:`NestCpError` naming ``--vary`` before any point is built.
"""

from __future__ import annotations

import logging
import math
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from enum import Enum
from fractions import Fraction
from pathlib import Path

from nest_cp.cost import terms as cost
from nest_cp.cost.evaluate import evaluate
from nest_cp.harness.executors import Done, Executor, run_ordered
from nest_cp.io.readers import load_instance, plan_from_dict
from nest_cp.io.writers import plan_to_dict, save_instance
from nest_cp.model.errors import InstanceFormatError, NestCpError
from nest_cp.model.instance import Cluster, GraphNetwork, HierarchicalNetwork, Instance
from nest_cp.model.limits import MAX_INT
from nest_cp.model.plan import Plan
from nest_cp.model.progress import Progress
from nest_cp.model.result import Space
from nest_cp.solvers.certify import unsupported
from nest_cp.verify import tables
from nest_cp.verify.cache import DEFAULT_CACHE_DIR, ResultCache, code_fingerprint, instance_digest
from nest_cp.verify.fullcert import FullCertOptions, certify_instance
from nest_cp.verify.harness import HarnessOptions, backend_available, run_backend

LOGGER = logging.getLogger(__name__)

EXACT_MAX_DEVICES = 16   # the largest instance of instances/small, certified exactly by verify
MAX_AXES = 2
MAX_VALUES = 100         # values of one axis
DEFAULT_TIME_LIMIT_S = 20.0
GB = 10**9               # prices are per GB/s (10^9 bytes per second)
LINKS = "links"          # the scope of a graph network's links
POINTS_DIR = "instances"
OUTPUTS = ("sweep.json", "sweep.csv", "sweep.md", "sweep.tex", "sweep.png")
TIER_FIELDS = ("bandwidth_Bps", "latency_s", "efficiency", "size")
LINK_FIELDS = ("bandwidth_Bps", "latency_s", "efficiency")
CLUSTER_FIELDS = ("devices", "hbm_bytes")
_NUMBER = re.compile(r"[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?")
_INTEGRAL = ("size", "devices", "hbm_bytes")
# what each field accepts, in the words of the error message
_EXPECTED = {"bandwidth_Bps": ("bandwidths > 0 B/s", lambda v: v > 0),
             "latency_s": ("latencies >= 0 s", lambda v: v >= 0),
             "efficiency": ("efficiencies in (0, 1]", lambda v: 0 < v <= 1),
             "size": ("integer tier sizes >= 1", lambda v: v >= 1 and v.denominator == 1),
             "devices": ("an integer device count >= 1", lambda v: v >= 1 and v.denominator == 1),
             "hbm_bytes": ("integer HBM bytes in [1, 2**63 - 1]",
                           lambda v: 1 <= v <= MAX_INT and v.denominator == 1)}


class Certifier(str, Enum):
    """How a point's interval is proven: by size (auto), CP-SAT, or the full-space certificate."""

    AUTO = "auto"
    EXACT = "exact"
    FULL = "full"


@dataclass(frozen=True, slots=True)
class Parameter:
    """``field`` of the tier named ``scope``, of every graph link (scope ``links``), or of the
    cluster (scope None: ``devices``, ``hbm_bytes``)."""

    scope: str | None
    field: str

    @property
    def name(self) -> str:
        return self.field if self.scope is None else f"{self.scope}.{self.field}"


@dataclass(frozen=True, slots=True)
class Axis:
    """One ``--vary``: its values as written; ``relative`` ones multiply the instance's own."""

    parameter: Parameter
    values: tuple[Fraction, ...]
    labels: tuple[str, ...]
    relative: bool


@dataclass(frozen=True, slots=True)
class Point:
    """One grid point: the instance it makes and each axis's setting there (parameter,
    label as written, x as written, and the values the parameter takes)."""

    index: int
    settings: tuple[dict, ...]
    instance: Instance


@dataclass(frozen=True, slots=True)
class SweepOptions:
    """The protocol of one sweep; ``use_cache=False`` solves every point again."""

    time_limit_s: float = DEFAULT_TIME_LIMIT_S  # a wall-clock cap when work_limit is set
    seed: int = 0
    certify: Certifier = Certifier.AUTO
    work_limit: float | None = None  # work units per point's certificate (budget.Work)
    cache_dir: Path = DEFAULT_CACHE_DIR
    use_cache: bool = True

    def certifier(self, instance: Instance) -> Certifier:
        """EXACT or FULL for this point (AUTO decides by its device count)."""
        if self.certify is not Certifier.AUTO:
            return self.certify
        small = instance.cluster.num_devices <= EXACT_MAX_DEVICES
        return Certifier.EXACT if small else Certifier.FULL


@dataclass(frozen=True, slots=True)
class PointTask:
    """One point's instance file and how to certify it: the unit an executor runs."""

    path: Path
    certifier: Certifier
    options: SweepOptions


# ------------------------------------------------------------------ parsing


def _bad(option: str, expected: str) -> NestCpError:
    return NestCpError(f"{option}: expected {expected}")


def parse_parameter(name: str, cluster: Cluster, option: str) -> Parameter:
    """The parameter ``name`` names on this cluster's network (NestCpError naming the option)."""
    network = cluster.network
    scope, dot, field = name.rpartition(".")
    if isinstance(network, HierarchicalNetwork):
        tiers = [tier.name for tier in network.tiers]
        known = (f"<tier>.{'|'.join(TIER_FIELDS)} (tiers: {', '.join(tiers)}), "
                 f"{' or '.join(CLUSTER_FIELDS)}")
        if dot and scope in tiers and field in TIER_FIELDS:
            if tiers.count(scope) > 1:
                raise _bad(option, f"a tier name used once, got {scope!r} {tiers.count(scope)} "
                                   f"times")
            return Parameter(scope, field)
        if dot and scope not in tiers:
            raise _bad(option, f"a parameter among {known}; got unknown tier {scope!r}")
    else:
        known = f"{LINKS}.{'|'.join(LINK_FIELDS)} or hbm_bytes (a graph network has no tiers)"
        if dot and scope == LINKS and field in LINK_FIELDS:
            return Parameter(LINKS, field)
        if name == "devices":
            raise _bad(option, f"a parameter among {known}; a graph's links name its devices, "
                               f"so its device count cannot vary")
    if not dot and name in CLUSTER_FIELDS:
        return Parameter(None, name)
    raise _bad(option, f"a parameter among {known}; got {name!r}")


def _term(text: str, option: str) -> tuple[Fraction, bool]:
    """A number (``25e9``) or a multiplier (``0.5x``), exactly; and whether it is relative."""
    text = text.strip()
    relative = text[-1:] in ("x", "X")
    number = text[:-1] if relative else text
    if not _NUMBER.fullmatch(number):
        raise _bad(option, f"numbers (25e9) or multipliers of the instance's value (0.5x), "
                           f"got {text!r}")
    value = Fraction(number)
    try:
        float(value)
    except OverflowError:
        raise _bad(option, f"finite numbers, got {text!r}") from None
    return value, relative


def _label(value: Fraction, relative: bool) -> str:
    return f"{float(value):.6g}" + ("x" if relative else "")


def _range(text: str, option: str) -> list[tuple[Fraction, bool, str]]:
    """``START:STOP:STEP`` (arithmetic, STOP included when reached) or ``START:STOP*FACTOR``
    (geometric: START, START·FACTOR, ... up to STOP)."""
    parts = text.split(":")
    geometric = len(parts) == 2 and "*" in parts[1]
    if not (len(parts) == 3 or geometric):
        raise _bad(option, f"VALUES as a comma list, START:STOP:STEP or START:STOP*FACTOR, "
                           f"got {text!r}")
    start, relative = _term(parts[0], option)
    stop_text, factor_text = parts[1].split("*", 1) if geometric else (parts[1], None)
    stop, stop_relative = _term(stop_text, option)
    if stop_relative != relative:
        raise _bad(option, f"START and STOP both numbers or both multipliers, got {text!r}")
    if start > stop:
        raise _bad(option, f"a non-empty range (START <= STOP), got {text!r}")
    if geometric:
        factor, factor_relative = _term(factor_text, option)
        if factor_relative or factor <= 1 or start <= 0:
            raise _bad(option, f"a geometric range with START > 0 and a plain FACTOR > 1, "
                               f"got {text!r}")
        count = math.floor(math.log(stop / start) / math.log(factor) + 1e-9) + 1
    else:
        step, step_relative = _term(parts[2], option)
        if (step_relative and not relative) or step <= 0:
            raise _bad(option, f"STEP > 0 (a multiplier only with multiplied ends), "
                               f"got {text!r}")
        count = math.floor((stop - start) / step) + 1
    if count > MAX_VALUES:
        raise _bad(option, f"at most {MAX_VALUES} values per parameter, got {count} from "
                           f"{text!r}")
    values = [start * factor ** k for k in range(count)] if geometric else \
        [start + k * step for k in range(count)]
    values = [value for value in values if value <= stop]  # guards the float log above
    return [(value, relative, _label(value, relative)) for value in values]


def parse_axis(text: str, instance: Instance) -> Axis:
    """``PARAM=VALUES`` of one ``--vary`` on ``instance``, every value checked for its field."""
    name, equals, values_text = text.partition("=")
    option = f"--vary {name.strip() or text}"
    if not equals or not name.strip() or not values_text.strip():
        raise _bad("--vary", f"PARAM=VALUES (e.g. leaf.bandwidth_Bps=0.5x,1x,2x), got {text!r}")
    parameter = parse_parameter(name.strip(), instance.cluster, option)
    if ":" in values_text:
        written = _range(values_text.strip(), option)
    else:
        items = values_text.split(",")
        if any(not item.strip() for item in items):
            raise _bad(option, f"comma-separated values without empty items, got "
                               f"{values_text!r}")
        written = [(*_term(item, option), item.strip()) for item in items]
    if len(written) > MAX_VALUES:
        raise _bad(option, f"at most {MAX_VALUES} values per parameter, got {len(written)}")
    if len({relative for _, relative, _ in written}) > 1:
        raise _bad(option, f"all values as numbers or all as multipliers (2x), got both in "
                           f"{values_text!r}")
    values = [value for value, _, _ in written]
    if len(set(values)) != len(values):
        raise _bad(option, f"distinct values, got {values_text!r}")
    axis = Axis(parameter, tuple(values), tuple(label for _, _, label in written),
                written[0][1])
    expected, accepts = _EXPECTED[parameter.field]
    for value, label in zip(axis.values, axis.labels):
        for resolved in _resolved(instance.cluster, parameter, value, axis.relative):
            if not accepts(resolved):
                raise _bad(option, f"{expected}, got {label}"
                                   + (f" = {float(resolved):g}" if axis.relative else ""))
    return axis


def parse_prices(texts: Sequence[str], cluster: Cluster) -> dict[str, float]:
    """``TIER=COST`` of every ``--price`` (``links=COST`` on a graph): cost per GB/s."""
    network = cluster.network
    scopes = [t.name for t in network.tiers] if isinstance(network, HierarchicalNetwork) \
        else [LINKS]
    prices: dict[str, float] = {}
    for text in texts:
        scope, equals, value = text.partition("=")
        option = f"--price {text}"
        if not equals or scope.strip() not in scopes:
            raise _bad(option, f"TIER=COST_PER_GBPS with TIER among {', '.join(scopes)}")
        if scope.strip() in prices:
            raise _bad(option, f"each tier priced once, got {scope.strip()!r} twice")
        amount, relative = _term(value, option) if value.strip() else (None, False)
        if amount is None or relative or amount < 0:
            raise _bad(option, f"a cost >= 0 per GB/s, got {value!r}")
        prices[scope.strip()] = float(amount)
    return prices


# ------------------------------------------------------------------ the grid


def _bases(cluster: Cluster, parameter: Parameter) -> list[Fraction]:
    """The instance's own values of ``parameter`` (one per link for ``links``)."""
    network = cluster.network
    if parameter.scope == LINKS:
        return [Fraction(str(getattr(link, parameter.field))) for link in network.links]
    if parameter.scope is None:
        own = cluster.num_devices if parameter.field == "devices" else cluster.hbm_bytes
        return [Fraction(own)]
    tier = next(t for t in network.tiers if t.name == parameter.scope)
    return [Fraction(str(getattr(tier, parameter.field)))]


def _resolved(cluster: Cluster, parameter: Parameter, value: Fraction,
              relative: bool) -> list[Fraction]:
    """The values ``parameter`` takes at this point (one per link for ``links``)."""
    bases = _bases(cluster, parameter)
    return [base * value for base in bases] if relative else [value] * len(bases)


def _number(field: str, value: Fraction) -> int | float:
    return int(value) if field in _INTEGRAL else float(value)


def point_cluster(cluster: Cluster, settings: Sequence[tuple[Axis, int]]) -> Cluster:
    """The cluster with each axis at its value; the outermost tier covers the devices.

    When the device count or a tier size is swept and the outermost tier's size is not,
    the outermost tier's size becomes ⌈N / devices of one domain below it⌉, as the network
    presets size it; every other field is as in the instance.
    """
    network, devices, hbm = cluster.network, cluster.num_devices, cluster.hbm_bytes
    tiers = list(network.tiers) if isinstance(network, HierarchicalNetwork) else None
    links = list(network.links) if isinstance(network, GraphNetwork) else None
    for axis, position in settings:
        parameter = axis.parameter
        values = _resolved(cluster, parameter, axis.values[position], axis.relative)
        if parameter.scope == LINKS:
            links = [replace(link, **{parameter.field: float(value)})
                     for link, value in zip(links, values)]
        elif parameter.field == "devices":
            devices = int(values[0])
        elif parameter.field == "hbm_bytes":
            hbm = int(values[0])
        else:
            index = next(i for i, t in enumerate(tiers) if t.name == parameter.scope)
            tiers[index] = replace(tiers[index], **{
                parameter.field: _number(parameter.field, values[0])})
    if tiers is None:
        return replace(cluster, hbm_bytes=hbm, network=replace(network, links=tuple(links)))
    swept = {(axis.parameter.scope, axis.parameter.field) for axis, _ in settings}
    resized = any(field in ("devices", "size") for _, field in swept)
    if resized and (tiers[-1].name, "size") not in swept:
        below = math.prod(tier.size for tier in tiers[:-1])
        tiers[-1] = replace(tiers[-1], size=-(-devices // below))
    return replace(cluster, num_devices=devices, hbm_bytes=hbm,
                   network=HierarchicalNetwork(tuple(tiers)))


def build_points(instance: Instance, axes: Sequence[Axis]) -> list[Point]:
    """Every point of the grid (the first axis outermost), each instance validated now.

    A point's instance keeps the instance's name: equal content is one cache entry, so the
    1x points of two sweeps (and ``nest-cp verify`` of the instance itself) solve once.
    """
    grid = [()]
    for axis in axes:
        grid = [(*positions, k) for positions in grid for k in range(len(axis.values))]
    points = []
    for index, positions in enumerate(grid):
        settings = list(zip(axes, positions))
        text = ", ".join(f"{axis.parameter.name}={axis.labels[k]}" for axis, k in settings)
        try:
            cluster = point_cluster(instance.cluster, settings)
            point = replace(instance, cluster=cluster)
        except InstanceFormatError as exc:
            raise _bad(f"--vary {text}", f"a valid instance at this point; {exc}") from None
        described = tuple({"parameter": axis.parameter.name, "label": axis.labels[k],
                           "x": float(axis.values[k]), "relative": axis.relative,
                           "values": sorted({float(v) for v in _resolved(
                               instance.cluster, axis.parameter, axis.values[k],
                               axis.relative)})} for axis, k in settings)
        points.append(Point(index, described, point))
    return points


def point_id(index: int, count: int) -> str:
    """``p03``: the point's file name in DIR/instances (as wide as the largest index)."""
    return f"p{index:0{len(str(max(count - 1, 1)))}d}"


def write_points(points: Sequence[Point], out_dir: Path) -> list[Path]:
    """Each point's instance as DIR/instances/<id>.json (through the safe writer)."""
    folder = out_dir / POINTS_DIR
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise NestCpError(f"{folder}: expected a directory for the points' instances "
                          f"({exc.strerror or exc})") from None
    paths = [folder / f"{point_id(p.index, len(points))}.json" for p in points]
    for point, path in zip(points, paths):
        save_instance(point.instance, path)
    return paths


def cluster_cost(cluster: Cluster, prices: dict[str, float],
                 device_price: float | None) -> float | None:
    """N · (device price + Σ price(tier) · per-device bandwidth in GB/s) on tiers; on a graph
    price(links) · Σ link bandwidth in GB/s; None without any price."""
    if not prices and device_price is None:
        return None
    total = (device_price or 0.0) * cluster.num_devices
    network = cluster.network
    if isinstance(network, HierarchicalNetwork):
        total += sum(prices.get(tier.name, 0.0) * tier.bandwidth_Bps / GB
                     for tier in network.tiers) * cluster.num_devices
    else:
        total += prices.get(LINKS, 0.0) * sum(link.bandwidth_Bps for link in network.links) / GB
    return total


def pareto_front(records: Sequence[dict]) -> list[bool]:
    """Whether each record is on the front of cost (lower is better) against the DP plan's
    throughput (higher is better): no other point is at least as good in both and better in
    one.  Points without a cost or a plan are never on it."""
    scored = [(r["cost"], r["dp"]["samples_per_s"]) for r in records]

    def dominated(cost_, speed) -> bool:
        return any(c is not None and s is not None and c <= cost_ and s >= speed
                   and (c < cost_ or s > speed) for c, s in scored)

    return [c is not None and s is not None and not dominated(c, s) for c, s in scored]


# ------------------------------------------------------------------ one point


def run_point(task: PointTask) -> dict:
    """One point's record: the DP plan priced, the certificate and the interval it proves."""
    instance = load_instance(task.path)
    began = time.monotonic()
    reason = unsupported(instance) if task.certifier is Certifier.FULL else None
    if task.certifier is Certifier.FULL and reason is None:
        found = _certified_at_scale(task)
    else:
        found = _certified_exactly(instance, task.options, with_exact=reason is None)
        if reason is not None:
            found["certificate"]["message"] = f"no full-space bound: {reason}"
    return _record(instance, found, time.monotonic() - began)


def _certified_exactly(instance: Instance, options: SweepOptions, with_exact: bool) -> dict:
    """The DP and (``with_exact``) CP-SAT over the full space, each cached as verify caches it."""
    harness = HarnessOptions(backends=("dp", "cpsat"), time_limit_s=options.time_limit_s,
                             work_limit=options.work_limit, seed=options.seed,
                             cache_dir=options.cache_dir,
                             use_cache=options.use_cache)
    cache = ResultCache(options.cache_dir, options.use_cache)
    sha, code = instance_digest(instance), code_fingerprint()
    dp, dp_plan = run_backend(instance, sha, "dp", harness.solve_options(Space.STRUCTURED, None),
                              cache, code)
    sources = [dp["source"]]
    certificate = {"by": "none", "status": "UNKNOWN", "objective_ticks": None,
                   "bound_ticks": None, "message": ""}
    if with_exact:
        exact, _ = run_backend(instance, sha, "cpsat", harness.solve_options(Space.FULL, dp_plan),
                               cache, code)
        sources.append(exact["source"])
        certificate = {"by": "cpsat/full", "status": exact["status"],
                       "objective_ticks": exact["objective_ticks"],
                       "bound_ticks": exact["bound_ticks"], "message": exact.get("message", ""),
                       **({"wall_capped": True} if exact.get("wall_capped") else {})}
    return {"dp_status": dp["status"], "dp_ticks": dp["objective_ticks"], "dp_plan": dp_plan,
            "dp_message": dp.get("message", ""), "certificate": certificate,
            "source": "solved" if "solved" in sources else sources[-1]}


def _certified_at_scale(task: PointTask) -> dict:
    """``verify --certify-full`` on the point's file (its record cached by verify's cache)."""
    options = task.options
    record = certify_instance(task.path, FullCertOptions(
        time_limit_s=options.time_limit_s, seed=options.seed, cache_dir=options.cache_dir,
        use_cache=options.use_cache, work_limit=options.work_limit))
    dp = record["dp"]
    return {"dp_status": dp["status"], "dp_ticks": dp["objective_ticks"],
            "dp_plan": None if dp["plan"] is None else plan_from_dict(dp["plan"]),
            "dp_message": "", "source": record["source"],
            "certificate": {"by": "certify-full", "status": record["status"],
                            "objective_ticks": record["objective_ticks"],
                            "bound_ticks": record["bound_ticks"],
                            "message": "; ".join(record["notes"]),
                            **({"wall_capped": True} if record.get("wall_capped") else {})}}


def interval(dp_ticks: int | None, certificate: dict) -> tuple[str, int | None, int | None,
                                                                 list[str]]:
    """(status, bound, best, failures) of a point: best is the better of the DP plan and the
    certificate's plan, bound the certificate's proven bound (module doc for the statuses)."""
    status, bound = certificate["status"], certificate["bound_ticks"]
    found = [t for t in (dp_ticks, certificate["objective_ticks"]) if t is not None]
    best = min(found, default=None)
    if status in ("ERROR", "INVALID", "UNAVAILABLE"):
        return "ERROR", None, best, [f"{certificate['by']}: {status}: {certificate['message']}"]
    if status == "INFEASIBLE":
        if best is not None:
            return "ERROR", None, best, [f"{certificate['by']} proves no plan fits, but a plan "
                                         f"of {best} ticks does"]
        return "INFEASIBLE", None, None, []
    if best is None or bound is None:
        return "open", bound, best, []
    if bound > best:
        return "ERROR", bound, best, [f"{certificate['by']}'s bound {bound} lies above a plan "
                                      f"of {best} ticks"]
    return ("OPTIMAL" if bound == best else "FEASIBLE"), bound, best, []


def degrees(plan: Plan) -> dict[str, int]:
    """The plan's t/e/p/d/z/b/v."""
    return {"t": plan.config.tp, "e": plan.config.ep, "p": plan.num_stages,
            "d": plan.num_replicas, "z": plan.zero, "b": plan.microbatch,
            "v": plan.virtual_stages}


def _record(instance: Instance, found: dict, wall_time_s: float) -> dict:
    """The point's record: the DP plan refereed and priced again, the interval, throughputs."""
    training = instance.training
    plan, failures = found["dp_plan"], []
    dp = {"status": found["dp_status"], "objective_ticks": found["dp_ticks"],
          "plan": None, "degrees": None, "iteration_time_s": None, "samples_per_s": None,
          "tokens_per_s": None, "mfu": None}
    if found["dp_status"] in ("ERROR", "INVALID", "UNAVAILABLE"):
        failures.append(f"dp: {found['dp_status']}: {found['dp_message']}")
    if plan is not None:
        evaluation = evaluate(instance, plan)
        if not evaluation.feasible or evaluation.objective_ticks != found["dp_ticks"]:
            failures.append(f"dp: its plan evaluates to {evaluation.objective_ticks} ticks "
                            f"({'; '.join(evaluation.violations) or 'fits'}), not "
                            f"{found['dp_ticks']}")
        dp.update(plan=plan_to_dict(plan), degrees=degrees(plan),
                  iteration_time_s=evaluation.iteration_time_s,
                  samples_per_s=evaluation.throughput_samples_per_s,
                  tokens_per_s=evaluation.throughput_tokens_per_s, mfu=evaluation.mfu)
    status, bound, best, problems = interval(found["dp_ticks"], found["certificate"])

    def speed(ticks: int | None) -> float | None:
        return None if not ticks else cost.throughput(training.global_batch, ticks,
                                                      training.tick_s)

    return {"dp": dp, "certificate": found["certificate"], "status": status,
            "bound_ticks": bound, "best_ticks": best,
            "gap": None if not bound or best is None else (best - bound) / bound,
            "best_samples_per_s": speed(best), "bound_samples_per_s": speed(bound),
            "tick_s": training.tick_s, "failures": failures + problems,
            "source": found["source"], "wall_time_s": round(wall_time_s, 3)}


# ------------------------------------------------------------------ the sweep


def run_sweep(instance_path: Path, axes: Sequence[Axis], points: Sequence[Point],
              paths: Sequence[Path], options: SweepOptions, executor: Executor,
              progress: bool = False, prices: dict[str, float] | None = None,
              device_price: float | None = None) -> dict:
    """Solve and certify every point on ``executor``; the sweep document, points in grid
    order (a point whose worker died is a record with a failure; bad input is raised)."""
    tasks = [PointTask(path, options.certifier(point.instance), options)
             for point, path in zip(points, paths)]
    with Progress("sweep", len(tasks), show_bar=progress, logger=LOGGER) as bar:
        done = run_ordered(executor, run_point, tasks,
                           on_done=lambda d: bar.advance(status=paths[d.index].stem))
    records = []
    for point, path, task, result in zip(points, paths, tasks, done):
        records.append({"point": point_id(point.index, len(points)),
                        "settings": list(point.settings), "instance": str(path),
                        "devices": point.instance.cluster.num_devices,
                        "certify": task.certifier.value,
                        "cost": cluster_cost(point.instance.cluster, prices or {}, device_price),
                        **_collected(result)})
    for record, front in zip(records, pareto_front(records)):
        record["pareto"] = front if record["cost"] is not None else None
    return {"kind": "sweep", "instance": str(instance_path),
            "parameters": [axis.parameter.name for axis in axes],
            "prices": {"per_GBps": prices or {}, "device": device_price},
            "protocol": tables.protocol(
                {"time_limit_s": options.time_limit_s, "seed": options.seed,
                 **({} if options.work_limit is None else {"work_limit": options.work_limit}),
                 "workers_per_solve": 1, "certify": options.certify.value,
                 "exact_max_devices": EXACT_MAX_DEVICES},
                {"dp": True, "cpsat/full": backend_available("cpsat"), "certify-full": True}),
            "points": records}


def _collected(done: Done) -> dict:
    """A worker's record; bad input propagates, a worker that crashed becomes a failure."""
    if done.error is None:
        return done.value
    if isinstance(done.error, NestCpError):
        raise done.error
    LOGGER.error("sweep point %d crashed: %s", done.index, done.error)
    return {"dp": {"status": "ERROR", "objective_ticks": None, "plan": None, "degrees": None,
                   "iteration_time_s": None, "samples_per_s": None, "tokens_per_s": None,
                   "mfu": None},
            "certificate": {"by": "none", "status": "ERROR", "objective_ticks": None,
                            "bound_ticks": None, "message": ""},
            "status": "ERROR", "bound_ticks": None, "best_ticks": None, "gap": None,
            "best_samples_per_s": None, "bound_samples_per_s": None, "tick_s": None,
            "failures": [f"worker crashed: {type(done.error).__name__}: {done.error}"],
            "source": "none", "wall_time_s": 0.0}
