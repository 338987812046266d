"""The library: ``fit``, ``spectrum`` and ``isotropy`` (``whiten`` lives in :mod:`spectra_cli.run.whiten`).

Each takes ``data`` — a path, a numpy array, anything with ``__array__`` or ``__dlpack__``, an
:class:`~spectra_cli.stream.accumulator.Accumulator` or a moment file — and typed keyword options,
validates them once (:class:`~spectra_cli.options.ReadOptions`,
:class:`~spectra_cli.analysis.suite.FitOptions`), runs the passes it needs and returns a frozen
:class:`~spectra_cli.results.Report` (``report.to_dict()`` is the JSON document of the CLI).

Reading options, shared by every function:

- ``key``: array inside a ``.npz``; ``column`` / ``columns``: Parquet vector column / numeric columns.
- ``rows``: ``"START:STOP"`` (0-based, half-open); ``sample``/``seed``: a uniform sample of the rows.
- ``weights``: a 1-D ``.npy`` path or an array of row weights; ``weight_column``: a Parquet column;
  ``logits``/``temperature``: weights ``softmax(z / T)`` from a 1-D ``.npy`` of scores.
- ``centered``: covariance (True) or the uncentred second moment ``X^T X / n`` (False);
  ``ddof``: of the unweighted covariance (weighted covariance is the population form).
- ``precision``: ``"float64"`` or ``"float32"`` products; ``block_rows``: rows per block;
  ``drop_nonfinite``: skip rows with NaN/inf instead of failing; ``max_memory``: bytes (or
  ``"8GB"``) the run's matrices may take (default half the physical memory);
  ``progress``: a callable ``progress(rows_done, rows_total)``.
- Sequence dumps ``(windows, positions, features)``: ``positions`` (``"1:"``, ``"0,2,5"`` or a list),
  ``pool`` (``tokens`` — every selected position flattened, the default —, ``mean``, ``first``,
  ``last``), ``mask`` (a ``(windows, positions)`` boolean ``.npy`` or array, False = padding) and
  ``positions_per_window`` (regroup 2-D token rows into windows of L).
- Scale-out: ``engine="dask"`` runs the passes as Dask tasks over row ranges (``workers``: a
  LocalCluster of that many processes; ``scheduler``: an existing cluster's address); a
  ``dask.array.Array`` is always read that way. Needs the ``dask`` extra.
"""

from __future__ import annotations

import difflib
import functools
import inspect
import os
import typing
from collections.abc import Callable
from typing import Any, TypeVar, Unpack

import numpy as np

from spectra_cli import threads
from spectra_cli.analysis.fit_options import FIT_CONSTRAINTS, FIT_KEYWORDS, FitKeywords, FitOptions
from spectra_cli.analysis.isotropy import check_scale
from spectra_cli.analysis.suite import run_suite
from spectra_cli.errors import Message, OptionError, param
from spectra_cli.options import ACCUMULATE_REFUSES, ISOTROPY_REFUSES, ReadKeywords, ReadOptions
from spectra_cli.results import OptionsSection, Report, SourceSection
from spectra_cli.run import fit_steps
from spectra_cli.run.assemble import (
    Stopwatch,
    assemble,
    ci_coverage_warning,
    control_window_warning,
    emit_warnings,
    near_null_warning,
    sequence_tokens_warning,
    spectrum_warnings,
)
from spectra_cli.run.fit_steps import isotropy_of, partition_pass, spectrum_of, uncentered_of, with_bootstrap
from spectra_cli.sinks import check_not_input
from spectra_cli.sources.base import SourceInfo
from spectra_cli.sources.opening import open_input
from spectra_cli.stages import reports_progress
from spectra_cli.stream import moment_file
from spectra_cli.stream.accumulator import Accumulator
from spectra_cli.stream.local import Progress
from spectra_cli.stream.passes import Input, input_paths
from spectra_cli.stream.states import ProjectionMoments
from spectra_cli.validate import check_bool, check_int

