"""The fitting toolkit: SPEC known answers, synthetic recovery, models, CI, density, controls."""

from __future__ import annotations

import numpy as np
import pytest

from spectra_cli.analysis.density import density_fit
from spectra_cli.analysis.local_slope import local_slope
from spectra_cli.analysis.powerlaw import Window, auto_window, fit_model
from spectra_cli.errors import FitError
from spectra_cli.run import matrix as api
from spectra_cli.run import synth

J = np.arange(1, 10001, dtype=float)
LOG_CORRECTED = (np.log(J + 1) / J) ** 1.31  # the known answer (plain ols over ranks 10..3000 gives ~1.09)


def _synth(kind="powerlaw", **kw):
    return np.concatenate(list(synth.generate(kind, **kw)))




def test_local_slope_at_rank_3000_known_answer():
    got = local_slope(LOG_CORRECTED, np.array([3000.0]), usable_rank=J.size)[0]
    assert got == pytest.approx(1.146, abs=0.01)
    # and against the closed form alpha (1 - j / ((j + 1) log(j + 1)))
    assert got == pytest.approx(1.31 * (1 - 3000 / (3001 * np.log(3001))), abs=0.003)


def test_local_slope_profile_in_report_is_flat_for_an_exact_power_law():
    rep = api.fit(np.arange(1, 2001, dtype=float) ** -0.8, eigenvalues=True)
    prof = rep.suite.local_slope
    assert prof.ranks.size > 10
    np.testing.assert_allclose(prof.alpha_local, 0.8, atol=1e-9)


@pytest.mark.parametrize("method", ["ols", "logspaced", "inv-rank"])
def test_every_method_recovers_an_exact_power_law(method):
    lam = 2.0 * J[:2000] ** -1.7
    f = fit_model(lam, Window(5, 1500, "user", ""), method=method)
    assert f.alpha == pytest.approx(1.7, abs=1e-10) and f.intercept == pytest.approx(np.log(2.0), abs=1e-9)
    assert f.method == method


def test_inv_rank_is_weighted_least_squares_with_1_over_j():
    rng = np.random.default_rng(1)
    lam = J[:300] ** -1.0 * np.exp(0.1 * rng.standard_normal(300))
    lam = np.sort(lam)[::-1]
    f = fit_model(lam, Window(2, 250, "user", ""), method="inv-rank")
    j = np.arange(2, 251)
    slope, icpt = np.polyfit(np.log(j), np.log(lam[1:250]), 1, w=np.sqrt(1 / j))
    assert f.alpha == pytest.approx(-slope, rel=1e-10) and f.intercept == pytest.approx(icpt, rel=1e-10)


def test_logspaced_weights_each_decade_equally():
    # A spectrum that is steeper in its first decade: logspaced weighs that decade as much as the
    # next two together, so its slope is steeper than ols (which is dominated by the high ranks).
    lam = np.where(J <= 10, J ** -2.0, 10.0 ** -1.0 * J ** -1.0)[:1000]
    w = Window(1, 1000, "user", "")
    assert fit_model(lam, w, method="logspaced").alpha > fit_model(lam, w, method="ols").alpha + 0.2


@pytest.mark.slow
@pytest.mark.parametrize("alpha", [0.5, 1.0, 1.5, 2.0])
def test_synthetic_powerlaw_rows_recover_alpha_within_003(alpha):
    X = _synth(n=20 * 512, d=512, seed=1, alpha=alpha)
    rep = api.fit(X)
    assert rep.fit.window.k_min == 11 and rep.fit.window.k_max == 51
    assert rep.fit.alpha == pytest.approx(alpha, abs=0.03)


def test_ci_covers_the_truth_on_a_known_spectrum():
    # One seeded case; the 50-seed coverage study is bench/bench_fit.py (bench/README.md has the numbers).
    X = _synth(n=20 * 96, d=96, seed=101, alpha=1.0)
    ci = api.fit(X, window="3:30", ci=True, ci_replicates=100, ci_seed=1).fit.ci
    assert ci.low <= 1.0 <= ci.high
    assert ci.replicates == 100 and ci.groups == 32




def test_broken_law_recovered():
    lam = np.where(J <= 100, J ** -0.6, 100.0 ** (1.4 - 0.6) * J ** -1.4)[:3000]
    rng = np.random.default_rng(2)
    lam = lam * np.exp(0.02 * rng.standard_normal(lam.size))
    f = fit_model(lam, Window(2, 3000, "user", ""), model="broken")
    assert f.alpha == pytest.approx(0.6, abs=0.05) and f.alpha_2 == pytest.approx(1.4, abs=0.05)
    assert f.crossover == pytest.approx(100, rel=0.10)
    rep = api.fit(lam, eigenvalues=True, window="2:3000", model="broken")
    assert rep.suite.models.best == "broken"


