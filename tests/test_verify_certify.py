"""The certificate, gap, consistency and reference rules of verify.certify on hand-made runs."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from nest_cp.io.readers import load_instance
from nest_cp.model.result import Space
from nest_cp.solvers.registry import SolveOptions
from nest_cp.verify import certify
from nest_cp.verify.cache import ResultCache, code_fingerprint, result_key, source_roots
from nest_cp.verify.reference import space_entry
from nest_cp.verify.suite import small_specs, write_instances

ROOT = Path(__file__).resolve().parent.parent
RECORD = {"backend": "dp", "space": "structured", "status": "INFEASIBLE", "objective_ticks": None,
          "bound_ticks": None, "wall_time_s": 0.1, "message": "", "plan": None}


def run(backend: str, space: str, status: str, ticks: int | None = None,
        bound: int | None = None) -> dict:
    if status == "OPTIMAL" and bound is None:
        bound = ticks
    return {"backend": backend, "space": space, "status": status, "objective_ticks": ticks,
            "bound_ticks": bound}


def test_certificate_yes_when_dp_equals_structured_optimum():
    """DP == exact structured optimum certifies, whatever the full optimum."""
    runs = [run("dp", "structured", "OPTIMAL", 100), run("cpsat", "structured", "OPTIMAL", 100),
            run("cpsat", "full", "OPTIMAL", 90)]
    assert certify.algorithmic_certificate(runs) == ("yes", [])


def test_certificate_no_when_optima_differ():
    """A DP objective different from a proven structured optimum fails the certificate."""
    runs = [run("dp", "structured", "OPTIMAL", 100), run("milp", "structured", "OPTIMAL", 99)]
    verdict, failures = certify.algorithmic_certificate(runs)
    assert verdict == "no" and "99" in failures[0]


def test_certificate_open_when_exact_stopped_at_limit():
    """A time-limited exact run whose interval contains the DP leaves the certificate open."""
    runs = [run("dp", "structured", "OPTIMAL", 100),
            run("cpsat", "structured", "FEASIBLE", 100, 80)]
    assert certify.algorithmic_certificate(runs) == ("open", [])


def test_certificate_no_when_dp_below_bound_or_infeasible_disagrees():
    """DP below a proven bound, or a plan where infeasibility is proven, fails."""
    below = [run("dp", "structured", "OPTIMAL", 70),
             run("cpsat", "structured", "FEASIBLE", 100, 80)]
    assert certify.algorithmic_certificate(below)[0] == "no"
    infeasible = [run("dp", "structured", "OPTIMAL", 70),
                  run("cpsat", "structured", "INFEASIBLE")]
    assert certify.algorithmic_certificate(infeasible)[0] == "no"
    agree = [run("dp", "structured", "INFEASIBLE"), run("cpsat", "structured", "INFEASIBLE")]
    assert certify.algorithmic_certificate(agree) == ("yes", [])


def test_gap_point_and_interval():
    """A proven full optimum gives a point gap; a stopped solver gives [best, bound]."""
    point = [run("dp", "structured", "OPTIMAL", 110), run("cpsat", "full", "OPTIMAL", 100)]
    assert certify.structural_gap(point) == {"low": 0.1, "high": 0.1, "exact": True}
    interval = [run("dp", "structured", "OPTIMAL", 120), run("cpsat", "full", "FEASIBLE", 110, 80),
                run("milp", "full", "FEASIBLE", 115, 100)]
    assert certify.structural_gap(interval) == {"low": 10 / 110, "high": 0.2, "exact": False}
    assert certify.structural_gap([run("dp", "structured", "INFEASIBLE")]) is None


def test_gap_uses_a_proving_reference_but_not_a_bare_plan():
    """A stored optimum tightens an open interval to a point; a boundless reference does not."""
    runs = [run("dp", "structured", "OPTIMAL", 120), run("cpsat", "full", "FEASIBLE", 120, 80)]
    proven = {"backend": "reference", "space": "full", "status": "OPTIMAL",
              "objective_ticks": 100, "bound_ticks": 100}
    assert certify.structural_gap(runs, proven) == {"low": 0.2, "high": 0.2, "exact": True}
    bare = {"backend": "reference", "space": "full", "status": "FEASIBLE",
            "objective_ticks": 110, "bound_ticks": None}
    assert certify.structural_gap(runs, bare) == certify.structural_gap(runs)


def test_consistency_flags_plan_below_other_solvers_optimum():
    """A full-space plan below another solver's proven full optimum is a contradiction."""
    runs = [run("cpsat", "full", "OPTIMAL", 100), run("milp", "full", "FEASIBLE", 95, 90),
            run("dp", "structured", "OPTIMAL", 120)]
    failures = certify.consistency_failures(runs)
    assert len(failures) == 1 and "milp/full" in failures[0]
    structured_bound = [run("cpsat", "structured", "OPTIMAL", 100),
                        run("milp", "full", "OPTIMAL", 95)]
    assert certify.consistency_failures(structured_bound) == []


