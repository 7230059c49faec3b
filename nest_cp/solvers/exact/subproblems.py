"""Sub-problems of the exact backends: the choices enumerated outside the solver.

The plan of DESIGN §2 and §3.2 is non-linear in (configuration c, microbatch b,
depth S, data-parallel degree d, ZeRO stage z, virtual stages v): m = ceil(B /
(b·e·d)) and v multiply τ_chunk in T = (v·m + S − 1)·τ_chunk + T_sync, and d, z
scale every memory and communication term.  Fixing these six makes the rest
(split into S·v chunks, recompute mode per stage, placement) a linear model, so
the exact backends solve one model per tuple and take the minimum.  v > 1 needs
S ≥ 2 and m mod S = 0 (Megatron's rule); other tuples are never built.

Each sub-problem carries, per chunk position k (chunk k runs on stage k mod S),
its *chunk options*: every contiguous layer span with a recompute mode such that
the chunk's stage would fit in memory if it held that chunk alone (with the
stage's in-flight count).  Stage memory only grows with more chunks, so every
option a feasible plan uses is offered.  With v = 1 a chunk is its stage and
this filter is exact: memory needs no constraint in the model.  With v > 1 a
stage's memory couples its chunks (the optimizer state of their summed
parameters, rounded once; the largest chunk's activations times the in-flight
count; the largest layer's ZeRO-3 buffers and working set), which the model
states exactly (nest_cp.solvers.exact.skeleton).

Lower bound (used to order and prune sub-problems): τ_c(k, r) ≥ compute of the
chunk's option, so τ_chunk ≥ τ_lower = min over contiguous splits into offered
options of max over chunks of compute (a min-max partition solved exactly by a
small DP below), and T ≥ (v·m + S − 1)·τ_lower because T_sync ≥ 0.  A
sub-problem whose bound is ≥ the incumbent holds no better plan, so pruning it
is exact.
"""

from __future__ import annotations

import bisect
import heapq
import itertools
import math
from collections.abc import Iterator
from dataclasses import dataclass

from nest_cp.cost import terms as cost
from nest_cp.model.instance import Instance, IntraConfig, RecomputeMode
from nest_cp.solvers.exact.budget import Deadline


@dataclass(frozen=True, slots=True)
class ChunkOption:
    """A chunk's layer span ``first_layer..last_layer`` and its stage's recompute mode."""

    first_layer: int
    last_layer: int
    mode: RecomputeMode

    @property
    def layers(self) -> range:
        return range(self.first_layer, self.last_layer + 1)

    @property
    def key(self) -> str:
        return f"{self.first_layer}_{self.last_layer}_{self.mode.value}"


@dataclass(frozen=True, slots=True)
class SubProblem:
    """One fixed (c, b, S, d, z, v) with its memory-filtered chunk options and compute bound."""

    config: IntraConfig
    microbatch: int
    num_stages: int
    dp: int
    zero: int
    num_microbatches: int
    options: tuple[tuple[ChunkOption, ...], ...]  # options[chunk]: spans that may fit
    compute: dict                                 # compute[option] = fwd + bwd + recompute ticks
    tau_lower_ticks: int | None                   # None: no memory-feasible split exists
    virtual_stages: int = 1

    @property
    def feasible(self) -> bool:
        """False when no split into offered options exists (then no plan fits).

        True does not prove a plan fits when v > 1 (memory couples a stage's chunks).
        """
        return self.tau_lower_ticks is not None

    @property
    def num_chunks(self) -> int:
        return self.num_stages * self.virtual_stages

    def stage_of_chunk(self, chunk: int) -> int:
        return chunk % self.num_stages

    def chunks_of_stage(self, stage: int) -> range:
        return range(stage, self.num_chunks, self.num_stages)

    @property
    def rounds(self) -> int:
        """v·m + S − 1: how many τ_chunk an iteration lasts."""
        return self.virtual_stages * self.num_microbatches + self.num_stages - 1

    @property
    def lower_bound_ticks(self) -> int | float:
        """(v·m + S − 1)·τ_lower; +inf when no split fits in memory."""
        if self.tau_lower_ticks is None:
            return math.inf
        return self.rounds * self.tau_lower_ticks

    @property
    def label(self) -> str:
        return shape_label(self.config, self.microbatch, self.num_stages, self.dp, self.zero,
                           self.virtual_stages)

    @property
    def shape_key(self) -> tuple:
        """(c, b, S, d, z, v): the six enumerated choices, as :func:`plan_shape_key`."""
        return (self.config, self.microbatch, self.num_stages, self.dp, self.zero,
                self.virtual_stages)

    def matches(self, plan) -> bool:
        """Whether ``plan`` makes this sub-problem's six enumerated choices."""
        return plan_shape_key(plan) == self.shape_key


