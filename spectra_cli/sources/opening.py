"""What an input is, said once (:func:`open_input`), before any command reads it: every command walks down from
here (``run`` -> ``stream.passes.Input`` -> the sources), and none tells an input's kind again."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from spectra_cli.sources.dataset import Dataset, resolve

#: The kinds of input: eigenvalues computed elsewhere (``eigenvalues=True``), a Dask array (its chunks read on
#: the cluster), an Accumulator fed in this process (moments, no rows), moment files (merged, no rows), files of
#: rows (npy, Parquet, safetensors, remote: a :class:`~spectra_cli.sources.dataset.Dataset`), the change of a
#: matrix between two checkpoints (:class:`~spectra_cli.sources.change.Change`), rows in memory.
#: The inputs that are rows made from two sources (opened by their own ``open()``): a checkpoint's change, an adapter's.
CHANGES = (("spectra_cli.sources.change", "Change"), ("spectra_cli.run.tuning", "AdaptedRows"))
KINDS = ("eigenvalues", "dask array", "accumulator", "moment files", "files", "change", "array")


@dataclass(frozen=True)
class Opening:
    """An input with its kind (one of :data:`KINDS`) and, for files, its resolved dataset."""

    kind: str
    data: Any
    dataset: Dataset | None = None

    @property
    def rows(self) -> bool:
        """Whether rows can be read from it (not moments, nor eigenvalues)."""
        return self.kind in ("dask array", "files", "change", "array")


def as_dataset(data: Any) -> Dataset | None:
    """``data`` resolved as a :class:`Dataset` when it names files (a path, several, or a Dataset
    already); None for arrays and accumulators."""
    if isinstance(data, Dataset):
        return data
    if isinstance(data, str | os.PathLike) or (isinstance(data, list | tuple) and (not data or any(
            isinstance(p, str | os.PathLike) for p in data))):
        return resolve(data)  # a list with a path in it names files (each element checked there)
    return None


def _is_dask_array(obj: Any) -> bool:
    return type(obj).__module__.startswith("dask.array") and hasattr(obj, "to_delayed")


def _is_accumulator(obj: Any) -> bool:
    """An Accumulator, or one of its subclasses (told by the classes' names and modules: this floor does not import
    the streams)."""
    return any(c.__name__ == "Accumulator" and c.__module__ == "spectra_cli.stream.accumulator"
               for c in type(obj).__mro__)


def open_input(data: Any, *, eigenvalues: bool = False) -> Opening:
    """What ``data`` is (:data:`KINDS`), the one place it is told: an :class:`Opening` passes through unchanged;
    files are resolved into their dataset here (every path checked once)."""
    if isinstance(data, Opening):
        return data
    if eigenvalues:
        return Opening("eigenvalues", data)
    if _is_dask_array(data):
        return Opening("dask array", data)
    if _is_accumulator(data):
        return Opening("accumulator", data)
    if (type(data).__module__, type(data).__name__) in CHANGES:
        return Opening("change", data)
    dataset = as_dataset(data)
    if dataset is not None:
        return Opening("moment files" if dataset.is_moments else "files", data, dataset)
    return Opening("array", data)
