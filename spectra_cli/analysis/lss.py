"""The central limit theorem of linear spectral statistics: the mean and variance of ``sum_i f(lambda_i)`` over a
sample covariance's eigenvalues, from theory instead of simulated samples.

For ``n`` Gaussian rows of ``d`` features with population spectrum ``H`` and ``c = d / n``, ``sum_i f(lambda_i) -
d int f dF^{c,H}`` is asymptotically normal (Bai & Silverstein 2004, real case), with

- variance ``(1 / pi^2) int int f'(x) f'(y) log |(m(x) - conj m(y)) / (m(x) - m(y))| dx dy``,
- mean ``(1 / (2 pi)) int f'(x) arg(1 - A(x)) dx``, ``A = c m^2 int t^2 dH(t) / (1 + t m)^2``,

``m`` the companion Stieltjes transform (of the ``n x n`` matrix) on the real axis, from above; both integrals are
over the support (outside it ``m`` is real and the integrands vanish). These are Bai & Silverstein's contour
integrals taken by parts onto the real axis (their eq. (5.13) for the variance), so that ``f`` needs a derivative
but not an analytic continuation: a weighted sum of ordered log eigenvalues (a rank window's slope) is such an
``f`` (an L-statistic: ``sum_k a_k log lambda_(k)`` moves as ``sum_i psi(lambda_i)`` with ``psi'(x) = a(N(x)) / x``,
``N(x)`` the expected count of eigenvalues above ``x``). Entries with fourth cumulant ``kappa`` (independent
coordinates in the population's eigenbasis) add ``(kappa c / pi^2) int dH(t) (int f'(x) Im 1 / (1 + t m(x)) dx)^2``
to the variance and ``-(kappa / pi) int f'(x) Im Phi(m(x)) dx``, ``Phi(m) = c int (1 / (2 (1 + t m)^2) - 1 / (1 + t
m)) dH(t)``, to the mean (Pan & Zhou 2008; Najim & Yao 2016 for ``f`` with three derivatives). Centred rows: ``n``
is the degrees of freedom, rows - 1 (Zheng, Bai & Yao 2015's substitution principle).

Closed forms (tests): ``H = delta_1``, ``f = log``: mean ``log(1 - c) / 2``, variance ``-2 log(1 - c)`` (Bai,
Jiang, Yao & Zheng 2009); ``f = x^r``: Bai & Silverstein 2004's sums.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from spectra_cli.analysis.equivalent import EPS_PATH, grid_density, merge_groups, merged, sample_distribution

#: A cell of the quadrature grid holds at most this share of one eigenvalue's mass (the grid is refined where it holds
#: more), or of the range's ranks over :data:`MAX_NODES` where that is more.
PER_RANK = 0.25
#: At most about this many quadrature points (the variance is a double sum over them).
MAX_NODES = 6000
#: A point is inside the support where ``Im m > EDGE_LEVEL |m|`` (outside, the continuation's last ``eps`` leaves
#: about ``1e-5``); cells across an edge are halved down to a relative width of EDGE_WIDTH.
EDGE_LEVEL = 1e-3
EDGE_WIDTH = 1e-6
#: Refinement levels at most (each halves the flagged cells in log x).
MAX_LEVELS = 40
#: The kernel's rows are summed this many at a time (memory: BLOCK x points complex numbers).
BLOCK = 512


#: Pairs of cells up to this many apart have the kernel's logarithmic singularity integrated exactly.
NEAR = 8


def _second_primitive(u: np.ndarray) -> np.ndarray:
    """``F(u) = u^2 log|u| / 2 - 3 u^2 / 4``, ``F'' = log|u|`` (``F(0) = 0``)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        out = 0.5 * u * u * np.log(np.abs(u)) - 0.75 * u * u
    return np.where(u == 0.0, 0.0, out)


def _mean_log_distance(a1: np.ndarray, b1: np.ndarray, a2: np.ndarray, b2: np.ndarray) -> np.ndarray:
    """The mean of ``log|x - y|`` over ``x`` in ``[a1, b1]``, ``y`` in ``[a2, b2]`` (exact)."""
    F = _second_primitive
    total = F(b1 - a2) - F(b1 - b2) - F(a1 - a2) + F(a1 - b2)
    return total / ((b1 - a1) * (b2 - a2))


