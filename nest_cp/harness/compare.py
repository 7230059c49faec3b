"""``nest-cp compare``: throughput of several backends on many instances, as tables and a plot.

Protocol: every backend runs on every instance through ``backends.solve`` (so
every plan is refereed by the evaluator) with one worker, the given seed, time
limit and MCMC budget.  Each (instance, backend) becomes one row of
``compare.csv``: status, objective ticks, throughput B / T in samples/s, wall
time, and the throughput *ratio* to a normaliser backend.  ``compare.md``,
``compare.tex`` and ``compare.png`` are then generated from that stored CSV
alone (:func:`render_reports`), so they can be regenerated without solving
again (``nest-cp compare --from-csv DIR/compare.csv --out DIR``; ratios are
recomputed from the stored throughputs, so --normalize and --scope may change).

Normalisation scope:
- ``model`` (default, NEST's Figure 5 convention): per model and cluster
  family (the cluster's name without its "-<devices>" suffix), the
  normaliser's throughput at the smallest device count where it has a plan,
  so ratios grow with the device count (NEST's MANUAL_TPUT).
- ``instance``: the normaliser's throughput on the same instance.

Cells, in the tables and as marks instead of bars in the plot (never as zero):
"—" the backend has no plan (INFEASIBLE or UNKNOWN: a heuristic that found
nothing); "n/a" the backend has a plan but the normaliser has none to divide by
in that scope; "ERR" the backend crashed or its plan failed the referee (the
message is in compare.csv).  An instance every backend proves has no plan (all INFEASIBLE,
e.g. a model its launcher does not build) is named on stderr with the first one's reason.

Exit codes: 0 every backend ran; 1 some row is ERR; 2 bad input (a malformed
instance or CSV, no instance files, a bad option, an output that may not be written),
as one line on stderr.  Every instance is loaded before anything is solved, and the
outputs are checked before that, so bad input fails fast; every file is written through
:func:`nest_cp.model.documents.write_output` (never into a directory, a device or a
symlink to one; a full disk names the file).
"""

from __future__ import annotations

import csv
import logging
import math
import sys
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, fields, replace
from io import BytesIO, StringIO
from pathlib import Path

import click

from nest_cp import io
from nest_cp.cost import terms as cost
from nest_cp.harness.executors import (
    Done,
    Executor,
    ExecutorKind,
    LocalExecutor,
    executor_options,
    make_executor,
    run_ordered,
)
from nest_cp.model.documents import check_output, refuse_inputs_as_outputs, write_output
from nest_cp.model.errors import NestCpError
from nest_cp.model.exits import ExitCode, GuardedCommand
from nest_cp.model.instance import Instance
from nest_cp.model.progress import Progress
from nest_cp.model.result import Status
from nest_cp.solvers.registry import BACKENDS, SolveOptions, solve

logger = logging.getLogger(__name__)

DEFAULT_BACKENDS = ("dp", "manual", "phaze", "mcmc")
INSTANCE_SUFFIXES = (".json", ".yaml", ".yml")
MISSING = "—"        # no plan (INFEASIBLE, UNKNOWN) or not run
NO_REFERENCE = "n/a"  # a plan, but no normaliser plan to divide by
ERROR_MARK = "ERR"    # the backend crashed or its plan failed the referee
ERROR = "ERROR"       # the status of such a row
ROW_STATUSES = tuple(status.value for status in Status) + (ERROR,)
REFERENCE_SUFFIX = ".ref.json"
OUTPUTS = ("compare.csv", "compare.md", "compare.tex", "compare.png")  # in --out


@dataclass(frozen=True, slots=True)
class Row:
    """One backend on one instance; ``throughput`` and ``ratio`` are None without a plan."""

    instance: str
    model: str
    cluster: str
    num_devices: int
    backend: str
    status: str
    objective_ticks: int | None
    throughput: float | None  # samples per second
    ratio: float | None
    wall_time_s: float
    message: str = ""


