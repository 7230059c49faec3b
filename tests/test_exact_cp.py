"""The exact backends search context parallelism in the structured space (DESIGN §3.4,
docs/context-parallelism.md): c is a sub-problem choice beside t and e, each stage
replica's exposed ring or all-to-alls are floored per layout as the evaluator prices them,
the sync and ZeRO shards run over d·c ranks and the K/V buffers count in memory.  So on
small CP instances the DP, the structured CP-SAT, the structured MILP (HiGHS) and
structured brute force agree in status and objective to the tick, and every bound the
driver prunes with stays at most the least plan of its sub-problem."""

from __future__ import annotations

import dataclasses

import pytest
from ortools.sat.python import cp_model
from pinning import pinned_cpsat
from test_dp_cp import SHAPES, _cp_instance, _worked_example
from tiers import first_fast, slow_unless

from nest_cp import IntraConfig, Plan, Stage
from nest_cp.harness.generators import random_cp_instance
from nest_cp.model.instance import CpComm, RecomputeMode
from nest_cp.model.network import NetworkModel
from nest_cp.model.result import SolveOptions, Space, Status
from nest_cp.solvers.brute import least_per_shape
from nest_cp.solvers.exact import enumerate_subproblems
from nest_cp.solvers.exact.adapters import CpSatAdapter
from nest_cp.solvers.exact.bounds import cheapest_path_bound, communication_lower_bound
from nest_cp.solvers.exact.groups import rank_groups
from nest_cp.solvers.exact.pricing import ChunkPricing
from nest_cp.solvers.exact.rank_bounds import rank_lower_bound
from nest_cp.solvers.exact.skeleton import build_model
from nest_cp.solvers.registry import CONTEXT_BACKENDS, context_note, solve

CPSAT = SolveOptions(space=Space.STRUCTURED, seed=0, workers=1, time_limit_s=60)
HIGHS = dataclasses.replace(CPSAT, milp_solver="highs")
BRUTE = SolveOptions(space=Space.STRUCTURED)
C = IntraConfig


def _agree(instance) -> tuple[Status, int | None]:
    """(status, objective) on which the DP, the structured CP-SAT and MILP (HiGHS) and
    structured brute force agree (every plan refereed by the registry)."""
    found = {"dp": solve(instance, "dp"), "cpsat": solve(instance, "cpsat", CPSAT),
             "milp": solve(instance, "milp", HIGHS), "brute": solve(instance, "brute", BRUTE)}
    answers = {name: (result.status, result.objective_ticks) for name, result in found.items()}
    assert len(set(answers.values())) == 1, answers
    return answers["brute"]


# (seed, comm) of tests/test_dp_cp.py's instances: every shape of its SHAPES (seed % 9), the
# fast tier covering e = 2 beside c = 2 with ZeRO 0/1/3 and every recompute mode (2, 6),
# c = 4 on three tiers (13), v = 2 (8, 16) and both exchanges
CASES = [(seed, comm) for seed in range(18) for comm in ("p2p", "a2a")]
FAST = {(2, "p2p"), (6, "a2a"), (8, "a2a"), (13, "a2a"), (16, "p2p")}


@pytest.mark.parametrize(("seed", "comm"), slow_unless(CASES, lambda case: case in FAST))
def test_exact_backends_equal_dp_and_brute_force_with_context_widths(seed, comm):
    """DP = structured CP-SAT = structured MILP = structured brute force on small CP
    instances (c in {1, 2, 4}, p2p and a2a, ZeRO, recompute modes, e = 2 beside c, v = 2)."""
    _agree(_cp_instance(seed, comm))


@pytest.mark.parametrize("seed", first_fast(range(8)))
def test_exact_backends_equal_brute_force_on_graphs_with_context_widths(seed):
    """The same on random graphs (rings and CP groups on their widest paths)."""
    instance = random_cp_instance(seed, cp_comm=("p2p", "a2a")[seed % 2],
                                  comm_scale=(1, 10, 50)[seed % 3],
                                  hbm_bytes=(12, 20, 40)[seed % 5 % 3] * 10**9,
                                  global_batch=(2, 4, 8)[seed % 7 % 3], graph=True,
                                  **SHAPES[seed % len(SHAPES)])
    _agree(instance)


