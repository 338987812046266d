"""The symmetric eigensolver in its halves (LAPACK's dsytrd + dsterf, later dstemr + dormtr, in NumPy's own OpenBLAS):
every eigenvalue bit for bit as ``numpy.linalg.eigvalsh`` gives it, the leading eigenpairs as ``eigh`` gives them,
None where the routines or the matrix do not suit; and the grouped standard errors the same whether their leading
directions come from the spectrum's own reduction or from a second decomposition."""

from __future__ import annotations

import numpy as np
import pytest

from spectra_cli.eigen import tridiagonal
from spectra_cli.memory import fresh_array

needs_it = pytest.mark.skipif(tridiagonal._routines() is None, reason="NumPy's BLAS is not its wheels' OpenBLAS")


def _covariance(d: int, n: int, seed: int, power: float = 0.6) -> np.ndarray:
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, d)) * np.arange(1, d + 1) ** -power
    X -= X.mean(axis=0)
    return X.T @ X / (n - 1)


@needs_it
@pytest.mark.parametrize("uplo", ["L", "U"])
def test_the_eigenvalues_are_eigvalsh_s_bit_for_bit(uplo):
    C = _covariance(300, 500, seed=1)
    C[np.triu_indices(300, 1) if uplo == "L" else np.tril_indices(300, -1)] = 7.0  # (the other triangle unread)
    found = tridiagonal.eigvalsh_reduced(C, uplo)
    assert found is not None
    lam, reduction = found
    assert np.array_equal(lam, np.linalg.eigvalsh(C, UPLO=uplo))
    assert reduction.order == 300 and reduction.uplo == uplo.encode()
    assert np.all(C[np.triu_indices(300, 1) if uplo == "L" else np.tril_indices(300, -1)] == 7.0)  # (C kept)


@needs_it
@pytest.mark.parametrize("uplo", ["L", "U"])
def test_the_leading_eigenpairs_are_eigh_s(uplo):
    C = _covariance(240, 1000, seed=2)
    ref, R = np.linalg.eigh(C)
    found = tridiagonal.eigvalsh_reduced(C, uplo)
    assert found is not None
    w, V = found[1].leading(30)
    assert w.shape == (30,) and V.shape == (240, 30) and V.flags.c_contiguous
    np.testing.assert_allclose(w, ref[::-1][:30], rtol=1e-12)
    assert np.all(np.diff(w) <= 0)  # (largest first)
    np.testing.assert_allclose(V.T @ V, np.eye(30), atol=1e-12)
    assert np.max(np.abs(C @ V - V * w)) <= 1e-12 * ref[-1]
    np.testing.assert_allclose(np.abs(np.sum(V * R[:, ::-1][:, :30], axis=0)), 1.0, atol=1e-9)
    # every one of them, and more than there are: clipped to the order
    w_all, V_all = found[1].leading(500)
    assert V_all.shape == (240, 240)
    np.testing.assert_allclose(w_all, ref[::-1], rtol=1e-10, atol=1e-13 * ref[-1])
    assert found[1].leading(0) is None


@needs_it
def test_matrices_that_would_need_dsyevd_s_scaling_are_left_to_numpy():
    C = _covariance(50, 200, seed=3)
    assert tridiagonal.eigvalsh_reduced(C * 1e-150) is None
    assert tridiagonal.eigvalsh_reduced(C * 1e150) is None
    assert tridiagonal.eigvalsh_reduced(np.zeros((50, 50))) is None
    assert tridiagonal.eigvalsh_reduced(C[:, :40]) is None
    assert tridiagonal.eigvalsh_reduced(np.ones((1, 1))) is None
    assert tridiagonal.eigvalsh_reduced(C) is not None


def test_without_the_routines_nothing_is_reduced(monkeypatch):
    monkeypatch.setattr(tridiagonal, "_found", {"done": True, "routines": None})
    assert tridiagonal.eigvalsh_reduced(_covariance(20, 60, seed=4)) is None


@pytest.fixture()
def mapped(monkeypatch):
    """fresh_array's own mappings at every size (below FRESH_MIN_BYTES it takes NumPy's memory)."""
    from spectra_cli import memory

    monkeypatch.setattr(memory, "FRESH_MIN_BYTES", 0)


@pytest.mark.parametrize("mapping", [True, False])
def test_fresh_arrays_are_laid_out_as_asked_and_writable(mapping, monkeypatch):
    from spectra_cli import memory

    monkeypatch.setattr(memory, "FRESH_MIN_BYTES", 0 if mapping else 1 << 40)
    a = fresh_array((5, 3), order="F")
    assert a.shape == (5, 3) and a.flags.f_contiguous and a.flags.writeable and a.dtype == np.float64
    b = fresh_array((2, 4, 4))
    assert b.shape == (2, 4, 4) and b.flags.c_contiguous
    b[...] = 1.5
    assert float(b.sum()) == 48.0
    assert fresh_array((0, 3)).shape == (0, 3)



@pytest.mark.skipif(not hasattr(__import__("os"), "fork"), reason="no fork here")
def test_a_fresh_array_is_private_to_its_process(mapped):
    """A forked child's writes stay its own (the mapping is private, as NumPy's memory is): an Accumulator's row
    groups updated in a child must not change the parent's."""
    import os

    a = fresh_array((1000,))
    a[:] = 1.0
    pid = os.fork()
    if pid == 0:  # (the child)
        a[:] = 2.0
        os._exit(0)
    os.waitpid(pid, 0)
    assert float(a.sum()) == 1000.0


def test_running_out_of_memory_is_a_memory_error(mapped, monkeypatch):
    import errno
    import mmap

    def refuse(*args, **kwargs):
        raise OSError(errno.ENOMEM, "Cannot allocate memory")

    monkeypatch.setattr(mmap, "mmap", refuse)
    with pytest.raises(MemoryError, match="cannot map 8,000 bytes for a 10 x 100 array"):
        fresh_array((10, 100))


def test_the_routines_are_held_to_numpy_s_bits(monkeypatch):
    """A library whose eigenvalues are not NumPy's own (another copy of OpenBLAS loaded first) is not used."""
    monkeypatch.setattr(tridiagonal, "_found", {})
    monkeypatch.setattr(tridiagonal, "_eigenvalues",
                        lambda routines, C, side: (np.nextafter(np.linalg.eigvalsh(C), np.inf), None))
    assert tridiagonal._routines() is None
