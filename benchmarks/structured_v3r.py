"""Issue 31, replica blocks: the DP over structured space v3b-R against v3a and the best
plans known.

For the rows of ``reports/paper/certified.json`` named (default: the eight where the DP's
v3a plan was more than 0.5 % above the certificate's best plan), the DP is run twice in
this process, over v3a's layouts (``NetworkModel.structured_layouts`` without the replica
blocks) and over v3b-R's (the default); each plan is re-priced by the evaluator (it must
equal the DP's objective to the tick) and T is compared with the certificate's best plan
(``objective_ticks``).  Wall times are of this process on whatever machine runs it (say
whether it was loaded).

Run: ``python -m benchmarks.structured_v3r [--only NAME ...] [--out FILE]``; ``--table
FILE`` prints the markdown table from a result file; ``--speed DEVICES v3a|v3b`` times the
DP on GPT3-175B with the v3 choices on nest-tpuv4-fattree (one fresh process per run).
"""

from __future__ import annotations

import logging
from pathlib import Path

from benchmarks.structured_v3a import comparison_main, run_dp, space_layouts
from nest_cp.io.readers import load_instance

logger = logging.getLogger(__name__)

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "reports" / "structured_v3r.json"
MISS_ROWS = ("bert-large--nest-tpuv4-fattree--512", "bert-large--nest-tpuv4-fattree--1024",
             "llama2-7b--nest-h100-spineleaf--1024", "bert-large--nest-h100-spineleaf--1024",
             "gpt3-175b--nest-h100-spineleaf--256", "llama3-70b--nest-h100-spineleaf--128",
             "llama2-7b--nest-h100-spineleaf--256", "bert-large--nest-h100-spineleaf--512")


def measure(path: Path, best_ticks: int, name: str) -> dict:
    instance = load_instance(path)
    row = {"instance": name, "best_ticks": best_ticks,
           "v3a": run_dp(instance, space_layouts(instance, "v3a")),
           "v3b": run_dp(instance, space_layouts(instance, "v3b"))}
    logger.info("%s: v3a %d, v3b-R %d (%s), best %d", name, row["v3a"]["ticks"],
                row["v3b"]["ticks"], row["v3b"]["layout"], best_ticks)
    return row


def table(rows: list[dict]) -> list[str]:
    lines = ["| instance | v3a: T / best − 1 | v3b-R: T / best − 1 | v3b-R layout (t,e,S,d) "
             "| v3a s | v3b-R s |", "|---|---:|---:|---|---:|---:|"]
    for row in rows:
        best, new = row["best_ticks"], row["v3b"]
        lines.append(
            f"| {row['instance']} | {row['v3a']['ticks'] / best - 1:+.3%} "
            f"| {new['ticks'] / best - 1:+.3%} | {new['layout']} "
            f"({new['tp']},{new['ep']},{new['S']},{new['d']}) "
            f"| {row['v3a']['wall_s']:.2f} | {new['wall_s']:.2f} |")
    for version in ("v3a", "v3b"):
        within = sum(row[version]["ticks"] <= 1.005 * row["best_ticks"] for row in rows)
        lines.append(f"<!-- {version}: {within}/{len(rows)} within 0.5% -->")
    return lines


def speed(devices: int, version: str, network: str = "nest-tpuv4-fattree") -> dict:
    """The DP's wall time on GPT3-175B with the v3 choices (``bench_dp.v2_instance(...,
    v3=True)``) over v3a's or v3b-R's layouts, in this process (run each in a fresh one)."""
    from benchmarks.bench_dp import v2_instance

    instance, _ = v2_instance("gpt3-175b", devices, network, v3=True)
    row = run_dp(instance, space_layouts(instance, version))
    row.update(devices=devices, network=network, version=version)
    return row


def main() -> None:
    comparison_main(__doc__.splitlines()[0], measure, table, speed, OUT, MISS_ROWS,
                    "v3a's or v3b")

if __name__ == "__main__":
    main()
