r"""The exact SDP model of one sub-problem: mask and placement chosen together (DESIGN §7).

A sub-problem fixes (c, b, d, h, level, masking, ZeRO z, recompute mode); the model
chooses which workers hold each unit and where every worker's ranks sit, and
minimises T = m·τ_max + T_sync.  (Σ_w C_w is the same for every mask of the
sub-problem, so T_eff = T · d · C_full / Σ_w C_w is minimised with T.)  It is built
against the adapters of nest_cp.solvers.exact.adapters, so CP-SAT and the MILP solve the same
model, and it reuses the placement classes of nest_cp.solvers.exact.placement: FullPlacement
(any injective placement, exact bottleneck literals per group) in the full space,
StructuredPlacement (one rank layout) in the structured space.

    hold[u, H]      1 iff unit u is held by exactly the worker set H (|H| = h)
    design[g]       structured space: 1 iff the mask is design g (grouped, cyclic)
    M[w, u]         = Σ_{H ∋ w} hold[u, H]   (an expression: w holds u)
    coll[w, k]      >= collective k of worker w on its slowest TP / EP group, times the
                       number of times w runs it (shared layers, held units, reruns)
    local[w], full[w]   tp_comm_overlap on a hierarchical network (cost model §5 e):
                       local[w] = 1 only if every TP group of w lies in one tier-0 domain;
                       the TP coll[w, k] floors hold under full[w] = 1 − local[w]
    hid[w]          >= under local[w]: w's TP collectives on the tier-0 path, per layer and
                       direction max(⌈C/t⌉, C − X), X w's own ticks of the layer (linear in
                       M[w, ·]: constant per layer but for a block-level unit's held flag)
    sh_dense[t, p], sh_expert[j, p]   >= phase p of the shared syncs over all d workers
    unit_dense[H, t, v, p], unit_expert[H, j, v, p]
                    >= phase p of the sync of a v-parameter unit over H, times the units
                       of that size held by H (Σ_u hold[u, H])
    bcast[j]        >= backward masking: every unit's weight broadcast over all d
    tau_max         >= C_w + rerun_w + Σ_k coll[w, k] [+ hid[w]]      for every w
    shown[w, p]     >= Σ of phase p's terms of rank j (− R_w or F_w when that phase
                       overlaps), and >= 0, for every j; phase 0 = the all-reduces (the
                       reduce-scatters for ZeRO 1, 2) and broadcasts, phase 1 = the weight
                       all-gathers of ZeRO 1, 2 (cost model §5 c, d); only with two phases
    t_sync          >= Σ_p shown[w, p] for every w (one phase: >= sync_{w, j} − [overlap]·R_w)
    memory          state(shared, d) + ⌈M·P·g/δ⌉ + ... + kept_w + ws_w <= usable HBM
    minimise m·tau_max + t_sync

Each cost family is a floor "term >= price(path)·(count)" enforced when the group's
case literals hold (and, for a unit, when its holder set is H), exactly as in the
plain skeleton; at an optimum each term equals the evaluator's max over groups.
Memory rounding ⌈x / δ⌉ is an integer variable q with δ·q >= x: memory is only
bounded above, so q = ⌈x / δ⌉ is always available and the constraint is exact.

Symmetry: units with equal shares in one design block are interchangeable (no price
tells them apart), so in the full space their holder-set indices are ordered; the
placement's own cuts (replicas ordered by cell, sibling domains by occupancy) stay
valid because relabelling workers permutes mask rows with them.
"""

from __future__ import annotations

import functools
import itertools
import math
from dataclasses import dataclass, field
from fractions import Fraction

from nest_cp.cost import terms as cost
from nest_cp.cost.sdp import (
    SdpDesign,
    Share,
    UnitTable,
    broadcast_ticks,
    design_mask,
    own_layer_ticks,
    worker_memory_bytes,
)
from nest_cp.model.instance import (
    CollectiveGroup,
    Instance,
    IntraConfig,
    Phase,
    RecomputeMode,
    SdpLevel,
    SdpMasking,
    Strategy,
)
from nest_cp.model.network import NetworkModel, collective_ticks
from nest_cp.model.plan import Plan, SdpMask, Stage, expert_groups, tensor_groups
from nest_cp.model.result import Space
from nest_cp.solvers.exact.budget import Deadline
from nest_cp.solvers.exact.groups import rank_groups
from nest_cp.solvers.exact.placement import FullPlacement, StructuredPlacement

