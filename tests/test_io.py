"""Loading and saving instances and plans, and one clear error for every malformed input."""

import json
from pathlib import Path

import pytest

from nest_cp import (
    InstanceFormatError,
    PlanFormatError,
    evaluate,
    instance_from_dict,
    instance_to_dict,
    load_instance,
    load_plan,
    save_instance,
    save_plan,
)
from nest_cp.model.instance import RecomputeMode

DATA = Path(__file__).parent / "data"


@pytest.mark.parametrize("name, field, expected", [
    ("broken_missing_field.json", "training.global_batch", "to be present"),
    ("broken_wrong_type.json", "cluster.num_devices", "an integer >= 1"),
    ("broken_negative_size.json", "cluster.network.tiers[0].size", "an integer >= 1"),
    ("broken_tiers_too_small.json", "cluster.network.tiers", "product is >= num_devices = 5"),
    ("broken_unknown_preset.json", "workload.preset", "expected"),
    ("broken_missing_profile.json", "workload.layers[1].profiles", "tp=2, ep=1, microbatch=1"),
    ("broken_unknown_field.json", "training.global_bacth", "one of the fields"),
    ("broken_bad_collective.json", "workload.layers[0].profiles[0].collectives[0].kind",
     "one of"),
    ("broken_unknown_link_node.json", "cluster.network.links[1].b", "a switch name"),
    ("broken_disconnected_graph.json", "cluster.network.links", "connecting every device"),
    ("broken_reserve_out_of_range.json", "cluster.hbm_reserve", "[0, 1)"),
    ("broken_repeat_too_many.json", "workload.layers[0].repeat", "at most 100000 layers"),
    ("broken_tick_overflow.json", "workload.layers[0]", "below 2**53 ticks"),
    ("broken_tiny_bandwidth.json", "training.tick_s", "below 2**53 ticks"),
    ("broken_cluster_name.json", "cluster.name", "a non-empty string"),
    ("broken_duplicate_microbatches.json", "training.microbatches", "distinct sizes"),
    ("broken_duplicate_key.json", "global_batch", "each key once"),
    ("broken_duplicate_key.yaml", "workload", "each key once"),
    ("broken_wgrad_above_bwd.json", "workload.layers[0].profiles[0].wgrad_s", "at most bwd_s"),
    ("broken_selective_half.json", "workload.layers[0].profiles[0].sel_act_bytes",
     "sel_fwd_s and sel_act_bytes given together"),
    ("broken_sdp_fraction.json", "workload.layers[0].profiles[0].sdp_fraction", "[0, 1]"),
    ("broken_peak_flops.json", "cluster.peak_flops_per_s", "a finite number > 0"),
    ("broken_recompute_both.json", "training.allow_recompute", "not both"),
    ("broken_recompute_mode.json", "training.recompute[1]", "one of 'none', 'selective'"),
    ("broken_selective_without_profile.json", "training.recompute",
     "sel_fwd_s and sel_act_bytes in every profile when 'selective' is allowed"),
    ("broken_virtual_stages.json", "training.virtual_stages[1]", "an integer >= 1"),
    ("broken_overlap_type.json", "training.overlap_grad_reduce", "true or false"),
    ("broken_not_json.json", None, "valid JSON"),
    ("broken_yaml.yaml", None, "valid YAML"),
    ("broken_missing_reference.json", None, "an existing file"),
    ("broken_huge_global_batch.json", "training.global_batch", "at most 19 digits"),
    ("broken_long_integer.json", "cluster.hbm_bytes", "at most 19 digits"),
    ("broken_batch_overflow.json", "training.global_batch", "below 2**53 ticks"),
    ("broken_provenance.json", "provenance.nested", "a string or a mapping"),
    ("broken_alias_bomb.yaml", None, "at most 10000000 values with YAML aliases expanded"),
    ("broken_recursive_alias.yaml", None, "without recursive aliases"),
    ("broken_model_kv_heads.json", "workload.model.kv_heads", "a divisor of the 4 heads"),
    ("broken_model_positions.json", "workload.model.positions", "one of 'learned', 'rope'"),
    ("plan_megatron_default.json", None,
     "expected an instance file (workload, cluster, training), got a plan file"),
])
def test_broken_instance_names_file_field_and_expectation(name, field, expected):
    """Every malformed instance raises one InstanceFormatError naming file, field, expectation."""
    with pytest.raises(InstanceFormatError) as info:
        load_instance(DATA / name)
    message = str(info.value)
    assert "\n" not in message
    assert expected in message
    if field is not None:
        assert info.value.field == field
    assert info.value.file is not None and info.value.file.endswith(
        "no_such_workload.json" if "reference" in name else name)


