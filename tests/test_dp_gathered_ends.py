"""Structured space v3d (issue 31): rank layouts with gathered ends.

A layout with gathered ends (:func:`nest_cp.model.plan.gathered_end_positions`) keeps the
d replicas of the first and of the last stage side by side (replica-inner) and runs the
stages between them replica by replica (stage-inner): the full-space optimum of
``instances/small/tight-l8-d16-h3`` (class P of reports/structured_v3_analysis.md, cuts
after the first stage and before the last).  These tests check the placement against a
rank-by-rank reading of that definition and where it applies, the DP's geometries against
the device array's, the DP against brute force, structured CP-SAT and the MILP on seeded
instances where gathered ends strictly beat every v3c layout, the instance itself, and
that the exports' rank map realises such a placement.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from tiers import SLOW

from nest_cp.cost.evaluate import Evaluator
from nest_cp.dp.planner import solve as dp_solve
from nest_cp.harness.generators import random_instance
from nest_cp.io.readers import load_instance
from nest_cp.model.instance import IntraConfig
from nest_cp.model.network import NetworkModel
from nest_cp.model.plan import (
    MEGATRON_LAYOUT,
    NEST_LAYOUT,
    Dim,
    NodeTail,
    RankLayout,
    gathered_end_positions,
    structured_layouts,
)
from tests.test_dp_v3a import (
    assert_arrayed_geometry,
    assert_new_layout_wins_as_brute_force,
    assert_rank_maps_realise,
    assert_structured_exact_agree,
)

ROOT = Path(__file__).resolve().parent.parent
GATHERED = RankLayout(NEST_LAYOUT.order, gathered_ends=True)
# seeded three-tier instances (6 layers, comm_scale 10, global batch 16, random_instance)
# where gathered ends win strictly
ENDS_CASES = [(31, (2, 2, 2)), pytest.param(33, (1, 2, 4), marks=SLOW)]


def _case(seed: int, tier_sizes: tuple[int, ...]):
    return random_instance(seed, num_layers=6, tier_sizes=tier_sizes, comm_scale=10,
                           global_batch=16)


def _reference_positions(config: IntraConfig, num_stages: int, dp: int):
    """The definition read rank by rank: the first stage's replicas in turn, then each
    replica's middle stages in turn, then the last stage's replicas; None where it does not
    apply (S < 4 or d = 1)."""
    if num_stages < 4 or dp < 2:
        return None
    width, placed, slot = config.devices, {}, 0
    roles = [(0, replica) for replica in range(dp)] \
        + [(stage, replica) for replica in range(dp) for stage in range(1, num_stages - 1)] \
        + [(num_stages - 1, replica) for replica in range(dp)]
    for stage, replica in roles:
        placed[stage, replica] = [slot + rank for rank in range(width)]
        slot += width
    return [[placed[stage, replica] for replica in range(dp)] for stage in range(num_stages)]


def test_gathered_end_positions_follow_the_definition():
    """Where gathered ends apply their positions are the rank-by-rank definition's, a
    bijection onto [0, a·S·d); elsewhere they are the order's alone (t,e,stage,replica)."""
    applied = 0
    for config in (IntraConfig(1, 1), IntraConfig(2, 1), IntraConfig(2, 2)):
        for num_stages in range(1, 8):
            for dp in range(1, 5):
                expected = _reference_positions(config, num_stages, dp)
                positions = GATHERED.positions(config, num_stages, dp)
                assert GATHERED.ends_gathered(config, num_stages, dp) == (expected is not None)
                assert GATHERED.arrayed(config, num_stages, dp) == (expected is not None)
                if expected is None:
                    assert (positions == NEST_LAYOUT.positions(config, num_stages, dp)).all()
                    continue
                applied += 1
                assert positions.tolist() == expected
                assert sorted(positions.flat) == list(range(positions.size))
                assert GATHERED.position(num_stages - 1, dp - 1, config.devices - 1, config,
                                         num_stages, dp) == positions.size - 1
    assert applied >= 30


def test_the_definition_adds_nothing_below_four_stages_or_two_replicas():
    """Why gathered ends apply only where S >= 4 and d >= 2: on S <= 3 the definition is
    t,e,replica,stage (its middle is at most one stage), on d = 1 t,e,stage,replica."""
    for config in (IntraConfig(1, 1), IntraConfig(2, 2)):
        for num_stages in (1, 2, 3):
            for dp in (1, 2, 5):
                assert (gathered_end_positions(config, num_stages, dp)
                        == MEGATRON_LAYOUT.positions(config, num_stages, dp)).all()
        for num_stages in (4, 6):
            assert (gathered_end_positions(config, num_stages, 1)
                    == NEST_LAYOUT.positions(config, num_stages, 1)).all()


