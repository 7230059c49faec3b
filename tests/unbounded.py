"""Test helper: the DP with every lower bound it prunes by replaced by 0, so that it searches
every outer choice to the end (the reference the bound tests compare the pruned DP with)."""

from __future__ import annotations

import numpy as np

from nest_cp.dp import interleaved, planner

# the planner's bound methods; a new bound belongs here, or the "unbounded" DP still prunes
BOUND_METHODS = ("_gather_bound", "_sync_bound", "_layout_sync_bound", "_crossing_chunk_bound",
                 "_stagewise_bound", "_stagewise_of", "_interleaved_stagewise_bounds",
                 "_layout_bound", "_all_crossing_bound",
                 "_layout_class_bound", "_domain_bound", "_layout_stagewise_bound",
                 "_layout_tau", "_layout_receive_bound")


def without_dp_bounds(monkeypatch) -> None:
    """Patch the planner so that no bound prunes: outer choices' and chunks' bounds, the bound
    methods, the interleaved search's sync floor, the layouts' fastest-mode chunk bound (and
    with the sync bounds at 0 the v = 1 walk's floor) and the cheapest chunk times all 0."""
    outer_choices = planner._Search._outer_choices

    def unbounded_outers(search):
        lower, *middle, chunk = outer_choices(search).columns
        return planner._Outers(np.zeros_like(lower), *middle, np.zeros_like(chunk))

    monkeypatch.setattr(planner._Search, "_outer_choices", unbounded_outers)
    for name in BOUND_METHODS:
        monkeypatch.setattr(planner._Search, name, lambda *args: 0)
    # the bounds priced for every d at once: "not priceable", so each outer's refined bound
    # is the one-shape one, built from the bound methods above (0, or INF where none fits)
    monkeypatch.setattr(planner._Search, "_group_bounds", lambda search, outer: False)
    monkeypatch.setattr(interleaved, "_sync_floor", lambda ok, exposed: 0)
    monkeypatch.setattr(planner, "fastest_tau", lambda prices, shape, geometries: 0)
    monkeypatch.setattr(planner._Search, "_cheapest_times",
                        lambda search, table, stages, first_tier=0: np.zeros(
                            (stages, table.num_layers - stages + 1,
                             table.num_layers - stages + 1), dtype=np.int64))


def same_optimum_unbounded(instance, monkeypatch, solve_dp):
    """Solve ``instance`` with ``solve_dp`` (instance -> result) as the DP is, then with
    every bound zeroed (:func:`without_dp_bounds`); assert that the unbounded run searched
    every outer choice and that both give the same status and objective.  Returns the two
    results (pruned, unbounded) for further checks."""
    pruned = solve_dp(instance)
    without_dp_bounds(monkeypatch)
    unbounded = solve_dp(instance)
    assert unbounded.stats["outer_searched"] + unbounded.stats["outer_unfit"] == \
        unbounded.stats["outer_choices"]
    assert (pruned.status, pruned.objective_ticks) == (unbounded.status,
                                                       unbounded.objective_ticks)
    return pruned, unbounded
