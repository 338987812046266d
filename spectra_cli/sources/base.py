"""What every reader provides: a description of the matrix and its rows in blocks."""

from __future__ import annotations

import hashlib
import io
import os
import stat
from abc import ABC, abstractmethod
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from spectra_cli.errors import InputError
from spectra_cli.jsonio import loads
from spectra_cli.sources import formats

#: Default rows per block: large enough for BLAS to run at full speed, small enough
#: that a block of 768 float64 features is ~50 MB.
DEFAULT_BLOCK_ROWS = 8192


@dataclass(frozen=True, slots=True)
class SourceInfo:
    """What a reader found in the input, before any row is read.

    ``shape`` is the stored shape; ``n_rows`` x ``n_features`` is the matrix the
    analyses see (a 3-D sequence dump is read as token rows unless its positions are pooled; see
    :mod:`spectra_cli.sources.windows`).
    """

    path: str
    format: str
    shape: tuple[int, ...]
    dtype: str
    n_rows: int
    n_features: int
    layout: str
    column: str | None = None
    key: str | None = None
    files: int = 1
    details: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "format": self.format,
            "shape": list(self.shape),
            "dtype": self.dtype,
            "n_rows": self.n_rows,
            "n_features": self.n_features,
            "layout": self.layout,
            "column": self.column,
            "key": self.key,
            "files": self.files,
        }


class Source(ABC):
    """A matrix readable as consecutive row blocks, never all at once."""

    info: SourceInfo
    #: True when the source reads a weight column alongside the data.
    has_weights: bool = False
    #: What the reader decided for the user (e.g. id-like columns left out); reported as warnings.
    notes: list[str] = []  # noqa: RUF012 - replaced per instance, never mutated

    @abstractmethod
    def iter_blocks(
        self, start: int, stop: int, block_rows: int
    ) -> Iterator[tuple[np.ndarray, np.ndarray | None]]:
        """Yield ``(X_block, w_block)`` covering rows ``[start, stop)`` in order.

        ``w_block`` is a weight column read alongside the data, or None. A block may
        live in a buffer that the reader reuses two blocks later: copy it to keep it.
        """

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release open files."""

    def __enter__(self) -> Source:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def fingerprint(path: str) -> str:
    """Cheap identity of an input: sizes and modification times of its files, and the tensor or
    array name of a ``file::name`` input."""
    h = hashlib.sha256()
    path, _, name = path.partition("::")
    if name:
        h.update(f"::{name};".encode())
    from spectra_cli.sources.remote import identity, is_url

    if is_url(path):
        h.update(identity(path).encode())
        return h.hexdigest()[:16]
    paths = [path]
    if os.path.isdir(path):
        paths = sorted(os.path.join(r, f) for r, _, fs in os.walk(path) for f in fs)
    for p in paths:
        try:
            st = os.stat(p)
        except OSError:
            continue
        h.update(f"{os.path.realpath(p)}|{st.st_size}|{st.st_mtime_ns};".encode())
    return h.hexdigest()[:16]


_NUMERIC_KINDS = "fiu"


def open_regular(path: str, what: str = "") -> io.BufferedReader:
    """Open a regular file for reading; a FIFO, socket or device is refused without blocking
    (opening a FIFO for reading would wait for a writer forever)."""
    label = f"{what} " if what else ""
    from spectra_cli.sources.remote import is_url, open_url

    if is_url(path):
        return open_url(path)  # type: ignore[return-value]
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except FileNotFoundError:
        raise InputError(f"no such {what or 'file or directory'}: {path}") from None
    except IsADirectoryError:
        raise InputError(f"{label}{path} is a directory; a file is required.") from None
    except OSError as exc:
        raise InputError(f"cannot open {label}{path}: {exc.strerror}") from None
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        kind = "a FIFO" if stat.S_ISFIFO(st.st_mode) else "a directory" if stat.S_ISDIR(st.st_mode) else \
            "not a regular file"
        raise InputError(f"{label}{path} is {kind}; spectra reads regular files only.")
    if hasattr(os, "set_blocking"):
        os.set_blocking(fd, True)
    return os.fdopen(fd, "rb")


def identity(path: str) -> tuple[int, int] | None:
    """A file's (device, inode), following links; None when it cannot be reached."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino


def read_json(path: str, what: str = "file") -> Any:
    """Parse a JSON file (a regular file only: never a FIFO that would block), strictly."""
    with open_regular(path, what) as f:
        return loads(f.read(), path)


