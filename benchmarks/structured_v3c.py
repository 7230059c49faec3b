"""Issue 31, node tails: the DP over structured space v3c against v3b-R and the best plans
known.

For the rows of ``reports/paper/certified.json`` named (default: all 50), the DP is run
twice in this process, over v3b-R's layouts (``NetworkModel.structured_layouts`` without
the node tail) and over v3c's (the default); each plan is re-priced by the evaluator (it
must equal the DP's objective to the tick) and T is compared with the certificate's best
plan (``objective_ticks``).  Wall times are of this process on whatever machine runs it
(say whether it was loaded).

Run: ``python -m benchmarks.structured_v3c [--only NAME ...] [--out FILE]``; ``--table
FILE`` prints the markdown table from a result file; ``--speed DEVICES v3b|v3c`` times the
DP on GPT3-175B with the v3 choices on nest-tpuv4-fattree (one fresh process per run).
"""

from __future__ import annotations

import logging
from pathlib import Path

from benchmarks.structured_v3a import WITHIN, comparison_main, run_dp, space_layouts
from nest_cp.io.readers import load_instance

logger = logging.getLogger(__name__)

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "reports" / "structured_v3c.json"


def measure(path: Path, best_ticks: int, name: str) -> dict:
    instance = load_instance(path)
    row = {"instance": name, "best_ticks": best_ticks,
           "v3b": run_dp(instance, space_layouts(instance, "v3b")),
           "v3c": run_dp(instance, space_layouts(instance, "v3c"))}
    logger.info("%s: v3b-R %d, v3c %d (%s), best %d", name, row["v3b"]["ticks"],
                row["v3c"]["ticks"], row["v3c"]["layout"], best_ticks)
    return row


def table(rows: list[dict]) -> list[str]:
    lines = ["| instance | v3b-R: T / best − 1 | v3c: T / best − 1 | v3c layout (t,e,S,d) "
             "| v3b-R s | v3c s |", "|---|---:|---:|---|---:|---:|"]
    for row in rows:
        best, new = row["best_ticks"], row["v3c"]
        lines.append(
            f"| {row['instance']} | {row['v3b']['ticks'] / best - 1:+.3%} "
            f"| {new['ticks'] / best - 1:+.3%} | {new['layout']} "
            f"({new['tp']},{new['ep']},{new['S']},{new['d']}) "
            f"| {row['v3b']['wall_s']:.2f} | {new['wall_s']:.2f} |")
    for version in ("v3b", "v3c"):
        within = sum(row[version]["ticks"] <= (1 + WITHIN) * row["best_ticks"] for row in rows)
        equal = sum(row[version]["ticks"] <= row["best_ticks"] for row in rows)
        lines.append(f"<!-- {version}: {within}/{len(rows)} within 0.5%, {equal} at or below "
                     f"the best plan known -->")
    return lines


def speed(devices: int, version: str, network: str = "nest-tpuv4-fattree") -> dict:
    """The DP's wall time on GPT3-175B with the v3 choices (``bench_dp.v2_instance(...,
    v3=True)``) over v3b-R's or v3c's layouts, in this process (run each in a fresh one)."""
    from benchmarks.bench_dp import v2_instance

    instance, _ = v2_instance("gpt3-175b", devices, network, v3=True)
    row = run_dp(instance, space_layouts(instance, version))
    row.update(devices=devices, network=network, version=version)
    return row


def main() -> None:
    comparison_main(__doc__.splitlines()[0], measure, table, speed, OUT, None,
                    "v3b-R's or v3c")

if __name__ == "__main__":
    main()
