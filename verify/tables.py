"""Gap tables (Markdown, CSV, LaTeX booktabs) and the protocol, from stored results.

Tables are pure functions of a ``results.json`` document (see :func:`results_document`),
so ``nest-cp table RESULTS.json`` regenerates byte-identical tables.  Neither holds
anything that changes when verify runs again on the same code and instances: wall times,
whether a run was solved or read from the cache, the date, the machine and the command
go to ``timings.json`` / ``timings.md`` (:mod:`nest_cp.verify.timings`); a results.json
written before that still renders, its times ignored.  Objectives are
shown in milliseconds in Markdown and LaTeX, converted with each instance's own tick
(``tick_s``; instances may use coarser ticks than 1 ns), and as exact integer ticks
with the tick beside them in CSV.  An optimum proven only within a solver's
tolerance shows as ``OPTIMAL~1e-07``; the reference column says whether a stored
result is an independent proof or a regression snapshot of the DP.  The LaTeX
tables are compact (one best full-space result per instance; the per-solver detail
is in Markdown and CSV) and wrapped to at most ``\textwidth``.  Every table shows the DP
plan's v2 choices (DESIGN §3.2): its virtual stages v and the recompute modes its stages
use (``dp v/rc``: ``2 / sel+full``; ``2/s+f`` in LaTeX).
"""

from __future__ import annotations

import csv
import io
import json
import os
import platform
import statistics
import sys
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path

from nest_cp.model.result import Space, status_text
from nest_cp.verify import sdp

FORMATS = ("md", "csv", "tex")
EXACT_ORDER = ("cpsat", "milp", "brute")


# ------------------------------------------------------------------ protocol


def _version(package: str) -> str:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return "not installed"


def settings(options: dict, backends: dict[str, bool]) -> dict:
    """Versions, limits, seeds and backends: what the results depend on, the same on every
    run of the same code (results.json's protocol)."""
    return {
        "versions": {"nest-cp": _version("nest-cp"), "ortools": _version("ortools"),
                     "pulp": _version("pulp"), "highspy": _version("highspy"),
                     "cbc": f"bundled with PuLP {_version('pulp')}",
                     "python": platform.python_version()},
        "options": options,
        "backends_available": backends,
    }


def run_context() -> dict:
    """When, where and how this run was started: differs between runs of the same code."""
    return {"date_utc": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "machine": {"platform": platform.platform(),
                        "processor": platform.processor() or platform.machine(),
                        "cores": os.cpu_count()},
            "command": " ".join(["nest-cp", *sys.argv[1:]]) if sys.argv else ""}


def protocol(options: dict, backends: dict[str, bool]) -> dict:
    """:func:`settings` with the :func:`run_context`, for the documents that keep both
    (``verify --certify-full``, sweeps); ``verify`` keeps the context in timings.json."""
    context = run_context()
    return {"date_utc": context["date_utc"], **settings(options, backends),
            "machine": context["machine"], "command": context["command"]}


def results_document(records: list[dict], settings_: dict) -> dict:
    """The results.json document: settings, per-instance records, per-family summary.

    The records lose what changes between runs (:func:`deterministic_record`), so two runs of
    the same code on the same instances write the same bytes, from a cold cache or a warm
    one.
    """
    return {"protocol": settings_, "instances": [deterministic_record(r) for r in records],
            "summary": family_summary(records)}


TIMING_KEYS = ("wall_time_s", "source")  # per run: how long, and solved now or from the cache


def deterministic_record(record: dict) -> dict:
    """An instance record without its runs' wall times and sources (its SDP searches'
    too), each run's keys in sorted order: a run read from the cache comes back with its
    keys sorted, a run solved now in the order it was built."""
    return {**record, "runs": [_deterministic_run(run) for run in record["runs"]]}


def _deterministic_run(run: dict) -> dict:
    kept = {key: value for key, value in run.items() if key not in TIMING_KEYS}
    if kept.get("sdp"):
        kept["sdp"] = {key: value for key, value in kept["sdp"].items()
                       if key not in TIMING_KEYS}
    return json.loads(json.dumps(kept, sort_keys=True))


