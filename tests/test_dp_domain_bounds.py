"""The planner's domain bound (issue 35: a plan too big for one pod of Llama 3's RoCE
network crosses its 1:7 tier somewhere) against exhaustive search over every injective
placement, on a small hierarchy whose top tier is the slowest."""

from __future__ import annotations

import dataclasses
import math
from types import SimpleNamespace

import numpy as np
import pytest
from dp_shapes import v1_shapes
from exhaustive import canonical_placements, shape_optimum
from tiers import SLOW, first_fast
from unbounded import same_optimum_unbounded

from nest_cp.cost import terms as cost
from nest_cp.dp import planner
from nest_cp.dp.compose import Shape
from nest_cp.dp.node_bounds import capped_group_paths
from nest_cp.harness.generators import random_instance
from nest_cp.model.instance import HierarchicalNetwork, IntraConfig, RecomputeMode, Tier
from nest_cp.model.network import NetworkModel
from nest_cp.model.result import SolveOptions

TIERS = (2, 2, 2)  # nodes of 2, domains of 4 (tier 1), 8 devices; bandwidth falls outwards


def _instance(seed: int, overlap: bool, num_layers: int = 3, virtual: int = 1,
              tiers: tuple[int, ...] = TIERS):
    instance = random_instance(seed, num_layers=num_layers, tier_sizes=tiers,
                               configs=(IntraConfig(), IntraConfig(tp=2)), zero_stages=(0, 1, 3),
                               global_batch=8, comm_scale=50,
                               recompute_modes=(RecomputeMode.NONE,),
                               identical_blocks=virtual > 1, virtual_stages=(virtual,))
    return dataclasses.replace(instance, training=dataclasses.replace(
        instance.training, overlap_grad_reduce=overlap, overlap_param_gather=overlap))


def _search(instance):
    """A search whose incumbent (0 ticks, the least key) makes every part of the domain
    bound priced: none may beat it."""
    search = planner._Search(instance, SolveOptions(), ())
    search.best.objective = 0
    return search


def _check(instance, search, shapes, zeros=(0, 1, 3), tiers=TIERS,
           bound_of=None) -> tuple[int, int]:
    """Assert the domain bound (or ``bound_of`` (choice index, shape, chunk bound)) is at
    most the shape's exhaustive optimum for every shape of a ZeRO stage in ``zeros`` it
    prices; return how many it raised above the fastest-path and case-split bound and on
    how many it equals the optimum."""
    raised = tight = 0
    for choice_index, shape, exhaustive_shape in shapes:
        if shape.zero not in zeros:
            continue
        chunk = search._chunk_time_bounds(choice_index)[shape.num_chunks]
        bound = search._domain_bound(shape, chunk, (choice_index,), exact=True) \
            if bound_of is None else bound_of(choice_index, shape, chunk)
        if bound == 0:
            continue
        optimum = shape_optimum(instance, exhaustive_shape, canonical_placements(
            tiers, shape.table.config.devices * shape.num_stages * shape.dp))
        if optimum == math.inf:
            continue
        assert bound <= optimum, (shape, bound, optimum)
        raised += bound > search._shape_bound(shape, chunk)
        tight += bound == optimum
    return raised, tight


# seed 1 with t = 2 and z = 1 in the fast tier (about 1 s); every configuration, ZeRO stage
# and both overlap settings, over further seeds, in the slow one
@pytest.mark.parametrize("seed, overlap, fast", [(1, True, True)] + [
    pytest.param(seed, overlap, False, marks=SLOW) for seed in range(3)
    for overlap in (False, True)])
def test_domain_bound_never_exceeds_the_exhaustive_optimum(seed, overlap, fast):
    """For every v = 1 shape the domain bound prices (the plan leaves a 4-device domain),
    it is at most the least objective over every split and every injective placement; it
    rises above the other shape bounds, and is tight, on some."""
    instance = _instance(seed, overlap)
    search = _search(instance)
    raised, tight = _check(instance, search, v1_shapes(
        search, instance, keep=lambda config: config.tp == 2 or not fast),
        zeros=(1,) if fast else (0, 1, 3))
    assert raised and tight


def _slots(search, shape) -> int:
    """q: how many stages of the shape a tier-1 domain may hold whole."""
    return search.network.cluster.network.domain_sizes()[1] // (shape.table.config.devices
                                                                  * shape.dp)


