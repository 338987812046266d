"""The population behind a sample spectrum (fit --population): the deterministic equivalent against
Marchenko-Pastur's closed form and against simulation, the fit on its own output, the pipeline on
synthetic rows, the bias-corrected participation ratio, and every refusal."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import integrate

import spectra_cli as spectra
from spectra_cli.analysis.population import (
    RowScales,
    expected_eigenvalues,
    participation_ratio_population,
    population_fit,
    population_spectrum,
    simulated_spectrum,
)
from spectra_cli.analysis.rank import participation_ratio
from spectra_cli.errors import OptionError
from spectra_cli.stream.moments import Moments


def _mp_rank_means(c: float, d: int) -> np.ndarray:
    """Marchenko-Pastur (isotropic population, ratio c = d / n < 1): the mean of the quantile function
    over each rank's slice of mass 1/d from the top, by quadrature of the closed-form density."""
    a, b = (1 - np.sqrt(c)) ** 2, (1 + np.sqrt(c)) ** 2

    def dens(x: float) -> float:
        return np.sqrt(max((b - x) * (x - a), 0.0)) / (2 * np.pi * c * x)

    xs = np.linspace(a, b, 20001)
    f = np.array([dens(x) for x in xs])
    tail_mass = np.concatenate([[0.0], np.cumsum(((f[1:] + f[:-1]) / 2 * np.diff(xs))[::-1])])[::-1]
    tail_first = np.concatenate([[0.0], np.cumsum(((xs[1:] * f[1:] + xs[:-1] * f[:-1]) / 2
                                                    * np.diff(xs))[::-1])])[::-1]
    N, M = d * tail_mass, d * tail_first
    k = np.arange(d + 1, dtype=float)
    return np.diff(np.interp(k, N[::-1], M[::-1]))


@pytest.mark.parametrize("c", [0.25, 0.5])
def test_an_isotropic_population_gives_marchenko_pastur(c):
    d = 200
    lam = expected_eigenvalues(np.ones(d), c, int(0.95 * d))
    ref = _mp_rank_means(c, d)[: lam.size]
    np.testing.assert_allclose(lam, ref, rtol=2e-3)
    assert integrate.quad(lambda x: 1.0, 0, 1)[0] == pytest.approx(1.0)  # (scipy's quadrature is the reference's)


def test_the_expected_spectrum_is_the_mean_of_simulated_spectra():
    rng = np.random.default_rng(0)
    d, n = 128, 192
    tau = population_spectrum(0.0, 1.0, (), d, (d,))
    sims = np.mean([simulated_spectrum(tau, n, rng, None) for _ in range(40)], axis=0)
    lam = expected_eigenvalues(tau, d / n, 110)
    np.testing.assert_allclose(lam[10:110], sims[10:110], rtol=0.03)
    # with row scales (an elliptical model): the same agreement
    w = np.array([0.25, 1.0, 1.75])
    p = np.full(3, 1 / 3)
    sims = np.mean([simulated_spectrum(tau, n, rng, (w, p)) for _ in range(40)], axis=0)
    lam = expected_eigenvalues(tau, d / n, 100, scales=(w, p))
    np.testing.assert_allclose(lam[10:100], sims[10:100], rtol=0.04)


def test_the_fit_recovers_the_population_from_its_own_expected_spectrum():
    d, n = 128, 256
    tau = population_spectrum(0.0, 0.8, (1.3,), d, (50,))
    lam = np.zeros(d)
    lam[:120] = expected_eigenvalues(tau, d / n, 120)
    pf = population_fit(lam, n=n, window=(11, 50), replicates=10)
    # the match itself is exact; the bootstrap may then remove the finite-d offset that real samples have
    # from the deterministic equivalent (this input has none: it is the equivalent itself)
    matched = pf.alpha + (pf.bootstrap_bias if pf.bias_corrected else 0.0)
    assert matched == pytest.approx(0.8, abs=2e-3)
    assert pf.segment_exponents[-1] == pytest.approx(1.3, abs=0.05)
    assert pf.match_rms < 1e-3
    assert pf.naive_alpha > 0.85  # what the sample slope says
    assert pf.low < pf.alpha < pf.high


