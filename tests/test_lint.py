"""The test command also runs ruff and mypy on the package (STYLE.md)."""

from __future__ import annotations

import shutil
import subprocess
import sys

import pytest

from tests.conftest import ROOT


@pytest.mark.parametrize(
    "cmd",
    [
        [sys.executable, "-m", "ruff", "check", "spectra_cli", "tests", "bench"],
        [sys.executable, "-m", "mypy", "spectra_cli"],
    ],
    ids=["ruff", "mypy"],
)
def test_static_checks(cmd):
    if shutil.which(cmd[2]) is None and subprocess.run([*cmd[:3], "--version"], capture_output=True).returncode:
        pytest.fail(f"{cmd[2]} is not installed: install the test extras (pip install '.[test]')")
    r = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, check=False)
    assert r.returncode == 0, r.stdout + r.stderr
