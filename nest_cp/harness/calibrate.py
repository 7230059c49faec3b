"""``nest-cp calibrate``: fit a device's few physical parameters to measured training runs.

DESIGN §1.1 (Calibration): kernels measured in isolation run faster than inside a training
step. A device may carry parameters fitted to a *declared* calibration set of measured runs,
reported on runs it was not fitted to. The parameters stay physical and shared across models:
the sustained fraction of each kernel efficiency (GEMM, flash attention forward and backward,
memory-bound kernels) and a fixed time per kernel launched inside a step
(:data:`nest_cp.profiles.kernels.CALIBRATED_FIELDS`).

**Input** (docs/calibration.md): a CSV with the calibration set's columns, one measured run
per row (the header is case-sensitive; a UTF-8 byte-order mark is allowed)::

    # GPUs, global batch, micro batch, hidden size, attention heads, # layers,
    sequence length, tensor parallelism, data parallelism, pipeline parallelism,
    iteration time (ms)

and optional columns whose defaults are the calibration set's setting (Megatron-LM GPT of
2023: vocabulary 50,257, FFN 4h, full recomputation, materialised attention, no sequence
parallelism, no distributed optimizer, no overlapped gradient reduction, plain 1F1B)::

    name, vocabulary size, ffn hidden size, virtual stages, recompute, attention,
    sequence parallel, zero, overlap grad reduce

The model of each row is a GPT (LayerNorm, GeLU, biases, dropout, learned positions, tied
embeddings; Megatron pads the vocabulary to a multiple of 128·t). Files over 64 MiB, duplicate
or unknown columns and malformed values are refused (InstanceFormatError naming the row and
column: exit 2 on the command line).

**Split by model shape** (hidden x layers): the fit sees the training shapes only; every
figure of the report is on the other shapes. **Fit**: least squares on log(predicted /
measured) iteration time, every row predicted by the plan evaluator on its own profile
(bubbles and communication stay where the cost model puts them), Levenberg-Marquardt with a
numerical Jacobian. Efficiencies move in log space within [0.02, 1]; the fixed time per
kernel in units of 10 us within [0, 1 ms). A parameter that moves no row's time by 2 % per
unit, or that the rows cannot separate from the others (Jacobian condition number above 1e3),
keeps the base device's value and is reported as not constrained. Standard errors are
sqrt(diag(sigma^2 (J^T J)^-1)) at the optimum; :func:`weaknesses` names a fitted parameter at
its bound or with a relative standard error above 50 % (the command refuses to write such a
fit unless told to).

**Decision quality** (:func:`group_scores`): within every group of runs of one shape, GPU
count and global batch, the Spearman correlation of predicted and measured times and the
regret of the predicted-best configuration (its measured time over the group's measured best,
minus 1).
"""

from __future__ import annotations

import csv
import logging
import math
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from nest_cp.harness.runs import RecomputeMode, Run, predict
from nest_cp.model.errors import InstanceFormatError
from nest_cp.model.instance import Optimizer
from nest_cp.model.limits import MAX_INPUT_BYTES
from nest_cp.profiles.kernels import CALIBRATED_FIELDS, MAX_KERNEL_FIXED_S, DeviceSpec
from nest_cp.profiles.profiler import AttentionKind
from nest_cp.profiles.transformer import ModelKind, TransformerSpec

LOGGER = logging.getLogger(__name__)

LOWER, UPPER = 0.02, 1.0  # efficiency bounds
FIXED_UNIT_S = 1e-5  # the fixed time per kernel moves in units of 10 us
MIN_SENSITIVITY = 0.02  # |d log T / d parameter unit| on at least one row
MAX_CONDITION = 1e3
MAX_RELATIVE_STD_ERROR = 0.5
GOAL_GROUP_SIZE = 5  # groups of at least this many configurations carry the goals

REQUIRED = {"# GPUs": "devices", "global batch": "global_batch", "micro batch": "microbatch",
            "hidden size": "hidden", "attention heads": "heads", "# layers": "layers",
            "sequence length": "seq_len", "tensor parallelism": "tp",
            "data parallelism": "dp", "pipeline parallelism": "pp",
            "iteration time (ms)": "measured_ms"}
