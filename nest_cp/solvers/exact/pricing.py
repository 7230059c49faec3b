"""Integer coefficients of the exact models, computed with nest_cp.cost.terms.

Every coefficient is the evaluator's own integer for one chunk option priced on
one bottleneck ``Path``: the models multiply these constants by 0/1 variables,
so a solver's objective is the evaluator's objective to the tick.

Terms the evaluator rounds once over a whole stage (gradient syncs of the stage's
total parameters; memory's optimizer state, sharded and rounded up) are per option
when a stage is one chunk (v = 1).  With v > 1 the stage total is a sum over its
chunks, and ceil(Σ_k x_k + c) is split exactly as

    Σ_k ⌊x_k⌋ + ⌊c⌋ + carry,   carry = ⌈Σ_k frac(x_k) + frac(c)⌉ ∈ [0, v + 1]

(:class:`StageRounding`): the floors are option coefficients and the carry a small
integer variable with D·carry ≥ Σ_k D·frac(x_k) + D·frac(c) for the common
denominator D, so the large numbers stay in coefficients of 0/1 variables.  The
rational x of each phase of a sync (the gradient phase, and for ZeRO 1 and 2 the
weight all-gather, each rounded alone: cost model §5 c) is affine in the parameter
count; :meth:`ChunkPricing.sync_ticks` recovers it from the cost primitives and tests
check it against :func:`nest_cp.cost.terms.gradient_sync_parts`.

Collectives (DESIGN §3.2 f): a stage replica pays, per collective, the slowest of
its TP (or EP) groups.  Collectives are partitioned into *classes* whose slowest
group is the same for every member (one class per (kind, volume), or one per group
kind when the candidate paths are totally ordered by speed or the kind has one
group per replica), so the model floors one term per class over the groups.  With
``tp_comm_overlap`` (cost model §5 e) a stage replica whose TP groups all lie in tier-0
domains pays per layer and direction only max(⌈C/t⌉, C − X) of its TP collectives' C:
not a sum over classes, so :meth:`ChunkPricing.tp_collectives` prices a stage replica's
TP collectives whole, with the evaluator's own function.

Context parallelism (DESIGN §3.4, c > 1): the c ranks of a CP group hold the same
parameters, so the dense sync runs over d·e·c ranks, the expert sync and the ZeRO-3
gathers over d·c; a stage replica's exposed ring (p2p) or all-to-alls (a2a) are a
max over its CP groups inside a sum over layers and directions, so
:meth:`ChunkPricing.context` prices a stage replica's context communication whole, with
the evaluator's own function, on the replica's :class:`~nest_cp.cost.terms.ContextPaths`
(the structured space: one price per layout).  The full space splits it into *signatures*
(:meth:`ChunkPricing.context_piece`: a ring's volume and compute step, or an all-to-all's
volume), each a function of one pair's (group's) path that grows with its transfer
(all-to-all) time, so one pair is the slowest for every piece of a signature and the model
floors one term per signature over the pairs; that restatement of
:func:`~nest_cp.cost.terms.context_ticks` is checked against the evaluator on random
full-space plans (tests/test_exact_cp.py).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction

from nest_cp.cost import terms as cost
from nest_cp.model.instance import (
    CollectiveGroup,
    CollectiveKind,
    CpComm,
    Instance,
    Phase,
    RecomputeMode,
)
from nest_cp.model.network import Path, collective_seconds, collective_ticks
from nest_cp.model.ticks import ceil_div, exact, to_ticks
from nest_cp.solvers.exact.subproblems import ChunkOption, SubProblem

ALL = "all"  # the class holding every collective of a group kind
REDUCE, GATHER = 0, 1  # the phases of a gradient sync: gradient reduction, weight gather


@dataclass(frozen=True, slots=True)
class CollectiveClass:
    """Collectives of one group kind priced together: those with ``signature`` (kind,
    volume), or every one of the group kind when ``signature`` is ALL."""

    group: CollectiveGroup
    signature: object

    def holds(self, collective) -> bool:
        return collective.group is self.group and (
            self.signature == ALL
            or self.signature == (collective.kind, collective.volume_bytes))

    @property
    def key(self) -> str:
        if self.signature == ALL:
            return self.group.value
        kind, volume = self.signature
        return f"{self.group.value}_{kind.value}_{volume}"


@dataclass(frozen=True, slots=True)
class Affine:
    """x(P) = slope·P + offset ticks (unrounded) for P > 0 parameters; 0 for P = 0."""

    slope: Fraction
    offset: Fraction


class ChunkPricing:
    """Per-(chunk option, path) prices of one sub-problem, memoised in this object."""

    def __init__(self, instance: Instance, sub: SubProblem):
        self._training = instance.training
        self._sub = sub
        self._profiles = [layer.profile(sub.config, sub.microbatch)
                          for layer in instance.workload.layers]
        self._memo: dict[tuple, int] = {}

    @property
    def tick_s(self) -> float:
        return self._training.tick_s

    @property
    def num_layers(self) -> int:
        return len(self._profiles)

    @property
    def overlaps_tp(self) -> bool:
        """Whether TP collectives hide behind the GEMMs where their groups are local
        (``tp_comm_overlap``, cost model §5 e)."""
        return self._training.tp_comm_overlap

    # ------------------------------------------------------------ compute

    def compute(self, option: ChunkOption) -> int:
        """fwd + bwd of the span plus the forward its mode reruns."""
        return self._sub.compute[option]

    def backward(self, option: ChunkOption) -> int:
        """Σ bwd ticks of one microbatch over the span (what overlapped reduction hides behind)."""
        return sum(self._compute_ticks(layer)[1] for layer in option.layers)

    def forward(self, option: ChunkOption) -> int:
        """Σ fwd ticks of one microbatch over the span (what an overlapped weight gather hides
        behind)."""
        return sum(self._compute_ticks(layer)[0] for layer in option.layers)

    def _compute_ticks(self, layer: int) -> tuple[int, int]:
        """(fwd, bwd) ticks of one microbatch of ``layer``, memoised."""
        key = ("compute", layer)
        if key not in self._memo:
            self._memo[key] = cost.compute_ticks(self._profiles[layer], self.tick_s)
        return self._memo[key]

    def dense_params(self, option: ChunkOption) -> int:
        return sum(self._profiles[layer].dense_params for layer in option.layers)

    def expert_params(self, option: ChunkOption) -> int:
        return sum(self._profiles[layer].expert_params for layer in option.layers)

    def params(self, option: ChunkOption) -> int:
        return self.dense_params(option) + self.expert_params(option)

    # ------------------------------------------------------------ context parallelism

    def context(self, option: ChunkOption, paths: cost.ContextPaths) -> int:
        """The span's exposed context-parallel communication on a stage replica whose CP
        groups have ``paths``, as the evaluator prices it (DESIGN §3.4): per layer the
        forward and backward parts (:func:`~nest_cp.cost.terms.context_ticks`) and, under
        full or selective recomputation, the forward part again; 0 for c = 1."""
        config = self._sub.config
        if config.cp == 1:
            return 0
        comm = self._training.cp_comm

        def price() -> int:
            total = 0
            for layer in option.layers:
                forward, backward = cost.context_ticks(self._profiles[layer], config, comm,
                                                       paths, self.tick_s)
                total += forward + backward
                if option.mode is not RecomputeMode.NONE:
                    total += forward  # the rerun forward repeats its ring or all-to-alls
            return total
        return self._cached("context", option, paths, price)

    def context_signatures(self) -> tuple[tuple, ...]:
        """The distinct pieces of context communication the layers have (DESIGN §3.4), each
        a function of one path: under p2p ("p2p", volume, X) for the forward ring
        (cp_kv_bytes, X = ⌈attn_fwd ticks / c⌉) and the backward one (2·cp_kv_bytes,
        ⌈attn_bwd ticks / c⌉), priced (c − 1)·max(0, P(volume) − X) on a ring pair; under a2a
        ("a2a", volume, 0), one all-to-all of cp_a2a_bytes over a CP group; () for c = 1."""
        return tuple(sorted({signature for layer in range(self.num_layers)
                             for signature, _ in self._context_pieces(layer, RecomputeMode.NONE)}))

    def _context_pieces(self, layer: int, mode: RecomputeMode) -> list[tuple[tuple, int]]:
        """(signature, how many times one microbatch pays it) of one layer under ``mode``:
        p2p the forward ring once (twice when it recomputes) and the backward ring once; a2a
        two all-to-alls in each direction (two more when it recomputes), as
        :func:`~nest_cp.cost.terms.context_ticks` and the evaluator charge them."""
        config, profile = self._sub.config, self._profiles[layer]
        rerun = int(mode is not RecomputeMode.NONE)
        if config.cp == 1:
            return []
        if self._training.cp_comm is CpComm.A2A:
            if profile.cp_a2a_bytes == 0:
                return []
            return [(("a2a", profile.cp_a2a_bytes, 0), 4 + 2 * rerun)]
        if profile.cp_kv_bytes == 0:
            return []

        def step(attention_s: float) -> int:
            return ceil_div(to_ticks(exact(attention_s), self.tick_s), config.cp)
        return [(("p2p", profile.cp_kv_bytes, step(profile.attn_fwd_s)), 1 + rerun),
                (("p2p", 2 * profile.cp_kv_bytes, step(profile.attn_bwd_s)), 1)]

    def context_piece(self, option: ChunkOption, signature: tuple, path: Path | None) -> int:
        """The span's context communication of one signature on one ring pair's (p2p) or CP
        group's (a2a) path.  A stage replica pays, per signature, its slowest pair (group):
        the price grows with the transfer (all-to-all) time, so the slowest for one layer of
        a signature is the slowest for all of them, and the sum over signatures of these
        maxima is :meth:`context` on the replica's paths."""
        if path is None:
            return 0

        def price() -> int:
            count = sum(times for layer in option.layers
                        for piece, times in self._context_pieces(layer, option.mode)
                        if piece == signature)
            if count == 0:
                return 0
            kind, volume, step = signature
            if kind == "a2a":
                return count * collective_ticks(CollectiveKind.ALL_TO_ALL, volume,
                                                self._sub.config.cp, path, self.tick_s)
            return count * (self._sub.config.cp - 1) * max(
                0, cost.transfer_ticks(volume, path, self.tick_s) - step)
        return self._cached(("context piece", signature), option, path, price)

    def context_group_size(self) -> int:
        """The ranks one priced piece of the context communication spans: a pair of
        consecutive ring ranks under p2p, the whole CP group of c ranks under a2a; 1 (no
        communication) for c = 1."""
        cp = self._sub.config.cp
        if cp == 1:
            return 1
        return 2 if self._training.cp_comm is CpComm.P2P else cp

    def cheapest_context(self, option: ChunkOption, paths: list[Path]) -> int:
        """The least :meth:`context` of the span over one-path CP groups, one per candidate
        in ``paths`` (each the path a ring pair (p2p) or a CP group (a2a) may have).

        A lower bound on the span's context price on any stage replica: per layer and
        direction the evaluator charges the slowest ring pair (or CP group), at least the
        charge on one fixed pair q (group) of the replica, a price that grows with q's
        transfer (all-to-all) time; summed over layers with the same q it is
        :meth:`context` on ContextPaths((q,), (q,)), at least its least over candidates
        holding q's path."""
        return min((self.context(option, cost.ContextPaths((path,), (path,)))
                    for path in paths), default=0)

    # ------------------------------------------------------------ collectives

    def collective_groups(self) -> tuple[CollectiveGroup, ...]:
        """Group kinds with a collective in some layer and a group of two ranks or more."""
        config = self._sub.config
        return tuple(group for group in CollectiveGroup
                     if cost.group_size(group, config) > 1
                     and any(c.group is group for p in self._profiles for c in p.collectives))

    def collective_classes(self, group: CollectiveGroup, groups_per_replica: int,
                           candidates: list[Path]) -> tuple[CollectiveClass, ...]:
        """The classes of the group kind's collectives (module docstring)."""
        if groups_per_replica == 1 or _totally_ordered(candidates):
            return (CollectiveClass(group, ALL),)
        signatures = sorted({(c.kind.value, c.volume_bytes) for p in self._profiles
                             for c in p.collectives if c.group is group})
        kinds = {c.kind.value: c.kind for p in self._profiles for c in p.collectives}
        return tuple(CollectiveClass(group, (kinds[kind], volume)) for kind, volume in signatures)

    def collectives(self, option: ChunkOption, klass: CollectiveClass, path: Path | None) -> int:
        """The class's collectives of the span on one group's path, each rounded once; under
        full recomputation the forward ones twice (the rerun forward repeats them)."""
        if path is None:
            return 0
        config = self._sub.config
        paths = cost.GroupPaths((path,), (path,))

        def price() -> int:
            total = 0
            for layer in option.layers:
                for collective in self._profiles[layer].collectives:
                    if klass.holds(collective):
                        once = cost.intra_collective_ticks(collective, config, paths,
                                                           self.tick_s)
                        repeats = 2 if (option.mode is RecomputeMode.FULL
                                        and collective.phase is Phase.FWD) else 1
                        total += repeats * once
            return total
        return self._cached(("coll", klass), option, path, price)

    def tp_collectives(self, option: ChunkOption, paths: cost.GroupPaths) -> int:
        """The span's TP collectives on a stage replica whose TP groups have ``paths.tp``, as
        the evaluator prices them: per layer and direction each on its slowest group, their
        sum hidden behind the layer's compute where ``tp_comm_overlap`` applies
        (``paths.tp_local``, cost model §5 e); under full recomputation the forward ones
        twice (the rerun forward repeats them, hidden the same way)."""
        config = self._sub.config
        tp_only = cost.GroupPaths(paths.tp, (), paths.tp_local)  # EP is priced on its own
        hides = self.overlaps_tp and paths.tp_local

        def price() -> int:
            total = 0
            for layer in option.layers:
                profile = self._profiles[layer]
                hiding = cost.compute_ticks(profile, self.tick_s) if hides else None
                phases = (None, Phase.FWD) if option.mode is RecomputeMode.FULL else (None,)
                total += sum(cost.layer_collective_ticks(profile, config, tp_only, self.tick_s,
                                                         phase, hiding) for phase in phases)
            return total
        return self._cached("tp", option, tp_only, price)

    def cheapest_collectives(self, option: ChunkOption, candidates: dict,
                             local_tp: Path | None = None) -> int:
        """Every collective of the span on the cheapest path a group of its size can have;
        with ``local_tp`` (the path of a TP group inside a tier-0 domain, where
        ``tp_comm_overlap`` applies: cost model §5 e) at most its EP collectives so priced
        plus its TP collectives overlapped on that path, a stage replica's price when its TP
        groups are local.  ``candidates``: paths by group size, so :meth:`collectives_on`
        with each kind's size's paths."""
        config = self._sub.config
        return self.collectives_on(option, {
            kind: candidates.get(cost.group_size(kind, config), []) for kind in CollectiveGroup},
            local_tp)

    def collectives_on(self, option: ChunkOption, paths_by_group: dict,
                       local_tp: Path | None = None) -> int:
        """The span's collectives of each group kind on the cheapest of
        ``paths_by_group[kind]``; with ``local_tp`` (the tier-0 path of TP groups that all lie
        in tier-0 domains) at most its EP collectives so priced plus its TP collectives
        overlapped there (cost model §5 e), as :meth:`cheapest_collectives`."""
        config = self._sub.config

        def on(kind: CollectiveGroup) -> int:
            return self._cheapest(option, {cost.group_size(kind, config):
                                           paths_by_group.get(kind, [])}, (kind,))
        expert = on(CollectiveGroup.EP)
        plain = on(CollectiveGroup.TP) + expert
        if local_tp is None:
            return plain
        local = cost.GroupPaths((local_tp,), (), tp_local=True)
        return min(plain, expert + self.tp_collectives(option, local))

    def _cheapest(self, option: ChunkOption, candidates: dict,
                  kinds: tuple[CollectiveGroup, ...]) -> int:
        """The span's collectives of group ``kinds``, each on the cheapest candidate path
        (summed per layer: each collective is rounded alone, so the sum is the same)."""
        key = (kinds, tuple((size, tuple(paths)) for size, paths in candidates.items()))
        full = option.mode is RecomputeMode.FULL
        total = 0
        for layer in option.layers:
            forward, other = self._layer_cheapest(layer, key, candidates, kinds)
            total += (2 if full else 1) * forward + other
        return total

    def _layer_cheapest(self, layer: int, key: tuple, candidates: dict,
                        kinds: tuple[CollectiveGroup, ...]) -> tuple[int, int]:
        """One layer's collectives of ``kinds`` on their cheapest candidates: (forward ones,
        the others), memoised by ``key`` (the kinds and candidates)."""
        memo_key = ("layer", layer, key)
        if memo_key not in self._memo:
            config = self._sub.config
            forward = other = 0
            for collective in self._profiles[layer].collectives:
                size = cost.group_size(collective.group, config)
                paths = candidates.get(size, [])
                if collective.group not in kinds or size <= 1 or not paths:
                    continue
                once = min(cost.intra_collective_ticks(collective, config,
                                                       cost.GroupPaths((p,), (p,)), self.tick_s)
                           for p in paths)
                if collective.phase is Phase.FWD:
                    forward += once
                else:
                    other += once
            self._memo[memo_key] = (forward, other)
        return self._memo[memo_key]

    # ------------------------------------------------------------ pipeline, ZeRO-3

    def transfer(self, option: ChunkOption, path: Path | None) -> int:
        """One point-to-point transfer of the span's last layer output on a pair's path."""
        if path is None:
            return 0
        volume = self._profiles[option.last_layer].out_bytes
        return self._cached("p2p", option, path, lambda: cost.transfer_ticks(
            volume, path, self.tick_s))

    def transfer_into(self, option: ChunkOption, path: Path | None) -> int:
        """The transfer of the output of the layer before the span (the activation in)."""
        if path is None or option.first_layer == 0:
            return 0
        boundary = ChunkOption(option.first_layer - 1, option.first_layer - 1, option.mode)
        return self.transfer(boundary, path)

    def zero_gather(self, option: ChunkOption, path: Path | None) -> int:
        """ZeRO-3 all-gathers (fwd and bwd) of the chunk's parameters over the d·c ranks of
        one shard group (the d replicas and c context ranks of one tensor and expert index)."""
        if self._sub.zero != 3:
            return 0
        return self._cached("gather", option, path, lambda: cost.zero3_gather_ticks(
            self.params(option), self._training.optimizer, self.shard_size(), path,
            self.tick_s))

    # ------------------------------------------------------------ gradient sync

    def dense_sync_size(self) -> int:
        """Ranks of one dense sync group: the d·e·c ranks of one tensor index."""
        return self._sub.dp * self._sub.config.ep * self._sub.config.cp

    def shard_size(self) -> int:
        """Ranks of one shard group (expert sync, ZeRO shards and gathers): the d·c ranks of
        one tensor and expert index (DESIGN §3.4: the context ranks hold the same
        parameters)."""
        return self._sub.dp * self._sub.config.cp

    @property
    def gathers_weights(self) -> bool:
        """Whether a sync ends with an all-gather of the weights (ZeRO 1 and 2)."""
        return cost.gathers_weights(self._sub.zero)

    def dense_sync(self, option: ChunkOption, path: Path | None, phase: int = REDUCE) -> int:
        """One phase (REDUCE or GATHER) of the gradient sync of the span's dense parameters
        over the d·e·c ranks of one t index (the stage's when the span is the whole stage)."""
        return self._sync_parts(self.dense_params(option), self.dense_sync_size(), path)[phase]

    def expert_sync(self, option: ChunkOption, path: Path | None, phase: int = REDUCE) -> int:
        """One phase of the gradient sync of the span's expert parameters over the d·c ranks
        of one tensor and expert index."""
        return self._sync_parts(self.expert_params(option), self.shard_size(), path)[phase]

    def _sync_parts(self, params: int, group_size: int, path: Path | None) -> tuple[int, int]:
        """Both phases of a gradient sync of ``params`` parameters, memoised by the count (the
        spans of one layer range share it whatever their recompute mode)."""
        key = ("sync", params, group_size, path)
        if key not in self._memo:
            self._memo[key] = cost.gradient_sync_parts(
                params, self._training.optimizer, self._sub.zero, group_size, path,
                self.tick_s)
        return self._memo[key]

    def sync_of(self, params: int, group_size: int, path: Path | None) -> int:
        """One whole gradient sync (both phases) of ``params`` parameters over ``group_size``
        ranks on ``path``."""
        return cost.gradient_sync_ticks(params, self._training.optimizer, self._sub.zero,
                                        group_size, path, self.tick_s)

    def sync_ticks(self, group_size: int, path: Path | None,
                   phase: int = REDUCE) -> Affine | None:
        """The unrounded ticks of one phase of a gradient sync of P parameters over
        ``group_size`` ranks on ``path`` as slope·P + offset (P > 0); None when that phase is
        always free.

        ``nest_cp.cost.terms.gradient_sync_parts(...)[phase]`` is ⌈slope·P + offset⌉ for
        P > 0 and 0 for P = 0 (each collective is affine in its volume: P·grad bytes for
        the gradient phase, P·weight bytes for the gather).
        """
        if path is None or group_size <= 1 or (phase == GATHER and not self.gathers_weights):
            return None
        optimizer = self._training.optimizer
        kind, per_param = ((cost.sync_collective(self._sub.zero), optimizer.grad_bytes)
                           if phase == REDUCE
                           else (CollectiveKind.ALL_GATHER, optimizer.weight_bytes))
        tick = exact(self.tick_s)
        offset = collective_seconds(kind, 0, group_size, path) / tick
        slope = collective_seconds(kind, per_param, group_size, path) / tick - offset
        return Affine(slope, offset)

    def _cached(self, term, option: ChunkOption, path: Path | None, price) -> int:
        key = (term, option, path)
        if key not in self._memo:
            self._memo[key] = price()
        return self._memo[key]


