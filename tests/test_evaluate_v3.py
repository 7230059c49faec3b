"""The evaluator's cost model v3 terms (docs/cost-model.md §5) against hand-computed numbers.

Multi-channel collectives (a), link efficiency (b), ZeRO 1/2 sync as a reduce-scatter plus
an all-gather (c) and the overlapped parameter gather (d), on the worked example's cluster
(two nodes of two devices: 1e11 B/s and 1 us inside a node, 1e10 B/s and 10 us between).
"""

import dataclasses
import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from nest_cp import IntraConfig, Plan, Stage, evaluate, instance_from_dict, load_instance, load_plan
from nest_cp.cli import main
from nest_cp.cost.terms import gradient_sync_parts
from nest_cp.io.writers import instance_to_dict
from nest_cp.model.instance import CollectiveKind, Optimizer
from nest_cp.model.network import NetworkModel, collective_ticks
from nest_cp.model.plan import NEST_LAYOUT

DATA = Path(__file__).parent / "data"
ALL_FOUR = (((0,), (1,), (2,), (3,)),)  # S = 1, d = 4: replica r on device r
MEGATRON_OPTIMIZER = Optimizer(name="adam", weight_bytes=2, grad_bytes=4, state_bytes=12)


def _training(instance, **changes):
    return dataclasses.replace(instance, training=dataclasses.replace(instance.training,
                                                                      **changes))


def _one_stage_on_four(zero: int = 0) -> Plan:
    return Plan(IntraConfig(), 1, zero, 4, (Stage(0, 1),), ALL_FOUR)


# ------------------------------------------------------------------ (a) channels


def test_multi_channel_sync_over_two_nodes(worked):
    """§5 (a): S = 1, d = 4 on devices 0-3; the sync group has k = 2 members per node and
    runs two rings at min(2 * 1e10, 1e11) = 2e10 B/s: all-reduce of 4e9 B = 1.5 * 4e9 / 2e10 s
    + 60 us = 300,060,000 ticks (one channel: 600,060,000); T = 2 * 6,000,000 + 300,060,000;
    memory 32e9 + 8e9."""
    result = evaluate(worked, _one_stage_on_four())
    assert result.num_microbatches == 2 and result.tau_max_ticks == 6_000_000
    assert result.sync_ticks == 300_060_000
    assert result.objective_ticks == 312_060_000
    assert result.stages[0].memory_bytes == 40 * 10**9


def test_one_member_per_node_keeps_one_channel(worked):
    """§3.1's layouts are unchanged: their tier-1 groups ({0, 2}, {1, 3}) hold one device per
    node (k = 1), so the NEST layout still costs 215,075,000 and Megatron's 35,552,000."""
    nest = Plan(IntraConfig(), 1, 0, 2, (Stage(0, 0), Stage(1, 1))).with_placement(
        NEST_LAYOUT.placement(IntraConfig(), 2, 2, range(4)))
    assert evaluate(worked, nest).objective_ticks == 215_075_000
    assert evaluate(worked, load_plan(DATA / "plan_megatron_default.json")).objective_ticks \
        == 35_552_000


def test_channels_saturate_at_the_inner_tier():
    """β = max(β_K, min(k β_K, β_0)): never above tier 0's bandwidth, never below one
    channel's, whatever k; k is the fewest members in any node the group touches."""
    instance = load_instance(DATA / "worked_example.json")
    network = NetworkModel(instance.cluster)
    tier0, tier1 = network.tier_path(0), network.tier_path(1)
    assert network.channel_path(1, 1) == tier1
    assert network.channel_path(1, 2).bandwidth_Bps == 2 * tier1.bandwidth_Bps
    assert network.channel_path(1, 2).latency_s == tier1.latency_s
    assert network.channel_path(1, 50).bandwidth_Bps == tier0.bandwidth_Bps
    assert network.channel_path(0, 7) == tier0
    assert network.group_path([0, 1, 2, 3]) == network.channel_path(1, 2)
    assert network.group_path([0, 1, 2]) == tier1  # node 1 holds one member: k = 1
    assert network.max_useful_channels(1) == 2  # the node has two devices


