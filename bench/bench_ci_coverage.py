"""Bias of the fitted power-law exponent and coverage of its bootstrap interval (``fit(..., ci=True)``)
on a synthetic grid of aspect ratios n/d, exponents and row distributions.

Population: ``tau_j = j^-alpha`` (j = 1..d); rows ``x = Z diag(sqrt(tau)) Q`` with ``Z`` standard
Gaussian and ``Q`` a Haar-random orthogonal matrix, drawn anew for every fit (``--rotation diagonal``:
``Q = I``). Rows models: ``gaussian``, and ``elliptical``: each Gaussian row times ``sqrt(s_i)``,
``s_i ~ Gamma(shape=1, scale=1)`` (mean 1, so the population covariance, and alpha, are unchanged;
coefficient of variation of ``s`` 1: heavy-tailed, dependent coordinates). The covariance is centred
(the default). Each fit: ``fit(X, window=WINDOW, ci=True, ci_replicates=R, ci_seed=seed)`` on the
in-memory array; where it refuses the bootstrap (``ci`` needs n >= d) the cell is fitted again
without ``ci`` so that its bias is still reported.

Columns per cell (``--seeds`` fits each):

- ``bias``: mean(fitted alpha) - true alpha; ``max |err|`` the largest error of a seed;
- ``stderr``: mean of the least-squares standard error the report gives (``fit.stderr``), and
  ``se cover``: how often ``alpha +- 1.96 stderr`` holds the true alpha;
- ``boot bias``: mean of the bootstrap's own bias estimate (``fit.ci.bias``: mean replicate - estimate);
- ``basic cover``: true alpha in the basic (bias-corrected) interval ``[fit.ci.low, fit.ci.high]``;
- ``pct cover``: true alpha in the percentile interval ``[fit.ci.percentile_low, fit.ci.percentile_high]``;
- ``width``: mean interval width (the same for both: ``q_hi - q_lo``);
- ``s/fit``: mean seconds of one ``fit(..., ci=True)`` call (data generation excluded).

Run (one BLAS thread; d = 512 with 8 seeds: about 5 minutes per rows model on one quiet core,
3.0-3.4 s a fit):

    OPENBLAS_NUM_THREADS=1 python bench/bench_ci_coverage.py --d 512 --seeds 8 --rows-model both

``--json FILE`` also writes every fit's figures.
"""

from __future__ import annotations

import argparse
import inspect
import json
import re
import time
import warnings
from collections import Counter
from typing import Any

import numpy as np

from spectra_cli.errors import FitError
from spectra_cli.run import matrix as api

ROWS_MODELS = ("gaussian", "elliptical")


def orthogonal(rng: np.random.Generator, d: int) -> np.ndarray:
    """A Haar-random d x d orthogonal matrix (QR of a Gaussian matrix, signs fixed)."""
    q, r = np.linalg.qr(rng.standard_normal((d, d)))
    return q * np.sign(np.diag(r))


def make_rows(rows_model: str, *, n: int, d: int, alpha: float, rotation: str, rng: np.random.Generator) -> np.ndarray:
    root = np.arange(1, d + 1, dtype=np.float64) ** (-alpha / 2)
    X = rng.standard_normal((n, d)) * root
    if rotation == "haar":
        X = X @ orthogonal(rng, d)
    if rows_model == "elliptical":
        X *= np.sqrt(rng.gamma(shape=1.0, scale=1.0, size=n))[:, None]
    return X


def cell_rng(seed: int, alpha: float, ratio: float, rows_model: str) -> np.random.Generator:
    """The same data for a (seed, alpha, n/d, rows model) whatever else the grid holds."""
    return np.random.default_rng([seed, round(alpha * 1000), round(ratio * 1000), ROWS_MODELS.index(rows_model)])


def one_fit(X: np.ndarray, *, alpha: float, window: str, replicates: int, seed: int) -> dict[str, Any]:
    out: dict[str, Any] = {"refused": None}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        t = time.perf_counter()
        try:
            rep = api.fit(X, window=window, ci=True, ci_replicates=replicates, ci_seed=seed, threads=1)
        except FitError as exc:
            out["refused"] = str(exc)
            rep = api.fit(X, window=window, threads=1)
        out["seconds"] = time.perf_counter() - t
    f = rep.to_dict()["fit"]
    out.update(alpha=f["alpha"], stderr=f["stderr"], window=f["window"],
               warnings=sorted({str(w.message) for w in caught}))
    ci = f["ci"]
    if ci is not None:
        out.update(low=ci["low"], high=ci["high"], percentile_low=ci["percentile_low"],
                   percentile_high=ci["percentile_high"], boot_bias=ci["bias"], replicates_ok=ci["replicates"],
                   groups=ci["groups"])
    out["se_cover"] = bool(abs(f["alpha"] - alpha) <= 1.96 * f["stderr"])
    return out


