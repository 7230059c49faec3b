"""``nest-cp calibrate``: fit a device's kernel efficiencies to measured runs."""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path as FsPath

import click

from nest_cp.model.errors import InstanceFormatError
from nest_cp.model.exits import ExitCode


@click.command("calibrate")
@click.argument("measurements", type=click.Path(dir_okay=False))
@click.option("--base", default=None,
              help="Device to start from (preset or file); default: the rows' device.")
@click.option("--name", default=None, help="Name of the calibrated device (default BASE-cal).")
@click.option("-o", "--output", default=None, type=click.Path(dir_okay=False),
              help="Device file to write (default: BASE-calibrated.json beside the CSV).")
def calibrate_command(measurements: str, base: str | None, name: str | None,
                      output: str | None) -> None:
    """Fit a device's kernel efficiencies to MEASUREMENTS.csv (measured training runs).

    Prints the fit, every row's residual and the parameters the data did not constrain,
    and writes a device file instances can name as their device. Exit 1 when the data
    constrain no parameter (nothing is written).
    """

    from nest_cp.harness import calibrate as cal
    from nest_cp.profiles.devicefile import save_device
    from nest_cp.profiles.presets import MEGATRON_ADAM, NETWORKS, resolve_device

    rows = cal.read_measurements(measurements)
    folder = FsPath(measurements).parent
    if base is None:
        names = {row.device or NETWORKS[row.run.network].default_device
                 for row in rows if row.run.network in NETWORKS}
        if len(names) > 1:
            raise InstanceFormatError(f"expected one device for every row (or --base), got "
                                      f"{', '.join(sorted(names))}", file=measurements,
                                      field="device")
        base = names.pop() if names else None
    for row in rows:
        if row.run.network not in NETWORKS:
            raise InstanceFormatError(f"expected a preset network ({', '.join(NETWORKS)}), got "
                                      f"{row.run.network!r}", file=measurements,
                                      field=f"row {row.row}.network")
    base_device = resolve_device(base, folder)
    result = cal.calibrate(rows, base_device, MEGATRON_ADAM)
    click.echo(cal.report(result))
    if not result.fitted:
        click.echo("no efficiency parameter is constrained by these rows: nothing written")
        sys.exit(ExitCode.NO_PLAN)
    device = replace(result.device, name=name or f"{base_device.name}-cal")
    target = output or str(folder / f"{base_device.name}-calibrated.json")
    save_device(device, target, result.calibration_record(str(measurements)))
    click.echo(f"wrote {target}")
