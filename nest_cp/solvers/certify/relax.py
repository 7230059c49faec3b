r"""A relaxation of the full space for one shape, solved by CP-SAT: the strong lower bound.

Covers the *main* plans of a shape (c, b, S, d, z) on a hierarchical network:
every intra-layer group of a present family on its innermost admitting tier
k_min (:mod:`nest_cp.solvers.certify.geometry`, which also defines tiers, classes,
pieces, items and arcs); the other plans are bounded by the raised bound
(:class:`nest_cp.solvers.certify.bounds.FastBounds`).

Variables.  y[s, o]: stage s takes option o (memory-feasible spans,
:mod:`~nest_cp.solvers.certify.split`); flow[arc]: replicas whose path takes the
arc (d units); combo[s, c]: some replica's stage s has combo c; per stage, a class
literal for its dense-sync, expert-sync and ZeRO-3 gather groups; arc-flow bin
packing counts per capacity level; τ_max, T_sync.

Claim.  Every main plan P of the shape gives an assignment satisfying every
constraint with objective (m + S − 1)·τ_max + T_sync <= T(P).  Hence the model's
optimum — or CP-SAT's proven bound when stopped — is at most the least main plan;
with the cutoff "objective <= incumbent − 1", INFEASIBLE proves no main plan is
below the incumbent.  (A solver's OPTIMAL or INFEASIBLE is a claim until a second
solve agrees: the solver construction below confirms it, DESIGN §4.)

Proof.  Fix a main plan P.  Set y to P's split (its stages fit, so their options
are offered; a block chain's counts sum to n and explicit spans chain up — the
linking constraints), flow[arc] to the number of replicas whose path, by the
replica-path lemma (geometry), takes that arc, combo[s, c] = 1 iff some replica
uses c at s, each class literal to the largest tier of its groups in P, and
τ_max, T_sync to the least values the constraints allow.  Then:

1. Flow: each replica is one unit from its start node (its side, when sides are
   tracked) along a path of arcs, so conservation and Σ supply = d hold; the
   combo links (flow <= d·combo, Σ flow >= combo) hold by the choice of combo,
   and every stage has some combo (every stage has a replica).
2. τ rows: for a used combo (c_in, c_out) at stage s, take a replica r using it.
   τ(s, r) (DESIGN §3, §3.2 a, f) >= base_s + transfer(b = s−1, c_in) +
   transfer(b = s, c_out) + gather_s: compute and rerun are the evaluator's
   integers; every collective of a present family costs its slowest group, all on
   k_min (main plan), so at least its tier-k_min price (exactly, but for the
   group's ring channels, which chain counts at the most its size allows, cost
   model §5 a; with ``tp_comm_overlap`` and k_min[TP] = 0 every stage replica's
   TP groups lie on tier 0, so it pays exactly chain's exposed tier-0 price, §5 e,
   and chain's "TP overlap" lemma covers every case); each receive costs its
   slowest pair, at least the pair on the boundary's class tier (a max is at
   least any of its terms; tiers need not be monotone in price), with volume
   the out_bytes of the sender's last layer (boundary b = stage b's); the ZeRO-3
   gathers (z = 3: one group per rank j over the d replicas, §3) cost their
   slowest group, at least the price on the class tier (channels: step 3a).  So
   τ_max(P) is at least every row; the redundant rows τ_max >= base_s follow.
3. Sync: T_sync(P) = max over stages of the exposed sync (§3.2 c, cost model
   §5 c, d): the gradient phase RS_s (all-reduce, or reduce-scatter for z >= 1)
   and, for z ∈ {1, 2}, the weight gather AG_s, each the slowest dense group's plus
   the slowest expert group's.  Each term (dense, expert) has one class literal
   and two parts, its two phases priced on the class tier with the channel count
   of step 3a; in P a group G* on the class tier K (the largest its groups lie on)
   pays both phases on its one path, which is exactly that price (step 3a), and the
   slowest group pays at least as much in each phase.  So RS_s >= Σ reduce parts and
   AG_s >= Σ gather parts.  The exposed gradient phase is RS_s, or with
   ``overlap_grad_reduce`` max(0, RS_s − R_s) (R_s the stage's Σ bwd), at least
   Σ reduce parts − R_s and at least 0 (its variable's domain); likewise the
   weight gather with ``overlap_param_gather`` and F_s (Σ fwd).  The exposed sync
   is their sum.
3a. Channels (cost model §5 a; DESIGN §3.3 a).  Every term of size g (dense sync
   d·e, expert sync and ZeRO-3 gathers d) on a tier K where a g-group can run more
   than one ring channel (``Tier.channel_cap`` = most >= 2; K >= 1) has one
   literal per count c = 1..most; set the one for c = min(k*, most), k* G*'s fewest
   members in a tier-0 domain it touches.  (i) c <= most: G* leaves every tier-0
   domain (K >= 1), so it touches T >= max(2, ⌈g/G_0⌉) of them, each holding
   >= k* members, so k* <= g // T (``Tier.collective_path``'s proof).  (ii) Price:
   G*'s path is β = max(β_K, min(k*·β_K, β_0)) with tier K's latency, and the
   channel paths stop getting faster at their list's length, so chain's price on
   ``channel_path(c)`` is G*'s price, not more (the (c, tier) part rows).  (iii)
   Capacity: T·k* <= g, so T <= g // k* <= g // c, and each touched domain holds
   k* >= c members on distinct devices, so has >= c devices.  Every member (s, r, j) of G*
   lies in a level-0 item (its piece over the level-0 run through s, the arc's
   ``runs[0]`` stages; the lemma of geometry) inside one tier-0 domain, the one
   holding the member, so a touched one; per replica the members fall in
   ``merged(0, widen)`` ranks' worth of pieces (step 5), and items of different
   replicas or pieces are disjoint (the placement is injective).  So
   Σ_r runs[0]·merged <= the devices of the touched domains <= the sum of the
   g // c largest tier-0 domains of >= c devices (partial domains counted as they
   are), the row enforced for c >= 2.
   (Tiers with one path, tier 0 included, get the class literal alone, priced on
   the tier's path.  Built with ``channels=False`` every tier does, priced on
   ``Tier.collective_path``, the most channels a group of its size can have: at
   most G*'s price by the same proof, so that model is a relaxation too.)
4. Packing, level ℓ: by the lemma every maximal level-ℓ run R of every replica
   gives a/J_ℓ disjoint items of |R|·J_ℓ devices, each inside one tier-ℓ domain
   (a run cut early by a higher break is at worst split in two, which packs no
   worse); the run ends at the arc that *emits* ℓ, whose ``runs[ℓ]`` is |R|.  So the
   items fit the tier-ℓ domains (their device counts, partial domains included),
   which the arc-flow model states exactly for one level; levels are packed
   independently (a relaxation).  With sides (two top-level domains, J = a at the
   top level), each side's top-level runs lie in that domain: Σ over its runs of
   |R|·a <= its devices.
5. Merge: if a sync or gather term has class <= ℓ, each of its groups (one rank
   index over the d replicas; for dense sync, one tensor index over the d·e ranks)
   lies in one tier-ℓ domain D.  Each group member (s, r, j) lies in an item of
   length >= the arc's ``runs[ℓ]`` (the level-ℓ run through s up to the arc's end)
   inside one tier-ℓ domain, which must be D; the items of different replicas are
   disjoint, and a replica's group members fall in ``merged(ℓ, widen)`` ranks'
   worth of pieces (the joined families, widened by EP for the dense sync).  So
   Σ_r runs[ℓ]·merged <= G_ℓ.
5a. Sides (geometry: two top-level domains, a stage replica's a ranks in one of
   them, the arc's ``side``).  Every group of a term at stage s holds a member of
   every replica's stage s (dense sync: rank j's tensor index over the d·e ranks;
   expert sync and ZeRO-3 gathers: rank j over the d replicas; the evaluator's
   ``_sync_ticks`` and ZeRO-3 gather).  If all d replicas' stage s lie in one
   top-level domain, so does every group: the class is at most the top capacity
   level.  Otherwise two replicas' stage s lie in different top-level domains, and
   a group holding a member of each lies in no top-level domain: the outermost
   tier, the largest, so the class is the outermost tier.  So the outermost class
   literal holds exactly when the side-0 flow through stage s (each replica's arc
   through s carries its side) is neither 0 nor d; both directions are rows.
5b. Nesting.  The expert-sync group of rank j = (t_index, e_index) at stage s (rank
   j over the d replicas) is a subset of the dense-sync group of t_index (over the
   d·e ranks of the replicas and expert indices), and the ZeRO-3 gather group of
   rank j is the same set as its expert-sync group.  A subset lies on a tier no
   larger than its superset's (domains are nested), and a class is a maximum over
   groups, so class(g_s) = class(expert_s) <= class(dense_s): for every tier k,
   Σ_{k' >= k} expert literals <= Σ_{k' >= k} dense literals, and the gather and
   expert literals are equal tier by tier (both admit the same group size d).
   (Tiers need not be monotone in price: on the TPUv4 fat-tree the global tier is
   faster than the pod tier, and without these rows the model priced the expert
   sync on the global tier while its dense sync, and so every expert group, stayed
   in one pod.)
6. Floors and domains: the floor rows (τ_max >= τ_path, T_sync >= σ_lb) are met
   by τ_max(P) and T_sync(P), since τ_path and σ_lb are proven bounds on them
   (paths, bounds).  So the least values of τ_max and T_sync are at most τ_max(P)
   and T_sync(P), which lie inside the variables' domains: every term of P is at
   most its largest price over the tiers admitting its group and the channel counts
   (one channel is the dearest; each part's domain is its largest over every case),
   and the domains
   reach the largest base plus two largest transfers plus every gather term's
   largest (τ_max), and the sum of every stage's largest syncs (T_sync).
7. Objective: (m + S − 1)·τ_max + T_sync <= (m + S − 1)·τ_max(P) + T_sync(P) = T(P)
   (§3).  ∎

Dropped, so the model stays a relaxation: the nesting of levels, which domain
holds what beyond two top-level domains, and every break's "different inner
domain" side condition.
"""

