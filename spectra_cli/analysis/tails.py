"""Which law the tail follows: the density fit's tail (every eigenvalue ``>= x_min``) fitted by four continuous laws
normalised on ``[x_min, inf)``, each by maximum likelihood, and compared by log-likelihood ratios (Clauset, Shalizi &
Newman, SIAM Review 2009; the ``powerlaw`` package's ``distribution_compare``, Alstott et al. 2014):

- power law ``p(x) = (a - 1) / x_min (x / x_min)^-a`` (``a = 1 + n / sum log(x / x_min)``, the density fit's);
- truncated power law ``p(x) = L^(1 - a) x^-a e^(-L x) / Gamma(1 - a, L x_min)`` (upper incomplete gamma of any real
  order), fitted over ``a`` real and ``L > 0``; its optimum at ``L -> 0`` is the power law;
- lognormal ``p(x) = exp(-(log x - mu)^2 / (2 s^2)) / (x s sqrt(2 pi) P(X >= x_min))``;
- exponential ``p(x) = L e^(-L (x - x_min))`` (``L = 1 / (mean x - x_min)``).

A comparison of laws 1 and 2 is ``R = sum_i (log p1(x_i) - log p2(x_i))`` (positive favours 1) with Vuong's two-sided
``p = erfc(|R| / sqrt(2 n s^2))`` (``s^2`` the variance of the pointwise differences), or, for the nested power law
within the truncated one, Wilks' ``p = P(chi2_1 > 2 |R|)``, as ``powerlaw`` computes them. The preferred law is the
power law unless an alternative beats it (``R < 0`` at ``p <`` :data:`P_DECIDES`, Clauset et al.'s 0.1); then the
alternative of largest likelihood among those that do. The standard errors of the truncated power law's and the
lognormal's parameters come from the observed information (the inverse Hessian of the negative log-likelihood at the
optimum), which ``powerlaw`` does not give.

AlphaPruning's layer alpha (Lu et al., NeurIPS 2024), a Hill fit whose ``x_min`` is searched near the peak of the
ESD's log-histogram, is :func:`alphapruning_alpha` (a WeightWatcher-convention column: it is defined on ``W^T W``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from spectra_cli.analysis.density import hill

#: A comparison decides at this p-value (Clauset, Shalizi & Newman 2009).
P_DECIDES = 0.1
#: The laws, in the order they are reported.
LAWS = ("power_law", "truncated_power_law", "lognormal", "exponential")
#: The comparisons made: the power law against each alternative, and the two two-parameter laws.
PAIRS = (("power_law", "truncated_power_law"), ("power_law", "lognormal"), ("power_law", "exponential"),
         ("truncated_power_law", "lognormal"))
#: A tail needs this many points for a two-parameter fit to mean anything.
MIN_TAIL = 5
#: Below this many points the truncated law's standard errors understate its spread (measured: 5-7x at 16 points,
#: 1.0-1.3x from 67 up; bench/bench_tails.py).
SHORT_TAIL = 30
_EULER = float(np.euler_gamma)


# -- the upper incomplete gamma function of any real order --------------------------------------------------------
def _lgamma1p(e: float) -> float:
    """``log Gamma(1 + e)``, accurate also for tiny ``|e|``."""
    from scipy import special

    if abs(e) > 0.2:
        return float(special.gammaln(1.0 + e))
    k = np.arange(2, 60)
    terms = (-e) ** k * special.zeta(k) / k
    return -_EULER * e + float(np.sum(terms[::-1]))


def _gamma_series(s: float, x: float) -> float:
    """``Gamma(s, x)`` for ``x < 1.5``: ``Gamma(s) - x^s sum_k (-x)^k / (k! (s + k))``, the pole of ``Gamma(s)`` at
    ``s = -m`` and the ``k = m`` term combined so that nothing cancels near ``s = 0, -1, -2, ...``."""
    from scipy import special

    log_x = math.log(x)
    m = int(round(-s)) if s <= 0.5 else -1
    total, term = 0.0, 1.0
    for k in range(400):
        if k != m:
            c = term / (s + k)
            total += c
            if k > m and abs(c) < 1e-17 * abs(total):
                break
        term *= -x / (k + 1)
    series = math.exp(s * log_x) * total
    if m < 0:
        head = float(special.gamma(s))
    else:
        eps = s + m
        sign = (-1.0) ** m / math.factorial(m)
        if eps == 0.0:
            head = sign * (-_EULER + sum(1.0 / i for i in range(1, m + 1)) - log_x)
        else:
            log_p = _lgamma1p(eps) - sum(math.log1p(-eps / i) for i in range(1, m + 1))
            head = sign * (math.expm1(log_p) - math.expm1(eps * log_x)) / eps
    return head - series


def _log_gamma_cf(s: float, x: float) -> float:
    """``log Gamma(s, x)`` for ``x >= 1.5`` by its continued fraction (modified Lentz), for every real ``s``."""
    tiny = 1e-300
    b = x + 1.0 - s
    c, d = 1.0 / tiny, 1.0 / b
    h = d
    for i in range(1, 10_000):
        an = -i * (i - s)
        b += 2.0
        d = an * d + b
        d = tiny if abs(d) < tiny else d
        c = b + an / c
        c = tiny if abs(c) < tiny else c
        d = 1.0 / d
        delta = d * c
        h *= delta
        if abs(delta - 1.0) < 1e-16:
            break
    return -x + s * math.log(x) + math.log(h)


def log_upper_gamma(s: float, x: float) -> float:
    """``log Gamma(s, x) = log int_x^inf t^(s - 1) e^-t dt`` for real ``s`` and ``x > 0``: for ``s > 0`` from SciPy's
    regularised function and ``log Gamma(s)`` (its continued fraction where that underflows), for ``s <= 0`` a series
    (``x < 1.5``) or the continued fraction (within about 1e-13 relative of mpmath's ``gammainc`` for moderate
    ``|s|``); NaN where neither can be evaluated in float64 (the fits then treat the point as impossible)."""
    from scipy import special

    if not x > 0 or not math.isfinite(s) or not math.isfinite(x):
        return math.nan
    try:
        if s > 0:
            q = float(special.gammaincc(s, x))
            if q > 1e-280:
                return math.log(q) + float(special.gammaln(s))
            return _log_gamma_cf(s, x) if x >= 1.0 else math.nan
        if x < 1.5:
            g = _gamma_series(s, x)
            return math.log(g) if g > 0 and math.isfinite(g) else math.nan
        return _log_gamma_cf(s, x)
    except (OverflowError, ValueError, ZeroDivisionError):
        return math.nan


# -- the laws ------------------------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class TailLaw:
    """One law fitted to the tail: its parameters (and their standard errors, where it has them) and log-likelihood."""

    name: str
    params: dict[str, float]
    se: dict[str, float | None]
    loglikelihood: float
    note: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"params": dict(self.params), "se": dict(self.se), "loglikelihood": self.loglikelihood,
                **({"note": self.note} if self.note else {})}


@dataclass(frozen=True, slots=True)
class TailComparison:
    """Laws ``a`` against ``b`` on the same tail: ``R`` (positive favours ``a``), ``R / sqrt(n s^2)``, ``p``."""

    a: str
    b: str
    ratio: float
    normalized: float | None
    p: float
    nested: bool

    @property
    def favours(self) -> str | None:
        """The law the comparison decides for (``p <`` :data:`P_DECIDES`), or None (inconclusive)."""
        if not self.p < P_DECIDES or self.ratio == 0:
            return None
        return self.a if self.ratio > 0 else self.b

    def to_dict(self) -> dict[str, Any]:
        return {"a": self.a, "b": self.b, "loglikelihood_ratio": self.ratio, "normalized_ratio": self.normalized,
                "p": self.p, "test": "Wilks (nested: chi2 with 1 dof)" if self.nested else "Vuong (two-sided)",
                "favours": self.favours}


@dataclass(frozen=True, slots=True)
class TailModels:
    """The density fit's tail under four laws, their comparisons and the preferred law."""

    xmin: float
    n_tail: int
    laws: tuple[TailLaw, ...]
    comparisons: tuple[TailComparison, ...]
    preferred: str
    reason: str

    def law(self, name: str) -> TailLaw:
        return next(x for x in self.laws if x.name == name)

    def to_dict(self) -> dict[str, Any]:
        return {
            "definition": "the density fit's tail (lambda >= xmin) under each law normalised on [xmin, inf), each by "
                          "maximum likelihood; comparisons as Clauset, Shalizi & Newman (2009) and the powerlaw "
                          f"package: R > 0 favours a; a comparison decides at p < {P_DECIDES:g}; the power law's alpha "
                          "here is the maximum-likelihood 1 + n / sum log(lambda / xmin) (WeightWatcher's small-N fit "
                          "reports the bias-corrected 1 + (n - 1) / sum instead)",
            "xmin": self.xmin, "n_tail": self.n_tail,
            "laws": {x.name: x.to_dict() for x in self.laws},
            "comparisons": [c.to_dict() for c in self.comparisons],
            "preferred": self.preferred, "preferred_reason": self.reason,
        }


