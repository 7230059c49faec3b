"""NEST's shipped manual configurations (DESIGN §6) run by ``fixed``, beside ``manual`` and ``dp``.

Usage (from the repository root)::

    .venv/bin/python scripts/reports/paper_published_manual.py

Solves the five TPUv4 fat-tree instances at 128 devices with ``fixed`` at
NEST's published (p, d, t[, e]), with our ``manual`` rules and with the DP,
and writes ``reports/paper/published_manual.md`` (throughput in samples/s;
every plan refereed by the evaluator through ``backends.solve``).
"""

from __future__ import annotations

from pathlib import Path

from nest_cp.cost import terms as cost
from nest_cp.harness.compare import MISSING
from nest_cp.io.readers import load_instance
from nest_cp.solvers.registry import SolveOptions, solve

ROOT = Path(__file__).resolve().parents[2]
HERE = ROOT / "reports" / "paper"  # output
INSTANCES = ROOT / "instances" / "paper"
# DESIGN §6: NEST's manual plans (p, d, t) at 128 devices; Mixtral runs with EP 4
PUBLISHED = {"bert-large": (8, 16, 1), "gpt3-175b": (32, 1, 4), "llama2-7b": (8, 16, 1),
             "llama3-70b": (80, 1, 1), "mixtral-8x7b": (32, 1, 1, 4)}


def _throughput(result, global_batch: int, tick_s: float) -> str:
    if result.objective_ticks is None:
        return MISSING
    return f"{cost.throughput(global_batch, result.objective_ticks, tick_s):.3f}"


def _degrees(plan) -> str:
    if plan is None:
        return MISSING
    text = f"({plan.num_stages}, {plan.num_replicas}, {plan.config.tp}"
    return text + (f", {plan.config.ep})" if plan.config.ep > 1 else ")")


def main() -> None:
    lines = ["# NEST's published manual configurations under our cost model", "",
             "TPUv4 fat-tree, 128 devices. Throughput in samples/s; (p, d, t[, e]).", "",
             "| model | published | fixed | manual | manual rule | dp | dp plan |",
             "|---|---|---|---|---|---|---|"]
    for model, degrees in PUBLISHED.items():
        instance = load_instance(INSTANCES / f"{model}--nest-tpuv4-fattree--128.json")
        batch, tick_s = instance.training.global_batch, instance.training.tick_s
        fixed = solve(instance, "fixed", SolveOptions(extra={"degrees": degrees}))
        manual = solve(instance, "manual")
        best = solve(instance, "dp")
        lines.append(" | ".join([
            f"| {model}", str(degrees), _throughput(fixed, batch, tick_s),
            _throughput(manual, batch, tick_s), _degrees(manual.plan),
            _throughput(best, batch, tick_s), _degrees(best.plan)]) + " |")
    (HERE / "published_manual.md").write_text("\n".join(lines) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
