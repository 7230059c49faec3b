"""The stage-by-stage bounds priced over a span of d at once (``highs``, issue 35): each is
at most the exact vector bound of every d of its span, and a span of one d is that d's bound
itself; the planner's pass over spans leaves its optimum as it was."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from nest_cp.dp import planner
from nest_cp.model.instance import RecomputeMode
from nest_cp.model.result import SolveOptions
from nest_cp.profiles.presets import build_instance


def _search(devices: int):
    """GPT-3 175B on Llama 3's RoCE network (pods of 3,072 GPUs: the domain weights of a
    stage leaving, whole in or sharing a pod all occur at 8,192 devices), every ZeRO stage,
    v = 1 and 2, overlapped sync."""
    instance = build_instance(model="gpt3-175b", devices=devices, network="meta-h100-roce")
    training = dataclasses.replace(
        instance.training, virtual_stages=(1, 2), zero_stages=(0, 1, 2, 3),
        recompute_modes=(RecomputeMode.NONE,), overlap_grad_reduce=True,
        overlap_param_gather=True)
    instance = dataclasses.replace(instance, training=training)
    return instance, planner._Search(instance, SolveOptions(), None)


def _exact_and_spanned(search, table, num_stages, virtual, zero, lows, highs):
    """The exact bound of every d 1 .. N / (a·S) and the spanned ones of ``lows`` .. ``highs``."""
    dps = np.arange(1, search.instance.cluster.num_devices
                    // (table.config.devices * num_stages) + 1)
    if virtual > 1:
        exact = search._interleaved_stagewise_bounds(table, num_stages, virtual, zero, dps,
                                                     domain=True)
        spanned = search._interleaved_stagewise_bounds(table, num_stages, virtual, zero, lows,
                                                       domain=True, highs=highs)
    else:
        exact = search._stagewise_bounds(table, num_stages, zero, dps,
                                         np.zeros(len(dps), dtype=np.int64), None, domain=True)
        spanned = search._stagewise_bounds(table, num_stages, zero, lows,
                                           np.zeros(len(lows), dtype=np.int64), None,
                                           domain=True, highs=highs)
    return exact, spanned


@pytest.mark.parametrize("tp, num_stages, virtual, zero", [
    (8, 2, 1, 2), (8, 3, 1, 3), (4, 4, 1, 0), (2, 6, 1, 1), (8, 2, 2, 3), (4, 4, 2, 1)])
def test_a_span_bound_is_at_most_every_d_of_it_and_one_d_is_exact(tp, num_stages, virtual,
                                                                   zero):
    """Spans of every width, across the pod's sizes (d·a crossing G_P, G_P / 2, G_P / 3,
    where the domain weights change kind) and from d = 1, bound every d they hold."""
    instance, search = _search(8192)
    choice_index = next(index for index, (config, microbatch) in enumerate(instance.choices)
                        if config.tp == tp and microbatch == 1)
    table = search._table(choice_index)
    largest = 8192 // (tp * num_stages)
    rng = np.random.default_rng(tp * 100 + num_stages * 10 + virtual)
    lows = np.concatenate([np.arange(1, largest + 1, 37), rng.integers(1, largest + 1, 40),
                           [1, 1, largest]])
    highs = np.minimum(largest, lows + np.concatenate([
        np.full(len(np.arange(1, largest + 1, 37)), 0), rng.integers(1, largest, 40),
        [0, largest, 0]]))
    exact, spanned = _exact_and_spanned(search, table, num_stages, virtual, zero, lows, highs)
    assert np.all(exact > 0)
    for low, high, bound in zip(lows.tolist(), highs.tolist(), spanned.tolist()):
        members = exact[low - 1:high]
        assert bound <= members.min(), (low, high, bound, members.min())
        if low == high:
            assert bound == members[0]
    # not vacuous: the widest spans away from the kind changes stay close to their least d
    tiers, kinds = search._domain_rows(table.config, num_stages, virtual,
                                       np.arange(1, largest + 1))
    same = [(low, high) for low, high in zip(lows.tolist(), highs.tolist())
            if high - low >= 8 and len(set(zip(tiers[low - 1:high].tolist(),
                                                kinds[low - 1:high].tolist()))) == 1]
    assert same
    close = [bound >= 0.9 * exact[low - 1:high].min()
             for (low, high), bound in zip(zip(lows.tolist(), highs.tolist()), spanned.tolist())
             if (low, high) in same]
    assert np.mean(close) > 0.5


def test_runs_never_cross_a_change_of_domain_kind():
    """The candidates cut into about ``count`` runs of consecutive entries, each of one
    tier and kind, every candidate in exactly one run."""
    candidates = np.array([0, 1, 2, 5, 6, 9, 10, 11, 12, 20])
    tiers = np.array([-1, -1, -1, 2, 2, 2, 2, 2, 2, 2])
    kinds = np.array([0, 0, 0, 3, 3, 2, 2, 2, 1, 1])
    runs = planner._runs(candidates, (tiers, kinds), 4)
    assert np.array_equal(np.concatenate(runs), candidates)
    position = {int(value): index for index, value in enumerate(candidates)}
    for run in runs:
        indices = [position[int(value)] for value in run]
        assert len({(int(tiers[i]), int(kinds[i])) for i in indices}) == 1
    assert len(runs) >= 4


def test_spans_list_every_d_of_each_row():
    members, owner, count, starts = planner._spans(np.array([3, 1, 7]), np.array([5, 1, 8]))
    assert members.tolist() == [3, 4, 5, 1, 7, 8]
    assert owner.tolist() == [0, 0, 0, 1, 2, 2]
    assert count == 3
    assert starts.tolist() == [0, 3, 4]
