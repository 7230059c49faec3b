"""The verify harness end to end: certificates, reference checks, cache, tables, exit codes."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from nest_cp.solvers.registry import BACKENDS
from nest_cp.verify.cli import table_command, verify_command
from nest_cp.verify.harness import reference_path

ROOT = Path(__file__).resolve().parent.parent
SMALL = ROOT / "instances" / "small"
TINY = ("worked_example", "h2-dense-l3-d4", "infeasible-params")
FAST_BACKENDS = "dp,cpsat,brute"
WORKED_OPTIMUM_TICKS = 27_099_000  # DESIGN §3.1


@pytest.fixture
def tiny_dir(tmp_path: Path) -> Path:
    """Three tiny instances copied to a temporary folder."""
    folder = tmp_path / "instances"
    folder.mkdir()
    for name in TINY:
        shutil.copyfile(SMALL / f"{name}.json", folder / f"{name}.json")
    return folder


def _verify(folder: Path, tmp_path: Path, *extra: str):
    args = [str(folder), "--backends", FAST_BACKENDS, "--time-limit", "10", "--jobs", "1",
            "--out", str(tmp_path / "out"), "--cache-dir", str(tmp_path / "cache"),
            "--no-progress", *extra]
    return CliRunner().invoke(verify_command, args)


def _results(tmp_path: Path) -> dict:
    return json.loads((tmp_path / "out" / "results.json").read_text())


def _sources(tmp_path: Path) -> list[str]:
    """Every run's source (solved, cache, none) as timings.json records it."""
    timings = json.loads((tmp_path / "out" / "timings.json").read_text())
    return [run["source"] for r in timings["instances"] for run in r["runs"]]


def _record(results: dict, name: str) -> dict:
    return next(r for r in results["instances"] if r["instance"] == name)


def test_harness_certifies_tiny_instances(tiny_dir: Path, tmp_path: Path):
    """Every tiny instance is certified, exits 0, and the worked example has a zero gap."""
    result = _verify(tiny_dir, tmp_path)
    assert result.exit_code == 0, result.output
    results = _results(tmp_path)
    assert [r["certificate"] for r in results["instances"]] == ["yes"] * len(TINY)
    worked = _record(results, "worked_example")
    exact = [run for run in worked["runs"] if run["space"] == "full"]
    assert {run["objective_ticks"] for run in exact} == {WORKED_OPTIMUM_TICKS}
    assert worked["gap"] == {"low": 0.0, "high": 0.0, "exact": True}
    assert _record(results, "infeasible-params")["gap"] is None
    for name in ("gap_table.md", "gap_table.csv", "gap_table.tex", "timings.json",
                 "timings.md"):
        assert (tmp_path / "out" / name).stat().st_size > 0


def test_corrupted_reference_exits_1_naming_instance(tiny_dir: Path, tmp_path: Path):
    """A reference claiming an optimum better than the true one makes verify exit 1."""
    assert _verify(tiny_dir, tmp_path).exit_code == 0
    record = _record(_results(tmp_path), "h2-dense-l3-d4")
    optimum = min(run["objective_ticks"] for run in record["runs"] if run["space"] == "full")
    claimed = {"status": "OPTIMAL", "objective_ticks": optimum - 1, "bound_ticks": optimum - 1,
               "solver": "corrupted"}
    reference = {"instance": record["instance"], "instance_sha256": record["sha256"],
                 "spaces": {"full": claimed, "structured": claimed}}
    reference_path(tiny_dir / "h2-dense-l3-d4.json").write_text(json.dumps(reference))
    result = _verify(tiny_dir, tmp_path)
    assert result.exit_code == 1
    assert "FAIL h2-dense-l3-d4" in result.output
    assert _record(_results(tmp_path), "worked_example")["failures"] == []


