"""nest-cp's predictions against published measured training runs, from stored inputs only.

Usage (from the repository root)::

    .venv/bin/python scripts/reports/fidelity.py

Reads ``reports/fidelity/inputs.json`` (every measured row, the flags its source states and the
assumptions where the source is silent) and writes ``reports/fidelity/fidelity.csv`` and
``reports/fidelity/README.md``: per row the predicted iteration time, TF/s per GPU and MFU
against the measurement, the error, the predicted first-stage memory against Megatron-LM's
theoretical formula, where the modelled time goes, what the tensor-parallel overlap the
Megatron-Core rows state hides (docs/cost-model.md §5 e), and the summary (mean and max
absolute error, Spearman rank correlation of predicted and measured TF/s). Predictions use
the ``h100-sxm-uncalibrated`` preset (its kernel efficiencies come from datasheets and kernel
microbenchmarks, never from these rows).
A second column predicts every row with the shipped ``h100-sxm`` preset, which carries the
A100 calibration's relative parameters (transferred, never fitted to these rows). The
calibration set (``data/vtrain_single.csv``, 1,440 measured single-node A100 runs) is reported
on its held-out shapes, per group of one shape, GPU count and global batch: error, Spearman
rank correlation and the regret of the predicted-best configuration, uncalibrated against the
shipped ``a100-80gb`` calibration.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from nest_cp.cost.evaluate import evaluate
from nest_cp.harness import calibrate as cal
from nest_cp.harness.runs import (
    Prediction,
    RecomputeMode,
    Run,
    build,
    predict,
)
from nest_cp.model.network import NetworkModel
from nest_cp.profiles import reference_formulas as megatron
from nest_cp.profiles.hfconfig import spec_from_description
from nest_cp.profiles.kernel_tables import H100_GEMM_OPENXLA
from nest_cp.profiles.kernels import gemm_seconds
from nest_cp.profiles.presets import (
    A100_FIT,
    DEVICES,
    MEGATRON_ADAM,
    MEGATRON_FP16_ADAM,
    h100_with_gemm_fixed_time,
)
from nest_cp.profiles.profiler import AttentionKind

HERE = Path(__file__).resolve().parents[2] / "reports" / "fidelity"  # inputs, outputs
DEVICE = "h100-sxm-uncalibrated"  # kernel figures only (datasheets, microbenchmarks)
TRANSFERRED = "h100-sxm"  # the shipped preset: the A100 fit's relative parameters
CALIBRATION_SET = HERE / "data" / "vtrain_single.csv"
TRAIN_SHAPES = ("1024x12", "1024x20", "2048x16", "2048x24")


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
                  overlap_grad_reduce=raw["overlap_grad_reduce"],
                  # absent where the source does not state it: not assumed
                  overlap_param_gather=raw.get("overlap_param_gather", False),
                  tp_comm_overlap=raw.get("tp_comm_overlap", False))
        rows.append(Row(run, raw["source"], raw["measured_tflops_per_gpu"], raw["measured_mfu"]))
    return doc, rows


def megatron_memory(run: Run, cap_in_flight: bool = False) -> float:
    """Megatron's theoretical first-stage memory for the run (distributed optimizer);
    ``cap_in_flight``: interleaved activations capped at the iteration's v m
    chunk-microbatches (:func:`nest_cp.profiles.reference_formulas.activation_bytes`)."""
    spec = run.model
    return megatron.memory_bytes(megatron.MegatronRun(
        layers=spec.num_layers, hidden=spec.hidden, heads=spec.num_heads,
        ffn_hidden=spec.ffn_hidden, vocab=spec.vocab_shard(run.tp) * run.tp, seq=run.seq_len,
        microbatch=run.microbatch, tp=run.tp, pp=run.pp, dp=run.dp,
        num_microbatches=run.global_batch // (run.microbatch * run.dp), vp=run.vp,
        sequence_parallel=run.sequence_parallel, recompute=megatron.Recompute.SELECTIVE,
        distributed_optimizer=True, untied=not spec.tied_embeddings,
        kv_heads=spec.kv_heads, gated=spec.gated_mlp), cap_in_flight)


spearman = cal.spearman


def transferred_tflops(rows: list[Row]) -> dict[str, float]:
    """TF/s per GPU of every check row with the transferred calibration (nothing fitted)."""
    device = DEVICES[TRANSFERRED]
    return {row.run.name: predict(row.run, device, MEGATRON_ADAM).tflops_per_gpu
            for row in rows}


@dataclass(frozen=True)
class CalibrationSet:
    """The calibration set's held-out half, predicted uncalibrated and calibrated."""

    test: list
    before: list[float]
    after: list[float]
    train_rows: int
    train_before: float
    train_after: float


