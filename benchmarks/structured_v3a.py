"""Issue 31, step v3a: the DP over structured space v3a against v2 and the best plans known.

For every row of ``reports/paper/certified.json`` (the 50 paper-grid instances; the 20
where the certificate's plan beat the DP's are the ones reports/structured_v3_analysis.md
analysed) and, with ``--small``, the two hierarchical ``instances/small`` rows with a
structural gap: the DP is run twice in this process, over v2's 24 layouts
(``layouts=all_layouts()``) and over the v3a layouts (the default,
``NetworkModel.structured_layouts``); each plan is re-priced by the evaluator (it must equal
the DP's objective to the tick), and T is compared with the best plan known — the
certificate's (``objective_ticks``), or for ``instances/small`` the stored full-space
reference (``*.ref.json``).  Wall times are of this process on whatever machine runs it
(say whether it was loaded).

Run: ``python -m benchmarks.structured_v3a [--only NAME ...] [--small] [--out FILE]``;
``--table FILE`` prints the markdown of reports/structured_v3.md from a result file.
"""

from __future__ import annotations

import argparse
import json
import logging
import time
from pathlib import Path

from nest_cp.cost.evaluate import Evaluator
from nest_cp.dp.planner import solve as dp_solve
from nest_cp.io.readers import load_instance
from nest_cp.model.network import NetworkModel
from nest_cp.model.plan import all_layouts

logger = logging.getLogger(__name__)

ROOT = Path(__file__).resolve().parent.parent
CERTIFIED = ROOT / "reports" / "paper" / "certified.json"
SMALL = ROOT / "instances" / "small"
SMALL_ROWS = ("h3-dense-l6-d12", "tight-l8-d16-h3")
OUT = ROOT / "reports" / "structured_v3.json"
WITHIN = 0.005  # "within 0.5 % of the best plan known"


def space_layouts(instance, version: str) -> tuple:
    """The structured layouts of ``instance``'s network as structured space ``version``
    searched them: "v3a" (v2's orders through every device order, spare nodes first),
    "v3b" (and the replica blocks of v3b-R), "v3c" (and the node tails), "v3d" (and the
    gathered ends: all of ``NetworkModel.structured_layouts`` today), so each report
    compares the same two spaces whatever the structured space grows into later."""
    layouts = NetworkModel(instance.cluster).structured_layouts
    if version not in ("v3a", "v3b", "v3c", "v3d"):
        raise ValueError(f"expected a structured space v3a, v3b, v3c or v3d, got {version!r}")
    if version in ("v3a", "v3b", "v3c"):
        layouts = tuple(layout for layout in layouts if not layout.gathered_ends)
    if version in ("v3a", "v3b"):
        layouts = tuple(layout for layout in layouts if layout.node_tail is None)
    if version == "v3a":
        layouts = tuple(layout for layout in layouts if layout.replica_block == 1)
    return layouts


