"""Shared pieces of the baselines: uniform splits, recompute-where-needed, result records.

Every baseline builds plans the same way once it has chosen the degrees:
layers split as evenly as possible into contiguous stages, recomputation
switched on exactly for the stages that do not fit without it, and ranks
placed in Megatron's default order (t, e, replica, stage) over the network's
canonical device order.  Memory does not depend on the placement, so the fit
is checked before any rank is placed.
"""

from __future__ import annotations

import time

from nest_cp import cost
from nest_cp.errors import BackendOptionError, InvalidPlan
from nest_cp.evaluate import evaluate
from nest_cp.model import Instance, IntraConfig, RecomputeMode
from nest_cp.network import NetworkModel
from nest_cp.plan import MEGATRON_LAYOUT, Plan, Stage, uniform_stages
from nest_cp.result import SolveResult, Space, Status


def uniform_split(num_layers: int, num_stages: int) -> tuple[Stage, ...]:
    """Contiguous stages whose sizes differ by at most one, later stages the larger ones.

    Later stages hold fewer microbatches in flight under 1F1B, so they are the
    better place for a surplus layer (:func:`nest_cp.plan.uniform_stages`).
    """
    try:
        return uniform_stages(num_layers, num_stages)
    except ValueError as exc:
        raise BackendOptionError(str(exc)) from None


def stage_memory(instance: Instance, config: IntraConfig, microbatch: int, zero: int, dp: int,
                 stages: tuple[Stage, ...], stage: int, recompute: RecomputeMode) -> int:
    """Bytes per device of ``stages[stage]`` with or without recomputation (DESIGN §3)."""
    training = instance.training
    profiles = [instance.workload.layers[layer].profile(config, microbatch)
                for layer in stages[stage].layers]
    microbatches = cost.num_microbatches(training.global_batch, microbatch, config, dp)
    in_flight = cost.in_flight(stage, len(stages), microbatches)
    return cost.stage_memory_bytes([profiles], recompute, in_flight, training.optimizer, zero,
                                   dp)


def recompute_where_needed(instance: Instance, config: IntraConfig, microbatch: int, zero: int,
                           dp: int, stages: tuple[Stage, ...]) -> tuple[Stage, ...] | None:
    """The stages, recomputing exactly where needed to fit; None if one stage never fits."""
    limit = instance.cluster.usable_hbm_bytes
    fitted = []
    for index, stage in enumerate(stages):
        for mode in (RecomputeMode.NONE, RecomputeMode.FULL):
            if mode in instance.training.recompute_modes and stage_memory(
                    instance, config, microbatch, zero, dp, stages, index, mode) <= limit:
                fitted.append(Stage(stage.first_layer, stage.last_layer, mode))
                break
        else:
            return None
    return tuple(fitted)


def megatron_plan(instance: Instance, network: NetworkModel, config: IntraConfig,
                  microbatch: int, zero: int, num_stages: int, dp: int) -> Plan | None:
    """Uniform split, recompute where needed, Megatron rank order; None if it does not fit."""
    if num_stages > instance.workload.num_layers or \
            config.devices * num_stages * dp > instance.cluster.num_devices:
        return None
    stages = recompute_where_needed(instance, config, microbatch, zero, dp,
                                    uniform_split(instance.workload.num_layers, num_stages))
    if stages is None:
        return None
    placement = MEGATRON_LAYOUT.placement(config, num_stages, dp, network.canonical_order())
    return Plan(config, microbatch, zero, dp, stages, placement)


def smallest_microbatch(instance: Instance, config: IntraConfig) -> int | None:
    """The smallest allowed microbatch size the workload profiles for ``config``."""
    sizes = [size for choice, size in instance.choices if choice == config]
    return min(sizes) if sizes else None


def feasible_result(backend: str, instance: Instance, plan: Plan, network: NetworkModel,
                    started: float, message: str = "", stats: dict | None = None,
                    space: Space = Space.STRUCTURED) -> SolveResult:
    """A FEASIBLE record for a heuristic's plan: objective from the evaluator, no bound."""
    evaluation = evaluate(instance, plan, network)
    if not evaluation.feasible:
        raise InvalidPlan(f"{backend}: built an infeasible plan: {evaluation.violations[0]}")
    return SolveResult(backend=backend, status=Status.FEASIBLE, plan=plan,
                       objective_ticks=evaluation.objective_ticks, bound_ticks=None,
                       wall_time_s=time.perf_counter() - started, space=space,
                       message=message, stats=dict(stats or {}))


def empty_result(backend: str, status: Status, started: float, message: str,
                 stats: dict | None = None, space: Space = Space.STRUCTURED) -> SolveResult:
    """A record without a plan: UNKNOWN, or INFEASIBLE only where nothing can fit (proven)."""
    return SolveResult(backend=backend, status=status, wall_time_s=time.perf_counter() - started,
                       space=space, message=message, stats=dict(stats or {}))
