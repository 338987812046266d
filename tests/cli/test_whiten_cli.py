"""Whitening: identity covariance, removed directions, saved transforms, atomic output, errors. (command line)."""

from __future__ import annotations

import os

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.conftest import SAMPLE, powerlaw_matrix


def test_zca_output_covariance_is_the_identity(cli, full_rank, tmp_path, validate):
    p, _ = full_rank
    r = cli("whiten", p, "--method", "zca", "-o", tmp_path / "w.npy", "--json")
    assert r.exit_code == 0, r.stderr
    doc = r.json()
    validate(doc)
    Y = np.load(tmp_path / "w.npy")
    assert Y.dtype == np.float64 and Y.shape == (20000, 24)
    np.testing.assert_allclose(np.cov(Y, rowvar=False), np.eye(24), atol=1e-6)
    np.testing.assert_allclose(Y.mean(axis=0), 0, atol=1e-10)
    np.testing.assert_allclose(doc["whitening"]["spectrum_after"]["eigenvalues"], 1.0, atol=1e-9)
    assert doc["whitening"]["isotropy_after"]["top_pc_share"] == pytest.approx(1 / 24, rel=1e-6)


def test_pca_top_k_output(cli, full_rank, tmp_path):
    p, X = full_rank
    assert cli("whiten", p, "--method", "pca", "--k", "5", "-o", tmp_path / "w.npy").exit_code == 0
    Y = np.load(tmp_path / "w.npy")
    assert Y.shape == (20000, 5)
    np.testing.assert_allclose(np.cov(Y, rowvar=False), np.eye(5), atol=1e-9)
    # the first component is the top principal direction, signed by its largest entry
    lam, V = np.linalg.eigh(np.cov(X, rowvar=False))
    v = V[:, -1] * np.sign(V[np.argmax(np.abs(V[:, -1])), -1])
    np.testing.assert_allclose(Y[:, 0], (X - X.mean(0)) @ v / np.sqrt(lam[-1]), atol=1e-8)


def test_abtt_removes_the_top_two_directions(cli, full_rank, tmp_path):
    p, X = full_rank
    doc = cli("whiten", p, "--method", "abtt", "--k", "2", "-o", tmp_path / "w.npy", "--json").json()
    Y = np.load(tmp_path / "w.npy")
    lam, V = np.linalg.eigh(np.cov(X, rowvar=False))
    top2 = V[:, -2:]
    assert np.abs(np.cov(Y @ top2, rowvar=False)).max() < 1e-12 * lam[-1]
    # the rest is untouched
    rest = V[:, :-2]
    np.testing.assert_allclose(np.cov(Y @ rest, rowvar=False), np.cov(X @ rest, rowvar=False), atol=1e-10)
    assert doc["whitening"]["k"] == 2 and doc["whitening"]["d_out"] == 24


def test_saved_transform_reapplied_reproduces_the_output(cli, full_rank, tmp_path, validate):
    p, _ = full_rank
    t = tmp_path / "t.npz"
    assert cli("whiten", p, "-o", tmp_path / "a.npy", "--save-transform", t).exit_code == 0
    r = cli("whiten", p, "-o", tmp_path / "b.npy", "--transform", t, "--json")
    assert r.exit_code == 0, r.stderr
    validate(r.json())
    assert r.json()["whitening"]["transform"] == str(t)
    np.testing.assert_allclose(np.load(tmp_path / "b.npy"), np.load(tmp_path / "a.npy"), atol=1e-10, rtol=0)
    with np.load(t, allow_pickle=False) as z:  # plain arrays only
        assert str(z["method"]) == "zca" and z["matrix"].shape == (24, 24) and len(str(z["fingerprint"])) == 16


def test_transform_applies_to_new_data_and_refuses_a_width_mismatch(cli, full_rank, tmp_path):
    p, X = full_rank
    t = tmp_path / "t.npz"
    cli("whiten", p, "-o", tmp_path / "a.npy", "--save-transform", t)
    new = powerlaw_matrix(500, 24, 1.0, seed=9)
    np.save(tmp_path / "new.npy", new)
    assert cli("whiten", tmp_path / "new.npy", "--transform", t, "-o", tmp_path / "n.npy").exit_code == 0
    mu = X.mean(0)
    lam, V = np.linalg.eigh(np.cov(X, rowvar=False))
    W = V @ np.diag(1 / np.sqrt(lam)) @ V.T
    np.testing.assert_allclose(np.load(tmp_path / "n.npy"), (new - mu) @ W, atol=1e-8)
    np.save(tmp_path / "narrow.npy", new[:, :10])
    r = cli("whiten", tmp_path / "narrow.npy", "--transform", t, "-o", tmp_path / "m.npy")
    assert r.exit_code == 2 and r.stdout == ""
    assert r.stderr == f"error: transform {t} expects 24 features; {tmp_path / 'narrow.npy'} has 10.\n"
    assert not (tmp_path / "m.npy").exists()


