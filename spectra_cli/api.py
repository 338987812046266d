"""The library entry points the CLI commands call: ``spectrum`` and ``fit``.

Each opens the input, runs one streamed pass, and returns a :class:`Report`.
"""

from __future__ import annotations

import hashlib
import os
import time
from typing import Any

import numpy as np

from spectra_cli.analysis.powerlaw import fit_ols, parse_window, resolve_window
from spectra_cli.analysis.rank import (
    EffectiveRanks,
    entropy_rank,
    participation_ratio,
    rankme,
    stable_rank,
)
from spectra_cli.engine import Accumulated, accumulate
from spectra_cli.engine.local import Progress
from spectra_cli.errors import OptionError
from spectra_cli.results import Report
from spectra_cli.sources import DEFAULT_BLOCK_ROWS, RowSpec, Source, WeightsFile, open_source
from spectra_cli.sources.array import ArraySource
from spectra_cli.spectrum import Spectrum, spectrum_from_moments, spectrum_from_rows

# n/d below which the tail of a sample covariance is visibly biased (Marchenko–Pastur).
SAMPLING_WARN_RATIO = 10.0
# A drop by this factor between consecutive resolved eigenvalues marks near-null directions.
NEAR_NULL_GAP = 1e-4


def fingerprint(path: str) -> str:
    """Cheap identity of an input: sizes and modification times of its files."""
    h = hashlib.sha256()
    paths = [path]
    if os.path.isdir(path):
        paths = sorted(os.path.join(r, f) for r, _, fs in os.walk(path) for f in fs)
    for p in paths:
        try:
            st = os.stat(p)
        except OSError:
            continue
        h.update(f"{os.path.abspath(p)}|{st.st_size}|{st.st_mtime_ns};".encode())
    return h.hexdigest()[:16]


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


def spectrum_warnings(spec: Spectrum, acc: Accumulated) -> list[str]:
    out: list[str] = []
    d = spec.n_features
    if acc.n_dropped:
        out.append(f"{acc.n_dropped} row(s) with NaN or inf entries were dropped (--drop-nonfinite)")
    if spec.structural_zeros:
        out.append(
            f"n = {spec.n_samples} < d = {d}: at most {spec.sampling_rank} non-zero eigenvalues; "
            f"{spec.structural_zeros} are structural zeros and not listed"
        )
    elif spec.n_over_d < SAMPLING_WARN_RATIO:
        out.append(
            f"n/d = {spec.n_over_d:.3g} < {SAMPLING_WARN_RATIO:g}: tail eigenvalues of the sample covariance "
            "are biased by finite sampling (Marchenko-Pastur)"
        )
    const = acc.constant_columns()
    if const:
        out.append(f"{const} constant column(s): each adds an exactly zero eigenvalue")
    below = spec.eigenvalues.size - spec.numerical_rank
    if below:
        out.append(
            f"{below} eigenvalue(s) at or below the numerical floor {spec.numerical_floor:.3g}: "
            "null directions (e.g. LayerNorm's, constant or dependent columns); they enter no logarithm or fit"
        )
    lam = spec.eigenvalues[: spec.numerical_rank]
    if lam.size > 2:
        ratios = lam[1:] / lam[:-1]
        gaps = np.flatnonzero(ratios < NEAR_NULL_GAP)
        if gaps.size:
            k = int(gaps[-1]) + 1
            out.append(
                f"the last {lam.size - k} resolved eigenvalue(s) lie more than {1 / NEAR_NULL_GAP:.0e} times "
                f"below rank {k}: near-null directions (e.g. LayerNorm's, kept above zero by float16 rounding)"
            )
    return out


def _options(
    *, centered: bool, ddof: int, precision: str, block_rows: int, weights_desc: Any,
    drop_nonfinite: bool, window: str | None = None,
) -> dict[str, Any]:
    out: dict[str, Any] = {
        "centered": centered,
        "ddof": ddof if centered and weights_desc is None else None,
        "weights": weights_desc,
        "precision": precision,
        "block_rows": block_rows,
        "drop_nonfinite": drop_nonfinite,
    }
    if window is not None:
        out["window"] = window
    return out


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
    window: str | None = None,
    progress: Progress | None = None,
) -> Report:
    t0 = time.perf_counter()
    if ddof < 0:
        raise OptionError(f"--ddof {ddof} must be 0 or a positive integer.")
    if weights is not None and weight_column is not None:
        raise OptionError("use --weights (a file) or --weight-column (a Parquet column), not both.")
    requested = parse_window(window) if window is not None else None
    spec = RowSpec.parse(rows, sample, seed)
    arr_w = weights if isinstance(weights, np.ndarray) else None
    with _open(data, key=key, column=column, columns=columns, weight_column=weight_column, weights=arr_w) as src:
        wfile = WeightsFile(weights, src.info.n_rows) if isinstance(weights, str) else None
        acc = accumulate(src, spec, weights=wfile, block_rows=block_rows, precision=precision,
                         drop_nonfinite=drop_nonfinite, progress=progress)
        info = src.info
    t1 = time.perf_counter()
    main = _spectrum(acc, centered=centered, ddof=ddof, precision=precision)
    t2 = time.perf_counter()
    warnings = spectrum_warnings(main, acc)
    fit = rank = None
    if command == "fit":
        win, win_warnings = resolve_window(requested, n_features=main.n_features, usable_rank=main.usable_rank)
        warnings += win_warnings
        fit = fit_ols(main.eigenvalues, win)
        lam = main.resolved()
        # RankMe is defined on the singular values of the uncentred matrix.
        unc = main if not centered else _spectrum(acc, centered=False, ddof=0, precision=precision)
        rank = EffectiveRanks(
            participation_ratio=participation_ratio(lam),
            entropy_rank=entropy_rank(lam),
            rankme=rankme(unc.eigenvalues, unc.numerical_floor),
            stable_rank=stable_rank(lam),
            numerical_rank=main.numerical_rank,
            k90=main.k_for(0.90),
            k95=main.k_for(0.95),
            k99=main.k_for(0.99),
        )
    t3 = time.perf_counter()
    if isinstance(weights, str):
        wdesc: Any = {"file": weights, "normalised": "p = w / sum w"}
    elif weight_column is not None:
        wdesc = {"column": weight_column, "normalised": "p = w / sum w"}
    elif arr_w is not None:
        wdesc = {"array": True, "normalised": "p = w / sum w"}
    else:
        wdesc = None
    source = info.to_dict()
    source.update(spec.to_dict())
    source["rows_used"] = acc.n_rows
    source["rows_dropped"] = acc.n_dropped
    source["fingerprint"] = fingerprint(data) if isinstance(data, str) else None
    return Report(
        command=command,
        source=source,
        options=_options(centered=centered, ddof=ddof, precision=precision, block_rows=block_rows,
                         weights_desc=wdesc, drop_nonfinite=drop_nonfinite,
                         window=(window or "default") if command == "fit" else None),
        spectrum=main,
        fit=fit,
        rank=rank,
        warnings=tuple(warnings),
        timings={"read_accumulate_s": t1 - t0, "eigen_s": t2 - t1, "analysis_s": t3 - t2,
                 "total_s": time.perf_counter() - t0},
    )


def spectrum(data: str | np.ndarray, **options: Any) -> Report:
    """Eigenvalues, explained variance and floors of ``data`` (a path or an array)."""
    options.pop("window", None)
    return _run("spectrum", data, **options)


def fit(data: str | np.ndarray, **options: Any) -> Report:
    """``spectrum`` plus the power-law fit and every effective rank."""
    return _run("fit", data, **options)
