"""The population behind a sample spectrum (``fit --population``).

With ``n`` rows of ``d`` features the sample spectrum is the population spectrum spread by sampling
(Marchenko & Pastur 1967): its slope over a rank window is biased upwards, by far more than its
stated uncertainty at ``n/d`` of a few. This module estimates what the sample statistics stand for:

- :func:`participation_ratio_population`: ``(tr Sigma)^2 / tr Sigma^2`` from unbiased estimators of
  its numerator and denominator (U-statistics, distribution-free; Chen, Zhang & Zhong 2010 for the
  uncentred form) built from the streamed moments and the rows' squared norms.
- :func:`population_fit`: the exponent of a power-law population spectrum whose expected sample
  spectrum, at the same ``n`` and ``d`` and under the rows' own spread of scales, matches the observed
  one over the window (the deterministic equivalent; see its docstring).

Rows are modelled as ``x_i = mu + sqrt(s_i) Sigma^(1/2) z_i`` with ``z_i`` standard Gaussian and a
scale ``s_i`` per row (an elliptical, or separable, model: El Karoui 2009; Paul & Silverstein 2009;
Couillet & Hachem 2014); ``s_i = 1`` is the Gaussian model. The scales come from the histogram of
squared row norms gathered in the first pass (:mod:`spectra_cli.stream.norms`).

Real rows are not all such draws (repeated tokens, rows that live in few directions, rows of one document
that depend on each other), and the row model can over- or under-state how much sampling spreads their
spectrum. The data's own sampling curve checks it (:class:`Subsamples`): the slope of sub-samples that
leave out a quarter of the row groups, against the row model's prediction of that change, scales the
model's bias correction, and their spread gives a variance that does not rest on the model (a grouped,
delete-a-quarter jackknife: Shao & Wu 1989; balanced partitions, so that the first-order terms cancel in
the mean change).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from spectra_cli.eigen.decomposition import eigvalsh_checked
from spectra_cli.errors import FitError
from spectra_cli.stream.norms import NormHistogram

#: Fewer matched ranks than this and the population exponent is not estimated.
MIN_RANKS = 5
#: The exponents the population model spans; an estimate at either bound is not reported.
ALPHA_BOUNDS = (0.0, 12.0)
#: Row scales are kept within this factor of their mean either way (the grid spans their range).
SCALE_RANGE = 1e6


@dataclass(frozen=True, slots=True)
class RowScales:
    """The rows' weighted squared norms ``h_i = w_i ||x_i - mean||^2`` as a histogram, with what the
    estimators need of the weights.

    Attributes:
        values, counts: the histogram's bin centres and the rows in each.
        weight_sum: ``W = sum w`` (the row count when unweighted).
        weight_sq_sum: ``sum w^2``; ``sum p^2 = weight_sq_sum / W^2`` with ``p = w / W``.
        rows: rows of positive weight.
        source: where the norms come from, for the report.
        coordinates: ``(sum_k E (x_k - mu_k)^4, sum_k sigma_k^4)`` in the data's units (the features' fourth
            central moments and squared variances, summed), or None (weighted rows, uncentred, or not gathered).
    """

    values: np.ndarray
    counts: np.ndarray
    weight_sum: float
    weight_sq_sum: float
    rows: int
    source: str
    coordinates: tuple[float, float] | None = None

    @classmethod
    def of(cls, hist: NormHistogram, *, weight_sum: float, weight_sq_sum: float, source: str,
           variances: np.ndarray | None = None) -> RowScales:
        """``variances``: each feature's variance, which with the histogram's fourth moments gives
        :attr:`coordinates`."""
        v, c = hist.values()
        coords = None
        f4 = hist.coordinate_fourth
        if f4 is not None and variances is not None:
            s4 = float(np.dot(variances, variances))
            coords = (f4, s4) if math.isfinite(s4) and s4 > 0 else None
        return cls(v, c, float(weight_sum), float(weight_sq_sum), int(round(hist.rows)), source, coords)

    @property
    def sum_p2(self) -> float:
        """``sum p_i^2``: the inverse of Kish's effective sample size."""
        return self.weight_sq_sum / (self.weight_sum * self.weight_sum)


def participation_ratio_population(eigenvalues: np.ndarray, scales: RowScales, *, scale_to_population: float,
                                   uncentered_offset: float = 0.0, mean_quadratic: float = 0.0,
                                   dimension: int | None = None) -> float | None:
    """An estimate of ``(tr Sigma)^2 / tr Sigma^2`` that corrects the sample's bias.

    With ``S = sum_i p_i y_i y_i^T`` (``p = w / sum w``; the rows ``y_i`` about the mean, or the raw rows
    when uncentred) and independent rows of second moment ``Sigma``:
    ``E[tr S^2] = (1 - sum p^2) tr Sigma^2 + sum p_i^2 E|y_i|^4`` and
    ``E[(tr S)^2] = (1 - sum p^2) (tr Sigma)^2 + sum p_i^2 E|y_i|^4``, so

        tr Sigma^2   ~ (tr S^2    - sum p_i^2 |y_i|^4) / (1 - sum p^2)
        (tr Sigma)^2 ~ ((tr S)^2  - sum p_i^2 |y_i|^4) / (1 - sum p^2)

    are unbiased whatever the rows' distribution (the U-statistics of Chen, Zhang & Zhong 2010 in the
    weighted form; unweighted ``sum p^2 = 1/n``), and their ratio estimates the population participation
    ratio. Centred rows lose ``O(1/n)`` (relative) to the subtracted mean; the norms are about each
    block's mean (a further ``O(1/b)``). Uncentred: ``|x_i|^2 = |y_i|^2 + 2 y_i.mu + |mu|^2``, so
    ``sum p_i^2 |x_i|^4`` is taken as ``sum p_i^2 (|y_i|^2 + |mu|^2)^2 + 4 sum p^2 mu^T C mu``
    (``uncentered_offset`` = ``w |mu|^2`` at the mean weight, ``mean_quadratic`` = ``mu^T C mu``).

    ``eigenvalues``: of the reported matrix; ``scale_to_population``: the factor that turns it into the
    ``p``-weighted form (``(n - ddof) / n`` for the unweighted covariance, 1 otherwise). None when the
    estimate is not defined (one row, or a non-positive estimate of ``tr Sigma^2``); an estimate outside
    ``[1, d]`` (sampling noise, e.g. on white noise) is cut to it. ``dimension``: ``d``, the number of features,
    when fewer eigenvalues are given (with ``n < d`` rows the sample has at most ``n`` non-zero ones, but the
    population's participation ratio can exceed ``n``); default ``eigenvalues.size``.
    """
    lam = np.asarray(eigenvalues, dtype=np.float64) * scale_to_population
    sp2 = scales.sum_p2
    if not 0.0 < sp2 < 1.0:
        return None
    top = float(np.max(np.abs(lam))) if lam.size else 0.0
    if not top > 0:
        return None
    u = lam / top  # scale-free (eigenvalues near 1e300 would overflow their squares)
    W = scales.weight_sum
    hv = (scales.values + uncentered_offset) / W / top  # p_i |y_i|^2 in units of the top eigenvalue
    q4 = float(np.dot(scales.counts, hv * hv)) + 4.0 * sp2 * (mean_quadratic / top) / top
    a = float(u.sum())
    b = float(np.dot(u, u))
    t2 = (b - q4) / (1.0 - sp2)
    t11 = (a * a - q4) / (1.0 - sp2)
    if not (t2 > 0 and t11 > 0) or not math.isfinite(t11 / t2):
        return None
    d = lam.size if dimension is None else max(int(dimension), lam.size)
    return min(max(t11 / t2, 1.0), float(d))  # an estimate past [1, d] (noise) is cut to it


PR_DEFINITION = ("((tr S)^2 - sum p_i^2 |y_i|^4) / (tr S^2 - sum p_i^2 |y_i|^4): unbiased estimators of "
                 "(tr Sigma)^2 and tr Sigma^2 (U-statistics, Chen, Zhang & Zhong 2010; p = w / sum w, y_i the "
                 "rows about the mean), from the moments and the histogram of squared row norms")



# --------------------------------------------------------------------------------------------------
# The deterministic equivalent of the sample spectrum
# --------------------------------------------------------------------------------------------------

