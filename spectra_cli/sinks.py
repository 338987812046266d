"""Outputs: matrices (``.npy`` or Parquet, streamed block by block) and any other file, written
atomically (a temporary file beside the target, renamed when complete: an interrupted run
leaves no half file), with the normal umask mode, and never onto an input.

Temporary files are registered while they exist; the CLI turns SIGTERM/SIGINT into an
exception so the ``finally`` clauses here remove them.
"""

from __future__ import annotations

import contextlib
import errno
import fnmatch
import os
import secrets
import stat
import sys
from collections.abc import Iterable, Iterator
from typing import IO

import numpy as np

from spectra_cli.errors import NOTHING_HALF_WRITTEN, OptionError, OutputError, param
from spectra_cli.sources import formats
from spectra_cli.sources.base import identity

#: Temporary files being written right now (removed on any exit path).
LIVE_TEMPORARIES: set[str] = set()


def check_target(path: str, flag: str = "out") -> formats.Format:
    """The format a matrix output is written in (by its name: ``.npy`` or Parquet), once the target is
    known to be writable and replaceable."""
    fmt = formats.by_path(path, formats.MATRIX_OUTPUTS)
    if fmt is None:
        raise OptionError(f"{param(flag, path)}: the output must end in .npy or .parquet.")
    check_directory(path, flag)
    check_replaceable(path, flag)
    return fmt


def check_replaceable(path: str, flag: str) -> None:
    """An existing output is replaced only when it is a regular file of the kind its extension names
    (an earlier output: it begins with its format's magic bytes, :mod:`spectra_cli.sources.formats`):
    a FIFO, a device, or a text file named ``notes.npy`` is refused."""
    if not os.path.lexists(path):
        return
    try:
        st = os.stat(path)
    except OSError:
        return  # a dangling link: the output replaces the link itself
    if not stat.S_ISREG(st.st_mode):
        kind = "a FIFO" if stat.S_ISFIFO(st.st_mode) else "not a regular file"
        raise OutputError(f"{param(flag, path)} exists and is {kind}; name a regular file.")
    fmt = formats.by_path(path)
    if fmt is None or not fmt.magic or st.st_size == 0:
        return
    with open(path, "rb") as f:
        head = f.read(max(len(m) for m in fmt.magic))
    if not fmt.starts(head):
        raise OutputError(f"{param(flag, path)} exists and is not a {os.path.splitext(path)[1]} file (an earlier "
                          "output would be); name a new file.")


def check_directory(path: str, flag: str) -> None:
    parent = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(parent):
        raise OptionError(f"{param(flag, path)}: directory {parent} does not exist.")
    if os.path.isdir(path):
        raise OptionError(f"{param(flag, path)} is a directory; name a file.")


def input_files(paths: Iterable[str | None]) -> list[str]:
    """The files behind input paths (``file::tensor`` parts stripped, directories walked one level
    of Parquet files deep is not needed: a directory is compared as itself and by its files)."""
    out: list[str] = []
    for p in paths:
        if not p or not isinstance(p, str):
            continue
        p = p.partition("::")[0]
        if p.lower().startswith("file://"):  # a URL of a local file is that file
            p = p[len("file://"):]
        out.append(p)
        if os.path.isdir(p):
            for root, _, files in os.walk(p):
                out += [os.path.join(root, f) for f in files]
    return out


def check_not_input(out: str, inputs: Iterable[str | None], flag: str) -> None:
    """Refuse an output that is (by real path or by inode) one of the inputs: writing it would
    destroy the data being read."""
    inputs = list(inputs)
    target_real = os.path.realpath(out)
    target_id = identity(out)
    for src in input_files(inputs):
        same = os.path.realpath(src) == target_real or (target_id is not None and identity(src) == target_id)
        joins = formats.by_path(target_real, (formats.PARQUET, formats.NPY))  # a directory's members
        inside = os.path.isdir(src) and target_real.startswith(os.path.realpath(src) + os.sep) and joins is not None
        if same or inside:
            what = "is" if same else ("would join the Parquet dataset" if joins is formats.PARQUET
                                      else "would join the .npy shards of the input directory")
            raise OutputError(f"{param(flag, out)} {what} the input {src}; write the output elsewhere.")
    for pattern in inputs:
        if isinstance(pattern, str) and any(ch in pattern for ch in "*?[") and not os.path.lexists(pattern) \
                and "://" not in pattern and fnmatch.fnmatch(os.path.abspath(out), os.path.abspath(pattern)):
            raise OutputError(f"{param(flag, out)} matches the input glob {pattern}: the next read of the input would "
                              "take it in; write the output elsewhere.")


