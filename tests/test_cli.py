"""The nest-cp command line: tables, JSON, and exit codes 0 / 1 / 2."""

import json
import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from nest_cp import evaluate, load_instance, load_plan
from nest_cp.cli import main
from nest_cp.model.exits import ExitCode

DATA = Path(__file__).parent / "data"


def _run(*args: str):
    return CliRunner().invoke(main, [str(a) for a in args])


def test_evaluate_plan_file_prints_table():
    """`evaluate INSTANCE PLAN` prints the per-stage table and the worked example's 35,552,000."""
    result = _run("evaluate", DATA / "worked_example.json", DATA / "plan_megatron_default.json")
    assert result.exit_code == 0, result.output
    assert "iteration 35552000 ticks" in result.output
    assert "feasible" in result.output


def test_evaluate_json_has_documented_keys():
    """`evaluate --json` carries feasible, violations, objective, time, throughput, stages, sync."""
    result = _run("evaluate", DATA / "worked_example.json", DATA / "plan_megatron_default.json",
                  "--json")
    data = json.loads(result.output)
    assert {"feasible", "violations", "objective_ticks", "iteration_time_s",
            "throughput_samples_per_s", "stages", "sync_ticks"} <= set(data)
    assert data["objective_ticks"] == 35_552_000 and data["sync_ticks"] == 20_002_000


def test_evaluate_degrees_without_plan_file():
    """`--pp 2 --dp 2` builds the uniform Megatron plan: the same 35,552,000 ticks."""
    result = _run("evaluate", DATA / "worked_example.json", "--pp", "2", "--dp", "2", "--json")
    assert json.loads(result.output)["objective_ticks"] == 35_552_000


def test_evaluate_memory_violation_exits_1():
    """A plan that breaks memory is an answer, not an error: exit 1 and the violation listed."""
    result = _run("evaluate", DATA / "tight_memory.json", "--pp", "2", "--dp", "2")
    assert result.exit_code == 1
    assert "exceeds usable HBM" in result.output


def test_bad_instance_file_one_line_exit_2():
    """A malformed instance gives exactly one line on stderr naming the file, and exit 2."""
    result = _run("evaluate", DATA / "broken_wrong_type.json", DATA / "plan_megatron_default.json")
    assert result.exit_code == 2
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and "broken_wrong_type.json: cluster.num_devices" in lines[0]
    assert "Traceback" not in result.output


def test_bad_plan_file_exit_2():
    """A malformed plan file exits 2 with one line naming the field."""
    result = _run("evaluate", DATA / "worked_example.json", DATA / "broken_plan_zero.json")
    assert result.exit_code == 2 and "zero: expected a ZeRO stage" in result.output


def test_missing_file_exit_2():
    """A path that does not exist exits 2 with one line."""
    result = _run("instance", "show", DATA / "nope.json")
    assert result.exit_code == 2 and len(result.output.strip().splitlines()) == 1


def test_instance_show_summarises():
    """`instance show` lists layers, devices, tiers and the training setup."""
    result = _run("instance", "show", DATA / "two_tier_tp2.json")
    assert result.exit_code == 0
    assert "2 layers" in result.output and "8 devices" in result.output
    assert "tier 1 spine" in result.output


def test_gpt3_manual_plan_at_1024_devices_fits(tmp_path):
    """`instance new` GPT3-175B on 1,024 TPUv4 devices; the manual p=32, d=8, t=4 plan with
    recomputation on all stages but the last evaluates to a feasible breakdown (with
    ``--launcher none``: no launcher runs per-stage recompute modes, so under megatron the
    same plan is outside the instance's space, exit 2 naming the rule)."""
    path = tmp_path / "g.json"
    made = _run("instance", "new", "--model", "gpt3-175b", "--devices", "1024", "--network",
                "nest-tpuv4-fattree", "--launcher", "none", "-o", path)
    assert made.exit_code == 0, made.output
    plan_options = ("--pp", "32", "--dp", "8", "--tp", "4", "--recompute", "all-but-last")
    result = _run("evaluate", path, *plan_options, "--json")
    assert result.exit_code == 0, result.output
    megatron = tmp_path / "m.json"
    assert _run("instance", "new", "--model", "gpt3-175b", "--devices", "1024", "--network",
                "nest-tpuv4-fattree", "-o", megatron).exit_code == 0
    refused = _run("evaluate", megatron, *plan_options)
    assert refused.exit_code == ExitCode.BAD_INPUT
    assert "megatron one recompute mode" in refused.output
    data = json.loads(result.output)
    assert data["feasible"] and len(data["stages"]) == 32
    assert data["objective_ticks"] > 0