@pytest.mark.parametrize("elliptical", [False, True])
def test_fit_population_corrects_the_small_sample_bias(elliptical):
    rng = np.random.default_rng(5)
    d, n, alpha = 128, 256, 1.0
    X = rng.standard_normal((n, d)) * np.arange(1, d + 1) ** (-alpha / 2)
    if elliptical:
        X *= np.sqrt(rng.gamma(1.0, 1.0, n))[:, None]
    rep = spectra.fit(X + 2.0, window="11:64", population=True)
    pop = rep.to_dict()["fit"]["population"]
    assert abs(pop["alpha"] - alpha) < abs(rep.fit.alpha - alpha) / 3
    if not elliptical:  # (coverage over many seeds, both row models: bench/bench_population.py)
        assert pop["ci"][0] <= alpha <= pop["ci"][1]
    assert pop["ci"][0] < pop["alpha"] < pop["ci"][1]
    assert pop["n_over_d"] == pytest.approx((n - 1) / d)
    assert pop["rows"]["model"].startswith("separable") or not elliptical
    assert rep.options.population == {"replicates": 40, "seed": 0, "level": 0.95}
    assert rep.timings["population_s"] > 0


def test_n_below_d_and_weights_and_uncentred_moments_run():
    rng = np.random.default_rng(2)
    d = 48
    X = rng.standard_normal((32, d)) * np.arange(1, d + 1) ** -0.5
    rep = spectra.fit(X, window="6:20", population=True)  # the n x n route: only 31 non-zero eigenvalues
    assert rep.fit.population.ranks_matched[1] <= 31
    Y = rng.standard_normal((200, d)) * np.arange(1, d + 1) ** -0.5
    w = rng.uniform(0.5, 2.0, 200)
    rep = spectra.fit(Y, weights=w, window="6:20", population=True)
    assert rep.fit.population.n_effective == pytest.approx(w.sum() ** 2 / (w * w).sum())
    rep = spectra.fit(Y + 1.0, centered=False, window="6:20", population=True)
    assert rep.fit.population.alpha > 0


def test_the_participation_ratio_estimate_removes_most_of_the_bias():
    d, n = 128, 128
    tau = np.arange(1, d + 1) ** -0.5
    true = tau.sum() ** 2 / (tau ** 2).sum()
    est, naive = [], []
    for seed in range(4):
        X = np.random.default_rng(seed).standard_normal((n, d)) * np.sqrt(tau) + 4.0
        m = Moments.from_block(X)
        lam = np.linalg.eigvalsh(m.m2 / (n - 1))
        assert m.norms is not None
        sc = RowScales.of(m.norms, weight_sum=n, weight_sq_sum=n, source="test")
        est.append(participation_ratio_population(lam, sc, scale_to_population=(n - 1) / n))
        naive.append(participation_ratio(np.clip(lam, 0, None)))
    assert abs(np.mean(est) - true) < 0.05 * true < abs(np.mean(naive) - true) / 4
    rep = spectra.fit(X, population=True)
    assert rep.rank.participation_ratio_population == pytest.approx(est[-1], rel=1e-9)


def test_population_refuses_what_it_cannot_estimate(tmp_path):
    X = np.random.default_rng(0).standard_normal((300, 40))
    with pytest.raises(OptionError, match="^population estimates the exponent of a power-law population; it does "
                       "not apply to model='broken' \\(drop one or the other\\).$"):
        spectra.fit(X, population=True, model="broken")
    np.save(tmp_path / "ev.npy", np.linspace(1, 0.1, 40))
    with pytest.raises(OptionError, match="needs the number of rows behind the spectrum"):
        spectra.fit(tmp_path / "ev.npy", eigenvalues=True, population=True)
    with pytest.raises(OptionError, match="top=4 computes only the leading eigenvalues.*population"):
        spectra.fit(X, population=True, top=4)


