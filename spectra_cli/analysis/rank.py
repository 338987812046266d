"""Effective ranks of a spectrum, each under its own name and definition (SPEC.md)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

RANKME_EPS = 1e-7

DEFINITIONS = {
    "participation_ratio": "(sum lambda)^2 / sum lambda^2 (seed 003)",
    "entropy_rank": "exp(-sum q log q), q = lambda / sum lambda (Roy & Vetterli 2007)",
    "rankme": "exp(-sum p log p), p = sigma / sum sigma + 1e-7, sigma the singular values "
    "of the uncentred matrix (Garrido et al. 2023)",
    "stable_rank": "sum lambda / lambda_1 = tr C / ||C|| (seed 001 §7.5)",
    "numerical_rank": "eigenvalues above the numerical floor",
    "k90": "smallest k whose cumulative explained variance reaches 0.90 (k95, k99 likewise)",
    "floors": "eigenvalues at or below the numerical floor count as 0 in every rank",
}


@dataclass(frozen=True, slots=True)
class EffectiveRanks:
    participation_ratio: float
    entropy_rank: float
    rankme: float | None
    stable_rank: float
    numerical_rank: int
    k90: int | None
    k95: int | None
    k99: int | None
    rankme_source: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "participation_ratio": self.participation_ratio,
            "entropy_rank": self.entropy_rank,
            "rankme": self.rankme,
            "rankme_source": self.rankme_source,
            "stable_rank": self.stable_rank,
            "numerical_rank": self.numerical_rank,
            "k90": self.k90,
            "k95": self.k95,
            "k99": self.k99,
            "definitions": DEFINITIONS,
        }


def participation_ratio(lam: np.ndarray) -> float:
    top = float(np.max(lam)) if lam.size else 0.0
    if top <= 0:
        return 0.0
    q = lam / top  # scale-free: eigenvalues near 1e300 would overflow their squares
    s = float(q.sum())
    return s * s / float(np.dot(q, q))


def entropy_rank(lam: np.ndarray) -> float:
    total = float(lam.sum())
    if total <= 0:
        return 0.0
    q = lam[lam > 0] / total
    return float(np.exp(-np.sum(q * np.log(q))))


def stable_rank(lam: np.ndarray) -> float:
    return float(lam.sum() / lam[0]) if lam.size and lam[0] > 0 else 0.0


def rankme(second_moment_eigenvalues: np.ndarray, floor: float) -> float:
    """RankMe from the eigenvalues of the uncentred second moment (sigma^2 up to a factor)."""
    lam = np.where(second_moment_eigenvalues > floor, second_moment_eigenvalues, 0.0)
    sigma = np.sqrt(lam)
    total = float(sigma.sum())
    if total <= 0:
        return 0.0
    p = sigma / total + RANKME_EPS
    return float(np.exp(-np.sum(p * np.log(p))))
