"""Capacity levels of a hierarchical network and the replica paths over them.

Terms.  Tiers k = 0..K−1 as :func:`~nest_cp.solvers.certify.chain.network_tiers`
lists them (cut at the first tier with one domain); tiers with a capacity are the
*capacity levels* ℓ = 0..levels−1 and tier ``levels`` = K−1 is the unconstrained
outermost one.  The *tier* of a set of devices is the smallest k whose domain
holds them all (DESIGN §1.2; domains are nested blocks of ids, so a set on tier
k lies inside one tier-ℓ domain for every ℓ >= k).  The *class* of a set of
groups is the largest tier any of them lies on.

A plan of a shape is *main* when every intra-layer group of every present family
f (size > 1 and some collective; ``k_min``) lies on k_min[f], the innermost tier
that admits its size (no group lies lower: a tier-k group fits one tier-k domain).
At level ℓ the families with k_min[f] <= ℓ are *joined*; J_ℓ is the product of
their sizes, and a *piece* is a set of J_ℓ ranks of one stage replica connected by
joined groups (all a = t·e ranks when both families are joined: TP groups are the
rows, EP groups the columns of the t × e grid of ranks j = t_index + t·e_index).

Lemma (replica paths).  Take a main plan and one replica r.  Give boundary b
(stage b → b + 1) the class c_b of its a pairs (rank j to rank j, DESIGN §3).
Cut the stages into maximal level-0 runs (stages joined by class-0 boundaries);
each run is an :class:`Arc` whose state holds, for ℓ = 1..levels−1, the length
m_ℓ of the level-ℓ run (stages joined by boundaries of class <= ℓ) before it.
Then (i) consecutive arcs of r form a path of :func:`replica_arcs` from a start
node, and (ii) every stage gets the combo (c_{s−1}, c_s) its arc gives it.

Proof.  (ii) Inside an arc the boundaries have class 0.  The break b after an
arc has class k >= 1 and admits a pair (it holds one, on tier k); the next state
keeps m_ℓ for ℓ >= k and zeroes the levels below k, exactly as the level-ℓ runs
continue through a class-k break iff ℓ >= k.  The in-class of the next arc is
recovered from the state as the lowest ℓ with m_ℓ > 0, which is k when
k <= levels−1, and the outermost tier otherwise (the only tier above the capacity
levels).  (i) The only other condition an arc checks is run·J_ℓ <= G_ℓ for every
level ℓ and every level-ℓ run.  For one piece P and a level-ℓ run R: the pairs of
R's boundaries lie on tiers <= ℓ, so each rank's devices over R share one tier-ℓ
domain; the joined groups of P lie on tiers <= ℓ, so P's devices at each stage of R
share one too; hence P × R, |R|·J_ℓ distinct devices (the placement is injective,
§2), lies in one tier-ℓ domain of at most G_ℓ devices.  ∎

The same argument shows what the relaxation packs: every maximal level-ℓ run of
every replica gives a/J_ℓ disjoint *items* of |R|·J_ℓ devices, each inside one
tier-ℓ domain.  A run that a higher-class break cuts may continue for some pieces
(the class is the largest pair's); counting it as two items only splits items, so
it stays a relaxation.

Sides.  When the top capacity level has exactly two domains and J at that level is
all a ranks, a path also carries the domain (*side*) holding its current top-level
run: all a ranks of a stage lie in one top-level domain, a break of the outermost
class has some pair in two different top-level domains, so the next stage's ranks
are in the other one; a break of a lower class keeps them in the same one.  When
J < a this fails — the pieces lie in either domain independently and a break moves
only some of them (a stage of e = 2 ranks without EP collectives, or a TP group
wider than a top-level domain, is split across both) — so sides are not tracked.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from nest_cp.model.instance import CollectiveGroup
from nest_cp.solvers.certify.chain import FAMILIES, LayerPrices, Tier

NONE = -1  # combo side without a transfer (first stage's input, last stage's output)
FREE = -2  # in-class of a fresh segment's first stage: any class >= 1 (raised paths)
FRESH = -2  # side of the nodes of a fresh segment (sides not tracked)


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
    """The capacity levels of a hierarchical network; None if there are none (a graph), or
    if the configuration has a context width c > 1: the lemma above packs the t·e grid of a
    stage replica, not CP groups and rings, so neither the main / raised split nor the path
    bound, the relaxation or their placements are made for such shapes — they keep the
    placement-free bound (valid for every plan of the shape, bounds module docstring)."""
    tiers = prices.tiers
    if not tiers or tiers[0].capacity is None or prices.config.cp > 1:
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
    top = len(joined) - 1
    # Sides are tracked only when a stage replica's a ranks are one item at the top capacity
    # level (its intra groups join all of them there): then a break of the outermost class
    # moves the whole replica to the other domain.  Otherwise its pieces may sit in
    # different top-level domains and flip independently (the pair of one rank j leaves the
    # domain, another's does not), so the general packing is used.
    whole = joined[top] == config.devices
    return Geometry(tiers, tuple(joined), tuple(families), k_min, config.devices, sizes,
                    2 if whole and len(tiers[top].domains) == 2 else 0)


def replica_arcs(num_stages: int, geo: Geometry) -> list[Arc]:
    """Every arc reachable from the start nodes (run lengths within domain capacities).

    With two top-level domains (``geo.sides``) a path also tracks which of them holds
    its current top-level run: a break of the outermost class moves it to the other
    one (its pairs must lie on the outer tier, so not in the same domain).
    """
    return _arcs_from(list(geo.start_nodes()), num_stages, geo, fresh=False)


def segment_arcs(num_stages: int, geo: Geometry) -> list[Arc]:
    """Every arc reachable from a *fresh* segment start (s0, no runs, side ``FRESH``) for
    s0 = 1..S−1: the first stage after a stage with a raised group
    (:mod:`nest_cp.solvers.certify.raised`).  The first arc's in-class is ``FREE`` (any
    class >= 1; that module's lemma), later ones as in :func:`replica_arcs`; sides are not
    tracked (``FRESH`` stays), which only drops a condition."""
    zeros = (0,) * (geo.levels - 1)
    return _arcs_from([(start, zeros, FRESH) for start in range(1, num_stages)], num_stages,
                      geo, fresh=True)


def _arcs_from(frontier: list[tuple], num_stages: int, geo: Geometry, fresh: bool
               ) -> list[Arc]:
    """The arcs reachable from ``frontier``; with ``fresh``, the arcs leaving a frontier
    node (a fresh segment start, or a node with no runs that a segment reaches again,
    whose real in-class is one of the FREE ones) get in-class FREE."""
    levels, top = geo.levels, len(geo.tiers) - 1
    zeros = (0,) * (levels - 1)
    starts = set(frontier) if fresh else set()
    arcs, seen = [], set(frontier)
    while frontier:
        position, state, side = frontier.pop()
        in_class = NONE if position == 0 else FREE if (position, state, side) in starts \
            else _in_class(state, top)
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
