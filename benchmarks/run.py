"""`make bench`: run every benchmark module present and write benchmarks/results/.

Each benchmark module exposes ``run(out_dir: pathlib.Path) -> None`` and writes its
own JSON and Markdown files; this driver only finds and runs them, in a fixed order.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import time
from pathlib import Path

MODULES = ("benchmarks.bench_dp", "benchmarks.bench_exact", "benchmarks.bench_verify",
           "benchmarks.bench_time_limit")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--only", action="append", default=[],
                        help="run only these modules (e.g. bench_dp); repeatable")
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    args.out.mkdir(parents=True, exist_ok=True)
    for name in MODULES:
        if args.only and name.rsplit(".", 1)[-1] not in args.only:
            continue
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name != name:
                raise
            logging.warning("%s is not there yet; skipped", name)
            continue
        start = time.perf_counter()
        module.run(args.out)
        logging.info("%s done in %.1f s", name, time.perf_counter() - start)


if __name__ == "__main__":
    main()
