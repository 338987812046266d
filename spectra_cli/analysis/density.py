"""Density-form power law ``p(lambda) ~ lambda^(-a)`` (the WeightWatcher / Clauset convention).

For a candidate ``x_min`` the tail is every eigenvalue ``>= x_min``; ``a`` is the continuous
Hill maximum-likelihood estimate ``1 + n_tail / sum log(lambda / x_min)`` and its standard
error ``(a - 1) / sqrt(n_tail)``. ``x_min`` minimises the Kolmogorov–Smirnov distance
``D = max |S(x) - P(x)|`` between the tail's empirical CDF ``S`` (at the sorted tail values,
``S = (0, 1, ..., n-1) / n``, as the ``powerlaw`` package computes it) and the fitted
``P(x) = 1 - (x / x_min)^(1 - a)``; candidates are every distinct eigenvalue but the largest (past 10,000 of
them, where the exact scan is O(n^2): 10^5 eigenvalues took 77 s, 10^6 hours, 2,000 evenly spaced in rank and
then every candidate between the best one's neighbours; ``scan`` says which).
For a pure rank law ``lambda_j ~ j^(-alpha)``, ``a = 1 + 1/alpha``.

WeightWatcher's fit of a small layer (``small_n``, fewer than :data:`SMALL_N` eigenvalues; its
``WW_powerlaw.fit_powerlaw_smallN``, 0.7.7): only tails of at least :data:`SMALL_N_MIN_TAIL` eigenvalues are
candidates, each with the bias-corrected ``a = 1 + (n_tail - 1) / sum log(lambda / x_min)``; ``x_min`` still
minimises ``D`` (the objective ``D - 0.868 / sqrt(n_tail)`` it computes is overridden by its ``argmin D``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from spectra_cli.analysis import unique_sorted
from spectra_cli.errors import FitError

#: Up to this many x_min candidates every one is fitted (each costs O(n)); past it, a grid and a refinement.
EXACT_CANDIDATES = 10_000
#: The grid of x_min candidates, evenly spaced in rank, past EXACT_CANDIDATES.
GRID_CANDIDATES = 2_000
#: WeightWatcher fits a layer with fewer eigenvalues than this by its small-N rule (``WW_powerlaw``'s cutoff).
SMALL_N = 20
#: ... whose tails hold at least this many eigenvalues (its ``k_min``).
SMALL_N_MIN_TAIL = 8


@dataclass(frozen=True, slots=True)
class DensityFit:
    alpha: float
    xmin: float
    ks_distance: float
    n_tail: int
    stderr: float
    n_candidates: int
    n_scanned: int | None = None
    small_n: bool = False
    #: the same tail under other laws (:mod:`spectra_cli.analysis.tails`)
    tails: Any = None

    def rank_exponent(self) -> float | None:
        """The rank exponent a pure power law with this density exponent would have."""
        return 1.0 / (self.alpha - 1.0) if self.alpha > 1 else None

    def to_dict(self) -> dict[str, Any]:
        return {
            "definition": "p(lambda) ~ lambda^(-alpha) on the tail lambda >= xmin: continuous Hill MLE, "
            "xmin minimising the KS distance (Clauset et al. 2009; the powerlaw package's CDF convention)",
            "alpha": self.alpha,
            "xmin": self.xmin,
            "ks_distance": self.ks_distance,
            "n_tail": self.n_tail,
            "stderr": self.stderr,
            "n_candidates": self.n_candidates,
            "candidates_scanned": self.n_candidates if self.n_scanned is None else self.n_scanned,
            "scan": ("every candidate" if self.n_scanned is None or self.n_scanned >= self.n_candidates else
                     f"past {EXACT_CANDIDATES:,} candidates (each an O(n) fit): {GRID_CANDIDATES:,} evenly spaced in "
                     "rank, then every candidate between the best one's neighbours"),
            **({"small_n": f"WeightWatcher's fit of a small layer (fewer than {SMALL_N} eigenvalues): tails of at "
                           f"least {SMALL_N_MIN_TAIL}, alpha = 1 + (n_tail - 1) / sum log(lambda / xmin)"}
               if self.small_n else {}),
            "tail_law": self.tails.preferred if self.tails is not None else None,
            "tails": self.tails.to_dict() if self.tails is not None else None,
            "rank_exponent_equivalent": self.rank_exponent(),
            "relation": "for lambda_j ~ j^(-alpha_rank): alpha_density = 1 + 1/alpha_rank",
        }


def hill(tail_sorted: np.ndarray, xmin: float) -> tuple[float, float]:
    """Hill MLE ``a`` and the KS distance for a sorted (ascending) tail ``>= xmin``."""
    n = tail_sorted.size
    s = float(np.sum(np.log(tail_sorted / xmin)))
    a = 1.0 + n / s if s > 0 else math.inf
    if not math.isfinite(a):
        return a, math.inf
    theo = 1.0 - (tail_sorted / xmin) ** (1.0 - a)
    emp = np.arange(n) / n
    return a, float(np.max(np.abs(theo - emp)))


def density_fit(eigenvalues: np.ndarray, *, xmin: float | None = None, small_n: bool = False) -> DensityFit:
    """Fit the density exponent to positive eigenvalues (below-floor ones already removed). ``small_n``:
    WeightWatcher's rule for fewer than :data:`SMALL_N` of them (:func:`small_n_fit`)."""
    data = np.sort(np.asarray(eigenvalues, dtype=np.float64))
    data = data[data > 0]
    if data.size < 3:
        raise FitError(f"a density fit needs at least 3 positive eigenvalues; got {data.size}.")
    if small_n and xmin is None and data.size < SMALL_N:
        return small_n_fit(data)
    if xmin is not None:
        tail = data[data >= xmin]
        if tail.size < 2:
            raise FitError(f"xmin {xmin:g} leaves {tail.size} eigenvalue(s) in the tail; at least 2 are required.")
        a, ks = hill(tail, xmin)
        return DensityFit(a, float(xmin), ks, tail.size, (a - 1) / math.sqrt(tail.size), 1)
    candidates = unique_sorted(data)[:-1]
    best: tuple[float, float, float, int] | None = None

    def scan(idx: np.ndarray) -> None:
        nonlocal best
        for c in candidates[idx]:
            start = int(np.searchsorted(data, c, side="left"))
            tail = data[start:]
            a, ks = hill(tail, float(c))
            if best is None or ks < best[1]:
                best = (float(c), ks, a, tail.size)

    if candidates.size <= EXACT_CANDIDATES:
        scan(np.arange(candidates.size))
        scanned = int(candidates.size)
    else:  # every candidate costs O(n): a grid of them, then every candidate between the best one's neighbours
        grid = np.unique(np.linspace(0, candidates.size - 1, GRID_CANDIDATES).round().astype(np.int64))
        scan(grid)
        assert best is not None
        k = int(np.searchsorted(candidates, best[0]))
        pos = int(np.searchsorted(grid, k))
        lo, hi = int(grid[max(pos - 1, 0)]), int(grid[min(pos + 1, grid.size - 1)])
        scan(np.arange(lo, hi + 1))
        scanned = int(grid.size + hi - lo + 1)
    assert best is not None
    c, ks, a, n = best
    return DensityFit(a, c, ks, n, (a - 1) / math.sqrt(n), int(candidates.size), scanned)


