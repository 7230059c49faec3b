"""Sweeps on Ray: verify and compare give the local executor's results (a small local Ray).

Skipped, with the reason shown, only when Ray cannot be imported; ``make test``
installs the ``nest-cp[ray]`` extra.  Starting Ray alone takes several seconds, so these run
in the slow tier (``make test-slow``, which CI runs after the fast one).
"""

import csv
import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from tiers import SLOW

from nest_cp.cli import main

SMALL = Path(__file__).parent.parent / "instances" / "small"
FOUR = [SMALL / name for name in ("worked_example.json", "h2-dense-l3-d4.json",
                                  "moe-l3-d4-ep2.json", "tight-l3-d4-recompute.json")]

pytestmark = SLOW

ray = pytest.importorskip("ray", reason="Ray is not installed (pip install 'nest-cp[ray]')")


@pytest.fixture(scope="module")
def local_ray():
    """One small local Ray instance (2 CPUs) for the tests below; the CLI reuses it."""
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


def _verify(tmp_path: Path, name: str, cache: Path, *extra: str) -> dict:
    out = tmp_path / name
    result = CliRunner().invoke(main, ["verify", *map(str, FOUR), "--backends", "dp,cpsat",
                                       "--time-limit", "10", "--jobs", "2", "--out", str(out),
                                       "--cache-dir", str(cache), "--no-progress", *extra])
    assert result.exit_code == 0, result.output
    return json.loads((out / "results.json").read_text())


def _without_times(runs: list[dict]) -> list[dict]:
    return [{**run, "wall_time_s": None} for run in runs]


def _cache(folder: Path) -> dict:
    return {path.name: {**json.loads(path.read_text()), "wall_time_s": None}
            for path in folder.rglob("*.json")}


def test_verify_on_ray_gives_the_local_results_and_cache(tmp_path, local_ray):
    """Verify on 4 instances: Ray and local give the same records, certificates and cache."""
    local = _verify(tmp_path, "local", tmp_path / "cache-local")
    remote = _verify(tmp_path, "ray", tmp_path / "cache-ray", "--executor", "ray")
    assert [r["certificate"] for r in remote["instances"]] == ["yes"] * 4
    for mine, theirs in zip(local["instances"], remote["instances"], strict=True):
        assert {**mine, "runs": _without_times(mine["runs"])} == \
            {**theirs, "runs": _without_times(theirs["runs"])}
    assert _cache(tmp_path / "cache-local") == _cache(tmp_path / "cache-ray")
    # on the same warm cache the two executors write the same results file
    again_local = _verify(tmp_path, "local2", tmp_path / "cache-local")
    again_ray = _verify(tmp_path, "ray2", tmp_path / "cache-local", "--executor", "ray")
    for key in ("instances", "summary"):
        assert again_local[key] == again_ray[key]
    volatile = {"date_utc", "command"}
    assert {k: v for k, v in again_local["protocol"].items() if k not in volatile} == \
        {k: v for k, v in again_ray["protocol"].items() if k not in volatile}


def test_compare_on_ray_gives_the_local_rows(tmp_path, local_ray):
    """Compare on Ray writes the same rows as locally (solve times aside)."""
    rows = {}
    for name, extra in (("local", []), ("ray", ["--executor", "ray", "--jobs", "2"])):
        out = tmp_path / name
        result = CliRunner().invoke(main, ["compare", *map(str, FOUR[:2]), "--backends",
                                           "dp,manual", "--out", str(out), "--no-progress",
                                           *extra])
        assert result.exit_code == 0, result.output
        with open(out / "compare.csv", newline="") as handle:
            rows[name] = [{**row, "wall_time_s": None} for row in csv.DictReader(handle)]
    assert rows["local"] == rows["ray"] and len(rows["ray"]) == 4
