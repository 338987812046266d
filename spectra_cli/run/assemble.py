"""Report assembly, below the orchestrators: warnings about a spectrum, timings, and the
frozen :class:`~spectra_cli.results.Report` with its source and options sections."""

from __future__ import annotations

import inspect
import math
import re
import time
import warnings as _warnings
from typing import Any

from spectra_cli.eigen.decomposition import NEAR_NULL_GAP, Spectrum
from spectra_cli.errors import Message, SpectraWarning, param, raw
from spectra_cli.results import OptionsSection, Report, SourceSection
from spectra_cli.stream.passes import Accumulated, Input

# n/d below which the tail of a sample covariance is visibly biased (Marchenko–Pastur).
SAMPLING_WARN_RATIO = 10.0


def spectrum_warnings(spec: Spectrum, first: Accumulated | None, *, population: bool = False,
                      sample: bool = True) -> list[str]:
    """Suspect but computable facts about a spectrum, one sentence each. ``population``: the population exponent
    is being estimated (the advice to ask for it is then replaced by saying that it accounts for the bias).
    ``sample``: False for a weight matrix (WeightWatcher's convention): its rows are no sample, and there is no
    finite-sampling bias to warn of."""
    out: list[str] = []
    remedy = ("; the population exponent asked for here accounts for it" if population else
              f", or estimate the population exponent with fit's {param('population', True)}")
    d = spec.n_features
    if first is not None and first.n_dropped:
        out.append(Message(f"{first.n_dropped} row(s) with NaN or inf entries were dropped "
                           f"({param('drop_nonfinite', True)}); if that is more than a few, look for an overflow "
                           "upstream (float16 overflows above 65504)"))
    if spec.structural_zeros:
        out.append(
            f"n = {spec.n_samples} < d = {d}: at most {spec.sampling_rank} non-zero eigenvalues; the other "
            f"{spec.structural_zeros} are zero whatever the data (structural zeros) and not listed. Use more rows "
            f"than features to see every direction (n/d >= {SAMPLING_WARN_RATIO:g} keeps the tail's finite-sampling "
            "bias small)"
        )
    elif not sample:
        pass
    elif first is not None and first.n_effective is not None:
        ratio = first.n_effective / d
        if ratio < SAMPLING_WARN_RATIO:
            out.append(Message(
                f"effective n/d = {ratio:.3g} < {SAMPLING_WARN_RATIO:g} (effective sample size (sum w)^2 / sum w^2 "
                f"= {first.n_effective:.4g} of {spec.n_samples} weighted rows): tail eigenvalues of the sample "
                "covariance are biased by finite sampling (the leading ranks least). Use more rows (or less "
                f"concentrated weights){remedy}"
            ))
    elif spec.n_over_d is not None and spec.n_over_d < SAMPLING_WARN_RATIO:
        out.append(Message(
            f"n/d = {spec.n_over_d:.3g} < {SAMPLING_WARN_RATIO:g}: tail eigenvalues of the sample covariance "
            f"are biased by finite sampling (the leading ranks least). Use more rows{remedy}"
        ))
    const = first.constant_columns() if first is not None else 0
    if const:
        out.append(f"{const} constant column(s): each adds an exactly zero eigenvalue, left out of every fit; drop "
                   "the columns if they are unused features or padding")
    zeros = spec.sampling_zeros
    if zeros and not spec.structural_zeros:  # (the n < d message above says it of the Gram route)
        kind = "centred rows" if "centred" in spec.definition or "covariance" in spec.definition else "rows"
        out.append(
            f"the last {zeros} eigenvalue(s) are sampling zeros: {spec.n_samples} {kind} span at most "
            f"{spec.sampling_rank} of {spec.n_features} directions, whatever the data (not null directions such as "
            "LayerNorm's); they enter no logarithm or fit. More rows than features resolve them"
        )
    if spec.top_declined:
        out.append(Message(f"{raw(spec.top_declined)}: all {spec.n_features} eigenvalues were computed (nothing to "
                           "change: the numbers are those of the full decomposition)"))
    below = spec.below_floor
    if below:
        out.append(
            f"{below} eigenvalue(s) at or below the numerical floor {spec.numerical_floor:.4g}: "
            "null directions (e.g. LayerNorm's, constant or dependent columns); they enter no logarithm or fit. "
            "Where every direction should carry variance, look for duplicated or derived columns"
        )
    return out


