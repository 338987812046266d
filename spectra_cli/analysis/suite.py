"""Everything `spectra fit` computes from a spectrum: fits over windows, models, local
slope, effective ranks, the density exponent. Pure: eigenvalues and options in, results out."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import NamedTuple

import numpy as np

from spectra_cli.analysis.capacity import Capacity, capacity
from spectra_cli.analysis.density import DensityFit, density_fit
from spectra_cli.analysis.fit_options import FitOptions
from spectra_cli.analysis.local_slope import LocalSlope, local_slope_profile
from spectra_cli.analysis.powerlaw import (
    ModelComparison,
    RankFit,
    Window,
    auto_window,
    compare_models,
    fit_model,
    resolve_window,
)
from spectra_cli.analysis.rank import EffectiveRanks, effective_ranks
from spectra_cli.analysis.tails import tail_models
from spectra_cli.eigen.decomposition import Spectrum
from spectra_cli.errors import FitError, Message, param, raw

#: A rank fit below this R^2, or above this residual RMS (natural log of lambda), is said to fit poorly.
POOR_FIT_R2 = 0.9
MODEL_NAMES = {"power-law": "power law", "log-corrected": "log-corrected law", "broken": "broken law"}
POOR_FIT_RMS = 0.25
#: A drop between consecutive eigenvalues above a rank window of at least this factor, where the ranks above the
#: drop hold at least CLIFF_SHARE of the variance, is said: the window then measures what lies under the drop (noise,
#: or what is left of a collapsed representation), not the representation's own spectrum. So is a fall by this
#: factor within a doubling of the rank (eigenvalue i to eigenvalue b <= 2 i, over several steps: a representation
#: that collapses through a few intermediate directions), the ranks above its bottom holding CLIFF_SHARE; a power law
#: falls by 2^alpha within a doubling (1,000 is alpha = 10). The topmost such drop is the one said.
CLIFF_RATIO = 1e3
CLIFF_SHARE = 0.999


@dataclass(frozen=True, slots=True)
class FitSuite:
    fits: tuple[RankFit, ...]  # empty when the default window leaves too few usable ranks
    models: ModelComparison | None
    local_slope: LocalSlope
    rank: EffectiveRanks
    density: DensityFit | None
    warnings: tuple[str, ...]
    capacity: Capacity | None = None


def windows_for(spec: Spectrum, opts: FitOptions) -> tuple[list[Window], list[str]]:
    out: list[Window] = []
    warnings: list[str] = []
    if not opts.requested:  # the default window
        w, warn = resolve_window(None, n_features=spec.n_features, usable_rank=spec.usable_rank)
        return [w], warn
    for requested in opts.requested:
        if requested is None:
            w, warn = auto_window(spec.eigenvalues, spec.usable_rank, tolerance=opts.auto_tolerance), []
        else:
            w, warn = resolve_window(requested, n_features=spec.n_features, usable_rank=spec.usable_rank)
        out.append(w)
        warnings += warn
    return out, warnings


def run_suite(spec: Spectrum, opts: FitOptions, *, uncentered: Spectrum | None = None,
              rankme_source: str | None = None) -> FitSuite:
    """Fits on every window, the model comparison on the first, and the ranks."""
    lam = spec.eigenvalues
    try:
        windows, warnings = windows_for(spec, opts)
    except FitError as exc:
        if opts.windows:
            raise  # a window the user asked for is an input error
        # A collapsed spectrum: report everything else, with no fit (fit is null, checks on it fail).
        windows, warnings = [], [Message(f"no power-law fit: {raw(exc)}")]
    fits = tuple(fit_model(lam, w, method=opts.method, model=opts.model, degree=opts.degree) for w in windows)
    for f in fits:  # a line that does not follow the points is no exponent to report without saying so
        if f.r2 < POOR_FIT_R2 or f.residual_rms > POOR_FIT_RMS:
            others = [m for m in ("broken", "log-corrected", "power-law") if m != f.model]
            warnings.append(Message(
                f"the {MODEL_NAMES.get(f.model, f.model)} fits ranks {f.window.k_min}..{f.window.k_max} poorly (R^2 "
                f"{f.r2:.4f}, residual RMS {f.residual_rms:.3g} in log lambda): alpha "
                f"{f.alpha:.{3 if f.model == 'broken' else 4}f} does not summarise "
                f"this window. Look at the figure, then try another window ({param('window', 'K1:K2')}) or another "
                f"model ({param('model', others[0])}, or {others[1]!r})"))
    warnings += cliff_warnings(lam, [f.window for f in fits])
    models = (compare_models(lam, windows[0], method=opts.method, degree=opts.degree, selected=opts.model)
              if windows else None)
    resolved = spec.resolved()
    rank = effective_ranks(spec, uncentered, rankme_source)
    density = None
    if opts.density:
        try:
            kept = lam[: spec.numerical_rank]
            fitted = kept[kept > opts.density_floor] if opts.density_floor > 0 else kept
            density = density_fit(fitted, small_n=opts.convention.is_weightwatcher)
            density = replace(density, tails=tail_models(fitted, density.xmin))
        except FitError as exc:  # too few eigenvalues: the same rule as a collapsed rank fit
            warnings.append(Message(f"no density fit: {raw(exc)}"))
    profile = local_slope_profile(lam, spec.usable_rank)
    cap = None
    if opts.counting or opts.capacity:
        cap = capacity(resolved, eps=list(opts.counting), tau=list(opts.capacity))
    return FitSuite(fits, models, profile, rank, density, tuple(warnings), cap)





class Cliff(NamedTuple):
    """A drop above a rank window (:func:`cliff_above`): eigenvalue ``top`` is ``ratio`` times eigenvalue ``bottom``
    (``top + 1`` for one step), and ranks ``1..bottom - 1`` hold ``share`` of the positive eigenvalues' sum."""

    top: int
    bottom: int
    ratio: float
    share: float


