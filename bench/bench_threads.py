"""When a second BLAS thread pays: eigvalsh and X^T X products at several sizes, on one thread and on
every core this process may use, quiet and with busy processes on the same cores (a CI runner, a
laptop running a build). The thread policy of spectra_cli.threads comes from this table.

    python bench/bench_threads.py                 # quiet, then loaded with 2 busy processes
    python bench/bench_threads.py --busy 0        # quiet only

Each cell is the median of --repeats runs in one process, threads set with threadpoolctl.
"""

from __future__ import annotations

import argparse
import os
import sys

import numpy as np
from busy import busy
from threadpoolctl import threadpool_limits
from timing import median_seconds


def table(repeats: int) -> list[tuple[str, int, float, float]]:
    rng = np.random.default_rng(0)
    cores = len(os.sched_getaffinity(0))
    rows = []
    for d in (128, 256, 384, 512, 768, 1024, 2048):
        A = rng.standard_normal((d, d))
        C = A @ A.T
        for threads in (1, cores):
            with threadpool_limits(threads):
                t = median_seconds(lambda C=C: np.linalg.eigvalsh(C), repeats)
            rows.append(("eigvalsh d x d", d, threads, t))
    for n, d in ((1024, 128), (4096, 384), (8192, 384), (8192, 768), (4096, 2048)):
        X = rng.standard_normal((n, d))
        for threads in (1, cores):
            with threadpool_limits(threads):
                t = median_seconds(lambda X=X: X.T @ X, repeats)
            rows.append((f"X^T X, {n} rows", d, threads, t))
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--busy", type=int, default=2, help="busy processes for the loaded run (0: quiet only)")
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    quiet = table(args.repeats)
    loaded = None
    if args.busy:
        with busy(args.busy, seconds=120):
            loaded = table(args.repeats)
    print("| operation | d | threads | quiet s | loaded s |")
    print("|---|---|---|---|---|")
    for i, (op, d, threads, t) in enumerate(quiet):
        lt = f"{loaded[i][3]:.4f}" if loaded else "-"
        print(f"| {op} | {d} | {threads} | {t:.4f} | {lt} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
