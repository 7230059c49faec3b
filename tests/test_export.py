"""Launcher export: Megatron-LM arguments, torchtitan TOML, DeepSpeed JSON, rank maps, goldens.

Goldens live in tests/data/export/; after a deliberate change of an exporter,
rewrite them with ``NEST_CP_UPDATE_GOLDENS=1 pytest tests/test_export.py`` and
review the diff.
"""

import dataclasses
import json
import os
import tomllib
from pathlib import Path

import pytest
from click.testing import CliRunner

from nest_cp import io
from nest_cp.cli import main
from nest_cp.cli.export import ExportFormat, export_plan, plan_view
from nest_cp.cli.export.deepspeed import DEEPSPEED_KEYS
from nest_cp.cli.export.megatron import (
    DEFAULT_ORDER,
    MEGATRON_ARGUMENTS,
    TP_PP_DP_ORDER,
    layout_string,
    megatron_parser,
)
from nest_cp.cli.export.ranks import rank_roles
from nest_cp.cli.export.torchtitan import TORCHTITAN_KEYS
from nest_cp.cli.export.view import LayerKind
from nest_cp.model.instance import IntraConfig, RecomputeMode
from nest_cp.model.plan import MEGATRON_LAYOUT, NEST_LAYOUT, Plan, Stage

DATA = Path(__file__).parent / "data"
EXPORT = DATA / "export"
SMALL = Path(__file__).parent.parent / "instances" / "small"
GPT3 = Path(__file__).parent.parent / "instances" / "paper" / \
    "gpt3-175b--nest-tpuv4-fattree--1024.json"
GOLDEN_CASES = {
    "worked_example_nest": (DATA / "worked_example.json",
                            EXPORT / "worked_example_nest.plan.json"),
    "gpt3-175b-tpuv4-1024": (GPT3, EXPORT / "gpt3-175b-tpuv4-1024.plan.json"),
    "interleaved_selective": (EXPORT / "interleaved_selective.json",
                              EXPORT / "interleaved_selective.plan.json"),
}
SUFFIX = {ExportFormat.MEGATRON: "megatron.sh", ExportFormat.TORCHTITAN: "torchtitan.toml",
          ExportFormat.DEEPSPEED: "deepspeed.json"}


def _load(case: str):
    instance_path, plan_path = GOLDEN_CASES[case]
    return io.load_instance(instance_path), io.load_plan(plan_path)


def _placed(instance, config, microbatch, zero, dp, stages, layout=MEGATRON_LAYOUT) -> Plan:
    plan = Plan(config, microbatch, zero, dp, tuple(stages))
    order = tuple(range(instance.cluster.num_devices))
    return plan.with_placement(layout.placement(config, len(stages), dp, order))


def _args(result) -> dict:
    return vars(megatron_parser().parse_args(list(result.args)))


@pytest.mark.parametrize("case", sorted(GOLDEN_CASES))
@pytest.mark.parametrize("fmt", list(ExportFormat))
def test_golden_files(case, fmt):
    """Each format's export of the worked example and the GPT3-175B plan equals its golden."""
    instance, plan = _load(case)
    text = export_plan(instance, plan, fmt).text
    golden = EXPORT / f"{case}.{SUFFIX[fmt]}"
    if os.environ.get("NEST_CP_UPDATE_GOLDENS"):
        golden.write_text(text, encoding="utf-8")
    assert text == golden.read_text(encoding="utf-8")


@pytest.mark.parametrize("case", sorted(GOLDEN_CASES))
def test_megatron_arguments_parse_with_the_cited_names(case):
    """The Megatron argument list parses with a parser of exactly the cited names and values."""
    instance, plan = _load(case)
    result = export_plan(instance, plan, "megatron")
    parsed = _args(result)
    view = plan_view(instance, plan)
    assert parsed["tensor_model_parallel_size"] == view.tp
    assert parsed["pipeline_model_parallel_size"] == view.num_stages
    assert parsed["micro_batch_size"] == view.microbatch
    assert parsed["num_layers"] == view.num_decoder_layers
    data_parallel = view.world_size // (view.tp * view.num_stages)
    assert parsed["global_batch_size"] % (parsed["micro_batch_size"] * data_parallel) == 0
    assert parsed["global_batch_size"] >= instance.training.global_batch


def test_the_cited_parser_rejects_other_names():
    """The parser built from MEGATRON_ARGUMENTS refuses a name that is not cited (no abbrev)."""
    parser = megatron_parser()
    with pytest.raises(SystemExit):
        parser.parse_args(["--tensor-model-parallel"])
    with pytest.raises(SystemExit):
        parser.parse_args(["--data-parallel-size", "2"])
    assert len({argument.flag for argument in MEGATRON_ARGUMENTS}) == len(MEGATRON_ARGUMENTS)


