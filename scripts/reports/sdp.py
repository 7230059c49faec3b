"""Subnetwork data parallelism (docs/cost-model.md §6) on the NEST grid, from stored inputs only.

Usage (from the repository root)::

    .venv/bin/python scripts/reports/sdp.py            # solve, then write everything
    .venv/bin/python scripts/reports/sdp.py --render   # rewrite tables and figure from
                                                        # the stored results.json

Reads ``reports/sdp/inputs.json`` (models, networks, sizes, coverages; the 1B Llama-style
config ``llama-1b.json``) and the paper-grid instances of ``instances/paper``, and writes

- ``memory.csv``: per-device memory of one worker under DDP, ZeRO-1, ZeRO-3 and SDP (block
  and neuron level, forward and backward masking) at every coverage, without and with full
  recomputation, every number the evaluator's;
- ``step_time.csv``: on both NEST networks at every grid size, the best plain plan (the DP's
  plan, priced by the evaluator) and the best SDP plan at every coverage (the DP's SDP
  search, refereed by the evaluator): iteration time T, FLOP-equivalent time T_eff,
  memory, and the plan;
- ``results.json`` (both, for ``--render``), ``README.md`` (tables, protocol) and
  ``sdp.png`` (memory vs coverage, step time vs coverage).
"""

from __future__ import annotations

import argparse
import csv
import json
import platform
import sys
import time
from datetime import UTC, datetime
from fractions import Fraction
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
HERE = ROOT / "reports" / "sdp"  # inputs and outputs
GIB = 2**30


# ------------------------------------------------------------------ instances


def base_document(inputs: dict, model: str, network: str, devices: int) -> dict:
    """The grid instance of ``model`` (a copy of instances/paper, or the 1B model's)."""
    spec = inputs["models"][model]
    if "paper" in spec:
        path = ROOT / "instances" / "paper" / f"{spec['paper']}--{network}--{devices}.json"
        return json.loads(path.read_text(encoding="utf-8"))
    device = {"nest-tpuv4-fattree": "nest-tpuv4", "nest-h100-spineleaf": "nest-h100"}[network]
    return {"name": f"{model}--{network}--{devices}",
            "workload": {"hf_config": spec["hf_config"], "device": device,
                         "attention": "materialized"},
            "cluster": {"preset": network, "num_devices": devices},
            "training": {"global_batch": 4096, "seq_len": spec["seq_len"], "microbatches": [1],
                         "zero_stages": [0], "allow_recompute": True}}


def load(document: dict, **training):
    """The instance of ``document`` with ``training`` fields replaced (files relative here)."""
    from nest_cp.io.readers import instance_from_dict

    document = json.loads(json.dumps(document))
    document["training"].update(training)
    return instance_from_dict(document, file=document["name"], base_dir=HERE)


# ------------------------------------------------------------------ memory