@dataclass(frozen=True, slots=True)
class SampleLaw:
    """The limiting sample spectrum of a population at ``c`` on a quadrature grid over (part of) its support.

    ``x``: points (ascending) where the density is positive; ``dx``: their quadrature weights, the widths of their
    cells (from halfway to the point below to halfway to the point above), ``lower`` the cells' lower ends; ``m``:
    the companion Stieltjes transform ``m(x + i0)``; ``dm``: its derivative; ``count``: the expected number of
    eigenvalues above each point; ``atoms``, ``weights``: the population (merged); ``c``; ``d``: the dimension."""

    x: np.ndarray
    dx: np.ndarray
    lower: np.ndarray
    m: np.ndarray
    dm: np.ndarray
    count: np.ndarray
    atoms: np.ndarray
    weights: np.ndarray
    c: float
    d: int

    def variance(self, fprime: np.ndarray, kappa: float = 0.0) -> float:
        """The limiting variance of ``sum_i f(lambda_i)`` (``fprime``: ``f'`` at :attr:`x`), real entries with fourth
        cumulant ``kappa`` (0: Gaussian)."""
        g = fprime * self.dx
        keep = np.flatnonzero(g != 0.0)
        g, m, h = g[keep], self.m[keep], self.dx[keep]
        total = 0.0
        for a in range(0, keep.size, BLOCK):
            b = min(a + BLOCK, keep.size)
            ma = m[a:b, None]
            with np.errstate(divide="ignore"):
                kern = np.log(np.abs(ma - np.conj(m)[None, :])) - np.log(np.abs(ma - m[None, :]))
            # the diagonal: log|m(x) - m(y)| ~ log|m'(x)| + log|x - y|, averaged over the point's cell (of width h):
            # the mean of log|x - y| over a square of side h is log h - 3/2
            i = np.arange(a, b)
            kern[i - a, i] = (np.log(2.0 * m[i].imag) - np.log(np.abs(self.dm[keep][i])) - np.log(h[i]) + 1.5)
            total += float(g[a:b] @ (kern @ g))
        # near the diagonal the kernel's -log|x - y| is integrated exactly over each pair of cells (product
        # integration) in place of its value at the points: within a narrow cluster of a few cells that is most of
        # the error
        lo = self.lower[keep]
        for o in range(1, min(NEAR, keep.size - 1) + 1):
            i, j = np.arange(keep.size - o), np.arange(o, keep.size)
            exact = _mean_log_distance(lo[i], lo[i] + h[i], lo[j], lo[j] + h[j])
            total += 2.0 * float(g[i] @ ((np.log(np.abs(self.x[keep][j] - self.x[keep][i])) - exact) * g[j]))
        var = total / math.pi ** 2
        if kappa:
            t = self.atoms
            inner = (np.imag(1.0 / (1.0 + np.multiply.outer(self.m, t))).T @ (fprime * self.dx))
            var += kappa * self.c / math.pi ** 2 * float(self.weights @ (inner * inner))
        return var

    def mean(self, fprime: np.ndarray, kappa: float = 0.0) -> float:
        """The limiting mean of ``sum_i f(lambda_i) - d int f dF^{c_n, H_n}`` (``fprime``: ``f'`` at :attr:`x`)."""
        t, w, m = self.atoms, self.weights, self.m
        tm = 1.0 + np.multiply.outer(m, t)
        big_a = self.c * m * m * ((1.0 / (tm * tm)) @ (w * t * t))
        out = float((fprime * self.dx) @ np.angle(1.0 - big_a)) / (2.0 * math.pi)
        if kappa:
            phi = self.c * ((0.5 / (tm * tm) - 1.0 / tm) @ w)
            out -= kappa / math.pi * float((fprime * self.dx) @ phi.imag)
        return out


