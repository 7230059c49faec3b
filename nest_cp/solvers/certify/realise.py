"""Turn a relaxation solution into a real plan: the upper-bound side of the certification.

The relaxation (:mod:`nest_cp.solvers.certify.relax`) fixes a split, a multiset of replica
paths (runs of stages kept inside tier-ℓ domains, separated by breaks of some
class) and per-stage sync classes, but not which domain holds which run.  This
module places them on the hierarchical network:

1. The path flow is decomposed into d replica paths; equal paths form a *type*.
2. Top capacity level (the largest constrained domains, e.g. tier-1 pods): a
   small CP-SAT model chooses how many runs of each (type, run index) every
   domain holds — capacities, consecutive runs of a replica in different domains
   (their boundary is then priced on the outer tier, as the relaxation assumed),
   and the runs' level-below items packed into each domain's sub-domains
   (arc-flow bin packing per domain).  Replicas then take domain sequences that
   realise the counts.
3. The level below takes the bins of that packing: each bin is a sub-domain
   filled with items of the sizes the flow says; deeper levels (four or more
   tiers) are filled first-fit decreasing.
4. Inside a tier-0 domain items take devices in id order.

Nothing here is trusted: the plan is priced by :func:`nest_cp.cost.evaluate.evaluate`
and counts only at the evaluator's price.  Any step that fails returns None; the
relaxation's bound is valid either way.
"""

from __future__ import annotations

import logging
from collections import Counter, defaultdict
from dataclasses import dataclass, field

import networkx as nx
from ortools.sat.python import cp_model

from nest_cp.cost.evaluate import evaluate
from nest_cp.model.network import NetworkModel
from nest_cp.model.plan import Plan, Stage
from nest_cp.solvers.certify.relax import NONE, Arc, Geometry
from nest_cp.solvers.certify.slices import SlicePlacement
from nest_cp.solvers.certify.split import Catalogue
from nest_cp.solvers.cpsat_solver import charge_run, new_solver
from nest_cp.solvers.exact.budget import Work

logger = logging.getLogger(__name__)

CHANNEL_SHARE = 0.05  # of a placement's work (or time) for the try with channel counts


@dataclass
class Run:
    """A run at one capacity level: stages ``first..last`` of the replicas ``members``
    (one replica, or every replica when they are bundled), with its sub-runs."""

    unit: int                  # the replica, or the bundle, it belongs to
    members: tuple[int, ...]
    first: int
    last: int
    level: int
    ranks: int                 # devices per stage: a for each member
    children: list = field(default_factory=list)
    domain: int | None = None  # index of the tier-``level`` domain it was given

    @property
    def stages(self) -> int:
        return self.last - self.first + 1

    @property
    def size(self) -> int:
        return self.stages * self.ranks


def replica_paths(flows: dict[Arc, int], starts: list[tuple]) -> list[tuple[Arc, ...]]:
    """Decompose the arc flow into one path per replica (deterministic order)."""
    remaining = dict(flows)
    out_of = defaultdict(list)
    for arc in sorted(flows, key=lambda a: (a.start, a.state, a.side, a.length, a.end_class)):
        out_of[arc.node].append(arc)
    paths = []
    for start in starts:
        while any(remaining[arc] for arc in out_of[start]):
            node, path = start, []
            while True:
                arc = next((a for a in out_of[node] if remaining[a] > 0), None)
                if arc is None:
                    return paths  # a flow that does not decompose: the caller checks the count
                remaining[arc] -= 1
                path.append(arc)
                if arc.end_class == NONE:
                    break
                node = arc.next_node
            paths.append(tuple(path))
    return paths


def runs_of(path: tuple[Arc, ...], unit: int, members: tuple[int, ...], ranks: int,
            levels: int, bundle_from: int) -> list[Run]:
    """The top-level runs of a replica (or of a bundle of ``members``), each holding its
    nested lower-level runs; below level ``bundle_from`` a bundle's runs are per member."""
    per_level = []
    for level in range(levels):
        groups = [members] if level >= bundle_from else [(m,) for m in members]
        runs = []
        for group in groups:
            first = None
            for arc in path:
                first = arc.start if first is None else first
                if arc.end_class == NONE or arc.end_class > level:
                    runs.append(Run(unit if len(group) > 1 else group[0], group, first,
                                    arc.start + arc.length - 1, level, ranks * len(group)))
                    first = None
        per_level.append(runs)
    for level in range(levels - 1, 0, -1):
        for parent in per_level[level]:
            parent.children = [child for child in per_level[level - 1]
                               if parent.first <= child.first and child.last <= parent.last
                               and set(child.members) <= set(parent.members)]
    return per_level[levels - 1]


