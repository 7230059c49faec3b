"""Tensor-parallel communication overlap in SDP plans (docs/cost-model.md §5 e and §6).

An SDP worker hides each layer's TP collectives behind *its own* ticks of the layer (the
shares of it it runs), on a worker whose TP groups all lie in one tier-0 domain.  The
evaluator (the referee), the DP's vectorised pricing, CP-SAT, the MILP and brute force must
price that alike: they are compared on hand-checked numbers, on random plans and on the
SDP optimum of seeded random instances with t = 2 configurations.
"""

from __future__ import annotations

import dataclasses
import random

import pytest
from pinning import sdp_plan_on_devices, sdp_prices_match

from nest_cp import evaluate, instance_from_dict
from nest_cp.cost.sdp import SdpDesign, design_mask, unit_table
from nest_cp.dp.sdp import price_plan
from nest_cp.harness.generators import random_sdp_instance
from nest_cp.model.instance import IntraConfig, RecomputeMode, SdpLevel, SdpMasking, Strategy
from nest_cp.model.plan import Plan, SdpMask, Stage
from nest_cp.model.result import SolveOptions, Space, Status
from nest_cp.solvers.registry import solve

T2 = IntraConfig(tp=2)
BOTH_LEVELS = (SdpLevel.BLOCK, SdpLevel.NEURON)
BOTH_MASKINGS = (SdpMasking.FORWARD, SdpMasking.BACKWARD)


def _with_overlap(instance, overlap: bool = True):
    return dataclasses.replace(instance, training=dataclasses.replace(
        instance.training, tp_comm_overlap=overlap))


# ------------------------------------------------------------------ a hand-checked plan


def _one_layer_instance(overlap: bool):
    """The §3 cluster (two nodes of two devices: 1e11 B/s and 1 us inside a node) and one
    t = 2 layer of two neuron slices carrying half of it: fwd 1 ms, bwd 2 ms, weight
    gradient 1 ms, a 2e8 B TP all-reduce per direction."""
    profile = {"tp": 2, "ep": 1, "microbatch": 1, "fwd_s": 0.001, "bwd_s": 0.002,
               "wgrad_s": 0.001, "dense_params": 2_000_000, "act_bytes": 10**9,
               "ckpt_bytes": 10**6, "out_bytes": 10**6, "sdp_units": 2, "sdp_fraction": 0.5,
               "collectives": [{"kind": "all_reduce", "volume_bytes": 2e8, "group": "tp",
                                "phase": phase} for phase in ("fwd", "bwd")]}
    return instance_from_dict({
        "name": "sdp-tp-overlap", "workload": {"name": "one-layer", "layers": [
            {"name": "block", "profiles": [profile]}]},
        "cluster": {"num_devices": 4, "hbm_bytes": 80e9, "network": {
            "kind": "hierarchical", "tiers": [
                {"name": "node", "size": 2, "bandwidth_Bps": 1e11, "latency_s": 1e-6},
                {"name": "spine", "size": 2, "bandwidth_Bps": 1e10, "latency_s": 1e-5}]}},
        "training": {"global_batch": 2, "seq_len": 1, "microbatches": [1],
                     "optimizer": {"weight_bytes": 2, "grad_bytes": 2, "state_bytes": 12},
                     "zero_stages": [0], "recompute": ["none"], "strategies": ["sdp"],
                     "tp_comm_overlap": overlap,
                     "sdp": {"levels": ["neuron"], "maskings": ["forward", "backward"],
                             "holders": [1]}}})


def _one_layer_plan(masking: SdpMasking, placement) -> Plan:
    """d = 2 TP pairs, h = 1: worker 0 holds slice 0, worker 1 slice 1."""
    return Plan(T2, 1, 0, 2, (Stage(0, 0),), (placement,), strategy=Strategy.SDP,
                sdp=SdpMask(SdpLevel.NEURON, masking, 1, ((0,), (1,))))


@pytest.mark.parametrize("masking,hidden", [
    (SdpMasking.FORWARD, 1_252_000 + 1_001_000),
    (SdpMasking.BACKWARD, 1_002_000 + 1_001_000)])
