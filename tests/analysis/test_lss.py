"""The central limit theorem of linear spectral statistics (spectra_cli.analysis.lss) against its closed forms, a
direct simulation, and the population exponent's analytic route against its simulated one."""

from __future__ import annotations

import math
from math import comb

import numpy as np
import pytest

from spectra_cli.analysis.equivalent import expected_eigenvalues, slope_of, slope_weights
from spectra_cli.analysis.lss import cross_covariance, rank_weights_derivative, sample_law
from spectra_cli.analysis.population import population_fit


def _bs_covariance(r1: int, r2: int, c: float) -> float:
    """Bai & Silverstein 2004, (1.24), the real case: the limiting covariance of tr S^r1 and tr S^r2, Sigma = I."""
    total = 0.0
    for k1 in range(r1):
        for k2 in range(r2 + 1):
            inner = sum(k * comb(2 * r1 - 1 - (k1 + k), r1 - 1) * comb(2 * r2 - 1 - k2 + k, r2 - 1)
                        for k in range(1, r1 - k1 + 1))
            total += comb(r1, k1) * comb(r2, k2) * ((1 - c) / c) ** (k1 + k2) * inner
    return 2.0 * c ** (r1 + r2) * total


def _bs_mean(r: int, c: float) -> float:
    """Bai & Silverstein 2004, (1.23), the real case: the limiting mean of tr S^r - d int x^r dF^c, Sigma = I."""
    return (0.25 * ((1 - math.sqrt(c)) ** (2 * r) + (1 + math.sqrt(c)) ** (2 * r))
            - 0.5 * sum(comb(r, j) ** 2 * c ** j for j in range(r + 1)))


@pytest.mark.parametrize("c", [0.1, 0.5, 0.8])
def test_log_determinant_has_the_closed_form_mean_and_variance(c):
    """Sigma = I, f = log: mean log(1 - c) / 2 and variance -2 log(1 - c) (Bai, Jiang, Yao & Zheng 2009)."""
    law = sample_law(np.ones(300), c)
    fp = 1.0 / law.x
    assert law.variance(fp) == pytest.approx(-2.0 * math.log(1.0 - c), rel=1e-3)
    assert law.mean(fp) == pytest.approx(0.5 * math.log(1.0 - c), rel=1e-3)


@pytest.mark.parametrize("c", [0.2, 0.9])
@pytest.mark.parametrize("r", [1, 2, 3])
def test_moments_have_bai_and_silversteins_mean_and_variance(c, r):
    law = sample_law(np.ones(300), c)
    fp = r * law.x ** (r - 1)
    assert law.variance(fp) == pytest.approx(_bs_covariance(r, r, c), rel=2e-3)
    assert law.mean(fp) == pytest.approx(_bs_mean(r, c), abs=1e-3 * max(1.0, _bs_mean(r, c)))


@pytest.mark.parametrize("c", [0.3, 0.8])
def test_the_fourth_cumulant_adds_its_terms(c):
    """Entries with fourth cumulant kappa: Var tr S = c (2 + kappa) and E tr S^2 - d (1 + c) = c (1 + kappa), both
    exact for any n (counted by hand from E x^4 = 3 + kappa)."""
    law = sample_law(np.ones(300), c)
    one = np.ones(law.x.size)
    assert law.variance(one, kappa=3.0) == pytest.approx(5.0 * c, rel=2e-3)
    assert law.variance(one, kappa=-1.0) == pytest.approx(1.0 * c, rel=2e-3)
    assert law.mean(2.0 * law.x, kappa=3.0) == pytest.approx(4.0 * c, rel=2e-3)


def test_trace_variance_on_two_separated_clusters():
    """Var tr S = 2 tr Sigma^2 / n = 2 c int t^2 dH for any population (real Gaussian rows): two atoms whose sample
    clusters are apart."""
    tau = np.r_[np.ones(100), 5.0 * np.ones(100)]
    for c in (0.05, 0.5):
        law = sample_law(tau, c)
        assert law.variance(np.ones(law.x.size)) == pytest.approx(2.0 * c * float(np.mean(tau ** 2)), rel=3e-3)


