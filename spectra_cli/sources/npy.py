"""`.npy` and `.npz` readers: headers parsed without unpickling, rows read in blocks.

A `.npy` file is read with positioned reads into reused buffers, never memory-mapped (mapped
pages count towards RSS, and a file truncated under a map kills the process with SIGBUS):
C-order rows are one read per block, Fortran-order (column-major) files one read per column
stripe of a block. `.npz` members are streamed through :mod:`zipfile` (stored or deflated) in
the same block sizes. Sizes from headers are Python integers, so no header can overflow the
truncation check, and only regular files are opened (a FIFO would block forever).
"""

from __future__ import annotations

import math
import os
import zipfile
import zlib
from collections.abc import Callable, Iterator
from typing import IO, Any

import numpy as np
from numpy.lib import format as npformat

from spectra_cli.errors import InputError, param
from spectra_cli.sources import formats
from spectra_cli.sources.base import Source, SourceInfo, check_numeric_dtype, check_regular, matrix_shape, open_regular
from spectra_cli.sources.remote import size as file_size

# Arrays whose header says more than this many bytes are refused as corrupt headers.
_MAX_HEADER = 1 << 20
#: What zipfile and zlib raise on a corrupt, encrypted or unsupported member.
ZIP_ERRORS = (zipfile.BadZipFile, zlib.error, OSError, EOFError, RuntimeError, NotImplementedError, ValueError)


def _read_header(f: IO[bytes], where: str, *, text: bool = False,
                 booleans: bool = False) -> tuple[tuple[int, ...], bool, np.dtype]:
    """The checked header: a numeric dtype (or text with ``text``, booleans with ``booleans``)."""
    try:
        version = npformat.read_magic(f)
    except Exception as exc:  # noqa: BLE001 - numpy's parser raises many types on untrusted bytes
        raise InputError(f"{where} is not a valid .npy file: {type(exc).__name__}: {str(exc)[:200]}") from None
    if version not in ((1, 0), (2, 0), (3, 0)):
        raise InputError(f"{where} has .npy format version {version[0]}.{version[1]}; spectra reads versions 1.0, "
                         "2.0 and 3.0 (numpy's).")
    try:
        shape, fortran, dtype = _header_after_magic(f, version)
    except Exception as exc:  # noqa: BLE001 - numpy's header parser raises many types on untrusted text
        raise InputError(f"{where} is not a valid .npy file: {type(exc).__name__}: {str(exc)[:200]}") from None
    if not (text and dtype.kind == "U") and not (booleans and dtype.kind == "b"):
        check_numeric_dtype(dtype, where)
    shape = tuple(int(s) for s in shape)
    if any(s < 0 for s in shape):
        raise InputError(f"{where} has shape {shape}; sizes must be non-negative.")
    return shape, bool(fortran), dtype


class NpySource(Source):
    """A `.npy` file, read block by block with ``allow_pickle`` never involved."""

    def __init__(self, path: str) -> None:
        self._path = path
        self._f = open_regular(path)
        try:
            shape, fortran, dtype = _read_header(self._f, path)
            n_rows, n_features, layout = matrix_shape(shape, path)
            self._offset = self._f.tell()
            self._fortran = fortran and len(shape) > 1
            if self._fortran and len(shape) == 3:
                raise InputError(f"{path} is a Fortran-ordered 3-D array; save it in C order "
                                 "(np.save(path, np.ascontiguousarray(X))).")
            expected = math.prod(shape) * dtype.itemsize  # Python integers: no overflow
            found = file_size(self._f) - self._offset
            if found < expected:
                raise InputError(
                    f"{path} is truncated: its header promises {expected} bytes of data "
                    f"(shape {shape}, dtype {dtype}) but only {found} follow."
                )
        except BaseException:
            self._f.close()
            raise
        self._dtype = dtype
        self._shape = shape
        self._fd = _descriptor(self._f)
        self.info = SourceInfo(
            path=path,
            format=formats.NPY.name,
            shape=shape,
            dtype=str(dtype),
            n_rows=n_rows,
            n_features=n_features,
            layout=layout,
            details={"fortran_order": fortran, "header_bytes": self._offset, "data_bytes": expected},
        )

    def _pread_into(self, out: np.ndarray, offset: int, what: int) -> None:
        view = out.data.cast("B") if out.flags.c_contiguous else None
        assert view is not None
        got = os.preadv(self._fd, [view], offset) if self._fd is not None else self._seek_read(view, offset)
        if got != view.nbytes:
            raise InputError(f"{self._path} ended early at row {what} (file changed while reading?).")

    def _seek_read(self, view: memoryview, offset: int) -> int:
        """A positioned read on a file without a descriptor (a URL through fsspec): seek, then read."""
        self._f.seek(offset)
        data = self._f.read(view.nbytes)
        view[: len(data)] = data
        return len(data)

    def iter_blocks(
        self, start: int, stop: int, block_rows: int
    ) -> Iterator[tuple[np.ndarray, np.ndarray | None]]:
        d = self.info.n_features
        row_bytes = d * self._dtype.itemsize
        # Two buffers used in turn, so a reader thread can fill one while the other is in use.
        rows = min(block_rows, max(stop - start, 0))
        bufs = [np.empty((rows, d), dtype=self._dtype) for _ in range(2)]
        stripe = np.empty(rows, dtype=self._dtype) if self._fortran else None
        n = self.info.n_rows
        for i, lo in enumerate(range(start, stop, block_rows)):
            hi = min(lo + block_rows, stop)
            out = bufs[i % 2][: hi - lo]
            if stripe is None:
                self._pread_into(out, self._offset + lo * row_bytes, lo)
            else:
                # Column-major: column j of rows lo..hi is one contiguous run; d reads per block.
                part = stripe[: hi - lo]
                for j in range(d):
                    self._pread_into(part, self._offset + (j * n + lo) * self._dtype.itemsize, lo)
                    out[:, j] = part
            yield out, None

    def close(self) -> None:
        self._f.close()


