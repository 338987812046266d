"""A spectrum computed elsewhere: a 1-D ``.npy``, a JSON list (or a spectra report), or a CSV column."""

from __future__ import annotations

import csv
import os

import numpy as np

from spectra_cli.errors import InputError, param
from spectra_cli.sources import formats


def read_eigenvalues(path: str) -> np.ndarray:
    """Eigenvalues as float64 (any order; the caller sorts them)."""
    fmt = formats.by_path(path, (formats.NPY, formats.JSON, formats.CSV, formats.TSV))
    if fmt is formats.NPY:
        from spectra_cli.sources.npy import read_whole

        arr = read_whole(path, "eigenvalues file")
        if arr.ndim == 2 and 1 in arr.shape:
            arr = arr.ravel()
        if arr.ndim != 1:
            raise InputError(f"{path} has shape {arr.shape}; {param('eigenvalues')} needs a 1-D array of eigenvalues.")
        if arr.dtype.kind not in "fiu":
            raise InputError(f"{path} has dtype {arr.dtype}; eigenvalues must be real numbers.")
        values = arr.astype(np.float64)
    elif fmt is formats.JSON:
        from spectra_cli.sources.base import read_json as read

        doc = read(path, "eigenvalues file")
        if isinstance(doc, dict) and "eigenvalues" not in doc:
            from spectra_cli.documents import check_report_schema

            check_report_schema(doc, path)  # a report: one of the schema this spectra reads
        if isinstance(doc, dict):
            spec = doc.get("spectrum")
            doc = doc.get("eigenvalues", spec.get("eigenvalues") if isinstance(spec, dict) else None)
        if not isinstance(doc, list) or not all(isinstance(v, int | float) and not isinstance(v, bool)
                                                for v in doc):
            raise InputError(
                f"{path} must hold a JSON list of numbers (or an object with an 'eigenvalues' list)."
            )
        values = np.array(doc, dtype=np.float64)
    elif fmt is not None:  # a CSV or tab-separated column
        values = _read_column(path, tabs=fmt is formats.TSV)
    else:
        ext = os.path.splitext(path)[1] or "(none)"
        raise InputError(f"unknown extension {ext} for {param('eigenvalues')} {path}; use .npy, .json, .csv or .txt.")
    if values.size < 3:
        raise InputError(f"{path} holds {values.size} eigenvalue(s); at least 3 are required.")
    bad = np.flatnonzero(~np.isfinite(values))
    if bad.size:
        raise InputError(f"{path} has {bad.size} non-finite eigenvalue(s) (first at index {bad[0]}).")
    if not np.any(values > 0):
        raise InputError(f"{path} holds no positive eigenvalue ({values.size} values, the largest {values.max():.4g}): "
                         "a spectrum of a covariance or second-moment matrix has at least one.")
    return values


def _read_column(path: str, *, tabs: bool) -> np.ndarray:
    import io

    from spectra_cli.sources.base import open_regular

    out: list[float] = []
    dialect = csv.excel_tab if tabs else csv.excel
    try:
        with open_regular(path) as raw, io.TextIOWrapper(raw, encoding="utf-8", newline="") as f:
            for i, row in enumerate(csv.reader(f, dialect)):
                cells = [c.strip() for c in row if c.strip()]
                if not cells:
                    continue
                try:
                    out.append(float(cells[0]))
                except ValueError:
                    if i == 0 and not out:
                        continue  # a header line
                    raise InputError(f"{path} line {i + 1}: {cells[0][:40]!r} is not a number.") from None
    except UnicodeDecodeError as exc:
        raise InputError(f"{path} is not UTF-8 text ({exc.reason} at byte {exc.start}).") from None
    except csv.Error as exc:
        raise InputError(f"{path} is not a readable CSV column: {exc}.") from None
    return np.array(out, dtype=np.float64)