def test_window_slope_sd_matches_simulated_samples():
    """The rank window's slope (an L-statistic of the log eigenvalues) has the theory's sd: 300 samples of 200
    Gaussian rows of a j^-1 population of 200, ranks 5..40 (the sd of an sd over 300 samples is about 4 %)."""
    d, n, k0, k1 = 200, 200, 5, 40
    tau = np.arange(1, d + 1, dtype=np.float64) ** -1.0
    law = sample_law(tau, d / n, counts=(k0 - 1, k1))
    fp = rank_weights_derivative(law, slope_weights(k0, k1 - k0 + 1), k0)
    sd = math.sqrt(law.variance(fp))
    rng = np.random.default_rng(7)
    slopes = []
    for _ in range(300):
        Z = rng.standard_normal((n, d)) * np.sqrt(tau)
        lam = np.linalg.eigvalsh(Z.T @ Z / n)[::-1]
        slopes.append(slope_of(np.log(lam[k0 - 1:k1]), k0))
    assert sd == pytest.approx(float(np.std(slopes, ddof=1)), rel=0.12)
    # the mean offset is far inside the spread: a few percent of the sd either way
    expected = slope_of(np.log(expected_eigenvalues(tau, d / n, k1)[k0 - 1:k1]), k0)
    assert abs(law.mean(fp)) < 0.1 * sd
    assert abs(float(np.mean(slopes)) - expected) < 0.25 * sd


def test_trace_variance_with_row_scales_given():
    """Rows of fixed scales w (half 0.5, half 1.5): Var tr S = 2 c E[w^2] int t^2 dH exactly; the scales' own sampling
    term is what random scales add on top."""
    tau = np.arange(1, 101, dtype=np.float64) ** -0.5
    w, p = np.array([0.5, 1.5]), np.array([0.5, 0.5])
    for c in (0.3, 1.5):
        law = sample_law(tau, c, scales=(w, p))
        one = np.ones(law.x.size)
        given = law.variance(one) - law.scales_variance(one)
        assert given == pytest.approx(2.0 * c * float(p @ w ** 2) * float(np.mean(tau ** 2)), rel=3e-3)
        # tr S = sum_i s_i |x_i|^2 / n: random scales add Var(s) (tr Sigma)^2 / n
        assert law.scales_variance(one) == pytest.approx(float(p @ (w - 1) ** 2) * tau.sum() ** 2 * c / tau.size,
                                                         rel=3e-3)


def test_one_scale_is_the_gaussian_kernel():
    tau = np.arange(1, 201, dtype=np.float64) ** -1.0
    gauss, one = sample_law(tau, 0.5), sample_law(tau, 0.5, scales=(np.array([1.0]), np.array([1.0])))
    assert one.variance(1.0 / one.x) == pytest.approx(gauss.variance(1.0 / gauss.x), rel=1e-9)
    assert one.mean(1.0 / one.x) == pytest.approx(gauss.mean(1.0 / gauss.x), rel=1e-9)
    with pytest.raises(ValueError, match="fourth cumulant"):
        one.variance(np.ones(one.x.size), kappa=1.0)


@pytest.mark.slow
def test_window_slope_sd_with_row_scales_matches_simulated_samples():
    """Rows of random scales (0.5 or 1.5, even odds), 300 samples of 200 rows of a j^-1 population of 200."""
    d, n, k0, k1 = 200, 200, 5, 40
    tau = np.arange(1, d + 1, dtype=np.float64) ** -1.0
    w, p = np.array([0.5, 1.5]), np.array([0.5, 0.5])
    law = sample_law(tau, d / n, counts=(k0 - 1, k1), scales=(w, p))
    sd = math.sqrt(law.variance(rank_weights_derivative(law, slope_weights(k0, k1 - k0 + 1), k0)))
    rng = np.random.default_rng(11)
    slopes = []
    for _ in range(300):
        Z = rng.standard_normal((n, d)) * np.sqrt(tau) * np.sqrt(rng.choice(w, size=n))[:, None]
        slopes.append(slope_of(np.log(np.linalg.eigvalsh(Z.T @ Z / n)[::-1][k0 - 1:k1]), k0))
    assert sd == pytest.approx(float(np.std(slopes, ddof=1)), rel=0.15)