def _descriptor(f: Any) -> int | None:
    """The OS file descriptor for positioned reads, or None (fsspec files seek and read)."""
    if not hasattr(os, "preadv"):  # pragma: no cover - platforms without preadv
        return None
    try:
        return int(f.fileno())
    except (AttributeError, OSError, ValueError):
        return None


_ZIP_CACHE: dict[tuple[str, int, int], zipfile.ZipFile] = {}
_ZIP_CACHED = 2


def open_zip(path: str) -> zipfile.ZipFile:
    """The archive's ZipFile, parsed once per process for a given file version (a batch over the
    10,000 arrays of one archive reads its central directory once, not 10,000 times)."""
    check_regular(path)
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise InputError(f"no such file or directory: {path}") from None
    key = (os.path.realpath(path), st.st_size, st.st_mtime_ns)
    z = _ZIP_CACHE.get(key)
    if z is None:
        try:
            z = zipfile.ZipFile(path)
        except ZIP_ERRORS as exc:
            raise InputError(f"{path} is not a valid .npz archive: {exc}") from None
        while len(_ZIP_CACHE) >= _ZIP_CACHED:  # (two: a change between two archives reads both at once)
            _ZIP_CACHE.pop(next(iter(_ZIP_CACHE))).close()
        _ZIP_CACHE[key] = z
    return z


class NpzSource(Source):
    """One array of a `.npz` archive, streamed from the zip member."""

    def __init__(self, path: str, key: str | None) -> None:
        self._path = path
        self._zip = open_zip(path)
        names = [n for n in self._zip.namelist() if n.endswith(".npy")]
        keys = [n[: -len(".npy")] for n in names]
        if not keys:
            raise InputError(f"{path} holds no arrays.")
        if key is None:
            if len(keys) > 1:
                shown = ", ".join(keys[:10]) + (f", ... ({len(keys) - 10} more)" if len(keys) > 10 else "")
                raise InputError(f"{path} holds {len(keys)} arrays ({shown}); choose one with {param('key')}.")
            key = keys[0]
        elif key not in keys:
            shown = ", ".join(keys[:10]) + (f", ... ({len(keys) - 10} more)" if len(keys) > 10 else "")
            raise InputError(f"{path} has no array {key!r}; it holds: {shown}.")
        self._member = key + ".npy"
        try:
            with self._open_member() as f:
                shape, fortran, dtype = _read_header(f, f"{path}[{key}]")
        except ZIP_ERRORS as exc:
            raise InputError(f"{path}[{key}] is corrupt: {exc}") from None
        n_rows, n_features, layout = matrix_shape(shape, f"{path}[{key}]")
        if fortran and len(shape) > 1:
            raise InputError(
                f"{path}[{key}] is stored in Fortran order, which cannot be streamed from a zip; "
                "save it in C order (np.ascontiguousarray)."
            )
        info = self._zip.getinfo(self._member)
        if math.prod(shape) * dtype.itemsize > info.file_size:
            raise InputError(f"{path}[{key}] is truncated: its header promises more bytes than the member holds.")
        self._dtype = dtype
        self.info = SourceInfo(
            path=path, format=formats.NPZ.name, shape=shape, dtype=str(dtype), n_rows=n_rows,
            n_features=n_features, layout=layout, key=key,
            details={"arrays": keys},
        )

    def _open_member(self) -> IO[bytes]:
        try:
            return self._zip.open(self._member)
        except ZIP_ERRORS as exc:
            raise InputError(f"cannot read {self._path}[{self._member}]: {exc}") from None

    def iter_blocks(
        self, start: int, stop: int, block_rows: int
    ) -> Iterator[tuple[np.ndarray, np.ndarray | None]]:
        d = self.info.n_features
        row_bytes = d * self._dtype.itemsize
        with self._open_member() as f:
            try:
                _read_header(f, self._path)
                _skip(f, start * row_bytes)
                for lo in range(start, stop, block_rows):
                    hi = min(lo + block_rows, stop)
                    raw = f.read((hi - lo) * row_bytes)
                    if len(raw) != (hi - lo) * row_bytes:
                        raise InputError(f"{self._path}[{self.info.key}] is truncated near row {lo}.")
                    yield np.frombuffer(raw, dtype=self._dtype).reshape(hi - lo, d), None
            except ZIP_ERRORS as exc:
                raise InputError(f"{self._path}[{self.info.key}] is corrupt: {exc}") from None

    def close(self) -> None:
        """The archive stays open in the per-process cache (see :func:`open_zip`)."""