def test_instance_new_records_overlap_flags_and_shows_tier_efficiency(tmp_path):
    """`instance new --overlap-grad-reduce --overlap-param-gather` writes both flags, and its
    summary prints each tier's bandwidth, efficiency and priced bandwidth (NVLink 4 at 0.822
    of 450 GB/s = 369.9 GB/s on the DGX H100 SuperPOD)."""
    path = tmp_path / "tiny.json"
    made = _run("instance", "new", "--hf-config", DATA / "hf_tiny_llama.json", "--devices", "16",
                "--network", "dgx-h100-superpod", "--overlap-grad-reduce",
                "--overlap-param-gather", "-o", path)
    assert made.exit_code == 0, made.output
    assert "450 GB/s x 0.822 =     369.9 GB/s" in made.output
    assert "overlap: grad reduce on, param gather on, tp comm off" in made.output
    training = load_instance(path).training
    assert training.overlap_grad_reduce and training.overlap_param_gather
    shown = _run("instance", "show", path)
    assert "x 0.94" in shown.output and "param gather on" in shown.output


def test_instance_new_records_tp_comm_overlap(tmp_path):
    """--tp-comm-overlap (docs/cost-model.md §5 e) is recorded in the instance and shown."""
    path = tmp_path / "x.json"
    result = _run("instance", "new", "--hf-config", DATA / "hf_tiny_llama.json", "--devices",
                  "16", "--network", "dgx-h100-superpod", "--tp-comm-overlap", "-o", path)
    assert result.exit_code == 0, result.output
    assert load_instance(path).training.tp_comm_overlap
    assert "tp comm on" in _run("instance", "show", path).output


def test_evaluate_splits_sync_into_charged_and_hidden(tmp_path):
    """docs/cost-model.md §5 d's example: S = 1, d = 4, ZeRO 1, Megatron's 2/4/12 bytes, both
    overlap flags: the reduce-scatter (300.030 ms) hides 4 ms behind R, the weight all-gather
    (150.030 ms) 2 ms behind F; the table and --json show both, and T = 456,060,000."""
    data = json.loads((DATA / "worked_example.json").read_text())
    data["training"].update(optimizer={"weight_bytes": 2, "grad_bytes": 4, "state_bytes": 12},
                            zero_stages=[0, 1], overlap_grad_reduce=True,
                            overlap_param_gather=True)
    path = tmp_path / "both_flags.json"
    path.write_text(json.dumps(data))
    table = _run("evaluate", path, "--pp", "1", "--dp", "4", "--zero", "1")
    assert table.exit_code == 0, table.output
    row = next(line.split() for line in table.output.splitlines()
               if line.split()[:2] == ["0", "reduce-scatter"])
    assert row[2:] == ["300.030", "296.030", "4.000", "4.000",
                       "150.030", "148.030", "2.000", "2.000"]
    result = json.loads(_run("evaluate", path, "--pp", "1", "--dp", "4", "--zero", "1",
                             "--json").stdout)
    split = result["stages"][0]["sync_split"]
    assert (split["reduce_charged_ticks"], split["gather_charged_ticks"]) == (296_030_000,
                                                                              148_030_000)
    assert result["objective_ticks"] == 456_060_000


def test_evaluate_all_reduce_sync_without_overlap_is_charged_in_full():
    """ZeRO 0 syncs by all-reduce and, without overlap, the worked example's 20.002 ms per
    stage are all charged: nothing hidden, no weight gather."""
    result = _run("evaluate", DATA / "worked_example.json", DATA / "plan_megatron_default.json")
    rows = [line.split() for line in result.output.splitlines()
            if line.split()[1:2] == ["all-reduce"]]
    assert rows == [[stage, "all-reduce", "20.002", "20.002", "0.000", "2.000", "-"]
                    for stage in ("0", "1")]


