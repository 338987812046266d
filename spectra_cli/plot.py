"""Figures, one ``Axes``-level function each (matplotlib, the optional extra ``plot``).

>>> import matplotlib.pyplot as plt, spectra_cli as spectra
>>> rep = spectra.fit(X, window="11:256", ci=True)
>>> fig, ax = plt.subplots()
>>> spectra.plot.spectrum(rep, ax=ax)         # the log-log spectrum, the fit and its window
>>> spectra.plot.density(rep, ax=ax)          # with density=True: the ESD histogram and its tail

Every function takes a report (a :class:`spectra_cli.Report`, or its ``to_dict()`` as ``--json``
writes it, or a line of a batch's JSONL), draws on ``ax`` (a new figure of one paper column when
``ax`` is None) and returns the ``Axes``. Nothing here touches matplotlib's global state: no
``pyplot``, no backend switch, no ``rcParams`` change; the ``*_figure`` functions build a
``matplotlib.figure.Figure`` of their own, and :func:`save` writes one atomically (PNG, or SVG and
PDF as vector).

Conventions, the same in every figure: axis limits come from the eigenvalues the fits use (the
usable ranks); near-null, floor and sampling-zero eigenvalues are drawn as open triangles on the
lower edge, counted in the legend, never stretching the axis. Colours are Okabe and Ito's
colour-blind-safe palette, and every series also differs in line style or marker, so a figure
printed in greyscale reads the same.
"""

from __future__ import annotations

import functools
import math
import os
import sys
from collections.abc import Callable, Iterable, Sequence
from typing import Any, TypeVar, cast

import numpy as np

from spectra_cli import registry
from spectra_cli.errors import OptionError, param
from spectra_cli.sources import formats

__all__ = [
    "COLUMN_WIDTH", "PALETTE", "density", "density_figure", "errorbar", "figure", "lag_energy", "layers",
    "local_slope", "log_ticks", "report_figure", "require_matplotlib", "save", "sequence_context", "sequence_figure",
    "sequence_positions", "spectrum", "trend", "trend_figure",
]

from spectra_cli.documents import (  # noqa: E402  (what a figure reads of a report written elsewhere)
    alpha_error,
    finite,
    item_name,
    law_misses,
    layer_names,
    natural_key,
    predict,
    short_label,
)
from spectra_cli.results import uncertainty  # noqa: E402  (the interval a metric carries: its error bars)

#: Okabe & Ito (2008): distinguishable with every common colour-vision deficiency.
PALETTE = ("#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#000000")
#: One line style per series, so that greyscale prints keep them apart.
LINESTYLES = ("--", "-.", ":", (0, (5, 1, 1, 1, 1, 1)))
DATA_COLOR = "#1a1a1a"
CONTROL_COLOR = "#8c8c8c"
#: Inches: one column of a two-column paper; figures are drawn at this width, fonts 8 pt.
COLUMN_WIDTH = 3.4
FONT = {"font.size": 8.0, "axes.titlesize": 8.0, "axes.labelsize": 8.0, "legend.fontsize": 6.5,
        "xtick.labelsize": 7.0, "ytick.labelsize": 7.0, "lines.linewidth": 1.2, "svg.fonttype": "none",
        "pdf.fonttype": 42}
#: The extensions a figure may be written to (:data:`spectra_cli.sources.formats.FIGURES`).
FORMATS = formats.extensions(*formats.FIGURES)


def require_matplotlib(needed_by: str | None = None, extra: str = "plot") -> Any:
    """matplotlib, or an error naming what needs it (``needed_by``: default the ``plot`` option) and the extra
    that brings it."""
    try:
        import matplotlib
    except ImportError:
        who = needed_by if needed_by is not None else param("plot")
        raise OptionError(
            f"{who} needs matplotlib, the optional extra '{extra}': pip install 'spectra-geometry[{extra}]' "
            f"(from a checkout: pip install '.[{extra}]')."
        ) from None
    return matplotlib


def _doc(rep: Any) -> dict[str, Any]:
    if isinstance(rep, dict):  # a report's JSON, perhaps written elsewhere: checked before any drawing
        from spectra_cli.documents import check_report

        return check_report(rep, "the report")
    to_dict = getattr(rep, "to_dict", None)
    if callable(to_dict):
        out = to_dict()
        if isinstance(out, dict):
            return out
    raise OptionError(f"a figure needs a spectra report (a Report, or its to_dict()), not a {type(rep).__name__}.")


def _new_axes(ax: Any, height: float = 2.6, width: float = COLUMN_WIDTH) -> Any:
    """``ax``, or the Axes of a new figure: made through pyplot where pyplot is already imported (a notebook's
    ``%matplotlib inline`` or ``import matplotlib.pyplot``: the figure is pyplot's current one, so the notebook
    shows it and ``plt.savefig`` writes it), else a figure of its own that nothing global holds."""
    if ax is not None:
        return ax
    pyplot = sys.modules.get("matplotlib.pyplot")
    if pyplot is not None:
        return pyplot.figure(figsize=(width, height), layout="constrained").add_subplot()
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), layout="constrained")
    return fig.add_subplot()


def _wrapped_label(text: str, ax: Any) -> str:
    """An axis label broken into lines that fit the panel's height (a long name, such as "spikes over the
    Marchenko-Pastur edge", would run into the panels above and below)."""
    import textwrap

    height_pt = ax.get_position().height * ax.figure.get_figheight() * 72
    size = float(ax.yaxis.label.get_size())
    width = max(8, int(height_pt / (0.55 * size)))
    return "\n".join(textwrap.wrap(text, width, break_on_hyphens=False, break_long_words=False)) \
        if len(text) > width else text


