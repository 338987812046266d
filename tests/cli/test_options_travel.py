"""Options travel with numbers: a baseline, compare and batch --resume refuse reports made with
different number-changing options (exit 2, naming them) unless --allow-option-mismatch; and in
`check`, flags win over spectra.toml, which wins over the defaults."""

from __future__ import annotations

import json

import numpy as np
import pytest

from tests.conftest import powerlaw_matrix


@pytest.fixture
def data(tmp_path):
    np.save(tmp_path / "x.npy", powerlaw_matrix(3000, 40, 1.0, seed=1))
    return tmp_path / "x.npy"


def test_flags_win_over_the_config_which_wins_over_the_defaults(cli, tmp_path, data):
    cfg = tmp_path / "spectra.toml"
    cfg.write_text('[check]\nrequire = ["fit.alpha > 0"]\n[fit]\nmethod = "logspaced"\nprecision = "float32"\n'
                   'window = "3:20"\nuncentered = true\n')
    doc = cli("check", data, "--config", cfg, "--json").json()
    assert doc["options"]["method"] == "logspaced" and doc["options"]["precision"] == "float32"
    assert doc["options"]["window"] == ["3:20"] and doc["options"]["centered"] is False
    doc = cli("check", data, "--config", cfg, "--method", "ols", "--precision", "float64", "--window", "2:10",
              "--json").json()
    assert doc["options"]["method"] == "ols" and doc["options"]["precision"] == "float64"
    assert doc["options"]["window"] == ["2:10"] and doc["options"]["centered"] is False
    doc = cli("check", data, "--require", "fit.alpha > 0", "--json").json()
    assert doc["options"]["method"] == "ols" and doc["options"]["centered"] is True  # the defaults


@pytest.mark.parametrize(
    ("toml", "message"),
    [
        ("uncentered = \"no\"", "[fit] uncentered must be true or false (got str 'no')."),
        ("window = 11", "[fit] window=11 must be a string 'K1:K2' or 'auto' (or a list of them), not int."),
        ("degree = true", "[fit] degree=True must be an integer, not bool."),
        ("ddof = 1.5", "[fit] ddof must be an integer (got float 1.5)."),
    ],
)
def test_config_values_are_type_checked(cli, tmp_path, data, toml, message):
    cfg = tmp_path / "spectra.toml"
    cfg.write_text(f'[check]\nrequire = ["fit.alpha > 0"]\n[fit]\n{toml}\n')
    r = cli("check", data, "--config", cfg)
    assert r.exit_code == 2 and r.stdout == ""
    assert r.stderr == f"error: {cfg}: {message}\n"


def test_a_baseline_made_with_other_options_is_refused(cli, tmp_path, data):
    base = tmp_path / "base.json"
    base.write_text(cli("fit", data, "--method", "logspaced", "--window", "3:20", "--json").stdout)
    r = cli("check", data, "--window", "3:20", "--baseline", base, "--max-change", "fit.alpha=0.5")
    assert r.exit_code == 2 and r.stdout == ""
    assert r.stderr == (f"error: {data} and the baseline {base} were made with different options "
                        "(method 'ols' vs 'logspaced'); their numbers are not comparable. Use the same options, "
                        "or pass --allow-option-mismatch.\n")
    r = cli("check", data, "--window", "3:20", "--baseline", base, "--max-change", "fit.alpha=0.5",
            "--allow-option-mismatch", "--json")
    assert r.exit_code == 0, r.stderr
    assert r.json()["checks"]["option_mismatch"] == ["method 'ols' vs 'logspaced'"]
    assert "--allow-option-mismatch" in r.stderr
    ok = cli("check", data, "--window", "3:20", "--method", "logspaced", "--baseline", base, "--max-change",
             "fit.alpha=0.5")
    assert ok.exit_code == 0, ok.stderr


def test_compare_refuses_reports_with_other_options(cli, tmp_path, data):
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    a.write_text(cli("fit", data, "--json").stdout)
    b.write_text(cli("fit", data, "--uncentered", "--json").stdout)
    r = cli("compare", a, b)
    assert r.exit_code == 2 and "centered True vs False" in r.stderr
    r = cli("compare", a, b, "--allow-option-mismatch", "--json")
    assert r.exit_code == 0 and r.json()["option_mismatch"] == ["centered True vs False"]


def test_resume_with_other_options_is_refused(cli, tmp_path, data):
    out = tmp_path / "r.jsonl"
    assert cli("batch", data, "--jsonl", out).exit_code == 0
    before = out.read_bytes()
    r = cli("batch", data, "--jsonl", out, "--resume", "--method", "inv-rank")
    assert r.exit_code == 2 and "method 'ols' vs 'inv-rank'" in r.stderr
    assert out.read_bytes() == before
    r = cli("batch", data, "--jsonl", out, "--resume")
    assert r.exit_code == 0 and out.read_bytes() == before and "kept 1 item" in r.stderr
    assert [json.loads(x)["item"] for x in out.read_text().splitlines()] == [str(data)]


def test_dask_flags_on_the_command_line(cli, data):
    # The engine itself is tested against a real LocalCluster in tests/stream/test_dask_engine.py.
    r = cli("spectrum", data, "--workers", "2")
    assert r.exit_code == 2 and r.stderr == "error: --scheduler and --workers choose the Dask cluster of " \
        "--engine 'dask'.\n"