def _skip(f: IO[bytes], nbytes: int, chunk: int = 1 << 24) -> None:
    while nbytes > 0:
        got = f.read(min(chunk, nbytes))
        if not got:
            raise InputError("archive member ended early")
        nbytes -= len(got)


def npz_listing(path: str) -> list[dict[str, Any]]:
    """Names, shapes and dtypes of every array in an archive (for ``spectra info`` and ``batch``)."""
    out: list[dict[str, Any]] = []
    z = open_zip(path)
    for name in z.namelist():
        if not name.endswith(".npy"):
            continue
        try:
            with z.open(name) as f:
                shape, _, dtype = _read_header(f, f"{path}[{name[:-4]}]")
        except InputError as exc:
            out.append({"key": name[:-4], "shape": [], "dtype": "unreadable", "error": str(exc)})
            continue
        except ZIP_ERRORS as exc:
            out.append({"key": name[:-4], "shape": [], "dtype": "unreadable", "error": f"{path}[{name}]: {exc}"})
            continue
        out.append({"key": name[:-4], "shape": list(shape), "dtype": str(dtype)})
    return out


def npz_headers(path: str, keep: Callable[[str], bool]) -> dict[str, tuple[tuple[int, ...], np.dtype]]:
    """The shape and dtype of each array of an archive whose key ``keep`` accepts (numeric or text), from
    its header alone: nothing else is read."""
    z = open_zip(path)
    out: dict[str, tuple[tuple[int, ...], np.dtype]] = {}
    for name in z.namelist():
        if not name.endswith(".npy") or not keep(name[:-4]):
            continue
        try:
            with z.open(name) as f:
                shape, _, dtype = _read_header(f, f"{path}[{name[:-4]}]", text=True)
        except ZIP_ERRORS as exc:
            raise InputError(f"{path}[{name[:-4]}] is corrupt: {exc}") from None
        out[name[:-4]] = (shape, dtype)
    return out


def read_npz_members(path: str, keep: Callable[[str], bool]) -> dict[str, np.ndarray]:
    """The arrays of an archive whose key ``keep`` accepts, read whole: numeric or text arrays only (never
    objects, so never pickle), each header checked against its member's size before anything is
    allocated; the other members are never read."""
    z = open_zip(path)
    out: dict[str, np.ndarray] = {}
    for name in z.namelist():
        if not name.endswith(".npy") or not keep(name[:-4]):
            continue
        where = f"{path}[{name[:-4]}]"
        try:
            with z.open(name) as f:
                assert isinstance(f, zipfile.ZipExtFile)
                shape, fortran, dtype = _read_header(f, where, text=True)
                size = math.prod(shape) * dtype.itemsize
                if size > z.getinfo(name).file_size:
                    raise InputError(f"{where} is truncated: its header promises {size} bytes of data.")
                arr = np.empty(shape, dtype=dtype, order="F" if fortran else "C")
                got = f.readinto(arr.reshape(-1, order="A").view(np.uint8).data) if size else 0
        except InputError:
            raise
        except ZIP_ERRORS as exc:
            raise InputError(f"{where} is corrupt: {exc}") from None
        if got != size:
            raise InputError(f"{where} is truncated: its header promises {size} bytes of data.")
        out[name[:-4]] = arr
    return out


