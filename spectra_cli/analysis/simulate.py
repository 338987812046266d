"""Samples simulated from a population spectrum: the parametric bootstrap of the population exponent and the
sampling curve's scatter (:mod:`spectra_cli.analysis.population`). ``Sigma`` is taken diagonal: the
spectrum does not depend on the rotation.
"""

from __future__ import annotations

import numpy as np

from spectra_cli.eigen.decomposition import eigvalsh_checked

#: Simulated rows and their products are float32 (half the time of float64); their Gram matrices are decomposed
#: in float64. A float32 product's rounding is relative to each entry's scale (about 6e-8 sqrt(n)): far below the
#: scatter of a simulated sample, which is what the simulations measure.
SIMULATION_DTYPE = np.float32


def simulated_rows(tau: np.ndarray, n: int, rng: np.random.Generator,
                   scales: tuple[np.ndarray, np.ndarray] | None) -> np.ndarray:
    """``n`` rows ``sqrt(w_i) tau^(1/2) z_i`` (``Sigma`` diagonal: the spectrum does not depend on the rotation), in
    float32 (:data:`SIMULATION_DTYPE`)."""
    Z = rng.standard_normal((n, tau.size), dtype=SIMULATION_DTYPE)
    Z *= np.sqrt(tau).astype(SIMULATION_DTYPE)
    if scales is not None:
        Z *= np.sqrt(rng.choice(scales[0], size=n, p=scales[1])).astype(SIMULATION_DTYPE)[:, None]
    return Z


def _gram(Z: np.ndarray, rows: np.ndarray | slice = slice(None)) -> np.ndarray:
    """``Z^T Z`` (``Z`` the rows ``rows``) in float64 from the rows' precision: a float32 product's rounding is
    relative to each entry's own scale (``~ 6e-8 sqrt(n)``), far below a simulated sample's own scatter."""
    from spectra_cli import threads

    A = Z[rows]
    with threads.blas(2.0 * A.shape[0] * A.shape[1] ** 2):
        return (A.T @ A).astype(np.float64)


def _gram_spectrum(Z: np.ndarray, denom: float) -> np.ndarray:
    """The eigenvalues (descending, length d) of ``Z^T Z / denom``, by the smaller Gram matrix (formed in ``Z``'s
    precision, decomposed in float64)."""
    from spectra_cli import threads

    n, d = Z.shape
    if n < d:
        with threads.blas(2.0 * n * n * d):
            G = (Z @ Z.T).astype(np.float64)
    else:
        G = _gram(Z)
    ev = eigvalsh_checked(G, "a simulated sample's Gram matrix")[::-1] / denom
    out = np.zeros(d)
    out[:ev.size] = ev
    return out


def partition_spectra(Z: np.ndarray, part: np.ndarray, parts: int) -> list[np.ndarray]:
    """The covariance spectra (ddof 1, descending, length d) of the rows ``Z`` and of each sub-sample that leaves
    out the rows of one part (``part``: each row's part, ``0..parts-1``), from one Gram matrix: with more rows
    than features the parts' ``d x d`` products are summed (each sub-sample the total less its part), else each
    sub-sample's ``n x n`` Gram matrix is a principal block of the whole one; centred by the sums."""
    from spectra_cli import threads

    n, d = Z.shape
    out = []
    if n >= d:
        P = [_gram(Z, part == q) for q in range(parts)]
        S = [Z[part == q].sum(axis=0, dtype=np.float64) for q in range(parts)]
        N = [int(np.count_nonzero(part == q)) for q in range(parts)]
        total, s_all = sum(P), sum(S)
        for q in (None, *range(parts)):
            M, s_, m = (total, s_all, n) if q is None else (total - P[q], s_all - S[q], n - N[q])
            C = (M - np.outer(s_, s_) / m) / (m - 1)
            out.append(eigvalsh_checked(C, "a simulated sample's covariance")[::-1])
        return out
    with threads.blas(2.0 * n * n * d):
        K = (Z @ Z.T).astype(np.float64)
    for q in (None, *range(parts)):
        idx = np.arange(n) if q is None else np.flatnonzero(part != q)
        Kq = K[np.ix_(idx, idx)]
        r = Kq.mean(axis=0)
        Kc = Kq - r[:, None] - r[None, :] + r.mean()  # H K H: the Gram matrix of the centred rows
        ev = eigvalsh_checked(Kc, "a simulated sample's Gram matrix")[::-1] / (idx.size - 1)
        v = np.zeros(d)
        v[:ev.size] = ev
        out.append(v)
    return out


def simulated_spectrum(tau: np.ndarray, n: int, rng: np.random.Generator,
                       scales: tuple[np.ndarray, np.ndarray] | None) -> np.ndarray:
    """The eigenvalues (descending, length d) of ``X^T X / n`` for ``n`` rows ``sqrt(w_i) tau^(1/2) z_i``
    (``Sigma`` diagonal: the spectrum does not depend on the rotation), by the smaller Gram matrix."""
    return _gram_spectrum(simulated_rows(tau, n, rng, scales), float(n))
