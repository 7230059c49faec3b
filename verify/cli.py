"""``nest-cp verify``, ``table`` and ``soak``: certify instances, write and regenerate gap
tables, cross-check every backend on thousands of random tiny instances.

Exit codes (:mod:`nest_cp.model.exits`) of ``verify``: 0 when every requested backend
was available, every plan passed the evaluator, every algorithmic certificate held,
no result contradicted a stored reference (or changed from a regression snapshot)
and at least one instance was certified; 1 otherwise; 2 for bad input (a malformed
instance or reference, an unknown backend, a missing path, no instance files found,
PATHS without ``--out``: the default ``reports/`` holds the full benchmark run,
``--executor ray`` without Ray installed or ``--address`` without it), as one line
on stderr.
"""

from __future__ import annotations

import json
import logging
import math
import os
import sys
from pathlib import Path

import click

from nest_cp.harness.executors import Executor, ExecutorKind, executor_options, make_executor
from nest_cp.io.readers import load_instance
from nest_cp.model.documents import read_document, refuse_inputs_as_outputs, write_output
from nest_cp.model.errors import NestCpError
from nest_cp.model.exits import ExitCode, GuardedCommand
from nest_cp.model.progress import Progress
from nest_cp.verify import certified_tables, fullcert, soak, tables, timings
from nest_cp.verify.cache import DEFAULT_CACHE_DIR
from nest_cp.verify.harness import (
    HarnessOptions,
    Task,
    backend_available,
    build_tasks,
    discover,
    load_reference,
    parse_backends,
    run_tasks,
    solve_counts,
)

LOGGER = logging.getLogger(__name__)

DEFAULT_TIME_LIMIT_S = 20.0  # seconds per exact solve with --work-limit off
DEFAULT_WORK_LIMIT = 20.0  # work units per exact solve (nest_cp.solvers.exact.budget.Work)
DEFAULT_WALL_CAP_S = 600.0  # the wall-clock cap per exact solve under a work limit
# --certify-full --work-limit W: a cap of 15 W s (at least 600).  At the NEST grid's scale a
# unit costs more than a second: bert-large on the H100 spine-leaf at 1,024 devices took 96 s
# of CPU for 20 units (CP-SAT's relaxations, and the model building and bounds, which are not
# charged), 158 s of wall time beside other jobs; at W = 300 the old cap of 4 W ended it at 232
# units on a loaded machine, so the figure depended on the load
CERTIFY_WALL_CAP_FACTOR = 15.0
DEFAULT_OUT_DIR = Path("reports")


def parse_work_limit(text: str | None) -> float | None:
    """``--work-limit``: a number of work units > 0, or ``off`` (None: the time limit
    alone decides); a BadParameter otherwise (exit 2)."""
    if text is None:
        return DEFAULT_WORK_LIMIT
    if text.strip().lower() == "off":
        return None
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value > 0):
        raise click.BadParameter(f"expected a number of work units > 0 or 'off', got {text!r}",
                                 param_hint="--work-limit")
    return value


def validate_instances(tasks: list[Task]) -> None:
    """Load every instance and its reference once so bad input fails before any solving.

    An instance whose loading needs a module that is not importable yet (a preset
    library) is left to the harness, which reports it as unavailable.
    """
    for task in tasks:
        load_reference(task.path)
        try:
            load_instance(task.path)
        except ImportError:
            continue


def _options_summary(tasks: list[Task]) -> dict:
    summary: dict = {}
    for task in tasks:
        options = task.options
        limits = {"time_limit_s": options.time_limit_s} if options.work_limit is None else {
            "work_limit": options.work_limit, "wall_cap_s": options.time_limit_s}
        entry = {"backends": ",".join(options.backends), **limits,
                 "seed": options.seed, "workers_per_solve": 1,
                 "milp_solver": options.milp_solver}
        folder = str(task.path.parent)
        summary.setdefault(folder, entry)
    return summary


def write_outputs(document: dict, timings_: dict, out_dir: Path) -> None:
    """results.json, the three tables, timings.json and timings.md, each written atomically
    by the one safe writer.

    The tables are rendered from results.json as written, exactly as ``nest-cp table``
    reads it back, so it regenerates them byte for byte.
    """
    out_dir.mkdir(parents=True, exist_ok=True)
    results = json.dumps(document, indent=1) + "\n"
    stored = json.loads(results)
    outputs = {"results.json": results}
    outputs |= {f"gap_table.{fmt}": tables.render(stored, fmt) for fmt in tables.FORMATS}
    outputs |= {"timings.json": json.dumps(timings_, indent=1) + "\n",
                "timings.md": timings.render_markdown(timings_)}
    for name, text in outputs.items():
        write_output(out_dir / name, text)


