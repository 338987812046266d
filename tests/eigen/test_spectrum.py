"""Spectrum: eigenvalues against numpy, explained variance, floors, the Gram route."""

from __future__ import annotations

import numpy as np
import pytest

from spectra_cli.eigen.decomposition import spectrum_from_moments, spectrum_from_rows
from spectra_cli.run import matrix as api
from spectra_cli.stream.moments import Moments
from tests.conftest import powerlaw_matrix, reference_eigenvalues


def test_eigenvalues_match_numpy_cov_descending():
    X = powerlaw_matrix(800, 20, 1.0, seed=0, offset=5.0)
    spec = spectrum_from_moments(Moments.from_block(X))
    ref = np.sort(np.linalg.eigvals(np.cov(X, rowvar=False)).real)[::-1]
    np.testing.assert_allclose(spec.eigenvalues, ref, rtol=1e-10)
    assert spec.eigenvalues[0] >= spec.eigenvalues[-1]


def test_explained_variance_and_k_thresholds_on_a_known_spectrum():
    # Eigenvalues 4, 3, 2, 1 (total 10): cumulative 0.4, 0.7, 0.9, 1.0.
    d = 4
    rng = np.random.default_rng(0)
    Q, _ = np.linalg.qr(rng.standard_normal((d, d)))
    Z = rng.standard_normal((4000, d))
    Z = (Z - Z.mean(0)) @ np.linalg.inv(np.linalg.cholesky(np.cov(Z, rowvar=False))).T  # exactly white
    X = (Z * np.sqrt([4.0, 3.0, 2.0, 1.0])) @ Q.T
    spec = spectrum_from_moments(Moments.from_block(X))
    np.testing.assert_allclose(spec.eigenvalues, [4, 3, 2, 1], rtol=1e-10)
    np.testing.assert_allclose(spec.explained_variance_ratio(), [0.4, 0.3, 0.2, 0.1], rtol=1e-10)
    assert (spec.k_for(0.9), spec.k_for(0.95), spec.k_for(0.99)) == (3, 4, 4)
    assert spec.k_for(0.7) == 2


def test_exact_null_direction_is_counted_not_logged():
    # Rows sum to zero (as after LayerNorm's mean removal): one exactly null direction.
    rng = np.random.default_rng(1)
    X = rng.standard_normal((3000, 32))
    X -= X.mean(axis=1, keepdims=True)
    rep = api.fit(X)
    assert rep.spectrum.numerical_rank == 31
    assert rep.spectrum.usable_rank == 31
    doc = rep.to_dict()
    assert any("at or below the numerical floor" in w for w in doc["warnings"])
    assert all(np.isfinite(v) for v in (rep.fit.alpha, rep.rank.participation_ratio, rep.rank.entropy_rank))


def test_floor_scales_with_lambda1_d_and_eps():
    X = powerlaw_matrix(500, 16, 1.0, seed=2)
    spec = spectrum_from_moments(Moments.from_block(X))
    # one block of 500 rows: (d + sqrt(b)) * eps * lambda_1
    assert spec.numerical_floor == pytest.approx((16 + np.sqrt(500)) * np.finfo(float).eps * spec.eigenvalues[0])


@pytest.mark.parametrize("centered", [True, False])
@pytest.mark.parametrize("weighted", [False, True])
def test_gram_route_equals_the_d_by_d_route(centered, weighted):
    rng = np.random.default_rng(3)
    X = rng.standard_normal((30, 80)) + 2.0
    w = rng.random(30) if weighted else None
    gram = spectrum_from_rows(X, w, centered=centered)
    full = spectrum_from_moments(Moments.from_block(X, w), centered=centered)
    k = gram.eigenvalues.size
    assert k == 30 and gram.structural_zeros == 50
    np.testing.assert_allclose(gram.eigenvalues, full.eigenvalues[:k], rtol=1e-9, atol=1e-12 * full.eigenvalues[0])
    assert gram.sampling_rank == (29 if centered else 30)


def test_api_takes_the_gram_route_when_n_below_d():
    rng = np.random.default_rng(4)
    X = rng.standard_normal((50, 200))
    rep = api.spectrum(X)
    assert rep.spectrum.method.startswith("eigvalsh of the n x n Gram")
    np.testing.assert_allclose(rep.spectrum.eigenvalues[:49], reference_eigenvalues(X)[:49], rtol=1e-9)
    assert rep.spectrum.numerical_rank == 49
    assert any("structural zeros" in w for w in rep.warnings)


def test_sampling_facts_are_reported():
    X = powerlaw_matrix(100, 40, 1.0)
    spec = api.spectrum(X).spectrum
    assert spec.n_over_d == pytest.approx(2.5)
    assert spec.sampling_rank == 40
    doc = api.spectrum(X).to_dict()
    assert ("n/d = 2.5 < 10: tail eigenvalues of the sample covariance are biased by finite sampling (the leading "
            "ranks least). Use more rows, or estimate the population exponent with fit's population=True"
            ) in doc["warnings"]


def test_constant_column_gives_a_clean_report_with_a_warning():
    X = powerlaw_matrix(500, 10, 1.0)
    X[:, 3] = 7.0
    rep = api.fit(X)
    assert rep.spectrum.numerical_rank == 9
    assert any("1 constant column" in w for w in rep.warnings)
    assert rep.to_dict()["rank"]["participation_ratio"] > 1


def test_suspect_findings_are_also_spectra_warnings():
    from spectra_cli.errors import SpectraWarning

    X = powerlaw_matrix(500, 10, 1.0)
    X[:, 2] = 1.0
    with pytest.warns(SpectraWarning, match="1 constant column"):
        rep = api.fit(X)
    assert any("constant column" in w for w in rep.warnings)


def test_a_matrix_of_identical_rows_is_not_called_corrupt_moments():
    """Every row the mean: the centred moments are rounding alone, a little below zero (eps^2 |mean|^2 an entry),
    which is no sign of a forged moment file."""
    x = np.random.default_rng(0).standard_normal(16) * 4.0
    rep = api.fit(np.tile(x, (2000, 1)))
    assert rep.spectrum.eigenvalues[0] < 1e-25


@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("centered", [True, False])
def test_float32_gram_rows_are_prepared_in_pieces_as_the_float64_ones_rounded(monkeypatch, weighted, centered):
    # The float32 Gram route prepares its rows a few at a time (no float64 copy of them all): across the pieces'
    # edges, the same rows as preparing them all in float64 and rounding, within one float32 ulp (the mean is summed
    # in another order), on a non-contiguous input
    from spectra_cli.eigen import decomposition as dec

    rng = np.random.default_rng(9)
    X = (rng.standard_normal((37, 90)) * 3 + 5).astype(np.float32)[:, ::2]  # (a strided view: 37 x 45)
    w = rng.random(37) if weighted else None
    ref, s64 = dec._prepared_rows(X, w, centered=centered)
    monkeypatch.setattr(dec, "PREPARED_CHUNK", 45 * 4)  # (4 rows a piece: 10 pieces, the last of 1 row)
    got, s32 = dec._prepared_rows(X, w, centered=centered, dtype=np.float32)
    assert got.dtype == np.float32 and got.shape == ref.shape and s32 == s64
    ulp = np.spacing(np.abs(ref).astype(np.float32))
    assert np.all(np.abs(got.astype(np.float64) - ref.astype(np.float32)) <= ulp)
