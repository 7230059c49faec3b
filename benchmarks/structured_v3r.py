"""Issue 31, replica blocks: the DP over structured space v3b-R against v3a and the best
plans known.

For the rows of ``reports/paper/certified.json`` named (default: the eight where the DP's
v3a plan was more than 0.5 % above the certificate's best plan), the DP is run twice in
this process, over v3a's layouts (``NetworkModel.structured_layouts`` without the replica
blocks) and over v3b-R's (the default); each plan is re-priced by the evaluator (it must
equal the DP's objective to the tick) and T is compared with the certificate's best plan
(``objective_ticks``).  Wall times are of this process on whatever machine runs it (say
whether it was loaded).

Run: ``python -m benchmarks.structured_v3r [--only NAME ...] [--out FILE]``; ``--table
FILE`` prints the markdown table from a result file; ``--speed DEVICES v3a|v3b`` times the
DP on GPT3-175B with the v3 choices on nest-tpuv4-fattree (one fresh process per run).
"""

from __future__ import annotations

from pathlib import Path

from benchmarks.structured_v3a import two_space_report

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "reports" / "structured_v3r.json"
MISS_ROWS = ("bert-large--nest-tpuv4-fattree--512", "bert-large--nest-tpuv4-fattree--1024",
             "llama2-7b--nest-h100-spineleaf--1024", "bert-large--nest-h100-spineleaf--1024",
             "gpt3-175b--nest-h100-spineleaf--256", "llama3-70b--nest-h100-spineleaf--128",
             "llama2-7b--nest-h100-spineleaf--256", "bert-large--nest-h100-spineleaf--512")


def main() -> None:
    two_space_report("v3a", "v3b", OUT, __doc__.splitlines()[0], MISS_ROWS)


if __name__ == "__main__":
    main()