def test_rerun_with_nothing_changed_solves_nothing(tiny_dir: Path, tmp_path: Path):
    """The second run reads every result from the cache and reports the same objectives."""
    assert _verify(tiny_dir, tmp_path).exit_code == 0
    first = _results(tmp_path)
    assert _verify(tiny_dir, tmp_path).exit_code == 0
    second = _results(tmp_path)
    assert set(_sources(tmp_path)) == {"cache"}
    assert [[run["objective_ticks"] for run in r["runs"]] for r in first["instances"]] == \
        [[run["objective_ticks"] for run in r["runs"]] for r in second["instances"]]


def test_no_cache_solves_again(tiny_dir: Path, tmp_path: Path):
    """--no-cache re-solves every run even when the cache is warm."""
    assert _verify(tiny_dir, tmp_path).exit_code == 0
    assert _verify(tiny_dir, tmp_path, "--no-cache").exit_code == 0
    assert set(_sources(tmp_path)) == {"solved"}


OUTPUTS = ("results.json", "gap_table.md", "gap_table.csv", "gap_table.tex")


def test_rerun_from_the_cache_writes_the_same_bytes(tiny_dir: Path, tmp_path: Path):
    """A cold-cache run and a rerun served from the cache write byte-identical results.json
    and gap tables (no wall time, source, date, machine or command in them); timings.json
    has each run's wall time and source, and timings.md the per-family medians."""
    assert _verify(tiny_dir, tmp_path).exit_code == 0
    out = tmp_path / "out"
    cold = {name: (out / name).read_bytes() for name in OUTPUTS}
    cold_timings = json.loads((out / "timings.json").read_text())
    assert _verify(tiny_dir, tmp_path).exit_code == 0
    assert {name: (out / name).read_bytes() for name in OUTPUTS} == cold
    warm_timings = json.loads((out / "timings.json").read_text())
    runs = {label: [run for r in document["instances"] for run in r["runs"]]
            for label, document in (("cold", cold_timings), ("warm", warm_timings))}
    assert {run["source"] for run in runs["cold"]} == {"solved"}
    assert {run["source"] for run in runs["warm"]} == {"cache"}
    assert len(runs["cold"]) == len(runs["warm"]) == sum(
        len(r["runs"]) for r in _results(tmp_path)["instances"])
    assert all(run["wall_time_s"] > 0 for run in runs["cold"])
    assert {"date_utc", "machine", "command", "jobs", "executor"} <= set(warm_timings)
    text = "".join(data.decode() for data in cold.values())
    for volatile in ("wall_time_s", '"source"', "date_utc", '"machine"', '"command"',
                     "dp [s]", "cpsat [s]", "median", "Machine:", "Date (UTC)"):
        assert volatile not in text
    timings_md = (out / "timings.md").read_text()
    assert "| dp [s] | cpsat [s] | brute [s] |" in timings_md and "(cache)" in timings_md
    assert "median dp [s]" in timings_md and warm_timings["date_utc"] in timings_md


def test_table_reads_an_old_results_file_with_wall_times(tiny_dir: Path, tmp_path: Path):
    """`table` on a results.json written before the times moved out (wall times and sources
    in its runs, medians in its summary, date and machine in its protocol) gives the same
    tables as the results.json of today, the times ignored."""
    assert _verify(tiny_dir, tmp_path).exit_code == 0
    out = tmp_path / "out"
    document = _results(tmp_path)
    timings = json.loads((out / "timings.json").read_text())
    for record, timed in zip(document["instances"], timings["instances"], strict=True):
        record["runs"] = [{**run, **timing} for run, timing in
                          zip(record["runs"], timed["runs"], strict=True)]
    for summary, medians in zip(document["summary"], timings["summary"], strict=True):
        summary.update(median_dp_s=medians["median_dp_s"],
                       median_exact_s=medians["median_exact_s"])
    document["protocol"].update(date_utc=timings["date_utc"], machine=timings["machine"],
                                command=timings["command"])
    old = tmp_path / "old.json"
    old.write_text(json.dumps(document))
    for fmt in ("md", "csv", "tex"):
        result = CliRunner().invoke(table_command, [str(old), "-f", fmt])
        assert result.exit_code == 0, result.output
        assert result.output == (out / f"gap_table.{fmt}").read_text()