#: Continuation of the imaginary part of z = x (1 + i eps): from far off the real axis (where the fixed
#: point is easy) down to 1e-5 (a Lorentzian leak of about d eps / pi ranks: negligible).
EPS_PATH = (1.0, 0.1, 1e-2, 1e-3, 1e-5)
#: A step halved to stay in the upper half plane (a point just off the real axis, where the density is about 0:
#: Newton then converges only linearly) ends the point's iteration below this relative size.
HALVED_TOL = 1e-7
#: Newton iterations from a warm start (the last solution, at nearby parameters) before a point takes the
#: continuation instead.
WARM_ITERATIONS = 12
#: A warm-started point whose relative residual ``|F(e)| / |e|`` is above this takes the continuation too.
WARM_RESIDUAL = 1e-9
#: Population atoms are merged while their log-span is below min(MERGE_SPAN, sqrt(MERGE_KAPPA c pi W))
#: (W the group's weight): well inside the sampling smoothing width ~ c pi W of that part of the spectrum.
MERGE_SPAN = 0.05
MERGE_KAPPA = 0.1
MAX_ATOMS = 1000
#: Scale atoms after compression of the deconvolved histogram.
MAX_SCALE_ATOMS = 64
#: The deconvolution's grid of scales and its EM iterations (at most).
DECONVOLUTION_ATOMS = 96
DECONVOLUTION_ITERATIONS = 3000
#: The data's own sampling curve: the row groups split at random into SUBSAMPLE_PARTS parts of (nearly) equal
#: size, SUBSAMPLE_PARTITIONS times; each sub-sample leaves one part out.
SUBSAMPLE_PARTS = 4
SUBSAMPLE_PARTITIONS = 4
#: A part of a partition holds between (1 -+ this) / SUBSAMPLE_PARTS of the rows (else it is dealt by rows).
PART_SHARE_TOLERANCE = 0.5
#: Fewer row groups than this and the sampling curve is not measured (the row model alone is used).
MIN_SUBSAMPLE_GROUPS = 8
#: The sampling curve's expected slopes are computed on a grid this many times denser than the fit's.
CURVE_GRID_FACTOR = 3
#: Samples simulated from the fitted population to tell how much the sampling curve varies from sample to sample.
CURVE_SIMULATIONS = 8
#: Evaluations of the expected spectrum a fit typically makes (the length of its progress bar).
TYPICAL_EVALUATIONS = 60
#: At n >= FIRST_ORDER_RATIO d the interval and the bend test are first order (Anderson 1963) instead of simulated:
#: there the simulations' standard deviation is within about 20 % of it (bench/README), at the cost of 40 samples
#: of n rows.
FIRST_ORDER_RATIO = 40.0
#: Simulated rows and their products are float32 (half the time of float64); their Gram matrices are decomposed
#: in float64. A float32 product's rounding is relative to each entry's scale (about 6e-8 sqrt(n)): far below the
#: scatter of a simulated sample, which is what the simulations measure.
SIMULATION_DTYPE = np.float32
#: The spread ratio (observed change / the row model's) is kept within [0, SPREAD_RATIO_MAX].
SPREAD_RATIO_MAX = 5.0


def subsample_design(groups: int, *, seed: int, parts: int | None = None, partitions: int | None = None,
                     sizes: np.ndarray | None = None) -> np.ndarray | None:
    """Which groups each sub-sample keeps: boolean, shape ``(partitions, parts, groups)``. Each partition
    deals a random permutation of the groups into ``parts`` parts in turn (sizes differ by at most one);
    sub-sample ``(r, q)`` keeps every group outside part ``q`` of partition ``r``.

    ``sizes``: the rows of each group. Where a deal leaves a part's share of the rows more than
    :data:`PART_SHARE_TOLERANCE` off ``1 / parts`` (groups of very unequal size: merged moment files), that
    partition is dealt by rows instead (the largest group first, each to the part with the fewest rows so far,
    ties in the random order); None when even that leaves a part off its share (one group holds too many rows)."""
    parts = SUBSAMPLE_PARTS if parts is None else parts
    partitions = SUBSAMPLE_PARTITIONS if partitions is None else partitions
    if groups < parts:
        raise FitError(f"the sampling curve needs at least {parts} row groups; there are {groups}.")
    rng = np.random.default_rng([seed, 19])
    rows = None if sizes is None else np.asarray(sizes, dtype=np.float64)

    def balanced(label: np.ndarray) -> bool:
        if rows is None or not rows.sum() > 0:
            return True
        share = np.bincount(label, rows, minlength=parts) / rows.sum()
        return bool(np.all(np.abs(share * parts - 1.0) <= PART_SHARE_TOLERANCE))

    out = np.empty((partitions, parts, groups), dtype=bool)
    for r in range(partitions):
        perm = rng.permutation(groups)
        label = np.empty(groups, dtype=np.int64)
        label[perm] = np.arange(groups) % parts
        if not balanced(label):
            assert rows is not None
            load = np.zeros(parts)
            for g in perm[np.argsort(-rows[perm], kind="stable")]:
                label[g] = int(np.argmin(load))
                load[label[g]] += rows[g]
            if not balanced(label):
                return None
        for q in range(parts):
            out[r, q] = label != q
    return out


@dataclass(frozen=True, slots=True)
class Subsamples:
    """The sample spectra of sub-samples of the rows (see :func:`subsample_design`), to check the row model
    against the data's own sampling curve.

    Attributes:
        spectra: shape ``(partitions, parts, d)``: each sub-sample's eigenvalues, descending, in the units of
            the spectrum handed to :func:`population_fit` (the same directions left out).
        dof: shape ``(partitions, parts)``: each sub-sample's degrees of freedom (rows - 1 centred).
        groups: the row groups dealt into parts.
        source: what the groups are, for the report.
    """

    spectra: np.ndarray
    dof: np.ndarray
    groups: int
    source: str


def merge_groups(values: np.ndarray, weights: np.ndarray | None = None, *, c: float | None = None,
                 span: float = MERGE_SPAN, max_atoms: int = MAX_ATOMS) -> np.ndarray:
    """Group labels (in the order of ``values``) merging neighbouring atoms, sorted by value: a group grows
    while its log-span stays below ``span`` and, given ``c``, below ``sqrt(MERGE_KAPPA c pi W)``; ``span`` is
    doubled until at most ``max_atoms`` groups remain."""
    order = np.argsort(values)
    lv = np.log(np.asarray(values, dtype=np.float64)[order])
    wt = np.full(lv.size, 1.0 / lv.size) if weights is None else np.asarray(weights, dtype=np.float64)[order]
    while True:
        gid = np.empty(lv.size, dtype=np.int64)
        g, g0, W = 0, lv[0], 0.0
        for i in range(lv.size):
            lim = span if c is None else min(span, math.sqrt(MERGE_KAPPA * c * math.pi * (W + wt[i])))
            if lv[i] - g0 > lim:
                g, g0, W = g + 1, lv[i], 0.0
            W += wt[i]
            gid[i] = g
        if g + 1 <= max_atoms:
            out = np.empty_like(gid)
            out[order] = gid
            return out
        span *= 2


