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
from nest_cp.cli.export.view import LayerKind, Precision
from nest_cp.model.errors import BackendOptionError
from nest_cp.model.instance import IntraConfig, RecomputeMode
from nest_cp.model.launchers.deepspeed import DeepSpeedLaunch
from nest_cp.model.launchers.megatron import MegatronLaunch
from nest_cp.model.plan import MEGATRON_LAYOUT, NEST_LAYOUT, Plan, Stage, uniform_stages
from nest_cp.profiles.presets import MODELS

DATA = Path(__file__).parent / "data"
# Llama 3 8B (Dubey et al. 2024, Table 3: 32 layers, model dimension 4096, FFN 14,336, 32
# heads, 8 KV heads, vocabulary 128,256): torchtitan v0.2.2's llama3 8B flavor
LLAMA3_8B = dataclasses.replace(MODELS["llama3-70b"], name="llama3-8b", hidden=4096,
                                ffn_hidden=14336, num_layers=32, num_heads=32, num_kv_heads=8)
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
# (case, format) pairs the launcher cannot run: refused with exit 2 (test_deepspeed_refuses_...,
# test_torchtitan_refuses_a_model_it_does_not_build_...)
REFUSED = {("gpt3-175b-tpuv4-1024", ExportFormat.DEEPSPEED),
           ("gpt3-175b-tpuv4-1024", ExportFormat.TORCHTITAN)}
EXPORTED = [(case, fmt) for case in sorted(GOLDEN_CASES) for fmt in ExportFormat
            if (case, fmt) not in REFUSED]


def _load(case: str):
    instance_path, plan_path = GOLDEN_CASES[case]
    return io.load_instance(instance_path), io.load_plan(plan_path)


def _placed(instance, config, microbatch, zero, dp, stages, layout=MEGATRON_LAYOUT) -> Plan:
    plan = Plan(config, microbatch, zero, dp, tuple(stages))
    order = tuple(range(instance.cluster.num_devices))
    return plan.with_placement(layout.placement(config, len(stages), dp, order))


def _ds(text: str) -> dict:
    """A DeepSpeed config file as DeepSpeed reads it (hjson): '#' comment lines at the top,
    then the JSON document."""
    lines = text.splitlines()
    body = [line for line in lines if not line.startswith("#")]
    assert lines[:len(lines) - len(body)] == [line for line in lines if line.startswith("#")]
    return json.loads("\n".join(body))


def _args(result) -> dict:
    return vars(megatron_parser().parse_args(list(result.args)))


@pytest.mark.parametrize(("case", "fmt"), EXPORTED)
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


@pytest.mark.parametrize(("case", "fmt"), EXPORTED)
def test_rank_map_realises_the_placement(case, fmt):
    """Every global rank runs on the device the plan places its role on; nodes hold runs."""
    instance, plan = _load(case)
    result = export_plan(instance, plan, fmt)
    view = plan_view(instance, plan)
    ranks, per_node = result.rank_map, result.rank_map.gpus_per_node
    roles = rank_roles(ranks.order, view)
    assert len(ranks.entries) == view.world_size
    for entry in ranks.entries:
        role = roles[entry.rank]
        assert (entry.stage, entry.replica, entry.tp_index, entry.cp_index, entry.ep_index) \
            == (role.stage, role.replica, role.tp_index, role.cp_index, role.ep_index)
        j = entry.tp_index + view.tp * (entry.cp_index + view.cp * entry.ep_index)
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
    for rank, role in enumerate(rank_roles(DEFAULT_ORDER, view)):
        assert role.cp_index == 0
        assert rank == role.tp_index + 2 * (role.ep_index + 2 * (role.replica + 2 * role.stage))


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
    assert _ds(export_plan(instance, plan, "deepspeed").text)["pipeline"][
        "activation_checkpoint_interval"] == 1


@pytest.mark.parametrize("zero", [0, 1, 2, 3])
def test_zero_stages_map_to_each_launchers_sharding(zero):
    """ZeRO z becomes Megatron's distributed optimizer / FSDP, torchtitan's FSDP, DS's stage."""
    instance = io.load_instance(SMALL / "tight-l8-d16-h3.json")
    plan = _placed(instance, IntraConfig(), 1, zero, 4, [Stage(0, 3), Stage(4, 7)])
    parsed = _args(export_plan(instance, plan, "megatron"))
    assert parsed["use_distributed_optimizer"] == (zero >= 1)  # FSDP requires it too
    assert parsed["use_megatron_fsdp"] == (zero >= 2)
    assert parsed["data_parallel_sharding_strategy"] == {
        2: "optim_grads", 3: "optim_grads_params"}.get(zero, "no_shard")
    titan = tomllib.loads(export_plan(instance, plan, "torchtitan").text)["parallelism"]
    assert titan["data_parallel_shard_degree"] * titan["data_parallel_replicate_degree"] == 4
    assert (titan["data_parallel_shard_degree"] > 1) == (zero >= 1)
    if zero >= 2:  # the pipeline engine asserts ZeRO < 2: refused, not exported
        with pytest.raises(BackendOptionError, match="ZeRO-2 and ZeRO-3 are incompatible"):
            export_plan(instance, plan, "deepspeed")
        return
    deepspeed = export_plan(instance, plan, "deepspeed")
    assert _ds(deepspeed.text)["zero_optimization"]["stage"] == zero


