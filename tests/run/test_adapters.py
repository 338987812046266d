"""PEFT LoRA adapter folders: each adapted layer's change s B A from the r x r problem, checked against numpy's SVD of
the dense change (written differently), the same change planted in a dense fine-tune, DoRA's rows, and every config
this reader refuses."""

from __future__ import annotations

import json
import math
import os

import numpy as np
import pytest

from spectra_cli import registry
from spectra_cli.errors import InputError, OptionError
from spectra_cli.run.batch import batch
from spectra_cli.sources.adapter import read_adapter

safetensors_numpy = pytest.importorskip("safetensors.numpy")

P = "base_model.model."
PLANTED = np.array([8.0, 7.0, 6.0, 5.0, 4.0, 3.0, 2.0, 1.0])


def _config(**over):
    doc = {"peft_type": "LORA", "r": 8, "lora_alpha": 16, "target_modules": ["query", "value"], "use_rslora": False,
           "use_dora": False, "fan_in_fan_out": False, "rank_pattern": {}, "alpha_pattern": {}, "lora_bias": False,
           "base_model_name_or_path": "base", "modules_to_save": None, "init_lora_weights": True}
    doc.update(over)
    return doc


def _factors(rng, out, inp, r=8, sv=PLANTED):
    """lora_A (r x in) and lora_B (out x r) whose product has singular values ``sv``."""
    u, _ = np.linalg.qr(rng.standard_normal((out, r)))
    v, _ = np.linalg.qr(rng.standard_normal((inp, r)))
    return np.ascontiguousarray(v.T, dtype=np.float32), np.ascontiguousarray(u * sv[:r], dtype=np.float32)


def _folder(path, tensors, **config):
    path.mkdir(parents=True, exist_ok=True)
    (path / "adapter_config.json").write_text(json.dumps(_config(**config)))
    safetensors_numpy.save_file(tensors, path / "adapter_model.safetensors")
    return path


@pytest.fixture
def base(tmp_path):
    rng = np.random.default_rng(5)
    w = {f"encoder.layer.{i}.attention.self.{m}.weight": (rng.standard_normal((48, 32)) * 0.1).astype(np.float32)
         for i in range(2) for m in ("query", "value", "key")}
    w["embeddings.word_embeddings.weight"] = rng.standard_normal((100, 32)).astype(np.float32)
    (tmp_path / "base").mkdir()
    safetensors_numpy.save_file(w, tmp_path / "base" / "model.safetensors")
    return tmp_path / "base", w


@pytest.fixture
def lora(tmp_path):
    rng = np.random.default_rng(6)
    t = {}
    for i in range(2):
        for m in ("query", "value"):
            a, b = _factors(rng, 48, 32)
            t[f"{P}encoder.layer.{i}.attention.self.{m}.lora_A.weight"] = a
            t[f"{P}encoder.layer.{i}.attention.self.{m}.lora_B.weight"] = b
    return _folder(tmp_path / "lora", t), t


def _sv(doc):
    ev = np.clip(np.array(doc["spectrum"]["eigenvalues"]), 0, None)
    return np.sqrt(ev * doc["source"]["n_rows"])


def test_each_adapted_layer_has_the_planted_singular_values_from_the_small_problem(lora):
    folder, t = lora
    result = batch(str(folder))
    assert len(result.results) == 4
    for doc in result.results:
        module = doc["item"].partition("::")[2]
        assert module.startswith("encoder.layer.")  # named by the base model's layer
        b = t[f"{P}{module}.lora_B.weight"].astype(np.float64)
        a = t[f"{P}{module}.lora_A.weight"].astype(np.float64)
        exact = np.linalg.svd(2.0 * b @ a, compute_uv=False)  # lora_alpha / r = 16 / 8
        sv = _sv(doc)
        assert doc["source"]["shape"] == [48, 32] and doc["source"]["adapter"]["scale"] == 2.0
        np.testing.assert_allclose(sv[:8] / sv[0], PLANTED / PLANTED[0], rtol=1e-6)
        np.testing.assert_allclose(sv[:8], exact[:8], rtol=1e-9)
        assert np.all(sv[8:] == 0) and doc["rank"]["numerical_rank"] == 8
        assert doc["options"]["centered"] is False and "r x r problem" in doc["spectrum"]["method"]
        assert registry.unknown_numbers(doc) == []
        json.dumps(doc, allow_nan=False)


