"""Deterministic work limits (issue 30): a search bounded by work units gives the same answer
on an idle and a loaded machine, and one the wall-clock cap ended says so."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from tiers import SLOW

from nest_cp.cli import main as cli
from nest_cp.io.readers import load_instance
from nest_cp.model.errors import BackendOptionError
from nest_cp.model.result import SolveOptions, Space, Status
from nest_cp.solvers.certify.search import certify_full
from nest_cp.solvers.exact.budget import Work
from nest_cp.solvers.registry import solve
from nest_cp.verify import tables
from nest_cp.verify.harness import HarnessOptions, Task, run_tasks

SMALL = Path(__file__).resolve().parent.parent / "instances" / "small"
# the two instances whose MILP rows of `make verify` changed with the machine's load
LOAD_SENSITIVE = ("tight-l8-d16-h3", "sdp-slowtier-l6-d8")
GENEROUS_CAP_S = 600.0  # the wall-clock safety net: never reached in these tests


@contextlib.contextmanager
def busy_machine():
    """A busy loop in a separate process on every core (at most two): real load, which slows
    the solvers' clocks as a monkeypatched clock could not."""
    loops = [subprocess.Popen([sys.executable, "-c", "while True: pass"])
             for _ in range(min(2, os.cpu_count() or 1))]
    try:
        yield
    finally:
        for loop in loops:
            loop.kill()
            loop.wait()


def _answer(name: str, backend: str, work_limit: float):
    result = solve(load_instance(SMALL / f"{name}.json"), backend, SolveOptions(
        space=Space.FULL, time_limit_s=GENEROUS_CAP_S, work_limit=work_limit,
        milp_solver="highs", seed=0, workers=1))
    return result, (result.status, result.objective_ticks, result.bound_ticks, result.message,
                    result.stats)


def test_work_budget_shares_what_is_left():
    """A share is the fraction of the limit, at most what is left; charges are counted; no
    limit shares nothing and never runs out; a limit must be positive and finite."""
    work = Work(10.0)
    assert work.deterministic and work.share(0.1) == pytest.approx(1.0)
    work.charge(9.5)
    assert work.share(0.1) == pytest.approx(0.5) and work.share() == pytest.approx(0.5)
    assert not work.exhausted()
    work.charge(0.6)
    assert work.exhausted() and work.share() == 0.0
    unlimited = Work()
    unlimited.charge(1e9)
    assert unlimited.share(0.1) is None and not unlimited.exhausted()
    for bad in (0.0, -1.0, float("inf"), float("nan")):
        with pytest.raises(ValueError):
            Work(bad)
    with pytest.raises(BackendOptionError):
        SolveOptions(work_limit=0.0)


@pytest.mark.parametrize(("backend", "work_limit"),
                         [("cpsat", 0.1), pytest.param("milp", 1.0, marks=SLOW)])
def test_work_limited_search_is_the_same_under_load(backend, work_limit):
    """A full-space search the work limit stops (not OPTIMAL, 'work limit') returns the same
    status, plan price, bound, message and work on a machine busy on every core."""
    idle, answer = _answer("tight-l8-d16-h3", backend, work_limit)
    assert idle.status in (Status.FEASIBLE, Status.UNKNOWN)
    assert idle.message.startswith("work limit")
    assert idle.stats["work_used"] >= work_limit and not idle.stats["wall_capped"]
    with busy_machine():
        _, loaded = _answer("tight-l8-d16-h3", backend, work_limit)
    assert loaded == answer


def test_wall_cap_that_ends_a_search_is_reported():
    """When the wall-clock cap, not the work, ends a search, stats and message say so."""
    result = solve(load_instance(SMALL / "tight-l8-d16-h3.json"), "milp", SolveOptions(
        space=Space.FULL, time_limit_s=1.0, work_limit=1000.0, milp_solver="highs"))
    assert result.status is not Status.OPTIMAL
    assert result.stats["wall_capped"] is True
    assert "wall-clock cap" in result.message
    assert result.stats["work_used"] < 1000.0


