"""Context parallelism under the launchers: the transcribed rules, the exports and rank maps.

Megatron-LM core_v0.15.3, torchtitan v0.2.2 and DeepSpeed v0.19.3 (the pinned sources of
nest_cp.model.launchers); docs/launchers.md "Context parallelism" lists the rules.
"""

import dataclasses
import tomllib

import pytest
from click.testing import CliRunner
from test_cp_backends import _instance as _tiny_instance

from nest_cp import evaluate
from nest_cp.cli import main
from nest_cp.cli.export import export_plan, plan_view
from nest_cp.cli.export.megatron import DEFAULT_ORDER
from nest_cp.cli.export.ranks import rank_roles
from nest_cp.cli.export.torchtitan import TORCHTITAN_KEYS, torchtitan_launch
from nest_cp.io.writers import save_instance, save_plan
from nest_cp.model.errors import BackendOptionError
from nest_cp.model.instance import CpComm, IntraConfig, RecomputeMode
from nest_cp.model.launchers import deepspeed as ds_rules
from nest_cp.model.launchers import megatron as mcore_rules
from nest_cp.model.launchers import torchtitan as titan_rules
from nest_cp.model.launchers.search import (
    Launcher,
    SearchFacts,
    SearchShape,
    admits,
    shape_problems,
)
from nest_cp.model.plan import Plan, Stage, contiguous_placement, uniform_stages
from nest_cp.model.result import SolveOptions, Space, Status
from nest_cp.profiles import presets
from nest_cp.profiles.presets import MODELS
from nest_cp.solvers.registry import solve

# Llama 3 8B (Dubey et al. 2024, Table 3): torchtitan v0.2.2's llama3 8B flavor
LLAMA3_8B = dataclasses.replace(MODELS["llama3-70b"], name="llama3-8b", hidden=4096,
                                ffn_hidden=14336, num_layers=32, num_heads=32, num_kv_heads=8)


def _llama(launcher: Launcher, cp_comm: CpComm = CpComm.P2P):
    """Llama 3 8B on 16 A100s (two 8-GPU hosts), t in {1, 2}, c in {1, 2}, seq 4096."""
    from nest_cp.profiles.profiler import ProfileOptions

    instance = presets.build_instance(
        LLAMA3_8B, 16, "dgx-a100", global_batch=64, tp_widths=(1, 2), cp_widths=(1, 2),
        recompute_modes=(RecomputeMode.NONE, RecomputeMode.FULL),
        options=ProfileOptions(sequence_parallel=True, cp_comm=cp_comm))
    return dataclasses.replace(instance, training=dataclasses.replace(
        instance.training, launcher=launcher,
        overlap_grad_reduce=launcher is Launcher.TORCHTITAN))  # it always overlaps


def _plan(instance, tp=2, cp=2, zero=2, stages=2, dp=2) -> Plan:
    """A placed plan of t·c·S·d = 16 ranks in Megatron's default layout."""
    config = IntraConfig(tp, cp=cp)
    split = uniform_stages(instance.workload.num_layers, stages, "none")
    placement = contiguous_placement(config, stages, dp, tuple(range(16)))
    return Plan(config, 1, zero, dp, split).with_placement(placement)


# ------------------------------------------------------------------ exports that start


@pytest.mark.parametrize(("zero", "comm"), [(0, CpComm.P2P), (1, CpComm.A2A),
                                            (2, CpComm.P2P)])
def test_megatron_cp_export_passes_the_startup_checks(zero, comm):
    """A c = 2 plan's Megatron arguments parse with the cited parser, pass every transcribed
    validate_args rule (world t·p·c, seq a multiple of 2c, the comm type, the connections
    variable) and carry --context-parallel-size 2 and the instance's --cp-comm-type."""
    instance = _llama(Launcher.MEGATRON, comm)
    plan = _plan(instance, zero=zero)
    assert not any("launcher" in v for v in evaluate(instance, plan).violations)
    result = export_plan(instance, plan, "megatron")
    launch = mcore_rules.MegatronLaunch.parse(list(result.args), 16, result.env)
    assert mcore_rules.startup_violations(launch) == []
    assert launch.context_parallel_size == 2 and launch.cp_comm_type == [comm.value]
    assert launch.data_parallel_size == 2  # world / (t·p·c) = d·e
    if zero < 2:
        assert result.env == {"CUDA_DEVICE_MAX_CONNECTIONS": "1"}


