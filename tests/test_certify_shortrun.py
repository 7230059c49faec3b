"""The short-run bound (nest_cp/solvers/certify/shortrun.py): a sync group on several ring
channels needs, at every stage, a replica whose run of stages in a node is short, and so
pipeline boundaries that leave the node near that stage.  Checked against exhaustive search
of the main plans of small shapes (tests/exhaustive.py) and on a NEST-grid shape."""

from __future__ import annotations

import math
import random
from pathlib import Path

import numpy as np
import pytest
from exhaustive import identical_blocks_instance, main_optimum
from tiers import slow_unless

from nest_cp import load_instance
from nest_cp.harness.generators import random_instance
from nest_cp.harness.sweep import build_points, parse_axis
from nest_cp.model.instance import IntraConfig, RecomputeMode
from nest_cp.model.network import NetworkModel
from nest_cp.solvers.certify.bounds import FastBounds
from nest_cp.solvers.certify.chain import LayerPrices, network_tiers
from nest_cp.solvers.certify.crowded import CrowdedBound
from nest_cp.solvers.certify.divided import DividedBound
from nest_cp.solvers.certify.geometry import geometry, replica_arcs
from nest_cp.solvers.certify.packed import PackedPathBound
from nest_cp.solvers.certify.paths import PathBound
from nest_cp.solvers.certify.shortrun import ShortRunBound
from nest_cp.solvers.certify.split import block_chain, shapes
from nest_cp.solvers.certify.syncpath import SyncPathBound
from nest_cp.solvers.registry import solve

ROOT = Path(__file__).parent.parent


def _instance(seed: int):
    """Identical blocks, t = 1 and e in {1, 2}, on small hierarchies with 2-4 device nodes."""
    return identical_blocks_instance(seed, ((2, 2, 2), (2, 4), (3, 2), (4, 2), (3, 3), (2, 2, 3)))


def _bounds(instance, shape) -> tuple[float, float, ShortRunBound]:
    """(main bound before, main bound with the short-run bound, the bound's object)."""
    prices = LayerPrices(instance, shape.config, shape.microbatch,
                         network_tiers(NetworkModel(instance.cluster)))
    fast = FastBounds(instance, prices, block_chain(prices))
    geo = geometry(prices)
    base = fast.bound(shape)
    arcs = replica_arcs(shape.num_stages, geo)
    tau = PackedPathBound(PathBound(shape, geo, fast, arcs)).tau
    old = max(base.total, shape.rounds * tau + base.sync,
              CrowdedBound(shape, geo, fast).bound(tau), DividedBound(shape, geo, fast).bound(tau),
              SyncPathBound(shape, geo, fast, arcs).bound(tau, base.sync))
    short = ShortRunBound(shape, geo, fast)
    return old, max(old, short.bound(tau, base.sync)), short


def _shape(instance, label: str):
    return next(s for s in shapes(instance) if s.label == label)


def _odd_instance(seed: int):
    """Identical blocks, t = e = 1, on three 4-device nodes: with d = 5 replicas a node
    holds up to q = 4 of a stage, but a sync on two channels needs ⌈5 / n⌉ domains of at
    least two members each, so some node holds n >= 3 of them (not only 2)."""
    rng = random.Random(seed)
    return random_instance(seed, num_layers=rng.choice((3, 4)), tier_sizes=(4, 3),
                           configs=(IntraConfig(),), recompute_modes=(RecomputeMode.NONE,),
                           global_batch=rng.choice((10, 20, 40)),
                           comm_scale=rng.choice((5, 20, 50, 200)), identical_blocks=True)


def _bounded(instance, shape) -> bool:
    """Whether the shape has a block chain, a geometry and a finite placement-free bound
    (else the path bounds are not computed)."""
    prices = LayerPrices(instance, shape.config, shape.microbatch,
                         network_tiers(NetworkModel(instance.cluster)))
    fast = FastBounds(instance, prices, block_chain(prices))
    return not (geometry(prices) is None or fast.chain is None
                or math.isinf(fast.bound(shape).total))


def _checked(seed: int, slots: int = 8) -> tuple[int, int, int]:
    """(shapes where the bound applies, where it is stronger, where it equals the least main
    plan) on one seed; asserts it never exceeds the least main plan."""
    instance = _instance(seed)
    applied = stronger = tight = 0
    for shape in shapes(instance):
        size = shape.config.devices * shape.num_stages * shape.dp
        if size > min(slots, instance.cluster.num_devices) or shape.num_stages > 3:
            continue
        if not _bounded(instance, shape):
            continue
        before, after, short = _bounds(instance, shape)
        if not short.applies:
            continue
        optimum = main_optimum(instance, shape)
        assert after <= optimum, f"seed {seed} {shape.label}: {after} > {optimum}"
        applied += 1
        stronger += after > before
        tight += after == optimum
    return applied, stronger, tight


