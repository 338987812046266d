"""What fine-tuning changed: ``batch FT --base BASE`` analyses each layer's change W_ft - W_base, checked against the
planted change's singular values (numpy's SVD of the change written differently), with the base's and the
fine-tune's own metrics side by side."""

from __future__ import annotations

import json

import numpy as np
import pytest

from spectra_cli import fit, registry
from spectra_cli.errors import InputError, OutputError
from spectra_cli.run.batch import batch
from spectra_cli.sources.change import Change

safetensors_numpy = pytest.importorskip("safetensors.numpy")

PLANTED = np.array([8.0, 7.0, 6.0, 5.0, 4.0, 3.0, 2.0, 1.0]) * 0.1


def _planted(rng: np.random.Generator, rows: int, cols: int) -> np.ndarray:
    u, _ = np.linalg.qr(rng.standard_normal((rows, PLANTED.size)))
    v, _ = np.linalg.qr(rng.standard_normal((cols, PLANTED.size)))
    return (u * PLANTED) @ v.T


@pytest.fixture
def pair(tmp_path):
    """A base checkpoint and a fine-tune of it: a rank-8 change planted in every query and value matrix (the
    fine-tune's names carry a prefix the base's lack), the other matrices unchanged, one layer new and one reshaped."""
    rng = np.random.default_rng(3)
    base, tuned = {}, {}
    for i in range(2):
        for m in ("query", "value", "key"):
            w = (rng.standard_normal((96, 64)) * 0.05).astype(np.float32)
            base[f"encoder.layer.{i}.attention.{m}.weight"] = w
            change = _planted(rng, 96, 64) if m != "key" else 0.0
            tuned[f"bert.encoder.layer.{i}.attention.{m}.weight"] = (w + change).astype(np.float32)
        base[f"encoder.layer.{i}.attention.query.bias"] = np.zeros(96, np.float32)
        tuned[f"bert.encoder.layer.{i}.attention.query.bias"] = np.ones(96, np.float32)
    base["pooler.dense.weight"] = rng.standard_normal((64, 64)).astype(np.float32)
    tuned["bert.pooler.dense.weight"] = rng.standard_normal((64, 32)).astype(np.float32)
    tuned["classifier.weight"] = rng.standard_normal((3, 64)).astype(np.float32)
    (tmp_path / "base").mkdir()
    (tmp_path / "tuned").mkdir()
    safetensors_numpy.save_file(base, tmp_path / "base" / "model.safetensors")
    safetensors_numpy.save_file(tuned, tmp_path / "tuned" / "model.safetensors")
    return tmp_path / "tuned", tmp_path / "base", base, tuned


def test_each_change_has_the_planted_singular_values_and_nothing_more(pair):
    tuned, base, wb, wt = pair
    result = batch(str(tuned), base=str(base), tensors="attention")
    lines = {r["item"].partition("::")[2]: r for r in result.results if "error" not in r}
    assert len(lines) == 6  # 2 layers x query, value, key (the biases are vectors: skipped)
    for name, doc in lines.items():
        assert doc["options"]["centered"] is False  # a change is no sample: its squared singular values / rows
        assert doc["source"]["change"]["base"].endswith("::" + name.removeprefix("bert."))
        ev = np.array(doc["spectrum"]["eigenvalues"])
        sv = np.sqrt(np.clip(ev, 0, None) * doc["source"]["n_rows"])
        exact = np.linalg.svd(wt[name].astype(np.float64) - wb[name.removeprefix("bert.")], compute_uv=False)
        if ".key." in name:  # unchanged: the change is zero
            assert doc["rank"]["numerical_rank"] == 0 and np.all(ev == 0)
            continue
        np.testing.assert_allclose(sv[:8] / sv[0], PLANTED / PLANTED[0], rtol=1e-6)
        np.testing.assert_allclose(sv[:8], exact[:8], rtol=1e-9)
        assert sv[8] < 1e-6 * sv[0]  # float32 rounding of the stored fine-tune, nothing more
        assert doc["rank"]["numerical_rank"] == 8
        assert registry.unknown_numbers(doc) == []


def test_the_base_and_the_fine_tune_stand_side_by_side(pair):
    tuned, base, *_ = pair
    result = batch(str(tuned), base=str(base), tensors=r"layer\.0\.attention\.query")
    (doc,) = result.results
    bm = doc["base_model"]
    assert bm["base"].endswith("::encoder.layer.0.attention.query.weight")
    rows = {m["field"]: m for m in bm["metrics"]}
    alone_a = fit(bm["base"]).to_dict()
    alone_b = fit(bm["fine_tune"]).to_dict()
    assert rows["fit.alpha"]["a"] == alone_a["fit"]["alpha"] and rows["fit.alpha"]["b"] == alone_b["fit"]["alpha"]
    assert rows["fit.alpha"]["se_a"] == alone_a["fit"]["se"]
    assert rows["rank.participation_ratio"]["diff"] == pytest.approx(
        alone_b["rank"]["participation_ratio"] - alone_a["rank"]["participation_ratio"])
    assert bm["significance"]["tested"] >= 1 and isinstance(rows["fit.alpha"]["significant"], bool)
    _, _, wb, wt = pair
    w0 = wb["encoder.layer.0.attention.query.weight"].astype(np.float64)
    w1 = wt["bert.encoder.layer.0.attention.query.weight"].astype(np.float64)
    assert bm["relative_change"] == pytest.approx(np.linalg.norm(w1 - w0) / np.linalg.norm(w0), rel=1e-12)
    json.dumps(doc, allow_nan=False)


