"""The soak: a 200-seed sample of it, its resumption, reproducers, the command, and its check
of the full-space certificate against exhaustive search."""

from __future__ import annotations

import dataclasses
import hashlib
import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from tiers import SLOW

from nest_cp.harness.executors import LocalExecutor
from nest_cp.harness.generators import (
    draw_tiny_recipe,
    full_placement_count,
    random_instance,
    structured_plan_count,
    tiny_instance,
)
from nest_cp.io.readers import load_instance
from nest_cp.model.instance import (
    CollectiveGroup,
    HierarchicalNetwork,
    IntraConfig,
    RecomputeMode,
)
from nest_cp.model.launchers.search import Launcher
from nest_cp.model.result import SolveOptions, Space, Status
from nest_cp.solvers.certify import certify_full
from nest_cp.solvers.registry import solve
from nest_cp.verify import soak

REPRODUCERS = sorted((Path(__file__).parent / "data" / "soak").glob("*.json"))
SAMPLE = soak.SoakOptions(count=200, exact_time_limit_s=1.0)
FIRST_SEEDS = soak.SoakOptions(count=15, exact_time_limit_s=1.0)


def test_first_fifteen_seeds_agree(tmp_path: Path):
    """Seeds 0-14 of the soak, the fast tier's share of it: every backend runs (the DP and
    brute force on all, CP-SAT, the MILP, full brute force and the full-space certificate on
    the sample), every run passes the evaluator and nothing disagrees."""
    with LocalExecutor(1) as executor:
        records, _ = soak.run_soak(FIRST_SEEDS, tmp_path, executor)
    counts = soak.summary(records)
    disagreements = [(r["seed"], r["failures"]) for r in records if r["verdict"] != "agree"]
    assert disagreements == []
    assert counts["instances"] == 15 and counts["sampled"] >= 3
    ran = {(run["backend"], run["space"]) for r in records for run in r["runs"]}
    assert {("dp", "structured"), ("brute", "structured"), ("cpsat", "full"),
            ("milp", "structured"), ("brute", "full"), ("certify-full", "full")} <= ran
    assert counts["certificates"]["checked"] >= 3
    assert {"graph", "hierarchy", "no plan fits", "has a plan",
            "context widths (p2p)"} <= set(counts["kinds"])


@SLOW
def test_two_hundred_seed_sample_agrees(tmp_path: Path):
    """Seeds 0-199 of the soak (DP vs brute force on all, CP-SAT, MILP and full brute force
    on the 10% sample, 1 s per exact solve, the full-space certificate against brute force
    wherever the full space is small enough): every run passes the evaluator and no two runs
    or certificate and exhaustive search disagree; the sample covers hierarchies, graphs,
    MoE, instances without a plan and the certificate's draw."""
    with LocalExecutor(2) as executor:
        records, _ = soak.run_soak(SAMPLE, tmp_path, executor)
    counts = soak.summary(records)
    disagreements = [(r["seed"], r["failures"]) for r in records if r["verdict"] != "agree"]
    assert disagreements == []
    assert counts["instances"] == 200 and 10 <= counts["sampled"] <= 35
    assert {"graph", "hierarchy", "MoE", "dense", "no plan fits", "has a plan",
            "SDP allowed", "SDP plan fits", "efficiency < 1", "ZeRO 1/2 with g != w",
            "ZeRO 1/2 with both overlaps"} <= set(counts["kinds"])
    ran = {(run["backend"], run["space"]) for r in records for run in r["runs"]}
    assert {("dp", "structured"), ("brute", "structured"), ("cpsat", "full"),
            ("milp", "structured"), ("brute", "full"), ("certify-full", "full")} <= ran
    assert counts["certificates"]["checked"] >= 40
    assert "drawn like the certificate's counterexamples" in counts["kinds"]


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


# soak-5620's exact solves take about 8 s: it waits for the slow tier
@pytest.mark.parametrize("path", [pytest.param(path, marks=SLOW) if path.stem == "soak-5620"
                                  else path for path in REPRODUCERS],
                         ids=[path.stem for path in REPRODUCERS])
