"""Shared pieces of the baselines: Megatron-style plans from chosen degrees, result records.

Every baseline builds plans the same way once it has chosen the degrees (t, e, S,
d, ZeRO stage, v): the layers split as evenly as possible into S·v contiguous
chunks, each stage's recomputation chosen by Megatron practice (:func:`fit_recompute`),
and ranks placed in Megatron's default order (t, e, replica, stage) over the
network's canonical device order.  Memory is the evaluator's own
(:meth:`nest_cp.cost.evaluate.Evaluator.stage_memory_bytes`); it does not depend on the
placement, so the fit is settled before any rank is placed.  The plans are priced
only by the evaluator: the baselines hold no cost composition of their own.

Under a launcher (``training.launcher``) a baseline builds only plans that launcher
starts: :func:`megatron_plan` refuses a shape the launcher's rules refuse (the predicate
the DP and the exact backends search with, ``Instance.admits``), :func:`admitted_dp`
picks the data parallelism a rule of thumb asks for among the degrees the launcher
accepts, and :func:`fit_recompute` gives every stage one mode (a launcher's recompute
setting is global, ``launchers.search.one_recompute_mode``).
"""

from __future__ import annotations

import dataclasses
import time

import numpy as np

from nest_cp.cost.evaluate import Evaluator
from nest_cp.model.errors import BackendOptionError, InvalidPlan
from nest_cp.model.instance import Instance, IntraConfig, RecomputeMode
from nest_cp.model.launchers.search import one_recompute_mode
from nest_cp.model.plan import Plan, Stage, contiguous_placement, uniform_stages
from nest_cp.model.result import SolveResult, Space, Status

# Megatron practice (Korthikanti et al., "Reducing Activation Recomputation in Large
# Transformer Models", MLSys 2023, §4-5): keep every activation where it fits; else
# recompute selectively (the attention core: most of the activation memory for a few
# per cent of the forward); else recompute whole layers (full), the costliest.
RECOMPUTE_PREFERENCE = (RecomputeMode.NONE, RecomputeMode.SELECTIVE, RecomputeMode.FULL)


def uniform_split(num_layers: int, num_stages: int, virtual_stages: int = 1) -> tuple[Stage, ...]:
    """S·v contiguous chunks whose sizes differ by at most one, later chunks the larger ones.

    Later stages hold fewer microbatches in flight under 1F1B, so they are the
    better place for a surplus layer (:func:`nest_cp.model.plan.uniform_stages`).
    """
    try:
        return uniform_stages(num_layers, num_stages, virtual_stages=virtual_stages)
    except ValueError as exc:
        raise BackendOptionError(str(exc)) from None


def with_modes(plan: Plan, modes: tuple[RecomputeMode, ...]) -> Plan:
    """``plan`` with stage s (all its chunks) recomputing ``modes[s]``."""
    stages = tuple(dataclasses.replace(chunk, recompute=modes[plan.stage_of_chunk(index)])
                   for index, chunk in enumerate(plan.stages))
    return dataclasses.replace(plan, stages=stages)


def fit_recompute(referee: Evaluator, plan: Plan) -> Plan | None:
    """``plan`` with each stage's mode the first of :data:`RECOMPUTE_PREFERENCE` that the
    instance allows and that fits usable HBM; None if some stage fits in no allowed mode.

    A stage's memory depends only on its own mode, so each stage is settled alone.  Under
    a launcher, which applies one setting to every stage, the mode is the first under
    which every stage fits.
    """
    limit = referee.instance.cluster.usable_hbm_bytes
    allowed = [mode for mode in RECOMPUTE_PREFERENCE
               if mode in referee.instance.training.recompute_modes]
    trials = {mode: with_modes(plan, (mode,) * plan.num_stages) for mode in allowed}
    if one_recompute_mode(referee.instance.training.launcher):
        return next((trials[mode] for mode in allowed
                     if all(referee.stage_memory_bytes(trials[mode], stage) <= limit
                            for stage in range(plan.num_stages))), None)
    modes = []
    for stage in range(plan.num_stages):
        fitting = [mode for mode in allowed
                   if referee.stage_memory_bytes(trials[mode], stage) <= limit]
        if not fitting:
            return None
        modes.append(fitting[0])
    return with_modes(plan, tuple(modes))


def megatron_plan(referee: Evaluator, config: IntraConfig, microbatch: int, zero: int,
                  num_stages: int, dp: int, virtual_stages: int = 1) -> Plan | None:
    """Uniform split into S·v chunks, Megatron's recompute rule, Megatron rank order;
    None if the shape does not fit the cluster, the instance's launcher refuses it, or
    some stage fits in no allowed mode."""
    instance = referee.instance
    if num_stages * virtual_stages > instance.workload.num_layers or \
            config.devices * num_stages * dp > instance.cluster.num_devices or \
            not instance.admits(config, microbatch, dp, num_stages, virtual_stages, zero):
        return None
    split = uniform_split(instance.workload.num_layers, num_stages, virtual_stages)
    plan = fit_recompute(referee, Plan(config, microbatch, zero, dp, split,
                                       virtual_stages=virtual_stages))
    if plan is None:
        return None
    return plan.with_placement(contiguous_placement(  # Megatron's order, c included
        config, num_stages, dp, referee.network.canonical_order()))


def admitted_dp(instance: Instance, config: IntraConfig, microbatch: int, num_stages: int,
                most: int, virtual_stages: int = 1, zero: int = 0) -> int | None:
    """The largest d <= ``most`` whose shape the instance's launcher accepts (``most``
    itself under ``launcher: none``); None if no d >= 1 is accepted."""
    if most < 1:
        return None
    candidates = np.arange(most, 0, -1)
    admitted = np.broadcast_to(instance.admits(config, microbatch, candidates, num_stages,
                                               virtual_stages, zero), candidates.shape)
    return int(candidates[admitted.argmax()]) if admitted.any() else None


def smallest_microbatch(instance: Instance, config: IntraConfig) -> int | None:
    """The smallest allowed microbatch size the workload profiles for ``config``."""
    sizes = [size for choice, size in instance.choices if choice == config]
    return min(sizes) if sizes else None


def feasible_result(backend: str, referee: Evaluator, plan: Plan, started: float,
                    message: str = "", stats: dict | None = None,
                    space: Space = Space.STRUCTURED) -> SolveResult:
    """A FEASIBLE record for a heuristic's plan: objective from the evaluator, no bound."""
    evaluation = referee.evaluate(plan)
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