def test_broken_law_from_rows():
    d = 600
    lam = np.where(np.arange(1, d + 1) <= 100, np.arange(1, d + 1) ** -0.6,
                   100.0 ** 0.8 * np.arange(1, d + 1) ** -1.4)
    rng = np.random.default_rng(4)
    X = rng.standard_normal((20 * d, d)) * np.sqrt(lam)
    f = api.fit(X, window="5:400", model="broken").fit
    assert f.alpha == pytest.approx(0.6, abs=0.05) and f.alpha_2 == pytest.approx(1.4, abs=0.05)
    assert f.crossover == pytest.approx(100, rel=0.10)


def test_auto_window_finds_the_straight_part_and_states_the_criterion():
    lam = np.where(J <= 500, J ** -1.0, 500.0 ** 2 * J ** -3.0)[:2000]
    w = auto_window(lam, 2000)
    assert w.source == "auto" and w.k_max <= 560 and w.k_max >= 400 and w.k_min <= 2
    assert "residual RMS of log lambda <= 0.05" in w.reason


def test_auto_window_with_nothing_straight_is_a_fit_error():
    rng = np.random.default_rng(0)
    lam = np.sort(np.exp(3 * rng.standard_normal(50)))[::-1]
    with pytest.raises(FitError, match="window='auto' found no window"):
        auto_window(lam, 50, tolerance=1e-6)




def test_density_matches_hill_closed_form_and_rank_relation():
    # A pure rank law alpha = 1 has density exponent a = 1 + 1/alpha = 2.
    lam = J ** -1.0
    d = density_fit(lam, xmin=lam[999])
    tail = lam[:1000]
    a = 1 + 1000 / np.sum(np.log(tail / lam[999]))
    assert d.alpha == pytest.approx(a, rel=1e-12) and d.n_tail == 1000
    assert d.alpha == pytest.approx(2.0, abs=0.02)
    assert d.stderr == pytest.approx((a - 1) / np.sqrt(1000))


def test_density_agrees_with_the_powerlaw_package():
    powerlaw = pytest.importorskip("powerlaw")
    X = _synth(n=4000, d=200, seed=5, alpha=1.1)
    rep = api.fit(X, density=True)
    lam = rep.spectrum.eigenvalues[: rep.spectrum.numerical_rank]
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ref = powerlaw.Fit(lam, verbose=0)
        fixed = powerlaw.Fit(lam, xmin=float(lam[50]), verbose=0)
    d = rep.suite.density
    assert d.xmin == pytest.approx(ref.xmin, rel=1e-12)
    assert d.alpha == pytest.approx(ref.power_law.alpha, rel=1e-10)
    assert d.ks_distance == pytest.approx(ref.power_law.D, rel=1e-10)
    f = density_fit(lam, xmin=float(lam[50]))
    assert f.alpha == pytest.approx(fixed.power_law.alpha, rel=1e-10)
    assert f.ks_distance == pytest.approx(fixed.power_law.D, rel=1e-10)
    se = getattr(fixed.power_law, "standard_err", None)
    assert f.stderr == pytest.approx(se if se is not None else fixed.power_law.sigma, rel=1e-10)


def test_shuffled_control_meets_a_low_rank_signal_where_the_signal_ends(validate):
    rng = np.random.default_rng(6)
    n, d = 4000, 60
    signal = rng.standard_normal((n, 5)) @ rng.standard_normal((5, d)) * 3
    X = signal + 0.1 * rng.standard_normal((n, d))
    rep = api.fit(X, window="1:5", shuffled_control=True)
    validate(rep.to_dict())
    assert rep.control is not None and rep.control.rows == n and not rep.control.subsampled
    assert rep.control.meets_at_rank == 6
    # Permuting columns keeps each column's values: the traces agree.
    assert rep.control.eigenvalues.sum() == pytest.approx(rep.spectrum.eigenvalues.sum(), rel=1e-10)


def test_fit_window_past_the_control_is_warned():
    rng = np.random.default_rng(7)
    X = rng.standard_normal((3000, 40)) * np.arange(1, 41) ** -0.3
    rep = api.fit(X, window="1:30", shuffled_control=True)
    assert any("shuffled control" in w for w in rep.warnings)












def test_shuffled_control_spectrum_equals_numpy_permuted():
    rng = np.random.default_rng(8)
    X = rng.standard_normal((500, 12)) @ rng.standard_normal((12, 12))
    rep = api.fit(X, window="1:10", shuffled_control=True, control_seed=3)
    Xp = np.random.default_rng(3).permuted(X, axis=0)
    ref = np.linalg.eigvalsh(np.cov(Xp, rowvar=False))[::-1]
    np.testing.assert_allclose(rep.control.eigenvalues, ref, rtol=1e-10)


def test_a_window_the_law_does_not_follow_is_said_to_fit_poorly():
    import spectra_cli as spectra

    bent = np.exp(-np.arange(1, 201) / 8.0)  # exponential: a curve on log-log axes
    rep = spectra.fit(bent, eigenvalues=True, window="3:150")
    assert rep.fit.r2 < 0.9 and any("fits ranks 3..150 poorly" in w for w in rep.warnings)
    clean = spectra.fit(np.arange(1, 201) ** -1.0, eigenvalues=True, window="3:150")
    assert not any("poorly" in w for w in clean.warnings)


