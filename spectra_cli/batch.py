"""``spectra batch``: many matrices (files, directories, globs, every 2-D tensor of safetensors
checkpoints), analysed in worker processes, one JSON line per item.

Each successful line is a ``fit`` report (the same schema) with ``item`` added; a failed item is
``{"schema": "spectra.batch-error/1", "item", "fingerprint", "error"}`` and does not stop the batch.
``resume`` skips items whose line is already in the output with the same fingerprint.
"""

from __future__ import annotations

import json
import os
import re
import sys
from collections.abc import Callable, Iterator
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from dataclasses import dataclass
from typing import Any

from spectra_cli import __version__
from spectra_cli.errors import InputError, OptionError, SpectraError
from spectra_cli.sources.base import expand_glob, fingerprint, is_glob

ERROR_SCHEMA = "spectra.batch-error/1"
MATRIX_EXT = (".npy", ".npz", ".parquet", ".pq", ".safetensors")


@dataclass(frozen=True, slots=True)
class Item:
    name: str  # what open_source takes: a path, path::tensor or path::key
    fingerprint: str


def _expand(path: str) -> list[str]:
    if is_glob(path):
        return expand_glob(path)
    if os.path.isdir(path):
        from spectra_cli.sources.safetensors import shard_files

        shards = shard_files(path)
        others = sorted(os.path.join(r, f) for r, _, fs in os.walk(path) for f in fs
                        if f.lower().endswith(MATRIX_EXT[:-1]) and not f.startswith((".", "_")))
        if not shards and not others:
            raise InputError(f"directory {path} holds no .npy, .npz, .parquet or .safetensors files.")
        return shards + others
    if not os.path.exists(path):
        raise InputError(f"no such file or directory: {path}")
    return [path]


def enumerate_items(paths: list[str], tensors: str | None = None) -> tuple[list[Item], list[str]]:
    """Items in a stable order, and notes about what was skipped (1-D biases, filtered tensors)."""
    try:
        pattern = re.compile(tensors) if tensors else None
    except re.error as exc:
        raise OptionError(f"--tensors {tensors!r} is not a valid regular expression: {exc}.") from None
    items: list[Item] = []
    notes: list[str] = []
    seen: set[str] = set()
    for path in paths:
        for f in _expand(path):
            low = f.lower()
            if low.endswith(".safetensors"):
                from spectra_cli.sources.safetensors import list_tensors

                for t in list_tensors(f):
                    name = f"{f}::{t['name']}"
                    if pattern is not None and not pattern.search(t["name"]):
                        continue
                    if len(t["shape"]) != 2:
                        notes.append(f"skipped {name}: shape {t['shape']} is not 2-D")
                        continue
                    if name not in seen:
                        seen.add(name)
                        items.append(Item(name, fingerprint(name)))
            elif low.endswith(".npz"):
                from spectra_cli.sources.npy import npz_listing

                arrays = npz_listing(f)
                for a in arrays:
                    name = f"{f}::{a['key']}" if len(arrays) > 1 else f
                    if len(a["shape"]) not in (2, 3):
                        notes.append(f"skipped {f}::{a['key']}: shape {a['shape']} is not a matrix")
                        continue
                    if name not in seen:
                        seen.add(name)
                        items.append(Item(name, fingerprint(name)))
            elif low.endswith(MATRIX_EXT):
                if f not in seen:
                    seen.add(f)
                    items.append(Item(f, fingerprint(f)))
            else:
                notes.append(f"skipped {f}: not a .npy, .npz, .parquet or .safetensors file")
    if not items:
        raise InputError("no matrices to analyse" + (f" ({'; '.join(notes[:3])})" if notes else "") + ".")
    return items, notes


def run_item(name: str, fp: str, options: dict[str, Any]) -> dict[str, Any]:
    """One item's JSON line (runs in a worker process)."""
    import warnings

    from spectra_cli import api
    from spectra_cli.errors import SpectraWarning

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", SpectraWarning)  # they are in each line's report
            doc = api.fit(name, **options).to_dict()
    except SpectraError as exc:
        return {"schema": ERROR_SCHEMA, "spectra_version": __version__, "item": name, "fingerprint": fp,
                "error": str(exc)}
    except Exception as exc:  # noqa: BLE001 - one broken item must not stop the batch
        return {"schema": ERROR_SCHEMA, "spectra_version": __version__, "item": name, "fingerprint": fp,
                "error": f"unexpected {type(exc).__name__}: {exc} (a bug; please report it)"}
    doc["item"] = name  # doc["source"]["fingerprint"] comes from the same function on the same input
    return doc


def done_items(jsonl: str) -> dict[str, str]:
    """``item -> fingerprint`` of the successful lines already in ``jsonl``."""
    out: dict[str, str] = {}
    if not os.path.exists(jsonl):
        return out
    with open(jsonl, encoding="utf-8") as f:
        for line in f:
            try:
                doc = json.loads(line)
            except ValueError:
                continue  # a line cut by an interrupted run
            if isinstance(doc, dict) and "item" in doc and "error" not in doc:
                out[doc["item"]] = doc.get("source", {}).get("fingerprint")
    return out


def _one_blas_thread() -> None:
    """Worker initializer: one BLAS thread per worker, so workers x threads fit the cores."""
    for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[var] = "1"
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:  # optional: without it a forked worker keeps the parent's BLAS threads
        return
    threadpool_limits(1)


def _pool(workers: int) -> ProcessPoolExecutor:
    import multiprocessing

    # fork starts workers in milliseconds (spawn re-imports numpy in each, ~0.5 s); it is the
    # default on Linux and safe here: the parent holds no locks or threads of its own.
    method = "fork" if sys.platform.startswith("linux") else "spawn"
    return ProcessPoolExecutor(max_workers=workers, mp_context=multiprocessing.get_context(method),
                               initializer=_one_blas_thread)


def run_batch(
    items: list[Item], options: dict[str, Any], *, workers: int = 1,
    on_result: Callable[[dict[str, Any]], None] | None = None,
) -> Iterator[dict[str, Any]]:
    """Yield each item's line as it completes (input order when ``workers == 1``)."""
    if workers < 1:
        raise OptionError(f"--workers {workers} must be at least 1.")
    if workers == 1 or len(items) == 1:
        for it in items:
            doc = run_item(it.name, it.fingerprint, options)
            if on_result:
                on_result(doc)
            yield doc
        return
    from concurrent.futures.process import BrokenProcessPool

    with _pool(min(workers, len(items))) as ex:
        pending: dict[Future[dict[str, Any]], Item] = {}
        queue = list(items)
        while queue or pending:
            while queue and len(pending) < 2 * workers:
                it = queue.pop(0)
                pending[ex.submit(run_item, it.name, it.fingerprint, options)] = it
            finished, _ = wait(list(pending), return_when=FIRST_COMPLETED)
            for fut in finished:
                it = pending.pop(fut)
                try:
                    docs = [fut.result()]
                except BrokenProcessPool:
                    # The pool can run nothing more: this item and every one not finished fail.
                    docs = [_died(x) for x in (it, *pending.values(), *queue)]
                    pending, queue = {}, []
                for doc in docs:
                    if on_result:
                        on_result(doc)
                    yield doc
                if not pending and not queue:
                    break


def _died(it: Item) -> dict[str, Any]:
    return {"schema": ERROR_SCHEMA, "spectra_version": __version__, "item": it.name, "fingerprint": it.fingerprint,
            "error": "a worker process died (out of memory, or killed) before this item finished"}
