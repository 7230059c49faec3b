"""Integer coefficients of the exact models, computed with nest_cp.cost.

Every coefficient is the evaluator's own integer for one stage option priced on
one bottleneck ``Path``: the models only ever multiply these constants by 0/1
variables, so a solver's objective is the evaluator's objective to the tick.
Terms rounded once over a whole stage (ZeRO-3 gathers and gradient syncs of the
stage's total parameters) are priced per option, never summed per layer.
"""

from __future__ import annotations

from nest_cp import cost
from nest_cp.exact.subproblems import StageOption, SubProblem
from nest_cp.model import Instance
from nest_cp.network import Path


class StagePricing:
    """Per-(stage option, path) prices of one sub-problem, memoised in this object."""

    def __init__(self, instance: Instance, sub: SubProblem):
        self._training = instance.training
        self._sub = sub
        self._profiles = [layer.profile(sub.config, sub.microbatch)
                          for layer in instance.workload.layers]
        self._memo: dict[tuple, int] = {}

    def compute(self, option: StageOption) -> int:
        """fwd + bwd of the span, plus fwd again when recomputing."""
        return self._sub.compute[option]

    def has_collectives(self) -> bool:
        return any(profile.collectives for profile in self._profiles)

    def dense_params(self, option: StageOption) -> int:
        return sum(self._profiles[layer].dense_params for layer in option.layers)

    def expert_params(self, option: StageOption) -> int:
        return sum(self._profiles[layer].expert_params for layer in option.layers)

    def collectives(self, option: StageOption, path: Path | None) -> int:
        """Intra-layer collectives of the span (fwd and bwd) on a replica group's bottleneck."""
        # DESIGN §3's replica span, not yet §3.2 f's per-group pricing (issue 13)
        return self._cached("coll", option, path, lambda: sum(
            cost.layer_collective_ticks(self._profiles[layer], self._sub.config,
                                        cost.GroupPaths.replica_span(path),
                                        self._training.tick_s) for layer in option.layers))

    def transfer(self, option: StageOption, path: Path | None) -> int:
        """One point-to-point transfer of the span's last layer output on a pair's path."""
        if path is None:
            return 0
        volume = self._profiles[option.last_layer].out_bytes
        return self._cached("p2p", option, path, lambda: cost.transfer_ticks(
            volume, path, self._training.tick_s))

    def zero_gather(self, option: StageOption, path: Path | None) -> int:
        """ZeRO-3 all-gathers (fwd and bwd) of the span's parameters over the d replicas."""
        if self._sub.zero != 3:
            return 0
        params = self.dense_params(option) + self.expert_params(option)
        return self._cached("gather", option, path, lambda: cost.zero3_gather_ticks(
            params, self._training.optimizer, self._sub.dp, path, self._training.tick_s))

    def dense_sync(self, option: StageOption, path: Path | None) -> int:
        """Gradient sync of the span's dense parameters over the d·e ranks of one t index."""
        size = self._sub.dp * self._sub.config.ep
        return self._cached("dense", option, path, lambda: cost.gradient_sync_ticks(
            self.dense_params(option), self._training.optimizer, self._sub.zero, size, path,
            self._training.tick_s))

    def expert_sync(self, option: StageOption, path: Path | None) -> int:
        """Gradient sync of the span's expert parameters over the d ranks of one j."""
        return self._cached("expert", option, path, lambda: cost.gradient_sync_ticks(
            self.expert_params(option), self._training.optimizer, self._sub.zero,
            self._sub.dp, path, self._training.tick_s))

    def _cached(self, term: str, option: StageOption, path: Path | None, price) -> int:
        key = (term, option, path)
        if key not in self._memo:
            self._memo[key] = price()
        return self._memo[key]