def _parse_layout(text: str) -> list[str]:
    """Megatron's layout syntax as the exporter writes it: '|' between chunks, no repeats."""
    return text.split("|")


def test_gpt3_layout_reproduces_the_split():
    """The GPT3 plan's uneven split is the layout argument: E first, L last, t per block."""
    instance, plan = _load("gpt3-175b-tpuv4-1024")
    parsed = _args(export_plan(instance, plan, "megatron"))
    chunks = _parse_layout(parsed["pipeline_model_parallel_layout"])
    assert len(chunks) == plan.num_stages
    assert chunks[0].startswith("E") and chunks[-1].endswith("L")
    assert parsed["num_virtual_stages_per_pipeline_rank"] is None
    assert [len(c) for c in chunks] == [s.last_layer - s.first_layer + 1 for s in plan.stages]
    assert sum(c.count("t") for c in chunks) == parsed["num_layers"] == 96


def test_uneven_first_and_last_stages_use_the_first_last_arguments():
    """A split even in the middle exports as first/last layer counts that rebuild it exactly."""
    instance = io.load_instance(SMALL / "tight-l8-d16-h3.json")
    stages = [Stage(0, 1), Stage(2, 3), Stage(4, 5), Stage(6, 7)]  # embed+1 | 2 | 2 | 1+head
    plan = _placed(instance, IntraConfig(), 1, 0, 1, stages)
    view = plan_view(instance, plan)
    parsed = _args(export_plan(instance, plan, "megatron"))
    assert parsed["pipeline_model_parallel_layout"] is None
    first, last = parsed["decoder_first_pipeline_num_layers"], \
        parsed["decoder_last_pipeline_num_layers"]
    counts = [view.decoder_count(chunk) for chunk in view.chunks]
    middle = (parsed["num_layers"] - (first or counts[1]) - (last or counts[1])) // 2
    assert [first or middle, middle, middle, last or middle] == counts


def test_even_split_needs_no_split_argument():
    """A split with as many decoder layers per stage emits no split argument at all."""
    instance = io.load_instance(SMALL / "tight-l8-d16-h3.json")
    view = plan_view(instance, _placed(instance, IntraConfig(), 1, 0, 1,
                                       [Stage(0, 3), Stage(4, 7)]))
    assert [view.decoder_count(c) for c in view.chunks] == [3, 3]
    parsed = _args(export_plan(instance, _placed(instance, IntraConfig(), 1, 0, 1,
                                                 [Stage(0, 3), Stage(4, 7)]), "megatron"))
    assert parsed["pipeline_model_parallel_layout"] is None
    assert parsed["decoder_first_pipeline_num_layers"] is None


def test_layout_string_adds_embedding_and_loss_the_workload_lacks():
    """Megatron's layout always starts with E and ends with L, even for a block-only chain."""
    instance, plan = _load("worked_example_nest")
    view = plan_view(instance, plan)
    assert set(view.layer_kinds) == {LayerKind.DECODER}
    assert layout_string(view) == "Et|tL"


@pytest.mark.parametrize("fmt", list(ExportFormat))
@pytest.mark.parametrize("case", sorted(GOLDEN_CASES))
def test_rank_map_realises_the_placement(fmt, case):
    """Every global rank runs on the device the plan places its role on; nodes hold runs."""
    instance, plan = _load(case)
    result = export_plan(instance, plan, fmt)
    view = plan_view(instance, plan)
    ranks, per_node = result.rank_map, result.rank_map.gpus_per_node
    roles = rank_roles(ranks.order, view)
    assert len(ranks.entries) == view.world_size
    for entry in ranks.entries:
        assert (entry.stage, entry.replica, entry.tp_index, entry.ep_index) == roles[entry.rank]
        j = entry.tp_index + view.tp * entry.ep_index
        assert view.placement[entry.stage][entry.replica][j] == entry.device
        assert entry.host * per_node + entry.local_gpu == entry.device
    first = 0
    for node in ranks.nodes:
        assert node.first_rank == first
        run = ranks.entries[node.first_rank:node.last_rank + 1]
        assert {e.host for e in run} == {node.host}
        assert tuple(e.local_gpu for e in run) == node.gpus
        first = node.last_rank + 1
    assert first == view.world_size


