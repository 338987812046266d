"""Counting function and capacity of a spectrum (the source/capacity language of Caponnetto & De Vito 2007;
Rudi & Rosasco 2017).

``N(eps) = #{j : lambda_j >= eps}`` counts the directions above a scale; the capacity
``N(tau) = sum_j lambda_j / (lambda_j + tau)`` is its smooth version (the effective number of
directions a ridge penalty ``tau`` leaves). Eigenvalues at or below the numerical floor count as 0.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from spectra_cli.errors import OptionError, param


@dataclass(frozen=True, slots=True)
class Capacity:
    counting: tuple[tuple[float, int], ...]
    capacity: tuple[tuple[float, float], ...]

    def to_dict(self) -> dict[str, Any]:
        return {
            "definition": {"counting": "N(eps) = #{j : lambda_j >= eps}",
                           "capacity": "N(tau) = sum_j lambda_j / (lambda_j + tau)"},
            "counting": [{"eps": e, "N": n} for e, n in self.counting],
            "capacity": [{"tau": t, "N": n} for t, n in self.capacity],
        }


def capacity(resolved: np.ndarray, *, eps: list[float], tau: list[float]) -> Capacity:
    """``resolved``: eigenvalues with those at or below the floor already set to 0."""
    for e in eps:
        if not e > 0:
            raise OptionError(f"{param('counting', e)} must be a positive eigenvalue scale.")
    for t in tau:
        if not t > 0:
            raise OptionError(f"{param('capacity', t)} must be a positive ridge scale tau.")
    lam = np.asarray(resolved, dtype=np.float64)
    counts = tuple((float(e), int(np.count_nonzero(lam >= e))) for e in eps)
    caps = tuple((float(t), float(np.sum(lam / (lam + t)))) for t in tau)
    return Capacity(counts, caps)