def _fmt(x: float, digits: int = 3) -> str:
    if x == 0 or 1e-3 <= abs(x) < 1e5:
        return f"{x:.{digits}f}" if abs(x) < 100 else f"{x:.1f}"
    return f"{x:.{digits - 1}e}"


def data_name(doc: dict[str, Any]) -> str:
    """What a title calls the data: the tensor name, or the file's name."""
    src: dict[str, Any] = doc["source"] if isinstance(doc.get("source"), dict) else {}
    path = str(src.get("path") or doc.get("item") or "data")
    file, sep, tensor = path.partition("::")
    return short_label(tensor if sep else os.path.basename(file.rstrip("/")) or file)


def title_of(doc: dict[str, Any]) -> str:
    src: dict[str, Any] = doc["source"] if isinstance(doc.get("source"), dict) else {}
    spec: dict[str, Any] = doc["spectrum"] if isinstance(doc.get("spectrum"), dict) else {}
    n, d = spec.get("n_samples", src.get("n_rows")), spec.get("n_features", src.get("n_features"))
    shape = f", {n:,} × {d:,}" if isinstance(n, int) and isinstance(d, int) else ""
    return f"{data_name(doc)}{shape}"


def interval_text(fit: dict[str, Any], key: str = "alpha") -> str:
    """``alpha = 0.655, 95 % CI 0.615–0.671`` (the bootstrap interval when there is one) or
    ``alpha = 0.655 ± 0.014 (SE)`` (the sampling standard error; ``LS SE`` in a report made before it)."""
    a = finite(fit.get(key))
    if a is None:
        return "α not fitted"
    ci = fit.get("ci") if key == "alpha" else None
    if isinstance(ci, dict) and finite(ci.get("low")) is not None and finite(ci.get("high")) is not None:
        level = finite(ci.get("level")) or 0.95
        note = "" if ci["low"] <= a <= ci["high"] else \
            "\n(bias-corrected: the sample α is biased, so its interval lies beside it)"
        return f"α = {a:.3f}, {level:.0%} CI {ci['low']:.3f}–{ci['high']:.3f}{note}"
    if key != "alpha":
        return f"α = {a:.3f}"
    err, label = alpha_error(fit)  # the sampling standard error; the least-squares one beside it where the law misses
    if err is None:
        return f"α = {a:.3f}"
    ls = finite(fit.get("stderr"))
    misses = label == "SE" and law_misses(err, ls, finite(fit.get("r2")))
    miss = f"\n(LS SE {ls:.3f}: the law misses its points)" if misses else ""
    return f"α = {a:.3f} ± {err:.3f} ({label}){miss}"


def _usable(spec: dict[str, Any], n: int) -> int:
    """The usable rank a spectrum states (0 is a rank: none usable), or all ``n`` when it states none."""
    u = spec.get("usable_rank")
    return n if u is None else int(u)


def _fits(doc: dict[str, Any]) -> list[dict[str, Any]]:
    fits = doc.get("fits")
    if isinstance(fits, list) and fits:
        return [f for f in fits if isinstance(f, dict) and finite(f.get("alpha")) is not None]
    fit = doc.get("fit")
    return [fit] if isinstance(fit, dict) and finite(fit.get("alpha")) is not None else []


def _window_bars(ax: Any, fits: list[dict[str, Any]]) -> None:
    """Each window as a bracket along the top edge (no overlapping shading), in its fit's colour
    and line style."""
    from matplotlib.transforms import blended_transform_factory

    tr = blended_transform_factory(ax.transData, ax.transAxes)
    for i, f in enumerate(fits):
        k1, k2 = f["window"]
        y = 0.985 - 0.035 * i
        ax.plot([k1, k2], [y, y], transform=tr, color=PALETTE[i % len(PALETTE)], lw=2.2,
                ls=LINESTYLES[i % len(LINESTYLES)], solid_capstyle="butt", clip_on=False)
        ax.plot([k1, k1, np.nan, k2, k2], [y - 0.02, y + 0.005, np.nan, y - 0.02, y + 0.005], transform=tr,
                color=PALETTE[i % len(PALETTE)], lw=0.8, clip_on=False)


_SUPERSCRIPT = str.maketrans("-0123456789", "⁻⁰¹²³⁴⁵⁶⁷⁸⁹")


def _power_of_ten(value: float, _pos: Any = None) -> str:
    """``10⁻²`` in plain Unicode (no mathtext to parse: a figure draws several times faster)."""
    if value <= 0 or not math.isfinite(value):
        return ""
    e = math.log10(value)
    if abs(e - round(e)) > 1e-9:
        return ""
    return "10" + str(int(round(e))).translate(_SUPERSCRIPT)


def log_ticks(ax: Any) -> None:
    """Log axes labelled ``10ⁿ`` at the decades only (plain text, no mathtext)."""
    from matplotlib.ticker import FuncFormatter

    def minor(axis: Any) -> Any:
        def label(value: float, _pos: Any = None) -> str:  # only when the view spans about 2 decades or less
            lo, hi = sorted(axis.get_view_interval())
            if lo <= 0 or hi / lo > 10 ** 2.05 or value <= 0:
                return ""
            lead = value / 10 ** math.floor(math.log10(value) + 1e-9)
            return f"{value:g}" if round(lead, 6) in (2.0, 5.0) else ""

        return FuncFormatter(label)

    for axis, scale in ((ax.xaxis, ax.get_xscale()), (ax.yaxis, ax.get_yscale())):
        if scale == "log":
            axis.set_major_formatter(FuncFormatter(_power_of_ten))
            axis.set_minor_formatter(minor(axis))