def test_instance_new_unknown_model_exit_2(tmp_path):
    """An unknown preset name is bad input: one line, exit 2, no file written."""
    result = _run("instance", "new", "--model", "gpt5", "--devices", "8", "--network",
                  "nest-tpuv4-fattree", "-o", tmp_path / "x.json")
    assert result.exit_code == 2 and len(result.output.strip().splitlines()) == 1
    assert not (tmp_path / "x.json").exists()


@pytest.mark.parametrize("option, value", [("--model", "llama-7b"),
                                           ("--network", "spineleaf"), ("--device", "h100")])
def test_instance_new_unknown_preset_names_its_option(tmp_path, option, value):
    """An unknown --model, --network or --device name is blamed on that option (not on an
    instance field such as 'preset'), with the names it could have been."""
    args = {"--model": "llama2-7b", "--network": "nest-h100-spineleaf", option: value}
    result = _run("instance", "new", *[word for pair in args.items() for word in pair],
                  "--devices", "8", "-o", tmp_path / "x.json")
    assert result.exit_code == 2 and len(result.output.strip().splitlines()) == 1
    assert f"Invalid value for {option}: expected one of " in result.output
    assert f"got '{value}'" in result.output


def test_solve_dp_json_record():
    """`solve --backend dp --json` finds DESIGN §3.1's optimum 27,099,000 with the record keys."""
    result = _run("solve", DATA / "worked_example.json", "--backend", "dp", "--json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert {"backend", "status", "objective_ticks", "bound_ticks", "iteration_time_s",
            "throughput_samples_per_s", "wall_time_s", "plan"} <= set(data)
    assert (data["backend"], data["status"], data["objective_ticks"]) == (
        "dp", "OPTIMAL", 27_099_000)


def test_solve_writes_plan_that_evaluates_to_objective(tmp_path):
    """The plan written by `solve -o` evaluates, through the CLI, to the reported objective."""
    plan = tmp_path / "plan.json"
    solved = json.loads(_run("solve", DATA / "two_tier_tp2.json", "--json", "-o", plan).output)
    evaluated = json.loads(_run("evaluate", DATA / "two_tier_tp2.json", plan, "--json").output)
    assert evaluated["objective_ticks"] == solved["objective_ticks"]


def test_solve_nothing_fits_exits_1_with_reason():
    """An instance where nothing fits is an answer: exit 1, INFEASIBLE, reason with the excess."""
    result = _run("solve", DATA / "nothing_fits.json", "--backend", "dp")
    assert result.exit_code == 1
    assert "INFEASIBLE" in result.output and "exceeds usable HBM by" in result.output
    assert "Traceback" not in result.output


