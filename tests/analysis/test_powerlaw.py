"""Rank-form power-law fits: closed forms and window rules."""

from __future__ import annotations

import numpy as np
import pytest

from spectra_cli.analysis.powerlaw import Window, fit_ols, parse_window, resolve_window
from spectra_cli.errors import FitError, OptionError
from spectra_cli.run import matrix as api


def test_exact_power_law_is_recovered_exactly():
    lam = 3.0 * np.arange(1, 501, dtype=float) ** -1.3
    f = fit_ols(lam, Window(11, 400, "user", ""))
    assert f.alpha == pytest.approx(1.3, abs=1e-12)
    assert f.intercept == pytest.approx(np.log(3.0), abs=1e-12)
    assert f.r2 == pytest.approx(1.0, abs=1e-12)
    assert f.residual_rms == pytest.approx(0.0, abs=1e-12)
    assert f.n_points == 390


def test_ols_agrees_with_numpy_polyfit():
    rng = np.random.default_rng(0)
    lam = np.sort(rng.random(200))[::-1] + 0.01
    f = fit_ols(lam, Window(5, 150, "user", ""))
    j = np.arange(5, 151)
    slope, icpt = np.polyfit(np.log(j), np.log(lam[4:150]), 1)
    assert f.alpha == pytest.approx(-slope, rel=1e-10)
    assert f.intercept == pytest.approx(icpt, rel=1e-10)
    resid = np.log(lam[4:150]) - (icpt + slope * np.log(j))
    se = np.sqrt(resid @ resid / (len(j) - 2) / np.sum((np.log(j) - np.log(j).mean()) ** 2))
    assert f.stderr == pytest.approx(se, rel=1e-10)
    y = np.log(lam[4:150])
    assert f.r2 == pytest.approx(1 - (resid @ resid) / np.sum((y - y.mean()) ** 2), rel=1e-10)
    assert f.residual_rms == pytest.approx(np.sqrt(np.mean(resid**2)), rel=1e-10)
    m = len(j)
    assert f.bic == pytest.approx(m * np.log(resid @ resid / m) + 2 * np.log(m), rel=1e-10)


def test_log_corrected_spectrum_known_answer_for_plain_ols():
    # the known answer: for lambda_j = (log(j+1)/j)^1.31, plain ols over ranks 10..3000 gives ~1.09.
    j = np.arange(1, 5001, dtype=float)
    lam = (np.log(j + 1) / j) ** 1.31
    f = fit_ols(lam, Window(10, 3000, "user", ""))
    assert f.alpha == pytest.approx(1.093, abs=0.002)


def test_default_window_is_11_to_d_over_10():
    w, warns = resolve_window(None, n_features=384, usable_rank=384)
    assert (w.k_min, w.k_max, w.source) == (11, 38, "default") and warns == []


def test_default_window_clipped_to_usable_rank():
    w, _ = resolve_window(None, n_features=1000, usable_rank=60)
    assert (w.k_min, w.k_max) == (11, 60)
    assert "clipped to the usable rank 60" in w.reason


def test_small_d_falls_back_with_a_stated_reason():
    w, warns = resolve_window(None, n_features=64, usable_rank=64)
    assert (w.k_min, w.k_max, w.source) == (1, 64, "fallback")
    assert "leaves 0 usable ranks (< 10); fitted ranks 1..64 instead" in warns[0]


def test_user_window_past_usable_rank_is_clipped_with_a_warning():
    w, warns = resolve_window((11, 500), n_features=384, usable_rank=383)
    assert w.k_max == 383
    assert warns == ["window 11:500 clipped to 11:383: ranks past 383 are below the numerical or sampling floor"]


def test_user_window_starting_beyond_usable_rank_is_an_error():
    with pytest.raises(FitError, match=r"^window 400:500 starts beyond the usable rank 383 "):
        resolve_window((400, 500), n_features=384, usable_rank=383)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("20:10", "window='20:10': K_MIN 20 is greater than K_MAX 10."),
        ("0:10", "window='0:10': ranks are 1-based; K_MIN must be at least 1."),
        ("a:b", "window='a:b' is not K_MIN:K_MAX with 1-based ranks (e.g. 11:200) or 'auto'."),
    ],
)
def test_bad_window_text(text, message):
    with pytest.raises(OptionError) as e:
        parse_window(text)
    assert str(e.value) == message


def test_fits_never_see_eigenvalues_below_the_floor():
    rng = np.random.default_rng(2)
    X = rng.standard_normal((2000, 30)) * np.arange(1, 31) ** -0.5
    X[:, 25:] = 0.0  # five exact zeros
    rep = api.fit(X, window="1:30")
    assert rep.fit.window.k_max == 25
    assert np.isfinite(rep.fit.alpha)


def test_a_density_fit_of_many_eigenvalues_scans_a_grid_then_refines_to_the_exact_answer(monkeypatch):
    # every candidate costs O(n): 10^5 eigenvalues took 77 s, 10^6 hours; past 10,000 candidates a 2,000-point grid
    # and every candidate between the best one's neighbours give the exhaustive scan's x_min here
    from spectra_cli.analysis import density as dens

    x = np.sort(np.random.default_rng(0).pareto(1.5, 12_000))[::-1] + 1e-3
    fast = dens.density_fit(x)
    said = fast.to_dict()["scan"]
    monkeypatch.setattr(dens, "EXACT_CANDIDATES", 10**9)
    exact = dens.density_fit(x)
    assert (fast.xmin, fast.alpha, fast.ks_distance) == (exact.xmin, exact.alpha, exact.ks_distance)
    assert fast.n_scanned < 3_000 < exact.n_candidates == 11_999
    assert said.startswith("past 10,000 candidates") and exact.to_dict()["scan"] == "every candidate"
