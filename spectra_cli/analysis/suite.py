"""Everything `spectra fit` computes from a spectrum: fits over windows, models, local
slope, effective ranks, the density exponent. Pure: eigenvalues and options in, results out."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from spectra_cli.analysis.capacity import Capacity, capacity
from spectra_cli.analysis.density import DensityFit, density_fit
from spectra_cli.analysis.local_slope import LocalSlope, local_slope_profile
from spectra_cli.analysis.powerlaw import (
    MODELS,
    ModelComparison,
    RankFit,
    Window,
    auto_window,
    check_choice,
    compare_models,
    fit_model,
    parse_window,
    resolve_window,
)
from spectra_cli.analysis.rank import (
    EffectiveRanks,
    entropy_rank,
    entropy_rank_bounds,
    participation_ratio,
    rankme,
    stable_rank,
)
from spectra_cli.eigen.decomposition import Spectrum
from spectra_cli.errors import FitError, param

#: ``spectra``: its own defaults; ``weightwatcher``: WeightWatcher's ``analyze()`` (uncentred W^T W, the
#: density exponent, its layer selection and tiny-eigenvalue cut, its column names and verdicts).
CONVENTIONS = ("spectra", "weightwatcher")


@dataclass(frozen=True, slots=True)
class FitOptions:
    """How to fit. ``windows``: ``K1:K2`` or ``auto`` strings; empty means the default window."""

    windows: tuple[str, ...] = ()
    method: str = "ols"
    model: str = "power-law"
    degree: int = 2
    auto_tolerance: float = 0.05
    density: bool = False
    counting: tuple[float, ...] = ()
    capacity: tuple[float, ...] = ()
    alpha_range: tuple[float, float] = (2.0, 6.0)
    #: ``spectra`` or ``weightwatcher`` (the preset that reproduces WeightWatcher's ``analyze()``)
    convention: str = "spectra"
    #: eigenvalues at or below this are left out of the density fit (WeightWatcher's ``EVALS_THRESH``, in
    #: spectra's units; set from the row count when the convention is ``weightwatcher``)
    density_floor: float = 0.0
    #: ``windows`` parsed, once: ``(K1, K2)``, or None for ``auto``.
    requested: tuple[tuple[int, int] | None, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        """Every value is checked when the options are made (once, at the boundary)."""
        from spectra_cli.analysis.powerlaw import METHODS
        from spectra_cli.errors import OptionError

        check_choice("method", self.method, METHODS)
        check_choice("model", self.model, MODELS)
        check_choice("convention", self.convention, CONVENTIONS)
        for w in self.windows:
            if not isinstance(w, str):
                raise OptionError(f"{param('window', w, show=True)} must be a string 'K1:K2' or 'auto' (or a list of "
                                  f"them), not {type(w).__name__}.")
        object.__setattr__(self, "requested", tuple(parse_window(w) for w in self.windows))
        if isinstance(self.degree, bool) or not isinstance(self.degree, int) or self.degree < 1:
            raise OptionError(f"{param('degree', self.degree)} must be at least 1 (1 is the plain power law).")
        from spectra_cli.analysis.weightwatcher import check_alpha_range

        check_alpha_range(*self.alpha_range)
        if not isinstance(self.auto_tolerance, int | float) or not self.auto_tolerance > 0 \
                or not math.isfinite(self.auto_tolerance):
            raise OptionError(f"{param('auto_tolerance', self.auto_tolerance)} must be a positive number.")

    @classmethod
    def create(cls, *, window: str | list[str] | tuple[str, ...] | None = None, method: str = "ols",
               model: str = "power-law", degree: int = 2, auto_tolerance: float = 0.05, density: bool = False,
               counting: list[float] | tuple[float, ...] | None = (),
               capacity: list[float] | tuple[float, ...] | None = (),
               alpha_range: str | tuple[float, float] = (2.0, 6.0), convention: str = "spectra") -> FitOptions:
        if window is not None and not isinstance(window, str | list | tuple):
            from spectra_cli.errors import OptionError

            raise OptionError(f"{param('window', window, show=True)} must be a string 'K1:K2' or 'auto' (or a list "
                              f"of them), not {type(window).__name__}.")
        windows = (window,) if isinstance(window, str) else tuple(window or ())
        return cls(windows=windows, method=method, model=model, degree=degree, auto_tolerance=auto_tolerance,
                   density=bool(density) or convention == "weightwatcher", counting=tuple(counting or ()),
                   capacity=tuple(capacity or ()),
                   alpha_range=parse_alpha_range(alpha_range), convention=convention)

    @property
    def window_ends(self) -> tuple[int, ...] | None:
        """The last rank of every window, or None when a window is the default or ``auto``."""
        if any(w is None for w in self.requested):
            return None
        return tuple(w[1] for w in self.requested if w is not None) or None

    def to_report(self) -> dict[str, object]:
        out: dict[str, object] = {"window": list(self.windows) or ["default"], "method": self.method,
                                  "model": self.model, "degree": self.degree, "auto_tolerance": self.auto_tolerance}
        if self.density:
            out["alpha_range"] = list(self.alpha_range)
        if self.convention != "spectra":
            out["convention"] = self.convention
        return out


def parse_alpha_range(value: str | tuple[float, float]) -> tuple[float, float]:
    """``"2:6"`` or ``(2, 6)`` -> ``(2.0, 6.0)``."""
    from spectra_cli.errors import OptionError, param

    if isinstance(value, str):
        lo, sep, hi = value.partition(":")
        try:
            if not sep:
                raise ValueError
            return float(lo), float(hi)
        except ValueError:
            raise OptionError(f"{param('alpha_range', value)} is not LO:HI (e.g. 2:6).") from None
    try:
        lo_f, hi_f = (float(v) for v in value)
    except (TypeError, ValueError):
        raise OptionError(f"{param('alpha_range', value, show=True)} is not a pair (lo, hi).") from None
    return lo_f, hi_f


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
        windows, warnings = [], [f"no power-law fit: {exc}"]
    fits = tuple(fit_model(lam, w, method=opts.method, model=opts.model, degree=opts.degree) for w in windows)
    models = (compare_models(lam, windows[0], method=opts.method, degree=opts.degree, selected=opts.model)
              if windows else None)
    resolved = spec.resolved()
    unc = uncentered or spec
    if spec.top is not None:
        rank = top_k_ranks(spec)
    else:
        rank = EffectiveRanks(
            participation_ratio=participation_ratio(resolved),
            entropy_rank=entropy_rank(resolved),
            rankme=rankme(unc.eigenvalues, unc.numerical_floor) if uncentered is not None else None,
            rankme_source=rankme_source,
            stable_rank=stable_rank(resolved),
            numerical_rank=spec.numerical_rank,
            k90=spec.k_for(0.90),
            k95=spec.k_for(0.95),
            k99=spec.k_for(0.99),
        )
    density = None
    if opts.density:
        try:
            kept = lam[: spec.numerical_rank]
            density = density_fit(kept[kept > opts.density_floor] if opts.density_floor > 0 else kept)
        except FitError as exc:  # too few eigenvalues: the same rule as a collapsed rank fit
            warnings.append(f"no density fit: {exc}")
    profile = local_slope_profile(lam, spec.usable_rank)
    cap = None
    if opts.counting or opts.capacity:
        cap = capacity(resolved, eps=list(opts.counting), tau=list(opts.capacity))
    return FitSuite(fits, models, profile, rank, density, tuple(warnings), cap)



def top_k_ranks(spec: Spectrum) -> EffectiveRanks:
    """The ranks of a spectrum of which only the leading k eigenvalues are known (with the exact
    trace and Frobenius norm), each marked exact, bounded, a lower bound or not available."""
    assert spec.top is not None
    top = spec.top
    resolved = spec.resolved()
    k = resolved.size
    lo, hi = entropy_rank_bounds(resolved, spec.total_variance, spec.n_features)
    ks = {name: spec.k_for(f) for name, f in (("k90", 0.90), ("k95", 0.95), ("k99", 0.99))}
    all_above = spec.numerical_rank == k and k < spec.n_features
    exactness = {"participation_ratio": "exact", "stable_rank": "exact",
                 "entropy_rank": "bounded", "rankme": "not available",
                 "numerical_rank": "lower bound" if all_above else "exact"}
    bounds: dict[str, tuple[float, float]] = {"entropy_rank": (lo, hi)}
    if all_above:
        bounds["numerical_rank"] = (float(k), float(spec.n_features))
    for name, value in ks.items():
        exactness[name] = "exact" if value is not None else "lower bound"
        if value is None:
            bounds[name] = (float(k + 1), float(spec.n_features))
    return EffectiveRanks(
        participation_ratio=top.participation_ratio,
        entropy_rank=None,
        rankme=None,
        rankme_source=f"not available: only the leading {k} eigenvalues were computed (top-k route)",
        stable_rank=spec.total_variance / float(resolved[0]) if k and resolved[0] > 0 else 0.0,
        numerical_rank=spec.numerical_rank,
        k90=ks["k90"], k95=ks["k95"], k99=ks["k99"],
        exactness=exactness,
        bounds=bounds,
    )
