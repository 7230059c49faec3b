"""Regression cases for `verify --certify-full`: its lower bound never exceeds a real plan.

Each folder of tests/data/certify holds an instance on which an earlier version of
the certification claimed a lower bound above a plan that the evaluator prices
lower (found by exhaustive search of the full space), or crashed; the plan beside
it is that search's optimum.  Every case is run through the API without a hint and
through the CLI (which hints the DP's plan), and the bound is compared with the
plan's price by the evaluator — never with a stored number.
"""

from __future__ import annotations

import json
import random
from itertools import product
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from nest_cp.cost.evaluate import evaluate
from nest_cp.io.readers import load_instance, plan_from_dict
from nest_cp.model.exits import ExitCode
from nest_cp.model.instance import IntraConfig
from nest_cp.model.network import NetworkModel
from nest_cp.solvers.certify import certify_full
from nest_cp.solvers.certify.bounds import INF, FastBounds
from nest_cp.solvers.certify.chain import LayerPrices, network_tiers
from nest_cp.solvers.certify.geometry import geometry, replica_arcs
from nest_cp.solvers.certify.paths import PathBound
from nest_cp.solvers.certify.split import block_chain, shapes
from nest_cp.verify.cli import verify_command

DATA = Path(__file__).parent / "data" / "certify"
CASES = ("cx1_two_domain_sides", "cx2_raised_minmax_optimal", "cx3_raised_minmax_bound",
         "cx4_cpsat_presolve_relaxation", "cx5_sides_natural_nohint", "cx6_pathbound_crash",
         "cx8_cpsat_presolve_instance")
# cx4 ships the best plan of the shape whose relaxation CP-SAT got wrong, not the optimum of
# the space: the optimum is at most its price, so the bound must be too.
SHAPE_PLAN_ONLY = {"cx4_cpsat_presolve_relaxation": "shape_optimal_plan.json"}
TIME_LIMIT_S = 10.0


def _optimum(case: str) -> int:
    """The evaluator's price of the case's optimal plan (found by exhaustive search), or for
    cx4 of a plan no cheaper than the optimum."""
    instance = load_instance(DATA / case / "instance.json")
    name = SHAPE_PLAN_ONLY.get(case, "optimal_plan.json")
    plan = plan_from_dict(json.loads((DATA / case / name).read_text()))
    evaluation = evaluate(instance, plan)
    assert evaluation.feasible, evaluation.violations
    return evaluation.objective_ticks


@pytest.mark.parametrize("case", CASES)
def test_api_bound_without_hint_is_below_the_optimum(case: str):
    """certify_full without a hint bounds below the optimal plan; any plan it returns is real."""
    instance = load_instance(DATA / case / "instance.json")
    certificate = certify_full(instance, None, TIME_LIMIT_S)
    optimum = _optimum(case)
    assert certificate.bound_ticks is not None
    assert certificate.bound_ticks <= optimum
    if certificate.plan is not None:
        evaluation = evaluate(instance, certificate.plan)
        assert evaluation.feasible and evaluation.objective_ticks == certificate.objective_ticks
        if case not in SHAPE_PLAN_ONLY:
            assert certificate.objective_ticks >= optimum
        assert certificate.bound_ticks <= certificate.objective_ticks


@pytest.mark.parametrize("case", CASES)
def test_cli_bound_is_below_the_optimum(case: str, tmp_path: Path):
    """`verify --certify-full` answers (exit 0 or 1, not 3) with a bound below the optimum."""
    args = [str(DATA / case / "instance.json"), "--certify-full", "--time-limit",
            str(TIME_LIMIT_S), "--out", str(tmp_path / "cert"), "--cache-dir",
            str(tmp_path / "cache"), "--no-cache", "--no-progress"]
    result = CliRunner().invoke(verify_command, args)
    assert result.exit_code in (ExitCode.OK, ExitCode.NO_PLAN), result.output
    record = json.loads((tmp_path / "cert" / "certified.json").read_text())["instances"][0]
    assert record["bound_ticks"] is not None
    assert record["bound_ticks"] <= _optimum(case)
    if record["status"] == "OPTIMAL":
        assert (record["objective_ticks"] <= _optimum(case) if case in SHAPE_PLAN_ONLY
                else record["objective_ticks"] == _optimum(case))


def test_raised_min_max_matches_enumeration_of_block_counts():
    """The block-chain min-max with one raised stage equals the enumeration over counts."""
    instance = load_instance(DATA / "cx2_raised_minmax_optimal" / "instance.json")
    network = NetworkModel(instance.cluster)
    shape = next(s for s in shapes(instance) if s.config == IntraConfig(2, 1)
                 and s.num_stages == 3 and s.dp == 1)
    prices = LayerPrices(instance, shape.config, shape.microbatch, network_tiers(network))
    fast = FastBounds(instance, prices, block_chain(prices))
    blocks = fast.chain.blocks
    lows = [fast._min_blocks(s, shape.num_stages) for s in range(shape.num_stages)]
    rng = random.Random(7)
    for _ in range(300):
        normal = [np.sort(np.array([rng.choice((rng.randrange(1, 40), INF))
                                    for _ in range(blocks + 1)], dtype=np.int64))
                  for _ in range(shape.num_stages)]
        raised = [row + np.where(row < INF, rng.randrange(0, 30), 0) for row in normal]
        expected = min((max(raised[s][c] if s == star else normal[s][c]
                            for s, c in enumerate(counts))
                        for counts in product(range(blocks + 1), repeat=shape.num_stages)
                        for star in range(shape.num_stages)
                        if sum(counts) == blocks
                        and all(c >= low for c, low in zip(counts, lows, strict=True))),
                       default=INF)
        found = fast._min_max(normal, shape, raised)
        assert found == (float("inf") if expected >= INF else expected)


def test_shape_without_replica_paths_has_no_main_plan():
    """A shape whose joined intra groups exceed every domain has no arc: path bound +inf."""
    instance = load_instance(DATA / "cx6_pathbound_crash" / "instance.json")
    network = NetworkModel(instance.cluster)
    shape = next(s for s in shapes(instance) if s.config == IntraConfig(2, 2))
    prices = LayerPrices(instance, shape.config, shape.microbatch, network_tiers(network))
    fast = FastBounds(instance, prices, block_chain(prices))
    geo = geometry(prices)
    arcs = replica_arcs(shape.num_stages, geo)
    assert arcs == []
    assert PathBound(shape, geo, fast, arcs).tau == float("inf")
