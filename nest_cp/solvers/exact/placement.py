"""Placement in the exact models: the full space and the structured space.

Both classes answer one question for the shared skeleton: ``cases(group)`` is a
list of (literals, path): "when every literal is 1, the group's bottleneck is
``path``".  The skeleton turns each case into an enforced floor on a cost term
(nest_cp.solvers.exact.terms); the literals of one set of slots are made once and shared
by every term priced on it.

Full space (any injective placement).  x[slot, cell] places slots on *cells*
with capacities: tier-0 domains on a hierarchical network (devices of one tier-0
domain are interchangeable: every price depends only on which tier-0 domain
each slot is in), single devices on a graph.  The bottleneck of a group is read
off *domain occupancy*:

- hierarchical: tier-k domains are blocks of G_k consecutive ids; the group lies
  in tier k iff all its slots sit in one tier-k domain and not in one tier-(k−1)
  domain.  in[group, domain] is the exact AND of its slots' occupancy, so the tier
  literal is exact (tiers need not get slower outwards, so it must be).
- graph: the widest-path bandwidth is an ultrametric (bw(a, c) ≥ min(bw(a, b),
  bw(b, c))), so for every bandwidth value B the devices joined at ≥ B form
  disjoint *domains*, and a group's bottleneck bandwidth is B_u for the first
  level u whose domain holds it: the same exact occupancy literals.  The group's
  latency is the largest pair latency, which is not an ultrametric: lat_ge[group, v]
  is forced to 1 when two of its slots sit on a pair with latency ≥ L_v and is
  otherwise free; since every price grows with latency and the models minimise,
  the literal of the true worst latency is enforced and the others are set to 0
  at an optimum, so the optimum is exact (a non-optimal solution can only
  over-price, and the backends re-evaluate every plan they return).

The tier-0 level literal of a group is also "the group lies in one tier-0 domain"
(:meth:`FullPlacement.inside_tier0`), what TP overlap asks of every TP group of a stage
replica (cost model §5 e).

Channels (hierarchical, cost model §5 a).  A group spanning tier K >= 1 runs
k ring channels, k = the fewest slots it has in one cell it touches, priced
``network.channel_path(K, k)`` (faster with k up to ``max_useful_channels(K)``;
k <= |G|/2, as such a group touches two cells at least).  With
cnt[group, cell] = Σ of its slots' x in the cell and touched[group, cell] == 1 iff
cnt >= 1, fewer[group, c] may be 0 only if every touched cell holds c slots or
more (cnt >= c·(touched − fewer)); the tier-K floor at c channels is enforced when
[in tier K, fewer[group, c + 1]] and the one at the most useful count by the tier
literal alone.  Prices fall as c grows and the models minimise, so an optimum
sets fewer[group, c] = 0 exactly when allowed and pays the price of the group's
true k: exact, as for latencies.

Symmetry cuts (each keeps at least one optimal plan of every orbit, so the
optimum is unchanged):

- replicas are interchangeable (every term is a max or a sum over replicas and
  every group treats them alike), so replica r's rank (stage 0, rank 0) sits in a
  cell of index ≤ replica r + 1's;
- hierarchical: full sibling domains (same parent, G_{k−1} devices each) are
  interchangeable as blocks, so full siblings are ordered by how many slots they
  hold (descending).  Sorting bottom-up, each level's block moves keep the inner
  orders, and relabelling replicas afterwards moves no slot between cells, so all
  cuts hold together (canonical_placement builds exactly this form for hints);
  these moves keep every group's slot count per cell, so channels too;
- graph: *twins* (devices a, b with the same path to every other device) are
  interchangeable; their classes are equivalence classes and used devices come
  first in each class.

Structured space: select[layout] picks one of the (deduplicated) placements the
rank layouts of the structured space give on the network
(NetworkModel.structured_placements: v2's 24 orders of t, e, stage and replica on the
canonical device order, and on a network of three tiers or more the same orders on the
other device orders and with the spare nodes first, structured space v3a), and every
group's path is a constant per layout.
"""

from __future__ import annotations

from dataclasses import dataclass

from nest_cp.model.network import NetworkModel, Path
from nest_cp.model.plan import Placement
from nest_cp.solvers.exact.groups import Group, RankGroups, Slot
from nest_cp.solvers.exact.subproblems import SubProblem

Case = tuple[list, Path]


@dataclass(frozen=True, slots=True)
class _Level:
    """Disjoint device domains; a group inside one of them (and none below) has ``path``."""

    domains: tuple[tuple[int, ...], ...]
    path: Path | None  # None on graphs: bandwidth here, latency from lat_ge literals
    bandwidth_Bps: object = None
    tier: int = 0  # hierarchical: the tier whose domains these are (channels from tier 1)


