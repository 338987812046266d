"""Dask's overhead at equal cores: `spectra spectrum` on one dump with the local engine and with
`--engine dask` on a LocalCluster of 1 and 2 worker processes, whole processes alternated in one
run (cluster start-up included, as a user pays it).

    python bench/bench_dask.py --rows 2000000 --d 768 --rounds 2     # a 6.1 GB float32 .npy
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent


def make(path: Path, n: int, d: int) -> None:
    rng = np.random.default_rng(0)
    scale = (np.arange(1, d + 1) ** -0.5).astype(np.float32)
    X = np.lib.format.open_memmap(path, mode="w+", dtype=np.float32, shape=(n, d))
    for lo in range(0, n, 65536):
        X[lo:lo + 65536] = rng.standard_normal((min(65536, n - lo), d), dtype=np.float32) * scale
    X.flush()
    del X


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=2_000_000)
    ap.add_argument("--d", type=int, default=768)
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()
    data = HERE / "data"
    data.mkdir(exist_ok=True)
    path = data / f"dask_{args.rows}x{args.d}.npy"
    if not path.exists():
        make(path, args.rows, args.d)
    print(f"{path.name}: {path.stat().st_size / 1e9:.2f} GB")
    variants = {"local": [], "dask, 1 worker": ["--engine", "dask", "--workers", "1"],
                "dask, 2 workers": ["--engine", "dask", "--workers", "2"]}
    times: dict[str, list[float]] = {k: [] for k in variants}
    eig: dict[str, list[float]] = {}
    code = "import sys; from spectra_cli.cli import main; sys.argv = ['spectra', *sys.argv[1:]]; main()"
    for _ in range(args.rounds):
        for name, flags in variants.items():
            t = time.perf_counter()
            r = subprocess.run([sys.executable, "-c", code, "spectrum", str(path), "--json", *flags],
                               capture_output=True, text=True)
            times[name].append(time.perf_counter() - t)
            if r.returncode != 0:
                sys.exit(r.stderr[-2000:])
            import json

            eig[name] = json.loads(r.stdout)["spectrum"]["eigenvalues"]
    base = np.asarray(eig["local"])
    for name, ts in times.items():
        err = float(np.max(np.abs(np.asarray(eig[name]) - base)) / base[0])
        print(f"{name:16s} median {statistics.median(ts):7.2f} s (runs {', '.join(f'{t:.2f}' for t in ts)}), "
              f"{statistics.median(ts) / statistics.median(times['local']):.2f}x local, max rel. eigenvalue "
              f"difference {err:.1e}")


if __name__ == "__main__":
    main()
