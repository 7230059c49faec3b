"""``nest-cp compare``: files written, "—"/"n/a"/"ERR" cells, normalisation, CSV, bad input."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from click.testing import CliRunner

from nest_cp.harness import compare
from nest_cp.harness.compare import (
    Row,
    compare_command,
    instance_paths,
    normalise,
    read_csv,
    render_markdown,
    write_csv,
)
from nest_cp.io.readers import load_instance
from nest_cp.io.writers import save_instance
from nest_cp.solvers.registry import BACKENDS

DATA = Path(__file__).parent / "data"


@pytest.fixture
def instances(tmp_path: Path) -> list[Path]:
    """The worked example and an over-memory copy of it (no baseline finds a plan)."""
    worked = load_instance(DATA / "worked_example.json")
    tiny = dataclasses.replace(worked.cluster, hbm_bytes=1_000_000_000)
    starved = tmp_path / "starved.json"
    save_instance(dataclasses.replace(worked, cluster=tiny, name="starved"), starved)
    return [DATA / "worked_example.json", starved]


def _run(args: list[str]):
    return CliRunner().invoke(compare_command, args, catch_exceptions=False)


def test_compare_writes_tables_csv_and_a_png_that_opens(instances, tmp_path: Path) -> None:
    """compare writes compare.{csv,md,tex,png}; the PNG decodes to a non-empty image."""
    import matplotlib.image

    out = tmp_path / "out"
    result = _run([*map(str, instances), "--backends", "manual,mcmc", "--budget", "40",
                   "--out", str(out)])
    assert result.exit_code == 0, result.output
    for suffix in ("csv", "md", "tex", "png"):
        assert (out / f"compare.{suffix}").stat().st_size > 0
    image = matplotlib.image.imread(out / "compare.png")
    assert image.shape[0] > 100 and image.shape[1] > 100
    rows = read_csv(out / "compare.csv")
    assert {(row.instance, row.backend) for row in rows} == {
        (name, backend) for name in ("worked_example", "starved")
        for backend in ("manual", "mcmc")}


def test_missing_plans_show_as_dashes_never_zero(instances, tmp_path: Path) -> None:
    """An instance where nothing fits appears as "—" (markdown) / "---" (LaTeX), not 0."""
    out = tmp_path / "out"
    _run([*map(str, instances), "--backends", "manual,mcmc", "--budget", "40",
          "--scope", "instance", "--out", str(out)])
    markdown = (out / "compare.md").read_text(encoding="utf-8")
    starved = next(line for line in markdown.splitlines() if line.startswith("| starved |"))
    assert starved.split(" | ")[4:6] == ["—", "—"]
    latex = (out / "compare.tex").read_text(encoding="utf-8")
    assert "--- & ---" in latex
    assert all(row.ratio is None and row.throughput is None
               for row in read_csv(out / "compare.csv") if row.instance == "starved")


def test_from_csv_regenerates_reports_without_solving(instances, tmp_path: Path) -> None:
    """--from-csv rebuilds md/tex/png from the stored CSV alone, byte-identical tables."""
    out = tmp_path / "out"
    _run([str(instances[0]), "--backends", "manual", "--out", str(out)])
    first = (out / "compare.md").read_text(encoding="utf-8")
    (out / "compare.md").unlink()
    (out / "compare.png").unlink()
    result = _run(["--from-csv", str(out / "compare.csv"), "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert (out / "compare.md").read_text(encoding="utf-8") == first
    assert (out / "compare.png").exists()


def test_compare_without_instances_is_a_usage_error() -> None:
    """No INSTANCES and no --from-csv: click usage error (exit code 2)."""
    result = CliRunner().invoke(compare_command, [])
    assert result.exit_code == 2


@pytest.mark.parametrize("options, blamed", [
    (["--backends", "manual,nope"], "--backends"),
    (["--backends", "mcmc"], "--normalize"),
    (["--normalize", "nope"], "--normalize"),
])
def test_unknown_backend_or_missing_normaliser_is_a_usage_error(instances, options,
                                                               blamed) -> None:
    """An unknown backend blames --backends; a normaliser that is not among the backends run
    blames --normalize (exit code 2, one line), never the other option."""
    result = CliRunner().invoke(compare_command, [str(instances[0]), *options])
    assert result.exit_code == 2 and blamed in result.output
    assert len(result.output.strip().splitlines()) == 1


def _row(instance: str, devices: int, backend: str, throughput: float | None) -> Row:
    return Row(instance=instance, model="m", cluster=f"c-{devices}", num_devices=devices,
               backend=backend,
               status="FEASIBLE" if throughput else "INFEASIBLE", objective_ticks=None,
               throughput=throughput, ratio=None, wall_time_s=0.5)


def test_model_scope_normalises_by_the_smallest_feasible_device_count() -> None:
    """Scope "model": ratios divide by the family's normaliser at its smallest feasible count."""
    rows = [_row("n32", 32, "manual", None), _row("n64", 64, "manual", 10.0),
            _row("n128", 128, "manual", 18.0), _row("n128", 128, "dp", 30.0),
            _row("n32", 32, "dp", 6.0)]
    ratios = {(r.instance, r.backend): r.ratio for r in normalise(rows, "manual", "model")}
    assert ratios == {("n32", "manual"): None, ("n64", "manual"): 1.0,
                      ("n128", "manual"): 1.8, ("n128", "dp"): 3.0, ("n32", "dp"): 0.6}


