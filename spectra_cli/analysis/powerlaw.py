"""Rank-form power-law fits over an inclusive rank window (docs/numbers.md, "Power-law fits").

Models (``y = log lambda``, ``x = log j``):

- ``power-law``: ``lambda_j = C j^(-alpha)``, i.e. ``y = log C - alpha x``.
- ``log-corrected`` (Paquette, Xiao & Zhu 2026, Theorem 1): ``lambda_j = C (log^(p-1)(j+1) / j)^alpha``,
  i.e. ``y = log C + alpha ((p-1) log log(j+1) - log j)`` for a given degree ``p``.
- ``broken``: two power laws joined continuously at a crossover rank ``j_b``:
  ``y = log C - alpha_1 x - (alpha_2 - alpha_1) max(0, x - log j_b)``; ``j_b`` by least squares.

Methods (which points, which weights):

- ``ols``: every integer rank in the window, equal weights (the plain rank-window fit of published activation
  spectra, Stringer et al. 2019).
- ``logspaced``: ``log lambda`` interpolated linearly in ``log j`` at ``M`` points evenly
  spaced in ``log j`` (``M = max(10, min(ranks in window, 20 per decade))``): equal weight per decade.
- ``inv-rank``: every integer rank, weights ``1/j`` (the alpha-ReQ code).

Only ranks at or below the spectrum's usable rank (above the numerical and sampling
floors) ever enter a fit.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

import numpy as np

from spectra_cli.analysis import unique_sorted
from spectra_cli.errors import FitError, OptionError, param
from spectra_cli.validate import check_choice, int_of

if TYPE_CHECKING:
    from spectra_cli.analysis.population import PopulationFit

METHODS = ("ols", "logspaced", "inv-rank")
MODELS = ("power-law", "log-corrected", "broken")
MIN_POINTS = 3
LOGSPACED_PER_DECADE = 20
# Broken fits keep at least this many points on each side of the crossover.
BROKEN_MIN_SIDE = 5

MODEL_DEFINITIONS = {
    "power-law": "lambda_j = C j^(-alpha)",
    "log-corrected": "lambda_j = C (log^(p-1)(j+1) / j)^alpha (Paquette, Xiao & Zhu 2026, Theorem 1)",
    "broken": "lambda_j = C j^(-alpha) below the crossover j_b, continuous with slope -alpha_2 above it",
}
METHOD_DEFINITIONS = {
    "ols": "least squares of log lambda on log j over every integer rank in the window",
    "logspaced": "least squares on log lambda interpolated at points evenly spaced in log j "
    f"(max(10, min(ranks, {LOGSPACED_PER_DECADE} per decade)) points)",
    "inv-rank": "weighted least squares over every integer rank with weights 1/j (alpha-ReQ)",
}
SELECTION_CRITERION = (
    "BIC on the log residuals, m log(SSR/m) + k log m (k = 2 power-law, 2 log-corrected, 4 broken); lowest wins"
)


@dataclass(frozen=True, slots=True)
class Window:
    """An inclusive 1-based rank window and how it was chosen."""

    k_min: int
    k_max: int
    source: str  # "default", "user", "fallback", "auto"; "context" (sequence's controls, the context's window)
    reason: str



@dataclass(frozen=True, slots=True)
class BootstrapCI:
    """Bootstrap interval of alpha over groups of row blocks.

    ``low``/``high`` is the basic (bias-corrected) interval ``[2 a - q_hi, 2 a - q_lo]``;
    ``percentile_low``/``percentile_high`` the plain percentile interval ``[q_lo, q_hi]``;
    ``bias`` the mean of the replicates minus the estimate. Finite sampling biases a
    sample spectrum's slope (Marchenko–Pastur); the replicates reproduce that bias, so the
    basic interval covers the truth where the plain percentile one does not (tests, bench).
    """

    level: float
    low: float
    high: float
    percentile_low: float
    percentile_high: float
    bias: float
    replicates: int
    groups: int
    seed: int
    top: int | None = None  # each replicate's leading eigenvalues only (the main spectrum's top-k route)

    def to_dict(self) -> dict[str, Any]:
        return {
            "level": self.level, "low": self.low, "high": self.high,
            "percentile_low": self.percentile_low, "percentile_high": self.percentile_high,
            "bias": self.bias, "replicates": self.replicates, "groups": self.groups, "seed": self.seed,
            "method": "basic bootstrap [2 alpha - q(1 - (1 - level)/2), 2 alpha - q((1 - level)/2)] over replicates "
            "that resample contiguous groups of row blocks with replacement (moments reused, no re-read); "
            "percentile_low/high is the plain percentile interval",
            "eigenvalues": ("every eigenvalue of each replicate (eigvalsh), one decomposition shared by all windows"
                            if self.top is None else
                            f"the leading {self.top} eigenvalues of each replicate (block Lanczos, as the main "
                            "spectrum; eigvalsh where it does not converge), one decomposition shared by all windows"),
        }


@dataclass(frozen=True, slots=True)
class RankFit:
    """One fitted model over one window.

    Attributes:
        model, method: see the module docstring.
        alpha: the rank exponent (for ``broken``, the one below the crossover).
        intercept: ``log C`` (natural log).
        r2: weighted coefficient of determination of ``log lambda``.
        residual_rms: weighted root mean square of the ``log lambda`` residuals.
        stderr: least-squares standard error of alpha (``nan`` when undefined).
        se: the sampling standard error of alpha (None when not derived: the broken model).
        n_points: points used; bic: the selection criterion's value.
        degree: ``p`` of the log-corrected model; alpha_2, crossover: of the broken model.
        ci: a bootstrap interval of alpha, when asked for.
        population: the population exponent behind this fit (``--population``), when asked for.
    """

    model: str
    method: str
    alpha: float
    intercept: float
    r2: float
    residual_rms: float
    stderr: float
    n_points: int
    bic: float
    window: Window
    degree: int | None = None
    alpha_2: float | None = None
    crossover: float | None = None
    ci: BootstrapCI | None = None
    population: PopulationFit | None = None
    #: The sampling standard error of alpha (the delta method, :mod:`spectra_cli.analysis.uncertainty`):
    #: its spread over samples of the rows, where ``stderr`` is the scatter of the points about the line.
    se: float | None = None
    #: Why there is no ``se`` (None when there is one, or when none was asked for).
    se_missing: str | None = None

    def predict(self, ranks: np.ndarray) -> np.ndarray:
        """Model eigenvalues at (real) ranks."""
        x = np.log(ranks)
        if self.model == "log-corrected":
            p = self.degree or 1
            u = (p - 1) * np.log(np.log(ranks + 1.0)) - x if p > 1 else -x
            return np.exp(self.intercept + self.alpha * u)
        y = self.intercept - self.alpha * x
        if self.model == "broken" and self.crossover is not None and self.alpha_2 is not None:
            y -= (self.alpha_2 - self.alpha) * np.maximum(0.0, x - math.log(self.crossover))
        return np.exp(y)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "model": self.model,
            "method": self.method,
            "definition": f"{MODEL_DEFINITIONS[self.model]}; {self.method}: {METHOD_DEFINITIONS[self.method]}",
            "alpha": self.alpha,
            "intercept": self.intercept,
            "r2": self.r2,
            "residual_rms": self.residual_rms,
            "stderr": self.stderr,
            "se": self.se,
            "se_missing": self.se_missing,
            "n_points": self.n_points,
            "bic": self.bic,
            "window": [self.window.k_min, self.window.k_max],
            "window_source": self.window.source,
            "window_reason": self.window.reason,
            "ci": self.ci.to_dict() if self.ci is not None else None,
            "population": self.population.to_dict() if self.population is not None else None,
        }
        if self.model == "log-corrected":
            out["degree"] = self.degree
        if self.model == "broken":
            out["alpha_2"] = self.alpha_2
            out["crossover"] = self.crossover
        return out


def parse_window(text: str) -> tuple[int, int] | None:
    """``K1:K2`` as two ints; ``auto`` as None (the automatic window)."""
    if not isinstance(text, str):
        raise OptionError(f"{param('window', text, show=True)} must be a string 'K1:K2' or 'auto'.")
    if text.strip().lower() == "auto":
        return None
    m = re.fullmatch(r"\s*(\d+)\s*:\s*(\d+)\s*", text)
    if not m:
        raise OptionError(f"{param('window', text)} is not K_MIN:K_MAX with 1-based ranks (e.g. 11:200) or 'auto'.")
    k1, k2 = int_of("window", m.group(1), text), int_of("window", m.group(2), text)
    if k1 < 1:
        raise OptionError(f"{param('window', text)}: ranks are 1-based; K_MIN must be at least 1.")
    if k1 > k2:
        raise OptionError(f"{param('window', text)}: K_MIN {k1} is greater than K_MAX {k2}.")
    return k1, k2


def resolve_window(
    requested: tuple[int, int] | None, *, n_features: int, usable_rank: int
) -> tuple[Window, list[str]]:
    """The window a fit will use, clipped to the usable rank, and warnings about it.

    Default (the convention of published transformer spectra): ranks 11 to floor(d / 10). If that leaves
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
    reason = f"ranks 11..floor(d/10) = 11..{k2}, the default (the convention of published transformer spectra)"
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


