"""Isotropy (Mu & Viswanath 2018; docs/numbers.md, "Isotropy"), streamed.

- ``partition_isotropy``: ``I = min_c Z(c) / max_c Z(c)``, ``Z(c) = sum_i w_i exp(c^T x_i / s)``
  over the eigenvectors ``c`` of ``sum_i w_i x_i x_i^T / s^2`` (uncentred rows), as
  ``numpy.linalg.eigh`` returns them (Mu & Viswanath 2018 approximate the minimum and maximum over them).
  ``s`` is the standard deviation of all entries (``scale="seed"``, the default) or 1 (``scale="none"``).
  ``log Z`` is accumulated block by block with a running log-sum-exp, so large activations never overflow.
- ``partition_isotropy_symmetric``: the same over ``c`` and ``-c``. ``Z(c) != Z(-c)``, so the
  first value depends on the eigensolver's sign choice (published numbers are reproduced with
  LAPACK's); the symmetric one does not, and is the one to compare across machines.
- ``mean_cosine``: exact mean of ``cos(x_i, x_j)`` over pairs ``i != j`` (weighted by ``w_i w_j``):
  ``(||sum w u||^2 - sum w^2) / ((sum w)^2 - sum w^2)``, ``u = x / ||x||``, in O(n d); zero rows
  are counted and excluded.
- ``top_pc_share = lambda_1 / sum lambda``; ``mean_norm_ratio = ||mean|| / mean ||x_i||``.
- ``isoscore`` (Rudman et al. 2022) from the covariance eigenvalues ``sigma`` (all d):
  ``s = sqrt(d) sigma / ||sigma||``, ``delta = ||s - 1|| / sqrt(2 (d - sqrt d))``,
  ``IsoScore = ((d - delta^2 (d - sqrt d))^2 - d) / (d (d - 1))``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from spectra_cli import registry
from spectra_cli.errors import OptionError, describe_choices, param
from spectra_cli.stream.isotropy_sums import CosineAccumulator, LogZAccumulator  # noqa: F401  (re-exported)
from spectra_cli.stream.moments import Moments

SCALES = ("seed", "none")


def check_scale(scale: str) -> str:
    if scale not in SCALES:
        raise OptionError(f"{param('scale')} {describe_choices(scale, SCALES)}.")
    return scale


def directions(m: Moments, scale: str) -> tuple[np.ndarray, float]:
    """Eigenvectors of the scaled uncentred second-moment matrix, and the scale ``s``."""
    check_scale(scale)
    d = m.d
    mean_true = m.mean * m.scale
    # sum_i w_i x_i x_i^T in stored units (a power-of-two rescale leaves eigenvectors alone).
    S = m.m2 + np.outer(m.mean, m.mean * m.weight_sum)
    if scale == "seed":
        total = m.weight_sum * d
        mean_all = float(mean_true.sum()) * m.weight_sum / total
        second = float(np.trace(S)) * m.scale**2 / total
        var = max(second - mean_all**2, 0.0)
        s = math.sqrt(var) if var > 0 else 1.0
    else:
        s = 1.0
    A = S * (m.scale**2 / (s * s))
    _, V = np.linalg.eigh((A + A.T) * 0.5)
    return V, s


def gram_log_z(A: np.ndarray, w: np.ndarray | None, scale: str) -> tuple[LogZAccumulator, float]:
    """``log Z(c)`` for all d directions from the rows themselves, when n < d (no d x d matrix).

    With ``B = diag(sqrt w) A / s``, the eigenvectors of ``B^T B`` with non-zero eigenvalues are
    ``v_k = B^T u_k / sqrt(lambda_k)`` for the eigenpairs of the n x n ``B B^T``; the scores
    ``A v_k / s`` follow from ``A A^T`` alone. The other d - r directions are orthogonal to every
    row: their scores are 0 and ``Z = sum w``. Each ``v_k`` is signed so that its largest-magnitude
    entry is positive (spectra's convention, docs/numbers.md: the d x d route's LAPACK signs are not available here).
    """
    A = np.asarray(A, dtype=np.float64)
    n, d = A.shape
    wt = np.ones(n) if w is None else np.asarray(w, dtype=np.float64)
    keep = wt > 0
    A, wt = A[keep], wt[keep]
    W = float(wt.sum())
    amax = float(np.max(np.abs(A))) if A.size else 0.0
    unit = 2.0 ** np.ceil(np.log2(amax)) if amax > 0 else 1.0  # exact power-of-two rescaling
    Au = A / unit
    if scale == "seed":
        mean_all = float(wt @ Au.sum(axis=1)) / (W * d)
        second = float(wt @ np.einsum("ij,ij->i", Au, Au)) / (W * d)
        var = max(second - mean_all**2, 0.0)
        s = math.sqrt(var) * unit if var > 0 else 1.0
    else:
        s = 1.0
    K = Au @ Au.T  # A A^T in units of unit^2
    root = np.sqrt(wt)
    lam, U = np.linalg.eigh((K * root[:, None] * root[None, :] + (K * root[:, None] * root[None, :]).T) * 0.5)
    floor = (d + n) * np.finfo(np.float64).eps * max(float(lam.max()), 0.0) if lam.size else 0.0
    nz = lam > floor
    lam, U = lam[nz], U[:, nz]
    V = (Au.T @ (root[:, None] * U)) / np.sqrt(lam)  # d x r unit eigenvectors (in units of 1/unit^0)
    idx = np.argmax(np.abs(V), axis=0)
    signs = np.sign(V[idx, np.arange(V.shape[1])])
    signs[signs == 0] = 1.0
    scores = (Au @ (V * signs)) * (unit / s)  # c_k^T x_i / s
    acc = LogZAccumulator(np.zeros((d, 0)), 1.0)
    acc.update_scores(scores, wt)
    null = d - scores.shape[1]
    if null > 0:
        logw = math.log(W)
        acc.pos = np.concatenate([acc.pos, np.full(null, logw)])
        acc.neg = np.concatenate([acc.neg, np.full(null, logw)])
    return acc, s


def isoscore(eigenvalues: np.ndarray, d: int) -> float | None:
    sigma = np.zeros(d)
    lam = np.clip(np.asarray(eigenvalues, dtype=np.float64), 0.0, None)[:d]
    sigma[: lam.size] = lam
    top = float(sigma.max()) if d else 0.0
    if top > 0:
        sigma /= top  # IsoScore is scale-free; this keeps the norm finite for eigenvalues near 1e300
    norm = float(np.linalg.norm(sigma))
    if norm == 0 or d < 2:
        return None
    s = sigma * math.sqrt(d) / norm
    delta = float(np.linalg.norm(s - 1.0)) / math.sqrt(2 * (d - math.sqrt(d)))
    return ((d - delta**2 * (d - math.sqrt(d))) ** 2 - d) / (d * (d - 1))


@dataclass(frozen=True, slots=True)
class Isotropy:
    """Isotropy figures of one matrix (None where not computed)."""

    partition_isotropy: float | None
    partition_isotropy_symmetric: float | None
    log_z_min: float | None
    log_z_max: float | None
    scale: str | None
    scale_value: float | None
    mean_cosine: float | None
    zero_rows: int
    top_pc_share: float | None
    mean_norm_ratio: float | None
    isoscore: float | None
    directions: str | None = None
    #: Standard errors (:mod:`spectra_cli.analysis.uncertainty`), the measures without one and why, and how.
    se: dict[str, float | None] | None = None
    se_missing: dict[str, str] | None = None
    se_method: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "partition_isotropy": self.partition_isotropy,
            "partition_isotropy_symmetric": self.partition_isotropy_symmetric,
            "log_z_min": self.log_z_min,
            "log_z_max": self.log_z_max,
            "scale": self.scale,
            "scale_value": self.scale_value,
            "mean_cosine": self.mean_cosine,
            "zero_rows": self.zero_rows,
            "top_pc_share": self.top_pc_share,
            "mean_norm_ratio": self.mean_norm_ratio,
            "isoscore": self.isoscore,
            "directions": self.directions,
            "se": self.se,
            "se_missing": self.se_missing,
            "se_method": self.se_method,
            "definitions": registry.definitions("isotropy"),
        }


def summary(
    spectrum_eigenvalues: np.ndarray, d: int, moments_mean: np.ndarray | None, cos: CosineAccumulator | None,
    *, total: float | None = None, logz: LogZAccumulator | None = None, scale: str | None = None,
    scale_value: float | None = None, with_isoscore: bool = False, directions_note: str | None = None,
) -> Isotropy:
    """``total``: the sum of all eigenvalues when ``spectrum_eigenvalues`` holds only the leading ones."""
    lam = np.clip(spectrum_eigenvalues, 0.0, None)
    total = float(lam.sum()) if total is None else total
    pi = pis = lo = hi = None
    if logz is not None:
        pi, pis, lo, hi = logz.result()
    mean_norm = cos.mean_norm() if cos is not None else None
    ratio = None
    if moments_mean is not None and mean_norm:
        ratio = float(np.linalg.norm(moments_mean)) / mean_norm
    return Isotropy(
        partition_isotropy=pi,
        partition_isotropy_symmetric=pis,
        log_z_min=lo,
        log_z_max=hi,
        scale=scale if logz is not None else None,
        scale_value=scale_value if logz is not None else None,
        mean_cosine=cos.mean_cosine() if cos is not None else None,
        zero_rows=cos.zero_rows if cos is not None else 0,
        top_pc_share=float(lam[0]) / total if total > 0 else None,
        mean_norm_ratio=ratio,
        isoscore=isoscore(lam, d) if with_isoscore else None,
        directions=directions_note if logz is not None else None,
    )


DIRECTIONS_DXD = "eigenvectors of the d x d matrix as numpy.linalg.eigh (LAPACK) returns them"
DIRECTIONS_GRAM = ("n < d: the r eigenvectors with non-zero eigenvalues from the n x n Gram matrix, each signed so its "
                   "largest-magnitude entry is positive; the d - r null directions have Z = sum w")
