"""The plan evaluator against hand-computed numbers (DESIGN §3)."""

import random
from pathlib import Path

import pytest

from nest_cp import (
    NEST_LAYOUT,
    IntraConfig,
    NetworkModel,
    Plan,
    Stage,
    evaluate,
    load_instance,
)
from nest_cp.cost.evaluate import Evaluator
from nest_cp.harness.generators import random_instance
from nest_cp.model.instance import RecomputeMode
from nest_cp.model.plan import uniform_stages

DATA = Path(__file__).parent / "data"


@pytest.fixture(scope="module")
def tp2():
    return load_instance(DATA / "two_tier_tp2.json")


TWO_STAGES = (Stage(0, 0), Stage(1, 1))


def test_worked_example_megatron_layout(worked):
    """DESIGN §3.1, Megatron layout: tau 3,110,000, sync 20,002,000, T 35,552,000 ticks."""
    result = evaluate(worked, Plan(IntraConfig(), 1, 0, 2, TWO_STAGES))
    assert [s.time_ticks for s in result.stages] == [3_110_000, 3_110_000]
    assert result.sync_ticks == 20_002_000
    assert result.objective_ticks == 35_552_000
    assert round(result.throughput_samples_per_s, 1) == 225.0
    assert [s.memory_bytes for s in result.stages] == [24 * 10**9, 20 * 10**9]
    assert result.feasible


def test_worked_example_nest_layout(worked):
    """DESIGN §3.1, NEST layout: tau 3,011,000, sync 200,020,000, T 215,075,000 ticks."""
    plan = Plan(IntraConfig(), 1, 0, 2, TWO_STAGES)
    plan = plan.with_placement(NEST_LAYOUT.placement(IntraConfig(), 2, 2, range(4)))
    result = evaluate(worked, plan)
    assert result.tau_max_ticks == 3_011_000
    assert result.sync_ticks == 200_020_000
    assert result.objective_ticks == 215_075_000


def test_worked_example_optimum_plan(worked):
    """DESIGN §3.1's optimum, S=2 and d=1 on one tier-0 pair, evaluates to 27,099,000 ticks."""
    plan = Plan(IntraConfig(), 1, 0, 1, TWO_STAGES, placement=(((0,),), ((1,),)))
    assert evaluate(worked, plan).objective_ticks == 27_099_000


def test_two_stage_two_replica_tp_terms(tp2):
    """Every term of a tp=2, S=2, d=2 plan on 8 devices (Megatron layout) by hand.

    Placement (t, e, replica, stage): stage 0 replicas [0,1] and [2,3]; stage 1 [4,5], [6,7].
    - compute per stage: 1 ms + 2 ms = 3,000,000 ticks.
    - TP all-reduce, 1e7 B over g=2 in tier 0: 2*(1/2)*1e7/1e11 s + 2*1*1 us = 102,000
      ticks, once in fwd and once in bwd: 204,000.
    - pipeline pairs 0->4, 1->5 etc. cross tier 1: 1e6/1e10 s + 10 us = 110,000 ticks.
    - tau = 3,000,000 + 204,000 + 110,000 = 3,314,000 for both stages.
    - sync per t-index, e.g. {0, 2}, tier 1: gradient 2 B * 5e8 = 1e9 B:
      2*(1/2)*1e9/1e10 s + 2*10 us = 100,020,000 ticks.
    - m = ceil(8 / (1*1*2)) = 4; T = (4 + 2 - 1) * 3,314,000 + 100,020,000 = 116,590,000.
    - memory: 5e8 * 16 B = 8e9 of state; stage 0 holds 2 microbatches: 8e9 + 2*2e9 = 12e9,
      stage 1 holds 1: 10e9.
    """
    result = evaluate(tp2, Plan(IntraConfig(tp=2), 1, 0, 2, TWO_STAGES))
    for stage in result.stages:
        assert stage.compute_ticks == 3_000_000
        assert stage.collective_ticks == 204_000
        assert stage.time_ticks == 3_314_000
        assert stage.sync_ticks == 100_020_000
    assert result.stages[0].recv_gradient_ticks == 110_000
    assert result.stages[1].recv_activation_ticks == 110_000
    assert result.num_microbatches == 4
    assert result.objective_ticks == 116_590_000
    assert [s.memory_bytes for s in result.stages] == [12 * 10**9, 10 * 10**9]


def test_zero3_and_recompute_terms(tp2):
    """ZeRO-3 with full recomputation of stage 0, by hand (same placement as above).

    - ZeRO-3 all-gather of 5e8 params * 2 B = 1e9 B over d=2, group {0, 2} in tier 1:
      (1/2)*1e9/1e10 s + 10 us = 50,010,000 ticks, in fwd and bwd: 100,020,000.
    - stage 0 recomputes its forward, 1,000,000, and reruns the forward TP all-reduce
      (DESIGN §3.2 a), 102,000: recompute 1,102,000; tau_0 = 3,314,000 + 1,102,000 +
      100,020,000 = 104,436,000; tau_1 = 3,314,000 + 100,020,000 = 103,334,000.
    - sync is a reduce-scatter: (1/2)*1e9/1e10 s + 10 us = 50,010,000.
    - T = 5 * 104,436,000 + 50,010,000 = 572,190,000.
    - memory stage 0: state 5e8*(2+2+12)/2 = 4e9; ZeRO-3 buffers (DESIGN §3.2 d)
      2 * 5e8 * 2 B = 2e9; activations 2 * ckpt 1e8 + working act 2e9 = 2.2e9; total 8.2e9.
    """
    stages = (Stage(0, 0, RecomputeMode.FULL), Stage(1, 1))
    result = evaluate(tp2, Plan(IntraConfig(tp=2), 1, 3, 2, stages))
    assert result.stages[0].zero_gather_ticks == 100_020_000
    assert result.stages[0].recompute_ticks == 1_102_000
    assert [s.time_ticks for s in result.stages] == [104_436_000, 103_334_000]
    assert result.sync_ticks == 50_010_000
    assert result.objective_ticks == 572_190_000
    assert result.stages[0].memory_bytes == 8_200_000_000


