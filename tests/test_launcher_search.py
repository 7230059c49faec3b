"""Launcher rules in the search (training.launcher): every backend keeps only plans the
launcher starts as exported and runs as priced, and they agree on the optimum there.

The instances are drawn so that each rule binds somewhere: seed 7 and 29 (batch 26 / 34 on
six devices) have their unrestricted optimum at d = 3, which no launcher accepts
(3 does not divide the batch); the tight-memory draw has its unrestricted optimum mix
recompute modes across stages, which no launcher runs; DeepSpeed refuses ZeRO-2/3 and
tensor parallelism beside a pipeline, and (v0.19.3) AutoTP with ZeRO-3.  Objectives are
compared, never plans.
"""

from __future__ import annotations

import dataclasses
import json
import tomllib

import numpy as np
import pytest
from click.testing import CliRunner

from nest_cp.cli.main import main as cli
from nest_cp.cost.evaluate import evaluate
from nest_cp.harness.generators import random_instance
from nest_cp.io.readers import load_instance
from nest_cp.io.writers import instance_to_dict
from nest_cp.model.errors import InstanceFormatError
from nest_cp.model.exits import ExitCode
from nest_cp.model.instance import IntraConfig, RecomputeMode, Strategy
from nest_cp.model.launchers.search import (
    SHAPE_RULES,
    Launcher,
    SearchFacts,
    SearchShape,
    admits,
    shape_problems,
)
from nest_cp.model.result import SolveOptions, SolveResult, Space, Status
from nest_cp.solvers.registry import merge_parts, solve

BACKENDS = ("dp", "brute", "cpsat", "milp")


def _draw(seed: int, tight: bool = False):
    instance = random_instance(seed, num_layers=3, tier_sizes=(2, 3),
                               configs=(IntraConfig(1, 1), IntraConfig(2, 1)),
                               microbatches=(1, 2), zero_stages=(0, 1, 2, 3),
                               global_batch=(22, 26, 34)[seed % 3])
    if tight:  # 80% of the unrestricted optimum's peak stage memory
        best = solve(instance, "dp")
        peak = max(stage.memory_bytes for stage in evaluate(instance, best.plan).stages)
        instance = dataclasses.replace(instance, cluster=dataclasses.replace(
            instance.cluster, hbm_bytes=int(peak * 0.8)))
    return instance


def _under(instance, launcher: Launcher):
    """The instance under ``launcher`` (torchtitan always overlaps the gradient reduction,
    so its instances price it overlapped)."""
    overlap = instance.training.overlap_grad_reduce or launcher is Launcher.TORCHTITAN
    return dataclasses.replace(instance, training=dataclasses.replace(
        instance.training, launcher=launcher, overlap_grad_reduce=overlap))


def _objectives(instance) -> dict[str, tuple[str, int | None]]:
    found = {}
    for backend in BACKENDS:
        result = solve(instance, backend, SolveOptions(space=Space.STRUCTURED, time_limit_s=60,
                                                       seed=0, workers=1))
        found[backend] = (result.status.value, result.objective_ticks)
        if result.plan is not None:
            assert evaluate(instance, result.plan).feasible  # the referee's launcher rules too
    return found


@pytest.mark.parametrize("seed,tight", [(7, False), (29, False), (3, True)])
@pytest.mark.parametrize("launcher", [Launcher.MEGATRON, Launcher.TORCHTITAN,
                                      Launcher.DEEPSPEED])
def test_backends_agree_under_a_launcher(seed, tight, launcher):
    """DP, brute force, CP-SAT and MILP: one status and one optimum under each launcher."""
    instance = _under(_draw(seed, tight), launcher)
    found = _objectives(instance)
    assert len(set(found.values())) == 1, found


@pytest.mark.parametrize("seed,tight", [(7, False), (29, False), (3, True)])
def test_a_launcher_binds_and_its_plan_obeys_it(seed, tight):
    """The unrestricted optimum breaks Megatron's rules here; under megatron the DP's plan
    divides the batch, recomputes alike in every stage and is no faster than unrestricted."""
    free = _draw(seed, tight)
    unrestricted = solve(free, "dp")
    megatron = _under(free, Launcher.MEGATRON)
    assert not evaluate(megatron, unrestricted.plan).feasible
    assert "launcher" in evaluate(megatron, unrestricted.plan).malformed_fields
    restricted = solve(megatron, "dp")
    plan = restricted.plan
    assert free.training.global_batch % (plan.microbatch * plan.config.ep
                                         * plan.num_replicas) == 0
    assert len({stage.recompute for stage in plan.stages}) == 1
    assert restricted.objective_ticks > unrestricted.objective_ticks


