"""Rank slots and the device groups whose bottleneck prices a cost term.

A slot is a rank (stage, replica, rank) of DESIGN §2, rank j = t_index + tp·e_index.
The models price four kinds of groups, each on the bottleneck of the devices
its slots are placed on (only groups of two or more slots ever communicate):

- replica[stage, replica]: the a = t·e ranks of a stage replica (intra-layer collectives);
- pipe[stage, replica, rank]: rank j of stage s and of stage s + 1 in the same replica
  (activation forward, gradient backward, both of stage s's last layer output);
- shard[stage, rank]: rank j of the stage in every replica (ZeRO-3 gathers, expert sync);
- dense[stage, t_index]: ranks t_index + tp·e of every replica and expert index
  (dense gradient sync over d·e ranks).
"""

from __future__ import annotations

from dataclasses import dataclass

Slot = tuple[int, int, int]  # (stage, replica, rank)
Group = tuple[Slot, ...]


@dataclass(frozen=True, slots=True)
class RankGroups:
    """The slots of a sub-problem and its communicating groups, keyed by index tuples."""

    slots: tuple[Slot, ...]
    replica: dict[tuple[int, int], Group]
    pipe: dict[tuple[int, int, int], Group]
    shard: dict[tuple[int, int], Group]
    dense: dict[tuple[int, int], Group]


def rank_groups(num_stages: int, dp: int, tp: int, ep: int) -> RankGroups:
    """Slots and groups for S stages, d replicas and a = tp·ep ranks per replica."""
    ranks = tp * ep
    slots = tuple((stage, replica, rank) for stage in range(num_stages)
                  for replica in range(dp) for rank in range(ranks))
    replica_groups = {(stage, replica): tuple((stage, replica, rank) for rank in range(ranks))
                      for stage in range(num_stages) for replica in range(dp)}
    pipe = {(stage, replica, rank): ((stage, replica, rank), (stage + 1, replica, rank))
            for stage in range(num_stages - 1) for replica in range(dp)
            for rank in range(ranks)}
    shard = {(stage, rank): tuple((stage, replica, rank) for replica in range(dp))
             for stage in range(num_stages) for rank in range(ranks)}
    dense = {(stage, t_index): tuple((stage, replica, t_index + tp * e_index)
                                     for replica in range(dp) for e_index in range(ep))
             for stage in range(num_stages) for t_index in range(tp)}
    return RankGroups(slots, replica_groups, pipe, shard, dense)
