"""How honest the population exponent (``fit(..., population=True)``) is where its model is wrong.

``fit.population`` fits a power law ``tau_j = C j^-alpha`` over the window (with a free tail past it) to
the sample spectrum of separable rows ``sqrt(s_i) Sigma^(1/2) z_i``, ``z_i`` Gaussian. Each case below
breaks one of those assumptions and asks whether the estimate, its 95 % interval and its notes stay honest:

- ``broken``: ``tau_j = j^-0.6`` up to rank 60, ``j^-1.4`` after (continuous); Gaussian rows.
- ``cutoff``: ``tau_j = j^-1 exp(-j / 150)``; Gaussian rows.
  For both (``--d``, ``--ratios``, ``--window``) the truth is the window's population slope: the OLS slope
  of ``-log tau_j`` on ``log j`` over every rank of the window. Per n/d: the median estimate, how many
  intervals hold the truth, how many runs carry a message (population notes or report warnings) with
  "power-law population" or "does not fit" in it (``flagged``), how many got no estimate at all, the
  median interval half-width and match RMS.
- ``laplace``: independent Laplace coordinates of unit variance times ``sqrt(tau_j)``, ``tau_j = j^-alpha``
  (``--laplace-d``, ``--laplace-window``): the coverage of alpha, the median error and the median
  deconvolved row-scale spread ``fit.population.rows.cv2_scales`` (the truth is 0: the rows have no
  common scale; their norms spread only through the coordinates' kurtosis).
- ``sample``: the real activations ``--data`` (default: layer 1 of MiniLM, 20,000 x 384, float16), the
  file with ``sample=384, seed=s`` and the same rows as an in-memory float64 array (the rows
  ``sources.rows.iter_selected`` picks); checks ``low <= alpha <= high`` and ``0 <= low, high <= 12``.
  Skipped with a message when the file is missing.
- ``pr_small_n``: ``rank.participation_ratio_population`` at ``d = 256`` against the truth
  ``(sum tau)^2 / sum tau^2``, ``tau_j = j^-0.5``, Gaussian rows, n in ``--pr-rows``.

Data are drawn from ``default_rng([case, seed, ...])`` and every bootstrap is seeded with ``ci_seed = seed``
(the ``sample`` case keeps the library's default ``ci_seed``, as in ``fit(path, sample=384, seed=s)``).
Fits run in ``--jobs`` worker processes, each on one BLAS thread (unless the environment caps them).

    python bench/bench_population_honest.py                       # every case: 138 fits, 6-10 min on 2 cores
    python bench/bench_population_honest.py --quick                # 3 seeds, n/d 1 and 4: about a third
    python bench/bench_population_honest.py --cases broken,cutoff --seeds 3 --ratios 1 4
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import time
import warnings
from collections import Counter
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context
from pathlib import Path
from typing import Any

import numpy as np

CASES = ("broken", "cutoff", "laplace", "sample", "pr_small_n")
DEFAULT_DATA = "../shared/data/minilm_layer1_tokens_20k_f16.npy"  # (not in the repository)
#: A message counts as the fit saying its power-law population does not fit when it holds one of these.
FLAG_PATTERNS = ("power-law population", "does not fit")
#: The model's range of exponents (``spectra_cli.analysis.population.ALPHA_BOUNDS``).
BOUNDS = (0.0, 12.0)
#: Report warnings every fit at n/d < 10 carries; left out of the list of other messages.
ROUTINE = ("tail eigenvalues of the sample covariance are biased", "are sampling zeros")


# ------------------------------------------------------------------------------------------------
# Populations and rows
# ------------------------------------------------------------------------------------------------


def window_of(text: str) -> tuple[int, int]:
    k0, k1 = (int(v) for v in text.split(":"))
    return k0, k1


def tau_of(case: str, d: int, alpha: float = 1.0) -> np.ndarray:
    j = np.arange(1, d + 1, dtype=np.float64)
    if case == "broken":
        return np.where(j <= 60, j ** -0.6, 60.0 ** -0.6 * (j / 60.0) ** -1.4)
    if case == "cutoff":
        return j ** -1.0 * np.exp(-j / 150.0)
    return j ** -alpha  # laplace, pr_small_n


def window_slope(tau: np.ndarray, window: tuple[int, int]) -> float:
    """The OLS slope of ``-log tau_j`` on ``log j`` over every rank of the window (1-based, inclusive)."""
    k0, k1 = window
    x = np.log(np.arange(k0, k1 + 1, dtype=np.float64))
    y = np.log(tau[k0 - 1:k1])
    xc = x - x.mean()
    return float(-(xc @ (y - y.mean())) / (xc @ xc))


def participation_ratio(tau: np.ndarray) -> float:
    return float(tau.sum() ** 2 / (tau @ tau))


def synthetic_rows(case: str, n: int, tau: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    if case == "laplace":
        Z = rng.laplace(0.0, 1.0 / np.sqrt(2.0), (n, tau.size))  # unit variance
    else:
        Z = rng.standard_normal((n, tau.size))
    return Z * np.sqrt(tau)


def selected_rows(path: str, sample: int, seed: int) -> np.ndarray:
    """The rows ``fit(path, sample=sample, seed=seed)`` reads (``spectra_cli.sources.rows.iter_selected``),
    in file order, as float64."""
    data = np.load(path, mmap_mode="r")
    data = data.reshape(-1, data.shape[-1])
    rng = np.random.default_rng(seed)
    chosen = np.sort(rng.choice(len(data), size=sample, replace=False))
    return np.asarray(data[chosen], dtype=np.float64)


# ------------------------------------------------------------------------------------------------
# One fit (runs in a worker)
# ------------------------------------------------------------------------------------------------


def run_one(task: dict[str, Any]) -> dict[str, Any]:
    """One ``fit(..., population=True)``; returns the figures the tables need (a small, picklable dict)."""
    import spectra_cli as spectra

    case, seed = task["case"], task["seed"]
    t0 = time.perf_counter()
    if case == "sample":
        data: Any = task["path"] if task["source"] == "file" else selected_rows(task["path"], task["sample"], seed)
        kwargs: dict[str, Any] = {"sample": task["sample"], "seed": seed} if task["source"] == "file" else {}
    else:
        tau = tau_of(case, task["d"], task.get("alpha", 1.0))
        rng = np.random.default_rng([CASES.index(case), seed, task["n"], int(round(task.get("alpha", 0) * 100))])
        data = synthetic_rows(case, task["n"], tau, rng)
        kwargs = {"ci_seed": seed}
    out: dict[str, Any] = dict(task)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            rep = spectra.fit(data, window=task["window"], population=True, **kwargs).to_dict()
    except Exception as exc:  # noqa: BLE001 - a crash is a result here
        out.update(error=f"{type(exc).__name__}: {exc}", seconds=time.perf_counter() - t0)
        return out
    pop = rep["fit"].get("population")
    out.update(seconds=time.perf_counter() - t0, warnings=list(rep.get("warnings") or []),
               naive=rep["fit"]["alpha"], pr=rep["rank"].get("participation_ratio_population"),
               pr_sample=rep["rank"].get("participation_ratio"), population=None)
    if pop is not None:
        out["population"] = {"alpha": pop["alpha"], "low": pop["ci"][0], "high": pop["ci"][1],
                             "notes": list(pop.get("notes") or []), "match_rms": pop.get("match_rms"),
                             "cv2_scales": (pop.get("rows") or {}).get("cv2_scales", np.nan),
                             "fits": (pop.get("bend") or {}).get("fits", True),
                             "window": pop.get("window")}
    return out


# ------------------------------------------------------------------------------------------------
# Tasks and tables
# ------------------------------------------------------------------------------------------------


def tasks_for(case: str, args: argparse.Namespace) -> list[dict[str, Any]]:
    if case in ("broken", "cutoff"):
        return [{"case": case, "d": args.d, "n": int(r * args.d), "ratio": r, "window": args.window, "seed": s}
                for r in args.ratios for s in range(args.seeds)]
    if case == "laplace":
        return [{"case": case, "d": args.laplace_d, "n": int(r * args.laplace_d), "ratio": r, "alpha": a,
                 "window": args.laplace_window, "seed": s}
                for a in args.alphas for r in args.ratios for s in range(args.laplace_seeds)]
    if case == "sample":
        if not Path(args.data).is_file():
            return []
        return [{"case": case, "path": args.data, "sample": args.sample, "window": args.sample_window,
                 "source": src, "seed": s} for s in range(1, args.sample_seeds + 1) for src in ("file", "array")]
    if case == "pr_small_n":
        return [{"case": case, "d": args.pr_d, "n": n, "ratio": n / args.pr_d, "alpha": 0.5, "window": args.pr_window,
                 "seed": s} for n in args.pr_rows for s in range(args.seeds)]
    raise ValueError(case)


def messages(r: dict[str, Any]) -> list[str]:
    pop = r.get("population") or {}
    return [f"note: {m}" for m in pop.get("notes", [])] + [f"warning: {m}" for m in r.get("warnings", [])]


def flagged(r: dict[str, Any]) -> bool:
    return any(p in m for m in messages(r) for p in FLAG_PATTERNS)


def shape(message: str) -> str:
    """A message with its numbers blanked, to count messages that differ only in them."""
    return re.sub(r"-?\d+(\.\d+)?(e[-+]?\d+)?", "#", message)


def fmt(v: float | None, spec: str = ".3f") -> str:
    return "nan" if v is None or not np.isfinite(v) else format(v, spec)


def med(values: list[float]) -> float:
    v = [x for x in values if x is not None and np.isfinite(x)]
    return float(np.median(v)) if v else float("nan")


def print_messages(results: list[dict[str, Any]]) -> None:
    """The distinct messages (those differing only in their numbers counted as one; the first one seen is
    printed): the flagged ones, then the other notes and warnings (the routine n/d < 10 ones left out)."""
    hits: Counter[str] = Counter()
    other: Counter[str] = Counter()
    example: dict[str, str] = {}
    for r in results:
        if "error" in r:
            continue
        for m in messages(r):
            if any(p in m for p in ROUTINE):
                continue
            (hits if any(p in m for p in FLAG_PATTERNS) else other)[shape(m)] += 1
            example.setdefault(shape(m), m)
    for title, found in (("flagged messages", hits), ("other notes/warnings", other)):
        print(f"  {title}:" + ("" if found else " none"))
        for s, k in found.most_common():
            print(f"    [{k}x] {example[s]}")
    errors = Counter(r["error"] for r in results if "error" in r)
    for m, k in errors.items():
        print(f"  ERROR [{k}x] {m}")


def table_truth(case: str, results: list[dict[str, Any]], args: argparse.Namespace) -> None:
    """broken / cutoff: one row per n/d against the window's population slope."""
    truth = window_slope(tau_of(case, args.d), window_of(args.window))
    print(f"\n== {case}: d = {args.d}, window {args.window}, {args.seeds} seeds; truth (window's population "
          f"slope) = {truth:.4f}")
    print(f"{'n/d':>5} {'truth':>7} {'median':>7} {'naive':>7} {'covered':>8} {'flagged':>8} {'no est':>7} "
          f"{'half-w':>7} {'rms':>7} {'s':>6}")
    for ratio in args.ratios:
        rs = [r for r in results if r["ratio"] == ratio]
        pops = [r["population"] for r in rs if r.get("population")]
        cov = sum(p["low"] <= truth <= p["high"] for p in pops)
        print(f"{ratio:>5g} {truth:>7.4f} {fmt(med([p['alpha'] for p in pops]), '.4f'):>7} "
              f"{fmt(med([r.get('naive') for r in rs if 'naive' in r]), '.4f'):>7} {f'{cov}/{len(rs)}':>8} "
              f"{f'{sum(map(flagged, rs))}/{len(rs)}':>8} {len(rs) - len(pops):>7} "
              f"{fmt(med([(p['high'] - p['low']) / 2 for p in pops]), '.4f'):>7} "
              f"{fmt(med([p['match_rms'] for p in pops]), '.4f'):>7} {med([r['seconds'] for r in rs]):>6.1f}")
    print_messages(results)