MAX_HOLDER_SETS = 20_000  # h-subsets × units the full-space mask model is built for


@dataclass(frozen=True, slots=True)
class SdpSubProblem:
    """One (c, b, d, h, level, masking, z, mode) and what its bound rests on."""

    config: IntraConfig
    microbatch: int
    workers: int
    holders: int
    level: SdpLevel
    masking: SdpMasking
    zero: int
    mode: RecomputeMode
    num_microbatches: int
    table: UnitTable = field(compare=False, repr=False)
    worker_compute: int = 0  # Σ_w C_w, fixed by (d, h, masking)

    @property
    def num_stages(self) -> int:  # the placement classes read a sub-problem's shape
        return 1

    @property
    def dp(self) -> int:
        return self.workers

    @property
    def scale(self) -> Fraction:
        """T_eff / T = d · C_full / Σ_w C_w (1 when no worker computes)."""
        if self.worker_compute == 0:
            return Fraction(1)
        return Fraction(self.workers * self.table.full_compute_ticks, self.worker_compute)

    @property
    def lower_bound_ticks(self) -> int:
        """T >= m · ⌈Σ_w C_w / d⌉: the slowest worker computes at least the average."""
        return self.num_microbatches * -(-self.worker_compute // self.workers)

    @property
    def label(self) -> str:
        return (f"sdp tp={self.config.tp},ep={self.config.ep},b={self.microbatch},"
                f"d={self.workers},h={self.holders},{self.level.value},{self.masking.value},"
                f"z={self.zero},{self.mode.value}")

    def matches(self, plan: Plan) -> bool:
        sdp = plan.sdp
        return (sdp is not None and plan.config == self.config
                and plan.microbatch == self.microbatch and plan.num_replicas == self.workers
                and sdp.holders == self.holders and sdp.level is self.level
                and sdp.masking is self.masking and plan.zero == self.zero
                and plan.stages[0].recompute is self.mode)

    def plan(self, rows, placement) -> Plan:
        last = len(self.table.shared) - 1
        return Plan(self.config, self.microbatch, self.zero, self.workers,
                    (Stage(0, last, self.mode),), placement, strategy=Strategy.SDP,
                    sdp=SdpMask(self.level, self.masking, self.holders, rows))


def worker_compute(table: UnitTable, masking: SdpMasking, workers: int, holders: int,
                   sums: tuple[int, int, int] | None = None) -> int:
    """Σ_w C_w of any valid mask (each unit held exactly h times); ``sums`` are the table's
    :func:`compute_sums` when the caller has them."""
    shared, units, wgrad = sums or compute_sums(table)
    if masking is SdpMasking.BACKWARD:
        return workers * (shared + units) - (workers - holders) * wgrad
    return workers * shared + holders * units


def compute_sums(table: UnitTable) -> tuple[int, int, int]:
    """(C_shared, Σ_u C_u, Σ_u wgrad_u) of a unit table."""
    return (sum(s.compute_ticks for s in table.shared),
            sum(u.compute_ticks for u in table.units), sum(u.wgrad_ticks for u in table.units))


def full_space_size(sub: SdpSubProblem) -> int:
    """Holder-set variables the full-space mask model needs."""
    return math.comb(sub.workers, sub.holders) * sub.table.num_units


@dataclass(slots=True)
class SdpHandles:
    """What extraction and hints read back."""

    sub: SdpSubProblem
    mask: _FreeMask | _DesignMask
    placement: FullPlacement | StructuredPlacement
    objective: object


def build_sdp_model(adapter, instance: Instance, sub: SdpSubProblem, network: NetworkModel,
                    space: Space, cutoff_ticks: int | None,
                    designs: list[tuple[SdpDesign, tuple]] | None = None) -> SdpHandles:
    """Add the whole sub-problem to ``adapter``; cut off objectives >= ``cutoff_ticks``.

    In the structured space only the designs that fit memory are offered (memory does not
    depend on the layout), so that model is feasible by construction; ``designs`` are
    those of :func:`structured_designs` with the memory limit, when the caller has them.
    """
    config = sub.config
    if space is Space.STRUCTURED and designs is None:
        designs = structured_designs(sub, instance.training.optimizer,
                                     instance.cluster.usable_hbm_bytes)
    mask = _FreeMask(adapter, sub) if space is Space.FULL else _DesignMask(adapter, sub,
                                                                          designs)
    placement = FullPlacement(adapter, network, rank_groups(1, sub.workers, config, wrap=False)) \
        if space is Space.FULL else StructuredPlacement(adapter, network, sub)
    terms = _SdpTerms(adapter, instance, sub, mask, placement, network)
    tau_max, t_sync = terms.build()
    objective = sub.num_microbatches * tau_max + t_sync
    adapter.minimize(objective)
    if cutoff_ticks is not None:
        adapter.add_cutoff(objective, cutoff_ticks)
    return SdpHandles(sub, mask, placement, objective)


def structured_designs(sub: SdpSubProblem, optimizer=None, limit_bytes: int | None = None,
                       deadline: Deadline | None = None) -> list[tuple[SdpDesign, tuple]]:
    """(design, rows) of the designs that apply (and, given ``limit_bytes``, fit memory),
    distinct masks only; checks ``deadline`` worker by worker (OutOfTime)."""
    deadline = deadline or Deadline()
    found = []
    for design in SdpDesign:
        rows = design_mask(sub.table, design, sub.workers, sub.holders)
        if rows is None or rows in [r for _, r in found]:
            continue
        if limit_bytes is not None and not _fits(sub, rows, optimizer, limit_bytes, deadline):
            continue
        found.append((design, rows))
    return found


def _fits(sub: SdpSubProblem, rows, optimizer, limit_bytes: int, deadline: Deadline) -> bool:
    for row in rows:
        deadline.tick()
        if worker_memory_bytes(sub.table, row, sub.workers, sub.holders, sub.masking, sub.mode,
                               optimizer, sub.zero) > limit_bytes:
            return False
    return True


def extract_sdp_plan(handles: SdpHandles, value) -> Plan:
    """The plan of a solution; ``value(var)`` returns a 0/1 integer."""
    sub = handles.sub
    rows = handles.mask.rows(value)
    return sub.plan(rows, handles.placement.extract(value, sub))


def hint_sdp_model(adapter, handles: SdpHandles, plan: Plan) -> None:
    """Structured space: hint the design and layout of ``plan`` (a DP plan of this sub-problem)."""
    if isinstance(handles.mask, _DesignMask) and handles.placement.contains(plan.placement):
        handles.mask.hint(adapter, plan.sdp.mask)
        handles.placement.hint(plan.placement)


# ------------------------------------------------------------------ masks


class _FreeMask:
    """Any valid mask: one holder set per unit, balanced rows, ordered identical units."""

    def __init__(self, adapter, sub: SdpSubProblem):
        self.sub = sub
        workers, holders, table = sub.workers, sub.holders, sub.table
        self.sets = list(itertools.combinations(range(workers), holders))
        # hold[u, H] == 1 iff unit u is held by exactly the workers of H
        self.hold = {(u, h_set): adapter.new_bool(f"hold_{u}_{index}")
                     for u in range(table.num_units)
                     for index, h_set in enumerate(self.sets)}
        for u in range(table.num_units):
            adapter.add(adapter.total(self.hold[u, h_set] for h_set in self.sets) == 1)
        for block in table.blocks:
            per_worker = Fraction(len(block) * holders, workers)
            for worker in range(workers):
                # every worker holds U h / d units of the block (DESIGN §7); a fraction
                # makes the sub-problem infeasible, as no valid mask exists
                held = adapter.total(self.hold[u, h_set] for u in block for h_set in self.sets
                                     if worker in h_set)
                adapter.add(held * per_worker.denominator == per_worker.numerator)
            for first, second in zip(block, block[1:], strict=False):
                if _same_share(table.units[first], table.units[second]):
                    # symmetry: interchangeable units take holder sets in index order
                    adapter.add(adapter.total(index * self.hold[first, h_set]
                                              for index, h_set in enumerate(self.sets))
                                <= adapter.total(index * self.hold[second, h_set]
                                                 for index, h_set in enumerate(self.sets)))

    def candidates(self, unit: int) -> list[tuple[int, ...]]:
        return self.sets

    def rows(self, value) -> tuple[tuple[int, ...], ...]:
        rows: list[list[int]] = [[] for _ in range(self.sub.workers)]
        for (unit, h_set), var in self.hold.items():
            if value(var) == 1:
                for worker in h_set:
                    rows[worker].append(unit)
        return tuple(tuple(sorted(row)) for row in rows)


class _DesignMask:
    """One of the structured designs: hold[u, H] follows design[g]."""

    def __init__(self, adapter, sub: SdpSubProblem, designs: list[tuple[SdpDesign, tuple]]):
        self.sub = sub
        self.designs = designs
        # design[g] == 1 iff the mask is design g's
        self.design = {index: adapter.new_bool(f"design_{design.value}")
                       for index, (design, _) in enumerate(self.designs)}
        adapter.add(adapter.total(self.design.values()) == 1)
        holder_sets = [_holder_sets(rows, sub.table.num_units) for _, rows in self.designs]
        self.sets_of = [sorted({sets[u] for sets in holder_sets})
                        for u in range(sub.table.num_units)]
        self.hold = {}
        for u, candidates in enumerate(self.sets_of):
            for index, h_set in enumerate(candidates):
                var = adapter.new_bool(f"hold_{u}_{index}")
                # hold[u, H] == 1 iff the chosen design gives unit u the holders H
                adapter.add(var == adapter.total(self.design[g] for g, sets in
                                                 enumerate(holder_sets) if sets[u] == h_set))
                self.hold[u, h_set] = var

    def candidates(self, unit: int) -> list[tuple[int, ...]]:
        return self.sets_of[unit]

    def rows(self, value) -> tuple[tuple[int, ...], ...]:
        chosen = [g for g, var in self.design.items() if value(var) == 1]
        return self.designs[chosen[0]][1]

    def hint(self, adapter, rows) -> None:
        for g, var in self.design.items():
            adapter.hint(var, int(self.designs[g][1] == tuple(rows)))


def _holder_sets(rows, units: int) -> list[tuple[int, ...]]:
    holders: list[list[int]] = [[] for _ in range(units)]
    for worker, row in enumerate(rows):
        for unit in row:
            holders[unit].append(worker)
    return [tuple(members) for members in holders]


def _same_share(first: Share, second: Share) -> bool:
    """Equal in every priced quantity (the layer index itself prices nothing)."""
    return all(getattr(first, name) == getattr(second, name) for name in Share.__slots__
               if name != "layer")


# ------------------------------------------------------------------ cost terms


class _SdpTerms:
    """Adds the cost and memory families of the module docstring."""

    def __init__(self, adapter, instance: Instance, sub: SdpSubProblem, mask, placement,
                 network: NetworkModel):
        self.adapter, self.instance, self.sub = adapter, instance, sub
        self.mask, self.placement, self.network = mask, placement, network
        self.training = instance.training
        self.table = sub.table
        # §5 e can hide some TP collective: only tier-0 domains make a TP group local
        self.hides_tp = self.training.tp_comm_overlap and network.is_hierarchical and any(
            c.group is CollectiveGroup.TP and sub.config.tp > 1
            for share in (*self.table.shared, *self.table.units) for c in share.collectives)
        self.workers = range(sub.workers)
        self._upper: dict[int, int] = {}  # id(term variable) -> its upper bound in ticks

    # ---------------------------------------------------------- mask expressions

    def held(self, worker: int, unit: int):
        """M[w, u]: 1 iff worker w holds unit u."""
        return self.adapter.total(self.mask.hold[unit, h_set]
                                  for h_set in self.mask.candidates(unit) if worker in h_set)

    def _per_worker(self, worker: int, constant: int, values) -> object:
        """constant + Σ_u values[u]·M[w, u] (values of zero skipped)."""
        return constant + self.adapter.total(value * self.held(worker, unit)
                                             for unit, value in enumerate(values) if value)

    def _runs_all(self) -> bool:
        return self.sub.masking is SdpMasking.BACKWARD

    def _run_sum(self, worker: int, name: str):
        """Σ of a share quantity over the shares worker w runs forward."""
        shared = sum(getattr(s, name) for s in self.table.shared)
        values = [getattr(u, name) for u in self.table.units]
        if self._runs_all():
            return shared + sum(values)
        return self._per_worker(worker, shared, values)

    def compute(self, worker: int):
        """C_w: fwd + bwd of the shares run, less the masked weight gradients."""
        if self._runs_all():
            masked = sum(u.wgrad_ticks for u in self.table.units)
            return (self._run_sum(worker, "fwd_ticks") + self._run_sum(worker, "bwd_ticks")
                    - masked + self._per_worker(worker, 0, [u.wgrad_ticks
                                                            for u in self.table.units]))
        return self._run_sum(worker, "fwd_ticks") + self._run_sum(worker, "bwd_ticks")

    def backward(self, worker: int):
        """R_w: the backward ticks inside τ_w."""
        if self._runs_all():
            masked = sum(u.wgrad_ticks for u in self.table.units)
            return self._run_sum(worker, "bwd_ticks") - masked + self._per_worker(
                worker, 0, [u.wgrad_ticks for u in self.table.units])
        return self._run_sum(worker, "bwd_ticks")

    def rerun(self, worker: int):
        if self.sub.mode is RecomputeMode.FULL:
            return self._run_sum(worker, "fwd_ticks")
        if self.sub.mode is RecomputeMode.SELECTIVE:
            return self._run_sum(worker, "sel_fwd_ticks")
        return 0

    # ---------------------------------------------------------- the model

    def build(self):
        adapter, sub = self.adapter, self.sub
        coll = {w: self._collectives(w) for w in self.workers}
        upper = max(self._upper_compute() + sum(self._upper[id(t)] for t in coll[w])
                    for w in self.workers)
        tau_max = adapter.new_int("tau_max", -(-sub.worker_compute // sub.workers), upper)
        for w in self.workers:
            compute = self.compute(w)
            # redundant: bounds τ_max from the mask alone, before any placement literal
            adapter.add(tau_max >= compute)
            adapter.add(tau_max >= compute + self.rerun(w) + adapter.total(coll[w]))
        self._memory()
        return tau_max, self._sync()

    def _upper_compute(self) -> int:
        units = self.table.units
        run_all = [*self.table.shared, *units]
        rerun = {RecomputeMode.FULL: "fwd_ticks", RecomputeMode.SELECTIVE: "sel_fwd_ticks"}
        extra = sum(getattr(s, rerun[self.sub.mode]) for s in run_all) \
            if self.sub.mode in rerun else 0
        return sum(s.compute_ticks for s in run_all) + extra

    def _floor_term(self, name: str, cases_and_prices, count, count_upper: int,
                    when: tuple = ()):
        """A term >= price·count for every (literals, price) case with a positive price,
        every floor enforced only when the literals ``when`` hold too."""
        adapter = self.adapter
        upper = max((price for _, price in cases_and_prices), default=0) * count_upper
        term = adapter.new_int(name, 0, upper)
        self._upper[id(term)] = upper
        for literals, price in cases_and_prices:
            if price:
                adapter.add_floor(term, price * count, [*literals, *when], price * count_upper)
        cheapest = min((price for _, price in cases_and_prices), default=0)
        if cheapest:
            # redundant: some case holds, so the term is at least the cheapest one's price
            adapter.add_floor(term, cheapest * count, list(when), cheapest * count_upper)
        return term

    def _collectives(self, worker: int) -> list:
        """coll[w, k] for every distinct intra-layer collective k the worker may run."""
        config, tick_s = self.sub.config, self.training.tick_s
        weights = self._collective_weights()
        if not weights:
            return []
        group_cases = {}
        for kind, groups in ((CollectiveGroup.TP, tensor_groups(config)),
                             (CollectiveGroup.EP, expert_groups(config))):
            group_cases[kind] = [self.placement.cases(
                f"w{worker}_{kind.value}{index}", tuple((0, worker, j) for j in group))
                for index, group in enumerate(groups) if len(group) > 1]
        local = full = None
        if self.hides_tp:
            local, full = self._tp_local(worker)
        terms = []
        for key, (shared_weight, unit_weights) in weights.items():
            collective_kind, volume, group = key
            size = cost.group_size(group, config)
            cases = [(literals, collective_ticks(collective_kind, volume, size, path, tick_s))
                     for per_group in group_cases[group] for literals, path in per_group]
            if not cases:
                continue
            if self._runs_all():
                count, count_upper = shared_weight + sum(unit_weights), \
                    shared_weight + sum(unit_weights)
            else:
                count = self._per_worker(worker, shared_weight, unit_weights)
                count_upper = shared_weight + sum(unit_weights)
            when = (full,) if full is not None and group is CollectiveGroup.TP else ()
            terms.append(self._floor_term(f"coll_{worker}_{len(terms)}", cases, count,
                                          count_upper, when))
        if local is not None:
            terms.append(self._hidden_tp_term(worker, local))
        return terms

    # ---------------------------------------------------------- TP overlap (§5 e)

    def _tp_local(self, worker: int):
        """(local[w], full[w]), local + full == 1: local[w] may be 1 only if every TP group
        of worker w lies in one tier-0 domain; the TP floors of :meth:`_collectives` hold
        under full[w], the hidden ones of :meth:`_hidden_tp_term` under local[w].  Hiding
        never costs more (max(⌈C/t⌉, C − X) <= C), so an optimum sets local[w] exactly."""
        adapter, config = self.adapter, self.sub.config
        local = adapter.new_bool(f"tp_local_{worker}")
        full = adapter.new_bool(f"tp_full_{worker}")
        adapter.add(local + full == 1)
        if isinstance(self.placement, StructuredPlacement):
            fitting = [literal for literals, devices in self.placement.replica_devices(0, worker)
                       if cost.GroupPaths.of_replica(self.network, devices, config).tp_local
                       for literal in literals]
            adapter.add(local <= adapter.total(fitting))
            return local, full
        for index, group in enumerate(tensor_groups(config)):
            if len(group) > 1:
                adapter.add(local <= self.placement.inside_tier0(
                    f"w{worker}_tp{index}", tuple((0, worker, j) for j in group)))
        return local, full

    def _hidden_tp_term(self, worker: int, local):
        """hid[w] >= the worker's TP collectives hidden behind its own ticks of each layer,
        on the tier-0 path, when local[w]; linear in the mask (:attr:`hidden_tp_ticks`)."""
        constant, per_unit = self.hidden_tp_ticks
        upper = constant + sum(max(value, 0) for value in per_unit)
        term = self.adapter.new_int(f"tp_hidden_{worker}", 0, upper)
        self._upper[id(term)] = upper
        self.adapter.add_floor(term, self._per_worker(worker, constant, per_unit), [local],
                               upper)
        return term

    @functools.cached_property
    def hidden_tp_ticks(self) -> tuple[int, list[int]]:
        """(constant, per unit): a tier-0-local worker's hidden TP ticks are constant +
        Σ_u per_unit[u]·M[w, u] for every valid mask (cost model §5 e).

        Each layer's collectives sit on one share (nest_cp.cost.sdp).  On a shared part (a
        layer without units, or neuron level) X is a constant: the layer's slices are equal
        shares and every worker holds U_l·h/d of them (rows balanced per neuron-level
        block).  On a unit (block level, the only unit of its layer) X takes two values,
        held and not held (the latter only when backward masking runs it without its
        weight gradient): linear in M[w, u].
        """
        table, sub = self.table, self.sub
        layer_units: dict[int, list[int]] = {}
        for index, unit in enumerate(table.units):
            layer_units.setdefault(unit.layer, []).append(index)
        constant = 0
        for layer, share in enumerate(table.shared):
            members = layer_units.get(layer, [])
            constant += self._hidden_share_ticks(
                share, set(members[:len(members) * sub.holders // sub.workers]))
        per_unit = [0] * table.num_units
        for index, unit in enumerate(table.units):
            held = self._hidden_share_ticks(unit, {index})
            if self._runs_all():
                unheld = self._hidden_share_ticks(unit, set())
                constant += unheld
                per_unit[index] = held - unheld
            else:
                per_unit[index] = held
        return constant, per_unit

    def _hidden_share_ticks(self, share: Share, held: set[int]) -> int:
        """One share's TP collectives per microbatch on the tier-0 path, each direction's
        sum C shown as max(⌈C/t⌉, C − X), X the own ticks of a worker holding ``held`` of
        the share's layer; the rerun forward's once more under full recomputation."""
        config, tick_s = self.sub.config, self.training.tick_s
        if not any(c.group is CollectiveGroup.TP for c in share.collectives):
            return 0
        paths = cost.GroupPaths(tp=(self.network.tier_path(0),), ep=())
        own = own_layer_ticks(self.table, held, self.sub.masking)[share.layer]
        reruns = 2 if self.sub.mode is RecomputeMode.FULL else 1
        total = 0
        for phase, compute, times in ((Phase.FWD, own[0], reruns), (Phase.BWD, own[1], 1)):
            ticks = sum(cost.intra_collective_ticks(c, config, paths, tick_s)
                        for c in share.collectives
                        if c.group is CollectiveGroup.TP and c.phase is phase)
            total += times * cost.tp_overlap_exposed(ticks, compute, config.tp)
        return total

    def _collective_weights(self) -> dict:
        """(kind, volume, group) -> (times run per microbatch by the shared parts, per unit):
        once, and once more for forward ones under full recomputation."""
        weights: dict = {}
        rerun = self.sub.mode is RecomputeMode.FULL
        for index, share in enumerate([*self.table.shared, *self.table.units]):
            for c in share.collectives:
                key = (c.kind, c.volume_bytes, c.group)
                shared, per_unit = weights.setdefault(key, [0, [0] * self.table.num_units])
                times = 1 + int(rerun and c.phase is Phase.FWD)
                if index < len(self.table.shared):
                    weights[key][0] = shared + times
                else:
                    per_unit[index - len(self.table.shared)] += times
        return {key: (value[0], value[1]) for key, value in weights.items()}

    # ---------------------------------------------------------- sync

    def _sync(self):
        """t_sync >= every worker's exposed sync: per phase (the gradient phase; for ZeRO 1
        and 2 also the weight all-gathers) the slowest rank's sum, less R_w (F_w) when that
        phase overlaps, at least 0 (cost model §5 c, d)."""
        adapter, sub, config = self.adapter, self.sub, self.sub.config
        optimizer, tick_s, zero = self.training.optimizer, self.training.tick_s, sub.zero
        everyone = tuple(self.workers)
        shared_dense = sum(s.dense_params for s in self.table.shared)
        shared_expert = sum(s.expert_params for s in self.table.shared)
        phases = (0, 1) if cost.gathers_weights(zero) else (0,)

        def part(params: int, size: int, path, phase: int) -> int:
            return cost.gradient_sync_parts(params, optimizer, zero, size, path, tick_s)[phase]

        dense_cases = {}  # (worker set, t) -> cases of its dense group
        expert_cases = {}  # (worker set, j) -> cases of its rank-j group

        def dense_group(members, tensor):
            key = (members, tensor)
            if key not in dense_cases:
                slots = tuple((0, w, tensor + config.tp * e) for w in members
                              for e in range(config.ep))
                dense_cases[key] = self.placement.cases(f"dense_{len(dense_cases)}", slots) \
                    if len(slots) > 1 else []
            return dense_cases[key]

        def expert_group(members, rank):
            key = (members, rank)
            if key not in expert_cases:
                slots = tuple((0, w, rank) for w in members)
                expert_cases[key] = self.placement.cases(f"expert_{len(expert_cases)}",
                                                         slots) if len(slots) > 1 else []
            return expert_cases[key]

        shared_terms = {}  # (rank, phase) -> terms every worker pays
        for rank, phase in itertools.product(range(config.devices), phases):
            tensor = rank % config.tp
            parts = []
            if shared_dense and sub.workers * config.ep > 1:
                parts.append(self._floor_term(
                    f"sh_dense_{rank}_{phase}",
                    [(lits, part(shared_dense, sub.workers * config.ep, path, phase))
                     for lits, path in dense_group(everyone, tensor)], 1, 1))
            if shared_expert and sub.workers > 1:
                parts.append(self._floor_term(
                    f"sh_expert_{rank}_{phase}",
                    [(lits, part(shared_expert, sub.workers, path, phase))
                     for lits, path in expert_group(everyone, rank)], 1, 1))
            if phase == 0 and sub.masking is SdpMasking.BACKWARD and sub.workers > 1:
                # the weight broadcasts run in the gradient phase
                parts.append(self._floor_term(
                    f"bcast_{rank}", [(lits, sum(broadcast_ticks(
                        u.params * optimizer.weight_bytes, sub.workers, path, tick_s)
                        for u in self.table.units))
                        for lits, path in expert_group(everyone, rank)], 1, 1))
            shared_terms[rank, phase] = parts

        unit_terms = {}  # (holder set, rank, phase) -> terms of the units that set holds
        for h_set in sorted({h for u in range(self.table.num_units)
                             for h in self.mask.candidates(u)}):
            holding = [u for u in range(self.table.num_units)
                       if h_set in self.mask.candidates(u)]
            for rank, phase in itertools.product(range(config.devices), phases):
                tensor = rank % config.tp
                terms = []
                for name, params_of, cases, size in (
                        ("dense", lambda u: self.table.units[u].dense_params,
                         dense_group(h_set, tensor), sub.holders * config.ep),
                        ("expert", lambda u: self.table.units[u].expert_params,
                         expert_group(h_set, rank), sub.holders)):
                    by_volume: dict[int, list[int]] = {}
                    for u in holding:
                        if params_of(u):
                            by_volume.setdefault(params_of(u), []).append(u)
                    for volume, units in sorted(by_volume.items()):
                        count = adapter.total(self.mask.hold[u, h_set] for u in units)
                        priced = [(lits, part(volume, size, path, phase))
                                  for lits, path in cases]
                        if any(price for _, price in priced):
                            terms.append(self._floor_term(
                                f"unit_{name}_{len(unit_terms)}_{rank}_{volume}_{phase}",
                                priced, count, len(units)))
                unit_terms[h_set, rank, phase] = terms

        def phase_upper(phase: int) -> int:
            return max((sum(self._upper[id(t)] for t in shared_terms[rank, phase])
                        + sum(self._upper[id(t)] for (_, r, p), terms in unit_terms.items()
                              if (r, p) == (rank, phase) for t in terms)
                        for rank in range(config.devices)), default=0)

        uppers = {phase: phase_upper(phase) for phase in phases}
        t_sync = adapter.new_int("t_sync", 0, sum(uppers.values()))
        overlaps = (self.training.overlap_grad_reduce, self.training.overlap_param_gather)
        for w in self.workers:
            hides = (self.backward(w), self._run_sum(w, "fwd_ticks"))
            shown = []
            for phase in phases:
                hidden = hides[phase] if overlaps[phase] else 0
                if len(phases) == 1:
                    shown.append(None)
                else:
                    # shown[w, phase] >= the phase's slowest rank less what it overlaps, >= 0
                    shown.append(adapter.new_int(f"shown_{w}_{phase}", 0, uppers[phase]))
                for rank in range(config.devices):
                    own = [t for (h_set, r, p), terms in unit_terms.items()
                           if (r, p) == (rank, phase) and w in h_set for t in terms]
                    total = adapter.total([*shared_terms[rank, phase], *own])
                    adapter.add((t_sync if shown[-1] is None else shown[-1]) >= total - hidden)
            if len(phases) > 1:
                adapter.add(t_sync >= adapter.total(shown))
        return t_sync

    # ---------------------------------------------------------- memory

    def _memory(self) -> None:
        """Every worker fits: state + kept activations + working set <= usable HBM."""
        adapter, sub, optimizer = self.adapter, self.sub, self.training.optimizer
        limit = self.instance.cluster.usable_hbm_bytes
        units, zero = self.table.units, sub.zero
        shared_params = sum(s.params for s in self.table.shared)
        shared_state = cost.state_bytes(shared_params, optimizer, zero, sub.workers)
        all_unit_params = sum(u.params for u in units)
        for w in self.workers:
            params = self._per_worker(w, 0, [u.params for u in units])
            parts = [shared_state, optimizer.weight_bytes * params]
            for per_param, stage in ((optimizer.grad_bytes, 2), (optimizer.state_bytes, 1)):
                if zero >= stage and sub.holders > 1:
                    # q >= params · bytes / h, integer: ⌈·⌉ at the least
                    shard = adapter.new_int(f"shard_{w}_{stage}", 0,
                                            -(-all_unit_params * per_param // sub.holders))
                    adapter.add(sub.holders * shard >= per_param * params)
                    parts.append(shard)
                else:
                    parts.append(per_param * params)
            if sub.masking is SdpMasking.BACKWARD:
                parts.append(optimizer.weight_bytes * (all_unit_params - params))
            parts.append(self._kept(w))
            parts.append(self._working_set(w))
            adapter.add(adapter.total(parts) <= limit)

    def _kept(self, worker: int):
        name = {RecomputeMode.FULL: "ckpt_bytes", RecomputeMode.SELECTIVE: "sel_act_bytes",
                RecomputeMode.NONE: "act_bytes"}[self.sub.mode]
        return self._run_sum(worker, name)

    def _working_set(self, worker: int):
        """ws_w >= the bytes rebuilt for each layer the worker runs (mode full or selective)."""
        mode = self.sub.mode
        if mode is RecomputeMode.NONE:
            return 0

        def rebuilt(share: Share) -> int:
            return share.act_bytes if mode is RecomputeMode.FULL else \
                share.act_bytes - share.sel_act_bytes

        views = []
        for layer, shared in enumerate(self.table.shared):
            members = [u for u, unit in enumerate(self.table.units) if unit.layer == layer]
            values = [rebuilt(self.table.units[u]) if u in members else 0
                      for u in range(self.table.num_units)]
            if self._runs_all():
                views.append(rebuilt(shared) + sum(values))
            else:
                views.append((rebuilt(shared), values))
        if self._runs_all():
            return max(views)
        upper = max(constant + sum(values) for constant, values in views)
        working = self.adapter.new_int(f"ws_{worker}", 0, upper)
        for constant, values in views:
            self.adapter.add(working >= self._per_worker(worker, constant, values))
        return working
