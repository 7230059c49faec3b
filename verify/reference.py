"""Write the reference result beside each instance (``<name>.ref.json``).

``python -m nest_cp.verify.reference [PATHS...] [--backends ...] [--time-limit S]`` runs the
harness (through its cache) and stores, per space, the strongest claim the runs
prove: OPTIMAL when a run proved the optimum (with ``tolerance_rel`` and the bound
proven when only a floating-point MILP proved it), INFEASIBLE when a run proved no
plan fits, otherwise FEASIBLE with the best plan found and the best bound proven.  An
instance whose runs fail any check gets no reference (a bug must not become a
reference).  Without PATHS: instances/small with the exact solvers, instances/paper
and instances/paper-v2 with the DP.

A reference is ``"kind": "independent"`` when an exact solver (CP-SAT, MILP, brute
force) took part, and ``"kind": "regression-snapshot"`` when only the DP ran: then
it holds just the DP's own structured answer, which certifies nothing and is used
only to notice when that answer changes.
"""

from __future__ import annotations

import logging
import sys
from datetime import UTC, datetime
from pathlib import Path

import click

from nest_cp import __version__
from nest_cp.model.documents import write_document
from nest_cp.model.result import Space, Status
from nest_cp.verify import certify, sdp
from nest_cp.verify.harness import (
    INDEPENDENT,
    SNAPSHOT,
    HarnessOptions,
    build_tasks,
    parse_backends,
    reference_path,
    run_tasks,
)

LOGGER = logging.getLogger(__name__)


def space_entry(runs: list[dict], space: str) -> dict | None:
    """The strongest claim the runs make about ``space`` (None when they make none).

    Plans of the structured space also count as plans of the full space; proofs
    count only for the space they were made in, except infeasibility, which holds
    in both (memory does not depend on the placement).
    """
    members = [run for run in runs if certify.contains(space, run["space"])]
    provers = [run for run in runs if run["space"] == space]
    planned = [run for run in members if certify.has_plan(run)]
    if any(run["status"] == Status.INFEASIBLE.value for run in runs):
        return {"status": Status.INFEASIBLE.value, "objective_ticks": None, "bound_ticks": None,
                "solver": _solvers(r for r in runs if r["status"] == Status.INFEASIBLE.value)}
    if not planned:
        return None
    best = min(run["objective_ticks"] for run in planned)
    optimal = [run for run in provers if certify.exact_optimum(run)]
    if optimal:
        return {"status": Status.OPTIMAL.value, "objective_ticks": best, "bound_ticks": best,
                "solver": _solvers(optimal)}
    within = [run for run in provers if run["status"] == Status.OPTIMAL.value]
    if within:
        return {"status": Status.OPTIMAL.value, "objective_ticks": best,
                "bound_ticks": max(run["bound_ticks"] for run in within),
                "tolerance_rel": max(run["tolerance_rel"] for run in within),
                "solver": _solvers(within)}
    bounds = [run["bound_ticks"] for run in provers if run["bound_ticks"] is not None]
    return {"status": Status.FEASIBLE.value, "objective_ticks": best,
            "bound_ticks": max(bounds) if bounds else None,
            "solver": _solvers(run for run in planned if run["objective_ticks"] == best)}


def _solvers(runs) -> str:
    return ",".join(sorted({f"{run['backend']}/{run['space']}" for run in runs}))


def reference_document(record: dict, time_limit_s: float) -> dict:
    """The ``.ref.json`` content of one verified instance (module docstring for ``kind``)."""
    usable = [run for run in record["runs"] if run["status"] not in certify.UNUSABLE_STATUSES]
    independent = any(run["backend"] in certify.EXACT_BACKENDS for run in usable)
    if independent:
        spaces = {space.value: space_entry(usable, space.value)
                  for space in (Space.FULL, Space.STRUCTURED)}
    else:  # the DP's own answer: a snapshot of it, in its own space only
        spaces = {Space.STRUCTURED.value: space_entry(
            [run for run in usable if run["backend"] == "dp"], Space.STRUCTURED.value)}
    document = {"instance": record["instance"], "instance_sha256": record["sha256"],
                "kind": INDEPENDENT if independent else SNAPSHOT,
                "date": datetime.now(UTC).strftime("%Y-%m-%d"), "nest_cp_version": __version__,
                "time_limit_s": time_limit_s,
                "generated_by": "python -m nest_cp.verify.reference",
                "spaces": {name: entry for name, entry in spaces.items() if entry is not None}}
    views = sdp.views(usable)
    sdp_spaces = {space.value: sdp.json_entry(space_entry(views, space.value))
                  for space in (Space.FULL, Space.STRUCTURED)}
    if any(sdp_spaces.values()):  # SDP searches: T_eff as "p/q" (DESIGN §7)
        document["sdp"] = {"objective": "effective_ticks", "spaces": {
            name: entry for name, entry in sdp_spaces.items() if entry is not None}}
    return document


def write_references(records: list[dict], time_limit_s: float) -> list[Path]:
    """Write a reference for every record without failures; returns the files written."""
    written = []
    for record in records:
        if record["failures"] or "sha256" not in record:
            LOGGER.warning("no reference for %s: %s", record["instance"],
                           record["failures"] or record["notes"])
            continue
        document = reference_document(record, time_limit_s)
        if not document["spaces"]:
            continue
        path = reference_path(Path(record["path"]))
        write_document(document, path)
        written.append(path)
    return written


@click.command()
@click.argument("paths", nargs=-1, type=click.Path(path_type=Path))
@click.option("--backends", default=None)
@click.option("--time-limit", "time_limit_s", type=float, default=60.0, show_default=True)
@click.option("--jobs", type=int, default=2, show_default=True)
def main(paths: tuple[Path, ...], backends: str | None, time_limit_s: float, jobs: int) -> None:
    """Compute and write reference results beside the instances."""
    logging.basicConfig(level=logging.INFO, stream=sys.stderr)
    tasks = build_tasks(paths, parse_backends(backends),
                        HarnessOptions(time_limit_s=time_limit_s))
    records = run_tasks(tasks, jobs)
    written = write_references(records, time_limit_s)
    click.echo(f"wrote {len(written)} references for {len(records)} instances")


if __name__ == "__main__":
    main()
