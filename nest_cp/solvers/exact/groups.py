"""Rank slots and the device groups whose bottleneck prices a cost term.

A slot is a rank (stage, replica, rank) of DESIGN §2, rank j = t_index + tp·e_index.
The models price five kinds of groups, each on the bottleneck of the devices its
slots are placed on (only groups of two or more slots ever communicate):

- tp[stage, replica, e_index]: the t ranks of a stage replica sharing an expert index
  (TP collectives, DESIGN §3.2 f);
- ep[stage, replica, t_index]: the e ranks of a stage replica sharing a tensor index
  (EP collectives);
- pipe[pair, replica, rank]: rank j of the two stages of ``pair`` in the same replica,
  where pair = (s, s + 1) or, with interleaving, the wrap-around (0, S − 1) (chunk
  boundary transfers: activation forward, gradient backward);
- shard[stage, rank]: rank j of the stage in every replica (ZeRO-3 gathers, expert sync);
- dense[stage, t_index]: ranks t_index + tp·e of every replica and expert index
  (dense gradient sync over d·e ranks).
"""

from __future__ import annotations

from dataclasses import dataclass

from nest_cp.model.instance import CollectiveGroup, IntraConfig
from nest_cp.model.plan import expert_groups, tensor_groups

Slot = tuple[int, int, int]  # (stage, replica, rank)
Group = tuple[Slot, ...]


@dataclass(frozen=True, slots=True)
class RankGroups:
    """The slots of a sub-problem and its communicating groups, keyed by index tuples."""

    slots: tuple[Slot, ...]
    tp: dict[tuple[int, int, int], Group]
    ep: dict[tuple[int, int, int], Group]
    pipe: dict[tuple[tuple[int, int], int, int], Group]
    shard: dict[tuple[int, int], Group]
    dense: dict[tuple[int, int], Group]

    def collective(self, kind: CollectiveGroup, stage: int, replica: int) -> list[Group]:
        """The TP or EP groups of one stage replica."""
        family = self.tp if kind is CollectiveGroup.TP else self.ep
        return [group for (s, r, _), group in family.items() if (s, r) == (stage, replica)]


def stage_pair(first: int, second: int) -> tuple[int, int]:
    """The key of the pipe groups between two stages (unordered)."""
    return (min(first, second), max(first, second))


def rank_groups(num_stages: int, dp: int, config: IntraConfig, wrap: bool) -> RankGroups:
    """Slots and groups for S stages, d replicas and a = tp·ep ranks per replica; ``wrap``
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
    shard = {(stage, rank): tuple((stage, replica, rank) for replica in replicas)
             for stage in stages for rank in range(ranks)}
    dense = {(stage, t_index): tuple((stage, replica, t_index + config.tp * e_index)
                                     for replica in replicas for e_index in range(config.ep))
             for stage in stages for t_index in range(config.tp)}
    return RankGroups(slots, tp, ep, pipe, shard, dense)
