"""One dataset, resolved once: several PATHs, globs of every format, members with their own
fingerprints, the same file twice refused, outputs checked against every member by inode, and the
memory budget checked before anything of the input's size is allocated."""

from __future__ import annotations

import hashlib
import io
import json
import os
import tracemalloc
import zipfile

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import spectra_cli as spectra
from spectra_cli.sources.base import fingerprint
from tests.cli.test_hostile import refused
from tests.conftest import powerlaw_matrix

X = powerlaw_matrix(900, 12, 1.0, seed=3)


def _shards(tmp_path, k=3, sub="."):
    d = tmp_path / sub
    d.mkdir(exist_ok=True)
    paths = []
    for i, part in enumerate(np.array_split(X, k)):
        np.save(d / f"s{i}.npy", part)
        paths.append(d / f"s{i}.npy")
    return paths


def _list_hash(members):
    h = hashlib.sha256()
    for m in members:
        h.update(f"{m['fingerprint']};".encode())
    return h.hexdigest()[:16]


def test_several_npy_paths_are_one_matrix_with_every_member_listed(cli, tmp_path):
    paths = _shards(tmp_path)
    np.save(tmp_path / "all.npy", X)
    whole = cli("fit", tmp_path / "all.npy", "--json").json()
    many = cli("fit", *paths, "--json").json()
    src = many["source"]
    assert src["files"] == 3 and src["n_rows"] == len(X) and src["layout"] == "matrix (3 .npy shards)"
    assert [m["path"] for m in src["members"]] == [str(p) for p in paths]
    assert [m["fingerprint"] for m in src["members"]] == [fingerprint(str(p)) for p in paths]
    assert src["fingerprint"] == _list_hash(src["members"])  # a hash of the list, not of nothing
    spelled = cli("fit", *[os.path.relpath(p) for p in paths], "--json").json()["source"]["fingerprint"]
    assert spelled == src["fingerprint"]  # however the paths are spelled
    np.testing.assert_allclose(many["spectrum"]["eigenvalues"], whole["spectrum"]["eigenvalues"], rtol=1e-12)
    assert many["fit"]["alpha"] == pytest.approx(whole["fit"]["alpha"], rel=1e-12)
    # a single file keeps its own fingerprint (baselines and --resume stay valid)
    assert whole["source"]["fingerprint"] == fingerprint(str(tmp_path / "all.npy"))


def test_a_glob_of_npy_shards_is_the_matrix_the_directory_is(cli, tmp_path):
    paths = _shards(tmp_path, sub="runs")
    (tmp_path / "runs" / "a").mkdir()
    globbed = cli("fit", str(tmp_path / "runs" / "*.npy"), "--json").json()
    listed = cli("fit", *paths, "--json").json()
    directory = cli("fit", tmp_path / "runs", "--json").json()
    assert globbed["spectrum"]["eigenvalues"] == listed["spectrum"]["eigenvalues"] == \
        directory["spectrum"]["eigenvalues"]
    assert globbed["source"]["files"] == 3
    r = cli("fit", str(tmp_path / "runs" / "a" / "*.npy"))  # a glob that matches nothing says so
    assert r.exit_code == 2 and r.stderr == f"error: no files match {tmp_path}/runs/a/*.npy.\n"
    # spectrum and isotropy take several PATHs too (the same resolution)
    assert cli("spectrum", *paths, "--json").json()["source"]["files"] == 3
    assert cli("isotropy", *paths, "--json").json()["source"]["n_rows"] == len(X)


