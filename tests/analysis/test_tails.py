"""The tail's laws: the incomplete gamma function against quadrature, the preferred law on samples drawn from each,
the log-likelihoods and ratios against the powerlaw package's own (at the same parameters, and its fits with its
alpha cap lifted), and AlphaPruning's alpha against a brute force."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
from scipy import integrate, special

from spectra_cli.analysis.tails import alphapruning_alpha, log_upper_gamma, tail_models


@pytest.mark.parametrize(("s", "x"), [(2.5, 0.3), (0.5, 2.0), (-0.5, 0.7), (-1.0, 1.2), (-2.0000001, 0.4),
                                      (-3.7, 3.0), (-1.999, 10.0), (1e-9, 0.05), (-5.5, 40.0)])
def test_the_upper_incomplete_gamma_of_any_order_is_the_integral(s, x):
    want, _ = integrate.quad(lambda t: t ** (s - 1) * math.exp(-t), x, math.inf, epsabs=0, epsrel=1e-13, limit=200)
    assert log_upper_gamma(s, x) == pytest.approx(math.log(want), abs=1e-10)
    if s > 0:
        assert log_upper_gamma(s, x) == pytest.approx(math.log(special.gammaincc(s, x) * special.gamma(s)), rel=1e-12)


def _sample(kind: str, n: int, rng: np.random.Generator, xmin: float = 1.0) -> np.ndarray:
    if kind == "power_law":  # a = 2.5
        return xmin * (1 - rng.random(n)) ** (-1 / 1.5)
    if kind == "truncated_power_law":  # a = 1.5, cut L = 0.05: power-law draws thinned by e^(-L (x - xmin))
        out: list[float] = []
        while len(out) < n:
            x = xmin * (1 - rng.random(4 * n)) ** (-1 / 0.5)
            out += list(x[rng.random(x.size) < np.exp(-0.05 * (x - xmin))])
        return np.array(out[:n])
    if kind == "lognormal":
        x = np.exp(rng.normal(0.0, 1.0, 20 * n))
        return x[x >= xmin][:n]
    raise KeyError(kind)


@pytest.mark.parametrize("kind", ["power_law", "truncated_power_law", "lognormal"])
def test_the_preferred_law_is_the_one_drawn_from(kind):
    rng = np.random.default_rng(3)
    found = tail_models(_sample(kind, 3000, rng), 1.0)
    assert found is not None
    if kind == "power_law":  # nothing beats it, and the truncated law's optimum is the power law (or near it)
        assert found.preferred == "power_law"
        assert found.law("power_law").params["alpha"] == pytest.approx(2.5, abs=0.1)
    else:
        assert found.preferred == kind, found.reason
    if kind == "truncated_power_law":
        tpl = found.law(kind)
        assert tpl.params["alpha"] == pytest.approx(1.5, abs=4 * tpl.se["alpha"])
        assert tpl.params["Lambda"] == pytest.approx(0.05, abs=4 * tpl.se["Lambda"])
    if kind == "lognormal":
        assert found.law(kind).params["sigma"] == pytest.approx(1.0, abs=0.15)


def test_the_laws_and_ratios_are_the_powerlaw_packages():
    powerlaw = pytest.importorskip("powerlaw")
    rng = np.random.default_rng(4)
    x = np.concatenate([_sample("truncated_power_law", 300, rng, xmin=2.0), rng.uniform(0.1, 1.9, 100)])
    xmin = 2.0
    mine = tail_models(x, xmin)
    assert mine is not None
    tail = x[x >= xmin]
    classes = {"power_law": powerlaw.Power_Law, "truncated_power_law": powerlaw.Truncated_Power_Law,
               "lognormal": powerlaw.Lognormal, "exponential": powerlaw.Exponential}
    wide = {"alpha": [-50, 100]}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        theirs = {}
        for law in mine.laws:  # powerlaw's densities at these parameters
            dist = classes[law.name](xmin=xmin, parameters=list(law.params.values()), discrete=False,
                                     parameter_ranges=wide if "alpha" in law.params else None)
            theirs[law.name] = dist.loglikelihoods(tail)
            assert float(np.sum(theirs[law.name])) == pytest.approx(law.loglikelihood, rel=1e-11)
        for c in mine.comparisons:
            r, p = powerlaw.loglikelihood_ratio(theirs[c.a], theirs[c.b], nested=c.nested)
            assert (c.ratio, c.p) == pytest.approx((r, p), rel=1e-9, abs=1e-12)
        fit = powerlaw.Fit(x, xmin=xmin, discrete=False, verbose=False, parameter_ranges=wide)
        for law in mine.laws:  # its own fits (Nelder-Mead, tol 1e-4) reach no higher likelihood
            assert float(np.sum(getattr(fit, law.name).loglikelihoods(fit.data))) <= law.loglikelihood + 1e-6


def test_alphapruning_alpha_is_its_search_written_out():
    rng = np.random.default_rng(5)
    ev = np.sort(np.exp(rng.normal(0, 1.2, 300)))
    alpha, xmin, k = alphapruning_alpha(ev)
    h = np.log10(ev)
    counts, edges = np.histogram(h, bins=100)
    peak = 10 ** edges[np.argmax(counts)]
    best = None
    for i, x0 in enumerate(ev[:-1]):
        if x0 < math.log10(0.95 * peak) or x0 > 1.5 * peak:  # (its lower bound compares a log10 with eigenvalues)
            continue
        tail = ev[i:]
        a = 1 + tail.size / np.log(tail / x0).sum()
        ks = np.abs(1 - (tail / x0) ** (1 - a) - np.arange(tail.size) / tail.size).max()
        if best is None or ks < best[0]:
            best = (ks, a, x0, tail.size)
    assert (alpha, xmin, k) == pytest.approx(best[1:], rel=1e-12)


def test_too_short_a_tail_has_no_laws():
    assert tail_models(np.array([1.0, 2.0, 3.0, 4.0]), 1.0) is None


def test_the_errors_do_not_depend_on_the_units_and_a_near_orthogonal_matrix_still_fits():
    rng = np.random.default_rng(6)
    x = _sample("truncated_power_law", 400, rng)
    errors = []
    for scale in (1e-6, 1.0, 1e6):
        tpl = tail_models(x * scale, scale).law("truncated_power_law")
        errors.append((tpl.se["alpha"], tpl.se["Lambda"] / tpl.params["Lambda"]))
    np.testing.assert_allclose(errors, [errors[1]] * 3, rtol=1e-3)
    import spectra_cli

    q, _ = np.linalg.qr(rng.standard_normal((128, 128)))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        rep = spectra_cli.fit(q + 1e-3 * rng.standard_normal((128, 128)), density=True)
    assert rep.suite.density is not None  # (the tail laws never break the fit: at worst they are None)
