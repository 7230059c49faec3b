"""The evaluator's DESIGN §3.2 terms against hand-computed numbers.

Interleaved 1F1B, recompute modes, overlapped gradient reduction, ZeRO-3 buffers,
MFU / HFU and per-group pricing of intra-layer collectives; and the structural
errors of interleaved plans.
"""

import dataclasses
import json
from fractions import Fraction
from pathlib import Path

import pytest

from nest_cp import (
    IntraConfig,
    Layer,
    Plan,
    Stage,
    evaluate,
    instance_from_dict,
    load_instance,
    load_plan,
)
from nest_cp.cost.terms import GroupPaths, layer_collective_ticks
from nest_cp.model.instance import RecomputeMode
from nest_cp.model.network import NetworkModel
from nest_cp.model.plan import uniform_stages

DATA = Path(__file__).parent / "data"
NONE, SELECTIVE, FULL = RecomputeMode.NONE, RecomputeMode.SELECTIVE, RecomputeMode.FULL
TWO_DEVICES = (((0,),), ((1,),))  # stage 0 on device 0, stage 1 on device 1 (tier 0)


@pytest.fixture(scope="module")
def interleaved():
    return load_instance(DATA / "interleaved_example.json")


@pytest.fixture(scope="module")
def selective():
    return load_instance(DATA / "selective_example.json")


# ------------------------------------------------------------------ (b) interleaving


def test_interleaved_example_v1(interleaved):
    """DESIGN §3.2 b, v = 1 split (0,1 | 2,3) on devices 0, 1: tau 6,011,000, T 54,099,000,
    memory 24e9 and 20e9."""
    result = evaluate(interleaved, load_plan(DATA / "plan_interleaved_v1.json"))
    assert result.tau_max_ticks == 6_011_000
    assert result.objective_ticks == 54_099_000
    assert [s.memory_bytes for s in result.stages] == [24 * 10**9, 20 * 10**9]
    assert [s.in_flight for s in result.stages] == [2, 1]


def test_interleaved_example_v2(interleaved):
    """DESIGN §3.2 b, v = 2 chunks (0 | 1 | 2 | 3) on stages (0, 1, 0, 1): the middle chunks
    receive an activation and a gradient (22,000), the outer ones one transfer (11,000);
    tau_chunk 3,022,000, T = 17 * 3,022,000 = 51,374,000; memory 26e9 and 22e9 with
    n = 5 and 3 chunk-microbatches in flight."""
    result = evaluate(interleaved, load_plan(DATA / "plan_interleaved_v2.json"))
    chunks = result.chunks
    assert [c.stage for c in chunks] == [0, 1, 0, 1]
    assert [c.recv_activation_ticks + c.recv_gradient_ticks for c in chunks] == [
        11_000, 22_000, 22_000, 11_000]
    assert [c.time_ticks for c in chunks] == [3_011_000, 3_022_000, 3_022_000, 3_011_000]
    assert result.tau_max_ticks == 3_022_000
    assert result.objective_ticks == 51_374_000
    assert [s.in_flight for s in result.stages] == [5, 3]
    assert [s.memory_bytes for s in result.stages] == [26 * 10**9, 22 * 10**9]
    assert result.feasible and result.as_dict()["virtual_stages"] == 2


def test_interleaved_wrap_around_is_priced_on_its_device_pair(interleaved):
    """With stages on devices 0 and 2 (across the spine), every chunk boundary, the wrap
    1 -> 2 from stage 1 back to stage 0 included, costs 1e6/1e10 s + 10 us = 110,000."""
    plan = dataclasses.replace(load_plan(DATA / "plan_interleaved_v2.json"),
                               placement=(((0,),), ((2,),)))
    result = evaluate(interleaved, plan)
    assert [c.recv_activation_ticks for c in result.chunks] == [0, 110_000, 110_000, 110_000]
    assert [c.recv_gradient_ticks for c in result.chunks] == [110_000, 110_000, 110_000, 0]
    assert result.objective_ticks == 17 * 3_220_000


def test_uniform_stages_with_virtual_stages():
    """uniform_stages(7 layers, S=2, v=2) gives four chunks, the last ones larger, and the
    chunks of a stage share its mode (all-but-last: stage 0 full, stage 1 none)."""
    stages = uniform_stages(7, 2, "all-but-last", virtual_stages=2)
    assert [(s.first_layer, s.last_layer, s.recompute) for s in stages] == [
        (0, 0, FULL), (1, 2, NONE), (3, 4, FULL), (5, 6, NONE)]