# seed 0 with t = d = 1 (S = 5 on domains of 4: q = 4, a run of at most four stages) in the
# fast tier (well under 1 s); q = 2 (t = 2 or d = 2) too, further seeds and a hierarchy of
# three-device domains (q = 3 with S = 4 .. 6) in the slow one
@pytest.mark.parametrize("seed, tiers, num_layers, fast", [(0, TIERS, 5, True)] + [
    pytest.param(seed, tiers, num_layers, False, marks=SLOW) for seed in range(3)
    for tiers, num_layers in ((TIERS, 5), ((1, 3, 2), 6))])
def test_domain_bound_with_several_stages_to_a_domain(seed, tiers, num_layers, fast):
    """v = 1 where a domain may hold q >= 2 whole stages (the stage-state DP over runs of
    joined whole stages of :meth:`_Search._domain_stagewise`): the domain bound is at most
    the exhaustive optimum, rises above the other shape bounds on some shapes and is tight
    on some (fast: q >= 3 only, each ZeRO stage)."""
    instance = _instance(seed, overlap=True, num_layers=num_layers, tiers=tiers)
    search = _search(instance)
    assert search._domain_tiers() == (1,)
    least = 3 if fast else 2
    raised, tight = _check(instance, search, (
        found for found in v1_shapes(search, instance)
        if _slots(search, found[1]) >= least), tiers=tiers)
    assert raised
    if tiers == TIERS:
        assert tight


# seed 0 on domains of 4 (q = 1 .. 4) in the fast tier; further seeds and three-device
# domains in the slow one
@pytest.mark.parametrize("seed, tiers, num_layers", [(0, TIERS, 5)] + [
    pytest.param(seed, tiers, num_layers, marks=SLOW) for seed in range(1, 3)
    for tiers, num_layers in ((TIERS, 5), ((1, 3, 2), 6))])
