"""Tensor-parallel communication overlap (``tp_comm_overlap``, docs/cost-model.md §5 e).

The worked example's cluster (two nodes of two devices: 1e11 B/s and 1 us inside a node,
1e10 B/s and 10 us between) with a t = 2 profile: fwd 1 ms, bwd 2 ms and one TP all-reduce
per direction.  A TP all-reduce of 1e8 B inside a node costs 1e8 / 1e11 s + 2 us =
1,002,000 ticks; with the overlap each direction exposes max(ceil(C / t), C − X) =
max(501,000, 1,002,000 − X) = 501,000 (X = 1,000,000 forward, 2,000,000 backward).
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from nest_cp import IntraConfig, Plan, Stage, evaluate, instance_from_dict
from nest_cp.cost.terms import tp_overlap_exposed
from nest_cp.model.instance import RecomputeMode

DATA = Path(__file__).parent / "data"
T2 = IntraConfig(tp=2)


def _instance(volume_bytes: float, overlap: bool, modes=("none",)):
    """The worked example with a t = 2 profile carrying one TP all-reduce per direction."""
    data = json.loads((DATA / "worked_example.json").read_text())
    block = data["workload"]["layers"][0]
    single = block["profiles"][0]
    block["profiles"].append({**single, "tp": 2, "collectives": [
        {"kind": "all_reduce", "volume_bytes": volume_bytes, "group": "tp", "phase": phase}
        for phase in ("fwd", "bwd")]})
    training = data["training"]
    training.pop("allow_recompute")
    training.update(tp_comm_overlap=overlap, recompute=list(modes))
    return instance_from_dict(data)


def _plan(devices, mode=RecomputeMode.NONE) -> Plan:
    """S = 1, d = 1: both layers on one TP pair."""
    return Plan(T2, 1, 0, 1, (Stage(0, 1, mode),), ((tuple(devices),),))


def _collectives(instance, plan) -> int:
    evaluation = evaluate(instance, plan)
    assert evaluation.feasible, evaluation.violations
    return evaluation.chunks[0].collective_ticks


def test_worked_example_exposes_one_chunk_per_direction():
    """§5 e's example: 1,002,000 ticks per direction without the overlap, 501,000 with."""
    assert _collectives(_instance(1e8, False), _plan((0, 1))) == 2 * 2 * 1_002_000
    assert _collectives(_instance(1e8, True), _plan((0, 1))) == 2 * 2 * 501_000


def test_a_short_gemm_leaves_the_rest_exposed():
    """C = 1e9 / 1e11 s + 2 us = 10,002,000: forward max(5,001,000, 9,002,000), backward
    max(5,001,000, 8,002,000), per layer."""
    assert _collectives(_instance(1e9, True), _plan((0, 1))) == 2 * (9_002_000 + 8_002_000)


def test_a_tp_group_across_nodes_is_not_overlapped():
    """Devices 0 and 2 are in different nodes: the pair is priced in full on tier 1."""
    plain = _collectives(_instance(1e8, False), _plan((0, 2)))
    assert _collectives(_instance(1e8, True), _plan((0, 2))) == plain


def test_full_recompute_hides_the_rerun_forward_too():
    """The rerun forward repeats the forward all-reduce, hidden the same way: 2·501,000 for
    the forward of each layer (the recompute term carries the second)."""
    instance = _instance(1e8, True, ("none", "full"))
    evaluation = evaluate(instance, _plan((0, 1), RecomputeMode.FULL))
    chunk = evaluation.chunks[0]
    assert chunk.collective_ticks == 2 * 2 * 501_000
    assert chunk.recompute_ticks == 2 * (1_000_000 + 501_000)


def test_flag_changes_nothing_without_tp():
    """t = 1 plans have no TP collective: the flag prices them the same."""
    plan = Plan(IntraConfig(), 1, 0, 1, (Stage(0, 1),), (((0,),),))
    on, off = _instance(1e8, True), _instance(1e8, False)
    assert evaluate(on, plan).objective_ticks == evaluate(off, plan).objective_ticks