def test_exact_optima_use_context_widths():
    """The agreement is not vacuous: on seeds 6 (e = 2 beside c) and 12 (p2p) CP-SAT's
    optimum has c = 2."""
    plans = [solve(_cp_instance(seed, "p2p"), "cpsat", CPSAT).plan for seed in (6, 12)]
    assert [plan.config.cp for plan in plans] == [2, 2]


# ------------------------------------------------------------------ the worked example

RING_IN_NODES = (((0, 1), (2, 3)),)  # plan (A): each replica's ring inside a node
RING_ACROSS = (((0, 2), (1, 3)),)  # plan (B): each ring across the spine


@pytest.mark.parametrize(("comm", "zero", "mode", "placement", "ticks"), [
    (CpComm.P2P, 0, RecomputeMode.NONE, RING_IN_NODES, 312_064_000),
    (CpComm.P2P, 1, RecomputeMode.NONE, RING_IN_NODES, 237_064_000),
    (CpComm.P2P, 0, RecomputeMode.FULL, RING_IN_NODES, 316_066_000),
    (CpComm.P2P, 0, RecomputeMode.NONE, RING_ACROSS, 339_100_000),
    (CpComm.A2A, 0, RecomputeMode.NONE, RING_IN_NODES, 320_068_000),
])
def test_cpsat_reproduces_the_worked_example(comm, zero, mode, placement, ticks):
    """DESIGN §3.4's worked plans (A) with ZeRO 0 and 1 and with full recomputation, (B) and
    (C), pinned into the structured CP-SAT model of their sub-problem, price as the page
    says; left free, the sub-problem's optimum is the cheaper of (A) and (B), the ring
    inside a node: (A)'s price."""
    instance = _worked_example(comm, 80 * 10**9, (zero,))
    instance = dataclasses.replace(instance, training=dataclasses.replace(
        instance.training, recompute_modes=(mode,)))
    plan = Plan(C(cp=2), 1, zero, 2, (Stage(0, 0, mode),), placement)
    sub = next(sub for sub in enumerate_subproblems(instance) if sub.matches(plan))
    network = NetworkModel(instance.cluster)
    assert pinned_cpsat(instance, sub, network, Space.STRUCTURED, plan) == ticks
    if placement == RING_IN_NODES:
        assert _free_cpsat(instance, sub, network) == ticks


def _free_cpsat(instance, sub, network) -> int:
    """CP-SAT's proven optimum of ``sub``'s structured model (one worker, seed 0)."""
    adapter = CpSatAdapter()
    build_model(adapter, instance, sub, network, Space.STRUCTURED, None)
    solver = cp_model.CpSolver()
    solver.parameters.num_workers = 1
    solver.parameters.random_seed = 0
    assert solver.solve(adapter.model) == cp_model.OPTIMAL
    return round(solver.objective_value)


@pytest.mark.parametrize("backend", ["cpsat", "milp"])
def test_exact_backends_find_the_worked_example_under_the_memory_squeeze(backend):
    """With ZeRO 1 and 12e9 B of HBM only d = 2 fits, so the optimum is the worked example's
    plan (A) with ZeRO 1: 237,064,000 ticks, OPTIMAL, its rings inside the nodes."""
    options = HIGHS if backend == "milp" else CPSAT
    found = solve(_worked_example(CpComm.P2P, 12 * 10**9, (1,)), backend, options)
    assert found.status is Status.OPTIMAL and found.objective_ticks == 237_064_000
    assert all(sorted(replica) in ([0, 1], [2, 3]) for replica in found.plan.placement[0])


# ------------------------------------------------------------------ groups and bounds


def test_rank_groups_with_context_width():
    """t = 1, c = 2, e = 2, d = 2 (ranks j = c_index + 2·e_index): a ring per expert index, the
    shard groups over the d·c ranks of one expert index, the dense group over all d·e·c,
    the EP groups over the e ranks of one context index."""
    groups = rank_groups(1, 2, C(cp=2, ep=2), wrap=False)
    assert sorted(groups.context(0, 0)) == [((0, 0, 0), (0, 0, 1)), ((0, 0, 2), (0, 0, 3))]
    assert sorted(sorted(group) for group in groups.shards(0)) == [
        [(0, 0, 0), (0, 0, 1), (0, 1, 0), (0, 1, 1)], [(0, 0, 2), (0, 0, 3), (0, 1, 2), (0, 1, 3)]]
    assert sorted(groups.dense[0, 0]) == [(0, r, j) for r in range(2) for j in range(4)]
    assert sorted(groups.ep.values())[:2] == [((0, 0, 0), (0, 0, 2)), ((0, 0, 1), (0, 0, 3))]


