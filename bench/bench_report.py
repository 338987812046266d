"""`spectra report` on the batch of a real checkpoint (bench/make_real_checkpoint.py: 36 matrices of
MiniLM geometry), quiet and with busy processes on the same cores; beside it `spectra batch`, which
made the results, and `spectra --version`.

    python bench/bench_report.py               # 5 runs each, 2 busy processes for the loaded column
    python bench/bench_report.py --runs 3 --busy 2

Whole processes, median wall-clock seconds; the page's size and figure count from its --json.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

from busy import busy
from timing import median_seconds

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "bench" / "data"


def _spectra(args: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "spectra_cli", *args], check=True, capture_output=True, text=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--busy", type=int, default=2)
    ap.add_argument("--runs", type=int, default=5)
    args = ap.parse_args()
    ckpt = DATA / "minilm_real.safetensors"
    if not ckpt.exists():
        subprocess.run([sys.executable, str(ROOT / "bench" / "make_real_checkpoint.py")], check=True)
    results, page = DATA / "real.jsonl", DATA / "real.html"
    batch = ["batch", str(ckpt), "--density", "--uncentered", "--jsonl", str(results), "--overwrite", "--json"]
    report = ["report", str(results), "-o", str(page), "--json"]
    _spectra(batch)
    doc = json.loads(_spectra(report).stdout)
    cases = {"spectra report (the model page)": report, "spectra batch --density --uncentered": batch,
             "spectra --version": ["--version"]}
    quiet = {k: median_seconds(lambda c=c: _spectra(c), args.runs) for k, c in cases.items()}
    with busy(args.busy):
        loaded = {k: median_seconds(lambda c=c: _spectra(c), args.runs) for k, c in cases.items()}
    print(f"page: {doc['items']} layers, {doc['figures']} figures, {doc['bytes'] / 1e6:.2f} MB")
    print(f"| command | quiet s | loaded ({args.busy} busy) s |")
    print("|---|---|---|")
    for k in cases:
        print(f"| `{k}` | {quiet[k]:.2f} | {loaded[k]:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