def test_solve_fixed_with_degrees_reproduces_megatron_plan():
    """`--backend fixed --degrees 2,2,1` is DESIGN §3.1's Megatron plan: 35,552,000 ticks."""
    result = _run("solve", DATA / "worked_example.json", "--backend", "fixed", "--degrees",
                  "2,2,1", "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["objective_ticks"] == 35_552_000


def test_solve_fixed_with_vp_reproduces_the_interleaved_example():
    """`fixed --degrees 2,1,1 --vp 2 --recompute none` is DESIGN §3.2 b's v = 2 plan:
    51,374,000 ticks; --vp with a backend that does not take it exits 2."""
    result = _run("solve", DATA / "interleaved_example.json", "--backend", "fixed", "--degrees",
                  "2,1,1", "--vp", "2", "--recompute", "none", "--json")
    assert result.exit_code == 0, result.output
    record = json.loads(result.output)
    assert record["objective_ticks"] == 51_374_000 and record["plan"]["virtual_stages"] == 2
    refused = _run("solve", DATA / "interleaved_example.json", "--backend", "manual", "--vp", "2")
    assert refused.exit_code == 2 and "--vp" in refused.output


def test_backend_option_errors_exit_2_in_one_line():
    """A backend that cannot run with the options given (fixed without degrees, brute force
    over too many placements) is bad input: one line, exit 2, no traceback."""
    result = _run("solve", DATA / "worked_example.json", "--backend", "fixed")
    assert result.exit_code == 2 and "degrees" in result.output
    big = Path(__file__).parents[1] / "instances" / "small" / "h2-dense-l8-d16.json"
    result = _run("solve", big, "--backend", "brute", "--space", "full")
    assert result.exit_code == 2 and "placements" in result.output
    assert len(result.output.strip().splitlines()) == 1


def test_plan_that_does_not_fit_the_instance_exits_2_naming_file_and_field(tmp_path):
    """A plan file whose placement does not match the instance is bad input: exit 2, one line
    naming the plan file and the field (exit 1 is only for plans over memory)."""
    plan = tmp_path / "shape.json"
    plan.write_text(json.dumps({"config": {"tp": 1}, "dp": 2, "stages": [
        {"first_layer": 0, "last_layer": 0}, {"first_layer": 1, "last_layer": 1}],
        "placement": [[[0, 1], [2]], [[3], [1]]]}))
    result = _run("evaluate", DATA / "worked_example.json", plan)
    assert result.exit_code == 2
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and "shape.json: placement:" in lines[0]


def test_options_that_would_be_ignored_are_usage_errors():
    """--pp with a PLAN file, or --degrees with a backend other than fixed, exit 2."""
    assert _run("evaluate", DATA / "worked_example.json", DATA / "plan_megatron_default.json",
                "--pp", "2").exit_code == 2
    result = _run("solve", DATA / "worked_example.json", "--backend", "dp", "--degrees", "2,2,1")
    assert result.exit_code == 2 and "--degrees" in result.output


def test_time_limit_nan_is_rejected():
    """A NaN time limit is bad input (exit 2), not a run without a limit."""
    result = _run("solve", DATA / "worked_example.json", "--backend", "cpsat",
                  "--time-limit", "nan")
    assert result.exit_code == 2 and "Traceback" not in result.output


def test_output_in_missing_folder_fails_before_solving(tmp_path):
    """-o into a folder that does not exist exits 2 naming the path, before any solve."""
    target = tmp_path / "missing" / "plan.json"
    result = _run("solve", DATA / "worked_example.json", "-o", target)
    assert result.exit_code == 2 and str(target) in result.output
    assert "objective" not in result.output


def test_backend_bug_exits_3(monkeypatch):
    """A backend whose plan does not evaluate to its reported objective is an internal error
    (exit 3), never reported as bad input or as a result."""
    from dataclasses import replace

    import nest_cp.dp.planner

    real = nest_cp.dp.planner.solve

    def lying(instance, options):
        result = real(instance, options)
        return replace(result, objective_ticks=result.objective_ticks - 1,
                       bound_ticks=result.objective_ticks - 1)

    monkeypatch.setattr(nest_cp.dp.planner, "solve", lying)
    result = _run("solve", DATA / "worked_example.json", "--backend", "dp")
    assert result.exit_code == 3 and "internal error" in result.output


def test_evaluate_interleaved_plan_file_reproduces_design_3_2():
    """`evaluate` on DESIGN §3.2 b's v = 2 plan prints 51,374,000 ticks, v = 2 and the modes."""
    result = _run("evaluate", DATA / "interleaved_example.json", DATA / "plan_interleaved_v2.json")
    assert result.exit_code == 0, result.output
    assert "iteration 51374000 ticks" in result.output and "v=2" in result.output
    assert "0-0,2-2" in result.output and "none" in result.output
    assert "MFU n/a, HFU n/a" in result.output


def test_evaluate_vp_and_recompute_flags():
    """--pp 2 --vp 2 on the interleaved example is the v = 2 plan of DESIGN §3.2 b on the
    Megatron layout (devices 0 and 1 at d = 1): 51,374,000 ticks; --vp 1 gives 54,099,000."""
    base = ("evaluate", DATA / "interleaved_example.json", "--pp", "2", "--dp", "1", "--json")
    v2 = json.loads(_run(*base, "--vp", "2").output)
    assert v2["objective_ticks"] == 51_374_000 and v2["virtual_stages"] == 2
    assert [len(stage["chunks"]) for stage in v2["stages"]] == [2, 2]
    assert json.loads(_run(*base, "--vp", "1").output)["objective_ticks"] == 54_099_000
    full = json.loads(_run(*base, "--recompute", "all-but-last").output)
    assert [stage["recompute"] for stage in full["stages"]] == ["full", "none"]


def test_evaluate_json_has_v2_keys():
    """`evaluate --json` carries virtual_stages, exposed_sync_ticks, mfu, hfu and per-stage
    recompute modes, with MFU known where FLOPs and the peak are."""
    data = json.loads(_run("evaluate", DATA / "utilisation_example.json", "--pp", "2", "--dp",
                           "2", "--recompute", "selective", "--json").output)
    assert {"virtual_stages", "exposed_sync_ticks", "mfu", "hfu"} <= set(data)
    assert data["mfu"] > 0 and data["hfu"] is None
    assert [stage["recompute"] for stage in data["stages"]] == ["selective", "selective"]
    assert data["exposed_sync_ticks"] == data["sync_ticks"] == 20_002_000


def test_selective_instance_evaluates_with_table():
    """The table shows per-stage modes, exposed sync and MFU/HFU: full recomputation on both
    stages, T = 5 * 4,110,000 + 20,002,000 = 40,552,000 ticks, MFU = 4.8e13 / (0.040552 s *
    4e15) = 29.6 %, HFU = (4.8e13 + 1.6e13 recomputed) / the same = 39.5 %."""
    result = _run("evaluate", DATA / "utilisation_example.json", "--pp", "2", "--dp", "2",
                  "--recompute", "full")
    assert result.exit_code == 0, result.output
    assert "full" in result.output and "exposed" in result.output
    assert "MFU 29.6%, HFU 39.5%" in result.output


@pytest.mark.parametrize("instance, plan, field", [
    ("worked_example.json", "broken_plan_vp_not_allowed.json", "virtual_stages"),
    ("interleaved_example.json", "broken_plan_vp_chunks.json", "stages"),
    ("interleaved_example.json", "broken_plan_vp_one_stage.json", "virtual_stages"),
    ("interleaved_odd_batch.json", "broken_plan_vp_microbatches.json", "virtual_stages"),
    ("interleaved_example.json", "broken_plan_chunk_modes.json", "stages[2].recompute"),
    ("worked_example.json", "broken_plan_mode_not_allowed.json", "stages[0].recompute"),
    ("worked_example.json", "broken_plan_recompute_mode.json", "stages[0].recompute"),
    ("worked_example.json", "broken_plan_virtual_zero.json", "virtual_stages"),
])
def test_broken_v2_plans_exit_2_naming_the_field(instance, plan, field):
    """Every malformed interleaved or recompute plan exits 2 with one line naming the plan
    file and the field."""
    result = _run("evaluate", DATA / instance, DATA / plan)
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and f"{plan}: {field}:" in lines[0], lines


@pytest.mark.parametrize("name, field", [
    ("broken_recompute_both.json", "training.allow_recompute"),
    ("broken_selective_without_profile.json", "training.recompute"),
])
def test_broken_v2_instances_exit_2_naming_the_field(name, field):
    """An instance allowing selective recomputation without its profile data, or giving both
    recompute fields, exits 2 with one line naming the file and the field."""
    result = _run("evaluate", DATA / name, "--pp", "1", "--dp", "1")
    assert result.exit_code == 2
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and f"{name}: {field}:" in lines[0], lines


def test_vp_too_deep_for_the_layers_is_a_usage_error():
    """--pp 2 --vp 4 on four layers needs eight chunks: exit 2 naming --pp."""
    result = _run("evaluate", DATA / "interleaved_example.json", "--pp", "2", "--dp", "1",
                  "--vp", "4")
    assert result.exit_code == 2 and "--pp x --vp" in result.output


def test_exact_backends_solve_v2_choices_like_brute_force():
    """`solve --backend cpsat` searches selective recomputation: brute force's objective."""
    brute = json.loads(_run("solve", DATA / "selective_example.json", "--backend", "brute",
                            "--json").output)
    exact = json.loads(_run("solve", DATA / "selective_example.json", "--backend", "cpsat",
                            "--json").output)
    assert exact["status"] == "OPTIMAL" and exact["objective_ticks"] == brute["objective_ticks"]


def test_dp_solves_v2_choices_like_brute_force():
    """`solve --backend dp` searches selective recomputation: its objective is brute force's."""
    dp = json.loads(_run("solve", DATA / "selective_example.json", "--backend", "dp",
                         "--json").output)
    brute = json.loads(_run("solve", DATA / "selective_example.json", "--backend", "brute",
                            "--json").output)
    assert dp["status"] == "OPTIMAL" and dp["objective_ticks"] == brute["objective_ticks"]


@pytest.mark.parametrize("backend, option", [
    ("dp", ["--seed", "1"]), ("dp", ["--workers", "2"]),
    ("dp", ["--hint"]), ("manual", ["--time-limit", "5"]), ("phaze", ["--seed", "3"]),
    ("fixed", ["--workers", "2"]), ("fixed", ["--no-hint"]), ("mcmc", ["--workers", "2"]),
    ("brute", ["--time-limit", "5"]), ("cpsat", ["--milp-solver", "highs"]),
])
def test_options_a_backend_cannot_honour_exit_2_naming_the_option(backend, option):
    """--time-limit, --seed, --workers and --hint given to a backend that would ignore them
    are usage errors: exit 2, one line naming the option as the user typed it."""
    args = ["solve", DATA / "worked_example.json", "--backend", backend, *option]
    if backend == "fixed":
        args += ["--degrees", "2,2,1"]
    result = _run(*args)
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and option[0].split("/")[0].replace("no-", "") in lines[0]
    assert f"--backend {backend}" in lines[0]


def test_workers_are_capped():
    """--workers 1000000 is refused (exit 2, one line) instead of asking for a million threads."""
    result = _run("solve", DATA / "worked_example.json", "--backend", "cpsat", "--workers",
                  "1000000")
    assert result.exit_code == 2 and "--workers" in result.output
    assert len(result.output.strip().splitlines()) == 1


@pytest.mark.parametrize("degrees, expected", [
    ("1,1,2", "no profile for t=2"), ("3,1,1", "p <= 2 layers"), ("2,4,1", "<= 4 devices"),
    ("2,2", "p,d,t[,e[,c]]"),
])
def test_fixed_degrees_that_do_not_fit_the_instance_exit_2_naming_degrees(degrees, expected):
    """fixed with an unprofiled width, too many stages or devices, or too few degrees is bad
    input like `evaluate` with the same plan: exit 2, one line blaming --degrees (never an
    internal name such as extra['degrees'])."""
    result = _run("solve", DATA / "worked_example.json", "--backend", "fixed", "--degrees",
                  degrees)
    assert result.exit_code == 2, result.output
    line = result.output.strip()
    assert "\n" not in line and "--degrees" in line and expected in line
    assert "extra[" not in line


def test_dp_hint_counts_against_the_time_limit(monkeypatch):
    """cpsat's --time-limit bounds the whole solve: the exact search gets the limit less the
    time the DP hint took, and the record reports that time."""
    import nest_cp.solvers.cpsat

    seen = {}
    real = nest_cp.solvers.cpsat.solve

    def spy(instance, options):
        seen["limit"] = options.time_limit_s
        return real(instance, options)

    monkeypatch.setattr(nest_cp.solvers.cpsat, "solve", spy)
    result = _run("solve", DATA / "worked_example.json", "--backend", "cpsat", "--time-limit",
                  "30", "--json")
    record = json.loads(result.output)
    assert record["hint_wall_time_s"] > 0
    assert seen["limit"] <= 30 - record["hint_wall_time_s"]


def test_milp_optimum_within_tolerance_is_shown_as_such():
    """The MILP's optimum holds within its 1e-7 relative tolerance: the table says so and the
    JSON record carries the tolerance and the bound the solver proved."""
    table = _run("solve", DATA / "worked_example.json", "--backend", "milp", "--no-hint")
    assert table.exit_code == 0 and "OPTIMAL~1e-07 (proven within" in table.output
    record = json.loads(_run("solve", DATA / "worked_example.json", "--backend", "milp",
                             "--no-hint", "--json").output)
    assert record["tolerance_rel"] == 1e-7
    assert record["bound_ticks"] < record["objective_ticks"] == 27_099_000


def test_exact_backend_model_bug_exits_3(monkeypatch):
    """A CP-SAT answer the evaluator contradicts (its objective below the plan's price) is an
    internal error: exit 3 with one line, not exit 1 like 'no plan fits'."""
    from nest_cp.solvers.exact.adapters import CpSatAdapter, RawOutcome, RawStatus

    real = CpSatAdapter.solve

    def lying(self, time_limit_s, seed, workers, work_limit=None):
        outcome = real(self, time_limit_s, seed, workers, work_limit)
        if outcome.objective is None:
            return outcome
        return RawOutcome(RawStatus.FEASIBLE, outcome.objective - 1, outcome.objective - 1)

    monkeypatch.setattr(CpSatAdapter, "solve", lying)
    result = _run("solve", DATA / "worked_example.json", "--backend", "cpsat", "--no-hint")
    assert result.exit_code == 3
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("internal error:")


@pytest.mark.parametrize("name", [
    "broken_huge_global_batch.json", "broken_long_integer.json", "broken_alias_bomb.yaml",
    "broken_recursive_alias.yaml", "broken_provenance.json", "broken_batch_overflow.json",
])
def test_hostile_input_exits_2_with_one_line(name):
    """Over-long integers, alias bombs and bad provenance: one line on stderr, exit 2."""
    result = _run("instance", "show", DATA / name)
    assert result.exit_code == 2 and "Traceback" not in result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and name in lines[0]


def test_dev_zero_as_instance_exits_2():
    """/dev/zero is refused at the input size cap: exit 2, one line, no endless read."""
    result = _run("instance", "show", "/dev/zero")
    assert result.exit_code == 2 and "at most 64 MiB" in result.output


def test_exact_solve_of_a_v2_instance_matches_brute_force():
    """`solve --backend cpsat` on an instance allowing §3.2's choices (v in {1, 2}) exits 0
    with brute force's full-space optimum, with or without a DP hint to start from."""
    from nest_cp.io.readers import load_instance
    from nest_cp.model.result import Space
    from nest_cp.solvers.registry import SolveOptions, solve

    path = DATA / "interleaved_example.json"
    oracle = solve(load_instance(path), "brute", SolveOptions(space=Space.FULL))
    result = _run("solve", path, "--backend", "cpsat", "--json")
    assert result.exit_code == 0, result.output
    record = json.loads(result.stdout)
    assert record["status"] == "OPTIMAL"
    assert record["objective_ticks"] == oracle.objective_ticks


def test_evaluate_options_outside_the_search_space_are_priced_with_a_note():
    """A what-if plan from the options may use a virtual-stage count, ZeRO stage or recompute
    mode the instance does not let solvers search: it is priced (same ticks as on an instance
    that allows it) and a note on stderr names what was added."""
    narrow = _run("evaluate", DATA / "worked_example.json", "--pp", "2", "--dp", "2", "--zero",
                  "1", "--json")
    assert narrow.exit_code == 0, narrow.output
    assert "outside the instance's search space (ZeRO stage 1)" in narrow.output
    data = json.loads(narrow.output[narrow.output.index("{"):])
    # ZeRO-1 syncs as a reduce-scatter plus an all-gather (docs/cost-model.md §5 c): with
    # g = w = 2 bytes their ticks add up to the all-reduce's, so the time is unchanged.
    assert data["objective_ticks"] == 35_552_000
    allowed = _run("evaluate", DATA / "interleaved_example.json", "--pp", "2", "--dp", "1",
                   "--vp", "2", "--json")
    assert "search space" not in allowed.output


@pytest.mark.parametrize("backend", ["cpsat", "milp"])
def test_exact_infeasible_answer_says_by_how_much(backend):
    """An exact backend's proof that no plan fits carries the DP's least excess: memory does
    not depend on placement and every other choice is free in both spaces (DESIGN §4)."""
    instance = Path(__file__).parent.parent / "instances" / "small" / "infeasible-activation.json"
    result = _run("solve", instance, "--backend", backend, "--workers", "1", "--seed", "1",
                  "--json")
    assert result.exit_code == 1, result.output
    record = json.loads(result.output)
    assert record["status"] == "INFEASIBLE"
    assert "exceeds usable HBM by" in record["message"] and "at best" in record["message"]


def test_show_prints_the_plan_line_and_the_iteration_time():
    """`show` in text mode opens with the plan line (degrees and split, as `solve` prints it)
    and the iteration time, the evaluator's ticks for the plan."""
    plan_path = DATA / "export" / "worked_example_nest.plan.json"
    inst = load_instance(DATA / "worked_example.json")
    ticks = evaluate(inst, load_plan(plan_path)).objective_ticks
    result = _run("show", plan_path, "--instance", DATA / "worked_example.json")
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert lines[0].startswith("plan       tp=1 ep=1 microbatch=1 zero=0 stages=2 v=1 dp=2")
    assert lines[1].startswith(f"iteration  {ticks} ticks (")
    assert "s/iteration" in lines[1]


def _rate_units(text: str) -> set[str]:
    return set(re.findall(r"\b([A-Za-z]+)/s\b", text))


def test_instance_show_and_list_print_bandwidth_in_gb_per_s():
    """`instance show` (a hierarchy's tiers, a graph's links) and `instance list`'s networks
    print every bandwidth in one unit, GB/s (10^9 B/s per device)."""
    for name in ("two_tier_tp2.json", "graph_parallel_links.json"):
        shown = _run("instance", "show", DATA / name)
        assert shown.exit_code == 0, shown.output
        assert _rate_units(shown.output) == {"GB"}, shown.output
    assert "links of 50 / 100 GB/s" in _run("instance", "show",
                                            DATA / "graph_parallel_links.json").output
    listed = _run("instance", "list").output
    networks = listed[listed.index("networks:"):]
    assert _rate_units(networks) == {"GB"} and "450 / 50 / 50 GB/s" in networks


def test_instance_new_profiles_the_tensor_and_expert_widths_asked_for(tmp_path):
    """--tp-widths 1,2,4,8,16 profiles t = 16, beyond an 8-device node, and --ep-widths the
    expert widths: the instance's profile carries exactly those (t, e) pairs."""
    config = json.loads((DATA / "hf_tiny_llama.json").read_text())
    config.update(num_attention_heads=16, num_key_value_heads=16)
    (tmp_path / "sixteen_heads.json").write_text(json.dumps(config))
    path = tmp_path / "wide.json"
    made = _run("instance", "new", "--hf-config", tmp_path / "sixteen_heads.json",
                "--devices", "32", "--network", "dgx-h100-superpod", "--tp-widths", "1,2,4,8,16",
                "--ep-widths", "1", "-o", path)
    assert made.exit_code == 0, made.output
    configs = load_instance(path).workload.configs
    assert sorted((c.tp, c.ep) for c in configs) == [(1, 1), (2, 1), (4, 1), (8, 1), (16, 1)]


@pytest.mark.parametrize("option, value", [("--tp-widths", "0,2"), ("--tp-widths", "4,x"),
                                           ("--ep-widths", "-1"), ("--tp-widths", "")])
def test_instance_new_refuses_widths_that_are_not_positive_integers(tmp_path, option, value):
    """A width list that is not positive integers: one line naming the option, exit 2."""
    result = _run("instance", "new", "--hf-config", DATA / "hf_tiny_llama.json", "--devices",
                  "16", "--network", "dgx-h100-superpod", option, value,
                  "-o", tmp_path / "x.json")
    assert result.exit_code == ExitCode.BAD_INPUT
    assert len(result.output.strip().splitlines()) == 1 and option in result.output
    assert not (tmp_path / "x.json").exists()


def test_evaluate_what_if_refused_by_the_launcher_says_how_to_drop_its_rules(tmp_path):
    """A what-if the instance's launcher refuses (megatron: one recompute mode) exits 2 in
    one line that names the rule and the instance option without launcher rules; the same
    what-if on an instance made with --launcher none evaluates."""
    paths = {}
    for launcher in ("megatron", "none"):
        paths[launcher] = tmp_path / f"{launcher}.json"
        made = _run("instance", "new", "--model", "bert-large", "--devices", "8", "--network",
                    "nest-h100-spineleaf", "--launcher", launcher, "-o", paths[launcher])
        assert made.exit_code == 0, made.output
    what_if = ("--pp", "2", "--dp", "4", "--recompute", "all-but-last")
    refused = _run("evaluate", paths["megatron"], *what_if)
    assert refused.exit_code == 2 and len(refused.output.strip().splitlines()) == 1
    assert "one recompute mode" in refused.output and "--launcher none" in refused.output
    assert _run("evaluate", paths["none"], *what_if).exit_code == 0