def merged(values: np.ndarray, weights: np.ndarray | None, groups: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Atoms ``(value, weight)``: each group at its weighted mean, weights summing to the input's."""
    wt = np.full(values.size, 1.0 / values.size) if weights is None else np.asarray(weights, dtype=np.float64)
    wsum = np.bincount(groups, wt)
    return np.bincount(groups, wt * values) / wsum, wsum


def _halve_into_upper_half_plane(ea: np.ndarray, step: np.ndarray, new: np.ndarray, bad: np.ndarray) -> None:
    """Halve each step at ``bad`` the fewest times (1 to 30) that keeps ``ea - step`` in the upper half plane, in
    place: ``Im(ea) - Im(step) 2^-k`` grows with ``k``, so ``k`` is read off ``log2(Im step / Im ea)`` and then
    checked against the exact arithmetic either side (scaling by a power of two is exact: the same numbers as
    halving ``k`` times, without a Python loop over the halvings)."""
    eb, sb = ea[bad], step[bad]
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        k = np.ceil(np.log2(sb.imag / eb.imag))
    k = np.clip(np.nan_to_num(k, nan=30.0, posinf=30.0, neginf=1.0), 1.0, 30.0)
    for _ in range(4):
        lower = np.maximum(k - 1.0, 1.0)
        k = np.where((k > 1.0) & ((eb - sb * 2.0 ** -lower).imag >= 0), lower, k)
        k = np.where(((eb - sb * 2.0 ** -k).imag < 0) & (k < 30.0), k + 1.0, k)
    step[bad] = sb * 2.0 ** -k
    new[bad] = eb - step[bad]


def _resolvent_sums(X: np.ndarray, z: np.ndarray, tau: np.ndarray, pt: np.ndarray,
                    ptt: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``sum_a pt_a / (tau_a X - z)`` and ``sum_a ptt_a / (tau_a X - z)^2`` at every point, in real arithmetic
    (``1 / D = conj(D) / |D|^2``: about three times numpy's complex division, the same numbers to ~1e-14;
    ``|D| >= Im z > 0``, as ``Im X <= 0`` on the Stieltjes branch)."""
    re = np.multiply.outer(X.real, tau)
    re -= z.real[:, None]
    im = np.multiply.outer(X.imag, tau)
    im -= z.imag[:, None]
    den = re * re
    den += im * im
    np.reciprocal(den, out=den)
    re *= den
    im *= den  # 1 / D = re - i im
    first = re @ pt - 1j * (im @ pt)
    np.multiply(re, re, out=den)
    den -= im * im
    im *= re  # (re - i im)^2 = re^2 - im^2 - 2 i re im
    return first, den @ ptt - 2j * (im @ ptt)


def _x_of(e: np.ndarray, scales: tuple[np.ndarray, np.ndarray] | None, c: float) -> np.ndarray:
    """``X(e) = sum_k p_k w_k / (1 + c w_k e)`` (``1 / (1 + c e)`` for Gaussian rows)."""
    if scales is None:
        return 1.0 / (1.0 + c * e)
    w, p = scales
    return (1.0 / (1.0 + c * e[:, None] * w[None, :])) @ (p * w)


def _solve_e(z: np.ndarray, tau: np.ndarray, pi: np.ndarray, scales: tuple[np.ndarray, np.ndarray] | None,
             c: float, e0: np.ndarray, *, iters: int = 40, tol: float = 1e-10) -> tuple[np.ndarray, np.ndarray]:
    """Newton's method on ``F(e) = e - sum_a pi_a tau_a / (tau_a X(e) - z)`` at every grid point at once
    (``X(e) = sum_k p_k w_k / (1 + c w_k e)``; ``1 / (1 + c e)`` for Gaussian rows), iterating the points
    not yet converged; a step that would leave the upper half plane (the Stieltjes branch) is halved.
    Returns the solution and the indices of the points that did not converge within ``iters``."""
    e = e0.copy()
    act = np.arange(e.size)
    pt, ptt = pi * tau, pi * tau * tau
    for _ in range(iters):
        ea, za = e[act], z[act]
        if scales is None:
            den = 1.0 + c * ea
            X, dX = 1.0 / den, -c / den ** 2
        else:
            w, p = scales
            q = 1.0 / (1.0 + c * ea[:, None] * w[None, :])
            X = q @ (p * w)
            dX = -c * ((q * q) @ (p * w * w))
        s1, s2 = _resolvent_sums(X, za, tau, pt, ptt)
        step = (ea - s1) / (1.0 + dX * s2)
        new = ea - step
        bad = np.flatnonzero(new.imag < 0)
        limit = np.full(new.size, tol)
        if bad.size:
            _halve_into_upper_half_plane(ea, step, new, bad)
            limit[bad] = HALVED_TOL
        e[act] = new
        act = act[np.abs(step) > limit * (np.abs(new) + 1e-300)]
        if not act.size:
            break
    return e, act


def _continued(x: np.ndarray, tau: np.ndarray, pi: np.ndarray, scales: tuple[np.ndarray, np.ndarray] | None,
               c: float) -> np.ndarray:
    """The solution at ``x (1 + i EPS_PATH[-1])`` by continuation along :data:`EPS_PATH` from ``X = 1``."""
    e: np.ndarray | None = None
    for eps in EPS_PATH:
        z = x * (1.0 + 1j * eps)
        if e is None:
            e = (pi * tau / (tau[None, :] - z[:, None])).sum(axis=1)  # the solution for X = 1
        e = _solve_e(z, tau, pi, scales, c, e)[0]
    assert e is not None
    return e


def sample_density(tau: np.ndarray, pi: np.ndarray, scales: tuple[np.ndarray, np.ndarray] | None, c: float,
                   x: np.ndarray, *, start: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """The limiting density of the sample spectrum's non-zero part on the grid ``x`` (``Im m(x + i0) / pi``,
    the point mass ``1 - 1/c`` at zero removed when ``c > 1``), by continuation along :data:`EPS_PATH`, and the
    solution ``e`` it came from.

    ``start``: a solution at nearby parameters on the same grid (a warm start). Newton then runs at the last
    ``eps`` alone, and the points it leaves unconverged in :data:`WARM_ITERATIONS` take the continuation: the
    solution in the upper half plane is unique (Silverstein & Bai 1995) and every step is kept there, so both
    routes give the same numbers to the solver's tolerance."""
    z = x * (1.0 + 1j * EPS_PATH[-1])
    if start is None:
        e = _continued(x, tau, pi, scales, c)
    else:
        e, left = _solve_e(z, tau, pi, scales, c, start, iters=WARM_ITERATIONS)
        # a point whose steps were halved at the axis can stop short of the root: the residual tells
        s1 = _resolvent_sums(_x_of(e, scales, c), z, tau, pi * tau, pi * tau * tau)[0]
        left = np.union1d(left, np.flatnonzero(np.abs(e - s1) > WARM_RESIDUAL * np.abs(e)))
        if left.size:
            e[left] = _continued(x[left], tau, pi, scales, c)
    X = _x_of(e, scales, c)
    m = (1.0 / (tau[None, :] * X[:, None] - z[:, None])) @ pi
    if c > 1:
        m = m + (1.0 - 1.0 / c) / z
    return np.maximum(m.imag, 0.0) / np.pi, e


@dataclass
class Grid:
    """What one evaluation of the expected spectrum used (reused so that theta -> spectrum is smooth), and its
    solution, the next evaluation's warm start (``warm`` False: none)."""

    groups: np.ndarray | None = None
    points: int = 0
    atoms: int = 0
    warm: bool = True
    last: tuple[np.ndarray, np.ndarray] | None = None  # log x, e

    def start(self, x: np.ndarray) -> np.ndarray | None:
        """The last solution interpolated (in log x) onto ``x``: a start near the root wherever the population,
        the ratio or the scales moved little; the residual check of :func:`sample_density` sends the points where
        it is not to the continuation, so any start gives the same numbers."""
        if not self.warm or self.last is None:
            return None
        lx, e = self.last
        u = np.log(x)
        return np.interp(u, lx, e.real) + 1j * np.interp(u, lx, e.imag)


def expected_eigenvalues(tau: np.ndarray, c: float, ranks: int, *,
                         scales: tuple[np.ndarray, np.ndarray] | None = None,
                         grid: Grid | None = None, points_per_decade: int | None = None) -> np.ndarray:
    """The expected sample eigenvalues of ranks ``1..ranks`` (descending) of the population ``tau``.

    Rank ``j``'s value is ``d`` times the integral of the quantile function of the limiting sample
    spectrum over the ``j``-th slice of mass ``1/d`` counted from the top (Ledoit & Wolf 2017's QuEST
    discretisation), from the density on a log-spaced grid (``7 sqrt(d / c)`` points a decade, 300 to
    1,000: the isolated top eigenvalues form clusters of relative width ``~ sqrt(c / d)``), counted from
    the top so that the grid's lower end only has to pass the last rank asked for."""
    tau = np.asarray(tau, dtype=np.float64)
    d = tau.size
    grid = grid if grid is not None else Grid()
    if grid.groups is None:
        grid.groups = merge_groups(tau, c=c)
    atoms, pi = merged(tau, None, grid.groups)
    ppd = int(np.clip(7.0 * math.sqrt(d / c), 300, 1000)) if points_per_decade is None else points_per_decade
    wmax = 1.0 if scales is None else float(scales[0].max())
    wmin = 1.0 if scales is None else float(scales[0].min())
    top = float(tau.max())
    x_hi = top * (1.0 + math.sqrt(c)) ** 2 * max(wmax, 1.0) * 1.5
    x_lo = float(np.sort(tau)[::-1][min(ranks, d) - 1]) * wmin * (max(1e-3, 0.25 * (1 - math.sqrt(c)) ** 2)
                                                                 if c < 1 else 1e-3)
    for _ in range(4):
        points = int(math.ceil(math.log10(x_hi / x_lo) * ppd)) + 1
        x = np.geomspace(x_lo, x_hi, points)
        f, e = sample_density(atoms, pi, scales, c, x, start=grid.start(x))
        grid.last = (np.log(x), e)
        g = d * f * x  # dN / dlog x
        h = g * x  # dM / dlog x
        dl = np.diff(np.log(x))
        N = np.concatenate([np.cumsum(((g[1:] + g[:-1]) * 0.5 * dl)[::-1])[::-1], [0.0]])
        M = np.concatenate([np.cumsum(((h[1:] + h[:-1]) * 0.5 * dl)[::-1])[::-1], [0.0]])
        if N[0] >= ranks + 0.5:
            break
        x_lo *= 1e-2
    grid.points, grid.atoms = points, int(atoms.size)
    Mk = np.interp(np.arange(ranks + 1, dtype=np.float64), N[::-1], M[::-1])
    return np.diff(Mk)


# --------------------------------------------------------------------------------------------------
# Row scales: the spread of squared norms, less the part that the directions themselves make
# --------------------------------------------------------------------------------------------------


def deconvolved_scales(scales: RowScales, t2: float, offset: float = 0.0) -> tuple[
        tuple[np.ndarray, np.ndarray] | None, dict[str, Any]]:
    """The scale distribution ``(w, p)`` (mean 1) behind the observed squared norms.

    An observed norm is ``s q`` with ``q = z^T Sigma z / tr Sigma`` independent of ``s``, ``E q = 1`` and
    ``Var q = 2 t2``, ``t2 = tr Sigma^2 / (tr Sigma)^2``: the histogram over-states the spread of ``s``. ``q`` is
    taken as Gamma with that mean and variance (shape ``k = 1 / (2 t2)``: Satterthwaite's approximation of a
    weighted sum of chi-squares), and the distribution of ``s`` on 96 log-spaced atoms spanning the histogram is
    the binned nonparametric maximum-likelihood estimate of the mixture (Kiefer & Wolfowitz 1956; EM, Laird
    1978): each bin's probability under atom ``a`` is ``P(e_lo / a <= q < e_hi / a)`` from the Gamma CDF. It keeps
    the shape of the scales (a long lower tail sets the lowest sample eigenvalues when ``n <= d``), which a
    moment match alone does not. Its spread in log space is then scaled (``log_spread``, by bisection) until
    its second moment is the deconvolved one, ``E[s^2] / E[s]^2 = E[obs^2] / E[obs]^2 / (1 + 2 t2)``, exact in
    expectation whatever the law of ``q``. None: no spread beyond what ``q`` makes (Gaussian rows).

    With the features' fourth moments (``scales.coordinates``), the second moment is also read with independent
    coordinates of any kurtosis in place of Gaussian directions, ``E[s^2] = (E[obs^2] - sum_k E x_k^4) / ((tr)^2 -
    sum_k sigma_k^4)`` (``tr = E[obs]``), and the smaller of the two is kept (``scales_from``): each over-states
    ``E[s^2]`` where its assumption fails, so heavy-tailed coordinates (Laplace, say) are not read as row scales,
    which would spread the model's spectrum where the data's is not."""
    from scipy.special import gammainc

    from spectra_cli.stream.norms import BINS_PER_OCTAVE

    raw = scales.values
    v = raw + offset
    keep = (scales.counts > 0) & (v > 0)
    info: dict[str, Any] = {"t2": t2, "source": scales.source}
    if not keep.any():
        info["note"] = "every row's norm about its block's mean is zero (blocks of one row): no scales to read"
        return None, info
    half = 2.0 ** (0.5 / BINS_PER_OCTAVE)  # a bin's edges about its centre
    raw, v, p = raw[keep], v[keep], scales.counts[keep] / scales.counts[keep].sum()
    lo_e = np.where(raw > 0, raw / half + offset, v * (1 - 1e-6))
    hi_e = np.where(raw > 0, raw * half + offset, v * (1 + 1e-6))
    top = float(np.max(hi_e))  # (no overflow however large the norms)
    v, lo_e, hi_e = v / top, lo_e / top, hi_e / top
    mean = float(p @ v)
    v, lo_e, hi_e = v / mean, lo_e / mean, hi_e / mean
    clipped = np.clip(v, 1.0 / SCALE_RANGE, SCALE_RANGE)
    if np.any(clipped != v):
        info["note"] = (f"row scales beyond {SCALE_RANGE:g} times their mean either way were clipped to it (weights "
                        "or norms spread over more than 12 decades)")
        r = clipped / v
        v, lo_e, hi_e = clipped, lo_e * r, hi_e * r
        m = float(p @ v)
        v, lo_e, hi_e = v / m, lo_e / m, hi_e / m
    m2_obs = float(p @ (v * v))
    m2_s = m2_obs / (1.0 + 2.0 * t2)
    info.update({"cv2_observed": m2_obs - 1.0})
    if scales.coordinates is not None and offset == 0.0:
        # the same second moment read through the coordinates instead of Gaussian directions: with x = sqrt(s) y, y
        # of independent coordinates, E h^2 = E s^2 ((tr)^2 - sum sigma^4) + sum_k E x_k^4, whatever each
        # coordinate's kurtosis (exact for elliptical rows in their eigenbasis too). Each reading over-states E s^2
        # where its assumption fails (Gaussian directions: heavy-tailed coordinates; independent coordinates:
        # rotated Gaussian directions, as sum sigma_k^4 <= tr Sigma^2), so the smaller one is kept.
        raw_mean = mean * top  # the mean squared norm in the data's units
        f4, s4 = scales.coordinates
        tr2 = raw_mean * raw_mean
        if s4 < tr2:
            m2_c = (m2_obs - f4 / tr2) / (1.0 - s4 / tr2)
            info.update({"cv2_scales_coordinates": m2_c - 1.0, "coordinate_kurtosis": f4 / s4 - 3.0})
            if m2_c < m2_s:
                m2_s = max(m2_c, 1.0)
                info["scales_from"] = "coordinates"
            else:
                info["scales_from"] = "directions"
    if m2_s - 1.0 <= 1e-6:
        info["cv2_scales"] = 0.0
        return None, info
    atoms = np.geomspace(float(lo_e.min()), float(hi_e.max()), DECONVOLUTION_ATOMS)
    if t2 > 1e-12:
        k = 1.0 / (2.0 * t2)
        K = gammainc(k, k * hi_e[:, None] / atoms[None, :]) - gammainc(k, k * lo_e[:, None] / atoms[None, :])
    else:  # q = 1: each atom puts its mass in the bin that holds it
        K = ((atoms[None, :] >= lo_e[:, None]) & (atoms[None, :] < hi_e[:, None])).astype(np.float64)
    K = np.maximum(K, 0.0)
    pi = np.full(atoms.size, 1.0 / atoms.size)
    last, it = -np.inf, 0
    for it in range(DECONVOLUTION_ITERATIONS):  # noqa: B007 (the count is reported)
        f = np.maximum(K @ pi, 1e-300)
        ll = float(p @ np.log(f))
        pi = pi * (K.T @ (p / f))
        pi /= pi.sum()
        if ll - last < 1e-10 * max(abs(ll), 1.0):
            break
        last = ll
    live = pi > 1e-9
    w, pw = atoms[live], pi[live] / pi[live].sum()
    w = w / float(pw @ w)
    # its spread in log space set so that the second moment is the deconvolved one, E[obs^2] / E[obs]^2 /
    # (1 + 2 t2) (exact in expectation, whatever the directions' law; the NPMLE gives the shape)
    lw = np.log(w) - float(pw @ np.log(w))

    def spread(g: float) -> np.ndarray:
        u = np.exp(g * lw)
        return u / float(pw @ u)

    lo, hi = 0.0, 4.0
    for _ in range(60):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if float(pw @ spread(mid) ** 2) < m2_s else (lo, mid)
    info["log_spread"] = 0.5 * (lo + hi)
    w = spread(0.5 * (lo + hi))
    if w.size > MAX_SCALE_ATOMS:
        w, pw = merged(w, pw, merge_groups(w, pw, span=0.01, max_atoms=MAX_SCALE_ATOMS))
        w = w / float(pw @ w)
    info.update({"cv2_scales": float(pw @ (w * w)) - 1.0, "cv2_scales_moments": max(m2_s - 1.0, 0.0),
                 "atoms": int(w.size), "iterations": it + 1})
    if float(pw @ (w * w)) - 1.0 <= 1e-6:
        return None, info
    return (w, pw), info


def sampling_curve(sub: Subsamples, lam: np.ndarray, *, n: float, k0: int, k1: int, margin: float, bias: float,
                   gain: float, expected_slope: Callable[[float, int], float],
                   simulated_changes: Callable[[int, int], np.ndarray],
                   notes: list[str]) -> tuple[float, float, int, dict[str, Any]] | None:
    """The row model checked against the data's own sampling curve.

    ``S`` is the sample slope over ranks ``k0..k1c`` (``k1c``: the window, cut to the ranks every sub-sample
    resolves): ``D_obs`` the mean over sub-samples of ``S(sub-sample) - S(all rows)``, ``D_model`` the row model's
    expected change ``E S(n') - E S(n)`` (``n'`` the sub-samples' mean degrees of freedom) at the fitted
    population, ``expected_slope(dof, k1c)``. ``D_obs`` varies from sample to sample: ``simulated_changes(k1c,
    parts)`` gives the change of samples simulated from the fitted population, one partition each, whose standard
    deviation, with the partitions' own ``sd_r(D_obs) / sqrt(R)``, is its error ``e``. The raw spread ratio
    ``r = D_obs / D_model`` is drawn towards 1 by the positive-part James-Stein factor ``max(0, 1 - (2 e' / (r -
    1))^2)``, ``e' = e / |D_model|`` (1 within twice its error: a sample's own scatter is not read as the data's
    departure from the model), and kept in ``[0, SPREAD_RATIO_MAX]``: ``kappa``. The bias the model corrects,
    ``bias = E S(n) - alpha``, is scaled by it: the returned shift is ``(1 - kappa) bias`` (the observed curve
    extrapolated to infinitely many rows along the model's shape). The data's own standard error: the grouped
    jackknife of ``S``, ``sqrt((m - 1) mean_{r,q} (S_rq - mean_q S_rq)^2)`` over ``m`` parts and ``R``
    partitions, mapped to alpha by ``1 + kappa (1 / gain - 1)`` (``gain = d E S / d alpha``), with the spread
    ratio's error ``e' |bias|`` added in quadrature; Student's t with ``R (m - 1)`` degrees of freedom. Where
    ``|D_model| <= 2 e`` (e.g. at large n/d) the curve cannot tell: ``kappa = 1`` and the jackknife still bounds
    the interval. A ratio past its bounds leaves part of the correction out (``left_out``, in alpha): the interval
    is extended by it on that side. None (and a note) when the curve cannot be read."""
    R, m, width = sub.spectra.shape
    if not (np.isfinite(sub.dof).all() and float(np.min(sub.dof)) >= 3 and np.isfinite(sub.spectra).all()):
        notes.append("the sampling curve is not measured: a sub-sample has fewer than 4 rows of positive weight; "
                     "the row model alone sets the estimate")
        return None
    dof = float(np.mean(sub.dof))
    r_sub = min(width, int(math.floor(float(np.min(sub.dof)))),  # (a sub-sample resolves its dof ranks at most)
                int(np.min(np.count_nonzero(sub.spectra > 0, axis=2))))
    k1c = min(k1, max(int(math.floor(margin * r_sub)), k0 + 3), r_sub)
    if k1c - k0 + 1 < MIN_RANKS:
        notes.append(f"the sampling curve is not measured: the sub-samples resolve too few ranks from {k0} "
                     f"({r_sub}); the row model alone sets the estimate")
        return None
    window = np.log(np.maximum(sub.spectra[:, :, k0 - 1:k1c], 1e-300))
    slopes = np.array([[slope_of(window[r, q], k0) for q in range(m)] for r in range(R)])
    full = slope_of(np.log(lam[k0 - 1:k1c]), k0)
    model_change = expected_slope(dof, k1c) - expected_slope(n, k1c)
    observed = slopes.mean(axis=1) - full
    d_obs = float(observed.mean())
    noise = float(observed.std(ddof=1)) / math.sqrt(R) if R > 1 else 0.0
    draws = np.asarray(simulated_changes(k1c, m), dtype=np.float64)
    draws = draws[np.isfinite(draws)]
    model_sd = float(draws.std(ddof=1)) if draws.size > 2 else 0.0
    info: dict[str, Any] = {
        "groups": sub.groups, "parts": m, "partitions": R, "source": sub.source, "rows": dof,
        "ranks": [k0, k1c], "observed_change": d_obs, "observed_change_se": noise, "model_change": model_change,
        "model_change_simulated": float(draws.mean()) if draws.size else None, "model_change_sd": model_sd,
        "simulations": int(draws.size)}
    # the observed change varies from sample to sample (the model's simulated samples say by how much), and
    # with the partitions: the spread ratio's error
    err = math.hypot(model_sd, noise)
    identified = abs(model_change) > max(1e-6, 2.0 * err) and math.isfinite(d_obs)
    raw: float | None = None
    kappa, sd_ratio, shrink, clipped = 1.0, 0.0, 0.0, 0.0
    if identified:
        raw = d_obs / model_change
        sd_k = err / abs(model_change)
        # kept to 1 within twice its error, and drawn towards 1 beyond (positive-part James-Stein): a sample's
        # own scatter is not read as the data's departure from the row model
        shrink = max(0.0, 1.0 - (2.0 * sd_k / (raw - 1.0)) ** 2) if raw != 1.0 else 0.0
        kappa = min(max(1.0 + shrink * (raw - 1.0), 0.0), SPREAD_RATIO_MAX)
        if kappa != 1.0 + shrink * (raw - 1.0):
            clipped = (kappa - 1.0 - shrink * (raw - 1.0)) * bias  # the correction left out, in alpha
            notes.append(f"the spread ratio {raw:.3g} (the data's sampling curve against the row model's) is kept "
                         f"to {kappa:g}; the interval is widened by the {abs(clipped):.3g} of correction left out")
        sd_ratio = sd_k * abs(bias)
    else:
        notes.append(f"the sampling curve cannot tell the row model apart over ranks {k0}..{k1c}: the model expects "
                     f"the slope to change by {model_change:.2g} with {dof:.4g} rows, within twice the observed "
                     f"change's error ({err:.2g}); the row model's bias correction stands (spread ratio 1)")
    if k1c < k1:
        notes.append(f"the sampling curve is read over ranks {k0}..{k1c}, the ranks every sub-sample resolves")
    jack = math.sqrt((m - 1) * float(np.mean((slopes - slopes.mean(axis=1, keepdims=True)) ** 2)))
    sd = math.hypot(jack * (1.0 + kappa * (1.0 / gain - 1.0)), sd_ratio)
    extend = clipped if identified else 0.0
    info.update({"spread_ratio": kappa, "spread_ratio_raw": raw, "shrink": shrink, "identified": identified,
                 "model_bias": bias,
                 "shift": (1.0 - kappa) * bias, "jackknife_sd": jack, "spread_ratio_sd": sd_ratio, "sd": sd,
                 "left_out": extend,
                 "definition": SAMPLING_CURVE})
    return (1.0 - kappa) * bias, sd, R * (m - 1), info


SAMPLING_CURVE = ("spread_ratio = observed_change / model_change: observed_change, the mean change of the sample "
                  "slope over ranks when a quarter of the row groups is left out (partitions x parts sub-samples, "
                  "balanced); model_change, the row model's expected change at the fitted population from n to the "
                  "sub-samples' rows; the model's bias correction (model_bias = expected sample slope - alpha) is "
                  "scaled by it: alpha = model_alpha + (1 - spread_ratio) model_bias; sd: the grouped jackknife of "
                  "the sample slope (jackknife_sd, times 1 + spread_ratio (1 / slope_gain - 1)) and the spread "
                  "ratio's own error, in quadrature; identified false: the model's change is within twice the "
                  "observed change's standard error, and the spread ratio is taken as 1")


#: The power-law population is said not to fit when the window's bend has a p-value below this.
BEND_P = 0.01
#: Gauss-Newton iterations of the curved alternative's fit (at most).
BEND_ITERATIONS = 12


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
                   f"{FIRST_ORDER_RATIO:g}): simulated_mean 0 and simulated_sd the bend's first-order sd "
                   "(sqrt(2 E[s^2] / n) |q| / q.q), a normal p-value")


