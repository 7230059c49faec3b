"""Benchmark of the exact backends' time limit on the largest preset instance.

``run(out_dir)`` writes GPT3-175B on 1,024 TPUv4 devices (``nest-cp instance new
--model gpt3-175b --devices 1024 --network nest-tpuv4-fattree``), then runs
``nest-cp solve --backend cpsat|milp --time-limit 20 --json`` as a user would (a
fresh process, instance loading included) and records the wall time of the whole
command, the DP hint's share, the status, objective and bound.  Target: every run
within 30 s, status FEASIBLE or UNKNOWN (OPTIMAL only if proven), a bound below the
objective.  Writes ``time_limit.json`` and ``time_limit.md``.
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TIME_LIMIT_S = 20.0
TARGET_S = 30.0
BACKENDS = ("cpsat", "milp")


def _nest_cp(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "nest_cp.cli", *args], capture_output=True,
                          text=True, check=False)


def measure() -> dict:
    """Wall time, status, objective and bound of each backend under the limit."""
    runs = []
    with tempfile.TemporaryDirectory(prefix="nest-cp-bench-") as folder:
        instance = str(Path(folder) / "gpt3-1024.json")
        made = _nest_cp("instance", "new", "--model", "gpt3-175b", "--devices", "1024",
                        "--network", "nest-tpuv4-fattree", "-o", instance)
        if made.returncode != 0:
            raise RuntimeError(made.stderr)
        for backend in BACKENDS:
            start = time.perf_counter()
            done = _nest_cp("solve", instance, "--backend", backend, "--time-limit",
                            str(TIME_LIMIT_S), "--json")
            wall = time.perf_counter() - start
            record = json.loads(done.stdout) if done.returncode in (0, 1) else {}
            runs.append({"backend": backend, "exit_code": done.returncode,
                         "command_wall_s": round(wall, 2),
                         "hint_wall_time_s": record.get("hint_wall_time_s"),
                         "solver_wall_time_s": record.get("wall_time_s"),
                         "status": record.get("status"),
                         "objective_ticks": record.get("objective_ticks"),
                         "bound_ticks": record.get("bound_ticks"),
                         "within_target": wall <= TARGET_S})
    return {"instance": "gpt3-175b, nest-tpuv4-fattree, 1024 devices",
            "time_limit_s": TIME_LIMIT_S, "target_s": TARGET_S, "runs": runs,
            "machine": {"platform": platform.platform(), "cores": os.cpu_count()}}


def run(out_dir: Path) -> None:
    """Measure and write time_limit.json and time_limit.md under ``out_dir``."""
    result = measure()
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "time_limit.json").write_text(json.dumps(result, indent=1) + "\n",
                                             encoding="utf-8")
    lines = ["# Time limit of the exact backends on GPT3-175B, 1,024 devices", "",
             f"`nest-cp solve --backend B --time-limit {TIME_LIMIT_S:g}` in a fresh process "
             f"(instance loading and the DP hint included); target: at most {TARGET_S:g} s, "
             f"FEASIBLE or UNKNOWN with a bound.", "",
             "| backend | command wall [s] | DP hint [s] | status | objective [ticks] | "
             "bound [ticks] | bound / objective | within target |",
             "|---|---:|---:|---|---:|---:|---:|---|"]
    for entry in result["runs"]:
        ratio = (f"{entry['bound_ticks'] / entry['objective_ticks']:.3f}"
                 if entry["bound_ticks"] and entry["objective_ticks"] else "—")
        hint = entry["hint_wall_time_s"]
        lines.append(f"| {entry['backend']} | {entry['command_wall_s']:.1f} | "
                     f"{'—' if hint is None else f'{hint:.1f}'} | {entry['status']} | "
                     f"{entry['objective_ticks']} | {entry['bound_ticks']} | {ratio} | "
                     f"{'yes' if entry['within_target'] else 'NO'} |")
    machine = result["machine"]
    lines += ["", f"Machine: {machine['platform']}, {machine['cores']} cores."]
    (out_dir / "time_limit.md").write_text("\n".join(lines) + "\n", encoding="utf-8")
