"""The exact backends' per-sub-problem communication bounds against exhaustive search.

Every sub-problem's bound (nest_cp.solvers.exact.bounds.communication_lower_bound: the
larger of the cheapest-path bound and the per-rank node-counting bound of
nest_cp.solvers.exact.rank_bounds) must be at most the least full-space plan of its
shape, which brute force finds by evaluating every plan.
"""

from __future__ import annotations

import dataclasses

import pytest
from tiers import SLOW, slow_unless

from nest_cp.harness.generators import random_instance
from nest_cp.model.instance import IntraConfig, Optimizer, RecomputeMode
from nest_cp.model.network import NetworkModel
from nest_cp.solvers.brute import least_per_shape
from nest_cp.solvers.exact import enumerate_subproblems
from nest_cp.solvers.exact.bounds import cheapest_path_bound, communication_lower_bound
from nest_cp.solvers.exact.pricing import ChunkPricing
from nest_cp.solvers.exact.rank_bounds import mate_paths, rank_lower_bound

MEGATRON = Optimizer(2, 4, 12)


CONFIGS = (IntraConfig(), IntraConfig(2, 1))


def _instance(seed: int, tiers: tuple[int, ...], num_devices: int, v3: bool):
    """A communication-heavy random instance; ``v3``: ZeRO 0-3 under 2/4/12, v in {1, 2},
    both overlap flags and every recompute mode (cost model v3's choices)."""
    modes = tuple(RecomputeMode) if v3 else (RecomputeMode.NONE, RecomputeMode.FULL)
    instance = random_instance(seed, num_layers=3, tier_sizes=tiers, num_devices=num_devices,
                               configs=CONFIGS, comm_scale=30, global_batch=4,
                               recompute_modes=modes, virtual_stages=(1, 2) if v3 else (1,),
                               overlap_grad_reduce=v3)
    if not v3:
        return instance
    return dataclasses.replace(instance, training=dataclasses.replace(
        instance.training, zero_stages=(0, 1, 3), overlap_param_gather=True,
        optimizer=MEGATRON))


CASES = [  # (seed, tier sizes, devices, v3 choices)
    (0, (2, 2), 4, True),
    (1, (2, 2), 4, False),
    (2, (2, 2, 2), 6, False),
    (3, (2, 2, 2), 5, True),
    (4, (1, 2, 2), 4, True),
    (5, (4, 2), 5, True),
]


def _bounds(instance):
    """(sub-problem, cheapest-path bound, rank bound, the driver's bound) for every
    sub-problem of the instance."""
    network = NetworkModel(instance.cluster)
    training = instance.training
    flags = (training.overlap_grad_reduce, None, training.overlap_param_gather)
    rows = []
    for sub in enumerate_subproblems(instance):
        if not sub.feasible:
            continue
        pricing = ChunkPricing(instance, sub)
        rows.append((sub, cheapest_path_bound(sub, pricing, network, *flags),
                     rank_lower_bound(sub, pricing, network, *flags),
                     communication_lower_bound(sub, pricing, network, *flags)))
    return rows


@pytest.mark.parametrize(("seed", "tiers", "devices", "v3"),
                         slow_unless(CASES, lambda case: case[0] in (0, 1, 4)))
def test_every_subproblem_bound_is_at_most_its_least_plan(seed, tiers, devices, v3):
    """On seeded 2- and 3-tier instances (with and without the v3 choices) every
    sub-problem's rank bound, and the driver's bound, is at most the least full-space plan
    of the sub-problem's shape (brute force); a shape without a feasible plan bounds
    nothing."""
    instance = _instance(seed, tiers, devices, v3)
    least = least_per_shape(instance)
    checked = 0
    for sub, _, rank, combined in _bounds(instance):
        optimum = least.get(sub.shape_key)
        if optimum is None:
            continue
        assert rank <= optimum, sub.label
        assert combined <= optimum, sub.label
        checked += 1
    assert checked


@SLOW  # the fast tier checks the rank bound on three tiers with seed 4
def test_rank_bound_is_tight_and_sharper_where_pipeline_and_sync_compete():
    """Two-device nodes (3-tier, seed 2): the rank bound is above the cheapest-path bound on
    some sub-problem (a stage cannot keep its pipeline partners and its data-parallel
    partner all in its node), equals the least plan of some sub-problem (tight), and is
    strictly below it on another (not tight)."""
    instance = _instance(2, (2, 2, 2), 6, False)
    least = least_per_shape(instance)
    sharper = tight = loose = 0
    for sub, cheapest, rank, _ in _bounds(instance):
        optimum = least.get(sub.shape_key)
        if optimum is None:
            continue
        sharper += rank > cheapest
        tight += rank == optimum
        loose += rank < optimum
    assert sharper and tight and loose


def test_mate_paths_of_a_pair():
    """A pair that may have its partner in the node may run on tier 0 or on each outer
    tier's own path (one channel); one that may not never runs on tier 0."""
    instance = _instance(0, (2, 2, 2), 8, False)
    network = NetworkModel(instance.cluster)
    outer = [network.channel_path(1, 1), network.channel_path(2, 1)]
    assert mate_paths(network, 2, 1) == [network.channel_path(0, 1), *outer]
    assert mate_paths(network, 2, 0) == outer
    assert mate_paths(network, 1, 0) == []
