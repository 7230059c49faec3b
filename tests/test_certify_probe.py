"""The certificate's layout probe (nest_cp.solvers.certify.probe): its plans are full-space
plans the evaluator prices as the probe says, never below a proven optimum, and it finds
the full-space optimum where its classes hold one."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from nest_cp.cost.evaluate import Evaluator, evaluate
from nest_cp.dp.planner import solve as dp_solve
from nest_cp.io.readers import load_instance
from nest_cp.model.result import Status
from nest_cp.solvers.certify.probe import LayoutProbe
from nest_cp.solvers.certify.search import certify_full

SMALL = Path(__file__).parent.parent / "instances" / "small"
# hierarchical instances/small files with a stored full-space optimum and a DP plan
HIERARCHICAL = ("h2-dense-l8-d16", "h3-dense-l6-d12", "h3-dense-l5-d8-tp-mb",
                "moe-l4-d8-tp-ep", "tight-l4-d8-h3", "tight-l5-d8-all", "tight-l8-d16-h3")


def _full_optimum(name: str) -> int:
    reference = json.loads((SMALL / f"{name}.ref.json").read_text())["spaces"]["full"]
    assert reference["status"] == "OPTIMAL"
    return reference["objective_ticks"]


@pytest.mark.parametrize("name", HIERARCHICAL)
def test_probe_plan_priced_by_evaluator_and_not_below_optimum(name):
    """The probe's plan at the DP's shape and split is feasible, the evaluator prices it at
    the probe's ticks, and it is never below the full-space optimum."""
    instance = load_instance(SMALL / f"{name}.json")
    hint = dp_solve(instance).plan
    found = LayoutProbe(Evaluator(instance)).best(hint)
    assert found.plan is not None and found.priced > 0
    evaluation = evaluate(instance, found.plan)
    assert evaluation.feasible
    assert evaluation.objective_ticks == found.ticks
    assert found.ticks >= _full_optimum(name)


def _v3c_hint(instance):
    """The DP's plan over structured space v3c (without v3d's gathered ends, which reach
    tight-l8-d16-h3's full-space optimum themselves, tests/test_dp_gathered_ends.py): a
    hint below the optimum for the probe to improve on."""
    from nest_cp.model.network import NetworkModel

    layouts = tuple(layout for layout in NetworkModel(instance.cluster).structured_layouts
                    if not layout.gathered_ends)
    return dp_solve(instance, layouts=layouts).plan


def test_probe_finds_piecewise_optimum():
    """On tight-l8-d16-h3 structured space v3c misses the full-space optimum (103,857,000
    vs 102,783,000 ticks); a piecewise layout at that DP plan's split reaches it."""
    instance = load_instance(SMALL / "tight-l8-d16-h3.json")
    hint = _v3c_hint(instance)
    assert evaluate(instance, hint).objective_ticks > _full_optimum("tight-l8-d16-h3")
    found = LayoutProbe(Evaluator(instance)).best(hint)
    assert found.ticks == _full_optimum("tight-l8-d16-h3")
    assert found.layout.startswith("P: ")


def test_probe_is_deterministic_and_respects_below():
    """Two probes give the same plan; with ``below`` at or under its price none is kept."""
    instance = load_instance(SMALL / "tight-l8-d16-h3.json")
    hint = dp_solve(instance).plan
    first = LayoutProbe(Evaluator(instance)).best(hint)
    second = LayoutProbe(Evaluator(instance)).best(hint)
    assert (first.plan, first.ticks, first.layout) == (second.plan, second.ticks, second.layout)
    assert LayoutProbe(Evaluator(instance)).best(hint, below=first.ticks).plan is None


def test_probe_skips_graph_networks():
    """The classes are layouts of a tiered network: on a graph the probe prices nothing."""
    instance = load_instance(SMALL / "graph-tree-dense-l4-d8.json")
    hint = dp_solve(instance).plan
    found = LayoutProbe(Evaluator(instance)).best(hint)
    assert found.plan is None and found.priced == 0


def test_certificate_takes_probe_plan():
    """certify_full on tight-l8-d16-h3 from the v3c DP plan: the probe's plan becomes the
    incumbent ("layout probe"), refereed at the certificate's objective, which is the
    full-space optimum, and the proven bound is at most that."""
    instance = load_instance(SMALL / "tight-l8-d16-h3.json")
    hint = _v3c_hint(instance)
    certificate = certify_full(instance, hint, time_limit_s=120, work_limit=2)
    optimum = _full_optimum("tight-l8-d16-h3")
    assert certificate.plan_source == "layout probe"
    assert certificate.objective_ticks == optimum
    assert evaluate(instance, certificate.plan).objective_ticks == certificate.objective_ticks
    assert certificate.bound_ticks <= optimum
    assert certificate.status in (Status.FEASIBLE, Status.OPTIMAL)


def test_partly_populated_network_gets_the_canonical_order_only():
    """Five devices under tiers of 3 and 2 (soak seed 19): N is no multiple of the domain
    below the top, so the probe reads positions through the canonical order only (it
    divided by a top radix of 0 before); six devices get both orders, each a permutation."""
    from nest_cp.model.instance import HierarchicalNetwork, Tier
    from nest_cp.solvers.certify.layouts import device_orders

    network = HierarchicalNetwork(tiers=(Tier("a", 3, 5e10, 1e-6), Tier("b", 2, 2.5e10, 5e-7),
                                         Tier("c", 1, 2.5e10, 2.5e-7)))
    assert device_orders(network, 5) == {"012": [0, 1, 2, 3, 4]}
    orders = device_orders(network, 6)
    assert set(orders) == {"012", "021"}
    assert all(sorted(devices) == list(range(6)) for devices in orders.values())
