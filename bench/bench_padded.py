"""Zero padding: the accumulation of an n x d float32 `.npy` whose last three quarters of rows are
zero (a padded sequence dump), against the same shape with every row real, and against the
arithmetic of one `X.T @ X` (float64) on the real rows alone.

A block of identical rows has an exactly zero centred moment, so spectra makes no product for it;
the padded file should cost about a quarter of the real one. In-process, `spectrum(path, top=64)`
so that the decomposition is small; `timings.read_accumulate_s` is the figure.

    python bench/bench_padded.py                 # d = 4,096, n = 16,384: about a minute on 2 cores
    python bench/bench_padded.py --d 2048 --rounds 3
    git worktree add /tmp/before 072d2a3 && python bench/bench_padded.py --tree /tmp/before   # an older spectra
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent


def make(path: Path, n: int, d: int, real: int) -> None:
    """Written under a temporary name and renamed when complete."""
    rng = np.random.default_rng(0)
    scale = (np.arange(1, d + 1) ** -0.5).astype(np.float32)
    tmp = path.with_name(path.name + ".partial")
    X = np.lib.format.open_memmap(tmp, mode="w+", dtype=np.float32, shape=(n, d))
    for lo in range(0, n, 4096):
        hi = min(lo + 4096, n)
        if lo < real:
            X[lo:hi] = rng.standard_normal((hi - lo, d), dtype=np.float32) * scale + 1.0
        else:
            X[lo:hi] = 0.0
    X.flush()
    del X
    tmp.replace(path)


def accumulate_seconds(path: Path) -> tuple[float, np.ndarray]:
    import warnings

    import spectra_cli as spectra

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        rep = spectra.spectrum(str(path), top=64)
    return rep.timings["read_accumulate_s"], rep.spectrum.eigenvalues


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--d", type=int, default=4096)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--tree", help="import spectra_cli from this checkout instead (to time an older commit)")
    args = ap.parse_args()
    if args.tree:
        import sys

        sys.path.insert(0, str(Path(args.tree).resolve()))
        import spectra_cli

        print(f"spectra_cli from {Path(spectra_cli.__file__).parent}")
    d, n = args.d, 4 * args.d
    data = HERE / "data"
    data.mkdir(exist_ok=True)
    padded, full = data / f"padded_{d}.npy", data / f"unpadded_{d}.npy"
    if not padded.exists():
        make(padded, n, d, n // 4)
    if not full.exists():
        make(full, n, d, n)
    X = np.load(padded, mmap_mode="r")[: n // 4].astype(np.float64)
    t = time.perf_counter()
    _ = X.T @ X
    floor = time.perf_counter() - t
    del X
    print(f"d = {d}, n = {n} float32, {n // 4} real rows then {n - n // 4} zero rows")
    print(f"  X.T @ X on the {n // 4} real rows, in-process: {floor:.2f} s")
    rows: dict[str, list[float]] = {"padded": [], "unpadded": []}
    for _ in range(args.rounds):  # alternated, so that both see the same machine
        for name, path in (("padded", padded), ("unpadded", full)):
            s, lam = accumulate_seconds(path)
            rows[name].append(s)
            if name == "padded":
                X = np.load(padded, mmap_mode="r")[: n // 4].astype(np.float64)
                mu = X.sum(axis=0) / n
                ref = np.linalg.eigvalsh((X.T @ X - n * np.outer(mu, mu)) / (n - 1))[::-1][:64]
                diff = float(np.max(np.abs(lam[:64] - ref) / ref[0]))
                del X
    med = {k: float(np.median(v)) for k, v in rows.items()}
    for k in ("padded", "unpadded"):
        print(f"  {k:9s} read + accumulate: median {med[k]:.2f} s ({', '.join(f'{v:.2f}' for v in rows[k])}), "
              f"{med[k] / floor:.2f}x the real rows' product")
    print(f"  padded / unpadded: {med['padded'] / med['unpadded']:.2f}; leading 64 eigenvalues of the padded file "
          f"within {diff:.1e} (relative to lambda_1) of numpy on its real rows plus zeros")


if __name__ == "__main__":
    main()
