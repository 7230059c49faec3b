"""nest-cp's predictions against published measured training runs, from stored inputs only.

Usage (from the repository root)::

    .venv/bin/python reports/fidelity/generate.py [--no-calibrated]

Reads ``reports/fidelity/inputs.json`` (every row of ``../shared/fidelity/README.md`` with the
assumptions where the sources are silent) and writes ``reports/fidelity/fidelity.csv`` and
``reports/fidelity/README.md``: per row the predicted iteration time, TF/s per GPU and MFU
against the measurement, the error, the predicted first-stage memory against Megatron-LM's
theoretical formula, and the summary (mean and max absolute error, Spearman rank correlation
of predicted and measured TF/s). Predictions use the uncalibrated ``h100-sxm`` preset (its
kernel efficiencies come from datasheets and kernel microbenchmarks, never from these rows).
The optional second column fits the efficiencies on half the rows (``nest-cp calibrate``'s
least squares) and predicts the other half.
"""

from __future__ import annotations

import argparse
import csv
import json
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from nest_cp import megatron
from nest_cp.calibrate import Measurement, calibrate
from nest_cp.evaluate import evaluate
from nest_cp.hfconfig import spec_from_description
from nest_cp.model import Instance, Layer, Optimizer, Workload
from nest_cp.presets import DEVICES, MEGATRON_ADAM
from nest_cp.profiler import AttentionKind
from nest_cp.runs import Prediction, RecomputeMode, Run, build, model_flops_per_iteration, predict

HERE = Path(__file__).parent
DEVICE = "h100-sxm"


@dataclass(frozen=True)
class Row:
    run: Run
    source: str
    measured_tflops: float
    measured_mfu: float


def load_rows(path: Path) -> tuple[dict, list[Row]]:
    doc = json.loads(path.read_text())
    rows = []
    for raw in doc["rows"]:
        run = Run(name=raw["name"], model=spec_from_description(raw["model"], prefix="model"),
                  network=raw["network"], devices=raw["devices"], tp=raw["tp"], pp=raw["pp"],
                  dp=raw["dp"], ep=raw["ep"], vp=raw["vp"], microbatch=raw["mbs"],
                  global_batch=raw["global_batch"], seq_len=raw["seq_len"],
                  recompute=RecomputeMode(raw["recompute"]), zero=raw["zero"],
                  attention=AttentionKind(raw["attention"]),
                  sequence_parallel=raw["sequence_parallel"],
                  overlap_grad_reduce=raw["overlap_grad_reduce"])
        rows.append(Row(run, raw["source"], raw["measured_tflops_per_gpu"], raw["measured_mfu"]))
    return doc, rows


def megatron_memory(run: Run) -> float:
    """Megatron's theoretical first-stage memory for the run (distributed optimizer)."""
    spec = run.model
    return megatron.memory_bytes(megatron.MegatronRun(
        layers=spec.num_layers, hidden=spec.hidden, heads=spec.num_heads,
        ffn_hidden=spec.ffn_hidden, vocab=spec.vocab_shard(run.tp) * run.tp, seq=run.seq_len,
        microbatch=run.microbatch, tp=run.tp, pp=run.pp, dp=run.dp,
        num_microbatches=run.global_batch // (run.microbatch * run.dp), vp=run.vp,
        sequence_parallel=run.sequence_parallel, recompute=megatron.Recompute.SELECTIVE,
        distributed_optimizer=True, untied=not spec.tied_embeddings,
        kv_heads=spec.kv_heads, gated=spec.gated_mlp))


def spearman(x: list[float], y: list[float]) -> float:
    """Spearman's rank correlation (average ranks for ties)."""
    def ranks(values):
        order = np.argsort(values, kind="stable")
        result = np.empty(len(values))
        result[order] = np.arange(len(values), dtype=float)
        for value in set(values):  # average ties
            tied = [i for i, v in enumerate(values) if v == value]
            result[tied] = float(np.mean(result[tied]))
        return result
    rx, ry = ranks(x), ranks(y)
    return float(np.corrcoef(rx, ry)[0, 1])