def test_moment_files_named_each_or_by_glob_are_counted_and_listed(cli, tmp_path):
    for i, p in enumerate(_shards(tmp_path)):
        assert cli("moments", p, "-o", tmp_path / f"m{i}.npz").exit_code == 0
    ms = [tmp_path / f"m{i}.npz" for i in range(3)]
    by_args = cli("fit", *ms, "--json").json()
    by_glob = cli("fit", str(tmp_path / "m*.npz"), "--json").json()
    for doc in (by_args, by_glob):
        assert doc["source"]["files"] == 3 and doc["source"]["n_rows"] == len(X)
        assert [m["fingerprint"] for m in doc["source"]["members"]] == [fingerprint(str(m)) for m in ms]
    assert by_args["source"]["fingerprint"] == by_glob["source"]["fingerprint"] == \
        _list_hash(by_args["source"]["members"])
    two = cli("fit", *ms[:2], "--json").json()  # a missing shard of a job array shows
    assert two["source"]["files"] == 2 and two["source"]["fingerprint"] != by_args["source"]["fingerprint"]
    assert spectra.fit([str(m) for m in ms]).source["files"] == 3


@pytest.mark.parametrize("how", ["twice", "symlink", "hardlink", "glob and path"])
def test_the_same_file_twice_is_refused_naming_both(cli, tmp_path, how):
    paths = _shards(tmp_path)
    a = paths[0]
    if how == "twice":
        args, other = [a, a], a
    elif how == "symlink":
        os.symlink(a, tmp_path / "link.npy")
        args, other = [a, tmp_path / "link.npy"], tmp_path / "link.npy"
    elif how == "hardlink":
        os.link(a, tmp_path / "hard.npy")
        args, other = [a, tmp_path / "hard.npy"], tmp_path / "hard.npy"
    else:
        args, other = [str(tmp_path / "s*.npy"), a], a
    st = os.stat(a)
    if str(other) == str(a):
        refused(cli, tmp_path, "fit", *args, match=f"{a} is named twice (by a glob or a directory and by name, or "
                                                    "twice by name); name each input once.")
    else:
        refused(cli, tmp_path, "fit", *args, match=f"{other} and {a} are the same file (device {st.st_dev}, inode "
                                                    f"{st.st_ino}); name each input once.")


def test_a_moment_file_given_twice_is_not_counted_twice(tmp_path):
    m = str(spectra.accumulate(X).save(tmp_path / "m.npz"))
    with pytest.raises(spectra.InputError, match=r"m\.npz is named twice"):
        spectra.fit([m, m])


def test_an_output_is_never_a_member_of_an_input_glob(cli, tmp_path):
    (tmp_path / "pq").mkdir()
    for i, part in enumerate(np.array_split(X, 2)):
        pq.write_table(pa.table({"emb": pa.FixedSizeListArray.from_arrays(pa.array(part.ravel()), X.shape[1])}),
                       tmp_path / "pq" / f"{'ab'[i]}.parquet")
    refused(cli, tmp_path, "whiten", str(tmp_path / "pq" / "*.parquet"), "-o", tmp_path / "pq" / "a.parquet",
            match="is the input")
    paths = _shards(tmp_path)
    os.link(paths[1], tmp_path / "hard.npy")
    refused(cli, tmp_path, "whiten", str(tmp_path / "s*.npy"), "-o", tmp_path / "hard.npy", match="is the input")
    refused(cli, tmp_path, "moments", *paths, "-o", tmp_path / "m.npz", "--weights", paths[0], match=None)


def test_batch_never_writes_its_lines_onto_a_file_that_is_not_a_results_file(cli, tmp_path):
    np.save(tmp_path / "x.npy", X)
    spectra.accumulate(X).save(tmp_path / "m1.npz")
    refused(cli, tmp_path, "batch", tmp_path / "x.npy", "--jsonl", tmp_path / "m1.npz",
            match=f"--jsonl '{tmp_path}/m1.npz' exists and is not a spectra results file (it is a ZIP archive, such "
                  "as an .npz or a moment file); name a new file, or a results file of an earlier batch.")
    (tmp_path / "other.jsonl").write_text('{"a": 1}\n')
    refused(cli, tmp_path, "batch", tmp_path / "x.npy", "--jsonl", tmp_path / "other.jsonl",
            match="(its first line is JSON without a spectra schema)")
    assert cli("batch", tmp_path / "x.npy", "--jsonl", tmp_path / "r.jsonl").exit_code == 0
    assert cli("batch", tmp_path / "x.npy", "--jsonl", tmp_path / "r.jsonl", "--resume").exit_code == 0


