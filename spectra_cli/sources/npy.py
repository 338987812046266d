"""`.npy` and `.npz` readers: headers parsed without unpickling, rows read in blocks.

A `.npy` file is read with positioned ``readinto`` calls into one reusable buffer
instead of a memory map, so the resident set stays at one block however large the
file (memory-mapped pages would count towards RSS). `.npz` members are streamed
through :mod:`zipfile` (stored or deflated) in the same block sizes.
"""

from __future__ import annotations

import io
import os
import zipfile
from collections.abc import Iterator
from typing import IO, Any

import numpy as np
from numpy.lib import format as npformat

from spectra_cli.errors import InputError, param
from spectra_cli.sources.base import Source, SourceInfo, check_numeric_dtype, matrix_shape

# Arrays whose header says more than this many bytes are refused as corrupt headers.
_MAX_HEADER = 1 << 20


def _read_header(f: IO[bytes], where: str) -> tuple[tuple[int, ...], bool, np.dtype]:
    try:
        version = npformat.read_magic(f)
        shape, fortran, dtype = _header_after_magic(f, version)
    except (ValueError, OSError, SyntaxError, EOFError) as exc:
        raise InputError(f"{where} is not a valid .npy file: {exc}") from None
    check_numeric_dtype(dtype, where)
    return tuple(int(s) for s in shape), bool(fortran), dtype


class NpySource(Source):
    """A `.npy` file, read block by block with ``allow_pickle`` never involved."""

    def __init__(self, path: str) -> None:
        self._path = path
        try:
            self._f: io.BufferedReader = open(path, "rb")  # noqa: SIM115 - closed in close()
        except OSError as exc:
            raise InputError(f"cannot open {path}: {exc.strerror}") from None
        shape, fortran, dtype = _read_header(self._f, path)
        n_rows, n_features, layout = matrix_shape(shape, path)
        self._offset = self._f.tell()
        self._fortran = fortran and len(shape) > 1
        if self._fortran and len(shape) == 3:
            raise InputError(f"{path} is a Fortran-ordered 3-D array; save it in C order (np.ascontiguousarray).")
        self._dtype = dtype
        self._shape = shape
        expected = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
        found = os.fstat(self._f.fileno()).st_size - self._offset
        if found < expected:
            raise InputError(
                f"{path} is truncated: its header promises {expected} bytes of data "
                f"(shape {shape}, dtype {dtype}) but only {found} follow."
            )
        self.info = SourceInfo(
            path=path,
            format="npy",
            shape=shape,
            dtype=str(dtype),
            n_rows=n_rows,
            n_features=n_features,
            layout=layout,
            details={"fortran_order": fortran, "header_bytes": self._offset, "data_bytes": expected},
        )

    def iter_blocks(
        self, start: int, stop: int, block_rows: int
    ) -> Iterator[tuple[np.ndarray, np.ndarray | None]]:
        d = self.info.n_features
        if self._fortran:
            yield from self._iter_fortran(start, stop, block_rows)
            return
        row_bytes = d * self._dtype.itemsize
        # Two buffers used in turn, so a reader thread can fill one while the other is in use.
        rows = min(block_rows, max(stop - start, 0))
        bufs = [np.empty((rows, d), dtype=self._dtype) for _ in range(2)]
        for i, lo in enumerate(range(start, stop, block_rows)):
            hi = min(lo + block_rows, stop)
            out = bufs[i % 2][: hi - lo]
            self._f.seek(self._offset + lo * row_bytes)
            got = self._f.readinto(out.data.cast("B"))
            if got != out.nbytes:
                raise InputError(f"{self._path} ended early at row {lo} (file changed while reading?).")
            yield out, None

    def _iter_fortran(
        self, start: int, stop: int, block_rows: int
    ) -> Iterator[tuple[np.ndarray, np.ndarray | None]]:
        # Column-major: each block is d strided reads. A fresh map per block keeps the
        # resident set at one block (pages of a dropped map no longer count).
        for lo in range(start, stop, block_rows):
            hi = min(lo + block_rows, stop)
            mm = np.memmap(self._path, dtype=self._dtype, mode="r", offset=self._offset,
                           shape=self._shape, order="F")
            block = np.ascontiguousarray(mm[lo:hi])
            del mm
            yield block, None

    def close(self) -> None:
        self._f.close()


