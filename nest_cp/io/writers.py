"""Writing instances and plans as JSON or YAML (presets expanded, repeated layers folded).

Consecutive identical layers are written once with ``"repeat": k``; every writer's output
reads back through :mod:`nest_cp.io.readers` to an equal object.
"""

from __future__ import annotations

from dataclasses import fields
from pathlib import Path as FsPath
from typing import Any

from nest_cp.model.documents import write_document
from nest_cp.model.instance import (
    Cluster,
    CpComm,
    HierarchicalNetwork,
    Instance,
    IntraConfig,
    LayerProfile,
    ModelShape,
    SdpSetup,
    Strategy,
    TrainingSetup,
    Workload,
)
from nest_cp.model.launchers.search import Launcher
from nest_cp.model.plan import Plan

# ------------------------------------------------------------------ writing instances


def instance_to_dict(instance: Instance) -> dict:
    """The inline JSON form of an instance (presets expanded)."""
    return {
        "name": instance.name,
        "workload": workload_to_dict(instance.workload),
        "cluster": cluster_to_dict(instance.cluster),
        "training": training_to_dict(instance.training),
    }


def save_instance(instance: Instance, path: str | FsPath) -> None:
    write_document(instance_to_dict(instance), path)


def training_to_dict(training: TrainingSetup) -> dict:
    opt = training.optimizer
    return {
        "global_batch": training.global_batch, "seq_len": training.seq_len,
        "microbatches": list(training.microbatches),
        "optimizer": {"name": opt.name, "weight_bytes": opt.weight_bytes,
                      "grad_bytes": opt.grad_bytes, "state_bytes": opt.state_bytes},
        "zero_stages": list(training.zero_stages),
        "recompute": [mode.value for mode in training.recompute_modes],
        "virtual_stages": list(training.virtual_stages),
        "overlap_grad_reduce": training.overlap_grad_reduce,
        # written only when set, so files without them read and write back unchanged
        **{flag: True for flag in ("overlap_param_gather", "tp_comm_overlap")
           if getattr(training, flag)},
        "schedule": training.schedule.value, "tick_s": training.tick_s,
        **_strategies_to_dict(training),
        # written only under a launcher, so files without one read and write back unchanged
        **({"launcher": training.launcher.value}
           if training.launcher is not Launcher.NONE else {}),
        # context parallelism, written only when allowed (older files unchanged)
        **({"context_parallel": list(training.context_parallel),
            "cp_comm": training.cp_comm.value}
           if training.context_parallel != (1,) or training.cp_comm is not CpComm.P2P else {}),
    }


def _strategies_to_dict(training: TrainingSetup) -> dict:
    """``strategies`` and ``sdp``, written only when SDP is allowed (older files unchanged)."""
    if training.strategies == (Strategy.DP,) and training.sdp == SdpSetup():
        return {}
    sdp: dict[str, Any] = {"levels": [level.value for level in training.sdp.levels],
                           "maskings": [masking.value for masking in training.sdp.maskings]}
    if training.sdp.holders:
        sdp["holders"] = list(training.sdp.holders)
    if training.sdp.coverages:
        sdp["coverages"] = [str(c) if c.denominator > 1 else int(c)
                            for c in training.sdp.coverages]
    return {"strategies": [strategy.value for strategy in training.strategies], "sdp": sdp}


def _efficiency(tier_or_link) -> dict:
    """``efficiency`` when below 1 (files without it read and write back unchanged)."""
    return {} if tier_or_link.efficiency == 1 else {"efficiency": tier_or_link.efficiency}


def cluster_to_dict(cluster: Cluster) -> dict:
    network = cluster.network
    if isinstance(network, HierarchicalNetwork):
        net = {"kind": "hierarchical", "tiers": [
            {"name": t.name, "size": t.size, "bandwidth_Bps": t.bandwidth_Bps,
             "latency_s": t.latency_s, **_efficiency(t)} for t in network.tiers]}
    else:
        net = {"kind": "graph", "switches": list(network.switches), "links": [
            {"a": link.a, "b": link.b, "bandwidth_Bps": link.bandwidth_Bps,
             "latency_s": link.latency_s, **_efficiency(link)} for link in network.links]}
    data = {"name": cluster.name, "num_devices": cluster.num_devices,
            "hbm_bytes": cluster.hbm_bytes, "hbm_reserve": cluster.hbm_reserve, "network": net}
    if cluster.peak_flops_per_s is not None:
        data["peak_flops_per_s"] = cluster.peak_flops_per_s
    return data