def near_null_warning(spec: Spectrum, suite: Any, *, density: bool) -> list[str]:
    """The near-null directions (LayerNorm's) said once, and only where they change a number: when a
    fit's window reaches the usable rank they cut (it would have run into them), or the density fit
    (which takes every usable eigenvalue). Otherwise they are a fact of the spectrum
    (``spectrum.near_null``), shown beside the usable rank."""
    near = spec.near_null_count
    if not near or suite is None:
        return []
    reached = [f for f in suite.fits if f.window.k_max >= spec.usable_rank]
    if not reached and not density:
        return []
    k = spec.numerical_rank - near
    what = [f"the fit over ranks {f.window.k_min}..{f.window.k_max}" for f in reached]
    if density:
        what.append("the density fit")
    return [f"the last {near} resolved eigenvalue(s) lie more than {1 / NEAR_NULL_GAP:,.0f} times below rank {k}: "
            "directions with almost no variance (e.g. LayerNorm's, kept above zero by float16 rounding); spectra "
            "leaves them out of " + " and ".join(what) + ", so there is nothing to change"]


#: The kinds of warning this process has emitted (:func:`warning_kind`): each kind is a SpectraWarning once per
#: process (a notebook's loop over 12 LayerNorm'd layers says the null directions once, not 12 times); every report
#: still lists all of its own warnings.
SAID: set[str] = set()


def warning_kind(message: str) -> str:
    """A warning's text with its numbers taken out: what stays the same from one layer or call to the next."""
    return re.sub(r"\d[\d.,]*(?:e[+-]?\d+)?", "#", str(message))


def sequence_tokens_warning(seq: dict[str, Any], *, grouped: bool) -> list[str]:
    """The rows are the tokens of a sequence dump's windows (``seq``: its source's ``sequence`` details), which are
    not independent: said with what the standard errors make of it (``grouped``: they read contiguous row groups)."""
    if seq.get("pool") != "tokens" or len(seq.get("positions_used") or ()) <= 1:
        return []
    length = len(seq["positions_used"])
    if grouped:  # (the errors read contiguous row groups: a window inside one is counted)
        return [Message(
            f"the rows are the tokens of {seq['windows']} windows of {length} positions: tokens of one window are "
            "not independent; the standard errors come from contiguous row groups, which count that dependence "
            "where a window lies within a group (the report's design effect says how much it weighs); for errors "
            f"across windows give each window one row ({param('pool', 'mean')})")]
    return [Message(
        f"the rows are the tokens of {seq['windows']} windows of {length} positions: tokens of one window are "
        "not independent, and the standard errors and intervals, which take the rows as independent, are too "
        f"small (by up to sqrt({length}) = {math.sqrt(length):.2g}x where a window's positions move together); "
        f"for errors across windows give each window one row ({param('pool', 'mean')})")]


#: Below this n/d the bootstrap interval of the sample slope was measured not to cover the population
#: exponent (bench/bench_ci_coverage.py: 47 of 96 fits on Gaussian rows at n/d <= 10, 81 of 96 elliptical).
CI_COVERS_N_OVER_D = 20.0


def ci_coverage_warning(ratio: float, *, population: bool) -> list[str]:
    """At ``ratio`` = n/d below :data:`CI_COVERS_N_OVER_D` the bootstrap interval carries the sample slope's bias."""
    if ratio >= CI_COVERS_N_OVER_D:
        return []
    return [Message(
        f"n/d = {ratio:.3g} < {CI_COVERS_N_OVER_D:g}: finite sampling biases the sample slope, and the "
        f"bootstrap interval ({param('ci', True)}) carries the same bias: at n/d <= 10 it held the population "
        "exponent in only about half of the runs of spectra's coverage benchmark. "
        + ("The population exponent, also computed, has an interval that accounts for it" if population else
           "For the population exponent with an interval that accounts for the bias, use "
           f"{param('population', True)}"))]


