"""Are the standard errors honest on the rows users have? A check that can fail.

For each row law and shape, `spectra.fit` runs on many samples of one population (or disjoint chunks of one real
dump), and for every default field with a standard error (alpha over the window, participation ratio, entropy
rank, stable rank, top-PC share) this prints:

- SE / spread: the root mean square of the stated SE over the standard deviation of the field across the samples
  (1 is honest: the stated variance against the actual one; a plain mean of the SEs falls below the spread by
  Jensen's inequality wherever the SE itself varies much between samples, as it does under heavy tails: each cell
  gives both, RMS/mean);
- coverage: how often value +- t SE (t: Student's 97.5 % point with the report's degrees of freedom, 1.96 on the
  first-order route) holds the field's mean over the samples (nominal 95 %);
- the route the SEs took and the median design effect the reports state;
- null flags: `compare` of two samples of the same population (two halves of one dump for the real rows): the
  share of comparisons in which any field is flagged significant (Benjamini-Hochberg at 5 %).

Row laws: independent Gaussian rows; Laplace on the feature axes; a mixture of three clusters; "sentences" (blocks
of 16 rows sharing half their variance); AR(1) rows (rho = 0.5); Student-t rows (5 dof, elliptical); independent
Laplace sources in rotated directions; real all-MiniLM-L6-v2 tokens of layer 3 in runs of 32 tokens of one text
(contiguous chunks of whole windows) and the same rows shuffled. Then the power: two Gaussian samples whose
population alphas differ by 0.05, and by 4 of the fit's standard errors.

    python bench/bench_se_honesty.py                  # every law, 60 samples a cell (about 3 minutes on 2 cores)
    python bench/bench_se_honesty.py --samples 30 --laws gaussian,sentences
"""

from __future__ import annotations

import argparse
import math
import warnings
from pathlib import Path

import numpy as np

import spectra_cli as spectra
from spectra_cli.run.compare import compare_rows

FIELDS = (("fit", "alpha", ("fit", "se")), ("rank", "participation_ratio", ("rank", "se", "participation_ratio")),
          ("rank", "entropy_rank", ("rank", "se", "entropy_rank")),
          ("rank", "stable_rank", ("rank", "se", "stable_rank")),
          ("isotropy", "top_pc_share", ("isotropy", "se", "top_pc_share")))
SHARED = Path(__file__).resolve().parents[2] / "shared" / "data"
ALPHA = 1.0  # the populations' eigenvalues j^-ALPHA


def _get(doc: dict, path: tuple[str, ...]) -> float | None:
    for k in path:
        doc = doc.get(k) if isinstance(doc, dict) else None
    return doc if isinstance(doc, int | float) and not isinstance(doc, bool) else None