def test_table_regenerates_identical_markdown(tiny_dir: Path, tmp_path: Path):
    """`table RESULTS -f md` reproduces gap_table.md byte for byte (csv and tex too)."""
    assert _verify(tiny_dir, tmp_path).exit_code == 0
    out = tmp_path / "out"
    for fmt in ("md", "csv", "tex"):
        result = CliRunner().invoke(table_command, [str(out / "results.json"), "-f", fmt])
        assert result.exit_code == 0
        assert result.output == (out / f"gap_table.{fmt}").read_text()


def test_malformed_instance_exits_2_with_one_line(tmp_path: Path):
    """A malformed instance file is bad input: exit 2 and a single `error:` line."""
    bad = tmp_path / "bad.json"
    bad.write_text('{"workload": {"layers": []}, "cluster": {}, "training": {}}')
    result = CliRunner().invoke(verify_command, [str(bad), "--backends", "dp", "--no-progress",
                                                 "--out", str(tmp_path / "out")])
    assert result.exit_code == 2
    assert result.output.startswith("error: ") and result.output.count("\n") == 1


def test_unknown_backend_exits_2(tiny_dir: Path, tmp_path: Path):
    """An unknown backend name is bad input (exit 2), not a crash."""
    result = _verify(tiny_dir, tmp_path, "--backends", "dp,nope")
    assert result.exit_code == 2
    assert "error:" in result.output


def test_missing_backend_reported_unavailable_exits_1(tiny_dir: Path, tmp_path: Path,
                                                     monkeypatch):
    """A requested backend whose module does not exist is reported UNAVAILABLE and the run
    exits 1 saying so (what was asked for was not checked), even where the rest certified."""
    monkeypatch.setitem(BACKENDS, "ghost", "nest_cp.no_such_module:solve")
    args = [str(tiny_dir / "worked_example.json"), "--backends", "dp,cpsat,ghost", "--jobs",
            "1", "--out", str(tmp_path / "out"), "--cache-dir", str(tmp_path / "cache"),
            "--no-progress"]
    result = CliRunner().invoke(verify_command, args)
    assert result.exit_code == 1, result.output
    assert "FAIL backend ghost was requested but is not available" in result.output
    runs = _results(tmp_path)["instances"][0]["runs"]
    assert {run["backend"]: run["status"] for run in runs}["ghost"] == "UNAVAILABLE"
    assert _results(tmp_path)["instances"][0]["certificate"] == "yes"


def test_nothing_certified_exits_1(tiny_dir: Path, tmp_path: Path):
    """A run in which no instance was certified (here: only the DP ran) exits 1, not 0."""
    result = _verify(tiny_dir, tmp_path, "--backends", "dp")
    assert result.exit_code == 1 and "nothing was certified" in result.output


def test_runs_keep_the_space_their_backend_reports(tiny_dir: Path, tmp_path: Path):
    """mcmc searches the full space: its run is recorded as full, never relabelled as the
    structured space the harness asked for."""
    result = _verify(tiny_dir / "worked_example.json", tmp_path, "--backends", "dp,cpsat,mcmc")
    assert result.exit_code == 0, result.output
    runs = _results(tmp_path)["instances"][0]["runs"]
    assert [run["space"] for run in runs if run["backend"] == "mcmc"] == ["full"]


def test_regression_snapshot_is_not_a_proof(tiny_dir: Path, tmp_path: Path):
    """A stored reference written from the DP alone is a regression snapshot: a DP answer that
    differs from it is reported as a change, never as a contradicted optimum, and the
    snapshot takes no part in the gap."""
    assert _verify(tiny_dir, tmp_path).exit_code == 0
    record = _record(_results(tmp_path), "h2-dense-l3-d4")
    dp = next(run for run in record["runs"] if run["backend"] == "dp")
    snapshot = {"instance": record["instance"], "instance_sha256": record["sha256"],
                "spaces": {"structured": {"status": "OPTIMAL",
                                          "objective_ticks": dp["objective_ticks"] + 5,
                                          "bound_ticks": dp["objective_ticks"] + 5,
                                          "solver": "dp/structured"}}}
    reference_path(tiny_dir / "h2-dense-l3-d4.json").write_text(json.dumps(snapshot))
    result = _verify(tiny_dir, tmp_path)
    assert result.exit_code == 1
    record = _record(_results(tmp_path), "h2-dense-l3-d4")
    assert record["reference"] == "snapshot changed"
    assert record["failures"] == [f"regression snapshot: dp now answers OPTIMAL "
                                  f"{dp['objective_ticks']} ticks, the snapshot recorded "
                                  f"OPTIMAL {dp['objective_ticks'] + 5} ticks"]


