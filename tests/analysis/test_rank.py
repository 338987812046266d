"""Effective ranks against closed forms and independent numpy."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from spectra_cli.analysis.rank import entropy_rank, participation_ratio, rankme, stable_rank
from spectra_cli.run import matrix as api


def test_flat_spectrum_has_every_rank_equal_to_d():
    lam = np.ones(17)
    assert participation_ratio(lam) == pytest.approx(17)
    assert entropy_rank(lam) == pytest.approx(17)
    assert stable_rank(lam) == pytest.approx(17)


def test_rank_one_spectrum():
    lam = np.array([5.0, 0, 0, 0])
    assert participation_ratio(lam) == 1 and entropy_rank(lam) == 1 and stable_rank(lam) == 1


def test_known_two_level_spectrum():
    lam = np.array([3.0, 1.0])
    assert participation_ratio(lam) == pytest.approx(16 / 10)
    q = np.array([0.75, 0.25])
    assert entropy_rank(lam) == pytest.approx(np.exp(-(q * np.log(q)).sum()))
    assert stable_rank(lam) == pytest.approx(4 / 3)


def test_rankme_matches_singular_values_of_the_uncentred_matrix():
    rng = np.random.default_rng(0)
    X = rng.standard_normal((300, 12)) * np.linspace(3, 0.1, 12) + 1.0
    s = np.linalg.svd(X, compute_uv=False)
    p = s / s.sum() + 1e-7
    ref = np.exp(-(p * np.log(p)).sum())
    rep = api.fit(X)
    assert rep.rank.rankme == pytest.approx(ref, rel=1e-9)
    assert rankme(s**2, 0.0) == pytest.approx(ref, rel=1e-12)


@settings(max_examples=50, deadline=None)
@given(st.lists(st.floats(1e-6, 1e6), min_size=1, max_size=50))
def test_effective_ranks_lie_in_1_to_d(values):
    lam = np.sort(np.array(values))[::-1]
    d = lam.size
    for r in (participation_ratio(lam), entropy_rank(lam), stable_rank(lam)):
        assert 1 - 1e-9 <= r <= d + 1e-9


def test_participation_ratio_is_at_most_entropy_rank_for_a_power_law():
    lam = np.arange(1, 200, dtype=float) ** -1.0
    assert participation_ratio(lam) <= entropy_rank(lam)


def test_entropy_rank_of_eigenvalues_spanning_more_than_float64_is_that_of_the_resolved_ones():
    """An eigenvalue below 1e-308 of the total underflows to a share of 0 (0 log 0 would be NaN): it adds nothing,
    as its share is below any float64 could show."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert entropy_rank(np.array([1e300, 1e-300])) == 1.0
        assert entropy_rank(np.array([1e300, 1e300, 1e-300])) == pytest.approx(2.0, rel=1e-15)
        # a sum past float64's range: the same shares, from the eigenvalues over their largest
        assert entropy_rank(np.array([1e308, 1e308])) == pytest.approx(2.0, rel=1e-15)
        assert entropy_rank(np.array([1e308, 1e308, 1e308, 1.0])) == pytest.approx(3.0, rel=1e-15)
        # an infinite or NaN eigenvalue has no shares: NaN, never a confident 1
        assert np.isnan(entropy_rank(np.array([np.inf, 1.0]))) and np.isnan(entropy_rank(np.array([np.nan, 1.0])))
