"""Every place that decides by a file's name or first bytes agrees with the registry of formats
(:mod:`spectra_cli.sources.formats`): the dataset resolver, the opener, ``info``, ``batch``'s listing
and its results-file check, the outputs (matrices, moment files, transforms, figures) and the
eigenvalues reader, each on a tiny file of every format it takes."""

from __future__ import annotations

import json
import os
import zipfile

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import spectra_cli
from spectra_cli import sinks
from spectra_cli.run.batch_items import enumerate_items
from spectra_cli.run.results_file import NOT_RESULTS, results_file_problem
from spectra_cli.sources import formats, open_source
from spectra_cli.sources.base import expand_glob
from spectra_cli.sources.dataset import is_moment_file, resolve
from spectra_cli.sources.eigenvalues import read_eigenvalues

X = np.random.default_rng(0).standard_normal((40, 6))


def _tiny(fmt: formats.Format, folder) -> str:
    """A small file of ``fmt`` in ``folder`` (its own name, the format's first extension)."""
    path = str(folder / f"x{fmt.extension}")
    if fmt is formats.NPY:
        np.save(path, X)
    elif fmt is formats.NPZ:
        np.savez(path, emb=X)
    elif fmt is formats.PARQUET:
        pq.write_table(pa.table({"emb": pa.FixedSizeListArray.from_arrays(pa.array(X.ravel()), 6)}), path)
    elif fmt is formats.SAFETENSORS:
        pytest.importorskip("safetensors.numpy").save_file({"w": X.astype(np.float32)}, path)
    elif fmt is formats.MOMENTS:
        acc = spectra_cli.Accumulator(6)
        acc.update(X)
        acc.save(path)
    else:
        raise AssertionError(fmt.name)
    return path


READ = (*formats.DATA, formats.MOMENTS)


@pytest.mark.parametrize("fmt", READ, ids=lambda f: f.name)
def test_the_dataset_the_opener_and_info_read_a_file_of_every_format_as_the_registry_says(tmp_path, fmt):
    path = _tiny(fmt, tmp_path)
    assert formats.by_path(path) is (formats.NPZ if fmt.members else fmt)
    assert is_moment_file(path) is (fmt is formats.MOMENTS)
    assert resolve(path).kind == ("moments" if fmt is formats.MOMENTS else "single")
    assert expand_glob(str(tmp_path / "*")) == [path]
    if fmt is not formats.MOMENTS:
        with open_source(path) as src:
            assert type(src).__name__ == fmt.source.rpartition(".")[2]  # the reader the registry names
            assert src.info.format == fmt.name
    doc = spectra_cli.info(path)
    assert doc["format"] == fmt.name
    if fmt.magic:
        with open(path, "rb") as f:
            assert fmt.starts(f.read(64))


@pytest.mark.parametrize("fmt", READ, ids=lambda f: f.name)
def test_batch_lists_a_file_of_every_format_named_or_in_a_folder(tmp_path, fmt):
    path = _tiny(fmt, tmp_path)
    for given in (path, str(tmp_path)):
        items, _ = enumerate_items([given])
        assert len(items) == 1 and items[0].name.partition("::")[0] == path, given
    (tmp_path / "notes.txt").write_text("not a matrix")
    items, _ = enumerate_items([str(tmp_path)])
    assert [it.name.partition("::")[0] for it in items] == [path]


@pytest.mark.parametrize("fmt", [f for f in formats.FORMATS if f.magic], ids=lambda f: f.name)
def test_an_output_replaces_only_a_file_that_begins_with_its_formats_magic(tmp_path, fmt):
    for ext in fmt.extensions:
        target = tmp_path / f"out{ext}"
        target.write_bytes(fmt.magic[-1] + b"\x00 an earlier output")
        sinks.check_replaceable(str(target), "out")
        target.write_bytes(b"notes, not an earlier output")
        with pytest.raises(spectra_cli.OutputError, match=f"is not a \\{ext} file"):
            sinks.check_replaceable(str(target), "out")


@pytest.mark.parametrize("fmt", formats.MATRIX_OUTPUTS, ids=lambda f: f.name)
def test_a_matrix_is_written_in_the_format_its_name_says_and_read_back_as_it(tmp_path, fmt):
    for ext in fmt.extensions:
        out = str(tmp_path / f"white{ext}")
        assert sinks.check_target(out) is fmt
        assert sinks.write_matrix(out, [X[:25], X[25:]], n=40, d=6) == 40
        with open(out, "rb") as f:
            assert fmt.starts(f.read(16))
        with open_source(out) as src:
            assert src.info.format == fmt.name and src.info.n_rows == 40
    with pytest.raises(spectra_cli.OptionError, match="must end in .npy or .parquet"):
        sinks.check_target(str(tmp_path / "white.npz"))


def test_moment_files_and_transforms_are_archives_with_the_members_the_registry_lists(tmp_path):
    moments = _tiny(formats.MOMENTS, tmp_path)
    transform = str(tmp_path / "t.npz")
    spectra_cli.whiten(X, save_transform=transform)
    for path, fmt in ((moments, formats.MOMENTS), (transform, formats.TRANSFORM)):
        with open(path, "rb") as f:
            assert fmt.starts(f.read(8))
        with zipfile.ZipFile(path) as z:
            assert {f"{m}.npy" for m in fmt.members} <= set(z.namelist()), fmt.name


@pytest.mark.parametrize("fmt", formats.FIGURES, ids=lambda f: f.name)
def test_a_figure_is_written_in_the_format_its_name_says(tmp_path, fmt):
    plot = pytest.importorskip("spectra_cli.plot")
    plt = pytest.importorskip("matplotlib.pyplot")
    from spectra_cli.render.figures import check_plot_target

    out = str(tmp_path / f"f{fmt.extension.upper()}")
    check_plot_target(out)
    fig, ax = plt.subplots()
    ax.plot([1, 2, 3])
    plot.save(fig, out)
    plt.close(fig)
    with open(out, "rb") as f:
        assert fmt.starts(f.read(64))
    with pytest.raises(spectra_cli.OptionError, match=r"must end in \.png, \.svg, \.pdf\."):
        check_plot_target(str(tmp_path / "f.jpg"))


@pytest.mark.parametrize("fmt", list(NOT_RESULTS), ids=lambda f: f.name)
def test_batch_never_takes_a_file_that_begins_with_another_formats_magic_for_its_results(tmp_path, fmt):
    path = tmp_path / "results.jsonl"
    path.write_bytes(fmt.magic[0] + b"\x00" * 16)
    assert results_file_problem(str(path)) == f"it is {NOT_RESULTS[fmt]}"
    path.write_text(json.dumps({"schema": "spectra.fit/1"}) + "\n")
    assert results_file_problem(str(path)) is None


@pytest.mark.parametrize("fmt", [f for f in formats.FORMATS if f.kind == "eigenvalues"] + [formats.NPY, formats.JSON],
                         ids=lambda f: f.name)
def test_the_eigenvalues_reader_takes_every_extension_of_its_formats(tmp_path, fmt):
    values = [4.0, 2.0, 1.0, 0.5]
    for ext in fmt.extensions:
        path = str(tmp_path / f"ev{ext}")
        if fmt is formats.NPY:
            np.save(path, np.array(values))
        elif fmt is formats.JSON:
            with open(path, "w") as f:
                json.dump(values, f)
        else:
            sep = "\t" if fmt is formats.TSV else ","
            with open(path, "w") as f:
                f.write("\n".join(f"{v}{sep}x" for v in values) + "\n")
        np.testing.assert_array_equal(read_eigenvalues(path), values)
        os.remove(path)
