"""Benchmark: `spectra spectrum` against numpy, scikit-learn and the arithmetic floor.

Whole processes, run alternately (round-robin) several times; prints the median wall
time, the ratio to spectra, peak RSS (/usr/bin/time -v, memory-mapped pages included)
and the largest relative eigenvalue error against a two-pass float64 reference.

    python bench/bench_spectrum.py                 # 200,000 x 768 float32, 3 rounds
    python bench/bench_spectrum.py --rows 2000000 --only spectra   # RSS flat in n
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
DATA = HERE / "data"


def make_dump(rows: int, d: int, *, seed: int = 0, alpha: float = 1.0) -> tuple[Path, Path]:
    """A power-law spectrum in a random rotation with a mean offset, as .npy and Parquet."""
    DATA.mkdir(exist_ok=True)
    npy = DATA / f"dump_{rows}x{d}.npy"
    pqt = DATA / f"dump_{rows}x{d}.parquet"
    if npy.exists() and pqt.exists():
        return npy, pqt
    import pyarrow as pa
    import pyarrow.parquet as pq

    rng = np.random.default_rng(seed)
    lam = np.arange(1, d + 1, dtype=np.float64) ** -alpha
    Q, _ = np.linalg.qr(rng.standard_normal((d, d)))
    A = (np.sqrt(lam)[:, None] * Q.T).astype(np.float32)
    mean = (10.0 * rng.standard_normal(d)).astype(np.float32)
    out = np.lib.format.open_memmap(npy, mode="w+", dtype=np.float32, shape=(rows, d))
    writer = None
    step = 50_000
    for lo in range(0, rows, step):
        hi = min(lo + step, rows)
        block = rng.standard_normal((hi - lo, d), dtype=np.float32) @ A + mean
        out[lo:hi] = block
        col = pa.FixedSizeListArray.from_arrays(pa.array(block.ravel()), d)
        table = pa.table({"emb": col})
        if writer is None:
            writer = pq.ParquetWriter(pqt, table.schema)
        writer.write_table(table, row_group_size=step)
    out.flush()
    del out
    assert writer is not None
    writer.close()
    return npy, pqt


def timed(cmd: list[str], env: dict[str, str]) -> tuple[float, float, str]:
    """Wall seconds, peak RSS in MB, stdout of one whole-process run."""
    t = time.perf_counter()
    r = subprocess.run(["/usr/bin/time", "-v", *cmd], capture_output=True, text=True, env=env, check=False)
    wall = time.perf_counter() - t
    if r.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{r.stderr[-2000:]}")
    m = re.search(r"Maximum resident set size \(kbytes\): (\d+)", r.stderr)
    rss = int(m.group(1)) / 1024 if m else float("nan")
    return wall, rss, r.stdout


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=200_000)
    ap.add_argument("--d", type=int, default=768)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--only", default=None, help="comma list of contenders to run")
    ap.add_argument("--slow-rounds", type=int, default=1, help="rounds for sklearn-full and ipca")
    args = ap.parse_args()

    npy, pqt = make_dump(args.rows, args.d)
    spectra = shutil.which("spectra") or sys.exit("spectra is not installed (pip install -e .)")
    py = sys.executable
    peers = str(HERE / "peers.py")
    tmp = Path(tempfile.mkdtemp())
    env = dict(os.environ)
    contenders: dict[str, list[str]] = {
        "spectra npy": [spectra, "spectrum", str(npy), "--json"],
        "spectra parquet": [spectra, "spectrum", str(pqt), "--json"],
        "spectra npy float32": [spectra, "spectrum", str(npy), "--json", "--precision", "float32"],
        "spectra parquet float32": [spectra, "spectrum", str(pqt), "--json", "--precision", "float32"],
        "numpy cov+eigvalsh": [py, peers, "numpy", str(npy), str(tmp / "numpy.npy")],
        "sklearn covariance_eigh": [py, peers, "sklearn-covariance-eigh", str(npy), str(tmp / "skce.npy")],
        "sklearn full": [py, peers, "sklearn-full", str(npy), str(tmp / "skfull.npy")],
        "IncrementalPCA": [py, peers, "ipca", str(npy), str(tmp / "ipca.npy")],
        "spectra --version": [spectra, "--version"],
    }
    slow = {"sklearn full", "IncrementalPCA"}
    if args.only:
        keep = set(args.only.split(","))
        contenders = {k: v for k, v in contenders.items() if k in keep or k.split()[0] in keep}

    walls: dict[str, list[float]] = {k: [] for k in contenders}
    rss: dict[str, float] = {}
    outputs: dict[str, str] = {}
    for rnd in range(args.rounds):
        for name, cmd in contenders.items():
            if name in slow and rnd >= args.slow_rounds:
                continue
            w, r, out = timed(cmd, env)
            walls[name].append(w)
            rss[name] = max(rss.get(name, 0.0), r)
            outputs[name] = out
            print(f"  round {rnd + 1} {name:26s} {w:7.2f} s  {r:7.0f} MB", file=sys.stderr)

    floor_t = None
    if not args.only or "floor" in args.only.split(","):
        floor_runs = [float(subprocess.run([py, peers, "floor", str(npy), "-"], capture_output=True, text=True,
                                           check=True).stdout) for _ in range(args.rounds)]
        floor_t = statistics.median(floor_runs)

    ref = None
    if args.rows * args.d * 8 < 8e9:
        subprocess.run([py, peers, "reference", str(npy), str(tmp / "ref.npy")], check=True)
        ref = np.load(tmp / "ref.npy")

    def err(name: str) -> float | None:
        if ref is None:
            return None
        if name.startswith("spectra") and "version" not in name:
            lam = np.array(json.loads(outputs[name])["spectrum"]["eigenvalues"])
        else:
            f = {"numpy cov+eigvalsh": "numpy", "sklearn covariance_eigh": "skce", "sklearn full": "skfull",
                 "IncrementalPCA": "ipca"}.get(name)
            if f is None:
                return None
            lam = np.load(tmp / f"{f}.npy")
        k = min(len(lam), len(ref))
        return float(np.max(np.abs(lam[:k] - ref[:k]) / ref[:k]))

    base = statistics.median(walls["spectra npy"]) if walls.get("spectra npy") else None
    size_mb = npy.stat().st_size / 1e6
    print(f"\n{args.rows} x {args.d} float32 ({size_mb:.0f} MB .npy), median of {args.rounds} rounds "
          f"(slow peers: {args.slow_rounds})")
    print(f"{'contender':26s} {'median s':>9s} {'vs spectra npy':>15s} {'peak RSS MB':>12s} {'max rel err':>12s}")
    for name, ws in walls.items():
        if not ws:
            continue
        med = statistics.median(ws)
        ratio = f"{med / base:.2f}x" if base else "-"
        e = err(name)
        es = f"{e:.1e}" if e is not None else "-"
        print(f"{name:26s} {med:9.2f} {ratio:>15s} {rss[name]:12.0f} {es:>12s}")
    if floor_t is not None and walls.get("spectra --version"):
        start = statistics.median(walls["spectra --version"])
        floor = floor_t + start
        print(f"\narithmetic floor: X.T @ X float32 in-process {floor_t:.2f} s + start-up {start:.2f} s "
              f"= {floor:.2f} s")
        for name in ("spectra npy", "spectra parquet", "spectra npy float32", "spectra parquet float32"):
            if walls.get(name):
                print(f"  {name:26s} {statistics.median(walls[name]) / floor:.2f}x the floor")
    shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
