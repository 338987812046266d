"""Regenerate golden.json from sample_data with plain numpy (independent of spectra).

Run from the repository root: python tests/golden/make_golden.py
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]


def golden(path: Path) -> dict:
    X = np.load(path).astype(np.float64)
    n, d = X.shape
    C = np.cov(X, rowvar=False)  # two-pass, ddof=1
    lam = np.linalg.eigvalsh(C)[::-1]
    floor = (d + np.sqrt(min(n, 1000))) * np.finfo(float).eps * lam[0]  # the tests stream blocks of 1000 rows
    res = np.where(lam > floor, lam, 0.0)
    j = np.arange(11, d // 10 + 1)
    slope, icpt = np.polyfit(np.log(j), np.log(lam[j - 1]), 1)
    q = res[res > 0] / res.sum()
    cum = np.cumsum(res) / res.sum()
    s = np.linalg.svd(X, compute_uv=False)
    p = s / s.sum() + 1e-7
    return {
        "how": "numpy: np.cov (ddof=1) + eigvalsh, np.polyfit on ranks 11..d//10, np.linalg.svd for RankMe",
        "eigenvalues_top5": lam[:5].tolist(),
        "alpha": -slope,
        "intercept": icpt,
        "participation_ratio": res.sum() ** 2 / (res @ res),
        "entropy_rank": float(np.exp(-(q * np.log(q)).sum())),
        "stable_rank": res.sum() / res[0],
        "rankme": float(np.exp(-(p * np.log(p)).sum())),
        "k90": int(np.searchsorted(cum, 0.90) + 1),
        "k99": int(np.searchsorted(cum, 0.99) + 1),
        "numerical_rank": int((lam > floor).sum()),
    }


if __name__ == "__main__":
    out = {
        name: golden(ROOT / "sample_data" / name)
        for name in ("minilm_layer5_tokens_4k_f16.npy", "minilm_sentence_embeddings_1k.npy")
    }
    (Path(__file__).parent / "golden.json").write_text(json.dumps(out, indent=2) + "\n")