def auto_window(
    eigenvalues: np.ndarray, usable_rank: int, *, tolerance: float = 0.05, per_decade: int = 16,
    min_ranks: int = 10,
) -> Window:
    """The widest straight window: a deterministic search with a stated criterion.

    Candidate endpoints lie on a grid of ``per_decade`` points per decade of rank between 1
    and the usable rank (both ends included). Among windows holding at least ``min_ranks``
    integer ranks whose ``ols`` residual RMS in ``log lambda`` is at most ``tolerance``, the
    one spanning the most decades wins; ties go to the smaller ``k_min``.
    """
    r = int(usable_rank)
    if r < min_ranks:
        raise FitError(f"{param('window', 'auto')} needs at least {min_ranks} usable ranks; the spectrum has {r}.")
    y = np.log(np.asarray(eigenvalues[:r], dtype=np.float64))
    x = np.log(np.arange(1, r + 1, dtype=np.float64))
    # Prefix sums give every window's least-squares fit in O(1).
    c = [np.concatenate([[0.0], np.cumsum(v)]) for v in (np.ones(r), x, y, x * x, x * y, y * y)]
    grid = unique_sorted(np.round(np.exp(np.linspace(0, math.log(r), max(2, int(per_decade * math.log10(r)) + 1)))))
    grid = grid.astype(int)
    grid = unique_sorted(np.clip(grid, 1, r))
    best: tuple[float, int, int, float] | None = None
    for a in grid:
        for b in grid[grid >= a + min_ranks - 1]:
            s = [ci[b] - ci[a - 1] for ci in c]
            m, sx, sy, sxx, sxy, syy = s
            vxx = sxx - sx * sx / m
            vxy = sxy - sx * sy / m
            vyy = syy - sy * sy / m
            ssr = max(vyy - vxy * vxy / vxx, 0.0) if vxx > 0 else vyy
            rms = math.sqrt(ssr / m)
            if rms > tolerance:
                continue
            span = math.log10(b / a)
            if best is None or span > best[0] + 1e-12 or (abs(span - best[0]) <= 1e-12 and a < best[1]):
                best = (span, int(a), int(b), rms)
    if best is None:
        raise FitError(
            f"{param('window', 'auto')} found no window of at least {min_ranks} ranks with ols residual RMS "
            f"<= {tolerance:g}; "
            f"choose one with {param('window')} K1:K2 or raise {param('auto_tolerance')}."
        )
    span, a, b, rms = best
    reason = (
        f"widest window (in decades) with ols residual RMS of log lambda <= {tolerance:g} and >= {min_ranks} ranks, "
        f"endpoints on a {per_decade}-per-decade grid over ranks 1..{r} (usable rank); "
        f"found {a}..{b} ({span:.2f} decades, RMS {rms:.3g})"
    )
    return Window(a, b, "auto", reason)