def test_saved_soak_reproducer_now_agrees(path: Path):
    """Every instance the soak once saw disagree runs clean through all backends now."""
    instance = load_instance(path)
    seed = json.loads(path.read_text())["provenance"]["seed"]
    _, failures = soak.check_instance(instance, seed, soak.SoakOptions(), sampled=True)
    assert failures == []


# ------------------------------------------------------------------ full-space certificate

# sha256 (first 16 hex digits) of each recipe's fields, computed with the draw as it was
# before the certificate's draw stream existed (the new ``identical_blocks`` field left out)
RECIPE_HASHES_BEFORE = {
    0: "78e2e39fb00b2341", 1: "cf4ea664c990354a", 2: "6280e0f100507ac2", 3: "071fef08cb6a1283",
    4: "829991c0533de4af", 5: "6ec640a3908b27e0", 6: "54924db99d15f5b0", 7: "b86ed34e2833af3a",
    8: "7f1cdf0ee581c2d6", 9: "d83db9ca0ea9c490", 10: "f1d969e5174c95b6",
    11: "6d685a2fc4c97818", 12: "a17f7eb264ce7186", 13: "4132ac2c9694ed82",
    14: "357f952ee9b07589", 15: "8fd17069f1c14c0f", 16: "56e2170adc4bc0be",
    17: "74b012768b9d6469", 18: "98bc8f6fd60657bb", 19: "bf401343a9e1b8dc",
    20: "efda2500b16480a7", 21: "379d2f442ff1a447", 22: "eb3566beb070d295",
    23: "6f23f224a07ae022"}


def _recipe_hash(seed: int) -> str:
    """The hash of the seed's recipe without the v3 and launcher draws (streams of their
    own, added later: they must leave the rest of the draw as it was)."""
    fields = dataclasses.asdict(draw_tiny_recipe(seed, max_structured_plans=1000))
    assert fields.pop("identical_blocks") is False
    if fields.pop("v3") is not None:
        del fields["training"]["overlap_param_gather"]
    fields["training"].pop("launcher", None)
    fields["training"].pop("tp_comm_overlap", None)
    # the context draw (a stream of its own, added later) only adds widths c > 1
    fields["training"].pop("context_parallel", None)
    fields["training"].pop("cp_comm", None)
    fields["configs"] = [config for config in fields["configs"] if config["cp"] == 1]
    for config in fields["configs"]:
        del config["cp"]
    text = json.dumps(fields, sort_keys=True, default=repr)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def test_certify_draw_leaves_the_other_seeds_unchanged():
    """A seed not drawn for the certificate draws the recipe it drew before that draw
    existed (hashes taken from the earlier code); the others are the certificate's draw.
    The v3 draw (half the seeds) only adds to a recipe, so it is stripped first."""
    plain = 0
    for seed, before in RECIPE_HASHES_BEFORE.items():
        recipe = draw_tiny_recipe(seed, max_structured_plans=1000)
        if recipe.network == "hierarchy-uneven" or \
                recipe.training.get("launcher") is Launcher.TORCHTITAN:
            continue  # the certificate's draw; torchtitan also sets overlap_grad_reduce
        plain += 1
        assert _recipe_hash(seed) == before, seed
    assert 15 <= plain < len(RECIPE_HASHES_BEFORE)


def test_certify_draw_fits_exhaustive_search_and_varies():
    """Every recipe of the certificate's draw fits both brute-force budgets (its placement
    count equals the soak's count on the built instance), and over 300 seeds the draw has
    tiers of size 1 and 3, an outer tier faster than the one below, expert width 2 without
    EP collectives, identical blocks, recompute choices, overlap and virtual stages."""
    seen = set()
    for seed in range(300):
        recipe = draw_tiny_recipe(seed, max_structured_plans=1000, max_full_placements=5000)
        if recipe.network != "hierarchy-uneven":
            continue
        instance = tiny_instance(recipe)
        assert structured_plan_count(recipe) <= 1000
        assert full_placement_count(recipe) == soak.full_placements(instance) <= 5000
        network = instance.cluster.network
        assert isinstance(network, HierarchicalNetwork)
        sizes = [tier.size for tier in network.tiers]
        seen |= {f"tier size {size}" for size in sizes if size in (1, 3)}
        if any(outer.bandwidth_Bps > inner.bandwidth_Bps
               for inner, outer in zip(network.tiers, network.tiers[1:])):
            seen.add("outer tier faster")
        layers = instance.workload.layers
        if any(config.ep == 2 and not any(
                c.group is CollectiveGroup.EP for layer in layers
                for c in layer.profile(config, size).collectives)
               for config, size in instance.choices):
            seen.add("ep 2 without EP collectives")
        if recipe.identical_blocks and len(layers) >= 2:
            profiles = [layer.profiles for layer in layers]
            assert any(a == b for a, b in zip(profiles, profiles[1:]))
            seen.add("identical blocks")
        if len(instance.training.recompute_modes) > 1 or \
                RecomputeMode.SELECTIVE in instance.training.recompute_modes:
            seen.add("recompute choices")
        if instance.training.overlap_grad_reduce:
            seen.add("overlap")
        if instance.training.virtual_stages != (1,):
            seen.add("virtual stages")
    assert seen == {"tier size 1", "tier size 3", "outer tier faster",
                    "ep 2 without EP collectives", "identical blocks", "recompute choices",
                    "overlap", "virtual stages"}


