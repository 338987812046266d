"""The top-k route for wide matrices: the leading eigenvalues by block Lanczos, and the ranks it
states as exact, bounded or not available (issue 13)."""

from __future__ import annotations

import math

import numpy as np
import pytest

import spectra_cli as spectra
from spectra_cli.analysis.fit_options import FitOptions
from spectra_cli.analysis.rank import entropy_rank, entropy_rank_bounds
from spectra_cli.eigen import lanczos as eigensolver
from spectra_cli.errors import OptionError


def noisy_powerlaw(n: int, d: int, alpha: float, seed: int) -> np.ndarray:
    """Rows whose covariance eigenvalues fall as j^-alpha, with Marchenko-Pastur noise on top."""
    rng = np.random.default_rng(seed)
    return rng.standard_normal((n, d)) * np.arange(1, d + 1) ** (-alpha / 2)


X = noisy_powerlaw(1500, 400, 1.0, seed=3)
C = np.cov(X, rowvar=False)
FULL = np.linalg.eigvalsh(C)[::-1]


@pytest.mark.parametrize("k", [1, 10, 40])
def test_the_leading_eigenvalues_equal_the_full_decomposition(k):
    found = eigensolver.top_eigenvalues(C, k)
    assert found is not None
    np.testing.assert_allclose(found.values, FULL[:k], rtol=1e-10, atol=0)
    assert found.max_relative_bound <= 1e-12
    assert found.dimension < 400  # fewer directions than the matrix has


def test_repeated_and_missing_eigenvalues_converge():
    rng = np.random.default_rng(7)
    q, _ = np.linalg.qr(rng.standard_normal((300, 300)))
    lam = np.concatenate([[5.0] * 4, [2.0] * 3, np.linspace(1.0, 0.5, 13), np.zeros(280)])  # rank 20
    A = (q * lam) @ q.T
    A = (A + A.T) / 2
    found = eigensolver.top_eigenvalues(A, 30)
    assert found is not None
    np.testing.assert_allclose(found.values[:20], lam[:20], rtol=1e-10)
    assert np.all(np.abs(found.values[20:]) <= 300 * np.finfo(float).eps * 5.0)  # zeros, within the floor


def test_spectrum_top_lists_the_leading_values_with_the_exact_total():
    full = spectra.spectrum(X)
    top = spectra.spectrum(X, top=30)
    assert top.spectrum.top is not None and top.spectrum.top.k == 30
    assert top.spectrum.eigenvalues.size == 30
    np.testing.assert_allclose(top.spectrum.eigenvalues, full.spectrum.eigenvalues[:30], rtol=1e-10)
    assert top.spectrum.total_variance == pytest.approx(np.trace(C), rel=1e-12)
    np.testing.assert_allclose(top.spectrum.explained_variance_ratio(),
                               full.spectrum.explained_variance_ratio()[:30], rtol=1e-10)
    doc = top.to_dict()["spectrum"]
    assert doc["top_k"]["k"] == 30 and doc["top_k"]["requested"] == "asked: top=30"
    assert doc["top_k"]["relative_error_bound"] <= 1e-12
    assert doc["method"].startswith("the leading 30 of 400 eigenvalues by block Lanczos")
    assert full.to_dict()["spectrum"]["top_k"] is None
    # k90 lies past the 30 computed: unknown, not the last rank
    assert full.spectrum.k_for(0.9) > 30 and doc["k90"] is None
    assert doc["k99"] is None and spectra.spectrum(X, top=0).spectrum.top is None


