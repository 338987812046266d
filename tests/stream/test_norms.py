"""The histogram of squared row norms gathered in the pass (the row scales of the population exponent)."""

from __future__ import annotations

import numpy as np
import pytest

import spectra_cli as spectra
from spectra_cli.stream.moments import Moments
from spectra_cli.stream.norms import BINS_PER_OCTAVE, NormHistogram, coordinate_fourth
from tests.conftest import powerlaw_matrix


def _bins(q):
    return np.floor(np.log2(q) * BINS_PER_OCTAVE).astype(int)


def _as_counts(h: NormHistogram) -> dict[int, float]:
    return {h.lo + i: float(c) for i, c in enumerate(h.counts) if c}


def _about_the_true_mean(u, w=None):
    """Each row's squared norm about its block's mean ``u``, made an unbiased estimate of its norm about the true
    mean by solving ``E u = (diag(1 - 2 p) + 1 (p^2)^T) e`` (rows independent) for ``e``, kept at 0 or above;
    times the weight."""
    p = np.full(u.size, 1 / u.size) if w is None else w / w.sum()
    e = np.linalg.solve(np.diag(1 - 2 * p) + np.outer(np.ones(u.size), p * p), u)
    return np.clip(e, 0, None) * (1 if w is None else w)


def _expected(q) -> dict[int, float]:
    """The histogram's bins of the non-zero norms (zeros are counted apart)."""
    k, c = np.unique(_bins(q[q > 0]), return_counts=True)
    return {int(a): float(b) for a, b in zip(k, c, strict=True)}


def test_one_block_holds_every_rows_squared_norm_about_the_mean():
    X = powerlaw_matrix(3000, 24, 1.0, seed=1, offset=50.0)
    m = Moments.from_block(X)
    q = _about_the_true_mean(np.sum((X - X.mean(axis=0)) ** 2, axis=1))
    assert m.norms is not None and _as_counts(m.norms) == _expected(q)
    assert m.norms.rows == 3000


@pytest.mark.parametrize("precision", ["float64", "float32"])
def test_shifted_blocks_give_the_norms_about_each_blocks_mean(precision):
    rng = np.random.default_rng(2)
    X = rng.standard_normal((4000, 16)) * rng.gamma(1.0, 1.0, (4000, 1)) ** 0.5 + 30.0
    w = rng.uniform(0.5, 2.0, 4000)
    w[::7] = 0.0  # zero-weight rows are not rows of the sample
    m = Moments.from_block(X[:1000], w[:1000], precision=precision)
    for lo in range(1000, 4000, 1000):
        m = m.merge(Moments.from_block_shifted(X[lo:lo + 1000], m.mean, w[lo:lo + 1000], precision=precision))
    q = []
    for lo in range(0, 4000, 1000):
        xb, wb = X[lo:lo + 1000], w[lo:lo + 1000]
        mb = wb @ xb / wb.sum()
        pos = wb > 0
        q.append(_about_the_true_mean(np.sum((xb[pos] - mb) ** 2, axis=1), wb[pos]))
    q = np.concatenate(q)
    assert m.norms is not None and m.norms.rows == np.count_nonzero(w) == m.n_positive
    v, c = m.norms.values()
    got = np.repeat(v, c.astype(int))
    # every value within its bin (float32 products may move a norm across a bin edge: 2.2 % wide)
    np.testing.assert_allclose(np.sort(got), np.sort(q), rtol=0.03 if precision == "float32" else 0.022)
    if precision == "float64":
        assert _as_counts(m.norms) == _expected(q)
        assert m.norms.zeros == np.count_nonzero(q == 0)


def test_small_blocks_keep_the_spread_of_the_row_scales():
    """Norms about a 16-row block's mean share the block mean's own spread, which narrows their histogram by
    1 - 2/16 unless it is taken out; taken out, the spread is that of the norms about the true mean."""
    rng = np.random.default_rng(3)
    X = rng.standard_normal((16000, 64)) * rng.gamma(1.0, 1.0, (16000, 1)) ** 0.5
    m = Moments.from_block(X[:16])
    for lo in range(16, 16000, 16):
        m = m.merge(Moments.from_block_shifted(X[lo:lo + 16], m.mean, None))
    v, c = m.norms.values()
    cv2 = float(c @ v ** 2 / c.sum() / (c @ v / c.sum()) ** 2 - 1)
    true = np.sum(X ** 2, axis=1)
    assert cv2 == pytest.approx(true.var() / true.mean() ** 2, rel=0.05)
    assert float(c @ v / c.sum()) == pytest.approx(true.mean(), rel=0.02)


