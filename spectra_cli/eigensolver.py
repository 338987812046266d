"""Eigenvalues (only) of a dense symmetric matrix.

Wide matrices (d >= TWO_STAGE_MIN_D) use LAPACK's two-stage reduction ``dsyevd_2stage`` (dense to
band with level-3 BLAS, then band to tridiagonal), which LAPACK offers for eigenvalues only. numpy's
``eigvalsh`` calls ``dsyevd``, whose one-stage reduction does half its flops as matrix-vector
products and is memory-bound: on 2 cores the two-stage driver took 52.6 s against 90.5 s at
d = 8,192 and 6.5 s against 8.2 s at d = 4,096, with the same eigenvalues to 7e-16 of the
largest. Below that width it is slower (0.18 s against 0.11 s at d = 1,024).

The driver is called in the LAPACK that numpy itself loaded (found with threadpoolctl, a core
dependency), through its LAPACKE symbol; the integer width comes from the symbol's ``64_`` suffix
or from OpenBLAS's own build configuration. Where no such symbol exists (another BLAS, an older
OpenBLAS), or it reports an error, numpy's ``eigvalsh`` is used; :func:`solver_name` says which.
"""

from __future__ import annotations

import ctypes
import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

#: Two-stage reduction from this width up (below it the one-stage driver is faster).
TWO_STAGE_MIN_D = 2500
LAPACK_COL_MAJOR = 102

TWO_STAGE = "LAPACK dsyevd_2stage (two-stage tridiagonal reduction), eigenvalues only"
ONE_STAGE = "numpy.linalg.eigvalsh (LAPACK dsyevd)"

_Driver = Callable[[np.ndarray], "np.ndarray | None"]


def _driver_in(path: str) -> _Driver | None:
    try:
        lib = ctypes.CDLL(path)
    except OSError:
        return None
    for prefix in ("scipy_", ""):
        for suffix in ("64_", ""):
            func = getattr(lib, f"{prefix}LAPACKE_dsyevd_2stage{suffix}", None)
            if func is None:
                continue
            if suffix:
                int_t: type = ctypes.c_int64
            else:
                config = getattr(lib, f"{prefix}openblas_get_config", None)
                if config is None:
                    continue
                config.restype = ctypes.c_char_p
                int_t = ctypes.c_int64 if b"USE64BITINT" in (config() or b"") else ctypes.c_int32
            func.restype = int_t
            func.argtypes = [ctypes.c_int, ctypes.c_char, ctypes.c_char, int_t, ctypes.c_void_p, int_t,
                             ctypes.c_void_p]

            def call(a: np.ndarray, func: Any = func) -> np.ndarray | None:
                """Ascending eigenvalues (``a`` is overwritten), or None when LAPACK reports an error.

                ``a`` is C-contiguous and symmetric: read as column-major it is ``a.T``, whose upper
                triangle is ``a``'s lower one, the triangle numpy's eigvalsh (UPLO='L') reads."""
                n = a.shape[0]
                w = np.empty(n)
                info = int(func(LAPACK_COL_MAJOR, b"N", b"U", n, a.ctypes.data, max(n, 1), w.ctypes.data))
                return w if info == 0 else None

            return call
    return None


@functools.cache
def _two_stage() -> _Driver | None:
    """The two-stage driver of numpy's own LAPACK, checked once on a matrix with known eigenvalues."""
    try:
        from threadpoolctl import threadpool_info

        paths = [i["filepath"] for i in threadpool_info() if i.get("internal_api") == "openblas"]
    except Exception:  # noqa: BLE001 - any failure to inspect the BLAS means: use numpy's driver
        return None
    for path in paths:
        driver = _driver_in(path)
        if driver is None:
            continue
        q, _ = np.linalg.qr(np.random.default_rng(0).standard_normal((7, 7)))
        known = np.arange(1.0, 8.0)
        a = np.ascontiguousarray((q * known) @ q.T)
        a = (a + a.T) * 0.5
        w = driver(a)
        if w is not None and np.allclose(w, known, rtol=0, atol=1e-12):
            return driver
    return None


def solver_name(d: int) -> str:
    """The solver :func:`eigvalsh` uses for a d x d matrix."""
    return TWO_STAGE if d >= TWO_STAGE_MIN_D and _two_stage() is not None else ONE_STAGE


def eigvalsh(a: np.ndarray, *, overwrite: bool = False) -> np.ndarray:
    """Ascending eigenvalues of the symmetric float64 matrix ``a`` (its lower triangle is read).

    ``overwrite=True`` lets the two-stage driver work in ``a`` itself (saving a d x d copy)."""
    d = a.shape[0]
    driver = _two_stage() if d >= TWO_STAGE_MIN_D else None
    if driver is None:
        return np.linalg.eigvalsh(a)
    in_place = overwrite and a.flags.c_contiguous and a.flags.writeable and a.dtype == np.float64
    w = driver(a if in_place else np.array(a, dtype=np.float64, order="C"))
    if w is None:  # LAPACK's convergence failure, as numpy reports its own
        raise np.linalg.LinAlgError("Eigenvalues did not converge (LAPACK dsyevd_2stage)")
    return w


# --- the leading eigenvalues only -------------------------------------------------------------

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
    import scipy.linalg

    d = C.shape[0]
    b = block or (16 if d < 8192 else 32)
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
