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


def test_past_lapackes_32_bit_indices_it_declines(monkeypatch):
    # (LAPACKE indexes a[i + j * lda] in 32-bit integers: past 46,340 the one-stage solver, 64-bit in NumPy, runs)
    assert two_stage.MAX_ORDER ** 2 < 2**31 <= (two_stage.MAX_ORDER + 1) ** 2
    monkeypatch.setattr(two_stage, "MAX_ORDER", 30)
    assert two_stage.eigvalsh_two_stage(_covariance(31, 80, seed=5), "float64") is None


@needs_it
@pytest.mark.parametrize("solver", ["float64", "float32"])
def test_a_failed_two_stage_call_falls_back_to_the_one_stage_solver(monkeypatch, solver):
    C = _covariance(40, 100, seed=6)
    routines = dict(two_stage._routines())
    fn, pointer = routines[solver]
    monkeypatch.setitem(two_stage._found, "routines", {**routines, solver: (lambda *args: 1, pointer)})  # (info 1)
    monkeypatch.setattr(two_stage, "TWO_STAGE_MIN_ORDER", 8)
    monkeypatch.setattr(two_stage, "TWO_STAGE_MIN_ORDER_FLOAT32", 8)
    with threads.call(1):
        lam, routine = dec.eigvalsh_routed(C, solver=solver)
    assert routine == ("ssyevd" if solver == "float32" else "dsyevd")
    eps = np.finfo(solver).eps
    assert np.max(np.abs(lam - np.linalg.eigvalsh(C))) <= 40 * eps * np.linalg.eigvalsh(C)[-1]


@needs_it
def test_the_64_bit_integer_openblas_is_never_the_one_called():
    import ctypes

    from threadpoolctl import ThreadpoolController

    for lib in ThreadpoolController().info():
        if lib.get("internal_api") == "openblas" and lib.get("filepath"):
            handle = ctypes.CDLL(lib["filepath"])
            for prefix in ("scipy_", ""):
                if hasattr(handle, f"{prefix}openblas_get_config"):
                    config = getattr(handle, f"{prefix}openblas_get_config")
                    config.restype = ctypes.c_char_p
                    assert two_stage._lp64(handle, prefix) == (b"USE64BITINT" not in config())


def test_the_first_decomposition_in_a_fresh_process_is_limited_to_one_thread(tmp_path):
    # SciPy's OpenBLAS, where these solvers run, is loaded by the first decomposition that needs it: before the thread
    # limit is set, so that the limit reaches it (a fresh process; the suite has long imported SciPy)
    import ast
    import os
    import subprocess
    import sys

    code = (
        "import numpy as np\n"
        "from spectra_cli import threads\n"
        "from spectra_cli.eigen import decomposition as dec, two_stage\n"
        "seen = []\n"
        "real = two_stage.eigvalsh_two_stage\n"
        "def spy(*a, **k):\n"
        "    seen.append(two_stage.library_threads())\n"
        "    return real(*a, **k)\n"
        "two_stage.eigvalsh_two_stage = spy\n"
        "two_stage.TWO_STAGE_MIN_ORDER = 8\n"
        "A = np.random.default_rng(0).standard_normal((50, 20))\n"
        "with threads.call(1):\n"
        "    print(dec.eigvalsh_routed(A.T @ A)[1], seen)\n"
    )
    env = {k: v for k, v in os.environ.items() if k not in threads.ENV_VARS}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env)
    assert out.returncode == 0, out.stderr
    routine, seen = out.stdout.split(" ", 1)
    if routine == "dsyevd":
        pytest.skip("no OpenBLAS with LAPACKE ?syevd_2stage here")
    assert routine == "dsyevd_2stage" and ast.literal_eval(seen) == [1]
