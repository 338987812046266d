"""Fitting benchmark: recovery of alpha and bootstrap coverage on `synth powerlaw` data,
and the added cost of --ci. The small version of the coverage run is a test.

    python bench/bench_fit.py --d 256 --repeats 50
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from spectra_cli.run import matrix as api
from spectra_cli.run import synth


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--d", type=int, default=256)
    ap.add_argument("--ratio", type=int, default=20, help="n = ratio * d")
    ap.add_argument("--repeats", type=int, default=50)
    ap.add_argument("--replicates", type=int, default=200)
    ap.add_argument("--alphas", default="0.5,1,1.5,2")
    ap.add_argument("--no-ci", action="store_true", help="recovery only (no bootstrap)")
    args = ap.parse_args()
    d, n = args.d, args.ratio * args.d
    print(f"d = {d}, n = {n}, default window 11..{d // 10}, {args.repeats} seeded repeats, "
          f"{args.replicates} bootstrap replicates")
    print(f"{'alpha':>6s} {'mean fit':>9s} {'max |err|':>9s} {'basic cover':>12s} {'pct cover':>10s} "
          f"{'fit s':>6s} {'fit+ci s':>8s}")
    for a in (float(x) for x in args.alphas.split(",")):
        est, basic, pct, t_fit, t_ci = [], 0, 0, [], []
        for s in range(args.repeats):
            X = np.concatenate(list(synth.generate("powerlaw", n=n, d=d, seed=1000 + s, alpha=a)))
            t = time.perf_counter()
            api.fit(X)
            t_fit.append(time.perf_counter() - t)
            if args.no_ci:
                est.append(api.fit(X).fit.alpha)
                t_ci.append(float("nan"))
                continue
            t = time.perf_counter()
            f = api.fit(X, ci=True, ci_replicates=args.replicates, ci_seed=s).fit
            t_ci.append(time.perf_counter() - t)
            est.append(f.alpha)
            basic += f.ci.low <= a <= f.ci.high
            pct += f.ci.percentile_low <= a <= f.ci.percentile_high
        err = np.abs(np.array(est) - a)
        cover = "     -            -" if args.no_ci else f"{basic:>6d}/{args.repeats:<5d} {pct:>4d}/{args.repeats:<5d}"
        ci_t = "       -" if args.no_ci else f"{np.median(t_ci):8.3f}"
        print(f"{a:6.2f} {np.mean(est):9.4f} {err.max():9.4f} {cover} {np.median(t_fit):6.3f} {ci_t}")


if __name__ == "__main__":
    main()
