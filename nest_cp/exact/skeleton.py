"""The one model behind both exact backends (DESIGN §3 for a fixed sub-problem).

Not yet DESIGN §3.2 (issue 13): collectives are priced on the replica group's span,
not on each TP / EP group (§3.2 f), and full recomputation does not rerun the forward
collectives (§3.2 a), so plans with t·e > 1 may price differently from the evaluator;
the backend registry refuses instances allowing selective recomputation, v > 1 or
overlapped gradient reduction.  Memory (ZeRO-3 buffers included) is the evaluator's.

Built against a small adapter (nest_cp.exact.adapters) so CP-SAT and the MILP
read the same index sets, the same variable families and the same constraints.

    opt[stage, option]      1 iff the stage takes that span and recompute flag
    placement               FullPlacement (x[slot, cell]) or StructuredPlacement (select)
    coll[stage, replica]    >= intra-layer collectives on the replica group's bottleneck
    bnd[stage, replica]     >= slowest transfer between stages s and s + 1 (max over j)
    gather[stage]           >= ZeRO-3 gathers, slowest rank j
    dense[stage]            >= dense gradient sync, slowest t index
    expert[stage]           >= expert gradient sync, slowest rank j
    tau_max                 >= τ(s, r) = compute + coll + bnd[s−1] + bnd[s] + gather
    t_sync                  >= dense[s] + expert[s]
    minimise (m + S − 1)·tau_max + t_sync

Every cost family is a floor "term >= Σ_o opt[s, o]·price(o, path)" enforced
when the group's case literals hold (CP-SAT: only_enforce_if; MILP: big-M);
at an optimum each term equals its largest enforced floor, which is the
evaluator's max over ranks / t indices.  A redundant unconditional floor at the
group's cheapest possible path keeps the LP relaxation from dropping the term.
"""

from __future__ import annotations

from dataclasses import dataclass

from nest_cp.exact.groups import RankGroups, rank_groups
from nest_cp.exact.placement import FullPlacement, StructuredPlacement
from nest_cp.exact.pricing import StagePricing
from nest_cp.exact.subproblems import SubProblem
from nest_cp.model import Instance, RecomputeMode
from nest_cp.network import NetworkModel
from nest_cp.plan import Plan, Stage
from nest_cp.result import Space


@dataclass(slots=True)
class ModelHandles:
    """The variables a backend reads back after solving."""

    sub: SubProblem
    opt: dict
    placement: FullPlacement | StructuredPlacement
    objective: object


def build_model(adapter, instance: Instance, sub: SubProblem, network: NetworkModel,
                space: Space, cutoff_ticks: int | None) -> ModelHandles:
    """Add the whole sub-problem to ``adapter``; cut off objectives >= ``cutoff_ticks``."""
    pricing = StagePricing(instance, sub)
    groups = rank_groups(sub.num_stages, sub.dp, sub.config.tp, sub.config.ep)
    opt = _stage_options(adapter, sub)
    placement = (FullPlacement(adapter, network, groups) if space is Space.FULL
                 else StructuredPlacement(adapter, network, sub))
    terms = _CostTerms(adapter, sub, pricing, placement, opt)
    tau_max, t_sync = terms.build(groups)
    objective = (sub.num_microbatches + sub.num_stages - 1) * tau_max + t_sync
    adapter.minimize(objective)
    if cutoff_ticks is not None:
        adapter.add(objective <= cutoff_ticks - 1)
    return ModelHandles(sub, opt, placement, objective)


def hint_model(adapter, handles: ModelHandles, plan: Plan) -> None:
    """Hint (CP-SAT) / warm-start (MILP) the model with ``plan`` of the same sub-problem."""
    chosen = {(s, (stage.first_layer, stage.last_layer, stage.recompute is RecomputeMode.FULL))
              for s, stage in enumerate(plan.stages)}
    for (stage, option), var in handles.opt.items():
        key = (stage, (option.first_layer, option.last_layer, option.recompute))
        adapter.hint(var, int(key in chosen))
    handles.placement.hint(plan.placement)


def extract_plan(handles: ModelHandles, value) -> Plan:
    """The plan of a solution; ``value(var)`` returns a 0/1 integer."""
    sub = handles.sub
    stages = []
    for stage in range(sub.num_stages):
        option = next(o for o in sub.options[stage] if value(handles.opt[stage, o]) == 1)
        stages.append(Stage(option.first_layer, option.last_layer, option.mode))
    return Plan(sub.config, sub.microbatch, sub.zero, sub.dp, tuple(stages),
                handles.placement.extract(value, sub))


def _stage_options(adapter, sub: SubProblem) -> dict:
    """opt[stage, option]: one option per stage, consecutive stages contiguous."""
    # opt[stage, option] == 1 iff the stage covers option's layers with option's recompute flag
    opt = {(stage, option): adapter.new_bool(f"opt_{stage}_{option.key}")
           for stage in range(sub.num_stages) for option in sub.options[stage]}
    for stage in range(sub.num_stages):
        adapter.add(adapter.total(opt[stage, o] for o in sub.options[stage]) == 1)
    for stage in range(sub.num_stages - 1):
        # flow: stage s ends at layer ℓ iff stage s + 1 starts at layer ℓ + 1
        ends = {o.last_layer for o in sub.options[stage]} | \
            {o.first_layer - 1 for o in sub.options[stage + 1]}
        for last_layer in sorted(ends):
            adapter.add(
                adapter.total(opt[stage, o] for o in sub.options[stage]
                              if o.last_layer == last_layer)
                == adapter.total(opt[stage + 1, o] for o in sub.options[stage + 1]
                                 if o.first_layer == last_layer + 1))
    return opt


