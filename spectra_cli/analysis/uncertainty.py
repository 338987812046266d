"""Standard errors of the spectral metrics: the delta method through the eigenvectors.

A metric ``f(lambda_1, ..., lambda_d)`` of the sample covariance's eigenvalues moves, to first order,
by ``sum_j g_j d lambda_j`` with ``g = grad f`` and ``d lambda_j = v_j^T dC v_j`` (Anderson 1963;
the perturbation of a simple eigenvalue). With independent rows ``y`` (about the mean) and ``z_j =
v_j^T y``, ``d lambda_j`` is the mean of ``z_j^2 - lambda_j`` over the rows, so

    Var f = (1 / n_eff) [a sum_j g_j^2 lambda_j^2 + c (sum_j g_j lambda_j)^2]

where ``Var z_j^2 = a lambda_j^2`` and ``Cov(z_i^2, z_j^2) = c lambda_i lambda_j`` (i != j), and
``n_eff = 1 / sum p_i^2`` (the row count unweighted; Kish's effective size weighted). The row model
gives ``a`` and ``c``:

- elliptical rows ``y = s z``, ``z`` Gaussian, ``E s^2 = 1``, ``E s^4 = 1 + c``: ``a = 2 (1 + c)``
  (Gaussian rows: ``c = 0``, ``a = 2``);
- independent coordinates (each an eigen-direction) of excess kurtosis ``k`` times such a scale:
  ``a = (1 + c)(2 + k)``, i.e. ``sum_k E x_k^4 / sum_k sigma_k^4 - 1 - c`` from the features' fourth moments.

``c`` and ``k`` are read from what every pass keeps, the histogram of squared row norms and the
features' fourth moments (:mod:`spectra_cli.stream.norms`), as the population exponent reads them
(:func:`spectra_cli.analysis.row_scales.deconvolved_scales`): the spread of the squared norms beyond
what Gaussian directions give (``E h^2 / (E h)^2 / (1 + 2 t2) - 1``, ``t2 = tr S^2 / (tr S)^2``), or,
when smaller, beyond what independent coordinates of the measured kurtosis give. The standard error
is of the sample metric (its spread over samples of this size), not of a population value; it is
first order (good when each metric changes smoothly with the eigenvalues and n is not far below d).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from spectra_cli.analysis.equivalent import merged as atoms
from spectra_cli.analysis.rank import TOP_FUNCTIONS

METHOD = ("delta method through the eigenvectors (d lambda_j = v_j^T dC v_j): Var f = [a sum g_j^2 lambda_j^2 + "
          "c (sum g_j lambda_j)^2] / n_eff, g = grad f, with a and c of the rows' fourth moments read from the "
          "histogram of squared row norms (elliptical rows: a = 2 (1 + c); Gaussian: a = 2, c = 0)")
#: A participation ratio above this share of d marks a flat spectrum, where near-equal eigenvalues repel and
#: the first-order errors over-state the spread (measured: 2-4x on white noise, 1.5x at j^-0.2, exact from j^-0.4).
FLAT_PR_SHARE = 0.75
#: The isotropy measures no standard error is given for, and why (the ranks': ``spectra_cli.analysis.rank.NO_ERROR``).
NOT_DERIVED = {
    "mean_cosine": "the variance of the mean cosine needs the second moment of the unit rows, which the pass does "
                   "not keep",
    "mean_norm_ratio": "not derived", "partition_isotropy": "a min/max over directions: not derived",
    "partition_isotropy_symmetric": "a min/max over directions: not derived",
}


@dataclass(frozen=True, slots=True)
class RowModel:
    """What the standard errors assume of the rows: ``a`` (``Var z^2 / lambda^2`` along an
    eigen-direction), ``c`` (the scale spread: ``Cov(z_i^2, z_j^2) / (lambda_i lambda_j)``), the
    effective rows and where ``a`` and ``c`` were read."""

    a: float
    c: float
    n_effective: float
    source: str

    def variance(self, lam: np.ndarray, grad: np.ndarray) -> float:
        gl = grad * lam
        return (self.a * float(np.dot(gl, gl)) + self.c * float(gl.sum()) ** 2) / self.n_effective

    def to_dict(self) -> dict[str, Any]:
        return {"a": self.a, "c": self.c, "n_effective": self.n_effective, "rows": self.source}


def row_model(lam: np.ndarray, *, n_effective: float, norms: Any = None, variances: np.ndarray | None = None,
              weighted: bool = False) -> RowModel:
    """The row model of the standard errors from the spectrum (``lam``, the reported matrix's
    eigenvalues), the histogram of squared row norms (``norms``, a :class:`~spectra_cli.stream.norms.NormHistogram`)
    and each feature's variance (with the histogram's fourth moments: the coordinates' reading). Gaussian
    rows when there is no histogram."""
    if norms is None or not getattr(norms, "rows", 0):
        return RowModel(2.0, 0.0, n_effective, "no histogram of row norms (moments saved without one): Gaussian "
                        "rows assumed")
    if weighted:  # the histogram holds w_i |y_i|^2: its spread is the weights' as much as the rows' (n_eff has them)
        return RowModel(2.0, 0.0, n_effective, "weighted rows (the norms' histogram mixes the weights with the row "
                        "scales; the weights are in n_effective): Gaussian rows assumed")
    values, counts = norms.values()
    keep = (counts > 0) & (values > 0)
    if not keep.any():
        return RowModel(2.0, 0.0, n_effective, "no row of positive norm: Gaussian rows assumed")
    p = counts[keep] / counts[keep].sum()
    raw_mean = float(p @ values[keep])  # the mean squared norm in the data's units (may overflow: then no reading)
    v = values[keep] / float(values[keep].max())
    mean = float(p @ v)
    if not (mean > 0 and math.isfinite(mean)):
        return RowModel(2.0, 0.0, n_effective, "the row norms are not finite: Gaussian rows assumed")
    v = v / mean
    m2_obs = float(p @ (v * v))
    u = lam / lam[0] if lam.size and lam[0] > 0 else lam
    total = float(u.sum())
    t2 = float(np.dot(u, u)) / (total * total) if total > 0 else 0.0
    c_dir = max(m2_obs / (1.0 + 2.0 * t2) - 1.0, 0.0)
    a, c, source = 2.0 * (1.0 + c_dir), c_dir, "elliptical rows (the spread of the squared row norms)"
    f4 = norms.coordinate_fourth
    if f4 is not None and variances is not None and not weighted:
        with np.errstate(over="ignore", invalid="ignore"):
            s4 = float(np.dot(variances, variances))
            tr2 = raw_mean * raw_mean
        if math.isfinite(s4) and math.isfinite(tr2) and 0 < s4 < tr2:
            c_coord = (m2_obs - f4 / tr2) / (1.0 - s4 / tr2) - 1.0
            if c_coord < c_dir:  # independent coordinates read the norms' spread better (heavy-tailed coordinates)
                # x = sqrt(s) y, y of independent coordinates of kurtosis 3 + k: E x^4 = (1 + c)(3 + k) sigma^4, so
                # Var z^2 / lambda^2 = (1 + c)(3 + k) - 1 and a = that - c = f4 / s4 - 1 - c (elliptical: 2 (1 + c))
                c = max(c_coord, 0.0)
                a = max(f4 / s4 - 1.0 - c, 0.0)
                source = "independent coordinates (the features' fourth moments) with row scales"
    return RowModel(a, c, n_effective, source)


def _top_share_grad(lam: np.ndarray) -> tuple[float, np.ndarray]:
    A, top = float(lam.sum()), float(lam[0])
    g = np.full(lam.size, -top / (A * A))
    g[0] += 1.0 / A
    return top / A, g


def _isoscore_grad(lam: np.ndarray, d: int) -> tuple[float, np.ndarray] | None:
    from spectra_cli.analysis.isotropy import isoscore

    full = np.zeros(d)
    full[: lam.size] = lam
    value = isoscore(full, d)
    if value is None:
        return None
    # analytic: IsoScore = ((d - delta^2 (d - sqrt d))^2 - d) / (d (d - 1)), delta^2 = |s - 1|^2 / (2 (d - sqrt d)),
    # s = sqrt(d) sigma / |sigma|: |s - 1|^2 = 2 d - 2 sqrt(d) sum(sigma) / |sigma|
    norm = float(np.linalg.norm(full))
    total = float(full.sum())
    r = total / norm  # d |s - 1|^2 / d sigma = -2 sqrt(d) d r
    dr = 1.0 / norm - total * full / norm**3
    rd = math.sqrt(d)
    delta2 = (2 * d - 2 * rd * r) / (2 * (d - rd))
    inner = d - delta2 * (d - rd)
    d_delta2 = -2 * rd * dr / (2 * (d - rd))
    grad = 2 * inner * (-(d - rd) * d_delta2) / (d * (d - 1))
    return value, grad[: lam.size]


def isotropy_gradients(lam: np.ndarray, *, d: int, isoscore: bool) -> dict[str, np.ndarray | None]:
    """The gradients of the top-PC share and (when asked for) IsoScore."""
    lam = np.clip(np.asarray(lam, dtype=np.float64), 0.0, None)
    if not lam.size or not lam[0] > 0:
        return {"top_pc_share": None, **({"isoscore": None} if isoscore else {})}
    u = lam / lam[0]
    out: dict[str, np.ndarray | None] = {"top_pc_share": _top_share_grad(u)[1] / lam[0]}
    if isoscore:
        got = _isoscore_grad(u, d)
        out["isoscore"] = got[1] / lam[0] if got is not None else None
    return out


def first_order_error(lam: np.ndarray, grad: np.ndarray | None, model: RowModel) -> float | None:
    """The first-order standard error of a metric of gradient ``grad`` in the eigenvalues ``lam``."""
    if grad is None:
        return None
    gl = grad * np.clip(np.asarray(lam, dtype=np.float64), 0.0, None)[: grad.size]
    var = model.variance(np.ones_like(gl), gl)
    return math.sqrt(var) if math.isfinite(var) and var >= 0 else None


def alpha_gradient(eigenvalues: np.ndarray, fit: Any) -> np.ndarray | None:
    """The gradient of a rank fit's alpha in the eigenvalues (zero outside its window): every model but the broken
    law is linear in ``log lambda`` (a weighted least squares, on interpolated log-spaced points for
    ``logspaced``), so its gradient in ``log lambda_j`` is a row of the least-squares solution, mapped back through
    the interpolation, divided by ``lambda_j``; None for the broken law (its crossover is searched)."""
    from spectra_cli.analysis.powerlaw import fit_points

    if fit.model == "broken":
        return None
    window = fit.window
    ranks = np.arange(window.k_min, window.k_max + 1, dtype=np.float64)
    j, _, w = fit_points(eigenvalues, window, fit.method)
    k, m = ranks.size, j.size
    if fit.method == "logspaced":  # ys = P y: linear interpolation in log rank
        lr, xs = np.log(ranks), np.log(j)
        idx = np.clip(np.searchsorted(lr, xs), 1, max(k - 1, 1))
        span = np.where(lr[idx] > lr[idx - 1], lr[idx] - lr[idx - 1], 1.0)
        t = np.clip((xs - lr[idx - 1]) / span, 0.0, 1.0)
        P = np.zeros((m, k))
        P[np.arange(m), idx - 1] += 1.0 - t
        P[np.arange(m), idx] += t
    else:
        P = np.eye(k)
    x = np.log(j)
    u = (fit.degree - 1) * np.log(np.log(j + 1.0)) - x if fit.model == "log-corrected" else x
    A = np.column_stack([np.ones(m), u])
    try:
        r = np.linalg.solve((A * w[:, None]).T @ A, (A * w[:, None]).T)[1]
    except np.linalg.LinAlgError:
        return None
    gl = P.T @ r  # d alpha / d log lambda_j (the sign does not enter a variance)
    lam = np.asarray(eigenvalues, dtype=np.float64)[window.k_min - 1:window.k_max]
    if lam.size != k or not np.all(lam > 0):
        return None
    grad = np.zeros(window.k_max)
    grad[window.k_min - 1:] = gl / lam
    return grad


GROUPED_METHOD = ("the spread between contiguous row groups of each metric's linearisation through the eigenvectors "
                  "(a grouped jackknife, or batch means: t_g = sum_j g_j v_j^T S_g v_j, S_g group g's rows about the "
                  "whole mean, Var f = G / (G - 1) sum_g w_g^2 (t_g - t)^2, w_g the group's share of the rows: the "
                  "cluster-robust variance), honest under any row law and under dependence that stays within a group; "
                  "adjacent groups are merged in pairs while the total variance's, a rank's or the top-PC share's "
                  "values correlate between neighbours (lag-1 autocorrelation over 1 / sqrt G: batches long enough "
                  "for the rows' dependence), down to 8; the top-PC share and the stable rank (functions of the top "
                  "eigenvalue and the trace) from a delete-a-group jackknife over the same groups instead, the top "
                  "eigenvalue of each group's complement by Rayleigh-Ritz in the leading 8 eigenvectors (near-equal "
                  "top eigenvalues make the linearisation through one of them overstate); "
                  "intervals and tests take t quantiles with G - 1 degrees of freedom")
#: Up to this width the grouped errors read every eigenvector (one float32 decomposition with vectors); past it the
#: leading ones only (a partial decomposition: at d = 4,096 a full one took twice the spectrum's own).
ALL_VECTORS_D = 2048
#: The leading directions whose group projections are read once (a metric of every eigenvalue beyond its a + b lambda
#: part, such as the stable rank's top eigenvalue, reads them; a window's alpha reads its own).
HEAD = 8
#: Rows of a matrix :meth:`GroupSpread.inner` reads at a time (a slab of its lower triangle: at d = 4,096 up to 8 MB;
#: the errors in slabs against the whole matrix at once, in process: 20.0 against 20.9 ms at d = 384, 163 against
#: 180 ms at d = 1,024).
SLAB_ROWS = 256
#: Adjacent groups are merged while a metric's lag-1 autocorrelation over them exceeds this over sqrt(G) (one null
#: standard deviation: merging when independent costs a few degrees of freedom; missing dependence, honesty).
LAG_LIMIT = 1.0
#: Fewer groups than this give no grouped standard error (too few degrees of freedom): the first-order route is taken.
MIN_GROUPS = 8
#: From this width the eigenvectors the grouped errors read are computed in float32 (an error needs no more digits;
#: half the time of a float64 decomposition).
SINGLE_FROM_D = 256


@dataclass(frozen=True, slots=True)
class GroupSpread:
    """The row groups read through the eigenvectors: ``A_g``, group ``g``'s rows as a covariance about the whole
    mean, calibrated so that ``sum_g w_g A_g = S`` (``w_g``: the group's share of the weight), seen only through
    inner products ``<A_g, M>``. ``lam`` and ``V``: the eigenvalues (descending) and eigenvectors of ``S``
    (``V`` None until a metric needs a direction other than the top one)."""

    w: np.ndarray
    W: np.ndarray
    m2: tuple[np.ndarray, ...]
    r2: np.ndarray
    u: np.ndarray
    c: float
    #: the pooled covariance in units of the top eigenvalue where it was decomposed here (else None: the spectrum's
    #: own reduction gave the eigenvectors)
    S: np.ndarray | None
    lam: np.ndarray
    V: np.ndarray
    #: the unit of ``lam``, ``S`` and ``A_g`` (the top eigenvalue: data near 1e150 stays finite)
    unit: float = 1.0
    #: ``tr A_g``, ``<A_g, S>`` and ``v_j^T A_g v_j`` for the leading :data:`HEAD` directions, read once
    tr: np.ndarray = field(default_factory=lambda: np.zeros(0))
    with_S: np.ndarray = field(default_factory=lambda: np.zeros(0))
    head: np.ndarray = field(default_factory=lambda: np.zeros((0, 0)))
    #: ``V_k^T A_g V_k`` for the leading :data:`HEAD` directions, ``(G, k, k)`` (``head`` is its diagonal)
    head_block: np.ndarray = field(default_factory=lambda: np.zeros((0, 0, 0)))
    #: how many times adjacent groups are merged in pairs before their spread is read (:meth:`settled`)
    depth: int = 0

    @property
    def groups(self) -> int:
        """The groups whose spread is read (the pass's, merged ``depth`` times in adjacent pairs)."""
        return -(-int(self.w.size) >> self.depth)

    @property
    def dof(self) -> int:
        return self.groups - 1

    def inner(self, rows: Callable[[int, int], np.ndarray], cross: np.ndarray) -> np.ndarray:
        """``<A_g, M>`` for every group, ``M`` symmetric ``d x d``, given a slab of its lower triangle at a time,
        ``rows(a, b) = M[a:b, :b]`` (the diagonal block whole), and ``cross = u_g^T M u_g``: each group's matrix is
        read in its lower half (``<m, M> = 2 <m, M>`` below the diagonal blocks ``+ <m, M>`` on them, ``m``
        symmetric), ``M`` made a slab at a time if at all (at d = 4,096 a whole d x d product and its pages, and the
        reads of both halves, took twice as long)."""
        d = self.u.shape[1]
        own = np.zeros(len(self.m2))
        for a in range(0, d, SLAB_ROWS):
            b = min(a + SLAB_ROWS, d)
            slab = rows(a, b)
            # (einsum reads a group's matrix where it lies; vdot would copy one that is a view into a wider slot)
            own += [2.0 * float(np.einsum("ij,ij->", m[a:b, :a], slab[:, :a]))
                    + float(np.einsum("ij,ij->", m[a:b, a:b], slab[:, a:b])) for m in self.m2]
        return self.c * (self.r2 * own + cross / self.W) / self.W

    def inner_matrix(self, M: np.ndarray) -> np.ndarray:
        """``<A_g, M>`` for every group, ``M`` symmetric ``d x d`` (:meth:`inner` reading its lower triangle)."""
        return self.inner(lambda a, b: M[a:b, :b], ((self.u @ M) * self.u).sum(axis=1))

    def quad(self, v: np.ndarray) -> np.ndarray:
        """``v^T A_g v`` for every group and every column of ``v`` (``d x k``): ``(G, k)``."""
        own = np.stack([((m @ v) * v).sum(axis=0) for m in self.m2])
        cross = (self.u @ v) ** 2
        return self.c * (self.r2[:, None] * own + cross / self.W[:, None]) / self.W[:, None]

    def block(self, v: np.ndarray) -> np.ndarray:
        """``v^T A_g v`` for every group, ``(G, k, k)`` (:meth:`quad` is its diagonal)."""
        own = np.stack([v.T @ (m @ v) for m in self.m2])
        cu = self.u @ v
        return self.c * (self.r2[:, None, None] * own + cu[:, :, None] * cu[:, None, :] / self.W[:, None, None]) \
            / self.W[:, None, None]

    def top_jackknife(self, fn: Callable[[Any, Any], Any]) -> float | None:
        """The grouped variance of a metric of the top eigenvalue and the trace, ``fn(lambda_1, tr)`` (the top-PC
        share, the stable rank), from a delete-a-group jackknife over the settled groups (Efron 1981; Cameron &
        Miller 2015): each group left out in turn, the top eigenvalue of the rest by Rayleigh-Ritz in the leading
        :data:`HEAD` eigenvectors (when the top two are close, one text with a direction of its own turns the top
        eigenvector, which the linearisation through it reads as twice the change), the trace exactly. The
        pseudo-values ``theta + (1 - w_g) / w_g (theta - theta_(-g))`` go through the same cluster-robust formula
        (for a metric linear in the covariance they are its linearised values). None without the leading block."""
        if self.head_block.shape[0] != self.w.size or not self.head_block.size:
            return None
        lab = np.arange(self.w.size) >> self.depth
        w = np.bincount(lab, self.w)
        P = np.stack([np.tensordot(self.w[lab == j], self.head_block[lab == j], 1) / w[j] for j in range(w.size)])
        tr = np.bincount(lab, self.w * self.traces()) / w
        k = P.shape[1]
        L, T = np.diag(self.lam[:k]), float(self.lam.sum())
        if np.any(w >= 1.0):
            return None
        top = np.array([np.linalg.eigvalsh((L - s * Pg) / (1.0 - s))[-1] for s, Pg in zip(w, P, strict=True)])
        theta = float(fn(float(self.lam[0]), T))
        t = theta + (1.0 - w) / w * (theta - fn(top, (T - w * tr) / (1.0 - w)))
        G = w.size
        dev = t - float(w @ t)
        var = G / (G - 1) * float(np.dot(w * w, dev * dev))
        return var if math.isfinite(var) and var >= 0 else None

    def traces(self) -> np.ndarray:
        """``tr A_g`` for every group."""
        if self.tr.size:
            return self.tr
        own = np.array([float(np.trace(m)) for m in self.m2])
        return self.c * (self.r2 * own + (self.u * self.u).sum(axis=1) / self.W) / self.W

    def variance(self, t: np.ndarray) -> float:
        """The grouped (cluster-robust) variance of ``sum_g w_g t_g`` (over the groups merged ``depth`` times)."""
        w, t = merged(self.w, t, self.depth)
        G = w.size
        dev = t - float(w @ t)
        return G / (G - 1) * float(np.dot(w * w, dev * dev))

    def settled(self, ts: list[np.ndarray]) -> GroupSpread:
        """The spread read over groups long enough for the rows' dependence (batch means): while any metric's
        linearised values ``ts`` correlate between adjacent groups (lag-1 autocorrelation over :data:`LAG_LIMIT`
        ``/ sqrt(G)``, one standard deviation of what independent groups give), adjacent groups are merged in pairs,
        down to :data:`MIN_GROUPS`. Tokens of one text split between two groups make their values alike; merged, the
        text lies within one group and its dependence is counted."""
        depth = 0
        while True:
            G = -(-int(self.w.size) >> depth)
            if G // 2 < MIN_GROUPS:
                break
            worst = max((lag_correlation(*merged(self.w, t, depth)) for t in ts), default=0.0)
            if not worst > LAG_LIMIT / math.sqrt(G):
                break
            depth += 1
        return replace(self, depth=depth)

    def linearised(self, grad: np.ndarray) -> np.ndarray | None:
        """``t_g = sum_j g_j v_j^T A_g v_j`` for a gradient over the eigenvalues (descending, ``lam``'s order):
        ``a + b lambda`` parts through ``tr A_g`` and ``<A_g, S>`` (no eigenvector), the rest through the
        eigenvectors it is not zero on (the top one, a window's, or every one)."""
        g = np.zeros(self.lam.size)
        g[: grad.size] = grad[: self.lam.size] * self.unit  # (the eigenvalues here are in units of the top one)
        support = np.flatnonzero(g)
        t = np.zeros(self.w.size)
        head = HEAD
        if support.size > self.lam.size // 2 and self.lam.size > 2 * head:
            # a function of every eigenvalue: an exact a + b lambda part below the leading few (the participation
            # ratio and IsoScore are that, the stable rank and the top share a constant and the top one) costs no
            # eigenvector; whatever is left is read through the eigenvectors it is not zero on
            top = max(float(self.lam[0]), 1e-300)
            X = np.column_stack([np.ones(self.lam.size - head), self.lam[head:] / top])
            coef, *_ = np.linalg.lstsq(X, g[head:], rcond=None)
            rest = g - coef[0] - coef[1] * self.lam / top
            scale = float(np.max(np.abs(g))) or 1.0
            if float(np.max(np.abs(rest[head:]))) <= 1e-9 * scale:
                rest[head:] = 0.0
                t = float(coef[0]) * self.traces() + float(coef[1]) / top * self.with_S
                g = rest
                support = np.flatnonzero(g)
        if support.size == 0:
            return t
        if support[-1] < self.head.shape[1]:
            return t + self.head[:, support] @ g[support]
        if support[-1] >= self.V.shape[1]:
            return None  # (a direction past the leading ones computed: see group_spread's ``leading``)
        from spectra_cli import threads

        Vs = self.V[:, support]
        Vg = Vs * g[support]
        d = self.V.shape[0]
        # M = Vs diag(g) Vs^T a slab of its lower triangle at a time (never d x d whole: see inner), its products on
        # the cores the policy gives the whole product (u^T M u = sum_j g_j (u . v_j)^2)
        with threads.blas(float(d) * d * support.size):
            return t + self.inner(lambda a, b: Vg[a:b] @ Vs[:b].T, ((self.u @ Vs) ** 2) @ g[support])


def merged(w: np.ndarray, t: np.ndarray, depth: int) -> tuple[np.ndarray, np.ndarray]:
    """Groups' shares ``w`` and values ``t`` with adjacent groups merged in pairs ``depth`` times: runs of
    ``2^depth`` groups, each at its parts' mean weighted by their shares (the atoms of
    :func:`spectra_cli.analysis.equivalent.merged`), a shorter run last."""
    if not depth:
        return w, t
    values, shares = atoms(t, w, np.arange(w.size) >> depth)
    return shares, values


def lag_correlation(w: np.ndarray, t: np.ndarray) -> float:
    """The lag-1 autocorrelation of groups' values about their weighted mean (0 for a constant)."""
    dev = t - float(w @ t) / float(w.sum())
    total = float(np.dot(dev, dev))
    return float(np.dot(dev[:-1], dev[1:])) / total if total > 0 and math.isfinite(total) else 0.0


def group_spread(groups: Any, lam: np.ndarray, *, centered: bool, leading: int = 0,
                 pooled: Any = None, reduction: Any = None) -> GroupSpread | None:
    """The groups of a pass (:class:`~spectra_cli.stream.moments.Moments`, contiguous runs of rows) ready for
    :meth:`GroupSpread.linearised`, with the eigenvectors of their pooled covariance: every one up to
    :data:`ALL_VECTORS_D` features; past it only the ``leading`` ones (the windows' and the top; a metric that needs
    more, the entropy rank, then has no grouped value: a full decomposition with vectors costs twice the spectrum's
    own). ``pooled``: the pass's moments of every row, whose scatter is the groups' pooled one (read in place of
    summing the groups' matrices again where their units agree: centred, one scale, the same weight). ``reduction``:
    the spectrum's own tridiagonal reduction (:class:`~spectra_cli.eigen.tridiagonal.Reduction`, of a matrix
    proportional to the pooled one), whose leading eigenvectors then come without a second decomposition. None with
    fewer than :data:`MIN_GROUPS` groups of rows."""
    from spectra_cli.analysis.bootstrap import group_sums

    filled = [g for g in groups if g.weight_sum > 0]
    if len(filled) < MIN_GROUPS or not lam.size or not lam[0] > 0:
        return None
    sums = group_sums(filled)
    u = sums.S1 if centered else sums.S1 + sums.W[:, None] * sums.shift[None, :]
    Wt = float(sums.W.sum())
    d = u.shape[1]
    if (centered and pooled is not None and pooled.m2.shape == (d, d) and pooled.scale == sums.scale
            and bool(np.all(sums.r2 == 1.0)) and math.isclose(pooled.weight_sum, Wt, rel_tol=1e-12)):
        T = pooled.m2  # (read only: the groups' scatter about the whole mean, summed, is this matrix to rounding)
    else:
        T = np.zeros((d, d))
        for m, r in zip(sums.m2, sums.r2, strict=True):
            T += r * m
        T += (u / sums.W[:, None]).T @ u
    total = float(np.trace(T))
    if not (total > 0 and math.isfinite(total)):
        return None
    unit = float(lam[0])
    lam = np.asarray(lam, dtype=np.float64) / unit
    c = float(np.sum(lam)) / (total / Wt)  # the spectrum's normalisation (ddof, weights, the moments' scale)
    if not (math.isfinite(c) and math.isfinite(total * (c / Wt))):
        return None
    S = None  # (S = T c / Wt: made only for a decomposition here)
    from spectra_cli import threads

    with threads.blas(9.0 * float(d) ** 3, threads.SMALL_EIGEN_FLOPS):  # (the policy's threads: one for a small one)
        k = min(d, max(leading, HEAD))
        kept = reduction.leading(k) if d > ALL_VECTORS_D and reduction is not None and reduction.order == d else None
        if kept is not None:
            V = kept[1][:, ::-1]  # (ascending, as below; the spectrum's own reduction: no second decomposition)
        else:
            S = T * (c / Wt)
            if not np.all(np.isfinite(S)):
                return None
            if d > ALL_VECTORS_D:
                import scipy.linalg

                w, V = scipy.linalg.eigh(S.astype(np.float32), subset_by_index=[d - k, d - 1], driver="evr",
                                         check_finite=False, overwrite_a=True)
                V = V.astype(np.float64)
            elif d >= SINGLE_FROM_D:
                from spectra_cli.eigen.lapacke import eigh_float32

                found = eigh_float32(S)  # (LAPACK's ssyevd itself: NumPy's float32 eigh takes a float64 one's time)
                if found is None:
                    w, V = np.linalg.eigh(S.astype(np.float32))
                    w, V = w.astype(np.float64), V.astype(np.float64)
                else:
                    w, V = found
            else:
                w, V = np.linalg.eigh(S)
    V = V[:, ::-1][:, : lam.size]
    spread = GroupSpread(sums.W / Wt, sums.W, sums.m2, sums.r2, u, c, S, lam, V, unit)
    with np.errstate(over="ignore", invalid="ignore"):
        block = spread.block(V[:, :HEAD])
        return replace(spread, tr=spread.traces(), with_S=spread.inner_matrix(T) * (c / Wt),
                       head=np.einsum("gii->gi", block).copy(), head_block=block)


#: The metrics that are functions of the top eigenvalue and the trace alone, ``fn(lambda_1, tr)``: their grouped
#: errors come from the delete-a-group jackknife (:meth:`GroupSpread.top_jackknife`), not the linearisation.
TOP_METRICS: dict[str, Callable[[Any, Any], Any]] = {**TOP_FUNCTIONS, "top_pc_share": lambda top, total: top / total}


def grouped_error(spread: GroupSpread, values: np.ndarray) -> float | None:
    """The grouped standard error of a metric of the eigenvalues from its groups' linearised values
    (:meth:`GroupSpread.linearised` of its gradient)."""
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        var = spread.variance(values)
    return math.sqrt(var) if math.isfinite(var) and var >= 0 else None


def design_effect(spread: GroupSpread, norms: Any, n_rows: int) -> float | None:
    """How many times more the total variance ``tr S`` varies between the row groups than independent rows
    would make it vary: the grouped variance of ``tr S`` over ``Var |y - mean|^2 / n``, the variance of the rows'
    squared norms read from their histogram (what independent rows of exactly these norms give, whatever their
    law). About 1 for independent rows; the effective rows are ``n`` divided by it. None without a histogram (and
    for uncentred moments: the histogram's norms are about the mean). Scale-free: the norms in units of their
    largest, the traces in the top eigenvalue's."""
    if norms is None or not getattr(norms, "rows", 0) or n_rows < 2:
        return None
    values, counts = norms.values()
    total = float(counts.sum())
    top = float(values.max()) if values.size else 0.0
    if not (total > 0 and top > 0 and math.isfinite(top)):
        return None
    p, v = counts / total, values / top
    mean = float(p @ v)
    var_h = float(p @ (v * v)) - mean * mean  # (in units of top^2)
    if not (var_h > 0 and math.isfinite(var_h)):
        return None
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        between = spread.variance(spread.traces())  # (in units of the top eigenvalue's square)
        ratio = between / (var_h / n_rows) * (spread.unit / top) ** 2
    return ratio if math.isfinite(ratio) else None


def dependence_limit(groups: int) -> float:
    """The design effect above which rows are said to look dependent: the 99.9 % point of what ``groups``
    independent groups give (a chi-square of ``groups - 1`` degrees of freedom over them), and at least 2."""
    k = groups - 1  # (Wilson and Hilferty's cube-root normal approximation of the chi-square quantile: within 1 %)
    z = 3.0902323061678132  # the standard normal's 99.9 % point
    return max(2.0, (1.0 - 2.0 / (9.0 * k) + z * math.sqrt(2.0 / (9.0 * k))) ** 3)