def _wide_moment_file(tmp_path, d=20000):
    """A moment file whose m2 header claims d x d (3.2 GB at d = 20,000) in a member of a few bytes."""
    a = spectra.accumulate(X).save(tmp_path / "a.npz")
    head = io.BytesIO()
    np.lib.format.write_array_header_1_0(head, {"descr": "<f8", "fortran_order": False, "shape": (d, d)})
    with zipfile.ZipFile(a) as zin, zipfile.ZipFile(tmp_path / "wide.npz", "w") as zout:
        for name in zin.namelist():
            zout.writestr(name, head.getvalue() if name == "m2.npy" else zin.read(name))
    return tmp_path / "wide.npz"


def test_the_memory_budget_is_checked_before_reading_a_moment_file(cli, tmp_path):
    wide = _wide_moment_file(tmp_path)
    msg = (f"{wide}: its moments needs about 8.94 GiB (3 float64 matrices of 20000 x 20000); the memory budget "
           "is 0.931 GiB. Raise it with --max-memory (e.g. 10.7 GiB) on a machine that has it, or select fewer "
           "features.")
    refused(cli, tmp_path, "fit", wide, "--max-memory", "1GB", match=msg)
    tracemalloc.start()
    with pytest.raises(spectra.InputError, match="its moments needs about 8.94 GiB"):
        spectra.fit(str(wide), max_memory="1GB")
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert peak < 50 << 20  # nothing of the claimed size was made


def test_the_accumulator_checks_its_width_against_the_budget_before_allocating():
    with pytest.raises(spectra.InputError, match=r"^Accumulator: d = 60000 needs about 80.5 GiB \(3 float64 "
                                                 r"matrices of 60000 x 60000\); the memory budget is 0.931 GiB\. "
                                                 r"Raise it with max_memory"):
        spectra.Accumulator(60000, max_memory="1GB")
    with pytest.raises(spectra.OptionError, match=r"^block_rows=-5 must be a positive integer\.$"):
        spectra.Accumulator(16, block_rows=-5)
    with pytest.raises(spectra.OptionError, match=r"^block_rows=0 must be a positive integer\.$"):
        spectra.Accumulator(16, block_rows=0)
    assert spectra.Accumulator(16, max_memory="1GB").d == 16


def test_a_boolean_mask_file_is_read_by_every_command_as_by_the_library(cli, tmp_path):
    rng = np.random.default_rng(0)
    ctx = rng.standard_normal((60, 8, 12)).astype(np.float32)
    mask = np.ones((60, 8), dtype=bool)
    mask[40:, 6:] = False
    np.save(tmp_path / "ctx.npy", ctx)
    np.save(tmp_path / "mask.npy", mask)  # what np.save of an attention mask writes
    lib = spectra.fit(str(tmp_path / "ctx.npy"), mask=mask)
    doc = cli("fit", tmp_path / "ctx.npy", "--mask", tmp_path / "mask.npy", "--json").json()
    assert doc["source"]["rows_used"] == lib.source["rows_used"] == int(mask.sum())
    assert doc["spectrum"]["eigenvalues"] == lib.to_dict()["spectrum"]["eigenvalues"]
    assert cli("sequence", tmp_path / "ctx.npy", "--mask", tmp_path / "mask.npy", "--json").exit_code == 0
    assert cli("moments", tmp_path / "ctx.npy", "--mask", tmp_path / "mask.npy", "-o", tmp_path / "m.npz"
               ).exit_code == 0
    assert spectra.Accumulator.load(tmp_path / "m.npz").n == int(mask.sum())