def test_table_rejects_a_file_that_is_not_results(tmp_path: Path):
    """`table` on a JSON file that is not a results document exits 2 with one error line."""
    bogus = tmp_path / "results.json"
    bogus.write_text('{"instances": [{"instance": "x"}]}')
    result = CliRunner().invoke(table_command, [str(bogus)])
    assert result.exit_code == 2
    assert result.output.startswith("error: ") and result.output.count("\n") == 1


def test_cache_entry_the_evaluator_rejects_is_solved_again(tiny_dir: Path, tmp_path: Path):
    """A cached result whose objective no longer matches the evaluator is re-solved, not trusted."""
    assert _verify(tiny_dir, tmp_path).exit_code == 0
    entries = [p for p in (tmp_path / "cache").rglob("*.json")
               if json.loads(p.read_text())["objective_ticks"] is not None]
    tampered = json.loads(entries[0].read_text())
    tampered["objective_ticks"] += 1
    entries[0].write_text(json.dumps(tampered))
    assert _verify(tiny_dir, tmp_path).exit_code == 0
    sources = _sources(tmp_path)
    assert sources.count("solved") == 1 and sources.count("cache") == len(sources) - 1


def test_cache_entry_that_is_valid_json_but_not_a_record_is_solved_again(tiny_dir: Path,
                                                                          tmp_path: Path):
    """Cache entries holding `[1]` are misses: verify re-solves them and exits 0, no crash."""
    assert _verify(tiny_dir, tmp_path).exit_code == 0
    for entry in (tmp_path / "cache").rglob("*.json"):
        entry.write_text("[1]")
    result = _verify(tiny_dir, tmp_path)
    assert result.exit_code == 0, result.output
    assert set(_sources(tmp_path)) == {"solved"}


@pytest.mark.parametrize("jobs", ["1", "2"])
@pytest.mark.parametrize(("text", "field"), [
    ("[1, 2]", "expected a JSON object"),
    ('{"instance_sha256": 5, "spaces": {}}', "instance_sha256"),
    ('{"instance_sha256": "ab", "spaces": [1]}', "spaces"),
    ('{"instance_sha256": "ab", "spaces": {"full": 3}}', "spaces.full"),
    ('{"instance_sha256": "ab", "spaces": {"full": {"status": "GOOD"}}}', "spaces.full.status"),
    ('{"instance_sha256": "ab", "spaces": {"full": {"status": "OPTIMAL", '
     '"objective_ticks": "9"}}}', "spaces.full.objective_ticks"),
    ('{"instance_sha256": "ab", "spaces": {"wide": {"status": "OPTIMAL"}}}', "spaces.wide"),
])
def test_malformed_reference_exits_2_naming_file_and_field(tiny_dir: Path, tmp_path: Path,
                                                           text: str, field: str, jobs: str):
    """A malformed .ref.json is bad input: one `error: <ref file>: <field>` line, exit 2."""
    ref = reference_path(tiny_dir / "worked_example.json")
    ref.write_text(text)
    result = _verify(tiny_dir, tmp_path, "--jobs", jobs)
    assert result.exit_code == 2, result.output
    assert result.output.startswith(f"error: {ref}: ") and field in result.output
    assert result.output.count("\n") == 1
    assert not (tmp_path / "out").exists()