def bend_test(observed: float, simulated: np.ndarray | None, *, level: float = 0.95,
              null: tuple[float, float] | None = None) -> dict[str, Any]:
    """The observed bend against the bends of samples simulated from the fitted population (a parametric
    bootstrap test of the power-law population over the window), or against ``null = (mean, sd)``, a normal
    law (the first-order route)."""
    from scipy.stats import norm
    from scipy.stats import t as student

    out: dict[str, Any] = {"statistic": observed, "simulated_mean": None, "simulated_sd": None, "p_value": None,
                           "fits": True, "null": "simulated" if null is None else "first order",
                           "definition": BEND_DEFINITION}
    if null is not None:
        mean, sd = null
        out.update({"simulated_mean": mean, "simulated_sd": sd})
        if not (sd > 0 and math.isfinite(observed)):
            return out
        z = (observed - mean) / sd
        p = float(2.0 * norm.sf(abs(z)))
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
    p = float(2.0 * student.sf(abs(z), sim.size - 1))
    out.update({"z": z, "p_value": p, "fits": p >= BEND_P})
    return out


def directions_t2(eigenvalues: np.ndarray, m2_obs: float, n: float) -> float:
    """``tr Sigma^2 / (tr Sigma)^2`` of the separable model without a fitted population: from
    ``E tr S^2 = (1 - 1/n) tr Sigma_e^2 + E[obs^2] / n`` (``Sigma_e = E[s] Sigma``, ``obs`` a squared norm)."""
    t = float(eigenvalues.sum())
    t2s = float(np.dot(eigenvalues, eigenvalues))
    return max((t2s - m2_obs * t * t / n) / ((1.0 - 1.0 / n) * t * t), 0.0)


