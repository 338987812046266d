"""Spikes: the eigenvalues that stand above the sampling bulk (``fit --spikes``; ``spectrum.spikes``).

A spike is a direction whose variance the bulk of the spectrum does not explain at this ``n`` and
``d``: a planted signal, a "massive activation", a rogue dimension. Which eigenvalues are spikes
depends on what the bulk is. An isotropic bulk spreads, by sampling, up to the Marchenko–Pastur
edge ``sigma^2 (1 + sqrt(d/n))^2``; but activations have a power-law bulk, whose largest eigenvalues
stand apart from each other and from the edge of any isotropic fit, and every one of them would be
listed. So the bulk here is the power-law population of the rank fit:

- **The bulk**: ``tau_j = C j^-alpha`` for ``j = 1 .. d - k`` (``alpha = 0`` is the isotropic bulk),
  fitted over the rank window of the first fit (its ranks shifted by the ``k`` spikes above it) so that
  its *expected sample spectrum* (the deterministic equivalent at the same ``n`` and ``d``, Gaussian
  rows; :func:`spectra_cli.analysis.equivalent.expected_eigenvalues`) matches the observed one, and
  continued to rank 1 and to rank ``d``.
- **The test** (sequential, as Kritchman & Nadler 2008 count signals): for ``k = 0, 1, ...`` the
  ``(k+1)``-th eigenvalue is tested against the largest sample eigenvalue that the bulk of ``d - k``
  directions makes: Tracy–Widom (real, ``beta = 1``) at the right edge of the bulk's deterministic
  equivalent, with El Karoui's (2007) centring ``mu`` and scale ``sigma`` (real data: Lee & Schnelli
  2016; the isotropic case is Johnstone 2001's); ``p = 1 - F_1((lambda - mu) / sigma)``, ``F_1`` by
  Bornemann's (2010) Fredholm determinant. The ranks above the window are tested; the first ``p`` at or
  above the level ends the list.
- **The BBP threshold**: a population spike ``ell`` separates from the bulk (in the limit) only when
  ``ell > 1 / c*``, ``c*`` the edge's critical point (Baik, Ben Arous & Péché 2005; a general bulk:
  Baik & Silverstein 2006); below it no test at this ``n`` can find it.

Each spike carries its leading coordinates (the features with the largest squared loadings on its
eigenvector); a spike whose one coordinate carries at least :data:`ROGUE_SHARE` of its direction is a
*rogue dimension* (Timkey & van Schijndel 2021: a handful of dimensions that dominate cosine
similarity; Sun et al. 2024's "massive activations").

Where the null is not the data's: rows with heavier tails than Gaussian, or rows that depend on each
other (tokens of one sequence), spread the top of the bulk further than Gaussian rows would, and a
near-threshold eigenvalue may be listed that is not a spike; on a power-law bulk the Tracy–Widom
centring is conservative (bench/bench_spikes.py: about 1-2 % of null runs at the 5 % level).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from scipy.optimize import brentq
from scipy.special import airy

from spectra_cli.analysis.equivalent import Grid, expected_eigenvalues, slope_of
from spectra_cli.analysis.population import ALPHA_BOUNDS, gauss_newton
from spectra_cli.errors import Message, param

#: The level of each test: an eigenvalue is a spike when its p-value is below it (one layer's ranks
#: tested in sequence; a batch of many layers tests many, so the level is small).
SPIKE_LEVEL = 1e-3
#: A spike whose largest squared loading is at least this is a rogue dimension (one coordinate holds
#: most of its direction).
ROGUE_SHARE = 0.5
#: The coordinates listed per spike.
FEATURES = 5
#: Gauss-Legendre nodes of the Fredholm determinant, and the length of the interval it covers.
_TW_NODES, _TW_SPAN = 64, 16.0
#: The law is matched over at most the window's first ranks ``k0 .. max(3 k0, k0 + HEAD_RANKS)``.
HEAD_RANKS = 50
#: The window must start within this share of the resolved ranks.
HEAD_SHARE = 0.25
#: A bulk law more uncertain than this at rank 1 (log factor: e^1.5 = 4.5) tests nothing.
MAX_SPREAD = 1.5
#: The note that the law overshoots the head: the largest eigenvalue this many Tracy-Widom scales below
#: the edge, and three times the law's error.
NOTE_BELOW = 6.0
#: Gauss-Hermite nodes over the bulk law's error.
_HERMITE_NODES = 16

METHOD = ("sequential test of the eigenvalues above the rank window (Kritchman & Nadler 2008): the (k+1)-th "
          "against the largest eigenvalue of the bulk of d - k directions, a power-law population "
          "tau_j = C j^-alpha fitted over the window (ranks shifted by k) through its deterministic equivalent at "
          "this n and d (Gaussian rows) and continued to rank 1; p = 1 - F_1((lambda - mu) / sigma), F_1 the "
          "Tracy-Widom law (beta = 1, Bornemann 2010), mu and sigma the bulk's edge and scale (El Karoui 2007; "
          "Johnstone 2001 for an isotropic bulk); the list ends at the first p at or above the level")


def tracy_widom_sf(s: float) -> float:
    """``P(TW_1 > s)``: one minus the Tracy–Widom distribution of the largest eigenvalue of the GOE.

    ``F_1(s) = det(I - K)`` on ``L^2(s, inf)`` with ``K(x, y) = Ai((x + y) / 2) / 2`` (Ferrari & Spohn
    2005; Sasamoto 2005), by Gauss–Legendre quadrature on ``[s, s + 16]`` (Bornemann 2010: exponential
    convergence; the Airy kernel beyond is below the double precision); ``1 - det`` from the logarithms
    of ``1 - kappa_i`` so that a small tail keeps its digits."""
    if not math.isfinite(s):
        return 0.0 if s > 0 else 1.0
    if s < -12.0:  # F_1(-12) is below 1e-40
        return 1.0
    if s > 120.0:  # 1 - F_1(s) ~ exp(-2 s^1.5 / 3) is below the smallest double (and Ai overflows far out)
        return 0.0
    x, w = np.polynomial.legendre.leggauss(_TW_NODES)
    x = s + (x + 1.0) * (_TW_SPAN / 2.0)
    w = w * (_TW_SPAN / 2.0)
    root = np.sqrt(w)
    K = 0.5 * airy((x[:, None] + x[None, :]) / 2.0)[0] * root[:, None] * root[None, :]
    kappa = np.linalg.eigvalsh(K)
    if np.any(kappa >= 1.0):
        return 1.0
    return float(min(max(-math.expm1(float(np.sum(np.log1p(-kappa)))), 0.0), 1.0)) + 0.0  # never -0.0


@dataclass(frozen=True, slots=True)
class Edge:
    """The right edge of the sample spectrum that a population ``tau`` makes at ``n`` rows.

    Attributes:
        mu: the edge (El Karoui 2007's centring of the largest eigenvalue).
        sigma: the Tracy–Widom scale of the largest eigenvalue there (``n^-2/3`` included).
        threshold: the BBP threshold ``1 / c*``: a population spike above it separates from the bulk.
    """

    mu: float
    sigma: float
    threshold: float


def bulk_edge(tau: np.ndarray, n: float) -> Edge:
    """The edge of the deterministic equivalent of a population ``tau`` (any order) at ``n`` rows.

    ``z(m) = -1/m + (1/n) sum_i tau_i / (1 + tau_i m)`` is the inverse of the companion Stieltjes
    transform; its critical point ``m*`` in ``(-1/tau_max, 0)`` gives the edge ``mu = z(m*)``, with
    ``c* = -m*``, ``sigma^3 = c*^-3 (1 + (1/n) sum_i (tau_i c* / (1 - tau_i c*))^3)`` times ``n^-2``
    (El Karoui 2007, Theorem 1; for ``tau = 1``: ``mu = (1 + sqrt(d/n))^2``, Johnstone 2001's scale)."""
    t = np.asarray(tau, dtype=np.float64)
    t = t[t > 0]
    top = float(t.max())

    def slope(m: float) -> float:  # z'(m)
        return 1.0 / (m * m) - float(np.sum((t / (1.0 + t * m)) ** 2)) / n

    eps = 1e-7 * min(1.0, math.sqrt(n / t.size))
    lo, hi = -(1.0 - 1e-13) / top, -eps / top
    m = brentq(slope, lo, hi, xtol=1e-15 / top, rtol=1e-14, maxiter=200) if slope(lo) < 0 < slope(hi) else lo
    c = -m
    mu = -1.0 / m + float(np.sum(t / (1.0 + t * m))) / n
    u = t * c / (1.0 - t * c)
    sigma = (1.0 + float(np.sum(u ** 3)) / n) ** (1.0 / 3.0) / c * n ** (-2.0 / 3.0)
    return Edge(mu=mu, sigma=sigma, threshold=1.0 / c)


@dataclass(frozen=True, slots=True)
class Spike:
    """One eigenvalue above the bulk (``spectrum.spikes.spikes[i]``)."""

    rank: int
    eigenvalue: float
    p_value: float
    statistic: float
    edge: float
    share: float
    features: tuple[int, ...] = ()
    loadings: tuple[float, ...] = ()

    @property
    def rogue(self) -> bool:
        """One coordinate carries at least :data:`ROGUE_SHARE` of the direction."""
        return bool(self.loadings) and self.loadings[0] >= ROGUE_SHARE

    def to_dict(self) -> dict[str, Any]:
        return {"rank": self.rank, "eigenvalue": self.eigenvalue, "p_value": self.p_value,
                "statistic": self.statistic, "edge": self.edge, "share": self.share,
                "features": list(self.features), "loadings": list(self.loadings), "rogue": self.rogue}


@dataclass(frozen=True, slots=True)
class Spikes:
    """What ``--spikes`` found (``spectrum.spikes``); ``reason`` says why nothing was tested."""

    spikes: tuple[Spike, ...] = ()
    level: float = SPIKE_LEVEL
    n: float = 0.0
    window: tuple[int, int] | None = None
    bulk_alpha: float | None = None
    bulk_scale: float | None = None
    bulk_edge: float | None = None
    threshold: float | None = None
    next_rank: int | None = None
    next_p_value: float | None = None
    reason: str | None = None
    note: str | None = None
    cost: dict[str, float] = field(default_factory=dict)

    @property
    def count(self) -> int | None:
        return None if self.reason is not None else len(self.spikes)

    @property
    def rogue_dimensions(self) -> tuple[int, ...]:
        return tuple(sorted({s.features[0] for s in self.spikes if s.rogue}))

    def to_dict(self) -> dict[str, Any]:
        return {
            "count": self.count,
            "spikes": [s.to_dict() for s in self.spikes],
            "rogue_dimensions": list(self.rogue_dimensions),
            "level": self.level,
            "n": self.n,
            "bulk": {"alpha": self.bulk_alpha, "scale": self.bulk_scale, "window": list(self.window or []) or None,
                     "edge": self.bulk_edge, "bbp_threshold": self.threshold},
            "next": {"rank": self.next_rank, "p_value": self.next_p_value},
            "reason": self.reason,
            "note": self.note,
            "method": METHOD,
            "definitions": {
                "spikes": "the eigenvalues above the bulk, largest first: rank, eigenvalue, p_value (of the "
                          "sequential test, under the bulk that the ranks below make), statistic "
                          "((lambda - mu) / sigma, Tracy-Widom units), edge (mu, where the bulk's largest "
                          "eigenvalue sits), share (lambda / sum lambda), features and loadings (the coordinates "
                          f"with the largest squared loadings on its eigenvector, at most {FEATURES}), rogue (one "
                          f"coordinate carries at least {ROGUE_SHARE:g} of it)",
                "bulk": "the power-law population behind the bulk (tau_j = scale j^-alpha, fitted over window in "
                        "the ranks below the spikes), its sample edge (edge) and the BBP threshold: population "
                        "spikes below it do not separate from the bulk at this n and d",
                "next": "the first rank tested and not a spike, and its p-value",
                "n": "the degrees of freedom the sampling model uses (rows - 1 centred; Kish's effective rows "
                     "when weighted)",
            },
            "cost": dict(self.cost),
        }


def null_sf(lam: float, edge: Edge, spread: float) -> float:
    """``P(lambda_max > lam)`` for the bulk's largest eigenvalue ``mu e^(spread u) + sigma TW_1``, ``u`` standard
    normal (the bulk law's own error at its top, relative): Gauss-Hermite quadrature over ``u``."""
    if spread <= 0:
        return tracy_widom_sf((lam - edge.mu) / edge.sigma)
    u, w = np.polynomial.hermite_e.hermegauss(_HERMITE_NODES)
    w = w / w.sum()
    p = sum(wi * tracy_widom_sf((lam - edge.mu * math.exp(min(spread * ui, 700.0))) / edge.sigma)
            for ui, wi in zip(u, w, strict=True))
    return min(max(float(p), 0.0), 1.0) + 0.0


def law_spread(residuals: np.ndarray, window: tuple[int, int], k: int, alpha_se: float | None) -> float:
    """The relative error of the bulk law continued to its rank 1 from the window (ranks less ``k``): the
    larger of the least-squares prediction error at ``j = 1`` that the ``residuals`` of the law's match over the
    window make (its misfit) and ``alpha_se`` times the window's mean log rank (the exponent's sampling
    error, which the correlated eigenvalues leave out of the scatter)."""
    x = np.log(np.arange(window[0] - k, window[1] - k + 1, dtype=np.float64))
    xc = x - x.mean()
    s2 = float(residuals @ residuals) / max(x.size - 2, 1)
    ls = math.sqrt(s2 * (1.0 / x.size + x.mean() ** 2 / float(xc @ xc)))
    return max(ls, (alpha_se or 0.0) * float(x.mean()))


def _bulk_law(lam: np.ndarray, n: float, window: tuple[int, int], k: int,
              start: float | None, dim: int) -> tuple[float, float, np.ndarray, int]:
    """``(alpha, C, residuals, evaluations)`` of the power-law bulk of ``lam[k:]`` (``d - k`` directions),
    matched over the window's ranks less ``k``."""
    lb = lam[k:]
    d = dim - k  # the bulk's directions: every one of the d less the k spikes, whatever was computed
    k0, k1 = window[0] - k, window[1] - k
    ranks = np.arange(k0, k1 + 1)
    y = np.log(lb[ranks - 1])
    j = np.arange(1, d + 1, dtype=np.float64)
    grid = Grid()
    c = d / n

    def f(a: np.ndarray) -> np.ndarray:
        tau = j ** -float(np.clip(a[0], *ALPHA_BOUNDS))
        return np.log(np.maximum(expected_eigenvalues(tau, c, k1, grid=grid)[ranks - 1], 1e-300))

    first = float(np.clip(slope_of(y, k0) if start is None else start, *ALPHA_BOUNDS))
    a, f0, evals, _ = gauss_newton(y, np.array([first]), f)
    level = float(np.mean(y - f0))
    return float(np.clip(a[0], *ALPHA_BOUNDS)), math.exp(level), y - level - f0, evals


def find_spikes(eigenvalues: np.ndarray, *, n: float, window: tuple[int, int], total: float | None = None,
                vectors: Callable[[int], np.ndarray] | None = None, level: float = SPIKE_LEVEL,
                alpha_se: float | None = None, dim: int | None = None) -> Spikes:
    """The spikes of a sample spectrum (the module docstring has the model and the test).

    ``eigenvalues``: descending (the leading ones suffice: those down to the window's end);
    ``n``: the sample's degrees of freedom; ``window``: the rank fit's (1-based, inclusive): the ranks
    above it are tested; ``total``: the total variance (the spikes' ``share``; default the sum given);
    ``vectors(k)``: the leading ``k`` eigenvectors as the columns of a ``d x k`` array (their loadings
    name the features); ``dim``: the dimension d (default: the eigenvalues given; fewer rows than
    features, or only the leading eigenvalues computed, give fewer). The law is matched over the head of
    the window (ranks ``k0 .. max(3 k0, k0 + 50)`` at most: the ranks that carry it to rank 1), in units of
    the largest eigenvalue (the test does not depend on the data's scale)."""
    t0 = time.perf_counter()
    lam = np.asarray(eigenvalues, dtype=np.float64)
    dim = int(dim) if dim is not None else int(lam.size)
    k0, k1 = (int(v) for v in window)
    k1 = min(k1, max(3 * k0, k0 + HEAD_RANKS))
    total = float(lam.sum()) if total is None else float(total)
    unit = float(lam[0]) if lam.size and lam[0] > 0 else 1.0

    def skip(reason: str) -> Spikes:
        return Spikes(level=level, n=float(n), window=(k0, k1), reason=reason)

    if k0 < 2:
        return skip(Message(f"the rank window starts at rank {k0}: no rank above it to test; give a window that "
                            f"starts below the ranks to test ({param('window', 'K1:K2')} with K1 > 1)"))
    if n < 4:
        return skip(f"{n:.3g} degrees of freedom: too few rows for a sampling bulk (the test needs at least 4: five "
                    "rows when centred)")
    if lam.size < k1 or not np.all(lam[:k1] > 0):
        return skip(Message(f"the window {k0}:{k1} reaches past the non-zero eigenvalues: the bulk cannot be fitted "
                            f"there; end the window before them ({param('window', 'K1:K2')})"))
    if k1 - k0 + 1 < 3:
        return skip(Message(f"the window {k0}:{k1} holds fewer than 3 ranks: the bulk cannot be fitted; widen it "
                            f"({param('window', 'K1:K2')} with K2 >= K1 + 2)"))
    resolved = min(dim, int(math.floor(n)) + 1)
    if k0 > HEAD_SHARE * resolved:
        return skip(f"the window starts at rank {k0}, past the first {HEAD_SHARE:.0%} of the {resolved} ranks the "
                    "sample resolves: a law fitted that far down does not speak for the top (start the window "
                    "nearer the ranks to test)")
    found: list[tuple[int, float, float, float]] = []
    alpha: float | None = None
    evals = 0
    last: tuple[float, float, Edge] | None = None  # the bulk the last rank tested was held against
    next_rank = next_p = None
    unit_lam = lam / unit
    note = None

    def too_uncertain(spread: float) -> str:
        return (f"the bulk law carried from ranks {k0}..{k1} to rank 1 is uncertain by a factor "
                f"{math.exp(min(spread, 700.0)):.3g} (its misfit over the window, or alpha's error): start the window "
                "higher (nearer the ranks to test)")

    # first the plain log-log line over the window: a window whose law cannot be carried to rank 1 is refused
    # before the deterministic equivalent is matched (far down the spectrum, that match is the costly part)
    x = np.log(np.arange(k0, k1 + 1, dtype=np.float64))
    y = np.log(unit_lam[k0 - 1:k1])
    line = np.polyval(np.polyfit(x, y, 1), x)
    straight = law_spread(y - line, (k0, k1), 0, alpha_se)
    if straight > MAX_SPREAD:
        return skip(too_uncertain(straight))
    for k in range(k0 - 1):
        alpha, scale, resid, e = _bulk_law(unit_lam, n, (k0, k1), k, alpha, dim)
        evals += e
        edge = bulk_edge(scale * np.arange(1, dim - k + 1, dtype=np.float64) ** -alpha, n)
        spread = law_spread(resid, (k0, k1), k, alpha_se)
        if k == 0 and spread > MAX_SPREAD:
            return skip(too_uncertain(spread))
        last = (alpha, scale * unit, Edge(edge.mu * unit, edge.sigma * unit, edge.threshold * unit))
        stat = (float(unit_lam[k]) - edge.mu) / edge.sigma
        p = null_sf(float(unit_lam[k]), edge, spread)
        if k == 0 and stat < -NOTE_BELOW and edge.mu > float(unit_lam[0]) * math.exp(3.0 * spread):
            note = (f"the bulk's power law carried to rank 1 ({last[2].mu:.4g}) lies above the largest eigenvalue "
                    f"({lam[0]:.4g}): the head of the spectrum bends below the law, and no rank can stand above it; "
                    "a window that starts nearer rank 1 fits the head's own law")
        if p >= level:
            next_rank, next_p = k + 1, p
            break
        found.append((k, p, stat, edge.mu * unit))
    features: list[tuple[tuple[int, ...], tuple[float, ...]]] = [((), ())] * len(found)
    if found and vectors is not None:
        V = np.asarray(vectors(len(found)), dtype=np.float64)
        for i in range(len(found)):
            v2 = V[:, i] ** 2
            v2 = v2 / v2.sum() if v2.sum() > 0 else v2
            top = np.argsort(-v2, kind="stable")[:FEATURES]
            features[i] = (tuple(int(t) for t in top), tuple(float(v2[t]) for t in top))
    spikes = tuple(Spike(rank=k + 1, eigenvalue=float(lam[k]), p_value=p, statistic=stat, edge=mu,
                         share=float(lam[k]) / total if total > 0 else 0.0, features=f, loadings=ld)
                   for (k, p, stat, mu), (f, ld) in zip(found, features, strict=True))
    assert last is not None
    a, s, edge = last
    return Spikes(spikes=spikes, level=level, n=float(n), window=(k0, k1), bulk_alpha=a, bulk_scale=s,
                  bulk_edge=edge.mu, threshold=edge.threshold, next_rank=next_rank, next_p_value=next_p, note=note,
                  cost={"seconds": time.perf_counter() - t0, "evaluations": float(evals)})