@pytest.mark.parametrize("scales", [None, (np.array([0.5, 1.5]), np.array([0.5, 0.5]))])
def test_traces_of_two_samples_sharing_rows(scales):
    """tr S_A and tr S_B over row sets sharing k rows: Cov = 2 k tr(Sigma^2) E[s^2] / (n_A n_B), exactly, for a
    sub-sample inside the whole (k = n_A) and two sub-samples that overlap (k = 2 n_A - n)."""
    d, n = 120, 240
    tau = np.arange(1, d + 1, dtype=np.float64) ** -0.5
    n_a = 180
    whole, sub = sample_law(tau, d / n, scales=scales), sample_law(tau, d / n_a, scales=scales)
    s2 = 1.0 if scales is None else float(scales[1] @ scales[0] ** 2)
    for shared, other in ((n_a, whole), (2 * n_a - n, sub)):
        got = cross_covariance(sub, np.ones(sub.x.size), other, np.ones(other.x.size), shared=shared)
        n_b = d / other.c
        assert got == pytest.approx(2.0 * shared * float(tau @ tau) * s2 / (n_a * n_b), rel=5e-3)


@pytest.mark.slow
def test_the_sampling_curves_change_has_the_theorys_spread():
    """D = mean over 4 sub-samples (each leaving a quarter of the rows out) of the window slope less the whole
    sample's: its sd over 300 samples against the population fit's theory (d = 200, n = 400, ranks 5..40)."""
    from spectra_cli.analysis.population import _change_sd, _problem

    d, n, k0, k1 = 200, 400, 5, 40
    tau = np.arange(1, d + 1, dtype=np.float64) ** -1.0
    m, _, _ = _problem(tau, n, (k0, k1), None, 0.0, 0)
    theory = _change_sd(m, tau, k1, 4, 0.75 * n)
    rng = np.random.default_rng(5)
    changes = []
    for _ in range(300):
        Z = rng.standard_normal((n, d)) * np.sqrt(tau)
        full = slope_of(np.log(np.linalg.eigvalsh(Z.T @ Z / n)[::-1][k0 - 1:k1]), k0)
        label = rng.permutation(n) % 4
        subs = [slope_of(np.log(np.linalg.eigvalsh(Z[label != q].T @ Z[label != q] / (0.75 * n))[::-1][k0 - 1:k1]),
                         k0) for q in range(4)]
        changes.append(float(np.mean(subs)) - full)
    assert theory == pytest.approx(float(np.std(changes, ddof=1)), rel=0.15)


def test_population_route_is_analytic_for_gaussian_rows_and_near_the_simulated_one():
    rng = np.random.default_rng(3)
    d, n = 192, 384
    tau = np.arange(1, d + 1, dtype=np.float64) ** -1.0
    Z = rng.standard_normal((n, d)) * np.sqrt(tau)
    lam = np.linalg.eigvalsh(np.cov(Z, rowvar=False))[::-1]
    theory = population_fit(lam, n=n - 1, window=(11, 60))
    simulated = population_fit(lam, n=n - 1, window=(11, 60), route="simulate")
    assert theory.route == "analytic" and theory.replicates == 0 and theory.bias_share == 1.0
    assert theory.to_dict()["bootstrap"]["route"] == "analytic"
    assert theory.bend["null"] == "analytic"
    assert simulated.route == "simulated" and simulated.replicates == 40
    # (40 replicates: their sd is itself uncertain by about 11 %)
    assert theory.bootstrap_sd == pytest.approx(simulated.bootstrap_sd, rel=0.35)
    assert theory.low < 1.0 < theory.high
    with pytest.raises(ValueError, match="route must be one of"):
        population_fit(lam, n=n - 1, window=(11, 60), route="guess")