def test_the_same_change_as_a_dense_fine_tune_and_as_an_adapter_has_the_same_spectrum(lora, base, tmp_path):
    folder, t = lora
    base_dir, w = base
    tuned = dict(w)
    for name in w:
        key = f"{P}{name.removesuffix('.weight')}"
        if key + ".lora_A.weight" in t:
            delta = 2.0 * t[key + ".lora_B.weight"].astype(np.float64) @ t[key + ".lora_A.weight"]
            tuned[name] = (w[name] + delta).astype(np.float32)
    (tmp_path / "tuned").mkdir()
    safetensors_numpy.save_file(tuned, tmp_path / "tuned" / "model.safetensors")
    dense = {d["item"].partition("::")[2].removesuffix(".weight"): _sv(d)
             for d in batch(str(tmp_path / "tuned"), base=str(base_dir), tensors="query|value").results}
    low = {d["item"].partition("::")[2]: _sv(d) for d in batch(str(folder), base=str(base_dir)).results}
    assert sorted(dense) == sorted(low) and len(low) == 4
    for k in low:
        np.testing.assert_allclose(dense[k][:8], low[k][:8], rtol=1e-5)  # (the dense fine-tune is stored in float32)
        assert dense[k][8] < 1e-5 * dense[k][0]


def test_with_the_base_the_adapted_layers_own_metrics_stand_beside_the_base(lora, base):
    folder, _ = lora
    base_dir, _ = base
    result = batch(str(folder), base=str(base_dir), tensors=r"layer\.0\.attention\.self\.query")
    (doc,) = result.results
    bm = doc["base_model"]
    assert bm["base"].endswith("::encoder.layer.0.attention.self.query.weight")
    assert {m["field"] for m in bm["metrics"]} >= {"fit.alpha", "rank.participation_ratio"}
    assert bm["fine_tune"].endswith("(W + the adapter's change)")
    key = "encoder.layer.0.attention.self.query"
    w0 = base[1][key + ".weight"].astype(np.float64)
    delta = 2.0 * lora[1][f"{P}{key}.lora_B.weight"].astype(np.float64) @ lora[1][f"{P}{key}.lora_A.weight"]
    assert bm["relative_change"] == pytest.approx(np.linalg.norm(delta) / np.linalg.norm(w0), rel=1e-10)
    alone = batch(str(base_dir), tensors=r"layer\.0\.attention\.self\.query").results[0]
    assert next(m for m in bm["metrics"] if m["field"] == "fit.alpha")["a"] == alone["fit"]["alpha"]


def test_rslora_and_per_module_rank_and_alpha_patterns_scale_as_peft_does(tmp_path):
    rng = np.random.default_rng(7)
    t = {}
    a, b = _factors(rng, 40, 30, r=4, sv=PLANTED)
    t[f"{P}encoder.layer.0.q.lora_A.weight"], t[f"{P}encoder.layer.0.q.lora_B.weight"] = a, b
    a, b = _factors(rng, 40, 30, r=8)
    t[f"{P}encoder.layer.10.q.lora_A.weight"], t[f"{P}encoder.layer.10.q.lora_B.weight"] = a, b
    folder = _folder(tmp_path / "p", t, use_rslora=True, rank_pattern={r"layer\.0\.q": 4},
                     alpha_pattern={r"layer\.0\.q": 2.0})
    layers = {x.module: x for x in read_adapter(str(folder)).layers}
    assert layers["encoder.layer.0.q"].rank == 4 and layers["encoder.layer.0.q"].scale == 2.0 / math.sqrt(4)
    assert layers["encoder.layer.10.q"].rank == 8 and layers["encoder.layer.10.q"].scale == 16 / math.sqrt(8)
    sv = layers["encoder.layer.0.q"].singular_values()
    np.testing.assert_allclose(sv, PLANTED[:4] * 1.0, rtol=1e-6)


def test_transposed_linear_layers_and_embeddings_are_oriented_as_the_base_stores_them(tmp_path):
    rng = np.random.default_rng(8)
    a, b = _factors(rng, 24, 16)  # a Conv1D of 16 -> 24, stored (in, out) = (16, 24)
    ea, eb = _factors(rng, 12, 50)  # lora_embedding_A: r x num_embeddings (50), B: dim (12) x r
    t = {f"{P}h.0.attn.c_attn.lora_A.weight": a, f"{P}h.0.attn.c_attn.lora_B.weight": b}
    folder = _folder(tmp_path / "g", t, fan_in_fan_out=True)
    (layer,) = read_adapter(str(folder)).layers
    assert layer.shape == (16, 24) and layer.kind == "linear (fan_in_fan_out)"
    left, right = layer.factors()
    np.testing.assert_allclose(left @ right, (2.0 * b.astype(np.float64) @ a).T, rtol=1e-12)
    t = {f"{P}wte.lora_embedding_A": ea, f"{P}wte.lora_embedding_B": eb}
    (layer,) = read_adapter(str(_folder(tmp_path / "e", t))).layers
    assert layer.shape == (50, 12) and layer.kind == "embedding"
    left, right = layer.factors()
    np.testing.assert_allclose(left @ right, (2.0 * eb.astype(np.float64) @ ea).T, rtol=1e-12)


