"""The symmetric eigensolver in its halves, for a fit that needs every eigenvalue now and some leading eigenvectors
later (the grouped standard errors past :data:`~spectra_cli.analysis.uncertainty.ALL_VECTORS_D` features).

LAPACK's ``dsyevd`` without vectors, what ``numpy.linalg.eigvalsh`` calls, is two routines: ``dsytrd`` reduces the
matrix to tridiagonal form ``Q^T C Q = T`` (the cost: d^3 flops, half of them in memory-bound matrix-vector
products), then ``dsterf`` finds every eigenvalue of ``T`` (O(d^2)). Called here in the same library, they give the
same bits, and the reduction (``Q`` as Householder reflectors in the reduced matrix, ``T``'s diagonals) is kept: the
leading ``k`` eigenvectors are then ``dstemr``'s (MRRR: Dhillon & Parlett 2004) of ``T``, taken back through the
reflectors by ``dormtr`` (2 d^2 k flops). At d = 4,096, k = 409 on 2 cores the two took 0.6 s, where a second,
separate decomposition for them (``ssyevr``, float32) took 1.4-1.6 s.

The routines are NumPy's own OpenBLAS's (its wheels' ``scipy_openblas64_``: 64-bit integers, symbols
``scipy_LAPACKE_*64_``), found with ``threadpoolctl`` and called through ``ctypes``; where that library is not loaded
(another BLAS), :func:`eigvalsh_reduced` returns None and the caller decomposes as before.
"""

from __future__ import annotations

import ctypes
import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from spectra_cli.eigen.lapacke import LAYOUT_COLUMN_MAJOR, lookup_lock, openblas_handles
from spectra_cli.memory import fresh_array

#: The routines, by name in NumPy's OpenBLAS (``scipy_LAPACKE_<name>64_``).
ROUTINES = ("dsytrd", "dsterf", "dstemr", "dormtr")
#: ``dsyevd`` scales a matrix whose largest entry lies outside ``[sqrt(safmin / eps), sqrt(eps / safmin)]`` (about
#: 1e-146..1e146) before reducing it; these routines alone would not. Such matrices (and any within a factor of 1e6
#: of those bounds) are left to NumPy.
_SAFE = (math.sqrt(float(np.finfo(np.float64).tiny) / float(np.finfo(np.float64).eps)) * 1e6,
         math.sqrt(float(np.finfo(np.float64).eps) / float(np.finfo(np.float64).tiny)) / 1e6)
_found: dict[str, Any] = {}


def _routines() -> dict[str, Any] | None:
    """The four routines of NumPy's OpenBLAS with their argument types, or None (looked up once per process)."""
    with lookup_lock():
        if "done" in _found:
            return _found["routines"]
        routines: dict[str, Any] | None = None
        try:
            for handle in openblas_handles():
                fns = {name: getattr(handle, f"scipy_LAPACKE_{name}64_", None) for name in ROUTINES}
                if all(fn is not None for fn in fns.values()):
                    routines = fns
                    break
        except Exception:  # noqa: BLE001 - no such library or symbol: the caller decomposes as before
            routines = None
        if routines is not None:
            i64, dp = ctypes.c_int64, ctypes.POINTER(ctypes.c_double)
            ip, ch, f64 = ctypes.POINTER(ctypes.c_int64), ctypes.c_char, ctypes.c_double
            for fn in routines.values():
                fn.restype = i64
            routines["dsytrd"].argtypes = [ctypes.c_int, ch, i64, dp, i64, dp, dp, dp]
            routines["dsterf"].argtypes = [i64, dp, dp]
            routines["dstemr"].argtypes = [ctypes.c_int, ch, ch, i64, dp, dp, f64, f64, i64, i64, ip, dp, dp, i64,
                                           i64, ip, ip]
            routines["dormtr"].argtypes = [ctypes.c_int, ch, ch, ch, i64, i64, dp, i64, dp, dp, i64]
            if not _agrees(routines):
                routines = None
        _found.update(done=True, routines=routines)
        return routines


def _agrees(routines: dict[str, Any]) -> bool:
    """Whether the routines found are the ones NumPy's ``eigvalsh`` runs: the same bits on a matrix past the
    reduction's block size (another copy of the library, loaded first, would not be held to that)."""
    rng = np.random.default_rng(0)
    X = rng.standard_normal((100, 80))
    C = X.T @ X
    lam = _eigenvalues(routines, C, b"L")
    return lam is not None and bool(np.array_equal(lam[0], np.linalg.eigvalsh(C)))


