"""What a notebook shows: the error beside alpha is the report's sampling SE (the least-squares one labelled as
such), a figure drawn without an Axes is pyplot's where pyplot is loaded (so the notebook displays it), and a
warning that every layer repeats is said once per process."""

from __future__ import annotations

import re
import subprocess
import sys
import warnings

import numpy as np

import spectra_cli as spectra
from spectra_cli.errors import SpectraWarning


def _broken_law(n: int = 20000, seed: int = 0) -> np.ndarray:
    """A spectrum that is no single power law over ranks 5..150 (two laws, a step between them)."""
    lam = np.r_[np.arange(1, 101) ** -0.5, 0.05 * np.arange(101, 201) ** -2.0]
    return np.random.default_rng(seed).standard_normal((n, 200)) * np.sqrt(lam)


def _alpha_cell(rep: spectra.Report) -> str:
    return re.search(r"<td>alpha \(ranks [^<]*</td><td>([^<]*)</td>", rep._repr_html_()).group(1)


def test_the_error_beside_alpha_is_the_reports_sampling_se():
    rep = spectra.fit(np.random.default_rng(1).standard_normal((3000, 64)) * np.arange(1, 65) ** -0.5)
    assert _alpha_cell(rep) == f"{rep.fit.alpha:.4f} ± {rep.fit.se:.3g} (SE)"


def test_where_the_law_misses_its_points_the_least_squares_error_is_said_beside_it_and_labelled():
    rep = spectra.fit(_broken_law(), window="5:150")
    assert rep.fit.stderr > 100 * rep.fit.se  # the law misses its points
    assert _alpha_cell(rep) == (f"{rep.fit.alpha:.4f} ± {rep.fit.se:.3g} (SE); least-squares error "
                                f"{rep.fit.stderr:.3g}: the power law misses its points")


def test_a_figure_drawn_without_axes_is_pyplots_when_pyplot_is_loaded():
    code = ("import matplotlib; matplotlib.use('Agg'); import matplotlib.pyplot as plt, numpy as np\n"
            "import spectra_cli as s\n"
            "rep = s.fit(np.random.default_rng(0).standard_normal((500, 30)) * np.arange(1, 31) ** -0.5)\n"
            "ax = s.plot.spectrum(rep)\n"
            "assert plt.get_fignums() == [ax.figure.number], plt.get_fignums()\n"
            "assert ax.get_lines()\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr


def test_a_warning_each_layer_repeats_is_said_once_per_process_and_every_report_keeps_it():
    rng = np.random.default_rng(2)
    reports, said = [], []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for k in (3, 4, 5):  # k constant columns: the same finding with another number each time
            X = rng.standard_normal((400, 40))
            X[:, :k] = 1.0
            reports.append(spectra.fit(X, window="2:20"))
        said = [str(w.message) for w in caught if issubclass(w.category, SpectraWarning)]
    constant = [m for m in said if "constant column(s)" in m]
    assert len(constant) == 1 and constant[0].startswith("3 constant column(s)")
    assert "said once in this process" in constant[0]
    for k, rep in zip((3, 4, 5), reports, strict=True):
        assert any(w.startswith(f"{k} constant column(s)") for w in rep.warnings)


def test_a_warning_hidden_by_a_filter_is_said_the_next_time_one_may_see_it():
    X = np.random.default_rng(3).standard_normal((400, 40))
    X[:, :3] = 1.0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SpectraWarning)  # (a batch worker's, or a caller's own)
        spectra.fit(X, window="2:20")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        spectra.fit(X, window="2:20")
    assert any("constant column(s)" in str(w.message) for w in caught if issubclass(w.category, SpectraWarning))