OPTIONAL = ("name", "vocabulary size", "ffn hidden size", "virtual stages", "recompute",
            "attention", "sequence parallel", "zero", "overlap grad reduce")
DEFAULT_VOCAB = 50257


@dataclass(frozen=True, slots=True)
class Measurement:
    """A measured run: the run, its measured iteration time, its CSV row and model shape."""

    run: Run
    measured_s: float
    row: int

    @property
    def shape(self) -> str:
        """The model shape the split is by: ``HIDDENxLAYERS``."""
        return shape_label(self.run.model)

    @property
    def group(self) -> tuple[str, int, int]:
        """(shape, GPUs, global batch): the runs a planner chooses among."""
        return self.shape, self.run.devices, self.run.global_batch


def shape_label(model: TransformerSpec) -> str:
    return f"{model.hidden}x{model.num_layers}"


# ------------------------------------------------------------------ reading the CSV


def _fail(path: Path, row: int | None, column: str, message: str) -> None:
    where = f"row {row}." if row is not None else ""
    raise InstanceFormatError(message, file=str(path), field=f"{where}{column}")


def _read_text(path: Path) -> str:
    """The file's text within the input limit (``/dev/zero`` and other endless files too)."""
    try:
        with path.open("rb") as handle:
            raw = handle.read(MAX_INPUT_BYTES + 1)
    except FileNotFoundError:
        _fail(path, None, "", "expected an existing file, got none")
    except OSError as exc:
        _fail(path, None, "", f"expected a readable file ({exc.__class__.__name__})")
    if len(raw) > MAX_INPUT_BYTES:
        _fail(path, None, "", f"expected a file of at most {MAX_INPUT_BYTES // 2**20} MiB, got "
                              f"a larger one")
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError:
        _fail(path, None, "", "expected a UTF-8 CSV file")
    raise AssertionError("unreachable")


def read_measurements(path: str | Path) -> list[Measurement]:
    """Parse the CSV; InstanceFormatError naming file, row and column on bad input."""
    path = Path(path)
    if path.is_dir():
        _fail(path, None, "", "expected a CSV file, got a folder")
    lines = _read_text(path).splitlines()
    rows = _csv_rows(path, lines)
    header = [column.strip() for column in next(rows, (1, []))[1]]
    seen: set[str] = set()
    for column in header:
        if column in seen:
            _fail(path, None, column, "expected each column once, got it twice")
        seen.add(column)
        if column not in REQUIRED and column not in OPTIONAL:
            _fail(path, None, column, "expected a known column (" + ", ".join(
                (*REQUIRED, *OPTIONAL)) + ")")
    for column in REQUIRED:
        if column not in seen:
            _fail(path, None, column, "expected this column in the header")
    found = []
    for row, values in rows:
        if not any(value.strip() for value in values):
            continue
        if len(values) != len(header):
            _fail(path, row, "", f"expected {len(header)} values, got {len(values)}")
        found.append(_measurement(path, row, dict(zip(header, values, strict=True))))
    if not found:
        _fail(path, None, "", "expected at least one measured row")
    return found


def _csv_rows(path: Path, lines: list[str]) -> Iterator[tuple[int, list[str]]]:
    """(row number, values) of each CSV row; a field over the csv module's size limit is
    bad input naming its row and column (the header's name, or its 1-based position)."""
    reader = csv.reader(lines)
    header: list[str] = []
    while True:
        try:
            values = next(reader)
        except StopIteration:
            return
        except csv.Error as exc:
            row = reader.line_num
            fields = lines[row - 1].split(",") if 0 < row <= len(lines) else [""]
            index = max(range(len(fields)), key=lambda at: len(fields[at]))
            column = header[index].strip() if index < len(header) else f"column {index + 1}"
            _fail(path, row, column, f"expected a field of at most {csv.field_size_limit():,} "
                                     f"characters, got {len(fields[index]):,} ({exc})")
        if not header:
            header = values
        yield reader.line_num, values


