"""The full-space certificate over context widths c in {1, 2, 4} (p2p and a2a): whole
intervals against brute force, per-shape bounds against exhaustive search, and the context
price chain takes against the evaluator's."""

from __future__ import annotations

import dataclasses

import pytest
from exhaustive import WORK, tally_shape_bounds
from test_dp_cp import _cp_instance
from test_exact_cp import _full_instance
from tiers import slow_unless

from nest_cp import IntraConfig, Plan, Stage, evaluate
from nest_cp.model.instance import RecomputeMode
from nest_cp.model.network import NetworkModel
from nest_cp.model.result import SolveOptions, Space, Status
from nest_cp.solvers.certify import certify_full, unsupported
from nest_cp.solvers.certify.chain import LayerPrices, Span, network_tiers
from nest_cp.solvers.certify.split import shapes
from nest_cp.solvers.registry import solve

# 4-device instances of tests/test_dp_cp.py (brute force enumerates their full space in
# seconds): seeds 0, 9 (c in {1, 2} beside t = 2), 2, 11 (c = 2 beside e = 2, ZeRO 0/1/3,
# every recompute mode), 3, 12 (c = 2 alone), 6, 15 (c = 2 with e = 2, and c = 4)
SEEDS = (0, 2, 3, 6, 9, 11, 12, 15)
CASES = [(seed, comm) for seed in SEEDS for comm in ("p2p", "a2a")]
FAST = {(6, "p2p"), (12, "a2a"), (15, "a2a")}


def _check_interval(instance) -> tuple[bool, int | None]:
    """Assert bound <= brute-force full-space optimum <= certified plan, and OPTIMAL means
    equal; return (whether it was OPTIMAL, the optimum's c)."""
    brute = solve(instance, "brute", SolveOptions(space=Space.FULL))
    assert unsupported(instance) is None
    dp = solve(instance, "dp")
    certificate = certify_full(instance, dp.plan, time_limit_s=3600.0, seed=0,
                               work_limit=WORK)
    if brute.status is Status.INFEASIBLE:
        assert certificate.status is Status.INFEASIBLE
        return True, None
    assert brute.status is Status.OPTIMAL
    assert certificate.bound_ticks <= brute.objective_ticks <= certificate.objective_ticks
    assert evaluate(instance, certificate.plan).objective_ticks == certificate.objective_ticks
    if certificate.status is Status.OPTIMAL:
        assert certificate.objective_ticks == brute.objective_ticks
    return certificate.status is Status.OPTIMAL, brute.plan.config.cp


@pytest.mark.parametrize(("seed", "comm"), slow_unless(CASES, lambda case: case in FAST))
def test_certificate_contains_the_brute_force_optimum_with_context_widths(seed, comm):
    """bound <= brute-force full-space optimum <= certified plan (priced by the evaluator);
    OPTIMAL means equal; c in {1, 2, 4}, p2p and a2a."""
    _check_interval(_cp_instance(seed, comm))


@pytest.mark.parametrize(("seed", "kind"),
                         slow_unless([(seed, kind) for seed in (6, 12, 15, 0, 2)
                                      for kind in ("p2p", "a2a", "graph")],
                                     lambda case: case == (15, "graph")))
def test_certificate_on_crossed_tiers_and_graphs_with_context_widths(seed, kind):
    """The same on tests/test_exact_cp.py's full-space instances: an outer tier faster but
    slower to start than the inner one, and random graphs."""
    _check_interval(_full_instance(seed, kind))


def test_certified_optima_use_context_widths():
    """Not vacuous: on seed 12 (p2p) the full-space optimum the interval contains has c = 2;
    on seeds 6 and 15 (c = 2 beside e = 2, ZeRO-3 gathers over d·c ranks, a t·c·e replica
    wider than a node) the certificate proves a c = 2 optimum."""
    _, width = _check_interval(_cp_instance(12, "p2p"))
    assert width == 2
    for seed in (6, 15):
        assert _check_interval(_cp_instance(seed, "a2a")) == (True, 2)


@pytest.mark.parametrize("comm", ["p2p", "a2a"])
def test_context_shape_bounds_never_exceed_the_shape_optimum(comm):
    """Per shape with c > 1 (S <= 2), the bound the certificate takes <= the exhaustive
    optimum of the shape; some shape is bounded exactly and some strictly below."""
    tight = loose = 0
    for seed in (6, 12):
        instance = _cp_instance(seed, comm)
        found = tally_shape_bounds(instance, [shape for shape in shapes(instance)
                                              if shape.config.cp > 1 and shape.num_stages <= 2],
                                   str(seed))
        tight, loose = tight + found[0], loose + found[1]
    assert tight >= 1 and loose >= 1


@pytest.mark.parametrize("comm", ["p2p", "a2a"])
@pytest.mark.parametrize(("devices", "tier"), [((0, 1), 0), ((0, 2), 1)])
def test_context_price_is_the_evaluators_on_the_pair_tier(comm, devices, tier):
    """chain's context price of a span on tier k is exactly the exposed context exchange
    the evaluator charges a c = 2 stage whose CP ranks lie on tier k (the identity the
    placement-free context bound starts from)."""
    instance = dataclasses.replace(_cp_instance(12, comm), training=dataclasses.replace(
        _cp_instance(12, comm).training, recompute_modes=(RecomputeMode.NONE,)))
    config = IntraConfig(cp=2)
    network = NetworkModel(instance.cluster)
    prices = LayerPrices(instance, config, 1, network_tiers(network))
    num_layers = instance.workload.num_layers
    plan = Plan(config, 1, 0, 1, (Stage(0, num_layers - 1),), ((devices,),))
    evaluation = evaluate(instance, plan, network)
    assert evaluation.stages[0].context_ticks > 0
    assert evaluation.stages[0].context_ticks == prices.context(
        Span(0, num_layers - 1, RecomputeMode.NONE), tier)
