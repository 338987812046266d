"""The data's own sampling curve: how the sample slope changes when a quarter of the row groups is left out,
against the row model's expectation of that change (a grouped, delete-a-quarter jackknife: Shao & Wu 1989;
balanced partitions, so that the first-order terms cancel in the mean change). It scales the population
model's bias correction and bounds its interval from below (:mod:`spectra_cli.analysis.population`).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from spectra_cli.analysis.equivalent import MIN_RANKS, slope_of
from spectra_cli.errors import FitError

#: The data's own sampling curve: the row groups split at random into SUBSAMPLE_PARTS parts of (nearly) equal
#: size, SUBSAMPLE_PARTITIONS times; each sub-sample leaves one part out.
SUBSAMPLE_PARTS = 4
SUBSAMPLE_PARTITIONS = 4
#: A part of a partition holds between (1 -+ this) / SUBSAMPLE_PARTS of the rows (else it is dealt by rows).
PART_SHARE_TOLERANCE = 0.5
#: Fewer row groups than this and the sampling curve is not measured (the row model alone is used).
MIN_SUBSAMPLE_GROUPS = 8
#: Samples simulated from the fitted population to tell how much the sampling curve varies from sample to sample.
CURVE_SIMULATIONS = 8
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


def sampling_curve(sub: Subsamples, lam: np.ndarray, *, n: float, k0: int, k1: int, margin: float, bias: float,
                   gain: float, expected_slope: Callable[[float, int], float],
                   simulated_changes: Callable[[int, int], np.ndarray],
                   notes: list[str], change_sd: Callable[[int, int, float], float | None] | None = None,
                   ) -> tuple[float, float, int, dict[str, Any]] | None:
    """The row model checked against the data's own sampling curve.

    ``S`` is the sample slope over ranks ``k0..k1c`` (``k1c``: the window, cut to the ranks every sub-sample
    resolves): ``D_obs`` the mean over sub-samples of ``S(sub-sample) - S(all rows)``, ``D_model`` the row model's
    expected change ``E S(n') - E S(n)`` (``n'`` the sub-samples' mean degrees of freedom) at the fitted
    population, ``expected_slope(dof, k1c)``. ``D_obs`` varies from sample to sample: ``simulated_changes(k1c,
    parts)`` gives the change of samples simulated from the fitted population, one partition each, whose standard
    deviation (or ``change_sd(k1c, parts, n')``, that standard deviation from theory, where given and it gives one:
    then nothing is simulated), with the
    partitions' own ``sd_r(D_obs) / sqrt(R)``, is its error ``e``. The raw spread ratio
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
    theory = change_sd(k1c, m, dof) if change_sd is not None else None
    draws = np.empty(0) if theory is not None else np.asarray(simulated_changes(k1c, m), dtype=np.float64)
    draws = draws[np.isfinite(draws)]
    model_sd = theory if theory is not None else float(draws.std(ddof=1)) if draws.size > 2 else 0.0
    info: dict[str, Any] = {
        "groups": sub.groups, "parts": m, "partitions": R, "source": sub.source, "rows": dof,
        "ranks": [k0, k1c], "observed_change": d_obs, "observed_change_se": noise, "model_change": model_change,
        "model_change_simulated": float(draws.mean()) if draws.size else None, "model_change_sd": model_sd,
        "model_change_sd_from": "theory" if theory is not None else "simulations" if draws.size else "none",
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
