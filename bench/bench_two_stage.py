"""LAPACK's one-stage (?syevd, NumPy's eigvalsh and SciPy's eigh) against its two-stage symmetric eigensolver
(?syevd_2stage, spectra_cli.eigen.two_stage), eigenvalues only, float64 and float32, on one thread and on every core
this process may use; and with ``--pairs``, two processes at once on one thread each (a batch's two workers).
The thresholds TWO_STAGE_MIN_ORDER and TWO_STAGE_MIN_ORDER_FLOAT32 (spectra_cli.eigen.two_stage) come from this table.

    python bench/bench_two_stage.py --d 2048 3072 4096 --repeats 2
    python bench/bench_two_stage.py --d 4096 8192 --pairs --repeats 1

Each cell is the median of --repeats runs in one process (the matrix: the covariance of 1.5 d rows of a j^-0.5
population), with the largest difference from NumPy's float64 eigvalsh in units of lambda_1.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
from threadpoolctl import threadpool_limits
from timing import median_seconds

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from spectra_cli.eigen import two_stage  # noqa: E402


def matrix(d: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((d + d // 2, d)).astype(np.float32) * (np.arange(1, d + 1) ** -0.5).astype(np.float32)
    return (X.T @ X).astype(np.float64) / X.shape[0]


def one_stage(C: np.ndarray, dtype: str) -> np.ndarray:
    import scipy.linalg

    return scipy.linalg.eigh(C.astype(dtype), eigvals_only=True, driver="evd").astype(np.float64)


def cell(d: int, dtype: str, threads: int, repeats: int) -> tuple[float, float, float, float]:
    C = matrix(d)
    ref = np.linalg.eigvalsh(C)
    with threadpool_limits(threads):
        t1 = median_seconds(lambda: one_stage(C, dtype), repeats)
        t2 = median_seconds(lambda: two_stage.eigvalsh_two_stage(C, dtype), repeats)  # type: ignore[arg-type]
    e1 = float(np.max(np.abs(one_stage(C, dtype) - ref)) / ref[-1])
    e2 = float(np.max(np.abs(two_stage.eigvalsh_two_stage(C, dtype) - ref)) / ref[-1])  # type: ignore[operator]
    return t1, t2, e1, e2


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--d", type=int, nargs="+", default=[2048, 3072, 4096])
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--pairs", action="store_true", help="two processes at once, one thread each")
    ap.add_argument("--one", nargs=3, help=argparse.SUPPRESS)  # (a pair's process: d, dtype, route)
    args = ap.parse_args()
    if not two_stage.available():
        sys.exit("no OpenBLAS with LAPACKE ?syevd_2stage is loaded here")
    if args.one:
        d, dtype, route = int(args.one[0]), args.one[1], args.one[2]
        C = matrix(d, seed=os.getpid())
        with threadpool_limits(1):
            f = (lambda: one_stage(C, dtype)) if route == "one" else (lambda: two_stage.eigvalsh_two_stage(C, dtype))
            print(f"{median_seconds(f, args.repeats):.2f}")  # type: ignore[arg-type]
        return
    cores = len(os.sched_getaffinity(0))
    if args.pairs:
        print("| d | dtype | one-stage, two at once s | two-stage, two at once s |\n| ---: | --- | ---: | ---: |")
        for d in args.d:
            for dtype in ("float32", "float64"):
                out = []
                for route in ("one", "two"):
                    procs = [subprocess.Popen([sys.executable, __file__, "--one", str(d), dtype, route, "--repeats",
                                               str(args.repeats)], stdout=subprocess.PIPE, text=True)
                             for _ in range(2)]
                    out.append(" / ".join(p.communicate()[0].strip() for p in procs))
                print(f"| {d:,} | {dtype} | {out[0]} | {out[1]} |", flush=True)
        return
    print("| d | dtype | threads | one-stage s | two-stage s | ratio | error one / two (lambda_1) |\n"
          "| ---: | --- | ---: | ---: | ---: | ---: | --- |")
    for d in args.d:
        for dtype in ("float32", "float64"):
            for threads in sorted({1, cores}):
                t1, t2, e1, e2 = cell(d, dtype, threads, args.repeats)
                print(f"| {d:,} | {dtype} | {threads} | {t1:.2f} | {t2:.2f} | {t1 / t2:.2f} | {e1:.1e} / {e2:.1e} |",
                      flush=True)


if __name__ == "__main__":
    main()