def test_reference_contradictions():
    """Beating a proven reference, a worse 'optimum' or infeasible-vs-plan all fail."""
    reference = {"spaces": {"full": {"status": "OPTIMAL", "objective_ticks": 100},
                            "structured": {"status": "OPTIMAL", "objective_ticks": 110}}}
    assert certify.reference_failures(reference, [run("dp", "structured", "OPTIMAL", 110),
                                                  run("cpsat", "full", "OPTIMAL", 100)]) == []
    assert certify.reference_failures(reference, [run("cpsat", "full", "FEASIBLE", 99, 90)])
    assert certify.reference_failures(reference, [run("dp", "structured", "OPTIMAL", 111)])
    assert certify.reference_failures(reference, [run("milp", "full", "INFEASIBLE")])
    infeasible = {"spaces": {"full": {"status": "INFEASIBLE", "objective_ticks": None}}}
    assert certify.reference_failures(infeasible, [run("dp", "structured", "OPTIMAL", 5)])


def test_reference_entry_is_the_strongest_claim():
    """References keep a proven optimum, else the best plan with the best bound."""
    runs = [run("dp", "structured", "OPTIMAL", 110), run("cpsat", "full", "FEASIBLE", 105, 90),
            run("milp", "full", "FEASIBLE", 107, 95)]
    assert space_entry(runs, "full") == {"status": "FEASIBLE", "objective_ticks": 105,
                                         "bound_ticks": 95, "solver": "cpsat/full"}
    assert space_entry(runs, "structured")["status"] == "OPTIMAL"


def test_cache_key_depends_on_options_and_entries_roundtrip(tmp_path: Path):
    """Different options give different keys; a stored entry reads back equal."""
    sha = "0" * 64
    key = result_key(sha, "dp", SolveOptions())
    assert key != result_key(sha, "dp", SolveOptions(time_limit_s=5))
    assert key != result_key(sha, "dp", SolveOptions(space=Space.FULL))
    cache = ResultCache(tmp_path)
    assert cache.get(key) is None
    cache.put(key, RECORD)
    assert cache.get(key) == RECORD
    assert ResultCache(tmp_path, enabled=False).get(key) is None
    assert not list(tmp_path.rglob("*.tmp"))


@pytest.mark.parametrize("text", ["[1]", "7", '"x"', "null", '{"objective_ticks": 7}',
                                  "{not json", "\xff"])
def test_cache_entry_that_is_not_a_record_is_a_miss(tmp_path: Path, text: str):
    """A cache entry that is not a JSON object with a record's keys reads as a miss."""
    cache = ResultCache(tmp_path)
    key = result_key("0" * 64, "dp", SolveOptions())
    cache.put(key, RECORD)
    next(tmp_path.rglob(f"{key}.json")).write_bytes(text.encode("latin-1"))
    assert cache.get(key) is None


def _source_copy(tmp_path: Path) -> tuple[Path, ...]:
    roots = source_roots()
    assert {root.name for root in roots} == {"nest_cp", "dp", "verify"}
    copies = tuple(tmp_path / root.name for root in roots)
    for root, copy in zip(roots, copies):
        shutil.copytree(root, copy, ignore=shutil.ignore_patterns("__pycache__"))
    return copies


@pytest.mark.parametrize("edited", ["nest_cp/solvers/exact/__init__.py", "nest_cp/cost/terms.py",
                                    "nest_cp/cost/evaluate.py", "dp/kernel.py",
                                    "nest_cp/solvers/baselines/__init__.py", "verify/certify.py"])