@click.command("verify", cls=GuardedCommand)
@click.argument("paths", nargs=-1, type=click.Path(path_type=Path))
@click.option("--backends", default=None,
              help="Comma-separated backends (default dp,cpsat,milp; dp only on instances/paper "
                   "and instances/paper-v2 when no PATHS are given).")
@click.option("--work-limit", "work_limit_text", default=None, metavar="UNITS|off",
              help=f"Deterministic work units per exact solve (about a second of one core "
                   f"each; docs/certificates.md), so that the tables come out the same on "
                   f"any machine at any load; 'off': the time limit alone decides "
                   f"[default: {DEFAULT_WORK_LIMIT:g}].")
@click.option("--time-limit", "time_limit_s", type=float, default=None,
              help=f"Seconds per exact solve: a wall-clock cap under --work-limit "
                   f"[default: {DEFAULT_WALL_CAP_S:g}], the limit with --work-limit off "
                   f"[default: {DEFAULT_TIME_LIMIT_S:g}]; with --certify-full, seconds per "
                   f"instance [default: {fullcert.DEFAULT_TIME_LIMIT_S:g}].")
@click.option("--jobs", type=int, default=None,
              help="Instances verified in parallel [default: the number of cores; 1 with "
                   "--certify-full].")
@click.option("--out", "out_dir", type=click.Path(path_type=Path), default=None,
              help="Directory for results.json, gap_table.{md,csv,tex} and the wall times "
                   "timings.{json,md} (default reports/ without PATHS; required with PATHS).")
@click.option("--no-cache", is_flag=True, help="Re-solve everything (the cache is refreshed).")
@click.option("--cache-dir", type=click.Path(path_type=Path), default=DEFAULT_CACHE_DIR,
              show_default=True)
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--milp-solver", type=click.Choice(["cbc", "highs"]), default="highs",
              show_default=True)
@click.option("--progress/--no-progress", default=True,
              help="Progress bar on stderr (drawn only on a terminal).")
@click.option("--certify-full", is_flag=True,
              help="Instead of the exact backends: prove full-space intervals [lower bound, "
                   "best plan] at paper scale (nest_cp.solvers.certify) and write "
                   "certified.{json,md,csv,tex}.")
@executor_options
def verify_command(paths: tuple[Path, ...], backends: str | None, work_limit_text: str | None,
                   time_limit_s: float | None, jobs: int | None, out_dir: Path | None,
                   no_cache: bool, cache_dir: Path, seed: int, milp_solver: str,
                   progress: bool, certify_full: bool, executor_kind: str,
                   address: str | None) -> None:
    """Certify instances (files or folders) and write gap tables."""
    if certify_full:
        # --certify-full keeps its wall-clock default (the committed certified tables were
        # made so); --work-limit UNITS makes it deterministic, time limit then a cap
        work_limit = None if work_limit_text is None else parse_work_limit(work_limit_text)
        _certify_full(paths, backends, time_limit_s, work_limit, jobs, out_dir, no_cache,
                      cache_dir, seed, progress, executor_kind, address)
        return
    work_limit = parse_work_limit(work_limit_text)
    if time_limit_s is None:
        time_limit_s = DEFAULT_TIME_LIMIT_S if work_limit is None else DEFAULT_WALL_CAP_S
    jobs = (os.cpu_count() or 1) if jobs is None else jobs
    out_dir = _out_dir(paths, out_dir)
    if not time_limit_s > 0 or jobs < 1:  # "not >" also rejects NaN
        raise NestCpError(f"expected --time-limit > 0 and --jobs >= 1, got "
                          f"{time_limit_s} and {jobs}")
    if address is not None and executor_kind != ExecutorKind.RAY.value:
        raise click.UsageError("--address needs --executor ray")
    base = HarnessOptions(time_limit_s=time_limit_s, work_limit=work_limit, seed=seed,
                          milp_solver=milp_solver, cache_dir=cache_dir,
                          use_cache=not no_cache)
    tasks = build_tasks(paths, parse_backends(backends), base)
    validate_instances(tasks)
    with make_executor(executor_kind, jobs, address) as executor:
        records = _run_with_progress(tasks, executor, progress)
    names = sorted({name for task in tasks for name in task.options.backends})
    document = tables.results_document(records, tables.settings(
        _options_summary(tasks), {name: backend_available(name) for name in names}))
    write_outputs(document, timings.timings_document(records, timings.context(
        jobs, executor_kind)), out_dir)
    available = document["protocol"]["backends_available"]
    problems = _report(records, out_dir, [name for name in names if not available[name]])
    sys.exit(ExitCode.NO_PLAN if problems else ExitCode.OK)


