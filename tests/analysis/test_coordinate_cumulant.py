"""Heavy-tailed coordinates told from row scales (spectra_cli.analysis.row_scales.coordinate_cumulant), the pass's
sums they are read from (spectra_cli.stream.states.ProjectionSums), and the population fit taking them."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest

from spectra_cli.analysis.row_scales import coordinate_cumulant
from spectra_cli.stream.states import ProjectionMoments, ProjectionSums


def _rows(n: int, d: int, law: str, rng: np.random.Generator, rotate: bool = True) -> np.ndarray:
    tau = np.arange(1, d + 1, dtype=np.float64) ** -1.0
    Z = rng.laplace(size=(n, d)) / math.sqrt(2.0) if law == "laplace" else rng.standard_normal((n, d))
    if law == "elliptical":
        Z *= np.sqrt(rng.gamma(1.0, 1.0, size=n))[:, None]
    X = Z * np.sqrt(tau)
    if rotate:
        q, r = np.linalg.qr(rng.standard_normal((d, d)))
        X = X @ (q * np.sign(np.diag(r))).T
    return X


def _sums(X: np.ndarray, k: int = 5, groups: int = 16, blocks: int = 1) -> ProjectionMoments:
    mean = X.mean(axis=0)
    _, V = np.linalg.eigh(np.cov(X, rowvar=False))
    state = ProjectionSums(V[:, ::-1][:, :k], mean, rows=len(X), groups=groups)
    for part in np.array_split(X, blocks):
        state.update(part, None)
    return state.result()


def _gate(got):
    from spectra_cli.analysis.population import CUMULANT_M2_MATERIAL, CUMULANT_M2_TOLERANCE, CUMULANT_SDS

    return got.beyond(CUMULANT_SDS, CUMULANT_M2_TOLERANCE, CUMULANT_M2_MATERIAL)


def _t2(d: int) -> float:
    tau = np.arange(1, d + 1, dtype=np.float64) ** -1.0
    return float(tau @ tau) / float(tau.sum()) ** 2


def test_the_sums_do_not_depend_on_the_blocks_and_fill_runs_of_consecutive_rows():
    X = _rows(203, 12, "gaussian", np.random.default_rng(0))
    one, many = _sums(X, k=3, groups=7), _sums(X, k=3, groups=7, blocks=9)
    for name in ("count", "p2", "p4", "h1", "h2"):
        np.testing.assert_allclose(getattr(one, name), getattr(many, name), rtol=1e-12)
    # run g holds rows g n / G .. (g + 1) n / G: 29 each, by position
    np.testing.assert_array_equal(one.count, np.bincount(np.arange(203) * 7 // 203))
    Xc = X - X.mean(axis=0)
    np.testing.assert_allclose(one.h1[0], float(np.sum(Xc[:29] ** 2)), rtol=1e-12)


@pytest.mark.parametrize("law, kappa, m2", [("gaussian", 0.0, 1.0), ("laplace", 3.0, 1.0),
                                            ("elliptical", 0.0, 2.0)])
def test_kappa_and_the_scales_second_moment_are_told_apart(law, kappa, m2):
    """Independent coordinates in the population's eigenbasis (rotated), n = 20 d: the joint reading recovers the
    law's kappa and m2 within three of its standard errors (and the errors are small enough to say which law)."""
    d = 64
    got = coordinate_cumulant(_sums(_rows(20 * d, d, law, np.random.default_rng(3)), groups=32), _t2(d))
    assert not isinstance(got, str)
    assert abs(got.kappa - kappa) < 3 * got.kappa_se + 0.3
    assert abs(got.m2 - m2) < 3 * got.m2_se + 0.05
    heavy, scaled, below = _gate(got)
    # (Gaussian coordinates read slightly platykurtic on the leading sample directions, fitted to the same rows: only
    # a kappa above 0 counts)
    assert heavy == (law == "laplace") and scaled == (law == "elliptical") and not below
    assert got.to_dict()["definition"].startswith("rows x = mu + sqrt(s)")