def _check_keys(document: dict, cited: dict) -> None:
    for key, value in document.items():
        assert key in cited, key
        if isinstance(cited[key], dict):
            _check_keys(value, cited[key])
        else:
            assert isinstance(value, cited[key]), (key, value)


@pytest.mark.parametrize("case", [case for case, fmt in EXPORTED
                                  if fmt is ExportFormat.TORCHTITAN])
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
    training = document["training"]
    if view.num_stages > 1:  # the schedule splits the local batch into m microbatches
        assert training["local_batch_size"] // \
            degrees["pipeline_parallel_microbatch_size"] == view.num_microbatches
    else:  # torchtitan accumulates m steps of one microbatch
        assert training["local_batch_size"] == view.microbatch
        assert training["global_batch_size"] // (training["local_batch_size"] *
                                                 view.data_parallel) == view.num_microbatches
    parts = degrees.get("module_fqns_per_model_part", [])
    assert sum(name.startswith("layers.") for part in parts for name in part) == \
        view.num_decoder_layers


@pytest.mark.parametrize("case", [c for c, f in EXPORTED if f is ExportFormat.DEEPSPEED])
def test_deepspeed_json_uses_the_cited_keys_and_a_consistent_batch(case):
    """DeepSpeed's batch = micro x accumulation x data-parallel ranks, with cited keys only."""
    instance, plan = _load(case)
    document = _ds(export_plan(instance, plan, "deepspeed").text)
    _check_keys(document, DEEPSPEED_KEYS)
    view = plan_view(instance, plan)
    assert document["train_batch_size"] == document["train_micro_batch_size_per_gpu"] * \
        document["gradient_accumulation_steps"] * view.data_parallel


def _deepspeed_launch(document: dict, world_size: int) -> DeepSpeedLaunch:
    """What DeepSpeed v0.19.3 reads from a written config, with the mpu the export asks for
    (the pipeline grid, or deepspeed.utils.groups under AutoTP): data-parallel world size."""
    stages = document.get("pipeline", {}).get("stages", 1)
    autotp = document.get("tensor_parallel", {}).get("autotp_size", 1)
    return DeepSpeedLaunch(
        zero_stage=document["zero_optimization"]["stage"], pipeline_stages=stages,
        autotp_size=autotp, data_parallel=world_size // (stages * autotp),
        train_batch_size=document["train_batch_size"],
        micro_batch=document["train_micro_batch_size_per_gpu"],
        accumulation_steps=document["gradient_accumulation_steps"],
        bf16=document.get("bf16", {}).get("enabled", False),
        fp16=document.get("fp16", {}).get("enabled", False),
        communication_data_type=document.get("communication_data_type"))


def test_deepspeed_exports_pass_every_cited_startup_rule():
    """Every written DeepSpeed config, read back as DeepSpeed v0.19.3 reads it, passes the
    transcribed engine asserts (batch, one precision, ZeRO and AutoTP refusals), enables the
    priced precision, and names the missing model in a warning."""
    from nest_cp.model.launchers.deepspeed import refusals, startup_violations

    checked = 0
    for instance, plan in _shapes():
        view = plan_view(instance, plan)
        try:
            result = export_plan(instance, plan, "deepspeed")
        except BackendOptionError:
            continue
        document = _ds(result.text)
        _check_keys(document, DEEPSPEED_KEYS)
        launch = _deepspeed_launch(document, view.world_size)
        assert refusals(launch) == [] and startup_violations(launch) == [], document
        assert document[view.precision.value] == {"enabled": True}
        assert ("communication_data_type" in document) == (view.grad_bytes == 4)
        assert any("DeepSpeed's config carries no model" in w for w in result.warnings)
        assert all(f"# warning: {w}" in result.text for w in result.warnings)
        checked += 1
    assert checked >= 8


@pytest.mark.parametrize(("change", "rule"), [
    ({"train_batch_size": 7}, "train batch"),
    ({"fp16": {"enabled": True}}, "one precision"),
    ({"communication_data_type": "fp8"}, "communication type"),
    ({"tensor_parallel": {"autotp_size": 2}, "zero_optimization": {"stage": 3}},
     "AutoTP with ZeRO-3"),
    ({"pipeline": {"stages": 2}, "zero_optimization": {"stage": 2}}, "ZeRO-2/3 with a pipeline"),
])
def test_each_deepspeed_rule_catches_what_deepspeed_asserts(change, rule):
    """The DeepSpeed rules are not vacuous: a valid export passes them all, and altered the
    way the engine asserts against it breaks the named rule."""
    from nest_cp.model.launchers.deepspeed import refusals, startup_violations

    def broken(document: dict) -> list[str]:
        launch = _deepspeed_launch(document, 16)
        return refusals(launch) + startup_violations(launch)

    instance = _llama_instance(True)
    plan = _placed(instance, IntraConfig(2), 1, 1, 8, uniform_stages(34, 1, "none"))
    document = _ds(export_plan(instance, plan, "deepspeed").text)
    assert broken(document) == []
    assert any(b.startswith(rule) for b in broken(document | change)), broken(document | change)


