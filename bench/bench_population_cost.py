"""What ``--population`` costs next to the plain fit, whole processes, side by side (issue 33, part 1).

For each width d and each ratio n/d: rows ``sqrt(s_i) Sigma^(1/2) z_i`` with ``Sigma`` of spectrum
``j^-alpha`` in a Haar-random rotation and ``s_i ~ Gamma(4, 1/4)`` (row scales of coefficient of
variation 0.5, as real activations have), float32 ``.npy``; then, alternating, ``spectra fit X.npy
--json`` and ``spectra fit X.npy --population --json`` as their own processes, ``--runs`` times each.
Prints the median seconds of each, their ratio, and the population step's own split
(``fit.population.cost``: the fit, then the simulations).

    python bench/bench_population_cost.py --d 384 1024 --ratios 2 50
    python bench/bench_population_cost.py --before /path/to/a/checkout/of/an/earlier/commit

``--busy 2``: two processes spinning on the cores meanwhile (the loaded case). ``--before``: that
checkout's ``--population`` runs too (``PYTHONPATH``), alternating with this one's, and the ratio of the
medians. ``--simulate``: ``--population --population-route simulate`` runs too, alternating (the interval from
simulated samples against the default, from theory). ``--files F ...``: these inputs (their default window)
instead of the synthetic rows.

    python bench/bench_population_cost.py --files sample_data/minilm_layer5_tokens_4k_f16.npy \
        ../shared/data/minilm_layer5_tokens_20k_f16.npy --d 1024 --ratios 2 --simulate --runs 5
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np


def rows(d: int, n: int, alpha: float, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    q, r = np.linalg.qr(rng.standard_normal((d, d)))
    q *= np.sign(np.diag(r))
    scale = np.arange(1, d + 1, dtype=np.float64) ** (-alpha / 2)
    out = np.empty((n, d), dtype=np.float32)
    for i in range(0, n, 8192):  # (in blocks: the whole float64 product need not exist)
        m = min(8192, n - i)
        z = rng.standard_normal((m, d)) * scale * np.sqrt(rng.gamma(4.0, 0.25, size=m))[:, None]
        out[i:i + m] = z @ q.T
    return out


#: The checkout this script belongs to: its code is the one measured as "now".
HERE = Path(__file__).resolve().parents[1]


def run(args: list[str], code: str | None = None) -> tuple[float, dict]:
    """One whole ``spectra`` process of this checkout's code (``code``: another checkout's), started in the
    input's folder (a checkout in the working directory would come first on ``sys.path``)."""
    env = dict(os.environ, PYTHONPATH=str(Path(code).resolve() if code else HERE))
    t = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "spectra_cli", *args], capture_output=True, text=True, check=False,
                          env=env, cwd=Path(args[1]).parent)
    seconds = time.perf_counter() - t
    if done.returncode not in (0, 1):
        raise SystemExit(f"spectra {' '.join(args)} failed ({done.returncode}): {done.stderr.strip()[-400:]}")
    return seconds, json.loads(done.stdout)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--d", type=int, nargs="+", default=[384, 1024])
    ap.add_argument("--ratios", type=float, nargs="+", default=[2.0, 50.0])
    ap.add_argument("--alpha", type=float, default=1.0)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--before", help="a checkout of an earlier commit: its --population runs alternate with these")
    ap.add_argument("--busy", type=int, default=0, help="this many busy processes on the cores meanwhile (loaded)")
    ap.add_argument("--simulate", action="store_true", help="also --population-route simulate, alternating")
    ap.add_argument("--files", nargs="*", default=[], help="these inputs too (their default window)")
    a = ap.parse_args()
    if a.busy:
        sys.path.insert(0, str(Path(__file__).parent))
        from busy import busy

        with busy(a.busy, seconds=3600):
            table(a)
    else:
        table(a)


def table(a: argparse.Namespace) -> None:
    print("| input | n x d | plain s | --population s | ratio | " + ("before s | before / now | " if a.before else "")
          + ("simulate s | ratio | " if a.simulate else "")
          + "route | population fit s | interval s | evaluations | alpha (population) | 95 % interval |")
    print("| --- | ---: | ---: | ---: | ---: | " + ("---: | ---: | " if a.before else "")
          + ("---: | ---: | " if a.simulate else "") + "--- | ---: | ---: | ---: | ---: | --- |")
    with tempfile.TemporaryDirectory() as tmp:
        inputs: list[tuple[str, Path, list[str]]] = [(Path(f).name, Path(f).resolve(), []) for f in a.files]
        for d in a.d:
            for ratio in a.ratios:
                n = int(round(ratio * d))
                path = Path(tmp) / f"x_{d}_{n}.npy"
                np.save(path, rows(d, n, a.alpha, seed=d + n))
                inputs.append((f"Gamma(4) rows, j^-{a.alpha:g}", path, ["--window", f"11:{max(40, d // 10)}"]))
        for name, path, window in inputs:
            plain, pop, before, simulated = [], [], [], []
            report: dict = {}
            for _ in range(a.runs):
                plain.append(run(["fit", str(path), *window, "--json"])[0])
                s, report = run(["fit", str(path), *window, "--population", "--json"])
                pop.append(s)
                if a.before:
                    before.append(run(["fit", str(path), *window, "--population", "--json"], a.before)[0])
                if a.simulate:
                    simulated.append(run(["fit", str(path), *window, "--population", "--population-route",
                                          "simulate", "--json"])[0])
            p = report["fit"]["population"]
            mp, mq = statistics.median(plain), statistics.median(pop)
            then = f"{statistics.median(before):.2f} | {statistics.median(before) / mq:.2f} | " if before else ""
            sim = (f"{statistics.median(simulated):.2f} | {statistics.median(simulated) / mp:.1f} | "
                   if simulated else "")
            shape = f"{report['source']['n_rows']:,} x {report['source']['n_features']:,}"
            print(f"| {name} | {shape} | {mp:.2f} | {mq:.2f} | {mq / mp:.1f} | {then}{sim}"
                  f"{p['bootstrap']['route']} | {p['cost']['fit_s']:.2f} | "
                  f"{p['cost']['bootstrap_s']:.2f} | {p['cost']['evaluations']} | {p['alpha']:.4f} | "
                  f"{p['ci'][0]:.4f}..{p['ci'][1]:.4f} |", flush=True)


if __name__ == "__main__":
    main()
