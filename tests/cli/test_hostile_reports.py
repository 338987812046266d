"""Reports and results files written elsewhere: a schema spectra does not read, JSON that is not
strict, and results that a careless re-run would replace."""

from __future__ import annotations

import json

import numpy as np
import pytest

from tests.cli.test_hostile import refused
from tests.conftest import powerlaw_matrix

X = powerlaw_matrix(400, 12, 1.0, seed=4)


@pytest.fixture
def report(cli, tmp_path):
    np.save(tmp_path / "x.npy", X)
    doc = cli("fit", tmp_path / "x.npy", "--window", "2:8", "--json").json()
    (tmp_path / "good.json").write_text(json.dumps(doc))
    return doc


@pytest.mark.parametrize("schema", ["spectra.report/999", "spectra.report/0", "spectra.report/2"])
@pytest.mark.parametrize("command", ["check", "compare", "baseline", "trend"])
def test_a_schema_this_spectra_does_not_read_is_refused_naming_both(cli, tmp_path, report, schema, command):
    bad = dict(report, schema=schema)
    (tmp_path / "r.json").write_text(json.dumps(bad))
    (tmp_path / "r.jsonl").write_text(json.dumps(bad) + "\n")
    msg = f"has schema '{schema}'; this spectra reads spectra.report/1."
    if command == "check":
        refused(cli, tmp_path, "check", tmp_path / "r.json", "--require", "fit.alpha > 0", match=msg)
        refused(cli, tmp_path, "check", tmp_path / "r.jsonl", "--require", "fit.alpha > 0", match=msg)
    elif command == "compare":
        refused(cli, tmp_path, "compare", tmp_path / "good.json", tmp_path / "r.json", match=msg)
    elif command == "baseline":
        refused(cli, tmp_path, "check", tmp_path / "good.json", "--require", "fit.alpha > 0", "--baseline",
                tmp_path / "r.json", match=msg)
    else:
        refused(cli, tmp_path, "trend", tmp_path / "r.jsonl", "--metric", "fit.alpha", match=f"line 1 {msg}")


@pytest.mark.parametrize(("text", "what"), [("NaN", "NaN"), ("Infinity", "Infinity"), ("-Infinity", "-Infinity"),
                                            ("1e999", "the number 1e999, beyond float64's range")])
def test_a_report_that_is_not_strict_json_is_bad_input_not_a_failed_check(cli, tmp_path, report, text, what):
    raw = json.dumps(report).replace(json.dumps(report["fit"]["alpha"]), text, 1)
    (tmp_path / "r.json").write_text(raw)
    line = refused(cli, tmp_path, "check", tmp_path / "r.json", "--require", "fit.alpha > 0")
    assert line == f"error: {tmp_path}/r.json is not strict JSON: it holds {what}" + (
        ", which strict JSON does not have." if what == text else ".")
    refused(cli, tmp_path, "compare", tmp_path / "r.json", tmp_path / "good.json", match="is not strict JSON")


def test_results_are_never_replaced_by_a_rerun_without_resume_or_overwrite(cli, tmp_path):
    for i in range(3):
        np.save(tmp_path / f"s{i}.npy", powerlaw_matrix(200, 8, 1.0, seed=i))
    shards = [tmp_path / f"s{i}.npy" for i in range(3)]
    assert cli("batch", *shards[:2], "--jsonl", tmp_path / "r.jsonl").exit_code == 0
    before = (tmp_path / "r.jsonl").read_bytes()
    refused(cli, tmp_path, "batch", *shards, "--jsonl", tmp_path / "r.jsonl",
            match=f"--jsonl '{tmp_path}/r.jsonl' already holds the results of a batch; --resume keeps them (and "
                  "retries failed items), --overwrite replaces them.")
    refused(cli, tmp_path, "batch", *shards, "--jsonl", tmp_path / "r.jsonl", "--resume", "--overwrite",
            match="--resume keeps the results already in --jsonl and --overwrite replaces them: give one.")
    assert (tmp_path / "r.jsonl").read_bytes() == before
    # a failed line is retried on resume; the note says what was kept, retried and added
    lines = before.decode().splitlines()
    failed = json.loads(lines[1])
    lines[1] = json.dumps({"schema": "spectra.batch-error/1", "item": failed["item"],
                           "fingerprint": failed["source"]["fingerprint"], "error": "x"})
    (tmp_path / "r.jsonl").write_text("\n".join(lines) + "\n")
    r = cli("batch", *shards, "--jsonl", tmp_path / "r.jsonl", "--resume")
    assert r.exit_code == 0
    assert f"note: --resume kept 1 item(s) already in {tmp_path}/r.jsonl, retried 1 that had failed, added 2" in \
        r.stderr
    assert len((tmp_path / "r.jsonl").read_text().splitlines()) == 3
    r = cli("batch", shards[0], "--jsonl", tmp_path / "r.jsonl", "--overwrite")
    assert r.exit_code == 0 and len((tmp_path / "r.jsonl").read_text().splitlines()) == 1


