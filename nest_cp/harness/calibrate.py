"""``nest-cp calibrate``: fit a device's kernel efficiencies to measured training runs.

Input: a CSV of measured runs, one per row, columns (header names; [optional, default]):

    model            preset name, or an HF config / transformer description file (relative
                     to the CSV)
    network          preset network
    devices          devices of the cluster
    tp, pp, dp       the plan's degrees        [ep 1, vp 1, zero 1 (distributed optimizer)]
    mbs              microbatch size
    global_batch     samples per iteration
    seq_len          sequence length
    [device]         preset device or device file; every row the same   [network's default]
    [recompute]      none | full | selective                             [none]
    [attention]      flash | materialized                                [flash]
    [sequence_parallel]  true | false                                    [true when tp > 1]
    [overlap_grad_reduce]  true | false                                  [false]
    [name]           a label for the row
    measured_iteration_s  or  measured_tflops_per_gpu   (model TF/s per GPU, Megatron's count)

The model is the cost model itself: every row is predicted by the plan evaluator on the
profile of its model, so bubbles, communication and memory stay where the cost model puts
them and only the kernel efficiencies move. Least squares on the log of predicted / measured
iteration time (Levenberg-Marquardt, numerical Jacobian, efficiencies kept in (0.02, 1]).

Honesty rules: a parameter the data do not constrain (it moves no row's time by 2 % when
doubled, or it cannot be told apart from another: the Jacobian's condition number above
1e3) keeps the base device's datasheet/microbenchmark value and is reported as not
constrained; fewer rows than free parameters + 1 leaves the lowest-sensitivity parameters
fixed. The written device records the fit, the residual spread and the hidden sizes and
sequence lengths of the data; profiling outside them logs a warning.
"""

from __future__ import annotations

import csv
import logging
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from nest_cp.harness.runs import RecomputeMode, Run, load_model, predict
from nest_cp.model.errors import InstanceFormatError
from nest_cp.model.instance import Optimizer
from nest_cp.profiles.kernels import EFFICIENCY_FIELDS, DeviceSpec
from nest_cp.profiles.profiler import AttentionKind

LOGGER = logging.getLogger(__name__)

LOWER, UPPER = 0.02, 1.0
MIN_SENSITIVITY = 0.02  # |d log T / d log efficiency| on at least one row
MAX_CONDITION = 1e3
_REQUIRED = ("model", "network", "devices", "tp", "pp", "dp", "mbs", "global_batch", "seq_len")
_OPTIONAL = ("name", "device", "ep", "vp", "zero", "recompute", "attention",
             "sequence_parallel", "overlap_grad_reduce", "measured_iteration_s",
             "measured_tflops_per_gpu")


@dataclass(frozen=True, slots=True)
class Measurement:
    """A measured run: the run, its measured iteration time or TF/s per GPU, its CSV row."""

    run: Run
    measured_iteration_s: float | None
    measured_tflops_per_gpu: float | None
    row: int
    device: str | None


@dataclass(frozen=True, slots=True)
class RowFit:
    name: str
    measured_s: float
    predicted_s: float

    @property
    def error(self) -> float:
        """Relative error of the prediction, (predicted - measured) / measured."""
        return self.predicted_s / self.measured_s - 1


@dataclass(frozen=True, slots=True)
class CalibrationResult:
    device: DeviceSpec
    base: DeviceSpec
    fitted: tuple[str, ...]
    unconstrained: tuple[tuple[str, str], ...]  # (parameter, why)
    std_errors: dict[str, float]
    before: tuple[RowFit, ...]
    after: tuple[RowFit, ...]
    hidden_range: tuple[int, int]
    seq_len_range: tuple[int, int]
    iterations: int
    notes: tuple[str, ...] = field(default=())

    @property
    def residual_rms(self) -> float:
        return math.sqrt(sum(math.log1p(r.error) ** 2 for r in self.after) / len(self.after))

    @property
    def residual_max(self) -> float:
        return max(abs(r.error) for r in self.after)

    def calibration_record(self, source: str) -> dict:
        """The ``calibration`` section of the device file."""
        return {"base": self.base.name, "source": source, "rows": len(self.after),
                "fitted": {name: getattr(self.device, name) for name in self.fitted},
                "std_error_relative": {name: round(value, 6)
                                       for name, value in self.std_errors.items()},
                "unconstrained": {name: why for name, why in self.unconstrained},
                "residual_rms_pct": round(100 * self.residual_rms, 3),
                "residual_max_pct": round(100 * self.residual_max, 3),
                "hidden_range": list(self.hidden_range),
                "seq_len_range": list(self.seq_len_range)}