def summarise(alpha: float, fits: list[dict[str, Any]]) -> dict[str, Any]:
    est = np.array([f["alpha"] for f in fits])
    withci = [f for f in fits if f["refused"] is None]
    row: dict[str, Any] = {
        "bias": float(est.mean() - alpha), "max_err": float(np.abs(est - alpha).max()),
        "stderr": float(np.mean([f["stderr"] for f in fits])), "se_cover": sum(f["se_cover"] for f in fits),
        "n": len(fits), "n_ci": len(withci), "seconds": float(np.mean([f["seconds"] for f in fits])),
        "windows": sorted({tuple(f["window"]) for f in fits}),
    }
    if withci:
        row.update(
            boot_bias=float(np.mean([f["boot_bias"] for f in withci])),
            basic=sum(f["low"] <= alpha <= f["high"] for f in withci),
            pct=sum(f["percentile_low"] <= alpha <= f["percentile_high"] for f in withci),
            width=float(np.mean([f["high"] - f["low"] for f in withci])),
        )
    return row


def table(rows: list[tuple[float, float, dict[str, Any]]]) -> str:
    head = ("| alpha | n/d | bias | max \\|err\\| | stderr | se cover | boot bias | basic cover | pct cover "
            "| width | s/fit | window |")
    lines = [head, "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |"]
    for alpha, ratio, r in rows:
        win = ", ".join(f"{a}:{b}" for a, b in r["windows"])
        if r["n_ci"]:
            ci = (f"{r['boot_bias']:+.4f} | {r['basic']}/{r['n_ci']} | {r['pct']}/{r['n_ci']} | "
                  f"{r['width']:.4f}")
        else:
            ci = "refused | - | - | -"
        lines.append(f"| {alpha:g} | {ratio:g} | {r['bias']:+.4f} | {r['max_err']:.4f} | {r['stderr']:.4f} | "
                     f"{r['se_cover']}/{r['n']} | {ci} | {r['seconds']:.2f} | {win} |")
    return "\n".join(lines)


def main() -> None:
    default_replicates = inspect.signature(api.fit).parameters["ci_replicates"].default
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--d", type=int, default=512)
    ap.add_argument("--seeds", type=int, default=5, help="seeds 0..SEEDS-1 per cell")
    ap.add_argument("--replicates", type=int, default=default_replicates,
                    help=f"bootstrap replicates (default: fit's own, {default_replicates})")
    ap.add_argument("--alphas", default="0.5,1,1.5")
    ap.add_argument("--ratios", default="0.5,1,2,4,10", help="n/d values (n = round(ratio * d))")
    ap.add_argument("--rows-model", choices=(*ROWS_MODELS, "both"), default="both")
    ap.add_argument("--rotation", choices=("haar", "diagonal"), default="haar")
    ap.add_argument("--window", default="11:256")
    ap.add_argument("--json", default=None, help="write every fit's figures to this file")
    args = ap.parse_args()
    alphas = [float(a) for a in args.alphas.split(",")]
    ratios = [float(r) for r in args.ratios.split(",")]
    models = ROWS_MODELS if args.rows_model == "both" else (args.rows_model,)
    d = args.d
    print(f"d = {d}, window {args.window}, rotation {args.rotation}, seeds 0..{args.seeds - 1}, "
          f"{args.replicates} replicates, centred, level 0.95\n")
    record: dict[str, Any] = {"args": vars(args), "fits": []}
    for model in models:
        rows, notes = [], Counter()
        for alpha in alphas:
            for ratio in ratios:
                n = round(ratio * d)
                fits = []
                for seed in range(args.seeds):
                    X = make_rows(model, n=n, d=d, alpha=alpha, rotation=args.rotation,
                                  rng=cell_rng(seed, alpha, ratio, model))
                    f = one_fit(X, alpha=alpha, window=args.window, replicates=args.replicates, seed=seed)
                    fits.append(f)
                    for w in f["warnings"] + ([f"ci refused: {f['refused']}"] if f["refused"] else []):
                        notes[(re.sub(r"\d+(\.\d+)?(e[-+]?\d+)?", "#", w), ratio)] += 1
                    record["fits"].append({"rows_model": model, "alpha": alpha, "ratio": ratio, "n": n,
                                           "seed": seed, **f})
                rows.append((alpha, ratio, summarise(alpha, fits)))
                print(f"  [{model}] alpha {alpha:g} n/d {ratio:g} done", flush=True)
        covered = [r for _, ratio, r in rows if ratio <= 10 and r["n_ci"]]
        tot = sum(r["n_ci"] for r in covered)
        print(f"\n### rows: {model}\n\n{table(rows)}\n")
        print(f"Totals over cells with n/d <= 10 and an interval: basic {sum(r['basic'] for r in covered)}/{tot}, "
              f"percentile {sum(r['pct'] for r in covered)}/{tot}, "
              f"alpha +- 1.96 stderr {sum(r['se_cover'] for r in covered)}/{tot}\n")
        print("Warnings (numbers as #), by n/d: fits")
        for (msg, ratio), count in sorted(notes.items(), key=lambda kv: (kv[0][1], kv[0][0])):
            print(f"- n/d {ratio:g}: {count}x {msg}")
        print()
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(record, fh, indent=1)


if __name__ == "__main__":
    main()
