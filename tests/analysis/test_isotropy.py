"""Isotropy against published reference numbers (arrays rebuilt from the constructions that printed them)
and brute force."""

from __future__ import annotations

import math

import numpy as np
import pytest
from numpy.linalg import eigh, norm

from spectra_cli.run import matrix as api

D, N = 50, 2000


# --- the reference constructions, verbatim in substance -------------------------------------------
def make_isotropic(n, d, rng):
    return rng.standard_normal((n, d))


def make_cone(n, d, rng, strength=4.0, residual=0.10):
    res = residual * rng.standard_normal((n, d))
    u = rng.standard_normal(d)
    u /= norm(u)
    coeff = strength * (0.15 + 0.85 * rng.random((n, 1)))
    return res + coeff * u


def all_but_the_top(X, k=2):
    Xc = X - X.mean(axis=0)
    _, V = eigh(Xc.T @ Xc)
    top = V[:, ::-1][:, :k]
    return Xc - (Xc @ top) @ top.T


def frequency_collapsed():
    rng4 = np.random.default_rng(4)
    V = 1200
    ranks = np.arange(1, V + 1)
    freq = 1.0 / ranks
    freq /= freq.sum()
    emb = rng4.standard_normal((V, D))
    pull = (freq / freq.max()) ** 0.5
    return emb * (1.0 - 0.9 * pull[:, None])


@pytest.fixture(scope="module")
def clouds():
    rng = np.random.default_rng(0)
    iso = make_isotropic(N, D, rng)
    cone = make_cone(N, D, rng)
    return iso, cone


def test_seed003_isotropic_cloud(clouds):
    rep = api.isotropy(clouds[0], block_rows=300)
    assert round(rep.isotropy.partition_isotropy, 3) == 0.690
    assert round(api.fit(clouds[0]).rank.participation_ratio, 1) == 48.8


def test_seed003_narrow_cone(clouds):
    rep = api.isotropy(clouds[1])
    assert round(rep.isotropy.partition_isotropy, 3) == 0.000
    assert round(api.fit(clouds[1]).rank.participation_ratio, 1) == 2.3
    assert rep.isotropy.partition_isotropy_symmetric <= rep.isotropy.partition_isotropy


def test_seed003_all_but_the_top(clouds, tmp_path):
    assert round(api.isotropy(all_but_the_top(clouds[1], k=2)).isotropy.partition_isotropy, 3) == 0.510
    # and through spectra's own all-but-the-top
    from spectra_cli.run.whiten import whiten

    np.save(tmp_path / "cone.npy", clouds[1])
    rep = whiten(str(tmp_path / "cone.npy"), out=str(tmp_path / "abtt.npy"), method="abtt", k=2,
                 partition_isotropy=True)
    assert round(rep.whitening.isotropy_after.partition_isotropy, 3) == 0.510
    assert round(api.isotropy(str(tmp_path / "abtt.npy")).isotropy.partition_isotropy, 3) == 0.510


def test_seed003_frequency_collapse():
    assert round(api.isotropy(frequency_collapsed()).isotropy.partition_isotropy, 3) == 0.644


def test_seed003_partition_isotropy_equals_the_notebook_function(clouds):
    def partition_isotropy(X):  # the reference function
        Xs = X / X.std()
        _, V = eigh(Xs.T @ Xs)
        Z = np.exp(Xs @ V).sum(axis=0)
        return float(Z.min() / Z.max())

    for X in (*clouds, frequency_collapsed()):
        assert api.isotropy(X, block_rows=333).isotropy.partition_isotropy == pytest.approx(
            partition_isotropy(X), rel=1e-9)


def test_exact_mean_cosine_equals_brute_force(clouds):
    cone = clouds[1][:700].copy()
    cone[5] = 0.0  # a zero row: counted and excluded
    rep = api.isotropy(cone, block_rows=128)
    keep = norm(cone, axis=1) > 0
    U = cone[keep] / norm(cone[keep], axis=1)[:, None]
    G = U @ U.T
    n = len(U)
    brute = (G.sum() - np.trace(G)) / (n * (n - 1))
    assert rep.isotropy.mean_cosine == pytest.approx(brute, rel=1e-12)
    assert rep.isotropy.zero_rows == 1


def test_weighted_mean_cosine_is_the_pair_weighted_mean():
    rng = np.random.default_rng(1)
    X = rng.standard_normal((60, 5)) + 1.0
    w = rng.random(60)
    U = X / norm(X, axis=1)[:, None]
    G = U @ U.T
    W = np.outer(w, w)
    np.fill_diagonal(W, 0.0)
    ref = (W * G).sum() / W.sum()
    assert api.isotropy(X, weights=w).isotropy.mean_cosine == pytest.approx(ref, rel=1e-12)