def test_few_seeds_check_the_certificate_end_to_end(tmp_path: Path):
    """Seeds 59-64 in one process (no exact-solver sample): the certificate is checked
    against exhaustive search on some, with and without the DP's hint, each check compares
    it with the seed's own full-space brute force, and no seed disagrees."""
    options = soak.SoakOptions(count=6, first_seed=59, sample_rate=0.0)
    records, _ = soak.run_soak(options, tmp_path)
    assert [(r["seed"], r["failures"]) for r in records if r["verdict"] != "agree"] == []
    counts = soak.summary(records)["certificates"]
    assert counts["checked"] >= 3 and 0 < counts["hinted"] < counts["checked"]
    assert all(seeds == [] for seeds in counts["violations"].values())
    for record in records:
        runs = {run["backend"] + "/" + run["space"]: run for run in record["runs"]}
        certificate = runs["certify-full/full"]
        if certificate["certify"]["skipped"]:
            continue
        assert certificate["certify"]["exhaustive_ticks"] == runs["brute/full"]["objective_ticks"]
        if certificate["bound_ticks"] is not None:
            assert certificate["bound_ticks"] <= runs["brute/full"]["objective_ticks"]


def _certified_seed(seed: int = 62):
    """A soak instance, its exhaustive full-space result and a certificate with a plan."""
    instance = tiny_instance(draw_tiny_recipe(seed, max_structured_plans=1000,
                                              max_full_placements=5000))
    brute = solve(instance, "brute", SolveOptions(space=Space.FULL))
    exhaustive = {"status": brute.status.value, "objective_ticks": brute.objective_ticks}
    hint = solve(instance, "dp", SolveOptions()).plan
    return instance, exhaustive, certify_full(instance, hint, 5.0)


def test_wrong_certificates_are_violations():
    """The comparison accepts the real certificate and names the kind of every wrong claim:
    a bound above the exhaustive optimum, OPTIMAL above it, a misreported best plan,
    INFEASIBLE where a plan exists."""
    instance, exhaustive, certificate = _certified_seed()
    optimum = exhaustive["objective_ticks"]
    assert exhaustive["status"] == Status.OPTIMAL.value and certificate.plan is not None
    assert soak.certificate_violations(instance, certificate, exhaustive) == []

    def kinds(**changes):
        wrong = dataclasses.replace(certificate, **changes)
        return {kind for kind, _ in soak.certificate_violations(instance, wrong, exhaustive)}

    assert kinds(bound_ticks=optimum + 1) == {"bound"}
    assert kinds(status=Status.OPTIMAL, objective_ticks=optimum + 1,
                 bound_ticks=optimum + 1) == {"bound", "optimal", "mispriced"}
    assert "mispriced" in kinds(objective_ticks=certificate.objective_ticks - 1)
    assert kinds(status=Status.INFEASIBLE, plan=None, objective_ticks=None,
                 bound_ticks=None) == {"infeasible"}