def _int(path: Path, row: int, record: dict, column: str, default: int | None = None,
         least: int = 1) -> int:
    raw = (record.get(column) or "").strip()
    if not raw:
        if default is None:
            _fail(path, row, column, f"expected an integer >= {least}, got nothing")
        return default
    try:
        value = int(raw) if len(raw) <= 19 else -1
    except ValueError:
        value = least - 1
    if value < least:
        _fail(path, row, column, f"expected an integer >= {least}, got {raw!r}")
    return value


def _choice(path: Path, row: int, record: dict, column: str, enum: type, default):
    raw = (record.get(column) or "").strip().lower()
    if not raw:
        return default
    try:
        return enum(raw)
    except ValueError:
        _fail(path, row, column, "expected one of " + ", ".join(repr(e.value) for e in enum)
              + f", got {raw!r}")
    raise AssertionError("unreachable")


def _flag(path: Path, row: int, record: dict, column: str) -> bool:
    raw = (record.get(column) or "").strip().lower()
    if raw not in ("", "true", "false"):
        _fail(path, row, column, f"expected true or false, got {raw!r}")
    return raw == "true"


def _measurement(path: Path, row: int, record: dict) -> Measurement:
    ints = {column: _int(path, row, record, column)
            for column in REQUIRED if column != "iteration time (ms)"}
    hidden, seq = ints["hidden size"], ints["sequence length"]
    try:
        model = TransformerSpec(
            name=f"gpt-{hidden}x{ints['# layers']}", kind=ModelKind.DECODER, hidden=hidden,
            ffn_hidden=_int(path, row, record, "ffn hidden size", 4 * hidden),
            num_layers=ints["# layers"], num_heads=ints["attention heads"],
            vocab=_int(path, row, record, "vocabulary size", DEFAULT_VOCAB),
            tied_embeddings=True, learned_positions=seq, default_seq_len=seq)
    except ValueError as exc:
        _fail(path, row, "hidden size", str(exc))
    tp, pp, dp = (ints["tensor parallelism"], ints["pipeline parallelism"],
                  ints["data parallelism"])
    if model.num_heads % tp:
        _fail(path, row, "tensor parallelism", f"expected a width dividing the "
                                               f"{model.num_heads} heads, got {tp}")
    vp = _int(path, row, record, "virtual stages", 1)
    if pp * vp > model.num_layers:
        _fail(path, row, "pipeline parallelism", f"expected pp x vp <= {model.num_layers} "
                                                 f"layers, got {pp} x {vp}")
    run = Run(name=(record.get("name") or "").strip() or f"row {row}", model=model,
              network="", devices=ints["# GPUs"], tp=tp, pp=pp, dp=dp,
              microbatch=ints["micro batch"], global_batch=ints["global batch"],
              seq_len=seq, vp=vp, zero=_int(path, row, record, "zero", 0, least=0),
              recompute=_choice(path, row, record, "recompute", RecomputeMode,
                                RecomputeMode.FULL),
              attention=_choice(path, row, record, "attention", AttentionKind,
                                AttentionKind.MATERIALIZED),
              sequence_parallel=_flag(path, row, record, "sequence parallel"),
              overlap_grad_reduce=_flag(path, row, record, "overlap grad reduce"))
    if run.zero > 3:
        _fail(path, row, "zero", f"expected a ZeRO stage 0-3, got {run.zero}")
    if run.devices_used > run.devices:
        _fail(path, row, "# GPUs", f"expected at least tp*pp*dp = {run.devices_used}, "
                                   f"got {run.devices}")
    raw = (record.get("iteration time (ms)") or "").strip()
    try:
        measured_ms = float(raw)
    except ValueError:
        measured_ms = -1.0
    if not (math.isfinite(measured_ms) and measured_ms > 0):
        _fail(path, row, "iteration time (ms)", f"expected a number > 0, got {raw!r}")
    return Measurement(run=run, measured_s=measured_ms / 1e3, row=row)


