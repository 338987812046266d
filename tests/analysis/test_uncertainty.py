"""Standard errors of the spectral metrics (analysis/uncertainty): gradients against finite differences,
the row model against known laws, the alpha SE against its closed form, the spread over seeds, and the
honest gaps."""

from __future__ import annotations

import math
import re
import warnings

import numpy as np
import pytest

import spectra_cli as spectra
from spectra_cli.analysis import uncertainty as u
from spectra_cli.stream.norms import NormHistogram, coordinate_fourth
from tests.conftest import ROOT

LAM = np.sort(np.random.default_rng(3).uniform(0.1, 5.0, 40))[::-1]


def _metric(name, lam, d=None):
    from spectra_cli.analysis import rank

    return {"pr": rank._pr_grad, "er": rank._entropy_grad, "sr": rank._stable_grad, "top": u._top_share_grad,
            "iso": lambda x: u._isoscore_grad(x, d or x.size)}[name](lam)


@pytest.mark.parametrize("name", ["pr", "er", "sr", "top", "iso"])
def test_each_gradient_is_the_finite_difference_of_its_metric(name):
    value, grad = _metric(name, LAM)
    h = 1e-6
    for j in (0, 1, 7, 39):
        up, down = LAM.copy(), LAM.copy()
        up[j] += h
        down[j] -= h
        numeric = (_metric(name, up)[0] - _metric(name, down)[0]) / (2 * h)
        assert grad[j] == pytest.approx(numeric, rel=1e-5, abs=1e-9), (name, j)


def _model(X):
    y = X - X.mean(0)
    h = NormHistogram.of(np.einsum("ij,ij->i", y, y)).with_fourth(*coordinate_fourth(y))
    lam = np.sort(np.linalg.eigvalsh(np.cov(X, rowvar=False)))[::-1]
    return u.row_model(lam, n_effective=len(X) - 1, norms=h, variances=X.var(0, ddof=1))


def test_the_row_model_reads_gaussian_elliptical_and_laplace_rows():
    rng = np.random.default_rng(0)
    sd = np.arange(1, 41) ** -0.4
    g = _model(rng.standard_normal((20000, 40)) * sd)
    assert g.a == pytest.approx(2.0, abs=0.15) and g.c == pytest.approx(0.0, abs=0.05)
    Z = rng.standard_normal((20000, 40)) * np.sqrt(rng.chisquare(5, (20000, 1)) / 5)  # E s^4 = 1.4
    e = _model(Z * sd)
    assert e.c == pytest.approx(0.4, abs=0.08) and e.a == pytest.approx(2.8, abs=0.25)
    lap = _model(rng.laplace(size=(20000, 40)) / math.sqrt(2) * sd)  # excess kurtosis 3: Var z^2 = 5 lambda^2
    assert lap.a == pytest.approx(5.0, abs=0.5) and lap.c == pytest.approx(0.0, abs=0.05)
    assert "independent coordinates" in lap.source
    assert u.row_model(LAM, n_effective=100).source.startswith("no histogram")


def test_the_alpha_se_is_the_least_squares_slope_weights_closed_form():
    # the first-order route (moments kept without row groups)
    X = np.random.default_rng(1).standard_normal((3000, 64)) * np.arange(1, 65) ** -0.4
    rep = spectra.fit(spectra.accumulate(X), window="3:30")
    x = np.log(np.arange(3, 31))
    w = (x - x.mean()) / np.sum((x - x.mean()) ** 2)
    assert rep.rank.se_method["route"] == "first order"
    a, n = rep.rank.se_method["a"], rep.rank.se_method["n_effective"]
    assert rep.fit.se == pytest.approx(math.sqrt(a * np.dot(w, w) / n), rel=1e-9)
    assert rep.to_dict()["fit"]["se"] == rep.fit.se
    assert any("the standard errors are first order" in str(m) and "spectra moments --groups 32" in str(m)
               for m in rep.warnings)


