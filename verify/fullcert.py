"""``nest-cp verify PATHS --certify-full``: proven full-space intervals at paper scale.

For every instance the DP plans first (its plan is the hint, priced by the
evaluator); then :func:`nest_cp.solvers.certify.certify_full` bounds the full space and
looks for better plans within the time limit.  One record per instance is cached
by :mod:`nest_cp.verify.cache` (keyed by instance content, options and the code),
so an interrupted run resumes; a cached record is refereed again (its plans
re-priced by the evaluator) before it is used.  The records and the tables of
:mod:`nest_cp.verify.certified_tables` are written to ``--out`` as
``certified.json`` and ``certified.{md,csv,tex}``.
"""

from __future__ import annotations

import functools
import json
import logging
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from nest_cp.cost.evaluate import evaluate
from nest_cp.harness.executors import Executor, run_ordered
from nest_cp.io.readers import load_instance, plan_from_dict
from nest_cp.io.writers import plan_to_dict
from nest_cp.model.documents import read_document, write_output
from nest_cp.model.errors import NestCpError
from nest_cp.model.instance import Instance
from nest_cp.model.network import NetworkModel
from nest_cp.model.plan import Plan
from nest_cp.model.progress import Progress
from nest_cp.model.result import SolveOptions, Space
from nest_cp.solvers.certify import certify_full, unsupported
from nest_cp.solvers.registry import run_unrefereed
from nest_cp.verify import certified_tables
from nest_cp.verify.cache import ResultCache, code_fingerprint, instance_digest, result_key

LOGGER = logging.getLogger(__name__)

BACKEND = "certify-full"
DEFAULT_TIME_LIMIT_S = 600.0


@dataclass(frozen=True)
class FullCertOptions:
    """The protocol of one certification run."""

    time_limit_s: float = DEFAULT_TIME_LIMIT_S  # a wall-clock cap when work_limit is set
    seed: int = 0
    cache_dir: Path = Path(".nest-cp-cache")
    use_cache: bool = True
    work_limit: float | None = None  # work units per instance (search.certify_full)

    def solve_options(self) -> SolveOptions:
        return SolveOptions(space=Space.FULL, time_limit_s=self.time_limit_s, seed=self.seed,
                            workers=1, work_limit=self.work_limit)


def certify_instance(path: Path, options: FullCertOptions) -> dict:
    """The certification record of one instance file (from the cache when it is there)."""
    instance = load_instance(path)
    reason = unsupported(instance)
    if reason is not None:
        raise NestCpError(f"{path}: --certify-full cannot bound this instance: {reason}")
    sha = instance_digest(instance)
    cache = ResultCache(options.cache_dir, options.use_cache)
    key = result_key(sha, BACKEND, options.solve_options(), code_fingerprint())
    cached = cache.get(key)
    if cached is not None and _still_refereed(instance, cached):
        return {**cached, "source": "cache"}
    record = _certify(path, instance, sha, options)
    cache.put(key, record)
    return {**record, "source": "solved"}


