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

from spectra_cli import registry

DEFAULT_ALPHA_RANGE = (2.0, 6.0)
VERDICTS = ("over-trained", "ok", "under-trained")

#: The WeightWatcher release whose rules ``convention="weightwatcher"`` follows (constants.py of 0.7.7).
WW_VERSION = "0.7.7"
#: A layer with fewer eigenvalues than this is skipped (constants.py ``DEFAULT_MIN_EVALS``; 10 before 0.7.7).
WW_MIN_EVALS = 8
#: ... or with more (``DEFAULT_MAX_EVALS``), or whose larger side exceeds ``DEFAULT_MAX_N``.
WW_MAX_EVALS = 15000
WW_MAX_N = 50000
#: Eigenvalues of ``W^T W`` at or below this are left out of the power-law fit (``EVALS_THRESH``).
WW_EVALS_THRESH = 1e-5
#: weightwatcher.py ``matrix_entropy``'s epsilon (RMT_Util ``EPSILON``).
WW_EPSILON = 1e-10


#: WeightWatcher 0.7.7's analyze() columns, by its names and in its order (a DataFrame a WeightWatcher user reads).
ANALYZE_COLUMNS = (
    "layer_id", "name", "longname", "N", "M", "Q", "alpha", "alpha_weighted", "log_norm", "log_spectral_norm",
    "log_alpha_norm", "stable_rank", "xmin", "xmax", "D", "sigma", "num_pl_spikes", "num_evals", "lambda_max",
    "spectral_norm", "norm", "sv_max", "sv_min", "matrix_rank", "rank_loss", "weak_rank_loss", "entropy", "warning",
    "num_spikes", "sigma_mp", "mp_softrank", "bulk_max", "bulk_min", "W_scale",
)
#: The columns spectra adds to WeightWatcher's in its convention's rows: a convolution's receptive field, AlphaPruning's
#: layer alpha and its xmin, and the law the density fit's tail prefers (:mod:`spectra_cli.analysis.tails`).
EXTRA_COLUMNS = ("rf", "alpha_hill", "xmin_hill", "tail_law")
#: The columns its get_summary() averages (the model-level summary), in its order.
SUMMARY_COLUMNS = ("log_norm", "alpha", "alpha_weighted", "log_alpha_norm", "log_spectral_norm", "stable_rank",
                   "mp_softrank")
#: The columns a batch's table shows in its convention (a terminal's width of them).
TABLE_COLUMNS = ("alpha", "alpha_weighted", "log_norm", "log_spectral_norm", "stable_rank", "num_spikes",
                 "mp_softrank")

def ww_skip(shape: list[int] | tuple[int, ...]) -> str | None:
    """Why WeightWatcher's ``analyze()`` skips a 2-D weight of this shape (``layer_supported``:
    ``M < min_evals``, ``M > max_evals``, ``N > max_N``; ``N, M`` its larger and smaller side), or None."""
    if len(shape) != 2:
        return f"shape {list(shape)} is not a matrix"
    big, small = max(shape), min(shape)
    if small < WW_MIN_EVALS:
        return f"{small} eigenvalues; WeightWatcher needs at least {WW_MIN_EVALS} (its min_evals)"
    if small > WW_MAX_EVALS:
        return f"{small} eigenvalues; WeightWatcher takes at most {WW_MAX_EVALS} (its max_evals)"
    if big > WW_MAX_N:
        return f"its larger side is {big}; WeightWatcher takes at most {WW_MAX_N} (its max_N)"
    return None


#: WeightWatcher scales each slice of a Conv2D kernel by this before its SVD (``conv2d_norm``, on by default: every
#: eigenvalue of a convolution halved).
WW_CONV2D_NORM = math.sqrt(0.5)


def conv2d_labels(shape: tuple[int, ...]) -> tuple[int, int, int, bool]:
    """WeightWatcher 0.7.7's labels ``N``, ``M``, the receptive field ``rf = kh kw`` and whether the kernel is channels
    last (PyTorch's ``out x in x kh x kw``, told by ``out + in >= kh + kw``; else ``kh x kw x in x out``), as its
    ``WWLayer.conv2D_Wmats`` sets them: it swaps ``N`` and ``M`` at every slice it transposes to be tall, so with fewer
    output than input channels and an even ``rf`` they come back unswapped (``Q < 1``)."""
    a, b, c, d = (int(x) for x in shape)
    last = a + b >= c + d
    n, m, rf, wide = (a, b, c * d, a < b) if last else (d, c, a * b, d < c)
    if wide and rf % 2:
        n, m = m, n
    return n, m, rf, last


