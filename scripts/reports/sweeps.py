"""Network co-design sweeps of the NEST grid: where each model stops gaining from bandwidth.

Usage (from the repository root)::

    .venv/bin/python scripts/reports/sweeps.py             # sweep, then write the README
    .venv/bin/python scripts/reports/sweeps.py --render    # README and figures from the
                                                            # stored sweep.json files only

For each of the five NEST-grid models at 1,024 devices (``instances/paper/*--1024.json``)
on both NEST networks, ``nest-cp sweep`` varies the bandwidth of each tier above the node
(H100 spine-leaf: leaf and spine; TPUv4 fat-tree: group and fabric, the same two levels)
over 0.25x, 0.5x, 1x, 2x and 4x of the preset's own value, one tier at a time, with the
full-space certificate under ``--work-limit`` work units per point (default 20,
deterministic, so the tables regenerate identically on a loaded machine; ``--work-limit off
--time-limit S`` for the old clock.  A certificate is an interval, honest at any limit; a
larger limit narrows it).  Each sweep is written to
``reports/sweeps/<model>--<network>--<tier>/`` (sweep.{json,csv,md,tex,png} and the
points' instances); this script then writes ``README.md`` (the knee of every sweep, the
protocol) and one figure per network and tier (throughput relative to 1x against the
multiplier, one line per model).

The knee: with multipliers m_1 < ... < m_k and the DP plan's throughputs X_1 ... X_k, the
knee is the smallest m_i from which the largest multiplier gains less than KNEE_GAIN (5 %):
X_k < (1 + KNEE_GAIN) · X_i.  "≤ 0.25x" means bandwidth barely matters over the range; a
knee at m_k means the model still gained at least 5 % from m_(k-1) to m_k ("not reached").

Sweeps are cached (.nest-cp-cache, by instance content), so an interrupted run resumes and
the 1x point is solved once per model and network.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
HERE = ROOT / "reports" / "sweeps"  # outputs
MODELS = ("bert-large", "gpt3-175b", "llama2-7b", "llama3-70b", "mixtral-8x7b")
NETWORKS = ("nest-h100-spineleaf", "nest-tpuv4-fattree")
DEVICES = 1024
VALUES = "0.25x,0.5x,1x,2x,4x"
KNEE_GAIN = 0.05
DEFAULT_WORK_LIMIT = 20.0  # work units per point (nest-cp sweep --work-limit)


def instance_path(model: str, network: str) -> Path:
    return ROOT / "instances" / "paper" / f"{model}--{network}--{DEVICES}.json"


def swept_tiers(network: str) -> tuple[str, ...]:
    """The tiers above the node (tier 0) of the NEST preset: its leaf and spine levels."""
    from nest_cp.profiles.presets import NETWORKS as PRESETS

    return tuple(tier.name for tier in PRESETS[network].tiers[1:])


def sweep_dir(out: Path, model: str, network: str, tier: str) -> Path:
    return out / f"{model}--{network}--{tier}"


def _relative(path: Path) -> str:
    """``path`` relative to the repository root (the sweep runs there), so the committed
    tables name no directory of the machine that made them."""
    return str(path.resolve().relative_to(ROOT))


def run_sweep(model: str, network: str, tier: str, args: argparse.Namespace) -> None:
    """``nest-cp sweep`` of one tier's bandwidth; exit 1 (a failed point) is recorded in its
    table and quoted in the README, anything else stops the script."""
    command = [sys.executable, "-m", "nest_cp.cli", "sweep",
               _relative(instance_path(model, network)),
               "--vary", f"{tier}.bandwidth_Bps={args.values}",
               "--out", _relative(sweep_dir(args.out, model, network, tier)),
               "--work-limit", args.work_limit,
               *([] if args.time_limit is None else ["--time-limit", str(args.time_limit)]),
               "--jobs", str(args.jobs),
               "--executor", args.executor, "--no-progress"]
    if args.address:
        command += ["--address", args.address]
    print(" ".join(command[2:]), flush=True)
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True)
    if done.returncode not in (0, 1):
        raise SystemExit(f"nest-cp sweep failed ({done.returncode}): {done.stderr.strip()}")
    print(done.stdout.strip().splitlines()[-2], flush=True)  # the summary line


def knee(xs: list[float], speeds: list[float | None]) -> str:
    """The knee of one sweep (module doc), as text."""
    if any(speed is None for speed in speeds):
        return "—"
    last = speeds[-1]
    first = next(i for i, speed in enumerate(speeds) if last < (1 + KNEE_GAIN) * speed)
    if first == 0:
        return f"≤ {xs[0]:g}x"
    if first == len(xs) - 1:
        return f"not reached by {xs[-1]:g}x"
    return f"{xs[first]:g}x"


def summarise(document: dict) -> dict:
    """Throughput relative to 1x, plans, knee and certificates of one stored sweep."""
    points = document["points"]
    xs = [p["settings"][0]["x"] for p in points]
    speeds = [p["dp"]["samples_per_s"] for p in points]
    one = speeds[xs.index(1.0)] if 1.0 in xs and speeds[xs.index(1.0)] else None
    gaps = [p["gap"] for p in points if p["gap"] is not None]
    def relative(speed: float | None) -> float | None:
        return None if speed is None or one is None else speed / one

    return {"xs": xs, "speeds": speeds,
            "relative": [relative(s) for s in speeds],
            # the optimum's certified throughput interval [B / best, B / bound], relative
            "band": [(relative(p["best_samples_per_s"]), relative(p["bound_samples_per_s"]))
                     for p in points],
            "plans": ["—" if p["dp"]["degrees"] is None else
                      "t{t} e{e} p{p} d{d}".format(**p["dp"]["degrees"]) for p in points],
            "knee": knee(xs, speeds),
            "statuses": {s: sum(p["status"] == s for p in points)
                         for s in ("OPTIMAL", "FEASIBLE", "open", "INFEASIBLE", "ERROR")},
            "max_gap": max(gaps, default=None),
            "failures": [f for p in points for f in p["failures"]]}


def stored(out: Path) -> dict[tuple[str, str, str], dict]:
    """Every stored sweep.json under ``out`` keyed by (model, network, tier)."""
    found = {}
    for model in MODELS:
        for network in NETWORKS:
            for tier in swept_tiers(network):
                path = sweep_dir(out, model, network, tier) / "sweep.json"
                if path.exists():
                    found[(model, network, tier)] = json.loads(path.read_text(encoding="utf-8"))
    return found


def plot(out: Path, network: str, tier: str, rows: dict[str, dict]) -> str:
    """One figure: throughput relative to 1x against the multiplier, a line per model."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import NullLocator

    figure, axis = plt.subplots(figsize=(5.6, 3.8))
    for colour, (model, row) in enumerate(rows.items()):
        points = [(x, r) for x, r in zip(row["xs"], row["relative"]) if r is not None]
        axis.plot([x for x, _ in points], [r for _, r in points], marker="o", label=model,
                  color=f"C{colour}")
        band = [(x, low, high) for x, (low, high) in zip(row["xs"], row["band"])
                if low is not None and high is not None]
        axis.fill_between([x for x, _, _ in band], [low for _, low, _ in band],
                          [high for _, _, high in band], color=f"C{colour}", alpha=0.15,
                          linewidth=0)
    xs = sorted({x for row in rows.values() for x in row["xs"]})
    axis.set_xscale("log")
    axis.xaxis.set_minor_locator(NullLocator())
    axis.set_xticks(xs, [f"{x:g}x" for x in xs])
    axis.set_xlabel(f"{tier} bandwidth (× the preset's)")
    axis.set_ylabel("throughput / throughput at 1x")
    axis.set_title(f"{network}, {DEVICES} devices\nband: certified interval of the "
                   f"optimum's throughput", fontsize=9)
    axis.legend(fontsize=7)
    figure.tight_layout()
    name = f"{network}--{tier}.png"
    figure.savefig(out / name, dpi=120)
    plt.close(figure)
    return name