def test_parquet_in_parquet_out_keeps_the_column(cli, tmp_path):
    r = cli("whiten", SAMPLE / "minilm_layer5_tokens_4k.parquet", "-o", tmp_path / "w.parquet", "--json")
    assert r.exit_code == 0, r.stderr
    t = pq.read_table(tmp_path / "w.parquet")
    assert t.column_names == ["emb"] and t.num_rows == 4096
    Y = np.stack(t.column("emb").to_numpy(zero_copy_only=False)).astype(np.float64)
    C = np.cov(Y, rowvar=False)
    lam = np.linalg.eigvalsh(C)
    # LayerNorm's near-null direction is zeroed, the other 383 come out with unit variance
    assert lam[0] < 1e-6 and np.allclose(lam[1:], 1.0, atol=1e-4)
    assert r.json()["whitening"]["zeroed_directions"] == 1


def test_numeric_columns_keep_their_names(cli, tmp_path):
    X = powerlaw_matrix(3000, 3, 1.0, seed=1)
    pq.write_table(pa.table({"a": X[:, 0], "b": X[:, 1], "c": X[:, 2]}), tmp_path / "x.parquet")
    assert cli("whiten", tmp_path / "x.parquet", "-o", tmp_path / "w.parquet").exit_code == 0
    assert pq.read_table(tmp_path / "w.parquet").column_names == ["a", "b", "c"]
    assert cli("whiten", tmp_path / "x.parquet", "--method", "pca", "--k", "2", "-o", tmp_path / "p.parquet"
               ).exit_code == 0
    assert pq.read_table(tmp_path / "p.parquet").column_names == ["pc_1", "pc_2"]


def test_directions_below_the_floor_are_never_amplified(cli, tmp_path):
    rng = np.random.default_rng(2)
    X = rng.standard_normal((2000, 6))
    X[:, 5] = X[:, 0] + X[:, 1]  # exactly dependent: one null direction
    np.save(tmp_path / "x.npy", X)
    doc = cli("whiten", tmp_path / "x.npy", "-o", tmp_path / "w.npy", "--json").json()
    Y = np.load(tmp_path / "w.npy")
    assert np.abs(Y).max() < 50  # no 1/sqrt(1e-16) blow-up
    assert doc["whitening"]["zeroed_directions"] == 1
    r = cli("whiten", tmp_path / "x.npy", "--method", "pca", "--k", "6", "-o", tmp_path / "p.npy")
    assert r.exit_code == 2
    assert r.stderr.startswith("error: --k 6 exceeds the usable rank 5: directions past it are below")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--method", "pcaa"], "error: --method 'pcaa' is not one of 'zca', 'pca', 'abtt'.\n"),
        (["--method", "abtt", "--k", "0"], "error: --k 0 must be between 1 and d = 24.\n"),
        (["--eps", "-1"], "error: --eps -1.0 must be a finite number >= 0.\n"),
        (["--save-transform", "t.json"], "error: --save-transform 't.json': the file must end in .npz.\n"),
    ],
)
def test_bad_whiten_options_leave_no_file(cli, full_rank, tmp_path, monkeypatch, args, message):
    p, _ = full_rank
    monkeypatch.chdir(tmp_path)
    before = set(os.listdir(tmp_path))
    r = cli("whiten", p, "-o", "w.npy", *args)
    assert r.exit_code == 2 and r.stdout == "" and r.stderr == message
    assert set(os.listdir(tmp_path)) == before  # nothing written, not even the output


def test_whiten_output_errors(cli, full_rank, tmp_path):
    p, _ = full_rank
    r = cli("whiten", p)
    assert r.exit_code == 2 and r.stderr == "error: whiten needs -o FILE (.npy or .parquet).\n"
    r = cli("whiten", p, "-o", tmp_path / "w.csv")
    assert r.stderr == f"error: -o '{tmp_path / 'w.csv'}': the output must end in .npy or .parquet.\n"
    (tmp_path / "bad.npz").write_bytes(b"not a zip")
    r = cli("whiten", p, "-o", tmp_path / "w.npy", "--transform", tmp_path / "bad.npz")
    assert r.exit_code == 2 and r.stderr.startswith(f"error: cannot read transform {tmp_path / 'bad.npz'}")
    np.savez(tmp_path / "other.npz", a=np.zeros(3))
    r = cli("whiten", p, "-o", tmp_path / "w.npy", "--transform", tmp_path / "other.npz")
    assert r.stderr.startswith(f"error: {tmp_path / 'other.npz'} is not a spectra transform: missing mean")


def test_after_figures_match_the_written_rows(cli, full_rank, tmp_path):
    p, _ = full_rank
    doc = cli("whiten", p, "--method", "abtt", "--k", "3", "-o", tmp_path / "w.npy", "--json").json()
    Y = np.load(tmp_path / "w.npy")
    U = Y / np.linalg.norm(Y, axis=1)[:, None]
    s = U.sum(axis=0)
    n = len(Y)
    after = doc["whitening"]["isotropy_after"]
    assert after["mean_cosine"] == pytest.approx((s @ s - n) / (n * (n - 1)), rel=1e-8, abs=1e-12)
    lam = np.linalg.eigvalsh(np.cov(Y, rowvar=False))[::-1]
    np.testing.assert_allclose(doc["whitening"]["spectrum_after"]["eigenvalues"][:21], lam[:21], rtol=1e-8)
    assert after["top_pc_share"] == pytest.approx(lam[0] / lam.sum(), rel=1e-8)
