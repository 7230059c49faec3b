"""The relaxation's side and nesting rows (relax.py's proof steps 5a, 5b): a sync term's class
is the outermost tier exactly when the replicas of its stage lie on both top-level domains,
and class(ZeRO-3 gather) = class(expert sync) <= class(dense sync).  They matter where the
outermost tier is faster than the one below it (the TPUv4 fat-tree's pods): each bound is
checked against exhaustive search of the shape's full space (tests/exhaustive.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
from exhaustive import WORK, shape_bound, shape_optimum
from tiers import SLOW

from nest_cp import IntraConfig, load_instance
from nest_cp.model.network import NetworkModel
from nest_cp.solvers.certify.bounds import FastBounds
from nest_cp.solvers.certify.chain import LayerPrices, network_tiers
from nest_cp.solvers.certify.geometry import geometry, replica_arcs
from nest_cp.solvers.certify.relax import Relaxation
from nest_cp.solvers.certify.split import Catalogue, block_chain, shapes

DATA = Path(__file__).parent / "data"
ROOT = Path(__file__).parent.parent


def _shape(instance, num_stages: int, dp: int, zero: int, config: IntraConfig | None = None):
    config = IntraConfig() if config is None else config
    return next(s for s in shapes(instance) if s.num_stages == num_stages and s.dp == dp
                and s.config == config and s.zero == zero)


def _relaxation(instance, shape) -> Relaxation:
    prices = LayerPrices(instance, shape.config, shape.microbatch,
                         network_tiers(NetworkModel(instance.cluster)))
    fast = FastBounds(instance, prices, block_chain(prices))
    geo = geometry(prices)
    return Relaxation(Catalogue(instance, prices, shape, fast.chain), geo,
                      replica_arcs(shape.num_stages, geo))


def _without_rows(monkeypatch, instance, shape) -> int:
    """The relaxation's optimum without the side and nesting rows (the model before them)."""
    with monkeypatch.context() as patch:
        patch.setattr(Relaxation, "_sides", lambda *args: None)
        patch.setattr(Relaxation, "_nest", lambda *args: None)
        return _relaxation(instance, shape).solve(3600.0, work_limit=WORK).bound


@pytest.mark.parametrize("zero, before, optimum", [(0, 82_124_000, 99_162_000),
                                                    (1, 73_124_000, 92_662_000)])
def test_side_rows_reach_the_optimum_on_a_slow_pod_tier(monkeypatch, zero, before, optimum):
    """8 devices, nodes of 2, two pods of 4 whose tier (6.25 GB/s) is slower than the
    global one (25 GB/s); S = 3, d = 2.  Without the side rows the relaxation priced the
    sync on the global tier with both replicas in one pod; with them the bound is the
    shape's exhaustive optimum."""
    # benchmarks.certify_shapes seed 28 (tests/data/channels_three_tier_loose.json) with
    # the pod tier's bandwidth cut to a quarter of the global tier's
    instance = load_instance(DATA / "sides_slow_pod_tier.json")
    shape = _shape(instance, 3, 2, zero)
    assert geometry(_relaxation(instance, shape).prices).sides == 2
    assert _without_rows(monkeypatch, instance, shape) == before
    assert shape_bound(instance, shape) == shape_optimum(instance, shape) == optimum


@pytest.mark.parametrize("slots", [range(1, 6), pytest.param(range(6, 9), marks=SLOW)])
def test_side_rows_never_exceed_the_optimum_on_a_slow_pod_tier(slots):
    """Every shape of the same instance (by its number of ranks): bound <= exhaustive
    optimum."""
    instance = load_instance(DATA / "sides_slow_pod_tier.json")
    for shape in shapes(instance):
        if shape.config.devices * shape.num_stages * shape.dp not in slots:
            continue
        assert shape_bound(instance, shape) <= shape_optimum(instance, shape), shape.label


def test_nesting_rows_close_the_mixtral_tpuv4_shape(monkeypatch):
    """Mixtral-8x7B on 128 TPUv4 devices (four pods of 32), t = 2, e = 4, S = 4, d = 4:
    without the nesting rows the relaxation put the expert sync on the global tier (7.16 ms)
    beside a dense sync inside a pod; with them its optimum is the plan it realises
    (priced by the evaluator, the shape's optimum)."""
    instance = load_instance(ROOT / "instances/paper/mixtral-8x7b--nest-tpuv4-fattree--128.json")
    shape = _shape(instance, 4, 4, 0, IntraConfig(tp=2, ep=4))
    assert _without_rows(monkeypatch, instance, shape) == 69_810_137_345
    assert _relaxation(instance, shape).solve(3600.0, work_limit=WORK).bound == 69_812_004_042
