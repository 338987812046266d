"""batch over files and safetensors checkpoints; compare; trend. (command line)."""

from __future__ import annotations

import json
import os
import time

import numpy as np
import pytest

from tests.conftest import powerlaw_matrix

safetensors_numpy = pytest.importorskip("safetensors.numpy")


def test_checkpoint_tensors_are_items_with_the_right_values(cli, checkpoint, validate):
    path, w32, w16 = checkpoint
    r = cli("batch", path, "--json")
    assert r.exit_code == 0, r.stderr
    everything = [json.loads(x) for x in r.stdout.splitlines()]
    skipped = [d for d in everything if "skipped" in d]
    lines = [d for d in everything if "skipped" not in d]
    assert [d["item"] for d in lines] == [f"{path}::enc.layer0.attn.weight", f"{path}::enc.layer0.mlp.weight"]
    assert skipped == [{"schema": "spectra.batch-skipped/1", "spectra_version": skipped[0]["spectra_version"],
                        "item": f"{path}::enc.layer0.attn.bias", "fingerprint": skipped[0]["fingerprint"],
                        "skipped": "a vector of 96 (biases, norms)", "kind": "vector"}]
    assert "note: skipped 1 vector (not weight matrices; --verbose lists them)" in r.stderr
    for d, w in zip(lines, (w32, w16), strict=True):
        validate(d)
        assert d["source"]["shape"] == list(w.shape) and d["source"]["format"] == "safetensors"
        ref = np.linalg.eigvalsh(np.cov(w.astype(np.float64), rowvar=False))[::-1]
        np.testing.assert_allclose(d["spectrum"]["eigenvalues"], ref, rtol=1e-9)
    assert lines[1]["source"]["dtype"] == "float16"


def test_sharded_checkpoint_through_its_index(cli, tmp_path):
    rng = np.random.default_rng(2)
    a, b = rng.standard_normal((30, 8)).astype(np.float32), rng.standard_normal((20, 8)).astype(np.float32)
    d = tmp_path / "ckpt"
    d.mkdir()
    safetensors_numpy.save_file({"a.weight": a}, d / "model-00001-of-00002.safetensors")
    safetensors_numpy.save_file({"b.weight": b}, d / "model-00002-of-00002.safetensors")
    (d / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": {
        "a.weight": "model-00001-of-00002.safetensors", "b.weight": "model-00002-of-00002.safetensors"}}))
    r = cli("batch", d, "--json")
    assert r.exit_code == 0, r.stderr
    docs = [json.loads(x) for x in r.stdout.splitlines()]
    assert [doc["source"]["shape"] for doc in docs] == [[30, 8], [20, 8]]
    (d / "model.safetensors.index.json").write_text(json.dumps({"weight_map": {"c": "missing.safetensors"}}))
    r = cli("batch", d)
    assert r.exit_code == 2 and "names shard" in r.stderr and "missing.safetensors, which does not exist" in r.stderr


def test_tensor_filter_and_uncentered(cli, checkpoint):
    path, w32, _ = checkpoint
    r = cli("batch", path, "--tensors", "attn", "--uncentered", "--json")
    docs = [json.loads(x) for x in r.stdout.splitlines() if "skipped" not in json.loads(x)]
    assert len(docs) == 1 and docs[0]["options"]["centered"] is False
    ref = np.linalg.eigvalsh(w32.T.astype(np.float64) @ w32 / 96)[::-1]
    np.testing.assert_allclose(docs[0]["spectrum"]["eigenvalues"], ref, rtol=1e-9)
    r = cli("batch", path, "--tensors", "(")
    assert r.exit_code == 2 and r.stderr == "error: --tensors '(' is not a valid regular expression: missing ): (.\n"


