"""SDP in every backend (DESIGN §7): DP, CP-SAT, MILP and brute force agree.

Differential tests on seeded random tiny instances compare T_eff, never plans: the DP's
vectorised pricing equals the evaluator's on random masks and placements; in the
structured space the DP, brute force, CP-SAT and the MILP reach the same optimum (the
algorithmic certificate); in the full space CP-SAT, the MILP and brute force agree and
are never worse than the structured optimum.  Every result passes the registry's
referee (``nest_cp.solvers.registry.solve``).
"""

from __future__ import annotations

import dataclasses
import json
import random
from pathlib import Path

import pytest
from pinning import sdp_plan_on_devices, sdp_prices_match
from tiers import first_fast

from nest_cp import load_instance
from nest_cp.cost.sdp import mask_violations, unit_table
from nest_cp.harness.generators import random_sdp_instance
from nest_cp.model.errors import BackendOptionError, InvalidPlan
from nest_cp.model.instance import IntraConfig, RecomputeMode, SdpLevel, SdpMasking, Strategy
from nest_cp.model.plan import Plan, SdpMask
from nest_cp.model.result import SolveOptions, Space, Status
from nest_cp.solvers.registry import check_result, solve

DATA = Path(__file__).parent / "data"
BOTH_LEVELS = (SdpLevel.BLOCK, SdpLevel.NEURON)
BOTH_MASKINGS = (SdpMasking.FORWARD, SdpMasking.BACKWARD)

# name -> keyword arguments of random_sdp_instance: tiny enough for the full-space oracle
KINDS = {
    "block-forward": dict(units=1, levels=(SdpLevel.BLOCK,), comm_scale=30),
    "neuron-backward": dict(units=2, num_blocks=1, levels=(SdpLevel.NEURON,),
                            maskings=(SdpMasking.BACKWARD,)),
    "both-tp": dict(units=2, num_blocks=1, levels=BOTH_LEVELS, maskings=BOTH_MASKINGS,
                    configs=(IntraConfig(), IntraConfig(2, 1)), comm_scale=30),
    "three-tier-recompute": dict(units=1, tier_sizes=(2, 1, 2), comm_scale=30,
                                 recompute_modes=(RecomputeMode.NONE, RecomputeMode.FULL),
                                 hbm_bytes=35 * 10**9),
    "graph-overlap": dict(units=2, graph=True, comm_scale=30, levels=BOTH_LEVELS,
                          overlap_grad_reduce=True, zero_stages=(0, 2)),
}


def _sdp(instance, backend: str, space: Space):
    options = SolveOptions(space=space, time_limit_s=60.0, seed=0, workers=1)
    result = solve(instance, backend, options).sdp
    assert result.status in (Status.OPTIMAL, Status.INFEASIBLE), result.message
    return result.status, result.effective


@pytest.mark.parametrize("seed", first_fast([0, 1]))
@pytest.mark.parametrize("kind", sorted(KINDS))
def test_structured_dp_brute_cpsat_milp_agree(kind, seed):
    """DP, brute force, CP-SAT and the MILP find the same structured SDP optimum T_eff."""
    instance = random_sdp_instance(seed, strategies=(Strategy.SDP,), **KINDS[kind])
    dp = _sdp(instance, "dp", Space.STRUCTURED)
    assert _sdp(instance, "brute", Space.STRUCTURED) == dp
    assert _sdp(instance, "cpsat", Space.STRUCTURED) == dp
    assert _sdp(instance, "milp", Space.STRUCTURED) == dp


@pytest.mark.parametrize("seed", first_fast([0, 1]))
@pytest.mark.parametrize("kind", sorted(KINDS))
def test_full_space_cpsat_milp_brute_agree_and_never_lose(kind, seed):
    """CP-SAT, the MILP and brute force find the same full-space SDP optimum, at most the
    structured one (the designs are a subset of all valid masks)."""
    instance = random_sdp_instance(seed, strategies=(Strategy.SDP,), **KINDS[kind])
    brute = _sdp(instance, "brute", Space.FULL)
    assert _sdp(instance, "cpsat", Space.FULL) == brute
    assert _sdp(instance, "milp", Space.FULL) == brute
    status, structured = _sdp(instance, "dp", Space.STRUCTURED)
    if status is Status.OPTIMAL:
        assert brute[1] <= structured


def test_vectorised_pricing_equals_the_evaluator_on_random_plans():
    """The DP's vectorised SDP pricing gives the evaluator's T and memory on random valid masks
    and random placements (both levels and maskings, tp / ep, modes, ZeRO, overlap, graphs)."""
    rng = random.Random(7)
    compared = 0
    for seed in range(12):
        configs = rng.choice([(IntraConfig(),), (IntraConfig(2, 1),), (IntraConfig(1, 2),)])
        instance = random_sdp_instance(
            seed, num_blocks=rng.choice([1, 2, 3]), units=rng.choice([1, 2, 4]),
            tier_sizes=rng.choice([(2, 2), (2, 2, 2)]), levels=BOTH_LEVELS,
            maskings=BOTH_MASKINGS, configs=configs, zero_stages=(0, 1, 2),
            recompute_modes=tuple(RecomputeMode), overlap_grad_reduce=rng.random() < 0.5,
            graph=rng.random() < 0.3, comm_scale=10, holders=tuple(range(1, 9)))
        compared += len(sdp_prices_match(rng, instance, 4, _random_plan))
    assert compared >= 20