def test_a_report_without_its_sections_or_with_a_lone_surrogate_is_refused(cli, tmp_path, report):
    bare = {k: v for k, v in report.items() if k != "options"}
    (tmp_path / "b.json").write_text(json.dumps(bare))
    msg = "is a spectra.report/1 report without its options section"
    refused(cli, tmp_path, "check", tmp_path / "x.npy", "--require", "fit.alpha > 0", "--baseline", tmp_path / "b.json",
            "--max-change", "fit.alpha=0.5", match=msg)
    refused(cli, tmp_path, "compare", tmp_path / "b.json", tmp_path / "good.json", match=msg)
    (tmp_path / "s.json").write_text(json.dumps(report).replace('"fit"', '"\\ud800fit"', 1))
    refused(cli, tmp_path, "compare", tmp_path / "s.json", tmp_path / "good.json",
            match="is not strict JSON: it holds a lone surrogate escape")
    (tmp_path / "e.json").write_text(json.dumps(dict(report, schema="spectra.report/999")))
    refused(cli, tmp_path, "fit", tmp_path / "e.json", "--eigenvalues", match="has schema 'spectra.report/999'")


def test_resume_drops_lines_other_readers_refuse_and_says_so(cli, tmp_path):
    for i in range(2):
        np.save(tmp_path / f"s{i}.npy", powerlaw_matrix(200, 8, 1.0, seed=i))
    shards = [tmp_path / f"s{i}.npy" for i in range(2)]
    assert cli("batch", *shards, "--jsonl", tmp_path / "r.jsonl").exit_code == 0
    lines = (tmp_path / "r.jsonl").read_text().splitlines()
    lines[1] = lines[1].replace('"schema": "spectra.report/1"', '"schema": "spectra.report/999"', 1)
    (tmp_path / "r.jsonl").write_text("\n".join(lines) + "\n")
    r = cli("batch", *shards, "--jsonl", tmp_path / "r.jsonl", "--resume")
    assert r.exit_code == 0 and "note: dropped " in r.stderr and "spectra.report/999" in r.stderr
    assert cli("trend", tmp_path / "r.jsonl", "--metric", "fit.alpha").exit_code == 0  # every line readable now


@pytest.mark.parametrize("ci", [{"low": None, "high": None, "level": 0.95}, {"low": 0.9, "level": 0.95}])
def test_a_fit_interval_without_both_ends_is_refused_by_every_reader(cli, tmp_path, report, ci):
    # the report check passed it, and the page's fits table then crashed on None (exit 3, a traceback)
    bad = json.loads(json.dumps(report))
    bad["fits"][0]["ci"] = ci
    (tmp_path / "r.json").write_text(json.dumps(bad))
    refused(cli, tmp_path, "report", tmp_path / "r.json", "-o", tmp_path / "p.html", match="fits.0.ci.")
    assert not (tmp_path / "p.html").exists()


@pytest.mark.parametrize(("step", "said"), [("7", "source.capture.step must be a whole number"),
                                            (True, "source.capture.step must be a whole number"),
                                            (-1, "source.capture.step must lie in 0..1e+15"),
                                            (10**400, "holds an integer of 401 digits"),
                                            (1.5, "source.capture.step must be a whole number")])
def test_a_capture_step_of_another_type_is_refused_not_read_as_no_step(cli, tmp_path, report, step, said):
    bad = json.loads(json.dumps(report))
    bad["source"]["capture"] = {"module": "encoder.layer.0", "step": step, "model": "BertModel"}
    (tmp_path / "r.jsonl").write_text(json.dumps(bad) + "\n")
    refused(cli, tmp_path, "report", tmp_path / "r.jsonl", "-o", tmp_path / "p.html", match=said)
    line = refused(cli, tmp_path, "trend", tmp_path / "r.jsonl", "--metric", "fit.alpha")
    assert "step" in line or "digits" in line, line


def test_a_step_number_too_long_to_be_a_step_is_said_not_nulled(cli, tmp_path, report):
    # item names whose numbers have 400 digits gave "step": null in trend --json, without a word
    lines = [json.dumps(dict(report, item=f"runs/ck_{'9' * 400}{i}.npy")) for i in range(2)]
    (tmp_path / "r.jsonl").write_text("\n".join(lines) + "\n")
    line = refused(cli, tmp_path, "trend", tmp_path / "r.jsonl", "--metric", "fit.alpha", "--json")
    assert "is no training step (a step is a number from 0 to 1,000,000,000,000,000)" in line
    line = refused(cli, tmp_path, "trend", tmp_path / "r.jsonl", "--metric", "fit.alpha", "--step-regex", "_(9+)")
    assert "is no training step" in line
    ok = [json.dumps(dict(report, item=f"runs/ck_{'9' * 400}_step_{i}.npy")) for i in range(2)]
    (tmp_path / "ok.jsonl").write_text("\n".join(ok) + "\n")
    r = cli("trend", tmp_path / "ok.jsonl", "--metric", "fit.alpha", "--step-regex", r"step_(\d+)", "--json")
    assert r.exit_code == 0, r.stderr
    assert [p["step"] for p in r.json()["series"][0]["points"]] == [0, 1]


def test_a_name_with_a_run_of_5000_digits_sorts_and_draws(cli, tmp_path, report):
    # int() of the run in the natural sort passed Python's 4,300-digit limit: exit 3 from batch and report
    from spectra_cli.documents import natural_key

    names = ["layer.10", "layer.2", "w" + "1" * 5000, "w2"]
    assert [n[:8] for n in sorted(names, key=natural_key)] == ["layer.2", "layer.10", "w2", "w" + "1" * 7]
    lines = [json.dumps(dict(report, item=f"ck.safetensors::w{'7' * 5000}")), json.dumps(dict(report, item="b"))]
    (tmp_path / "r.jsonl").write_text("\n".join(lines) + "\n")
    r = cli("report", tmp_path / "r.jsonl", "-o", tmp_path / "p.html")
    assert r.exit_code == 0, r.stderr
