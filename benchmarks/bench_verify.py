"""Benchmark of the verify cache: cold run versus a rerun with nothing changed.

``run(out_dir)`` verifies ``instances/small`` with the default backends twice in a
fresh cache directory, timing both runs and counting the solves each performed, and
writes ``verify_cache.json`` and ``verify_cache.md``.  The cached rerun should take
under 10% of the cold run (it only loads instances and re-referees cached plans).
"""

from __future__ import annotations

import json
import logging
import os
import platform
import tempfile
import time
from pathlib import Path

from nest_cp.verify.harness import (
    DEFAULT_BACKENDS,
    HarnessOptions,
    Task,
    discover,
    run_tasks,
    solve_counts,
)

LOGGER = logging.getLogger(__name__)

SMALL_DIR = Path(__file__).resolve().parent.parent / "instances" / "small"
TIME_LIMIT_S = 20.0


def _timed_run(tasks: list[Task], jobs: int) -> tuple[float, dict[str, int]]:
    start = time.perf_counter()
    records = run_tasks(tasks, jobs)
    return time.perf_counter() - start, solve_counts(records)


def measure(instances_dir: Path = SMALL_DIR, jobs: int | None = None) -> dict:
    """Cold and cached wall times of verifying ``instances_dir`` in a fresh cache."""
    jobs = jobs or os.cpu_count() or 1
    with tempfile.TemporaryDirectory(prefix="nest-cp-bench-cache-") as cache_dir:
        options = HarnessOptions(backends=DEFAULT_BACKENDS, time_limit_s=TIME_LIMIT_S,
                                 cache_dir=Path(cache_dir))
        tasks = [Task(path, options) for path in discover([instances_dir])]
        cold_s, cold_counts = _timed_run(tasks, jobs)
        cached_s, cached_counts = _timed_run(tasks, jobs)
    return {"instances": len(tasks), "backends": list(DEFAULT_BACKENDS),
            "time_limit_s": TIME_LIMIT_S, "jobs": jobs,
            "cold_s": round(cold_s, 3), "cached_s": round(cached_s, 3),
            "cached_over_cold": round(cached_s / cold_s, 4),
            "cold_runs": cold_counts, "cached_runs": cached_counts,
            "machine": {"platform": platform.platform(), "cores": os.cpu_count()}}


def run(out_dir: Path) -> None:
    """Measure and write verify_cache.json and verify_cache.md under ``out_dir``."""
    result = measure()
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "verify_cache.json").write_text(json.dumps(result, indent=1) + "\n")
    verdict = "meets" if result["cached_over_cold"] < 0.10 else "MISSES"
    lines = ["# verify: cold run vs cached rerun", "",
             f"{result['instances']} instances of instances/small, backends "
             f"{', '.join(result['backends'])}, {result['time_limit_s']} s limit, "
             f"{result['jobs']} jobs, on {result['machine']['platform']} "
             f"({result['machine']['cores']} cores).", "",
             "| run | wall [s] | solved | from cache |", "|---|---|---|---|",
             f"| cold | {result['cold_s']:.2f} | {result['cold_runs']['solved']} | "
             f"{result['cold_runs']['cache']} |",
             f"| cached rerun | {result['cached_s']:.2f} | {result['cached_runs']['solved']} | "
             f"{result['cached_runs']['cache']} |", "",
             f"Cached / cold = {100 * result['cached_over_cold']:.1f}% ({verdict} the < 10% "
             f"target)."]
    (out_dir / "verify_cache.md").write_text("\n".join(lines) + "\n")
    LOGGER.info("verify cache: cold %.2f s, cached %.2f s", result["cold_s"], result["cached_s"])
