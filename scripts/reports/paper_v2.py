"""What the v2 choices (docs/cost-model.md §3: interleaving, recompute modes, overlap) buy
on the NEST grid: instances/paper against instances/paper-v2, from their stored DP snapshots.

Usage (from the repository root)::

    .venv/bin/python scripts/reports/paper_v2.py

Reads, per grid point, ``instances/paper/<name>.ref.json`` and
``instances/paper-v2/<name>.ref.json`` (the DP's structured optimum in ticks, written by
``python -m nest_cp.verify.reference ... --backends dp``).  The snapshots hold no plan,
so the DP is run once more on both instances for the plans' choices (virtual stages v,
recompute mode per pipeline stage, S, d, tensor width); a run whose optimum differs from
its snapshot stops the script (the snapshot is stale: regenerate it first).  Writes
``paper_v2.csv`` (one row per grid point) and ``README.md`` (the table and a per-model
summary).  Nothing depends on the clock or the machine, so regenerating on unchanged code
and snapshots gives identical files.
"""

from __future__ import annotations

import csv
import io
import json
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
HERE = ROOT / "reports" / "paper_v2"  # outputs
V1_DIR, V2_DIR = ROOT / "instances" / "paper", ROOT / "instances" / "paper-v2"
MODES = ("none", "selective", "full")
SHORT = {"none": "none", "selective": "sel", "full": "full"}


def snapshot_ticks(instance: Path) -> int:
    """The DP's structured optimum stored beside ``instance`` (its regression snapshot)."""
    reference = json.loads(instance.with_name(instance.stem + ".ref.json").read_text("utf-8"))
    entry = reference["spaces"]["structured"]
    if entry["status"] != "OPTIMAL":
        raise SystemExit(f"{instance}: expected an OPTIMAL snapshot, got {entry['status']}")
    return entry["objective_ticks"]


def dp_plan(instance: Path, expected_ticks: int) -> dict:
    """The DP's plan on ``instance`` as the table reads it; its optimum must be the snapshot's."""
    from nest_cp.cost.evaluate import evaluate
    from nest_cp.io.readers import load_instance
    from nest_cp.solvers.registry import solve

    problem = load_instance(instance)
    result = solve(problem, "dp")
    if result.objective_ticks != expected_ticks:
        raise SystemExit(f"{instance}: the DP finds {result.objective_ticks} ticks, the snapshot "
                         f"says {expected_ticks}; regenerate the snapshots first")
    plan = result.plan
    evaluation = evaluate(problem, plan)
    modes = [plan.stage_recompute(stage).value for stage in range(plan.num_stages)]
    return {"tick_s": problem.training.tick_s, "v": plan.virtual_stages, "S": plan.num_stages,
            "d": plan.num_replicas, "tp": plan.config.tp, "ep": plan.config.ep,
            "modes": {mode: modes.count(mode) for mode in MODES if mode in modes},
            "sync_ticks": evaluation.sync_ticks,
            "exposed_sync_ticks": evaluation.exposed_sync_ticks}


def recompute_text(modes: dict[str, int]) -> str:
    """``sel 9 + none 5``: how many pipeline stages run each mode."""
    return " + ".join(f"{SHORT[mode]} {count}" for mode, count in modes.items())


def shape_text(plan: dict) -> str:
    """``S 4 x d 8 x t 2`` (and ``x e 4`` for expert parallelism)."""
    text = f"S {plan['S']} x d {plan['d']} x t {plan['tp']}"
    return text + (f" x e {plan['ep']}" if plan["ep"] > 1 else "")


def rows() -> list[dict]:
    """One row per grid point, in the order of instances/paper-v2."""
    found = []
    for v2_path in sorted(V2_DIR.glob("*.json")):
        if v2_path.name.endswith(".ref.json"):
            continue
        v1_path = V1_DIR / v2_path.name
        model, cluster, devices = v2_path.stem.split("--")
        t1, t2 = snapshot_ticks(v1_path), snapshot_ticks(v2_path)
        p1, p2 = dp_plan(v1_path, t1), dp_plan(v2_path, t2)
        print(f"{v2_path.stem}: {t1} -> {t2} ticks", file=sys.stderr)
        found.append({"model": model, "cluster": cluster, "devices": int(devices),
                      "t_v1_ticks": t1, "t_v2_ticks": t2, "tick_s": p2["tick_s"],
                      "v1": p1, "v2": p2})
    order = {"bert-large": 0, "llama2-7b": 1, "llama3-70b": 2, "gpt3-175b": 3,
             "mixtral-8x7b": 4}
    return sorted(found, key=lambda r: (r["cluster"], order.get(r["model"], 9), r["devices"]))


CSV_HEADER = ["model", "cluster", "devices", "tick_s", "T_v1_ticks", "T_v2_ticks", "speedup",
              "v1_S", "v1_d", "v1_tp", "v1_ep", "v1_recompute", "v2_v", "v2_S", "v2_d", "v2_tp",
              "v2_ep", "v2_recompute", "v2_sync_ticks", "v2_exposed_sync_ticks"]


def speedup(row: dict) -> float:
    return row["t_v1_ticks"] / row["t_v2_ticks"]


