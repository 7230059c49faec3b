"""SDP in the certification harness (DESIGN §7): run records, certificates, gaps, tables.

On an instance allowing SDP every backend that searches SDP plans returns, beside its
plain result, the result of its SDP search (``SolveResult.sdp``).  Its run record keeps
it as ``run["sdp"]``, with T_eff and its bound as exact rationals (``"p/q"``).  The
certificates and gaps of :mod:`nest_cp.verify.certify` are computed on *views* of
those sub-records whose ``objective_ticks`` / ``bound_ticks`` are T_eff and its bound
as :class:`~fractions.Fraction`: SDP plans are ranked by FLOP-equivalent time and
never mixed with plain ones (their certificate, gap and table rows are separate).
"""

from __future__ import annotations

from fractions import Fraction

from nest_cp.io.readers import plan_from_dict
from nest_cp.io.writers import plan_to_dict
from nest_cp.model.errors import InstanceFormatError
from nest_cp.model.result import SolveResult, Space, Status
from nest_cp.verify import certify

UNUSABLE = certify.UNUSABLE_STATUSES


def run_record(result: SolveResult) -> dict:
    """The ``sdp`` part of a run record."""
    return {"status": result.status.value, "objective_ticks": result.objective_ticks,
            "effective": _text(result.effective), "effective_bound": _text(result.effective_bound),
            "tolerance_rel": result.tolerance_rel, "wall_time_s": round(result.wall_time_s, 4),
            "message": result.message, "stats": _plain(result.stats),
            "plan": None if result.plan is None else plan_to_dict(result.plan)}


def result_from_record(record: dict, backend: str, space: Space) -> SolveResult:
    """The SolveResult a cached ``sdp`` sub-record stands for (refereed again by the caller)."""
    return SolveResult(
        backend=backend, status=Status(record["status"]),
        plan=None if record["plan"] is None else plan_from_dict(record["plan"]),
        objective_ticks=record["objective_ticks"], wall_time_s=record["wall_time_s"],
        space=space, message=record.get("message", ""), stats=record.get("stats", {}),
        tolerance_rel=record.get("tolerance_rel", 0.0),
        effective=_fraction(record["effective"]),
        effective_bound=_fraction(record["effective_bound"]))


def hint_of(record: dict):
    """The SDP plan of a (DP) run record, to hint the exact SDP searches."""
    sdp = record.get("sdp")
    return None if not sdp or sdp["plan"] is None else plan_from_dict(sdp["plan"])


def views(runs: list[dict]) -> list[dict]:
    """Every run's SDP search as a run record ranked by T_eff (see module docstring)."""
    found = []
    for run in runs:
        sdp = run.get("sdp")
        if sdp is None:
            if run["status"] in UNUSABLE:  # the run failed before any SDP result
                found.append({**run, "objective_ticks": None, "bound_ticks": None})
            continue
        found.append({"backend": run["backend"], "space": run["space"],
                      "status": sdp["status"], "objective_ticks": _fraction(sdp["effective"]),
                      "bound_ticks": _fraction(sdp["effective_bound"]),
                      "message": sdp["message"], "plan": sdp.get("plan"),
                      **({"wall_capped": True} if sdp.get("stats", {}).get("wall_capped")
                         else {})})
    return found


def analyse(record: dict, reference: dict | None) -> None:
    """Certificate, gap and failures of the SDP searches of one instance record."""
    found = views(record["runs"])
    if not any(view["status"] not in UNUSABLE for view in found):
        return
    failures = certify.consistency_failures(found)
    verdict, certificate_failures = certify.algorithmic_certificate(found)
    failures += certificate_failures
    reference_full, state = None, "missing"
    entries = reference_views(reference)
    if entries is not None:
        state = "consistent"
        contradictions = certify.reference_failures({"spaces": entries}, found)
        if contradictions:
            state = "contradicted"
            failures += [f"reference: {failure}" for failure in contradictions]
        elif "full" in entries:
            reference_full = {"backend": "reference", "space": Space.FULL.value,
                              **entries["full"]}
    gap = certify.structural_gap(found, reference_full)
    if gap is not None:
        gap = {"low": float(gap["low"]),
               "high": None if gap["high"] is None else float(gap["high"]),
               "exact": gap["exact"]}
    record["sdp"] = {"certificate": verdict, "gap": gap, "reference": state,
                     "failures": list(dict.fromkeys(failures))}
    record["failures"] = list(dict.fromkeys(
        record["failures"] + [f"sdp: {failure}" for failure in failures]))


def reference_views(reference: dict | None) -> dict | None:
    """A stored reference's SDP entries with T_eff as fractions (None when it has none)."""
    if not reference or not isinstance(reference.get("sdp"), dict):
        return None
    return {space: {**entry, "objective_ticks": _fraction(entry.get("objective_ticks")),
                    "bound_ticks": _fraction(entry.get("bound_ticks"))}
            for space, entry in reference["sdp"].get("spaces", {}).items()}


def check_reference(document: dict, file: str) -> None:
    """InstanceFormatError naming the field unless the reference's ``sdp`` part is well formed."""
    if "sdp" not in document:
        return
    part = document["sdp"]
    spaces = part.get("spaces") if isinstance(part, dict) else None
    if not isinstance(spaces, dict):
        raise InstanceFormatError(f"expected an object keyed by space, got {spaces!r}",
                                  file=file, field="sdp.spaces")
    for space, entry in spaces.items():
        where = f"sdp.spaces.{space}"
        if space not in (s.value for s in Space) or not isinstance(entry, dict):
            raise InstanceFormatError("expected a space (full, structured) mapped to an object",
                                      file=file, field=where)
        if entry.get("status") not in (s.value for s in Status):
            raise InstanceFormatError(f"expected a status, got {entry.get('status')!r}",
                                      file=file, field=f"{where}.status")
        for name in ("objective_ticks", "bound_ticks"):
            value = entry.get(name)
            try:
                valid = value is None or (isinstance(value, str) and Fraction(value) >= 0)
            except (ValueError, ZeroDivisionError):
                valid = False
            if not valid:
                raise InstanceFormatError(f"expected T_eff as a rational \"p/q\" or null, got "
                                          f"{value!r}", file=file, field=f"{where}.{name}")


def json_entry(entry: dict | None) -> dict | None:
    """A reference entry built on views, with its rationals written as ``"p/q"``."""
    if entry is None:
        return None
    return {**entry, "objective_ticks": _text(entry["objective_ticks"]),
            "bound_ticks": _text(entry["bound_ticks"])}


def table_record(record: dict) -> dict | None:
    """An instance record as the gap tables read it, for its SDP section (None: no SDP)."""
    if "sdp" not in record:
        return None
    return {**record, "runs": views(record["runs"]), "certificate": record["sdp"]["certificate"],
            "gap": record["sdp"]["gap"], "failures": record["sdp"]["failures"]}


def _text(value: Fraction | None) -> str | None:
    return None if value is None else str(value)


def _fraction(value) -> Fraction | None:
    return None if value is None else Fraction(value)


def _plain(stats: dict) -> dict:
    """Stats as JSON data (numbers and strings only)."""
    return {key: value for key, value in stats.items()
            if isinstance(value, int | float | str | bool) or value is None}
