"""Kernel-level device model: how long one GEMM, attention kernel or memory-bound op takes.

DESIGN §1.1 (profiler semantics v2): a device's efficiencies are *kernel* figures taken from
datasheets and published kernel microbenchmarks, never end-to-end training utilisation.
Every constant of a preset device is cited where it is defined (``nest_cp/profiles/presets.py``) and
in ``docs/device-model.md``.

**GEMM** ``(m x k) @ (k x n)``, ``batch`` independent products (grouped experts, heads):

    t = max( 2 m n k batch / (peak * gemm_efficiency * q(m, n, batch)),
             bytes / (mem_bandwidth * memory_efficiency) ) + gemm_fixed_s

with ``bytes = 2 (m k + k n + m n) batch`` (bf16 operands and result, each moved once).
``q`` is NVIDIA's *tile and wave quantisation* (Matrix Multiplication Background User's Guide,
DU-09799-001, §3): the output is cut into ``tm x tn`` tiles, one tile per compute unit (SM)
at a time; a GEMM pays for ``waves = ceil(tiles / units)`` full waves of full tiles, so

    q = m n batch / (waves * units * tm * tn),   tiles = batch * ceil(m / tm) * ceil(n / tn),

maximised over the device's candidate tiles (cuBLAS picks among several). ``q`` is 1 for
shapes that fill every tile and every wave and falls for small or skinny GEMMs. The memory
term covers GEMMs too thin to be compute-bound (small k or small m). ``gemm_efficiency`` is
the sustained fraction of peak of a perfectly quantised large GEMM; a preset derives it from
a published maximum-achievable-matmul figure and the shape it was measured at
(:func:`gemm_efficiency_from_benchmark`), so the model reproduces that benchmark exactly.
``gemm_fixed_s`` is a fixed time per GEMM kernel (launch, main-loop ramp-up, the last wave's
epilogue): quantisation alone makes short kernels far too fast (2048^3 on the H100: 22%,
thin k = 256 reductions up to 75%). A preset fits it by least squares on log time to a
published table of measured GEMM times (:func:`fit_gemm_fixed_seconds`; the H100's table is
:mod:`nest_cp.profiles.kernel_tables`); 0 where no table is cited.

**Attention** (flash-style, an instance choice; materialised attention is priced as GEMMs and
memory-bound ops by the profiler): ``t = executed FLOPs / (peak * e * s / (s + s_half))`` with
``e`` the forward or backward efficiency and a saturation in the sequence length ``s`` (short
sequences run further from peak; fitted to the published sequence sweep of the kernel).
Executed FLOPs follow FlashAttention's convention: forward ``4 s^2 d`` per head and sample
(halved, plus one diagonal tile row, under a causal mask), backward 2.5 times the forward.

**Memory-bound ops** (norms, activations, residual adds, dropout, softmax, cross-entropy,
embedding gathers): ``t = bytes / (mem_bandwidth * memory_efficiency)``.

**Kernels inside a training step** pay ``kernel_fixed_s`` each on top (the profiler adds it
once per kernel it launches: every op's forward, data-gradient and weight-gradient pass that
does work): launch gaps and host-side dispatch that isolated microbenchmarks never see. It is
0 for datasheet presets and fitted by ``nest-cp calibrate`` (DESIGN §1.1, Calibration).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from enum import Enum


def _check(ok: bool, expected: str, got: object) -> None:
    if not ok:
        raise ValueError(f"expected {expected}, got {got!r}")


class DType(str, Enum):
    """Datatypes whose dense peak a device lists (the profiler computes in bf16)."""

    BF16 = "bf16"
    FP8 = "fp8"
    TF32 = "tf32"
    FP32 = "fp32"


EFFICIENCY_FIELDS = ("gemm_efficiency", "attention_fwd_efficiency", "attention_bwd_efficiency",
                     "memory_efficiency")
# What ``nest-cp calibrate`` may fit (DESIGN §1.1, Calibration): the four efficiencies (each a
# sustained fraction of peak) and the fixed time per kernel launched inside a training step.
CALIBRATED_FIELDS = (*EFFICIENCY_FIELDS, "kernel_fixed_s")
MAX_KERNEL_FIXED_S = 1e-3


@dataclass(frozen=True, slots=True)
class DeviceSpec:
    """An accelerator: peaks, HBM, and the kernel efficiencies of DESIGN §1.1 (v2).

    ``peak_flops`` is the dense bf16 peak the profiler computes with; ``peak_flops_by_dtype``
    lists the datasheet's other dense peaks (information; fp8 training is not modelled).
    ``compute_units`` and ``gemm_tiles`` drive wave and tile quantisation.
    ``calibration`` is empty for datasheet presets and describes the fit for a device written
    by ``nest-cp calibrate`` (fitted parameters, data range, parameters the data left open).
    """

    name: str
    peak_flops: float
    mem_bandwidth_Bps: float
    hbm_bytes: int
    compute_units: int
    gemm_tiles: tuple[tuple[int, int], ...]
    gemm_efficiency: float
    attention_fwd_efficiency: float
    attention_bwd_efficiency: float
    attention_seq_half: int
    memory_efficiency: float
    peak_flops_by_dtype: tuple[tuple[DType, float], ...] = ()
    calibration: tuple[tuple[str, str], ...] = field(default=(), compare=False)
    gemm_fixed_s: float = 0.0
    kernel_fixed_s: float = 0.0

    def __post_init__(self) -> None:
        _check(self.peak_flops > 0, "peak_flops > 0", self.peak_flops)
        _check(self.mem_bandwidth_Bps > 0, "mem_bandwidth_Bps > 0", self.mem_bandwidth_Bps)
        _check(isinstance(self.hbm_bytes, int) and self.hbm_bytes >= 1, "hbm_bytes >= 1",
               self.hbm_bytes)
        _check(isinstance(self.compute_units, int) and self.compute_units >= 1,
               "compute_units >= 1", self.compute_units)
        _check(len(self.gemm_tiles) >= 1 and all(
            isinstance(t, int) and t >= 1 for tile in self.gemm_tiles for t in tile)
            and all(len(tile) == 2 for tile in self.gemm_tiles),
            "gemm_tiles: a non-empty list of (rows, cols) >= 1", self.gemm_tiles)
        for name in EFFICIENCY_FIELDS:
            value = getattr(self, name)
            _check(isinstance(value, int | float) and 0 < value <= 1, f"{name} in (0, 1]", value)
        _check(isinstance(self.attention_seq_half, int) and self.attention_seq_half >= 0,
               "attention_seq_half >= 0", self.attention_seq_half)
        _check(isinstance(self.gemm_fixed_s, int | float) and 0 <= self.gemm_fixed_s < 1e-3,
               "gemm_fixed_s in [0, 1e-3) seconds", self.gemm_fixed_s)
        _check(isinstance(self.kernel_fixed_s, int | float)
               and 0 <= self.kernel_fixed_s < MAX_KERNEL_FIXED_S,
               "kernel_fixed_s in [0, 1e-3) seconds", self.kernel_fixed_s)

    @property
    def description(self) -> str:
        """One line for listings: peak, kernel efficiencies, bandwidth and capacity."""
        capacity = (f"{self.hbm_bytes // 2**30} GiB" if self.hbm_bytes % 2**30 == 0
                    else f"{self.hbm_bytes / 1e9:g} GB")
        fitted = ""
        if self.calibration:
            transferred = any(key == "transferred_from" for key, _ in self.calibration)
            fitted = " (calibration transferred)" if transferred else " (calibrated)"
        if self.kernel_fixed_s:
            fitted = f", {self.kernel_fixed_s * 1e6:.1f} us per kernel{fitted}"
        return (f"{self.peak_flops / 1e12:g} TFLOP/s bf16, GEMM {self.gemm_efficiency:.3f}, "
                f"attention {self.attention_fwd_efficiency:.2f}/"
                f"{self.attention_bwd_efficiency:.2f}, {self.mem_bandwidth_Bps / 1e9:g} GB/s x "
                f"{self.memory_efficiency:.2f}, {capacity} HBM{fitted}")

    def with_efficiencies(self, **values: float) -> DeviceSpec:
        """A copy with some calibrated parameters replaced (:data:`CALIBRATED_FIELDS`)."""
        unknown = set(values) - set(CALIBRATED_FIELDS)
        _check(not unknown, f"parameter names among {CALIBRATED_FIELDS}", sorted(unknown))
        return replace(self, **values)


def quantisation(device: DeviceSpec, m: int, n: int, batch: int = 1) -> float:
    """Useful fraction of the tiles and waves a GEMM occupies: q in (0, 1], best tile."""
    best = 0.0
    for tile_m, tile_n in device.gemm_tiles:
        tiles = batch * math.ceil(m / tile_m) * math.ceil(n / tile_n)
        waves = math.ceil(tiles / device.compute_units)
        best = max(best, m * n * batch / (waves * device.compute_units * tile_m * tile_n))
    return best


def gemm_efficiency_from_benchmark(measured_fraction: float, m: int, n: int,
                                   compute_units: int,
                                   tiles: tuple[tuple[int, int], ...], k: int = 0,
                                   peak_flops: float = 0.0, fixed_s: float = 0.0) -> float:
    """The gemm_efficiency that makes the model reproduce a benchmarked GEMM exactly.

    ``measured_fraction`` is the benchmark's achieved / peak at output shape m x n.  With a
    fixed per-kernel time ``fixed_s`` (then ``k`` and ``peak_flops`` are needed too) the
    efficiency is that of the kernel's time without it.
    """
    probe = DeviceSpec("probe", 1.0, 1.0, 1, compute_units, tiles, 1.0, 1.0, 1.0, 0, 1.0)
    fraction = measured_fraction
    if fixed_s:
        _check(k >= 1 and peak_flops > 0, "k and peak_flops with fixed_s", (k, peak_flops))
        measured_s = 2.0 * m * n * k / (measured_fraction * peak_flops)
        _check(measured_s > fixed_s, "a benchmark longer than fixed_s", measured_s)
        fraction = measured_fraction * measured_s / (measured_s - fixed_s)
    return min(1.0, fraction / quantisation(probe, m, n))


def fit_gemm_fixed_seconds(device_with: Callable[[float], DeviceSpec],
                           table: Sequence[GemmMeasurement], step_s: float = 1e-7,
                           limit_s: float = 2e-5) -> float:
    """The fixed per-GEMM time (to ``step_s``) that best fits measured GEMM times.

    ``device_with(fixed_s)`` builds the device for a candidate (its efficiency may depend on
    it, as a preset re-derives it from its benchmark); the fit minimises the mean squared
    log ratio of modelled to measured time over ``table`` on a grid of ``step_s`` up to
    ``limit_s``.
    """
    def loss(fixed_s: float) -> float:
        device = device_with(fixed_s)
        return math.fsum(math.log(gemm_seconds(device, e.m, e.n, e.k, e.batch) / e.seconds) ** 2
                         for e in table)
    steps = round(limit_s / step_s)
    return min((i * step_s for i in range(steps + 1)), key=loss)


@dataclass(frozen=True, slots=True)
class GemmMeasurement:
    """A measured GEMM: ``batch`` products (m x k) @ (k x n) at ``flops_per_s``."""

    batch: int
    m: int
    n: int
    k: int
    flops_per_s: float

    @property
    def seconds(self) -> float:
        return 2.0 * self.batch * self.m * self.n * self.k / self.flops_per_s


def gemm_seconds(device: DeviceSpec, m: int, n: int, k: int, batch: int = 1) -> float:
    """Time of ``batch`` GEMMs (m x k) @ (k x n) in bf16 (module docstring)."""
    if m == 0 or n == 0 or k == 0 or batch == 0:
        return 0.0
    flops = 2.0 * m * n * k * batch
    compute = flops / (device.peak_flops * device.gemm_efficiency
                       * quantisation(device, m, n, batch))
    moved = 2.0 * (m * k + k * n + m * n) * batch
    return max(compute, memory_seconds(device, moved)) + device.gemm_fixed_s


def memory_seconds(device: DeviceSpec, bytes_moved: float) -> float:
    """Time of a memory-bound kernel moving ``bytes_moved`` bytes through HBM."""
    return bytes_moved / (device.mem_bandwidth_Bps * device.memory_efficiency)


def attention_seconds(device: DeviceSpec, executed_flops: float, seq_len: int,
                      backward: bool) -> float:
    """Time of a flash-style attention kernel executing ``executed_flops`` at length s."""
    if executed_flops == 0:
        return 0.0
    efficiency = device.attention_bwd_efficiency if backward else device.attention_fwd_efficiency
    saturation = seq_len / (seq_len + device.attention_seq_half)
    return executed_flops / (device.peak_flops * efficiency * saturation)


def causal_fraction(seq_len: int, block: int = 128) -> float:
    """Share of the s x s score tiles a causal flash kernel computes (lower triangle + diagonal)."""
    blocks = math.ceil(seq_len / block)
    return (blocks + 1) / (2 * blocks)
