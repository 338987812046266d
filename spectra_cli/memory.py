"""The C allocator's settings for the ``spectra`` process, and memory of its own for the largest matrices
(:func:`fresh_array`, for the library too).

glibc's ``malloc`` hands every free block above its *trim threshold* back to the system and maps every
request above its *mmap threshold* afresh (both adapt, between 128 KiB and 32 MiB). The expected spectrum
of ``fit --population`` makes and frees arrays of a few MiB thousands of times; each time the heap is trimmed
and grown again, and every page of the next array is a fresh page fault: on 2 cores, 2-5 s of system time in a
5-10 s run (``bench/README.md``). The command line (a process that ends with its result) keeps freed memory
for reuse instead: blocks up to 8 MiB (the expected spectrum's pieces) come from the heap, and the heap is not
trimmed below 64 MiB of free space. This changes no number; the peak resident memory of a batch of MiniLM's
matrices is 127 MB against 125 MB (with 32 MiB and 1 GiB: 138 MB). A program that imports
:mod:`spectra_cli` as a library keeps its own allocator settings.
"""

from __future__ import annotations

import ctypes
import errno
import mmap
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np

#: ``mallopt`` parameters (glibc's malloc.h) and the values set.
M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
TRIM_BYTES = 64 << 20
MMAP_BYTES = 8 << 20


def keep_freed_memory() -> bool:
    """Ask glibc's allocator to keep freed memory for reuse (see the module's docstring). False where the C
    library is not glibc (macOS, Windows, musl: nothing is changed there) or refuses either setting (the other
    may stand: both only change when memory goes back to the system)."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt  # (the process's own symbols: the C library's, where it is glibc)
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    return bool(mallopt(M_MMAP_THRESHOLD, MMAP_BYTES)) and bool(mallopt(M_TRIM_THRESHOLD, TRIM_BYTES))


#: The flags of :func:`fresh_array`'s mappings: private and anonymous (a forked child's writes stay its own, as
#: NumPy's memory's), and populated where the platform can (Linux: every page made in one call, not one fault at a
#: time: 1 GB took 0.29-0.31 s against 0.53-0.56 s faulted, and went back in 0.06 s against 0.18 s).
FRESH_FLAGS = (getattr(mmap, "MAP_PRIVATE", 0) | getattr(mmap, "MAP_ANONYMOUS", 0) | getattr(mmap, "MAP_POPULATE", 0)
               if hasattr(mmap, "MAP_PRIVATE") and hasattr(mmap, "MAP_ANONYMOUS") else None)


#: Below this size :func:`fresh_array` takes NumPy's own memory: a matrix of a few MB comes from the heap a library
#: call freed before, with no page to make (at d = 1,024 a fit's 16 row groups of 8 MB each, mapped and populated,
#: took 45 ms of a 0.42 s fit).
FRESH_MIN_BYTES = 64 << 20


def fresh_array(shape: tuple[int, ...], *, order: str = "C") -> np.ndarray:
    """An uninitialised float64 array in anonymous memory of its own, mapped without the huge-page advice NumPy gives
    its large arrays, every page made at once (:data:`FRESH_FLAGS`). For the few large matrices that are written
    whole at once and read a few times (a row group's matrix, a tridiagonal reduction, the errors' d x d products):
    where the kernel's huge pages come only by compacting memory on the fault (``transparent_hugepage/defrag`` set
    to ``madvise``, the usual default), the first touch of 1 GB took 1.2-2.1 s in a process that followed another
    large one, against 0.3 s populated in 4 KiB pages. The memory goes back with the array. ``order``: ``"F"`` lays
    the array out column-major (a LAPACK operand). Out of memory: :class:`MemoryError`, as NumPy's. Below
    :data:`FRESH_MIN_BYTES`, NumPy's ``empty``."""
    import numpy as np  # (here: the command line imports this module before it needs NumPy)

    size = int(np.prod(shape))
    nbytes = max(size, 1) * 8
    if nbytes < FRESH_MIN_BYTES:
        return np.empty(shape, order="F" if order == "F" else "C")
    try:
        # (Windows has no flags: its anonymous mappings are private to the process, which never forks)
        buffer = mmap.mmap(-1, nbytes) if FRESH_FLAGS is None else mmap.mmap(-1, nbytes, flags=FRESH_FLAGS)
    except OSError as exc:
        if exc.errno == errno.ENOMEM:
            raise MemoryError(f"cannot map {nbytes:,} bytes for a {' x '.join(map(str, shape))} array") from None
        raise
    flat = np.frombuffer(buffer, dtype=np.float64)[:size]
    return flat.reshape(shape[::-1]).T if order == "F" else flat.reshape(shape)