def shape_label(config: IntraConfig, microbatch: int, num_stages: int, dp: int, zero: int,
                virtual_stages: int) -> str:
    """How logs and messages name a sub-problem (c, b, S, d, z, v); the context width
    only when c > 1 (the driver keys its bounds by it, so it tells every sub-problem
    apart)."""
    context = f",cp={config.cp}" if config.cp > 1 else ""
    return (f"tp={config.tp},ep={config.ep}{context},b={microbatch},S={num_stages},d={dp},"
            f"z={zero},v={virtual_stages}")


def plan_shape_key(plan) -> tuple:
    """(c, b, S, d, z, v) of ``plan``: the choices one sub-problem fixes
    (:attr:`SubProblem.shape_key`)."""
    return (plan.config, plan.microbatch, plan.num_stages, plan.num_replicas, plan.zero,
            plan.virtual_stages)


def enumerate_subproblems(instance: Instance) -> list[SubProblem]:
    """Every valid (c, b, S, d, z, v) with a·S·d ≤ N, built and sorted by lower bound (then
    label).

    Eager and O(#sub-problems · L²): for tests and small instances.  The exact driver
    walks :func:`shapes_by_bound` instead and builds a sub-problem only when it gets there.
    """
    found = [build_subproblem(instance, shape, zero)
             for _, shape in shapes_by_bound(instance) if shape is not None
             for zero in admitted_zeros(instance, shape)]
    return sorted(found, key=lambda sub: (sub.lower_bound_ticks, sub.label))


@dataclass(frozen=True, slots=True)
class Shape:
    """The choices (c, b, S, d, v) of a sub-problem other than its ZeRO stage."""

    config: IntraConfig
    microbatch: int
    num_stages: int
    dp: int
    virtual_stages: int = 1


def admitted_zeros(instance: Instance, shape: Shape) -> list[int]:
    """The allowed ZeRO stages the instance's launcher admits for the shape, ascending."""
    return [zero for zero in sorted(set(instance.training.zero_stages))
            if instance.admits(shape.config, shape.microbatch, shape.dp, shape.num_stages,
                               shape.virtual_stages, zero)]


def interleaving_allowed(num_stages: int, virtual_stages: int, microbatches: int) -> bool:
    """Megatron's rule for v > 1 (DESIGN §3.2 b): S ≥ 2 and m a multiple of S."""
    return virtual_stages == 1 or (num_stages >= 2 and microbatches % num_stages == 0)