def test_megatron_rank_order_is_mixed_radix_with_tensor_fastest():
    """Megatron's default order gives rank = t + tp*(e + ep*(replica + d*stage))."""
    instance = io.load_instance(SMALL / "moe-l4-d8-tp-ep.json")
    view = plan_view(instance, _placed(instance, IntraConfig(2, 2), 1, 0, 2,
                                       [Stage(0, 3)]))
    for rank, (stage, replica, t, e) in enumerate(rank_roles(DEFAULT_ORDER, view)):
        assert rank == t + 2 * (e + 2 * (replica + 2 * stage))


def test_worked_example_nest_layout_needs_the_tp_pp_dp_mapping():
    """§3.1's NEST layout launches one agent per host only under --use-tp-pp-dp-mapping."""
    instance, plan = _load("worked_example_nest")
    megatron = export_plan(instance, plan, "megatron")
    assert megatron.rank_map.order is TP_PP_DP_ORDER and _args(megatron)["use_tp_pp_dp_mapping"]
    assert megatron.rank_map.one_agent_per_host
    assert not any("placement" in warning for warning in megatron.warnings)
    titan = export_plan(instance, plan, "torchtitan")
    assert not titan.rank_map.one_agent_per_host
    assert any("placement not expressible" in warning for warning in titan.warnings)
    assert len(titan.rank_map.nodes) == 4


def test_expert_and_pipeline_parallel_keep_megatrons_default_order():
    """With e > 1 and S > 1 the tp-pp-dp order is not offered; a split host is warned about."""
    instance = io.load_instance(SMALL / "moe-l4-d8-tight.json")
    plan = _placed(instance, IntraConfig(1, 2), 1, 0, 2, [Stage(0, 1), Stage(2, 3)],
                   NEST_LAYOUT)
    result = export_plan(instance, plan, "megatron", gpus_per_node=4)
    assert result.rank_map.order is DEFAULT_ORDER
    assert not _args(result)["use_tp_pp_dp_mapping"]
    assert _args(result)["expert_model_parallel_size"] == 2
    assert any("placement not expressible" in warning for warning in result.warnings)


def test_mixed_recompute_is_exported_as_the_strongest_mode_with_a_warning():
    """A per-stage recompute mix becomes full recompute everywhere, named in a warning."""
    instance = io.load_instance(SMALL / "tight-l8-d16-h3.json")
    plan = _placed(instance, IntraConfig(), 1, 0, 1,
                   [Stage(0, 3, RecomputeMode.FULL), Stage(4, 7, RecomputeMode.NONE)])
    megatron = export_plan(instance, plan, "megatron")
    parsed = _args(megatron)
    assert (parsed["recompute_granularity"], parsed["recompute_method"],
            parsed["recompute_num_layers"]) == ("full", "uniform", 1)
    for result in (megatron, export_plan(instance, plan, "torchtitan"),
                   export_plan(instance, plan, "deepspeed")):
        assert any("per-stage recomputation (stages 1 none; stages 0 full)" in w
                   for w in result.warnings), result.warnings
    assert tomllib.loads(export_plan(instance, plan, "torchtitan").text)[
        "activation_checkpoint"]["mode"] == "full"
    assert json.loads(export_plan(instance, plan, "deepspeed").text)["pipeline"][
        "activation_checkpoint_interval"] == 1


@pytest.mark.parametrize("zero", [0, 1, 2, 3])
def test_zero_stages_map_to_each_launchers_sharding(zero):
    """ZeRO z becomes Megatron's distributed optimizer / FSDP, torchtitan's FSDP, DS's stage."""
    instance = io.load_instance(SMALL / "tight-l8-d16-h3.json")
    plan = _placed(instance, IntraConfig(), 1, zero, 4, [Stage(0, 3), Stage(4, 7)])
    parsed = _args(export_plan(instance, plan, "megatron"))
    assert parsed["use_distributed_optimizer"] == (zero == 1)
    assert parsed["use_megatron_fsdp"] == (zero >= 2)
    assert parsed["data_parallel_sharding_strategy"] == {
        2: "optim_grads", 3: "optim_grads_params"}.get(zero)
    titan = tomllib.loads(export_plan(instance, plan, "torchtitan").text)["parallelism"]
    assert titan["data_parallel_shard_degree"] * titan["data_parallel_replicate_degree"] == 4
    assert (titan["data_parallel_shard_degree"] > 1) == (zero >= 1)
    deepspeed = export_plan(instance, plan, "deepspeed")
    assert json.loads(deepspeed.text)["zero_optimization"]["stage"] == zero
    assert any("incompatible with ZeRO-2 and ZeRO-3" in w for w in deepspeed.warnings) == \
        (zero >= 2)


