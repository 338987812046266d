"""The population exponent at many rows: d = 1,024, n = 51,200 (issue 33, sixth round).

The bench grid (``bench_population.py``, d = 512) stops at n = 25,600; at twice as many rows the top eigenvalues'
clusters are narrower (~2 / sqrt(n) in log) and the expected spectrum's grid has to place them. Population
``tau_j = j^-alpha`` (diagonal: the fit does not depend on the rotation), Gaussian or elliptical rows
(``bench_population.rows``), ``fit(X, window="11:102", population=True)``; per cell the sample slope's mean error,
the population alpha's median error, how often its 95 % interval holds the truth, the mean width and the
expected spectrum's evaluations.

    OPENBLAS_NUM_THREADS=1 python bench/bench_population_wide.py
    OPENBLAS_NUM_THREADS=1 PYTHONPATH=<checkout of an earlier commit> python bench/bench_population_wide.py
"""

from __future__ import annotations

import argparse
import sys
import warnings
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))

from bench_population import rows  # noqa: E402

import spectra_cli as spectra  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--d", type=int, default=1024)
    ap.add_argument("--ratio", type=float, default=50.0)
    ap.add_argument("--seeds", type=int, default=4)
    ap.add_argument("--alphas", type=float, nargs="+", default=[0.5, 1.0, 1.5])
    a = ap.parse_args()
    n, window = int(a.ratio * a.d), f"11:{a.d // 10}"
    print("| rows | alpha | naive - true | population median - true | covered | width | evaluations |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    for model in ("gaussian", "elliptical"):
        for alpha in a.alphas:
            cell = []
            for s in range(a.seeds):
                X = rows(alpha, n, a.d, model, np.random.default_rng([s, 7, int(alpha * 10)]), rotate=False)
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    p = spectra.fit(X, window=window, population=True, ci_seed=s).to_dict()["fit"]["population"]
                cell.append([p["alpha"] - alpha, p["ci"][0] <= alpha <= p["ci"][1], p["ci"][1] - p["ci"][0],
                             p["naive_alpha"] - alpha, p["cost"]["evaluations"]])
            c = np.array(cell, dtype=float)
            print(f"| {model} | {alpha:g} | {c[:, 3].mean():+.4f} | {np.median(c[:, 0]):+.4f} | "
                  f"{int(c[:, 1].sum())}/{a.seeds} | {c[:, 2].mean():.4f} | {c[:, 4].mean():.0f} |", flush=True)


if __name__ == "__main__":
    main()
