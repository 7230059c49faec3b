"""The ``nest-cp`` command group: every command module and the harness commands wired in.

One command group per module beside this one (instance, evaluate, solve, plans: export and
show, calibrate); the harness commands (``verify``, ``table``, ``soak`` from
:mod:`nest_cp.verify.cli`, ``compare``) are wired in here and nowhere else.  Exit codes
follow the one contract of :mod:`nest_cp.model.exits`.
"""

from __future__ import annotations

import logging

import click

from nest_cp.cli.calibrate import calibrate_command
from nest_cp.cli.evaluate import evaluate_command
from nest_cp.cli.instance import instance
from nest_cp.cli.plans import export_command, show_command
from nest_cp.cli.solve import solve_command
from nest_cp.harness.compare import compare_command
from nest_cp.model.exits import GuardedGroup
from nest_cp.verify.cli import soak_command, table_command, verify_command


@click.group(cls=GuardedGroup)
@click.version_option(package_name="nest-cp")
@click.option("-v", "--verbose", count=True, help="Log progress (-v) or details (-vv).")
def main(verbose: int) -> None:
    """Plan distributed training: parallelism, memory and placement, certified."""
    level = logging.WARNING if verbose == 0 else logging.INFO if verbose == 1 else logging.DEBUG
    logging.basicConfig(level=level, format="%(levelname)s %(name)s: %(message)s")


for command in (instance, evaluate_command, solve_command, export_command, show_command,
                calibrate_command, verify_command, table_command, compare_command, soak_command):
    main.add_command(command)