def _check_keys(document: dict, cited: dict) -> None:
    for key, value in document.items():
        assert key in cited, key
        if isinstance(cited[key], dict):
            _check_keys(value, cited[key])
        else:
            assert isinstance(value, cited[key]), (key, value)


@pytest.mark.parametrize("case", sorted(GOLDEN_CASES))
def test_torchtitan_toml_parses_with_the_cited_keys(case):
    """The torchtitan job parses as TOML, uses only cited keys, and its degrees cover the ranks."""
    instance, plan = _load(case)
    document = tomllib.loads(export_plan(instance, plan, "torchtitan").text)
    _check_keys(document, TORCHTITAN_KEYS)
    view = plan_view(instance, plan)
    degrees = document["parallelism"]
    assert degrees["data_parallel_replicate_degree"] * degrees["data_parallel_shard_degree"] * \
        degrees["tensor_parallel_degree"] * degrees["pipeline_parallel_degree"] == \
        view.world_size
    assert document["training"]["local_batch_size"] // \
        degrees["pipeline_parallel_microbatch_size"] == view.num_microbatches
    parts = degrees.get("module_fqns_per_model_part", [])
    assert sum(name.startswith("layers.") for part in parts for name in part) == \
        view.num_decoder_layers


@pytest.mark.parametrize("case", sorted(GOLDEN_CASES))
def test_deepspeed_json_uses_the_cited_keys_and_a_consistent_batch(case):
    """DeepSpeed's batch = micro x accumulation x data-parallel ranks, with cited keys only."""
    instance, plan = _load(case)
    document = json.loads(export_plan(instance, plan, "deepspeed").text)
    _check_keys(document, DEEPSPEED_KEYS)
    view = plan_view(instance, plan)
    assert document["train_batch_size"] == document["train_micro_batch_size_per_gpu"] * \
        document["gradient_accumulation_steps"] * view.data_parallel


def test_gpt3_batch_rounding_is_warned_about():
    """B = 4096 over 5 data-parallel ranks is exported as 4100 samples, with a warning."""
    instance, plan = _load("gpt3-175b-tpuv4-1024")
    for fmt in ExportFormat:
        result = export_plan(instance, plan, fmt)
        assert any("uses 4100 = 820 microbatches" in w for w in result.warnings)


