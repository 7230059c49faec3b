"""Issue 31, gathered ends: the DP over structured space v3d against v3c and the best plans
known.

For the rows of ``reports/paper/certified.json`` named (default: all 50), the DP is run
twice in this process, over v3c's layouts (``NetworkModel.structured_layouts`` without the
gathered ends) and over v3d's (the default); each plan is re-priced by the evaluator (it
must equal the DP's objective to the tick) and T is compared with the certificate's best
plan (``objective_ticks``).  By construction v3d's optimum is at most v3c's on every row.
Wall times are of this process on whatever machine runs it (say whether it was loaded).

Run: ``python -m benchmarks.structured_v3d [--only NAME ...] [--out FILE]``; ``--table
FILE`` prints the markdown table from a result file; ``--speed DEVICES v3c|v3d`` times the
DP on GPT3-175B with the v3 choices on nest-tpuv4-fattree (one fresh process per run).
"""

from __future__ import annotations

import logging
from pathlib import Path

from benchmarks.structured_v3a import WITHIN, comparison_main, run_dp, space_layouts
from nest_cp.io.readers import load_instance

logger = logging.getLogger(__name__)

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "reports" / "structured_v3d.json"


def measure(path: Path, best_ticks: int, name: str) -> dict:
    instance = load_instance(path)
    row = {"instance": name, "best_ticks": best_ticks,
           "v3c": run_dp(instance, space_layouts(instance, "v3c")),
           "v3d": run_dp(instance, space_layouts(instance, "v3d"))}
    if row["v3d"]["ticks"] > row["v3c"]["ticks"]:
        raise AssertionError(f"{name}: v3d {row['v3d']['ticks']} above v3c "
                             f"{row['v3c']['ticks']}")
    logger.info("%s: v3c %d, v3d %d (%s), best %d", name, row["v3c"]["ticks"],
                row["v3d"]["ticks"], row["v3d"]["layout"], best_ticks)
    return row


def table(rows: list[dict]) -> list[str]:
    lines = ["| instance | v3c: T / best − 1 | v3d: T / best − 1 | v3d layout (t,e,S,d) "
             "| v3c s | v3d s |", "|---|---:|---:|---|---:|---:|"]
    for row in rows:
        best, new = row["best_ticks"], row["v3d"]
        lines.append(
            f"| {row['instance']} | {row['v3c']['ticks'] / best - 1:+.3%} "
            f"| {new['ticks'] / best - 1:+.3%} | {new['layout']} "
            f"({new['tp']},{new['ep']},{new['S']},{new['d']}) "
            f"| {row['v3c']['wall_s']:.2f} | {new['wall_s']:.2f} |")
    for version in ("v3c", "v3d"):
        within = sum(row[version]["ticks"] <= (1 + WITHIN) * row["best_ticks"] for row in rows)
        equal = sum(row[version]["ticks"] <= row["best_ticks"] for row in rows)
        lines.append(f"<!-- {version}: {within}/{len(rows)} within 0.5%, {equal} at or below "
                     f"the best plan known -->")
    changed = sum(row["v3d"]["ticks"] < row["v3c"]["ticks"] for row in rows)
    lines.append(f"<!-- v3d below v3c on {changed}/{len(rows)} rows -->")
    return lines


def speed(devices: int, version: str, network: str = "nest-tpuv4-fattree") -> dict:
    """The DP's wall time on GPT3-175B with the v3 choices (``bench_dp.v2_instance(...,
    v3=True)``) over v3c's or v3d's layouts, in this process (run each in a fresh one)."""
    from benchmarks.bench_dp import v2_instance

    instance, _ = v2_instance("gpt3-175b", devices, network, v3=True)
    row = run_dp(instance, space_layouts(instance, version))
    row.update(devices=devices, network=network, version=version)
    return row


def main() -> None:
    comparison_main(__doc__.splitlines()[0], measure, table, speed, OUT, None,
                    "v3c's or v3d")


if __name__ == "__main__":
    main()
