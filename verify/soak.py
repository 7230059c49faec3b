"""The soak: thousands of seeded random tiny instances, every backend against every other.

Protocol.  Seed s (s = first_seed, first_seed + 1, ...) draws one tiny instance
(:func:`nest_cp.harness.generators.draw_tiny_recipe`: 1-6 layers, 2-16 devices, hierarchies
and graphs with parallel links, dense and MoE, memory from tight to loose, every
training choice the cost model has; choices are dropped until the structured space
holds at most ``max_structured_plans`` plans).  On every instance the DP and brute
force run in the structured space; on a seeded sample (``sample_rate``, 10%) CP-SAT
and the MILP (HiGHS and CBC alternately) also run in both spaces, hinted with the
DP plan on even seeds, and brute force in the full space where it has at most
``max_full_placements`` placements.  Every run goes through
:func:`nest_cp.solvers.registry.solve`, so the evaluator re-checks every plan and objective;
the runs are then compared by :mod:`nest_cp.verify.certify` (no plan below another
run's proven bound or optimum, no plan where infeasibility is proven, the DP equal
to every structured optimum).  Where the full-space brute force runs on a sampled
seed, every sub-problem bound the exact driver prunes with is checked against the least
full-space plan of its shape (:func:`shape_bound_violations`).  About a fifth of the
other seeds (not the certificate's draw below) with at most 8 devices also allow SDP (DESIGN §7;
:data:`nest_cp.harness.generators.SDP_SHARE`): every backend's SDP search is then compared
the same way, ranked by T_eff (:mod:`nest_cp.verify.sdp`), and the full-space brute force
runs only where its SDP enumeration is small enough too.  A fifth of the other non-SDP
seeds (:data:`nest_cp.harness.generators.CONTEXT_SHARE`) also allow context widths c > 1
(docs/context-parallelism.md): the DP, brute force, CP-SAT and the MILP search them, and
every such seed runs what a sampled one runs (CP-SAT and the MILP in both spaces, brute
force in the full space where small enough, the per-shape bound check), so the exact
models are held to the DP's optimum and to exhaustive search there; the full-space
certificate is checked on them as on any other seed (its c > 1 shapes are bounded
placement-free).  A run that raises (an internal
error, a crash) is a disagreement too.  An exact run stopped by its time limit is counted
as open, not as a disagreement, unless it contradicts another run.

The full-space certificate.  On every seed whose full space brute force can enumerate
(at most ``max_full_placements`` placements) and whose space the certificate's bounds
cover (:func:`nest_cp.solvers.certify.unsupported`: v = 1 only, no SDP), brute force runs
in the full space (if the sample has not run it already) and
:func:`nest_cp.solvers.certify.certify_full` (the certificate of ``verify --certify-full``,
``certify_time_limit_s``, the DP plan as hint on seeds 0 and 1 mod 4, no hint on the
others) is checked against it (:func:`certificate_violations`): its lower bound is at
most the exhaustive optimum, which is at most its best plan; the best plan evaluates to
the objective it claims; an OPTIMAL certificate's best plan is the optimum; INFEASIBLE
only where brute force finds no plan (and a best plan only where it finds one).  Every
violation, and a certificate that raises, is a disagreement, counted by kind in the
report; seeds where the check is not possible are counted as skipped, by reason.  A
share of the seeds (:data:`nest_cp.harness.generators.CERTIFY_SHARE`, 25%, chosen by a
stream of their own, so every other seed draws what it drew before) is drawn like the
instances on which the certificate once claimed bounds above the optimum: uneven
hierarchies (tiers of size 1 or 3, outer tiers as fast or faster than inner ones, partial
domains), expert width 2 without EP collectives, identical blocks, memory mostly tight,
recompute modes, overlap, and virtual stages on a few (skipped: the bounds do not cover
v > 1), at most 6 devices.

Every disagreement is saved as a reproducer instance under ``tests/data/soak/``
(``tests/test_soak.py`` replays them).  Results are appended, one JSON line per seed,
to a state file keyed by the protocol and the code fingerprint, so an interrupted
run continues where it stopped and a run with other code starts afresh.

The work items run on a :class:`nest_cp.harness.executors.Executor` (local processes or
Ray tasks, ``--executor``), like verify's and compare's.
"""

