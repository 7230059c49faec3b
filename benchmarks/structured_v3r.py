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

import argparse
import json
import logging
from pathlib import Path

from benchmarks.structured_v3a import run_dp
from nest_cp.io.readers import load_instance
from nest_cp.model.network import NetworkModel

logger = logging.getLogger(__name__)

ROOT = Path(__file__).resolve().parent.parent
CERTIFIED = ROOT / "reports" / "paper" / "certified.json"
OUT = ROOT / "reports" / "structured_v3r.json"
MISS_ROWS = ("bert-large--nest-tpuv4-fattree--512", "bert-large--nest-tpuv4-fattree--1024",
             "llama2-7b--nest-h100-spineleaf--1024", "bert-large--nest-h100-spineleaf--1024",
             "gpt3-175b--nest-h100-spineleaf--256", "llama3-70b--nest-h100-spineleaf--128",
             "llama2-7b--nest-h100-spineleaf--256", "bert-large--nest-h100-spineleaf--512")


def measure(path: Path, best_ticks: int, name: str) -> dict:
    instance = load_instance(path)
    v3a = tuple(layout for layout in NetworkModel(instance.cluster).structured_layouts
                if layout.replica_block == 1)
    row = {"instance": name, "best_ticks": best_ticks,
           "v3a": run_dp(instance, v3a), "v3b": run_dp(instance, None)}
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
    layouts = NetworkModel(instance.cluster).structured_layouts
    if version == "v3a":
        layouts = tuple(layout for layout in layouts if layout.replica_block == 1)
    row = run_dp(instance, layouts)
    row.update(devices=devices, network=network, version=version)
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="*", default=list(MISS_ROWS))
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--table", type=Path)
    parser.add_argument("--speed", nargs=2, metavar=("DEVICES", "VERSION"),
                        help="time GPT3-175B (v3 choices) on nest-tpuv4-fattree over v3a's "
                             "or v3b's layouts; prints one JSON line")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    if args.speed:
        print(json.dumps(speed(int(args.speed[0]), args.speed[1])))
        return
    if args.table:
        print("\n".join(table(json.loads(args.table.read_text())["rows"])))
        return
    certified = {row["instance"]: row for row in json.loads(CERTIFIED.read_text())["instances"]}
    rows = [measure(ROOT / certified[name]["path"], certified[name]["objective_ticks"], name)
            for name in args.only]
    args.out.write_text(json.dumps({"rows": rows}, indent=1) + "\n")
    print("\n".join(table(rows)))


if __name__ == "__main__":
    main()