def _measurement(row: Row) -> Measurement:
    return Measurement(run=row.run, measured_iteration_s=None,
                       measured_tflops_per_gpu=row.measured_tflops, row=0, device=DEVICE)


def calibrated_on_half(rows: list[Row], max_iterations: int) -> dict[str, float]:
    """Fit on the even-indexed rows, predict the odd ones (and the other way round)."""
    base = DEVICES[DEVICE]
    predicted: dict[str, float] = {}
    for train, test in ((rows[0::2], rows[1::2]), (rows[1::2], rows[0::2])):
        device = calibrate([_measurement(r) for r in train], base, MEGATRON_ADAM,
                           max_iterations=max_iterations).device
        for row in test:
            predicted[row.run.name] = predict(row.run, device, MEGATRON_ADAM).tflops_per_gpu
    return predicted


def _without_tp_collectives(instance: Instance) -> Instance:
    """The instance with every intra-layer collective removed (a diagnostic, not a model)."""
    layers = tuple(Layer(layer.name, {key: replace(profile, collectives=())
                                      for key, profile in layer.profiles.items()})
                   for layer in instance.workload.layers)
    return replace(instance, workload=Workload(instance.workload.name, layers))


def what_if(run: Run) -> tuple[float, float]:
    """TF/s per GPU (a) with TP collectives hidden, (b) also with the distributed optimizer's
    all-gather carrying bf16 weights: its reduce-scatter (4 B) + all-gather (2 B) cost what an
    all-reduce of 3 B per parameter costs. Diagnostics that size two terms the cost model does
    not have; they are not predictions and nothing is fitted."""
    device = DEVICES[DEVICE]
    rates = []
    for optimizer in (MEGATRON_ADAM, Optimizer(2, 3, 12, "rs-fp32-ag-bf16")):
        instance, plan = build(run, device, optimizer)
        seconds = evaluate(_without_tp_collectives(instance), plan).iteration_time_s
        rates.append(3 * model_flops_per_iteration(instance, plan)
                     / (seconds * run.devices_used) / 1e12)
    return rates[0], rates[1]


def _gib(value: float) -> str:
    return f"{value / 2**30:.1f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--no-calibrated", action="store_true",
                        help="skip the calibrated-on-half column")
    parser.add_argument("--max-iterations", type=int, default=8,
                        help="Levenberg-Marquardt iterations of each half's fit")
    args = parser.parse_args()
    doc, rows = load_rows(HERE / "inputs.json")
    device = DEVICES[DEVICE]
    results: list[tuple[Row, Prediction, float, float]] = []
    for row in rows:
        prediction = predict(row.run, device, MEGATRON_ADAM)
        memory_run = replace(row.run, zero=1)  # the formula's convention
        ours = predict(memory_run, device, MEGATRON_ADAM).first_stage_memory_bytes
        results.append((row, prediction, float(ours), megatron_memory(row.run)))
    diagnostics = {row.run.name: what_if(row.run) for row in rows}
    half = {} if args.no_calibrated else calibrated_on_half(rows, args.max_iterations)
    write_csv(results, half)
    write_readme(doc, results, half, diagnostics)


def _errors(results) -> list[float]:
    return [p.tflops_per_gpu / r.measured_tflops - 1 for r, p, _, _ in results]


