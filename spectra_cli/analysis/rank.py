"""Effective ranks of a spectrum, each under its own name; their labels and definitions are in the registry
(:mod:`spectra_cli.registry`)."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from spectra_cli import registry
from spectra_cli.eigen.decomposition import Spectrum

RANKME_EPS = 1e-7

#: The definitions a report's ``rank`` section carries: each rank's from the registry, and the rules.
DEFINITIONS = {
    **registry.definitions("rank"),
    "floors": "eigenvalues at or below the numerical floor count as 0 in every rank",
    "top_k": "with only the leading k of d eigenvalues (--top): the participation ratio and stable rank are "
    "exact (from tr C and ||C||_F^2); the entropy rank is bounded: the other d - k eigenvalues hold the rest of "
    "the trace, each at most lambda_k, and the entropy is largest when they share it equally and smallest when "
    "it is packed into as few as possible; RankMe is not available; numerical_rank and k90/k95/k99 are exact when "
    "reached within k, else lower bounds",
}


@dataclass(frozen=True, slots=True)
class EffectiveRanks:
    participation_ratio: float
    entropy_rank: float | None
    rankme: float | None
    stable_rank: float
    numerical_rank: int
    k90: int | None
    k95: int | None
    k99: int | None
    rankme_source: str | None = None
    #: On the top-k route: each rank's status (``exact``, ``bounded``, ``lower bound``, ``not available``)
    #: and the interval of the bounded ones; None when every eigenvalue was computed.
    exactness: dict[str, str] | None = None
    bounds: dict[str, tuple[float, float]] | None = None
    #: With ``--population``: the bias-corrected estimate of the population's participation ratio.
    participation_ratio_population: float | None = None
    #: Standard errors by rank (:mod:`spectra_cli.analysis.uncertainty`), the ranks without one and why, and how.
    se: dict[str, float | None] | None = None
    se_missing: dict[str, str] | None = None
    se_method: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "participation_ratio": self.participation_ratio,
            "participation_ratio_population": self.participation_ratio_population,
            "entropy_rank": self.entropy_rank,
            "exactness": self.exactness,
            "bounds": {k: list(v) for k, v in self.bounds.items()} if self.bounds is not None else None,
            "rankme": self.rankme,
            "rankme_source": self.rankme_source,
            "stable_rank": self.stable_rank,
            "numerical_rank": self.numerical_rank,
            "k90": self.k90,
            "k95": self.k95,
            "k99": self.k99,
            "se": self.se,
            "se_missing": self.se_missing,
            "se_method": self.se_method,
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
    with np.errstate(over="ignore", invalid="ignore"):
        total = float(lam.sum())
    if not math.isfinite(total):  # a sum past float64's range: the same shares from lam / its largest
        top = float(np.max(lam)) if lam.size else 0.0
        if not (math.isfinite(top) and top > 0):
            return float("nan")  # (an infinite or NaN eigenvalue has no shares)
        lam = lam / top
        total = float(lam.sum())
    if total <= 0:
        return 0.0
    q = lam[lam > 0] / total
    q = q[q > 0]  # (a positive eigenvalue below 1e-308 of the total underflows to 0: it adds nothing)
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


def _plogp(mass: float, total: float) -> float:
    q = mass / total
    return -q * math.log(q) if q > 0 else 0.0


def entropy_rank_bounds(leading: np.ndarray, trace: float, d: int) -> tuple[float, float]:
    """The interval of the entropy rank given the leading k eigenvalues (descending, resolved)
    and the trace over all d.

    The other d - k eigenvalues hold ``M = trace - sum(leading)``, each in ``[0, lambda_k]``. The
    entropy is Schur-concave, so it is largest when they share M equally and smallest when M is
    packed into ``floor(M / lambda_k)`` eigenvalues equal to ``lambda_k`` and one remainder."""
    lam = leading[leading > 0]
    if trace <= 0 or not lam.size:
        return 0.0, 0.0
    known = float(sum(_plogp(float(v), trace) for v in lam))
    rest = max(trace - float(lam.sum()), 0.0)
    others = d - leading.size
    if rest <= 0 or others <= 0:
        return math.exp(known), math.exp(known)
    hi = known + others * _plogp(rest / others, trace)
    last = float(lam[-1])
    full = min(int(rest // last), others)
    remainder = max(rest - full * last, 0.0)
    lo = known + full * _plogp(last, trace) + (_plogp(remainder, trace) if full < others else 0.0)
    return math.exp(lo), math.exp(hi)


def effective_ranks(spec: Spectrum, uncentered: Spectrum | None = None,
                    rankme_source: str | None = None) -> EffectiveRanks:
    """Every effective rank of a spectrum (its floors resolved); RankMe from ``uncentered`` (the
    uncentred spectrum) when given. On the top-k route, :func:`top_k_ranks`."""
    if spec.top is not None:
        return top_k_ranks(spec)
    resolved = spec.resolved()
    return EffectiveRanks(
        participation_ratio=participation_ratio(resolved),
        entropy_rank=entropy_rank(resolved),
        rankme=rankme(uncentered.eigenvalues, uncentered.numerical_floor) if uncentered is not None else None,
        rankme_source=rankme_source,
        stable_rank=stable_rank(resolved),
        numerical_rank=spec.numerical_rank,
        k90=spec.k_for(0.90),
        k95=spec.k_for(0.95),
        k99=spec.k_for(0.99),
    )


def top_k_ranks(spec: Spectrum) -> EffectiveRanks:
    """The ranks of a spectrum of which only the leading k eigenvalues are known (with the exact
    trace and Frobenius norm), each marked exact, bounded, a lower bound or not available."""
    assert spec.top is not None
    top = spec.top
    resolved = spec.resolved()
    k = resolved.size
    lo, hi = entropy_rank_bounds(resolved, spec.total_variance, spec.n_features)
    ks = {name: spec.k_for(f) for name, f in (("k90", 0.90), ("k95", 0.95), ("k99", 0.99))}
    all_above = spec.numerical_rank == k and k < spec.n_features
    exactness = {"participation_ratio": "exact", "stable_rank": "exact",
                 "entropy_rank": "bounded", "rankme": "not available",
                 "numerical_rank": "lower bound" if all_above else "exact"}
    bounds: dict[str, tuple[float, float]] = {"entropy_rank": (lo, hi)}
    if all_above:
        bounds["numerical_rank"] = (float(k), float(spec.n_features))
    for name, value in ks.items():
        exactness[name] = "exact" if value is not None else "lower bound"
        if value is None:
            bounds[name] = (float(k + 1), float(spec.n_features))
    return EffectiveRanks(
        participation_ratio=top.participation_ratio,
        entropy_rank=None,
        rankme=None,
        rankme_source=f"not available: only the leading {k} eigenvalues were computed (top-k route)",
        stable_rank=spec.total_variance / float(resolved[0]) if k and resolved[0] > 0 else 0.0,
        numerical_rank=spec.numerical_rank,
        k90=ks["k90"], k95=ks["k95"], k99=ks["k99"],
        exactness=exactness,
        bounds=bounds,
    )


# The ranks that have a standard error: each one's value and gradient in the eigenvalues (descending, scale-free:
# u = lambda / lambda_1), read by the errors' delta method and row groups (spectra_cli.analysis.uncertainty).
def _pr_grad(lam: np.ndarray) -> tuple[float, np.ndarray]:
    A, B = float(lam.sum()), float(np.dot(lam, lam))
    return A * A / B, 2.0 * A / B - 2.0 * A * A * lam / (B * B)


def _entropy_grad(lam: np.ndarray) -> tuple[float, np.ndarray]:
    A = float(lam.sum())
    q = lam / A
    logq = np.log(np.where(q > 0, q, 1.0))
    H = -float(np.dot(q, logq))
    er = math.exp(H)
    return er, er * (-(logq + H) / A) * (q > 0)


def _stable_grad(lam: np.ndarray) -> tuple[float, np.ndarray]:
    A, top = float(lam.sum()), float(lam[0])
    g = np.full(lam.size, 1.0 / top)
    g[0] -= A / (top * top)
    return A / top, g


#: Each rank that is a function of the resolved eigenvalues alone, by name (what a sequence report computes per
#: position where the registry lists the rank there).
RANKS: dict[str, Callable[[np.ndarray], Any]] = {
    "participation_ratio": lambda lam: participation_ratio(lam), "entropy_rank": lambda lam: entropy_rank(lam),
    "stable_rank": lambda lam: stable_rank(lam)}
GRADIENTS: dict[str, Callable[[np.ndarray], tuple[float, np.ndarray]]] = {
    "participation_ratio": _pr_grad, "entropy_rank": _entropy_grad, "stable_rank": _stable_grad}
#: The ranks that are functions of the top eigenvalue and the trace alone, ``fn(lambda_1, tr)``: their grouped errors
#: come from a delete-a-group jackknife of the top eigenvalue, not the linearisation.
TOP_FUNCTIONS: dict[str, Callable[[Any, Any], Any]] = {"stable_rank": lambda top, total: total / top}
#: The ranks no standard error is given for, and why.
NO_ERROR = {
    "numerical_rank": "a count of eigenvalues above the rounding floor: not a sampling estimate",
    "k90": "a step function of the eigenvalues (no derivative)", "k95": "a step function of the eigenvalues",
    "k99": "a step function of the eigenvalues",
    "rankme": "computed on the uncentred spectrum (a second decomposition): not derived",
    "participation_ratio_population": "the population estimate's spread is not derived (its bias correction is "
                                      "first order)",
}


def rank_gradients(lam: np.ndarray) -> dict[str, np.ndarray | None]:
    """The gradients in the eigenvalues (``lam`` descending, floors resolved to 0) of every rank with a standard
    error (:data:`GRADIENTS`); None where there is no spectrum."""
    lam = np.clip(np.asarray(lam, dtype=np.float64), 0.0, None)
    if not lam.size or not lam[0] > 0:
        return dict.fromkeys(GRADIENTS)
    u = lam / lam[0]  # scale-free: d f / d lambda = (d f / d u) / lambda_1
    return {name: fn(u)[1] / lam[0] for name, fn in GRADIENTS.items()}