def test_tables_mark_wall_capped_runs():
    """A run the wall-clock cap ended carries a mark in every table format; others do not."""
    capped = {"status": "FEASIBLE", "tolerance_rel": 0.0, "wall_capped": True}
    assert tables._status(capped).endswith(tables.WALL_CAPPED_MARK)
    assert tables._short_status(capped) == "FEAS+"
    plain = {"status": "FEASIBLE", "tolerance_rel": 0.0}
    assert tables._status(plain) == "FEASIBLE" and tables._short_status(plain) == "FEAS"


@pytest.mark.parametrize("value", ["0", "-2", "inf", "nan", "lots"])
def test_verify_rejects_a_bad_work_limit(tmp_path, value):
    """``verify --work-limit`` takes units > 0 or 'off'; anything else is bad input (exit 2)."""
    result = CliRunner().invoke(cli, ["verify", str(SMALL / "worked_example.json"), "--out",
                                      str(tmp_path), "--work-limit", value])
    assert result.exit_code == 2, result.output
    assert "--work-limit" in result.output


def test_verify_records_the_work_limit_in_its_protocol(tmp_path):
    """``verify --work-limit`` writes the limit and the wall cap into the protocol and each
    exact run's work units into results.json; ``off`` keeps the plain time limit."""
    runner = CliRunner()
    args = ["verify", str(SMALL / "worked_example.json"), "--backends", "dp,cpsat",
            "--no-cache", "--jobs", "1", "--no-progress"]
    result = runner.invoke(cli, [*args, "--out", str(tmp_path / "w"), "--work-limit", "2"])
    assert result.exit_code == 0, result.output
    document = json.loads((tmp_path / "w" / "results.json").read_text())
    options = next(iter(document["protocol"]["options"].values()))
    assert options["work_limit"] == 2.0 and "wall_cap_s" in options
    runs = document["instances"][0]["runs"]
    assert all("work_units" in run for run in runs if run["backend"] == "cpsat")
    result = runner.invoke(cli, [*args, "--out", str(tmp_path / "t"), "--work-limit", "off"])
    assert result.exit_code == 0, result.output
    document = json.loads((tmp_path / "t" / "results.json").read_text())
    options = next(iter(document["protocol"]["options"].values()))
    assert "work_limit" not in options and options["time_limit_s"] == 20.0


@SLOW
def test_verify_rows_regenerate_identically_under_load(tmp_path):
    """The verify rows of the two load-sensitive instances (every backend and space, their
    SDP searches included) give byte-identical results.json and gap tables on an idle and
    a busy machine, and the MILP's work limit decides at least one of them."""
    options = HarnessOptions(time_limit_s=GENEROUS_CAP_S, work_limit=5.0,
                             cache_dir=tmp_path / "cache", use_cache=False)
    tasks = [Task(SMALL / f"{name}.json", options) for name in LOAD_SENSITIVE]

    def rendered() -> dict[str, str]:
        records = run_tasks(tasks, jobs=1)
        document = json.loads(json.dumps(tables.results_document(
            records, {"versions": {}, "options": {}, "backends_available": {}})))
        return {"results.json": json.dumps(document, sort_keys=True),
                **{fmt: tables.render(document, fmt) for fmt in tables.FORMATS}}

    idle = rendered()
    with busy_machine():
        loaded = rendered()
    assert loaded == idle
    runs = [run for record in json.loads(idle["results.json"])["instances"]
            for run in record["runs"]]
    assert any(run["backend"] == "milp" and run["status"] == "FEASIBLE" for run in runs)
    assert not any(run.get("wall_capped") for run in runs)