def realise(catalogue: Catalogue, geo: Geometry, solution: dict,
            time_limit_s: float = 10.0, seed: int = 0, work: Work | None = None,
            work_limit: float | None = None) -> Plan | None:
    """A plan realising the relaxation solution, or None when a placement step fails.

    With ``work_limit`` each CP-SAT step may use that many work units (deterministic
    time), and every step's work and wall-clock stops are recorded in ``work``.

    Sync or gather groups the solution keeps inside tier-ℓ domains (class ℓ below the
    top) merge the replicas' runs through their stage there; when every replica takes
    the same path the replicas are then *bundled* (placed together) from level ℓ up.
    """
    shape = catalogue.shape
    levels, ranks = geo.levels, shape.config.devices
    paths = replica_paths(solution["flows"], geo.start_nodes())
    if len(paths) != shape.dp:
        return None
    if SlicePlacement.fits(catalogue, geo):
        # then, where the plan misses the solution's objective, with the channel counts
        prices = _term_prices(catalogue, solution["options"])
        exact = SlicePlacement(catalogue, geo, paths, solution, prices)
        plan = exact.solve(time_limit_s, seed, work, work_limit)
        if plan is not None:
            return _with_channels(catalogue, geo, paths, solution, prices, plan, time_limit_s,
                                  seed, work, work_limit)
    bundle_from = _bundle_level(solution["classes"], geo, paths, ranks, shape.dp)
    if bundle_from < levels:
        members = tuple(range(shape.dp))
        units = [runs_of(paths[0], shape.dp, members, ranks, levels, bundle_from)]
        unit_paths = [paths[0]]
    else:
        units = [runs_of(path, replica, (replica,), ranks, levels, levels)
                 for replica, path in enumerate(paths)]
        unit_paths = paths
    top = _TopLevel(geo, unit_paths, units)
    wanted = {} if bundle_from < levels else _sync_spread(solution["classes"], geo)
    if not top.solve(time_limit_s, seed, wanted, work, work_limit):
        return None
    level0 = top.place()
    if level0 is None:
        return None
    return _plan(catalogue, geo, level0, solution["options"])


def _with_channels(catalogue: Catalogue, geo: Geometry, paths, solution: dict, prices,
                   plan: Plan, time_limit_s: float, seed: int, work: Work | None,
                   work_limit: float | None) -> Plan:
    """``plan``, or a slice placement that also gives every sync group the ring channels the
    solution counted, when the evaluator prices ``plan`` above the solution's objective and
    the other one below ``plan``: that try gets CHANNEL_SHARE of the placement's limits (its
    channel rows can make the model infeasible or hard)."""
    if not solution.get("channels"):
        return plan
    instance, network = catalogue.instance, NetworkModel(catalogue.instance.cluster)
    first = evaluate(instance, plan, network)
    target = catalogue.shape.rounds * solution["tau_max"] + solution["t_sync"]
    if not first.feasible or first.objective_ticks <= target:
        return plan
    exact = SlicePlacement(catalogue, geo, paths, solution, prices, channels=True)
    other = exact.solve(CHANNEL_SHARE * time_limit_s, seed, work,
                        None if work_limit is None else CHANNEL_SHARE * work_limit)
    if other is None:
        return plan
    second = evaluate(instance, other, network)
    return other if second.feasible and second.objective_ticks < first.objective_ticks \
        else plan


def _term_prices(catalogue: Catalogue, options: list):
    """price(kind, stage, tier) of the terms a relaxation solution priced on a class."""
    prices, shape = catalogue.prices, catalogue.shape
    spans = catalogue.spans_of(options)

    def price(kind: str, stage: int, tier: int) -> int:
        span = spans[stage]
        if kind == "pair":
            return prices.transfer(span.last, tier)
        if kind == "dense":
            return prices.dense_sync(span, shape.dp, shape.zero, tier)
        if kind == "expert":
            return prices.expert_sync(span, shape.dp, shape.zero, tier)
        return prices.zero_gather(span, shape.dp, shape.zero, tier)
    return price