def memory_rows(inputs: dict, log) -> list[dict]:
    """Per-device memory of one worker under every strategy (see inputs.json, "memory")."""
    from nest_cp.cost.evaluate import evaluate
    from nest_cp.cost.sdp import SdpDesign, design_mask, unit_table
    from nest_cp.model.instance import IntraConfig, RecomputeMode, SdpLevel, SdpMasking, Strategy
    from nest_cp.model.plan import Plan, SdpMask, Stage

    settings = inputs["memory"]
    rows = []
    for model in inputs["models"]:
        document = base_document(inputs, model, settings["network"], settings["devices"])
        instance = load(document, zero_stages=[0, 1, 3], strategies=["dp", "sdp"],
                        sdp={"levels": ["block", "neuron"], "maskings": ["forward", "backward"]})
        experts = max(c.ep for c in instance.workload.configs)
        config = IntraConfig(settings["tensor_width"].get(model, 1), experts)
        last = instance.workload.num_layers - 1
        for mode in (RecomputeMode.NONE, RecomputeMode.FULL):
            stage = (Stage(0, last, mode),)
            row = {"model": model, "tp": config.tp, "ep": config.ep, "recompute": mode.value,
                   "hbm_gib": instance.cluster.usable_hbm_bytes / GIB}
            for name, zero in (("ddp", 0), ("zero1", 1), ("zero3", 3)):
                plan = Plan(config, 1, zero, settings["zero_workers"], stage)
                row[name] = evaluate(instance, plan).stages[0].memory_bytes
            for level in SdpLevel:
                table = unit_table(instance, config, 1, level)
                workers = len(table.blocks[0]) if table.blocks else 0
                for masking in SdpMasking:
                    for text in inputs["coverages"]:
                        holders = Fraction(text) * workers
                        key = f"sdp_{level.value}_{masking.value}_{text}"
                        rows_ = design_mask(table, SdpDesign.CYCLIC, workers, int(holders)) \
                            if workers and holders.denominator == 1 else None
                        if rows_ is None:
                            row[key] = None
                            continue
                        plan = Plan(config, 1, 0, workers, stage, strategy=Strategy.SDP,
                                    sdp=SdpMask(level, masking, int(holders), rows_))
                        evaluation = evaluate(instance, plan)
                        if evaluation.malformed_fields:
                            raise RuntimeError(f"{model}: {evaluation.violations}")
                        row[key] = evaluation.sdp.memory_bytes
            rows.append(row)
            log(f"memory {model} {mode.value}: DDP {row['ddp'] / GIB:.1f} GiB")
    return rows


# ------------------------------------------------------------------ step time


def step_rows(inputs: dict, log) -> list[dict]:
    """Best plain and best SDP plan per coverage at every grid point (see inputs.json)."""
    rows = []
    for model in inputs["models"]:
        for network in inputs["networks"]:
            for devices in inputs["sizes"]:
                started = time.monotonic()
                document = base_document(inputs, model, network, devices)
                row = {"model": model, "network": network, "devices": devices,
                       **_plain(load(document))}
                for text in inputs["coverages"]:
                    instance = load(document, strategies=["sdp"], sdp={
                        "levels": inputs["step_time"]["levels"],
                        "maskings": inputs["step_time"]["maskings"], "coverages": [text]})
                    row.update({f"{key}@{text}": value
                                for key, value in _sdp(instance).items()})
                rows.append(row)
                log(f"step {model} {network} {devices}: plain {row['plain_status']} "
                    f"({time.monotonic() - started:.0f} s)")
    return rows


def _plain(instance) -> dict:
    """The DP's plain plan, priced by the evaluator (the referee)."""
    from nest_cp.cost.evaluate import evaluate
    from nest_cp.dp.planner import solve

    result = solve(instance)
    if result.plan is None:
        return {"plain_status": "INFEASIBLE", "plain_ticks": None, "plain_memory": None,
                "plain_plan": result.message}
    evaluation = evaluate(instance, result.plan)
    plan = result.plan
    return {"plain_status": "OPTIMAL" if evaluation.feasible else "OVER-MEMORY",
            "plain_ticks": evaluation.objective_ticks,
            "plain_memory": max(s.memory_bytes for s in evaluation.stages),
            "plain_plan": f"tp={plan.config.tp} ep={plan.config.ep} S={plan.num_stages} "
                          f"d={plan.num_replicas} z={plan.zero}"}


def _sdp(instance) -> dict:
    """The DP's best SDP plan at one coverage, checked against the evaluator."""
    from nest_cp.cost.evaluate import evaluate
    from nest_cp.dp.sdp import solve_sdp

    result = solve_sdp(instance)
    if result.plan is None:
        return {"status": "INFEASIBLE", "ticks": None, "effective": None, "memory": None,
                "saved": None, "plan": result.message}
    evaluation = evaluate(instance, result.plan)
    if not evaluation.feasible or evaluation.objective_ticks != result.objective_ticks or \
            evaluation.effective != result.effective:
        raise RuntimeError(f"{instance.name}: the DP's SDP plan does not evaluate to its "
                           f"objective")
    plan, report = result.plan, evaluation.sdp
    return {"status": "OPTIMAL", "ticks": result.objective_ticks,
            "effective": str(result.effective), "memory": report.memory_bytes,
            "saved": report.memory_saved_bytes,
            "plan": f"tp={plan.config.tp} ep={plan.config.ep} d={plan.num_replicas} "
                    f"h={plan.sdp.holders} {plan.sdp.level.value} {plan.sdp.masking.value} "
                    f"{plan.stages[0].recompute.value} {result.stats['design']} "
                    f"{result.stats['layout']}"}