def test_instance_scope_normalises_on_the_same_instance() -> None:
    """Scope "instance": each instance's normaliser is 1.0; no normaliser plan gives no ratio."""
    rows = [_row("a", 64, "manual", 10.0), _row("a", 64, "dp", 25.0),
            _row("b", 128, "manual", None), _row("b", 128, "dp", 40.0)]
    ratios = {(r.instance, r.backend): r.ratio for r in normalise(rows, "manual", "instance")}
    assert ratios == {("a", "manual"): 1.0, ("a", "dp"): 2.5, ("b", "manual"): None,
                      ("b", "dp"): None}


def test_csv_round_trip_keeps_every_field(tmp_path: Path) -> None:
    """read_csv(write_csv(rows)) returns the same rows, None cells included."""
    rows = [dataclasses.replace(_row("a", 64, "dp", 25.0), objective_ticks=123, ratio=2.5,
                                message="x, \"quoted\""), _row("b", 8, "manual", None)]
    write_csv(rows, tmp_path / "rows.csv")
    assert read_csv(tmp_path / "rows.csv") == rows


def test_directories_expand_to_instances_without_reference_results(tmp_path: Path) -> None:
    """A directory argument yields its instance files, not the *.ref.json results beside them."""
    for name in ("b.json", "a.yaml", "a.ref.json", "notes.md"):
        (tmp_path / name).write_text("{}", encoding="utf-8")
    assert [p.name for p in instance_paths([tmp_path])] == ["a.yaml", "b.json"]


def _one_error_line(result) -> bool:
    return result.output.startswith("error: ") and result.output.count("\n") == 1


@pytest.mark.parametrize("limit", ["0", "-1", "nan", "inf"])
def test_time_limit_must_be_a_positive_finite_number(instances, limit: str) -> None:
    """--time-limit 0, negative, NaN or infinite is a usage error (exit 2), not a traceback."""
    result = CliRunner().invoke(compare_command, [str(instances[0]), "--backends", "manual",
                                                  "--time-limit", limit])
    assert result.exit_code == 2 and "--time-limit" in result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)


def _stored_csv(tmp_path: Path) -> Path:
    rows = [_row("a", 64, "manual", 10.0), _row("a", 64, "dp", 25.0)]
    write_csv(rows, tmp_path / "compare.csv")
    return tmp_path / "compare.csv"


@pytest.mark.parametrize(("edit", "where"), [
    (lambda text: text.replace("objective_ticks", "objective", 1), "row 1: expected the columns"),
    (lambda text: text.replace("FEASIBLE,,", "FEASIBLE,12x,", 1), "row 2: objective_ticks: "),
    (lambda text: text.replace(",64,", ",sixty-four,", 1), "row 2: num_devices: "),
    (lambda text: text.replace("FEASIBLE", "GREAT", 1), "row 2: status: "),
    (lambda text: text.replace(",0.5,", ",nan,", 1), "row 2: wall_time_s: "),
    (lambda text: text.splitlines()[0] + "\n", "expected at least one result row"),
    (lambda text: "", "row 1: expected the columns"),
    (lambda text: text + "b,m\n", "row 4: "),
])
def test_malformed_csv_exits_2_naming_file_row_and_column(tmp_path: Path, edit, where) -> None:
    """--from-csv with a bad header, cell or no rows: one `error: <file>: row N: <column>` line."""
    path = _stored_csv(tmp_path)
    path.write_text(edit(path.read_text(encoding="utf-8")), encoding="utf-8")
    result = _run(["--from-csv", str(path), "--normalize", "manual", "--out", str(tmp_path)])
    assert result.exit_code == 2
    assert _one_error_line(result) and result.output.startswith(f"error: {path}: ")
    assert where in result.output