def test_bad_item_is_recorded_and_does_not_stop_the_batch(cli, tmp_path):
    np.save(tmp_path / "good_1.npy", powerlaw_matrix(300, 10, 1.0))
    np.save(tmp_path / "bad_2.npy", np.zeros((1, 10)))
    np.save(tmp_path / "good_3.npy", powerlaw_matrix(300, 10, 1.2))
    out = tmp_path / "r.jsonl"
    r = cli("batch", tmp_path / "good_1.npy", tmp_path / "bad_2.npy", tmp_path / "good_3.npy", "--jsonl", out)
    assert r.exit_code == 1
    lines = [json.loads(x) for x in out.read_text().splitlines()]
    assert len(lines) == 3
    bad = [x for x in lines if "error" in x]
    assert len(bad) == 1 and bad[0]["schema"] == "spectra.batch-error/1"
    assert bad[0]["error"].endswith("has 1 usable row (shape (1, 10)); at least 2 are required.")
    assert f"error: {tmp_path / 'bad_2.npy'}: " in r.stderr


def test_a_moment_file_in_a_batch_is_one_matrix_not_an_archive(cli, tmp_path):
    X = powerlaw_matrix(300, 10, 1.0)
    np.save(tmp_path / "x.npy", X)
    assert cli("moments", tmp_path / "x.npy", "-o", tmp_path / "m.npz").exit_code == 0
    r = cli("batch", tmp_path, "--json")
    assert r.exit_code == 0, r.stderr
    lines = {x["source"]["path"]: x for x in map(json.loads, r.stdout.splitlines())}
    assert sorted(lines) == [str(tmp_path / "m.npz"), str(tmp_path / "x.npy")]
    moments, matrix = lines[str(tmp_path / "m.npz")], lines[str(tmp_path / "x.npy")]
    assert moments["source"]["format"] == "moments"
    assert moments["fit"]["alpha"] == pytest.approx(matrix["fit"]["alpha"], rel=1e-12)


def test_resume_reruns_nothing_when_nothing_changed(cli, tmp_path):
    for i in range(3):
        np.save(tmp_path / f"m_{i}.npy", powerlaw_matrix(200, 8, 1.0, seed=i))
    out = tmp_path / "r.jsonl"
    assert cli("batch", tmp_path, "--jsonl", out).exit_code == 0
    first = out.read_text()
    r = cli("batch", tmp_path, "--jsonl", out, "--resume")
    assert r.exit_code == 0 and "--resume kept 3 item(s)" in r.stderr
    assert out.read_text() == first
    r = cli("batch", tmp_path, "--jsonl", out, "--resume", "--workers", "2")  # nothing left: no pool of 0 workers
    assert r.exit_code == 0 and "--resume kept 3 item(s)" in r.stderr and out.read_text() == first
    # change one file: only that one runs again
    time.sleep(0.01)
    np.save(tmp_path / "m_1.npy", powerlaw_matrix(200, 8, 2.0, seed=1))
    r = cli("batch", tmp_path, "--jsonl", out, "--resume")
    assert "--resume kept 2 item(s)" in r.stderr
    assert len(out.read_text().splitlines()) == 4


def test_compare_two_reports(cli, tmp_path):
    np.save(tmp_path / "a.npy", powerlaw_matrix(2000, 30, 1.0))
    np.save(tmp_path / "b.npy", powerlaw_matrix(2000, 30, 1.5))
    ra = cli("fit", tmp_path / "a.npy", "--window", "2:20", "--json")
    (tmp_path / "a.json").write_text(ra.stdout)
    r = cli("compare", tmp_path / "a.json", tmp_path / "b.npy", "--window", "2:20", "--json")
    assert r.exit_code == 0, r.stderr
    doc = r.json()
    assert doc["schema"] == "spectra.compare/1"
    row = next(m for m in doc["metrics"] if m["field"] == "fit.alpha")
    assert row["diff"] == pytest.approx(row["b"] - row["a"]) and row["b"] > row["a"] + 0.3
    assert row["rel_diff"] == pytest.approx((row["b"] - row["a"]) / row["a"])
    r = cli("compare", tmp_path / "a.json", tmp_path / "b.npy", "--window", "2:20")
    assert "fit.alpha" in r.stdout and "rank.participation_ratio" in r.stdout
    (tmp_path / "x.json").write_text("{}")
    r = cli("compare", tmp_path / "x.json", tmp_path / "a.json")
    assert r.exit_code == 2 and r.stderr == (
        f"error: {tmp_path / 'x.json'} is not a spectra report (it has no 'schema'; this spectra reads "
        "spectra.report/1).\n")


