"""How to read a matrix: one frozen object, parsed and validated once at the boundary.

Every analysis (``fit``, ``spectrum``, ``isotropy``, ``whiten``, ``batch``) takes its reading
options as a :class:`ReadOptions`; the library functions and the CLI build it with
:meth:`ReadOptions.create`, which checks every value and names the bad one.
"""

from __future__ import annotations

import inspect
import math
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from spectra_cli.errors import OptionError, describe_choices, param
from spectra_cli.sources.select import RowSpec

PRECISIONS = ("float64", "float32")
ENGINES = ("local", "dask")
DEFAULT_BLOCK_ROWS = 8192
#: The default memory budget is this fraction of the machine's physical memory.
MEMORY_FRACTION = 0.5


def physical_memory() -> int:
    """Bytes of physical memory (a generous fallback where the OS does not say)."""
    try:
        return int(os.sysconf("SC_PAGE_SIZE")) * int(os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError, AttributeError):  # pragma: no cover - non-POSIX
        return 16 << 30


def parse_bytes(text: str | int | None) -> int | None:
    """``"8GB"``, ``"512MiB"``, ``"1e9"`` or an int -> bytes (None stays None)."""
    if text is None or isinstance(text, int) and not isinstance(text, bool):
        if isinstance(text, int) and text <= 0:
            raise OptionError(f"{param('max_memory', text)} must be a positive number of bytes.")
        return text
    import re

    m = re.fullmatch(r"\s*([0-9.]+(?:[eE][0-9]+)?)\s*([kKmMgGtT]?)(i?)[bB]?\s*", str(text))
    if not m:
        raise OptionError(f"{param('max_memory', text)} is not a size such as 8GB, 512MiB or 2e9.")
    unit = {"": 0, "k": 1, "m": 2, "g": 3, "t": 4}[m.group(2).lower()]
    base = 1024 if m.group(3) or unit == 0 else 1000
    try:
        value = float(m.group(1)) * base**unit
    except ValueError:
        raise OptionError(f"{param('max_memory', text)} is not a size such as 8GB, 512MiB or 2e9.") from None
    if not math.isfinite(value) or value < 1:
        raise OptionError(f"{param('max_memory', text)} must be a positive number of bytes.")
    return int(value)


def _check_int(name: str, value: Any, *, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int | np.integer):
        raise OptionError(f"{param(name, value, show=True)} must be an integer.")
    if value < minimum:
        what = "0 or a positive integer" if minimum == 0 else f"at least {minimum}"
        raise OptionError(f"{param(name, value)} must be {what}.")
    return int(value)


