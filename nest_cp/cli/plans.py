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
              help="DeepSpeed: write the launcher's hostfile (nodeK slots=N) here; default: "
                   "beside -o, with the suffix .hostfile.  When some host's GPUs are not "
                   "0..N-1, the --include filter goes to HOSTFILE.include.")
@click.option("--json", "as_json", is_flag=True,
              help="Print everything as JSON: arguments or config, warnings, rank map.")
def export_command(plan_path: str, instance_path: str, fmt: str, output: str | None,
                   gpus_per_node: int | None, rank_map_path: str | None,
                   script_path: str | None, hostfile_path: str | None,
                   as_json: bool) -> None:
    """Export PLAN as Megatron-LM arguments, a torchtitan TOML or a DeepSpeed JSON.

    Each format targets one pinned launcher release (Megatron-Core core_v0.15.3,
    torchtitan v0.2.2, DeepSpeed v0.19.3; named in the file) and carries the priced model
    and precision.  Whatever the target cannot express is a warning on stderr and a
    comment in the file (and in --json's "warnings"), never dropped; a plan the target
    cannot run at all (DeepSpeed: ZeRO-2/3 or AutoTP beside a pipeline, AutoTP with
    ZeRO-3; torchtitan: a model it does not ship, e.g. GPT-3) is refused with exit 2.
    DeepSpeed's hostfile is written beside -o (or to --hostfile).  Files are written
    before anything is printed.
    """
    if script_path is not None and fmt != ExportFormat.TORCHTITAN.value:
        raise click.BadParameter("expected --format torchtitan (the other formats' launch "
                                 "scripts are their output)", param_hint="--script")
    if hostfile_path is not None and fmt != ExportFormat.DEEPSPEED.value:
        raise click.BadParameter("expected --format deepspeed", param_hint="--hostfile")
    if fmt == ExportFormat.DEEPSPEED.value and hostfile_path is None and output is not None \
            and not check_output(output)[1]:  # beside a regular -o file, not /dev/null
        hostfile_path = str(FsPath(output).with_suffix(".hostfile"))
    include_path = None if hostfile_path is None else hostfile_path + ".include"
    check_writable(output, rank_map_path, script_path, hostfile_path, include_path,
                   inputs=(plan_path, instance_path))
    inst = io.load_instance(instance_path)
    result = export_plan(inst, io.load_plan(plan_path), fmt, gpus_per_node, plan_path)
    if "include" not in result.files:
        include_path = None
    outputs = ((output, result.text),
               (rank_map_path, "\n".join(launch_table(result.rank_map, comment="#")) + "\n"),
               (script_path, result.files.get("launch_script")),
               (hostfile_path, result.files.get("hostfile")),
               (include_path, result.files.get("include")))
    for path, text in outputs:
        if path is not None:
            write_output(path, text)
    if fmt == ExportFormat.DEEPSPEED.value and not as_json:
        click.echo(_deepspeed_note(result, output, hostfile_path, include_path), err=True)
    if as_json:
        click.echo(json.dumps(result.as_dict(), indent=1))
    elif output is None:
        click.echo(result.text, nl=False)
    else:
        click.echo("wrote " + ", ".join(path for path, _ in outputs if path is not None))
    for warning in result.warnings:
        click.echo(f"warning: {warning}", err=True)


def _deepspeed_note(result, output: str | None, hostfile: str | None,
                    include: str | None) -> str:
    """One short line: where the hostfile went and the launch it is for."""
    if hostfile is None:
        return ("note: no hostfile written (give -o or --hostfile; it is also in --json's "
                "files)")
    selected = f' --include "$(cat {include})"' if include else ""
    hosts = len(result.files["hostfile"].splitlines())
    return (f"note: wrote hostfile {hostfile} ({hosts} hosts): deepspeed --hostfile "
            f"{hostfile}{selected} TRAINING_SCRIPT --deepspeed_config {output or 'CONFIG'}")


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
        check_writable(png, inputs=(plan_path, instance_path))
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
