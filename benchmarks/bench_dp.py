"""DP planner speed and DP/manual throughput on the preset models (``make bench``).

Speed: each case runs in a fresh child process (one at a time), which reports the
solve's wall time and its peak resident memory (``ru_maxrss``, so interpreter and
imports included); targets: GPT3-175B on nest-tpuv4-fattree <= 5 s at 1,024 devices
and <= 60 s at 16,384, Llama3-70B and Mixtral-8x7B <= 5 s at 1,024, peak <= 2 GiB.

Throughput: for each preset model at 64 and 1,024 devices on both NEST networks,
the DP plan against the manual plan of DESIGN §6 — NEST's (p, d, t) at 128 devices
with d scaled by N / 128 (uniform split, recomputation where needed, Megatron
layout, via the ``fixed`` backend) — both refereed by the plan evaluator.  The
manual plan is "n/a" when d·N/128 is not a whole number >= 1 or it does not fit.
Writes ``dp_speed.json`` and ``dp_speed.md``.
"""

from __future__ import annotations

import concurrent.futures
import datetime
import json
import logging
import multiprocessing
import os
import platform
import resource
import time
from pathlib import Path

import numpy as np

logger = logging.getLogger(__name__)

SPEED_CASES = (  # (model, devices, network, target seconds)
    ("gpt3-175b", 1024, "nest-tpuv4-fattree", 5.0),
    ("gpt3-175b", 16384, "nest-tpuv4-fattree", 60.0),
    ("llama3-70b", 1024, "nest-tpuv4-fattree", 5.0),
    ("mixtral-8x7b", 1024, "nest-tpuv4-fattree", 5.0),
)
PEAK_TARGET_BYTES = 2 * 2**30
# DESIGN §6: NEST's manual (p, d, t[, e]) at 128 devices; Mixtral's expert width 4 (its setup).
MANUAL_AT_128 = {
    "bert-large": (8, 16, 1),
    "llama2-7b": (8, 16, 1),
    "llama3-70b": (80, 1, 1),
    "gpt3-175b": (32, 1, 4),
    "mixtral-8x7b": (32, 1, 1, 4),
}
RATIO_DEVICES = (64, 1024)
NETWORKS = ("nest-tpuv4-fattree", "nest-h100-spineleaf")


def run(out_dir: Path) -> None:
    """Measure, then write dp_speed.json and dp_speed.md into ``out_dir``."""
    out_dir.mkdir(parents=True, exist_ok=True)
    speed = [_speed_case(*case) for case in SPEED_CASES]
    ratios = [_ratio_case(model, devices, network) for network in NETWORKS
              for model in MANUAL_AT_128 for devices in RATIO_DEVICES]
    report = {"machine": _machine(), "speed": speed, "throughput_vs_manual": ratios,
              "peak_target_bytes": PEAK_TARGET_BYTES}
    (out_dir / "dp_speed.json").write_text(json.dumps(report, indent=1) + "\n")
    (out_dir / "dp_speed.md").write_text(_markdown(report))
    logger.info("wrote %s", out_dir / "dp_speed.json")


def _machine() -> dict:
    return {"date_utc": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
            "platform": platform.platform(), "processor": platform.processor(),
            "cpu_count": os.cpu_count(), "python": platform.python_version(),
            "numpy": np.__version__}


# ------------------------------------------------------------------ speed


def _speed_case(model: str, devices: int, network: str, target_s: float) -> dict:
    context = multiprocessing.get_context("spawn")
    with concurrent.futures.ProcessPoolExecutor(max_workers=1, mp_context=context) as pool:
        measured = pool.submit(_timed_solve, model, devices, network).result()
    measured.update(model=model, devices=devices, network=network, target_s=target_s,
                    meets_target=measured["wall_time_s"] <= target_s
                    and measured["peak_rss_bytes"] <= PEAK_TARGET_BYTES)
    logger.info("dp %s %d %s: %.2f s, %.0f MiB", model, devices, network,
                measured["wall_time_s"], measured["peak_rss_bytes"] / 2**20)
    return measured


def _timed_solve(model: str, devices: int, network: str) -> dict:
    """In the child: build the instance, time the DP, referee the plan, report peak RSS."""
    from nest_cp.backends import SolveOptions, check_result
    from nest_cp.dp.planner import solve
    from nest_cp.presets import build_instance

    instance = build_instance(model=model, devices=devices, network=network)
    start = time.perf_counter()
    result = solve(instance, SolveOptions())
    wall = time.perf_counter() - start
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux: KiB
    check_result(instance, result)
    return {"wall_time_s": round(wall, 3), "peak_rss_bytes": peak,
            "status": result.status.value, "objective_ticks": result.objective_ticks,
            "plan": _degrees(result.plan), "stats": result.stats}


def _degrees(plan) -> dict | None:
    if plan is None:
        return None
    return {"p": plan.num_stages, "d": plan.num_replicas, "t": plan.config.tp, "e": plan.config.ep,
            "b": plan.microbatch, "zero": plan.zero,
            "recompute_stages": sum(stage.recompute.value != "none" for stage in plan.stages)}


