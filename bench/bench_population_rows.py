"""Why layer 1's subsamples spread their spectrum less than the row model says (issue 19's diagnosis): the
slope over ranks 11..100 of n = MULT d rows rebuilt six ways from the all-rows eigenbasis, 6 draws each —
rows drawn from the data (without and with replacement), Gaussian rows of the all-rows spectrum, independent
coordinates with each principal component's own values, Gaussian directions with the rows' own norms, and the
rows' own principal-component magnitudes with random signs. Needs ../shared/data (not in the repository).

    OPENBLAS_NUM_THREADS=2 python bench/bench_population_rows.py ../shared/data/minilm_layer1_tokens_20k_f16.npy 2
"""

import sys

import numpy as np

K0, K1 = 11, 100


def slope(lam: np.ndarray) -> float:
    x = np.log(np.arange(K0, K1 + 1))
    y = np.log(lam[K0 - 1:K1])
    xc = x - x.mean()
    return float(-(xc @ (y - y.mean())) / (xc @ xc))


def spectrum(Z: np.ndarray) -> np.ndarray:
    Z = Z - Z.mean(0)
    return np.linalg.eigvalsh(Z.T @ Z / (len(Z) - 1))[::-1]


def main() -> None:
    X = np.load(sys.argv[1]).astype(np.float64)
    X = X.reshape(-1, X.shape[-1])
    n, d = X.shape
    Y = X - X.mean(0)
    ev, V = np.linalg.eigh(Y.T @ Y / (n - 1))
    ev, V = ev[::-1], V[:, ::-1]
    S = Y @ V  # principal-component scores
    norms = (Y ** 2).sum(1)
    rng = np.random.default_rng(0)
    m = int(sys.argv[2]) * d
    print(f"all {n} rows: slope {slope(ev):.4f}; subsamples of {m} rows, 6 draws each (mean, sd):")
    res: dict[str, list[float]] = {k: [] for k in ("data rows", "data rows, with replacement", "Gaussian rows",
                                                   "independent coordinates", "Gaussian directions, own norms",
                                                   "own magnitudes, random signs")}
    for _ in range(6):
        res["data rows"].append(slope(spectrum(Y[rng.choice(n, m, replace=False)])))
        res["data rows, with replacement"].append(slope(spectrum(Y[rng.choice(n, m, replace=True)])))
        res["Gaussian rows"].append(slope(spectrum(rng.standard_normal((m, d)) * np.sqrt(ev))))
        res["independent coordinates"].append(
            slope(spectrum(np.stack([S[rng.integers(0, n, m), j] for j in range(d)], 1))))
        G = rng.standard_normal((m, d)) * np.sqrt(ev)
        res["Gaussian directions, own norms"].append(
            slope(spectrum(G * np.sqrt(norms[rng.integers(0, n, m)] / (G ** 2).sum(1))[:, None])))
        res["own magnitudes, random signs"].append(
            slope(spectrum(S[rng.integers(0, n, m)] * rng.choice([-1, 1], size=(m, d)))))
    for k, v in res.items():
        print(f"  {k}: {np.mean(v):.4f} ({np.std(v):.4f})")


if __name__ == "__main__":
    main()
