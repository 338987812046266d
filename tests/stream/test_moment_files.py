"""Moment files (spectra moments / accumulate + save): any split of the rows into files, merged in
any order, gives the moments of one pass; files that cannot merge are refused by name."""

from __future__ import annotations

import json
import random
import tempfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import spectra_cli as spectra
from tests.conftest import powerlaw_matrix

X = powerlaw_matrix(1200, 16, 1.0, seed=9, offset=50.0)


@settings(max_examples=20, deadline=None)
@given(cuts=st.lists(st.integers(1, 1199), min_size=1, max_size=6, unique=True), order=st.randoms(),
       weighted=st.booleans())
def test_any_partition_into_moment_files_merges_to_one_pass(cuts, order, weighted):
    w = np.random.default_rng(3).uniform(0.1, 2.0, len(X)) if weighted else None
    edges = [0, *sorted(cuts), len(X)]
    with tempfile.TemporaryDirectory() as d:
        paths = []
        for i, (a, b) in enumerate(zip(edges[:-1], edges[1:], strict=True)):
            acc = spectra.accumulate(X[a:b], weights=None if w is None else w[a:b])
            paths.append(acc.save(Path(d) / f"m{i}.npz"))
        order.shuffle(paths)
        merged = spectra.spectrum(paths).spectrum.eigenvalues
    one = spectra.spectrum(X, weights=w).spectrum.eigenvalues
    np.testing.assert_allclose(merged, one, rtol=1e-12, atol=1e-12 * one[0])


def test_moment_files_give_every_analysis_of_fit_from_moments(cli, tmp_path):
    for i in range(3):
        np.save(tmp_path / f"s{i}.npy", X[i * 400:(i + 1) * 400])
        assert cli("moments", tmp_path / f"s{i}.npy", "-o", tmp_path / f"m{i}.npz", "--groups", "8").exit_code == 0
    np.save(tmp_path / "all.npy", X)
    merged = cli("fit", str(tmp_path / "m*.npz"), "--ci", "--json").json()
    direct = cli("fit", tmp_path / "all.npy", "--json").json()
    np.testing.assert_allclose(merged["spectrum"]["eigenvalues"], direct["spectrum"]["eigenvalues"], rtol=1e-12)
    assert merged["fit"]["alpha"] == pytest.approx(direct["fit"]["alpha"], rel=1e-10)
    assert merged["isotropy"]["mean_cosine"] == pytest.approx(direct["isotropy"]["mean_cosine"], rel=1e-12)
    assert merged["fit"]["ci"]["groups"] == 24 and merged["source"]["format"] == "moments"
    r = cli("fit", str(tmp_path / "m*.npz"), "--shuffled-control")
    assert r.exit_code == 2 and r.stderr.startswith("error: --shuffled-control needs a second pass over the rows")
    r = cli("moments", tmp_path / "s0.npy", "-o", tmp_path / "s0.npy")
    assert r.exit_code == 2 and "-o" in r.stderr


def test_files_that_cannot_merge_are_refused_by_name(tmp_path):
    a = spectra.accumulate(X).save(tmp_path / "a.npz")
    b = spectra.accumulate(X[:, :8]).save(tmp_path / "b.npz")
    c = spectra.accumulate(X, precision="float32").save(tmp_path / "c.npz")
    with pytest.raises(spectra.InputError, match=r"b.npz cannot be merged with .*a.npz: cannot merge moments that "
                                                 r"differ: d 16 vs 8"):
        spectra.spectrum([a, b])
    with pytest.raises(spectra.InputError, match="precision 'float64' vs 'float32'"):
        spectra.spectrum([a, c])
    with np.load(a) as z:
        parts = {k: z[k] for k in z.files}
    parts["format"] = np.array("spectra.moments/2")
    np.savez(tmp_path / "future.npz", **parts)
    with pytest.raises(spectra.InputError, match="has moment-file format spectra.moments/2; this spectra reads "
                                                 "spectra.moments/1"):
        spectra.spectrum(tmp_path / "future.npz")
    meta = json.loads(str(parts["meta"]))
    assert meta["sources"][0]["rows_used"] == len(X) and meta["options"]["d"] == 16
    random.seed(0)


def _rewrite(path, out, **changes):
    with np.load(path) as z:
        parts = {k: z[k] for k in z.files}
    parts.update(changes)
    np.savez(out, **parts)
    return out


