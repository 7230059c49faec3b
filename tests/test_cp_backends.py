"""Backends on instances that allow context parallelism (docs/context-parallelism.md): brute
force, the DP, CP-SAT and the MILP search every c (tests/test_dp_cp.py,
tests/test_exact_cp.py), and so do the baselines whose systems express it (manual, fixed,
mcmc); phaze searches c = 1 only, says so, and claims nothing about c > 1; the full-space
certificate covers c (tests/test_certify_cp.py); ``evaluate --cp`` prices uniform plans
with c > 1."""

from __future__ import annotations

import dataclasses
import json
import logging

import pytest
from click.testing import CliRunner
from test_dp_cp import _cp_instance

from nest_cp import IntraConfig, Plan, Stage, evaluate
from nest_cp.cli import main
from nest_cp.io.writers import save_instance
from nest_cp.model.errors import BackendOptionError
from nest_cp.model.instance import (
    Cluster,
    HierarchicalNetwork,
    Instance,
    Layer,
    LayerProfile,
    Optimizer,
    RecomputeMode,
    Tier,
    TrainingSetup,
    Workload,
)
from nest_cp.model.result import SolveOptions, Space, Status
from nest_cp.solvers.certify import certify_full, unsupported
from nest_cp.solvers.registry import solve

CP2 = IntraConfig(cp=2)
STRUCTURED = SolveOptions(space=Space.STRUCTURED)


def _instance(widths=(1, 2), hbm_bytes: int = 20 * 10**9) -> Instance:
    """The worked example's layer at c = 2 (fwd 2 ms, bwd 4 ms, attention 1 / 2 ms, act 1e9,
    K/V 5e7) beside its c = 1 profile (fwd 5 ms, bwd 10 ms, act 4e9: attention is
    quadratic, the rest linear); 20e9 B of HBM leave no room for c = 1 on one device."""
    whole = LayerProfile(fwd_s=5e-3, bwd_s=10e-3, dense_params=10**9, expert_params=0,
                         act_bytes=4 * 10**9, ckpt_bytes=2 * 10**8, out_bytes=2 * 10**6)
    split = LayerProfile(fwd_s=2e-3, bwd_s=4e-3, attn_fwd_s=1e-3, attn_bwd_s=2e-3,
                         dense_params=10**9, expert_params=0, act_bytes=10**9,
                         ckpt_bytes=10**8, out_bytes=10**6, cp_kv_bytes=5 * 10**7)
    cluster = Cluster(4, hbm_bytes, HierarchicalNetwork((
        Tier("node", 2, 1e11, 1e-6), Tier("spine", 2, 1e10, 1e-5))))
    training = TrainingSetup(
        global_batch=4, seq_len=8, optimizer=Optimizer(2, 4, 12, "adam-megatron"),
        zero_stages=(0, 1), recompute_modes=(RecomputeMode.NONE, RecomputeMode.FULL),
        context_parallel=tuple(widths))
    layer = Layer("block", {(IntraConfig(), 1): whole, (CP2, 1): split})
    return Instance(Workload("attention", (layer,)), cluster, training, name="cp-choice")


def test_brute_searches_context_widths():
    """Brute force over c ∈ {1, 2} finds a plan at least as good as the hand plan c = 2,
    d = 1, z = 1 (no c = 1 plan fits one device), and better than its own search over
    c = 1 alone; the full space is at least as good as the structured one."""
    instance = _instance()
    hand = evaluate(instance, Plan(CP2, 1, 1, 1, (Stage(0, 0),)))
    assert hand.feasible
    structured = solve(instance, "brute", STRUCTURED)  # refereed by the registry
    only_c1 = solve(dataclasses.replace(instance, training=dataclasses.replace(
        instance.training, context_parallel=(1,))), "brute", STRUCTURED)
    assert structured.status is Status.OPTIMAL and structured.plan.config.cp == 2
    assert structured.objective_ticks <= hand.objective_ticks
    assert structured.objective_ticks < only_c1.objective_ticks
    full = solve(instance, "brute", SolveOptions(space=Space.FULL))
    assert full.objective_ticks <= structured.objective_ticks


def test_phaze_searches_c1_and_claims_nothing_beyond(caplog):
    """phaze (Phaze / Piper have no context parallelism) returns a c = 1 plan of the
    instance, says so in its message (and the log), and never reports OPTIMAL, INFEASIBLE
    nor a bound (the c > 1 plans were not searched); here brute force proves a c = 2 plan
    better than it found."""
    instance = _instance()
    with caplog.at_level(logging.INFO):
        result = solve(instance, "phaze", SolveOptions(time_limit_s=20, seed=0, workers=1))
    assert "the phaze backend searches no context parallelism" in caplog.text
    assert result.bound_ticks is None and "searched c = 1 only" in result.message
    assert result.status is Status.FEASIBLE and result.plan.config.cp == 1
    assert solve(instance, "brute", STRUCTURED).objective_ticks < result.objective_ticks


def test_backends_refuse_instances_without_c1():
    """Only c = 2 allowed: a backend that searches c = 1 only has nothing to search and is
    refused (exit 2 on the command line); brute force, the DP and CP-SAT (in either space)
    still plan."""
    instance = _instance(widths=(2,))
    with pytest.raises(BackendOptionError, match="searches no context parallelism"):
        solve(instance, "phaze")
    for space in Space:
        assert solve(instance, "cpsat", SolveOptions(space=space, seed=0,
                                                     workers=1)).plan.config.cp == 2
    assert solve(instance, "brute", STRUCTURED).plan.config.cp == 2
    assert solve(instance, "dp").plan.config.cp == 2


