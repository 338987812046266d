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
import os
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import numpy as np

from spectra_cli.errors import OptionError, SpectraError, param
from spectra_cli.options import memory_budget
from spectra_cli.sources.rows import RowSpec
from spectra_cli.stream.isotropy_sums import CosineAccumulator, LogZAccumulator
from spectra_cli.stream.states import MomentsState, RowGuard
from spectra_cli.validate import product_dtype


def require_distributed() -> Any:
    try:
        import dask  # noqa: F401
        import distributed
    except ImportError:
        raise OptionError(f"{param('engine', 'dask')} needs dask and distributed, the optional extra 'dask': pip "
                          "install 'spectra-geometry[dask]' (from a checkout: pip install '.[dask]').") from None
    return distributed


def is_dask_array(obj: Any) -> bool:
    return type(obj).__module__.startswith("dask.array") and hasattr(obj, "to_delayed")


#: Seconds to wait for a Dask scheduler to answer (``--connect-timeout``).
CONNECT_TIMEOUT = 5.0
#: Memory one LocalCluster worker process takes before any data (interpreter, numpy, distributed).
WORKER_BASE_BYTES = 256 << 20


def usable_cores() -> int:
    """The cores this process may run on (its affinity mask, not the machine's count)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # pragma: no cover - not Linux
        return max(1, os.cpu_count() or 1)


def check_workers(workers: int, budget: int) -> int:
    """A LocalCluster's worker count, bounded by the cores and the memory budget (a process each)."""
    cores = usable_cores()
    by_memory = budget // WORKER_BASE_BYTES
    if workers > cores:
        raise OptionError(f"{param('workers', workers)} is more than the {cores} core(s) this process may use: a "
                          f"LocalCluster runs one process per worker; use at most {min(cores, max(by_memory, 1))}, "
                          f"or {param('scheduler')} for a cluster of other machines.")
    if workers > by_memory:
        need = workers * WORKER_BASE_BYTES / (1 << 30)
        raise OptionError(f"{param('workers', workers)} worker processes need about {need:.3g} GiB "
                          f"({WORKER_BASE_BYTES >> 20} MiB each) beyond the data; the memory budget is "
                          f"{budget / (1 << 30):.3g} GiB. Use fewer workers or raise {param('max_memory')}.")
    return workers


def probe(scheduler: str, timeout: float) -> None:
    """Refuse, within ``timeout`` seconds, a scheduler address where no Dask scheduler answers (Dask's own
    connect waits on a server that accepts and never answers): one identity round trip, in a thread
    of its own so that a running event loop (a notebook) is no obstacle."""
    import asyncio
    import re
    from concurrent.futures import ThreadPoolExecutor

    port = re.fullmatch(r"[a-z]+://[^/]*:(\d+)/?", scheduler)
    if port is not None and not 0 < int(port.group(1)) < 65536:
        raise OptionError(f"{param('scheduler', scheduler)}: port {port.group(1)} is not a TCP port (1 to 65535).")

    async def identity() -> Any:
        from distributed.comm import connect

        comm = await connect(scheduler, timeout=timeout)
        try:
            await comm.write({"op": "identity", "reply": True})
            return await comm.read()
        finally:
            comm.abort()

    def run() -> Any:
        return asyncio.run(asyncio.wait_for(identity(), timeout))

    with ThreadPoolExecutor(1) as pool:
        try:
            answer = pool.submit(run).result()
        except (TimeoutError, OSError) as exc:
            why = f"no Dask scheduler answered within {timeout:g} s" if isinstance(exc, TimeoutError) else str(exc)
            raise OptionError(f"{param('scheduler', scheduler)}: {why} ({param('connect_timeout')} sets the wait); "
                              "check the address and that the scheduler runs.") from None
        except Exception as exc:  # noqa: BLE001 - a malformed address or a peer that speaks another protocol
            raise OptionError(f"{param('scheduler', scheduler)}: cannot reach a Dask scheduler "
                              f"({type(exc).__name__}: {str(exc)[:200]}).") from None
    if not isinstance(answer, dict) or answer.get("type") != "Scheduler":
        raise OptionError(f"{param('scheduler', scheduler)} answered, but not as a Dask scheduler.")