def calibration_set() -> CalibrationSet:
    """Predict the calibration set's rows on the DGX A100 network (fp16 Megatron, the set's
    setting) with the A100's microbenchmark figures and with the shipped fit."""
    rows = cal.on_network(cal.read_measurements(CALIBRATION_SET), "dgx-a100")
    train, test = cal.split_by_shape(rows, TRAIN_SHAPES)
    fitted, base = DEVICES["a100-80gb"], DEVICES["a100-80gb-uncalibrated"]
    errors = {}
    for label, device in (("before", base), ("after", fitted)):
        times = cal.predicted_times(train, device, MEGATRON_FP16_ADAM)
        errors[label] = float(np.mean([abs(t / m.measured_s - 1)
                                       for m, t in zip(train, times, strict=True)]))
    return CalibrationSet(test, cal.predicted_times(test, base, MEGATRON_FP16_ADAM),
                          cal.predicted_times(test, fitted, MEGATRON_FP16_ADAM), len(train),
                          errors["before"], errors["after"])


@dataclass(frozen=True)
class TpOverlap:
    """What ``tp_comm_overlap`` does to one row (docs/cost-model.md §5 e), uncalibrated: the
    slowest chunk's TP collective seconds per microbatch step, in full and hidden behind the
    GEMMs (the rest is charged; every row has EP 1, so the chunk's collectives are its TP
    collectives); and TF/s per GPU on each device with the flag off, every TP collective
    charged in full, as the rows whose source does not state the flag are priced anyway."""

    full_s: float
    hidden_s: float
    in_full_tflops: dict[str, float]

    @property
    def charged_s(self) -> float:
        return self.full_s - self.hidden_s


def tp_overlap(run: Run) -> TpOverlap:
    """:class:`TpOverlap` of the run: the evaluator's own split (ChunkReport.tp_hidden_ticks),
    so the report shows what §5 e hides rather than recomputing it."""
    instance, plan = build(run, DEVICES[DEVICE], MEGATRON_ADAM)
    evaluation = evaluate(instance, plan)
    chunk = _slowest_chunk(evaluation)
    tick = instance.training.tick_s
    flag_off = replace(run, tp_comm_overlap=False)
    return TpOverlap(
        full_s=(chunk.collective_ticks + chunk.tp_hidden_ticks) * tick,
        hidden_s=chunk.tp_hidden_ticks * tick,
        in_full_tflops={name: predict(flag_off, DEVICES[name], MEGATRON_ADAM).tflops_per_gpu
                        for name in (DEVICE, TRANSFERRED)})


def _slowest_chunk(evaluation):
    """The chunk whose microbatch step sets the pipeline's pace (the largest time_ticks)."""
    return max((c for stage in evaluation.stages for c in stage.chunks),
               key=lambda c: c.time_ticks)


@dataclass(frozen=True)
class Breakdown:
    """Shares of the modelled iteration: (v m) x the slowest chunk's compute (with
    recompute), TP/EP collectives and pipeline receives (and ZeRO-3 gathers), (S - 1) x that
    chunk (the bubble), the exposed gradient sync and the whole sync before any overlap;
    and the ring the data-parallel group runs on (docs/cost-model.md §5 a, b)."""

    compute: float
    collectives: float
    transfers: float
    bubble: float
    sync: float
    sync_whole: float
    dp_channels: int
    dp_bandwidth_Bps: float


def breakdown(run: Run) -> Breakdown:
    instance, plan = build(run, DEVICES[DEVICE], MEGATRON_ADAM)
    evaluation = evaluate(instance, plan)
    placement = evaluation.plan.placement  # the evaluator's Megatron layout
    group = [placement[0][replica][0] for replica in range(plan.num_replicas)]
    network = NetworkModel(instance.cluster)
    chunk = _slowest_chunk(evaluation)
    steps = plan.virtual_stages * evaluation.num_microbatches
    total = evaluation.objective_ticks
    return Breakdown(
        compute=steps * (chunk.compute_ticks + chunk.recompute_ticks) / total,
        collectives=steps * chunk.collective_ticks / total,
        transfers=steps * (chunk.recv_activation_ticks + chunk.recv_gradient_ticks
                           + chunk.zero_gather_ticks) / total,
        bubble=(plan.num_stages - 1) * evaluation.tau_max_ticks / total,
        sync=evaluation.exposed_sync_ticks / total,
        sync_whole=evaluation.sync_ticks / total,
        dp_channels=network.channels_of(group),
        dp_bandwidth_Bps=float(network.group_path(group).bandwidth_Bps))


def _by_source(results, values: list[float]) -> list[tuple[str, list[float]]]:
    """Values grouped by the rows' source, in order of first appearance."""
    groups: dict[str, list[float]] = {}
    for (row, _, _, _), value in zip(results, values, strict=True):
        groups.setdefault(SOURCE_LABELS.get(row.source, row.source), []).append(value)
    return list(groups.items())


def _span(errors: list[float]) -> str:
    low, high = min(errors), max(errors)
    if abs(high - low) < 5e-4:
        return f"{100 * low:+.1f}%"
    return f"{100 * low:+.1f}% to {100 * high:+.1f}%"


SOURCE_LABELS = {"megatron-core-h100-weak-scaling": "Megatron-Core rows",
                 "llama3-herd-table4": "Llama 3 405B rows"}