def test_trend_over_steps(cli, tmp_path):
    for step in (500, 100, 1000):
        np.save(tmp_path / f"step_{step}.npy", powerlaw_matrix(1000, 20, 0.5 + step / 1000, seed=step))
    out = tmp_path / "r.jsonl"
    cli("batch", tmp_path, "--jsonl", out, "--window", "2:15")
    r = cli("trend", out, "--metric", "fit.alpha", "--json")
    assert r.exit_code == 0, r.stderr
    doc = r.json()
    pts = doc["series"][0]["points"]
    assert [p["step"] for p in pts] == [100, 500, 1000]
    alphas = [p["fit.alpha"] for p in pts]
    assert alphas == sorted(alphas) and alphas[0] == pytest.approx(0.6, abs=0.1)
    r = cli("trend", out, "--metric", "fit.alpha", "--step-regex", r"step_(\d+)\.npy")
    assert r.exit_code == 0 and "1000" in r.stdout
    assert " ± " in r.stdout and "the standard error of each report" in r.stdout  # each value with its SE
    pytest.importorskip("matplotlib")
    r = cli("trend", out, "--metric", "fit.alpha", "--metric", "rank.participation_ratio", "--plot",
            tmp_path / "t.png")
    assert r.exit_code == 0 and (tmp_path / "t.png").read_bytes()[:4] == b"\x89PNG"
    r = cli("trend", out)  # the headline metrics the reports hold, each in its own format
    assert r.exit_code == 0, r.stderr
    assert "top-PC share" in r.stdout and "participation" in r.stdout
    assert f"{alphas[0]:.4f} ± " in r.stdout and f"{alphas[0]:.6g}" not in r.stdout
    with open(out) as f:  # one pretty report is not a results file; a file of only failures holds none
        one = json.loads(f.readline())
    (tmp_path / "one.json").write_text(json.dumps(one, indent=1))
    r = cli("trend", tmp_path / "one.json")
    assert r.exit_code == 2 and r.stderr.startswith(f"error: {tmp_path / 'one.json'} is a single report; ")
    (tmp_path / "failed.jsonl").write_text(json.dumps({"schema": "spectra.batch-error/1", "item": "x_1.npy",
                                                       "fingerprint": "0" * 16, "error": "boom"}) + "\n")
    r = cli("trend", tmp_path / "failed.jsonl")
    assert r.exit_code == 2 and "no successful report" in r.stderr
    doc = cli("trend", out, "--json").json()
    assert doc["metrics"] == ["fit.alpha", "rank.participation_ratio", "rank.entropy_rank", "isotropy.top_pc_share"]
    r = cli("trend", out, "--metric", "fit.window")
    assert r.exit_code == 2 and r.stderr.startswith("error: --metric 'fit.window' is not a number")


def test_batch_errors(cli, tmp_path):
    r = cli("batch", tmp_path / "nothing*.npy")
    assert r.exit_code == 2 and r.stderr == f"error: no files match {tmp_path / 'nothing*.npy'}.\n"
    r = cli("batch", tmp_path, "--resume")
    assert r.exit_code == 2 and r.stderr == "error: --resume needs --jsonl FILE (the results to resume from).\n"
    os.makedirs(tmp_path / "empty")
    r = cli("batch", tmp_path / "empty")
    assert r.stderr == (f"error: directory {tmp_path / 'empty'} holds no .npy, .npz, .parquet or .safetensors "
                        "files, in it or in its sub-folders: it is empty.\n")


def test_fingerprints_name_the_tensor_and_match_between_batch_and_fit(cli, checkpoint):
    path, _, _ = checkpoint
    lines = [json.loads(x) for x in cli("batch", path, "--json").stdout.splitlines()]
    fps = [d["source"]["fingerprint"] for d in lines if "skipped" not in d]
    assert len(set(fps)) == 2  # one per tensor, not one per file
    direct = cli("fit", f"{path}::enc.layer0.attn.weight", "--json").json()
    assert direct["source"]["fingerprint"] == fps[0]


