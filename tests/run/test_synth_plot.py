"""`spectra synth` (known spectra, seeded, atomic) and `--plot` (valid image files)."""

from __future__ import annotations

import numpy as np
import pytest

from spectra_cli.run import synth


def test_synth_is_seeded_and_independent_of_block_size():
    a = np.concatenate(list(synth.generate("cone", n=1000, d=8, seed=3, block=1000)))
    b = np.concatenate(list(synth.generate("cone", n=1000, d=8, seed=3, block=77)))
    np.testing.assert_array_equal(a, b)
    c = np.concatenate(list(synth.generate("cone", n=1000, d=8, seed=4)))
    assert not np.array_equal(a, c)




@pytest.mark.parametrize("activation", ["linear", "quadratic", "relu", "tanh"])
def test_synth_random_features(activation):
    X = np.concatenate(list(synth.generate("random-features", n=3000, d=40, seed=0, alpha=1.31,
                                           activation=activation)))
    assert X.shape == (3000, 40) and np.all(np.isfinite(X))
    if activation == "relu":
        assert X.min() >= 0
    if activation == "quadratic":
        assert X.min() >= 0


def test_synth_quadratic_features_have_the_log_corrected_spectrum():
    # Paquette, Xiao & Zhu (2026) Theorem 1 with p = 2: lambda_j ~ (log(j+1)/j)^alpha over a range of ranks.
    from spectra_cli.run import matrix as api

    X = np.concatenate(list(synth.generate("random-features", n=20000, d=400, seed=1, alpha=1.31,
                                           activation="quadratic", input_dim=1000)))
    rep = api.fit(X, window="5:40", model="log-corrected", degree=2)
    assert rep.fit.alpha == pytest.approx(1.31, abs=0.15)








