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
