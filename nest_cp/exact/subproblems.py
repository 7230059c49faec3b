"""Sub-problems of the exact backends: the choices enumerated outside the solver.

The plan of DESIGN §2 is non-linear in (configuration c, microbatch b, depth S,
data-parallel degree d, ZeRO stage z): m = ceil(B / (b·e·d)) multiplies τ_max,
and d, z scale every memory and communication term.  Fixing these five makes
the rest (split, recompute flags, placement) a linear model, so the exact
backends solve one model per tuple and take the minimum.

Each sub-problem carries, per stage position s, its *stage options*: every
contiguous layer span with a recompute flag that fits in memory at that
position (k_s = min(S − s, m) microbatches in flight).  Options that break
memory are never offered, so memory needs no constraint in the model.

Lower bound (used to order and prune sub-problems): τ(s, r) ≥ compute of the
stage's option, so τ_max ≥ τ_lower = min over memory-feasible contiguous splits
of max over stages of compute (a min-max partition solved exactly by a small
DP below), and T ≥ (m + S − 1)·τ_lower because T_sync ≥ 0.  A sub-problem
whose bound is ≥ the incumbent holds no better plan, so pruning it is exact.
"""

from __future__ import annotations

import bisect
import heapq
import itertools
import math
from collections.abc import Iterator
from dataclasses import dataclass

from nest_cp import cost
from nest_cp.exact.budget import Deadline
from nest_cp.model import Instance, IntraConfig, RecomputeMode


@dataclass(frozen=True, slots=True)
class StageOption:
    """A stage's layer span ``first_layer..last_layer`` and whether it recomputes (full;
    the exact models do not search selective recomputation yet)."""

    first_layer: int
    last_layer: int
    recompute: bool

    @property
    def layers(self) -> range:
        return range(self.first_layer, self.last_layer + 1)

    @property
    def mode(self) -> RecomputeMode:
        return RecomputeMode.FULL if self.recompute else RecomputeMode.NONE

    @property
    def key(self) -> str:
        return f"{self.first_layer}_{self.last_layer}_{int(self.recompute)}"


@dataclass(frozen=True, slots=True)
class SubProblem:
    """One fixed (c, b, S, d, z) with its memory-feasible stage options and compute bound."""

    config: IntraConfig
    microbatch: int
    num_stages: int
    dp: int
    zero: int
    num_microbatches: int
    options: tuple[tuple[StageOption, ...], ...]  # options[stage]: memory-feasible spans
    compute: dict                                 # compute[option] = fwd + bwd (+ fwd) ticks
    tau_lower_ticks: int | None                   # None: no memory-feasible split exists

    @property
    def feasible(self) -> bool:
        return self.tau_lower_ticks is not None

    @property
    def lower_bound_ticks(self) -> int | float:
        """(m + S − 1)·τ_lower; +inf when no split fits in memory."""
        if self.tau_lower_ticks is None:
            return math.inf
        return (self.num_microbatches + self.num_stages - 1) * self.tau_lower_ticks

    @property
    def label(self) -> str:
        return (f"tp={self.config.tp},ep={self.config.ep},b={self.microbatch},"
                f"S={self.num_stages},d={self.dp},z={self.zero}")

    def matches(self, plan) -> bool:
        """Whether ``plan`` makes this sub-problem's five enumerated choices."""
        return (plan.config == self.config and plan.microbatch == self.microbatch
                and plan.num_stages == self.num_stages and plan.num_replicas == self.dp
                and plan.zero == self.zero)


def enumerate_subproblems(instance: Instance) -> list[SubProblem]:
    """Every (c, b, S, d, z) with a·S·d ≤ N, built and sorted by lower bound (then label).

    Eager and O(#sub-problems · L²): for tests and small instances.  The exact driver
    walks :func:`shapes_by_bound` instead and builds a sub-problem only when it gets there.
    """
    found = [build_subproblem(instance, shape, zero)
             for _, shape in shapes_by_bound(instance) if shape is not None
             for zero in sorted(set(instance.training.zero_stages))]
    return sorted(found, key=lambda sub: (sub.lower_bound_ticks, sub.label))