def test_batch_rounding_is_warned_about():
    """B = 4096 over 5 data-parallel ranks (the GPT3 plan) is exported for Megatron as 4100
    samples, and B = 64 over 5 ranks (Llama 3 8B) for torchtitan as 65, each with a
    warning."""
    instance, plan = _load("gpt3-175b-tpuv4-1024")
    result = export_plan(instance, plan, ExportFormat.MEGATRON)
    assert any("uses 4100 = 820 microbatches" in w for w in result.warnings)
    instance = _llama_instance(True)
    plan = _placed(instance, IntraConfig(1), 1, 0, 5, uniform_stages(34, 1, "none"))
    result = export_plan(instance, plan, ExportFormat.TORCHTITAN)
    assert tomllib.loads(result.text)["training"]["global_batch_size"] == 65
    assert any("uses 65 = 13 microbatches" in w for w in result.warnings)


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
    """v = 2, selective recompute, ZeRO-1 and overlap map to Megatron's own flags; the weight
    all-gather is overlapped only when the plan was priced so (overlap_param_gather)."""
    instance, plan = _load("interleaved_selective")
    parsed = _args(export_plan(instance, plan, "megatron"))
    assert parsed["num_virtual_stages_per_pipeline_rank"] == 2
    assert parsed["pipeline_model_parallel_layout"] is None
    assert parsed["recompute_granularity"] == "selective" and parsed["recompute_method"] is None
    assert parsed["use_distributed_optimizer"] and parsed["overlap_grad_reduce"]
    assert not parsed["overlap_param_gather"]  # the instance prices the all-gather exposed
    hidden = dataclasses.replace(instance, training=dataclasses.replace(
        instance.training, overlap_param_gather=True))
    assert _args(export_plan(hidden, plan, "megatron"))["overlap_param_gather"]
    titan = tomllib.loads(export_plan(instance, plan, "torchtitan").text)
    assert titan["parallelism"]["pipeline_parallel_schedule"] == "Interleaved1F1B"
    assert len(titan["parallelism"]["module_fqns_per_model_part"]) == 4
    deepspeed = export_plan(instance, plan, "deepspeed")
    assert _ds(deepspeed.text)["zero_optimization"]["overlap_comm"] is True
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


# ------------------------------------------------------------------ exports that start


def _llama_instance(sequence_parallel: bool, attention: str = "flash"):
    """Llama 3 8B (a model every launcher builds: torchtitan's llama3 8B) on 16 A100s,
    tp 1/2, profiled with the given SP and attention."""
    from nest_cp.profiles import presets
    from nest_cp.profiles.profiler import AttentionKind, ProfileOptions

    return presets.build_instance(
        LLAMA3_8B, 16, "dgx-a100", global_batch=64, tp_widths=(1, 2),
        recompute_modes=(RecomputeMode.NONE, RecomputeMode.SELECTIVE, RecomputeMode.FULL),
        options=ProfileOptions(attention=AttentionKind(attention),
                               sequence_parallel=sequence_parallel))