def test_gathered_ends_are_refused_off_their_order():
    """Only t,e,stage,replica on the canonical device order, spare last, no replica block,
    no node tail takes gathered ends."""
    for kwargs in ({"order": (Dim.TP, Dim.EP, Dim.REPLICA, Dim.STAGE)},
                   {"order": NEST_LAYOUT.order, "digits": (2, 1)},
                   {"order": NEST_LAYOUT.order, "spare_first": True},
                   {"order": NEST_LAYOUT.order, "replica_block": 2},
                   {"order": NEST_LAYOUT.order, "node_tail": NodeTail(2, 2, 4)}):
        with pytest.raises(ValueError, match="gathered ends"):
            RankLayout(gathered_ends=True, **kwargs)


def test_structured_layouts_end_with_gathered_ends():
    """After v3c's layouts (unchanged, the node tail last of them), one layout with gathered
    ends, named for it; none on two tiers or graphs."""
    layouts = structured_layouts((4, 2, 2))
    assert layouts[-1] == GATHERED and layouts[-1].name == "t,e,stage,replica/gathered-ends"
    assert layouts[-2].name == "t,e,stage,replica/node-tail"
    assert not any(layout.gathered_ends for layout in layouts[:-1])
    assert len({layout.name for layout in layouts}) == len(layouts)
    assert not any(layout.gathered_ends for layout in structured_layouts((4, 2)))
    assert not any(layout.gathered_ends for layout in structured_layouts(None))


@pytest.mark.parametrize("seed", range(3))
def test_dp_geometries_of_gathered_ends_equal_those_of_the_placement(seed):
    """The DP's geometries and data-parallel group paths of the gathered-ends layout equal
    those of its device array where it applies, and those of t,e,stage,replica elsewhere."""
    assert_arrayed_geometry(seed, [(4, 3, 4), (2, 2, 2, 3), (8, 2, 3)][seed], -1,
                            "ends_gathered", [2, 3, 4, 5, 7], 40)


@pytest.mark.parametrize("seed", range(3))
def test_gathered_ends_from_a_few_replicas_equal_the_placement(seed):
    """With a period short against d and S (replicas r and r + P / gcd(a, P) placed alike,
    and inner stages that far apart), the geometries of gathered ends priced from those few
    replicas and stages equal those of the whole device array, wrapped or not."""
    assert_arrayed_geometry(seed, [(2, 2, 16), (2, 3, 12), (4, 2, 8)][seed], -1,
                            "ends_gathered", [2, 6, 9, 13], 30)


def _without_ends(instance) -> tuple[RankLayout, ...]:
    return tuple(layout for layout in NetworkModel(instance.cluster).structured_layouts
                 if not layout.gathered_ends)


@pytest.mark.parametrize(("seed", "tier_sizes"), ENDS_CASES)
def test_dp_equals_brute_force_where_gathered_ends_win(seed, tier_sizes):
    """On seeded three-tier instances the DP's plan uses gathered ends and costs strictly
    less than its best over the v3c layouts (both priced by the evaluator); brute force
    over every structured placement finds the same optimum."""
    instance = _case(seed, tier_sizes)
    assert_new_layout_wins_as_brute_force(instance, "/gathered-ends", _without_ends(instance))


def test_dp_equals_structured_cpsat_and_milp_where_gathered_ends_win():
    """Structured CP-SAT (one worker, fixed seed) and the MILP (HiGHS) select among the
    placements with gathered ends and prove the DP's optimum."""
    assert_structured_exact_agree(_case(*ENDS_CASES[0]))


def test_gathered_ends_reach_the_full_space_optimum_of_tight_l8_d16_h3():
    """The last hierarchical instances/small gap: with gathered ends the DP's optimum is the
    full-space optimum CP-SAT proves (instances/small/tight-l8-d16-h3.ref.json, 102.783
    ms); stages 1-2 of each replica share a rack, stages 0 and 3 keep their replicas in
    one; without them the DP's optimum is 103.857 ms."""
    instance = load_instance(ROOT / "instances" / "small" / "tight-l8-d16-h3.json")
    dp = dp_solve(instance)
    assert dp.objective_ticks == 102_783_000
    assert dp.stats["layout"] == "t,e,stage,replica/gathered-ends"
    assert Evaluator(instance).evaluate(dp.plan).objective_ticks == dp.objective_ticks
    racks = [[{device // 4 for device in ranks} for ranks in replicas]
             for replicas in dp.plan.placement]
    assert racks[0][0] == racks[0][1] and racks[-1][0] == racks[-1][1]
    assert all(racks[1][replica] == racks[2][replica] for replica in range(2))
    assert dp_solve(instance, layouts=_without_ends(instance)).objective_ticks == 103_857_000


def test_rank_map_realises_a_gathered_ends_placement():
    """Under every framework rank order the rank map puts each global rank on the device the
    gathered-ends placement gives its role, every device once, and its launcher agents
    cover the world."""
    assert_rank_maps_realise(-1, "ends_gathered", ((IntraConfig(1, 1), 5, 4),
                                                   (IntraConfig(2, 1), 4, 3)))
