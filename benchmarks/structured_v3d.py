"""Issue 31, gathered ends: the DP over structured space v3d against v3c and the best plans
known.

For the rows of ``reports/paper/certified.json`` named (default: all 50), the DP is run
twice in this process, over v3c's layouts (``NetworkModel.structured_layouts`` without the
gathered ends) and over v3d's (the default); each plan is re-priced by the evaluator (it
must equal the DP's objective to the tick) and T is compared with the certificate's best
plan (``objective_ticks``).  By construction v3d's optimum is at most v3c's on every row.
Wall times are of this process on whatever machine runs it (say whether it was loaded).

Run: ``python -m benchmarks.structured_v3d [--only NAME ...] [--out FILE]``; ``--table
FILE`` prints the markdown table from a result file; ``--speed DEVICES v3c|v3d`` times the
DP on GPT3-175B with the v3 choices on nest-tpuv4-fattree (one fresh process per run).
"""

from __future__ import annotations

from pathlib import Path

from benchmarks.structured_v3a import two_space_report

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "reports" / "structured_v3d.json"


def main() -> None:
    two_space_report("v3c", "v3d", OUT, __doc__.splitlines()[0])


if __name__ == "__main__":
    main()
