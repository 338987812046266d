"""The same commands quiet and with busy processes on the same cores (where users are: a CI runner,
a laptop running a build), each under the thread policy (default), pinned to one BLAS thread, and
with every call on every core (--threads = cores: what spectra did before the policy).

    python bench/bench_loaded.py                     # fit on the 4k sample, 2 busy processes
    python bench/bench_loaded.py --busy 2 --runs 5

Whole processes, median wall-clock seconds of --runs; ratios in one run.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from busy import busy

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "sample_data" / "minilm_layer5_tokens_4k_f16.npy"


def _run(args: list[str], env: dict[str, str], runs: int) -> float:
    out = []
    for _ in range(runs):
        t = time.perf_counter()
        subprocess.run([sys.executable, "-m", "spectra_cli", *args], env=env, check=True, capture_output=True)
        out.append(time.perf_counter() - t)
    return statistics.median(out)


def measure(runs: int) -> dict[str, float]:
    cores = str(len(os.sched_getaffinity(0)))
    base = {k: v for k, v in os.environ.items() if not k.endswith("_NUM_THREADS")}
    cmd = ["fit", str(SAMPLE), "--json"]
    return {
        "policy (default)": _run(cmd, base, runs),
        "pinned: OPENBLAS_NUM_THREADS=1": _run(cmd, {**base, "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"},
                                               runs),
        f"every call on {cores} threads (--threads {cores})": _run([*cmd, "--threads", cores], base, runs),
        "spectra --version": _run(["--version"], base, runs),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--busy", type=int, default=2)
    ap.add_argument("--runs", type=int, default=5)
    args = ap.parse_args()
    quiet = measure(args.runs)
    with busy(args.busy):
        loaded = measure(args.runs)
    pinned_q, pinned_l = quiet["pinned: OPENBLAS_NUM_THREADS=1"], loaded["pinned: OPENBLAS_NUM_THREADS=1"]
    print(f"| `spectra fit` on the 4k sample | quiet s | x pinned | loaded ({args.busy} busy) s | x pinned |")
    print("|---|---|---|---|---|")
    for name in quiet:
        print(f"| {name} | {quiet[name]:.3f} | {quiet[name] / pinned_q:.2f} | {loaded[name]:.3f} | "
              f"{loaded[name] / pinned_l:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
