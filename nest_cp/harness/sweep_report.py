"""The tables and the plot of a sweep (:mod:`nest_cp.harness.sweep`): pure functions of the
sweep document (``sweep.json``), so rendering it again gives the same files."""

from __future__ import annotations

import csv
import io
import json
import math
from pathlib import Path

from nest_cp.harness.sweep import OUTPUTS
from nest_cp.model.documents import write_output
from nest_cp.verify import tables

FORMATS = ("md", "csv", "tex")
MISSING = "—"
LEGEND = ("plan: the DP's t/e/p/d/z/b/v (tensor, expert, pipeline stages, data replicas, "
          "ZeRO stage, microbatch, virtual stages); DP T: its iteration time as the evaluator "
          "prices it (docs/cost-model.md); [bound, best]: the certified interval of the optimum "
          "over the full space (by cpsat/full: CP-SAT; certify-full: the full-space "
          "certificate; none: no bound); status OPTIMAL bound = best, FEASIBLE a bound below "
          "the best plan at the time limit, open no bound, INFEASIBLE no plan fits; "
          "Pareto: * on the front of cost against the DP plan's throughput. Times in ms.")


def _ms(ticks: int | None, tick_s: float | None) -> str:
    return MISSING if ticks is None or tick_s is None else f"{ticks * tick_s * 1e3:,.3f}"


def _plan_text(record: dict) -> str:
    found = record["dp"]["degrees"]
    return MISSING if found is None else "/".join(str(found[k]) for k in "tepdzbv")


def _optional(value: float | None, spec: str) -> str:
    return MISSING if value is None else format(value, spec)


def _columns(document: dict) -> list[str]:
    priced = any(record["cost"] is not None for record in document["points"])
    return [*document["parameters"], "plan t/e/p/d/z/b/v", "DP T (ms)", "samples/s", "tokens/s",
            "MFU", "bound (ms)", "best (ms)", "status", "by", "gap",
            *(["cost", "Pareto"] if priced else []), "source"]


def _status(record: dict) -> str:
    """The point's status, † when the wall-clock cap rather than the work limit ended its
    certificate (its figures then depend on the machine)."""
    return record["status"] + (tables.WALL_CAPPED_MARK if record["certificate"].get("wall_capped")
                               else "")


def _row(record: dict, priced: bool) -> list[str]:
    dp, tick_s = record["dp"], record["tick_s"]
    row = [setting["label"] for setting in record["settings"]]
    row += [_plan_text(record), _ms(dp["objective_ticks"], tick_s),
            _optional(dp["samples_per_s"], ",.2f"), _optional(dp["tokens_per_s"], ",.0f"),
            MISSING if dp["mfu"] is None else f"{100 * dp['mfu']:.1f}%",
            _ms(record["bound_ticks"], tick_s), _ms(record["best_ticks"], tick_s),
            _status(record), record["certificate"]["by"],
            MISSING if record["gap"] is None else f"{100 * record['gap']:.2f}%"]
    if priced:
        row += [_optional(record["cost"], ",.2f"), "*" if record["pareto"] else ""]
    return row + [record["source"]]


def _protocol_text(document: dict) -> str:
    proto = document["protocol"]
    options, versions = proto["options"], proto["versions"]
    prices = document["prices"]
    priced = ", ".join(f"{tier} {cost_:g} per GB/s" for tier, cost_ in prices["per_GBps"].items())
    if prices["device"] is not None:
        priced = ", ".join(filter(None, [priced, f"{prices['device']:g} per device"]))
    limit = (f"{options['time_limit_s']:g} s per point" if options.get("work_limit") is None
             else f"{options['work_limit']:g} work units per point (deterministic; a "
                  f"{options['time_limit_s']:g} s wall-clock cap, "
                  f"{tables.WALL_CAPPED_MARK} where it ended a run)")
    return (f"Protocol: {limit}, seed {options['seed']}, one "
            f"worker per solve; certify {options['certify']} (CP-SAT over the full space up "
            f"to {options['exact_max_devices']} devices, the full-space certificate above)"
            + (f"; prices: {priced}" if priced else "")
            + f"; {proto['date_utc']}; nest-cp {versions['nest-cp']}, OR-Tools "
              f"{versions['ortools']}; {proto['machine']['processor']}, "
              f"{proto['machine']['cores']} cores.")


