"""What the command modules share: option parsing, output checks and number formats."""

from __future__ import annotations

import os
import time
from pathlib import Path as FsPath

import click

from nest_cp.model.documents import check_output, refuse_inputs_as_outputs
from nest_cp.model.errors import BackendOptionError

# key of the click context object: when the nest-cp process started (time.monotonic clock)
# (set by the console script, not by an in-process caller such as CliRunner)
PROCESS_STARTED = "nest_cp.process_started"


def process_started() -> float:
    """When this process started, on the :func:`time.monotonic` clock (Linux: from
    /proc/self/stat, so the interpreter's start and nest-cp's imports are counted);
    elsewhere, now."""
    try:
        with open("/proc/self/stat", encoding="ascii") as handle:
            fields = handle.read().rsplit(")", 1)[1].split()
        since_boot_s = int(fields[19]) / os.sysconf("SC_CLK_TCK")  # field 22, starttime
        running_s = time.clock_gettime(time.CLOCK_BOOTTIME) - since_boot_s
    except (OSError, ValueError, IndexError, AttributeError):
        return time.monotonic()
    now = time.monotonic()
    return now - running_s if 0 <= running_s < now else now


def int_list(ctx: click.Context, param: click.Parameter, value: str | None) -> tuple[int, ...]:
    if value is None:
        return ()
    try:
        sizes = tuple(int(part) for part in value.split(",") if part.strip())
    except ValueError:
        raise click.BadParameter(f"expected comma-separated integers, got {value!r}") from None
    if not sizes or min(sizes) < 1:
        raise click.BadParameter(f"expected positive integers, got {value!r}")
    return sizes


def reject_options(names: tuple[str, ...], context: str, flag: str | None = None) -> None:
    """UsageError when any of ``names`` was given on the command line (it would be ignored)."""
    ctx = click.get_current_context()
    given = [flag or f"--{name.removesuffix('_degree').replace('_', '-')}" for name in names
             if ctx.get_parameter_source(name) is click.core.ParameterSource.COMMANDLINE]
    if given:
        raise click.UsageError(f"{', '.join(given)} cannot be used {context}")


def check_writable(*outputs: str | None, inputs: tuple[str | None, ...] = ()) -> None:
    """Fail before a long solve, not after it, when an output could not be written.

    Each path must be one nest-cp may write (:func:`nest_cp.model.documents.check_output`:
    never a directory, a device other than /dev/null, /dev/full or a terminal, or a symlink
    to one), two outputs of one command must be different files, and no output may be one
    of the command's ``inputs`` (:func:`nest_cp.model.documents.refuse_inputs_as_outputs`).
    """
    refuse_inputs_as_outputs(outputs, inputs)
    seen: dict[FsPath, str] = {}
    for output in outputs:
        if output is None:
            continue
        target, in_place = check_output(output)
        if not in_place and target in seen:
            raise BackendOptionError(f"{output}: expected different files for the outputs, got "
                                     f"the same file as {seen[target]}")
        seen[target] = output


def tflops(mfu: float | None, peak_flops_per_s: float | None) -> str:
    """Model TF/s per GPU (MFU x peak), or n/a where either is unknown."""
    if mfu is None or peak_flops_per_s is None:
        return "n/a"
    return f"{mfu * peak_flops_per_s / 1e12:.1f}"


def percent(value: float | None) -> str:
    """A utilisation as a percentage, or n/a where FLOPs or the device peak are unknown."""
    return "n/a" if value is None else f"{100 * value:.1f}%"


def rate(value: float | None, digits: int) -> str:
    """A throughput, or n/a for a zero-time iteration (a profile with no costs)."""
    return "n/a" if value is None else f"{value:.{digits}f}"