def test_dora_needs_the_base_and_then_its_change_is_the_rescaled_rows(tmp_path, base):
    base_dir, w = base
    rng = np.random.default_rng(9)
    name = "encoder.layer.1.attention.self.value"
    a, b = _factors(rng, 48, 32)
    m = (1.0 + 0.1 * rng.standard_normal(48)).astype(np.float32)
    t = {f"{P}{name}.lora_A.weight": a, f"{P}{name}.lora_B.weight": b, f"{P}{name}.lora_magnitude_vector": m}
    folder = _folder(tmp_path / "dora", t, use_dora=True)
    with pytest.raises(OptionError, match="DoRA adapter's change depends on the base weights"):
        batch(str(folder))
    (doc,) = batch(str(folder), base=str(base_dir)).results
    w0 = w[name + ".weight"].astype(np.float64)
    v = w0 + 2.0 * b.astype(np.float64) @ a
    change = (m / np.linalg.norm(v, axis=1))[:, None] * v - w0  # peft's merge, written out
    exact = np.linalg.svd(change, compute_uv=False)
    np.testing.assert_allclose(_sv(doc)[:32], exact, rtol=1e-8, atol=1e-12 * exact[0])
    assert doc["source"]["adapter"]["dora"] is True and doc["rank"]["numerical_rank"] == 32  # full rank


def test_bfloat16_factors_are_read_exactly(tmp_path):
    rng = np.random.default_rng(10)
    a, b = _factors(rng, 20, 20)
    bits = {k: ((v.view(np.uint32) + 0x8000) >> 16).astype(np.uint16) for k, v in (("A", a), ("B", b))}
    header, blobs, off = {}, [], 0
    for k, shape in (("A", a.shape), ("B", b.shape)):
        raw = bits[k].tobytes()
        header[f"{P}x.lora_{k}.weight"] = {"dtype": "BF16", "shape": list(shape), "data_offsets": [off, off + len(raw)]}
        blobs.append(raw)
        off += len(raw)
    folder = tmp_path / "bf"
    folder.mkdir()
    (folder / "adapter_config.json").write_text(json.dumps(_config()))
    head = json.dumps(header).encode()
    (folder / "adapter_model.safetensors").write_bytes(len(head).to_bytes(8, "little") + head + b"".join(blobs))
    (layer,) = read_adapter(str(folder)).layers
    af = (bits["A"].astype(np.uint32) << 16).view(np.float32).astype(np.float64)
    bf = (bits["B"].astype(np.uint32) << 16).view(np.float32).astype(np.float64)
    np.testing.assert_allclose(layer.singular_values(), np.linalg.svd(2 * bf @ af, compute_uv=False)[:8], rtol=1e-12)


@pytest.mark.parametrize(("config", "files", "match"), [
    ({"peft_type": "IA3"}, None, "peft_type 'IA3'; spectra reads LoRA adapters"),
    ({"use_qalora": True}, None, "use_qalora is set .QALoRA"),
    ({"target_parameters": ["experts.gate_up_proj"]}, None, "target_parameters is set"),
    ({"r": 0}, None, "r is 0; a positive integer is needed"),
    ({"r": 4}, None, "has lora_A \\[8, 20\\] and lora_B \\[20, 8\\], but the config gives it rank 4"),
    ({"rank_pattern": {"(a)\\1": 4}}, None, "rank_pattern key .* is not a pattern spectra can read"),
    ({"use_rslora": "yes"}, None, "use_rslora is 'yes'; true or false is needed"),
    ({}, "bin", "adapter_model.bin, a PyTorch pickle; spectra never unpickles"),
    ({}, "none", "has adapter_config.json but no adapter_model.safetensors"),
    ({}, "list", "is not an adapter config: not a JSON object"),
])
def test_what_the_reader_refuses_says_so_in_one_line(tmp_path, config, files, match):
    rng = np.random.default_rng(11)
    a, b = _factors(rng, 20, 20)
    folder = _folder(tmp_path / "x", {f"{P}x.lora_A.weight": a, f"{P}x.lora_B.weight": b}, **config)
    if files in ("bin", "none"):
        os.remove(folder / "adapter_model.safetensors")
        if files == "bin":
            (folder / "adapter_model.bin").write_bytes(b"\x80\x04 never loaded")
    if files == "list":
        (folder / "adapter_config.json").write_text("[1, 2]")
    with pytest.raises(InputError, match=match):
        batch(str(folder))


