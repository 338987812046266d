"""Can the data tell heavy-tailed coordinates from row scales? A measurement for issue 51's Laplace rows.

The analytic interval of ``--population`` misses on Laplace rows (independent coordinates of excess kurtosis
kappa = 3 in the population's eigenbasis): the theorem's fourth-cumulant term widens the slope's spread 1.5x, and
neither the row model nor the pass knows kappa. The norms alone cannot tell it from row scales (``x = sqrt(s)
Sigma^(1/2) z``): ``E|x|^4 / (E|x|^2)^2 = m2 (1 + (2 + kappa) t2)`` with ``m2 = E[s^2] / E[s]^2`` and ``t2 =
tr Sigma^2 / (tr Sigma)^2``. The rows' projections on the leading sample eigenvectors add a second equation: their
kurtosis is ``m2 (3 + kappa)`` where the eigenvectors are the population's (at small n/d they mix population
directions, which shrinks kappa's part). Solved together (a method of moments)::

    kappa = ((3 + k) (1 + 2 t2) - 3 (1 + v)) / ((1 + v) - (3 + k) t2),   m2 = (1 + v) / (1 + (2 + kappa) t2)

(``k``: the projections' mean excess kurtosis over the leading 5 directions; ``v``: the squared norms' squared
coefficient of variation; ``t2`` from the fit's row model). Rows as in ``bench_population_theory.py`` (Gaussian;
elliptical, ``s ~ Gamma(1, 1)``, m2 = 2; Laplace, kappa = 3), ``j^-1`` in a Haar rotation, centred.

    OPENBLAS_NUM_THREADS=1 python bench/bench_kappa.py --d 256 1024 --ratios 2 5 --seeds 3
    OPENBLAS_NUM_THREADS=1 python bench/bench_kappa.py --real ../shared/data/minilm_layer*_tokens_*.npy
"""

from __future__ import annotations

import argparse
import warnings

import numpy as np

import spectra_cli as spectra


def rows(d: int, n: int, law: str, rng: np.random.Generator) -> np.ndarray:
    q, r = np.linalg.qr(rng.standard_normal((d, d)))
    q *= np.sign(np.diag(r))
    tau = np.arange(1, d + 1, dtype=np.float64) ** -1.0
    z = rng.laplace(size=(n, d)) / np.sqrt(2.0) if law == "laplace" else rng.standard_normal((n, d))
    if law == "elliptical":
        z *= np.sqrt(rng.gamma(1.0, 1.0, size=n))[:, None]
    return (z * np.sqrt(tau)) @ q.T


def joint(Xc: np.ndarray, t2: float, top: int) -> tuple[float, float, float, float]:
    """``(k, v, kappa, m2)`` of the centred rows ``Xc``: the leading ``top`` projections' mean excess kurtosis, the
    squared norms' squared coefficient of variation, and the two solved together (the module docstring)."""
    _, vectors = np.linalg.eigh(Xc.T @ Xc)
    Y = Xc @ vectors[:, ::-1][:, :top]
    k = float(np.mean((Y ** 4).mean(axis=0) / (Y ** 2).mean(axis=0) ** 2) - 3.0)
    sq = (Xc * Xc).sum(axis=1)
    v = float(sq.var() / sq.mean() ** 2)
    kappa = ((3 + k) * (1 + 2 * t2) - 3 * (1 + v)) / ((1 + v) - (3 + k) * t2)
    return k, v, kappa, (1 + v) / (1 + (2 + kappa) * t2)


def jackknife_se(Xc: np.ndarray, t2: float, top: int, groups: int = 16) -> float:
    """The grouped jackknife standard error of the joint kappa: runs of consecutive rows left out in turn (the
    standard errors' own design)."""
    label = np.arange(len(Xc)) * groups // len(Xc)
    values = np.array([joint(Xc[label != g], t2, top)[2] for g in range(groups)])
    return float(np.sqrt((groups - 1) * np.mean((values - values.mean()) ** 2)))


def real(paths: list[str], top: int) -> None:
    """The estimator and its jackknife standard error on real activations: all rows and a random 768."""
    print("| data | rows | k | v | row model's m2 alone | kappa (joint) | its jackknife SE | m2 (joint) |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for path in paths:
        X = np.load(path).astype(np.float64)
        if X.ndim != 2:
            continue
        for n in (768, len(X)):
            Xs = X[np.sort(np.random.default_rng(0).permutation(len(X))[:n])] if n < len(X) else X
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                pop = spectra.fit(Xs, population=True).fit.population
            t2 = pop.scales["t2"]
            Xc = Xs - Xs.mean(axis=0)
            k, v, kappa, m2 = joint(Xc, t2, top)
            m2_model = 1 + pop.scales.get("cv2_scales", 0.0)
            print(f"| {path.split('/')[-1]} | {n:,} | {k:.2f} | {v:.3f} | {m2_model:.3f} | {kappa:.2f} | "
                  f"{jackknife_se(Xc, t2, top):.2f} | {m2:.2f} |", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--d", type=int, nargs="+", default=[256, 1024])
    ap.add_argument("--ratios", type=float, nargs="+", default=[2.0, 5.0])
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--top", type=int, default=5)
    ap.add_argument("--real", nargs="*", default=[], help="real activations (.npy) instead: the estimator on them")
    a = ap.parse_args()
    if a.real:
        real(a.real, a.top)
        return
    truth = {"gaussian": (0.0, 1.0), "laplace": (3.0, 1.0), "elliptical": (0.0, 2.0)}
    print("| d | n/d | rows | kappa, m2 (truth) | projections' excess kurtosis k | norms' v | row model's m2 alone | "
          "kappa (joint) | m2 (joint) |")
    print("| ---: | ---: | --- | --- | ---: | ---: | ---: | ---: | ---: |")
    for d in a.d:
        for ratio in a.ratios:
            for law in ("gaussian", "laplace", "elliptical"):
                got = []
                for seed in range(a.seeds):
                    X = rows(d, int(ratio * d), law, np.random.default_rng(seed))
                    with warnings.catch_warnings():
                        warnings.simplefilter("ignore")
                        pop = spectra.fit(X, window=f"5:{max(20, d // 10)}", population=True).fit.population
                    t2, m2_model = pop.scales["t2"], 1.0 + pop.scales["cv2_scales"]
                    k, v, kappa, m2 = joint(X - X.mean(axis=0), t2, a.top)
                    got.append((k, v, m2_model, kappa, m2))
                k, v, m2_model, kappa, m2 = np.mean(got, axis=0)
                print(f"| {d} | {ratio:g} | {law} | {truth[law][0]:g}, {truth[law][1]:g} | {k:.2f} | {v:.3f} | "
                      f"{m2_model:.3f} | {kappa:.2f} | {m2:.2f} |", flush=True)


if __name__ == "__main__":
    main()
