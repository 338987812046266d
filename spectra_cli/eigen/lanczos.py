"""The leading eigenvalues of a dense symmetric matrix, without the full decomposition.

The full decomposition is LAPACK's ``?syevd`` (NumPy's ``eigvalsh``), or its two-stage ``?syevd_2stage`` from
order 3,072 on one thread (:mod:`spectra_cli.eigen.two_stage`): on two threads the two-stage driver's sequential
band-to-tridiagonal stage loses (median 1.10x at d = 4,096, 0.83x at 8,192), on one it wins (2x at 8,192).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

#: Relative error bound at which the leading eigenvalues are accepted (the issue asks 1e-10).
TOP_TOLERANCE = 1e-12


@dataclass(frozen=True, slots=True)
class TopEigenvalues:
    """The leading ``k`` eigenvalues of a symmetric matrix from a block Krylov subspace.

    Attributes:
        values: descending, length k.
        bounds: an error bound of each value (absolute): ``min(|r|, |r|^2 / gap)`` of its Ritz
            pair's residual ``r`` and the gap to the neighbouring Ritz values less their residuals,
            taken over clusters (Kahan-Parlett-Jiang); rounding error (the numerical floor) is not in it.
        dimension: the Krylov subspace's dimension; block: its block size; seed: of the start block.
    """

    values: np.ndarray
    bounds: np.ndarray
    dimension: int
    block: int
    seed: int

    @property
    def max_relative_bound(self) -> float:
        top = np.maximum(np.abs(self.values), 1e-300)
        return float(np.max(self.bounds / top)) if self.values.size else 0.0


def _band_top(T: np.ndarray, m: int, b: int, count: int) -> np.ndarray:
    """The largest ``count`` eigenvalues of T[:m, :m]'s band (block Lanczos' block tridiagonal
    matrix), descending: a cheap monitor, O(m^2 b)."""
    import scipy.linalg

    band = np.zeros((b + 1, m))
    for j in range(b + 1):
        band[j, :m - j] = np.diagonal(T[:m, :m], -j)
    vals = scipy.linalg.eig_banded(band, lower=True, eigvals_only=True, select="i",
                                   select_range=(m - count, m - 1))
    return np.asarray(vals)[::-1]


def _cluster_bounds(theta: np.ndarray, res: np.ndarray) -> np.ndarray:
    """Error bounds of Ritz values (descending) from their residual norms.

    Ritz values closer than the sum of their residuals form a cluster; a cluster's residual is
    the root of its members' squared residuals, and its gap the distance to the nearest Ritz value
    outside it less that value's residual. Each member's bound is ``min(R, R^2 / gap)``
    (the quadratic residual bound of a Rayleigh-Ritz cluster; the linear one where the gap closes)."""
    n = theta.size
    bounds = np.empty(n)
    start = 0
    while start < n:
        end = start + 1
        while end < n and theta[end - 1] - theta[end] <= res[end - 1] + res[end]:
            end += 1
        r = float(np.sqrt(np.sum(res[start:end] ** 2)))
        gaps = []
        if start > 0:
            gaps.append(theta[start - 1] - res[start - 1] - theta[start])
        if end < n:
            gaps.append(theta[end - 1] - theta[end] - res[end])
        gap = min(gaps) if gaps else np.inf
        bounds[start:end] = min(r, r * r / gap) if gap > 0 else r
        start = end
    return bounds


def top_eigenvalues(C: np.ndarray, k: int, *, tolerance: float = TOP_TOLERANCE, block: int | None = None,
                    seed: int = 0) -> TopEigenvalues | None:
    """The leading ``k`` eigenvalues of the symmetric ``C`` by block Lanczos with full
    reorthogonalisation (a block Krylov subspace, Golub & Underwood 1977; Musco & Musco 2015).

    Each step multiplies ``C`` by one block (level-3 BLAS), orthogonalises the product twice
    against the whole basis (CGS2), and extends the block tridiagonal projection ``T``. Every few
    steps the band of ``T`` gives the leading Ritz values cheaply; once they stop moving (to 1e-2 of
    the tolerance), the Rayleigh-Ritz pairs of ``T`` give residuals and error bounds
    (:func:`_cluster_bounds`), and the values are returned when every bound is within
    ``tolerance`` of its value or within ``d * eps * theta_1`` (the numerical floor's scale, below
    which rounding dominates and eigenvalues count as zero).
    None when the subspace reaches its cap (``8 k + 16 b``, ``d / 2 + 16 b`` or ``d - b``) first: the caller falls
    back to the full decomposition. ``C`` is not modified.
    """
    from spectra_cli import threads

    d = C.shape[0]
    # Each step's products (C times a block, the projections on the basis) are level-3 BLAS of at least
    # 2 d^2 b flops: on the threads the policy gives them (a library call's other BLAS runs on one)
    with threads.blas(2.0 * d * d * (block or _block_size(d))):
        return _top_eigenvalues(C, k, tolerance=tolerance, block=block, seed=seed)


def _block_size(d: int) -> int:
    return 16 if d < 8192 else 32


def _top_eigenvalues(C: np.ndarray, k: int, *, tolerance: float = TOP_TOLERANCE, block: int | None = None,
                    seed: int = 0) -> TopEigenvalues | None:
    """:func:`top_eigenvalues`, on the threads its caller set."""
    import scipy.linalg

    d = C.shape[0]
    b = block or _block_size(d)
    want = k + b  # Ritz values beyond k give the gap of the k-th
    cap = min(d - b, 8 * k + 16 * b, d // 2 + 16 * b)  # basis + projection stay within 3/4 d^2 floats
    if want + b > cap:
        return None
    rng = np.random.default_rng(seed)
    V = np.empty((d, cap + b))
    T = np.zeros((cap + b, cap + b))
    V[:, :b], _ = np.linalg.qr(rng.standard_normal((d, b)))
    m = b
    every = max(1, (k // 4) // b)  # steps between checks: about k/4 columns
    start = max(want, (5 * k) // 2)  # power-law spectra converge near 3k (measured at d = 4,096 and 8,192)
    step = 0
    prev: np.ndarray | None = None
    eps = float(np.finfo(np.float64).eps)
    from spectra_cli.stages import stage

    tick = stage(f"Lanczos: leading {k} eigenvalues (basis columns, at most)", cap)
    while m + b <= cap:
        Z = C @ V[:, m - b:m]
        H = V[:, :m].T @ Z
        Z -= V[:, :m] @ H
        H2 = V[:, :m].T @ Z
        Z -= V[:, :m] @ H2
        H += H2
        Q, R = np.linalg.qr(Z)
        piv = np.arange(b)
        scale_r = max(float(np.max(np.abs(R))), float(np.max(np.abs(H))), 1e-300)
        if np.any(np.abs(np.diag(R)) <= 1e-10 * scale_r):  # rank-deficient: pivot, then replace
            Q, R, piv = scipy.linalg.qr(Z, mode="economic", pivoting=True)
        small = np.abs(np.diag(R)) <= 1e-10 * scale_r
        if np.any(small):  # the subspace is (nearly) invariant: continue with fresh directions
            R[small, :] = 0.0
            fresh = rng.standard_normal((d, int(small.sum())))
            for _ in range(2):
                fresh -= V[:, :m] @ (V[:, :m].T @ fresh)
                fresh -= Q[:, ~small] @ (Q[:, ~small].T @ fresh)
            Q[:, small], _ = np.linalg.qr(fresh)
        T[:m, m - b:m] = H
        T[m:m + b, m - b + piv] = R  # Z[:, piv] = Q R, so Z = Q R P^T
        V[:, m:m + b] = Q
        m += b
        step += 1
        tick(m)
        if m - b < start or step % every:
            continue
        theta = _band_top(T, m - b, b, want)
        floor = d * eps * abs(float(theta[0]))
        if prev is None or np.any(np.abs(theta - prev)[:k] > np.maximum(1e-2 * tolerance * np.abs(theta[:k]), floor)):
            prev = theta
            continue
        found = _rayleigh_ritz(T, m - b, b, k, want, d, tolerance, seed)
        if found is not None:
            return found
        prev = theta
    return _rayleigh_ritz(T, m - b, b, k, want, d, tolerance, seed) if m - b >= want else None


def _rayleigh_ritz(T: np.ndarray, mm: int, b: int, k: int, want: int, d: int, tolerance: float,
                   seed: int) -> TopEigenvalues | None:
    """The leading Ritz values of the projection ``T[:mm, :mm]``, when all k are within tolerance.

    The residual of a Ritz pair ``(theta, V y)`` is ``R y_last`` (the next block's coefficients
    times the last block of y), by the block Lanczos relation ``C V = V T + Q R E^T``."""
    import scipy.linalg

    Ts = T[:mm, :mm]
    Ts = (Ts + Ts.T) * 0.5
    vals, Y = scipy.linalg.eigh(Ts, subset_by_index=[mm - want, mm - 1], driver="evr")
    vals, Y = vals[::-1], Y[:, ::-1]
    res = np.linalg.norm(T[mm:mm + b, mm - b:mm] @ Y[mm - b:mm, :], axis=0)
    bounds = _cluster_bounds(vals, res)[:k]
    floor = d * float(np.finfo(np.float64).eps) * abs(float(vals[0]))
    if np.all(bounds <= np.maximum(tolerance * np.abs(vals[:k]), floor)):
        return TopEigenvalues(vals[:k].copy(), bounds, mm, b, seed)
    return None