@pytest.mark.parametrize("collective,compute,tp,expected", [
    (0, 5, 2, 0), (10, 0, 2, 10), (10, 100, 2, 5), (11, 100, 2, 6), (12, 4, 4, 8),
    (9, 9, 8, 2)])
def test_exposed_part(collective, compute, tp, expected):
    assert tp_overlap_exposed(collective, compute, tp) == expected


def test_graph_networks_never_overlap():
    """(e) needs tier-0 domains: on a graph the stage replica is never tp_local."""
    instance = _instance(1e8, True)
    graph = {"kind": "graph", "switches": [], "links": [
        {"a": a, "b": b, "bandwidth_Bps": 1e11, "latency_s": 1e-6}
        for a, b in ((0, 1), (1, 2), (2, 3), (0, 3))]}
    cluster = dataclasses.replace(instance.cluster, network=instance_from_dict({
        **json.loads((DATA / "worked_example.json").read_text()),
        "cluster": {**json.loads((DATA / "worked_example.json").read_text())["cluster"],
                    "network": graph}}).cluster.network)
    on_graph = dataclasses.replace(instance, cluster=cluster)
    off_graph = dataclasses.replace(on_graph, training=dataclasses.replace(
        on_graph.training, tp_comm_overlap=False))
    assert _collectives(on_graph, _plan((0, 1))) == _collectives(off_graph, _plan((0, 1)))


def test_evaluate_reports_what_the_overlap_hides():
    """The chunk report and the stage table say what tp_comm_overlap hid: per layer
    2 · (1,002,000 − 501,000) ticks, 2.004 ms for the two layers."""
    from nest_cp.cli.report import stage_lines

    instance = _instance(1e8, True)
    evaluation = evaluate(instance, _plan((0, 1)))
    assert evaluation.chunks[0].tp_hidden_ticks == 2 * 2 * 501_000
    assert "stage 0 2.004 ms" in "\n".join(stage_lines(instance, evaluation))
    assert evaluate(_instance(1e8, True), _plan((0, 2))).chunks[0].tp_hidden_ticks == 0


def test_dp_finds_the_worked_optimum_with_the_overlap():
    """The DP's optimum of the worked instance under the flag is the evaluator's price of its
    plan, and no higher than the same plan priced without the flag."""
    from nest_cp.solvers.registry import solve

    for volume in (1e8, 1e9):
        on, off = _instance(volume, True), _instance(volume, False)
        best_on, best_off = solve(on, "dp"), solve(off, "dp")
        assert best_on.objective_ticks == evaluate(on, best_on.plan).objective_ticks
        assert best_on.objective_ticks <= best_off.objective_ticks


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("tiers,configs", [
    ((2, 3), (IntraConfig(2, 1), IntraConfig(2, 2))),
    ((4, 2), (IntraConfig(1, 1), IntraConfig(4, 1), IntraConfig(2, 2))),
    ((2, 2, 2), (IntraConfig(2, 1), IntraConfig(4, 1)))])
def test_dp_agrees_with_brute_force_under_the_overlap(seed, tiers, configs):
    """The DP's structured optimum with tp_comm_overlap equals brute force's (which prices
    every plan with the evaluator), on hierarchies where TP groups fit a node or not."""
    from nest_cp.harness.generators import random_instance
    from nest_cp.model.result import SolveOptions, Space
    from nest_cp.solvers.registry import solve

    base = random_instance(seed, num_layers=3, tier_sizes=tiers, configs=configs,
                           comm_scale=20, zero_stages=(0, 1, 3), global_batch=8,
                           recompute_modes=(RecomputeMode.NONE, RecomputeMode.FULL))
    instance = dataclasses.replace(base, training=dataclasses.replace(
        base.training, tp_comm_overlap=True))
    dp = solve(instance, "dp")
    brute = solve(instance, "brute", SolveOptions(space=Space.STRUCTURED))
    assert dp.objective_ticks == brute.objective_ticks
    assert dp.objective_ticks <= solve(base, "dp").objective_ticks