def _certify(path: Path, instance: Instance, sha: str, options: FullCertOptions) -> dict:
    network = NetworkModel(instance.cluster)
    began = time.monotonic()
    dp = run_unrefereed(instance, "dp", SolveOptions())  # one mode at a time under a launcher
    dp_seconds = time.monotonic() - began
    dp_ticks = None
    if dp.plan is not None:
        evaluation = evaluate(instance, dp.plan, network)
        dp_ticks = evaluation.objective_ticks if evaluation.feasible else None
    # the time limit bounds the whole certification, the DP's plan included
    certificate = certify_full(instance, dp.plan if dp_ticks is not None else None,
                               max(1.0, options.time_limit_s - dp_seconds), options.seed,
                               options.work_limit)
    notes = list(certificate.notes)
    if dp.objective_ticks is not None and dp.objective_ticks != dp_ticks:
        notes.append(f"the DP reports {dp.objective_ticks} ticks for its plan, the evaluator "
                     f"(the referee, docs/cost-model.md) prices it at {dp_ticks}: the DP does "
                     f"not price every rule of the cost model yet; its T here is the "
                     f"evaluator's")
    best = certificate.plan
    return {
        "instance": path.name.removesuffix(".json"), "path": str(path), "sha256": sha,
        "backend": BACKEND, "space": Space.FULL.value,
        "status": certificate.status.value, "objective_ticks": certificate.objective_ticks,
        "bound_ticks": certificate.bound_ticks,
        "wall_time_s": round(certificate.wall_time_s + dp_seconds, 3),
        "plan": None if best is None else plan_to_dict(best),
        "plan_source": "dp" if certificate.plan_source == "hint" else certificate.plan_source,
        "closed_by": certificate.closed_by,
        "sizes": {"layers": instance.workload.num_layers,
                  "devices": instance.cluster.num_devices},
        "dp": {"objective_ticks": dp_ticks, "reported_ticks": dp.objective_ticks,
               "status": dp.status.value, "wall_time_s": round(dp_seconds, 3),
               "plan": None if dp.plan is None else plan_to_dict(dp.plan),
               "summary": None if dp.plan is None else describe_plan(instance, dp.plan,
                                                                     network)},
        "best_summary": None if best is None else describe_plan(instance, best, network),
        "shapes": {"total": certificate.shapes_total,
                   "pruned_fast": certificate.shapes_pruned_fast,
                   "visited": certificate.shapes_visited, "open": certificate.shapes_open},
        "open_shapes": [o.as_dict() for o in certificate.outcomes
                        if certificate.bound_ticks is not None
                        and o.bound < (certificate.objective_ticks or 0)][:5],
        "binding": _binding_counts(certificate),
        "second_proofs": _second_proofs(certificate),
        "time_limit_s": options.time_limit_s, "seed": options.seed, "notes": notes,
        **({} if options.work_limit is None else {
            "work_limit": options.work_limit, "work_units": certificate.work_used,
            **({"wall_capped": True} if certificate.wall_capped else {})}),
    }


def _second_proofs(certificate) -> dict[str, int]:
    """How the relaxation proofs the certificate rests on were checked: each OPTIMAL or
    INFEASIBLE relaxation is solved again without presolve ("agreed"); "disagreed" and
    "unchecked" ones were downgraded to their lower bound (nest_cp.solvers.cpsat_solver)."""
    counts = Counter(outcome.second_proof for outcome in certificate.outcomes
                     if outcome.second_proof != "none")
    return {kind: counts[kind] for kind in ("agreed", "disagreed", "unchecked")}


def _binding_counts(certificate) -> dict[str, int]:
    """How many visited shapes each bound settled (the strongest one that applied)."""
    counts: Counter = Counter()
    for outcome in certificate.outcomes:
        counts[outcome.decided_by] += 1
    return dict(sorted(counts.items()))


def _still_refereed(instance: Instance, record: dict) -> bool:
    """A cached record counts only if the evaluator still prices its plans as recorded."""
    try:
        for plan_dict, ticks in ((record["plan"], record["objective_ticks"]),
                                 (record["dp"]["plan"], record["dp"]["objective_ticks"])):
            if plan_dict is None:
                continue
            evaluation = evaluate(instance, plan_from_dict(plan_dict))
            if not evaluation.feasible or evaluation.objective_ticks != ticks:
                LOGGER.warning("cached certificate of %s no longer passes the evaluator; "
                               "certifying again", instance.name)
                return False
    except (NestCpError, KeyError, TypeError, ValueError) as exc:
        LOGGER.warning("ignoring cached certificate of %s (%s)", instance.name, exc)
        return False
    return True


# ------------------------------------------------------------------ plan summaries