def test_work_limited_certificate_is_the_same_under_load():
    """certify_full under a work limit small enough to leave shapes open (the limit decides:
    a larger one proves the optimum) gives the same certificate on a busy machine."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from test_certify import tiny_instances  # the tiny instances of the certify tests

    # (blocks-nonmono-tp served here until the crowded-node bound, which charges no work,
    # proved its optimum at any limit)
    instance = tiny_instances()["spans-nonmono-ep"]

    def certificate(work_limit: float):
        found = certify_full(instance, None, time_limit_s=GENEROUS_CAP_S, work_limit=work_limit)
        return (found.status, found.objective_ticks, found.bound_ticks, found.shapes_visited,
                found.shapes_open, found.work_used, found.wall_capped, found.notes)

    idle = certificate(0.0005)
    assert idle[0] is not Status.OPTIMAL and idle[4] > 0 and idle[6] is False
    assert certificate(0.05)[0] is Status.OPTIMAL  # so the small limit is what stops it
    with busy_machine():
        assert certificate(0.0005) == idle


def test_certify_full_records_its_work_limit(tmp_path):
    """``verify --certify-full --work-limit`` records the limit in the protocol and each
    instance's work units; without it the certification stays on the clock."""
    result = CliRunner().invoke(cli, [
        "verify", str(SMALL / "worked_example.json"), "--certify-full", "--work-limit", "1",
        "--out", str(tmp_path), "--cache-dir", str(tmp_path / "cache"), "--no-progress"])
    assert result.exit_code == 0, result.output
    document = json.loads((tmp_path / "certified.json").read_text())
    assert document["protocol"]["options"]["work_limit"] == 1.0
    record = document["instances"][0]
    assert record["status"] == "OPTIMAL" and record["work_limit"] == 1.0
    assert record["work_units"] >= 0 and "wall_capped" not in record
    assert "Work limit per instance" in (tmp_path / "certified.md").read_text()


def _sweep_document(tmp_path: Path, name: str, instance: Path, *args: str) -> dict:
    result = CliRunner().invoke(cli, [
        "sweep", str(instance), "--out", str(tmp_path / name), "--cache-dir",
        str(tmp_path / f"{name}-cache"), "--no-progress", *args])
    assert result.exit_code == 0, result.output
    return json.loads((tmp_path / name / "sweep.json").read_text())


def _sweep_answers(document: dict) -> list:
    """What a point proves, without its wall time."""
    return [(p["status"], p["bound_ticks"], p["best_ticks"], p["certificate"], p["dp"])
            for p in document["points"]]


def test_sweep_records_its_work_limit(tmp_path):
    """``sweep --work-limit`` records the limit and its wall cap in the protocol and the
    tables; ``off`` keeps the plain time limit; a bad value is bad input (exit 2)."""
    vary = ("--vary", "spine.bandwidth_Bps=0.5x,2x")
    document = _sweep_document(tmp_path, "w", SMALL / "h2-dense-l4-d8.json", *vary,
                               "--work-limit", "0.5")
    options = document["protocol"]["options"]
    assert options["work_limit"] == 0.5 and options["time_limit_s"] == 600.0
    assert "0.5 work units per point" in (tmp_path / "w" / "sweep.md").read_text()
    document = _sweep_document(tmp_path, "t", SMALL / "h2-dense-l4-d8.json", *vary,
                               "--work-limit", "off", "--time-limit", "10")
    assert "work_limit" not in document["protocol"]["options"]
    assert document["protocol"]["options"]["time_limit_s"] == 10.0
    result = CliRunner().invoke(cli, ["sweep", str(SMALL / "h2-dense-l4-d8.json"), *vary,
                                      "--out", str(tmp_path / "bad"), "--work-limit", "0"])
    assert result.exit_code == 2 and "--work-limit" in result.output
    assert not (tmp_path / "bad").exists()


@SLOW
def test_work_limited_sweep_is_the_same_under_load(tmp_path):
    """A sweep point the work limit leaves open (FEASIBLE, not proven) is the same on a busy
    machine: same status, bound, best plan and DP plan."""
    instance = SMALL / "tight-l8-d16-h3.json"
    args = ("--vary", "hbm_bytes=1x", "--work-limit", "0.3")
    idle = _sweep_answers(_sweep_document(tmp_path, "idle", instance, *args))
    assert idle[0][0] == "FEASIBLE"  # the limit decides this point
    with busy_machine():
        assert _sweep_answers(_sweep_document(tmp_path, "busy", instance, *args)) == idle