def _bundle_level(classes: dict[str, int], geo: Geometry, paths, ranks: int, dp: int) -> int:
    """The lowest level at which the replicas must be placed together (levels: none).

    Only when every replica takes the same path and the bundled runs fit the domains.
    """
    inner = min((tier for tier in classes.values()), default=len(geo.tiers))
    if inner >= geo.levels or dp == 1 or any(path != paths[0] for path in paths):
        return geo.levels
    runs = [arc.runs for arc in paths[0]]
    if all(run[level] * ranks * dp <= geo.capacity(level)
           for run in runs for level in range(inner, geo.levels)):
        return inner
    return geo.levels


class _TopLevel:
    """Runs of the top capacity level assigned to its domains by a CP-SAT count model."""

    def __init__(self, geo: Geometry, paths, replicas: list[list[Run]]):
        self.geo = geo
        self.level = geo.levels - 1
        self.replicas = replicas
        self.types = Counter(paths)
        self.type_of = [paths[r] for r in range(len(paths))]
        self.example = {path: replicas[paths.index(path)] for path in self.types}
        self.tier = geo.tiers[self.level]
        self.counts: dict = {}
        self.bins: dict[int, list[list[int]]] = {}

    @staticmethod
    def _size(run: Run) -> int:
        return run.size

    def solve(self, time_limit_s: float, seed: int, stages: dict[int, int],
              work: Work | None = None, work_limit: float | None = None) -> bool:
        """Find the counts; ``stages`` maps a stage whose sync groups must span several
        top domains (1) or lie in one (0) to that requirement (``work``, ``work_limit``:
        :func:`realise`)."""
        model = cp_model.CpModel()
        domains = range(len(self.tier.domains))
        # n[p, type, i] = runs number i of replicas of the type held by domain p
        n = {(p, path, i): model.new_int_var(0, count, f"n_{p}_{t}_{i}")
             for p in domains for t, (path, count) in enumerate(self.types.items())
             for i in range(len(self.example[path]))}
        for path, count in self.types.items():
            runs = self.example[path]
            for i in range(len(runs)):
                model.add(sum(n[p, path, i] for p in domains) == count)
                if i + 1 < len(runs):
                    for p in domains:  # consecutive runs apart (Hall's condition per pair)
                        model.add(n[p, path, i] + n[p, path, i + 1] <= count)
        for stage, inside in stages.items():
            covering = [(path, i) for path in self.types
                        for i, run in enumerate(self.example[path])
                        if run.first <= stage <= run.last]
            total = sum(self.types[path] for path, _ in covering)
            held = {p: sum(n[p, path, i] for path, i in covering) for p in domains}
            if inside:
                literals = [model.new_bool_var(f"in_{stage}_{p}") for p in domains]
                model.add_exactly_one(literals)
                for p, literal in zip(domains, literals, strict=True):
                    model.add(held[p] == total).only_enforce_if(literal)
            else:
                for p in domains:
                    model.add(held[p] <= total - 1)
        sub_items = {}
        for p in domains:
            model.add(sum(n[p, path, i] * self._size(run) for path in self.types
                          for i, run in enumerate(self.example[path]))
                      <= self.tier.domains[p])
            if self.level > 0:
                sub_items[p] = self._sub_packing(model, n, p)
        # interchangeable full domains: order by load (symmetry breaking)
        full = [p for p in domains if self.tier.domains[p] == self.tier.capacity]
        loads = {p: sum(n[p, path, i] * self._size(run) for path in self.types
                        for i, run in enumerate(self.example[path])) for p in full}
        for a, b in zip(full, full[1:], strict=False):
            model.add(loads[a] >= loads[b])
        # only an assignment is read (its plan is priced by the evaluator): no proof to confirm
        solver = new_solver(time_limit_s, workers=1, seed=seed, work_limit=work_limit)
        status = solver.solve(model)
        charge_run(work, solver, status, time_limit_s)
        if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
            logger.info("realise: top-level assignment %s", solver.status_name(status))
            return False
        self.counts = {key: solver.value(var) for key, var in n.items()}
        for p, arcs in sub_items.items():
            self.bins[p] = _decompose_bins(arcs, solver)
        return True

    def _sub_packing(self, model, n, p: int) -> dict:
        """Arc-flow packing of domain p's level-below items into its sub-domains."""
        sub = self.geo.tiers[self.level - 1]
        ratio = self.tier.capacity // sub.capacity
        capacities = Counter(sub.domains[p * ratio + k] for k in range(ratio)
                             if p * ratio + k < len(sub.domains))
        demand = defaultdict(list)
        for path in self.types:
            for i, run in enumerate(self.example[path]):
                for child in run.children:
                    demand[self._size(child)].append(n[p, path, i])
        arcs = {}
        for cap, count in capacities.items():
            into, out = defaultdict(list), defaultdict(list)
            for u in range(cap):
                for size in demand:
                    if u + size <= cap:
                        var = model.new_int_var(0, count, f"b_{p}_{cap}_{u}_{size}")
                        arcs[cap, u, size] = var
                        out[u].append(var)
                        into[u + size].append(var)
                loss = model.new_int_var(0, count, f"bl_{p}_{cap}_{u}")
                arcs[cap, u, 0] = loss
                out[u].append(loss)
                into[u + 1].append(loss)
            model.add(sum(out[0]) == count)
            for u in range(1, cap):
                model.add(sum(out[u]) == sum(into[u]))
        for size, holders in demand.items():
            model.add(sum(var for (cap, u, s), var in arcs.items() if s == size)
                      == sum(holders))
        return arcs

    def place(self) -> list[Run] | None:
        """Give every replica's runs domains realising the counts, then fill sub-domains."""
        domains = range(len(self.tier.domains))
        for path, count in self.types.items():
            members = [r for r in range(len(self.replicas)) if self.type_of[r] == path]
            previous: list[int | None] = [None] * count
            for i in range(len(self.example[path])):
                slots = {p: self.counts[p, path, i] for p in domains if self.counts[p, path, i]}
                chosen = _apart(previous, slots)
                if chosen is None:
                    return None
                for k, replica in enumerate(members):
                    self.replicas[replica][i].domain = chosen[k]
                previous = chosen
        if self.level == 0:
            return [run for runs in self.replicas for run in runs]
        return self._fill_below()

    def _fill_below(self) -> list[Run] | None:
        """Level below the top: each domain's bins (sub-domains) get items by size."""
        sub = self.geo.tiers[self.level - 1]
        ratio = self.tier.capacity // sub.capacity
        by_domain = defaultdict(list)
        for runs in self.replicas:
            for run in runs:
                by_domain[run.domain].extend(run.children)
        placed = []
        for p, children in by_domain.items():
            bins = list(self.bins.get(p, []))
            by_size = defaultdict(list)
            for child in sorted(children, key=lambda c: (c.unit, c.first)):
                by_size[child.size].append(child)
            sub_domains = [p * ratio + k for k in range(ratio)
                           if p * ratio + k < len(sub.domains)]
            if len(bins) > len(sub_domains):
                return None
            neighbours = _neighbour_map(children)
            for domain, sizes in zip(sub_domains, bins, strict=False):
                for size in sizes:
                    if not by_size[size]:
                        return None
                    # prefer a run none of whose neighbours already sits in this sub-domain
                    pick = next((c for c in by_size[size]
                                 if all(x.domain != domain for x in neighbours[id_of(c)])),
                                by_size[size][0])
                    by_size[size].remove(pick)
                    pick.domain = domain
            if any(by_size.values()):
                return None
            placed += children
        if self.level - 1 == 0:
            return placed
        return _first_fit_below(self.geo, placed, self.level - 1)


