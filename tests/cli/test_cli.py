"""The commands end to end: JSON against the schema, tables, help, lazy imports, streams."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.conftest import SAMPLE

NPY = SAMPLE / "minilm_layer5_tokens_4k_f16.npy"
PARQUET = SAMPLE / "minilm_layer5_tokens_4k.parquet"






















def test_help_does_not_import_heavy_modules():
    code = (
        "import sys; from spectra_cli.cli import main; sys.argv=['spectra','--help'];\n"
        "try: main()\nexcept SystemExit: pass\n"
        "bad=[m for m in ('scipy','pyarrow','matplotlib','dask') if m in sys.modules]; "
        "sys.stderr.write(repr(bad))"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False, timeout=120)
    assert r.stderr.strip() == "[]", r.stderr


@pytest.mark.slow
def test_entry_point_streams(tmp_path):
    r = subprocess.run([sys.executable, "-m", "spectra_cli", "fit", str(NPY), "--json"],
                       capture_output=True, text=True, check=False, timeout=120)
    assert r.returncode == 0
    doc = json.loads(r.stdout)
    assert r.stderr.splitlines() == [f"warning: {w}" for w in doc["warnings"]]
    r = subprocess.run([sys.executable, "-m", "spectra_cli", "fit", str(tmp_path / "none.npy")],
                       capture_output=True, text=True, check=False, timeout=120)
    assert r.returncode == 2 and r.stdout == "" and r.stderr.count("\n") == 1


def test_a_long_stage_without_a_terminal_gets_one_line_with_its_time_left(monkeypatch, capsys):
    from spectra_cli.render import progress

    clock = [100.0]
    monkeypatch.setattr(progress.time, "monotonic", lambda: clock[0])
    bar = progress.LazyProgress("reading x.npy", enabled=False)
    bar.stage("population: simulated spectra (ranks 11..38)", 48)
    clock[0] += 2.0
    bar(1, 48)  # too early to tell
    clock[0] += 8.0
    bar(4, 48)  # 10 s for 4: 110 s more
    bar(5, 48)  # said once a stage
    assert capsys.readouterr().err == ("note: population: simulated spectra (ranks 11..38): 4 of 48 done in 10 s, "
                                       "about 2 min more\n")
    bar.stage("population: simulated sampling curves", 8)
    clock[0] += 6.0
    bar(4, 8)  # 6 s more: not long
    assert capsys.readouterr().err == ""


def test_closed_streams_are_said_or_ignored_never_a_traceback(tmp_path):
    """stdout closed (>&-): one line and exit 2 before any work; stderr closed (2>&-): the result as ever."""
    entry = f"{sys.executable} -c 'from spectra_cli.cli import main; main()'"
    r = subprocess.run(f"{entry} fit {NPY} --json >&-", shell=True, capture_output=True, text=True, timeout=120)
    assert r.returncode == 2
    assert r.stderr == "error: stdout is closed: the result has nowhere to go (redirect it to a file).\n"
    r = subprocess.run(f"{entry} fit {NPY} --json 2>&-", shell=True, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and json.loads(r.stdout)["spectrum"]["n_features"] == 384


def test_stdout_appended_onto_an_input_is_refused(tmp_path):
    """spectra fit x.npy --json >> x.npy would write the result into the file it reads."""
    target = tmp_path / "x.npy"
    target.write_bytes(NPY.read_bytes())
    entry = f"{sys.executable} -c 'from spectra_cli.cli import main; main()'"
    r = subprocess.run(f"{entry} fit {target} --json >> {target}", shell=True, capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 2 and r.stderr == f"error: stdout is {target}, a file this command reads; write the " \
        "result elsewhere.\n"
    assert target.read_bytes() == NPY.read_bytes()