def test_large_norms_stay_finite_and_match_a_log_space_reference():
    rng = np.random.default_rng(2)
    X = rng.standard_normal((3000, 30)) * 40 + 1000.0  # norms ~ 5e3: exp(x) overflows float64
    for scale in ("seed", "none"):
        reps = [api.isotropy(X, scale=scale, block_rows=b).isotropy for b in (3000, 257, 64)]
        Xs = X / (X.std() if scale == "seed" else 1.0)
        _, V = eigh(Xs.T @ Xs)
        S = Xs @ V
        top = S.max(axis=0)
        logz = top + np.log(np.exp(S - top).sum(axis=0))
        ref = np.exp(logz.min() - logz.max())
        for r in reps:
            assert np.isfinite(r.log_z_max) and np.isfinite(r.partition_isotropy)
            assert r.partition_isotropy == pytest.approx(ref, rel=1e-9, abs=1e-300)
        assert reps[0].partition_isotropy == pytest.approx(reps[2].partition_isotropy, rel=1e-9, abs=1e-300)


def test_isotropy_is_unchanged_by_scaling():
    rng = np.random.default_rng(3)
    X = make_cone(800, 10, rng)
    a = api.isotropy(X).isotropy
    b = api.isotropy(X * 1e-3).isotropy
    for key in ("partition_isotropy", "mean_cosine", "top_pc_share", "mean_norm_ratio"):
        assert getattr(a, key) == pytest.approx(getattr(b, key), rel=1e-9)


def test_top_pc_share_norm_ratio_and_isoscore_closed_forms():
    rng = np.random.default_rng(4)
    X = rng.standard_normal((5000, 8)) * np.array([3, 1, 1, 1, 1, 1, 1, 1.0]) + 2.0
    rep = api.isotropy(X, isoscore=True)
    lam = np.linalg.eigvalsh(np.cov(X, rowvar=False))[::-1]
    assert rep.isotropy.top_pc_share == pytest.approx(lam[0] / lam.sum(), rel=1e-10)
    assert rep.isotropy.mean_norm_ratio == pytest.approx(norm(X.mean(0)) / norm(X, axis=1).mean(), rel=1e-10)
    # IsoScore of an exactly isotropic spectrum is 1, of a rank-one spectrum 0.
    from spectra_cli.analysis.isotropy import isoscore

    assert isoscore(np.ones(10), 10) == pytest.approx(1.0)
    assert isoscore(np.r_[1.0, np.zeros(9)], 10) == pytest.approx(0.0, abs=1e-12)
    # and Rudman et al.'s steps written out
    s = lam * np.sqrt(8) / norm(lam)
    delta = norm(s - 1) / np.sqrt(2 * (8 - np.sqrt(8)))
    ref = ((8 - delta**2 * (8 - np.sqrt(8))) ** 2 - 8) / (8 * 7)
    assert rep.isotropy.isoscore == pytest.approx(ref, rel=1e-10)








def test_temperature_sharpens_the_softmax():
    rng = np.random.default_rng(5)
    E = rng.standard_normal((200, 6))
    z = rng.standard_normal(200)
    for T in (0.5, 2.0):
        p = np.exp(z / T - np.logaddexp.reduce(z / T))
        ref = np.linalg.eigvalsh(E.T @ (np.diag(p) - np.outer(p, p)) @ E)[::-1]
        import tempfile

        with tempfile.TemporaryDirectory() as d:
            np.save(f"{d}/z.npy", z)
            np.save(f"{d}/E.npy", E)
            got = api.spectrum(f"{d}/E.npy", logits=f"{d}/z.npy", temperature=T).spectrum.eigenvalues
        np.testing.assert_allclose(got, ref, rtol=1e-10)






def test_zero_weights_count_for_nothing_in_partition_isotropy():
    import warnings

    rng = np.random.default_rng(7)
    X = rng.standard_normal((400, 6)) + 1.0
    w = rng.integers(0, 3, 400).astype(float)  # many zeros, like unigram counts
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        a = api.isotropy(X, weights=w, block_rows=64).isotropy
    b = api.isotropy(X[w > 0], weights=w[w > 0]).isotropy
    assert a.partition_isotropy == pytest.approx(b.partition_isotropy, rel=1e-10)
    assert a.mean_cosine == pytest.approx(b.mean_cosine, rel=1e-10)


@pytest.mark.parametrize("shape", [(40, 12), (12, 40)])  # n > d, and n < d (d - n directions with c^T x = 0)
def test_symmetric_partition_isotropy_matches_plain_numpy(shape):
    from scipy.special import logsumexp

    X = np.random.default_rng(11).standard_normal(shape) + 0.3
    _, C = np.linalg.eigh(X.T @ X)
    P = X @ C  # c^T x_i for every direction c
    log_z = np.concatenate([logsumexp(P, axis=0), logsumexp(-P, axis=0)])
    got = api.isotropy(X, scale="none").isotropy.partition_isotropy_symmetric
    assert got == pytest.approx(math.exp(log_z.min() - log_z.max()), rel=1e-9)
