"""The library entry points the CLI commands call: ``spectrum`` and ``fit``.

Each opens the input, runs one streamed pass, and returns a :class:`Report`.
"""

from __future__ import annotations

import time
from dataclasses import replace
from typing import Any

import numpy as np

from spectra_cli.analysis.controls import ShuffledControl, meets_at, shuffled_spectrum
from spectra_cli.analysis.isotropy import LogZAccumulator, check_scale, directions
from spectra_cli.analysis.isotropy import summary as isotropy_summary
from spectra_cli.analysis.powerlaw import BootstrapCI
from spectra_cli.analysis.suite import FitOptions, run_suite
from spectra_cli.engine import Accumulated, accumulate
from spectra_cli.engine.local import Progress, second_pass
from spectra_cli.errors import FitError, OptionError, SpectraWarning
from spectra_cli.moments import Moments
from spectra_cli.results import Report
from spectra_cli.sources import (
    DEFAULT_BLOCK_ROWS,
    LogitsWeights,
    RowSpec,
    Source,
    SourceInfo,
    WeightsFile,
    fingerprint,
    open_source,
)
from spectra_cli.sources.array import ArraySource
from spectra_cli.spectrum import (
    NEAR_NULL_GAP,
    Spectrum,
    spectrum_from_eigenvalues,
    spectrum_from_moments,
    spectrum_from_rows,
)

# n/d below which the tail of a sample covariance is visibly biased (Marchenko–Pastur).
SAMPLING_WARN_RATIO = 10.0
# Rows the shuffled control may hold in memory (float64): beyond this it uses a uniform sample.
CONTROL_MEMORY = 256 << 20
BOOTSTRAP_GROUPS = 32


def _open(
    data: str | np.ndarray, *, key: str | None, column: str | None, columns: list[str] | None,
    weight_column: str | None, weights: np.ndarray | None,
) -> Source:
    if isinstance(data, np.ndarray):
        return ArraySource(data, weights=weights)
    return open_source(data, key=key, column=column, columns=columns, weight_column=weight_column)


def _spectrum(acc: Accumulated, *, centered: bool, ddof: int, precision: str) -> Spectrum:
    if acc.moments is not None:
        return spectrum_from_moments(acc.moments, centered=centered, ddof=ddof, precision=precision)
    assert acc.rows is not None
    return spectrum_from_rows(acc.rows, acc.weights, centered=centered, ddof=ddof, precision=precision)


def spectrum_warnings(spec: Spectrum, acc: Accumulated | None) -> list[str]:
    out: list[str] = []
    d = spec.n_features
    if acc is not None and acc.n_dropped:
        out.append(f"{acc.n_dropped} row(s) with NaN or inf entries were dropped (--drop-nonfinite)")
    if spec.structural_zeros:
        out.append(
            f"n = {spec.n_samples} < d = {d}: at most {spec.sampling_rank} non-zero eigenvalues; "
            f"{spec.structural_zeros} are structural zeros and not listed"
        )
    elif spec.n_over_d is not None and spec.n_over_d < SAMPLING_WARN_RATIO:
        out.append(
            f"n/d = {spec.n_over_d:.3g} < {SAMPLING_WARN_RATIO:g}: tail eigenvalues of the sample covariance "
            "are biased by finite sampling (Marchenko-Pastur)"
        )
    const = acc.constant_columns() if acc is not None else 0
    if const:
        out.append(f"{const} constant column(s): each adds an exactly zero eigenvalue")
    below = spec.eigenvalues.size - spec.numerical_rank
    if below:
        out.append(
            f"{below} eigenvalue(s) at or below the numerical floor {spec.numerical_floor:.3g}: "
            "null directions (e.g. LayerNorm's, constant or dependent columns); they enter no logarithm or fit"
        )
    near = spec.near_null_count
    if near:
        k = spec.numerical_rank - near
        out.append(
            f"the last {near} resolved eigenvalue(s) lie more than {1 / NEAR_NULL_GAP:.0e} times below rank {k}: "
            "near-null directions (e.g. LayerNorm's, kept above zero by float16 rounding); excluded from fits"
        )
    return out