# --------------------------------------------------------------------------------------------------
# The fit
# --------------------------------------------------------------------------------------------------


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


def slope_of(log_lam: np.ndarray, k0: int) -> float:
    """The OLS exponent of log eigenvalues given from rank ``k0`` on."""
    x = np.log(np.arange(k0, k0 + log_lam.size, dtype=np.float64))
    xc = x - x.mean()
    return float(-(xc @ (log_lam - log_lam.mean())) / (xc @ xc))


def gauss_newton(y: np.ndarray, start: np.ndarray, f: Callable[[np.ndarray], np.ndarray], *,
                  h: float = 1e-2, max_iter: int = 8, tol: float = 1e-3) -> tuple[np.ndarray, np.ndarray, int]:
    """Least squares of ``y - log C - f(exponents)``, ``log C`` profiled out (a column of ones): Gauss-Newton
    with forward differences, steps of at most 0.3 and halved while the sum of squares grows. Returns
    the exponents, ``f`` there and the evaluations made. (Broyden's secant updates in place of the differences
    save a third of the evaluations but stop early on flat tails: match RMS 0.027 against 0.008 at n = d.)"""

    def sse(f0: np.ndarray) -> float:
        r = y - f0
        return float(np.sum((r - r.mean()) ** 2))

    ab = start.astype(np.float64).copy()
    f0 = f(ab)
    s0, evals = sse(f0), 1
    for _ in range(max_iter):
        J = _jacobian(ab, f, f0, h=h, central=False)
        evals += ab.size
        step = np.linalg.lstsq(J, y - f0, rcond=None)[0][1:]
        step *= min(1.0, 0.3 / max(float(np.max(np.abs(step))), 1e-300))
        for _h in range(6):
            trial = ab + step
            f1 = f(trial)
            evals += 1
            s1 = sse(f1)
            if s1 <= s0 * (1 + 1e-9):
                break
            step = step * 0.5
        ab, f0, s0 = trial, f1, s1
        if float(np.max(np.abs(step))) < tol:
            break
    return ab, f0, evals


