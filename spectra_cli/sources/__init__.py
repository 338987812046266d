"""Readers that turn a path into a :class:`Source` of row blocks."""

from __future__ import annotations

import os
from typing import Any

from spectra_cli.errors import InputError, OptionError, param
from spectra_cli.sources import formats
from spectra_cli.sources.base import DEFAULT_BLOCK_ROWS, Source, SourceInfo, fingerprint, is_glob
from spectra_cli.sources.rows import Block, LogitsWeights, RowSpec, WeightsFile, iter_selected

__all__ = [
    "DEFAULT_BLOCK_ROWS",
    "Block",
    "LogitsWeights",
    "RowSpec",
    "Source",
    "SourceInfo",
    "WeightsFile",
    "fingerprint",
    "iter_selected",
    "open_dataset",
    "open_source",
]


def open_source(
    path: str,
    *,
    key: str | None = None,
    column: str | None = None,
    columns: list[str] | None = None,
    weight_column: str | None = None,
) -> Source:
    """Open ``path`` by the format its extension names (:mod:`spectra_cli.sources.formats`), or as a
    directory/glob of Parquet files; a URL is read through fsspec (:mod:`spectra_cli.sources.remote`)."""
    from spectra_cli.sources import remote

    url = remote.is_url(path)
    exists = remote.exists if url else os.path.exists
    isdir = remote.isdir if url else os.path.isdir
    literal = not url and os.path.lexists(path)  # a local file whose name holds "::" is that file
    if ("::" in path and not literal) or formats.SAFETENSORS.matches(path):
        file, _, name = path.partition("::") if not literal else (path, "", "")
        if not exists(file):
            raise InputError(f"no such file or directory: {file}")
        if formats.NPZ.matches(file):
            from spectra_cli.sources.npy import NpzSource

            return NpzSource(file, name or key)
        from spectra_cli.sources.safetensors import SafetensorsSource

        return SafetensorsSource(file, name or None)
    if not url and (os.path.isdir(path) or is_glob(path)):
        # a local directory or glob names several files: one rule for them all (spectra_cli.sources.dataset)
        from spectra_cli.sources.dataset import resolve

        return open_dataset(resolve(path), key=key, column=column, columns=columns, weight_column=weight_column)
    globbed = url and remote.is_glob_url(path)
    if not globbed and not exists(path):
        raise InputError(f"no such file or directory: {path}")
    fmt = formats.by_path(path, formats.DATA)
    is_parquet = globbed or isdir(path) or fmt is formats.PARQUET
    if not is_parquet and (column or columns or weight_column):
        raise OptionError(f"{param('column')}, {param('columns')} and {param('weight_column')} apply to Parquet "
                          "input only.")
    if key is not None and fmt is not formats.NPZ:
        raise OptionError(f"{param('key')} applies to .npz archives only.")
    if fmt is formats.NPY:
        from spectra_cli.sources.npy import NpySource

        return NpySource(path)
    if fmt is formats.NPZ:
        from spectra_cli.sources.npy import NpzSource

        return NpzSource(path, key)
    if is_parquet:
        from spectra_cli.sources.parquet import ParquetSource

        return ParquetSource(path, column=column, columns=columns, weight_column=weight_column)
    ext = os.path.splitext(path)[1] or "(none)"
    raise InputError(
        f"unknown extension {ext} for {path}; spectra reads .npy, .npz, Parquet "
        "(.parquet files, a directory or a glob of them) and .safetensors."
    )


def open_dataset(
    dataset: Any,
    *,
    key: str | None = None,
    column: str | None = None,
    columns: list[str] | None = None,
    weight_column: str | None = None,
) -> Source:
    """The :class:`Source` of a resolved :class:`~spectra_cli.sources.dataset.Dataset` that is not
    moment files: several ``.npy`` members are one matrix, several Parquet members one dataset, and
    a single path is read by :func:`open_source`."""
    if dataset.kind == "single":
        return open_source(dataset.arguments[0], key=key, column=column, columns=columns,
                           weight_column=weight_column)
    if key is not None:
        raise OptionError(f"{param('key')} applies to .npz archives only.")
    files = dataset.member_paths()
    if dataset.kind == "npy":
        if column or columns or weight_column:
            raise OptionError(f"{param('column')}, {param('columns')} and {param('weight_column')} apply to Parquet "
                              "input only.")
        from spectra_cli.sources.npy import NpyDirSource, NpySource

        if len(files) == 1 and not os.path.isdir(dataset.arguments[0]):
            return NpySource(files[0])
        return NpyDirSource(dataset.name, files)
    from spectra_cli.sources.parquet import ParquetSource

    return ParquetSource(dataset.name, column=column, columns=columns, weight_column=weight_column, files=files)
