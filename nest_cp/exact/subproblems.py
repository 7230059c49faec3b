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

import math
from dataclasses import dataclass

from nest_cp import cost
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
    """Every (c, b, S, d, z) with a·S·d ≤ N, sorted by lower bound (then by label)."""
    num_layers = instance.workload.num_layers
    num_devices = instance.cluster.num_devices
    found = []
    for config, microbatch in instance.choices:
        for num_stages in range(1, num_layers + 1):
            for dp in range(1, num_devices // (config.devices * num_stages) + 1):
                for zero in sorted(set(instance.training.zero_stages)):
                    found.append(_subproblem(instance, config, microbatch, num_stages, dp, zero))
    return sorted(found, key=lambda sub: (sub.lower_bound_ticks, sub.label))


def _subproblem(instance: Instance, config: IntraConfig, microbatch: int, num_stages: int,
                dp: int, zero: int) -> SubProblem:
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