def test_wrong_certificate_in_the_soak_is_counted_and_saved(tmp_path: Path, monkeypatch):
    """A certify_full that claims a bound one tick above its best plan makes every checked
    seed with a plan disagree: counted as bound violations in the report and saved as a
    reproducer."""
    def overclaiming(instance, hint=None, time_limit_s=600.0, seed=0):
        certificate = certify_full(instance, hint, time_limit_s, seed)
        if certificate.objective_ticks is not None:
            certificate.bound_ticks = certificate.objective_ticks + 1
        return certificate

    monkeypatch.setattr(soak, "certify_full", overclaiming)
    options = soak.SoakOptions(count=6, first_seed=59, sample_rate=0.0)
    records, _ = soak.run_soak(options, tmp_path / "state")
    counts = soak.summary(records)["certificates"]
    flagged = counts["violations"]["bound"]
    assert flagged and all(any("bound above the exhaustive optimum" in failure
                               for failure in record["failures"])
                           for record in records if record["seed"] in flagged)
    written = soak.save_reproducers(records, options, tmp_path / "repro")
    assert {json.loads(path.read_text())["provenance"]["seed"] for path in written} >= \
        set(flagged)
    report = soak.render_report(records, options, 1.0, 1, written)
    assert f"- bound above the exhaustive optimum: {len(flagged)} (seeds " in report


def test_some_seeds_are_searched_under_each_launcher_and_none_with_sdp():
    """The launcher draw (training.launcher) reaches every launcher and never an SDP seed."""
    drawn = [draw_tiny_recipe(seed, max_structured_plans=1000) for seed in range(120)]
    launchers = {recipe.training.get("launcher") for recipe in drawn}
    assert {Launcher.MEGATRON, Launcher.TORCHTITAN, Launcher.DEEPSPEED} <= launchers
    assert not any(recipe.sdp and "launcher" in recipe.training for recipe in drawn)


def test_some_seeds_allow_context_widths_and_agree():
    """The context draw (training.context_parallel) reaches p2p and a2a, c = 2 and c = 4,
    never an SDP seed; on its first seeds the soak's checks find the DP, brute force and the
    structured CP-SAT and MILP (run on every such seed, sampled or not, in both spaces) in
    agreement: each structured exact run that settles (OPTIMAL, INFEASIBLE) has brute
    force's status and objective, one stopped by its 1 s limit no better plan."""
    drawn = [(seed, draw_tiny_recipe(seed, max_structured_plans=1000)) for seed in range(200)]
    context = [(seed, recipe) for seed, recipe in drawn
               if any(config.cp > 1 for config in recipe.configs)]
    assert not any(recipe.sdp for _, recipe in context)
    assert {recipe.training["cp_comm"].value for _, recipe in context} == {"p2p", "a2a"}
    assert {config.cp for _, recipe in context for config in recipe.configs} == {1, 2, 4}
    options = soak.SoakOptions(count=1, exact_time_limit_s=1.0)
    settled = 0
    for index, (seed, recipe) in enumerate(context[:6]):
        runs, failures = soak.check_instance(tiny_instance(recipe), seed, options,
                                             sampled=index == 0)
        assert failures == [], (seed, failures)
        dp, brute, *exact = [next(run for run in runs if (run["backend"], run["space"]) == key)
                             for key in (("dp", "structured"), ("brute", "structured"),
                                         ("cpsat", "structured"), ("milp", "structured"))]
        optimum = (brute["status"], brute["objective_ticks"])
        assert (dp["status"], dp["objective_ticks"]) == optimum
        for run in exact:
            if run["status"] in ("OPTIMAL", "INFEASIBLE"):
                settled += 1
                assert (run["status"], run["objective_ticks"]) == optimum, (seed, run)
            elif run["objective_ticks"] is not None:
                assert run["objective_ticks"] >= brute["objective_ticks"], (seed, run)
    assert settled >= 6  # most of the twelve exact runs settle within their second


def test_shape_bounds_are_checked_against_exhaustive_search(monkeypatch):
    """The exact driver's sub-problem bounds on a tiny 2-tier instance pass the soak's
    per-shape check, and a bound raised above a shape's least plan is reported."""
    instance = random_instance(1, tier_sizes=(2, 2), comm_scale=30, global_batch=4,
                               configs=(IntraConfig(), IntraConfig(2, 1)))
    assert soak.shape_bound_violations(instance) == []
    monkeypatch.setattr(soak, "communication_lower_bound", lambda *arguments: 10**15)
    assert soak.shape_bound_violations(instance)
