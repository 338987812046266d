"""spectra report, and what every command that writes a file says on stderr (command line)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import SAMPLE, powerlaw_matrix

pytest.importorskip("matplotlib")
pytest.importorskip("jinja2")


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    import spectra_cli as spectra

    d = tmp_path_factory.mktemp("results")
    np.save(d / "a.npy", powerlaw_matrix(600, 24, 1.0, seed=1))
    np.save(d / "b.npy", powerlaw_matrix(600, 24, 1.3, seed=2))
    out = d / "r.jsonl"
    spectra.batch([str(d / "a.npy"), str(d / "b.npy")], window="3:12", jsonl=str(out))
    return out


def test_batch_says_where_it_wrote_its_results(cli, tmp_path):
    np.save(tmp_path / "a.npy", powerlaw_matrix(300, 12, 1.0, seed=1))
    out = tmp_path / "r.jsonl"
    r = cli("batch", tmp_path / "a.npy", "--window", "2:8", "--jsonl", out, "--json")
    assert r.exit_code == 0, r.stderr
    assert f"wrote {out}" in r.stderr


def test_report_writes_the_page_and_says_so(cli, results, tmp_path):
    page = tmp_path / "p.html"
    r = cli("report", results, "-o", page, "--kind", "model", "--json")
    assert r.exit_code == 0, r.stderr
    doc = r.json()
    assert doc["kind"] == "model" and doc["path"] == str(page) and doc["items"] == 2 and doc["figures"] >= 2
    assert r.stderr.splitlines()[-1] == f"wrote {page}"
    assert page.read_text().startswith("<!DOCTYPE html>")
    r = cli("report", results, "-o", page, "--kind", "model", "--title", "my model")
    assert r.exit_code == 0 and "my model" in r.stdout and "<title>my model</title>" in page.read_text()


@pytest.mark.parametrize("args,message", [
    (["--kind", "nope"], "error: --kind 'nope' must be one of auto, model, run, report.\n"),
    (["--worst", "-1"], "error: --worst -1 must be a whole number from 0 to 100.\n"),
    (["--step-regex", "("], "error: --step-regex '(' is not a valid regular expression: missing ): (.\n"),
])
def test_report_bad_options_are_one_line_and_exit_2(cli, results, tmp_path, args, message):
    r = cli("report", results, "-o", tmp_path / "p.html", *args)
    assert r.exit_code == 2 and r.stderr == message and r.stdout == ""
    assert not (tmp_path / "p.html").exists()


def test_report_refuses_to_overwrite_its_input_and_needs_an_output(cli, results, tmp_path):
    link = tmp_path / "r.html"
    link.symlink_to(results)
    r = cli("report", results, "-o", link)
    assert r.exit_code == 2 and r.stderr == f"error: -o '{link}' is the input {results}; write the output " \
                                            "elsewhere.\n"
    r = cli("report", results)
    assert r.exit_code == 2 and "--out" in r.stderr


def test_report_of_a_matrix_says_to_run_fit_first(cli, tmp_path):
    r = cli("report", SAMPLE / "minilm_sentence_embeddings_1k.npy", "-o", tmp_path / "p.html")
    assert r.exit_code == 2
    assert r.stderr == (f"error: {SAMPLE / 'minilm_sentence_embeddings_1k.npy'}: spectra report reads reports (.json, "
                        "from --json) and batch results (.jsonl); to analyse a matrix, run spectra fit or spectra "
                        "batch first.\n")


def test_report_without_jinja2_names_the_extra(cli, results, tmp_path, without):
    without("jinja2")
    r = cli("report", results, "-o", tmp_path / "p.html")
    assert r.exit_code == 2
    assert r.stderr == ("error: spectra report needs Jinja2, the optional extra 'report': pip install "
                        "'spectra-geometry[report]' (from a checkout: pip install '.[report]').\n")


# The console script's entry with the command line's import held in the middle, as a slow disk or a busy machine
# holds it: the first module from outside spectra_cli that spectra_cli.cli asks for is not found until a Ctrl-C.
# Before it waits, it writes to the file `ready` the module it holds and whether Python's own SIGINT handler is
# still the one in place (the CLI installs its own once the import is done).
_HOLD_THE_IMPORT = """\
import os, signal, sys, time

class HoldTheImport:
    def find_spec(self, name, path=None, target=None):
        if "spectra_cli.cli" in sys.modules and name.partition(".")[0] != "spectra_cli":
            sys.meta_path.remove(self)
            default = signal.getsignal(signal.SIGINT) is signal.default_int_handler
            with open({ready!r} + ".part", "w") as f:
                f.write(f"{{name}} {{default}}")
            os.replace({ready!r} + ".part", {ready!r})
            time.sleep(600)
        return None