def test_a_glob_that_mixes_moment_files_with_other_files_names_the_one_that_is_not(cli, tmp_path):
    spectra.accumulate(X).save(tmp_path / "m0.npz")
    np.savez(tmp_path / "m1.npz", x=X)
    refused(cli, tmp_path, "fit", str(tmp_path / "m*.npz"),
            match=f"{tmp_path}/m1.npz is not a spectra moment file (an .npz archive without the members format, "
                  f"m2, meta of a moment file) (beside the moment file {tmp_path}/m0.npz); several .npz inputs are "
                  "merged as moment files, and each must be one.")
    (tmp_path / "m1.npz").write_bytes((tmp_path / "m0.npz").read_bytes()[:200])  # truncated
    line = refused(cli, tmp_path, "fit", str(tmp_path / "m*.npz"))
    assert line.startswith(f"error: {tmp_path}/m1.npz is not a spectra moment file (") and "beside" in line
    np.save(tmp_path / "x.npy", X)
    refused(cli, tmp_path, "fit", tmp_path / "m0.npz", tmp_path / "x.npy",
            match=f"{tmp_path}/x.npy is an .npy file and {tmp_path}/m0.npz an .npz archive; the files of one input "
                  "must be all .npy shards, all Parquet files or all moment files.")


def test_options_that_cannot_apply_are_refused_by_name():
    with pytest.raises(spectra.OptionError, match=r"^centered does not apply: isotropy is measured on the centred"):
        spectra.isotropy(X, centered=False)
    with pytest.raises(spectra.OptionError, match=r"^engine does not apply: whiten writes its rows in order"):
        spectra.whiten(X, engine="dask")
    with pytest.raises(TypeError, match=r"sequence\(\) got an unexpected keyword argument 'rows'"):
        spectra.sequence(X, rows="0:5")
    with pytest.raises(TypeError, match=r"fit\(\) got an unexpected keyword argument 'rowz' \(did you mean 'rows'"):
        spectra.fit(X, rowz="0:5")


def test_report_source_members_are_in_the_schema(cli, tmp_path, validate):
    paths = _shards(tmp_path)
    validate(cli("fit", *paths, "--json").json())
    json.dumps(spectra.fit([str(p) for p in paths]).to_dict(), allow_nan=False)


def test_the_budget_refusal_reads_nothing_of_the_claimed_size_in_a_fresh_process(tmp_path):
    import subprocess
    import sys

    wide = _wide_moment_file(tmp_path)
    script = ("import sys\nfrom spectra_cli.cli import main\n"
              f"sys.argv = ['spectra', 'fit', {str(wide)!r}, '--max-memory', '1GB']\n"
              "try:\n    main()\nexcept SystemExit as e:\n    code = e.code\n"
              # VmHWM: this process's own peak (ru_maxrss would carry the forking parent's across exec)
              "print([ln.split()[1] for ln in open('/proc/self/status') if ln.startswith('VmHWM')][0])\n"
              "sys.exit(code)\n")
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "its moments needs about 8.94 GiB" in r.stderr, r.stderr
    assert int(r.stdout.split()[-1]) < 300 << 10  # KiB: the whole process stayed under 300 MB


@pytest.mark.parametrize(("args", "message"), [
    (["--positions", "0:1"], "--positions select(s) rows or weights of a data matrix; accumulated moments have no "
                             "rows to select."),
    (["--mask", "m.npy"], "--mask select(s) rows"),
    (["--precision", "float32"], "--precision choose(s) how rows are accumulated; these moments were accumulated "
                                 "already (the report states how): leave it out."),
    (["--block-rows", "10"], "--block-rows choose(s) how rows are accumulated"),
])
def test_options_that_cannot_apply_to_moments_are_refused_by_name(cli, tmp_path, args, message):
    spectra.accumulate(X).save(tmp_path / "m.npz")
    refused(cli, tmp_path, "fit", tmp_path / "m.npz", *args, match=message)


