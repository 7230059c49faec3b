"""A resumable on-disk cache of backend results.

One JSON file per solve, keyed by the SHA-256 of (instance content, backend,
solve options, package version and the source of the backend's code), so a rerun
only solves what changed: a new instance, other options, or edited backend code.
Files are written to a temporary name and renamed, so a killed run never leaves a
half-written entry; an unreadable entry is treated as a miss.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import logging
import os
from pathlib import Path
from typing import Any

from nest_cp import __version__
from nest_cp.backends import BACKENDS, SolveOptions
from nest_cp.io import instance_to_dict, plan_to_dict
from nest_cp.model import Instance

LOGGER = logging.getLogger(__name__)

DEFAULT_CACHE_DIR = Path(".nest-cp-cache")


def digest(data: Any) -> str:
    """SHA-256 of the canonical JSON of ``data`` (sorted keys, no whitespace)."""
    text = json.dumps(data, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def instance_digest(instance: Instance) -> str:
    """Content hash of an instance (presets expanded, so a preset change invalidates it)."""
    return digest(instance_to_dict(instance))


def options_key(options: SolveOptions) -> dict:
    """The solve options that can change a result, as plain JSON data."""
    return {"space": options.space.value, "time_limit_s": options.time_limit_s,
            "seed": options.seed, "workers": options.workers,
            "milp_solver": options.milp_solver, "extra": options.extra,
            "hint": None if options.hint is None else digest(plan_to_dict(options.hint))}


def code_fingerprint(backend: str) -> str:
    """Package version plus a hash of the backend's source files.

    A backend in ``nest_cp`` is fingerprinted by its own module; a backend in its
    own package (``dp``) by every ``.py`` file of that package.  Unknown or missing
    modules fingerprint as ``missing``.
    """
    module_name = BACKENDS.get(backend, "").split(":")[0]
    try:
        spec = importlib.util.find_spec(module_name) if module_name else None
    except (ImportError, ValueError):
        spec = None
    if spec is None or spec.origin is None:
        return f"{__version__}:missing"
    origin = Path(spec.origin)
    files = [origin] if module_name.startswith("nest_cp.") else sorted(
        origin.parent.rglob("*.py"))
    hasher = hashlib.sha256()
    for file in files:
        hasher.update(file.name.encode())
        hasher.update(file.read_bytes())
    return f"{__version__}:{hasher.hexdigest()[:16]}"


def result_key(instance_sha: str, backend: str, options: SolveOptions,
               code: str | None = None) -> str:
    """The cache key of one solve; ``code`` is :func:`code_fingerprint` (computed if None)."""
    return digest({"instance": instance_sha, "backend": backend,
                   "options": options_key(options),
                   "code": code_fingerprint(backend) if code is None else code})


class ResultCache:
    """JSON entries under ``root/<key[:2]>/<key>.json``; ``enabled=False`` makes every read miss."""

    def __init__(self, root: Path = DEFAULT_CACHE_DIR, enabled: bool = True):
        self.root = Path(root)
        self.enabled = enabled

    def _path(self, key: str) -> Path:
        return self.root / key[:2] / f"{key}.json"

    def get(self, key: str) -> dict | None:
        """The stored entry, or None on a miss (or when the cache is disabled)."""
        if not self.enabled:
            return None
        path = self._path(key)
        try:
            return json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return None
        except (OSError, json.JSONDecodeError) as exc:
            LOGGER.warning("ignoring unreadable cache entry %s (%s)", path, exc)
            return None

    def put(self, key: str, entry: dict) -> None:
        """Store ``entry`` atomically (written even when reads are disabled, to refresh)."""
        path = self._path(key)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(entry, indent=1, sort_keys=True) + "\n", encoding="utf-8")
        tmp.replace(path)
