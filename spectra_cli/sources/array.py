"""An in-memory array as a source, for library use (``spectra_cli.api.fit(X)``)."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from spectra_cli.sources.base import Source, SourceInfo, check_numeric_dtype, matrix_shape


class ArraySource(Source):
    def __init__(self, X: np.ndarray, *, name: str = "<array>", weights: np.ndarray | None = None) -> None:
        X = np.asarray(X)
        check_numeric_dtype(X.dtype, name)
        n, d, layout = matrix_shape(X.shape, name)
        self._X = X.reshape(n, d)
        self._w = None if weights is None else np.asarray(weights, dtype=np.float64)
        self.has_weights = self._w is not None
        self.info = SourceInfo(path=name, format="array", shape=tuple(X.shape), dtype=str(X.dtype),
                               n_rows=n, n_features=d, layout=layout)

    def iter_blocks(
        self, start: int, stop: int, block_rows: int
    ) -> Iterator[tuple[np.ndarray, np.ndarray | None]]:
        for lo in range(start, stop, block_rows):
            hi = min(lo + block_rows, stop)
            yield self._X[lo:hi], None if self._w is None else self._w[lo:hi]
