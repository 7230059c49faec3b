"""Certificates, gaps and consistency checks over one instance's backend runs (DESIGN §4).

Every function here reads *run records*: plain dicts with ``backend``, ``space``
(``"full"``/``"structured"``), ``status`` (a :class:`nest_cp.model.result.Status` value,
or ``UNAVAILABLE``/``ERROR``/``INVALID`` for runs that produced nothing usable),
``objective_ticks``, ``bound_ticks`` and optionally ``tolerance_rel``: an OPTIMAL
with a tolerance (the MILP's floating-point proofs) proves only its bound, so it
certifies "within tolerance" (verdict ``tol``), never to the tick.  Each check
returns the list of failures it found, as sentences naming the backends and
numbers involved.

Facts the checks rest on:
- the structured space is a subset of the full space, so a full-space lower bound
  (an optimum or a solver's bound) bounds every plan, a structured bound only
  structured plans;
- memory does not depend on the placement, so "no plan fits" is the same claim in
  both spaces: an INFEASIBLE proof in either contradicts a plan from any run.
"""

from __future__ import annotations

from nest_cp.model.result import Space, Status

EXACT_BACKENDS = ("cpsat", "milp", "brute")
PLAN_STATUSES = (Status.OPTIMAL.value, Status.FEASIBLE.value)
UNUSABLE_STATUSES = ("UNAVAILABLE", "ERROR", "INVALID")


def has_plan(run: dict) -> bool:
    return run["status"] in PLAN_STATUSES


def lower_bound(run: dict) -> int | None:
    """What a run proves about every plan of its space: the optimum, or its bound."""
    if exact_optimum(run):
        return run["objective_ticks"]
    if run["status"] in PLAN_STATUSES:
        return run["bound_ticks"]
    return None


def exact_optimum(run: dict) -> bool:
    """Whether the run proved its objective optimal to the tick (not within a tolerance)."""
    return run["status"] == Status.OPTIMAL.value and not run.get("tolerance_rel")


def contains(outer_space: str, inner_space: str) -> bool:
    """Whether every plan of ``inner_space`` belongs to ``outer_space``."""
    return outer_space == Space.FULL.value or inner_space == Space.STRUCTURED.value


def _label(run: dict) -> str:
    return f"{run['backend']}/{run['space']}"


# ------------------------------------------------------------------ consistency


def consistency_failures(runs: list[dict]) -> list[str]:
    """Plans that beat another run's proven bound, optimum or infeasibility proof."""
    failures = []
    for prover in runs:
        bound = lower_bound(prover)
        for other in runs:
            if other is prover or not has_plan(other):
                continue
            if prover["status"] == Status.INFEASIBLE.value:
                failures.append(f"{_label(prover)} proves no plan fits, but {_label(other)} "
                                f"returned one of {other['objective_ticks']} ticks")
            elif bound is not None and contains(prover["space"], other["space"]) and \
                    other["objective_ticks"] < bound:
                kind = "optimum" if exact_optimum(prover) else "bound"
                failures.append(f"{_label(other)} found {other['objective_ticks']} ticks, below "
                                f"the proven {kind} {bound} of {_label(prover)}")
    return failures


# ------------------------------------------------------------------ algorithmic certificate


def algorithmic_certificate(runs: list[dict]) -> tuple[str, list[str]]:
    """Verdict ``yes``/``no``/``open``/``n/a`` on DP == exact structured optimum, and failures.

    ``yes``: some exact structured run proved the optimum to the tick (or infeasibility)
    and the DP agrees with every exact structured run; ``tol``: the only proofs are
    within a solver's floating-point tolerance (the MILP) and the DP lies between their
    bound and objective; ``no``: some run contradicts the DP; ``open``: no exact
    structured run finished and none contradicts; ``n/a``: no DP run or no usable exact
    structured run.
    """
    dp = next((run for run in runs if run["backend"] == "dp"), None)
    if dp is None or dp["status"] in UNUSABLE_STATUSES:
        return "n/a", []
    exact = [run for run in runs if run["backend"] in EXACT_BACKENDS
             and run["space"] == Space.STRUCTURED.value
             and run["status"] not in UNUSABLE_STATUSES]
    if not exact:
        return "n/a", []
    failures, proven, within_tolerance = [], False, False
    for run in exact:
        failure = _certificate_failure(dp, run)
        if failure:
            failures.append(failure)
        elif exact_optimum(run) or run["status"] == Status.INFEASIBLE.value:
            proven = True
        elif run["status"] == Status.OPTIMAL.value:
            within_tolerance = True
    if failures:
        return "no", failures
    return ("yes" if proven else "tol" if within_tolerance else "open"), []