def _legend(ax: Any, **kwargs: Any) -> None:
    """A legend only when something is labelled (matplotlib warns on an empty one), at the figures' size,
    each label wrapped to fit within the axes (beside its handle)."""
    handles, labels = ax.get_legend_handles_labels()
    if handles:
        kwargs.setdefault("fontsize", FONT["legend.fontsize"])
        given = kwargs["fontsize"]
        size = float(given) if isinstance(given, int | float) else 6.5
        share = max(ax.get_position().width - 0.5 / ax.figure.get_figwidth(), 0.2)  # less the handle (0.5 in)
        ax.legend(handles, [wrapped(str(label), ax.figure, share, size) for label in labels], **kwargs)


def _style(ax: Any) -> Any:
    """The figures' type sizes on any Axes (a notebook's too: its rcParams are left alone)."""
    ax.xaxis.label.set_size(FONT["axes.labelsize"])
    ax.yaxis.label.set_size(FONT["axes.labelsize"])
    ax.tick_params(labelsize=FONT["xtick.labelsize"])
    return ax


def _major_labels_only(ax: Any) -> None:
    log_ticks(ax)


def _fit_label(f: dict[str, Any]) -> str:
    k1, k2 = f["window"]
    text = interval_text(f)
    if f.get("model") == "broken" and finite(f.get("alpha_2")) is not None and finite(f.get("crossover")):
        se = f" ± {f['stderr']:.3f} (LS SE)" if finite(f.get("stderr")) is not None else ""  # (no sampling SE)
        text = f"α₁ = {f['alpha']:.3f}{se}, α₂ = {f['alpha_2']:.3f},\ncrossover j = {f['crossover']:.0f}"
    elif f.get("model") == "log-corrected":
        text = f"log-corrected (p = {f.get('degree')}), {text}"
    return f"{text}, ranks {k1}–{k2}"


def _excluded_marks(ax: Any, ranks: np.ndarray, counts: list[tuple[int, str]]) -> None:
    """Points left out of the fits as open triangles on the lower edge."""
    from matplotlib.transforms import blended_transform_factory

    if ranks.size == 0:
        return
    tr = blended_transform_factory(ax.transData, ax.transAxes)
    label = ", ".join(f"{k} {what}" for k, what in counts if k)
    ax.plot(ranks, np.full(ranks.size, 0.012), "v", transform=tr, ms=3.2, mfc="none", mec=DATA_COLOR, mew=0.6,
            clip_on=False, label=f"below the axis: {label}")


def wrapped(text: str, fig: Any, share: float, size: float = 8.0) -> str:
    """``text`` broken at spaces into lines that fit ``share`` of the figure's width at ``size`` points
    (a character taken as 0.6 of the size: a little wider than the average glyph)."""
    import textwrap

    chars = max(int(share * fig.get_figwidth() * 72.0 / (0.6 * size)), 12)
    return "\n".join(textwrap.fill(line, chars, break_long_words=False, break_on_hyphens=False) or line
                     for line in text.split("\n"))


def _own_title(ax: Any, title: str | bool | None) -> str | bool:
    """Whether (and what) to title an axes: a string always; True unless the axes already has a title
    (one is never overwritten); None, the default, only on axes this module made (``ax=None``): a title
    the caller sets afterwards on their own axes never collides with one of ours."""
    if isinstance(title, str):
        return title
    if title is None:
        return ax is None
    if ax is not None and any(ax.get_title(loc=loc) for loc in ("left", "center", "right")):
        return False
    return bool(title)


F = TypeVar("F", bound=Callable[..., Any])


def _quiet_limits(draw: F) -> F:
    """``draw`` with float64 overflow and underflow ignored while it builds its axes: matplotlib autoscales a log axis
    from the data as each artist is added, and a report's number near 1e300 (written elsewhere) overflowed those
    interim limits, numpy's warning reaching a notebook's output. (Drawing such a figure is matplotlib's own: its log
    ticks can overflow too; :func:`save` and the report page draw under the same guard.)"""
    @functools.wraps(draw)
    def quiet(*args: Any, **kwargs: Any) -> Any:
        with np.errstate(over="ignore", under="ignore"):
            return draw(*args, **kwargs)

    return cast(F, quiet)


