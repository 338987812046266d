"""LAPACK's two-stage symmetric eigensolver (``?syevd_2stage``, eigenvalues only), where it is the faster one.

The one-stage solver (``?syevd``, what NumPy's ``eigvalsh`` and SciPy's ``eigh`` call) reduces the matrix to
tridiagonal form with half of its flops in matrix-vector products, bound by memory bandwidth. The two-stage
reduction (Haidar, Ltaief & Dongarra 2011; in LAPACK since 3.7) goes to a band first with matrix-matrix
products, then chases the band's bulges down to tridiagonal form, a sequential step. On one thread it wins
from d = 3,072 in float64 and 4,096 in float32 (``bench/bench_two_stage.py``, ``bench/README.md``; 2 cores, one
thread, seconds, one-stage / two-stage: float64 2.33 / 1.77 at d = 3,072, 5.58 / 3.77 at 4,096; float32 0.98 / 1.10
at 3,072, 3.10 / 2.47 at 4,096, 28.3 / 14.1 at 8,192; two such processes at once at 4,096: float32 3.3 / 2.4,
float64 6.6 / 4.1). On two threads the sequential step loses it back (float32 at 4,096: 1.34 / 1.82; float64
1.10x faster at 4,096 but 0.83x at 8,192): it is taken only when the decomposition runs on one thread (a batch's
workers when the cores shared out give each one; ``--threads 1``; ``--population``'s simulated and sub-sample
decompositions, two or more at a time, one thread each: ``spectra_cli.analysis.simulate``).

Neither NumPy nor SciPy wraps the routine, so it is called through ``ctypes`` in the OpenBLAS that SciPy ships
(its LAPACKE interface, found with threadpoolctl); where that library or the symbol is missing (another BLAS), the
one-stage solver runs, and ``method`` names the routine that did.
"""

from __future__ import annotations

import ctypes
from typing import Any, Literal

import numpy as np

from spectra_cli.eigen.lapacke import LAYOUT_COLUMN_MAJOR as _LAYOUT_COLUMN_MAJOR
from spectra_cli.eigen.lapacke import MAX_ORDER, lookup_lock, openblas_handles
from spectra_cli.eigen.lapacke import lp64 as _lp64

#: From this order, a float64 decomposition on one thread takes the two-stage solver (see the module's docstring).
TWO_STAGE_MIN_ORDER = 3072
#: The same for float32 (``--precision float32``'s own solver): at 3,072 its two-stage solver took 0.89-1.0x the
#: one-stage's time, at 4,096 1.26-1.36x less.
TWO_STAGE_MIN_ORDER_FLOAT32 = 4096


def min_order(dtype: str) -> int:
    """The order from which a decomposition in ``dtype`` on one thread takes the two-stage solver."""
    return TWO_STAGE_MIN_ORDER_FLOAT32 if dtype == "float32" else TWO_STAGE_MIN_ORDER


_found: dict[str, Any] = {}


def _routines() -> dict[str, Any]:
    """``{"float32": ssyevd_2stage, "float64": dsyevd_2stage}`` of the first OpenBLAS with 32-bit integers that has
    them, or ``{}`` (looked up once per process; imports SciPy, whose OpenBLAS it is)."""
    with lookup_lock():
        if "done" in _found:
            return _found["routines"]
        routines: dict[str, Any] = {}
        try:
            import scipy.linalg  # noqa: F401 - loads SciPy's OpenBLAS (LP64: 32-bit integers)

            for handle in openblas_handles():
                for prefix in ("scipy_", ""):
                    # (ILP64 builds name theirs with a "64_" suffix, or say USE64BITINT in their configuration)
                    names = {"float32": f"{prefix}LAPACKE_ssyevd_2stage", "float64": f"{prefix}LAPACKE_dsyevd_2stage"}
                    if all(hasattr(handle, n) for n in names.values()) and _lp64(handle, prefix):
                        for dtype, name in names.items():
                            fn = getattr(handle, name)
                            pointer = ctypes.POINTER(ctypes.c_float if dtype == "float32" else ctypes.c_double)
                            fn.restype = ctypes.c_int
                            fn.argtypes = [ctypes.c_int, ctypes.c_char, ctypes.c_char, ctypes.c_int, pointer,
                                           ctypes.c_int, pointer]
                            routines[dtype] = (fn, pointer)
                        _found["threads"] = getattr(handle, f"{prefix}openblas_get_num_threads", None)
                        break
                if routines:
                    break
        except Exception:  # noqa: BLE001 - no such library or symbol: the one-stage solver runs
            routines = {}
        _found.update(done=True, routines=routines)
        return routines


def available() -> bool:
    """Whether the two-stage solver can be called in this process. Call it before limiting BLAS threads for a
    decomposition: its first call loads SciPy's OpenBLAS, which a limit set before would not reach."""
    return bool(_routines())


def library_threads() -> int | None:
    """The threads the OpenBLAS of the two-stage solver runs on now (None: no such library)."""
    count = _found.get("threads") if available() else None
    return int(count()) if count is not None else None


def eigvalsh_two_stage(C: np.ndarray, dtype: Literal["float32", "float64"], *, uplo: Literal["L", "U"] = "L",
                       overwrite: bool = False) -> np.ndarray | None:
    """The eigenvalues of the symmetric ``C`` (held in its ``uplo`` triangle), ascending, as float64, decomposed in
    ``dtype`` by ``?syevd_2stage``; None where the routine is not available, the order is past :data:`MAX_ORDER`, or
    LAPACK reports a failure (the caller then runs the one-stage solver). ``overwrite``: ``C`` may be destroyed
    (used in place when it is a C-ordered array of ``dtype``; a None result then leaves it undefined)."""
    routine = _routines().get(dtype)
    n = int(C.shape[0]) if C.ndim == 2 else 0
    if routine is None or C.ndim != 2 or C.shape[1] != n or not 1 <= n <= MAX_ORDER:
        return None
    fn, pointer = routine
    # A C-ordered copy read as column-major is the transpose: its lower triangle is the upper one LAPACK is told of
    a = np.asarray(C, dtype=dtype, order="C") if overwrite else np.array(C, dtype=dtype, order="C", copy=True)
    w = np.empty(n, dtype=dtype)
    info = fn(_LAYOUT_COLUMN_MAJOR, b"N", b"U" if uplo == "L" else b"L", n, a.ctypes.data_as(pointer), n,
              w.ctypes.data_as(pointer))
    if info != 0:
        return None
    return w.astype(np.float64)
