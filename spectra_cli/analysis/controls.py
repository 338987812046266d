"""The shuffled control: every column permuted independently, which keeps each
feature's distribution and destroys the dependence between features, so its spectrum is
what finite sampling alone produces."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from spectra_cli.eigen.decomposition import Spectrum, spectrum_from_moments, spectrum_from_rows
from spectra_cli.stream.moments import Moments


@dataclass(frozen=True, slots=True)
class ShuffledControl:
    eigenvalues: np.ndarray
    rows: int
    subsampled: bool
    seed: int
    meets_at_rank: int | None

    def to_dict(self) -> dict[str, Any]:
        return {
            "definition": "spectrum after permuting each column independently (numpy Generator.permuted, axis 0)",
            "seed": self.seed,
            "rows": self.rows,
            "subsampled": self.subsampled,
            "meets_at_rank": self.meets_at_rank,
            "meets_definition": "smallest rank k with lambda_k(data) <= lambda_k(shuffled); null if never",
            "eigenvalues": self.eigenvalues.tolist(),
        }


def shuffled_spectrum(
    X: np.ndarray, w: np.ndarray | None, *, seed: int, centered: bool, ddof: int, precision: str
) -> Spectrum:
    """The spectrum of ``X`` with each column permuted independently. ``X`` (float64) is permuted
    and centred in place: the control holds one copy of its rows."""
    rng = np.random.default_rng(seed)
    Xp = np.asarray(X, dtype=np.float64)
    rng.permuted(Xp, axis=0, out=Xp)
    if len(Xp) < Xp.shape[1]:
        return spectrum_from_rows(Xp, w, centered=centered, ddof=ddof, precision=precision)
    return spectrum_from_moments(Moments.from_block(Xp, w, precision=precision, out=Xp), centered=centered,
                                 ddof=ddof, precision=precision)


def meets_at(real: Spectrum, control: Spectrum) -> int | None:
    """First rank where the data's eigenvalue is no larger than the control's."""
    k = min(real.usable_rank, control.eigenvalues.size)
    hit = np.flatnonzero(real.eigenvalues[:k] <= control.eigenvalues[:k])
    return int(hit[0]) + 1 if hit.size else None
