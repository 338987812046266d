"""The Dask engine: the first pass (moments, bootstrap groups, cosine sums) and the partition-isotropy
pass as Dask tasks over row ranges — each task opens the input on its worker from a picklable
description (the path and the reading options), feeds the same mergeable states as the local
engine, and returns them (O(d^2), never rows); the client tree-reduces them with ``merge``. A
``dask.array.Array`` (2-D, chunked by rows) is read chunk by chunk the same way.

``workers``: a LocalCluster of that many single-threaded worker processes on this machine;
``scheduler``: the address of an existing cluster (``tcp://host:8786``). Dask is the optional extra
``[dask]``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import numpy as np

from spectra_cli.analysis.isotropy import CosineAccumulator, LogZAccumulator
from spectra_cli.errors import OptionError, param
from spectra_cli.sources.rows import RowSpec
from spectra_cli.stream.states import MomentsState, RowGuard
from spectra_cli.validate import product_dtype


def require_distributed() -> Any:
    try:
        import dask  # noqa: F401
        import distributed
    except ImportError:
        raise OptionError(f"{param('engine', 'dask')} needs dask and distributed, the optional extra 'dask': pip "
                          "install 'spectra-cli[dask]' (from a checkout: pip install '.[dask]').") from None
    return distributed


def is_dask_array(obj: Any) -> bool:
    return type(obj).__module__.startswith("dask.array") and hasattr(obj, "to_delayed")


@contextlib.contextmanager
def client(scheduler: str | None, workers: int | None) -> Iterator[Any]:
    """A Dask client: of an existing scheduler, or of a LocalCluster closed on exit."""
    distributed = require_distributed()
    if scheduler is not None:
        try:
            c = distributed.Client(scheduler, timeout="20s")
        except (OSError, TimeoutError, ValueError) as exc:
            raise OptionError(f"{param('scheduler', scheduler)}: cannot reach the Dask scheduler ({exc}).") from None
        try:
            yield c
        finally:
            c.close()
        return
    n = workers or 2
    cluster = distributed.LocalCluster(n_workers=n, threads_per_worker=1, processes=True, dashboard_address=None)
    c = distributed.Client(cluster)
    try:
        yield c
    finally:
        c.close()
        cluster.close()


def ranges(total: int, tasks: int, start: int) -> list[tuple[int, int]]:
    """``tasks`` contiguous, nearly equal row ranges covering ``[start, start + total)``."""
    tasks = max(1, min(tasks, total))
    cuts = np.linspace(0, total, tasks + 1).round().astype(int)
    return [(start + int(a), start + int(b)) for a, b in zip(cuts[:-1], cuts[1:], strict=True) if b > a]


def first_task(opener: Any, data: Any, read: Any, start: int, stop: int, d: int, weighted: bool, groups: int,
                cosine: bool) -> tuple[MomentsState, CosineAccumulator | None, int]:
    """Runs on a worker: the first pass over rows ``[start, stop)`` of the input, opened by ``opener``
    (the client's Input class: it travels with the task, so this module never imports the layer above)."""
    task_read = replace(read, rows=RowSpec(start, stop), engine="local")
    with opener(data, task_read) as inp:
        n_blocks = -(-(stop - start) // inp.block_rows)  # the rows per block it reads (the default adapts to d)
        ms = MomentsState(d, weighted=weighted, precision=read.precision, groups=min(groups, n_blocks),
                          n_blocks=n_blocks)
        cos = CosineAccumulator(d, dtype=read.dtype) if cosine else None
        guard = RowGuard(inp.info.path, drop_nonfinite=read.drop_nonfinite, tiny_weights=read.logits is not None)
        inp.feed([ms, *([cos] if cos is not None else [])], guard)
    return ms, cos, guard.dropped


def _array_task(block: np.ndarray, d: int, precision: str, cosine: bool, drop: bool,
                row0: int) -> tuple[MomentsState, CosineAccumulator | None, int]:
    ms = MomentsState(d, precision=precision)
    cos = CosineAccumulator(d, dtype=product_dtype(precision)) if cosine else None
    guard = RowGuard("<dask array>", drop_nonfinite=drop)
    X, _ = guard.filter(np.asarray(block), None, lambda i: row0 + i)
    guard.finish()
    if len(X):
        ms.update(X, None)
        if cos is not None:
            cos.update(X, None)
    return ms, cos, guard.dropped


def _merge(a: tuple[Any, Any, int], b: tuple[Any, Any, int]) -> tuple[Any, Any, int]:
    ms = a[0].merge(b[0])
    cos = a[1].merge(b[1]) if a[1] is not None and b[1] is not None else None
    return ms, cos, a[2] + b[2]


def _tree(c: Any, futures: list[Any], merge: Any) -> Any:
    """Pairwise merges on the cluster until one state is left (never rows on the client)."""
    while len(futures) > 1:
        futures = [c.submit(merge, futures[i], futures[i + 1]) if i + 1 < len(futures) else futures[i]
                   for i in range(0, len(futures), 2)]
    return futures[0].result()


def first_pass(inp: Any, *, groups: int, cosine: bool) -> tuple[MomentsState, CosineAccumulator | None, int]:
    """The first pass of ``inp`` (an opened Input) on the cluster: merged states and dropped rows."""
    read = inp.read
    with client(read.scheduler, read.workers) as c:
        n_workers = max(1, len(c.scheduler_info().get("workers", {})))
        if inp.dask_array is not None:
            arr = inp.dask_array.rechunk({1: -1})
            blocks = arr.to_delayed().ravel()
            starts = np.cumsum((0, *arr.chunks[0]))[:-1]
            futs = c.compute([_delayed(_array_task)(b, arr.shape[1], read.precision, cosine, read.drop_nonfinite,
                                                    int(s)) for b, s in zip(blocks, starts, strict=True)])
            return _tree(c, futs, _merge)
        start, stop = read.rows.resolve(inp.info.n_rows)
        tasks = ranges(stop - start, max(n_workers * 4, groups), start)
        weighted = inp.weights is not None or bool(inp.source is not None and inp.source.has_weights)
        per_task = max(1, -(-groups // len(tasks))) if groups else 0
        futs = [c.submit(first_task, type(inp), inp.description(), read, a, b, inp.info.n_features, weighted, per_task,
                         cosine, pure=False) for a, b in tasks]
        return _tree(c, futs, _merge)


def logz_task(opener: Any, data: Any, read: Any, start: int, stop: int, V: np.ndarray,
               s: float) -> LogZAccumulator:
    logz = LogZAccumulator(V, s, dtype=read.dtype)
    with opener(data, replace(read, rows=RowSpec(start, stop), engine="local")) as inp:
        inp.feed([logz], RowGuard(inp.info.path, drop_nonfinite=True))
    return logz


def _logz_array_task(block: np.ndarray, V: np.ndarray, s: float, dtype: Any) -> LogZAccumulator:
    logz = LogZAccumulator(V, s, dtype=dtype)
    X = np.asarray(block)
    ok = np.all(np.isfinite(X), axis=1)
    logz.update(X[ok] if not ok.all() else X, None)
    return logz


def logz_pass(inp: Any, V: np.ndarray, s: float) -> LogZAccumulator:
    """Partition isotropy's second pass on the cluster: ``log Z`` per task, merged by log-sum-exp."""
    read = inp.read
    with client(read.scheduler, read.workers) as c:
        Vf = c.scatter(V, broadcast=True)
        if inp.dask_array is not None:
            arr = inp.dask_array.rechunk({1: -1})
            futs = c.compute([_delayed(_logz_array_task)(b, Vf, s, read.dtype) for b in arr.to_delayed().ravel()])
        else:
            n_workers = max(1, len(c.scheduler_info().get("workers", {})))
            start, stop = read.rows.resolve(inp.info.n_rows)
            futs = [c.submit(logz_task, type(inp), inp.description(), read, a, b, Vf, s, pure=False)
                    for a, b in ranges(stop - start, n_workers * 4, start)]
        return _tree(c, futs, lambda a, b: a.merge(b))


def _delayed(fn: Any) -> Any:
    import dask

    return dask.delayed(fn, pure=True)
