"""Sequence dumps: position selection and pooling, the context spectrum, controls and lag energies,
against numpy written out plainly and against what the mathematics says must hold."""

from __future__ import annotations

import math

import numpy as np
import pytest

import spectra_cli as spectra
from tests.conftest import SAMPLE

CTX = SAMPLE / "minilm_layer3_context32_128_f16.npy"


def _lag_reference(X: np.ndarray) -> np.ndarray:
    """Two-pass float64: Gamma_ab = Xc_a^T Xc_b / (n - 1) block by block, then the mean energies."""
    n, P, _ = X.shape
    Xc = X - X.mean(axis=0)

    def energy(a: int, b: int) -> float:
        return float(np.sum((Xc[:, a, :].T @ Xc[:, b, :] / (n - 1)) ** 2))

    diag = np.mean([energy(a, a) for a in range(P)])
    return np.array([np.mean([energy(a, a + lag) for a in range(P - lag)]) for lag in range(1, P)]) / diag


def test_context_spectrum_and_lag_energies_match_numpy_on_real_data():
    X = np.load(CTX).astype(np.float64)[:, :16]  # 128 windows x 16 positions: n < P k, the Gram route
    rep = spectra.sequence(X, controls="block-diagonal").to_dict()
    n, P, k = X.shape
    flat = X.reshape(n, P * k)
    centred = flat - flat.mean(axis=0)  # per coordinate across windows; ddof 1 below
    ref = (np.linalg.svd(centred, compute_uv=False) ** 2 / (n - 1))[: n - 1]  # the SVD, not a Gram matrix
    got = np.array(rep["context"]["spectrum"]["eigenvalues"])
    np.testing.assert_allclose(got[: n - 1], ref, rtol=1e-6, atol=1e-9 * ref[0])
    np.testing.assert_allclose(rep["lag_energy"]["data"], _lag_reference(X), rtol=1e-6)
    blocks = np.sort(np.concatenate([np.linalg.eigvalsh(np.cov(X[:, a], rowvar=False)) for a in range(P)]))[::-1]
    bd = np.array(rep["controls"]["block-diagonal"]["spectrum"]["eigenvalues"])
    np.testing.assert_allclose(bd, blocks[: bd.size], rtol=1e-6, atol=1e-9 * blocks[0])
    assert "Gram" in rep["context"]["route"]


def test_the_covariance_route_gives_the_same_numbers():
    rng = np.random.default_rng(0)
    X = rng.standard_normal((400, 5, 6)) @ rng.standard_normal((6, 6))  # n = 400 >= P k = 30
    rep = spectra.sequence(X, controls=()).to_dict()
    C = np.cov(X.reshape(400, 30), rowvar=False)
    np.testing.assert_allclose(rep["context"]["spectrum"]["eigenvalues"], np.linalg.eigvalsh(C)[::-1], rtol=1e-9)
    np.testing.assert_allclose(rep["lag_energy"]["data"], _lag_reference(X), rtol=1e-9)
    assert "covariance" in rep["context"]["route"]


def test_independent_tokens_look_like_their_controls():
    # Tokens drawn independently: every cross-position block is pure sampling noise. Lag energies must
    # sit at the shuffled level: both estimate E||Gamma_ab||^2 ~ (tr S)^2 / n for a != b, with a relative
    # spread of about 1/sqrt(P (P-1)/2) across the averaged pairs; 15 % is > 3 of those spreads here.
    # The context spectrum differs from the block-diagonal one only by that noise, whose operator norm
    # is about 2 sqrt(P k / n) lambda_max (Marchenko-Pastur): the tolerance is 3 sqrt(P k / n).
    rng = np.random.default_rng(1)
    n, P, k = 3000, 8, 6
    scales = np.linspace(1.0, 3.0, k)
    X = rng.standard_normal((n, P, k)) * scales
    rep = spectra.sequence(X, seed=2).to_dict()
    data, shuffled = np.array(rep["lag_energy"]["data"]), np.array(rep["lag_energy"]["shuffled"])
    assert abs(data.mean() - shuffled.mean()) / shuffled.mean() < 0.15
    ctx = np.array(rep["context"]["spectrum"]["eigenvalues"])
    bd = np.array(rep["controls"]["block-diagonal"]["spectrum"]["eigenvalues"])
    assert np.max(np.abs(ctx - bd[: ctx.size])) / bd[0] < 3 * math.sqrt(P * k / n)
    # and a sequence with real cross-position dependence is far above its shuffled level
    Y = X.copy()
    Y[:, 1:] += 0.9 * X[:, :-1]
    rep = spectra.sequence(Y, seed=2).to_dict()
    assert rep["lag_energy"]["data"][0] > 3 * rep["lag_energy"]["shuffled"][0]