def test_domain_stagewise_threshold_decides_the_exact_bound(seed, tiers, num_layers,
                                                            monkeypatch):
    """With a threshold t, :meth:`_Search._domain_stagewise` (the domain bound's decision
    form) returns at least t exactly where its exact min-max V reaches t and at most V
    always, for t around V (V + 1, V, V − 1, V / 2: its kept range met again), on every
    shape the domain bound prices; both answers and q >= 2 occur."""
    instance = _instance(seed, overlap=True, num_layers=num_layers, tiers=tiers)
    search = _search(instance)
    calls, choice = [], [0]
    exact_stagewise = planner._Search._domain_stagewise

    def record(self, *args):
        calls.append((choice[0], *args))
        return exact_stagewise(self, *args)

    monkeypatch.setattr(planner._Search, "_domain_stagewise", record)
    for choice_index, shape, _ in v1_shapes(search, instance):
        chunk = search._chunk_time_bounds(choice_index)[shape.num_chunks]
        choice[0] = choice_index
        search._domain_bound(shape, chunk, (choice_index,), exact=True)
    monkeypatch.undo()
    deciding = _search(instance)  # a fresh cache: every threshold decided, or read back
    answers, slots_met = set(), set()
    for choice_index, shape, tier, qualities, slots, off_node, threshold in calls:
        assert threshold is None
        exact = search._domain_stagewise(shape, tier, qualities, slots, off_node)
        weights = search._domain_weights(shape, tier, qualities, off_node)
        capacity = search._whole_capacity(shape.table.config.devices * shape.dp, tier)
        own = dataclasses.replace(shape, table=deciding._table(choice_index))
        for limit in (exact + 1, exact, exact - 1, exact // 2):
            assert planner._domain_split_below(weights, shape.num_stages, slots, limit,
                                               capacity) == (exact < limit), \
                (shape, slots, limit, exact)
            found = deciding._domain_stagewise(own, tier, qualities, slots, off_node, limit)
            assert found <= exact and (found >= limit) == (exact >= limit), \
                (shape, slots, limit, exact, found)
            answers.add(exact >= limit)
        slots_met.add(slots)
    assert answers == {False, True} and max(slots_met) >= 2


def _interleaved_shapes(search, instance, num_stages: int = 2, virtual: int = 2):
    """Every shape (c, b, S = 2, d, v = 2, z) the DP may search, as :func:`v1_shapes`."""
    for choice_index, (config, microbatch) in enumerate(instance.choices):
        for dp in range(1, instance.cluster.num_devices // (config.devices * num_stages) + 1):
            microbatches = cost.num_microbatches(instance.training.global_batch, microbatch,
                                                 config, dp)
            if microbatches % num_stages:
                continue
            for zero in instance.training.zero_stages:
                yield choice_index, Shape(search._table(choice_index), num_stages, dp, virtual,
                                          zero, microbatches), SimpleNamespace(
                    config=config, microbatch=microbatch, zero=zero, dp=dp,
                    num_stages=num_stages, virtual=virtual)


@pytest.mark.parametrize("seed", first_fast(range(3)))
def test_interleaved_domain_bound_never_exceeds_the_exhaustive_optimum(seed):
    """v = 2 on a workload of blocks (an embedding, three blocks, a head): the domain bound
    is at most the exhaustive optimum of every shape it prices (z = 1 in the fast tier) and
    raises some."""
    instance = _instance(seed, overlap=seed % 2 == 1, num_layers=5, virtual=2)
    search = _search(instance)
    raised, _ = _check(instance, search, _interleaved_shapes(search, instance),
                       zeros=(1,) if seed == 0 else (0, 1, 3))
    assert raised


# nodes of 2 in tier-1 domains of 2 (no more devices: a node) and tier-2 domains of 4, each
# tier slower: with t = 2, d = 2 no stage fits a tier-1 domain (S = 2) and one fits a tier-2
# domain alone; with d = 1 a stage fits a tier-1 domain alone (S = 2) and two share a
# tier-2 domain (S = 3)
DOMAIN_TIERS = (2, 1, 2, 2)


def _domain_weight_shapes(search, shapes, zeros, kinds):
    """The shapes of ``shapes`` (t = 2, a ZeRO stage of ``zeros``) with domain weights of a
    kind in ``kinds`` (planner.LEAVING, WHOLE, SHARED), with the stage-by-stage bound without
    and with them."""
    for _, shape, exhaustive_shape in shapes:
        config = shape.table.config
        dps = np.array([shape.dp])
        tiers, found = search._domain_rows(config, shape.num_stages, shape.virtual, dps)
        if config.tp != 2 or shape.zero not in zeros or tiers[0] < 0 or found[0] not in kinds:
            continue
        if shape.virtual == 1:
            plain, domain = (int(search._stagewise_bounds(
                shape.table, shape.num_stages, shape.zero, dps, np.zeros(1, dtype=np.int64),
                None, domain=domain)[0]) for domain in (False, True))
        else:
            plain, domain = (int(search._interleaved_stagewise_bounds(
                shape.table, shape.num_stages, shape.virtual, shape.zero, dps,
                domain=domain)[0]) for domain in (False, True))
        yield shape, exhaustive_shape, plain, domain


def _check_domain_weights(instance, search, shapes) -> tuple[int, int]:
    """Assert plain <= domain <= the exhaustive optimum on each shape; (compared, raised)."""
    compared = raised = 0
    for shape, exhaustive_shape, plain, domain in shapes:
        optimum = shape_optimum(instance, exhaustive_shape, canonical_placements(
            DOMAIN_TIERS, shape.table.config.devices * shape.num_stages * shape.dp))
        if optimum == math.inf:
            continue
        compared += 1
        assert plain <= domain <= optimum, (shape, plain, domain, optimum)
        raised += domain > plain
    return compared, raised


# seed 0, z = 1, with overlap, S = 2 in the fast tier (about 1.5 s); z = 0, 1, 3, both
# overlap settings, each kind on its own and further seeds in the slow one
@pytest.mark.parametrize("seed, overlap, fast", [(0, True, True)] + [
    pytest.param(seed, overlap, False, marks=SLOW) for seed in range(3)
    for overlap in (False, True)])
def test_domain_stage_weights_never_exceed_the_exhaustive_optimum(seed, overlap, fast):
    """v = 1: the stage-by-stage bound on the domain weights (a stage that fits no domain,
    fits one alone, or shares one with another) is at most the least objective over every
    split and injective placement, and above the plain stage-by-stage bound on some shapes
    of each kind."""
    instance = _instance(seed, overlap, tiers=DOMAIN_TIERS)
    search = _search(instance)
    assert search._domain_tiers() == (1, 2)
    kinds = (planner.LEAVING, planner.WHOLE, planner.SHARED)
    for kept in (kinds,) if fast else tuple((kind,) for kind in kinds):
        compared, raised = _check_domain_weights(instance, search, (
            found for found in _domain_weight_shapes(
                search, v1_shapes(search, instance), (1,) if fast else (0, 1, 3), kept)
            if not fast or found[0].num_stages == 2))
        assert compared and raised, kept


@SLOW
@pytest.mark.parametrize("seed", range(2))
def test_interleaved_domain_stage_weights_never_exceed_the_exhaustive_optimum(seed):
    """v = 2 on a workload of blocks, S = 2, t = 2, d = 2 (no stage in a tier-1 domain): the
    interleaved stage-by-stage bound on the domain weights is at most the exhaustive
    optimum, and raised above the plain one."""
    instance = _instance(seed, overlap=seed % 2 == 1, num_layers=5, virtual=2,
                         tiers=DOMAIN_TIERS)
    search = _search(instance)
    compared, raised = _check_domain_weights(instance, search, _domain_weight_shapes(
        search, _interleaved_shapes(search, instance), (0, 1, 3),
        (planner.LEAVING, planner.WHOLE, planner.SHARED)))
    assert compared and raised


def test_a_group_with_one_member_per_node_needs_a_node_each():
    """On Llama 3's RoCE tiers (nodes of 8, racks of 2 nodes, pods of 192 racks): with one
    member per node a group of 384 fits a pod, one of 385 does not; with 8 per node a group
    of 3,072 does."""
    network = NetworkModel(dataclasses.replace(random_instance(0).cluster, num_devices=4 * 3072,
                                               network=HierarchicalNetwork((
                                                   Tier("nvlink", 8, 4.5e11, 1e-6),
                                                   Tier("rack", 2, 5e10, 2e-6),
                                                   Tier("pod", 192, 5e10, 3e-6),
                                                   Tier("aggregation", 4, 5e10 / 7, 5e-6)))))
    pod, top = network.channel_path(2, 1), network.channel_path(3, 1)
    assert capped_group_paths(network, 384, 1) == (pod, top)
    assert capped_group_paths(network, 385, 1) == (top,)
    assert network.channel_path(2, 8) in capped_group_paths(network, 3072, 8)
    assert capped_group_paths(network, 385, 1, above=2) == (top,)


def _above_small_pods(instance):
    """``instance`` on nodes of 2 in pods of 8 under a 1:7 aggregation tier."""
    network = HierarchicalNetwork((Tier("node", 2, 1e11, 1e-6, efficiency=0.8),
                                   Tier("rack", 2, 1e10, 2e-6),
                                   Tier("pod", 2, 1e10, 3e-6),
                                   Tier("aggregation", 2, 1e10 / 7, 5e-6, efficiency=0.7)))
    return dataclasses.replace(instance, cluster=dataclasses.replace(
        instance.cluster, network=network))


@pytest.mark.parametrize("seed", first_fast((2, 0, 1, 3)))  # seed 2 the quickest
def test_pruning_never_changes_the_optimum_above_small_pods(seed, monkeypatch):
    """test_dp_v3's medium instances on nodes of 2 in pods of 8 under a 1:7 tier: the DP
    with every bound finds the objective the DP with every bound replaced by 0 finds."""
    from test_dp_v3 import medium_v3_instance

    from nest_cp.solvers.registry import solve

    instance = _above_small_pods(medium_v3_instance(seed))
    same_optimum_unbounded(instance, monkeypatch, lambda i: solve(i, "dp", SolveOptions()))


def test_the_domain_seed_divides_a_pod_and_changes_no_result(monkeypatch):
    """Above pods of 8 under a 1:7 tier, the outer searched first has a stage (a·d devices)
    dividing a pod and is not searched again; the DP without the seed finds the same
    objective and plan; stopped during the seed's search, the bound is the least compute
    bound, above 0 and at most that objective."""
    from test_dp_v3 import medium_v3_instance

    instance = _above_small_pods(medium_v3_instance(2))
    search = planner._Search(instance, SolveOptions(), None)
    seed = search._domain_seed(search._outer_choices())
    config = instance.choices[seed.choice_index][0]
    assert 8 % (config.devices * seed.dp) == 0
    searched = []
    search_outer = planner._Search._search_outer

    def counted(self, outer, floor=None):
        if floor is None:
            searched.append(outer.key)
        return search_outer(self, outer, floor)

    monkeypatch.setattr(planner._Search, "_search_outer", counted)
    seeded = planner.solve(instance, SolveOptions())
    assert searched[0] == seed.key and searched.count(seed.key) == 1
    monkeypatch.setattr(planner._Search, "_domain_seed", lambda search, outers: None)
    plain = planner.solve(instance, SolveOptions())
    assert (seeded.status, seeded.objective_ticks, seeded.stats["layout"]) == \
        (plain.status, plain.objective_ticks, plain.stats["layout"])
    assert seeded.plan.placement == plain.plan.placement
    monkeypatch.undo()

    def out_of_time(self, outer, floor=None):
        raise planner._TimeUp

    monkeypatch.setattr(planner._Search, "_search_outer", out_of_time)  # during the seed
    stopped = planner._Search(instance, SolveOptions(), None)
    assert stopped.run().objective is None
    assert stopped.stopped_bound == min(outer.lower_bound for outer in search._outer_choices())
    assert 0 < stopped.stopped_bound <= seeded.objective_ticks


def _vector_domain_cases(search, instance, virtual: int = 1):
    """Per (c, S, v = ``virtual``, z) of ``instance`` and tier P of :meth:`_domain_tiers`:
    (choice index, S, z, P, the d-vector of _vector_domain_bound with the classes of every d,
    microbatch counts), asserting it is at least the one without classes."""
    training = instance.training
    for choice_index, (config, microbatch) in enumerate(instance.choices):
        table = search._table(choice_index)
        chunks = search._chunk_time_bounds(choice_index)
        for num_stages in range(1 if virtual == 1 else 2, table.num_layers // virtual + 1):
            dps = np.arange(1, instance.cluster.num_devices // (config.devices * num_stages)
                            + 1, dtype=np.int64)
            microbatches = cost.num_microbatches(training.global_batch, microbatch, config, dps)
            rounds = virtual * microbatches + num_stages - 1
            for zero in training.zero_stages:
                for tier in search._domain_tiers():
                    plain, classed = (search._vector_domain_bound(
                        table, num_stages, virtual, zero, dps, rounds,
                        chunks[num_stages * virtual], tier, wanted)
                        for wanted in (None, np.ones(len(dps), dtype=bool)))
                    assert np.all(plain <= classed)
                    yield choice_index, num_stages, zero, tier, classed, microbatches


def _check_vector_domain(instance, search, tiers, virtual: int = 1, zeros=(0, 1, 3),
                         tps=(1, 2), exhaustive: bool = True) -> tuple[int, int]:
    """Assert each entry of the vector domain bound is at most the exact domain bound of its
    shape and tier (0 where the exact one claims nothing of a·d > G_P) and at most the
    shape's exhaustive optimum (for a ZeRO stage of ``zeros`` and t in ``tps``; the latter
    only with ``exhaustive``); return (entries compared, entries above the shape's
    case-split bound)."""
    compared = raised = 0
    for choice_index, num_stages, zero, tier, vector, microbatches in \
            _vector_domain_cases(search, instance, virtual):
        table = search._table(choice_index)
        if zero not in zeros or table.config.tp not in tps:
            continue
        chunk = search._chunk_time_bounds(choice_index)[num_stages * virtual]
        for dp in range(1, len(vector) + 1):
            entry = int(vector[dp - 1])
            if virtual > 1 and microbatches[dp - 1] % num_stages:
                continue
            shape = Shape(table, num_stages, dp, virtual, zero, int(microbatches[dp - 1]))
            exact = search._domain_bound_at(shape, chunk, tier, (choice_index,), exact=True)
            assert entry <= exact, (shape, tier, entry, exact)
            domain = instance.cluster.network.domain_sizes()[tier]
            claimed = table.config.devices * dp > domain and dp > 1
            assert claimed or entry == 0
            compared += claimed
            raised += claimed and entry > search._shape_bound(shape, chunk)
            if not claimed or not exhaustive:
                continue
            optimum = shape_optimum(instance, SimpleNamespace(
                config=table.config, microbatch=table.microbatch, zero=zero, dp=dp,
                num_stages=num_stages, virtual=virtual), canonical_placements(
                tiers, table.config.devices * num_stages * dp))
            assert optimum == math.inf or entry <= optimum, (shape, entry, optimum)
    return compared, raised


# seed 1 with t = 2 and z = 1 in the fast tier; every configuration, ZeRO stage and both
# overlap settings, over further seeds and both hierarchies, in the slow one
@pytest.mark.parametrize("seed, overlap, tiers, fast", [(1, True, TIERS, True)] + [
    pytest.param(seed, overlap, tiers, False, marks=SLOW) for seed in range(3)
    for overlap in (False, True) for tiers in (TIERS, DOMAIN_TIERS)])
def test_vector_domain_bound_never_exceeds_the_exact_one_or_the_optimum(seed, overlap, tiers,
                                                                        fast):
    """For every (c, S, v = 1, z) and domain tier P, the d-vector of the refined bound's
    domain term (no stage fits a tier-P domain, a·d > G_P, d >= 2) is at most
    :meth:`_domain_bound_at` of every d (0 where that claims nothing) and at most the
    exhaustive optimum over every split and injective placement, and above the case-split
    bound on some."""
    instance = _instance(seed, overlap, tiers=tiers)
    search = _search(instance)
    compared, raised = _check_vector_domain(instance, search, tiers, zeros=(1,) if fast
                                            else (0, 1, 3), tps=(2,) if fast else (1, 2))
    assert compared and raised


@pytest.mark.parametrize("seed", first_fast(range(3)))
def test_interleaved_vector_domain_bound_never_exceeds_the_exact_one_or_the_optimum(seed):
    """v = 2 on a workload of blocks, S >= 2 (so on :data:`DOMAIN_TIERS`, whose tier-1
    domains of 2 devices a stage of t·d >= 3 leaves): the same, with the rounds and chunk
    bounds of S·v chunks (in the fast tier against the exact bound only: one exhaustive
    v = 2 search takes seconds)."""
    instance = _instance(seed, overlap=seed % 2 == 1, num_layers=5, virtual=2,
                         tiers=DOMAIN_TIERS)
    search = _search(instance)
    compared, raised = _check_vector_domain(instance, search, DOMAIN_TIERS, virtual=2,
                                            exhaustive=seed > 0)
    assert compared and raised


def test_group_bounds_hold_the_vector_domain_bound():
    """With an incumbent no shape reaches (every d wanted), the refined bounds of every
    (c, S, v = 1, z) hold the vector domain bound at each d a ZeRO stage is worth searching
    at, and stay at most the largest of the exact case-split, class and domain bounds."""
    instance = _instance(1, True)
    search = planner._Search(instance, SolveOptions(), ())
    search.best.objective = planner.INF - 1
    compared = 0
    for choice_index, num_stages, zero, tier, vector, microbatches in \
            _vector_domain_cases(search, instance):
        table = search._table(choice_index)
        chunk = search._chunk_time_bounds(choice_index)[num_stages]
        search._group_bounds(planner.Outer(0, choice_index, num_stages, 1, 1, chunk))
        group = search._zero_bounds.get((choice_index, num_stages, 1, zero))
        for dp in np.flatnonzero(vector).tolist():
            dp += 1
            if group is None or zero not in search._zero_stages(table, dp, num_stages, 1):
                continue
            shape = Shape(table, num_stages, dp, 1, zero, int(microbatches[dp - 1]))
            ceiling = max(search._shape_bound(shape, chunk),
                          search._layout_class_bound(shape, chunk),
                          search._domain_bound_at(shape, chunk, tier, (choice_index,),
                                                  exact=True))
            assert vector[dp - 1] <= group[dp - 1] <= ceiling, (shape, tier)
            compared += 1
    assert compared


def _assignment_min_max(weights, num_stages: int, slots: int, capacity: int) -> int:
    """The least over splits and assignments (each stage whole or not, each boundary
    between whole stages joined or not, runs of joined whole stages of at most q = ``slots``,
    at most ``capacity`` whole stages) of the largest stage weight, by enumeration."""
    import itertools

    whole_alone, joined_right, joined_left, inside, leaving = weights
    num_layers = whole_alone.shape[0]
    best = planner.INF
    for cuts in itertools.combinations(range(1, num_layers), num_stages - 1):
        bounds = list(zip((0,) + cuts, cuts + (num_layers,)))
        for wholes in itertools.product((False, True), repeat=num_stages):
            if sum(wholes) > capacity:
                continue
            for joins in itertools.product((False, True), repeat=num_stages - 1):
                if any(joined and not (wholes[s] and wholes[s + 1])
                       for s, joined in enumerate(joins)):
                    continue
                run, too_long = 1, False
                for joined in joins:
                    run = run + 1 if joined else 1
                    too_long |= run > slots
                if too_long:
                    continue
                largest = 0
                for s, (first, end) in enumerate(bounds):
                    left = s > 0 and joins[s - 1]
                    right = s < num_stages - 1 and joins[s]
                    weight = (leaving if not wholes[s] else inside if left and right else
                              joined_left if left else joined_right if right else whole_alone)
                    largest = max(largest, int(weight[first, end - 1]))
                best = min(best, largest)
    return best


@pytest.mark.parametrize("seed", range(6))
def test_domain_min_max_counts_whole_stages(seed):
    """:func:`_domain_min_max` with a capacity W (at most W stages whole: a domain holds at
    most ⌊|D| / (a·d)⌋ of them) equals the enumeration of every split and assignment with
    at most W whole stages, for q = 1 .. 3 and W = 0 .. S, and the decision form agrees
    with it at V and V + 1; the capacity raises it on some cases."""
    rng = np.random.default_rng(seed)
    num_layers, raised = 6, 0
    for num_stages in range(2, 5):
        for slots in (1, 2, 3):
            # as _domain_weights builds them: a base per range plus the activation receive
            # (none into layer 0) and the gradient receive (none after layer L − 1), each
            # near or far (i, o), and a stage not whole above its base
            ordered = np.triu(np.ones((num_layers, num_layers), dtype=bool))
            base = rng.integers(1, 40, size=(num_layers, num_layers))
            near, far = (rng.integers(0, 10, size=(2, num_layers)) for _ in range(2))
            far += near
            near[0, 0] = far[0, 0] = near[1, -1] = far[1, -1] = 0
            whole = {(into, out): np.where(ordered, base + (near, far)[into][0][:, None]
                                           + (near, far)[out][1][None, :], planner.INF)
                     for into in (0, 1) for out in (0, 1)}
            leaving = np.where(ordered, base + rng.integers(0, 30, size=base.shape),
                               planner.INF)
            weights = (whole[1, 1], whole[1, 0], whole[0, 1], whole[0, 0], leaving)
            for capacity in range(num_stages + 1):
                expected = _assignment_min_max(weights, num_stages, slots, capacity)
                found = planner._domain_min_max(weights, num_stages, slots, capacity)
                assert found == expected, (num_stages, slots, capacity, found, expected)
                assert planner._domain_split_below(weights, num_stages, slots, found + 1,
                                                   capacity)
                assert not planner._domain_split_below(weights, num_stages, slots, found,
                                                       capacity)
                raised += found > planner._domain_min_max(weights, num_stages, slots)
    assert raised


# two domains of three single-device nodes: a replica of two devices (S = 2, t = 1 or
# S = 1, t = 2) fits a domain once, so with d = 3 one replica is not whole
@pytest.mark.parametrize("seed", first_fast(range(3)))
def test_replica_bound_never_exceeds_the_exhaustive_optimum(seed):
    """Where the domains cannot hold every replica whole (d > W_rep), the replica bound
    (:meth:`_Search._replica_bound_at`: some pipeline pair or every TP group of a replica
    leaves its domain) is at most the least objective over every split and injective
    placement, and above the shape's fastest-path and case-split bound on some shapes; its
    vector form (the refined bound's, per d) is at most it, and claims where it does."""
    tiers = (1, 3, 2)
    instance = _instance(seed, overlap=seed % 2 == 0, num_layers=4, tiers=tiers)
    search = _search(instance)
    assert search._domain_tiers() == (1,)

    def replica_bound(choice_index, shape, chunk):
        bound = search._replica_bound_at(shape, chunk, 1)
        vector = search._vector_replica_bound(shape.table, shape.num_stages, 1,
                                              np.array([shape.dp]), np.array([shape.rounds]),
                                              chunk, 1)
        assert 0 <= vector[0] <= bound and (vector[0] > 0) == (bound > 0), (shape, bound)
        return bound

    raised, _ = _check(instance, search, v1_shapes(search, instance), tiers=tiers,
                       bound_of=replica_bound)
    assert raised


def test_rank_ends_pair_tiers_and_leaving_replicas_equal_the_device_arrays():
    """:func:`rank_end_devices` is columns 0 and a − 1 of the placement numbered as
    :func:`layout_config` numbers it (context width 2 too);
    :meth:`_Search._replica_leaves`, read from a replica's first and last ids where the
    layout's positions grow with each digit, answers as the whole device array does, and
    :meth:`_Search._pipeline_pair_tiers` (from id residues where strided) are the tiers of
    those columns' pipeline pairs, on every layout of structured space v3 (digit orders,
    spare-first, replica blocks, node tails, gathered ends) and both domain tiers of a
    three-tier network."""
    from nest_cp.dp.geometry import layout_config, rank_devices, rank_end_devices
    from nest_cp.model.plan import structured_layouts

    tiers = (2, 2, 2, 2)
    instance = _instance(0, overlap=False, tiers=tiers)
    search = planner._Search(instance, SolveOptions(), None)
    network = search.network
    layouts = structured_layouts(network.digit_radices)
    sizes = network.cluster.network.domain_sizes()
    compared, leaving, fast = 0, [0, 0], 0
    for config in (IntraConfig(), IntraConfig(tp=2), IntraConfig(tp=2, cp=2)):
        for stages in (1, 2, 3, 4):
            for dp in range(1, network.num_devices // (config.devices * stages) + 1):
                for index, layout in enumerate(layouts):
                    order = search.geometries.order_of(layout)
                    devices = rank_devices(layout, layout_config(config), stages, dp, order,
                                           network.node_size)
                    ends = rank_end_devices(layout, config, stages, dp, order,
                                            network.node_size)
                    assert np.array_equal(ends, devices[:, :, [0, -1]]), layout.name
                    if config.cp > 1:
                        continue
                    if stages > 1:  # the pair tiers, from residues where strided
                        assert np.array_equal(
                            search._pipeline_pair_tiers(layout, config, stages, dp),
                            network.tier_of_pairs(ends[:-1], ends[1:]).max(axis=2)), layout.name
                    fast += search.geometries.strided and not layout.digits and \
                        not layout.arrayed(config, stages, dp)
                    for tier in (1, 2):
                        domains = devices // sizes[tier]
                        expected = bool(np.any(domains.min(axis=(0, 2))
                                               != domains.max(axis=(0, 2))))
                        assert search._replica_leaves(index, layout, config, stages, dp,
                                                      tier) == expected, layout.name
                        leaving[expected] += 1
                    compared += 1
    assert compared > 1000 and min(leaving) > 100 and fast > 100, (compared, leaving, fast)


@pytest.mark.parametrize("seed", first_fast(range(3)))
def test_layout_replica_term_never_exceeds_the_layouts_optimum(seed):
    """On each layout the DP visits whose placement has a replica in two domains
    (:meth:`_Search._replica_leaves`), R·max(τ_lb, M) + the layout's sync bound (the term
    :meth:`_Search._layout_tau` adds to the layout's bounds) is at most the least objective
    of that placement over every split (exhaustive), and such layouts occur with M above
    τ_lb."""
    from nest_cp.dp.geometry import rank_devices

    tiers = (1, 3, 2)
    instance = _instance(seed, overlap=seed % 2 == 0, num_layers=4, tiers=tiers)
    search = planner._Search(instance, SolveOptions(), None)  # the structured layouts
    compared = raised = 0
    for choice_index, shape, exhaustive_shape in v1_shapes(search, instance):
        config = shape.table.config
        chunk = search._chunk_time_bounds(choice_index)[shape.num_chunks]
        least = search._replica_event(shape.table, shape.num_stages, 1, 1)
        for layout_index, layout in search._layouts(config, shape.num_stages, shape.dp):
            if not search._replica_leaves(layout_index, layout, config, shape.num_stages,
                                          shape.dp, 1):
                continue
            groups = search.geometries.data_groups(layout, config, shape.num_stages, shape.dp)
            sync = search._sync_bound(shape) if groups is None else max(
                search._sync_bound(shape), search._layout_sync_bound(shape, *groups))
            devices = rank_devices(layout, config, shape.num_stages, shape.dp,
                                   search.geometries.order_of(layout),
                                   search.network.node_size)
            optimum = shape_optimum(instance, exhaustive_shape,
                                    [tuple(devices.reshape(-1).tolist())])
            if optimum == math.inf:
                continue
            term = shape.rounds * max(chunk, least) + sync
            assert term <= optimum, (shape, layout.name, term, optimum)
            compared += 1
            raised += least > chunk
    assert compared and raised