def fit_points(eigenvalues: np.ndarray, window: Window, method: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Ranks (real), ``log lambda`` and weights of the points a method fits."""
    check_choice("method", method, METHODS)
    ranks = np.arange(window.k_min, window.k_max + 1, dtype=np.float64)
    lam = np.asarray(eigenvalues[window.k_min - 1 : window.k_max], dtype=np.float64)
    if lam.size != ranks.size or np.any(~(lam > 0)):
        raise FitError(f"window {window.k_min}:{window.k_max} reaches eigenvalues that are not positive.")
    y = np.log(lam)
    if method == "ols":
        return ranks, y, np.ones_like(ranks)
    if method == "inv-rank":
        return ranks, y, 1.0 / ranks
    decades = math.log10(window.k_max / window.k_min) if window.k_max > window.k_min else 0.0
    m = max(10, min(ranks.size, math.ceil(LOGSPACED_PER_DECADE * decades)))
    xs = np.linspace(math.log(window.k_min), math.log(window.k_max), m)
    ys = np.interp(xs, np.log(ranks), y)
    return np.exp(xs), ys, np.ones(m)


def _wls(A: np.ndarray, y: np.ndarray, w: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Weighted least squares: coefficients, residuals and the coefficient covariance."""
    sw = np.sqrt(w)
    coef, *_ = np.linalg.lstsq(A * sw[:, None], y * sw, rcond=None)
    resid = y - A @ coef
    m, p = A.shape
    wn = w * (m / w.sum())  # weights normalised to mean 1
    dof = m - p
    if dof > 0:
        sigma2 = float(np.sum(wn * resid**2)) / dof
        try:
            cov = sigma2 * np.linalg.inv((A * wn[:, None]).T @ A)
        except np.linalg.LinAlgError:
            cov = np.full((p, p), np.nan)
    else:
        cov = np.full((p, p), np.nan)
    return coef, resid, cov


def _summary(y: np.ndarray, w: np.ndarray, resid: np.ndarray, k: int) -> tuple[float, float, float]:
    """Weighted R^2, weighted residual RMS and BIC."""
    wsum = float(w.sum())
    ybar = float(np.sum(w * y) / wsum)
    ss_res = float(np.sum(w * resid**2))
    ss_tot = float(np.sum(w * (y - ybar) ** 2))
    r2 = 1.0 - ss_res / ss_tot if ss_tot > 0 else 1.0
    m = y.size
    mean_sq = ss_res / wsum
    bic = m * math.log(max(mean_sq, 1e-300)) + k * math.log(m)
    return r2, math.sqrt(mean_sq), bic


def fit_model(
    eigenvalues: np.ndarray, window: Window, *, method: str = "ols", model: str = "power-law", degree: int = 2
) -> RankFit:
    """Fit one model over one window with one method."""
    check_choice("model", model, MODELS)
    j, y, w = fit_points(eigenvalues, window, method)
    x = np.log(j)
    m = y.size
    if model == "power-law":
        coef, resid, cov = _wls(np.column_stack([np.ones(m), x]), y, w)
        r2, rms, bic = _summary(y, w, resid, 2)
        return RankFit("power-law", method, -float(coef[1]), float(coef[0]), r2, rms,
                       float(np.sqrt(cov[1, 1])), m, bic, window)
    if model == "log-corrected":
        if degree < 1:
            raise OptionError(f"{param('degree', degree)} must be at least 1 (1 is the plain power law).")
        u = (degree - 1) * np.log(np.log(j + 1.0)) - x
        coef, resid, cov = _wls(np.column_stack([np.ones(m), u]), y, w)
        r2, rms, bic = _summary(y, w, resid, 2)
        return RankFit("log-corrected", method, float(coef[1]), float(coef[0]), r2, rms,
                       float(np.sqrt(cov[1, 1])), m, bic, window, degree=degree)
    return _fit_broken(j, x, y, w, window, method)


def _fit_broken(j: np.ndarray, x: np.ndarray, y: np.ndarray, w: np.ndarray, window: Window,
                method: str) -> RankFit:
    m = y.size
    if m < 2 * BROKEN_MIN_SIDE + 1:
        raise FitError(
            f"a broken power law needs at least {2 * BROKEN_MIN_SIDE + 1} points; window {window.k_min}:"
            f"{window.k_max} gives {m}."
        )
    ones = np.ones(m)

    def ssr_at(xb: float) -> tuple[float, np.ndarray, np.ndarray, np.ndarray]:
        A = np.column_stack([ones, x, np.maximum(0.0, x - xb)])
        coef, resid, cov = _wls(A, y, w)
        return float(np.sum(w * resid**2)), coef, resid, cov

    # The search only needs the SSR: with x and y centred on their weighted means, the least squares
    # on [1, x, max(0, x - xb)] reduces to a 2 x 2 solve in closed form (no lstsq per candidate).
    sw = float(w.sum())
    xc, yc = x - float(w @ x) / sw, y - float(w @ y) / sw
    sxx, sxy, syy = float(w @ (xc * xc)), float(w @ (xc * yc)), float(w @ (yc * yc))

    def ssr(xb: float) -> float:
        h = np.maximum(0.0, x - xb)
        hc = h - float(w @ h) / sw
        shh, sxh, shy = float(w @ (hc * hc)), float(w @ (xc * hc)), float(w @ (hc * yc))
        det = sxx * shh - sxh * sxh
        if det <= 1e-12 * sxx * max(shh, 1e-300):  # the hinge is (almost) collinear with x
            return syy - sxy * sxy / sxx
        return syy - (shh * sxy * sxy - 2.0 * sxh * sxy * shy + sxx * shy * shy) / det

    candidates = [int(i) for i in range(BROKEN_MIN_SIDE - 1, m - BROKEN_MIN_SIDE)]
    if len(candidates) > 400:  # coarse pass on a subset, then every point around the best
        coarse = sorted({int(i) for i in np.linspace(candidates[0], candidates[-1], 200)})
        best_c = min(coarse, key=lambda i: ssr(float(x[i])))
        step = len(candidates) // 200 + 2
        candidates = list(range(max(candidates[0], best_c - step), min(candidates[-1], best_c + step) + 1))
    best_i = min(candidates, key=lambda i: ssr(float(x[i])))
    # Refine between neighbouring points: the SSR is smooth in the break position.
    lo, hi = x[max(best_i - 1, 0)], x[min(best_i + 1, m - 1)]
    xr, fr = golden_section(ssr, float(lo), float(hi), xatol=1e-10)
    xb = xr if fr <= ssr(float(x[best_i])) else float(x[best_i])
    _, coef, resid, cov = ssr_at(xb)
    r2, rms, bic = _summary(y, w, resid, 4)
    alpha_1 = -float(coef[1])
    alpha_2 = -float(coef[1] + coef[2])
    return RankFit("broken", method, alpha_1, float(coef[0]), r2, rms, float(np.sqrt(cov[1, 1])), m, bic,
                   window, alpha_2=alpha_2, crossover=float(math.exp(xb)))


def golden_section(f: Any, lo: float, hi: float, *, xatol: float) -> tuple[float, float]:
    """Minimum of a unimodal ``f`` on ``[lo, hi]`` by golden-section search (to ``xatol``).

    The SSR of the broken law is smooth and unimodal between neighbouring points; this keeps
    ``fit`` from importing ``scipy.optimize`` (0.5 s of start-up) for a one-dimensional search."""
    inv = (math.sqrt(5.0) - 1.0) / 2.0
    a, b = lo, hi
    c, d = b - inv * (b - a), a + inv * (b - a)
    fc, fd = f(c), f(d)
    while b - a > xatol:
        if fc <= fd:
            b, d, fd = d, c, fc
            c = b - inv * (b - a)
            fc = f(c)
        else:
            a, c, fc = c, d, fd
            d = a + inv * (b - a)
            fd = f(d)
    return (c, fc) if fc <= fd else (d, fd)


def fit_ols(eigenvalues: np.ndarray, window: Window) -> RankFit:
    """The plain ``ols`` power-law fit."""
    return fit_model(eigenvalues, window, method="ols", model="power-law")


def with_ci(fit: RankFit, ci: BootstrapCI | None) -> RankFit:
    return replace(fit, ci=ci)


def with_population(fit: RankFit, population: PopulationFit | None) -> RankFit:
    return replace(fit, population=population)


@dataclass(frozen=True, slots=True)
class ModelComparison:
    """Every model on the primary window, and which the criterion prefers."""

    fits: tuple[RankFit, ...]
    best: str
    selected: str

    def to_dict(self) -> dict[str, Any]:
        return {
            "criterion": SELECTION_CRITERION,
            "best": self.best,
            "selected": self.selected,
            "models": {f.model: f.to_dict() for f in self.fits},
        }


def compare_models(
    eigenvalues: np.ndarray, window: Window, *, method: str, degree: int, selected: str
) -> ModelComparison:
    fits = []
    for model in MODELS:
        try:
            fits.append(fit_model(eigenvalues, window, method=method, model=model, degree=degree))
        except FitError:
            continue  # e.g. too few points for the broken model
    best = min(fits, key=lambda f: f.bic).model
    return ModelComparison(tuple(fits), best, selected)