def test_torchtitan_cp_export_passes_the_startup_checks():
    """A c = 2 p2p plan's torchtitan job has context_parallel_degree 2, only cited keys, and
    passes the parallel-dims product with cp and the 2·t·c sequence rule."""
    instance = _llama(Launcher.TORCHTITAN)
    plan = _plan(instance, zero=2)
    result = export_plan(instance, plan, "torchtitan")
    document = tomllib.loads(result.text)
    for section, table in document.items():
        assert set(table) <= set(TORCHTITAN_KEYS[section]), section
    assert document["parallelism"]["context_parallel_degree"] == 2
    assert titan_rules.startup_violations(torchtitan_launch(document, 16)) == []
    assert titan_rules.choice_problems(document) == []
    assert any("rotate method" in warning for warning in result.warnings)


def test_torchtitan_cp_with_zero_0_shards_over_the_context_ranks_and_says_so():
    """torchtitan turns FSDP on whenever cp > 1: a ZeRO-0 plan (launcher none) is exported as
    HSDP over the context ranks with a warning, and still passes the startup checks."""
    instance = _llama(Launcher.NONE)
    result = export_plan(instance, _plan(instance, zero=0), "torchtitan")
    document = tomllib.loads(result.text)
    assert document["parallelism"]["data_parallel_replicate_degree"] == 2
    assert titan_rules.startup_violations(torchtitan_launch(document, 16)) == []
    assert any("shards parameters over the 2 context ranks" in w for w in result.warnings)


def test_deepspeed_refuses_cp_with_the_ulysses_reason(tmp_path):
    """DeepSpeed cannot express Ulysses from a config as priced: `export --format deepspeed`
    of a c = 2 plan exits 2 with one line citing the gradient group; the same plan exports
    for Megatron (exit 0)."""
    instance_path, plan_path = tmp_path / "cp.json", tmp_path / "plan.json"
    instance = _tiny_instance(hbm_bytes=80 * 10**9)
    save_instance(instance, instance_path)
    save_plan(Plan(IntraConfig(cp=2), 1, 0, 2, (Stage(0, 0),)), plan_path)
    runner = CliRunner()
    refused = runner.invoke(main, ["export", str(plan_path), "--instance", str(instance_path),
                                   "--format", "deepspeed"])
    assert refused.exit_code == 2, refused.output
    assert "Ulysses" in refused.output and "_get_sequence_data_parallel_group" in refused.output
    assert len(refused.output.strip().splitlines()) == 1
    exported = runner.invoke(main, ["export", str(plan_path), "--instance", str(instance_path),
                                    "--format", "megatron"])
    assert exported.exit_code == 0, exported.output
    assert "--context-parallel-size 2" in exported.output
    assert "--cp-comm-type p2p" in exported.output


@pytest.mark.parametrize(("fmt", "comm", "words"), [
    ("torchtitan", CpComm.A2A, "cp_comm a2a"),
    ("megatron", CpComm.P2P, None),
])
def test_exchange_by_launcher(fmt, comm, words):
    """torchtitan takes only the p2p ring (an a2a plan exits 2 naming it); Megatron takes
    both."""
    instance = _llama(Launcher.NONE, comm)
    plan = _plan(instance, zero=2)
    if words is None:
        assert export_plan(instance, plan, fmt).args
        return
    with pytest.raises(BackendOptionError, match=words):
        export_plan(instance, plan, fmt)


# ------------------------------------------------------------------ rank map


def test_megatron_rank_map_puts_context_groups_where_megatron_does():
    """Under tp-cp-ep-dp-pp with t = c = 2 the ranks of a CP group are r and r + t (the
    context index right after the tensor index), and each runs on the device the plan places
    that role on; Megatron's CP groups (parallel_state.py RankGenerator, cp after tp) are
    {0, 2}, {1, 3}, {4, 6}, ..."""
    instance = _llama(Launcher.MEGATRON)
    plan = _plan(instance, zero=2)
    view = plan_view(instance, plan)
    result = export_plan(instance, plan, "megatron")
    roles = rank_roles(DEFAULT_ORDER, view)
    assert result.rank_map.order is DEFAULT_ORDER
    for rank, role in enumerate(roles):
        assert rank == role.tp_index + 2 * (role.cp_index + 2 * (role.replica + 2 * role.stage))
    groups = {}
    for entry in result.rank_map.entries:
        key = (entry.stage, entry.replica, entry.tp_index, entry.ep_index)
        groups.setdefault(key, []).append((entry.cp_index, entry.rank, entry.device))
        j = entry.tp_index + 2 * entry.cp_index
        assert plan.placement[entry.stage][entry.replica][j] == entry.device
    cp_groups = sorted(tuple(rank for _, rank, _ in sorted(members))
                       for members in groups.values())
    assert cp_groups[:4] == [(0, 2), (1, 3), (4, 6), (5, 7)]
    assert len(cp_groups) == 8 and all(len(group) == 2 for group in cp_groups)
    assert all("cp_index" in row for row in result.rank_map.as_dicts())