# ------------------------------------------------------------------ running


def instance_paths(paths: Iterable[str | Path]) -> list[Path]:
    """Files as given, directories expanded to their instance files (sorted).

    Reference results stored beside instances (``*.ref.json``) are not instances.
    """
    found: list[Path] = []
    for path in map(Path, paths):
        if path.is_dir():
            found += sorted(p for p in path.iterdir() if p.suffix in INSTANCE_SUFFIXES
                            and not p.name.endswith(REFERENCE_SUFFIX))
        else:
            found.append(path)
    return found


def load_instances(paths: Sequence[str | Path]) -> list[tuple[str, Instance]]:
    """(name, instance) for every instance file among ``paths``, all parsed up front.

    Raises :class:`NestCpError` for a malformed instance or when there is none.
    """
    files = instance_paths(paths)
    if not files:
        raise NestCpError(f"{', '.join(map(str, paths))}: expected instance files "
                          f"({', '.join(INSTANCE_SUFFIXES)}), found none")
    return [(path.stem, io.load_instance(path)) for path in files]


@dataclass(frozen=True, slots=True)
class CompareTask:
    """One backend on one parsed instance: the unit an executor runs."""

    instance: Instance
    name: str
    backend: str
    options: SolveOptions


def run_comparison(paths: Sequence[str | Path], backends: Sequence[str],
                   options: SolveOptions, executor: Executor | None = None,
                   progress: bool = False, loaded: Callable[[], None] | None = None
                   ) -> list[Row]:
    """Solve every instance with every backend; ratios are left None (see :func:`normalise`).

    Every instance is parsed before the first solve, so a malformed one fails fast;
    ``loaded`` is called once they all are, before the first solve.
    The solves run on ``executor`` (default: one after another in this process);
    rows come back in (instance, backend) order whatever the executor.
    """
    tasks = [CompareTask(instance, name, backend, options)
             for name, instance in load_instances(paths) for backend in backends]
    if loaded is not None:
        loaded()
    with Progress("compare", len(tasks), show_bar=progress, logger=logger) as bar:
        def finished(done: Done) -> None:
            task = tasks[done.index]
            bar.advance(status=f"{task.name} {task.backend}")
            logger.info("%s %s: %s", task.name, task.backend,
                        done.value.status if done.error is None else ERROR)

        if executor is None:
            with LocalExecutor(1) as local:
                results = run_ordered(local, run_task, tasks, finished)
        else:
            results = run_ordered(executor, run_task, tasks, finished)
    return [_row(done, tasks[done.index]) for done in results]


def run_task(task: CompareTask) -> Row:
    """One task's row (a module-level function, so any executor can ship it)."""
    return _run_one(task.instance, task.name, task.backend, task.options)


def _row(done: Done, task: CompareTask) -> Row:
    """The task's row; a worker that died under it becomes an ERROR row."""
    if done.error is None:
        return done.value
    instance = task.instance
    return Row(instance=task.name, model=instance.workload.name, cluster=instance.cluster.name,
               num_devices=instance.cluster.num_devices, backend=task.backend, status=ERROR,
               objective_ticks=None, throughput=None, ratio=None, wall_time_s=0.0,
               message=f"{type(done.error).__name__}: {done.error}")


def _run_one(instance: Instance, name: str, backend: str, options: SolveOptions) -> Row:
    """One refereed solve; a backend that fails becomes an ERROR row, not a crash of the run."""
    base = Row(instance=name, model=instance.workload.name, cluster=instance.cluster.name,
               num_devices=instance.cluster.num_devices, backend=backend, status=ERROR,
               objective_ticks=None, throughput=None, ratio=None, wall_time_s=0.0)
    try:
        result = solve(instance, backend, options)
    except Exception as error:  # noqa: BLE001 - one broken backend must not stop the table
        logger.error("%s on %s failed: %s", backend, name, error)
        return replace(base, message=f"{type(error).__name__}: {error}")
    throughput = None
    if result.objective_ticks is not None:
        throughput = cost.throughput(instance.training.global_batch, result.objective_ticks,
                                     instance.training.tick_s)
    return replace(base, status=result.status.value, objective_ticks=result.objective_ticks,
                   throughput=throughput, wall_time_s=result.wall_time_s,
                   message=result.message)