# ------------------------------------------------------------------ (b) efficiency


def test_efficiency_scales_every_transfer_and_collective(worked):
    """§5 (b): tier 1 at efficiency 0.5 reaches 5e9 B/s.  Megatron layout of §3.1: its
    pipeline pairs cross tier 1: 1e6 / 5e9 s + 10 us = 210,000 ticks, tau = 3,210,000; the
    sync stays in tier 0: T = 5 * 3,210,000 + 20,002,000 = 36,052,000."""
    network = worked.cluster.network
    slow = dataclasses.replace(network.tiers[1], efficiency=0.5)
    cluster = dataclasses.replace(worked.cluster, network=dataclasses.replace(
        network, tiers=(network.tiers[0], slow)))
    instance = dataclasses.replace(worked, cluster=cluster)
    result = evaluate(instance, load_plan(DATA / "plan_megatron_default.json"))
    assert result.tau_max_ticks == 3_210_000
    assert result.objective_ticks == 36_052_000


def test_efficiency_must_be_a_fraction_of_the_link():
    with pytest.raises(ValueError, match="efficiency"):
        dataclasses.replace(load_instance(DATA / "worked_example.json").cluster.network.tiers[0],
                            efficiency=1.5)


# ------------------------------------------------------------------ (c), (d) ZeRO 1/2 sync


@pytest.fixture
def megatron_optimizer(worked):
    """§5 (c)'s setup: the (a) example with Megatron's 2/4/12 bytes and ZeRO 1 allowed."""
    return _training(worked, optimizer=MEGATRON_OPTIMIZER, zero_stages=(0, 1))


def test_zero1_sync_is_reduce_scatter_then_all_gather(megatron_optimizer):
    """§5 (c): reduce-scatter of P g = 8e9 B at 2e10 B/s = 0.75 * 8e9 / 2e10 s + 30 us =
    300,030,000 ticks, all-gather of P w = 4e9 B = 150,030,000: sync 450,060,000 (z = 0: an
    all-reduce of 8e9 B, 600,060,000)."""
    zero1 = evaluate(megatron_optimizer, _one_stage_on_four(zero=1))
    assert zero1.stages[0].reduce_ticks == 300_030_000
    assert zero1.stages[0].gather_ticks == 150_030_000
    assert zero1.sync_ticks == zero1.exposed_sync_ticks == 450_060_000
    assert zero1.objective_ticks == 12_000_000 + 450_060_000
    zero0 = evaluate(megatron_optimizer, _one_stage_on_four(zero=0))
    assert zero0.sync_ticks == 600_060_000 and zero0.stages[0].gather_ticks == 0


def test_overlapped_param_gather_and_grad_reduce(megatron_optimizer):
    """§5 (d), both flags: R = 4,000,000 and F = 2,000,000 per microbatch; exposed
    296,030,000 + 148,030,000 = 444,060,000; T = 456,060,000."""
    both = _training(megatron_optimizer, overlap_grad_reduce=True, overlap_param_gather=True)
    result = evaluate(both, _one_stage_on_four(zero=1))
    stage = result.stages[0]
    assert (stage.backward_ticks, stage.forward_ticks) == (4_000_000, 2_000_000)
    assert result.exposed_sync_ticks == 444_060_000
    assert result.objective_ticks == 456_060_000


@pytest.mark.parametrize(("grad", "param", "exposed"), [
    (False, False, 450_060_000),
    (True, False, 296_030_000 + 150_030_000),   # only the reduce-scatter hides
    (False, True, 300_030_000 + 148_030_000),   # only the all-gather hides
])
def test_each_flag_hides_only_its_own_phase(megatron_optimizer, grad, param, exposed):
    flagged = _training(megatron_optimizer, overlap_grad_reduce=grad, overlap_param_gather=param)
    assert evaluate(flagged, _one_stage_on_four(zero=1)).exposed_sync_ticks == exposed