def count_shapes(instance: Instance) -> int:
    """How many (c, b, S, d, v) with a·S·d ≤ N and S·v ≤ L shapes_by_bound walks at most
    (those breaking the interleaving rule are passed over; a progress total)."""
    num_devices, num_layers = instance.cluster.num_devices, instance.workload.num_layers
    return sum(num_devices // (config.devices * num_stages)
               for config, _ in instance.choices if config.devices <= num_devices
               for virtual in set(instance.training.virtual_stages)
               for num_stages in range(1 if virtual == 1 else 2, num_layers // virtual + 1))


def shapes_by_bound(instance: Instance, deadline: Deadline | None = None
                    ) -> Iterator[tuple[int, Shape | None]]:
    """Every valid (c, b, S, d, v) with a·S·d ≤ N as (compute bound, shape), bound
    non-decreasing.

    Lazy, so the cost is paid only for the shapes a search reaches: the bound of
    (c, b, S, d, v) is (v·m + S − 1)·τ_c(S·v) with τ_c(n) the least possible slowest
    chunk's fwd + bwd over contiguous n-splits (memory and communication ignored, so
    it is at most the sub-problem's lower bound for every ZeRO stage).  It shrinks as
    d grows, so a heap holds one entry per (c, b, S, v), starting at the largest d;
    each entry first carries the O(1) bound max(largest layer, ⌈total / S·v⌉) and is
    refined to the exact τ_c(S·v) when it reaches the top (a lazy A*-style
    refinement: every bound in the heap stays valid, so shapes come out in order of
    valid bounds).  Degrees d that break the interleaving rule are passed over.
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
        for virtual in sorted(set(training.virtual_stages)):
            for num_stages in range(1 if virtual == 1 else 2, len(profiles) // virtual + 1):
                dp = num_devices // (config.devices * num_stages)
                if dp >= 1:
                    tau = splits[index].quick_bound(num_stages * virtual)
                    heapq.heappush(heap, (_rounds(instance, config, microbatch, num_stages, dp,
                                                  virtual) * tau,
                                          index, num_stages, virtual, -dp, False))
    while heap:
        if deadline.expired():
            yield heap[0][0], None
            return
        bound, index, num_stages, virtual, negative_dp, refined = heapq.heappop(heap)
        config, microbatch = instance.choices[index]
        dp = -negative_dp
        tau = splits[index].exact_bound(num_stages * virtual)
        if not refined:
            heapq.heappush(heap, (_rounds(instance, config, microbatch, num_stages, dp,
                                          virtual) * tau,
                                  index, num_stages, virtual, negative_dp, True))
            continue
        microbatches = cost.num_microbatches(training.global_batch, microbatch, config, dp)
        shape = Shape(config, microbatch, num_stages, dp, virtual)
        if interleaving_allowed(num_stages, virtual, microbatches) and \
                admitted_zeros(instance, shape):
            yield bound, shape
        if dp > 1:
            heapq.heappush(heap, (_rounds(instance, config, microbatch, num_stages, dp - 1,
                                          virtual) * tau,
                                  index, num_stages, virtual, negative_dp + 1, True))


def _rounds(instance: Instance, config: IntraConfig, microbatch: int, num_stages: int,
            dp: int, virtual: int) -> int:
    """v·m + S − 1: the number of τ_chunk an interleaved 1F1B iteration lasts."""
    return virtual * cost.num_microbatches(instance.training.global_batch, microbatch, config,
                                           dp) + num_stages - 1


class _ComputeSplits:
    """Least slowest-chunk compute over contiguous splits of a chain of per-layer ticks."""

    def __init__(self, ticks: list[int]):
        self.prefix = [0, *itertools.accumulate(ticks)]
        self.largest = max(ticks)
        self._exact: dict[int, int] = {}

    def quick_bound(self, parts: int) -> int:
        """max(largest layer, ⌈total / parts⌉) ≤ the exact min-max."""
        return max(self.largest, -(-self.prefix[-1] // parts))

    def exact_bound(self, parts: int) -> int:
        """min over splits into ``parts`` non-empty contiguous chunks of the largest sum.

        Splitting a chunk never raises the maximum (ticks are >= 0), so "exactly
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
    """The sub-problem (shape, z) with its memory-filtered options; checks ``deadline``."""
    deadline = deadline or Deadline()
    config, microbatch, num_stages, dp = shape.config, shape.microbatch, shape.num_stages, \
        shape.dp
    virtual = shape.virtual_stages
    training = instance.training
    microbatches = cost.num_microbatches(training.global_batch, microbatch, config, dp)
    profiles = [layer.profile(config, microbatch) for layer in instance.workload.layers]
    fwd_bwd = [sum(cost.compute_ticks(profile, training.tick_s)) for profile in profiles]
    limit = instance.cluster.usable_hbm_bytes
    num_layers, num_chunks = len(profiles), num_stages * virtual
    options, compute = [], {}
    for chunk in range(num_chunks):
        in_flight = cost.in_flight(chunk % num_stages, num_stages, microbatches, virtual)
        fitting = []
        for option in _spans(chunk, num_chunks, num_layers, training.recompute_modes):
            deadline.tick()
            span = profiles[option.first_layer:option.last_layer + 1]
            # the stage holding this chunk alone: exact for v = 1, a lower bound for v > 1
            memory = cost.stage_memory_bytes([span], option.mode, in_flight,
                                             training.optimizer, zero, dp, config.cp,
                                             training.cp_comm)
            if memory <= limit:
                fitting.append(option)
                compute[option] = sum(
                    fwd_bwd[layer] + cost.recompute_compute_ticks(profiles[layer], option.mode,
                                                                  training.tick_s)
                    for layer in option.layers)
        options.append(tuple(fitting))
    tau_lower = _min_max(options, lambda _, option: compute[option], num_layers,
                         Deadline())
    return SubProblem(config, microbatch, num_stages, dp, zero, microbatches, tuple(options),
                      compute, tau_lower, virtual)


def _spans(chunk: int, num_chunks: int, num_layers: int, modes):
    """Options chunk ``chunk`` can take while every other chunk keeps at least one layer."""
    first_choices = [0] if chunk == 0 else range(chunk, num_layers - (num_chunks - chunk) + 1)
    for first_layer in first_choices:
        last_choices = ([num_layers - 1] if chunk == num_chunks - 1
                        else range(first_layer, num_layers - (num_chunks - chunk) + 1))
        for last_layer in last_choices:
            for mode in modes:
                yield ChunkOption(first_layer, last_layer, mode)


def split_min_max(sub: SubProblem, value, deadline: Deadline | None = None) -> int | None:
    """min over contiguous splits of max over chunks of value(chunk, option)."""
    num_layers = max(o.last_layer for o in sub.options[-1]) + 1 if sub.options[-1] else 0
    return _min_max(sub.options, value, num_layers, deadline or Deadline())


def _min_max(options, value, num_layers: int, deadline: Deadline) -> int | None:
    """min over contiguous splits made of offered options of the largest value(chunk, o).

    best[chunk][first_layer] = min over options o of chunk starting at first_layer of
    max(value(chunk, o), best[chunk + 1][o.last_layer + 1]); best[S·v][L] = 0.  Modes need
    not agree between a stage's chunks here (a relaxation: still a lower bound).
    """
    num_chunks = len(options)
    best = {(num_chunks, num_layers): 0}
    for chunk in reversed(range(num_chunks)):
        for option in options[chunk]:
            deadline.tick()
            rest = best.get((chunk + 1, option.last_layer + 1))
            if rest is None:
                continue
            candidate = max(value(chunk, option), rest)
            key = (chunk, option.first_layer)
            best[key] = min(best.get(key, candidate), candidate)
    return best.get((0, 0))
