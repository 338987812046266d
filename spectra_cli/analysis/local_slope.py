"""Local slope ``alpha_local(j) = -d log lambda / d log j`` (docs/numbers.md, "Local slope").

Estimated at a rank ``c`` as minus the least-squares slope of ``log lambda_j`` on ``log j``
over the integer ranks ``j`` with ``|log10 j - log10 c| <= width / 2`` (a window of ``width``
decades centred on ``c``, truncated at rank 1 and at the usable rank).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from spectra_cli.analysis import unique_sorted

DEFAULT_WIDTH_DECADES = 0.5
MIN_POINTS = 5


@dataclass(frozen=True, slots=True)
class LocalSlope:
    ranks: np.ndarray
    alpha_local: np.ndarray
    width_decades: float

    def to_dict(self) -> dict[str, Any]:
        return {
            "definition": "alpha_local(c) = -OLS slope of log lambda_j on log j over ranks within "
            f"{self.width_decades / 2:g} decades of c (truncated at 1 and the usable rank)",
            "width_decades": self.width_decades,
            "ranks": self.ranks.tolist(),
            "alpha_local": self.alpha_local.tolist(),
        }


def local_slope(
    eigenvalues: np.ndarray, centers: np.ndarray, *, usable_rank: int, width_decades: float = DEFAULT_WIDTH_DECADES
) -> np.ndarray:
    """``alpha_local`` at each (real) rank in ``centers``; ``nan`` where too few ranks."""
    r = int(usable_rank)
    x = np.log(np.arange(1, r + 1, dtype=np.float64))
    y = np.log(np.asarray(eigenvalues[:r], dtype=np.float64))
    c = [np.concatenate([[0.0], np.cumsum(v)]) for v in (np.ones(r), x, y, x * x, x * y)]
    half = width_decades / 2 * math.log(10)
    out = np.full(len(centers), np.nan)
    for i, center in enumerate(np.asarray(centers, dtype=np.float64)):
        lo = max(1, math.ceil(center * math.exp(-half) - 1e-9))
        hi = min(r, math.floor(center * math.exp(half) + 1e-9))
        if hi - lo + 1 < MIN_POINTS:
            continue
        m, sx, sy, sxx, sxy = (ci[hi] - ci[lo - 1] for ci in c)
        vxx = sxx - sx * sx / m
        if vxx > 0:
            out[i] = -(sxy - sx * sy / m) / vxx
    return out


def local_slope_profile(
    eigenvalues: np.ndarray, usable_rank: int, *, per_decade: int = 8, width_decades: float = DEFAULT_WIDTH_DECADES
) -> LocalSlope:
    """The profile on a grid of ``per_decade`` ranks per decade from 1 to the usable rank."""
    r = int(usable_rank)
    if r < MIN_POINTS:
        return LocalSlope(np.array([]), np.array([]), width_decades)
    n = max(2, int(per_decade * math.log10(r)) + 1)
    centers = unique_sorted(np.round(np.exp(np.linspace(0, math.log(r), n))).astype(int))
    values = local_slope(eigenvalues, centers, usable_rank=r, width_decades=width_decades)
    keep = np.isfinite(values)
    return LocalSlope(centers[keep].astype(np.float64), values[keep], width_decades)
