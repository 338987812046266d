"""Pure numpy analyses of a spectrum: power-law fits and effective ranks."""

from __future__ import annotations

import numpy as np


def unique_sorted(a: object) -> np.ndarray:
    """``np.unique`` without its import of ``numpy.ma`` (15 ms of start-up): sorted distinct values."""
    v = np.sort(np.asarray(a).ravel())
    if v.size < 2:
        return v
    return v[np.concatenate(([True], v[1:] != v[:-1]))]