def test_paths_without_out_is_a_usage_error(tiny_dir: Path, tmp_path: Path, monkeypatch):
    """`verify PATHS` without --out exits 2 and writes nothing (never the default reports/)."""
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(verify_command, [str(tiny_dir), "--backends", "dp",
                                                 "--no-progress"])
    assert result.exit_code == 2
    assert "expected --out DIR when PATHS are given" in result.output
    assert not (tmp_path / "reports").exists()


def test_no_paths_defaults_out_to_reports(tmp_path: Path):
    """Without PATHS, --out defaults to reports/ (the full benchmark run)."""
    from nest_cp.verify.cli import _out_dir

    assert _out_dir((), None) == Path("reports")
    assert _out_dir((tmp_path,), tmp_path / "x") == tmp_path / "x"


def test_folder_without_instances_exits_2_and_writes_nothing(tmp_path: Path):
    """`verify emptydir --out DIR` exits 2 with one line and writes no empty tables."""
    empty = tmp_path / "empty"
    empty.mkdir()
    result = CliRunner().invoke(verify_command, [str(empty), "--out", str(tmp_path / "out"),
                                                 "--no-progress"])
    assert result.exit_code == 2
    assert result.output.startswith("error: ") and result.output.count("\n") == 1
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("limit", ["0", "-1", "nan"])
def test_time_limit_must_be_positive(tiny_dir: Path, tmp_path: Path, limit: str):
    """--time-limit 0, negative or NaN is bad input (exit 2, one line)."""
    result = _verify(tiny_dir, tmp_path, "--time-limit", limit)
    assert result.exit_code == 2
    assert result.output.startswith("error: ") and result.output.count("\n") == 1


# ------------------------------------------------------------------ --certify-full


def _certify(folder: Path, tmp_path: Path, *extra: str):
    args = [str(folder), "--certify-full", "--time-limit", "20", "--out",
            str(tmp_path / "cert"), "--cache-dir", str(tmp_path / "cache"), "--no-progress",
            *extra]
    return CliRunner().invoke(verify_command, args)


def test_certify_full_writes_intervals_and_proves_the_worked_example(tiny_dir: Path,
                                                                     tmp_path: Path):
    """--certify-full exits 0, proves the worked example's optimum, writes the four files."""
    result = _certify(tiny_dir, tmp_path)
    assert result.exit_code == 0, result.output
    document = json.loads((tmp_path / "cert" / "certified.json").read_text())
    worked = next(r for r in document["instances"] if r["instance"] == "worked_example")
    assert worked["status"] == "OPTIMAL"
    assert worked["objective_ticks"] == worked["bound_ticks"] == WORKED_OPTIMUM_TICKS
    infeasible = next(r for r in document["instances"] if r["instance"] == "infeasible-params")
    assert infeasible["status"] == "INFEASIBLE" and infeasible["objective_ticks"] is None
    for fmt in ("md", "csv", "tex"):
        assert (tmp_path / "cert" / f"certified.{fmt}").stat().st_size > 0


def test_certify_full_reruns_from_the_cache_and_table_regenerates(tiny_dir: Path,
                                                                 tmp_path: Path):
    """A second run reads every instance from the cache; `table` rebuilds the Markdown."""
    assert _certify(tiny_dir, tmp_path).exit_code == 0
    again = _certify(tiny_dir, tmp_path)
    assert again.exit_code == 0 and f"from cache {len(TINY)}" in again.output
    result = CliRunner().invoke(table_command, [str(tmp_path / "cert" / "certified.json")])
    assert result.exit_code == 0
    assert result.output == (tmp_path / "cert" / "certified.md").read_text()


def test_certify_full_refuses_backends_and_interleaving(tiny_dir: Path, tmp_path: Path):
    """--backends is meaningless with --certify-full, and v > 1 is not bounded: exit 2."""
    assert _certify(tiny_dir, tmp_path, "--backends", "dp").exit_code == 2
    interleaved = ROOT / "tests" / "data" / "interleaved_example.json"
    result = _certify(interleaved, tmp_path)
    assert result.exit_code == 2 and "virtual" in result.output
