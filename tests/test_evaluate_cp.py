"""The evaluator's context-parallelism terms (cost model v4, docs/context-parallelism.md)
against the hand-computed worked example, and the file formats that carry them.

The worked example: §3.1's cluster (two nodes of two devices: 1e11 B/s and 1 us inside a
node, 1e10 B/s and 10 us between), one layer profiled at (t, e, c, b) = (1, 1, 2, 1): fwd
2 ms, bwd 4 ms, attention core 1 ms / 2 ms, 1e9 dense parameters, act 1e9, ckpt 1e8, out
1e6, cp_kv_bytes 5e7; B = 4, b = 1, S = 1, d = 2 (m = 2), optimizer 2/4/12.
"""

import dataclasses
import json
from pathlib import Path

import pytest

from nest_cp import (
    IntraConfig,
    Plan,
    Stage,
    evaluate,
    instance_from_dict,
    load_instance,
    load_plan,
    plan_from_dict,
)
from nest_cp.cost.terms import ContextPaths, context_ticks
from nest_cp.io.writers import instance_to_dict, plan_to_dict
from nest_cp.model.errors import InstanceFormatError
from nest_cp.model.instance import (
    Cluster,
    CpComm,
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
from nest_cp.model.network import NetworkModel
from nest_cp.model.plan import context_groups, expert_groups, tensor_groups

CP2 = IntraConfig(tp=1, ep=1, cp=2)
INSIDE_NODES = (((0, 1), (2, 3)),)  # (A): each replica's CP ring inside one node
ACROSS_NODES = (((0, 2), (1, 3)),)  # (B): each ring crosses the spine


def _profile(**changes) -> LayerProfile:
    fields = dict(fwd_s=2e-3, bwd_s=4e-3, attn_fwd_s=1e-3, attn_bwd_s=2e-3,
                  dense_params=10**9, expert_params=0, act_bytes=10**9, ckpt_bytes=10**8,
                  out_bytes=10**6, cp_kv_bytes=5 * 10**7)
    return LayerProfile(**(fields | changes))


def _instance(comm: CpComm = CpComm.P2P, **profile_changes) -> Instance:
    cluster = Cluster(4, 80 * 10**9, HierarchicalNetwork((
        Tier("node", 2, 1e11, 1e-6), Tier("spine", 2, 1e10, 1e-5))))
    workload = Workload("one-attention-layer",
                        (Layer("block", {(CP2, 1): _profile(**profile_changes)}),))
    training = TrainingSetup(
        global_batch=4, seq_len=8, microbatches=(1,),
        optimizer=Optimizer(name="adam-megatron", weight_bytes=2, grad_bytes=4, state_bytes=12),
        zero_stages=(0, 1), recompute_modes=(RecomputeMode.NONE, RecomputeMode.FULL),
        context_parallel=(2,), cp_comm=comm)
    return Instance(workload, cluster, training, name="cp-worked")


def _plan(placement=INSIDE_NODES, zero: int = 0,
          recompute: RecomputeMode = RecomputeMode.NONE) -> Plan:
    return Plan(CP2, 1, zero, 2, (Stage(0, 0, recompute),), placement)


def test_p2p_inside_nodes_worked_example():
    """(A): P = 5e7/1e11 s + 1 us = 501,000 against X = 500,000 exposes 1,000 forward and
    (P2 = 1,001,000, Xb = 1,000,000) 1,000 backward: τ = 6,002,000; the dense sync runs over
    d·c = 4 ranks, tier 1 with two channels: 300,060,000; T = 312,064,000; memory 18e9 +
    1e9 + the two K/V buffers 1e8 = 19.1e9."""
    result = evaluate(_instance(), _plan())
    assert result.feasible, result.violations
    assert result.num_microbatches == 2
    assert result.tau_max_ticks == 6_002_000
    assert result.stages[0].context_ticks == 2_000
    assert result.sync_ticks == 300_060_000
    assert result.objective_ticks == 312_064_000
    assert result.stages[0].memory_bytes == 19_100_000_000


def test_p2p_zero1_shards_over_replicas_and_context_ranks():
    """(A) with z = 1: RS(4e9) 150,030,000 + AG(2e9) 75,030,000 over the four ranks,
    T = 237,064,000; the optimizer state is sharded over d·c = 4: 1e9·(2 + 4 + 12/4) + 1e9
    + 1e8 = 10.1e9."""
    result = evaluate(_instance(), _plan(zero=1))
    assert result.stages[0].reduce_ticks == 150_030_000
    assert result.stages[0].gather_ticks == 75_030_000
    assert result.objective_ticks == 237_064_000
    assert result.stages[0].memory_bytes == 10_100_000_000


def test_p2p_full_recompute_charges_the_forward_ring_again():
    """(A) with full recompute: τ = 8,000,000 + 3·1,000 (forward, backward, rerun forward)
    = 8,003,000 and T = 316,066,000."""
    result = evaluate(_instance(), _plan(recompute=RecomputeMode.FULL))
    assert result.tau_max_ticks == 8_003_000
    assert result.stages[0].recompute_ticks == 2_001_000  # the forward rerun and its ring
    assert result.objective_ticks == 316_066_000


def test_p2p_across_nodes_worked_example():
    """(B): rings across the spine: P = 5,010,000 exposes 4,510,000 forward, P2 =
    10,010,000 exposes 9,010,000 backward; τ = 19,520,000, T = 339,100,000."""
    result = evaluate(_instance(), _plan(ACROSS_NODES))
    assert result.stages[0].context_ticks == 13_520_000
    assert result.tau_max_ticks == 19_520_000
    assert result.objective_ticks == 339_100_000


def test_a2a_worked_example():
    """(C): a2a with cp_a2a_bytes 2e8 on placement (A): each all-to-all 0.5·2e8/1e11 s + 1 us
    = 1,001,000, four per microbatch: τ = 10,004,000, T = 320,068,000; no K/V buffers."""
    result = evaluate(_instance(CpComm.A2A, cp_a2a_bytes=2 * 10**8), _plan())
    assert result.tau_max_ticks == 10_004_000
    assert result.objective_ticks == 320_068_000
    assert result.stages[0].memory_bytes == 19 * 10**9


def test_a2a_recompute_reruns_the_forward_all_to_alls():
    """Under full recompute the two forward all-to-alls run again: τ = 8,000,000 + 6·1,001,000."""
    result = evaluate(_instance(CpComm.A2A, cp_a2a_bytes=2 * 10**8),
                      _plan(recompute=RecomputeMode.FULL))
    assert result.tau_max_ticks == 8_000_000 + 6 * 1_001_000


def test_default_placement_is_megatron_order():
    """Without a placement, ranks sit in Megatron's order t, c, e, replica, stage: the CP
    pairs {0, 1} and {2, 3} of placement (A)."""
    result = evaluate(_instance(), _plan(placement=None))
    assert result.plan.placement == INSIDE_NODES
    assert result.objective_ticks == 312_064_000


def test_ring_of_four_pays_its_slowest_consecutive_pair():
    """c = 4 on devices 0..3 (ring 0-1-2-3-0): pairs 1-2 and 3-0 cross the spine, P =
    5,010,000 against X = 1,000,000 / 4 = 250,000: forward 3·4,760,000; P2 = 10,010,000
    against Xb = 500,000: backward 3·9,510,000."""
    instance = _instance()
    config = IntraConfig(cp=4)
    paths = ContextPaths.of_replica(NetworkModel(instance.cluster), (0, 1, 2, 3), config)
    assert context_ticks(_profile(), config, CpComm.P2P, paths, 1e-9) == (
        3 * 4_760_000, 3 * 9_510_000)
    inside = ContextPaths.of_replica(NetworkModel(instance.cluster), (0, 1, 2, 3), CP2)
    assert context_ticks(_profile(), IntraConfig(), CpComm.P2P, inside, 1e-9) == (0, 0)


def test_rank_order_is_tensor_context_expert():
    """j = t_index + t·c_index + t·c·e_index: with t = c = e = 2, the TP groups are pairs of
    consecutive ranks, the CP groups stride t, the EP groups stride t·c."""
    config = IntraConfig(tp=2, ep=2, cp=2)
    assert config.devices == 8
    assert set(tensor_groups(config)) == {(0, 1), (2, 3), (4, 5), (6, 7)}
    assert set(context_groups(config)) == {(0, 2), (1, 3), (4, 6), (5, 7)}
    assert set(expert_groups(config)) == {(0, 4), (1, 5), (2, 6), (3, 7)}
    assert tensor_groups(IntraConfig(tp=2, ep=2)) == ((0, 1), (2, 3))  # c = 1 as before


def test_plan_with_a_context_width_not_allowed_is_malformed():
    """A plan whose c is not among training.context_parallel is a violation naming
    config.cp, not a price."""
    instance = _instance()
    instance = dataclasses.replace(instance, training=dataclasses.replace(
        instance.training, context_parallel=(1, 2)))
    with pytest.raises(InstanceFormatError):  # no c = 1 profile is fine; none at all is not
        dataclasses.replace(instance, training=dataclasses.replace(
            instance.training, context_parallel=(1,)))
    result = evaluate(instance, dataclasses.replace(_plan(), config=IntraConfig(cp=4)))
    assert result.objective_ticks is None
    assert "config.cp" in result.malformed_fields


def test_formats_round_trip_and_price_the_same():
    """An instance and a plan with context parallelism written and read back price the same;
    the files carry cp, the new profile fields and training.context_parallel / cp_comm."""
    instance = _instance(CpComm.A2A, cp_a2a_bytes=2 * 10**8)
    data = instance_to_dict(instance)
    profile = data["workload"]["layers"][0]["profiles"][0]
    assert profile["cp"] == 2 and profile["cp_kv_bytes"] == 5 * 10**7
    assert data["training"]["context_parallel"] == [2] and data["training"]["cp_comm"] == "a2a"
    plan_data = plan_to_dict(_plan())
    assert plan_data["config"] == {"tp": 1, "ep": 1, "cp": 2}
    again = evaluate(instance_from_dict(data), plan_from_dict(plan_data))
    assert again.objective_ticks == evaluate(instance, _plan()).objective_ticks == 320_068_000


def test_files_without_context_parallelism_are_written_as_before(worked):
    """c = 1 everywhere: no cp key in profiles, plans or training (older files unchanged)."""
    data = instance_to_dict(worked)
    assert "context_parallel" not in data["training"] and "cp_comm" not in data["training"]
    assert all("cp" not in p and "cp_kv_bytes" not in p
               for layer in data["workload"]["layers"] for p in layer["profiles"])
    assert "cp" not in plan_to_dict(Plan(IntraConfig(), 1, 0, 2, (Stage(0, 0), Stage(1, 1))))[
        "config"]


@pytest.mark.parametrize(("where", "value", "field"), [
    ("profile", {"cp": 0}, "workload.layers[0].profiles[0].cp"),
    ("profile", {"cp_kv_bytes": -1}, "workload.layers[0].profiles[0].cp_kv_bytes"),
    ("profile", {"attn_fwd_s": 0.5}, "workload.layers[0].profiles[0].attn_fwd_s"),
    ("profile", {"attn_fwd_s": None}, "workload.layers[0].profiles[0].attn_fwd_s"),
    ("training", {"context_parallel": [0]}, "training.context_parallel[0]"),
    ("training", {"context_parallel": [2, 2]}, "training.context_parallel"),
    ("training", {"cp_comm": "ring"}, "training.cp_comm"),
    ("training", {"context_parallel": [4]}, "training.context_parallel"),
])
def test_malformed_context_fields_name_their_field(where, value, field):
    """Every malformed context-parallel value is one error naming its field."""
    data = instance_to_dict(_instance())
    target = data["workload"]["layers"][0]["profiles"][0] if where == "profile" \
        else data["training"]
    target.update(value)
    with pytest.raises(InstanceFormatError) as raised:
        instance_from_dict(data, file="cp.json")
    assert raised.value.field == field, str(raised.value)
    assert "cp.json" in str(raised.value)


@pytest.mark.parametrize(("instance_file", "plan_file", "expected"), [
    ("cp_worked_example.json", None, 312_064_000),
    ("cp_worked_example.json", "plan_cp_across_nodes.json", 339_100_000),
    ("cp_worked_example_a2a.json", None, 320_068_000),
])
def test_documented_example_files(instance_file, plan_file, expected):
    """The files docs/context-parallelism.md reproduces its example from price as it says
    (no plan file: d = 2, c = 2 in the default layout, placement (A))."""
    data = Path(__file__).parent / "data"
    instance = load_instance(data / instance_file)
    plan = load_plan(data / plan_file) if plan_file else _plan(placement=None)
    assert evaluate(instance, plan).objective_ticks == expected


def test_huge_ring_volume_is_refused_at_load():
    """The iteration-time bound that keeps every backend's integers exact counts the context
    terms: a ring volume no iteration could price within 2**53 ticks is refused at load."""
    with pytest.raises(InstanceFormatError):
        _instance(cp_kv_bytes=10**18)
    with pytest.raises(InstanceFormatError):
        _instance(CpComm.A2A, cp_a2a_bytes=10**18)


def test_malformed_context_field_exits_2_with_one_line(tmp_path):
    """On the command line a malformed context field is one line on stderr naming the file
    and the field, exit 2; a plan with a malformed cp likewise."""
    from click.testing import CliRunner

    from nest_cp.cli import main

    data = instance_to_dict(_instance())
    data["training"]["cp_comm"] = "ring"
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(data))
    result = CliRunner().invoke(main, ["evaluate", str(bad), "--pp", "1", "--dp", "2"])
    assert result.exit_code == 2
    assert len(result.stderr.strip().splitlines()) == 1
    assert "bad.json" in result.stderr and "training.cp_comm" in result.stderr
    good = tmp_path / "good.json"
    good.write_text(json.dumps(instance_to_dict(_instance())))
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"config": {"tp": 1, "cp": -2}, "dp": 2,
                                "stages": [{"first_layer": 0, "last_layer": 0}]}))
    result = CliRunner().invoke(main, ["evaluate", str(good), str(plan)])
    assert result.exit_code == 2
    assert "plan.json" in result.stderr and "config.cp" in result.stderr