def alphapruning_alpha(eigenvalues: np.ndarray, bins: int = 100) -> tuple[float, float, int] | None:
    """AlphaPruning's layer alpha (Lu et al., NeurIPS 2024; its ``net_esd_estimator`` with its default
    ``fix_fingers='xmin_peak'``) of the eigenvalues of ``W^T W``: the peak of a ``bins``-bin histogram of ``log10
    lambda`` sets ``p``; the Hill fit ``alpha = 1 + n / sum log(lambda / x_min)`` (``n`` counting ``x_min``) is made
    at each candidate ``x_min`` from ``log10(0.95 p)`` to ``1.5 p`` (its lower bound compares a log10 value with
    eigenvalues, as its code does), and the one of least KS distance is kept: ``(alpha, x_min, n)``."""
    e = np.sort(np.asarray(eigenvalues, dtype=np.float64))
    e = e[e > 0]
    if e.size < 3:
        return None
    h = np.log10(e)
    counts, edges = np.histogram(h, bins=bins, range=(float(h.min()), float(h.max())))
    peak = 10.0 ** float(edges[int(np.argmax(counts))])
    lo, hi = math.log10(0.95 * peak), 1.5 * peak
    best: tuple[float, float, float, int] | None = None
    for i in range(e.size - 1):
        if e[i] < lo:
            continue
        if e[i] > hi:
            break
        a, ks = hill(e[i:], float(e[i]))  # (the Hill MLE and its KS distance, as the density fit's)
        if not math.isfinite(a):
            continue
        if best is None or ks < best[0]:
            best = (ks, a, float(e[i]), e.size - i)
    return None if best is None else (best[1], best[2], best[3])


