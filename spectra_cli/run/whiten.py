"""``whiten``: fit (or load) a whitening transform, stream the rows through it (to a file, or
back as an array), and report the spectrum and isotropy before and after.

Pass 1 accumulates the moments (and the cosine sums); pass 2 reads the rows again through the
same loop, applies the transform, writes the output atomically and accumulates the after-cosine
(and, with ``partition_isotropy``, ``log Z`` before and after). The after-spectrum is
``M^T C M``, exact for the transform (the written file adds only its dtype's rounding).
"""

from __future__ import annotations

import contextlib
import os
from typing import Any, Unpack

import numpy as np

from spectra_cli.analysis.isotropy import DIRECTIONS_DXD, check_scale, directions
from spectra_cli.analysis.isotropy import summary as isotropy_summary
from spectra_cli.analysis.whitening import WhiteningResult, WhiteningTransform, fit_transform
from spectra_cli.eigen.decomposition import Spectrum, describe, floor_for, spectrum_from_moments
from spectra_cli.errors import InputError, OptionError, param
from spectra_cli.options import WHITEN_REFUSES, ReadKeywords, ReadOptions
from spectra_cli.results import Report
from spectra_cli.run import fit_steps
from spectra_cli.run.assemble import Stopwatch, assemble, spectrum_warnings
from spectra_cli.run.matrix import keywords_checked
from spectra_cli.sinks import MatrixWriter, check_not_input, check_target
from spectra_cli.sources.opening import open_input
from spectra_cli.stages import reports_progress
from spectra_cli.stream.isotropy_sums import CosineAccumulator, LogZAccumulator
from spectra_cli.stream.local import Progress
from spectra_cli.stream.moments import Moments
from spectra_cli.stream.passes import Input, input_paths
from spectra_cli.validate import check_bool, check_int


def _after_spectrum(C_after: np.ndarray, n: int, centered_def: str) -> Spectrum:
    lam = np.linalg.eigvalsh(C_after)[::-1]
    d = C_after.shape[0]
    floor = floor_for(lam, d, 0, "float64")
    return Spectrum(lam, n, d, centered_def, "float64", floor, min(n - 1, d), 0,
                    "eigvalsh of M^T C M (analytic, from the input's moments)")


class _Apply:
    """The second pass's state: transform each block, measure it, and write it (or keep it)."""

    def __init__(self, t: WhiteningTransform, dtype: np.dtype, logz: tuple[LogZAccumulator, LogZAccumulator] | None,
                 sink: MatrixWriter | None) -> None:
        self.t, self.dtype, self.logz, self.sink = t, dtype, logz, sink
        self.cosine = CosineAccumulator(t.d_out)
        self.kept: list[np.ndarray] = []

    def update(self, X: np.ndarray, w: np.ndarray | None) -> None:
        Y = self.t.apply(X, dtype=self.dtype)
        self.cosine.update(Y, w)
        if self.logz is not None:
            self.logz[0].update(X, w)
            self.logz[1].update(Y, w)
        if self.sink is not None:
            self.sink.write(Y)
        else:
            self.kept.append(Y)

    def rows(self) -> np.ndarray | None:
        if self.sink is not None:
            return None
        return np.concatenate(self.kept) if self.kept else np.zeros((0, self.t.d_out), dtype=self.dtype)