def control_window_warning(control: Any, fits: Any) -> list[str]:
    """The first fit's window reaches past the rank where the spectrum meets the shuffled control (noise)."""
    if control is None or control.meets_at_rank is None or not fits:
        return []
    k1, k2, meets = fits[0].window.k_min, fits[0].window.k_max, control.meets_at_rank
    if k2 < meets:
        return []
    return [Message(
        f"the fit window reaches rank {k2}, past rank {meets} where the spectrum meets the shuffled control "
        "(finite-sampling noise): end the window before it"
        + (f" ({param('window', f'{k1}:{meets - 1}')})" if meets - 1 > k1 else ""))]


def _ignored(text: str, module: str, lineno: int) -> bool:
    """Whether the warnings filters in force ignore a SpectraWarning of ``text`` raised at the caller's line
    (the first filter that matches decides, as :mod:`warnings` does)."""
    for action, message, category, mod, line in _warnings.filters:
        if (message is None or message.match(text)) and issubclass(SpectraWarning, category) \
                and (mod is None or mod.match(module)) and (line == 0 or line == lineno):
            return action == "ignore"
    return False


def emit_warnings(messages: list[str]) -> None:
    """Each suspect finding is also a SpectraWarning, pointing at the caller's line (the first
    frame outside spectra_cli), never silent; each kind of finding once per process (:data:`SAID`): the report's
    ``warnings`` hold every one, every time."""
    here = inspect.currentframe()
    try:
        level, frame = 2, here.f_back if here is not None else None
        while frame is not None and str(frame.f_globals.get("__name__", "")).startswith("spectra_cli"):
            frame = frame.f_back  # type: ignore[assignment]
            level += 1
        module = str(frame.f_globals.get("__name__", "")) if frame is not None else ""
        lineno = frame.f_lineno if frame is not None else 0
    finally:
        # a frame held in its own locals is a reference cycle that keeps every frame above it alive, with their
        # locals (a d x d matrix each), until the cyclic collector runs: 128 MiB more per fit at d = 4,096 in a
        # batch worker, 1.8 GB before it ran (Python's inspect documentation asks for this del)
        del here, frame
    for m in messages:
        kind = warning_kind(m)
        if kind in SAID:
            continue
        if _ignored(str(m), module, lineno):  # (hidden by a filter here: said the next time one may see it)
            continue
        SAID.add(kind)
        _warnings.warn(Message(f"{raw(m)} (said once in this process; each report's warnings list it every time)"),
                       SpectraWarning, stacklevel=level)


class Stopwatch:
    """Wall-clock seconds of each stage, in the order they were marked."""

    def __init__(self) -> None:
        self.start = self.last = time.perf_counter()
        self.laps: dict[str, float] = {}

    def mark(self, name: str) -> None:
        now = time.perf_counter()
        self.laps[name] = self.laps.get(name, 0.0) + now - self.last
        self.last = now

    def note(self, name: str, value: float) -> None:
        """A number that belongs beside the timings (e.g. a peak-memory estimate)."""
        self.laps[name] = float(value)

    def timings(self) -> dict[str, float]:
        return {**self.laps, "total_s": time.perf_counter() - self.start}


def assemble(command: str, inp: Input, first: Accumulated | None, spectrum: Spectrum, *,
             options: dict[str, Any], warnings: list[str], clock: Stopwatch, **sections: Any) -> Report:
    """The report of one run; its warnings are also emitted as SpectraWarnings."""
    if inp.source is not None and inp.source.notes:
        warnings = [*inp.source.notes, *warnings]
    emit_warnings(warnings)
    return Report(command=command, source=SourceSection(inp.source_report(first)), options=OptionsSection(options),
                  spectrum=spectrum,
                  warnings=tuple(warnings), timings=clock.timings(), **sections)
