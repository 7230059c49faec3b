"""The anytime DP: ``--time-limit`` stops it with its best plan and a valid lower bound.

No test here depends on the machine's speed: the DP's clock is replaced by a counter that
advances one second per reading, so "stop after k seconds" means "stop at the k-th
deadline check", and every k up to a full run is tried.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from pinning import SteppingClock

from nest_cp import evaluate
from nest_cp.cli import main
from nest_cp.dp import planner
from nest_cp.io.readers import load_instance
from nest_cp.model.exits import ExitCode
from nest_cp.model.result import SolveOptions, Status
from nest_cp.solvers.registry import solve

DATA = Path(__file__).parent / "data"


def _stopped_after(instance, seconds: float, monkeypatch) -> tuple:
    clock = SteppingClock()
    monkeypatch.setattr(planner.time, "perf_counter", clock)
    result = planner.solve(instance, SolveOptions(time_limit_s=1e12,
                                                  extra={planner.STOP_AFTER_S: seconds}))
    monkeypatch.undo()
    return result, clock.now


def _instances():
    """Two small files and a random instance (v in {1, 2}, two configurations, multi-tier)
    on which the DP searches several outer choices before it can prove its optimum."""
    from nest_cp.harness.generators import random_instance
    from nest_cp.model.instance import IntraConfig

    return [load_instance(DATA / "interleaved_example.json"),
            load_instance(DATA / "worked_example.json"),
            random_instance(10, num_layers=5, tier_sizes=(2, 2, 2),
                            configs=(IntraConfig(), IntraConfig(tp=2)), zero_stages=(0, 1),
                            virtual_stages=(1, 2), identical_blocks=True, comm_scale=20,
                            global_batch=16)]


def test_stopped_at_every_check_the_dp_gives_a_plan_and_a_valid_bound(monkeypatch):
    """Stopped at any deadline check (outer loop, layouts, inner walks; every one, or 15
    spread over a long run): UNKNOWN without a
    plan, or FEASIBLE with 0 <= bound <= the unlimited DP's optimum <= its plan's objective,
    the plan evaluating to that objective; OPTIMAL only when it finished, then the same."""
    statuses = set()
    for instance in _instances():
        full = planner.solve(instance)
        _, readings = _stopped_after(instance, 1e9, monkeypatch)  # the checks of a run
        for seconds in range(0, int(readings) + 1, max(1, int(readings) // 15)):
            result, _ = _stopped_after(instance, seconds, monkeypatch)
            statuses.add(result.status)
            if result.status is Status.UNKNOWN:
                assert result.plan is None and result.objective_ticks is None
                continue
            assert evaluate(instance, result.plan).objective_ticks == result.objective_ticks
            if result.status is Status.FEASIBLE:
                assert 0 <= result.bound_ticks <= full.objective_ticks <= result.objective_ticks
            else:
                assert result.status is Status.OPTIMAL and result.plan == full.plan
    assert statuses == {Status.UNKNOWN, Status.FEASIBLE, Status.OPTIMAL}


@pytest.mark.parametrize("walk", ["pareto_walk", "interleaved"])
def test_the_deadline_is_checked_inside_the_inner_walks(walk, monkeypatch):
    """A deadline passing while an inner walk runs stops that walk (it asks at every step),
    not only the next layout or outer choice: the stop propagates out of the walk itself."""
    instance = _instances()[-1]  # its search runs both walks
    clock = {"now": 0.0}
    monkeypatch.setattr(planner.time, "perf_counter", lambda: clock["now"])
    raised = []

    def expiring(real):
        def run(*args, **kwargs):
            clock["now"] = 1e9  # the deadline passes as the walk starts
            try:
                return real(*args, **kwargs)
            except planner._TimeUp:
                raised.append(walk)
                raise
        return run

    if walk == "pareto_walk":
        monkeypatch.setattr(planner, "pareto_walk", expiring(planner.pareto_walk))
    else:
        monkeypatch.setattr(planner.Interleaved, "search",
                            expiring(planner.Interleaved.search))
        # the per-layout bound (receives counted) and the domain bound rule out every
        # interleaved layout here: off, so that the walk this test is about runs
        monkeypatch.setattr(planner._Search, "_layout_bound", lambda search, shape, g: 0)
        monkeypatch.setattr(planner._Search, "_domain_bound", lambda search, *args: 0)
    result = planner.solve(instance, SolveOptions(extra={planner.STOP_AFTER_S: 1e6}))
    assert raised == [walk] and result.status in (Status.UNKNOWN, Status.FEASIBLE)


def test_an_ample_limit_gives_the_unlimited_dp(monkeypatch):
    """With a limit it does not reach, the anytime DP is the DP: OPTIMAL, same plan, same
    objective and bound."""
    instance = load_instance(DATA / "interleaved_example.json")
    full = solve(instance, "dp")
    limited = solve(instance, "dp", SolveOptions(time_limit_s=1e6,
                                                 extra={planner.STOP_AFTER_S: 1e6}))
    assert limited.status is Status.OPTIMAL
    assert (limited.plan, limited.objective_ticks, limited.bound_ticks) == \
        (full.plan, full.objective_ticks, full.bound_ticks)


def test_the_registrys_share_of_the_limit_bounds_the_dp():
    """The DP stops at the lesser of STOP_AFTER_S and time_limit_s (the share the registry
    gives each part of a solve)."""
    assert planner.stop_after_seconds(SolveOptions()) is None
    assert planner.stop_after_seconds(SolveOptions(time_limit_s=2.0,
                                            extra={planner.STOP_AFTER_S: 9.0})) == 2.0
    assert planner.stop_after_seconds(SolveOptions(time_limit_s=60.0,
                                            extra={planner.STOP_AFTER_S: 9.0})) == 9.0


def _cli(*args):
    return CliRunner().invoke(main, [str(arg) for arg in args])


def test_solve_dp_with_a_limit_already_spent_is_unknown_exit_1():
    """`solve --backend dp --time-limit` counts from the command's start: a limit spent
    before the search (1e-9 s) gives UNKNOWN, no plan, exit 1 (never an error)."""
    result = _cli("solve", DATA / "worked_example.json", "--backend", "dp", "--time-limit",
                  "1e-9", "--json")
    assert result.exit_code == ExitCode.NO_PLAN, result.output
    record = json.loads(result.output)
    assert record["status"] == "UNKNOWN" and record["plan"] is None


def test_solve_dp_with_an_ample_limit_is_the_dp():
    """`solve --backend dp --time-limit 1000` on a small instance is the unlimited DP's
    OPTIMAL record (exit 0)."""
    limited = _cli("solve", DATA / "worked_example.json", "--backend", "dp", "--time-limit",
                   "1000", "--json")
    full = _cli("solve", DATA / "worked_example.json", "--backend", "dp", "--json")
    assert limited.exit_code == full.exit_code == ExitCode.OK, limited.output
    limited_record, full_record = json.loads(limited.output), json.loads(full.output)
    assert limited_record["status"] == "OPTIMAL"
    for key in ("objective_ticks", "bound_ticks", "plan"):
        assert limited_record[key] == full_record[key]



def test_searching_before_refining_all_changes_no_optimum(monkeypatch):
    """Best first with one refinement between searches (a search as soon as one outer waits)
    finds the same objective and plan as the default, stopped or not: the order decides
    only how early plans come, never which one wins or whether the bound holds."""
    for instance in _instances():
        full = planner.solve(instance)
        monkeypatch.setattr(planner, "REFINED_PER_SEARCH", 1)
        eager = planner.solve(instance)
        assert (eager.status, eager.objective_ticks, eager.plan) == \
            (full.status, full.objective_ticks, full.plan)
        for seconds in (3, 10, 30):
            result, _ = _stopped_after(instance, seconds, monkeypatch)
            monkeypatch.setattr(planner, "REFINED_PER_SEARCH", 1)
            if result.status is Status.FEASIBLE:
                assert result.bound_ticks <= full.objective_ticks <= result.objective_ticks
        monkeypatch.undo()


def test_stopped_at_every_check_the_sdp_search_gives_a_plan_and_a_valid_bound(monkeypatch):
    """The DP's SDP search stopped at any deadline check (sub-problems, layouts): UNKNOWN
    without a plan, or FEASIBLE with 0 <= T_eff bound <= the unlimited search's T_eff <= its
    plan's, the plan evaluating to its T and T_eff; OPTIMAL only when it finished."""
    from nest_cp.dp import sdp
    from nest_cp.harness.generators import random_sdp_instance
    from nest_cp.model.instance import SdpLevel, SdpMasking, Strategy

    instances = [load_instance(DATA / "sdp_worked_example.json")] + [
        random_sdp_instance(seed, num_blocks=3, units=2, tier_sizes=tiers,
                            levels=(SdpLevel.BLOCK, SdpLevel.NEURON),
                            maskings=tuple(SdpMasking), strategies=(Strategy.SDP,))
        for seed, tiers in ((3, (2, 2, 2)), (0, (4, 2)))]  # seed 0: first plans not optimal
    statuses, above = set(), 0
    for instance in instances:
        full = sdp.solve_sdp(instance)
        assert full.status is Status.OPTIMAL

        def stopped(seconds: float, instance=instance):
            clock = SteppingClock()
            monkeypatch.setattr(sdp.time, "perf_counter", clock)
            result = sdp.solve_sdp(instance, SolveOptions(
                time_limit_s=1e12, extra={planner.STOP_AFTER_S: seconds}))
            monkeypatch.undo()
            return result, clock.now

        _, readings = stopped(1e9)
        for seconds in range(0, int(readings) + 1):
            result, _ = stopped(seconds)
            statuses.add(result.status)
            if result.status is Status.UNKNOWN:
                assert result.plan is None
                continue
            evaluation = evaluate(instance, result.plan)
            assert evaluation.objective_ticks == result.objective_ticks
            assert evaluation.effective == result.effective
            if result.status is Status.FEASIBLE:
                assert 0 <= result.effective_bound <= full.effective <= result.effective
                above += result.effective > full.effective
            else:
                assert result.effective == full.effective
    assert statuses == {Status.UNKNOWN, Status.FEASIBLE, Status.OPTIMAL}
    assert above > 0  # some stops hold a plan worse than the optimum: the bound is tested
