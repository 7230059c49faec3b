"""The exact backends price tensor-parallel communication overlap (``tp_comm_overlap``,
docs/cost-model.md §5 e) as the evaluator does, in the structured and the full space.

- the worked example of tests/test_tp_overlap.py solved through CP-SAT and the MILP;
- a stage replica with one TP group inside a node and one across pays its TP
  collectives in full (the rule is per stage replica, not per group);
- random plans pinned into the models cost the evaluator's objective;
- on random instances CP-SAT and the MILP find brute force's optimum, on seeds where
  the overlap lowers the optimum and on seeds whose optimum puts a TP group across nodes.

Objectives are compared, never plans; one worker, seed 0.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import random
from pathlib import Path

import pytest
from pinning import pinned_cpsat, random_placement
from tiers import SLOW, slow_unless

from nest_cp import instance_from_dict
from nest_cp.cost import terms as cost
from nest_cp.cost.evaluate import evaluate
from nest_cp.harness.generators import random_instance
from nest_cp.model.instance import (
    CollectiveGroup,
    HierarchicalNetwork,
    IntraConfig,
    RecomputeMode,
    Tier,
)
from nest_cp.model.network import NetworkModel
from nest_cp.model.plan import Plan, Stage, tensor_groups
from nest_cp.model.result import Space, Status
from nest_cp.solvers.exact import enumerate_subproblems
from nest_cp.solvers.exact.adapters import CpSatAdapter, MilpAdapter, RawStatus
from nest_cp.solvers.exact.skeleton import build_model, extract_plan, hint_model
from nest_cp.solvers.registry import SolveOptions, solve

pytest.importorskip("nest_cp.solvers.brute", reason="the brute-force oracle is not available")

DATA = Path(__file__).parent / "data"
T2 = IntraConfig(tp=2)
MODES = (RecomputeMode.NONE, RecomputeMode.FULL)
TP_CONFIGS = (IntraConfig(), IntraConfig(2, 1), IntraConfig(2, 2))
ADAPTERS = {"cpsat": CpSatAdapter, "milp": lambda: MilpAdapter("highs")}


def _overlapping(instance, on: bool = True):
    """The instance with ``tp_comm_overlap`` set to ``on``."""
    return dataclasses.replace(instance, training=dataclasses.replace(
        instance.training, tp_comm_overlap=on))


def _crossed(instance, node: int, outer: int):
    """The instance on nodes of ``node`` devices at 40 GB/s, 0.1 us, joined ``outer`` to a
    tier at 100 GB/s, 100 us: a large TP all-reduce is cheaper across nodes unless the
    overlap hides it, a small one inside a node."""
    tiers = (Tier("node", node, 4e10, 1e-7), Tier("rack", outer, 1e11, 1e-4))
    return dataclasses.replace(instance, cluster=dataclasses.replace(
        instance.cluster, network=HierarchicalNetwork(tiers)))


# ------------------------------------------------------------------ the worked example


def _worked(volume_bytes: float, overlap: bool, modes=("none",)):
    """tests/test_tp_overlap.py's instance: the worked example with a t = 2 profile (fwd
    1 ms, bwd 2 ms, one TP all-reduce of ``volume_bytes`` per direction)."""
    data = json.loads((DATA / "worked_example.json").read_text())
    block = data["workload"]["layers"][0]
    block["profiles"].append({**block["profiles"][0], "tp": 2, "collectives": [
        {"kind": "all_reduce", "volume_bytes": volume_bytes, "group": "tp", "phase": phase}
        for phase in ("fwd", "bwd")]})
    data["training"].pop("allow_recompute")
    data["training"].update(tp_comm_overlap=overlap, recompute=list(modes))
    return instance_from_dict(data)


def _pair_sub(instance):
    """The sub-problem of tests/test_tp_overlap.py's plan: t = 2, S = 1, d = 1."""
    return next(sub for sub in enumerate_subproblems(instance)
                if sub.config == T2 and sub.num_stages == 1 and sub.dp == 1)


def _solve_sub(backend: str, instance, sub, space: Space) -> tuple[int, Plan]:
    """The optimum of one sub-problem's model and its plan."""
    adapter = ADAPTERS[backend]()
    handles = build_model(adapter, instance, sub, NetworkModel(instance.cluster), space, None)
    outcome = adapter.solve(30.0, 0, 1)
    assert outcome.status is RawStatus.OPTIMAL
    return round(outcome.objective), extract_plan(handles, adapter.value)


