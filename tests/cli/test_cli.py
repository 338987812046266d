"""The commands end to end: JSON against the schema, tables, help, lazy imports, streams."""

from __future__ import annotations

import json
import subprocess
import sys

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
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert r.stderr.strip() == "[]", r.stderr


def test_entry_point_streams(tmp_path):
    r = subprocess.run([sys.executable, "-m", "spectra_cli", "fit", str(NPY), "--json"],
                       capture_output=True, text=True, check=False)
    assert r.returncode == 0
    doc = json.loads(r.stdout)
    assert r.stderr.splitlines() == [f"warning: {w}" for w in doc["warnings"]]
    r = subprocess.run([sys.executable, "-m", "spectra_cli", "fit", str(tmp_path / "none.npy")],
                       capture_output=True, text=True, check=False)
    assert r.returncode == 2 and r.stdout == "" and r.stderr.count("\n") == 1