def _certify_full(paths: tuple[Path, ...], backends: str | None, time_limit_s: float | None,
                  work_limit: float | None, jobs: int | None, out_dir: Path | None,
                  no_cache: bool, cache_dir: Path, seed: int, progress: bool,
                  executor_kind: str, address: str | None) -> None:
    """``verify PATHS --certify-full --out DIR``: certified.{json,md,csv,tex} in DIR."""
    if backends is not None:
        raise NestCpError("expected no --backends with --certify-full (it runs the DP and the "
                          "full-space certification)")
    if not paths or out_dir is None:
        raise click.UsageError("expected PATHS and --out DIR with --certify-full")
    if time_limit_s is None:  # under a work limit a cap several times what the work takes
        time_limit_s = fullcert.DEFAULT_TIME_LIMIT_S if work_limit is None else max(
            fullcert.DEFAULT_TIME_LIMIT_S, CERTIFY_WALL_CAP_FACTOR * work_limit)
    jobs = 1 if jobs is None else jobs
    if not time_limit_s > 0 or jobs < 1:
        raise NestCpError(f"expected --time-limit > 0 and --jobs >= 1, got "
                          f"{time_limit_s} and {jobs}")
    files = discover(paths)
    if not files:
        raise NestCpError(f"{', '.join(map(str, paths))}: expected instance files (*.json), "
                          f"found none")
    for file in files:
        load_instance(file)  # bad input fails before any solving
    options = fullcert.FullCertOptions(time_limit_s=time_limit_s, seed=seed,
                                       cache_dir=cache_dir, use_cache=not no_cache,
                                       work_limit=work_limit)
    with make_executor(executor_kind, jobs, address) as executor:
        records = fullcert.run_all(files, options, executor, progress)
    limits = {"time_limit_s": time_limit_s} | (
        {} if work_limit is None else {"work_limit": work_limit})
    document = {"kind": "certified", "protocol": tables.protocol(
        {**limits, "seed": seed, "jobs": jobs, "workers_per_solve": 1},
        {"dp": True, "certify-full": True}), "instances": records}
    fullcert.write_outputs(document, out_dir)
    within = sum(1 for r in records if (w := certified_tables.width(r)) is not None
                 and w <= certified_tables.WITHIN)
    optimal = sum(r["status"] == "OPTIMAL" for r in records)
    click.echo(f"{len(records)} instances: {within} within 1 %, {optimal} proven optimal, "
               f"{sum(r['plan_source'] != 'dp' for r in records)} better than the DP; "
               f"solved {sum(r['source'] == 'solved' for r in records)}, from cache "
               f"{sum(r['source'] == 'cache' for r in records)}")
    click.echo(f"wrote {out_dir}/certified.json and certified.{{md,csv,tex}}")
    sys.exit(ExitCode.OK if all(r["objective_ticks"] is not None or r["status"] == "INFEASIBLE"
                                for r in records) else ExitCode.NO_PLAN)


def _out_dir(paths: tuple[Path, ...], out_dir: Path | None) -> Path:
    """``--out`` as given; without it ``reports`` for the full run, a usage error with PATHS.

    The committed reports/ hold the full benchmark run, so a run on chosen files
    must never overwrite them by default.
    """
    if out_dir is not None:
        return out_dir
    if paths:
        raise click.UsageError("expected --out DIR when PATHS are given (the default "
                               "reports/ holds the full benchmark run)")
    return DEFAULT_OUT_DIR


def _run_with_progress(tasks: list[Task], executor: Executor, progress: bool) -> list[dict]:
    with Progress("verify", len(tasks), show_bar=progress, logger=LOGGER) as bar:
        return run_tasks(tasks, executor=executor,
                         on_done=lambda record: bar.advance(status=record["instance"]))


def _report(records: list[dict], out_dir: Path, unavailable: list[str]) -> bool:
    """Print the summary and every failure; True when the run is not a success (exit 1)."""
    counts = solve_counts(records)
    certified = sum(record["certificate"] == "yes" for record in records)
    within = sum(record["certificate"] == "tol" for record in records)
    failed = sum(bool(r["failures"]) for r in records)
    click.echo(f"{len(records)} instances: {certified} certified"
               + (f", {within} certified within a solver tolerance" if within else "")
               + f", {failed} failed; runs solved {counts['solved']}, from cache "
               f"{counts['cache']}, without result {counts['none']}")
    for record in records:
        for failure in record["failures"]:
            click.echo(f"FAIL {record['instance']}: {failure}")
    for name in unavailable:
        click.echo(f"FAIL backend {name} was requested but is not available")
    if certified + within == 0:
        click.echo("FAIL nothing was certified (no exact structured run agreed with the DP)")
    click.echo(f"wrote {out_dir}/results.json, gap_table.{{md,csv,tex}} and "
               f"timings.{{json,md}}")
    return bool(failed or unavailable or certified + within == 0)


