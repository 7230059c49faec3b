"""Exact-solver speed benchmark: how large an instance CP-SAT and the MILP prove optimal.

Protocol (written into the results beside the numbers): seeded random instances
from nest_cp.harness.generators (communication-heavy: comm_scale 100, TP widths 1 and
2), full space, one worker, seed 0.

1. Target suite: 8 layers and 16 devices on a 2-tier (4 x 4) and a 3-tier
   (2 x 2 x 4) hierarchical network, two seeds each.  CP-SAT gets 60 s, the MILP
   300 s with HiGHS and 60 s with CBC on one instance per network (the budget
   keeps the whole run under 15 minutes).  Structured CP-SAT and the DP are
   reported beside the full-space optimum: the algorithmic certificate and the
   structural gap (an interval when the exact run stopped early).  The same
   instances run again with the v2 choices allowed (recompute none / selective /
   full, v in {1, 2, 4}, overlapped gradient reduction), and once more with cost
   model v3's (also ZeRO 0-3 under Megatron's 2/4/12 bytes and overlapped parameter
   gathers): CP-SAT in both spaces and the DP.
2. Scaling sweeps on 2-tier networks, 60 s per backend and size, a backend's
   sweep stopping at its first unproven size: devices 16, 32, ..., 512 at 8
   layers; layers 12, 16, 24, 32, 48, 64 at 16 devices.  ``--probe`` adds a
   10-minute CP-SAT run on the first size neither backend proved.

Run: ``python benchmarks/bench_exact.py [--probe] [--out benchmarks/results]``.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import logging
import os
import pathlib
import platform
import time
from importlib import metadata

from nest_cp.harness.generators import random_instance
from nest_cp.model.errors import BackendOptionError
from nest_cp.model.instance import IntraConfig, Optimizer, RecomputeMode
from nest_cp.model.result import Space, Status
from nest_cp.solvers.registry import SolveOptions, solve

logger = logging.getLogger(__name__)

CONFIGS = (IntraConfig(), IntraConfig(2, 1))
TARGET_NETWORKS = {"2-tier 4x4": (4, 4), "3-tier 2x2x4": (2, 2, 4)}
DEVICE_SWEEP = ((8, (4, 4)), (8, (4, 8)), (8, (8, 8)), (8, (8, 16)), (8, (8, 32)), (8, (8, 64)))
LAYER_SWEEP = ((12, (4, 4)), (16, (4, 4)), (24, (4, 4)), (32, (4, 4)), (48, (4, 4)),
               (64, (4, 4)))
CPSAT_LIMIT_S, MILP_LIMIT_S, SWEEP_LIMIT_S, PROBE_LIMIT_S = 60.0, 300.0, 60.0, 600.0
CBC_LIMIT_S = 60.0  # CBC is the slower MILP solver; a shorter limit keeps the run < 15 min
# the v2 choices (recompute modes, interleaving, overlapped reduction) of the later runs
V2_CHOICES = dict(recompute_modes=tuple(RecomputeMode), virtual_stages=(1, 2, 4),
                  overlap_grad_reduce=True)


def _instance(seed: int, num_layers: int, tier_sizes: tuple[int, ...], v2: bool = False,
              v3: bool = False):
    """``v2``: the v2 choices; ``v3``: also ZeRO 0-3 with Megatron's 2/4/12 bytes and both
    overlap flags (cost model v3, docs/cost-model.md §5)."""
    devices = 1
    for size in tier_sizes:
        devices *= size
    instance = random_instance(seed, num_layers=num_layers, tier_sizes=tier_sizes,
                               global_batch=4 * devices, comm_scale=100, configs=CONFIGS,
                               **(V2_CHOICES if v2 or v3 else {}))
    if not v3:
        return instance
    return dataclasses.replace(instance, training=dataclasses.replace(
        instance.training, zero_stages=(0, 1, 2, 3), overlap_param_gather=True,
        optimizer=Optimizer(2, 4, 12)))


def _run(instance, backend: str, space: Space, limit_s: float, solver: str = "highs") -> dict:
    options = SolveOptions(space=space, time_limit_s=limit_s, seed=0, workers=1,
                           milp_solver=solver)
    start = time.perf_counter()
    result = solve(instance, backend, options)
    return {"backend": backend if backend != "milp" else f"milp-{solver}",
            "space": space.value, "status": result.status.value,
            "objective_ticks": result.objective_ticks, "bound_ticks": result.bound_ticks,
            "wall_time_s": round(time.perf_counter() - start, 2), "time_limit_s": limit_s,
            "stats": result.stats}


def _describe(instance, network: str, seed: int) -> dict:
    return {"instance": instance.name, "network": network, "seed": seed,
            "layers": instance.workload.num_layers, "devices": instance.cluster.num_devices}


def _dp_run(instance) -> dict | None:
    try:
        return _run(instance, "dp", Space.STRUCTURED, 60.0)
    except (ImportError, BackendOptionError):  # no DP, or a DP that does not search §3.2
        return None


def target_suite(choice_sets: tuple[str, ...] = ("v1", "v2", "v3")) -> list[dict]:
    """The 8-layer, 16-device instances with each of ``choice_sets``' choices allowed."""
    rows = []
    for network, tiers in TARGET_NETWORKS.items() if "v1" in choice_sets else ():
        for seed in (0, 1):
            instance = _instance(seed, 8, tiers)
            runs = [_run(instance, "cpsat", Space.FULL, CPSAT_LIMIT_S)]
            if seed == 0:
                runs.append(_run(instance, "milp", Space.FULL, MILP_LIMIT_S))
                runs.append(_run(instance, "milp", Space.FULL, CBC_LIMIT_S, solver="cbc"))
            runs.append(_run(instance, "cpsat", Space.STRUCTURED, CPSAT_LIMIT_S))
            dp = _dp_run(instance)
            if dp is not None:
                runs.append(dp)
            rows.append({**_describe(instance, network, seed), "runs": runs})
            logger.info("target %s seed %d: %s", network, seed,
                        [(r["backend"], r["status"], r["wall_time_s"]) for r in runs])
    for choices, label in (({"v2": True}, "v2 choices"), ({"v3": True}, "v3 choices")):
        if label.split()[0] not in choice_sets:
            continue
        for network, tiers in TARGET_NETWORKS.items():
            for seed in (0, 1):
                instance = _instance(seed, 8, tiers, **choices)
                runs = [_run(instance, "cpsat", Space.FULL, CPSAT_LIMIT_S),
                        _run(instance, "cpsat", Space.STRUCTURED, CPSAT_LIMIT_S)]
                dp = _dp_run(instance)
                if dp is not None:
                    runs.append(dp)
                name = f"{network}, {label}"
                rows.append({**_describe(instance, name, seed), "runs": runs})
                logger.info("target %s seed %d: %s", name, seed,
                            [(r["backend"], r["status"], r["wall_time_s"]) for r in runs])
    return rows


