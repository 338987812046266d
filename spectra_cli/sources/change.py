"""The change of a weight matrix between two checkpoints: ``W_ft - W_base``, read as rows like any matrix.

A :class:`Change` names the two tensors (``file.safetensors::name`` each, or ``.npz::key`` / ``.npy``); its
:class:`ChangeSource` reads both in the same row blocks and yields their difference in float64 (the difference of
two float32 or bfloat16 values is exact in float64), so the change is never held whole and costs one more read of
the base. What fine-tuning changed is then analysed as any matrix: its spectrum (by default uncentred: the squared
singular values of the change, over the rows), its fits and ranks.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from spectra_cli.errors import InputError
from spectra_cli.sources.base import Source, SourceInfo

#: How the change is defined, said in every report of one.
DEFINITION = "W_ft - W_base: the fine-tuned tensor less the base's of the same name, row by row (float64)"


@dataclass(frozen=True, slots=True)
class Change:
    """``fine_tune`` less ``base``: two matrices of the same shape, each ``path::tensor`` (or a path)."""

    fine_tune: str
    base: str

    @property
    def name(self) -> str:
        return self.fine_tune

    def fingerprint(self) -> str:
        """Both tensors' identities (a new base, or a new fine-tune, is a new change)."""
        from spectra_cli.sources.base import fingerprint

        h = hashlib.sha256(f"change;{fingerprint(self.fine_tune)};{fingerprint(self.base)}".encode())
        return h.hexdigest()[:16]

    def to_dict(self) -> dict[str, Any]:
        return {"definition": DEFINITION, "fine_tune": self.fine_tune, "base": self.base}

    def open(self) -> ChangeSource:
        return ChangeSource(self)


class ChangeSizes:
    """The Frobenius sizes of a base and of its change, tallied block by block while a source streams the change's
    rows, and kept once a pass has read every row: ``relative_change() = ||Delta W||_F / ||W_base||_F``."""

    #: ``(||W_base||_F^2, ||Delta W||_F^2)`` once a pass read every row
    sizes: tuple[float, float] | None = None

    def _tally(self, blocks: Iterator[tuple[np.ndarray, ...]], start: int, stop: int,
               n_rows: int) -> Iterator[tuple[np.ndarray, ...]]:
        """``blocks`` of ``(base rows, change rows, ...)`` passed through, the first two's squared sizes summed."""
        sums = [0.0, 0.0]
        for block in blocks:
            base, delta = block[0], block[1]
            sums[0] += float(np.einsum("ij,ij->", base, base))
            sums[1] += float(np.einsum("ij,ij->", delta, delta))
            yield block
        if start == 0 and stop == n_rows:  # (a whole pass: the sizes of the whole matrices)
            self.sizes = (sums[0], sums[1])

    def relative_change(self) -> float | None:
        """``||Delta W||_F / ||W_base||_F`` (None before a whole pass, or for a zero base)."""
        if self.sizes is None or not self.sizes[0] > 0:
            return None
        return float(np.sqrt(self.sizes[1] / self.sizes[0]))


class ChangeSource(ChangeSizes, Source):
    """The rows of ``W_ft - W_base``, block by block, from the two tensors' own readers."""

    def __init__(self, change: Change) -> None:
        from spectra_cli.sources import open_source

        self.change = change
        self._ft = open_source(change.fine_tune)
        try:
            self._base = open_source(change.base)
        except BaseException:
            self._ft.close()
            raise
        a, b = self._ft.info, self._base.info
        if len(a.shape) != 2 or len(b.shape) != 2:
            self.close()
            odd = change.fine_tune if len(a.shape) != 2 else change.base
            raise InputError(f"{odd} has shape {list(a.shape if len(a.shape) != 2 else b.shape)}: a change is "
                             "measured between two matrices (2-D).")
        if (a.n_rows, a.n_features) != (b.n_rows, b.n_features):
            self.close()
            raise InputError(f"{change.fine_tune} has shape {list(a.shape)} and {change.base} {list(b.shape)}: a "
                             "change needs two matrices of the same shape.")
        self.info = SourceInfo(path=change.fine_tune, format=a.format, shape=a.shape, dtype="float64",
                               n_rows=a.n_rows, n_features=a.n_features,
                               layout=f"change {DEFINITION.split(':')[0]} ({a.dtype} less {b.dtype}; rows = first "
                                      "axis)", key=a.key, details={"change": change.to_dict()})

    def iter_blocks(self, start: int, stop: int, block_rows: int) -> Iterator[tuple[np.ndarray, np.ndarray | None]]:
        for _, delta in self._tally(self._pairs(start, stop, block_rows), start, stop, self.info.n_rows):
            yield delta, None

    def _pairs(self, start: int, stop: int, block_rows: int) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        base = self._base.iter_blocks(start, stop, block_rows)
        for (x, _), (y, _) in zip(self._ft.iter_blocks(start, stop, block_rows), base, strict=True):
            if not np.all(np.isfinite(y)):  # (the fine-tune's own are said by the pass, naming it)
                raise InputError(f"the base's {self.change.base} has NaN or inf entries; no change can be measured "
                                 "against it.")
            yb = np.asarray(y, dtype=np.float64)
            yield yb, np.asarray(x, dtype=np.float64) - yb

    def close(self) -> None:
        for s in (getattr(self, "_ft", None), getattr(self, "_base", None)):
            if s is not None:
                s.close()
