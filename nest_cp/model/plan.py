"""The plan (DESIGN §2, §3.2 b) and the rank layouts of the structured space (DESIGN §4, v2).

A rank is (stage s, replica r, intra-stage rank j) with j = t_index + tp * c_index +
tp * cp * e_index (how a stage replica numbers its ranks, Megatron's tp-cp-ep order; where
they sit is the layout's business).  The rank layouts order (t, e, stage, replica) only:
they place plans with c = 1.
``Plan.placement[s][r][j]`` is its device id.

With v virtual stages (interleaved 1F1B) the layers are split into S·v chunks;
``Plan.stages`` lists the chunks in layer order and chunk k runs on pipeline stage
k mod S.  With v = 1 (the default) a chunk is a stage.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from dataclasses import dataclass
from enum import Enum

import numpy as np

from nest_cp.model.errors import InstanceFormatError
from nest_cp.model.instance import IntraConfig, RecomputeMode, SdpLevel, SdpMasking, Strategy


@dataclass(frozen=True, slots=True)
class Stage:
    """A contiguous run of layers ``first_layer..last_layer`` (inclusive): one pipeline
    stage, or with v > 1 one chunk of a stage, and that stage's recomputation mode."""

    first_layer: int
    last_layer: int
    recompute: RecomputeMode = RecomputeMode.NONE

    def __post_init__(self) -> None:
        if not isinstance(self.recompute, RecomputeMode):
            raise InstanceFormatError(
                "expected one of " + ", ".join(repr(m.value) for m in RecomputeMode)
                + f", got {self.recompute!r}", field="recompute")

    @property
    def layers(self) -> range:
        return range(self.first_layer, self.last_layer + 1)


Placement = tuple[tuple[tuple[int, ...], ...], ...]


@dataclass(frozen=True, slots=True)
class SdpMask:
    """The SDP part of a plan (DESIGN §7): level, masking, h and the units each worker holds.

    ``mask[w]`` lists the units worker (replica) w holds, numbered in layer order (a
    layer's width slices consecutively at neuron level).  Whether the mask is valid for
    the instance (every unit held by exactly h workers, balanced rows) is the evaluator's
    question, so that a bad mask is reported naming its field.
    """

    level: SdpLevel
    masking: SdpMasking
    holders: int
    mask: tuple[tuple[int, ...], ...]

    def __post_init__(self) -> None:
        if not isinstance(self.level, SdpLevel):
            raise InstanceFormatError(f"expected 'block' or 'neuron', got {self.level!r}",
                                      field="level")
        if not isinstance(self.masking, SdpMasking):
            raise InstanceFormatError(f"expected 'forward' or 'backward', got "
                                      f"{self.masking!r}", field="masking")
        if not (isinstance(self.holders, int) and self.holders >= 1):
            raise InstanceFormatError(f"expected an integer >= 1, got {self.holders!r}",
                                      field="holders")

    @property
    def workers(self) -> int:
        return len(self.mask)