def test_the_report_states_the_rows_per_block_of_the_products_made():
    Y = powerlaw_matrix(3000, 16, 1.0, seed=0)
    assert spectra.fit(Y, ci=True, ci_replicates=10).options["block_rows"] == 94  # 32 blocks for the groups
    assert spectra.fit(Y).options["block_rows"] == 188  # (16 blocks: the standard errors' row groups)
    assert spectra.fit(Y[:60]).options["block_rows"] == 8192  # (too few rows for groups of 4: first-order errors)
    assert spectra.fit(Y, block_rows=500).options["block_rows"] == 500  # (a user's block is kept)


def test_report_attribute_paths_mirror_the_json():
    rep = spectra.fit(X, window=["3:8", "2:10"])
    doc = rep.to_dict()
    assert rep.source.n_rows == rep.source["n_rows"] == doc["source"]["n_rows"] == len(X)
    assert rep.options.precision == doc["options"]["precision"] == "float64"
    assert rep.fits[1].to_dict() == doc["fits"][1] and rep.fits[1].alpha == doc["fits"][1]["alpha"]
    assert rep.fit.alpha == rep.fits[0].alpha == doc["fit"]["alpha"]
    with pytest.raises(TypeError, match="read-only"):
        rep.source["n_rows"] = 3
    with pytest.raises(AttributeError, match="has no field 'nrows'"):
        _ = rep.source.nrows
    assert json.loads(json.dumps(rep.source)) == doc["source"]


def test_a_file_url_of_an_input_is_that_input_for_the_output_check(cli, tmp_path):
    np.save(tmp_path / "a.npy", X)
    refused(cli, tmp_path, "whiten", f"file://{tmp_path}/a.npy", "-o", tmp_path / "a.npy", match="is the input")


def test_a_recursive_glob_does_not_follow_links_back_up_the_tree(cli, tmp_path):
    (tmp_path / "lp" / "sub").mkdir(parents=True)
    np.save(tmp_path / "lp" / "a.npy", X)
    os.symlink("..", tmp_path / "lp" / "sub" / "up")
    os.symlink("../lp", tmp_path / "lp" / "self")
    doc = cli("fit", str(tmp_path / "lp" / "**" / "*.npy"), "--json").json()  # once, not a loop of matches
    assert doc["source"]["files"] == 1 and doc["source"]["n_rows"] == len(X)
    os.mkfifo(tmp_path / "lp" / "f.npy")  # a data name that is no regular file is refused, never left out
    refused(cli, tmp_path, "fit", str(tmp_path / "lp" / "*.npy"), match=f"{tmp_path}/lp/f.npy is a FIFO")
    refused(cli, tmp_path, "fit", str(tmp_path / "l*"), match=f"no files match {tmp_path}/l* (it matches the "
                                                             f"directory {tmp_path}/lp: name it without a pattern")


def test_a_directory_of_both_kinds_is_refused_not_read_halfway(cli, tmp_path):
    (tmp_path / "d").mkdir()
    np.save(tmp_path / "d" / "a.npy", X)
    pq.write_table(pa.table({"x": X[:, 0]}), tmp_path / "d" / "b.parquet")
    refused(cli, tmp_path, "fit", tmp_path / "d", match="holds both Parquet files")


def test_windows_of_shards_that_end_inside_a_window_are_read_whole(tmp_path):
    Y = powerlaw_matrix(300, 16, 1.0, seed=9)
    np.save(tmp_path / "q0.npy", Y[:100])
    np.save(tmp_path / "q1.npy", Y[100:])
    np.save(tmp_path / "all.npy", Y)
    shards = spectra.sequence([str(tmp_path / "q0.npy"), str(tmp_path / "q1.npy")], positions_per_window=7)
    whole = spectra.sequence(str(tmp_path / "all.npy"), positions_per_window=7)
    assert shards.to_dict()["context"]["spectrum"]["eigenvalues"] == whole.to_dict()["context"]["spectrum"][
        "eigenvalues"]
    pooled = spectra.fit([str(tmp_path / "q0.npy"), str(tmp_path / "q1.npy")], positions_per_window=7, pool="mean")
    np.testing.assert_allclose(pooled.spectrum.eigenvalues, spectra.fit(
        str(tmp_path / "all.npy"), positions_per_window=7, pool="mean").spectrum.eigenvalues, rtol=1e-12)


