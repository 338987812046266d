"""What the standard errors cost: `spectra fit` as whole processes, this checkout with its row-group errors ("new")
against the same checkout with them off ("off": `ERROR_GROUPS = 0`, every error first order, the fit as it was
before the groups), and optionally against another checkout ("old"), alternated round-robin, on the 4k x 384 sample
and on 8,192 x 4,096 float32 rows.

    python bench/bench_se_cost.py [--old /tmp/old] [--rounds 5] [--wide-rounds 2] [--busy 2]
    git worktree add /tmp/old <commit>     # (for --old: the code to compare with)

Prints each contender's median wall seconds and the ratios; and, in process, the fit's own `timings` (its
`uncertainty_s` and the whole `total_s`, the median of 5 calls after a warm-up).
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "bench" / "data"


def wide() -> Path:
    path = DATA / "se_cost_8192x4096_f32.npy"
    if not path.exists():
        DATA.mkdir(parents=True, exist_ok=True)
        rng = np.random.default_rng(0)
        X = rng.standard_normal((8192, 4096), dtype=np.float32) * (np.arange(1, 4097, dtype=np.float32) ** -0.5)
        np.save(path, X)
    return path


def _from(code: Path) -> str:
    """Python that imports spectra_cli from ``code``: an editable install's import hook (which would always give this
    checkout) taken out first."""
    return ("import sys; sys.meta_path = [f for f in sys.meta_path if 'editable' not in repr(f).lower()]; "
            f"sys.path.insert(0, {str(code)!r}); ")


def run(code: Path, data: Path, off: bool = False) -> float:
    script = _from(code) + ("import spectra_cli.run.fit_steps as f; f.ERROR_GROUPS = 0; " if off else "") + \
        f"import runpy; sys.argv = ['spectra', 'fit', {str(data)!r}, '--json']; " \
        "runpy.run_module('spectra_cli', run_name='__main__')"
    start = time.perf_counter()
    subprocess.run([sys.executable, "-c", script], check=False, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - start


def in_process(code: Path, data: Path, off: bool = False) -> str:
    script = _from(code) + ("import spectra_cli.run.fit_steps as f; f.ERROR_GROUPS = 0; " if off else "") + (
        "import json, statistics, warnings, numpy as np, spectra_cli as s; warnings.simplefilter('ignore');"
        f"assert s.__file__.startswith({str(code)!r}), s.__file__;"
        f"X = np.load({str(data)!r}); s.fit(X); t = [s.fit(X).timings for _ in range(5)];"
        "print(json.dumps({k: round(statistics.median(x.get(k, 0.0) for x in t), 4) for k in "
        "('read_accumulate_s', 'uncertainty_s', 'total_s')}))")
    out = subprocess.run([sys.executable, "-c", script], check=True, capture_output=True, text=True)
    return out.stdout.strip()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--old", type=Path, help="another checkout to compare with")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--wide-rounds", type=int, default=2)
    ap.add_argument("--busy", type=int, default=0, help="this many busy processes on the cores meanwhile (loaded)")
    args = ap.parse_args()
    import contextlib

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from busy import busy

    with busy(args.busy) if args.busy else contextlib.nullcontext():
        measure(args)


def measure(args: argparse.Namespace) -> None:
    for name, data, rounds in (("4k x 384 sample", ROOT / "sample_data" / "minilm_layer5_tokens_4k_f16.npy",
                                args.rounds), ("8,192 x 4,096 float32", wide(), args.wide_rounds)):
        if not rounds:
            continue
        contenders = [("off", ROOT, True), ("new", ROOT, False)] + ([("old", args.old, False)] if args.old else [])
        times: dict[str, list[float]] = {label: [] for label, _, _ in contenders}
        for _ in range(rounds):
            for label, code, off in contenders:
                times[label].append(run(code, data, off))
        med = {label: statistics.median(t) for label, t in times.items()}
        print(f"{name}: whole process " + ", ".join(f"{k} {v:.3f} s" for k, v in med.items())
              + f": new / off {med['new'] / med['off']:.3f}x"
              + (f", new / old {med['new'] / med['old']:.3f}x" if "old" in med else ""))
        if rounds and name.startswith("4k"):
            for label, code, off in contenders:
                print(f"    in process, {label}: {in_process(code, data, off)}")


if __name__ == "__main__":
    main()