def table_laplace(results: list[dict[str, Any]], args: argparse.Namespace) -> None:
    print(f"\n== laplace: independent Laplace coordinates, d = {args.laplace_d}, window {args.laplace_window}, "
          f"{args.laplace_seeds} seeds; cv2_scales truth = 0")
    print(f"{'alpha':>5} {'n/d':>5} {'median err':>10} {'naive err':>9} {'covered':>8} {'flagged':>8} {'no est':>7} "
          f"{'half-w':>7} {'cv2_scales':>10} {'s':>6}")
    for a in args.alphas:
        for ratio in args.ratios:
            rs = [r for r in results if r["alpha"] == a and r["ratio"] == ratio]
            pops = [r["population"] for r in rs if r.get("population")]
            cov = sum(p["low"] <= a <= p["high"] for p in pops)
            print(f"{a:>5g} {ratio:>5g} {fmt(med([p['alpha'] - a for p in pops]), '+.4f'):>10} "
                  f"{fmt(med([r['naive'] - a for r in rs if 'naive' in r]), '+.4f'):>9} {f'{cov}/{len(rs)}':>8} "
                  f"{f'{sum(map(flagged, rs))}/{len(rs)}':>8} {len(rs) - len(pops):>7} "
                  f"{fmt(med([(p['high'] - p['low']) / 2 for p in pops]), '.4f'):>7} "
                  f"{fmt(med([p['cv2_scales'] for p in pops]), '.4f'):>10} {med([r['seconds'] for r in rs]):>6.1f}")
    print_messages(results)