def test_a_convolution_lora_is_skipped_with_the_reason_and_a_mixed_call_is_refused(tmp_path, lora):
    rng = np.random.default_rng(12)
    a, b = _factors(rng, 20, 20)
    t = {f"{P}x.lora_A.weight": a, f"{P}x.lora_B.weight": b,
         f"{P}conv.lora_A.weight": np.ones((8, 3, 3, 3), np.float32), f"{P}conv.lora_B.weight": np.ones((4, 8, 1, 1),
                                                                                                          np.float32)}
    result = batch(str(_folder(tmp_path / "c", t)))
    assert len(result.results) == 1
    assert [s["kind"] for s in result.skipped] == ["convolution LoRA"]
    np.save(tmp_path / "m.npy", np.ones((4, 4)))
    with pytest.raises(OptionError, match="is a LoRA adapter folder: give only adapter folders"):
        batch([str(lora[0]), str(tmp_path / "m.npy")])


def test_the_cli_shows_the_changes(lora, base, cli):
    folder, _ = lora
    r = cli("batch", str(folder))
    assert r.exit_code == 0, r.stderr
    assert "4 LoRA change(s) s B A" in r.stdout and "--base BASE" in r.stdout
    r = cli("batch", str(folder), "--base", str(base[0]), "--json")
    lines = [json.loads(x) for x in r.stdout.splitlines()]
    assert len(lines) == 4 and all("base_model" in x for x in lines)


def test_bad_factors_and_degenerate_layers_say_so(tmp_path):
    rng = np.random.default_rng(13)
    a, b = _factors(rng, 20, 20)
    bad = a.copy()
    bad[0, 0] = np.nan
    result = batch(str(_folder(tmp_path / "nan", {f"{P}x.lora_A.weight": bad, f"{P}x.lora_B.weight": b})))
    assert "has NaN or inf entries" in result.results[0]["error"]
    t = {f"{P}x.lora_A.weight": a, f"{P}x.lora_B.weight": b,
         f"{P}y.lora_A.weight": np.ones((8, 20), np.float32), f"{P}y.lora_B.weight": np.ones((1, 8), np.float32)}
    result = batch(str(_folder(tmp_path / "thin", t)))
    assert [s["kind"] for s in result.skipped] == ["change with a side < 2"] and len(result.results) == 1
    doc = result.results[0]
    assert doc["spectrum"]["structural_zeros"] == 0 and not any("structural" in w for w in doc["warnings"])


def test_options_that_need_rows_are_refused_by_name_and_an_adapter_twice_is_read_once(lora):
    folder, _ = lora
    with pytest.raises(OptionError, match="need.s. the rows of a matrix; a LoRA change.s spectrum comes from"):
        batch(str(folder), ci=True)
    result = batch([str(folder), str(folder) + "/"])
    assert len(result.results) == 4 and any("the same folder" in n for n in result.notes)


def test_the_model_summary_and_page_say_the_metrics_are_of_the_changes(lora, tmp_path, cli):
    folder, _ = lora
    assert batch(str(folder)).summary()["matrix"] == "change"
    out = tmp_path / "c.jsonl"
    assert cli("batch", str(folder), "--jsonl", str(out)).exit_code == 0
    assert cli("report", str(out), "-o", str(tmp_path / "c.html")).exit_code == 0
    assert "change (W &minus; W<sub>base</sub>, or a LoRA adapter's s B A)" in (tmp_path / "c.html").read_text()


def test_a_resumed_dora_batch_keeps_its_lines(tmp_path, base):
    base_dir, _ = base
    rng = np.random.default_rng(14)
    name = "encoder.layer.1.attention.self.value"
    a, b = _factors(rng, 48, 32)
    t = {f"{P}{name}.lora_A.weight": a, f"{P}{name}.lora_B.weight": b,
         f"{P}{name}.lora_magnitude_vector": np.ones(48, np.float32)}
    folder = _folder(tmp_path / "dora", t, use_dora=True)
    out = tmp_path / "d.jsonl"
    batch(str(folder), base=str(base_dir), jsonl=str(out))
    again = batch(str(folder), base=str(base_dir), jsonl=str(out), resume=True)
    assert again.resumed == 1 and not again.results and len(out.read_text().splitlines()) == 1
