"""Issue 31, node tails: the DP over structured space v3c against v3b-R and the best plans
known.

For the rows of ``reports/paper/certified.json`` named (default: all 50), the DP is run
twice in this process, over v3b-R's layouts (``NetworkModel.structured_layouts`` without
the node tail) and over v3c's (the default); each plan is re-priced by the evaluator (it
must equal the DP's objective to the tick) and T is compared with the certificate's best
plan (``objective_ticks``).  Wall times are of this process on whatever machine runs it
(say whether it was loaded).

Run: ``python -m benchmarks.structured_v3c [--only NAME ...] [--out FILE]``; ``--table
FILE`` prints the markdown table from a result file; ``--speed DEVICES v3b|v3c`` times the
DP on GPT3-175B with the v3 choices on nest-tpuv4-fattree (one fresh process per run).
"""

from __future__ import annotations

from pathlib import Path

from benchmarks.structured_v3a import two_space_report

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "reports" / "structured_v3c.json"


def main() -> None:
    two_space_report("v3b", "v3c", OUT, __doc__.splitlines()[0])


if __name__ == "__main__":
    main()
