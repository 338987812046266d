"""A large model at the default: a batch chooses its workers and precision where they are not given (on a checkpoint
of matrices 3,072 wide or more, every core a worker as memory allows, float32 products for 16-bit weights), says so,
and never overrides what is given."""

from __future__ import annotations

import pytest

from spectra_cli.errors import for_caller
from spectra_cli.run.batch import LARGE_WIDTH, large_model_plan
from spectra_cli.run.batch_items import Item


def _items(n, shape, dtype="BF16"):
    return [Item(f"m.safetensors::t{i}", "f", shape=shape, dtype=dtype) for i in range(n)]


@pytest.fixture
def two_cores(monkeypatch):
    monkeypatch.setattr("spectra_cli.threads.usable_cores", lambda: 2)


def test_a_7b_class_checkpoint_gets_every_core_and_float32(two_cores):
    workers, precision, note = large_model_plan(_items(16, (4096, 4096)), None, None, engine="local")
    assert (workers, precision) == (2, "float32")
    assert "chose workers=2 precision='float32'" in for_caller(note) and "16 of the 16 matrices are 4,096 wide" in note


def test_small_or_float32_matrices_keep_the_plain_defaults(two_cores):
    assert large_model_plan(_items(30, (384, 384)), None, None, engine="local") == (1, "float64", None)
    workers, precision, note = large_model_plan(_items(4, (LARGE_WIDTH, 8192), "F32"), None, None, engine="local")
    assert (workers, precision) == (2, "float64") and "precision" not in note.split(":")[0]


def test_what_is_given_is_kept_and_memory_caps_the_workers(two_cores):
    assert large_model_plan(_items(16, (4096, 4096)), 1, "float64", engine="local") == (1, "float64", None)
    workers, _, _ = large_model_plan(_items(16, (4096, 4096)), None, None, engine="local", max_memory=1 << 30)
    assert workers == 1  # a worker at 4,096 wide needs about 0.8 GB
    assert large_model_plan(_items(16, (4096, 4096)), None, None, engine="dask")[0] == 1


def test_a_resumed_batch_keeps_the_precision_of_its_file(tmp_path):
    import numpy as np

    from spectra_cli.run.batch import batch

    for i in range(3):
        np.save(tmp_path / f"m{i}.npy", np.random.default_rng(i).standard_normal((80, 12)))
    out = tmp_path / "r.jsonl"
    batch([str(tmp_path / "m0.npy"), str(tmp_path / "m1.npy")], jsonl=str(out), precision="float32")
    again = batch([str(tmp_path / f"m{i}.npy") for i in range(3)], jsonl=str(out), resume=True)
    assert again.resumed == 2 and [r["options"]["precision"] for r in again.results] == ["float32"]
