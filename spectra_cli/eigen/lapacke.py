"""A float32 symmetric eigendecomposition with vectors through LAPACK's ``ssyevd`` in the OpenBLAS NumPy already loaded.

NumPy's ``numpy.linalg.eigh`` of a float32 matrix takes as long as of a float64 one (d = 384: 11.8 ms against 11.8 ms
on one thread), while ``ssyevd`` itself, called in the same library, takes 4.9 ms; SciPy's ``eigh`` reaches it too
(5.8 ms) but importing ``scipy.linalg`` costs 0.15-0.18 s, more than a small fit. The routine is found by
``threadpoolctl`` among the libraries the process has loaded (NumPy's OpenBLAS, ILP64 with its symbols suffixed
``64_``; or an LP64 one), called through ``ctypes``; where none has it, callers fall back to NumPy. The threads it
runs on are the library's, which :mod:`spectra_cli.threads` limits as it limits NumPy's products.
"""

from __future__ import annotations

import ctypes
import os
import threading
from collections.abc import Iterator
from typing import Any

import numpy as np

#: LAPACKE's matrix layout argument for column-major storage.
LAYOUT_COLUMN_MAJOR = 102
#: The largest order passed to an LP64 LAPACKE: it indexes the matrix with 32-bit integers (its NaN check reads
#: ``a[i + j * lda]``), which overflow past 46,340^2; larger matrices take NumPy's solvers, whose integers are 64-bit.
MAX_ORDER = 46340
_found: dict[str, Any] = {}
_lock = threading.Lock()


def _new_lock() -> None:
    global _lock
    _lock = threading.Lock()  # (a child forked while another thread held the lock must not inherit it held)


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_new_lock)


def lookup_lock() -> threading.Lock:
    """The lock a one-time lookup of a LAPACK routine takes (this module's, :mod:`two_stage`'s): renewed in a forked
    child."""
    return _lock


def openblas_handles() -> Iterator[Any]:
    """Each OpenBLAS the process has loaded, as a ``ctypes`` library (found with ``threadpoolctl``)."""
    from threadpoolctl import ThreadpoolController

    for lib in ThreadpoolController().info():
        if lib.get("internal_api") == "openblas" and lib.get("filepath"):
            yield ctypes.CDLL(lib["filepath"])


def lp64(handle: Any, prefix: str) -> bool:
    """Whether the OpenBLAS behind ``handle`` takes 32-bit integers under unsuffixed names: its configuration string
    names USE64BITINT where they are 64-bit (a distribution's libopenblas64 without suffixed names)."""
    get_config = getattr(handle, f"{prefix}openblas_get_config", None)
    if get_config is None:
        return False
    get_config.restype = ctypes.c_char_p
    get_config.argtypes = []
    return b"USE64BITINT" not in (get_config() or b"")


def _routine() -> Any:
    """``(ssyevd, pointer type, 64-bit integers)`` of the first loaded OpenBLAS with LAPACKE's ``ssyevd``, or None
    (looked up once)."""
    with lookup_lock():
        if "done" in _found:
            return _found["routine"]
        routine = None
        try:
            for handle in openblas_handles():
                for prefix in ("scipy_", ""):
                    # (an ILP64 build suffixes every symbol "64_": 64-bit integers; unsuffixed names must be LP64)
                    for suffix in ("64_", ""):
                        fn = getattr(handle, f"{prefix}LAPACKE_ssyevd{suffix}", None)
                        if fn is None or not (suffix or lp64(handle, prefix)):
                            continue
                        integer = ctypes.c_int64 if suffix else ctypes.c_int
                        pointer = ctypes.POINTER(ctypes.c_float)
                        fn.restype = integer
                        fn.argtypes = [ctypes.c_int, ctypes.c_char, ctypes.c_char, integer, pointer, integer, pointer]
                        routine = (fn, pointer, bool(suffix))
                        break
                    if routine:
                        break
                if routine:
                    break
        except Exception:  # noqa: BLE001 - no such library or symbol: NumPy's eigh runs
            routine = None
        _found.update(done=True, routine=routine)
        return routine


def eigh_float32(S: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
    """Eigenvalues (ascending, float64) and eigenvectors (columns, float64) of the symmetric ``S`` (its lower triangle
    read), decomposed in float32 by ``ssyevd``; None where the routine is not found, the order does not fit its
    integers, or LAPACK reports a failure (the caller then runs NumPy's ``eigh``)."""
    routine = _routine()
    n = int(S.shape[0]) if S.ndim == 2 else 0
    if routine is None or S.ndim != 2 or S.shape[1] != n or n < 1:
        return None
    fn, pointer, wide = routine
    if not wide and n > MAX_ORDER:
        return None
    # a C-ordered copy read as column-major is the transpose: its lower triangle is the upper one LAPACK is told of;
    # the vectors come back as the columns of the column-major array, the rows of this one
    a = np.array(S, dtype=np.float32, order="C", copy=True)
    w = np.empty(n, dtype=np.float32)
    info = fn(LAYOUT_COLUMN_MAJOR, b"V", b"U", n, a.ctypes.data_as(pointer), n, w.ctypes.data_as(pointer))
    if info != 0 or not (np.all(np.isfinite(w))):
        return None
    return w.astype(np.float64), a.T.astype(np.float64)