def test_a_moment_file_without_row_norms_falls_back_to_gaussian_rows_and_says_so(tmp_path):
    X = np.random.default_rng(1).standard_normal((600, 48)) * np.arange(1, 49) ** -0.5
    path = spectra.accumulate(X).save(tmp_path / "m.npz")
    with np.load(path) as z:
        parts = {k: z[k] for k in z.files if k != "norms"}
    np.savez(tmp_path / "old.npz", **parts)
    rep = spectra.fit(tmp_path / "old.npz", window="11:24", population=True)
    assert rep.fit.population.scales["model"].startswith("Gaussian rows")
    assert rep.rank.participation_ratio_population is None
    assert any("carry no histogram of row norms" in w for w in rep.warnings)
    assert spectra.fit(path, window="11:24", population=True).fit.population.scales["model"].startswith("separable")


def test_ci_at_small_n_over_d_points_to_population():
    X = np.random.default_rng(3).standard_normal((400, 64))
    rep = spectra.fit(X, ci=True, ci_replicates=10)
    assert any("--population estimates the population exponent" in w for w in rep.warnings)


def test_the_cli_reports_the_population_in_json_and_tables(cli, tmp_path, validate):
    X = np.random.default_rng(4).standard_normal((200, 40)) * np.arange(1, 41) ** -0.7
    np.save(tmp_path / "x.npy", X)
    r = cli("fit", tmp_path / "x.npy", "--window", "11:32", "--population", "--json")
    assert r.exit_code == 0, r.stderr
    doc = r.json()
    validate(doc)
    pop = doc["fit"]["population"]
    assert pop["window"] == [11, 32] and pop["ci"][0] < pop["alpha"] < pop["ci"][1]
    assert doc["rank"]["participation_ratio_population"] > 0
    assert doc["options"]["population"]["replicates"] == 40
    r = cli("fit", tmp_path / "x.npy", "--window", "11:32", "--population")
    assert "population exponent over 11..32" in r.stdout and "participation_ratio_population" in r.stdout
    r = cli("fit", tmp_path / "x.npy", "--population", "--model", "broken")
    assert r.exit_code == 2 and r.stderr.startswith("error: --population estimates the exponent of a power-law")


def test_what_cannot_be_estimated_is_a_warning_and_no_population():
    rng = np.random.default_rng(8)
    X = rng.standard_normal((500, 50)) * np.arange(1, 51) ** -0.5
    rep = spectra.fit(X, window="48:50", population=True)  # too few ranks left at the lower edge
    assert rep.fit.population is None
    assert any("--population over ranks 48..50: the population exponent needs at least 5 ranks" in w
               for w in rep.warnings)
    rep = spectra.fit(rng.standard_normal((6, 5)), population=True)  # too few rows
    assert rep.fit is None or rep.fit.population is None
    assert any("6 rows are: too few to say what population they come from" in w for w in rep.warnings)
    w = np.ones(500)
    w[0] = 1e12  # one row carries the sample
    rep = spectra.fit(X, weights=w, window="2:20", population=True)
    assert rep.fit.population is None
    assert any("effective sample of 1 rows" in w_ for w_ in rep.warnings)


@pytest.mark.parametrize("factor", [1e80, 1e-100])
def test_the_population_does_not_depend_on_the_units(factor):
    X = np.random.default_rng(9).standard_normal((400, 40)) * np.arange(1, 41) ** -0.5
    a = spectra.fit(X, window="2:20", population=True)
    b = spectra.fit(X * factor, window="2:20", population=True)
    assert b.fit.population.alpha == pytest.approx(a.fit.population.alpha, abs=5e-3)
    # (the norms fall into other bins of the fixed grid: 2.2 % wide)
    assert b.rank.participation_ratio_population == pytest.approx(a.rank.participation_ratio_population, rel=1e-3)


def test_shards_of_one_row_fall_back_to_gaussian_rows(tmp_path):
    X = np.random.default_rng(10).standard_normal((60, 30)) * np.arange(1, 31) ** -0.5
    for i, row in enumerate(X):
        np.save(tmp_path / f"r{i:03d}.npy", row[None, :])
    rep = spectra.fit(str(tmp_path / "r*.npy"), window="2:12", population=True)
    assert "blocks of one row" in rep.fit.population.scales["note"]
    assert rep.fit.population.scales["model"].startswith("separable") is False
