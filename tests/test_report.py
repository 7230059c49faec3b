"""Readable plans: placement map, idle devices, stage units, `show` and its PNG, 'bound: none'."""

import json
from pathlib import Path

from click.testing import CliRunner

from nest_cp import io
from nest_cp.cli import main
from nest_cp.cli.report import device_groups, placement_lines, plan_report, ranges, usage_line
from nest_cp.cost.evaluate import evaluate
from nest_cp.model.instance import IntraConfig
from nest_cp.model.plan import Plan, Stage

DATA = Path(__file__).parent / "data"
SMALL = Path(__file__).parent.parent / "instances" / "small"
EXPORT = DATA / "export"
GPT3 = Path(__file__).parent.parent / "instances" / "paper" / \
    "gpt3-175b--nest-tpuv4-fattree--1024.json"


def _cli(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


def test_ranges_compress_runs():
    """Sorted integers print as compact ranges."""
    assert ranges([5, 0, 1, 2, 7, 8]) == "0-2,5,7-8"
    assert ranges([]) == ""


def test_worked_example_nest_layout_map():
    """§3.1's NEST layout: each node runs both stages of one replica, one line per node."""
    instance = io.load_instance(DATA / "worked_example.json")
    evaluation = evaluate(instance, io.load_plan(EXPORT / "worked_example_nest.plan.json"))
    lines = placement_lines(instance, evaluation)
    assert [line.split()[:4] for line in lines] == [["node", "0", "dev", "0-1"],
                                                    ["node", "1", "dev", "2-3"]]
    assert lines[0].endswith("s0-1 r0") and lines[1].endswith("s0-1 r1")
    assert usage_line(instance, evaluation) == "devices: 4 of 4 used"


def test_idle_devices_are_named():
    """A plan on 2 of 4 devices says which 2 devices sit idle, in the usage line and the map."""
    instance = io.load_instance(DATA / "worked_example.json")
    plan = Plan(IntraConfig(), 1, 0, 1, (Stage(0, 0), Stage(1, 1)))
    evaluation = evaluate(instance, plan)
    assert usage_line(instance, evaluation) == "devices: 2 of 4 used; 2 idle (devices 2-3)"
    assert placement_lines(instance, evaluation)[1].endswith("idle 2")


def test_gpt3_map_uses_tier1_domains_and_lists_idle():
    """At 1,024 devices the map has one line per tier-1 domain (32), the last one part idle."""
    instance = io.load_instance(GPT3)
    evaluation = evaluate(instance, io.load_plan(EXPORT / "gpt3-175b-tpuv4-1024.plan.json"))
    lines = placement_lines(instance, evaluation)
    assert len(lines) == 32 and all(line.split()[0] == "group" for line in lines)
    assert lines[-1].endswith("s24 r4 | idle 24")
    assert "24 idle (devices 1000-1023)" in usage_line(instance, evaluation)


def test_split_stage_replicas_list_their_ranks():
    """A stage replica spread over two nodes lists the intra-stage ranks each node holds."""
    instance = io.load_instance(SMALL / "moe-l4-d8-tp-ep.json")  # nodes of 4 devices
    plan = Plan(IntraConfig(2, 2), 1, 0, 1, (Stage(0, 3),))
    plan = plan.with_placement(((tuple([1, 2, 3, 4]),),))
    lines = placement_lines(instance, evaluate(instance, plan))
    texts = [line.split("  ")[-1] for line in lines]
    assert instance.cluster.network.tiers[0].size == 4
    assert texts[:2] == ["s0 r0 j0-2 | idle 1", "s0 r0 j3 | idle 3"]


def test_graph_network_groups_are_clusters():
    """On a graph network the map groups devices into bandwidth clusters covering every device."""
    instance = io.load_instance(SMALL / "graph-islands-dense-l4-d8.json")
    groups = device_groups(instance)
    assert 1 < len(groups) <= 8 and "cluster" in groups[0].label
    assert sorted(d for group in groups for d in group.devices) == list(range(8))


def test_report_states_units():
    """The stage table names its units: ms per microbatch, ms of sync, GiB per device."""
    instance = io.load_instance(DATA / "worked_example.json")
    report = plan_report(instance, evaluate(instance, io.load_plan(
        DATA / "plan_megatron_default.json")))
    assert "time ms" in report and "memory GiB" in report and "sync ms" in report
    assert "    3.110 " in report  # τ = 3,110,000 ticks = 3.110 ms


def test_solve_prints_placement_and_heuristics_print_bound_none():
    """`solve` prints the map; a heuristic says 'bound none', never 'None ticks'."""
    result = _cli("solve", DATA / "worked_example.json", "--backend", "manual")
    assert result.exit_code == 0, result.output
    assert "bound      none" in result.output and "None" not in result.output
    assert "placement (" in result.output and "devices: " in result.output
    exact = _cli("solve", DATA / "worked_example.json", "--backend", "dp")
    assert "bound      27099000 ticks" in exact.output
    assert "devices: 2 of 4 used; 2 idle (devices 2-3)" in exact.output


def test_show_writes_a_png(tmp_path):
    """`show --png` prints the map and writes a PNG image of a sensible size."""
    png = tmp_path / "plan.png"
    result = _cli("show", EXPORT / "worked_example_nest.plan.json", "--instance",
                  DATA / "worked_example.json", "--png", png)
    assert result.exit_code == 0, result.output
    assert "node 0" in result.output and f"wrote {png}" in result.output
    data = png.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 20_000


def test_show_draws_1024_devices(tmp_path):
    """`show` draws the GPT3-175B plan on 1,024 devices."""
    png = tmp_path / "gpt3.png"
    result = _cli("show", EXPORT / "gpt3-175b-tpuv4-1024.plan.json", "--instance", GPT3,
                  "--png", png)
    assert result.exit_code == 0, result.output
    assert png.stat().st_size > 50_000


def test_show_rejects_a_plan_that_does_not_fit(tmp_path):
    """`show` on a plan that does not fit the instance: one line naming the file, exit 2."""
    result = _cli("show", DATA / "plan_megatron_default.json", "--instance",
                  SMALL / "tight-l8-d16-h3.json")
    assert result.exit_code == 2 and len(result.output.strip().splitlines()) == 1
    assert "plan_megatron_default.json" in result.output


def test_evaluate_json_is_unchanged_by_the_report():
    """`evaluate --json` stays machine-readable JSON (the report is for the table only)."""
    result = _cli("evaluate", DATA / "worked_example.json", DATA / "plan_megatron_default.json",
                  "--json")
    assert json.loads(result.output)["objective_ticks"] == 35_552_000


def _figure(plan_path: Path, instance_path: Path):
    from nest_cp.cli.show import plan_figure

    instance = io.load_instance(instance_path)
    return plan_figure(instance, evaluate(instance, io.load_plan(plan_path)))


def test_the_plot_of_one_stage_has_one_tick_at_stage_0(tmp_path):
    """One stage: the stage panels show one bar at tick 0 (not an axis from -0.4 to 0.4),
    the legend one stage entry, and every other replica is drawn lighter."""
    import matplotlib.pyplot as plt

    plan = Plan(IntraConfig(1, 1), 1, 0, 4, (Stage(0, 1),))
    path = tmp_path / "one_stage.json"
    io.save_plan(plan, path)
    figure = _figure(path, DATA / "worked_example.json")
    placement, times, memory = figure.axes[:3]
    for axis in (times, memory):
        assert list(axis.get_xticks()) == [0]
        low, high = axis.get_xlim()
        assert low <= -0.5 and high >= 0.5
    legend = [text.get_text() for text in placement.get_legend().get_texts()]
    assert [entry for entry in legend if entry.startswith("stage ")] == ["stage 0"]
    assert "odd replicas (lighter)" in legend
    fills = {patch.get_facecolor() for patch in placement.patches if patch.get_fill()}
    assert len(fills) >= 2  # replicas 0 and 1 differ
    plt.close(figure)


def test_the_plot_of_1024_devices_labels_every_stage():
    """GPT-3 on 1,024 devices in 25 stages: squares too small for per-device labels, so
    each stage is labelled on the placement, and the stage colours have a colour bar over
    stages 0-24 (beyond DISCRETE_STAGES legend entries)."""
    import matplotlib.pyplot as plt

    figure = _figure(EXPORT / "gpt3-175b-tpuv4-1024.plan.json", GPT3)
    stages = io.load_plan(EXPORT / "gpt3-175b-tpuv4-1024.plan.json").num_stages
    placement = figure.axes[0]
    labels = {text.get_text() for text in placement.texts}
    assert {f"s{stage}" for stage in range(stages)} <= labels
    bars = [axis for axis in figure.axes if axis.get_ylabel() == "pipeline stage"]
    assert len(bars) == 1 and bars[0].get_ylim() == (0, stages - 1)
    plt.close(figure)


def test_the_plot_has_one_legend_entry_per_stage(tmp_path):
    """Up to DISCRETE_STAGES stages the legend names each stage once, and the stage panels
    have one tick per stage (the worked example's plan: 2 stages)."""
    import matplotlib.pyplot as plt

    figure = _figure(EXPORT / "worked_example_nest.plan.json", DATA / "worked_example.json")
    stages = io.load_plan(EXPORT / "worked_example_nest.plan.json").num_stages
    placement, times = figure.axes[:2]
    legend = [text.get_text() for text in placement.get_legend().get_texts()]
    assert [entry for entry in legend if entry.startswith("stage ")] == [
        f"stage {stage}" for stage in range(stages)]
    assert list(times.get_xticks()) == list(range(stages))
    plt.close(figure)
