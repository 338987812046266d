"""Plots as files (matplotlib, an optional extra): the log-log spectrum with its fits,
window, floors and shuffled control, over a local-slope panel. Written atomically."""

from __future__ import annotations

import os
from collections import defaultdict
from typing import TYPE_CHECKING, Any

import numpy as np

from spectra_cli.errors import OptionError, param

if TYPE_CHECKING:
    from spectra_cli.run.trend import Point

FORMATS = (".png", ".svg", ".pdf")


def pyplot() -> Any:
    try:
        import matplotlib
    except ImportError:
        raise OptionError(
            f"{param('plot')} needs matplotlib, the optional extra 'plot': pip install 'spectra-cli[plot]' "
            "(from a checkout: pip install '.[plot]')."
        ) from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def check_plot_target(path: str) -> None:
    """Fail before any work if the plot cannot be written."""
    ext = os.path.splitext(path)[1].lower()
    if ext not in FORMATS:
        raise OptionError(f"{param('plot', path)}: the file must end in {', '.join(FORMATS)}.")
    parent = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(parent):
        raise OptionError(f"{param('plot', path)}: directory {parent} does not exist.")
    from spectra_cli.sinks import check_replaceable

    check_replaceable(path, "plot")
    pyplot()


def save_atomically(fig: Any, path: str) -> None:
    """Write to a temporary file beside the target, then rename: no half-written plots."""
    from spectra_cli.sinks import atomic_file

    ext = os.path.splitext(path)[1].lower()
    with atomic_file(path, flag="plot") as f:  # the umask's mode, removed on any failure or signal
        fig.savefig(f, format=ext[1:], dpi=120, bbox_inches="tight")


def plot_report(report: Any, path: str) -> None:
    plt = pyplot()
    spec = report.spectrum
    lam = spec.eigenvalues
    keep = lam > spec.numerical_floor
    ranks = np.arange(1, lam.size + 1)
    fig, (ax, bx) = plt.subplots(2, 1, figsize=(7.5, 7.5), height_ratios=[3, 1.4], sharex=True)
    ax.loglog(ranks[keep], lam[keep], ".", ms=3, color="#1f4e79", label="eigenvalues")
    if report.control is not None:
        c = report.control.eigenvalues
        ok = c > 0
        ax.loglog(np.arange(1, c.size + 1)[ok], c[ok], "-", lw=1, color="#999999", label="shuffled control")
    suite = report.suite
    colors = ["#c0392b", "#27ae60", "#8e44ad", "#d35400"]
    if suite is not None:
        for i, f in enumerate(suite.fits):
            j = np.geomspace(f.window.k_min, f.window.k_max, 200)
            label = f"{f.model} {f.method}: alpha = {f.alpha:.3f} (ranks {f.window.k_min}-{f.window.k_max})"
            ax.loglog(j, f.predict(j), "--", lw=1.6, color=colors[i % len(colors)], label=label)
            ax.axvspan(f.window.k_min, f.window.k_max, color=colors[i % len(colors)], alpha=0.08)
    if keep.any() and spec.numerical_floor >= lam[keep].min() * 1e-3:
        ax.axhline(spec.numerical_floor, color="k", lw=0.8, ls=":", label="numerical floor")
    if spec.usable_rank < lam.size:
        ax.axvline(spec.usable_rank, color="k", lw=0.8, ls="-.", label=f"usable rank {spec.usable_rank}")
    ax.set_ylabel("eigenvalue")
    ax.set_title(f"{os.path.basename(str(report.source.get('path')))}: {spec.definition}", fontsize=9)
    ax.legend(fontsize=8, loc="lower left")
    ax.grid(True, which="both", alpha=0.3)
    if suite is not None and suite.local_slope.ranks.size:
        ls = suite.local_slope
        bx.semilogx(ls.ranks, ls.alpha_local, "o-", ms=3, color="#1f4e79", label="local slope")
        for i, f in enumerate(suite.fits):
            bx.axhline(f.alpha, color=colors[i % len(colors)], ls="--", lw=1)
        bx.legend(fontsize=8)
    bx.set_xlabel("rank j")
    bx.set_ylabel("-d log lambda / d log j")
    bx.grid(True, which="both", alpha=0.3)
    fig.tight_layout()
    try:
        save_atomically(fig, path)
    finally:
        plt.close(fig)


def plot_trend(points: list[Point], metrics: list[str], path: str) -> None:
    """Each metric of a batch against the step in its item names (``spectra trend --plot``)."""
    plt = pyplot()
    fig, axes = plt.subplots(len(metrics), 1, figsize=(7.5, 3.2 * len(metrics)), squeeze=False, sharex=True)
    series: dict[str, list[Point]] = defaultdict(list)
    for p in points:
        series[p.series].append(p)
    for ax, m in zip(axes[:, 0], metrics, strict=True):
        for name, pts in series.items():
            xs = [p.step for p in pts if p.values[m] is not None]
            ys = [p.values[m] for p in pts if p.values[m] is not None]
            ax.plot(xs, ys, "o-", ms=3, label=name if len(series) <= 12 else None)
        ax.set_ylabel(m)
        ax.grid(True, alpha=0.3)
        if len(series) <= 12:
            ax.legend(fontsize=7)
    axes[-1, 0].set_xlabel("step")
    fig.tight_layout()
    try:
        save_atomically(fig, path)
    finally:
        plt.close(fig)
