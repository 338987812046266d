"""The options of a fit, declared and checked once: every fit keyword (:class:`FitKeywords`) with its default
(:data:`FIT_DEFAULTS`) and constraint (:data:`FIT_CONSTRAINTS`) as data, and :class:`FitOptions`, whose
:meth:`~FitOptions.create` is the one check of a fit's options (the values, the WeightWatcher preset, the conflicts
between keywords). Every command and the library make that one call; a batch makes it once for all its items."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any, TypedDict

from spectra_cli.analysis.isotropy import SCALES
from spectra_cli.analysis.powerlaw import METHODS, MODELS, parse_window
from spectra_cli.analysis.weightwatcher import DEFAULT_ALPHA_RANGE
from spectra_cli.errors import OptionError, param
from spectra_cli.options import POPULATION_ROUTES, Convention
from spectra_cli.validate import check_bool, check_choice, check_int, check_number, check_numbers

#: ``spectra``: its own defaults; ``weightwatcher``: WeightWatcher's ``analyze()`` (uncentred W^T W, the
#: density exponent, its layer selection and tiny-eigenvalue cut, its column names and verdicts).
CONVENTIONS = tuple(c.value for c in Convention)
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
    population_route: str
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
    "ci_replicates": 200, "ci_seed": 0, "population": False, "population_route": "analytic", "spikes": False,
    "shuffled_control": False, "control_seed": 0,
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
    "population_route": lambda n, v: check_choice(n, v, POPULATION_ROUTES),
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


def check_fit_keywords(given: dict[str, Any]) -> dict[str, Any]:
    """Every fit keyword (the defaults for those not given), each checked by its constraint: the values alone (a
    caller that needs one keyword's value checked, such as a config's; :meth:`FitOptions.create` is the check of a
    fit's options, conflicts included)."""
    unknown = [k for k in given if k not in FIT_DEFAULTS]
    if unknown:
        raise TypeError(f"unexpected fit keyword {unknown[0]!r}; valid: {', '.join(FIT_KEYWORDS)}.")
    return {name: FIT_CONSTRAINTS[name](name, given.get(name, default)) for name, default in FIT_DEFAULTS.items()}


#: The options that need every eigenvalue of the matrix (not the top-k route's leading ones), by keyword.
NEEDS_ALL = ("density", "counting", "capacity", "shuffled_control", "partition_isotropy", "isoscore", "rankme",
             "population")


@dataclass(frozen=True, slots=True)
class FitOptions:
    """How to fit: every fit keyword (:class:`FitKeywords`), checked once by :meth:`create` (its values, the
    WeightWatcher preset and the conflicts between keywords); made directly, nothing is checked. ``windows``:
    ``K1:K2`` or ``auto`` strings, empty for the default window; ``convention``: a :class:`Convention`;
    ``centered``: the centring the convention sets (False for WeightWatcher's uncentred ``W^T W``), None where it
    sets none."""

    windows: tuple[str, ...] = ()
    method: str = "ols"
    model: str = "power-law"
    degree: int = 2
    auto_tolerance: float = 0.05
    density: bool = False
    counting: tuple[float, ...] = ()
    capacity: tuple[float, ...] = ()
    alpha_range: tuple[float, float] = DEFAULT_ALPHA_RANGE
    convention: Convention = Convention.SPECTRA
    ci: bool = False
    ci_replicates: int = 200
    ci_seed: int = 0
    population: bool = False
    population_route: str = "analytic"
    spikes: bool = False
    shuffled_control: bool = False
    control_seed: int = 0
    partition_isotropy: bool = False
    isoscore: bool = False
    scale: str = "seed"
    rankme: bool | None = None
    top: int | None = None
    centered: bool | None = None
    #: eigenvalues at or below this are left out of the density fit (WeightWatcher's ``EVALS_THRESH``, in
    #: spectra's units; set from the row count when the convention is ``weightwatcher``)
    density_floor: float = 0.0
    #: ``windows`` parsed, once: ``(K1, K2)``, or None for ``auto``.
    requested: tuple[tuple[int, int] | None, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "requested", tuple(parse_window(w) for w in self.windows))

    @classmethod
    def create(cls, *, centered: Any = None, eigenvalues: bool = False, **fitting: Any) -> FitOptions:
        """The options of a fit from its keywords (:class:`FitKeywords`), the one check: each value by its
        constraint (:data:`FIT_CONSTRAINTS`), the WeightWatcher preset (``convention="weightwatcher"`` sets
        ``centered=False``, WeightWatcher's uncentred ``W^T W``, and ``density=True``, its alpha, and needs every
        eigenvalue of the matrix; a contradicting choice given is refused by name, never overridden), and the
        keywords that cannot go together (``top`` with an option that needs every eigenvalue, ``population`` with
        another model than the power law, ``eigenvalues=True`` with an option that needs the rows). ``centered``:
        the reading keyword as given (None: not given), which the preset must not contradict."""
        v = check_fit_keywords(fitting)
        convention = Convention.of(v["convention"])
        density, preset_centered = v["density"], None
        if convention.is_weightwatcher:
            preset = param("convention", "weightwatcher")
            if fitting.get("density") is not None and check_bool("density", fitting["density"]) is not True:
                raise OptionError(f"{preset} sets {param('density', True)} (WeightWatcher's uncentred W^T W and "
                                  f"its density alpha); leave out {param('density', fitting['density'])}.")
            if v["top"] not in (None, 0):
                raise OptionError(f"{preset} needs the whole matrix and every eigenvalue (its norms, its MP fit); "
                                  f"leave out {param('top', v['top'])}.")
            density, preset_centered = True, False
        opts = cls(windows=v["window"], method=v["method"], model=v["model"], degree=v["degree"],
                   auto_tolerance=v["auto_tolerance"], density=density, counting=v["counting"],
                   capacity=v["capacity"], alpha_range=v["alpha_range"], convention=convention, ci=v["ci"],
                   ci_replicates=v["ci_replicates"], ci_seed=v["ci_seed"], population=v["population"],
                   population_route=v["population_route"],
                   spikes=v["spikes"], shuffled_control=v["shuffled_control"], control_seed=v["control_seed"],
                   partition_isotropy=v["partition_isotropy"], isoscore=v["isoscore"], scale=v["scale"],
                   rankme=v["rankme"], top=v["top"], centered=preset_centered)
        needs_all = opts.needs_all
        if opts.top and needs_all:
            raise OptionError(f"{param('top', opts.top)} computes only the leading eigenvalues, but "
                              f"{', '.join(param(n) for n in needs_all)} need{'s' if len(needs_all) == 1 else ''} "
                              "all of them; drop one or the other.")
        if opts.population and opts.model != "power-law":
            raise OptionError(f"{param('population')} estimates the exponent of a power-law population; it does not "
                              f"apply to {param('model', opts.model)} (drop one or the other).")
        opts.check_call(centered=centered, eigenvalues=eigenvalues)
        return opts

    def check_call(self, *, centered: Any = None, eigenvalues: bool = False) -> None:
        """What the options cannot go with in one call (made options handed to a fit are checked against it):
        the centring given against the convention's, and an option that needs the rows with
        ``eigenvalues=True``."""
        if self.centered is not None and centered is not None:
            check_bool("centered", centered)
            if centered is not self.centered:
                raise OptionError(f"{param('convention', self.convention.value)} sets "
                                  f"{param('centered', self.centered)} (WeightWatcher's uncentred W^T W and its "
                                  f"density alpha); leave out {param('centered', centered)}.")
        if not eigenvalues:
            return
        if self.convention.is_weightwatcher:
            raise OptionError(f"{param('convention', 'weightwatcher')} needs the whole matrix and every eigenvalue "
                              f"(its norms, its MP fit); leave out {param('eigenvalues', True)}.")
        if self.population:
            raise OptionError(f"{param('population')} needs the number of rows behind the spectrum (and their "
                              f"norms): give the data matrix, not {param('eigenvalues')}.")
        if self.spikes:
            raise OptionError(f"{param('spikes')} needs the number of rows behind the spectrum and its "
                              f"eigenvectors: give the data matrix, not {param('eigenvalues')}.")
        if self.ci or self.shuffled_control or self.partition_isotropy:
            raise OptionError(f"{param('ci')}, {param('shuffled_control')} and {param('partition_isotropy')} "
                              f"need the data matrix, not {param('eigenvalues')}.")

    def for_matrix(self, n_rows: int, n_features: int) -> tuple[FitOptions, list[str]]:
        """The options for one matrix of ``n_rows x n_features``, and what to say of it: in WeightWatcher's
        convention its density floor (WeightWatcher's ``EVALS_THRESH`` on ``W^T W``'s eigenvalues, which are
        spectra's times the rows) and a word where WeightWatcher's layer selection would skip the matrix; in
        spectra's, the options as they are."""
        if not self.convention.is_weightwatcher:
            return self, []
        from spectra_cli.analysis.weightwatcher import WW_EVALS_THRESH

        skip = self.skip((n_rows, n_features))
        said = [f"WeightWatcher's analysis would skip this matrix ({skip}): spectra's numbers for it have no "
                "WeightWatcher counterpart to compare with"] if skip else []
        return replace(self, density_floor=WW_EVALS_THRESH / max(n_rows, 1)), said

    def skip(self, shape: tuple[int, ...]) -> str | None:
        """Why the convention leaves a tensor of ``shape`` out (WeightWatcher's layer selection: too small, or not
        a matrix), or None: spectra's own convention leaves none out."""
        if not self.convention.is_weightwatcher:
            return None
        from spectra_cli.analysis.weightwatcher import ww_conv_skip, ww_skip

        return ww_conv_skip(shape) if len(shape) == 4 else ww_skip(shape)

    @property
    def needs_all(self) -> list[str]:
        """The keywords given that need every eigenvalue (:data:`NEEDS_ALL`), in that order."""
        return [name for name in NEEDS_ALL if bool(getattr(self, name))]

    @property
    def own_matrices(self) -> bool:
        """Whether a step asked for holds d x d matrices of its own beside the spectrum's (the bootstrap, the
        population, the partition pass, the shuffled control): the spectrum then keeps no reduction for later."""
        return bool(self.ci or self.population or self.partition_isotropy or self.shuffled_control)

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
        if self.convention.is_weightwatcher:
            out["convention"] = self.convention.value
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


