"""The certification harness: run backends on instances, referee, certify, compare.

For each instance file the harness runs the DP in its structured space, then each
exact backend in the structured space (the algorithmic certificate) and the full
space (the structural gap), hinting them with the DP plan.  Each run is recorded
in the space the backend itself reports (mcmc searches the full space whatever it
is asked).  A stored reference is either *independent* (an exact solver proved
it) and checked as a proof, or a *regression snapshot* (the DP's own earlier
output) that only says whether the DP's answer changed.  Every result goes
through :func:`nest_cp.solvers.registry.solve`, which referees the plan with the
evaluator; cached results are refereed again when read.  The analysis lives in
:mod:`nest_cp.verify.certify`.  Instances run in parallel on an executor
(:mod:`nest_cp.harness.executors`: a local process pool or Ray tasks); each solve is cached
by :mod:`nest_cp.verify.cache`, so an interrupted run resumes.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path

from nest_cp.harness.executors import Done, Executor, LocalExecutor, run_ordered
from nest_cp.io.readers import load_instance, plan_from_dict
from nest_cp.io.writers import plan_to_dict
from nest_cp.model.documents import read_document
from nest_cp.model.errors import InstanceFormatError, InvalidPlan, NestCpError
from nest_cp.model.instance import HierarchicalNetwork, Instance
from nest_cp.model.launchers.search import rules_applied
from nest_cp.model.plan import Plan
from nest_cp.model.result import SolveOptions, SolveResult, Space, Status
from nest_cp.solvers.registry import BACKENDS, backend_function, check_result, solve
from nest_cp.verify import certify, sdp
from nest_cp.verify.cache import (
    DEFAULT_CACHE_DIR,
    ResultCache,
    code_fingerprint,
    instance_digest,
    result_key,
)

LOGGER = logging.getLogger(__name__)

DEFAULT_BACKENDS = ("dp", "cpsat", "milp")
SMALL_DIR = Path("instances/small")
# the paper grids, v1 and with the v2 choices (DESIGN §3.2): the DP alone runs there
PAPER_DIRS = (Path("instances/paper"), Path("instances/paper-v2"))
REFERENCE_SUFFIX = ".ref.json"
INDEPENDENT, SNAPSHOT = "independent", "regression-snapshot"  # kinds of stored reference
SPACE_NAMES = tuple(space.value for space in Space)
STATUS_NAMES = tuple(status.value for status in Status)


@dataclass(frozen=True)
class HarnessOptions:
    """What to run on every instance and how; ``use_cache=False`` re-solves everything."""

    backends: tuple[str, ...] = DEFAULT_BACKENDS
    time_limit_s: float = 20.0  # per exact solve; a wall-clock cap when work_limit is set
    work_limit: float | None = None  # work units per exact solve (budget.Work), or None
    seed: int = 0
    milp_solver: str = "highs"
    cache_dir: Path = DEFAULT_CACHE_DIR
    use_cache: bool = True

    def solve_options(self, space: Space, hint: Plan | None,
                      sdp_hint: Plan | None = None) -> SolveOptions:
        return SolveOptions(space=space, time_limit_s=self.time_limit_s, seed=self.seed,
                            workers=1, milp_solver=self.milp_solver, hint=hint,
                            sdp_hint=sdp_hint, work_limit=self.work_limit)


@dataclass(frozen=True)
class Task:
    """One instance file and the options to verify it with."""

    path: Path
    options: HarnessOptions = field(default_factory=HarnessOptions)


def parse_backends(text: str | None) -> tuple[str, ...] | None:
    """``"dp,cpsat"`` -> ("dp", "cpsat"); raises NestCpError for an unknown name."""
    if text is None:
        return None
    names = tuple(dict.fromkeys(name.strip() for name in text.split(",") if name.strip()))
    unknown = [name for name in names if name not in BACKENDS]
    if unknown or not names:
        raise NestCpError(f"expected backends among {', '.join(BACKENDS)}, got {text!r}")
    return names


def build_tasks(paths: tuple[Path, ...], backends: tuple[str, ...] | None,
                base: HarnessOptions) -> list[Task]:
    """Tasks for PATHS with ``backends``; no PATHS: the small set exactly, the paper grids
    (``PAPER_DIRS``) with dp."""
    if paths:
        options = replace(base, backends=backends or DEFAULT_BACKENDS)
        tasks = [Task(path, options) for path in discover(paths)]
        if not tasks:
            raise NestCpError(f"{', '.join(map(str, paths))}: expected instance files "
                              f"(*.json), found none")
        return tasks
    if not SMALL_DIR.is_dir():
        raise NestCpError(f"{SMALL_DIR}: expected the instance folder here (run from the "
                          f"repository root or pass PATHS)")
    small = replace(base, backends=backends or DEFAULT_BACKENDS)
    paper = replace(base, backends=("dp",))
    tasks = [Task(path, small) for path in discover([SMALL_DIR])]
    for folder in PAPER_DIRS:
        if folder.is_dir():
            tasks += [Task(path, paper) for path in discover([folder])]
    if not tasks:
        raise NestCpError(f"{SMALL_DIR}: expected instance files (*.json), found none")
    return tasks


def spaces_of(backend: str) -> tuple[Space, ...]:
    """Spaces a backend runs in: dp structured, brute full, cpsat/milp both, others structured."""
    if backend in ("cpsat", "milp"):
        return (Space.STRUCTURED, Space.FULL)
    if backend == "brute":
        return (Space.FULL,)
    return (Space.STRUCTURED,)


def backend_available(name: str) -> bool:
    """Whether the backend's module and function can be imported right now."""
    try:
        backend_function(name)
    except (ImportError, AttributeError):
        return False
    return True


