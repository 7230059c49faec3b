"""The DP's cutoff (``CUTOFF_TICKS``): the registry searches one recompute mode at a time
under a launcher and hands each part the best objective of the parts before it; the merged
plan and objective must be those of the parts searched without it."""

from __future__ import annotations

import dataclasses

import pytest

from nest_cp.cost.evaluate import evaluate
from nest_cp.dp.planner import solve as dp_solve
from nest_cp.harness.generators import random_instance
from nest_cp.model.instance import IntraConfig, RecomputeMode
from nest_cp.model.launchers.search import Launcher
from nest_cp.model.result import CUTOFF_TICKS, SolveOptions, SolveResult, Status
from nest_cp.solvers.registry import merge_parts, one_mode_instances, solve
from tests.tiers import slow_unless


def _draw(seed: int, launcher: Launcher | None = None, tight: bool = False):
    """A small random instance allowing every recompute mode; ``tight``: HBM at 80% of the
    optimum's peak stage memory, so that a later part (recomputation) wins."""
    instance = random_instance(seed, num_layers=3, tier_sizes=(2, 3),
                               configs=(IntraConfig(1, 1), IntraConfig(2, 1)),
                               microbatches=(1, 2), zero_stages=(0, 1, 2, 3),
                               global_batch=(22, 26, 34)[seed % 3])
    training = dataclasses.replace(instance.training, recompute_modes=tuple(RecomputeMode))
    instance = dataclasses.replace(instance, training=training)
    if tight:
        peak = max(stage.memory_bytes for stage in
                   evaluate(instance, dp_solve(instance).plan).stages)
        instance = dataclasses.replace(instance, cluster=dataclasses.replace(
            instance.cluster, hbm_bytes=int(peak * 0.8)))
    if launcher is not None:
        instance = dataclasses.replace(instance, training=dataclasses.replace(
            instance.training, launcher=launcher))
    return instance


def _cut(cutoff: int) -> SolveOptions:
    return SolveOptions(extra={CUTOFF_TICKS: cutoff})


def test_a_cutoff_keeps_a_better_optimum_and_bounds_the_space_below_it():
    """Above the optimum the same plan comes back; at or below it none, with the cutoff as
    the bound (every plan costs at least that)."""
    instance = _draw(7)
    best = dp_solve(instance)
    assert best.status is Status.OPTIMAL
    above = dp_solve(instance, _cut(best.objective_ticks + 1))
    assert (above.status, above.objective_ticks, above.plan) == \
        (Status.OPTIMAL, best.objective_ticks, best.plan)
    for cutoff in (best.objective_ticks, best.objective_ticks // 2):
        cut = dp_solve(instance, _cut(cutoff))
        assert (cut.status, cut.plan, cut.bound_ticks) == (Status.UNKNOWN, None, cutoff)


CASES = ((15, True), (3, True), (7, False), (29, True), (5, True))


@pytest.mark.parametrize("seed,tight", slow_unless(CASES, lambda case: case == CASES[0]))
def test_parts_searched_with_cutoffs_merge_to_the_parts_searched_without(seed, tight):
    """Under a launcher: the merged plan and objective equal the merge of the one-mode parts
    each searched alone (tight memory: a later part wins, seed 15 over a plan of the first),
    and so does the status."""
    instance = _draw(seed, Launcher.MEGATRON, tight)
    alone = [dp_solve(part) for part in one_mode_instances(instance)]
    expected = merge_parts("dp", alone, [m.value for m in instance.training.recompute_modes],
                           0.0)
    merged = solve(instance, "dp")
    assert (merged.status, merged.objective_ticks, merged.plan) == \
        (expected.status, expected.objective_ticks, expected.plan)


def test_merge_is_optimal_when_a_cut_off_part_bounds_no_lower():
    """A part with no plan below the cutoff (UNKNOWN, bound = cutoff) settles the union."""
    instance = _draw(7)
    best = dp_solve(instance)
    ticks = best.objective_ticks
    cut = SolveResult("dp", Status.UNKNOWN, bound_ticks=ticks)
    merged = merge_parts("dp", [best, cut], ["none", "full"], 1.0)
    assert (merged.status, merged.objective_ticks, merged.bound_ticks) == \
        (Status.OPTIMAL, ticks, ticks)
    lower = SolveResult("dp", Status.UNKNOWN, bound_ticks=ticks - 1)
    assert merge_parts("dp", [best, lower], ["none", "full"], 1.0).status is Status.FEASIBLE
