"""How v3 candidate layouts export: torchrun agents per host under Megatron's rank orders.

For a few plans of ``reports/structured_v3_analysis.md`` (the DP's v2 plan and the v3
candidate that beat it), builds the placement with :mod:`benchmarks.structured_v3`,
checks its price with the evaluator, and counts, with
:func:`nest_cp.cli.export.ranks.rank_map` (eight GPUs per host), the launcher agents and
the hosts that need more than one agent, under Megatron-LM's default order tp-cp-ep-dp-pp
and under ``--use-tp-pp-dp-mapping`` (tp-cp-ep-pp-dp).

Run: ``python -m benchmarks.structured_v3_ranks``.
"""

from __future__ import annotations

import json

from benchmarks.structured_v3 import CERTIFIED, ROOT
from nest_cp.cli.export.megatron import DEFAULT_ORDER, TP_PP_DP_ORDER
from nest_cp.cli.export.ranks import rank_map
from nest_cp.cli.export.view import plan_view
from nest_cp.cost.evaluate import evaluate
from nest_cp.io.readers import load_instance, plan_from_dict
from nest_cp.model.plan import all_layouts
from nest_cp.solvers.certify.layouts import (
    SplitLayout,
    device_orders,
    map_positions,
    padded_positions,
    piecewise,
)

GPUS_PER_HOST = 8
# (instance, class, shape the candidate is built at: "dp" or "best")
CASES = (
    ("gpt3-175b--nest-h100-spineleaf--64", "D", "dp"),
    ("gpt3-175b--nest-h100-spineleaf--512", "D", "dp"),
    ("gpt3-175b--nest-h100-spineleaf--512", "R", "dp"),
    ("bert-large--nest-h100-spineleaf--1024", "Pad", "best"),
    ("bert-large--nest-tpuv4-fattree--512", "P", "best"),
)


def candidate(instance, plan, name: str):
    """The placement of class ``name`` that the analysis found best for this row."""
    config, stages, replicas = plan.config, plan.num_stages, plan.num_replicas
    devices = device_orders(instance.cluster.network, instance.cluster.num_devices)
    layouts = {layout.name: layout for layout in all_layouts()}
    if name == "D":
        layout = layouts["t,e,replica,stage" if replicas == 1 else "t,e,stage,replica"]
        return map_positions(layout.positions(config, stages, replicas), devices["021"])
    if name == "R":
        layout = SplitLayout(("t", "r_in", "s_in", "r_out"), stages, 2)
        return map_positions(layout.positions(config.tp, config.ep, stages, replicas),
                             devices["021"])
    if name == "Pad":
        return map_positions(padded_positions(layouts["t,e,stage,replica"], 3, config, stages,
                                              replicas, GPUS_PER_HOST), devices["012"])
    wanted = "rot=1 cuts=(8,) orders=['t,e,stage,replica', 't,e,replica,stage'] dev=012"
    return next(placement for label, placement in piecewise(plan, {"012": devices["012"]})
                if label == wanted)


def agents(instance, plan) -> str:
    view = plan_view(instance, plan)
    cells = []
    for order in (DEFAULT_ORDER, TP_PP_DP_ORDER):
        ranks = rank_map(view, order, GPUS_PER_HOST)
        cells.append(f"{len(ranks.nodes)} agents, {len(ranks.split_hosts)} split hosts")
    return " | ".join(cells)


def main() -> None:
    rows = {row["instance"]: row for row in json.loads(CERTIFIED.read_text())["instances"]}
    print("| instance | plan | T (evaluator) | tp-cp-ep-dp-pp | tp-cp-ep-pp-dp |")
    print("|---|---|---:|---|---|")
    for name, cls, shape in CASES:
        row = rows[name]
        instance = load_instance(ROOT / row["path"])
        dp_plan = plan_from_dict(row["dp"]["plan"])
        print(f"| {name} | DP (v2) | {evaluate(instance, dp_plan).objective_ticks:,} | "
              f"{agents(instance, dp_plan)} |")
        base = dp_plan if shape == "dp" else plan_from_dict(row["plan"])
        plan = base.with_placement(candidate(instance, base, cls))
        print(f"| {name} | {cls} | {evaluate(instance, plan).objective_ticks:,} | "
              f"{agents(instance, plan)} |")


if __name__ == "__main__":
    main()