@keywords_checked
@reports_progress
def whiten(
    data: Any,
    *,
    out: str | os.PathLike[str] | None = None,
    method: str = "zca",
    k: int | None = None,
    eps: float = 0.0,
    transform: str | os.PathLike[str] | WhiteningTransform | None = None,
    save_transform: str | os.PathLike[str] | None = None,
    partition_isotropy: bool = False,
    scale: str = "seed",
    progress: Progress | None = None,
    **reading: Unpack[ReadKeywords],
) -> Report:
    """Whiten the rows of ``data`` (zca, pca or abtt; ``k`` directions kept or removed, ``eps``
    added to each eigenvalue) and report the spectrum and isotropy before and after.

    ``out``: a ``.npy`` or ``.parquet`` file written atomically; without it the whitened rows come
    back in memory as ``report.whitened`` (an ndarray). ``transform``: apply a saved transform (a
    path or a :class:`WhiteningTransform`) instead of fitting one; ``save_transform``: save the
    fitted one (``.npz``, no pickle). Reading options as for :func:`spectra_cli.fit`.
    """
    read = ReadOptions.create(refuse=WHITEN_REFUSES, **reading)
    ddof = read.ddof
    if k is not None:
        k = check_int("k", k, minimum=-(1 << 62))  # an integer; its range (1..d) is checked with d
    check_bool("partition_isotropy", partition_isotropy)
    out = os.fspath(out) if out is not None else None
    save_transform = os.fspath(save_transform) if save_transform is not None else None
    transform_path = os.fspath(transform) if isinstance(transform, str | os.PathLike) else None
    opening = open_input(data)  # (resolved once: the outputs are checked against its files, and they are read)
    inputs = input_paths(opening.dataset, read, transform_path)
    if out is not None:
        check_target(out)
        check_not_input(out, inputs, "out")
    check_scale(scale)
    if save_transform is not None:
        check_not_input(save_transform, inputs + ([out] if out else []), "save_transform")
        WhiteningTransform.check_target(save_transform)
    if transform is not None and (k is not None or eps != 0.0 or method != "zca"):
        raise OptionError(f"{param('transform')} applies a saved transform; {param('method')}, {param('k')} and "
                          f"{param('eps')} come from it.")
    loaded = WhiteningTransform.load(transform_path) if transform_path is not None else transform
    if loaded is not None and not isinstance(loaded, WhiteningTransform):
        raise TypeError(f"transform must be a path or a WhiteningTransform, not {type(loaded).__name__}.")
    clock = Stopwatch()
    with Input(opening, read) as inp:
        info = inp.info
        if loaded is not None and loaded.d_in != info.n_features:
            raise InputError(f"transform {transform_path or '<WhiteningTransform>'} expects {loaded.d_in} features; "
                             f"{info.path} has {info.n_features}.")
        first = inp.first_pass(gram=False, cosine=True, progress=progress)
        clock.mark("read_accumulate_s")
        m = first.moments
        assert m is not None
        before = spectrum_from_moments(m, ddof=ddof)
        C = m.second_moment_matrix(ddof=ddof) * (m.scale * m.scale)
        mean = m.mean * m.scale
        source_name = inp.path or "<array>"
        t = loaded or fit_transform(C, mean, method=method, k=k, eps=eps, usable_rank=before.usable_rank, ddof=ddof,
                                    source=source_name, fingerprint=inp.fingerprint() or "")[0]
        out_dtype = np.dtype(np.float64) if np.dtype(info.dtype) == np.float64 else np.dtype(np.float32)
        logz = s_b = s_a = None
        if partition_isotropy:
            # Scores in the output's precision (float32 for float32/float16 input): see the README.
            V, s_b = directions(m, scale)
            Va, s_a = directions(_moments_after(m, t), scale)
            logz = (LogZAccumulator(V, s_b, dtype=out_dtype), LogZAccumulator(Va, s_a, dtype=out_dtype))
        out_columns = _columns(inp, t)
        with contextlib.ExitStack() as stack:
            sink = None if out is None else stack.enter_context(MatrixWriter(
                out, n=first.n_rows, d=t.d_out, dtype=out_dtype, column=info.column or "emb", columns=out_columns))
            apply = _Apply(t, out_dtype, logz, sink)
            inp.second_pass([apply], need="whitening", progress=progress)
        kept = apply.rows()
        written = sink.written if sink is not None else len(kept) if kept is not None else 0
        output = {"path": out, "format": "array" if sink is None else sink.format.name, "dtype": out_dtype.name}
        clock.mark("transform_write_s")
    if save_transform is not None:
        t.save(save_transform)
    after = _after_spectrum(t.covariance_after(C), first.n_rows, describe(True, ddof, m.weighted))
    iso_before = isotropy_summary(before.resolved(), before.n_features, mean, first.cosine,
                                  logz=logz[0] if logz else None, scale=scale, scale_value=s_b, with_isoscore=True,
                                  directions_note=DIRECTIONS_DXD)
    iso_after = isotropy_summary(after.resolved(), after.n_features, (mean - t.mean) @ t.matrix, apply.cosine,
                                 logz=logz[1] if logz else None, scale=scale, scale_value=s_a, with_isoscore=True,
                                 directions_note=DIRECTIONS_DXD)
    result = WhiteningResult(
        transform=t, transform_from=transform_path or ("given" if loaded is not None else "fitted"),
        saved_to=save_transform, output={**output, "rows": written, "columns": out_columns,
                                         "column": None if out_columns else (info.column or "emb")},
        spectrum_after=after, isotropy_after=iso_after, zeroed_directions=t.zeroed, rows=kept)
    warnings = spectrum_warnings(before, first)
    if t.zeroed:
        warnings.append(f"{t.zeroed} direction(s) past the usable rank of the fitted data were set to zero, not "
                        "scaled by 1/sqrt(lambda), which would only amplify rounding noise: nothing to change (the "
                        "whitened rows have that many fewer directions with variance)")
    _, with_se = fit_steps.with_uncertainty(None, iso_before, first, before, centered=True, isoscore=True)
    iso_before = with_se if with_se is not None else iso_before
    clock.mark("analysis_s")
    options = {**inp.options_report(), "centered": True, "precision": "float64"}
    return assemble("whiten", inp, first, before, options=options, warnings=warnings, clock=clock, isotropy=iso_before,
                    whitening=result)


def _columns(inp: Input, t: WhiteningTransform) -> list[str] | None:
    """Parquet numeric-column input keeps its column names (``pc_1..pc_k`` for a narrower pca)."""
    cols = inp.info.details.get("columns")
    if inp.info.format != "parquet" or not cols:
        return None
    return list(cols) if t.d_out == t.d_in else [f"pc_{i + 1}" for i in range(t.d_out)]


def _moments_after(m: Moments, t: WhiteningTransform) -> Moments:
    """Moments of the transformed rows, from the input's moments (linear map)."""
    scale = m.scale
    mean = (m.mean * scale - t.mean) @ t.matrix
    m2 = t.matrix.T @ (m.m2 * scale * scale) @ t.matrix
    return Moments(m.n, m.weight_sum, m.n_positive, mean, (m2 + m2.T) * 0.5, 1.0, m.weighted, m.block_rows)


__all__ = ["WhiteningResult", "WhiteningTransform", "whiten"]
