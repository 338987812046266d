"""Reports of every command over sample_data/ and synthetic inputs, timings removed, so that a
refactoring can be shown to leave every number bit-identical.

    python bench/snapshot_reports.py --write /tmp/before.json     # before the change
    python bench/snapshot_reports.py --compare /tmp/before.json   # after: lists every differing field

Each case runs the installed ``spectra`` CLI (``--json``) in a scratch directory; the fields that
name the machine or the moment (timings, absolute paths, fingerprints of scratch files) are dropped.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "sample_data"
VOLATILE = {"timings", "fingerprint", "peak_bytes_estimate", "spectra_version", "created", "elapsed_s", "members",
            "fit_s", "bootstrap_s"}  # (the last two: the population step's own seconds)


def _make_inputs(tmp: Path) -> None:
    rng = np.random.default_rng(0)
    d = 64
    scales = np.arange(1, d + 1) ** -0.6
    X = rng.standard_normal((3000, d)) * scales
    np.save(tmp / "x.npy", X)
    for i in range(3):
        np.save(tmp / f"shard{i}.npy", X[i * 1000:(i + 1) * 1000])
    np.save(tmp / "w.npy", rng.uniform(0.1, 2.0, 3000))
    np.save(tmp / "ctx.npy", rng.standard_normal((60, 8, 24)).astype(np.float32))
    mask = np.ones((60, 8), dtype=np.int8)
    mask[40:, 6:] = 0  # the last 20 windows padded after position 6
    np.save(tmp / "mask.npy", mask)


def _cases(tmp: Path) -> dict[str, list[str]]:
    s5 = str(SAMPLE / "minilm_layer5_tokens_4k_f16.npy")
    pq = str(SAMPLE / "minilm_layer5_tokens_4k.parquet")
    ctx = str(SAMPLE / "minilm_layer3_context32_128_f16.npy")
    emb = str(SAMPLE / "minilm_sentence_embeddings_1k.npy")
    x = str(tmp / "x.npy")
    return {
        "fit sample": ["fit", s5],
        "fit sample ci": ["fit", s5, "--ci", "--ci-replicates", "20", "--window", "11:38", "--window", "5:60"],
        "fit sample population": ["fit", s5, "--population"],  # (n/d = 10.7: the first-order route)
        "fit x population": ["fit", x, "--rows", "0:300", "--population", "--window", "3:30"],  # (simulated)
        "fit parquet": ["fit", pq, "--column", "emb", "--density", "--uncentered"],
        "fit emb extras": ["fit", emb, "--shuffled-control", "--partition-isotropy", "--isoscore",
                           "--counting", "0.01", "--capacity", "0.1", "--model", "broken"],
        "fit x weighted": ["fit", x, "--weights", str(tmp / "w.npy"), "--window", "3:30", "--method", "logspaced"],
        "fit x rows sample": ["fit", x, "--rows", "100:2900", "--sample", "1500", "--seed", "3",
                              "--precision", "float32", "--block-rows", "500"],
        "fit x ci": ["fit", x, "--ci", "--ci-replicates", "30", "--window", "3:30"],
        "fit x small-n": ["fit", x, "--rows", "0:40"],
        "fit moments": ["fit", str(tmp / "m.npz"), "--window", "3:30"],
        "spectrum sample": ["spectrum", s5],
        "spectrum x top": ["spectrum", x, "--top", "10"],
        "isotropy emb": ["isotropy", emb, "--isoscore"],
        "whiten x": ["whiten", x, "-o", str(tmp / "white.npy"), "--method", "pca", "--k", "20"],
        "sequence ctx": ["sequence", ctx, "--positions", "1:", "--window", "5:100"],
        "sequence synth masked": ["sequence", str(tmp / "ctx.npy"), "--mask", str(tmp / "mask.npy")],
        "fit ctx pooled": ["fit", str(tmp / "ctx.npy"), "--pool", "mean"],
        "info sample": ["info", pq],
    }


def _strip(doc: object) -> object:
    if isinstance(doc, dict):
        return {k: _strip(v) for k, v in doc.items() if k not in VOLATILE}
    if isinstance(doc, list):
        return [_strip(v) for v in doc]
    if isinstance(doc, str) and "/tmp" in doc:
        return "<tmp path>"
    return doc


def snapshot() -> dict[str, object]:
    out: dict[str, object] = {}
    with tempfile.TemporaryDirectory() as t:
        tmp = Path(t)
        _make_inputs(tmp)
        subprocess.run(["spectra", "moments", str(tmp / "x.npy"), "-o", str(tmp / "m.npz")], check=True,
                       capture_output=True)
        for name, args in _cases(tmp).items():
            r = subprocess.run(["spectra", *args, "--json"], capture_output=True, text=True, cwd=tmp,
                               env={**os.environ, "COLUMNS": "200"})
            doc = json.loads(r.stdout) if r.stdout.strip() else r.stderr.strip()
            out[name] = {"rc": r.returncode, "report": _strip(doc)}
    return out


def _diff(a: object, b: object, where: str, out: list[str]) -> None:
    if isinstance(a, dict) and isinstance(b, dict):
        for k in sorted(set(a) | set(b)):
            if k not in a or k not in b:
                out.append(f"{where}.{k}: {'added' if k not in a else 'removed'}")
            else:
                _diff(a[k], b[k], f"{where}.{k}", out)
    elif isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            _diff(x, y, f"{where}[{i}]", out)
    elif a != b:
        out.append(f"{where}: {json.dumps(a)[:120]} -> {json.dumps(b)[:120]}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    g = ap.add_mutually_exclusive_group(required=True)
    g.add_argument("--write", metavar="FILE")
    g.add_argument("--compare", metavar="FILE")
    args = ap.parse_args()
    snap = snapshot()
    if args.write:
        Path(args.write).write_text(json.dumps(snap, indent=1, sort_keys=True))
        print(f"wrote {args.write}: {len(snap)} cases")
        return 0
    before = json.loads(Path(args.compare).read_text())
    diffs: list[str] = []
    _diff(before, snap, "", diffs)
    for line in diffs:
        print(line)
    print(f"{len(snap)} cases, {len(diffs)} differing fields")
    return 1 if diffs else 0


if __name__ == "__main__":
    sys.exit(main())