def on_network(measurements: Sequence[Measurement], network: str) -> list[Measurement]:
    """The measurements with every run on the preset ``network``."""
    from dataclasses import replace

    return [replace(m, run=replace(m.run, network=network)) for m in measurements]


def split_by_shape(measurements: Sequence[Measurement], train_shapes: Sequence[str]
                   ) -> tuple[list[Measurement], list[Measurement]]:
    """(rows of the training shapes, the other rows); an unknown shape is an error."""
    present = {m.shape for m in measurements}
    unknown = [shape for shape in train_shapes if shape not in present]
    if unknown:
        raise InstanceFormatError(f"expected shapes among {', '.join(sorted(present))}, got "
                                  f"{', '.join(unknown)}", field="--train-shapes")
    chosen = set(train_shapes)
    return ([m for m in measurements if m.shape in chosen],
            [m for m in measurements if m.shape not in chosen])


# ------------------------------------------------------------------ the fit


@dataclass(frozen=True, slots=True)
class Parameter:
    """A calibrated parameter and its fit coordinate: log(efficiency), or the fixed time per
    kernel in units of :data:`FIXED_UNIT_S`."""

    name: str

    @property
    def is_time(self) -> bool:
        return self.name == "kernel_fixed_s"

    def to_x(self, value: float) -> float:
        return value / FIXED_UNIT_S if self.is_time else math.log(value)

    def from_x(self, x: float) -> float:
        return x * FIXED_UNIT_S if self.is_time else math.exp(x)

    @property
    def bounds(self) -> tuple[float, float]:
        if self.is_time:
            return 0.0, MAX_KERNEL_FIXED_S / FIXED_UNIT_S * (1 - 1e-9)
        return math.log(LOWER), math.log(UPPER)


PARAMETERS = tuple(Parameter(name) for name in CALIBRATED_FIELDS)


@dataclass(frozen=True, slots=True)
class CalibrationResult:
    """The fitted device, what was fitted, standard errors and the training rows' residuals."""

    device: DeviceSpec
    base: DeviceSpec
    fitted: tuple[str, ...]
    unconstrained: tuple[tuple[str, str], ...]  # (parameter, why)
    std_errors: dict[str, float]  # relative standard error of each fitted parameter
    train_shapes: tuple[str, ...]
    before: tuple[float, ...]  # predicted / measured - 1 on the training rows, base device
    after: tuple[float, ...]  # the same with the fitted device
    iterations: int

    @property
    def residual_rms(self) -> float:
        return math.sqrt(sum(math.log1p(e) ** 2 for e in self.after) / len(self.after))

    def relative(self) -> dict[str, float]:
        """Each efficiency over the base's (the sustained fraction), and the fixed time."""
        values = {name: getattr(self.device, name) / getattr(self.base, name)
                  for name in CALIBRATED_FIELDS if name != "kernel_fixed_s"}
        values["kernel_fixed_s"] = self.device.kernel_fixed_s
        return values

    def calibration_record(self, source: str, test_shapes: Sequence[str]) -> dict:
        """The ``calibration`` section of the device file."""
        return {"base": self.base.name, "source": source,
                "train_shapes": list(self.train_shapes), "test_shapes": list(test_shapes),
                "rows": len(self.after),
                "fitted": {name: getattr(self.device, name) for name in self.fitted},
                "relative": {name: round(value, 9) for name, value in self.relative().items()},
                "std_error_relative": {name: round(value, 6)
                                       for name, value in self.std_errors.items()},
                "unconstrained": {name: why for name, why in self.unconstrained},
                "residual_rms_pct": round(100 * self.residual_rms, 3)}


Times = Callable[[np.ndarray], np.ndarray]