def normalise(rows: Sequence[Row], normaliser: str, scope: str = "model") -> list[Row]:
    """Rows with ``ratio`` = throughput / the normaliser's reference throughput (module doc)."""
    if scope not in ("model", "instance"):
        raise ValueError(f"expected scope 'model' or 'instance', got {scope!r}")
    reference: dict[tuple, float] = {}
    references = sorted((row for row in rows if row.backend == normaliser and row.throughput),
                        key=lambda row: row.num_devices, reverse=True)
    for row in references:  # the smallest device count is written last and wins
        reference[_scope_key(row, scope)] = row.throughput
    return [replace(row, ratio=row.throughput / reference[_scope_key(row, scope)]
                    if row.throughput and _scope_key(row, scope) in reference else None)
            for row in rows]


def _scope_key(row: Row, scope: str) -> tuple:
    return (row.model, cluster_family(row)) if scope == "model" else (row.instance,)


def cluster_family(row: Row) -> str:
    """The cluster's name without a trailing "-<devices>" (presets name clusters that way)."""
    suffix = f"-{row.num_devices}"
    return row.cluster[:-len(suffix)] if row.cluster.endswith(suffix) else row.cluster


# ------------------------------------------------------------------ CSV


def write_csv(rows: Sequence[Row], path: Path) -> None:
    """Store ``rows`` as CSV through the safe writer (:func:`write_output`)."""
    text = StringIO(newline="")  # csv's own \r\n line ends, as a file opened with newline=""
    writer = csv.DictWriter(text, fieldnames=[f.name for f in fields(Row)])
    writer.writeheader()
    for row in rows:
        writer.writerow({key: "" if value is None else value
                         for key, value in asdict(row).items()})
    write_output(path, text.getvalue())


def read_csv(path: Path) -> list[Row]:
    """Rows from a stored ``compare.csv``; empty optional cells become None.

    Raises :class:`NestCpError` naming the file, the row (the header is row 1) and
    the column for a missing column, a malformed cell, or a file without rows.
    """
    columns = [f.name for f in fields(Row)]
    try:
        with open(path, newline="", encoding="utf-8") as handle:
            reader = csv.DictReader(handle)
            missing = [name for name in columns if name not in (reader.fieldnames or ())]
            if missing:
                raise NestCpError(f"{path}: row 1: expected the columns {', '.join(columns)}; "
                                  f"missing {', '.join(missing)}")
            rows = [_row_from_csv(raw, f"{path}: row {reader.line_num}") for raw in reader]
    except (UnicodeDecodeError, csv.Error) as exc:
        raise NestCpError(f"{path}: expected a UTF-8 CSV written by nest-cp compare "
                          f"({type(exc).__name__})") from None
    if not rows:
        raise NestCpError(f"{path}: expected at least one result row, got none")
    return rows


def _row_from_csv(raw: dict, where: str) -> Row:
    def cell(column: str, kind: type, optional: bool = False):
        text = raw[column]
        if text is None:
            raise NestCpError(f"{where}: {column}: expected a cell, got a short row")
        if text == "" and optional:
            return None
        if kind is str:
            return text
        try:
            value = kind(text)
        except ValueError:
            raise NestCpError(f"{where}: {column}: expected {_KIND_NAMES[kind]}, "
                              f"got {text!r}") from None
        if kind is float and not math.isfinite(value):
            raise NestCpError(f"{where}: {column}: expected a finite number, got {text!r}")
        return value

    status = cell("status", str)
    if status not in ROW_STATUSES:
        raise NestCpError(f"{where}: status: expected one of {', '.join(ROW_STATUSES)}, "
                          f"got {status!r}")
    num_devices = cell("num_devices", int)
    if num_devices < 1:
        raise NestCpError(f"{where}: num_devices: expected an integer >= 1, got {num_devices}")
    return Row(instance=cell("instance", str), model=cell("model", str),
               cluster=cell("cluster", str), num_devices=num_devices,
               backend=cell("backend", str), status=status,
               objective_ticks=cell("objective_ticks", int, optional=True),
               throughput=cell("throughput", float, optional=True),
               ratio=cell("ratio", float, optional=True),
               wall_time_s=cell("wall_time_s", float), message=cell("message", str))


