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

Rows ``x_i = sqrt(s_i) Sigma^(1/2) z_i`` (scales ``s_i`` of law ``(w, p)``, Gaussian ``z_i``): given the scales the
matrix is a separable sample covariance, whose kernel is ``log|1 - a(x+, y+)| - log|1 - a(x+, y-)|`` with ``a(z1,
z2) = c [sum_t pi_t t^2 / (D1 D2)] [sum_w p_w w^2 / (E1 E2)]``, ``D = t X(z) - z``, ``E = 1 + c w e(z)`` in the
deterministic equivalent's own variables (Hachem, Loubaton & Najim 2008's form for a variance profile; with one scale
it is the kernel above: ``1 - a(z1, z2) = (z1 - z2) m1 m2 / (m1 - m2)``); and the mean's ``A`` is ``a(x+, x+)``.
The scales being a sample adds the variance of one row's influence on ``d int f dF``, ``phi(w) = (d / (pi c)) int
f'(x) Im log(1 + c w e(x)) dx``, over ``n`` (the law of total variance). Both checked against
simulated samples in the tests and bench/.

Closed forms (tests): ``H = delta_1``, ``f = log``: mean ``log(1 - c) / 2``, variance ``-2 log(1 - c)`` (Bai,
Jiang, Yao & Zheng 2009); ``f = x^r``: Bai & Silverstein 2004's sums.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from spectra_cli.analysis.equivalent import EPS_PATH, grid_density, merge_groups, merged, sample_distribution, x_of

