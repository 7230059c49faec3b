"""The exact models price every plan as the evaluator does (DESIGN §3, §3.2).

A plan is pinned into its sub-problem's model (every option and placement variable
fixed to the plan, the cost terms left to the solver): the minimum must be the
evaluator's objective to the tick, and the pinned model must be infeasible exactly
when the evaluator finds a stage over memory (with v > 1 memory couples a stage's
chunks and is stated in the model).  Plans are drawn at random, not only optima, so
every term is checked away from the optimum too.  Also: the stage-rounding split
and the affine form of gradient syncs against nest_cp.cost.terms.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import random
from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pinning import pinned_cpsat, random_placement

from nest_cp.cost import terms as cost
from nest_cp.cost.evaluate import evaluate
from nest_cp.harness.generators import random_instance
from nest_cp.model.instance import IntraConfig, Optimizer, RecomputeMode
from nest_cp.model.network import NetworkModel, Path
from nest_cp.model.plan import Plan, Stage
from nest_cp.model.result import Space
from nest_cp.solvers.exact import enumerate_subproblems
from nest_cp.solvers.exact.adapters import MilpAdapter
from nest_cp.solvers.exact.pricing import GATHER, REDUCE, ChunkPricing, StageRounding
from nest_cp.solvers.exact.skeleton import build_model, hint_model

MODES = (RecomputeMode.NONE, RecomputeMode.SELECTIVE, RecomputeMode.FULL)

# name -> keyword arguments of random_instance: every §3.2 choice, tight memory
KINDS = {
    "interleaved": dict(num_layers=6, tier_sizes=(2, 2, 2), recompute_modes=MODES,
                        virtual_stages=(1, 2, 3), global_batch=12, hbm_bytes=32 * 10**9,
                        comm_scale=30, zero_stages=(0, 2, 3), overlap_grad_reduce=True),
    "tp-ep-groups": dict(num_layers=4, tier_sizes=(2, 2, 2), recompute_modes=MODES,
                         configs=(IntraConfig(2, 2), IntraConfig(1, 2), IntraConfig(2, 1)),
                         virtual_stages=(1, 2), global_batch=8, hbm_bytes=16 * 10**9,
                         comm_scale=30, zero_stages=(0, 3)),
    "graph": dict(num_layers=4, tier_sizes=(2, 4), graph=True, recompute_modes=MODES,
                  configs=(IntraConfig(), IntraConfig(2, 2)), virtual_stages=(1, 2),
                  global_batch=8, hbm_bytes=18 * 10**9, comm_scale=30, zero_stages=(1, 3),
                  overlap_grad_reduce=True),
}


def _random_plan(rng: random.Random, instance, sub, network: NetworkModel,
                 space: Space) -> Plan | None:
    """A plan of the sub-problem: a random split into S·v offered chunk options with one
    random mode per stage, and a random placement (None if no split has those modes)."""
    modes = [rng.choice(instance.training.recompute_modes) for _ in range(sub.num_stages)]
    chunks = _random_split(rng, sub, modes, 0, 0, instance.workload.num_layers)
    if chunks is None:
        return None
    placement = random_placement(rng, sub, network, space)
    return Plan(sub.config, sub.microbatch, sub.zero, sub.dp, tuple(chunks), placement,
                sub.virtual_stages)


def _random_split(rng, sub, modes, chunk: int, first_layer: int, num_layers: int):
    """Chunks from ``chunk`` on, starting at ``first_layer``, among the offered options
    (memory already rules out the others before a model is built)."""
    if chunk == sub.num_chunks:
        return [] if first_layer == num_layers else None
    candidates = [o for o in sub.options[chunk] if o.first_layer == first_layer
                  and o.mode is modes[chunk % sub.num_stages]]
    rng.shuffle(candidates)
    for option in candidates:
        rest = _random_split(rng, sub, modes, chunk + 1, option.last_layer + 1, num_layers)
        if rest is not None:
            return [Stage(option.first_layer, option.last_layer, option.mode), *rest]
    return None


def _pinned_milp(instance, sub, network, space, plan) -> int | None:
    adapter = MilpAdapter("highs")
    handles = build_model(adapter, instance, sub, network, space, None)
    hint_model(adapter, handles, plan)
    for var in adapter.problem.variables():
        if var.varValue is not None:  # the hinted 0/1 variables: fix them
            var.lowBound = var.upBound = var.varValue
    outcome = adapter.solve(30.0, 0, 1)
    if outcome.status.value == "infeasible":
        return None
    return round(outcome.objective)


def _subproblems(instance):
    """The sub-problems with a split into offered options, every v, ZeRO stage and shape."""
    return [sub for sub in enumerate_subproblems(instance) if sub.feasible]


@pytest.mark.parametrize("space", [Space.STRUCTURED, Space.FULL])
@pytest.mark.parametrize("kind", sorted(KINDS))
def test_pinned_plan_costs_what_the_evaluator_says(kind, space):
    """For random plans of random sub-problems, the CP-SAT model pinned to the plan costs
    exactly the evaluator's objective, or is infeasible exactly when a stage is over memory."""
    instance = random_instance(7, **KINDS[kind])
    network = NetworkModel(instance.cluster)
    rng = random.Random(f"{kind}-{space.value}")
    subs = _subproblems(instance)
    interleaved = [sub for sub in subs if sub.virtual_stages > 1]
    assert interleaved, "the kind must offer interleaved sub-problems"
    checked = {"fits": 0, "over": 0, "interleaved fits": 0}
    for attempt in range(80):
        sub = rng.choice(interleaved if attempt % 2 else subs)
        plan = _random_plan(rng, instance, sub, network, space)
        if plan is None:
            continue
        evaluation = evaluate(instance, plan, network)
        pinned = pinned_cpsat(instance, sub, network, space, plan)
        if evaluation.feasible:
            assert pinned == evaluation.objective_ticks, (sub.label, plan)
            checked["fits"] += 1
            checked["interleaved fits"] += sub.virtual_stages > 1
        else:
            assert pinned is None, (sub.label, plan, evaluation.violations)
            checked["over"] += 1
        if checked["fits"] >= 12 and checked["interleaved fits"] >= 6:
            break
    assert checked["fits"] >= 12 and checked["interleaved fits"] >= 6, checked


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_pinned_plan_costs_the_same_in_the_milp(kind):
    """The MILP (HiGHS) pinned to random interleaved plans costs the evaluator's objective
    within its 1e-7 relative tolerance, and is infeasible when a stage is over memory."""
    instance = random_instance(8, **KINDS[kind])
    network = NetworkModel(instance.cluster)
    rng = random.Random(kind)
    interleaved = [sub for sub in _subproblems(instance) if sub.virtual_stages > 1]
    for sub in rng.sample(interleaved, 4):
        plan = _random_plan(rng, instance, sub, network, Space.STRUCTURED)
        if plan is None:
            continue
        evaluation = evaluate(instance, plan, network)
        pinned = _pinned_milp(instance, sub, network, Space.STRUCTURED, plan)
        if evaluation.feasible:
            assert pinned is not None
            assert abs(pinned - evaluation.objective_ticks) <= 1e-7 * evaluation.objective_ticks
        else:
            assert pinned is None


