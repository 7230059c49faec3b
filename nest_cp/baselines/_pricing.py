"""A memoising re-implementation of the evaluator's pricing, for the MCMC walk's inner loop.

``evaluate`` is written for clarity and recomputes every exact-fraction term
for every replica; at 1,024 devices one call takes most of a second, too slow
for thousands of proposals.  :class:`PlanPricer` walks the plan exactly as
``nest_cp.evaluate._price`` does (DESIGN §3) with the same :mod:`nest_cp.cost`
functions, but memoises each primitive term by its arguments (a layer range's
collectives by its groups' bottleneck ``Path``s, a transfer by volume and path,
a sync by volume, group size and path).  It prices plans with v = 1 (the MCMC
walk does not interleave yet), recompute none or full.  It is only a search aid:
the plan a baseline returns is always priced again by the real evaluator, and a
test checks that both agree to the tick.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cache

from nest_cp import cost
from nest_cp.model import Instance, IntraConfig, Phase, RecomputeMode
from nest_cp.network import NetworkModel, Path
from nest_cp.plan import Plan


class PlanPricer:
    """Objective ticks and worst memory overflow of plans on one instance, memoised."""

    def __init__(self, instance: Instance, network: NetworkModel):
        self.instance, self.network = instance, network
        training = instance.training
        self.tick_s, self.optimizer = training.tick_s, training.optimizer
        self.limit = instance.cluster.usable_hbm_bytes
        self._collectives: Callable = cache(self._range_collective_ticks)
        self._transfer: Callable = cache(self._transfer_ticks)
        self._sync: Callable = cache(self._sync_ticks)
        self._gather: Callable = cache(self._gather_ticks)

    def price(self, plan: Plan) -> tuple[int, int]:
        """(objective ticks, largest memory excess in bytes; <= 0 when every stage fits).

        ``plan`` must be well-formed, carry a placement and have v = 1.
        """
        if plan.virtual_stages != 1:
            raise ValueError(f"expected a plan with v = 1, got v = {plan.virtual_stages}")
        config, dp = plan.config, plan.num_replicas
        microbatches = cost.num_microbatches(self.instance.training.global_batch,
                                             plan.microbatch, config, dp)
        tau_max = sync = 0
        overflow = None
        for s, stage in enumerate(plan.stages):
            profiles = [self.instance.workload.layers[layer].profile(config, plan.microbatch)
                        for layer in stage.layers]
            tau_max = max(tau_max, self._stage_ticks(plan, s, profiles))
            backward = sum(cost.compute_ticks(p, self.tick_s)[1] for p in profiles)
            sync = max(sync, cost.exposed_sync_ticks(
                self._stage_sync(plan, s, profiles), backward,
                self.instance.training.overlap_grad_reduce))
            in_flight = cost.in_flight(s, plan.num_stages, microbatches)
            memory = cost.stage_memory_bytes([profiles], stage.recompute, in_flight,
                                             self.optimizer, plan.zero, dp)
            overflow = memory - self.limit if overflow is None else max(
                overflow, memory - self.limit)
        return cost.iteration_ticks(microbatches, plan.num_stages, tau_max, sync), overflow

    def _stage_ticks(self, plan: Plan, s: int, profiles: list) -> int:
        """τ of stage s: the slowest replica (compute, collectives, receives, ZeRO-3 gathers)."""
        config, dp, placement = plan.config, plan.num_replicas, plan.placement
        stage = plan.stages[s]
        fixed = sum(sum(cost.compute_ticks(p, self.tick_s)) + cost.recompute_compute_ticks(
            p, stage.recompute, self.tick_s) for p in profiles)
        if plan.zero == 3:
            params = sum(p.params for p in profiles)
            fixed += max(self._gather(params, dp, self.network.group_path(
                [placement[s][r][j] for r in range(dp)])) for j in range(config.devices))
        slowest = 0
        for r in range(dp):
            paths = cost.GroupPaths.of_replica(self.network, placement[s][r], config)
            time = self._collectives(config, plan.microbatch, stage.first_layer,
                                     stage.last_layer, paths, None)
            if stage.recompute is RecomputeMode.FULL:  # the rerun forward repeats its collectives
                time += self._collectives(config, plan.microbatch, stage.first_layer,
                                          stage.last_layer, paths, Phase.FWD)
            if s > 0:
                time += self._receive(plan, s - 1, s, r)
            if s + 1 < plan.num_stages:
                time += self._receive(plan, s + 1, s, r)
            slowest = max(slowest, time)
        return fixed + slowest

    def _receive(self, plan: Plan, sender: int, receiver: int, replica: int) -> int:
        boundary = plan.stages[min(sender, receiver)].last_layer
        volume = self.instance.workload.layers[boundary].profile(
            plan.config, plan.microbatch).out_bytes
        return max(self._transfer(volume, self.network.pair_path(src, dst))
                   for src, dst in zip(plan.placement[sender][replica],
                                       plan.placement[receiver][replica]))

    def _stage_sync(self, plan: Plan, s: int, profiles: list) -> int:
        """Gradient sync of stage s: dense over d·e ranks, expert over d ranks (slowest rank)."""
        config, dp, placement = plan.config, plan.num_replicas, plan.placement[s]
        dense = sum(p.dense_params for p in profiles)
        expert = sum(p.expert_params for p in profiles)
        dense_ticks = max(self._sync(dense, plan.zero, dp * config.ep, self.network.group_path(
            [placement[r][t + config.tp * e] for r in range(dp) for e in range(config.ep)]))
            for t in range(config.tp))
        expert_ticks = max(self._sync(expert, plan.zero, dp, self.network.group_path(
            [placement[r][j] for r in range(dp)])) for j in range(config.devices))
        return dense_ticks + expert_ticks

    # memoised primitive terms -------------------------------------------------

    def _range_collective_ticks(self, config: IntraConfig, microbatch: int, first_layer: int,
                                last_layer: int, paths: cost.GroupPaths,
                                phase: Phase | None) -> int:
        layers = self.instance.workload.layers[first_layer:last_layer + 1]
        return sum(cost.layer_collective_ticks(layer.profile(config, microbatch), config, paths,
                                               self.tick_s, phase) for layer in layers)

    def _transfer_ticks(self, volume_bytes: int, path: Path) -> int:
        return cost.transfer_ticks(volume_bytes, path, self.tick_s)

    def _sync_ticks(self, params: int, zero: int, group_size: int, path: Path | None) -> int:
        return cost.gradient_sync_ticks(params, self.optimizer, zero, group_size, path,
                                        self.tick_s)

    def _gather_ticks(self, params: int, dp: int, path: Path | None) -> int:
        return cost.zero3_gather_ticks(params, self.optimizer, dp, path, self.tick_s)
