"""Whitening transforms (Kessy, Lewin & Strimmer 2018; Mu & Viswanath 2018 for all-but-the-top), fitted from moments.

With ``C = V diag(lambda) V^T`` (eigenvectors signed so each one's largest-magnitude entry
is positive) and ``mu`` the mean, a transform is ``y = (x - mu) M``:

- ``zca``: ``M = V diag(g) V^T``, ``g_j = 1 / sqrt(lambda_j + eps)``;
- ``pca``: ``M = V_k diag(g_k)`` (the top ``k`` directions; output width ``k``);
- ``abtt`` (all-but-the-top, Mu & Viswanath): ``M = I - V_k V_k^T``.

Directions past the spectrum's usable rank (at or below the numerical floor, past the
sampling rank, or near-null) get ``g_j = 0``: they are never blown up by ``1/sqrt(lambda)``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from spectra_cli.analysis.isotropy import Isotropy
from spectra_cli.eigen.decomposition import Spectrum
from spectra_cli.errors import InputError, OptionError, describe_choices, param

METHODS = ("zca", "pca", "abtt")
# Required when loading; "zeroed" (directions given scale 0) is saved too but optional.


def signed_eigh(C: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Eigenvalues descending; each eigenvector's largest-magnitude entry positive (SPEC)."""
    lam, V = np.linalg.eigh((C + C.T) * 0.5)
    lam, V = lam[::-1], V[:, ::-1]
    idx = np.argmax(np.abs(V), axis=0)
    signs = np.sign(V[idx, np.arange(V.shape[1])])
    signs[signs == 0] = 1.0
    return lam, V * signs


@dataclass(frozen=True, slots=True)
class WhiteningTransform:
    """``y = (x - mean) @ matrix``; everything needed to apply it again, saved without pickle."""

    method: str
    mean: np.ndarray
    matrix: np.ndarray
    eps: float
    k: int
    ddof: int
    source: str
    fingerprint: str
    zeroed: int = 0

    @property
    def d_in(self) -> int:
        return int(self.matrix.shape[0])

    @property
    def d_out(self) -> int:
        return int(self.matrix.shape[1])

    def apply(self, X: np.ndarray, *, dtype: Any = np.float64) -> np.ndarray:
        """``(X - mean) @ matrix`` in ``dtype``. In float32 the mean is split into a float32 part
        subtracted first (exact or correctly rounded, whatever the offset) and a remainder
        applied after the product, so a large mean offset costs no accuracy."""
        if np.dtype(dtype) == np.float32:
            hi = self.mean.astype(np.float32)
            lo = (self.mean - hi.astype(np.float64)) @ self.matrix
            Y = np.subtract(X, hi, dtype=np.float32) @ self.matrix.astype(np.float32)
            Y -= lo.astype(np.float32)
            return Y
        return np.subtract(X, self.mean, dtype=np.float64) @ self.matrix

    def covariance_after(self, C: np.ndarray) -> np.ndarray:
        """The output covariance ``M^T C M`` (exact for the transform)."""
        out = self.matrix.T @ C @ self.matrix
        return (out + out.T) * 0.5

    @staticmethod
    def check_target(path: str) -> None:
        """Refuse a path the transform may not be written to (:func:`spectra_cli.transform_file.check_target`)."""
        from spectra_cli import transform_file

        transform_file.check_target(path)

    def save(self, path: str) -> None:
        """``.npz`` of plain arrays (strings as unicode arrays), written atomically
        (:mod:`spectra_cli.transform_file`)."""
        from spectra_cli import transform_file

        transform_file.write(path, {"mean": self.mean, "matrix": self.matrix, "method": self.method, "eps": self.eps,
                                    "k": self.k, "source": self.source, "fingerprint": self.fingerprint,
                                    "ddof": self.ddof, "zeroed": self.zeroed})

    @classmethod
    def load(cls, path: str) -> WhiteningTransform:
        """A transform saved by :meth:`save`, its arrays checked (an InputError names what is wrong)."""
        from spectra_cli import transform_file

        z = transform_file.read(path)
        try:
            t = cls(method=str(z["method"]), mean=np.asarray(z["mean"], dtype=np.float64),
                    matrix=np.asarray(z["matrix"], dtype=np.float64), eps=float(z["eps"]), k=int(z["k"]),
                    ddof=int(z["ddof"]), source=str(z["source"]), fingerprint=str(z["fingerprint"]),
                    zeroed=int(z["zeroed"]) if "zeroed" in z else 0)
        except (TypeError, ValueError) as exc:
            raise InputError(f"cannot read transform {path}: {type(exc).__name__}: {exc}") from None
        if t.method not in METHODS or t.matrix.ndim != 2 or t.mean.shape != (t.matrix.shape[0],):
            raise InputError(f"{path} is not a valid spectra transform (method {t.method!r}, "
                             f"matrix {t.matrix.shape}, mean {t.mean.shape}).")
        if t.matrix.shape[1] > t.matrix.shape[0]:
            raise InputError(f"{path} is not a valid spectra transform: its matrix maps {t.matrix.shape[0]} features "
                             f"to {t.matrix.shape[1]}, more than it takes (whitening keeps or removes directions).")
        if not (np.all(np.isfinite(t.matrix)) and np.all(np.isfinite(t.mean)) and math.isfinite(t.eps)):
            raise InputError(f"{path} is not a valid spectra transform: its mean or matrix holds NaN or inf.")
        return t


