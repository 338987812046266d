"""The population exponent's interval from theory against the simulated one, on the same samples.

Each sample is fitted twice, ``fit(X, window=..., population=True, population_route=ROUTE)`` with ROUTE "analytic"
(the default: the central limit theorem of linear spectral statistics, ``spectra_cli.analysis.lss``) and
"simulate" (40 samples simulated from the fitted population, and the sampling curve's 8 simulated samples); the
whole pipeline on the in-memory array, centred. Per cell: how often each 95 % interval holds the population's own
window slope (the truth), its mean width, the median error of the estimate and the seconds of the population step
(``timings.population_s``).

Rows (``--laws``): ``gaussian``; ``elliptical``, each Gaussian row times ``sqrt(s_i)``, ``s_i ~ Gamma(1, 1)``;
``laplace``, independent Laplace coordinates of unit variance in the population's eigenbasis; all in a Haar-random
rotation. Populations (``--shapes``): ``power-A`` (``j^-A``), ``broken`` (``j^-1`` to rank d/4, ``j^-2`` after:
the knee past the window), ``cutoff`` (``j^-1 exp(-j / (d/4))``: the window itself bends).

    OPENBLAS_NUM_THREADS=1 python bench/bench_population_theory.py --d 96 256 --seeds 16 8 --json a.json
    OPENBLAS_NUM_THREADS=1 python bench/bench_population_theory.py --d 1024 --seeds 4 --shapes power-1 --json b.json
    python bench/bench_population_theory.py --table a.json b.json
"""

from __future__ import annotations

import argparse
import json
import math
import warnings
from collections import defaultdict

import numpy as np

import spectra_cli as spectra
from spectra_cli.analysis.equivalent import slope_of

WINDOWS = {96: (5, 40), 256: (11, 100), 512: (11, 200), 1024: (11, 300)}


def population(shape: str, d: int) -> np.ndarray:
    j = np.arange(1, d + 1, dtype=np.float64)
    if shape.startswith("power-"):
        return j ** -float(shape.split("-", 1)[1])
    if shape == "broken":
        knee = d // 4
        return np.where(j <= knee, j ** -1.0, knee ** 1.0 * j ** -2.0)
    if shape == "cutoff":
        return j ** -1.0 * np.exp(-j / (d / 4))
    raise SystemExit(f"unknown shape {shape!r}")


def rows(tau: np.ndarray, n: int, law: str, rng: np.random.Generator) -> np.ndarray:
    d = tau.size
    if law == "laplace":
        Z = rng.laplace(scale=1.0 / math.sqrt(2.0), size=(n, d))
    else:
        Z = rng.standard_normal((n, d))
    X = Z * np.sqrt(tau)
    Q, R = np.linalg.qr(rng.standard_normal((d, d)))
    X = X @ (Q * np.sign(np.diag(R))).T
    if law == "elliptical":
        X *= np.sqrt(rng.gamma(1.0, 1.0, n))[:, None]
    return X + 1.0


def run(args: argparse.Namespace) -> None:
    out = []
    seeds_of = args.seeds if len(args.seeds) == len(args.d) else args.seeds * len(args.d)
    for d, seeds in zip(args.d, seeds_of, strict=False):
        k0, k1 = WINDOWS.get(d, (11, d // 4))
        for shape in args.shapes:
            tau = population(shape, d)
            truth = slope_of(np.log(tau[k0 - 1:k1]), k0)
            for law in args.laws:
                for ratio in args.ratios:
                    n = int(round(ratio * d))
                    for s in range(args.first_seed, args.first_seed + seeds):
                        rng = np.random.default_rng([s, d, int(ratio * 10), args.laws.index(law), len(shape)])
                        X = rows(tau, n, law, rng)
                        rec = {"d": d, "n": n, "ratio": ratio, "law": law, "shape": shape, "seed": s, "truth": truth}
                        for route in ("analytic", "simulate"):
                            with warnings.catch_warnings():
                                warnings.simplefilter("ignore")
                                try:
                                    rep = spectra.fit(X, window=f"{k0}:{k1}", population=True, ci_seed=s,
                                                      population_route=route).to_dict()
                                except spectra.SpectraError as exc:
                                    rec[route] = {"error": str(exc)}
                                    continue
                            p = rep["fit"]["population"]
                            if p is None:
                                rec[route] = {"error": "; ".join(rep.get("warnings", []))[:300]}
                                continue
                            rec[route] = {"alpha": p["alpha"], "ci": p["ci"], "route": p["bootstrap"]["route"],
                                          "sd": p["bootstrap"]["sd"], "bias": p["bootstrap"]["bias"],
                                          "fits": (p.get("bend") or {}).get("fits", True),
                                          "seconds": rep["timings"]["population_s"],
                                          "naive": rep["fit"]["alpha"],
                                          "kappa": (p.get("rows") or {}).get("kappa")}
                        out.append(rec)
                        print(json.dumps(rec), flush=True)
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(out, fh)


def table(paths: list[str]) -> None:
    recs = [r for p in paths for r in json.load(open(p))]
    cells: dict[tuple, list] = defaultdict(list)
    for r in recs:
        cells[(r["d"], r["shape"], r["law"], r["ratio"])].append(r)
    print("| d | population | rows | n/d | samples | covered: theory | simulated | width: theory | simulated | "
          "median error: theory | simulated | naive | s: theory | simulated |")
    print("| ---: | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    tot = defaultdict(lambda: [0, 0])
    for key in sorted(cells):
        rs = cells[key]
        row = []
        for route in ("analytic", "simulate"):
            ok = [r for r in rs if "alpha" in r.get(route, {})]
            cov = sum(r[route]["ci"][0] <= r["truth"] <= r[route]["ci"][1] for r in ok)
            tot[route][0] += cov
            tot[route][1] += len(ok)
            row.append((cov, len(ok), np.mean([r[route]["ci"][1] - r[route]["ci"][0] for r in ok]) if ok else np.nan,
                        np.median([r[route]["alpha"] - r["truth"] for r in ok]) if ok else np.nan,
                        np.mean([r[route]["seconds"] for r in ok]) if ok else np.nan))
        naive = np.mean([r["analytic"]["naive"] - r["truth"] for r in rs if "naive" in r.get("analytic", {})])
        (ca, na, wa, ea, sa), (cs, ns, ws, es, ss) = row
        d, shape, law, ratio = key
        print(f"| {d} | {shape} | {law} | {ratio:g} | {len(rs)} | {ca}/{na} | {cs}/{ns} | {wa:.4f} | {ws:.4f} | "
              f"{ea:+.4f} | {es:+.4f} | {naive:+.4f} | {sa:.2f} | {ss:.2f} |")
    for route, (c, t) in tot.items():
        print(f"\n{route}: covered {c}/{t} ({c / max(t, 1):.1%})")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--d", type=int, nargs="+", default=[96, 256])
    ap.add_argument("--seeds", type=int, nargs="+", default=[16, 8])
    ap.add_argument("--ratios", type=float, nargs="+", default=[1, 2, 5])
    ap.add_argument("--first-seed", type=int, default=0, help="seeds from this one (more samples of the same cells)")
    ap.add_argument("--laws", nargs="+", default=["gaussian", "elliptical", "laplace"])
    ap.add_argument("--shapes", nargs="+", default=["power-0.5", "power-1", "power-1.5", "broken", "cutoff"])
    ap.add_argument("--json", help="write every record here")
    ap.add_argument("--table", nargs="+", help="print the table of these records instead")
    args = ap.parse_args()
    if args.table:
        table(args.table)
    else:
        run(args)


if __name__ == "__main__":
    main()
