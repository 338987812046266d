"""The population behind a sample spectrum (fit --population): the deterministic equivalent against
Marchenko-Pastur's closed form and against simulation, the fit on its own output, the pipeline on
synthetic rows, the bias-corrected participation ratio, and every refusal."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import integrate

import spectra_cli as spectra
from spectra_cli.analysis.equivalent import Grid, expected_eigenvalues
from spectra_cli.analysis.population import BendStatistic, bend_test, population_fit, population_spectrum
from spectra_cli.analysis.rank import participation_ratio
from spectra_cli.analysis.row_scales import RowScales, participation_ratio_population
from spectra_cli.analysis.sampling_curve import Subsamples, subsample_design
from spectra_cli.analysis.simulate import simulated_spectrum
from spectra_cli.errors import FitError, OptionError
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


@pytest.mark.parametrize("d,n", [(160, 1600), (160, 96)])
@pytest.mark.parametrize("elliptical", [False, True])
def test_a_warm_started_expected_spectrum_is_the_continued_one(d, n, elliptical, monkeypatch):
    """Each evaluation starts from the last one's solution; the numbers are those of the cold continuation
    (the solution in the upper half plane is unique; points stopped short by halving take the continuation)."""
    rng = np.random.default_rng(3)
    sc = (np.array([0.3, 0.8, 1.2, 2.5]), np.array([0.2, 0.3, 0.3, 0.2])) if elliptical else None
    if sc is not None:
        sc = (sc[0] / float(sc[1] @ sc[0]), sc[1])
    import spectra_cli.analysis.equivalent as pop

    continued: list[int] = []
    cont = pop._continued
    monkeypatch.setattr(pop, "_continued", lambda x, *a: continued.append(x.size) or cont(x, *a))
    warm, cold = Grid(), Grid(warm=False)
    r = int(0.8 * min(n, d))
    points = 0
    for k in range(5):
        ab = np.array([0.7, 0.9, 1.2]) + (0.0 if k == 0 else rng.normal(0, 0.03, 3))
        tau = population_spectrum(0.0, ab[0], ab[1:], d, (30, 80))
        b = expected_eigenvalues(tau, d / n, r, scales=sc, grid=cold)
        continued.clear()
        a = expected_eigenvalues(tau, d / n, r, scales=sc, grid=warm)
        np.testing.assert_allclose(a, b, rtol=1e-9)
        if k:
            points += warm.points
            # most points from the warm start (with n < d, points below the support where the continuation itself
            # stops short at the pole of X, with a density of 0 either way, take it again)
            assert sum(continued) < warm.points / (4 if n > d else 2)
    assert points > 0


def test_the_fit_recovers_the_population_from_its_own_expected_spectrum():
    d, n = 128, 256
    tau = population_spectrum(0.0, 0.8, (1.3,), d, (50,))
    lam = np.zeros(d)
    lam[:120] = expected_eigenvalues(tau, d / n, 120)
    pf = population_fit(lam, n=n, window=(11, 50), replicates=10)
    # the match itself is exact; the bootstrap may then remove the finite-d offset that real samples have
    # from the deterministic equivalent (this input has none: it is the equivalent itself)
    matched = pf.alpha + pf.bias_share * pf.bootstrap_bias
    assert matched == pytest.approx(0.8, abs=2e-3)
    assert pf.segment_exponents[-1] == pytest.approx(1.3, abs=0.05)
    assert pf.match_rms < 1e-3
    assert pf.naive_alpha > 0.85  # what the sample slope says
    assert pf.low < pf.alpha < pf.high


def test_the_population_is_the_same_bits_on_one_core_or_two(monkeypatch):
    # the match's differences and the simulated samples are evaluated side by side on two cores and one after
    # another on one: each difference on its own copy of the grid, each sample from its place in the stream (the
    # thread policy's own sizes: a caller's --threads fixes every product's threads, whose last bits follow them)
    from spectra_cli import threads
    from spectra_cli.analysis import equivalent, simulate

    # (side by side even at this size: below their floors the pools are not used at all)
    monkeypatch.setattr(simulate, "SIDE_BY_SIDE_ORDER", 0)
    monkeypatch.setattr(equivalent, "EVALUATIONS_WORK", 0)
    d, n = 96, 192
    tau = population_spectrum(0.0, 0.9, (1.2,), d, (40,))
    lam = np.zeros(d)
    lam[:90] = expected_eigenvalues(tau, d / n, 90) * np.exp(np.random.default_rng(2).normal(0, 0.01, 90))
    fits = []
    for cores in (1, 2):
        monkeypatch.setattr(threads, "usable_cores", lambda cores=cores: cores)
        with threads.call(None):
            fits.append(population_fit(lam, n=n, window=(11, 40), replicates=6).to_dict())
    for out in fits:
        out.pop("cost")
    assert fits[0] == fits[1]


def test_the_matchs_differences_run_side_by_side_only_above_their_floor(monkeypatch):
    # a small grid's evaluations one after another (two threads cost more than they save there), side by side from
    # EVALUATIONS_WORK grid points x atoms
    from spectra_cli import threads
    from spectra_cli.analysis import equivalent

    asked: list[bool] = []
    real = threads.map_side_by_side

    def recorded(fn, items, *, wanted):
        if "on_grid_copies" in getattr(fn, "__qualname__", ""):
            asked.append(wanted)
        return real(fn, items, wanted=wanted)

    monkeypatch.setattr(threads, "map_side_by_side", recorded)
    d, n = 48, 192
    tau = population_spectrum(0.0, 0.9, (1.2,), d, (20,))
    lam = expected_eigenvalues(tau, d / n, d) * np.exp(np.random.default_rng(3).normal(0, 0.01, d))
    out, default = [], equivalent.EVALUATIONS_WORK
    for floor in (default, 0):
        monkeypatch.setattr(equivalent, "EVALUATIONS_WORK", floor)
        asked.clear()
        out.append(population_fit(lam, n=n, window=(5, 20), replicates=4))
        assert asked and set(asked) == {floor == 0}, (floor, asked)
    points, atoms = out[0].cost["grid_points"], out[0].cost["atoms"]
    assert points * atoms < default  # (this grid is below the floor)


@pytest.mark.slow
@pytest.mark.parametrize("elliptical", [False, True])
def test_fit_population_corrects_the_small_sample_bias(elliptical):
    rng = np.random.default_rng(5)
    d, n, alpha = 128, 256, 1.0
    X = rng.standard_normal((n, d)) * np.arange(1, d + 1) ** (-alpha / 2)
    if elliptical:
        X *= np.sqrt(rng.gamma(1.0, 1.0, n))[:, None]
    rep = spectra.fit(X + 2.0, window="11:64", population=True)
    pop = rep.to_dict()["fit"]["population"]
    # most of the sample's bias removed (one seed: the estimate's own error is 0.04-0.05 at n/d = 2 with these
    # scales; medians and coverage over seeds are bench/bench_population.py's)
    assert abs(pop["alpha"] - alpha) < 0.4 * abs(rep.fit.alpha - alpha)
    if not elliptical:  # (coverage over many seeds, both row models: bench/bench_population.py)
        assert pop["ci"][0] <= alpha <= pop["ci"][1]
    assert pop["ci"][0] < pop["alpha"] < pop["ci"][1]
    assert pop["n_over_d"] == pytest.approx((n - 1) / d)
    assert pop["rows"]["model"].startswith("separable") or not elliptical
    assert rep.options.population == {"replicates": 40, "seed": 0, "level": 0.95, "route": "analytic"}
    # the interval from theory, for Gaussian rows and for Gamma(1) row scales alike
    assert pop["bootstrap"]["route"] == "analytic"
    assert rep.timings["population_s"] > 0


def test_n_below_d_and_weights_and_uncentred_moments_run():
    rng = np.random.default_rng(2)
    d = 40
    X = rng.standard_normal((32, d)) * np.arange(1, d + 1) ** -0.5
    rep = spectra.fit(X, window="6:20", population=True)  # the n x n route: only 31 non-zero eigenvalues
    assert rep.fit.population.ranks_matched[1] <= 31
    Y = rng.standard_normal((160, d)) * np.arange(1, d + 1) ** -0.5
    w = rng.uniform(0.5, 2.0, 160)
    rep = spectra.fit(Y, weights=w, window="6:20", population=True)
    assert rep.fit.population.n_effective == pytest.approx(w.sum() ** 2 / (w * w).sum())
    rep = spectra.fit(Y + 1.0, centered=False, window="6:20", population=True)
    assert rep.fit.population.alpha > 0


@pytest.mark.slow
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
    rep = spectra.fit(X, population=True)  # (32 blocks of 4 rows, for the sampling curve's groups: each norm is
    # about its block's mean, made unbiased for the norm about the true mean; its square is not, by O(1 / block))
    assert rep.rank.participation_ratio_population == pytest.approx(est[-1], rel=0.02)
    assert rep.rank.participation_ratio_population == pytest.approx(true, rel=0.05)


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
    rows = spectra.fit(path, window="11:24", population=True).fit.population.scales
    assert "cv2_observed" in rows and rows["source"].startswith("squared row norms")  # (read: Gaussian rows here)


def test_ci_at_small_n_over_d_points_to_population():
    X = np.random.default_rng(3).standard_normal((400, 64))
    rep = spectra.fit(X, ci=True, ci_replicates=10)
    assert any(w.endswith("For the population exponent with an interval that accounts for the bias, use "
                          "population=True") for w in rep.warnings)


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
    bias = next(w for w in doc["warnings"] if "biased by finite sampling" in w)  # n/d = 5: said, not advised again
    assert bias.endswith("Use more rows; the population exponent asked for here accounts for it"), bias
    r = cli("fit", tmp_path / "x.npy", "--window", "11:32", "--population")
    assert "population exponent over 11..32" in r.stdout and "participation ratio (population)" in r.stdout
    r = cli("fit", tmp_path / "x.npy", "--population", "--model", "broken")
    assert r.exit_code == 2 and r.stderr.startswith("error: --population estimates the exponent of a power-law")


def test_what_cannot_be_estimated_is_a_warning_and_no_population():
    rng = np.random.default_rng(8)
    X = rng.standard_normal((500, 50)) * np.arange(1, 51) ** -0.5
    rep = spectra.fit(X, window="48:50", population=True)  # too few ranks left at the lower edge
    assert rep.fit.population is None
    assert any(w.startswith("no population exponent over ranks 48..50 (population=True): the population exponent "
                            "needs at least 5 ranks") for w in rep.warnings)
    rep = spectra.fit(rng.standard_normal((6, 5)), population=True)  # too few rows
    assert rep.fit is None or rep.fit.population is None
    assert any("6 rows are 5 degrees of freedom once centred: too few to say what population they come from; it "
               "needs at least 10 degrees of freedom (rows, less one when centred" in w for w in rep.warnings)
    w = np.ones(500)
    w[0] = 1e12  # one row carries the sample
    rep = spectra.fit(X, weights=w, window="2:20", population=True)
    assert rep.fit.population is None
    assert any("effective sample of 1 rows" in w_ for w_ in rep.warnings)


@pytest.mark.slow
def test_the_population_does_not_depend_on_the_units():
    X = np.random.default_rng(9).standard_normal((400, 40)) * np.arange(1, 41) ** -0.5
    a = spectra.fit(X, window="2:20", population=True)
    for factor in (1e80, 1e-100):
        b = spectra.fit(X * factor, window="2:20", population=True)
        assert b.fit.population.alpha == pytest.approx(a.fit.population.alpha, abs=5e-3)
        # (the norms fall into other bins of the fixed grid: 2.2 % wide)
        assert b.rank.participation_ratio_population == pytest.approx(a.rank.participation_ratio_population,
                                                                      rel=1e-3)


def test_shards_of_one_row_keep_their_norms_about_the_rows_before_them(tmp_path):
    """Each one-row shard is a block of one row: its norm is taken about the mean of the rows before it (it had
    none about its own mean, and every norm read 0: no row scales to read); Gaussian rows read as such."""
    X = np.random.default_rng(10).standard_normal((60, 30)) * np.arange(1, 31) ** -0.5
    for i, row in enumerate(X):
        np.save(tmp_path / f"r{i:03d}.npy", row[None, :])
    rep = spectra.fit(str(tmp_path / "r*.npy"), window="2:12", population=True)
    rows = rep.fit.population.scales
    assert rows["model"].startswith("Gaussian rows: the norms spread no more than the directions")
    assert rows["cv2_observed"] > 0.1 and "note" not in rows


def test_the_subsample_design_leaves_each_group_out_once_per_partition():
    keep = subsample_design(10, seed=3)
    assert keep.shape == (4, 4, 10)
    assert (keep.sum(axis=1) == 3).all()  # each group is left out of exactly one of a partition's 4 sub-samples
    assert set(np.unique((~keep).sum(axis=2))) == {2, 3}  # parts of 10 groups: 3, 3, 2, 2
    assert not np.array_equal(keep[0], keep[1])
    assert np.array_equal(keep, subsample_design(10, seed=3))
    with pytest.raises(FitError, match="at least 4 row groups; there are 3"):
        subsample_design(3, seed=0)


def _spectra_of(X: np.ndarray, keep: np.ndarray, G: int) -> tuple[np.ndarray, np.ndarray]:
    label = np.arange(len(X)) * G // len(X)
    R, m = keep.shape[:2]
    out, dof = np.empty((R, m, X.shape[1])), np.empty((R, m))
    for r in range(R):
        for q in range(m):
            Y = X[keep[r, q][label]]
            out[r, q] = np.linalg.eigvalsh(np.cov(Y, rowvar=False))[::-1]
            dof[r, q] = len(Y) - 1
    return out, dof


def test_the_sampling_curve_scales_the_model_bias_by_the_observed_change():
    rng = np.random.default_rng(2)
    d, n = 64, 128
    X = rng.standard_normal((n, d)) * np.arange(1, d + 1) ** -0.5
    lam = np.linalg.eigvalsh(np.cov(X, rowvar=False))[::-1]
    keep = subsample_design(32, seed=0)
    spectra_, dof = _spectra_of(X, keep, 32)
    pf = population_fit(lam, n=n - 1, window=(6, 40), replicates=12, subsamples=Subsamples(spectra_, dof, 32, "t"))
    sc = pf.sampling_curve
    assert pf.alpha == pytest.approx(pf.model_alpha + (1 - sc["spread_ratio"]) * sc["model_bias"], abs=1e-12)
    assert 0.7 < sc["spread_ratio"] < 1.3  # Gaussian rows spread their spectrum as the row model says
    # the observed change, by hand: the mean sub-sample slope less the full sample's
    x = np.log(np.arange(6, 41))
    slope = lambda v: -np.polyfit(x, np.log(v[5:40]), 1)[0]  # noqa: E731
    want = np.mean([slope(v) for v in spectra_.reshape(-1, d)]) - slope(lam)
    assert sc["observed_change"] == pytest.approx(want, abs=1e-9)
    assert sc["rows"] == pytest.approx(np.mean(dof))
    # the grouped jackknife by hand
    th = np.array([[slope(v) for v in row] for row in spectra_])
    assert sc["jackknife_sd"] == pytest.approx(np.sqrt(3 * np.mean((th - th.mean(1, keepdims=True)) ** 2)))
    # sub-samples that show no change at all: no correction (the spread ratio 0), the sample slope's own value
    flat = np.broadcast_to(lam, spectra_.shape).copy()
    none = population_fit(lam, n=n - 1, window=(6, 40), replicates=12, subsamples=Subsamples(flat, dof, 32, "t"))
    nc = none.sampling_curve
    assert nc["spread_ratio_raw"] == 0.0 and nc["jackknife_sd"] == 0.0
    # drawn towards 1 by the James-Stein factor of its error (the model's simulated samples' scatter)
    e = np.hypot(nc["model_change_sd"], nc["observed_change_se"]) / abs(nc["model_change"])
    assert 0 < nc["shrink"] == pytest.approx(1 - (2 * e) ** 2) and nc["spread_ratio"] == pytest.approx(1 - nc["shrink"])
    assert none.alpha == pytest.approx(none.model_alpha + (1 - nc["spread_ratio"]) * nc["model_bias"])
    assert none.model_alpha == pf.model_alpha  # (the curve leaves the row model's own estimate as it was)
    assert nc["interval_from"] == "model"


def test_rows_that_depend_on_each_other_are_corrected_by_their_own_sampling_curve():
    """Each row twice in a row (blocks keep the pairs together): the sample spreads its spectrum as half as
    many independent rows would, which the row model cannot know; the sampling curve sees it."""
    rng = np.random.default_rng(7)
    d, alpha = 128, 1.0
    Z = rng.standard_normal((192, d)) * np.arange(1, d + 1) ** (-alpha / 2)
    X = np.repeat(Z, 2, axis=0)
    pop = spectra.fit(X, window="6:60", population=True).fit.population
    # (the raw ratio is 1.61 here, on the way to 2; its scatter over the simulated samples draws it to about 1.5)
    assert pop.sampling_curve["spread_ratio_raw"] > 1.5
    assert pop.sampling_curve["spread_ratio"] > 1.4
    assert abs(pop.alpha - alpha) < abs(pop.model_alpha - alpha) / 2
    assert pop.low <= alpha <= pop.high


def test_the_sampling_curve_comes_from_the_groups_each_route_has(tmp_path):
    rng = np.random.default_rng(4)
    X = rng.standard_normal((640, 32)) * np.arange(1, 33) ** -0.5
    plain = spectra.accumulate(X).save(tmp_path / "plain.npz")
    rep = spectra.fit(plain, window="4:16", population=True)
    assert rep.to_dict()["fit"]["population"]["sampling_curve"] is None
    assert any("carry no row groups" in w and "the row model alone" in w for w in rep.warnings)
    grouped = spectra.accumulate(X, groups=32).save(tmp_path / "grouped.npz")
    sc = spectra.fit(grouped, window="4:16", population=True).fit.population.sampling_curve
    assert sc["groups"] == 32 and "row-block groups" in sc["source"]
    wide = spectra.fit(X[:24], window="3:10", population=True).fit.population  # n < d: the n x n route
    assert wide.sampling_curve["source"] == "24 groups of consecutive rows"
    assert wide.sampling_curve["ranks"][1] <= 0.8 * 17


@pytest.mark.parametrize("alpha", [0.5, 1.5])
def test_the_row_scales_are_deconvolved_from_the_directions_part_of_the_norms(alpha):
    """Rows sqrt(s) Sigma^(1/2) z with s ~ Gamma(1, 1) (CV 1): the squared norms are s q, q the directions' part
    (variance 2 tr Sigma^2 / (tr Sigma)^2: 0.03 at alpha 0.5, 0.7 at 1.5); the deconvolved scales have the
    spread and the lower tail of the Gamma law, not of the norms."""
    from spectra_cli.analysis.row_scales import deconvolved_scales
    from spectra_cli.stream.norms import NormHistogram

    rng = np.random.default_rng(11)
    d, n = 256, 20000
    tau = np.arange(1, d + 1) ** -alpha
    s = rng.gamma(1.0, 1.0, n)
    q = (rng.standard_normal((n, d)) ** 2 * tau).sum(axis=1) / tau.sum()
    t2 = float((tau * tau).sum() / tau.sum() ** 2)
    sc = RowScales.of(NormHistogram.of(s * q * 7.0), weight_sum=n, weight_sq_sum=n, source="test")
    got, info = deconvolved_scales(sc, t2)
    assert got is not None
    w, p = got
    assert float(p @ w) == pytest.approx(1.0)
    assert info["cv2_scales"] == pytest.approx(1.0, abs=0.1)
    assert info["cv2_observed"] > info["cv2_scales"] + (0.5 if alpha > 1 else 0.0)
    for x in (0.1, 0.5, 2.0):  # the Gamma(1, 1) law's CDF, 1 - exp(-x), at its own mean of 1
        assert float(p[w < x].sum()) == pytest.approx(1 - np.exp(-x), abs=0.04)
    # Gaussian rows: the norms spread no more than the directions make them
    sc = RowScales.of(NormHistogram.of(q), weight_sum=n, weight_sq_sum=n, source="test")
    got, info = deconvolved_scales(sc, t2)
    assert got is None or info["cv2_scales"] < 0.02


def test_rows_of_zero_weight_are_no_rows_of_the_sampling_curve():
    X = np.random.default_rng(0).standard_normal((128, 32)) * np.arange(1, 33) ** -0.5
    w = np.ones(128)
    w[::2] = 0.0
    a = spectra.fit(X, weights=w, population=True).fit.population
    b = spectra.fit(X[1::2], population=True).fit.population
    assert a.sampling_curve["rows"] == b.sampling_curve["rows"]
    assert a.alpha == pytest.approx(b.alpha, abs=1e-9)
    # every weight in one row-block group: no partition leaves out about a quarter of the rows; the row model alone
    Y = np.random.default_rng(1).standard_normal((2048, 32)) * np.arange(1, 33) ** -0.5
    v = np.zeros(2048)
    v[:64] = 1.0
    rep = spectra.fit(Y, weights=v, population=True)
    assert not rep.fit.population.sampling_curve
    assert any("row groups are too unequal in size" in t for t in rep.warnings)


def test_a_spread_ratio_past_its_bound_widens_the_interval_by_what_it_leaves_out():
    from spectra_cli.analysis import sampling_curve as P

    Z = np.random.default_rng(0).standard_normal((250, 64)) * np.arange(1, 65) ** -0.25
    X = np.repeat(Z, 4, axis=0)  # a quarter as many independent rows as it has: a ratio near 4.8
    full = spectra.fit(X, population=True).fit.population
    old = P.SPREAD_RATIO_MAX
    try:
        P.SPREAD_RATIO_MAX = 2.0
        cut = spectra.fit(X, population=True).fit.population
    finally:
        P.SPREAD_RATIO_MAX = old
    sc = cut.sampling_curve
    assert sc["spread_ratio"] == 2.0 and sc["left_out"] < 0
    # (the correction left out lowers the estimate: the interval reaches that much further down, only there)
    assert cut.alpha - cut.low == pytest.approx(cut.high - cut.alpha - sc["left_out"], abs=1e-12)
    assert cut.low <= full.alpha <= cut.high and full.low <= 0.5 <= full.high


@pytest.mark.parametrize("n", [90, 30])
def test_the_simulated_sub_samples_spectra_are_those_of_their_rows(n):
    from spectra_cli.analysis.simulate import partition_spectra

    rng = np.random.default_rng(n)
    Z = rng.standard_normal((n, 40)) * np.arange(1, 41) ** -0.5 + 1.0
    part = rng.integers(0, 4, n)
    got = partition_spectra(Z, part, 4)
    for q, v in zip((None, 0, 1, 2, 3), got, strict=True):
        Y = Z if q is None else Z[part != q]
        want = np.clip(np.linalg.eigvalsh(np.cov(Y, rowvar=False))[::-1], 0, None)
        np.testing.assert_allclose(np.clip(v, 0, None), want, atol=1e-12 * want[0])


def test_the_steps_are_halved_as_often_as_halving_one_at_a_time_would():
    """The fewest halvings (1..30) that keep ``e - step`` in the upper half plane, read off log2, against the
    loop that halves every offending step once a round."""
    from spectra_cli.analysis import equivalent as P

    rng = np.random.default_rng(0)
    ea = rng.standard_normal(4000) + 1j * 10.0 ** rng.uniform(-12, 1, 4000)
    step = rng.standard_normal(4000) + 1j * 10.0 ** rng.uniform(-12, 3, 4000)
    ea[:3] = [1 + 0j, 1 + 1e-300j, 2 + 1j]  # no imaginary part: 30 halvings and still below
    step[:3] = [1 + 1j, 1 + 1j, 1 + 2j]  # the last: one halving lands exactly on the axis
    want_step, want_new = step.copy(), ea - step
    for _ in range(30):
        bad = want_new.imag < 0
        if not bad.any():
            break
        want_step[bad] *= 0.5
        want_new[bad] = ea[bad] - want_step[bad]
    got_step, got_new = step.copy(), ea - step
    P._halve_into_upper_half_plane(ea, got_step, got_new, np.flatnonzero(got_new.imag < 0))
    assert np.array_equal(got_step, want_step) and np.array_equal(got_new, want_new)


def test_a_sampled_file_gives_the_population_of_the_same_rows_as_an_array(tmp_path):
    # fit layer.npy --population --sample N put nearly every sampled row into one row group: sub-samples of 25 rows
    # resolved 20 ranks, the row norms were 0, and the interval ran from 0 to 8.6 (or past its own estimate)
    X = np.random.default_rng(5).standard_normal((6000, 48)) * np.arange(1, 49) ** -0.6
    np.save(tmp_path / "x.npy", X)
    a = spectra.fit(str(tmp_path / "x.npy"), window="4:24", population=True, sample=400, seed=2).fit.population
    rows = np.sort(np.random.default_rng(2).choice(6000, size=400, replace=False))
    b = spectra.fit(X[rows], window="4:24", population=True, seed=2).fit.population
    assert a.sampling_curve["ranks"] == b.sampling_curve["ranks"] == [4, 24]
    assert a.alpha == pytest.approx(b.alpha, abs=1e-9) and a.low == pytest.approx(b.low, abs=1e-9)
    assert 0 < a.low <= a.alpha <= a.high < 12 and a.high - a.low < 0.5


def test_the_subsample_design_balances_unequal_groups_by_rows():
    even = subsample_design(32, seed=4)
    assert np.array_equal(subsample_design(32, seed=4, sizes=np.full(32, 94.0)), even)  # (equal groups: unchanged)
    sizes = np.r_[np.full(8, 200.0), np.full(24, 10.0)]  # merged moment files: 8 large groups, 24 small ones
    keep = subsample_design(32, seed=4, sizes=sizes)
    for r in range(keep.shape[0]):
        left_out = np.array([sizes[~keep[r, q]].sum() for q in range(keep.shape[1])]) / sizes.sum()
        assert np.all(np.abs(left_out * 4 - 1) <= 0.5)
        assert np.array_equal(keep[r].sum(axis=0), np.full(32, 3))  # each group left out once a partition
    assert subsample_design(32, seed=4, sizes=np.r_[1000.0, np.ones(31)]) is None  # one group holds most rows


def test_the_bend_statistic_reads_a_parabola_and_ignores_level_and_slope():
    ranks = np.arange(11, 257)
    b = BendStatistic(ranks)
    x = np.log(ranks)
    m = 0.5 * (x[0] + x[-1])
    for beta in (0.3, -0.1):
        assert b(-beta * (x - m) ** 2 + 2.0 - 1.3 * x) == pytest.approx(beta, rel=1e-10)
    assert b(5.0 - 0.7 * x) == pytest.approx(0.0, abs=1e-12)
    assert b.span == pytest.approx(np.log(256 / 11))
    # p-value: Student's t with B - 1 degrees of freedom on the simulated bends, the observed one inside them fits
    sims = np.random.default_rng(0).normal(0.01, 0.002, 40)
    assert bend_test(0.011, sims)["fits"] and not bend_test(0.05, sims)["fits"]
    assert bend_test(0.05, sims)["p_value"] < 1e-10
    assert bend_test(0.05, sims[:2])["p_value"] is None  # too few simulations: no test, no verdict against the model


def test_the_bent_population_is_the_power_law_at_zero_and_monotone():
    d = 200
    np.testing.assert_array_equal(population_spectrum(0.0, 0.9, (1.2,), d, (80,), bend=(0.0, 8)),
                                  population_spectrum(0.0, 0.9, (1.2,), d, (80,)))
    tau = population_spectrum(0.0, 0.9, (1.2,), d, (80,), bend=(0.25, 8))
    lt = np.log(tau)
    j = np.log(np.arange(1, d + 1))
    lo, hi = np.log(8), np.log(80)
    np.testing.assert_allclose(lt[7:80], -0.9 * j[7:80] - 0.25 * (j[7:80] - 0.5 * (lo + hi)) ** 2, rtol=1e-12)
    assert np.all(np.diff(lt) < 0)
    np.testing.assert_allclose(np.diff(lt[79:]), -1.2 * np.diff(j[79:]), rtol=1e-9)  # the tail, continuous


@pytest.mark.slow
def test_a_population_that_bends_in_the_window_is_flagged_and_a_power_law_is_not():
    d, n = 128, 512
    j = np.arange(1, d + 1.0)
    broken = np.where(j <= 20, j ** -0.6, 20 ** -0.6 * (j / 20) ** -1.6)
    truth = -np.polyfit(np.log(j[5:64]), np.log(broken[5:64]), 1)[0]
    X = np.random.default_rng(0).standard_normal((n, d)) * np.sqrt(broken)
    rep = spectra.fit(X, window="6:64", population=True)
    pop = rep.fit.population
    assert not pop.power_law_fits and pop.bend["p_value"] < 1e-6
    assert pop.bend["curvature"] > 0  # steeper with rank: a concave bend
    assert any("the population is not a power law there" in w for w in rep.warnings)
    assert pop.high - pop.low >= 2 * abs(pop.bend["model_error"]) > 0  # widened either side by the model's error
    assert pop.low <= truth <= pop.high or any("not a power law" in w for w in rep.warnings)
    X = np.random.default_rng(0).standard_normal((n, d)) * np.sqrt(j ** -1.0)
    rep = spectra.fit(X, window="6:64", population=True)
    assert rep.fit.population.power_law_fits and rep.fit.population.bend["p_value"] > 0.01
    assert not any("not a power law" in w for w in rep.warnings)
    assert rep.to_dict()["fit"]["population"]["bend"]["fits"] is True


def test_the_participation_ratio_of_the_population_can_exceed_the_rows():
    # n < d: the sample has at most n non-zero eigenvalues (the n x n route keeps n), but the population's
    # participation ratio is not bounded by n (it was cut to n: 128.00 at d = 256, n = 128, where it is 152.6)
    d, n = 256, 128
    tau = np.arange(1, d + 1) ** -0.5
    truth = tau.sum() ** 2 / (tau ** 2).sum()
    est = []
    for seed in range(6):
        X = np.random.default_rng(seed).standard_normal((n, d)) * np.sqrt(tau)
        m = Moments.from_block(X)
        lam = np.linalg.eigvalsh(m.m2 / (n - 1))[::-1][:n]
        sc = RowScales.of(m.norms, weight_sum=n, weight_sq_sum=n, source="test")
        est.append(participation_ratio_population(lam, sc, scale_to_population=(n - 1) / n, dimension=d))
        assert participation_ratio_population(lam, sc, scale_to_population=(n - 1) / n) <= n  # (without d: cut)
    assert truth > n and np.median(est) == pytest.approx(truth, rel=0.05)
    # through fit, on the n x n route: 32 rows of 64 features (the population's ratio is 41.5)
    small = spectra.fit(X[:32, :64], population=True, window="3:12").rank.participation_ratio_population
    assert small is not None and small > 32


def test_heavy_tailed_coordinates_are_not_read_as_row_scales():
    # independent Laplace coordinates spread the norms (kurtosis) but not the spectrum beyond a Gaussian's: their
    # norms read through Gaussian directions gave row scales of cv2 0.17-0.32, and an over-corrected exponent
    d, n = 96, 384
    tau = np.arange(1, d + 1) ** -1.0
    L = np.random.default_rng(3).laplace(size=(n, d)) / np.sqrt(2)
    rows = spectra.fit(L * np.sqrt(tau), window="4:40", population=True).fit.population.scales
    assert rows["scales_from"] == "coordinates" and rows["coordinate_kurtosis"] > 1.5
    assert rows["cv2_scales"] < 0.5 * rows["cv2_observed"]
    # elliptical rows in a random rotation: the coordinates cannot tell (each over-states), the directions' reading
    Q = np.linalg.qr(np.random.default_rng(4).standard_normal((d, d)))[0]
    s = np.random.default_rng(5).gamma(1.0, 1.0, n)
    Z = np.random.default_rng(6).standard_normal((n, d)) * np.sqrt(tau) @ Q.T * np.sqrt(s)[:, None]
    rows = spectra.fit(Z, window="4:40", population=True).fit.population.scales
    assert rows["scales_from"] == "directions" and rows["cv2_scales"] == pytest.approx(1.0, abs=0.35)


@pytest.mark.slow
def test_at_many_rows_per_feature_the_interval_is_first_order_and_agrees_with_the_simulations(monkeypatch):
    """n >= 10 d: the interval and the bend's null come from each eigenvalue's own first-order sampling (Anderson
    1963) instead of 40 simulated samples; the simulations, forced, give the same standard deviation (within their
    own scatter: 11 % at B = 40) and the same estimate."""
    import spectra_cli.analysis.population as pop

    rng = np.random.default_rng(11)
    d = 40
    X = rng.standard_normal((3200, d)) * np.arange(1, d + 1) ** -0.5
    X *= np.sqrt(rng.gamma(4.0, 0.25, size=3200))[:, None]
    first = spectra.fit(X, window="3:16", population=True).fit.population
    assert first.replicates == 0 and first.bend["null"] == "first order"
    assert any("first order" in note for note in first.notes)
    monkeypatch.setattr(pop, "FIRST_ORDER_RATIO", 1e9)
    simulated = spectra.fit(X, window="3:16", population=True, population_route="simulate").fit.population
    assert simulated.replicates == 40 and simulated.bend["null"] == "simulated"
    theory = spectra.fit(X, window="3:16", population=True).fit.population  # (the analytic route, forced too)
    assert theory.replicates == 0 and theory.bend["null"] == "analytic"
    assert theory.bootstrap_sd == pytest.approx(simulated.bootstrap_sd, rel=0.3)
    assert theory.bend["simulated_sd"] == pytest.approx(simulated.bend["simulated_sd"], rel=0.3)
    assert first.bootstrap_sd == pytest.approx(simulated.bootstrap_sd, rel=0.3)
    assert first.bend["simulated_sd"] == pytest.approx(simulated.bend["simulated_sd"], rel=0.3)
    assert first.alpha == pytest.approx(simulated.alpha, abs=simulated.bootstrap_sd)
    assert first.cost["sd_first_order"] == first.bootstrap_sd


def test_weighted_rows_take_the_first_order_route_by_their_effective_sample():
    """640 rows of 32 features are n/d = 20, but weights that concentrate them on a fifth leave Kish's effective
    sample at 5.7 d: the interval is not first order (from theory by default, simulated when asked), as for that
    many rows."""
    from tests.conftest import powerlaw_matrix

    X = powerlaw_matrix(640, 32, 1.0, seed=4)
    w = np.where(np.arange(640) % 5 == 0, 1.0, 0.05)
    assert w.sum() ** 2 / (w * w).sum() == pytest.approx(182.5, abs=0.1)
    weighted = spectra.fit(X, weights=w, window="3:12", population=True, population_route="simulate").fit.population
    plain = spectra.fit(X, window="3:12", population=True).fit.population
    assert weighted.replicates == 40 and weighted.to_dict()["bootstrap"]["route"] == "simulated"
    theory = spectra.fit(X, weights=w, window="3:12", population=True).fit.population
    assert theory.replicates == 0 and theory.to_dict()["bootstrap"]["route"] == "analytic"
    assert plain.replicates == 0 and plain.to_dict()["bootstrap"]["route"] == "first order"


def test_at_first_order_the_match_starts_its_tail_at_the_observed_slopes_and_reaches_the_same_population():
    """With n >= 10 d the sample's tail is near the population's: the match starts each tail segment at its observed
    slope (not the window's) and reaches the least-squares population the window's start reaches, in fewer
    evaluations of the expected spectrum."""
    from spectra_cli.analysis.population import _matched, _problem

    d, n = 96, 1200
    j = np.arange(1, d + 1, dtype=np.float64)
    tau = np.where(j <= 20, j ** -0.7, 20 ** -0.7 * (j / 20) ** -2.0)  # a tail twice as steep as the window
    lam = simulated_spectrum(tau, n, np.random.default_rng(3), None)
    found = {}
    for first_order in (True, False):
        m, naive, _ = _problem(lam, n, (5, 20), None, 0.0, 0)
        ab, _, rms = _matched(m, naive, first_order)
        found[first_order] = (ab, rms, m.evals)
    (ab1, rms1, e1), (ab0, rms0, e0) = found[True], found[False]
    np.testing.assert_allclose(ab1, ab0, atol=5e-3)
    assert rms1 == pytest.approx(rms0, rel=1e-2)
    assert e1 < e0


def test_gauss_newton_stops_when_the_sum_of_squares_stops_moving():
    """Without a step tolerance a converged fit keeps stepping (and evaluating) to its iteration cap; with
    ``sse_rtol`` it stops once a step lowers the sum of squares by less than that fraction of it, at the same
    exponent."""
    from spectra_cli.analysis.population import gauss_newton

    x = np.linspace(0.0, 1.0, 40)
    y = np.exp(-1.3 * x) + np.random.default_rng(0).normal(0.0, 1e-3, x.size)

    def f(ab: np.ndarray) -> np.ndarray:
        return np.exp(-ab[0] * x)

    free = gauss_newton(y, np.array([1.0]), f, max_iter=12, tol=0.0)
    settled = gauss_newton(y, np.array([1.0]), f, max_iter=12, tol=0.0, sse_rtol=1e-4)
    assert free[2] == 1 + 12 * 2 and settled[2] < 10
    assert settled[0][0] == pytest.approx(free[0][0], abs=1e-4)


def test_gauss_newton_with_sse_rtol_never_ends_on_a_step_that_raised_the_sum_of_squares():
    """A rippled objective misleads the finite differences: where no halving of a step lowers the sum of squares,
    the fit with ``sse_rtol`` stops at the point before it (it used to take the step and stop there, above its own
    start in 10 of these 60 starts)."""
    from spectra_cli.analysis.population import gauss_newton

    x = np.linspace(0.0, 1.0, 40)
    y = np.exp(-1.3 * x)

    def f(ab: np.ndarray) -> np.ndarray:
        return np.exp(-ab[0] * x) + 0.02 * np.sin(300.0 * ab[0]) * x

    def sse(v: np.ndarray) -> float:
        r = y - v
        return float(np.sum((r - r.mean()) ** 2))

    for a0 in 0.5 + 0.03 * np.arange(60):
        start = sse(f(np.array([a0])))
        _, f0, _, _ = gauss_newton(y, np.array([a0]), f, max_iter=12, sse_rtol=1e-4)
        assert sse(f0) <= start * (1 + 1e-9)
