"""Every bad input: exit code 2, empty stdout, one pinned `error:` line on stderr."""

from __future__ import annotations

import os

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

X10 = np.random.default_rng(0).standard_normal((10, 4))


def _make(tmp_path, name):
    """Build the bad input called ``name`` in tmp_path; return the CLI arguments."""
    p = tmp_path
    good = p / "good.npy"
    np.save(good, X10)
    if name == "missing":
        return [p / "nope.npy"]
    if name == "empty-dir":
        (p / "empty").mkdir()
        return [p / "empty"]
    if name == "extension":
        (p / "x.csv").write_text("1,2\n")
        return [p / "x.csv"]
    if name == "truncated":
        (p / "t.npy").write_bytes(good.read_bytes()[:-40])
        return [p / "t.npy"]
    if name == "corrupt-parquet":
        (p / "c.parquet").write_bytes(b"PAR1 this is not parquet")
        return [p / "c.parquet"]
    if name == "object":
        np.save(p / "o.npy", np.array([{"a": 1}, None], dtype=object), allow_pickle=True)
        return [p / "o.npy"]
    if name == "npz-several":
        np.savez(p / "m.npz", first=X10, second=X10)
        return [p / "m.npz"]
    if name in ("0d", "1d", "4d"):
        arr = {"0d": np.float64(3), "1d": np.arange(5.0), "4d": np.zeros((2, 2, 2, 2))}[name]
        np.save(p / f"{name}.npy", arr)
        return [p / f"{name}.npy"]
    if name in ("zero-rows", "one-row", "zero-cols"):
        arr = {"zero-rows": np.zeros((0, 4)), "one-row": np.zeros((1, 4)), "zero-cols": np.zeros((5, 0))}[name]
        np.save(p / f"{name}.npy", arr)
        return [p / f"{name}.npy"]
    if name == "nonfinite":
        Y = X10.copy()
        Y[3, 1], Y[7, 0] = np.nan, np.inf
        np.save(p / "nan.npy", Y)
        return [p / "nan.npy"]
    if name in ("bool", "complex"):
        np.save(p / f"{name}.npy", np.zeros((3, 3), dtype=name))
        return [p / f"{name}.npy"]
    if name == "string-parquet":
        pq.write_table(pa.table({"s": ["a", "b"]}), p / "s.parquet")
        return [p / "s.parquet"]
    if name == "two-vectors":
        pq.write_table(pa.table({"a": pa.array([[1.0, 2.0]] * 3), "b": pa.array([[1.0, 2.0]] * 3)}), p / "v.parquet")
        return [p / "v.parquet"]
    if name == "ragged":
        pq.write_table(pa.table({"v": pa.array([[1.0, 2.0], [3.0, 4.0], [5.0]])}), p / "r.parquet")
        return [p / "r.parquet"]
    if name == "null-row":
        pq.write_table(pa.table({"v": pa.array([[1.0, 2.0], None, [5.0, 6.0]])}), p / "n.parquet")
        return [p / "n.parquet"]
    if name in ("string-column", "bool-column"):
        t = pa.table({"v": pa.array([[1.0, 2.0], [3.0, 4.0]]), "s": ["x", "y"], "flag": [True, False]})
        pq.write_table(t, p / "mixed.parquet")
        return [p / "mixed.parquet", "--column", "s" if name == "string-column" else "flag"]
    if name.startswith("weights-"):
        w = {"weights-negative": np.r_[1, 1, -1.0, np.ones(7)], "weights-nan": np.r_[1, np.nan, np.ones(8)],
             "weights-zero": np.zeros(10), "weights-length": np.ones(9)}[name]
        np.save(p / "w.npy", w)
        return [good, "--weights", p / "w.npy"]
    if name == "window-reversed":
        return [good, "--window", "5:2"]
    if name == "window-beyond":
        return [good, "--window", "9:10"]
    if name == "too-large":
        np.save(p / "huge.npy", X10 * 1e200)
        return [p / "huge.npy"]
    if name == "precision":
        return [good, "--precision", "float16"]
    if name == "rows-beyond":
        return [good, "--rows", "20:"]
    if name == "unknown-option":
        return [good, "--zzz"]
    if name == "npz-key":
        np.savez(p / "m.npz", first=X10, second=X10)
        return [p / "m.npz", "--key", "third"]
    raise AssertionError(name)