def test_constant_blocks_count_their_rows_as_zero_norms():
    X = np.ones((600, 5))
    m = Moments.from_block(X[:300])
    m = m.merge(Moments.from_block_shifted(X[300:], m.mean))
    assert m.norms is not None and m.norms.zeros == 600 and not m.norms.counts.any()


def test_the_histogram_survives_a_moment_file_and_merges_across_files(tmp_path):
    X = powerlaw_matrix(2000, 12, 1.2, seed=3)
    a = spectra.accumulate(X[:1000]).save(tmp_path / "a.npz")
    b = spectra.accumulate(X[1000:]).save(tmp_path / "b.npz")
    ha = spectra.Accumulator.load(a).moments.norms
    hb = spectra.Accumulator.load(b).moments.norms
    merged = spectra.Accumulator.load(a).merge(spectra.Accumulator.load(b)).moments.norms
    assert ha is not None and hb is not None and merged is not None
    assert _as_counts(merged) == {k: _as_counts(ha).get(k, 0) + _as_counts(hb).get(k, 0)
                                  for k in set(_as_counts(ha)) | set(_as_counts(hb))}
    assert merged.rows == 2000


def test_a_moment_file_without_the_histogram_still_loads(tmp_path):
    X = powerlaw_matrix(500, 6, 1.0, seed=4)
    path = spectra.accumulate(X).save(tmp_path / "m.npz")
    with np.load(path) as z:
        parts = {k: z[k] for k in z.files if k != "norms"}
    np.savez(tmp_path / "old.npz", **parts)
    acc = spectra.Accumulator.load(tmp_path / "old.npz")
    assert acc.moments.norms is None
    old, new = spectra.fit(tmp_path / "old.npz"), spectra.fit(path)
    assert np.array_equal(old.spectrum.eigenvalues, new.spectrum.eigenvalues)


def test_histograms_merge_exactly_whatever_their_ranges():
    a = NormHistogram.of(np.array([1.0, 2.0, 2.0, 1e-30]))
    b = NormHistogram.of(np.array([0.0, 1e30, 2.0]))
    m = a.merge(b)
    assert m.rows == 7 and m.zeros == 1
    assert _as_counts(m) == _expected(np.array([1.0, 2.0, 2.0, 1e-30, 1e30, 2.0]))
    v, c = m.values()
    assert v[0] == 0.0 and c[0] == 1 and c.sum() == 7


def test_large_blocks_near_the_shift_skip_the_cross_term_within_a_few_percent():
    rng = np.random.default_rng(5)
    X = rng.standard_normal((3 * 8192, 16)) + 5.0
    m = Moments.from_block(X[:8192])
    for lo in (8192, 16384):
        m = m.merge(Moments.from_block_shifted(X[lo:lo + 8192], m.mean))
    q = np.concatenate([np.sum((X[lo:lo + 8192] - X[lo:lo + 8192].mean(axis=0)) ** 2, axis=1) / (1 - 1 / 8192)
                        for lo in (0, 8192, 16384)])
    v, c = m.norms.values()
    got = np.repeat(v, c.astype(int))
    ratio = np.sort(got) / np.sort(q)
    assert np.all(np.abs(ratio - 1) < 0.06) and abs(np.mean(got) / np.mean(q) - 1) < 0.003