def _control(
    src: Source, spec: RowSpec, wfile: WeightsFile | LogitsWeights | None, real: Spectrum, *, seed: int, centered: bool,
    ddof: int, precision: str, block_rows: int,
) -> ShuffledControl:
    """A second pass that gathers rows (all, or a uniform sample within CONTROL_MEMORY)."""
    d = src.info.n_features
    n_sel = spec.n_selected(src.info.n_rows)
    budget = max(2, CONTROL_MEMORY // (8 * d))
    sub = n_sel > budget
    cspec = replace(spec, sample=min(n_sel, budget), seed=seed) if sub else spec
    rows: list[np.ndarray] = []
    ws: list[np.ndarray] = []
    for X, w in second_pass(src, cspec, wfile, block_rows, drop_nonfinite=True):
        rows.append(np.array(X, dtype=np.float64))
        if w is not None:
            ws.append(np.array(w, dtype=np.float64))
    X = np.concatenate(rows)
    w = np.concatenate(ws) if ws else None
    ctrl = shuffled_spectrum(X, w, seed=seed, centered=centered, ddof=ddof, precision=precision)
    return ShuffledControl(ctrl.eigenvalues, len(X), sub, seed, meets_at(real, ctrl))


def _run(
    command: str,
    data: str | np.ndarray,
    *,
    key: str | None = None,
    column: str | None = None,
    columns: list[str] | None = None,
    weights: str | np.ndarray | None = None,
    weight_column: str | None = None,
    rows: str | None = None,
    sample: int | None = None,
    seed: int = 0,
    centered: bool = True,
    ddof: int = 1,
    precision: str = "float64",
    block_rows: int = DEFAULT_BLOCK_ROWS,
    drop_nonfinite: bool = False,
    fit_options: FitOptions | None = None,
    ci: bool = False,
    ci_replicates: int = 200,
    ci_seed: int = 0,
    shuffled_control: bool = False,
    control_seed: int = 0,
    eigenvalues: bool = False,
    partition_isotropy: bool = False,
    logits: str | None = None,
    temperature: float = 1.0,
    scale: str = "seed",
    isoscore: bool = False,
    progress: Progress | None = None,
) -> Report:
    t0 = time.perf_counter()
    check_scale(scale)
    if command == "isotropy":
        partition_isotropy = True
    if ddof < 0:
        raise OptionError(f"--ddof {ddof} must be 0 or a positive integer.")
    if sum(x is not None for x in (weights, weight_column, logits)) > 1:
        raise OptionError("use one of --weights, --weight-column and --logits, not several.")
    if ci and ci_replicates < 10:
        raise OptionError(f"--ci-replicates {ci_replicates} must be at least 10.")
    opts = fit_options or FitOptions()
    if command == "fit":
        opts.validate()
    if eigenvalues:
        return _run_eigenvalues(command, data, opts, ci=ci, shuffled_control=shuffled_control, t0=t0)
    spec = RowSpec.parse(rows, sample, seed)
    arr_w = weights if isinstance(weights, np.ndarray) else None
    control = None
    with _open(data, key=key, column=column, columns=columns, weight_column=weight_column, weights=arr_w) as src:
        wfile: WeightsFile | LogitsWeights | None = None
        if isinstance(weights, str):
            wfile = WeightsFile(weights, src.info.n_rows)
        elif logits is not None:
            wfile = LogitsWeights(logits, src.info.n_rows, temperature)
        acc = accumulate(src, spec, weights=wfile, block_rows=block_rows, precision=precision,
                         drop_nonfinite=drop_nonfinite, groups=BOOTSTRAP_GROUPS if ci else 0,
                         cosine=command in ("fit", "isotropy"), progress=progress)
        info = src.info
        t1 = time.perf_counter()
        main = _spectrum(acc, centered=centered, ddof=ddof, precision=precision)
        t_eig = time.perf_counter()
        logz = None
        scale_value = None
        if partition_isotropy:
            logz, scale_value = _partition_pass(src, spec, wfile, acc, scale=scale, block_rows=block_rows,
                                                precision=precision, progress=progress)
        if shuffled_control:
            control = _control(src, spec, wfile, main, seed=control_seed, centered=centered, ddof=ddof,
                               precision=precision, block_rows=block_rows)
    t2 = time.perf_counter()
    warnings = spectrum_warnings(main, acc)
    iso = None
    if command in ("fit", "isotropy"):
        mean = _mean(acc)
        iso = isotropy_summary(main.resolved(), main.n_features, mean, acc.cosine, logz=logz, scale=scale,
                               scale_value=scale_value, with_isoscore=isoscore)
        if iso.zero_rows:
            warnings.append(f"{iso.zero_rows} all-zero row(s): excluded from the mean cosine and the mean norm")
    suite = None
    timings: dict[str, float] = {}
    if command == "fit":
        # RankMe is defined on the singular values of the uncentred matrix.
        unc = main if not centered else _spectrum(acc, centered=False, ddof=0, precision=precision)
        suite = run_suite(main, opts, uncentered=unc)
        warnings += suite.warnings
        if ci:
            tb = time.perf_counter()
            suite = _with_bootstrap(suite, acc, opts, centered=centered, ddof=ddof, replicates=ci_replicates,
                                    seed=ci_seed, warnings=warnings)
            timings["bootstrap_s"] = time.perf_counter() - tb
    if control is not None and control.meets_at_rank is not None and suite is not None and suite.fits:
        k2 = suite.fits[0].window.k_max
        if k2 >= control.meets_at_rank:
            warnings.append(
                f"the fit window reaches rank {k2}, past rank {control.meets_at_rank} where the spectrum meets "
                "the shuffled control (finite-sampling noise)"
            )
    emit_warnings(warnings)
    source = info.to_dict()
    source.update(spec.to_dict())
    source["rows_used"] = acc.n_rows
    source["rows_dropped"] = acc.n_dropped
    source["fingerprint"] = fingerprint(data) if isinstance(data, str) else None
    t3 = time.perf_counter()
    timings = {"read_accumulate_s": t1 - t0, "eigen_s": t_eig - t1,
               **({"second_pass_s": t2 - t_eig} if partition_isotropy or shuffled_control else {}),
               **timings, "analysis_s": t3 - t2, "total_s": t3 - t0}
    return Report(
        command=command,
        source=source,
        options=report_options(command, centered=centered, ddof=ddof, precision=precision, block_rows=block_rows,
                         weights=weights, weight_column=weight_column, drop_nonfinite=drop_nonfinite, opts=opts,
                         ci=ci, ci_replicates=ci_replicates, ci_seed=ci_seed, logits=logits,
                         temperature=temperature),
        spectrum=main,
        suite=suite,
        control=control,
        isotropy=iso,
        warnings=tuple(warnings),
        timings=timings,
    )


def emit_warnings(messages: list[str]) -> None:
    """Each suspect finding is also a SpectraWarning for library users (STYLE: never silent)."""
    import warnings as _warnings

    for m in messages:
        _warnings.warn(m, SpectraWarning, stacklevel=3)


def _mean(acc: Accumulated) -> np.ndarray:
    if acc.moments is not None:
        return acc.moments.mean * acc.moments.scale
    assert acc.rows is not None
    if acc.weights is not None:
        return (acc.weights @ acc.rows) / acc.weights.sum()
    return acc.rows.mean(axis=0)


def _partition_pass(src: Source, spec: RowSpec, wfile: WeightsFile | LogitsWeights | None, acc: Accumulated, *,
                    scale: str, block_rows: int, precision: str,
                    progress: Progress | None) -> tuple[LogZAccumulator, float]:
    """The second pass of partition isotropy: log Z(c) for every direction, streamed.

    The scores ``x^T c / s`` are computed in the run's precision (float32 halves the cost and
    adds a relative error of about 1e-7 |score| to log Z); the log-sum-exp is always float64."""
    m = acc.moments
    if m is None:
        assert acc.rows is not None
        m = Moments.from_block(acc.rows, acc.weights)
    V, s = directions(m, scale)
    logz = LogZAccumulator(V, s, dtype=np.float32 if precision == "float32" else np.float64)
    if acc.rows is not None:
        logz.update(acc.rows, acc.weights)
        return logz, s
    for X, w in second_pass(src, spec, wfile, block_rows, drop_nonfinite=acc.n_dropped > 0, progress=progress):
        logz.update(X, w)
    return logz, s


def _with_bootstrap(suite: Any, acc: Accumulated, opts: FitOptions, *, centered: bool, ddof: int,
                    replicates: int, seed: int, warnings: list[str]) -> Any:
    from spectra_cli.analysis.bootstrap import bootstrap_statistic, intervals
    from spectra_cli.analysis.powerlaw import fit_model, with_ci

    if acc.moments is None:
        raise FitError("--ci needs more rows than features (the bootstrap reuses d x d block moments).")
    if not suite.fits:
        return suite
    groups = acc.groups
    if len(groups) < 10:
        warnings.append(f"the bootstrap has only {len(groups)} groups of rows; the interval is coarse")
    fits = []
    for f in suite.fits:
        def stat(lam: np.ndarray, window: Any = f.window) -> float:
            return fit_model(lam, window, method=opts.method, model=opts.model, degree=opts.degree).alpha

        values = bootstrap_statistic(groups, stat, centered=centered, ddof=ddof, replicates=replicates, seed=seed)
        lo, hi, p_lo, p_hi, bias = intervals(values, f.alpha)
        fits.append(with_ci(f, BootstrapCI(0.95, lo, hi, p_lo, p_hi, bias, int(np.isfinite(values).sum()),
                                           len(groups), seed)))
    return replace(suite, fits=tuple(fits))


def _run_eigenvalues(command: str, data: str | np.ndarray, opts: FitOptions, *, ci: bool,
                     shuffled_control: bool, t0: float) -> Report:
    from spectra_cli.sources.eigenvalues import read_eigenvalues

    if ci or shuffled_control:
        raise OptionError("--ci and --shuffled-control need the data matrix, not --eigenvalues.")
    values = np.asarray(data, dtype=np.float64).ravel() if isinstance(data, np.ndarray) else read_eigenvalues(data)
    spec = spectrum_from_eigenvalues(values)
    warnings = spectrum_warnings(spec, None)
    suite = run_suite(spec, opts) if command == "fit" else None
    if suite is not None:
        warnings += suite.warnings
    emit_warnings(warnings)
    path = data if isinstance(data, str) else "<array>"
    info = SourceInfo(path=path, format="eigenvalues", shape=(values.size,), dtype="float64", n_rows=0,
                      n_features=values.size, layout="eigenvalues computed elsewhere")
    source = info.to_dict()
    source.update({"rows": None, "sample": None, "seed": None, "rows_used": None, "rows_dropped": 0,
                   "fingerprint": fingerprint(data) if isinstance(data, str) else None})
    t = time.perf_counter() - t0
    return Report(command=command, source=source,
                  options=report_options(command, centered=True, ddof=None, precision="float64", block_rows=None,
                                   weights=None, weight_column=None, drop_nonfinite=False, opts=opts, ci=False,
                                   ci_replicates=0, ci_seed=0),
                  spectrum=spec, suite=suite, warnings=tuple(warnings), timings={"total_s": t})


def report_options(command: str, *, centered: bool, ddof: int | None, precision: str, block_rows: int | None,
             weights: Any, weight_column: str | None, drop_nonfinite: bool, opts: FitOptions | None, ci: bool,
             ci_replicates: int, ci_seed: int, logits: str | None = None,
             temperature: float = 1.0) -> dict[str, Any]:
    if logits is not None:
        wdesc: Any = {"logits": logits, "temperature": temperature, "normalised": "p = softmax(z / T)"}
    elif isinstance(weights, str):
        wdesc = {"file": weights, "normalised": "p = w / sum w"}
    elif weight_column is not None:
        wdesc = {"column": weight_column, "normalised": "p = w / sum w"}
    elif isinstance(weights, np.ndarray):
        wdesc = {"array": True, "normalised": "p = w / sum w"}
    else:
        wdesc = None
    out: dict[str, Any] = {
        "centered": centered,
        "ddof": ddof if centered and wdesc is None else None,
        "weights": wdesc,
        "precision": precision,
        "block_rows": block_rows,
        "drop_nonfinite": drop_nonfinite,
    }
    if command == "fit" and opts is not None:
        out.update({
            "window": list(opts.windows) or ["default"],
            "method": opts.method,
            "model": opts.model,
            "degree": opts.degree,
            "ci": {"replicates": ci_replicates, "seed": ci_seed, "level": 0.95} if ci else None,
            "auto_tolerance": opts.auto_tolerance,
        })
    return out


def isotropy(data: str | np.ndarray, *, scale: str = "seed", **options: Any) -> Report:
    """Partition isotropy (two streamed passes), mean cosine, top-PC share, mean-norm ratio, IsoScore."""
    return _run("isotropy", data, scale=scale, **options)


def spectrum(data: str | np.ndarray, **options: Any) -> Report:
    """Eigenvalues, explained variance and floors of ``data`` (a path or an array).

    Options are those of :func:`fit` that concern reading and the spectrum.
    """
    return _run("spectrum", data, **options)


def fit(
    data: str | np.ndarray,
    *,
    window: str | list[str] | tuple[str, ...] | None = None,
    method: str = "ols",
    model: str = "power-law",
    degree: int = 2,
    density: bool = False,
    auto_tolerance: float = 0.05,
    counting: list[float] | tuple[float, ...] = (),
    capacity: list[float] | tuple[float, ...] = (),
    **options: Any,
) -> Report:
    """``spectrum`` plus the power-law fits, model comparison, local slope and effective ranks.

    ``window`` is ``"K1:K2"``, ``"auto"`` or a list of them (one fit each); reading options
    (``rows``, ``sample``, ``weights``, ``precision``, ...) and ``ci``, ``shuffled_control``,
    ``eigenvalues`` pass through.
    """
    windows = (window,) if isinstance(window, str) else tuple(window or ())
    opts = FitOptions(windows=windows, method=method, model=model, degree=degree, auto_tolerance=auto_tolerance,
                      density=density, counting=tuple(counting), capacity=tuple(capacity))
    return _run("fit", data, fit_options=opts, **options)
