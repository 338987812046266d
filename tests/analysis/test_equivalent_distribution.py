"""The expected spectrum's distribution function, exact at each grid point (issue 33, sixth round): against the
Marchenko-Pastur law's integral, the exact separation of a two-atom population, the density it is the integral of,
and the grid it no longer depends on."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.integrate import quad

from spectra_cli.analysis.equivalent import (
    expected_eigenvalues,
    sample_density,
    sample_distribution,
    slope_of,
)


def _mp_cdf(x: float, c: float) -> float:
    """The Marchenko-Pastur law's distribution function (population all ones), zeros included, by quadrature of its
    density (an independent computation: scipy's adaptive quadrature of the closed form)."""
    lo, hi = (1 - math.sqrt(c)) ** 2, (1 + math.sqrt(c)) ** 2
    zeros = max(0.0, 1.0 - 1.0 / c)
    if x <= lo:
        return zeros
    top = min(x, hi)
    mass = quad(lambda t: math.sqrt(max((hi - t) * (t - lo), 0.0)) / (2 * math.pi * c * t), lo, top, limit=200)[0]
    return zeros + mass


@pytest.mark.parametrize("c", [0.25, 2.0])
def test_the_distribution_function_is_marchenko_pasturs(c):
    x = np.array([0.05, 0.2, 0.5, 1.0, 1.5, 2.5, 4.0, 6.0])
    F, _ = sample_distribution(np.array([1.0]), np.array([1.0]), None, c, x)
    want = np.array([_mp_cdf(v, c) for v in x])
    # (the last step of the solver's path is 1e-5 off the real axis: a Lorentzian leak of about that size)
    np.testing.assert_allclose(F, want, atol=2e-4)


def test_in_a_gap_the_count_is_the_atoms_above_exactly():
    # two atoms a decade apart at c = 0.05: two separated clusters, the gap between them holds exactly half the mass
    tau, pi = np.array([1.0, 10.0]), np.array([0.5, 0.5])
    x = np.array([0.2, 3.0, 30.0])  # below both, between them, above both
    F, _ = sample_distribution(tau, pi, None, 0.05, x)
    np.testing.assert_allclose(F, [0.0, 0.5, 1.0], atol=1e-4)


def test_the_distribution_is_the_integral_of_the_density():
    w = np.array([0.5, 1.0, 2.5])
    p = np.array([0.3, 0.5, 0.2])
    scales = (w / (p @ w), p)
    tau = np.arange(1, 41, dtype=np.float64) ** -1.0
    pi = np.full(tau.size, 1 / tau.size)
    x = np.geomspace(1e-3, 3.0, 20001)
    F, _ = sample_distribution(tau, pi, scales, 0.3, x)
    f, _ = sample_density(tau, pi, scales, 0.3, x)
    integral = np.concatenate([[0.0], np.cumsum((f[1:] + f[:-1]) * 0.5 * np.diff(x))])
    # (F's value at the grid's bottom is the mass below it, which the density's integral does not see)
    np.testing.assert_allclose(F - F[0], integral, atol=1e-4)
    assert np.all(np.diff(F) > -1e-9)


@pytest.mark.parametrize("c", [1.5, 3.0])
def test_the_distribution_stays_a_distribution_with_more_features_than_rows(c):
    # (Newton leaves some solutions a rounding below the real axis below the support: their arguments must not change
    # branch, which put F at up to 2 there before they were kept on their side)
    tau = np.arange(1, 401, dtype=np.float64) ** -1.0
    pi = np.full(tau.size, 1 / tau.size)
    x = np.geomspace(1e-7, 100.0, 6001)
    F, _ = sample_distribution(tau, pi, None, c, x)
    assert np.all(F <= 1.0 + 1e-6) and np.all(F >= -1e-6)
    assert np.all(np.diff(F) > -1e-5)
    np.testing.assert_allclose(F[0], 1.0 - 1.0 / c, atol=1e-4)  # below the support: the zeros' mass alone


def test_with_row_scales_and_more_features_than_rows_the_distribution_is_bounded():
    # (below the support the equation with row scales has more than one real root, and Newton may take another: F is
    # then off there, though kept within [0, 1] and made non-increasing in N by expected_eigenvalues, whose matched
    # ranks lie above it; a known limit, bench/README)
    scales = (np.array([0.5, 1.0, 2.5]) / 1.15, np.array([0.3, 0.5, 0.2]))
    tau = np.arange(1, 401, dtype=np.float64) ** -1.0
    pi = np.full(tau.size, 1 / tau.size)
    F, _ = sample_distribution(tau, pi, scales, 1.5, np.geomspace(1e-7, 100.0, 6001))
    assert np.all(F <= 1.0 + 1e-6) and np.all(F >= -1e-6)


def test_the_expected_slope_no_longer_depends_on_the_grid_at_many_rows():
    # d = 1,024, n = 51,200: the top eigenvalues' clusters (~2 / sqrt(n) wide in log) fall between a coarse grid's
    # points; the density's quadrature moved this slope by 0.008 between 500 and 4,000 points a decade
    d, n = 1024, 51200
    tau = np.arange(1, d + 1, dtype=np.float64) ** -1.0
    slopes = [slope_of(np.log(expected_eigenvalues(tau, d / n, 200, points_per_decade=ppd)[10:102]), 11)
              for ppd in (300, 1000, 4000)]
    assert max(slopes) - min(slopes) < 5e-5
    # and near the sampling's own bias (8 simulated samples of this shape: -0.0010 +- 0.0003; the limit here: -0.0016)
    assert -0.003 < slopes[0] - 1.0 < 0.0


@pytest.mark.parametrize("scales", [None, (np.array([0.3, 1.0, 2.2]), np.array([0.25, 0.5, 0.25]))])
@pytest.mark.parametrize("step", [0.01, 0.3, -0.6])
@pytest.mark.parametrize("from_rank", [1, 11])
def test_a_grid_after_its_first_evaluation_covers_the_ranks_asked_for_with_the_same_numbers(scales, step, from_rank):
    """An evaluation on a Grid that has seen one starts its grid a margin below where the last one's ranks ended
    and, reading from rank 11, ends it a margin above where the count passed 10 (the top point kept): the same
    values of the ranks read as the whole grid's (the counts above each point do not depend on the points below,
    and the points left out at the top move every sum above by one constant), on fewer points; the ranks above
    from_rank are NaN. A population that moved the ranks' ends past a margin (a step of 0.6 in the exponent) is
    evaluated again on the whole grid, with the same numbers too."""
    from spectra_cli.analysis.equivalent import Grid

    d, c, ranks = 300, 0.1, 270
    j = np.arange(1, d + 1, dtype=np.float64)
    grid = Grid()
    expected_eigenvalues(j ** -1.0, c, ranks, scales=scales, grid=grid, from_rank=from_rank)
    whole = grid.points
    assert grid.floor is not None and (grid.ceiling is None) == (from_rank == 1)
    tau = j ** -(1.0 + step)
    trimmed = expected_eigenvalues(tau, c, ranks, scales=scales, grid=grid, from_rank=from_rank)
    fresh_grid = Grid(groups=grid.groups)  # (the same atoms: a Grid keeps its first population's merging)
    fresh = expected_eigenvalues(tau, c, ranks, scales=scales, grid=fresh_grid)
    read = slice(from_rank - 1, None)
    np.testing.assert_allclose(trimmed[read], fresh[read], rtol=1e-11)
    assert np.all(np.isnan(trimmed[:from_rank - 1]))
    assert grid.points < fresh_grid.points
    if abs(step) < 0.1:
        assert grid.points < (0.9 if from_rank == 1 else 0.7) * whole


@pytest.mark.parametrize("from_rank", [1, 11])
def test_a_cut_grid_that_misses_the_ranks_is_evaluated_again_whole(monkeypatch, from_rank):
    """The same grid at ten times the ratio d / n: the lower ranks fall far below the last evaluation's, the cut grid
    misses them, and the evaluation is made again on the whole grid, with the whole grid's numbers."""
    from spectra_cli.analysis import equivalent
    from spectra_cli.analysis.equivalent import Grid

    sizes: list[int] = []
    solve = equivalent.sample_distribution
    monkeypatch.setattr(equivalent, "sample_distribution", lambda *a, **k: sizes.append(a[4].size) or solve(*a, **k))
    tau = np.arange(1, 301, dtype=np.float64) ** -1.0
    grid = Grid()
    expected_eigenvalues(tau, 0.05, 250, grid=grid, from_rank=from_rank)
    sizes.clear()
    again = expected_eigenvalues(tau, 0.5, 250, grid=grid, from_rank=from_rank)
    assert len(sizes) == 2 and sizes[0] < sizes[1]  # (cut, then whole)
    whole = expected_eigenvalues(tau, 0.5, 250, grid=Grid(groups=grid.groups))
    np.testing.assert_allclose(again[from_rank - 1:], whole[from_rank - 1:], rtol=1e-11)


def test_a_cut_grid_reads_ranks_far_below_the_top_without_the_left_out_sums_rounding():
    """Ranks read eight decades below the top (a steep power law, from rank 243 of 538): the sums of the eigenvalues
    above each point leave out the cut cell (~ x_top * 242 / 2, which the differences lost 1.6e-7 of their value to
    in rounding); the values agree with the whole grid's to its own rounding."""
    from spectra_cli.analysis.equivalent import Grid

    d, c, ranks = 538, 0.5, 300
    j = np.arange(1, d + 1, dtype=np.float64)
    grid = Grid()
    expected_eigenvalues(j ** -2.466, c, ranks, grid=grid, from_rank=243)
    cut = expected_eigenvalues(j ** -2.476, c, ranks, grid=grid, from_rank=243)
    whole = expected_eigenvalues(j ** -2.476, c, ranks, grid=Grid(groups=grid.groups))
    assert whole[242] / whole[0] < 1e-5
    np.testing.assert_allclose(cut[242:], whole[242:], rtol=5e-9)


def test_points_the_continuation_leaves_off_the_root_are_marched_to_from_their_neighbours():
    """Two population levels, four row scales and c = 2.8: the continuation from far off the axis left a run of points
    off the root (a residual of 0.3), whose counts jumped, so that ranks 80..141 all read 0.3674 (up to 9x the
    simulated samples' mean). Marched to from their converged neighbours, the count falls with x everywhere and
    the ranks are the simulated samples' mean within 3 % (200 samples of 158 rows)."""
    tau = 26.752 * np.r_[np.full(90, 0.30928), np.full(353, 0.0056972)]
    w = np.array([0.18513, 0.15792, 0.19687, 1.39426])
    p = np.array([0.042566, 0.759379, 0.111414, 0.086642])
    p = p / p.sum()
    d, n = tau.size, 158
    expected = expected_eigenvalues(tau, d / n, 141, scales=(w, p))
    assert np.all(np.diff(expected) <= 1e-12 * expected[0])
    rng = np.random.default_rng(0)
    mean = np.zeros(141)
    for _ in range(200):
        Z = rng.standard_normal((n, d)) * np.sqrt(tau) * np.sqrt(rng.choice(w, size=n, p=p))[:, None]
        mean += np.sort(np.linalg.eigvalsh(Z @ Z.T / n))[::-1][:141] / 200
    np.testing.assert_allclose(expected[79:], mean[79:], rtol=0.03)


def test_points_lost_below_the_bulk_are_found_by_the_continuation_from_further_off_the_axis():
    """A third of the rows at 3 % of the others' scale, n = 207 rows of 265 features: the continuation from 1 ended
    in another basin below the main bulk, and the expected spectrum was zero from rank 144; from 100 times further
    off the axis (those points only) it follows the branch: every rank positive, and the simulated samples' mean
    within 8 % away from the gap between the two bulks (150 samples of 207 rows)."""
    tau = np.arange(1, 266, dtype=np.float64) ** -1.12
    w, p = np.array([0.0277, 1.797, 0.3006]), np.array([0.3105, 0.5241, 0.1654])
    p = p / p.sum()
    d, n = tau.size, 207
    expected = expected_eigenvalues(tau, d / n, 180, scales=(w, p))
    assert np.all(expected > 0)
    rng = np.random.default_rng(0)
    mean = np.zeros(180)
    for _ in range(150):
        Z = rng.standard_normal((n, d)) * np.sqrt(tau) * np.sqrt(rng.choice(w, size=n, p=p))[:, None]
        mean += np.sort(np.linalg.eigvalsh(Z @ Z.T / n))[::-1][:180] / 150
    for ranks in (slice(99, 130), slice(159, 180)):
        np.testing.assert_allclose(expected[ranks], mean[ranks], rtol=0.08)
