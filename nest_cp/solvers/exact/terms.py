"""The cost and memory families of the exact model (the vocabulary of its skeleton).

:class:`CostTerms` adds, for one sub-problem, the floored cost terms (coll, bnd,
gather, dense, expert), tau_max, t_sync and, with v > 1, the coupled stage memory.
The sync is floored per phase (cost model §5 c, d): the gradient reduction and,
for ZeRO 1 and 2, the weight all-gather, each rounded alone and each the slowest
group's, so a stage's two phases may be paid on different groups.  Two kinds of terms:

- *chunk terms*: term >= Σ_o opt[k, o]·price(o, path) for every case (literals, path)
  of every group the term is priced on; floors with the same literals merge option
  by option (exact: one option per chunk), and one redundant floor at the cheapest
  case of each group holds without literals;
- *TP overlap* (``tp_comm_overlap``, cost model §5 e): the TP collectives of a stage
  replica are overlapped only when all its TP groups lie in tier-0 domains, a property of
  the stage replica, not of one group; tp[chunk, replica] takes their place in τ, floored
  per layout in the structured space and, in the full space, at Σ of the TP coll terms
  unless local[stage, replica] and at the overlapped tier-0 price when it holds;
- *context terms* (DESIGN §3.4, c > 1): the evaluator charges per layer and direction the
  slowest ring pair (p2p) or CP group (a2a) of the stage replica, a max inside a sum.  In
  the structured space ctx[chunk, replica] is floored per layout at the price of the whole
  replica (:meth:`ChunkPricing.context`); in the full space there is one term per
  *signature* (ring volume and compute step, or all-to-all volume: pieces whose slowest
  pair or group is the same for every layer), floored like a chunk term on every pair
  (group) and case (:meth:`ChunkPricing.context_piece`), and their sum is that price;
- *stage-rounded terms* (v > 1): a price the evaluator rounds once over the stage's
  total parameters, ⌈Σ_k x(o_k) + c·has⌉, as integer floors per option plus a
  carry (nest_cp.solvers.exact.pricing.StageRounding), floored per case like chunk terms.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

from nest_cp.cost import terms as cost
from nest_cp.model.instance import CollectiveGroup, Instance
from nest_cp.model.network import NetworkModel
from nest_cp.solvers.exact.bounds import candidate_paths, local_tp_path
from nest_cp.solvers.exact.groups import Group, RankGroups, stage_pair
from nest_cp.solvers.exact.placement import StructuredPlacement
from nest_cp.solvers.exact.pricing import (
    ALL,
    GATHER,
    REDUCE,
    ChunkPricing,
    CollectiveClass,
    StageRounding,
)
from nest_cp.solvers.exact.subproblems import SubProblem


@dataclass(frozen=True, slots=True)
class _Rounded:
    """⌈Σ_k x(o_k) + c·has⌉ of one stage as a model expression (exact at integer points)."""

    expression: object
    upper: int
    rounding: StageRounding
    has: object  # 1, or the has[stage, kind] literal


class CostTerms:
    """Adds the cost and memory families of the module docstring for one sub-problem."""

    def __init__(self, adapter, instance: Instance, sub: SubProblem, pricing: ChunkPricing,
                 placement, opt: dict, network: NetworkModel):
        self.adapter, self.instance, self.sub, self.pricing = adapter, instance, sub, pricing
        self.placement, self.opt, self.network = placement, opt, network
        self._upper: dict[int, int] = {}  # id(term variable) -> its upper bound in ticks
        self._rounded: dict[tuple, _Rounded] = {}  # (term, stage, path) -> its expression
        self._has: dict[tuple, object] = {}  # (kind, stage) -> has[stage, kind]
        self._local: dict[tuple, tuple] = {}  # (stage, replica) -> tp (local, spread)
        # the tier-0 path of a TP group where tp_comm_overlap can apply; None: it cannot
        self._local_tp = local_tp_path(network, pricing.overlaps_tp, sub.config.tp)

    # ------------------------------------------------------------ τ

    def tau(self, groups: RankGroups):
        """tau_max >= τ_c(k, r) for every chunk k and replica r."""
        sub, adapter = self.sub, self.adapter
        chunks, replicas = range(sub.num_chunks), range(sub.dp)
        coll = self._collectives(groups)
        # bnd[boundary, replica] >= slowest rank's transfer between chunks b and b + 1
        bnd = {(b, r): self._chunk_term(
            f"bnd_{b}_{r}", b,
            [groups.pipe[self._pair(b), r, j] for j in range(sub.config.devices)],
            self.pricing.transfer)
            for b in range(sub.num_chunks - 1) for r in replicas}
        # gather[chunk] >= ZeRO-3 gathers of the chunk's parameters, slowest rank j
        gather = {k: self._chunk_term(f"gather_{k}", k, groups.shards(k % sub.num_stages),
                                      self.pricing.zero_gather)
                  for k in chunks if sub.zero == 3 and self.pricing.shard_size() > 1}
        # ctx[chunk, replica, piece] >= the chunk's exposed context communication (DESIGN
        # §3.4): one term per layout's price (structured), per signature (full space)
        ctx = {(k, r): self._context(groups, k, r) for k in chunks for r in replicas
               if sub.config.cp > 1}
        upper = max(self._largest_compute(k) for k in chunks) \
            + max((sum(self._upper[id(t)] for t in terms) for terms in coll.values()),
                  default=0) \
            + 2 * self._worst(bnd) + self._worst(gather) \
            + max((sum(self._upper[id(t)] for t in terms) for terms in ctx.values()),
                  default=0)
        tau_max = adapter.new_int("tau_max", sub.tau_lower_ticks, upper)
        for k in chunks:
            compute = adapter.total(self.opt[k, o] * self.pricing.compute(o)
                                    for o in sub.options[k])
            # redundant (every other part is >= 0): lets CP-SAT bound τ from the split
            # alone, before any placement literal is fixed
            adapter.add(tau_max >= compute)
            for r in replicas:
                parts = [*coll.get((k, r), []), *ctx.get((k, r), []), bnd.get((k - 1, r)),
                         bnd.get((k, r)), gather.get(k)]
                adapter.add(tau_max >= compute + adapter.total(p for p in parts
                                                               if p is not None))
        return tau_max

    def _collectives(self, groups: RankGroups) -> dict:
        """(chunk, replica) -> its collective terms: coll[chunk, replica, class] of every
        group kind, the TP ones under tp[chunk, replica] where ``tp_comm_overlap`` may hide
        them (cost model §5 e: :meth:`_layout_tp`, :meth:`_overlapped_tp`)."""
        sub, coll = self.sub, {}
        for kind in self.pricing.collective_groups():
            overlapped = kind is CollectiveGroup.TP and self._local_tp is not None
            if overlapped and isinstance(self.placement, StructuredPlacement):
                for k in range(sub.num_chunks):
                    for r in range(sub.dp):
                        coll.setdefault((k, r), []).append(self._layout_tp(k, r))
                continue
            for (k, r), terms in self._class_terms(groups, kind).items():
                coll.setdefault((k, r), []).extend(
                    [self._overlapped_tp(groups, k, r, terms)] if overlapped else terms)
        return coll

    def _class_terms(self, groups: RankGroups, kind: CollectiveGroup) -> dict:
        """(chunk, replica) -> coll[chunk, replica, class] for every class of one group kind."""
        sub, found = self.sub, {}
        size = cost.group_size(kind, sub.config)
        per_replica = sub.config.devices // size  # groups of this kind per stage replica
        classes = self.pricing.collective_classes(kind, per_replica,
                                                  self._candidates(groups, kind, size))
        for k in range(sub.num_chunks):
            for r in range(sub.dp):
                replica_groups = groups.collective(kind, k % sub.num_stages, r)
                # coll[chunk, replica, class] >= the class's collectives on the slowest
                # group of their kind in the stage replica
                found[k, r] = [self._chunk_term(
                    f"coll_{k}_{r}_{klass.key}", k, replica_groups,
                    lambda o, path, klass=klass: self.pricing.collectives(o, klass, path))
                    for klass in classes]
        return found

    # ------------------------------------------------------------ TP overlap (§5 e)

    def _layout_tp(self, chunk: int, replica: int):
        """Structured space: tp[chunk, replica] >= the chunk's TP collectives on the stage
        replica under each layout, priced as the evaluator does (overlapped when the layout
        puts every TP group of the stage replica inside one tier-0 domain)."""
        sub, pricing, network = self.sub, self.pricing, self.network
        options = sub.options[chunk]
        floors = []
        for literals, devices in self.placement.replica_devices(chunk % sub.num_stages,
                                                                 replica):
            paths = cost.GroupPaths.of_replica(network, devices, sub.config)
            floors.append((literals, {o: pricing.tp_collectives(o, paths) for o in options}))
        cheapest = {o: min(coefficients[o] for _, coefficients in floors) for o in options}
        return self._floored(f"tp_{chunk}_{replica}", chunk, floors, cheapest)

    def _context(self, groups: RankGroups, chunk: int, replica: int) -> list:
        """The context terms of one chunk and stage replica (DESIGN §3.4): structured space,
        one term floored per layout (:meth:`_layout_context`); full space, one term per
        signature of :meth:`ChunkPricing.context_signatures`, floored on every ring pair
        (p2p) or CP group (a2a) of the stage replica and each of its cases: at an optimum
        each is its slowest pair's (group's) price, and their sum the evaluator's."""
        if isinstance(self.placement, StructuredPlacement):
            return [self._layout_context(chunk, replica)]
        sub, pricing = self.sub, self.pricing
        rings = groups.context(chunk % sub.num_stages, replica)
        if pricing.context_group_size() == 2:  # the ring's consecutive pairs, each once
            members = sorted({tuple(sorted((ring[k], ring[(k + 1) % len(ring)])))
                              for ring in rings for k in range(len(ring))})
        else:
            members = rings
        return [self._chunk_term(
            f"ctx_{chunk}_{replica}_{index}", chunk, members,
            lambda o, path, signature=signature: pricing.context_piece(o, signature, path))
            for index, signature in enumerate(pricing.context_signatures())]

    def _layout_context(self, chunk: int, replica: int):
        """Structured space: ctx[chunk, replica] >= the chunk's context communication on the
        stage replica under each layout (the exposed ring or all-to-alls of its slowest CP
        group, forward part again under recomputation: DESIGN §3.4), priced as the
        evaluator does."""
        sub, pricing = self.sub, self.pricing
        options = sub.options[chunk]
        floors = []
        for literals, devices in self.placement.replica_devices(chunk % sub.num_stages,
                                                                 replica):
            paths = cost.ContextPaths.of_replica(self.network, devices, sub.config)
            floors.append((literals, {o: pricing.context(o, paths) for o in options}))
        cheapest = {o: min(coefficients[o] for _, coefficients in floors) for o in options}
        return self._floored(f"ctx_{chunk}_{replica}", chunk, floors, cheapest)

    def _overlapped_tp(self, groups: RankGroups, chunk: int, replica: int, plain: list):
        """Full space: tp[chunk, replica] >= Σ plain (the coll terms of the TP classes) unless
        local[stage, replica], >= the chunk's TP collectives overlapped on the tier-0 path
        when it holds."""
        sub, adapter, pricing = self.sub, self.adapter, self.pricing
        options = sub.options[chunk]
        local, spread = self._tp_local(groups, chunk % sub.num_stages, replica)
        at_home = cost.GroupPaths((self._local_tp,), (), tp_local=True)
        overlapped = {o: pricing.tp_collectives(o, at_home) for o in options}
        plain_upper = sum(self._upper[id(term)] for term in plain)
        upper = max([plain_upper, *overlapped.values()])
        term = adapter.new_int(f"tp_{chunk}_{replica}", 0, upper)
        self._upper[id(term)] = upper
        adapter.add_floor(term, adapter.total(plain), [spread], plain_upper)
        adapter.add_floor(term, self._priced(chunk, overlapped), [local],
                          max(overlapped.values()))
        # redundant: every case pays at least the smaller of the overlapped price and all
        # TP collectives on the cheapest path a TP group can have
        all_tp = CollectiveClass(CollectiveGroup.TP, ALL)
        candidates = self._candidates(groups, CollectiveGroup.TP, sub.config.tp)
        cheapest = {o: min([overlapped[o], *(pricing.collectives(o, all_tp, path)
                                              for path in candidates)]) for o in options}
        if any(cheapest.values()):
            adapter.add(term >= self._priced(chunk, cheapest))
        return term

    def _tp_local(self, groups: RankGroups, stage: int, replica: int) -> tuple:
        """(local, spread)[stage, replica], made once per stage replica: local may be 1 only
        if every TP group of the stage replica lies in one tier-0 domain (the minimisation
        sets it when it may: the overlapped price is the lower), spread == 1 − local."""
        key = (stage, replica)
        if key not in self._local:
            adapter = self.adapter
            local = adapter.new_bool(f"tp_local_{stage}_{replica}")
            spread = adapter.new_bool(f"tp_spread_{stage}_{replica}")
            adapter.add(local + spread == 1)
            for index, group in enumerate(groups.collective(CollectiveGroup.TP, stage,
                                                            replica)):
                adapter.add(local <= self.placement.inside_tier0(
                    f"tp_{stage}_{replica}_{index}", group))
            self._local[key] = (local, spread)
        return self._local[key]

    def _candidates(self, groups: RankGroups, kind: CollectiveGroup, size: int) -> list:
        """Every path a group of this kind can have here (its classes merge when these are
        totally ordered by speed)."""
        if isinstance(self.placement, StructuredPlacement):
            family = groups.tp if kind is CollectiveGroup.TP else groups.ep
            return self.placement.paths(family.values())
        return candidate_paths(self.network, size)

    def _pair(self, boundary: int) -> tuple[int, int]:
        stages = self.sub.num_stages
        return stage_pair(boundary % stages, (boundary + 1) % stages)

    def _largest_compute(self, chunk: int) -> int:
        return max(self.pricing.compute(o) for o in self.sub.options[chunk])

    # ------------------------------------------------------------ sync

    def sync(self, groups: RankGroups):
        """t_sync >= the exposed sync of every stage (cost model §5 c, d): per phase (the
        gradient reduction, and for ZeRO 1 and 2 the weight gather) the slowest dense group's
        plus the slowest expert group's, less the backward (forward) it overlaps."""
        sub, adapter, training = self.sub, self.adapter, self.instance.training
        phases = (REDUCE, GATHER) if self.pricing.gathers_weights else (REDUCE,)
        hides = {REDUCE: (training.overlap_grad_reduce, self.pricing.backward),
                 GATHER: (training.overlap_param_gather, self.pricing.forward)}
        exposed, upper = [], 0
        for s in range(sub.num_stages):
            parts, stage_upper = [], 0
            for phase in phases:
                terms = self._phase_terms(groups, s, phase)
                if not terms:
                    continue
                phase_upper = sum(self._upper[id(term)] for term in terms)
                stage_upper += phase_upper
                overlap, hidden_by = hides[phase]
                if not overlap:
                    parts.append(adapter.total(terms))
                    continue
                hidden = adapter.total(self.opt[k, o] * hidden_by(o)
                                       for k in sub.chunks_of_stage(s)
                                       for o in sub.options[k] if hidden_by(o))
                if len(phases) == 1:
                    parts.append(adapter.total(terms) - hidden)  # t_sync >= 0 holds the max
                    continue
                # shown[stage, phase] >= the phase's sync less what it overlaps, and >= 0
                shown = adapter.new_int(f"shown_{s}_{phase}", 0, phase_upper)
                adapter.add(shown >= adapter.total(terms) - hidden)
                parts.append(shown)
            exposed.append(parts)
            upper = max(upper, stage_upper)
        t_sync = adapter.new_int("t_sync", 0, upper)
        for parts in exposed:
            if parts:
                adapter.add(t_sync >= adapter.total(parts))
        return t_sync

    def _phase_terms(self, groups: RankGroups, stage: int, phase: int) -> list:
        """dense[stage, phase] and expert[stage, phase]: one phase of the stage's dense sync
        over the d·e·c ranks (slowest t index) and of its expert sync over the d·c ranks of
        a shard group (slowest tensor and expert index)."""
        sub, pricing, terms = self.sub, self.pricing, []
        if pricing.dense_sync_size() > 1:
            terms.append(self._stage_sync(
                f"dense_{stage}_{phase}", "dense", stage,
                [groups.dense[stage, t] for t in range(sub.config.tp)], pricing.dense_params,
                lambda o, path: pricing.dense_sync(o, path, phase), pricing.dense_sync_size(),
                phase))
        if pricing.shard_size() > 1:
            terms.append(self._stage_sync(
                f"expert_{stage}_{phase}", "expert", stage, groups.shards(stage),
                pricing.expert_params, lambda o, path: pricing.expert_sync(o, path, phase),
                pricing.shard_size(), phase))
        return [term for term in terms if term is not None]

    def _stage_sync(self, name: str, kind: str, stage: int, group_list: list[Group], params,
                    price, group_size: int, phase: int):
        """A sync term of the stage's total parameters: per option for v = 1, rounded once
        over the stage's chunks for v > 1; None when the stage holds no such parameters."""
        if self.sub.virtual_stages == 1:
            return self._chunk_term(name, stage, group_list, price)
        has = self._has_params(kind, stage, params)
        if has is None:
            return None

        def rounded(path) -> _Rounded | None:
            affine = self.pricing.sync_ticks(group_size, path, phase)
            if affine is None:
                return None
            values = {o: affine.slope * params(o) for k in self.sub.chunks_of_stage(stage)
                      for o in self.sub.options[k]}
            return self._stage_rounded(name, stage, path, values, affine.offset, has)
        return self._stage_term(name, stage, group_list, rounded)

    def _has_params(self, kind: str, stage: int, params):
        """has[stage, kind] >= 1 when a chunk of the stage holds such parameters; 1 when
        every split does, None when none does (made once per stage and kind)."""
        key = (kind, stage)
        if key not in self._has:
            self._has[key] = self._new_has(f"{kind}_{stage}", stage, params)
        return self._has[key]

    def _new_has(self, name: str, stage: int, params):
        sub, adapter = self.sub, self.adapter
        chunks = list(sub.chunks_of_stage(stage))
        if not any(params(o) for k in chunks for o in sub.options[k]):
            return None
        if any(all(params(o) for o in sub.options[k]) for k in chunks):
            return 1
        # has[stage, kind] == 1 if the stage holds parameters of the kind (free otherwise:
        # every sync price grows with it, so an optimum sets it to 0 when it may)
        has = adapter.new_bool(f"has_{name}")
        for k in chunks:
            adapter.add(has >= adapter.total(self.opt[k, o] for o in sub.options[k]
                                             if params(o)))
        return has

    # ------------------------------------------------------------ memory (v > 1)

    def memory(self) -> None:
        """state + buffer + n_s·act + work + kv <= usable HBM for every stage (module
        docstring; kv: the p2p ring's K/V buffers with c > 1, DESIGN §3.4)."""
        sub, adapter, pricing = self.sub, self.adapter, self.pricing
        optimizer = self.instance.training.optimizer
        limit = self.instance.cluster.usable_hbm_bytes
        profiles = [layer.profile(sub.config, sub.microbatch)
                    for layer in self.instance.workload.layers]

        def span(option):
            return profiles[option.first_layer:option.last_layer + 1]

        for s in range(sub.num_stages):
            chunks = list(sub.chunks_of_stage(s))
            state = []
            for name, per_param, zero_from in (("weights", optimizer.weight_bytes, 3),
                                               ("grads", optimizer.grad_bytes, 2),
                                               ("states", optimizer.state_bytes, 1)):
                # W_s·bytes/δ, rounded up once over the stage's chunks (cost.state_bytes;
                # the shards are over d·c ranks)
                shards = pricing.shard_size() if sub.zero >= zero_from else 1
                values = {o: Fraction(pricing.params(o) * per_param, shards)
                          for k in chunks for o in sub.options[k]}
                state.append(self._stage_rounded(f"mem_{name}", s, None, values,
                                                 Fraction(0), 1).expression)
            in_flight = cost.in_flight(s, sub.num_stages, sub.num_microbatches,
                                       sub.virtual_stages)
            # act[stage] >= the kept activations of one microbatch of every chunk
            act = self._stage_max(f"act_{s}", chunks,
                                  lambda o: cost.kept_activation_bytes(span(o), o.mode))
            # work[stage] >= the recompute working set of every chunk
            work = self._stage_max(f"work_{s}", chunks,
                                   lambda o: cost.working_set_bytes(span(o), o.mode))
            # buffer[stage] >= the ZeRO-3 gather buffers of every chunk
            buffer = self._stage_max(f"buffer_{s}", chunks, lambda o: cost.zero3_buffer_bytes(
                span(o), optimizer, sub.zero))
            # kv[stage] >= the p2p ring's two K/V buffers of every chunk (0 without them)
            kv = self._stage_max(f"kv_{s}", chunks, lambda o: cost.cp_buffer_bytes(
                span(o), sub.config.cp, self.instance.training.cp_comm))
            adapter.add(adapter.total([*state, buffer, in_flight * act, work, kv]) <= limit)

    def _stage_max(self, name: str, chunks: list[int], value):
        """A variable >= value(option) of every chunk's chosen option (their maximum)."""
        sub, adapter = self.sub, self.adapter
        upper = max(value(o) for k in chunks for o in sub.options[k])
        term = adapter.new_int(name, 0, upper)
        for k in chunks:
            adapter.add(term >= adapter.total(self.opt[k, o] * value(o)
                                              for o in sub.options[k] if value(o)))
        return term

    # ------------------------------------------------------------ floors

    def _chunk_term(self, name: str, chunk: int, group_list: list[Group], price):
        """A term >= price(option, path) of the chunk's option, for every group and case."""
        options = self.sub.options[chunk]
        floors: dict[tuple, tuple] = {}  # literal ids -> (literals, coefficients)
        cheapest: dict = {}
        for index, group in enumerate(group_list):
            cases = [(literals, {o: price(o, path) for o in options})
                     for literals, path in self.placement.cases(f"{name}_{index}", group)]
            for literals, coefficients in cases:
                if any(coefficients.values()):
                    key = tuple(sorted(id(literal) for literal in literals))
                    if key in floors:  # same literals: one floor, option by option the max
                        old = floors[key][1]
                        coefficients = {o: max(old[o], c) for o, c in coefficients.items()}
                    floors[key] = (literals, coefficients)
            if cases:  # the group has one of its cases' paths: at least the cheapest
                for o in options:
                    cheapest[o] = max(cheapest.get(o, 0), min(c[o] for _, c in cases))
        return self._floored(name, chunk, list(floors.values()), cheapest)

    def _floored(self, name: str, chunk: int, floors: list[tuple], cheapest: dict):
        """A term >= Σ_o opt[chunk, o]·coefficients[o] when the literals hold, for every
        (literals, coefficients) of ``floors`` not all zero, and >= the ``cheapest``
        coefficients without a literal (a price every case pays at least)."""
        floors = [(literals, c) for literals, c in floors if any(c.values())]
        upper = max((max(c.values()) for _, c in floors), default=0)
        term = self.adapter.new_int(name, 0, upper)
        self._upper[id(term)] = upper
        for literals, coefficients in floors:
            self.adapter.add_floor(term, self._priced(chunk, coefficients), literals,
                                   max(coefficients.values()))
        if any(cheapest.values()):
            # redundant: unlike the enforced floors this one survives the LP relaxation
            # (where big-M floors vanish) and needs no literal to propagate
            self.adapter.add(term >= self._priced(chunk, cheapest))
        return term

    def _stage_term(self, name: str, stage: int, group_list: list[Group], rounded):
        """A term >= rounded(path).expression for every group and case (v > 1)."""
        floors: dict[tuple, tuple] = {}  # (literal ids, path) -> (literals, _Rounded)
        cheapest: dict[tuple, StageRounding] = {}  # one per group, duplicates dropped
        for index, group in enumerate(group_list):
            cases = self.placement.cases(f"{name}_{index}", group)
            priced = [(literals, path, rounded(path)) for literals, path in cases]
            for literals, path, value in priced:
                if value is not None:
                    floors[tuple(sorted(id(literal) for literal in literals)), path] = \
                        (literals, value)
            if priced and all(value is not None for _, _, value in priced):
                lowest = _least([value.rounding for _, _, value in priced])
                cheapest[tuple(sorted(lowest.floors.items(), key=lambda item: item[0].key))
                         + (lowest.constant_floor,)] = lowest
        upper = max((value.upper for _, value in floors.values()), default=0)
        term = self.adapter.new_int(name, 0, upper)
        self._upper[id(term)] = upper
        has = next(iter(floors.values()))[1].has if floors else 1
        for literals, value in floors.values():
            self.adapter.add_floor(term, value.expression, literals, value.upper)
        for lowest in cheapest.values():
            # redundant: each group's price is at least the integer parts of its cheapest
            # case (option by option), which hold without a literal or a carry.  One floor
            # per group: a sum over several chunks' options may not take maxima across
            # groups option by option.
            self.adapter.add(term >= self._floor_part(stage, lowest, has))
        return term

    def _stage_rounded(self, name: str, stage: int, path, values: dict, constant: Fraction,
                       has) -> _Rounded:
        """⌈Σ_k values[o_k] + constant·has⌉ over the stage's chunks, made once per path."""
        key = (name, stage, path)
        if key not in self._rounded:
            sub, adapter = self.sub, self.adapter
            rounding = StageRounding.of(values, constant)
            chunks = list(sub.chunks_of_stage(stage))
            expression = self._floor_part(stage, rounding, has)
            upper = sum(max(rounding.floors[o] for o in sub.options[k]) for k in chunks) \
                + rounding.constant_floor
            if rounding.needs_carry:
                # carry[term, stage, path] == ⌈Σ fractional parts⌉: what rounding the
                # stage's total up once adds to the sum of its chunks' integer parts
                carry = adapter.new_integer(f"carry_{name}_{len(self._rounded)}", 0,
                                            len(chunks) + 1)
                fractions = [self.opt[k, o] * rounding.fractions[o] for k in chunks
                             for o in sub.options[k] if rounding.fractions[o]]
                if rounding.constant_fraction:
                    fractions.append(has * rounding.constant_fraction)
                adapter.add(rounding.denominator * carry >= adapter.total(fractions))
                expression = expression + carry
                upper += len(chunks) + 1
            self._rounded[key] = _Rounded(expression, upper, rounding, has)
        return self._rounded[key]

    def _floor_part(self, stage: int, rounding: StageRounding, has):
        """Σ_k Σ_o opt·⌊x(o)⌋ + ⌊c⌋·has: a rounded stage term less its carry."""
        sub = self.sub
        terms = [self.opt[k, o] * rounding.floors[o] for k in sub.chunks_of_stage(stage)
                 for o in sub.options[k] if rounding.floors[o]]
        if rounding.constant_floor:
            terms.append(has * rounding.constant_floor)
        return self.adapter.total(terms)

    def _priced(self, chunk: int, coefficients: dict):
        """Σ_o opt[chunk, o]·coefficient[o]: the price of the chunk's chosen option."""
        return self.adapter.total(self.opt[chunk, o] * c for o, c in coefficients.items() if c)

    def _worst(self, family: dict) -> int:
        return max((self._upper[id(term)] for term in family.values()), default=0)


def _least(roundings: list[StageRounding]) -> StageRounding:
    """Option by option (and for the constant) the least integer part over the cases of one
    group: Σ_k min + min <= min over cases of Σ_k + constant, a lower bound on the group's
    price whatever its case."""
    floors = {o: min(r.floors[o] for r in roundings) for o in roundings[0].floors}
    return StageRounding(floors, {}, min(r.constant_floor for r in roundings), 0, 1)
