"""Eigenvalues, floors and explained variance from moments or (when n < d) from rows."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from spectra_cli.errors import InputError
from spectra_cli.moments import Moments

FLOOR_DEFINITION = (
    "(d + sqrt(b)) * eps * lambda_1: eps the machine epsilon of the precision of the products, b the "
    "most rows summed in one product (blocks are merged in float64). By Weyl's inequality each eigenvalue "
    "moves by at most the norm of the rounding error: about sqrt(b) * eps * ||C|| from the accumulated "
    "products and d * eps * ||C|| from the symmetric eigensolver"
)

# The largest eigenvalue must be a normal float64 (>= 2.2e-308): below it every eigenvalue is
# subnormal, with digits lost, or zero.
MIN_RESOLVED = float(np.finfo(np.float64).tiny)

# A drop by this factor between consecutive resolved eigenvalues marks near-null directions.
NEAR_NULL_GAP = 1e-4


@dataclass(frozen=True, slots=True)
class Spectrum:
    """A covariance (or second-moment) spectrum with its floors.

    Attributes:
        eigenvalues: descending; length ``min(n, d)`` on the Gram route, else ``d``.
        n_samples: rows used; n_features: d.
        definition: what matrix the eigenvalues belong to.
        precision: arithmetic of the products (``float64`` or ``float32``).
        numerical_floor: eigenvalues at or below it are not resolved from zero.
        sampling_rank: the largest rank the sample allows (n - 1 centred, n uncentred).
        structural_zeros: eigenvalues known to be zero without computing them (d - n).
        method: how the eigenvalues were obtained.
    """

    eigenvalues: np.ndarray
    n_samples: int | None
    n_features: int
    definition: str
    precision: str
    numerical_floor: float
    sampling_rank: int
    structural_zeros: int
    method: str

    @property
    def numerical_rank(self) -> int:
        return int(np.count_nonzero(self.eigenvalues > self.numerical_floor))

    @property
    def near_null_count(self) -> int:
        """Resolved eigenvalues after the last drop by more than NEAR_NULL_GAP between
        consecutive ranks, when they are at most max(1, d/100) of them (LayerNorm's removed
        direction kept above zero by rounding)."""
        lam = self.eigenvalues[: self.numerical_rank]
        if lam.size < 3:
            return 0
        gaps = np.flatnonzero(lam[1:] < lam[:-1] * NEAR_NULL_GAP)
        if not gaps.size:
            return 0
        count = int(lam.size - (gaps[-1] + 1))
        # Only a few isolated directions count (LayerNorm removes one); a large block below a
        # gap is a low-rank signal over small noise, which is data, not a numerical artefact.
        return count if count <= max(1, self.n_features // 100) else 0

    @property
    def usable_rank(self) -> int:
        """Ranks above the numerical floor, the sampling floor and any near-null gap."""
        return min(self.numerical_rank - self.near_null_count, self.sampling_rank)

    @property
    def n_over_d(self) -> float | None:
        return None if self.n_samples is None else self.n_samples / self.n_features

    def resolved(self) -> np.ndarray:
        """Eigenvalues with everything at or below the numerical floor set to 0."""
        lam = self.eigenvalues.copy()
        lam[lam <= self.numerical_floor] = 0.0
        return lam

    @property
    def total_variance(self) -> float:
        return float(self.resolved().sum())

    def explained_variance_ratio(self) -> np.ndarray:
        lam = self.resolved()
        total = lam.sum()
        return lam / total if total > 0 else np.zeros_like(lam)

    def k_for(self, fraction: float) -> int | None:
        """Smallest k whose cumulative explained variance reaches ``fraction``."""
        cum = np.cumsum(self.explained_variance_ratio())
        if cum.size == 0 or cum[-1] <= 0:
            return None
        # Tolerate the last cumulative sum landing a rounding error below 1.
        hit = np.flatnonzero(cum >= fraction - 1e-12)
        return int(hit[0]) + 1 if hit.size else int(cum.size)

    def to_dict(self) -> dict[str, Any]:
        ratio = self.explained_variance_ratio()
        return {
            "definition": self.definition,
            "method": self.method,
            "precision": self.precision,
            "n_samples": self.n_samples,
            "n_features": self.n_features,
            "n_over_d": self.n_over_d,
            "eigenvalues": self.eigenvalues.tolist(),
            "explained_variance_ratio": ratio.tolist(),
            "total_variance": self.total_variance,
            "k90": self.k_for(0.90),
            "k95": self.k_for(0.95),
            "k99": self.k_for(0.99),
            "numerical_floor": self.numerical_floor,
            "floor_definition": FLOOR_DEFINITION,
            "numerical_rank": self.numerical_rank,
            "near_null": self.near_null_count,
            "sampling_rank": self.sampling_rank,
            "usable_rank": self.usable_rank,
            "structural_zeros": self.structural_zeros,
        }


def _eps(precision: str) -> float:
    return float(np.finfo(np.float32 if precision == "float32" else np.float64).eps)


def floor_for(eigenvalues: np.ndarray, d: int, accumulated: int, precision: str) -> float:
    """The numerical floor (see FLOOR_DEFINITION)."""
    if not eigenvalues.size:
        return 0.0
    return (d + float(np.sqrt(max(accumulated, 0)))) * _eps(precision) * max(float(eigenvalues[0]), 0.0)


def describe(centered: bool, ddof: int, weighted: bool) -> str:
    if not centered:
        return "uncentred second moment sum_i p_i x_i x_i^T (X^T X / n unweighted)"
    if weighted:
        return "weighted population covariance E^T (diag p - p p^T) E, p = w / sum w (no ddof)"
    return f"centred covariance (X - mean)^T (X - mean) / (n - {ddof})"


def _finish(lam_scaled: np.ndarray, factor: float) -> np.ndarray:
    lam = np.sort(lam_scaled)[::-1] * factor
    if not np.all(np.isfinite(lam)):
        raise InputError(
            "the covariance exceeds the float64 range (values above ~1e154 square past 1.8e308); "
            "rescale the input (e.g. divide by its largest magnitude)."
        )
    top = float(lam_scaled.max()) * factor if lam_scaled.size else 0.0
    if lam_scaled.size and float(lam_scaled.max()) > 0 and top < MIN_RESOLVED:
        raise InputError(
            f"the covariance is below the float64 range: its largest eigenvalue ({top:.3g}) is under "
            f"{MIN_RESOLVED:.3g}, where float64 loses digits (values near 1e-154 square below it); rescale the "
            "input (e.g. divide it by its largest magnitude)."
        )
    return lam


def spectrum_from_moments(
    m: Moments, *, centered: bool = True, ddof: int = 1, precision: str = "float64"
) -> Spectrum:
    """Eigenvalues of the d x d matrix accumulated in ``m`` (LAPACK syevd via numpy)."""
    C = m.second_moment_matrix(centered=centered, ddof=ddof)
    lam = _finish(np.linalg.eigvalsh(C), m.scale * m.scale)
    d = m.d
    floor = floor_for(lam, d, m.block_rows, precision)
    sampling = m.n_positive - 1 if centered else m.n_positive
    return Spectrum(
        eigenvalues=lam,
        n_samples=m.n,
        n_features=d,
        definition=describe(centered, ddof, m.weighted),
        precision=precision,
        numerical_floor=floor,
        sampling_rank=max(min(sampling, d), 0),
        structural_zeros=0,
        method="eigvalsh of the d x d matrix from streamed block moments (Chan et al. merge)",
    )


def spectrum_from_rows(
    X: np.ndarray,
    w: np.ndarray | None = None,
    *,
    centered: bool = True,
    ddof: int = 1,
    precision: str = "float64",
) -> Spectrum:
    """The Gram route for n < d: eigenvalues of the n x n matrix, O(n^2 d).

    The non-zero eigenvalues of ``A^T A`` and ``A A^T`` coincide; the remaining
    ``d - n`` are structural zeros and are not listed.
    """
    n, d = X.shape
    X = np.asarray(X, dtype=np.float64)
    amax = float(np.max(np.abs(X))) if X.size else 0.0
    scale = 2.0 ** np.ceil(np.log2(amax)) if amax > 0 else 1.0
    A = X / scale
    if w is None:
        mean = A.mean(axis=0)
        denom = float(n - ddof) if centered else float(n)
        root = None
        npos = n
    else:
        p = np.asarray(w, dtype=np.float64) / float(np.sum(w))
        mean = p @ A
        denom = 1.0
        root = np.sqrt(p)
        npos = int(np.count_nonzero(p))
    if centered:
        A = A - mean
    if root is not None:
        A = A * root[:, None]
    if precision == "float32":
        A32 = A.astype(np.float32)
        G = (A32 @ A32.T).astype(np.float64)
    else:
        G = A @ A.T
    lam = _finish(np.linalg.eigvalsh(G / denom), scale * scale)
    floor = floor_for(lam, d, d, precision)  # the Gram products sum d terms each
    sampling = npos - 1 if centered else npos
    return Spectrum(
        eigenvalues=lam,
        n_samples=n,
        n_features=d,
        definition=describe(centered, ddof, w is not None),
        precision=precision,
        numerical_floor=floor,
        sampling_rank=max(min(sampling, d), 0),
        structural_zeros=d - n,
        method="eigvalsh of the n x n Gram matrix (n < d)",
    )


def spectrum_from_eigenvalues(values: np.ndarray) -> Spectrum:
    """A spectrum computed elsewhere (``--eigenvalues``): sorted, floor from float64."""
    lam = np.sort(np.asarray(values, dtype=np.float64))[::-1]
    d = lam.size
    return Spectrum(
        eigenvalues=lam,
        n_samples=None,
        n_features=d,
        definition="eigenvalues given as input (computed elsewhere); sorted descending",
        precision="float64",
        numerical_floor=floor_for(lam, d, 0, "float64"),
        sampling_rank=d,
        structural_zeros=0,
        method="given",
    )