def comparison_main(description: str, measure, table, speed, out: Path,
                    rows: tuple[str, ...] | None, versions: str) -> None:
    """The command line of the reports that compare two structured spaces (``--only``,
    ``--out``, ``--table``, ``--speed DEVICES VERSION``); ``rows``: the certified.json rows
    measured by default (None: all of them); ``versions`` names the two for the help."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--only", nargs="*", default=None if rows is None else list(rows))
    parser.add_argument("--out", type=Path, default=out)
    parser.add_argument("--table", type=Path)
    parser.add_argument("--speed", nargs=2, metavar=("DEVICES", "VERSION"),
                        help=f"time GPT3-175B (v3 choices) on nest-tpuv4-fattree over {versions}'s "
                             "layouts; prints one JSON line")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    if args.speed:
        print(json.dumps(speed(int(args.speed[0]), args.speed[1])))
        return
    if args.table:
        print("\n".join(table(json.loads(args.table.read_text())["rows"])))
        return
    certified = {row["instance"]: row for row in json.loads(CERTIFIED.read_text())["instances"]}
    measured = [measure(ROOT / certified[name]["path"], certified[name]["objective_ticks"], name)
                for name in args.only or sorted(certified)]
    args.out.write_text(json.dumps({"rows": measured}, indent=1) + "\n")
    print("\n".join(table(measured)))


def two_space_report(old: str, new: str, out: Path, description: str,
                     rows: tuple[str, ...] | None = None) -> None:
    """The command line of a report comparing structured space ``old`` with ``new`` (its
    successor, so ``new``'s optimum is at most ``old``'s on every row, checked): per row
    of ``reports/paper/certified.json`` named, the DP over each space's layouts
    (:func:`space_layouts`) and T against the certificate's best plan; ``--speed`` times
    GPT3-175B with the v3 choices on nest-tpuv4-fattree over one of the two."""
    label = {"v3b": "v3b-R"}

    def measure(path: Path, best_ticks: int, name: str) -> dict:
        instance = load_instance(path)
        row = {"instance": name, "best_ticks": best_ticks,
               old: run_dp(instance, space_layouts(instance, old)),
               new: run_dp(instance, space_layouts(instance, new))}
        if row[new]["ticks"] > row[old]["ticks"]:
            raise AssertionError(f"{name}: {new} {row[new]['ticks']} above {old} "
                                 f"{row[old]['ticks']}")
        logging.getLogger(__name__).info(
            "%s: %s %d, %s %d (%s), best %d", name, label.get(old, old), row[old]["ticks"],
            label.get(new, new), row[new]["ticks"], row[new]["layout"], best_ticks)
        return row

    def table(measured: list[dict]) -> list[str]:
        before, after = label.get(old, old), label.get(new, new)
        lines = [f"| instance | {before}: T / best − 1 | {after}: T / best − 1 | {after} "
                 f"layout (t,e,S,d) | {before} s | {after} s |", "|---|---:|---:|---|---:|---:|"]
        for row in measured:
            best, plan = row["best_ticks"], row[new]
            lines.append(
                f"| {row['instance']} | {row[old]['ticks'] / best - 1:+.3%} "
                f"| {plan['ticks'] / best - 1:+.3%} | {plan['layout']} "
                f"({plan['tp']},{plan['ep']},{plan['S']},{plan['d']}) "
                f"| {row[old]['wall_s']:.2f} | {plan['wall_s']:.2f} |")
        for version in (old, new):
            within = sum(row[version]["ticks"] <= (1 + WITHIN) * row["best_ticks"]
                         for row in measured)
            equal = sum(row[version]["ticks"] <= row["best_ticks"] for row in measured)
            lines.append(f"<!-- {version}: {within}/{len(measured)} within 0.5%, {equal} at "
                         f"or below the best plan known -->")
        changed = sum(row[new]["ticks"] < row[old]["ticks"] for row in measured)
        lines.append(f"<!-- {new} below {old} on {changed}/{len(measured)} rows -->")
        return lines

    def speed(devices: int, version: str, network: str = "nest-tpuv4-fattree") -> dict:
        from benchmarks.bench_dp import v2_instance

        instance, _ = v2_instance("gpt3-175b", devices, network, v3=True)
        row = run_dp(instance, space_layouts(instance, version))
        row.update(devices=devices, network=network, version=version)
        return row

    comparison_main(description, measure, table, speed, out, rows,
                    f"{label.get(old, old)}'s or {new}")


def run_dp(instance, layouts) -> dict:
    """One DP solve over ``layouts`` (None: the network's structured layouts), its plan
    re-priced by the evaluator (which must agree to the tick), and what the tables show."""
    started = time.perf_counter()
    result = dp_solve(instance, layouts=layouts)
    wall = time.perf_counter() - started
    priced = Evaluator(instance).evaluate(result.plan).objective_ticks
    if priced != result.objective_ticks:
        raise AssertionError(f"DP reports {result.objective_ticks}, evaluator {priced}")
    return {"ticks": result.objective_ticks, "status": result.status.value,
            "layout": result.stats.get("layout"), "wall_s": round(wall, 2),
            "layouts_searched": result.stats.get("layouts_searched"),
            "S": result.plan.num_stages, "d": result.plan.num_replicas,
            "tp": result.plan.config.tp, "ep": result.plan.config.ep}


def measure(path: Path, best_ticks: int, name: str, analysed: bool) -> dict:
    instance = load_instance(path)
    row = {"instance": name, "best_ticks": best_ticks, "analysed": analysed,
           "v2": run_dp(instance, all_layouts()),
           "v3a": run_dp(instance, space_layouts(instance, "v3a"))}
    logger.info("%s: v2 %d, v3a %d (%s), best %d", name, row["v2"]["ticks"],
                row["v3a"]["ticks"], row["v3a"]["layout"], best_ticks)
    return row


def table(rows: list[dict]) -> list[str]:
    """Markdown: per row T_v2 / best − 1 and T_v3a / best − 1 (negative: below the best plan
    known), the v3a plan's layout and both wall times; then the counts within 0.5 %."""
    lines = ["| instance | v2: T / best − 1 | v3a: T / best − 1 | v3a layout (t,e,S,d) "
             "| v2 s | v3a s |", "|---|---:|---:|---|---:|---:|"]
    for row in rows:
        gaps = [row[space]["ticks"] / row["best_ticks"] - 1 for space in ("v2", "v3a")]
        plan = row["v3a"]
        lines.append(f"| {row['instance']}{'' if row['analysed'] else ' ‡'} | "
                     f"{100 * gaps[0]:+.3f}% | {100 * gaps[1]:+.3f}% | {plan['layout']} "
                     f"({plan['tp']},{plan['ep']},{plan['S']},{plan['d']}) | "
                     f"{row['v2']['wall_s']:.2f} | {plan['wall_s']:.2f} |")
    for label, chosen in (("analysed rows", [row for row in rows if row["analysed"]]),
                          ("all rows", rows)):
        if not chosen:
            continue
        counts = [sum(row[space]["ticks"] <= (1 + WITHIN) * row["best_ticks"] for row in chosen)
                  for space in ("v2", "v3a")]
        worst = [max(row[space]["ticks"] / row["best_ticks"] - 1 for row in chosen)
                 for space in ("v2", "v3a")]
        lines.append(f"| within 0.5 % ({label}) | {counts[0]}/{len(chosen)} | "
                     f"{counts[1]}/{len(chosen)} | worst v2 {100 * worst[0]:+.3f}%, "
                     f"v3a {100 * worst[1]:+.3f}% | | |")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--only", nargs="*", help="certified.json instance names")
    parser.add_argument("--analysed-only", action="store_true",
                        help="only the 20 rows the certificate beat the DP on")
    parser.add_argument("--small", action="store_true",
                        help=f"also the instances/small rows {', '.join(SMALL_ROWS)}")
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--table", type=Path, help="print the markdown of this result file")
    args = parser.parse_args()
    if args.table:
        print("\n".join(table(json.loads(args.table.read_text())["rows"])))
        return
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    rows = []
    for entry in json.loads(CERTIFIED.read_text())["instances"]:
        analysed = entry.get("plan_source") == "relaxation"
        if (args.only and entry["instance"] not in args.only) or (
                args.analysed_only and not analysed):
            continue
        rows.append(measure(ROOT / entry["path"], entry["objective_ticks"], entry["instance"],
                            analysed))
        args.out.write_text(json.dumps({"rows": rows}, indent=1) + "\n")
    if args.small:
        for name in SMALL_ROWS:
            reference = json.loads((SMALL / f"{name}.ref.json").read_text())
            rows.append(measure(SMALL / f"{name}.json", _reference_ticks(reference), name,
                                True))
    args.out.write_text(json.dumps({"rows": rows}, indent=1) + "\n")
    print("\n".join(table(rows)))


def _reference_ticks(reference: dict) -> int:
    """The full-space optimum a ``*.ref.json`` stores."""
    full = reference["spaces"]["full"]
    if full["status"] != "OPTIMAL":
        raise ValueError(f"{reference['instance']}: the stored full-space plan is not proven")
    return full["objective_ticks"]


if __name__ == "__main__":
    main()