BOOTSTRAP_GROUPS = 32
#: What spectra isotropy says it needs a second pass for (and what works from moments instead).
ISOTROPY_NEED = ("isotropy (its partition isotropy; spectra fit on moments gives the mean cosine, top-PC share and "
                 "mean-norm ratio)")
#: The formats whose matrices are a checkpoint's weights (a tensor, a change between two, an adapted layer): no
#: sample of rows, so their standard errors are first order, without row groups.
CHECKPOINT_FORMATS = ("safetensors", "peft adapter")
#: RankMe's second decomposition is made by default up to this width (0.1 s on 2 cores; 0.9 s at 2048).
RANKME_AUTO_D = 1024
F = TypeVar("F", bound=Callable[..., Any])



def keywords_checked(func: F) -> F:
    """An unknown keyword is a TypeError that names the closest valid one and lists them all (the
    function's own keywords, then the reading keywords of :class:`~spectra_cli.options.ReadKeywords`
    when it takes ``**read``)."""
    params = inspect.signature(func).parameters.values()
    own = [p.name for p in params if p.kind is p.KEYWORD_ONLY]
    var = [p for p in params if p.kind is p.VAR_KEYWORD]
    declared = typing.get_args(typing.get_type_hints(func)[var[0].name]) if var else ()
    reading = [k for k in (declared[0].__annotations__ if declared else ()) if k not in own]
    last = ("options", "progress")  # (a made FitOptions and the progress hook: after the keywords a user types)
    valid = [k for k in own if k not in last] + reading + [k for k in last if k in own]

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        unknown = [k for k in kwargs if k not in valid]
        if unknown:
            close = difflib.get_close_matches(unknown[0], valid, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise TypeError(f"{func.__name__}() got an unexpected keyword argument {unknown[0]!r}{hint}; "
                            f"valid keywords: {', '.join(valid)}.")
        with threads.call(kwargs.get("threads")):  # threads=N holds for the whole call, then the policy again
            return func(*args, **kwargs)

    return wrapper  # type: ignore[return-value]


class FitReadKeywords(FitKeywords, ReadKeywords, total=False):
    """The keywords of ``fit``: every fit keyword (:class:`~spectra_cli.analysis.suite.FitKeywords`) and
    every reading keyword (:class:`~spectra_cli.options.ReadKeywords`), each declared once there."""


@keywords_checked
@reports_progress
def spectrum(
    data: Any,
    *,
    eigenvalues: bool = False,
    top: int | None = None,
    progress: Progress | None = None,
    **reading: Unpack[ReadKeywords],
) -> Report:
    """Eigenvalues (descending), explained variance, k90/k95/k99 and the numerical and sampling floors.

    ``eigenvalues=True``: ``data`` is a 1-D list of eigenvalues computed elsewhere (a path of a
    ``.npy``/``.json``/``.csv`` or an array). ``top=K``: only the leading K eigenvalues (block
    Lanczos on the d x d matrix, each within 1e-12 relative of the full decomposition; the total
    variance and explained variance stay exact; ``spectrum.top_k`` says how); None or 0: all of them.
    The reading options are described in the module docstring.
    """
    read = ReadOptions.create(**reading)
    top = check_top(top)
    opening = open_input(data, eigenvalues=eigenvalues)  # (what the input is, told once)
    if opening.kind == "eigenvalues":
        return _from_eigenvalues("spectrum", data, None)
    clock = Stopwatch()
    with Input(opening, read) as inp:
        first = inp.first_pass(progress=progress)
        clock.mark("read_accumulate_s")
        main = spectrum_of(first, centered=read.centered, ddof=read.ddof, top=top or None,
                           top_reason=Message(f"asked: {param('top', top)}") if top else "")
        clock.mark("eigen_s")
    clock.mark("analysis_s")
    return assemble("spectrum", inp, first, main, options=inp.options_report(),
                    warnings=spectrum_warnings(main, first), clock=clock)


@keywords_checked
@reports_progress
def fit(
    data: Any,
    *,
    eigenvalues: bool = False,
    options: FitOptions | None = None,
    progress: Progress | None = None,
    **given: Unpack[FitReadKeywords],
) -> Report:
    """The spectrum plus power-law fits, the model comparison, the local slope, every effective
    rank and the cheap isotropy figures (the main job).

    Fitting: ``window`` is ``"K1:K2"`` (1-based, inclusive), ``"auto"`` or a list of them (one fit
    each; default ranks 11..d/10); ``method`` ``ols | logspaced | inv-rank``; ``model``
    ``power-law | log-corrected | broken`` with ``degree`` p of the log-corrected model;
    ``density``: WeightWatcher's density exponent, with WeightWatcher's per-layer metrics and a verdict
    (``alpha_range`` ``"LO:HI"``, default 2:6) in ``report.weightwatcher``; ``auto_tolerance``: residual RMS allowed by
    ``window="auto"``; ``counting`` / ``capacity``: N(eps) and N(tau) at these values.
    ``convention="weightwatcher"``: WeightWatcher's ``analyze()`` (uncentred ``W^T W``, the density exponent
    fitted to the eigenvalues above its ``1e-5`` cut, its columns by its names in
    ``report.weightwatcher.columns``, its MP fit and verdicts).
    Extras: ``ci`` (95 % bootstrap interval of alpha, ``ci_replicates``, ``ci_seed``),
    ``population`` (the population exponent behind each fit's sample slope, with its 95 % interval, in
    ``fit.population``, and ``rank.participation_ratio_population``; the pass keeps 32 row groups for its
    sampling curve, ``fit.population.sampling_curve``; its bootstrap is seeded by ``ci_seed``),
    ``shuffled_control`` (``control_seed``), ``partition_isotropy`` (a second pass; ``scale``
    ``seed | none``), ``isoscore``. ``rankme``: RankMe needs the uncentred spectrum, a second d x d
    eigendecomposition; None (default) computes it when that costs little (``centered=False``, or
    the matrix decomposed, n x n or d x d, is at most 1024 wide), True always, False never; ``rank.rankme_source``
    says which. ``top``: K computes only the leading K eigenvalues (block Lanczos, each within
    1e-12 relative of the full decomposition), 0 all of them, None (default) the leading ones
    automatically when d >= 4096, every window is ``K1:K2`` ending at or below d / 16 and the
    participation ratio is at most d / 2 (on flatter spectra Krylov methods are slower); the ranks
    that need every eigenvalue are then marked in ``rank.exactness`` (the entropy rank is an
    interval in ``rank.bounds``; RankMe is not available). ``eigenvalues=True``: ``data`` is a list
    of eigenvalues. The reading options are described in the module docstring.
    """
    check_bool("eigenvalues", eigenvalues)
    opts, read = fit_and_read_options(dict(given), options, eigenvalues=eigenvalues)
    ci, population, top, spikes, isoscore = opts.ci, opts.population, opts.top, opts.spikes, opts.isoscore
    shuffled_control, partition_isotropy, scale = opts.shuffled_control, opts.partition_isotropy, opts.scale
    ci_replicates, ci_seed, control_seed = opts.ci_replicates, opts.ci_seed, opts.control_seed
    opening = open_input(data, eigenvalues=eigenvalues)  # (what the input is, told once)
    if opening.kind == "eigenvalues":
        return _from_eigenvalues("fit", data, opts)
    if population:  # (its quantiles and incomplete gamma: started now, done by the time the pass is)
        threads.import_in_background("scipy.special")
    clock = Stopwatch()
    control = logz = scale_value = None
    with Input(opening, read) as inp:
        # the row groups the standard errors read (and --ci, --population): kept whenever each holds a few rows
        # (a checkpoint's weight matrix is no sample of rows, in either convention: no text runs through its rows
        # for the groups to measure; its errors stay first order, as cheap: a 4,096-wide one took 17.7 s with the
        # groups against 5.1 s without)
        weights = opts.convention.is_weightwatcher or inp.info.format in CHECKPOINT_FORMATS
        grouped = inp.n_selected >= fit_steps.GROUPED_ERRORS_ROWS and not weights
        groups = BOOTSTRAP_GROUPS if ci or population else fit_steps.ERROR_GROUPS if grouped else 0
        first = inp.first_pass(groups=groups, min_blocks=groups, cosine=True, progress=progress)
        clock.mark("read_accumulate_s")
        k, reason = _top_route(top, first, opts, opts.needs_all, centered=read.centered)
        main, reduction = fit_steps.spectrum_and_reduction_of(first, centered=read.centered, ddof=read.ddof, top=k,
                                                              top_reason=reason, keep=not opts.own_matrices)
        clock.mark("eigen_s")
        if partition_isotropy:
            logz, scale_value = partition_pass(inp, first, scale=scale, progress=progress)
        if shuffled_control:
            control = fit_steps.shuffled_control(inp, first, main, seed=control_seed, centered=read.centered,
                                             ddof=read.ddof)
        sums = fit_steps.coordinate_sums(inp, first, main, centered=read.centered, ddof=read.ddof,
                                         route=opts.population_route, progress=progress) if population else None
        if partition_isotropy or shuffled_control or (first.rows is None and isinstance(sums, ProjectionMoments)):
            clock.mark("second_pass_s")
    weightwatcher = opts.convention.is_weightwatcher
    # (a weight matrix's rows are not a sample: no sampling bias to warn of)
    warnings = spectrum_warnings(main, first, population=bool(population), sample=not weightwatcher)
    iso = isotropy_of(first, main, logz=logz, scale=scale, scale_value=scale_value, isoscore=isoscore)
    if iso.zero_rows:
        warnings.append(f"{iso.zero_rows} all-zero row(s): excluded from the mean cosine and the mean norm, but "
                        "counted in the covariance; if they are padding, remove them before the analysis")
    unc, rankme_source = _rankme_spectrum(first, main, centered=read.centered, rankme=opts.rankme, clock=clock)
    opts, said = opts.for_matrix(first.n_rows, main.n_features)  # (the convention's floor and skips, if any)
    warnings += said
    suite = run_suite(main, opts, uncentered=unc, rankme_source=rankme_source)
    warnings += [*suite.warnings, *near_null_warning(main, suite, density=opts.density)]
    warnings += sequence_tokens_warning(inp.info.details.get("sequence") or {}, grouped=bool(first.groups))
    if ci:
        clock.mark("analysis_s")
        suite = with_bootstrap(suite, first, opts, centered=read.centered, ddof=read.ddof, replicates=ci_replicates,
                               seed=ci_seed, warnings=warnings, top=main.top is not None)
        clock.mark("bootstrap_s")
    if population:
        clock.mark("analysis_s")
        suite = fit_steps.with_population(suite, first, main, centered=read.centered, ddof=read.ddof, seed=ci_seed,
                                      warnings=warnings, eigen_seconds=clock.laps.get("eigen_s"),
                                      route=opts.population_route, projections=sums)
        clock.mark("population_s")
    clock.mark("analysis_s")
    with_se, iso_se = fit_steps.with_uncertainty(suite, iso, first, main, centered=read.centered, isoscore=isoscore,
                                             warnings=warnings, sample=not weights, reduction=reduction)
    del reduction  # (d^2 floats: not held through the steps after, nor kept beside steps with matrices of their own)
    suite = with_se if with_se is not None else suite
    iso = iso_se if iso_se is not None else iso
    clock.mark("uncertainty_s")
    found = None
    if spikes:
        found = fit_steps.spikes_of(suite, first, main, centered=read.centered, ddof=read.ddof, warnings=warnings)
        clock.mark("spikes_s")
    if ci and suite.fits:
        warnings += ci_coverage_warning((first.n_effective or first.n_rows) / main.n_features, population=population)
    warnings += control_window_warning(control, suite.fits)
    ww = _weight_metrics(first, main, suite, opts, centered=read.centered, ddof=read.ddof) if opts.density else None
    clock.mark("analysis_s")
    clock.note("peak_bytes_estimate", _peak_bytes(first, main.n_features, ci or population,
                                                  unc is not None and unc is not main, main))
    stated: dict[str, Any] = {
        **inp.options_report(), **opts.to_report(),
        "ci": {"replicates": ci_replicates, "seed": ci_seed, "level": 0.95} if ci else None,
        "population": {"replicates": fit_steps.POPULATION_REPLICATES, "seed": ci_seed, "level": 0.95,
                       "route": opts.population_route} if population else None}
    return assemble("fit", inp, first, main, options=stated, warnings=warnings, clock=clock, suite=suite,
                    control=control, isotropy=iso, weightwatcher=ww, spikes=found)


def _weight_metrics(first: Any, main: Any, suite: Any, opts: FitOptions, *, centered: bool, ddof: int) -> Any:
    """WeightWatcher's per-layer metrics of the matrix (its norms on ``W^T W``'s eigenvalues: spectra's times the
    rows, or the rows less ``ddof`` for a centred unweighted covariance), beside the density fit."""
    n = first.n_rows
    return weight_metrics_of(main, suite, opts, n_rows=n,
                              factor=float(n if not centered or first.weighted else n - ddof))


def weight_metrics_of(main: Any, suite: Any, opts: FitOptions, *, n_rows: int, factor: float) -> Any:
    """WeightWatcher's metrics of a spectrum of ``n_rows`` rows whose eigenvalues times ``factor`` are ``W^T W``'s."""
    from spectra_cli.analysis.weightwatcher import weight_metrics

    return weight_metrics(main.resolved(), n_rows=n_rows, n_features=main.n_features, sum_factor=factor,
                          density_alpha=suite.density.alpha if suite.density is not None else None,
                          alpha_range=opts.alpha_range, raw=main.eigenvalues if main.top is None else None,
                          density=suite.density)


@keywords_checked
@reports_progress
def isotropy(
    data: Any,
    *,
    scale: str = "seed",
    isoscore: bool = False,
    progress: Progress | None = None,
    **reading: Unpack[ReadKeywords],
) -> Report:
    """Partition isotropy (two streamed passes; ``scale`` ``seed | none``), the exact mean cosine,
    top-PC share, mean-norm ratio and, with ``isoscore``, IsoScore. The covariance is centred with
    ddof 1. The reading options are described in the module docstring."""
    read = ReadOptions.create(refuse=ISOTROPY_REFUSES, **reading)
    check_scale(scale)
    clock = Stopwatch()
    with Input(data, read) as inp:
        groups = fit_steps.ERROR_GROUPS if inp.n_selected >= fit_steps.GROUPED_ERRORS_ROWS else 0  # (as fit reads them)
        first = inp.first_pass(groups=groups, min_blocks=groups, cosine=True, progress=progress)
        clock.mark("read_accumulate_s")
        main, reduction = fit_steps.spectrum_and_reduction_of(first, centered=True, ddof=read.ddof)
        clock.mark("eigen_s")
        logz, scale_value = partition_pass(inp, first, scale=scale, progress=progress,
                                           need=ISOTROPY_NEED)
        clock.mark("second_pass_s")
    warnings = spectrum_warnings(main, first)
    iso = isotropy_of(first, main, logz=logz, scale=scale, scale_value=scale_value, isoscore=isoscore)
    if iso.zero_rows:
        warnings.append(f"{iso.zero_rows} all-zero row(s): excluded from the mean cosine and the mean norm, but "
                        "counted in the covariance; if they are padding, remove them before the analysis")
    _, with_se = fit_steps.with_uncertainty(None, iso, first, main, centered=True, isoscore=isoscore, warnings=warnings,
                                            reduction=reduction)
    iso = with_se if with_se is not None else iso
    clock.mark("analysis_s")
    return assemble("isotropy", inp, first, main, options=inp.options_report(), warnings=warnings, clock=clock,
                    isotropy=iso)


@keywords_checked
def accumulate(
    data: Any,
    *,
    groups: int = 0,
    progress: Progress | None = None,
    **reading: Unpack[ReadKeywords],
) -> Accumulator:
    """One pass over ``data`` into an :class:`~spectra_cli.stream.accumulator.Accumulator`: the mergeable
    moments (and cosine sums, and ``groups`` bootstrap groups) that ``acc.save(path)`` writes as a
    moment file. Moment files of different shards, made anywhere, merge exactly:
    ``fit(["m0.npz", "m1.npz"])`` or ``spectra fit 'm*.npz'``. Reading options as for :func:`fit`."""
    groups = check_int("groups", groups, minimum=0)
    read = ReadOptions.create(refuse=ACCUMULATE_REFUSES, **reading)
    with Input(data, read) as inp:
        if inp.accumulator is not None:
            raise OptionError("the input is already accumulated moments; merge moment files with fit([...]) or "
                              "Accumulator.merge.")
        first = inp.first_pass(gram=False, groups=groups, cosine=True, progress=progress, min_rows=1)
        source = inp.source_report(first)
    assert first.moments is not None
    return Accumulator.of_pass(
        first.moments, groups=first.groups, n_groups=groups, weight_sq_sum=first.weight_sq_sum or first.n_rows,
        cosine=first.cosine, weighted=first.weighted, n_dropped=first.n_dropped, precision=read.precision,
        drop_nonfinite=read.drop_nonfinite, block_rows=inp.block_rows,
        sources=[{"path": source["path"], "fingerprint": source["fingerprint"], "rows": source["rows"],
                  "rows_used": first.n_rows, "layout": source["layout"]}])


@keywords_checked
def moments(
    data: Any,
    *,
    out: str | os.PathLike[str],
    groups: int = 0,
    progress: Progress | None = None,
    **reading: Unpack[ReadKeywords],
) -> Accumulator:
    """One pass over ``data`` into a moment file ``out`` (``.npz`` of plain arrays, no pickle, written
    atomically; never one of the inputs), returned as the :class:`~spectra_cli.stream.accumulator.Accumulator`
    it holds: what ``spectra moments`` does. Moment files of different shards merge exactly:
    ``fit(["m0.npz", "m1.npz"])``. ``groups``: also keep that many bootstrap groups (for ``ci=True`` on
    the merged moments). Reading options as for :func:`fit`."""
    if out is None or out == "":
        raise OptionError(f"moments needs {param('out')} FILE.npz.")
    path = moment_file.check_target(out, "out")  # before the pass: a bad target costs no reading
    read = ReadOptions.create(refuse=ACCUMULATE_REFUSES, **reading)
    opening = open_input(data)  # (resolved once: the output is checked against its files, and they are read)
    check_not_input(path, input_paths(opening.dataset, read), "out")
    acc = accumulate(opening, groups=groups, progress=progress, **reading)
    acc.save(path)
    return acc


def fit_and_read_options(given: dict[str, Any], options: FitOptions | None, *,
                         eigenvalues: bool = False) -> tuple[FitOptions, ReadOptions]:
    """A fit's options and its reading options from its keywords ``given``: the fit's made here by the one check
    (:meth:`FitOptions.create`), or ``options`` made already (a batch makes them once and hands them to each item;
    then no fit keyword beside them), the centring a convention sets applied to the reading."""
    reading: dict[str, Any] = {k: v for k, v in given.items() if k not in FIT_KEYWORDS}
    if options is None:
        options = FitOptions.create(centered=reading.get("centered"), eigenvalues=eigenvalues,
                                    **{k: v for k, v in given.items() if k in FIT_KEYWORDS})
    elif not isinstance(options, FitOptions) or any(k in FIT_KEYWORDS for k in given):
        raise OptionError(f"{param('options')} is a FitOptions made by FitOptions.create, given without fit "
                          "keywords.")
    else:
        options.check_call(centered=reading.get("centered"), eigenvalues=eigenvalues)
    if options.centered is not None:  # (the convention's centring: WeightWatcher's uncentred W^T W)
        reading["centered"] = options.centered
    return options, ReadOptions.create(**reading)


def _rankme_spectrum(first: Any, main: Any, *, centered: bool, rankme: bool | None,
                     clock: Stopwatch) -> tuple[Any, str | None]:
    """The uncentred spectrum RankMe is defined on (the singular values of the uncentred matrix), and where it
    came from: the main one when it is uncentred, else a second decomposition on the d x d route, made only when
    it is cheap (at most :data:`RANKME_AUTO_D` wide) or asked for; on the top-k route none."""
    d = main.n_features
    size = d if first.moments is not None else min(first.n_rows, d)  # of the second decomposition
    if main.top is not None:
        return None, None  # the top-k ranks say RankMe is not available
    if not centered:
        return main, "the main spectrum (already uncentred)"
    if rankme or (rankme is None and size <= RANKME_AUTO_D):
        clock.mark("analysis_s")
        unc = uncentered_of(first, main, centered=True)
        clock.mark("eigen_uncentered_s")
        return unc, ("a second eigendecomposition: the uncentred " + ("n x n Gram matrix" if first.moments is None
                                                                     else f"{d} x {d} second moment"))
    return None, (f"not computed: it would need a second {size} x {size} eigendecomposition "
                  f"({size} > {RANKME_AUTO_D}); ask for it with rankme=True (--rankme)")


def _peak_bytes(first: Any, d: int, ci: bool, second: bool, main: Any = None) -> float:
    """Bytes of the largest matrices alive at once: the d x d moments, the matrix handed to the
    eigensolver and its workspace (or the n x n Gram route), plus the bootstrap's group moments; on
    the top-k route the moments, the matrix, the Krylov basis (d x m) and the projection (m x m)."""
    if first.moments is None:
        n = first.n_rows
        return 8.0 * (n * d + 3 * n * n)
    groups = len(first.groups) if ci else 0
    if main is not None and main.top is not None:
        m = main.top.dimension + main.top.block
        return 8.0 * (d * d * (2 + groups) + d * m + m * m)
    return 8.0 * d * d * (3 + groups + (1 if second else 0))


def check_top(top: Any) -> int | None:
    """``top`` as an int (None: not given), or an OptionError (the fit keyword's constraint)."""
    return FIT_CONSTRAINTS["top"]("top", top)  # type: ignore[no-any-return]


def _top_route(top: int | None, first: Any, opts: FitOptions, needs_all: list[str], *,
               centered: bool = True) -> tuple[int | None, str]:
    """How many leading eigenvalues ``fit`` computes (None: all) and why."""
    from spectra_cli.eigen.decomposition import (
        TOP_AUTO_FRACTION,
        TOP_AUTO_MAX_PR,
        TOP_AUTO_MIN_D,
        participation_ratio_of,
    )

    if top == 0 or first.moments is None:
        return None, ""
    d = first.moments.d
    ends = opts.window_ends
    if top is not None:
        if ends is None:
            need = d // 10 if not opts.windows else None
            if need is not None and need > top:
                raise OptionError(f"{param('top', top)} computes {top} eigenvalues, but the default window "
                                  f"11..floor(d/10) reaches rank {need}; give {param('window')} or a larger "
                                  f"{param('top')}.")
        elif max(ends) > top:
            raise OptionError(f"{param('top', top)} computes {top} eigenvalues, but a window reaches rank "
                              f"{max(ends)}; give a larger {param('top')}.")
        return top, Message(f"asked: {param('top', top)}")
    if d < TOP_AUTO_MIN_D or ends is None or needs_all or max(ends) > d // TOP_AUTO_FRACTION:
        return None, ""
    pr = participation_ratio_of(first.moments, centered=centered)
    if pr > TOP_AUTO_MAX_PR * d:
        return None, (f"the top-k route was not taken: the spectrum is flat (participation ratio {pr / d:.2f} d > "
                      f"{TOP_AUTO_MAX_PR:g} d), where block Lanczos is slower than eigvalsh; top=K (--top K) forces it")
    k = max(ends)
    return k, (f"automatic: the fit windows end at rank {k} <= d/{TOP_AUTO_FRACTION} = {d // TOP_AUTO_FRACTION} "
               f"(d >= {TOP_AUTO_MIN_D}); top=0 (--top 0) computes every eigenvalue")


def report_of_spectrum(spec: Any, opts: FitOptions, *, info: SourceInfo, fingerprint: str, rows_used: int,
                       read: ReadOptions, n_rows: int, factor: float, source_extra: dict[str, Any] | None = None,
                       said: list[str] | None = None, labels: tuple[int, int, int] | None = None,
                       overrides: dict[str, Any] | None = None, started: float) -> Report:
    """A ``fit`` report of a spectrum computed here without rows (a LoRA change's small problem, a convolution's
    slices): every fit and rank of ``fit`` on it, and WeightWatcher's metrics (its eigenvalues are ``factor`` times
    the spectrum's; ``labels``: a convolution's) where the convention or ``density`` asks for them. Its ``source`` is
    ``info``'s, as a report of rows gives it (every row, none dropped), with ``source_extra`` beside."""
    import time

    from spectra_cli.sources.rows import RowSpec

    source = {**info.to_dict(), **RowSpec().to_dict(), "rows_used": rows_used, "rows_dropped": 0,
              "n_effective": None, "fingerprint": fingerprint, **(source_extra or {})}

    from spectra_cli.run.assemble import near_null_warning

    warnings = [*spectrum_warnings(spec, None, sample=False), *(said or [])]
    suite = run_suite(spec, opts)
    warnings += [*suite.warnings, *near_null_warning(spec, suite, density=opts.density)]
    ww = None
    if opts.density:
        from spectra_cli.analysis.weightwatcher import weight_metrics

        ww = weight_metrics(spec.resolved(), n_rows=n_rows, n_features=spec.n_features, sum_factor=factor,
                            density_alpha=suite.density.alpha if suite.density is not None else None,
                            alpha_range=opts.alpha_range, raw=spec.eigenvalues, density=suite.density, labels=labels,
                            overrides=overrides)
    emit_warnings(warnings)
    return Report(command="fit", source=SourceSection(source),
                  options=OptionsSection({**read.to_report(), "block_rows": None, **opts.to_report()}),
                  spectrum=spec, suite=suite, weightwatcher=ww, warnings=tuple(warnings),
                  timings={"analysis_s": time.perf_counter() - started})


def _from_eigenvalues(command: str, data: Any, opts: FitOptions | None) -> Report:
    """A spectrum computed elsewhere (``eigenvalues=True``)."""
    from spectra_cli.eigen.decomposition import spectrum_from_eigenvalues
    from spectra_cli.sources.base import SourceInfo
    from spectra_cli.sources.eigenvalues import read_eigenvalues

    clock = Stopwatch()
    if isinstance(data, os.PathLike):
        data = os.fspath(data)
    if isinstance(data, str):
        values = read_eigenvalues(data)
    else:
        from spectra_cli.sources.in_memory import as_array

        values = np.asarray(as_array(data, what="eigenvalues"), dtype=np.float64).ravel()
    spec = spectrum_from_eigenvalues(values)
    warnings = spectrum_warnings(spec, None)
    suite = run_suite(spec, opts) if opts is not None else None
    if suite is not None:
        warnings += [*suite.warnings, *near_null_warning(spec, suite, density=opts is not None and opts.density)]
    path = data if isinstance(data, str) else "<array>"
    info = SourceInfo(path=path, format="eigenvalues", shape=(values.size,), dtype="float64", n_rows=0,
                      n_features=values.size, layout="eigenvalues computed elsewhere")
    from spectra_cli.sources import fingerprint

    source = {**info.to_dict(), "rows": None, "sample": None, "seed": None, "rows_used": None, "rows_dropped": 0,
              "fingerprint": fingerprint(data) if isinstance(data, str) else None}
    options: dict[str, Any] = {"centered": True, "ddof": None, "weights": None, "precision": "float64",
                               "block_rows": None, "drop_nonfinite": False}
    if opts is not None:
        options.update({**opts.to_report(), "ci": None})
    emit_warnings(warnings)
    return Report(command=command, source=SourceSection(source), options=OptionsSection(options), spectrum=spec,
                  suite=suite,
                  warnings=tuple(warnings), timings=clock.timings())