def test_batch_takes_top(cli, tmp_path):
    np.save(tmp_path / "m.npy", powerlaw_matrix(600, 400, 1.0, seed=1))
    top = [json.loads(x) for x in cli("batch", tmp_path, "--window", "11:40", "--top", "45", "--json").stdout
           .splitlines()]
    full = [json.loads(x) for x in cli("batch", tmp_path, "--window", "11:40", "--json").stdout.splitlines()]
    assert len(top) == len(full) == 1
    assert top[0]["spectrum"]["top_k"]["k"] == 45 and full[0]["spectrum"].get("top_k") is None
    assert top[0]["fits"][0]["alpha"] == pytest.approx(full[0]["fits"][0]["alpha"], rel=1e-10)
    r = cli("batch", tmp_path, "--top", "-3", "--jsonl", tmp_path / "out.jsonl")
    assert r.exit_code == 2 and r.stderr.startswith("error: --top -3 must be 0 (every eigenvalue) or a positive")
    assert not (tmp_path / "out.jsonl").exists()


def test_trend_takes_the_paths_report_takes(cli, tmp_path):
    """Several results files are the steps of a run, as for spectra report (the step from each path)."""
    for step in (100, 20):
        (tmp_path / f"step_{step}").mkdir()
        np.save(tmp_path / f"step_{step}" / "acts.npy", powerlaw_matrix(1000, 20, 0.5 + step / 100, seed=step))
        assert cli("batch", tmp_path / f"step_{step}" / "acts.npy", "--window", "2:15", "--jsonl",
                   tmp_path / f"step_{step}" / "results.jsonl").exit_code == 0
    files = [tmp_path / "step_100" / "results.jsonl", tmp_path / "step_20" / "results.jsonl"]
    r = cli("trend", *files, "--metric", "fit.alpha", "--json")
    assert r.exit_code == 0, r.stderr
    (series,) = r.json()["series"]
    assert series["series"] == "acts.npy" and [p["step"] for p in series["points"]] == [20, 100]
    r = cli("trend", files[0], files[0], "--metric", "fit.alpha")
    assert r.exit_code == 2 and "is given twice" in r.stderr
    np.save(tmp_path / "acts.npy", powerlaw_matrix(500, 20, 1.0, seed=1))
    assert cli("batch", tmp_path / "acts.npy", "--jsonl", tmp_path / "r.jsonl").exit_code == 0
    r = cli("trend", tmp_path / "r.jsonl", "--metric", "fit.alpha")  # one item without a number in its name
    assert r.exit_code == 2 and "--step-regex" in r.stderr and "step_regex" not in r.stderr, r.stderr


@pytest.mark.parametrize("width", [60, 80, 120])
@pytest.mark.parametrize("convention", ["spectra", "weightwatcher"])
def test_the_batch_table_never_cuts_a_number_at_any_width(tmp_path, width, convention):
    """What does not fit the terminal moves to a further table (the items repeated); names fold."""
    import io

    from rich.console import Console

    from spectra_cli.render.screens import print_batch

    for i in range(3):
        np.save(tmp_path / f"encoder.layer.{i}.attention.output.dense_weight_of_a_long_name.npy",
                powerlaw_matrix(300, 40, 0.6 + 0.2 * i, seed=i))
    import spectra_cli as spectra

    res = spectra.batch(str(tmp_path), convention=convention)
    out = io.StringIO()
    print_batch(list(res.results), skipped=0, jsonl=None, console=Console(file=out, width=width), convention=convention)
    text = out.getvalue()
    assert "…" not in text and max(len(line) for line in text.splitlines()) <= width
    for doc in res.results:
        for value in ((doc["weightwatcher"]["columns"]["alpha"], doc["weightwatcher"]["columns"]["log_norm"])
                      if convention == "weightwatcher" else (doc["fit"]["alpha"], doc["rank"]["participation_ratio"])):
            assert f"{value:.3f}"[:4] in text or f"{value:.1f}" in text