def test_manual_picks_the_context_width_megatron_practice_would():
    """manual (rule 2b): no c = 1 plan fits, so it sets Megatron's --context-parallel-size to
    2 (the registry referees the plan: the evaluator prices it at manual's objective); with
    c = 1 alone its rules find nothing (UNKNOWN, never INFEASIBLE); with c = 2 alone, c = 2;
    no note either way."""
    for widths, expected in (((1, 2), 2), ((2,), 2), ((1,), None)):
        result = solve(_instance(widths), "manual")
        assert "context parallelism" not in result.message
        if expected is None:
            assert result.plan is None and result.status is Status.UNKNOWN
            continue
        assert result.status is Status.FEASIBLE and result.plan.config.cp == expected
        assert evaluate(_instance(widths), result.plan).objective_ticks == \
            result.objective_ticks


def test_manual_keeps_c1_where_activations_fit():
    """With room for c = 1 without recomputation (80e9 B), manual keeps c = 1: context
    parallelism is turned on for activations that do not fit, not searched for speed."""
    result = solve(_instance(hbm_bytes=80 * 10**9), "manual")
    assert result.plan.config.cp == 1


def test_fixed_takes_the_context_width_as_a_fifth_degree():
    """fixed --degrees p,d,t,e,c: c = 2 gives a c = 2 plan priced by the evaluator; c = 1 by
    default (which fits nowhere here: UNKNOWN); a width the instance does not allow is a bad
    option naming it."""
    instance = _instance()
    result = solve(instance, "fixed", SolveOptions(extra={"degrees": (1, 1, 1, 1, 2)}))
    assert result.status is Status.FEASIBLE and result.plan.config == CP2
    assert evaluate(instance, result.plan).objective_ticks == result.objective_ticks
    assert solve(instance, "fixed", SolveOptions(extra={"degrees": (1, 2, 1)})).plan is None
    with pytest.raises(BackendOptionError, match="t=1, e=1, c=2"):
        solve(_instance(widths=(1,)), "fixed", SolveOptions(extra={"degrees": (1, 1, 1, 1, 2)}))


def test_mcmc_walks_over_context_widths():
    """mcmc (FlexFlow's SOAP space splits the sequence) moves among the allowed widths: on
    c in {1, 2} it ends on a c = 2 plan (no c = 1 plan here beats the c = 2 ones), priced by
    the evaluator and no better than brute force's optimum; with c = 2 alone, c = 2."""
    options = SolveOptions(seed=0, extra={"budget": 200, "chains": 2})
    for widths in ((1, 2), (2,)):
        instance = _instance(widths)
        result = solve(instance, "mcmc", options)
        assert result.status is Status.FEASIBLE and result.plan.config.cp == 2
        assert evaluate(instance, result.plan).objective_ticks == result.objective_ticks
        assert result.objective_ticks >= solve(instance, "brute", STRUCTURED).objective_ticks


def test_full_space_certificates_cover_context_parallelism():
    """The full-space bounds cover an instance allowing c > 1: its interval contains the
    full-space optimum brute force finds."""
    instance = _instance()
    assert unsupported(instance) is None
    certificate = certify_full(instance, solve(instance, "dp").plan, 20.0, 0)
    best = solve(instance, "brute", SolveOptions(space=Space.FULL)).objective_ticks
    assert certificate.bound_ticks <= best <= certificate.objective_ticks


def test_cli_solve_notes_and_evaluate_prices_cp(tmp_path):
    """`solve --backend phaze` notes the restriction on stderr and exits 0 with a FEASIBLE
    plan; with only c = 2 allowed it exits 2; `solve` (the DP) and `solve --backend cpsat`
    (the full space) search every c: OPTIMAL, no note; `evaluate --cp 2` prices the worked
    example's plan (A) to the tick: 312,064,000."""
    path = tmp_path / "cp.json"
    save_instance(_instance(hbm_bytes=80 * 10**9), path)
    runner = CliRunner()
    solved = runner.invoke(main, ["solve", str(path), "--backend", "phaze", "--json"])
    assert solved.exit_code == 0, solved.output
    assert "searches no context parallelism, as the system it reproduces has none (searched " \
        "c = 1 only" in solved.stderr
    assert json.loads(solved.stdout)["status"] == "FEASIBLE"
    exact = runner.invoke(main, ["solve", str(path), "--backend", "cpsat", "--workers", "1",
                                 "--json"])
    assert exact.exit_code == 0, exact.output
    assert "context parallelism" not in exact.stderr
    assert json.loads(exact.stdout)["status"] == "OPTIMAL"
    planned = runner.invoke(main, ["solve", str(path), "--json"])
    assert planned.exit_code == 0, planned.output
    assert "context parallelism" not in planned.stderr
    assert json.loads(planned.stdout)["status"] == "OPTIMAL"
    priced = runner.invoke(main, ["evaluate", str(path), "--pp", "1", "--dp", "2", "--cp", "2",
                                  "--json"])
    assert priced.exit_code == 0, priced.output
    assert json.loads(priced.stdout)["objective_ticks"] == 312_064_000
    only_c2 = tmp_path / "cp2.json"
    save_instance(_instance(widths=(2,)), only_c2)
    refused = runner.invoke(main, ["solve", str(only_c2), "--backend", "phaze"])
    assert refused.exit_code == 2
    assert "context parallelism" in refused.output


def test_manual_answers_where_only_interleaving_is_allowed():
    """manual on a CP instance allowing v = 2 alone (tests/test_dp_cp.py seed 17) never
    returns a v = 1 plan the instance refuses: a refereed plan, or UNKNOWN."""
    result = solve(_cp_instance(17, "p2p"), "manual")
    assert result.plan is None or result.plan.virtual_stages == 2
