"""Wide activations: `spectra spectrum` and `spectra fit` at d = 2,048 ... 16,384 (n = 2d float32
`.npy`, power-law spectrum) against numpy (`np.cov` + `eigvalsh`) and scikit-learn
`PCA(svd_solver="covariance_eigh")`, each a whole process with its peak RSS, and the arithmetic
floor: in-process `X.T @ X` (float64) plus one `eigvalsh`.

    python bench/bench_wide.py --d 2048 4096          # minutes on 2 cores
    python bench/bench_wide.py --d 8192 16384         # tens of minutes; 16,384 needs ~10 GB
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
WRAP = """
import resource, sys, time
t = time.perf_counter()
{body}
sys.stderr.write(f"RESULT {{time.perf_counter() - t:.3f}} {{resource.getrusage(resource.RUSAGE_SELF).ru_maxrss}}\\n")
"""
PEERS = {
    "spectra spectrum": "from spectra_cli.cli import main\nsys.argv = ['spectra', 'spectrum', PATH, '--json']\n"
                        "try:\n    main()\nexcept SystemExit:\n    pass",
    "spectra fit": "from spectra_cli.cli import main\nsys.argv = ['spectra', 'fit', PATH, '--json']\n"
                   "try:\n    main()\nexcept SystemExit:\n    pass",
    "numpy cov + eigvalsh": "import numpy as np\nX = np.load(PATH)\nnp.linalg.eigvalsh(np.cov(X, rowvar=False))",
    "sklearn PCA covariance_eigh": "import numpy as np\nfrom sklearn.decomposition import PCA\n"
                                   "PCA(svd_solver='covariance_eigh').fit(np.load(PATH))",
}


def make(path: Path, d: int) -> None:
    n = 2 * d
    rng = np.random.default_rng(0)
    scale = (np.arange(1, d + 1) ** -0.5).astype(np.float32)
    X = np.lib.format.open_memmap(path, mode="w+", dtype=np.float32, shape=(n, d))
    for lo in range(0, n, 4096):
        X[lo:lo + 4096] = rng.standard_normal((min(4096, n - lo), d), dtype=np.float32) * scale
    X.flush()
    del X


def run(name: str, path: Path) -> tuple[float, float]:
    """Seconds (the process's own, start-up included from its first statement) and peak RSS in MB."""
    body = PEERS[name].replace("PATH", repr(str(path)))
    t = time.perf_counter()
    r = subprocess.run([sys.executable, "-c", WRAP.format(body=body)], stdout=subprocess.DEVNULL,
                       stderr=subprocess.PIPE, text=True)
    wall = time.perf_counter() - t
    line = [x for x in r.stderr.splitlines() if x.startswith("RESULT")]
    if r.returncode != 0 or not line:
        sys.exit(f"{name} failed: {r.stderr[-2000:]}")
    _, _, rss_kb = line[-1].split()
    return wall, float(rss_kb) / 1024


def floor(path: Path) -> float:
    X = np.load(path).astype(np.float64)
    t = time.perf_counter()
    np.linalg.eigvalsh(X.T @ X)
    return time.perf_counter() - t


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--d", type=int, nargs="+", default=[2048, 4096])
    args = ap.parse_args()
    data = HERE / "data"
    data.mkdir(exist_ok=True)
    for d in args.d:
        path = data / f"wide_{d}.npy"
        if not path.exists():
            make(path, d)
        f = floor(path)
        print(f"d = {d}, n = {2 * d} float32 ({path.stat().st_size / 1e9:.2f} GB); floor (X.T @ X + eigvalsh, "
              f"in-process) {f:.2f} s")
        for name in PEERS:
            s, rss = run(name, path)
            print(f"  {name:30s} {s:8.2f} s  {s / f:5.2f}x floor  peak RSS {rss:7.0f} MB")


if __name__ == "__main__":
    main()