# ------------------------------------------------------------------ each rule, broken once


def _megatron(argv: list[str], world: int = 16, env=None) -> list[str]:
    base = ["--num-layers", "32", "--hidden-size", "4096", "--num-attention-heads", "32",
            "--max-position-embeddings", "4096", "--micro-batch-size", "1",
            "--global-batch-size", "64"]
    launch = mcore_rules.MegatronLaunch.parse(base + argv, world,
                                              {"CUDA_DEVICE_MAX_CONNECTIONS": "1"}
                                              if env is None else env)
    return mcore_rules.startup_violations(launch)


GOOD_MEGATRON = ["--tensor-model-parallel-size", "2", "--context-parallel-size", "2",
                 "--cp-comm-type", "p2p", "--seq-length", "4096"]


@pytest.mark.parametrize(("argv", "world", "env", "rule"), [
    (GOOD_MEGATRON[:-1] + ["4094"], 16, None, "context sequence"),
    (GOOD_MEGATRON, 18, None, "world size"),
    (GOOD_MEGATRON[:5] + ["allgather", "--seq-length", "4096"], 16, None, "context comm type"),
    (GOOD_MEGATRON[:5] + ["a2a+p2p", "--seq-length", "4096"], 16, None, "context comm type"),
    (GOOD_MEGATRON[:5] + ["p2p", "a2a", "--seq-length", "4096"], 16, None,
     "context comm type"),
    (["--context-parallel-size", "2", "--seq-length", "4096"], 16, {}, "TP connections"),
    (GOOD_MEGATRON + ["--pipeline-model-parallel-size", "2", "--use-tp-pp-dp-mapping"], 16,
     None, "pp-last order"),
])
def test_each_megatron_cp_rule_catches_what_megatron_asserts(argv, world, env, rule):
    """A valid c = 2 launch passes; altered the way core_v0.15.3 refuses it, it breaks
    exactly the named rule."""
    assert _megatron(GOOD_MEGATRON) == []
    broken = _megatron(argv, world, env)
    assert [problem.split(":")[0] for problem in broken] == [rule], broken


def test_each_torchtitan_cp_rule_catches_what_torchtitan_asserts():
    """torchtitan's dims product counts cp and its sequence divisor is 2·t·c: a valid c = 2
    job passes, a world without the cp factor and a sequence of 2·t·c·k + t break them."""
    good = titan_rules.TorchtitanLaunch(world_size=16, dp_replicate=1, dp_shard=2, tp=2, pp=2,
                                        local_batch_size=32, global_batch_size=64,
                                        pp_microbatch_size=1, model_flavor="8B", cp=2,
                                        seq_len=4096)
    assert titan_rules.startup_violations(good) == []
    for change, rule in (({"world_size": 8}, "parallel dims"),
                         ({"seq_len": 4096 + 2}, "context sequence")):
        broken = titan_rules.startup_violations(dataclasses.replace(good, **change))
        assert [problem.split(":")[0] for problem in broken] == [rule], broken


def test_deepspeed_ulysses_refusal_is_the_only_one_c_adds():
    """DeepSpeed's refusal list gains the Ulysses rule: c = 2 breaks it, c = 1 does not."""
    launch = ds_rules.DeepSpeedLaunch(zero_stage=1, pipeline_stages=1, autotp_size=1,
                                      data_parallel=8, train_batch_size=64, micro_batch=1,
                                      accumulation_steps=8)
    assert ds_rules.refusals(launch) == []
    broken = ds_rules.refusals(dataclasses.replace(launch, sequence_parallel=2))
    assert [problem.split(":")[0] for problem in broken] == ["Ulysses from a config"]


