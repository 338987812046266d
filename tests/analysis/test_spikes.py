"""Spikes above the bulk: the Tracy-Widom law against its published quantiles, the bulk's edge against
the Marchenko-Pastur closed form, and planted spikes above and below the BBP threshold found (or not)
with the coordinates they were planted on."""

from __future__ import annotations

import math

import numpy as np
import pytest

import spectra_cli as sp
from spectra_cli.analysis.spikes import ROGUE_SHARE, bulk_edge, find_spikes, tracy_widom_sf
from spectra_cli.errors import OptionError


@pytest.mark.parametrize(("s", "tail"), [(-3.8954, 0.99), (-3.1804, 0.95), (-2.7824, 0.90), (-1.2686, 0.50),
                                         (-0.5923, 0.30), (0.4501, 0.10), (0.9793, 0.05), (2.0234, 0.01)])
def test_tracy_widom_matches_the_published_quantiles(s: float, tail: float) -> None:
    # Johnstone (2001), Table 1 (TW_1 quantiles to 4 decimals; Bornemann 2010 to more)
    assert tracy_widom_sf(s) == pytest.approx(tail, abs=2e-4)


@pytest.mark.slow
def test_tracy_widom_has_its_mean_and_a_tail_that_keeps_its_digits() -> None:
    s = np.linspace(-9.0, 9.0, 241)
    sf = np.array([tracy_widom_sf(v) for v in s])
    assert np.all(np.diff(sf) <= 1e-9)
    h = s[1] - s[0]
    mean = s[0] + h / 3 * float(sf[0] + sf[-1] + 4 * sf[1:-1:2].sum() + 2 * sf[2:-1:2].sum())  # s0 + int P(X > s)
    assert mean == pytest.approx(-1.2065335745820, abs=1e-4)  # Tracy & Widom (1996); Bornemann (2010)
    # far in the tail: the asymptote exp(-2/3 s^1.5) / (4 sqrt(pi) s^0.75) (Baik, Buckingham & DiFranco 2008),
    # whose next term is O(s^-1.5)
    for v in (8.0, 12.0, 20.0):
        asym = math.exp(-2.0 / 3.0 * v ** 1.5) / (4.0 * math.sqrt(math.pi) * v ** 0.75)
        assert tracy_widom_sf(v) == pytest.approx(asym, rel=1.0 / v ** 1.5)
    assert tracy_widom_sf(-20.0) == 1.0 and tracy_widom_sf(math.inf) == 0.0
    # past the smallest double, 0 (the Airy function overflowed far out: a matrix of NaN, a LinAlgError)
    assert 0.0 < tracy_widom_sf(100.0) < 1e-290 and tracy_widom_sf(121.0) == 0.0 == tracy_widom_sf(1e200)


def test_spikes_of_a_collapsed_matrix_are_its_directions():
    """8 directions over a noise floor 1e-6 of them: the head is 8 spikes, each far past any bulk (a statistic
    of ~1e9 Tracy-Widom scales, where the Airy function overflowed and the test ended in a traceback)."""
    import spectra_cli as spectra

    rng = np.random.default_rng(0)
    X = rng.standard_normal((2000, 8)) @ rng.standard_normal((8, 384)) + 1e-3 * rng.standard_normal((2000, 384))
    found = spectra.fit(X, spikes=True).spikes
    assert [s["rank"] for s in found.to_dict()["spikes"]] == list(range(1, 9))


@pytest.mark.parametrize(("d", "n"), [(200, 200), (200, 800), (300, 100)])
def test_the_edge_of_an_isotropic_bulk_is_marchenko_pastur_with_johnstones_scale(d: int, n: int) -> None:
    g = d / n
    e = bulk_edge(np.full(d, 2.0), n)
    assert e.mu == pytest.approx(2.0 * (1 + math.sqrt(g)) ** 2, rel=1e-10)
    assert e.sigma == pytest.approx(2.0 * (1 + math.sqrt(g)) * (1 + 1 / math.sqrt(g)) ** (1 / 3) * n ** (-2 / 3),
                                    rel=1e-8)
    assert e.threshold == pytest.approx(2.0 * (1 + math.sqrt(g)), rel=1e-8)  # BBP: sigma^2 (1 + sqrt(d/n))


def _planted(alpha: float, d: int, n: int, seed: int, above: tuple[float, ...], below: tuple[float, ...],
             coords: tuple[int, ...]) -> np.ndarray:
    """Rows of a bulk tau_j = j^-alpha on shuffled coordinates, with spikes ``above`` and ``below`` times the
    bulk's BBP threshold planted on ``coords`` (one coordinate each)."""
    rng = np.random.default_rng(seed)
    tau = np.arange(1, d + 1, dtype=np.float64) ** -alpha
    thr = bulk_edge(tau, n).threshold
    pop = tau[rng.permutation(d)]
    for c, f in zip(coords, (*above, *below), strict=True):
        pop[c] = f * thr
    return rng.standard_normal((n, d)) * np.sqrt(pop)