from __future__ import annotations

import json
import logging
import math
import platform
import random
import re
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path

from nest_cp import __version__
from nest_cp.cost.evaluate import evaluate
from nest_cp.harness.executors import Executor, LocalExecutor
from nest_cp.harness.generators import (
    CERTIFY_SHARE,
    CONTEXT_SHARE,
    draw_tiny_recipe,
    tiny_instance,
)
from nest_cp.io.writers import instance_to_dict
from nest_cp.model.documents import write_document
from nest_cp.model.instance import Strategy
from nest_cp.model.network import NetworkModel
from nest_cp.model.result import SolveOptions, SolveResult, Space, Status
from nest_cp.solvers import brute, brute_sdp
from nest_cp.solvers.certify import Certificate, certify_full, unsupported
from nest_cp.solvers.exact import enumerate_subproblems
from nest_cp.solvers.exact.bounds import communication_lower_bound
from nest_cp.solvers.exact.pricing import ChunkPricing
from nest_cp.solvers.registry import allows_context, solve
from nest_cp.verify import certify
from nest_cp.verify import sdp as sdp_records
from nest_cp.verify.cache import DEFAULT_CACHE_DIR, code_fingerprint, digest, solver_versions

LOGGER = logging.getLogger(__name__)

REPRODUCER_DIR = Path("tests/data/soak")
CERTIFY_BACKEND = "certify-full"
SKIPPED = "SKIPPED"  # status of a certificate run the soak did not make (the reason beside it)
# what a full-space certificate can get wrong, by kind, as the report counts them
VIOLATION_KINDS = {
    "bound": "bound above the exhaustive optimum",
    "optimal": "wrong OPTIMAL",
    "mispriced": "best plan mispriced",
    "infeasible": "wrong INFEASIBLE",
    "below": "best plan below the exhaustive optimum",
    "error": "certify_full raised",
}


@dataclass(frozen=True)
class SoakOptions:
    """The soak protocol: which seeds, what runs on them and with which limits."""

    count: int = 10_000
    first_seed: int = 0
    sample_rate: float = 0.1
    sample_seed: int = 0
    exact_time_limit_s: float = 10.0
    max_structured_plans: int = 1_000
    max_full_placements: int = 5_000
    max_full_sdp_plans: int = 20_000  # full-space SDP brute force (masks x placements x ...)
    certify_time_limit_s: float = 5.0  # certify_full's limit on every seed it is checked on

    def protocol_key(self) -> str:
        """What makes two runs the same soak: the protocol (not the count) and the code."""
        fields = {name: value for name, value in asdict(self).items() if name != "count"}
        return digest({"protocol": fields, "code": code_fingerprint()})[:16]


@dataclass(frozen=True)
class SoakTask:
    """One seed of one soak."""

    seed: int
    options: SoakOptions


# ------------------------------------------------------------------ one seed


def in_sample(seed: int, options: SoakOptions) -> bool:
    """Whether the exact solvers run on this seed (a seeded draw, independent per seed)."""
    return random.Random(f"sample-{options.sample_seed}-{seed}").random() < options.sample_rate


def soak_item(task: SoakTask) -> dict:
    """Draw, solve and cross-check one seed; a JSON-ready record (never raises)."""
    started = time.perf_counter()
    options, seed = task.options, task.seed
    recipe = draw_tiny_recipe(seed, max_structured_plans=options.max_structured_plans,
                              max_full_placements=options.max_full_placements)
    record = {"seed": seed, "kind": recipe.describe(), "sampled": in_sample(seed, options),
              "runs": [], "failures": []}
    try:
        instance = tiny_instance(recipe)
    except Exception as exc:  # noqa: BLE001 - a generator bug is a finding, not a crash
        record["failures"].append(f"generator: {type(exc).__name__}: {exc}")
        return _finish(record, started)
    record["runs"], record["failures"] = check_instance(instance, seed, options,
                                                        record["sampled"])
    return _finish(record, started)