@contextlib.contextmanager
def quiet_logs(verbose: bool) -> Iterator[None]:
    """Dask's loggers stay quiet (a failing task is one error line, not 38 lines of worker logs) unless
    ``verbose`` or the user set ``DASK_LOGGING__DISTRIBUTED``: here and in the worker processes, which
    read it from the environment they inherit."""
    import logging

    if verbose or "DASK_LOGGING__DISTRIBUTED" in os.environ:
        yield
        return
    os.environ["DASK_LOGGING__DISTRIBUTED"] = "critical"
    loggers = [logging.getLogger(n) for n in ("distributed", "distributed.worker", "distributed.nanny",
                                              "distributed.scheduler", "distributed.core", "tornado")]
    levels = [lg.level for lg in loggers]
    for lg in loggers:
        lg.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        os.environ.pop("DASK_LOGGING__DISTRIBUTED", None)
        for lg, level in zip(loggers, levels, strict=True):
            lg.setLevel(level)


@contextlib.contextmanager
def client(scheduler: str | None, workers: int | None, *, connect_timeout: float = CONNECT_TIMEOUT,
           budget: int | None = None, verbose: bool = False) -> Iterator[Any]:
    """A Dask client: of an existing scheduler (which must answer within ``connect_timeout``), or of a
    LocalCluster of ``workers`` single-threaded processes (bounded by the cores and ``budget``), closed
    on exit with its processes."""
    distributed = require_distributed()
    with quiet_logs(verbose):
        if scheduler is not None:
            probe(scheduler, connect_timeout)
            try:
                c = distributed.Client(scheduler, timeout=f"{connect_timeout}s")
            except (OSError, TimeoutError, ValueError) as exc:
                raise OptionError(f"{param('scheduler', scheduler)}: cannot reach the Dask scheduler ({exc}).") \
                    from None
            try:
                yield c
            finally:
                c.close()
            return
        n = check_workers(workers or 2, budget if budget is not None else memory_budget(None))
        # (no dashboard, and the scheduler's own HTTP routes on a free port: the default 8787 taken by another
        # cluster on the machine made distributed warn on stderr, "Port 8787 is already in use")
        cluster = distributed.LocalCluster(n_workers=n, threads_per_worker=1, processes=True, dashboard_address=None,
                                           scheduler_kwargs={"dashboard": False, "dashboard_address": ":0"},
                                           silence_logs=logging_level(verbose))
        try:
            c = distributed.Client(cluster)
            try:
                yield c
            finally:
                c.close()
        finally:
            cluster.close()


def logging_level(verbose: bool) -> int:
    import logging

    return logging.WARNING if verbose else logging.CRITICAL


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
    try:
        return _first_task_rows(opener, data, task_read, start, stop, d, weighted, groups, cosine)
    except SpectraError as exc:
        raise type(exc)(f"{exc.raw_message.rstrip('.')} (in the Dask task of rows {start}:{stop}; a count is that "
                        "task's).") from None


def _first_task_rows(opener: Any, data: Any, task_read: Any, start: int, stop: int, d: int, weighted: bool,
                     groups: int, cosine: bool) -> tuple[MomentsState, CosineAccumulator | None, int]:
    read = task_read
    with opener(data, task_read) as inp:
        n_blocks = -(-(stop - start) // inp.block_rows)  # the rows per block it reads (the default adapts to d)
        ms = MomentsState(d, weighted=weighted, precision=read.precision, groups=min(groups, n_blocks),
                          n_blocks=n_blocks, block_rows=inp.block_rows)
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
    with client(read.scheduler, read.workers, connect_timeout=read.connect_timeout, budget=read.memory_budget()) as c:
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
    with client(read.scheduler, read.workers, connect_timeout=read.connect_timeout, budget=read.memory_budget()) as c:
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
