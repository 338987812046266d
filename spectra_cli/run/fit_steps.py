"""The steps the orchestrators of :mod:`spectra_cli.run.matrix` and :mod:`spectra_cli.run.whiten` share:
a spectrum from the first pass, the partition-isotropy and shuffled-control second passes,
the isotropy summary and the bootstrap of the fits."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

import numpy as np

from spectra_cli.analysis.controls import ShuffledControl, meets_at, shuffled_spectrum
from spectra_cli.analysis.fit_options import FitOptions
from spectra_cli.analysis.isotropy import (
    DIRECTIONS_DXD,
    DIRECTIONS_GRAM,
    Isotropy,
    LogZAccumulator,
    directions,
    gram_log_z,
)
from spectra_cli.analysis.isotropy import summary as isotropy_summary
from spectra_cli.analysis.powerlaw import BootstrapCI, RankFit, Window
from spectra_cli.analysis.suite import FitSuite
from spectra_cli.eigen.decomposition import (
    Spectrum,
    leading_subspace,
    leading_vectors,
    spectrum_and_reduction,
    spectrum_from_rows,
)
from spectra_cli.errors import FitError, Message, OptionError, param, raw
from spectra_cli.stream.local import Progress
from spectra_cli.stream.passes import Accumulated, Input
from spectra_cli.stream.states import ProjectionMoments, ProjectionSums, RowsBuffer
from spectra_cli.validate import product_dtype

if TYPE_CHECKING:
    from spectra_cli.analysis.sampling_curve import Subsamples
    from spectra_cli.analysis.spikes import Spikes
    from spectra_cli.eigen.tridiagonal import Reduction

# Rows the shuffled control may hold in memory (float64): beyond this it uses a uniform sample.
CONTROL_MEMORY = 256 << 20


def spectrum_of(first: Accumulated, *, centered: bool, ddof: int, top: int | None = None,
                top_reason: str = "") -> Spectrum:
    """The covariance (or uncentred second-moment) spectrum of the first pass (``top``: only the
    leading eigenvalues, on the d x d route; the n x n route is exact and cheap already)."""
    return spectrum_and_reduction_of(first, centered=centered, ddof=ddof, top=top, top_reason=top_reason,
                                     keep=False)[0]


def spectrum_and_reduction_of(first: Accumulated, *, centered: bool, ddof: int, top: int | None = None,
                              top_reason: str = "", keep: bool = True) -> tuple[Spectrum, Reduction | None]:
    """:func:`spectrum_of`, with the decomposition's tridiagonal reduction kept (``keep``) where the grouped standard
    errors will read leading eigenvectors from it (past :data:`~spectra_cli.analysis.uncertainty.ALL_VECTORS_D`
    features, with enough row groups: :func:`~spectra_cli.analysis.uncertainty.group_spread`); else None."""
    if centered and not first.weighted and ddof >= first.n_rows:
        raise OptionError(f"{param('ddof', ddof)} must be less than the number of rows used ({first.n_rows}): "
                          "the covariance divides by n - ddof.")
    m = first.moments
    if m is None:
        assert first.rows is not None
        return spectrum_from_rows(first.rows, first.weights, centered=centered, ddof=ddof,
                                  precision=first.precision), None
    if keep and top is None:
        from spectra_cli.analysis.uncertainty import ALL_VECTORS_D, MIN_GROUPS

        keep = m.d > ALL_VECTORS_D and sum(g.weight_sum > 0 for g in first.groups) >= MIN_GROUPS
    return spectrum_and_reduction(m, centered=centered, ddof=ddof, precision=first.precision, top=top,
                                  top_reason=top_reason, keep=keep and top is None)


def uncentered_of(first: Accumulated, main: Spectrum, *, centered: bool) -> Spectrum:
    """The uncentred spectrum (RankMe's singular values), reusing ``main`` when it is one."""
    return main if not centered else spectrum_of(first, centered=False, ddof=0)


def partition_pass(inp: Input, first: Accumulated, *, scale: str, progress: Progress | None,
                   need: str | None = None) -> tuple[LogZAccumulator, float]:
    """log Z(c) for every direction, streamed in a second pass.

    The scores ``x^T c / s`` are computed in the run's precision (float32 halves the cost and
    adds a relative error of about 1e-7 |score| to log Z); the log-sum-exp is always float64."""
    if first.rows is not None:  # n < d: from the n x n Gram matrix, never d x d
        return gram_log_z(first.rows, first.weights, scale)
    assert first.moments is not None
    V, s = directions(first.moments, scale)
    dtype = product_dtype(first.precision)
    return inp.logz_pass(V, s, dtype, need=need or param("partition_isotropy"), progress=progress), s


def shuffled_control(inp: Input, first: Accumulated, real: Spectrum, *, seed: int, centered: bool,
                     ddof: int) -> ShuffledControl:
    """A second pass that gathers rows (all, or a uniform sample within CONTROL_MEMORY), then the
    spectrum with each column permuted independently."""
    d = inp.info.n_features
    spec = inp.read.rows
    n_sel = inp.n_selected
    budget = max(2, CONTROL_MEMORY // (8 * d))
    sub = n_sel > budget
    n_take = min(n_sel, budget) if sub else n_sel
    rows = RowsBuffer(n_take, d, weighted=first.weighted)
    inp.second_pass([rows], need=param("shuffled_control"),
                    rows=replace(spec, sample=n_take, seed=seed) if sub else spec)
    X, w = rows.matrix()
    ctrl = shuffled_spectrum(X, w, seed=seed, centered=centered, ddof=ddof, precision=first.precision)
    return ShuffledControl(ctrl.eigenvalues, len(X), sub, seed, meets_at(real, ctrl))


def coordinate_sums(inp: Input, first: Accumulated, main: Spectrum, *, centered: bool, ddof: int,
                    route: str, progress: Progress | None = None) -> ProjectionMoments | str | None:
    """What ``--population``'s analytic route reads the coordinates' fourth cumulant from: per run of consecutive
    rows, the sums of the rows' projections on the covariance's leading eigenvectors and of their squared norms
    (:class:`~spectra_cli.stream.states.ProjectionSums`), from a second pass (or the rows kept, n < d). None where
    that route is not taken (the first-order ratio, the simulated route); why not, for uncentred fits, weighted
    rows and inputs whose rows are not read again."""
    from spectra_cli.analysis.population import (  # (the population's modules: only when asked for)
        COORDINATE_GROUPS,
        PROJECTED_DIRECTIONS,
        is_first_order,
    )

    rows = first.positive_rows
    dof = rows - 1 if centered else rows
    d = main.n_features - main.near_null_count - main.below_floor
    if route != "analytic" or d <= PROJECTED_DIRECTIONS or dof < 3 or is_first_order(dof, d):
        return None
    if not centered:
        return ("an uncentred fit: its rows' model holds the mean in every row, whose direction leads the second "
                "moment; the coordinates are taken as Gaussian")
    if first.weighted:
        return "weighted rows: the weights enter the row model as row scales, and the coordinates are taken as Gaussian"
    if first.rows is None and inp.source is None:
        return (("accumulated moments (an Accumulator or a moment file) keep no rows to read again" if
                 inp.accumulator is not None else "the input's rows are not read a second time here (a Dask array)")
                + ": the coordinates are taken as Gaussian")
    if first.moments is not None:
        C = first.moments.second_moment_matrix(centered=True, ddof=ddof)
        V = leading_subspace(C, PROJECTED_DIRECTIONS)
        typical = math.sqrt(max(float(np.trace(C)), 0.0)) * first.moments.scale
    else:
        assert first.rows is not None
        V = leading_vectors(None, (first.rows, None), PROJECTED_DIRECTIONS, centered=True, ddof=ddof)
        # (the rows' scale, then their spread about the mean in it: a block of rows at a time, no copy of them all)
        top = float(np.max(np.abs(first.rows))) if first.rows.size else 0.0
        top = top if top > 0 else 1.0
        mean = first.mean() / top
        blocks = np.array_split(first.rows, max(1, -(-len(first.rows) // 1024)))
        square = sum(float(np.sum((b / top - mean) ** 2)) for b in blocks)
        typical = math.sqrt(square / max(len(first.rows), 1)) * top
    # (a power of two near a typical row's norm: dividing by it is exact, and no fourth power leaves float64)
    unit = 2.0 ** math.floor(math.log2(typical)) if math.isfinite(typical) and typical > 0 else 1.0
    state = ProjectionSums(V, first.mean(), rows=first.n_rows, groups=min(COORDINATE_GROUPS, first.n_rows),
                           unit=unit)
    if first.rows is not None:
        state.update(first.rows, None)
    else:
        inp.second_pass([state], need=param("population"), progress=progress)
    return state.result()


def isotropy_of(first: Accumulated, main: Spectrum, *, logz: LogZAccumulator | None = None,
                scale: str | None = None, scale_value: float | None = None, isoscore: bool = False) -> Isotropy:
    note = DIRECTIONS_GRAM if first.rows is not None else DIRECTIONS_DXD
    return isotropy_summary(main.resolved(), main.n_features, first.mean(), first.cosine, total=main.total_variance,
                            logz=logz, scale=scale,
                            scale_value=scale_value, with_isoscore=isoscore, directions_note=note)


def with_bootstrap(suite: FitSuite, first: Accumulated, opts: FitOptions, *, centered: bool, ddof: int,
                   replicates: int, seed: int, warnings: list[str], top: bool = False) -> FitSuite:
    """The basic bootstrap interval of each fit's alpha over the first pass's row-block groups: one
    decomposition per replicate serves every window. ``top``: the main spectrum took the top-k route,
    so each replicate computes only the leading eigenvalues the windows reach, the same way."""
    from spectra_cli.analysis.bootstrap import bootstrap_statistics, intervals
    from spectra_cli.analysis.powerlaw import fit_model, with_ci

    if first.moments is None:
        raise FitError(f"{param('ci')} needs more rows than features (the bootstrap reuses d x d block moments).")
    if not first.groups:
        raise FitError(f"{param('ci')} needs bootstrap groups that split every row: these moments have none "
                       "(an Accumulator or moment file made without groups, or merged with one that has none; make "
                       "every moment file with spectra moments --groups 32, or Accumulator(d, groups=32)).")
    if not suite.fits:
        return suite
    groups = first.groups
    if len(groups) < 10:
        warnings.append(f"the bootstrap has only {len(groups)} groups of rows, so its interval is coarse; moment files "
                        "made with 32 groups (spectra moments --groups 32, or Accumulator(d, groups=32)) give a finer "
                        "one")

    def stat(window: Window) -> Callable[[np.ndarray], float]:
        return lambda lam: fit_model(lam, window, method=opts.method, model=opts.model, degree=opts.degree).alpha

    from spectra_cli.eigen.decomposition import TOP_AUTO_MIN_D

    # Below the automatic route's width a full eigvalsh is faster than block Lanczos (at d = 256:
    # 4 ms against 100 ms), and gives the same leading values.
    k = max(f.window.k_max for f in suite.fits) if top and first.moments.d >= TOP_AUTO_MIN_D else None
    values = bootstrap_statistics(groups, [stat(f.window) for f in suite.fits], centered=centered, ddof=ddof,
                                  replicates=replicates, seed=seed, top=k)
    fits = []
    for f, v in zip(suite.fits, values, strict=True):
        lo, hi, p_lo, p_hi, bias = intervals(v, f.alpha)
        fits.append(with_ci(f, BootstrapCI(0.95, lo, hi, p_lo, p_hi, bias, int(np.isfinite(v).sum()),
                                           len(groups), seed, k)))
    return replace(suite, fits=tuple(fits))


#: Replicates of the population exponent's parametric bootstrap (each: one simulated sample spectrum).
POPULATION_REPLICATES = 40
#: Below this effective sample size (Kish's, of weighted rows) no population exponent is estimated.
MIN_EFFECTIVE_ROWS = 10.0


def feature_variances(first: Accumulated, *, centered: bool) -> np.ndarray | None:
    """Each feature's variance (centred, unweighted rows only): with the pass's fourth moments, the
    norms' coordinate reading of the row model."""
    if not centered or first.weighted:
        return None
    m = first.moments
    if m is not None:
        with np.errstate(over="ignore", invalid="ignore"):
            return np.diag(m.m2) * (m.scale * m.scale) / max(m.n - 1, 1)  # type: ignore[no-any-return]
    return first.rows.var(axis=0, ddof=1) if first.rows is not None else None


def sampling_dof(first: Accumulated, *, centered: bool) -> tuple[float, float]:
    """``(n_eff, dof)``: the rows the sampling model counts (Kish's effective rows when weighted) and its
    degrees of freedom (the centred sample loses one row to its mean, weighted or not)."""
    n_eff = first.n_effective if first.n_effective is not None else float(first.positive_rows)
    return n_eff, n_eff - 1.0 if centered else n_eff


#: The row groups a pass keeps for the standard errors alone (16 blocks at least: half the blocks --ci's 32 groups
#: need, so half their cost on short inputs), and the rows from which it keeps them (4 a group); below, the errors
#: are first order.
ERROR_GROUPS = 16
GROUPED_ERRORS_ROWS = 4 * ERROR_GROUPS


def grouped_method(spread: Any, first: Accumulated, warnings: list[str] | None, *,
                   centered: bool = True) -> dict[str, Any]:
    """What the grouped route says of itself: its method, the groups and degrees of freedom, and the rows'
    design effect and effective number (with a warning when the rows look dependent)."""
    from spectra_cli.analysis.uncertainty import GROUPED_METHOD, dependence_limit, design_effect

    G = spread.groups
    method: dict[str, Any] = {"route": "row groups", "method": GROUPED_METHOD, "groups": G, "dof": G - 1}
    if spread.depth:
        method["merged"] = (f"the pass's {spread.w.size} contiguous groups merged in adjacent pairs {spread.depth} "
                            f"time(s) into {G}: the metrics' values were alike in adjacent groups (dependence longer "
                            "than a group)")
    deff = design_effect(spread, first.norm_histogram(), first.n_rows) if centered and not first.weighted else None
    copies = repeated_rows(first)
    if deff is not None:
        n_eff = first.n_rows / max(deff, 1.0)
        if copies is not None:
            n_eff = min(n_eff, copies)
        method.update(design_effect=deff, n_effective=n_eff)
        if deff > dependence_limit(G) and warnings is not None:
            warnings.append(Message(
                f"the rows look dependent: their total variance varies {deff:.3g} times as much between the {G} "
                "contiguous row groups as independent rows of these norms would make it (about "
                f"{n_eff:,.0f} independent rows' worth of {first.n_rows:,}: tokens of one text, or repeated rows); "
                "the standard errors are the groups' own spread and account for it within a group"))
    return method


def misfit_warnings(fits: Any) -> list[str]:
    """A warning for each fit whose law misses its points (:func:`~spectra_cli.documents.law_misses`: the sampling
    error then says how alpha would move over samples, not how far the law is from the points; the tables and figures
    show the least-squares one)."""
    from spectra_cli.documents import law_misses

    out = []
    for f in fits:
        if law_misses(f.se, f.stderr, f.r2):
            law = {"power-law": "power law", "log-corrected": "log-corrected law"}.get(f.model, f"{f.model} law")
            out.append(f"the {law} misses its points in ranks {f.window.k_min}..{f.window.k_max} (R² "
                       f"{f.r2:.3f}; the least-squares error of alpha, {f.stderr:.2g}, is {f.stderr / f.se:.2g} times "
                       f"its sampling error, {f.se:.2g}): the sampling error says how alpha would move over samples, "
                       "not how well the law fits; quote the least-squares error, or fit a window where the law holds")
    return out


#: A share of repeated rows above this is said (the distinct count's error is below 1 % of the rows).
REPEATED_SHARE = 0.05


def repeated_rows(first: Accumulated) -> float | None:
    """About how many distinct rows there are when more than :data:`REPEATED_SHARE` of the rows repeat others
    (exact copies: a dump written twice, padding rows), else None."""
    d = first.distinct
    if d is None or not first.n_rows or d >= (1.0 - REPEATED_SHARE) * first.n_rows:
        return None
    return d


def repeated_warning(first: Accumulated) -> str | None:
    """The warning for repeated rows (:func:`repeated_rows`): the errors take copies as independent rows."""
    d = repeated_rows(first)
    if d is None:
        return None
    share = 1.0 - d / first.n_rows
    return (f"about {share:.0%} of the {first.n_rows:,} rows repeat others exactly (about {d:,.0f} distinct; a "
            "dump written twice, padding, repeated inputs): the standard errors take the copies as independent rows, "
            f"so they are too small by up to sqrt({first.n_rows:,} / {d:,.0f}) = {math.sqrt(first.n_rows / d):.2g}x; "
            "remove the copies, or give each distinct row its count as a weight")


def first_order_warning(first: Accumulated) -> str:
    """Why the standard errors took the first-order route, and what that assumes."""
    if first.moments is None:
        why = "fewer rows than features: the n x n route keeps no row groups"
    elif not first.groups and first.n_rows < GROUPED_ERRORS_ROWS:
        why = f"{first.n_rows} rows: too few for {ERROR_GROUPS} row groups of 4 rows"
    elif first.groups:
        why = f"only {len(first.groups)} row group(s): too few to measure a spread"
    else:
        why = ("moments without row groups (a moment file made without --groups, or an Accumulator without them: "
               "spectra moments --groups 32 keeps them)")
    return (f"the standard errors are first order, from the rows' fourth moments ({why}): they take the rows as "
            "independent draws of one law, which tokens of one text are not (their errors are then too small); "
            "row groups give errors from the data's own spread")


def grouped_errors(spread: Any, grads: list[np.ndarray | None], first: Accumulated, lam: np.ndarray, model: Any, *,
                   centered: bool, warnings: list[str] | None) -> tuple[dict[str, Any], Callable[..., float | None]]:
    """The grouped route: the groups settled (merged while the ranks' and the isotropy's values, ``grads``, and the
    total variance's correlate between neighbours: the same groups for every fit whatever its window), what the
    route says of itself, and the standard error of a metric of the eigenvalues from its gradient (each gradient's
    group values read once: a fit and its model of the same window share them). A metric that needs eigenvectors
    past the leading ones computed (the entropy rank, past :data:`~spectra_cli.analysis.uncertainty.ALL_VECTORS_D`
    features) gets its first-order error times the square root of the design effect."""
    from spectra_cli.analysis.uncertainty import ALL_VECTORS_D, first_order_error, grouped_error

    values: dict[bytes, np.ndarray | None] = {}

    def linearised(grad: np.ndarray) -> np.ndarray | None:
        key = grad.tobytes()
        if key not in values:
            with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
                values[key] = spread.linearised(grad)
        return values[key]

    read = [t for t in (linearised(g) for g in grads if g is not None) if t is not None]
    settled = spread.settled([spread.traces(), *read])
    method = grouped_method(settled, first, warnings, centered=centered)
    deff = max(method.get("design_effect") or 1.0, 1.0)

    def error(grad: np.ndarray | None, top: Callable[[Any, Any], Any] | None = None) -> float | None:
        if grad is None:
            return None
        if top is not None:  # (a function of the top eigenvalue and the trace: the jackknife)
            var = settled.top_jackknife(top)
            if var is not None:
                return math.sqrt(var)
        t = linearised(grad)
        if t is not None:
            return grouped_error(settled, t)
        method["wide"] = (f"past {ALL_VECTORS_D:,} features the entropy rank's error is first order times the square "
                          "root of the design effect (it needs every eigenvector; the other errors read the leading "
                          "ones)")
        se = first_order_error(lam, grad, model)
        return se * math.sqrt(deff) if se is not None else None

    return method, error


def with_uncertainty(suite: FitSuite | None, iso: Isotropy | None, first: Accumulated, main: Spectrum, *,
                     centered: bool, isoscore: bool = False, warnings: list[str] | None = None,
                     sample: bool = True,
                     reduction: Reduction | None = None) -> tuple[FitSuite | None, Isotropy | None]:
    """The standard error of every rank and isotropy measure that has one and of each fit's alpha
    (:mod:`spectra_cli.analysis.uncertainty`: the spread of their linearisation between the pass's row groups, else
    the first-order delta method), and for every one without a standard error why there is none (never a zero).
    ``sample``: False for a weight matrix (its rows are no sample: no warning of how its errors were made).
    ``reduction``: the spectrum's tridiagonal reduction (:func:`spectrum_and_reduction_of`), which the grouped
    errors' leading eigenvectors come from where it is given."""
    from spectra_cli.analysis.rank import GRADIENTS, NO_ERROR, participation_ratio, rank_gradients
    from spectra_cli.analysis.uncertainty import (
        FLAT_PR_SHARE,
        METHOD,
        NOT_DERIVED,
        TOP_METRICS,
        alpha_gradient,
        first_order_error,
        group_spread,
        isotropy_gradients,
        row_model,
    )

    rank_names = tuple(GRADIENTS)
    iso_names = ("top_pc_share", *(("isoscore",) if isoscore else ()))
    rank_missing: dict[str, str] = dict(NO_ERROR)
    iso_missing: dict[str, str] = dict(NOT_DERIVED)
    rank_se: dict[str, float | None] = {}
    iso_se: dict[str, float | None] = {}
    method: dict[str, Any] | None = None
    n_eff, dof = sampling_dof(first, centered=centered)
    lam = main.resolved()
    positive = int(np.count_nonzero(lam > 0))
    why = None
    if main.top is not None:
        why = (f"only the leading {main.eigenvalues.size} eigenvalues were computed (the top-k route): the standard "
               "errors need every eigenvalue (--top 0 computes them all)")
    elif dof < 2:
        why = f"fewer than three effective rows ({n_eff:.3g}): no sampling error can be stated"
    elif positive < 2:
        why = (f"{positive} resolved eigenvalue(s) above the numerical floor: a degenerate spectrum has no first-order "
               "sampling error")
    fit_why: dict[int, str] = {}
    if why is None:
        windows = [f.window.k_max for f in (suite.fits if suite else ())]
        if suite is not None and suite.models is not None:
            windows += [m.window.k_max for m in suite.models.fits]
        spread = group_spread(first.groups, lam, centered=centered, leading=max(windows, default=0),
                              pooled=first.moments, reduction=reduction) if first.moments is not None else None
        model = row_model(lam, n_effective=dof, norms=first.norm_histogram(),
                          variances=feature_variances(first, centered=centered), weighted=first.weighted)
        rank_grads = rank_gradients(lam)
        iso_grads = isotropy_gradients(lam, d=main.n_features, isoscore=isoscore)
        if spread is not None:
            method, error = grouped_errors(spread, [*rank_grads.values(), *iso_grads.values()], first, lam, model,
                                           centered=centered, warnings=warnings)
        else:
            method = {"route": "first order", "method": METHOD, **model.to_dict()}
            if warnings is not None and sample:  # (a weight matrix's rows are no sample: nothing to warn of)
                warnings.append(first_order_warning(first))
                if model.source.startswith("no histogram"):
                    warnings.append("these moments carry no histogram of row norms (a moment file made before "
                                    "spectra gathered one): the standard errors assume Gaussian rows; a moment file "
                                    "made again with this version gives errors from the data's own rows")

            def error(grad: np.ndarray | None, top: Any = None) -> float | None:
                return first_order_error(lam, grad, model)
        if warnings is not None and sample and (said := repeated_warning(first)) is not None:
            warnings.append(said)
            method["distinct_rows"] = first.distinct
        pr = participation_ratio(lam)
        if pr > FLAT_PR_SHARE * main.n_features:
            method["caveat"] = (f"a flat spectrum (participation ratio {pr:.4g} of d = {main.n_features}): near-equal "
                                "eigenvalues repel, and the first-order errors over-state the spread (up to 4x on "
                                "white noise): comparisons are conservative here")
            if warnings is not None:
                warnings.append(Message(
                    "the standard errors over-state the spread on this flat spectrum (near-equal eigenvalues "
                    "repel; up to 4x on white noise): a change flagged against them is real, but a small one may go "
                    f"unflagged; the bootstrap interval of alpha ({param('ci', True)}) does not "
                    "rest on them"))
        for name, grad in rank_grads.items():
            _keep(name, error(grad, TOP_METRICS.get(name)), rank_se, rank_missing)
        for name, grad in iso_grads.items():
            _keep(name, error(grad, TOP_METRICS.get(name)), iso_se, iso_missing)
        if suite is not None:
            fits = []
            for i, f in enumerate(suite.fits):
                se = error(alpha_gradient(main.eigenvalues, f))
                if se is None or not se > 0:
                    fit_why[i] = ("the broken law's crossover is searched: its alpha is not a linear function of the "
                                  "eigenvalues" if f.model == "broken" else "the first-order error vanishes here")
                    se = None
                fits.append(replace(f, se=se, se_missing=fit_why.get(i)))
            models = suite.models
            if models is not None:
                models = replace(models, fits=tuple(
                    replace(m, se=error(alpha_gradient(main.eigenvalues, m)),
                            se_missing="the broken law's crossover is searched" if m.model == "broken" else None)
                    for m in models.fits))
            suite = replace(suite, fits=tuple(fits), models=models)
            if warnings is not None:
                warnings += misfit_warnings(suite.fits)
    else:
        rank_missing.update(dict.fromkeys(rank_names, why))
        iso_missing.update(dict.fromkeys(iso_names, why))
        if suite is not None:
            suite = replace(suite, fits=tuple(replace(f, se=None, se_missing=why) for f in suite.fits))
    if suite is not None:
        suite = replace(suite, rank=replace(suite.rank, se=rank_se, se_missing=rank_missing, se_method=method))
    if iso is not None:
        iso = replace(iso, se=iso_se, se_missing=iso_missing, se_method=method)
    return suite, iso


def spikes_of(suite: FitSuite, first: Accumulated, main: Spectrum, *, centered: bool, ddof: int,
              warnings: list[str]) -> Spikes:
    """The eigenvalues above the power-law bulk of the first fit's window (:mod:`spectra_cli.analysis.spikes`),
    each with the coordinates that load on it (its eigenvector: a second, partial decomposition of the
    leading directions only)."""
    from spectra_cli.analysis.spikes import Spikes, find_spikes

    _, dof = sampling_dof(first, centered=centered)
    if not suite.fits:
        found = Spikes(n=dof, reason="no rank window was fitted (the warning on the fit says why), and the bulk is "
                                     "the fit's power law")
    else:
        w = suite.fits[0].window
        rows = (first.rows, first.weights) if first.rows is not None else None
        found = find_spikes(main.eigenvalues, n=dof, window=(w.k_min, w.k_max), total=main.total_variance,
                            alpha_se=suite.fits[0].se, dim=main.n_features,
                            vectors=lambda k: leading_vectors(first.moments, rows, k, centered=centered, ddof=ddof))
    if found.reason is not None:
        warnings.append(Message(f"spikes not tested ({param('spikes', True)}): {raw(found.reason)}"))
    elif found.note is not None:
        warnings.append(Message(f"spikes ({param('spikes', True)}): {raw(found.note)}"))
    elif found.rogue_dimensions:
        dims = ", ".join(str(i) for i in found.rogue_dimensions)
        warnings.append(f"rogue dimension(s) {dims}: one coordinate carries most of a spike's direction (the spikes "
                        "table lists the loadings); such coordinates dominate norms and cosines: standardise the "
                        "features, or leave these columns out, to see the spectrum without them")
    return found


def _keep(name: str, value: float | None, errors: dict[str, float | None], missing: dict[str, str]) -> None:
    """A standard error kept, or (None, zero, not finite) its absence said."""
    if value is not None and value > 0 and np.isfinite(value):
        errors[name] = value
    else:
        missing[name] = "the first-order error vanishes or is undefined here (a degenerate spectrum)"


def with_population(suite: FitSuite, first: Accumulated, main: Spectrum, *, centered: bool, ddof: int, seed: int,
                    warnings: list[str], eigen_seconds: float | None = None, route: str = "analytic",
                    projections: ProjectionMoments | str | None = None) -> FitSuite:
    """The population exponent of every fit, and the bias-corrected participation ratio
    (:mod:`spectra_cli.analysis.population`, :mod:`spectra_cli.analysis.row_scales`), from the spectrum and the rows'
    squared norms. ``eigen_seconds``: what the spectrum's own decomposition took (the expected time of the
    population's decompositions is told from it, before they start); ``projections``: :func:`coordinate_sums`."""
    from spectra_cli.analysis.population import population_fit
    from spectra_cli.analysis.powerlaw import with_population as fit_with_population
    from spectra_cli.analysis.row_scales import RowScales, participation_ratio_population

    m = first.moments
    rows, W = first.positive_rows, first.weight_sum
    w2 = first.weight_sq_sum if first.weighted and first.weight_sq_sum else float(rows)
    dof = rows - 1 if centered else rows
    if dof < 2:
        raise FitError(f"{param('population')} needs at least 3 rows.")
    hist = first.norm_histogram()
    where = "squared row norms about the mean of the rows read so far, gathered in the pass" if m is not None else \
        "squared row norms about the mean"
    variances = feature_variances(first, centered=centered)
    scales = (RowScales.of(hist, weight_sum=W, weight_sq_sum=w2, source=where, variances=variances)
              if hist is not None and hist.rows else None)
    if scales is None:
        warnings.append(Message(
            f"the population exponent ({param('population', True)}): these moments carry no histogram of row norms (a "
            "moment file made before spectra gathered one), so it assumes Gaussian rows, and the participation ratio "
            "is not corrected; a moment file made again with this version gives both from the data's own rows"))
    offset = quad = 0.0
    if not centered:
        mu = first.mean()
        offset = float(mu @ mu) * W / max(rows, 1)  # w |mu|^2 at the mean weight
        quad = first.centred_quadratic(mu)
    pr = None
    if scales is not None and main.top is None:
        factor = (first.n_rows - ddof) / first.n_rows if centered and not first.weighted else 1.0
        pr = participation_ratio_population(main.eigenvalues, scales, scale_to_population=factor,
                                            uncentered_offset=offset, mean_quadratic=quad,
                                            dimension=main.n_features)
    # the population lives in the directions the data span: null directions (below the floor, or LayerNorm's
    # near-null ones) are left out of it; the sample's own zeros (n < d) are not
    d = main.n_features
    nulls = main.near_null_count + main.below_floor
    lam = np.zeros(d - nulls)
    kept = main.resolved()[: min(main.eigenvalues.size, d - nulls)]
    lam[: kept.size] = kept
    n_eff = first.n_effective if first.n_effective is not None else float(dof)
    if n_eff < MIN_EFFECTIVE_ROWS:
        why = (f"the weights leave an effective sample of {n_eff:.3g} rows ((sum w)^2 / sum w^2, Kish) of {rows}"
               if first.weighted else f"{rows} rows are {dof} degrees of freedom" + (" once centred" if centered
                                                                                    else ""))
        warnings.append(Message(f"no population exponent ({param('population', True)}): {why}: too few to say what "
                                f"population they come from; it needs at least {MIN_EFFECTIVE_ROWS:g} degrees of "
                                "freedom (rows, less one when centred; weighted rows: Kish's effective sample)"))
        return replace(suite, rank=replace(suite.rank, participation_ratio_population=pr))
    if n_eff < 0.5 * rows:
        warnings.append(Message(
            f"the population exponent ({param('population', True)}): the weights concentrate the sample (an effective "
            f"{n_eff:.4g} of {rows} rows, Kish): they enter the population model as row scales, so its interval is "
            "wider; more rows, or flatter weights, narrow it"))

    plan = _subsample_plan(first, seed=seed, warnings=warnings)
    if eigen_seconds is not None and suite.fits:
        _expect_population(plan, first, main, dof=dof, d=lam.size, windows=len(suite.fits),
                           eigen_seconds=eigen_seconds, n_effective=n_eff, analytic=route == "analytic")
    subsamples = None if plan is None else _subsamples(first, plan, lam.size, centered=centered, ddof=ddof)

    def one(f: RankFit) -> RankFit:
        try:
            pop = population_fit(lam, n=dof, window=(f.window.k_min, f.window.k_max), scales=scales, offset=offset,
                                 n_effective=n_eff, replicates=POPULATION_REPLICATES, seed=seed, null_directions=nulls,
                                 subsamples=subsamples, route=route, projections=projections)
        except FitError as exc:
            warnings.append(Message(f"no population exponent over ranks {f.window.k_min}..{f.window.k_max} "
                                    f"({param('population', True)}): {raw(exc)}"))
            return f
        if not pop.power_law_fits:
            b = pop.bend
            curved, straight = b["curved_alpha"], b["curved_alpha"] - b["model_error"]
            half = 0.5 * (pop.high - pop.low) - abs(b["model_error"])  # (the half-width before the widening)
            warnings.append(Message(
                f"the population exponent over ranks {pop.window[0]}..{pop.window[1]} ({param('population', True)}): "
                f"the population is not a power law there (the spectrum bends beyond sampling noise, p = "
                f"{b['p_value']:.2g}); a population curved over the window gives {curved:.4f}, the power law "
                f"{straight:.4f}, and the interval is widened by the difference"
                + (f" ({abs(b['model_error']):.2g}, {abs(b['model_error']) / half:.0%} of its half-width: alpha "
                   "stands as the window's average slope)" if 0 < half and abs(b["model_error"]) < 0.1 * half else
                   f". Read alpha as the window's average slope, or fit a narrower window "
                   f"({param('window', 'K1:K2')})")))
        return fit_with_population(f, pop)

    fits = tuple(one(f) for f in suite.fits)
    return replace(suite, fits=fits, rank=replace(suite.rank, participation_ratio_population=pr))


def _expect_population(plan: SubsamplePlan | None, first: Accumulated, main: Spectrum, *, dof: int, d: int,
                       windows: int, eigen_seconds: float, n_effective: float | None = None,
                       analytic: bool = False) -> None:
    """Tell the progress how long the population's eigendecompositions will take, at the pace of the spectrum's own
    (``main``'s, ``eigen_seconds``; the cost growing as the cube of the size): the data's sub-samples
    (``plan``; None: none) and, below the first-order ratio and off the analytic route, each window's simulated
    samples (the sampling curve's with sub-samples only). An estimate: the match, the simulated rows' products and
    the decompositions that run side by side move it either way."""
    from spectra_cli.analysis.population import simulated_decompositions
    from spectra_cli.analysis.sampling_curve import SUBSAMPLE_PARTS
    from spectra_cli.stages import expect

    main_size = main.n_features if first.moments is not None else min(first.n_rows, main.n_features)
    sub_count, sub_size = (0, 0) if plan is None else (plan.keep.shape[0] * plan.keep.shape[1], plan.size(first))
    simulated = windows * simulated_decompositions(dof, d, replicates=POPULATION_REPLICATES,
                                                   curve_parts=SUBSAMPLE_PARTS if sub_count else None,
                                                   n_effective=n_effective, analytic=analytic)
    sim_size = min(dof, d)
    seconds = eigen_seconds * (sub_count * (sub_size / main_size) ** 3 + simulated * (sim_size / main_size) ** 3)
    largest = max(sub_size if sub_count else 0, sim_size if simulated else 0)
    expect("the population exponent", seconds,
           f"{sub_count + simulated} eigendecompositions of up to {largest:,} x {largest:,}, at the pace of the "
           f"spectrum's own, {main_size:,} x {main_size:,} in {eigen_seconds:.2g} s")


#: Groups of consecutive rows on the n x n route (the d x d route has the pass's row-block groups).
GRAM_GROUPS = 32


@dataclass(frozen=True)
class SubsamplePlan:
    """Which row groups each sub-sample of the sampling curve keeps (``keep``: partitions x parts x groups), and
    where the groups come from."""

    keep: np.ndarray
    source: str

    def size(self, first: Accumulated) -> int:
        """The order of each sub-sample's decomposition: d x d from the groups' moments; on the n x n route the
        Gram matrix of the rows it keeps (all but one part)."""
        if first.moments is not None:
            return int(first.moments.m2.shape[0])
        assert first.rows is not None
        m = self.keep.shape[1]
        return min(first.rows.shape[1], len(first.rows) * (m - 1) // m)


def _subsample_plan(first: Accumulated, *, seed: int, warnings: list[str]) -> SubsamplePlan | None:
    """The sub-samples that check the row model (:func:`spectra_cli.analysis.sampling_curve.sampling_curve`): from
    the pass's row-block groups, or, on the n x n route, from groups of consecutive rows. None (and a warning)
    when there are too few groups, or groups too unequal to leave out a quarter of the rows at a time."""
    from spectra_cli.analysis.sampling_curve import MIN_SUBSAMPLE_GROUPS, subsample_design

    if first.moments is None:
        assert first.rows is not None
        G = min(GRAM_GROUPS, len(first.rows))
        source = f"{G} groups of consecutive rows"
    else:
        G = len(first.groups)
        source = f"the pass's {G} row-block groups (runs of consecutive blocks)"
    if G < MIN_SUBSAMPLE_GROUPS:
        why = (f"{G} rows make too few groups of rows (more rows make more)" if first.moments is None else
               "these moments carry no row groups (made without them: spectra moments --groups 32, or "
               "Accumulator(d, groups=32))" if G == 0 else
               f"only {G} row groups are kept (at least {MIN_SUBSAMPLE_GROUPS} are needed: moment files made with "
               "--groups 32 carry enough; inputs wider than 4,096 features keep fewer, within the 1 GiB the "
               "groups may take)")
        warnings.append(Message(f"the population exponent ({param('population', True)}): {why}: the estimate rests on "
                                "the row model alone, unchecked against the data's own sampling curve"))
        return None
    sizes = None if first.moments is None else np.array([g.n_positive for g in first.groups], dtype=np.float64)
    keep = subsample_design(G, seed=seed, sizes=sizes)
    if keep is None:
        warnings.append(Message(
            f"the population exponent ({param('population', True)}): the {G} row groups are too unequal in size to "
            "leave out about a quarter of the rows at a time (one holds more than 3/8 of them): the estimate rests on "
            "the row model alone, unchecked against the data's own sampling curve; moment files of similar row counts "
            "(or flatter weights) let it be checked"))
        return None
    return SubsamplePlan(keep, source)


def _subsamples(first: Accumulated, plan: SubsamplePlan, width: int, *, centered: bool, ddof: int) -> Subsamples:
    """The spectra of the planned sub-samples: their leading ``width`` eigenvalues."""
    from spectra_cli.analysis.sampling_curve import Subsamples

    R, m, G = plan.keep.shape
    flat = plan.keep.reshape(R * m, G)
    from spectra_cli.stages import stage

    tick = stage("population: sub-sample spectra", R * m)
    if first.moments is not None:
        from spectra_cli.analysis.bootstrap import subset_spectra

        spectra, dof = subset_spectra(first.groups, flat, centered=centered, ddof=ddof)
        tick(R * m)
    else:
        assert first.rows is not None
        n = len(first.rows)
        label = np.arange(n) * G // n
        spectra = np.zeros((R * m, first.rows.shape[1]))
        dof = np.empty(R * m)
        for i, mask in enumerate(flat):
            rows = mask[label]
            w = first.weights[rows] if first.weights is not None else None
            dof[i] = int(rows.sum() if w is None else np.count_nonzero(w > 0)) - (1 if centered else 0)
            if dof[i] < 3:  # (fewer than 4 rows of positive weight: no spectrum to read)
                spectra[i], dof[i] = np.nan, 0.0
                continue
            sp = spectrum_from_rows(first.rows[rows], w, centered=centered, ddof=ddof, precision=first.precision)
            ev = sp.resolved()
            spectra[i, :ev.size] = ev[:spectra.shape[1]]
            tick(i + 1)
    out = np.zeros((R * m, width))
    k = min(width, spectra.shape[1])
    out[:, :k] = np.where(np.isnan(spectra[:, :k]), np.nan, np.maximum(spectra[:, :k], 0.0))
    return Subsamples(out.reshape(R, m, width), dof.reshape(R, m), G, plan.source)
