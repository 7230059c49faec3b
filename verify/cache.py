"""A resumable on-disk cache of backend results.

One JSON file per solve, keyed by the SHA-256 of (instance content, backend,
solve options, package version, the versions of the solver libraries and the
source of every module of ``nest_cp`` with its ``dp`` and ``verify``
subpackages), so a rerun only solves what changed: a new instance, other
options, or edited code.  Files are written to a temporary name and renamed, so
a killed run never leaves a half-written entry; an entry that cannot be read,
or is not a result record, is treated as a miss.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import json
import logging
import os
from importlib import metadata
from pathlib import Path
from typing import Any

from nest_cp import __version__
from nest_cp.io.writers import instance_to_dict, plan_to_dict
from nest_cp.model.instance import Instance
from nest_cp.solvers.registry import SolveOptions

LOGGER = logging.getLogger(__name__)

DEFAULT_CACHE_DIR = Path(".nest-cp-cache")
# the keys every cached result record has (verify.harness.run_record writes them)
RECORD_KEYS = frozenset({"backend", "space", "status", "objective_ticks", "bound_ticks",
                         "wall_time_s", "plan"})


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
            **({"work_limit": options.work_limit} if options.work_limit is not None else {}),
            "hint": None if options.hint is None else digest(plan_to_dict(options.hint)),
            **({"sdp_hint": digest(plan_to_dict(options.sdp_hint))}
               if options.sdp_hint is not None else {})}


SOURCE_PACKAGES = ("nest_cp", "nest_cp.dp", "nest_cp.verify")
SOLVER_DISTRIBUTIONS = ("ortools", "PuLP", "highspy", "numpy", "networkx")


def source_roots() -> tuple[Path, ...]:
    """The folders of ``nest_cp`` and its ``dp`` and ``verify`` subpackages, all required.

    ``dp/`` and ``verify/`` live beside ``nest_cp/`` in the source tree, so the walk of
    ``nest_cp/`` alone would miss them; a package that cannot be found is an error
    rather than a silently smaller fingerprint.
    """
    roots = []
    for package in SOURCE_PACKAGES:
        spec = importlib.util.find_spec(package)
        if spec is None or spec.origin is None:
            raise ImportError(f"cannot fingerprint {package}: package not found")
        roots.append(Path(spec.origin).parent)
    return tuple(roots)


def solver_versions() -> dict[str, str]:
    """Installed versions of the libraries a result depends on ("missing" when absent)."""
    found = {}
    for name in SOLVER_DISTRIBUTIONS:
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            found[name] = "missing"
    return found


def tree_digest(roots: tuple[Path, ...]) -> str:
    """SHA-256 (first 16 hex digits) of every ``.py`` file under ``roots``: paths and contents.

    Paths are taken relative to each root's parent (``nest_cp/solvers/exact/model.py``,
    ``dp/planner.py``) and sorted, so the digest depends on the code only, not on
    where it is checked out.
    """
    named: dict[Path, str] = {}
    for root in sorted(roots, key=lambda r: len(r.resolve().parts), reverse=True):
        for file in root.rglob("*.py"):  # an installed nest_cp/ holds dp/: count files once
            named.setdefault(file.resolve(), file.relative_to(root.parent).as_posix())
    files = sorted((name, file) for file, name in named.items())
    hasher = hashlib.sha256()
    for name, file in files:
        hasher.update(name.encode())
        hasher.update(b"\0")
        hasher.update(file.read_bytes())
        hasher.update(b"\0")
    return hasher.hexdigest()[:16]


@functools.cache
def _installed_digest() -> str:
    return tree_digest(source_roots())


def code_fingerprint(roots: tuple[Path, ...] | None = None) -> str:
    """Package and solver versions plus :func:`tree_digest` of ``nest_cp``, ``dp``, ``verify``.

    The same for every backend: a backend's result depends on far more than its own
    module (the exact models, the cost model, the evaluator, the plan), and a cached
    OPTIMAL or INFEASIBLE claim must not survive an edit to any of them.  Computed
    once per process for the installed packages; ``roots`` overrides them (for tests).
    """
    digest_text = _installed_digest() if roots is None else tree_digest(roots)
    solvers = ",".join(f"{name}={version}" for name, version in solver_versions().items())
    return f"{__version__}:{solvers}:{digest_text}"


def result_key(instance_sha: str, backend: str, options: SolveOptions,
               code: str | None = None) -> str:
    """The cache key of one solve; ``code`` is :func:`code_fingerprint` (computed if None)."""
    return digest({"instance": instance_sha, "backend": backend,
                   "options": options_key(options),
                   "code": code_fingerprint() if code is None else code})


class ResultCache:
    """JSON entries under ``root/<key[:2]>/<key>.json``; ``enabled=False`` makes every read miss."""

    def __init__(self, root: Path = DEFAULT_CACHE_DIR, enabled: bool = True):
        self.root = Path(root)
        self.enabled = enabled

    def _path(self, key: str) -> Path:
        return self.root / key[:2] / f"{key}.json"

    def get(self, key: str) -> dict | None:
        """The stored record, or None on a miss, an unreadable or malformed entry, or disabled.

        An entry is a record only when it is a JSON object with every key of
        :data:`RECORD_KEYS`; anything else (a list, a truncated object) is a miss.
        """
        if not self.enabled:
            return None
        path = self._path(key)
        try:
            entry = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return None
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            LOGGER.warning("ignoring unreadable cache entry %s (%s)", path, exc)
            return None
        if not isinstance(entry, dict) or not RECORD_KEYS <= entry.keys():
            LOGGER.warning("ignoring cache entry %s: expected a JSON object with keys %s",
                           path, ", ".join(sorted(RECORD_KEYS)))
            return None
        return entry

    def put(self, key: str, entry: dict) -> None:
        """Store ``entry`` atomically (written even when reads are disabled, to refresh)."""
        path = self._path(key)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(entry, indent=1, sort_keys=True) + "\n", encoding="utf-8")
        tmp.replace(path)
