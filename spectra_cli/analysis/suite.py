"""Everything `spectra fit` computes from a spectrum: fits over windows, models, local
slope, effective ranks, the density exponent. Pure: eigenvalues and options in, results out."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, NamedTuple, TypedDict

import numpy as np

from spectra_cli.analysis.capacity import Capacity, capacity
from spectra_cli.analysis.density import DensityFit, density_fit
from spectra_cli.analysis.isotropy import SCALES
from spectra_cli.analysis.local_slope import LocalSlope, local_slope_profile
from spectra_cli.analysis.powerlaw import (
    METHODS,
    MODELS,
    ModelComparison,
    RankFit,
    Window,
    auto_window,
    compare_models,
    fit_model,
    parse_window,
    resolve_window,
)
from spectra_cli.analysis.rank import EffectiveRanks, effective_ranks
from spectra_cli.analysis.weightwatcher import DEFAULT_ALPHA_RANGE
from spectra_cli.eigen.decomposition import Spectrum
from spectra_cli.errors import FitError, Message, OptionError, param, raw
from spectra_cli.options import Convention
from spectra_cli.validate import check_bool, check_choice, check_int, check_number, check_numbers

#: ``spectra``: its own defaults; ``weightwatcher``: WeightWatcher's ``analyze()`` (uncentred W^T W, the
#: density exponent, its layer selection and tiny-eigenvalue cut, its column names and verdicts).
CONVENTIONS = tuple(c.value for c in Convention)
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
#: The most bootstrap replicates a fit may ask for (each is one decomposition of d x d).
MAX_CI_REPLICATES = 20_000


class FitKeywords(TypedDict, total=False):
    """Every fit keyword, declared once: the signatures of ``fit``, ``batch``, ``check`` and ``compare``
    (as ``**fitting: Unpack[FitKeywords]``), the CLI's fit options (:mod:`spectra_cli.cli.flags`,
    ``FIT_OPTIONS``), their defaults (:data:`FIT_DEFAULTS`) and their constraints
    (:data:`FIT_CONSTRAINTS`); a test holds them to one another. Documented in ``spectra_cli.fit``."""

    window: str | list[str] | tuple[str, ...] | None
    method: str
    model: str
    degree: int
    density: bool
    auto_tolerance: float
    counting: list[float] | tuple[float, ...] | None
    capacity: list[float] | tuple[float, ...] | None
    alpha_range: str | tuple[float, float]
    convention: str
    ci: bool
    ci_replicates: int
    ci_seed: int
    population: bool
    spikes: bool
    shuffled_control: bool
    control_seed: int
    partition_isotropy: bool
    isoscore: bool
    scale: str
    rankme: bool | None
    top: int | None


#: The default of every fit keyword (a keyword left out takes it).
FIT_DEFAULTS: dict[str, Any] = {
    "window": None, "method": "ols", "model": "power-law", "degree": 2, "density": False, "auto_tolerance": 0.05,
    "counting": (), "capacity": (), "alpha_range": DEFAULT_ALPHA_RANGE, "convention": "spectra", "ci": False,
    "ci_replicates": 200, "ci_seed": 0, "population": False, "spikes": False, "shuffled_control": False,
    "control_seed": 0,
    "partition_isotropy": False, "isoscore": False, "scale": "seed", "rankme": None, "top": None,
}


def _windows(name: str, value: Any) -> tuple[str, ...]:
    if value is not None and not isinstance(value, str | list | tuple):
        raise OptionError(f"{param(name, value, show=True)} must be a string 'K1:K2' or 'auto' (or a list of them), "
                          f"not {type(value).__name__}.")
    windows = (value,) if isinstance(value, str) else tuple(value or ())
    for w in windows:
        if not isinstance(w, str):
            raise OptionError(f"{param(name, w, show=True)} must be a string 'K1:K2' or 'auto' (or a list of "
                              f"them), not {type(w).__name__}.")
        parse_window(w)
    return windows


def _degree(name: str, value: Any) -> int:
    return check_int(name, value, minimum=1, what="at least 1 (1 is the plain power law)")


def _replicates(name: str, value: Any) -> int:
    value = check_int(name, value, minimum=10)
    if value > MAX_CI_REPLICATES:
        raise OptionError(f"{param(name, value)} is more than {MAX_CI_REPLICATES:,} replicates (each one a "
                          "decomposition; a 95 % percentile interval settles within a few thousand).")
    return value


def _alpha_range(name: str, value: Any) -> tuple[float, float]:
    from spectra_cli.analysis.weightwatcher import check_alpha_range

    return check_alpha_range(*parse_alpha_range(value))


def _optional(check: Callable[[str, Any], Any]) -> Callable[[str, Any], Any]:
    return lambda name, value: None if value is None else check(name, value)


#: The constraint of every fit keyword, as data (scikit-learn's ``_parameter_constraints``): a checker
#: ``(name, value) -> value`` that returns the value normalised or raises an OptionError naming it.
FIT_CONSTRAINTS: dict[str, Callable[[str, Any], Any]] = {
    "window": _windows,
    "method": lambda n, v: check_choice(n, v, METHODS),
    "model": lambda n, v: check_choice(n, v, MODELS),
    "degree": _degree,
    "density": check_bool,
    "auto_tolerance": lambda n, v: check_number(n, v, positive=True),
    "counting": check_numbers,
    "capacity": check_numbers,
    "alpha_range": _alpha_range,
    "convention": lambda n, v: check_choice(n, v, CONVENTIONS),
    "ci": check_bool,
    "ci_replicates": _replicates,
    "ci_seed": lambda n, v: check_int(n, v, minimum=0),
    "population": check_bool,
    "spikes": check_bool,
    "shuffled_control": check_bool,
    "control_seed": lambda n, v: check_int(n, v, minimum=0),
    "partition_isotropy": check_bool,
    "isoscore": check_bool,
    "scale": lambda n, v: check_choice(n, v, SCALES),
    "rankme": _optional(check_bool),
    "top": _optional(lambda n, v: check_int(n, v, minimum=0, what="0 (every eigenvalue) or a positive number of "
                                            "leading eigenvalues")),
}
FIT_KEYWORDS = tuple(FIT_DEFAULTS)


def resolve_convention(fitting: dict[str, Any], centered: Any, *, eigenvalues: bool = False
                       ) -> tuple[dict[str, Any], Any]:
    """The WeightWatcher preset, resolved in this one place: ``convention="weightwatcher"`` sets
    ``centered=False`` (WeightWatcher's uncentred ``W^T W``) and ``density=True`` (its alpha) and needs
    every eigenvalue of the matrix; a contradicting choice given is refused by name, never overridden.
    Returns the fit keywords and ``centered`` as the convention has them (unchanged for ``spectra``)."""
    if not Convention.of(fitting.get("convention")).is_weightwatcher:
        return fitting, centered
    preset = param("convention", "weightwatcher")
    for name, value, wanted in (("centered", centered, False), ("density", fitting.get("density"), True)):
        if value is not None:
            check_bool(name, value)
            if value is not wanted:
                raise OptionError(f"{preset} sets {param(name, wanted)} (WeightWatcher's uncentred W^T W and its "
                                  f"density alpha); leave out {param(name, value)}.")
    top = fitting.get("top")
    if top not in (None, 0) or eigenvalues:
        what = param("top", top) if top not in (None, 0) else param("eigenvalues", True)
        raise OptionError(f"{preset} needs the whole matrix and every eigenvalue (its norms, its MP fit); leave out "
                          f"{what}.")
    return {**fitting, "density": True}, False


def check_fit_keywords(given: dict[str, Any]) -> dict[str, Any]:
    """Every fit keyword (the defaults for those not given), each checked by its constraint."""
    unknown = [k for k in given if k not in FIT_DEFAULTS]
    if unknown:
        raise TypeError(f"unexpected fit keyword {unknown[0]!r}; valid: {', '.join(FIT_KEYWORDS)}.")
    return {name: FIT_CONSTRAINTS[name](name, given.get(name, default)) for name, default in FIT_DEFAULTS.items()}


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
    alpha_range: tuple[float, float] = DEFAULT_ALPHA_RANGE
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
    def create(cls, **fitting: Any) -> FitOptions:
        """The options of the fits from fit keywords (:class:`FitKeywords`; the others of fit, such as ``ci``,
        are checked and left to the caller)."""
        v = check_fit_keywords(fitting)
        return cls(windows=v["window"], method=v["method"], model=v["model"], degree=v["degree"],
                   auto_tolerance=v["auto_tolerance"],
                   density=v["density"] or Convention.of(v["convention"]).is_weightwatcher,
                   counting=v["counting"], capacity=v["capacity"], alpha_range=v["alpha_range"],
                   convention=v["convention"])

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
            density = density_fit(kept[kept > opts.density_floor] if opts.density_floor > 0 else kept)
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