def _cli(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


def test_cli_export_prints_megatron_arguments_and_the_rank_map():
    """`export --format megatron` on the GPT3 plan prints the arguments and 125 node lines."""
    instance_path, plan_path = GOLDEN_CASES["gpt3-175b-tpuv4-1024"]
    result = _cli("export", plan_path, "--instance", instance_path, "--format", "megatron")
    assert result.exit_code == 0, result.output
    assert "--tensor-model-parallel-size 8" in result.stdout
    assert "# 124        node124   0,1,2,3,4,5,6,7       992-999" in result.stdout
    assert result.stderr.startswith("warning: global batch 4096")


def test_cli_export_json_lists_warnings_and_ranks(tmp_path):
    """`export --json` carries warnings, the launch nodes and one rank-map row per rank."""
    instance_path, plan_path = GOLDEN_CASES["worked_example_nest"]
    out = tmp_path / "job.toml"
    table = tmp_path / "ranks.txt"
    result = _cli("export", plan_path, "--instance", instance_path, "--format", "torchtitan",
                  "--json", "-o", out, "--rank-map", table)
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert any("placement not expressible" in w for w in data["warnings"])
    assert len(data["rank_map"]) == 4 and len(data["launch_nodes"]) == 4
    assert result.stderr.count("warning: ") == len(data["warnings"])
    assert tomllib.loads(out.read_text()) and "CUDA_VISIBLE_DEVICES" in table.read_text()


def test_cli_export_rejects_a_plan_that_does_not_fit():
    """A plan whose layers do not match the instance is one line naming the file, exit 2."""
    result = _cli("export", DATA / "plan_megatron_default.json", "--instance",
                  SMALL / "tight-l8-d16-h3.json", "--format", "deepspeed")
    assert result.exit_code == 2
    assert "plan_megatron_default.json" in result.output and "stages" in result.output
    assert len(result.output.strip().splitlines()) == 1


def test_cli_export_needs_host_size_on_a_graph_network(tmp_path):
    """On a graph network the host size is required: exit 2 naming --gpus-per-node."""
    instance_path = SMALL / "graph-ring-dense-l4-d6.json"
    plan = _placed(io.load_instance(instance_path), IntraConfig(), 1, 0, 1,
                   [Stage(0, 1), Stage(2, 3)])
    plan_path = tmp_path / "plan.json"
    io.save_plan(plan, plan_path)
    result = _cli("export", plan_path, "--instance", instance_path, "--format", "megatron")
    assert result.exit_code == 2 and "--gpus-per-node" in result.output
    result = _cli("export", plan_path, "--instance", instance_path, "--format", "megatron",
                  "--gpus-per-node", "2")
    assert result.exit_code == 0, result.output


def test_interleaving_selective_recompute_and_overlap_flags():
    """v = 2, selective recompute, ZeRO-1 and overlap map to Megatron's own flags."""
    instance, plan = _load("interleaved_selective")
    parsed = _args(export_plan(instance, plan, "megatron"))
    assert parsed["num_virtual_stages_per_pipeline_rank"] == 2
    assert parsed["pipeline_model_parallel_layout"] is None
    assert parsed["recompute_granularity"] == "selective" and parsed["recompute_method"] is None
    assert parsed["use_distributed_optimizer"] and parsed["overlap_grad_reduce"]
    assert parsed["overlap_param_gather"]
    titan = tomllib.loads(export_plan(instance, plan, "torchtitan").text)
    assert titan["parallelism"]["pipeline_parallel_schedule"] == "Interleaved1F1B"
    assert len(titan["parallelism"]["module_fqns_per_model_part"]) == 4
    deepspeed = export_plan(instance, plan, "deepspeed")
    assert json.loads(deepspeed.text)["zero_optimization"]["overlap_comm"] is True
    assert any("interleaved 1F1B (2 virtual stages)" in w for w in deepspeed.warnings)
    assert any("selective recomputation has no DeepSpeed config key" in w
               for w in deepspeed.warnings)


def test_uneven_interleaved_split_uses_the_layout_in_chunk_order():
    """An uneven interleaved split is a layout of S·v chunks in chunk order (k on k mod S)."""
    base = io.load_instance(SMALL / "tight-l8-d16-h3.json")  # embed, 6 blocks, head
    instance = dataclasses.replace(base, training=dataclasses.replace(
        base.training, virtual_stages=(1, 2)))
    plan = _placed(instance, IntraConfig(), 1, 0, 1,
                   [Stage(0, 1), Stage(2, 3), Stage(4, 5), Stage(6, 7)])
    plan = dataclasses.replace(plan, virtual_stages=2,
                               placement=plan.placement[:2])  # S = 2 stages of 2 chunks
    view = plan_view(instance, plan)
    assert [c.stage for c in view.chunks] == [0, 1, 0, 1]
    parsed = _args(export_plan(instance, plan, "megatron"))
    assert parsed["pipeline_model_parallel_layout"] == "Et|tt|tt|tL"
    assert parsed["num_virtual_stages_per_pipeline_rank"] is None  # the layout implies v


def test_selective_recompute_mix_names_each_mode():
    """A none/selective/full mix is exported as full with every stage's mode in the warning."""
    instance = io.load_instance(EXPORT / "interleaved_selective.json")
    plan = Plan(IntraConfig(), 1, 0, 1, (Stage(0, 0, RecomputeMode.SELECTIVE),
                                         Stage(1, 1, RecomputeMode.FULL),
                                         Stage(2, 3, RecomputeMode.NONE)))
    result = export_plan(instance, plan.with_placement((((0,),), ((1,),), ((2,),))),
                         "megatron")
    assert _args(result)["recompute_granularity"] == "full"
    assert any("stages 2 none; stages 0 selective; stages 1 full" in w for w in result.warnings)


def test_export_report_and_tooling_import_only_lower_layers():
    """export/, report, show import no solver, harness or command; progress and executors
    import no backend."""
    import ast

    root = Path(__file__).parent.parent / "nest_cp"
    above = ("nest_cp.solvers", "nest_cp.dp", "nest_cp.verify", "nest_cp.harness.compare",
             "nest_cp.cli.main", "nest_cp.cli.solve", "nest_cp.cli.evaluate",
             "nest_cp.cli.instance", "nest_cp.cli.plans", "nest_cp.cli.calibrate")
    files = [*sorted((root / "cli" / "export").glob("*.py")), root / "cli" / "report.py",
             root / "cli" / "show.py", root / "model" / "progress.py",
             root / "harness" / "executors.py"]
    for path in files:
        tree = ast.parse(path.read_text(encoding="utf-8"))
        names = [node.module for node in ast.walk(tree)
                 if isinstance(node, ast.ImportFrom) and node.module] + \
            [alias.name for node in ast.walk(tree) if isinstance(node, ast.Import)
             for alias in node.names]
        assert not [n for n in names if n.startswith(above)], path
        if path.name in ("progress.py", "executors.py"):
            assert {n for n in names if n.startswith("nest_cp")} <= {"nest_cp.model.errors"}, path