def describe_plan(instance: Instance, plan: Plan, network: NetworkModel) -> dict:
    """What a plan chooses, in the terms a reader compares: degrees, split, recomputation,
    the tier of every pipeline boundary and sync group, and which rank layouts give its
    placement (empty: outside every structured space)."""
    placement = plan.placement
    tiers = [t.name for t in instance.cluster.network.tiers] \
        if network.is_hierarchical else None
    boundaries = Counter()
    for stage in range(plan.num_stages - 1):
        worst = max(network.tier_of((placement[stage][r][j], placement[stage + 1][r][j]))
                    for r in range(plan.num_replicas) for j in range(plan.devices_per_replica))
        boundaries[tiers[worst]] += 1
    sync = Counter()
    for stage in range(plan.num_stages):
        devices = [placement[stage][r][j] for r in range(plan.num_replicas)
                   for j in range(plan.devices_per_replica)]
        groups = [[d for d in devices[t::plan.config.tp]] for t in range(plan.config.tp)] \
            if plan.num_replicas * plan.config.ep > 1 else []
        worst = max((network.tier_of(group) for group in groups if len(group) > 1),
                    default=None)
        sync["-" if worst is None else tiers[worst]] += 1
    layers = [stage.last_layer - stage.first_layer + 1 for stage in plan.stages]
    full = [i for i, stage in enumerate(plan.stages) if stage.recompute.value == "full"]
    return {"tp": plan.config.tp, "ep": plan.config.ep, "cp": plan.config.cp,
            "stages": plan.num_stages,
            "dp": plan.num_replicas, "zero": plan.zero, "microbatch": plan.microbatch,
            "layers_per_stage": layers, "full_recompute_stages": full,
            "boundary_tiers": dict(boundaries), "sync_tiers": dict(sync),
            "layouts": _layouts_of(plan, network)}


def _layouts_of(plan: Plan, network: NetworkModel) -> list[str]:
    """Names of the structured space's rank layouts (``NetworkModel.structured_layouts``:
    v2's orders, and v3a's device orders and spare-first offsets) that give the plan's
    placement; none for c > 1 (the layouts order t and e, not a context dimension:
    ``plan.contiguous_placement``)."""
    if plan.config.cp > 1:
        return []
    placed = np.asarray(plan.placement, dtype=np.int64)
    found = []
    for layout in network.structured_layouts:
        devices = layout.devices(plan.config, plan.num_stages, plan.num_replicas,
                                 np.asarray(network.layout_order(layout), dtype=np.int64),
                                 network.node_size)
        if np.array_equal(devices, placed):
            found.append(layout.name)
    return found


def run_all(files: list[Path], options: FullCertOptions, executor: Executor,
            progress: bool) -> list[dict]:
    """Certify every file on ``executor``; records in file order (a task's error is raised)."""
    with Progress("certify-full", len(files), show_bar=progress, logger=LOGGER) as bar:
        done = run_ordered(executor, functools.partial(certify_instance, options=options),
                           files, on_done=lambda d: bar.advance(status=files[d.index].name))
    failed = next((d.error for d in done if d.error is not None), None)
    if failed is not None:
        raise failed
    return [d.value for d in done]


def write_outputs(document: dict, out_dir: Path) -> None:
    """certified.json and certified.{md,csv,tex}, each written atomically by the one safe
    writer."""
    out_dir.mkdir(parents=True, exist_ok=True)
    outputs = {"certified.json": json.dumps(document, indent=1) + "\n"}
    outputs |= {f"certified.{fmt}": certified_tables.render(document, fmt)
                for fmt in certified_tables.FORMATS}
    for name, text in outputs.items():
        write_output(out_dir / name, text)


def read_records(path: Path) -> dict:
    """A stored certified.json document."""
    document = read_document(path)
    if not isinstance(document, dict) or "instances" not in document:
        raise NestCpError(f"{path}: expected a certified.json written by nest-cp verify "
                          f"--certify-full")
    return document