def test_the_theory_gives_way_where_its_law_misses_the_matched_ranks():
    """Scales 0.1 and 1.9 at even odds at n = d: the solver's limiting law does not reach the lower matched ranks,
    and the population fit says it cannot use the theory there; Gaussian rows it can."""
    from spectra_cli.analysis.population import _problem, _theory

    d, n, k0, k1 = 48, 48, 3, 20
    tau = np.arange(1, d + 1, dtype=np.float64) ** -1.0
    m, _, _ = _problem(tau, n, (k0, k1), None, 0.0, 0)
    weights = np.zeros(m.r_max - k0 + 1)
    weights[:k1 - k0 + 1] = slope_weights(k0, k1 - k0 + 1)
    assert isinstance(_theory(m, weights, tau), tuple)
    m.sc, m.law = (np.array([0.1, 1.9]), np.array([0.5, 0.5])), None
    assert _theory(m, weights, tau) == "the limiting law does not cover the matched ranks"


def test_rows_the_solver_lost_are_followed_now_and_their_interval_holds_the_population():
    """Scales 0.1 or 1.9 on 97 rows of 96 features: the continuation used to leave the lower spectrum's points off
    the root (the expected spectrum vanished, and the fit was refused; before that, a match 150 log units off); those
    points are now marched to from their neighbours: the match fits (RMS 0.07), the interval is wide and holds the
    population's exponent, and the simulated route agrees."""
    import spectra_cli as spectra
    from tests.conftest import powerlaw_matrix

    X = powerlaw_matrix(97, 96, 1.0, seed=1) * np.sqrt(np.random.default_rng(51).choice([0.1, 1.9], size=97))[:, None]
    pop = spectra.fit(X, window="6:40", population=True).fit.population
    assert pop is not None and pop.match_rms < 0.2 and pop.low <= 1.0 <= pop.high
    simulated = spectra.fit(X, window="6:40", population=True, population_route="simulate").fit.population
    assert simulated is not None and abs(simulated.alpha - pop.alpha) < 0.1


def test_an_expected_spectrum_that_vanishes_in_the_matched_ranks_is_refused_in_one_line(monkeypatch):
    """Where the expected spectrum of a fitted population is zero at a matched rank (the solver lost that part of the
    spectrum), the fit says so rather than matching log(0)."""
    import spectra_cli as spectra
    from spectra_cli.analysis import population
    from tests.conftest import powerlaw_matrix

    solved = population.expected_eigenvalues

    def lost(*args, **kwargs):
        out = solved(*args, **kwargs)
        out[30:] = 0.0
        return out

    monkeypatch.setattr(population, "expected_eigenvalues", lost)
    rep = spectra.fit(powerlaw_matrix(200, 96, 1.0, seed=1), window="6:25", population=True)
    assert rep.fit.population is None
    assert any("the expected sample spectrum of the fitted population vanishes from rank 31" in w
               for w in rep.warnings)


def test_a_report_from_theory_follows_the_schema_and_says_its_route(validate):
    import spectra_cli as spectra
    from tests.conftest import powerlaw_matrix

    rep = spectra.fit(powerlaw_matrix(400, 64, 1.0, seed=1), window="5:30", population=True).to_dict()
    validate(rep)
    pop = rep["fit"]["population"]
    assert pop["bootstrap"]["route"] == "analytic" and pop["bend"]["null"] == "analytic"
    assert pop["sampling_curve"]["model_change_sd_from"] == "theory"
    assert rep["options"]["population"]["route"] == "analytic"
    assert "central limit theorem of linear spectral statistics" in pop["method"]