def test_plan_helpers_index_chunks_by_stage():
    """With v = 2, S = len(stages) / v, chunk k runs on stage k mod S, and a stage holds the
    layers of its chunks in order."""
    plan = Plan(IntraConfig(), 1, 0, 1, uniform_stages(6, 3, virtual_stages=2),
                virtual_stages=2)
    assert plan.num_stages == 3 and plan.num_chunks == 6
    assert [plan.stage_of_chunk(k) for k in range(6)] == [0, 1, 2, 0, 1, 2]
    assert plan.chunks_of_stage(1) == (1, 4)
    assert plan.stage_layers(1) == (1, 4)


# ------------------------------------------------------------------ (c) overlap


def test_overlap_on_the_megatron_layout(worked):
    """DESIGN §3.2 c on §3.1's Megatron layout: R = 2,000,000 per stage, exposed sync
    18,002,000, T = 5 * 3,110,000 + 18,002,000 = 33,552,000."""
    overlapped = dataclasses.replace(
        worked, training=dataclasses.replace(worked.training, overlap_grad_reduce=True))
    result = evaluate(overlapped, load_plan(DATA / "plan_megatron_default.json"))
    assert [s.backward_ticks for s in result.stages] == [2_000_000, 2_000_000]
    assert result.sync_ticks == 20_002_000
    assert result.exposed_sync_ticks == 18_002_000
    assert result.objective_ticks == 33_552_000


def test_overlap_hides_a_short_sync_entirely(worked):
    """A sync shorter than the backward it overlaps is hidden: with a 30 ms backward per
    layer the 20,002,000-tick sync of §3.1's Megatron layout is exposed for 0 ticks."""
    slow = dataclasses.replace(worked, workload=dataclasses.replace(worked.workload, layers=tuple(
        Layer(layer.name, {key: dataclasses.replace(p, bwd_s=0.03)
                           for key, p in layer.profiles.items()})
        for layer in worked.workload.layers)), training=dataclasses.replace(
        worked.training, overlap_grad_reduce=True))
    result = evaluate(slow, load_plan(DATA / "plan_megatron_default.json"))
    assert result.exposed_sync_ticks == 0
    assert result.objective_ticks == 5 * (31_000_000 + 110_000)


# ------------------------------------------------------------------ (a) recompute modes


def test_selective_recompute_by_hand(selective):
    """Selective on stage 0 (S=2, d=1 on devices 0, 1): tau_0 = 3,000,000 + sel_fwd 300,000 +
    11,000 = 3,311,000, T = 9 * 3,311,000 = 29,799,000; memory 16e9 state + 2 in flight *
    sel_act 1e9 + working set (4e9 - 1e9) = 21e9."""
    plan = Plan(IntraConfig(), 1, 0, 1, (Stage(0, 0, SELECTIVE), Stage(1, 1)), TWO_DEVICES)
    result = evaluate(selective, plan)
    assert result.stages[0].recompute_ticks == 300_000
    assert result.stages[0].time_ticks == 3_311_000
    assert result.objective_ticks == 29_799_000
    assert [s.memory_bytes for s in result.stages] == [21 * 10**9, 20 * 10**9]
    assert result.feasible


def test_selective_between_none_and_full(selective):
    """On selective_example (HBM 22e9) stage 0 keeps 24e9 without recomputation (does not
    fit), 20.2e9 with full (fits, T = 9 * 4,011,000 = 36,099,000) and 21e9 with selective
    (fits, faster: 29,799,000)."""
    results = {mode: evaluate(selective, Plan(IntraConfig(), 1, 0, 1, (
        Stage(0, 0, mode), Stage(1, 1)), TWO_DEVICES)) for mode in RecomputeMode}
    assert results[NONE].stages[0].memory_bytes == 24 * 10**9 and not results[NONE].feasible
    assert results[FULL].stages[0].memory_bytes == 20_200_000_000
    assert results[FULL].objective_ticks == 36_099_000
    assert results[SELECTIVE].objective_ticks == 29_799_000
    assert results[FULL].feasible and results[SELECTIVE].feasible


def test_full_recompute_repeats_forward_collectives():
    """two_tier_tp2, tp = 2, d = 2, z = 0: full recomputation of stage 0 reruns its 1 ms
    forward and its forward TP all-reduce (102,000), not the backward one: recompute
    1,102,000, tau_0 = 3,314,000 + 1,102,000 = 4,416,000."""
    instance = load_instance(DATA / "two_tier_tp2.json")
    plan = Plan(IntraConfig(tp=2), 1, 0, 2, (Stage(0, 0, FULL), Stage(1, 1)))
    result = evaluate(instance, plan)
    assert result.stages[0].collective_ticks == 204_000
    assert result.stages[0].recompute_ticks == 1_102_000
    assert [s.time_ticks for s in result.stages] == [4_416_000, 3_314_000]
    assert result.objective_ticks == 5 * 4_416_000 + 100_020_000


