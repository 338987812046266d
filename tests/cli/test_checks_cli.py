"""check: exit codes, specs, baselines, config, JSON valid against the report schema. (command line)."""

from __future__ import annotations

import numpy as np
import pytest

from tests.run.test_checks import NPY


def test_pass_exits_0_and_json_is_a_valid_report(cli, validate):
    r = cli("check", NPY, "--require", "fit.alpha between 0.6 0.7", "--require", "rank.participation_ratio >= 50",
            "--json")
    assert r.exit_code == 0, r.stderr
    doc = r.json()
    validate(doc)
    assert doc["checks"]["passed"] is True and len(doc["checks"]["results"]) == 2
    assert doc["checks"]["results"][0]["value"] == pytest.approx(doc["fit"]["alpha"])


def test_fail_exits_1_with_a_table(cli):
    r = cli("check", NPY, "--require", "fit.alpha > 0.9", "--require", "rank.participation_ratio >= 50")
    assert r.exit_code == 1 and r.stderr == ""
    assert "FAIL" in r.stdout and "pass" in r.stdout


def test_bad_spec_and_unknown_field_exit_2(cli):
    r = cli("check", NPY, "--require", "fit.alpha ~ 3")
    assert r.exit_code == 2 and r.stdout == ""
    assert r.stderr == ("error: --require 'fit.alpha ~ 3' is not FIELD OP NUMBER (OP one of >= <= == != > <), "
                        "FIELD between LO HI, or FIELD == VALUE +- TOL.\n")
    r = cli("check", NPY, "--require", "fit.alpah > 0.5")
    assert r.exit_code == 2 and r.stdout == ""
    assert r.stderr.startswith("error: --require field 'fit.alpah' is not a field of the report; valid fields: "
                               "fit.alpha, fit.bic,")
    assert r.stderr.count("\n") == 1


def test_bad_input_exits_2(cli, tmp_path):
    r = cli("check", tmp_path / "none.npy", "--require", "fit.alpha > 0")
    assert r.exit_code == 2 and r.stderr == f"error: no such file or directory: {tmp_path / 'none.npy'}\n"
    r = cli("check", NPY)
    assert r.exit_code == 2 and r.stderr.startswith("error: check needs at least one --require")


