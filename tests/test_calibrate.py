"""nest-cp calibrate: the CSV format and its guards, the fit, its refusals, held-out scores."""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import pytest
from click.testing import CliRunner

from nest_cp.cli import main
from nest_cp.harness import calibrate as cal
from nest_cp.harness.runs import predict
from nest_cp.model.errors import InstanceFormatError
from nest_cp.profiles.devicefile import load_device
from nest_cp.profiles.presets import DEVICES, MEGATRON_FP16_ADAM

DATA = Path(__file__).parent / "data"
BASE = DEVICES["a100-80gb-uncalibrated"]
TRUTH = BASE.with_efficiencies(gemm_efficiency=0.70, memory_efficiency=0.60,
                               kernel_fixed_s=20e-6)
HEADER = list(cal.REQUIRED)
# (GPUs, global batch, micro batch, hidden, layers, tp, dp, pp): small GPTs whose time mixes
# large and small GEMMs, memory-bound ops and many short kernels; two shapes.
RUNS = [(2, 8, 1, 1024, 2, 1, 2, 1), (2, 8, 4, 1024, 2, 2, 1, 1), (4, 16, 2, 1024, 2, 1, 2, 2),
        (4, 16, 8, 1024, 2, 4, 1, 1), (2, 16, 8, 1024, 2, 1, 1, 2), (8, 16, 1, 1024, 2, 8, 1, 1),
        (2, 8, 1, 512, 4, 1, 2, 1), (2, 8, 4, 512, 4, 2, 1, 1), (4, 16, 2, 512, 4, 1, 2, 2),
        (4, 16, 8, 512, 4, 4, 1, 1), (2, 16, 8, 512, 4, 1, 1, 2), (8, 16, 1, 512, 4, 8, 1, 1)]


def _write(path: Path, device=TRUTH, scale: float = 1.0) -> Path:
    """A CSV in the calibration set's format whose times are ``device``'s predictions."""
    rows = []
    for gpus, batch, micro, hidden, layers, tp, dp, pp in RUNS:
        rows.append([gpus, batch, micro, hidden, 16, layers, 512, tp, dp, pp, 1.0])
    with path.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(HEADER)
        writer.writerows(rows)
    measured = cal.on_network(cal.read_measurements(path), "dgx-a100")
    for row, m in zip(rows, measured, strict=True):
        row[-1] = repr(1e3 * scale * predict(m.run, device, MEGATRON_FP16_ADAM).iteration_s)
    with path.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(HEADER)
        writer.writerows(rows)
    return path


def test_round_trip_recovers_known_parameters(tmp_path):
    """Runs generated from known parameters are fitted back to them (within 1%), with
    standard errors, and the attention efficiencies (materialised attention) are kept."""
    rows = cal.on_network(cal.read_measurements(_write(tmp_path / "m.csv")), "dgx-a100")
    result = cal.calibrate(rows, BASE, MEGATRON_FP16_ADAM)
    assert set(result.fitted) == {"gemm_efficiency", "memory_efficiency", "kernel_fixed_s"}
    for name in result.fitted:
        assert getattr(result.device, name) == pytest.approx(getattr(TRUTH, name), rel=1e-2)
        assert 0 <= result.std_errors[name] < 0.05
    assert {name for name, _ in result.unconstrained} == {"attention_fwd_efficiency",
                                                          "attention_bwd_efficiency"}
    assert max(abs(e) for e in result.after) < 2e-3 < max(abs(e) for e in result.before)
    assert cal.weaknesses(result) == []


def test_cli_fits_on_train_shapes_and_writes_a_device(tmp_path):
    """`nest-cp calibrate --train-shapes` fits one shape, prints the other's held-out table
    and writes a device file that records the split and loads back."""
    path = _write(tmp_path / "m.csv")
    out = tmp_path / "fit.json"
    result = CliRunner().invoke(main, ["calibrate", str(path), "--device", "a100-80gb",
                                       "--train-shapes", "1024x2", "-o", str(out)])
    assert result.exit_code == 0, result.output
    assert "held out: shapes 512x4" in result.output and "Spearman" in result.output
    device = load_device(out)
    assert device.gemm_efficiency == pytest.approx(0.70, rel=2e-2)
    record = json.loads(dict(device.calibration)["train_shapes"])
    assert record == ["1024x2"]


def test_degenerate_fit_is_refused(tmp_path):
    """Times no efficiency <= 1 can reach put a parameter at its bound: exit 1, one line
    naming it, nothing written; --accept-weak-fit writes it."""
    path = _write(tmp_path / "m.csv", device=BASE.with_efficiencies(gemm_efficiency=1.0,
                                                                    memory_efficiency=1.0),
                  scale=0.3)
    out = tmp_path / "fit.json"
    args = ["calibrate", str(path), "--train-shapes", "1024x2,512x4", "-o", str(out)]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 1, result.output
    refusal = [line for line in result.output.splitlines() if line.startswith("refused")]
    assert len(refusal) == 1 and "at its bound" in refusal[0] and not out.exists()
    forced = CliRunner().invoke(main, [*args, "--accept-weak-fit"])
    assert forced.exit_code == 0 and out.exists()