# ------------------------------------------------------------------ rows


def exact_backends(records: list[dict]) -> list[str]:
    """Exact backends that appear in any record, in a fixed order."""
    present = {run["backend"] for record in records for run in record["runs"]}
    return [name for name in EXACT_ORDER if name in present]


def _run(record: dict, backend: str, space: str) -> dict | None:
    return next((run for run in record["runs"]
                 if run["backend"] == backend and run["space"] == space), None)


DEFAULT_TICK_S = 1e-9  # results.json written before instances recorded their tick


def tick_of(record: dict) -> float:
    """The instance's tick in seconds."""
    return record.get("sizes", {}).get("tick_s", DEFAULT_TICK_S)


def _ms(ticks: int | None, tick_s: float) -> str:
    return "—" if ticks is None else f"{ticks * tick_s * 1e3:.3f}"


WALL_CAPPED_MARK = "†"  # the wall-clock cap, not the work limit, ended the run


def _status(run: dict) -> str:
    return status_text(run["status"], run.get("tolerance_rel")) + (
        WALL_CAPPED_MARK if run.get("wall_capped") else "")


def format_gap(gap: dict | None) -> str:
    """``1.234%`` for a proven gap, ``[0.000%, 4.567%]`` for an interval, ``—`` for none."""
    if gap is None:
        return "—"
    low = f"{100 * gap['low']:.3f}%"
    if gap["exact"]:
        return low
    high = "∞" if gap["high"] is None else f"{100 * gap['high']:.3f}%"
    return f"[{low}, {high}]"


def instance_row(record: dict, exact: list[str], ticks: bool) -> list[str]:
    """One table row: sizes, DP, each exact solver's full-space result, certificate, gap,
    reference; T in ms with the instance's tick (``ticks``: integer ticks, and the tick as
    a column).  No wall times: a results.json that has them is read without them."""
    tick_s = tick_of(record)

    def show(value: int | None) -> str:
        if ticks:
            return "—" if value is None else str(value)
        return _ms(value, tick_s)

    sizes = record.get("sizes", {})
    dp = _run(record, "dp", Space.STRUCTURED.value)
    row = [record["instance"], record["family"], str(sizes.get("layers", "—")),
           str(sizes.get("devices", "—")), sizes.get("network", "—")]
    row += [f"{tick_s:g}"] if ticks else []
    row += [show(dp["objective_ticks"]) if dp else "—", _dp_status(dp), plan_choices(dp)]
    for backend in exact:
        run = _run(record, backend, Space.FULL.value)
        row += ([show(run["objective_ticks"]), show(run["bound_ticks"]), _status(run)]
                if run else ["—"] * 3)
    row += [record["certificate"], format_gap(record["gap"]), record.get("reference", "—"),
            "FAIL" if record["failures"] else "ok"]
    return row


RECOMPUTE_ORDER = ("none", "selective", "full")
_RECOMPUTE_SHORT = {"none": "none", "selective": "sel", "full": "full"}
_RECOMPUTE_LETTER = {"none": "n", "selective": "s", "full": "f"}


def plan_choices(run: dict | None, compact: bool = False) -> str:
    """The v2 choices of a run's plan: virtual stages v and the recompute modes its stages
    use, in the order none, selective, full: ``2 / sel+full`` (``2/s+f`` when ``compact``);
    ``—`` without a plan.  Plans stored before the modes were named say ``true`` (full) or
    ``false`` (none)."""
    plan = None if run is None else run.get("plan")
    if not plan:
        return "—"
    used = set()
    for stage in plan.get("stages", ()):
        mode = stage.get("recompute", "none")
        used.add("full" if mode is True else "none" if mode is False else mode)
    names = _RECOMPUTE_LETTER if compact else _RECOMPUTE_SHORT
    modes = "+".join(names[mode] for mode in RECOMPUTE_ORDER if mode in used) or "—"
    virtual = plan.get("virtual_stages", 1)
    return f"{virtual}/{modes}" if compact else f"{virtual} / {modes}"