@settings(max_examples=60, deadline=None, derandomize=True)
@given(values=st.lists(st.fractions(min_value=0, max_value=10**6, max_denominator=10**4),
                       min_size=1, max_size=4),
       constant=st.fractions(min_value=0, max_value=10**4, max_denominator=10**3))
def test_stage_rounding_split_is_the_ceiling_of_the_sum(values, constant):
    """Σ ⌊x_k⌋ + ⌊c⌋ + ⌈(Σ D·frac(x_k) + D·frac(c)) / D⌉ == ⌈Σ x_k + c⌉, and the carry never
    exceeds the number of terms plus one."""
    rounding = StageRounding.of(dict(enumerate(values)), constant)
    fractions = sum(rounding.fractions.values()) + rounding.constant_fraction
    carry = -(-fractions // rounding.denominator)
    assert sum(rounding.floors.values()) + rounding.constant_floor + carry == \
        math.ceil(sum(values) + constant)
    assert carry <= len(values) + 1


@pytest.mark.parametrize("zero", [0, 1, 2, 3])
def test_sync_affine_form_matches_the_cost_primitive(zero):
    """⌈slope·P + offset⌉ (pricing.sync_ticks) equals each part of cost.gradient_sync_parts
    (the reduction, and for ZeRO 1 and 2 the weight gather, each rounded alone) for every
    P > 0, group size and path tried, under Megatron's 2/4/12 bytes (g != w)."""
    instance = random_instance(0, zero_stages=(zero,))
    optimizer = Optimizer(name="adam", weight_bytes=2, grad_bytes=4, state_bytes=12)
    instance = dataclasses.replace(instance, training=dataclasses.replace(
        instance.training, optimizer=optimizer))
    sub = next(s for s in enumerate_subproblems(instance) if s.zero == zero)
    pricing = ChunkPricing(instance, sub)
    paths = [Path(Fraction(10**11), Fraction(1, 10**6)), Path(Fraction(125 * 10**8),
                                                               Fraction(3, 10**5)),
             Path(Fraction(3 * 10**10 + 7), Fraction(0))]
    for path, size, params in itertools.product(paths, (2, 3, 8), (1, 7, 10**9 + 3, 3 * 10**10)):
        parts = cost.gradient_sync_parts(params, optimizer, zero, size, path,
                                         instance.training.tick_s)
        for phase, expected in zip((REDUCE, GATHER), parts, strict=True):
            affine = pricing.sync_ticks(size, path, phase)
            priced = 0 if affine is None else math.ceil(affine.slope * params + affine.offset)
            assert priced == expected
    assert pricing.sync_ticks(1, paths[0]) is None and pricing.sync_ticks(4, None) is None
    assert (pricing.sync_ticks(4, paths[0], GATHER) is None) == (zero in (0, 3))
