"""Moment files are files other people wrote: every field that lies is one line naming the file and
the field, exit 2, nothing on stdout, the file unchanged."""

from __future__ import annotations

import json

import numpy as np
import pytest

import spectra_cli as spectra
from tests.cli.test_hostile import refused
from tests.conftest import powerlaw_matrix

X = powerlaw_matrix(400, 8, 1.0, seed=2)


def _parts(path):
    with np.load(path) as z:
        return {k: z[k] for k in z.files}


def _lie(tmp_path, change, *, weighted=False, groups=0):
    a = spectra.accumulate(X, weights=np.linspace(0.5, 2.0, len(X)) if weighted else None,
                           groups=groups).save(tmp_path / "good.npz")
    parts = _parts(a)
    meta = json.loads(str(parts["meta"]))
    change(parts, meta)
    parts["meta"] = np.array(json.dumps(meta))
    np.savez(tmp_path / "m.npz", **parts)
    return tmp_path / "m.npz"


def _scalar(i, v, prefix=""):
    def change(parts, meta):
        s = parts[f"{prefix}scalars"].copy()
        s[i] = v
        parts[f"{prefix}scalars"] = s
    return change


def _meta(path, v):
    def change(parts, meta):
        node = meta
        for k in path[:-1]:
            node = node[k]
        node[path[-1]] = v
    return change


def _array(name, f):
    def change(parts, meta):
        parts[name] = f(parts[name].copy())
    return change


def _indefinite(d):
    """Unit diagonal, off-diagonal entries of +-0.9: every 2 x 2 minor is fine (Cauchy-Schwarz holds),
    the matrix is not positive semi-definite."""
    signs = np.sign(np.random.default_rng(0).standard_normal((d, d)))
    s = np.triu(signs, 1)
    c = np.eye(d) + 0.9 * (s + s.T)
    assert np.linalg.eigvalsh(c)[0] < -0.5
    return c