def _solved(atoms: np.ndarray, pi: np.ndarray, c: float, x: np.ndarray,
            start: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
    """The distribution function and Silverstein's solution ``e`` at ``x`` (Gaussian rows)."""
    return sample_distribution(atoms, pi, None, c, x, start=start)


def sample_law(tau: np.ndarray, c: float, *, counts: tuple[float, float] | None = None,
               per_rank: float = PER_RANK, max_nodes: int = MAX_NODES) -> SampleLaw:
    """The limiting sample spectrum of the population ``tau`` (``d`` eigenvalues) at ``c = d / n``, Gaussian rows,
    on a grid whose cells each hold at most ``per_rank`` of an eigenvalue's mass (or ``(hi - lo) / max_nodes``),
    over the part of the support where between ``counts = (lo, hi)`` eigenvalues lie above (None: all of it).

    The grid starts log-spaced (:func:`~spectra_cli.analysis.equivalent.grid_density` points a decade) and is halved
    in log x wherever a cell holds too much mass, so that the clusters around separated population eigenvalues are
    resolved however narrow; each new point is solved from its neighbours' solution (Newton, else the continuation:
    :func:`~spectra_cli.analysis.equivalent.sample_distribution`)."""
    tau = np.asarray(tau, dtype=np.float64)
    d = tau.size
    lo, hi = (0.0, float(min(d, d / c))) if counts is None else (float(counts[0]), float(counts[1]))
    atoms, pi = merged(tau, None, merge_groups(tau, c=c))
    top = float(atoms.max())
    x_hi = top * (1.0 + math.sqrt(c)) ** 2 * 1.5
    x_lo = float(atoms.min()) * (max(1e-3, 0.25 * (1.0 - math.sqrt(c)) ** 2) if c < 1 else 1e-3)
    ppd = grid_density(d, c)
    x = np.geomspace(x_lo, x_hi, int(math.ceil(math.log10(x_hi / x_lo) * ppd)) + 1)
    F, e = _solved(atoms, pi, c, x, None)
    cap = max(per_rank, (hi - lo) / max_nodes)
    for _ in range(MAX_LEVELS):
        N = d * (1.0 - F)
        # the cells that hold too much of the range's mass (counts above, at their ends, overlapping lo..hi), and
        # those across an edge of the support (where the density has a square root), down to EDGE_WIDTH
        held = N[:-1] - N[1:]
        overlap = (N[1:] < hi + 1.0) & (N[:-1] > lo - 1.0)
        m_at = 1.0 / (1.0 + c * e)
        inside = -m_at.imag > EDGE_LEVEL * np.abs(m_at)  # (Im X <= 0 on the Stieltjes branch)
        edge = (inside[:-1] != inside[1:]) & (x[1:] > x[:-1] * (1.0 + EDGE_WIDTH))
        split = np.flatnonzero(overlap & ((held > cap) | edge))
        if not split.size:
            break
        xm = np.sqrt(x[split] * x[split + 1])
        start = 0.5 * (e[split] + e[split + 1])
        Fm, em = _solved(atoms, pi, c, xm, start)
        x = np.insert(x, split + 1, xm)
        F = np.insert(F, split + 1, Fm)
        e = np.insert(e, split + 1, em)
    N = d * (1.0 - F)
    z = x * (1.0 + 1j * EPS_PATH[-1])
    m = -1.0 / (z * (1.0 + c * e))  # (the companion transform: -X / z, X = 1 / (1 + c e) for Gaussian rows)
    edges = np.concatenate([[x[0]], 0.5 * (x[1:] + x[:-1]), [x[-1]]])
    dx = np.diff(edges)
    tm = 1.0 + np.multiply.outer(m, atoms)
    dz_dm = 1.0 / (m * m) - c * ((1.0 / (tm * tm)) @ (pi * atoms * atoms))
    inside = (m.imag > EDGE_LEVEL * np.abs(m)) & (N < hi + 1.0) & (N > lo - 1.0)
    return SampleLaw(x=x[inside], dx=dx[inside], lower=edges[:-1][inside], m=m[inside], dm=(1.0 / dz_dm)[inside],
                     count=N[inside], atoms=atoms, weights=pi, c=c, d=d)


def rank_weights_derivative(law: SampleLaw, weights: np.ndarray, k0: int,
                            g_prime: Callable[[np.ndarray], np.ndarray] | None = None) -> np.ndarray:
    """``psi'`` at the law's points for the L-statistic ``sum_k a_k g(lambda_(k))`` over ranks ``k0..k0 + len(a) - 1``
    (``weights``: ``a``; ``g``: log unless ``g_prime`` is given): ``a(N(x)) g'(x)``, rank ``k`` holding the counts
    ``(k - 1, k]`` above."""
    k = np.ceil(law.count).astype(np.int64)
    k = np.maximum(k, 1)
    idx = k - k0
    a = np.zeros(law.x.size)
    ok = (idx >= 0) & (idx < weights.size)
    a[ok] = weights[idx[ok]]
    return a * (1.0 / law.x if g_prime is None else g_prime(law.x))