def conv2d_slices(kernel: np.ndarray) -> list[np.ndarray]:
    """WeightWatcher's matrices of a 4-D kernel: the ``rf`` slices ``W[:, :, i, j]`` (channels last) or ``W[i, j]``
    (channels first), each transposed to be tall (:func:`conv2d_labels`)."""
    _, _, _, last = conv2d_labels(kernel.shape)
    a, b, c, d = kernel.shape
    slices = [kernel[:, :, i, j] for i in range(c) for j in range(d)] if last else \
        [kernel[i, j] for i in range(a) for j in range(b)]
    return [w.T if w.shape[0] < w.shape[1] else w for w in slices]


def conv2d_singular_values(kernel: np.ndarray) -> list[np.ndarray]:
    """The singular values of every slice of a 4-D kernel (:func:`conv2d_slices`) scaled by :data:`WW_CONV2D_NORM`,
    each slice's descending (LAPACK's SVD, as WeightWatcher computes them)."""
    kernel = np.asarray(kernel, dtype=np.float64)
    return [np.linalg.svd(w * WW_CONV2D_NORM, compute_uv=False) for w in conv2d_slices(kernel)]


def conv2d_esd(kernel: np.ndarray, each: list[np.ndarray] | None = None) -> tuple[np.ndarray, int, int, int, float]:
    """WeightWatcher's ESD of a convolution (``combined_eigenvalues``): the squared singular values of every slice
    (:func:`conv2d_slices`) scaled by :data:`WW_CONV2D_NORM`, concatenated (``rf min(out, in)`` of them), largest
    first; with its labels ``N``, ``M``, ``rf`` and its ``sv_min``, which 0.7.7 takes as the largest of the slices'
    smallest singular values (``np.max`` where the name says min). ``each``: the slices' singular values where
    already computed (:func:`conv2d_singular_values`)."""
    n, m, rf, _ = conv2d_labels(np.shape(kernel))
    each = conv2d_singular_values(kernel) if each is None else each
    sv = np.concatenate(each)
    return np.sort(sv * sv)[::-1], n, m, rf, float(max(float(x.min()) for x in each))


def conv2d_rank_loss(kernel: np.ndarray, each: list[np.ndarray] | None = None) -> int:
    """WeightWatcher's ``rank_loss`` of a convolution: the sum over its slices of each slice's singular values at or
    below ``max(sv) N eps`` (``calc_rank_loss`` per slice, ``N`` its label). ``each``: as :func:`conv2d_esd`'s."""
    n, _, _, _ = conv2d_labels(np.shape(kernel))
    eps = float(np.finfo(np.float64).eps)
    each = conv2d_singular_values(kernel) if each is None else each
    return sum(int(np.count_nonzero(sv <= sv.max() * n * eps)) if sv.size else 0 for sv in each)


def ww_conv_skip(shape: list[int] | tuple[int, ...]) -> str | None:
    """Why WeightWatcher's ``analyze()`` skips a 4-D kernel of this shape (``layer_supported`` with its labels:
    ``M rf < min_evals``, ``M rf > max_evals``, ``N > max_N``; a first axis below 2 is no layer), or None."""
    if len(shape) != 4:
        return f"shape {list(shape)} is not a 4-D convolution kernel"
    if shape[0] < 2:
        return f"shape {list(shape)}: WeightWatcher reads no layer from a first axis below 2"
    n, m, rf, _ = conv2d_labels(tuple(shape))
    if m * rf < WW_MIN_EVALS:
        return f"{m * rf} eigenvalues; WeightWatcher needs at least {WW_MIN_EVALS} (its min_evals)"
    if m * rf > WW_MAX_EVALS:
        return f"{m * rf} eigenvalues; WeightWatcher takes at most {WW_MAX_EVALS} (its max_evals)"
    if n > WW_MAX_N:
        return f"its N is {n}; WeightWatcher takes at most {WW_MAX_N} (its max_N)"
    return None