def table_sample(results: list[dict[str, Any]], args: argparse.Namespace) -> None:
    print(f"\n== sample: {args.data}, sample = {args.sample}, window {args.sample_window}; file vs the same rows "
          "in memory (float64)")
    if not results:
        print(f"  skipped: {args.data} not found")
        return
    print(f"{'seed':>4} {'source':>6} {'alpha':>8} {'low':>8} {'high':>8} {'naive':>7} {'in ci':>5} {'in 0..12':>8} "
          f"{'flagged':>7} {'s':>5}")
    bad = 0
    for r in results:
        p = r.get("population")
        if p is None:
            why = r.get("error") or "no population estimate"
            print(f"{r['seed']:>4} {r['source']:>6}  {why}")
            bad += 1
            continue
        inside = p["low"] <= p["alpha"] <= p["high"]
        bounded = BOUNDS[0] <= p["low"] and p["high"] <= BOUNDS[1]
        bad += (not inside) + (not bounded)
        print(f"{r['seed']:>4} {r['source']:>6} {p['alpha']:>8.4f} {p['low']:>8.4f} {p['high']:>8.4f} "
              f"{r['naive']:>7.4f} {'yes' if inside else 'NO':>5} {'yes' if bounded else 'NO':>8} "
              f"{'yes' if flagged(r) else 'no':>7} {r['seconds']:>5.1f}")
    pairs = {}
    for r in results:
        if r.get("population"):
            pairs.setdefault(r["seed"], {})[r["source"]] = r["population"]["alpha"]
    diff = [abs(v["file"] - v["array"]) for v in pairs.values() if len(v) == 2]
    print(f"  checks failed: {bad}; max |alpha(file) - alpha(array)| = {fmt(max(diff) if diff else None, '.2e')}")
    print_messages(results)


