"""Checkpoints and CI as users run them: a Hugging Face-style folder (sharded, float32 and bfloat16
weights, an int64 buffer, 1-D norms, a 2-row embedding) passes with WeightWatcher-convention
numbers checked against an independent Hill/KS computation; pipes, umask, stdin and a killed batch."""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from tests.conftest import ROOT, powerlaw_matrix

safetensors_numpy = pytest.importorskip("safetensors.numpy")


def _bf16(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """bfloat16 bits (round to nearest even) and the float32 values they stand for."""
    u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)
    bits = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
    return bits, (bits.astype(np.uint32) << 16).view(np.float32)


@pytest.fixture
def hf_model(tmp_path):
    rng = np.random.default_rng(7)
    q = powerlaw_matrix(96, 64, 0.6, seed=1).astype(np.float32)  # heavy-tailed-ish weights
    k_bits, k = _bf16(rng.standard_normal((64, 64)) * 0.05)
    emb = rng.standard_normal((200, 64)).astype(np.float32)
    tensors_1 = {"embeddings.word_embeddings.weight": emb,
                 "embeddings.position_ids": np.arange(128, dtype=np.int64)[None, :],
                 "embeddings.token_type_embeddings.weight": rng.standard_normal((2, 64)).astype(np.float32),
                 "embeddings.LayerNorm.weight": np.ones(64, np.float32)}
    tensors_2 = {"encoder.layer.0.attention.self.query.weight": q,
                 "encoder.layer.0.attention.self.query.bias": np.zeros(96, np.float32)}
    d = tmp_path / "model"
    d.mkdir()
    safetensors_numpy.save_file(tensors_1, d / "model-00001-of-00002.safetensors")
    safetensors_numpy.save_file(tensors_2, d / "model-00002-of-00002.safetensors")
    # bfloat16 has no numpy dtype: write that shard's tensor as raw BF16 bytes by hand
    header = json.dumps({"encoder.layer.0.attention.self.key.weight": {
        "dtype": "BF16", "shape": [64, 64], "data_offsets": [0, k_bits.nbytes]}}).encode()
    (d / "model-00003-of-00003.safetensors").write_bytes(len(header).to_bytes(8, "little") + header
                                                         + k_bits.tobytes())
    weight_map = {**dict.fromkeys(tensors_1, "model-00001-of-00002.safetensors"),
                  **dict.fromkeys(tensors_2, "model-00002-of-00002.safetensors"),
                  "encoder.layer.0.attention.self.key.weight": "model-00003-of-00003.safetensors"}
    (d / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    (d / "config.json").write_text('{"model_type": "bert"}')
    (d / "pytorch_model.bin").write_bytes(b"\x80\x04 a pickle that must never be loaded")
    return d, {"embeddings.word_embeddings.weight": emb, "encoder.layer.0.attention.self.query.weight": q,
               "encoder.layer.0.attention.self.key.weight": k}


def hill_ks_reference(lam: np.ndarray) -> tuple[float, float]:
    """Clauset et al.'s continuous power-law fit written out plainly: for every candidate xmin (each
    distinct value but the largest), alpha = 1 + n / sum ln(x / xmin) over x >= xmin, and the KS
    distance between the tail's empirical CDF (i/n, i = 0..n-1) and 1 - (x/xmin)^(1-alpha)."""
    x = np.sort(lam[lam > 0])
    best = (math.inf, math.nan, math.nan)
    for xmin in sorted(set(x.tolist()))[:-1]:
        tail = x[x >= xmin]
        n = len(tail)
        alpha = 1 + n / sum(math.log(v / xmin) for v in tail)
        ks = max(abs((1 - (v / xmin) ** (1 - alpha)) - i / n) for i, v in enumerate(tail))
        if ks < best[0]:
            best = (ks, alpha, xmin)
    return best[1], best[2]


def test_a_hugging_face_folder_passes_with_weightwatcher_numbers(cli, hf_model, validate):
    d, weights = hf_model
    r = cli("batch", d, "--density", "--uncentered", "--json")
    assert r.exit_code == 0, r.stderr
    lines = [json.loads(x) for x in r.stdout.splitlines()]
    skipped = sorted((x["item"].split("::")[1], x["kind"]) for x in lines if "skipped" in x)
    assert skipped == [("embeddings.LayerNorm.weight", "vector"), ("embeddings.position_ids", "integer buffer"),
                       ("encoder.layer.0.attention.self.query.bias", "vector")]
    assert "note: skipped 2 vectors, 1 integer buffer (not weight matrices; --verbose lists them)" in r.stderr
    assert "ignored 1 PyTorch pickle(s)" in r.stderr
    docs = {x["item"].split("::")[1]: x for x in lines if "skipped" not in x}
    assert set(docs) == {*weights, "embeddings.token_type_embeddings.weight"}
    two_rows = docs["embeddings.token_type_embeddings.weight"]
    assert two_rows["fit"] is None and two_rows["density"] is None  # 2 eigenvalues: nothing to fit, no error
    assert any(w.startswith("no density fit") for w in two_rows["warnings"])
    for name, W in weights.items():
        doc = docs[name]
        validate(doc)
        ww = doc["weightwatcher"]
        W64 = W.astype(np.float64)
        evals = np.linalg.svd(W64, compute_uv=False) ** 2  # WeightWatcher's ESD: eigenvalues of W^T W
        alpha, xmin = hill_ks_reference(evals)
        assert ww["alpha"] == pytest.approx(alpha, rel=1e-10), name
        assert doc["density"]["xmin"] == pytest.approx(xmin / W.shape[0], rel=1e-10)  # spectra's X^T X / n
        assert ww["log_norm"] == pytest.approx(math.log10(np.sum(W64**2)), rel=1e-12)
        assert ww["log_spectral_norm"] == pytest.approx(math.log10(np.linalg.norm(W64, 2) ** 2), rel=1e-12)
        assert ww["stable_rank"] == pytest.approx(np.sum(W64**2) / np.linalg.norm(W64, 2) ** 2, rel=1e-10)
        assert ww["alpha_weighted"] == pytest.approx(alpha * ww["log_spectral_norm"], rel=1e-10)
        # the Marchenko-Pastur bulk edge of a random N x M matrix of the same Frobenius norm, N >= M
        big, small = max(W.shape), min(W.shape)
        edge = np.sum(W64**2) / small * (1 + math.sqrt(small / big)) ** 2
        assert ww["mp_bulk_edge"] == pytest.approx(edge, rel=1e-10)
        assert ww["mp_spikes"] == int(np.sum(evals > edge))
        lo, hi = ww["alpha_range"]
        assert ww["verdict"] == ("over-trained" if alpha < lo else "under-trained" if alpha > hi else "ok")
    assert docs["encoder.layer.0.attention.self.key.weight"]["source"]["dtype"] == "bfloat16"


def test_model_summary_and_per_item_checks(cli, hf_model, tmp_path):
    d, _ = hf_model
    out = tmp_path / "w.jsonl"
    assert cli("batch", d, "--density", "--uncentered", "--jsonl", out).exit_code == 0
    doc = cli("batch", out, "--summary", "--json").json()
    assert doc["schema"] == "spectra.batch-summary/1" and doc["layers"] == 4 and doc["skipped"] == 3
    assert doc["matrix"] == "uncentred"  # the metrics' labels are the same; the summary names their matrix
    assert "Metrics of the uncentred rows, X^T X / n" in cli("batch", out, "--summary").stdout
    assert sum(doc["verdicts"].values()) == 4 and doc["verdicts"]["no density fit"] == 1
    alphas = [json.loads(x)["weightwatcher"]["alpha"] for x in out.read_text().splitlines()
              if "weightwatcher" in json.loads(x) and json.loads(x)["weightwatcher"]["alpha"] is not None]
    metric = next(m for m in doc["metrics"] if m["field"] == "weightwatcher.alpha")
    assert metric["mean"] == pytest.approx(np.mean(alphas)) and metric["median"] == pytest.approx(np.median(alphas))
    fitted = [json.loads(x) for x in out.read_text().splitlines()]
    fitted = [x for x in fitted if (x.get("weightwatcher") or {}).get("alpha") is not None]
    params = np.array([x["source"]["n_rows"] * x["source"]["n_features"] for x in fitted], dtype=np.float64)
    a = np.array([x["weightwatcher"]["alpha"] for x in fitted])
    assert metric["weighted_mean"] == pytest.approx(np.average(a, weights=params), rel=1e-12)
    order = np.argsort(a)  # the weighted median: the first alpha whose cumulative parameter share reaches 1/2
    assert metric["weighted_median"] == a[order][np.searchsorted(np.cumsum(params[order]), params.sum() / 2)]
    r = cli("check", out, "--require", "weightwatcher.alpha between 0.5 50")
    assert r.exit_code == 1  # the 2-row embedding has no density fit: that item fails, by name
    assert "token_type_embeddings" in r.stdout and "3 of 4 item(s) pass" in r.stdout
    r = cli("check", out, "--require", "weightwatcher.alpha between 0.5 50", "--exclude", "token_type", "--json")
    assert r.exit_code == 0 and r.json()["excluded"] == [x["item"] for x in map(json.loads, out.read_text()
                                                                                 .splitlines())
                                                         if "token_type" in x["item"] and "skipped" not in x]
    r = cli("check", out, "--require", "weightwatcher.alpha between 0.5 50", "--only", "token_type")
    assert r.exit_code == 1 and "0 of 1 item(s) pass (3 left out by --only/--exclude)" in r.stdout
    # each item checked is held to the baseline's options, as one report is
    (tmp_path / "base.json").write_text(json.dumps(next(x for x in map(json.loads, out.read_text().splitlines())
                                                        if "skipped" not in x and "error" not in x)))
    r = cli("check", out, "--baseline", tmp_path / "base.json", "--max-change", "weightwatcher.alpha=1000%")
    assert r.exit_code in (0, 1), r.stderr  # (the same options: compared)
    other = cli("batch", d, "--density", "--jsonl", tmp_path / "w2.jsonl")  # (centred: other options)
    assert other.exit_code == 0
    r = cli("check", tmp_path / "w2.jsonl", "--baseline", tmp_path / "base.json", "--max-change",
            "fit.alpha=1000%")
    assert r.exit_code == 2 and "were made with different options (centered" in r.stderr
    r = cli("check", out, "--require", "weightwatcher.alpha > 0", "--window", "2:20")
    assert r.exit_code == 2 and r.stderr.startswith("error: --window makes a report from an input; ")
    r = cli("check", out, "--require", "weightwatcher.alpha > 0", "--only", "nothing-like-this")
    assert r.exit_code == 2 and r.stderr == ("error: --only left no item to check (of 4; the patterns are searched in "
                                             "each item's whole name, as the JSON's item gives it).\n")
    r = cli("check", out, "--require", "weightwatcher.alpha > 0", "--exclude", "(a)\\1")
    assert r.exit_code == 2 and "--exclude" in r.stderr and "back-reference" in r.stderr
    assert cli("check", out, "--require", "rank.numerical_rank >= 1").exit_code == 0
    r = cli("batch", d / "pytorch_model.bin")
    assert r.exit_code == 2 and "never unpickles" in r.stderr and "safetensors" in r.stderr
    r = cli("batch", d, "--tensors", "nothing-like-this")
    assert r.exit_code == 2 and "matches none of the 7 tensors (e.g." in r.stderr


def _spectra(*args: object, **kw) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", "from spectra_cli.cli import main; main()", *map(str, args)],
                            cwd=ROOT, **kw)