_KIND_NAMES = {int: "an integer", float: "a number"}


# ------------------------------------------------------------------ tables


def _backends_in(rows: Sequence[Row]) -> list[str]:
    return list(dict.fromkeys(row.backend for row in rows))


def _table(rows: Sequence[Row]) -> tuple[list[str], list[list[str]]]:
    """Header and cells: one line per instance, a ratio and a solve time per backend."""
    backends = _backends_in(rows)
    by_instance: dict[str, dict[str, Row]] = {}
    for row in rows:
        by_instance.setdefault(row.instance, {})[row.backend] = row
    header = ["instance", "model", "cluster", "devices"] + [f"{b} ratio" for b in backends] + \
        [f"{b} time (s)" for b in backends]
    lines = []
    for cells in sorted(by_instance.values(), key=lambda c: _order(next(iter(c.values())))):
        first = next(iter(cells.values()))
        ratios = [cell_text(cells.get(b)) for b in backends]
        times = [f"{cells[b].wall_time_s:.2f}" if b in cells else MISSING for b in backends]
        lines.append([first.instance, first.model, cluster_family(first), str(first.num_devices),
                      *ratios, *times])
    return header, lines


def _order(row: Row) -> tuple:
    return (row.model, cluster_family(row), row.num_devices, row.instance)


def cell_text(row: Row | None) -> str:
    """A ratio cell: the ratio, or ERR, — (no plan, or not run) or n/a (see the module doc)."""
    if row is None:
        return MISSING
    if row.status == ERROR:
        return ERROR_MARK
    if row.throughput is None:
        return MISSING
    if row.ratio is None:
        return NO_REFERENCE
    return f"{row.ratio:.2f}"


def legend(normaliser: str) -> str:
    """What the cells mean, for the tables and the plot."""
    return (f"{MISSING} = no plan; {NO_REFERENCE} = a plan, but {normaliser} has none to "
            f"normalise by; {ERROR_MARK} = backend error (see compare.csv)")


