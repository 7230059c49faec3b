"""nest-cp calibrate: least-squares fit of kernel efficiencies to measured runs."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from nest_cp.cli import main
from nest_cp.harness.calibrate import calibrate, read_measurements
from nest_cp.harness.runs import predict
from nest_cp.io.readers import load_instance
from nest_cp.profiles.devicefile import load_device
from nest_cp.profiles.kernels import EFFICIENCY_FIELDS
from nest_cp.profiles.presets import DEVICES, MEGATRON_ADAM

DATA = Path(__file__).parent / "data"
H100 = DEVICES["h100-sxm"]
TRUTH = H100.with_efficiencies(gemm_efficiency=0.70, attention_fwd_efficiency=0.55,
                               attention_bwd_efficiency=0.42, memory_efficiency=0.75)
COLUMNS = ["name", "model", "network", "devices", "tp", "pp", "dp", "mbs", "global_batch",
           "seq_len", "recompute", "measured_iteration_s", "measured_tflops_per_gpu"]
# (hidden, heads, vocab, seq, tp, pp, recompute): small models whose time mixes GEMMs,
# attention (more at long sequences, fwd again under full recompute) and memory-bound ops.
SHAPES = [(1024, 8, 32000, 1024, 1, 1, "none"), (1024, 8, 128000, 8192, 1, 2, "full"),
          (2048, 16, 32000, 4096, 2, 1, "none"), (2048, 16, 64000, 8192, 2, 2, "full"),
          (4096, 32, 32000, 2048, 4, 1, "none"), (512, 4, 128000, 4096, 1, 1, "none"),
          (4096, 32, 128000, 8192, 4, 2, "full"), (1536, 12, 50000, 2048, 1, 2, "none")]


def _write_rows(folder: Path, device=TRUTH, shapes=SHAPES, as_tflops: int = 3) -> Path:
    rows = []
    for index, (hidden, heads, vocab, seq, tp, pp, recompute) in enumerate(shapes):
        model = folder / f"m{index}.json"
        model.write_text(json.dumps({"name": f"m{index}", "hidden": hidden,
                                     "ffn_hidden": 4 * hidden, "num_layers": 4,
                                     "num_heads": heads, "vocab": vocab, "bias": False,
                                     "dropout": False, "activation": "swiglu",
                                     "norm": "rmsnorm"}))
        row = {"name": f"m{index}", "model": model.name, "network": "dgx-h100-superpod",
               "devices": 16, "tp": tp, "pp": pp, "dp": 2, "mbs": 1, "global_batch": 8,
               "seq_len": seq, "recompute": recompute, "measured_iteration_s": 1.0}
        rows.append(row)
    path = folder / "measured.csv"
    with path.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, COLUMNS)
        writer.writeheader()
        writer.writerows(rows)
    measurements = read_measurements(path)  # now compute the "measured" values from TRUTH
    with path.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, COLUMNS)
        writer.writeheader()
        for index, (row, measurement) in enumerate(zip(rows, measurements, strict=True)):
            truth = predict(measurement.run, device, MEGATRON_ADAM)
            if index < as_tflops:
                row["measured_tflops_per_gpu"] = repr(truth.tflops_per_gpu)
                row["measured_iteration_s"] = ""
            else:
                row["measured_iteration_s"] = repr(truth.iteration_s)
            writer.writerow(row)
    return path


def test_round_trip_recovers_known_efficiencies(tmp_path):
    """Measurements generated from known efficiencies are fitted back to them (within 0.5%)."""
    path = _write_rows(tmp_path)
    result = calibrate(read_measurements(path), H100, MEGATRON_ADAM)
    assert set(result.fitted) == set(EFFICIENCY_FIELDS), result.unconstrained
    for name in EFFICIENCY_FIELDS:
        assert getattr(result.device, name) == pytest.approx(getattr(TRUTH, name), rel=5e-3)
    assert result.residual_max < 1e-3
    assert max(abs(row.error) for row in result.before) > 0.05  # the start was really off


def test_too_few_rows_leave_parameters_unconstrained(tmp_path):
    """Two rows cannot fix four efficiencies: the weakest are kept at the base and reported."""
    path = _write_rows(tmp_path, shapes=SHAPES[:2], as_tflops=0)
    result = calibrate(read_measurements(path), H100, MEGATRON_ADAM)
    assert len(result.fitted) <= 1
    kept = {name for name, _ in result.unconstrained}
    assert kept == set(EFFICIENCY_FIELDS) - set(result.fitted)
    for name in kept:
        assert getattr(result.device, name) == getattr(H100, name)


def test_cli_writes_a_device_instances_can_use(tmp_path):
    """`nest-cp calibrate` prints residuals, writes a device file, and an instance loads it."""
    path = _write_rows(tmp_path)
    out = tmp_path / "fit.json"
    result = CliRunner().invoke(main, ["calibrate", str(path), "-o", str(out)])
    assert result.exit_code == 0, result.output
    assert "residual spread" in result.output and "m7" in result.output
    device = load_device(out)
    assert device.gemm_efficiency == pytest.approx(0.70, rel=5e-3)
    instance = tmp_path / "instance.json"
    instance.write_text(json.dumps({
        "workload": {"preset": "llama2-7b", "device": "fit.json", "tp": [1]},
        "cluster": {"preset": "dgx-h100-superpod", "num_devices": 8, "device": "fit.json"},
        "training": {"global_batch": 8, "seq_len": 2048}}))
    assert load_instance(instance).workload.num_layers == 34


@pytest.mark.parametrize(("text", "field"), [
    ("model,network\nllama2-7b,dgx-h100-superpod\n", "devices"),
    ("model,network,devices,tp,pp,dp,mbs,global_batch,seq_len,measured_iteration_s\n"
     "llama2-7b,dgx-h100-superpod,8,1,1,8,1,8,2048,fast\n", "row 2.measured_iteration_s"),
    ("model,network,devices,tp,pp,dp,mbs,global_batch,seq_len,measured_iteration_s\n"
     "gpt5,dgx-h100-superpod,8,1,1,8,1,8,2048,1.0\n", "row 2.model"),
    ("model,network,devices,tp,pp,dp,mbs,global_batch,seq_len,measured_iteration_s\n"
     "llama2-7b,dgx-h100-superpod,4,1,1,8,1,8,2048,1.0\n", "row 2.devices"),
    ("model,network,devices,tp,pp,dp,mbs,global_batch,seq_len,colour,measured_iteration_s\n"
     "llama2-7b,dgx-h100-superpod,8,1,1,8,1,8,2048,red,1.0\n", "colour"),
])
def test_broken_measurements_exit_2_with_one_line(tmp_path, text, field):
    """A malformed measurements CSV exits 2 with one line naming the file, row and column."""
    path = tmp_path / "bad.csv"
    path.write_text(text)
    result = CliRunner().invoke(main, ["calibrate", str(path)])
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and field in lines[0], result.output


def test_broken_measurements_file_in_tests_data():
    """tests/data/broken_measurements.csv (a negative TF/s) exits 2 naming row and column."""
    result = CliRunner().invoke(main, ["calibrate", str(DATA / "broken_measurements.csv")])
    assert result.exit_code == 2
    assert "row 2.measured_tflops_per_gpu" in result.output
