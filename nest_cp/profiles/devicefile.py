"""Device files: a :class:`~nest_cp.profiles.kernels.DeviceSpec` as JSON/YAML (calibrated presets).

``nest-cp calibrate`` writes one; an instance uses it by path wherever a device name is
accepted (``"device": "h100-calibrated.json"``, relative to the instance file). Format::

    {"device": {"name": ..., "peak_flops": ..., "mem_bandwidth_Bps": ..., "hbm_bytes": ...,
                "compute_units": ..., "gemm_tiles": [[128, 128], ...],
                "gemm_efficiency": ..., "attention_fwd_efficiency": ...,
                "attention_bwd_efficiency": ..., "attention_seq_half": ...,
                "gemm_fixed_s": ... (optional, default 0), "memory_efficiency": ...,
                "kernel_fixed_s": ... (optional, default 0),
                "peak_flops_by_dtype": {"bf16": ...}},
     "calibration": {"base": ..., "hidden_range": [lo, hi], "seq_len_range": [lo, hi],
                     "fitted": {...}, "unconstrained": [...], ...}}

A calibrated device remembers the hidden sizes and sequence lengths it was fitted on;
profiling a model outside them logs a warning (no silent extrapolation).
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

from nest_cp.model.documents import read_document, write_document
from nest_cp.model.errors import InstanceFormatError
from nest_cp.profiles.kernels import EFFICIENCY_FIELDS, DeviceSpec, DType

LOGGER = logging.getLogger(__name__)

_NUMBERS = ("peak_flops", "mem_bandwidth_Bps", *EFFICIENCY_FIELDS)
_INTEGERS = ("hbm_bytes", "compute_units", "attention_seq_half")
DEVICE_SUFFIXES = (".json", ".yaml", ".yml")


def is_device_path(value: object) -> bool:
    """Whether a ``device`` option names a file rather than a preset."""
    return isinstance(value, str) and value.lower().endswith(DEVICE_SUFFIXES)


def device_to_dict(device: DeviceSpec, calibration: dict[str, Any] | None = None) -> dict:
    data: dict[str, Any] = {"device": {
        "name": device.name, "peak_flops": device.peak_flops,
        "mem_bandwidth_Bps": device.mem_bandwidth_Bps, "hbm_bytes": device.hbm_bytes,
        "compute_units": device.compute_units,
        "gemm_tiles": [list(tile) for tile in device.gemm_tiles],
        **{name: getattr(device, name) for name in EFFICIENCY_FIELDS},
        "attention_seq_half": device.attention_seq_half,
        "gemm_fixed_s": device.gemm_fixed_s,
        "kernel_fixed_s": device.kernel_fixed_s,
        "peak_flops_by_dtype": {dtype.value: peak for dtype, peak in device.peak_flops_by_dtype},
    }}
    if calibration is not None:
        data["calibration"] = calibration
    return data


def save_device(device: DeviceSpec, path: str | Path,
                calibration: dict[str, Any] | None = None) -> None:
    write_document(device_to_dict(device, calibration), path)


def load_device(path: str | Path) -> DeviceSpec:
    """Read a device file; InstanceFormatError naming the file and field on bad input."""
    path = Path(path)
    data = read_document(path)
    return device_from_dict(data, str(path))


def device_from_dict(data: Any, file: str | None = None) -> DeviceSpec:
    def fail(field: str, expected: str, got: object) -> None:
        raise InstanceFormatError(f"expected {expected}, got {got!r}", file=file, field=field)

    if not isinstance(data, dict) or not isinstance(data.get("device"), dict):
        fail("device", "a mapping", data.get("device") if isinstance(data, dict) else data)
    raw = data["device"]
    allowed = {"name", "gemm_tiles", "peak_flops_by_dtype", "gemm_fixed_s", "kernel_fixed_s",
               *_NUMBERS, *_INTEGERS}
    for key in raw:
        if key not in allowed:
            fail(f"device.{key}", "one of the fields " + ", ".join(sorted(allowed)),
                 "unknown field")
    kwargs: dict[str, Any] = {}
    for key in ("name", "gemm_tiles", *_NUMBERS, *_INTEGERS):
        if key not in raw:
            fail(f"device.{key}", "this field to be present", "nothing")
    if not isinstance(raw["name"], str) or not raw["name"]:
        fail("device.name", "a non-empty string", raw["name"])
    kwargs["name"] = raw["name"]
    for key in _NUMBERS:
        value = raw[key]
        if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
            fail(f"device.{key}", "a number > 0", value)
        kwargs[key] = float(value)
    for key in _INTEGERS:
        value = raw[key]
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            fail(f"device.{key}", "an integer >= 0", value)
        kwargs[key] = value
    for key in ("gemm_fixed_s", "kernel_fixed_s"):  # optional: older files lack them
        fixed = raw.get(key, 0.0)
        if isinstance(fixed, bool) or not isinstance(fixed, int | float) or \
                not 0 <= fixed < 1e-3:
            fail(f"device.{key}", "seconds in [0, 0.001)", fixed)
        kwargs[key] = float(fixed)
    tiles = raw["gemm_tiles"]
    if not isinstance(tiles, list) or not tiles or not all(
            isinstance(tile, list) and len(tile) == 2 for tile in tiles):
        fail("device.gemm_tiles", "a non-empty list of [rows, cols]", tiles)
    kwargs["gemm_tiles"] = tuple(tuple(tile) for tile in tiles)
    peaks = raw.get("peak_flops_by_dtype", {})
    if not isinstance(peaks, dict):
        fail("device.peak_flops_by_dtype", "a mapping of dtype to FLOP/s", peaks)
    try:
        kwargs["peak_flops_by_dtype"] = tuple((DType(key), float(value))
                                              for key, value in peaks.items())
    except (ValueError, TypeError):
        fail("device.peak_flops_by_dtype", "keys among " + ", ".join(d.value for d in DType),
             peaks)
    calibration = data.get("calibration", {})
    if not isinstance(calibration, dict):
        fail("calibration", "a mapping", calibration)
    kwargs["calibration"] = tuple((str(key), json.dumps(value, sort_keys=True))
                                  for key, value in sorted(calibration.items()))
    try:
        return DeviceSpec(**kwargs)
    except ValueError as exc:
        raise InstanceFormatError(str(exc), file=file, field="device") from None


def calibration_range(device: DeviceSpec, key: str) -> tuple[int, int] | None:
    """A ``[lo, hi]`` range recorded by calibration (``hidden_range``, ``seq_len_range``)."""
    for name, value in device.calibration:
        if name == key:
            lo_hi = json.loads(value)
            if isinstance(lo_hi, list) and len(lo_hi) == 2:
                return int(lo_hi[0]), int(lo_hi[1])
    return None


def warn_outside_calibration(device: DeviceSpec, hidden: int, seq_len: int,
                             model: str) -> list[str]:
    """Warnings (also logged) when a calibrated device profiles outside its data's range."""
    notes = []
    for key, value in (("hidden_range", hidden), ("seq_len_range", seq_len)):
        bounds = calibration_range(device, key)
        if bounds is not None and not bounds[0] <= value <= bounds[1]:
            notes.append(f"{model}: {key.removesuffix('_range')} {value} is outside the "
                         f"calibration data of {device.name} ({bounds[0]}..{bounds[1]}); "
                         f"the fitted efficiencies are extrapolated")
    for note in notes:
        LOGGER.warning(note)
    return notes