def _gib(value: float) -> str:
    return f"{value / 2**30:.1f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.parse_args()
    doc, rows = load_rows(HERE / "inputs.json")
    device = DEVICES[DEVICE]
    results: list[tuple[Row, Prediction, float, float]] = []
    capped: dict[str, float] = {}
    for row in rows:
        prediction = predict(row.run, device, MEGATRON_ADAM)
        memory_run = replace(row.run, zero=1)  # the formula's convention
        ours = predict(memory_run, device, MEGATRON_ADAM).first_stage_memory_bytes
        results.append((row, prediction, float(ours), megatron_memory(row.run)))
        capped[row.run.name] = megatron_memory(row.run, cap_in_flight=True)
    overlaps = {row.run.name: tp_overlap(row.run) for row in rows}
    shares = {row.run.name: breakdown(row.run) for row in rows}
    half = transferred_tflops(rows)
    calibration = calibration_set()
    write_csv(results, half, capped)
    write_readme(doc, results, half, overlaps, shares, capped, calibration)


def _errors(results) -> list[float]:
    return [p.tflops_per_gpu / r.measured_tflops - 1 for r, p, _, _ in results]


def write_csv(results, half: dict[str, float], capped: dict[str, float]) -> None:
    with (HERE / "fidelity.csv").open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["row", "gpus", "tp", "pp", "dp", "measured_tflops_per_gpu",
                         "predicted_tflops_per_gpu", "error", "measured_mfu", "predicted_mfu",
                         "predicted_iteration_s", "measured_iteration_s",
                         "transferred_calibration_tflops_per_gpu", "predicted_memory_gib",
                         "megatron_formula_memory_gib", "memory_error",
                         "megatron_formula_capped_memory_gib", "memory_error_capped"])
        for row, p, ours, formula in results:
            measured_s = p.model_flops_per_iteration / (row.measured_tflops * 1e12
                                                        * row.run.devices_used)
            cap = capped[row.run.name]
            writer.writerow([row.run.name, row.run.devices_used, row.run.tp, row.run.pp,
                             row.run.dp, row.measured_tflops, f"{p.tflops_per_gpu:.1f}",
                             f"{p.tflops_per_gpu / row.measured_tflops - 1:.4f}",
                             row.measured_mfu, f"{p.mfu:.3f}", f"{p.iteration_s:.3f}",
                             f"{measured_s:.3f}",
                             f"{half[row.run.name]:.1f}" if row.run.name in half else "",
                             _gib(ours), _gib(formula), f"{ours / formula - 1:.4f}",
                             _gib(cap), f"{ours / cap - 1:.4f}"])


def _pct(value: float, measured: float) -> str:
    return f"{value:.1f} ({100 * (value / measured - 1):+.1f}%)"


def gemm_buckets() -> list[tuple[str, list[tuple[float, float, float]]]]:
    """(label, [(measured s, modelled s, modelled s without the fixed time)]) by kernel time."""
    device = DEVICES[DEVICE]
    bare = h100_with_gemm_fixed_time(0.0)
    rows = [(e.seconds, gemm_seconds(device, e.m, e.n, e.k, e.batch),
             gemm_seconds(bare, e.m, e.n, e.k, e.batch)) for e in H100_GEMM_OPENXLA]
    return [("all", rows), ("measured >= 10 us", [r for r in rows if r[0] >= 10e-6]),
            ("measured >= 40 us", [r for r in rows if r[0] >= 40e-6])]


def _rms_log(rows, column: int) -> float:
    return math.sqrt(sum(math.log(r[1 + column] / r[0]) ** 2 for r in rows) / len(rows))


def _max_abs(rows, column: int) -> float:
    return max(abs(r[1 + column] / r[0] - 1) for r in rows)


def _percent(value: float) -> str:
    return "n/a" if math.isnan(value) else f"{100 * value:.1f}%"


def _rho(value: float) -> str:
    return "n/a" if math.isnan(value) else f"{value:+.2f}"