sys.meta_path.insert(0, HoldTheImport())
from spectra_cli.__main__ import main  # what the console script runs
main()
"""


def _wait_for(condition, proc, what: str, seconds: float = 120) -> None:
    """Until ``condition()``; fails only if ``proc`` ends first or nothing happens within ``seconds``."""
    import time

    deadline = time.monotonic() + seconds
    while not condition():
        if proc.poll() is not None:
            pytest.fail(f"the process ended (exit {proc.returncode}) before {what}: {proc.communicate(timeout=60)}")
        if time.monotonic() > deadline:
            proc.kill()
            pytest.fail(f"no sign within {seconds} s that {what}: {proc.communicate(timeout=60)}")
        time.sleep(0.01)


def _ctrl_c_once(args: list[str], ready: Path, what: str) -> tuple[int, str, str]:
    """Run ``args``, send Ctrl-C once ``ready`` exists (the child's sign that it reached ``what``); its exit
    code, stdout and stderr. The child is killed if the test fails on the way."""
    import signal
    import subprocess

    def default_sigint() -> None:  # a shell's background job inherits SIGINT ignored; Python then never sees it
        signal.signal(signal.SIGINT, signal.SIG_DFL)

    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=default_sigint)
    try:
        _wait_for(ready.exists, proc, what)
        proc.send_signal(signal.SIGINT)
        stdout, stderr = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate(timeout=60)
    return proc.returncode, stdout, stderr


@pytest.mark.slow
def test_ctrl_c_while_the_command_line_imports_is_the_same_one_line(tmp_path):
    """The entry point (``spectra``, ``python -m spectra_cli``) turns Ctrl-C during its own imports into the
    run's one line and exit 130, not a traceback. The import is held in the middle until the Ctrl-C (a fixed
    sleep missed that phase on a busy machine, or came before Python could take a Ctrl-C at all)."""
    import sys

    ready = tmp_path / "importing"
    returncode, stdout, stderr = _ctrl_c_once(
        [sys.executable, "-c", _HOLD_THE_IMPORT.format(ready=str(ready)), "fit", str(tmp_path / "x.npy")], ready,
        "the command line's import was held")
    held, default_handler = ready.read_text().split()
    assert default_handler == "True", f"the CLI had installed its own SIGINT handler when {held} was imported"
    assert returncode == 130 and stdout == "", (returncode, stderr)
    assert stderr == "interrupted (Ctrl-C): no output file was left half-written\n"


def test_every_written_file_is_named_on_stderr(cli, tmp_path):
    x = tmp_path / "x.npy"
    np.save(x, powerlaw_matrix(500, 16, 1.0, seed=0))
    r = cli("fit", x, "--window", "2:8", "--plot", tmp_path / "f.svg", "--json")
    assert r.exit_code == 0 and f"wrote {tmp_path / 'f.svg'}" in r.stderr
    json.loads(r.stdout)  # stdout is still only the report
    r = cli("whiten", x, "-o", tmp_path / "w.npy", "--save-transform", tmp_path / "t.npz", "--json")
    assert r.exit_code == 0
    assert f"wrote {tmp_path / 'w.npy'}" in r.stderr and f"wrote {tmp_path / 't.npz'}" in r.stderr


# `python -m spectra_cli` (runpy, as -m runs it) that creates the file `ready` when its run reaches the bootstrap
# replicates: the stage the command line's progress bar is told about (LazyProgress.stage), after the import.
_AT_THE_BOOTSTRAP = """\
import runpy
from spectra_cli.render.progress import LazyProgress

real = LazyProgress.stage

def stage(self, label, total):
    real(self, label, total)
    if label == "bootstrap replicates":
        open({ready!r}, "w").close()

LazyProgress.stage = stage
runpy.run_module("spectra_cli", run_name="__main__", alter_sys=True)
"""


@pytest.mark.slow
def test_ctrl_c_is_one_line_exit_130_and_no_file(tmp_path):
    import sys

    work = tmp_path / "run"
    work.mkdir()
    X = work / "x.npy"
    np.save(X, powerlaw_matrix(4000, 96, 1.0, seed=0))
    plot = work / "f.png"
    ready = tmp_path / "bootstrapping"
    # a run long enough to interrupt: 20,000 bootstrap replicates (20 s of CPU), then a figure; Ctrl-C once the
    # replicates have begun (a fixed sleep came before Python could take a Ctrl-C on a busy machine)
    returncode, stdout, stderr = _ctrl_c_once(
        [sys.executable, "-c", _AT_THE_BOOTSTRAP.format(ready=str(ready)), "fit", str(X), "--window", "3:40", "--ci",
         "--ci-replicates", "20000", "--plot", str(plot)], ready, "the run reached its bootstrap replicates")
    assert returncode == 130 and stdout == "", (returncode, stderr)
    assert stderr == "interrupted (Ctrl-C): no output file was left half-written\n"
    assert sorted(p.name for p in work.iterdir()) == ["x.npy"]