def test_deepspeed_never_pipelines_zero_2_or_tensor_parallelism():
    instance = _under(_draw(7), Launcher.DEEPSPEED)
    plan = solve(instance, "dp").plan
    assert plan.num_stages == 1 or (plan.zero <= 1 and plan.config.tp == 1)


def test_rules_read_arrays_as_they_read_ints():
    """The DP applies the rules to arrays of shapes: elementwise the same as one by one."""
    facts = SearchFacts(global_batch=24, heads=12, kv_heads=4, sequence_parallel=False)
    rng = np.random.default_rng(0)
    columns = {name: rng.integers(1, 7, size=200) for name in
               ("tp", "ep", "microbatch", "dp", "num_stages", "virtual_stages")}
    columns["zero"] = rng.integers(0, 4, size=200)
    for launcher in Launcher:
        together = np.broadcast_to(admits(launcher, facts, SearchShape(**columns)), (200,))
        for index in range(200):
            one = SearchShape(**{name: int(values[index]) for name, values in columns.items()})
            assert bool(together[index]) == bool(admits(launcher, facts, one))
            assert bool(together[index]) == (not shape_problems(launcher, facts, one))


def test_every_rule_cites_the_launchers_code():
    """Every search and startup rule cites a pinned release of its launcher by file and line
    (Megatron-Core core_v0.15.3, torchtitan v0.2.2, DeepSpeed v0.19.3), none an unpinned
    or made-up commit."""
    import re

    from nest_cp.model.launchers import deepspeed, megatron, torchtitan

    pinned = {Launcher.MEGATRON: "core_v0.15.3", Launcher.TORCHTITAN: "torchtitan v0.2.2",
              Launcher.DEEPSPEED: "DeepSpeed v0.19.3"}
    startup = {Launcher.MEGATRON: megatron.RULES, Launcher.TORCHTITAN: torchtitan.RULES,
               Launcher.DEEPSPEED: deepspeed.RULES + deepspeed.REFUSALS}
    for launcher, rules in SHAPE_RULES.items():
        for rule in (*rules, *startup.get(launcher, ())):
            if "developer guide" in rule.source:
                continue  # Megatron-FSDP's required flags: NVIDIA's guide, not code
            if "Megatron-Bridge" in rule.source:  # Megatron-FSDP's checks, at its release
                assert "Megatron-Bridge v0.2.2" in rule.source and ".py:" in rule.source
                continue
            assert pinned[launcher] in rule.source, (launcher, rule.name)
            assert re.search(r"\.py:\d+|line \d+", rule.source), (launcher, rule.name)


def test_heads_rule_uses_the_recorded_heads():
    facts = SearchFacts(global_batch=8, heads=12, kv_heads=4)
    shape = SearchShape(tp=8, ep=1, microbatch=1, dp=1, num_stages=1)
    assert shape_problems(Launcher.MEGATRON, facts, shape)[0].startswith("megatron heads")
    assert admits(Launcher.MEGATRON, SearchFacts(8), shape)  # unrecorded: not checked


def test_merge_of_one_mode_parts():
    """The union of disjoint parts: best plan, least bound, OPTIMAL only when settled."""
    instance = _draw(7)
    best = solve(instance, "dp")
    plan, ticks = best.plan, best.objective_ticks
    optimal = SolveResult("x", Status.OPTIMAL, plan, ticks, ticks)
    none = SolveResult("x", Status.INFEASIBLE, message="no plan fits")
    open_ = SolveResult("x", Status.FEASIBLE, plan, ticks + 5, ticks - 7)
    unknown = SolveResult("x", Status.UNKNOWN)
    merged = merge_parts("x", [none, optimal], ["none", "full"], 1.0)
    assert (merged.status, merged.objective_ticks, merged.bound_ticks) == \
        (Status.OPTIMAL, ticks, ticks)
    merged = merge_parts("x", [optimal, open_], ["none", "full"], 1.0)
    assert (merged.status, merged.objective_ticks, merged.bound_ticks) == \
        (Status.FEASIBLE, ticks, ticks - 7)
    merged = merge_parts("x", [optimal, unknown], ["none", "full"], 1.0)
    assert (merged.status, merged.bound_ticks) == (Status.FEASIBLE, None)
    merged = merge_parts("x", [none, none], ["none", "full"], 1.0)
    assert merged.status is Status.INFEASIBLE and "none: no plan fits" in merged.message


