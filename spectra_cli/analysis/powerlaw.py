"""Rank-form power-law fits ``lambda_j ~ C j^(-alpha)`` over an inclusive rank window.

Method ``ols`` (seed 001 §3): least squares of ``log lambda_j`` on ``log j`` over every
integer rank in the window. Only ranks above the numerical and sampling floors
(the spectrum's ``usable_rank``) enter a fit.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import numpy as np

from spectra_cli.errors import FitError, OptionError

METHODS = ("ols",)
MIN_POINTS = 3
DEFAULT_DEFINITION = "lambda_j ~ C * j^(-alpha) over ranks k_min..k_max (1-based, inclusive)"


@dataclass(frozen=True, slots=True)
class Window:
    """An inclusive 1-based rank window and how it was chosen."""

    k_min: int
    k_max: int
    source: str  # "default", "user", "fallback"
    reason: str

    @property
    def n_points(self) -> int:
        return self.k_max - self.k_min + 1


@dataclass(frozen=True, slots=True)
class PowerLawFit:
    """One fit of ``log lambda_j = intercept - alpha log j``.

    Attributes:
        alpha: the rank exponent (positive for a decaying spectrum).
        intercept: ``log C`` (natural log).
        r2: coefficient of determination in log-log space.
        residual_rms: root mean square of the log residuals.
        stderr: OLS standard error of alpha (``nan`` with fewer than 3 points).
        n_points: ranks used; window: the window with its origin.
    """

    alpha: float
    intercept: float
    r2: float
    residual_rms: float
    stderr: float
    n_points: int
    window: Window
    method: str = "ols"

    def predict(self, ranks: np.ndarray) -> np.ndarray:
        return np.exp(self.intercept - self.alpha * np.log(ranks))

    def to_dict(self) -> dict[str, Any]:
        return {
            "model": "power-law",
            "method": self.method,
            "definition": DEFAULT_DEFINITION + "; ols: least squares of log lambda on log j, every integer rank",
            "alpha": self.alpha,
            "intercept": self.intercept,
            "r2": self.r2,
            "residual_rms": self.residual_rms,
            "stderr": self.stderr,
            "n_points": self.n_points,
            "window": [self.window.k_min, self.window.k_max],
            "window_source": self.window.source,
            "window_reason": self.window.reason,
        }


def parse_window(text: str) -> tuple[int, int]:
    m = re.fullmatch(r"\s*(\d+)\s*:\s*(\d+)\s*", text)
    if not m:
        raise OptionError(f"--window {text!r} is not K_MIN:K_MAX with 1-based ranks (e.g. 11:200).")
    k1, k2 = int(m.group(1)), int(m.group(2))
    if k1 < 1:
        raise OptionError(f"--window {text!r}: ranks are 1-based; K_MIN must be at least 1.")
    if k1 > k2:
        raise OptionError(f"--window {text!r}: K_MIN {k1} is greater than K_MAX {k2}.")
    return k1, k2


def resolve_window(
    requested: tuple[int, int] | None, *, n_features: int, usable_rank: int
) -> tuple[Window, list[str]]:
    """The window a fit will use, clipped to the usable rank, and warnings about it.

    Default (seed 001's transformer panels): ranks 11 to floor(d / 10). If that leaves
    fewer than 10 usable ranks, the fallback is ranks 1..usable_rank.
    """
    warnings: list[str] = []
    if requested is not None:
        k1, k2 = requested
        if k1 > usable_rank:
            raise FitError(
                f"window {k1}:{k2} starts beyond the usable rank {usable_rank} "
                "(eigenvalues past it are below the numerical or sampling floor)."
            )
        if k2 > usable_rank:
            warnings.append(
                f"window {k1}:{k2} clipped to {k1}:{usable_rank}: ranks past {usable_rank} "
                "are below the numerical or sampling floor"
            )
            k2 = usable_rank
        if k2 - k1 + 1 < MIN_POINTS:
            raise FitError(
                f"window {k1}:{k2} holds {k2 - k1 + 1} usable rank(s); at least {MIN_POINTS} are required."
            )
        return Window(k1, k2, "user", "given with --window"), warnings
    k1, k2 = 11, n_features // 10
    reason = f"ranks 11..floor(d/10) = 11..{k2} (seed 001 transformer panels)"
    if k2 > usable_rank:
        reason += f", clipped to the usable rank {usable_rank}"
        k2 = usable_rank
    if k2 - k1 + 1 >= 10:
        return Window(k1, k2, "default", reason), warnings
    if usable_rank < MIN_POINTS:
        raise FitError(
            f"only {usable_rank} rank(s) lie above the numerical and sampling floors; "
            f"a fit needs at least {MIN_POINTS}."
        )
    why = (
        f"the default window 11..floor(d/10) leaves {max(k2 - k1 + 1, 0)} usable ranks (< 10); "
        f"fitted ranks 1..{usable_rank} instead"
    )
    warnings.append(why)
    return Window(1, usable_rank, "fallback", why), warnings


def fit_ols(eigenvalues: np.ndarray, window: Window) -> PowerLawFit:
    """Unweighted least squares of log eigenvalue on log rank over the window."""
    ranks = np.arange(window.k_min, window.k_max + 1, dtype=np.float64)
    lam = np.asarray(eigenvalues[window.k_min - 1 : window.k_max], dtype=np.float64)
    if lam.size != ranks.size or np.any(lam <= 0):
        raise FitError(f"window {window.k_min}:{window.k_max} reaches eigenvalues that are not positive.")
    x = np.log(ranks)
    y = np.log(lam)
    xm, ym = x.mean(), y.mean()
    sxx = float(np.sum((x - xm) ** 2))
    slope = float(np.sum((x - xm) * (y - ym)) / sxx)
    intercept = float(ym - slope * xm)
    resid = y - (intercept + slope * x)
    ss_res = float(np.sum(resid**2))
    ss_tot = float(np.sum((y - ym) ** 2))
    m = ranks.size
    r2 = 1.0 - ss_res / ss_tot if ss_tot > 0 else 1.0
    stderr = float(np.sqrt(ss_res / (m - 2) / sxx)) if m > 2 else float("nan")
    return PowerLawFit(
        alpha=-slope,
        intercept=intercept,
        r2=r2,
        residual_rms=float(np.sqrt(ss_res / m)),
        stderr=stderr,
        n_points=m,
        window=window,
    )