def test_fit_on_the_top_k_route_matches_the_full_one_and_marks_each_rank():
    full = spectra.fit(X, window="11:40")
    top = spectra.fit(X, window="11:40", top=45)
    assert top.spectrum.top is not None
    assert top.fit.alpha == pytest.approx(full.fit.alpha, rel=1e-9)
    r, f = top.rank, full.rank
    assert r.participation_ratio == pytest.approx(f.participation_ratio, rel=1e-10)
    assert r.stable_rank == pytest.approx(f.stable_rank, rel=1e-10)
    assert r.entropy_rank is None and r.rankme is None
    lo, hi = r.bounds["entropy_rank"]
    assert lo <= f.entropy_rank <= hi
    assert r.exactness.items() >= {"participation_ratio": "exact", "stable_rank": "exact", "entropy_rank": "bounded",
                                   "rankme": "not available", "numerical_rank": "lower bound", "k90": "lower bound",
                                   "k95": "lower bound", "k99": "lower bound"}.items()
    from spectra_cli import registry

    ranks = {m.name for m in registry.section("rank") if m.kind in ("metric", "count")} - {
        "participation_ratio_population"}  # (with --population only)
    assert ranks <= set(r.exactness), ranks - set(r.exactness)  # (every rank says what the route made of it)
    assert r.bounds["numerical_rank"] == (45.0, 400.0) and r.bounds["k90"] == (46.0, 400.0)
    assert "not available" in r.rankme_source
    assert top.isotropy.top_pc_share == pytest.approx(full.isotropy.top_pc_share, rel=1e-10)
    assert f.exactness is None and full.to_dict()["rank"]["bounds"] is None
    m = top.spectrum.top.dimension + top.spectrum.top.block
    assert top.timings["peak_bytes_estimate"] == 8.0 * (400 * 400 * 2 + 400 * m + m * m)


def test_entropy_rank_bounds_are_attained_by_the_extreme_tails():
    lead = np.array([10.0, 6.0, 3.0, 2.0])
    d, rest = 20, 9.0  # 16 more eigenvalues, each at most 2, holding 9
    lo, hi = entropy_rank_bounds(lead, float(lead.sum() + rest), d)
    spread = np.concatenate([lead, np.full(16, rest / 16)])
    packed = np.concatenate([lead, [2.0] * 4, [1.0], np.zeros(11)])
    assert hi == pytest.approx(entropy_rank(spread), rel=1e-12)
    assert lo == pytest.approx(entropy_rank(packed), rel=1e-12)
    rng = np.random.default_rng(1)
    for _ in range(50):  # any tail within the constraints lies between
        tail = rng.dirichlet(np.full(16, 0.3)) * rest
        if tail.max() <= 2.0:
            assert lo - 1e-12 <= entropy_rank(np.concatenate([lead, tail])) <= hi + 1e-12
    assert entropy_rank_bounds(lead, float(lead.sum()), 4) == pytest.approx((entropy_rank(lead),) * 2)


def test_the_automatic_route_needs_wide_data_and_windows_far_below_d(monkeypatch):
    import spectra_cli.eigen.decomposition as eigen

    monkeypatch.setattr(eigen, "TOP_AUTO_MIN_D", 256)
    auto = spectra.fit(X, window="11:20")
    assert auto.spectrum.top is not None and auto.spectrum.top.k == 20
    assert auto.spectrum.top.requested.startswith("automatic: the fit windows end at rank 20 <= d/16 = 25")
    assert spectra.fit(X, window=["3:10", "11:20"]).spectrum.top.k == 20  # the last rank of any window
    assert FitOptions.create(window=["3:10", "11:20"]).window_ends == (10, 20)
    assert FitOptions.create(window=["3:10", "auto"]).window_ends is None
    assert FitOptions.create().window_ends is None
    for kwargs in ({"window": "11:30"}, {}, {"window": "auto"}, {"window": "11:20", "density": True},
                   {"window": "11:20", "top": 0}, {"window": "11:20", "rankme": True}):
        assert spectra.fit(X, **kwargs).spectrum.top is None, kwargs
    white = np.random.default_rng(4).standard_normal((1500, 400))  # flat: participation ratio 0.79 d
    flat = spectra.fit(white, window="11:20").spectrum
    assert flat.top is None and flat.method.endswith("; the top-k route was not taken: the spectrum is flat "
                                                     "(participation ratio 0.79 d > 0.5 d), where block Lanczos is "
                                                     "slower than eigvalsh; top=K (--top K) forces it")
    assert spectra.fit(white, window="11:20", top=20).spectrum.top is not None  # asked: taken
    monkeypatch.setattr(eigen, "TOP_AUTO_MIN_D", 4096)
    assert spectra.fit(X, window="11:20").spectrum.top is None