def _predictor(measurements: Sequence[Measurement], base: DeviceSpec,
               optimizer: Optimizer) -> Times:
    """Predicted iteration times of every row for a point x of the fit coordinates."""
    runs = [m.run for m in measurements]

    def times(x: np.ndarray) -> np.ndarray:
        device = base.with_efficiencies(**{p.name: p.from_x(float(v))
                                           for p, v in zip(PARAMETERS, x, strict=True)})
        workloads: dict = {}  # one profile per (shape, width, microbatch) for this device
        return np.array([predict(run, device, optimizer, workloads).iteration_s
                         for run in runs])
    return times


def _jacobian(times: Times, x: np.ndarray, at: np.ndarray, columns: Sequence[int],
              step: float = 1e-3) -> np.ndarray:
    """d log T / d x for the given columns (forward differences, backward at an upper bound)."""
    result = np.zeros((len(at), len(x)))
    for index in columns:
        moved = x.copy()
        upper = PARAMETERS[index].bounds[1]
        moved[index] += step if moved[index] + step <= upper else -step
        delta = moved[index] - x[index]
        result[:, index] = (np.log(times(moved)) - np.log(at)) / delta
    return result


def _free_parameters(jacobian: np.ndarray, rows: int) -> tuple[list[int], list[tuple[str, str]]]:
    """Indices of parameters the data constrain, and (name, why) for the others."""
    fixed: list[tuple[str, str]] = []
    free = []
    for index, parameter in enumerate(PARAMETERS):
        sensitivity = float(np.max(np.abs(jacobian[:, index])))
        unit = "10 us" if parameter.is_time else "100% change"
        if sensitivity < MIN_SENSITIVITY:
            fixed.append((parameter.name, f"moves no row's time by {100 * MIN_SENSITIVITY:g}% "
                                          f"per {unit} (max sensitivity {sensitivity:.3g})"))
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
        fixed.append((PARAMETERS[weakest].name, why))
        free.remove(weakest)
    return free, fixed


def calibrate(measurements: Sequence[Measurement], base: DeviceSpec, optimizer: Optimizer,
              max_iterations: int = 30) -> CalibrationResult:
    """Levenberg-Marquardt on log(predicted / measured) over the constrained parameters."""
    measured = np.array([m.measured_s for m in measurements])
    times = _predictor(measurements, base, optimizer)
    x = np.array([p.to_x(getattr(base, p.name)) for p in PARAMETERS])
    start = current = times(x)
    jacobian = _jacobian(times, x, start, range(len(PARAMETERS)))
    free, fixed = _free_parameters(jacobian, len(measurements))
    lower = np.array([p.bounds[0] for p in PARAMETERS])
    upper = np.array([p.bounds[1] for p in PARAMETERS])
    damping, iterations = 1e-3, 0
    for iterations in range(1, max_iterations + 1):  # noqa: B007 - reported
        if not free:
            break
        residual = np.log(current / measured)
        if iterations > 1:
            jacobian = _jacobian(times, x, current, free)
        jac = jacobian[:, free]
        normal, gradient = jac.T @ jac, jac.T @ residual
        improved, step = False, np.zeros(len(free))
        for _ in range(12):
            step = np.linalg.solve(normal + damping * np.diag(np.diag(normal) + 1e-12),
                                   -gradient)
            trial = x.copy()
            trial[free] = np.clip(trial[free] + step, lower[free], upper[free])
            trial_times = times(trial)
            if np.sum(np.log(trial_times / measured) ** 2) < np.sum(residual**2):
                x, current, damping, improved = trial, trial_times, damping / 3, True
                break
            damping *= 4
        if not improved or float(np.max(np.abs(step))) < 1e-5:
            break
    device = base.with_efficiencies(**{p.name: p.from_x(float(v))
                                       for p, v in zip(PARAMETERS, x, strict=True)})
    std = _std_errors(times, x, current, measured, free)
    return CalibrationResult(
        device=device, base=base, fitted=tuple(PARAMETERS[i].name for i in free),
        unconstrained=tuple(fixed), std_errors=std,
        train_shapes=tuple(sorted({m.shape for m in measurements})),
        before=tuple(float(v) for v in start / measured - 1),
        after=tuple(float(v) for v in current / measured - 1), iterations=iterations)