from __future__ import annotations

import dataclasses
import math
from collections import defaultdict
from dataclasses import dataclass, field

from ortools.sat.python import cp_model

from nest_cp.model.instance import CollectiveGroup
from nest_cp.solvers.certify.chain import LayerPrices
from nest_cp.solvers.certify.geometry import NONE, Arc, Geometry, replica_arcs
from nest_cp.solvers.certify.split import Catalogue, StageOption
from nest_cp.solvers.cpsat_solver import CheckedSolver


@dataclass
class RelaxOutcome:
    """What CP-SAT proved about one shape's relaxation."""

    status: str            # optimal, feasible, infeasible (nothing below the cutoff), unknown
    bound: float           # a valid lower bound on every plan of the shape (intra at k_min)
    objective: int | None  # the relaxation's value of the solution found
    solution: dict = field(default_factory=dict)
    wall_time_s: float = 0.0
    # the second proof (cpsat_solver.CheckedSolver): "agreed" (the status is proven twice),
    # "disagreed" (the two runs contradict each other: logged, the model saved), "unchecked"
    # (the first run's proof could not be checked in time) or "none" (no proof was claimed)
    second_proof: str = "none"
    work: float = 0.0  # deterministic work units both runs did (budget.Work)
    wall_capped: bool = False  # a run ended near its time limit without a proof


