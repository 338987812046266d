"""The streamed sums of the isotropy measures (:mod:`spectra_cli.analysis.isotropy` defines them):
the running sums of the exact mean cosine and the mean-norm ratio, and the running ``log Z(c)`` of
the partition function over fixed directions, each mergeable across blocks, files and workers."""

from __future__ import annotations

import math
from typing import Any

import numpy as np


class CosineAccumulator:
    """Running sums for the exact mean cosine and the mean-norm ratio (one O(n d) pass)."""

    def __init__(self, d: int, *, dtype: Any = np.float64) -> None:
        """``dtype``: the arithmetic of the norms and the unit-vector sum in each block (float64 by
        default, whatever the input's dtype; float32 under ``precision="float32"``)."""
        self.dtype = np.dtype(dtype)
        self.unit_sum = np.zeros(d)
        self.w_sum = 0.0
        self.w2_sum = 0.0
        self.norm_sum = 0.0
        self.zero_rows = 0
        self.rows = 0
        self._block: np.ndarray | None = None  # (a block converted to the dtype: one buffer for every block)

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_block"] = None  # (a buffer, not a sum)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update({"_block": None, **state})

    def update(self, X: np.ndarray, w: np.ndarray | None = None) -> None:
        X = np.asarray(X)
        if X.dtype != self.dtype:  # (into one buffer made once: a new block-sized array each block paid its pages)
            if self._block is None or self._block.shape[0] < len(X) or self._block.shape[1:] != X.shape[1:]:
                self._block = np.empty(X.shape, dtype=self.dtype)
            converted = self._block[: len(X)]
            np.copyto(converted, X, casting="unsafe")
            X = converted
        with np.errstate(over="ignore", invalid="ignore"):
            sq = np.einsum("ij,ij->i", X, X)
        if not np.all(np.isfinite(sq)) or (sq.size and float(sq.max()) < 1e-30 and np.any(X)):
            # Squares overflow or underflow in this precision: scale each row by its largest entry.
            X = X.astype(np.float64)
            amax = np.max(np.abs(X), axis=1)
            safe = np.where(amax > 0, amax, 1.0)
            Xs = X / safe[:, None]
            norms = np.sqrt(np.einsum("ij,ij->i", Xs, Xs)) * safe
        else:
            norms = np.sqrt(sq.astype(np.float64))
        nz = norms > 0
        wt = np.ones(len(X)) if w is None else np.asarray(w, dtype=np.float64)
        wn = np.where(nz, wt, 0.0)
        coef = np.divide(wn, norms, out=np.zeros_like(wn), where=nz)
        self.zero_rows += int(np.count_nonzero(~nz))
        self.rows += len(X)
        # sum_i w_i x_i / ||x_i|| as one matrix-vector product in the block's arithmetic, accumulated
        # across blocks in float64.
        self.unit_sum += (coef.astype(X.dtype) @ X).astype(np.float64)
        self.w_sum += float(wn.sum())
        self.w2_sum += float(wn @ wn)
        self.norm_sum += float(wn @ norms)

    def merge(self, other: CosineAccumulator) -> CosineAccumulator:
        """Add the sums of other rows (this one changes and is returned)."""
        self.unit_sum += other.unit_sum
        self.w_sum += other.w_sum
        self.w2_sum += other.w2_sum
        self.norm_sum += other.norm_sum
        self.zero_rows += other.zero_rows
        self.rows += other.rows
        return self

    def mean_cosine(self) -> float | None:
        denom = self.w_sum**2 - self.w2_sum
        if denom <= 0:
            return None
        value = float((self.unit_sum @ self.unit_sum - self.w2_sum) / denom)
        return min(1.0, max(-1.0, value))  # rounding can step past +-1 for identical rows

    def mean_norm(self) -> float | None:
        return self.norm_sum / self.w_sum if self.w_sum > 0 else None


class LogZAccumulator:
    """Running ``log Z(c)`` and ``log Z(-c)`` for every direction, block by block."""

    def __init__(self, V: np.ndarray, s: float, *, dtype: Any = np.float64) -> None:
        self.dtype = np.dtype(dtype)
        self.P = (V / s).astype(self.dtype)
        k = V.shape[1]
        self.pos = np.full(k, -np.inf)
        self.neg = np.full(k, -np.inf)

    def update(self, X: np.ndarray, w: np.ndarray | None = None) -> None:
        logw = None
        if w is not None:
            w = np.asarray(w, dtype=np.float64)
            keep = w > 0  # zero-weight rows add nothing to Z (and log 0 is -inf)
            if not np.all(keep):
                X, w = np.asarray(X)[keep], w[keep]
            if not len(w):
                return
            logw = np.log(w)
        S = (np.asarray(X, dtype=self.dtype) @ self.P).astype(np.float64, copy=False)
        self._add(S, logw)

    def update_scores(self, S: np.ndarray, w: np.ndarray | None = None) -> None:
        """Add rows given by their scores ``c^T x / s`` directly (the Gram route)."""
        self.pos = np.full(S.shape[1], -np.inf)
        self.neg = np.full(S.shape[1], -np.inf)
        if S.shape[1] and len(S):
            self._add(S, None if w is None else np.log(w))

    def _add(self, S: np.ndarray, logw: np.ndarray | None) -> None:
        for sign, acc in ((1.0, self.pos), (-1.0, self.neg)):
            T = S if sign > 0 else -S
            if logw is not None:
                T = T + logw[:, None]
            top = np.max(T, axis=0)
            lse = top + np.log(np.sum(np.exp(T - top), axis=0))
            np.logaddexp(acc, lse, out=acc)

    def merge(self, other: LogZAccumulator) -> LogZAccumulator:
        """Combine ``log Z`` of other rows (same directions): a log-sum-exp of the two."""
        np.logaddexp(self.pos, other.pos, out=self.pos)
        np.logaddexp(self.neg, other.neg, out=self.neg)
        return self

    def result(self) -> tuple[float, float, float, float]:
        """``I``, symmetric ``I``, min and max ``log Z``."""
        lo, hi = float(self.pos.min()), float(self.pos.max())
        both = np.concatenate([self.pos, self.neg])
        return math.exp(lo - hi), math.exp(float(both.min() - both.max())), lo, hi
