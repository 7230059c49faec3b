"""``nest-cp export`` and ``nest-cp show``: a solved plan handed to a launcher or drawn."""

from __future__ import annotations

import json
import sys
from pathlib import Path as FsPath

import click

from nest_cp import io
from nest_cp.cli.export import ExportFormat, export_plan, launch_table
from nest_cp.cli.export.view import checked_evaluation
from nest_cp.cli.options import check_writable
from nest_cp.cli.report import plan_report
from nest_cp.model.exits import ExitCode


@click.command("export")
@click.argument("plan_path", metavar="PLAN", type=click.Path(dir_okay=False))
@click.option("--instance", "instance_path", required=True, type=click.Path(dir_okay=False),
              help="The instance the plan was made for.")
@click.option("--format", "fmt", required=True,
              type=click.Choice([f.value for f in ExportFormat]),
              help="Target launcher.")
@click.option("-o", "--output", type=click.Path(dir_okay=False),
              help="Write the launcher file here instead of stdout.")
@click.option("--gpus-per-node", type=click.IntRange(min=1), default=None,
              help="GPUs of one host (default: the innermost tier's size; required on a "
                   "graph network).")
@click.option("--rank-map", "rank_map_path", type=click.Path(dir_okay=False), default=None,
              help="Also write the launch table (node rank, host, CUDA_VISIBLE_DEVICES, "
                   "global ranks) here.")
@click.option("--json", "as_json", is_flag=True,
              help="Print everything as JSON: arguments or config, warnings, rank map.")
def export_command(plan_path: str, instance_path: str, fmt: str, output: str | None,
                   gpus_per_node: int | None, rank_map_path: str | None,
                   as_json: bool) -> None:
    """Export PLAN as Megatron-LM arguments, a torchtitan TOML or a DeepSpeed JSON.

    Whatever the target cannot express is a warning on stderr (and in --json's
    "warnings"), never dropped.
    """
    for path in (output, rank_map_path):
        if path is not None:
            check_writable(path)
    inst = io.load_instance(instance_path)
    result = export_plan(inst, io.load_plan(plan_path), fmt, gpus_per_node, plan_path)
    if output is not None:
        FsPath(output).write_text(result.text, encoding="utf-8")
    if rank_map_path is not None:
        FsPath(rank_map_path).write_text(
            "\n".join(launch_table(result.rank_map, comment="#")) + "\n", encoding="utf-8")
    if as_json:
        click.echo(json.dumps(result.as_dict(), indent=1))
    elif output is None:
        click.echo(result.text, nl=False)
    else:
        click.echo(f"wrote {output}")
    for warning in result.warnings:
        click.echo(f"warning: {warning}", err=True)


@click.command("show")
@click.argument("plan_path", metavar="PLAN", type=click.Path(dir_okay=False))
@click.option("--instance", "instance_path", required=True, type=click.Path(dir_okay=False),
              help="The instance the plan was made for.")
@click.option("--png", type=click.Path(dir_okay=False), default=None,
              help="Draw the placement and the per-stage time and memory to this PNG.")
def show_command(plan_path: str, instance_path: str, png: str | None) -> None:
    """Print PLAN's placement map and stage table; draw them with --png."""
    if png is not None:
        check_writable(png)
    inst = io.load_instance(instance_path)
    evaluation = checked_evaluation(inst, io.load_plan(plan_path), plan_path)
    click.echo(plan_report(inst, evaluation))
    if png is not None:
        from nest_cp.cli.show import draw_plan

        draw_plan(inst, evaluation, png)
        click.echo(f"wrote {png}")
    if not evaluation.feasible:
        click.echo(f"INFEASIBLE: {evaluation.violations[0]}", err=True)
    sys.exit(ExitCode.OK if evaluation.feasible else ExitCode.NO_PLAN)