def _dp_status(dp: dict | None) -> str:
    return "—" if dp is None else _status(dp)


def header(exact: list[str], ticks: bool) -> list[str]:
    unit = "ticks" if ticks else "ms"
    columns = ["instance", "family", "L", "N", "network"] + (["tick [s]"] if ticks else [])
    columns += [f"dp T [{unit}]", "dp status", "dp v/rc"]
    for backend in exact:
        columns += [f"{backend} T [{unit}]", f"{backend} bound [{unit}]", f"{backend} status"]
    return columns + ["cert", "gap", "reference", "check"]


# ------------------------------------------------------------------ summary


def family_summary(records: list[dict]) -> list[dict]:
    """Per family: count, certified, failed, point gaps (mean, max), open intervals (the
    median wall times are in timings.json: :func:`nest_cp.verify.timings.family_medians`)."""
    families: dict[str, list[dict]] = {}
    for record in records:
        families.setdefault(record["family"], []).append(record)
    return [_summarise(name, members) for name, members in families.items()]


def _summarise(family: str, records: list[dict]) -> dict:
    point_gaps = [r["gap"]["low"] for r in records if r["gap"] and r["gap"]["exact"]]
    return {"family": family, "count": len(records),
            "certified": sum(r["certificate"] == "yes" for r in records),
            "failed": sum(bool(r["failures"]) for r in records),
            "gap_proven": len(point_gaps),
            "gap_open": sum(bool(r["gap"]) and not r["gap"]["exact"] for r in records),
            "mean_gap": statistics.fmean(point_gaps) if point_gaps else None,
            "max_gap": max(point_gaps) if point_gaps else None}


SUMMARY_HEADER = ["family", "instances", "certified", "failed", "gaps proven", "gaps open",
                  "mean gap", "max gap"]


def summary_row(summary: dict) -> list[str]:
    """A family's summary row; the median times of an older results.json are ignored."""
    def percent(value: float | None) -> str:
        return "—" if value is None else f"{100 * value:.3f}%"
    return [summary["family"], str(summary["count"]), str(summary["certified"]),
            str(summary["failed"]), str(summary["gap_proven"]), str(summary["gap_open"]),
            percent(summary["mean_gap"]), percent(summary["max_gap"])]


# ------------------------------------------------------------------ renderers


def render(document: dict, fmt: str) -> str:
    """The gap table of a results document in ``md``, ``csv`` or ``tex``."""
    return render_with((render_markdown, render_csv, render_latex), document, fmt)


def render_with(renderers, document: dict, fmt: str) -> str:
    """``document`` by the renderer of ``fmt``; ``renderers`` are a table's markdown, CSV
    and LaTeX renderers, in the order of FORMATS."""
    if fmt not in FORMATS:
        raise ValueError(f"expected a format among {', '.join(FORMATS)}, got {fmt!r}")
    return dict(zip(FORMATS, renderers, strict=True))[fmt](document)


def _protocol_lines(document: dict) -> list[str]:
    """Versions, options and backends; the date and machine of an older results.json are
    ignored (they are in timings.json now)."""
    proto = document["protocol"]
    versions = ", ".join(f"{name} {value}" for name, value in proto["versions"].items())
    options = ", ".join(f"{name}={value}" for name, value in proto["options"].items())
    available = ", ".join(f"{name}{'' if ok else ' (unavailable)'}"
                          for name, ok in proto["backends_available"].items())
    return [f"Versions: {versions}", f"Options: {options}", f"Backends: {available}",
            TIMES_ELSEWHERE]


def launcher_lines(records: list[dict]) -> list[str]:
    """Which launcher's rules restricted each instance's search (one line when none did)."""
    restricted = [r for r in records if r.get("launcher", "none") != "none"]
    if not restricted:
        return ["Launcher: none for every instance here (the cost model's whole space)."]
    lines = [f"Launcher rules applied ({len(restricted)} of {len(records)} instances; the "
             f"others: none):"]
    for record in restricted:
        lines.append(f"- {record['instance']}: {record['launcher']}: "
                     + "; ".join(record["launcher_rules"]))
    return lines