def small_n_fit(data: np.ndarray) -> DensityFit:
    """WeightWatcher 0.7.7's fit of fewer than :data:`SMALL_N` sorted positive eigenvalues: each tail of at least
    :data:`SMALL_N_MIN_TAIL` (all of them when there are fewer) with ``a = 1 + (n - 1) / sum log(lambda / x_min)``
    and its ``D``; the first ``x_min`` of least ``D`` (a tail whose ``a`` is not above 1 has ``D = 1``)."""
    n_all = data.size
    k_min = SMALL_N_MIN_TAIL if n_all >= SMALL_N_MIN_TAIL else n_all
    best: tuple[float, float, float, int] | None = None
    for i in range(n_all - 1):
        n = n_all - i
        if n < k_min:
            break
        s = float(np.sum(np.log(data[i:] / data[i])))
        if s <= 1e-12:
            continue
        a = 1.0 + (n - 1) / s
        ks = float(np.max(np.abs(1.0 - (data[i:] / data[i]) ** (1.0 - a) - np.arange(n) / n))) if a > 1 else 1.0
        if best is None or ks < best[1]:
            best = (float(data[i]), ks, a, n)
    if best is None:
        raise FitError(f"the {n_all} eigenvalues are all equal: no tail to fit.")
    c, ks, a, n = best
    return DensityFit(a, c, ks, n, (a - 1) / math.sqrt(n), n_all - 1, n_all - 1, small_n=True)