def _shapes():
    """Plans over every choice the exporters read: t, S, v, d, ZeRO, recompute mix, SP and
    attention (recorded or not), on the Llama instance, plus the golden cases."""
    cases = [_load(case) for case in sorted(GOLDEN_CASES)]
    for sp, attention in ((True, "flash"), (False, "materialized")):
        instance = _llama_instance(sp, attention)
        instance = dataclasses.replace(instance, training=dataclasses.replace(
            instance.training, virtual_stages=(1, 2), overlap_grad_reduce=sp))
        last = instance.workload.num_layers - 1
        for tp, zero, stages in ((2, 0, 1), (2, 1, 2), (2, 2, 1), (1, 3, 1), (2, 3, 2),
                                 (1, 2, 4)):
            split = uniform_stages(last + 1, stages, "all-but-last" if zero == 1 else "none")
            plan = _placed(instance, IntraConfig(tp), 1, zero, 16 // (tp * stages), split)
            cases.append((instance, plan))
        split = uniform_stages(last + 1, 4, "selective", 2)
        plan = Plan(IntraConfig(2), 1, 1, 2, split, virtual_stages=2)
        cases.append((instance, plan.with_placement(MEGATRON_LAYOUT.placement(
            IntraConfig(2), 4, 2, tuple(range(16))))))
    return cases


def _evidence(result, view) -> dict[str, bool]:
    """Which plan and instance choices appear in the artifact itself (args, config, files)."""
    fmt, args, config = result.format, " ".join(result.args), result.config
    text = result.text + json.dumps(config) + " ".join(result.files.values())
    par = config.get("parallelism", {})
    recompute = {m.value for m in view.stage_recompute}
    if fmt is ExportFormat.MEGATRON:
        return {
            "tp": f"--tensor-model-parallel-size {view.tp}" in args,
            "ep": view.ep == 1 or f"--expert-model-parallel-size {view.ep}" in args,
            "stages": f"--pipeline-model-parallel-size {view.num_stages}" in args,
            "virtual": view.virtual_stages == 1 or "--num-virtual-stages-per-pipeline-rank"
            in args or "--pipeline-model-parallel-layout" in args,
            "replicas": f"--global-batch-size {view.samples_per_iteration}" in args,
            "microbatch": f"--micro-batch-size {view.microbatch}" in args,
            "zero": ("--use-megatron-fsdp" in args) == (view.zero >= 2)
            and ("--use-distributed-optimizer" in args) == (view.zero >= 1),
            "recompute": recompute == {"none"} or "--recompute-granularity" in args,
            "overlap": ("--overlap-grad-reduce" in args) == view.overlap_grad_reduce,
            "sequence parallel": ("--sequence-parallel" in args) == view.sequence_parallel,
            "attention": "--attention-backend" in args,
            "split": True,  # checked by the layout tests; every split has a spelling
            "placement": "CUDA_VISIBLE_DEVICES" in text,
            "precision": view.precision is Precision.FP32 or f"--{view.precision.value}" in args,
            "model": view.model is not None and f"--hidden-size {view.model.hidden}" in args,
        }
    if fmt is ExportFormat.TORCHTITAN:
        return {
            "tp": par.get("tensor_parallel_degree") == view.tp,
            "ep": view.ep == 1 or par.get("expert_parallel_degree") == view.ep,
            "stages": par.get("pipeline_parallel_degree") == view.num_stages,
            "virtual": (par.get("pipeline_parallel_schedule") == "Interleaved1F1B")
            == (view.virtual_stages > 1),
            "replicas": par["data_parallel_replicate_degree"] * par[
                "data_parallel_shard_degree"] == view.data_parallel,
            "microbatch": par.get("pipeline_parallel_microbatch_size") == view.microbatch,
            "zero": (par["data_parallel_shard_degree"] > 1) == (view.zero >= 1)
            or view.data_parallel == 1,
            "recompute": config["activation_checkpoint"]["mode"] in recompute,
            "overlap": view.overlap_grad_reduce or view.data_parallel == 1,  # FSDP/DDP overlap
            "sequence parallel": view.tp == 1 or view.sequence_parallel,
            "attention": view.attention is not None and "attention" in text,
            "split": view.num_stages == 1 or "module_fqns_per_model_part" in par,
            "placement": "CUDA_VISIBLE_DEVICES" in text,
            "precision": config["training"]["mixed_precision_param"] == {
                Precision.BF16: "bfloat16", Precision.FP32: "float32"}.get(view.precision),
            "model": "flavor" in config.get("model", {}),
        }
    zero_section = config["zero_optimization"]
    return {
        "tp": view.tp == 1 or config.get("tensor_parallel", {}).get("autotp_size") == view.tp,
        "ep": view.ep == 1,
        "stages": view.num_stages == 1 or config["pipeline"]["stages"] == view.num_stages,
        "virtual": view.virtual_stages == 1,
        "replicas": config["train_batch_size"] == view.samples_per_iteration,
        "microbatch": config["train_micro_batch_size_per_gpu"] == view.microbatch,
        "zero": zero_section["stage"] == view.zero,
        "recompute": recompute == {"none"},
        "overlap": zero_section["overlap_comm"] == view.overlap_grad_reduce,
        "sequence parallel": not view.sequence_parallel,
        "attention": False,
        "split": view.num_stages == 1 or config["pipeline"]["partition"] == "uniform",
        "placement": "hostfile" in result.files,
        "precision": view.precision is Precision.FP32
        or config.get(view.precision.value) == {"enabled": True},
        "model": False,  # DeepSpeed's config has no model section
    }


# words a warning about each choice contains, when the artifact cannot carry it
WARNED_AS = {"tp": "tensor", "ep": "expert", "stages": "pipeline", "virtual": "interleaved",
             "replicas": "batch", "microbatch": "micro", "zero": "ZeRO",
             "recompute": "recomput", "overlap": "overlap", "sequence parallel": "sequence",
             "attention": "attention", "split": "split", "placement": "placement",
             "precision": "precision", "model": "architecture"}


def test_every_choice_is_exported_or_named_in_a_warning():
    """Walking plans over every choice (t, S, v, d, b, ZeRO, recompute, overlap, SP, attention,
    split, placement, precision, model) and format: each choice is in the artifact or named
    in a warning, which the artifact carries as a '# warning:' comment too, or the format
    refuses the plan with exit-2 error (DeepSpeed: ZeRO-2/3 or AutoTP beside a pipeline,
    AutoTP with ZeRO-3; torchtitan: a model it does not build, the GPT3 plan)."""
    from nest_cp.cli.export.torchtitan import flavor_of

    walked = refused = 0
    for instance, plan in _shapes():
        view = plan_view(instance, plan)
        for fmt in ExportFormat:
            try:
                result = export_plan(instance, plan, fmt)
            except BackendOptionError as exc:
                if fmt is ExportFormat.TORCHTITAN:
                    assert view.model is not None and flavor_of(view.model) is None
                    assert "torchtitan v0.2.2 builds no model" in str(exc)
                    refused += 1
                    continue
                assert fmt is ExportFormat.DEEPSPEED and (view.num_stages > 1 or (
                    view.tp > 1 and view.zero == 3))
                assert (view.zero >= 2 and "ZeRO" in str(exc)) or \
                    (view.tp > 1 and "AutoTP" in str(exc))
                refused += 1
                continue
            walked += 1
            assert all(f"# warning: {w}" in result.text for w in result.warnings), fmt
            for choice, shown in _evidence(result, view).items():
                if not shown:
                    assert any(WARNED_AS[choice].lower() in w.lower()
                               for w in result.warnings), (fmt, choice, result.warnings)
    assert walked >= 40 and refused >= 4


def _megatron_launches():
    for instance, plan in _shapes():
        result = export_plan(instance, plan, "megatron")
        view = plan_view(instance, plan)
        yield view, result, MegatronLaunch.parse(list(result.args), view.world_size, result.env)


def test_megatron_exports_pass_every_cited_startup_rule():
    """Every exported Megatron argument list, with the script's environment, passes each
    cited validate_args / microbatch-calculator / Megatron-FSDP rule, and FSDP plans unset
    CUDA_DEVICE_MAX_CONNECTIONS where plain TP sets it to 1."""
    from nest_cp.model.launchers.megatron import startup_violations

    fsdp_tp = modelled = 0
    for view, result, launch in _megatron_launches():
        assert startup_violations(launch, model_given=view.model is not None) == [], \
            result.args
        modelled += view.model is not None
        if view.zero >= 2:
            assert launch.use_megatron_fsdp and launch.ckpt_format == "fsdp_dtensor"
            assert "unset CUDA_DEVICE_MAX_CONNECTIONS" in result.text
            assert "CUDA_DEVICE_MAX_CONNECTIONS=1" not in result.text
            assert not launch.use_tp_pp_dp_mapping
            fsdp_tp += view.tp > 1
        elif view.tp > 1:
            assert "export CUDA_DEVICE_MAX_CONNECTIONS=1" in result.text
    assert fsdp_tp >= 2 and modelled >= 10


@pytest.mark.parametrize(("change", "rule"), [
    ({"env": {"CUDA_DEVICE_MAX_CONNECTIONS": "1"}}, "FSDP connections"),
    ({"argv": ["--ckpt-format", "torch_dist"]}, "FSDP checkpoint format"),
    ({"argv": ["--use-tp-pp-dp-mapping"]}, "FSDP rank order"),
    ({"argv": ["--global-batch-size", "63"]}, "global batch"),
    ({"argv": ["--overlap-param-gather"]}, "overlap param gather"),
    ({"world": 18}, "world size"),
    ({"argv": ["--max-position-embeddings", "2048"]}, "position table"),
    ({"argv": ["--fp16"]}, "one precision"),
    ({"argv": ["--hidden-size", "4100"]}, "head width"),
    ({"argv": ["--expert-model-parallel-size", "2"]}, "experts"),
    ({"drop": "--hidden-size"}, "model size given"),
])
def test_each_megatron_rule_catches_what_megatron_asserts(change, rule):
    """The rules are not vacuous: a ZeRO-3, tp=2 export altered the way Megatron-LM asserts
    against (FSDP with CUDA_DEVICE_MAX_CONNECTIONS=1, another checkpoint format, ...) breaks
    exactly the named rule."""
    from nest_cp.model.launchers.megatron import startup_violations

    instance = _llama_instance(True)
    last = instance.workload.num_layers
    plan = _placed(instance, IntraConfig(2), 1, 3, 4, uniform_stages(last, 2, "none"))
    result = export_plan(instance, plan, "megatron")
    argv = list(result.args) + change.get("argv", [])
    if "drop" in change:  # the flag and its value, wherever they are (the last occurrence)
        at = len(argv) - 1 - argv[::-1].index(change["drop"])
        del argv[at:at + 2]
    env = change.get("env", result.env)
    launch = MegatronLaunch.parse(argv, change.get("world", 16), env)
    broken = startup_violations(launch)
    assert broken and all(b.startswith(rule) for b in broken), broken


def test_sequence_parallel_and_attention_follow_the_recorded_workload():
    """An instance made with --sequence-parallel and flash attention exports
    --sequence-parallel and --attention-backend flash at t = 2; materialised without SP
    exports unfused and no SP; an instance file that records neither gets a warning."""
    last = 34
    for sp, attention, backend in ((True, "flash", "flash"),
                                   (False, "materialized", "unfused")):
        instance = _llama_instance(sp, attention)
        plan = _placed(instance, IntraConfig(2), 1, 1, 8, uniform_stages(last, 1, "none"))
        parsed = _args(export_plan(instance, plan, "megatron"))
        assert parsed["sequence_parallel"] is sp and parsed["attention_backend"] == backend
    instance, plan = _load("worked_example_nest")
    result = export_plan(instance, plan, "megatron")
    assert "--attention-backend" not in result.args
    assert any("does not record which attention kernel" in w for w in result.warnings)


def test_recorded_choices_round_trip_through_the_instance_file(tmp_path):
    """workload.attention and workload.sequence_parallel are written and read back."""
    instance = _llama_instance(True, "materialized")
    io.save_instance(instance, tmp_path / "i.json")
    data = json.loads((tmp_path / "i.json").read_text())
    assert data["workload"]["attention"] == "materialized"
    assert data["workload"]["sequence_parallel"] is True
    read = io.load_instance(tmp_path / "i.json").workload
    assert (read.attention, read.sequence_parallel) == (instance.workload.attention, True)


def test_deepspeed_refuses_what_its_engine_cannot_run_with_exit_2():
    """`export --format deepspeed` of the GPT3 plan (t = 8 beside 25 stages) is exit 2 with one
    line naming AutoTP and the cited source; nothing is written."""
    instance_path, plan_path = GOLDEN_CASES["gpt3-175b-tpuv4-1024"]
    result = _cli("export", plan_path, "--instance", instance_path, "--format", "deepspeed")
    assert result.exit_code == 2
    assert len(result.output.strip().splitlines()) == 1
    assert "AutoTP" in result.output and "deepspeed/utils/groups.py" in result.output


def test_torchtitan_refuses_a_model_it_does_not_build_with_exit_2(tmp_path):
    """`export --format torchtitan` of the GPT3 plan is exit 2 with one line: torchtitan
    v0.2.2 builds no GPT-3 (it would refuse the job at startup), naming the architecture and
    the flavors it builds; nothing is written (no job naming flavor 'nest-cp')."""
    instance_path, plan_path = GOLDEN_CASES["gpt3-175b-tpuv4-1024"]
    out = tmp_path / "job.toml"
    result = _cli("export", plan_path, "--instance", instance_path, "--format", "torchtitan",
                  "-o", out)
    assert result.exit_code == 2
    assert len(result.output.strip().splitlines()) == 1
    assert "torchtitan cannot start this plan as exported" in result.output
    assert "builds no model of this architecture (gpt3-175b: 96 layers" in result.output
    assert "llama3 debugmodel/8B/70B/405B" in result.output
    assert "torchtitan/models/llama3/__init__.py:29" in result.output
    assert not out.exists()


def test_torchtitan_without_a_recorded_model_warns_it_trains_the_default():
    """An instance recording no model (older files): the job has no [model] section and a
    warning says torchtitan then trains its default debugmodel (kept behaviour)."""
    instance, plan = _load("interleaved_selective")
    assert instance.workload.model is None
    result = export_plan(instance, plan, "torchtitan")
    assert "model" not in tomllib.loads(result.text)
    assert any("records no model architecture" in w and "debugmodel" in w
               for w in result.warnings)


def test_deepspeed_hostfile_and_torchtitan_script(tmp_path):
    """DeepSpeed's hostfile lists `nodeK slots=N` per host; torchtitan's launch script is
    valid bash that runs torchrun -m torchtitan.train on the TOML it is given."""
    import subprocess

    instance, plan = _load("interleaved_selective")
    plan_path = EXPORT / "interleaved_selective.plan.json"
    instance_path = EXPORT / "interleaved_selective.json"
    hostfile, config = tmp_path / "hostfile", tmp_path / "ds.json"
    result = _cli("export", plan_path, "--instance", instance_path, "--format", "deepspeed",
                  "-o", config, "--hostfile", hostfile)
    assert result.exit_code == 0, result.output
    lines = hostfile.read_text().splitlines()
    assert lines and all(line.split()[1].startswith("slots=") for line in lines)
    assert _ds(config.read_text())["train_micro_batch_size_per_gpu"] == 1
    script, toml = tmp_path / "run.sh", tmp_path / "job.toml"
    result = _cli("export", plan_path, "--instance", instance_path, "--format", "torchtitan",
                  "-o", toml, "--script", script)
    assert result.exit_code == 0, result.output
    stub = tmp_path / "bin"
    stub.mkdir()
    (stub / "torchrun").write_text('#!/bin/sh\necho "torchrun $*"\n')
    (stub / "torchrun").chmod(0o755)
    run = subprocess.run(["bash", str(script), "0", "host0", str(toml)], capture_output=True,
                         text=True, env={"PATH": f"{stub}:/usr/bin:/bin"}, check=True)
    assert f"-m torchtitan.train --job.config_file {toml}" in run.stdout
    assert "--nnodes" in run.stdout
    wrong = _cli("export", plan_path, "--instance", instance_path, "--format", "megatron",
                 "--script", script)
    assert wrong.exit_code == 2


def test_deepspeed_hostfile_is_written_beside_the_config_and_said_in_one_short_line(tmp_path):
    """`export --format deepspeed -o ds.json` writes ds.hostfile (`nodeK slots=N`) and says so
    in one short stderr line; the --include filter is needed (and written) only when some
    host's GPUs are not 0..N-1."""
    instance = _llama_instance(True)
    plan = _placed(instance, IntraConfig(2), 1, 1, 8, uniform_stages(34, 1, "none"))
    io.save_instance(instance, tmp_path / "i.json")
    io.save_plan(plan, tmp_path / "p.json")
    config = tmp_path / "ds.json"
    result = CliRunner().invoke(main, ["export", str(tmp_path / "p.json"), "--instance",
                                       str(tmp_path / "i.json"), "--format", "deepspeed",
                                       "-o", str(config)])
    assert result.exit_code == 0, result.output
    hostfile = tmp_path / "ds.hostfile"
    assert hostfile.read_text().splitlines() == ["node0 slots=8", "node1 slots=8"]
    notes = [line for line in result.stderr.splitlines() if line.startswith("note:")]
    paths = 2 * len(str(hostfile)) + len(str(config))  # the line names them, nothing per host
    assert len(notes) == 1 and len(notes[0]) - paths < 150 and "--include" not in notes[0]
    assert str(hostfile) in notes[0] and not (tmp_path / "ds.hostfile.include").exists()


def test_param_gather_overlap_megatron_cannot_run_is_a_warning():
    """A plan priced with the weight all-gather hidden but gradient reduction exposed: Megatron
    overlaps the gather only with --overlap-grad-reduce, so the export leaves both off and
    says the run is slower than priced."""
    instance, plan = _load("interleaved_selective")
    gather_only = dataclasses.replace(instance, training=dataclasses.replace(
        instance.training, overlap_grad_reduce=False, overlap_param_gather=True))
    result = export_plan(gather_only, plan, "megatron")
    parsed = _args(result)
    assert not parsed["overlap_param_gather"] and not parsed["overlap_grad_reduce"]
    assert any("slower than priced" in warning for warning in result.warnings)


# ------------------------------------------------------------------ the priced model


@pytest.mark.parametrize(("model", "flavor"), [("gpt3-175b", None), ("llama3-70b", "70B"),
                                               ("mixtral-8x7b", None)])
def test_each_launcher_gets_the_priced_model_and_precision(model, flavor):
    """GPT-3 175B, Llama 3 70B and Mixtral 8x7B (t = 2, ZeRO-1, 64 devices): Megatron's
    arguments name the architecture and --bf16 and pass the transcribed validate_args;
    torchtitan's [model] is the shipped flavor (llama3 70B) with bfloat16, and the models
    torchtitan does not build are refused (exit 2) naming the architecture and what it
    builds instead of written with a flavor it refuses; DeepSpeed enables bf16 with fp32 gradient
    reduction (the presets' Megatron Adam prices 4-byte gradients) and names the model in
    a warning."""
    from nest_cp.cli.export.torchtitan import torchtitan_launch
    from nest_cp.model.launchers.deepspeed import refusals
    from nest_cp.model.launchers.deepspeed import startup_violations as ds_violations
    from nest_cp.model.launchers.megatron import startup_violations
    from nest_cp.model.launchers.torchtitan import choice_problems
    from nest_cp.model.launchers.torchtitan import startup_violations as tt_violations
    from nest_cp.profiles import presets

    instance = presets.build_instance(model, 64, "nest-tpuv4-fattree", tp_widths=(2,),
                                      ep_widths=(1,))
    shape = instance.workload.model
    plan = _placed(instance, IntraConfig(2), 1, 1, 32,
                   uniform_stages(instance.workload.num_layers, 1, "none"))
    view = plan_view(instance, plan)
    assert view.precision.value == "bf16" and view.grad_bytes == 4

    megatron = export_plan(instance, plan, "megatron")
    args = _args(megatron)
    assert startup_violations(MegatronLaunch.parse(list(megatron.args), 64, megatron.env)) == []
    assert (args["bf16"], args["fp16"], args["grad_reduce_in_bf16"]) == (True, False, False)
    assert (args["num_layers"], args["hidden_size"], args["ffn_hidden_size"],
            args["num_attention_heads"], args["vocab_size"]) == (
        shape.num_layers, shape.hidden, shape.ffn_hidden, shape.heads, shape.vocab)
    assert args["num_query_groups"] == (shape.kv_heads if shape.kv_heads < shape.heads else 1)
    assert args["group_query_attention"] == (shape.kv_heads < shape.heads)
    assert args["position_embedding_type"] == ("learned_absolute" if shape.max_positions
                                               else "rope")
    assert args["num_experts"] == (shape.num_experts if shape.num_experts > 1 else None)

    if flavor is None:
        with pytest.raises(BackendOptionError) as refused:
            export_plan(instance, plan, "torchtitan")
        assert refused.value.option == "format"
        assert f"torchtitan v0.2.2 builds no model of this architecture ({model}:" in str(
            refused.value)
        assert "it builds llama3 debugmodel/8B/70B/405B" in str(refused.value)
    else:
        titan = export_plan(instance, plan, "torchtitan")
        document = tomllib.loads(titan.text)
        _check_keys(document, TORCHTITAN_KEYS)
        assert tt_violations(torchtitan_launch(document, 64)) == []
        assert choice_problems(document) == []
        assert document["training"]["mixed_precision_param"] == "bfloat16"
        assert document["model"] == {"name": "llama3", "flavor": flavor}

    deepspeed = export_plan(instance, plan, "deepspeed")
    config = _ds(deepspeed.text)
    launch = _deepspeed_launch(config, 64)
    assert refusals(launch) == [] and ds_violations(launch) == []
    assert config["bf16"] == {"enabled": True} and "fp16" not in config
    assert config["communication_data_type"] == "fp32"
    assert any(shape.description in w for w in deepspeed.warnings)


def test_torchtitan_exports_pass_every_cited_startup_rule():
    """Every written torchtitan job, read back, passes the transcribed parallel-dims, batch,
    pipeline-microbatch and model-lookup checks and the config manager's Literal choices."""
    from nest_cp.cli.export.torchtitan import torchtitan_launch
    from nest_cp.model.launchers.torchtitan import choice_problems, startup_violations

    checked = 0
    for instance, plan in _shapes():
        try:
            document = tomllib.loads(export_plan(instance, plan, "torchtitan").text)
        except BackendOptionError as exc:  # the GPT3 plan: not a model torchtitan builds
            assert "builds no model" in str(exc)
            continue
        _check_keys(document, TORCHTITAN_KEYS)
        world = plan_view(instance, plan).world_size
        assert startup_violations(torchtitan_launch(document, world)) == [], document
        assert choice_problems(document) == []
        assert document.get("model", {}).get("flavor") in (None, "8B")
        checked += 1
    assert checked >= 14


@pytest.mark.parametrize(("change", "rule"), [
    ({"model": {"name": "llama3", "flavor": "71B"}}, "model lookup"),
    ({"model": {"name": "gpt3", "flavor": "175B"}}, "model lookup"),
    ({"training": {"local_batch_size": 3, "global_batch_size": 64, "seq_len": 4096}},
     "gradient accumulation"),
    ({"parallelism": {"data_parallel_replicate_degree": 1, "data_parallel_shard_degree": 3,
                      "tensor_parallel_degree": 2, "pipeline_parallel_degree": 1,
                      "pipeline_parallel_microbatch_size": 1}}, "parallel dims"),
])
def test_each_torchtitan_rule_catches_what_torchtitan_asserts(change, rule):
    """The torchtitan rules are not vacuous: a valid Llama 3 70B job passes them all, and
    altered the way torchtitan v0.2.2 refuses at startup it breaks the named rule."""
    from nest_cp.cli.export.torchtitan import torchtitan_launch
    from nest_cp.model.launchers.torchtitan import startup_violations
    from nest_cp.profiles import presets

    instance = presets.build_instance("llama3-70b", 16, "nest-tpuv4-fattree", tp_widths=(2,),
                                      ep_widths=(1,), global_batch=64)
    plan = _placed(instance, IntraConfig(2), 1, 2, 8,
                   uniform_stages(instance.workload.num_layers, 1, "none"))
    document = tomllib.loads(export_plan(instance, plan, "torchtitan").text)
    assert document["model"] == {"name": "llama3", "flavor": "70B"}
    assert startup_violations(torchtitan_launch(document, 16)) == []
    broken = startup_violations(torchtitan_launch(document | change, 16))
    assert any(b.startswith(rule) for b in broken), broken


def test_torchtitan_flavor_table_is_llama3_as_torchtitan_computes_it():
    """The transcribed flavors reproduce torchtitan's SwiGLU width rule on the published
    Llama 3 sizes (8B: 14336, 70B: 28672, 405B: 53248; debugmodel 768), and only an exact
    match is a flavor: Llama 3 8B/70B/405B are llama3/8B/70B/405B; a Llama 2 7B, Mixtral
    8x7B, GPT-3, or a 70B with tied embeddings, biases, dropout, experts or another
    vocabulary is none."""
    from nest_cp.cli.export.torchtitan import flavor_of
    from nest_cp.model.instance import ModelShape
    from nest_cp.model.launchers.torchtitan import FLAVOR_TABLE
    from nest_cp.profiles.hfconfig import spec_from_hf_config
    from nest_cp.profiles.transformer import model_shape

    assert [f.ffn_hidden for f in FLAVOR_TABLE] == [768, 14336, 28672, 53248]
    llama = model_shape(MODELS["llama3-70b"])
    assert flavor_of(llama).flavor == "70B"
    assert flavor_of(model_shape(LLAMA3_8B)).flavor == "8B"
    config = json.loads((Path(__file__).parent.parent / "instances" / "models" /
                         "llama3-405b.json").read_text())
    assert flavor_of(model_shape(spec_from_hf_config(config, name="405b"))).flavor == "405B"
    debug = ModelShape("debug", 6, 256, 768, 16, 16, 16, 2048)
    assert flavor_of(debug).flavor == "debugmodel"
    for changed in ({"tied_embeddings": True}, {"bias": True}, {"dropout": True},
                    {"num_experts": 8, "top_k": 2}, {"vocab": 128000}, {"kv_heads": 16}):
        assert flavor_of(dataclasses.replace(llama, **changed)) is None, changed
    for name in ("llama2-7b", "mixtral-8x7b", "gpt3-175b", "bert-large"):
        assert flavor_of(model_shape(MODELS[name])) is None, name


@pytest.mark.parametrize(("name", "weight", "grad", "expected"), [
    ("adam-megatron", 2, 4, "bf16"), ("adam-megatron-fp16", 2, 2, "fp16"),
    ("adam-mixed", 2, 2, "bf16"), ("adam-fp32", 4, 4, "fp32")])
def test_precision_follows_the_optimizer_convention(name, weight, grad, expected):
    """2-byte weights are bf16 unless the optimizer is named fp16, 4-byte weights fp32; each
    launcher spells it (Megatron --bf16/--fp16, torchtitan mixed_precision_param, DeepSpeed
    bf16/fp16 blocks) and fp32 enables neither."""
    from nest_cp.model.instance import Optimizer

    instance = _llama_instance(True)
    instance = dataclasses.replace(instance, training=dataclasses.replace(
        instance.training, optimizer=Optimizer(weight, grad, 12, name)))
    plan = _placed(instance, IntraConfig(2), 1, 1, 8, uniform_stages(34, 1, "none"))
    args = _args(export_plan(instance, plan, "megatron"))
    assert (args["bf16"], args["fp16"]) == (expected == "bf16", expected == "fp16")
    assert args["grad_reduce_in_bf16"] == (expected == "bf16" and grad == 2)
    titan = tomllib.loads(export_plan(instance, plan, "torchtitan").text)
    assert titan["training"]["mixed_precision_param"] == (
        "float32" if expected == "fp32" else "bfloat16")
    config = _ds(export_plan(instance, plan, "deepspeed").text)
    assert {key for key in ("bf16", "fp16") if key in config} == (
        set() if expected == "fp32" else {expected})


def test_megatron_refuses_expert_parallelism_in_fp16_with_exit_2(tmp_path):
    """Megatron core_v0.15.3 asserts 'Expert parallelism is not supported with fp16 training':
    a Mixtral plan with e = 2 priced in fp16 is refused, exit 2 and one line naming it."""
    from nest_cp.profiles import presets

    instance = presets.build_instance("mixtral-8x7b", 16, "nest-tpuv4-fattree", tp_widths=(1,),
                                      ep_widths=(2,), global_batch=64,
                                      optimizer=presets.MEGATRON_FP16_ADAM)
    plan = _placed(instance, IntraConfig(1, 2), 1, 1, 8,
                   uniform_stages(instance.workload.num_layers, 1, "none"))
    io.save_instance(instance, tmp_path / "i.json")
    io.save_plan(plan, tmp_path / "p.json")
    result = _cli("export", tmp_path / "p.json", "--instance", tmp_path / "i.json", "--format",
                  "megatron")
    assert result.exit_code == 2
    assert len(result.output.strip().splitlines()) == 1
    assert "Expert parallelism is not supported with fp16 training" in result.output
    assert _ds(export_plan(instance, plan, "deepspeed").text)["fp16"] == {"enabled": True}