def _markdown_table(columns: list[str], rows: list[list[str]]) -> list[str]:
    lines = ["| " + " | ".join(columns) + " |", "|" + "|".join("---" for _ in columns) + "|"]
    return lines + ["| " + " | ".join(row) + " |" for row in rows]


def instance_sets(records: list[dict]) -> list[tuple[str, list[dict]]]:
    """Records grouped by the folder they came from, in order of first appearance."""
    groups: dict[str, list[dict]] = {}
    for record in records:
        groups.setdefault(str(Path(record["path"]).parent), []).append(record)
    return list(groups.items())


TIMES_ELSEWHERE = ("Wall times, whether each run was solved or read from the cache, the date, "
                   "machine and command: timings.md and timings.json, which nest-cp verify "
                   "--out DIR writes beside results.json (not committed), so that a rerun "
                   "of the same code served from the cache rewrites this table and "
                   "results.json unchanged.")

LEGEND = ("T: iteration time of the best plan found, in ms with each instance's tick; bound: "
          "the solver's proven lower bound (full space); OPTIMAL~1e-07: optimal only within "
          "the solver's floating-point tolerance (the MILP), the bound is what it proved; "
          "cert: the DP optimum equals the exact structured optimum (yes / tol when only "
          "proven within a solver tolerance / no / open when the exact solvers stopped at "
          "their limit / n/a when none ran); gap: (T_dp - T_exact) / T_exact against the "
          "full-space optimum, an interval [best plan, bound] when the solvers stopped at "
          "their limit (an independent stored reference counts as one more full-space result "
          "when it proves an optimum or a bound); reference: consistent / contradicted for an "
          "independent stored result, snapshot same / snapshot changed for a regression "
          "snapshot of the DP's own earlier answer (which proves nothing), missing, stale; "
          "dp v/rc: the DP plan's virtual stages v (interleaved 1F1B) and the recompute modes "
          "its stages use (none, sel = selective, full; docs/cost-model.md §3); "
          f"{WALL_CAPPED_MARK} after a status (+ in LaTeX): the wall-clock cap, not the "
          "deterministic work limit, ended the run, so its figures depend on the machine "
          "(every other figure here is the same on any machine at any load, "
          "docs/certificates.md). No wall times here: see the protocol below.")


SDP_LEGEND = ("SDP (subnetwork data parallelism, docs/cost-model.md §6): the best SDP plan of "
              "each backend, ranked by FLOP-equivalent time T_eff = T · d · C_full / Σ_w C_w, kept "
              "apart from the plain plans above; cert: the DP's SDP optimum equals the exact "
              "optimum of the structured SDP space (grouped and cyclic designs × rank layouts); "
              "gap: against the exact optimum over every valid mask and placement.")


def sdp_header(exact: list[str], ticks: bool) -> list[str]:
    """The columns of the SDP section: T_eff where the plain tables show T."""
    return [column.replace(" T [", " T_eff [") for column in header(exact, ticks)]


def sdp_records(records: list[dict]) -> list[dict]:
    """The instance records with SDP searches, as the table rows read them (T_eff)."""
    return [view for view in map(sdp.table_record, records) if view is not None]


def render_markdown(document: dict) -> str:
    """One table per instance folder, the SDP section, the per-family summary, failures and
    the protocol."""
    lines = ["# Certification and gap table", "", LEGEND]
    for folder, records in instance_sets(document["instances"]):
        exact = exact_backends(records)
        lines += ["", f"## {folder}", ""]
        lines += _markdown_table(header(exact, False),
                                 [instance_row(r, exact, False) for r in records])
        lines += ["", *launcher_lines(records)]
    sdp_rows = sdp_records(document["instances"])
    if sdp_rows:
        exact = exact_backends(sdp_rows)
        certified = sum(r["certificate"] == "yes" for r in sdp_rows)
        lines += ["", "## SDP (T_eff)", "", SDP_LEGEND, ""]
        lines += _markdown_table(sdp_header(exact, False),
                                 [instance_row(r, exact, False) for r in sdp_rows])
        lines += ["", f"SDP: {len(sdp_rows)} instances, {certified} certified, "
                      f"{sum(bool(r['failures']) for r in sdp_rows)} failed."]
    lines += ["", "## Per family", ""]
    lines += _markdown_table(SUMMARY_HEADER, [summary_row(s) for s in document["summary"]])
    failing = [(r["instance"], f) for r in document["instances"] for f in r["failures"]]
    if failing:
        lines += ["", "## Failures", ""] + [f"- {name}: {text}" for name, text in failing]
    lines += ["", "## Protocol", ""] + [f"- {line}" for line in _protocol_lines(document)]
    return "\n".join(lines) + "\n"