#: A cell of the quadrature grid holds at most this share of one eigenvalue's mass (the grid is refined where it holds
#: more), or of the range's ranks over :data:`MAX_NODES` where that is more.
PER_RANK = 0.25
#: The cells' mass cap is at least the range's ranks over this (the variance is a double sum over the points; the
#: edges' and narrow clusters' halvings add more): at d = 1,024, n = 2 d, ranks 11..819, the window 11..102's slope
#: sd moves by 0.1 % from 1,000 to 4,000.
MAX_NODES = 1000
#: A point is inside the support where ``Im m > EDGE_LEVEL |m|`` (outside, the continuation's last ``eps`` leaves
#: about ``1e-5``); cells across an edge are halved down to a relative width of EDGE_WIDTH.
EDGE_LEVEL = 1e-3
EDGE_WIDTH = 1e-6
#: The refinement stops (the law marked unsettled) before its grid passes this many times MAX_NODES points: with row
#: scales and fewer rows than features the solver can land on another root below the support, where the counts jump
#: and halving never settles them (d = 256, n = 191: 11,000 points solved at the 30th level).
REFINED_NODES = 6
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
    cells (from halfway to the point below to halfway to the point above), ``lower`` the cells' lower ends; ``e``,
    ``X``: Silverstein's solution and ``X(e)`` at ``z = x (1 + i eps)`` (:mod:`spectra_cli.analysis.equivalent`),
    ``v``, ``w`` the population's sums ``sum pi t / (t X - z)`` and ``sum pi / (t X - z)`` there;
    ``count``: the expected number of eigenvalues above each point; ``atoms``, ``weights``: the population (merged);
    ``scales``: the rows' scales ``(values, weights)`` (None: Gaussian rows); ``c``; ``d``: the dimension;
    ``settled``: False where the grid's refinement stopped at its budget (:data:`REFINED_NODES`) with cells still
    holding too much mass (a distribution function that jumps: the solver on another root), the law not to be
    trusted."""

    x: np.ndarray
    dx: np.ndarray
    lower: np.ndarray
    e: np.ndarray
    X: np.ndarray
    v: np.ndarray
    w: np.ndarray
    count: np.ndarray
    atoms: np.ndarray
    weights: np.ndarray
    scales: tuple[np.ndarray, np.ndarray] | None
    c: float
    d: int
    settled: bool = True

    @property
    def z(self) -> np.ndarray:
        return self.x * (1.0 + 1j * EPS_PATH[-1])

    @property
    def m(self) -> np.ndarray:
        """The companion Stieltjes transform (of the ``n x n`` matrix), ``-X / z``."""
        return -self.X / self.z

    def _smooth(self, i: np.ndarray, j: np.ndarray) -> np.ndarray:
        """The kernel less ``-log|x - y|`` at the pairs ``i x j`` (its diagonal's own value where ``i = j``)."""
        with np.errstate(divide="ignore", invalid="ignore"):
            if self.scales is None:
                m = self.m
                mi, mj = m[i][:, None], m[j][None, :]
                dx = self.x[i][:, None] - self.x[j][None, :]
                out = np.log(np.abs(mi - np.conj(mj))) - np.log(np.abs((mi - mj) / dx))
                same = i[:, None] == j[None, :]
                if same.any():
                    # (m(x) - m(y)) / (x - y) -> m'(x): dz/dm = 1/m^2 - c sum pi t^2 / (1 + t m)^2
                    ii = np.nonzero(same)
                    mm = m[i[ii[0]]]
                    tm = 1.0 + np.multiply.outer(mm, self.atoms)
                    dz_dm = 1.0 / (mm * mm) - self.c * ((1.0 / (tm * tm)) @ (self.weights * self.atoms ** 2))
                    out[ii] = np.log(2.0 * mm.imag) + np.log(np.abs(dz_dm))
                return out
            # row scales: 1 - a(x+, y-) = (x - y) B(x+, y-) / (e(x) - conj e(y)) (from Silverstein's equations), so
            # the kernel log|1 - a(x+, y+)| - log|1 - a(x+, y-)| is this less log|x - y|
            # (a(x+, y+) = c [sum pi t^2 / (D_i D_j)] [sum p w^2 / (E_i E_j)], D = t X - z, E = 1 + c w e; and
            # B(x+, y-) = sum pi t / (D_i conj D_j): each pair sum asked for alone)
            t2_pp, _ = _pair_sums(self, i, self, j, False, t2=True, b=False)
            a_pp = self.c * t2_pp * _scale_sums(self, i, self, j, False)
            _, b_pm = _pair_sums(self, i, self, j, True, t2=False, b=True)
            ei, ej = self.e[i][:, None], self.e[j][None, :]
            return np.log(np.abs(1.0 - a_pp)) - np.log(np.abs(b_pm)) + np.log(np.abs(ei - np.conj(ej)))

    def variance(self, fprime: np.ndarray, kappa: float = 0.0, *, scales: bool = True) -> float:
        """The limiting variance of ``sum_i f(lambda_i)`` (``fprime``: ``f'`` at :attr:`x`), real entries with fourth
        cumulant ``kappa`` (0: Gaussian; Gaussian rows only); with row scales, also the scales' own sampling
        (:meth:`scales_variance`) unless ``scales`` is False (the variance given the scales)."""
        if kappa and self.scales is not None:
            raise ValueError("the fourth cumulant's term is for Gaussian rows' law (no row scales)")
        g = fprime * self.dx
        keep = np.flatnonzero(g != 0.0)
        g_k, h = g[keep], self.dx[keep]
        x = self.x[keep]
        total = 0.0
        for a in range(0, keep.size, BLOCK):
            b = min(a + BLOCK, keep.size)
            # (the kernel is symmetric: each block of rows against itself and the columns after it, twice)
            kern = self._smooth(keep[a:b], keep[a:])
            i = np.arange(b - a)
            diagonal = kern[i, i].copy()
            with np.errstate(divide="ignore"):
                kern -= np.log(np.abs(x[a:b, None] - x[None, a:]))
            # the diagonal: the mean of -log|x - y| over the point's cell squared (side h) is 3/2 - log h
            kern[i, i] = diagonal + 1.5 - np.log(h[a:b])
            total += float(g_k[a:b] @ (kern[:, :b - a] @ g_k[a:b]))
            total += 2.0 * float(g_k[a:b] @ (kern[:, b - a:] @ g_k[b:]))
        # near the diagonal the kernel's -log|x - y| is integrated exactly over each pair of cells (product
        # integration) in place of its value at the points: within a narrow cluster of a few cells that is most of
        # the error
        lo = self.lower[keep]
        for o in range(1, min(NEAR, keep.size - 1) + 1):
            i, j = np.arange(keep.size - o), np.arange(o, keep.size)
            exact = _mean_log_distance(lo[i], lo[i] + h[i], lo[j], lo[j] + h[j])
            total += 2.0 * float(g_k[i] @ ((np.log(np.abs(x[j] - x[i])) - exact) * g_k[j]))
        var = total / math.pi ** 2
        if kappa:
            inner = _cumulant_inner(self, g, self.atoms)
            var += kappa * self.c / math.pi ** 2 * float(self.weights @ (inner * inner))
        return var + self.scales_variance(fprime) if scales else var

    def scales_variance(self, fprime: np.ndarray) -> float:
        """What the rows' scales being a sample adds to the variance (0 without scales): the variance over the scales'
        law of the influence ``phi(w) = (d / (pi c)) int f'(x) Im log(1 + c w e(x)) dx`` of one row's scale on ``d int
        f dF``, over ``n``: by parts, ``-d int f' dF``, with ``F = Im Phi / pi`` the distribution function's primitive
        (:func:`~spectra_cli.analysis.equivalent.sample_distribution`), stationary in ``e``, whose explicit part in
        the scales' weights is ``-(1 / c) (log(1 + c w e) + 1)``."""
        if self.scales is None:
            return 0.0
        p = self.scales[1]
        phi = scales_influence(self, fprime)
        mean = float(p @ phi)
        n = self.d / self.c
        return float(p @ ((phi - mean) ** 2)) / n

    def mean(self, fprime: np.ndarray, kappa: float = 0.0) -> float:
        """The limiting mean of ``sum_i f(lambda_i) - d int f dF^{c_n, H_n}`` (``fprime``: ``f'`` at :attr:`x`)."""
        if kappa and self.scales is not None:
            raise ValueError("the fourth cumulant's term is for Gaussian rows' law (no row scales)")
        if self.scales is None:
            t, w, m = self.atoms, self.weights, self.m
            tm = 1.0 + np.multiply.outer(m, t)
            big_a = self.c * m * m * ((1.0 / (tm * tm)) @ (w * t * t))
        else:  # (a(z, z): c [sum pi t^2 / D^2] [sum p w^2 / E^2])
            t, pw = self.atoms, self.weights
            inv = 1.0 / (np.multiply.outer(self.X, t) - self.z[:, None])
            w, p = self.scales
            inv_e = 1.0 / (1.0 + self.c * np.multiply.outer(self.e, w))
            big_a = self.c * ((inv * inv) @ (pw * t * t)) * ((inv_e * inv_e) @ (p * w * w))
        out = float((fprime * self.dx) @ np.angle(1.0 - big_a)) / (2.0 * math.pi)
        if kappa:
            tm = 1.0 + np.multiply.outer(self.m, self.atoms)
            phi = self.c * ((0.5 / (tm * tm) - 1.0 / tm) @ self.weights)
            out -= kappa / math.pi * float((fprime * self.dx) @ phi.imag)
        return out


def _pair_sums(A: SampleLaw, i: np.ndarray, B: SampleLaw, j: np.ndarray, conj: bool, *, t2: bool,
               b: bool) -> tuple[np.ndarray, np.ndarray]:
    """The population's sums over pairs of points, ``T2 = sum pi t^2 / (D_i D_j)`` and ``B = sum pi t / (D_i D_j)``
    (``D = t X - z``; points ``i`` of ``A``, ``j`` of ``B``, at ``conj z_j`` where ``conj``; each asked for by ``t2``
    and ``b``, else empty), by partial fractions: ``1 / (D_i D_j) = (X_i / D_i - X_j / D_j) / (X_j z_i - X_i z_j)``,
    one sum a point instead of one a pair (exact; where ``z_i = z_j`` the sums themselves, over ``A``'s atoms), with
    ``X sum pi t^2 / D = sum pi t + z sum pi t / D`` and ``X sum pi t / D = sum pi + z sum pi / D``, so that the
    constants cancel exactly rather than in rounding (the spectrum's lowest points lie many decades below its top).
    Two laws of one population at different ``c`` hold its atoms merged differently: each point's sums are its own
    law's."""
    t, pw = A.atoms, A.weights
    Xj, zj = (np.conj(B.X[j]), np.conj(B.z[j])) if conj else (B.X[j], B.z[j])
    Xi, zi = A.X[i][:, None], A.z[i][:, None]
    den = Xj[None, :] * zi - Xi * zj[None, :]
    same = np.abs(den) <= 1e-13 * np.abs(Xi * zj[None, :])
    den = np.where(same, 1.0, den)
    empty = np.empty((0, 0), dtype=complex)

    def by_fractions(s_i: np.ndarray, s_j: np.ndarray) -> np.ndarray:
        zs_j = np.conj(B.z[j] * s_j) if conj else B.z[j] * s_j  # (at conj z the sums are the conjugates)
        return ((A.z[i] * s_i)[:, None] - zs_j[None, :]) / den

    T2 = by_fractions(A.v[i], B.v[j]) if t2 else empty
    Bs = by_fractions(A.w[i], B.w[j]) if b else empty
    if same.any():
        r, k = np.nonzero(same)
        prod = 1.0 / (np.multiply.outer(A.X[i][r], t) - A.z[i][r][:, None]) / (np.multiply.outer(Xj[k], t)
                                                                              - zj[k][:, None])
        if t2:
            T2[r, k] = prod @ (pw * t * t)
        if b:
            Bs[r, k] = prod @ (pw * t)
    return T2, Bs


def _scale_sums(A: SampleLaw, i: np.ndarray, B: SampleLaw, j: np.ndarray, conj: bool) -> np.ndarray:
    """``sum_w p_w w^2 / (E_i E_j)`` over the rows' scales (``E = 1 + c w e``, each law at its own ``c``; ``conj``:
    ``e_j`` conjugated); ``1 / ((1 + c_A e_i) (1 + c_B e_j))`` for Gaussian rows."""
    w, p = (np.array([1.0]), np.array([1.0])) if A.scales is None else A.scales
    ej = np.conj(B.e[j]) if conj else B.e[j]
    Ei = 1.0 / (1.0 + A.c * np.multiply.outer(A.e[i], w))
    Ej = 1.0 / (1.0 + B.c * np.multiply.outer(ej, w))
    return (Ei * (p * w * w)) @ Ej.T


def _cumulant_inner(law: SampleLaw, g: np.ndarray, t: np.ndarray) -> np.ndarray:
    """``int f'(x) Im 1 / (1 + t m(x)) dx`` at each population eigenvalue ``t`` (``g``: ``f' dx`` at the law's
    points): one coordinate's part in the fourth cumulant's terms."""
    return np.imag(1.0 / (1.0 + np.multiply.outer(law.m, t))).T @ g


def cross_covariance(A: SampleLaw, fa: np.ndarray, B: SampleLaw, fb: np.ndarray, shared: float,
                     kappa: float = 0.0) -> float:
    """The limiting covariance of ``sum f_a`` over the eigenvalues of one sample covariance and ``sum f_b`` over those
    of another from the same rows' law (the same population and scales), ``A`` and ``B`` their laws (each at its own
    ``c``), sharing ``shared`` of their rows (a count; ``n_A = d / c_A`` and ``n_B`` rows each, neither the other):
    the kernel of :meth:`SampleLaw.variance` with ``a_AB(z1, z2) = d (shared / (n_A n_B)) [sum pi t^2 / (D_A D_B)]
    E_s[s^2 / (E_A E_B)]``, the sum over rows running over the shared ones (Gaussian integration by parts, each
    row weighted by ``1 / n`` in its matrix; one matrix, ``shared = n``, is :meth:`SampleLaw.variance`'s ``a``).
    Two different matrices share no eigenvalue: the kernel has no singularity. The scales' own sampling is not in
    it (:func:`scales_influence`). Coordinates of fourth cumulant ``kappa`` (Gaussian rows' law only) add, row by
    shared row, the covariance of its two quadratic forms' ``kappa sum_j M_jj N_jj``: ``(kappa d shared / (n_A n_B
    pi^2)) int dH(t) I_A(t) I_B(t)``, ``I(t) = int f'(x) Im 1 / (1 + t m(x)) dx`` (with ``A = B`` and ``shared = n``,
    :meth:`SampleLaw.variance`'s term)."""
    ga, gb = fa * A.dx, fb * B.dx
    ia, ib = np.flatnonzero(ga != 0.0), np.flatnonzero(gb != 0.0)
    if not (ia.size and ib.size):
        return 0.0
    nA, nB = A.d / A.c, B.d / B.c
    scale = A.d * shared / (nA * nB)
    total = 0.0
    for a0 in range(0, ia.size, BLOCK):
        i = ia[a0:a0 + BLOCK]
        out = np.zeros((i.size, ib.size))
        for conj, sign in ((False, 1.0), (True, -1.0)):
            T2, _ = _pair_sums(A, i, B, ib, conj, t2=True, b=False)
            out += sign * np.log(np.abs(1.0 - scale * T2 * _scale_sums(A, i, B, ib, conj)))
        total += float(ga[i] @ (out @ gb[ib]))
    if kappa:
        if A.scales is not None or B.scales is not None:
            raise ValueError("the fourth cumulant's term is for Gaussian rows' law (no row scales)")
        # (over A's atoms: B's law holds the same population, merged at its own c)
        inner = _cumulant_inner(A, ga, A.atoms) * _cumulant_inner(B, gb, A.atoms)
        total += kappa * A.d * shared / (nA * nB) * float(A.weights @ inner)
    return total / math.pi ** 2


def scales_influence(law: SampleLaw, fprime: np.ndarray) -> np.ndarray:
    """One row's influence on ``d int f dF`` by its scale, at each of the scales' values (:meth:`SampleLaw.
    scales_variance`; zeros without scales)."""
    if law.scales is None:
        return np.zeros(1)
    w, _ = law.scales
    u = 1.0 + law.c * np.multiply.outer(law.e, w)
    return (law.d / (math.pi * law.c)) * ((fprime * law.dx) @ np.arctan2(np.maximum(u.imag, 0.0), u.real))


def sample_law(tau: np.ndarray, c: float, *, counts: tuple[float, float] | None = None,
               scales: tuple[np.ndarray, np.ndarray] | None = None,
               per_rank: float = PER_RANK, max_nodes: int = MAX_NODES) -> SampleLaw:
    """The limiting sample spectrum of the population ``tau`` (``d`` eigenvalues) at ``c = d / n`` (rows of scales
    ``scales = (values, weights)``; None: Gaussian rows), on a grid whose cells each hold at most ``per_rank`` of an
    eigenvalue's mass (or ``(hi - lo) / max_nodes``), over the part of the support where between ``counts = (lo,
    hi)`` eigenvalues lie above (None: all of it).

    The grid starts log-spaced (:func:`~spectra_cli.analysis.equivalent.grid_density` points a decade) and is halved
    in log x wherever a cell holds too much mass, so that the clusters around separated population eigenvalues are
    resolved however narrow, and across the support's edges; each new point is solved from its neighbours' solution
    (Newton, else the continuation: :func:`~spectra_cli.analysis.equivalent.sample_distribution`)."""
    tau = np.asarray(tau, dtype=np.float64)
    d = tau.size
    lo, hi = (0.0, float(min(d, d / c))) if counts is None else (float(counts[0]), float(counts[1]))
    atoms, pi = merged(tau, None, merge_groups(tau, c=c))
    wmax = 1.0 if scales is None else max(float(scales[0].max()), 1.0)
    wmin = 1.0 if scales is None else min(float(scales[0].min()), 1.0)
    x_hi = float(atoms.max()) * (1.0 + math.sqrt(c)) ** 2 * 1.5 * wmax
    # the grid's lower end: below the population eigenvalue of the last count asked for, as far as sampling can
    # spread it, and lower while fewer than that many lie above it (as the expected spectrum's own grid): the
    # region far below the support is where Newton is slowest with row scales (several real roots), and unneeded
    last = min(d, max(int(math.ceil(hi)) + 1, 1))
    x_lo = float(np.sort(tau)[::-1][last - 1]) * wmin * (max(1e-3, 0.25 * (1.0 - math.sqrt(c)) ** 2) if c < 1
                                                          else 1e-3)
    ppd = grid_density(d, c)
    for _ in range(4):
        x = np.geomspace(x_lo, x_hi, int(math.ceil(math.log10(x_hi / x_lo) * ppd)) + 1)
        F, e = sample_distribution(atoms, pi, scales, c, x)
        if d * (1.0 - F[0]) >= min(hi + 1.0, min(d, d / c) - 0.5):  # (the non-zero eigenvalues: min(d, n))
            break
        x_lo *= 1e-2
    cap = max(per_rank, (hi - lo) / max_nodes)
    settled = True
    for _ in range(MAX_LEVELS):
        N = d * (1.0 - F)
        # the cells that hold too much of the range's mass (counts above, at their ends, overlapping lo..hi), and
        # those across an edge of the support (where the density has a square root), down to EDGE_WIDTH
        held = N[:-1] - N[1:]
        overlap = (N[1:] < hi + 1.0) & (N[:-1] > lo - 1.0)
        X = x_of(e, scales, c)
        inside = -X.imag > EDGE_LEVEL * np.abs(X)  # (Im X <= 0 on the Stieltjes branch)
        edge = (inside[:-1] != inside[1:]) & (x[1:] > x[:-1] * (1.0 + EDGE_WIDTH))
        split = np.flatnonzero(overlap & ((held > cap) | edge))
        if not split.size:
            break
        if x.size + split.size > REFINED_NODES * max_nodes:  # (a distribution function that will not settle)
            settled = False
            break
        xm = np.sqrt(x[split] * x[split + 1])
        Fm, em = sample_distribution(atoms, pi, scales, c, xm, start=0.5 * (e[split] + e[split + 1]))
        x = np.insert(x, split + 1, xm)
        F = np.insert(F, split + 1, Fm)
        e = np.insert(e, split + 1, em)
    N = d * (1.0 - F)
    X = x_of(e, scales, c)
    edges = np.concatenate([[x[0]], 0.5 * (x[1:] + x[:-1]), [x[-1]]])
    dx = np.diff(edges)
    inside = (-X.imag > EDGE_LEVEL * np.abs(X)) & (N < hi + 1.0) & (N > lo - 1.0)
    x, X, e = x[inside], X[inside], e[inside]
    inv = 1.0 / (np.multiply.outer(X, atoms) - (x * (1.0 + 1j * EPS_PATH[-1]))[:, None])
    return SampleLaw(x=x, dx=dx[inside], lower=edges[:-1][inside], e=e, X=X, v=inv @ (pi * atoms), w=inv @ pi,
                     settled=settled,
                     count=N[inside], atoms=atoms, weights=pi, scales=scales, c=c, d=d)


def rank_weights_derivative(law: SampleLaw, weights: np.ndarray, k0: int) -> np.ndarray:
    """``psi'`` at the law's points for the L-statistic ``sum_k a_k log lambda_(k)`` over ranks ``k0..k0 + len(a) -
    1`` (``weights``: ``a``): ``a(N(x)) / x``, rank ``k`` holding the counts ``(k - 1, k]`` above."""
    k = np.ceil(law.count).astype(np.int64)
    k = np.maximum(k, 1)
    idx = k - k0
    a = np.zeros(law.x.size)
    ok = (idx >= 0) & (idx < weights.size)
    a[ok] = weights[idx[ok]]
    return a / law.x
