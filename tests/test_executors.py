"""Executors (local processes, Ray) and the progress reporter the sweeps share."""

import io as textio
import logging
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from nest_cp.cli import main
from nest_cp.harness.executors import LocalExecutor, make_executor, run_ordered
from nest_cp.model.errors import BackendOptionError
from nest_cp.model.progress import Progress

SMALL = Path(__file__).parent.parent / "instances" / "small"
FOUR = [SMALL / name for name in ("worked_example.json", "h2-dense-l3-d4.json",
                                  "moe-l3-d4-ep2.json", "tight-l3-d4-recompute.json")]


@pytest.mark.parametrize("jobs", [1, 2])
def test_local_executor_returns_results_in_task_order(jobs):
    """Inline and pooled runs give every task's value, in task order, errors as values."""
    seen = []
    with LocalExecutor(jobs) as executor:
        done = run_ordered(executor, int, ["1", "x", "3"], lambda d: seen.append(d.index))
    assert [d.index for d in done] == [0, 1, 2] and sorted(seen) == [0, 1, 2]
    assert done[0].value == 1 and done[2].value == 3
    assert isinstance(done[1].error, ValueError) and done[1].value is None


def test_address_needs_ray():
    """--address goes with the Ray executor only: bad option, in the API and the CLI."""
    with pytest.raises(BackendOptionError):
        make_executor("local", 1, address="auto")
    result = CliRunner().invoke(main, ["verify", str(FOUR[0]), "--out", "x", "--address",
                                       "auto", "--no-progress"])
    assert result.exit_code == 2 and "--executor ray" in result.output


def test_ray_executor_without_ray_is_bad_input(monkeypatch):
    """Choosing Ray when it cannot be imported is exit 2 naming the extra to install."""
    monkeypatch.setitem(sys.modules, "ray", None)
    with pytest.raises(BackendOptionError, match=r"nest-cp\[ray\]"):
        make_executor("ray", 1)
    result = CliRunner().invoke(main, ["compare", str(FOUR[0]), "--backends", "manual",
                                       "--out", "x", "--executor", "ray"])
    assert result.exit_code == 2 and "nest-cp[ray]" in result.output


class _Terminal(textio.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_draws_a_bar_on_a_terminal():
    """On a terminal the bar shows the label, the count and the status text."""
    screen = _Terminal()
    with Progress("solve", 3, stream=screen) as progress:
        for step in range(3):
            progress.advance(status=f"best {10 - step} ticks")
    assert "solve" in screen.getvalue() and "3/3" in screen.getvalue()
    assert "best 8 ticks" in screen.getvalue()


def test_progress_is_silent_when_piped(capsys):
    """With stderr not a terminal and no -v, a reporter writes nothing anywhere."""
    with Progress("solve", 2) as progress:
        progress.advance(2, status="done")
    assert not progress.active
    assert capsys.readouterr() == ("", "")


def test_progress_logs_lines_under_verbose(caplog):
    """With INFO logging (-v) the reporter logs lines instead of drawing a bar."""
    logger = logging.getLogger("nest_cp.test_progress")
    with caplog.at_level(logging.INFO, logger=logger.name):
        with Progress("mcmc", 4, logger=logger, log_every_s=0.0) as progress:
            assert progress.active
            for _ in range(4):
                progress.advance(status="best 7 ticks")
    messages = [record.getMessage() for record in caplog.records]
    assert "mcmc: 4/4, best 7 ticks" in messages and len(messages) >= 4


def test_mcmc_reports_progress_under_verbose(caplog):
    """The MCMC baseline advances one step per proposal and logs its best objective."""
    from nest_cp import io
    from nest_cp.model.result import SolveOptions
    from nest_cp.solvers.registry import solve

    instance = io.load_instance(FOUR[0])
    with caplog.at_level(logging.INFO, logger="nest_cp.solvers.baselines.mcmc"):
        solve(instance, "mcmc", SolveOptions(extra={"budget": 40, "chains": 2}))
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("mcmc: ")]
    assert lines and lines[-1].startswith("mcmc: 40/40, best ")


def test_exact_search_reports_best_and_bound_under_verbose(caplog):
    """CP-SAT's sub-problem sweep logs the incumbent and the proven bound as it goes."""
    from nest_cp import io
    from nest_cp.model.result import SolveOptions
    from nest_cp.solvers.registry import solve

    instance = io.load_instance(FOUR[1])
    with caplog.at_level(logging.INFO, logger="nest_cp.solvers.exact.driver"):
        result = solve(instance, "cpsat", SolveOptions(time_limit_s=20))
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("cpsat pass 1")]
    assert lines and f"best {result.objective_ticks}, bound {result.objective_ticks}" in \
        lines[-1]