def _std_errors(times: Times, x: np.ndarray, current: np.ndarray, measured: np.ndarray,
                free: list[int]) -> dict[str, float]:
    """Relative standard errors sqrt(diag(sigma^2 (J^T J)^-1)) of the fitted parameters."""
    rows = len(measured)
    if not free or rows <= len(free):
        return {}
    jac = _jacobian(times, x, current, free)[:, free]
    residual = np.log(current / measured)
    sigma2 = float(residual @ residual) / (rows - len(free))
    try:
        covariance = np.linalg.inv(jac.T @ jac) * sigma2
    except np.linalg.LinAlgError:
        return {index: math.inf for index in (PARAMETERS[i].name for i in free)}
    errors = {}
    for k, index in enumerate(free):
        spread = math.sqrt(max(covariance[k, k], 0.0))
        parameter = PARAMETERS[index]
        if parameter.is_time:  # absolute (in units) over the value
            errors[parameter.name] = spread / x[index] if x[index] > 0 else math.inf
        else:  # a spread of log(value) is a relative spread
            errors[parameter.name] = spread
    return errors


def weaknesses(result: CalibrationResult) -> list[str]:
    """Why the fit should not be written: fitted parameters at a bound or with a relative
    standard error above 50 % (empty: the fit may be written)."""
    found = []
    for name in result.fitted:
        parameter = Parameter(name)
        x = parameter.to_x(getattr(result.device, name))
        low, high = parameter.bounds
        if x <= low + 1e-6 or x >= high - 1e-6:
            found.append(f"{name} at its bound ({getattr(result.device, name):.4g})")
        elif result.std_errors.get(name, math.inf) > MAX_RELATIVE_STD_ERROR:
            found.append(f"{name} standard error "
                         f"{100 * result.std_errors.get(name, math.inf):.0f}% > "
                         f"{100 * MAX_RELATIVE_STD_ERROR:.0f}%")
    return found


# ------------------------------------------------------------------ held-out scores


def spearman(x: Sequence[float], y: Sequence[float]) -> float:
    """Spearman's rank correlation (average ranks for ties); nan when either is constant."""
    def ranks(values: Sequence[float]) -> np.ndarray:
        order = np.argsort(values, kind="stable")
        result = np.empty(len(values))
        result[order] = np.arange(len(values), dtype=float)
        for value in set(values):
            tied = [i for i, v in enumerate(values) if v == value]
            result[tied] = float(np.mean(result[tied]))
        return result
    rx, ry = ranks(x), ranks(y)
    if len(x) < 2 or np.std(rx) == 0 or np.std(ry) == 0:
        return math.nan
    return float(np.corrcoef(rx, ry)[0, 1])


@dataclass(frozen=True, slots=True)
class GroupScore:
    """One group's error and decision quality (predicted vs measured iteration times)."""

    group: tuple[str, int, int]
    count: int
    mae: float
    worst: float
    spearman: float
    regret: float


def group_scores(measurements: Sequence[Measurement],
                 predicted_s: Sequence[float]) -> list[GroupScore]:
    """Per (shape, GPUs, global batch): mean and worst absolute error, Spearman of predicted
    and measured times, and the regret of the predicted-best configuration."""
    groups: dict[tuple[str, int, int], list[tuple[float, float]]] = {}
    for m, p in zip(measurements, predicted_s, strict=True):
        groups.setdefault(m.group, []).append((m.measured_s, p))
    scores = []
    for group in sorted(groups, key=lambda g: (g[0], g[1], g[2])):
        pairs = groups[group]
        errors = [abs(p / t - 1) for t, p in pairs]
        chosen = min(pairs, key=lambda pair: pair[1])[0]
        scores.append(GroupScore(group, len(pairs), float(np.mean(errors)), max(errors),
                                 spearman([p for _, p in pairs], [t for t, _ in pairs]),
                                 chosen / min(t for t, _ in pairs) - 1))
    return scores


