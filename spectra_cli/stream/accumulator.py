"""An online accumulator: feed batches of rows as a model runs, no dump needed.

>>> acc = Accumulator(d=768)
>>> for batch in loader:
...     acc.update(hidden_states(batch))       # numpy, or torch/jax/cupy via DLPack
>>> acc.save("layer12.moments.npz")            # plain arrays, no pickle
>>> spectra_cli.fit(acc, window="auto")        # every analysis of fit that needs only moments

It holds the mergeable moments of :mod:`spectra_cli.stream.moments` (and the sums of the exact
mean cosine, and optionally group moments for the bootstrap), so any split of the rows into
batches, processes or machines, merged in any order, gives the same spectrum up to rounding.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from spectra_cli.errors import InputError, OptionError
from spectra_cli.options import DEFAULT_BLOCK_ROWS, memory_budget, parse_bytes, refuse_over_budget
from spectra_cli.stream import moment_file
from spectra_cli.stream.isotropy_sums import CosineAccumulator
from spectra_cli.stream.moment_file import MomentFile
from spectra_cli.stream.moments import Moments
from spectra_cli.stream.states import MomentsState, RowGuard
from spectra_cli.validate import check_bool, check_int, product_dtype

#: The budget of an accumulator whose size was checked elsewhere (a loaded moment file).
UNBOUNDED = 1 << 62


class Accumulator:
    """Mergeable moments of rows with ``d`` features.

    Args:
        d: number of features of every batch.
        precision: arithmetic of the products (``float64``, or ``float32``: faster, higher floor).
        cosine: also keep the sums of the exact mean cosine and mean norm (O(n d), cheap).
        groups: keep the moments of this many groups of batches, for ``fit(..., ci=True)`` and the sampling curve of
            ``fit(..., population=True)`` (32 for both); batch ``i`` goes to group ``i mod groups``.
        drop_nonfinite: skip rows with NaN/inf (counted in ``n_dropped``) instead of raising.
        block_rows: rows per product inside one large batch.
        max_memory: bytes (or ``"8GB"``) its matrices may take (default half the physical memory):
            ``(3 + groups)`` float64 matrices of d x d are checked against it before any is made.
    """

    def __init__(self, d: int, *, precision: str = "float64", cosine: bool = True, groups: int = 0,
                 drop_nonfinite: bool = False, block_rows: int = DEFAULT_BLOCK_ROWS,
                 max_memory: int | str | None = None) -> None:
        d = check_int("d", d, minimum=1, what="a positive number of features")
        cosine, drop_nonfinite = check_bool("cosine", cosine), check_bool("drop_nonfinite", drop_nonfinite)
        dtype = product_dtype(precision)
        groups = check_int("groups", groups, minimum=0)
        block_rows = check_int("block_rows", block_rows, minimum=1)
        need = (3 + groups) * 8.0 * int(d) * int(d)
        refuse_over_budget("Accumulator", f"d = {int(d)}", need, f"{3 + groups} float64 matrices of {d} x {d}",
                           memory_budget(parse_bytes(max_memory)))
        self.d = int(d)
        self.precision = precision
        self.drop_nonfinite = bool(drop_nonfinite)
        self.block_rows = int(block_rows)
        self._state = MomentsState(self.d, precision=precision, groups=groups)
        self.cosine: CosineAccumulator | None = CosineAccumulator(self.d, dtype=dtype) if cosine else None
        self.weighted: bool | None = None
        self.n_dropped = 0
        self.sources: list[dict[str, Any]] = []

    # -- feeding -------------------------------------------------------------------------------
    def update(self, X: Any, weights: Any = None, *, mask: Any = None) -> None:
        """Add a batch of rows: an array ``(n, d)`` (or ``(..., d)``, flattened to rows), with
        optional row weights ``(n,)`` (or the leading shape). Anything with ``__array__`` or
        ``__dlpack__`` works: torch and JAX tensors of any float dtype, bfloat16 included (converted
        exactly), detached and moved to host memory when they are not there. ``mask``: the leading shape
        of ``X`` (an attention mask ``(batch, tokens)`` beside hidden states ``(batch, tokens, d)``), true
        or nonzero for the rows to keep: padding never enters the moments."""
        from spectra_cli.sources.in_memory import as_array

        A = as_array(X, what="X")
        if A.ndim < 2 or A.shape[-1] != self.d:
            raise InputError(f"X has shape {A.shape}; this accumulator takes rows of d = {self.d} features.")
        from spectra_cli.sources.base import check_numeric_dtype

        check_numeric_dtype(A.dtype, "X")
        lead = A.shape[:-1]
        A = A.reshape(-1, self.d)
        w = None
        if weights is not None:
            W = _leading("weights", weights, lead)
            if W.dtype.kind not in "biuf":
                raise InputError(f"weights has dtype {W.dtype}; numbers are required, one per row.")
            w = W.astype(np.float64).reshape(-1)
        if mask is not None:
            M = _leading("mask", mask, lead)
            if M.dtype.kind not in "biuf" or (M.dtype.kind != "b" and not np.isin(M, (0, 1)).all()):
                raise InputError(f"mask must hold booleans or 0/1 (an attention mask); it has dtype {M.dtype}"
                                 + ("" if M.dtype.kind not in "iuf" else " and other values") + ".")
            keep = M.reshape(-1) != 0
            A = A[keep]
            w = None if w is None else w[keep]
        if self.weighted is None:
            self.weighted = w is not None
            self._state.moments = Moments.empty(self.d, weighted=self.weighted)
            self._state.groups = [Moments.empty(self.d, weighted=self.weighted) for _ in self._state.groups]
        elif self.weighted != (w is not None):
            kind = "with" if self.weighted else "without"
            raise OptionError(f"this accumulator was fed {kind} weights; give every batch weights or none.")
        seen = self.n
        guard = RowGuard("X", drop_nonfinite=self.drop_nonfinite)
        for lo in range(0, A.shape[0], self.block_rows):
            Xb = A[lo:lo + self.block_rows]
            wb = None if w is None else w[lo:lo + self.block_rows]
            Xk, wk = guard.filter(Xb, wb, lambda i, base=seen + lo: base + i)
            if len(Xk):
                self._add(Xk, wk)
        guard.finish()
        self.n_dropped += guard.dropped

    def _add(self, X: np.ndarray, w: np.ndarray | None) -> None:
        self._state.update(X, w)
        if self.cosine is not None:
            self.cosine.update(X, w)

    def merge(self, other: Accumulator) -> Accumulator:
        """Add the rows of another accumulator (this one changes and is returned)."""
        if not isinstance(other, Accumulator):
            raise TypeError(f"merge takes an Accumulator, not {type(other).__name__}.")
        diffs = [f"{k} {a!r} vs {b!r}" for k, a, b in (("d", self.d, other.d),
                                                     ("precision", self.precision, other.precision))
                 if a != b]
        if self.weighted is not None and other.weighted is not None and self.weighted != other.weighted:
            diffs.append(f"weighted {self.weighted} vs {other.weighted}")
        if (self.cosine is None) != (other.cosine is None):
            diffs.append("cosine sums kept by one only")
        if diffs:
            raise OptionError(f"cannot merge moments that differ: {'; '.join(diffs)}.")
        self._state.merge(other._state)
        if self.cosine is not None and other.cosine is not None:
            self.cosine.merge(other.cosine)
        if self.weighted is None:
            self.weighted = other.weighted
        self.n_dropped += other.n_dropped
        self.sources += other.sources
        return self

    # -- what it holds -------------------------------------------------------------------------
    @property
    def moments(self) -> Moments:
        return self._state.moments

    @property
    def n(self) -> int:
        """Rows accumulated (dropped rows not counted)."""
        return self._state.moments.n

    @property
    def groups(self) -> tuple[Moments, ...]:
        return self._state.filled_groups()

    @property
    def weight_sq_sum(self) -> float:
        """``sum w^2`` of the rows (their count when unweighted): Kish's effective sample size."""
        return self._state.weight_sq_sum

    def adopt(self, moments: Moments, *, groups: list[Moments], weight_sq_sum: float, weighted: bool | None,
              n_dropped: int, sources: list[dict[str, Any]]) -> None:
        """Take over moments made elsewhere (a pass, a loaded file): this accumulator then holds them."""
        self._state.moments = moments
        self._state.groups = list(groups)
        self._state.weight_sq_sum = float(weight_sq_sum)
        self.weighted, self.n_dropped, self.sources = weighted, n_dropped, sources

    @classmethod
    def of_pass(cls, moments: Moments, *, groups: tuple[Moments, ...], n_groups: int, weight_sq_sum: float,
                cosine: CosineAccumulator | None, weighted: bool, n_dropped: int, precision: str,
                drop_nonfinite: bool, block_rows: int, sources: list[dict[str, Any]]) -> Accumulator:
        """An accumulator holding what one pass over an input made (``spectra_cli.accumulate``)."""
        acc = cls(moments.d, precision=precision, groups=n_groups, drop_nonfinite=drop_nonfinite,
                  block_rows=block_rows, max_memory=UNBOUNDED)  # the pass checked the budget
        acc.adopt(moments, groups=list(groups), weight_sq_sum=weight_sq_sum, weighted=weighted, n_dropped=n_dropped,
                  sources=sources)
        acc.cosine = cosine
        return acc

    def options(self) -> dict[str, Any]:
        return self.contents().options()

    def __repr__(self) -> str:
        return f"Accumulator(d={self.d}, n={self.n}, precision={self.precision!r}, weighted={bool(self.weighted)})"

    # -- files ---------------------------------------------------------------------------------
    def contents(self) -> MomentFile:
        """What a moment file of this accumulator holds (:mod:`spectra_cli.stream.moment_file`)."""
        return MomentFile(self.d, self.precision, self._state.n_groups, self.block_rows, self.drop_nonfinite,
                          self.weighted, self.moments, self.groups, self._state.weight_sq_sum, self.n_dropped,
                          tuple(self.sources), self.cosine)

    @classmethod
    def of_contents(cls, contents: MomentFile) -> Accumulator:
        """An accumulator holding what a moment file held."""
        c = contents
        acc = cls(c.d, precision=c.precision, cosine=c.cosine is not None, groups=c.n_groups,
                  drop_nonfinite=c.drop_nonfinite, block_rows=c.block_rows,
                  max_memory=UNBOUNDED)  # the budget was checked from the file's headers
        acc.adopt(c.moments, groups=list(c.groups), weight_sq_sum=c.weight_sq_sum, weighted=c.weighted,
                  n_dropped=c.n_dropped, sources=list(c.sources))
        acc.cosine = c.cosine
        return acc

    def save(self, path: str | os.PathLike[str]) -> str:
        """Write an ``.npz`` of plain arrays (no pickle) atomically; returns the path (the format:
        :mod:`spectra_cli.stream.moment_file`)."""
        return moment_file.write(path, self.contents())

    @classmethod
    def load(cls, path: str | os.PathLike[str], *, max_memory: int | str | None = None) -> Accumulator:
        """Read a moment file written by :meth:`save` (or ``spectra moments``), every field checked
        (the file was written elsewhere). ``max_memory``: bytes (or ``"8GB"``) its arrays may take,
        checked from their headers before any is read (default half the physical memory)."""
        return cls.of_contents(moment_file.read(path, max_memory=max_memory))

    def held_bytes(self) -> int:
        """Bytes of the matrices held: the moments and the groups' (``d x d`` float64 each)."""
        return 8 * self.d * self.d * (1 + len(self._state.groups))


def _leading(name: str, value: Any, lead: tuple[int, ...]) -> np.ndarray:
    """Per-row values (weights, a mask) in X's leading shape, or one flat value per row."""
    from spectra_cli.sources.in_memory import as_array

    if np.ndim(value) == 0 and not hasattr(value, "__dlpack__"):
        raise InputError(f"{name} must be an array of X's leading shape {tuple(lead)}, one value per row.")
    if isinstance(value, np.ma.MaskedArray):
        raise InputError(f"{name} is a numpy masked array; pass a plain array (its mask would be ignored).")
    V = as_array(value, what=name)
    rows = int(np.prod(lead)) if lead else 0
    if tuple(V.shape) != tuple(lead) and not (V.ndim == 1 and V.shape[0] == rows):
        raise InputError(f"{name} has shape {tuple(V.shape)}; it must have X's leading shape {tuple(lead)}, or be "
                         f"one value per row ({rows},).")
    return V