# ------------------------------------------------------------------ discovery


def reference_path(instance_path: Path) -> Path:
    """``name.json`` -> ``name.ref.json`` beside it."""
    return instance_path.with_name(instance_path.name.removesuffix(".json") + REFERENCE_SUFFIX)


def discover(paths: Iterable[Path]) -> list[Path]:
    """Instance files among ``paths``: files as given, directories' ``*.json`` sorted.

    Reference files (``*.ref.json``) are never instances.  A missing path raises
    :class:`NestCpError`.
    """
    found: list[Path] = []
    for path in map(Path, paths):
        if path.is_dir():
            found += sorted(p for p in path.glob("*.json")
                            if not p.name.endswith(REFERENCE_SUFFIX))
        elif path.is_file():
            found.append(path)
        else:
            raise NestCpError(f"{path}: expected an instance file or a directory, got nothing")
    return found


def load_reference(instance_path: Path) -> dict | None:
    """The reference result beside ``instance_path`` (None if there is none), validated.

    A malformed reference is bad input: :class:`InstanceFormatError` naming the
    reference file and the field, never a crash of the harness.  Its ``kind`` is
    filled in when the file predates it: a reference whose every claim comes from the
    DP alone is a regression snapshot, not an independent proof.
    """
    path = reference_path(instance_path)
    if not path.exists():
        return None
    document = read_document(path)
    _check_reference(document, str(path))
    if "kind" not in document:
        document["kind"] = reference_kind(document["spaces"].values())
    return document


def reference_kind(entries) -> str:
    """``independent`` when some claim names a solver other than the DP, else a snapshot."""
    solvers = {solver for entry in entries for solver in str(entry.get("solver", "")).split(",")}
    return SNAPSHOT if solvers <= {"dp/structured", ""} else INDEPENDENT


