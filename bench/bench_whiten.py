"""Whitening benchmark: `spectra whiten` against `spectra spectrum` on the same file, as whole
processes, alternating; peak RSS from /usr/bin/time -v (memory-mapped pages included).

    python bench/bench_whiten.py --rows 1000000 --d 768 --rounds 2
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from bench_spectrum import timed  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--d", type=int, default=768)
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()
    spectra = shutil.which("spectra") or sys.exit("spectra is not installed (pip install -e .)")
    data = HERE / "data"
    data.mkdir(exist_ok=True)
    src = data / f"white_{args.rows}x{args.d}.npy"
    if not src.exists():
        subprocess.run([spectra, "synth", "powerlaw", "--alpha", "1", "-n", str(args.rows), "-d", str(args.d),
                        "--offset", "10", "--seed", "0", "-o", str(src)], check=True)
    out = data / "white_out.npy"
    cmds = {
        "spectrum": [spectra, "spectrum", str(src), "--json"],
        "whiten zca": [spectra, "whiten", str(src), "-o", str(out), "--json"],
        "whiten zca --partition-isotropy": [spectra, "whiten", str(src), "-o", str(out), "--partition-isotropy",
                                            "--json"],
        "isotropy": [spectra, "isotropy", str(src), "--json"],
    }
    walls: dict[str, list[float]] = {k: [] for k in cmds}
    rss: dict[str, float] = {}
    import os

    for r in range(args.rounds):
        for name, cmd in cmds.items():
            w, m, _ = timed(cmd, dict(os.environ))
            walls[name].append(w)
            rss[name] = max(rss.get(name, 0.0), m)
            print(f"  round {r + 1} {name:34s} {w:7.2f} s {m:7.0f} MB", file=sys.stderr)
    base = statistics.median(walls["spectrum"])
    print(f"\n{args.rows} x {args.d} float32 ({src.stat().st_size / 1e9:.2f} GB), median of {args.rounds} rounds")
    print(f"{'command':34s} {'median s':>9s} {'vs spectrum':>12s} {'peak RSS MB':>12s}")
    for name, ws in walls.items():
        med = statistics.median(ws)
        print(f"{name:34s} {med:9.2f} {med / base:11.2f}x {rss[name]:12.0f}")
    out.unlink(missing_ok=True)


if __name__ == "__main__":
    main()
