"""Exact placement of a relaxation solution, slice by slice, for shapes with few slices.

A *slice* is the piece of one stage replica that its intra groups keep inside one
tier-0 domain (all a ranks when TP and EP groups both lie there).  A CP-SAT model
puts every slice on a tier-0 domain so that every class the relaxation priced is
honoured by the real tiers:

- each pipeline boundary of each replica, and each sync / gather group of each
  stage, lands on a tier whose price is at most its class's price: inside the
  class's domain, and never on an inner tier that costs more (the NEST clusters'
  middle tier is slower than the outer one, so a pair priced on the outer tier must
  not share a middle-tier domain without sharing a node);
- domains hold at most their devices.

The relaxation's value is then the plan's price on every term it models, so a
feasible placement prices at the relaxation's value (the evaluator checks it) —
up to ring channels (cost model §5 a): the relaxation prices a group spanning
tier k >= 1 with the most channels its size allows, and a placed group with fewer
members per tier-0 domain prices higher, which the evaluator's price shows.
The model has one Boolean per (slice, tier-0 domain): used only when that is small.

No bound rests on this module: it only proposes plans, and a plan counts at the
evaluator's price alone (a failed or wrong placement loses an upper bound, never
a lower one).
"""

from __future__ import annotations

import logging
from collections import defaultdict

from ortools.sat.python import cp_model

from nest_cp.model.instance import CollectiveGroup
from nest_cp.model.plan import Plan, Stage
from nest_cp.solvers.certify.geometry import NONE, Geometry
from nest_cp.solvers.certify.split import Catalogue
from nest_cp.solvers.cpsat_solver import charge_run, new_solver

logger = logging.getLogger(__name__)

MAX_BOOLEANS = 40_000  # slices x tier-0 domains beyond which the model is not built