def _unnamed(parent: str) -> int | None:
    """An unnamed file in ``parent`` (Linux's O_TMPFILE): nothing of it is ever visible until it is
    linked into place, so even SIGKILL leaves nothing behind. None where the file system (or the OS)
    does not support it."""
    flag = getattr(os, "O_TMPFILE", 0)
    if not flag or not os.path.isdir("/proc/self/fd"):
        return None
    try:
        device = os.stat(parent).st_dev
        if device not in _LINKABLE:
            _LINKABLE[device] = _can_link_unnamed(parent, flag)
        if not _LINKABLE[device]:
            return None
        return os.open(parent, flag | os.O_WRONLY, 0o666)  # the umask applies, as for any file
    except OSError as exc:
        if exc.errno in (errno.EOPNOTSUPP, errno.EISDIR, errno.EINVAL, errno.ENOENT, errno.EXDEV):
            return None
        raise


#: Per file system (device): whether an unnamed file can be linked into place there.
_LINKABLE: dict[int, bool] = {}


def _can_link_unnamed(parent: str, flag: int) -> bool:
    """Whether O_TMPFILE plus a link through /proc/self/fd works in ``parent`` (some file systems and
    sandboxes refuse one or the other): tried once per file system with an empty file."""
    probe = os.path.join(parent, f".spectra-{os.getpid()}-{secrets.token_hex(6)}-probe.tmp")
    try:
        fd = os.open(parent, flag | os.O_WRONLY, 0o600)
    except OSError:
        return False
    try:
        os.link(f"/proc/self/fd/{fd}", probe, follow_symlinks=True)
    except OSError:
        return False
    finally:
        os.close(fd)
    with contextlib.suppress(OSError):
        os.unlink(probe)
    return True


def _remove_stale(parent: str, name: str) -> None:
    """Temporary files of the same output left by a run that was killed (named ``.spectra-PID-...``
    where O_TMPFILE is not available): removed, with a note, when their writer is gone."""
    for entry in os.listdir(parent):
        if not (entry.startswith(".spectra-") and entry.endswith(f"-{name}.tmp")):
            continue
        pid_text = entry[len(".spectra-"):].split("-", 1)[0]
        if not pid_text.isdigit():
            continue
        full = os.path.join(parent, entry)
        try:
            if _writer_alive(int(pid_text), os.stat(full).st_mtime):
                continue
        except OSError:
            continue
        with contextlib.suppress(OSError):
            os.unlink(os.path.join(parent, entry))
            sys.stderr.write(f"note: removed {os.path.join(parent, entry)}, a temporary file left by an interrupted "
                             "run\n")