def table_pr(results: list[dict[str, Any]], args: argparse.Namespace) -> None:
    truth = participation_ratio(tau_of("pr_small_n", args.pr_d, 0.5))
    print(f"\n== pr_small_n: rank.participation_ratio_population, d = {args.pr_d}, tau_j = j^-0.5, Gaussian rows, "
          f"{args.seeds} seeds; truth = {truth:.2f}")
    print(f"{'n':>5} {'truth':>7} {'median':>7} {'min':>7} {'max':>7} {'sd':>6} {'sample PR':>9} {'none':>5} {'s':>5}")
    for n in args.pr_rows:
        rs = [r for r in results if r["n"] == n]
        v = [r["pr"] for r in rs if r.get("pr") is not None]
        arr = np.array(v) if v else np.array([np.nan])
        print(f"{n:>5} {truth:>7.2f} {fmt(med(v), '.2f'):>7} {fmt(float(arr.min()), '.2f'):>7} "
              f"{fmt(float(arr.max()), '.2f'):>7} {fmt(float(arr.std(ddof=1)) if arr.size > 1 else None, '.2f'):>6} "
              f"{fmt(med([r.get('pr_sample') for r in rs]), '.2f'):>9} {len(rs) - len(v):>5} "
              f"{med([r['seconds'] for r in rs]):>5.1f}")
    errors = Counter(r["error"] for r in results if "error" in r)
    for m, k in errors.items():
        print(f"  ERROR [{k}x] {m}")