@pytest.mark.parametrize(("seed", "label", "old", "new", "optimum"), [
    (8, "tp=1,ep=1,b=1,S=2,d=3,z=0", 93_288_667, 97_335_667, 97_335_667),
    (8, "tp=1,ep=2,b=1,S=2,d=2,z=0", 38_724_000, 49_824_000, 49_824_000),
    (21, "tp=1,ep=2,b=1,S=2,d=2,z=0", 158_534_000, 176_536_000, 191_536_000)])
def test_short_run_bound_is_stronger_and_below_themain_optimum(seed, label, old, new,
                                                                 optimum):
    """Two-device nodes: a sync group on two channels needs a replica alone in its node at
    the stage, so both its boundaries leave the node.  The bound rises above the older ones,
    to the least main plan on two shapes (three replicas, one channel each without it; and
    e = 2, the expert group's channels, where B charges the divided sync, each node holding
    one replica of a stage, and a node run has at most two stages) and below it on one."""
    instance = _instance(seed)
    shape = _shape(instance, label)
    before, after, short = _bounds(instance, shape)
    assert short.applies
    assert (before, after) == (old, new)
    assert main_optimum(instance, shape) == optimum


@pytest.mark.parametrize(("seed", "old", "new", "optimum"), slow_unless([
    (0, 220_521_000, 225_026_000, 225_026_000),
    (5, 285_541_000, 447_550_000, 447_550_000),
    (9, 140_525_009, 177_150_000, 177_150_000)], lambda case: case[0] == 0))
def test_short_run_bound_counts_the_replicas_an_odd_sync_group_crowds(seed, old, new,
                                                                      optimum):
    """S = 2, d = 5 on 4-device nodes: two sync channels need every node the group touches
    to hold two replicas of the stage, and five replicas then need a node with three, so a
    replica keeps one stage in that node (⌊4 / 3⌋, where two replicas would leave it two).
    The bound reaches the least main plan on all three seeds (on seed 9 since a node run's
    length, q stages, joined the count search)."""
    instance = _odd_instance(seed)
    shape = _shape(instance, "tp=1,ep=1,b=1,S=2,d=5,z=0")
    before, after, short = _bounds(instance, shape)
    assert short.applies and short.per_domain == 4
    assert (before, after) == (old, new)
    assert main_optimum(instance, shape) == optimum


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(10, 22))
def test_short_run_bound_with_odd_sync_groups_never_exceeds_the_main_optimum(seed):
    """As above on more seeds (slow tier): at most the least main plan."""
    instance = _odd_instance(seed)
    shape = _shape(instance, "tp=1,ep=1,b=1,S=2,d=5,z=0")
    if not _bounded(instance, shape):
        return
    _, after, short = _bounds(instance, shape)
    if short.applies:
        assert after <= main_optimum(instance, shape)


@pytest.mark.parametrize("seed", [8, 21])
def test_short_run_bound_never_exceeds_themain_optimum(seed):
    """Every shape of at most three stages and 8 ranks where the bound applies: at most the
    least main plan, and strictly stronger than before on some."""
    _, stronger, _ = _checked(seed)
    assert stronger > 0


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(40))
def test_short_run_bound_never_exceeds_the_main_optimum_on_many_seeds(seed):
    """As above on 40 seeds (slow tier), without asking for a stronger case."""
    _checked(seed)


def test_short_run_bound_raises_the_bert_h100_1024_shape():
    """BERT-large on 1,024 H100s, S = 15, d = 64: a 2-block middle stage's sync (39.65 ms on
    one spine channel) needs a second channel to stay below that, so some replica keeps at
    most 4 of its stages in that node, with 1-block stages at both ends; 13 middle stages
    cannot then hold 24 blocks under the path τ, and the older bounds' 90.205 ms (the
    crowded-node bound's; the path bound prices every sync on eight channels) rises to
    91.591 ms, the value of the relaxation's best solution."""
    instance = load_instance(ROOT / "instances/paper/bert-large--nest-h100-spineleaf--1024.json")
    shape = _shape(instance, "tp=1,ep=1,b=1,S=15,d=64,z=0")
    before, after, short = _bounds(instance, shape)
    assert short.applies and short.per_domain == 8
    assert before == 90_204_766
    assert after == 91_590_508


