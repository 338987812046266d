"""The float32 eigendecomposition with vectors through LAPACK's ssyevd in NumPy's own OpenBLAS (ctypes): the same
eigenpairs as NumPy's ``eigh`` within float32's rounding, the lower triangle read, and None (NumPy's ``eigh`` then)
where no library has the routine."""

from __future__ import annotations

import numpy as np
import pytest

from spectra_cli.eigen import lapacke

needs_it = pytest.mark.skipif(lapacke._routine() is None, reason="no loaded OpenBLAS with LAPACKE ssyevd")


def _covariance(d: int, n: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, d)) * np.arange(1, d + 1) ** -0.6
    return X.T @ X / n


@needs_it
def test_eigenpairs_match_numpy_within_float32_rounding():
    C = _covariance(300, 700, seed=3)
    ref, R = np.linalg.eigh(C)
    found = lapacke.eigh_float32(C)
    assert found is not None
    lam, V = found
    assert lam.dtype == V.dtype == np.float64 and lam.shape == (300,) and V.shape == (300, 300)
    assert np.all(np.diff(lam) >= 0)
    eps = np.finfo(np.float32).eps
    assert np.max(np.abs(lam - ref)) <= np.sqrt(300) * eps * ref[-1]
    # each column an eigenvector of C (residual at float32's rounding), orthonormal, and the leading ones (well
    # separated here) the same directions as NumPy's
    assert np.max(np.abs(C @ V - V * lam)) <= 50 * eps * ref[-1]
    np.testing.assert_allclose(V.T @ V, np.eye(300), atol=1e-5)
    np.testing.assert_allclose(np.abs(np.sum(V[:, -5:] * R[:, -5:], axis=0)), 1.0, atol=1e-4)


@needs_it
def test_only_the_lower_triangle_is_read_and_the_input_is_kept():
    C = _covariance(64, 200, seed=4)
    held = np.tril(C) + np.triu(np.full_like(C, 1e3), 1)  # (the upper triangle garbage)
    kept = held.copy()
    lam, _ = lapacke.eigh_float32(held)
    np.testing.assert_allclose(lam, np.linalg.eigvalsh(C), rtol=0, atol=1e-5 * np.linalg.eigvalsh(C)[-1])
    np.testing.assert_array_equal(held, kept)


def test_no_routine_gives_none(monkeypatch):
    monkeypatch.setitem(lapacke._found, "done", True)
    monkeypatch.setitem(lapacke._found, "routine", None)
    assert lapacke.eigh_float32(np.eye(3)) is None
