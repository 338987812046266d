"""``sequence``: the geometry of a sequence dump ``(windows, positions, features)`` — a per-position
summary, the pooled token spectrum, the context spectrum (covariance of whole flattened windows,
docs/numbers.md, "Sequence dumps") with its fits and ranks, the block-diagonal and shuffled controls, and the lag
energies of the cross-position blocks (:mod:`spectra_cli.analysis.lags` has the formulas).

The selected positions of every window are held in memory once (``n x P x d``), as float32 when the
dump's values are float32 or narrower (exact), else float64; ``--max-memory`` checks the size first.
Each position's centred tokens are made as float64 when needed (``n x d``). With fewer windows than
``P k`` coordinates the context comes from the positions' ``n x n`` Gram matrices (all of them at once
up to 256 MiB, else their sum and one ``k x k`` cross block at a time), else from the ``P k x P k``
covariance: memory ``O(n P k) + O(min(n, P k)^2)``. Time grows as ``P^2`` (the lag energies compare
every pair of positions).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Unpack

import numpy as np

from spectra_cli import registry
from spectra_cli.analysis.fit_options import FIT_KEYWORDS, FitKeywords, FitOptions
from spectra_cli.analysis.lags import (
    CONTROLS,
    GRAM_STACK_BYTES,
    context,
    lag_definition,
    projection,
    shuffled_order,
)
from spectra_cli.analysis.powerlaw import fit_model
from spectra_cli.analysis.rank import RANKS
from spectra_cli.analysis.suite import FitSuite, run_suite, windows_for
from spectra_cli.eigen.decomposition import Spectrum, floor_for, spectrum_from_moments
from spectra_cli.errors import FitError, InputError, Message, OptionError, describe_choices, param, raw
from spectra_cli.options import SEQUENCE_REFUSES, ReadOptions, SourceKeywords
from spectra_cli.results import json_safe
from spectra_cli.run.assemble import Stopwatch, emit_warnings
from spectra_cli.run.matrix import keywords_checked
from spectra_cli.sources.windows import SequenceSource
from spectra_cli.stages import reports_progress
from spectra_cli.stream.isotropy_sums import CosineAccumulator
from spectra_cli.stream.local import Progress
from spectra_cli.stream.moments import Moments
from spectra_cli.stream.passes import Input
from spectra_cli.validate import check_int, check_strings
from spectra_cli.version import __version__

SCHEMA = "spectra.sequence/1"


@dataclass(frozen=True, slots=True)
class SequenceReport:
    """Everything ``spectra sequence`` found; ``to_dict()`` is its JSON document."""

    source: dict[str, Any]
    options: dict[str, Any]
    per_position: tuple[dict[str, Any], ...]
    pooled: dict[str, Any]
    context: dict[str, Any]
    controls: dict[str, Any]
    lag_energy: dict[str, Any]
    warnings: tuple[str, ...] = ()
    timings: dict[str, float] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return json_safe({
            "schema": SCHEMA, "spectra_version": __version__, "command": "sequence", "source": self.source,
            "options": self.options, "per_position": list(self.per_position),
            "per_position_definition": "each position's tokens: centred covariance (ddof 1), ols fit on the "
            "default window 11..floor(d/10) (or ranks 1..usable rank), participation ratio, exact mean cosine",
            "pooled": self.pooled, "context": self.context, "controls": self.controls,
            "lag_energy": self.lag_energy, "warnings": list(self.warnings), "timings": dict(self.timings),
        })


def _suite_doc(spec: Spectrum, opts: FitOptions, warnings: list[str], what: str) -> dict[str, Any]:
    try:
        suite: FitSuite | None = run_suite(spec, opts)
    except FitError as exc:
        warnings.append(Message(f"{what}: no fit ({raw(exc)})"))
        suite = None
    fits = [f.to_dict() for f in suite.fits] if suite is not None else []
    if suite is not None:
        warnings += [Message(f"{what}: {raw(w)}") for w in suite.warnings]
    return {"spectrum": spec.to_dict(), "fit": fits[0] if fits else None, "fits": fits,
            "rank": suite.rank.to_dict() if suite is not None else None}


def _given_spectrum(lam: np.ndarray, n: int, features: int, definition: str, method: str,
                    sampling: int) -> Spectrum:
    lam = np.sort(np.clip(np.asarray(lam, dtype=np.float64), 0.0, None))[::-1]
    return Spectrum(lam, n, features, definition, "float64", floor_for(lam, features, n, "float64"),
                    min(sampling, features), max(features - lam.size, 0), method)


#: The fit keywords a sequence report takes: those of a rank fit.
SEQUENCE_FIT = ("window", "method", "model", "degree", "auto_tolerance")


class SequenceKeywords(FitKeywords, SourceKeywords, total=False):
    """The keywords of ``sequence``: the reading keywords of a source and the fit keywords (of which
    those in :data:`SEQUENCE_FIT` apply)."""


@keywords_checked
@reports_progress
def sequence(
    data: Any,
    *,
    project: int | None = None,
    seed: int = 0,
    controls: str | list[str] | tuple[str, ...] = CONTROLS,
    progress: Progress | None = None,
    **given: Unpack[SequenceKeywords],
) -> SequenceReport:
    """Per-position summary, pooled and context spectra, controls and lag energies of a sequence dump.

    ``data``: a 3-D ``(windows, positions, features)`` array or file, or token rows with
    ``positions_per_window`` L (with ``doc_column``, a Parquet column of document ids: windows restart
    at every document and never cross one; the leftover tokens are counted; ``mask_column``: a Parquet
    column marking real tokens). ``positions`` selects
    positions (``"1:"``, ``"0,2,5"``); ``mask`` (``(windows, positions)`` booleans, False = padding)
    leaves padded tokens out of every statistic (a window with padding at a selected position is left
    out of the context statistics); ``project`` k maps each token through one fixed random orthogonal
    ``d x k`` map (``seed``) before the context is formed; ``controls``: ``block-diagonal``,
    ``shuffled`` (seeded by ``seed``), both by default, or ``()``; the fit keywords of ``fit`` that shape
    a rank fit (``window``, ``method``, ``model``, ``degree``, ``auto_tolerance``: :data:`SEQUENCE_FIT`):
    the fits of the context spectrum and the controls (default window as ``fit``'s: 11..floor(P k / 10));
    the other fit keywords are refused by name.
    """
    clock = Stopwatch()
    ctrl = tuple(check_strings("controls", controls))
    ctrl = tuple(c for c in ctrl if c != "none")
    for c in ctrl:
        if c not in CONTROLS:
            raise OptionError(f"{param('controls')} {describe_choices(c, CONTROLS)}.")
    if project is not None:
        project = check_int("project", project, minimum=1, what="a positive number of features")
    seed = check_int("seed", seed, minimum=0)
    fitting = {k: v for k, v in given.items() if k in FIT_KEYWORDS}
    refused = [k for k in fitting if k not in SEQUENCE_FIT]
    if refused:
        raise OptionError(f"{param(refused[0])} does not apply to sequence: it fits rank windows of the context "
                          f"spectrum ({', '.join(param(k) for k in SEQUENCE_FIT)}).")
    opts = FitOptions.create(**fitting)  # type: ignore[arg-type]
    read = ReadOptions.create(refuse=SEQUENCE_REFUSES, **{k: v for k, v in given.items()  # type: ignore[arg-type]
                                                           if k not in FIT_KEYWORDS})
    warnings: list[str] = []
    with Input(data, read) as inp:
        src, lay, X, valid, k, stack_bytes = _held_windows(inp, read, project, progress, warnings)
        n, P, d = lay.windows, len(lay.positions), lay.d
        clock.mark("read_s")
    if not np.all(np.isfinite(X[valid])):
        raise InputError(f"{inp.info.path} has NaN or inf entries in its selected tokens; clean the data first.")
    per_position, pooled_m, pooled_cos = _positions(X, valid, lay.positions, warnings)
    pooled_spec = spectrum_from_moments(pooled_m)
    pooled = _suite_doc(pooled_spec, FitOptions(), warnings, "pooled")
    pooled["mean_cosine"] = pooled_cos.mean_cosine()
    clock.mark("positions_pooled_s")
    full = valid.all(axis=1)
    W = X if full.all() else X[full]  # (no copy of the windows when none is padded)
    if project is not None:
        W = W @ projection(d, k, seed).astype(X.dtype)
    n_ctx = len(W)
    if n_ctx < 3:
        raise InputError(f"{inp.info.path} has {n_ctx} window(s) without padding at the selected positions; the "
                         "context covariance needs at least 3.")
    if n_ctx < n:
        warnings.append(Message(f"{n - n_ctx} window(s) with padding at a selected position left out of the context "
                                f"statistics; to keep them, select only positions every window fills "
                                f"({param('positions', '0:K')})"))
    res = context(W, block_diagonal="block-diagonal" in ctrl, stack_bytes=stack_bytes)
    ctx_spec = _given_spectrum(res.eigenvalues, n_ctx, P * k, "context covariance of flattened windows, centred per "
                               "coordinate across windows, ddof 1", "eigvalsh of " + res.route, n_ctx - 1)
    context_doc = {**_suite_doc(ctx_spec, opts, warnings, "context"), "route": res.route}
    clock.mark("context_s")
    controls_doc, shuffled_lags = _controls(W, res, ctrl, opts, context_doc, n_ctx, P, k, seed, stack_bytes,
                                            warnings)
    clock.mark("controls_s")
    emit_warnings(warnings)
    info = inp.info
    source = {"path": info.path, "format": info.format, "shape": list(info.shape), "dtype": info.dtype,
              "windows": n, "positions": lay.length, "features": d, "positions_used": list(lay.positions),
              "windows_in_context": n_ctx, "masked_tokens": src.masked_tokens,
              "fingerprint": inp.fingerprint(),
              **({"members": inp.dataset.members_report()} if inp.dataset is not None else {}),
              "layout": f"{n} windows x {lay.length} positions x {d} features"}
    options = {"positions": read.positions if isinstance(read.positions, str | None) else list(read.positions),
               "mask": read.mask if isinstance(read.mask, str | None) else "array",
               "positions_per_window": read.positions_per_window, "doc_column": read.doc_column,
               "mask_column": read.mask_column,
               "project": {"k": k, "seed": seed, "definition": "each token x -> x Q, Q a fixed d x k matrix with "
                           "orthonormal columns (QR of a Gaussian matrix from numpy.random.default_rng(seed))"}
               if project is not None else None,
               "controls": list(ctrl), "control_seed": seed if "shuffled" in ctrl else None, "centered": True,
               "ddof": 1, **opts.to_report()}
    lag_doc = {**lag_definition(), "lags": list(range(1, P)), "data": res.lag_energy.tolist(),
               "shuffled": None if shuffled_lags is None else shuffled_lags.tolist()}
    return SequenceReport(source, options, tuple(per_position), pooled, context_doc, controls_doc, lag_doc,
                          tuple(warnings), clock.timings())


def _held_windows(inp: Input, read: ReadOptions, project: int | None, progress: Progress | None,
                  warnings: list[str]) -> tuple[Any, Any, np.ndarray, np.ndarray, int, float]:
    """The selected positions of every window held once (float32 where it holds the values exactly), after the
    memory they and the context need is checked against the budget: ``(source, layout, X, valid, k, stack
    bytes)``, ``valid`` the tokens that are not padding and ``k`` the features after ``project``."""
    src = inp.source
    if not isinstance(src, SequenceSource):
        raise InputError(f"{inp.info.path} is not a sequence dump: give a 3-D (windows, positions, features) "
                         f"array, or token rows with {param('positions_per_window')} L.")
    lay = src.layout
    warnings += src.notes
    n, P, d = lay.windows, len(lay.positions), lay.d
    k = project if project is not None else d
    if project is not None and project > d:
        raise OptionError(f"{param('project', project)} exceeds the {d} features of a token.")
    if d == 0:
        raise InputError(f"{inp.info.path} has 0 features (shape {inp.info.shape}); at least 1 is required.")
    if P == 0 or lay.length == 0:
        raise InputError(f"{inp.info.path} has 0 positions (shape {inp.info.shape}); at least 1 is required.")
    # the windows once, float32 where it holds the values exactly (float16, bfloat16 and float32 dumps)
    dtype = np.float32 if exact_in_float32(inp.info.dtype) else np.float64
    held = float(np.dtype(dtype).itemsize) * n * P * d
    # the context matrices, and the P x P inner products of the positions' blocks behind the lag energies
    # (P - 1 lags: the cost grows as P^2, so a dump of millions of positions is refused here, not run for hours)
    # the P Gram matrices at once when they fit (the faster route), else streamed: one n x n sum
    stack_bytes = read.memory_budget() / 4
    stacked = 8.0 * P * n * n <= min(stack_bytes, GRAM_STACK_BYTES)
    gram = 8.0 * (P * n * n + n * n) if stacked else 8.0 * (3 * n * n + 2 * n * k)
    ctx = (gram if n < P * k else 8.0 * 3 * (P * k) ** 2) + 8.0 * P * P
    if held + ctx > read.memory_budget():
        raise InputError(f"{inp.info.path}: the sequence analysis needs about {(held + ctx) / 2**30:.3g} GiB "
                         f"({n} windows x {P} positions x {d} features held as {np.dtype(dtype).name}, the "
                         f"context matrices and the {P} x {P} inner products of the positions behind the lag "
                         f"energies); the memory budget is {read.memory_budget() / 2**30:.3g} GiB. Select fewer "
                         f"windows or positions ({param('positions')} 0:512), use {param('project')} k, or raise "
                         f"{param('max_memory')}.")
    X = np.empty((n, P, d), dtype=dtype)
    pos = np.asarray(lay.positions)
    for w0, B in src.windows(max(1, inp.block_rows // lay.length)):  # the rows per block the matrix path reads
        X[w0:w0 + len(B)] = B[:, pos, :]
        if progress is not None:
            progress(w0 + len(B), n)
    valid = src.mask[:, pos] if src.mask is not None else np.ones((n, P), dtype=bool)
    return src, lay, X, valid, k, stack_bytes


def _controls(W: np.ndarray, res: Any, ctrl: tuple[str, ...], opts: FitOptions, context_doc: dict[str, Any],
              n_ctx: int, P: int, k: int, seed: int, stack_bytes: float,
              warnings: list[str]) -> tuple[dict[str, Any], np.ndarray | None]:
    """The controls' reports (``block-diagonal``, ``shuffled``), fitted over the context's own ranks unless a window
    is given, and the shuffled control's lag energies."""
    controls_doc: dict[str, Any] = {}
    shuffled_lags = None
    # the controls' alpha over the context's own ranks (by default each would take its own: the block-diagonal
    # control resolves P times the context's ranks, and its default window ran to 11..1228 against 11..127)
    ctx_fit = context_doc.get("fit")
    ctrl_opts, same = opts, None
    if not opts.windows and ctx_fit is not None:
        same = (int(ctx_fit["window"][0]), int(ctx_fit["window"][1]))
        ctrl_opts = dataclasses.replace(opts, windows=(f"{same[0]}:{same[1]}",))

    def control_doc(spec: Spectrum, what: str) -> dict[str, Any]:
        doc = _suite_doc(spec, ctrl_opts, warnings, what)
        if same is not None and doc["fit"] is not None:
            for f in [doc["fit"], *doc["fits"]]:
                f["window_source"] = "context"
                f["window_reason"] = (f"the context's window (ranks {same[0]}..{same[1]}), so that the control's "
                                      "alpha is read over the same ranks")
        return doc

    if "block-diagonal" in ctrl and res.block_diagonal is not None:
        bd = _given_spectrum(res.block_diagonal, n_ctx, P * k, "block-diagonal control: Gamma_ab = 0 for a != b "
                             "(the union of the positionwise spectra)", "eigvalsh of each Gamma_aa",
                             P * min(n_ctx - 1, k))
        controls_doc["block-diagonal"] = control_doc(bd, "block-diagonal control")
    if "shuffled" in ctrl:
        sh = context(W, block_diagonal=False, stack_bytes=stack_bytes, order=shuffled_order(len(W), P, seed),
                     label="shuffled control")
        sh_spec = _given_spectrum(sh.eigenvalues, n_ctx, P * k, "shuffled control: tokens permuted across windows "
                                  "and positions, windows rebuilt", "eigvalsh of " + sh.route, n_ctx - 1)
        controls_doc["shuffled"] = {**control_doc(sh_spec, "shuffled control"), "seed": seed}
        shuffled_lags = sh.lag_energy
    return controls_doc, shuffled_lags


def exact_in_float32(dtype: str) -> bool:
    """Whether every value of this stored dtype is a float32 (float16, bfloat16, float32, 8- and 16-bit
    integers, booleans)."""
    if dtype == "bfloat16":
        return True
    try:
        dt = np.dtype(dtype)
    except TypeError:
        return False
    return (dt.kind == "f" and dt.itemsize <= 4) or (dt.kind in "iub" and dt.itemsize <= 2)


def _positions(X: np.ndarray, valid: np.ndarray, positions: tuple[int, ...],
               warnings: list[str]) -> tuple[list[dict[str, Any]], Moments, CosineAccumulator]:
    """Each position's summary, and the pooled moments and cosine sums (their exact merge)."""
    n, P, d = X.shape
    pooled = Moments.empty(d)
    cos_all = CosineAccumulator(d)
    rows: list[dict[str, Any]] = []
    for i, p in enumerate(positions):
        T = X[valid[:, i], i, :]
        entry: dict[str, Any] = {"position": int(p), "n": int(len(T)),
                                 **{m.name: None for m in registry.per_position()}}
        if len(T) >= 2:
            m = Moments.from_block(T)
            pooled = pooled.merge(m)
            cos = CosineAccumulator(d)
            cos.update(T)
            cos_all.merge(cos)
            spec = spectrum_from_moments(m)
            for name, value_of in RANKS.items():  # (each rank the registry gives a position)
                if name in entry:
                    entry[name] = value_of(spec.resolved())
            entry["mean_cosine"] = cos.mean_cosine()
            try:
                (win,), _ = windows_for(spec, FitOptions())
                entry["alpha"] = fit_model(spec.eigenvalues, win).alpha
            except FitError:
                pass
        rows.append(entry)
    if pooled.n < 2:
        raise InputError("the selected positions hold fewer than 2 real tokens.")
    return rows, pooled, cos_all


__all__ = ["SequenceReport", "sequence"]
