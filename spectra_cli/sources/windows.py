"""Sequence dumps ``(windows, positions, features)``: which positions, and how they become rows.

A 3-D array (or 2-D token rows regrouped into consecutive windows of ``L``) is read window by
window through its base source. ``positions`` selects positions (a slice ``1:`` or a list
``0,2,5``); ``pool`` makes the rows: ``tokens`` (every selected position of every window, the
default: "all positions, flattened"), ``mean`` (one row per window, the mean over its selected
positions), ``first`` or ``last`` (the first or last selected position of each window). An optional
mask ``(windows, positions)`` marks the real tokens (True) against padding (False); padded tokens
are left out of every statistic, and a window with no real selected token gives no pooled row.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from spectra_cli.errors import InputError, OptionError, describe_choices, param
from spectra_cli.sources.base import Source, SourceInfo
from spectra_cli.validate import check_int, int_of

POOLS = ("tokens", "mean", "first", "last")


def parse_positions(text: str | list[int] | tuple[int, ...] | None, length: int) -> list[int]:
    """``"1:"``, ``":8"``, ``"0:32:2"``, ``"0,2,5"`` or a list -> sorted distinct positions in ``[0, L)``."""
    if text is None:
        return list(range(length))
    if isinstance(text, list | tuple):
        items = list(text)
    else:
        t = str(text).strip()
        m = re.fullmatch(r"(-?\d*)\s*:\s*(-?\d*)(?:\s*:\s*(\d+))?", t)
        if m:
            if "-" in (m.group(1), m.group(2)):
                raise OptionError(f"{param('positions', text)} is not a slice (1:, 0:16) or a list (0,2,5) of "
                                  "positions.")
            start = int_of("positions", m.group(1), t) if m.group(1) else None
            stop = int_of("positions", m.group(2), t) if m.group(2) else None
            step = int_of("positions", m.group(3), t) if m.group(3) else None
            if step == 0:
                raise OptionError(f"{param('positions', text)}: the step must be positive.")
            items = list(range(length))[slice(start, stop, step)]
        else:
            try:
                items = [int_of("positions", v.strip(), t) for v in t.split(",") if v.strip()]
            except OptionError:
                raise
            except ValueError:
                raise OptionError(f"{param('positions', text)} is not a slice (1:, 0:16) or a list (0,2,5) of "
                                  "positions.") from None
    out = []
    for p in items:
        if isinstance(p, bool) or not isinstance(p, int | np.integer):
            raise OptionError(f"{param('positions', text, show=True)} must hold integers.")
        q = int(p) + length if int(p) < 0 else int(p)
        if not 0 <= q < length:
            raise OptionError(f"{param('positions', text)}: position {p} is outside 0..{length - 1}.")
        out.append(q)
    out = sorted(set(out))
    if not out:
        raise OptionError(f"{param('positions', text)} selects no position of {length}.")
    return out


def check_pool(pool: str) -> str:
    if pool not in POOLS:
        raise OptionError(f"{param('pool')} {describe_choices(pool, POOLS)}.")
    return pool


@dataclass(frozen=True, slots=True)
class Layout:
    """How a sequence dump is read: windows of ``length`` positions of ``d`` features."""

    windows: int
    length: int
    d: int
    positions: tuple[int, ...]
    pool: str
    dropped_tokens: int  # tokens past the last whole window (regrouped token rows)

    def describe(self) -> str:
        pos = ("all positions" if len(self.positions) == self.length
               else f"positions {_ranges(self.positions)} of {self.length}")
        how = {"tokens": "flattened to tokens", "mean": "mean over positions per window",
               "first": "first selected position per window", "last": "last selected position per window"}
        return f"sequence ({self.windows} windows x {self.length} positions): {pos}, {how[self.pool]}"


def _ranges(pos: tuple[int, ...]) -> str:
    out, start, prev = [], pos[0], pos[0]
    for p in (*pos[1:], None):
        if p is not None and p == prev + 1:
            prev = p
            continue
        out.append(f"{start}" if start == prev else f"{start}..{prev}")
        if p is not None:
            start = prev = p
    return ",".join(out)


def load_mask(mask: Any, windows: int, length: int) -> np.ndarray:
    """A ``(windows, positions)`` mask of real tokens, from a ``.npy`` path or an array."""
    if isinstance(mask, str):
        from spectra_cli.sources.npy import read_whole

        arr = read_whole(mask, "mask file", booleans=True)
    else:
        from spectra_cli.sources.in_memory import as_array

        arr = as_array(mask, what="mask")
    if arr.shape != (windows, length):
        raise InputError(f"mask has shape {arr.shape}; ({windows}, {length}) (windows, positions) is required.")
    what = f"{param('mask', mask)}" if isinstance(mask, str) else param("mask")
    if arr.dtype.kind not in "biu":
        raise InputError(f"{what} has dtype {arr.dtype}; booleans (or 0/1 integers) are required: True marks a real "
                         "token, False padding.")
    if arr.dtype.kind != "b" and arr.size and (int(arr.min()) < 0 or int(arr.max()) > 1):
        raise InputError(f"{what} holds values other than 0 and 1 (from {int(arr.min())} to {int(arr.max())}); 1 "
                         "marks a real token, 0 padding.")
    return np.asarray(arr != 0)


class SequenceSource(Source):
    """Rows of a sequence dump after position selection, masking and pooling."""

    def __init__(self, base: Source, *, length: int | None = None, positions: Any = None, pool: str = "tokens",
                 mask: Any = None, doc_column: str | None = None, mask_column: str | None = None) -> None:
        info = base.info
        check_pool(pool)
        self.doc_column = doc_column
        if doc_column is not None:
            if not hasattr(base, "iter_column") or len(info.shape) != 2 or length is None:
                raise OptionError(f"{param('doc_column')} applies to Parquet token rows with "
                                  f"{param('positions_per_window')} L.")
            L, d = length, info.n_features
            windows, dropped = self._count_doc_windows(base, doc_column, L)
            if windows == 0:
                raise InputError(f"{info.path}: no document holds {L} consecutive tokens; no window to analyse.")
        elif len(info.shape) == 3:
            windows, L, d = info.shape
            if d == 0:
                raise InputError(f"{info.path} has 0 features (shape {info.shape}); at least 1 is required.")
            if length is not None and length != L:
                raise OptionError(f"{param('positions_per_window', length)}: the dump has {L} positions per window.")
            dropped = 0
        elif length is not None:
            L, d = check_int("positions_per_window", length, minimum=1), info.n_features
            windows, dropped = divmod(info.n_rows, L)
            if windows == 0:
                raise InputError(f"{info.path} has {info.n_rows} rows: not one window of {L} positions.")
        else:
            raise OptionError(f"{param('positions')}, {param('pool')} and {param('mask')} apply to sequence dumps: "
                              f"a 3-D (windows, positions, features) array, or token rows with "
                              f"{param('positions_per_window')} L.")
        self.base = base
        pos = parse_positions(positions, L)
        self.layout = Layout(windows, L, d, tuple(pos), pool, dropped)
        if mask_column is not None:
            names = base.column_names() if hasattr(base, "column_names") else None
            if names is not None and mask_column not in names:
                raise OptionError(f"{param('mask_column', mask_column)} is not a column of {info.path}; columns: "
                                  f"{', '.join(names)}.")
            if mask is not None or doc_column is not None or not hasattr(base, "iter_column") or len(info.shape) != 2:
                raise OptionError(f"{param('mask_column')} applies to Parquet token rows regrouped with "
                                  f"{param('positions_per_window')} L (without {param('mask')} or "
                                  f"{param('doc_column')}).")
            flags = np.concatenate(list(base.iter_column(mask_column)))  # one byte a token
            mask = flags[: windows * L].reshape(windows, L)
        self.mask = None if mask is None else load_mask(mask, windows, L)
        self._pos = np.asarray(pos)
        sel = self.mask[:, self._pos] if self.mask is not None else None
        if pool == "tokens":
            n = int(sel.sum()) if sel is not None else windows * len(pos)
        else:
            n = int(np.count_nonzero(sel.any(axis=1))) if sel is not None else windows
        self.masked_tokens = int(sel.size - sel.sum()) if sel is not None else 0
        self.has_weights = False
        self.notes = list(getattr(base, "notes", []))
        if dropped and doc_column is None:
            self.notes.append(f"{dropped} token row(s) past the last whole window of {L} were left out; pad the rows "
                              f"to a multiple of {L} to keep them")
        elif dropped:
            self.notes.append(f"{dropped} token row(s) left out: the ends of documents ({doc_column}) too short "
                              f"for another window of {L} (windows never cross a document boundary); pad each "
                              f"document to a multiple of {L} rows to keep them")
        self.info = SourceInfo(
            path=info.path, format=info.format, shape=info.shape, dtype=info.dtype, n_rows=n, n_features=d,
            layout=self.layout.describe(), column=info.column, key=info.key, files=info.files,
            details={**info.details, "sequence": {"windows": windows, "positions": L, "features": d,
                                                   "positions_used": pos, "pool": pool,
                                                   "masked_tokens": self.masked_tokens}},
        )

    @staticmethod
    def _count_doc_windows(base: Any, doc_column: str, L: int) -> tuple[int, int]:
        """Windows of L consecutive tokens restarting at every document, and the tokens left over."""
        windows = dropped = run = 0
        last = None
        for ids in base.iter_column(doc_column):
            if not ids.size:
                continue
            cuts = np.flatnonzero(ids[1:] != ids[:-1]) + 1
            edges = np.concatenate(([0], cuts, [ids.size]))
            for i, (a, b) in enumerate(zip(edges[:-1], edges[1:], strict=True)):
                if i == 0 and last is not None and ids[0] == last:
                    run += b - a
                    continue
                windows, dropped = windows + run // L, dropped + run % L
                run = b - a
            last = ids[-1]
        return windows + run // L, dropped + run % L

    def _doc_windows(self, block_windows: int) -> Iterator[tuple[int, np.ndarray]]:
        L, d = self.layout.length, self.layout.d
        buf = np.empty((L, d))
        fill, cur, first = 0, None, 0
        out: list[np.ndarray] = []
        for X, ids in self.base.iter_blocks(0, self.base.info.n_rows, max(1, block_windows) * L):
            assert ids is not None
            cuts = np.flatnonzero(ids[1:] != ids[:-1]) + 1
            edges = np.concatenate(([0], cuts, [len(ids)]))
            for a, b in zip(edges[:-1], edges[1:], strict=True):
                if ids[a] != cur:  # a new document: a window never crosses its start
                    cur, fill = ids[a], 0
                i = a
                while i < b:
                    take = min(L - fill, b - i)
                    buf[fill:fill + take] = X[i:i + take]
                    fill, i = fill + take, i + take
                    if fill == L:
                        out.append(buf.copy())
                        fill = 0
                if len(out) >= block_windows:
                    yield first, np.stack(out)
                    first, out = first + len(out), []
        if out:
            yield first, np.stack(out)

    def windows(self, block_windows: int) -> Iterator[tuple[int, np.ndarray]]:
        """``(first window, block (w, L, d))`` for consecutive windows of the base source."""
        if self.doc_column is not None:
            yield from self._doc_windows(block_windows)
            return
        L, d = self.layout.length, self.layout.d
        first = 0
        carry: np.ndarray | None = None  # rows of a window cut by a block edge (shards end anywhere)
        for X, _ in self.base.iter_blocks(0, self.layout.windows * L, max(1, block_windows) * L):
            X = np.asarray(X)
            if carry is not None:
                X = np.concatenate([carry, X])
                carry = None
            w = len(X) // L
            if w * L < len(X):
                carry = X[w * L:].copy()
            if w:
                yield first, X[:w * L].reshape(w, L, d)
                first += w

    def _rows(self, block_windows: int) -> Iterator[np.ndarray]:
        pos, pool = self._pos, self.layout.pool
        for w0, B in self.windows(block_windows):
            S = B[:, pos, :]
            m = self.mask[w0:w0 + len(B)][:, pos] if self.mask is not None else None
            if pool == "tokens":
                rows = S.reshape(-1, S.shape[-1]) if m is None else S[m]
            elif m is None:
                rows = S.mean(axis=1, dtype=np.float64) if pool == "mean" else S[:, 0 if pool == "first" else -1]
            else:
                keep = m.any(axis=1)
                if pool == "mean":
                    rows = (np.einsum("wp,wpd->wd", m.astype(np.float64), S.astype(np.float64))[keep]
                            / m.sum(axis=1)[keep, None])
                else:
                    idx = m.argmax(axis=1) if pool == "first" else m.shape[1] - 1 - m[:, ::-1].argmax(axis=1)
                    rows = S[np.arange(len(S)), idx][keep]
            yield rows

    def iter_blocks(self, start: int, stop: int, block_rows: int) -> Iterator[tuple[np.ndarray, np.ndarray | None]]:
        per_window = len(self._pos) if self.layout.pool == "tokens" else 1
        block_windows = max(1, block_rows // per_window)
        pos = 0
        for rows in self._rows(block_windows):
            lo, hi = pos, pos + len(rows)
            pos = hi
            if hi <= start:
                continue
            if lo >= stop:
                return
            part = rows[max(start - lo, 0): min(stop, hi) - lo]
            for i in range(0, len(part), block_rows):
                yield part[i:i + block_rows], None

    def close(self) -> None:
        self.base.close()