class FullPlacement:
    """Any injective map of slots to devices, with exact bottleneck literals per group.

    Slots are placed on *cells* with a capacity: on a hierarchical network the
    tier-0 domains (every price depends only on which tier-0 domain each slot is
    in, since devices of one tier-0 domain are interchangeable), on a graph
    single devices.  Within a cell, slots take its devices in slot order.
    """

    def __init__(self, adapter, network: NetworkModel, groups: RankGroups):
        self._adapter, self._network, self._groups = adapter, network, groups
        self._cells = _cells(network)
        self._cell_of = {device: index for index, cell in enumerate(self._cells)
                         for device in cell}
        cells = range(len(self._cells))
        # x[slot, cell] == 1 iff the slot's rank runs on a device of the cell
        self.x = {(slot, cell): adapter.new_bool(f"x_{'_'.join(map(str, slot))}_{cell}")
                  for slot in groups.slots for cell in cells}
        for slot in groups.slots:
            adapter.add(adapter.total(self.x[slot, cell] for cell in cells) == 1)
        for cell in cells:
            adapter.add(adapter.total(self.x[slot, cell] for slot in groups.slots)
                        <= len(self._cells[cell]))
        self._levels = _hierarchy_levels(network) if network.is_hierarchical \
            else _bandwidth_levels(network)
        self._latencies = () if network.is_hierarchical else _latency_values(network)
        self._cases: dict[frozenset, list[Case]] = {}  # one set of literals per slot set
        self._levels_of: dict[frozenset, list] = {}  # level literals per slot set
        self._symmetry_cuts()

    def cases(self, name: str, group: Group) -> list[Case]:
        """(literals, path) for every bottleneck the group can have.

        The literals of a set of slots are made once and shared by every cost term
        priced on it (e.g. ZeRO-3 gathers and expert sync on the same shard group).
        """
        key = frozenset(group)
        if key not in self._cases:
            self._cases[key] = self._new_cases(name, group)
        return self._cases[key]

    def inside_tier0(self, name: str, group: Group):
        """The literal "the group lies in one tier-0 domain" (hierarchical networks): its
        first level's, shared with its cases (cost model §5 e asks it of TP groups)."""
        literal, level = self._group_levels(name, group)[0]
        assert level.tier == 0, "the first level of a hierarchy is tier 0"
        return literal

    def _group_levels(self, name: str, group: Group) -> list[tuple[object, _Level]]:
        """:meth:`_level_literals` of the group, made once per set of slots."""
        key = frozenset(group)
        if key not in self._levels_of:
            self._levels_of[key] = self._level_literals(name, group)
        return self._levels_of[key]

    def _new_cases(self, name: str, group: Group) -> list[Case]:
        level_literals = self._group_levels(name, group)
        if self._network.is_hierarchical:
            return self._channel_cases(name, group, level_literals)
        latency_literals = self._latency_literals(name, group)
        return [([literal] + ([lat_literal] if lat_literal is not None else []),
                 Path(level.bandwidth_Bps, latency))
                for literal, level in level_literals
                for lat_literal, latency in latency_literals]

    def hint(self, placement: Placement) -> None:
        """Hint the placement moved into the symmetry cuts' canonical form (same objective)."""
        placement = canonical_placement(placement, self._network)
        cell_of_slot = {(s, r, j): self._cell_of[device] for s, replicas in enumerate(placement)
                        for r, ranks in enumerate(replicas) for j, device in enumerate(ranks)}
        for (slot, cell), var in self.x.items():
            self._adapter.hint(var, int(cell_of_slot[slot] == cell))

    def extract(self, value, sub: SubProblem) -> Placement:
        """Give each cell's slots (in slot order) the cell's devices (in id order)."""
        devices = {}
        for cell, cell_devices in enumerate(self._cells):
            slots = sorted(slot for slot in self._groups.slots if value(self.x[slot, cell]) == 1)
            devices.update(zip(slots, cell_devices, strict=False))
        return _placement_of(devices, sub)

    # ------------------------------------------------------------ literals

    def _occupancy(self, slot: Slot, domain: tuple[int, ...]):
        """1 iff the slot sits in the domain (a union of cells)."""
        cells = sorted({self._cell_of[device] for device in domain})
        return self._adapter.total(self.x[slot, cell] for cell in cells)

    def _level_literals(self, name: str, group: Group) -> list[tuple[object, _Level]]:
        """level_is[group, level] == 1 iff the group's bottleneck level is that level."""
        adapter, found, inside_below = self._adapter, [], 0
        for level_index, level in enumerate(self._levels):
            if len(level.domains) == 1:
                inside = 1
            else:
                inside = adapter.total(self._inside(f"{name}_l{level_index}_d{index}", group,
                                                    domain)
                                       for index, domain in enumerate(level.domains)
                                       if len(domain) >= len(group))
            # level_is[group, level] == 1 iff inside this level's domain and not the one below
            literal = adapter.new_bool(f"level_{name}_{level_index}")
            adapter.add(literal == inside - inside_below)
            found.append((literal, level))
            inside_below = inside
            if len(level.domains) == 1:
                break
        return found

    def _inside(self, name: str, group: Group, domain: tuple[int, ...]):
        """in[group, domain] == 1 iff every slot of the group sits in the domain (exact AND)."""
        adapter = self._adapter
        literal = adapter.new_bool(f"in_{name}")
        occupancies = [self._occupancy(slot, domain) for slot in group]
        for occupancy in occupancies:
            adapter.add(literal <= occupancy)
        adapter.add(literal >= adapter.total(occupancies) - (len(group) - 1))
        return literal

    def _channel_cases(self, name: str, group: Group, level_literals) -> list[Case]:
        """Per tier literal, one case per channel count c (module docstring)."""
        network = self._network
        most = {level.tier: channel_cap(network, level.tier, len(group))
                for _, level in level_literals}
        fewer = self._fewer_literals(name, group, max(most.values()))
        cases = []
        for literal, level in level_literals:
            top = most[level.tier]
            cases.extend(([literal, fewer[c + 1]], network.channel_path(level.tier, c))
                         for c in range(1, top))
            cases.append(([literal], network.channel_path(level.tier, top)))
        return cases

    def _fewer_literals(self, name: str, group: Group, top: int) -> dict:
        """fewer[group, c] for c in 2..top: 0 only if every cell the group touches holds at
        least c of its slots."""
        adapter = self._adapter
        if top < 2:
            return {}
        # fewer[group, c] == 0 only if every touched cell holds >= c of the group's slots
        fewer = {c: adapter.new_bool(f"fewer_{name}_{c}") for c in range(2, top + 1)}
        for c in range(2, top):
            # redundant: c + 1 slots in every touched cell are c slots too
            adapter.add(fewer[c] <= fewer[c + 1])
        for cell in range(len(self._cells)):
            count = adapter.total(self.x[slot, cell] for slot in group)
            # touched[group, cell] == 1 iff the cell holds a slot of the group
            touched = adapter.new_bool(f"touched_{name}_{cell}")
            adapter.add(count <= len(group) * touched)
            adapter.add(touched <= count)
            for c in range(2, top + 1):
                adapter.add(count >= c * touched - c * fewer[c])
        return fewer

    def _latency_literals(self, name: str, group: Group) -> list[tuple[object, object]]:
        """lat_ge[group, v] >= 1 when two slots sit on a pair with latency >= L_v (graphs,
        whose cells are single devices)."""
        adapter, network = self._adapter, self._network
        found = [(None, self._latencies[0])]
        previous = None
        for index, latency in enumerate(self._latencies[1:], start=1):
            literal = adapter.new_bool(f"lat_{name}_{index}")
            for position, first in enumerate(group):
                for second in group[position + 1:]:
                    for device in range(network.num_devices):
                        far = [other for other in range(network.num_devices)
                               if other != device
                               and network.pair_path(device, other).latency_s >= latency]
                        if far:
                            adapter.add(literal >= self._at(first, device) + adapter.total(
                                self._at(second, other) for other in far) - 1)
            if previous is not None:
                # redundant: a higher latency threshold implies every lower one
                adapter.add(previous >= literal)
            previous = literal
            found.append((literal, latency))
        return found

    def _at(self, slot: Slot, device: int):
        return self.x[slot, self._cell_of[device]]

    # ------------------------------------------------------------ symmetry

    def _symmetry_cuts(self) -> None:
        adapter, slots = self._adapter, self._groups.slots
        first_ranks = sorted(slot for slot in slots if slot[0] == 0 and slot[2] == 0)
        for lower, upper in zip(first_ranks, first_ranks[1:], strict=False):
            # replicas ordered by the cell of their rank (stage 0, rank 0); ties allowed
            # since one cell may hold several replicas' ranks
            adapter.add(self._cell_index(lower) <= self._cell_index(upper))
        used = {cell: adapter.total(self.x[slot, cell] for slot in slots)
                for cell in range(len(self._cells))}
        for block_a, block_b in _interchangeable_neighbours(self._network):
            adapter.add(adapter.total(used[c] for c in _cells_in(block_a, self._cell_of))
                        >= adapter.total(used[c] for c in _cells_in(block_b, self._cell_of)))

    def _cell_index(self, slot: Slot):
        return self._adapter.total(cell * self.x[slot, cell] for cell in range(len(self._cells)))