def _hessian(f: Any, theta: list[float]) -> np.ndarray:
    t = np.asarray(theta, dtype=np.float64)
    h = 1e-4 * np.maximum(np.abs(t), 1e-3)
    k = t.size
    out = np.empty((k, k))
    f0 = f(t)
    for i in range(k):
        ei = np.zeros(k)
        ei[i] = h[i]
        out[i, i] = (f(t + ei) - 2 * f0 + f(t - ei)) / h[i] ** 2
        for j in range(i + 1, k):
            ej = np.zeros(k)
            ej[j] = h[j]
            out[i, j] = out[j, i] = (f(t + ei + ej) - f(t + ei - ej) - f(t - ei + ej) + f(t - ei - ej)) / (
                4 * h[i] * h[j])
    return out


def _errors(f: Any, theta: list[float], names: tuple[str, str]) -> dict[str, float | None]:
    """Standard errors from the observed information (None where the Hessian is not positive definite)."""
    try:
        h = _hessian(f, theta)
        cov = np.linalg.inv(h)
    except (np.linalg.LinAlgError, ValueError, OverflowError):
        return dict.fromkeys(names)
    if not np.all(np.isfinite(cov)) or np.any(np.linalg.eigvalsh(h) <= 0):
        return dict.fromkeys(names)
    return {n: float(math.sqrt(v)) for n, v in zip(names, np.diag(cov), strict=True)}


