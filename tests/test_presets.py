"""Tests of the model, device and network presets (nest_cp.profiles.presets)."""

from __future__ import annotations

from fractions import Fraction

import pytest

from nest_cp.cost.evaluate import evaluate
from nest_cp.io.readers import instance_from_dict
from nest_cp.model.errors import InstanceFormatError
from nest_cp.model.instance import (
    HierarchicalNetwork,
    Instance,
    IntraConfig,
    RecomputeMode,
    TrainingSetup,
)
from nest_cp.model.network import NetworkModel
from nest_cp.model.plan import Plan, Stage
from nest_cp.profiles.presets import (
    DEVICES,
    MODELS,
    NETWORKS,
    build_instance,
    cluster_from_preset,
    network_cluster,
    workload_from_preset,
)

GiB = 2**30


def _manual_plan(instance: Instance, stages: int, dp: int, config: IntraConfig) -> Plan:
    """Megatron's uniform split: blocks evenly, embedding first, head last, recompute all but
    the last stage."""
    blocks = instance.workload.num_layers - 2
    per_stage = blocks // stages
    bounds = [(0 if s == 0 else 1 + s * per_stage,
               (s + 1) * per_stage if s < stages - 1 else blocks + 1) for s in range(stages)]
    return Plan(config, 1, 0, dp, tuple(
        Stage(first, last, RecomputeMode.FULL if s < stages - 1 else RecomputeMode.NONE)
        for s, (first, last) in enumerate(bounds)))


def test_registries_are_read_only():
    """MODELS, DEVICES and NETWORKS cannot be modified."""
    for registry in (MODELS, DEVICES, NETWORKS):
        with pytest.raises(TypeError):
            registry["x"] = None  # type: ignore[index]


def test_required_names_exist():
    """Every preset name other code relies on is registered."""
    assert {"bert-large", "llama2-7b", "llama3-70b", "gpt3-175b", "mixtral-8x7b"} <= set(MODELS)
    assert {"h100-sxm", "a100-80gb", "tpuv4"} <= set(DEVICES)
    assert {"nest-tpuv4-fattree", "nest-h100-spineleaf", "dgx-h100-superpod", "dgx-a100",
            "dgx-a100-superpod"} <= set(NETWORKS)
    for network in NETWORKS.values():
        assert network.default_device in DEVICES and network.description


@pytest.mark.parametrize(("devices", "sizes"), [(64, (8, 4, 2)), (128, (8, 4, 4)),
                                                (1024, (8, 4, 32)), (8, (8, 4, 1)),
                                                (40, (8, 4, 2))])
def test_nest_tier_sizes(devices, sizes):
    """NEST networks have tiers 8 / 4 / ceil(N/32), covering N."""
    network = network_cluster("nest-tpuv4-fattree", devices).network
    assert isinstance(network, HierarchicalNetwork)
    assert tuple(tier.size for tier in network.tiers) == sizes


def test_nest_setups_match_design():
    """NEST setups: bandwidths 900/100/400 resp. 900/12.5/50 GB(x2^30)/s, 100/200/300 us, HBM."""
    tpu = network_cluster("nest-tpuv4-fattree", 64)
    h100 = network_cluster("nest-h100-spineleaf", 64)
    assert [t.bandwidth_Bps / GiB for t in tpu.network.tiers] == [900, 100, 400]
    assert [t.bandwidth_Bps / GiB for t in h100.network.tiers] == [900, 12.5, 50]
    for cluster in (tpu, h100):
        assert [t.latency_s for t in cluster.network.tiers] == [100e-6, 200e-6, 300e-6]
        assert [t.efficiency for t in cluster.network.tiers] == [1, 1, 1]  # NEST's line rate
    assert tpu.hbm_bytes == 64 * GiB and h100.hbm_bytes == 90 * GiB


def test_explicit_device_sets_hbm():
    """An explicit device replaces the network's default device's HBM capacity and reserve."""
    cluster = network_cluster("nest-tpuv4-fattree", 64, device="tpuv4", hbm_reserve=0.1)
    assert cluster.hbm_bytes == DEVICES["tpuv4"].hbm_bytes
    assert cluster.usable_hbm_bytes < cluster.hbm_bytes