@pytest.mark.parametrize("zero", [0, 3])
def test_param_gather_flag_does_nothing_without_a_weight_gather(megatron_optimizer, zero):
    """``overlap_param_gather`` has no effect for z = 0 (all-reduce) and z = 3 (the gathers
    are in tau)."""
    instance = _training(megatron_optimizer, zero_stages=(0, 3))
    flagged = _training(instance, overlap_param_gather=True)
    plan = _one_stage_on_four(zero=zero)
    assert evaluate(flagged, plan).objective_ticks == evaluate(instance, plan).objective_ticks


def test_sync_parts_are_rounded_alone(megatron_optimizer):
    """RS and AG are primitive terms, each rounded up once: a volume whose halves end in
    fractional ticks costs the sum of the two ceilings."""
    network = NetworkModel(megatron_optimizer.cluster)
    path = network.group_path([0, 1, 2, 3])
    rs = collective_ticks(CollectiveKind.REDUCE_SCATTER, 4 * 7, 4, path, 1e-9)
    ag = collective_ticks(CollectiveKind.ALL_GATHER, 2 * 7, 4, path, 1e-9)
    assert gradient_sync_parts(7, MEGATRON_OPTIMIZER, 1, 4, path, 1e-9) == (rs, ag)
    assert gradient_sync_parts(7, MEGATRON_OPTIMIZER, 3, 4, path, 1e-9) == (rs, 0)


# ------------------------------------------------------------------ instance files


def _document(tier_extra: dict, training_extra: dict) -> dict:
    return {"workload": {"name": "w", "layers": [{"name": "b", "profiles": [{
        "tp": 1, "ep": 1, "microbatch": 1, "fwd_s": 0.001, "bwd_s": 0.002, "dense_params": 10,
        "expert_params": 0, "act_bytes": 1, "ckpt_bytes": 1, "out_bytes": 1}]}]},
        "cluster": {"num_devices": 2, "hbm_bytes": 8e10, "network": {
            "kind": "hierarchical", "tiers": [{"name": "node", "size": 2, "bandwidth_Bps": 1e11,
                                              "latency_s": 1e-6, **tier_extra}]}},
        "training": {"global_batch": 8, "seq_len": 1, **training_extra}}


@pytest.mark.parametrize(("tier", "training", "field", "expected"), [
    ({"efficiency": 1.2}, {}, "cluster.network.tiers[0].efficiency", "a number in (0, 1]"),
    ({"efficiency": 0}, {}, "cluster.network.tiers[0].efficiency", "a finite number > 0"),
    ({"efficiency": "high"}, {}, "cluster.network.tiers[0].efficiency", "a finite number"),
    ({}, {"overlap_param_gather": 1}, "training.overlap_param_gather", "true or false"),
    ({}, {"tp_comm_overlap": "yes"}, "training.tp_comm_overlap", "true or false"),
])
def test_bad_v3_fields_exit_2_naming_the_field(tmp_path, tier, training, field, expected):
    """A bad efficiency or flag is one line naming the file and field, exit 2."""
    path = tmp_path / "instance.json"
    path.write_text(json.dumps(_document(tier, training)))
    result = CliRunner().invoke(main, ["solve", str(path)])
    assert result.exit_code == 2
    assert f"{path}: {field}: expected" in result.output and expected in result.output
    assert "Traceback" not in result.output


def test_v3_fields_round_trip_and_stay_out_of_older_files(tmp_path):
    """Efficiency and the new flags are read, written back, and written only when set: an
    instance without them writes back without them."""
    path = tmp_path / "instance.json"
    path.write_text(json.dumps(_document({"efficiency": 0.8}, {"overlap_param_gather": True})))
    instance = load_instance(path)
    assert instance.cluster.network.tiers[0].efficiency == 0.8
    assert instance.training.overlap_param_gather is True
    written = instance_to_dict(instance)
    assert written["cluster"]["network"]["tiers"][0]["efficiency"] == 0.8
    assert written["training"]["overlap_param_gather"] is True
    assert instance_from_dict(written) == instance
    plain = instance_to_dict(load_instance(DATA / "worked_example.json"))
    assert "efficiency" not in plain["cluster"]["network"]["tiers"][0]
    assert not {"overlap_param_gather", "tp_comm_overlap"} & set(plain["training"])