def _apart(previous: list[int | None], slots: dict[int, int]) -> list[int] | None:
    """Give replica k a domain from ``slots`` (domain -> how many) other than previous[k]
    where possible: a maximum flow from the replicas' previous domains to the slots
    (exact where a perfect assignment exists), the rest on any free slot."""
    graph = nx.DiGraph()
    groups = Counter(previous)
    for before, count in groups.items():
        graph.add_edge("source", ("from", before), capacity=count)
        for domain, free in slots.items():
            if domain != before:
                graph.add_edge(("from", before), ("to", domain), capacity=free)
    for domain, free in slots.items():
        graph.add_edge(("to", domain), "sink", capacity=free)
    _, flow = nx.maximum_flow(graph, "source", "sink")
    free = dict(slots)
    chosen: list[int | None] = [None] * len(previous)
    for k, before in enumerate(previous):
        for domain in sorted(slots):
            key = ("to", domain)
            if domain != before and flow[("from", before)].get(key, 0) > 0:
                flow[("from", before)][key] -= 1
                free[domain] -= 1
                chosen[k] = domain
                break
    for k in range(len(previous)):
        if chosen[k] is None:
            domain = next((d for d in sorted(free) if free[d] > 0), None)
            if domain is None:
                return None
            free[domain] -= 1
            chosen[k] = domain
    return chosen