def _cluster_se(X: np.ndarray, bounds: list[int], f) -> float:
    """The cluster-robust standard error of f(eigenvalues of cov X), linearised by plain numpy: the gradient by
    central differences in the eigenvalues, each group's covariance about the whole mean read along the
    eigenvectors."""
    n = len(X)
    lam, V = np.linalg.eigh(np.cov(X, rowvar=False))
    lam, V = lam[::-1], V[:, ::-1]
    h = 1e-6 * lam
    grad = np.array([(f(lam + h[j] * np.eye(lam.size)[j]) - f(lam - h[j] * np.eye(lam.size)[j])) / (2 * h[j])
                     for j in range(lam.size)])
    Y = X - X.mean(0)
    t, w = [], []
    for a, b in zip(bounds[:-1], bounds[1:], strict=True):
        A = Y[a:b].T @ Y[a:b] / (b - a) * n / (n - 1)
        t.append(float(grad @ np.einsum("ij,ik,kj->j", V, A, V)))
        w.append((b - a) / n)
    t, w = np.array(t), np.array(w)
    G = len(t)
    return math.sqrt(G / (G - 1) * np.sum(w * w * (t - w @ t) ** 2))


def _jackknife_se(X: np.ndarray, bounds: list[int], f, k: int = 8, exact: bool = False) -> float:
    """The delete-a-group jackknife of f(top eigenvalue, trace) by plain numpy: each group's complement's covariance
    formed whole, its top eigenvalue that of the projection on the whole covariance's leading k eigenvectors
    (Rayleigh-Ritz) or, ``exact``, its own; pseudo-values through the cluster-robust formula."""
    n = len(X)
    S = np.cov(X, rowvar=False)
    lam, V = np.linalg.eigh(S)
    Vk = V[:, ::-1][:, :k]
    Y = X - X.mean(0)
    theta = f(lam[-1], lam.sum())
    t, w = [], []
    for a, b in zip(bounds[:-1], bounds[1:], strict=True):
        share = (b - a) / n
        rest = (S - share * (Y[a:b].T @ Y[a:b] / (b - a) * n / (n - 1))) / (1 - share)
        top = np.linalg.eigvalsh(rest)[-1] if exact else np.linalg.eigvalsh(Vk.T @ rest @ Vk)[-1]
        t.append(theta + (1 - share) / share * (theta - f(top, np.trace(rest))))
        w.append(share)
    t, w = np.array(t), np.array(w)
    G = len(t)
    return math.sqrt(G / (G - 1) * np.sum(w * w * (t - w @ t) ** 2))


