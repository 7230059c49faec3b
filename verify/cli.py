"""``nest-cp verify`` and ``nest-cp table``: certify instances, write and regenerate gap tables.

Exit codes of ``verify``: 0 when every plan passed the evaluator, every algorithmic
certificate held and no result contradicted a stored reference; 1 otherwise; 2 for
bad input (a malformed instance or reference, an unknown backend, a missing path, no
instance files found), reported as one line ``error: <message>``, or a usage error
(PATHS without ``--out``: the default ``reports/`` holds the full benchmark run).
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import replace
from pathlib import Path

import click

from nest_cp.backends import BACKENDS
from nest_cp.errors import NestCpError
from nest_cp.io import load_instance, read_document
from verify import tables
from verify.cache import DEFAULT_CACHE_DIR
from verify.harness import (
    DEFAULT_BACKENDS,
    HarnessOptions,
    Task,
    backend_available,
    discover,
    load_reference,
    run_tasks,
    solve_counts,
)

EXIT_OK, EXIT_FAILED, EXIT_BAD_INPUT = 0, 1, 2
DEFAULT_TIME_LIMIT_S = 20.0
SMALL_DIR, PAPER_DIR = Path("instances/small"), Path("instances/paper")
DEFAULT_OUT_DIR = Path("reports")


def parse_backends(text: str | None) -> tuple[str, ...] | None:
    """``"dp,cpsat"`` -> ("dp", "cpsat"); raises NestCpError for an unknown name."""
    if text is None:
        return None
    names = tuple(dict.fromkeys(name.strip() for name in text.split(",") if name.strip()))
    unknown = [name for name in names if name not in BACKENDS]
    if unknown or not names:
        raise NestCpError(f"expected backends among {', '.join(BACKENDS)}, got {text!r}")
    return names


def build_tasks(paths: tuple[Path, ...], backends: tuple[str, ...] | None,
                base: HarnessOptions) -> list[Task]:
    """Tasks for PATHS with ``backends``; no PATHS: the small set exactly, the paper set with dp."""
    if paths:
        options = replace(base, backends=backends or DEFAULT_BACKENDS)
        tasks = [Task(path, options) for path in discover(paths)]
        if not tasks:
            raise NestCpError(f"{', '.join(map(str, paths))}: expected instance files "
                              f"(*.json), found none")
        return tasks
    if not SMALL_DIR.is_dir():
        raise NestCpError(f"{SMALL_DIR}: expected the instance folder here (run from the "
                          f"repository root or pass PATHS)")
    small = replace(base, backends=backends or DEFAULT_BACKENDS)
    paper = replace(base, backends=("dp",))
    tasks = [Task(path, small) for path in discover([SMALL_DIR])]
    if PAPER_DIR.is_dir():
        tasks += [Task(path, paper) for path in discover([PAPER_DIR])]
    if not tasks:
        raise NestCpError(f"{SMALL_DIR}: expected instance files (*.json), found none")
    return tasks


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
        entry = {"backends": ",".join(options.backends), "time_limit_s": options.time_limit_s,
                 "seed": options.seed, "workers_per_solve": 1,
                 "milp_solver": options.milp_solver}
        folder = str(task.path.parent)
        summary.setdefault(folder, entry)
    return summary


def write_outputs(document: dict, out_dir: Path) -> None:
    """results.json and the three tables, each written atomically."""
    out_dir.mkdir(parents=True, exist_ok=True)
    outputs = {"results.json": json.dumps(document, indent=1) + "\n"}
    outputs |= {f"gap_table.{fmt}": tables.render(document, fmt) for fmt in tables.FORMATS}
    for name, text in outputs.items():
        tmp = out_dir / f"{name}.tmp"
        tmp.write_text(text, encoding="utf-8")
        tmp.replace(out_dir / name)


@click.command("verify")
@click.argument("paths", nargs=-1, type=click.Path(path_type=Path))
@click.option("--backends", default=None,
              help="Comma-separated backends (default dp,cpsat,milp; dp only on instances/paper "
                   "when no PATHS are given).")
@click.option("--time-limit", "time_limit_s", type=float, default=DEFAULT_TIME_LIMIT_S,
              show_default=True, help="Seconds per exact solve.")
@click.option("--jobs", type=int, default=os.cpu_count() or 1, show_default=True,
              help="Instances verified in parallel.")
@click.option("--out", "out_dir", type=click.Path(path_type=Path), default=None,
              help="Directory for results.json and gap_table.{md,csv,tex} (default "
                   "reports/ without PATHS; required with PATHS).")
@click.option("--no-cache", is_flag=True, help="Re-solve everything (the cache is refreshed).")
@click.option("--cache-dir", type=click.Path(path_type=Path), default=DEFAULT_CACHE_DIR,
              show_default=True)
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--milp-solver", type=click.Choice(["cbc", "highs"]), default="highs",
              show_default=True)
@click.option("--progress/--no-progress", default=True, help="Progress bar on stderr.")
def verify_command(paths: tuple[Path, ...], backends: str | None, time_limit_s: float,
                   jobs: int, out_dir: Path | None, no_cache: bool, cache_dir: Path, seed: int,
                   milp_solver: str, progress: bool) -> None:
    """Certify instances (files or folders) and write gap tables."""
    out_dir = _out_dir(paths, out_dir)
    try:
        if not time_limit_s > 0 or jobs < 1:  # "not >" also rejects NaN
            raise NestCpError(f"expected --time-limit > 0 and --jobs >= 1, got "
                              f"{time_limit_s} and {jobs}")
        base = HarnessOptions(time_limit_s=time_limit_s, seed=seed, milp_solver=milp_solver,
                              cache_dir=cache_dir, use_cache=not no_cache)
        tasks = build_tasks(paths, parse_backends(backends), base)
        validate_instances(tasks)
        records = _run_with_progress(tasks, jobs, progress)
    except NestCpError as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(EXIT_BAD_INPUT)
    names = sorted({name for task in tasks for name in task.options.backends})
    document = tables.results_document(records, tables.protocol(
        _options_summary(tasks), {name: backend_available(name) for name in names}))
    write_outputs(document, out_dir)
    _report(records, out_dir)
    sys.exit(EXIT_FAILED if any(record["failures"] for record in records) else EXIT_OK)


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


def _run_with_progress(tasks: list[Task], jobs: int, progress: bool) -> list[dict]:
    if not progress:
        return run_tasks(tasks, jobs)
    with click.progressbar(length=len(tasks), label="verify", file=sys.stderr,
                           item_show_func=lambda name: name) as bar:
        return run_tasks(tasks, jobs, on_done=lambda record: bar.update(1, record["instance"]))


def _report(records: list[dict], out_dir: Path) -> None:
    counts = solve_counts(records)
    certified = sum(record["certificate"] == "yes" for record in records)
    click.echo(f"{len(records)} instances: {certified} certified, "
               f"{sum(bool(r['failures']) for r in records)} failed; runs solved "
               f"{counts['solved']}, from cache {counts['cache']}, without result {counts['none']}")
    for record in records:
        for failure in record["failures"]:
            click.echo(f"FAIL {record['instance']}: {failure}")
    click.echo(f"wrote {out_dir}/results.json and gap_table.{{md,csv,tex}}")


@click.command("table")
@click.argument("results", type=click.Path(path_type=Path))
@click.option("-f", "--format", "fmt", type=click.Choice(tables.FORMATS), default="md",
              show_default=True)
@click.option("-o", "--out", "out_file", type=click.Path(path_type=Path), default=None,
              help="Write to this file instead of stdout.")
def table_command(results: Path, fmt: str, out_file: Path | None) -> None:
    """Regenerate a gap table from a stored results.json."""
    try:
        document = read_document(results)
        if not isinstance(document, dict) or "instances" not in document:
            raise NestCpError(f"{results}: expected a results.json written by nest-cp verify")
        text = tables.render(document, fmt)
    except (KeyError, TypeError) as exc:
        click.echo(f"error: {results}: expected a results.json written by nest-cp verify "
                   f"(missing or malformed {exc})", err=True)
        sys.exit(EXIT_BAD_INPUT)
    except NestCpError as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(EXIT_BAD_INPUT)
    if out_file is None:
        click.echo(text, nl=False)
    else:
        out_file.write_text(text, encoding="utf-8")
