"""batch over files and safetensors checkpoints; compare; trend."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

import spectra_cli as spectra
from spectra_cli.run.batch_items import enumerate_items
from spectra_cli.run.batch_workers import run_batch
from spectra_cli.run.batch_workers import run_item as _REAL_RUN_ITEM
from tests.conftest import powerlaw_matrix

safetensors_numpy = pytest.importorskip("safetensors.numpy")


def _bf16_bits(x: np.ndarray) -> np.ndarray:
    """float32 -> bfloat16 bit patterns, round to nearest even (the reference conversion)."""
    u = x.astype(np.float32).view(np.uint32)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


def _write_bf16_checkpoint(path, tensors):
    """safetensors with BF16 tensors: the package's numpy API has no bfloat16, so write the format
    with it for the other dtypes and patch in BF16 entries by hand (the format is a JSON header)."""
    import struct

    header, blobs, offset = {}, [], 0
    for name, (dtype, arr) in tensors.items():
        raw = arr.tobytes()
        header[name] = {"dtype": dtype, "shape": list(arr.shape), "data_offsets": [offset, offset + len(raw)]}
        blobs.append(raw)
        offset += len(raw)
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))






def test_bfloat16_matches_a_reference_conversion_exactly(tmp_path):
    from spectra_cli.sources import RowSpec, iter_selected, open_source

    rng = np.random.default_rng(1)
    x = (rng.standard_normal((50, 12)) * 10).astype(np.float32)
    bits = _bf16_bits(x)
    _write_bf16_checkpoint(tmp_path / "bf.safetensors", {"w": ("BF16", bits)})
    reference = (bits.astype(np.uint32) << 16).view(np.float32)  # bfloat16 is the top half of a float32
    with open_source(f"{tmp_path / 'bf.safetensors'}::w") as src:
        assert src.info.dtype == "bfloat16"
        got = np.concatenate([b.X.copy() for b in iter_selected(src, RowSpec(), 7)])
    np.testing.assert_array_equal(got, reference)
    assert np.max(np.abs(got - x) / np.abs(x)) < 2**-8  # and it is x to bfloat16 precision










def test_two_workers_give_the_numbers_of_one(tmp_path):
    # Wall time is measured in bench/bench_batch.py, never asserted in a test (shared machines).
    for i in range(4):
        np.save(tmp_path / f"f_{i:02d}.npy", powerlaw_matrix(1500, 48, 1.0, seed=i).astype(np.float32))
    items, _ = enumerate_items([str(tmp_path)])
    options = {"window": "3:20"}
    docs1 = list(run_batch(items, options, workers=1))
    docs2 = list(run_batch(items, options, workers=2))
    assert len(docs2) == 4 and not any("error" in d for d in docs1 + docs2)
    by_item = {d["item"]: d["fit"]["alpha"] for d in docs2}
    for d in docs1:  # the same numbers either way (BLAS thread counts change only the rounding)
        assert by_item[d["item"]] == pytest.approx(d["fit"]["alpha"], rel=1e-9)








def _dies_on_m3(name, fingerprint, options, error=None):
    """Module level, so the pool can pickle it by reference."""
    if name.endswith("m_3.npy"):
        os._exit(1)  # a worker killed by the kernel looks like this to the pool
    return _REAL_RUN_ITEM(name, fingerprint, options, error)


def test_a_dying_worker_fails_its_items_not_the_batch(tmp_path, monkeypatch):
    import spectra_cli.run.batch_workers as batch

    for i in range(6):
        np.save(tmp_path / f"m_{i}.npy", powerlaw_matrix(200, 8, 1.0, seed=i))
    items, _ = enumerate_items([str(tmp_path)])
    monkeypatch.setattr(batch, "run_item", _dies_on_m3)
    docs = list(run_batch(items, {}, workers=2))
    assert sorted(d["item"] for d in docs) == sorted(it.name for it in items)
    died = [d for d in docs if "error" in d]
    assert any(d["item"].endswith("m_3.npy") for d in died)
    assert all(d["error"].startswith("a worker process died") for d in died)




def test_names_show_what_differs_and_name_a_sharded_model_by_its_folder():
    from spectra_cli.render.screens import common_part, shorten_names

    shards = ["ckpt/model-00001-of-00002.safetensors::a.weight", "ckpt/model-00002-of-00002.safetensors::b.weight"]
    assert common_part(shards) == ("ckpt/", ["a.weight", "b.weight"])
    one = ["m.safetensors::layer.0.attn.k.weight", "m.safetensors::layer.1.attn.k.weight"]
    assert common_part(one) == ("m.safetensors", ["layer.0.attn.k.weight", "layer.1.attn.k.weight"])  # no stray ':'
    assert common_part(["runs/a/x1.npy", "runs/a/x2.npy"]) == ("runs/a/", ["x1.npy", "x2.npy"])
    assert common_part(["a.safetensors::w", "b.safetensors::w"]) == (None, ["a.safetensors::w", "b.safetensors::w"])
    assert shorten_names(one) == ["layer.0.attn.k.weight", "layer.1.attn.k.weight"]


def test_a_checkpoint_header_is_parsed_once_for_all_its_tensors(tmp_path, monkeypatch):
    # each of 3,000 tensors parsed the whole header again: quadratic (past 400 s); now a header is parsed once per file
    from safetensors.numpy import save_file

    from spectra_cli import jsonio

    rng = np.random.default_rng(0)
    save_file({f"layer.{i}.w": rng.standard_normal((12, 10)).astype(np.float32) for i in range(40)},
              str(tmp_path / "m.safetensors"))
    parsed = []
    real = jsonio.loads
    monkeypatch.setattr(jsonio, "loads", lambda text, where, **kw: parsed.append(where) or real(text, where, **kw))
    res = spectra.batch(str(tmp_path / "m.safetensors"), window="2:6")
    assert len([line for line in res.results if "error" not in line]) == 40
    assert sum("safetensors header" in w for w in parsed) == 1
    save_file({"only.w": rng.standard_normal((12, 10)).astype(np.float32)}, str(tmp_path / "m.safetensors"))
    assert spectra.info(str(tmp_path / "m.safetensors"))  # (a rewritten file is read afresh)
    assert sum("safetensors header" in w for w in parsed) == 2


def test_a_missing_dependency_is_said_as_such_not_as_a_bug(tmp_path, without):
    # with scipy missing, an item was reported as "unexpected ModuleNotFoundError ... (a bug)"
    np.save(tmp_path / "a.npy", powerlaw_matrix(300, 12, 1.0, seed=0))
    without("scipy")
    res = spectra.batch(str(tmp_path / "a.npy"), window="2:6", density=True)
    errors = [line["error"] for line in res.results if "error" in line]
    assert errors and "cannot be imported" in errors[0] and "scipy" in errors[0] and "a bug" not in errors[0]
