"""convention="weightwatcher": WeightWatcher 0.7.7's layer selection, columns, MP fit and summary, and
the batch results object (rows, to_pandas, summary, _repr_html_).

The rules followed, from WeightWatcher's source (weightwatcher.py and RMT_Util.py; line numbers at
commit d6fd015 of CalculatedContent/WeightWatcher, the same code in the 0.7.7 release):
- ``layer_supported`` (weightwatcher.py:1665-1741): a layer with ``M < min_evals`` (constants.py
  ``DEFAULT_MIN_EVALS``, 8 in 0.7.7), ``M > max_evals`` (15,000) or ``N > max_N`` (50,000) is skipped,
  ``N, M`` the larger and smaller side (``set_weight_matrices``, weightwatcher.py:1157-1161); 1-D
  tensors (biases, norms) have no path at all (weightwatcher.py:1171-1173, 1712);
- ``combined_eigenvalues`` (weightwatcher.py:2757-2830): the squared singular values, no ``1/N``;
- ``fit_powerlaw`` (weightwatcher.py:4129): eigenvalues above ``EVALS_THRESH = 1e-5`` are fitted;
- ``apply_norm_metrics`` (weightwatcher.py:4536-4562), ``matrix_entropy`` (RMT_Util.py:336-357);
- ``mp_fit`` (weightwatcher.py:4693-4787), ``fit_density_with_range`` and ``resid_mp``
  (RMT_Util.py:753-863);
- the warning (weightwatcher.py:4412-4416): ``alpha < 2`` over-trained, ``alpha > 6`` under-trained.
The numbers themselves are compared with WeightWatcher on the real MiniLM in bench/bench_weightwatcher.py.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

import spectra_cli as spectra
from spectra_cli.analysis.weightwatcher import ANALYZE_COLUMNS as WW_COLUMNS
from spectra_cli.analysis.weightwatcher import linear_kde, mp_fit, ww_skip

safetensors_numpy = pytest.importorskip("safetensors.numpy")


@pytest.fixture(scope="module")
def hf_checkpoint(tmp_path_factory):
    """A BERT-shaped checkpoint, small: what WeightWatcher would analyse and skip."""
    rng = np.random.default_rng(0)
    d = 16
    t = {
        "embeddings.word_embeddings.weight": rng.standard_normal((200, d)).astype(np.float32),
        "embeddings.position_embeddings.weight": rng.standard_normal((40, d)).astype(np.float32),
        "embeddings.token_type_embeddings.weight": rng.standard_normal((2, d)).astype(np.float32),
        "embeddings.position_ids": np.arange(40, dtype=np.int64)[None, :],
        "embeddings.LayerNorm.weight": np.ones(d, np.float32),
        "encoder.layer.0.attention.self.query.weight": rng.standard_normal((d, d)).astype(np.float32),
        "encoder.layer.0.attention.self.query.bias": np.zeros(d, np.float32),
        "encoder.layer.0.intermediate.dense.weight": rng.standard_normal((4 * d, d)).astype(np.float32),
        "encoder.layer.0.narrow.weight": rng.standard_normal((7, d)).astype(np.float32),  # 7 < min_evals
        "pooler.dense.weight": rng.standard_normal((d, d)).astype(np.float32),
    }
    path = tmp_path_factory.mktemp("hf") / "model.safetensors"
    safetensors_numpy.save_file(t, str(path))
    return path, t


@pytest.fixture(scope="module")
def ww_batch(hf_checkpoint):
    return spectra.batch(str(hf_checkpoint[0]), convention="weightwatcher")


ANALYSED = {"embeddings.word_embeddings", "embeddings.position_embeddings", "encoder.layer.0.attention.self.query",
            "encoder.layer.0.intermediate.dense", "pooler.dense"}


def test_the_layers_weightwatcher_analyses_and_skips(ww_batch):
    res = ww_batch
    rows = res.rows()
    assert {r["longname"] for r in rows} == ANALYSED
    why = {s["item"].partition("::")[2]: (s["kind"], s["skipped"]) for s in res.skipped}
    assert why["embeddings.token_type_embeddings.weight"] == (
        "WeightWatcher-skipped layer", "2 eigenvalues; WeightWatcher needs at least 8 (its min_evals)")
    assert why["encoder.layer.0.narrow.weight"][1] == "7 eigenvalues; WeightWatcher needs at least 8 (its min_evals)"
    assert why["embeddings.position_ids"][0] == "integer buffer" and why["embeddings.LayerNorm.weight"][0] == "vector"
    assert ww_skip((60000, 100)) == "its larger side is 60000; WeightWatcher takes at most 50000 (its max_N)"
    assert ww_skip((20000, 16000)) == "16000 eigenvalues; WeightWatcher takes at most 15000 (its max_evals)"
    # the summary lists every skipped tensor with why
    listed = {s["item"]: s["why"] for s in res.summary()["skipped_items"]}
    assert len(listed) == len(res.skipped) == 5


def test_its_columns_by_its_names_in_network_order(hf_checkpoint, ww_batch):
    _, t = hf_checkpoint
    res = ww_batch
    rows = res.rows()
    assert list(rows[0]) == [*WW_COLUMNS, "rf", "alpha_hill", "xmin_hill", "tail_law"]  # (then spectra's own)
    assert [r["layer_id"] for r in rows] == list(range(5))
    assert [r["longname"] for r in rows] == sorted(ANALYSED)  # (the natural order of these names)
    q = next(r for r in rows if r["longname"] == "encoder.layer.0.intermediate.dense")
    assert q["name"] == "dense" and (q["N"], q["M"], q["Q"]) == (64, 16, 4.0)
    W = t["encoder.layer.0.intermediate.dense.weight"].astype(np.float64)
    ev = np.linalg.eigvalsh(W.T @ W)  # W^T W, no 1/N: an independent computation of every norm column
    assert q["norm"] == pytest.approx(ev.sum(), rel=1e-12)
    assert q["log_norm"] == pytest.approx(math.log10(ev.sum()), rel=1e-12)
    assert q["lambda_max"] == pytest.approx(ev.max(), rel=1e-12) == pytest.approx(q["spectral_norm"])
    assert q["stable_rank"] == pytest.approx(ev.sum() / ev.max(), rel=1e-12)
    assert q["log_alpha_norm"] == pytest.approx(math.log10(np.sum(ev ** q["alpha"])), rel=1e-10)
    assert q["alpha_weighted"] == pytest.approx(q["alpha"] * math.log10(ev.max()), rel=1e-12)
    p = ev / ev.sum() + 1e-10
    assert q["entropy"] == pytest.approx(-np.sum(p * np.log(p)) / math.log(16 + 1e-10), rel=1e-10)
    assert q["num_evals"] == 16 and q["matrix_rank"] == 16 and q["rank_loss"] == 0
    assert q["xmax"] == pytest.approx(ev.max(), rel=1e-12) and q["xmin"] >= 1e-5
    for r in rows:
        a = r["alpha"]
        assert r["warning"] == ("over-trained" if a < 2 else "under-trained" if a > 6 else "")
    df = res.to_pandas()
    assert list(df.columns) == [*WW_COLUMNS, "rf", "alpha_hill", "xmin_hill", "tail_law"] and len(df) == 5


def test_summary_is_get_summary_of_the_same_layers(hf_checkpoint, ww_batch, cli):
    path, _ = hf_checkpoint
    res = ww_batch
    s = res.summary()
    rows = res.rows()
    for k in ("log_norm", "alpha", "alpha_weighted", "log_alpha_norm", "log_spectral_norm", "stable_rank",
              "mp_softrank"):
        assert s[k] == pytest.approx(np.mean([r[k] for r in rows]), rel=1e-12), k
    r = cli("batch", path, "--convention", "weightwatcher", "--summary", "--json")
    assert r.exit_code == 0, r.stderr
    cli_summary = json.loads(r.stdout.splitlines()[-1])
    assert cli_summary["weightwatcher_summary"] == s["weightwatcher_summary"]


def test_linear_kde_is_the_kernel_sum():
    rng = np.random.default_rng(1)
    data = rng.gamma(2.0, size=300)
    x = np.linspace(0, data.max() + 0.5, 257)
    naive = np.array([np.sum(np.clip(1 - np.abs(xi - data) / 0.1, 0, None)) for xi in x]) / (data.size * 0.1)
    np.testing.assert_allclose(linear_kde(data, x, 0.1), naive, rtol=1e-12, atol=1e-15)


def test_mp_fit_of_a_random_matrix_finds_its_bulk_and_planted_spikes():
    rng = np.random.default_rng(2)
    n, m = 2000, 400
    W = rng.standard_normal((n, m))
    ev = np.linalg.eigvalsh(W.T @ W)
    fit = mp_fit(ev, n, m)
    assert fit is not None and fit.num_spikes == 0
    q = n / m  # the MP edge of mean-1 eigenvalues: (1 + 1/sqrt(Q))^2
    assert fit.bulk_max * fit.w_scale ** 2 == pytest.approx((1 + 1 / math.sqrt(q)) ** 2, rel=0.08)
    U = np.linalg.qr(rng.standard_normal((m, 3)))[0]
    spiked = W + (rng.standard_normal((n, 3)) * 4.0) @ U.T  # three strong directions
    fit2 = mp_fit(np.linalg.eigvalsh(spiked.T @ spiked), n, m)
    assert fit2 is not None and fit2.num_spikes >= 3 and fit2.mp_softrank < 1


def test_convention_conflicts_and_choices():
    X = np.random.default_rng(3).standard_normal((100, 20))
    with pytest.raises(spectra.OptionError, match="convention='weightwatcher' sets centered=False"):
        spectra.fit(X, convention="weightwatcher", centered=True)
    with pytest.raises(spectra.OptionError, match="convention"):
        spectra.fit(X, convention="keras")
    rep = spectra.fit(X, convention="weightwatcher")
    d = rep.to_dict()
    assert d["options"]["centered"] is False and d["options"]["convention"] == "weightwatcher"
    assert d["density"]["alpha"] == d["weightwatcher"]["columns"]["alpha"]


def test_rows_and_to_pandas_of_reports_skips_and_failures(tmp_path, hf_checkpoint):
    pd = pytest.importorskip("pandas")
    path, _ = hf_checkpoint
    np.save(tmp_path / "ok.npy", np.random.default_rng(4).standard_normal((300, 12)))
    (tmp_path / "bad.npy").write_bytes(b"\x93NUMPY\x01\x00garbage")
    res = spectra.batch([str(path), str(tmp_path / "ok.npy"), str(tmp_path / "bad.npy")], window="2:6")
    lines = list(res)
    assert len(lines) == len(res) == len(res.results) + len(res.skipped)
    df = res.to_pandas(skipped=True)
    assert isinstance(df, pd.DataFrame) and len(df) == len(lines)
    status = df.set_index("item")["status"]
    assert status[str(tmp_path / "bad.npy")] == "failed" and status[str(tmp_path / "ok.npy")] == "ok"
    assert status[f"{path}::embeddings.LayerNorm.weight"] == "skipped"
    ok = df[df.item == str(tmp_path / "ok.npy")].iloc[0]
    rep = spectra.fit(str(tmp_path / "ok.npy"), window="2:6")
    assert ok["fit.alpha"] == pytest.approx(rep.fit.alpha, rel=1e-12) and ok["fit.window"] == "2:6"
    assert df[df.status == "failed"].iloc[0]["why"] and pd.isna(df[df.status == "failed"].iloc[0]["fit.alpha"])
    html = res._repr_html_()
    assert html.startswith("<p><b>spectra batch:") and "<table>" in html


def test_report_to_pandas_and_repr_html():
    pytest.importorskip("pandas")
    rng = np.random.default_rng(5)
    X = rng.standard_normal((2000, 30)) * np.arange(1, 31) ** -0.5
    rep = spectra.fit(X, window=["2:10", "5:20"])
    row = rep.to_pandas()  # one row of metrics, as a batch's rows
    assert len(row) == 1 and row["fit.alpha"][0] == pytest.approx(rep.fit.alpha)
    assert row["rank.participation_ratio"][0] == pytest.approx(rep.rank.participation_ratio)
    assert row["fit.alpha"].dtype.kind == "f" and row["status"][0] == "ok"
    from spectra_cli.frames import batch_rows

    assert list(row.columns) == list(batch_rows([{"item": "x", "error": "e"}])[0])
    df = rep.spectrum_frame()
    assert list(df.columns) == ["rank", "eigenvalue", "explained_variance_ratio", "usable", "fit 2-10", "fit 5-20"]
    np.testing.assert_allclose(df["eigenvalue"], rep.to_dict()["spectrum"]["eigenvalues"])
    inside = df["fit 2-10"].notna()
    assert list(df["rank"][inside]) == list(range(2, 11))
    f = rep.fits[0]
    assert df["fit 2-10"][1] == pytest.approx(math.exp(f.intercept) * 2 ** -f.alpha, rel=1e-12)
    assert "participation ratio" in rep._repr_html_() and "&lt;array&gt;" in rep._repr_html_()


def test_info_fit_and_batch_count_the_same_matrices(hf_checkpoint, cli):
    path, t = hf_checkpoint
    info = spectra.info(str(path)).to_dict() if hasattr(spectra.info(str(path)), "to_dict") else spectra.info(str(path))
    n_batch = len(spectra.batch(str(path)).results)
    assert info["matrices"] == n_batch == 7  # 10 tensors less the integer buffer, the norm and the bias
    with pytest.raises(spectra.InputError, match=f"holds {n_batch} weight matrices"):
        spectra.fit(str(path))


def test_weights_past_float64_give_nulls_not_errors_and_ranks_are_right():
    import warnings

    rng = np.random.default_rng(6)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # numpy's floating-point warnings never escape
        warnings.simplefilter("ignore", spectra.SpectraWarning)
        big = spectra.fit(rng.standard_normal((20, 10)) * 1e153, convention="weightwatcher").to_dict()
        cols = big["weightwatcher"]["columns"]
        assert cols["norm"] is None and cols["W_scale"] is None or cols["W_scale"] == 0.0
        json.dumps(big, allow_nan=False)
        u = rng.standard_normal((30, 1))
        rank1 = spectra.fit(u @ rng.standard_normal((1, 12)), convention="weightwatcher").to_dict()
        assert rank1["weightwatcher"]["columns"]["matrix_rank"] == 1 == np.linalg.matrix_rank(u @ u.T)
        assert rank1["weightwatcher"]["columns"]["rank_loss"] == 11
        for bad in ([np.inf, 1, 2], [1e308, 1e308, 1], [1e-320, 2e-320, 3e-320], [np.nan, 1, 2], [0, 0, 0], [5]):
            mp_fit(np.asarray(bad, float), 10, 3)  # a result or None, never an error or a warning
        assert mp_fit(np.ones(5), 0, 10) is None and mp_fit(np.ones((3, 3)), 10, 3) is None


def test_log_alpha_norm_does_not_overflow():
    from spectra_cli.analysis.density import DensityFit
    from spectra_cli.analysis.weightwatcher import ww_columns

    ev = np.geomspace(1e-3, 1e4, 50)
    dens = DensityFit(alpha=91.0, xmin=1.0, ks_distance=0.1, n_tail=10, stderr=1.0, n_candidates=49)
    cols = ww_columns(ev, n=100, m=50, density=dens, alpha_range=(2, 6))
    ref = 4 * 91.0 + math.log10(float(np.sum((ev / 1e4) ** 91.0)))  # log10 of sum ev^91, in log space
    assert cols["log_alpha_norm"] == pytest.approx(ref, rel=1e-12) and math.isfinite(cols["log_alpha_norm"])


def test_the_convention_refuses_what_contradicts_it(hf_checkpoint):
    path, _ = hf_checkpoint
    X = np.random.default_rng(7).standard_normal((100, 20))
    for kwargs, message in (({"centered": True}, "sets centered=False"), ({"density": False}, "sets density=True"),
                            ({"top": 5}, "needs the whole matrix and every eigenvalue")):
        with pytest.raises(spectra.OptionError, match=message):
            spectra.batch(str(path), convention="weightwatcher", **kwargs)
    with pytest.raises(spectra.OptionError, match="centered='yes'|centered must"):
        spectra.fit(X, convention="weightwatcher", centered="yes")
    with pytest.raises(spectra.OptionError, match="needs the whole matrix and every eigenvalue"):
        spectra.fit(np.sort(np.random.default_rng(1).random(30))[::-1].copy(), eigenvalues=True,
                    convention="weightwatcher")
    narrow = spectra.fit(np.random.default_rng(8).standard_normal((7, 1000)), convention="weightwatcher")
    assert any("WeightWatcher's analysis would skip this matrix (7 eigenvalues" in w for w in narrow.warnings)
    with pytest.raises(spectra.OptionError, match="hold no WeightWatcher columns"):
        spectra.batch(str(path)).__class__(spectra.batch(str(path)).results, convention="weightwatcher").rows()


def test_fit_in_weightwatchers_convention_shows_its_section_and_no_sampling_warning(cli, tmp_path):
    np.save(tmp_path / "w.npy", (np.random.default_rng(3).standard_normal((384, 384)) / 20).astype(np.float32))
    r = cli("fit", tmp_path / "w.npy", "--convention", "weightwatcher")
    assert r.exit_code == 0, r.stderr
    assert "WeightWatcher (its metrics on the eigenvalues of W^T W" in r.stdout
    for word in ("WW alpha", "WW log_spectral_norm", "spikes over the Marchenko-Pastur edge", "WW num_spikes",
                 "verdict"):
        assert word in r.stdout, word
    assert "biased by finite sampling" not in r.stdout  # a weight matrix's rows are no sample


def test_to_pandas_holds_the_items_analysed_with_numeric_columns(hf_checkpoint):
    pandas = pytest.importorskip("pandas")
    path, _ = hf_checkpoint
    res = spectra.batch(str(path))
    df = res.to_pandas()
    assert set(df["status"]) <= {"ok", "failed"} and len(df) == len(res.results)
    assert len(res.to_pandas(skipped=True)) == len(res.results) + len(res.skipped)
    for column in ("fit.alpha", "fit.ci.low", "rank.participation_ratio", "density.alpha"):  # ci, density: all null
        assert pandas.api.types.is_float_dtype(df[column]), column
