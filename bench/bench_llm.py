"""LLM checkpoints: `spectra batch` on synthetic sharded bf16 checkpoints with real shapes.

Each checkpoint is written as the Hugging Face layout: safetensors shards of at most 2 GB, a
`model.safetensors.index.json` weight map, bf16 tensors (float32 rounded to nearest even). Every 2-D
weight has a power-law spectrum (singular values j^-alpha/2 in a random orthogonal basis, alpha 1.1);
the norms are 1-D and are reported as skipped vectors.

- 1B class: vocabulary 32,000 x 2,048; 16 blocks of q/k/v/o 2,048 x 2,048, MLP gate/up 5,632 x 2,048
  and down 2,048 x 5,632, an untied lm_head (114 matrices, 0.95 B parameters, 1.9 GB).
- 7B class: 32,000 x 4,096; 32 blocks of 4,096 x 4,096 and 11,008 x 4,096 (226 matrices, 6.5 B
  parameters, 13 GB).

For each checkpoint and convention (`spectra`, `weightwatcher`) it runs `spectra batch DIR --jsonl`
as a whole process and prints its wall time, its peak resident memory (from the kernel's rusage of
the children), and how many matrices were analysed, failed and skipped (with why).

    python bench/bench_llm.py --kind 1b                 # the whole 1B class (writes 1.9 GB under --dir)
    python bench/bench_llm.py --kind 7b --blocks 2      # a 2-block slice of the 7B class
    python bench/bench_llm.py --kind 1b --blocks 4 --conventions spectra
    python bench/bench_llm.py --kind 7b --blocks 2 --conventions spectra --workers 1,2 --precision float64,float32
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import struct
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

SHAPES = {"1b": (32_000, 2_048, 5_632, 16), "7b": (32_000, 4_096, 11_008, 32)}
SHARD_BYTES = 2 << 30
ALPHA = 1.1


def bf16_bytes(a: np.ndarray) -> bytes:
    """float32 -> bfloat16 (round to nearest even), as raw little-endian bytes."""
    u = np.ascontiguousarray(a, dtype=np.float32).view(np.uint32)
    rounded = (u + 0x7FFF + ((u >> 16) & 1)) >> 16
    return rounded.astype("<u2").tobytes()


def write_shard(path: Path, tensors: dict[str, np.ndarray]) -> None:
    """A safetensors file of bf16 tensors, written by hand (the format is a JSON header and raw bytes)."""
    header: dict[str, object] = {}
    offset = 0
    blobs = []
    for name, t in tensors.items():
        data = bf16_bytes(t)
        header[name] = {"dtype": "BF16", "shape": list(t.shape), "data_offsets": [offset, offset + len(data)]}
        offset += len(data)
        blobs.append(data)
    head = json.dumps(header).encode()
    head += b" " * (-len(head) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(head)))
        f.write(head)
        for b in blobs:
            f.write(b)


def power_law(rows: int, cols: int, q: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """rows x cols with singular values ~ j^-ALPHA/2 (the covariance spectrum j^-ALPHA) in the basis q."""
    k = min(rows, cols)
    s = np.arange(1, k + 1, dtype=np.float32) ** np.float32(-ALPHA / 2)
    if rows >= cols:
        g = rng.standard_normal((rows, cols), dtype=np.float32) * s[None, :]
        return (g @ q) * np.float32(0.02)
    g = rng.standard_normal((cols, rows), dtype=np.float32) * s[None, :]
    return ((g @ q[:rows, :rows]).T) * np.float32(0.02)


def make_checkpoint(kind: str, out: Path, blocks: int | None) -> tuple[int, int]:
    """The checkpoint under ``out``; returns (matrices, parameters)."""
    vocab, d, ff, n_blocks = SHAPES[kind]
    n_blocks = n_blocks if blocks is None else min(blocks, n_blocks)
    rng = np.random.default_rng(0)
    q, _ = np.linalg.qr(rng.standard_normal((d, d)).astype(np.float32))
    out.mkdir(parents=True, exist_ok=True)

    def tensors():
        yield "model.embed_tokens.weight", power_law(vocab, d, q, rng)
        for i in range(n_blocks):
            p = f"model.layers.{i}."
            for name in ("q_proj", "k_proj", "v_proj", "o_proj"):
                yield p + f"self_attn.{name}.weight", power_law(d, d, q, rng)
            yield p + "mlp.gate_proj.weight", power_law(ff, d, q, rng)
            yield p + "mlp.up_proj.weight", power_law(ff, d, q, rng)
            yield p + "mlp.down_proj.weight", power_law(d, ff, q, rng)
            yield p + "input_layernorm.weight", np.ones(d, np.float32)
            yield p + "post_attention_layernorm.weight", np.ones(d, np.float32)
        yield "model.norm.weight", np.ones(d, np.float32)
        yield "lm_head.weight", power_law(vocab, d, q, rng)

    shard: dict[str, np.ndarray] = {}
    size = shards = matrices = params = 0
    weight_map: dict[str, str] = {}
    names: list[list[str]] = []

    def flush() -> None:
        nonlocal shard, size, shards
        if shard:
            shards += 1
            write_shard(out / f"part-{shards:05d}.safetensors", shard)
            names.append(list(shard))
            shard, size = {}, 0

    for name, t in tensors():
        if size + 2 * t.size > SHARD_BYTES:
            flush()
        shard[name] = t
        size += 2 * t.size
        matrices += t.ndim == 2
        params += t.size
    flush()
    for i, group in enumerate(names, 1):  # the Hugging Face names: model-0000i-of-0000N.safetensors
        final = f"model-{i:05d}-of-{shards:05d}.safetensors"
        (out / f"part-{i:05d}.safetensors").rename(out / final)
        weight_map.update(dict.fromkeys(group, final))
    (out / "model.safetensors.index.json").write_text(json.dumps({"metadata": {"total_size": 2 * params},
                                                                   "weight_map": weight_map}))
    return matrices, params


#: Runs a command and prints the largest resident set of its process tree (KiB): a fresh process per
#: run, so that one run's peak is not another's.
PEAK = ("import resource, subprocess, sys; r = subprocess.run(sys.argv[1:]); "
        "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, file=sys.stderr); sys.exit(r.returncode)")


def _tree_memory(root: int) -> tuple[int, int]:
    """The resident memory of ``root`` and all its descendants now (bytes; Linux's /proc): summed RSS, and summed
    PSS (proportional set size: a page shared by k processes, such as a forked worker's copy-on-write pages of its
    parent, counts 1/k in each, so the sum is the memory the tree holds; RSS sums count it k times)."""
    parents: dict[int, int] = {}
    rss: dict[int, int] = {}
    page = os.sysconf("SC_PAGE_SIZE")
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            parents[int(entry.name)] = int(fields[1])
            rss[int(entry.name)] = int(fields[21]) * page
    tree, total, pss = {root}, 0, 0
    for _ in range(8):  # (a batch's tree is at most 3 deep)
        tree |= {p for p, parent in parents.items() if parent in tree}
    for p in tree:
        total += rss.get(p, 0)
        try:
            for line in Path(f"/proc/{p}/smaps_rollup").read_text().splitlines():
                if line.startswith("Pss:"):
                    pss += int(line.split()[1]) * 1024
                    break
        except OSError:
            continue
    return total, pss


def run(directory: Path, convention: str, jsonl: Path, workers: int | None = 1,
        extra: tuple[str, ...] = ()) -> dict[str, object]:
    """One whole-process batch: its wall time, the largest resident set of one process of its tree
    (the kernel's rusage) and the largest sum over the tree (sampled every 0.2 s: the workers together)."""
    jsonl.unlink(missing_ok=True)
    t = time.perf_counter()
    err = jsonl.with_suffix(".stderr")
    with open(err, "w") as f:  # (a file, not a pipe: nothing blocks while the memory is sampled)
        proc = subprocess.Popen([sys.executable, "-c", PEAK, sys.executable, "-m", "spectra_cli", "batch",
                                 str(directory), "--convention", convention, "--jsonl", str(jsonl),
                                 *(("--workers", str(workers)) if workers is not None else ()), *extra],
                                stdout=subprocess.DEVNULL, stderr=f)
    total = pss = 0
    while proc.poll() is None:
        now_rss, now_pss = _tree_memory(proc.pid)
        total, pss = max(total, now_rss), max(pss, now_pss)
        time.sleep(0.2)
    stderr = err.read_text()
    wall = time.perf_counter() - t
    peak = int(stderr.strip().splitlines()[-1]) if stderr.strip() else 0  # KiB
    lines = [json.loads(x) for x in jsonl.read_text().splitlines()] if jsonl.exists() else []
    ok = [x for x in lines if "error" not in x and "skipped" not in x]
    failed = [x for x in lines if "error" in x]
    skipped = [x for x in lines if "skipped" in x]
    return {"rc": proc.returncode, "wall_s": wall, "peak_rss_gb": peak / 2**20, "tree_rss_gb": total / 2**30,
            "tree_pss_gb": pss / 2**30,
            "analysed": len(ok), "failed": len(failed), "skipped": len(skipped),
            "skipped_kinds": sorted({str(x.get("kind")) for x in skipped}), "stderr": stderr[-400:]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kind", choices=sorted(SHAPES), default="1b")
    ap.add_argument("--blocks", type=int, default=None, help="only the first N blocks (a slice)")
    ap.add_argument("--dir", type=Path, default=Path("/tmp/spectra-bench-llm"))
    ap.add_argument("--conventions", default="spectra,weightwatcher")
    ap.add_argument("--keep", action="store_true", help="keep the checkpoint")
    ap.add_argument("--workers", default="1", help="spectra batch --workers, one run per value (e.g. 1,2; "
                    "'default': the flag left out)")
    ap.add_argument("--precision", default="float64", help="spectra batch --precision, one run per value "
                    "(e.g. float64,float32; 'default': the flag left out)")
    args = ap.parse_args()
    ckpt = args.dir / f"{args.kind}-{args.blocks or 'all'}"
    t = time.perf_counter()
    if not (ckpt / "model.safetensors.index.json").exists():
        matrices, params = make_checkpoint(args.kind, ckpt, args.blocks)
    else:
        index = json.loads((ckpt / "model.safetensors.index.json").read_text())
        matrices, params = -1, index["metadata"]["total_size"] // 2
    print(f"{args.kind} class, blocks {args.blocks or 'all'}: {matrices} matrices, {params / 1e9:.2f} B parameters, "
          f"written in {time.perf_counter() - t:.0f} s")
    runs = ((c, None if w == "default" else int(w), p) for c in args.conventions.split(",")
            for w in args.workers.split(",") for p in args.precision.split(","))
    for conv, workers, precision in runs:
        res = run(ckpt, conv, args.dir / f"{args.kind}-{conv}-{workers}-{precision}.jsonl", workers,
                  ("--precision", precision) if precision != "default" else ())
        print(f"  batch --convention {conv} --workers {workers} --precision {precision}: {res['wall_s']:.1f} s,"
              f" peak RSS {res['peak_rss_gb']:.2f} GB (one process), {res['tree_rss_gb']:.2f} GB (all, RSS), "
              f"{res['tree_pss_gb']:.2f} GB (all, PSS), "
              f"{res['analysed']} analysed, {res['failed']} failed, {res['skipped']} skipped "
              f"({', '.join(res['skipped_kinds'])}); exit {res['rc']}")
        if res["rc"] != 0:
            print(res["stderr"])
    if not args.keep:
        shutil.rmtree(ckpt, ignore_errors=True)


if __name__ == "__main__":
    main()