def _finish(record: dict, started: float) -> dict:
    record["verdict"] = "disagree" if record["failures"] else "agree"
    record["wall_time_s"] = round(time.perf_counter() - started, 4)
    return record


def check_instance(instance, seed: int, options: SoakOptions, sampled: bool
                   ) -> tuple[list[dict], list[str]]:
    """Run the soak's backends on ``instance``; (run records, disagreements)."""
    runs, failures = [], []
    dp_plan = _run(instance, "dp", SolveOptions(), runs, failures)
    _run(instance, "brute", SolveOptions(space=Space.STRUCTURED), runs, failures)
    if sampled or allows_context(instance):  # every context seed: the exact models search c
        milp_solver = "highs" if seed % 2 == 0 else "cbc"
        hint = dp_plan if seed % 2 == 0 else None
        for backend in ("cpsat", "milp"):
            for space in (Space.STRUCTURED, Space.FULL):
                _run(instance, backend, SolveOptions(
                    space=space, time_limit_s=options.exact_time_limit_s, seed=seed % 1000,
                    workers=1, milp_solver=milp_solver, hint=hint), runs, failures)
        if full_placements(instance) <= options.max_full_placements and (
                Strategy.SDP not in instance.training.strategies
                or brute_sdp.within_size(instance, Space.FULL, options.max_full_sdp_plans)):
            _run(instance, "brute", SolveOptions(space=Space.FULL), runs, failures)
            failures += shape_bound_violations(instance)
    _check_certificate(instance, seed, options, dp_plan, runs, failures)
    backends = [run for run in runs if run["backend"] != CERTIFY_BACKEND]
    failures += _contradictions(backends)
    # the same checks on the SDP searches, ranked by T_eff (nest_cp.verify.sdp)
    failures += [f"sdp: {failure}" for failure in _contradictions(sdp_records.views(backends))]
    return runs, list(dict.fromkeys(failures))


def shape_bound_violations(instance) -> list[str]:
    """Every sub-problem of the exact backends whose bound (its memory-aware compute bound
    and :func:`nest_cp.solvers.exact.bounds.communication_lower_bound`, with which the
    driver closes sub-problems unsolved) exceeds the least full-space plan of its shape
    (brute force evaluates every plan); [] where the exact backends do not search the
    instance as it is (SDP).  With context widths c > 1 the bounds are placement-free, so
    they bound the full space's shapes as well as the structured space's they prune."""
    if Strategy.SDP in instance.training.strategies:
        return []
    least = brute.least_per_shape(instance)
    network = NetworkModel(instance.cluster)
    training = instance.training
    found = []
    for sub in enumerate_subproblems(instance):
        optimum = least.get(sub.shape_key)
        if optimum is None:
            continue
        bound = max(sub.lower_bound_ticks, communication_lower_bound(
            sub, ChunkPricing(instance, sub), network, training.overlap_grad_reduce, None,
            training.overlap_param_gather))
        if bound > optimum:
            found.append(f"exact shape bound: {sub.label} bound {bound} > least plan "
                         f"{optimum} ticks (brute force, full space)")
    return found


def _contradictions(runs: list[dict]) -> list[str]:
    """What the usable runs (or SDP views) say against each other and the DP."""
    usable = [run for run in runs if run["status"] not in certify.UNUSABLE_STATUSES]
    return certify.consistency_failures(usable) + certify.algorithmic_certificate(usable)[1]


# ------------------------------------------------------------------ full-space certificate


