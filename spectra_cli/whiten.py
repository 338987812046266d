"""``spectra whiten``: fit (or load) a whitening transform, stream the data through it to a
file, and report the spectrum and isotropy before and after.

Pass 1 accumulates the moments (and the cosine sums); pass 2 reads the rows again, applies
the transform, writes the output atomically and accumulates the after-cosine (and, with
``partition_isotropy``, ``log Z`` before and after). The after-spectrum is ``M^T C M``,
exact for the transform (the written file adds only its dtype's rounding).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from spectra_cli.analysis.isotropy import CosineAccumulator, Isotropy, LogZAccumulator, check_scale, directions
from spectra_cli.analysis.isotropy import summary as isotropy_summary
from spectra_cli.analysis.whitening import WhiteningTransform, fit_transform
from spectra_cli.api import emit_warnings, report_options, spectrum_warnings
from spectra_cli.engine import accumulate
from spectra_cli.engine.local import Progress, second_pass
from spectra_cli.errors import InputError, OptionError
from spectra_cli.moments import Moments
from spectra_cli.results import Report
from spectra_cli.sinks import check_target, write_matrix
from spectra_cli.sources import (
    DEFAULT_BLOCK_ROWS,
    LogitsWeights,
    RowSpec,
    WeightsFile,
    fingerprint,
    open_source,
)
from spectra_cli.spectrum import Spectrum, describe, floor_for, spectrum_from_moments


@dataclass(frozen=True, slots=True)
class WhiteningResult:
    transform: WhiteningTransform
    transform_from: str
    saved_to: str | None
    output: dict[str, Any]
    spectrum_after: Spectrum
    isotropy_after: Isotropy
    zeroed_directions: int

    def to_dict(self) -> dict[str, Any]:
        t = self.transform
        return {
            "method": t.method,
            "definition": {
                "zca": "y = (x - mu) V diag(1/sqrt(lambda + eps)) V^T",
                "pca": "y = (x - mu) V_k diag(1/sqrt(lambda_k + eps))",
                "abtt": "y = (x - mu) - (x - mu) V_k V_k^T (all-but-the-top, Mu & Viswanath)",
            }[t.method],
            "eps": t.eps,
            "k": t.k,
            "d_in": t.d_in,
            "d_out": t.d_out,
            "zeroed_directions": self.zeroed_directions,
            "zeroed_definition": "directions past the usable rank get scale 0 (never 1/sqrt of a floor eigenvalue)",
            "transform": self.transform_from,
            "saved_to": self.saved_to,
            "output": self.output,
            "spectrum_after": self.spectrum_after.to_dict(),
            "spectrum_after_definition": "eigenvalues of M^T C M, the covariance of the transformed rows "
            "(exact for the transform; the written file adds its dtype's rounding)",
            "isotropy_after": self.isotropy_after.to_dict(),
        }


def _after_spectrum(C_after: np.ndarray, n: int, centered_def: str) -> Spectrum:
    lam = np.linalg.eigvalsh(C_after)[::-1]
    d = C_after.shape[0]
    floor = floor_for(lam, d, 0, "float64")
    return Spectrum(lam, n, d, centered_def, "float64", floor, min(n - 1, d), 0,
                    "eigvalsh of M^T C M (analytic, from the input's moments)")


def whiten(
    data: str,
    *,
    out: str,
    method: str = "zca",
    k: int | None = None,
    eps: float = 0.0,
    transform: str | None = None,
    save_transform: str | None = None,
    partition_isotropy: bool = False,
    scale: str = "seed",
    key: str | None = None,
    column: str | None = None,
    columns: list[str] | None = None,
    weights: str | None = None,
    weight_column: str | None = None,
    logits: str | None = None,
    temperature: float = 1.0,
    rows: str | None = None,
    sample: int | None = None,
    seed: int = 0,
    ddof: int = 1,
    block_rows: int = DEFAULT_BLOCK_ROWS,
    drop_nonfinite: bool = False,
    progress: Progress | None = None,
) -> Report:
    t0 = time.perf_counter()
    check_target(out)
    check_scale(scale)
    if save_transform is not None:
        WhiteningTransform.check_target(save_transform)
    if transform is not None and (k is not None or eps != 0.0 or method != "zca"):
        raise OptionError("--transform applies a saved transform; --method, --k and --eps come from it.")
    if sum(x is not None for x in (weights, weight_column, logits)) > 1:
        raise OptionError("use one of --weights, --weight-column and --logits, not several.")
    spec = RowSpec.parse(rows, sample, seed)
    loaded = WhiteningTransform.load(transform) if transform is not None else None
    with open_source(data, key=key, column=column, columns=columns, weight_column=weight_column) as src:
        info = src.info
        if loaded is not None and loaded.d_in != info.n_features:
            raise InputError(
                f"transform {transform} expects {loaded.d_in} features; {data} has {info.n_features}."
            )
        wfile: WeightsFile | LogitsWeights | None = None
        if weights is not None:
            wfile = WeightsFile(weights, info.n_rows)
        elif logits is not None:
            wfile = LogitsWeights(logits, info.n_rows, temperature)
        acc = accumulate(src, spec, weights=wfile, block_rows=block_rows, drop_nonfinite=drop_nonfinite,
                         gram_route=False, cosine=True, progress=progress)
        t1 = time.perf_counter()
        m = acc.moments
        assert m is not None
        before = spectrum_from_moments(m, ddof=ddof)
        C = m.second_moment_matrix(ddof=ddof) * (m.scale * m.scale)
        mean = m.mean * m.scale
        if loaded is None:
            t, _ = fit_transform(C, mean, method=method, k=k, eps=eps, usable_rank=before.usable_rank, ddof=ddof,
                                 source=data, fingerprint=fingerprint(data))
        else:
            t = loaded
        out_dtype = np.dtype(np.float64) if np.dtype(info.dtype) == np.float64 else np.dtype(np.float32)
        m_after = _moments_after(m, t)
        logz_b = logz_a = None
        s_b = s_a = None
        if partition_isotropy:
            # Scores in the output's precision (float32 for float32/float16 input): see the README.
            V, s_b = directions(m, scale)
            logz_b = LogZAccumulator(V, s_b, dtype=out_dtype)
            Va, s_a = directions(m_after, scale)
            logz_a = LogZAccumulator(Va, s_a, dtype=out_dtype)
        cos_after = CosineAccumulator(t.d_out)

        def blocks() -> Iterator[np.ndarray]:
            for X, w in second_pass(src, spec, wfile, block_rows, drop_nonfinite=acc.n_dropped > 0,
                                    progress=progress):
                Y = t.apply(X, dtype=out_dtype)
                cos_after.update(Y, w)
                if logz_b is not None and logz_a is not None:
                    logz_b.update(X, w)
                    logz_a.update(Y, w)
                yield Y

        if info.format == "parquet" and info.details.get("columns") and t.d_out == t.d_in:
            out_columns: list[str] | None = list(info.details["columns"])
        elif info.format == "parquet" and info.details.get("columns"):
            out_columns = [f"pc_{i + 1}" for i in range(t.d_out)]
        else:
            out_columns = None
        written = write_matrix(out, blocks(), n=acc.n_rows, d=t.d_out, dtype=out_dtype,
                               column=info.column or "emb", columns=out_columns)
    t2 = time.perf_counter()
    if save_transform is not None:
        t.save(save_transform)
    C_after = t.covariance_after(C)
    after = _after_spectrum(C_after, acc.n_rows, describe(True, ddof, m.weighted))
    iso_before = isotropy_summary(before.resolved(), before.n_features, mean, acc.cosine, logz=logz_b,
                                  scale=scale, scale_value=s_b, with_isoscore=True)
    mean_after = (mean - t.mean) @ t.matrix
    iso_after = isotropy_summary(after.resolved(), after.n_features, mean_after, cos_after, logz=logz_a,
                                 scale=scale, scale_value=s_a, with_isoscore=True)
    zeroed = t.zeroed
    result = WhiteningResult(
        transform=t, transform_from=transform or "fitted", saved_to=save_transform,
        output={"path": out, "format": "npy" if out.lower().endswith(".npy") else "parquet",
                "dtype": np.dtype(out_dtype).name, "rows": written, "columns": out_columns,
                "column": None if out_columns else (info.column or "emb")},
        spectrum_after=after, isotropy_after=iso_after, zeroed_directions=zeroed,
    )
    source = info.to_dict()
    source.update(spec.to_dict())
    source.update({"rows_used": acc.n_rows, "rows_dropped": acc.n_dropped, "fingerprint": fingerprint(data)})
    warnings = spectrum_warnings(before, acc)
    if zeroed:
        warnings.append(f"{zeroed} direction(s) past the usable rank of the fitted data were set to zero, not "
                        "scaled by 1/sqrt(lambda)")
    emit_warnings(warnings)
    options = report_options("whiten", centered=True, ddof=ddof, precision="float64", block_rows=block_rows,
                       weights=weights, weight_column=weight_column, drop_nonfinite=drop_nonfinite, opts=None,
                       ci=False, ci_replicates=0, ci_seed=0, logits=logits, temperature=temperature)
    t3 = time.perf_counter()
    return Report(command="whiten", source=source, options=options, spectrum=before, isotropy=iso_before,
                  whitening=result, warnings=tuple(warnings),
                  timings={"read_accumulate_s": t1 - t0, "transform_write_s": t2 - t1, "analysis_s": t3 - t2,
                           "total_s": t3 - t0})


def _moments_after(m: Moments, t: WhiteningTransform) -> Moments:
    """Moments of the transformed rows, from the input's moments (linear map)."""
    scale = m.scale
    mean = (m.mean * scale - t.mean) @ t.matrix
    m2 = t.matrix.T @ (m.m2 * scale * scale) @ t.matrix
    return Moments(m.n, m.weight_sum, m.n_positive, mean, (m2 + m2.T) * 0.5, 1.0, m.weighted, m.block_rows)


__all__ = ["WhiteningResult", "whiten"]
