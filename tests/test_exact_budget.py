"""The exact backends' time limit: lazy sub-problem enumeration, deadlines, valid bounds."""

from __future__ import annotations

import itertools
import random

import pytest

from nest_cp.harness.generators import random_instance
from nest_cp.model.instance import IntraConfig
from nest_cp.model.network import NetworkModel
from nest_cp.model.result import Space, Status
from nest_cp.profiles import presets
from nest_cp.solvers.exact.adapters import CpSatAdapter, MilpAdapter
from nest_cp.solvers.exact.budget import Deadline, OutOfTime
from nest_cp.solvers.exact.skeleton import build_model
from nest_cp.solvers.exact.subproblems import (
    Shape,
    _ComputeSplits,
    build_subproblem,
    enumerate_subproblems,
    shapes_by_bound,
)
from nest_cp.solvers.registry import SolveOptions, backend_function, solve


def _dp_hint(instance):
    """The DP's plan as a hint.  The exact driver re-prices a hint with the evaluator before
    using it, so the hint needs no referee here (the DP's own numbers are tested in
    test_dp.py)."""
    return backend_function("dp")(instance, SolveOptions()).plan


def _instance():
    return random_instance(5, num_layers=5, tier_sizes=(2, 2, 2), microbatches=(1, 2),
                           configs=(IntraConfig(), IntraConfig(2, 1)), zero_stages=(0, 3),
                           hbm_bytes=12 * 10**9)


def test_shapes_come_once_each_in_order_of_valid_bounds():
    """The lazy enumeration yields every (c, b, S, d) with a·S·d <= N exactly once, bounds
    non-decreasing, each at most the memory-aware bound of its sub-problems."""
    instance = _instance()
    yielded = list(shapes_by_bound(instance))
    bounds = [bound for bound, _ in yielded]
    assert bounds == sorted(bounds)
    shapes = [shape for _, shape in yielded]
    expected = {Shape(config, microbatch, stages, dp) for config, microbatch in instance.choices
                for stages in range(1, 6) for dp in range(1, 8 // (config.devices * stages) + 1)}
    assert len(shapes) == len(set(shapes)) and set(shapes) == expected
    bound_of = dict((shape, bound) for bound, shape in yielded)
    for sub in enumerate_subproblems(instance):
        shape = Shape(sub.config, sub.microbatch, sub.num_stages, sub.dp)
        assert bound_of[shape] <= sub.lower_bound_ticks


@pytest.mark.parametrize("seed", range(20))
def test_compute_split_bound_is_the_brute_force_min_max(seed):
    """The binary-searched min-max split equals the minimum over all contiguous splits."""
    rng = random.Random(seed)
    ticks = [rng.choice((0, 1, 5, 7, 100, 10**6)) for _ in range(rng.randint(1, 7))]
    splits = _ComputeSplits(ticks)
    for parts in range(1, len(ticks) + 1):
        best = min(max(sum(ticks[a:b]) for a, b in zip((0, *cuts), (*cuts, len(ticks))))
                   for cuts in itertools.combinations(range(1, len(ticks)), parts - 1))
        assert splits.exact_bound(parts) == best
        assert splits.quick_bound(parts) <= best


def test_expired_deadline_stops_enumeration_and_model_building():
    """Past the deadline, building a sub-problem and building its model both raise OutOfTime,
    and the enumeration yields one bound for everything left and stops."""
    instance = _instance()
    past = Deadline(0.0)
    with pytest.raises(OutOfTime):
        build_subproblem(instance, Shape(IntraConfig(), 1, 3, 2), 0, past)
    sub = build_subproblem(instance, Shape(IntraConfig(), 1, 3, 2), 0)
    for adapter in (CpSatAdapter(), MilpAdapter()):
        adapter.deadline = past
        with pytest.raises(OutOfTime):
            build_model(adapter, instance, sub, NetworkModel(instance.cluster), Space.FULL, None)
    first_bound = next(iter(shapes_by_bound(instance)))[0]
    assert list(shapes_by_bound(instance, past)) == [(first_bound, None)]


@pytest.mark.parametrize("backend", ["cpsat", "milp"])
def test_stopped_search_bound_holds_for_every_plan(backend):
    """With almost no time the search stops early; its plan is the hint, its status FEASIBLE
    and its bound at most the proven full-space optimum (valid also for the sub-problems it
    never reached)."""
    instance = _instance()
    optimum = solve(instance, "cpsat", SolveOptions(space=Space.FULL, time_limit_s=60))
    assert optimum.status is Status.OPTIMAL
    hint = _dp_hint(instance)
    stopped = solve(instance, backend, SolveOptions(space=Space.FULL, time_limit_s=1e-4,
                                                    hint=hint, milp_solver="highs"))
    assert stopped.status is Status.FEASIBLE and stopped.plan == hint
    assert stopped.stats["shapes_unreached"]
    assert stopped.bound_ticks is not None and stopped.bound_ticks <= optimum.objective_ticks


def test_gpt3_at_1024_devices_stops_at_the_limit_with_the_hint():
    """GPT3-175B on 1,024 TPUv4 devices, CP-SAT with a 1 s limit: the DP hint comes back
    FEASIBLE (never OPTIMAL) with a bound below it, most shapes never built (the eager
    enumeration of every sub-problem used to take minutes and 2 GB)."""
    instance = presets.build_instance(model="gpt3-175b", devices=1024,
                                      network="nest-tpuv4-fattree")
    hint = _dp_hint(instance)
    result = solve(instance, "cpsat", SolveOptions(space=Space.FULL, time_limit_s=1.0,
                                                   hint=hint))
    assert result.status is Status.FEASIBLE and result.plan == hint
    assert result.stats["shapes_unreached"]
    assert 0 < result.bound_ticks < result.objective_ticks


def test_a_model_too_large_for_the_limit_is_named_in_the_message():
    """A full-space model too large to build in the time left is never started: the result
    says so (with its size) instead of reading like a solver stopped by its clock."""
    from nest_cp.harness.generators import draw_tiny_recipe, tiny_instance

    # a 12-device a2a ring whose (t = 2, c = 2) shape has a full-space model of ~550,000
    # terms (the soak's seed 1473, where this was found)
    instance = tiny_instance(draw_tiny_recipe(1473))
    result = solve(instance, "cpsat", SolveOptions(space=Space.FULL, time_limit_s=1.0,
                                                   seed=0, workers=1))
    assert result.status is Status.UNKNOWN
    assert result.stats["models_skipped"] >= 1
    assert "too large to build" in result.message and "terms" in result.message
    assert result.bound_ticks is not None
    assert result.bound_ticks <= solve(instance, "brute", SolveOptions(space=Space.STRUCTURED)
                                       ).objective_ticks
