"""The CLI's figure files: the target checked before any work, the figure built by
:mod:`spectra_cli.plot`, written atomically, and ``wrote FILE`` on stderr."""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING, Any

from spectra_cli.errors import OptionError, param
from spectra_cli.sources import formats

if TYPE_CHECKING:
    from spectra_cli.run.trend import Point


def check_plot_options(plot: str | None, title: str | None) -> None:
    """A command's ``--plot`` and ``--title``, checked before any work: a title names a figure, and the figure
    must be writable (:func:`check_plot_target`)."""
    if title is not None and plot is None:
        raise OptionError("--title names the figure: give --plot FILE too.")
    if plot is not None:
        check_plot_target(plot)


def check_plot_target(path: str) -> None:
    """Fail before any work if the plot cannot be written."""
    if formats.by_path(path, formats.FIGURES) is None:
        raise OptionError(f"{param('plot', path)}: the file must end in "
                          f"{', '.join(formats.extensions(*formats.FIGURES))}.")
    parent = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(parent):
        raise OptionError(f"{param('plot', path)}: directory {parent} does not exist.")
    from spectra_cli.plot import require_matplotlib
    from spectra_cli.sinks import check_replaceable

    check_replaceable(path, "plot")
    require_matplotlib()


def wrote(path: str) -> None:
    """``wrote FILE`` on stderr (stdout is only the result)."""
    print(f"wrote {path}", file=sys.stderr)


def _write(fig: Any, path: str) -> None:
    """Save a figure (the command says ``wrote`` once its result is out: a failed run leaves no figure)."""
    from spectra_cli.plot import save

    save(fig, path)


def plot_report(report: Any, path: str, title: str | None = None) -> None:
    from spectra_cli.plot import report_figure

    _write(report_figure(report, title=title), path)


def plot_sequence(doc: dict[str, Any], path: str, title: str | None = None) -> None:
    from spectra_cli.plot import sequence_figure

    _write(sequence_figure(doc, title=title), path)


def plot_trend(points: list[Point], metrics: list[str], path: str, title: str | None = None) -> None:
    """Each metric of a batch against the step in its item names (``spectra trend --plot``)."""
    from spectra_cli.plot import trend_figure

    _write(trend_figure(points, metrics, title=title), path)