def _ptr(a: np.ndarray) -> Any:
    return a.ctypes.data_as(ctypes.POINTER(ctypes.c_double))


@dataclass(frozen=True, eq=False)
class Reduction:
    """A symmetric matrix's tridiagonal reduction ``Q^T C Q = T``: ``reflectors`` (the reduced matrix, column-major,
    ``Q``'s Householder vectors in the triangle ``uplo`` names) with their scalars ``tau``, and ``T``'s diagonal and
    off-diagonal."""

    reflectors: np.ndarray
    tau: np.ndarray
    diagonal: np.ndarray
    off_diagonal: np.ndarray
    uplo: bytes

    @property
    def order(self) -> int:
        return int(self.diagonal.size)

    def leading(self, k: int) -> tuple[np.ndarray, np.ndarray] | None:
        """The ``k`` largest eigenvalues (descending) and their eigenvectors (the columns of a ``d x k`` array), or
        None where LAPACK reports a failure or finds fewer (the caller then decomposes again)."""
        routines = _routines()
        n = self.order
        k = min(int(k), n)
        if routines is None or k < 1:
            return None
        d, e = self.diagonal.copy(), self.off_diagonal.copy()  # (dstemr overwrites both)
        w = np.empty(n)
        Z = np.empty((n, k), order="F")
        found = ctypes.c_int64(0)
        support = np.empty(2 * k, dtype=np.int64)
        tryrac = ctypes.c_int64(1)
        info = routines["dstemr"](LAYOUT_COLUMN_MAJOR, b"V", b"I", n, _ptr(d), _ptr(e), 0.0, 0.0, n - k + 1, n,
                                  ctypes.byref(found), _ptr(w), _ptr(Z), n, k,
                                  support.ctypes.data_as(ctypes.POINTER(ctypes.c_int64)), ctypes.byref(tryrac))
        if info != 0 or found.value != k:
            return None
        info = routines["dormtr"](LAYOUT_COLUMN_MAJOR, b"L", self.uplo, b"N", n, k, _ptr(self.reflectors), n,
                                  _ptr(self.tau), _ptr(Z), n)
        if info != 0 or not (np.all(np.isfinite(w[:k])) and np.all(np.isfinite(Z))):
            return None
        return w[:k][::-1].copy(), np.ascontiguousarray(Z[:, ::-1])


def eigvalsh_reduced(C: np.ndarray, uplo: str = "L") -> tuple[np.ndarray, Reduction] | None:
    """Every eigenvalue of the symmetric ``C`` (ascending; the triangle ``uplo`` read), as ``eigvalsh`` gives them,
    with the reduction that found them (:meth:`Reduction.leading` takes vectors from it). None where the routines are
    missing, the matrix is not square, needs ``dsyevd``'s scaling, or LAPACK reports a failure. Runs on the threads
    its caller allows (:mod:`spectra_cli.threads`)."""
    routines = _routines()
    n = int(C.shape[0]) if C.ndim == 2 else 0
    if routines is None or n < 2 or C.shape[1] != n:
        return None
    top = max(float(np.max(C)), -float(np.min(C)))  # (dsyevd's scaling reads the largest entry: no copy of |C|)
    if not _SAFE[0] < top < _SAFE[1]:
        return None
    return _eigenvalues(routines, C, b"U" if uplo == "U" else b"L")


def _eigenvalues(routines: dict[str, Any], C: np.ndarray, side: bytes) -> tuple[np.ndarray, Reduction] | None:
    """``dsytrd`` then ``dsterf`` on a column-major copy of ``C`` (the triangle ``side``): the eigenvalues and the
    reduction, or None where LAPACK reports a failure."""
    n = int(C.shape[0])
    a = fresh_array((n, n), order="F")  # (column-major, as NumPy's eigvalsh lays out its copy)
    a[...] = C
    d, e, tau = np.empty(n), np.zeros(n), np.zeros(n)  # (LAPACK sets n - 1 of e and tau)
    if routines["dsytrd"](LAYOUT_COLUMN_MAJOR, side, n, _ptr(a), n, _ptr(d), _ptr(e), _ptr(tau)) != 0:
        return None
    lam, off = d.copy(), e.copy()
    if routines["dsterf"](n, _ptr(lam), _ptr(off)) != 0 or not np.all(np.isfinite(lam)):
        return None
    return lam, Reduction(a, tau, d, e, side)
