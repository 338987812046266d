"""The Gram route's kept rows: copied into one preallocated matrix as they come, the same float64 rows and weights
as the blocks given, fewer when the pass dropped some."""

from __future__ import annotations

import numpy as np
import pytest

from spectra_cli.stream.states import RowsBuffer


@pytest.mark.parametrize("size", [12, 40])
@pytest.mark.parametrize("weighted", [False, True])
def test_the_rows_kept_are_the_rows_given_whatever_the_size(size, weighted):
    rng = np.random.default_rng(0)
    blocks = [rng.standard_normal((k, 5)).astype(np.float32) for k in (4, 3, 5)]  # 12 rows
    weights = [rng.random(len(b)) for b in blocks]
    state = RowsBuffer(size, 5, weighted=weighted)
    for b, w in zip(blocks, weights, strict=True):
        state.update(b, w if weighted else None)
    X, w = state.matrix()
    assert X.dtype == np.float64
    np.testing.assert_array_equal(X, np.concatenate(blocks).astype(np.float64))
    if weighted:
        np.testing.assert_array_equal(w, np.concatenate(weights))
    else:
        assert w is None