def _jacobian(ab: np.ndarray, f: Callable[[np.ndarray], np.ndarray], f0: np.ndarray, *, h: float = 5e-3,
              central: bool = True) -> np.ndarray:
    """``[1, df/d exponent_1, ...]`` by finite differences (central at the solution, for the bootstrap)."""
    cols = [np.ones_like(f0)]
    for k in range(ab.size):
        e = np.zeros(ab.size)
        e[k] = h
        cols.append((f(ab + e) - f(ab - e)) / (2 * h) if central else (f(ab + e) - f0) / h)
    return np.column_stack(cols)


def simulated_rows(tau: np.ndarray, n: int, rng: np.random.Generator,
                   scales: tuple[np.ndarray, np.ndarray] | None) -> np.ndarray:
    """``n`` rows ``sqrt(w_i) tau^(1/2) z_i`` (``Sigma`` diagonal: the spectrum does not depend on the rotation), in
    float32 (:data:`SIMULATION_DTYPE`)."""
    Z = rng.standard_normal((n, tau.size), dtype=SIMULATION_DTYPE)
    Z *= np.sqrt(tau).astype(SIMULATION_DTYPE)
    if scales is not None:
        Z *= np.sqrt(rng.choice(scales[0], size=n, p=scales[1])).astype(SIMULATION_DTYPE)[:, None]
    return Z


def _gram(Z: np.ndarray, rows: np.ndarray | slice = slice(None)) -> np.ndarray:
    """``Z^T Z`` (``Z`` the rows ``rows``) in float64 from the rows' precision: a float32 product's rounding is
    relative to each entry's own scale (``~ 6e-8 sqrt(n)``), far below a simulated sample's own scatter."""
    from spectra_cli import threads

    A = Z[rows]
    with threads.blas(2.0 * A.shape[0] * A.shape[1] ** 2):
        return (A.T @ A).astype(np.float64)


def _gram_spectrum(Z: np.ndarray, denom: float) -> np.ndarray:
    """The eigenvalues (descending, length d) of ``Z^T Z / denom``, by the smaller Gram matrix (formed in ``Z``'s
    precision, decomposed in float64)."""
    from spectra_cli import threads

    n, d = Z.shape
    if n < d:
        with threads.blas(2.0 * n * n * d):
            G = (Z @ Z.T).astype(np.float64)
    else:
        G = _gram(Z)
    ev = eigvalsh_checked(G, "a simulated sample's Gram matrix")[::-1] / denom
    out = np.zeros(d)
    out[:ev.size] = ev
    return out


def partition_spectra(Z: np.ndarray, part: np.ndarray, parts: int) -> list[np.ndarray]:
    """The covariance spectra (ddof 1, descending, length d) of the rows ``Z`` and of each sub-sample that leaves
    out the rows of one part (``part``: each row's part, ``0..parts-1``), from one Gram matrix: with more rows
    than features the parts' ``d x d`` products are summed (each sub-sample the total less its part), else each
    sub-sample's ``n x n`` Gram matrix is a principal block of the whole one; centred by the sums."""
    from spectra_cli import threads

    n, d = Z.shape
    out = []
    if n >= d:
        P = [_gram(Z, part == q) for q in range(parts)]
        S = [Z[part == q].sum(axis=0, dtype=np.float64) for q in range(parts)]
        N = [int(np.count_nonzero(part == q)) for q in range(parts)]
        total, s_all = sum(P), sum(S)
        for q in (None, *range(parts)):
            M, s_, m = (total, s_all, n) if q is None else (total - P[q], s_all - S[q], n - N[q])
            C = (M - np.outer(s_, s_) / m) / (m - 1)
            out.append(eigvalsh_checked(C, "a simulated sample's covariance")[::-1])
        return out
    with threads.blas(2.0 * n * n * d):
        K = (Z @ Z.T).astype(np.float64)
    for q in (None, *range(parts)):
        idx = np.arange(n) if q is None else np.flatnonzero(part != q)
        Kq = K[np.ix_(idx, idx)]
        r = Kq.mean(axis=0)
        Kc = Kq - r[:, None] - r[None, :] + r.mean()  # H K H: the Gram matrix of the centred rows
        ev = eigvalsh_checked(Kc, "a simulated sample's Gram matrix")[::-1] / (idx.size - 1)
        v = np.zeros(d)
        v[:ev.size] = ev
        out.append(v)
    return out


def simulated_spectrum(tau: np.ndarray, n: int, rng: np.random.Generator,
                       scales: tuple[np.ndarray, np.ndarray] | None) -> np.ndarray:
    """The eigenvalues (descending, length d) of ``X^T X / n`` for ``n`` rows ``sqrt(w_i) tau^(1/2) z_i``
    (``Sigma`` diagonal: the spectrum does not depend on the rotation), by the smaller Gram matrix."""
    return _gram_spectrum(simulated_rows(tau, n, rng, scales), float(n))


METHOD = ("the exponent alpha of a population spectrum tau_j = C j^-alpha over the window (continued to rank 1) "
          "and, past its end, up to 3 continuous log-linear segments with fitted slopes (a free tail: real spectra "
          "steepen), whose expected sample spectrum at the same n and d has the observed sample slope over the "
          "window; the tail and level (and shape_alpha) from the least-squares match of the log eigenvalues over "
          "the window and the tail; "
          "the expected spectrum is the deterministic equivalent of the separable sample covariance (Silverstein's "
          "equation with row scales: Paul & Silverstein 2009, Couillet & Hachem 2014; quantiles averaged per rank "
          "as in Ledoit & Wolf's QuEST); the model's bias correction scaled by the data's own sampling curve (the "
          "slope's change when a quarter of the row groups is left out, against the model's expectation of it, "
          "drawn towards 1 by its scatter over samples simulated from the fitted population; sampling_curve); "
          "interval: a linearised parametric bootstrap from the fitted population, widened to the "
          "grouped jackknife of the sample slope where that is wider")


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
                          "route": "first order" if self.replicates == 0 else "simulated",
                          "interval": "alpha -+ t(0.975, B - 1) sd over B sample spectra simulated from the fitted "
                                      "population (sd times sqrt(1 + share^2 / B)): "
                                      "each one's sample slope over the window, less the change of the expected slope "
                                      "that its own tail (one linearised step of the shape match) makes, divided by "
                                      "slope_gain; their mean offset is subtracted from alpha in proportion to its "
                                      "evidence (bias_share: 0 within twice its standard error, 1 beyond three, "
                                      "linear between); with a sampling curve, the half-width is the larger of "
                                      "that and t(0.975, partitions (parts - 1)) sampling_curve.sd (the data's own; "
                                      "sampling_curve.interval_from says which); route \"first order\" (n/d >= "
                                      f"{FIRST_ORDER_RATIO:g}, replicates 0): sd is sd_first_order, the standard "
                                      "deviation of the same linear statistic when each log eigenvalue moves "
                                      "independently by sqrt(2 E[s^2] / n) (Anderson 1963), and t becomes the "
                                      "normal quantile"},
            "rows": self.scales, "notes": list(self.notes), "method": METHOD, "cost": dict(self.cost),
            "model_alpha": self.alpha if self.model_alpha is None else self.model_alpha,
            "sampling_curve": dict(self.sampling_curve) or None,
            "bend": dict(self.bend) or None,
        }


