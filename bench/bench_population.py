"""The population exponent (``fit(..., population=True)``) on the synthetic grid of issue 19.

Population ``tau_j = j^-alpha`` (j = 1..d) in a Haar-random rotation drawn anew for every fit; rows
``gaussian``, or ``elliptical``: each Gaussian row times ``sqrt(s_i)``, ``s_i ~ Gamma(1, 1)`` (a
coefficient of variation of 1); centred; ``fit(X, window=WINDOW, population=True, ci_seed=seed)`` on
the in-memory array (the whole pipeline: the streamed moments and their histogram of squared row
norms). Per cell: the naive (sample) slope's mean error, the population alpha's median error, how
often its 95 % interval holds the truth, the mean interval width, the match RMS and the seconds of one
``population`` step (``timings.population_s``).

    OPENBLAS_NUM_THREADS=1 python bench/bench_population.py --d 512 --seeds 5 --rows-model both

``--timing D1,D2,...``: instead, the cost of ``--population`` at those widths (alpha 1, n = 2 d,
Gaussian rows, window 11:d/2), one fit each, with the default two BLAS threads' policy.
"""

from __future__ import annotations

import argparse
import json
import time
import warnings

import numpy as np

import spectra_cli as spectra


def rows(alpha: float, n: int, d: int, model: str, rng: np.random.Generator, *, rotate: bool = True) -> np.ndarray:
    tau = np.arange(1, d + 1, dtype=np.float64) ** -alpha
    X = rng.standard_normal((n, d)) * np.sqrt(tau)
    if rotate:
        Q, R = np.linalg.qr(rng.standard_normal((d, d)))
        X = X @ (Q * np.sign(np.diag(R))).T
    if model == "elliptical":
        X *= np.sqrt(rng.gamma(1.0, 1.0, n))[:, None]
    return X + 3.0


def grid(args: argparse.Namespace) -> None:
    models = ("gaussian", "elliptical") if args.rows_model == "both" else (args.rows_model,)
    records = []
    for model in models:
        print(f"\nrows: {model}, d = {args.d}, window {args.window}, {args.seeds} seeds\n")
        print("| alpha | n/d | naive - true | population median - true | covered | width | spread ratio | "
              "interval from data | not a power law | match rms | s |")
        print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
        total = cover = 0
        for alpha in args.alphas:
            for ratio in args.ratios:
                n = int(ratio * args.d)
                naive, pop, hit, width, rms, secs, ratio_, data, bent = [], [], 0, [], [], [], [], 0, 0
                for s in range(args.seeds):
                    rng = np.random.default_rng([s, int(alpha * 100), int(ratio * 10), model == "elliptical"])
                    X = rows(alpha, n, args.d, model, rng)
                    with warnings.catch_warnings():
                        warnings.simplefilter("ignore")
                        rep = spectra.fit(X, window=args.window, population=True, ci_seed=s).to_dict()
                    f = rep["fit"]
                    p = f["population"]
                    naive.append(f["alpha"] - alpha)
                    pop.append(p["alpha"] - alpha)
                    hit += p["ci"][0] <= alpha <= p["ci"][1]
                    width.append(p["ci"][1] - p["ci"][0])
                    rms.append(p["match_rms"])
                    curve = p.get("sampling_curve") or {}
                    ratio_.append(curve.get("spread_ratio", np.nan))
                    data += curve.get("interval_from") == "data"
                    bent += not (p.get("bend") or {}).get("fits", True)  # (a false alarm: these are power laws)
                    secs.append(rep["timings"]["population_s"])
                    records.append({"rows": model, "alpha": alpha, "n_over_d": ratio, "seed": s, "fit": f})
                total += args.seeds
                cover += hit
                print(f"| {alpha:g} | {ratio:g} | {np.mean(naive):+.4f} | {np.median(pop):+.4f} | {hit}/{args.seeds} | "
                      f"{np.mean(width):.4f} | {np.nanmean(ratio_):.3f} | {data}/{args.seeds} | {bent}/{args.seeds} | "
                      f"{np.mean(rms):.4f} | "
                      f"{np.mean(secs):.2f} |", flush=True)
        print(f"\ncovered: {cover}/{total}")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(records, fh)


def timing(widths: list[int]) -> None:
    print("| d | n | population_s | evaluations | grid points | atoms | bootstrap s |")
    print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for d in widths:
        X = rows(1.0, 2 * d, d, "gaussian", np.random.default_rng(d), rotate=False)  # (the cost is rotation-free)
        t = time.perf_counter()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            rep = spectra.fit(X, window=f"11:{d // 2}", population=True).to_dict()
        c = rep["fit"]["population"]["cost"]
        print(f"| {d} | {2 * d} | {rep['timings']['population_s']:.2f} | {c['evaluations']} | {c['grid_points']} | "
              f"{c['atoms']} | {c['bootstrap_s']:.2f} |  (whole fit {time.perf_counter() - t:.1f} s)", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--d", type=int, default=512)
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--alphas", type=float, nargs="+", default=[0.5, 1.0, 1.5])
    ap.add_argument("--ratios", type=float, nargs="+", default=[0.5, 1, 2, 4, 10])
    ap.add_argument("--window", default="11:256")
    ap.add_argument("--rows-model", choices=["gaussian", "elliptical", "both"], default="both")
    ap.add_argument("--json", help="write every fit here")
    ap.add_argument("--timing", help="comma-separated widths: measure the cost instead")
    ap.add_argument("--first-order-ratio", type=float,
                    help="the n/d from which the interval is first order instead of simulated (a study of the "
                         "threshold; default: the package's)")
    args = ap.parse_args()
    if args.first_order_ratio is not None:
        from spectra_cli.analysis import population

        population.FIRST_ORDER_RATIO = args.first_order_ratio
    if args.timing:
        timing([int(v) for v in args.timing.split(",")])
    else:
        grid(args)


if __name__ == "__main__":
    main()