def _limit_text(options: dict) -> str:
    if options.get("work_limit") is None:
        return f"{options['time_limit_s']:g} s"
    return (f"{options['work_limit']:g} work units (deterministic: the same on an idle or a "
            f"loaded machine; a {options['time_limit_s']:g} s wall-clock cap, † on a point it "
            f"ended)")


def write_readme(out: Path, documents: dict[tuple[str, str, str], dict]) -> None:
    if not documents:
        raise SystemExit(f"{out}: no stored sweep.json to render")
    protocol = next(iter(documents.values()))["protocol"]
    options, machine = protocol["options"], protocol["machine"]
    columns = sorted({p["settings"][0]["x"] for d in documents.values() for p in d["points"]})
    lines = [
        "# What network does each NEST-grid model need?",
        "",
        "Generated by `scripts/reports/sweeps.py` (rerun it to regenerate; `--render` rewrites "
        "this file and the figures from the stored `*/sweep.json`). For each of the five "
        f"NEST-grid models at {DEVICES} devices on both NEST networks, `nest-cp sweep` varies "
        "one inter-node tier's bandwidth (H100 spine-leaf: leaf, spine; TPUv4 fat-tree: "
        f"group, fabric) over {', '.join(f'{x:g}x' for x in columns)} of the preset's value. "
        "Throughput is "
        "the DP plan's (samples/s, the evaluator's price, docs/cost-model.md), relative to "
        "1x; each point also carries the full-space certificate's interval [bound, best] "
        "(`*/sweep.md`).",
        "",
        f"**Knee**: the smallest multiplier from which the largest one gains less than "
        f"{KNEE_GAIN:.0%} in throughput (X(largest) < {1 + KNEE_GAIN:g} · X(m)). \"≤ "
        f"{columns[0]:g}x\": bandwidth of this tier barely matters over the range; \"not "
        f"reached by {columns[-1]:g}x\": the model still gained at least {KNEE_GAIN:.0%} over "
        f"the last step.",
        "",
        f"Protocol: {_limit_text(options)} per point for the certificate (the DP's plan "
        f"included), seed {options['seed']}, one worker per solve; {protocol['date_utc']}; "
        f"nest-cp {protocol['versions']['nest-cp']}, OR-Tools {protocol['versions']['ortools']};"
        f" {machine['processor']}, {machine['cores']} cores.",
        "",
        "| network | tier | model | " + " | ".join(f"{x:g}x" for x in columns) + " | knee | "
        "plans (t e p d) | certified | max gap |",
        "|---|---|---|" + "---:|" * len(columns) + "---|---|---|---:|",
    ]
    figures = []
    for network in NETWORKS:
        for tier in swept_tiers(network):
            rows = {model: summarise(documents[(model, network, tier)]) for model in MODELS
                    if (model, network, tier) in documents}
            if not rows:
                continue
            for model, row in rows.items():
                by_x = dict(zip(row["xs"], row["relative"]))
                relative = ["—" if by_x.get(x) is None else f"{by_x[x]:.3f}" for x in columns]
                certified = ", ".join(f"{n} {s}" for s, n in row["statuses"].items() if n)
                gap = "—" if row["max_gap"] is None else f"{row['max_gap']:.2%}"
                lines.append(f"| {network} | {tier} | {model} | {' | '.join(relative)} | "
                             f"{row['knee']} | {'; '.join(row['plans'])} | {certified} | "
                             f"{gap} |")
            figures.append(plot(out, network, tier, rows))
    failures = [f"- {model} {network} {tier}: {failure}"
                for (model, network, tier), document in documents.items()
                for failure in summarise(document)["failures"]]
    lines += ["", *[f"![{name}]({name})" for name in figures]]
    if failures:
        lines += ["", "Failed points:", *failures]
    (out / "README.md").write_text("\n".join(lines) + "\n", encoding="utf-8")
    print(f"wrote {out / 'README.md'}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--render", action="store_true",
                        help="Only rewrite README.md and the figures from stored sweeps.")
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--networks", default=",".join(NETWORKS))
    parser.add_argument("--tiers", default=None,
                        help="Comma-separated tier names (default: every tier above the node).")
    parser.add_argument("--values", default=VALUES)
    parser.add_argument("--work-limit", default=str(DEFAULT_WORK_LIMIT),
                        help="Work units per point (deterministic), or off.")
    parser.add_argument("--time-limit", type=float, default=None,
                        help="Seconds per point: the wall-clock cap under a work limit, the "
                             "limit itself with --work-limit off (nest-cp sweep's defaults).")
    parser.add_argument("--jobs", type=int, default=1)
    parser.add_argument("--executor", choices=("local", "ray"), default="local")
    parser.add_argument("--address", default=None)
    parser.add_argument("--out", type=Path, default=HERE)
    args = parser.parse_args()
    if not args.render:
        for model in args.models.split(","):
            for network in args.networks.split(","):
                for tier in swept_tiers(network):
                    if args.tiers is None or tier in args.tiers.split(","):
                        run_sweep(model, network, tier, args)
    write_readme(args.out, stored(args.out))


if __name__ == "__main__":
    main()