BOUND_CASES = [(12, "p2p"), (6, "a2a"), (2, "p2p"), (7, "p2p"), (9, "a2a"), (16, "a2a")]


def _bounds(instance):
    """(sub-problem, cheapest-path bound, rank bound, the driver's bound) of every feasible
    sub-problem with c > 1."""
    network, training = NetworkModel(instance.cluster), instance.training
    flags = (training.overlap_grad_reduce, None, training.overlap_param_gather)
    rows = []
    for sub in enumerate_subproblems(instance):
        if sub.feasible and sub.config.cp > 1:
            pricing = ChunkPricing(instance, sub)
            rows.append((sub, cheapest_path_bound(sub, pricing, network, *flags),
                         rank_lower_bound(sub, pricing, network, *flags),
                         max(sub.lower_bound_ticks,
                             communication_lower_bound(sub, pricing, network, *flags))))
    return rows


@pytest.mark.parametrize(("seed", "comm"),
                         slow_unless(BOUND_CASES, lambda case: case[0] in (12, 6)))
def test_bounds_with_context_widths_are_at_most_the_least_plan(seed, comm):
    """On 4-device CP instances every sub-problem with c > 1 has its driver bound (compute,
    cheapest path and rank bound, each with the context term and the §3.4 group sizes) at
    most the least full-space plan of its shape (brute force)."""
    instance = _cp_instance(seed, comm)
    least = least_per_shape(instance)
    checked = 0
    for sub, _, _, bound in _bounds(instance):
        if sub.shape_key in least:
            assert bound <= least[sub.shape_key], sub.label
            checked += 1
    assert checked


def test_context_bounds_are_tight_somewhere_loose_elsewhere_and_not_vacuous(monkeypatch):
    """On seeds 12 (p2p) and 6 (a2a): the driver bound equals the least plan of some
    sub-problem with c > 1 and is below it on another, the rank bound beats the cheapest-path
    bound on some, and without the context term some bound falls (the term counts)."""
    instances = [_cp_instance(12, "p2p"), _cp_instance(6, "a2a")]
    least = [least_per_shape(instance) for instance in instances]
    rows = [(row, shapes[row[0].shape_key]) for instance, shapes in zip(instances, least,
                                                                         strict=True)
            for row in _bounds(instance) if row[0].shape_key in shapes]
    assert any(bound == optimum for (*_, bound), optimum in rows)
    assert any(bound < optimum for (*_, bound), optimum in rows)
    assert any(rank > cheapest for (_, cheapest, rank, _), _ in rows)
    with_term = [bound for (*_, bound), _ in rows]
    monkeypatch.setattr(ChunkPricing, "cheapest_context", lambda *arguments: 0)
    without = [bound for instance, shapes in zip(instances, least, strict=True)
               for (sub, *_, bound) in _bounds(instance) if sub.shape_key in shapes]
    assert all(low <= high for low, high in zip(without, with_term, strict=True))
    assert any(low < high for low, high in zip(without, with_term, strict=True))


# ------------------------------------------------------------------ the registry


def test_registry_lets_the_structured_exact_backends_search_context_widths():
    """cpsat and milp search c > 1 in the structured space (no note, OPTIMAL kept) and c = 1
    only in the full space (the note says so; FEASIBLE without a bound)."""
    instance = _cp_instance(2, "p2p")
    for backend in ("cpsat", "milp"):
        assert Space.STRUCTURED in CONTEXT_BACKENDS[backend]
        assert context_note(instance, backend, Space.STRUCTURED) is None
        assert "full space" in context_note(instance, backend, Space.FULL)
    full = solve(instance, "cpsat", dataclasses.replace(CPSAT, space=Space.FULL))
    assert full.status is Status.FEASIBLE and full.bound_ticks is None
    assert solve(instance, "cpsat", CPSAT).status is Status.OPTIMAL
