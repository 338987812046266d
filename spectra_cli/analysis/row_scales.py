"""The rows' scales: the spread of their squared norms beyond what their directions make, and the bias-corrected
participation ratio that the same norms give.

Rows are modelled as ``x_i = mu + sqrt(s_i) Sigma^(1/2) z_i`` (an elliptical, or separable, model: El Karoui
2009; Paul & Silverstein 2009); the histogram of squared row norms gathered in the first pass
(:mod:`spectra_cli.stream.norms`) is deconvolved into the law of ``s`` (:func:`deconvolved_scales`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from spectra_cli.analysis.equivalent import merge_groups, merged
from spectra_cli.stream.norms import NormHistogram
from spectra_cli.stream.states import ProjectionMoments

#: Row scales are kept within this factor of their mean either way (the grid spans their range).
SCALE_RANGE = 1e6

#: Scale atoms after compression of the deconvolved histogram.
MAX_SCALE_ATOMS = 64
#: The deconvolution's grid of scales and its EM iterations (at most).
DECONVOLUTION_ATOMS = 96
DECONVOLUTION_ITERATIONS = 3000


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


def directions_t2(eigenvalues: np.ndarray, m2_obs: float, n: float) -> float:
    """``tr Sigma^2 / (tr Sigma)^2`` of the separable model without a fitted population: from
    ``E tr S^2 = (1 - 1/n) tr Sigma_e^2 + E[obs^2] / n`` (``Sigma_e = E[s] Sigma``, ``obs`` a squared norm)."""
    t = float(eigenvalues.sum())
    t2s = float(np.dot(eigenvalues, eigenvalues))
    return max((t2s - m2_obs * t * t / n) / ((1.0 - 1.0 / n) * t * t), 0.0)


@dataclass(frozen=True, slots=True)
class CoordinateCumulant:
    """The rows' coordinates' excess kurtosis ``kappa`` told from their scales' second moment ``m2 = E s^2 /
    (E s)^2`` (:func:`coordinate_cumulant`), each with its grouped jackknife standard error.

    Attributes:
        kappa, kappa_se: the fourth cumulant of the coordinates in the population's eigenbasis (0: Gaussian).
        m2, m2_se: the scales' second moment (1: every row the same scale).
        projections_kurtosis: ``k``, the leading directions' projections' mean excess kurtosis.
        norms_cv2: ``v``, the squared norms' squared coefficient of variation.
        t2: ``tr Sigma^2 / (tr Sigma)^2``, from the row model.
        directions, groups, rows: what it was read from.
    """

    kappa: float
    kappa_se: float
    m2: float
    m2_se: float
    projections_kurtosis: float
    norms_cv2: float
    t2: float
    directions: int
    groups: int
    rows: int

    def beyond(self, sds: float, tolerance: float, material: float) -> tuple[bool, bool, bool]:
        """Whether ``kappa`` is beyond ``sds`` standard errors above 0 (heavy tails); whether the rows have scales of
        their own: ``m2`` beyond ``sds`` standard errors and ``material`` above 1, or above ``1 + tolerance``
        whatever its error (heavy-tailed scales, Student-t rows, spread ``m2`` so much that its jackknife error is as
        large as it); and whether ``m2`` is beyond ``sds`` standard errors below 1, which no scales can make (the
        reading's model does not hold)."""
        return (self.kappa > sds * self.kappa_se,
                (self.m2 - 1.0 > sds * self.m2_se and self.m2 - 1.0 > material) or self.m2 > 1.0 + tolerance,
                1.0 - self.m2 > sds * self.m2_se)

    def to_dict(self) -> dict[str, Any]:
        return {"kappa": self.kappa, "kappa_se": self.kappa_se, "m2": self.m2, "m2_se": self.m2_se,
                "projections_kurtosis": self.projections_kurtosis, "norms_cv2": self.norms_cv2, "t2": self.t2,
                "directions": self.directions, "groups": self.groups, "rows": self.rows,
                "definition": COORDINATE_CUMULANT_DEFINITION}


#: How the coordinates' fourth cumulant is read (reported beside it).
COORDINATE_CUMULANT_DEFINITION = (
    "rows x = mu + sqrt(s) Sigma^(1/2) z, z of independent coordinates with excess kurtosis kappa in the population's "
    "eigenbasis: the projections on the leading sample eigenvectors have kurtosis m2 (3 + kappa) and the squared "
    "norms E h^2 / (E h)^2 = m2 (1 + (2 + kappa) t2), solved together (a method of moments); standard errors by a "
    "grouped jackknife over runs of consecutive rows")


def _cumulant_of(count: float, p2: np.ndarray, p4: np.ndarray, h1: float, h2: float,
                 t2: float) -> tuple[float, float, float, float]:
    """``(kappa, m2, k, v)`` from the summed projections and norms (:class:`CoordinateCumulant`); NaN where the two
    equations do not separate them."""
    with np.errstate(divide="ignore", invalid="ignore", over="ignore", under="ignore"):
        m2p, m4p = p2 / count, p4 / count
        k = float(np.mean(m4p / (m2p * m2p))) - 3.0
        h = np.float64(h1) / count
        v = float(np.float64(h2) / count / (h * h)) - 1.0
        den = (1.0 + v) - (3.0 + k) * t2
        kappa = ((3.0 + k) * (1.0 + 2.0 * t2) - 3.0 * (1.0 + v)) / den if den > 0 else math.nan
        m2 = (1.0 + v) / (1.0 + (2.0 + kappa) * t2)
    return kappa, m2, k, v


def coordinate_cumulant(sums: ProjectionMoments, t2: float) -> CoordinateCumulant | str:
    """The coordinates' fourth cumulant and the scales' second moment, told apart (:class:`CoordinateCumulant`),
    from per-group sums of the rows' projections on the leading eigenvectors and of their squared norms
    (:class:`ProjectionMoments`), at the row model's ``t2``; or why it cannot be read. Each group is left out in turn
    for the standard errors (the standard errors' own design: dependence within a run of rows is kept)."""
    live = np.flatnonzero(sums.count > 0)
    if live.size < 3:
        return f"the rows fill {live.size} run(s) of the jackknife; it needs at least 3"
    c, P2, P4, H1, H2 = sums.count[live], sums.p2[live], sums.p4[live], sums.h1[live], sums.h2[live]
    if not (np.all(P2.sum(axis=0) > 0) and H1.sum() > 0):
        return "the rows do not vary along the leading directions"
    whole = _cumulant_of(float(c.sum()), P2.sum(axis=0), P4.sum(axis=0), float(H1.sum()), float(H2.sum()), t2)
    if not all(math.isfinite(x) for x in whole):
        return ("the norms and the projections do not separate the coordinates' kurtosis from the row scales here "
                "(one direction carries most of the variance)")
    parts = np.array([_cumulant_of(float(c.sum() - c[g]), P2.sum(axis=0) - P2[g], P4.sum(axis=0) - P4[g],
                                   float(H1.sum() - H1[g]), float(H2.sum() - H2[g]), t2)[:2]
                      for g in range(live.size)])
    if not np.all(np.isfinite(parts)):
        return "a run of rows left out leaves the coordinates' kurtosis undefined (the jackknife cannot bound it)"
    G = live.size
    se = np.sqrt((G - 1) * np.mean((parts - parts.mean(axis=0)) ** 2, axis=0))
    return CoordinateCumulant(kappa=whole[0], kappa_se=float(se[0]), m2=whole[1], m2_se=float(se[1]),
                              projections_kurtosis=whole[2], norms_cv2=whole[3], t2=t2, directions=P2.shape[1],
                              groups=G, rows=int(c.sum()))