def render_csv(document: dict) -> str:
    records = document["instances"]
    exact = exact_backends(records)
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(header(exact, True))
    writer.writerows(instance_row(record, exact, True) for record in records)
    sdp_rows = sdp_records(records)
    if sdp_rows:  # a second block after a blank line: T_eff as exact rationals "p/q"
        exact = exact_backends(sdp_rows)
        writer.writerow([])
        writer.writerow(["SDP " + column for column in sdp_header(exact, True)])
        writer.writerows(instance_row(record, exact, True) for record in sdp_rows)
    return buffer.getvalue()


_LATEX_SPECIALS = {"\\": r"\textbackslash{}", "&": r"\&", "%": r"\%", "$": r"\$", "#": r"\#",
                   "_": r"\_", "{": r"\{", "}": r"\}", "~": r"$\sim$",
                   "^": r"\textasciicircum{}", "—": "--", "∞": r"$\infty$",
                   "†": r"\dag{}"}


def latex_escape(text: str) -> str:
    return "".join(_LATEX_SPECIALS.get(char, char) for char in text)


def _latex_table(columns: list[str], rows: list[list[str]], caption: str,
                 left: int = 1) -> list[str]:
    """A booktabs table in scriptsize with narrow column gaps, shrunk to the text width
    only if it is still wider (adjustbox's max width)."""
    spec = "l" * left + "r" * (len(columns) - left)
    lines = [r"\begin{table}", r"\centering", r"\scriptsize", r"\setlength{\tabcolsep}{3pt}",
             r"\begin{adjustbox}{max width=\textwidth}", rf"\begin{{tabular}}{{{spec}}}",
             r"\toprule", " & ".join(latex_escape(c) for c in columns) + r" \\", r"\midrule"]
    lines += [" & ".join(latex_escape(cell) for cell in row) + r" \\" for row in rows]
    return lines + [r"\bottomrule", r"\end{tabular}", r"\end{adjustbox}",
                    rf"\caption{{{latex_escape(caption)}}}", r"\end{table}"]


# times in ms (the captions say so): a unit in the headers would widen the tables
LATEX_HEADER = ["instance", "L", "N", "DP T", "v/rc", "exact T", "status", "by", "cert", "gap",
                "ref."]
LATEX_DP_HEADER = ["instance", "L", "N", "DP T", "v/rc", "DP status", "ref."]
LATEX_CHOICES = ("v/rc: the DP plan's virtual stages and the recompute modes of its stages "
                 "(n none, s selective, f full).")
LATEX_SUMMARY_HEADER = ["family", "n", "cert.", "failed", "proven", "open", "mean gap",
                        "max gap"]
_REFERENCE_SHORT = {"consistent": "ok", "contradicted": "FAIL", "snapshot same": "snap.",
                    "snapshot changed": "snap. FAIL", "missing": "--", "stale": "stale"}


