"""WeightWatcher's per-layer metrics, named as WeightWatcher names them (Martin & Mahoney).

They are defined on the eigenvalues of the summed second moment ``W^T W`` — WeightWatcher's
"ESD", the squared singular values of the weight matrix, with no ``1/N`` — so spectra's
eigenvalues (a covariance or ``X^T X / n``) are scaled back by the number of rows: ``lambda * n``
uncentred (use ``--uncentered`` for WeightWatcher's numbers), ``lambda * (n - ddof)`` centred.
With ``lambda`` those eigenvalues (floors resolved) and ``alpha`` the density exponent:

- ``log_norm = log10(sum lambda)`` (``log10 ||W||_F^2``);
- ``log_spectral_norm = log10(lambda_max)`` (``log10 ||W||_2^2``);
- ``alpha_weighted = alpha * log_spectral_norm``;
- ``stable_rank = sum lambda / lambda_max``;
- ``mp_spikes``: eigenvalues above the Marchenko–Pastur bulk edge ``(sum lambda / M) (1 + 1/sqrt(Q))^2``
  for an ``N x M`` matrix (``N >= M``, ``Q = N / M``), i.e. the edge of a random matrix with the same
  mean squared entry. (WeightWatcher fits the bulk's sigma with a kernel density and adds a
  Tracy–Widom margin, so its ``num_spikes`` can differ; this edge has a closed form.)
- ``verdict``: ``over-trained`` when ``alpha < lo``, ``under-trained`` when ``alpha > hi``, else ``ok``
  (WeightWatcher's guidance, ``lo = 2``, ``hi = 6``; settable).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

DEFAULT_ALPHA_RANGE = (2.0, 6.0)
VERDICTS = ("over-trained", "ok", "under-trained")


@dataclass(frozen=True, slots=True)
class WeightMetrics:
    alpha: float | None
    alpha_weighted: float | None
    log_norm: float | None
    log_spectral_norm: float | None
    stable_rank: float | None
    mp_spikes: int
    mp_bulk_edge: float | None
    verdict: str | None
    alpha_range: tuple[float, float]
    sum_factor: float
    parameters: int

    def to_dict(self) -> dict[str, Any]:
        return {
            "convention": "WeightWatcher's: eigenvalues of W^T W (squared singular values, no 1/N) = spectra's "
            f"eigenvalues x {self.sum_factor:g}",
            "alpha": self.alpha,
            "alpha_weighted": self.alpha_weighted,
            "log_norm": self.log_norm,
            "log_spectral_norm": self.log_spectral_norm,
            "stable_rank": self.stable_rank,
            "mp_spikes": self.mp_spikes,
            "mp_bulk_edge": self.mp_bulk_edge,
            "verdict": self.verdict,
            "alpha_range": list(self.alpha_range),
            "parameters": self.parameters,
            "definitions": {
                "alpha": "density exponent p(lambda) ~ lambda^-alpha (Hill MLE, KS xmin): WeightWatcher's alpha",
                "alpha_weighted": "alpha * log10(lambda_max)",
                "log_norm": "log10(sum lambda) = log10 ||W||_F^2",
                "log_spectral_norm": "log10(lambda_max) = log10 ||W||_2^2",
                "stable_rank": "sum lambda / lambda_max",
                "mp_spikes": "eigenvalues above the Marchenko-Pastur edge (sum lambda / M)(1 + 1/sqrt(Q))^2, N x M, "
                "N >= M, Q = N/M (closed form; WeightWatcher fits sigma by kernel density)",
                "verdict": "over-trained if alpha < lo, under-trained if alpha > hi, else ok",
            },
        }


def check_alpha_range(lo: float, hi: float) -> tuple[float, float]:
    from spectra_cli.errors import OptionError, param

    if not (math.isfinite(lo) and math.isfinite(hi) and 0 < lo < hi):
        raise OptionError(f"{param('alpha_range', f'{lo:g}:{hi:g}')}: need 0 < LO < HI (WeightWatcher's is 2:6).")
    return float(lo), float(hi)


def verdict(alpha: float | None, alpha_range: tuple[float, float]) -> str | None:
    if alpha is None or not math.isfinite(alpha):
        return None
    lo, hi = alpha_range
    return "over-trained" if alpha < lo else "under-trained" if alpha > hi else "ok"


def weight_metrics(resolved: np.ndarray, *, n_rows: int, n_features: int, sum_factor: float,
                   density_alpha: float | None, alpha_range: tuple[float, float] = DEFAULT_ALPHA_RANGE
                   ) -> WeightMetrics:
    """The metrics of one matrix from its resolved eigenvalues (floors set to 0)."""
    lam = np.asarray(resolved, dtype=np.float64) * sum_factor
    total = float(lam.sum())
    top = float(lam.max()) if lam.size else 0.0
    big, small = max(n_rows, n_features), min(n_rows, n_features)
    log_norm = math.log10(total) if total > 0 else None
    log_spec = math.log10(top) if top > 0 else None
    edge = None
    spikes = 0
    if total > 0 and small > 0:
        q = big / small
        edge = total / small * (1.0 + 1.0 / math.sqrt(q)) ** 2
        spikes = int(np.count_nonzero(lam > edge))
    aw = density_alpha * log_spec if density_alpha is not None and log_spec is not None else None
    return WeightMetrics(
        alpha=density_alpha,
        alpha_weighted=aw,
        log_norm=log_norm,
        log_spectral_norm=log_spec,
        stable_rank=total / top if top > 0 else None,
        mp_spikes=spikes,
        mp_bulk_edge=edge,
        verdict=verdict(density_alpha, alpha_range),
        alpha_range=alpha_range,
        sum_factor=sum_factor,
        parameters=n_rows * n_features,
    )