def render_markdown(document: dict) -> str:
    columns = _columns(document)
    priced = "cost" in columns
    lines = [f"Sweep of `{document['instance']}` over {' × '.join(document['parameters'])}. "
             f"{LEGEND}", "", _protocol_text(document), "",
             "| " + " | ".join(columns) + " |", "|" + "|".join("---" for _ in columns) + "|"]
    lines += ["| " + " | ".join(_row(record, priced)) + " |" for record in document["points"]]
    notes = [f"- {record['point']}: {record['certificate']['by']}: "
             f"{record['certificate']['message']}" for record in document["points"]
             if record["certificate"]["message"]]
    failures = [f"- {record['point']}: {failure}" for record in document["points"]
                for failure in record["failures"]]
    for title, items in (("Notes of the certificates:", notes), ("Failures:", failures)):
        lines += ["", title, *items] if items else []
    return "\n".join(lines) + "\n"


def render_csv(document: dict) -> str:
    """One row per point with exact ticks and raw numbers (empty cells for none)."""
    parameters = document["parameters"]
    header = [*parameters, *(f"{name} value" for name in parameters), "point", "devices",
              *"tepdzbv", "dp_status", "dp_ticks", "iteration_time_s", "samples_per_s",
              "tokens_per_s", "mfu", "certified_by", "certificate_status", "status",
              "bound_ticks", "best_ticks", "gap", "best_samples_per_s", "bound_samples_per_s",
              "tick_s", "cost", "pareto", "source", "wall_time_s", "instance", "failures"]
    text = io.StringIO(newline="")
    writer = csv.writer(text)
    writer.writerow(header)
    for record in document["points"]:
        dp, found = record["dp"], record["dp"]["degrees"] or {}
        values = [";".join(f"{v:g}" for v in s["values"]) for s in record["settings"]]
        cells = [*(s["label"] for s in record["settings"]), *values, record["point"],
                 record["devices"], *(found.get(k) for k in "tepdzbv"), dp["status"],
                 dp["objective_ticks"], dp["iteration_time_s"], dp["samples_per_s"],
                 dp["tokens_per_s"], dp["mfu"], record["certificate"]["by"],
                 record["certificate"]["status"], _status(record), record["bound_ticks"],
                 record["best_ticks"], record["gap"], record["best_samples_per_s"],
                 record["bound_samples_per_s"], record["tick_s"], record["cost"],
                 record["pareto"], record["source"], record["wall_time_s"],
                 record["instance"], "; ".join(record["failures"])]
        writer.writerow(["" if cell is None else cell for cell in cells])
    return text.getvalue()


def render_latex(document: dict) -> str:
    """A booktabs table (as the gap tables of verify), shrunk to the text width if wider."""
    columns = [c for c in _columns(document) if c not in ("tokens/s", "source")]
    priced = "cost" in columns
    keep = [i for i, c in enumerate(_columns(document)) if c not in ("tokens/s", "source")]
    spec = "l" * len(document["parameters"]) + "r" * (len(columns) - len(document["parameters"]))
    lines = ["% Generated by nest-cp sweep; requires \\usepackage{booktabs} and "
             "\\usepackage{adjustbox}.", "% " + _protocol_text(document),
             r"\begin{table}", r"\centering", r"\scriptsize", r"\setlength{\tabcolsep}{3pt}",
             r"\begin{adjustbox}{max width=\textwidth}", rf"\begin{{tabular}}{{{spec}}}",
             r"\toprule", " & ".join(tables.latex_escape(c) for c in columns) + r" \\",
             r"\midrule"]
    for record in document["points"]:
        row = _row(record, priced)
        lines.append(" & ".join(tables.latex_escape(row[i]) for i in keep) + r" \\")
    caption = f"Sweep of {Path(document['instance']).name}. {LEGEND}"
    lines += [r"\bottomrule", r"\end{tabular}", r"\end{adjustbox}",
              rf"\caption{{{tables.latex_escape(caption)}}}", r"\end{table}"]
    return "\n".join(lines) + "\n"


