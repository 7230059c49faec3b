"""Brute force over SDP plans (DESIGN §7): every mask and placement of a tiny instance.

The oracle of the SDP tests, beside :mod:`nest_cp.solvers.brute`: every (configuration,
microbatch, d >= 2, allowed level, masking, h, ZeRO stage <= 2, recompute mode), every
mask of the space and every placement is built as a plan and scored by
:func:`nest_cp.cost.evaluate.evaluate`; the best is the least T_eff (exact rational), ties
to the least T, then the first in enumeration order.

Masks: ``Space.FULL`` enumerates every valid mask (each unit held by exactly h
workers, rows balanced as DESIGN §7 requires); ``Space.STRUCTURED`` the grouped and
cyclic designs.  Placements: ``Space.FULL`` every injective map of the d·a ranks onto
the devices with worker w's rank 0 on a lower device than worker w + 1's; that loses
nothing, since relabelling workers (mask rows and placement together) changes no
price (every SDP term is a sum or a max over workers).  ``Space.STRUCTURED`` the
placements of the structured space's rank layouts (``NetworkModel.structured_placements``,
structured space v3a).  Instances with more
than ``options.extra["max_placements"]`` (default 10^6) plans are refused.
"""

from __future__ import annotations

import itertools
import math
import time
from collections.abc import Iterator
from fractions import Fraction

from nest_cp.cost.evaluate import evaluate
from nest_cp.cost.sdp import SdpDesign, UnitTable, design_mask, mask_violations, unit_table
from nest_cp.model.errors import BackendOptionError
from nest_cp.model.instance import Instance, IntraConfig, SdpMasking, Strategy
from nest_cp.model.network import NetworkModel
from nest_cp.model.plan import Placement, Plan, SdpMask, Stage
from nest_cp.model.result import SolveResult, Space, Status

MAX_PLANS = 10**6


def solve(instance: Instance, options) -> SolveResult:
    """Best feasible SDP plan of ``options.space`` by exhaustive evaluation, or INFEASIBLE."""
    start = time.perf_counter()
    space = options.space
    network = NetworkModel(instance.cluster)
    _check_size(instance, network, space, options.extra.get("max_placements", MAX_PLANS))
    shapes = list(_shapes(instance, network, space))
    best: tuple[Fraction, int, Plan] | None = None
    least_excess: int | None = None
    evaluated = 0
    for plan in _plans(instance, network, space, shapes):
        evaluation = evaluate(instance, plan, network)
        evaluated += 1
        if evaluation.malformed_fields:
            continue  # a ZeRO stage or mode the evaluator refuses for SDP plans
        if evaluation.feasible:
            candidate = (evaluation.effective, evaluation.objective_ticks)
            if best is None or candidate < best[:2]:
                best = (*candidate, plan)
        else:
            report = evaluation.sdp
            excess = report.memory_bytes - report.memory_limit_bytes
            least_excess = excess if least_excess is None else min(least_excess, excess)
    elapsed = time.perf_counter() - start
    stats = {"sdp_plans_evaluated": evaluated}
    if best is None:
        reason = ("no SDP plan fits: the space is empty" if least_excess is None else
                  f"no SDP plan fits: worker memory exceeds usable HBM by {least_excess} "
                  f"bytes at best")
        return SolveResult(backend="brute", status=Status.INFEASIBLE, wall_time_s=elapsed,
                           space=space, message=reason, stats=stats)
    effective, ticks, plan = best
    return SolveResult(backend="brute", status=Status.OPTIMAL, plan=plan, objective_ticks=ticks,
                       wall_time_s=elapsed, space=space, stats=stats, effective=effective,
                       effective_bound=effective)


def within_size(instance: Instance, space: Space, limit: int = MAX_PLANS) -> bool:
    """Whether :func:`solve` would enumerate ``space`` (at most ``limit`` plans)."""
    try:
        _check_size(instance, NetworkModel(instance.cluster), space, limit)
    except BackendOptionError:
        return False
    return True