def test_a_rotation_per_position_keeps_the_context_spectrum_and_moves_the_pooled_one():
    # RoPE applies an orthogonal R_t at position t: Cov(R C) = R Sigma R^T, the same eigenvalues.
    X = np.load(CTX).astype(np.float64)[:64, :8]
    n, P, k = X.shape
    rng = np.random.default_rng(3)
    R = np.stack([np.linalg.qr(rng.standard_normal((k, k)))[0] for _ in range(P)])
    Y = np.einsum("npk,pjk->npj", X, R)
    a, b = spectra.sequence(X, controls=()).to_dict(), spectra.sequence(Y, controls=()).to_dict()
    la, lb = np.array(a["context"]["spectrum"]["eigenvalues"]), np.array(b["context"]["spectrum"]["eigenvalues"])
    np.testing.assert_allclose(lb, la, rtol=1e-8, atol=1e-8 * la[0])
    pa, pb = (np.array(r["pooled"]["spectrum"]["eigenvalues"]) for r in (a, b))
    assert np.max(np.abs(pa - pb)) / pa[0] > 0.05


def test_padding_is_left_out_everywhere():
    X = np.load(CTX).astype(np.float64)[:40, :10]
    n, P, k = X.shape
    padded = np.zeros((n + 5, P + 3, k))  # 3 padded positions in every window, 5 windows of padding
    padded[:n, :P] = X
    padded[n:, :P] = 7.0  # garbage where the mask says padding
    padded[:, P:] = -3.0
    mask = np.zeros((n + 5, P + 3), dtype=bool)
    mask[:n, :P] = True
    mask[n:, :2] = True  # partly padded windows: their real tokens count, the windows leave the context
    padded[n:, :2] = X[:5, :2]
    a = spectra.sequence(padded, positions=f":{P}", mask=mask, controls="block-diagonal").to_dict()
    b = spectra.sequence(X, controls="block-diagonal").to_dict()
    for key in ("context",):
        np.testing.assert_allclose(a[key]["spectrum"]["eigenvalues"], b[key]["spectrum"]["eigenvalues"], rtol=1e-12)
    np.testing.assert_allclose(a["lag_energy"]["data"], b["lag_energy"]["data"], rtol=1e-12)
    assert a["source"]["windows_in_context"] == n and a["source"]["masked_tokens"] == 5 * (P - 2)
    assert [r["n"] for r in a["per_position"]] == [n + 5, n + 5] + [n] * (P - 2)
    # the pooled rows are exactly the real tokens
    tokens = np.concatenate([X.reshape(-1, k), X[:5, :2].reshape(-1, k)])
    ref = np.linalg.eigvalsh(np.cov(tokens, rowvar=False))[::-1]
    np.testing.assert_allclose(a["pooled"]["spectrum"]["eigenvalues"], ref, rtol=1e-9, atol=1e-12 * ref[0])
    # fit and spectrum pool the same tokens through the mask
    got = spectra.spectrum(padded, mask=mask).spectrum.eigenvalues
    np.testing.assert_allclose(got, ref, rtol=1e-9, atol=1e-12 * ref[0])


def test_positions_and_pooling_for_every_command():
    X = np.load(CTX).astype(np.float64)
    n, L, d = X.shape
    first = spectra.spectrum(X, positions=[0]).spectrum.eigenvalues  # 128 rows < 384: the n x n route
    np.testing.assert_allclose(first[:n - 1], np.linalg.eigvalsh(np.cov(X[:, 0], rowvar=False))[::-1][:n - 1],
                               rtol=1e-9, atol=1e-12 * first[0])
    rest = spectra.spectrum(X, positions="1:").spectrum.eigenvalues
    ref_rest = np.linalg.eigvalsh(np.cov(X[:, 1:].reshape(-1, d), rowvar=False))[::-1]
    np.testing.assert_allclose(rest, ref_rest, rtol=1e-9, atol=1e-12 * ref_rest[0])
    for pool, rows in (("mean", X.mean(axis=1)), ("first", X[:, 0]), ("last", X[:, -1])):
        got = spectra.spectrum(X, pool=pool).spectrum.eigenvalues
        ref = np.linalg.eigvalsh(np.cov(rows, rowvar=False))[::-1][: n - 1]
        np.testing.assert_allclose(got[: n - 1], ref, rtol=1e-9, atol=1e-12 * ref[0])
    tokens = X.reshape(-1, d)
    regrouped = spectra.spectrum(tokens, positions_per_window=L, positions="1:").spectrum.eigenvalues
    np.testing.assert_array_equal(regrouped, rest)
    rep = spectra.fit(X, positions=[0])
    assert rep.source["layout"] == "sequence (128 windows x 32 positions): positions 0 of 32, flattened to tokens"
    assert rep.isotropy.mean_cosine > 0.4  # position 0 (CLS) is a cone; positions 1-31 are not
    assert spectra.fit(X, positions="1:").isotropy.mean_cosine < 0.25


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"positions": "40:"}, "selects no position of 32"),
        ({"positions": "0,99"}, "position 99 is outside 0..31"),
        ({"project": 0}, "project=0 must be a positive number"),
        ({"controls": "random"}, "controls 'random' is not one of"),
    ],
)
def test_bad_sequence_options(kwargs, message):
    with pytest.raises((spectra.OptionError, spectra.InputError), match=message):
        spectra.sequence(CTX, **kwargs)