def _cells(network: NetworkModel) -> list[tuple[int, ...]]:
    """Tier-0 domains on a hierarchical network, single devices on a graph."""
    if not network.is_hierarchical:
        return [(device,) for device in range(network.num_devices)]
    size = network.cluster.network.domain_sizes()[0]
    return [tuple(range(start, min(start + size, network.num_devices)))
            for start in range(0, network.num_devices, size)]


def _cells_in(block: tuple[int, ...], cell_of: dict[int, int]) -> list[int]:
    return sorted({cell_of[device] for device in block})


class StructuredPlacement:
    """One of the structured space's placements (NetworkModel.structured_placements)."""

    def __init__(self, adapter, network: NetworkModel, sub: SubProblem):
        self._adapter, self._network = adapter, network
        self.placements: list[Placement] = network.structured_placements(
            sub.config, sub.num_stages, sub.dp)
        # select[index] == 1 iff the plan uses placements[index]
        self.select = {index: adapter.new_bool(f"select_{index}")
                       for index in range(len(self.placements))}
        adapter.add(adapter.total(self.select.values()) == 1)

    def cases(self, name: str, group: Group) -> list[Case]:
        found = []
        for index, placement in enumerate(self.placements):
            path = self._network.group_path([placement[s][r][j] for s, r, j in group])
            if path is not None:
                found.append(([self.select[index]], path))
        return found

    def replica_devices(self, stage: int, replica: int) -> list[tuple[list, tuple[int, ...]]]:
        """([select literal], the devices of the stage replica's ranks) per layout."""
        return [([self.select[index]], placement[stage][replica])
                for index, placement in enumerate(self.placements)]

    def paths(self, groups) -> list[Path]:
        """Every bottleneck one of ``groups`` has under some layout."""
        found = {self._network.group_path([placement[s][r][j] for s, r, j in group])
                 for placement in self.placements for group in groups}
        return sorted((path for path in found if path is not None),
                      key=lambda path: (path.bandwidth_Bps, path.latency_s))

    def hint(self, placement: Placement) -> None:
        for index, candidate in enumerate(self.placements):
            self._adapter.hint(self.select[index], int(candidate == placement))

    def contains(self, placement: Placement) -> bool:
        return placement in self.placements

    def extract(self, value, sub: SubProblem) -> Placement:
        chosen = [index for index, var in self.select.items() if value(var) == 1]
        return self.placements[chosen[0]]