def test_reader_names_the_launcher_field(tmp_path):
    data = instance_to_dict(_draw(7))
    data["training"]["launcher"] = "slurm"
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(data))
    with pytest.raises(InstanceFormatError) as caught:
        load_instance(path)
    assert "training.launcher" in str(caught.value)
    data["training"]["launcher"] = "megatron"
    path.write_text(json.dumps(data))
    assert load_instance(path).training.launcher is Launcher.MEGATRON


def test_torchtitan_needs_the_overlapped_reduction_it_always_runs():
    training = _draw(7).training
    with pytest.raises(InstanceFormatError, match="overlap_grad_reduce"):
        dataclasses.replace(training, launcher=Launcher.TORCHTITAN, overlap_grad_reduce=False)


def test_sdp_needs_launcher_none():
    training = _draw(7).training
    with pytest.raises(InstanceFormatError, match="launcher"):
        dataclasses.replace(training, strategies=(Strategy.DP, Strategy.SDP),
                            launcher=Launcher.MEGATRON)


def test_a_one_mode_part_drops_a_hint_of_another_mode():
    """The exact backends under a launcher: the DP's hint reaches only its own mode's part."""
    instance = _under(_draw(3, tight=True), Launcher.MEGATRON)
    hint = solve(instance, "dp").plan
    result = solve(instance, "cpsat", SolveOptions(space=Space.STRUCTURED, time_limit_s=60,
                                                   seed=0, workers=1, hint=hint))
    assert result.status is Status.OPTIMAL
    assert set(result.stats["per_recompute_mode"]) == {m.value for m in
                                                       instance.training.recompute_modes}
    assert RecomputeMode.FULL in {stage.recompute for stage in result.plan.stages}


@pytest.mark.parametrize(("launcher", "model"), [("megatron", "gpt3-175b"),
                                                  ("torchtitan", "llama3-70b"),
                                                  ("deepspeed", "gpt3-175b")])
def test_cli_on_1024_devices_exports_a_plan_the_launcher_starts(launcher, model, tmp_path):
    """The issue's walk-through: instance new (megatron by default), solve, export; the
    data-parallel size divides the batch and the output passes every cited startup rule (the
    exporters refuse, exit 3, to write one that breaks a rule, and exit 2 for a plan the
    launcher cannot run).  GPT-3 175B, or under torchtitan Llama 3 70B, which it builds as
    llama3/70B (it builds no GPT-3: test_torchtitan_without_the_model_is_no_plan...)."""
    runner = CliRunner()
    instance, plan = tmp_path / "g.json", tmp_path / "p.json"
    chosen = [] if launcher == "megatron" else ["--launcher", launcher]
    made = runner.invoke(cli, ["instance", "new", "--model", model, "--devices", "1024",
                               "--network", "nest-tpuv4-fattree", *chosen, "-o", str(instance)])
    assert made.exit_code == 0, made.output
    assert "warning" not in made.output
    assert f"launcher   {launcher}" in made.output
    solved = runner.invoke(cli, ["solve", str(instance), "-o", str(plan)])
    assert solved.exit_code == ExitCode.OK, solved.output
    assert "batch: global batch a multiple of b·e·d" in solved.output
    saved = json.loads(plan.read_text())
    batch = load_instance(instance).training.global_batch
    assert batch % (saved["microbatch"] * saved["config"]["ep"] * saved["dp"]) == 0
    exported = runner.invoke(cli, ["export", str(plan), "--instance", str(instance),
                                   "--format", launcher])
    assert exported.exit_code == 0, exported.output
    assert "not a multiple of micro-batch" not in exported.output
    assert "per-stage recomputation" not in exported.output
    if launcher == "megatron":
        assert f"--global-batch-size {batch}" in exported.output
        assert "--bf16" in exported.output and "--hidden-size 12288" in exported.output
    if launcher == "torchtitan":
        assert 'mixed_precision_param = "bfloat16"' in exported.output
        assert '[model]\nname = "llama3"\nflavor = "70B"' in exported.output
        from nest_cp.cli.export.torchtitan import torchtitan_launch
        from nest_cp.model.launchers.torchtitan import startup_violations
        document = tomllib.loads(exported.stdout)
        assert startup_violations(torchtitan_launch(document, 1024)) == []
    if launcher == "deepspeed":
        assert saved["config"]["tp"] == 1 or saved["zero"] <= 2  # no AutoTP with ZeRO-3
        assert '"bf16": {' in exported.output
    assert "targets" in exported.output and ("v0.15.3" in exported.output or "v0.2.2" in
                                             exported.output or "v0.19.3" in exported.output)