def test_merged_moments_keep_groups_only_when_they_split_every_row(tmp_path):
    a = spectra.accumulate(X[:450], groups=8).save(tmp_path / "a.npz")
    b = spectra.accumulate(X[450:]).save(tmp_path / "b.npz")
    c = spectra.accumulate(X[450:], groups=8).save(tmp_path / "c.npz")
    with pytest.raises(spectra.FitError, match="needs bootstrap groups that split every row: these moments have "
                                               "none"):
        spectra.fit([str(a), str(b)], ci=True, window="2:8")
    assert sum(g.n for g in spectra.Accumulator.load(a).merge(spectra.Accumulator.load(c)).groups) == len(X)


def test_no_member_of_a_moment_file_escapes_the_budget(cli, tmp_path):
    a = spectra.accumulate(X).save(tmp_path / "a.npz")
    with zipfile.ZipFile(a) as zin, zipfile.ZipFile(tmp_path / "pad.npz", "w", zipfile.ZIP_DEFLATED) as zout:
        for name in zin.namelist():
            zout.writestr(name, zin.read(name))
        head = io.BytesIO()
        np.lib.format.write_array_header_1_0(head, {"descr": "<U1", "fortran_order": False, "shape": (10**9,)})
        zout.writestr("pad.npy", head.getvalue())  # a text member claiming 4 GB: never read, never counted
        head = io.BytesIO()
        np.lib.format.write_array_header_1_0(head, {"descr": "<U1", "fortran_order": False, "shape": (10**9,)})
        zout.writestr("g0_m2.npy", head.getvalue())  # a member of a moment file claiming 8 GB: counted
    refused(cli, tmp_path, "fit", tmp_path / "pad.npz", "--max-memory", "1GB", match="its moments needs about 7.45")
    with pytest.raises(spectra.InputError, match="its moments needs about"):
        spectra.Accumulator.load(tmp_path / "pad.npz", max_memory="1GB")


def test_the_budget_of_several_moment_files_is_their_running_total(cli, tmp_path):
    Y = powerlaw_matrix(600, 300, 1.0, seed=1)
    for i in range(3):
        spectra.accumulate(Y[i * 200:(i + 1) * 200]).save(tmp_path / f"m{i}.npz")
    one = 8 * 300 * 300
    budget = int(3.5 * one)  # one file fits (its arrays and two working matrices), a second beside it does not
    assert cli("spectrum", tmp_path / "m0.npz", "--max-memory", str(budget), "--json").exit_code == 0
    refused(cli, tmp_path, "spectrum", *[tmp_path / f"m{i}.npz" for i in range(3)], "--max-memory", str(budget),
            match="m1.npz: its moments needs about")


@pytest.mark.parametrize(("call", "message"), [
    (lambda: spectra.check(["a.npy", "b.npy"], require=["fit.alpha > 0"]), r"^data=\['a.npy', 'b.npy'\] must be a "
                                                                            r"path \(str or os.PathLike\), not list\."),
    (lambda: spectra.check("a.npy", require=[3]), r"^require\[0\]=3 must be a string, not int\.$"),
    (lambda: spectra.compare(["a.npy"], "b.npy"), r"^a=\['a.npy'\] must be a path"),
    (lambda: spectra.fit([]), r"^no input path given"),
    (lambda: spectra.fit(["a.npy", 3]), r"^data\[1\]=3 must be a path \(str or os.PathLike\), not int\.$"),
    (lambda: spectra.batch(["a.npy", 3]), r"^paths\[1\]=3 must be a path"),
    (lambda: spectra.moments(X, out=3), r"^out=3 must be a path"),
    (lambda: spectra.trend(3, metric="fit.alpha"), r"^paths=3 must be a path"),
])
def test_library_arguments_of_the_wrong_type_are_named(call, message):
    with pytest.raises(spectra.SpectraError, match=message):
        call()