class _CostTerms:
    """Adds the cost families of the module docstring for one sub-problem."""

    def __init__(self, adapter, sub: SubProblem, pricing: StagePricing, placement, opt):
        self.adapter, self.sub, self.pricing = adapter, sub, pricing
        self.placement, self.opt = placement, opt
        self._upper: dict[int, int] = {}  # id(term variable) -> its upper bound in ticks

    def build(self, groups: RankGroups):
        sub, adapter = self.sub, self.adapter
        stages, replicas = range(sub.num_stages), range(sub.dp)
        # coll[stage, replica] >= collectives of the stage replica's layers on its group
        coll = {key: self._floor_over(f"coll_{key[0]}_{key[1]}", key[0], [group],
                                      self.pricing.collectives)
                for key, group in groups.replica.items()
                if len(group) > 1 and self.pricing.has_collectives()}
        # bnd[stage, replica] >= slowest rank's transfer between stage and stage + 1
        bnd = {(s, r): self._floor_over(
            f"bnd_{s}_{r}", s, [groups.pipe[s, r, j] for j in range(sub.config.devices)],
            self.pricing.transfer) for s in range(sub.num_stages - 1) for r in replicas}
        # gather[stage] >= ZeRO-3 gathers of the stage, slowest rank j
        gather = {s: self._floor_over(f"gather_{s}", s, self._shards(groups, s),
                                      self.pricing.zero_gather)
                  for s in stages if sub.zero == 3 and sub.dp > 1}
        tau_max = adapter.new_int("tau_max", sub.tau_lower_ticks, self._tau_upper(
            coll, bnd, gather))
        for s in stages:
            compute = adapter.total(self.opt[s, o] * self.pricing.compute(o)
                                    for o in sub.options[s])
            # redundant (every other part is >= 0): lets CP-SAT bound τ_max from the split
            # alone, before any placement literal is fixed
            adapter.add(tau_max >= compute)
            for r in replicas:
                parts = [coll.get((s, r)), bnd.get((s - 1, r)), bnd.get((s, r)), gather.get(s)]
                adapter.add(tau_max >= compute + adapter.total(p for p in parts if p is not None))
        return tau_max, self._sync(groups)

    def _sync(self, groups: RankGroups):
        """t_sync >= dense[s] + expert[s] for every stage."""
        sub, adapter = self.sub, self.adapter
        sync_terms = []
        for s in range(sub.num_stages):
            # dense[stage] >= dense gradient sync over the d·e ranks, slowest t index
            dense = self._floor_over(f"dense_{s}", s, [groups.dense[s, t]
                                                       for t in range(sub.config.tp)],
                                     self.pricing.dense_sync) \
                if sub.dp * sub.config.ep > 1 else None
            # expert[stage] >= expert gradient sync over the d replicas, slowest rank j
            expert = self._floor_over(f"expert_{s}", s, self._shards(groups, s),
                                      self.pricing.expert_sync) if sub.dp > 1 else None
            sync_terms.append([term for term in (dense, expert) if term is not None])
        upper = max((sum(self._upper[id(term)] for term in terms) for terms in sync_terms),
                    default=0)
        t_sync = adapter.new_int("t_sync", 0, upper)
        for terms in sync_terms:
            if terms:
                adapter.add(t_sync >= adapter.total(terms))
        return t_sync

    def _shards(self, groups: RankGroups, stage: int):
        return [groups.shard[stage, j] for j in range(self.sub.config.devices)]

    def _floor_over(self, name: str, stage: int, group_list, price):
        """A term >= price(option, path) of the stage's option, for every group and case."""
        adapter, options = self.adapter, self.sub.options[stage]
        floors, cheapest_floors = [], []
        for index, group in enumerate(group_list):
            cases = [(literals, {o: price(o, path) for o in options})
                     for literals, path in self.placement.cases(f"{name}_{index}", group)]
            floors.extend(case for case in cases if any(case[1].values()))
            if cases:
                cheapest_floors.append({o: min(c[o] for _, c in cases) for o in options})
        upper = max((max(c.values()) for _, c in floors), default=0)
        term = adapter.new_int(name, 0, upper)
        self._upper[id(term)] = upper
        for literals, coefficients in floors:
            adapter.add_floor(term, self._priced(stage, coefficients), literals,
                              max(coefficients.values()))
        for coefficients in cheapest_floors:
            # redundant: the group has one of its cases' paths, so the term is at least the
            # cheapest case's price; unlike the enforced floors this one survives the LP
            # relaxation (where big-M floors vanish) and needs no literal to propagate
            if any(coefficients.values()):
                adapter.add(term >= self._priced(stage, coefficients))
        return term

    def _priced(self, stage: int, coefficients: dict):
        """Σ_o opt[stage, o]·coefficient[o]: the price of the stage's chosen option."""
        return self.adapter.total(self.opt[stage, o] * c for o, c in coefficients.items() if c)

    def _tau_upper(self, coll, bnd, gather) -> int:
        sub = self.sub
        compute = max(self.pricing.compute(o) for opts in sub.options for o in opts)
        return compute + self._worst(coll) + 2 * self._worst(bnd) + self._worst(gather)

    def _worst(self, family: dict) -> int:
        return max((self._upper[id(term)] for term in family.values()), default=0)