def render_csv(found: list[dict]) -> str:
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(CSV_HEADER)
    for row in found:
        p1, p2 = row["v1"], row["v2"]
        writer.writerow([row["model"], row["cluster"], row["devices"], f"{row['tick_s']:g}",
                         row["t_v1_ticks"], row["t_v2_ticks"], f"{speedup(row):.4f}",
                         p1["S"], p1["d"], p1["tp"], p1["ep"], recompute_text(p1["modes"]),
                         p2["v"], p2["S"], p2["d"], p2["tp"], p2["ep"],
                         recompute_text(p2["modes"]), p2["sync_ticks"],
                         p2["exposed_sync_ticks"]])
    return buffer.getvalue()


def _table(columns: list[str], body: list[list[str]]) -> list[str]:
    return (["| " + " | ".join(columns) + " |", "|" + "|".join("---" for _ in columns) + "|"]
            + ["| " + " | ".join(cells) + " |" for cells in body])


def _seconds(ticks: int, tick_s: float) -> str:
    return f"{ticks * tick_s:.3f}"


def summary(found: list[dict]) -> list[list[str]]:
    """Per model (both clusters, all sizes): speedup range and median, and how many DP plans
    use v > 1, selective and full recomputation."""
    models: dict[str, list[dict]] = {}
    for row in found:
        models.setdefault(row["model"], []).append(row)
    body = []
    for model, members in [*models.items(), ("all", found)]:
        ups = [speedup(row) for row in members]
        body.append([model, str(len(members)), f"{min(ups):.3f}", f"{statistics.median(ups):.3f}",
                     f"{max(ups):.3f}", str(sum(row["v2"]["v"] > 1 for row in members)),
                     str(sum("selective" in row["v2"]["modes"] for row in members)),
                     str(sum("full" in row["v2"]["modes"] for row in members)),
                     str(sum("full" in row["v1"]["modes"] for row in members))])
    return body


README_HEAD = """# What the v2 choices buy on the NEST grid

Written by `.venv/bin/python scripts/reports/paper_v2.py`; regenerate, do not edit.

`instances/paper` is the NEST evaluation grid with NEST's choices: plain 1F1B, recompute
none or full per stage, gradient reduction after the backward. `instances/paper-v2` is the
same fifty instances with the choices of `docs/cost-model.md` §3 open
(`instances/paper-v2/README.md`):
interleaved 1F1B with v ∈ {1, 2, 4} virtual stages, recompute none / selective / full per
stage, and overlapped gradient reduction. Every other input is the same, so the v2 space
contains the v1 space except for the overlap, which only lowers T; T_v2 ≤ T_v1 everywhere.

T_v1 and T_v2 are the DP's structured optima (its regression snapshots
`instances/paper{,-v2}/<name>.ref.json`, iteration time in seconds); speedup = T_v1 / T_v2.
The snapshots hold no plan, so the script runs the DP again on both and refuses to write
if its optimum differs from the snapshot. Plans: S pipeline stages x d replicas x tensor
width t (x expert width e), v virtual stages; recompute counts pipeline stages per mode
(sel = selective). sync exposed: the v2 plan's largest stage gradient sync and the part the
overlap leaves exposed, in ms. CSV: `paper_v2.csv` (integer ticks).
"""

SUMMARY_NOTE = """Per model, over both clusters and all five sizes: the speedup's range and
median, and how many DP plans of the v2 grid use v > 1, selective and full recomputation on
some stage (and, for comparison, how many v1 plans use full recomputation)."""


def render_readme(found: list[dict]) -> str:
    lines = [README_HEAD, "## Per model", "", SUMMARY_NOTE, ""]
    lines += _table(["model", "instances", "speedup min", "median", "max", "v > 1",
                     "selective", "full", "v1: full"], summary(found))
    for cluster in dict.fromkeys(row["cluster"] for row in found):
        lines += ["", f"## {cluster}", ""]
        body = []
        for row in (r for r in found if r["cluster"] == cluster):
            p1, p2, tick = row["v1"], row["v2"], row["tick_s"]
            body.append([row["model"], str(row["devices"]), _seconds(row["t_v1_ticks"], tick),
                         _seconds(row["t_v2_ticks"], tick), f"{speedup(row):.3f}",
                         shape_text(p1), recompute_text(p1["modes"]), str(p2["v"]),
                         shape_text(p2), recompute_text(p2["modes"]),
                         f"{p2['sync_ticks'] * tick * 1e3:.1f} / "
                         f"{p2['exposed_sync_ticks'] * tick * 1e3:.1f}"])
        lines += _table(["model", "N", "T_v1 [s]", "T_v2 [s]", "speedup", "v1 plan",
                         "v1 recompute", "v", "v2 plan", "v2 recompute",
                         "sync / exposed [ms]"], body)
    return "\n".join(lines) + "\n"


def _write(text: str, path: Path) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(path)


def main() -> int:
    found = rows()
    _write(render_csv(found), HERE / "paper_v2.csv")
    _write(render_readme(found), HERE / "README.md")
    print(f"wrote {HERE / 'README.md'} and paper_v2.csv ({len(found)} instances)",
          file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
