"""The library and the command line give the same numbers for every input kind (the library's
inputs: ndarray, DLPack, __array__, os.PathLike), and name options in their own way."""

from __future__ import annotations

import numpy as np
import pytest

import spectra_cli as spectra
from tests.run.test_api import ArrayOnly, DLPackOnly, X, _numbers


@pytest.mark.parametrize("wrap", [np.asarray, DLPackOnly, ArrayOnly], ids=["ndarray", "dlpack", "array"])
@pytest.mark.parametrize("func", ["fit", "spectrum", "isotropy"])
def test_every_function_takes_arrays_and_paths_with_the_cli_numbers(cli, tmp_path, wrap, func):
    np.save(tmp_path / "x.npy", X)
    doc_cli = cli(func, tmp_path / "x.npy", "--json").json()
    rep = getattr(spectra, func)(wrap(X))
    got = _numbers(rep.to_dict())
    want = _numbers(doc_cli)
    np.testing.assert_array_equal(got["spectrum"]["eigenvalues"], want["spectrum"]["eigenvalues"])
    assert got == want
    from_path = _numbers(getattr(spectra, func)(tmp_path / "x.npy").to_dict())  # os.PathLike
    assert from_path == want


def test_the_command_line_names_flags_where_the_library_names_parameters(cli, tmp_path):
    np.save(tmp_path / "x.npy", X)
    r = cli("fit", tmp_path / "x.npy", "--ddof", "-1")
    assert r.exit_code == 2 and r.stderr == "error: --ddof -1 must be 0 or a positive integer.\n"
    with pytest.raises(spectra.OptionError, match=r"^ddof=-1 must be 0 or a positive integer\.$"):
        spectra.fit(tmp_path / "x.npy", ddof=-1)


@pytest.mark.parametrize("func", ["fit", "spectrum"])
def test_an_accumulator_and_its_moment_file_give_the_cli_numbers(cli, tmp_path, func):
    acc = spectra.Accumulator(X.shape[1])
    for lo in range(0, len(X), 512):
        acc.update(DLPackOnly(X[lo:lo + 512]))
    acc.save(tmp_path / "m.npz")
    doc_cli = cli(func, tmp_path / "m.npz", "--json").json()
    assert doc_cli["source"]["format"] == "moments"
    assert _numbers(getattr(spectra, func)(acc).to_dict()) == _numbers(doc_cli)
    r = cli("isotropy", tmp_path / "m.npz")
    assert r.exit_code == 2
    assert r.stderr.startswith("error: isotropy (its partition isotropy; spectra fit on moments gives the mean "
                               "cosine, top-PC share and mean-norm ratio) needs a second pass")
    r = cli("fit", tmp_path / "m.npz", "--partition-isotropy")
    assert r.exit_code == 2 and r.stderr.startswith("error: --partition-isotropy needs a second pass over the rows")


@pytest.mark.parametrize("wrap", [np.asarray, DLPackOnly], ids=["ndarray", "dlpack"])
def test_whiten_gives_the_cli_numbers_and_rows(cli, tmp_path, wrap):
    np.save(tmp_path / "x.npy", X)
    doc_cli = cli("whiten", tmp_path / "x.npy", "-o", tmp_path / "w.npy", "--json").json()
    rep = spectra.whiten(wrap(X))
    np.testing.assert_array_equal(rep.whitened, np.load(tmp_path / "w.npy"))
    got = rep.to_dict()
    assert got["whitening"]["spectrum_after"] == doc_cli["whitening"]["spectrum_after"]
    assert got["spectrum"] == doc_cli["spectrum"]
    on_disk = spectra.whiten(tmp_path / "x.npy", out=tmp_path / "w2.npy")
    assert on_disk.whitened is None
    np.testing.assert_array_equal(np.load(tmp_path / "w2.npy"), rep.whitened)