# ------------------------------------------------------------------ outputs


def write_csv(rows: list[dict], path: Path) -> None:
    columns = list(dict.fromkeys(key for row in rows for key in row))
    with path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, columns, lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows)


def _gib(value) -> str:
    return "n/a" if value is None else f"{value / GIB:.1f}"


def _saving(value, base) -> str:
    return "n/a" if value is None else f"{100 * (1 - value / base):.0f}%"


def _seconds(ticks) -> str:
    return "—" if ticks is None else f"{ticks / 1e9:.2f}"


def memory_table(rows: list[dict], coverages: list[str], mode: str) -> list[str]:
    head = ["model", "t×e", "DDP", "ZeRO-1", "ZeRO-3"]
    head += [f"block fwd C={c}" for c in coverages]
    head += [f"block bwd C={c}" for c in coverages]
    head += [f"neuron fwd C={c}" for c in coverages]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for row in rows:
        if row["recompute"] != mode:
            continue
        cells = [row["model"], f"{row['tp']}×{row['ep']}", _gib(row["ddp"]),
                 _gib(row["zero1"]), _gib(row["zero3"])]
        for kind in ("block_forward", "block_backward", "neuron_forward"):
            for c in coverages:
                value = row[f"sdp_{kind}_{c}"]
                cells.append(f"{_gib(value)} ({_saving(value, row['ddp'])})"
                             if value is not None else "n/a")
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def step_table(rows: list[dict], coverages: list[str], network: str) -> list[str]:
    head = ["model", "N", "plain T [s]"]
    for c in coverages:
        head += [f"SDP C={c} T [s]", "T_eff [s]"]
    head += ["best SDP plan (least T_eff)"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for row in rows:
        if row["network"] != network:
            continue
        plain = _seconds(row["plain_ticks"]) if row["plain_status"] == "OPTIMAL" else \
            "no plan fits"
        cells = [row["model"], str(row["devices"]), plain]
        best = None
        for c in coverages:
            ticks, effective = row[f"ticks@{c}"], row[f"effective@{c}"]
            cells += [_seconds(ticks), _seconds(None if effective is None
                                                 else Fraction(effective))]
            if effective is not None and (best is None or Fraction(effective) < best[0]):
                best = (Fraction(effective), c, row[f"plan@{c}"])
        cells.append("—" if best is None else f"C={best[1]}: {best[2]}")
        if row["plain_status"] != "OPTIMAL" and best is not None:
            cells[2] = "**no plan fits**"
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def only_sdp(rows: list[dict], coverages: list[str]) -> list[str]:
    found = []
    for row in rows:
        feasible = [c for c in coverages if row[f"ticks@{c}"] is not None]
        if row["plain_status"] != "OPTIMAL" and feasible:
            found.append(f"- {row['model']} on {row['network']} at {row['devices']} devices: "
                         f"plain: {row['plain_plan']}; SDP fits at C = {', '.join(feasible)}")
    return found or ["- none: wherever an SDP plan fits, a plain plan fits too."]


def _wins(steps: list[dict], coverages: list[str]) -> str:
    """The grid points where SDP's least T_eff beats the plain T, with the margin."""
    found = []
    for row in steps:
        effective = [Fraction(row[f"effective@{c}"]) for c in coverages
                     if row[f"effective@{c}"] is not None]
        if effective and row["plain_status"] == "OPTIMAL" and min(effective) < \
                row["plain_ticks"]:
            margin = float(1 - min(effective) / row["plain_ticks"])
            found.append(f"{row['model']} on {row['network'].split('-')[1]} at "
                         f"{row['devices']}: {100 * margin:.1f}%")
    return "; ".join(found) or "none"


def _worst(steps: list[dict], coverages: list[str]) -> str:
    """SDP's largest T_eff ratio over the plain T, and where."""
    ratios = []
    for row in steps:
        effective = [Fraction(row[f"effective@{c}"]) for c in coverages
                     if row[f"effective@{c}"] is not None]
        if effective and row["plain_status"] == "OPTIMAL":
            ratios.append((float(min(effective) / row["plain_ticks"]), row))
    ratio, row = max(ratios, key=lambda item: item[0])
    return (f"{ratio:.1f}x ({row['model']} on {row['network']} at {row['devices']:,} "
            f"devices)")


def fits_table(memory: list[dict], coverages: list[str]) -> list[str]:
    """Which one-stage data-parallel strategies fit each NEST device (64 / 90 GiB)."""
    from nest_cp.profiles.presets import DEVICES

    limits = {name: DEVICES[name].hbm_bytes for name in ("nest-tpuv4", "nest-h100")}
    head = ["model", "recompute", "HBM", "DDP", "ZeRO-1", "ZeRO-3"] + \
        [f"SDP fwd C={c}" for c in coverages] + ["SDP fits, DDP and ZeRO-1 do not"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for row in memory:
        for limit in limits.values():
            def fits(value, limit=limit) -> str:
                return "n/a" if value is None else ("yes" if value <= limit else "no")
            sdp = [row[f"sdp_block_forward_{c}"] for c in coverages]
            only = [c for c, value in zip(coverages, sdp, strict=True)
                    if value is not None and value <= limit
                    and row["ddp"] > limit and row["zero1"] > limit]
            lines.append("| " + " | ".join(
                [row["model"], row["recompute"], f"{limit / GIB:.0f} GiB", fits(row["ddp"]),
                 fits(row["zero1"]), fits(row["zero3"]), *map(fits, sdp),
                 ", ".join(f"C={c}" for c in only) or "—"]) + " |")
    return lines


def summary(memory: list[dict], steps: list[dict], coverages: list[str]) -> dict:
    """Headline numbers quoted by docs/sdp.md."""
    savings = {c: [1 - row[f"sdp_block_forward_{c}"] / row["ddp"] for row in memory
                   if row["recompute"] == "none" and row[f"sdp_block_forward_{c}"]]
               for c in coverages}
    wins = [(row, c) for row in steps for c in coverages
            if row[f"effective@{c}"] is not None and row["plain_status"] == "OPTIMAL"
            and Fraction(row[f"effective@{c}"]) < row["plain_ticks"]]
    return {"block_forward_saving": {c: (min(v), max(v)) for c, v in savings.items() if v},
            "grid_points": len(steps),
            "sdp_beats_plain_by_t_eff": len({(r["model"], r["network"], r["devices"])
                                             for r, _ in wins}),
            "only_sdp_fits": sum(row["plain_status"] != "OPTIMAL" and any(
                row[f"ticks@{c}"] is not None for c in coverages) for row in steps)}


def figure(memory: list[dict], steps: list[dict], inputs: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    coverages = inputs["coverages"]
    xs = [float(Fraction(c)) for c in coverages] + [1.0]
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2))
    for index, row in enumerate(r for r in memory if r["recompute"] == "none"):
        color = f"C{index}"
        for kind, style in (("block_forward", "-"), ("block_backward", "--")):
            ys = [row[f"sdp_{kind}_{c}"] for c in coverages]
            if None in ys:
                continue
            left.plot(xs, [y / row["ddp"] for y in ys] + [1.0], style, color=color,
                      marker="o", label=row["model"] if kind == "block_forward" else None)
        left.scatter([1.0], [row["zero3"] / row["ddp"]], color=color, marker="x")
    left.set_xlabel("coverage C = h / d")
    left.set_ylabel("per-device memory / DDP")
    left.set_title("Memory (block level; solid forward, dashed backward; x ZeRO-3)")
    left.legend(fontsize=7)
    left.grid(alpha=0.3)
    model, devices = inputs["figure"]["model"], inputs["figure"]["devices"]
    for index, network in enumerate(inputs["networks"]):
        row = next(r for r in steps if r["model"] == model and r["network"] == network
                   and r["devices"] == devices)
        color = f"C{index}"
        ts = [row[f"ticks@{c}"] for c in coverages]
        effs = [row[f"effective@{c}"] for c in coverages]
        points = [(x, t / 1e9, float(Fraction(e)) / 1e9) for x, t, e in zip(xs, ts, effs,
                                                                           strict=False)
                  if t is not None]
        if points:
            right.plot([p[0] for p in points], [p[1] for p in points], "-o", color=color,
                       label=f"{network}: T")
            right.plot([p[0] for p in points], [p[2] for p in points], "--s", color=color,
                       label=f"{network}: T_eff")
        if row["plain_ticks"] is not None:
            right.axhline(row["plain_ticks"] / 1e9, color=color, linestyle=":",
                          label=f"{network}: best plain plan")
    right.set_xlabel("coverage C = h / d")
    right.set_ylabel("seconds per iteration")
    right.set_title(f"{model}, {devices} devices: best SDP plan per coverage")
    right.legend(fontsize=7)
    right.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def readme(document: dict) -> str:
    inputs, memory, steps = document["inputs"], document["memory"], document["step_time"]
    coverages = inputs["coverages"]
    numbers = summary(memory, steps, coverages)
    saving = numbers["block_forward_saving"]
    lines = ["# Subnetwork data parallelism on the NEST grid", "",
             "Generated by `scripts/reports/sdp.py` from `inputs.json`, `llama-1b.json` and "
             "`instances/paper` (regenerate: `.venv/bin/python scripts/reports/sdp.py`; "
             "`--render` rewrites this file and the figure from `results.json`). Semantics: "
             "docs/cost-model.md §6; every number is the plan evaluator's.", "",
             "## Headline", ""]
    lines += ["- Block-level SDP with forward masking needs "
              + ", ".join(f"{100 * lo:.0f}–{100 * hi:.0f}% (C = {c})"
                          for c, (lo, hi) in saving.items())
              + " less memory per device than DDP (no recomputation; the six models). SDP "
                "reports 30–75% (28–60% in v5) lower per-device memory; the model "
                "reproduces the range because forward masking drops a block's weights, "
                "gradients, optimizer state and activations alike, and the shared embedding "
                "and head set the floor.",
              "- Without recomputation block-forward SDP at C = 1/4 also needs less memory "
              "than ZeRO-3 for the 7B, Mixtral and 70B models (it drops the unheld blocks' "
              "activations, ZeRO-3 keeps every activation); with full recomputation ZeRO-3 "
              "needs far less than any SDP coverage. Backward masking keeps every weight and "
              "activation and saves less (the tables).",
              f"- SDP's best plan beats the best plain plan by FLOP-equivalent time T_eff at "
              f"{numbers['sdp_beats_plain_by_t_eff']} of {numbers['grid_points']} grid points "
              f"({_wins(steps, coverages)}), small clusters where the plain plan must "
              f"pipeline; elsewhere plain plans win by T_eff, by up to "
              f"{_worst(steps, coverages)}: an SDP worker is one unpipelined replica, so many "
              f"devices mean many workers, and every held unit is all-reduced separately "
              f"over its holders, paying the ring's 2(h − 1)·α latency per unit on NEST's "
              f"100–300 µs tiers. SDP is the only strategy that fits "
              f"at {numbers['only_sdp_fits']} grid points (the DP's plain plans pipeline "
              f"instead); against one-stage data parallelism it is, on one device per worker "
              f"group, for Llama2-7B, Mixtral, Llama3-70B and GPT-3 in some setting (table "
              f"below).", ""]
    lines += ["## Per-device memory [GiB] (saving against DDP), no recomputation", "",
              inputs["memory"]["_about"], ""]
    lines += memory_table(memory, coverages, "none")
    lines += ["", "## Per-device memory [GiB], full recomputation", ""]
    lines += memory_table(memory, coverages, "full")
    for network in inputs["networks"]:
        lines += ["", f"## Step time and T_eff on {network}", "", inputs["step_time"]["_about"],
                  "T_eff = T · d · C_full / Σ_w C_w (docs/cost-model.md §6), the time a plain "
                  "data-parallel run would need for the FLOPs SDP's workers perform; plain "
                  "plans have T_eff = T.", ""]
        lines += step_table(steps, coverages, network)
    lines += ["", "## Where SDP is the only feasible plan", "",
              "Against every plain plan the DP searches (pipelines, tensor parallelism and "
              "recomputation included, ZeRO 0 as in NEST's grid):", ""]
    lines += only_sdp(steps, coverages)
    lines += ["", "Against one-stage data parallelism (the paper's setting; the workers and "
              "recomputation of the memory tables), on NEST's two devices:", ""]
    lines += fits_table(memory, coverages)
    lines += ["", "`instances/small/sdp-only-l6-d4` is a certified instance where no plain plan "
              "of any kind fits and SDP at C = 1/4 does (`nest-cp solve` exits 0 with the SDP "
              "plan).", "",
              "At C = 3/4 only the cyclic design applies (grouped needs h | d, and 3d/4 never "
              "divides d), and it needs d | U (U = the blocks), so those plans use at most U "
              "workers: hence their long steps. The full SDP space has no such limit; the "
              "exact models find its plans on small instances only."]
    lines += ["", "![memory and step time against coverage](sdp.png)", "",
              "## Protocol and caveats", "",
              f"- Generated {document['date_utc']} with nest-cp {document['version']} on "
              f"{document['machine']}; the solves are deterministic (no time limits, no seeds).",
              "- Plain plans are the structured DP's optimum (structured space v2: "
              "every rank order, per-group collectives priced as the evaluator prices them), "
              "re-priced by the evaluator, whose price equals the DP's objective at every grid "
              "point; plain plans outside the structured space can be faster "
              "(`reports/paper/certified.md`).",
              "- SDP plans are the DP's SDP optimum of the structured space (grouped and cyclic "
              "designs × rank layouts), certified against CP-SAT and the MILP on the SDP "
              "instances of `instances/small` (`verify/gap_table.md` here); the full space "
              "can be better (11.4% on `sdp-slowtier-l6-d8`).",
              "- The model prices time and memory, not training quality: SDP changes the "
              "optimisation (biased gradients under forward masking), which the paper measures "
              "and nest-cp does not. T_eff compares FLOPs, not loss.",
              "- The profiler's `sdp_fraction` is the parameter share of a block's slices; "
              "the cost model (docs/cost-model.md §6) applies it to compute and activations "
              "too, which overstates the neuron level's savings (docs/profiler.md gives the "
              "real shares).", ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--render", action="store_true",
                        help="rewrite the tables and figure from results.json only")
    args = parser.parse_args(argv)
    sys.path.insert(0, str(ROOT))

    def log(text: str) -> None:
        print(text, file=sys.stderr, flush=True)

    results = HERE / "results.json"
    if args.render:
        document = json.loads(results.read_text(encoding="utf-8"))
    else:
        from nest_cp import __version__

        inputs = json.loads((HERE / "inputs.json").read_text(encoding="utf-8"))
        document = {"inputs": inputs,
                    "date_utc": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
                    "version": __version__,
                    "machine": f"{platform.platform()}, Python {platform.python_version()}",
                    "memory": memory_rows(inputs, log), "step_time": step_rows(inputs, log)}
        results.write_text(json.dumps(document, indent=1) + "\n", encoding="utf-8")
    write_csv(document["memory"], HERE / "memory.csv")
    write_csv(document["step_time"], HERE / "step_time.csv")
    figure(document["memory"], document["step_time"], document["inputs"], HERE / "sdp.png")
    (HERE / "README.md").write_text(readme(document), encoding="utf-8")
    log("wrote reports/sdp/{results.json,memory.csv,step_time.csv,sdp.png,README.md}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