class NpzSource(Source):
    """One array of a `.npz` archive, streamed from the zip member."""

    def __init__(self, path: str, key: str | None) -> None:
        self._path = path
        try:
            self._zip = zipfile.ZipFile(path)
            names = [n for n in self._zip.namelist() if n.endswith(".npy")]
        except (OSError, zipfile.BadZipFile) as exc:
            raise InputError(f"{path} is not a valid .npz archive: {exc}") from None
        keys = [n[: -len(".npy")] for n in names]
        if not keys:
            raise InputError(f"{path} holds no arrays.")
        if key is None:
            if len(keys) > 1:
                raise InputError(
                    f"{path} holds {len(keys)} arrays ({', '.join(keys)}); choose one with {param('key')}."
                )
            key = keys[0]
        elif key not in keys:
            raise InputError(f"{path} has no array {key!r}; it holds: {', '.join(keys)}.")
        self._member = key + ".npy"
        with self._open_member() as f:
            shape, fortran, dtype = _read_header(f, f"{path}[{key}]")
        n_rows, n_features, layout = matrix_shape(shape, f"{path}[{key}]")
        if fortran and len(shape) > 1:
            raise InputError(
                f"{path}[{key}] is stored in Fortran order, which cannot be streamed from a zip; "
                "save it in C order (np.ascontiguousarray)."
            )
        self._dtype = dtype
        self.info = SourceInfo(
            path=path, format="npz", shape=shape, dtype=str(dtype), n_rows=n_rows,
            n_features=n_features, layout=layout, key=key,
            details={"arrays": keys},
        )

    def _open_member(self) -> IO[bytes]:
        try:
            return self._zip.open(self._member)
        except (OSError, zipfile.BadZipFile, RuntimeError) as exc:
            raise InputError(f"cannot read {self._path}[{self._member}]: {exc}") from None

    def iter_blocks(
        self, start: int, stop: int, block_rows: int
    ) -> Iterator[tuple[np.ndarray, np.ndarray | None]]:
        d = self.info.n_features
        row_bytes = d * self._dtype.itemsize
        with self._open_member() as f:
            _read_header(f, self._path)
            try:
                _skip(f, start * row_bytes)
                for lo in range(start, stop, block_rows):
                    hi = min(lo + block_rows, stop)
                    raw = f.read((hi - lo) * row_bytes)
                    if len(raw) != (hi - lo) * row_bytes:
                        raise InputError(f"{self._path}[{self.info.key}] is truncated near row {lo}.")
                    yield np.frombuffer(raw, dtype=self._dtype).reshape(hi - lo, d), None
            except (zipfile.BadZipFile, OSError, EOFError) as exc:
                raise InputError(f"{self._path}[{self.info.key}] is corrupt: {exc}") from None

    def close(self) -> None:
        self._zip.close()


def _skip(f: IO[bytes], nbytes: int, chunk: int = 1 << 24) -> None:
    while nbytes > 0:
        got = f.read(min(chunk, nbytes))
        if not got:
            raise InputError("archive member ended early")
        nbytes -= len(got)


def npz_listing(path: str) -> list[dict[str, Any]]:
    """Names, shapes and dtypes of every array in an archive (for ``spectra info``)."""
    out = []
    try:
        with zipfile.ZipFile(path) as z:
            for name in z.namelist():
                if not name.endswith(".npy"):
                    continue
                with z.open(name) as f:
                    shape, _, dtype = _read_header_loose(f)
                out.append({"key": name[:-4], "shape": list(shape), "dtype": str(dtype)})
    except (OSError, zipfile.BadZipFile) as exc:
        raise InputError(f"{path} is not a valid .npz archive: {exc}") from None
    return out


def _read_header_loose(f: IO[bytes]) -> tuple[tuple[int, ...], bool, np.dtype]:
    return _header_after_magic(f, npformat.read_magic(f))


def _header_after_magic(f: IO[bytes], version: tuple[int, int]) -> tuple[tuple[int, ...], bool, np.dtype]:
    if version == (1, 0):
        return npformat.read_array_header_1_0(f, max_header_size=_MAX_HEADER)
    # Format 3.0 differs from 2.0 only in allowing UTF-8 field names; numeric headers are ASCII.
    return npformat.read_array_header_2_0(f, max_header_size=_MAX_HEADER)