@pytest.mark.parametrize("name, expected", [
    ("broken_plan_wrong_type.json", "dp: expected an integer >= 1"),
    ("broken_plan_zero.json", "zero: expected a ZeRO stage in 0..3"),
    ("broken_plan_not_mapping.json", "expected a mapping"),
    ("broken_plan_recompute_mode.json", "stages[0].recompute: expected one of 'none'"),
    ("broken_plan_virtual_zero.json", "virtual_stages: expected an integer >= 1"),
    ("worked_example.json", "expected a plan file"),
    ("worked_example.json", "got an instance file"),
])
def test_broken_plan_is_a_plan_format_error(name, expected):
    """Malformed plan files raise PlanFormatError with the field and what was expected."""
    with pytest.raises(PlanFormatError, match=expected.replace("[", r"\[").replace(".", r"\.")):
        load_plan(DATA / name)


def test_yaml_and_split_files_load_the_same_instance():
    """The YAML copies (one with JSON-style exponents like 80e9) and the split-file version
    (workload in its own file) equal the JSON one."""
    base = instance_to_dict(load_instance(DATA / "worked_example.json"))
    for other in ("worked_example.yaml", "worked_example_split.json",
                  "worked_example_exponents.yaml"):
        data = instance_to_dict(load_instance(DATA / other))
        data["name"] = base["name"]
        assert data == base


def test_instance_round_trip_preserves_evaluation(tmp_path):
    """Saving and reloading an instance and plan changes nothing the evaluator sees."""
    instance = load_instance(DATA / "two_tier_tp2.json")
    plan = load_plan(DATA / "plan_megatron_default.json")
    save_instance(instance, tmp_path / "copy.json")
    save_plan(plan, tmp_path / "plan.yaml")
    again = load_instance(tmp_path / "copy.json")
    assert again.workload.layers[1].profiles == instance.workload.layers[1].profiles
    assert again.workload.num_layers == 2
    assert evaluate(again, load_plan(tmp_path / "plan.yaml")).objective_ticks == \
        evaluate(instance, plan).objective_ticks


def test_optional_profile_fields_round_trip(tmp_path: Path):
    """wgrad, selective, FLOPs, SDP fields and the device peak survive save and load."""
    instance = load_instance(DATA / "profile_optional_fields.json")
    profile = instance.workload.layers[0].profiles[next(iter(instance.workload.layers[0].profiles))]
    assert (profile.wgrad_s, profile.sel_fwd_s, profile.sel_act_bytes) == (0.001, 0.0002, 3 * 10**9)
    assert (profile.flops, profile.sel_flops, profile.sdp_units, profile.sdp_fraction) == \
        (1e12, 1e11, 4, 0.8)
    assert instance.cluster.peak_flops_per_s == 1e15
    save_instance(instance, tmp_path / "copy.json")
    assert instance_to_dict(load_instance(tmp_path / "copy.json")) == instance_to_dict(instance)


def test_optional_profile_fields_default_to_unknown():
    """Without the optional fields a profile has no wgrad, selective or FLOP data, no SDP units."""
    profile = next(iter(load_instance(DATA / "worked_example.json").workload.layers[0]
                        .profiles.values()))
    assert (profile.wgrad_s, profile.sel_fwd_s, profile.sel_act_bytes, profile.flops) == \
        (None, None, None, None)
    assert (profile.sdp_units, profile.has_selective) == (0, False)


