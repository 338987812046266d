"""What runs per report in a CI loop, timed on its own: the imports, reading a report back (strict
JSON and its schema check, as ``spectra check`` does), the model comparison and the local slope of
``fit`` on the 4k sample, the whole in-process ``fit``, and ``spectra check`` and ``spectra fit`` as
processes against ``spectra --version``.

    python bench/bench_ci_loop.py --runs 20

Medians of --runs, seconds; in-process timings repeat the call in one process.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import warnings
from pathlib import Path

from timing import median_seconds

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "sample_data" / "minilm_layer5_tokens_4k_f16.npy"


def process(args: list[str], runs: int) -> float:
    return median_seconds(lambda: subprocess.run([sys.executable, *args], check=True, capture_output=True), runs)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=20)
    runs = ap.parse_args().runs
    import numpy as np

    import spectra_cli as spectra
    from spectra_cli import jsonio
    from spectra_cli.analysis.local_slope import local_slope_profile
    from spectra_cli.analysis.powerlaw import compare_models
    from spectra_cli.documents import check_report_schema

    warnings.simplefilter("ignore")
    rep = spectra.fit(SAMPLE)
    doc = rep.to_dict()
    text = json.dumps(doc)
    spec, window = rep.spectrum, rep.suite.fits[0].window
    lam = spec.eigenvalues
    rows = {
        "import spectra_cli (process: python -c)": process(["-c", "import spectra_cli"], runs),
        "import the fit path (process: python -c)": process(["-c", "import spectra_cli.run.matrix"], runs),
        "report -> strict JSON text (to_dict + dumps)": median_seconds(lambda: jsonio.dumps(rep.to_dict()), runs),
        "strict JSON text -> report dict (jsonio.loads)": median_seconds(lambda: jsonio.loads(text, "report"), runs),
        "schema check of a report (check_report_schema)": median_seconds(lambda: check_report_schema(doc, "r"), runs),
        "model comparison (3 models, the default window)": median_seconds(
            lambda: compare_models(lam, window, method="ols", degree=2, selected="power-law"), runs),
        "local slope profile": median_seconds(lambda: local_slope_profile(lam, spec.usable_rank), runs),
        "fit in-process (4k x 384)": median_seconds(lambda: spectra.fit(np.load(SAMPLE)), runs),
    }
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "r.json"
        report.write_text(text)
        rows["spectra check r.json --require fit.alpha>0.1 (process)"] = process(
            ["-m", "spectra_cli", "check", str(report), "--require", "fit.alpha>0.1"], runs)
    rows["spectra fit on the 4k sample (process)"] = process(["-m", "spectra_cli", "fit", str(SAMPLE), "--json"], runs)
    rows["spectra --version (process)"] = process(["-m", "spectra_cli", "--version"], runs)
    version = rows["spectra --version (process)"]
    print("| per report | median s | x `spectra --version` |")
    print("|---|---:|---:|")
    for name, v in rows.items():
        print(f"| {name} | {v:.4f} | {v / version:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
