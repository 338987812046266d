"""The bootstrap's replicates against plain numpy: each replicate's covariance is that of the rows of
the drawn groups, repeated as often as drawn (built here by concatenating rows and calling np.cov)."""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest

import spectra_cli as spectra
from spectra_cli.analysis.bootstrap import bootstrap_statistics, leading_eigenvalues
from spectra_cli.errors import FitError
from spectra_cli.stream.moments import Moments

G, D = 6, 12


def _data(seed: int = 0, offset: float = 50.0) -> tuple[list[np.ndarray], list[np.ndarray]]:
    rng = np.random.default_rng(seed)
    rows = [rng.standard_normal((40 + 7 * i, D)) * np.arange(1, D + 1) ** -0.7 + offset + i for i in range(G)]
    weights = [rng.random(len(r)) + 0.1 for r in rows]
    return rows, weights


def _numpy_replicates(rows, weights, *, centered, ddof, replicates, seed):
    """Every replicate's descending eigenvalues, from the resampled rows themselves."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(replicates):
        counts = rng.multinomial(G, np.full(G, 1.0 / G))
        X = np.concatenate([r for r, c in zip(rows, counts, strict=True) for _ in range(c)])
        w = None if weights is None else np.concatenate([w for w, c in zip(weights, counts, strict=True)
                                                         for _ in range(c)])
        if not centered:
            C = (X.T * (1.0 if w is None else w)) @ X / (len(X) if w is None else w.sum())
        elif w is None:
            C = np.cov(X, rowvar=False, ddof=ddof)
        else:
            C = np.cov(X, rowvar=False, aweights=w, bias=True)
        out.append(np.linalg.eigvalsh(C)[::-1])
    return out


@pytest.mark.parametrize(("centered", "ddof", "weighted"), [(True, 1, False), (True, 0, False), (True, 1, True),
                                                            (False, 0, False), (False, 0, True)])
def test_each_replicate_is_the_covariance_of_the_drawn_rows(centered, ddof, weighted):
    rows, weights = _data()
    ws = weights if weighted else None
    groups = [Moments.from_block(r, None if ws is None else ws[i]) for i, r in enumerate(rows)]
    ref = _numpy_replicates(rows, ws, centered=centered, ddof=ddof, replicates=15, seed=3)
    stats = [lambda lam, j=j: float(lam[j]) for j in range(D)] + [lambda lam: float(lam.sum())]
    got = bootstrap_statistics(groups, stats, centered=centered, ddof=ddof, replicates=15, seed=3)
    assert got.shape == (D + 1, 15)
    want = np.array([[lam[j] for lam in ref] for j in range(D)] + [[lam.sum() for lam in ref]])
    np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12 * want.max())


def test_a_failing_statistic_leaves_nan_and_the_others_stand():
    rows, _ = _data()
    groups = [Moments.from_block(r) for r in rows]

    def fails_on_small(lam: np.ndarray) -> float:
        if lam[0] < np.median(ref):
            raise FitError("no fit")
        return float(lam[0])

    ref = np.array([lam[0] for lam in _numpy_replicates(rows, None, centered=True, ddof=1, replicates=20, seed=1)])
    got = bootstrap_statistics(groups, [fails_on_small, lambda lam: float(lam[0])], centered=True, ddof=1,
                               replicates=20, seed=1)
    np.testing.assert_allclose(got[1], ref, rtol=1e-10)
    np.testing.assert_array_equal(np.isnan(got[0]), ref < np.median(ref))


def test_groups_at_different_scales_pool_exactly():
    """A group of tiny magnitudes is stored at another power-of-two scale; the replicates still match."""
    rows, _ = _data(offset=1.0)
    rows[2] = rows[2] * 1e-160
    groups = [Moments.from_block(r) for r in rows]
    assert len({g.scale for g in groups}) > 1
    ref = _numpy_replicates(rows, None, centered=True, ddof=1, replicates=8, seed=2)
    got = bootstrap_statistics(groups, [lambda lam: float(lam[0]), lambda lam: float(lam[-1])], centered=True,
                               ddof=1, replicates=8, seed=2)
    np.testing.assert_allclose(got, [[lam[0] for lam in ref], [lam[-1] for lam in ref]], rtol=1e-9)


def test_the_top_k_replicate_equals_every_eigenvalue():
    rng = np.random.default_rng(4)
    A = rng.standard_normal((600, 300)) * np.arange(1, 301) ** -0.6
    C = np.cov(A, rowvar=False)
    lower = np.tril(C)  # only the lower triangle is read
    full = leading_eigenvalues(lower.copy(), None)
    np.testing.assert_allclose(full, np.linalg.eigvalsh(C)[::-1], rtol=1e-12, atol=1e-14 * full[0])
    top = leading_eigenvalues(lower.copy(), 20)
    assert top.size == 20
    np.testing.assert_allclose(top, full[:20], rtol=1e-10)


def test_memory_is_the_groups_plus_two_matrices():
    """No stack of the groups' d x d sums: beyond the groups themselves, the replicate's covariance and a
    slab of 256 rows (traced by tracemalloc, which numpy reports its arrays to; eigvalsh's own copy is
    LAPACK workspace, untraced: one more matrix)."""
    d = 640
    rng = np.random.default_rng(5)
    groups = [Moments.from_block(rng.standard_normal((100, d))) for _ in range(16)]
    tracemalloc.start()
    try:
        bootstrap_statistics(groups, [lambda lam: float(lam[0])], centered=True, ddof=1, replicates=3, seed=0)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    matrix = 8 * d * d
    assert peak < 1.6 * matrix  # measured 1.50; the old stack of the 16 groups' sums alone was 16 matrices


def test_fit_ci_on_the_top_k_route_says_how_each_replicate_was_decomposed(monkeypatch):
    import spectra_cli.eigen.decomposition as eigen

    monkeypatch.setattr(eigen, "TOP_AUTO_MIN_D", 256)
    rng = np.random.default_rng(6)
    X = rng.standard_normal((1200, 256)) / np.arange(1, 257)  # eigenvalues ~ j^-2: quick to converge
    top = spectra.fit(X, window=["3:10", "5:16"], ci=True, ci_replicates=10, ci_seed=2)
    full = spectra.fit(X, window=["3:10", "5:16"], ci=True, ci_replicates=10, ci_seed=2, top=0)
    assert top.spectrum.top is not None and full.spectrum.top is None
    for a, b in zip(top.suite.fits, full.suite.fits, strict=True):
        assert a.ci.top == 16 and b.ci.top is None
        assert a.ci.low == pytest.approx(b.ci.low, rel=1e-9) and a.ci.high == pytest.approx(b.ci.high, rel=1e-9)
    ci = top.to_dict()["fits"][0]["ci"]
    assert ci["eigenvalues"].startswith("the leading 16 eigenvalues of each replicate (block Lanczos")
    assert full.to_dict()["fits"][0]["ci"]["eigenvalues"].startswith("every eigenvalue of each replicate")
    # an explicit top below the automatic route's width: the replicates take eigvalsh, which is faster there
    monkeypatch.setattr(eigen, "TOP_AUTO_MIN_D", 4096)
    small = spectra.fit(X, window=["3:10", "5:16"], ci=True, ci_replicates=10, ci_seed=2, top=16)
    assert small.spectrum.top is not None and small.suite.fits[0].ci.top is None
    assert small.suite.fits[0].ci.low == pytest.approx(full.suite.fits[0].ci.low, rel=1e-9)


@pytest.mark.parametrize("cores", [1, 2, 3])
def test_sub_sample_spectra_are_the_kept_rows_covariance_spectra_at_any_thread_count(monkeypatch, cores,
                                                                                    no_thread_caps):
    from spectra_cli import threads
    from spectra_cli.analysis import simulate
    from spectra_cli.analysis.bootstrap import subset_spectra

    rows, _ = _data(3)
    groups = [Moments.from_block(r) for r in rows]
    keep = np.array([[g != q for g in range(G)] for q in range(G)] + [[g == 0 for g in range(G)]])
    monkeypatch.setattr(threads, "usable_cores", lambda: cores)
    monkeypatch.setattr(simulate, "SIDE_BY_SIDE_ORDER", 0)  # (side by side even at this small order)
    with threads.call(None):  # (decomposed two or three at a time: each on one thread, on two or three cores)
        assert simulate.parallel_count(keep.shape[0], rows[0].shape[1]) == min(cores, keep.shape[0])
        spectra, dof = subset_spectra(groups, keep, centered=True, ddof=1)
    for i, mask in enumerate(keep[:G]):
        X = np.concatenate([r for r, k in zip(rows, mask, strict=True) if k])
        assert dof[i] == len(X) - 1
        ref = np.linalg.eigvalsh(np.cov(X, rowvar=False))[::-1]
        assert np.allclose(spectra[i], ref, rtol=1e-10, atol=1e-12 * ref[0])
    # one group of 40 rows: still a spectrum; its bits the same as decomposed alone
    assert dof[G] == 39 and np.all(np.isfinite(spectra[G]))
    with threads.call(1):
        alone, _ = subset_spectra(groups, keep, centered=True, ddof=1)
    assert np.array_equal(alone, spectra)


@pytest.mark.parametrize("centered", [True, False])
def test_a_sub_samples_lower_triangle_from_the_total_is_its_covariance(centered):
    """The lower triangle alone, and the kept groups' sum as the total less the left-out ones: the same matrix as
    the whole, drawn group by group, to rounding; multinomial counts (the bootstrap's) add the drawn groups as
    before."""
    from spectra_cli.analysis.bootstrap import _group_total, group_sums, replicate_covariance

    rows, _ = _data(4)
    groups = [Moments.from_block(r) for r in rows]
    sums = group_sums(groups)
    total = _group_total(sums)
    d = rows[0].shape[1]
    lower = np.tril_indices(d)
    for counts in (np.r_[0.0, np.ones(G - 1)], np.r_[np.ones(G - 2), 0.0, 0.0], np.r_[2.0, 0.0, np.ones(G - 2)]):
        whole = np.empty((d, d))
        replicate_covariance(whole, sums, counts, centered=centered, ddof=1, weighted=False)
        part = np.full((d, d), 7.0)
        replicate_covariance(part, sums, counts, centered=centered, ddof=1, weighted=False, lower=True, total=total)
        np.testing.assert_allclose(part[lower], whole[lower], rtol=1e-12, atol=1e-14 * np.abs(whole).max())


def test_a_sub_sample_that_leaves_out_a_dominant_group_sums_its_kept_groups_directly():
    """One group 10,000 times the others' scale: the sub-sample that leaves it out is summed from its kept groups (the
    total less that group left the large group's rounding in the kept rows' smallest eigenvalues: 3.7e-9 of them,
    against 2e-11 summed directly); its spectrum is the kept rows' to 2e-10 of each eigenvalue, the smallest
    included."""
    from spectra_cli.analysis.bootstrap import subset_spectra

    rng = np.random.default_rng(8)
    rows = [rng.standard_normal((60, D)) * np.linspace(1.0, 1e-3, D) for _ in range(G)]
    rows[0] = rows[0] * 1e4
    groups = [Moments.from_block(r) for r in rows]
    keep = np.array([[g != 0 for g in range(G)]])
    spectra, _ = subset_spectra(groups, keep, centered=True, ddof=1)
    X = np.concatenate(rows[1:])
    ref = np.linalg.eigvalsh(np.cov(X, rowvar=False))[::-1]
    np.testing.assert_allclose(spectra[0], ref, rtol=2e-10)
