"""The full-space certification (nest_cp.solvers.certify): its bounds never exceed a real optimum.

Per shape, the bounds are checked against the exhaustive optimum of that shape
(every split, recompute vector and placement of tiny instances, priced by the
evaluator); per instance, the certified interval against brute force and the
stored optima of instances/small.  Instances use identical blocks (the block-chain
path), distinct layers (explicit spans), non-monotone tier speeds (a middle tier
slower than the outer one, as on the paper grid's clusters) and partial domains.
"""

from __future__ import annotations

import dataclasses
import json
import math
from fractions import Fraction
from pathlib import Path

import pytest
from exhaustive import WORK, shape_bound, shape_optimum

from nest_cp.cost.evaluate import evaluate
from nest_cp.harness.generators import random_instance
from nest_cp.io.readers import load_instance
from nest_cp.model.errors import BackendOptionError
from nest_cp.model.instance import (
    CollectiveGroup,
    CollectiveKind,
    GraphNetwork,
    HierarchicalNetwork,
    Instance,
    IntraConfig,
    Layer,
    Tier,
    Workload,
)
from nest_cp.model.network import NetworkModel, collective_ticks
from nest_cp.model.network import Path as NetPath
from nest_cp.model.plan import Plan, Stage
from nest_cp.model.result import Space, Status
from nest_cp.solvers.certify.bounds import FastBounds
from nest_cp.solvers.certify.chain import LayerPrices, LinearTicks, Span, network_tiers
from nest_cp.solvers.certify.geometry import geometry
from nest_cp.solvers.certify.relax import Relaxation
from nest_cp.solvers.certify.search import certify_full, unsupported
from nest_cp.solvers.certify.split import Catalogue, block_chain, shapes
from nest_cp.solvers.registry import SolveOptions, solve

SMALL = Path(__file__).parent.parent / "instances" / "small"
WIDE = (IntraConfig(), IntraConfig(2, 1), IntraConfig(1, 2))


def _blocks(instance: Instance, num_layers: int) -> Instance:
    """The instance with its middle layers replaced by copies of layer 1 (a block chain)."""
    layers = instance.workload.layers
    block = layers[1]
    middle = tuple(Layer(f"block{i}", block.profiles) for i in range(num_layers - 2))
    workload = Workload("blocks", (layers[0], *middle, layers[-1]))
    return dataclasses.replace(instance, workload=workload, name=instance.name + "-blocks")


def _non_monotone(instance: Instance) -> Instance:
    """Three tiers whose middle one is the slowest (the NEST clusters' shape)."""
    tiers = (Tier("node", 2, 1e11, 1e-6), Tier("pod", 2, 2e9, 2e-6), Tier("spine", 2, 1e10, 3e-6))
    cluster = dataclasses.replace(instance.cluster, network=HierarchicalNetwork(tiers))
    return dataclasses.replace(instance, cluster=cluster, name=instance.name + "-nonmono")


def tiny_instances() -> dict[str, Instance]:
    """Tiny instances for exhaustive per-shape optima (N <= 5 devices)."""
    return {
        "blocks-two-tier": _blocks(random_instance(1, num_layers=3, tier_sizes=(2, 2),
                                                   comm_scale=40), 4),
        "blocks-nonmono-tp": _non_monotone(_blocks(random_instance(
            2, num_layers=3, tier_sizes=(2, 2, 2), num_devices=5, comm_scale=60,
            configs=(IntraConfig(), IntraConfig(2, 1))), 4)),
        "spans-wide-zero": random_instance(3, num_layers=3, tier_sizes=(2, 2), configs=WIDE,
                                           zero_stages=(0, 3), comm_scale=20),
        "blocks-tight": _blocks(random_instance(4, num_layers=3, tier_sizes=(2, 2),
                                                hbm_bytes=16 * 10**9, comm_scale=20), 4),
        "spans-nonmono-ep": _non_monotone(random_instance(
            5, num_layers=3, tier_sizes=(2, 2, 2), num_devices=5, comm_scale=80,
            configs=(IntraConfig(), IntraConfig(1, 2)))),
    }


# ---------------------------------------------------------------------- exhaustive


@pytest.mark.parametrize("name", sorted(tiny_instances()))
def test_shape_bounds_never_exceed_the_shape_optimum(name):
    """Per shape, fast + path + relaxation (and the raised bound) <= the exhaustive optimum."""
    instance = tiny_instances()[name]
    checked = 0
    for shape in shapes(instance):
        if shape.devices > 4 or shape.num_stages > 3:
            continue
        bound, optimum = shape_bound(instance, shape), shape_optimum(instance, shape)
        assert bound <= optimum, f"{name} {shape.label}: bound {bound} > optimum {optimum}"
        checked += math.isfinite(optimum)
    assert checked >= 3