def check_regular(path: str) -> None:
    """Refuse a path that exists but is not a regular file or a directory (FIFOs, devices)."""
    from spectra_cli.sources.remote import is_url

    if is_url(path):
        return
    try:
        st = os.stat(path)
    except OSError:
        return
    if not (stat.S_ISREG(st.st_mode) or stat.S_ISDIR(st.st_mode)):
        kind = "a FIFO" if stat.S_ISFIFO(st.st_mode) else "not a regular file"
        raise InputError(f"{path} is {kind}; spectra reads regular files only.")


def is_glob(path: str) -> bool:
    """A pattern to expand: it has ``*?[`` and no file of that name exists (an existing path is a
    path, so ``emb[1].parquet`` never silently reads ``emb1.parquet``)."""
    return any(ch in path for ch in "*?[") and not os.path.lexists(path)


#: A glob matching more than this many entries is refused (a loop of links, or the wrong pattern).
MAX_GLOB_MATCHES = 1_000_000


def expand_glob(pattern: str) -> list[str]:
    """The files a glob matches, sorted; an input error when none. ``**`` recurses without following
    symbolic links to directories (a link back up the tree would make the walk endless), and, as the
    shell's ``*``, no wildcard matches a name that starts with a dot."""
    import glob
    import itertools
    from pathlib import Path

    if "**" not in pattern:
        matches = glob.iglob(pattern)
    else:
        parts = Path(pattern).parts
        static = next((i for i, p in enumerate(parts) if any(ch in p for ch in "*?[")), len(parts))
        base = Path(*parts[:static]) if static else Path(".")
        rest = "/".join(parts[static:])
        matches = (str(base / m.relative_to(base)) if static else str(m)
                   for m in base.glob(rest)
                   if not any(c.startswith(".") for c in m.relative_to(base).parts))
    found = list(itertools.islice(matches, MAX_GLOB_MATCHES + 1))
    if len(found) > MAX_GLOB_MATCHES:
        raise InputError(f"{pattern} matches more than {MAX_GLOB_MATCHES:,} entries; name fewer files.")
    files = sorted(f for f in found if os.path.isfile(f) or _is_data_name(f))
    if not files:
        dirs = [f for f in found if os.path.isdir(f)]
        hint = f" (it matches the director{'y' if len(dirs) == 1 else 'ies'} {', '.join(dirs[:3])}: name it " \
               "without a pattern to read its files)" if dirs else ""
        raise InputError(f"no files match {pattern}{hint}.")
    return files


def _is_data_name(path: str) -> bool:
    """A name spectra would read (kept in a listing even when it is not a regular file, so that the
    reader refuses it by name instead of the rows being left out silently)."""
    return formats.by_path(path, formats.DATA) is not None


def check_numeric_dtype(dtype: np.dtype, where: str) -> None:
    """Refuse dtypes that are not real numbers, naming what was found."""
    if dtype.hasobject:
        raise InputError(
            f"{where} has object dtype; spectra never unpickles data. "
            "Save a numeric array (e.g. np.save(path, X.astype(np.float32)))."
        )
    if dtype.names is not None:
        raise InputError(f"{where} has a structured dtype {dtype}; a plain numeric array is required.")
    if dtype.kind == "b":
        raise InputError(f"{where} has dtype bool; a numeric (float or integer) array is required.")
    if dtype.kind == "c":
        raise InputError(
            f"{where} has complex dtype {dtype}; spectra analyses real matrices. "
            "Pass the real and imaginary parts as separate features if that is what you mean."
        )
    if dtype.kind not in _NUMERIC_KINDS:
        raise InputError(f"{where} has dtype {dtype}; a numeric (float or integer) array is required.")


def matrix_shape(shape: tuple[int, ...], where: str) -> tuple[int, int, str]:
    """Map a stored shape to ``(n_rows, n_features, layout)`` or refuse it."""
    if any(not isinstance(s, int) or s < 0 for s in shape):
        raise InputError(f"{where} has shape {shape}; sizes must be non-negative integers.")
    if len(shape) == 2:
        return shape[0], shape[1], "matrix"
    if len(shape) == 3:
        return shape[0] * shape[1], shape[2], "sequence (windows x positions x features)"
    hint = ""
    if len(shape) == 1:
        hint = " (a 1-D array is a vector, not a matrix of rows)"
    raise InputError(
        f"{where} is {len(shape)}-D with shape {shape}{hint}; a 2-D (n_samples, n_features) "
        "matrix or a 3-D (windows, positions, features) sequence dump is required."
    )