def test_a_closed_pipe_ends_quietly(tmp_path):
    np.save(tmp_path / "e.npy", np.arange(1, 3001, dtype=np.float64) ** -1.0)
    proc = _spectra("fit", tmp_path / "e.npy", "--eigenvalues", "--window", "5:500", "--json",
                    stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()  # the reader is gone before spectra writes (`| head -c 10` that already exited)
    err = proc.communicate(timeout=60)[1].decode()
    assert proc.returncode == 128 + signal.SIGPIPE and "Traceback" not in err and "error" not in err
    # the tables too (rich's own answer to a closed stdout was exit 1: a failed check, to a CI)
    proc = _spectra("fit", tmp_path / "e.npy", "--eigenvalues", "--window", "5:500",
                    stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()
    err = proc.communicate(timeout=60)[1].decode()
    assert proc.returncode == 128 + signal.SIGPIPE and "Traceback" not in err and "error" not in err


def test_outputs_get_the_umask_mode(cli, tmp_path):
    np.save(tmp_path / "a.npy", powerlaw_matrix(400, 8, 1.0))
    old = os.umask(0o027)
    try:
        assert cli("whiten", tmp_path / "a.npy", "-o", tmp_path / "w.npy", "--save-transform",
                   tmp_path / "t.npz").exit_code == 0
    finally:
        os.umask(old)
    assert (tmp_path / "w.npy").stat().st_mode & 0o777 == 0o640
    assert (tmp_path / "t.npz").stat().st_mode & 0o777 == 0o640


def test_a_report_from_stdin(tmp_path):
    np.save(tmp_path / "a.npy", powerlaw_matrix(2000, 16, 1.0))
    fit = _spectra("fit", tmp_path / "a.npy", "--window", "2:10", "--json", stdout=subprocess.PIPE,
                   stderr=subprocess.DEVNULL)
    check = _spectra("check", "-", "--require", "fit.alpha between 0.6 1.4", stdin=fit.stdout,
                     stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert fit.stdout is not None
    fit.stdout.close()
    out, err = check.communicate(timeout=60)
    assert fit.wait(timeout=60) == 0
    assert check.returncode == 0, err
    assert b"pass" in out


@pytest.mark.slow
def test_resume_after_a_killed_batch_leaves_one_whole_line_per_item(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    for i in range(12):
        np.save(data / f"m{i:02d}.npy", powerlaw_matrix(3000, 64, 1.0, seed=i))
    out = tmp_path / "r.jsonl"
    proc = _spectra("batch", data, "--jsonl", out, "--model", "broken", stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL)
    deadline = time.time() + 60
    while time.time() < deadline and (not out.exists() or out.read_bytes().count(b"\n") < 2):
        time.sleep(0.01)
    proc.kill()
    proc.wait(timeout=60)
    with open(out, "ab") as f:
        f.write(b'{"schema": "spectra.report/1", "item": "cut mid-li')  # as if killed inside a write
    r = _spectra("batch", data, "--jsonl", out, "--resume", "--model", "broken", stdout=subprocess.DEVNULL,
                 stderr=subprocess.PIPE)
    _, err = r.communicate(timeout=120)
    assert r.returncode == 0, err
    lines = out.read_text().splitlines()
    items = [json.loads(x)["item"] for x in lines]  # every line is whole JSON
    assert sorted(items) == sorted(str(p) for p in data.iterdir())


def test_a_shard_linked_from_outside_the_folder_is_refused_but_a_hub_cache_is_read(cli, tmp_path):
    from safetensors.numpy import save_file

    w = {"a.w": np.random.default_rng(0).standard_normal((16, 12)).astype(np.float32)}
    outside = tmp_path / "elsewhere" / "secret.safetensors"
    outside.parent.mkdir()
    save_file(w, str(outside))
    model = tmp_path / "model"
    model.mkdir()
    os.symlink(outside, model / "model.safetensors")
    r = cli("batch", model)
    assert r.exit_code == 2 and r.stdout == "" and len(r.stderr.splitlines()) == 1
    assert f"shard {model / 'model.safetensors'} is a link to {outside}, outside the model folder" in r.stderr
    # the Hugging Face cache: snapshots/<rev>/model.safetensors -> ../../blobs/<sha>
    repo = tmp_path / "hub" / "models--org--m"
    (repo / "blobs").mkdir(parents=True)
    (repo / "snapshots" / "abc").mkdir(parents=True)
    save_file(w, str(repo / "blobs" / "0123"))
    os.symlink("../../blobs/0123", repo / "snapshots" / "abc" / "model.safetensors")
    assert cli("batch", repo / "snapshots" / "abc", "--window", "2:6").exit_code == 0


def test_two_indexes_that_disagree_are_refused(cli, tmp_path):
    from safetensors.numpy import save_file

    rng = np.random.default_rng(1)
    save_file({"a.w": rng.standard_normal((16, 12)).astype(np.float32)}, str(tmp_path / "s1.safetensors"))
    save_file({"b.w": rng.standard_normal((16, 12)).astype(np.float32)}, str(tmp_path / "s2.safetensors"))
    index = {"weight_map": {"a.w": "s1.safetensors", "b.w": "s2.safetensors"}}
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps(index))
    (tmp_path / "pytorch.safetensors.index.json").write_text(json.dumps(index))
    assert cli("batch", tmp_path, "--window", "2:6").exit_code == 0  # (the same map twice: read)
    index["weight_map"]["b.w"] = "s1.safetensors"
    (tmp_path / "pytorch.safetensors.index.json").write_text(json.dumps(index))
    r = cli("batch", tmp_path, "--window", "2:6")
    assert r.exit_code == 2 and r.stdout == ""
    assert "are two safetensors indexes that map the tensors differently" in r.stderr


@pytest.mark.slow
def test_a_tensor_name_with_control_characters_and_dollars_draws_without_warnings(tmp_path):
    # a NUL in a tensor name put raw multi-line matplotlib warnings on stderr; '$...$' would be read as mathematics
    from safetensors.numpy import save_file

    rng = np.random.default_rng(0)
    save_file({"bad\x00name\nx$a$.w": rng.standard_normal((30, 20)).astype(np.float32),
               "ok.w": rng.standard_normal((30, 20)).astype(np.float32)}, str(tmp_path / "m.safetensors"))
    run = [sys.executable, "-m", "spectra_cli"]
    r = subprocess.run([*run, "batch", str(tmp_path / "m.safetensors"), "--jsonl", str(tmp_path / "r.jsonl")],
                       capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert r.returncode == 0, r.stderr
    r = subprocess.run([*run, "report", str(tmp_path / "r.jsonl"), "-o", str(tmp_path / "p.html")],
                       capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert r.returncode == 0 and r.stderr == f"wrote {tmp_path / 'p.html'}\n", r.stderr