def test_a_law_that_does_not_settle_gives_way_to_simulated_samples(monkeypatch):
    """Where the grid's refinement stops at its budget (the solver's counts jumping), the part of the interval that
    needs that law is simulated instead, and the notes say which: the interval itself (the whole sample's law), or
    only the sampling curve's scatter (the sub-samples' law)."""
    import dataclasses

    import spectra_cli as spectra
    import spectra_cli.analysis.lss as lss
    from tests.conftest import powerlaw_matrix

    X = powerlaw_matrix(256, 64, 1.0, seed=2)
    orig = lss.sample_law
    monkeypatch.setattr(lss, "sample_law", lambda *a, **k: dataclasses.replace(
        orig(*a, **k), settled=k["counts"][1] > 30))  # (the sub-samples' law, over the window 5..30 alone)
    p = spectra.fit(X, window="5:30", population=True).fit.population
    assert p.route == "analytic"
    assert any("the sampling curve's scatter is simulated, not from theory" in n for n in p.notes)
    assert p.sampling_curve["model_change_sd"] > 0
    # (and the curve says where its scatter came from: the simulated samples, counted)
    assert p.sampling_curve["model_change_sd_from"] == "simulations" and p.sampling_curve["simulations"] > 2
    assert p.sampling_curve["model_change_simulated"] is not None
    monkeypatch.setattr(lss, "sample_law", lambda *a, **k: dataclasses.replace(orig(*a, **k), settled=False))
    p = spectra.fit(X, window="5:30", population=True).fit.population
    assert p.route == "simulated" and p.replicates == 40
    assert any("not from theory: the limiting law's grid did not settle" in n for n in p.notes)


def test_traces_of_two_samples_sharing_rows_with_a_fourth_cumulant():
    """Coordinates of excess kurtosis kappa: each shared row's squared norm has variance (2 + kappa) tr Sigma^2 (in
    the population's eigenbasis), so Cov(tr S_A, tr S_B) = k (2 + kappa) tr(Sigma^2) / (n_A n_B), exactly."""
    d, n, n_a, kappa = 120, 240, 180, 3.0
    tau = np.arange(1, d + 1, dtype=np.float64) ** -0.5
    whole, sub = sample_law(tau, d / n), sample_law(tau, d / n_a)
    for shared, other in ((n_a, whole), (2 * n_a - n, sub)):
        got = cross_covariance(sub, np.ones(sub.x.size), other, np.ones(other.x.size), shared=shared, kappa=kappa)
        n_b = d / other.c
        assert got == pytest.approx((2.0 + kappa) * shared * float(tau @ tau) / (n_a * n_b), rel=5e-3)
    with pytest.raises(ValueError, match="Gaussian rows' law"):
        scaled = sample_law(tau, d / n, scales=(np.array([0.5, 1.5]), np.array([0.5, 0.5])))
        cross_covariance(scaled, np.ones(scaled.x.size), scaled, np.ones(scaled.x.size), shared=n, kappa=kappa)


@pytest.mark.slow
def test_window_slope_sd_of_laplace_rows_matches_simulated_samples():
    """Laplace coordinates (kappa = 3) in the population's eigenbasis widen the window slope's spread beyond the
    Gaussian theory's, by the fourth cumulant's term: 300 samples of 400 rows of a j^-1 population of 200, ranks
    5..40, against the theory with and without it."""
    d, n, k0, k1 = 200, 400, 5, 40
    tau = np.arange(1, d + 1, dtype=np.float64) ** -1.0
    law = sample_law(tau, d / n, counts=(k0 - 1, k1))
    fp = rank_weights_derivative(law, slope_weights(k0, k1 - k0 + 1), k0)
    rng = np.random.default_rng(11)
    slopes = []
    for _ in range(300):
        Z = rng.laplace(size=(n, d)) / math.sqrt(2.0) * np.sqrt(tau)
        slopes.append(slope_of(np.log(np.linalg.eigvalsh(Z.T @ Z / n)[::-1][k0 - 1:k1]), k0))
    spread = float(np.std(slopes, ddof=1))
    assert math.sqrt(law.variance(fp, kappa=3.0)) == pytest.approx(spread, rel=0.12)
    assert math.sqrt(law.variance(fp)) < 0.85 * spread