def test_unmatched_and_reshaped_layers_are_said(pair):
    tuned, base, *_ = pair
    result = batch(str(tuned), base=str(base))
    kinds = {s["item"].partition("::")[2]: s["kind"] for s in result.skipped}
    assert kinds["classifier.weight"] == "layer not in the base"
    assert kinds["bert.pooler.dense.weight"] == "reshaped layer"
    assert "shape [64, 32] here, [64, 64] in the base" in next(
        s["skipped"] for s in result.skipped if s["kind"] == "reshaped layer")
    assert any("by their names' ending" in n for n in result.notes)
    assert "no counterpart in the base" in result.skip_note


def test_a_change_of_two_shapes_and_no_match_at_all_are_refused(tmp_path, pair):
    tuned, _, *_ = pair
    other = tmp_path / "other"
    other.mkdir()
    safetensors_numpy.save_file({"x.weight": np.ones((5, 5), np.float32)}, other / "m.safetensors")
    with pytest.raises(InputError, match="no layer matches one of the base"):
        batch(str(tuned), base=str(other))
    np.save(tmp_path / "a.npy", np.ones((4, 3)))
    np.save(tmp_path / "b.npy", np.ones((3, 4)))
    with pytest.raises(InputError, match=r"has shape \[4, 3\] and .* \[3, 4\]: a change needs two matrices of the "
                                         "same shape"):
        Change(str(tmp_path / "a.npy"), str(tmp_path / "b.npy")).open()


def test_the_cli_table_and_a_resumed_batch_of_changes(pair, cli, tmp_path):
    tuned, base, *_ = pair
    out = tmp_path / "changes.jsonl"
    r = cli("batch", str(tuned), "--base", str(base), "--tensors", "query|value", "--jsonl", str(out))
    assert r.exit_code == 0, r.stderr
    assert "change(s) W - W_base" in r.stdout and "significant" in r.stdout
    assert "base: " in r.stdout
    r = cli("batch", str(tuned), "--base", str(base), "--tensors", "query|value", "--jsonl", str(out), "--resume")
    assert r.exit_code == 0, r.stderr
    assert "kept 4 item(s) already in" in r.stderr


def test_a_base_that_cannot_be_read_or_is_the_fine_tune_or_is_ambiguous_says_so(pair, tmp_path):
    tuned, base, wb, _ = pair
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "m.safetensors").write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00not json at all!")
    with pytest.raises(InputError, match="the base .* cannot be read: .*safetensors"):
        batch(str(tuned), base=str(bad))
    with pytest.raises(InputError, match="a file of the fine-tune itself"):
        batch(str(tuned), base=str(tuned))
    twice = tmp_path / "twice"
    twice.mkdir()
    one = {"encoder.layer.0.attention.query.weight": wb["encoder.layer.0.attention.query.weight"]}
    safetensors_numpy.save_file(one, twice / "a.safetensors")
    safetensors_numpy.save_file(one, twice / "b.safetensors")
    with pytest.raises(InputError, match="holds tensor 'encoder.layer.0.attention.query.weight' twice"):
        batch(str(tuned), base=str(twice))


def test_nonfinite_base_entries_name_the_base(pair, tmp_path):
    tuned, _, wb, _ = pair
    nan = {k: v.copy() for k, v in wb.items()}
    nan["encoder.layer.0.attention.query.weight"][3, 3] = np.nan
    (tmp_path / "nanbase").mkdir()
    safetensors_numpy.save_file(nan, tmp_path / "nanbase" / "model.safetensors")
    result = batch(str(tuned), base=str(tmp_path / "nanbase"), tensors=r"layer\.0\.attention\.query")
    assert result.results[0]["error"].startswith("the base's ") and "NaN or inf" in result.results[0]["error"]


def test_a_change_between_two_archives(tmp_path):
    rng = np.random.default_rng(8)
    w = rng.standard_normal((40, 30))
    np.savez(tmp_path / "b.npz", a=w, c=w[:, :20])
    np.savez(tmp_path / "f.npz", a=w + _planted(rng, 40, 30), c=w[:, :20])
    result = batch(str(tmp_path / "f.npz"), base=str(tmp_path / "b.npz"))
    assert not [r for r in result.results if "error" in r] and len(result.results) == 2


def test_the_results_file_is_never_the_base(pair):
    tuned, base, *_ = pair
    before = (base / "model.safetensors").read_bytes()
    with pytest.raises(OutputError, match="is the input"):
        batch(str(tuned), base=str(base), jsonl=str(base / "model.safetensors"), overwrite=True)
    assert (base / "model.safetensors").read_bytes() == before
