"""What ``nest-cp verify`` writes beside results.json and that differs from run to run.

The wall time of every run, whether it was solved now or read from the cache, the date,
the machine and the command change between two runs of the same code on the same
instances, so results.json and the gap tables (:mod:`nest_cp.verify.tables`) leave them
out and ``verify --out DIR`` writes them to ``DIR/timings.json`` and a readable
``DIR/timings.md`` (per-instance times, per-family medians).  A run read from the cache
carries the wall time of the solve that filled the cache.  Neither file is committed.
"""

from __future__ import annotations

import statistics

from nest_cp.verify.tables import EXACT_ORDER, exact_backends, instance_sets, run_context

NO_RESULT = "none"  # the source of a run that produced nothing (unavailable, crashed)


def context(jobs: int, executor: str) -> dict:
    """The date, machine and command of this run, and how many instances ran at once on
    which executor (wall times depend on both)."""
    return {**run_context(), "jobs": jobs, "executor": executor}


def run_timing(run: dict) -> dict:
    """One run's backend, space, source and wall time (and its SDP search's, if any)."""
    timing = {"backend": run["backend"], "space": run["space"], "source": run["source"],
              "wall_time_s": run["wall_time_s"]}
    if run.get("sdp"):
        timing["sdp_wall_time_s"] = run["sdp"]["wall_time_s"]
    return timing


def timings_document(records: list[dict], context_: dict) -> dict:
    """The timings.json document: the run's context, every instance's run timings, the
    per-family medians."""
    return {**context_,
            "instances": [{"instance": r["instance"], "path": r["path"], "family": r["family"],
                           "runs": [run_timing(run) for run in r["runs"]]} for r in records],
            "summary": family_medians(records)}


def _median(times: list[float]) -> float | None:
    return statistics.median(times) if times else None


def family_medians(records: list[dict]) -> list[dict]:
    """Per family: the median wall time of the DP runs and of the exact runs that gave a
    result (solved now or read from the cache)."""
    families: dict[str, list[dict]] = {}
    for record in records:
        families.setdefault(record["family"], []).append(record)
    medians = []
    for family, members in families.items():
        runs = [run for r in members for run in r["runs"] if run["source"] != NO_RESULT]
        medians.append({
            "family": family, "count": len(members),
            "median_dp_s": _median([run["wall_time_s"] for run in runs
                                    if run["backend"] == "dp"]),
            "median_exact_s": _median([run["wall_time_s"] for run in runs
                                       if run["backend"] in EXACT_ORDER])})
    return medians


LEGEND = ("Wall times in s of the runs whose results the gap table shows: each instance's "
          "DP run (structured space) and each exact solver's full-space run (timings.json "
          "has every run, the exact solvers' structured ones and the SDP searches too); "
          "(cache): read from the cache, the time is that of the solve that filled it; —: no "
          "result. Medians per family: every DP run, and every exact run in either space, "
          "that gave a result. These times change from run to run and with the machine's "
          "load, so they are kept out of results.json and gap_table.{md,csv,tex}.")


def _seconds(value: float | None) -> str:
    return "—" if value is None else f"{value:.2f}"


def _cell(runs: list[dict], backend: str, space: str) -> str:
    run = next((run for run in runs if run["backend"] == backend and run["space"] == space),
               None)
    if run is None or run["source"] == NO_RESULT:
        return "—"
    return _seconds(run["wall_time_s"]) + (" (cache)" if run["source"] == "cache" else "")


def _table(columns: list[str], rows: list[list[str]]) -> list[str]:
    lines = ["| " + " | ".join(columns) + " |", "|" + "|".join("---" for _ in columns) + "|"]
    return lines + ["| " + " | ".join(row) + " |" for row in rows]


def render_markdown(document: dict) -> str:
    """timings.md: per instance folder the DP's and each exact solver's wall time, the
    per-family medians, and the date, machine and command."""
    lines = ["# Wall times of nest-cp verify", "", LEGEND]
    for folder, records in instance_sets(document["instances"]):
        exact = exact_backends(records)
        rows = [[r["instance"], r["family"], _cell(r["runs"], "dp", "structured"),
                 *(_cell(r["runs"], backend, "full") for backend in exact)] for r in records]
        lines += ["", f"## {folder}", ""]
        lines += _table(["instance", "family", "dp [s]", *(f"{b} [s]" for b in exact)], rows)
    lines += ["", "## Per family", ""]
    lines += _table(["family", "instances", "median dp [s]", "median exact [s]"],
                    [[s["family"], str(s["count"]), _seconds(s["median_dp_s"]),
                      _seconds(s["median_exact_s"])] for s in document["summary"]])
    machine = document["machine"]
    lines += ["", "## Run", "", f"- Date (UTC): {document['date_utc']}",
              f"- Command: {document['command']}",
              f"- Executor: {document['executor']}, {document['jobs']} instance(s) at a time",
              f"- Machine: {machine['platform']}, {machine['processor']}, "
              f"{machine['cores']} cores"]
    return "\n".join(lines) + "\n"