@_quiet_limits
def spectrum(rep: Any, ax: Any = None, *, title: str | bool | None = None, legend: bool = True) -> Any:
    """The log-log eigenvalue spectrum: the usable eigenvalues as points, each fit as a line over its
    window (labelled with alpha and its interval; the broken law's two exponents and crossover), the
    windows as brackets on the top edge, the shuffled control, the numerical floor when it is in
    view, and the excluded eigenvalues as triangles on the lower edge.

    ``title``: a string, True (the data's name and shape, unless ``ax`` already has a title), False; the
    default titles only a figure this function makes (``ax=None``)."""
    doc = _doc(rep)
    spec = doc.get("spectrum")
    if not isinstance(spec, dict) or not isinstance(spec.get("eigenvalues"), list):
        raise OptionError("this report holds no eigenvalues to draw (a spectra.report/1 with a spectrum).")
    require_matplotlib()
    title = _own_title(ax, title)
    ax = _new_axes(ax)
    lam = np.asarray([np.nan if v is None else v for v in spec["eigenvalues"]], dtype=float)
    ranks = np.arange(1, lam.size + 1)
    usable = min(_usable(spec, lam.size), lam.size)
    good = np.zeros(lam.size, bool)
    good[:usable] = True
    good &= np.isfinite(lam) & (lam > 0)
    ax.loglog(ranks[good], lam[good], "o", ms=1.8, color=DATA_COLOR, mew=0, label="eigenvalues", zorder=3)
    lo, hi = (float(lam[good].min()), float(lam[good].max())) if good.any() else (1e-12, 1.0)
    fits = _fits(doc)
    for i, f in enumerate(fits):
        k1, k2 = f["window"]
        j = np.geomspace(k1, k2, 100)
        ax.loglog(j, predict(f, j), color=PALETTE[i % len(PALETTE)], ls=LINESTYLES[i % len(LINESTYLES)], lw=1.4,
                  label=_fit_label(f), zorder=4)
        if f.get("model") == "broken" and finite(f.get("crossover")):
            jb = float(f["crossover"])
            ax.plot([jb], predict(f, np.array([jb])), "D", ms=4, mfc="white", mec=PALETTE[i % len(PALETTE)],
                    zorder=5)
    if fits:
        _window_bars(ax, fits)
    pop = (doc.get("fit") or {}).get("population") if isinstance(doc.get("fit"), dict) else None
    if isinstance(pop, dict) and finite(pop.get("alpha")) is not None:
        ci = pop.get("ci") or [None, None]
        iv = f", 95% CI {ci[0]:.3f}–{ci[1]:.3f}" if finite(ci[0]) is not None and finite(ci[1]) is not None else ""
        nd = finite(pop.get("n_over_d"))
        ax.plot([], [], " ", label=f"population α = {pop['alpha']:.3f}{iv}\n(finite-n corrected"
                                   f"{f', n/d = {nd:.3g}' if nd is not None else ''})")
    control = doc.get("control")
    if isinstance(control, dict) and isinstance(control.get("eigenvalues"), list):
        c = np.asarray([np.nan if v is None else v for v in control["eigenvalues"]], dtype=float)
        cr = np.arange(1, c.size + 1)
        ok = np.isfinite(c) & (c >= lo)
        ax.loglog(cr[ok], c[ok], "-", lw=0.9, color=CONTROL_COLOR, label="shuffled control", zorder=2)
    floor = finite(spec.get("numerical_floor"))
    if floor is not None and floor >= lo / 10 and floor > 0:
        ax.axhline(floor, color=DATA_COLOR, lw=0.6, ls=(0, (1, 2)), label="numerical floor")
        lo = min(lo, floor)
    rest = ~good & np.isfinite(lam)
    n_near = int(spec.get("near_null") or 0)
    n_floor = max(int(spec.get("sampling_rank") or lam.size) - int(spec.get("numerical_rank") or lam.size), 0)
    n_zero = max(lam.size - int(spec.get("sampling_rank") or lam.size), 0)
    _excluded_marks(ax, ranks[rest], [(n_near, "near-null"), (n_floor, "at the floor"),
                                       (n_zero, "sampling zero" if n_zero == 1 else "sampling zeros")])
    # in logs: a spectrum from 1e-300 to 1e300 keeps finite limits (hi * pad^2.2 overflowed: "Axis limits cannot be
    # NaN or Inf")
    # (and within 1e-300..1e300: a subnormal eigenvalue's log limits were not finite either)
    llo, lhi = math.log(max(lo, 1e-300)), math.log(min(max(hi, lo, 1e-300), 1e300))
    span = lhi - llo if lhi > llo else math.log(4.0)
    bottom, top = max(llo - 0.06 * span, -690.0), min(lhi + 0.132 * span, 690.0)
    ax.set_ylim(math.exp(bottom), math.exp(max(top, bottom + math.log(10.0))))
    ax.set_xlim(0.8, max(lam.size * 1.25, 2.0))
    _major_labels_only(ax)
    ax.set_xlabel("rank j")
    ax.set_ylabel("eigenvalue λⱼ")
    if title:
        ax.set_title(wrapped(title if isinstance(title, str) else title_of(doc), ax.figure,
                             ax.get_position().width), loc="left", fontsize=FONT["axes.titlesize"])
    if legend:
        _legend(ax, loc="lower left", handlelength=2.2, frameon=True, framealpha=0.7, edgecolor="none",
                facecolor="white", fontsize=6)  # a decaying spectrum leaves the lower left free (a long label too)
    ax.grid(True, which="major", alpha=0.25, lw=0.5)
    return _style(ax)


@_quiet_limits
def local_slope(rep: Any, ax: Any = None, *, legend: bool = True) -> Any:
    """The local slope ``-d log lambda / d log j`` against the rank, each fit's alpha as a line over
    its window."""
    doc = _doc(rep)
    require_matplotlib()
    ax = _new_axes(ax, height=1.5)
    ls: dict[str, Any] = doc["local_slope"] if isinstance(doc.get("local_slope"), dict) else {}
    r, a = ls.get("ranks") or [], ls.get("alpha_local") or []
    pts = [(x, y) for x, y in zip(r, a, strict=False) if finite(x) and finite(y) is not None]
    if pts:
        ax.semilogx([p[0] for p in pts], [p[1] for p in pts], "o-", ms=2.2, lw=0.8, color=DATA_COLOR,
                    label=f"local slope (±{(ls.get('width_decades') or 0.5) / 2:g} decade)")
    for i, f in enumerate(_fits(doc)):
        k1, k2 = f["window"]
        broken = f.get("model") == "broken" and finite(f.get("crossover")) and finite(f.get("alpha_2")) is not None
        jb = float(f["crossover"]) if broken else float(k2)
        ax.plot([k1, jb], [f["alpha"], f["alpha"]], color=PALETTE[i % len(PALETTE)],
                ls=LINESTYLES[i % len(LINESTYLES)], lw=1.4)
        if broken:
            ax.plot([jb, k2], [f["alpha_2"], f["alpha_2"]], color=PALETTE[i % len(PALETTE)], lw=1.4,
                    ls=LINESTYLES[i % len(LINESTYLES)])
            ax.axvline(jb, color=PALETTE[i % len(PALETTE)], lw=0.6, ls=":")
    ax.set_xscale("log")
    log_ticks(ax)
    ax.set_xlabel("rank j")
    ax.set_ylabel("local slope")
    ax.grid(True, which="major", alpha=0.25, lw=0.5)
    if legend:
        _legend(ax, loc="best", frameon=False)
    return _style(ax)


