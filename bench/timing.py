"""The one timing helper of the benches: the median wall-clock seconds of a call."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable


def median_seconds(f: Callable[[], object], runs: int) -> float:
    """Median over ``runs`` calls of ``f()``, seconds."""
    out = []
    for _ in range(runs):
        t = time.perf_counter()
        f()
        out.append(time.perf_counter() - t)
    return statistics.median(out)
