"""A mergeable histogram of the rows' squared norms about their mean (the row scales).

The population exponent (:mod:`spectra_cli.analysis.population`, :mod:`spectra_cli.analysis.row_scales`) models rows as
``x_i = mu + sqrt(s_i) Sigma^(1/2) z_i`` (an elliptical, or separable, model: Gaussian
directions with a scale per row); it needs the distribution of ``s_i``, which the squared norms
``w_i ||x_i - mu||^2`` carry. They are gathered in the one streamed pass (the global mean is not known
until it ends): the first block's rows about that block's own mean, made unbiased
(:func:`spectra_cli.stream.moments.unshrunk`), every later block's about the mean of every row read so far,
each divided by its expected shrink ``1 - 2 p_i + sum p^2`` (``p`` the rows' shares of that mean: about a small
block's own mean the cross terms with its other rows would spread the norms, and read as row scales). They are
binned on a fixed grid of ``BINS_PER_OCTAVE`` bins per factor of two, so that histograms of any split of the
rows (files, Dask workers) add exactly. A block of one row with no rows before it (a shard of one embedding)
has no norm about its own mean: it counts as a zero.

Beside the histogram, unweighted rows keep the sum over features of each feature's fourth central moment
(:func:`coordinate_fourth`, unbiased within each block of at least 4 rows): it tells the norms' spread that
the coordinates' own heavy tails make (independent Laplace coordinates, say) from the spread of a scale that
every coordinate of a row shares, which only the latter spreads the spectrum further.
"""

from __future__ import annotations

import math
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
    fourth: float | None = None
    fourth_rows: float = 0.0

    @classmethod
    def empty(cls) -> NormHistogram:
        return cls(0, np.zeros(0), 0.0, 0.0, 0.0)

    def with_fourth(self, fourth: float | None, rows: float) -> NormHistogram:
        """The same histogram with the sum of the features' fourth central moments over ``rows`` rows (see
        :func:`coordinate_fourth`; None: not gathered, e.g. weighted rows; a non-finite sum counts as None)."""
        ok = fourth is not None and math.isfinite(fourth)
        return NormHistogram(self.lo, self.counts, self.zeros, float(fourth) if ok else None,  # type: ignore[arg-type]
                             float(rows) if ok else 0.0)

    @property
    def coordinate_fourth(self) -> float | None:
        """An unbiased estimate of ``sum_k E (x_k - mu_k)^4`` (None where not gathered, or no block had 4 rows)."""
        if self.fourth is None or not self.fourth_rows > 0:
            return None
        return self.fourth / self.fourth_rows

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
        fourth = None if self.fourth is None or other.fourth is None else self.fourth + other.fourth
        rows = self.fourth_rows + other.fourth_rows if fourth is not None else 0.0
        if not other.counts.size:
            return NormHistogram(self.lo, self.counts, self.zeros + other.zeros, fourth, rows)
        if not self.counts.size:
            return NormHistogram(other.lo, other.counts, self.zeros + other.zeros, fourth, rows)
        lo = min(self.lo, other.lo)
        hi = max(self.lo + self.counts.size, other.lo + other.counts.size)
        out = np.zeros(hi - lo)
        out[self.lo - lo: self.lo - lo + self.counts.size] += self.counts
        out[other.lo - lo: other.lo - lo + other.counts.size] += other.counts
        return NormHistogram(lo, out, self.zeros + other.zeros, fourth, rows)

    def values(self) -> tuple[np.ndarray, np.ndarray]:
        """``(squared norms, counts)``: each non-empty bin at its geometric centre, zeros first."""
        k = np.flatnonzero(self.counts)
        v = 2.0 ** ((self.lo + k + 0.5) / BINS_PER_OCTAVE)
        c = self.counts[k]
        if self.zeros:
            v, c = np.concatenate([[0.0], v]), np.concatenate([[self.zeros], c])
        return v, c


def coordinate_fourth(Y: np.ndarray, mean: np.ndarray | None = None) -> tuple[float, int]:
    """``(b sum_k mu4_k, b)`` for a block of ``b`` unweighted rows ``Y - mean`` about the block's own mean
    (``mean``: that mean, when ``Y`` is not yet centred on it): ``mu4_k`` the unbiased estimate of feature ``k``'s
    fourth central moment from ``S2 = sum_i y_ik^2`` and ``S4 = sum_i y_ik^4``, solving ``E S4 = a1 mu4 + a2
    sigma^4`` and ``E S2^2 = c1 mu4 + c2 sigma^4`` for independent rows (``a1 = (b-1)(b^2-3b+3)/b^2``, ``a2 =
    3(b-1)(2b-3)/b^2``, ``c1 = (b-1)^2/b``, ``c2 = (b-1)(b^2-2b+3)/b``: the moments of the sample's central moments,
    Kendall & Stuart). ``(0, 0)`` for fewer than 4 rows (no unbiased estimate). Formed 256 rows at a time in the
    rows' own precision (float32 blocks: about 4 % of a block's product at d = 768), summed in float64."""
    b = int(Y.shape[0])
    if b < 4 or not Y.shape[1]:
        return 0.0, 0
    c2, a2, det = fourth_coefficients(b)
    s2 = np.zeros(Y.shape[1])
    s4 = np.zeros(Y.shape[1])
    dt = Y.dtype if Y.dtype in (np.float32, np.float64) else np.dtype(np.float64)
    m = None if mean is None else np.asarray(mean).astype(dt, copy=False)
    with np.errstate(over="ignore", invalid="ignore"):
        for i in range(0, b, 256):
            if m is None:
                y = np.square(Y[i:i + 256], dtype=dt)  # (a new array: the caller's rows are left as they are)
            else:
                y = np.subtract(Y[i:i + 256], m, dtype=dt)
                np.square(y, out=y)
            s2 += y.sum(axis=0)
            s4 += np.einsum("ij,ij->j", y, y)
        total = float(np.sum(c2 * s4 - a2 * s2 * s2)) / det
    return b * total, b


def fourth_coefficients(b: int) -> tuple[float, float, float]:
    """``(c2, a2, a1 c2 - a2 c1)`` for a block of ``b >= 4`` rows: ``mu4 = (c2 S4 - a2 S2^2) / det`` (see
    :func:`coordinate_fourth`; the device's states use the same)."""
    a1, a2 = (b - 1) * (b * b - 3 * b + 3) / b ** 2, 3 * (b - 1) * (2 * b - 3) / b ** 2
    c1, c2 = (b - 1) ** 2 / b, (b - 1) * (b * b - 2 * b + 3) / b
    return c2, a2, a1 * c2 - a2 * c1