def test_a_moment_file_whose_header_lies_is_refused_before_anything_is_allocated(tmp_path):
    a = spectra.accumulate(X).save(tmp_path / "a.npz")
    meta = json.loads(str(np.load(a)["meta"]))
    meta["options"]["d"] = 10**9
    with pytest.raises(spectra.InputError, match=r"its metadata says d = 1000000000 but its m2 array has shape "
                                                 r"\[16, 16\]"):
        spectra.Accumulator.load(_rewrite(a, tmp_path / "d.npz", meta=np.array(json.dumps(meta))))
    meta["options"].update(d=16, groups=10**12)  # a group count is a number, never a list of that length
    assert spectra.Accumulator.load(_rewrite(a, tmp_path / "g.npz", meta=np.array(json.dumps(meta)))).n == len(X)
    meta["options"].update(groups=0)
    with pytest.raises(spectra.InputError, match="holds 1 groups but its metadata says 0"):
        spectra.Accumulator.load(_rewrite(a, tmp_path / "g0.npz", meta=np.array(json.dumps(meta)),
                                          g0_scalars=np.load(a)["scalars"]))
    # an array header promising 8 TB in a member of a few hundred bytes
    import io
    import zipfile

    head = io.BytesIO()
    np.lib.format.write_array_header_1_0(head, {"descr": "<f8", "fortran_order": False, "shape": (10**6, 10**6)})
    with zipfile.ZipFile(a) as zin, zipfile.ZipFile(tmp_path / "m.npz", "w") as zout:
        for name in zin.namelist():
            zout.writestr(name, head.getvalue() if name == "m2.npy" else zin.read(name))
    with pytest.raises(spectra.InputError, match=r"m\.npz: its moments needs about 7,451 GiB"):
        spectra.Accumulator.load(tmp_path / "m.npz")  # refused from the header, before anything is read
    with pytest.raises(spectra.InputError, match=r"m\.npz\[m2\] is truncated: its header promises 8000000000000 "):
        spectra.Accumulator.load(tmp_path / "m.npz", max_memory="10TB")
    with pytest.raises(spectra.InputError, match=r"\[meta\] has object dtype; spectra never unpickles data"):
        spectra.Accumulator.load(_rewrite(a, tmp_path / "o.npz", meta=np.array([{"x": 1}], dtype=object)))


def test_a_loaded_accumulator_keeps_its_groups_and_goes_on(tmp_path):
    acc = spectra.Accumulator(16, groups=8)
    acc.update(X[:100])
    acc.update(X[100:200])
    back = spectra.Accumulator.load(acc.save(tmp_path / "a.npz"))
    assert len(back.groups) == 2 and back.options()["groups"] == 8
    for lo in range(200, len(X), 100):
        back.update(X[lo:lo + 100])
    assert len(back.groups) == 8 and sum(g.n for g in back.groups) == len(X)
    ci = spectra.fit(back, window="2:8", ci=True, ci_replicates=20).fit.ci
    assert ci.groups == 8 and ci.low < ci.high


def test_the_moment_file_format_is_written_read_and_checked_in_one_module(tmp_path):
    """stream/moment_file.py is the format: what it writes it reads back field for field, every array it
    writes is one it reads, the registry's members of a moment file are among them, and no other module
    spells the format's arrays or its version."""
    import zipfile

    from spectra_cli.sources import formats
    from spectra_cli.stream import moment_file
    from tests.conftest import ROOT

    acc = spectra.Accumulator(16, groups=3)
    for lo in range(0, 1200, 300):
        acc.update(X[lo:lo + 300], np.linspace(0.5, 1.5, 300))
    acc.sources = [{"path": "x.npy", "rows": [0, 1200]}]
    path = moment_file.write(tmp_path / "m.npz", acc.contents())
    with zipfile.ZipFile(path) as z:
        keys = {n.removesuffix(".npy") for n in z.namelist()}
    assert all(moment_file.is_member(k) for k in keys) and set(formats.MOMENTS.members) <= keys
    back = moment_file.read(path)
    assert back.options() == acc.options() and back.sources == tuple(acc.sources)
    assert (back.n_dropped, back.weight_sq_sum, back.weighted) == (0, acc.weight_sq_sum, True)
    for got, want in zip((back.moments, *back.groups), (acc.moments, *acc.groups), strict=True):
        np.testing.assert_array_equal(got.m2, want.m2)
        assert (got.n, got.weight_sum, got.scale) == (want.n, want.weight_sum, want.scale)
    assert back.cosine is not None and acc.cosine is not None
    np.testing.assert_array_equal(back.cosine.unit_sum, acc.cosine.unit_sum)
    loaded = spectra.Accumulator.load(path)
    assert loaded.options() == acc.options() and loaded.n == acc.n
    elsewhere = [p.name for p in (ROOT / "spectra_cli").rglob("*.py") if p.name != "moment_file.py"
                 and any(s in p.read_text() for s in ('"cos_scalars"', '"mean_rel"', "spectra.moments/"))]
    assert not elsewhere, f"the moment-file format is spelt outside stream/moment_file.py: {elsewhere}"