CASES = {
    "n_dropped many": (_meta(["n_dropped"], "many"), "meta n_dropped is 'many'; a count (an integer, 0 or more) is "
                                                      "required."),
    "n_dropped list": (_meta(["n_dropped"], [1]), "meta n_dropped is [1]; a count"),
    "weight_sq_sum text": (_meta(["weight_sq_sum"], "x"), "meta weight_sq_sum is 'x'; a finite number, 0 or more is "
                                                          "required."),
    "weight_sq_sum negative": (_meta(["weight_sq_sum"], -1), "meta weight_sq_sum is -1; a finite number"),
    "weight_sq_sum not the count": (_meta(["weight_sq_sum"], 7), "meta weight_sq_sum is 7 for 400 unweighted rows"),
    "sources int": (_meta(["sources"], 5), "meta sources is 5; a list of objects is required."),
    "d fractional": (_meta(["options", "d"], 16.9), "meta options.d is 16.9; a count"),
    "d float": (_meta(["options", "d"], 8.0), "meta options.d is 8.0; a positive integer is required."),
    "precision": (_meta(["options", "precision"], "float16"), "meta options.precision is 'float16'; one of float64, "
                                                             "float32 is required."),
    "block_rows meta zero": (_meta(["options", "block_rows"], 0), "meta options.block_rows is 0; a positive integer"),
    "groups text": (_meta(["options", "groups"], "2"), "meta options.groups is '2'; a count"),
    "cosine text": (_meta(["options", "cosine"], "yes"), "meta options.cosine is 'yes'; true or false is required."),
    "weighted lies": (_meta(["options", "weighted"], True), "its metadata says weighted True but its moments say "
                                                            "False."),
    "n fractional": (_scalar(0, 2.5), "scalars[0] (rows) is 2.5; a count"),
    "n huge": (_scalar(0, 1e300), "scalars[0] (rows) is 1e+300; a count"),
    "weight sum zero": (_scalar(1, 0.0), "scalars says 400 unweighted rows but a weight sum of 0"),
    "n_positive negative": (_scalar(2, -5), "scalars[2] (rows of positive weight) is -5.0; a count"),
    "scale negative": (_scalar(3, -1), "scalars[3] (scale) is -1.0; a positive power of two is required."),
    "scale not a power of two": (_scalar(3, 3.0), "scalars[3] (scale) is 3.0; a positive power of two"),
    "block rows huge": (_scalar(5, 1e300), "scalars[5] (rows per block) is 1e+300; a count"),
    "block rows negative": (_scalar(5, -5), "scalars[5] (rows per block) is -5.0; a count"),
    "block rows zero is fine only for no rows": (_scalar(5, 401), "scalars[5] (rows per block) is 401.0; a count of "
                                                                  "at most 400"),
    "m2 negative definite": (_array("m2", lambda m: -m), "array m2 has a negative diagonal entry"),
    "m2 not symmetric": (_array("m2", lambda m: m + np.triu(np.ones_like(m), 1)), "array m2 is not symmetric"),
    "m2 not psd": (_array("m2", lambda m: m + 10 * m.max() * (np.ones_like(m) - np.eye(len(m)))),
                   "array m2 is not positive semi-definite"),
    "m2 inf": (_array("m2", lambda m: np.where(np.eye(len(m)) > 0, np.inf, m)), "array m2 holds NaN or infinite"),
    "m2 text": (_array("m2", lambda m: np.array(["x"] * m.size).reshape(m.shape)), "array m2 is an array of shape "
                                                                                    "[8, 8]; a numeric array"),
    "mean nan": (_array("mean_rel", lambda m: m * np.nan), "array mean_rel holds NaN or infinite values"),
    "scalars short": (_array("scalars", lambda s: s[:3]), "array scalars is an array of shape [3]; a numeric array "
                                                          "of shape [6] is required."),
    "cos inf": (_array("cos_scalars", lambda c: np.where(np.arange(5) == 3, np.inf, c)),
                "array cos_scalars holds NaN or infinite values"),
    "cos unit sum nan": (_array("cos_unit_sum", lambda c: c * np.nan), "array cos_unit_sum holds NaN"),
    "cos zero rows above rows": (_array("cos_scalars", lambda c: np.where(np.arange(5) == 3, 1e6, c)),
                                 "cos_scalars[3] (all-zero rows) is 1000000.0; a count of at most 400"),
    "cos weight sum": (_array("cos_scalars", lambda c: np.where(np.arange(5) == 0, 1e6, c)),
                       "cos_scalars (weight sum 1e+06, of squares 400) do not count the 400 non-zero unweighted rows"),
    "cos rows": (_array("cos_scalars", lambda c: np.where(np.arange(5) == 4, 10, c)), "cos_scalars[4] counts 10 "
                                                                                       "rows but its moments 400"),
    "m2 indefinite": (_array("m2", lambda m: m.max() * _indefinite(len(m))),
                      "it is not positive semi-definite, so these moments are corrupt"),
    "cos unit sum too long": (_array("cos_unit_sum", lambda c: c * 1e6), "array cos_unit_sum is longer than its "
                                                                         "weight sum"),
    "norms 2-D": (_array("norms", lambda a: a.reshape(1, -1)), "array norms is not a histogram of row norms"),
    "norms huge": (_array("norms", lambda a: np.zeros(10**6)), "array norms is not a histogram of row norms"),
    "norms fractional": (_array("norms", lambda a: np.r_[a[:2], a[2:] + 0.5]), "array norms holds a count that is "
                                                                             "not a whole number"),
    "norms negative": (_array("norms", lambda a: np.r_[a[0], -1.0, a[2:]]), "array norms holds a count that is not"),
    "norms off the float range": (_array("norms", lambda a: np.r_[1e9, a[1:]]), "array norms starts at bin 1e+09, "
                                                                               "outside the bins of float64"),
    "norms miscount": (_array("norms", lambda a: np.r_[a[:2], a[2:] * 2]), "array norms counts 800 rows but its "
                                                                         "moments 400 rows of positive weight"),
    "norms too large": (_array("norms", lambda a: np.r_[a[0] + 64 * 10, a[1:]]), "array norms holds squared row norms "
                                                                               "summing to"),
    "fourth shape": (_array("fourth", lambda a: np.r_[a, 1.0]), "array fourth is not the sum of fourth moments"),
    "fourth nan": (_array("fourth", lambda a: np.r_[np.nan, a[1]]), "array fourth holds [nan, 400]: a finite sum"),
    "fourth rows above": (_array("fourth", lambda a: np.r_[a[0], 401.0]), "a whole number of rows from 0 to 400"),
    "fourth fractional rows": (_array("fourth", lambda a: np.r_[a[0], 10.5]), "a whole number of rows from 0 to 400"),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_a_moment_file_that_lies_is_refused_naming_the_field(cli, tmp_path, name):
    change, message = CASES[name]
    m = _lie(tmp_path, change)
    line = refused(cli, tmp_path, "fit", m)
    assert message in line, line
    if name == "m2 indefinite":  # found where the merged moments are decomposed: no one file to name
        return
    assert line.startswith(f"error: {m}: ") or line.startswith(f"error: {m} "), line
    with pytest.raises(spectra.InputError):
        spectra.Accumulator.load(m)


def test_weighted_and_grouped_files_are_checked_too(cli, tmp_path):
    m = _lie(tmp_path, _meta(["weight_sq_sum"], 1e-9), weighted=True)
    refused(cli, tmp_path, "fit", m, match="gives an effective sample size (sum w)^2 / sum w^2 outside [1, 400]")
    m = _lie(tmp_path, _meta(["weight_sq_sum"], 1e12), weighted=True)
    refused(cli, tmp_path, "fit", m, match="outside [1, 400]")
    m = _lie(tmp_path, _scalar(1, 1e300), weighted=True)  # was an OverflowError
    refused(cli, tmp_path, "fit", m)
    m = _lie(tmp_path, _array("g1_m2", lambda a: np.where(np.eye(len(a)) > 0, a * 1e6, a)), groups=4)
    refused(cli, tmp_path, "fit", m, "--ci", match="its bootstrap groups, merged, are not its moments")
    m = _lie(tmp_path, _array("g0_mean_rel", lambda a: a + 100), groups=4)
    refused(cli, tmp_path, "fit", m, "--ci", match="its bootstrap groups, merged, are not its moments")
    m = _lie(tmp_path, _array("g1_origin", lambda a: a + 1e300), groups=4)  # was LinAlgError in the bootstrap
    refused(cli, tmp_path, "fit", m, "--ci")
    m = _lie(tmp_path, _scalar(0, 3, prefix="g0_"), groups=4)
    refused(cli, tmp_path, "fit", m, match="g0_scalars[2] (rows of positive weight) is 104.0; a count of at most 3")
    m = _lie(tmp_path, _array("g1_m2", lambda a: -a), groups=4)
    refused(cli, tmp_path, "fit", m, match="array g1_m2 has a negative diagonal entry")


def test_the_files_spectra_writes_pass_every_check(tmp_path):
    for kw in ({}, {"groups": 5}, {"weights": np.linspace(0.1, 3, len(X))}, {"precision": "float32"}):
        a = spectra.accumulate(X, **kw).save(tmp_path / "a.npz")
        assert spectra.Accumulator.load(a).n == len(X)
    empty = spectra.Accumulator(8)
    assert spectra.Accumulator.load(empty.save(tmp_path / "e.npz")).n == 0


def test_two_moment_files_of_the_same_rows_are_not_merged(cli, tmp_path):
    np.save(tmp_path / "x.npy", X)
    assert cli("moments", tmp_path / "x.npy", "-o", tmp_path / "m1.npz").exit_code == 0
    (tmp_path / "m1c.npz").write_bytes((tmp_path / "m1.npz").read_bytes())  # a copy: another inode
    refused(cli, tmp_path, "fit", tmp_path / "m1.npz", tmp_path / "m1c.npz",
            match="hold the moments of the same rows (source")
    assert cli("moments", tmp_path / "x.npy", "--rows", "0:200", "-o", tmp_path / "a.npz").exit_code == 0
    assert cli("moments", tmp_path / "x.npy", "--rows", "200:400", "-o", tmp_path / "b.npz").exit_code == 0
    assert cli("fit", tmp_path / "a.npz", tmp_path / "b.npz", "--json").json()["source"]["n_rows"] == len(X)


def test_a_report_with_a_key_twice_is_not_strict_json(cli, tmp_path):
    (tmp_path / "r.json").write_text('{"schema": "spectra.report/1", "fit": {"alpha": 0.1, "alpha": 9}}')
    refused(cli, tmp_path, "check", tmp_path / "r.json", "--require", "fit.alpha > 1",
            match="is not strict JSON: it holds the key 'alpha' twice in one object.")


def test_triangles_that_differ_within_the_tolerance_are_read_as_their_mean(cli, tmp_path):
    """A large offset's rounding lets the symmetry check pass group matrices whose triangles differ by much (here by
    the diagonal's size, the groups still summing to the moments): the file is read as each matrix's symmetric mean,
    so that every reader of either triangle sees the same numbers; a file spectra wrote keeps every bit."""
    far = X + 1e6
    good = spectra.accumulate(far, groups=4).save(tmp_path / "good.npz")
    parts = _parts(good)
    g0 = parts["g0_m2"]
    skew = np.triu(np.full_like(g0, float(np.diag(g0).max())), 1)
    skew -= skew.T
    parts["g0_m2"], parts["g1_m2"] = g0 + skew, parts["g1_m2"] - skew
    np.savez(tmp_path / "m.npz", **parts)
    loaded = spectra.Accumulator.load(tmp_path / "m.npz")._state.groups
    for i, m in enumerate(loaded[:2]):
        stored = parts[f"g{i}_m2"]
        assert np.array_equal(m.m2, m.m2.T)
        np.testing.assert_allclose(m.m2, (stored + stored.T) / 2, rtol=1e-15, atol=0)
    again = spectra.Accumulator.load(good)._state.groups
    assert all(np.array_equal(m.m2, _parts(good)[f"g{i}_m2"]) for i, m in enumerate(again))
    assert cli("fit", tmp_path / "m.npz", "--json").exit_code == 0
