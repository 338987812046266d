"""The same commands quiet and with busy processes on the same cores (where users are: a CI runner,
a laptop running a build), each under the thread policy (default), pinned to one BLAS thread, and
with every call on every core (--threads = cores: what spectra did before the policy).

    python bench/bench_loaded.py                     # fit on the 4k sample, 2 busy processes
    python bench/bench_loaded.py --busy 2 --runs 5
    python bench/bench_loaded.py --case checkpoint --runs 3   # batch of a MiniLM-shaped checkpoint
    python bench/bench_loaded.py --case sequence --runs 3     # spectra sequence on 2,592 x 32 x 384
    python bench/bench_loaded.py --case wide --runs 3         # spectra fit on 200,000 x 768 (bench_spectrum's dump)

Whole processes, median wall-clock seconds of --runs; ratios in one run.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

from busy import busy
from timing import median_seconds

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "sample_data" / "minilm_layer5_tokens_4k_f16.npy"


def _run(args: list[str], env: dict[str, str], runs: int) -> float:
    return median_seconds(lambda: subprocess.run([sys.executable, "-m", "spectra_cli", *args], env=env, check=True,
                                                 capture_output=True), runs)


def command(case: str) -> list[str]:
    """The command of a case, its data made in bench/data/ the first time (ignored by git)."""
    data = ROOT / "bench" / "data"
    data.mkdir(exist_ok=True)
    if case == "sample":
        return ["fit", str(SAMPLE), "--json"]
    if case == "checkpoint":
        from bench_batch import make_checkpoint

        ckpt = data / "minilm_like.safetensors"
        if not ckpt.exists():
            make_checkpoint(ckpt)
        return ["batch", str(ckpt), "--json"]
    if case == "wide":
        from bench_spectrum import make_dump

        return ["fit", str(make_dump(200_000, 768)[0]), "--json"]
    import numpy as np

    dump = data / "windows_2592x32x384_f16.npy"
    if not dump.exists():
        rng = np.random.default_rng(0)
        X = rng.standard_normal((2592, 32, 384), dtype=np.float32) * np.arange(1, 385, dtype=np.float32) ** -0.5
        np.save(dump, X.astype(np.float16))
    return ["sequence", str(dump), "--json"]


def measure(runs: int, cmd: list[str]) -> dict[str, float]:
    cores = str(len(os.sched_getaffinity(0)))
    base = {k: v for k, v in os.environ.items() if not k.endswith("_NUM_THREADS")}
    return {
        "policy (default)": _run(cmd, base, runs),
        "pinned: OPENBLAS_NUM_THREADS=1": _run(cmd, {**base, "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"},
                                               runs),
        **({f"every call on {cores} threads (--threads {cores})": _run([*cmd, "--threads", cores], base, runs)}
           if cmd[0] != "batch" else {}),  # (batch's workers take cores // workers threads each)
        "spectra --version": _run(["--version"], base, runs),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--busy", type=int, default=2)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--case", choices=["sample", "checkpoint", "sequence", "wide"], default="sample")
    args = ap.parse_args()
    cmd = command(args.case)
    quiet = measure(args.runs, cmd)
    with busy(args.busy):
        loaded = measure(args.runs, cmd)
    pinned_q, pinned_l = quiet["pinned: OPENBLAS_NUM_THREADS=1"], loaded["pinned: OPENBLAS_NUM_THREADS=1"]
    head = f"`spectra {cmd[0]}` ({args.case})"
    print(f"| {head} | quiet s | x pinned | loaded ({args.busy} busy) s | x pinned |")
    print("|---|---|---|---|---|")
    for name in quiet:
        print(f"| {name} | {quiet[name]:.3f} | {quiet[name] / pinned_q:.2f} | {loaded[name]:.3f} | "
              f"{loaded[name] / pinned_l:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