@dataclass(frozen=True, slots=True)
class Plan:
    """Every choice of DESIGN §2; ``placement`` None means the default Megatron layout.

    ``stages`` are the S·v chunks in layer order (the S stages when v = 1): chunk k runs
    on stage k mod S, and all chunks of a stage carry the stage's recompute mode.
    ``placement[s]`` indexes the S pipeline stages.
    """

    config: IntraConfig
    microbatch: int
    zero: int
    num_replicas: int  # d, the data-parallel degree ("dp" in plan files)
    stages: tuple[Stage, ...]
    placement: Placement | None = None
    virtual_stages: int = 1  # v of interleaved 1F1B; 1 = plain 1F1B
    strategy: Strategy = Strategy.DP  # SDP plans carry their mask in ``sdp`` (DESIGN §7)
    sdp: SdpMask | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.strategy, Strategy):
            raise InstanceFormatError(f"expected 'dp' or 'sdp', got {self.strategy!r}",
                                      field="strategy")
        if (self.strategy is Strategy.SDP) != (self.sdp is not None):
            raise InstanceFormatError(
                "expected an 'sdp' section exactly when the strategy is 'sdp', got "
                + ("none" if self.sdp is None else f"one with strategy {self.strategy.value!r}"),
                field="sdp")
        if not (isinstance(self.microbatch, int) and self.microbatch >= 1):
            raise InstanceFormatError(f"expected an integer >= 1, got {self.microbatch!r}",
                                      field="microbatch")
        if self.zero not in (0, 1, 2, 3):
            raise InstanceFormatError(f"expected a ZeRO stage in 0..3, got {self.zero!r}",
                                      field="zero")
        if not (isinstance(self.num_replicas, int) and self.num_replicas >= 1):
            raise InstanceFormatError(f"expected an integer >= 1, got {self.num_replicas!r}",
                                      field="dp")
        if not (isinstance(self.virtual_stages, int) and not isinstance(self.virtual_stages, bool)
                and self.virtual_stages >= 1):
            raise InstanceFormatError(f"expected an integer >= 1, got {self.virtual_stages!r}",
                                      field="virtual_stages")
        if not self.stages:
            raise InstanceFormatError("expected at least one stage, got []", field="stages")

    @property
    def num_stages(self) -> int:
        """S, the pipeline depth: len(stages) // v (the evaluator rejects a remainder)."""
        return len(self.stages) // self.virtual_stages

    @property
    def num_chunks(self) -> int:
        """S·v, the number of entries of ``stages``."""
        return len(self.stages)

    def stage_of_chunk(self, chunk: int) -> int:
        """The pipeline stage chunk ``chunk`` runs on: chunk mod S."""
        return chunk % self.num_stages

    def chunks_of_stage(self, stage: int) -> tuple[int, ...]:
        """Indices into ``stages`` of the chunks stage ``stage`` runs, in layer order."""
        return tuple(range(stage, self.num_chunks, self.num_stages))

    def stage_layers(self, stage: int) -> tuple[int, ...]:
        """Every layer pipeline stage ``stage`` holds (all its chunks), in layer order."""
        return tuple(layer for chunk in self.chunks_of_stage(stage)
                     for layer in self.stages[chunk].layers)

    def stage_recompute(self, stage: int) -> RecomputeMode:
        """The recompute mode of pipeline stage ``stage`` (that of its first chunk)."""
        return self.stages[stage].recompute

    @property
    def devices_per_replica(self) -> int:
        return self.config.devices

    @property
    def num_devices_used(self) -> int:
        return self.config.devices * self.num_stages * self.num_replicas

    def with_placement(self, placement: Placement) -> Plan:
        return dataclasses.replace(self, placement=placement)


def rank_index(config: IntraConfig, tensor: int, context: int, expert: int) -> int:
    """Intra-stage rank j = t_index + t·c_index + t·c·e_index (Megatron's tp-cp-ep order)."""
    return tensor + config.tp * (context + config.cp * expert)


def tensor_groups(config: IntraConfig) -> tuple[tuple[int, ...], ...]:
    """Intra-stage ranks j of each TP group: the t ranks sharing a context and an expert index
    (DESIGN §3.2 f), one group per (expert, context) index."""
    return tuple(tuple(rank_index(config, t, c, e) for t in range(config.tp))
                 for e in range(config.ep) for c in range(config.cp))


def expert_groups(config: IntraConfig) -> tuple[tuple[int, ...], ...]:
    """Intra-stage ranks j of each EP group: the e ranks sharing a tensor and a context index
    (DESIGN §3.2 f), one group per (context, tensor) index."""
    return tuple(tuple(rank_index(config, t, c, e) for e in range(config.ep))
                 for c in range(config.cp) for t in range(config.tp))


def context_groups(config: IntraConfig) -> tuple[tuple[int, ...], ...]:
    """Intra-stage ranks j of each CP group, in ring order (c_index 0, 1, ..., c − 1, then
    the wrap back to 0): the c ranks sharing a tensor and an expert index, one group per
    (expert, tensor) index."""
    return tuple(tuple(rank_index(config, t, c, e) for c in range(config.cp))
                 for e in range(config.ep) for t in range(config.tp))


