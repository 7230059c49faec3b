"""The shared-split bound (nest_cp/solvers/certify/shared.py): all replicas hold the same
block counts, so they can cut their stages into node runs only where those counts let a
boundary leave the node, and the runs of d replicas must pack into the nodes.  Checked
against exhaustive search of the main plans of small shapes (tests/exhaustive.py) and on
the NEST-grid shape it was built for."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from exhaustive import identical_blocks_instance, main_optimum

from nest_cp import load_instance
from nest_cp.model.network import NetworkModel
from nest_cp.solvers.certify.bounds import FastBounds
from nest_cp.solvers.certify.chain import LayerPrices, network_tiers
from nest_cp.solvers.certify.crowded import CrowdedBound
from nest_cp.solvers.certify.divided import DividedBound
from nest_cp.solvers.certify.geometry import geometry, replica_arcs
from nest_cp.solvers.certify.packed import PackedPathBound, knapsack
from nest_cp.solvers.certify.paths import PathBound
from nest_cp.solvers.certify.shared import SharedSplitBound
from nest_cp.solvers.certify.shortrun import ShortRunBound
from nest_cp.solvers.certify.split import block_chain, shapes
from nest_cp.solvers.certify.syncpath import SyncPathBound

ROOT = Path(__file__).parent.parent


def _parts(instance, shape):
    prices = LayerPrices(instance, shape.config, shape.microbatch,
                         network_tiers(NetworkModel(instance.cluster)))
    fast = FastBounds(instance, prices, block_chain(prices))
    return prices, fast, geometry(prices)


def _main_bound(shape, geo, fast, arcs, tau: float, sync: float) -> float:
    """The main bound search._path_bounds takes with τ_max >= ``tau``."""
    return max(fast.bound(shape).total, shape.rounds * tau + sync,
               CrowdedBound(shape, geo, fast).bound(tau),
               DividedBound(shape, geo, fast).bound(tau),
               SyncPathBound(shape, geo, fast, arcs).bound(tau, sync),
               ShortRunBound(shape, geo, fast).bound(tau, sync))


def _checked(seed: int, tiers, slots: int = 8, most_stages: int = 3) -> tuple[int, int]:
    """(shapes where the bound applies, where it raises τ) on one seed; asserts the main
    bound it feeds never exceeds the least main plan."""
    instance = identical_blocks_instance(seed, tiers)
    applied = raised = 0
    for shape in shapes(instance):
        size = shape.config.devices * shape.num_stages * shape.dp
        if size > min(slots, instance.cluster.num_devices) or shape.num_stages > most_stages:
            continue
        prices, fast, geo = _parts(instance, shape)
        if geo is None or fast.chain is None or math.isinf(fast.bound(shape).total):
            continue
        arcs = replica_arcs(shape.num_stages, geo)
        path = PathBound(shape, geo, fast, arcs)
        packed = PackedPathBound(path).tau
        shared = SharedSplitBound(path, packed)
        if not shared.applies or math.isinf(packed):
            continue
        assert shared.tau >= packed
        sync = fast.bound(shape).sync
        bound = _main_bound(shape, geo, fast, arcs, shared.tau, sync) \
            if math.isfinite(shared.tau) else math.inf
        optimum = main_optimum(instance, shape)
        assert bound <= optimum, f"seed {seed} {shape.label}: {bound} > {optimum}"
        applied += 1
        raised += shared.tau > packed
    return applied, raised


@pytest.mark.parametrize("seed", [8])
def test_shared_split_bound_never_exceeds_the_main_optimum(seed):
    """Shapes of at most three stages and 8 ranks on 2-4-device nodes: the main bound with the
    shared-split τ stays at most the least main plan (exhaustive search)."""
    applied, _ = _checked(seed, ((2, 2, 2), (2, 4), (3, 2), (4, 2)))
    assert applied > 0


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(40))
def test_shared_split_bound_never_exceeds_the_main_optimum_on_many_seeds(seed):
    """As above on 40 seeds and three-device nodes too (slow tier)."""
    _checked(seed, ((2, 2, 2), (2, 4), (3, 2), (4, 2), (3, 3), (2, 2, 3)))


def test_the_weights_see_only_the_sizes_a_vector_has():
    """Runs of 8, 4 and 3 devices per replica on 8-device nodes: two per run of more than
    four devices and one per run of three or four is at most 2 per node when only sizes 3, 4,
    7 and 8 occur (4 + 4, 4 + 3, 3 + 3, one large run), so 34 replicas need 34·4 / 2 = 68
    nodes; over every size (5 + 3 fits) a node holds 3 of that weight, and 64 nodes suffice
    for it, which is why the packed path bound, over every path's sizes, misses this."""
    few = {8: 2, 7: 2, 4: 1, 3: 1}
    every = {size: 2 if size > 4 else int(size >= 3) for size in range(1, 9)}
    assert knapsack(8, few) == 2
    assert 34 * (few[8] + few[4] + few[3]) > 64 * knapsack(8, few)
    assert knapsack(8, every) == 3
    assert 34 * (every[8] + every[4] + every[3]) <= 64 * knapsack(8, every)


def test_shared_split_bound_closes_the_bert_h100_512_shape():
    """BERT-large on 512 H100s, S = 15, d = 34 (a = 1, 8-device nodes), packed path τ
    665,934.  Below 728,679 ticks (where the last stage, with the head, holds a block with
    its input in its node; the only flag-row value between is 673,837, the last stage with
    its input off the node and no block, so every cap below has at most the flags of
    673,837) a stage holds two blocks only with both boundaries in its node, one block with
    one boundary off it (never both: 788,131), the last stage none: stages 0-13 hold at most
    28 blocks, so at most four one-block stages hold the 24.  A replica cuts only where both
    sides hold one block (or before the last stage after a one-block stage): at most two
    cuts, and either two runs of more than four stages (68 runs for 64 nodes), or runs of
    7-8, 3-4 and 3-4 stages, where the vector's sizes are 3, 4, 7 and 8 only and two per
    large run, one per small one, gives 34·4 > 64·2.  So no plan has τ_max below 728,679,
    and the shape's bound passes the best plan (113,563,621 ticks, S = 10)."""
    instance = load_instance(ROOT / "instances/paper/bert-large--nest-h100-spineleaf--512.json")
    shape = next(s for s in shapes(instance) if s.label == "tp=1,ep=1,b=1,S=15,d=34,z=0")
    _, fast, geo = _parts(instance, shape)
    path = PathBound(shape, geo, fast, replica_arcs(shape.num_stages, geo))
    packed = PackedPathBound(path).tau
    assert packed == 665_934
    shared = SharedSplitBound(path, packed)
    assert shared.applies
    assert not shared.holds(673_837)  # the last flag-row value below 728,679
    assert shared.tau >= 728_679
    assert shape.rounds * shared.tau + fast.bound(shape).sync > 113_563_621