def _assert_quarter_spine(model: str, label: str, per_domain: int, old: int, new: int):
    """The shape ``label`` of ``model`` on 1,024 H100s with a quarter of the spine (the
    sweep's point): the bounds before and with the short-run bound, and the latter at most
    the DP's plan of that shape (whose price the referee checks)."""
    base = load_instance(ROOT / f"instances/paper/{model}--nest-h100-spineleaf--1024.json")
    instance = build_points(base, [parse_axis("spine.bandwidth_Bps=0.25x", base)])[0].instance
    shape = _shape(instance, label)
    before, after, short = _bounds(instance, shape)
    assert short.applies and short.per_domain == per_domain
    assert (before, after) == (old, new)
    result = solve(instance, "dp")
    assert (result.plan.num_stages, result.plan.num_replicas) == (shape.num_stages, shape.dp)
    assert after <= result.objective_ticks


def test_short_run_bound_charges_the_divided_sync_on_mixtral_at_a_quarter_spine():
    """Mixtral-8x7B on 1,024 H100s with a quarter of the spine, S = 8, d = 32, e = 4: a node
    holds two stage replicas (q = 2), so every main plan syncs on at most two channels
    (σ_div 303.09 ms against the placement-free 150.51 ms), and a third channel would need a
    replica alone at its last stage, whose boundary then leaves the node (τ 84.62 ms against
    the path's 82.06 ms).  B now charges σ_div: the divided-channel bound's 3,503.29 ms rises
    to 3,603.33 ms, below the DP plan of the shape (3,609.53 ms)."""
    _assert_quarter_spine("mixtral-8x7b", "tp=1,ep=4,b=1,S=8,d=32,z=0", 2,
                          3_503_286_883, 3_603_332_686)


@pytest.mark.slow  # the DP at 1,024 devices of GPT3-175B: seconds
def test_short_run_bound_prices_the_odd_sync_of_gpt3_at_a_quarter_spine():
    """GPT3-175B on 1,024 H100s with a quarter of the spine, S = 30, d = 17, t = 2 (q = 4):
    the last stage keeps its predecessor in its node under the path τ (78.79 ms; 80.74 ms
    with that boundary off the node), so a node holds at most two of its replicas, and 17
    replicas at most two per node leave some node with one: one sync channel (1,026.2 ms
    for its four blocks).  The crowded-node bound's 21,788.60 ms rises to 22,296.90 ms,
    below the DP plan of the shape (22,300.10 ms)."""
    _assert_quarter_spine("gpt3-175b", "tp=2,ep=1,b=1,S=30,d=17,z=0", 4,
                          21_788_595_528, 22_296_899_756)


def test_an_odd_replica_count_shortens_the_window_on_the_bert_h100_512_shape():
    """BERT-large on 512 H100s, S = 10, d = 51: a 3-block stage's sync on one spine channel
    is more than the rest; two channels need every node holding the stage to hold two or
    more of its 51 replicas, each with its run through the stage, so a window of 3 or 4
    stages (at most two per node, and 51 is odd) is ruled out, only 2 remains, and 3-block
    stages cannot have one-block neighbours that close under the path τ.  The bound rises
    from 112.183 ms to the price of the DP's plan of this very shape (node-tail layout: its
    3-block stages alone in their nodes, one channel), so that plan is this shape's optimum."""
    import json

    from nest_cp.cost.evaluate import evaluate
    from nest_cp.io.readers import plan_from_dict

    instance = load_instance(ROOT / "instances/paper/bert-large--nest-h100-spineleaf--512.json")
    shape = _shape(instance, "tp=1,ep=1,b=1,S=10,d=51,z=0")
    _, after, short = _bounds(instance, shape)
    assert short.window(1) == 2 and short.per_domain // 2 == 4
    # the same bound with the window of any d, ⌊q / (k + 1)⌋, and none where no channel
    # more is needed (a window of S stages never binds), as before
    fast, geo = short.fast, short.geo
    tau = PackedPathBound(PathBound(shape, geo, fast, replica_arcs(shape.num_stages, geo))).tau
    any_count = ShortRunBound(shape, geo, fast)
    any_count.windows = np.array([shape.num_stages] + [any_count.per_domain // (k + 1) for k in
                                                       range(1, len(any_count.thin) + 1)])
    before = any_count.bound(tau, fast.bound(shape).sync)
    record = next(row for row in json.loads((ROOT / "reports/paper/certified.json").read_text())
                  ["instances"] if row["instance"] == instance.name)
    plan = plan_from_dict(record["plan"])
    assert (plan.num_stages, plan.num_replicas) == (10, 51)
    price = evaluate(instance, plan, NetworkModel(instance.cluster)).objective_ticks
    assert before < after == price
