"""The one model behind both exact backends (DESIGN §3 and §3.2 for a fixed sub-problem).

Built against a small adapter (nest_cp.solvers.exact.adapters) so CP-SAT and the MILP
read the same index sets, the same variable families and the same constraints.
The sub-problem fixes (c, b, S, d, z, v); the model chooses the split into S·v
chunks (chunk k on stage k mod S), each stage's recompute mode and the placement.

    opt[chunk, option]        1 iff the chunk takes the option's span and recompute mode
    mode[stage, mode]         1 iff the stage recomputes in that mode (v > 1: ties its chunks)
    placement                 FullPlacement (x[slot, cell]) or StructuredPlacement (select)
    coll[chunk, replica, cls] >= the chunk's collectives of class cls on the slowest group of
                              their kind (TP or EP) in that stage replica (DESIGN §3.2 f)
    tp[chunk, replica]        with tp_comm_overlap on a hierarchy (cost model §5 e), in τ in
                              place of the TP coll terms: >= the chunk's TP collectives
                              overlapped when the stage replica's TP groups all lie in tier-0
                              domains, in full otherwise; structured space: one floor per
                              layout at the evaluator's price; full space: >= Σ TP coll
                              unless local, >= the overlapped tier-0 price if local
    local, spread[stage, rep] full space, tp_comm_overlap: local may be 1 only if every TP
                              group of the stage replica lies in one tier-0 domain (an
                              optimum sets it when it may), spread == 1 − local
    bnd[boundary, replica]    >= slowest rank's transfer between chunks b and b + 1 (the
                              activation forward and the gradient back, one device pair)
    gather[chunk]             >= ZeRO-3 gathers of the chunk's parameters over the d·c ranks
                              of a shard group, slowest (t, e) index
    ctx[chunk, replica, piece] c > 1: >= the chunk's exposed context communication on the
                              stage replica (DESIGN §3.4: ring or all-to-alls, the forward
                              part again when it recomputes); structured space: one term
                              floored per layout; full space: one per signature (a ring's
                              volume and step, or an all-to-all's volume), floored on every
                              ring pair (CP group) and its cases
    tau_max                   >= τ_c(k, r) = compute + Σ coll (or tp) + bnd[k − 1] + bnd[k]
                              + gather + ctx
    dense[stage, phase]       >= one phase of the dense gradient sync of the stage's parameters
                              over d·e·c ranks, slowest t index (phase: the reduction,
                              all-reduce for z = 0 or reduce-scatter, or for z ∈ {1, 2} the
                              weight all-gather)
    expert[stage, phase]      >= one phase of the expert gradient sync over d·c ranks,
                              slowest (t, e) index
    has[stage, kind]          1 if the stage holds dense (expert) parameters (v > 1)
    carry[...]                integer rounding carry of a term rounded once per stage (v > 1)
    shown[stage, phase]       >= the phase's dense + expert less the compute it overlaps
                              (R_s backward for the reduction, F_s forward for the gather),
                              and >= 0; only when the sync has both phases and this one
                              overlaps (cost model §5 d)
    t_sync                    >= Σ_phase exposed part of the stage's sync, and >= 0
    act, work, buffer, kv[stage] >= the largest chunk's kept activations, the largest
                              working set, the ZeRO-3 buffers, the p2p ring's K/V buffers
                              (c > 1): the maxima of stage memory (v > 1)
    minimise (v·m + S − 1)·tau_max + t_sync

Every cost family is a floor "term >= Σ_o opt[k, o]·price(o, path)" enforced when
the group's case literals hold (CP-SAT: only_enforce_if; MILP: big-M); at an
optimum each term equals its largest enforced floor, which is the evaluator's
max over ranks / groups.  Floors of one term with the same literals (the
structured space: one select literal per layout, shared by all groups) are
merged into one, option by option (exact: one option per chunk is chosen).

Coupling of a stage's chunks (v > 1).  The chunks share the stage's mode (the
mode links), its gradient sync and its memory.  The sync is priced on the stage's
total parameters and rounded once, the optimizer state is sharded and rounded
up once: both are ceil(Σ_k x_k + c), stated exactly with integer floors per
option and a small integer carry (nest_cp.solvers.exact.pricing.StageRounding).  Memory
is the constraint state + buffer + n_s·act + work <= usable HBM, with act, work
and buffer floored by every chunk's option (their maxima).  With v = 1 memory
is settled before the model is built (only fitting options exist) and every
stage-rounded term is an option coefficient.

The families are added by nest_cp.solvers.exact.terms.CostTerms.  Redundant constraints,
each valid for every plan:
- tau_max >= compute of every chunk: lets CP-SAT bound τ from the split alone,
  before any placement literal is fixed;
- every floored term >= its price on the cheapest case of each group: survives
  the LP relaxation (where big-M floors vanish) and needs no literal;
- (placement) the symmetry cuts, latency-threshold and channel-threshold chains of
  nest_cp.solvers.exact.placement.
"""