def certify_skip_reason(instance, options: SoakOptions) -> str | None:
    """Why the soak does not check certify_full on ``instance`` against exhaustive search
    (the bounds do not cover its space, or the full space is too large), or None."""
    reason = unsupported(instance)
    if reason is not None:
        return "unsupported: " + re.sub(r"\[[^\]]*\]", "[...]", reason.split(";")[0])
    if full_placements(instance) > options.max_full_placements:
        return f"full space above {options.max_full_placements} placements"
    return None


def certify_hinted(seed: int) -> bool:
    """Whether certify_full gets the DP plan as hint on this seed (half of the seeds)."""
    return seed % 4 < 2


def _check_certificate(instance, seed: int, options: SoakOptions, dp_plan, runs: list[dict],
                       failures: list[str]) -> None:
    """Certify the full space and check the certificate against exhaustive search (brute
    force in the full space, run here unless the sample already ran it); records one
    ``certify-full`` run (SKIPPED with the reason where the check is impossible)."""
    reason = certify_skip_reason(instance, options)
    exhaustive = None
    if reason is None:
        exhaustive = next((run for run in runs if run["backend"] == "brute"
                           and run["space"] == Space.FULL.value), None)
        if exhaustive is None:
            _run(instance, "brute", SolveOptions(space=Space.FULL), runs, failures)
            exhaustive = runs[-1]
        if exhaustive["status"] not in (Status.OPTIMAL.value, Status.INFEASIBLE.value):
            reason = "exhaustive search failed"
    if reason is not None:
        runs.append(_certificate_record(None, None, None, [], 0.0, reason))
        return
    hint = dp_plan if certify_hinted(seed) else None
    started = time.perf_counter()
    try:
        certificate = certify_full(instance, hint, options.certify_time_limit_s, seed % 1000)
    except Exception as exc:  # noqa: BLE001 - a crash is a disagreement (cx6)
        runs.append(_certificate_record(None, hint is not None, exhaustive, ["error"],
                                        time.perf_counter() - started,
                                        message=f"{type(exc).__name__}: {exc}"))
        failures.append(f"{CERTIFY_BACKEND}: {VIOLATION_KINDS['error']}: "
                        f"{type(exc).__name__}: {exc}")
        return
    violations = certificate_violations(instance, certificate, exhaustive)
    runs.append(_certificate_record(certificate, hint is not None, exhaustive,
                                    [kind for kind, _ in violations],
                                    time.perf_counter() - started))
    failures += [f"{CERTIFY_BACKEND} ({'hint' if hint is not None else 'no hint'}): "
                 f"{VIOLATION_KINDS[kind]}: {text}" for kind, text in violations]


def certificate_violations(instance, certificate: Certificate, exhaustive: dict
                           ) -> list[tuple[str, str]]:
    """Every claim of ``certificate`` that exhaustive search of the full space (``exhaustive``,
    a run record of brute force: OPTIMAL with the optimum, or INFEASIBLE) or the evaluator
    refutes, as (kind of :data:`VIOLATION_KINDS`, sentence with the numbers).

    Checked: bound <= optimum <= the best plan's objective; the best plan evaluates to its
    claimed objective; OPTIMAL only at the optimum; INFEASIBLE only where brute force finds
    no plan; no plan where it finds none."""
    optimum = exhaustive["objective_ticks"] \
        if exhaustive["status"] == Status.OPTIMAL.value else None
    status, bound, best = certificate.status, certificate.bound_ticks, certificate.objective_ticks
    found = []
    if certificate.plan is not None:
        evaluation = evaluate(instance, certificate.plan)
        if not evaluation.feasible:
            found.append(("mispriced", f"its best plan (claimed {best} ticks) does not fit: "
                                       f"{evaluation.violations[0]}"))
        elif evaluation.objective_ticks != best:
            found.append(("mispriced", f"its best plan is claimed at {best} ticks, the "
                                       f"evaluator prices it at {evaluation.objective_ticks}"))
    elif best is not None:
        found.append(("mispriced", f"claims a best plan of {best} ticks but returns none"))
    if optimum is None:
        if best is not None:
            found.append(("below", f"a plan of {best} ticks where brute force finds none"))
        return found
    if bound is not None and bound > optimum:
        found.append(("bound", f"{status.value} bound {bound} > optimum {optimum} ticks"))
    if status is Status.OPTIMAL and best != optimum:
        found.append(("optimal", f"OPTIMAL at {best} ticks, the optimum is {optimum}"))
    if status is Status.INFEASIBLE:
        found.append(("infeasible", f"INFEASIBLE, but brute force finds {optimum} ticks"))
    if best is not None and best < optimum:
        found.append(("below", f"best plan {best} < exhaustive optimum {optimum} ticks"))
    return found