def test_relaxation_is_tight_on_a_packing_case():
    """The relaxation proves more than the placement-free bound where capacity binds."""
    instance = tiny_instances()["blocks-two-tier"]
    tighter = 0
    for shape in shapes(instance):
        if shape.devices != 4 or shape.num_stages > 3:
            continue
        tiers = network_tiers(NetworkModel(instance.cluster))
        prices = LayerPrices(instance, shape.config, shape.microbatch, tiers)
        fast = FastBounds(instance, prices, block_chain(prices))
        relaxed = Relaxation(Catalogue(instance, prices, shape, fast.chain),
                             geometry(prices)).solve(3600.0, work_limit=WORK)
        tighter += relaxed.bound > fast.bound(shape).total
    assert tighter >= 1


# ---------------------------------------------------------------------- whole instances


@pytest.mark.parametrize("name", ["blocks-two-tier", "blocks-tight", "spans-wide-zero"])
def test_certified_interval_contains_the_brute_force_optimum(name):
    """bound <= brute-force full-space optimum <= certified plan; OPTIMAL means equal."""
    instance = tiny_instances()[name]
    brute = solve(instance, "brute", SolveOptions(space=Space.FULL))
    dp_plan = solve(instance, "dp").plan if brute.status is Status.OPTIMAL else None
    certificate = certify_full(instance, dp_plan, time_limit_s=3600.0, work_limit=WORK)
    if brute.status is Status.INFEASIBLE:
        assert certificate.status is Status.INFEASIBLE
        return
    assert certificate.bound_ticks <= brute.objective_ticks <= certificate.objective_ticks
    if certificate.status is Status.OPTIMAL:
        assert certificate.objective_ticks == brute.objective_ticks


def test_certified_plan_is_priced_by_the_evaluator():
    """The certificate's objective is the evaluator's price of its plan."""
    instance = tiny_instances()["blocks-nonmono-tp"]
    certificate = certify_full(instance, None, time_limit_s=3600.0, work_limit=WORK)
    evaluation = evaluate(instance, certificate.plan)
    assert evaluation.feasible and evaluation.objective_ticks == certificate.objective_ticks


def _same_in_every_version(instance: Instance) -> bool:
    """The stored references (cost model v1 / v2) are still the optimum under v3: §3.2
    changes nothing when every plan has t = e = 1 and ZeRO-3 is not allowed, and v3
    (docs/cost-model.md §5) nothing on a graph (one ring channel, a) with efficiency 1 (b),
    ZeRO 0 only (c: no weight gather) and no overlapped weight gather (d)."""
    network = instance.cluster.network
    return all(config.devices == 1 for config, _ in instance.choices) \
        and set(instance.training.zero_stages) == {0} \
        and not instance.training.overlap_param_gather \
        and isinstance(network, GraphNetwork) \
        and all(link.efficiency == 1 for link in network.links)


def _supported(path: Path) -> bool:
    return unsupported(load_instance(path)) is None


SMALL_FILES = sorted(path for path in SMALL.glob("*.json")
                     if not path.name.endswith(".ref.json") and _supported(path))
SAME_SEMANTICS = [path.name for path in SMALL_FILES
                  if _same_in_every_version(load_instance(path))]
# the others' references predate v3 (or v2); brute force gives the v3 optimum on four
# devices in seconds (the larger hierarchical ones wait for regenerated references)
TINY = [path.name for path in SMALL_FILES if path.name not in SAME_SEMANTICS
        and load_instance(path).cluster.num_devices <= 4]


@pytest.mark.parametrize("file", SAME_SEMANTICS)
def test_bound_below_the_stored_optimum_of_small_instances(file):
    """On instances/small where every cost model version agrees, bound <= stored optimum
    (equal if OPTIMAL)."""
    instance = load_instance(SMALL / file)
    reference = json.loads((SMALL / file.replace(".json", ".ref.json")).read_text())
    full = reference["spaces"]["full"]
    certificate = certify_full(instance, solve(instance, "dp").plan if full["status"] !=
                               "INFEASIBLE" else None, time_limit_s=3600.0,
                               work_limit=WORK)
    if full["status"] == "INFEASIBLE":
        assert certificate.status is Status.INFEASIBLE
        return
    assert full["status"] == "OPTIMAL"
    assert certificate.bound_ticks <= full["objective_ticks"] <= certificate.objective_ticks
    if certificate.status is Status.OPTIMAL:
        assert certificate.objective_ticks == full["objective_ticks"]