def write_csv(results, half: dict[str, float]) -> None:
    with (HERE / "fidelity.csv").open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["row", "gpus", "tp", "pp", "dp", "measured_tflops_per_gpu",
                         "predicted_tflops_per_gpu", "error", "measured_mfu", "predicted_mfu",
                         "predicted_iteration_s", "measured_iteration_s",
                         "calibrated_half_tflops_per_gpu", "predicted_memory_gib",
                         "megatron_formula_memory_gib", "memory_error"])
        for row, p, ours, formula in results:
            measured_s = p.model_flops_per_iteration / (row.measured_tflops * 1e12
                                                        * row.run.devices_used)
            writer.writerow([row.run.name, row.run.devices_used, row.run.tp, row.run.pp,
                             row.run.dp, row.measured_tflops, f"{p.tflops_per_gpu:.1f}",
                             f"{p.tflops_per_gpu / row.measured_tflops - 1:.4f}",
                             row.measured_mfu, f"{p.mfu:.3f}", f"{p.iteration_s:.3f}",
                             f"{measured_s:.3f}",
                             f"{half[row.run.name]:.1f}" if row.run.name in half else "",
                             _gib(ours), _gib(formula), f"{ours / formula - 1:.4f}"])


def write_readme(doc: dict, results, half: dict[str, float],
                 diagnostics: dict[str, tuple[float, float]]) -> None:
    errors = _errors(results)
    rho = spearman([p.tflops_per_gpu for _, p, _, _ in results],
                   [r.measured_tflops for r, _, _, _ in results])
    memory_errors = [ours / formula - 1 for _, _, ours, formula in results]
    lines = ["# Fidelity: predictions against measured training runs", "",
             "Generated by `reports/fidelity/generate.py` from `inputs.json`; do not edit. "
             "Device: the uncalibrated `h100-sxm` preset (kernel figures from datasheets and "
             "kernel microbenchmarks, `docs/device-model.md`); optimizer Megatron-LM's 18 B per "
             "parameter; the plan of each row as its source ran it (assumptions below).", "",
             "## Summary", "",
             f"- TF/s per GPU: mean absolute error {100 * np.mean(np.abs(errors)):.1f}%, "
             f"max {100 * max(abs(e) for e in errors):.1f}%; {sum(abs(e) <= 0.10 for e in errors)}"
             f" of {len(errors)} rows within 10% (goal: all).",
             f"- Trend: Spearman rank correlation of predicted and measured TF/s {rho:.2f} "
             "(goal >= 0.7).",
             f"- Memory: first-stage memory within {100 * max(abs(e) for e in memory_errors):.1f}%"
             f" of Megatron's theoretical formula on every row (goal 5%).", ""]
    if half:
        half_errors = [half[r.run.name] / r.measured_tflops - 1 for r, _, _, _ in results]
        lines.insert(-1, f"- Calibrated on half the rows, tested on the other half: mean "
                         f"absolute error {100 * np.mean(np.abs(half_errors)):.1f}%, max "
                         f"{100 * max(abs(e) for e in half_errors):.1f}%.")
    lines += ["## Rows", "",
              "| row | GPUs | TP/PP/DP | measured TF/s | predicted TF/s | error | measured MFU "
              "| predicted MFU | iteration s | calibrated-on-half TF/s | memory GiB (ours / "
              "Megatron) | memory error |",
              "|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for row, p, ours, formula in results:
        run = row.run
        cal = f"{half[run.name]:.1f}" if run.name in half else "—"
        lines.append(f"| {run.name} | {run.devices_used} | {run.tp}/{run.pp}/{run.dp} | "
                     f"{row.measured_tflops:.1f} | {p.tflops_per_gpu:.1f} | "
                     f"{100 * (p.tflops_per_gpu / row.measured_tflops - 1):+.1f}% | "
                     f"{100 * row.measured_mfu:.0f}% | {100 * p.mfu:.1f}% | {p.iteration_s:.2f} | "
                     f"{cal} | {_gib(ours)} / {_gib(formula)} | "
                     f"{100 * (ours / formula - 1):+.1f}% |")
    lines += ["", "## Diagnostics: two terms the cost model does not have", "",
              "Not predictions (nothing is fitted): the same evaluation (a) with every "
              "tensor-parallel collective removed (the Megatron rows ran with "
              "`--tp-comm-overlap`), (b) also pricing the distributed optimizer's gradient "
              "sync as Megatron runs it, a reduce-scatter of fp32 gradients plus an all-gather "
              "of bf16 weights (3 B per parameter as an all-reduce) instead of DESIGN §3's "
              "all-reduce of fp32 gradients.", "",
              "| row | measured TF/s | modelled | (a) TP hidden | (b) + bf16 all-gather |",
              "|---|---:|---:|---:|---:|"]
    for row, p, _, _ in results:
        hidden, bf16 = diagnostics[row.run.name]
        lines.append(f"| {row.run.name} | {row.measured_tflops:.1f} | {p.tflops_per_gpu:.1f} "
                     f"({100 * (p.tflops_per_gpu / row.measured_tflops - 1):+.0f}%) | "
                     f"{hidden:.1f} ({100 * (hidden / row.measured_tflops - 1):+.0f}%) | "
                     f"{bf16:.1f} ({100 * (bf16 / row.measured_tflops - 1):+.0f}%) |")
    measured = [r.measured_tflops for r, _, _, _ in results]
    names = [r.run.name for r, _, _, _ in results]
    rho_a = spearman([diagnostics[name][0] for name in names], measured)
    rho_b = spearman([diagnostics[name][1] for name in names], measured)
    errors_b = [diagnostics[name][1] / m - 1 for name, m in zip(names, measured, strict=True)]
    lines += ["", f"Rank correlation with the measurements: (a) {rho_a:.2f}, (b) {rho_b:.2f}; "
              f"(b)'s mean absolute error {100 * np.mean(np.abs(errors_b)):.1f}%."]
    lines += ["", "## Sources", ""]
    lines += [f"- `{key}`: {text}" for key, text in doc["sources"].items()]
    lines += ["", "## Assumptions where the sources are silent", ""]
    lines += [f"- {text}" for text in doc["assumptions"]]
    lines += ["", "## What explains the rest", "", *EXPLANATION, ""]
    (HERE / "README.md").write_text("\n".join(lines))
    print("\n".join(lines[:12]))


EXPLANATION = [
    "- **Tensor-parallel communication overlap** (`--tp-comm-overlap`) is not in the cost model "
    "(DESIGN §3 adds every intra-layer collective to the stage time). With sequence "
    "parallelism a block's all-gathers and reduce-scatters cost 30-45% of its compute at "
    "TP 8 on NVLink, so the TP rows (7.1B-32B, and the pipeline rows) are predicted slow; "
    "hiding them entirely, diagnostic (a), overshoots the pipeline rows instead: Megatron "
    "hides most, not all, of it. This term decides the trend across the rows.",
    "- **The distributed optimizer's data-parallel traffic**: DESIGN §3 prices ZeRO-1 sync as "
    "an all-reduce of the fp32 gradients; Megatron runs a reduce-scatter of fp32 gradients "
    "and an all-gather of bf16 weights, the latter overlapped with the next forward "
    "(`--overlap-param-gather`). Diagnostic (b) prices the first part; the second (hiding the "
    "all-gather behind the first microbatch's forward) is not modelled. It matters most "
    "where few microbatches leave little backward to hide the sync in (1.7B-32B: 4 "
    "microbatches per iteration).",
    "- **Memory**: on the Megatron rows the first stage is within 0.3% of the formula. Llama "
    "3 405B differs by design of the formula: it ignores grouped-query attention's narrower "
    "K/V, SwiGLU's third intermediate and the absence of dropout (together -6.6% per layer), "
    "and under interleaving it charges (1 + (p-1)/(p v)) * l layer-microbatches even when "
    "the v*m = 32 chunk-microbatches of the 16,384-GPU run are fewer than the schedule's "
    "warm-up (the evaluator, as Megatron's scheduler, caps them: -31%).",
    "- Kernel-level terms not modelled: kernel launch gaps, the GEMM epilogues "
    "(bias, GeLU) that TransformerEngine fuses but our memory-bound ops charge separately, "
    "and cuDNN's attention running somewhat below FlashAttention-3's published figures "
    "(FA3's paper reports it faster than cuDNN 9.1 from 1k tokens).",
]


if __name__ == "__main__":
    main()