@dataclass(frozen=True, slots=True)
class Shape:
    """The choices (c, b, S, d) of a sub-problem other than its ZeRO stage."""

    config: IntraConfig
    microbatch: int
    num_stages: int
    dp: int


def count_shapes(instance: Instance) -> int:
    """How many (c, b, S, d) with a·S·d ≤ N the space has (what shapes_by_bound walks)."""
    num_devices, num_layers = instance.cluster.num_devices, instance.workload.num_layers
    return sum(num_devices // (config.devices * num_stages)
               for config, _ in instance.choices if config.devices <= num_devices
               for num_stages in range(1, num_layers + 1))


def shapes_by_bound(instance: Instance, deadline: Deadline | None = None
                    ) -> Iterator[tuple[int, Shape | None]]:
    """Every (c, b, S, d) with a·S·d ≤ N as (compute bound, shape), bound non-decreasing.

    Lazy, so the cost is paid only for the shapes a search reaches: the bound of
    (c, b, S, d) is (m + S − 1)·τ_c(S) with τ_c(S) the least possible slowest stage's
    fwd + bwd over contiguous S-splits (memory and communication ignored, so it is at
    most the sub-problem's lower bound for every ZeRO stage).  It shrinks as d grows,
    so a heap holds one entry per (c, b, S), starting at the largest d; each entry
    first carries the O(1) bound max(largest layer, ⌈total / S⌉) and is refined to
    the exact τ_c(S) when it reaches the top (a lazy A*-style refinement: every
    bound in the heap stays valid, so shapes come out in order of valid bounds).
    When the generator stops early, the next bound it would yield bounds every
    shape not yet yielded; once ``deadline`` has passed it yields that bound with
    shape None and stops.
    """
    deadline = deadline or Deadline()
    num_devices = instance.cluster.num_devices
    training = instance.training
    heap: list = []
    splits: dict[int, _ComputeSplits] = {}
    for index, (config, microbatch) in enumerate(instance.choices):
        if config.devices > num_devices:
            continue
        profiles = [layer.profile(config, microbatch) for layer in instance.workload.layers]
        splits[index] = _ComputeSplits([sum(cost.compute_ticks(p, training.tick_s))
                                        for p in profiles])
        for num_stages in range(1, len(profiles) + 1):
            dp = num_devices // (config.devices * num_stages)
            if dp >= 1:
                tau = splits[index].quick_bound(num_stages)
                heapq.heappush(heap, (_rounds(instance, config, microbatch, num_stages, dp) * tau,
                                      index, num_stages, -dp, False))
    while heap:
        if deadline.expired():
            yield heap[0][0], None
            return
        bound, index, num_stages, negative_dp, refined = heapq.heappop(heap)
        config, microbatch = instance.choices[index]
        dp = -negative_dp
        tau = splits[index].exact_bound(num_stages)
        if not refined:
            heapq.heappush(heap, (_rounds(instance, config, microbatch, num_stages, dp) * tau,
                                  index, num_stages, negative_dp, True))
            continue
        yield bound, Shape(config, microbatch, num_stages, dp)
        if dp > 1:
            heapq.heappush(heap, (_rounds(instance, config, microbatch, num_stages, dp - 1) * tau,
                                  index, num_stages, negative_dp + 1, True))


def _rounds(instance: Instance, config: IntraConfig, microbatch: int, num_stages: int,
            dp: int) -> int:
    """m + S − 1: the number of τ_max a 1F1B iteration lasts."""
    return cost.num_microbatches(instance.training.global_batch, microbatch, config,
                                 dp) + num_stages - 1