def test_trend_reads_each_files_step_from_the_part_that_names_it(cli, tmp_path):
    for step in (300, 100):  # given out of order; the file name carries another number
        (tmp_path / f"step_{step}").mkdir()
        np.save(tmp_path / f"step_{step}" / "acts.npy", powerlaw_matrix(800, 20, 0.5 + step / 300, seed=step))
        assert cli("batch", tmp_path / f"step_{step}" / "acts.npy", "--window", "2:15", "--jsonl",
                   tmp_path / f"step_{step}" / "results_fp16.jsonl").exit_code == 0
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    files = [tmp_path / "step_300" / "results_fp16.jsonl", empty, tmp_path / "step_100" / "results_fp16.jsonl"]
    r = cli("trend", *files, "--metric", "fit.alpha", "--json")
    assert r.exit_code == 0, r.stderr
    assert [p["step"] for p in r.json()["series"][0]["points"]] == [100, 300]
    assert "left out" in r.stderr and "empty.jsonl" in r.stderr
    r = cli("trend", *files[::2], "--metric", "fit.alpha", "--step-regex", r"step_(\d+)/", "--json")
    assert [p["step"] for p in r.json()["series"][0]["points"]] == [100, 300]
    r = cli("trend", *files[::2], "--metric", "fit.alpha", "--step-regex", r"epoch_(\d+)")
    assert r.exit_code == 2 and "--step-regex found no step in the path" in r.stderr


def test_an_interrupted_batch_says_its_results_file_keeps_whole_lines_for_resume(tmp_path):
    from spectra_cli import sinks
    from spectra_cli.run.results_file import ResultsFile

    assert sinks.interrupted_note() == "no output file was left half-written"
    out = tmp_path / "r.jsonl"
    with ResultsFile(str(out), resume=False, inputs=[]):
        assert str(out) in sinks.interrupted_note() and "--resume goes on from them" in sinks.interrupted_note()
    assert sinks.interrupted_note() == "no output file was left half-written"  # closed: nothing said of it


def test_items_with_warnings_are_counted_and_verbose_names_them(cli, tmp_path):
    np.save(tmp_path / "wide.npy", powerlaw_matrix(40, 120, 1.0, seed=1))  # n < d: a warning
    np.save(tmp_path / "tall.npy", powerlaw_matrix(4000, 30, 1.0, seed=2))  # n/d > 100: none expected
    out = tmp_path / "r.jsonl"
    r = cli("batch", tmp_path / "wide.npy", tmp_path / "tall.npy", "--window", "2:8", "--jsonl", out)
    assert r.exit_code == 0, r.stderr
    lines = {json.loads(x)["item"]: json.loads(x) for x in out.read_text().splitlines()}
    warned = [k for k, d in lines.items() if d.get("warnings")]
    assert warned == [str(tmp_path / "wide.npy")]
    assert f"note: 1 of 2 item(s) have warnings, kept in the lines of {out}; --verbose names the items" in r.stderr
    r = cli("batch", tmp_path / "wide.npy", tmp_path / "tall.npy", "--window", "2:8", "--verbose")
    said = lines[str(tmp_path / "wide.npy")]["warnings"]
    assert f"note: {tmp_path / 'wide.npy'}:\n" + "".join(f"  warning: {w}\n" for w in said) in r.stderr
    assert "n = 40 < d = 120" in r.stderr
    # the lines name options as flags, as fit's own warnings do; the library's batch, as keywords
    import warnings

    import spectra_cli as spectra

    np.save(tmp_path / "few.npy", powerlaw_matrix(200, 40, 1.0, seed=3))  # n/d = 5: the population's advice
    r = cli("batch", tmp_path / "few.npy", "--window", "2:8", "--json")
    said = json.loads(r.stdout)["warnings"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        library = spectra.batch([tmp_path / "few.npy"], window="2:8").results[0]["warnings"]
    assert "--population" in " ".join(said) and "population=True" in " ".join(library)
    assert [w.replace("population=True", "--population") for w in library] == said


def test_a_folder_holding_only_a_fifo_says_what_it_holds(cli, tmp_path):
    import os

    os.mkfifo(tmp_path / "only.npy")
    r = cli("batch", tmp_path)
    assert r.exit_code == 2 and r.stderr.endswith("(it holds 1 .npy that is not a regular file).\n")