def test_superpod_tiers():
    """DGX SuperPOD: NVLink nodes of 8 at 450 GB/s, leaves of 32 nodes and a spine at 50 GB/s."""
    cluster = network_cluster("dgx-h100-superpod", 1024)
    tiers = cluster.network.tiers
    assert [t.size for t in tiers] == [8, 32, 4]
    assert [t.bandwidth_Bps for t in tiers] == [450e9, 50e9, 50e9]
    # nccl-tests bus bandwidth over peak: NVLink 4 370 of 450 GB/s, NDR 47 of 50 GB/s per NIC
    assert [t.efficiency for t in tiers] == [0.822, 0.94, 0.94]
    assert cluster.hbm_bytes == DEVICES["h100-sxm"].hbm_bytes


def test_a100_superpod_tiers():
    """DGX A100 SuperPOD (Selene): NVLink 3 nodes of 8 at 300 GB/s, scalable units of 20 nodes
    and a spine at one HDR 200 Gb/s port per GPU, at nccl-tests' 230 / 300 and 24 / 25."""
    cluster = network_cluster("dgx-a100-superpod", 1120)
    tiers = cluster.network.tiers
    assert [t.size for t in tiers] == [8, 20, 7]
    assert [t.bandwidth_Bps for t in tiers] == [300e9, 25e9, 25e9]
    assert [t.efficiency for t in tiers] == [0.767, 0.96, 0.96]
    assert cluster.hbm_bytes == DEVICES["a100-80gb"].hbm_bytes


def test_dgx_h100_group_drives_every_nic_of_its_nodes():
    """A group with all eight GPUs of each of two DGX H100 nodes runs eight channels, one per
    ConnectX-7 (docs/cost-model.md §5 a): min(8 x 47e9, 369.9e9) B/s, NVLink-bound; one GPU
    per node drives one NIC at 47e9 B/s."""
    network = NetworkModel(network_cluster("dgx-h100-superpod", 16))
    assert network.group_path(range(16)).bandwidth_Bps == Fraction(3699, 10) * 10**9
    assert network.group_path([0, 8]).bandwidth_Bps == 47 * 10**9
    assert network.max_useful_channels(1) == 8


@pytest.mark.parametrize(("model", "seq_len"), [("bert-large", 512), ("llama2-7b", 4096),
                                                ("llama3-70b", 4096), ("mixtral-8x7b", 4096),
                                                ("gpt3-175b", 2048)])
def test_default_sequence_lengths(model, seq_len):
    """build_instance uses DESIGN §6's sequence length per model."""
    assert build_instance(model, 64, "nest-tpuv4-fattree").training.seq_len == seq_len


def test_default_widths():
    """Default TP widths 1..8 dividing the heads; EP widths 1..8 for Mixtral, 1 for dense."""
    dense = build_instance("llama2-7b", 64, "nest-tpuv4-fattree").workload.configs
    assert dense == tuple(IntraConfig(t) for t in (1, 2, 4, 8))
    moe = build_instance("mixtral-8x7b", 64, "nest-tpuv4-fattree").workload.configs
    assert {c.ep for c in moe} == {1, 2, 4, 8}
    small = build_instance("llama2-7b", 2, "nest-tpuv4-fattree").workload.configs
    assert small == (IntraConfig(1), IntraConfig(2))


@pytest.mark.parametrize("network", sorted(NETWORKS))
@pytest.mark.parametrize("model", sorted(MODELS))
def test_presets_build_instances_that_evaluate(network, model):
    """Every model on every network at 64 devices gives an instance a plan evaluates on."""
    instance = build_instance(model, 64, network, zero_stages=(0,))
    evaluation = evaluate(instance, _manual_plan(instance, 8, 8, IntraConfig()))
    assert evaluation.objective_ticks is not None and evaluation.objective_ticks > 0


def test_gpt3_manual_plan_fits_tpuv4_at_1024():
    """GPT-3 175B, p = 32, d = 8, t = 4 on 1,024 NEST TPUv4 (64 GiB, Adam, ZeRO 0) fits."""
    instance = build_instance("gpt3-175b", 1024, "nest-tpuv4-fattree", tp_widths=(4,),
                              zero_stages=(0,))
    evaluation = evaluate(instance, _manual_plan(instance, 32, 8, IntraConfig(4)))
    assert evaluation.feasible, evaluation.violations


