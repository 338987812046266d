"""Readers: every format yields exactly the stored rows, in blocks, with selection."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from spectra_cli.sources import Block, RowSpec, WeightsFile, iter_selected, open_source


def _read_all(path, block_rows=7, spec=None, **kw):
    with open_source(str(path), **kw) as src:
        # Blocks may share buffers with later reads: copy each before asking for the next.
        blocks = [Block(np.array(b.X), b.w, b.first_row, b.rows)
                  for b in iter_selected(src, spec or RowSpec(), block_rows)]
        return src.info, np.concatenate([b.X for b in blocks]), blocks


@pytest.mark.parametrize("dtype", ["float16", "float32", "float64", "int32", "uint8", ">f8"])
def test_npy_blocks_reproduce_the_array(tmp_path, dtype):
    X = (np.random.default_rng(0).standard_normal((53, 5)) * 10).astype(dtype)
    np.save(tmp_path / "x.npy", X)
    info, got, blocks = _read_all(tmp_path / "x.npy")
    assert info.shape == (53, 5) and info.n_rows == 53 and info.n_features == 5
    np.testing.assert_array_equal(got, X)
    assert max(len(b.X) for b in blocks) == 7


def test_npy_fortran_order(tmp_path):
    X = np.asfortranarray(np.arange(60, dtype=np.float32).reshape(12, 5))
    np.save(tmp_path / "f.npy", X)
    _, got, _ = _read_all(tmp_path / "f.npy", block_rows=5)
    np.testing.assert_array_equal(got, X)


def test_3d_sequence_dump_is_pooled_to_tokens(tmp_path):
    X = np.arange(2 * 3 * 4, dtype=np.float32).reshape(2, 3, 4)
    np.save(tmp_path / "s.npy", X)
    info, got, _ = _read_all(tmp_path / "s.npy")
    assert (info.n_rows, info.n_features) == (6, 4) and info.layout.startswith("sequence")
    np.testing.assert_array_equal(got, X.reshape(6, 4))


@pytest.mark.parametrize("compressed", [False, True])
def test_npz_member_streams(tmp_path, compressed):
    X = np.random.default_rng(1).standard_normal((40, 3))
    save = np.savez_compressed if compressed else np.savez
    save(tmp_path / "a.npz", emb=X, other=np.zeros((2, 2)))
    info, got, _ = _read_all(tmp_path / "a.npz", key="emb", spec=RowSpec(5, 33))
    assert info.key == "emb"
    np.testing.assert_array_equal(got, X[5:33])


def test_rows_and_sample_select_the_right_rows(tmp_path):
    X = np.arange(1000, dtype=np.float64).reshape(500, 2)
    np.save(tmp_path / "x.npy", X)
    _, got, _ = _read_all(tmp_path / "x.npy", spec=RowSpec.parse("100:200", None, 0))
    np.testing.assert_array_equal(got, X[100:200])
    _, got, blocks = _read_all(tmp_path / "x.npy", spec=RowSpec.parse("100:", 50, 3), block_rows=64)
    rng = np.random.default_rng(3)
    expect = np.sort(rng.choice(400, size=50, replace=False)) + 100
    np.testing.assert_array_equal(got, X[expect])
    assert [int(r) for b in blocks for r in b.rows] == expect.tolist()


@pytest.mark.parametrize("fmt", ["npy", "parquet"])
def test_a_sample_is_handed_on_in_blocks_of_the_asked_size(tmp_path, fmt):
    # The first pass plans its bootstrap groups and the row norms' blocks on the rows per block: a sample picked one
    # row a block had put nearly every row into the last group and every row's norm about its block's mean at 0.
    X = np.random.default_rng(4).standard_normal((20_000, 3))
    path = tmp_path / "x.npy"
    np.save(path, X)
    if fmt == "parquet":
        path = _parquet(tmp_path, pa.table({"emb": pa.array([list(r) for r in X])}), row_group_size=777)
    _, got, blocks = _read_all(path, spec=RowSpec.parse(None, 384, 1), block_rows=12)
    expect = np.sort(np.random.default_rng(1).choice(20_000, size=384, replace=False))
    np.testing.assert_array_equal(got, X[expect])
    assert [len(b.X) for b in blocks] == [12] * 32
    assert [int(r) for b in blocks for r in b.rows] == expect.tolist()
    assert [b.first_row for b in blocks] == [int(b.rows[0]) for b in blocks]
    _, got, blocks = _read_all(path, spec=RowSpec.parse(None, 50, 2), block_rows=16)
    assert [len(b.X) for b in blocks] == [16, 16, 16, 2]


def _parquet(tmp_path, table, name="d.parquet", **kw):
    p = tmp_path / name
    pq.write_table(table, p, **kw)
    return p


def test_parquet_fixed_size_list(tmp_path):
    X = np.random.default_rng(2).standard_normal((100, 6)).astype(np.float32)
    t = pa.table({"id": np.arange(100), "emb": pa.FixedSizeListArray.from_arrays(pa.array(X.ravel()), 6)})
    p = _parquet(tmp_path, t, row_group_size=30)
    info, got, _ = _read_all(p, block_rows=16, spec=RowSpec(7, 95))
    assert info.column == "emb" and info.layout == "fixed-size list column" and info.details["row_groups"] == 4
    np.testing.assert_array_equal(got, X[7:95])


def test_parquet_variable_list_and_numeric_columns(tmp_path):
    X = np.random.default_rng(3).standard_normal((20, 3))
    t = pa.table({"v": pa.array([list(r) for r in X]), "a": X[:, 0], "b": X[:, 1], "name": ["x"] * 20})
    p = _parquet(tmp_path, t)
    info, got, _ = _read_all(p, column="v")
    assert info.layout == "list column"
    np.testing.assert_array_equal(got, X)
    info, got, _ = _read_all(p, columns=["a", "b"])
    assert info.layout == "numeric columns" and info.n_features == 2
    np.testing.assert_array_equal(got, X[:, :2])


def test_parquet_all_numeric_columns_by_default(tmp_path):
    X = np.random.default_rng(4).standard_normal((15, 3))
    p = _parquet(tmp_path, pa.table({"a": X[:, 0], "b": X[:, 1], "c": X[:, 2], "s": ["q"] * 15}))
    info, got, _ = _read_all(p)
    assert info.details["columns"] == ["a", "b", "c"]
    np.testing.assert_array_equal(got, X)


def test_parquet_directory_and_glob_are_one_dataset(tmp_path):
    X = np.random.default_rng(5).standard_normal((90, 4)).astype(np.float32)
    d = tmp_path / "ds"
    d.mkdir()
    for i in range(3):
        part = X[30 * i : 30 * (i + 1)]
        _parquet(d, pa.table({"emb": pa.FixedSizeListArray.from_arrays(pa.array(part.ravel()), 4)}),
                 name=f"part-{i}.parquet")
    info, got, _ = _read_all(d, block_rows=25, spec=RowSpec(10, 80))
    assert info.files == 3 and info.n_rows == 90
    np.testing.assert_array_equal(got, X[10:80])
    _, got, _ = _read_all(f"{d}/part-*.parquet")
    np.testing.assert_array_equal(got, X)


def test_parquet_weight_column_and_weights_file(tmp_path):
    X = np.random.default_rng(6).standard_normal((12, 2))
    w = np.arange(12, dtype=float)
    p = _parquet(tmp_path, pa.table({"emb": pa.array([list(r) for r in X]), "count": w}))
    with open_source(str(p), weight_column="count") as src:
        got = [b.w.copy() for b in iter_selected(src, RowSpec(), 5)]
    np.testing.assert_array_equal(np.concatenate(got), w)
    np.save(tmp_path / "w.npy", w)
    np.save(tmp_path / "x.npy", X)
    with open_source(str(tmp_path / "x.npy")) as src:
        wf = WeightsFile(str(tmp_path / "w.npy"), 12)
        blocks = list(iter_selected(src, RowSpec.parse("2:10", 4, 0), 3, wf))
    for b in blocks:
        np.testing.assert_array_equal(b.w, w[b.rows])


def test_parquet_float16_list_reads_values_exactly(tmp_path):
    X = np.random.default_rng(7).standard_normal((10, 4)).astype(np.float16)
    t = pa.table({"emb": pa.FixedSizeListArray.from_arrays(pa.array(X.ravel(), type=pa.float16()), 4)})
    p = _parquet(tmp_path, t)
    _, got, _ = _read_all(p)
    np.testing.assert_array_equal(got, X)
