"""Capacity levels of a hierarchical network and the replica paths over them.

The *class* of a set of groups is the largest tier any of them lies on: a class-k
set costs at least its price on tier k and all its groups lie inside tier-k
domains.  Tiers with a capacity (every tier but the unconstrained outermost one)
are the *capacity levels*.  A replica's pipeline boundaries have classes; a
boundary of class k *breaks* the replica's runs at every level below k.

An :class:`Arc` is one level-0 run of a replica path (stages p..p+r−1, all its
boundaries class 0) ending in a break of class k >= 1, or at the end of the chain.
The state before an arc holds the length m_ℓ of the current level-ℓ run for the
levels ℓ = 1..K−2, so arc and state give every stage of the run its (in-class,
out-class) *combo* and the runs that end there.  Runs never exceed what a domain
holds: a level-ℓ run of ℓ stages keeps ℓ·J_ℓ ranks in one tier-ℓ domain, where J_ℓ
is the number of a stage replica's ranks its intra groups join at that level.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from nest_cp.model.instance import CollectiveGroup
from nest_cp.solvers.certify.chain import FAMILIES, LayerPrices, Tier

NONE = -1  # combo side without a transfer (first stage's input, last stage's output)


@dataclass(frozen=True, slots=True)
class Arc:
    """A level-0 run of ``length`` stages from ``start`` in a replica path."""

    start: int
    length: int
    state: tuple[int, ...]       # m_1..m_{K-2}: level-ℓ run lengths before ``start``
    end_class: int               # class of the break after the run; NONE at the chain's end
    next_state: tuple[int, ...]
    runs: tuple[int, ...]        # run length at every capacity level, up to the arc's end
    emits: tuple[int, ...]       # capacity levels whose run ends with this arc
    in_class: int                # class of the break before ``start``; NONE at stage 0
    side: int = -1               # with two top-level domains: the one holding this run
    next_side: int = -1

    @property
    def node(self) -> tuple:
        """The path node the arc leaves: (stage, run lengths, side)."""
        return (self.start, self.state, self.side)

    @property
    def next_node(self) -> tuple:
        return (self.start + self.length, self.next_state, self.next_side)

    def combos(self) -> list[tuple[int, tuple[int, int]]]:
        """(stage, (in-class, out-class)) of every stage of the run."""
        found = []
        for offset in range(self.length):
            stage = self.start + offset
            cin = self.in_class if offset == 0 else 0
            cout = self.end_class if offset == self.length - 1 else 0
            found.append((stage, (cin, cout)))
        return found


@dataclass(frozen=True, slots=True)
class Geometry:
    """The capacity levels of a shape: domain sizes, joined intra ranks, innermost tiers."""

    tiers: tuple[Tier, ...]
    joined: tuple[int, ...]      # J_ℓ per capacity level
    joined_families: tuple[frozenset, ...]  # the families whose groups J_ℓ joins
    k_min: dict                  # family -> innermost tier admitting its group (present ones)
    ranks: int                   # a = t·e
    sizes: dict                  # family -> group size
    sides: int = 0               # 2 when the top capacity level has exactly two domains

    def start_nodes(self) -> list[tuple]:
        """Where replica paths begin: stage 0, no runs yet, on either side when tracked."""
        zeros = (0,) * (self.levels - 1)
        return [(0, zeros, side) for side in range(self.sides)] if self.sides else \
            [(0, zeros, -1)]

    def merged(self, level: int, family: CollectiveGroup | None) -> int:
        """Ranks of one replica's stage slice that a sync group joins at ``level``: the
        joined pieces, widened by ``family``'s dimension (the dense sync spans e)."""
        families = self.joined_families[level] | ({family} if family else set())
        size = 1
        for joined in families:
            size *= self.sizes[joined]
        return size

    @property
    def levels(self) -> int:
        """Capacity levels: every tier but the unconstrained outermost one."""
        return sum(1 for tier in self.tiers if tier.capacity is not None)

    def capacity(self, level: int) -> int:
        return self.tiers[level].capacity


def geometry(prices: LayerPrices) -> Geometry | None:
    """The capacity levels of a hierarchical network; None if there are none (a graph)."""
    tiers = prices.tiers
    if not tiers or tiers[0].capacity is None:
        return None
    config = prices.config
    k_min = {}
    for family in FAMILIES:
        if prices.has_family[family]:
            size = config.tp if family is CollectiveGroup.TP else config.ep
            k_min[family] = min(t.index for t in tiers if t.admits(size))
    sizes = {CollectiveGroup.TP: config.tp, CollectiveGroup.EP: config.ep}
    joined, families = [], []
    for tier in tiers:
        if tier.capacity is None:
            break
        members = frozenset(f for f, k in k_min.items() if k <= tier.index)
        families.append(members)
        joined.append(math.prod(sizes[f] for f in members))
    top_domains = len(tiers[len(joined) - 1].domains)
    return Geometry(tiers, tuple(joined), tuple(families), k_min, config.devices, sizes,
                    2 if top_domains == 2 else 0)


def replica_arcs(num_stages: int, geo: Geometry) -> list[Arc]:
    """Every arc reachable from the start nodes (run lengths within domain capacities).

    With two top-level domains (``geo.sides``) a path also tracks which of them holds
    its current top-level run: a break of the outermost class moves it to the other
    one (its pairs must lie on the outer tier, so not in the same domain).
    """
    levels, top = geo.levels, len(geo.tiers) - 1
    zeros = (0,) * (levels - 1)
    frontier = list(geo.start_nodes())
    arcs, seen = [], set(frontier)
    while frontier:
        position, state, side = frontier.pop()
        in_class = NONE if position == 0 else _in_class(state, top)
        for length in range(1, num_stages - position + 1):
            runs = (length, *(m + length for m in state))
            if any(run * geo.joined[level] > geo.capacity(level)
                   for level, run in enumerate(runs)):
                break  # longer runs only grow
            end = position + length
            ends = [NONE] if end == num_stages else [
                k for k in range(1, top + 1) if geo.tiers[k].admits(2)]
            for end_class in ends:
                if end_class == NONE:
                    emits, next_state, next_side = tuple(range(levels)), zeros, side
                else:
                    emits = tuple(level for level in range(levels) if level < end_class)
                    next_state = tuple(runs[level] if level >= end_class else 0
                                       for level in range(1, levels))
                    next_side = 1 - side if side >= 0 and end_class >= levels else side
                arc = Arc(position, length, state, end_class, next_state, runs, emits,
                          in_class, side, next_side)
                arcs.append(arc)
                if end_class != NONE and arc.next_node not in seen:
                    seen.add(arc.next_node)
                    frontier.append(arc.next_node)
    return arcs


def _in_class(state: tuple[int, ...], top: int) -> int:
    """Class of the break before a run: the lowest level whose run continues through it."""
    for level, run in enumerate(state, start=1):
        if run > 0:
            return level
    return top