def rows(law: str, n: int, d: int, rng: np.random.Generator, *, alpha: float = ALPHA) -> np.ndarray:
    sd = np.arange(1, d + 1) ** (-alpha / 2)
    if law == "gaussian":
        Z = rng.standard_normal((n, d))
    elif law == "laplace-axes":
        Z = rng.laplace(size=(n, d)) / math.sqrt(2.0)
    elif law == "mixture":
        centres = np.random.default_rng(99).standard_normal((3, d)) * 1.5
        Z = rng.standard_normal((n, d)) + centres[rng.integers(0, 3, n)]
    elif law == "sentences":  # blocks of 16 rows sharing half their variance
        shared = np.repeat(rng.standard_normal((-(-n // 16), d)), 16, axis=0)[:n]
        Z = math.sqrt(0.5) * rng.standard_normal((n, d)) + math.sqrt(0.5) * shared
    elif law == "ar1":
        E = rng.standard_normal((n, d))
        Z = np.empty_like(E)
        Z[0] = E[0]
        for t in range(1, n):
            Z[t] = 0.5 * Z[t - 1] + math.sqrt(0.75) * E[t]
    elif law == "student-t":
        Z = rng.standard_normal((n, d)) * np.sqrt(3.0 / rng.chisquare(5, size=(n, 1)))  # unit variance
    elif law == "rotated-laplace":  # independent Laplace sources mixed by a rotation, then the directions' scales:
        # the eigen-directions are the axes, and each is a mixture of every source (its own kurtosis)
        Q, _ = np.linalg.qr(np.random.default_rng(98).standard_normal((d, d)))
        Z = (rng.laplace(size=(n, d)) / math.sqrt(2.0)) @ Q.T
    else:
        raise ValueError(law)
    return Z * sd


def _study(name: str, samples: list[np.ndarray], pairs: list[tuple[np.ndarray, np.ndarray]], window: str) -> dict:
    docs = [spectra.fit(X, window=window).to_dict() for X in samples]
    out = {"name": name, "n": len(samples[0]), "d": samples[0].shape[1], "samples": len(samples)}
    method = docs[0]["rank"]["se_method"] or {}
    out["route"] = method.get("route", "?")
    out["groups"] = float(np.mean([(d["rank"].get("se_method") or {}).get("groups", 0) for d in docs]))
    deffs = [d["rank"]["se_method"].get("design_effect") for d in docs if d["rank"].get("se_method")]
    deffs = [x for x in deffs if x is not None]
    out["deff"] = float(np.median(deffs)) if deffs else float("nan")
    out["dependent_warned"] = float(np.mean([any("look dependent" in w for w in d["warnings"]) for d in docs]))
    for sec, key, se_path in FIELDS:
        v = np.array([_get(d, (sec, key)) for d in docs], dtype=float)
        e = np.array([_get(d, se_path) for d in docs], dtype=float)
        dof = np.array([(d["rank"].get("se_method") or {}).get("dof") or np.inf for d in docs], dtype=float)
        from scipy.stats import t as student

        q = student.ppf(0.975, dof)
        ok = np.isfinite(v) & np.isfinite(e)
        v, e, q = v[ok], e[ok], q[ok]
        spread = v.std(ddof=1)
        out[key] = (float(np.sqrt(np.mean(e * e)) / spread) if spread > 0 else float("nan"),
                    float(np.mean(np.abs(v - v.mean()) <= q * e)), float(e.mean() / spread) if spread > 0 else 0.0)
    flags = 0
    for A, B in pairs:
        a, b = spectra.fit(A, window=window).to_dict(), spectra.fit(B, window=window).to_dict()
        flags += any(r.significant for r in compare_rows(a, b))
    out["null_flags"] = flags / max(len(pairs), 1)
    return out


#: Student-t rows: their statistics' spread over 60 samples is itself uncertain by about a quarter (a top-PC share's
#: spread from 60 samples had a 95 % bootstrap interval of 0.55-1.38 times its own), so their cells take this many
#: times the samples for the SE / spread ratio and the coverage (the compare pairs stay at --samples).
HEAVY = {"student-t": 4}


def simulated(law: str, n: int, d: int, window: str, count: int) -> dict:
    samples = [rows(law, n, d, np.random.default_rng(1000 + s)) for s in range(count * HEAVY.get(law, 1))]
    pairs = [(rows(law, n, d, np.random.default_rng(5000 + 2 * s)),
              rows(law, n, d, np.random.default_rng(5001 + 2 * s))) for s in range(count)]
    return _study(law, samples, pairs, window)


def real(shuffled: bool, n: int, d: int, window: str) -> dict | None:
    path = SHARED / "minilm_layer3_context32_1024_f16.npy"
    if not path.exists():
        return None
    X = np.load(path).astype(np.float64).reshape(-1, 384)  # runs of 32 tokens of one text, in order
    cols = np.sort(np.random.default_rng(7).choice(384, d, replace=False))
    X = X[:, cols]
    if shuffled:
        X = X[np.random.default_rng(8).permutation(len(X))]
    chunks = [X[i:i + n] for i in range(0, len(X) - n + 1, n)]
    pairs = [(c[: n // 2], c[n // 2:]) for c in chunks]  # two halves of one chunk: nothing changed between them
    return _study("real tokens " + ("shuffled" if shuffled else "contiguous"), chunks, pairs, window)


def power(count: int, n: int = 960, d: int = 192, window: str = "21:150") -> None:
    pilot = spectra.fit(rows("gaussian", n, d, np.random.default_rng(1)), window=window)
    se = pilot.fit.se
    for shift, label in ((0.05, "alpha + 0.05"), (4 * se, f"alpha + 4 SE of one fit ({4 * se:.3f})"),
                         (4 * math.sqrt(2) * se, f"alpha + 4 SE of the change ({4 * math.sqrt(2) * se:.3f})")):
        flagged = 0
        for s in range(count):
            a = spectra.fit(rows("gaussian", n, d, np.random.default_rng(9000 + 2 * s)), window=window).to_dict()
            b = spectra.fit(rows("gaussian", n, d, np.random.default_rng(9001 + 2 * s), alpha=ALPHA + shift),
                            window=window).to_dict()
            flagged += any(r.field == "fit.alpha" and r.significant for r in compare_rows(a, b))
        print(f"power, Gaussian d = {d}, n = {n}, window {window}: {label} flagged in {flagged}/{count} "
              f"({100 * flagged / count:.0f} %)")


def show(r: dict) -> None:
    cells = " | ".join(f"{r[k][0]:4.2f}/{r[k][2]:4.2f} {100 * r[k][1]:3.0f}%" for _, k, _ in FIELDS)
    print(f"| {r['name']:<22} | {r['d']:>3} | {r['n']:>4} | {r['samples']:>3} | {r['groups']:>4.1f} | "
          f"{r['deff']:5.2f} | {100 * r['dependent_warned']:3.0f}% | {cells} | {100 * r['null_flags']:3.0f}% |")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--samples", type=int, default=60)
    ap.add_argument("--laws", default="gaussian,laplace-axes,mixture,sentences,ar1,student-t,rotated-laplace,real")
    args = ap.parse_args()
    warnings.simplefilter("ignore")
    laws = args.laws.split(",")
    print("| rows | d | n | samples | groups (mean) | design effect (median) | dependence said | alpha | participation "
          "ratio | entropy rank | stable rank | top-PC share | compare null flags |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | --- | --- | --- | --- | --- | ---: |")
    for d, n, window in ((96, 480, "5:60"), (192, 960, "21:150")):
        for law in laws:
            if law == "real":
                for shuffled in (False, True):
                    r = real(shuffled, n, d, window)
                    if r is not None:
                        show(r)
                continue
            show(simulated(law, n, d, window, args.samples))
        if "student-t" in laws:
            show(simulated("student-t", 2 * d, d, "5:30" if d == 96 else "11:60", args.samples))
    power(args.samples)


if __name__ == "__main__":
    main()
