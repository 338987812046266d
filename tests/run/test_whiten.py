"""Whitening: identity covariance, removed directions, saved transforms, atomic output, errors."""

from __future__ import annotations

import os

import numpy as np
import pytest


def test_interrupted_write_leaves_no_file(tmp_path, monkeypatch, full_rank):
    from spectra_cli.run import whiten as wmod

    p, _ = full_rank
    calls = {"n": 0}
    real = wmod.WhiteningTransform.apply

    def flaky(self, X, dtype=np.float64):
        calls["n"] += 1
        if calls["n"] == 2:
            raise KeyboardInterrupt
        return real(self, X, dtype=dtype)

    monkeypatch.setattr(wmod.WhiteningTransform, "apply", flaky)
    with pytest.raises(KeyboardInterrupt):
        wmod.whiten(str(p), out=str(tmp_path / "w.npy"), block_rows=5000)
    assert sorted(os.listdir(tmp_path)) == ["x.npy"]


from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402


@settings(max_examples=30, deadline=None)
@given(d=st.integers(2, 10), seed=st.integers(0, 2**16), eps=st.sampled_from([0.0, 1e-3]))
def test_zca_whitened_covariance_is_the_identity(d, seed, eps):
    from spectra_cli.analysis.whitening import fit_transform

    rng = np.random.default_rng(seed)
    Q, _ = np.linalg.qr(rng.standard_normal((d, d)))
    mix = Q * rng.uniform(0.3, 3.0, d)  # condition number <= 10: rounding stays far below the tolerance
    X = rng.standard_normal((50 * d, d)) @ mix + rng.standard_normal(d) * 5
    C = np.cov(X, rowvar=False)
    t, lam = fit_transform(C, X.mean(0), method="zca", usable_rank=d, eps=eps)
    Y = t.apply(X)
    expected = np.diag(lam / (lam + eps))  # in the eigenbasis; the identity when eps = 0
    V = np.linalg.eigh(C)[1][:, ::-1]
    got = V.T @ np.cov(Y, rowvar=False) @ V
    np.testing.assert_allclose(np.diag(got), np.diag(expected), atol=1e-8)
    if eps == 0.0:
        np.testing.assert_allclose(np.cov(Y, rowvar=False), np.eye(d), atol=1e-8)