from __future__ import annotations

from dataclasses import dataclass

from nest_cp.model.instance import Instance
from nest_cp.model.network import NetworkModel
from nest_cp.model.plan import Plan, Stage
from nest_cp.model.result import Space
from nest_cp.solvers.exact.groups import rank_groups
from nest_cp.solvers.exact.placement import FullPlacement, StructuredPlacement
from nest_cp.solvers.exact.pricing import ChunkPricing
from nest_cp.solvers.exact.subproblems import SubProblem
from nest_cp.solvers.exact.terms import CostTerms


@dataclass(slots=True)
class ModelHandles:
    """The variables a backend reads back after solving."""

    sub: SubProblem
    opt: dict
    mode: dict
    placement: FullPlacement | StructuredPlacement
    objective: object


def build_model(adapter, instance: Instance, sub: SubProblem, network: NetworkModel,
                space: Space, cutoff_ticks: int | None) -> ModelHandles:
    """Add the whole sub-problem to ``adapter``; cut off objectives >= ``cutoff_ticks``."""
    pricing = ChunkPricing(instance, sub)
    groups = rank_groups(sub.num_stages, sub.dp, sub.config, wrap=sub.virtual_stages > 1)
    opt = _chunk_options(adapter, sub)
    mode = _stage_modes(adapter, sub, opt)
    placement = (FullPlacement(adapter, network, groups) if space is Space.FULL
                 else StructuredPlacement(adapter, network, sub))
    terms = CostTerms(adapter, instance, sub, pricing, placement, opt, network)
    tau_max = terms.tau(groups)
    t_sync = terms.sync(groups)
    if sub.virtual_stages > 1:
        terms.memory()
    objective = sub.rounds * tau_max + t_sync
    adapter.minimize(objective)
    if cutoff_ticks is not None:
        adapter.add_cutoff(objective, cutoff_ticks)
    return ModelHandles(sub, opt, mode, placement, objective)