def test_report_input_and_baseline_changes(cli, tmp_path):
    base = cli("fit", NPY, "--json").stdout
    (tmp_path / "base.json").write_text(base)
    np.save(tmp_path / "half.npy", np.load(NPY)[:2048])
    r = cli("check", tmp_path / "half.npy", "--baseline", tmp_path / "base.json", "--max-change", "fit.alpha=0.05",
            "--max-change", "rank.participation_ratio=1%", "--json")
    doc = r.json()
    verdicts = {v["field"]: v for v in doc["checks"]["results"]}
    assert verdicts["fit.alpha"]["baseline"] is not None
    assert verdicts["fit.alpha"]["passed"] == (abs(verdicts["fit.alpha"]["value"] - verdicts["fit.alpha"]["baseline"])
                                               <= 0.05)
    pr = verdicts["rank.participation_ratio"]
    assert pr["passed"] == (abs(pr["value"] - pr["baseline"]) <= 0.01 * pr["baseline"])
    assert "violates |change| <= 1% of |baseline|" in pr["message"] or "satisfies |change| <= 1% of" in pr["message"]
    assert "|change from baseline| <= 0.05 (baseline" in verdicts["fit.alpha"]["message"]  # absolute, said so
    assert r.exit_code == (0 if all(v["passed"] for v in verdicts.values()) else 1)
    # a saved report checked directly, without recomputation
    r = cli("check", tmp_path / "base.json", "--require", "fit.alpha == 0.6547 +- 0.001")
    assert r.exit_code == 0
    r = cli("check", NPY, "--max-change", "fit.alpha=0.1")
    assert r.exit_code == 2 and r.stderr == "error: --max-change needs --baseline REPORT.json.\n"
    # a saved report's warnings were said when it was made: --json does not repeat them on stderr
    X = np.load(NPY).astype(np.float64)
    X[:, :2] = 1.0  # two constant columns: a warning
    np.save(tmp_path / "const.npy", X)
    warned = cli("fit", tmp_path / "const.npy", "--json")
    (tmp_path / "const.json").write_text(warned.stdout)
    assert warned.json()["warnings"] and warned.stderr.startswith("warning: 2 constant column(s)")
    r = cli("check", tmp_path / "const.json", "--require", "fit.alpha > 0", "--json")
    assert r.exit_code == 0 and r.stderr == "" and r.json()["warnings"] == warned.json()["warnings"]
    r = cli("check", tmp_path / "const.npy", "--require", "fit.alpha > 0", "--json")
    assert r.stderr.startswith("warning: 2 constant column(s)")  # computed here: said
    # windows compare as the ranks the fits used: the default is 11..38 at d = 384
    r = cli("check", NPY, "--window", "11:38", "--baseline", tmp_path / "base.json", "--max-change", "fit.alpha=3se")
    assert r.exit_code == 0, r.stderr
    r = cli("check", NPY, "--window", "11:39", "--baseline", tmp_path / "base.json", "--max-change", "fit.alpha=3se")
    assert r.exit_code == 2 and "window ['11:39'] (ranks [[11, 39]]) vs ['default'] (ranks [[11, 38]])" in r.stderr
    # the default at two widths is one option, whatever ranks it resolves to (a collapse changes them)
    np.save(tmp_path / "wide.npy", np.hstack([np.load(NPY), np.load(NPY)[::-1]]).astype(np.float32))
    r = cli("check", tmp_path / "wide.npy", "--baseline", tmp_path / "base.json", "--max-change",
            "rank.participation_ratio=1000%")
    assert r.exit_code == 0, r.stderr
    r = cli("check", NPY, "--only", "x", "--require", "fit.alpha > 0")
    assert r.exit_code == 2 and r.stderr.startswith("error: --only chooses items of a batch's results (.jsonl); ")
    # a saved report is checked as it was made: a fit option given with it is refused, a config's [fit] noted
    r = cli("check", tmp_path / "base.json", "--window", "11:200", "--require", "fit.alpha > 0")
    assert r.exit_code == 2 and r.stderr.startswith("error: --window makes a report from an input; ")
    (tmp_path / "s.toml").write_text('[fit]\nwindow = "11:200"\n[check]\nrequire = ["fit.alpha > 0"]\n')
    r = cli("check", tmp_path / "base.json", "--config", tmp_path / "s.toml")
    assert r.exit_code == 0 and "note: the config's [fit] table (window) does not apply to " in r.stderr


def test_config_file(cli, tmp_path):
    (tmp_path / "spectra.toml").write_text(
        '[check]\nrequire = ["fit.alpha between 0.5 0.8", "isotropy.mean_cosine < 0.5"]\n'
        '[fit]\nwindow = "11:30"\n')
    r = cli("check", NPY, "--config", tmp_path / "spectra.toml", "--json")
    assert r.exit_code == 0, r.stderr
    doc = r.json()
    assert doc["fit"]["window"] == [11, 30] and len(doc["checks"]["results"]) == 2
    (tmp_path / "bad.toml").write_text("[check]\nrequires = []\n")
    r = cli("check", NPY, "--config", tmp_path / "bad.toml")
    assert r.exit_code == 2 and r.stderr == (
        f"error: {tmp_path / 'bad.toml'}: unknown key(s) in [check]: requires (allowed: require, baseline, "
        "max_change).\n")
    (tmp_path / "broken.toml").write_text("[check\n")
    r = cli("check", NPY, "--config", tmp_path / "broken.toml")
    assert r.exit_code == 2 and r.stderr.startswith(f"error: {tmp_path / 'broken.toml'} is not valid TOML")


@pytest.mark.parametrize("spec, verdict", [("fit.alpha > 0", True), ("fit.alpha > 50", False)])
def test_the_verdict_is_at_the_top_for_every_input_kind(cli, tmp_path, spec, verdict):
    """``spectra check ... --json | jq -e .passed`` works for a data file, a report and a results file."""
    report = tmp_path / "r.json"
    report.write_text(cli("fit", NPY, "--json").stdout)
    results = tmp_path / "r.jsonl"
    assert cli("batch", NPY, "--jsonl", results).exit_code == 0
    for data in (NPY, report, results):
        r = cli("check", data, "--require", spec, "--json")
        assert r.exit_code == (0 if verdict else 1), (data, r.stderr)
        assert r.json()["passed"] is verdict, data