# ------------------------------------------------------------------ reading the CSV


def _fail(path: Path, row: int | None, column: str, message: str) -> None:
    where = f"row {row}." if row is not None else ""
    raise InstanceFormatError(message, file=str(path), field=f"{where}{column}")


def _int(path: Path, row: int, record: dict, column: str, default: int | None = None) -> int:
    raw = (record.get(column) or "").strip()
    if not raw:
        if default is None:
            _fail(path, row, column, "expected an integer >= 1, got nothing")
        return default
    try:
        value = int(raw)
    except ValueError:
        value = -1
    if value < (0 if column == "zero" else 1):
        _fail(path, row, column, f"expected an integer >= 1, got {raw!r}")
    return value


def _choice(path: Path, row: int, record: dict, column: str, enum: type, default):
    raw = (record.get(column) or "").strip()
    if not raw:
        return default
    try:
        return enum(raw)
    except ValueError:
        _fail(path, row, column, "expected one of " + ", ".join(repr(e.value) for e in enum)
              + f", got {raw!r}")


def read_measurements(path: str | Path) -> list[Measurement]:
    """Parse the CSV; InstanceFormatError naming file, row and column on bad input."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        _fail(path, None, "", "expected a readable UTF-8 CSV file")
    reader = csv.DictReader(text.splitlines())
    header = reader.fieldnames or []
    for column in _REQUIRED:
        if column not in header:
            _fail(path, None, column, "expected this column in the header")
    for column in header:
        if column not in _REQUIRED and column not in _OPTIONAL:
            _fail(path, None, column, "expected a known column ("
                  + ", ".join((*_REQUIRED, *_OPTIONAL)) + ")")
    if "measured_iteration_s" not in header and "measured_tflops_per_gpu" not in header:
        _fail(path, None, "measured_iteration_s",
              "expected a measured_iteration_s or measured_tflops_per_gpu column")
    found = []
    for row, record in enumerate(reader, start=2):
        found.append(_measurement(path, row, record))
    if not found:
        _fail(path, None, "", "expected at least one measured row")
    return found


def _measurement(path: Path, row: int, record: dict) -> Measurement:
    try:
        model = load_model((record.get("model") or "").strip(), path.parent)
    except InstanceFormatError as exc:
        if exc.file is not None:
            raise
        _fail(path, row, "model", exc.detail)
    tp = _int(path, row, record, "tp")
    sp_raw = _flag(path, row, record, "sequence_parallel")
    overlap = _flag(path, row, record, "overlap_grad_reduce") == "true"
    run = Run(name=(record.get("name") or "").strip() or f"row {row}", model=model,
              network=(record.get("network") or "").strip(),
              devices=_int(path, row, record, "devices"), tp=tp,
              pp=_int(path, row, record, "pp"), dp=_int(path, row, record, "dp"),
              microbatch=_int(path, row, record, "mbs"),
              global_batch=_int(path, row, record, "global_batch"),
              seq_len=_int(path, row, record, "seq_len"), ep=_int(path, row, record, "ep", 1),
              vp=_int(path, row, record, "vp", 1), zero=_int(path, row, record, "zero", 1),
              recompute=_choice(path, row, record, "recompute", RecomputeMode,
                                RecomputeMode.NONE),
              attention=_choice(path, row, record, "attention", AttentionKind,
                                AttentionKind.FLASH),
              sequence_parallel=(sp_raw == "true") if sp_raw else tp > 1,
              overlap_grad_reduce=overlap)
    if run.devices_used > run.devices:
        _fail(path, row, "devices", f"expected at least tp*ep*pp*dp = {run.devices_used}, "
                                    f"got {run.devices}")
    seconds = _measured(path, row, record, "measured_iteration_s")
    tflops = None if seconds is not None else _measured(path, row, record,
                                                       "measured_tflops_per_gpu")
    if seconds is None and tflops is None:
        _fail(path, row, "measured_iteration_s", "expected a measured iteration time or TF/s")
    device = (record.get("device") or "").strip() or None
    return Measurement(run=run, measured_iteration_s=seconds, measured_tflops_per_gpu=tflops,
                       row=row, device=device)


def _flag(path: Path, row: int, record: dict, column: str) -> str:
    raw = (record.get(column) or "").strip().lower()
    if raw not in ("", "true", "false"):
        _fail(path, row, column, f"expected true or false, got {raw!r}")
    return raw


def _measured(path: Path, row: int, record: dict, column: str) -> float | None:
    raw = (record.get(column) or "").strip()
    if not raw:
        return None
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not (math.isfinite(value) and value > 0):
        _fail(path, row, column, f"expected a number > 0, got {raw!r}")
    return value


def _as_seconds(measurement: Measurement, device: DeviceSpec, optimizer: Optimizer) -> float:
    """Measured TF/s per GPU become seconds with the model FLOPs nest-cp counts."""
    if measurement.measured_iteration_s is not None:
        return measurement.measured_iteration_s
    flops = predict(measurement.run, device, optimizer).model_flops_per_iteration
    return flops / (measurement.measured_tflops_per_gpu * 1e12 * measurement.run.devices_used)


# ------------------------------------------------------------------ fitting


def _predictor(measurements: Sequence[Measurement], base: DeviceSpec, optimizer: Optimizer,
               names: Sequence[str]) -> Callable[[np.ndarray], np.ndarray]:
    def times(log_values: np.ndarray) -> np.ndarray:
        device = base.with_efficiencies(**{name: float(np.exp(v))
                                           for name, v in zip(names, log_values, strict=True)})
        return np.array([predict(m.run, device, optimizer).iteration_s for m in measurements])
    return times


def _jacobian(times: Callable[[np.ndarray], np.ndarray], x: np.ndarray,
              at: np.ndarray, step: float = 1e-3) -> np.ndarray:
    """d log T / d log efficiency, by forward differences."""
    columns = []
    for index in range(len(x)):
        moved = x.copy()
        moved[index] += step if moved[index] + step <= math.log(UPPER) else -step
        delta = moved[index] - x[index]
        columns.append((np.log(times(moved)) - np.log(at)) / delta)
    return np.stack(columns, axis=1)


def _free_parameters(jacobian: np.ndarray, names: list[str],
                     rows: int) -> tuple[list[int], list[tuple[str, str]]]:
    """Indices of parameters the data constrain, and (name, why) for the others."""
    fixed: list[tuple[str, str]] = []
    free = []
    for index, name in enumerate(names):
        sensitivity = float(np.max(np.abs(jacobian[:, index])))
        if sensitivity < MIN_SENSITIVITY:
            fixed.append((name, f"moves no row's time by {100 * MIN_SENSITIVITY:g}% per 100% "
                                f"change (max sensitivity {sensitivity:.3g})"))
        else:
            free.append(index)
    while free:
        sub = jacobian[:, free]
        singular = np.linalg.svd(sub, compute_uv=False)
        too_many = len(free) > max(rows - 1, 1)
        if not too_many and singular[-1] > 0 and singular[0] / singular[-1] <= MAX_CONDITION:
            break
        if too_many:
            weakest = min(free, key=lambda i: float(np.linalg.norm(jacobian[:, i])))
            why = f"more free parameters than rows - 1 ({rows} rows)"
        else:
            _, _, vt = np.linalg.svd(sub)
            weakest = free[int(np.argmax(np.abs(vt[-1])))]
            why = "not separable from the other parameters on these rows"
        fixed.append((names[weakest], why))
        free.remove(weakest)
    return free, fixed


def calibrate(measurements: Sequence[Measurement], base: DeviceSpec, optimizer: Optimizer,
              max_iterations: int = 30) -> CalibrationResult:
    """Levenberg-Marquardt on log(predicted / measured) over the constrained efficiencies."""
    names = list(EFFICIENCY_FIELDS)
    measured = np.array([_as_seconds(m, base, optimizer) for m in measurements])
    times = _predictor(measurements, base, optimizer, names)
    x = np.log(np.array([getattr(base, name) for name in names]))
    start = times(x)
    jacobian = _jacobian(times, x, start)
    free, fixed = _free_parameters(jacobian, names, len(measurements))
    current, damping, iterations = start, 1e-3, 0
    for iterations in range(1, max_iterations + 1):  # noqa: B007 - reported
        residual = np.log(current / measured)
        if not free:
            break
        jac = (jacobian if iterations == 1 else _jacobian(times, x, current))[:, free]
        normal = jac.T @ jac
        gradient = jac.T @ residual
        improved = False
        for _ in range(12):
            step = np.linalg.solve(normal + damping * np.diag(np.diag(normal) + 1e-12), -gradient)
            trial = x.copy()
            trial[free] = np.clip(trial[free] + step, math.log(LOWER), math.log(UPPER))
            trial_times = times(trial)
            if np.sum(np.log(trial_times / measured) ** 2) < np.sum(residual**2):
                x, current, damping, improved = trial, trial_times, damping / 3, True
                break
            damping *= 4
        if not improved or float(np.max(np.abs(step))) < 1e-6:
            break
    device = base.with_efficiencies(**{name: float(np.exp(x[i])) for i, name in enumerate(names)})
    std = _std_errors(times, x, current, measured, free, names)
    models = [m.run for m in measurements]
    return CalibrationResult(
        device=device, base=base, fitted=tuple(names[i] for i in free),
        unconstrained=tuple(fixed), std_errors=std,
        before=_rows(measurements, measured, start), after=_rows(measurements, measured, current),
        hidden_range=(min(r.model.hidden for r in models), max(r.model.hidden for r in models)),
        seq_len_range=(min(r.seq_len for r in models), max(r.seq_len for r in models)),
        iterations=iterations)


def _std_errors(times, x, current, measured, free, names) -> dict[str, float]:
    """Relative standard errors sqrt(diag(sigma^2 (J^T J)^-1)) of the fitted efficiencies."""
    rows = len(measured)
    if not free or rows <= len(free):
        return {}
    jac = _jacobian(times, x, current)[:, free]
    residual = np.log(current / measured)
    sigma2 = float(residual @ residual) / (rows - len(free))
    try:
        covariance = np.linalg.inv(jac.T @ jac) * sigma2
    except np.linalg.LinAlgError:
        return {}
    return {names[i]: float(math.sqrt(max(covariance[k, k], 0.0))) for k, i in enumerate(free)}


def _rows(measurements, measured, predicted) -> tuple[RowFit, ...]:
    return tuple(RowFit(m.run.name, float(t), float(p))
                 for m, t, p in zip(measurements, measured, predicted, strict=True))


def report(result: CalibrationResult) -> str:
    """The fit, per-row residuals and what the data did not constrain, as text."""
    lines = [f"base device      {result.base.name}",
             f"rows             {len(result.after)}, {result.iterations} iterations",
             "parameter                   base      fitted   std.err (relative)"]
    for name in EFFICIENCY_FIELDS:
        fitted = getattr(result.device, name)
        status = (f"{100 * result.std_errors[name]:.2f}%" if name in result.std_errors
                  else "fitted" if name in result.fitted else "NOT CONSTRAINED (kept)")
        lines.append(f"{name:<26} {getattr(result.base, name):>6.4f}  {fitted:>9.4f}   {status}")
    for name, why in result.unconstrained:
        lines.append(f"  {name}: {why}")
    lines.append(f"{'row':<28} {'measured s':>11} {'before':>9} {'after':>9}")
    for before, after in zip(result.before, result.after, strict=True):
        lines.append(f"{after.name[:28]:<28} {after.measured_s:>11.4f} {100 * before.error:>8.2f}%"
                     f" {100 * after.error:>8.2f}%")
    lines.append(f"residual spread  rms {100 * result.residual_rms:.2f}%, max "
                 f"{100 * result.residual_max:.2f}% (log residuals)")
    lines.append(f"data range       hidden {result.hidden_range[0]}..{result.hidden_range[1]}, "
                 f"sequence {result.seq_len_range[0]}..{result.seq_len_range[1]}: using the "
                 f"calibrated device outside it logs a warning")
    return "\n".join(lines)