@_quiet_limits
def density(rep: Any, ax: Any = None, *, title: str | bool | None = None, bins: int | None = None) -> Any:
    """The density fit (WeightWatcher's ESD plot): the histogram of the usable eigenvalues on
    log-log axes, ``x_min``, and the fitted tail ``p(lambda) = (n_tail / N) (alpha - 1) / x_min
    (lambda / x_min)^-alpha``, with alpha, its standard error and the KS distance written on it.
    ``title`` as :func:`spectrum`'s."""
    doc = _doc(rep)
    spec, dens = doc.get("spectrum"), doc.get("density")
    if not isinstance(dens, dict) or finite(dens.get("alpha")) is None:
        raise OptionError("this report has no density fit to draw: run it with --density (density=True).")
    if not isinstance(spec, dict) or not isinstance(spec.get("eigenvalues"), list):
        raise OptionError("this report holds no eigenvalues to draw (a spectra.report/1 with a spectrum).")
    require_matplotlib()
    title = _own_title(ax, title)
    ax = _new_axes(ax)
    lam = np.asarray([np.nan if v is None else v for v in spec["eigenvalues"]], dtype=float)
    lam = lam[: _usable(spec, lam.size)]
    lam = lam[np.isfinite(lam) & (lam >= 1e-300)]  # (what log axes can hold: a subnormal's density overflows)
    n = lam.size
    if n == 0 or finite(dens.get("xmin")) is None or not float(dens["xmin"]) > 0:
        raise OptionError("this report's density fit has no positive usable eigenvalue (or no positive x_min) to "
                          "draw.")
    nb = bins or int(np.clip(2 * round(n ** (1 / 3)) + 8, 12, 60))
    edges = np.geomspace(lam.min(), lam.max() * (1 + 1e-9), nb + 1) if lam.min() < lam.max() else \
        np.array([lam.min() / 1.1, lam.max() * 1.1])
    counts, edges = np.histogram(lam, bins=edges)
    dens_vals = counts / (n * np.diff(edges))
    ax.stairs(np.where(counts > 0, dens_vals, np.nan), edges, fill=True, color="#c6dbef", ec=PALETTE[0], lw=0.6,
              label=f"eigenvalues ({n:,})")
    alpha, xmin = float(dens["alpha"]), float(dens["xmin"])
    n_tail = int(dens.get("n_tail") or 0)
    x = np.geomspace(xmin, max(lam.max(), xmin), 50)
    with np.errstate(over="ignore", under="ignore", divide="ignore", invalid="ignore"):
        tail = (n_tail / n) * (alpha - 1) / xmin * (x / xmin) ** (-alpha)
    tail = np.where(np.isfinite(tail) & (tail > 0), tail, np.nan)
    ax.loglog(x, tail, color=PALETTE[1], ls="--", lw=1.5, label="fitted tail")
    ww = doc.get("weightwatcher")
    cols = ww.get("columns") if isinstance(ww, dict) else None
    ww_xmin = finite(cols.get("xmin")) if isinstance(cols, dict) else None
    ax.axvline(xmin, color=PALETTE[2], ls=":", lw=1.2, label=f"x_min = {_fmt(xmin)}" + (
        f" (WW xmin {_fmt(ww_xmin)} on W^T W)" if ww_xmin is not None else ""))
    se = finite(dens.get("stderr"))
    ks = finite(dens.get("ks_distance"))
    text = [f"α = {alpha:.2f}" + (f" ± {se:.2f} (SE)" if se is not None else ""),
            f"KS distance = {ks:.3f}" if ks is not None else "", f"tail: {n_tail:,} of {n:,} eigenvalues"]
    ax.text(0.97, 0.97, "\n".join(t for t in text if t), transform=ax.transAxes, ha="right", va="top",
            fontsize=7, bbox={"boxstyle": "round,pad=0.3", "fc": "white", "ec": "#bbbbbb", "lw": 0.5})
    positive = dens_vals[(counts > 0) & np.isfinite(dens_vals) & (dens_vals > 0)]
    if positive.size and np.isfinite(positive.max() * 3) and positive.min() / 3 > 0:
        ax.set_ylim(positive.min() / 3, positive.max() * 3)
    log_ticks(ax)
    ax.set_xlabel("eigenvalue λ (spectra's scale, 1/n)")
    ax.set_ylabel("density p(λ)")
    legend_box = {"frameon": True, "framealpha": 0.85, "edgecolor": "none", "facecolor": "white"}
    if title:
        ax.set_title(wrapped(title if isinstance(title, str) else f"{title_of(doc)}: ESD", ax.figure,
                             ax.get_position().width), loc="left", fontsize=FONT["axes.titlesize"])
    _legend(ax, loc="lower left", **legend_box)
    ax.grid(True, which="major", alpha=0.25, lw=0.5)
    return _style(ax)