# ------------------------------------------------------------------ DP vs manual


def _manual_degrees(model: str, devices: int) -> tuple[int, ...] | None:
    """NEST's 128-device degrees with d scaled by N / 128; None if not a whole d >= 1."""
    degrees = MANUAL_AT_128[model]
    scaled = degrees[1] * devices
    if scaled % 128 or scaled < 128:
        return None
    return (degrees[0], scaled // 128, *degrees[2:])


def _ratio_case(model: str, devices: int, network: str) -> dict:
    from nest_cp.backends import SolveOptions, solve
    from nest_cp.presets import build_instance
    from nest_cp.result import Status

    instance = build_instance(model=model, devices=devices, network=network)
    dp_result = solve(instance, "dp")  # refereed by the evaluator
    row = {"model": model, "devices": devices, "network": network,
           "dp_status": dp_result.status.value, "dp_ticks": dp_result.objective_ticks,
           "dp_wall_time_s": round(dp_result.wall_time_s, 3), "dp_plan": _degrees(dp_result.plan),
           "manual_degrees": None, "manual_ticks": None, "dp_over_manual": None}
    degrees = _manual_degrees(model, devices)
    if degrees is not None:
        row["manual_degrees"] = list(degrees)
        manual = solve(instance, "fixed", SolveOptions(extra={"degrees": degrees}))
        if manual.status is not Status.INFEASIBLE and manual.plan is not None:
            row["manual_ticks"] = manual.objective_ticks
        else:
            row["manual_note"] = manual.message
    if row["manual_ticks"] and row["dp_ticks"]:
        # throughput ratio = B / T_dp over B / T_manual
        row["dp_over_manual"] = round(row["manual_ticks"] / row["dp_ticks"], 4)
        if row["dp_ticks"] > row["manual_ticks"]:
            logger.error("DP worse than manual on %s %d %s", model, devices, network)
    logger.info("ratio %s %d %s: %s", model, devices, network, row["dp_over_manual"])
    return row


# ------------------------------------------------------------------ report


def _markdown(report: dict) -> str:
    machine = report["machine"]
    lines = [
        "# DP planner: speed and throughput against the manual plan",
        "",
        f"Generated by `benchmarks/bench_dp.py` on {machine['date_utc']} "
        f"({machine['platform']}, {machine['cpu_count']} cores, Python {machine['python']}, "
        f"numpy {machine['numpy']}). Times are wall seconds of one `nest_cp.dp.planner.solve` call "
        "in a fresh process; peak is that process's maximum resident set (imports included).",
        "",
        "## Speed",
        "",
        "| model | devices | network | status | time (s) | target (s) | peak (MiB) | "
        "plan p/d/t/e/z | outer searched / total | meets |",
        "|---|---:|---|---|---:|---:|---:|---|---:|---|",
    ]
    for row in report["speed"]:
        plan = row["plan"] or {}
        lines.append(
            f"| {row['model']} | {row['devices']} | {row['network']} | {row['status']} | "
            f"{row['wall_time_s']:.2f} | {row['target_s']:.0f} | "
            f"{row['peak_rss_bytes'] / 2**20:.0f} | "
            f"{plan.get('p')}/{plan.get('d')}/{plan.get('t')}/{plan.get('e')}/{plan.get('zero')}"
            f" | {row['stats'].get('outer_searched')} / {row['stats'].get('outer_choices')} | "
            f"{'yes' if row['meets_target'] else 'NO'} |")
    lines += [
        "",
        "## DP / manual throughput",
        "",
        "Manual: DESIGN §6's (p, d, t[, e]) at 128 devices with d scaled by N/128 (uniform split, "
        "recompute where needed, Megatron layout, ZeRO 0); n/a when d·N/128 is not a whole "
        "number >= 1 or the plan does not fit. Ratio = T_manual / T_dp (= throughput DP / manual).",
        "",
        "| network | model | devices | DP p/d/t/e/z | DP T (ms) | manual p/d/t[/e] | "
        "manual T (ms) | DP / manual |",
        "|---|---|---:|---|---:|---|---:|---:|",
    ]
    for row in report["throughput_vs_manual"]:
        plan = row["dp_plan"] or {}
        manual = "/".join(map(str, row["manual_degrees"])) if row["manual_degrees"] else "n/a"
        lines.append(
            f"| {row['network']} | {row['model']} | {row['devices']} | "
            f"{plan.get('p')}/{plan.get('d')}/{plan.get('t')}/{plan.get('e')}/{plan.get('zero')}"
            f" | {_ms(row['dp_ticks'])} | {manual} | {_ms(row['manual_ticks'])} | "
            f"{row['dp_over_manual'] if row['dp_over_manual'] is not None else 'n/a'} |")
    return "\n".join(lines) + "\n"


def _ms(ticks: int | None) -> str:
    return "n/a" if ticks is None else f"{ticks / 1e6:,.1f}"