CASES = {
    "missing": "error: no such file or directory: {tmp}/nope.npy",
    "empty-dir": "error: directory {tmp}/empty holds no .parquet or .npy files.",
    "extension": "error: unknown extension .csv for {tmp}/x.csv; spectra reads .npy, .npz, Parquet "
    "(.parquet files, a directory or a glob of them) and .safetensors.",
    "truncated": "error: {tmp}/t.npy is truncated: its header promises 320 bytes of data "
    "(shape (10, 4), dtype float64) but only 280 follow.",
    "corrupt-parquet": "error: cannot read Parquet file {tmp}/c.parquet: Parquet magic bytes not found in footer. "
    "Either the file is corrupted or this is not a parquet file.",
    "object": "error: {tmp}/o.npy has object dtype; spectra never unpickles data. "
    "Save a numeric array (e.g. np.save(path, X.astype(np.float32))).",
    "npz-several": "error: {tmp}/m.npz holds 2 arrays (first, second); choose one with --key.",
    "0d": "error: {tmp}/0d.npy is 0-D with shape (); a 2-D (n_samples, n_features) matrix or a 3-D "
    "(windows, positions, features) sequence dump is required.",
    "1d": "error: {tmp}/1d.npy is 1-D with shape (5,) (a 1-D array is a vector, not a matrix of rows); a 2-D "
    "(n_samples, n_features) matrix or a 3-D (windows, positions, features) sequence dump is required.",
    "4d": "error: {tmp}/4d.npy is 4-D with shape (2, 2, 2, 2); a 2-D (n_samples, n_features) matrix or a 3-D "
    "(windows, positions, features) sequence dump is required.",
    "zero-rows": "error: {tmp}/zero-rows.npy has 0 rows (shape (0, 4)); at least 2 are required.",
    "one-row": "error: {tmp}/one-row.npy has 1 usable row (shape (1, 4)); at least 2 are required.",
    "zero-cols": "error: {tmp}/zero-cols.npy has 0 columns (shape (5, 0)); at least 1 feature is required.",
    "nonfinite": "error: {tmp}/nan.npy has 2 row(s) with NaN or inf entries (first at row 3); "
    "clean the data or pass --drop-nonfinite to skip those rows.",
    "bool": "error: {tmp}/bool.npy has dtype bool; a numeric (float or integer) array is required.",
    "complex": "error: {tmp}/complex.npy has complex dtype complex128; spectra analyses real matrices. "
    "Pass the real and imaginary parts as separate features if that is what you mean.",
    "string-parquet": "error: {tmp}/s.parquet has no numeric column or list-of-numbers column (columns: s: string).",
    "two-vectors": "error: {tmp}/v.parquet has 2 vector columns (a, b); choose one with --column.",
    "ragged": "error: column 'v' is ragged: row 2 has 1 values, expected 2 (the length of row 0).",
    "null-row": "error: column 'v' has a null row at row 1; drop or fill it first.",
    "string-column": "error: column 's' has type string; a numeric column or a list of numbers is required.",
    "bool-column": "error: column 'flag' has type bool; a numeric column or a list of numbers is required.",
    "weights-negative": "error: weight of row 2 is -1.0; weights must be finite and >= 0.",
    "weights-nan": "error: weight of row 1 is nan; weights must be finite and >= 0.",
    "weights-zero": "error: all weights are zero; at least one row needs a positive weight.",
    "weights-length": "error: weights file {tmp}/w.npy has 9 weights but the input has 10 rows; "
    "one weight per row is required.",
    "window-reversed": "error: --window '5:2': K_MIN 5 is greater than K_MAX 2.",
    "window-beyond": "error: window 9:10 starts beyond the usable rank 4 "
    "(eigenvalues past it are below the numerical or sampling floor).",
    "too-large": "error: the covariance exceeds the float64 range (values above ~1e154 square past 1.8e308); "
    "rescale the input (e.g. divide by its largest magnitude).",
    "precision": "error: --precision 'float16' is not one of 'float64', 'float32'.",
    "rows-beyond": "error: --rows starts at 20 but the input has only 10 rows.",
    "unknown-option": "error: No such option: --zzz (see 'spectra fit --help')",
    "npz-key": "error: {tmp}/m.npz has no array 'third'; it holds: first, second.",
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_bad_input_exits_2_with_one_pinned_line(cli, tmp_path, name):
    args = _make(tmp_path, name)
    r = cli("fit", *args)
    assert r.exit_code == 2, r.stderr
    assert r.stdout == ""
    assert r.stderr == CASES[name].format(tmp=tmp_path) + "\n"


@pytest.mark.parametrize("name", ["missing", "object", "nonfinite", "two-vectors"])
def test_spectrum_and_json_mode_fail_the_same_way(cli, tmp_path, name):
    args = _make(tmp_path, name)
    r = cli("spectrum", *args, "--json")
    assert r.exit_code == 2 and r.stdout == ""
    assert r.stderr == CASES[name].format(tmp=tmp_path) + "\n"


def test_object_npy_is_refused_without_unpickling(cli, tmp_path, monkeypatch):
    import pickle

    def boom(*a, **k):  # pragma: no cover - reaching it is the failure
        raise AssertionError("unpickled")

    monkeypatch.setattr(pickle, "load", boom)
    monkeypatch.setattr(pickle, "loads", boom)
    r = cli("fit", *_make(tmp_path, "object"))
    assert r.exit_code == 2


def test_drop_nonfinite_skips_and_reports(cli, tmp_path, validate):
    args = _make(tmp_path, "nonfinite")
    r = cli("fit", *args, "--drop-nonfinite", "--json")
    assert r.exit_code == 0, r.stderr
    doc = r.json()
    validate(doc)
    assert doc["source"]["rows_used"] == 8 and doc["source"]["rows_dropped"] == 2
    assert ("2 row(s) with NaN or inf entries were dropped (--drop-nonfinite); if that is more than a few, look for "
            "an overflow upstream (float16 overflows above 65504)") in doc["warnings"]
    Y = np.load(args[0])
    keep = np.all(np.isfinite(Y), axis=1)
    ref = np.linalg.eigvalsh(np.cov(Y[keep], rowvar=False))[::-1]
    np.testing.assert_allclose(doc["spectrum"]["eigenvalues"], ref, rtol=1e-10)


def test_values_near_1e150_give_the_right_spectrum(cli, tmp_path):
    np.save(tmp_path / "big.npy", X10 * 1e150)
    r = cli("spectrum", tmp_path / "big.npy", "--json")
    assert r.exit_code == 0, r.stderr
    ref = np.linalg.eigvalsh(np.cov(X10, rowvar=False))[::-1] * 1e300
    np.testing.assert_allclose(r.json()["spectrum"]["eigenvalues"], ref, rtol=1e-10)


def test_no_half_written_output_and_no_traceback_anywhere(cli, tmp_path):
    for name in CASES:
        sub = tmp_path / name
        os.makedirs(sub)
        r = cli("fit", *_make(sub, name), "--json")
        assert "Traceback" not in r.stderr and r.stdout == ""


NPY_SAMPLE = "sample_data/minilm_sentence_embeddings_1k.npy"
PQ_SAMPLE = "sample_data/minilm_layer5_tokens_4k.parquet"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ([NPY_SAMPLE, "--rows", "abc"], "error: --rows 'abc' is not START:STOP (e.g. 0:10000, :5000, 1000:)."),
        ([NPY_SAMPLE, "--rows", "5:5"], "error: --rows '5:5' selects no rows (STOP must be greater than START)."),
        ([NPY_SAMPLE, "--sample", "0"], "error: --sample 0 must be a positive number of rows."),
        ([NPY_SAMPLE, "--ddof", "-1"], "error: --ddof -1 must be 0 or a positive integer."),
        ([NPY_SAMPLE, "--key", "x"], "error: --key applies to .npz archives only."),
        ([NPY_SAMPLE, "--column", "emb"],
         "error: --column, --columns and --weight-column apply to Parquet input only."),
        ([NPY_SAMPLE, "--block-rows", "0"], "error: --block-rows 0 must be a positive integer."),
        ([PQ_SAMPLE, "--column", "emb", "--columns", "a,b"],
         "error: use --column (one vector column) or --columns (numeric columns), not both."),
        ([PQ_SAMPLE, "--weights", "x.npy", "--weight-column", "token_index"],
         "error: use one of --weights, --weight-column and --logits, not several."),
        ([PQ_SAMPLE, "--weight-column", "nope"],
         f"error: --weight-column 'nope' is not a column of {PQ_SAMPLE}; columns: token_index, emb."),
    ],
)
def test_bad_options_exit_2_with_one_pinned_line(cli, monkeypatch, args, message):
    from tests.conftest import ROOT

    monkeypatch.chdir(ROOT)
    r = cli("fit", *args)
    assert r.exit_code == 2 and r.stdout == "" and r.stderr == message + "\n"