def cliff_above(lam: np.ndarray, k_min: int) -> Cliff | None:
    """The topmost drop above rank ``k_min`` (``lam`` descending), if any: the first rank ``bottom <= k_min`` from
    the top that an eigenvalue ``top >= bottom / 2`` exceeds :data:`CLIFF_RATIO`-fold (``top`` the last such: one
    step where ``top = bottom - 1``, else a fall over a few within a doubling of the rank), ranks ``1..bottom - 1``
    holding at least :data:`CLIFF_SHARE` of the positive eigenvalues' sum; else None. The topmost, so that every
    window under a collapse hears of the same one."""
    head = np.asarray(lam[:k_min], dtype=np.float64)
    if head.size < 2 or not head[0] > 0 or not head[-1] > 0:
        return None
    total = float(np.sum(lam[lam > 0]))
    if not total > 0:
        return None
    share = np.cumsum(head) / total  # share[k - 1]: ranks 1..k
    bottoms = np.arange(2, head.size + 1)
    # (searchsorted on the ascending -head: how many eigenvalues are at least CLIFF_RATIO times each bottom's)
    tops = np.searchsorted(-head, -CLIFF_RATIO * head[1:], side="right")
    found = np.flatnonzero((tops >= (bottoms + 1) // 2) & (share[:-1] >= CLIFF_SHARE))
    if not found.size:
        return None
    k = int(found[0])
    top, bottom = int(tops[k]), int(bottoms[k])
    return Cliff(top, bottom, float(head[top - 1] / head[bottom - 1]), float(share[bottom - 2]))


def cliff_warnings(lam: np.ndarray, windows: list[Window]) -> list[str]:
    """One warning per drop (:func:`cliff_above`) that rank windows lie under, naming them."""
    under: dict[Cliff, list[Window]] = {}
    for w in windows:
        found = cliff_above(lam, w.k_min)
        if found is not None:
            under.setdefault(found, []).append(w)
    out: list[str] = []
    for (top, bottom, ratio, share), ws in under.items():
        names = ", ".join(f"{w.k_min}..{w.k_max}" for w in ws)
        above = (f", or fit ranks above it ({param('window', f'1:{top}')})" if top >= 3 else "")
        held = f"all but {1.0 - share:.2g} of the variance" if share > 0.9999 else f"{100 * share:.2f}% of the variance"
        fall = (f"eigenvalue {bottom} is {ratio:.3g} times smaller than eigenvalue {top}" if bottom == top + 1 else
                f"the spectrum falls {ratio:.3g} times from eigenvalue {top} to eigenvalue {bottom}")
        out.append(Message(
            f"ranks 1..{bottom - 1} hold {held} and {fall}: the window{'s' if len(ws) > 1 else ''} {names} "
            f"measure{'' if len(ws) > 1 else 's'} "
            "what lies under that drop (noise, or what is left of a collapsed representation), and alpha there says "
            f"nothing of the collapse itself. Read the participation ratio{above}"))
    return out
