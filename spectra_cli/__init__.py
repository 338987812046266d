"""spectra: covariance spectra, power-law exponents and effective ranks of embedding matrices."""

from __future__ import annotations

__version__ = "0.1.0"

__all__ = ["__version__"]