def canonical_placement(placement: Placement, network: NetworkModel) -> Placement:
    """An equivalent placement that satisfies every symmetry cut of FullPlacement.

    Devices are relabelled by a network automorphism that puts used devices first
    (tree order on hierarchies, twin classes on graphs), then replicas are sorted
    by the device of their rank (stage 0, rank 0); neither changes any price.
    """
    used = {device for replicas in placement for ranks in replicas for device in ranks}
    if network.is_hierarchical:
        sizes = (1, *network.cluster.network.domain_sizes())
        order = _tree_order(0, len(sizes) - 1, sizes, used, network.num_devices)
    else:
        order = _twin_order(network, used)
    relabel = {old: new for new, old in enumerate(order)}
    moved = [[tuple(relabel[device] for device in ranks) for ranks in replicas]
             for replicas in placement]
    replica_order = sorted(range(len(moved[0])), key=lambda replica: moved[0][replica][0])
    return tuple(tuple(replicas[replica] for replica in replica_order) for replicas in moved)


def _tree_order(start: int, level: int, sizes: tuple[int, ...], used: set[int],
                num_devices: int) -> list[int]:
    """Old device ids of the block at ``start`` of ``sizes[level]`` devices, in canonical order."""
    end = min(start + sizes[level], num_devices)
    if level == 0:
        return list(range(start, end))
    children = [_tree_order(child, level - 1, sizes, used, num_devices)
                for child in range(start, end, sizes[level - 1])]
    full = [c for c in children if len(c) == sizes[level - 1]]
    partial = [c for c in children if len(c) != sizes[level - 1]]
    if level == 1:  # children are single devices: used ones first
        full.sort(key=lambda child: child[0] not in used)
    else:
        full.sort(key=lambda child: -sum(device in used for device in child))
    return [device for child in full + partial for device in child]