def test_code_fingerprint_changes_with_any_source_file(tmp_path: Path, edited: str):
    """Editing any .py under nest_cp/, dp/ or verify/ (not only a backend's module) changes keys."""
    roots = _source_copy(tmp_path)
    before = code_fingerprint(roots)
    assert before == code_fingerprint(source_roots())  # the copy hashes like the original
    with open(tmp_path / edited, "a", encoding="utf-8") as handle:
        handle.write("\n# edited\n")
    after = code_fingerprint(roots)
    assert after != before
    sha, options = "0" * 64, SolveOptions()
    for backend in ("cpsat", "milp", "dp", "manual"):
        assert result_key(sha, backend, options, before) != result_key(sha, backend, options,
                                                                        after)


def test_code_fingerprint_names_the_solver_versions():
    """The fingerprint carries the installed OR-Tools, PuLP and HiGHS versions."""
    from importlib import metadata

    fingerprint = code_fingerprint()
    for name in ("ortools", "PuLP", "highspy"):
        assert f"{name}={metadata.version(name)}" in fingerprint


def test_code_fingerprint_changes_when_a_source_file_is_added(tmp_path: Path):
    """A new module under nest_cp/solvers/exact changes the fingerprint too."""
    roots = _source_copy(tmp_path)
    before = code_fingerprint(roots)
    new_module = tmp_path / "nest_cp" / "solvers" / "exact" / "new_model.py"
    new_module.write_text("X = 1\n", encoding="utf-8")
    assert code_fingerprint(roots) != before


def test_committed_instances_match_the_generator(tmp_path: Path):
    """instances/ holds exactly what verify/suite.py writes, byte for byte."""
    for path in write_instances(tmp_path):
        committed = ROOT / "instances" / path.relative_to(tmp_path)
        assert committed.read_bytes() == path.read_bytes(), committed


def test_small_set_covers_the_required_variety():
    """>= 30 small instances within 8 layers / 16 devices, >= 3 infeasible, 4 graph kinds."""
    paths = sorted(p for p in (ROOT / "instances" / "small").glob("*.json")
                   if not p.name.endswith(".ref.json"))
    assert len(paths) >= 30
    for path in paths:
        instance = load_instance(path)
        assert instance.workload.num_layers <= 8 and instance.cluster.num_devices <= 16
    families = [spec.family for spec in small_specs()]
    assert families.count("infeasible") >= 3
    assert {"graph-tree", "graph-ring", "graph-islands", "graph-torus"} <= set(families)
    moe = json.loads((ROOT / "instances" / "small" / "moe-l4-d8-tp-ep.json").read_text())
    kinds = {c["kind"] for layer in moe["workload"]["layers"] for p in layer["profiles"]
             for c in p["collectives"]}
    assert "all_to_all" in kinds


def test_tolerance_optimum_certifies_only_within_tolerance():
    """A MILP optimum proven within 1e-7 (bound below its objective) agrees with a DP between
    its bound and objective: verdict "tol", not "yes", and no failure; the gap against it is
    an interval, not a point."""
    milp = {**run("milp", "structured", "OPTIMAL", 100_000_000, 99_999_980), "tolerance_rel": 1e-7}
    runs = [run("dp", "structured", "OPTIMAL", 99_999_990), milp]
    assert certify.algorithmic_certificate(runs) == ("tol", [])
    with_cpsat = runs[:1] + [run("cpsat", "structured", "OPTIMAL", 99_999_990), milp]
    assert certify.algorithmic_certificate(with_cpsat) == ("yes", [])
    full = {**milp, "space": "full"}
    gap = certify.structural_gap([runs[0], full])
    assert gap["exact"] is False and gap["low"] == 0 < gap["high"]


def test_reference_of_dp_only_runs_is_a_regression_snapshot():
    """python -m nest_cp.verify.reference labels a reference made from the DP alone as a
    regression snapshot holding only its structured answer; with an exact solver it is
    independent."""
    from nest_cp.verify.reference import reference_document

    dp_run = run("dp", "structured", "OPTIMAL", 100)
    record = {"instance": "x", "sha256": "s", "runs": [dp_run]}
    snapshot = reference_document(record, 20.0)
    assert snapshot["kind"] == "regression-snapshot" and list(snapshot["spaces"]) == ["structured"]
    record["runs"].append(run("cpsat", "full", "OPTIMAL", 90))
    assert reference_document(record, 20.0)["kind"] == "independent"