def test_a_worker_hides_behind_its_own_ticks_of_the_layer(masking, hidden):
    """The all-reduce costs C = 2e8 / 1e11 s + 2 us = 2,002,000 ticks per direction inside
    a node, so 4,004,000 per microbatch without the flag.  The layer's shared half is
    fwd 500,000 / bwd 1,000,000 ticks, each slice 250,000 / 500,000 (weight gradient
    250,000); with t = 2 each direction shows max(⌈C/2⌉ = 1,001,000, C − X), X the
    worker's own ticks of the layer:

    - forward masking, the worker runs the shared half and its slice: X = 750,000 forward
      (C − X = 1,252,000 binds; a plain plan's X, the whole layer's 1,000,000, would leave
      1,002,000) and 1,500,000 backward (1,001,000 binds): 2,253,000;
    - backward masking, it runs the whole forward, X = 1,000,000 (1,002,000), and the
      backward less the other slice's weight gradient, X = 1,750,000 (1,001,000): 2,003,000.

    On both workers; T = τ + sync with m = 1 and an unchanged sync, so T drops by the same
    4,004,000 − hidden.  TP pairs across the nodes ((0, 2) and (1, 3)) hide nothing.
    """
    local = _one_layer_plan(masking, ((0, 1), (2, 3)))
    before = evaluate(_one_layer_instance(False), local)
    after = evaluate(_one_layer_instance(True), local)
    assert before.feasible and after.feasible
    assert [w.collective_ticks for w in before.sdp.workers] == [4_004_000] * 2
    assert [w.collective_ticks for w in after.sdp.workers] == [hidden] * 2
    assert before.objective_ticks - after.objective_ticks == 4_004_000 - hidden
    assert after.sdp.exposed_sync_ticks == before.sdp.exposed_sync_ticks
    across = _one_layer_plan(masking, ((0, 2), (1, 3)))
    assert evaluate(_one_layer_instance(True), across).objective_ticks == \
        evaluate(_one_layer_instance(False), across).objective_ticks
    assert price_plan(_one_layer_instance(True), local) == (after.objective_ticks,
                                                            after.sdp.memory_bytes)


# ------------------------------------------------------------------ random plans