def _certificate_failure(dp: dict, run: dict) -> str | None:
    """Why ``run`` (exact, structured space) contradicts the DP, or None."""
    dp_ticks = dp["objective_ticks"] if has_plan(dp) else None
    status, label = run["status"], _label(run)
    if status == Status.INFEASIBLE.value:
        return None if dp_ticks is None else (
            f"{label} proves the structured space infeasible, dp found {dp_ticks} ticks")
    if not has_plan(run):
        return None
    if dp_ticks is None:
        return f"dp found no plan ({dp['status']}), {label} found {run['objective_ticks']} ticks"
    if exact_optimum(run) and run["objective_ticks"] != dp_ticks:
        return (f"dp optimum {dp_ticks} ticks differs from the {label} optimum "
                f"{run['objective_ticks']} ticks")
    if run["objective_ticks"] < dp_ticks:
        return f"{label} found a structured plan of {run['objective_ticks']} < dp {dp_ticks} ticks"
    if run["bound_ticks"] is not None and dp_ticks < run["bound_ticks"]:
        return f"dp {dp_ticks} ticks is below the {label} bound {run['bound_ticks']}"
    return None


# ------------------------------------------------------------------ structural gap


def structural_gap(runs: list[dict], reference_full: dict | None = None) -> dict | None:
    """Gap of the DP against the exact full-space optimum: a point, or an interval.

    Returns ``{"low": g1, "high": g2, "exact": bool}`` with g = (T_dp - T) / T, where
    T is the proven optimum (``low == high``), or when the solvers stopped at their
    limits the best known plan (``low``) and the best bound (``high``; None when no
    positive bound is known).  ``reference_full``, the full-space entry of a stored
    reference consistent with the runs, counts as one more full-space result when it
    proves something (an optimum or a bound): the gap to the best known, as for
    benchmark libraries.  None when there is no DP plan or no full-space result.
    """
    dp = next((run for run in runs if run["backend"] == "dp" and has_plan(run)), None)
    full = [run for run in runs if run["backend"] in EXACT_BACKENDS
            and run["space"] == Space.FULL.value]
    if reference_full and has_plan(reference_full) and lower_bound(reference_full):
        full.append(reference_full)
    if dp is None or not any(has_plan(run) for run in full):
        return None
    dp_ticks = dp["objective_ticks"]
    optima = [run["objective_ticks"] for run in full if exact_optimum(run)]
    if optima:
        gap = _relative(dp_ticks, min(optima))
        return {"low": gap, "high": gap, "exact": True}
    best = min([run["objective_ticks"] for run in full if has_plan(run)] + [dp_ticks])
    bounds = [run["bound_ticks"] for run in full
              if run["status"] in PLAN_STATUSES and run["bound_ticks"] is not None]
    bound = max(bounds) if bounds else None
    return {"low": _relative(dp_ticks, best),
            "high": _relative(dp_ticks, bound) if bound else None, "exact": False}


def _relative(value: int, reference: int) -> float:
    return (value - reference) / reference


# ------------------------------------------------------------------ stored reference


def reference_failures(reference: dict, runs: list[dict]) -> list[str]:
    """Runs that contradict a stored reference (its ``spaces`` entries, DESIGN §4 statuses)."""
    failures = []
    for space, entry in reference.get("spaces", {}).items():
        status, ticks = entry["status"], entry.get("objective_ticks")
        bound = lower_bound(entry) if status in PLAN_STATUSES else None
        for run in runs:
            failure = _reference_failure(space, status, ticks, bound, run)
            if failure:
                failures.append(failure)
    return failures


def _reference_failure(space: str, status: str, ticks: int | None, bound: int | None,
                       run: dict) -> str | None:
    label, where = _label(run), f"the {space}-space reference"
    if has_plan(run):
        if status == Status.INFEASIBLE.value:
            return f"{label} found {run['objective_ticks']} ticks but {where} proves no plan fits"
        if bound is not None and contains(space, run["space"]) and run["objective_ticks"] < bound:
            kind = "optimum" if bound == ticks else "bound"
            return (f"{label} found {run['objective_ticks']} ticks, below the proven {kind} "
                    f"{bound} of {where}")
    if ticks is not None and status in PLAN_STATUSES:
        if run["status"] == Status.INFEASIBLE.value:
            return f"{label} declares infeasible, but {where} has a plan of {ticks} ticks"
        if run["status"] == Status.OPTIMAL.value and contains(run["space"], space) and \
                lower_bound(run) > ticks:
            return (f"{label} claims the optimum {run['objective_ticks']} ticks (bound "
                    f"{lower_bound(run)}), but {where} has a plan of {ticks} ticks")
    return None