# ------------------------------------------------------------------ (d) ZeRO-3 buffers


def test_zero3_buffers_take_the_largest_layer_with_one_replica(worked):
    """z = 3 with d = 1 (nothing sharded): one stage with layers of 1e9 and 3e8 params holds
    1.3e9 * 16 B + 1 microbatch * (4e9 + 1.2e9) = 26e9 at z = 0, and at z = 3 also the
    gather buffers of the largest layer, 2 * 1e9 * 2 B = 4e9 (not of both: 5.2e9): 30e9."""
    small = dataclasses.replace(worked.workload.layers[1].profiles[(IntraConfig(), 1)],
                                dense_params=3 * 10**8, act_bytes=12 * 10**8)
    workload = dataclasses.replace(worked.workload, layers=(
        worked.workload.layers[0], Layer("small", {(IntraConfig(), 1): small})))
    instance = dataclasses.replace(worked, workload=workload, training=dataclasses.replace(
        worked.training, zero_stages=(0, 3)))
    memory = {zero: evaluate(instance, Plan(IntraConfig(), 1, zero, 1, (Stage(0, 1),)))
              .stages[0].memory_bytes for zero in (0, 3)}
    assert memory == {0: 26 * 10**9, 3: 30 * 10**9}


# ------------------------------------------------------------------ (f) collective groups


def test_tp_and_ep_collectives_priced_on_their_own_groups():
    """tp = ep = 2 on devices 0-3: TP groups {0,1}, {2,3} in tier 0 (all-reduce of 1e7 B:
    1e7/1e11 s + 2 us = 102,000), EP groups {0,2}, {1,3} in tier 1 (all-to-all: 0.5e7/1e10 s
    + 10 us = 510,000), fwd and bwd: 1,224,000.  §3's replica span priced the TP all-reduce
    in tier 1 too (1,020,000 each): 3,060,000."""
    instance = load_instance(DATA / "tp_ep_groups.json")
    plan = Plan(IntraConfig(tp=2, ep=2), 1, 0, 1, (Stage(0, 0),))
    result = evaluate(instance, plan)
    assert result.stages[0].collective_ticks == 1_224_000
    assert result.objective_ticks == 3_000_000 + 1_224_000  # m = 2 / (b e d) = 1, S = 1
    network = NetworkModel(instance.cluster)
    profile = instance.workload.layers[0].profile(IntraConfig(2, 2), 1)
    old = layer_collective_ticks(profile, IntraConfig(2, 2), GroupPaths.replica_span(
        network.tier_path(1)), instance.training.tick_s)
    assert old == 3_060_000


def test_each_collective_pays_its_own_slowest_group_on_a_graph():
    """TP groups {0,1} (1e9 B/s, 1 us) and {2,3} (1e11 B/s, 1 ms).  A 1e8 B all-reduce is
    slowest on {0,1}: 0.1 s + 2 us = 100,002,000; a 1e3 B one on {2,3}: 10 ns + 2 ms =
    2,000,010.  The stage pays their sum, 102,002,010 — neither the slowest group's own sum
    (100,005,000) nor both on the worst bandwidth and latency (104,001,000)."""
    instance = load_instance(DATA / "tp_groups_graph.json")
    result = evaluate(instance, Plan(IntraConfig(tp=2, ep=2), 1, 0, 1, (Stage(0, 0),),
                                     (((0, 1, 2, 3),),)))
    assert result.stages[0].collective_ticks == 102_002_010
    assert result.objective_ticks == 3_000_000 + 102_002_010


# ------------------------------------------------------------------ (e) MFU and HFU


def _utilisation_plan(mode: RecomputeMode) -> Plan:
    return Plan(IntraConfig(), 1, 0, 2, (Stage(0, 0, mode), Stage(1, 1)))


def test_mfu_and_hfu_by_hand():
    """§3.1's Megatron layout with 1e12 forward FLOPs per layer and microbatch, peak 1e15:
    F = 8 samples * 2e12 = 1.6e13.  No recompute: T = 35,552,000 ticks, MFU = HFU =
    4.8e13 / (0.035552 s * 4 devices * 1e15).  Full recompute of stage 0: T = 5 * 4,110,000
    + 20,002,000 = 40,552,000; MFU = 4.8e13 / (0.040552 * 4e15), HFU adds 8 * 1e12."""
    instance = load_instance(DATA / "utilisation_example.json")
    plain = evaluate(instance, _utilisation_plan(NONE))
    assert plain.objective_ticks == 35_552_000
    expected = float(Fraction(48 * 10**12) / (Fraction(35_552_000, 10**9) * 4 * 10**15))
    assert plain.mfu == expected and plain.hfu == expected
    full = evaluate(instance, _utilisation_plan(FULL))
    assert full.objective_ticks == 40_552_000
    seconds = Fraction(40_552_000, 10**9)
    assert full.mfu == float(Fraction(48 * 10**12) / (seconds * 4 * 10**15))
    assert full.hfu == float(Fraction(56 * 10**12) / (seconds * 4 * 10**15))