def _truncated(x: np.ndarray, xmin: float, alpha_pl: float, ll_pl: np.ndarray) -> tuple[TailLaw, np.ndarray]:
    """The truncated power law on the tail ``x >= xmin`` (``ll_pl``: the power law's log-likelihoods there, at
    ``alpha_pl``, the optimum where the cut goes to 0) and its log-likelihoods."""
    n = x.size
    slx, sx = float(np.sum(np.log(x))), float(np.sum(x))

    def nll(alpha: float, lam: float) -> float:
        if not lam > 0 or not math.isfinite(alpha) or not math.isfinite(lam):
            return math.inf
        lg = log_upper_gamma(1.0 - alpha, lam * xmin)
        if not math.isfinite(lg):
            return math.inf
        return alpha * slx + lam * sx - n * (1.0 - alpha) * math.log(lam) + n * lg

    def value_and_gradient(t: np.ndarray) -> tuple[float, np.ndarray]:
        """The negative log-likelihood over ``(alpha, log L)``: d/dL in closed form (d/dx Gamma(s, x) = -x^(s-1)
        e^-x), d/dalpha by a central difference of log Gamma in its order."""
        try:
            alpha, lam = float(t[0]), math.exp(float(t[1]))
            z = lam * xmin
            lg = log_upper_gamma(1.0 - alpha, z)
            f = alpha * slx + lam * sx - n * (1.0 - alpha) * math.log(lam) + n * lg
            h = 1e-6 * max(1.0, abs(alpha))
            d_order = (log_upper_gamma(1.0 - alpha - h, z) - log_upper_gamma(1.0 - alpha + h, z)) / (2 * h)
            d_alpha = slx + n * math.log(lam) + n * d_order
            d_lam = sx - n * (1.0 - alpha) / lam - n * xmin * math.exp(-alpha * math.log(z) - z - lg)
        except (OverflowError, ValueError, ZeroDivisionError):
            return math.inf, np.zeros(2)
        grad = np.array([d_alpha, d_lam * lam])
        if not (math.isfinite(f) and np.all(np.isfinite(grad))):
            return math.inf, np.zeros(2)
        return f, grad

    from scipy import optimize

    mean = float(np.mean(x))
    floor = math.log(1e-12 / mean)  # (a cut below this is the power law's: L x <= 1e-12 over the whole tail)
    best = None
    for t0 in ([alpha_pl, math.log(0.1 / mean)], [alpha_pl - 1.0, math.log(1.0 / mean)],
               [0.5, math.log(1.0 / max(mean - xmin, 1e-300 * mean))]):
        with np.errstate(all="ignore"):
            r = optimize.minimize(value_and_gradient, [t0[0], max(t0[1], floor)], jac=True, method="L-BFGS-B",
                                  bounds=[(None, None), (floor, None)],
                                  options={"ftol": 1e-15, "gtol": 1e-9, "maxiter": 1000})
        if np.isfinite(r.fun) and (best is None or r.fun < best.fun):
            best = r
    if best is None:
        raise FloatingPointError("no finite likelihood")
    a, log_l = (float(v) for v in best.x)
    best = float(best.fun)
    lam = math.exp(log_l)
    if -float(np.sum(ll_pl)) <= best + 1e-9:  # (the optimum is the power law: the cut at L -> 0)
        ll = ll_pl
        return TailLaw("truncated_power_law", {"alpha": alpha_pl, "Lambda": 0.0}, {"alpha": None, "Lambda": None},
                       float(np.sum(ll)), "its optimum is the power law (the cut L -> 0, at the parameters' boundary: "
                       "no standard errors)"), ll
    ll = -a * np.log(x) - lam * x + (1.0 - a) * math.log(lam) - log_upper_gamma(1.0 - a, lam * xmin)
    # (the information in (alpha, log L), whose steps are relative to L at every scale; SE(L) = L SE(log L))
    se = _errors(lambda t: nll(t[0], math.exp(t[1])), [a, log_l], ("alpha", "Lambda"))
    if se["Lambda"] is not None:
        se["Lambda"] *= lam
    note = (f"a tail of {n}: the estimates' spread is heavy-tailed, and can be several times these standard errors"
            if n < SHORT_TAIL else None)
    return TailLaw("truncated_power_law", {"alpha": float(a), "Lambda": lam}, se, float(np.sum(ll)), note), ll


