"""``nest-cp calibrate``: fit a device's few physical parameters to measured runs."""

from __future__ import annotations

import sys
from dataclasses import replace

import click

from nest_cp.cli.options import check_writable
from nest_cp.model.exits import ExitCode


@click.command("calibrate")
@click.argument("measurements", type=click.Path(dir_okay=False))
@click.option("--device", default="a100-80gb", show_default=True,
              help="Device to calibrate (preset or device file); a calibrated preset is "
                   "refitted from its microbenchmark base.")
@click.option("--network", default="dgx-a100", show_default=True,
              help="Preset network the runs ran on.")
@click.option("--precision", type=click.Choice(["fp16", "bf16"]), default="fp16",
              show_default=True,
              help="Megatron mixed precision: fp16 all-reduces fp16 gradients, bf16 fp32 ones.")
@click.option("--train-shapes", required=True,
              help="Model shapes (HIDDENxLAYERS, comma-separated) to fit on; the report is "
                   "on the others.")
@click.option("--max-iterations", type=click.IntRange(1, 100), default=10, show_default=True,
              help="Levenberg-Marquardt iterations.")
@click.option("--name", default=None, help="Name of the calibrated device (default DEVICE-cal).")
@click.option("-o", "--output", default=None, type=click.Path(dir_okay=False),
              help="Device file to write (.json or .yaml); without it nothing is written.")
@click.option("--accept-weak-fit", is_flag=True,
              help="Write (and exit 0) even with a parameter at its bound or a standard error "
                   "over 50%.")
def calibrate_command(measurements: str, device: str, network: str, precision: str,
                      train_shapes: str, max_iterations: int, name: str | None,
                      output: str | None, accept_weak_fit: bool) -> None:
    """Fit DEVICE's kernel efficiencies and fixed time per kernel to MEASUREMENTS.csv.

    The split is by model shape: the fit sees --train-shapes only, and the held-out table
    (per shape, GPU count and global batch: mean and worst error, Spearman rank
    correlation, regret of the predicted-best configuration, uncalibrated / calibrated) is
    on the other shapes. Exit 1 when a fitted parameter sits at its bound or has a relative
    standard error over 50% (nothing written unless --accept-weak-fit), or when the rows
    constrain no parameter.
    """

    from nest_cp.harness import calibrate as cal
    from nest_cp.profiles.devicefile import save_device
    from nest_cp.profiles.presets import (
        MEGATRON_ADAM,
        MEGATRON_FP16_ADAM,
        NETWORKS,
        microbenchmark_base,
        resolve_device,
    )

    if network not in NETWORKS:
        raise click.BadParameter(f"expected one of {', '.join(NETWORKS)}, got {network!r}",
                                 param_hint="--network")
    check_writable(output, inputs=(measurements, device))  # before the fit and its report
    shapes = [part.strip() for part in train_shapes.split(",") if part.strip()]
    rows = cal.on_network(cal.read_measurements(measurements), network)
    train, test = cal.split_by_shape(rows, shapes)
    base = microbenchmark_base(resolve_device(device))
    optimizer = MEGATRON_FP16_ADAM if precision == "fp16" else MEGATRON_ADAM
    result = cal.calibrate(train, base, optimizer, max_iterations=max_iterations)
    click.echo(cal.fit_report(result))
    test_shapes = sorted({m.shape for m in test})
    if test:
        before = cal.predicted_times(test, base, optimizer)
        after = cal.predicted_times(test, result.device, optimizer)
        click.echo(f"held out: shapes {', '.join(test_shapes)}")
        click.echo(cal.held_out_report(cal.group_scores(test, before),
                                       cal.group_scores(test, after), test, before, after))
    if not result.fitted:
        click.echo("refused: these rows constrain no parameter; nothing written", err=True)
        sys.exit(ExitCode.NO_PLAN)
    weak = cal.weaknesses(result)
    if weak and not accept_weak_fit:
        click.echo(f"refused: {'; '.join(weak)}; nothing written (--accept-weak-fit to write "
                   f"it anyway)", err=True)
        sys.exit(ExitCode.NO_PLAN)
    if output is not None:
        fitted = replace(result.device, name=name or f"{base.name}-cal")
        save_device(fitted, output, result.calibration_record(measurements, test_shapes))
        click.echo(f"wrote {output}")
