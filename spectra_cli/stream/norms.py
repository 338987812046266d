"""A mergeable histogram of the rows' squared norms about their mean (the row scales).

The population exponent (:mod:`spectra_cli.analysis.population`) models rows as
``x_i = mu + sqrt(s_i) Sigma^(1/2) z_i`` (an elliptical, or separable, model: Gaussian
directions with a scale per row); it needs the distribution of ``s_i``, which the squared norms
``w_i ||x_i - mu||^2`` carry. They are gathered in the one streamed pass, every block's rows about
that block's own mean (the global mean is not known until the pass ends), each divided by its expected
shrink against the true mean (``1 - 1/b`` for a block of ``b`` unweighted rows, ``1 - 2 p_i + sum p^2``
weighted), and binned on a fixed grid of ``BINS_PER_OCTAVE`` bins per factor of two so that
histograms of any split of the rows (blocks, files, Dask workers) add exactly. A block of one row
(a shard of one embedding) has no norm about its own mean: it counts as a zero.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

#: Bins per factor of two of the squared norm (bin widths of 2.2 %).
BINS_PER_OCTAVE = 32
#: Every positive finite float64 has its bin in [LOWEST, HIGHEST].
LOWEST = -1075 * BINS_PER_OCTAVE
HIGHEST = 1024 * BINS_PER_OCTAVE


@dataclass(frozen=True, slots=True)
class NormHistogram:
    """Counts of rows whose squared norm lies in ``[2^(k/B), 2^((k+1)/B))`` for ``k = lo, lo+1, ...``
    (``B = BINS_PER_OCTAVE``), plus the rows whose norm is exactly zero.

    Attributes:
        lo: the bin index of ``counts[0]``.
        counts: rows per bin (float64: exact integers up to 2^53).
        zeros: rows equal to their block's mean.
    """

    lo: int
    counts: np.ndarray
    zeros: float = 0.0

    @classmethod
    def empty(cls) -> NormHistogram:
        return cls(0, np.zeros(0), 0.0)

    @classmethod
    def of(cls, squared_norms: np.ndarray, *, log2_scale: int = 0) -> NormHistogram:
        """The histogram of some squared norms, given in units of ``2^log2_scale`` (a block rescaled
        by a power of two keeps its bins exact)."""
        q = np.asarray(squared_norms, dtype=np.float64)
        q = q[np.isfinite(q)]
        pos = q[q > 0]
        zeros = float(q.size - pos.size)
        if not pos.size:
            return cls(0, np.zeros(0), zeros)
        k = np.floor(np.log2(pos) * BINS_PER_OCTAVE).astype(np.int64) + log2_scale * BINS_PER_OCTAVE
        k = np.clip(k, LOWEST, HIGHEST)
        lo = int(k.min())
        return cls(lo, np.bincount(k - lo).astype(np.float64), zeros)

    @property
    def rows(self) -> float:
        return float(self.counts.sum()) + self.zeros

    def merge(self, other: NormHistogram) -> NormHistogram:
        if not other.counts.size:
            return NormHistogram(self.lo, self.counts, self.zeros + other.zeros)
        if not self.counts.size:
            return NormHistogram(other.lo, other.counts, self.zeros + other.zeros)
        lo = min(self.lo, other.lo)
        hi = max(self.lo + self.counts.size, other.lo + other.counts.size)
        out = np.zeros(hi - lo)
        out[self.lo - lo: self.lo - lo + self.counts.size] += self.counts
        out[other.lo - lo: other.lo - lo + other.counts.size] += other.counts
        return NormHistogram(lo, out, self.zeros + other.zeros)

    def values(self) -> tuple[np.ndarray, np.ndarray]:
        """``(squared norms, counts)``: each non-empty bin at its geometric centre, zeros first."""
        k = np.flatnonzero(self.counts)
        v = 2.0 ** ((self.lo + k + 0.5) / BINS_PER_OCTAVE)
        c = self.counts[k]
        if self.zeros:
            v, c = np.concatenate([[0.0], v]), np.concatenate([[self.zeros], c])
        return v, c