def test_unwritable_outputs_exit_2_with_one_line(cli, tmp_path):
    missing = tmp_path / "gone" / "deeper"
    np.save(tmp_path / "x.npy", X10)
    r = cli("batch", tmp_path / "x.npy", "--jsonl", missing / "r.jsonl")
    assert r.exit_code == 2 and r.stdout == ""
    assert r.stderr == f"error: --jsonl '{missing / 'r.jsonl'}': directory {missing} does not exist.\n"


_BIG = "1" * 5000  # past Python's 4,300-digit limit on int(str): it was a ValueError, exit 3


@pytest.mark.parametrize("command, args, message", [
    ("fit", ["--window", f"11:{_BIG}"], "error: --window '11:" + "1" * 34 + "...' holds a number of 5,000 digits; at "
                                         "most 18 are allowed."),
    ("fit", ["--rows", f"{_BIG}:"], "error: --rows '" + "1" * 37 + "...' holds a number of 5,000 digits; at most 18 "
                                    "are allowed."),
    ("fit", ["--positions", f"1:{_BIG}"], "holds a number of 5,000 digits; at most 18 are allowed."),
    ("fit", ["--positions", f"0,{_BIG}"], "holds a number of 5,000 digits; at most 18 are allowed."),
    ("fit", ["--positions", "-:3"], "is not a slice (1:, 0:16) or a list (0,2,5) of positions."),
    ("sequence", ["--window", f"1:{_BIG}"], "error: --window '1:" + "1" * 35 + "...' holds a number of 5,000 digits"),
    ("fit", ["--window", "11:1234567890123456789"], "holds a number of 19 digits; at most 18 are allowed."),
    ("fit", ["--threads", "99999999999999999999999"], "error: --threads 99999999999999999... (23 digits) is more "
                                                      "than 4096 threads; give at most the cores the run may use."),
    ("batch", ["--threads", "5000"], "error: --threads 5000 is more than 4096 threads"),
])
def test_numbers_too_long_to_be_numbers_are_one_line_not_a_traceback(cli, tmp_path, command, args, message):
    X = np.random.default_rng(0).standard_normal((64, 8, 6)) if "--positions" in args or command == "sequence" else \
        np.random.default_rng(0).standard_normal((64, 6))
    np.save(tmp_path / "x.npy", X)
    r = cli(command, tmp_path / "x.npy", *args)
    assert r.exit_code == 2, r.stderr
    assert r.stdout == "" and len(r.stderr.splitlines()) == 1 and message in r.stderr, r.stderr


