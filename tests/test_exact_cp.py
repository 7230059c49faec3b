"""The exact backends search context parallelism (DESIGN §3.4, docs/context-parallelism.md):
c is a sub-problem choice beside t and e, each stage replica's exposed ring or all-to-alls
are floored per layout (structured space) or per signature on every ring pair or CP group
(full space) as the evaluator prices them, the sync and ZeRO shards run over d·c ranks and
the K/V buffers count in memory.  So on small CP instances the DP, CP-SAT, the MILP
(HiGHS) and brute force agree in status and objective to the tick in the structured space,
CP-SAT, the MILP and brute force in the full space, and every bound the driver prunes with
stays at most the least plan of its sub-problem."""

from __future__ import annotations

import dataclasses
import random

import pytest
from ortools.sat.python import cp_model
from pinning import pinned_cpsat, random_placement
from test_dp_cp import SHAPES, _cp_instance, _worked_example
from tiers import first_fast, slow_unless

from nest_cp import IntraConfig, Plan, Stage, evaluate
from nest_cp.harness.generators import random_cp_instance
from nest_cp.model.instance import CpComm, HierarchicalNetwork, RecomputeMode, Tier
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


def _agree(instance) -> None:
    """Assert that the DP, the structured CP-SAT and MILP (HiGHS) and structured brute force
    agree in status and objective (every plan refereed by the registry)."""
    found = {"dp": solve(instance, "dp"), "cpsat": solve(instance, "cpsat", CPSAT),
             "milp": solve(instance, "milp", HIGHS), "brute": solve(instance, "brute", BRUTE)}
    answers = {name: (result.status, result.objective_ticks) for name, result in found.items()}
    assert len(set(answers.values())) == 1, answers


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


def _full_instance(seed: int, kind: str):
    """A 4-device CP instance of tests/test_dp_cp.py's shapes on two nodes whose outer tier is
    faster but slower to start than the inner one (so ring pairs' prices are not ordered by
    one path: the full space's per-signature floors matter), or on a random graph."""
    shape = SHAPES[seed % len(SHAPES)]
    instance = random_cp_instance(seed, cp_comm=kind if kind != "graph" else "p2p",
                                  comm_scale=(1, 10, 50)[seed % 3],
                                  hbm_bytes=(12, 20, 40)[seed % 5 % 3] * 10**9,
                                  global_batch=(2, 4, 8)[seed % 7 % 3],
                                  graph=kind == "graph", **shape)
    if kind == "graph":
        return instance
    crossed = HierarchicalNetwork((Tier("node", 2, 1e10, 1e-7), Tier("spine", 2, 1e11, 2e-4)))
    return dataclasses.replace(instance, cluster=dataclasses.replace(instance.cluster,
                                                                     network=crossed))


FULL_CASES = [(seed, kind) for seed in (6, 12, 15, 0, 2) for kind in ("p2p", "a2a", "graph")]


@pytest.mark.parametrize(("seed", "kind"),
                         slow_unless(FULL_CASES, lambda case: case in {(6, "a2a"), (12, "p2p"),
                                                                       (15, "graph")}))
def test_full_space_exact_backends_equal_brute_force_with_context_widths(seed, kind):
    """Full space: CP-SAT = MILP (HiGHS) = brute force, status and objective, on 4-device CP
    instances (hierarchies with crossed tiers, graphs)."""
    instance = _full_instance(seed, kind)
    full = [solve(instance, "cpsat", dataclasses.replace(CPSAT, space=Space.FULL)),
            solve(instance, "milp", dataclasses.replace(HIGHS, space=Space.FULL)),
            solve(instance, "brute", SolveOptions(space=Space.FULL))]
    assert len({(result.status, result.objective_ticks) for result in full}) == 1, full


@pytest.mark.parametrize("kind", ["p2p", "a2a", "graph"])
def test_full_space_model_prices_random_placements_as_the_evaluator(kind):
    """Every variable of the full-space model pinned to a random plan with c = 2 (random
    split, recompute modes and injective placement): CP-SAT's objective is the evaluator's
    for every plan that fits."""
    rng = random.Random(kind)
    instance = _full_instance(12, kind)
    network = NetworkModel(instance.cluster)
    checked = 0
    for sub in enumerate_subproblems(instance):
        if sub.config.cp == 1 or not sub.feasible:
            continue
        for _ in range(3):
            plan = Plan(sub.config, sub.microbatch, sub.zero, sub.dp,
                        _random_split(rng, sub), random_placement(rng, sub, network,
                                                                  Space.FULL),
                        sub.virtual_stages)
            expected = evaluate(instance, plan)
            if expected.feasible:
                assert pinned_cpsat(instance, sub, network, Space.FULL, plan) == \
                    expected.objective_ticks, plan
                checked += 1
    assert checked >= 5


def _random_split(rng, sub) -> tuple[Stage, ...]:
    """A split of the sub-problem's offered options (one mode per stage), chosen at random."""
    while True:
        chunks, first = [], 0
        modes = [rng.choice(sorted({o.mode for o in sub.options[0]}, key=str))
                 for _ in range(sub.num_stages)]
        for chunk in range(sub.num_chunks):
            fitting = [o for o in sub.options[chunk] if o.first_layer == first
                       and o.mode is modes[chunk % sub.num_stages]]
            if not fitting:
                break
            option = rng.choice(fitting)
            chunks.append(Stage(option.first_layer, option.last_layer, option.mode))
            first = option.last_layer + 1
        if len(chunks) == sub.num_chunks:
            return tuple(chunks)


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


def test_registry_lets_the_exact_backends_search_context_widths():
    """cpsat and milp are context backends: no note, and OPTIMAL kept in both spaces."""
    instance = _cp_instance(12, "p2p")
    for backend in ("cpsat", "milp"):
        assert backend in CONTEXT_BACKENDS and context_note(instance, backend) is None
    for space in Space:
        found = solve(instance, "cpsat", dataclasses.replace(CPSAT, space=space))
        assert found.status is Status.OPTIMAL and found.bound_ticks == found.objective_ticks
