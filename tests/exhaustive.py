"""Test helpers: a shape's exhaustive optimum and the bound the full-space certificate takes
for it, every part computed in full."""

from __future__ import annotations

import itertools
import math

from nest_cp.cost.evaluate import evaluate
from nest_cp.model.instance import Instance
from nest_cp.model.network import NetworkModel
from nest_cp.model.plan import Plan, Stage
from nest_cp.solvers.certify.bounds import FastBounds
from nest_cp.solvers.certify.chain import LayerPrices, network_tiers
from nest_cp.solvers.certify.geometry import geometry, replica_arcs
from nest_cp.solvers.certify.paths import PathBound
from nest_cp.solvers.certify.relax import Relaxation
from nest_cp.solvers.certify.split import Catalogue, block_chain


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


def shape_optimum(instance: Instance, shape) -> float:
    """Least objective over every plan of the shape (inf when none fits)."""
    network = NetworkModel(instance.cluster)
    config = shape.config
    slots = config.devices * shape.num_stages * shape.dp
    modes = instance.training.recompute_modes
    best = math.inf
    placements = list(_placements(network, slots))
    for split in _splits(instance.workload.num_layers, shape.num_stages):
        for mode_vector in itertools.product(modes, repeat=shape.num_stages):
            stages = tuple(Stage(first, last, mode)
                           for (first, last), mode in zip(split, mode_vector, strict=True))
            for devices in placements:
                it = iter(devices)
                placement = tuple(tuple(tuple(next(it) for _ in range(config.devices))
                                        for _ in range(shape.dp))
                                  for _ in range(shape.num_stages))
                plan = Plan(config, shape.microbatch, shape.zero, shape.dp, stages, placement)
                evaluation = evaluate(instance, plan, network)
                if evaluation.feasible:
                    best = min(best, evaluation.objective_ticks)
    return best


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
        main = max(main, shape.rounds * PathBound(shape, geo, fast, arcs).tau + base.sync)
    catalogue = Catalogue(instance, prices, shape, fast.chain)
    outcome = Relaxation(catalogue, geo, arcs).solve(30.0)
    main = max(main, outcome.bound)
    return min(main, fast.raised(shape, geo.k_min))