def test_memory_violation_names_stage_and_excess(tp2):
    """With 11e9 B of HBM, stage 0 (12e9 B) breaks memory by exactly 1e9 B; stage 1 fits."""
    from dataclasses import replace

    small = replace(tp2, cluster=replace(tp2.cluster, hbm_bytes=11 * 10**9))
    result = evaluate(small, Plan(IntraConfig(tp=2), 1, 0, 2, TWO_STAGES))
    assert not result.feasible
    assert result.violations == (
        "stage 0 needs 12000000000 bytes per device, exceeds usable HBM 11000000000 by "
        "1000000000",)
    assert result.objective_ticks == 116_590_000  # the time is still reported


def test_hbm_reserve_reduces_usable_memory(tp2):
    """A 10 % reserve of 80e9 B leaves 72e9 B usable."""
    from dataclasses import replace

    assert replace(tp2.cluster, hbm_reserve=0.1).usable_hbm_bytes == 72 * 10**9


@pytest.mark.parametrize("plan, expected", [
    (Plan(IntraConfig(), 1, 0, 2, (Stage(0, 0), Stage(2, 2))), "must be contiguous"),
    (Plan(IntraConfig(), 1, 0, 2, (Stage(0, 0),)), "stages cover layers 0..0"),
    (Plan(IntraConfig(), 1, 0, 2, (Stage(0, 1), Stage(2, 1))), "is empty"),
    (Plan(IntraConfig(tp=4), 1, 0, 1, (Stage(0, 1),)), "unknown configuration"),
    (Plan(IntraConfig(), 1, 0, 3, TWO_STAGES), "a*S*d = 6 devices, cluster has 4"),
    (Plan(IntraConfig(), 1, 0, 1, TWO_STAGES, (((0,),), ((0,),))), "device 0 reused"),
    (Plan(IntraConfig(), 1, 0, 1, TWO_STAGES, (((0,),), ((9,),))), "out of range"),
    (Plan(IntraConfig(), 1, 0, 1, TWO_STAGES, (((0, 1),), ((2,),))), "placement shape"),
    (Plan(IntraConfig(), 1, 2, 1, TWO_STAGES), "ZeRO stage 2 not allowed"),
    (Plan(IntraConfig(), 2, 0, 1, TWO_STAGES), "microbatch 2 not allowed"),
    (Plan(IntraConfig(), 1, 0, 1, (Stage(0, 0, RecomputeMode.FULL), Stage(1, 1))),
     "recomputes 'full', not allowed"),
])
def test_structural_violations(worked, plan, expected):
    """Each malformed plan is reported with a violation naming the problem, and no objective."""
    result = evaluate(worked, plan)
    assert not result.feasible and result.objective_ticks is None
    assert any(expected in v for v in result.violations), result.violations


def test_uniform_stages_split():
    """uniform_stages gives later stages the extra layers and sets recompute modes as asked."""
    stages = uniform_stages(7, 3, "all-but-last")
    full, none = RecomputeMode.FULL, RecomputeMode.NONE
    assert [(s.first_layer, s.last_layer, s.recompute) for s in stages] == [
        (0, 1, full), (2, 3, full), (4, 6, none)]


@pytest.mark.parametrize("graph", [False, True])
def test_one_evaluator_over_many_plans_matches_fresh_evaluations(graph):
    """An Evaluator kept over many plans (memoised terms shared) reports, for every plan,
    exactly what a fresh evaluate() reports: memoisation by value changes no number."""
    instance = random_instance(7, num_layers=4, tier_sizes=(2, 2, 2), graph=graph,
                               configs=(IntraConfig(1, 1), IntraConfig(2, 1), IntraConfig(2, 2)),
                               zero_stages=(0, 3), recompute_modes=tuple(RecomputeMode),
                               virtual_stages=(1, 2), overlap_grad_reduce=True, comm_scale=50)
    network = NetworkModel(instance.cluster)
    referee = Evaluator(instance, network)
    rng = random.Random(3)
    checked = 0
    for config, microbatch in instance.choices:
        for num_stages in (1, 2):
            for virtual in (1, 2):
                if num_stages * virtual > 4 or (virtual > 1 and num_stages < 2):
                    continue
                dp = 8 // (config.devices * num_stages)
                for mode in ("none", "selective", "full", "all-but-last"):
                    devices = rng.sample(range(8), config.devices * num_stages * dp)
                    placement = tuple(tuple(tuple(devices.pop() for _ in range(config.devices))
                                            for _ in range(dp)) for _ in range(num_stages))
                    plan = Plan(config, microbatch, rng.choice((0, 3)), dp,
                                uniform_stages(4, num_stages, mode, virtual), placement, virtual)
                    shared = referee.evaluate(plan)
                    assert shared.as_dict() == evaluate(instance, plan, network).as_dict()
                    checked += shared.objective_ticks is not None
    assert checked >= 20
