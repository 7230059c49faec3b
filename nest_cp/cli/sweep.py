"""``nest-cp sweep``: what network a model needs, with a certified interval per point.

Exit codes (:mod:`nest_cp.model.exits`): 0 when every point was planned and certified
without contradiction (a point where nothing fits is an answer); 1 when some point failed
(a crashed backend, a plan the referee rejects, a bound above a plan) or no point has a
plan; 2 for a bad sweep or option, as one line on stderr before anything is solved.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

import click

from nest_cp.harness import sweep, sweep_report
from nest_cp.harness.compare import check_outputs
from nest_cp.harness.executors import ExecutorKind, executor_options, make_executor
from nest_cp.io.readers import load_instance
from nest_cp.model.errors import NestCpError
from nest_cp.model.exits import ExitCode, GuardedCommand
from nest_cp.verify.cache import DEFAULT_CACHE_DIR
from nest_cp.verify.cli import (
    CERTIFY_WALL_CAP_FACTOR,
    DEFAULT_WALL_CAP_S,
    DEFAULT_WORK_LIMIT,
    parse_work_limit,
)

VARY_HELP = (
    "PARAM=VALUES; at most twice (the grid is the product). PARAM: "
    "<tier>.bandwidth_Bps, <tier>.latency_s, <tier>.efficiency or <tier>.size of a "
    "hierarchical network (tier 0's size is the devices per node), devices, hbm_bytes; on a "
    "graph network links.bandwidth_Bps, links.latency_s, links.efficiency (every link). "
    "VALUES: numbers (12.5e9,25e9,50e9), multipliers of the instance's own value "
    "(0.25x,0.5x,1x,2x; on links each link's own), START:STOP:STEP (arithmetic, STOP "
    "included when reached) or START:STOP*FACTOR (geometric: 0.25x:4x*2 is "
    "0.25x,0.5x,1x,2x,4x); all numbers or all multipliers.")


def _finite(ctx: click.Context, param: click.Parameter, value: float | None) -> float | None:
    if value is not None and not math.isfinite(value):
        raise click.BadParameter(f"expected a finite number, got {value}")
    return value


@click.command("sweep", cls=GuardedCommand)
@click.argument("instance_path", metavar="INSTANCE", type=click.Path(dir_okay=False))
@click.option("--vary", "vary", multiple=True, metavar="PARAM=VALUES", help=VARY_HELP)
@click.option("--out", "out_dir", type=click.Path(file_okay=False, path_type=Path),
              required=True,
              help="Directory for sweep.{json,csv,md,tex,png} and each point's instance "
                   "(instances/).")
@click.option("--work-limit", "work_limit_text", default=None, metavar="UNITS|off",
              help=f"Deterministic work units per point for its certificate (CP-SAT's "
                   f"deterministic time; default {DEFAULT_WORK_LIMIT:g}), so the sweep is the "
                   f"same on an idle or a loaded machine; off: the time limit decides.")
@click.option("--time-limit", "time_limit_s", type=click.FloatRange(min=0, min_open=True),
              callback=_finite, default=None,
              help=f"Seconds per point for its certificate (the DP's plan included at scale): "
                   f"a wall-clock cap under a work limit (default max("
                   f"{DEFAULT_WALL_CAP_S:g}, {CERTIFY_WALL_CAP_FACTOR:g} x work units)), the "
                   f"limit itself with --work-limit off (default "
                   f"{sweep.DEFAULT_TIME_LIMIT_S:g}).")
@click.option("--certify", type=click.Choice([c.value for c in sweep.Certifier]),
              default=sweep.Certifier.AUTO.value, show_default=True,
              help=f"exact: CP-SAT over the full space (one worker); full: the full-space "
                   f"certificate of verify --certify-full; auto: exact up to "
                   f"{sweep.EXACT_MAX_DEVICES} devices, full above.")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--price", "prices", multiple=True, metavar="TIER=COST",
              help="Cost per GB/s of the tier's per-device bandwidth, for every device "
                   "(links=COST on a graph: per GB/s of every link); repeat per tier. Prices "
                   "add a cost column and mark the Pareto front of cost against throughput.")
@click.option("--device-price", type=click.FloatRange(min=0), callback=_finite, default=None,
              help="Cost of one device (a cost column, as --price).")
@click.option("--jobs", type=click.IntRange(min=1), default=1, show_default=True,
              help="Points solved at once (local processes, or local Ray CPUs).")
@executor_options
@click.option("--no-cache", is_flag=True, help="Solve every point again (the cache is "
                                               "refreshed).")
@click.option("--cache-dir", type=click.Path(file_okay=False, path_type=Path),
              default=DEFAULT_CACHE_DIR, show_default=True)
@click.option("--progress/--no-progress", default=True,
              help="Progress bar on stderr (drawn only on a terminal).")
def sweep_command(instance_path: str, vary: tuple[str, ...], out_dir: Path,
                  work_limit_text: str | None, time_limit_s: float | None, certify: str,
                  seed: int, prices: tuple[str, ...],
                  device_price: float | None, jobs: int, executor_kind: str,
                  address: str | None, no_cache: bool, cache_dir: Path,
                  progress: bool) -> None:
    """Plan and certify INSTANCE at every point of a grid of network or cluster parameters.

    Per point: the DP's plan (t/e/p/d/z/b/v), its iteration time, throughput and MFU, and
    the certified interval [bound, best] of the optimum over the full space, with its
    status (OPTIMAL, FEASIBLE at the time limit, open, INFEASIBLE).  A tier's bandwidth
    is per device (docs/cost-model.md §5 a), so NICs per node are the outer tier's
    bandwidth: n NICs of B B/s on nodes of G devices is n·B/G (8 to 4 NICs: 0.5x); an
    oversubscription of k:1 divides the tier's bandwidth by k (2:1 is 0.5x).  Points
    solved before are read from the cache, so a repeated sweep solves nothing.
    """
    if not vary or len(vary) > sweep.MAX_AXES:
        raise NestCpError(f"--vary: expected one to {sweep.MAX_AXES} PARAM=VALUES, got "
                          f"{len(vary)}")
    if address is not None and executor_kind != ExecutorKind.RAY.value:
        raise click.UsageError("--address needs --executor ray")
    work_limit = parse_work_limit(work_limit_text)
    if time_limit_s is None:
        time_limit_s = sweep.DEFAULT_TIME_LIMIT_S if work_limit is None else max(
            DEFAULT_WALL_CAP_S, CERTIFY_WALL_CAP_FACTOR * work_limit)
    instance = load_instance(instance_path)
    axes = [sweep.parse_axis(text, instance) for text in vary]
    names = [axis.parameter.name for axis in axes]
    if len(set(names)) != len(names):
        raise NestCpError(f"--vary {names[0]}: expected two different parameters, got it twice")
    price_table = sweep.parse_prices(prices, instance.cluster)
    points = sweep.build_points(instance, axes)
    check_outputs(out_dir, sweep.OUTPUTS, inputs=(instance_path,))
    options = sweep.SweepOptions(time_limit_s=time_limit_s, work_limit=work_limit, seed=seed,
                                 certify=sweep.Certifier(certify), cache_dir=cache_dir,
                                 use_cache=not no_cache)
    with make_executor(executor_kind, jobs, address) as executor:
        paths = sweep.write_points(points, out_dir)
        document = sweep.run_sweep(Path(instance_path), axes, points, paths, options, executor,
                                   progress, price_table, device_price)
    written = sweep_report.write_outputs(document, out_dir)
    click.echo(sweep_report.render_markdown(document), nl=False)
    click.echo(sweep_report.summary(document))
    click.echo(f"wrote {', '.join(str(path) for path in written)}")
    records = document["points"]
    failed = [r for r in records if r["failures"]]
    for record in failed:
        for failure in record["failures"]:
            click.echo(f"FAIL {record['point']}: {failure}", err=True)
    planned = any(r["best_ticks"] is not None for r in records)
    sys.exit(ExitCode.NO_PLAN if failed or not planned else ExitCode.OK)
