"""The peers spectra is measured against, one per subcommand, each run as its own process.

Each loads the .npy, computes the covariance eigenvalues its own way, and saves them
(descending) to OUT.npy so the driver can compare them with the float64 reference.

    python bench/peers.py numpy|sklearn-covariance-eigh|sklearn-full|ipca|reference IN.npy OUT.npy
"""

from __future__ import annotations

import sys

import numpy as np


def main() -> None:
    which, src, out = sys.argv[1:4]
    if which == "numpy":
        X = np.load(src)
        lam = np.linalg.eigvalsh(np.cov(X, rowvar=False))[::-1]
    elif which == "sklearn-covariance-eigh":
        from sklearn.decomposition import PCA

        X = np.load(src)
        lam = PCA(svd_solver="covariance_eigh").fit(X).explained_variance_
    elif which == "sklearn-full":
        from sklearn.decomposition import PCA

        X = np.load(src)
        lam = PCA(svd_solver="full").fit(X).explained_variance_
    elif which == "ipca":
        from sklearn.decomposition import IncrementalPCA

        X = np.load(src, mmap_mode="r")
        lam = IncrementalPCA(batch_size=8192).fit(X).explained_variance_
    elif which == "reference":
        # Two-pass float64: exact mean first, then the centred product.
        X = np.load(src).astype(np.float64)
        X -= X.mean(axis=0)
        lam = np.linalg.eigvalsh(X.T @ X / (len(X) - 1))[::-1]
    elif which == "floor":
        # The bare arithmetic: X^T X in float32 on the loaded array, timed in-process.
        import time

        X = np.load(src)
        t = time.perf_counter()
        X.T @ X
        print(f"{time.perf_counter() - t:.4f}")
        return
    else:
        raise SystemExit(f"unknown peer {which}")
    np.save(out, np.asarray(lam, dtype=np.float64))


if __name__ == "__main__":
    main()
