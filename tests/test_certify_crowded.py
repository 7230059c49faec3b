"""The crowded-node bound (nest_cp/solvers/certify/crowded.py): a stage that keeps a pipeline
neighbour in its node cannot keep its sync groups there too.  Checked against exhaustive
search of the shape's full space (tests/exhaustive.py) and on a NEST-grid shape."""

from __future__ import annotations

from pathlib import Path

import pytest
from exhaustive import WORK, shape_bound
from test_certify_channels import FOUR_PAIRS, _case, _hierarchy_optimum, _placement_free, _shape
from tiers import SLOW

from nest_cp import IntraConfig, evaluate, load_instance
from nest_cp.model.network import NetworkModel
from nest_cp.solvers.certify.bounds import FastBounds
from nest_cp.solvers.certify.chain import LayerPrices, network_tiers
from nest_cp.solvers.certify.crowded import CrowdedBound
from nest_cp.solvers.certify.geometry import geometry, replica_arcs
from nest_cp.solvers.certify.raised import RaisedPathBound
from nest_cp.solvers.certify.realise import realise
from nest_cp.solvers.certify.relax import Relaxation
from nest_cp.solvers.certify.split import Catalogue, block_chain, shapes

ROOT = Path(__file__).parent.parent


def _crowded(instance, shape) -> tuple[CrowdedBound, FastBounds, object]:
    prices = LayerPrices(instance, shape.config, shape.microbatch,
                         network_tiers(NetworkModel(instance.cluster)))
    fast = FastBounds(instance, prices, block_chain(prices))
    geo = geometry(prices)
    return CrowdedBound(shape, geo, fast), fast, geo


@pytest.mark.parametrize("out_bytes, dense_params, optimum", [
    (10**8, 10**8, 40_025_000), (3 * 10**7, 10**8, 32_052_000),
    (10**8, 3 * 10**8, 71_052_000), (10**7, 10**8, 22_052_000)])
def test_crowded_bound_is_the_optimum_of_two_replicas_on_pairs(out_bytes, dense_params,
                                                                optimum):
    """Four 2-device nodes, S = 2, d = 2, t = e = 1: a replica's pipeline in its node leaves
    both sync groups across nodes, sync groups in nodes send both transfers across; with
    the cheap τ (every plan) the crowded bound is the shape's exhaustive optimum, well above
    the placement-free bound, which prices both in nodes."""
    instance = _case(FOUR_PAIRS, 8, out_bytes, dense_params)
    shape = _shape(instance, 2, 2)
    crowded, fast, _ = _crowded(instance, shape)
    assert crowded.applies
    assert crowded.bound(fast.bound(shape).tau) == optimum == _hierarchy_optimum(instance, shape)
    assert _placement_free(instance, shape) < optimum
    assert shape_bound(instance, shape) == optimum


@pytest.mark.parametrize("out_bytes, dense_params", [(10**8, 10**8), (10**7, 10**8)])
def test_crowded_bound_stays_below_the_optimum_of_four_replicas(out_bytes, dense_params):
    """Same nodes, S = 2, d = 4 (a sync group leaving the node runs two ring channels):
    never above the exhaustive optimum."""
    instance = _case(FOUR_PAIRS, 8, out_bytes, dense_params)
    shape = _shape(instance, 2, 4)
    crowded, fast, _ = _crowded(instance, shape)
    assert crowded.bound(fast.bound(shape).tau) <= _hierarchy_optimum(instance, shape)


def test_crowded_bound_does_not_apply_when_the_node_holds_everything():
    """(d + 1)·a <= a node's devices: a node can hold the neighbour and the sync groups."""
    instance = _case(FOUR_PAIRS, 8, 10**8, 10**8)
    shape = _shape(instance, 2, 1)  # d = 1: no dense sync group to crowd out
    crowded, fast, _ = _crowded(instance, shape)
    assert not crowded.applies
    assert crowded.bound(fast.bound(shape).tau) == float("-inf")


def test_crowded_bound_closes_the_llama3_tpuv4_256_shape():
    """Llama3-70B on 256 TPUv4 devices, t = 4, S = 32, d = 2 (two stage replicas per 8-device
    node): the raised bound stopped at the path τ with the placement-free sync (215,188.544
    ms); a 3-block stage needs a pipeline neighbour in its node, so its sync leaves the node,
    and the crowded bound reaches 215,190.604 ms, the price of the plan the certificate
    realises (plan_source "relaxation" in reports/paper/certified.md)."""
    instance = load_instance(ROOT / "instances/paper/llama3-70b--nest-tpuv4-fattree--256.json")
    shape = next(s for s in shapes(instance) if s.config == IntraConfig(tp=4)
                 and s.num_stages == 32 and s.dp == 2 and s.zero == 0 and s.microbatch == 1)
    crowded, fast, geo = _crowded(instance, shape)
    sync = fast.bound(shape).sync
    raised = RaisedPathBound(shape, geo, fast, replica_arcs(shape.num_stages, geo)).tau
    assert shape.rounds * raised + sync == 215_188_543_809
    assert crowded.bound(raised) == 215_190_604_093


@SLOW
def test_slice_placement_honours_the_counted_channels():
    """Llama3-70B on 512 TPUv4 devices, t = 4, S = 32, d = 4: the channel-counting
    relaxation gives stage 0's sync groups two ring channels; placed without that count the
    plan loses one (stage 0's sync 6.63 ms, 344,124 ticks above the relaxation), placed
    with it the plan prices at the relaxation's optimum, the crowded bound's value."""
    instance = load_instance(ROOT / "instances/paper/llama3-70b--nest-tpuv4-fattree--512.json")
    shape = next(s for s in shapes(instance) if s.config == IntraConfig(tp=4)
                 and s.num_stages == 32 and s.dp == 4 and s.zero == 0 and s.microbatch == 1)
    prices = LayerPrices(instance, shape.config, shape.microbatch,
                         network_tiers(NetworkModel(instance.cluster)))
    fast = FastBounds(instance, prices, block_chain(prices))
    geo = geometry(prices)
    catalogue = Catalogue(instance, prices, shape, fast.chain)
    # work limits, not the clock, so that a loaded machine gives the same answers
    outcome = Relaxation(catalogue, geo, replica_arcs(shape.num_stages, geo)).solve(
        3600.0, work_limit=WORK)
    assert outcome.status == "optimal" and outcome.objective == 109_204_118_956
    assert outcome.solution["channels"]
    placed = evaluate(instance, realise(catalogue, geo, outcome.solution, 3600.0,
                                        work_limit=WORK))
    assert placed.objective_ticks == outcome.objective
    blind = dict(outcome.solution, channels={})
    assert evaluate(instance, realise(catalogue, geo, blind, 3600.0,
                                      work_limit=WORK)).objective_ticks == 109_204_463_080
    path = RaisedPathBound(shape, geo, fast, replica_arcs(shape.num_stages, geo)).tau
    assert CrowdedBound(shape, geo, fast).bound(path) == outcome.objective