def test_llama2_manual_plan_fits_tpuv4_at_128():
    """Llama2-7B, p = 8, d = 16, t = 1 on 128 NEST TPUv4 (64 GiB) fits in memory."""
    instance = build_instance("llama2-7b", 128, "nest-tpuv4-fattree", tp_widths=(1,),
                              zero_stages=(0,))
    evaluation = evaluate(instance, _manual_plan(instance, 8, 16, IntraConfig()))
    assert evaluation.feasible, evaluation.violations


def test_llama2_unsharded_does_not_fit_one_device():
    """Llama2-7B with Adam (16 bytes per parameter, 108 GB) cannot fit on one 64 GiB device."""
    instance = build_instance("llama2-7b", 1, "nest-tpuv4-fattree", zero_stages=(0,))
    evaluation = evaluate(instance, _manual_plan(instance, 1, 1, IntraConfig()))
    assert not evaluation.feasible


def test_instance_file_with_presets_loads():
    """An instance file naming workload and cluster presets loads through nest_cp.io."""
    instance = instance_from_dict({
        "workload": {"preset": "llama2-7b", "device": "h100-sxm", "tp": [1, 2]},
        "cluster": {"preset": "nest-tpuv4-fattree", "num_devices": 64},
        "training": {"global_batch": 64, "seq_len": 1024},
    })
    assert instance.workload.configs == (IntraConfig(1), IntraConfig(2))
    assert instance.cluster.num_devices == 64


@pytest.mark.parametrize(("section", "value", "field"), [
    ("workload", {"preset": "gpt5"}, "workload.preset"),
    ("cluster", {"preset": "moon-fabric", "num_devices": 8}, "cluster.preset"),
    ("workload", {"preset": "llama2-7b", "colour": "red"}, "workload.colour"),
    ("workload", {"preset": "llama2-7b", "tp": [0]}, "workload.tp"),
    ("workload", {"preset": "llama2-7b", "device": "abacus"}, "workload.device"),
    ("cluster", {"preset": "nest-tpuv4-fattree"}, "cluster.num_devices"),
    ("cluster", {"preset": "nest-tpuv4-fattree", "num_devices": 8, "hbm_reserve": 2},
     "cluster.hbm_reserve"),
])
def test_bad_preset_reference_names_field(section, value, field):
    """Unknown presets and bad options raise InstanceFormatError naming the field."""
    data = {"workload": {"preset": "llama2-7b"},
            "cluster": {"preset": "nest-tpuv4-fattree", "num_devices": 8},
            "training": {"global_batch": 8, "seq_len": 128}}
    data[section] = value
    with pytest.raises(InstanceFormatError) as info:
        instance_from_dict(data)
    assert info.value.field == field


def test_unknown_names_in_python_api():
    """build_instance, workload_from_preset and cluster_from_preset reject unknown names."""
    with pytest.raises(InstanceFormatError, match="expected one of"):
        build_instance("gpt5", 8, "nest-tpuv4-fattree")
    with pytest.raises(InstanceFormatError, match="expected one of"):
        cluster_from_preset("moon-fabric", {"num_devices": 8})
    with pytest.raises(InstanceFormatError, match="expected one of"):
        workload_from_preset("gpt5", {}, TrainingSetup(global_batch=8, seq_len=128))


def test_preset_instance_round_trips_through_json(tmp_path):
    """A preset instance saved and loaded again evaluates a plan to the same objective."""
    from nest_cp.io.readers import load_instance
    from nest_cp.io.writers import save_instance

    instance = build_instance("mixtral-8x7b", 64, "nest-h100-spineleaf", tp_widths=(1, 2),
                              ep_widths=(1, 4), zero_stages=(0, 3))
    path = tmp_path / "mixtral.json"
    save_instance(instance, path)
    loaded = load_instance(path)
    plan = Plan(IntraConfig(2, 4), 1, 3, 2, _manual_plan(instance, 4, 2, IntraConfig()).stages)
    assert evaluate(loaded, plan).objective_ticks == evaluate(instance, plan).objective_ticks
