"""Row selection (`--rows`, `--sample`) and external row weights, applied to any source."""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from spectra_cli.errors import InputError, OptionError, param
from spectra_cli.sources import formats
from spectra_cli.sources.base import Source
from spectra_cli.validate import int_of


@dataclass(frozen=True, slots=True)
class Block:
    """Consecutive selected rows: data, optional weights, and the source row of each row."""

    X: np.ndarray
    w: np.ndarray | None
    first_row: int
    rows: np.ndarray | None = None  # source row ids when rows were sampled

    def row_id(self, i: int) -> int:
        return int(self.rows[i]) if self.rows is not None else self.first_row + i


@dataclass(frozen=True, slots=True)
class RowSpec:
    """Which rows to use: a half-open range and an optional uniform sample of it."""

    start: int | None = None
    stop: int | None = None
    sample: int | None = None
    seed: int = 0

    @classmethod
    def parse(cls, rows: str | None, sample: int | None, seed: int) -> RowSpec:
        start = stop = None
        if rows is not None:
            m = re.fullmatch(r"\s*(\d*)\s*:\s*(\d*)\s*", rows)
            if not m:
                raise OptionError(f"{param('rows', rows)} is not START:STOP (e.g. 0:10000, :5000, 1000:).")
            start = int_of("rows", m.group(1), rows) if m.group(1) else None
            stop = int_of("rows", m.group(2), rows) if m.group(2) else None
            if start is not None and stop is not None and stop <= start:
                raise OptionError(f"{param('rows', rows)} selects no rows (STOP must be greater than START).")
        if sample is not None and sample < 1:
            raise OptionError(f"{param('sample', sample)} must be a positive number of rows.")
        return cls(start, stop, sample, seed)

    def resolve(self, n_rows: int) -> tuple[int, int]:
        start = 0 if self.start is None else self.start
        stop = n_rows if self.stop is None else min(self.stop, n_rows)
        if start >= n_rows and n_rows > 0:
            raise InputError(f"{param('rows')} starts at {start} but the input has only {n_rows} rows.")
        return start, max(stop, start)

    def n_selected(self, n_rows: int) -> int:
        start, stop = self.resolve(n_rows)
        if self.sample is None:
            return stop - start
        return min(self.sample, stop - start)

    def to_dict(self) -> dict[str, Any]:
        return {
            "rows": None if self.start is None and self.stop is None else
            f"{'' if self.start is None else self.start}:{'' if self.stop is None else self.stop}",
            "sample": self.sample,
            "seed": self.seed if self.sample is not None else None,
        }


class WeightsFile:
    """A 1-D ``.npy`` of per-row weights, read block by block with positioned reads (never
    memory-mapped: a weights file truncated during the run is an input error, not a SIGBUS)."""

    def __init__(self, path: str, n_rows: int, *, what: str = "weights") -> None:
        from spectra_cli.sources.npy import Vector

        self.path = path
        one = "score" if what == "logits" else "weight"
        if not formats.NPY.matches(path):
            raise InputError(f"{what} file {path} must be a 1-D .npy array of one {one} per row.")
        self._v = Vector(path, what)
        if self._v.dtype.kind not in "fiu":
            raise InputError(f"{what} file {path} has dtype {self._v.dtype}; numeric {one}s are required.")
        if self._v.size != n_rows:
            raise InputError(
                f"{what} file {path} has {self._v.size} {one}s but the input has {n_rows} rows; "
                f"one {one} per row is required."
            )

    def slice(self, lo: int, hi: int) -> np.ndarray:
        return self._v.read(lo, hi)

    def take(self, idx: np.ndarray) -> np.ndarray:
        """Weights of sorted row ids (one read of the span they cover, within one block)."""
        if not idx.size:
            return np.zeros(0)
        lo = int(idx[0])
        return self._v.read(lo, int(idx[-1]) + 1)[idx - lo]


class WeightsArray:
    """Row weights given as an in-memory array (library use)."""

    def __init__(self, w: np.ndarray, n_rows: int) -> None:
        self.path = "<array>"
        if len(w) != n_rows:
            raise InputError(f"weights has {len(w)} values but the input has {n_rows} rows; one weight per row "
                             "is required.")
        self._w = np.asarray(w, dtype=np.float64)

    def slice(self, lo: int, hi: int) -> np.ndarray:
        return self._w[lo:hi]

    def take(self, idx: np.ndarray) -> np.ndarray:
        return self._w[idx]