def _sync_spread(classes: dict[str, int], geo: Geometry) -> dict[int, int]:
    """Stages whose sync or gather groups the relaxation put on the outermost tier (1: they
    must span several top-level domains) or inside one top-level domain (0)."""
    top = len(geo.tiers) - 1
    wanted: dict[int, int] = {}
    for name, tier in classes.items():
        stage = int(name.rsplit("_", 1)[1])
        if tier == top:
            wanted.setdefault(stage, 0)
        elif tier == geo.levels - 1:
            wanted[stage] = 1
    return wanted


def id_of(run: Run) -> tuple[int, int]:
    return (run.unit, run.first)


def _neighbour_map(runs: list[Run]) -> dict:
    by_replica = defaultdict(list)
    for run in runs:
        by_replica[run.unit].append(run)
    found = defaultdict(list)
    for own in by_replica.values():
        own.sort(key=lambda r: r.first)
        for a, b in zip(own, own[1:], strict=False):
            found[id_of(a)].append(b)
            found[id_of(b)].append(a)
    return found


def _decompose_bins(arcs: dict, solver) -> list[list[int]]:
    """Bins (lists of item sizes) of an arc-flow packing solution."""
    flow = {key: solver.value(var) for key, var in arcs.items()}
    bins = []
    for cap in sorted({key[0] for key in arcs}):
        while True:
            u, sizes = 0, []
            if not any(flow[key] for key in flow if key[0] == cap and key[1] == 0):
                break
            while u < cap:
                key = next(k for k in sorted(flow, key=lambda k: -k[2])
                           if k[0] == cap and k[1] == u and flow[k] > 0)
                flow[key] -= 1
                if key[2]:
                    sizes.append(key[2])
                u += key[2] or 1
            bins.append(sizes)
    return bins


def _first_fit_below(geo: Geometry, runs: list[Run], level: int) -> list[Run] | None:
    """Deeper levels (four or more tiers): first-fit decreasing inside each parent domain."""
    while level > 0:
        sub = geo.tiers[level - 1]
        ratio = geo.tiers[level].capacity // sub.capacity
        children = []
        by_parent = defaultdict(list)
        for run in runs:
            by_parent[run.domain].extend(run.children)
        for parent, items in by_parent.items():
            free = {parent * ratio + k: sub.domains[parent * ratio + k] for k in range(ratio)
                    if parent * ratio + k < len(sub.domains)}
            for item in sorted(items, key=lambda c: -c.size):
                size = item.size
                domain = next((d for d in free if free[d] >= size), None)
                if domain is None:
                    return None
                free[domain] -= size
                item.domain = domain
            children += items
        runs, level = children, level - 1
    return runs


def _plan(catalogue: Catalogue, geo: Geometry, level0: list[Run], options: list) -> Plan | None:
    """Fill each tier-0 domain with its runs' ranks in id order; the split from ``options``."""
    shape = catalogue.shape
    node = geo.tiers[0]
    starts = [sum(node.domains[:index]) for index in range(len(node.domains))]
    used = defaultdict(int)
    placement = [[[None] * shape.config.devices for _ in range(shape.dp)]
                 for _ in range(shape.num_stages)]
    for run in sorted(level0, key=lambda r: (r.domain, r.unit, r.first)):
        for stage in range(run.first, run.last + 1):
            for replica in run.members:
                for j in range(shape.config.devices):
                    if used[run.domain] >= node.domains[run.domain]:
                        return None
                    placement[stage][replica][j] = starts[run.domain] + used[run.domain]
                    used[run.domain] += 1
    spans = catalogue.spans_of(options)
    stages = tuple(Stage(span.first, span.last, span.mode) for span in spans)
    return Plan(shape.config, shape.microbatch, shape.zero, shape.dp, stages,
                tuple(tuple(tuple(ranks) for ranks in replicas) for replicas in placement))