def _random_plan(rng: random.Random, instance) -> Plan | None:
    config, microbatch = rng.choice(instance.choices)
    devices = instance.cluster.num_devices
    if devices // config.devices < 2:
        return None
    workers = rng.randint(2, devices // config.devices)
    level, masking = rng.choice(BOTH_LEVELS), rng.choice(BOTH_MASKINGS)
    table = unit_table(instance, config, microbatch, level)
    choices = [h for h in range(1, workers + 1)
               if all(len(block) * h % workers == 0 for block in table.blocks)]
    if not choices:
        return None
    holders = rng.choice(choices)
    for _ in range(200):  # a random valid mask, by rejection
        rows = [[] for _ in range(workers)]
        for unit in range(table.num_units):
            for worker in rng.sample(range(workers), holders):
                rows[worker].append(unit)
        mask = SdpMask(level, masking, holders, tuple(tuple(sorted(r)) for r in rows))
        if not mask_violations(table, mask, workers):
            break
    else:
        return None
    chosen = rng.sample(range(devices), workers * config.devices)
    return sdp_plan_on_devices(rng, instance, config, microbatch, workers, mask, chosen)


def test_only_sdp_instances_refuse_backends_without_sdp():
    """A backend that searches no SDP plan on an instance allowing only SDP is an option
    error (exit 2), not a wrong answer."""
    instance = random_sdp_instance(0, strategies=(Strategy.SDP,))
    with pytest.raises(BackendOptionError, match="searches SDP plans"):
        solve(instance, "manual")


def test_referee_rejects_a_wrong_t_eff():
    """The registry's referee checks an SDP result's T_eff against the evaluator's."""
    instance = load_instance(DATA / "sdp_worked_example.json")
    result = solve(instance, "dp")
    wrong = dataclasses.replace(result, sdp=dataclasses.replace(
        result.sdp, effective=result.sdp.effective + 1, effective_bound=result.sdp.effective + 1))
    with pytest.raises(InvalidPlan, match="T_eff"):
        check_result(instance, wrong)


def test_stopped_full_search_keeps_a_valid_bound():
    """A full-space search stopped at a tiny time limit reports FEASIBLE or UNKNOWN with a
    T_eff bound at most the true optimum, or proves it; never a wrong OPTIMAL."""
    instance = random_sdp_instance(1, strategies=(Strategy.SDP,), **KINDS["both-tp"])
    truth = _sdp(instance, "brute", Space.FULL)[1]
    result = solve(instance, "cpsat", SolveOptions(space=Space.FULL, time_limit_s=0.05)).sdp
    if result.status is Status.OPTIMAL:
        assert result.effective == truth
    elif truth is not None and result.effective_bound is not None:
        assert result.effective_bound <= truth


def test_verify_writes_an_sdp_section(tmp_path):
    """`verify` on an SDP instance certifies the SDP search separately and writes an SDP
    section with T_eff in the gap tables."""
    from click.testing import CliRunner

    from nest_cp.cli import main

    result = CliRunner().invoke(main, [
        "verify", str(DATA / "sdp_worked_example.json"), "--out", str(tmp_path),
        "--backends", "dp,cpsat", "--time-limit", "20", "--jobs", "1", "--no-progress",
        "--cache-dir", str(tmp_path / "cache")])
    assert result.exit_code == 0, result.output
    table = (tmp_path / "gap_table.md").read_text()
    assert "## SDP (T_eff)" in table and "dp T_eff [ms]" in table
    record = json.loads((tmp_path / "results.json").read_text())["instances"][0]
    assert record["sdp"]["certificate"] == "yes" and not record["sdp"]["failures"]


def test_malformed_sdp_reference_is_bad_input(tmp_path):
    """A reference whose SDP part holds a T_eff that is not a rational names the field."""
    from nest_cp.model.errors import InstanceFormatError
    from nest_cp.verify.harness import load_reference

    instance = tmp_path / "x.json"
    instance.write_text((DATA / "sdp_worked_example.json").read_text())
    (tmp_path / "x.ref.json").write_text(json.dumps({
        "instance_sha256": "0", "spaces": {},
        "sdp": {"spaces": {"full": {"status": "OPTIMAL", "objective_ticks": "abc"}}}}))
    with pytest.raises(InstanceFormatError) as info:
        load_reference(instance)
    assert info.value.field == "sdp.spaces.full.objective_ticks"


SMALL = Path(__file__).parent.parent / "instances" / "small"


@pytest.mark.parametrize("name", sorted(p.name for p in SMALL.glob("sdp*.json")
                                        if not p.name.endswith(".ref.json")))
def test_small_sdp_instances_structured_equals_dp_and_full_is_never_worse(name):
    """On every SDP instance of instances/small, CP-SAT's structured SDP optimum equals the
    DP's and its full-space optimum is at most that (issue 10's acceptance check)."""
    instance = load_instance(SMALL / name)
    dp = _sdp(instance, "dp", Space.STRUCTURED)
    assert _sdp(instance, "cpsat", Space.STRUCTURED) == dp
    status, full = _sdp(instance, "cpsat", Space.FULL)
    assert status is Status.OPTIMAL and full <= dp[1]