def _check_size(instance: Instance, network: NetworkModel, space: Space, limit: int) -> None:
    """Refuse, before enumerating anything, a space of more than ``limit`` plans (counting
    every choice of h-subsets per unit, balanced or not, and every placement)."""
    training, devices = instance.training, instance.cluster.num_devices
    variants = len([z for z in training.zero_stages if z <= 2]) * len(training.recompute_modes)
    total = 0
    for config, microbatch in _sdp_choices(instance):
        for level in training.sdp.levels:
            units = unit_table(instance, config, microbatch, level).num_units
            if not units:
                continue
            for workers in range(2, devices // config.devices + 1):
                placements = _placement_count(network, config, workers, space)
                for holders in training.sdp.holder_counts(workers):
                    masks = len(SdpDesign) if space is Space.STRUCTURED else \
                        math.comb(workers, holders) ** units
                    total += masks * placements * variants * len(training.sdp.maskings)
                    if total > limit:
                        raise BackendOptionError(
                            f"expected at most {limit} SDP plans for a brute force, got more; "
                            f"use the structured space or a smaller instance", option="space")


def _sdp_choices(instance: Instance) -> list:
    """The (configuration, microbatch) choices an SDP plan may use: those with c = 1 (SDP
    plans keep c = 1, docs/context-parallelism.md)."""
    return [(config, size) for config, size in instance.choices if config.cp == 1]


def _shapes(instance: Instance, network: NetworkModel, space: Space) -> Iterator[tuple]:
    """(config, microbatch, d, h, level, masking, masks, placement count, variants)."""
    training, devices = instance.training, instance.cluster.num_devices
    variants = len([z for z in training.zero_stages if z <= 2]) * len(training.recompute_modes)
    if not variants:
        return  # no ZeRO stage an SDP plan may use: nothing to enumerate, masks included
    for config, microbatch in _sdp_choices(instance):
        for level in training.sdp.levels:
            table = unit_table(instance, config, microbatch, level)
            if not table.num_units:
                continue
            for workers in range(2, devices // config.devices + 1):
                count = _placement_count(network, config, workers, space)
                for holders in training.sdp.holder_counts(workers):
                    masks = _masks(table, workers, holders, space)
                    for masking in training.sdp.maskings:
                        yield (config, microbatch, workers, holders, level, masking, table,
                               masks, count, variants)


def _plans(instance: Instance, network: NetworkModel, space: Space,
           shapes: list[tuple]) -> Iterator[Plan]:
    training = instance.training
    last = instance.workload.num_layers - 1
    for config, microbatch, workers, holders, level, masking, _, masks, _, _ in shapes:
        placements = list(_placements(network, config, workers, space))
        for zero in sorted(z for z in set(training.zero_stages) if z <= 2):
            for mode in training.recompute_modes:
                for rows in masks:
                    sdp = SdpMask(level, masking, holders, rows)
                    for placement in placements:
                        yield Plan(config, microbatch, zero, workers, (Stage(0, last, mode),),
                                   placement, strategy=Strategy.SDP, sdp=sdp)


def _masks(table: UnitTable, workers: int, holders: int,
           space: Space) -> list[tuple[tuple[int, ...], ...]]:
    """The valid masks of the space (distinct)."""
    if space is Space.STRUCTURED:
        found = []
        for design in SdpDesign:
            rows = design_mask(table, design, workers, holders)
            if rows is not None and rows not in found:
                found.append(rows)
        return found
    subsets = list(itertools.combinations(range(workers), holders))
    found = []
    for choice in itertools.product(subsets, repeat=table.num_units):
        rows = tuple(tuple(unit for unit, members in enumerate(choice) if worker in members)
                     for worker in range(workers))
        # the masking plays no part in a mask's validity
        if not mask_violations(table, SdpMask(table.level, SdpMasking.FORWARD, holders, rows),
                               workers):
            found.append(rows)
    return found


def _placement_count(network: NetworkModel, config: IntraConfig, workers: int,
                     space: Space) -> int:
    if space is Space.STRUCTURED:
        return len(network.structured_layouts)
    ranks = config.devices * workers
    return math.perm(network.num_devices, ranks) // math.factorial(workers)


def _placements(network: NetworkModel, config: IntraConfig, workers: int,
                space: Space) -> Iterator[Placement]:
    """Placements of one stage of ``workers`` replicas (module docstring)."""
    ranks = config.devices
    if space is Space.STRUCTURED:
        yield from network.structured_placements(config, 1, workers)
        return
    for devices in itertools.permutations(range(network.num_devices), ranks * workers):
        firsts = devices[::ranks]
        if all(a < b for a, b in zip(firsts, firsts[1:], strict=False)):
            yield (tuple(tuple(devices[w * ranks:(w + 1) * ranks]) for w in range(workers)),)