def _check_reference(document: object, file: str) -> None:
    if not isinstance(document, dict):
        raise InstanceFormatError(f"expected a JSON object, got {type(document).__name__}",
                                  file=file)
    if not isinstance(document.get("instance_sha256"), str):
        raise InstanceFormatError("expected the instance's SHA-256 as a string, got "
                                  f"{document.get('instance_sha256')!r}", file=file,
                                  field="instance_sha256")
    if document.get("kind", INDEPENDENT) not in (INDEPENDENT, SNAPSHOT):
        raise InstanceFormatError(f"expected {INDEPENDENT!r} or {SNAPSHOT!r}, got "
                                  f"{document.get('kind')!r}", file=file, field="kind")
    spaces = document.get("spaces")
    if not isinstance(spaces, dict):
        raise InstanceFormatError(f"expected an object keyed by space, got {spaces!r}",
                                  file=file, field="spaces")
    for space, entry in spaces.items():
        where = f"spaces.{space}"
        if space not in SPACE_NAMES:
            raise InstanceFormatError(f"expected a space among {', '.join(SPACE_NAMES)}",
                                      file=file, field=where)
        if not isinstance(entry, dict):
            raise InstanceFormatError(f"expected an object, got {entry!r}", file=file,
                                      field=where)
        if entry.get("status") not in STATUS_NAMES:
            raise InstanceFormatError(f"expected a status among {', '.join(STATUS_NAMES)}, "
                                      f"got {entry.get('status')!r}", file=file,
                                      field=f"{where}.status")
        for name in ("objective_ticks", "bound_ticks"):
            value = entry.get(name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
                raise InstanceFormatError(f"expected an integer or null, got {value!r}",
                                          file=file, field=f"{where}.{name}")
        tolerance = entry.get("tolerance_rel", 0)
        if isinstance(tolerance, bool) or not isinstance(tolerance, int | float) or \
                not 0 <= tolerance < 1:
            raise InstanceFormatError(f"expected a relative tolerance in [0, 1), got "
                                      f"{tolerance!r}", file=file, field=f"{where}.tolerance_rel")
        if entry["status"] in (Status.OPTIMAL.value, Status.FEASIBLE.value) and \
                entry.get("objective_ticks") is None:
            raise InstanceFormatError(f"expected objective_ticks with status {entry['status']}",
                                      file=file, field=f"{where}.objective_ticks")
    sdp.check_reference(document, file)


# ------------------------------------------------------------------ one run


def run_record(result: SolveResult, source: str, instance_sha: str) -> dict:
    """The JSON record of one refereed backend result."""
    record = {"backend": result.backend, "space": result.space.value,
              "status": result.status.value, "tolerance_rel": result.tolerance_rel,
              "objective_ticks": result.objective_ticks,
              "bound_ticks": result.bound_ticks, "wall_time_s": round(result.wall_time_s, 4),
              "message": result.message,
              "plan": None if result.plan is None else plan_to_dict(result.plan),
              "source": source, "instance_sha256": instance_sha}
    record |= work_fields(result.stats)
    if result.sdp is not None:
        record["sdp"] = sdp.run_record(result.sdp)
    return record


def work_fields(stats: dict) -> dict:
    """A run's work units (a count, the same on any machine) and, only when it happened,
    ``wall_capped``: the wall-clock cap rather than the work limit ended something, so the
    run's figures depend on the machine (the tables mark them)."""
    if "work_used" not in stats:
        return {}
    return {"work_units": stats["work_used"], **({"wall_capped": True}
                                                 if stats.get("wall_capped") else {})}


def _failed_record(backend: str, space: Space, status: str, message: str) -> dict:
    return {"backend": backend, "space": space.value, "status": status, "objective_ticks": None,
            "bound_ticks": None, "wall_time_s": 0.0, "message": message, "plan": None,
            "source": "none"}


def _result_from_record(record: dict) -> SolveResult:
    plan = None if record["plan"] is None else plan_from_dict(record["plan"])
    space = Space(record["space"])
    return SolveResult(backend=record["backend"], status=Status(record["status"]), plan=plan,
                       objective_ticks=record["objective_ticks"],
                       bound_ticks=record["bound_ticks"], wall_time_s=record["wall_time_s"],
                       space=space, message=record.get("message", ""),
                       tolerance_rel=record.get("tolerance_rel", 0.0),
                       sdp=sdp.result_from_record(record["sdp"], record["backend"], space)
                       if record.get("sdp") else None)


def run_backend(instance: Instance, instance_sha: str, backend: str, options: SolveOptions,
                cache: ResultCache, code: str | None = None) -> tuple[dict, Plan | None]:
    """Solve (or read from the cache) and referee one backend; returns its record and plan.

    ``code`` is :func:`nest_cp.verify.cache.code_fingerprint` (computed if None).
    A cache hit is refereed again without importing the backend, and re-solved if the
    current evaluator disagrees with it.  A missing backend gives status UNAVAILABLE, a
    plan the evaluator rejects INVALID, any other exception ERROR; only refereed results
    are cached.
    """
    space = options.space
    key = result_key(instance_sha, backend, options, code)
    cached = cache.get(key)
    if cached is not None:
        hit = _refereed_hit(instance, cached)
        if hit is not None:
            return hit
    if not backend_available(backend):
        return _failed_record(backend, space, "UNAVAILABLE", "backend not importable"), None
    try:
        result = solve(instance, backend, options)  # recorded in the space it reports
    except InvalidPlan as exc:
        return _failed_record(backend, space, "INVALID", str(exc)), None
    except Exception as exc:  # a backend crash is reported per run, never aborts the harness
        LOGGER.exception("%s/%s failed on %s", backend, space.value, instance.name)
        return _failed_record(backend, space, "ERROR", f"{type(exc).__name__}: {exc}"), None
    record = run_record(result, "solved", instance_sha)
    cache.put(key, record)
    return record, result.plan


def _refereed_hit(instance: Instance, cached: dict) -> tuple[dict, Plan | None] | None:
    """The cached record if its plan still evaluates to its objective, else None (re-solve)."""
    try:
        result = _result_from_record(cached)
        check_result(instance, result)
    except (NestCpError, KeyError, TypeError, ValueError, AttributeError) as exc:
        LOGGER.warning("cached result on %s no longer passes the evaluator (%s); solving again",
                       instance.name, exc)
        return None
    return {**cached, "source": "cache"}, result.plan


# ------------------------------------------------------------------ one instance


def instance_sizes(instance: Instance) -> dict:
    """Layers, devices and a short network description for the tables."""
    network = instance.cluster.network
    if isinstance(network, HierarchicalNetwork):
        topology = f"{len(network.tiers)} tiers"
    else:
        topology = f"graph ({len(network.switches)} sw)"
    return {"layers": instance.workload.num_layers, "devices": instance.cluster.num_devices,
            "network": topology, "tick_s": instance.training.tick_s}


def verify_instance(task: Task) -> dict:
    """Run, referee and certify every backend of ``task`` on one instance file."""
    path, options = task.path, task.options
    raw = read_document(path)
    provenance = raw.get("provenance", {}) if isinstance(raw, dict) else {}
    family = provenance.get("family", path.parent.name) if isinstance(provenance, dict) else \
        path.parent.name
    record = {"instance": path.name.removesuffix(".json"), "path": str(path), "family": family,
              "runs": [], "failures": [], "notes": []}
    try:
        instance = load_instance(path)
    except ImportError as exc:  # e.g. a preset module that has not landed yet
        record["notes"].append(f"instance unavailable: {exc}")
        record.update(certificate="n/a", gap=None, reference="n/a")
        return record
    reference = load_reference(path)  # bad input fails before any solving
    sha = instance_digest(instance)
    record.update(sha256=sha, sizes=instance_sizes(instance),
                  launcher=instance.training.launcher.value,
                  launcher_rules=rules_applied(instance.training.launcher,
                                               instance.search_facts))
    record["runs"] = _run_all(instance, sha, options)
    _analyse(record, reference)
    return record


def _run_all(instance: Instance, sha: str, options: HarnessOptions) -> list[dict]:
    cache = ResultCache(options.cache_dir, options.use_cache)
    runs, hint, sdp_hint = [], None, None
    ordered = sorted(options.backends, key=lambda name: name != "dp")  # the DP first: it hints
    code = code_fingerprint()
    for backend in ordered:
        for space in spaces_of(backend):
            run, plan = run_backend(instance, sha, backend,
                                    options.solve_options(space, hint, sdp_hint), cache, code)
            runs.append(run)
            if backend == "dp":
                hint = plan if plan is not None else hint
                sdp_hint = sdp.hint_of(run)
    return runs


def _analyse(record: dict, reference: dict | None) -> None:
    runs = record["runs"]
    failures = [f"{run['backend']}/{run['space']}: {run['status']}: {run['message']}"
                for run in runs if run["status"] in ("INVALID", "ERROR")]
    failures += certify.consistency_failures(runs)
    verdict, certificate_failures = certify.algorithmic_certificate(runs)
    failures += certificate_failures
    record["certificate"] = verdict
    reference_full = None
    if reference is None:
        record["reference"] = "missing"
    elif reference.get("instance_sha256") != record["sha256"]:
        record["reference"] = "stale"
        record["notes"].append("reference was computed for other instance content; not compared")
    elif reference["kind"] == SNAPSHOT:
        changes = snapshot_changes(reference, runs)
        record["reference"] = "snapshot changed" if changes else "snapshot same"
        failures += [f"regression snapshot: {change}" for change in changes]
    else:
        reference_failures = certify.reference_failures(reference, runs)
        record["reference"] = "contradicted" if reference_failures else "consistent"
        failures += [f"reference: {failure}" for failure in reference_failures]
        if not reference_failures and "full" in reference.get("spaces", {}):
            reference_full = {"backend": "reference", "space": Space.FULL.value,
                              **reference["spaces"]["full"]}
    record["gap"] = certify.structural_gap(runs, reference_full)
    record["failures"] = list(dict.fromkeys(failures))  # keep order, drop repeats
    sdp.analyse(record, reference)  # SDP searches: their own certificate and gap (DESIGN §7)


def snapshot_changes(reference: dict, runs: list[dict]) -> list[str]:
    """How the DP's answer differs from a regression snapshot of it (empty: unchanged).

    A snapshot proves nothing about the instance; it records what the DP said before,
    so any change (better or worse) is reported for a person to confirm.
    """
    entry = reference["spaces"].get(Space.STRUCTURED.value)
    dp = next((run for run in runs if run["backend"] == "dp"), None)
    if entry is None or dp is None:
        return []
    before = (entry["status"], entry.get("objective_ticks"))
    now = (dp["status"], dp["objective_ticks"])
    if before == now:
        return []
    return [f"dp now answers {now[0]} {now[1]} ticks, the snapshot recorded {before[0]} "
            f"{before[1]} ticks"]


# ------------------------------------------------------------------ many instances


def run_tasks(tasks: list[Task], jobs: int = 1,
              on_done: Callable[[dict], None] | None = None,
              executor: Executor | None = None) -> list[dict]:
    """Verify every task on ``executor`` (default: ``jobs`` local processes); task order.

    Any executor gives the same records (:mod:`nest_cp.harness.executors`): a task's bad
    input stops the run, a worker that crashed becomes a failed record.
    """
    def collect(done: Done) -> None:
        records[done.index] = _collect(done, tasks[done.index])
        if on_done:
            on_done(records[done.index])

    records: dict[int, dict] = {}
    if executor is None:
        with LocalExecutor(jobs) as local:
            run_ordered(local, verify_instance, tasks, collect)
    else:
        run_ordered(executor, verify_instance, tasks, collect)
    return [records[index] for index in range(len(tasks))]


def _collect(done: Done, task: Task) -> dict:
    """A worker's record; a crashed worker becomes a failed record, bad input propagates."""
    if done.error is None:
        return done.value
    if isinstance(done.error, NestCpError):
        raise done.error
    exc = done.error  # e.g. a solver killing its process: report, keep the others
    LOGGER.error("verifying %s crashed: %s", task.path, exc)
    return {"instance": task.path.name.removesuffix(".json"), "path": str(task.path),
            "family": task.path.parent.name, "runs": [], "notes": [],
            "certificate": "n/a", "gap": None, "reference": "n/a",
            "failures": [f"harness crashed: {type(exc).__name__}: {exc}"]}


def solve_counts(records: list[dict]) -> dict[str, int]:
    """How many runs were solved now, read from the cache, or produced nothing."""
    counts = {"solved": 0, "cache": 0, "none": 0}
    for record in records:
        for run in record["runs"]:
            counts[run["source"]] += 1
    return counts


def log_to_stderr(level: int = logging.WARNING) -> None:
    logging.basicConfig(level=level, stream=sys.stderr,
                        format="%(levelname)s %(name)s: %(message)s")