def test_the_jackknife_error_is_the_spread_of_the_estimate():
    """Its standard error against the spread of kappa over 60 samples of Laplace rows (d = 32, n = 1,000)."""
    d, kappas, ses = 32, [], []
    for seed in range(60):
        got = coordinate_cumulant(_sums(_rows(1000, d, "laplace", np.random.default_rng(100 + seed))), _t2(d))
        assert not isinstance(got, str)
        kappas.append(got.kappa)
        ses.append(got.kappa_se)
    assert 0.7 < float(np.mean(ses)) / float(np.std(kappas, ddof=1)) < 1.5


def test_what_cannot_be_read_is_said():
    import dataclasses

    X = _rows(100, 8, "gaussian", np.random.default_rng(1))
    assert coordinate_cumulant(_sums(X, groups=2, k=2), 0.2) == \
        "the rows fill 2 run(s) of the jackknife; it needs at least 3"
    sums = _sums(X, groups=4, k=2)
    assert "one direction carries most of the variance" in str(coordinate_cumulant(sums, 0.99))
    assert coordinate_cumulant(dataclasses.replace(sums, p2=0 * sums.p2), 0.2) == \
        "the rows do not vary along the leading directions"


def _population(X: np.ndarray, **kw):
    import spectra_cli as spectra

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return spectra.fit(X, window="5:25", population=True, **kw).fit.population


def test_heavy_tailed_coordinates_widen_the_analytic_interval_and_are_said(validate):
    """Laplace rows at n = 2 d: the coordinates' kurtosis is read from a second pass and taken (the row model one
    scale, the interval wider than the Gaussian theory's); Gaussian and elliptical rows keep theirs."""
    from spectra_cli.analysis.population import population_fit

    d = 128
    X = _rows(2 * d, d, "laplace", np.random.default_rng(8))
    pop = _population(X)
    rows = pop.scales
    assert pop.route == "analytic" and rows["kappa"] > 1.0 and rows["fourth_cumulant"]["groups"] == 32
    assert rows["model"].startswith("rows of independent coordinates")
    assert any("heavy-tailed coordinates, not row scales" in n for n in pop.notes)
    import spectra_cli as spectra

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        validate(spectra.fit(X, window="5:25", population=True).to_dict())
    lam = np.linalg.eigvalsh(np.cov(X, rowvar=False))[::-1]
    plain = population_fit(lam, n=2 * d - 1, window=(5, 25))
    assert pop.bootstrap_sd > 1.2 * plain.bootstrap_sd
    for law in ("gaussian", "elliptical"):
        other = _population(_rows(2 * d, d, law, np.random.default_rng(8)))
        assert other.scales["kappa"] == 0.0
        assert not any("heavy-tailed coordinates, not row scales" in n for n in other.notes)
    # the simulated route and the first-order one read nothing (no second pass)
    assert "fourth_cumulant" not in _population(X, population_route="simulate").scales
    assert "fourth_cumulant" not in _population(_rows(12 * d, d, "laplace", np.random.default_rng(8))).scales


def test_accumulated_moments_and_weighted_rows_say_why_the_coordinates_are_taken_as_gaussian():
    import spectra_cli as spectra

    X = _rows(256, 64, "laplace", np.random.default_rng(2))
    acc = spectra.Accumulator(64, groups=32)
    acc.update(X)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        pop = spectra.fit(acc, window="5:25", population=True).fit.population
        weighted = spectra.fit(X, weights=np.linspace(1.0, 2.0, 256), window="5:25", population=True).fit.population
    assert pop.scales["fourth_cumulant"] == {
        "kappa": None, "reason": "accumulated moments (an Accumulator or a moment file) keep no rows to read again: "
                                 "the coordinates are taken as Gaussian"}
    assert weighted.scales["fourth_cumulant"]["reason"].startswith("weighted rows: the weights enter the row model")


def test_the_terminal_says_the_interval_counts_heavy_tails():
    import io

    from rich.console import Console

    import spectra_cli as spectra
    from spectra_cli.render.table import print_report

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        doc = spectra.fit(_rows(256, 128, "laplace", np.random.default_rng(8)), window="5:25",
                          population=True).to_dict()
    out = io.StringIO()
    print_report(doc, Console(file=out, width=400))
    kappa = doc["fit"]["population"]["rows"]["kappa"]
    assert f"its interval counts the coordinates' heavy tails (excess kurtosis {kappa:.2f} ± " in out.getvalue()


