"""``nest-cp compare``: files written, "—" for missing plans, normalisation, CSV round trip."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from click.testing import CliRunner

from nest_cp.compare import (
    Row,
    compare_command,
    instance_paths,
    normalise,
    read_csv,
    write_csv,
)
from nest_cp.io import load_instance, save_instance

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


def test_unknown_backend_or_missing_normaliser_is_a_usage_error(instances) -> None:
    """--backends must name registered backends and include the normaliser (exit code 2)."""
    for backends in ("manual,nope", "mcmc"):
        result = CliRunner().invoke(compare_command, [str(instances[0]), "--backends", backends])
        assert result.exit_code == 2 and "--backends" in result.output


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