def _writer_alive(pid: int, mtime: float) -> bool:
    """Whether the process that named a temporary file may still be writing it: a process of that id exists,
    is not a zombie (a killed writer whose parent has not reaped it), and started before the file was last
    written (else the id was reused). Where /proc cannot tell, a process of that id counts as the writer."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            fields = fh.read().rsplit(b")", 1)[1].split()
        if fields[0] in (b"Z", b"X"):
            return False
        with open("/proc/stat", "rb") as fh:
            boot = next(float(line.split()[1]) for line in fh if line.startswith(b"btime"))
        started = boot + int(fields[19]) / os.sysconf("SC_CLK_TCK")
        return started <= mtime + 2.0  # (clock ticks and the boot time are rounded to the second)
    except (OSError, ValueError, IndexError, StopIteration):
        return True


@contextlib.contextmanager
def atomic_file(path: str, *, flag: str = "out") -> Iterator[IO[bytes]]:
    """A binary file that appears at ``path`` only when the block completes: written unnamed (O_TMPFILE)
    and linked into place, or, where that is not available, written to a temporary name beside the target
    and renamed (a signal removes it; after SIGKILL the next write of the same output does)."""
    check_directory(path, flag)
    parent = os.path.dirname(os.path.abspath(path))
    tmp = os.path.join(parent, f".spectra-{os.getpid()}-{secrets.token_hex(6)}-{os.path.basename(path)}.tmp")
    try:
        fd = _unnamed(parent)
        unnamed = fd is not None
        if fd is None:
            _remove_stale(parent, os.path.basename(path))
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)  # the umask applies, as for any file
    except OSError as exc:
        raise OutputError(f"cannot write {path}: {exc.strerror}.") from None
    LIVE_TEMPORARIES.add(tmp)
    try:
        with os.fdopen(fd, "wb") as f:
            yield f
            if unnamed:
                f.flush()
                os.link(f"/proc/self/fd/{f.fileno()}", tmp, follow_symlinks=True)  # named only now, complete
        os.replace(tmp, path)
    finally:
        LIVE_TEMPORARIES.discard(tmp)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)


#: Results files (JSON Lines) being appended to now: what an interrupted run leaves, whole line by whole line.
LIVE_APPENDS: set[str] = set()


def interrupted_note() -> str:
    """What an interrupted run left behind, for its one line on stderr."""
    if LIVE_APPENDS:
        files = ", ".join(sorted(LIVE_APPENDS))
        return (f"{NOTHING_HALF_WRITTEN}; {files} keeps the whole lines of the items that finished "
                "(--resume goes on from them)")
    return NOTHING_HALF_WRITTEN


def remove_temporaries() -> None:
    """Remove every temporary file still being written (a signal arrived)."""
    for tmp in list(LIVE_TEMPORARIES):
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        LIVE_TEMPORARIES.discard(tmp)


class MatrixWriter:
    """An ``n x d`` matrix written block by block to ``.npy`` or Parquet (one fixed-size-list
    ``column`` or numeric ``columns``), appearing at ``path`` only when complete."""

    def __init__(self, path: str, *, n: int, d: int, dtype: str | np.dtype = "float32", column: str = "emb",
                 columns: list[str] | None = None) -> None:
        self.format = check_target(path)
        self.path, self.n, self.d, self.dtype = path, n, d, np.dtype(dtype)
        self.column, self.columns = column, columns
        self.written = 0
        self._stack = contextlib.ExitStack()
        self._file: IO[bytes] | None = None
        self._parquet: object = None

    def __enter__(self) -> MatrixWriter:
        self._file = self._stack.enter_context(atomic_file(self.path))
        if self.format is formats.NPY:
            np.lib.format.write_array_header_2_0(self._file, {
                "descr": np.lib.format.dtype_to_descr(self.dtype), "fortran_order": False,
                "shape": (self.n, self.d)})
        return self

    def write(self, block: np.ndarray) -> None:
        b = np.ascontiguousarray(block, dtype=self.dtype)
        assert self._file is not None
        if self.format is formats.NPY:
            self._file.write(b.data.cast("B"))
        else:
            import pyarrow as pa
            import pyarrow.parquet as pq

            if self.columns is not None:
                table = pa.table({name: b[:, i] for i, name in enumerate(self.columns)})
            else:
                table = pa.table({self.column: pa.FixedSizeListArray.from_arrays(pa.array(b.ravel()), self.d)})
            if self._parquet is None:
                self._parquet = pq.ParquetWriter(self._file, table.schema, write_page_checksum=True)
            self._parquet.write_table(table)  # type: ignore[attr-defined]
        self.written += len(b)

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        try:
            if self._parquet is not None:
                self._parquet.close()  # type: ignore[attr-defined]
            if exc_type is None and self.format is formats.NPY and self.written != self.n:
                raise RuntimeError(f"wrote {self.written} rows to {self.path}, expected {self.n}")
        except BaseException as err:
            self._stack.__exit__(type(err), err, err.__traceback__)
            raise
        self._stack.__exit__(exc_type, exc, tb)  # type: ignore[arg-type]


def write_matrix(
    path: str, blocks: Iterable[np.ndarray], *, n: int, d: int, dtype: str | np.dtype = "float32",
    column: str = "emb", columns: list[str] | None = None,
) -> int:
    """Write ``n x d`` rows from an iterable of blocks; returns the number of rows written."""
    with MatrixWriter(path, n=n, d=d, dtype=dtype, column=column, columns=columns) as w:
        for b in blocks:
            w.write(b)
    return w.written
