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
from nest_cp.cli.report import plan_report, summary_lines
from nest_cp.model.documents import check_output, write_output
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
@click.option("--script", "script_path", type=click.Path(dir_okay=False), default=None,
              help="torchtitan: also write the launch script (one torchrun per node rank) "
                   "here.")
@click.option("--hostfile", "hostfile_path", type=click.Path(dir_okay=False), default=None,
              help="DeepSpeed: also write the launcher's hostfile here (its --include filter "
                   "is in the config's warnings and --json).")
@click.option("--json", "as_json", is_flag=True,
              help="Print everything as JSON: arguments or config, warnings, rank map.")
def export_command(plan_path: str, instance_path: str, fmt: str, output: str | None,
                   gpus_per_node: int | None, rank_map_path: str | None,
                   script_path: str | None, hostfile_path: str | None,
                   as_json: bool) -> None:
    """Export PLAN as Megatron-LM arguments, a torchtitan TOML or a DeepSpeed JSON.

    Whatever the target cannot express is a warning on stderr (and in --json's
    "warnings"), never dropped; a plan the target cannot run at all (DeepSpeed: ZeRO-2/3
    or AutoTP beside a pipeline) is refused with exit 2.  Files are written before
    anything is printed.
    """
    if script_path is not None and fmt != ExportFormat.TORCHTITAN.value:
        raise click.BadParameter("expected --format torchtitan (the other formats' launch "
                                 "scripts are their output)", param_hint="--script")
    if hostfile_path is not None and fmt != ExportFormat.DEEPSPEED.value:
        raise click.BadParameter("expected --format deepspeed", param_hint="--hostfile")
    check_writable(output, rank_map_path, script_path, hostfile_path)
    inst = io.load_instance(instance_path)
    result = export_plan(inst, io.load_plan(plan_path), fmt, gpus_per_node, plan_path)
    outputs = ((output, result.text),
               (rank_map_path, "\n".join(launch_table(result.rank_map, comment="#")) + "\n"),
               (script_path, result.files.get("launch_script")),
               (hostfile_path, result.files.get("hostfile")))
    for path, text in outputs:
        if path is not None:
            write_output(path, text)
    if fmt == ExportFormat.DEEPSPEED.value and not as_json:
        click.echo(f"note: deepspeed --hostfile HOSTFILE --include "
                   f"{result.files['include']} TRAINING_SCRIPT ... --deepspeed_config "
                   f"{output or 'CONFIG.json'}", err=True)
    if as_json:
        click.echo(json.dumps(result.as_dict(), indent=1))
    elif output is None:
        click.echo(result.text, nl=False)
    else:
        click.echo("wrote " + ", ".join(path for path, _ in outputs if path is not None))
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
        if FsPath(png).suffix.lower() != ".png" and not check_output(png)[1]:
            raise click.BadParameter(f"expected a file name ending in .png, got {png!r}",
                                     param_hint="--png")
        check_writable(png)
    inst = io.load_instance(instance_path)
    evaluation = checked_evaluation(inst, io.load_plan(plan_path), plan_path)
    if png is not None:  # written before anything is printed
        from nest_cp.cli.show import draw_plan

        draw_plan(inst, evaluation, png)
    click.echo("\n".join(summary_lines(inst, evaluation)))
    click.echo(plan_report(inst, evaluation))
    if png is not None:
        click.echo(f"wrote {png}")
    if not evaluation.feasible:
        click.echo(f"INFEASIBLE: {evaluation.violations[0]}", err=True)
    sys.exit(ExitCode.OK if evaluation.feasible else ExitCode.NO_PLAN)