def _lognormal(x: np.ndarray, xmin: float, ll_pl: np.ndarray) -> tuple[TailLaw, np.ndarray]:
    """The lognormal on ``[x_min, inf)`` by L-BFGS-B over ``(mu, log sigma)`` with the exact gradient, from several
    starts (its likelihood is flat towards the power law's limit ``mu -> -inf``, where a simplex drifts)."""
    from scipy import optimize, special

    lx = np.log(x)
    n = x.size
    s1, s2 = float(np.sum(lx)), float(np.sum(lx * lx))
    log_xmin = math.log(xmin)
    half_log_2pi = 0.5 * math.log(2 * math.pi)

    def nll(mu: float, sigma: float) -> float:
        if not sigma > 0:
            return math.inf
        quad = (s2 - 2 * mu * s1 + n * mu * mu) / (2 * sigma * sigma)
        return s1 + quad + n * math.log(sigma) + n * half_log_2pi + n * float(special.log_ndtr((mu - log_xmin) / sigma))

    def value_and_gradient(t: np.ndarray) -> tuple[float, np.ndarray]:
        mu, sigma = float(t[0]), math.exp(float(t[1]))
        z = (mu - log_xmin) / sigma
        log_cdf = float(special.log_ndtr(z))
        mills = math.exp(-0.5 * z * z - half_log_2pi - log_cdf)  # phi(z) / Phi(z)
        q = s2 - 2 * mu * s1 + n * mu * mu
        f = s1 + q / (2 * sigma * sigma) + n * math.log(sigma) + n * half_log_2pi + n * log_cdf
        d_mu = (n * mu - s1) / (sigma * sigma) + n * mills / sigma
        d_sigma = -q / sigma ** 3 + n / sigma - n * mills * z / sigma
        return f, np.array([d_mu, d_sigma * sigma])

    mean, sd = float(np.mean(lx)), float(np.std(lx)) or 1.0
    # a box that holds every interior optimum, and stops the walk towards the power law's limit (mu -> -inf) early
    box = [(log_xmin - 1000.0 * max(sd, 1.0), None), (math.log(sd) - 12.0, math.log(sd) + 12.0)]
    best = None
    for t0 in ([mean, math.log(sd)], [log_xmin, math.log(sd)], [log_xmin - 2 * sd, math.log(2 * sd)]):
        with np.errstate(all="ignore"):
            r = optimize.minimize(value_and_gradient, t0, jac=True, method="L-BFGS-B", bounds=box,
                                  options={"ftol": 1e-15, "gtol": 1e-10, "maxiter": 500})
        if np.isfinite(r.fun) and (best is None or r.fun < best.fun):
            best = r
    assert best is not None
    mu, sigma = float(best.x[0]), math.exp(float(best.x[1]))
    ll = -lx - (lx - mu) ** 2 / (2 * sigma * sigma) - math.log(sigma) - half_log_2pi \
        - float(special.log_ndtr((mu - log_xmin) / sigma))
    limit = (mu - log_xmin) / sigma < -8 or mu <= box[0][0] + 1e-6  # (only the lognormal's far tail is left)
    if limit and float(np.sum(ll_pl)) >= float(np.sum(ll)):
        # its likelihood rises towards mu -> -inf, sigma^2 ~ -mu / (a - 1), where it becomes the power law: the
        # supremum is the power law's, said as such (a comparison of the two is then R = 0)
        return TailLaw("lognormal", {"mu": mu, "sigma": sigma}, {"mu": None, "sigma": None}, float(np.sum(ll_pl)),
                       "its likelihood is largest in the limit mu -> -inf, sigma -> inf, where its tail is the power "
                       "law: the power law's likelihood is its supremum (the parameters are where the search stopped; "
                       "no standard errors)"), ll_pl
    se = _errors(lambda t: nll(t[0], math.exp(t[1])), [mu, math.log(sigma)], ("mu", "sigma"))
    if se["sigma"] is not None:
        se["sigma"] *= sigma
    return TailLaw("lognormal", {"mu": mu, "sigma": sigma}, se, float(np.sum(ll))), ll


