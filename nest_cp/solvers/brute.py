"""Brute force: evaluate every plan of a tiny instance with the plan evaluator (the test oracle).

No DP, no pruning, no cost reasoning of its own: every (configuration (t, e, c),
microbatch, S, d, ZeRO stage, virtual stages v) of the space, every contiguous split into S·v
chunks, every vector of allowed recompute modes (one per stage) and every placement
is built as a :class:`~nest_cp.model.plan.Plan` and scored by the plan evaluator (one
:class:`nest_cp.cost.evaluate.Evaluator` for the whole enumeration).  Interleavings the
evaluator rejects outright (v > 1 with S < 2 or m not a multiple of S, DESIGN §3.2 b)
are skipped.

Placements: ``Space.STRUCTURED`` uses the placements of the structured space's rank
layouts (``NetworkModel.structured_placements``: v2's 24 orders on the canonical device
order, and v3a's other device orders and spare-first offsets on three tiers or more;
identical placements are evaluated once — an exact deduplication, since the evaluator
sees only the placement; with context width c > 1 the context ranks sit just outside the
tensor ranks, inside the expert ranks, in every layout); ``Space.FULL`` uses
every injective map of the a·S·d ranks onto the N devices, and refuses instances
with more than ``options.extra["max_placements"]`` (default 10^6) placements in total.

The best plan is the least objective, ties going to the first in enumeration order.
"""

from __future__ import annotations

import itertools
import math
import time
from collections.abc import Iterator

from nest_cp.cost import terms as cost
from nest_cp.cost.evaluate import Evaluator
from nest_cp.model.errors import BackendOptionError
from nest_cp.model.instance import Instance, IntraConfig
from nest_cp.model.network import NetworkModel
from nest_cp.model.plan import Placement, Plan, Stage
from nest_cp.model.result import SolveResult, Space, Status
from nest_cp.solvers.exact.subproblems import plan_shape_key

MAX_PLACEMENTS = 10**6


def solve(instance: Instance, options) -> SolveResult:
    """Best feasible plan of ``options.space`` by exhaustive evaluation, or INFEASIBLE."""
    start = time.perf_counter()
    space = options.space
    network = NetworkModel(instance.cluster)
    referee = Evaluator(instance, network)  # one referee: terms repeated across plans priced once
    if space is Space.FULL:
        _check_size(instance, options.extra.get("max_placements", MAX_PLACEMENTS))
    best: tuple[int, Plan] | None = None
    least_excess: int | None = None
    evaluated = 0
    for plan in _plans(instance, network, space):
        evaluation = referee.evaluate(plan)
        evaluated += 1
        if evaluation.feasible:
            if best is None or evaluation.objective_ticks < best[0]:
                best = (evaluation.objective_ticks, plan)
        elif evaluation.stages:
            excess = max(s.memory_bytes - s.memory_limit_bytes for s in evaluation.stages)
            least_excess = excess if least_excess is None else min(least_excess, excess)
    elapsed = time.perf_counter() - start
    stats = {"plans_evaluated": evaluated}
    if best is None:
        reason = ("no plan fits: the space is empty" if least_excess is None else
                  f"no plan fits: stage memory exceeds usable HBM by {least_excess} bytes "
                  f"at best")
        return SolveResult(backend="brute", status=Status.INFEASIBLE, wall_time_s=elapsed,
                           space=space, message=reason, stats=stats)
    return SolveResult(backend="brute", status=Status.OPTIMAL, plan=best[1],
                       objective_ticks=best[0], bound_ticks=best[0], wall_time_s=elapsed,
                       space=space, stats=stats)


def least_per_shape(instance: Instance) -> dict[tuple, int]:
    """The least feasible objective of the full space per (configuration, microbatch, S, d,
    z, v), keyed by :func:`~nest_cp.solvers.exact.subproblems.plan_shape_key` (shapes
    without a feasible plan are absent): the oracle for per-shape lower bounds.  Refuses
    instances with more than MAX_PLACEMENTS placements, as :func:`solve` does."""
    network = NetworkModel(instance.cluster)
    referee = Evaluator(instance, network)
    _check_size(instance, MAX_PLACEMENTS)
    least: dict[tuple, int] = {}
    for plan in _plans(instance, network, Space.FULL):
        evaluation = referee.evaluate(plan)
        key = plan_shape_key(plan)
        if evaluation.feasible and evaluation.objective_ticks < least.get(key, math.inf):
            least[key] = evaluation.objective_ticks
    return least


def _shapes(instance: Instance) -> Iterator[tuple[IntraConfig, int, int, int]]:
    """Every (configuration, microbatch, S, d) with a·S·d <= N."""
    num_devices = instance.cluster.num_devices
    for config, microbatch in instance.choices:
        for num_stages in range(1, instance.workload.num_layers + 1):
            for dp in range(1, num_devices // (config.devices * num_stages) + 1):
                yield config, microbatch, num_stages, dp


def _check_size(instance: Instance, limit: int) -> None:
    """Refuse a full-space enumeration with more than ``limit`` placements in total."""
    num_devices = instance.cluster.num_devices
    total = sum(math.perm(num_devices, config.devices * num_stages * dp)
                for config, _, num_stages, dp in _shapes(instance))
    if total > limit:
        raise BackendOptionError(
            f"expected at most {limit} placements for a full-space brute force, got {total}; "
            f"use the structured space or a smaller instance", option="space")


def _plans(instance: Instance, network: NetworkModel, space: Space) -> Iterator[Plan]:
    """Every plan of the space: shape, ZeRO stage, v, split, recompute modes, placement."""
    training = instance.training
    layers = instance.workload.num_layers
    for config, microbatch, num_stages, dp in _shapes(instance):
        placements = list(_placements(network, config, num_stages, dp, space))
        microbatches = cost.num_microbatches(training.global_batch, microbatch, config, dp)
        for zero in sorted(set(training.zero_stages)):
            for virtual in sorted(set(training.virtual_stages)):
                chunks = num_stages * virtual
                if chunks > layers or (virtual > 1 and (
                        num_stages < 2 or microbatches % num_stages)):
                    continue
                for cuts in itertools.combinations(range(1, layers), chunks - 1):
                    bounds = list(zip((0, *cuts), (*cuts, layers)))
                    for modes in itertools.product(training.recompute_modes, repeat=num_stages):
                        stages = tuple(Stage(first, end - 1, modes[chunk % num_stages])
                                       for chunk, (first, end) in enumerate(bounds))
                        for placement in placements:
                            yield Plan(config, microbatch, zero, dp, stages, placement,
                                       virtual)


def _placements(network: NetworkModel, config: IntraConfig, num_stages: int, dp: int,
                space: Space) -> Iterator[Placement]:
    """Distinct placements of the space for this shape."""
    ranks = config.devices
    if space is Space.FULL:
        for devices in itertools.permutations(range(network.num_devices),
                                              ranks * num_stages * dp):
            yield tuple(tuple(tuple(devices[(stage * dp + replica) * ranks + rank]
                                    for rank in range(ranks))
                              for replica in range(dp))
                        for stage in range(num_stages))
        return
    # with c > 1 the context ranks sit between the tensor and expert ranks in every layout
    # (NetworkModel.structured_placements)
    yield from network.structured_placements(config, num_stages, dp)

