"""Property-based checks of the evaluator: symmetries and monotonicity the model must have."""

from dataclasses import replace

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
    Phase,
    Plan,
    Tier,
    TrainingSetup,
    Workload,
    evaluate,
)
from nest_cp.cost import compute_ticks
from nest_cp.plan import uniform_stages

SETTINGS = settings(max_examples=60, deadline=None, derandomize=True)


@st.composite
def instances_and_plans(draw):
    """A random 2-tier instance with tp in {1, 2} and a random placement of a random plan."""
    tp = draw(st.sampled_from([1, 2]))
    num_layers = draw(st.integers(1, 4))
    layers = []
    for index in range(num_layers):
        collectives = (Collective(CollectiveKind.ALL_REDUCE, draw(st.integers(0, 10**8)),
                                  CollectiveGroup.TP, Phase.FWD),)
        profile = LayerProfile(
            fwd_s=draw(st.integers(1, 5000)) * 1e-6, bwd_s=draw(st.integers(1, 5000)) * 1e-6,
            dense_params=draw(st.integers(0, 10**9)), expert_params=0,
            act_bytes=draw(st.integers(0, 10**9)), ckpt_bytes=draw(st.integers(0, 10**8)),
            out_bytes=draw(st.integers(0, 10**8)), collectives=collectives)
        layers.append(Layer(f"l{index}", {(IntraConfig(tp), 1): profile}))
    tiers = (Tier("node", 2, draw(st.sampled_from([1e10, 5e10, 1e11])), 1e-6),
             Tier("spine", 4, draw(st.sampled_from([1e9, 1e10])), 1e-5))
    cluster = Cluster(8, 10**12, HierarchicalNetwork(tiers))
    training = TrainingSetup(global_batch=draw(st.integers(1, 64)), seq_len=16,
                             zero_stages=(0, 1, 2, 3))
    instance = Instance(Workload("w", tuple(layers)), cluster, training)
    num_stages = draw(st.integers(1, num_layers))
    dp = draw(st.integers(1, 8 // (tp * num_stages))) if 8 // (tp * num_stages) >= 1 else 1
    devices = draw(st.permutations(range(8)))
    cursor = iter(devices)
    placement = tuple(tuple(tuple(next(cursor) for _ in range(tp)) for _ in range(dp))
                      for _ in range(num_stages))
    plan = Plan(IntraConfig(tp), 1, draw(st.sampled_from([0, 1, 2, 3])), dp,
                uniform_stages(num_layers, num_stages,
                               draw(st.sampled_from(["none", "all", "all-but-last"]))),
                placement)
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
    """T >= (m + S - 1) * the largest stage compute."""
    instance, plan = case
    result = evaluate(instance, plan)
    profiles = [[instance.workload.layers[i].profile(plan.config, 1) for i in s.layers]
                for s in plan.stages]
    heaviest = max(sum(sum(compute_ticks(p, 1e-9)) for p in stage) for stage in profiles)
    assert result.objective_ticks >= (result.num_microbatches + plan.num_stages - 1) * heaviest