@dataclass(frozen=True, slots=True)
class ReadOptions:
    """Which rows and weights to read, and how to accumulate them.

    Attributes:
        key: array inside a ``.npz`` archive.
        column / columns: Parquet vector column, or numeric columns one feature each.
        rows: the row range and sample (``--rows``, ``--sample``, ``--seed``).
        weights: a path of a 1-D ``.npy`` of row weights, or an array of them.
        weight_column: a Parquet column of row weights.
        logits / temperature: row weights ``softmax(z / T)`` from a 1-D ``.npy`` of scores.
        centered: covariance (True) or uncentred second moment (False).
        ddof: delta degrees of freedom of the unweighted covariance.
        precision: arithmetic of the products, ``float64`` or ``float32``.
        block_rows: rows per streamed block (None: 8192, fewer for wide rows; see Input.block_rows).
        drop_nonfinite: skip rows with NaN/inf (counted) instead of failing.
        max_memory: bytes the run's matrices may take (None: half the physical memory).
        positions / pool / mask / positions_per_window: how a sequence dump becomes rows
            (see :mod:`spectra_cli.sources.sequence`); None and ``tokens``: all positions, flattened.
    """

    key: str | None = None
    column: str | None = None
    columns: tuple[str, ...] | None = None
    rows: RowSpec = RowSpec()
    weights: str | np.ndarray | None = None
    weight_column: str | None = None
    logits: str | None = None
    temperature: float = 1.0
    centered: bool = True
    ddof: int = 1
    precision: str = "float64"
    block_rows: int | None = None
    drop_nonfinite: bool = False
    max_memory: int | None = None
    positions: str | tuple[int, ...] | None = None
    pool: str = "tokens"
    mask: Any = None
    positions_per_window: int | None = None
    doc_column: str | None = None
    mask_column: str | None = None
    engine: str = "local"
    scheduler: str | None = None
    workers: int | None = None

    @classmethod
    def of(cls, arguments: Mapping[str, Any]) -> ReadOptions:
        """From a public function's keyword arguments (its ``locals()`` on entry): the reading
        keywords among them, each with the value the caller gave; the others keep their defaults."""
        return cls.create(**{k: arguments[k] for k in _READ_KEYWORDS if k in arguments})

    @staticmethod
    def keywords() -> tuple[str, ...]:
        """The keywords of :meth:`create`."""
        return _READ_KEYWORDS

    @classmethod
    def create(
        cls,
        *,
        key: str | None = None,
        column: str | None = None,
        columns: list[str] | tuple[str, ...] | None = None,
        rows: str | None = None,
        sample: int | None = None,
        seed: int = 0,
        weights: Any = None,
        weight_column: str | None = None,
        logits: str | None = None,
        temperature: float = 1.0,
        centered: bool = True,
        ddof: int = 1,
        precision: str = "float64",
        block_rows: int | None = None,
        drop_nonfinite: bool = False,
        max_memory: int | str | None = None,
        positions: str | list[int] | tuple[int, ...] | None = None,
        pool: str = "tokens",
        mask: Any = None,
        positions_per_window: int | None = None,
        doc_column: str | None = None,
        mask_column: str | None = None,
        engine: str = "local",
        scheduler: str | None = None,
        workers: int | None = None,
    ) -> ReadOptions:
        """Validate every value once; the error names the parameter (or flag) and what is allowed."""
        if precision not in PRECISIONS:
            raise OptionError(f"{param('precision', precision)} is not one of {', '.join(PRECISIONS)}.")
        ddof = _check_int("ddof", ddof, minimum=0)
        if block_rows is not None:
            block_rows = _check_int("block_rows", block_rows, minimum=1)
        seed = _check_int("seed", seed, minimum=0)
        if sample is not None:
            sample = _check_int("sample", sample, minimum=-(1 << 62))  # an integer; RowSpec says why < 1 is bad
        if sum(x is not None for x in (weights, weight_column, logits)) > 1:
            raise OptionError(f"use one of {param('weights')}, {param('weight_column')} and {param('logits')}, "
                              "not several.")
        if logits is not None and (not isinstance(temperature, int | float) or not temperature > 0
                                   or not math.isfinite(temperature)):
            raise OptionError(f"{param('temperature', temperature)} must be a positive number.")
        if weights is not None and not isinstance(weights, str | os.PathLike):
            weights = _weights_array(weights)
        elif weights is not None:
            weights = os.fspath(weights)
        if columns is not None:
            if isinstance(columns, str):
                columns = [c.strip() for c in columns.split(",") if c.strip()]
            columns = tuple(columns) or None
        for name, value in (("key", key), ("column", column), ("weight_column", weight_column), ("logits", logits)):
            if value is not None and not isinstance(value, str):
                raise OptionError(f"{param(name, value, show=True)} must be a string.")
        from spectra_cli.sources.sequence import check_pool

        check_pool(pool)
        check_choice("engine", engine, ENGINES)
        if workers is not None:
            workers = _check_int("workers", workers, minimum=1)
        if engine != "dask" and (scheduler is not None or workers is not None):
            raise OptionError(f"{param('scheduler')} and {param('workers')} choose the Dask cluster of "
                              f"{param('engine', 'dask')}.")
        if engine == "dask" and sample is not None:
            raise OptionError(f"{param('sample')} is not supported with {param('engine', 'dask')} (a sample needs "
                              "the whole row range in one place); select a row range or run locally.")
        if positions_per_window is not None:
            positions_per_window = _check_int("positions_per_window", positions_per_window, minimum=1)
        if doc_column is not None and (positions_per_window is None or weight_column is not None):
            raise OptionError(f"{param('doc_column')} regroups Parquet token rows into windows: it needs "
                              f"{param('positions_per_window')} L and no {param('weight_column')}.")
        if mask is not None and not isinstance(mask, str):
            mask = os.fspath(mask) if isinstance(mask, os.PathLike) else mask
        return cls(key=key, column=column, columns=columns, rows=RowSpec.parse(rows, sample, seed), weights=weights,
                   weight_column=weight_column, logits=logits, temperature=float(temperature),
                   centered=bool(centered), ddof=ddof, precision=precision, block_rows=block_rows,
                   drop_nonfinite=bool(drop_nonfinite), max_memory=parse_bytes(max_memory),
                   positions=tuple(positions) if isinstance(positions, list) else positions, pool=pool, mask=mask,
                   positions_per_window=positions_per_window, doc_column=doc_column, mask_column=mask_column,
                   engine=engine, scheduler=scheduler, workers=workers)

    @property
    def sequence(self) -> bool:
        """Whether the sequence options ask for anything but the default (all positions, tokens)."""
        return (self.positions is not None or self.pool != "tokens" or self.mask is not None
                or self.positions_per_window is not None or self.doc_column is not None
                or self.mask_column is not None)

    @property
    def dtype(self) -> np.dtype:
        """The dtype of the products."""
        return np.dtype(np.float32 if self.precision == "float32" else np.float64)

    @property
    def weighted(self) -> bool:
        return self.weights is not None or self.weight_column is not None or self.logits is not None

    def memory_budget(self) -> int:
        return self.max_memory if self.max_memory is not None else int(physical_memory() * MEMORY_FRACTION)

    def weights_description(self) -> dict[str, Any] | None:
        if self.logits is not None:
            return {"logits": self.logits, "temperature": self.temperature, "normalised": "p = softmax(z / T)"}
        if isinstance(self.weights, str):
            return {"file": self.weights, "normalised": "p = w / sum w"}
        if self.weight_column is not None:
            return {"column": self.weight_column, "normalised": "p = w / sum w"}
        if self.weights is not None:
            return {"array": True, "normalised": "p = w / sum w"}
        return None

    def to_report(self) -> dict[str, Any]:
        """The options that change a number, as the report's ``options`` section states them."""
        wdesc = self.weights_description()
        return {
            "centered": self.centered,
            "ddof": self.ddof if self.centered and wdesc is None else None,
            "weights": wdesc,
            "precision": self.precision,
            "block_rows": self.block_rows,
            "drop_nonfinite": self.drop_nonfinite,
            **({"positions": self.positions if isinstance(self.positions, str | None) else list(self.positions),
                "pool": self.pool, "mask": self.mask if isinstance(self.mask, str | None) else "array",
                "positions_per_window": self.positions_per_window, "doc_column": self.doc_column,
                "mask_column": self.mask_column}
               if self.sequence else {}),
        }


def _weights_array(weights: Any) -> np.ndarray:
    from spectra_cli.inputs import as_array

    w = as_array(weights, what="weights")
    if w.ndim != 1:
        raise OptionError(f"{param('weights')} has shape {w.shape}; a 1-D array of one weight per row is required.")
    if w.dtype.kind not in "fiu":
        raise OptionError(f"{param('weights')} has dtype {w.dtype}; numeric weights are required.")
    return np.asarray(w, dtype=np.float64)


def check_choice(name: str, value: str, allowed: tuple[str, ...]) -> str:
    if value not in allowed:
        raise OptionError(f"{param(name)} {describe_choices(value, allowed)}.")
    return value


#: The keywords of :meth:`ReadOptions.create` (what :meth:`ReadOptions.of` picks from a call's arguments).
_READ_KEYWORDS = tuple(p for p in inspect.signature(ReadOptions.create).parameters if p != "cls")