def scaling_sweep(sizes, probe: bool) -> list[dict]:
    """Run both backends along ``sizes`` (layers, tiers) until each fails to prove one."""
    rows, open_backends = [], {"cpsat", "milp"}
    for num_layers, tiers in sizes:
        if not open_backends:
            break
        instance = _instance(0, num_layers, tiers)
        runs = [_run(instance, backend, Space.FULL, SWEEP_LIMIT_S)
                for backend in sorted(open_backends)]
        for run_ in runs:
            if run_["status"] != Status.OPTIMAL.value:
                open_backends.discard(run_["backend"].split("-")[0])
        if probe and all(r["status"] != Status.OPTIMAL.value for r in runs):
            runs += [_run(instance, "cpsat", Space.FULL, PROBE_LIMIT_S)]
        rows.append({**_describe(instance, "2-tier " + "x".join(map(str, tiers)), 0),
                     "runs": runs})
        logger.info("sweep L=%d N=%d: %s", num_layers, instance.cluster.num_devices,
                    [(r["backend"], r["status"], r["wall_time_s"]) for r in runs])
    return rows


def _largest_proven(sweep: list[dict], backend_prefix: str) -> dict | None:
    """Most devices (at 8 layers) and most layers (at 16 devices) proven within 60 s."""
    proven = [row for row in sweep for run_ in row["runs"]
              if run_["backend"].startswith(backend_prefix) and run_["status"] == "OPTIMAL"
              and run_["wall_time_s"] <= SWEEP_LIMIT_S]
    at_8_layers = [row["devices"] for row in proven if row["layers"] == 8]
    at_16_devices = [row["layers"] for row in proven if row["devices"] == 16]
    return {"devices_at_8_layers": max(at_8_layers, default=None),
            "layers_at_16_devices": max(at_16_devices, default=None)}