def test_a_window_under_a_drop_that_holds_the_variance_says_so():
    """A collapsed representation (8 directions over a noise floor): the default window fits the floor, whose
    alpha is small, and a gate on alpha alone would pass; the warning names the drop, the share above it, and
    the windows under it. A spike that holds half the variance, and a plain power law, are not such a drop."""
    import spectra_cli as spectra
    from spectra_cli.analysis.suite import CLIFF_RATIO, CLIFF_SHARE, cliff_above

    rng = np.random.default_rng(0)
    X = rng.standard_normal((2000, 8)) @ rng.standard_normal((8, 128)) + 1e-3 * rng.standard_normal((2000, 128))
    rep = spectra.fit(X, window=["11:30", "12:40"])
    lam = rep.spectrum.eigenvalues
    said = [w for w in rep.warnings if "under that drop" in w]
    ratio = lam[7] / lam[8]
    assert len(said) == 1 and ratio > CLIFF_RATIO
    assert said[0].startswith(f"ranks 1..8 hold all but {1 - lam[:8].sum() / lam[lam > 0].sum():.2g} of the "
                              f"variance and eigenvalue 9 is {ratio:.3g} times smaller than eigenvalue 8: the windows "
                              "11..30, 12..40 measure what lies under that drop")
    assert said[0].endswith("or fit ranks above it (window='1:8')")
    law = np.arange(1, 201) ** -1.0
    assert cliff_above(law, 11) is None and not any("drop" in w for w in spectra.fit(law, eigenvalues=True).warnings)
    spike = np.r_[1.0, np.full(2000, 9e-4)]  # 1,111 x the next, a third of the variance: no cliff
    assert spike[0] / spike[1] >= CLIFF_RATIO and spike[0] / spike.sum() < CLIFF_SHARE
    assert cliff_above(spike, 11) is None
    c = cliff_above(np.r_[1.0, 1e-4, 1e-4 * law[1:20]], 5)  # the drop right above the window counts too
    assert c is not None and (c.top, c.bottom, c.ratio) == (1, 2, pytest.approx(1e4)) and c.share > CLIFF_SHARE


def test_a_collapse_over_a_few_steps_is_a_drop_too():
    """A representation that collapses through a few intermediate directions: no single step reaches the drop's
    factor (two of 100; three of 17-60), but the spectrum falls 1,000-fold within a doubling of the rank, the ranks
    above the fall holding the variance; a steep power law (alpha 3: 8-fold a doubling) and a spike that holds a
    third of the variance are not such a fall."""
    import spectra_cli as spectra
    from spectra_cli.analysis.suite import CLIFF_RATIO, CLIFF_SHARE, cliff_above

    floor = 1e-4 * np.arange(1, 60, dtype=np.float64) ** -0.5
    two = np.r_[np.ones(8), 1e-2, floor]  # 8 directions, one at 1 %, then the floor
    c = cliff_above(two, 20)
    assert c is not None and (c.top, c.bottom) == (8, 10) and c.ratio == pytest.approx(1e4)
    assert c.share == pytest.approx(two[:9].sum() / two.sum()) and c.share > CLIFF_SHARE
    assert max(two[:19] / two[1:20]) < CLIFF_RATIO  # (no single step is the drop: the old rule said nothing)
    three = np.r_[np.ones(8), 3e-2, 5e-4, 0.3 * floor]  # steps of 33, 60 and 17: the fall from 8 ends at 10
    c = cliff_above(three, 20)
    assert c is not None and (c.top, c.bottom) == (8, 10) and c.ratio == pytest.approx(2e3)
    assert max(three[:19] / three[1:20]) < CLIFF_RATIO
    said = [w for w in spectra.fit(two, eigenvalues=True, window="20:50").warnings if "under that drop" in w]
    assert len(said) == 1 and said[0].startswith(
        f"ranks 1..9 hold {100 * two[:9].sum() / two.sum():.2f}% of the variance and the spectrum falls 1e+04 times "
        "from eigenvalue 8 to eigenvalue 10: the window 20..50 measures what lies under that drop")
    assert said[0].endswith("or fit ranks above it (window='1:8')")
    # a second, lower drop: every window under the first hears of that one, in one warning (the largest single step
    # was said before: the window 50..100 heard of 40 -> 41 and was told to fit ranks 1..40, across the collapse)
    lower = np.r_[two[:40], two[40] / 3.6e4 * np.arange(1, 80, dtype=np.float64) ** -0.5]
    said = [w for w in spectra.fit(lower, eigenvalues=True, window=["20:35", "50:100"]).warnings if "drop" in w]
    assert len(said) == 1 and "from eigenvalue 8 to eigenvalue 10: the windows 20..35, 50..100 measure" in said[0]
    steep = np.arange(1, 200, dtype=np.float64) ** -3.0
    assert cliff_above(steep, 50) is None
    assert cliff_above(np.r_[1.0, 0.5, np.full(2000, 9e-4)], 11) is None  # (a third of the variance above)