def _certificate_record(certificate: Certificate | None, hinted: bool | None,
                        exhaustive: dict | None, violations: list[str], wall_time_s: float,
                        skipped: str | None = None, message: str = "") -> dict:
    status = SKIPPED if skipped else "ERROR" if certificate is None else \
        certificate.status.value
    return {"backend": CERTIFY_BACKEND, "space": Space.FULL.value, "status": status,
            "objective_ticks": None if certificate is None else certificate.objective_ticks,
            "bound_ticks": None if certificate is None else certificate.bound_ticks,
            "tolerance_rel": 0.0, "wall_time_s": round(wall_time_s, 4),
            "message": skipped or message or (certificate.closed_by if certificate else ""),
            "source": "soak",
            "certify": {"hint": hinted, "skipped": skipped, "violations": violations,
                        "exhaustive_status": None if exhaustive is None else exhaustive["status"],
                        "exhaustive_ticks": None if exhaustive is None else
                        exhaustive["objective_ticks"]}}


def _run(instance, backend: str, options: SolveOptions, runs: list[dict],
         failures: list[str]):
    """Solve, referee (backends.solve), record; returns the plan (None without one)."""
    label = f"{backend}/{options.space.value}"
    try:
        result = solve(instance, backend, options)
    except Exception as exc:  # noqa: BLE001 - internal errors and crashes are disagreements
        runs.append({"backend": backend, "space": options.space.value, "status": "ERROR",
                     "objective_ticks": None, "bound_ticks": None, "tolerance_rel": 0.0,
                     "wall_time_s": 0.0, "message": f"{type(exc).__name__}: {exc}"})
        failures.append(f"{label}: {type(exc).__name__}: {exc}")
        return None
    runs.append(_run_record(result))
    return result.plan


def _run_record(result: SolveResult) -> dict:
    record = {"backend": result.backend, "space": result.space.value,
              "status": result.status.value, "objective_ticks": result.objective_ticks,
              "bound_ticks": result.bound_ticks, "tolerance_rel": result.tolerance_rel,
              "wall_time_s": round(result.wall_time_s, 4), "message": result.message,
              "source": "soak"}
    if result.sdp is not None:
        record["sdp"] = sdp_records.run_record(result.sdp)
    return record