def _pinned_milp(instance, sub, space: Space, plan: Plan) -> int:
    """The MILP (HiGHS) of ``sub`` with its option and placement variables fixed to ``plan``."""
    adapter = MilpAdapter("highs")
    handles = build_model(adapter, instance, sub, NetworkModel(instance.cluster), space, None)
    hint_model(adapter, handles, plan)
    for var in adapter.problem.variables():
        if var.varValue is not None:  # the hinted 0/1 variables
            var.lowBound = var.upBound = var.varValue
    outcome = adapter.solve(30.0, 0, 1)
    assert outcome.status is RawStatus.OPTIMAL
    return round(outcome.objective)


# §5 e's numbers per layer: compute fwd + bwd 3,000,000 ticks; the all-reduce of 1e8 B in
# a node 1,002,000 ticks per direction, 501,000 exposed with the overlap; of 1e9 B,
# 9,002,000 forward and 8,002,000 backward exposed; full recomputation reruns the
# 1,000,000-tick forward and its all-reduce, exposed as the first.  m = 8 microbatches.
WORKED = {
    "1e8 plain": (1e8, False, ("none",), 3_000_000 + 2 * 1_002_000),
    "1e8 overlapped": (1e8, True, ("none",), 3_000_000 + 2 * 501_000),
    "1e9 overlapped": (1e9, True, ("none",), 3_000_000 + 9_002_000 + 8_002_000),
    "1e8 full recompute": (1e8, True, ("full",), 3_000_000 + 1_000_000 + 3 * 501_000),
}


@pytest.mark.parametrize("backend", sorted(ADAPTERS))
@pytest.mark.parametrize("case", sorted(WORKED))
def test_worked_example_through_the_exact_models(case, backend):
    """Structured space: the t = 2, S = 1, d = 1 model's optimum is the pair on devices
    0 and 1 at 8 microbatches · 2 layers · §5 e's per-layer ticks, the evaluator's price."""
    volume, overlap, modes, per_layer = WORKED[case]
    instance = _worked(volume, overlap, modes)
    objective, plan = _solve_sub(backend, instance, _pair_sub(instance), Space.STRUCTURED)
    assert plan.placement == (((0, 1),),)
    assert objective == 8 * 2 * per_layer == evaluate(instance, plan).objective_ticks


@pytest.mark.parametrize("backend", sorted(ADAPTERS))
def test_worked_pair_across_nodes_pays_in_full(backend):
    """Full space: the pair pinned on devices 0 and 2 pays 10,020,000 ticks per direction
    (1e8 B on tier 1), as without the flag; free, the model keeps the pair in a node."""
    instance = _worked(1e8, True)
    sub = _pair_sub(instance)
    across = Plan(T2, 1, 0, 1, (Stage(0, 1),), (((0, 2),),))
    pinned = pinned_cpsat(instance, sub, NetworkModel(instance.cluster), Space.FULL, across) \
        if backend == "cpsat" else _pinned_milp(instance, sub, Space.FULL, across)
    assert pinned == 8 * 2 * (3_000_000 + 2 * 10_020_000) \
        == evaluate(_overlapping(instance, False), across).objective_ticks
    objective, plan = _solve_sub(backend, instance, sub, Space.FULL)
    assert objective == 8 * 2 * (3_000_000 + 2 * 501_000)
    assert NetworkModel(instance.cluster).tier_of(plan.placement[0][0]) == 0


# ------------------------------------------------------------------ per stage replica


def _per_group_tp_ticks(instance, plan: Plan) -> int:
    """What stage 0 replica 0's TP collectives would cost if each TP group were overlapped
    on its own (inside a node) or paid in full (across): the rule §5 e does not state."""
    network, config = NetworkModel(instance.cluster), plan.config
    devices = plan.placement[0][0]
    groups = [[devices[j] for j in group] for group in tensor_groups(config)]
    total = 0
    for layer in instance.workload.layers[plan.stages[0].first_layer:
                                          plan.stages[0].last_layer + 1]:
        profile = layer.profile(config, plan.microbatch)
        hiding = cost.compute_ticks(profile, instance.training.tick_s)
        total += max(cost.layer_collective_ticks(
            profile, config, cost.GroupPaths((network.group_path(group),), ()),
            instance.training.tick_s, None, hiding if network.tier_of(group) == 0 else None)
            for group in groups)
    return total