@dataclass(frozen=True, slots=True)
class StageRounding:
    """⌈Σ_k x(o_k) + c·[nonzero]⌉ split into integer floors and a fractional carry.

    ``floors[option]`` = ⌊x(option)⌋ and ``fractions[option]`` = D·frac(x(option)),
    ``constant_floor`` = ⌊c⌋ and ``constant_fraction`` = D·frac(c), all integers; the
    carry is ⌈(Σ fractions + constant_fraction) / D⌉ ≤ number of chunks + 1.
    """

    floors: dict
    fractions: dict
    constant_floor: int
    constant_fraction: int
    denominator: int

    @classmethod
    def of(cls, values: dict, constant: Fraction = Fraction(0)) -> StageRounding:
        """The split for ``values[option]`` = x(option) (Fractions) and constant c."""
        denominator = math.lcm(*(Fraction(x).denominator for x in values.values()),
                               Fraction(constant).denominator)
        floors = {option: math.floor(x) for option, x in values.items()}
        fractions = {option: int((x - math.floor(x)) * denominator)
                     for option, x in values.items()}
        return cls(floors, fractions, math.floor(constant),
                   int((constant - math.floor(constant)) * denominator), denominator)

    @property
    def needs_carry(self) -> bool:
        return any(self.fractions.values()) or self.constant_fraction > 0


def _totally_ordered(paths: list[Path]) -> bool:
    """Whether one of every two paths is at least as fast in bandwidth and latency."""
    ordered = sorted(set(paths), key=lambda p: (-p.bandwidth_Bps, p.latency_s))
    return all(slow.latency_s >= fast.latency_s for fast, slow in zip(ordered, ordered[1:],
                                                                     strict=False))