def full_placements(instance) -> int:
    """Injective placements a full-space brute force would enumerate."""
    devices = instance.cluster.num_devices
    total = 0
    for config, _ in instance.choices:
        for stages in range(1, instance.workload.num_layers + 1):
            for replicas in range(1, devices // (config.devices * stages) + 1):
                total += math.perm(devices, config.devices * stages * replicas)
    return total


# ------------------------------------------------------------------ many seeds


class SoakState:
    """The append-only JSON-lines file of one soak protocol: what is done so far."""

    def __init__(self, directory: Path, options: SoakOptions):
        self.path = Path(directory) / f"soak-{options.protocol_key()}.jsonl"

    def done(self) -> dict[int, dict]:
        """Records of the seeds already run (a torn last line is ignored)."""
        records: dict[int, dict] = {}
        if not self.path.exists():
            return records
        for line in self.path.read_text(encoding="utf-8").splitlines():
            try:
                record = json.loads(line)
                records[record["seed"]] = record
            except (json.JSONDecodeError, KeyError, TypeError):
                continue
        return records

    def append(self, record: dict) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self.path.open("a", encoding="utf-8") as handle:
            handle.write(json.dumps(record, sort_keys=True) + "\n")
            handle.flush()


def run_soak(options: SoakOptions, state_dir: Path = DEFAULT_CACHE_DIR / "soak",
             executor: Executor | None = None,
             on_record: Callable[[dict], None] | None = None) -> tuple[list[dict], float]:
    """Run (or continue) the soak on ``executor`` (default: one local process); returns
    every seed's record in seed order and the wall time spent in this call."""
    started = time.perf_counter()
    state = SoakState(state_dir, options)
    done = state.done()
    seeds = range(options.first_seed, options.first_seed + options.count)
    todo = [SoakTask(seed, options) for seed in seeds if seed not in done]
    LOGGER.info("soak %s: %d seeds done before, %d to run", state.path.name, len(seeds) -
                len(todo), len(todo))
    executor = executor or LocalExecutor(1)
    for done_task in executor.run(soak_item, todo):
        if done_task.error is not None:
            raise done_task.error  # soak_item records a run's own failure; this is the harness
        record = done_task.value
        state.append(record)
        done[record["seed"]] = record
        if on_record:
            on_record(record)
    return [done[seed] for seed in seeds], time.perf_counter() - started


def save_reproducers(records: list[dict], options: SoakOptions,
                     directory: Path = REPRODUCER_DIR) -> list[Path]:
    """Write the instance of every disagreeing seed under ``directory``; returns the files."""
    written = []
    for record in records:
        if record["verdict"] != "disagree":
            continue
        recipe = draw_tiny_recipe(record["seed"],
                                  max_structured_plans=options.max_structured_plans,
                                  max_full_placements=options.max_full_placements)
        try:
            document = instance_to_dict(tiny_instance(recipe))
        except Exception:  # noqa: BLE001 - the generator itself failed: keep the recipe
            document = {"name": f"soak-{record['seed']}", "recipe": recipe.describe()}
        document["provenance"] = {
            "source": "nest-cp soak (verify/soak.py)", "seed": record["seed"],
            "sampled": record["sampled"], "disagreements": record["failures"][:8]}
        directory.mkdir(parents=True, exist_ok=True)
        path = directory / f"soak-{record['seed']}.json"
        write_document(document, path)
        written.append(path)
    return written


# ------------------------------------------------------------------ report


def summary(records: list[dict]) -> dict:
    """Counts for the report."""
    statuses: Counter = Counter()
    open_runs = 0
    for record in records:
        for run in record["runs"]:
            statuses[f"{run['backend']}/{run['space']} {run['status']}"] += 1
            if run.get("sdp"):
                statuses[f"{run['backend']}/{run['space']} SDP {run['sdp']['status']}"] += 1
            if run["backend"] in ("cpsat", "milp") and run["status"] in (
                    Status.FEASIBLE.value, Status.UNKNOWN.value):
                open_runs += 1
    kinds = Counter()
    for record in records:
        kind = record["kind"]
        kinds["graph" if kind["network"].startswith("graph") else "hierarchy"] += 1
        if kind["network"] == "hierarchy-uneven":
            kinds["drawn like the certificate's counterexamples"] += 1
        kinds["MoE" if kind["moe"] else "dense"] += 1
        v3 = kind.get("v3")
        if v3 and min(v3["efficiencies"]) < 1:
            kinds["efficiency < 1"] += 1
        if v3 and v3["optimizer"][0] != v3["optimizer"][1] and \
                {1, 2} & set(kind.get("zero_stages", ())):
            kinds["ZeRO 1/2 with g != w"] += 1
        if kind.get("overlap_param_gather") and kind.get("overlap_grad_reduce") and \
                {1, 2} & set(kind.get("zero_stages", ())):
            kinds["ZeRO 1/2 with both overlaps"] += 1
        if kind.get("tp_comm_overlap") and any(c.split("x")[0] != "1"
                                               for c in kind["configs"]):
            kinds["TP overlap with t > 1"] += 1
        if kind.get("launcher", "none") != "none":
            kinds[f"launcher {kind['launcher']}"] += 1
        if any(config.count("x") == 2 for config in kind["configs"]):  # t x e x c
            kinds[f"context widths ({kind.get('cp_comm', 'p2p')})"] += 1
        if "sdp" in kind:
            kinds["SDP allowed"] += 1
            sdp = next((run.get("sdp") for run in record["runs"] if run["backend"] == "dp"),
                       None)
            if sdp is not None:
                kinds["SDP plan fits" if sdp["status"] == Status.OPTIMAL.value else
                      "no SDP plan fits"] += 1
        dp = next((run for run in record["runs"] if run["backend"] == "dp"), None)
        kinds["no plan fits" if dp and dp["status"] == Status.INFEASIBLE.value else
              "has a plan"] += 1
    context = [record for record in records
               if any(config.count("x") == 2 for config in record["kind"]["configs"])]
    return {"instances": len(records),
            "context_seeds": len(context),
            "context_seeds_exact": sum(
                {(backend, space.value) for backend in ("cpsat", "milp") for space in Space}
                <= {(run["backend"], run["space"]) for run in record["runs"]}
                for record in context),
            "agreements": sum(r["verdict"] == "agree" for r in records),
            "disagreements": sum(r["verdict"] == "disagree" for r in records),
            "sampled": sum(r["sampled"] for r in records), "exact_runs_open": open_runs,
            "statuses": dict(sorted(statuses.items())), "kinds": dict(sorted(kinds.items())),
            "certificates": certificate_summary(records)}


def certificate_summary(records: list[dict]) -> dict:
    """Counts of the full-space certificate checks: seeds checked against exhaustive search
    (with and without the DP's hint), certificate statuses, seeds with each kind of
    violation, and the seeds skipped by reason."""
    checked, hinted, statuses, skipped = 0, 0, Counter(), Counter()
    violations: dict[str, list[int]] = {kind: [] for kind in VIOLATION_KINDS}
    for record in records:
        for run in record["runs"]:
            if run["backend"] != CERTIFY_BACKEND:
                continue
            details = run["certify"]
            if details["skipped"]:
                skipped[details["skipped"]] += 1
                continue
            checked += 1
            hinted += bool(details["hint"])
            statuses[run["status"]] += 1
            for kind in dict.fromkeys(details["violations"]):
                violations[kind].append(record["seed"])
    return {"checked": checked, "hinted": hinted, "statuses": dict(sorted(statuses.items())),
            "violations": violations, "skipped": dict(skipped.most_common())}


def render_report(records: list[dict], options: SoakOptions, wall_time_s: float,
                  jobs: int, reproducers: list[Path]) -> str:
    """reports/soak.md: counts, disagreements with their reproducers, and the protocol."""
    counts = summary(records)
    lines = ["# Soak: DP, brute force, CP-SAT, MILP and the full-space certificate on seeded "
             "random tiny instances", "",
             f"- instances: {counts['instances']} (seeds {options.first_seed}.."
             f"{options.first_seed + options.count - 1})",
             f"- agreements: {counts['agreements']}",
             f"- disagreements: {counts['disagreements']}",
             f"- exact solvers ran on {counts['sampled']} sampled instances; runs stopped "
             f"at the time limit (open, not contradicting): {counts['exact_runs_open']}",
             f"- seeds allowing context widths c > 1: {counts['context_seeds']}, with CP-SAT "
             f"and the MILP run in both spaces on {counts['context_seeds_exact']} of them",
             f"- wall time: {wall_time_s:.0f} s in the last invocation with {jobs} "
             f"process(es); sum over seeds {sum(r['wall_time_s'] for r in records):.0f} s",
             "", "## Instances", ""]
    lines += [f"- {name}: {count}" for name, count in counts["kinds"].items()]
    lines += ["", *_certificate_lines(counts["certificates"])]
    lines += ["", "## Runs by backend, space and status", "", "| run | count |", "|---|---|"]
    lines += [f"| {name} | {count} |" for name, count in counts["statuses"].items()]
    lines += ["", "## Disagreements", ""]
    failing = [record for record in records if record["verdict"] == "disagree"]
    if not failing:
        lines.append("None.")
    for record in failing:
        lines.append(f"- seed {record['seed']} ({record['kind']['network']}, "
                     f"{record['kind']['layers']} layers, {record['kind']['devices']} devices):")
        lines += [f"  - {failure}" for failure in record["failures"]]
    if reproducers:
        lines += ["", "Reproducers: " + ", ".join(f"`{path}`" for path in reproducers)]
    versions = ", ".join(f"{name} {version}" for name, version in solver_versions().items())
    lines += ["", "## Protocol", "",
              "Written by `nest-cp soak` (`verify/soak.py`; its docstring states the checks). "
              "Each seed draws one instance with "
              "`nest_cp.harness.generators.draw_tiny_recipe`; the DP "
              "and structured brute force run on all (with their SDP searches where the seed "
              "allows SDP, compared by T_eff), CP-SAT and the MILP (HiGHS on even "
              "seeds, CBC on odd; the DP plan as hint on even seeds) in both spaces on the "
              "seeded sample, with brute force in the full space where it is small enough. "
              "On every seed whose full space brute force can enumerate (at most "
              f"{options.max_full_placements} placements) and whose space the certificate "
              "covers, `certify_full` (the certificate of `verify --certify-full`, "
              f"{options.certify_time_limit_s:g} s, the DP plan as hint on seeds 0 and 1 "
              "mod 4, none on the others) is checked against brute force in the full space: "
              "bound <= exhaustive optimum <= its best plan, the best plan priced as claimed, "
              "OPTIMAL only at the optimum, INFEASIBLE only where brute force finds no plan. "
              f"A share of the seeds ({CERTIFY_SHARE:.0%}, chosen by a stream of "
              "their own) is drawn like the instances the certificate once got wrong "
              "(uneven hierarchies with tiers of size 1 or 3 and outer tiers as fast or "
              "faster, expert width 2 without EP collectives, identical blocks, tight "
              "memory, every v2 choice). "
              f"Another share ({CONTEXT_SHARE:.0%} of the others, a stream of its own) "
              "also allows context widths c > 1 (p2p or a2a): the DP, brute force, CP-SAT and "
              "the MILP search them, and every such seed runs what a sampled seed runs. "
              "Every plan is re-evaluated by the plan evaluator.", "",
              f"- options: {json.dumps(asdict(options), sort_keys=True)}",
              f"- protocol key (with the code fingerprint): {options.protocol_key()}",
              f"- nest-cp {__version__}; {versions}; Python {platform.python_version()}",
              f"- machine: {platform.platform()}, {platform.machine()}",
              f"- date (UTC): {datetime.now(UTC).strftime('%Y-%m-%dT%H:%M:%SZ')}"]
    return "\n".join(lines) + "\n"


def _certificate_lines(counts: dict) -> list[str]:
    """The report's section on the full-space certificate against exhaustive search."""
    lines = ["## Full-space certificate (`certify_full`) against exhaustive search", "",
             f"- seeds checked against exhaustive full-space search: {counts['checked']} "
             f"({counts['hinted']} with the DP plan as hint, "
             f"{counts['checked'] - counts['hinted']} without)",
             "- certificate statuses: " + (", ".join(
                 f"{status} {count}" for status, count in counts["statuses"].items()) or "none")]
    for kind, label in VIOLATION_KINDS.items():
        seeds = counts["violations"][kind]
        listed = f" (seeds {', '.join(map(str, seeds[:20]))}{', ...' if len(seeds) > 20 else ''})"
        lines.append(f"- {label}: {len(seeds)}{listed if seeds else ''}")
    lines.append(f"- skipped: {sum(counts['skipped'].values())}")
    lines += [f"  - {reason}: {count}" for reason, count in counts["skipped"].items()]
    return lines