# ------------------------------------------------------------------------------------------------


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cases", default=",".join(CASES), help=f"comma-separated, of {', '.join(CASES)}")
    ap.add_argument("--seeds", type=int, default=6, help="seeds of broken, cutoff and pr_small_n")
    ap.add_argument("--d", type=int, default=512, help="width of broken and cutoff")
    ap.add_argument("--ratios", type=float, nargs="+", default=[1, 2, 4], help="n/d of broken, cutoff, laplace")
    ap.add_argument("--window", default="11:256", help="window of broken and cutoff")
    ap.add_argument("--laplace-d", type=int, default=256)
    ap.add_argument("--laplace-window", default="11:128")
    ap.add_argument("--laplace-seeds", type=int, default=4)
    ap.add_argument("--alphas", type=float, nargs="+", default=[0.5, 1.0, 1.5], help="exponents of laplace")
    ap.add_argument("--data", default=DEFAULT_DATA, help="activations (.npy, rows x features) of the sample case")
    ap.add_argument("--sample", type=int, default=384, help="rows drawn from --data")
    ap.add_argument("--sample-seeds", type=int, default=6, help="sample seeds 1..N")
    ap.add_argument("--sample-window", default="11:100")
    ap.add_argument("--pr-d", type=int, default=256)
    ap.add_argument("--pr-rows", type=int, nargs="+", default=[64, 128, 512])
    ap.add_argument("--pr-window", default="11:40", help="window of pr_small_n (its population fit is not read)")
    ap.add_argument("--jobs", type=int, default=2, help="worker processes (each on one BLAS thread)")
    ap.add_argument("--quick", action="store_true",
                    help="a smoke run: 3 seeds (2 for laplace, 3 sample seeds), n/d 1 and 4")
    args = ap.parse_args()
    if args.quick:
        args.seeds, args.laplace_seeds, args.sample_seeds, args.ratios = 3, 2, 3, [1.0, 4.0]
    cases = [c.strip() for c in args.cases.split(",") if c.strip()]
    unknown = sorted(set(cases) - set(CASES))
    if unknown:
        ap.error(f"unknown case(s) {', '.join(unknown)}; choose from {', '.join(CASES)}")
    if not any(os.environ.get(v) for v in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")):
        os.environ["OPENBLAS_NUM_THREADS"] = "1"  # inherited by the (spawned) workers
    t0 = time.perf_counter()
    print(f"bench_population_honest: cases {', '.join(cases)}; {args.jobs} worker(s)", flush=True)
    with ProcessPoolExecutor(max_workers=args.jobs, mp_context=get_context("spawn")) as pool:
        pending = [(case, [pool.submit(run_one, t) for t in tasks_for(case, args)]) for case in cases]
        for case, futures in pending:
            results = [f.result() for f in futures]
            if case in ("broken", "cutoff"):
                table_truth(case, results, args)
            elif case == "laplace":
                table_laplace(results, args)
            elif case == "sample":
                table_sample(results, args)
            else:
                table_pr(results, args)
            sys.stdout.flush()
    print(f"\ntotal {time.perf_counter() - t0:.0f} s")


if __name__ == "__main__":
    main()
