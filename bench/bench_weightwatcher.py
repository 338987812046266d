"""spectra's ``convention="weightwatcher"`` against WeightWatcher itself, every column, on a real model.

    /tmp/wwvenv/bin/python bench/ww_reference.py /tmp/wwref       # WeightWatcher 0.7.7's numbers (see there)
    python bench/bench_weightwatcher.py /tmp/wwref                 # spectra on the same weights, compared

Prints, for every column of WeightWatcher's details (``analyze(mp_fit=True)``), the largest relative
difference over the layers (matched by name), the layers each tool analysed, and ``get_summary()``
against ``BatchResult.summary()``; and the time of each (WeightWatcher's from its run is not measured here:
``ww_reference.py`` runs both of its analyses).
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path


def main() -> int:
    import numpy as np
    import pandas as pd

    import spectra_cli as spectra

    ref = Path(sys.argv[1] if len(sys.argv) > 1 else "/tmp/wwref")
    theirs = pd.read_csv(ref / "details_mpfit.csv")
    t = time.perf_counter()
    res = spectra.batch(str(ref / "minilm.safetensors"), convention="weightwatcher")
    seconds = time.perf_counter() - t
    ours = res.to_pandas()
    print(f"spectra: {len(ours)} layers in {seconds:.2f} s; WeightWatcher: {len(theirs)} layers")
    only_ww = sorted(set(theirs.longname) - set(ours.longname))
    only_sp = sorted(set(ours.longname) - set(theirs.longname))
    print(f"layers only WeightWatcher analysed: {only_ww or 'none'}; only spectra: {only_sp or 'none'}")
    skipped = [s for s in res.skipped if s.get("kind") == "WeightWatcher-skipped layer"]
    print("skipped by WeightWatcher's rules: " + "; ".join(f"{s['item'].partition('::')[2]} ({s['skipped']})"
                                                           for s in skipped))
    merged = theirs.merge(ours, on="longname", suffixes=("_ww", "_sp"))
    print("\n| column | max relative difference | layers |\n|---|---|---|")
    for col in ours.columns:
        if col in ("layer_id", "name", "longname") or f"{col}_ww" not in merged:
            continue
        a, b = merged[f"{col}_ww"], merged[f"{col}_sp"]
        if col == "warning":
            same = (a.fillna("").astype(str) == b.fillna("").astype(str)).sum()
            print(f"| warning | {len(merged) - same} differ | {len(merged)} |")
            continue
        a, b = a.astype(float).to_numpy(), b.astype(float).to_numpy()
        rel = np.abs(a - b) / np.maximum(np.abs(a), 1e-300)
        print(f"| {col} | {np.nanmax(rel):.2e} | {len(merged)} |")
    summary = json.loads((ref / "summary_mpfit.json").read_text())
    mine = res.summary()
    print("\n| get_summary() | WeightWatcher | spectra | relative difference |\n|---|---|---|---|")
    for k, v in summary.items():
        print(f"| {k} | {v:.12g} | {mine[k]:.12g} | {abs(mine[k] - v) / abs(v):.1e} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
