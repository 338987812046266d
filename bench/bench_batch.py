"""Checkpoint benchmark: every 2-D tensor of a ~90 MB MiniLM/BERT-size safetensors checkpoint,
end to end as a whole process (start-up included), and the 40-file worker comparison.

    python bench/bench_batch.py [ROUNDS]      # run from a plain `pip install .`
"""

from __future__ import annotations

import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent


def make_checkpoint(path: Path) -> int:
    """A MiniLM-L6-shaped float32 checkpoint (22.7 M parameters, ~91 MB), random weights."""
    from safetensors.numpy import save_file

    rng = np.random.default_rng(0)
    d, ff, vocab = 384, 1536, 30522
    t: dict[str, np.ndarray] = {
        "embeddings.word_embeddings.weight": rng.standard_normal((vocab, d), dtype=np.float32) * 0.02,
        "embeddings.position_embeddings.weight": rng.standard_normal((512, d), dtype=np.float32) * 0.02,
        "embeddings.LayerNorm.weight": np.ones(d, np.float32),
    }
    for i in range(6):
        p = f"encoder.layer.{i}."
        for name in ("attention.self.query", "attention.self.key", "attention.self.value", "attention.output.dense"):
            t[p + name + ".weight"] = rng.standard_normal((d, d), dtype=np.float32) * 0.05
            t[p + name + ".bias"] = np.zeros(d, np.float32)
        t[p + "intermediate.dense.weight"] = rng.standard_normal((ff, d), dtype=np.float32) * 0.05
        t[p + "output.dense.weight"] = rng.standard_normal((d, ff), dtype=np.float32) * 0.05
    save_file(t, str(path))
    return sum(v.size for v in t.values())


def main() -> None:
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    spectra = shutil.which("spectra") or sys.exit("spectra is not installed (pip install -e .)")
    data = HERE / "data"
    data.mkdir(exist_ok=True)
    ckpt = data / "minilm_like.safetensors"
    n_params = make_checkpoint(ckpt) if not ckpt.exists() else None
    print(f"checkpoint {ckpt.stat().st_size / 1e6:.1f} MB" + (f", {n_params / 1e6:.1f} M parameters" if n_params
                                                               else ""))
    try:
        import threadpoolctl

        print(f"threadpoolctl {threadpoolctl.__version__}: {threadpoolctl.threadpool_info()[0].get('internal_api')} "
              f"{threadpoolctl.threadpool_info()[0].get('num_threads')} threads")
    except ImportError:
        print("threadpoolctl not installed")
    variants = {f"--workers {w}{' --density --uncentered' if ww else ''}": [
        "--workers", str(w), *(["--density", "--uncentered"] if ww else [])] for ww in (False, True) for w in (1, 2)}
    times: dict[str, list[float]] = {k: [] for k in variants}
    for _ in range(rounds):  # alternated, so a noisy neighbour hits every variant alike
        for name, flags in variants.items():
            t = time.perf_counter()
            r = subprocess.run([spectra, "batch", str(ckpt), *flags, "--jsonl", str(data / "ckpt.jsonl")],
                               capture_output=True, text=True, check=False)
            times[name].append(time.perf_counter() - t)
            if r.returncode != 0:
                sys.exit(r.stderr)
    n = sum(1 for line in open(data / "ckpt.jsonl") if '"skipped"' not in line)
    for name, ts in times.items():
        print(f"spectra batch {ckpt.name} {name}: {n} matrices, median {statistics.median(ts):.2f} s "
              f"(runs: {', '.join(f'{x:.2f}' for x in ts)}), process start included")


if __name__ == "__main__":
    main()
