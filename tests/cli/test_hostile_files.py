"""Files that are subtly broken, and dumps whose size is a lie about their cost: each one line and
exit 2 (or, for info, a warning that names what cannot be read)."""

from __future__ import annotations

import json
import struct

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.cli.test_hostile import refused
from tests.conftest import powerlaw_matrix

X = powerlaw_matrix(2000, 8, 1.0, seed=6)


def _flip_middle(path):
    b = bytearray(path.read_bytes())
    b[len(b) // 2] ^= 0xFF
    path.write_bytes(bytes(b))


def test_a_corrupted_parquet_page_is_caught_by_its_checksum(cli, tmp_path):
    t = pa.table({"emb": pa.FixedSizeListArray.from_arrays(pa.array(X.ravel()), 8)})
    pq.write_table(t, tmp_path / "ck.parquet", compression="none", write_page_checksum=True)
    _flip_middle(tmp_path / "ck.parquet")
    refused(cli, tmp_path, "fit", tmp_path / "ck.parquet", match="CRC checksum verification failed")


def test_spectra_writes_page_checksums(cli, tmp_path):
    np.save(tmp_path / "x.npy", X)
    assert cli("whiten", tmp_path / "x.npy", "-o", tmp_path / "w.parquet").exit_code == 0
    assert cli("fit", tmp_path / "w.parquet", "--json").exit_code == 0
    _flip_middle(tmp_path / "w.parquet")  # a data page of the output: the next read tells
    refused(cli, tmp_path, "fit", tmp_path / "w.parquet", match="CRC checksum verification failed")


def test_an_npy_of_an_unknown_format_version_is_refused(cli, tmp_path):
    np.save(tmp_path / "x.npy", X)
    b = bytearray((tmp_path / "x.npy").read_bytes())
    b[6], b[7] = 9, 9
    (tmp_path / "v.npy").write_bytes(bytes(b))
    refused(cli, tmp_path, "fit", tmp_path / "v.npy", match=f"{tmp_path}/v.npy has .npy format version 9.9; spectra "
                                                           "reads versions 1.0, 2.0 and 3.0 (numpy's).")


def test_info_says_which_archive_member_cannot_be_read(cli, tmp_path):
    np.savez(tmp_path / "two.npz", a=np.zeros((3, 2)), b=np.ones((4, 2)))
    b = bytearray((tmp_path / "two.npz").read_bytes())
    i = 0
    while (i := b.find(b"PK\x01\x02", i)) >= 0:  # member b: compression method 99 (unknown)
        n = struct.unpack("<H", b[i + 28:i + 30])[0]
        if bytes(b[i + 46:i + 46 + n]) == b"b.npy":
            struct.pack_into("<H", b, i + 10, 99)
            struct.pack_into("<H", b, struct.unpack("<I", b[i + 42:i + 46])[0] + 8, 99)
        i += 4
    (tmp_path / "unk.npz").write_bytes(bytes(b))
    r = cli("info", tmp_path / "unk.npz", "--json")
    assert r.exit_code == 0
    assert f"warning: {tmp_path}/unk.npz[b.npy]: That compression method is not supported: this member cannot be " \
           "read" in r.stderr
    assert json.loads(r.stdout)["warnings"]


def test_sequence_dumps_without_features_or_with_a_missing_mask_column(cli, tmp_path):
    np.save(tmp_path / "nofeat.npy", np.zeros((10, 8, 0)))
    refused(cli, tmp_path, "sequence", tmp_path / "nofeat.npy",
            match=f"{tmp_path}/nofeat.npy has 0 features (shape (10, 8, 0)); at least 1 is required.")
    refused(cli, tmp_path, "fit", tmp_path / "nofeat.npy", match="0 features")
    pq.write_table(pa.table({"emb": pa.FixedSizeListArray.from_arrays(pa.array(X.ravel()), 8)}), tmp_path / "t.pq")
    refused(cli, tmp_path, "sequence", tmp_path / "t.pq", "--positions-per-window", "8", "--mask-column", "nope",
            match=f"--mask-column 'nope' is not a column of {tmp_path}/t.pq; columns: emb.")


def test_a_sequence_of_millions_of_positions_is_refused_at_once(cli, tmp_path):
    np.save(tmp_path / "long.npy", np.zeros((2, 3_000_000, 1), dtype=np.uint8))  # 6 MB
    refused(cli, tmp_path, "sequence", tmp_path / "long.npy",
            match="the 3000000 x 3000000 inner products of the positions behind the lag energies")


def test_a_checkpoint_index_that_disagrees_with_its_shards_is_refused(cli, tmp_path):
    st = pytest.importorskip("safetensors.numpy")
    d = tmp_path / "ckpt"
    d.mkdir()
    st.save_file({"a.weight": np.ones((4, 3), np.float32)}, str(d / "model-1.safetensors"))
    st.save_file({"b.weight": np.ones((5, 3), np.float32)}, str(d / "model-2.safetensors"))
    index = {"weight_map": {"a.weight": "model-1.safetensors", "b.weight": "model-1.safetensors"}}
    (d / "model.safetensors.index.json").write_text(json.dumps(index))
    refused(cli, tmp_path, "batch", d, match="places tensor 'b.weight' in model-1.safetensors, but no shard the "
                                             "index names holds it; the index and its shards disagree.")
    index = {"weight_map": {"a.weight": "model-2.safetensors", "b.weight": "model-1.safetensors"}}
    (d / "model.safetensors.index.json").write_text(json.dumps(index))
    refused(cli, tmp_path, "batch", d, match="places tensor 'a.weight' in model-2.safetensors, but it is in "
                                             "model-1.safetensors")
    index = {"weight_map": {"a.weight": "model-1.safetensors"}, "metadata": {}}
    (d / "model.safetensors.index.json").write_text(json.dumps(index))
    st.save_file({"a.weight": np.ones((4, 3), np.float32), "c.weight": np.ones((2, 3), np.float32)},
                 str(d / "model-1.safetensors"))
    refused(cli, tmp_path, "batch", d, match="does not name tensor 'c.weight', which model-1.safetensors holds")


@pytest.mark.parametrize("value", ["nan", "inf"])
def test_synth_refuses_a_non_finite_exponent_and_writes_nothing(cli, tmp_path, value):
    refused(cli, tmp_path, "synth", "powerlaw", "--alpha", value, "-n", "10", "-d", "4", "-o", tmp_path / "x.npy",
            match=f"--alpha {value} must be a finite number.")
    assert not (tmp_path / "x.npy").exists()


def test_a_checkpoint_folder_is_described_and_a_shard_beside_its_index_is_not_left_out(cli, tmp_path):
    st = pytest.importorskip("safetensors.numpy")
    d = tmp_path / "ckpt"
    d.mkdir()
    st.save_file({"a.weight": np.ones((4, 3), np.float32)}, str(d / "model-1.safetensors"))
    doc = cli("info", d, "--json").json()
    assert doc["format"] == "safetensors" and doc["matrices"] == 1 and doc["files"] == 1
    (d / "model.safetensors.index.json").write_text(json.dumps({"weight_map": {"a.weight": "model-1.safetensors"}}))
    st.save_file({"b.weight": np.ones((5, 3), np.float32)}, str(d / "model-2.safetensors"))
    refused(cli, tmp_path, "batch", d, match="does not name the shard model-2.safetensors beside it; its tensors "
                                             "would be left out.")


def test_values_near_the_float64_limit_are_one_line_not_a_traceback(cli, tmp_path):
    """Rows of +-1e308 (scipy ships such a test file): their covariance is past float64 at any scale."""
    X = np.random.default_rng(0).standard_normal((50, 4))
    X[:25, 0], X[25:, 0] = 1e308, -1e308
    np.save(tmp_path / "near.npy", X)
    for args in (("fit", tmp_path / "near.npy"), ("fit", tmp_path / "near.npy", "--json")):
        r = cli(*args)
        assert r.exit_code == 2 and r.stdout == ""
        assert r.stderr == ("error: the covariance exceeds the float64 range (values or their differences from the "
                            "mean reach 1e308); rescale the input (e.g. divide by its largest magnitude).\n")