def test_the_top_share_and_stable_rank_errors_are_a_delete_a_group_jackknife():
    """Near-equal top eigenvalues, one group with a direction of its own: the linearisation through the top
    eigenvector reads that group as about twice its effect; the jackknife of the top eigenvalue does not."""
    rng = np.random.default_rng(3)
    X = rng.standard_normal((3200, 24)) * np.r_[1.0, 0.97, np.arange(3, 25) ** -0.6]
    X[600:800, 1] *= 2.5  # (one text of 200 rows along the second direction)
    rep = spectra.fit(X, window="3:12")
    method = rep.rank.se_method
    bounds = [*range(0, 3200, 3200 // method["groups"]), 3200]
    top_share = _jackknife_se(X, bounds, lambda top, total: top / total)
    stable = _jackknife_se(X, bounds, lambda top, total: total / top)
    assert rep.isotropy.se["top_pc_share"] == pytest.approx(top_share, rel=1e-6)
    assert rep.rank.se["stable_rank"] == pytest.approx(stable, rel=1e-6)
    # Rayleigh-Ritz in 8 leading directions is the exact top eigenvalue's jackknife to a few per cent
    assert top_share == pytest.approx(_jackknife_se(X, bounds, lambda t, s: t / s, exact=True), rel=0.05)
    linearised = _cluster_se(X, bounds, lambda lam: lam[0] / lam.sum())
    assert linearised > 1.2 * top_share  # (the linearisation said 1.25 times as much here)
    # for a metric linear in the covariance the pseudo-values are its linearised values: the trace's error
    assert _jackknife_se(X, bounds, lambda top, total: total) == pytest.approx(
        _cluster_se(X, bounds, lambda lam: lam.sum()), rel=1e-9)


def test_grouped_errors_are_the_cluster_robust_variance_of_the_groups_of_rows():
    # 3,000 rows make 16 blocks of 188 rows (the errors' 16 groups), merged in pairs where neighbours correlate
    rng = np.random.default_rng(11)
    X = rng.standard_normal((3000, 24)) * np.arange(1, 25) ** -0.6 + 5.0
    rep = spectra.fit(X, window="2:12")
    method = rep.rank.se_method
    assert method["route"] == "row groups" and method["groups"] in (16, 8) and method["dof"] == method["groups"] - 1
    bounds = [*range(0, 3000, 3008 // method["groups"]), 3000]  # (188 rows a group, or 376 merged)

    def pr(lam):
        return lam.sum() ** 2 / (lam * lam).sum()

    def entropy(lam):
        q = lam / lam.sum()
        return math.exp(-np.sum(q * np.log(q)))

    def top(lam):
        return lam[0] / lam.sum()

    def alpha(lam):
        x = np.log(np.arange(2, 13))
        return -np.polyfit(x, np.log(lam[1:12]), 1)[0]

    assert rep.rank.se["participation_ratio"] == pytest.approx(_cluster_se(X, bounds, pr), rel=1e-6)
    assert rep.rank.se["entropy_rank"] == pytest.approx(_cluster_se(X, bounds, entropy), rel=1e-6)
    # (the top share: a jackknife of the top eigenvalue, the linearisation's value where the top gap is wide)
    assert rep.isotropy.se["top_pc_share"] == pytest.approx(_jackknife_se(X, bounds, lambda t, s: t / s), rel=1e-6)
    assert rep.isotropy.se["top_pc_share"] == pytest.approx(_cluster_se(X, bounds, top), rel=0.05)
    assert rep.fit.se == pytest.approx(_cluster_se(X, bounds, alpha), rel=1e-6)
    # independent rows: the design effect is about 1, no word of dependence
    assert 0.5 < method["design_effect"] < 2 and not any("look dependent" in str(m) for m in rep.warnings)


def test_dependent_rows_are_said_and_their_errors_widen():
    # "texts" of 50 tokens that share a direction of their own: tokens of one text are not independent
    rng = np.random.default_rng(12)
    texts = rng.standard_normal((80, 1, 16)) * 2.0
    X = (rng.standard_normal((80, 50, 16)) + texts).reshape(4000, 16) * np.arange(1, 17) ** -0.5
    rep = spectra.fit(X)
    method = rep.rank.se_method
    assert method["design_effect"] > 5 and method["n_effective"] < 800
    assert any("the rows look dependent" in str(m) for m in rep.warnings)
    shuffled = spectra.fit(X[rng.permutation(4000)])
    assert shuffled.rank.se_method["design_effect"] < 2
    assert rep.rank.se["participation_ratio"] > 2 * shuffled.rank.se["participation_ratio"]


def test_the_stated_errors_match_the_spread_over_seeds():
    sd = np.arange(1, 33) ** -0.35
    values, errors = [], []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for seed in range(40):
            X = np.random.default_rng(seed).standard_normal((1500, 32)) * sd
            d = spectra.fit(X, window="3:20").to_dict()
            values.append([d["rank"]["participation_ratio"], d["rank"]["entropy_rank"], d["isotropy"]["top_pc_share"],
                           d["fit"]["alpha"]])
            errors.append([d["rank"]["se"]["participation_ratio"], d["rank"]["se"]["entropy_rank"],
                           d["isotropy"]["se"]["top_pc_share"], d["fit"]["se"]])
    ratio = np.mean(errors, axis=0) / np.std(values, axis=0, ddof=1)
    assert np.all((ratio > 0.7) & (ratio < 1.45)), ratio  # 40 seeds: the spread itself is known to ~11 %


def test_what_has_no_error_says_why_and_the_top_k_route_has_none():
    X = np.random.default_rng(2).standard_normal((600, 30))
    d = spectra.fit(X).to_dict()
    assert set(d["rank"]["se"]) == {"participation_ratio", "entropy_rank", "stable_rank"}
    assert "step function" in d["rank"]["se_missing"]["k90"] and "uncentred" in d["rank"]["se_missing"]["rankme"]
    assert "unit rows" in d["isotropy"]["se_missing"]["mean_cosine"]
    assert d["rank"]["se_method"]["route"] == "row groups" and "cluster-robust" in d["rank"]["se_method"]["method"]
    top = spectra.fit(np.random.default_rng(2).standard_normal((900, 400)) * np.arange(1, 401) ** -0.8, top=20,
                      window="3:15").to_dict()
    assert top["rank"]["se"] == {} and "top-k route" in top["rank"]["se_missing"]["participation_ratio"]
    assert top["fit"]["se"] is None and top["rank"]["se_method"] is None
    assert spectra.isotropy(X, isoscore=True).to_dict()["isotropy"]["se"]["isoscore"] is not None


def test_the_table_shows_each_error_beside_its_value(cli, tmp_path):
    np.save(tmp_path / "x.npy", np.random.default_rng(4).standard_normal((800, 24)) * np.arange(1, 25) ** -0.5)
    r = cli("fit", tmp_path / "x.npy")
    assert r.exit_code == 0
    line = next(ln for ln in r.stdout.splitlines() if ln.startswith("participation ratio"))
    assert "± " in line and "(SE)" in line
    assert re.search(r"standard errors: the spread between (16|8) contiguous row groups; design effect", r.stdout)


def test_weighted_rows_do_not_count_their_weights_twice():
    rng = np.random.default_rng(5)
    X = rng.standard_normal((500, 20)) * np.arange(1, 21) ** -0.7
    w = rng.random(500)
    d = spectra.fit(spectra.accumulate(X, weights=w), ).to_dict()["rank"]["se_method"]
    assert d["c"] == 0.0 and d["a"] == 2.0 and "weighted rows" in d["rows"]
    grouped = spectra.fit(X, weights=w).to_dict()["rank"]["se_method"]  # (the groups carry their weights)
    assert grouped["route"] == "row groups" and "design_effect" not in grouped


def test_degenerate_inputs_say_why_instead_of_a_zero():
    rng = np.random.default_rng(6)
    X = rng.standard_normal((500, 20))
    repeated = spectra.fit(np.tile(X[:1], (50, 1))).to_dict()
    assert repeated["rank"]["se"] == {} and "degenerate" in repeated["rank"]["se_missing"]["participation_ratio"]
    w = np.zeros(500)
    w[[3, 7]] = 1.0
    two = spectra.fit(X, weights=w).to_dict()
    assert two["rank"]["se"] == {} and "fewer than three effective rows" in two["rank"]["se_missing"]["stable_rank"]
    assert two["fit"] is None or two["fit"]["se"] is None
    for doc in (repeated, two):
        assert all(v is None or v > 0 for v in [*doc["rank"]["se"].values(), *doc["isotropy"]["se"].values()])


def test_a_flat_spectrum_says_its_errors_are_conservative():
    rep = spectra.fit(np.random.default_rng(7).standard_normal((800, 40)))
    assert "flat spectrum" in rep.rank.se_method["caveat"]
    assert any("over-state the spread on this flat spectrum" in w for w in rep.warnings)
    steep = spectra.fit(np.random.default_rng(7).standard_normal((800, 40)) * np.arange(1, 41) ** -0.8)
    assert "caveat" not in steep.rank.se_method


def test_every_fit_has_its_se_or_a_reason_and_whiten_gives_isotropy_errors(tmp_path):
    X = np.random.default_rng(8).standard_normal((2000, 48)) * np.arange(1, 49) ** -0.5
    d = spectra.fit(X, window="3:40", model="broken").to_dict()
    assert d["fit"]["se"] is None and "crossover is searched" in d["fit"]["se_missing"]
    models = spectra.fit(X, window="3:40").to_dict()
    assert models["models"]["models"]["power-law"]["se"] == models["fit"]["se"] and models["fit"]["se_missing"] is None
    w = spectra.whiten(X, out=str(tmp_path / "w.npy")).to_dict()["isotropy"]
    assert w["se"]["top_pc_share"] > 0 and w["se_method"]["method"].startswith("delta method")


def test_real_tokens_of_one_text_widen_their_errors_and_say_so_where_shuffled_ones_do_not():
    # 128 windows of 32 tokens of all-MiniLM-L6-v2 (layer 3), in order: tokens of one text are runs of 32 rows
    X = np.load(ROOT / "sample_data" / "minilm_layer3_context32_128_f16.npy").astype(np.float64).reshape(-1, 384)
    shuffled = X[np.random.default_rng(0).permutation(len(X))]
    texts, rows = spectra.fit(X), spectra.fit(shuffled)
    assert texts.rank.se_method["design_effect"] > 4 > 2 > rows.rank.se_method["design_effect"]
    assert texts.rank.se_method["groups"] < 32 and "merged" in texts.rank.se_method  # (texts span two groups of 128)
    assert any("the rows look dependent" in str(w) for w in texts.warnings)
    assert not any("look dependent" in str(w) for w in rows.warnings)
    for name in ("participation_ratio", "entropy_rank"):
        assert texts.rank.se[name] > 2 * rows.rank.se[name]
    assert texts.fit.se > 1.5 * rows.fit.se


def test_the_design_effect_is_scale_free_and_said_only_where_the_norms_are_about_the_mean():
    X = np.random.default_rng(21).standard_normal((4000, 32)) * np.arange(1, 33) ** -0.5 + 1.0
    base = spectra.fit(X).rank.se_method["design_effect"]
    for scale in (1e100, 1e-100):  # (the norms' squares overflowed or underflowed: no design effect; the histogram's
        # bins are powers of 2^(1/B), so a scale moves the binned norms a little)
        assert spectra.fit(X * scale).rank.se_method["design_effect"] == pytest.approx(base, rel=0.01)
    raw = spectra.fit(X, centered=False)  # (uncentred totals against centred norms read false dependence: 5.3)
    assert "design_effect" not in raw.rank.se_method and not any("look dependent" in str(w) for w in raw.warnings)
    few = spectra.fit(X[:40])
    assert any("40 rows: too few for 16 row groups of 4 rows" in str(w) for w in few.warnings)


def test_rows_written_twice_are_counted_and_said():
    # every row twice, shuffled: the copies land in different groups, where the groups' spread cannot see them
    rng = np.random.default_rng(31)
    X = rng.standard_normal((4000, 48)) * np.arange(1, 49) ** -0.5
    twice = np.concatenate([X[:2000], X[:2000]])[rng.permutation(4000)]
    rep = spectra.fit(twice)
    assert rep.rank.se_method["distinct_rows"] == pytest.approx(2000, rel=0.03)
    assert rep.rank.se_method["n_effective"] <= 2060
    assert any("about 50% of the 4,000 rows repeat others exactly" in str(w) for w in rep.warnings)
    plain = spectra.fit(X)
    assert "distinct_rows" not in plain.rank.se_method and not any("repeat others" in str(w) for w in plain.warnings)
    from spectra_cli.stream.states import DistinctRows

    count = DistinctRows(48)
    for i in range(0, 4000, 500):
        count.update(X[i:i + 500], None)
    assert count.estimate() == pytest.approx(4000, rel=0.02)  # (HyperLogLog with linear counting: about 0.6 % here)


@pytest.mark.parametrize("d", [40, 300])
def test_the_pooled_moments_stand_for_the_groups_summed_again(d):
    """The spread read with the pass's own moments of every row (no second sum of the groups' matrices) is the one
    read from the groups alone, to rounding: the same covariance, directions and per-group inner products."""
    from spectra_cli.stream.states import MomentsState

    rng = np.random.default_rng(11)
    X = rng.standard_normal((16 * 40, d)) * np.arange(1, d + 1) ** -0.5 + 2.0
    state = MomentsState(d, groups=16, n_blocks=16, block_rows=40)
    for b in range(16):
        state.update(X[40 * b:40 * (b + 1)], None)
    lam = np.linalg.eigvalsh(np.cov(X, rowvar=False))[::-1]
    alone = u.group_spread(state.filled_groups(), lam, centered=True, leading=20)
    pooled = u.group_spread(state.filled_groups(), lam, centered=True, leading=20, pooled=state.moments)
    assert alone is not None and pooled is not None
    np.testing.assert_allclose(pooled.S, alone.S, rtol=0, atol=1e-12 * np.abs(alone.S).max())
    np.testing.assert_allclose(pooled.with_S, alone.with_S, rtol=1e-10)
    np.testing.assert_allclose(pooled.head, alone.head, rtol=1e-5)  # (float32 directions from d = 256)
    g = np.linspace(1.0, 0.0, lam.size)
    np.testing.assert_allclose(pooled.linearised(g), alone.linearised(g), rtol=1e-5)
    # uncentred moments are not the groups' scatter about the whole mean: summed from the groups as before
    raw = u.group_spread(state.filled_groups(), lam, centered=False, leading=20, pooled=state.moments)
    assert raw is not None and not np.allclose(raw.S, pooled.S)


def test_the_wide_errors_take_their_directions_from_the_spectrum_s_own_reduction(monkeypatch):
    """Past ALL_VECTORS_D features (lowered here) the grouped errors' leading directions come from the spectrum's
    tridiagonal reduction, with no second decomposition: the same errors as from the float32 partial one, to its
    rounding, and the spectrum the plain one, bit for bit."""
    import spectra_cli
    from spectra_cli.eigen import tridiagonal

    if tridiagonal._routines() is None:
        pytest.skip("NumPy's BLAS is not its wheels' OpenBLAS")
    monkeypatch.setattr(u, "ALL_VECTORS_D", 64)
    X = np.random.default_rng(5).standard_normal((3000, 120)) * np.arange(1, 121) ** -0.5
    asked: list[int] = []
    leading = tridiagonal.Reduction.leading
    monkeypatch.setattr(tridiagonal.Reduction, "leading", lambda self, k: asked.append(k) or leading(self, k))
    kept = spectra_cli.fit(X)
    assert asked and asked[0] >= kept.fits[0].window.k_max
    monkeypatch.setattr(tridiagonal, "_found", {"done": True, "routines": None})
    again = spectra_cli.fit(X)
    assert np.array_equal(kept.spectrum.eigenvalues, again.spectrum.eigenvalues)
    assert kept.rank.se.keys() == again.rank.se.keys() and kept.rank.se_method["route"] == "row groups"
    for name, se in kept.rank.se.items():
        assert se == pytest.approx(again.rank.se[name], rel=1e-4), name
    assert kept.fits[0].se == pytest.approx(again.fits[0].se, rel=1e-4)
    assert kept.isotropy.se["top_pc_share"] == pytest.approx(again.isotropy.se["top_pc_share"], rel=1e-4)
    # a fit that keeps no reduction (--ci, --population hold their own matrices) decomposes again, as before
    asked.clear()
    monkeypatch.setattr(tridiagonal, "_found", {})
    spectra_cli.fit(X, ci=True, ci_replicates=20)
    assert not asked


@pytest.mark.parametrize("d", [7, 300, 600])
def test_the_inner_products_read_the_lower_triangles_a_slab_at_a_time(d):
    """<A_g, M> read from the lower triangles a slab of rows at a time (and the linearisation's M = V G V^T never made
    whole) is the plain sum over every entry, c (r2 <m_g, M> + u_g^T M u_g / W_g) / W_g, to rounding."""
    from spectra_cli.stream.states import MomentsState

    rng = np.random.default_rng(d)
    X = rng.standard_normal((16 * 50, d)) * np.arange(1, d + 1) ** -0.5 + 1.0
    state = MomentsState(d, groups=16, n_blocks=16, block_rows=50)
    for b in range(16):
        state.update(X[50 * b:50 * (b + 1)], None)
    lam = np.linalg.eigvalsh(np.cov(X, rowvar=False))[::-1]
    spread = u.group_spread(state.filled_groups(), lam, centered=True, leading=min(d, 40), pooled=state.moments)
    assert spread is not None

    def plain(M):
        own = np.array([float(np.sum(m * M)) for m in spread.m2])
        cross = np.einsum("gi,ij,gj->g", spread.u, M, spread.u)
        return spread.c * (spread.r2 * own + cross / spread.W) / spread.W

    B = rng.standard_normal((d, d))
    M = B + B.T
    np.testing.assert_allclose(spread.inner_matrix(M), plain(M), rtol=1e-10, atol=1e-12 * np.abs(plain(M)).max())
    g = np.zeros(lam.size)
    g[min(d, 40) // 2: min(d, 40)] = rng.standard_normal(min(d, 40) - min(d, 40) // 2)
    V = spread.V[:, : min(d, 40)]
    M = (V * g[: V.shape[1]] * spread.unit) @ V.T  # (the spread's eigenvalues are in units of the top one)
    np.testing.assert_allclose(spread.linearised(g), plain(M), rtol=1e-9, atol=1e-12 * np.abs(plain(M)).max())
