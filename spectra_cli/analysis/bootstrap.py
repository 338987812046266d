"""Bootstrap over groups of row blocks, from moments kept during the one streaming pass.

Each group's moments are turned into sums about a common shift (``W``, ``sum w (x - s)``,
``sum w (x - s)(x - s)^T``); a replicate draws the groups with replacement (multinomial
counts), adds the sums, rebuilds the covariance, and refits on the same window. Nothing
is re-read. Cost per replicate: one ``G x d^2`` product and one ``d x d`` eigvalsh.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from spectra_cli.errors import FitError, param
from spectra_cli.moments import Moments


def group_sums(groups: Sequence[Moments]) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, float]:
    """Stacked ``n``, ``W``, ``S1``, ``S2`` of each group about the pooled mean, and the common scale."""
    scale = max(g.scale for g in groups)
    pooled = groups[0]
    for g in groups[1:]:
        pooled = pooled.merge(g)
    r0 = pooled.scale / scale
    origin = None if pooled.origin is None else pooled.origin * r0
    centre = pooled.mean_rel * r0  # the pooled mean relative to `origin`
    shift = pooled.mean * r0
    n = np.array([g.n for g in groups], dtype=np.float64)
    W = np.array([g.weight_sum for g in groups], dtype=np.float64)
    S1 = np.empty((len(groups), pooled.d))
    S2 = np.empty((len(groups), pooled.d * pooled.d))
    for i, g in enumerate(groups):
        r = g.scale / scale
        delta = g.relative_mean(origin, scale) - centre  # through the origins: no large cancellation
        S1[i] = g.weight_sum * delta
        S2[i] = (g.m2 * (r * r) + np.outer(delta, delta * g.weight_sum)).ravel()
    return n, W, S1, S2, shift, scale


def bootstrap_statistic(
    groups: Sequence[Moments],
    statistic: Callable[[np.ndarray], float],
    *,
    centered: bool,
    ddof: int,
    replicates: int,
    seed: int,
) -> np.ndarray:
    """``statistic(eigenvalues)`` on ``replicates`` resampled covariances (failed ones are nan)."""
    if len(groups) < 2:
        raise FitError(f"a bootstrap needs at least 2 groups of rows; the input is too small for {param('ci')}.")
    weighted = any(g.weighted for g in groups)
    n, W, S1, S2, shift, scale = group_sums(groups)
    d = S1.shape[1]
    G = len(groups)
    rng = np.random.default_rng(seed)
    out = np.full(replicates, np.nan)
    for b in range(replicates):
        c = rng.multinomial(G, np.full(G, 1.0 / G)).astype(np.float64)
        Wb = float(c @ W)
        s1 = c @ S1
        s2 = (c @ S2).reshape(d, d)
        if centered:
            m2 = s2 - np.outer(s1, s1 / Wb)
            denom = Wb if weighted else float(c @ n) - ddof
            C = m2 / denom
        else:
            C = (s2 + np.outer(s1, shift) + np.outer(shift, s1) + Wb * np.outer(shift, shift)) / Wb
        lam = np.linalg.eigvalsh((C + C.T) * 0.5)[::-1] * (scale * scale)
        try:
            out[b] = statistic(lam)
        except FitError:
            continue
    return out


def intervals(values: np.ndarray, estimate: float, level: float = 0.95) -> tuple[float, float, float, float, float]:
    """Basic interval, percentile interval and bias of the replicates around ``estimate``."""
    v = values[np.isfinite(values)]
    if v.size < 2:
        raise FitError("too few bootstrap replicates gave a fit to form an interval.")
    tail = (1.0 - level) / 2 * 100
    q_lo, q_hi = (float(q) for q in np.percentile(v, [tail, 100 - tail]))
    return 2 * estimate - q_hi, 2 * estimate - q_lo, q_lo, q_hi, float(v.mean()) - estimate