def render(document: dict, fmt: str) -> str:
    """The sweep table of ``document`` in ``md``, ``csv`` or ``tex``."""
    return tables.render_with((render_markdown, render_csv, render_latex), document, fmt)


def plot(document: dict) -> bytes:
    """PNG: the DP plan's throughput against the first parameter, one line per value of the
    second, t/p/d written at each point, the optimum's certified throughput interval
    [B / best, B / bound] as a band."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import NullLocator

    records = document["points"]
    series: dict[str, list[dict]] = {}
    for record in records:
        key = record["settings"][1]["label"] if len(record["settings"]) > 1 else ""
        series.setdefault(key, []).append(record)
    figure, axis = plt.subplots(figsize=(6.4, 4.2))
    for colour, (key, rows) in enumerate(series.items()):
        rows = sorted(rows, key=lambda r: r["settings"][0]["x"])
        xs = [r["settings"][0]["x"] for r in rows]
        speed = [r["dp"]["samples_per_s"] or math.nan for r in rows]
        low = [r["best_samples_per_s"] or math.nan for r in rows]
        high = [r["bound_samples_per_s"] or math.nan for r in rows]
        name = f"{document['parameters'][1]}={key}" if key else "DP plan"
        axis.plot(xs, speed, marker="o", color=f"C{colour}", label=name)
        axis.fill_between(xs, low, high, color=f"C{colour}", alpha=0.2, linewidth=0)
        for x, y, r in zip(xs, speed, rows):
            found = r["dp"]["degrees"]
            text = MISSING if found is None else f"t{found['t']} p{found['p']} d{found['d']}"
            axis.annotate(text, (x, 0 if math.isnan(y) else y), textcoords="offset points",
                          xytext=(0, 6), ha="center", fontsize=7, color=f"C{colour}")
    ticks = {r["settings"][0]["x"]: r["settings"][0]["label"] for r in records}
    if min(ticks) > 0 and max(ticks) / min(ticks) >= 8:
        axis.set_xscale("log")
        axis.xaxis.set_minor_locator(NullLocator())
    axis.set_xticks(sorted(ticks), [ticks[x] for x in sorted(ticks)], fontsize=8)
    first = records[0]["settings"][0]
    axis.set_xlabel(first["parameter"] + (" (× the instance's value)" if first["relative"]
                                          else ""))
    axis.set_ylabel("samples / s")
    axis.set_ylim(bottom=0, top=axis.get_ylim()[1] * 1.08)  # room for the plans' labels
    axis.set_title(f"{Path(document['instance']).stem}\nband: certified interval of the "
                   f"optimum's throughput", fontsize=9)
    axis.legend(fontsize=8)
    figure.tight_layout()
    image = io.BytesIO()  # drawn in memory, written through the safe writer
    figure.savefig(image, dpi=120, format="png")
    plt.close(figure)
    return image.getvalue()


def write_outputs(document: dict, out_dir: Path) -> list[Path]:
    """sweep.json, sweep.{csv,md,tex} and sweep.png in ``out_dir``, each through the one safe
    writer; the tables and plot are pure functions of the stored document."""
    contents = {"sweep.json": json.dumps(document, indent=1) + "\n"}
    contents |= {f"sweep.{fmt}": render(document, fmt) for fmt in FORMATS}
    contents["sweep.png"] = plot(document)
    written = []
    for name in OUTPUTS:
        write_output(out_dir / name, contents[name])
        written.append(out_dir / name)
    return written


def summary(document: dict) -> str:
    """One line: how many points were proven, within 1 %, open; solved now or from the cache."""
    records = document["points"]
    count = {status: sum(r["status"] == status for r in records)
             for status in ("OPTIMAL", "FEASIBLE", "open", "INFEASIBLE", "ERROR")}
    within = sum(r["gap"] is not None and r["gap"] <= 0.01 for r in records)
    sources = {source: sum(r["source"] == source for r in records)
               for source in ("solved", "cache")}
    return (f"{len(records)} points: {count['OPTIMAL']} proven optimal, {within} within 1 %, "
            f"{count['FEASIBLE']} feasible with a bound, {count['open']} open, "
            f"{count['INFEASIBLE']} infeasible, {count['ERROR']} failed; solved "
            f"{sources['solved']}, from cache {sources['cache']}")