@pytest.mark.parametrize(("centered", "weighted"), [(True, False), (False, False), (False, True)])
def test_the_participation_ratio_that_decides_the_route_equals_the_eigenvalues_one(centered, weighted):
    from spectra_cli.eigen.decomposition import participation_ratio_of
    from spectra_cli.stream.moments import Moments

    rng = np.random.default_rng(5)
    Y = X[:600] + 3.0
    w = rng.random(600) if weighted else None
    m = Moments.from_block(Y, w)
    ww = np.ones(600) if w is None else w
    mu = ww @ Y / ww.sum()
    A = ((Y - mu).T * ww) @ (Y - mu) if centered else (Y.T * ww) @ Y
    lam = np.linalg.eigvalsh(A)
    assert participation_ratio_of(m, centered=centered) == pytest.approx(lam.sum() ** 2 / (lam**2).sum(), rel=1e-10)


def test_past_d_over_8_the_full_decomposition_is_made():
    rep = spectra.spectrum(X, top=60)
    assert rep.spectrum.top is None and rep.spectrum.eigenvalues.size == 400
    assert "top=60 asked, but past d/8 = 50 the full decomposition is cheaper" in rep.spectrum.method


def test_the_n_by_n_route_ignores_top():
    rep = spectra.spectrum(X[:50], top=5)
    assert rep.spectrum.top is None and "Gram" in rep.spectrum.method


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"top": -1}, "top=-1 must be 0 (every eigenvalue) or a positive number of leading eigenvalues."),
    ({"top": True}, "top=True must be an integer, not bool."),
    ({"top": "5"}, "top='5' must be an integer, not str."),
    ({"top": 20, "window": "11:20", "density": True},
     "top=20 computes only the leading eigenvalues, but density needs all of them; drop one or the other."),
    ({"top": 20, "window": "11:20", "isoscore": True, "shuffled_control": True},
     "top=20 computes only the leading eigenvalues, but shuffled_control, isoscore need all of them; drop one or "
     "the other."),
    ({"top": 20, "window": "11:30"}, "top=20 computes 20 eigenvalues, but a window reaches rank 30; give a larger "
                                     "top."),
    ({"top": 20}, "top=20 computes 20 eigenvalues, but the default window 11..floor(d/10) reaches rank 40; give "
                  "window or a larger top."),
])
def test_top_errors_name_the_conflict(kwargs, message):
    with pytest.raises(OptionError) as exc:
        spectra.fit(X, **kwargs)
    assert str(exc.value) == message


def test_bounds_hold_for_a_slow_flat_spectrum():
    """White noise: the leading eigenvalues are crowded (the hardest case for Krylov methods)."""
    W = np.random.default_rng(11).standard_normal((2000, 300))
    A = np.cov(W, rowvar=False)
    full = np.linalg.eigvalsh(A)[::-1]
    found = eigensolver.top_eigenvalues(A, 20)
    if found is None:  # the cap came first: the caller falls back to the full decomposition
        rep = spectra.spectrum(W, top=20)
        assert rep.spectrum.top is None and "reached its cap" in rep.spectrum.method
        return
    np.testing.assert_allclose(found.values, full[:20], rtol=1e-10)
    assert math.isfinite(found.max_relative_bound)


def test_an_asked_top_that_runs_the_full_decomposition_says_so():
    X = np.random.default_rng(0).standard_normal((600, 300))
    rep = spectra.fit(X, window="11:60", top=200)
    assert rep.spectrum.top is None and len(rep.to_dict()["spectrum"]["eigenvalues"]) == 300
    assert ("top=200 asked, but past d/8 = 37 the full decomposition is cheaper: all 300 eigenvalues were "
            "computed (nothing to change: the numbers are those of the full decomposition)") in rep.warnings


def test_the_command_line_names_the_flag_where_the_library_names_the_keyword(cli, tmp_path):
    np.save(tmp_path / "x.npy", np.random.default_rng(0).standard_normal((600, 300)))
    r = cli("fit", tmp_path / "x.npy", "--window", "11:60", "--top", "200", "--json")
    said = ("--top 200 asked, but past d/8 = 37 the full decomposition is cheaper: all 300 eigenvalues were computed "
            "(nothing to change: the numbers are those of the full decomposition)")
    assert r.exit_code == 0 and said in r.json()["warnings"] and f"warning: {said}\n" in r.stderr
    assert f"• {said}" in cli("fit", tmp_path / "x.npy", "--window", "11:60", "--top", "200").stdout
