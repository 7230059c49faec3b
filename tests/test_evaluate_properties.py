"""Property-based checks of the evaluator: symmetries and monotonicity the model must have."""

import math
from dataclasses import replace
from fractions import Fraction

from hypothesis import given, settings
from hypothesis import strategies as st

from nest_cp import (
    Cluster,
    Collective,
    CollectiveGroup,
    CollectiveKind,
    HierarchicalNetwork,
    Instance,
    IntraConfig,
    Layer,
    LayerProfile,
    NetworkModel,
    Phase,
    Plan,
    Tier,
    TrainingSetup,
    Workload,
    evaluate,
)
from nest_cp.cost.terms import compute_ticks
from nest_cp.model.instance import RecomputeMode
from nest_cp.model.plan import uniform_stages
from nest_cp.model.ticks import exact

SETTINGS = settings(max_examples=60, deadline=None, derandomize=True)


@st.composite
def instances_and_plans(draw):
    """A random 2-tier instance with tp, ep in {1, 2}, selective-recompute data and optional
    overlap, and a random placement of a random plan (v = 2 where the plan allows it)."""
    tp, ep = draw(st.sampled_from([1, 2])), draw(st.sampled_from([1, 2]))
    config = IntraConfig(tp, ep)
    num_layers = draw(st.integers(1, 4))
    layers = []
    for index in range(num_layers):
        collectives = (Collective(CollectiveKind.ALL_REDUCE, draw(st.integers(0, 10**8)),
                                  CollectiveGroup.TP, Phase.FWD),
                       Collective(CollectiveKind.ALL_TO_ALL, draw(st.integers(0, 10**8)),
                                  CollectiveGroup.EP, Phase.BWD))
        fwd_us, act = draw(st.integers(1, 5000)), draw(st.integers(0, 10**9))
        profile = LayerProfile(
            fwd_s=fwd_us * 1e-6, bwd_s=draw(st.integers(1, 5000)) * 1e-6,
            dense_params=draw(st.integers(0, 10**9)), expert_params=draw(st.integers(0, 10**8)),
            act_bytes=act, ckpt_bytes=draw(st.integers(0, 10**8)),
            out_bytes=draw(st.integers(0, 10**8)), collectives=collectives,
            sel_fwd_s=draw(st.integers(0, fwd_us)) * 1e-6, sel_act_bytes=draw(st.integers(0, act)))
        layers.append(Layer(f"l{index}", {(config, 1): profile}))
    tiers = (Tier("node", 2, draw(st.sampled_from([1e10, 5e10, 1e11])), 1e-6),
             Tier("spine", 4, draw(st.sampled_from([1e9, 1e10])), 1e-5))
    cluster = Cluster(8, 10**12, HierarchicalNetwork(tiers))
    training = TrainingSetup(global_batch=draw(st.integers(1, 64)), seq_len=16,
                             zero_stages=(0, 1, 2, 3), recompute_modes=tuple(RecomputeMode),
                             virtual_stages=(1, 2), overlap_grad_reduce=draw(st.booleans()))
    instance = Instance(Workload("w", tuple(layers)), cluster, training)
    num_stages = draw(st.integers(1, min(num_layers, 8 // config.devices)))
    dp = draw(st.integers(1, 8 // (config.devices * num_stages)))
    microbatches = -(-training.global_batch // (ep * dp))
    interleavable = num_stages >= 2 and 2 * num_stages <= num_layers \
        and microbatches % num_stages == 0
    virtual = draw(st.sampled_from([1, 2])) if interleavable else 1
    devices = draw(st.permutations(range(8)))
    cursor = iter(devices)
    placement = tuple(tuple(tuple(next(cursor) for _ in range(config.devices))
                            for _ in range(dp)) for _ in range(num_stages))
    recompute = draw(st.sampled_from(["none", "selective", "full", "all-but-last"]))
    plan = Plan(config, 1, draw(st.sampled_from([0, 1, 2, 3])), dp,
                uniform_stages(num_layers, num_stages, recompute, virtual), placement, virtual)
    return instance, plan


@SETTINGS
@given(instances_and_plans(), st.randoms(use_true_random=False))
def test_replica_order_does_not_matter(case, rng):
    """Permuting replicas (the same permutation in every stage) leaves the objective unchanged."""
    instance, plan = case
    order = list(range(plan.num_replicas))
    rng.shuffle(order)
    shuffled = tuple(tuple(replicas[r] for r in order) for replicas in plan.placement)
    assert evaluate(instance, plan).objective_ticks == \
        evaluate(instance, plan.with_placement(shuffled)).objective_ticks


@SETTINGS
@given(instances_and_plans())
def test_swapping_node_blocks_is_a_network_automorphism(case):
    """Relabelling devices by swapping nodes {0,1} and {2,3} keeps every tier, so the time."""
    instance, plan = case
    swap = {0: 2, 1: 3, 2: 0, 3: 1}
    relabelled = tuple(tuple(tuple(swap.get(d, d) for d in ranks) for ranks in replicas)
                       for replicas in plan.placement)
    assert evaluate(instance, plan).objective_ticks == \
        evaluate(instance, plan.with_placement(relabelled)).objective_ticks


@SETTINGS
@given(instances_and_plans())
def test_faster_network_never_slows_an_iteration(case):
    """Doubling every tier's bandwidth never increases the iteration time, and leaves every
    stage's memory unchanged (memory does not depend on the network)."""
    instance, plan = case
    tiers = instance.cluster.network.tiers
    faster = replace(instance, cluster=replace(instance.cluster, network=HierarchicalNetwork(
        tuple(replace(t, bandwidth_Bps=2 * t.bandwidth_Bps) for t in tiers))))
    slow_result, fast_result = evaluate(instance, plan), evaluate(faster, plan)
    assert fast_result.objective_ticks <= slow_result.objective_ticks
    assert [s.memory_bytes for s in fast_result.stages] == \
        [s.memory_bytes for s in slow_result.stages]


@SETTINGS
@given(instances_and_plans())
def test_iteration_at_least_pipeline_compute(case):
    """T >= (v m + S - 1) * the largest chunk compute."""
    instance, plan = case
    result = evaluate(instance, plan)
    profiles = [[instance.workload.layers[i].profile(plan.config, 1) for i in s.layers]
                for s in plan.stages]
    heaviest = max(sum(sum(compute_ticks(p, 1e-9)) for p in chunk) for chunk in profiles)
    steps = plan.virtual_stages * result.num_microbatches + plan.num_stages - 1
    assert result.objective_ticks >= steps * heaviest


@SETTINGS
@given(instances_and_plans())
def test_overlap_exposes_exactly_the_sync_beyond_the_backward(case):
    """Each stage exposes max(0, sync - R) with overlap and all of its sync without (for
    ZeRO 1/2 the gradient phase so, plus its weight gather), and turning overlap on never
    lengthens the iteration."""
    instance, plan = case
    overlap = instance.training.overlap_grad_reduce
    result = evaluate(instance, plan)
    for stage in result.stages:
        reduce = max(0, stage.reduce_ticks - stage.backward_ticks) if overlap \
            else stage.reduce_ticks
        gather = max(0, stage.gather_ticks - stage.forward_ticks) \
            if instance.training.overlap_param_gather else stage.gather_ticks
        assert stage.exposed_sync_ticks == reduce + gather
    switched = replace(instance, training=replace(instance.training,
                                                  overlap_grad_reduce=not overlap))
    with_overlap, without = (result, evaluate(switched, plan)) if overlap else \
        (evaluate(switched, plan), result)
    assert with_overlap.objective_ticks <= without.objective_ticks


@st.composite
def v1_cases(draw):
    """Instances and plans inside DESIGN §3 as it stood before §3.2: t = e = 1, v = 1,
    recompute none or full, z <= 2, no overlap, dense layers without collectives."""
    num_layers = draw(st.integers(1, 4))
    layers = tuple(Layer(f"l{index}", {(IntraConfig(), 1): LayerProfile(
        fwd_s=draw(st.integers(1, 5000)) * 1e-6, bwd_s=draw(st.integers(1, 5000)) * 1e-6,
        dense_params=draw(st.integers(0, 10**9)), expert_params=0,
        act_bytes=draw(st.integers(0, 10**10)), ckpt_bytes=draw(st.integers(0, 10**8)),
        out_bytes=draw(st.integers(0, 10**8)))}) for index in range(num_layers))
    tiers = (Tier("node", 2, draw(st.sampled_from([1e10, 1e11])), 1e-6),
             Tier("spine", 4, draw(st.sampled_from([1e9, 1e10])), 1e-5))
    instance = Instance(Workload("w", layers), Cluster(8, 4 * 10**10, HierarchicalNetwork(tiers)),
                        TrainingSetup(global_batch=draw(st.integers(1, 64)), seq_len=1,
                                      zero_stages=(0, 1, 2)))
    num_stages = draw(st.integers(1, num_layers))
    dp = draw(st.integers(1, 8 // num_stages))
    cursor = iter(draw(st.permutations(range(8))))
    placement = tuple(tuple((next(cursor),) for _ in range(dp)) for _ in range(num_stages))
    plan = Plan(IntraConfig(), 1, draw(st.sampled_from([0, 1, 2])), dp, uniform_stages(
        num_layers, num_stages, draw(st.sampled_from(["none", "full", "all-but-last"]))),
        placement)
    return instance, plan


def _design3(instance: Instance, plan: Plan) -> tuple[int, list[int]]:
    """DESIGN §3 written out for t = e = 1 plans: (T, memory per stage), from the formulas,
    with v3's sync (docs/cost-model.md §5): groups priced by ``group_path`` (which counts
    the ring channels, a), ZeRO 1/2 as a reduce-scatter plus an all-gather (c)."""
    network, tick = NetworkModel(instance.cluster), Fraction(1, 10**9)
    training, num_stages, dp = instance.training, plan.num_stages, plan.num_replicas
    opt = training.optimizer
    m = -(-training.global_batch // dp)

    def ticks(seconds):
        return math.ceil(Fraction(seconds) / tick)

    def pair(a, b, volume):
        path = network.pair_path(a, b)
        return ticks(volume / path.bandwidth_Bps + path.latency_s)

    taus, syncs, memory = [], [], []
    for s, stage in enumerate(plan.stages):
        profiles = [instance.workload.layers[i].profile(IntraConfig(), 1) for i in stage.layers]
        full = stage.recompute is RecomputeMode.FULL
        fwd = sum(ticks(exact(p.fwd_s)) for p in profiles)
        tau = fwd + sum(ticks(exact(p.bwd_s)) for p in profiles) + (fwd if full else 0)
        out_prev = instance.workload.layers[stage.first_layer - 1].profile(
            IntraConfig(), 1).out_bytes if s > 0 else 0
        taus.append(tau + max(
            (pair(plan.placement[s - 1][r][0], plan.placement[s][r][0], out_prev) if s > 0
             else 0)
            + (pair(plan.placement[s + 1][r][0], plan.placement[s][r][0], profiles[-1].out_bytes)
               if s + 1 < num_stages else 0) for r in range(dp)))
        params = sum(p.params for p in profiles)
        group = network.group_path([plan.placement[s][r][0] for r in range(dp)])
        if dp == 1 or params == 0:
            syncs.append(0)
        elif plan.zero == 0:
            syncs.append(ticks(2 * Fraction(dp - 1, dp) * params * opt.grad_bytes
                               / group.bandwidth_Bps + 2 * (dp - 1) * group.latency_s))
        else:  # v3 (c): reduce-scatter of the gradients, all-gather of the weights
            syncs.append(sum(ticks(Fraction(dp - 1, dp) * params * size / group.bandwidth_Bps
                                   + (dp - 1) * group.latency_s)
                             for size in (opt.grad_bytes, opt.weight_bytes)))
        shard = [dp if plan.zero >= level else 1 for level in (3, 2, 1)]
        state = sum(-(-params * size // ways) for size, ways in zip(
            (opt.weight_bytes, opt.grad_bytes, opt.state_bytes), shard))
        k = min(num_stages - s, m)
        acts = k * sum(p.ckpt_bytes for p in profiles) + max(p.act_bytes for p in profiles) \
            if full else k * sum(p.act_bytes for p in profiles)
        memory.append(state + acts)
    return (m + num_stages - 1) * max(taus) + max(syncs), memory


@SETTINGS
@given(v1_cases())
def test_v1_plans_price_as_design_section_3(case):
    """On every plan of §3's scope (t = e = 1, v = 1, none / full, z <= 2, no overlap) the
    evaluator's T and memory are §3's formulas: §3.2 changes nothing there."""
    instance, plan = case
    result = evaluate(instance, plan)
    assert (result.objective_ticks, [s.memory_bytes for s in result.stages]) == \
        _design3(instance, plan)
