"""WeightWatcher itself on a checkpoint directory (the sharded safetensors of bench/bench_llm.py), against
`spectra batch --convention weightwatcher` on the same directory.

Run in WeightWatcher's own virtualenv (see bench/ww_reference.py), after bench_llm.py wrote the checkpoint
(`--keep`) and its `--jsonl`:

    python bench/bench_llm.py --kind 1b --blocks 4 --conventions spectra,weightwatcher --keep
    /tmp/wwvenv/bin/python bench/ww_checkpoint.py /tmp/spectra-bench-llm/1b-4 \\
        /tmp/spectra-bench-llm/1b-weightwatcher-1-float64.jsonl

Prints WeightWatcher's wall time for `analyze()` (its defaults: a full SVD of every matrix), its peak resident
memory, and the largest relative difference of six columns over the layers, matched by name.
"""

from __future__ import annotations

import json
import logging
import resource
import sys
import time
import warnings


def main() -> None:
    warnings.simplefilter("ignore")
    logging.disable(logging.CRITICAL)
    import weightwatcher as ww

    t = time.perf_counter()
    details = ww.WeightWatcher(model=sys.argv[1]).analyze()
    seconds = time.perf_counter() - t
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6  # (KiB on Linux: GB)
    ours = {}
    for line in open(sys.argv[2], encoding="utf-8"):
        r = json.loads(line)
        if r.get("weightwatcher"):
            ours[r["item"].split("::")[1].removesuffix(".weight")] = r["weightwatcher"]["columns"]
    worst, missing = 0.0, []
    for _, row in details.iterrows():
        mine = ours.get(row["name"])
        if mine is None:
            missing.append(row["name"])
            continue
        for col in ("alpha", "xmin", "D", "lambda_max", "log_norm", "stable_rank"):
            if col in mine and row[col] == row[col]:
                worst = max(worst, abs(mine[col] - row[col]) / max(abs(row[col]), 1e-300))
    print(f"weightwatcher {ww.__version__}: {len(details)} layers in {seconds:.1f} s, peak RSS {rss:.2f} GB; "
          f"largest relative difference (alpha, xmin, D, lambda_max, log_norm, stable_rank): {worst:.2e}; "
          f"layers spectra did not report: {missing or 'none'}")


if __name__ == "__main__":
    main()