def _machine() -> dict:
    versions = {}
    for package in ("ortools", "pulp", "highspy"):
        try:
            versions[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            versions[package] = None
    return {"date_utc": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
            "platform": platform.platform(), "processor": platform.processor(),
            "cpus": os.cpu_count(), "python": platform.python_version(), **versions,
            "note": "machine shared with other jobs; one solver worker"}


def run(out_dir: pathlib.Path, probe: bool = False) -> None:
    """Run both suites and write exact_speed.json and exact_speed.md into ``out_dir``."""
    out_dir.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    target = target_suite()
    sweep = scaling_sweep(DEVICE_SWEEP, probe) + scaling_sweep(LAYER_SWEEP, probe)
    report = {
        "machine": _machine(),
        "protocol": {"space": "full", "workers": 1, "seed": 0, "cpsat_limit_s": CPSAT_LIMIT_S,
                     "milp_limit_s": MILP_LIMIT_S, "milp_solver": "highs",
                     "cbc_limit_s": CBC_LIMIT_S,
                     "sweep_limit_s": SWEEP_LIMIT_S, "probe": probe,
                     "instances": "nest_cp.harness.generators.random_instance(seed, "
                                  "comm_scale=100, "
                                  "configs=(tp1, tp2), global_batch=4*devices)",
                     "v2_choices": "recompute none/selective/full, virtual_stages 1/2/4, "
                                   "overlap_grad_reduce (second target run)"},
        "target": target, "sweep": sweep,
        "largest_proven_60s": {"cpsat": _largest_proven(sweep, "cpsat"),
                               "milp": _largest_proven(sweep, "milp")},
        "total_wall_time_s": round(time.perf_counter() - start, 1),
    }
    (out_dir / "exact_speed.json").write_text(json.dumps(report, indent=1) + "\n")
    (out_dir / "exact_speed.md").write_text(markdown(report))


def run_v3(out_dir: pathlib.Path) -> None:
    """Only the target suite's v3 rows (``--v3-only``): exact_speed_v3.{json,md}."""
    start = time.perf_counter()
    rows = target_suite(("v3",))
    report = {"machine": _machine(), "target": rows,
              "protocol": {"space": "full and structured", "workers": 1, "seed": 0,
                           "cpsat_limit_s": CPSAT_LIMIT_S,
                           "v3_choices": "v2 choices, ZeRO 0-3, optimizer 2/4/12, "
                                         "overlap_param_gather"},
              "total_wall_time_s": round(time.perf_counter() - start, 1)}
    (out_dir / "exact_speed_v3.json").write_text(json.dumps(report, indent=1) + "\n")
    machine = report["machine"]
    (out_dir / "exact_speed_v3.md").write_text("\n".join([
        "# Exact solvers with cost model v3's choices", "",
        f"Generated by `benchmarks/bench_exact.py --v3-only` on {machine['date_utc']}, "
        f"{machine['platform']}, {machine['cpus']} CPUs (shared), OR-Tools "
        f"{machine['ortools']}. The target suite's instances (8 layers, 16 devices) with the "
        "v2 choices, ZeRO 0-3 under 2/4/12 bytes and overlapped parameter gathers "
        "(docs/cost-model.md §5); CP-SAT 60 s per run, one worker, seed 0.", "",
        _table(rows), "", _gap_table(rows), "",
        f"Total wall time: {report['total_wall_time_s']} s.", ""]))


def markdown(report: dict) -> str:
    """The results as Markdown tables, generated from the JSON record."""
    machine, protocol = report["machine"], report["protocol"]
    lines = ["# Exact solvers: speed", "",
             f"Generated by `benchmarks/bench_exact.py` on {machine['date_utc']}, "
             f"{machine['platform']}, {machine['cpus']} CPUs (shared), Python "
             f"{machine['python']}, OR-Tools {machine['ortools']}, PuLP {machine['pulp']}, "
             f"highspy {machine['highspy']}.", "",
             f"Protocol: full space, {protocol['workers']} worker, seed {protocol['seed']}; "
             f"CP-SAT {protocol['cpsat_limit_s']:.0f} s, MILP HiGHS "
             f"{protocol['milp_limit_s']:.0f} s and CBC {protocol.get('cbc_limit_s', '-')} s per "
             f"instance; sweep (HiGHS) {protocol['sweep_limit_s']:.0f} s per backend and size. "
             f"Instances: `{protocol['instances']}`.", "",
             "## 8 layers, 16 devices", "", _table(report["target"]), "",
             "Certificates: the DP's optimum must equal structured CP-SAT's (algorithmic); "
             "the structural gap is (DP − full optimum) / full optimum, an interval when "
             "CP-SAT stopped at its limit.", "", _gap_table(report["target"]), "",
             "## Scaling sweeps (2-tier)", "", _table(report["sweep"]), "",
             "Largest sizes proven optimal within 60 s: "
             + "; ".join(f"{name}: {value['devices_at_8_layers']} devices at 8 layers, "
                         f"{value['layers_at_16_devices']} layers at 16 devices"
                         for name, value in report["largest_proven_60s"].items()) + ".", "",
             f"Total benchmark wall time: {report['total_wall_time_s']} s.", ""]
    return "\n".join(lines)


def _table(rows: list[dict]) -> str:
    header = ("| instance | network | L | N | backend | status | objective (ticks) | "
              "bound (ticks) | time (s) |")
    lines = [header, "|---|---|---|---|---|---|---|---|---|"]
    for row in rows:
        for run_ in row["runs"]:
            lines.append(f"| {row['instance']} | {row['network']} | {row['layers']} | "
                         f"{row['devices']} | {run_['backend']} ({run_['space']}) | "
                         f"{run_['status']} | {run_['objective_ticks']} | {run_['bound_ticks']} | "
                         f"{run_['wall_time_s']} |")
    return "\n".join(lines)


def _gap_table(rows: list[dict]) -> str:
    """Per instance: DP vs structured CP-SAT (must be equal) and DP vs full CP-SAT (the gap)."""
    lines = ["| instance | DP (ticks) | structured CP-SAT (ticks) | full optimum (ticks) | gap |",
             "|---|---|---|---|---|"]
    for row in rows:
        runs = {(run_["backend"], run_["space"]): run_ for run_ in row["runs"]}
        dp, full = runs.get(("dp", "structured")), runs.get(("cpsat", "full"))
        structured = runs.get(("cpsat", "structured"), {}).get("objective_ticks")
        if not dp or not full or dp["objective_ticks"] is None or full["objective_ticks"] is None:
            continue
        low = (dp["objective_ticks"] - full["objective_ticks"]) / full["objective_ticks"]
        if full["status"] == Status.OPTIMAL.value:
            gap = f"{low:.2%}"
        else:
            high = (dp["objective_ticks"] - full["bound_ticks"]) / full["bound_ticks"]
            gap = f"[{low:.2%}, {high:.2%}]"
        lines.append(f"| {row['instance']} ({row['network']}) | {dp['objective_ticks']} | "
                     f"{structured} | {full['objective_ticks']} ({full['status']}) | {gap} |")
    return "\n".join(lines)


def rewrite_markdown(out_dir: pathlib.Path) -> None:
    """Regenerate exact_speed.md from the stored exact_speed.json."""
    report = json.loads((out_dir / "exact_speed.json").read_text())
    (out_dir / "exact_speed.md").write_text(markdown(report))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--probe", action="store_true", help="add 10-minute probe runs")
    parser.add_argument("--out", type=pathlib.Path,
                        default=pathlib.Path(__file__).parent / "results")
    parser.add_argument("--markdown-only", action="store_true",
                        help="only regenerate exact_speed.md from exact_speed.json")
    parser.add_argument("--v3-only", action="store_true",
                        help="only the target suite with cost model v3's choices "
                             "(exact_speed_v3.md)")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    if args.markdown_only:
        rewrite_markdown(args.out)
    elif args.v3_only:
        run_v3(args.out)
    else:
        run(args.out, probe=args.probe)


if __name__ == "__main__":
    main()