def test_a_replica_with_one_group_across_pays_every_group_in_full():
    """t = 2, e = 2 on nodes of four: TP group (0, 1) inside node 0, (3, 4) across nodes.
    The stage replica pays its TP collectives in full in both models (the evaluator's
    price); pricing the group inside the node overlapped would be cheaper here."""
    instance = _overlapping(_crossed(random_instance(
        3, num_layers=2, tier_sizes=(4, 2), configs=(IntraConfig(2, 2),), comm_scale=30,
        recompute_modes=(RecomputeMode.NONE,), global_batch=4), 4, 2))
    sub = next(sub for sub in enumerate_subproblems(instance)
               if sub.num_stages == 1 and sub.dp == 1)
    plan = Plan(IntraConfig(2, 2), 1, 0, 1, (Stage(0, 1),), (((0, 1, 3, 4),),))
    evaluation = evaluate(instance, plan)
    assert evaluation.feasible
    assert all(c.group is CollectiveGroup.TP for layer in instance.workload.layers
               for c in layer.profile(plan.config, 1).collectives)
    tp_ticks = evaluate(_overlapping(instance, False), plan).chunks[0].collective_ticks
    assert evaluation.chunks[0].collective_ticks == tp_ticks  # nothing hidden
    assert _per_group_tp_ticks(instance, plan) < tp_ticks    # the instance tells them apart
    network = NetworkModel(instance.cluster)
    assert pinned_cpsat(instance, sub, network, Space.FULL, plan) == evaluation.objective_ticks
    assert _pinned_milp(instance, sub, Space.FULL, plan) == evaluation.objective_ticks


# ------------------------------------------------------------------ pinned random plans


def _random_plan(rng: random.Random, instance, sub, network: NetworkModel,
                 space: Space) -> Plan:
    """A plan of the sub-problem with a random split into offered options and a random
    placement (a layout's in the structured space, any injective one in the full)."""
    stages = _random_split(rng, sub, 0, 0, instance.workload.num_layers)
    return Plan(sub.config, sub.microbatch, sub.zero, sub.dp, tuple(stages),
                random_placement(rng, sub, network, space))


def _random_split(rng: random.Random, sub, chunk: int, first_layer: int,
                  num_layers: int) -> list[Stage] | None:
    """Chunks from ``chunk`` on, starting at ``first_layer``, among the offered options."""
    if chunk == sub.num_chunks:
        return [] if first_layer == num_layers else None
    candidates = [o for o in sub.options[chunk] if o.first_layer == first_layer]
    rng.shuffle(candidates)
    for option in candidates:
        rest = _random_split(rng, sub, chunk + 1, option.last_layer + 1, num_layers)
        if rest is not None:
            return [Stage(option.first_layer, option.last_layer, option.mode), *rest]
    return None


def _replica_kinds(network: NetworkModel, plan: Plan) -> set[str]:
    """Which stage replicas the plan has: 'inside' (every TP group in a node), 'mixed'
    (some in one, some across) or 'across' (none in one)."""
    kinds = set()
    for replicas in plan.placement:
        for devices in replicas:
            inside = [network.tier_of([devices[j] for j in group]) == 0
                      for group in tensor_groups(plan.config)]
            kinds.add("inside" if all(inside) else "mixed" if any(inside) else "across")
    return kinds


@pytest.mark.parametrize("space", [Space.STRUCTURED, Space.FULL])
def test_pinned_random_plans_cost_what_the_evaluator_says(space):
    """Random single-chunk-per-stage plans with t = 2 pinned into CP-SAT cost the
    evaluator's objective with the flag on, over replicas inside, across and (full
    space) mixed."""
    instance = _overlapping(_crossed(random_instance(
        5, num_layers=3, tier_sizes=(4, 2), configs=(IntraConfig(2, 1), IntraConfig(2, 2)),
        comm_scale=30, recompute_modes=MODES, global_batch=8), 4, 2))
    network = NetworkModel(instance.cluster)
    rng = random.Random(space.value)
    subs = [sub for sub in enumerate_subproblems(instance) if sub.feasible]
    seen: set[str] = set()
    for _ in range(16):
        plan = _random_plan(rng, instance, rng.choice(subs), network, space)
        sub = next(sub for sub in subs if sub.matches(plan))
        evaluation = evaluate(instance, plan, network)
        assert evaluation.feasible, evaluation.violations
        assert pinned_cpsat(instance, sub, network, space, plan) == evaluation.objective_ticks
        seen |= _replica_kinds(network, plan)
    assert seen >= ({"inside", "across"} | ({"mixed"} if space is Space.FULL else set()))


# ------------------------------------------------------------------ optima against brute force

