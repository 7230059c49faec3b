"""Structured space v3c (issue 31): rank layouts with a node tail.

A layout with a node tail (:class:`nest_cp.model.plan.NodeTail`) puts the last m = n_0 / a
stages of each replica in one node and runs the r = S − m stages before them in blocks
packed into tier-1 domains (the plans of the certificate on BERT-large at 512 and 1,024
TPUv4 devices, class P of reports/structured_v3_analysis.md restricted to one
segmentation per shape).  These tests check the placement against a rank-by-rank
reading of that definition and the rule for where it applies, the DP's geometries against
the device array's, the DP against brute force, structured CP-SAT and the MILP on seeded
instances where a node tail strictly beats every v3b-R layout, the two grid rows, and that
the exports' rank map realises such a placement.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from nest_cp.cost.evaluate import Evaluator
from nest_cp.dp.planner import solve as dp_solve
from nest_cp.harness.generators import random_instance
from nest_cp.io.readers import load_instance, plan_from_dict
from nest_cp.model.instance import IntraConfig
from nest_cp.model.network import NetworkModel
from nest_cp.model.plan import NEST_LAYOUT, Dim, NodeTail, RankLayout, structured_layouts
from tests.test_dp_v3a import (
    assert_arrayed_geometry,
    assert_new_layout_wins_as_brute_force,
    assert_rank_maps_realise,
    assert_structured_exact_agree,
)

ROOT = Path(__file__).resolve().parent.parent
# seeded three-tier instances (5 layers, random_instance) where a node tail wins strictly
TAIL_CASES = [(24, (2, 2, 2)), (25, (2, 2, 2)), (24, (2, 2, 3))]


def _tail_layout(radices: tuple[int, ...]) -> RankLayout:
    return RankLayout(NEST_LAYOUT.order, node_tail=NodeTail(
        radices[0], radices[1], math.prod(radices[1:])))


def _reference_positions(radices, config: IntraConfig, num_stages: int, dp: int):
    """The definition read rank by rank: head runs placed in turn, a new block at the next
    free block slot of a tier-1 domain (c = ⌊n_1 / b⌋ slots at its start), the tails on
    the free nodes in increasing order; None where it does not apply."""
    node, domain_nodes = radices[0], radices[1]
    num_nodes = math.prod(radices[1:])
    width = config.devices
    if node % width or num_stages <= node // width:
        return None
    head = num_stages - node // width
    run = width * head
    block = math.lcm(run, node)
    runs_per_block, block_nodes = block // run, block // node
    per_domain = domain_nodes // block_nodes
    if per_domain < 1:
        return None
    head_start, used = [], set()
    for replica in range(dp):
        block_index = replica // runs_per_block
        first_node = (block_index // per_domain) * domain_nodes \
            + (block_index % per_domain) * block_nodes
        used.update(range(first_node, first_node + block_nodes))
        head_start.append(first_node * node + (replica % runs_per_block) * run)
    free = [index for index in range(num_nodes) if index not in used]
    if max(used) >= num_nodes or len(free) < dp:
        return None
    return [[[head_start[replica] + width * stage + rank if stage < head
              else free[replica] * node + width * (stage - head) + rank
              for rank in range(width)] for replica in range(dp)]
            for stage in range(num_stages)]


@pytest.mark.parametrize("radices", [(8, 4, 16), (8, 4, 32), (4, 3, 2), (2, 2, 2), (4, 2, 3)])
def test_node_tail_positions_follow_the_definition(radices):
    """Wherever the node tail applies its positions are the rank-by-rank definition's, a
    bijection into the network; elsewhere they are the order's alone (t,e,stage,replica)."""
    layout = _tail_layout(radices)
    num_devices = math.prod(radices)
    applied = 0
    for width in (1, 2, 4):
        config = IntraConfig(width, 1)
        for num_stages in range(1, 16):
            for dp in range(1, num_devices // (width * num_stages) + 1):
                expected = _reference_positions(radices, config, num_stages, dp)
                positions = layout.positions(config, num_stages, dp)
                assert layout.tailed(config, num_stages, dp) == (expected is not None)
                if expected is None:
                    assert (positions == NEST_LAYOUT.positions(config, num_stages, dp)).all()
                    continue
                applied += 1
                assert positions.tolist() == expected
                assert len(set(positions.flat)) == positions.size
                assert positions.max() < num_devices
    assert applied >= 5


def test_the_bert_large_512_tpuv4_shape_packs_as_the_certificates_plan():
    """At S = 10, d = 51 on nest-tpuv4-fattree (8-device nodes, 4 per group, 512 devices):
    stages 0-1 of four replicas share a node (nodes 0-12), stages 2-9 of each replica fill
    one node (nodes 13-63); at S = 14, d = 72 (1,024 devices) four six-stage head runs take
    three nodes of each of the first 18 groups and the tails every other node."""
    config = IntraConfig(1, 1)
    positions = _tail_layout((8, 4, 16)).positions(config, 10, 51)[:, :, 0]
    assert sorted(set((positions[:2] // 8).flat)) == list(range(13))
    assert ((positions[2:] // 8) == 13 + np.arange(51)).all()
    positions = _tail_layout((8, 4, 32)).positions(config, 14, 72)[:, :, 0]
    head_nodes = positions[:6] // 8
    assert sorted(set(head_nodes.flat)) == [group * 4 + k for group in range(18)
                                            for k in range(3)]
    assert ((head_nodes[0] // 4) == (head_nodes[-1] // 4)).all()  # a run in one group
    assert (positions[6:] // 8 == positions[6] // 8).all()  # a tail in one node


def test_a_node_tail_is_refused_off_its_order():
    """Only t,e,stage,replica on the canonical device order, spare last, no replica block
    takes a node tail; sizes below 1 are refused."""
    tail = NodeTail(8, 4, 64)
    for kwargs in ({"order": (Dim.TP, Dim.EP, Dim.REPLICA, Dim.STAGE)},
                   {"order": NEST_LAYOUT.order, "digits": (2, 1)},
                   {"order": NEST_LAYOUT.order, "spare_first": True},
                   {"order": NEST_LAYOUT.order, "replica_block": 2}):
        with pytest.raises(ValueError, match="node tail"):
            RankLayout(node_tail=tail, **kwargs)
    with pytest.raises(ValueError, match="node_size"):
        NodeTail(0, 4, 64)


def test_structured_layouts_end_with_the_node_tail():
    """After v3b-R's layouts (unchanged), one layout with a node tail, named for it (then
    v3d's gathered ends, test_dp_gathered_ends); none on two tiers or graphs."""
    layouts = structured_layouts((4, 2, 2))
    assert layouts[-2].name == "t,e,stage,replica/node-tail"
    assert layouts[-2].node_tail == NodeTail(4, 2, 4)
    assert all(layout.node_tail is None for layout in layouts[:-2] + layouts[-1:])
    assert len({layout.name for layout in layouts}) == len(layouts)
    assert not any(layout.node_tail for layout in structured_layouts((4, 2)))
    assert not any(layout.node_tail for layout in structured_layouts(None))


@pytest.mark.parametrize("seed", range(4))
def test_dp_geometries_of_node_tails_equal_those_of_the_placement(seed):
    """The DP's geometries and data-parallel group paths of the node-tail layout equal those
    of its device array where the tail applies, and those of t,e,stage,replica elsewhere."""
    assert_arrayed_geometry(seed, [(4, 3, 4), (8, 2, 3), (2, 2, 2, 3), (4, 4, 4)][seed], -2,
                            "tailed", [2, 3, 5, 7, 9], 60)


@pytest.mark.parametrize("seed", range(3))
def test_node_tails_from_a_few_replicas_equal_the_placement(seed):
    """With many replicas against the period (replicas alike in their run's start modulo
    the period and in the tiers joining their head to their tail placed once), the
    geometries of node tails and their data-parallel groups (from the stages' first
    positions) equal those of the whole device array, wrapped or not."""
    assert_arrayed_geometry(seed, [(2, 4, 8), (4, 3, 6), (2, 2, 16)][seed], -2,
                            "tailed", [2, 3, 4, 5], 40)


def _without_tails(instance) -> tuple[RankLayout, ...]:
    return tuple(layout for layout in NetworkModel(instance.cluster).structured_layouts
                 if layout.node_tail is None)


@pytest.mark.parametrize(("seed", "tier_sizes"), TAIL_CASES)
def test_dp_equals_brute_force_where_a_node_tail_wins(seed, tier_sizes):
    """On seeded three-tier instances the DP's plan uses the node tail and costs strictly
    less than its best over the v3b-R layouts (both priced by the evaluator); brute force
    over every structured placement finds the same optimum."""
    instance = random_instance(seed, num_layers=5, tier_sizes=tier_sizes)
    assert_new_layout_wins_as_brute_force(instance, "/node-tail", _without_tails(instance))


def test_dp_equals_structured_cpsat_and_milp_where_a_node_tail_wins():
    """Structured CP-SAT (one worker, fixed seed) and the MILP (HiGHS) select among the
    placements with the node tail and prove the DP's optimum."""
    seed, tier_sizes = TAIL_CASES[0]
    assert_structured_exact_agree(random_instance(seed, num_layers=5, tier_sizes=tier_sizes))


@pytest.mark.parametrize("name", ["bert-large--nest-tpuv4-fattree--512",
                                  "bert-large--nest-tpuv4-fattree--1024"])
def test_node_tails_reach_the_certificates_plans_on_bert_large_tpuv4(name):
    """The two grid rows v3b-R left 6.1% and 3.6% above the certificate's best plan
    (reports/paper/certified.json): with node tails the DP's plan costs no more than that
    plan (both priced by the evaluator) and has a node tail; without them it costs more."""
    entry = next(row for row in json.loads(
        (ROOT / "reports" / "paper" / "certified.json").read_text())["instances"]
        if row["instance"] == name)
    instance = load_instance(ROOT / entry["path"])
    evaluator = Evaluator(instance)
    certificate = evaluator.evaluate(plan_from_dict(entry["plan"])).objective_ticks
    dp = dp_solve(instance)
    assert evaluator.evaluate(dp.plan).objective_ticks == dp.objective_ticks <= certificate
    assert dp.stats["layout"] == "t,e,stage,replica/node-tail"
    assert dp_solve(instance, layouts=_without_tails(instance)).objective_ticks > certificate


def test_rank_map_realises_a_node_tail_placement():
    """Under every framework rank order the rank map puts each global rank on the device the
    node-tail placement gives its role, every device once, and its launcher agents cover
    the world."""
    assert_rank_maps_realise(-2, "tailed", ((IntraConfig(1, 1), 5, 4), (IntraConfig(2, 1), 3, 4)))