BASELINES = ("manual", "phaze", "mcmc")


@pytest.mark.parametrize("seed,tight", [(7, False), (3, True)])
@pytest.mark.parametrize("launcher", [Launcher.MEGATRON, Launcher.TORCHTITAN,
                                      Launcher.DEEPSPEED])
def test_baselines_return_only_plans_the_launcher_starts(seed, tight, launcher):
    """Under a launcher every baseline's plan passes the launcher's rules, evaluates to the
    objective it reports and is no faster than the optimum under the same rules."""
    instance = _under(_draw(seed, tight), launcher)
    optimum = solve(instance, "dp").objective_ticks
    for backend in BASELINES:
        result = solve(instance, backend, SolveOptions(time_limit_s=10, seed=0,
                                                       extra={"budget": 200}))
        if result.plan is None:
            assert result.status is Status.UNKNOWN and result.message, backend
            continue
        evaluation = evaluate(instance, result.plan)
        assert evaluation.feasible, (backend, evaluation.violations)
        assert not shape_problems(launcher, instance.search_facts, SearchShape(
            result.plan.config.tp, result.plan.config.ep, result.plan.microbatch,
            result.plan.num_replicas, result.plan.num_stages, result.plan.virtual_stages,
            result.plan.zero)), backend
        assert len({stage.recompute for stage in result.plan.stages}) == 1, backend
        assert evaluation.objective_ticks == result.objective_ticks, backend
        assert result.objective_ticks >= optimum, backend


def test_manual_picks_a_data_parallel_degree_that_divides_the_batch():
    """Seed 7 (batch 26, six devices): the rule of thumb's d = 6 breaks Megatron's batch
    rule, so under megatron manual steps down to a d the batch divides by."""
    free = _draw(7)
    assert solve(free, "manual").plan.num_replicas == 6
    plan = solve(_under(free, Launcher.MEGATRON), "manual").plan
    assert free.training.global_batch % (plan.microbatch * plan.config.ep
                                         * plan.num_replicas) == 0


def test_manual_without_a_plan_the_launcher_starts_says_so():
    """Tight memory under DeepSpeed (no ZeRO-2/3 or AutoTP beside a pipeline): the rules find
    nothing the launcher starts, and manual answers UNKNOWN naming the launcher, no crash."""
    result = solve(_under(_draw(3, tight=True), Launcher.DEEPSPEED), "manual")
    assert result.status is Status.UNKNOWN and result.plan is None
    assert "launcher (deepspeed)" in result.message


def test_fixed_degrees_the_launcher_refuses_are_a_bad_option(tmp_path):
    """fixed with degrees breaking a launcher rule: exit 2 naming the rule, never a plan the
    launcher would not start (d = 3 does not divide the batch of 26)."""
    from nest_cp.model.errors import BackendOptionError

    instance = _under(_draw(7), Launcher.MEGATRON)
    with pytest.raises(BackendOptionError, match="megatron global batch"):
        solve(instance, "fixed", SolveOptions(extra={"degrees": (1, 3, 1)}))
    assert solve(instance, "fixed", SolveOptions(extra={"degrees": (1, 2, 1)})).plan
    path = tmp_path / "i.json"
    path.write_text(json.dumps(instance_to_dict(instance)))
    result = CliRunner().invoke(cli, ["solve", str(path), "--backend", "fixed",
                                      "--degrees", "1,3,1"])
    assert result.exit_code == ExitCode.BAD_INPUT, result.output
    assert "megatron global batch" in result.output


