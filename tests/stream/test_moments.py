"""Moments: a worked example of the weighted covariance, merge invariance, and the hard numerical cases."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from spectra_cli.eigen.decomposition import spectrum_from_moments
from spectra_cli.options import ReadOptions
from spectra_cli.stream.moments import Moments
from spectra_cli.stream.passes import Input
from tests.conftest import powerlaw_matrix, reference_eigenvalues

SEED000_POINTS = np.array([[0.0, 0.0], [4.0, 0.0], [0.0, 4.0]])


def test_seed000_worked_example_weights_half_quarter_quarter():
    m = Moments.from_block(SEED000_POINTS, np.array([0.5, 0.25, 0.25]))
    np.testing.assert_allclose(m.mean, [1.0, 1.0])
    C = m.second_moment_matrix()
    np.testing.assert_allclose(C, [[3.0, -1.0], [-1.0, 3.0]], atol=1e-15)
    np.testing.assert_allclose(np.linalg.eigvalsh(C)[::-1], [4.0, 2.0])


def test_seed000_worked_example_weights_point8():
    m = Moments.from_block(SEED000_POINTS, np.array([0.8, 0.1, 0.1]))
    np.testing.assert_allclose(m.second_moment_matrix(), [[1.44, -0.16], [-0.16, 1.44]], atol=1e-14)


def test_counts_and_probabilities_give_the_same_covariance():
    a = Moments.from_block(SEED000_POINTS, np.array([2.0, 1.0, 1.0])).second_moment_matrix()
    b = Moments.from_block(SEED000_POINTS, np.array([0.5, 0.25, 0.25])).second_moment_matrix()
    np.testing.assert_allclose(a, b, atol=1e-15)


def test_weighted_covariance_equals_matrix_form():
    # E^T (diag p - p p^T) E written out independently.
    rng = np.random.default_rng(3)
    E = rng.standard_normal((50, 6))
    w = rng.random(50)
    p = w / w.sum()
    ref = E.T @ (np.diag(p) - np.outer(p, p)) @ E
    got = Moments.from_block(E[:20], w[:20]).merge(Moments.from_block(E[20:], w[20:])).second_moment_matrix()
    np.testing.assert_allclose(got, ref, atol=1e-13)


def test_unweighted_matches_numpy_cov_and_uncentered_matches_xtx():
    rng = np.random.default_rng(1)
    X = rng.standard_normal((40, 5)) + 3
    m = Moments.from_block(X)
    np.testing.assert_allclose(m.second_moment_matrix(ddof=1), np.cov(X, rowvar=False), atol=1e-13)
    np.testing.assert_allclose(m.second_moment_matrix(ddof=0), np.cov(X, rowvar=False, ddof=0), atol=1e-13)
    np.testing.assert_allclose(m.second_moment_matrix(centered=False), X.T @ X / 40, atol=1e-12)


@settings(max_examples=40, deadline=None)
@given(
    n=st.integers(2, 60),
    d=st.integers(1, 6),
    cuts=st.lists(st.integers(0, 60), max_size=5),
    weighted=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_any_split_of_rows_gives_the_same_moments(n, d, cuts, weighted, seed):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, d)) * rng.uniform(0.1, 10, d) + rng.uniform(-50, 50, d)
    w = rng.random(n) + 0.01 if weighted else None
    whole = Moments.from_block(X, w)
    edges = sorted({0, n, *[c % (n + 1) for c in cuts]})
    parts = Moments.empty(d, weighted=weighted)
    for lo, hi in zip(edges[:-1], edges[1:], strict=True):
        if hi > lo:
            parts = parts.merge(Moments.from_block(X[lo:hi], None if w is None else w[lo:hi]))
    assert parts.n == whole.n
    np.testing.assert_allclose(parts.mean, whole.mean, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(parts.m2, whole.m2, rtol=1e-10, atol=1e-10 * np.abs(whole.m2).max())


@settings(max_examples=30, deadline=None)
@given(n=st.integers(3, 80), d=st.integers(1, 8), seed=st.integers(0, 2**16))
def test_eigenvalues_sum_to_the_trace(n, d, seed):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, d)) * rng.uniform(0.01, 100, d)
    m = Moments.from_block(X)
    spec = spectrum_from_moments(m)
    assert spec.eigenvalues.sum() == pytest.approx(np.trace(m.second_moment_matrix()), rel=1e-12)
    assert np.all(np.diff(spec.eigenvalues) <= 0)


def accumulate(X, *, block_rows, precision, gram_route=True):
    with Input(X, ReadOptions.create(block_rows=block_rows, precision=precision)) as inp:
        return inp.first_pass(gram=gram_route)


def _streamed_eigenvalues(X, precision="float64", block_rows=1000):
    acc = accumulate(X, block_rows=block_rows, precision=precision)
    return spectrum_from_moments(acc.moments, precision=precision)


def test_mean_offset_1000x_the_spread_costs_no_accuracy():
    X = powerlaw_matrix(6000, 64, 1.0, seed=2)
    X = X + 1000.0 * np.sqrt(reference_eigenvalues(X)[0]) * np.linspace(1, 2, 64)
    X32 = X.astype(np.float32)  # what a real dump holds
    ref = reference_eigenvalues(X32)
    spec = _streamed_eigenvalues(X32)
    above = spec.eigenvalues > spec.numerical_floor
    assert above.sum() == 64
    np.testing.assert_allclose(spec.eigenvalues[above], ref[above], rtol=1e-6)


def test_spectrum_spanning_1e8_is_resolved_to_1e6_relative():
    rng = np.random.default_rng(5)
    d = 48
    lam = np.logspace(0, -8, d)
    Q, _ = np.linalg.qr(rng.standard_normal((d, d)))
    X = (rng.standard_normal((5000, d)) * np.sqrt(lam)) @ Q.T + 50.0
    ref = reference_eigenvalues(X)
    spec = _streamed_eigenvalues(X, block_rows=777)
    above = spec.eigenvalues > spec.numerical_floor
    assert above.all()
    np.testing.assert_allclose(spec.eigenvalues, ref, rtol=1e-6)


def test_float32_products_stay_within_the_stated_floor():
    # The float32 floor is an absolute error bound: |error| <= floor for every eigenvalue.
    X = powerlaw_matrix(20000, 96, 1.2, seed=4, offset=100.0).astype(np.float32)
    ref = reference_eigenvalues(X)
    spec = _streamed_eigenvalues(X, precision="float32", block_rows=4096)
    eps32, eps64 = np.finfo(np.float32).eps, np.finfo(np.float64).eps
    expected = 96 * eps64 * ref[0] + (2 + np.sqrt(4096)) * eps32 * ref[0]
    assert spec.numerical_floor == pytest.approx(expected, rel=1e-6)
    err = np.max(np.abs(spec.eigenvalues - ref))
    assert err <= spec.numerical_floor
    # a worst-case bound, yet within a few thousand times the error actually made (rounding errors of
    # many entries partly cancel in each eigenvalue)
    assert spec.numerical_floor <= 3000 * err
    f64 = _streamed_eigenvalues(X)
    assert f64.numerical_floor < spec.numerical_floor * 1e-8


def test_float32_floor_of_uncentred_moments_is_set_by_the_centred_products():
    # The mean's outer product is added in float64 after the float32 products: the floor follows the
    # centred rows' size, so a small real eigenvalue under a large mean spike stays resolved.
    rng = np.random.default_rng(3)
    d = 64
    lam = np.r_[np.logspace(0, -3, d - 1), 2e-4]
    X = ((rng.standard_normal((20000, d)) * np.sqrt(lam)) + 3.0).astype(np.float32)
    from spectra_cli.eigen.decomposition import spectrum_from_moments
    from spectra_cli.stream.moments import Moments

    m = Moments.from_block(X[:4000], precision="float32")
    for lo in range(4000, 20000, 4000):
        m = m.merge(Moments.from_block_shifted(X[lo:lo + 4000], m.mean, precision="float32"))
    spec = spectrum_from_moments(m, centered=False, precision="float32")
    ref = np.linalg.eigvalsh(X.astype(np.float64).T @ X.astype(np.float64) / len(X))[::-1]
    err = np.max(np.abs(spec.eigenvalues - ref))
    assert err <= spec.numerical_floor <= 3000 * err
    assert spec.eigenvalues[-1] > spec.numerical_floor  # the smallest real direction (about 2e-4) is resolved
    assert spec.numerical_floor < 1e-3 * spec.eigenvalues[0]


@pytest.mark.parametrize("route", ["moments", "gram"])
def test_a_wide_float32_matrix_is_decomposed_in_float32_within_its_floor(monkeypatch, route):
    # From FLOAT32_SOLVER_MIN_ORDER (3,072; lowered here to keep the test fast) the float32 precision decomposes in
    # float32 too (half the time at 4,096): the floor counts sqrt(d) * eps32 * lambda_1 for it, every eigenvalue is
    # within it of the float64 answer, and the method says so; below the order, the solver stays float64.
    import spectra_cli.eigen.decomposition as dec

    rng = np.random.default_rng(5)
    d = 300
    X = (rng.standard_normal((1000 if route == "moments" else 280, d)) * np.arange(1, d + 1) ** -0.6).astype(np.float32)
    ref = reference_eigenvalues(X)[:min(X.shape)]

    def spectrum() -> dec.Spectrum:
        if route == "gram":
            return dec.spectrum_from_rows(X, precision="float32")
        return dec.spectrum_from_moments(Moments.from_block(X, precision="float32"), precision="float32")

    before = spectrum()
    assert "float32" not in before.method
    monkeypatch.setattr(dec, "FLOAT32_SOLVER_MIN_ORDER", 256)
    spec = spectrum()
    assert "decomposed in float32 (LAPACK ssyevd via SciPy" in spec.method
    eps32, eps64 = np.finfo(np.float32).eps, np.finfo(np.float64).eps
    top, b = spec.eigenvalues[0], (len(X) if route == "moments" else d)
    assert spec.numerical_floor == pytest.approx(np.sqrt(d) * eps32 * top + (2 + np.sqrt(b)) * eps32 * top, rel=1e-9)
    assert before.numerical_floor == pytest.approx(d * eps64 * top + (2 + np.sqrt(b)) * eps32 * top, rel=1e-6)
    err = np.max(np.abs(spec.eigenvalues[:ref.size] - ref))
    assert 0 < err <= spec.numerical_floor / 5  # (measured 0.3-2.3 eps32 * lambda_1 up to d = 4,096)
    assert np.max(np.abs(before.eigenvalues[:ref.size] - ref)) < err  # the float64 solver's own error is smaller
    resolved = ref > spec.numerical_floor + err  # (the ones no rounding within the floor can put under it)
    assert np.all(spec.eigenvalues[:ref.size][resolved] > spec.numerical_floor)


@pytest.mark.parametrize("magnitude", [1e150, 1e-150, 1e300])
def test_extreme_magnitudes_are_rescaled_not_overflowed(magnitude):
    X = powerlaw_matrix(500, 8, 1.0, seed=6)
    ref = reference_eigenvalues(X)
    if magnitude == 1e300:
        # lambda ~ 1e600 cannot be represented: a clear error, never inf.
        from spectra_cli.errors import InputError

        with pytest.raises(InputError, match="exceeds the float64 range"):
            _streamed_eigenvalues(X * magnitude, block_rows=128)
        return
    spec = _streamed_eigenvalues(X * magnitude, block_rows=128)
    assert np.all(np.isfinite(spec.eigenvalues))
    np.testing.assert_allclose(spec.eigenvalues / magnitude**2, ref, rtol=1e-10)


@settings(max_examples=40, deadline=None)
@given(
    n=st.integers(2, 50),
    d=st.integers(1, 6),
    shift_scale=st.sampled_from([0.0, 0.1, 10.0, 1e4]),
    weighted=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_single_pass_shifted_block_equals_the_exact_block(n, d, shift_scale, weighted, seed):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, d)) * rng.uniform(0.1, 10, d) + 100.0
    w = rng.random(n) + 0.01 if weighted else None
    shift = X.mean(axis=0) + shift_scale * rng.standard_normal(d)
    exact = Moments.from_block(X, w)
    fast = Moments.from_block_shifted(X, shift, w)
    assert fast.n == exact.n and fast.weight_sum == pytest.approx(exact.weight_sum)
    np.testing.assert_allclose(fast.mean, exact.mean, rtol=1e-12)
    np.testing.assert_allclose(fast.m2, exact.m2, rtol=1e-9, atol=1e-9 * np.abs(exact.m2).max())


def test_drifting_mean_across_blocks_stays_exact():
    # Rows sorted so that the mean drifts by 1000 spreads from the first block to the last:
    # the shifted fast path must notice and recentre those blocks.
    X = powerlaw_matrix(8000, 16, 1.0, seed=9)
    X = X + np.linspace(0, 1000, 8000)[:, None] * np.ones(16)
    ref = reference_eigenvalues(X)
    spec = _streamed_eigenvalues(X, block_rows=500)
    np.testing.assert_allclose(spec.eigenvalues, ref, rtol=1e-7)


@settings(max_examples=25, deadline=None)
@given(
    n=st.integers(2, 400),
    d=st.integers(1, 12),
    block_rows=st.integers(1, 500),
    precision=st.sampled_from(["float64", "float32"]),
    offset=st.sampled_from([0.0, 10.0, 1e4, 1e5]),
    seed=st.integers(0, 2**16),
)
def test_streamed_spectrum_does_not_depend_on_the_block_size(n, d, block_rows, precision, offset, seed):
    rng = np.random.default_rng(seed)
    X = (rng.standard_normal((n, d)) * rng.uniform(0.1, 3, d) + offset).astype(np.float32)
    a = accumulate(X, block_rows=block_rows, precision=precision, gram_route=False)
    b = accumulate(X, block_rows=n, precision=precision, gram_route=False)
    sa = spectrum_from_moments(a.moments, precision=precision)
    sb = spectrum_from_moments(b.moments, precision=precision)
    ref = reference_eigenvalues(X)
    tol = 2 * sa.numerical_floor + (1e-9 if precision == "float64" else 0.0) * ref[0]
    # each within twice its own floor of the truth, so within twice the sum of both floors of each other (one
    # block of all the rows has the larger floor: float32 products over b rows err by about sqrt(b) eps32)
    both = 2 * (sa.numerical_floor + sb.numerical_floor) + (1e-9 if precision == "float64" else 0.0) * ref[0]
    assert np.max(np.abs(sa.eigenvalues - sb.eigenvalues)) <= max(both, 1e-300)
    assert np.max(np.abs(sa.eigenvalues - ref)) <= max(tol, 1e-300)
    assert np.max(np.abs(sb.eigenvalues - ref)) <= max(2 * sb.numerical_floor + (tol - 2 * sa.numerical_floor),
                                                      1e-300)


@pytest.mark.parametrize("precision", ["float64", "float32"])
@pytest.mark.parametrize("weighted", [False, True])
def test_accumulated_moments_are_exactly_symmetric_without_a_symmetrising_pass(precision, weighted):
    """Products come from syrk and every correction is a u u^T, so m2 == m2.T bit for bit
    (the fast shifted path, a drifting block's exact path, and the merges alike)."""
    import spectra_cli as spectra

    rng = np.random.default_rng(0)
    X = rng.standard_normal((5000, 50)) * np.arange(1, 51) ** -0.5 + 3
    X[:100] += 1e3  # the first block's mean is far from the rest: later blocks take the exact path
    w = rng.random(5000) if weighted else None
    acc = spectra.Accumulator(50, precision=precision)
    for i in range(0, 5000, 700):
        acc.update(X[i:i + 700], weights=None if w is None else w[i:i + 700])
    m2 = acc.moments.m2
    np.testing.assert_array_equal(m2, m2.T)


@pytest.mark.parametrize("first_d", [0, 10**9])  # the drift tested before the product, or after it
def test_a_block_of_identical_rows_makes_no_product_and_is_exact(monkeypatch, first_d):
    """Zero padding after real rows: the block's centred moment is exactly zero, and the exact
    path's product is never made (before, such a block cost two d x d products). From
    DRIFT_TEST_FIRST_D features the drift is seen before the shifted product too, so none is made."""
    rng = np.random.default_rng(3)
    first = rng.standard_normal((300, 8)) + 5.0
    pad = np.zeros((200, 8))
    monkeypatch.setattr("spectra_cli.stream.moments.DRIFT_TEST_FIRST_D", first_d)
    monkeypatch.setattr(Moments, "from_block", classmethod(lambda *a, **k: pytest.fail("exact path taken")))
    bm = Moments.from_block_shifted(pad, first.mean(axis=0), None)
    assert bm.n == 200 and bm.weight_sum == 200.0 and not np.any(bm.m2)
    np.testing.assert_array_equal(bm.mean, np.zeros(8))
    const = np.tile(rng.standard_normal(8), (50, 1))
    bm = Moments.from_block_shifted(const, first.mean(axis=0), rng.random(50))
    assert not np.any(bm.m2)
    np.testing.assert_array_equal(bm.mean, const[0])


@pytest.mark.parametrize("first_d", [0, 10**9])
@pytest.mark.parametrize("precision", ["float64", "float32"])
def test_padded_stream_equals_numpy(precision, first_d, monkeypatch):
    import spectra_cli as spectra

    monkeypatch.setattr("spectra_cli.stream.moments.DRIFT_TEST_FIRST_D", first_d)
    rng = np.random.default_rng(4)
    X = np.zeros((4000, 30))
    X[:1000] = powerlaw_matrix(1000, 30, 1.0, seed=4) + 2.0  # then 3,000 rows of zero padding
    X[2500:2600] = rng.standard_normal((100, 30))  # and a few real rows inside the padding
    acc = spectra.Accumulator(30, precision=precision)
    for i in range(0, 4000, 500):
        acc.update(X[i:i + 500])
    m = acc.moments
    tol = 1e-12 if precision == "float64" else 1e-5  # float32 products: sums rounded to 2^-24
    np.testing.assert_allclose(m.mean, X.mean(axis=0), rtol=tol)
    ref = np.cov(X, rowvar=False, bias=True) * 4000
    np.testing.assert_allclose(m.m2 * m.scale**2, ref, rtol=0, atol=tol * np.abs(ref).max())
    np.testing.assert_array_equal(m.m2, m.m2.T)


def test_a_drifted_block_is_centred_once_on_its_own_mean(monkeypatch):
    monkeypatch.setattr("spectra_cli.stream.moments.DRIFT_TEST_FIRST_D", 0)
    rng = np.random.default_rng(5)
    X = rng.standard_normal((400, 6)) * [1, 2, 3, 4, 5, 6] + 1e3
    calls: list[int] = []
    exact = Moments.from_block.__func__  # type: ignore[attr-defined]

    def counted(cls, *a, **k):
        calls.append(1)
        return exact(cls, *a, **k)

    monkeypatch.setattr(Moments, "from_block", classmethod(counted))
    scratch = np.empty((400, 7))
    bm = Moments.from_block_shifted(X, np.zeros(6), None, out=scratch)
    # one call, made before any shifted product: the scratch holds the rows centred on their own mean
    assert len(calls) == 1
    np.testing.assert_allclose(scratch[:, :6], X - X.mean(axis=0), atol=1e-9)
    np.testing.assert_allclose(bm.m2, np.cov(X, rowvar=False, bias=True) * 400, rtol=1e-12)


@pytest.mark.parametrize("precision", ["float64", "float32"])
def test_each_group_holds_its_own_rows_moments_and_the_groups_merge_to_the_whole(precision):
    """A pass keeping groups: every group's moments are those of its own rows (its first block's product written
    where the group keeps it, the later ones added in place), whatever the blocks, and they merge to the whole."""
    from spectra_cli.stream.states import MomentsState

    rng = np.random.default_rng(7)
    d, rows, blocks, groups = 12, 30, 8, 4
    X = rng.standard_normal((rows * blocks, d)) * np.arange(1, d + 1) ** -0.5 + 3.0
    state = MomentsState(d, precision=precision, groups=groups, n_blocks=blocks, block_rows=rows)
    for b in range(blocks):
        state.update(X[b * rows:(b + 1) * rows], None)
    filled = state.filled_groups()
    assert len(filled) == groups
    tol = 1e-12 if precision == "float64" else 1e-5
    for g, m in enumerate(filled):
        own = X[g * 2 * rows:(g + 1) * 2 * rows]
        assert m.n == 2 * rows
        np.testing.assert_allclose(m.m2 * m.scale**2, np.cov(own, rowvar=False) * (len(own) - 1), rtol=0,
                                   atol=tol * len(own))
    merged = filled[0]
    for m in filled[1:]:
        merged = merged.merge(m)
    np.testing.assert_allclose(merged.m2, state.moments.m2, rtol=0, atol=tol * len(X))
    np.testing.assert_allclose(state.moments.m2, np.cov(X, rowvar=False) * (len(X) - 1), rtol=0, atol=tol * len(X))


def test_fewer_groups_than_asked_get_blocks_of_their_own(monkeypatch):
    """Wide rows keep fewer groups than asked (their matrices within the groups' memory): the pass then plans a
    block per group, not per group asked, and the groups are the same runs of rows."""
    import spectra_cli.stream.passes as passes

    X = np.random.default_rng(8).standard_normal((640, 16))
    monkeypatch.setattr(passes, "GROUP_MEMORY", 8 * 16 * 16 * 8)  # room for 8 groups' matrices
    with Input(X, ReadOptions()) as inp:
        first = inp.first_pass(groups=16, min_blocks=16)
        assert len(first.groups) == 8 and inp.block_rows_used == 80
    for g, m in enumerate(first.groups):
        own = X[80 * g:80 * (g + 1)]
        np.testing.assert_allclose(m.m2 * m.scale**2, np.cov(own, rowvar=False) * 79, rtol=0, atol=1e-10)