def linear_kde(data: np.ndarray, x: np.ndarray, bandwidth: float) -> np.ndarray:
    """The density of scikit-learn's ``KernelDensity(kernel="linear", bandwidth=h)`` at ``x``:
    ``(1/n) sum_i max(0, 1 - |x - x_i| / h) / h`` (exact: no tree approximation)."""
    data = np.sort(np.asarray(data, dtype=np.float64))
    out = np.zeros(x.size)
    for i in range(0, x.size, 128):  # only the points within h of each x contribute
        xs = x[i:i + 128]
        lo = np.searchsorted(data, xs.min() - bandwidth, side="left")
        hi = np.searchsorted(data, xs.max() + bandwidth, side="right")
        d = np.abs(xs[:, None] - data[None, lo:hi]) / bandwidth
        out[i:i + 128] = np.clip(1.0 - d, 0.0, None).sum(axis=1)
    return out / (data.size * bandwidth)


@dataclass(frozen=True, slots=True)
class MPFit:
    """WeightWatcher's Marchenko-Pastur fit of one layer (``mp_fit=True``): the eigenvalues rescaled to
    mean 1, sigma fitted to their kernel density, the bulk edge with a Tracy-Widom margin."""

    sigma: float
    bulk_max: float  # in the eigenvalues' own units
    bulk_min: float
    num_spikes: int
    mp_softrank: float
    w_scale: float


def mp_fit(evals: np.ndarray, n: int, m: int) -> MPFit | None:
    """WeightWatcher's ``mp_fit`` (weightwatcher.py 0.7.7 ``WeightWatcher.mp_fit``, RMT_Util
    ``fit_density_with_range`` and ``resid_mp``), for the ``m`` eigenvalues of ``W^T W`` of an ``n x m``
    matrix (``n >= m``): rescaled by ``W_scale^2 = m / sum lambda``; sigma by ``scipy.optimize.brute`` over
    ``[0.05, 2) x sigma_0`` in steps of ``0.01 sigma_0`` (``sigma_0 = sqrt(lambda_max) / (1 + Q^-1/2)``),
    polished by ``fmin``, minimising the squared gap between the MP density (the quarter circle of the
    singular values when ``Q = 1``) and a linear-kernel density (bandwidth 0.1) on 1,000 points, where the
    density exceeds 0.01; ``bulk_max = (sigma (1 + Q^-1/2))^2``, spikes above ``bulk_max +
    sqrt(Q^-1/2 bulk_max^(2/3) m^(-2/3))``, ``mp_softrank = bulk_max / lambda_max``. None when the
    eigenvalues sum to 0."""
    from scipy import optimize

    evals = np.asarray(evals, dtype=np.float64)
    if evals.ndim != 1 or evals.size < 2 or n < 1 or m < 1 or not np.all(np.isfinite(evals)):
        return None
    top = float(evals.max())
    if not top > 0:
        return None
    rel = evals / top  # the fit is scale-free: rescaled to mean 1 from eigenvalues scaled to lambda_max = 1
    rel_total = float(rel.sum())
    q = n / m
    to_plot = rel * (evals.size / rel_total)
    with np.errstate(all="ignore"):
        total = top * rel_total  # (inf past float64: the units below are then null, the fit itself still holds)
        w_scale = math.sqrt(evals.size / total) if math.isfinite(total) and total > 0 else 0.0
    lam_max = float(to_plot.max())
    sigma0 = math.sqrt(lam_max / (1.0 + 1.0 / math.sqrt(q)) ** 2)
    to_fit = np.sqrt(np.clip(to_plot, 0.0, None)) if q == 1 else to_plot
    xde = np.linspace(0.0, float(to_fit.max()) + 0.5, 1000)
    yde = linear_kde(to_fit, xde, 0.1)
    good = yde > 0.01
    bad = int(np.count_nonzero(yde < 0.01))
    xg, yg = xde[good], yde[good]
    peak = float(xg[np.argmax(yg)]) if xg.size else 0.0

    def resid(p: Any) -> float:
        sigma = float(np.ravel(p)[0])
        with np.errstate(all="ignore"):
            if q == 1:
                ymp = np.nan_to_num((1 / (np.pi * sigma * sigma)) * np.sqrt(4 - xg ** 2))
            else:
                y = 1 / q
                b = (sigma * (1 + math.sqrt(1 / q))) ** 2
                a = (sigma * (1 - math.sqrt(1 / q))) ** 2
                if b < peak or b > float(xg.max()) or a > peak:
                    return float(1000.0 ** 2 * yg.size)
                ymp = np.nan_to_num((1 / (2 * np.pi * sigma * sigma * xg * y)) * np.sqrt((b - xg) * (xg - a)))
        r = ymp - yg
        return float(np.sum(r * r)) + 0.0 * bad

    if not xg.size:
        return None
    grid = (slice(0.05 * sigma0, 2.0 * sigma0, 0.01 * sigma0),)
    with np.errstate(all="ignore"):
        s1 = float(np.ravel(optimize.brute(resid, grid, full_output=False, disp=False))[0])
    bulk_max = (s1 * (1 + 1 / math.sqrt(q))) ** 2
    bulk_min = (s1 * (1 - 1 / math.sqrt(q))) ** 2
    tw = 1 / math.sqrt(q) * bulk_max ** (2 / 3) * m ** (-2 / 3)
    spikes = int(np.count_nonzero(to_plot > bulk_max + math.sqrt(tw)))
    unit = top * rel_total / evals.size  # 1 / W_scale^2, without forming W_scale^2
    with np.errstate(all="ignore"):
        return MPFit(s1, bulk_max * unit, bulk_min * unit, spikes, bulk_max / lam_max, w_scale)


