"""Test helpers: a shape's exhaustive optimum and the bound the full-space certificate takes
for it, every part computed in full."""

from __future__ import annotations

import itertools
import math
import random

from nest_cp.cost.evaluate import evaluate
from nest_cp.harness.generators import random_instance
from nest_cp.model.instance import CollectiveGroup, Instance, IntraConfig, RecomputeMode
from nest_cp.model.network import NetworkModel
from nest_cp.model.plan import Plan, Stage
from nest_cp.solvers.certify.bounds import FastBounds
from nest_cp.solvers.certify.chain import LayerPrices, network_tiers
from nest_cp.solvers.certify.crowded import CrowdedBound
from nest_cp.solvers.certify.divided import DividedBound
from nest_cp.solvers.certify.geometry import geometry, replica_arcs
from nest_cp.solvers.certify.packed import PackedPathBound
from nest_cp.solvers.certify.paths import PathBound
from nest_cp.solvers.certify.raised import RaisedPathBound
from nest_cp.solvers.certify.relax import Relaxation
from nest_cp.solvers.certify.shared import SharedSplitBound
from nest_cp.solvers.certify.shortrun import ShortRunBound
from nest_cp.solvers.certify.split import Catalogue, block_chain
from nest_cp.solvers.certify.syncpath import SyncPathBound

# Work units (CP-SAT deterministic time) per relaxation, as verify --certify-full's default:
# the clock never decides a test's answer, so a loaded machine gives the same numbers.
WORK = 20


def _splits(num_layers: int, num_stages: int):
    for cuts in itertools.combinations(range(1, num_layers), num_stages - 1):
        bounds = (0, *cuts, num_layers)
        yield [(bounds[i], bounds[i + 1] - 1) for i in range(num_stages)]


def _placements(network: NetworkModel, slots: int):
    """One injective placement per pattern of pairwise tiers (equal patterns cost the same:
    a group's tier and its ring channels, cost model §5 a, are functions of its pairs')."""
    seen = set()
    for devices in itertools.permutations(range(network.num_devices), slots):
        key = tuple(network.tier_of((a, b)) for a, b in itertools.combinations(devices, 2))
        if key not in seen:
            seen.add(key)
            yield devices


def canonical_placements(sizes: tuple[int, ...], slots: int):
    """One device tuple per class of placements of ``slots`` ranks on a hierarchy of full
    domains (tier sizes ``sizes``, innermost first) under its symmetries (permuting the
    sub-domains of a domain, the devices of a node): each rank goes to a sub-domain already
    used or the next unused one at every tier, and the next free device of its node.  A
    plan's price depends only on which ranks share each domain (every pair's tier, every
    group's channels), which the symmetries keep, so these cover every placement."""
    def place(prefix: tuple, used: dict, count: int):
        if count == slots:
            yield prefix
            return
        yield from descend((), used, prefix, count, len(sizes) - 1)

    def descend(path: tuple, used: dict, prefix: tuple, count: int, tier: int):
        if tier < 0:
            index = used.get(path[:-1], 0)  # the next free device of the node
            device, radix = 0, 1
            for level, position in enumerate(reversed(path[:-1] + (index,))):
                device += position * radix
                radix *= sizes[level]
            grown = dict(used)
            for depth in range(len(path)):
                grown[path[:depth]] = grown.get(path[:depth], 0) + 1
            yield from place(prefix + (device,), grown, count + 1)
            return
        capacity = math.prod(sizes[:tier])
        opened = sum(1 for key in used if len(key) == len(path) + 1 and key[:-1] == path)
        for child in range(min(opened + 1, sizes[tier])):
            if used.get(path + (child,), 0) < capacity:
                yield from descend(path + (child,), used, prefix, count, tier - 1)

    yield from place((), {}, 0)


def shape_optimum(instance: Instance, shape, placements=None, only=None) -> float:
    """Least objective over every plan of the shape (inf when none fits): every split
    (into S·v chunks, ``shape.virtual`` v, default 1), recompute vector and placement of
    ``placements`` (device tuples, stage-major, then replica, then intra-stage rank; default
    one per pattern of pairwise tiers) for which ``only(placement)`` holds (default: every
    one)."""
    network = NetworkModel(instance.cluster)
    config = shape.config
    virtual = getattr(shape, "virtual", 1)
    slots = config.devices * shape.num_stages * shape.dp
    modes = instance.training.recompute_modes
    best = math.inf
    placements = list(_placements(network, slots) if placements is None else placements)
    for split in _splits(instance.workload.num_layers, shape.num_stages * virtual):
        for mode_vector in itertools.product(modes, repeat=shape.num_stages):
            stages = tuple(Stage(first, last, mode_vector[chunk % shape.num_stages])
                           for chunk, (first, last) in enumerate(split))
            for devices in placements:
                it = iter(devices)
                placement = tuple(tuple(tuple(next(it) for _ in range(config.devices))
                                        for _ in range(shape.dp))
                                  for _ in range(shape.num_stages))
                if only is not None and not only(placement):
                    continue
                plan = Plan(config, shape.microbatch, shape.zero, shape.dp, stages, placement,
                            virtual)
                evaluation = evaluate(instance, plan, network)
                if evaluation.feasible:
                    best = min(best, evaluation.objective_ticks)
    return best