@pytest.mark.parametrize("file", TINY)
def test_bound_below_the_brute_force_optimum_of_small_instances(file):
    """On four-device instances/small whose reference may predate v3, bound <= brute-force
    optimum <= certified plan (equal if OPTIMAL)."""
    instance = load_instance(SMALL / file)
    brute = solve(instance, "brute", SolveOptions(space=Space.FULL))
    dp = solve(instance, "dp") if brute.status is Status.OPTIMAL else None
    certificate = certify_full(instance, dp.plan if dp else None, time_limit_s=3600.0,
                               work_limit=WORK)
    if brute.status is Status.INFEASIBLE:
        assert certificate.status is Status.INFEASIBLE
        return
    assert certificate.bound_ticks <= brute.objective_ticks <= certificate.objective_ticks
    if certificate.status is Status.OPTIMAL:
        assert certificate.objective_ticks == brute.objective_ticks


def test_interleaved_instances_are_refused():
    """Virtual stages > 1 are outside the bounds' model: certify_full refuses them."""
    instance = random_instance(6, virtual_stages=(1, 2))
    with pytest.raises(BackendOptionError, match="virtual"):
        certify_full(instance, None, time_limit_s=5.0)


def test_sdp_instances_are_refused():
    """Subnetwork data parallelism is outside the bounds' model: certify_full refuses it."""
    instance = load_instance(SMALL / "sdp-block-l4-d4.json")
    with pytest.raises(BackendOptionError, match="SDP"):
        certify_full(instance, None, time_limit_s=5.0)


# ---------------------------------------------------------------------- primitives


@pytest.mark.parametrize("kind", list(CollectiveKind))
def test_linear_ticks_match_collective_ticks(kind):
    """LinearTicks prices a volume exactly as nest_cp.model.network.collective_ticks does."""
    path = NetPath(Fraction(12_500_000_000), Fraction(2, 10**4))
    for group in (2, 3, 7, 64):
        form = LinearTicks.of_collective(kind, 2, group, path, 1e-9)
        units = [0, 1, 3, 10**6 + 7, 123_456_789, 175 * 10**9 // 96]
        got = form.of(units)
        for unit, ticks in zip(units, got, strict=True):
            expected = collective_ticks(kind, 2 * unit, group, path, 1e-9) if unit else 0
            assert ticks == expected


def test_block_chain_found_on_repeated_blocks_only():
    """An embedding + identical blocks + head chain is a block chain; distinct layers are not."""
    instance = tiny_instances()["blocks-two-tier"]
    tiers = network_tiers(NetworkModel(instance.cluster))
    prices = LayerPrices(instance, IntraConfig(), 1, tiers)
    chain = block_chain(prices)
    assert chain is not None and chain.head + chain.blocks + chain.tail == 4
    distinct = random_instance(7, num_layers=4)
    assert block_chain(LayerPrices(distinct, IntraConfig(), 1, network_tiers(
        NetworkModel(distinct.cluster)))) is None


def test_stage_prices_match_the_evaluator():
    """LayerPrices' compute, collectives and sync of a stage equal the evaluator's terms."""
    instance = random_instance(8, num_layers=3, tier_sizes=(2, 2), configs=WIDE,
                               comm_scale=10)
    network = NetworkModel(instance.cluster)
    config = IntraConfig(2, 1)
    prices = LayerPrices(instance, config, 1, network_tiers(network))
    plan = Plan(config, 1, 0, 2, (Stage(0, 2),), ((((0, 2)), (1, 3)),))
    evaluation = evaluate(instance, plan, network)
    span = Span(0, 2, plan.stages[0].recompute)
    stage = evaluation.stages[0]
    assert prices.compute(span) == stage.compute_ticks
    assert prices.collectives(span, CollectiveGroup.TP, 1) == stage.collective_ticks
    assert prices.dense_sync(span, 2, 0, 0) + prices.expert_sync(span, 2, 0, 0) == \
        stage.sync_ticks


def test_consecutive_runs_land_in_different_domains_when_counts_allow():
    """_apart gives every replica a domain other than its previous one when Hall holds."""
    from nest_cp.solvers.certify.realise import _apart

    previous = [0] * 7 + [1] * 9  # 7 replicas' first runs in domain 0, 9 in domain 1
    chosen = _apart(previous, {0: 9, 1: 7})
    assert sorted(chosen) == [0] * 9 + [1] * 7
    assert all(new != old for new, old in zip(chosen, previous, strict=True))
    # a greedy in replica order would strand the last replica on its own domain here
    previous = [0, 0, 1, 2]
    chosen = _apart(previous, {1: 1, 2: 1, 0: 2})
    assert all(new != old for new, old in zip(chosen, previous, strict=True))