def errorbar(ax: Any, xs: Sequence[float], ys: Sequence[float], errs: Sequence[tuple[float, float] | None],
             **style: Any) -> Any:
    """``ax.errorbar`` with each point's ``(low, high)`` interval (None: no bar), or a plain line when no
    point has one."""
    yerr = np.array([[y - e[0], e[1] - y] if e else [0.0, 0.0] for y, e in zip(ys, errs, strict=True)]).T
    yerr = np.clip(yerr, 0, None)
    if not any(errs):
        return ax.plot(xs, ys, **style)
    return ax.errorbar(xs, ys, yerr=yerr.reshape(2, -1), capsize=1.5, elinewidth=0.7, **style)




@_quiet_limits
def trend(points: Any, metric: str, ax: Any = None, *, max_series: int = 12) -> Any:
    """One metric against the step, a line per series, with error bars (the interval of each
    report: ``--ci``'s bootstrap interval, or ± the standard error). ``points``: a
    :class:`spectra_cli.run.trend.TrendResult` or its points. Past ``max_series`` series (a checkpoint's
    every layer), each is a thin grey line, their mean per step a black one, and the few that moved most
    (first step to last) are drawn in colour and named in the legend."""
    require_matplotlib()
    ax = _new_axes(ax, height=2.2)
    pts = list(getattr(points, "points", points))
    series: dict[str, list[Any]] = {}
    for p in pts:
        series.setdefault(p.series, []).append(p)
    drawn = {name: [p for p in ps if p.values.get(metric) is not None] for name, ps in series.items()}
    drawn = {name: ps for name, ps in drawn.items() if ps}
    many = len(drawn) > max_series
    named = list(drawn)
    if many:  # the series that moved most, first step to last
        moved = sorted(drawn, key=lambda n: -abs(drawn[n][-1].values[metric] - drawn[n][0].values[metric]))
        named = moved[:MOVERS_NAMED]
        for ps in drawn.values():
            ax.plot([p.step for p in ps], [p.values[metric] for p in ps], color="#bbbbbb", lw=0.6, zorder=1)
        steps = sorted({p.step for ps in drawn.values() for p in ps})
        mean = [float(np.mean([p.values[metric] for ps in drawn.values() for p in ps if p.step == st]))
                for st in steps]
        ax.plot(steps, mean, color="#1a1a1a", lw=2.0, label=f"mean of {len(drawn)} series", zorder=3)
    for i, name in enumerate(named):
        ps = drawn[name]
        style = {"color": PALETTE[i % len(PALETTE)], "ls": LINESTYLES[i % len(LINESTYLES)] if i else "-",
                 "marker": "os^vD<>"[i % 7], "ms": 3, "lw": 1.0, "label": _short(name), "zorder": 2}
        errs = [(p.intervals or {}).get(metric) for p in ps]
        errorbar(ax, [p.step for p in ps], [p.values[metric] for p in ps], errs, **style)
    ax.set_xlabel("step")
    ax.set_ylabel(registry.label(metric))
    ax.grid(True, alpha=0.25, lw=0.5)
    if len(drawn) > 1:
        _legend(ax, frameon=False, **({"title": f"moved most (of {len(drawn)})", "title_fontsize": 6}
                                      if many else {}))
    return _style(ax)


#: Past ``max_series`` series, how many of those that moved most a trend figure names.
MOVERS_NAMED = 4


def layer_name_size(count: int) -> float:
    """The type size (points) of the layer names along a per-layer figure's bottom."""
    return 4.5 if count > 24 else 6.0


def _short(name: str, keep: int = 48) -> str:
    return name if len(name) <= keep else "…" + name[-(keep - 1):]


@_quiet_limits
def layers(docs: Iterable[dict[str, Any]], metric: str, ax: Any = None, *, healthy: tuple[float, float] | None = None,
           label: str | None = None, names: bool = True) -> Any:
    """One metric per layer of a batch, in the network's order (the natural order of the names), with
    error bars where the reports carry them, and ``healthy`` (e.g. WeightWatcher's 2..6 for its
    alpha) as a band."""
    from spectra_cli.documents import lookup

    require_matplotlib()
    docs = list(docs) if not isinstance(docs, dict) else [docs]
    bad = next((i for i, d in enumerate(docs) if not isinstance(d, dict)), None)
    if bad is not None:
        raise OptionError(f"{param('docs')} must be reports (dicts: a batch's JSON lines); item {bad} is a "
                          f"{type(docs[bad]).__name__}.")
    rows = [d for d in docs if "skipped" not in d and "error" not in d]
    items = [item_name(d, str(i)) for i, d in enumerate(rows)]
    order = sorted(range(len(rows)), key=lambda i: natural_key(items[i]))
    labels = layer_names([items[i] for i in order])
    ys = [finite(lookup(rows[i], metric)) for i in order]
    ax = _new_axes(ax, height=2.4, width=2 * COLUMN_WIDTH)
    xs = [k for k, y in enumerate(ys) if y is not None]
    vals = [float(y) for y in ys if y is not None]
    errs = [uncertainty(rows[order[k]], metric) for k in xs]
    if healthy is not None:
        ax.axhspan(healthy[0], healthy[1], color=PALETTE[2], alpha=0.12, lw=0,
                   label=f"healthy {healthy[0]:g}–{healthy[1]:g}")
        _legend(ax, loc="upper right", frameon=False)
    errorbar(ax, xs, vals, errs, color=PALETTE[0], marker="o", ms=2.6, lw=0.7, ls="-")
    ax.set_xticks(range(len(labels)))
    if names:
        ax.set_xticklabels(labels, rotation=90)
    else:
        ax.tick_params(labelbottom=False)
    ax.set_xlim(-0.7, len(labels) - 0.3)
    ax.set_ylabel(_wrapped_label(label or registry.label(metric), ax))
    ax.grid(True, axis="y", alpha=0.25, lw=0.5)
    _style(ax)
    if names:  # (after the house sizes: many names take a smaller type, which the report page's margin counts on)
        ax.tick_params(axis="x", labelsize=layer_name_size(len(labels)))
    return ax


