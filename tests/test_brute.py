"""The brute-force oracle: exhaustive, refereed by the evaluator, full space contains structured."""

from __future__ import annotations

import dataclasses
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nest_cp.cost.evaluate import evaluate
from nest_cp.io.readers import load_instance
from nest_cp.model.instance import (
    Cluster,
    HierarchicalNetwork,
    Instance,
    IntraConfig,
    Layer,
    LayerProfile,
    RecomputeMode,
    Tier,
    TrainingSetup,
    Workload,
)
from nest_cp.model.plan import MEGATRON_LAYOUT, NEST_LAYOUT, Plan, Stage
from nest_cp.model.result import Space, Status
from nest_cp.solvers.brute import solve
from nest_cp.solvers.registry import SolveOptions, check_result

STRUCTURED = SolveOptions(space=Space.STRUCTURED)
FULL = SolveOptions(space=Space.FULL)


def tiny_instance(seed: int) -> Instance:
    """2-4 layers on 3-4 devices (3 with 4 layers) of a two-tier network, one configuration,
    loose-ish memory, recompute none or none and one of selective / full (selective data in
    every profile), v in {1} or {1, 2}, overlapped gradient reduction on or off."""
    rng = random.Random(seed)
    config = IntraConfig(1, 1)
    layers = []
    for index in range(rng.randint(2, 4)):
        act = rng.randint(10**8, 4 * 10**9)
        layers.append(Layer(f"layer{index}", {(config, 1): LayerProfile(
            fwd_s=rng.choice([0.001, 0.002]), bwd_s=rng.choice([0.002, 0.003]),
            dense_params=rng.randint(10**7, 10**9), expert_params=0,
            act_bytes=act, ckpt_bytes=10**7, out_bytes=rng.randint(10**5, 10**7),
            sel_fwd_s=0.0003, sel_act_bytes=act // 3)}))
    num_devices = 3 if len(layers) == 4 else rng.choice([3, 4])
    network = HierarchicalNetwork((Tier("node", 2, rng.choice([1e10, 1e11]), 1e-6),
                                   Tier("spine", 2, rng.choice([1e9, 1e10]), 1e-5)))
    cluster = Cluster(num_devices, rng.choice([2 * 10**10, 8 * 10**10]), network)
    modes = (RecomputeMode.NONE, *rng.sample([RecomputeMode.SELECTIVE, RecomputeMode.FULL],
                                             rng.randint(0, 1)))
    training = TrainingSetup(global_batch=rng.randint(1, 8), seq_len=1, recompute_modes=modes,
                             virtual_stages=rng.choice([(1,), (1, 2)]),
                             overlap_grad_reduce=rng.random() < 0.5)
    return Instance(Workload("tiny", tuple(layers)), cluster, training)


def test_worked_example_both_spaces(data_dir):
    """Brute force finds DESIGN §3.1's optimum 27,099,000 ticks in both spaces."""
    instance = load_instance(data_dir / "worked_example.json")
    for options in (STRUCTURED, FULL):
        result = solve(instance, options)
        assert result.status is Status.OPTIMAL
        assert result.objective_ticks == 27_099_000
        check_result(instance, result)


def test_worked_example_layouts_are_not_better(data_dir):
    """The structured optimum is no worse than DESIGN §3.1's Megatron and NEST layout plans."""
    instance = load_instance(data_dir / "worked_example.json")
    best = solve(instance, STRUCTURED).objective_ticks
    stages = (Stage(0, 0), Stage(1, 1))
    for layout, expected in ((MEGATRON_LAYOUT, 35_552_000), (NEST_LAYOUT, 215_075_000)):
        plan = Plan(IntraConfig(), 1, 0, 2, stages,
                    layout.placement(IntraConfig(), 2, 2, (0, 1, 2, 3)))
        assert evaluate(instance, plan).objective_ticks == expected
        assert best <= expected


@settings(max_examples=12, deadline=None, derandomize=True)
@given(st.integers(0, 2**32))
def test_full_space_is_never_worse_than_structured(seed):
    """The full space contains the structured one: its optimum is <= and statuses agree on fit."""
    instance = tiny_instance(seed)
    structured, full = solve(instance, STRUCTURED), solve(instance, FULL)
    check_result(instance, structured)
    check_result(instance, full)
    if structured.status is Status.OPTIMAL:
        assert full.status is Status.OPTIMAL
        assert full.objective_ticks <= structured.objective_ticks
    else:
        assert structured.status is Status.INFEASIBLE


def test_infeasible_reports_the_least_excess(data_dir):
    """With too little HBM both spaces are INFEASIBLE and the reason names the byte excess."""
    instance = load_instance(data_dir / "worked_example.json")
    small = dataclasses.replace(instance.cluster, hbm_bytes=10**9)
    instance = dataclasses.replace(instance, cluster=small)
    for options in (STRUCTURED, FULL):
        result = solve(instance, options)
        assert result.status is Status.INFEASIBLE and result.plan is None
        # least worst stage: S = 2, stage 0 holds 16e9 state + 2 in flight x 4e9 = 24e9 bytes
        assert "exceeds usable HBM by 23000000000 bytes" in result.message


def test_full_space_refuses_large_instances(data_dir):
    """A full-space enumeration above the placement limit raises ValueError, not a long run."""
    instance = load_instance(data_dir / "worked_example.json")
    with pytest.raises(ValueError, match="placements"):
        solve(instance, SolveOptions(space=Space.FULL, extra={"max_placements": 10}))


def test_brute_chooses_interleaving_when_it_pays(data_dir):
    """On DESIGN §3.2 b's instance cut to two devices (one node), the optimum is the v = 2
    plan, 51,374,000 ticks, in both spaces; with v = 1 only it is 54,099,000 (S = 1 costs
    96,000,000 at d = 1 and 4 * 12,000,000 + 40,002,000 at d = 2)."""
    instance = load_instance(data_dir / "interleaved_example.json")
    instance = dataclasses.replace(instance, cluster=dataclasses.replace(instance.cluster,
                                                                          num_devices=2))
    for options in (STRUCTURED, FULL):
        result = solve(instance, options)
        check_result(instance, result)
        assert result.objective_ticks == 51_374_000
    plain = dataclasses.replace(instance, training=dataclasses.replace(
        instance.training, virtual_stages=(1,)))
    assert solve(plain, STRUCTURED).objective_ticks == 54_099_000


def test_brute_chooses_selective_recompute_when_it_pays(data_dir):
    """On selective_example (HBM 22e9) stage 0 does not fit without recomputation; selective
    on it gives 29,799,000 ticks, full only 36,099,000 (S = 2, d = 1 on a tier-0 pair)."""
    instance = load_instance(data_dir / "selective_example.json")
    for options in (STRUCTURED, FULL):
        assert solve(instance, options).objective_ticks == 29_799_000
    no_selective = dataclasses.replace(instance, training=dataclasses.replace(
        instance.training, recompute_modes=(RecomputeMode.NONE, RecomputeMode.FULL)))
    assert solve(no_selective, FULL).objective_ticks == 36_099_000
