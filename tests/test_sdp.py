"""Subnetwork data parallelism (DESIGN §7): the evaluator, masks, designs, files and the CLI.

The worked example of DESIGN §7 is reproduced to the tick and the byte; malformed SDP
plans and instances exit 2 naming the field.
"""

import dataclasses
import json
from fractions import Fraction
from pathlib import Path

import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from nest_cp import evaluate, instance_to_dict, load_instance, load_plan, plan_to_dict
from nest_cp.cli import main
from nest_cp.cost.sdp import (
    SdpDesign,
    UnitTable,
    design_mask,
    mask_violations,
    unit_table,
    worker_graph_connectivity,
)
from nest_cp.io.readers import instance_from_dict, plan_from_dict
from nest_cp.model.errors import InstanceFormatError, PlanFormatError
from nest_cp.model.instance import RecomputeMode, SdpLevel, SdpMasking, Strategy
from nest_cp.model.plan import SdpMask

DATA = Path(__file__).parent / "data"


def _run(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


@pytest.fixture(scope="module")
def worked():
    return load_instance(DATA / "sdp_worked_example.json")


@pytest.fixture(scope="module")
def grouped():
    return load_plan(DATA / "plan_sdp_grouped.json")


def _plain(plan):
    return dataclasses.replace(plan, strategy=Strategy.DP, sdp=None)


# ------------------------------------------------------------------ the worked example


def test_worked_example_plain_dp(worked, grouped):
    """§7 under v3: plain DP over 4 workers, two per node (k = 2 channels at 2e10 B/s):
    tau 7,500,000, sync 360,060,000 (one channel: 720,060,000), T = T_eff = 375,060,000,
    memory 47.9e9."""
    result = evaluate(worked, _plain(grouped))
    assert result.tau_max_ticks == 7_500_000 and result.sync_ticks == 360_060_000
    assert result.objective_ticks == 375_060_000 and result.effective == 375_060_000
    assert result.stages[0].memory_bytes == 47_900_000_000


def test_worked_example_forward_grouped(worked, grouped):
    """§7 forward masking, grouped, under v3: tau_w 4,500,000, sync 60,060,000 (shared, two
    channels) + 20,002,000, T 89,062,000, T_eff 445,310,000/3 (148,436,667 rounded up),
    memory 27.9e9, 20e9 saved."""
    result = evaluate(worked, grouped)
    report = result.sdp
    assert result.feasible and result.tau_max_ticks == 4_500_000
    assert result.sync_ticks == 80_062_000 and result.objective_ticks == 89_062_000
    assert report.effective == Fraction(445_310_000, 3)
    assert report.effective_ticks == 148_436_667 and report.full_compute_ticks == 7_500_000
    assert report.memory_bytes == 27_900_000_000
    assert report.plain_memory_bytes == 47_900_000_000
    assert report.memory_saved_bytes == 20_000_000_000
    assert report.coverage == Fraction(1, 2)


def test_worked_example_strided_mask_pays_the_slow_tier(worked):
    """§7 under v3: the strided mask (blocks held by {0, 2} and {1, 3}, one per node: k = 1)
    all-reduces each block on tier 1 (200,020,000): T = 269,080,000, T_eff -> 448,466,667."""
    result = evaluate(worked, load_plan(DATA / "plan_sdp_strided.json"))
    assert result.objective_ticks == 269_080_000
    assert result.sync_ticks == 60_060_000 + 200_020_000
    assert result.sdp.effective_ticks == 448_466_667


def test_worked_example_backward_masking(worked):
    """§7 backward masking, grouped, under v3: tau_w 6,500,000, sync 280,122,000 (two
    100,030,000 broadcasts on two channels added), T 293,122,000, T_eff 4,396,830,000/13 ->
    338,217,693, memory 33.9e9."""
    result = evaluate(worked, load_plan(DATA / "plan_sdp_backward.json"))
    assert result.tau_max_ticks == 6_500_000
    assert result.sync_ticks == 280_122_000 and result.objective_ticks == 293_122_000
    assert result.sdp.effective == Fraction(4_396_830_000, 13)
    assert result.sdp.effective_ticks == 338_217_693
    assert result.sdp.memory_bytes == 33_900_000_000


def test_sdp_plans_have_no_mfu_or_hfu(worked, grouped):
    """MFU and HFU are null for SDP plans even where profiles carry FLOPs and the cluster
    its peak (DESIGN §3.2 e)."""
    layers = tuple(dataclasses.replace(layer, profiles={
        key: dataclasses.replace(p, flops=1e12) for key, p in layer.profiles.items()})
        for layer in worked.workload.layers)
    instance = dataclasses.replace(
        worked, workload=dataclasses.replace(worked.workload, layers=layers),
        cluster=dataclasses.replace(worked.cluster, peak_flops_per_s=1e15))
    assert evaluate(instance, _plain(grouped)).mfu is not None
    result = evaluate(instance, grouped)
    assert result.mfu is None and result.hfu is None


def test_overlap_hides_sync_behind_each_workers_backward(worked, grouped):
    """With overlap_grad_reduce a worker exposes max(0, sync_w - R_w), R_w its backward ticks
    (3,000,000 for a worker holding one block)."""
    instance = dataclasses.replace(worked, training=dataclasses.replace(
        worked.training, overlap_grad_reduce=True))
    result = evaluate(instance, grouped)
    assert result.exposed_sync_ticks == 80_062_000 - 3_000_000
    assert result.objective_ticks == 2 * 4_500_000 + 80_062_000 - 3_000_000


def test_full_recompute_reruns_the_held_forward(worked, grouped):
    """Full recomputation adds the forward of the shares a worker runs (1,500,000 ticks),
    keeps their checkpoints and holds the largest rebuilt layer (4e9) as working set."""
    instance = dataclasses.replace(worked, training=dataclasses.replace(
        worked.training, recompute_modes=(RecomputeMode.NONE, RecomputeMode.FULL)))
    plan = dataclasses.replace(grouped, stages=(dataclasses.replace(
        grouped.stages[0], recompute=RecomputeMode.FULL),))
    result = evaluate(instance, plan)
    assert result.tau_max_ticks == 4_500_000 + 1_500_000
    assert result.sdp.memory_bytes == 1_400_000_000 * 16 + 3 * 1_000_000 + 4_000_000_000


def test_zero_shards_held_units_over_their_holders(worked, grouped):
    """ZeRO-2 shards gradients and optimizer state of shared parameters over d = 4 and of a
    held block over its h = 2 holders."""
    instance = dataclasses.replace(worked, training=dataclasses.replace(
        worked.training, zero_stages=(0, 2)))
    result = evaluate(instance, dataclasses.replace(grouped, zero=2))
    shared, held = 400_000_000, 1_000_000_000
    assert result.sdp.memory_bytes == (shared * 2 + shared * 14 // 4 + held * 2
                                       + held * 14 // 2 + 5_500_000_000)


# ------------------------------------------------------------------ masks and designs


@pytest.mark.parametrize("name, field", [
    ("broken_plan_sdp_holder_count.json", "sdp.mask"),
    ("broken_plan_sdp_unequal_rows.json", "sdp.mask[0]"),
    ("broken_plan_sdp_unit_range.json", "sdp.mask[3]"),
    ("broken_plan_sdp_rows.json", "sdp.mask"),
    ("broken_plan_sdp_pipeline.json", "stages"),
    ("broken_plan_sdp_zero3.json", "zero"),
])
def test_invalid_sdp_plans_exit_2_naming_the_field(name, field):
    """A unit held by the wrong number of workers, unequal rows, an unknown unit, a missing
    row, a pipeline or ZeRO-3 in an SDP plan: exit 2, one line naming file and field."""
    result = _run("evaluate", DATA / "sdp_worked_example.json", DATA / name)
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and f"{name}: {field}:" in lines[0], lines


@pytest.mark.parametrize("name, expected", [
    ("broken_plan_sdp_level.json", "sdp.level: expected one of 'block', 'neuron'"),
    ("broken_plan_sdp_missing.json", "sdp: expected an 'sdp' section"),
])
def test_malformed_sdp_plan_files_are_plan_format_errors(name, expected):
    """An unknown level or a strategy 'sdp' without its section is a PlanFormatError."""
    with pytest.raises(PlanFormatError, match=expected.replace(".", r"\.")):
        load_plan(DATA / name)


@pytest.mark.parametrize("name, field", [
    ("broken_sdp_no_wgrad.json", "training.sdp.maskings"),
    ("broken_sdp_holders_and_coverages.json", "training.sdp.coverages"),
    ("broken_sdp_coverage.json", "training.sdp.coverages[1]"),
    ("broken_sdp_no_units.json", "training.strategies"),
    ("broken_sdp_strategy.json", "training.strategies[1]"),
])
def test_broken_sdp_instances_name_the_field(name, field):
    """Backward masking without wgrad_s, holders and coverages together, a coverage above 1,
    SDP without a maskable layer, an unknown strategy: InstanceFormatError at the field."""
    with pytest.raises(InstanceFormatError) as info:
        load_instance(DATA / name)
    assert info.value.field == field and info.value.file.endswith(name)


def test_a_plain_plan_on_an_sdp_only_instance_names_the_strategy(tmp_path):
    """Plain plans are refused where training.strategies allows only 'sdp' (exit 2)."""
    document = json.loads((DATA / "sdp_worked_example.json").read_text())
    document["training"]["strategies"] = ["sdp"]
    (tmp_path / "only.json").write_text(json.dumps(document))
    result = _run("evaluate", tmp_path / "only.json", "--pp", "1", "--dp", "4")
    assert result.exit_code == 2 and "strategy 'dp' not allowed" in result.output


def _table(units_per_layer: list[int], level: SdpLevel) -> UnitTable:
    from nest_cp.harness.generators import random_sdp_instance

    instance = random_sdp_instance(0, num_blocks=len(units_per_layer), units=max(
        units_per_layer), levels=(level,))
    return unit_table(instance, *instance.choices[0], level)


@settings(max_examples=40, deadline=None)
@given(workers=st.integers(1, 8), holders=st.integers(1, 8), units=st.sampled_from([1, 2, 4, 8]),
       blocks=st.integers(1, 4), level=st.sampled_from(list(SdpLevel)),
       design=st.sampled_from(list(SdpDesign)))
def test_designs_are_valid_masks(workers, holders, units, blocks, level, design):
    """Every mask a design returns holds each unit exactly h times with balanced rows; the
    grouped design applies iff h | d and (d/h) | U, the cyclic one iff d | U."""
    table = _table([units] * blocks, level)
    rows = design_mask(table, design, workers, holders)
    sizes = [len(block) for block in table.blocks]
    if holders > workers:
        assert rows is None
        return
    if design is SdpDesign.GROUPED:
        applies = workers % holders == 0 and all(s % (workers // holders) == 0 for s in sizes)
    else:
        applies = all(s % workers == 0 for s in sizes)
    assert (rows is not None) == applies
    if rows is not None:
        assert not mask_violations(table, SdpMask(level, SdpMasking.FORWARD, holders, rows),
                                   workers)


def test_cyclic_ring_connectivity_and_grouped_disconnection():
    """The cyclic mask of 4 units over 4 workers with h = 2 is a 4-cycle (algebraic
    connectivity 2); the grouped one splits the workers into two components (0)."""
    ring, ring_connected = worker_graph_connectivity(((0, 1), (1, 2), (2, 3), (0, 3)), 4)
    assert ring == pytest.approx(2.0) and ring_connected
    pairs, pairs_connected = worker_graph_connectivity(((0, 2), (0, 2), (1, 3), (1, 3)), 4)
    assert pairs == pytest.approx(0.0, abs=1e-9) and not pairs_connected


def test_neuron_level_shares_split_width_but_keep_collectives_shared():
    """At neuron level a unit carries f/U of the width quantities and no collective; the
    shared part carries 1 - f and every collective (the residual stream does not narrow)."""
    from nest_cp.harness.generators import random_sdp_instance
    from nest_cp.model.instance import IntraConfig

    instance = random_sdp_instance(3, units=4, levels=(SdpLevel.NEURON,),
                                   configs=(IntraConfig(2, 1),))
    config, microbatch = instance.choices[0]
    table = unit_table(instance, config, microbatch, SdpLevel.NEURON)
    profile = instance.workload.layers[1].profile(config, microbatch)
    fraction = Fraction(str(profile.sdp_fraction))
    unit, shared = table.units[0], table.shared[1]
    assert unit.collectives == () and shared.collectives == profile.collectives
    assert unit.dense_params == -(-profile.dense_params * fraction // 4)
    assert shared.act_bytes == -(-profile.act_bytes * (1 - fraction) // 1)
    assert len(table.blocks) == 2 and all(len(block) == 4 for block in table.blocks)


# ------------------------------------------------------------------ files and CLI


def test_sdp_training_and_plan_round_trip(worked, grouped):
    """Instances allowing SDP and SDP plans survive writing and reading unchanged; instances
    without SDP write no strategies (older files keep their content)."""
    assert instance_from_dict(instance_to_dict(worked)) == worked
    assert plan_from_dict(plan_to_dict(grouped)) == grouped
    plain = load_instance(DATA / "worked_example.json")
    assert "strategies" not in instance_to_dict(plain)["training"]


def test_coverages_read_as_exact_fractions():
    """Coverages given as numbers or "p/q" strings are exact fractions; h/d must equal one."""
    document = json.loads((DATA / "sdp_worked_example.json").read_text())
    document["training"]["sdp"] = {"coverages": [0.25, "1/3"]}
    training = instance_from_dict(document).training
    assert training.sdp.coverages == (Fraction(1, 4), Fraction(1, 3))
    assert training.sdp.allows(1, 3) and training.sdp.allows(2, 8)
    assert not training.sdp.allows(2, 4)


def test_evaluate_sdp_plan_prints_workers_t_eff_and_memory_saved():
    """`evaluate` on an SDP plan prints per-worker rows, T_eff and the memory saved; --json
    carries them under "sdp"."""
    result = _run("evaluate", DATA / "sdp_worked_example.json", DATA / "plan_sdp_grouped.json")
    assert result.exit_code == 0, result.output
    assert "T_eff = 148436667 ticks" in result.output and "20000000000 bytes saved" in \
        result.output
    data = json.loads(_run("evaluate", DATA / "sdp_worked_example.json",
                           DATA / "plan_sdp_grouped.json", "--json").output)
    assert data["strategy"] == "sdp" and data["mfu"] is None
    assert data["sdp"]["effective_exact"] == "445310000/3"
    assert data["sdp"]["memory_saved_bytes"] == 20_000_000_000
    assert data["sdp"]["connected"] is False


def test_solve_json_reports_plain_and_sdp_separately():
    """`solve --json` on an SDP instance prints the best plain and the best SDP plan, each with
    effective_ticks, coverage and memory_saved_bytes; the evaluator reproduces both."""
    result = _run("solve", DATA / "sdp_worked_example.json", "--json")
    assert result.exit_code == 0, result.output
    record = json.loads(result.output)
    sdp = record["sdp"]
    for part in (record, sdp):
        assert {"effective_ticks", "coverage", "memory_saved_bytes"} <= set(part)
    assert "better" not in record
    instance = load_instance(DATA / "sdp_worked_example.json")
    plain = evaluate(instance, plan_from_dict(record["plan"]))
    assert plain.objective_ticks == record["objective_ticks"] == record["effective_ticks"]
    best = evaluate(instance, plan_from_dict(sdp["plan"]))
    assert best.objective_ticks == sdp["objective_ticks"]
    assert str(best.sdp.effective) == sdp["effective_exact"]
    assert best.sdp.memory_saved_bytes == sdp["memory_saved_bytes"]


def test_rank_by_effective_names_the_better_plan(tmp_path):
    """--rank-by effective says which of the two plans has the least T_eff and writes that
    one with -o; by default the plain plan is written."""
    out = tmp_path / "plan.json"
    record = json.loads(_run("solve", DATA / "sdp_worked_example.json", "--rank-by",
                             "effective", "--json", "-o", out).output)
    plain_t, sdp_eff = record["objective_ticks"], Fraction(record["sdp"]["effective_exact"])
    assert record["better"] == ("sdp" if sdp_eff < plain_t else "dp")
    assert (load_plan(out).strategy is Strategy.SDP) == (record["better"] == "sdp")
    _run("solve", DATA / "sdp_worked_example.json", "-o", out)
    assert load_plan(out).strategy is Strategy.DP


def test_only_sdp_fits_returns_the_sdp_plan_with_exit_0(tmp_path):
    """Where no plain plan fits but an SDP plan does: exit 0, plain 'no plan fits', the SDP
    plan reported and written by -o."""
    out = tmp_path / "plan.json"
    result = _run("solve", DATA / "sdp_only_fits.json", "--json", "-o", out)
    assert result.exit_code == 0, result.output
    record = json.loads(result.output)
    assert record["status"] == "INFEASIBLE" and "no plan fits" in record["message"]
    assert record["sdp"]["status"] == "OPTIMAL" and record["sdp"]["coverage"] == "1/4"
    assert load_plan(out).strategy is Strategy.SDP
    table = _run("solve", DATA / "sdp_only_fits.json")
    assert table.exit_code == 0 and "SDP (subnetwork data parallelism" in table.output


def test_rank_by_is_refused_by_backends_without_sdp():
    """--rank-by is an option of the backends that search SDP plans only (exit 2 otherwise)."""
    result = _run("solve", DATA / "sdp_worked_example.json", "--backend", "manual",
                  "--rank-by", "effective")
    assert result.exit_code == 2 and "--rank-by" in result.output


@settings(max_examples=60, deadline=None)
@given(workers=st.integers(1, 40), holders=st.lists(st.integers(1, 40), max_size=3),
       coverages=st.lists(st.fractions(min_value=Fraction(1, 40), max_value=1,
                                       max_denominator=40), max_size=3))
def test_holder_counts_lists_exactly_what_allows_accepts(workers, holders, coverages):
    """SdpSetup.holder_counts(d) is the ascending list of the h that allows(h, d) accepts."""
    from nest_cp.model.instance import SdpSetup

    setup = SdpSetup(holders=tuple(dict.fromkeys(holders)),
                     coverages=() if holders else tuple(dict.fromkeys(coverages)))
    expected = tuple(h for h in range(1, workers + 1) if setup.allows(h, workers))
    assert setup.holder_counts(workers) == expected