def test_a_single_requirement_string_is_one_requirement(tmp_path):
    np.save(tmp_path / "x.npy", X)
    assert spectra.check(str(tmp_path / "x.npy"), require="fit.alpha > 0").passed


def test_outputs_never_replace_a_file_of_another_kind(cli, tmp_path):
    np.save(tmp_path / "x.npy", X)
    np.savez(tmp_path / "arr.npz", a=X)
    refused(cli, tmp_path, "moments", tmp_path / "x.npy", "-o", tmp_path / "arr.npz",
            match=f"-o '{tmp_path}/arr.npz' exists and is not a moment file (an .npz archive without the "
                  "members format, m2, meta of a moment file); name a new file")
    spectra.accumulate(X).save(tmp_path / "m.npz")
    refused(cli, tmp_path, "whiten", tmp_path / "x.npy", "-o", tmp_path / "w.npy", "--save-transform",
            tmp_path / "m.npz", match="exists and is not a spectra transform file")
    assert cli("moments", tmp_path / "x.npy", "-o", tmp_path / "m.npz").exit_code == 0  # a moment file: replaced
    np.save(tmp_path / "t.npy", np.eye(12))
    refused(cli, tmp_path, "whiten", tmp_path / "x.npy", "--transform", tmp_path / "t.npy", "-o", tmp_path / "o.npy",
            match="is not a spectra transform (a single array, not an .npz archive")


def test_batch_analyses_a_file_named_twice_once(cli, tmp_path):
    np.save(tmp_path / "a.npy", X)
    os.link(tmp_path / "a.npy", tmp_path / "hard.npy")
    r = cli("batch", tmp_path / "a.npy", tmp_path / "hard.npy", "--json")
    assert r.exit_code == 0 and len(r.stdout.splitlines()) == 1
    assert f"note: skipped {tmp_path}/hard.npy: the same file as {tmp_path}/a.npy (a link), analysed once" in r.stderr


def test_an_integer_mask_holds_zeros_and_ones(cli, tmp_path):
    np.save(tmp_path / "ctx.npy", np.random.default_rng(0).standard_normal((20, 4, 6)))
    np.save(tmp_path / "m.npy", np.full((20, 4), 2, dtype=np.int8))
    refused(cli, tmp_path, "fit", tmp_path / "ctx.npy", "--mask", tmp_path / "m.npy",
            match=f"--mask '{tmp_path}/m.npy' holds values other than 0 and 1 (from 2 to 2)")


def test_a_results_file_behind_blank_lines_or_a_dangling_link_is_protected(cli, tmp_path):
    np.save(tmp_path / "x.npy", X)
    (tmp_path / "ws.jsonl").write_text("\n" * 70000 + "precious data")
    refused(cli, tmp_path, "batch", tmp_path / "x.npy", "--jsonl", tmp_path / "ws.jsonl",
            match="(its first line is not a JSON object)")
    os.symlink(tmp_path / "nowhere" / "new.npy", tmp_path / "dl.jsonl")
    refused(cli, tmp_path, "batch", tmp_path / "x.npy", "--jsonl", tmp_path / "dl.jsonl",
            match="it is a symbolic link to")


def test_an_output_never_joins_the_dataset_it_was_made_from(cli, tmp_path):
    paths = _shards(tmp_path, sub="d")
    refused(cli, tmp_path, "whiten", str(tmp_path / "d" / "*.npy"), "-o", tmp_path / "d" / "new.npy",
            match=f"-o '{tmp_path}/d/new.npy' matches the input glob {tmp_path}/d/*.npy: the next read of the input "
                  "would take it in; write the output elsewhere.")
    refused(cli, tmp_path, "whiten", tmp_path / "d", "-o", tmp_path / "d" / "new.npy",
            match="would join the .npy shards of the input directory")
    assert cli("whiten", *paths, "-o", tmp_path / "d" / "new.npy").exit_code == 0  # named files: no glob to join