@pytest.mark.slow
@pytest.mark.parametrize(("alpha", "ratio"), [(0.0, 1), (1.0, 1), (0.0, 4), (1.0, 4), (1.0, 10)])
def test_planted_spikes_above_the_threshold_are_found_and_those_below_are_not(alpha: float, ratio: int) -> None:
    d = 160
    coords = (7, 42, 99, 120, 150)
    X = _planted(alpha, d, d * ratio, seed=3, above=(8.0, 6.0, 5.0), below=(0.7, 0.5), coords=coords)
    rep = sp.fit(X, spikes=True, window="11:40")
    s = rep.spikes
    assert s is not None and s.reason is None
    assert [k.rank for k in s.spikes] == [1, 2, 3]
    assert [k.features[0] for k in s.spikes] == [7, 42, 99]  # the planted coordinates, in order of size
    # at n = d the sample eigenvector leans off the planted axis (BBP: |<u, e>|^2 = 0.8 at 3x the threshold of
    # an isotropic bulk)
    assert all(k.rogue and k.loadings[0] > ROGUE_SHARE for k in s.spikes)
    assert s.rogue_dimensions == (7, 42, 99)
    assert all(k.p_value < s.level for k in s.spikes) and s.next_p_value is not None and s.next_p_value >= s.level
    assert s.threshold is not None and s.bulk_alpha == pytest.approx(alpha, abs=0.35)
    doc = rep.to_dict()["spectrum"]["spikes"]
    assert doc["count"] == 3 and doc["spikes"][0]["features"][0] == 7
    assert any("rogue dimension(s) 7, 42, 99" in w for w in rep.warnings)


@pytest.mark.parametrize(("alpha", "ratio"), [(0.0, 1), (1.0, 4)])
def test_a_bulk_without_spikes_lists_none(alpha: float, ratio: int) -> None:
    rng = np.random.default_rng(11)
    d = 160
    X = rng.standard_normal((d * ratio, d)) * np.arange(1, d + 1) ** (-alpha / 2)
    s = sp.fit(X, spikes=True, window="11:40").spikes
    assert s is not None and s.count == 0 and s.spikes == () and s.next_rank == 1
    assert s.next_p_value is not None and 0.0 <= s.next_p_value <= 1.0


def test_a_spread_spike_is_listed_with_its_coordinates_and_is_not_rogue() -> None:
    rng = np.random.default_rng(5)
    d, n = 120, 600
    u = np.zeros(d)
    u[[3, 17, 64, 90]] = [0.6, 0.5, 0.45, 0.44]
    u /= np.linalg.norm(u)
    X = rng.standard_normal((n, d)) + rng.standard_normal((n, 1)) * 3.0 * u
    s = find_spikes(np.linalg.eigvalsh(np.cov(X.T))[::-1], n=n - 1, window=(11, 30),
                    vectors=lambda k: np.linalg.eigh(np.cov(X.T))[1][:, ::-1][:, :k])
    assert s.count == 1
    (k,) = s.spikes
    assert set(k.features[:4]) == {3, 17, 64, 90} and not k.rogue and k.loadings[0] < ROGUE_SHARE
    assert k.share == pytest.approx(k.eigenvalue / float(np.trace(np.cov(X.T))))


def test_fewer_rows_than_features_take_the_vectors_from_the_rows() -> None:
    rng = np.random.default_rng(2)
    d, n = 400, 150
    X = rng.standard_normal((n, d))
    X[:, 33] *= 12.0
    s = sp.fit(X, spikes=True, window="11:60").spikes
    assert s is not None and s.count == 1 and s.spikes[0].features[0] == 33 and s.spikes[0].rogue


def test_what_cannot_be_tested_says_why() -> None:
    rng = np.random.default_rng(0)
    X = rng.standard_normal((400, 100))
    rep = sp.fit(X, spikes=True, window="1:20")
    assert rep.spikes is not None and rep.spikes.count is None
    assert rep.spikes.reason is not None and "starts at rank 1" in rep.spikes.reason
    assert ("spikes not tested (spikes=True): the rank window starts at rank 1: no rank above it to test; give a "
            "window that starts below the ranks to test (window='K1:K2' with K1 > 1)") in rep.warnings
    assert rep.to_dict()["spectrum"]["spikes"]["count"] is None
    assert "spikes" not in sp.fit(X).to_dict()["spectrum"]
    with pytest.raises(OptionError, match=r"^spikes needs the number of rows behind the spectrum and its "
                                          r"eigenvectors: give the data matrix, not eigenvalues\.$"):
        sp.fit(np.linspace(2, 1, 50), eigenvalues=True, spikes=True)