def predicted_times(measurements: Sequence[Measurement], device: DeviceSpec,
                    optimizer: Optimizer) -> list[float]:
    workloads: dict = {}
    return [predict(m.run, device, optimizer, workloads).iteration_s for m in measurements]


# ------------------------------------------------------------------ reports


def fit_report(result: CalibrationResult) -> str:
    """The fit: each parameter's base and fitted value, its standard error or why it was
    kept, and the training rows' residual spread."""
    lines = [f"base device      {result.base.name}",
             f"fitted on        {len(result.after)} rows of shapes "
             f"{', '.join(result.train_shapes)}; {result.iterations} iterations",
             "parameter                   base        fitted   std.err (relative)"]
    for name in CALIBRATED_FIELDS:
        base, fitted = getattr(result.base, name), getattr(result.device, name)
        status = (f"{100 * result.std_errors[name]:.2f}%" if name in result.std_errors
                  else "fitted" if name in result.fitted else "NOT CONSTRAINED (kept)")
        scale, unit = (1e6, " us") if name == "kernel_fixed_s" else (1.0, "")
        lines.append(f"{name:<26} {scale * base:>7.4f}{unit:<3} {scale * fitted:>9.4f}{unit:<3} "
                     f"{status}")
    for name, why in result.unconstrained:
        lines.append(f"  {name}: {why}")
    before = [abs(e) for e in result.before]
    after = [abs(e) for e in result.after]
    lines.append(f"training rows    mean |error| {100 * np.mean(before):.1f}% -> "
                 f"{100 * np.mean(after):.1f}%, worst {100 * max(before):.1f}% -> "
                 f"{100 * max(after):.1f}%")
    return "\n".join(lines)


def held_out_report(before: Sequence[GroupScore], after: Sequence[GroupScore],
                    measurements: Sequence[Measurement], before_s: Sequence[float],
                    after_s: Sequence[float]) -> str:
    """Per held-out group: uncalibrated and calibrated error, Spearman and regret; then the
    totals against the goals (MAE <= 5 %, worst <= 15 %, regret <= 3 % in groups >= 5)."""
    def pct(value: float) -> str:
        return "n/a" if math.isnan(value) else f"{100 * value:.1f}%"

    def rho(value: float) -> str:
        return "n/a" if math.isnan(value) else f"{value:+.2f}"

    lines = [f"{'shape':<8} {'GPUs':>4} {'batch':>5} {'n':>3}   {'MAE':>13} {'worst':>13} "
             f"{'Spearman':>13} {'regret':>13}   (uncalibrated / calibrated)"]
    for old, new in zip(before, after, strict=True):
        shape, gpus, batch = new.group
        lines.append(f"{shape:<8} {gpus:>4} {batch:>5} {new.count:>3}   "
                     f"{pct(old.mae):>6}/{pct(new.mae):>6} {pct(old.worst):>6}/{pct(new.worst):>6}"
                     f" {rho(old.spearman):>6}/{rho(new.spearman):>6} "
                     f"{pct(old.regret):>6}/{pct(new.regret):>6}")
    for label, times, scores in (("uncalibrated", before_s, before), ("calibrated", after_s,
                                                                      after)):
        errors = [abs(p / m.measured_s - 1) for m, p in zip(measurements, times, strict=True)]
        big = [s for s in scores if s.count >= GOAL_GROUP_SIZE]
        rhos = [s.spearman for s in big if not math.isnan(s.spearman)]
        lines.append(f"{label:<13} held-out rows {len(errors)}: MAE {pct(float(np.mean(errors)))}"
                     f", worst {pct(max(errors))}; groups of >= {GOAL_GROUP_SIZE}: {len(big)}, "
                     f"MAE <= 5% in {sum(s.mae <= 0.05 for s in big)}, worst <= 15% in "
                     f"{sum(s.worst <= 0.15 for s in big)}, regret <= 3% in "
                     f"{sum(s.regret <= 0.03 for s in big)}, median Spearman "
                     f"{rho(float(np.median(rhos)) if rhos else math.nan)}")
    return "\n".join(lines)