def workload_to_dict(workload: Workload) -> dict:
    layers: list[dict] = []
    previous = None
    for layer in workload.layers:
        if previous is not None and layer.profiles == previous.profiles and layers:
            layers[-1]["repeat"] = layers[-1].get("repeat", 1) + 1
            continue
        layers.append({"name": layer.name.split("[")[0],
                       "profiles": [_profile_to_dict(c, b, p) for (c, b), p in sorted(
                           layer.profiles.items(), key=lambda kv: (kv[0][0].tp, kv[0][0].ep,
                                                                   kv[0][0].cp, kv[0][1]))]})
        previous = layer
    data: dict[str, Any] = {"name": workload.name}
    if workload.attention is not None:  # how the profiles were made (older files unchanged)
        data["attention"] = workload.attention.value
    if workload.sequence_parallel is not None:
        data["sequence_parallel"] = workload.sequence_parallel
    for name in ("heads", "kv_heads"):
        if getattr(workload, name) is not None:
            data[name] = getattr(workload, name)
    if workload.model is not None:
        data["model"] = model_shape_to_dict(workload.model)
    return data | {"layers": layers}


def model_shape_to_dict(model: ModelShape) -> dict:
    """``workload.model`` as the reader takes it (enums by value)."""
    values = {item.name: getattr(model, item.name) for item in fields(model)}
    return {name: getattr(value, "value", value) for name, value in values.items()}


def _profile_to_dict(config: IntraConfig, microbatch: int, p: LayerProfile) -> dict:
    data = {"tp": config.tp, "ep": config.ep, "microbatch": microbatch, "fwd_s": p.fwd_s,
            "bwd_s": p.bwd_s, "dense_params": p.dense_params, "expert_params": p.expert_params,
            "act_bytes": p.act_bytes, "ckpt_bytes": p.ckpt_bytes, "out_bytes": p.out_bytes,
            "collectives": [{"kind": c.kind.value, "volume_bytes": c.volume_bytes,
                             "group": c.group.value, "phase": c.phase.value}
                            for c in p.collectives]}
    optional = {"flops": p.flops, "wgrad_s": p.wgrad_s, "sel_fwd_s": p.sel_fwd_s,
                "sel_act_bytes": p.sel_act_bytes, "sel_flops": p.sel_flops}
    data.update({name: value for name, value in optional.items() if value is not None})
    if config.cp > 1:  # context parallelism (older files unchanged)
        data["cp"] = config.cp
    data.update({name: value for name, value in (
        ("attn_fwd_s", p.attn_fwd_s), ("attn_bwd_s", p.attn_bwd_s),
        ("cp_kv_bytes", p.cp_kv_bytes or None), ("cp_a2a_bytes", p.cp_a2a_bytes or None))
        if value is not None})
    if p.sdp_units:
        data.update(sdp_units=p.sdp_units, sdp_fraction=p.sdp_fraction)
    return data


# ------------------------------------------------------------------ plans


def plan_to_dict(plan: Plan) -> dict:
    data = {"config": {"tp": plan.config.tp, "ep": plan.config.ep,
                       **({"cp": plan.config.cp} if plan.config.cp > 1 else {})},
            "microbatch": plan.microbatch, "zero": plan.zero,
            "virtual_stages": plan.virtual_stages,
            "stages": [{"first_layer": s.first_layer, "last_layer": s.last_layer,
                        "recompute": s.recompute.value} for s in plan.stages],
            "dp": plan.num_replicas}
    if plan.placement is not None:
        data["placement"] = [[list(ranks) for ranks in replicas] for replicas in plan.placement]
    if plan.sdp is not None:
        data["strategy"] = plan.strategy.value
        data["sdp"] = {"level": plan.sdp.level.value, "masking": plan.sdp.masking.value,
                       "holders": plan.sdp.holders,
                       "mask": [list(units) for units in plan.sdp.mask]}
    return data


def save_plan(plan: Plan, path: str | FsPath) -> None:
    write_document(plan_to_dict(plan), path)


