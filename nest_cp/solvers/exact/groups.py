"""Rank slots and the device groups whose bottleneck prices a cost term.

A slot is a rank (stage, replica, rank) of DESIGN §2 and §3.4, rank j = t_index +
t·c_index + t·c·e_index (Megatron's tp-cp-ep order; c = 1 gives §2's t_index + t·e_index).
The models price six kinds of groups, each on the bottleneck of the devices its
slots are placed on (only groups of two or more slots ever communicate):

- tp[stage, replica, index]: the t ranks of a stage replica sharing an expert and a
  context index (TP collectives, DESIGN §3.2 f), one per (e_index, c_index);
- ep[stage, replica, index]: the e ranks of a stage replica sharing a tensor and a
  context index (EP collectives), one per (c_index, t_index);
- cp[stage, replica, index]: the c ranks of a stage replica sharing a tensor and an
  expert index, in ring order (context parallelism, DESIGN §3.4), one per (e_index,
  t_index); empty for c = 1;
- pipe[pair, replica, rank]: rank j of the two stages of ``pair`` in the same replica,
  where pair = (s, s + 1) or, with interleaving, the wrap-around (0, S − 1) (chunk
  boundary transfers: activation forward, gradient backward);
- shard[stage, t_index, e_index]: the ranks of the stage with that tensor and expert
  index in every replica and context index, d·c ranks (ZeRO-3 gathers and expert sync:
  the c context ranks hold the same parameters, DESIGN §3.4);
- dense[stage, t_index]: the ranks with that tensor index of every replica, context and
  expert index (dense gradient sync over d·e·c ranks).
"""

from __future__ import annotations

from dataclasses import dataclass

from nest_cp.model.instance import CollectiveGroup, IntraConfig
from nest_cp.model.plan import context_groups, expert_groups, rank_index, tensor_groups

Slot = tuple[int, int, int]  # (stage, replica, rank)
Group = tuple[Slot, ...]


@dataclass(frozen=True, slots=True)
class RankGroups:
    """The slots of a sub-problem and its communicating groups, keyed by index tuples."""

    slots: tuple[Slot, ...]
    tp: dict[tuple[int, int, int], Group]
    ep: dict[tuple[int, int, int], Group]
    pipe: dict[tuple[tuple[int, int], int, int], Group]
    shard: dict[tuple[int, int, int], Group]
    dense: dict[tuple[int, int], Group]
    cp: dict[tuple[int, int, int], Group]

    def collective(self, kind: CollectiveGroup, stage: int, replica: int) -> list[Group]:
        """The TP or EP groups of one stage replica."""
        family = self.tp if kind is CollectiveGroup.TP else self.ep
        return [group for (s, r, _), group in family.items() if (s, r) == (stage, replica)]

    def context(self, stage: int, replica: int) -> list[Group]:
        """The CP groups (rings) of one stage replica; [] for c = 1."""
        return [group for (s, r, _), group in self.cp.items() if (s, r) == (stage, replica)]

    def shards(self, stage: int) -> list[Group]:
        """The shard groups of one stage (one per tensor and expert index)."""
        return [group for (s, *_), group in self.shard.items() if s == stage]


def stage_pair(first: int, second: int) -> tuple[int, int]:
    """The key of the pipe groups between two stages (unordered)."""
    return (min(first, second), max(first, second))


def rank_groups(num_stages: int, dp: int, config: IntraConfig, wrap: bool) -> RankGroups:
    """Slots and groups for S stages, d replicas and a = t·c·e ranks per replica; ``wrap``
    adds the pipe groups between stages S − 1 and 0 (interleaved 1F1B)."""
    ranks = config.devices
    stages, replicas = range(num_stages), range(dp)
    slots = tuple((stage, replica, rank) for stage in stages for replica in replicas
                  for rank in range(ranks))
    tp = {(stage, replica, e_index): tuple((stage, replica, j) for j in members)
          for stage in stages for replica in replicas
          for e_index, members in enumerate(tensor_groups(config))}
    ep = {(stage, replica, t_index): tuple((stage, replica, j) for j in members)
          for stage in stages for replica in replicas
          for t_index, members in enumerate(expert_groups(config))}
    pairs = {stage_pair(stage, stage + 1) for stage in range(num_stages - 1)}
    if wrap and num_stages >= 2:
        pairs.add(stage_pair(num_stages - 1, 0))
    pipe = {(pair, replica, rank): ((pair[0], replica, rank), (pair[1], replica, rank))
            for pair in sorted(pairs) for replica in replicas for rank in range(ranks)}
    contexts = range(config.cp)
    shard = {(stage, t_index, e_index): tuple(
        (stage, replica, rank_index(config, t_index, c_index, e_index))
        for replica in replicas for c_index in contexts)
        for stage in stages for t_index in range(config.tp) for e_index in range(config.ep)}
    dense = {(stage, t_index): tuple((stage, replica, rank_index(config, t_index, c_index,
                                                                 e_index))
                                     for replica in replicas for c_index in contexts
                                     for e_index in range(config.ep))
             for stage in stages for t_index in range(config.tp)}
    cp = {(stage, replica, index): tuple((stage, replica, j) for j in members)
          for stage in stages for replica in replicas
          for index, members in enumerate(context_groups(config)) if config.cp > 1}
    return RankGroups(slots, tp, ep, pipe, shard, dense, cp)
