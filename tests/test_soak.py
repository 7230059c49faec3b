"""The soak: a 200-seed sample of it, its resumption, reproducers and the command."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from nest_cp.harness.executors import LocalExecutor
from nest_cp.harness.generators import draw_tiny_recipe, structured_plan_count, tiny_instance
from nest_cp.io.readers import load_instance
from nest_cp.verify import soak

REPRODUCERS = sorted((Path(__file__).parent / "data" / "soak").glob("*.json"))
SAMPLE = soak.SoakOptions(count=200, exact_time_limit_s=1.0)


def test_two_hundred_seed_sample_agrees(tmp_path: Path):
    """Seeds 0-199 of the soak (DP vs brute force on all, CP-SAT, MILP and full brute force
    on the 10% sample, 1 s per exact solve): every run passes the evaluator and no two runs
    disagree; the sample covers hierarchies, graphs, MoE and instances without a plan."""
    with LocalExecutor(2) as executor:
        records, _ = soak.run_soak(SAMPLE, tmp_path, executor)
    counts = soak.summary(records)
    disagreements = [(r["seed"], r["failures"]) for r in records if r["verdict"] != "agree"]
    assert disagreements == []
    assert counts["instances"] == 200 and 10 <= counts["sampled"] <= 35
    assert {"graph", "hierarchy", "MoE", "dense", "no plan fits", "has a plan",
            "SDP allowed", "SDP plan fits"} <= set(counts["kinds"])
    ran = {(run["backend"], run["space"]) for r in records for run in r["runs"]}
    assert {("dp", "structured"), ("brute", "structured"), ("cpsat", "full"),
            ("milp", "structured"), ("brute", "full")} <= ran


def test_recipes_are_seeded_and_bounded():
    """The same seed draws the same instance, and every recipe fits the brute-force budget."""
    for seed in range(30):
        recipe = draw_tiny_recipe(seed, max_structured_plans=1000)
        assert recipe == draw_tiny_recipe(seed, max_structured_plans=1000)
        assert structured_plan_count(recipe) <= 1000
        assert 1 <= recipe.num_layers <= 6 and 2 <= recipe.num_devices <= 16
        assert tiny_instance(recipe) == tiny_instance(recipe)


def test_interrupted_soak_continues_where_it_stopped(tmp_path: Path):
    """A second run of a longer soak runs only the seeds the first did not finish."""
    options = soak.SoakOptions(count=4, sample_rate=0.0)
    first, _ = soak.run_soak(options, tmp_path)
    ran = []

    class CountingExecutor(LocalExecutor):
        def run(self, function, tasks):
            ran.extend(task.seed for task in tasks)
            return super().run(function, tasks)

    longer = soak.SoakOptions(count=6, sample_rate=0.0)
    records, _ = soak.run_soak(longer, tmp_path, CountingExecutor(1))
    assert ran == [4, 5] and [r["seed"] for r in records] == list(range(6))
    assert records[:4] == first


def test_disagreement_is_saved_as_a_loadable_reproducer(tmp_path: Path, monkeypatch):
    """A backend that misreports (here the DP claiming one tick less) makes its seed
    disagree; the seed's instance is saved under the reproducer folder and loads back."""
    import nest_cp.dp.planner

    real = nest_cp.dp.planner.solve

    def off_by_one(instance, options=None):
        result = real(instance, options)
        if result.objective_ticks is None:
            return result
        from dataclasses import replace
        return replace(result, objective_ticks=result.objective_ticks - 1,
                       bound_ticks=result.objective_ticks - 1)

    monkeypatch.setattr(nest_cp.dp.planner, "solve", off_by_one)
    options = soak.SoakOptions(count=3, sample_rate=0.0)
    records, _ = soak.run_soak(options, tmp_path / "state")
    failing = [r for r in records if r["verdict"] == "disagree"]
    assert failing and all("dp/structured" in r["failures"][0] for r in failing)
    written = soak.save_reproducers(records, options, tmp_path / "repro")
    assert len(written) == len(failing)
    document = json.loads(written[0].read_text())
    assert document["provenance"]["seed"] == failing[0]["seed"]
    assert load_instance(written[0]).workload.num_layers == failing[0]["kind"]["layers"]


def test_soak_command_writes_the_report(tmp_path: Path):
    """`nest-cp soak` runs, writes reports/soak.md-style counts and exits 0 on agreement."""
    from nest_cp.cli import main

    out = tmp_path / "soak.md"
    result = CliRunner().invoke(main, ["soak", "--count", "3", "--sample-rate", "0", "--jobs",
                                       "1", "--out", str(out), "--state-dir",
                                       str(tmp_path / "state"), "--reproducers",
                                       str(tmp_path / "repro"), "--no-progress"])
    assert result.exit_code == 0, result.output
    text = out.read_text()
    assert "- instances: 3" in text and "- disagreements: 0" in text and "## Protocol" in text


@pytest.mark.parametrize("path", REPRODUCERS, ids=[path.stem for path in REPRODUCERS])
def test_saved_soak_reproducer_now_agrees(path: Path):
    """Every instance the soak once saw disagree runs clean through all backends now."""
    instance = load_instance(path)
    seed = json.loads(path.read_text())["provenance"]["seed"]
    _, failures = soak.check_instance(instance, seed, soak.SoakOptions(), sampled=True)
    assert failures == []
