"""Rank layouts of structured space v2 (DESIGN §4): the 24 orders and their positions."""

from __future__ import annotations

import itertools
import random

import numpy as np
import pytest

from nest_cp.model.instance import IntraConfig
from nest_cp.model.plan import MEGATRON_LAYOUT, NEST_LAYOUT, Dim, RankLayout, all_layouts


def test_all_layouts_are_the_24_orders_megatron_first():
    """all_layouts() holds every order of (t, e, stage, replica) once: Megatron's first, then
    the other orders with t innermost (the space before v2, NEST's among them)."""
    layouts = all_layouts()
    assert len(layouts) == 24
    assert {layout.order for layout in layouts} == set(itertools.permutations(Dim))
    assert layouts[0] == MEGATRON_LAYOUT and NEST_LAYOUT in layouts[:6]
    assert all(layout.order[0] is Dim.TP for layout in layouts[:6])
    assert all(layout.order[0] is not Dim.TP for layout in layouts[6:])


def test_a_layout_names_each_dimension_once():
    """An order repeating a dimension is refused."""
    with pytest.raises(ValueError, match="each once"):
        RankLayout((Dim.TP, Dim.TP, Dim.STAGE, Dim.REPLICA))


@pytest.mark.parametrize("seed", range(6))
def test_positions_over_arrays_equal_positions_rank_by_rank(seed):
    """For every layout the vectorised positions equal the scalar ones and number the a·S·d
    ranks 0..a·S·d − 1 (a bijection)."""
    rng = random.Random(seed)
    config = IntraConfig(rng.randint(1, 3), rng.randint(1, 3))
    num_stages, dp = rng.randint(1, 4), rng.randint(1, 4)
    for layout in all_layouts():
        positions = layout.positions(config, num_stages, dp)
        scalar = [[[layout.position(s, r, j, config, num_stages, dp)
                    for j in range(config.devices)] for r in range(dp)]
                  for s in range(num_stages)]
        assert positions.tolist() == scalar
        assert sorted(positions.flat) == list(range(config.devices * num_stages * dp))
        order = np.arange(100, 100 + positions.size)
        assert layout.placement(config, num_stages, dp, order) == tuple(
            tuple(tuple(int(order[p]) for p in ranks) for ranks in replicas)
            for replicas in scalar)