def sequence_positions(doc: Any, ax: Any = None, *, metric: str | None = None) -> Any:
    """One per-position metric of ``spectra sequence`` (the registry's per-position numbers: the participation
    ratio, alpha, the mean cosine; the first of them by default) against the position."""
    doc = _doc(doc)
    require_matplotlib()
    ax = _new_axes(ax, height=2.0)
    entries = {m.name: m for m in registry.per_position()}
    metric = metric if metric is not None else next(iter(entries))
    rows = [r for r in doc.get("per_position") or [] if finite(r.get(metric)) is not None]
    label = entries[metric].label.removesuffix(" (position)").replace("alpha", "α (rank fit)") \
        if metric in entries else metric
    ax.plot([r["position"] for r in rows], [r[metric] for r in rows], "o-", ms=2.5, lw=0.9, color=PALETTE[0],
            label=f"{label}, per position")
    ax.set_xlabel("position in the window")
    ax.set_ylabel(label)
    _legend(ax, frameon=False, loc="best")
    ax.grid(True, alpha=0.25, lw=0.5)
    return _style(ax)


@_quiet_limits
def sequence_context(doc: Any, ax: Any = None) -> Any:
    """The context spectrum of ``spectra sequence`` (eigenvalue / sum, log-log) with its fit over the
    window and the controls."""
    doc = _doc(doc)
    require_matplotlib()
    ax = _new_axes(ax)
    parts: list[tuple[str, Any, Any, str]] = [("context", doc.get("context"), "-", DATA_COLOR)]
    parts += [(f"{k} control", v, LINESTYLES[(i + 1) % len(LINESTYLES)], (CONTROL_COLOR, PALETTE[3])[i % 2])
              for i, (k, v) in enumerate((doc.get("controls") or {}).items())]
    from spectra_cli.analysis.suite import POOR_FIT_R2, POOR_FIT_RMS

    lo = math.inf
    view: tuple[float, float] | None = None
    for name, part, style, color in parts:
        if not isinstance(part, dict):
            continue
        lam = np.asarray(part["spectrum"]["eigenvalues"], dtype=float)
        usable = _usable(part["spectrum"], lam.size)
        total = float(lam[lam > 0].sum()) or 1.0
        lam = lam[:usable]
        lam = lam[lam > 0] / total
        lam = lam[lam > 0]  # (an eigenvalue far below the sum underflows to zero: a log axis cannot hold it)
        if not lam.size:
            continue
        below = view is not None and float(lam.min()) < view[0]
        ax.loglog(np.arange(1, lam.size + 1), lam, style, color=color, lw=1.0,
                  label=name + (" (clipped below)" if below else ""))
        lo = min(lo, float(lam.min()))
        if name == "context":  # the view follows the data: a control far below does not squash it
            view = (float(lam.min()) / 4.0, float(lam.max()) * 3.0)
        fit = part.get("fit")
        if name == "context" and isinstance(fit, dict) and finite(fit.get("alpha")) is not None:
            k1, k2 = fit["window"]
            j = np.geomspace(k1, k2, 60)
            r2, rms = finite(fit.get("r2")), finite(fit.get("residual_rms"))
            poor = (r2 is not None and r2 < POOR_FIT_R2) or (rms is not None and rms > POOR_FIT_RMS)
            label = _fit_label(fit) + (f"\npoor fit: R² {fit['r2']:.2f}, residual RMS {fit['residual_rms']:.2f}"
                                       if poor else "")
            ax.loglog(j, predict(fit, j) / total, color=PALETTE[0], ls="--", lw=1.6, label=label)
            _window_bars(ax, [dict(fit)])
    if view is not None:
        ax.set_ylim(*view)
    _major_labels_only(ax)
    ax.set_xlabel("rank j")
    ax.set_ylabel("eigenvalue / sum")
    _legend(ax, frameon=False, loc="lower left")  # (the spectra fall from the upper left: that corner is free)
    ax.grid(True, which="major", alpha=0.25, lw=0.5)
    return _style(ax)


def lag_energy(doc: Any, ax: Any = None) -> Any:
    """The lag energies of ``spectra sequence``: the data's and the shuffled control's."""
    doc = _doc(doc)
    require_matplotlib()
    ax = _new_axes(ax, height=2.0)
    lag = doc.get("lag_energy") or {}
    ax.plot(lag.get("lags") or [], lag.get("data") or [], "o-", ms=2.5, lw=1.0, color=PALETTE[0], label="data")
    if lag.get("shuffled"):
        ax.plot(lag["lags"], lag["shuffled"], "s--", ms=2.5, lw=1.0, color=CONTROL_COLOR, mfc="none",
                label="shuffled control")
    ax.set_xlabel("lag (positions)")
    ax.set_ylabel("lag energy")
    _legend(ax, frameon=False, loc="best")
    ax.grid(True, alpha=0.25, lw=0.5)
    return _style(ax)


def figure(width: float, height: float, margins: dict[str, float] | None = None) -> Any:
    """A ``matplotlib.figure.Figure`` (no pyplot) with the constrained layout; with ``margins`` (inches:
    left, bottom, and optionally right, top, hspace) a fixed layout instead, which draws in half the time
    (the report page draws a dozen)."""
    from matplotlib.figure import Figure

    if margins is None:
        return Figure(figsize=(width, height), layout="constrained")
    fig = Figure(figsize=(width, height))
    fig.subplots_adjust(left=margins["left"] / width, right=1 - margins.get("right", 0.1) / width,
                        bottom=margins["bottom"] / height, top=1 - margins.get("top", 0.1) / height,
                        hspace=margins.get("hspace", 0.1))
    return fig