@pytest.mark.slow
@pytest.mark.parametrize("b", [4, 7, 64])
def test_the_coordinates_fourth_moments_are_unbiased_about_each_blocks_mean(b):
    # Gaussian coordinates: mu4 = 3 sigma^4; unit-variance Laplace: 6. Rows about their block's own mean.
    rng = np.random.default_rng(b)
    for draw, mu4 in ((rng.standard_normal, 3.0), (lambda s: rng.laplace(size=s) / np.sqrt(2), 6.0)):
        total = rows = 0.0
        for _ in range(60_000 // b):
            Y = draw((b, 4)) * np.array([1.0, 2.0, 0.5, 1.0])
            f, r = coordinate_fourth(Y - Y.mean(axis=0))
            total, rows = total + f, rows + r
        assert total / rows / (1 + 16 + 1 / 16 + 1) == pytest.approx(mu4, rel=0.04)
    assert coordinate_fourth(np.ones((3, 2))) == (0.0, 0)  # (fewer than 4 rows: no unbiased estimate)


def test_the_fourth_moments_are_gathered_by_every_route_and_kept_in_a_moment_file(tmp_path):
    X = powerlaw_matrix(3000, 16, 1.0, seed=2, offset=20.0)
    one = Moments.from_block(X).norms
    shifted = Moments.from_block(X[:1000])
    shifted = shifted.merge(Moments.from_block_shifted(X[1000:], shifted.mean)).norms
    ref = np.sum(np.mean((X - X.mean(axis=0)) ** 4, axis=0))
    for h in (one, shifted):
        assert h is not None and h.fourth_rows == 3000
        assert h.coordinate_fourth == pytest.approx(ref, rel=0.01)
    # weighted rows: not gathered (None), and so not for a merge with them
    assert Moments.from_block(X, np.ones(3000)).norms.fourth is None
    assert one.merge(Moments.from_block(X, np.ones(3000)).norms).coordinate_fourth is None
    path = spectra.accumulate(X).save(tmp_path / "m.npz")
    loaded = spectra.Accumulator.load(path).moments.norms
    assert loaded.coordinate_fourth == pytest.approx(ref, rel=0.01) and loaded.fourth_rows == 3000
    with np.load(path) as z:  # a file written before they were gathered: no coordinate reading, nothing refused
        np.savez(tmp_path / "old.npz", **{k: z[k] for k in z.files if k != "fourth"})
    assert spectra.Accumulator.load(tmp_path / "old.npz").moments.norms.coordinate_fourth is None


@pytest.mark.parametrize("b", [3, 8])
def test_the_pass_takes_each_norm_about_the_mean_of_every_row_so_far(b):
    """In the pass (MomentsState), a block's rows are taken about the mean of every row up to it (N rows so far)
    and made unbiased for their norms about the true mean, (u - K) / (1 - 2/N) with K = (1/N) mean u / (1 - 1/N)
    the mean's own spread (the first block about its own mean): the histogram is that of the norms computed so
    in numpy, and its spread that of the norms about the true mean. About each small
    block's own mean the cross terms with its other rows spread Gaussian rows' norms 1.3x (b = 8) to 2.5x
    (b = 3) as much as they are spread, and the population exponent read that as row scales."""
    from spectra_cli.stream.states import MomentsState

    rng = np.random.default_rng(4)
    n, d = 2400, 48
    X = rng.standard_normal((n, d)) * np.arange(1, d + 1) ** -0.5 + 5.0
    st = MomentsState(d)
    for lo in range(0, n, b):
        st.update(X[lo:lo + b], None)
    q = [_about_the_true_mean(np.sum((X[:b] - X[:b].mean(axis=0)) ** 2, axis=1))]
    for lo in range(b, n, b):
        N = lo + b
        u = np.sum((X[lo:N] - X[:N].mean(axis=0)) ** 2, axis=1)
        q.append(np.maximum(u - u.mean() / N / (1.0 - 1.0 / N), 0.0) / (1.0 - 2.0 / N))
    q = np.concatenate(q)
    h = st.moments.norms
    assert h is not None and h.rows == n
    got, want = _as_counts(h), _expected(q)
    assert sum(abs(got.get(k, 0) - want.get(k, 0)) for k in set(got) | set(want)) <= 2  # (a norm at a bin's edge)
    v, c = h.values()
    cv2 = float(c @ v ** 2 / c.sum() / (c @ v / c.sum()) ** 2 - 1)
    true = np.sum((X - 5.0) ** 2 / 1.0, axis=1)  # (about the true mean, 5)
    assert cv2 == pytest.approx(true.var() / true.mean() ** 2, rel=0.06)
    own = np.concatenate([np.sum((X[lo:lo + b] - X[lo:lo + b].mean(axis=0)) ** 2, axis=1) for lo in range(0, n, b)])
    own = np.concatenate([_about_the_true_mean(own[lo:lo + b]) for lo in range(0, n, b)])
    assert own.var() / own.mean() ** 2 > 1.25 * true.var() / true.mean() ** 2  # (what each block's own mean made)


def test_a_folder_of_small_shards_is_the_file_it_was_cut_from(tmp_path):
    """768 rows as 96 files of 8: the row groups are runs of rows as in the one file (the shards ended their
    blocks early, and every block past the 32nd went to the last group: 'too unequal in size'), and the norms are
    taken about the mean of the rows so far: the same population exponent as the one file, to rounding."""
    import warnings

    X = powerlaw_matrix(768, 32, 1.0, seed=5)
    np.save(tmp_path / "one.npy", X)
    (tmp_path / "shards").mkdir()
    for i in range(96):
        np.save(tmp_path / "shards" / f"part_{i:03d}.npy", X[8 * i:8 * i + 8])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        one = spectra.fit(tmp_path / "one.npy", window="3:20", population=True)
        cut = spectra.fit(tmp_path / "shards", window="3:20", population=True)
    a, b = one.fits[0].population, cut.fits[0].population
    assert not [w for w in cut.warnings if "unequal" in w]
    assert b.sampling_curve["groups"] == a.sampling_curve["groups"] == 32
    # (a norm whose rounding differs at a bin's edge: within 1e-6; the shards moved alpha by 3e-3 before)
    assert b.alpha == pytest.approx(a.alpha, abs=1e-6) and b.low == pytest.approx(a.low, abs=1e-6)
    assert b.scales["cv2_observed"] == pytest.approx(a.scales["cv2_observed"], rel=0.02)  # (means of other rows)


def test_heavy_row_scales_keep_their_small_norms_in_small_blocks():
    """Rows of exponential scale (Gamma(1, 1)), 512 of them in 16-row blocks: the histogram's small norms are those
    of the norms about the true mean (the 5th percentile within 5 % over 8 samples; 2 % here). Divided by their
    shrink alone, norms about the mean of the rows so far kept that mean's own spread (tr Sigma / N, large in the
    first blocks), and the rows of small scale read 14 % large at the 5th percentile (at n = d = 512, with
    --population, alpha 0.017 low)."""
    from spectra_cli.stream.states import MomentsState

    ratios, spread = [], []
    for seed in range(8):
        rng = np.random.default_rng(seed)
        n, d, b = 512, 64, 16
        X = rng.standard_normal((n, d)) * np.arange(1, d + 1) ** -0.25 * np.sqrt(rng.gamma(1.0, 1.0, n))[:, None] + 3.0
        st = MomentsState(d)
        for lo in range(0, n, b):
            st.update(X[lo:lo + b], None)
        v, c = st.moments.norms.values()
        got = np.repeat(v, c.astype(int))
        true = np.sum((X - 3.0) ** 2, axis=1)
        ratios.append(np.quantile(got, [0.05, 0.5, 0.9]) / np.quantile(true, [0.05, 0.5, 0.9]))
        spread.append((got.var() / got.mean() ** 2) / (true.var() / true.mean() ** 2))
    np.testing.assert_allclose(np.mean(ratios, axis=0), 1.0, atol=0.05)
    assert np.mean(spread) == pytest.approx(1.0, abs=0.03)


def test_small_groups_of_a_moment_file_load_and_dropped_rows_keep_their_places(tmp_path):
    """A moment file of 64 rows in 32 groups loads (a group's norms are about the rows before it, about twice a
    2-row group's own trace: the file was refused); rows dropped as non-finite keep their places, so the 32
    groups are still the runs of rows they were planned as (every other row NaN filled only 16)."""
    import warnings

    from spectra_cli.stream.states import MomentsState

    X = np.random.default_rng(0).standard_normal((64, 8))
    acc = spectra.Accumulator(8, groups=32)
    for lo in range(0, 64, 2):  # (32 blocks of 2 rows: a group each)
        acc.update(X[lo:lo + 2])
    acc.save(tmp_path / "m.npz")
    assert spectra.Accumulator.load(tmp_path / "m.npz").n == 64
    Y = np.random.default_rng(1).standard_normal((3000, 24)) * np.arange(1, 25) ** -0.5
    Y[1::2] = np.nan
    np.save(tmp_path / "nan.npy", Y)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        rep = spectra.fit(tmp_path / "nan.npy", window="3:12", population=True, drop_nonfinite=True)
    assert rep.fits[0].population.sampling_curve["groups"] == 32
    # weighted rows after a heavy one: no norm reads 0 (the mean's own spread was taken as every row's norm)
    st = MomentsState(16, weighted=True)
    Z = np.random.default_rng(2).standard_normal((2000, 16))
    w = np.ones(2000)
    w[0] = 1e3
    for lo in range(0, 2000, 2):
        st.update(Z[lo:lo + 2], w[lo:lo + 2])
    assert st.moments.norms.zeros <= 1  # (the first block's, about its own mean of 2 rows, may)