def test_student_t_rows_are_row_scales_not_heavy_coordinates():
    """t rows (a Gaussian row over sqrt(chi2 / nu)) are pure row scales, E s^2 / (E s)^2 = 3 at nu = 5 and unbounded
    at nu = 3, whose jackknife error can be as large as m2 itself: they never count as one scale."""
    rng = np.random.default_rng(4)
    d = 100
    for nu in (3, 5):
        X = _rows(5 * d, d, "gaussian", rng) / np.sqrt(rng.chisquare(nu, size=5 * d) / nu)[:, None]
        got = coordinate_cumulant(_sums(X, groups=32), _t2(d))
        assert not isinstance(got, str) and _gate(got)[1]
        assert _population(X).scales["kappa"] == 0.0


@pytest.mark.parametrize("scale", [1e100, 1e-100, 1e150])
def test_the_reading_does_not_depend_on_the_data_units(scale):
    """Rows near 1e150 or 1e-150: their fourth powers would leave float64; the pass divides them by a typical norm
    first, and reads the same kappa with a report, not an overflow (to 1e-3: the row model's t2 comes from a
    histogram of the norms in octaves, whose bins a factor that is no power of two moves)."""
    X = _rows(256, 64, "laplace", np.random.default_rng(6))
    one = _population(X).scales["fourth_cumulant"]
    far = _population(X * scale).scales["fourth_cumulant"]
    for key in ("kappa", "kappa_se", "m2", "m2_se", "projections_kurtosis", "norms_cv2"):
        assert far[key] == pytest.approx(one[key], rel=1e-3)
    assert far["projections_kurtosis"] == pytest.approx(one["projections_kurtosis"], rel=1e-6)


def test_a_dask_array_says_its_rows_are_not_read_again():
    da = pytest.importorskip("dask.array")
    X = _rows(256, 64, "laplace", np.random.default_rng(2))
    pop = _population(da.from_array(X, chunks=(64, 64)))
    assert pop.scales["fourth_cumulant"]["reason"] == ("the input's rows are not read a second time here (a Dask "
                                                       "array): the coordinates are taken as Gaussian")


def test_scales_of_their_own_are_told_by_error_materiality_and_size():
    from spectra_cli.analysis.row_scales import CoordinateCumulant

    def reading(m2: float, m2_se: float, kappa: float = 1.0, kappa_se: float = 0.1) -> CoordinateCumulant:
        return CoordinateCumulant(kappa=kappa, kappa_se=kappa_se, m2=m2, m2_se=m2_se, projections_kurtosis=1.0,
                                  norms_cv2=0.1, t2=0.01, directions=5, groups=32, rows=1000)

    assert _gate(reading(1.007, 0.0026)) == (True, False, False)  # (significant, but immaterial)
    assert reading(1.007, 0.0026).beyond(2.0, 0.1, 0.0) == (True, True, False)
    assert _gate(reading(1.05, 0.01)) == (True, True, False)
    assert _gate(reading(1.05, 0.04)) == (True, False, False)  # (within its error)
    assert _gate(reading(16.6, 8.9)) == (True, True, False)  # (Student-t rows: above 1.1 whatever its error)
    assert _gate(reading(0.85, 0.06)) == (True, False, True)  # (below 1: no scales make it; the model fails)
    assert _gate(reading(0.95, 0.06)) == (True, False, False)
    assert _gate(reading(1.0, 0.01, kappa=-0.5))[0] is False  # (lighter tails: never heavy)


