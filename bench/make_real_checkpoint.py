"""A safetensors "checkpoint" of real MiniLM geometry, built from the project's shared data
(../shared/data; see its README): the model's token-embedding table (a real weight matrix), the
hidden states after layers 1 and 5, the 32 positions of the layer-3 windows, one matrix each, and
the sentence embeddings. It gives `spectra batch` and `spectra report` a checkpoint-shaped input
with real spectra (the synthetic `minilm_like.safetensors` of bench_batch.py has random weights).

    python bench/make_real_checkpoint.py            # -> bench/data/minilm_real.safetensors
    spectra batch bench/data/minilm_real.safetensors --density --uncentered --jsonl bench/data/real.jsonl
    spectra report bench/data/real.jsonl -o model.html
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
SHARED = HERE.parent.parent / "shared" / "data"


def main() -> None:
    from safetensors.numpy import save_file

    if not SHARED.is_dir():
        sys.exit(f"{SHARED} is not here: this script needs the project's shared data")
    out = Path(sys.argv[1]) if len(sys.argv) > 1 else HERE / "data" / "minilm_real.safetensors"
    out.parent.mkdir(exist_ok=True)
    t = {"embeddings.word_embeddings.weight": np.load(SHARED / "minilm_token_embeddings_f16.npy"),
         "encoder.layer.1.output": np.load(SHARED / "minilm_layer1_tokens_20k_f16.npy"),
         "encoder.layer.5.output": np.load(SHARED / "minilm_layer5_tokens_20k_f16.npy"),
         "pooler.sentence_embeddings": np.load(SHARED / "minilm_sentence_embeddings.npy")}
    ctx = np.load(SHARED / "minilm_layer3_context32_1024_f16.npy")
    for p in range(ctx.shape[1]):
        t[f"encoder.layer.3.position.{p}"] = np.ascontiguousarray(ctx[:, p, :])
    t["embeddings.LayerNorm.weight"] = np.ones(384, np.float32)  # a vector: listed as skipped, as in a model
    save_file(t, str(out))
    print(f"{out}: {len(t)} tensors, {out.stat().st_size / 1e6:.1f} MB")


if __name__ == "__main__":
    main()