def report_figure(rep: Any, *, title: str | None = None) -> Any:
    """The figure of ``spectra fit --plot``: the spectrum over its local slope, one column wide; with a
    density fit, the ESD panel beside them (two columns). ``title``: instead of the data's name and shape
    (``--title``)."""
    doc = _doc(rep)
    mpl = require_matplotlib()
    with mpl.rc_context(FONT):
        has_density = isinstance(doc.get("density"), dict) and finite(doc["density"].get("alpha")) is not None
        fig = figure(COLUMN_WIDTH * (2 if has_density else 1) + (0.2 if has_density else 0), 4.0)
        grid = fig.add_gridspec(2, 2 if has_density else 1, height_ratios=[2.6, 1.1])
        ax = fig.add_subplot(grid[0, 0])
        spectrum(doc, ax=ax, title=title or True)
        ax.set_xlabel("")
        ax.tick_params(labelbottom=False)
        local_slope(doc, ax=fig.add_subplot(grid[1, 0], sharex=ax), legend=False)
        if has_density:
            density(doc, ax=fig.add_subplot(grid[:, 1]), title="density fit (ESD)")
    return fig


def density_figure(rep: Any, *, title: str | None = None) -> Any:
    mpl = require_matplotlib()
    with mpl.rc_context(FONT):
        fig = figure(COLUMN_WIDTH, 2.6)
        density(rep, ax=fig.add_subplot(), title=title or True)
    return fig


def sequence_figure(doc: Any, *, title: str | None = None) -> Any:
    """The figure of ``spectra sequence --plot``: per-position participation ratio and alpha, the
    context spectrum with its fit and controls, the lag energies; one legend per panel. ``title``:
    instead of the data's name and layout (``--title``)."""
    doc = _doc(doc)
    mpl = require_matplotlib()
    with mpl.rc_context(FONT):
        fig = figure(2 * COLUMN_WIDTH, 4.4)
        axes = fig.subplots(2, 2)
        first, second = (m.name for m in registry.per_position()[:2])  # (the participation ratio, alpha)
        sequence_positions(doc, ax=axes[0, 0], metric=first)
        sequence_positions(doc, ax=axes[1, 0], metric=second)
        context = sequence_context(doc, ax=axes[0, 1])
        lag_energy(doc, ax=axes[1, 1])
        if context.get_legend() is not None:  # under the figure: inside, it covered the curves
            handles, labels = context.get_legend_handles_labels()
            context.get_legend().remove()
            fig.set_figheight(4.4 + 0.16 * ((len(labels) + 1) // 2) + 0.2)
            fig.legend(handles, [lb.replace("\n", "; ") for lb in labels], loc="outside lower center", ncol=2,
                       frameon=False, fontsize=FONT["legend.fontsize"], title="context spectrum (upper right)",
                       title_fontsize=FONT["legend.fontsize"])
        src = doc.get("source") or {}
        fig.suptitle(wrapped(title or f"{data_name(doc)}: {src.get('layout', '')}", fig, 0.98, 8.0), fontsize=8,
                     x=0.01, ha="left")
    return fig


def trend_figure(points: Any, metrics: Sequence[str], *, title: str | None = None) -> Any:
    """The figure of ``spectra trend --plot``: one panel per metric against the step; ``title`` above them
    (``--title``), the error bars' meaning under it."""
    mpl = require_matplotlib()
    with mpl.rc_context(FONT):
        fig = figure(COLUMN_WIDTH * 1.6, 1.9 * len(metrics) + 0.3)
        axes = fig.subplots(len(metrics), 1, squeeze=False, sharex=True)
        for ax, m in zip(axes[:, 0], metrics, strict=True):
            trend(points, m, ax=ax)
            if ax is not axes[-1, 0]:
                ax.set_xlabel("")
        note = "error bars: each report's 95% bootstrap interval (--ci), else ± its standard error"
        fig.suptitle(wrapped(f"{title}\n{note}" if title else note, fig, 0.98, 6.5), fontsize=6.5, x=0.01, ha="left",
                     color="#555555")
    return fig


def save(fig: Any, path: str | os.PathLike[str], *, dpi: int = 200) -> str:
    """Write ``fig`` to ``path`` (its extension chooses PNG, SVG or PDF) through a temporary file
    beside it, renamed into place: no half-written figure, even on Ctrl-C. Returns the path."""
    from spectra_cli.sinks import atomic_file

    path = os.fspath(path)
    fmt = formats.by_path(path, formats.FIGURES)
    if fmt is None:
        raise OptionError(f"{param('plot', path)}: the file must end in {', '.join(FORMATS)}.")
    mpl = require_matplotlib()
    # (a spectrum reaching 1e300 overflows matplotlib's tick arithmetic: numpy's warnings never reach stderr)
    with mpl.rc_context(FONT), atomic_file(path, flag="plot") as f, np.errstate(over="ignore", under="ignore"):
        fig.savefig(f, format=fmt.name, dpi=dpi, metadata=_metadata(fmt))
    return path


def _metadata(fmt: formats.Format) -> dict[str, Any]:
    from spectra_cli.version import __version__

    creator = f"spectra {__version__}"
    if fmt is formats.PNG:
        return {"Software": creator}
    if fmt is formats.SVG:
        return {"Creator": creator, "Date": None}
    return {"Creator": creator, "CreationDate": None}
