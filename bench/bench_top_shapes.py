"""When the top-k route pays: block Lanczos for the leading K eigenvalues against one `eigvalsh`,
in-process on the same d x d covariance (n = 2d Gaussian rows), for spectra from flat (white noise)
to steep (eigenvalues ~ j^-1). Krylov methods converge slowly when the leading eigenvalues are
crowded, so the automatic route (d >= 4,096, windows ending at or below d/16) can cost more than the
full decomposition on a flat spectrum.

    python bench/bench_top_shapes.py                   # d = 4,096, K = 256: about 2 minutes on 2 cores
    python bench/bench_top_shapes.py --d 8192 --k 512
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from spectra_cli.eigen.lanczos import top_eigenvalues


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--d", type=int, default=4096)
    ap.add_argument("--k", type=int, default=256)
    args = ap.parse_args()
    d, k = args.d, args.k
    rng = np.random.default_rng(0)
    print(f"d = {d}, n = {2 * d}, K = {k}; eigenvalues of the population covariance j^-a")
    for a in (0.0, 0.2, 0.5, 1.0):
        X = rng.standard_normal((2 * d, d)) * np.arange(1, d + 1) ** (-a / 2)
        C = X.T @ X / (2 * d)
        del X
        t = time.perf_counter()
        found = top_eigenvalues(C, k)
        t_top = time.perf_counter() - t
        t = time.perf_counter()
        full = np.linalg.eigvalsh(C)[::-1]
        t_full = time.perf_counter() - t
        if found is None:
            what = "reached its cap (the route then adds a full eigvalsh)"
        else:
            diff = float(np.max(np.abs(found.values - full[:k]) / full[:k]))
            what = f"dimension {found.dimension}, max rel. diff. {diff:.1e}"
        print(f"  a = {a:3.1f}: top {k} {t_top:6.2f} s ({what}); eigvalsh {t_full:6.2f} s; "
              f"top / eigvalsh {t_top / t_full:.2f}")


if __name__ == "__main__":
    main()