def test_cli_compare_runs_every_baseline_on_a_launcher_instance(tmp_path):
    """The issue's first hour: `instance new` (launcher megatron) then `compare` exits 0, and
    every default backend has a plan on 64 devices."""
    from nest_cp.harness.compare import read_csv

    runner = CliRunner()
    instance, out = tmp_path / "b.json", tmp_path / "out"
    made = runner.invoke(cli, ["instance", "new", "--model", "bert-large", "--devices", "64",
                               "--network", "nest-tpuv4-fattree", "-o", str(instance)])
    assert made.exit_code == 0, made.output
    compared = runner.invoke(cli, ["compare", str(instance), "--budget", "100", "--out",
                                   str(out), "--no-progress"])
    assert compared.exit_code == ExitCode.OK, compared.output
    rows = read_csv(out / "compare.csv")
    assert {row.backend: row.status for row in rows} == {
        "dp": "OPTIMAL", "manual": "FEASIBLE", "phaze": "FEASIBLE", "mcmc": "FEASIBLE"}


def test_deepspeed_never_runs_autotp_with_zero_3():
    """DeepSpeed v0.19.3's engine asserts ZeRO <= 2 under AutoTP: with only t = 2 and ZeRO-3
    allowed, megatron finds a plan while every backend under deepspeed finds none (AutoTP
    beside a pipeline is refused too), and the referee refuses megatron's plan."""
    instance = random_instance(7, num_layers=3, tier_sizes=(2, 3), configs=(IntraConfig(2, 1),),
                               microbatches=(1, 2), zero_stages=(3,), global_batch=24)
    megatron = solve(_under(instance, Launcher.MEGATRON), "dp")
    assert megatron.plan is not None and megatron.plan.zero == 3
    deepspeed = _under(instance, Launcher.DEEPSPEED)
    problems = evaluate(deepspeed, megatron.plan).violations
    assert any("AutoTP with ZeRO-3" in problem for problem in problems), problems
    found = _objectives(deepspeed)
    assert set(found.values()) == {(found["dp"][0], None)}, found
    assert found["dp"][0] != Status.OPTIMAL.value


def test_megatron_never_runs_expert_parallelism_in_fp16():
    """Megatron core_v0.15.3 asserts no expert parallelism with fp16: only e = 2 allowed and
    fp16 weights priced, every backend under megatron finds no plan, while the same instance
    priced in bf16 has one with e = 2."""
    from nest_cp.model.instance import Optimizer

    instance = random_instance(7, num_layers=3, tier_sizes=(2, 2), configs=(IntraConfig(1, 2),),
                               zero_stages=(0, 1), global_batch=8)
    bf16 = _under(instance, Launcher.MEGATRON)
    assert solve(bf16, "dp").plan.config.ep == 2
    fp16 = dataclasses.replace(bf16, training=dataclasses.replace(
        bf16.training, optimizer=Optimizer(2, 2, 14, "adam-megatron-fp16")))
    assert fp16.search_facts.fp16 and not bf16.search_facts.fp16
    found = _objectives(fp16)
    assert set(found.values()) == {(found["dp"][0], None)}, found


# ------------------------------------------------------------ torchtitan builds only its models


def _torchtitan(model: str, devices: int = 64):
    """The preset ``model`` on ``devices`` TPUv4s under launcher torchtitan (t 1/2)."""
    from nest_cp.profiles import presets

    return _under(presets.build_instance(model, devices, "nest-tpuv4-fattree",
                                         tp_widths=(1, 2), ep_widths=(1,)),
                  Launcher.TORCHTITAN)