class Relaxation:
    """The CP-SAT model of the module docstring for one shape."""

    def __init__(self, catalogue: Catalogue, geo: Geometry, arcs: list[Arc] | None = None,
                 channels: bool = True):
        """``channels``: count ring channels from the model's placement (step 3a); False
        prices every group with the most channels a group of its size can have (chain's
        prices, a weaker bound whose model CP-SAT solves several times faster)."""
        self.catalogue, self.geo = catalogue, geo
        self.channels = channels
        training = catalogue.instance.training
        self.overlap = training.overlap_grad_reduce
        self.overlap_gather = training.overlap_param_gather
        self.prices: LayerPrices = catalogue.prices
        self.shape = catalogue.shape
        self.model = cp_model.CpModel()
        self.arcs = arcs if arcs is not None else replica_arcs(self.shape.num_stages, geo)
        self.classes: dict[str, dict[int, cp_model.IntVar]] = {}  # term -> tier -> literal
        # term -> tier -> channel count -> literal (tiers where a group can run several)
        self.counts: dict[str, dict[int, dict[int, cp_model.IntVar]]] = {}
        self._term_upper: dict[str, int] = {}
        self._build()

    # ------------------------------------------------------------ model

    def _build(self) -> None:
        model, shape, cat = self.model, self.shape, self.catalogue
        stages = range(shape.num_stages)
        # y[s, o] == 1 iff stage s takes option o
        self.y = {(s, index): model.new_bool_var(f"y_{s}_{index}")
                  for s in stages for index in range(len(cat.options[s]))}
        for s in stages:
            model.add_exactly_one(self.y[s, i] for i in range(len(cat.options[s])))
        self._link_split()
        self._flow()
        tau_max = self._tau()
        t_sync = self._sync()
        self.objective = shape.rounds * tau_max + t_sync
        model.minimize(self.objective)

    def _priced(self, stage: int, price) -> cp_model.LinearExpr:
        """Σ_o y[stage, o]·price(o): the price of the stage's option."""
        options = self.catalogue.options[stage]
        return sum(self.y[stage, i] * int(price(o)) for i, o in enumerate(options)
                   if price(o))

    def _upper(self, stage: int, price) -> int:
        return max((int(price(o)) for o in self.catalogue.options[stage]), default=0)

    def _link_split(self) -> None:
        model, cat = self.model, self.catalogue
        if cat.chain is not None:
            model.add(sum(self.y[s, i] * o.blocks for s in range(cat.num_stages)
                          for i, o in enumerate(cat.options[s])) == cat.chain.blocks)
            return
        for s in range(cat.num_stages - 1):
            ends = {o.span.last for o in cat.options[s]} | \
                {o.span.first - 1 for o in cat.options[s + 1]}
            for last in ends:
                model.add(sum(self.y[s, i] for i, o in enumerate(cat.options[s])
                              if o.span.last == last)
                          == sum(self.y[s + 1, i] for i, o in enumerate(cat.options[s + 1])
                                 if o.span.first == last + 1))

    def _flow(self) -> None:
        """Replica paths (flow of d units), combos, merged-sync capacities and packing."""
        model, shape, geo = self.model, self.shape, self.geo
        dp = shape.dp
        # flow[arc] = number of replicas whose path takes the arc
        self.flow = {index: model.new_int_var(0, dp, f"f_{index}")
                     for index in range(len(self.arcs))}
        out_of, into = defaultdict(list), defaultdict(list)
        for index, arc in enumerate(self.arcs):
            out_of[arc.node].append(index)
            if arc.end_class != NONE:
                into[arc.next_node].append(index)
        starts = geo.start_nodes()
        # supply[node] = replicas whose path starts there (a side, when sides are tracked)
        supply = {node: model.new_int_var(0, dp, f"start_{node[2]}") for node in starts}
        model.add(sum(supply.values()) == dp)
        for node in set(out_of) | set(into) | set(starts):
            model.add(sum(self.flow[i] for i in out_of[node]) - sum(
                self.flow[i] for i in into[node]) == supply.get(node, 0))
        # combo[s, (in, out)] == 1 iff some replica's stage s has that pair of classes
        self.combo = {}
        by_combo = defaultdict(list)
        for index, arc in enumerate(self.arcs):
            for stage, key in arc.combos():
                by_combo[stage, key].append(index)
        for (stage, key), indices in by_combo.items():
            literal = model.new_bool_var(f"c_{stage}_{key[0]}_{key[1]}")
            self.combo[stage, key] = literal
            for i in indices:
                model.add(self.flow[i] <= dp * literal)
            # redundant: the literal is 1 exactly when some replica uses the combo
            model.add(sum(self.flow[i] for i in indices) >= literal)
        for stage in range(shape.num_stages):
            # redundant: every stage has some replica, so some combo
            model.add_bool_or(literal for (s, _), literal in self.combo.items() if s == stage)
        self._pack()

    def _pack(self) -> None:
        """Arc-flow bin packing of every capacity level's items into its domains."""
        model, geo = self.model, self.geo
        for level in range(geo.levels):
            joined = geo.joined[level]
            pieces = geo.ranks // joined
            if geo.sides and level == geo.levels - 1:
                # two top-level domains, each path's runs labelled with theirs: exact counts
                for side, devices in enumerate(geo.tiers[level].domains):
                    model.add(sum(self.flow[i] * (arc.runs[level] * joined * pieces)
                                  for i, arc in enumerate(self.arcs)
                                  if arc.side == side and level in arc.emits) <= devices)
                continue
            demand = defaultdict(list)  # item size -> [(flow index, items per unit flow)]
            for index, arc in enumerate(self.arcs):
                if level in arc.emits:
                    demand[arc.runs[level] * joined].append(index)
            if not demand:
                continue
            sizes = sorted(demand)
            used = {size: [] for size in sizes}
            tier = geo.tiers[level]
            capacities = defaultdict(int)
            for devices in tier.domains:
                capacities[devices] += 1
            for cap, count in capacities.items():
                # x[cap, u, size] = items of ``size`` starting at position u in domains of cap
                into = defaultdict(list)
                out = defaultdict(list)
                for u in range(cap):
                    for size in sizes:
                        if u + size <= cap:
                            var = model.new_int_var(0, count, f"x_{level}_{cap}_{u}_{size}")
                            out[u].append(var)
                            into[u + size].append(var)
                            used[size].append(var)
                    loss = model.new_int_var(0, count, f"loss_{level}_{cap}_{u}")
                    out[u].append(loss)
                    into[u + 1].append(loss)
                model.add(sum(out[0]) == count)
                for u in range(1, cap):
                    model.add(sum(out[u]) == sum(into[u]))
            for size in sizes:
                model.add(sum(used[size]) >= pieces * sum(self.flow[i] for i in demand[size]))

    def _tau(self):
        model, shape, prices, geo = self.model, self.shape, self.prices, self.geo
        stages = range(shape.num_stages)
        pair_tiers = [t.index for t in geo.tiers if t.admits(2)]

        def base(option: StageOption) -> int:
            return prices.compute(option.span) + sum(
                prices.collectives(option.span, family, tier)
                for family, tier in geo.k_min.items())

        # transfer[b, k] = the transfer of boundary b's volume on tier k
        transfer = {}
        for b in range(shape.num_stages - 1):
            for k in pair_tiers:
                upper = self._upper(b, lambda o, k=k: prices.transfer(o.span.last, k))
                var = model.new_int_var(0, upper, f"p_{b}_{k}")
                model.add(var == self._priced(b, lambda o, k=k: prices.transfer(o.span.last, k)))
                transfer[b, k] = var
        gather = {s: self._class_term(f"g_{s}", s, shape.dp,
                                      [lambda o, k, c: prices.zero_gather(
                                          o.span, shape.dp, shape.zero, k, c)], None)[0]
                  for s in stages} if shape.zero == 3 and shape.dp > 1 else {}
        upper = max(self._upper(s, base) for s in stages) + 2 * max(
            (self._upper(b, lambda o, k=k: prices.transfer(o.span.last, k))
             for b in range(shape.num_stages - 1) for k in pair_tiers), default=0) + sum(
            self._term_upper[name] for name in self._term_upper if name.startswith("g_"))
        self.tau_max = model.new_int_var(0, upper, "tau_max")
        self.base = {}
        for s in stages:
            compute = model.new_int_var(0, self._upper(s, base), f"base_{s}")
            model.add(compute == self._priced(s, base))
            self.base[s] = compute
            model.add(self.tau_max >= compute)  # redundant: bounds τ from the split alone
        for (stage, (cin, cout)), literal in self.combo.items():
            parts = [self.base[stage]]
            if cin != NONE:
                parts.append(transfer[stage - 1, cin])
            if cout != NONE:
                parts.append(transfer[stage, cout])
            if stage in gather:
                parts.append(gather[stage])
            model.add(self.tau_max >= sum(parts)).only_enforce_if(literal)
        return self.tau_max

    def _class_term(self, name: str, stage: int, group: int, prices: list,
                    widen: CollectiveGroup | None) -> list:
        """A stage-level term priced on its class (one literal per tier admitting ``group``)
        and, on a tier where a ``group``-sized group can run several ring channels, on the
        channel count of one group on that tier (one literal per count, step 3a), with the
        merged-run capacity its class implies at every level at or above it and the
        tier-0 capacity its channel count implies: one variable per part (``prices``: the
        phases its groups run on one path, as price(option, tier, channels), channels None
        where one path prices them all), all on the one class.  ``_term_upper[name]`` is
        the sum of the parts' largest prices."""
        model = self.model
        tiers = [t.index for t in self.geo.tiers if t.admits(group)]
        # literals[k] == 1 iff the term's groups lie on tier k at worst
        literals = {k: model.new_bool_var(f"{name}_k{k}") for k in tiers}
        model.add_exactly_one(literals.values())
        cases = []  # (literal, tier, channels): the cases one of which holds
        for k, literal in literals.items():
            most = self.geo.tiers[k].channel_cap(group) if self.channels else 1
            if most <= 1:
                cases.append((literal, k, None))
                continue
            # counts[c] == 1 iff the term's class is k and a group on tier k runs c channels
            # (c = most: at least that many)
            counts = {c: model.new_bool_var(f"{name}_k{k}_c{c}") for c in range(1, most + 1)}
            model.add(sum(counts.values()) == literal)
            self.counts.setdefault(name, {})[k] = counts
            cases.extend((counts[c], k, c) for c in counts)
            self._channels(name, stage, group, counts, widen)
        parts = []
        self._term_upper[name] = 0
        for index, price in enumerate(prices):
            upper = max(self._upper(stage, lambda o, k=k, c=c, p=price: p(o, k, c))
                        for _, k, c in cases)
            part = model.new_int_var(0, upper, f"{name}_{index}")
            self._term_upper[name] += upper
            for literal, k, c in cases:
                model.add(part >= self._priced(stage, lambda o, k=k, c=c, p=price: p(o, k, c))
                          ).only_enforce_if(literal)
            parts.append(part)
        self.classes[name] = literals
        self._merge(name, stage, literals, widen)
        self._sides(name, stage, literals)
        return parts

    def _items(self, stage: int, level: int, widen: CollectiveGroup | None):
        """Σ over replicas of the devices of the level-``level`` items that hold one sync
        group's members at ``stage``: run length through the stage × merged ranks."""
        per_replica = self.geo.merged(level, widen if widen in self.geo.sizes else None)
        return sum(self.flow[i] * (arc.runs[level] * per_replica)
                   for i, arc in enumerate(self.arcs)
                   if arc.start <= stage < arc.start + arc.length)

    def _merge(self, name: str, stage: int, literals: dict,
               widen: CollectiveGroup | None) -> None:
        """Class <= ℓ puts the groups, and so the level-ℓ runs of every replica through
        ``stage`` that hold their ranks, inside one tier-ℓ domain."""
        model, geo = self.model, self.geo
        for level in range(geo.levels):
            within = [literal for k, literal in literals.items() if k <= level]
            if not within:
                continue
            inside = model.new_bool_var(f"{name}_in{level}")
            model.add(sum(within) == inside)  # one class literal holds
            model.add(self._items(stage, level, widen) <= geo.capacity(level)
                      ).only_enforce_if(inside)

    def _nest(self, stage: int) -> None:
        """Nested groups order their classes (step 5b): every expert-sync group of the
        stage lies inside a dense-sync group, and the ZeRO-3 gather groups are the
        expert-sync groups, so class(g) == class(expert) <= class(dense)."""
        dense, expert = self.classes.get(f"dense_{stage}"), self.classes.get(f"expert_{stage}")
        gather = self.classes.get(f"g_{stage}")
        model = self.model
        if expert is not None and gather is not None:
            for k, literal in expert.items():
                model.add(literal == gather[k])
        if expert is not None and dense is not None:
            for k in expert:
                model.add(sum(lit for j, lit in expert.items() if j >= k)
                          <= sum(lit for j, lit in dense.items() if j >= k))

    def _sides(self, name: str, stage: int, literals: dict) -> None:
        """With sides tracked, the term's class is the outermost tier exactly when the
        replicas' ``stage`` lies on both sides (step 5a)."""
        geo, dp = self.geo, self.shape.dp
        top = len(geo.tiers) - 1
        if not geo.sides or top not in literals or top < geo.levels:
            return
        model = self.model
        on_first = sum(self.flow[i] for i, arc in enumerate(self.arcs)
                       if arc.side == 0 and arc.start <= stage < arc.start + arc.length)
        spread = literals[top]
        model.add(on_first >= 1).only_enforce_if(spread)
        model.add(on_first <= dp - 1).only_enforce_if(spread)
        first = model.new_bool_var(f"{name}_side")
        model.add(on_first == dp).only_enforce_if([spread.Not(), first])
        model.add(on_first == 0).only_enforce_if([spread.Not(), first.Not()])

    def _channels(self, name: str, stage: int, group: int, counts: dict,
                  widen: CollectiveGroup | None) -> None:
        """c channels put the group's members in at most group // c tier-0 domains of at
        least c devices each, which hold every level-0 item holding a member (step 3a)."""
        items = self._items(stage, 0, widen)
        for c, literal in counts.items():
            if c >= 2:
                # the group // c largest tier-0 domains that can hold c members
                room = sorted((n for n in self.geo.tiers[0].domains if n >= c), reverse=True)
                self.model.add(items <= sum(room[:group // c])).only_enforce_if(literal)

    def _sync(self):
        """T_sync >= every stage's exposed sync (the module docstring, step 3)."""
        model, shape, prices = self.model, self.shape, self.prices
        stages = range(shape.num_stages)
        dp, ep, zero = shape.dp, shape.config.ep, shape.zero

        def phases(parts_of) -> list:
            """The gradient phase and the weight gather of one group, as prices(o, k)."""
            return [lambda o, k, c: parts_of(o.span, dp, zero, k, c)[0],
                    lambda o, k, c: parts_of(o.span, dp, zero, k, c)[1]]

        terms = []
        for s in stages:
            parts = []
            if dp * ep > 1:
                parts.append(self._class_term(f"dense_{s}", s, dp * ep,
                                              phases(prices.dense_sync_parts),
                                              CollectiveGroup.EP))
            if dp > 1:
                parts.append(self._class_term(f"expert_{s}", s, dp,
                                              phases(prices.expert_sync_parts), None))
            terms.append(parts)
            self._nest(s)
        upper = sum(self._term_upper.get(f"dense_{s}", 0) + self._term_upper.get(
            f"expert_{s}", 0) for s in stages)
        t_sync = model.new_int_var(0, upper, "t_sync")
        for s, parts in enumerate(terms):
            if not parts:
                continue
            reduce = self._exposed(f"er_{s}", sum(p[0] for p in parts), self.overlap, s,
                                   prices.backward, upper)
            gather = self._exposed(f"eg_{s}", sum(p[1] for p in parts), self.overlap_gather, s,
                                   prices.forward, upper)
            model.add(t_sync >= reduce + gather)
        self.t_sync = t_sync
        return t_sync

    def _exposed(self, name: str, phase, overlap: bool, stage: int, hidden, upper: int):
        """A phase of the sync as the iteration waits for it: all of it, or with ``overlap``
        a variable >= 0 and >= the phase minus the ``hidden`` ticks of the stage's option."""
        if not overlap:
            return phase
        exposed = self.model.new_int_var(0, upper, name)
        self.model.add(exposed >= phase - self._priced(stage, lambda o: hidden(o.span)))
        return exposed

    # ------------------------------------------------------------ solve

    def solve(self, time_limit_s: float, cutoff: int | None = None, seed: int = 0,
              workers: int = 1, floor: tuple[int, int] | None = None,
              work_limit: float | None = None) -> RelaxOutcome:
        """Solve within ``time_limit_s`` (and ``work_limit`` work units of deterministic
        time); ``cutoff``: only objectives below it matter; ``floor``: (τ, sync) lower
        bounds already proven (redundant constraints)."""
        outcome = self._solve(time_limit_s, cutoff, seed, workers, floor, work_limit)
        solver = self._checked
        return dataclasses.replace(outcome, work=solver.deterministic_time,
                                   wall_capped=solver.wall_capped)

    def _solve(self, time_limit_s: float, cutoff: int | None, seed: int, workers: int,
               floor: tuple[int, int] | None, work_limit: float | None) -> RelaxOutcome:
        model = self.model
        if cutoff is not None:
            model.add(self.objective <= cutoff - 1)
        if floor is not None:
            model.add(self.tau_max >= floor[0])
            model.add(self.t_sync >= floor[1])
        # OPTIMAL and INFEASIBLE are proven twice, else downgraded (cpsat_solver.CheckedSolver)
        solver = CheckedSolver(time_limit_s, workers, seed, label=f"{self.shape.label} relaxation",
                               work_limit=work_limit)
        self._checked = solver
        status = solver.solve(model)
        wall = solver.wall_time
        proof = ("agreed" if status in (cp_model.OPTIMAL, cp_model.INFEASIBLE) else
                 "disagreed" if solver.disagreed else
                 "unchecked" if solver.note else "none")
        if status == cp_model.OPTIMAL:
            value = int(round(solver.objective_value))
            return RelaxOutcome("optimal", value, value, self._solution(solver), wall, proof)
        if status == cp_model.FEASIBLE:
            return RelaxOutcome("feasible", math.ceil(solver.best_objective_bound - 1e-9),
                                int(round(solver.objective_value)), self._solution(solver), wall,
                                proof)
        if status == cp_model.INFEASIBLE:
            return RelaxOutcome("infeasible", math.inf if cutoff is None else cutoff, None,
                                {}, wall, proof)
        return RelaxOutcome("unknown", -math.inf, None, {}, wall, proof)

    def _solution(self, solver: cp_model.CpSolver) -> dict:
        cat = self.catalogue
        chosen = [next(o for i, o in enumerate(cat.options[s]) if solver.value(self.y[s, i]))
                  for s in range(cat.num_stages)]
        flows = {index: solver.value(var) for index, var in self.flow.items()
                 if solver.value(var)}
        classes = {name: next(k for k, lit in literals.items() if solver.value(lit))
                   for name, literals in self.classes.items()}
        # the ring channels the solution gives a term's groups on its class tier (>= 2 only)
        channels = {name: c for name, k in classes.items()
                    for c, lit in self.counts.get(name, {}).get(k, {}).items()
                    if c >= 2 and solver.value(lit)}
        return {"options": chosen, "flows": {self.arcs[i]: v for i, v in flows.items()},
                "classes": classes, "channels": channels, "tau_max": solver.value(self.tau_max),
                "t_sync": solver.value(self.t_sync)}