def iter_selected(
    source: Source, spec: RowSpec, block_rows: int,
    weights: WeightsFile | LogitsWeights | WeightsArray | None = None,
) -> Iterator[Block]:
    """Yield the selected rows of ``source`` in blocks of at most ``block_rows``.

    A sample is drawn uniformly without replacement (numpy ``default_rng(seed)``), sorted,
    and picked out of consecutive blocks, so memory stays O(sample + block).
    """
    n = source.info.n_rows
    start, stop = spec.resolve(n)
    if spec.sample is None or spec.sample >= stop - start:
        for X, w in source.iter_blocks(start, stop, block_rows):
            lo = start
            start += len(X)
            if weights is not None:
                w = weights.slice(lo, lo + len(X))
            yield Block(X, w, lo)
        return
    rng = np.random.default_rng(spec.seed)
    chosen = np.sort(rng.choice(stop - start, size=spec.sample, replace=False)) + start
    # The source is read in larger blocks (about SAMPLE_READ_BYTES of float64 rows); the picked rows are handed
    # on in blocks of exactly ``block_rows``, as a range would be: the first pass plans its bootstrap groups and
    # the row norms' blocks on that count (one picked row a block had put every row's norm at 0 and nearly every
    # row into one group).
    read_rows = max(block_rows, SAMPLE_READ_BYTES // max(8 * source.info.n_features, 1))
    pending: list[tuple[np.ndarray, np.ndarray | None, np.ndarray]] = []
    held = 0
    pos = start
    for X, w in source.iter_blocks(start, stop, read_rows):
        lo, hi = pos, pos + len(X)
        pos = hi
        a, b = np.searchsorted(chosen, [lo, hi])
        if a == b:
            continue
        ids = chosen[a:b]
        local = ids - lo
        ws = w[local] if w is not None else None
        pending.append((X[local], weights.take(ids) if weights is not None else ws, ids))
        held += len(ids)
        while held >= block_rows:
            yield _take_block(pending, block_rows)
            held -= block_rows
    while pending:
        yield _take_block(pending, block_rows)


#: Bytes of float64 rows read at a time while picking a sample out of a source.
SAMPLE_READ_BYTES = 16 << 20


def _take_block(pending: list[tuple[np.ndarray, np.ndarray | None, np.ndarray]], size: int) -> Block:
    """The first ``size`` picked rows held in ``pending`` (fewer at the end), as one block; the rest stay."""
    parts: list[tuple[np.ndarray, np.ndarray | None, np.ndarray]] = []
    need = size
    while pending and need:
        X, w, ids = pending[0]
        if len(ids) <= need:
            parts.append(pending.pop(0))
            need -= len(ids)
        else:
            parts.append((X[:need], None if w is None else w[:need], ids[:need]))
            pending[0] = (X[need:], None if w is None else w[need:], ids[need:])
            need = 0
    ids = np.concatenate([p[2] for p in parts])
    X = parts[0][0] if len(parts) == 1 else np.concatenate([p[0] for p in parts])
    ws = [p[1] for p in parts]
    w = None if ws[0] is None else (ws[0] if len(ws) == 1 else np.concatenate(ws))  # type: ignore[arg-type]
    return Block(X, w, int(ids[0]), ids)


class LogitsWeights:
    """Row weights ``p = softmax(z / T)`` from a 1-D ``.npy`` of scores (a soft token: a softmax-weighted average;
    see docs/numbers.md, "Weights").

    The normaliser ``log sum exp(z / T)`` is found in one pass over the scores;
    blocks then get ``exp(z / T - lse)``, so no score overflows.
    """

    def __init__(self, path: str, n_rows: int, temperature: float) -> None:
        if not temperature > 0 or not np.isfinite(temperature):
            raise OptionError(f"{param('temperature', temperature)} must be a positive number.")
        self.path = path
        self.temperature = float(temperature)
        base = WeightsFile(path, n_rows, what="logits")
        lse = -np.inf
        for lo in range(0, n_rows, 1 << 20):
            chunk = base.slice(lo, min(lo + (1 << 20), n_rows)) / self.temperature
            bad = np.flatnonzero(~np.isfinite(chunk))
            if bad.size:
                raise InputError(f"logits file {path} has a non-finite score at row {lo + int(bad[0])}.")
            top = float(chunk.max())
            lse = float(np.logaddexp(lse, top + np.log(np.sum(np.exp(chunk - top)))))
        self._z = base
        self._lse = lse

    def slice(self, lo: int, hi: int) -> np.ndarray:
        return np.exp(self._z.slice(lo, hi) / self.temperature - self._lse)

    def take(self, idx: np.ndarray) -> np.ndarray:
        return np.exp(self._z.take(idx) / self.temperature - self._lse)
