"""The population exponent on the shared MiniLM activations (issue 19's real-data check): all rows, and
subsamples of 2 d and 4 d rows (seeds 0-2), window 11:100; does each subsample's interval hold the
all-rows population alpha? Subsamples of rows drawn at random (shuffled) and of consecutive rows (whole texts);
each with the interval from theory (the default) and from simulated samples (``--population-route simulate``).
Needs ../shared/data (not in the repository).

    OPENBLAS_NUM_THREADS=1 python bench/bench_population_real.py [DATA_DIR]
"""
import json
import sys
import warnings

import numpy as np

import spectra_cli as spectra

warnings.simplefilter("ignore")
out = {}
DATA = sys.argv[1] if len(sys.argv) > 1 else "../shared/data"
for name, path, window in (("layer1", f"{DATA}/minilm_layer1_tokens_20k_f16.npy", "11:100"),
                           ("layer3", f"{DATA}/minilm_layer3_context32_1024_f16.npy", "11:100")):
    X = np.load(path).astype(np.float32)
    X = X.reshape(-1, X.shape[-1])
    n, d = X.shape
    full = spectra.fit(X, window=window, population=True).to_dict()
    fp = full["fit"]["population"]
    fc = fp.get("sampling_curve") or {}
    print(f"{name}: all {n} rows (n/d {n/d:.1f}): naive {full['fit']['alpha']:.4f} population {fp['alpha']:.4f} "
          f"[{fp['ci'][0]:.4f}, {fp['ci'][1]:.4f}] row model alone {fp['model_alpha']:.4f} spread ratio "
          f"{fc.get('spread_ratio')} (raw {fc.get('spread_ratio_raw')}) rms {fp['match_rms']:.3f} "
          f"cv2_scales {fp['rows'].get('cv2_scales')}", flush=True)
    rows = []
    for mode in ("shuffled", "contiguous"):
        for mult in (2, 4):
            for seed in range(3):
                rng = np.random.default_rng(seed)
                if mode == "shuffled":
                    idx = rng.choice(n, mult * d, replace=False)
                else:
                    start = int(rng.integers(0, n - mult * d + 1))
                    idx = np.arange(start, start + mult * d)
                for route in ("analytic", "simulate"):
                    r = spectra.fit(X[idx], window=window, population=True, population_route=route).to_dict()
                    p = r["fit"]["population"]
                    inside = p["ci"][0] <= fp["alpha"] <= p["ci"][1]
                    c = p.get("sampling_curve") or {}
                    print(f"  {mode} n = {mult}d seed {seed} {route}: naive {r['fit']['alpha']:.4f} population "
                          f"{p['alpha']:.4f} [{p['ci'][0]:.4f}, {p['ci'][1]:.4f}] ({p['bootstrap']['route']}) row "
                          f"model alone {p['model_alpha']:.4f} spread ratio {c.get('spread_ratio', float('nan')):.3f} "
                          f"interval from {c.get('interval_from')}; {r['timings']['population_s']:.2f} s; holds the "
                          f"all-rows population alpha: {inside}", flush=True)
                    rows.append(dict(mode=mode, mult=mult, seed=seed, route=route, naive=r['fit']['alpha'],
                                     pop=p['alpha'], ci=p['ci'], model=p['model_alpha'],
                                     spread_ratio=c.get('spread_ratio'), inside=bool(inside),
                                     seconds=r['timings']['population_s']))
    for mode in ("shuffled", "contiguous"):
        for route in ("analytic", "simulate"):
            got = [x for x in rows if x["mode"] == mode and x["route"] == route]
            print(f"  {name} {mode} {route}: {sum(x['inside'] for x in got)}/{len(got)} hold the all-rows value, "
                  f"mean width {np.mean([x['ci'][1] - x['ci'][0] for x in got]):.4f}, "
                  f"{np.mean([x['seconds'] for x in got]):.2f} s", flush=True)
    out[name] = dict(full_naive=full['fit']['alpha'], full_pop=fp['alpha'], full_ci=fp['ci'], subsamples=rows)
print(json.dumps(out))