def render_markdown(rows: Sequence[Row], normaliser: str) -> str:
    header, lines = _table(rows)
    out = [f"Throughput relative to `{normaliser}` (higher is better; {legend(normaliser)}).",
           "",
           "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    out += ["| " + " | ".join(line) + " |" for line in lines]
    return "\n".join(out) + "\n"


def render_latex(rows: Sequence[Row], normaliser: str) -> str:
    """A compact booktabs tabular that fits ``\\textwidth``: model (and cluster when the
    rows hold several), devices, then the ratio and the time of each backend under two
    group headings; the instance names are left to the Markdown and CSV tables."""
    backends = _backends_in(rows)
    by_instance: dict[str, dict[str, Row]] = {}
    for row in rows:
        by_instance.setdefault(row.instance, {})[row.backend] = row
    clusters = sorted({cluster_family(row) for row in rows})
    keys = ["model"] + (["cluster"] if len(clusters) > 1 else []) + ["N"]

    def escape(text: str) -> str:
        return text.replace("_", r"\_").replace("&", r"\&").replace("%", r"\%").replace(
            MISSING, "---")

    width = len(backends)
    out = [f"% throughput relative to {normaliser} on {', '.join(clusters)}; "
           f"{escape(legend(normaliser))}",
           r"% requires \usepackage{booktabs} and \usepackage{adjustbox}",
           r"{\small\setlength{\tabcolsep}{3pt}%",
           r"\begin{adjustbox}{max width=\textwidth}",
           r"\begin{tabular}{" + "l" * (len(keys) - 1) + "r" * (1 + 2 * width) + "}",
           r"\toprule",
           " & " * (len(keys) - 1) + rf" & \multicolumn{{{width}}}{{c}}{{throughput / "
           rf"{escape(normaliser)}}} & \multicolumn{{{width}}}{{c}}{{solve time [s]}} \\",
           rf"\cmidrule(lr){{{len(keys) + 1}-{len(keys) + width}}}"
           rf"\cmidrule(lr){{{len(keys) + width + 1}-{len(keys) + 2 * width}}}",
           " & ".join(keys + [escape(b) for b in backends] * 2) + r" \\", r"\midrule"]
    for cells in sorted(by_instance.values(), key=lambda c: _order(next(iter(c.values())))):
        first = next(iter(cells.values()))
        head = [first.model] + ([cluster_family(first)] if len(clusters) > 1 else []) + \
            [str(first.num_devices)]
        ratios = [cell_text(cells.get(b)) for b in backends]
        times = [f"{cells[b].wall_time_s:.2f}" if b in cells else MISSING for b in backends]
        out.append(" & ".join(escape(cell) for cell in head + ratios + times) + r" \\")
    out += [r"\bottomrule", r"\end{tabular}", r"\end{adjustbox}}"]
    return "\n".join(out) + "\n"


# ------------------------------------------------------------------ plot


def plot_rows(rows: Sequence[Row], png_path: Path, normaliser: str) -> None:
    """Grouped bars of the ratio per device count, one panel per (model, cluster)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    panels = sorted({(row.model, cluster_family(row)) for row in rows})
    backends = _backends_in(rows)
    columns = min(3, len(panels))
    lines = math.ceil(len(panels) / columns)
    figure, axes = plt.subplots(lines, columns, figsize=(4.5 * columns, 3.2 * lines),
                                squeeze=False)
    for axis, (model, cluster) in zip(axes.flat, panels):
        _plot_panel(axis, [r for r in rows if (r.model, cluster_family(r)) == (model, cluster)],
                    backends)
        axis.set_title(f"{model}\n{cluster}" if len({c for _, c in panels}) > 1 else model,
                       fontsize=9)
        axis.set_ylabel(f"throughput / {normaliser}", fontsize=8)
    for axis in list(axes.flat)[len(panels):]:
        axis.set_visible(False)
    handles = [Patch(color=f"C{index}", label=backend) for index, backend in enumerate(backends)]
    figure.legend(handles=handles, loc="upper center", ncol=len(backends), fontsize=8,
                  title=legend(normaliser), title_fontsize=8)
    figure.tight_layout(rect=(0, 0, 1, 0.93))
    image = BytesIO()  # drawn in memory, written through the safe writer
    figure.savefig(image, dpi=120, format="png")
    plt.close(figure)
    write_output(png_path, image.getvalue())


def _plot_panel(axis, rows: Sequence[Row], backends: Sequence[str]) -> None:
    counts = sorted({row.num_devices for row in rows})
    width = 0.8 / max(1, len(backends))
    cell = {(row.num_devices, row.backend): row for row in rows}
    for index, backend in enumerate(backends):
        offsets = [position + (index - (len(backends) - 1) / 2) * width
                   for position in range(len(counts))]
        texts = [cell_text(cell.get((n, backend))) for n in counts]
        bars = [(x, cell[(n, backend)].ratio) for x, n, text in zip(offsets, counts, texts)
                if text not in (MISSING, NO_REFERENCE, ERROR_MARK)]
        axis.bar([x for x, _ in bars], [h for _, h in bars], width, label=backend,
                 color=f"C{index}")
        for offset, text in zip(offsets, texts):
            if text in (MISSING, NO_REFERENCE, ERROR_MARK):  # a mark, never a zero bar
                axis.annotate(text, (offset, 0), ha="center", va="bottom", fontsize=7,
                              color=f"C{index}")
    axis.set_xlim(-0.5, len(counts) - 0.5)
    axis.set_ylim(bottom=0, top=max(1.0, axis.get_ylim()[1]))
    axis.set_xticks(range(len(counts)), [str(n) for n in counts], fontsize=8)
    axis.set_xlabel("devices", fontsize=8)


def render_reports(csv_path: Path, out_dir: Path, normaliser: str,
                   scope: str = "model") -> list[Path]:
    """compare.md, compare.tex and compare.png from a stored compare.csv.

    Ratios are derived data: they are recomputed from the stored throughputs
    with ``normaliser`` and ``scope`` and written back to the CSV.
    """
    rows = read_csv(csv_path)
    if normaliser not in _backends_in(rows):
        raise NestCpError(f"{csv_path}: backend: expected the normaliser {normaliser!r} among "
                          f"the stored backends {', '.join(_backends_in(rows))}")
    rows = normalise(rows, normaliser, scope)
    written = [out_dir / name for name in OUTPUTS[1:]]
    check_outputs(out_dir, OUTPUTS[1:])
    check_output(csv_path)  # rewritten with the new ratios
    write_csv(rows, csv_path)
    write_output(written[0], render_markdown(rows, normaliser))
    write_output(written[1], render_latex(rows, normaliser))
    plot_rows(rows, written[2], normaliser)
    return written


def check_outputs(out_dir: Path, names: Sequence[str] = OUTPUTS,
                  inputs: Sequence[str | Path] = ()) -> None:
    """Make ``out_dir`` and check that ``names`` may be written in it (:func:`check_output`)
    and that none of them is one of the command's ``inputs``: NestCpError naming the path
    otherwise, before any solve."""
    refuse_inputs_as_outputs((out_dir / name for name in names), inputs)
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise NestCpError(f"{out_dir}: expected a directory for the outputs "
                          f"({exc.strerror or exc})") from None
    for name in names:
        check_output(out_dir / name)


# ------------------------------------------------------------------ command


def _finite(ctx: click.Context, param: click.Parameter, value: float) -> float:
    if not math.isfinite(value):
        raise click.BadParameter(f"expected a finite number of seconds > 0, got {value}")
    return value


@click.command("compare", cls=GuardedCommand)
@click.argument("instances", nargs=-1, type=click.Path(exists=True))
@click.option("--backends", default=",".join(DEFAULT_BACKENDS), show_default=True,
              help="Comma-separated backends to run.")
@click.option("--normalize", "normaliser", default="manual", show_default=True,
              help="Backend whose throughput is 1.0.")
@click.option("--scope", type=click.Choice(["model", "instance"]), default="model",
              show_default=True, help="Normalise per model (smallest device count) or per "
              "instance.")
@click.option("--out", "out_dir", type=click.Path(file_okay=False), default="compare-out",
              show_default=True, help="Directory for compare.{csv,md,tex,png}.")
@click.option("--budget", type=click.IntRange(min=1), default=2000, show_default=True,
              help="MCMC proposals per instance.")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--time-limit", "time_limit_s", type=click.FloatRange(min=0, min_open=True),
              callback=_finite, default=60.0, show_default=True,
              help="Seconds per backend and instance.")
@click.option("--from-csv", "from_csv", type=click.Path(exists=True, dir_okay=False),
              default=None, help="Only regenerate the tables and plot from a stored CSV.")
@click.option("--jobs", type=click.IntRange(min=1), default=1, show_default=True,
              help="Solves at once (local processes, or local Ray CPUs); 1 keeps solve "
                   "times free of interference.")
@executor_options
@click.option("--progress/--no-progress", default=True,
              help="Progress bar on stderr (drawn only on a terminal).")
def compare_command(instances: tuple[str, ...], backends: str, normaliser: str, scope: str,
                    out_dir: str, budget: int, seed: int, time_limit_s: float,
                    from_csv: str | None, jobs: int, executor_kind: str, address: str | None,
                    progress: bool) -> None:
    """Compare backends' throughput on INSTANCES (files or directories).

    Writes compare.{csv,md,tex,png} into --out (default ./compare-out; the folder is named
    on stderr before anything is solved).  Exits 1 when some backend crashed or made a
    plan the referee rejected (ERR).
    """
    out = Path(out_dir)
    names = [name.strip() for name in backends.split(",") if name.strip()]
    if address is not None and executor_kind != ExecutorKind.RAY.value:
        raise click.UsageError("--address needs --executor ray")
    if from_csv is None:
        if not instances:
            raise click.UsageError("expected at least one instance (or --from-csv)")
        unknown = [name for name in names if name not in BACKENDS]
        if unknown or not names:
            raise click.BadParameter(
                f"expected backends among {', '.join(BACKENDS)}, got {backends!r}",
                param_hint="--backends")
        if normaliser not in names:
            raise click.BadParameter(
                f"expected one of the backends run ({', '.join(names)}), got {normaliser!r}",
                param_hint="--normalize")
        check_outputs(out, inputs=instance_paths(instances))
        options = SolveOptions(time_limit_s=time_limit_s, seed=seed, workers=1,
                               extra={"budget": budget})
        with make_executor(executor_kind, jobs, address) as executor:
            csv_path = _solve_to_csv(instances, names, normaliser, scope, out, options,
                                     executor, progress)
    else:
        csv_path = Path(from_csv)
    written = render_reports(csv_path, out, normaliser, scope)
    rows = read_csv(csv_path)
    errors = [row for row in rows if row.status == ERROR]
    for path in ([] if from_csv else [csv_path]) + list(written):
        click.echo(f"wrote {path}")
    click.echo((out / "compare.md").read_text(encoding="utf-8"), nl=False)
    for row in errors:
        click.echo(f"{ERROR_MARK} {row.instance} {row.backend}: {row.message}", err=True)
    for instance, message in _proven_without_plan(rows):
        click.echo(f"{instance}: {message}", err=True)
    sys.exit(ExitCode.NO_PLAN if errors else ExitCode.OK)


def _proven_without_plan(rows: Sequence[Row]) -> list[tuple[str, str]]:
    """(instance, the first backend's reason) for every instance all of whose backends proved
    it has no plan (all INFEASIBLE), e.g. a model its launcher does not build."""
    by_instance: dict[str, list[Row]] = {}
    for row in rows:
        by_instance.setdefault(row.instance, []).append(row)
    return [(instance, group[0].message) for instance, group in by_instance.items()
            if all(row.status == Status.INFEASIBLE.value for row in group)
            and group[0].message]


def _say_where(out: Path, default: bool) -> None:
    """One line on stderr naming the folder the results go to (before any solve); when it
    is the default folder, how to choose another."""
    click.echo(f"compare: writing compare.csv, .md, .tex and .png into {out.resolve()}/"
               + (" (choose with --out)" if default else ""), err=True)


def _solve_to_csv(instances: Sequence[str], backends: Sequence[str], normaliser: str,
                  scope: str, out: Path, options: SolveOptions, executor: Executor,
                  progress: bool) -> Path:
    """Run the comparison and store it as ``out/compare.csv``."""
    source = click.get_current_context(silent=True)
    default = source is None or source.get_parameter_source("out_dir") is not \
        click.core.ParameterSource.COMMANDLINE
    rows = normalise(run_comparison(instances, backends, options, executor, progress,
                                    loaded=lambda: _say_where(out, default)),
                     normaliser, scope)
    write_csv(rows, out / "compare.csv")
    return out / "compare.csv"
