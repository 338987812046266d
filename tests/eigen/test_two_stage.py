"""LAPACK's two-stage eigensolver (?syevd_2stage through ctypes): the same eigenvalues as NumPy's one-stage solver
within the floor, whichever triangle holds the matrix, taken only on one thread and from its order, and said in
``method``."""

from __future__ import annotations

import numpy as np
import pytest

from spectra_cli import threads
from spectra_cli.eigen import decomposition as dec
from spectra_cli.eigen import two_stage
from spectra_cli.stream.moments import Moments

needs_it = pytest.mark.skipif(not two_stage.available(), reason="no OpenBLAS with LAPACKE ?syevd_2stage loaded")


def _covariance(d: int, n: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, d)) * np.arange(1, d + 1) ** -0.6
    return X.T @ X / n


@needs_it
@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("uplo", ["L", "U"])
def test_two_stage_eigenvalues_match_numpy_from_either_triangle(dtype, uplo):
    C = _covariance(200, 500, seed=1)
    ref = np.linalg.eigvalsh(C)  # (ascending, one-stage dsyevd)
    held = np.tril(C) if uplo == "L" else np.triu(C)
    held = held + (np.triu(np.full_like(C, 1e3), 1) if uplo == "L" else np.tril(np.full_like(C, 1e3), -1))
    lam = two_stage.eigvalsh_two_stage(held, dtype, uplo=uplo)  # (the other triangle is garbage: never read)
    assert lam is not None and lam.dtype == np.float64 and lam.shape == ref.shape
    assert np.all(np.diff(lam) >= 0)
    eps = np.finfo(dtype).eps
    bound = (200 * eps if dtype == "float64" else np.sqrt(200) * eps) * ref[-1]  # (the floor's solver part)
    assert np.max(np.abs(lam - ref)) <= bound / 5


@needs_it
def test_one_thread_from_its_order_takes_two_stage_and_says_so(monkeypatch):
    rng = np.random.default_rng(2)
    X = rng.standard_normal((600, 300)) * np.arange(1, 301) ** -0.5
    m = Moments.from_block(X)
    ref = np.linalg.eigvalsh(np.cov(X, rowvar=False))[::-1]
    before = dec.spectrum_from_moments(m)
    assert "2stage" not in before.method  # (below its order)
    monkeypatch.setattr(two_stage, "TWO_STAGE_MIN_ORDER", 256)
    with threads.call(1):
        one = dec.spectrum_from_moments(m)
        gram = dec.spectrum_from_rows(X[:280])
    with threads.call(2):
        two = dec.spectrum_from_moments(m)
    assert "; LAPACK dsyevd_2stage (the two-stage reduction, on one thread)" in one.method
    assert "2stage" in gram.method
    assert "2stage" not in two.method  # (on two threads the one-stage solver is the faster)
    assert one.numerical_floor == pytest.approx(before.numerical_floor, rel=1e-12)
    np.testing.assert_allclose(one.eigenvalues, ref, rtol=0, atol=one.numerical_floor / 5)


@needs_it
def test_float32_precision_on_one_thread_decomposes_by_ssyevd_2stage(monkeypatch):
    rng = np.random.default_rng(3)
    X = (rng.standard_normal((1000, 300)) * np.arange(1, 301) ** -0.6).astype(np.float32)
    ref = np.linalg.eigvalsh(np.cov(X.astype(np.float64), rowvar=False))[::-1]
    monkeypatch.setattr(dec, "FLOAT32_SOLVER_MIN_ORDER", 256)
    monkeypatch.setattr(two_stage, "TWO_STAGE_MIN_ORDER", 256)  # (float64's order: not float32's)
    m = Moments.from_block(X, precision="float32")
    with threads.call(1):
        below = dec.spectrum_from_moments(m, precision="float32")
    assert "(LAPACK ssyevd via SciPy" in below.method
    monkeypatch.setattr(two_stage, "TWO_STAGE_MIN_ORDER_FLOAT32", 256)
    with threads.call(1):
        spec = dec.spectrum_from_moments(m, precision="float32")
    assert below.numerical_floor == pytest.approx(spec.numerical_floor, rel=1e-12)
    assert "decomposed in float32 (LAPACK ssyevd_2stage, the two-stage reduction, on one thread" in spec.method
    assert 0 < np.max(np.abs(spec.eigenvalues - ref)) <= spec.numerical_floor / 5


def test_without_the_routine_the_one_stage_solver_runs(monkeypatch):
    monkeypatch.setattr(two_stage, "_found", {"done": True, "routines": {}})
    monkeypatch.setattr(two_stage, "TWO_STAGE_MIN_ORDER", 8)
    C = _covariance(40, 100, seed=4)
    assert not two_stage.available() and two_stage.eigvalsh_two_stage(C, "float64") is None
    with threads.call(1):
        lam, routine = dec.eigvalsh_routed(C)
    assert routine == "dsyevd"
    np.testing.assert_array_equal(lam, np.linalg.eigvalsh(C))