def population_fit(eigenvalues: np.ndarray, *, n: int, window: tuple[int, int], scales: RowScales | None = None,
                   offset: float = 0.0, n_effective: float | None = None, replicates: int = 40, seed: int = 0,
                   level: float = 0.95, null_directions: int = 0,
                   subsamples: Subsamples | None = None) -> PopulationFit:
    """The population exponent over ``window`` (1-based, inclusive) of a sample spectrum.

    ``eigenvalues``: the sample covariance (or second moment), descending, all d of them; ``n``: the
    sample's degrees of freedom (rows - 1 centred, rows uncentred); ``scales``: the rows' squared norms
    (None: Gaussian rows), ``offset`` added to each (uncentred moments: the mean's squared norm);
    ``n_effective``: reported only (Kish's, for weighted rows); ``null_directions``: how many directions
    the caller left out of ``eigenvalues`` (null ones: the population's dimension is the rest; noted);
    ``subsamples``: the spectra of sub-samples of the same rows (:func:`sampling_curve`): the data's own
    sampling curve scales the row model's bias correction, and its spread bounds the interval from below.
    The population model, the equations
    and the interval are in :data:`METHOD` and the module docstring; the matched ranks are those the
    sample resolves (at most ``min(n, d)``), less a margin at the lower edge of the spectrum (10 %, 20 %
    with row scales, where the smallest scales spread the lowest eigenvalues) — the window is cut to
    them, and with no rank past the window the tail continues the window's law (both said in ``notes``).
    """
    t0 = time.perf_counter()
    lam = np.sort(np.asarray(eigenvalues, dtype=np.float64))[::-1]
    d = lam.size
    k0, k1 = (int(v) for v in window)
    top = float(lam[0]) if d else 0.0
    if not top > 0 or n < 3:
        raise FitError("the population exponent needs at least 3 rows and a non-zero spectrum.")
    lam = lam / top  # scale-free: the level is restored at the end
    c = d / n
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
        v = scales.values + offset
        p = scales.counts / scales.counts.sum()
        vm = float(p @ v)
        m2_obs = float(p @ ((v / vm) ** 2)) if vm > 0 else 1.0
        sc, info = deconvolved_scales(scales, directions_t2(lam, m2_obs, n), offset)
        rows = {"model": ("separable rows x = sqrt(s) Sigma^(1/2) z, s from the histogram of squared row norms "
                          "deconvolved (the binned NPMLE of the scales' distribution, the directions' part taken as "
                          "Gamma)") if sc is not None else
                ("Gaussian rows: " + ("the histogram has no non-zero norm" if "cv2_observed" not in info
                                      else "the norms spread no more than the directions themselves make them")),
                **info}
    ranks = np.arange(k0, r_max + 1)
    y = np.log(lam[ranks - 1])
    grid = Grid()
    from spectra_cli.stages import stage

    tick_fit = stage(f"population: matching the expected spectrum (ranks {k0}..{k1})", TYPICAL_EVALUATIONS)
    done = [0]

    def f(ab: np.ndarray) -> np.ndarray:
        ab = np.clip(ab, *ALPHA_BOUNDS)
        tau = population_spectrum(0.0, ab[0], ab[1:], d, knots or (k1,))
        out = np.log(np.maximum(expected_eigenvalues(tau, c, int(ranks[-1]), scales=sc, grid=grid)[ranks - 1],
                                1e-300))
        done[0] += 1
        tick_fit(min(done[0], TYPICAL_EVALUATIONS))
        return out

    start = np.full(1 + len(knots), naive)
    ab, f0, evals = gauss_newton(y, start, f)
    grid.groups = None  # the atoms merged for the fitted population, then a few more steps from there
    ab, f0, more = gauss_newton(y, ab, f, max_iter=3)
    evals += more
    log_c = float(np.mean(y - f0))
    match_rms = float(np.sqrt(np.mean((y - log_c - f0) ** 2)))
    ab = np.clip(ab, *ALPHA_BOUNDS)
    shape_alpha = float(ab[0])
    tail = tuple(float(b) for b in ab[1:])
    # alpha itself: the exponent whose expected sample spectrum has the observed sample slope over the window
    # (the statistic the user reads; a spectrum that bends inside the window is matched where it is measured),
    # the tail and level kept from the match of the whole shape
    win = slice(0, k1 - k0 + 1)

    def slope(a: float) -> float:
        return slope_of(f(np.r_[a, ab[1:]])[win], k0)

    h = 1e-2
    alpha = shape_alpha
    gain = (slope(alpha + h) - slope(alpha - h)) / (2 * h)
    evals += 2
    if not gain > 0.05:
        raise FitError(f"the population exponent is not identified over ranks {k0}..{k1}: the expected sample slope "
                       f"does not grow with it there (d slope / d alpha = {gain:.3g}); use a wider window, or more "
                       "rows.")
    for _ in range(3):
        s_a = slope(alpha)
        evals += 1
        move = (naive - s_a) / gain
        alpha = float(np.clip(alpha + move, *ALPHA_BOUNDS))
        if abs(move) < 1e-5:
            break
    if not ALPHA_BOUNDS[0] < alpha < ALPHA_BOUNDS[1]:
        raise FitError(f"the population exponent over ranks {k0}..{k1} falls at the bound {alpha:g} of the model "
                       f"({ALPHA_BOUNDS[0]:g}..{ALPHA_BOUNDS[1]:g}): the sample slope ({naive:.4g}) is not that of a "
                       "power-law population there.")
    final = np.r_[alpha, ab[1:]]
    f_final = f(final)
    expected_slope = slope_of(f_final[win], k0)
    fitted = float(np.mean(y - f_final)) + f_final
    # the tail's part: how the expected window slope moves with each tail exponent, and how the tail moves
    # with the data (one Gauss-Newton step of the whole-shape match, linearised at the fitted population)
    J = _jacobian(final, f, f_final)
    P = np.linalg.pinv(J)
    # (the window slope is linear in the log eigenvalues: its derivatives are the slopes of J's columns)
    tail_gain = np.array([slope_of(J[win, 1 + i], k0) for i in range(1, final.size)])
    evals += 1 + 2 * final.size  # f(final) and the central Jacobian
    # first order (Anderson 1963): with many rows per feature each sample eigenvalue is its population one times the
    # mean of its coordinate's n squared draws, log lambda_j - log tau_j ~ (1/n) sum_i (s_i z_ij^2 - 1): a part
    # common to every rank ((E s^2 - 1) / n, which neither the slope nor the tail's step sees) and an independent
    # one of variance 2 E[s^2] / n; the replicate statistic is linear in log lambda, a' log lambda
    m2_scales = 1.0 if sc is None else float(sc[1] @ (sc[0] * sc[0]))
    slope_w = np.zeros(ranks.size)
    xw = np.log(ranks[win].astype(np.float64))
    slope_w[win] = -(xw - xw.mean()) / float((xw - xw.mean()) @ (xw - xw.mean()))
    a_lin = (slope_w - tail_gain @ P[2:]) / gain
    sd_first = math.sqrt(2.0 * m2_scales / n) * float(np.linalg.norm(a_lin))
    t_fit = time.perf_counter() - t0
    rng = np.random.default_rng(seed)
    tau_hat = population_spectrum(log_c, alpha, tail, d, knots or (k1,))

    bend_of = BendStatistic(ranks[win])

    def replicate() -> tuple[float, float]:
        """One simulated sample spectrum: its window slope, less what its own tail moves the expected slope by,
        mapped through the gain to an exponent; and its bend over the window about the expected spectrum."""
        log_b = np.log(np.maximum(simulated_spectrum(tau_hat, n, rng, sc)[ranks - 1], 1e-300))
        d_tail = (P @ (log_b - fitted))[2:]
        return (alpha + (slope_of(log_b[win], k0) - expected_slope - float(tail_gain @ d_tail)) / gain,
                bend_of(log_b[win] - f_final[win]))

    from scipy.stats import norm
    from scipy.stats import t as student

    first_order = n >= FIRST_ORDER_RATIO * d
    if first_order:
        # at this many rows per feature the simulations would only restate the first order (within ~20 %, it the
        # wider: bench/README), at the cost of 40 samples of n rows: the interval and the bend's null are read off it
        draws, bends = np.empty(0), np.empty(0)
        bias, sd, share = 0.0, sd_first, 0.0
        zq = float(norm.ppf(0.5 + level / 2))
        notes.append(f"n/d = {n / d:.3g} >= {FIRST_ORDER_RATIO:g}: the interval and the bend test are first order "
                     "(each sample eigenvalue its population one times the mean of n squared draws: Anderson 1963) "
                     f"instead of {replicates} simulated samples; with this many rows they agree within about 20 %, "
                     "the first order the wider")
    else:
        tick = stage(f"population: simulated spectra (ranks {k0}..{k1})", replicates)
        draws = np.empty(replicates)
        bends = np.empty(replicates)
        for b in range(replicates):
            draws[b], bends[b] = replicate()
            tick(b + 1)
        bias = float(draws.mean() - alpha)
        sd = float(draws.std(ddof=1))
        # the mean offset is subtracted in proportion to its evidence: none within twice its standard error, all of
        # it beyond three, linearly between (a hard switch at two made alpha jump by two standard errors of the
        # offset between samples that differ by rounding)
        se_bias = sd / math.sqrt(replicates)
        share = min(max(abs(bias) / se_bias - 2.0, 0.0), 1.0) if se_bias > 0 else float(bias != 0.0)
        if share and not ALPHA_BOUNDS[0] < alpha - share * bias < ALPHA_BOUNDS[1]:
            notes.append(f"the bootstrap's mean offset ({bias:+.3g}) would take the estimate past the model's "
                         f"exponents {ALPHA_BOUNDS[0]:g}..{ALPHA_BOUNDS[1]:g}: it is not subtracted")
            share = 0.0
        # the sd is estimated from the replicates (Student's t with B - 1 degrees of freedom), and a subtracted mean
        # offset carries its own error, share sd / sqrt(B)
        zq = float(student.ppf(0.5 + level / 2, replicates - 1))
        sd *= math.sqrt(1.0 + share * share / replicates)
    corrected = share > 0.0
    estimate = alpha - share * bias
    model_estimate, half = estimate, zq * sd
    curve: dict[str, Any] = {}
    if subsamples is not None:
        sub_top = subsamples.spectra / top
        g_curve = Grid(groups=grid.groups, last=grid.last)  # the fitted population's atoms, for both n and n'
        # a change of a few 1e-3 in the slope is read: three times the fit's grid density, the same for both (at
        # d = 40 and n/d = 10 the default grid moves the slope by 1e-3, the change itself 3e-3)
        ppd_curve = CURVE_GRID_FACTOR * int(np.clip(7.0 * math.sqrt(d / c), 300, 1000))

        def expected_slope_at(dof: float, k_end: int) -> float:
            e = expected_eigenvalues(tau_hat, d / dof, k_end, scales=sc, grid=g_curve, points_per_decade=ppd_curve)
            return slope_of(np.log(np.maximum(e[k0 - 1:k_end], 1e-300)), k0)

        def simulated_changes(k_end: int, parts: int) -> np.ndarray:
            """The sampling curve's change on samples simulated from the fitted population (its own stream), one
            random partition of 32 runs of consecutive rows each, centred like the data (none on the first-order
            route: the change's error is then the data's partitions' own)."""
            if first_order:
                return np.empty(0)
            rng_c = np.random.default_rng([seed, 20])
            out = np.empty(CURVE_SIMULATIONS)
            G = min(32, n)
            for b in range(CURVE_SIMULATIONS):
                Z = simulated_rows(tau_hat, n + 1, rng_c, sc)
                label = np.arange(n + 1) * G // (n + 1)
                part = np.empty(G, dtype=np.int64)
                part[rng_c.permutation(G)] = np.arange(G) % parts
                slopes_b = [slope_of(np.log(np.maximum(v[k0 - 1:k_end], 1e-300)), k0)
                            for v in partition_spectra(Z, part[label], parts)]
                out[b] = float(np.mean(slopes_b[1:])) - slopes_b[0]
                tick_c(b + 1)
            return out

        tick_c = (lambda done: None) if first_order else stage("population: simulated sampling curves",
                                                                CURVE_SIMULATIONS)

        read = sampling_curve(replace(subsamples, spectra=sub_top), lam, n=n, k0=k0, k1=k1, margin=margin,
                              bias=expected_slope - alpha, gain=gain, expected_slope=expected_slope_at,
                              simulated_changes=simulated_changes, notes=notes)
        if read is not None:
            shift, sd_data, df_data, curve = read
            if not ALPHA_BOUNDS[0] < estimate + shift < ALPHA_BOUNDS[1]:
                notes.append(f"the sampling curve's correction ({shift:+.3g}) would take the estimate past the model's "
                             f"exponents {ALPHA_BOUNDS[0]:g}..{ALPHA_BOUNDS[1]:g}: it is not applied, and the interval "
                             "is widened by it")
                curve["left_out"] = float(curve.get("left_out", 0.0)) + shift
                shift = 0.0
            curve["shift_applied"] = shift
            estimate += shift
            half_data = float(student.ppf(0.5 + level / 2, df_data)) * sd_data
            curve["interval_from"] = "data" if half_data > half else "model"
            half = max(half, half_data)
    # the power-law population itself, tested: the observed spectrum's bend over the window (about the expected
    # one) against the simulated samples' bends; where it is beyond them, the curved alternative's window slope
    # says how far the model's error can move alpha, and the interval is widened by it
    observed_bend = bend_of(y[win] - f_final[win])
    if first_order:  # (the bend is linear in log lambda: its first-order sd, about a mean of 0)
        bend = bend_test(observed_bend, None, level=level,
                         null=(0.0, math.sqrt(2.0 * m2_scales / n) * float(np.linalg.norm(bend_of.q)) / bend_of.qq))
    else:
        bend = bend_test(observed_bend, bends, level=level)
    if not bend["fits"]:
        grid_b = Grid(last=grid.last)

        def f_bent(ab: np.ndarray) -> np.ndarray:
            a = float(np.clip(ab[0], *ALPHA_BOUNDS))
            beta = float(np.clip(ab[1], -a / bend_of.span, a / bend_of.span))  # (kept monotone over the window)
            tau = population_spectrum(0.0, a, np.clip(ab[2:], *ALPHA_BOUNDS), d, knots or (k1,), bend=(beta, k0))
            return np.log(np.maximum(expected_eigenvalues(tau, c, int(ranks[-1]), scales=sc, grid=grid_b)[ranks - 1],
                                     1e-300))

        # the curved alternative fitted like the power law (its bend started at the observed one), then its alpha
        # moved (the bend and the tail kept) until its expected slope is the observed one
        ab_b, fb, more = gauss_newton(y, np.r_[alpha, bend["statistic"] - bend["simulated_mean"], ab[1:]], f_bent,
                                       max_iter=BEND_ITERATIONS)
        evals += more
        a_b = float(np.clip(ab_b[0], *ALPHA_BOUNDS))
        beta = float(np.clip(ab_b[1], -a_b / bend_of.span, a_b / bend_of.span))
        for _ in range(3):
            fb = f_bent(np.r_[a_b, beta, ab_b[2:]])
            s_b = slope_of(fb[win], k0)
            evals += 1
            move = (naive - s_b) / gain
            a_b = float(np.clip(a_b + move, *ALPHA_BOUNDS))
            if abs(move) < 1e-5:
                break
        tau_b = population_spectrum(0.0, a_b, np.clip(ab_b[2:], *ALPHA_BOUNDS), d, knots or (k1,), bend=(beta, k0))
        curved = slope_of(np.log(tau_b[k0 - 1:k1]), k0)
        error = curved - alpha
        bend.update({"curved_alpha": curved, "curvature": beta, "model_error": error,
                     "curved_match_rms": float(np.sqrt(np.mean((y - float(np.mean(y - fb)) - fb) ** 2)))})
        notes.append(f"the power-law population does not fit over ranks {k0}..{k1}: the spectrum bends there beyond "
                     f"what sampling makes of a power law (p = {bend['p_value']:.2g}); a population curved over the "
                     f"window has slope {curved:.4g} there, and the interval is widened either side by the "
                     f"{abs(error):.3g} between them")
    low, high = estimate - half, estimate + half
    left_out = float(curve.get("left_out", 0.0))  # a spread ratio past its bound: the correction it leaves out
    low, high = min(low, low + left_out), max(high, high + left_out)
    model_error = abs(float(bend.get("model_error", 0.0)))  # (either side: the curved alternative is itself a model)
    low, high = low - model_error, high + model_error
    if low < ALPHA_BOUNDS[0] or high > ALPHA_BOUNDS[1]:
        notes.append(f"the interval is cut to the model's exponents {ALPHA_BOUNDS[0]:g}..{ALPHA_BOUNDS[1]:g} (from "
                     f"{low:.4g}..{high:.4g}): the window says little about alpha")
        low, high = max(low, ALPHA_BOUNDS[0]), min(high, ALPHA_BOUNDS[1])
    # (the estimate lies inside the model's range, so the cut interval is ordered and holds it)
    low, high = min(low, estimate), max(high, estimate)
    return PopulationFit(
        alpha=estimate, low=low, high=high, naive_alpha=naive,
        segment_exponents=(alpha, *tail), segment_knots=knots, intercept=log_c + math.log(top), n_over_d=n / d,
        n_effective=float(n if n_effective is None else n_effective),
        window=(k0, k1), ranks_matched=(k0, r_max), match_rms=match_rms, shape_alpha=shape_alpha, gain=gain,
        bootstrap_sd=sd, bootstrap_bias=bias, bias_corrected=corrected, bias_share=share,
        replicates=0 if first_order else replicates, seed=seed,
        scales=rows, notes=tuple(notes), level=level, model_alpha=model_estimate, sampling_curve=curve, bend=bend,
        cost={"sd_first_order": sd_first, "evaluations": evals, "grid_points": grid.points, "atoms": grid.atoms,
              "fit_s": t_fit, "bootstrap_s": time.perf_counter() - t0 - t_fit})
