"""Cross-check of the full-space certification against the exact CP-SAT backend run longer.

`python -m benchmarks.certify_crosscheck [--time-limit S] [--exact-limit S]` takes a
sample of the NEST grid restricted to t = e = 1 (small enough for the exact backend to
prove the full space within minutes), certifies each with
:func:`nest_cp.solvers.certify.certify_full`, runs the exact CP-SAT backend on the full space
for longer, hinted with the DP plan, and checks that neither contradicts the other:
the exact solver's plans never go below the certified lower bound, and its proven
bound never goes above the certified best plan.  Writes
``reports/paper/certified_crosscheck.{json,md}``.  Minutes to hours (the limits); not part
of ``make bench``.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import time
from pathlib import Path

from nest_cp.io.readers import load_instance
from nest_cp.model.instance import Instance, Layer, Workload
from nest_cp.model.result import Space
from nest_cp.solvers.certify import certify_full
from nest_cp.solvers.registry import SolveOptions, solve

SAMPLE = ("bert-large--nest-h100-spineleaf--64", "bert-large--nest-tpuv4-fattree--64",
          "llama2-7b--nest-h100-spineleaf--64", "llama2-7b--nest-tpuv4-fattree--64")
PAPER = Path(__file__).resolve().parent.parent / "instances" / "paper"


def tp1_only(instance: Instance) -> Instance:
    """The instance with only the t = e = 1 profiles (the other choices removed)."""
    layers = tuple(Layer(layer.name, {key: profile for key, profile in layer.profiles.items()
                                      if key[0].devices == 1})
                   for layer in instance.workload.layers)
    return dataclasses.replace(instance, workload=Workload(instance.workload.name, layers),
                               name=instance.name + "-t1")


def check(name: str, time_limit_s: float, exact_limit_s: float) -> dict:
    instance = tp1_only(load_instance(PAPER / f"{name}.json"))
    dp = solve(instance, "dp")
    began = time.monotonic()
    certificate = certify_full(instance, dp.plan, time_limit_s)
    certify_s = time.monotonic() - began
    exact = solve(instance, "cpsat", SolveOptions(space=Space.FULL, time_limit_s=exact_limit_s,
                                                  hint=dp.plan, workers=1, seed=0))
    below = exact.objective_ticks is not None and \
        exact.objective_ticks < certificate.bound_ticks
    above = exact.bound_ticks is not None and certificate.objective_ticks is not None and \
        exact.bound_ticks > certificate.objective_ticks
    return {"instance": instance.name, "dp_ticks": dp.objective_ticks,
            "certified_bound": certificate.bound_ticks,
            "certified_best": certificate.objective_ticks,
            "certified_status": certificate.status.value, "certify_s": round(certify_s, 1),
            "exact_status": exact.status.value, "exact_ticks": exact.objective_ticks,
            "exact_bound": exact.bound_ticks, "exact_s": round(exact.wall_time_s, 1),
            "contradiction": below or above}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--time-limit", type=float, default=600.0)
    parser.add_argument("--exact-limit", type=float, default=1800.0)
    parser.add_argument("--out", type=Path, default=PAPER.parent.parent / "reports" / "paper")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    rows = [check(name, args.time_limit, args.exact_limit) for name in SAMPLE]
    (args.out / "certified_crosscheck.json").write_text(json.dumps(rows, indent=1) + "\n")
    lines = ["# Certified bounds against the exact CP-SAT backend run longer", "",
             f"t = e = 1 restrictions of four NEST-grid instances (small enough for the exact "
             f"backend to prove); certify-full at {args.time_limit:g} s, "
             f"CP-SAT full space at {args.exact_limit:g} s, hinted with the DP plan, one "
             f"worker, seed 0. A contradiction would be an exact plan below the certified "
             f"bound or an exact bound above the certified best plan.", "",
             "| instance | certified [bound, best] (ms) | status | CP-SAT plan / bound (ms) | "
             "CP-SAT status | contradiction |", "|---|---|---|---|---|---|"]
    for row in rows:
        def ms(value):
            return "—" if value is None else f"{value / 1e6:.3f}"
        lines.append(f"| {row['instance']} | [{ms(row['certified_bound'])}, "
                     f"{ms(row['certified_best'])}] | {row['certified_status']} | "
                     f"{ms(row['exact_ticks'])} / {ms(row['exact_bound'])} | "
                     f"{row['exact_status']} | {'YES' if row['contradiction'] else 'no'} |")
    (args.out / "certified_crosscheck.md").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
