"""``nest-cp sweep``: the grid, its certified intervals, the outputs, bad sweeps and resuming."""

import csv
import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from nest_cp.cli import main
from nest_cp.harness import sweep, sweep_report
from nest_cp.io.readers import load_instance

ROOT = Path(__file__).parent.parent
SMALL = ROOT / "instances/small/h2-dense-l4-d8.json"  # 8 devices: nodes of 4 under a spine
GRAPH = ROOT / "instances/small/graph-ring-dense-l4-d6.json"
WORKED = Path(__file__).parent / "data" / "worked_example.json"
SMALL_OPTIMUM = 45_981_000  # instances/small/h2-dense-l4-d8.ref.json: CP-SAT's full-space optimum


def _sweep(tmp_path: Path, instance: Path, *args: str, out: str = "out"):
    """Run the command with a private cache; returns the result and the CSV's rows."""
    result = CliRunner().invoke(main, ["sweep", str(instance), "--out", str(tmp_path / out),
                                       "--cache-dir", str(tmp_path / "cache"),
                                       "--time-limit", "10", "--no-progress", *args])
    path = tmp_path / out / "sweep.csv"
    rows = list(csv.DictReader(path.read_text(encoding="utf-8").splitlines())) \
        if path.exists() else []
    return result, rows


def _ticks(row: dict, column: str) -> int | None:
    return int(row[column]) if row[column] else None


def _assert_intervals(rows: list[dict]) -> None:
    for row in rows:
        bound, best, dp = (_ticks(row, c) for c in ("bound_ticks", "best_ticks", "dp_ticks"))
        assert bound is not None and bound <= best <= dp, row


@pytest.mark.parametrize(("instance", "vary", "certify"), [
    (SMALL, "spine.bandwidth_Bps=0.25x:4x*2", "auto"),  # CP-SAT over the full space
    (WORKED, "spine.bandwidth_Bps=5e9:4e10*2", "full"),  # the full-space certificate
    (GRAPH, "links.bandwidth_Bps=0.5x,1x,2x", "auto"),
])
def test_faster_network_never_slows_the_optimum_and_intervals_hold(tmp_path, instance, vary,
                                                                   certify):
    """Raising only bandwidth never makes the DP's optimum slower, and every point's interval
    satisfies bound <= best <= the DP's time; one CSV row per point, every output written."""
    result, rows = _sweep(tmp_path, instance, "--vary", vary, "--certify", certify)
    assert result.exit_code == 0, result.output
    values = sweep.parse_axis(vary, load_instance(instance)).values
    assert len(rows) == len(values)
    times = [_ticks(row, "dp_ticks") for row in rows]  # rows in increasing bandwidth
    assert all(later <= earlier for earlier, later in zip(times, times[1:]))
    _assert_intervals(rows)
    for name in sweep.OUTPUTS:
        assert (tmp_path / "out" / name).stat().st_size > 0
    assert (tmp_path / "out" / "sweep.png").read_bytes()[:4] == b"\x89PNG"


def test_unchanged_point_reproduces_the_certified_reference(tmp_path):
    """At 1x the point is the instance itself: its interval closes on the stored optimum."""
    result, rows = _sweep(tmp_path, SMALL, "--vary", "spine.bandwidth_Bps=1x,2x")
    assert result.exit_code == 0, result.output
    assert rows[0]["status"] == "OPTIMAL"
    assert _ticks(rows[0], "bound_ticks") == _ticks(rows[0], "best_ticks") == SMALL_OPTIMUM


def test_two_parameters_give_the_product_of_their_values(tmp_path):
    """Two --vary give one row per pair of values, the first parameter outermost."""
    result, rows = _sweep(tmp_path, SMALL, "--vary", "spine.bandwidth_Bps=1x,4x",
                          "--vary", "node.size=2,4,8")
    assert result.exit_code == 0, result.output
    assert [(r["spine.bandwidth_Bps"], r["node.size"]) for r in rows] == [
        (b, s) for b in ("1x", "4x") for s in ("2", "4", "8")]
    assert len(list((tmp_path / "out" / "instances").glob("*.json"))) == 6
    _assert_intervals(rows)


def test_repeated_sweep_is_served_from_the_cache(tmp_path):
    """A second run with the same arguments solves nothing: every point comes from the cache
    with the same numbers."""
    args = ("--vary", "spine.bandwidth_Bps=0.5x,2x")
    first, before = _sweep(tmp_path, SMALL, *args, out="first")
    second, after = _sweep(tmp_path, SMALL, *args, out="second")
    assert first.exit_code == second.exit_code == 0, second.output
    assert {row["source"] for row in before} == {"solved"}
    assert {row["source"] for row in after} == {"cache"}
    assert "solved 0, from cache 2" in second.stdout
    columns = ("dp_ticks", "bound_ticks", "best_ticks")
    assert [[r[c] for c in columns] for r in after] == [[r[c] for c in columns] for r in before]