def ww_columns(evals: np.ndarray, *, n: int, m: int, density: Any, alpha_range: tuple[float, float],
               xmin_scale: float = 1.0, resolved: np.ndarray | None = None, labelled: bool = False) -> dict[str, Any]:
    """The columns of WeightWatcher's ``analyze()`` details for one layer, by its names, from the ``m``
    eigenvalues of ``W^T W`` (weightwatcher.py ``apply_esd``, ``apply_powerlaw``, ``apply_norm_metrics``,
    ``mp_fit``; RMT_Util ``matrix_rank``, ``matrix_entropy``, ``calc_rank_loss``). ``labelled``: ``n`` and ``m``
    are WeightWatcher's own labels ``N``, ``M`` (a convolution's, :func:`conv2d_labels`), kept as they are."""
    ev = np.clip(np.asarray(evals, dtype=np.float64), 0.0, None)
    big = n if labelled else max(n, m)
    alpha = density.alpha if density is not None else None
    if not ev.size or not np.all(np.isfinite(ev)):  # past float64's range: nothing WeightWatcher computes
        return {"N": big, "M": m, "Q": big / m if m else None, "num_evals": int(ev.size), "alpha": alpha,
                **{k: None for k in ("xmin", "xmax", "D", "sigma", "num_pl_spikes", "norm", "log_norm",
                                     "spectral_norm", "log_spectral_norm", "alpha_weighted", "log_alpha_norm",
                                     "stable_rank", "lambda_max", "sv_max", "sv_min", "matrix_rank", "rank_loss",
                                     "weak_rank_loss", "entropy", "num_spikes", "sigma_mp", "mp_softrank", "bulk_max",
                                     "bulk_min", "W_scale", "alpha_hill", "xmin_hill")}, "warning": ""}
    sv = np.sqrt(ev)
    lam_max = float(ev.max())
    # rank: singular values above max(sv) N eps (numpy's matrix_rank, as WeightWatcher's), among the eigenvalues
    # above spectra's numerical floor (``resolved``; the square roots of rounding noise in a Gram matrix's
    # eigenvalues would otherwise count: sqrt(d eps) lambda_max is far above (N eps)^2 lambda_max)
    res = ev if resolved is None else np.clip(np.asarray(resolved, dtype=np.float64)[: ev.size], 0.0, None)
    tol = float(sv.max()) * big * float(np.finfo(np.float64).eps)
    rank = int(np.count_nonzero(np.sqrt(res) > tol))
    with np.errstate(all="ignore"):
        total = float(ev.sum())
    entropy = None
    if total > 0 and math.isfinite(total) and rank > 0:
        p = ev / total + WW_EPSILON
        entropy = float(-np.sum(p * np.log(p)) / math.log(rank + WW_EPSILON))
    lan = None
    if alpha is not None and lam_max > 0:  # log10 sum lambda^alpha, from lambda / lambda_max (no overflow)
        lan = math.log10(lam_max) * alpha + math.log10(float(np.sum((ev / lam_max) ** alpha)))
    warning = ""
    if alpha is not None:
        warning = "over-trained" if alpha < alpha_range[0] else "under-trained" if alpha > alpha_range[1] else ""
    mp = mp_fit(ev, big, m)
    from spectra_cli.analysis.tails import alphapruning_alpha

    hill = alphapruning_alpha(res)  # (above spectra's numerical floor: a rank-deficient matrix's rounding is no tail)
    factor = xmin_scale  # the density fit ran on spectra's eigenvalues
    return {
        "N": big, "M": m, "Q": big / m if m else None, "num_evals": int(ev.size),
        "alpha": alpha, "xmin": density.xmin * factor if density is not None else None,
        "xmax": lam_max, "D": density.ks_distance if density is not None else None,
        "sigma": density.stderr if density is not None else None,
        "num_pl_spikes": density.n_tail if density is not None else None,
        "norm": total, "log_norm": math.log10(total) if total > 0 else None,
        "spectral_norm": lam_max, "log_spectral_norm": math.log10(lam_max) if lam_max > 0 else None,
        "alpha_weighted": alpha * math.log10(lam_max) if alpha is not None and lam_max > 0 else None,
        "log_alpha_norm": lan, "stable_rank": total / lam_max if lam_max > 0 else None,
        "lambda_max": lam_max, "sv_max": float(sv.max()) if sv.size else None,
        "sv_min": float(sv.min()) if sv.size else None, "matrix_rank": rank, "rank_loss": int(sv.size - rank),
        "weak_rank_loss": int(np.count_nonzero(ev < 1e-6)), "entropy": entropy, "warning": warning,
        "num_spikes": mp.num_spikes if mp else None, "sigma_mp": mp.sigma if mp else None,
        "mp_softrank": mp.mp_softrank if mp else None, "bulk_max": mp.bulk_max if mp else None,
        "bulk_min": mp.bulk_min if mp else None, "W_scale": mp.w_scale if mp else None,
        "alpha_hill": hill[0] if hill else None, "xmin_hill": hill[1] if hill else None,
    }


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
    #: WeightWatcher's ``analyze()`` columns by its names (:func:`ww_columns`), when computed
    columns: dict[str, Any] | None = None

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
            **({"columns": self.columns} if self.columns is not None else {}),
            "definitions": {
                **registry.definitions("weightwatcher"),
                "columns": f"WeightWatcher {WW_VERSION}'s analyze() columns by its names, from the eigenvalues of "
                "W^T W (num_spikes, sigma_mp, mp_softrank, bulk_max: its MP fit, mp_fit=True; warning: '' when "
                "alpha is in range)",
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
                   density_alpha: float | None, alpha_range: tuple[float, float] = DEFAULT_ALPHA_RANGE,
                   raw: np.ndarray | None = None, density: Any = None,
                   labels: tuple[int, int, int] | None = None,
                   overrides: dict[str, Any] | None = None) -> WeightMetrics:
    """The metrics of one matrix from its resolved eigenvalues (floors set to 0); with ``raw`` (the
    eigenvalues as computed, rounding noise kept, as WeightWatcher's SVD gives them) also WeightWatcher's
    columns by its names. ``labels``: a convolution's ``(N, M, rf)`` as WeightWatcher labels it (its ``rf M``
    eigenvalues are those of every slice; ``n_rows x n_features`` is then the kernel's parameter count);
    ``overrides``: columns WeightWatcher computes from the slices rather than their eigenvalues (``sv_min``)."""
    with np.errstate(over="ignore", invalid="ignore"):  # past float64 (weights near 1e154): inf, JSON null
        lam = np.asarray(resolved, dtype=np.float64) * sum_factor
        total = float(lam.sum())
    top = float(lam.max()) if lam.size else 0.0
    big, small = (labels[0], labels[1]) if labels else (max(n_rows, n_features), min(n_rows, n_features))
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
        stable_rank=total / top if top > 0 and math.isfinite(total) and math.isfinite(top) else None,
        mp_spikes=spikes,
        mp_bulk_edge=edge,
        verdict=verdict(density_alpha, alpha_range),
        alpha_range=alpha_range,
        sum_factor=sum_factor,
        parameters=n_rows * n_features,
        columns={**_columns(raw, lam, big, small, sum_factor, density, alpha_range, labels), **(overrides or {})}
        if raw is not None else None,
    )


def _columns(raw: np.ndarray, resolved_scaled: np.ndarray, big: int, small: int, sum_factor: float, density: Any,
             alpha_range: tuple[float, float], labels: tuple[int, int, int] | None) -> dict[str, Any]:
    count = small * labels[2] if labels else small
    with np.errstate(over="ignore"):
        ev = np.asarray(raw, dtype=np.float64)[:count] * sum_factor
    out = ww_columns(ev, n=big, m=small, density=density, alpha_range=alpha_range, xmin_scale=sum_factor,
                     resolved=np.asarray(resolved_scaled)[:count], labelled=labels is not None)
    if labels:
        out["rf"] = labels[2]
    return out