def test_hfu_null_without_sel_flops_and_counted_with_them():
    """A selective stage whose profiles lack sel_flops leaves HFU null (MFU known); with
    sel_flops = 2e11 HFU counts 8 * 2e11 more FLOPs."""
    instance = load_instance(DATA / "utilisation_example.json")
    result = evaluate(instance, _utilisation_plan(SELECTIVE))
    assert result.mfu is not None and result.hfu is None
    data = json.loads((DATA / "utilisation_example.json").read_text())
    data["workload"]["layers"][0]["profiles"][0]["sel_flops"] = 2e11
    result = evaluate(instance_from_dict(data), _utilisation_plan(SELECTIVE))
    seconds = Fraction(result.objective_ticks, 10**9)
    assert result.hfu == float(Fraction(48 * 10**12 + 16 * 10**11) / (seconds * 4 * 10**15))


def test_mfu_null_without_flops_or_peak(worked):
    """Without profile FLOPs (worked_example) or without the device peak, MFU and HFU are null."""
    result = evaluate(worked, load_plan(DATA / "plan_megatron_default.json"))
    assert result.mfu is None and result.hfu is None
    instance = load_instance(DATA / "utilisation_example.json")
    no_peak = dataclasses.replace(instance, cluster=dataclasses.replace(
        instance.cluster, peak_flops_per_s=None))
    assert evaluate(no_peak, _utilisation_plan(NONE)).mfu is None


def test_mfu_counts_tensor_ranks_and_expert_samples():
    """With t = e = 2 each microbatch step runs on 4 devices and processes b e = 2 samples,
    so a per-device 1e12 is 2e12 per sample: F = B * 2e12 = 4e12 and MFU = 1.2e13 /
    (T * 4 devices * 1e15)."""
    data = json.loads((DATA / "tp_ep_groups.json").read_text())
    data["workload"]["layers"][0]["profiles"][0]["flops"] = 1e12
    data["cluster"]["peak_flops_per_s"] = 1e15
    result = evaluate(instance_from_dict(data), Plan(IntraConfig(2, 2), 1, 0, 1, (Stage(0, 0),)))
    seconds = Fraction(result.objective_ticks, 10**9)
    assert result.mfu == float(Fraction(12 * 10**12) / (seconds * 4 * 10**15))


# ------------------------------------------------------------------ structure


@pytest.mark.parametrize("instance_name, plan, field, expected", [
    ("interleaved_example.json",
     Plan(IntraConfig(), 1, 0, 1, uniform_stages(4, 1, virtual_stages=2), virtual_stages=2),
     "virtual_stages", "need at least 2 pipeline stages"),
    ("interleaved_example.json",
     Plan(IntraConfig(), 1, 0, 1, uniform_stages(4, 3), virtual_stages=2),
     "stages", "multiple of virtual_stages = 2"),
    ("interleaved_odd_batch.json",
     Plan(IntraConfig(), 1, 0, 1, uniform_stages(4, 2, virtual_stages=2), virtual_stages=2),
     "virtual_stages", "m = 7 to be a multiple of S = 2"),
    ("worked_example.json",
     Plan(IntraConfig(), 1, 0, 1, uniform_stages(2, 1, virtual_stages=2), virtual_stages=2),
     "virtual_stages", "2 virtual stages not allowed"),
    ("interleaved_example.json",
     Plan(IntraConfig(), 1, 0, 1, (Stage(0, 0), Stage(1, 1), Stage(2, 2, FULL), Stage(3, 3)),
          virtual_stages=2),
     "stages[2].recompute", "the chunks of a stage share one mode"),
    ("interleaved_example.json", Plan(IntraConfig(), 1, 0, 1, (Stage(0, 1, SELECTIVE),
                                                               Stage(2, 3))),
     "stages[0].recompute", "recomputes 'selective', not allowed"),
])
def test_interleaving_and_mode_violations(instance_name, plan, field, expected):
    """Each malformed v2 plan is reported, naming the plan field, with no objective."""
    result = evaluate(load_instance(DATA / instance_name), plan)
    assert result.objective_ticks is None
    assert result.malformed_fields[0] == field
    assert expected in result.violations[0], result.violations
