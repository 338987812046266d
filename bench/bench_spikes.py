"""Planted spikes: which ones `fit --spikes` lists, how often a bulk without spikes lists one, and the cost.

A bulk ``tau_j = j^-alpha`` (alpha 0: isotropic; alpha 1: a power law) on shuffled coordinates, d = 384
and n/d = 1, 4, 10, with three spikes planted above the bulk's BBP threshold (8, 5 and 3 times it) and
two below (0.7 and 0.5 times), each on one coordinate. For each shape it prints, over ``--seeds`` samples:
how often each planted spike is listed, how often more than the three are (a false spike), whether the
listed features are the planted coordinates, and how often a bulk with no spike lists any (at the
default level 1e-3 and at 0.05, to show how conservative the Tracy-Widom centring is on each bulk).
Then the cost of the test (``timings.spikes_s``) against the whole fit.

    python bench/bench_spikes.py              # 20 seeds
    python bench/bench_spikes.py --seeds 5
"""

from __future__ import annotations

import argparse
import time
import warnings

import numpy as np

import spectra_cli as spectra
from spectra_cli.analysis.spikes import bulk_edge, find_spikes

D = 384
ABOVE, BELOW = (8.0, 5.0, 3.0), (0.7, 0.5)
COORDS = (11, 97, 203, 250, 333)


def sample(alpha: float, n: int, seed: int, planted: bool) -> np.ndarray:
    rng = np.random.default_rng(seed)
    tau = np.arange(1, D + 1, dtype=np.float64) ** -alpha
    thr = bulk_edge(tau, n - 1).threshold
    pop = tau[rng.permutation(D)]
    if planted:
        for c, f in zip(COORDS, (*ABOVE, *BELOW), strict=True):
            pop[c] = f * thr
    return rng.standard_normal((n, D)) * np.sqrt(pop)


def study(alpha: float, ratio: int, seeds: int) -> None:
    n = D * ratio
    found = np.zeros(len(ABOVE))
    extra = features = null_strict = null_loose = 0
    seconds = []
    for seed in range(seeds):
        X = sample(alpha, n, seed, True)
        C = np.cov(X.T)
        lam, V = np.linalg.eigh(C)
        lam, V = lam[::-1], V[:, ::-1]
        t = time.perf_counter()
        s = find_spikes(lam, n=n - 1, window=(11, D // 10), vectors=lambda k, V=V: V[:, :k])
        seconds.append(time.perf_counter() - t)
        listed = [sp.features[0] for sp in s.spikes]
        found += [c in listed for c in COORDS[:3]]
        extra += len(listed) > 3
        features += listed[:3] == list(COORDS[:3])
        Y = sample(alpha, n, 10_000 + seed, False)
        mu = np.linalg.eigvalsh(np.cov(Y.T))[::-1]
        null_strict += (find_spikes(mu, n=n - 1, window=(11, D // 10)).count or 0) > 0
        null_loose += (find_spikes(mu, n=n - 1, window=(11, D // 10), level=0.05).count or 0) > 0
    print(f"alpha {alpha:g}  n/d {ratio:>2}  found {' '.join(f'{x / seeds:4.0%}' for x in found)}  "
          f"features right {features / seeds:4.0%}  more than 3 {extra / seeds:4.0%}  "
          f"null lists one: {null_strict / seeds:4.0%} (1e-3), {null_loose / seeds:4.0%} (0.05)  "
          f"test {np.median(seconds):.2f} s")


def cost() -> None:
    rng = np.random.default_rng(0)
    for n, d in ((4096, 384), (8192, 1024)):
        X = rng.standard_normal((n, d)) * np.arange(1, d + 1) ** -0.5
        spectra.fit(X)  # warm the imports
        t = time.perf_counter()
        plain = spectra.fit(X)
        t_plain = time.perf_counter() - t
        rep = spectra.fit(X, spikes=True)
        print(f"cost at n={n}, d={d}: the test {rep.timings['spikes_s']:.2f} s, a plain fit {t_plain:.2f} s "
              f"({plain.fit.alpha:.3f})")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=20)
    args = ap.parse_args()
    warnings.simplefilter("ignore")
    print(f"d = {D}; planted above the BBP threshold x {ABOVE} on {COORDS[:3]}, below x {BELOW}; level 1e-3")
    for alpha in (0.0, 1.0):
        for ratio in (1, 4, 10):
            study(alpha, ratio, args.seeds)
    cost()


if __name__ == "__main__":
    main()