def test_a_bad_pool_names_the_choices():
    with pytest.raises(spectra.OptionError, match=r"^pool 'max' is not one of 'tokens', 'mean', 'first', 'last'"):
        spectra.spectrum(CTX, pool="max")
    with pytest.raises(spectra.OptionError, match="apply to sequence dumps"):
        spectra.spectrum(np.zeros((10, 4)), positions="1:")


def test_projection_is_orthogonal_and_seeded():
    from spectra_cli.analysis.lags import projection

    Q = projection(384, 32, 5)
    np.testing.assert_allclose(Q.T @ Q, np.eye(32), atol=1e-12)
    np.testing.assert_array_equal(Q, projection(384, 32, 5))
    rep = spectra.sequence(CTX, project=16, seed=5, controls=()).to_dict()
    assert rep["context"]["spectrum"]["n_features"] == 32 * 16 and rep["options"]["project"]["k"] == 16


def test_parquet_token_rows_regrouped_without_crossing_documents(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    rng = np.random.default_rng(4)
    L, d, lengths = 4, 6, [9, 3, 12, 5]  # 2, 0, 3 and 1 windows; 1 + 3 + 0 + 1 tokens left over
    docs = [rng.standard_normal((m, d)) for m in lengths]
    ids = np.concatenate([np.full(m, 10 * i) for i, m in enumerate(lengths)])
    tokens = np.concatenate(docs)
    pq.write_table(pa.table({"doc_id": ids, "emb": pa.FixedSizeListArray.from_arrays(pa.array(tokens.ravel()), d)}),
                   tmp_path / "t.parquet", row_group_size=7)  # row groups cut across documents
    rep = spectra.sequence(tmp_path / "t.parquet", positions_per_window=L, doc_column="doc_id", controls=())
    windows = np.stack([docs[0][:4], docs[0][4:8], docs[2][:4], docs[2][4:8], docs[2][8:12], docs[3][:4]])
    ref = spectra.sequence(windows, controls=())
    assert rep.source["windows"] == 6 and any("5 token row(s) left out" in w for w in rep.warnings)
    np.testing.assert_allclose(rep.context["spectrum"]["eigenvalues"], ref.context["spectrum"]["eigenvalues"],
                               rtol=1e-12)
    with pytest.raises(spectra.OptionError, match="doc_column regroups Parquet token rows"):
        spectra.sequence(tmp_path / "t.parquet", doc_column="doc_id")


def test_a_parquet_mask_column_equals_a_mask_array(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    X = np.load(CTX).astype(np.float32)[:20, :8]
    mask = np.ones((20, 8), dtype=bool)
    mask[3:, 6:] = False  # padding at the end of most windows
    pq.write_table(pa.table({"real": mask.ravel(), "emb": pa.FixedSizeListArray.from_arrays(
        pa.array(X.reshape(-1, 384).ravel()), 384)}), tmp_path / "t.parquet")
    a = spectra.sequence(tmp_path / "t.parquet", positions_per_window=8, mask_column="real", controls=()).to_dict()
    b = spectra.sequence(X, mask=mask, controls=()).to_dict()
    assert a["source"]["masked_tokens"] == b["source"]["masked_tokens"] == 17 * 2
    np.testing.assert_allclose(a["pooled"]["spectrum"]["eigenvalues"], b["pooled"]["spectrum"]["eigenvalues"],
                               rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(a["context"]["spectrum"]["eigenvalues"], b["context"]["spectrum"]["eigenvalues"],
                               rtol=1e-12, atol=1e-14)


def test_per_position_numbers_match_plain_numpy():
    X = np.load(CTX).astype(np.float64)[:48, :6]
    rows = spectra.sequence(X, controls=()).to_dict()["per_position"]
    for p, r in enumerate(rows):
        T = X[:, p]
        lam = np.linalg.svd(T - T.mean(axis=0), compute_uv=False) ** 2 / (len(T) - 1)
        assert r["position"] == p and r["n"] == len(T)
        assert r["participation_ratio"] == pytest.approx(lam.sum() ** 2 / np.sum(lam**2), rel=1e-10)
        U = T / np.linalg.norm(T, axis=1, keepdims=True)
        C = U @ U.T
        assert r["mean_cosine"] == pytest.approx((C.sum() - np.trace(C)) / (len(T) * (len(T) - 1)), rel=1e-9)


def test_the_streamed_context_route_gives_the_numbers_of_the_gram_stack():
    """Many windows: the P n x n Gram matrices are not held at once (their sum is accumulated, the lag
    energies come from k x k cross blocks); the numbers are those of the stack."""
    from spectra_cli.analysis.lags import context

    X = np.random.default_rng(3).standard_normal((120, 6, 40))
    stack = context(X, block_diagonal=True)
    streamed = context(X, block_diagonal=True, stack_bytes=0)
    assert "streamed" in streamed.route and "streamed" not in stack.route
    np.testing.assert_allclose(streamed.eigenvalues, stack.eigenvalues, rtol=1e-12, atol=1e-12 * stack.eigenvalues[0])
    np.testing.assert_allclose(streamed.lag_energy, stack.lag_energy, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(streamed.block_diagonal, stack.block_diagonal, rtol=1e-12,
                               atol=1e-12 * stack.block_diagonal[0])


def test_a_fit_of_a_sequences_tokens_says_how_its_errors_count_them():
    """Tokens of one window are not independent rows: the fit says its standard errors count that dependence through
    the row groups (a window within a group) and how to get errors across windows; where no groups are kept it says
    they are too small, by up to sqrt(positions); pooled to one row a window, it says nothing."""
    X = np.load(SAMPLE / "minilm_layer3_context32_128_f16.npy")
    said = [w for w in spectra.fit(X).warnings if "tokens of one window are not independent" in w]
    assert said == ["the rows are the tokens of 128 windows of 32 positions: tokens of one window are not independent; "
                    "the standard errors come from contiguous row groups, which count that dependence where a window "
                    "lies within a group (the report's design effect says how much it weighs); for errors across "
                    "windows give each window one row (pool='mean')"]
    few = [w for w in spectra.fit(X[:1]).warnings if "tokens of one window are not independent" in w]
    assert few == ["the rows are the tokens of 1 windows of 32 positions: tokens of one window are not independent, "
                   "and the standard errors and intervals, which take the rows as independent, are too small (by up "
                   f"to sqrt(32) = {math.sqrt(32):.2g}x where a window's positions move together); for errors across "
                   "windows give each window one row (pool='mean')"]
    assert not [w for w in spectra.fit(X, pool="mean").warnings if "not independent" in w]
    assert not [w for w in spectra.fit(X, positions="3").warnings if "not independent" in w]  # one position


def test_the_controls_are_fitted_over_the_contexts_ranks():
    """By default each spectrum would take its own window, and the block-diagonal control resolves P times the
    context's ranks (11..1228 against 11..127 on the sample): its alpha would be read elsewhere. The controls take
    the context's window and say so; a window asked for is every spectrum's."""
    rep = spectra.sequence(SAMPLE / "minilm_layer3_context32_128_f16.npy").to_dict()
    ctx = rep["context"]["fit"]
    for name in ("block-diagonal", "shuffled"):
        f = rep["controls"][name]["fit"]
        assert f["window"] == ctx["window"] == [11, 127] and f["window_source"] == "context"
        assert f["window_reason"].startswith("the context's window (ranks 11..127)")
    asked = spectra.sequence(SAMPLE / "minilm_layer3_context32_128_f16.npy", window="5:60").to_dict()
    assert {asked["controls"][c]["fit"]["window_source"] for c in ("block-diagonal", "shuffled")} == {"user"}
    assert asked["controls"]["block-diagonal"]["fit"]["window"] == asked["context"]["fit"]["window"] == [5, 60]


def test_the_row_groups_of_a_sequences_tokens_hold_whole_windows():
    # 100 windows of 32 tokens: 16 blocks of 200 rows would split windows between groups; blocks of 224 never do
    X = np.load(SAMPLE / "minilm_layer3_context32_128_f16.npy")[:100]
    rep = spectra.fit(X)
    assert rep.options["block_rows"] % 32 == 0 and rep.rank.se_method["route"] == "row groups"
    assert spectra.fit(X.reshape(-1, 384)).options["block_rows"] == 200  # (a 2-D dump: no windows known)
