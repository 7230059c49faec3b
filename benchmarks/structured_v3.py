"""Issue 31's analysis: which placements the full-space optima use that structured space v2 lacks.

Reads the certificate's best plans and the DP's plans stored in
``reports/paper/certified.json`` (``nest-cp verify instances/paper --certify-full``), and
for each instance where the certificate beat the DP ("best from: relaxation"):

1. characterises both placements on the hierarchical network: per stage, the members of
   its data-parallel group in each tier-0 node (the k of docs/cost-model.md §5 a is the
   fewest in any node the group touches) and in each tier-1 domain, how many stages share a
   node, how many nodes are partly used, how many nodes one stage replica spans;
2. prices, with the evaluator (``nest_cp.cost.evaluate``), candidate layout classes at
   the fixed shape (configuration, b, z, v, S, d, split, recompute) of the certificate's
   plan and of the DP's plan.  A class's layouts are mixed-radix orders of *split*
   dimensions: the stage index s = s_in + a·s_out and the replica index
   r = r_in + k·r_out, with 1 <= a <= S, 1 <= k <= d and radices ceil(S/a), ceil(d/k)
   for the outer digits (so a ∤ S or k ∤ d leaves holes: partly used nodes).  The
   device is the canonical order's at that position (ids 0..N−1 on a hierarchical
   network); a layout whose largest position is >= N does not fit.

   - ``v2``: a = S, k = d (the 24 orders of (t, e, stage, replica));
   - ``R``: replica blocks, a = S, any k with 2 <= k < d (orders of t, e, r_in, stage, r_out);
   - ``Rdiv``: as ``R`` with k | d (no holes);
   - ``S``: stage blocks, k = d, 2 <= a < S (orders of t, e, s_in, replica, s_out);
   - ``SR``: both, 2 <= a < S and 2 <= k < d;
   - ``D``: v2's orders read through a permuted canonical device order (the tier digits
     above tier 0 reordered, :func:`device_orders`); every class below and R, S, SR are
     priced with every such order;
   - ``O``: D with the positions shifted by multiples of the node size (spare devices
     first); ``Pad``: D with the order's inner block padded to node boundaries;
   - ``P``: piecewise: stages rotated, cut into at most three segments, each laid out by
     (t, e, stage, replica) or (t, e, replica, stage) in its own block of positions
     (enumerated only for S <= ``--max-piecewise-stages``).

   The best price of a class at these shapes is an upper bound on what a DP exact over
   that class would find (the DP also searches every other shape and split).

Run: ``python -m benchmarks.structured_v3 [--instances NAME ...] [--classes ...]
[--out FILE]``, ``--small NAME ...`` for ``instances/small`` rows (CP-SAT's full-space
plan instead of the certificate's), ``--table FILE ...`` for the markdown table;
``reports/structured_v3_analysis.md`` lists the exact commands behind its numbers.
"""

from __future__ import annotations

import argparse
import collections
import json
import logging
import time
from pathlib import Path

from nest_cp.cost.evaluate import Evaluator
from nest_cp.dp.planner import solve as dp_solve
from nest_cp.io.readers import load_instance, plan_from_dict
from nest_cp.io.writers import plan_to_dict
from nest_cp.model.instance import HierarchicalNetwork
from nest_cp.model.result import SolveOptions, Space
from nest_cp.solvers.certify.layouts import device_orders, placements
from nest_cp.solvers.cpsat import solve as cpsat_solve

logger = logging.getLogger(__name__)

ROOT = Path(__file__).resolve().parent.parent
CERTIFIED = ROOT / "reports" / "paper" / "certified.json"
SMALL = ROOT / "instances" / "small"
OUT = ROOT / "reports" / "structured_v3_run.json"  # the committed analysis JSON is merged
MAX_PIECEWISE_STAGES = 12  # class P enumerates S·C(S−1, <=2)·2^3 layouts: capped
CLASSES = ("v2", "D", "O", "Pad", "Rdiv", "R", "S", "SR", "P")
V3A = ("v2", "D", "O", "Pad", "Rdiv", "R", "S", "SR")  # one global placement per choice


