"""How to read a matrix: one frozen object, parsed and validated once at the boundary.

Every analysis (``fit``, ``spectrum``, ``isotropy``, ``whiten``, ``batch``) takes its reading
options as a :class:`ReadOptions`; the library functions and the CLI build it with
:meth:`ReadOptions.create`, which checks every value and names the bad one.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, TypedDict, Unpack

import numpy as np

from spectra_cli.errors import InputError, OptionError, param
from spectra_cli.sources.rows import RowSpec
from spectra_cli.threads import check_threads
from spectra_cli.validate import check_bool, check_choice, check_int, check_number, check_str, product_dtype

ENGINES = ("local", "dask")
#: How ``fit --population`` has its interval below n/d = 10 (the fit keyword ``population_route``): "analytic", from the
#: central limit theorem of linear spectral statistics (simulated only where it does not hold, said in the notes);
#: "simulate", from samples simulated from the fitted population always (the check).
POPULATION_ROUTES = ("analytic", "simulate")


class Convention(StrEnum):
    """Whose definitions a fit follows (the fit keyword ``convention``), told apart here once: code asks
    :attr:`is_weightwatcher`, never compares the raw string.

    ``spectra``: its own defaults. ``weightwatcher``: WeightWatcher's ``analyze()`` (uncentred ``W^T W``,
    the density exponent, its layer selection and tiny-eigenvalue cut, its column names and verdicts).
    """

    SPECTRA = "spectra"
    WEIGHTWATCHER = "weightwatcher"

    @property
    def is_weightwatcher(self) -> bool:
        return self is Convention.WEIGHTWATCHER

    @classmethod
    def of(cls, value: object) -> Convention:
        """The convention ``value`` names (a member or its string; anything else, None included, is
        ``spectra``: a value given is checked where it is given, by the fit keywords' constraints)."""
        return cls.WEIGHTWATCHER if value == cls.WEIGHTWATCHER.value else cls.SPECTRA

    @classmethod
    def of_report(cls, doc: Mapping[str, Any]) -> Convention:
        """The convention a report (or a batch's line) was made under: its ``options.convention``."""
        options = doc.get("options")
        return cls.of(options.get("convention") if isinstance(options, Mapping) else None)
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


def memory_budget(max_memory: int | None) -> int:
    """Bytes a run's matrices may take: ``max_memory``, or by default half the physical memory."""
    return max_memory if max_memory is not None else int(physical_memory() * MEMORY_FRACTION)


def gib(nbytes: float) -> str:
    """A size as people read it: GiB from 0.1 GiB up, else MiB, KiB or bytes."""
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if nbytes >= (1 << shift) * (0.1 if unit == "GiB" else 1):
            value = nbytes / (1 << shift)
            return f"{value:,.0f} {unit}" if value >= 1000 else f"{value:.3g} {unit}"
    return f"{nbytes:.0f} bytes"


def refuse_over_budget(where: str, what_needs: str, need: float, what: str, budget: int, *,
                       fewer: str = "select fewer features") -> None:
    """The one memory-budget refusal: the size needed, what it is, the budget and the option that
    raises it (an InputError before anything of that size is allocated); ``fewer``: the other way out."""
    if need > budget:
        raise InputError(f"{where}: {what_needs} needs about {gib(need)} ({what}); the memory budget is "
                         f"{gib(budget)}. Raise it with {param('max_memory')} (e.g. {gib(need * 1.2)}) on a machine "
                         f"that has it, or {fewer}.")


class SourceKeywords(TypedDict, total=False):
    """Where the rows are and how a sequence dump becomes rows: the reading keywords every command
    takes (``spectra_cli.sequence`` takes only these). Documented in :mod:`spectra_cli.run.matrix`."""

    key: str | None
    column: str | None
    columns: str | list[str] | tuple[str, ...] | None
    block_rows: int | None
    max_memory: int | str | None
    positions: str | list[int] | tuple[int, ...] | None
    pool: str
    mask: Any
    positions_per_window: int | None
    doc_column: str | None
    mask_column: str | None
    threads: int | None


class ReadKeywords(SourceKeywords, total=False):
    """Every reading keyword: the one declaration behind :meth:`ReadOptions.create`, the signatures of
    ``fit``, ``spectrum``, ``isotropy``, ``accumulate``, ``moments`` and ``whiten`` (as ``**read:
    Unpack[ReadKeywords]``, so a type checker checks every caller) and the CLI's reading options
    (:mod:`spectra_cli.cli.flags`)."""

    rows: str | None
    sample: int | None
    seed: int
    weights: Any
    weight_column: str | None
    logits: str | None
    temperature: float
    centered: bool
    ddof: int
    precision: str
    drop_nonfinite: bool
    engine: str
    scheduler: str | None
    workers: int | None
    connect_timeout: float


def _is_default(value: Any, default: Any) -> bool:
    return value is default or (not isinstance(value, np.ndarray) and type(value) is type(default)
                                and value == default)


#: Reading keywords that cannot apply to ``isotropy`` and ``accumulate`` (and ``moments``), and why (refused by name).
ISOTROPY_REFUSES = {"centered": "does not apply: isotropy is measured on the centred covariance",
                    "ddof": "does not apply: isotropy's covariance is centred with ddof 1"}
ACCUMULATE_REFUSES = {"centered": "applies when moments are analysed (fit, spectrum), not when they are accumulated",
                      "ddof": "applies when moments are analysed (fit, spectrum), not when they are accumulated"}
#: Reading keywords that cannot apply to ``whiten``, and why (refused by name).
WHITEN_REFUSES = {
    "centered": "does not apply: whitening centres the rows on their mean",
    "precision": "does not apply: the whitening transform is computed in float64",
    "engine": "does not apply: whiten writes its rows in order from one process (the local engine)",
    "scheduler": "does not apply: whiten runs locally",
    "connect_timeout": "does not apply: whiten runs locally",
    "workers": "does not apply: whiten runs locally",
}
#: ``sequence`` reads every position of its windows.
SEQUENCE_REFUSES = {"pool": "does not apply: sequence reads every position of its windows (use fit or spectrum "
                            "for pooled rows)"}


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
        precision: arithmetic of the products (and of the eigensolver from d = 3,072), ``float64`` or
            ``float32``.
        block_rows: rows per streamed block (None: 8192, fewer for wide rows; see Input.block_rows).
        drop_nonfinite: skip rows with NaN/inf (counted) instead of failing.
        max_memory: bytes the run's matrices may take (None: half the physical memory).
        positions / pool / mask / positions_per_window: how a sequence dump becomes rows
            (see :mod:`spectra_cli.sources.windows`); None and ``tokens``: all positions, flattened.
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
    connect_timeout: float = 5.0
    threads: int | None = None

    @staticmethod
    def keywords() -> tuple[str, ...]:
        """The reading keywords (of :class:`ReadKeywords`): what every library function takes."""
        return READ_KEYWORDS

    @classmethod
    def create(cls, *, refuse: Mapping[str, str] | None = None, **kw: Unpack[ReadKeywords]) -> ReadOptions:
        """Validate every value once; the error names the parameter (or flag) and what is allowed.

        ``refuse`` maps the keywords that cannot apply to the caller to why: each one given (with a
        value other than its default) is an OptionError naming it, never silently ignored."""
        unknown = [k for k in kw if k not in READ_DEFAULTS]
        if unknown:
            raise TypeError(f"unexpected reading keyword {unknown[0]!r}; valid: {', '.join(READ_KEYWORDS)}.")
        for name, why in (refuse or {}).items():
            if name in kw and not _is_default(kw[name], READ_DEFAULTS[name]):  # type: ignore[literal-required]
                raise OptionError(f"{param(name)} {why}.")
        v: dict[str, Any] = {**READ_DEFAULTS, **kw}
        key, column, columns, rows, sample, seed = (v["key"], v["column"], v["columns"], v["rows"], v["sample"],
                                                    v["seed"])
        weights, weight_column, logits, temperature = v["weights"], v["weight_column"], v["logits"], v["temperature"]
        centered, ddof, precision, block_rows = v["centered"], v["ddof"], v["precision"], v["block_rows"]
        drop_nonfinite, max_memory, positions, pool, mask = (v["drop_nonfinite"], v["max_memory"], v["positions"],
                                                             v["pool"], v["mask"])
        centered, drop_nonfinite = check_bool("centered", centered), check_bool("drop_nonfinite", drop_nonfinite)
        positions_per_window, doc_column, mask_column = v["positions_per_window"], v["doc_column"], v["mask_column"]
        engine, scheduler, workers = v["engine"], v["scheduler"], v["workers"]
        connect_timeout = check_number("connect_timeout", v["connect_timeout"], positive=True)
        if connect_timeout > 600:
            raise OptionError(f"{param('connect_timeout', connect_timeout)} must be at most 600 seconds.")
        threads = check_int("threads", v["threads"], minimum=1, what="a positive number of threads") \
            if v["threads"] is not None else None
        check_threads(threads)  # (and at most the threads a run may be given: the pools' own bound)
        product_dtype(precision)  # one of PRECISIONS
        ddof = check_int("ddof", ddof, minimum=0)
        if block_rows is not None:
            block_rows = check_int("block_rows", block_rows, minimum=1)
        seed = check_int("seed", seed, minimum=0)
        if sample is not None:
            sample = check_int("sample", sample, minimum=-(1 << 62))  # an integer; RowSpec says why < 1 is bad
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
        for name, value in (("key", key), ("column", column), ("weight_column", weight_column), ("logits", logits),
                            ("doc_column", doc_column), ("mask_column", mask_column), ("scheduler", scheduler)):
            check_str(name, value)
        from spectra_cli.sources.windows import check_pool

        check_pool(pool)
        check_choice("engine", engine, ENGINES)
        if workers is not None:
            workers = check_int("workers", workers, minimum=1)
        if engine == "local" and (scheduler is not None or workers is not None):
            raise OptionError(f"{param('scheduler')} and {param('workers')} choose the Dask cluster of "
                              f"{param('engine', 'dask')}.")
        if engine != "local" and sample is not None:
            raise OptionError(f"{param('sample')} is not supported with {param('engine', 'dask')} (a sample needs "
                              "the whole row range in one place); select a row range or run locally.")
        if positions_per_window is not None:
            positions_per_window = check_int("positions_per_window", positions_per_window, minimum=1)
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
                   engine=engine, scheduler=scheduler, workers=workers, connect_timeout=connect_timeout,
                   threads=threads)

    @property
    def sequence(self) -> bool:
        """Whether the sequence options ask for anything but the default (all positions, tokens)."""
        return (self.positions is not None or self.pool != "tokens" or self.mask is not None
                or self.positions_per_window is not None or self.doc_column is not None
                or self.mask_column is not None)

    @property
    def distributed(self) -> bool:
        """Whether the passes run as Dask tasks: the one place the engine is chosen (``Input``
        asks this; no other module compares engine names)."""
        return self.engine == "dask"

    @property
    def dtype(self) -> np.dtype:
        """The dtype of the products."""
        return product_dtype(self.precision)

    @property
    def weighted(self) -> bool:
        return self.weights is not None or self.weight_column is not None or self.logits is not None

    def memory_budget(self) -> int:
        return memory_budget(self.max_memory)

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
    from spectra_cli.sources.in_memory import as_array

    w = as_array(weights, what="weights")
    if w.ndim != 1:
        raise OptionError(f"{param('weights')} has shape {w.shape}; a 1-D array of one weight per row is required.")
    if w.dtype.kind not in "fiu":
        raise OptionError(f"{param('weights')} has dtype {w.dtype}; numeric weights are required.")
    return np.asarray(w, dtype=np.float64)


#: The default of every reading keyword (a keyword left out takes it): the dataclass's own, and for
#: the row selection (one ``RowSpec`` field) those of ``rows``, ``sample`` and ``seed``.
READ_DEFAULTS: dict[str, Any] = {
    name: ({"rows": None, "sample": None, "seed": 0}[name] if name in ("rows", "sample", "seed")
           else ReadOptions.__dataclass_fields__[name].default)
    for name in ReadKeywords.__annotations__
}
READ_KEYWORDS = tuple(READ_DEFAULTS)
SOURCE_KEYWORDS = tuple(SourceKeywords.__annotations__)