def test_the_test_does_not_depend_on_the_datas_scale() -> None:
    X = _planted(1.0, 160, 640, seed=4, above=(8.0,), below=(), coords=(37,))
    base = sp.fit(X, spikes=True, window="11:40").spikes
    for factor in (1e-150, 1e150):
        s = sp.fit(X * factor, spikes=True, window="11:40").spikes
        assert s is not None and base is not None and s.count == base.count == 1
        assert s.spikes[0].features[0] == 37 and s.spikes[0].p_value == pytest.approx(base.spikes[0].p_value, abs=1e-12)
        assert s.bulk_edge == pytest.approx(base.bulk_edge * factor**2, rel=1e-6)  # a covariance: the square


@pytest.mark.slow
def test_the_bulk_has_every_direction_when_fewer_eigenvalues_are_known(tmp_path) -> None:
    """Fewer rows than features (the Gram route: n - 1 eigenvalues) and the top-k route test against the
    same bulk of d directions as the d x d route (a moment file)."""
    rng = np.random.default_rng(8)
    X = rng.standard_normal((200, 800))
    X[:, 5] *= np.sqrt(10.0)
    np.save(tmp_path / "x.npy", X)
    sp.moments(str(tmp_path / "x.npy"), out=str(tmp_path / "m.npz"))
    rows = sp.fit(str(tmp_path / "x.npy"), spikes=True, window="11:40").spikes
    moments = sp.fit(str(tmp_path / "m.npz"), spikes=True, window="11:40").spikes
    assert rows is not None and moments is not None
    assert rows.count == moments.count == 1 and rows.spikes[0].features[0] == moments.spikes[0].features[0] == 5
    # (the same bulk of 800 directions: a bulk of the 199 the Gram route resolves would put the edge some 50 % lower,
    # c = 1 against 4; within that, the bulk law's Gauss-Newton path on this isotropic bulk, whose exponent is barely
    # identified, amplifies the two routes' rounding: 2.5e-4 apart since issue 33's sixth round, 2e-7 before)
    assert rows.bulk_edge == pytest.approx(moments.bulk_edge, rel=1e-3)
    Y = rng.standard_normal((4000, 1024)) * np.arange(1, 1025) ** -0.5
    top = sp.fit(Y, spikes=True, window="11:40", top=45).spikes
    full = sp.fit(Y, spikes=True, window="11:40", top=0).spikes
    assert top is not None and full is not None and top.count == full.count == 0
    assert top.bulk_edge == pytest.approx(full.bulk_edge, rel=1e-6)


def test_a_window_far_down_the_spectrum_is_refused_at_once() -> None:
    rng = np.random.default_rng(1)
    X = rng.standard_normal((2000, 256)) * np.arange(1, 257) ** -0.5
    s = sp.fit(X, spikes=True, window="200:256").spikes
    assert s is not None and s.count is None and s.reason is not None and "past the first 25 %" in s.reason.replace(
        "25%", "25 %")
    assert s.cost == {}  # refused before any matching


def test_check_names_the_option_and_compare_counts_without_subtracting_coordinates(tmp_path) -> None:
    X, Y = str(tmp_path / "x.npy"), str(tmp_path / "y.npy")
    np.save(X, _planted(0.0, 120, 600, seed=2, above=(8.0,), below=(), coords=(37,)))
    np.save(Y, _planted(0.0, 120, 600, seed=3, above=(8.0,), below=(), coords=(100,)))
    with pytest.raises(OptionError, match=r"'spectrum\.spikes\.count' is not a field of the report "
                                          r"\(spectrum\.spikes\.count is in the report with spikes=True\)"):
        sp.check(X, require=["spectrum.spikes.count == 0"])
    assert sp.check(X, require=["spectrum.spikes.count == 1"], spikes=True, window="11:30").passed
    fields = [r["field"] for r in sp.compare(X, Y, spikes=True, window="11:30").to_dict()["metrics"]]
    assert "spectrum.spikes.count" in fields
    assert not [f for f in fields if f.startswith(("spectrum.spikes.spikes.", "spectrum.spikes.rogue_dimensions"))]


def test_batch_shows_the_count_of_spikes_when_they_were_asked_for(tmp_path) -> None:
    import io

    from rich.console import Console

    from spectra_cli.render.screens import print_batch

    np.save(tmp_path / "planted.npy", _planted(0.0, 120, 600, seed=2, above=(8.0,), below=(), coords=(37,)))
    for spikes, shown in ((True, True), (False, False)):
        res = sp.batch(str(tmp_path), spikes=spikes, window="11:30")
        out = io.StringIO()
        print_batch(list(res.results), skipped=0, jsonl=None, console=Console(file=out, width=120))
        assert ("spikes" in out.getvalue()) == shown
