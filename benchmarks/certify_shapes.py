"""Cross-check every per-shape bound of ``verify --certify-full`` against exhaustive search.

`python -m benchmarks.certify_shapes [--first-seed S] [--count N] [--budget-s T]
[--context] [--out FILE]` draws seeded random hierarchies of 4-8 devices (tier-0 domains of 2-4
devices, so sync groups of four or more that leave a node can run two or more ring
channels, cost model §5 a), and for every shape whose full space exhaustive search can
enumerate compares the placement relaxation's proven value
(:class:`nest_cp.solvers.certify.relax.Relaxation`, no cutoff, one CP-SAT worker), the
path bound, the packed path bound (:mod:`nest_cp.solvers.certify.packed`), the shared-split
bound (:mod:`nest_cp.solvers.certify.shared`, its τ raising the packed one), the
crowded-node bound (:mod:`nest_cp.solvers.certify.crowded`; with the packed path τ as the
main plans' bound, and with the cheap τ on its own, which holds for every plan) and the
placement-free bound with the least objective over every plan of
the shape (every split, recompute vector and injective placement up to pairwise-tier
patterns, each plan priced by the evaluator), and the raised bound (the larger of the
bounds module's and :mod:`nest_cp.solvers.certify.raised`'s) with the least objective
over the shape's raised plans alone (the raised bound includes the crowded-node bound
with its own τ, as the search takes it).  A bound above the optimum is a violation.  The
whole-instance certificate is checked by the soak (:mod:`nest_cp.verify.soak`); this is
the per-shape check, where a bound that is wrong on a shape the certificate's interval
hides is still caught.  Not part of ``make bench``.

With ``--context`` every seed draws instead a context-parallel instance
(:func:`nest_cp.harness.generators.random_cp_instance`: widths c in {1, 2, 4} beside t
or e, p2p or a2a, 4-8 devices), whose c > 1 shapes the certificate bounds by the
placement-free bound alone (:func:`nest_cp.solvers.certify.geometry.geometry`).
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import json
import math
import random
import sys
import time
from pathlib import Path

from nest_cp.cost.evaluate import evaluate
from nest_cp.harness.generators import random_cp_instance, random_instance
from nest_cp.model.instance import CollectiveGroup, IntraConfig, Optimizer, RecomputeMode
from nest_cp.model.network import NetworkModel
from nest_cp.model.plan import Plan, Stage
from nest_cp.solvers.certify.bounds import FastBounds
from nest_cp.solvers.certify.chain import LayerPrices, network_tiers
from nest_cp.solvers.certify.crowded import CrowdedBound
from nest_cp.solvers.certify.geometry import geometry, replica_arcs
from nest_cp.solvers.certify.packed import PackedPathBound
from nest_cp.solvers.certify.paths import PathBound
from nest_cp.solvers.certify.raised import RaisedPathBound
from nest_cp.solvers.certify.relax import Relaxation
from nest_cp.solvers.certify.shared import SharedSplitBound
from nest_cp.solvers.certify.split import Catalogue, block_chain, shapes

HIERARCHIES = ((2, 4), (2, 2, 2), (4, 2), (2, 3), (3, 2), (2, 2), (4, 2), (2, 4))
MEGATRON = Optimizer(name="adam", weight_bytes=2, grad_bytes=4, state_bytes=12)
MAX_PATTERNS = 3000


def _instance(seed: int):
    rng = random.Random(seed)
    tiers = rng.choice(HIERARCHIES)
    full = math.prod(tiers)
    devices = full if rng.random() < 0.75 else rng.randrange(max(4, full - 3), full + 1)
    configs = (IntraConfig(),) + ((IntraConfig(2, 1), IntraConfig(1, 2))
                                  if rng.random() < 0.4 else ())
    zero = rng.choice(((0,), (0, 1), (0, 3), (0, 1, 2, 3)))
    instance = random_instance(seed, num_layers=rng.choice((2, 3, 3, 4)), tier_sizes=tiers,
                               configs=configs, zero_stages=zero,
                               recompute_modes=(RecomputeMode.NONE, RecomputeMode.FULL),
                               global_batch=rng.choice((4, 8, 16)),
                               comm_scale=rng.choice((1, 5, 20, 50)), num_devices=devices,
                               identical_blocks=rng.random() < 0.3)
    if rng.random() < 0.5:
        instance = dataclasses.replace(instance, training=dataclasses.replace(
            instance.training, optimizer=MEGATRON,
            overlap_grad_reduce=rng.random() < 0.5, overlap_param_gather=rng.random() < 0.3))
    return instance


CONTEXT_CONFIGS = ((IntraConfig(), IntraConfig(cp=2)), (IntraConfig(cp=2), IntraConfig(cp=4)),
                   (IntraConfig(), IntraConfig(cp=2), IntraConfig(tp=2)),
                   (IntraConfig(cp=2), IntraConfig(cp=2, ep=2), IntraConfig(ep=2)))


def _context_instance(seed: int):
    """A seeded context-parallel instance of 4-8 devices (``--context``)."""
    rng = random.Random(f"context-{seed}")
    tiers = rng.choice([t for t in HIERARCHIES if math.prod(t) <= 8])
    configs = rng.choice(CONTEXT_CONFIGS)
    if any(config.devices > math.prod(tiers) for config in configs):
        configs = configs[:1]
    return random_cp_instance(
        seed, configs=configs, num_layers=rng.choice((2, 3)), tier_sizes=tiers,
        cp_comm=rng.choice(("p2p", "a2a")), zero_stages=rng.choice(((0,), (0, 1), (0, 3))),
        global_batch=rng.choice((2, 4, 8)), hbm_bytes=rng.choice((12, 20, 40)) * 10**9,
        comm_scale=rng.choice((1, 10, 50)), identical_blocks=rng.random() < 0.3)


def _patterns(network: NetworkModel, slots: int, cache: dict) -> list[tuple[int, ...]]:
    """One injective placement per pattern of pairwise tiers (tests/exhaustive.py)."""
    key = (id(network), slots)
    if key not in cache:
        seen, found = set(), []
        for devices in itertools.permutations(range(network.num_devices), slots):
            pattern = tuple(network.tier_of((a, b)) for a, b in itertools.combinations(devices, 2))
            if pattern not in seen:
                seen.add(pattern)
                found.append(devices)
        cache[key] = found
    return cache[key]


def _raised_test(instance, network, shape):
    """Whether a placement is *raised* (geometry): some intra group of a present family
    lies above its innermost admitting tier k_min."""
    prices = LayerPrices(instance, shape.config, shape.microbatch, network_tiers(network))
    geo = geometry(prices)
    if geo is None:
        return lambda placement: False
    tp, ep = shape.config.tp, shape.config.ep
    groups = {CollectiveGroup.TP: [[i + tp * k for i in range(tp)] for k in range(ep)],
              CollectiveGroup.EP: [[i + tp * k for k in range(ep)] for i in range(tp)]}
    checks = [(lowest, group) for family, lowest in geo.k_min.items()
              for group in groups[family]]
    return lambda placement: any(
        network.tier_of(devices[j] for j in group) > lowest
        for lowest, group in checks for stage in placement for devices in stage)


def _optimum(instance, network, shape, placements) -> tuple[float, float]:
    """The least objective over every plan of the shape, and over its raised plans."""
    config, best, best_raised = shape.config, math.inf, math.inf
    raised = _raised_test(instance, network, shape)
    layers = instance.workload.num_layers
    for cuts in itertools.combinations(range(1, layers), shape.num_stages - 1):
        edges = (0, *cuts, layers)
        for modes in itertools.product(instance.training.recompute_modes,
                                       repeat=shape.num_stages):
            stages = tuple(Stage(edges[s], edges[s + 1] - 1, modes[s])
                           for s in range(shape.num_stages))
            for devices in placements:
                it = iter(devices)
                placement = tuple(tuple(tuple(next(it) for _ in range(config.devices))
                                        for _ in range(shape.dp))
                                  for _ in range(shape.num_stages))
                evaluation = evaluate(instance, Plan(config, shape.microbatch, shape.zero,
                                                     shape.dp, stages, placement), network)
                if evaluation.feasible:
                    best = min(best, evaluation.objective_ticks)
                    if raised(placement):
                        best_raised = min(best_raised, evaluation.objective_ticks)
    return best, best_raised


def _bounds(instance, network, shape) -> dict:
    prices = LayerPrices(instance, shape.config, shape.microbatch, network_tiers(network))
    fast = FastBounds(instance, prices, block_chain(prices))
    base = fast.bound(shape)
    out = {"fast": base.total, "path": -math.inf, "packed": -math.inf, "shared": -math.inf,
           "relax": -math.inf,
           "raised": math.inf, "channels": False, "crowded": -math.inf,
           "crowded_all": -math.inf}
    geo = geometry(prices)
    if geo is None or math.isinf(base.total):
        return out
    arcs = replica_arcs(shape.num_stages, geo)
    if fast.chain is not None:
        path = PathBound(shape, geo, fast, arcs)
        out["path"] = shape.rounds * path.tau + base.sync
        packed = PackedPathBound(path).tau
        out["packed"] = shape.rounds * packed + base.sync
        out["shared"] = shape.rounds * SharedSplitBound(path, packed).tau + base.sync
    relaxation = Relaxation(Catalogue(instance, prices, shape, fast.chain), geo, arcs)
    result = relaxation.solve(10.0)
    out["relax"] = result.bound
    out["relax_status"] = result.status
    out["raised"] = fast.raised(shape, geo.k_min)
    if fast.chain is not None and math.isfinite(out["raised"]):
        path = RaisedPathBound(shape, geo, fast, arcs)
        out["raised"] = max(out["raised"], shape.rounds * path.tau + base.sync)
    if fast.chain is not None:
        # the crowded-node bound: with the cheap τ (every plan), the path τ (main plans) and
        # the raised bound's τ (raised plans), as the search takes it
        crowded = CrowdedBound(shape, geo, fast)
        out["crowded_all"] = crowded.bound(base.tau)
        out["crowded"] = crowded.bound((out["packed"] - base.sync) // shape.rounds) \
            if math.isfinite(out["packed"]) else -math.inf
        if math.isfinite(out["raised"]):
            out["raised"] = max(out["raised"], crowded.bound(
                (out["raised"] - base.sync) // shape.rounds))
    sizes = [shape.dp * shape.config.ep, shape.dp]
    out["channels"] = any(t.channel_cap(g) >= 2 for t in geo.tiers for g in sizes)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--first-seed", type=int, default=0)
    parser.add_argument("--count", type=int, default=100)
    parser.add_argument("--budget-s", type=float, default=600.0)
    parser.add_argument("--context", action="store_true",
                        help="draw context-parallel instances (c in {1, 2, 4})")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    began = time.monotonic()
    totals = {"seeds": 0, "comparisons": 0, "context_comparisons": 0, "with_channels": 0,
              "violations": [],
              "relax_tight": 0, "relax_above_fast_and_path": 0, "packed_above_path": 0,
              "crowded_above_packed": 0, "shared_above_packed": 0}
    for seed in range(args.first_seed, args.first_seed + args.count):
        if time.monotonic() - began > args.budget_s:
            break
        instance = _context_instance(seed) if args.context else _instance(seed)
        network = NetworkModel(instance.cluster)
        cache: dict = {}
        totals["seeds"] += 1
        for shape in shapes(instance):
            slots = shape.config.devices * shape.num_stages * shape.dp
            if slots > instance.cluster.num_devices or math.perm(
                    instance.cluster.num_devices, slots) > 50_000:
                continue
            placements = _patterns(network, slots, cache)
            if len(placements) > MAX_PATTERNS:
                continue
            bounds = _bounds(instance, network, shape)
            optimum, raised_optimum = _optimum(instance, network, shape, placements)
            totals["comparisons"] += 1
            totals["context_comparisons"] += shape.config.cp > 1
            if bounds["raised"] > raised_optimum:  # the raised bounds hold for raised plans
                totals["violations"].append({"seed": seed, "shape": shape.label,
                                             "bound": "raised", "value": bounds["raised"],
                                             "optimum": raised_optimum})
                print(f"VIOLATION seed {seed} {shape.label} raised {bounds['raised']} > "
                      f"{raised_optimum} (raised plans)", flush=True)
            totals["with_channels"] += bounds["channels"]
            if math.isfinite(optimum):
                totals["relax_tight"] += min(bounds["relax"], bounds["raised"]) == optimum
                totals["relax_above_fast_and_path"] += bounds["relax"] > max(bounds["fast"],
                                                                              bounds["path"])
            totals["packed_above_path"] += bounds["packed"] > bounds["path"]
            totals["crowded_above_packed"] += bounds["crowded"] > bounds["packed"]
            totals["shared_above_packed"] += bounds["shared"] > bounds["packed"]
            if bounds["crowded_all"] > optimum:  # with the cheap τ it holds for every plan
                totals["violations"].append({"seed": seed, "shape": shape.label,
                                             "bound": "crowded_all",
                                             "value": bounds["crowded_all"],
                                             "optimum": optimum})
                print(f"VIOLATION seed {seed} {shape.label} crowded_all "
                      f"{bounds['crowded_all']} > {optimum}", flush=True)
            for name in ("fast", "path", "packed", "shared", "crowded", "relax"):
                # the main bounds hold for main plans only: compare min(main, raised)
                value = min(bounds[name], bounds["raised"])
                if value > optimum:
                    totals["violations"].append({"seed": seed, "shape": shape.label,
                                                 "bound": name, "value": value,
                                                 "optimum": optimum})
                    print(f"VIOLATION seed {seed} {shape.label} {name} {value} > {optimum}",
                          flush=True)
        print(f"seed {seed}: {totals['comparisons']} comparisons, "
              f"{len(totals['violations'])} violations", file=sys.stderr, flush=True)
    totals["wall_time_s"] = round(time.monotonic() - began, 1)
    text = json.dumps(totals, indent=1, default=str)
    print(text)
    if args.out is not None:
        args.out.write_text(text + "\n")


if __name__ == "__main__":
    main()