def raised_filter(instance: Instance, shape):
    """A test of a placement: whether some intra group of a present family lies above its
    innermost admitting tier k_min (geometry: the plan is *raised*)."""
    network = NetworkModel(instance.cluster)
    prices = LayerPrices(instance, shape.config, shape.microbatch, network_tiers(network))
    k_min = geometry(prices).k_min
    tp, ep = shape.config.tp, shape.config.ep
    groups = {CollectiveGroup.TP: [[i + tp * k for i in range(tp)] for k in range(ep)],
              CollectiveGroup.EP: [[i + tp * k for k in range(ep)] for i in range(tp)]}
    checks = [(lowest, group) for family, lowest in k_min.items() for group in groups[family]]

    def raised(placement) -> bool:
        return any(network.tier_of(devices[j] for j in group) > lowest
                   for lowest, group in checks for stage in placement for devices in stage)
    return raised


def raised_bound(instance: Instance, shape) -> float:
    """The raised bound certify_full takes for the shape: the larger of the bounds module's
    and the raised path bound (block chains)."""
    tiers = network_tiers(NetworkModel(instance.cluster))
    prices = LayerPrices(instance, shape.config, shape.microbatch, tiers)
    fast = FastBounds(instance, prices, block_chain(prices))
    geo = geometry(prices)
    value = fast.raised(shape, geo.k_min)
    if fast.chain is not None and math.isfinite(value):
        path = RaisedPathBound(shape, geo, fast, replica_arcs(shape.num_stages, geo))
        sync = fast.bound(shape).sync
        value = max(value, shape.rounds * path.tau + sync)
        tau_lb = (value - sync) // shape.rounds
        value = max(value, CrowdedBound(shape, geo, fast).bound(tau_lb),
                    DividedBound(shape, geo, fast).bound(tau_lb))
    return value


def shape_bound(instance: Instance, shape) -> float:
    """The bound certify_full uses for one shape, every part computed in full (no cutoff)."""
    tiers = network_tiers(NetworkModel(instance.cluster))
    prices = LayerPrices(instance, shape.config, shape.microbatch, tiers)
    fast = FastBounds(instance, prices, block_chain(prices))
    base = fast.bound(shape)
    geo = geometry(prices)
    if geo is None or math.isinf(base.total):
        return base.total
    main = base.total
    arcs = replica_arcs(shape.num_stages, geo)
    if fast.chain is not None:
        path = PathBound(shape, geo, fast, arcs)
        # the packed and shared-split bounds raise the path bound's τ for every main plan
        tau = SharedSplitBound(path, PackedPathBound(path).tau).tau
        main = max(main, shape.rounds * tau + base.sync,
                   CrowdedBound(shape, geo, fast).bound(tau),
                   DividedBound(shape, geo, fast).bound(tau),
                   SyncPathBound(shape, geo, fast, arcs).bound(tau, base.sync),
                   ShortRunBound(shape, geo, fast).bound(tau, base.sync))
    catalogue = Catalogue(instance, prices, shape, fast.chain)
    outcome = Relaxation(catalogue, geo, arcs).solve(3600.0, work_limit=WORK)
    main = max(main, outcome.bound)
    return min(main, raised_bound(instance, shape))


def tally_shape_bounds(instance: Instance, shape_list, label: str) -> tuple[int, int]:
    """Assert each shape's certify bound is at most its exhaustive optimum; (how many are
    tight, how many strictly below) among the shapes with a finite optimum."""
    tight = loose = 0
    for shape in shape_list:
        bound, optimum = shape_bound(instance, shape), shape_optimum(instance, shape)
        assert bound <= optimum, f"{label} {shape.label}: bound {bound} > optimum {optimum}"
        if math.isfinite(optimum):
            tight += bound == optimum
            loose += bound < optimum
    return tight, loose


def identical_blocks_instance(seed: int, tier_choices: tuple[tuple[int, ...], ...]) -> Instance:
    """A random instance of identical blocks, t = 1 and e in {1, 2}, on one of
    ``tier_choices`` (drawn by ``seed``, as every other choice): the small hierarchies the
    threshold bounds' tests search exhaustively."""
    rng = random.Random(seed)
    tiers = rng.choice(tier_choices)
    return random_instance(seed, num_layers=rng.choice((3, 4, 5)), tier_sizes=tiers,
                           configs=rng.choice(((IntraConfig(),),
                                               (IntraConfig(), IntraConfig(1, 2)))),
                           recompute_modes=(RecomputeMode.NONE,),
                           global_batch=rng.choice((4, 8, 16)),
                           comm_scale=rng.choice((1, 5, 20, 50)), identical_blocks=True,
                           zero_stages=rng.choice(((0,), (0, 1))))


def main_optimum(instance: Instance, shape) -> float:
    """The least main plan of the shape (every canonical placement but the raised ones,
    exhaustive search): what the bounds of the main plans must stay below."""
    sizes = tuple(tier.size for tier in instance.cluster.network.tiers)
    placements = list(canonical_placements(sizes, shape.config.devices * shape.num_stages
                                           * shape.dp))
    raised = raised_filter(instance, shape)
    return shape_optimum(instance, shape, placements, only=lambda p: not raised(p))