def test_training_choices_read_and_written():
    """training.recompute, virtual_stages and overlap_grad_reduce are read, written and read
    back; the old allow_recompute true / false means (none, full) / (none,)."""
    instance = load_instance(DATA / "selective_example.json")
    assert [m.value for m in instance.training.recompute_modes] == ["none", "selective", "full"]
    interleaved = load_instance(DATA / "interleaved_example.json")
    assert interleaved.training.virtual_stages == (1, 2)
    data = instance_to_dict(interleaved)["training"]
    assert (data["recompute"], data["virtual_stages"], data["overlap_grad_reduce"]) == (
        ["none", "full"], [1, 2], False)
    assert "allow_recompute" not in data
    assert load_instance(DATA / "worked_example.json").training.recompute_modes == (
        RecomputeMode.NONE,)
    assert load_instance(DATA / "two_tier_tp2.json").training.recompute_modes == (
        RecomputeMode.NONE, RecomputeMode.FULL)


def test_default_training_choices_are_plain_1f1b():
    """Without the new fields: recompute none or full, v = 1 only, no overlap (DESIGN §3.2)."""
    data = json.loads((DATA / "worked_example.json").read_text())
    del data["training"]["allow_recompute"]
    training = instance_from_dict(data).training
    assert training.recompute_modes == (RecomputeMode.NONE, RecomputeMode.FULL)
    assert (training.virtual_stages, training.overlap_grad_reduce) == ((1,), False)


def test_plan_modes_and_virtual_stages_round_trip(tmp_path: Path):
    """A plan's recompute modes (v1 booleans read as full / none) and v survive save and load."""
    plan = load_plan(DATA / "plan_v1_booleans.json")
    assert [s.recompute for s in plan.stages] == [RecomputeMode.FULL, RecomputeMode.NONE]
    interleaved = load_plan(DATA / "plan_interleaved_v2.json")
    assert (interleaved.virtual_stages, interleaved.num_stages) == (2, 2)
    for original in (plan, interleaved):
        save_plan(original, tmp_path / "plan.json")
        assert load_plan(tmp_path / "plan.json") == original
    written = json.loads((tmp_path / "plan.json").read_text())
    assert written["virtual_stages"] == 2 and written["stages"][0]["recompute"] == "none"


def test_recompute_mode_has_no_truth_value():
    """bool(mode) raises, so code written for the old boolean field fails loudly."""
    with pytest.raises(TypeError, match="no truth value"):
        bool(RecomputeMode.NONE)


def test_endless_input_is_refused_at_the_size_cap():
    """/dev/zero as an instance (an endless stream) stops at the 64 MiB cap with one error."""
    with pytest.raises(InstanceFormatError, match="at most 64 MiB") as info:
        load_instance("/dev/zero")
    assert info.value.file == "/dev/zero"


def test_provenance_may_be_a_text_or_a_flat_mapping(tmp_path):
    """Provenance stays free-form within its type: a string, or names to texts and lists."""
    document = instance_to_dict(load_instance(DATA / "worked_example.json"))
    document["provenance"] = {"source": "DESIGN.md 3.1", "year": 2026, "authors": ["a", "b"]}
    path = tmp_path / "ok.json"
    path.write_text(json.dumps(document))
    assert load_instance(path).name == "worked_example"


def test_a_preset_workload_records_its_model_and_it_round_trips(tmp_path):
    """instance new's workload records the architecture profiled; save/load keeps it equal."""
    from nest_cp.profiles.presets import MODELS, build_instance

    instance = build_instance("mixtral-8x7b", 64, "nest-tpuv4-fattree")
    model = instance.workload.model
    assert (model.num_layers, model.kv_heads, model.num_experts) == (32, 8, 8)
    assert model.ffn_hidden == MODELS["mixtral-8x7b"].ffn_hidden
    save_instance(instance, tmp_path / "m.json")
    assert load_instance(tmp_path / "m.json").workload.model == model