def latex_row(record: dict, exact: list[str]) -> list[str]:
    """The compact row: DP, the best full-space result of the exact solvers and who got it."""
    tick_s = tick_of(record)
    sizes = record.get("sizes", {})
    dp = _run(record, "dp", Space.STRUCTURED.value)
    runs = [run for backend in exact
            if (run := _run(record, backend, Space.FULL.value)) is not None]
    planned = [run for run in runs if run["objective_ticks"] is not None]
    best = min(planned, key=lambda run: run["objective_ticks"], default=None) or \
        (runs[0] if runs else None)
    by = ",".join(run["backend"] for run in runs
                  if best is not None and run["objective_ticks"] == best["objective_ticks"]
                  and run["status"] == best["status"])
    return [record["instance"], str(sizes.get("layers", "—")), str(sizes.get("devices", "—")),
            _ms(dp["objective_ticks"], tick_s) if dp else "—", plan_choices(dp, compact=True),
            _ms(best["objective_ticks"], tick_s) if best else "—",
            _short_status(best) if best else "—",
            by or "—", record["certificate"], format_gap(record["gap"]),
            _REFERENCE_SHORT.get(record.get("reference", "missing"), "--")]


def latex_dp_row(record: dict) -> list[str]:
    """The row of an instance only the DP ran on."""
    sizes = record.get("sizes", {})
    dp = _run(record, "dp", Space.STRUCTURED.value)
    return [record["instance"], str(sizes.get("layers", "—")), str(sizes.get("devices", "—")),
            _ms(dp["objective_ticks"], tick_of(record)) if dp else "—",
            plan_choices(dp, compact=True), _short_status(dp) if dp else "—",
            _REFERENCE_SHORT.get(record.get("reference", "missing"), "--")]


_SHORT_STATUS = {"OPTIMAL": "OPT", "FEASIBLE": "FEAS", "INFEASIBLE": "INF", "UNKNOWN": "UNK"}


def _short_status(run: dict) -> str:
    short = _SHORT_STATUS.get(run["status"], run["status"])
    short = f"{short}~" if run["status"] == "OPTIMAL" and run.get("tolerance_rel") else short
    return short + ("+" if run.get("wall_capped") else "")


def render_latex(document: dict) -> str:
    """Booktabs tables (one per instance folder, one per family) and the protocol as comments."""
    lines = ["% Generated by nest-cp verify; requires \\usepackage{booktabs} and "
             "\\usepackage{adjustbox}."]
    lines += ["% " + line for line in _protocol_lines(document)]
    for folder, records in instance_sets(document["instances"]):
        exact = exact_backends(records)
        if not exact:
            lines += _latex_table(LATEX_DP_HEADER, [latex_dp_row(r) for r in records],
                                  f"{folder}: the DP's optimum (structured space; no exact "
                                  f"solver ran); ref.: snap. when it matches the regression "
                                  f"snapshot of the DP's earlier answer. Times in ms; "
                                  f"{LATEX_CHOICES}") + [""]
            continue
        caption = (f"{folder}: the DP's optimum (structured space) against the best "
                   f"full-space result of {', '.join(exact) or 'no exact solver'} (status "
                   f"OPT, FEAS at the time limit, INF; OPT~ within the solver's tolerance), "
                   f"the certificate (DP = exact structured optimum) and the structural gap; "
                   f"ref.: stored reference ok, or snap. for a regression snapshot of the DP. "
                   f"Times in ms; {LATEX_CHOICES}")
        lines += _latex_table(LATEX_HEADER, [latex_row(r, exact) for r in records],
                              caption) + [""]
    sdp_rows = sdp_records(document["instances"])
    if sdp_rows:
        exact = exact_backends(sdp_rows)
        header_ = [f"{column}_eff" if column.endswith(" T") else column
                   for column in LATEX_HEADER]
        lines += _latex_table(header_, [latex_row(r, exact) for r in sdp_rows],
                              "SDP (docs/cost-model.md §6): the best SDP plan of each "
                              "backend ranked by FLOP-equivalent time T_eff, apart from the "
                              "plain plans; cert.: "
                              "the DP's SDP optimum equals the exact structured SDP optimum; "
                              "gap: against every valid mask and placement. Times in ms; "
                              + LATEX_CHOICES) + [""]
    lines += _latex_table(LATEX_SUMMARY_HEADER, [summary_row(s) for s in document["summary"]],
                          "Per family: instances (n), certified, failed, gaps proven and "
                          "open, mean and max proven gap (wall times: timings.md).")
    return "\n".join(lines) + "\n"