def estimate_terms(sub: SubProblem, network: NetworkModel, space: Space) -> int:
    """About how many terms ``build_model`` hands the adapter (within a small factor).

    The driver compares it with the rate it has measured to skip a model it could not
    build in the time left.  Counted: option variables and their flow, placement
    variables, each communicating group's occupancy literals (full space) and its
    floors over the options of the chunks it prices, one per bottleneck case.
    """
    config, stages, dp, virtual = sub.config, sub.num_stages, sub.dp, sub.virtual_stages
    ranks, shard, shards = config.devices, sub.dp * config.cp, config.tp * config.ep
    per_chunk = [len(options) for options in sub.options]
    per_stage = [sum(per_chunk[k] for k in sub.chunks_of_stage(s)) for s in range(stages)]
    groups = []  # (options floored, group size) of every group a cost term is floored over
    for group_size, count in ((config.tp, config.ep), (config.ep, config.tp)):
        if group_size > 1:
            groups += [(per_chunk[k], group_size) for k in range(sub.num_chunks)
                       for _ in range(dp * count)]
    groups += [(per_chunk[k], 2) for k in range(sub.num_chunks - 1) for _ in range(dp * ranks)]
    groups += [(per_chunk[k], shard) for k in range(sub.num_chunks) for _ in range(shards)] \
        if shard > 1 else []
    groups += [(per_stage[s], shard * config.ep) for s in range(stages)
               for _ in range(config.tp)] if shard * config.ep > 1 else []
    groups += [(per_stage[s], shard) for s in range(stages) for _ in range(shards)] \
        if shard > 1 else []
    groups += [(per_chunk[k], config.cp) for k in range(sub.num_chunks)
               for _ in range(dp * config.tp * config.ep)] if config.cp > 1 else []  # ctx
    terms = 3 * sum(per_chunk) + (8 * sum(per_stage) if virtual > 1 else 0)
    if space is Space.STRUCTURED:
        cases = len(network.structured_layouts)
        return terms + sum(cases * (options + size) for options, size in groups)
    if network.is_hierarchical:
        cells = -(-network.num_devices // network.cluster.network.domain_sizes()[0])
        levels, latencies = network.num_tiers, 1
    else:
        pairs = [network.pair_path(a, b) for a in range(network.num_devices)
                 for b in range(a + 1, network.num_devices)]
        cells = network.num_devices
        levels = len({path.bandwidth_Bps for path in pairs}) + 1
        latencies = len({path.latency_s for path in pairs}) or 1
    slots = ranks * stages * dp
    terms += 4 * slots * cells
    channels = max((network.max_useful_channels(tier) for tier in range(network.num_tiers)),
                   default=1) if network.is_hierarchical else 1
    for options, size in groups:
        terms += size * cells * levels + levels * latencies * (options + 1)
        if channels > 1 and size >= 4:  # channel literals: per cell, count and thresholds
            terms += cells * (size + 3 * channels) + levels * channels * (options + 2)
        if not network.is_hierarchical:  # latency literals: every pair of slots, every device
            terms += latencies * size * size * cells * cells
    return terms


def hint_model(adapter, handles: ModelHandles, plan: Plan) -> None:
    """Hint (CP-SAT) / warm-start (MILP) the model with ``plan`` of the same sub-problem."""
    chosen = {(chunk, (stage.first_layer, stage.last_layer, stage.recompute))
              for chunk, stage in enumerate(plan.stages)}
    for (chunk, option), var in handles.opt.items():
        key = (chunk, (option.first_layer, option.last_layer, option.mode))
        adapter.hint(var, int(key in chosen))
    for (stage, mode), var in handles.mode.items():
        adapter.hint(var, int(plan.stage_recompute(stage) is mode))
    handles.placement.hint(plan.placement)


def extract_plan(handles: ModelHandles, value) -> Plan:
    """The plan of a solution; ``value(var)`` returns a 0/1 integer."""
    sub = handles.sub
    chunks = []
    for chunk in range(sub.num_chunks):
        option = next(o for o in sub.options[chunk] if value(handles.opt[chunk, o]) == 1)
        chunks.append(Stage(option.first_layer, option.last_layer, option.mode))
    return Plan(sub.config, sub.microbatch, sub.zero, sub.dp, tuple(chunks),
                handles.placement.extract(value, sub), sub.virtual_stages)


def _chunk_options(adapter, sub: SubProblem) -> dict:
    """opt[chunk, option]: one option per chunk, consecutive chunks contiguous."""
    # opt[chunk, option] == 1 iff the chunk covers option's layers with option's mode
    opt = {(chunk, option): adapter.new_bool(f"opt_{chunk}_{option.key}")
           for chunk in range(sub.num_chunks) for option in sub.options[chunk]}
    for chunk in range(sub.num_chunks):
        adapter.add(adapter.total(opt[chunk, o] for o in sub.options[chunk]) == 1)
    for chunk in range(sub.num_chunks - 1):
        # flow: chunk k ends at layer ℓ iff chunk k + 1 starts at layer ℓ + 1
        ends = {o.last_layer for o in sub.options[chunk]} | \
            {o.first_layer - 1 for o in sub.options[chunk + 1]}
        for last_layer in sorted(ends):
            adapter.add(
                adapter.total(opt[chunk, o] for o in sub.options[chunk]
                              if o.last_layer == last_layer)
                == adapter.total(opt[chunk + 1, o] for o in sub.options[chunk + 1]
                                 if o.first_layer == last_layer + 1))
    return opt


def _stage_modes(adapter, sub: SubProblem, opt: dict) -> dict:
    """mode[stage, mode]: with v > 1 every chunk of a stage takes the stage's mode."""
    if sub.virtual_stages == 1:
        return {}  # a stage is one chunk: its option carries the mode
    modes = sorted({o.mode for options in sub.options for o in options}, key=lambda m: m.value)
    # mode[stage, mode] == 1 iff the stage (all its chunks) recomputes in that mode
    mode = {(stage, m): adapter.new_bool(f"mode_{stage}_{m.value}")
            for stage in range(sub.num_stages) for m in modes}
    for stage in range(sub.num_stages):
        adapter.add(adapter.total(mode[stage, m] for m in modes) == 1)
        for chunk in sub.chunks_of_stage(stage):
            for m in modes:
                adapter.add(adapter.total(opt[chunk, o] for o in sub.options[chunk]
                                          if o.mode is m) == mode[stage, m])
    return mode