def test_weaknesses_name_a_large_standard_error():
    """A fitted parameter with a relative standard error over 50% is named."""
    result = cal.CalibrationResult(
        device=BASE.with_efficiencies(gemm_efficiency=0.5), base=BASE,
        fitted=("gemm_efficiency",), unconstrained=(), std_errors={"gemm_efficiency": 0.8},
        train_shapes=("1x1",), before=(0.1,), after=(0.05,), iterations=1)
    assert cal.weaknesses(result) == ["gemm_efficiency standard error 80% > 50%"]


def test_group_scores_regret_and_spearman():
    """Regret is the predicted-best run's measured time over the measured best, minus 1;
    Spearman ranks predicted against measured times within a group."""
    rows = cal.read_measurements(DATA / "calibration_example.csv")
    measured = [m.measured_s for m in rows]
    reversed_times = [1 / t for t in measured]  # ranks every group backwards
    scores = cal.group_scores(rows, reversed_times)
    for score in scores:
        times = [m.measured_s for m in rows if m.group == score.group]
        assert score.regret == pytest.approx(max(times) / min(times) - 1)
        if len(set(times)) > 1:
            assert score.spearman == pytest.approx(-1.0)
    exact = cal.group_scores(rows, measured)
    assert all(s.regret == 0 and s.mae == 0 for s in exact)


def test_spearman_of_a_constant_is_undefined():
    """A constant prediction has no ranking: Spearman is nan, not a number to average."""
    assert math.isnan(cal.spearman([1.0, 1.0, 1.0], [1.0, 2.0, 3.0]))


def test_example_file_in_tests_data_reads():
    """tests/data/calibration_example.csv (docs/calibration.md's example) parses with the defaults
    of the calibration set's setting."""
    rows = cal.read_measurements(DATA / "calibration_example.csv")
    assert rows and all(m.run.recompute.value == "full" for m in rows)
    assert rows[0].shape == "1024x24" and rows[0].group == ("1024x24", 2, 16)


@pytest.mark.parametrize(("text", "field"), [
    ("# GPUs,global batch\n2,16\n", "micro batch"),
    (",".join(HEADER) + ",# GPUs\n", "# GPUs"),
    (",".join(HEADER) + ",colour\n", "colour"),
    (",".join(HEADER) + "\n2,16,8,1024,16,24,1024,1,1,2,fast\n", "row 2.iteration time (ms)"),
    (",".join(HEADER) + "\n2,16,8,1024,16,24,1024,3,1,2,100\n", "row 2.tensor parallelism"),
    (",".join(HEADER) + "\n2,16,8,1024,16,24,1024,2,1,2,100\n", "row 2.# GPUs"),
    (",".join(HEADER) + "\n2,16,8,1024,16,24,1024,1,1\n", "row 2"),
    (",".join(HEADER) + "\n", "expected at least one measured row"),
])
def test_broken_csv_exits_2_with_one_line(tmp_path, text, field):
    """Missing, duplicate and unknown columns and bad values exit 2 with one line naming
    the file, row and column."""
    path = tmp_path / "bad.csv"
    path.write_text(text)
    result = CliRunner().invoke(main, ["calibrate", str(path), "--train-shapes", "1024x24"])
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and field in lines[0], result.output


def test_oversized_file_and_dev_zero_exit_2(tmp_path):
    """A CSV over 64 MiB and /dev/zero are refused before parsing: exit 2, one line."""
    big = tmp_path / "big.csv"
    with big.open("wb") as handle:
        handle.truncate(64 * 2**20 + 1)
    for path in (big, Path("/dev/zero")):
        if not path.exists():
            continue
        result = CliRunner().invoke(main, ["calibrate", str(path), "--train-shapes", "1x1"])
        assert result.exit_code == 2, result.output
        lines = [line for line in result.output.splitlines() if line.strip()]
        assert len(lines) == 1 and "64 MiB" in lines[0]


def test_unknown_train_shape_is_bad_input():
    """A training shape the file does not hold is an error naming the shapes it has."""
    rows = cal.read_measurements(DATA / "calibration_example.csv")
    with pytest.raises(InstanceFormatError, match="1024x24"):
        cal.split_by_shape(rows, ["4096x96"])


def test_broken_measurements_file_in_tests_data():
    """tests/data/broken_measurements.csv (a negative time) exits 2 naming row and column."""
    result = CliRunner().invoke(main, ["calibrate", str(DATA / "broken_measurements.csv"),
                                       "--train-shapes", "1024x24"])
    assert result.exit_code == 2
    assert "row 2.iteration time (ms)" in result.output