def _random_plan(rng: random.Random, instance) -> Plan | None:
    """A random valid SDP plan: a design mask with its units relabelled at random inside each
    block (which keeps every unit held h times and the rows balanced), random devices (half
    the time in ascending order, which keeps TP groups inside tier-0 domains more often)."""
    config, microbatch = rng.choice(instance.choices)
    devices = instance.cluster.num_devices
    if devices // config.devices < 2:
        return None
    workers = rng.randint(2, devices // config.devices)
    level, masking = rng.choice(BOTH_LEVELS), rng.choice(BOTH_MASKINGS)
    table = unit_table(instance, config, microbatch, level)
    holders = rng.randint(1, workers)
    rows = design_mask(table, rng.choice(list(SdpDesign)), workers, holders)
    if rows is None:
        return None
    relabel = {}
    for block in table.blocks:
        relabel.update(zip(block, rng.sample(list(block), len(block)), strict=True))
    mask = SdpMask(level, masking, holders,
                   tuple(tuple(sorted(relabel[unit] for unit in row)) for row in rows))
    chosen = rng.sample(range(devices), workers * config.devices)
    if rng.random() < 0.5:
        chosen.sort()
    return sdp_plan_on_devices(rng, instance, config, microbatch, workers, mask, chosen)


def test_vectorised_pricing_equals_the_evaluator_with_overlap():
    """With the flag, the DP's vectorised SDP pricing gives the evaluator's T and memory on
    random plans (both levels and maskings, t = 2 and 4, with and without EP, every recompute
    mode, two- and three-tier networks); the flag lowers T on some of them."""
    rng = random.Random(11)
    compared = lowered = 0
    for seed in range(16):
        configs = rng.choice([(T2,), (IntraConfig(2, 2),), (T2, IntraConfig(4, 1))])
        instance = _with_overlap(random_sdp_instance(
            seed, num_blocks=rng.choice([1, 2]), units=rng.choice([1, 2, 4]),
            tier_sizes=rng.choice([(2, 2), (4, 2), (2, 2, 2)]), levels=BOTH_LEVELS,
            maskings=BOTH_MASKINGS, configs=configs, zero_stages=(0, 1, 2),
            recompute_modes=tuple(RecomputeMode), overlap_grad_reduce=rng.random() < 0.5,
            comm_scale=rng.choice([10, 30, 100]), holders=tuple(range(1, 9))))
        for plan, expected in sdp_prices_match(rng, instance, 6, _random_plan):
            compared += 1
            lowered += expected.objective_ticks < evaluate(
                _with_overlap(instance, False), plan).objective_ticks
    assert compared >= 40 and lowered >= 10


# ------------------------------------------------------------------ the four backends

# name -> keyword arguments of random_sdp_instance: t = 2 profiles, tiny enough for brute force
KINDS = {
    "neuron": dict(units=2, num_blocks=1, levels=(SdpLevel.NEURON,), maskings=BOTH_MASKINGS,
                   configs=(IntraConfig(), T2), comm_scale=30),
    "block-full-recompute": dict(units=1, levels=(SdpLevel.BLOCK,), maskings=BOTH_MASKINGS,
                                 configs=(T2,), comm_scale=30, hbm_bytes=35 * 10**9,
                                 recompute_modes=(RecomputeMode.NONE, RecomputeMode.FULL)),
    "three-tier": dict(units=1, tier_sizes=(2, 1, 2), levels=BOTH_LEVELS,
                       maskings=BOTH_MASKINGS, configs=(T2,), comm_scale=30),
}
SEEDS = (0, 1)


def _instance(kind: str, seed: int, overlap: bool = True):
    return _with_overlap(random_sdp_instance(seed, strategies=(Strategy.SDP,), **KINDS[kind]),
                         overlap)


def _sdp(instance, backend: str, space: Space):
    """(status, T_eff) of the backend's SDP optimum, refereed by the registry."""
    options = SolveOptions(space=space, time_limit_s=60.0, seed=0, workers=1)
    result = solve(instance, backend, options).sdp
    assert result.status in (Status.OPTIMAL, Status.INFEASIBLE), result.message
    return result.status, result.effective


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("kind", sorted(KINDS))
def test_structured_optimum_agrees_with_overlap(kind, seed):
    """DP, brute force, CP-SAT and the MILP find the same structured SDP optimum T_eff."""
    instance = _instance(kind, seed)
    dp = _sdp(instance, "dp", Space.STRUCTURED)
    assert dp[0] is Status.OPTIMAL
    for backend in ("brute", "cpsat", "milp"):
        assert _sdp(instance, backend, Space.STRUCTURED) == dp, backend


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("kind", sorted(KINDS))
def test_full_space_optimum_agrees_with_overlap(kind, seed):
    """CP-SAT and the MILP find brute force's full-space SDP optimum (any mask, any
    placement: the model must know which workers' TP groups are tier-0 local)."""
    instance = _instance(kind, seed)
    brute = _sdp(instance, "brute", Space.FULL)
    assert brute[0] is Status.OPTIMAL
    assert _sdp(instance, "cpsat", Space.FULL) == brute
    assert _sdp(instance, "milp", Space.FULL) == brute


def test_the_overlap_binds_on_the_compared_instances():
    """The instances above are ones where §5 e matters: the DP's SDP optimum with the flag is
    never worse than without and strictly better on most of them."""
    better = 0
    for kind in KINDS:
        for seed in SEEDS:
            with_flag = _sdp(_instance(kind, seed), "dp", Space.STRUCTURED)[1]
            without = _sdp(_instance(kind, seed, False), "dp", Space.STRUCTURED)[1]
            assert with_flag <= without
            better += with_flag < without
    assert better >= len(KINDS) * len(SEEDS) - 1


def test_graph_networks_hide_nothing():
    """No tier-0 domains on a graph: the flag leaves the SDP optimum unchanged."""
    instance = random_sdp_instance(0, strategies=(Strategy.SDP,), units=2, num_blocks=1,
                                   graph=True, levels=BOTH_LEVELS, maskings=BOTH_MASKINGS,
                                   configs=(T2,), comm_scale=30)
    for backend in ("dp", "cpsat"):
        assert _sdp(_with_overlap(instance), backend, Space.STRUCTURED) == \
            _sdp(instance, backend, Space.STRUCTURED)
