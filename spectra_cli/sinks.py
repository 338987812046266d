"""Matrix writers: ``.npy`` or Parquet, streamed block by block, written atomically
(a temporary file beside the target, renamed when complete: an interrupted run leaves no half file)."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterable

import numpy as np

from spectra_cli.errors import OptionError

OUTPUT_EXTENSIONS = (".npy", ".parquet", ".pq")


def check_target(path: str, flag: str = "-o") -> None:
    if not path.lower().endswith(OUTPUT_EXTENSIONS):
        raise OptionError(f"{flag} {path!r}: the output must end in .npy or .parquet.")
    parent = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(parent):
        raise OptionError(f"{flag} {path!r}: directory {parent} does not exist.")


def write_matrix(
    path: str, blocks: Iterable[np.ndarray], *, n: int, d: int, dtype: str | np.dtype = "float32",
    column: str = "emb", columns: list[str] | None = None,
) -> int:
    """Write ``n x d`` rows; Parquet gets one fixed-size-list ``column`` or numeric ``columns``.

    Returns the number of rows written (which must equal ``n`` for ``.npy``).
    """
    check_target(path)
    dt = np.dtype(dtype)
    parent = os.path.dirname(os.path.abspath(path))
    try:
        fd, tmp = tempfile.mkstemp(prefix=".spectra-", suffix=os.path.splitext(path)[1], dir=parent)
    except OSError as exc:
        raise OptionError(f"cannot write {path}: {exc.strerror}.") from None
    written = 0
    try:
        with os.fdopen(fd, "wb") as f:
            if path.lower().endswith(".npy"):
                np.lib.format.write_array_header_2_0(
                    f, {"descr": np.lib.format.dtype_to_descr(dt), "fortran_order": False, "shape": (n, d)})
                for b in blocks:
                    f.write(np.ascontiguousarray(b, dtype=dt).data.cast("B"))
                    written += len(b)
                if written != n:
                    raise RuntimeError(f"wrote {written} rows, expected {n}")
            else:
                import pyarrow as pa
                import pyarrow.parquet as pq

                writer = None
                try:
                    for b in blocks:
                        b = np.ascontiguousarray(b, dtype=dt)
                        if columns is not None:
                            table = pa.table({name: b[:, i] for i, name in enumerate(columns)})
                        else:
                            table = pa.table({column: pa.FixedSizeListArray.from_arrays(pa.array(b.ravel()), d)})
                        if writer is None:
                            writer = pq.ParquetWriter(f, table.schema)
                        writer.write_table(table)
                        written += len(b)
                finally:
                    if writer is not None:
                        writer.close()
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return written
