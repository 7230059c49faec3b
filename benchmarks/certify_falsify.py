"""Try to beat the certified optima: a local search over the full space, priced by the evaluator.

`python -m benchmarks.certify_falsify [--certified reports/paper/certified.json]
[--moves N] [--seed S]` starts from each instance's certified best plan (and from
the DP's plan) and walks the full space with random moves — swap the devices of two
ranks, move a rank to an idle device, shift a layer across a stage boundary, toggle a
stage's recomputation — accepting moves that do not make the plan slower.  Every
plan is priced by :func:`nest_cp.cost.evaluate.evaluate`.  A plan strictly below the
certified lower bound would falsify the bound; the report says whether any was
found.  Writes ``reports/paper/certified_falsify.{json,md}``.  Not part of ``make bench``.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import random
import time
from pathlib import Path

from nest_cp.cost.evaluate import evaluate
from nest_cp.io.readers import load_instance, plan_from_dict
from nest_cp.model.instance import RecomputeMode
from nest_cp.model.network import NetworkModel
from nest_cp.model.plan import Plan, Stage

ROOT = Path(__file__).resolve().parent.parent


def _moved(plan: Plan, rng: random.Random, num_devices: int, modes) -> Plan | None:
    """One random neighbour of ``plan`` (None when the move does not apply)."""
    placement = [[list(ranks) for ranks in replicas] for replicas in plan.placement]
    slots = [(s, r, j) for s, replicas in enumerate(placement)
             for r, ranks in enumerate(replicas) for j in range(len(ranks))]
    kind = rng.random()
    if kind < 0.45:  # swap two ranks' devices
        (s1, r1, j1), (s2, r2, j2) = rng.sample(slots, 2)
        placement[s1][r1][j1], placement[s2][r2][j2] = placement[s2][r2][j2], \
            placement[s1][r1][j1]
    elif kind < 0.7:  # move a rank to an idle device
        used = {d for replicas in placement for ranks in replicas for d in ranks}
        idle = [d for d in range(num_devices) if d not in used]
        if not idle:
            return None
        s, r, j = rng.choice(slots)
        placement[s][r][j] = rng.choice(idle)
    elif kind < 0.9:  # shift one layer across a stage boundary
        if plan.num_stages < 2:
            return None
        stages = list(plan.stages)
        b = rng.randrange(plan.num_stages - 1)
        left, right = stages[b], stages[b + 1]
        if rng.random() < 0.5 and left.last_layer > left.first_layer:
            stages[b] = dataclasses.replace(left, last_layer=left.last_layer - 1)
            stages[b + 1] = dataclasses.replace(right, first_layer=right.first_layer - 1)
        elif right.last_layer > right.first_layer:
            stages[b] = dataclasses.replace(left, last_layer=left.last_layer + 1)
            stages[b + 1] = dataclasses.replace(right, first_layer=right.first_layer + 1)
        else:
            return None
        return dataclasses.replace(plan, stages=tuple(stages))
    else:  # toggle a stage's recomputation
        stages = list(plan.stages)
        s = rng.randrange(len(stages))
        options = [m for m in modes if m is not stages[s].recompute]
        if not options:
            return None
        stages[s] = Stage(stages[s].first_layer, stages[s].last_layer, rng.choice(options))
        return dataclasses.replace(plan, stages=tuple(stages))
    return plan.with_placement(tuple(tuple(tuple(ranks) for ranks in replicas)
                                     for replicas in placement))


def search(record: dict, start: dict, moves: int, seed: int) -> dict:
    instance = load_instance(ROOT / record["path"])
    network = NetworkModel(instance.cluster)
    rng = random.Random(seed)
    plan = plan_from_dict(start)
    current = evaluate(instance, plan, network).objective_ticks
    best, evaluated = current, 0
    modes = [m for m in RecomputeMode if m in instance.training.recompute_modes]
    began = time.monotonic()
    for _ in range(moves):
        neighbour = _moved(plan, rng, instance.cluster.num_devices, modes)
        if neighbour is None:
            continue
        evaluation = evaluate(instance, neighbour, network)
        evaluated += 1
        if evaluation.feasible and evaluation.objective_ticks <= current:
            plan, current = neighbour, evaluation.objective_ticks
            best = min(best, current)
    return {"best": best, "evaluated": evaluated, "seconds": round(time.monotonic() - began, 1),
            "below_bound": record["bound_ticks"] is not None and best < record["bound_ticks"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--certified", type=Path,
                        default=ROOT / "reports" / "paper" / "certified.json")
    parser.add_argument("--moves", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    document = json.loads(args.certified.read_text())
    rows = []
    for record in document["instances"]:
        if record["plan"] is None:
            continue
        row = {"instance": record["instance"], "bound": record["bound_ticks"],
               "certified_best": record["objective_ticks"]}
        row["from_best"] = search(record, record["plan"], args.moves, args.seed)
        row["from_dp"] = search(record, record["dp"]["plan"], args.moves, args.seed)
        rows.append(row)
        print(row, flush=True)
    out = args.certified.parent
    (out / "certified_falsify.json").write_text(json.dumps(rows, indent=1) + "\n")
    falsified = [r["instance"] for r in rows
                 if r["from_best"]["below_bound"] or r["from_dp"]["below_bound"]]
    lines = ["# Local search against the certified bounds", "",
             f"{args.moves} random moves per start (swap two ranks' devices, move a rank to "
             f"an idle device, shift a layer across a stage boundary, toggle recomputation), "
             f"accepting moves that are not slower; every plan priced by the evaluator; "
             f"seed {args.seed}. Starts: the certified best plan and the DP plan.", "",
             f"Plans found below the certified lower bound: "
             f"{', '.join(falsified) if falsified else 'none'}.", "",
             "| instance | certified bound (ms) | best from best | best from DP | evaluated |",
             "|---|---|---|---|---|"]
    for row in rows:
        lines.append(f"| {row['instance']} | {row['bound'] / 1e6:.3f} | "
                     f"{row['from_best']['best'] / 1e6:.3f} | {row['from_dp']['best'] / 1e6:.3f}"
                     f" | {row['from_best']['evaluated'] + row['from_dp']['evaluated']} |")
    (out / "certified_falsify.md").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