def pieces(geo: Geometry, config) -> list[tuple[int, ...]]:
    """Intra-stage ranks j of each slice: those the level-0 intra groups join."""
    joined = geo.joined_families[0]
    ranks = range(config.devices)
    if CollectiveGroup.TP in joined and CollectiveGroup.EP in joined:
        return [tuple(ranks)]
    if CollectiveGroup.TP in joined:
        return [tuple(j for j in ranks if j // config.tp == e) for e in range(config.ep)]
    if CollectiveGroup.EP in joined:
        return [tuple(j for j in ranks if j % config.tp == t) for t in range(config.tp)]
    return [(j,) for j in ranks]


class SlicePlacement:
    """The CP-SAT model of the module docstring for one relaxation solution."""

    def __init__(self, catalogue: Catalogue, geo: Geometry, paths, solution: dict, price,
                 channels: bool = False):
        """``price(kind, stage, tier)`` prices a boundary ("pair", stage = its sender) or a
        stage's sync term ("dense", "expert", "g") on a tier; ``channels``: also give each
        group of a term the ring channels the solution counted for it (``solution
        ["channels"]``): every tier-0 domain it touches holds at least that many members."""
        self.catalogue, self.geo, self.paths, self.price = catalogue, geo, paths, price
        self.shape = catalogue.shape
        self.classes = solution["classes"]
        self.channels = solution.get("channels", {}) if channels else {}
        self.options = solution["options"]
        self.pieces = pieces(geo, self.shape.config)
        self.model = cp_model.CpModel()
        node = geo.tiers[0]
        self.nodes = range(len(node.domains))
        self.slices = [(r, s, q) for r in range(self.shape.dp)
                       for s in range(self.shape.num_stages) for q in range(len(self.pieces))]
        # x[slice, node] == 1 iff the slice's ranks run on a device of the tier-0 domain
        self.x = {(u, n): self.model.new_bool_var(f"x_{u}_{n}") for u in self.slices
                  for n in self.nodes}

    @staticmethod
    def fits(catalogue: Catalogue, geo: Geometry) -> bool:
        shape = catalogue.shape
        count = shape.dp * shape.num_stages * len(pieces(geo, shape.config))
        return count * len(geo.tiers[0].domains) <= MAX_BOOLEANS

    # ------------------------------------------------------------ domains

    def _inside(self, u, level: int, domain: int):
        """1 iff slice u sits in the tier-``level`` domain ``domain`` (a sum of x)."""
        ratio = self.geo.capacity(level) // self.geo.capacity(0)
        return sum(self.x[u, n] for n in range(domain * ratio, (domain + 1) * ratio)
                   if n < len(self.geo.tiers[0].domains))

    def _domains(self, level: int) -> range:
        return range(len(self.geo.tiers[level].domains))

    def _together(self, group: list, level: int):
        """A literal that is 1 iff every slice of ``group`` lies in one tier-``level`` domain."""
        model = self.model
        literal = model.new_bool_var("")
        first = group[0]
        for other in group[1:]:
            for d in self._domains(level):
                model.add(self._inside(first, level, d) == self._inside(other, level, d)
                          ).only_enforce_if(literal)
        for d in self._domains(level):  # not together: no domain holds them all
            model.add(sum(self._inside(u, level, d) for u in group) <= len(group) - 1
                      ).only_enforce_if(literal.Not())
        return literal

    def _on_allowed_tiers(self, group: list, priced: int, cost) -> None:
        """The group lies on a tier costing at most the tier ``priced`` it was priced on.

        A group's tier is the innermost level holding it together (the outermost tier
        when none does); every tier costing more than ``priced`` is ruled out.
        """
        levels, top = self.geo.levels, len(self.geo.tiers) - 1
        ceiling = cost(priced)
        banned = [tier for tier in range(top + 1) if cost(tier) > ceiling]
        if not banned:
            return
        together = {level: self._together(group, level) for level in range(levels)}
        for tier in banned:
            if tier == 0:
                self.model.add(together[0] == 0)
            elif tier < levels:
                self.model.add_implication(together[tier], together[tier - 1])
            else:
                self.model.add(together[levels - 1] == 1)

    # ------------------------------------------------------------ constraints

    def build(self) -> None:
        model, shape = self.model, self.shape
        size = len(self.pieces[0])
        for u in self.slices:
            model.add_exactly_one(self.x[u, n] for n in self.nodes)
        for n in self.nodes:
            model.add(sum(size * self.x[u, n] for u in self.slices)
                      <= self.geo.tiers[0].domains[n])
        for r, path in enumerate(self.paths):
            for arc in path:
                last = arc.start + arc.length - 1
                for stage in range(arc.start, last + (0 if arc.end_class == NONE else 1)):
                    if stage + 1 >= shape.num_stages:
                        continue
                    cls = 0 if stage < last else arc.end_class
                    for q in range(len(self.pieces)):
                        self._on_allowed_tiers([(r, stage, q), (r, stage + 1, q)], cls,
                                               lambda k, s=stage: self.price("pair", s, k))
        for name, cls in self.classes.items():
            kind, stage = name.rsplit("_", 1)
            stage = int(stage)
            for group in self._sync_groups(kind, stage):
                if len(group) > 1:
                    self._on_allowed_tiers(group, cls,
                                           lambda k, n=kind, s=stage: self.price(n, s, k))
            if name in self.channels:
                for members in self._member_counts(kind, stage):
                    self._channel_rows(members, self.channels[name])

    def _member_counts(self, kind: str, stage: int) -> list[dict]:
        """Per sync or gather group of ``stage``: slice -> how many of its members it holds."""
        config, dp = self.shape.config, self.shape.dp
        if kind == "dense":  # ranks with one tensor index, over replicas and expert indices
            held = [[sum(1 for j in ranks if j % config.tp == t) for ranks in self.pieces]
                    for t in range(config.tp)]
        else:  # one rank j over the replicas
            held = [[int(j in ranks) for ranks in self.pieces] for j in range(config.devices)]
        unique = {tuple(row) for row in held}
        return [{(r, stage, q): row[q] for r in range(dp) for q in range(len(self.pieces))
                 if row[q]} for row in unique]

    def _channel_rows(self, members: dict, channels: int) -> None:
        """Every tier-0 domain the group touches holds at least ``channels`` members."""
        total = sum(members.values())
        for n in self.nodes:
            held = sum(count * self.x[u, n] for u, count in members.items())
            touched = self.model.new_bool_var("")
            self.model.add(held >= channels * touched)
            self.model.add(held <= total * touched)

    def _sync_groups(self, kind: str, stage: int) -> list[list]:
        """Slices holding each sync or gather group of ``stage``."""
        config, dp = self.shape.config, self.shape.dp
        if kind == "dense":  # ranks with one tensor index, over replicas and expert indices
            members = [{q for q, ranks in enumerate(self.pieces)
                        if any(j % config.tp == t for j in ranks)} for t in range(config.tp)]
        else:  # one rank j over the replicas
            members = [{q for q, ranks in enumerate(self.pieces) if j in ranks}
                       for j in range(config.devices)]
        unique = {frozenset(m) for m in members}
        return [[(r, stage, q) for r in range(dp) for q in sorted(m)] for m in unique]

    # ------------------------------------------------------------ solve

    def solve(self, time_limit_s: float, seed: int = 0, work=None,
              work_limit: float | None = None) -> Plan | None:
        """A placement, within ``time_limit_s`` (and ``work_limit`` work units; ``work``
        records what the run did: cpsat_solver.charge_run)."""
        self.build()
        # only a plan is read (and priced by the evaluator): no proof to confirm
        solver = new_solver(max(0.1, time_limit_s), workers=1, seed=seed, work_limit=work_limit)
        status = solver.solve(self.model)
        charge_run(work, solver, status, max(0.1, time_limit_s))
        if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
            logger.info("slice placement: %s", solver.status_name(status))
            return None
        return self._plan(solver)

    def _plan(self, solver) -> Plan:
        shape, node = self.shape, self.geo.tiers[0]
        starts = [sum(node.domains[:index]) for index in range(len(node.domains))]
        used = defaultdict(int)
        placement = [[[None] * shape.config.devices for _ in range(shape.dp)]
                     for _ in range(shape.num_stages)]
        for (r, s, q) in self.slices:
            n = next(n for n in self.nodes if solver.value(self.x[(r, s, q), n]))
            for j in self.pieces[q]:
                placement[s][r][j] = starts[n] + used[n]
                used[n] += 1
        spans = self.catalogue.spans_of(self.options)
        stages = tuple(Stage(span.first, span.last, span.mode) for span in spans)
        return Plan(shape.config, shape.microbatch, shape.zero, shape.dp, stages,
                    tuple(tuple(tuple(ranks) for ranks in replicas) for replicas in placement))