FULL_KINDS = {  # N <= 5: brute force enumerates every injective placement
    "two-tier": (dict(tier_sizes=(2, 2), configs=TP_CONFIGS, comm_scale=30), None),
    "crossed": (dict(tier_sizes=(2, 2), configs=TP_CONFIGS, comm_scale=30), (2, 2)),
    "partial-domains": (dict(tier_sizes=(2, 2, 2), num_devices=5, comm_scale=50,
                             configs=(IntraConfig(), IntraConfig(2, 1))), None),
    "interleaved": (dict(tier_sizes=(2, 2), num_layers=4, virtual_stages=(2,), global_batch=8,
                         configs=(IntraConfig(), IntraConfig(2, 1)), hbm_bytes=16 * 10**9,
                         comm_scale=30), None),
}
STRUCTURED_KINDS = {  # N = 8
    "wide-nodes": (dict(tier_sizes=(4, 2), num_layers=4, comm_scale=30, global_batch=16,
                        configs=(IntraConfig(), IntraConfig(2, 1), IntraConfig(4, 1))), None),
    "crossed": (dict(tier_sizes=(2, 4), num_layers=4, comm_scale=30, global_batch=16,
                     configs=TP_CONFIGS), (2, 4)),
    "three-tier": (dict(tier_sizes=(2, 2, 2), num_layers=4, comm_scale=30, global_batch=4,
                        configs=TP_CONFIGS, hbm_bytes=24 * 10**9), None),
    "interleaved": (dict(tier_sizes=(2, 4), num_layers=4, virtual_stages=(2,), global_batch=8,
                         configs=(IntraConfig(), IntraConfig(2, 2)), hbm_bytes=16 * 10**9,
                         comm_scale=30, zero_stages=(0, 3)), None),
}
SEEDS = range(3)  # the soak draws many more (its TP-overlap share); these pin the kinds


@dataclasses.dataclass(frozen=True)
class _Optima:
    """(status, objective) of one instance's optimum with the flag on (brute force, CP-SAT,
    the MILP) and of brute force's without it."""

    brute: tuple
    cpsat: tuple
    milp: tuple
    brute_without: tuple
    across: bool  # brute force's optimal plan puts a TP group across tier-0 domains


def _instance(space: Space, kind: str, seed: int):
    keywords, crossed = (FULL_KINDS if space is Space.FULL else STRUCTURED_KINDS)[kind]
    instance = random_instance(seed, recompute_modes=MODES, **{"global_batch": 4, **keywords})
    return _crossed(instance, *crossed) if crossed else instance


def _optimum(instance, backend: str, space: Space):
    solver = "cbc" if space is Space.FULL else "highs"
    result = solve(instance, backend, SolveOptions(space=space, time_limit_s=60.0, seed=0,
                                                   workers=1, milp_solver=solver))
    assert result.status in (Status.OPTIMAL, Status.INFEASIBLE), result.message
    return result


@functools.cache
def _optima(space: Space, kind: str, seed: int) -> _Optima:
    """The optima of one case, solved once per test session."""
    instance = _instance(space, kind, seed)
    on = _overlapping(instance)
    brute, cpsat, milp = (_optimum(on, backend, space) for backend in ("brute", "cpsat",
                                                                        "milp"))
    without = _optimum(instance, "brute", space)
    across = brute.plan is not None and bool(
        _replica_kinds(NetworkModel(instance.cluster), brute.plan) - {"inside"})
    return _Optima(*((r.status, r.objective_ticks) for r in (brute, cpsat, milp, without)),
                   across)


CASES = [(Space.FULL, kind, seed) for kind in sorted(FULL_KINDS) for seed in SEEDS] + \
    [(Space.STRUCTURED, kind, seed) for kind in sorted(STRUCTURED_KINDS) for seed in SEEDS]


@pytest.mark.parametrize("space,kind,seed", slow_unless(CASES, lambda case: case[2] == 0))
def test_cpsat_milp_brute_agree_with_overlap(space, kind, seed):
    """With tp_comm_overlap, CP-SAT and the MILP find brute force's optimum."""
    optima = _optima(space, kind, seed)
    assert optima.cpsat == optima.brute
    assert optima.milp == optima.brute


@SLOW
@pytest.mark.parametrize("space", [Space.FULL, Space.STRUCTURED])
def test_the_seeds_exercise_the_rule(space):
    """Among the seeds of a space, the overlap lowers some optima, and some optima with
    the flag put a TP group across nodes (so the models had to tell the two apart)."""
    optima = [_optima(*case) for case in CASES if case[0] is space]
    lowered = [o for o in optima if o.brute[0] is Status.OPTIMAL
               and o.brute[1] < o.brute_without[1]]
    assert all(o.brute[1] <= o.brute_without[1] for o in optima
               if o.brute[0] is Status.OPTIMAL)
    assert len(lowered) >= 3
    assert sum(o.across for o in optima) >= 2