def contiguous_placement(config: IntraConfig, num_stages: int, dp: int,
                         device_order: tuple[int, ...] | list[int]) -> Placement:
    """Megatron's default layout (t, c, e, replica, stage from innermost) for any c: rank
    (s, r, j) on the device at position j + a·(r + d·s) of ``device_order``, a = t·c·e.

    For c = 1 this is ``MEGATRON_LAYOUT.placement``; the rank layouts of the structured
    space do not order a context dimension yet, so plans with c > 1 default to this one.
    """
    size = config.devices
    return tuple(tuple(tuple(device_order[j + size * (r + dp * s)] for j in range(size))
                       for r in range(dp)) for s in range(num_stages))


class Dim(str, Enum):
    """The four rank dimensions a layout orders."""

    TP = "t"
    EP = "e"
    STAGE = "stage"
    REPLICA = "replica"


@dataclass(frozen=True, slots=True)
class NodeTail:
    """Structured space v3c (docs/certificates.md): the last m = n_0 / a stages of every
    replica fill one tier-0 domain (a *node tail*), the r = S − m stages before them run
    elsewhere, packed so that no run straddles a tier-1 domain.

    Rank (s, r, j) with a = t·e dividing n_0 and S > m:

    - a *head* stage s < r sits in its replica's head run, the a·r positions
      j + a·s from the run's start; the runs are numbered by replica and grouped into
      blocks of q = lcm(a·r, n_0) / (a·r) runs (b = lcm / n_0 whole nodes); each tier-1
      domain holds c = ⌊n_1 / b⌋ blocks at its start (n_1 nodes per tier-1 domain), so
      run ρ lies in domain ⌊β / c⌋, block β = ⌊ρ / q⌋;
    - a *tail* stage s >= r sits at j + a·(s − r) in the node of its replica's tail: the
      ρ-th node, in increasing order, that holds no head block.

    So hops inside a tail stay in a node, those inside a head run cross a node only at a
    node boundary of its block and never a tier-1 domain, and the one hop from head to
    tail goes wherever the tail's node is.  It applies (:meth:`positions` not None) where
    a divides n_0, S > m, b <= n_1 and the nodes left after the head blocks hold d
    tails; elsewhere the layout places as its order alone.

    ``node_size`` n_0, ``domain_nodes`` n_1 and ``num_nodes`` N / n_0 are the network's
    (:func:`structured_layouts` fills them from its digit radices).
    """

    node_size: int
    domain_nodes: int
    num_nodes: int

    def __post_init__(self) -> None:
        for field_name in ("node_size", "domain_nodes", "num_nodes"):
            value = getattr(self, field_name)
            if not (isinstance(value, int) and not isinstance(value, bool) and value >= 1):
                raise ValueError(f"expected {field_name} >= 1, got {value!r}")

    def packing(self, config: IntraConfig, num_stages: int,
                dp: int) -> tuple[int, int, int, int] | None:
        """(r, q, b, c) of the class docstring at this shape: head stages, runs per block,
        nodes per block, blocks per tier-1 domain; None where the node tail does not apply
        (a ∤ n_0, S <= m, b > n_1, or too few nodes left for the d tails)."""
        width, node = config.devices, self.node_size
        if node % width or num_stages <= node // width:
            return None
        head = num_stages - node // width
        run = width * head
        block = run * node // math.gcd(run, node)  # lcm: whole nodes, whole runs
        runs_per_block, block_nodes = block // run, block // node
        per_domain = self.domain_nodes // block_nodes
        if per_domain < 1:
            return None
        blocks = -(-dp // runs_per_block)
        last = blocks - 1  # the head blocks end inside the network, the tails fit after them
        end = (last // per_domain) * self.domain_nodes + (last % per_domain + 1) * block_nodes
        if end > self.num_nodes or self.num_nodes - blocks * block_nodes < dp:
            return None
        return head, runs_per_block, block_nodes, per_domain

    def positions(self, config: IntraConfig, num_stages: int, dp: int) -> np.ndarray | None:
        """positions[stage, replica, rank] of the node-tail placement, an (S, d, a) int64
        array; None where it does not apply (:meth:`packing`)."""
        start = self.starts(config, num_stages, dp)
        if start is None:
            return None
        return start[:, :, None] + np.arange(config.devices, dtype=np.int64)[None, None, :]

    def starts(self, config: IntraConfig, num_stages: int, dp: int) -> np.ndarray | None:
        """starts[stage, replica]: the position of rank 0 of each stage replica, an (S, d)
        int64 array (rank j sits at start + j); None where the tail does not apply."""
        packing = self.packing(config, num_stages, dp)
        if packing is None:
            return None
        head, runs_per_block, block_nodes, per_domain = packing
        width, node = config.devices, self.node_size
        blocks = np.arange(-(-dp // runs_per_block), dtype=np.int64)
        first_nodes = (blocks // per_domain) * self.domain_nodes \
            + (blocks % per_domain) * block_nodes
        used = np.zeros(self.num_nodes, dtype=bool)
        used[(first_nodes[:, None] + np.arange(block_nodes)).ravel()] = True
        tail_nodes = np.flatnonzero(~used)[:dp]
        replica = np.arange(dp, dtype=np.int64)
        head_start = first_nodes[replica // runs_per_block] * node \
            + (replica % runs_per_block) * width * head
        stage = np.arange(num_stages, dtype=np.int64)
        start = np.where(stage[:, None] < head, head_start[None, :],
                         tail_nodes[None, :] * node)  # [stage, replica]
        within = np.where(stage < head, stage, stage - head) * width
        return start + within[:, None]


def gathered_end_starts(config: IntraConfig, num_stages: int,
                        dp: int) -> tuple[np.ndarray, np.ndarray]:
    """(start, stride), two (S,) int64 arrays, of gathered ends (structured space v3d):
    replica r of stage s starts at position start[s] + stride[s]·r, and its rank j is j
    positions further on (:func:`gathered_end_positions`). With a = t·e:

    - the first stage starts at 0, stride a (its d replicas side by side, [0, a·d));
    - a middle stage 0 < s < S − 1 at a·d + a·(s − 1), stride a·(S − 2) (each replica's
      S − 2 middle stages consecutive, replica after replica);
    - the last stage at a·d·(S − 1), stride a.

    So the two end stages, which have one pipeline neighbour each, keep their data-parallel
    groups as compact as Megatron's order does, and each middle stage's two neighbours are
    beside it as in NEST's order (S >= 2)."""
    width = config.devices
    stage = np.arange(num_stages, dtype=np.int64)
    ends = (stage == 0) | (stage == num_stages - 1)
    start = np.where(stage == 0, 0, np.where(
        stage == num_stages - 1, width * dp * (num_stages - 1),
        width * dp + width * (stage - 1)))
    stride = np.where(ends, width, width * (num_stages - 2))
    return start, stride


def gathered_end_positions(config: IntraConfig, num_stages: int, dp: int) -> np.ndarray:
    """positions[stage, replica, rank] of gathered ends, an (S, d, t·e) int64 array: rank
    (s, r, j) at start[s] + stride[s]·r + j (:func:`gathered_end_starts`)."""
    start, stride = gathered_end_starts(config, num_stages, dp)
    replica = np.arange(dp, dtype=np.int64)[None, :]
    first = start[:, None] + stride[:, None] * replica  # [stage, replica]
    return first[:, :, None] + np.arange(config.devices, dtype=np.int64)[None, None, :]


@dataclass(frozen=True, slots=True)
class RankLayout:
    """An order of the rank dimensions (t, e, stage, replica) from innermost to outermost,
    and the device order its positions are read through.

    Structured space v2 (DESIGN §4): any of the 24 orders, tensor ranks innermost or not,
    on the canonical device order.  Structured space v3a (docs/certificates.md) adds, on a
    hierarchical network of three tiers or more:

    - ``digits`` (a device order δ): the tiers above tier 0, innermost first, in the order a
      position's mixed-radix digits fill their indices (:func:`digit_device_order`); () is
      the canonical order (ids 0..N−1), e.g. (2, 1) sends consecutive node blocks to
      different tier-1 domains;
    - ``spare_first``: the positions shifted by the largest multiple of the node size that
      fits (:meth:`offset`), so the spare devices lie at the start instead of the end.

    Structured space v3b-R (docs/certificates.md) adds replica blocks:

    - ``replica_block`` k: the replica index splits as r = r_in + k·r_out; r_in (radix k)
      takes the replica's place in ``order`` and r_out (radix d / k) is outermost, so
      ``t,e,replica,stage`` with k = 2 puts two replicas of a stage side by side, then the
      next stage.  It applies where k divides d and 1 < k < d (:meth:`block`); elsewhere the
      layout places as the one without it.

    Structured space v3c (docs/certificates.md) adds node tails:

    - ``node_tail`` (:class:`NodeTail`): the last n_0 / a stages of each replica fill one
      node, the stages before them run in blocks packed into tier-1 domains; only on
      ``t,e,stage,replica``, the canonical device order, spare devices last, no replica
      block.  Where it does not apply the layout places as its order alone.

    Structured space v3d (docs/certificates.md) adds gathered ends:

    - ``gathered_ends``: the first and the last stage keep their d replicas side by side
      (replica-inner, as ``t,e,replica,stage``), the stages between them run replica by
      replica (stage-inner, as ``t,e,stage,replica``) in the positions between
      (:func:`gathered_end_positions`); only on ``t,e,stage,replica``, the canonical
      device order, spare last, no replica block, no node tail.  It applies where S >= 4
      and d >= 2 (:meth:`ends_gathered`; with S <= 3 it would place as
      ``t,e,replica,stage``, with d = 1 as its order); elsewhere it places as its order
      alone.

    ``name`` shows them all: ``t,e,replica,stage``, ``t,e,replica,stage@021``,
    ``t,e,stage,replica@021/spare-first``, ``t,e,replica,stage@021/replicas-of-2``,
    ``t,e,stage,replica/node-tail``, ``t,e,stage,replica/gathered-ends``.
    """

    order: tuple[Dim, ...]
    digits: tuple[int, ...] = ()
    spare_first: bool = False
    replica_block: int = 1
    node_tail: NodeTail | None = None
    gathered_ends: bool = False

    def __post_init__(self) -> None:
        if len(self.order) != len(Dim) or set(self.order) != set(Dim):
            raise ValueError(f"expected an order of t, e, stage, replica (each once), "
                             f"got {[getattr(d, 'value', d) for d in self.order]}")
        if sorted(self.digits) != list(range(1, len(self.digits) + 1)):
            raise ValueError(f"expected a permutation of the tiers 1..L-1, got {self.digits}")
        if self.digits == tuple(sorted(self.digits)):  # the identity is the canonical order
            object.__setattr__(self, "digits", ())
        if not (isinstance(self.replica_block, int) and not isinstance(self.replica_block, bool)
                and self.replica_block >= 1):
            raise ValueError(f"expected a replica block k >= 1, got {self.replica_block!r}")
        if self.node_tail is not None and (
                self.order != (Dim.TP, Dim.EP, Dim.STAGE, Dim.REPLICA) or self.digits
                or self.spare_first or self.replica_block != 1):
            raise ValueError(f"expected a node tail only on t,e,stage,replica (canonical "
                             f"device order, spare last, no replica block), got {self.name}")
        if self.gathered_ends and (
                self.order != (Dim.TP, Dim.EP, Dim.STAGE, Dim.REPLICA) or self.digits
                or self.spare_first or self.replica_block != 1 or self.node_tail is not None):
            raise ValueError(f"expected gathered ends only on t,e,stage,replica (canonical "
                             f"device order, spare last, no replica block or node tail), "
                             f"got {self.name}")

    @property
    def name(self) -> str:
        text = ",".join(dim.value for dim in self.order)
        if self.digits:
            text += "@0" + "".join(map(str, self.digits))
        text += "/spare-first" if self.spare_first else ""
        text += f"/replicas-of-{self.replica_block}" if self.replica_block > 1 else ""
        text += "/node-tail" if self.node_tail is not None else ""
        return text + ("/gathered-ends" if self.gathered_ends else "")

    @property
    def base(self) -> RankLayout:
        """The v2 layout of the same order (canonical device order, spare devices last)."""
        return RankLayout(self.order)

    def block(self, config: IntraConfig, num_stages: int, dp: int) -> int:
        """The replica block k in effect at this shape: ``replica_block`` where it divides d,
        1 < k < d, and a dimension of radix > 1 lies outside the replica in ``order`` (else
        r_in and r_out are adjacent digits and the split moves nothing); 1 otherwise."""
        k = self.replica_block
        if k == 1 or not 1 < k < dp or dp % k:
            return 1
        radix = {Dim.TP: config.tp, Dim.EP: config.ep, Dim.STAGE: num_stages}
        outer = self.order[self.order.index(Dim.REPLICA) + 1:]
        return k if any(radix[dim] > 1 for dim in outer) else 1

    def tailed(self, config: IntraConfig, num_stages: int, dp: int) -> bool:
        """Whether the node tail applies at this shape (:meth:`NodeTail.packing`)."""
        return self.node_tail is not None and \
            self.node_tail.packing(config, num_stages, dp) is not None

    def tail_positions(self, config: IntraConfig, num_stages: int,
                       dp: int) -> np.ndarray | None:
        """The positions of the node tail at this shape (:meth:`NodeTail.positions`); None
        without one or where it does not apply (the order alone places then)."""
        if self.node_tail is None:
            return None
        return self.node_tail.positions(config, num_stages, dp)

    def ends_gathered(self, config: IntraConfig, num_stages: int, dp: int) -> bool:
        """Whether gathered ends apply at this shape: S >= 4 and d >= 2 (below that their
        definition places as ``t,e,replica,stage`` or, with d = 1, as the order alone)."""
        return self.gathered_ends and num_stages >= 4 and dp >= 2

    def arrayed(self, config: IntraConfig, num_stages: int, dp: int) -> bool:
        """Whether the positions at this shape come from an array with no stride form: a
        node tail (:meth:`tailed`) or gathered ends (:meth:`ends_gathered`) in effect."""
        return self.tailed(config, num_stages, dp) or \
            self.ends_gathered(config, num_stages, dp)

    def array_positions(self, config: IntraConfig, num_stages: int,
                        dp: int) -> np.ndarray | None:
        """The positions of a node tail or of gathered ends at this shape; None where
        neither is in effect (the order alone places then)."""
        if self.ends_gathered(config, num_stages, dp):
            return gathered_end_positions(config, num_stages, dp)
        return self.tail_positions(config, num_stages, dp)

    def offset(self, config: IntraConfig, num_stages: int, dp: int, num_devices: int,
               node: int) -> int:
        """The first position used: 0, or with ``spare_first`` the largest multiple of the
        node size ``node`` that leaves room for the a·S·d positions of the layout."""
        if not self.spare_first:
            return 0
        return node * ((num_devices - config.devices * num_stages * dp) // node)

    def position(self, stage, replica, rank, config: IntraConfig, num_stages: int, dp: int):
        """Mixed-radix position of rank (stage, replica, rank) in this layout's order
        (without the offset of :meth:`offset`).

        ``stage``, ``replica`` and ``rank`` are ints, or integer numpy arrays that broadcast
        together (the DP places whole stages at once); the result has their shape.
        """
        tail = self.array_positions(config, num_stages, dp)
        if tail is not None:
            found = tail[stage, replica, rank]
            return int(found) if np.ndim(found) == 0 else found
        block = self.block(config, num_stages, dp)
        digits = {Dim.TP: rank % config.tp, Dim.EP: rank // config.tp,
                  Dim.STAGE: stage, Dim.REPLICA: replica % block if block > 1 else replica}
        radix = {Dim.TP: config.tp, Dim.EP: config.ep, Dim.STAGE: num_stages,
                 Dim.REPLICA: block if block > 1 else dp}
        position, weight = 0, 1
        for dim in self.order:
            position = position + digits[dim] * weight
            weight *= radix[dim]
        if block > 1:  # r_out, outermost
            position = position + (replica // block) * weight
        return position

    def positions(self, config: IntraConfig, num_stages: int, dp: int) -> np.ndarray:
        """positions[stage, replica, rank]: every rank's position, an (S, d, t·e) int64 array
        (without the offset of :meth:`offset`)."""
        tail = self.array_positions(config, num_stages, dp)
        if tail is not None:
            return tail
        return self.position(np.arange(num_stages, dtype=np.int64)[:, None, None],
                             np.arange(dp, dtype=np.int64)[None, :, None],
                             np.arange(config.devices, dtype=np.int64)[None, None, :],
                             config, num_stages, dp)

    def devices(self, config: IntraConfig, num_stages: int, dp: int,
                device_order: np.ndarray, node: int = 1) -> np.ndarray:
        """devices[stage, replica, rank] of the placement on ``device_order`` — the device
        order this layout reads its positions through (:func:`layout_device_order`); ``node``
        is the tier-0 domain size the ``spare_first`` offset counts in."""
        order = np.asarray(device_order, dtype=np.int64)
        offset = self.offset(config, num_stages, dp, len(order), node)
        return order[self.positions(config, num_stages, dp) + offset]

    def placement(self, config: IntraConfig, num_stages: int, dp: int,
                  device_order: tuple[int, ...] | list[int] | np.ndarray,
                  node: int = 1) -> Placement:
        """The placement that puts each rank on the device at its position of
        ``device_order`` (as :meth:`devices`)."""
        devices = self.devices(config, num_stages, dp, device_order, node).tolist()
        return tuple(tuple(tuple(ranks) for ranks in replicas) for replicas in devices)


def digit_radices(tier_sizes: tuple[int, ...], num_devices: int) -> tuple[int, ...] | None:
    """The radices n_0, ..., n_{L−1} of a device id on a tiered network: the sizes of the
    tiers below the top and N / G_{L−2} for the top; None when N is not a multiple of
    G_{L−2} (the ids are then not a full mixed-radix range: canonical order only) or the
    tiers do not hold all N devices."""
    inner = tuple(tier_sizes[:-1])
    product = 1
    for size in inner:
        product *= size
    if num_devices % product or num_devices > product * tier_sizes[-1]:
        return None  # not a full mixed-radix range, or devices in no common domain
    return (*inner, num_devices // product)


def digit_device_order(radices: tuple[int, ...], digits: tuple[int, ...]) -> np.ndarray:
    """order[position] = device: a device id is the mixed-radix number (slot, tier-1 index,
    ..., top index) of ``radices`` (:func:`digit_radices`); position p's digits, read in the
    radices n_0, n_{δ(1)}, n_{δ(2)}, ... (δ = (0, *digits)), are its slot, its tier-δ(1)
    index, its tier-δ(2) index, ...  Slot innermost, so position blocks of n_0 are whole
    tier-0 domains; ``digits`` () is the canonical order (ids 0..N−1)."""
    num_devices = 1
    for size in radices:
        num_devices *= size
    rest = np.arange(num_devices, dtype=np.int64)
    index_of = [np.zeros(1, dtype=np.int64)] * len(radices)
    for tier in (0, *(digits or range(1, len(radices)))):
        index_of[tier] = rest % radices[tier]
        rest = rest // radices[tier]
    device, weight = np.zeros(num_devices, dtype=np.int64), 1
    for tier, size in enumerate(radices):
        device = device + index_of[tier] * weight
        weight *= size
    return device


MEGATRON_LAYOUT = RankLayout((Dim.TP, Dim.EP, Dim.REPLICA, Dim.STAGE))
NEST_LAYOUT = RankLayout((Dim.TP, Dim.EP, Dim.STAGE, Dim.REPLICA))
# the orders structured space v3b-R splits the replica of: a stage replica's ranks innermost,
# then r_in, the stage, r_out (t, e, r_in, stage, r_out and its e-first twin)
REPLICA_BLOCK_ORDERS = ((Dim.TP, Dim.EP, Dim.REPLICA, Dim.STAGE),
                        (Dim.EP, Dim.TP, Dim.REPLICA, Dim.STAGE))


def all_layouts() -> tuple[RankLayout, ...]:
    """The 24 layouts of structured space v2, in a deterministic order.

    Megatron's first, then the other five with tensor ranks innermost (the structured
    space before v2, NEST's among them), then the eighteen others in
    ``itertools.permutations`` order.  The index is the DP's tie-break.
    """
    tensor_first = [RankLayout((Dim.TP, *rest))
                    for rest in itertools.permutations((Dim.EP, Dim.REPLICA, Dim.STAGE))]
    tensor_first.remove(MEGATRON_LAYOUT)
    others = [RankLayout(order) for order in itertools.permutations(
        (Dim.TP, Dim.EP, Dim.REPLICA, Dim.STAGE)) if order[0] is not Dim.TP]
    return (MEGATRON_LAYOUT, *tensor_first, *others)


def structured_layouts(radices: tuple[int, ...] | None) -> tuple[RankLayout, ...]:
    """The layouts of structured space v3a on a network with these digit radices
    (:func:`digit_radices`; None on a graph or an irregular tiered network: v2's 24).

    v2's 24 first (so the DP's tie-break keeps v2's plan wherever v2 is optimal), then the
    24 orders on every other device order δ (class D, (L − 1)! − 1 of them on L tiers), then
    every order on every device order with the spare devices first (class O), then
    (v3b-R) the replica blocks: :data:`REPLICA_BLOCK_ORDERS` with every block k > 1 that
    divides the node size n_0, on every device order (k replicas of a stage side by side,
    inside a node when k·t·e divides n_0: the k-channel syncs of cost model §5 a), then
    (v3c) ``t,e,stage,replica/node-tail`` (:class:`NodeTail`: each replica's last n_0 / a
    stages in one node, the stages before them packed into tier-1 domains), then (v3d)
    ``t,e,stage,replica/gathered-ends`` (:func:`gathered_end_positions`: the first and
    last stage replica-inner, the stages between them stage-inner).  The index is the
    DP's tie-break.  Layouts that place alike at a given shape (radix-1 dimensions,
    no spare node to move) are left to the searches to de-duplicate.
    """
    base = all_layouts()
    if radices is None or len(radices) < 3:  # shifting whole nodes is then a symmetry
        return base
    orders = [()] + [upper for upper in itertools.permutations(range(1, len(radices)))
                     if upper != tuple(sorted(upper))]
    with_digits = tuple(RankLayout(layout.order, digits) for digits in orders[1:]
                        for layout in base)
    spare_first = tuple(RankLayout(layout.order, digits, spare_first=True)
                        for digits in orders for layout in base)
    blocked = tuple(RankLayout(order, digits, replica_block=block)
                    for block in range(2, radices[0] + 1) if radices[0] % block == 0
                    for digits in orders for order in REPLICA_BLOCK_ORDERS)
    node_tail = RankLayout(NEST_LAYOUT.order, node_tail=NodeTail(
        radices[0], radices[1], math.prod(radices[1:])))
    gathered = RankLayout(NEST_LAYOUT.order, gathered_ends=True)
    return (*base, *with_digits, *spare_first, *blocked, node_tail, gathered)


def uniform_stages(num_layers: int, num_stages: int, recompute: str = "none",
                   virtual_stages: int = 1) -> tuple[Stage, ...]:
    """Split ``num_layers`` into S·v contiguous chunks as evenly as possible.

    The last ``num_layers % (S·v)`` chunks get one layer more: they run on the later
    stages, which hold fewer microbatches in flight under 1F1B, so they have room for
    it.  ``recompute`` is a mode ("none", "selective", "full") for every stage, or
    "all-but-last" (Megatron's usual choice: full recomputation except on the last
    stage, which holds one microbatch in flight).  Chunk k runs on stage k mod S.
    """
    chunks = num_stages * virtual_stages
    if virtual_stages < 1 or not 1 <= chunks <= num_layers:
        raise ValueError(f"expected 1 <= stages x virtual stages <= {num_layers} layers, "
                         f"got {num_stages} x {virtual_stages}")
    if recompute == "all-but-last":
        modes = [RecomputeMode.FULL] * (num_stages - 1) + [RecomputeMode.NONE]
    elif recompute in {m.value for m in RecomputeMode}:
        modes = [RecomputeMode(recompute)] * num_stages
    else:
        raise ValueError(f"expected recompute none, selective, full or all-but-last, "
                         f"got {recompute!r}")
    base, extra = divmod(num_layers, chunks)
    stages, first = [], 0
    for chunk in range(chunks):
        size = base + (1 if chunk >= chunks - extra else 0)
        stages.append(Stage(first, first + size - 1, modes[chunk % num_stages]))
        first += size
    return tuple(stages)