def calibration_section(data: CalibrationSet) -> list[str]:
    """The calibration set: the fit, then per held-out group error, Spearman and regret,
    uncalibrated against calibrated."""
    before = cal.group_scores(data.test, data.before)
    after = cal.group_scores(data.test, data.after)
    fit = ", ".join(f"{name} x {value:.4f}" if name != "kernel_fixed_s" else
                    f"{1e6 * value:.1f} us per kernel" for name, value in A100_FIT.items())
    lines = ["## Calibration set: vTrain's single-node A100 runs (held-out shapes)", "",
             f"`data/vtrain_single.csv` (1,440 measured runs, provenance in `data/README.md`)"
             f", split by model shape: fitted on {', '.join(TRAIN_SHAPES)} "
             f"({data.train_rows} rows; mean absolute error {100 * data.train_before:.1f}% "
             f"uncalibrated, {100 * data.train_after:.1f}% fitted), every figure below on the "
             f"other four shapes. Fit (`nest-cp calibrate data/vtrain_single.csv --device "
             f"a100-80gb --train-shapes {','.join(TRAIN_SHAPES)}`; the shipped `a100-80gb` "
             f"preset): {fit}. Setting: DGX A100 network, fp16 Megatron-LM GPT with full "
             "recomputation, materialised attention, no sequence parallelism, no distributed "
             "optimizer, gradient all-reduce not overlapped.", ""]
    for label, times, scores in (("uncalibrated (`a100-80gb-uncalibrated`)", data.before,
                                  before), ("calibrated (`a100-80gb`)", data.after, after)):
        errors = [abs(t / m.measured_s - 1) for m, t in zip(data.test, times, strict=True)]
        big = [s for s in scores if s.count >= cal.GOAL_GROUP_SIZE]
        rhos = [s.spearman for s in big if not math.isnan(s.spearman)]
        lines.append(f"- {label}: {len(errors)} held-out rows, mean absolute error "
                     f"{_percent(float(np.mean(errors)))}, worst {_percent(max(errors))}; of the "
                     f"{len(big)} groups of >= {cal.GOAL_GROUP_SIZE} configurations: MAE <= 5% "
                     f"in {sum(s.mae <= 0.05 for s in big)}, worst <= 15% in "
                     f"{sum(s.worst <= 0.15 for s in big)}, regret <= 3% in "
                     f"{sum(s.regret <= 0.03 for s in big)}; median Spearman "
                     f"{_rho(float(np.median(rhos)))}, mean regret "
                     f"{_percent(float(np.mean([s.regret for s in big])))}.")
    lines += ["", "Goals per group of >= 5: MAE <= 5%, worst <= 15%, regret <= 3%. Each "
              "cell: uncalibrated / calibrated.", "",
              "| shape | GPUs | global batch | runs | MAE | worst | Spearman | regret |",
              "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for old, new in zip(before, after, strict=True):
        shape, gpus, batch = new.group
        lines.append(f"| {shape} | {gpus} | {batch} | {new.count} | {_percent(old.mae)} / "
                     f"{_percent(new.mae)} | {_percent(old.worst)} / {_percent(new.worst)} | "
                     f"{_rho(old.spearman)} / {_rho(new.spearman)} | {_percent(old.regret)} / "
                     f"{_percent(new.regret)} |")
    return lines + [""] + residual_section(data)


def residual_section(data: CalibrationSet) -> list[str]:
    """Where the calibrated model misses on the held-out rows: the mean signed error per
    (TP, PP) and micro-batch, and the measured time per micro-batch step at TP 8, which
    moves with the micro-batch in a way no smooth per-kernel cost follows."""
    cells: dict[tuple[int, int, int], list[float]] = {}
    steps: dict[tuple[str, int], list[float]] = {}
    for measured, predicted in zip(data.test, data.after, strict=True):
        run = measured.run
        cells.setdefault((run.tp, run.pp, run.microbatch), []).append(
            predicted / measured.measured_s - 1)
        if run.tp == 8:
            microbatches = run.global_batch // (run.microbatch * run.dp)
            steps.setdefault((measured.shape, run.microbatch), []).append(
                measured.measured_s / microbatches)
    sizes = sorted({key[2] for key in cells})
    lines = ["### Where the calibrated model misses", "",
             "Mean signed error of the calibrated prediction on the held-out rows (negative: "
             "predicted too fast) per tensor and pipeline width and micro-batch size, over "
             "every data-parallel width and global batch; in brackets the rows averaged.", "",
             "| TP | PP | " + " | ".join(f"micro-batch {size}" for size in sizes) + " |",
             "|---:|---:|" + "---:|" * len(sizes)]
    for tp, pp in sorted({key[:2] for key in cells}):
        row = [f"{100 * float(np.mean(cells[tp, pp, size])):+.1f}% "
               f"({len(cells[tp, pp, size])})" if (tp, pp, size) in cells else "—"
               for size in sizes]
        lines.append(f"| {tp} | {pp} | " + " | ".join(row) + " |")
    step = {key: float(np.mean(times)) for key, times in steps.items()}
    shapes = sorted({shape for shape, _ in step})
    slower = [shape for shape in shapes if step[shape, 1] > step[shape, 2]]
    per_shape = "; ".join(f"{shape}: {1e3 * step[shape, 1]:.0f} ms at micro-batch 1, "
                          f"{1e3 * step[shape, 2]:.0f} ms at 2" for shape in shapes)
    flips = sum(np.sign(np.mean(cells[tp, pp, small])) != np.sign(np.mean(cells[tp, pp, big]))
                for tp, pp in {key[:2] for key in cells}
                for small, big in zip(sizes, sizes[1:], strict=False)
                if (tp, pp, small) in cells and (tp, pp, big) in cells)
    lines += ["", f"The mean error changes sign {flips} times between neighbouring micro-batch "
              "sizes of one (TP, PP), which a cost that grows smoothly with the micro-batch "
              "cannot follow. At TP 8 (PP 1, DP 1) the measured time per micro-batch step "
              f"(mean over the global batches) is {per_shape}: the step with half the work "
              f"takes longer on {len(slower)} of the {len(shapes)} held-out shapes. Such a "
              "step is not bound by the GPU's arithmetic or memory (host-side kernel dispatch "
              "of an eager PyTorch stack, or a kernel choice that changes with the shape, are "
              "candidates), and the fitted fixed time per kernel prices it the same at every "
              "micro-batch. No cited kernel-level figure sizes it; refitting the model's few "
              "physical parameters cannot reach the per-group goals on these rows.", ""]
    return lines


def tp_overlap_section(results, half: dict[str, float],
                       overlaps: dict[str, TpOverlap]) -> list[str]:
    """Per row, the slowest chunk's TP collectives per microbatch step, in full, hidden and
    charged under the source's flag (docs/cost-model.md §5 e), and TF/s as priced against
    the same row with every TP collective charged in full; then the summary figures of the
    latter, so the share of the result that rests on §5 e shows."""
    lines = ["## Tensor-parallel communication overlap (§5 e)", "",
             "The Megatron-Core rows state `--tp-comm-overlap`, so their instances set "
             "`tp_comm_overlap` and the evaluator prices `docs/cost-model.md` §5 e: per layer "
             "and direction, C ticks of TP collectives run behind X ticks of compute whose "
             "GEMMs are split into t = TP chunks and are charged max(⌈C/t⌉, C − X), on every "
             "stage replica whose TP groups lie inside one node (all of them here, TP <= 8 on "
             "8-GPU nodes). The Llama 3 rows do not state it and pay their TP "
             "collectives in full. Per row (uncalibrated): the slowest chunk's TP collectives "
             "per microbatch step in full, the part hidden behind the GEMMs and the part "
             "charged; then TF/s per GPU with every TP collective charged in full (the flag "
             "off), against the prediction as priced above. Nothing is fitted.", "",
             "| row | TP | TP collectives per step, in full (ms) | hidden (ms) | charged (ms) "
             "| TF/s in full: uncalibrated / transferred | as priced: uncalibrated / "
             "transferred | measured TF/s |",
             "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for row, p, _, _ in results:
        name, measured, o = row.run.name, row.measured_tflops, overlaps[row.run.name]
        share = f" ({100 * o.hidden_s / o.full_s:.1f}%)" if o.full_s else ""
        lines.append(f"| {name} | {row.run.tp} | {1e3 * o.full_s:.1f} | "
                     f"{1e3 * o.hidden_s:.1f}{share} | {1e3 * o.charged_s:.1f} | "
                     f"{_pct(o.in_full_tflops[DEVICE], measured)} / "
                     f"{_pct(o.in_full_tflops[TRANSFERRED], measured)} | "
                     f"{_pct(p.tflops_per_gpu, measured)} / {_pct(half[name], measured)} | "
                     f"{measured:.1f} |")
    measured = [r.measured_tflops for r, _, _, _ in results]
    summary = []
    for label, device_name in (("uncalibrated", DEVICE), ("transferred", TRANSFERRED)):
        values = [overlaps[r.run.name].in_full_tflops[device_name] for r, _, _, _ in results]
        errs = [v / m - 1 for v, m in zip(values, measured, strict=True)]
        summary.append(f"{label}: mean absolute error {100 * np.mean(np.abs(errs)):.1f}%, max "
                       f"{100 * max(abs(e) for e in errs):.1f}%, "
                       f"{sum(abs(e) <= 0.10 for e in errs)} of {len(errs)} rows within 10%, "
                       f"Spearman {spearman(values, measured):.2f}")
    return lines + ["", "With every TP collective charged in full: " + "; ".join(summary) + "."]


def write_readme(doc: dict, results, half: dict[str, float],
                 overlaps: dict[str, TpOverlap], shares: dict[str, Breakdown],
                 capped: dict[str, float], calibration: CalibrationSet) -> None:
    errors = _errors(results)
    rho = spearman([p.tflops_per_gpu for _, p, _, _ in results],
                   [r.measured_tflops for r, _, _, _ in results])
    memory_errors = [ours / formula - 1 for _, _, ours, formula in results]
    capped_errors = [ours / capped[r.run.name] - 1 for r, _, ours, _ in results]
    lines = ["# Fidelity: predictions against measured training runs", "",
             "Generated by `scripts/reports/fidelity.py` from `inputs.json` and "
             "`data/vtrain_single.csv`; do not edit. Check rows (the two published sources "
             "below: never fitted): priced by the plan evaluator under cost model v3 "
             "(`docs/cost-model.md`), predicted with the H100's kernel figures from "
             "datasheets and kernel microbenchmarks (`h100-sxm-uncalibrated`, "
             "`docs/device-model.md`) and with the shipped `h100-sxm`, which carries the "
             "A100 calibration's relative parameters; optimizer Megatron-LM's 18 B per "
             "parameter; the plan and the overlap flags of each row as its source ran it "
             "(assumptions below).", "",
             "## Summary", "",
             f"- TF/s per GPU, uncalibrated (`{DEVICE}`): mean absolute error "
             f"{100 * np.mean(np.abs(errors)):.1f}%, "
             f"max {100 * max(abs(e) for e in errors):.1f}%; {sum(abs(e) <= 0.10 for e in errors)}"
             f" of {len(errors)} rows within 10% (goal: all).",
             f"- Trend: Spearman rank correlation of predicted and measured TF/s {rho:.2f} "
             "(goal >= 0.7).",
             "- Memory against Megatron's theoretical formula (goal 5%): " + "; ".join(
                 f"{source}: {_span(errs)}" for source, errs in _by_source(results,
                                                                          memory_errors))
             + "; against the formula with its in-flight count capped at the iteration's "
               "chunk-microbatches, as Megatron's scheduler runs them: " + "; ".join(
                 f"{source}: {_span(errs)}" for source, errs in _by_source(results,
                                                                          capped_errors))
             + ".", ""]
    half_errors = [half[r.run.name] / r.measured_tflops - 1 for r, _, _, _ in results]
    half_rho = spearman([half[r.run.name] for r, _, _, _ in results],
                        [r.measured_tflops for r, _, _, _ in results])
    lines.insert(-1, f"- With the transferred calibration (`h100-sxm`): mean absolute error "
                     f"{100 * np.mean(np.abs(half_errors)):.1f}%, max "
                     f"{100 * max(abs(e) for e in half_errors):.1f}%; Spearman {half_rho:.2f} "
                     f"(goals: 10%, 0.7).")
    lines.insert(-1, "- Communication is priced as NCCL and Megatron-LM run it "
                     "(`docs/cost-model.md` §5 a-e: multi-channel collectives, the presets' "
                     "cited link efficiencies, the distributed optimizer's reduce-scatter and "
                     "all-gather, the gather behind the next forward where the source states "
                     "`--overlap-param-gather`, the TP collectives behind the GEMMs where it "
                     "states `--tp-comm-overlap`: the Megatron-Core rows, not the Llama 3 rows). "
                     "What that overlap hides, and the figures with every TP collective charged "
                     "in full instead: see the section on tensor-parallel overlap below.")
    lines.insert(-1, "- Calibration set: see the next section.")
    lines += calibration_section(calibration)
    lines += ["## Rows", "",
              "| row | GPUs | TP/PP/DP | measured TF/s | predicted TF/s | error | measured MFU "
              "| predicted MFU | iteration s | transferred calibration TF/s | memory GiB (ours / "
              "Megatron / capped) | memory error (formula / capped) |",
              "|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for row, p, ours, formula in results:
        run = row.run
        moved = f"{half[run.name]:.1f} ({100 * (half[run.name] / row.measured_tflops - 1):+.1f}%)"
        cap = capped[run.name]
        lines.append(f"| {run.name} | {run.devices_used} | {run.tp}/{run.pp}/{run.dp} | "
                     f"{row.measured_tflops:.1f} | {p.tflops_per_gpu:.1f} | "
                     f"{100 * (p.tflops_per_gpu / row.measured_tflops - 1):+.1f}% | "
                     f"{100 * row.measured_mfu:.0f}% | {100 * p.mfu:.1f}% | {p.iteration_s:.2f} | "
                     f"{moved} | {_gib(ours)} / {_gib(formula)} / {_gib(cap)} | "
                     f"{100 * (ours / formula - 1):+.1f}% / {100 * (ours / cap - 1):+.1f}% |")
    lines += ["", "## Where the modelled time goes", "",
              "Shares of each row's predicted iteration (uncalibrated): the v·m microbatch steps "
              "of the slowest chunk split into compute (with recompute), tensor-parallel "
              "collectives (the part §5 e leaves exposed where the source overlaps "
              "them) and pipeline receives, the (S − 1) steps of the bubble, and the "
              "data-parallel sync left exposed (`docs/cost-model.md` §5 c-d: the reduce-scatter "
              "beyond the last backward, the all-gather beyond the next forward when the "
              "source overlaps it, else in full); beside it the whole sync before any overlap, "
              "and the ring the data-parallel group runs on: its channels, one per member in "
              "each node (§5 a), and its bandwidth after the link efficiency (§5 b).", "",
              "| row | compute | TP collectives | pipeline receives | bubble | exposed DP sync "
              "| whole DP sync | DP channels | DP ring GB/s |",
              "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for row, _, _, _ in results:
        b = shares[row.run.name]
        lines.append(f"| {row.run.name} | {100 * b.compute:.0f}% | {100 * b.collectives:.0f}% | "
                     f"{100 * b.transfers:.1f}% | {100 * b.bubble:.0f}% | {100 * b.sync:.0f}% | "
                     f"{100 * b.sync_whole:.0f}% | {b.dp_channels} | "
                     f"{b.dp_bandwidth_Bps / 1e9:.0f} |")
    lines += tp_overlap_section(results, half, overlaps)
    lines += ["", "## Kernel check: the GEMM model against measured H100 GEMMs", "",
              "Measured bf16 GEMM times (OpenXLA's sm_90 matmul table, "
              "`nest_cp.profiles.kernel_tables.H100_GEMM_OPENXLA`: 72 shapes, 256-4096 in m, n, k) "
              "against `nest_cp.profiles.kernels.gemm_seconds` with the `h100-sxm` preset: its one "
              "fitted constant, the fixed time per kernel, comes from this table (each half of "
              "it gives the same value within 0.1 us); without it (tile and wave quantisation "
              "only) the errors are those of the last column.", "",
              "| kernels | count | model error, rms of log | max abs | quantisation only: rms "
              "of log | max abs |", "|---|---:|---:|---:|---:|---:|"]
    for label, rows in gemm_buckets():
        lines.append(f"| {label} | {len(rows)} | {_rms_log(rows, 0):.2f} | "
                     f"{_max_abs(rows, 0):.0%} | {_rms_log(rows, 1):.2f} | "
                     f"{_max_abs(rows, 1):.0%} |")
    lines += ["", "## Sources", ""]
    lines += [f"- `{key}`: {text}" for key, text in doc["sources"].items()]
    lines += ["", "## Assumptions where the sources are silent", ""]
    lines += [f"- {text}" for text in doc["assumptions"]]
    lines += ["", "## What explains the rest", "", *EXPLANATION, ""]
    (HERE / "README.md").write_text("\n".join(lines))
    print("\n".join(lines[:12]))


EXPLANATION = [
    "- **What cost model v3 changed** (figures from before §5 e was priced, next bullet). Against "
    "this report as generated before v3 (git history; same rows, v2 communication): uncalibrated "
    "mean absolute error 12.5% -> 14.5%, max 32.5% -> 57.2%, rows within 10% 5 -> 6, rank "
    "correlation -0.09 -> 0.30; transferred 20.8% -> 15.5%, max 43.6% -> 37.1%, rank correlation "
    "0.00 -> 0.22. It helped where a data-parallel group has several ranks on a node (TP < 8): §5 "
    "a runs one ring channel per rank, so the 16B row's group (2 per node) syncs at 94 GB/s "
    "instead of one NIC's 50 and moves from -30% to +4%, and the transferred 7.1B (also refitted) "
    "from -33% to +7%. It made the two smallest rows worse: 1.7B -12% -> +57%, 7.1B -23% -> +37% "
    "(uncalibrated). The TP 8 rows moved little: their groups have one rank per node, so one "
    "channel, now at 47 GB/s (the NIC's cited 0.94, §5 b); they gain only the bf16 weight gather "
    "(§5 c) and its overlap with the forward (§5 d), and pay NVLink's efficiency (0.822, §5 b) on "
    "their TP collectives: 32B -33% -> -26%, the pipeline rows 119B-462B within two points of "
    "before (-3.3% to +1.5%). The stated `--overlap-param-gather` alone adds +0.3% (462B) to "
    "+6.4% (7.1B) to the Megatron rows' predicted TF/s.",
    "- **What pricing the stated `--tp-comm-overlap` changed (§5 e).** Against the same rows with "
    "every TP collective charged in full (the last line of the tensor-parallel overlap section; "
    "this report before §5 e was priced): uncalibrated mean absolute error 14.5% -> 21.5%, max "
    "57.2% (1.7B, TP 1, unchanged), rows within 10% 6 -> 2, rank correlation 0.30 -> 0.49; "
    "transferred 15.5% -> 9.5%, max 37.1% -> 27.6%, rows within 10% 4 -> 8, rank correlation 0.22 "
    "-> 0.36. In every block the GEMMs outlast the TP collectives in both directions, so ⌈C/t⌉ "
    "binds and the overlap hides 1 - 1/t of them: half at TP 2 (7.1B), three quarters at TP 4 "
    "(16B), seven eighths at TP 8 (a little less where the slowest chunk holds the embedding, "
    "whose collective has almost no GEMM to hide behind: 87.3% on 32B). The TP collectives were "
    "14-24% of the TP 8 Megatron rows' modelled iterations and, on the pipeline rows, also "
    "lengthened the bubble ((S - 1) steps of the slowest chunk), so the predicted TF/s rose by "
    "29% (70B), 26-27% (32B, 119B), 24% (177B), 17-19% (314B, 462B), 14% (16B) and 5% (7.1B); "
    "1.7B (TP 1) and the Llama 3 rows (no overlap stated) did not move. The uncalibrated "
    "119B-462B rows' earlier -3.3% to +1.5% was cancellation, as this report said then: priced as "
    "their source ran them they come out +14.7% to +23.1%, and the uncalibrated model now "
    "predicts every Megatron row but 32B too fast (next bullets). With the transferred "
    "calibration the TP 8 pipeline rows land within -9.3% to +8.6% and 16B at -0.3%. §5 e hides "
    "the collectives at no cost to the GEMMs they run beside; what the overlapped communication "
    "takes from those GEMMs on the hardware has no cited figure here and is not charged, and it "
    "would fall on exactly these rows.",
    "- **1.7B: the sync got cheap and exposes compute that is too fast.** TP 1 and DP 48 on six "
    "nodes put eight ranks of each data-parallel group on every node: §5 a runs 8 channels, min(8 "
    "x 47, 370) = 370 GB/s, bounded by NVLink at 450 GB/s x 0.822 (§5 b). The sync, a "
    "reduce-scatter of fp32 gradients and an all-gather of bf16 weights (§5 c), is 10% of the "
    "modelled iteration and all of it is hidden: the reduce-scatter behind the last backward (§3, "
    "overlapped gradient reduction), the gather behind the next forward (§5 d). The prediction is "
    "compute alone, MFU 65.0% against a measured 41% (+57%; +28% with the transferred "
    "calibration). Before v3 the same sync was an fp32 all-reduce at one NIC's 50 GB/s, 44% of "
    "the modelled iteration left exposed: the row came out at -12% because over-charged "
    "communication stood in for compute time the model does not charge. 7.1B is the same case (4 "
    "channels, 188 GB/s, a sync of 20% of the iteration, none exposed, its TP collectives half "
    "hidden, §5 e): +44%, +11% transferred.",
    "- **That missing compute time is not identified.** With §5 e priced it is not confined to "
    "the two smallest rows: the uncalibrated model predicts every Megatron row but 32B too fast, "
    "by +14.7% (314B) to +57.2% (1.7B). It is not in the GEMM kernels' shapes: the GEMM model "
    "carries a fixed per-kernel time fitted to 72 measured H100 GEMMs (kernel check above: rms "
    "log error 0.11, 0.93 with quantisation alone), and dropping it moves every row by under 2%, "
    "because training GEMMs are long. The candidates lie outside single-kernel microbenchmarks: "
    "compute kernels slowed while the overlapped NCCL kernels run beside them (the model hides "
    "the 1.7B row's whole sync, and seven eighths of the TP 8 rows' TP collectives, at no cost to "
    "their compute), host-side dispatch gaps between short kernels, sustained clocks under a "
    "training run's power draw, cuDNN's attention below FlashAttention-3's published figures, and "
    "GEMM epilogues (bias, GeLU) that TransformerEngine fuses but our memory-bound ops charge "
    "separately. None has a cited kernel-level figure here; sizing them needs traces of such "
    "runs, which this project does not have. The transferred calibration (the A100 fit under v3: "
    "0.9677 of the GEMM and 0.9508 of the memory-bound figures, 69.93 us per kernel) lowers the "
    "Megatron rows' predictions by 9% (462B) to 23% (7.1B), but it comes from small models on a "
    "2023 eager Megatron-LM stack on A100s; whether its per-kernel time holds for "
    "TransformerEngine on H100s is not known.",
    "- **32B: an exposed sync the measured run does not show.** TP 8 fills each node, so every "
    "data-parallel group has one rank per node and one channel at 47 GB/s; its sync is 52% of the "
    "modelled iteration, 37% exposed, because four microbatches (global batch 192 over DP 48) "
    "leave only the last one's backward to hide the reduce-scatter and one forward to hide the "
    "gather. Its error is the most negative of all rows in both columns (-6.2%, -23.7% "
    "transferred), and it is the one Megatron row the uncalibrated model predicts below its "
    "measurement: its exposed sync outweighs the too-fast compute. The source names no mechanism "
    "beyond the overlap flags, which are priced; what shortens or hides the rest of that sync on "
    "the measured run (in-network reduction on the fabric, for instance, which the source does "
    "not mention) is not identified.",
    "- **The trend.** The measured TF/s peak at 16B, dip at 70B-177B (pipeline bubbles of 9-16% "
    "of the modelled iteration) and rise again at 314B. The rank correlation is 0.49 "
    "uncalibrated, 0.36 transferred (0.30 and 0.22 with every TP collective charged in full): not "
    "reproduced. The ordering errors are the two smallest rows predicted fastest (compute), 32B "
    "predicted below the 70B-177B rows it outran (its sync), and the TP 8 Megatron rows' modelled "
    "TF/s rising steadily with size (483 to 547 uncalibrated, 70B to 462B) where the measured "
    "ones dip and recover.",
    "- **Llama 3 405B.** +10.9% on 8,192 GPUs and -4.2% on 16,384 (+5.2% and -8.9% transferred); "
    "v3 moved them by under 3 points (TP collectives dearer, sync cheaper; the source does not "
    "state an overlapped weight gather, so it is charged in full, 2-4% of the iteration exposed). "
    "The measured step between them is -7%, the modelled one -20%: the 16,384-GPU row runs 16 "
    "microbatches per data-parallel group over 16 stages and its modelled bubble is 31% of the "
    "iteration at the assumed interleaving depth v = 2. The source does not give the depth; a "
    "deeper one would shrink the bubble. It is not tuned here. Their TP collectives (12-15% of "
    "the modelled iteration) are charged in full: the source states no tensor-parallel overlap, "
    "so pricing §5 e did not move them.",
    "- **Memory**: every Megatron row and the 8,192-GPU Llama row are within 1.2% of the "
    "estimator as Megatron-LM computes it (its sequence-parallel, selective term 18 + 4f/h "
    "follows the FFN width). The 16,384-GPU row runs v m = 32 chunk-microbatches, fewer than the "
    "interleaved schedule's warm-up; Megatron's scheduler then holds all 32, which the evaluator "
    "charges, while the estimator charges its full interleaving penalty (1 + (p-1)/(p v)) * l "
    "layer-microbatches: -26% against the formula as written, +0.4% against the formula with its "
    "own 1F1B cap min(1, m/p) applied to the interleaved count.",
]


if __name__ == "__main__":
    main()