def is_transform_file(path: str) -> bool:
    """An ``.npz`` archive holding the arrays of a saved transform (:mod:`spectra_cli.transform_file`)."""
    from spectra_cli import transform_file

    return transform_file.is_transform_file(path)


def fit_transform(
    C: np.ndarray, mean: np.ndarray, *, method: str, usable_rank: int, k: int | None = None, eps: float = 0.0,
    ddof: int = 1, source: str = "", fingerprint: str = "",
) -> tuple[WhiteningTransform, np.ndarray]:
    """The transform and the covariance eigenvalues (descending) it was built from."""
    if method not in METHODS:
        raise OptionError(f"{param('method')} {describe_choices(method, METHODS)}.")
    if not eps >= 0 or not np.isfinite(eps):
        raise OptionError(f"{param('eps', eps)} must be a finite number >= 0.")
    d = C.shape[0]
    lam, V = signed_eigh(C)
    usable = int(usable_rank)
    if method == "abtt":
        kk = 2 if k is None else k
    else:
        kk = usable if k is None else k
    if kk < 1 or kk > d:
        raise OptionError(f"{param('k', kk)} must be between 1 and d = {d}.")
    if method != "abtt" and kk > usable:
        raise OptionError(
            f"{param('k', kk)} exceeds the usable rank {usable}: directions past it are below the numerical or "
            "sampling "
            "floor and would be blown up by 1/sqrt(lambda)."
        )
    g = np.zeros(d)
    g[:usable] = 1.0 / np.sqrt(lam[:usable] + eps)
    if method == "zca":
        M = (V * g) @ V.T
    elif method == "pca":
        M = V[:, :kk] * g[:kk]
    else:
        M = np.eye(d) - V[:, :kk] @ V[:, :kk].T
    zeroed = d - usable if method == "zca" else 0
    t = WhiteningTransform(method, np.asarray(mean, dtype=np.float64), M, float(eps), kk, ddof, source, fingerprint,
                           zeroed)
    return t, lam


DEFINITIONS = {
    "zca": "y = (x - mu) V diag(1/sqrt(lambda + eps)) V^T",
    "pca": "y = (x - mu) V_k diag(1/sqrt(lambda_k + eps))",
    "abtt": "y = (x - mu) - (x - mu) V_k V_k^T (all-but-the-top, Mu & Viswanath)",
}


@dataclass(frozen=True, slots=True)
class WhiteningResult:
    """What ``whiten`` did: the transform, where the rows went, and the figures after it.

    ``rows`` holds the whitened rows when no output file was asked for (library use); it is not
    part of ``to_dict()``."""

    transform: WhiteningTransform
    transform_from: str
    saved_to: str | None
    output: dict[str, Any]
    spectrum_after: Spectrum
    isotropy_after: Isotropy
    zeroed_directions: int
    rows: np.ndarray | None = None

    def to_dict(self) -> dict[str, Any]:
        t = self.transform
        return {
            "method": t.method,
            "definition": DEFINITIONS[t.method],
            "eps": t.eps,
            "k": t.k,
            "d_in": t.d_in,
            "d_out": t.d_out,
            "zeroed_directions": self.zeroed_directions,
            "zeroed_definition": "directions past the usable rank get scale 0 (never 1/sqrt of a floor eigenvalue)",
            "transform": self.transform_from,
            "saved_to": self.saved_to,
            "output": self.output,
            "spectrum_after": self.spectrum_after.to_dict(),
            "spectrum_after_definition": "eigenvalues of M^T C M, the covariance of the transformed rows "
            "(exact for the transform; the written file adds its dtype's rounding)",
            "isotropy_after": self.isotropy_after.to_dict(),
        }