class _ComputeSplits:
    """Least slowest-stage compute over contiguous splits of a chain of per-layer ticks."""

    def __init__(self, ticks: list[int]):
        self.prefix = [0, *itertools.accumulate(ticks)]
        self.largest = max(ticks)
        self._exact: dict[int, int] = {}

    def quick_bound(self, parts: int) -> int:
        """max(largest layer, ⌈total / parts⌉) ≤ the exact min-max."""
        return max(self.largest, -(-self.prefix[-1] // parts))

    def exact_bound(self, parts: int) -> int:
        """min over splits into ``parts`` non-empty contiguous stages of the largest sum.

        Splitting a stage never raises the maximum (ticks are >= 0), so "exactly
        ``parts``" equals "at most ``parts``", which a greedy fill decides for a cap;
        binary search on the cap between the quick bound and the quick bound plus the
        largest layer (where greedy always succeeds).
        """
        if parts not in self._exact:
            low = self.quick_bound(parts)
            high = low + self.largest
            while low < high:
                middle = (low + high) // 2
                if self._fits(middle, parts):
                    high = middle
                else:
                    low = middle + 1
            self._exact[parts] = low
        return self._exact[parts]

    def _fits(self, cap: int, parts: int) -> bool:
        prefix, position, used = self.prefix, 0, 0
        while position < len(prefix) - 1:
            position = bisect.bisect_right(prefix, prefix[position] + cap) - 1
            used += 1
            if used > parts:
                return False
        return True


def build_subproblem(instance: Instance, shape: Shape, zero: int,
                     deadline: Deadline | None = None) -> SubProblem:
    """The sub-problem (shape, z) with its memory-feasible options; checks ``deadline``."""
    deadline = deadline or Deadline()
    config, microbatch, num_stages, dp = shape.config, shape.microbatch, shape.num_stages, \
        shape.dp
    training = instance.training
    microbatches = cost.num_microbatches(training.global_batch, microbatch, config, dp)
    profiles = [layer.profile(config, microbatch) for layer in instance.workload.layers]
    fwd_bwd = [cost.compute_ticks(profile, training.tick_s) for profile in profiles]
    limit = instance.cluster.usable_hbm_bytes
    num_layers = len(profiles)
    options, compute = [], {}
    for stage in range(num_stages):
        k = cost.in_flight(stage, num_stages, microbatches)
        fitting = []
        for option in _spans(stage, num_stages, num_layers,
                             RecomputeMode.FULL in training.recompute_modes):
            deadline.tick()
            span = profiles[option.first_layer:option.last_layer + 1]
            memory = cost.stage_memory_bytes([span], option.mode, k, training.optimizer,
                                             zero, dp)
            if memory <= limit:
                fitting.append(option)
                compute[option] = sum(
                    f + b + (f if option.recompute else 0)
                    for f, b in fwd_bwd[option.first_layer:option.last_layer + 1])
        options.append(tuple(fitting))
    tau_lower = _min_max_compute(options, compute, num_layers)
    return SubProblem(config, microbatch, num_stages, dp, zero, microbatches, tuple(options),
                      compute, tau_lower)


def _spans(stage: int, num_stages: int, num_layers: int, allow_recompute: bool):
    """Spans stage ``stage`` can take while every other stage keeps at least one layer."""
    first_choices = [0] if stage == 0 else range(stage, num_layers - (num_stages - stage) + 1)
    for first_layer in first_choices:
        last_choices = ([num_layers - 1] if stage == num_stages - 1
                        else range(first_layer, num_layers - (num_stages - stage) + 1))
        for last_layer in last_choices:
            for recompute in ((False, True) if allow_recompute else (False,)):
                yield StageOption(first_layer, last_layer, recompute)


def _min_max_compute(options, compute, num_layers: int) -> int | None:
    """min over contiguous splits made of offered options of the slowest stage's compute.

    best[stage][first_layer] = min over options o of stage starting at first_layer of
    max(compute[o], best[stage + 1][o.last_layer + 1]); best[S][L] = 0.
    """
    num_stages = len(options)
    best = {(num_stages, num_layers): 0}
    for stage in reversed(range(num_stages)):
        for option in options[stage]:
            rest = best.get((stage + 1, option.last_layer + 1))
            if rest is None:
                continue
            value = max(compute[option], rest)
            key = (stage, option.first_layer)
            best[key] = min(best.get(key, value), value)
    return best.get((0, 0))