FACTS = SearchFacts(global_batch=64, heads=32, kv_heads=8, sequence_parallel=True,
                    seq_len=4096)


@pytest.mark.parametrize(("launcher", "facts", "shape", "rule"), [
    (Launcher.MEGATRON, dataclasses.replace(FACTS, seq_len=4098), {}, "context sequence"),
    (Launcher.MEGATRON, FACTS, {"ep": 2}, "context and experts"),
    (Launcher.TORCHTITAN, dataclasses.replace(FACTS, seq_len=4100), {}, "context sequence"),
    (Launcher.TORCHTITAN, dataclasses.replace(FACTS, cp_comm="a2a"), {}, "context exchange"),
    (Launcher.TORCHTITAN, FACTS, {"zero": 0}, "context and ZeRO 0"),
    (Launcher.TORCHTITAN, FACTS, {"ep": 2}, "context and experts"),
    (Launcher.DEEPSPEED, FACTS, {}, "context parallelism"),
])
def test_each_search_rule_for_context_parallelism(launcher, facts, shape, rule):
    """Each context rule of the search refuses exactly its case: the base shape (t = 2,
    c = 2, z = 2, S = 1, d = 2) passes Megatron's and torchtitan's rules, and the change
    breaks only the named one; c = 1 of the same shape passes all three launchers."""
    base = dict(tp=2, ep=1, microbatch=1, dp=2, num_stages=1, zero=2, cp=2)
    if launcher is not Launcher.DEEPSPEED:
        assert shape_problems(launcher, FACTS, SearchShape(**base)) == []
    problems = shape_problems(launcher, facts, SearchShape(**(base | shape)))
    assert [p.split(": needs")[0] for p in problems] == [f"{launcher.value} {rule}"], problems
    assert admits(launcher, facts, SearchShape(**(base | shape | {"cp": 1, "ep": 1})))


# ------------------------------------------------------------------ the evaluator and search


def test_evaluator_refuses_plans_breaking_a_cp_rule_and_brute_keeps_to_them():
    """On the tiny instance where c = 2 is fastest, brute force under Megatron finds a c = 2
    plan the evaluator accepts; the same plan under DeepSpeed is refused naming the Ulysses
    rule, and brute force under DeepSpeed keeps to c = 1 (a slower plan)."""
    tiny = _tiny_instance()
    under = {launcher: dataclasses.replace(tiny, training=dataclasses.replace(
        tiny.training, launcher=launcher)) for launcher in (Launcher.MEGATRON,
                                                             Launcher.DEEPSPEED)}
    found = solve(under[Launcher.MEGATRON], "brute", SolveOptions(space=Space.FULL))
    assert found.status is Status.OPTIMAL and found.plan.config.cp == 2
    assert evaluate(under[Launcher.MEGATRON], found.plan).feasible
    refused = evaluate(under[Launcher.DEEPSPEED], found.plan)
    assert not refused.feasible
    assert any("deepspeed context parallelism" in v for v in refused.violations)
    kept = solve(under[Launcher.DEEPSPEED], "brute", SolveOptions(space=Space.FULL))
    assert kept.plan.config.cp == 1 and evaluate(under[Launcher.DEEPSPEED], kept.plan).feasible
    assert kept.objective_ticks > found.objective_ticks  # what the rule costs here


@pytest.mark.parametrize(("launcher", "noted"), [("megatron", False), ("deepspeed", True)])
def test_instance_new_notes_widths_the_launcher_never_runs(tmp_path, launcher, noted):
    """`instance new --context-parallel 1,2` notes on stderr a width no plan of the launcher
    can use (DeepSpeed: c = 2, citing the Ulysses rule) and says nothing under Megatron; the
    width stays in the file (exit 0)."""
    out = tmp_path / "inst.json"
    result = CliRunner().invoke(main, [
        "instance", "new", "--model", "llama2-7b", "--devices", "8", "--network", "dgx-a100",
        "--global-batch", "8", "--context-parallel", "1,2", "--tp-widths", "1",
        "--launcher", launcher, "--output", str(out)])
    assert result.exit_code == 0, result.output
    note = "note: no plan of context width 2 runs under --launcher"
    assert (note in result.stderr) is noted
    if noted:
        assert "deepspeed context parallelism: needs c = 1" in result.stderr
    assert "context widths [1, 2]" in CliRunner().invoke(main, ["instance", "show",
                                                                str(out)]).output