def compare(ll_a: np.ndarray, ll_b: np.ndarray, a: str, b: str, *, nested: bool = False) -> TailComparison:
    """The log-likelihood ratio of two laws' pointwise log-likelihoods, as ``powerlaw``'s ``loglikelihood_ratio``:
    ``R``, ``R / sqrt(n s^2)`` and Vuong's two-sided p (or Wilks' with one degree of freedom when ``nested``)."""
    from scipy import special

    d = np.asarray(ll_a, dtype=np.float64) - np.asarray(ll_b, dtype=np.float64)
    n = d.size
    r = float(np.sum(d))
    var = float(np.mean((d - d.mean()) ** 2))
    normalized = r / math.sqrt(n * var) if var > 0 else None
    if nested:
        p = float(special.chdtrc(1, abs(2 * r)))
    else:
        p = float(special.erfc(abs(r) / math.sqrt(2 * n * var))) if var > 0 else 1.0
    return TailComparison(a, b, r, normalized, p, nested)


def tail_models(eigenvalues: np.ndarray, xmin: float) -> TailModels | None:
    """The tail ``eigenvalues >= xmin`` under the four laws (:data:`LAWS`), their comparisons (:data:`PAIRS`) and
    the preferred law. None for a tail of fewer than
    :data:`MIN_TAIL` distinct values."""
    with np.errstate(all="ignore"):
        try:
            return _tail_models(np.sort(np.asarray(eigenvalues, dtype=np.float64)), float(xmin))
        except (OverflowError, ValueError, ZeroDivisionError, FloatingPointError, np.linalg.LinAlgError):
            return None  # (a tail no law can be fitted to in float64: the density fit stands alone)


def _tail_models(e: np.ndarray, xmin: float) -> TailModels | None:
    e = e[e > 0]
    x = e[e >= xmin]
    if x.size < MIN_TAIL or np.unique(x).size < MIN_TAIL or not xmin > 0 or not np.all(np.isfinite(x)):
        return None
    n = x.size
    alpha = 1.0 + n / float(np.sum(np.log(x / xmin)))
    ll = {"power_law": np.log((alpha - 1.0) / xmin) - alpha * np.log(x / xmin)}
    laws = [TailLaw("power_law", {"alpha": alpha}, {"alpha": (alpha - 1.0) / math.sqrt(n)},
                    float(np.sum(ll["power_law"])))]
    tpl, ll["truncated_power_law"] = _truncated(x, xmin, alpha, ll["power_law"])
    logn, ll["lognormal"] = _lognormal(x, xmin, ll["power_law"])
    lam = 1.0 / (float(np.mean(x)) - xmin)
    ll["exponential"] = np.log(lam) - lam * (x - xmin)
    laws += [tpl, logn, TailLaw("exponential", {"Lambda": lam}, {"Lambda": lam / math.sqrt(n)},
                                float(np.sum(ll["exponential"])))]
    comparisons = tuple(compare(ll[a], ll[b], a, b, nested=(a, b) == ("power_law", "truncated_power_law"))
                        for a, b in PAIRS)
    beaten = [c.b for c in comparisons if c.a == "power_law" and c.favours == c.b]
    if beaten:
        by_ll = {x.name: x.loglikelihood for x in laws}
        preferred = max(beaten, key=lambda name: by_ll[name])
        reason = (f"{', '.join(beaten)} beat(s) the power law (R < 0, p < {P_DECIDES:g}); {preferred} has the larger "
                  "likelihood" if len(beaten) > 1 else f"it beats the power law (R < 0, p < {P_DECIDES:g})")
    else:
        preferred = "power_law"
        reason = f"no alternative beats it at p < {P_DECIDES:g}"
    return TailModels(float(xmin), int(n), tuple(laws), comparisons, preferred, reason)
