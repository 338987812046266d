"""The fitting toolkit: SPEC known answers, synthetic recovery, models, CI, density, controls. (command line)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from tests.analysis.test_fitting import LOG_CORRECTED, J, _synth


@pytest.mark.parametrize("fmt", ["npy", "json", "csv"])
def test_spec_known_answers_through_eigenvalue_input(cli, tmp_path, fmt, validate):
    path = tmp_path / f"eigs.{fmt}"
    rng = np.random.default_rng(0)
    shuffled = LOG_CORRECTED[rng.permutation(J.size)]  # any order: spectra sorts them
    if fmt == "npy":
        np.save(path, shuffled)
    elif fmt == "json":
        path.write_text(json.dumps(shuffled.tolist()))
    else:
        path.write_text("eigenvalue\n" + "\n".join(repr(float(v)) for v in shuffled) + "\n")
    doc = cli("fit", path, "--eigenvalues", "--window", "10:3000", "--json").json()
    validate(doc)
    assert doc["fit"]["alpha"] == pytest.approx(1.093, abs=0.002)
    assert doc["source"]["format"] == "eigenvalues" and doc["spectrum"]["n_samples"] is None
    doc = cli("fit", path, "--eigenvalues", "--window", "10:3000", "--model", "log-corrected", "--degree", "2",
              "--json").json()
    validate(doc)
    assert doc["fit"]["model"] == "log-corrected" and doc["fit"]["degree"] == 2
    assert doc["fit"]["alpha"] == pytest.approx(1.310, abs=0.002)
    assert doc["models"]["best"] == "log-corrected"


def test_ci_is_reproducible_and_reported(cli, tmp_path, validate):
    np.save(tmp_path / "x.npy", _synth(n=4000, d=64, seed=3, alpha=1.2))
    a = cli("fit", tmp_path / "x.npy", "--window", "3:20", "--ci", "--ci-replicates", "50", "--json").json()
    b = cli("fit", tmp_path / "x.npy", "--window", "3:20", "--ci", "--ci-replicates", "50", "--json").json()
    validate(a)
    assert a["fit"]["ci"] == b["fit"]["ci"]
    ci = a["fit"]["ci"]
    assert ci["low"] < a["fit"]["alpha"] < ci["high"]
    assert ci["low"] == pytest.approx(2 * a["fit"]["alpha"] - ci["percentile_high"])
    assert "bootstrap_s" in a["timings"] and a["options"]["ci"] == {"replicates": 50, "seed": 0, "level": 0.95}


def test_several_windows_give_one_fit_each(cli, validate):
    from tests.conftest import SAMPLE

    doc = cli("fit", SAMPLE / "minilm_layer5_tokens_4k_f16.npy", "--window", "11:100", "--window", "11:200",
              "--window", "auto", "--json").json()
    validate(doc)
    assert [f["window"] for f in doc["fits"]][:2] == [[11, 100], [11, 200]]
    assert doc["fits"][2]["window_source"] == "auto" and doc["fit"] == doc["fits"][0]


def test_ci_and_control_refuse_eigenvalue_input(cli, tmp_path):
    np.save(tmp_path / "e.npy", LOG_CORRECTED[:100])
    r = cli("fit", tmp_path / "e.npy", "--eigenvalues", "--ci")
    assert r.exit_code == 2
    assert r.stderr == ("error: --ci, --shuffled-control and --partition-isotropy need the data matrix, "
                        "not --eigenvalues.\n")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--method", "lsq"], "error: --method 'lsq' is not one of 'ols', 'logspaced', 'inv-rank'.\n"),
        (["--model", "exp"], "error: --model 'exp' is not one of 'power-law', 'log-corrected', 'broken'.\n"),
        (["--degree", "0", "--model", "log-corrected"],
         "error: --degree 0 must be at least 1 (1 is the plain power law).\n"),
        (["--ci", "--ci-replicates", "3"], "error: --ci-replicates 3 must be at least 10.\n"),
    ],
)
def test_bad_fit_options(cli, tmp_path, args, message):
    np.save(tmp_path / "x.npy", _synth(n=500, d=20, seed=0))
    r = cli("fit", tmp_path / "x.npy", *args)
    assert r.exit_code == 2 and r.stdout == "" and r.stderr == message


@pytest.mark.parametrize(
    ("content", "name", "message"),
    [
        ("[1, 2, \"x\"]", "e.json",
         "error: {p} must hold a JSON list of numbers (or an object with an 'eigenvalues' list).\n"),
        ("1\n2\nabc\n", "e.csv", "error: {p} line 3: 'abc' is not a number.\n"),
        ("[1, 2]", "e.json", "error: {p} holds 2 eigenvalue(s); at least 3 are required.\n"),
        ("1\n2\n3\n", "e.dat", "error: unknown extension .dat for --eigenvalues {p}; use .npy, .json, .csv or .txt.\n"),
    ],
)
def test_bad_eigenvalue_files(cli, tmp_path, content, name, message):
    p = tmp_path / name
    p.write_text(content)
    r = cli("fit", p, "--eigenvalues")
    assert r.exit_code == 2 and r.stdout == "" and r.stderr == message.format(p=p)


def test_eigenvalue_input_with_nonfinite_values(cli, tmp_path):
    np.save(tmp_path / "e.npy", np.array([3.0, np.nan, 1.0, 0.5]))
    r = cli("fit", tmp_path / "e.npy", "--eigenvalues")
    assert r.exit_code == 2
    assert r.stderr == f"error: {tmp_path / 'e.npy'} has 1 non-finite eigenvalue(s) (first at index 1).\n"


@pytest.mark.parametrize("values, largest", [(np.zeros(50), "0"), (-np.linspace(1, 2, 50), "-1")])
def test_eigenvalues_with_none_positive_are_refused_and_draw_nothing(cli, tmp_path, values, largest):
    # all zero or all negative: exit 0 with a figure, before
    np.save(tmp_path / "e.npy", values)
    r = cli("fit", tmp_path / "e.npy", "--eigenvalues", "--density", "--plot", tmp_path / "f.png")
    assert r.exit_code == 2 and r.stdout == "" and not (tmp_path / "f.png").exists()
    assert r.stderr == (f"error: {tmp_path / 'e.npy'} holds no positive eigenvalue (50 values, the largest {largest}): "
                        "a spectrum of a covariance or second-moment matrix has at least one.\n")


def test_counting_and_capacity(cli, tmp_path, validate):
    lam = np.array([4.0, 2.0, 1.0, 0.5])
    np.save(tmp_path / "e.npy", lam)
    doc = cli("fit", tmp_path / "e.npy", "--eigenvalues", "--window", "1:4", "--counting", "1", "--counting", "3",
              "--capacity", "1", "--json").json()
    validate(doc)
    assert [c["N"] for c in doc["capacity"]["counting"]] == [3, 1]
    assert doc["capacity"]["capacity"][0]["N"] == pytest.approx(4 / 5 + 2 / 3 + 1 / 2 + 0.5 / 1.5)
    r = cli("fit", tmp_path / "e.npy", "--eigenvalues", "--capacity", "0")
    assert r.exit_code == 2 and r.stderr == "error: --capacity 0.0 must be a positive ridge scale tau.\n"