def _twin_order(network: NetworkModel, used: set[int]) -> list[int]:
    """Old device ids in canonical order: in every twin class, used devices take the lowest ids."""
    order = list(range(network.num_devices))
    for twins in _twin_classes(network):
        ranked = sorted(twins, key=lambda device: device not in used)
        for position, device in zip(twins, ranked, strict=True):
            order[position] = device
    return order


def _placement_of(devices: dict[Slot, int], sub: SubProblem) -> Placement:
    return tuple(tuple(tuple(devices[stage, replica, rank] for rank in range(sub.config.devices))
                       for replica in range(sub.dp))
                 for stage in range(sub.num_stages))


def _hierarchy_levels(network: NetworkModel) -> list[_Level]:
    """Tier domains (restricted to existing devices); a repeated partition is dropped,
    since tier_of picks the smallest tier holding a group."""
    levels, seen = [], set()
    sizes = network.cluster.network.domain_sizes()
    for tier, size in enumerate(sizes):
        domains = tuple(tuple(range(start, min(start + size, network.num_devices)))
                        for start in range(0, network.num_devices, size))
        if domains not in seen:
            seen.add(domains)
            levels.append(_Level(domains, network.tier_path(tier), tier=tier))
    return levels


def channel_cap(network: NetworkModel, tier: int, group_size: int) -> int:
    """The most channels worth telling apart for a group of ``group_size`` spanning ``tier``:
    1 on tier 0, else min(group_size // 2, max_useful_channels(tier)) (a group that leaves
    its tier-0 domain has two cells with k members each at least, and beyond the useful
    count every k prices alike)."""
    if tier == 0:
        return 1
    return max(1, min(group_size // 2, network.max_useful_channels(tier)))


def _bandwidth_levels(network: NetworkModel) -> list[_Level]:
    """Components of devices joined at widest-path bandwidth >= B, for every pair bandwidth B."""
    num_devices = network.num_devices
    pairs = {(a, b): network.pair_path(a, b) for a in range(num_devices)
             for b in range(a + 1, num_devices)}
    levels = []
    for bandwidth in sorted({path.bandwidth_Bps for path in pairs.values()}, reverse=True):
        component = list(range(num_devices))
        for (a, b), path in pairs.items():
            if path.bandwidth_Bps >= bandwidth:
                old, new = component[b], component[a]
                component = [new if c == old else c for c in component]
        domains = {}
        for device, root in enumerate(component):
            domains.setdefault(root, []).append(device)
        levels.append(_Level(tuple(tuple(d) for d in sorted(domains.values())), None,
                             bandwidth))
    if num_devices == 1 or len(levels[-1].domains) != 1:
        levels.append(_Level((tuple(range(num_devices)),), None,
                             levels[-1].bandwidth_Bps if levels else None))
    return levels


def _latency_values(network: NetworkModel) -> tuple:
    num_devices = network.num_devices
    return tuple(sorted({network.pair_path(a, b).latency_s for a in range(num_devices)
                         for b in range(a + 1, num_devices)})) or (0,)


def _interchangeable_neighbours(network: NetworkModel) -> list[tuple[tuple[int, ...], ...]]:
    """Pairs (A, B) of device blocks where A must use at least as many devices as B."""
    if network.is_hierarchical:
        return _tree_neighbours(network)
    return _twin_neighbours(network)


def _tree_neighbours(network: NetworkModel) -> list[tuple[tuple[int, ...], ...]]:
    num_devices = network.num_devices
    sizes = network.cluster.network.domain_sizes()  # tier-0 domains are cells already
    found = []
    for child_size, parent_size in zip(sizes, sizes[1:], strict=False):
        for parent_start in range(0, num_devices, parent_size):
            children = [tuple(range(start, start + child_size))
                        for start in range(parent_start, min(parent_start + parent_size,
                                                             num_devices), child_size)
                        if start + child_size <= num_devices]
            found.extend(zip(children, children[1:], strict=False))
    return found


def _twin_neighbours(network: NetworkModel) -> list[tuple[tuple[int, ...], ...]]:
    return [((a,), (b,)) for twins in _twin_classes(network)
            for a, b in zip(twins, twins[1:], strict=False)]


def _twin_classes(network: NetworkModel) -> list[list[int]]:
    """Classes of devices with the same path to every other device, ids ascending."""
    num_devices = network.num_devices
    classes: list[list[int]] = []
    for device in range(num_devices):
        for twins in classes:
            other = twins[0]
            if all(network.pair_path(device, c) == network.pair_path(other, c)
                   for c in range(num_devices) if c not in (device, other)):
                twins.append(device)
                break
        else:
            classes.append([device])
    return classes