def test_bootstrap_replicates_have_a_bound(cli, tmp_path):
    np.save(tmp_path / "x.npy", np.random.default_rng(0).standard_normal((300, 6)))
    r = cli("fit", tmp_path / "x.npy", "--ci", "--ci-replicates", "1000000000")  # ran forever, before
    assert r.exit_code == 2 and r.stdout == ""
    assert r.stderr == ("error: --ci-replicates 1000000000 is more than 20,000 replicates (each one a decomposition; "
                        "a 95 % percentile interval settles within a few thousand).\n")


@pytest.mark.parametrize("args, needs", [(["powerlaw", "-n", "10", "-d", "1000000000"], "d = 1000000000 needs about"),
                                         (["random-features", "-d", "4000", "--max-memory", "100MB"],
                                          "d = 4000, input width 16000 needs about 2.79 GiB")])
def test_synth_checks_its_matrices_against_the_memory_budget_first(cli, tmp_path, args, needs):
    r = cli("synth", *args, "-o", tmp_path / "s.npy")
    assert r.exit_code == 2 and r.stdout == "" and len(r.stderr.splitlines()) == 1
    assert needs in r.stderr and "the memory budget is" in r.stderr and "--max-memory" in r.stderr
    assert not any(tmp_path.iterdir())


@pytest.mark.parametrize("command, flag", [("trend", "--step-regex"), ("batch", "--tensors")])
def test_every_pattern_runs_in_linear_time_and_backtracking_syntax_is_refused(cli, tmp_path, command, flag):
    # each of these ran for hours (exponential or high-polynomial backtracking in Python's re) on a name of ~40
    # characters that almost matches; on RE2 each search is linear in the name
    X = np.random.default_rng(0).standard_normal((40, 4))
    if command == "trend":
        np.save(tmp_path / ("a" * 40 + "b.npy"), X)
        where = tmp_path / "r.jsonl"
        assert cli("batch", tmp_path, "--jsonl", where).exit_code == 0
    else:
        from safetensors.numpy import save_file

        where = tmp_path / "ck.safetensors"
        save_file({"a" * 40 + "b": X.astype(np.float32)}, str(where))
    extra = ["--metric", "fit.alpha"] if command == "trend" else []
    for pattern in ["(a+)+$", "(.|\\w)*Z$", ".*" * 30 + "Z", "(.*.){1,100}Z", "([\\w.][\\w.]|[\\w.])*X"]:
        r = cli(command, where, flag, pattern, *extra)
        assert r.exit_code == 2 and r.stdout == "" and len(r.stderr.splitlines()) == 1, (pattern, r.stderr)
        assert ("found no step" if command == "trend" else "--tensors") in r.stderr, r.stderr
    r = cli(command, where, flag, "(a)\\1", *extra)
    assert r.exit_code == 2 and r.stdout == ""
    assert r.stderr == (f"error: {flag} '(a)\\\\1' uses a back-reference or look-around (invalid escape sequence: "
                        "\\1): spectra runs patterns in time linear in the name (RE2), and these need backtracking, "
                        "which can run for hours on a long name; write the pattern without them.\n")