def _header_after_magic(f: IO[bytes], version: tuple[int, int]) -> tuple[tuple[int, ...], bool, np.dtype]:
    if version == (1, 0):
        return npformat.read_array_header_1_0(f, max_header_size=_MAX_HEADER)
    # Format 3.0 differs from 2.0 only in allowing UTF-8 field names; numeric headers are ASCII.
    return npformat.read_array_header_2_0(f, max_header_size=_MAX_HEADER)


class Vector:
    """A 1-D ``.npy`` (row weights or scores) read by positioned reads, never memory-mapped: a file
    truncated during the run is an input error, not a SIGBUS."""

    def __init__(self, path: str, what: str) -> None:
        self.path = path
        self._f = open_regular(path, f"{what} file")
        try:
            shape, fortran, dtype = _read_header(self._f, f"{what} file {path}")
            if len(shape) != 1:
                raise InputError(f"{what} file {path} has shape {shape}; a 1-D array is required.")
            self._offset = self._f.tell()
            if os.fstat(self._f.fileno()).st_size - self._offset < shape[0] * dtype.itemsize:
                raise InputError(f"{what} file {path} is truncated: its header promises {shape[0]} values.")
        except BaseException:
            self._f.close()
            raise
        self.size = shape[0]
        self.dtype = dtype
        self.what = what

    def read(self, lo: int, hi: int) -> np.ndarray:
        """Values ``lo..hi`` as float64."""
        out = np.empty(max(hi - lo, 0), dtype=self.dtype)
        view = out.data.cast("B")
        got = os.preadv(self._f.fileno(), [view], self._offset + lo * self.dtype.itemsize) if view.nbytes else 0
        if got != view.nbytes:
            raise InputError(f"{self.what} file {self.path} ended early at value {lo} (file changed while reading?).")
        return out.astype(np.float64)

    def close(self) -> None:
        self._f.close()


def read_whole(path: str, what: str, *, booleans: bool = False) -> np.ndarray:
    """A small ``.npy`` read whole (``--eigenvalues``, ``--mask``), through the same checked header
    as the streamed readers (never ``np.load``: no pickle, no parser exception escapes); a boolean
    array only with ``booleans`` (a mask)."""
    with open_regular(path, what) as f:
        shape, fortran, dtype = _read_header(f, path, booleans=booleans)
        size = math.prod(shape)
        if size * dtype.itemsize > os.fstat(f.fileno()).st_size - f.tell():
            raise InputError(f"{path} is truncated: its header promises {size * dtype.itemsize} bytes of data.")
        data = f.read(size * dtype.itemsize)
    return np.frombuffer(data, dtype=dtype).reshape(shape, order="F" if fortran else "C")


class NpyDirSource(Source):
    """A directory (or glob) of ``.npy`` shards as one matrix: their rows in file-name order, every
    shard of the same width and dtype (``_``- and ``.``-names skipped, as for Parquet datasets). One
    shard is open at a time."""

    def __init__(self, path: str, files: list[str]) -> None:
        self._path = path
        self._files = files
        self._rows: list[int] = []
        first: SourceInfo | None = None
        for f in files:
            with NpySource(f) as src:
                info = src.info
            if len(info.shape) != 2:
                raise InputError(f"{f} has shape {info.shape}; the shards of {path} must be 2-D matrices.")
            if first is None:
                first = info
            elif info.n_features != first.n_features or info.dtype != first.dtype:
                raise InputError(f"{f} is {info.dtype} with {info.n_features} features; {files[0]} is {first.dtype} "
                                 f"with {first.n_features}: the shards of {path} must match.")
            self._rows.append(info.n_rows)
        assert first is not None
        n = sum(self._rows)
        self.info = SourceInfo(path=path, format=formats.NPY.name, shape=(n, first.n_features), dtype=first.dtype,
                               n_rows=n, n_features=first.n_features, layout=f"matrix ({len(files)} .npy shards)",
                               files=len(files))

    def iter_blocks(self, start: int, stop: int, block_rows: int) -> Iterator[tuple[np.ndarray, np.ndarray | None]]:
        offset = 0
        for f, n in zip(self._files, self._rows, strict=True):
            lo, hi = max(start, offset), min(stop, offset + n)
            if lo < hi:
                with NpySource(f) as src:
                    for X, w in src.iter_blocks(lo - offset, hi - offset, block_rows):
                        yield X.copy(), w  # the shard's buffers are reused after the file closes
            offset += n
            if offset >= stop:
                return