@click.command("table", cls=GuardedCommand)
@click.argument("results", type=click.Path(path_type=Path))
@click.option("-f", "--format", "fmt", type=click.Choice(tables.FORMATS), default="md",
              show_default=True)
@click.option("-o", "--out", "out_file", type=click.Path(path_type=Path), default=None,
              help="Write to this file instead of stdout.")
def table_command(results: Path, fmt: str, out_file: Path | None) -> None:
    """Regenerate a gap table from a stored results.json."""
    refuse_inputs_as_outputs((out_file,), (results,))
    document = read_document(results)
    if not isinstance(document, dict) or "instances" not in document:
        raise NestCpError(f"{results}: expected a results.json written by nest-cp verify")
    renderer = certified_tables if document.get("kind") == "certified" else tables
    try:
        text = renderer.render(document, fmt)
    except (KeyError, TypeError) as exc:
        raise NestCpError(f"{results}: expected a results.json written by nest-cp verify "
                          f"(missing or malformed {exc})") from None
    if out_file is None:
        click.echo(text, nl=False)
    else:
        write_output(out_file, text)


@click.command("soak", cls=GuardedCommand)
@click.option("--count", type=click.IntRange(min=1), default=10_000, show_default=True,
              help="Seeds (instances) to run.")
@click.option("--first-seed", type=click.IntRange(min=0), default=0, show_default=True)
@click.option("--sample-rate", type=click.FloatRange(0, 1), default=0.1, show_default=True,
              help="Fraction of seeds on which CP-SAT and the MILP also run.")
@click.option("--exact-time-limit", type=click.FloatRange(min=0, min_open=True),
              default=10.0, show_default=True, help="Seconds per exact solve.")
@click.option("--jobs", type=click.IntRange(min=1), default=os.cpu_count() or 1,
              show_default=True, help="Seeds run in parallel.")
@click.option("--out", "out_file", type=click.Path(dir_okay=False, path_type=Path),
              default=Path("reports/soak.md"), show_default=True, help="The report.")
@click.option("--state-dir", type=click.Path(file_okay=False, path_type=Path),
              default=DEFAULT_CACHE_DIR / "soak", show_default=True,
              help="Where finished seeds are kept, so an interrupted run continues.")
@click.option("--reproducers", type=click.Path(file_okay=False, path_type=Path),
              default=Path("tests/data/soak"), show_default=True,
              help="Where each disagreeing instance is saved.")
@click.option("--progress/--no-progress", default=True,
              help="Progress bar on stderr (only ever drawn on a terminal).")
@executor_options
def soak_command(count: int, first_seed: int, sample_rate: float, exact_time_limit: float,
                 jobs: int, out_file: Path, state_dir: Path, reproducers: Path,
                 progress: bool, executor_kind: str, address: str | None) -> None:
    """Cross-check every backend on COUNT seeded random tiny instances; write a report.

    Exit 0 when every instance agreed, 1 when some disagreed (each saved as a
    reproducer), 2 for bad options.
    """
    if not math.isfinite(exact_time_limit):
        raise click.BadParameter(f"expected a finite number of seconds, got {exact_time_limit}",
                                 param_hint="--exact-time-limit")
    _check_folder(out_file.parent, "--out")
    options = soak.SoakOptions(count=count, first_seed=first_seed, sample_rate=sample_rate,
                               exact_time_limit_s=exact_time_limit)
    done_before = len(soak.SoakState(state_dir, options).done())
    with make_executor(executor_kind, jobs, address) as executor, \
            Progress("soak", count, show_bar=progress, logger=LOGGER) as bar:
        bar.advance(done_before)
        records, wall = soak.run_soak(options, state_dir, executor,
                                      on_record=lambda record: bar.advance())
    written = soak.save_reproducers(records, options, reproducers)
    text = soak.render_report(records, options, wall, jobs, written)
    write_output(out_file, text)
    counts = soak.summary(records)
    click.echo(f"{counts['instances']} instances: {counts['agreements']} agree, "
               f"{counts['disagreements']} disagree; wrote {out_file}")
    for path in written:
        click.echo(f"FAIL reproducer {path}")
    sys.exit(ExitCode.NO_PLAN if counts["disagreements"] else ExitCode.OK)


def _check_folder(folder: Path, option: str) -> None:
    if not folder.resolve().is_dir():
        raise click.BadParameter(f"expected an existing folder, got {folder}", param_hint=option)