@pytest.mark.parametrize(("call", "message"), [
    (lambda: spectra.whiten(X, k="3"), r"^k='3' must be an integer, not str\.$"),
    (lambda: spectra.fit(X, counting="abc"), r"^counting='abc' must be a number or a list of numbers, not str\.$"),
    (lambda: spectra.fit(X, counting=[0.1, "x"]), r"^counting\[1\]='x' must be a number, not str\.$"),
    (lambda: spectra.fit(X, rankme="yes"), r"^rankme='yes' must be True or False, not str\.$"),
    (lambda: spectra.fit(X, centered="no"), r"^centered='no' must be True or False, not str\.$"),
    (lambda: spectra.fit(X, drop_nonfinite="no"), r"^drop_nonfinite='no' must be True or False"),
    (lambda: spectra.sequence(X.reshape(90, 10, 12), controls=3), r"^controls=3 must be a string or a list of "
                                                                   r"strings, not int\.$"),
    (lambda: spectra.Accumulator(5, cosine="no"), r"^cosine='no' must be True or False"),
    (lambda: spectra.Accumulator(12).save(3), r"^path=3 must be a path"),
    (lambda: spectra.fit(X, connect_timeout=0), r"^connect_timeout=0 must be a positive number\.$"),
])
def test_every_argument_is_checked_with_the_same_validators(call, message):
    with pytest.raises(spectra.SpectraError, match=message):
        call()


def test_outputs_of_every_kind_replace_only_their_own_kind(cli, tmp_path):
    np.save(tmp_path / "x.npy", X)
    (tmp_path / "note.npy").write_text("my notes")
    refused(cli, tmp_path, "whiten", tmp_path / "x.npy", "-o", tmp_path / "note.npy",
            match=f"-o '{tmp_path}/note.npy' exists and is not a .npy file (an earlier output would be); name a new "
                  "file.")
    os.mkfifo(tmp_path / "ff.npz")
    refused(cli, tmp_path, "whiten", tmp_path / "x.npy", "-o", tmp_path / "w.npy", "--save-transform",
            tmp_path / "ff.npz", match="exists and is a FIFO; name a regular file.")  # was a hang
    os.mkfifo(tmp_path / "ff.npy")
    refused(cli, tmp_path, "synth", "powerlaw", "-n", "10", "-d", "4", "-o", tmp_path / "ff.npy",
            match="exists and is a FIFO")
    np.savez(tmp_path / "arr.npz", a=X)
    with pytest.raises(spectra.OutputError, match="exists and is not a moment file"):
        spectra.accumulate(X).save(tmp_path / "arr.npz")
    assert cli("whiten", tmp_path / "x.npy", "-o", tmp_path / "w.npy").exit_code == 0
    assert cli("whiten", tmp_path / "x.npy", "-o", tmp_path / "w.npy").exit_code == 0  # an earlier output: replaced


def test_a_sequence_dump_without_positions_and_bad_dask_addresses(cli, tmp_path):
    np.save(tmp_path / "p0.npy", np.zeros((100, 0, 32)))
    refused(cli, tmp_path, "sequence", tmp_path / "p0.npy", match="0 positions")
    with pytest.raises(spectra.InputError, match="0 positions"):
        spectra.sequence(np.zeros((100, 0, 32)))
    np.save(tmp_path / "x.npy", X)
    refused(cli, tmp_path, "fit", tmp_path / "x.npy", "--engine", "dask", "--connect-timeout", "1e308",
            match="--connect-timeout 1e+308 must be at most 600 seconds.")
    pytest.importorskip("distributed")
    refused(cli, tmp_path, "fit", tmp_path / "x.npy", "--engine", "dask", "--scheduler", "tcp://127.0.0.1:99999",
            match="port 99999 is not a TCP port (1 to 65535).")