def test_the_leading_subspace_is_lapacks():
    """Subspace iteration's 5 leading directions against LAPACK's subset, on a power-law spectrum and a flat one."""
    import scipy.linalg

    from spectra_cli.eigen.decomposition import leading_subspace

    rng = np.random.default_rng(1)
    for a, floor in ((1.0, 1 - 1e-6), (0.3, 0.99)):
        d = 512
        X = rng.standard_normal((2 * d, d)) * np.arange(1, d + 1) ** (-a / 2)
        C = X.T @ X / (2 * d)
        _, E = scipy.linalg.eigh(C, subset_by_index=[d - 5, d - 1])
        cos = np.abs(np.sum(leading_subspace(C, 5) * E[:, ::-1], axis=0))
        assert np.all(cos > floor)


def test_uncentred_fits_and_the_other_routes_say_what_the_interval_took():
    """Every population report says the cumulant its interval took (`rows.kappa`); an uncentred fit says why it read
    none; the rows kept at n < d are read without a pass."""
    X = _rows(256, 64, "laplace", np.random.default_rng(9)) + 5.0
    uncentred = _population(X, centered=False)
    assert uncentred.scales["kappa"] == 0.0
    assert uncentred.scales["fourth_cumulant"]["reason"].startswith("an uncentred fit")
    assert _population(X, population_route="simulate").scales["kappa"] == 0.0
    assert _population(_rows(12 * 64, 64, "laplace", np.random.default_rng(9))).scales["kappa"] == 0.0
    wide = _population(_rows(96, 160, "laplace", np.random.default_rng(9)))
    assert wide.scales["fourth_cumulant"]["groups"] == 32 and wide.scales["fourth_cumulant"]["rows"] == 96


def test_the_reading_is_plain_numpy_written_differently():
    """kappa, m2 and their jackknife errors against the same method of moments computed from the rows themselves:
    the projections' excess kurtosis per direction averaged, the norms' squared coefficient of variation, the two
    equations solved as a 2 x 2 linear system in (m2, m2 kappa), and each run of rows deleted from the matrix."""
    X = _rows(300, 40, "laplace", np.random.default_rng(12))
    G, k, t2 = 10, 5, 0.05
    Xc = X - X.mean(axis=0)
    V = np.linalg.eigh(np.cov(X, rowvar=False))[1][:, ::-1][:, :k]

    def solve(rows: np.ndarray) -> tuple[float, float]:
        P = rows @ V
        kurt = float(np.mean(np.mean(P ** 4, axis=0) / np.mean(P ** 2, axis=0) ** 2))
        h = np.sum(rows ** 2, axis=1)
        ratio = float(np.mean(h ** 2) / np.mean(h) ** 2)
        # unknowns a = m2, b = m2 kappa: kurt = 3 a + b; ratio = a (1 + 2 t2) + b t2
        a, b = np.linalg.solve([[3.0, 1.0], [1.0 + 2.0 * t2, t2]], [kurt, ratio])
        return b / a, a

    label = np.arange(len(X)) * G // len(X)
    parts = np.array([solve(Xc[label != g]) for g in range(G)])
    se = np.sqrt((G - 1) * np.mean((parts - parts.mean(axis=0)) ** 2, axis=0))
    state = ProjectionSums(V, X.mean(axis=0), rows=len(X), groups=G)
    state.update(X, None)
    got = coordinate_cumulant(state.result(), t2)
    assert not isinstance(got, str)
    kappa, m2 = solve(Xc)
    assert got.kappa == pytest.approx(kappa, rel=1e-10) and got.m2 == pytest.approx(m2, rel=1e-10)
    assert got.kappa_se == pytest.approx(se[0], rel=1e-9) and got.m2_se == pytest.approx(se[1], rel=1e-9)


def test_a_library_call_without_row_scales_reads_t2_from_the_spectrum():
    """`population_fit` given the pass's sums but no histogram of norms (a library caller): t2 comes from the
    spectrum and the sums' own norms, and Laplace rows still take their kurtosis."""
    from spectra_cli.analysis.population import population_fit

    X = _rows(512, 128, "laplace", np.random.default_rng(13))
    lam = np.linalg.eigvalsh(np.cov(X, rowvar=False))[::-1]
    pop = population_fit(lam, n=511, window=(5, 25), projections=_sums(X, groups=32))
    assert pop.scales["fourth_cumulant"]["t2"] > 0 and pop.scales["kappa"] > 1.0