def test_torchtitan_admits_no_shape_of_a_model_it_does_not_build():
    """GPT-3 under torchtitan: the model rule refuses every shape (ints and arrays alike),
    names itself, and the referee refuses the plan megatron would run; Llama 3 70B is
    admitted, and a workload recording no model is not checked (the rule says so)."""
    from nest_cp.model.launchers.search import model_problem, rules_applied

    gpt3 = _torchtitan("gpt3-175b")
    facts = gpt3.search_facts
    shape = SearchShape(tp=1, ep=1, microbatch=1, dp=64, num_stages=1, zero=3)
    assert not admits(Launcher.TORCHTITAN, facts, shape)
    many = SearchShape(tp=np.array([1, 2]), ep=1, microbatch=1, dp=np.array([64, 32]),
                       num_stages=1, zero=3)
    assert not np.broadcast_to(admits(Launcher.TORCHTITAN, facts, many), (2,)).any()
    assert shape_problems(Launcher.TORCHTITAN, facts, shape)[0].startswith("torchtitan model")
    assert model_problem(Launcher.MEGATRON, facts) is None  # Megatron takes the sizes
    assert model_problem(Launcher.TORCHTITAN, facts).startswith(
        "torchtitan v0.2.2 builds no model of this architecture (gpt3-175b: 96 layers")
    megatron = _under(gpt3, Launcher.MEGATRON)
    plan = solve(megatron, "dp").plan
    assert evaluate(megatron, plan).feasible
    refused = evaluate(gpt3, plan)
    assert not refused.feasible and "launcher" in refused.malformed_fields
    assert any("torchtitan model" in violation for violation in refused.violations)

    llama = _torchtitan("llama3-70b")
    assert model_problem(Launcher.TORCHTITAN, llama.search_facts) is None
    assert admits(Launcher.TORCHTITAN, llama.search_facts, shape)
    unrecorded = _under(_draw(7), Launcher.TORCHTITAN)
    assert unrecorded.workload.model is None
    assert model_problem(Launcher.TORCHTITAN, unrecorded.search_facts) is None
    assert any(line.startswith("model: not checked")
               for line in rules_applied(Launcher.TORCHTITAN, unrecorded.search_facts))
    assert not any(line.startswith("model: not checked")
                   for line in rules_applied(Launcher.TORCHTITAN, llama.search_facts))


@pytest.mark.parametrize("model", ["gpt3-175b", "mixtral-8x7b"])
def test_every_backend_answers_no_plan_for_a_model_torchtitan_does_not_build(model):
    """Every backend, through the registry and its referee: INFEASIBLE, no plan, and the
    one reason (the model and what torchtitan builds) before any search."""
    instance = _torchtitan(model)
    for backend in (*BACKENDS, *BASELINES, "fixed"):
        options = SolveOptions(time_limit_s=10, extra={"degrees": (1, 64, 1)})
        result = solve(instance, backend, options)
        assert (result.status, result.plan) == (Status.INFEASIBLE, None), backend
        assert result.message.startswith(
            f"no plan: torchtitan v0.2.2 builds no model of this architecture ({model}:")
        assert "it builds llama3 debugmodel/8B/70B/405B" in result.message


def test_torchtitan_without_the_model_is_no_plan_through_the_cli(tmp_path):
    """`instance new --launcher torchtitan` of GPT-3 warns in one line that the instance will
    have no plan; then every backend's `solve` exits 1 printing the reason, and `compare`
    records it for every backend and names it on stderr."""
    from nest_cp.harness.compare import read_csv

    runner = CliRunner()
    path = tmp_path / "g.json"
    made = runner.invoke(cli, ["instance", "new", "--model", "gpt3-175b", "--devices", "64",
                               "--network", "nest-tpuv4-fattree", "--launcher", "torchtitan",
                               "-o", str(path)])
    assert made.exit_code == 0, made.output
    warned = [line for line in made.stderr.splitlines() if line.startswith("warning:")]
    assert len(warned) == 1 and "will have no plan under --launcher torchtitan" in warned[0]
    assert "builds no model of this architecture (gpt3-175b" in warned[0]
    reason = "message    no plan: torchtitan v0.2.2 builds no model of this architecture"
    for backend in ("dp", "cpsat", "milp", "brute", "manual", "phaze", "mcmc"):
        solved = runner.invoke(cli, ["solve", str(path), "--backend", backend])
        assert solved.exit_code == ExitCode.NO_PLAN, (backend, solved.output)
        assert reason in solved.stdout and "status     INFEASIBLE" in solved.stdout, backend
    fixed = runner.invoke(cli, ["solve", str(path), "--backend", "fixed", "--degrees",
                                "1,64,1", "--json"])
    assert fixed.exit_code == ExitCode.NO_PLAN
    record = json.loads(fixed.stdout)
    assert record["plan"] is None and "torchtitan v0.2.2 builds no model" in record["message"]
    out = tmp_path / "cmp"
    compared = runner.invoke(cli, ["compare", str(path), "--budget", "20", "--out", str(out),
                                   "--no-progress"])
    assert compared.exit_code == ExitCode.OK, compared.output
    rows = read_csv(out / "compare.csv")
    assert {row.status for row in rows} == {"INFEASIBLE"} and len(rows) == 4
    assert all("builds no model" in row.message for row in rows)
    assert "g: no plan: torchtitan v0.2.2 builds no model" in compared.stderr