@pytest.mark.parametrize(("args", "named"), [
    (("--vary", "speed=1x"), "--vary speed: expected a parameter among"),
    (("--vary", "leaf.bandwidth_Bps=1x"), "got unknown tier 'leaf'"),
    (("--vary", "spine.bandwidth_Bps=4x:1x*2"), "expected a non-empty range"),
    (("--vary", "spine.bandwidth_Bps=-1e9,1e9"), "expected bandwidths > 0 B/s, got -1e9"),
    (("--vary", "spine.bandwidth_Bps=0x,1x"), "expected bandwidths > 0 B/s, got 0x"),
    (("--vary", "spine.efficiency=0.5,1.5"), "expected efficiencies in (0, 1], got 1.5"),
    (("--vary", "spine.latency_s=fast"), "expected numbers (25e9) or multipliers"),
    (("--vary", "spine.bandwidth_Bps=1x,2e9"), "all values as numbers or all as multipliers"),
    (("--vary", "node.size=1.5"), "expected integer tier sizes >= 1"),
    (("--vary", "spine.size=1"), "tier sizes whose product is >= num_devices = 8"),
    (("--vary", "devices=4", "--vary", "hbm_bytes=1x", "--vary", "node.latency_s=1x"),
     "--vary: expected one to 2"),
    ((), "--vary: expected one to 2"),
    (("--vary", "devices=4", "--price", "leaf=1"), "--price leaf=1: expected TIER="),
])
def test_bad_sweep_exits_2_with_one_line_before_solving(tmp_path, args, named):
    """A bad sweep exits 2 with one line naming the option and what was expected, and
    nothing is solved or written."""
    result, _ = _sweep(tmp_path, SMALL, *args)
    assert result.exit_code == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: --") and named in lines[0], lines
    assert not (tmp_path / "cache").exists() and not (tmp_path / "out").exists()


def test_graph_networks_vary_links_not_devices(tmp_path):
    """A graph's links name its devices: sweeping devices or a tier there is bad input."""
    for vary in ("devices=4", "node.size=2"):
        result, _ = _sweep(tmp_path, GRAPH, "--vary", vary)
        assert result.exit_code == 2 and "links.bandwidth_Bps" in result.stderr


def test_value_syntax():
    """Lists, arithmetic and geometric ranges, exactly: 0.25x:4x*2 is five doublings' values."""
    instance = load_instance(SMALL)
    assert sweep.parse_axis("spine.bandwidth_Bps=0.25x:4x*2", instance).labels == (
        "0.25x", "0.5x", "1x", "2x", "4x")
    axis = sweep.parse_axis("spine.latency_s=1e-6:3e-6:1e-6", instance)
    assert [float(v) for v in axis.values] == [1e-6, 2e-6, 3e-6] and not axis.relative
    assert sweep.parse_axis("devices=4,8", instance).values == (4, 8)


def test_devices_per_node_resizes_the_outermost_tier():
    """Halving the devices per node doubles the nodes under the spine; adding devices adds
    nodes; every other field stays the instance's."""
    instance = load_instance(SMALL)
    for vary, sizes, devices in (("node.size=2", (2, 4), 8), ("devices=16", (4, 4), 16)):
        [point] = sweep.build_points(instance, [sweep.parse_axis(vary, instance)])
        cluster = point.instance.cluster
        assert tuple(t.size for t in cluster.network.tiers) == sizes
        assert cluster.num_devices == devices
        assert [t.bandwidth_Bps for t in cluster.network.tiers] == \
            [t.bandwidth_Bps for t in instance.cluster.network.tiers]


def test_prices_give_a_cost_and_the_pareto_front(tmp_path):
    """Cost is N · (device price + price · per-device GB/s); a point is on the front unless
    another is no dearer and no slower, and better in one."""
    result, rows = _sweep(tmp_path, SMALL, "--vary", "spine.bandwidth_Bps=1x,2x",
                          "--price", "spine=2", "--device-price", "100")
    assert result.exit_code == 0, result.output
    assert [float(row["cost"]) for row in rows] == [8 * (100 + 2 * 12.5), 8 * (100 + 2 * 25)]
    records = [{"cost": cost, "dp": {"samples_per_s": speed}}
               for cost, speed in ((1, 1), (2, 1), (2, 3), (3, None))]
    assert sweep.pareto_front(records) == [True, False, True, False]


def test_document_regenerates_the_tables(tmp_path):
    """The tables are pure functions of sweep.json: rendering it again gives the same files."""
    result, _ = _sweep(tmp_path, WORKED, "--vary", "spine.bandwidth_Bps=1x,2x")
    assert result.exit_code == 0, result.output
    document = json.loads((tmp_path / "out" / "sweep.json").read_text(encoding="utf-8"))
    for fmt in sweep_report.FORMATS:
        assert sweep_report.render(document, fmt) == \
            (tmp_path / "out" / f"sweep.{fmt}").read_bytes().decode("utf-8")
