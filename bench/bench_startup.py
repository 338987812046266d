"""Start-up: `spectra fit` on the 4k sample as a whole process, against `spectra --version`
(the floor: Python, numpy-free CLI import, typer) and `python -c pass`, alternated in one run.

    python bench/bench_startup.py --rounds 15
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

from byte_compile import compile_package

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "sample_data" / "minilm_layer5_tokens_4k_f16.npy"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=15)
    args = ap.parse_args()
    exe = shutil.which("spectra") or sys.exit("install the package first (pip install .)")
    compile_package()
    runs = {
        "python -c pass": [sys.executable, "-c", "pass"],
        "spectra --version": [exe, "--version"],
        "spectra fit 4k sample --json": [exe, "fit", str(SAMPLE), "--json"],
        "spectra fit 4k sample (table)": [exe, "fit", str(SAMPLE)],
    }
    times: dict[str, list[float]] = {k: [] for k in runs}
    for _ in range(args.rounds):
        for name, cmd in runs.items():
            t = time.perf_counter()
            subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
            times[name].append(time.perf_counter() - t)
    base = statistics.median(times["spectra --version"])
    print(f"{'command':32s} {'median s':>9s} {'min s':>7s} {'vs --version':>13s}")
    for name, ts in times.items():
        print(f"{name:32s} {statistics.median(ts):9.3f} {min(ts):7.3f} {statistics.median(ts) / base:12.2f}x")


if __name__ == "__main__":
    main()