def characterise(plan_dict: dict, tier_sizes: tuple[int, ...]) -> dict:
    """Members per tier-0 node / tier-1 domain of each stage's DP group, node sharing, spans."""
    placement = plan_dict["placement"]
    node, domain = tier_sizes[0], tier_sizes[0] * tier_sizes[1]
    per_stage, stages_of_node, used = [], collections.defaultdict(set), collections.Counter()
    replica_spans = collections.Counter()
    for stage, replicas in enumerate(placement):
        for devices in replicas:
            replica_spans[len({device // node for device in devices})] += 1
            for device in devices:
                stages_of_node[device // node].add(stage)
                used[device // node] += 1
        # the DP group of rank j = 0 (every rank j's group has the same counts under a layout)
        in_node = collections.Counter(replicas_[0] // node for replicas_ in replicas)
        in_domain = collections.Counter(replicas_[0] // domain for replicas_ in replicas)
        per_stage.append({"k_node": min(in_node.values()), "max_node": max(in_node.values()),
                          "nodes": len(in_node), "k_domain": min(in_domain.values()),
                          "domains": len(in_domain)})
    return {
        "S": len(placement), "d": plan_dict["dp"], "tp": plan_dict["config"]["tp"],
        "ep": plan_dict["config"]["ep"], "b": plan_dict["microbatch"], "z": plan_dict["zero"],
        "per_stage": per_stage,
        "stages_with_k_ge_2": sum(entry["k_node"] >= 2 for entry in per_stage),
        "stages_packed_somewhere": sum(entry["max_node"] >= 2 for entry in per_stage),
        "stages_per_node": dict(sorted(collections.Counter(
            len(stages) for stages in stages_of_node.values()).items())),
        "nodes_used": len(used),
        "partly_used_nodes": sum(count < node for count in used.values()),
        "nodes_per_replica": dict(sorted(replica_spans.items())),
    }


def price_classes(evaluator: Evaluator, plan_dict: dict, devices: dict[str, list[int]],
                  node: int, max_block: int, classes: tuple[str, ...],
                  max_piecewise: int = MAX_PIECEWISE_STAGES) -> dict:
    """Best evaluator price of each class at the shape and split of ``plan_dict``."""
    plan = plan_from_dict(plan_dict)
    out = {}
    for name in classes:
        best, best_name, count, started = None, None, 0, time.perf_counter()
        for layout_name, placement in placements(name, plan, devices, node, max_block,
                                                    max_piecewise):
            if placement is None:  # a position beyond the last device: does not fit
                continue
            count += 1
            ticks = evaluator.evaluate(plan.with_placement(placement)).objective_ticks
            if ticks is not None and (best is None or ticks < best):
                best, best_name = ticks, layout_name
        out[name] = {"ticks": best, "layout": best_name, "layouts_priced": count,
                     "wall_s": round(time.perf_counter() - started, 2)}
    return out


def analyse(entry: dict, max_block: int, classes: tuple[str, ...],
            shapes: tuple[str, ...] = ("best", "dp"),
            max_piecewise: int = MAX_PIECEWISE_STAGES, replicas: int | None = None) -> dict:
    """Characterise and price one row; ``replicas`` replaces d of the certificate's
    plan (its split and the rest kept, placement dropped): a third shape to price at."""
    instance = load_instance(ROOT / entry["path"])
    network = instance.cluster.network
    if not isinstance(network, HierarchicalNetwork):
        raise ValueError(f"{entry['instance']}: expected a hierarchical network")
    tier_sizes = tuple(tier.size for tier in network.tiers[:2])
    evaluator = Evaluator(instance)
    num_devices = instance.cluster.num_devices
    devices = device_orders(network, num_devices)
    row = {"instance": entry["instance"], "dp_ticks": entry["dp"]["objective_ticks"],
           "best_ticks": entry["objective_ticks"], "bound_ticks": entry["bound_ticks"],
           "status": entry["status"],
           "tier_sizes": tier_sizes}
    plans = {"best": entry["plan"], "dp": entry["dp"]["plan"]}
    if replicas is not None:
        plans["best"] = {key: value for key, value in entry["plan"].items()
                         if key != "placement"} | {"dp": replicas}
        row["note"] = f"'best' shape: the certificate's plan with d = {replicas}"
    for which in shapes:
        plan_dict = plans[which]
        if "placement" in plan_dict:
            checked = evaluator.evaluate(plan_from_dict(plan_dict)).objective_ticks
            row[f"{which}_evaluated_ticks"] = checked
            row[f"{which}_placement"] = characterise(plan_dict, tier_sizes)
        row[f"{which}_shape_classes"] = price_classes(evaluator, plan_dict, devices,
                                                      tier_sizes[0], max_block, classes,
                                                      max_piecewise)
    return row


def small_entry(path: Path, time_limit_s: float) -> dict:
    """An entry like certified.json's for an ``instances/small`` file: the DP's plan and
    CP-SAT's full-space plan (hinted with the DP's, one worker, seed 0); its status is
    recorded, and only an OPTIMAL one is a full-space optimum."""
    instance = load_instance(path)
    dp = dp_solve(instance)
    full = cpsat_solve(instance, SolveOptions(space=Space.FULL, time_limit_s=time_limit_s,
                                              hint=dp.plan))
    return {"instance": path.stem, "path": str(path.relative_to(ROOT)),
            "status": full.status.value, "objective_ticks": full.objective_ticks,
            "bound_ticks": full.bound_ticks, "plan": plan_to_dict(full.plan),
            "dp": {"objective_ticks": dp.objective_ticks, "plan": plan_to_dict(dp.plan)}}


def table(rows: list[dict]) -> list[str]:
    """Markdown: per instance, each class's best price (min over the two shapes) against
    the best plan known (the certificate's), in %; negative = better than it.  Every
    class but v2 is read together with v2 and D (it contains their layouts in spirit:
    its own enumeration skips what they already price); ``v3a`` is the union of every
    class but P, ``all`` of every class."""
    classes = [name for name in CLASSES
               if any(name in row.get(f"{w}_shape_classes", {}) for row in rows
                      for w in ("best", "dp"))] + ["v3a", "all"]
    lines = ["| instance | T_dp / best − 1 | " + " | ".join(classes) + " |",
             "|---|---:|" + "---:|" * len(classes)]
    gaps: dict[str, list[float]] = {name: [] for name in ("DP", *classes)}
    for row in rows:
        cells = []
        gaps["DP"].append(row["dp_ticks"] / row["best_ticks"] - 1)
        for name in classes:
            union = {"v2": ("v2",), "all": CLASSES, "v3a": V3A}.get(name, (name, "v2", "D"))
            entries = [row[f"{w}_shape_classes"][member] for w in ("best", "dp")
                       for member in union if member in row.get(f"{w}_shape_classes", {})]
            prices = [entry["ticks"] for entry in entries if entry["ticks"] is not None]
            own = [row[f"{w}_shape_classes"][member]["layouts_priced"]
                   for w in ("best", "dp") for member in union[:1]
                   if name not in ("all", "v3a")
                   and member in row.get(f"{w}_shape_classes", {})] or [name in ("all", "v3a")]
            ran = name in ("all", "v3a") or any(
                name in row.get(f"{w}_shape_classes", {}) for w in ("best", "dp"))
            mark = "" if sum(own) else " †"  # the class itself priced nothing here
            gap = min(prices) / row["best_ticks"] - 1 if prices else None
            if gap is not None and ran:
                gaps[name].append(gap)
            cells.append("n/r" if not ran else "–" if gap is None
                         else f"{100 * gap:+.3f}%{mark}")
        lines.append(f"| {row['instance']} | {100 * gaps['DP'][-1]:+.3f}% | "
                     + " | ".join(cells) + " |")
    lines.append("| within 0.5% of best | " + " | ".join(
        f"{sum(gap <= 0.005 for gap in gaps[name])}/{len(gaps[name])}"
        for name in ("DP", *classes)) + " |")
    lines.append("| worst | " + " | ".join(
        f"{100 * max(gaps[name]):+.3f}%" if gaps[name] else "–"
        for name in ("DP", *classes)) + " |")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--instances", nargs="*", help="names (default: every 'relaxation' row)")
    parser.add_argument("--max-block", type=int, default=16,
                        help="non-divisor inner blocks a, k up to this size (default 16)")
    parser.add_argument("--shapes", nargs="*", default=["best", "dp"], choices=["best", "dp"],
                        help="price at the certificate's ('best') and/or the DP's shape")
    parser.add_argument("--max-piecewise-stages", type=int, default=MAX_PIECEWISE_STAGES,
                        help=f"class P only for S up to this (default {MAX_PIECEWISE_STAGES})")
    parser.add_argument("--replicas", type=int,
                        help="price the certificate's plan at this d instead of its own")
    parser.add_argument("--classes", nargs="*", default=list(CLASSES), choices=CLASSES)
    parser.add_argument("--small", nargs="*", default=[],
                        help="instances/small names: analyse the DP's plan against CP-SAT's "
                             "full-space plan instead of certified.json's rows")
    parser.add_argument("--time-limit", type=float, default=120.0,
                        help="CP-SAT seconds per --small instance (default 120)")
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--table", nargs="*", type=Path,
                        help="print the markdown table of these result files and stop")
    parser.add_argument("--merge-out", type=Path,
                        help="with --table: also write the merged rows here")
    args = parser.parse_args()
    if args.table:
        merged: dict[str, dict] = {}
        for path in args.table:  # runs of other classes on the same rows merge
            for row in json.loads(path.read_text())["rows"]:
                into = merged.setdefault(row["instance"], row)
                for which in ("best", "dp"):
                    key = f"{which}_shape_classes"
                    if key in row:
                        into.setdefault(key, {}).update(row[key])
        print("\n".join(table(list(merged.values()))))
        if args.merge_out:
            args.merge_out.write_text(json.dumps(
                {"merged_from": [str(path) for path in args.table],
                 "rows": list(merged.values())}, indent=1) + "\n")
        return
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    certified = json.loads(CERTIFIED.read_text())["instances"]
    if args.small:
        chosen = [small_entry(SMALL / f"{name}.json", args.time_limit) for name in args.small]
    else:
        chosen = [entry for entry in certified
                  if (entry["instance"] in args.instances if args.instances
                      else entry.get("plan_source") == "relaxation")]
    rows = []
    for entry in chosen:
        rows.append(analyse(entry, args.max_block, tuple(args.classes),
                            tuple(args.shapes), args.max_piecewise_stages, args.replicas))
        logger.info("%s done", entry["instance"])
        args.out.write_text(json.dumps({"max_block": args.max_block, "rows": rows},
                                       indent=1) + "\n")


if __name__ == "__main__":
    main()
