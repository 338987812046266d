"""The population behind a sample spectrum (``fit --population``).

With ``n`` rows of ``d`` features the sample spectrum is the population spectrum spread by sampling
(Marchenko & Pastur 1967): its slope over a rank window is biased upwards, by far more than its
stated uncertainty at ``n/d`` of a few. :func:`population_fit` estimates the exponent of a power-law
population spectrum whose expected sample spectrum, at the same ``n`` and ``d`` and under the rows' own
spread of scales, matches the observed one over the window; its parts live beside it, one idea a module:

- :mod:`spectra_cli.analysis.equivalent`: the expected sample spectrum of a population (the deterministic
  equivalent, Silverstein's equation with row scales);
- :mod:`spectra_cli.analysis.row_scales`: the rows' scales, deconvolved from the histogram of squared row
  norms (an elliptical, or separable, model: El Karoui 2009; Paul & Silverstein 2009; Couillet & Hachem
  2014), and the bias-corrected participation ratio (Chen, Zhang & Zhong 2010);
- :mod:`spectra_cli.analysis.sampling_curve`: the data's own sampling curve, which checks the row model
  (real rows are not all such draws: repeated tokens, rows of one document that depend on each other);
- :mod:`spectra_cli.analysis.simulate`: samples simulated from the fitted population (the interval below
  ``n/d = 10``, and the sampling curve's scatter).

This module holds the population's shape, the match, the interval and the test of the power law over the
window (the bend).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from spectra_cli.analysis.equivalent import (
    MIN_RANKS,
    Grid,
    evaluations_side_by_side,
    expected_eigenvalues,
    grid_density,
    slope_of,
    slope_weights,
)
from spectra_cli.analysis.row_scales import (
    RowScales,
    coordinate_cumulant,
    deconvolved_scales,
    directions_t2,
)
from spectra_cli.analysis.sampling_curve import CURVE_SIMULATIONS, Subsamples, sampling_curve
from spectra_cli.analysis.simulate import partition_spectra, simulated_rows, simulated_stream
from spectra_cli.errors import FitError
from spectra_cli.options import POPULATION_ROUTES
from spectra_cli.stream.states import ProjectionMoments

#: The exponents the population model spans; an estimate at either bound is not reported.
ALPHA_BOUNDS = (0.0, 12.0)
#: Evaluations of the expected spectrum a fit typically makes (the length of its progress bar).
TYPICAL_EVALUATIONS = 60
#: With n >= FIRST_ORDER_RATIO d (n the degrees of freedom; weighted rows: Kish's effective sample where fewer) the
#: interval and the bend test are first order (Anderson 1963) instead of simulated, and so is the sampling curve's
#: scatter (the partitions' own). Study (bench/README,
#: d = 512, Gaussian and elliptical rows, alpha 0.5-1.5, 5 seeds each): at n/d = 10, 15 and 20 the first-order
#: intervals are a median 7 % wider than the simulated ones (-1 % to +29 %), with the same coverage (59/60 each at
#: 15-20; 29/30 against 28/30 at 10) and medians within 0.001 of them, in 0.14-0.46 of the time: the 40 simulated
#: samples of n rows are 2 n d^2 flops each, a cost that grows where the correction shrinks. Lowered from 40 to 30,
#: then to 10 (issue 33).
FIRST_ORDER_RATIO = 10.0
#: The power-law population is said not to fit when the window's bend has a p-value below this.
BEND_P = 0.01
#: The step of the central differences that linearise the fit at its solution (the slope gain d S / d alpha, the
#: tail's Jacobian: the first-order interval and each simulated sample's mapping to alpha). The expected spectrum
#: is discretised on a grid that moves with the population, so it is rough on the scale of 0.01 in an exponent:
#: steps of 0.01 and 0.005 moved the gain by up to 20 % and the first order's sd by 40 % between samples of 1,270
#: and 1,290 rows of the same population (d = 128, ranks 5..60); from 0.03 they agree within 3 % (0.05 and 0.1
#: the same), the slope being linear in alpha over such a step.
LINEARISATION_STEP = 0.03
#: Gauss-Newton iterations of the curved alternative's fit (at most).
BEND_ITERATIONS = 12
#: The curved alternative's fit stops when a step lowers its sum of squares by less than this fraction of it: past
#: that its curvature wanders on the expected spectrum's grid rounding (4 k x 384 tokens: steps of 0.003 in the
#: curvature, the sum of squares moving by 3e-5 of itself either way, 30 evaluations where 13 had reached it).
BEND_SSE_RTOL = 1e-4


class BendStatistic:
    """How much log eigenvalues over a window of ranks bend in log rank: the coefficient of ``(log j - m)^2``
    (``m`` the window's middle in log rank) made orthogonal to a level and a slope, so that neither moves it:
    ``b(v) = q . v / q . q``. Positive: steepening with rank (a cutoff), negative: flattening."""

    def __init__(self, ranks: np.ndarray) -> None:
        x = np.log(np.asarray(ranks, dtype=np.float64))
        self.span = float(x[-1] - x[0])  # the window's width in log rank
        basis = np.column_stack([np.ones_like(x), x])
        q = (x - 0.5 * (x[0] + x[-1])) ** 2
        self.q = q - basis @ np.linalg.lstsq(basis, q, rcond=None)[0]
        self.qq = float(self.q @ self.q)

    def __call__(self, v: np.ndarray) -> float:
        return float(-(self.q @ v) / self.qq) if self.qq > 0 else 0.0


BEND_DEFINITION = ("statistic: the bend of the observed log spectrum over the window about the fitted population's "
                   "expected one (the coefficient of -(log j - m)^2, m the window's middle in log rank, orthogonal to "
                   "a level and a slope); simulated_mean and simulated_sd: the same over the bootstrap's samples "
                   "simulated from the fitted power-law population; p_value: two-sided, Student's t with B - 1 degrees "
                   f"of freedom; fits: p_value >= {BEND_P:g}; when it does not, curved_alpha is the window's "
                   "population slope of the curved alternative (log tau = log C - alpha log j - curvature (log j - "
                   "m)^2 over the window, the same tail), matched like alpha, and |model_error| = |curved_alpha - "
                   "alpha| widens the interval on both sides; null \"first order\" (n/d >= "
                   f"{FIRST_ORDER_RATIO:g}, n the degrees of freedom or Kish's effective sample where fewer): "
                   "simulated_mean 0 and simulated_sd the bend's first-order sd "
                   "(sqrt(2 E[s^2] / n) |q| / q.q), a normal p-value; null \"analytic\" (below that, the default): "
                   "simulated_mean and simulated_sd are the mean offset and sd of the same linear statistic by the "
                   "central limit theorem of linear spectral statistics at the fitted population, a normal p-value")


def bend_test(observed: float, simulated: np.ndarray | None, *, level: float = 0.95,
              null: tuple[float, float] | None = None, null_from: str = "first order") -> dict[str, Any]:
    """The observed bend against the bends of samples simulated from the fitted population (a parametric
    bootstrap test of the power-law population over the window), or against ``null = (mean, sd)``, a normal
    law (the first-order route's, or the theory's: ``null_from`` names it in the result's ``null``)."""
    from scipy.special import ndtr, stdtr

    out: dict[str, Any] = {"statistic": observed, "simulated_mean": None, "simulated_sd": None, "p_value": None,
                           "fits": True, "null": "simulated" if null is None else null_from,
                           "definition": BEND_DEFINITION}
    if null is not None:
        mean, sd = null
        out.update({"simulated_mean": mean, "simulated_sd": sd})
        if not (sd > 0 and math.isfinite(observed)):
            return out
        z = (observed - mean) / sd
        p = float(2.0 * ndtr(-abs(z)))  # (the normal law's upper tail)
        out.update({"z": z, "p_value": p, "fits": p >= BEND_P})
        return out
    sim = np.empty(0) if simulated is None else simulated[np.isfinite(simulated)]
    if sim.size < 3 or not math.isfinite(observed):
        return out
    mean, sd = float(sim.mean()), float(sim.std(ddof=1))
    out.update({"simulated_mean": mean, "simulated_sd": sd})
    if not sd > 0:
        return out
    z = (observed - mean) / (sd * math.sqrt(1.0 + 1.0 / sim.size))
    p = float(2.0 * stdtr(sim.size - 1, -abs(z)))  # (Student's t's upper tail)
    out.update({"z": z, "p_value": p, "fits": p >= BEND_P})
    return out


# --------------------------------------------------------------------------------------------------
# The fit
# --------------------------------------------------------------------------------------------------


def on_grid_copies(f_on: Callable[[np.ndarray, Grid], np.ndarray],
                   grid: Grid) -> Callable[[list[np.ndarray]], list[np.ndarray]]:
    """``f_on`` at several points at once (a finite difference's), each from ``grid``'s last solution on its own
    copy of it, so that the order does not matter: side by side on the cores where one evaluation does not solve
    its own pieces side by side but is large enough to pay for the threads
    (:func:`~spectra_cli.analysis.equivalent.evaluations_side_by_side`), else one after another
    (:func:`spectra_cli.threads.map_side_by_side`)."""
    from spectra_cli import threads

    def many(points: list[np.ndarray]) -> list[np.ndarray]:
        groups, last, floor, ceiling = grid.groups, grid.last, grid.floor, grid.ceiling
        return threads.map_side_by_side(lambda ab: f_on(ab, Grid(groups=groups, last=last, floor=floor,
                                                                 ceiling=ceiling)), points,
                                        wanted=evaluations_side_by_side(grid.points, grid.atoms))

    return many


def population_spectrum(log_c: float, alpha: float, tail: np.ndarray | tuple[float, ...], d: int,
                        knots: tuple[int, ...], *, bend: tuple[float, int] | None = None) -> np.ndarray:
    """``tau_j = C j^-alpha`` for ``j <= knots[0]`` (the window's end), then a log-linear segment of slope
    ``-tail[i]`` in ``log j`` from ``knots[i]`` on (continuous; the last one to rank d).

    ``bend = (beta, k0)``: the curved alternative, ``log tau_j = log C - alpha log j - beta (u_j - m)^2`` with
    ``u_j = log j`` clipped to ``[log k0, log knots[0]]`` and ``m`` its midpoint (a parabola in log-log over the
    window, the law of slope ``alpha`` below it); ``beta = 0`` is the power law."""
    j = np.arange(1, d + 1, dtype=np.float64)
    lj = np.log(j)
    lt = log_c - alpha * lj
    level = log_c - alpha * math.log(knots[0])
    if bend is not None and bend[0] != 0.0:
        lo, hi = math.log(bend[1]), math.log(knots[0])
        lt = lt - bend[0] * (np.clip(lj, lo, hi) - 0.5 * (lo + hi)) ** 2
        level -= bend[0] * (0.5 * (hi - lo)) ** 2
    for i, slope in enumerate(tail):
        a = knots[i]
        b = knots[i + 1] if i + 1 < len(knots) else d
        seg = (j > a) & (j <= b) if i + 1 < len(tail) else j > a
        lt[seg] = level - slope * (lj[seg] - math.log(a))
        level -= slope * (math.log(b) - math.log(a))
    return np.exp(lt)


def tail_knots(k1: int, r_max: int, d: int) -> tuple[int, ...]:
    """Where the tail's segments start: at the window's end and, with enough observed ranks past it, at
    points evenly spaced in log rank up to the last matched rank (one segment per 20 observed ranks, at
    most 3: real spectra steepen along their tail). Empty when no rank past the window is observed."""
    observed = r_max - k1
    if observed < 1:
        return ()
    m = int(min(3, max(1, observed // 20)))
    edges = np.exp(np.linspace(math.log(k1), math.log(r_max), m + 1))[:-1]
    return tuple(int(round(e)) for e in edges)


def gauss_newton(y: np.ndarray, start: np.ndarray, f: Callable[[np.ndarray], np.ndarray], *,
                 h: float = 1e-2, max_iter: int = 8, tol: float = 1e-3,
                 many: Callable[[list[np.ndarray]], list[np.ndarray]] | None = None,
                 jacobian: np.ndarray | None = None, sse_rtol: float = 0.0,
                 ) -> tuple[np.ndarray, np.ndarray, int, np.ndarray | None]:
    """Least squares of ``y - log C - f(exponents)``, ``log C`` profiled out (a column of ones): Gauss-Newton
    with forward differences, steps of at most 0.3 and halved while the sum of squares grows. Returns
    the exponents, ``f`` there, the evaluations made and the last Jacobian used. ``many``: ``f`` at several points
    at once (the differences' points, independent of each other), in place of one after another. ``jacobian``:
    one Jacobian for every step, none computed (the chord method: a refinement from a converged point, the
    function changed a little). ``sse_rtol``: also stop when a step lowers the sum of squares by less than this
    fraction of it, or when no halving of it lowers it at all (then at the point before it; without ``sse_rtol`` such
    a step is taken and the iterations go on). (Broyden's secant updates in place of the differences save a third of the
    evaluations but stop early on flat tails: match RMS 0.027 against 0.008 at n = d.)"""

    def sse(f0: np.ndarray) -> float:
        r = y - f0
        return float(np.sum((r - r.mean()) ** 2))

    ab = start.astype(np.float64).copy()
    f0 = f(ab)
    s0, evals = sse(f0), 1
    J = jacobian
    for _ in range(max_iter):
        if jacobian is None:
            J = _jacobian(ab, f, f0, h=h, central=False, many=many)
            evals += ab.size
        else:
            J = jacobian
        # (a column below 1e-9 of the largest singular value is no direction: an exponent clipped at its bound gives
        # an exactly zero column, whose rounding would otherwise be read as a slope and take the whole step)
        step = np.linalg.lstsq(J, y - f0, rcond=1e-9)[0][1:]
        step *= min(1.0, 0.3 / max(float(np.max(np.abs(step))), 1e-300))
        for _h in range(6):
            trial = ab + step
            f1 = f(trial)
            evals += 1
            s1 = sse(f1)
            if s1 <= s0 * (1 + 1e-9):
                break
            step = step * 0.5
        if sse_rtol > 0.0 and s1 > s0 * (1 + 1e-9):  # (no halving lowered it: at the objective's rounding, stop here)
            break
        settled = sse_rtol > 0.0 and s0 - s1 < sse_rtol * s0
        ab, f0, s0 = trial, f1, s1
        if float(np.max(np.abs(step))) < tol or settled:
            break
    return ab, f0, evals, J


def _jacobian(ab: np.ndarray, f: Callable[[np.ndarray], np.ndarray], f0: np.ndarray, *, h: float = 5e-3,
              central: bool = True, many: Callable[[list[np.ndarray]], list[np.ndarray]] | None = None) -> np.ndarray:
    """``[1, df/d exponent_1, ...]`` by finite differences (central at the solution, for the bootstrap); ``many``:
    ``f`` at all the differences' points at once (else ``f`` at each in turn)."""
    steps = [h * np.eye(ab.size)[k] for k in range(ab.size)]
    points = [ab + e for e in steps] + ([ab - e for e in steps] if central else [])
    up = many(points) if many is not None else [f(p) for p in points]
    k = ab.size
    return np.column_stack([np.ones_like(f0)] + [(up[i] - up[k + i]) / (2 * h) if central else (up[i] - f0) / h
                                                 for i in range(k)])


#: The leading directions whose projections' kurtosis tells heavy-tailed coordinates from row scales, and the runs of
#: consecutive rows their jackknife leaves out in turn (:func:`spectra_cli.run.fit_steps.coordinate_sums`; 10 or 20
#: directions reach ones the sample mixes more, and read a smaller kappa: bench/README.md).
PROJECTED_DIRECTIONS = 5
COORDINATE_GROUPS = 32

METHOD = ("the exponent alpha of a population spectrum tau_j = C j^-alpha over the window (continued to rank 1) "
          "and, past its end, up to 3 continuous log-linear segments with fitted slopes (a free tail: real spectra "
          "steepen), whose expected sample spectrum at the same n and d has the observed sample slope over the "
          "window; the tail and level (and shape_alpha) from the least-squares match of the log eigenvalues over "
          "the window and the tail; "
          "the expected spectrum is the deterministic equivalent of the separable sample covariance (Silverstein's "
          "equation with row scales: Paul & Silverstein 2009, Couillet & Hachem 2014; its distribution function "
          "exact at each point of a log grid of sqrt(n) points a decade, from a primitive of the Stieltjes "
          "transform; quantiles averaged per rank as in Ledoit & Wolf's QuEST); the model's bias correction scaled "
          "by the data's own sampling curve (the "
          "slope's change when a quarter of the row groups is left out, against the model's expectation of it, "
          "drawn towards 1 by its scatter over samples simulated from the fitted population (on the analytic route the "
          "theory's sd of that change; on the first-order route the partitions' own scatter alone); sampling_curve); "
          "interval: below n/d = 10, analytic (route \"analytic\", the default): the window slope's linear statistic "
          "in the log eigenvalues is an L-statistic, whose mean offset and variance are those of the linear spectral "
          "statistic sum psi(lambda_i), psi' = a(N(x)) / x, by the central limit theorem of linear spectral "
          "statistics at the fitted population (Bai & Silverstein 2004, real Gaussian entries; with row scales its "
          "separable form given the scales, plus the scales' own sampling through their influence on the expected "
          "statistic; centred rows through n = rows - 1, Zheng, Bai & Yao 2015; independent heavy-tailed "
          "coordinates, their excess kurtosis kappa read from a second pass (the rows' projections on the "
          f"{PROJECTED_DIRECTIONS} leading eigenvectors and their norms, solved together) where it is beyond 2 "
          "grouped-jackknife standard errors "
          "above 0 and the norms' spread is its own, through the theorem's fourth-cumulant terms, Pan & Zhou 2008, "
          "Najim & Yao 2016, in place of row scales: rows.fourth_cumulant), the bias subtracted whole, a "
          "normal quantile; with population_route \"simulate\", or where the theory does not hold (the limiting law "
          "does not cover the matched ranks: said in notes), a linearised parametric bootstrap from the fitted "
          "population; either widened to the "
          "grouped jackknife of the sample slope where that is wider; with n (degrees of freedom; weighted rows: "
          f"Kish's effective sample where fewer) >= {FIRST_ORDER_RATIO:g} d the bootstrap's spread is first order "
          "(Anderson 1963) and the sampling curve's scatter the partitions' own, nothing simulated (bootstrap.route "
          "\"first order\")")


@dataclass(frozen=True, slots=True)
class PopulationFit:
    """The population exponent behind one rank-window fit (``fit.population``)."""

    alpha: float
    low: float
    high: float
    naive_alpha: float
    segment_exponents: tuple[float, ...]
    segment_knots: tuple[int, ...]
    intercept: float
    n_over_d: float
    n_effective: float
    window: tuple[int, int]
    ranks_matched: tuple[int, int]
    match_rms: float
    shape_alpha: float
    gain: float
    bootstrap_sd: float
    bootstrap_bias: float
    bias_corrected: bool
    replicates: int
    seed: int
    scales: dict[str, Any]
    notes: tuple[str, ...] = ()
    cost: dict[str, Any] = field(default_factory=dict)
    level: float = 0.95
    bias_share: float = 0.0
    model_alpha: float | None = None
    sampling_curve: dict[str, Any] = field(default_factory=dict)
    bend: dict[str, Any] = field(default_factory=dict)
    route: str = "simulated"

    @property
    def power_law_fits(self) -> bool:
        """False when the spectrum bends over the window beyond what sampling makes of a power-law population."""
        return bool(self.bend.get("fits", True))

    def to_dict(self) -> dict[str, Any]:
        return {
            "alpha": self.alpha, "ci": [self.low, self.high], "level": self.level,
            "naive_alpha": self.naive_alpha, "n_over_d": self.n_over_d, "n_effective": self.n_effective,
            "window": list(self.window), "ranks_matched": list(self.ranks_matched),
            "segments": {"knots": list(self.segment_knots), "exponents": list(self.segment_exponents),
                         "definition": "the fitted population: log tau continuous and linear in log j, with slope "
                                       "-exponents[0] (alpha, before any bias correction) from rank 1 to knots[0] "
                                       "(the window's end) and -exponents[i] from knots[i-1] to knots[i], the last to "
                                       "rank d; no knots: one law throughout"},
            "intercept": self.intercept,
            "match_rms": self.match_rms, "shape_alpha": self.shape_alpha, "slope_gain": self.gain,
            "shape_definition": "shape_alpha: the window's exponent of the least-squares match of the whole shape; "
                                "slope_gain: d(expected sample slope) / d(alpha) there",
            "match_definition": "root mean square of log(observed) - log(expected) sample eigenvalues over "
                                "ranks_matched",
            "bootstrap": {"replicates": self.replicates, "seed": self.seed, "sd": self.bootstrap_sd,
                          "bias": self.bootstrap_bias, "bias_corrected": self.bias_corrected,
                          "bias_share": self.bias_share, "sd_first_order": self.cost.get("sd_first_order"),
                          "route": self.route,
                          "interval": "alpha -+ t(0.975, B - 1) sd over B sample spectra simulated from the fitted "
                                      "population (sd times sqrt(1 + share^2 / B)): "
                                      "each one's sample slope over the window, less the change of the expected slope "
                                      "that its own tail (one linearised step of the shape match) makes, divided by "
                                      "slope_gain; their mean offset is subtracted from alpha in proportion to its "
                                      "evidence (bias_share: 0 within twice its standard error, 1 beyond three, "
                                      "linear between); with a sampling curve, the half-width is the larger of "
                                      "that and t(0.975, partitions (parts - 1)) sampling_curve.sd (the data's own; "
                                      "sampling_curve.interval_from says which); route \"first order\" (n/d >= "
                                      f"{FIRST_ORDER_RATIO:g}, n the degrees of freedom or Kish's effective sample "
                                      "where fewer; replicates 0): sd is sd_first_order, the standard "
                                      "deviation of the same linear statistic when each log eigenvalue moves "
                                      "independently by sqrt(2 E[s^2] / n) (Anderson 1963), and t becomes the "
                                      "normal quantile; route \"analytic\" (replicates 0): sd and bias are the "
                                      "central limit theorem's for the same linear statistic at the fitted "
                                      "population (module spectra_cli.analysis.lss), the bias subtracted whole "
                                      "(bias_share 1), t the normal quantile"},
            "rows": self.scales, "notes": list(self.notes), "method": METHOD, "cost": dict(self.cost),
            "model_alpha": self.alpha if self.model_alpha is None else self.model_alpha,
            "sampling_curve": dict(self.sampling_curve) or None,
            "bend": dict(self.bend) or None,
        }


def is_first_order(n: int, d: int, n_effective: float | None = None) -> bool:
    """Whether :func:`population_fit` takes the first-order route (no simulated samples) at ``n`` degrees of freedom
    (rows - 1 centred) and ``d`` dimensions: n >= FIRST_ORDER_RATIO d, weighted rows counting as Kish's effective
    sample ``n_effective`` where that is fewer (equal weights, whose Kish is n less rounding, count as n)."""
    if n_effective is not None and math.isfinite(n_effective) and n_effective < n * (1.0 - 1e-9):
        n = int(math.floor(n_effective))
    return n >= FIRST_ORDER_RATIO * d


def simulated_decompositions(n: int, d: int, *, replicates: int, curve_parts: int | None,
                             n_effective: float | None = None, analytic: bool = False) -> int:
    """How many eigendecompositions of simulated samples (each of the smaller of ``n`` and ``d``) one window's
    :func:`population_fit` makes: none on the first-order and analytic routes; else the bootstrap's ``replicates``
    and, with the data's sampling curve (``curve_parts``: its parts; None without one), CURVE_SIMULATIONS samples of
    ``curve_parts + 1`` spectra."""
    if analytic or is_first_order(n, d, n_effective):
        return 0
    return replicates + (CURVE_SIMULATIONS * (curve_parts + 1) if curve_parts else 0)


@dataclass
class _Match:
    """One population fit's problem, shared by its phases: the scale-free sample spectrum ``lam`` (``top`` its
    level), the rows ``n``, ``c = d / n``, the window ``k0..k1`` within the matched ranks ``k0..r_max``, the tail's
    knots, the observed log eigenvalues ``y`` over the matched ranks, the rows' scales ``sc`` (None: Gaussian rows),
    the grid of the expected spectrum, the notes said and the expected spectra evaluated so far; ``kappa``: the
    coordinates' fourth cumulant the analytic route takes (0: Gaussian coordinates, or not read)."""

    lam: np.ndarray
    top: float
    n: int
    k0: int
    k1: int
    r_max: int
    knots: tuple[int, ...]
    sc: tuple[np.ndarray, np.ndarray] | None
    margin: float
    notes: list[str]
    grid: Grid = field(default_factory=Grid)
    evals: int = 0
    done: int = 0
    tick: Callable[[int], None] = field(default=lambda done: None)
    law: tuple[np.ndarray, Any] | None = None
    kappa: float = 0.0

    @property
    def d(self) -> int:
        return int(self.lam.size)

    @property
    def c(self) -> float:
        return self.d / self.n

    @property
    def ranks(self) -> np.ndarray:
        return np.arange(self.k0, self.r_max + 1)

    @property
    def y(self) -> np.ndarray:
        return np.log(self.lam[self.ranks - 1])

    @property
    def win(self) -> slice:
        return slice(0, self.k1 - self.k0 + 1)

    def f_on(self, ab: np.ndarray, g: Grid) -> np.ndarray:
        """The expected sample spectrum's logarithm over the matched ranks, of the population with exponents
        ``ab`` (the window's, then each tail segment's), on grid ``g``."""
        ab = np.clip(ab, *ALPHA_BOUNDS)
        tau = population_spectrum(0.0, ab[0], ab[1:], self.d, self.knots or (self.k1,))
        ranks = self.ranks
        return np.log(np.maximum(expected_eigenvalues(tau, self.c, int(ranks[-1]), scales=self.sc, grid=g,
                                                      from_rank=self.k0)[ranks - 1], 1e-300))

    def f(self, ab: np.ndarray) -> np.ndarray:
        out = self.f_on(ab, self.grid)
        self.done += 1
        self.tick(min(self.done, TYPICAL_EVALUATIONS))
        return out

    def many(self, points: list[np.ndarray]) -> list[np.ndarray]:
        out = on_grid_copies(self.f_on, self.grid)(points)
        self.done += len(points)
        self.tick(min(self.done, TYPICAL_EVALUATIONS))
        return out


def _scales_model(eigenvalues: np.ndarray, n: int, scales: RowScales,
                  offset: float = 0.0) -> tuple[tuple[np.ndarray, np.ndarray] | None, dict[str, Any]]:
    """The rows' scales ``(values, weights)`` deconvolved from their squared norms (None: Gaussian rows) and what
    the deconvolution says, for the spectrum ``eigenvalues`` of ``n`` degrees of freedom (any scale, any order)."""
    lam = np.sort(np.asarray(eigenvalues, dtype=np.float64))[::-1]
    lam = lam / lam[0]
    v = scales.values + offset
    p = scales.counts / scales.counts.sum()
    vm = float(p @ v)
    m2_obs = float(p @ ((v / vm) ** 2)) if vm > 0 else 1.0
    return deconvolved_scales(scales, directions_t2(lam, m2_obs, n), offset)


def _problem(eigenvalues: np.ndarray, n: int, window: tuple[int, int], scales: RowScales | None, offset: float,
             null_directions: int) -> tuple[_Match, float, dict[str, Any]]:
    """The problem of a population fit (:class:`_Match`), the sample slope over the window and what the row model
    is: the window cut to the ranks the sample resolves less a margin at its lower edge, the tail's knots, the
    rows' scales deconvolved from their norms."""
    lam = np.sort(np.asarray(eigenvalues, dtype=np.float64))[::-1]
    d = lam.size
    k0, k1 = (int(v) for v in window)
    top = float(lam[0]) if d else 0.0
    if not top > 0 or n < 3:
        raise FitError("the population exponent needs at least 3 rows and a non-zero spectrum.")
    lam = lam / top  # scale-free: the level is restored at the end
    notes: list[str] = []
    if null_directions:
        notes.append(f"{null_directions} null direction(s) of the data (below the numerical floor, or near-null such "
                     f"as LayerNorm's) left out: the population has {d} dimensions")
    r = min(d, n, int(np.count_nonzero(lam > 0)))
    margin = 0.9 if scales is None else 0.8
    r_max = min(max(int(math.floor(margin * r)), k0 + 3), r)
    if r_max - k0 + 1 < MIN_RANKS:
        raise FitError(f"the population exponent needs at least {MIN_RANKS} ranks from {k0} among the {r} the sample "
                       f"resolves with a margin at its lower edge (ranks {k0}..{r_max}); start the window lower.")
    if r_max < k1:
        notes.append(f"window cut from {k0}:{k1} to {k0}:{r_max}: {r} non-zero sample eigenvalues, the last "
                     f"{r - r_max} left out at the lower edge of the spectrum")
    k1 = min(k1, r_max)
    knots = tail_knots(k1, r_max, d)
    if not knots:
        notes.append("no rank past the window is observed: the tail continues the window's law")
    naive = slope_of(np.log(lam[k0 - 1:k1]), k0)
    rows: dict[str, Any] = {"model": "Gaussian rows (every row the same scale)",
                            "source": "none: no histogram of row norms (a moment file written before they were "
                                      "gathered)" if scales is None else scales.source}
    sc: tuple[np.ndarray, np.ndarray] | None = None
    if scales is not None:
        sc, info = _scales_model(lam, n, scales, offset)
        rows = {"model": ("separable rows x = sqrt(s) Sigma^(1/2) z, s from the histogram of squared row norms "
                          "deconvolved (the binned NPMLE of the scales' distribution, the directions' part taken as "
                          "Gamma)") if sc is not None else
                ("Gaussian rows: " + ("the histogram has no non-zero norm" if "cv2_observed" not in info
                                      else "the norms spread no more than the directions themselves make them")),
                **info}
    return _Match(lam, top, n, k0, k1, r_max, knots, sc, margin, notes), naive, rows


def _matched(m: _Match, naive: float, first_order: bool) -> tuple[np.ndarray, float, float]:
    """The population whose expected sample spectrum matches the observed one over the matched ranks (its
    exponents ``ab``), its level and the match's RMS in log lambda."""
    from spectra_cli.stages import stage

    m.tick = stage(f"population: matching the expected spectrum (ranks {m.k0}..{m.k1})", TYPICAL_EVALUATIONS)
    y = m.y
    start = np.full(1 + len(m.knots), naive)
    if first_order and m.knots:
        # with this many rows per feature the sample's tail is near the population's: each segment starts at its own
        # observed slope, not the window's (the real tails steepen to 2-2.5 from ~0.65: 8 capped steps of 4 + 1
        # evaluations became 2-3)
        ends = (*m.knots[1:], m.r_max)
        start[1:] = [np.clip(slope_of(np.log(m.lam[a - 1:b]), a), *ALPHA_BOUNDS) if b - a >= 2 else naive
                     for a, b in zip(m.knots, ends, strict=True)]
    ab, f0, evals, J_match = gauss_newton(y, start, m.f, many=m.many)
    # the atoms merged for the fitted population, then a few more steps from there; on the first-order route on the
    # match's last Jacobian (with many rows the merge moves the expected spectrum a little, not its derivatives: d =
    # 384, n = 50 d, 11 -> 7 evaluations, the same estimates; at n = d it left the match short, elliptical rows'
    # medians 0.025 low on the bench grid against 0.009)
    m.grid.groups = None
    ab, f0, more, _ = gauss_newton(y, ab, m.f, max_iter=3, many=m.many, jacobian=J_match if first_order else None)
    m.evals += evals + more
    if not float(np.min(f0)) > math.log(1e-250):  # (f_on's floor: an expected eigenvalue of 0)
        lost = int(m.ranks[int(np.argmax(f0 <= math.log(1e-250)))])
        raise FitError(f"the expected sample spectrum of the fitted population vanishes from rank {lost} of the "
                       f"matched {m.k0}..{m.r_max}: the deterministic equivalent's solver loses the lower spectrum "
                       "with row scales this uneven, and the row model cannot describe these rows.")
    log_c = float(np.mean(y - f0))
    match_rms = float(np.sqrt(np.mean((y - log_c - f0) ** 2)))
    return np.clip(ab, *ALPHA_BOUNDS), log_c, match_rms


def _slope_alpha(m: _Match, ab: np.ndarray, naive: float) -> tuple[float, float]:
    """alpha itself: the exponent whose expected sample spectrum has the observed sample slope over the window
    (the statistic the user reads; a spectrum that bends inside the window is matched where it is measured), the
    tail and level kept from the match of the whole shape; and the gain, d slope / d alpha."""
    k0, k1, win = m.k0, m.k1, m.win

    def slope(a: float) -> float:
        return slope_of(m.f(np.r_[a, ab[1:]])[win], k0)

    h = LINEARISATION_STEP
    alpha = float(ab[0])
    up, down = m.many([np.r_[alpha + h, ab[1:]], np.r_[alpha - h, ab[1:]]])
    gain = (slope_of(up[win], k0) - slope_of(down[win], k0)) / (2 * h)
    m.evals += 2
    if not gain > 0.05:
        raise FitError(f"the population exponent is not identified over ranks {k0}..{k1}: the expected sample slope "
                       f"does not grow with it there (d slope / d alpha = {gain:.3g}); use a wider window, or more "
                       "rows.")
    for _ in range(3):
        s_a = slope(alpha)
        m.evals += 1
        move = (naive - s_a) / gain
        alpha = float(np.clip(alpha + move, *ALPHA_BOUNDS))
        if abs(move) < 1e-5:
            break
    if not ALPHA_BOUNDS[0] < alpha < ALPHA_BOUNDS[1]:
        raise FitError(f"the population exponent over ranks {k0}..{k1} falls at the bound {alpha:g} of the model "
                       f"({ALPHA_BOUNDS[0]:g}..{ALPHA_BOUNDS[1]:g}): the sample slope ({naive:.4g}) is not that of a "
                       "power-law population there.")
    return alpha, gain


@dataclass
class _Linear:
    """The fitted population linearised: its expected log spectrum ``f_final`` (``fitted`` with the observed
    level), the expected window slope, the whole-shape match's pseudo-inverse ``P`` and how the window slope moves
    with each tail exponent (``tail_gain``); ``sd_rank``: each log eigenvalue's first-order sd, and ``sd_first``
    the exponent's."""

    final: np.ndarray
    f_final: np.ndarray
    fitted: np.ndarray
    expected_slope: float
    P: np.ndarray
    tail_gain: np.ndarray
    sd_rank: float
    sd_first: float
    a_lin: np.ndarray


#: The coordinates' fourth cumulant is taken where it is beyond this many of its jackknife standard errors above 0
#: and the scales' second moment within this many of 1 (or within CUMULANT_M2_MATERIAL of it: scales that spread the
#: norms by under 2 % matter less than the tails; real MiniLM layer 1 reads m2 1.007 +- 0.003 beside kappa 0.41 +-
#: 0.08) and at most 1 + CUMULANT_M2_TOLERANCE (:func:`_coordinates`; Laplace rows read 1.00-1.03, Student-t rows of
#: 5 degrees of freedom, pure row scales, 3).
CUMULANT_SDS = 2.0
CUMULANT_M2_TOLERANCE = 0.1
CUMULANT_M2_MATERIAL = 0.02


def _coordinates(m: _Match, rows: dict[str, Any], projections: ProjectionMoments) -> None:
    """The coordinates' fourth cumulant read (:func:`~spectra_cli.analysis.row_scales.coordinate_cumulant`) and,
    where the data tell it from zero and the norms' spread is its own (no row scales beyond it), taken: the row
    model becomes Gaussian rows' law with that cumulant (``m.kappa``, whose terms the analytic route adds) in place of
    the scales the norms alone suggested. Said in ``rows`` and ``m.notes``."""
    t2 = rows.get("t2")
    if not isinstance(t2, float):  # (no histogram of norms: the directions' t2 from the spectrum, the norms' spread
        total = float(projections.count.sum())  # from the pass's own sums)
        mean_h = float(projections.h1.sum()) / total if total > 0 else 0.0
        m2_obs = float(projections.h2.sum()) / total / mean_h ** 2 if mean_h > 0 else 1.0
        t2 = directions_t2(m.lam, m2_obs, m.n)
    cum = coordinate_cumulant(projections, t2)
    if isinstance(cum, str):
        rows["fourth_cumulant"] = {"kappa": None, "reason": cum}
        return
    rows["fourth_cumulant"] = cum.to_dict()
    heavy, scaled, below = cum.beyond(CUMULANT_SDS, CUMULANT_M2_TOLERANCE, CUMULANT_M2_MATERIAL)
    said = (f"the coordinates' excess kurtosis {cum.kappa:.3g} (SE {cum.kappa_se:.2g}; from the rows' projections "
            f"on the {cum.directions} leading directions and their norms, the scales' second moment {cum.m2:.3g}, SE "
            f"{cum.m2_se:.2g})")
    if not heavy:  # (a negative kappa, lighter tails, would narrow the interval: never taken, and not said: Gaussian
        return     # coordinates read slightly below 0 on the leading sample directions, fitted to the same rows)
    if below:
        m.notes.append(f"{said}: the norms spread less than one scale and those tails would make them (a second moment "
                       "below 1, which no row scales give): the reading's model does not hold, and the coordinates are "
                       "taken as Gaussian; the interval may be narrow")
    elif scaled:
        m.notes.append(f"{said}: the norms read row scales beside heavy tails; the theorem's fourth-cumulant term "
                       "holds for one scale only, so the interval takes "
                       + ("the row scales alone" if m.sc is not None else "Gaussian rows") + " and may be narrow")
    else:
        m.sc, m.kappa = None, cum.kappa
        rows["model"] = ("rows of independent coordinates in the population's eigenbasis with excess kurtosis kappa "
                         "(the norms' spread is theirs, not row scales'): Gaussian rows' law, whose interval the "
                         "fourth cumulant's terms widen (Najim & Yao 2016)")
        m.notes.append(f"{said}: heavy-tailed coordinates, not row scales; the row model is one scale with that "
                       "fourth cumulant, whose terms widen the interval")


def _linearised(m: _Match, alpha: float, ab: np.ndarray, gain: float) -> _Linear:
    final = np.r_[alpha, ab[1:]]
    f_final = m.f(final)
    expected_slope = slope_of(f_final[m.win], m.k0)
    fitted = float(np.mean(m.y - f_final)) + f_final
    # the tail's part: how the expected window slope moves with each tail exponent, and how the tail moves
    # with the data (one Gauss-Newton step of the whole-shape match, linearised at the fitted population)
    J = _jacobian(final, m.f, f_final, many=m.many, h=LINEARISATION_STEP)
    P = np.linalg.pinv(J)
    # (the window slope is linear in the log eigenvalues: its derivatives are the slopes of J's columns)
    tail_gain = np.array([slope_of(J[m.win, 1 + i], m.k0) for i in range(1, final.size)])
    m.evals += 1 + 2 * final.size  # f(final) and the central Jacobian
    # first order (Anderson 1963): with many rows per feature each sample eigenvalue is its population one times the
    # mean of its coordinate's n squared draws, log lambda_j - log tau_j ~ (1/n) sum_i (s_i z_ij^2 - 1): a part
    # common to every rank ((E s^2 - 1) / n, which neither the slope nor the tail's step sees) and an independent
    # one of variance 2 E[s^2] / n; the replicate statistic is linear in log lambda, a' log lambda
    m2_scales = 1.0 if m.sc is None else float(m.sc[1] @ (m.sc[0] * m.sc[0]))
    slope_w = np.zeros(m.ranks.size)
    slope_w[m.win] = slope_weights(m.k0, m.k1 - m.k0 + 1)
    a_lin = (slope_w - tail_gain @ P[2:]) / gain
    sd_rank = math.sqrt(2.0 * m2_scales / m.n)  # each log eigenvalue's own, first order
    return _Linear(final, f_final, fitted, expected_slope, P, tail_gain, sd_rank,
                   sd_rank * float(np.linalg.norm(a_lin)), a_lin)


def _analytic(m: _Match, weights: np.ndarray, tau_hat: np.ndarray) -> tuple[float, float]:
    """The mean offset and the sd of the linear statistic ``weights . log lambda`` over the matched ranks (from rank
    ``m.k0``) at the population ``tau_hat`` and the rows' scales, by the central limit theorem of linear spectral
    statistics (:mod:`spectra_cli.analysis.lss`)."""
    from spectra_cli.analysis.lss import rank_weights_derivative

    law = _law(m, tau_hat)
    fp = rank_weights_derivative(law, weights, m.k0)
    return law.mean(fp, m.kappa), math.sqrt(max(law.variance(fp, m.kappa), 0.0))


def _theory(m: _Match, weights: np.ndarray, tau_hat: np.ndarray) -> tuple[float, float] | str:
    """The analytic route's mean offset and sd of the linear statistic ``weights . log lambda`` over the matched
    ranks (:func:`_analytic`), or why it does not hold here: the limiting law does not cover the matched ranks
    (the solver lost part of the spectrum) or the variance is not positive and finite. (The rows' scales being a
    sample enter to first order: with scales 0.1 and 1.9 at even odds, d = n = 48 and 96, that term carried 55 % and
    71 % of the variance and the sd was 20 % below simulated samples'; with Gamma(1) scales at n = d it carries
    55-76 % and the intervals cover as the simulated ones do (bench/README.md). The data's own grouped jackknife
    bounds the interval from below either way.)"""

    why = _law_short(_law(m, tau_hat), m.k0, m.r_max)
    if why is not None:
        return why
    bias, sd = _analytic(m, weights, tau_hat)
    if not (math.isfinite(sd) and sd > 0 and math.isfinite(bias)):
        return "the theorem's variance is not positive"
    return bias, sd


def _law_short(law: Any, k_lo: int, k_hi: int) -> str | None:
    """Why the limiting law ``law`` cannot stand for the sample over ranks ``k_lo..k_hi`` (None: it can): its grid did
    not settle, or its counting function does not reach both ends (the solver lost part of the spectrum)."""
    if not law.settled:
        return "the limiting law's grid did not settle (the solver's counts jump)"
    if not law.x.size or float(law.count.max()) < k_hi - 0.5 or float(law.count.min()) > k_lo - 0.5:
        return "the limiting law does not cover the matched ranks"
    return None


def _law(m: _Match, tau_hat: np.ndarray) -> Any:
    """The limiting sample spectrum of ``tau_hat`` over the matched ranks (kept on the problem: the interval and the
    bend's null share it)."""
    from spectra_cli.analysis.lss import sample_law

    if m.law is None or m.law[0] is not tau_hat:
        m.law = (tau_hat, sample_law(tau_hat, m.c, counts=(m.k0 - 1, m.r_max), scales=m.sc))
    return m.law[1]


def _replicated(m: _Match, lin: _Linear, alpha: float, gain: float, tau_hat: np.ndarray, bend_of: BendStatistic, *,
                first_order: bool, replicates: int, level: float, rng: np.random.Generator,
                theory: tuple[float, float] | None = None) -> tuple[np.ndarray, float, float, float, float]:
    """The interval's parts: the simulated samples' bends (empty on the first-order and analytic routes), the bias of
    the replicates' exponent, its sd, the share of the bias subtracted and the interval's quantile. ``theory``: the
    analytic route's bias and sd (:func:`_theory`)."""
    from scipy.special import ndtri, stdtrit  # (scipy.special's quantiles: scipy.stats's, without its import)

    from spectra_cli.stages import stage

    k0, win = m.k0, m.win

    def replicate(spectrum: np.ndarray) -> tuple[float, float]:
        """One simulated sample spectrum: its window slope, less what its own tail moves the expected slope by,
        mapped through the gain to an exponent; and its bend over the window about the expected spectrum."""
        log_b = np.log(np.maximum(spectrum[m.ranks - 1], 1e-300))
        d_tail = (lin.P @ (log_b - lin.fitted))[2:]
        return (alpha + (slope_of(log_b[win], k0) - lin.expected_slope - float(lin.tail_gain @ d_tail)) / gain,
                bend_of(log_b[win] - lin.f_final[win]))

    if first_order:
        # at this many rows per feature the simulations would only restate the first order (within ~0-30 %, it the
        # wider: bench/README), at the cost of 40 samples of n rows: the interval and the bend's null are read off it
        m.notes.append(f"n/d = {m.n / m.d:.3g} >= {FIRST_ORDER_RATIO:g}: the interval and the bend test are first "
                       "order (each sample eigenvalue its population one times the mean of n squared draws: Anderson "
                       f"1963) instead of {replicates} simulated samples; with this many rows they agree within about "
                       "0-30 %, the first order the wider")
        return np.empty(0), 0.0, lin.sd_first, 0.0, float(ndtri(0.5 + level / 2))
    if theory is not None:
        bias, sd = theory
        if not ALPHA_BOUNDS[0] < alpha - bias < ALPHA_BOUNDS[1]:
            m.notes.append(f"the theory's mean offset ({bias:+.3g}) would take the estimate past the model's "
                           f"exponents {ALPHA_BOUNDS[0]:g}..{ALPHA_BOUNDS[1]:g}: it is not subtracted")
            return np.empty(0), bias, sd, 0.0, float(ndtri(0.5 + level / 2))
        return np.empty(0), bias, sd, 1.0, float(ndtri(0.5 + level / 2))
    tick = stage(f"population: simulated spectra (ranks {k0}..{m.k1})", replicates)
    draws = np.empty(replicates)
    bends = np.empty(replicates)
    # (a few samples at a time, drawn in turn and decomposed side by side, the next ones drawn meanwhile)
    # (the statistics are scale-free: the population is simulated at its own top, 1, whatever its fitted level)
    for b, spectrum in enumerate(simulated_stream(tau_hat / tau_hat.max(), m.n, rng, m.sc, replicates)):
        draws[b], bends[b] = replicate(spectrum)
        tick(b + 1)
    bias = float(draws.mean() - alpha)
    sd = float(draws.std(ddof=1))
    # the mean offset is subtracted in proportion to its evidence: none within twice its standard error, all of
    # it beyond three, linearly between (a hard switch at two made alpha jump by two standard errors of the
    # offset between samples that differ by rounding)
    se_bias = sd / math.sqrt(replicates)
    share = min(max(abs(bias) / se_bias - 2.0, 0.0), 1.0) if se_bias > 0 else float(bias != 0.0)
    if share and not ALPHA_BOUNDS[0] < alpha - share * bias < ALPHA_BOUNDS[1]:
        m.notes.append(f"the bootstrap's mean offset ({bias:+.3g}) would take the estimate past the model's "
                       f"exponents {ALPHA_BOUNDS[0]:g}..{ALPHA_BOUNDS[1]:g}: it is not subtracted")
        share = 0.0
    # the sd is estimated from the replicates (Student's t with B - 1 degrees of freedom), and a subtracted mean
    # offset carries its own error, share sd / sqrt(B)
    zq = float(stdtrit(replicates - 1, 0.5 + level / 2))
    sd *= math.sqrt(1.0 + share * share / replicates)
    return bends, bias, sd, share, zq


def _change_sd(m: _Match, tau_hat: np.ndarray, k_end: int, parts: int, dof_sub: float) -> float | None:
    """The sampling curve's change from theory: the sd of ``D = mean_q S(sub-sample q) - S(all rows)`` over samples
    of the fitted population (``S`` the window's slope over ranks ``m.k0..k_end``; ``parts`` sub-samples of
    ``dof_sub`` degrees of freedom, each leaving one part out), from the covariances of the linear spectral
    statistics of the whole sample and of sub-samples that share rows (:func:`spectra_cli.analysis.lss.
    cross_covariance`), and the scales' own sampling. None where the sub-samples' limiting law cannot be had (its grid
    did not settle, or it misses the window)."""
    from spectra_cli.analysis.lss import cross_covariance, rank_weights_derivative, sample_law, scales_influence

    k0, n, d = m.k0, m.n, m.d
    weights = slope_weights(k0, k_end - k0 + 1)
    full = _law(m, tau_hat)
    sub = sample_law(tau_hat, d / dof_sub, counts=(k0 - 1, k_end), scales=m.sc)
    if _law_short(sub, k0, k_end) is not None:
        return None  # (the caller simulates instead)
    f, fs = rank_weights_derivative(full, weights, k0), rank_weights_derivative(sub, weights, k0)
    v_full = full.variance(f, m.kappa, scales=False)  # (given the scales: their own sampling is phi's term below)
    v_sub = sub.variance(fs, m.kappa, scales=False)
    c_pair = cross_covariance(sub, fs, sub, fs, shared=max(2.0 * dof_sub - n, 0.0), kappa=m.kappa)
    c_nest = cross_covariance(sub, fs, full, f, shared=dof_sub, kappa=m.kappa)
    var = (parts * v_sub + parts * (parts - 1) * c_pair) / parts ** 2 - 2.0 * c_nest + v_full
    if m.sc is not None:  # (a row's scale moves D by its influence on a sub-sample's statistic less the whole's)
        p = m.sc[1]
        phi = scales_influence(sub, fs) - scales_influence(full, f)
        var += float(p @ (phi - p @ phi) ** 2) / n
    return math.sqrt(max(var, 0.0))


def _curve_read(m: _Match, subsamples: Subsamples, alpha: float, gain: float, expected_slope: float,
                tau_hat: np.ndarray, estimate: float, half: float, *, first_order: bool, seed: int,
                level: float, analytic: bool = False) -> tuple[float, float, dict[str, Any]]:
    """The data's own sampling curve read (:func:`sampling_curve`): the estimate moved by its correction, the
    interval's half-width at least its spread's, and what it says."""
    from scipy.special import stdtrit

    from spectra_cli.stages import stage

    k0, d, n = m.k0, m.d, m.n
    curve: dict[str, Any] = {}
    sub_top = subsamples.spectra / m.top
    g_curve = Grid(groups=m.grid.groups, last=m.grid.last)  # the fitted population's atoms, for both n and n'
    # a change of a few 1e-3 in the slope is read, on the fit's grid for both n and n' (the distribution being
    # exact at each point, three times as dense a grid moves the change by at most 2e-5: d = 40 to 1,024, n/d = 2
    # to 50; before issue 33's sixth round, the density's quadrature needed the three times)
    ppd_curve = grid_density(d, m.c)

    def expected_slope_at(dof: float, k_end: int) -> float:
        e = expected_eigenvalues(tau_hat, d / dof, k_end, scales=m.sc, grid=g_curve, points_per_decade=ppd_curve,
                                 from_rank=k0)
        return slope_of(np.log(np.maximum(e[k0 - 1:k_end], 1e-300)), k0)

    def simulated_changes(k_end: int, parts: int) -> np.ndarray:
        """The sampling curve's change on samples simulated from the fitted population (its own stream), one
        random partition of 32 runs of consecutive rows each, centred like the data (none on the first-order
        route: the change's error is then the data's partitions' own; on the analytic one only where the theory
        gave no standard deviation: :func:`sampling_curve` asks for them then)."""
        if first_order:
            return np.empty(0)
        tick_c = stage("population: simulated sampling curves", CURVE_SIMULATIONS)
        rng_c = np.random.default_rng([seed, 20])
        out = np.empty(CURVE_SIMULATIONS)
        G = min(32, n)
        for b in range(CURVE_SIMULATIONS):
            Z = simulated_rows(tau_hat / tau_hat.max(), n + 1, rng_c, m.sc)
            label = np.arange(n + 1) * G // (n + 1)
            part = np.empty(G, dtype=np.int64)
            part[rng_c.permutation(G)] = np.arange(G) % parts
            slopes_b = [slope_of(np.log(np.maximum(v[k0 - 1:k_end], 1e-300)), k0)
                        for v in partition_spectra(Z, part[label], parts)]
            out[b] = float(np.mean(slopes_b[1:])) - slopes_b[0]
            tick_c(b + 1)
        return out

    def change_sd(k_end: int, parts: int, dof_sub: float) -> float | None:
        sd = _change_sd(m, tau_hat, k_end, parts, dof_sub)
        if sd is None:  # (sampling_curve simulates it then)
            m.notes.append("the sampling curve's scatter is simulated, not from theory: the sub-samples' limiting "
                           "law cannot be had (its grid did not settle, or it misses the window)")
        return sd

    read = sampling_curve(replace(subsamples, spectra=sub_top), m.lam, n=n, k0=k0, k1=m.k1, margin=m.margin,
                          bias=expected_slope - alpha, gain=gain, expected_slope=expected_slope_at,
                          simulated_changes=simulated_changes, notes=m.notes,
                          change_sd=change_sd if analytic else None)
    if read is None:
        return estimate, half, curve
    shift, sd_data, df_data, curve = read
    if not ALPHA_BOUNDS[0] < estimate + shift < ALPHA_BOUNDS[1]:
        m.notes.append(f"the sampling curve's correction ({shift:+.3g}) would take the estimate past the model's "
                       f"exponents {ALPHA_BOUNDS[0]:g}..{ALPHA_BOUNDS[1]:g}: it is not applied, and the interval "
                       "is widened by it")
        curve["left_out"] = float(curve.get("left_out", 0.0)) + shift
        shift = 0.0
    curve["shift_applied"] = shift
    half_data = float(stdtrit(df_data, 0.5 + level / 2)) * sd_data
    curve["interval_from"] = "data" if half_data > half else "model"
    return estimate + shift, max(half, half_data), curve


def _bend_tested(m: _Match, lin: _Linear, alpha: float, ab: np.ndarray, bends: np.ndarray, bend_of: BendStatistic,
                 naive: float, gain: float, *, first_order: bool, level: float,
                 analytic_null: tuple[float, float] | None = None) -> dict[str, Any]:
    """The power-law population itself, tested: the observed spectrum's bend over the window (about the expected
    one) against the simulated samples' bends; where it is beyond them, the curved alternative's window slope says
    how far the model's error can move alpha (``model_error``: the interval is widened by it)."""
    k0, k1, win, d = m.k0, m.k1, m.win, m.d
    observed_bend = bend_of(m.y[win] - lin.f_final[win])
    if first_order:  # (the bend is linear in log lambda: its first-order sd, about a mean of 0)
        bend = bend_test(observed_bend, None, level=level,
                         null=(0.0, lin.sd_rank * float(np.linalg.norm(bend_of.q)) / bend_of.qq))
    elif analytic_null is not None:  # (and an L-statistic: its mean and sd from the theory, as the slope's)
        bend = bend_test(observed_bend, None, level=level, null=analytic_null, null_from="analytic")
    else:
        bend = bend_test(observed_bend, bends, level=level)
    if bend["fits"]:
        return bend
    grid_b = Grid(last=m.grid.last, floor=m.grid.floor, ceiling=m.grid.ceiling)
    ranks, knots = m.ranks, m.knots

    def f_bent(ab_: np.ndarray, g: Grid = grid_b) -> np.ndarray:
        a = float(np.clip(ab_[0], *ALPHA_BOUNDS))
        beta = float(np.clip(ab_[1], -a / bend_of.span, a / bend_of.span))  # (kept monotone over the window)
        tau = population_spectrum(0.0, a, np.clip(ab_[2:], *ALPHA_BOUNDS), d, knots or (k1,), bend=(beta, k0))
        return np.log(np.maximum(expected_eigenvalues(tau, m.c, int(ranks[-1]), scales=m.sc, grid=g,
                                                      from_rank=k0)[ranks - 1], 1e-300))

    # the curved alternative fitted like the power law (its bend started at the observed one), then its alpha
    # moved (the bend and the tail kept) until its expected slope is the observed one
    y = m.y
    ab_b, fb, more, _ = gauss_newton(y, np.r_[alpha, bend["statistic"] - bend["simulated_mean"], ab[1:]], f_bent,
                                     max_iter=BEND_ITERATIONS, many=on_grid_copies(f_bent, grid_b),
                                     sse_rtol=BEND_SSE_RTOL)
    m.evals += more
    a_b = float(np.clip(ab_b[0], *ALPHA_BOUNDS))
    beta = float(np.clip(ab_b[1], -a_b / bend_of.span, a_b / bend_of.span))
    for _ in range(3):
        fb = f_bent(np.r_[a_b, beta, ab_b[2:]])
        s_b = slope_of(fb[win], k0)
        m.evals += 1
        move = (naive - s_b) / gain
        a_b = float(np.clip(a_b + move, *ALPHA_BOUNDS))
        if abs(move) < 1e-5:
            break
    tau_b = population_spectrum(0.0, a_b, np.clip(ab_b[2:], *ALPHA_BOUNDS), d, knots or (k1,), bend=(beta, k0))
    curved = slope_of(np.log(tau_b[k0 - 1:k1]), k0)
    error = curved - alpha
    bend.update({"curved_alpha": curved, "curvature": beta, "model_error": error,
                 "curved_match_rms": float(np.sqrt(np.mean((y - float(np.mean(y - fb)) - fb) ** 2)))})
    m.notes.append(f"the power-law population does not fit over ranks {k0}..{k1}: the spectrum bends there beyond "
                   f"what sampling makes of a power law (p = {bend['p_value']:.2g}); a population curved over the "
                   f"window has slope {curved:.4g} there, and the interval is widened either side by the "
                   f"{abs(error):.3g} between them")
    return bend


def _interval(m: _Match, estimate: float, half: float, curve: dict[str, Any],
              bend: dict[str, Any]) -> tuple[float, float]:
    """The interval: ``estimate`` ± ``half``, widened by a sampling-curve correction left out and by the curved
    alternative's model error, cut to the model's exponents, and holding the estimate."""
    low, high = estimate - half, estimate + half
    left_out = float(curve.get("left_out", 0.0))  # a spread ratio past its bound: the correction it leaves out
    low, high = min(low, low + left_out), max(high, high + left_out)
    model_error = abs(float(bend.get("model_error", 0.0)))  # (either side: the curved alternative is itself a model)
    low, high = low - model_error, high + model_error
    if low < ALPHA_BOUNDS[0] or high > ALPHA_BOUNDS[1]:
        m.notes.append(f"the interval is cut to the model's exponents {ALPHA_BOUNDS[0]:g}..{ALPHA_BOUNDS[1]:g} (from "
                       f"{low:.4g}..{high:.4g}): the window says little about alpha")
        low, high = max(low, ALPHA_BOUNDS[0]), min(high, ALPHA_BOUNDS[1])
    # (the estimate lies inside the model's range, so the cut interval is ordered and holds it)
    return min(low, estimate), max(high, estimate)


def population_fit(eigenvalues: np.ndarray, *, n: int, window: tuple[int, int], scales: RowScales | None = None,
                   offset: float = 0.0, n_effective: float | None = None, replicates: int = 40, seed: int = 0,
                   level: float = 0.95, null_directions: int = 0,
                   subsamples: Subsamples | None = None, route: str = "analytic",
                   projections: ProjectionMoments | str | None = None) -> PopulationFit:
    """The population exponent over ``window`` (1-based, inclusive) of a sample spectrum.

    ``eigenvalues``: the sample covariance (or second moment), descending, all d of them; ``n``: the
    sample's degrees of freedom (rows - 1 centred, rows uncentred); ``scales``: the rows' squared norms
    (None: Gaussian rows), ``offset`` added to each (uncentred moments: the mean's squared norm);
    ``n_effective``: Kish's, for weighted rows (reported; the first-order route needs it, not n, at the
    ratio); ``null_directions``: how many directions
    the caller left out of ``eigenvalues`` (null ones: the population's dimension is the rest; noted);
    ``subsamples``: the spectra of sub-samples of the same rows (:func:`sampling_curve`): the data's own
    sampling curve scales the row model's bias correction, and its spread bounds the interval from below;
    ``projections``: per run of consecutive rows, the sums of the rows' projections on the leading eigenvectors and
    of their norms (:class:`~spectra_cli.stream.states.ProjectionMoments`): on the analytic
    route the coordinates' fourth cumulant is read from them and, where it is told from zero and the norms' spread
    is its own, taken instead of row scales (:func:`_coordinates`); a string: why they could not be had (reported).
    ``route``: one of :data:`POPULATION_ROUTES` (below ``n/d = 10``: the interval from theory, or from simulated
    samples where the theory does not hold, said in ``notes``; or from simulated samples always). The population
    model, the equations and the interval are in :data:`METHOD` and the module docstring; the matched ranks are those
    the sample resolves (at most ``min(n, d)``), less a margin at the lower edge of the spectrum (10 %, 20 %
    with row scales, where the smallest scales spread the lowest eigenvalues) — the window is cut to
    them, and with no rank past the window the tail continues the window's law (both said in ``notes``).
    """
    if route not in POPULATION_ROUTES:
        raise ValueError(f"route must be one of {POPULATION_ROUTES}, not {route!r}")
    t0 = time.perf_counter()
    m, naive, rows = _problem(eigenvalues, n, window, scales, offset, null_directions)
    first_order = is_first_order(n, m.d, n_effective)
    if isinstance(projections, str):
        rows["fourth_cumulant"] = {"kappa": None, "reason": projections}
    elif projections is not None and route == "analytic" and not first_order:
        _coordinates(m, rows, projections)
    rows["kappa"] = m.kappa  # (the coordinates' fourth cumulant the interval took: 0, Gaussian, unless read and taken)
    ab, log_c, match_rms = _matched(m, naive, first_order)
    shape_alpha, tail = float(ab[0]), tuple(float(b) for b in ab[1:])
    alpha, gain = _slope_alpha(m, ab, naive)
    lin = _linearised(m, alpha, ab, gain)
    t_fit = time.perf_counter() - t0
    rng = np.random.default_rng(seed)
    tau_hat = population_spectrum(log_c, alpha, tail, m.d, m.knots or (m.k1,))
    bend_of = BendStatistic(m.ranks[m.win])
    analytic = not first_order and route == "analytic"
    found = _theory(m, lin.a_lin, tau_hat) if analytic else None
    theory = found if isinstance(found, tuple) else None
    if isinstance(found, str):
        analytic = False
        m.notes.append(f"the interval and the bend test are simulated, not from theory: {found}"
                       + (f"; the simulations draw Gaussian coordinates, without the coordinates' kurtosis "
                          f"({m.kappa:.3g}): the interval may be narrow" if m.kappa else ""))
    bends, bias, sd, share, zq = _replicated(m, lin, alpha, gain, tau_hat, bend_of, first_order=first_order,
                                             replicates=replicates, level=level, rng=rng, theory=theory)
    estimate = alpha - share * bias
    model_estimate, half = estimate, zq * sd
    curve: dict[str, Any] = {}
    if subsamples is not None:
        estimate, half, curve = _curve_read(m, subsamples, alpha, gain, lin.expected_slope, tau_hat, estimate, half,
                                            first_order=first_order, seed=seed, level=level,
                                            analytic=analytic)
    null = _analytic(m, -bend_of.q / bend_of.qq, tau_hat) if analytic and bend_of.qq > 0 else None
    bend = _bend_tested(m, lin, alpha, ab, bends, bend_of, naive, gain, first_order=first_order, level=level,
                        analytic_null=null)
    low, high = _interval(m, estimate, half, curve, bend)
    return PopulationFit(
        alpha=estimate, low=low, high=high, naive_alpha=naive,
        segment_exponents=(alpha, *tail), segment_knots=m.knots, intercept=log_c + math.log(m.top), n_over_d=n / m.d,
        n_effective=float(n if n_effective is None else n_effective),
        window=(m.k0, m.k1), ranks_matched=(m.k0, m.r_max), match_rms=match_rms, shape_alpha=shape_alpha, gain=gain,
        bootstrap_sd=sd, bootstrap_bias=bias, bias_corrected=share > 0.0, bias_share=share,
        replicates=0 if first_order or analytic else replicates, seed=seed,
        route="first order" if first_order else "analytic" if analytic else "simulated",
        scales=rows, notes=tuple(m.notes), level=level, model_alpha=model_estimate, sampling_curve=curve, bend=bend,
        cost={"sd_first_order": lin.sd_first, "evaluations": m.evals, "grid_points": m.grid.points,
              "atoms": m.grid.atoms, "fit_s": t_fit, "bootstrap_s": time.perf_counter() - t0 - t_fit})