def test_from_csv_without_the_normaliser_exits_2(tmp_path: Path) -> None:
    """--from-csv with a --normalize backend absent from the CSV is bad input (exit 2)."""
    path = _stored_csv(tmp_path)
    result = _run(["--from-csv", str(path), "--normalize", "mcmc", "--out", str(tmp_path)])
    assert result.exit_code == 2 and _one_error_line(result)


def test_folder_without_instances_exits_2(tmp_path: Path) -> None:
    """`compare emptydir` exits 2 with one line and writes no tables."""
    empty = tmp_path / "empty"
    empty.mkdir()
    result = _run([str(empty), "--backends", "manual", "--out", str(tmp_path / "out")])
    assert result.exit_code == 2 and _one_error_line(result)
    assert not (tmp_path / "out" / "compare.md").exists()


def test_malformed_instance_fails_before_any_solve(instances, tmp_path: Path,
                                                   monkeypatch) -> None:
    """A malformed instance after a good one exits 2 with one line and nothing is solved."""
    solved = []
    monkeypatch.setattr(compare, "solve", lambda *args: solved.append(args))
    bad = tmp_path / "zz-bad.json"
    bad.write_text('{"workload": {"layers": []}, "cluster": {}, "training": {}}')
    result = _run([str(instances[0]), str(bad), "--backends", "manual",
                   "--out", str(tmp_path / "out")])
    assert result.exit_code == 2 and _one_error_line(result)
    assert solved == []


def test_backend_error_renders_err_and_exits_1(instances, tmp_path: Path, monkeypatch) -> None:
    """A backend that crashes shows "ERR" (not "—", which means no plan) and compare exits 1."""
    monkeypatch.setitem(BACKENDS, "ghost", "nest_cp.no_such_module:solve")
    out = tmp_path / "out"
    result = _run([str(instances[0]), "--backends", "manual,ghost", "--scope", "instance",
                   "--out", str(out)])
    assert result.exit_code == 1
    line = next(line for line in (out / "compare.md").read_text(encoding="utf-8").splitlines()
                if line.startswith("| worked_example |"))
    assert line.split(" | ")[4:6] == ["1.00", "ERR"]
    assert "ERR worked_example ghost" in result.output
    rerun = _run(["--from-csv", str(out / "compare.csv"), "--out", str(out)])
    assert rerun.exit_code == 1  # the stored ERROR row still fails a regeneration


def test_plans_without_a_normaliser_plan_show_na_not_no_plan() -> None:
    """Where the normaliser has no plan, other backends' plans show "n/a", their absence "—"."""
    rows = [_row("a", 64, "manual", None), _row("a", 64, "dp", 25.0),
            dataclasses.replace(_row("a", 64, "mcmc", None), status="UNKNOWN")]
    markdown = render_markdown(normalise(rows, "manual", "instance"), "manual")
    line = next(line for line in markdown.splitlines() if line.startswith("| a |"))
    assert line.split(" | ")[4:7] == ["—", "n/a", "—"]
    assert "n/a = a plan, but manual has none" in markdown


@pytest.mark.parametrize("status", ["INFEASIBLE", "UNKNOWN"])
def test_infeasible_and_unknown_are_both_no_plan(status: str) -> None:
    """A heuristic that finds nothing (UNKNOWN) shows "—" exactly like a proven INFEASIBLE."""
    rows = [_row("a", 64, "manual", 10.0),
            dataclasses.replace(_row("a", 64, "phaze", None), status=status)]
    markdown = render_markdown(normalise(rows, "manual", "instance"), "manual")
    line = next(line for line in markdown.splitlines() if line.startswith("| a |"))
    assert line.split(" | ")[4:6] == ["1.00", "—"]


def test_compare_names_the_folder_it_writes_into(tmp_path: Path, monkeypatch) -> None:
    """Without --out, compare says on stderr (before solving) that it writes into
    ./compare-out, and lists every file it wrote, the CSV included."""
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(compare_command, [str(DATA / "worked_example.json"),
                                                  "--backends", "manual", "--no-progress"])
    assert result.exit_code == 0, result.output
    default = tmp_path / "compare-out"
    assert f"into {default}/ (choose with --out)" in result.stderr
    assert "wrote compare-out/compare.csv" in result.stdout
    assert (default / "compare.csv").is_file()
    chosen = tmp_path / "chosen"
    result = CliRunner().invoke(compare_command, [str(DATA / "worked_example.json"),
                                                  "--backends", "manual", "--no-progress",
                                                  "--out", str(chosen)])
    assert result.exit_code == 0, result.output
    assert f"into {chosen}/\n" in result.stderr  # given --out: no hint to choose it
