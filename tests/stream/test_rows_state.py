"""The Gram route's kept rows: copied into one preallocated matrix when their count is known, kept as blocks past
it or without it, the same float64 rows and weights either way."""

from __future__ import annotations

import numpy as np
import pytest

from spectra_cli.stream.states import RowsState


@pytest.mark.parametrize("capacity", [None, 9, 12, 40])
@pytest.mark.parametrize("weighted", [False, True])
def test_the_rows_kept_are_the_rows_given_whatever_the_capacity(capacity, weighted):
    rng = np.random.default_rng(0)
    blocks = [rng.standard_normal((k, 5)).astype(np.float32) for k in (4, 3, 5)]  # 12 rows
    weights = [rng.random(len(b)) for b in blocks]
    state = RowsState(capacity)
    for b, w in zip(blocks, weights, strict=True):
        state.update(b, w if weighted else None)
    X, w = state.matrix()
    assert X.dtype == np.float64
    np.testing.assert_array_equal(X, np.concatenate(blocks).astype(np.float64))
    if weighted:
        np.testing.assert_array_equal(w, np.concatenate(weights))
    else:
        assert w is None


def test_merged_states_hold_both_in_order():
    rng = np.random.default_rng(1)
    a, b = rng.standard_normal((3, 4)), rng.standard_normal((2, 4))
    one, two = RowsState(3), RowsState()
    one.update(a, None)
    two.update(b, None)
    X, w = one.merge(two).matrix()
    np.testing.assert_array_equal(X, np.vstack([a, b]))
    assert w is None and one.filled == 5
