"""Data where it lives: URLs read through fsspec (tested with its in-memory filesystem) give the
numbers of the same bytes on disk, by positioned (seek + read) block reads."""

from __future__ import annotations

import io

import numpy as np
import pytest

import spectra_cli as spectra
from tests.conftest import powerlaw_matrix

fsspec = pytest.importorskip("fsspec")
X = powerlaw_matrix(3000, 16, 1.0, seed=5, offset=4.0)


@pytest.fixture
def memfs():
    fs = fsspec.filesystem("memory")
    root = f"/spectra-test-{np.random.default_rng().integers(1 << 30)}"
    yield fs, root
    fs.rm(root, recursive=True)


def _npy(A: np.ndarray) -> bytes:
    b = io.BytesIO()
    np.save(b, A)
    return b.getvalue()


def test_npy_parquet_and_safetensors_through_urls(memfs, cli):
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    fs, root = memfs
    fs.pipe(f"{root}/x.npy", _npy(X))
    fs.pipe(f"{root}/f.npy", _npy(np.asfortranarray(X)))
    for i in range(2):
        b = io.BytesIO()
        part = X[i * 1500:(i + 1) * 1500]
        pq.write_table(pa.table({"emb": pa.FixedSizeListArray.from_arrays(pa.array(part.ravel()), 16)}), b,
                       row_group_size=500)
        fs.pipe(f"{root}/pq/part-{i}.parquet", b.getvalue())
    fs.pipe(f"{root}/pq/_SUCCESS", b"")
    ref = spectra.spectrum(X).spectrum.eigenvalues
    for url in (f"memory://{root}/x.npy", f"memory://{root}/f.npy", f"memory://{root}/pq",
                f"memory://{root}/pq/*.parquet"):
        got = spectra.spectrum(url, block_rows=700)
        np.testing.assert_allclose(got.spectrum.eigenvalues, ref, rtol=1e-12, err_msg=url)
        assert got.source["fingerprint"] is not None
    safetensors_numpy = pytest.importorskip("safetensors.numpy")
    fs.pipe(f"{root}/m.safetensors", safetensors_numpy.save({"w": X.astype(np.float32)}))
    got = spectra.spectrum(f"memory://{root}/m.safetensors::w").spectrum.eigenvalues
    np.testing.assert_allclose(got, spectra.spectrum(X.astype(np.float32)).spectrum.eigenvalues, rtol=1e-12)
    r = cli("spectrum", f"memory://{root}/nothing.npy")
    assert r.exit_code == 2 and r.stderr == f"error: no such file or directory: memory://{root}/nothing.npy\n"


def test_a_hub_style_sharded_checkpoint_reads_as_a_local_folder(tmp_path):
    """A layout that mirrors a Hub repository (config, index, two shards), in fsspec's memory store: the
    same code path as a local folder (hf:// is fsspec's too; no network here)."""
    fsspec = pytest.importorskip("fsspec")
    safetensors_numpy = pytest.importorskip("safetensors.numpy")
    import json

    import spectra_cli as spectra

    fs = fsspec.filesystem("memory")
    rng = np.random.default_rng(0)
    a = {"encoder.layer.0.attention.self.query.weight": rng.standard_normal((40, 16)).astype(np.float32)}
    b = {"encoder.layer.1.attention.self.query.weight": rng.standard_normal((40, 16)).astype(np.float32),
         "embeddings.token_type_embeddings.weight": rng.standard_normal((2, 16)).astype(np.float32)}
    root = "/hub/org/model"
    fs.pipe(f"{root}/model-00001-of-00002.safetensors", safetensors_numpy.save(a))
    fs.pipe(f"{root}/model-00002-of-00002.safetensors", safetensors_numpy.save(b))
    wm = {**{k: "model-00001-of-00002.safetensors" for k in a}, **{k: "model-00002-of-00002.safetensors" for k in b}}
    fs.pipe(f"{root}/model.safetensors.index.json", json.dumps({"weight_map": wm}).encode())
    fs.pipe(f"{root}/config.json", b"{}")
    local = tmp_path / "model"
    local.mkdir()
    for name in fs.ls(root, detail=False):
        (local / name.rsplit("/", 1)[1]).write_bytes(fs.cat(name))
    try:
        remote = spectra.batch(f"memory://{root}/", window="2:8", convention="weightwatcher")
        here = spectra.batch(str(local), window="2:8", convention="weightwatcher")
    finally:
        fs.rm(root, recursive=True)
    tails = lambda res: [r["item"].partition("::")[2] for r in res.results]  # noqa: E731
    assert tails(remote) == tails(here) == sorted(a) + sorted(k for k in b if "token_type" not in k)
    assert [s["item"].partition("::")[2] for s in remote.skipped] == ["embeddings.token_type_embeddings.weight"]
    for x, y in zip(remote.results, here.results, strict=True):
        assert x["weightwatcher"]["columns"]["alpha"] == y["weightwatcher"]["columns"]["alpha"]
    from spectra_cli.render.screens import common_part

    assert common_part([r["item"] for r in remote.results])[0] == f"memory://{root}/"  # the model, not a shard


def test_a_missing_backend_names_its_extra(monkeypatch):
    pytest.importorskip("fsspec")
    import fsspec

    import spectra_cli as spectra

    def refuse(url, **kw):
        raise ImportError("Install huggingface_hub to access HfFileSystem")

    monkeypatch.setattr(fsspec.core, "url_to_fs", refuse)
    with pytest.raises(spectra.OptionError, match=r"the extra 'hf': pip install 'spectra-geometry\[hf\]'"):
        spectra.fit("hf://org/model/model.safetensors::w")


def test_a_store_that_cannot_be_reached_is_one_input_error(monkeypatch):
    fsspec = pytest.importorskip("fsspec")
    import spectra_cli as spectra

    fs_class = type(fsspec.filesystem("memory"))

    def offline(self, path, **kw):
        raise RuntimeError("Name or service not known\nmore lines")

    monkeypatch.setattr(fs_class, "isdir", offline)
    monkeypatch.setattr(fs_class, "exists", offline)
    with pytest.raises(spectra.InputError, match=r"^cannot reach memory://org/model: RuntimeError: Name or service "
                                                 r"not known$"):
        spectra.batch("memory://org/model")
