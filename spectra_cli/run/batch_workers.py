"""Running a batch's items: each item's JSON line made in a worker process (a local pool, or Dask
tasks), yielded as it finishes. A failed or lost item is an error line; it never stops the batch.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterator
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from typing import Any

from spectra_cli.documents import ERROR_SCHEMA
from spectra_cli.errors import CLI_RUN, SpectraError
from spectra_cli.options import ENGINES
from spectra_cli.run.batch_items import Item
from spectra_cli.threads import ENV_VARS, worker_threads
from spectra_cli.validate import check_choice, check_int
from spectra_cli.version import __version__


def run_item(name: str, fp: str, options: dict[str, Any], error: str | None = None,
             command_line: bool | None = None, base: str | None = None, adapter: Any = None,
             kernel: bool = False) -> dict[str, Any]:
    """One item's JSON line (runs in a worker process). ``command_line``: whether the batch runs for the command
    line (its messages then name options as flags), where the worker cannot inherit it (a Dask worker). ``base``:
    the base checkpoint's tensor: the line is the change ``name - base``; ``adapter``: an adapted layer of a LoRA
    adapter (:mod:`spectra_cli.run.tuning`); ``kernel``: a 4-D convolution kernel (:mod:`spectra_cli.run.kernels`)."""
    import warnings

    from spectra_cli.errors import SpectraWarning, command_line_run, for_caller
    from spectra_cli.run import matrix as api

    if command_line is not None:
        command_line_run(command_line)

    if error is not None:
        return {"schema": ERROR_SCHEMA, "spectra_version": __version__, "item": name, "fingerprint": fp,
                "error": error}
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", SpectraWarning)  # they are in each line's report
            if kernel:
                from spectra_cli.run.kernels import kernel_line

                doc = kernel_line(name, options)
            elif adapter is not None or base is not None:
                from spectra_cli.run.tuning import adapter_line, change_line

                doc = adapter_line(adapter, options) if adapter is not None else \
                    change_line(name, str(base), options)
            else:
                doc = api.fit(name, **options).to_dict()
    except SpectraError as exc:
        return {"schema": ERROR_SCHEMA, "spectra_version": __version__, "item": name, "fingerprint": fp,
                "error": for_caller(exc)}
    except MemoryError:
        return {"schema": ERROR_SCHEMA, "spectra_version": __version__, "item": name, "fingerprint": fp,
                "error": "out of memory while analysing this item (fewer workers, or --max-memory, may help)"}
    except ImportError as exc:  # (a package of spectra's install is missing or broken: the environment's, no bug)
        missing = getattr(exc, "name", None) or str(exc)
        return {"schema": ERROR_SCHEMA, "spectra_version": __version__, "item": name, "fingerprint": fp,
                "error": f"the package {missing!r} that this analysis needs cannot be imported ({exc}); reinstall "
                         "spectra's dependencies (pip install 'spectra-geometry') in this environment"}
    except Exception as exc:  # noqa: BLE001 - one broken item must not stop the batch
        return {"schema": ERROR_SCHEMA, "spectra_version": __version__, "item": name, "fingerprint": fp,
                "error": f"unexpected {type(exc).__name__}: {exc} (a bug; please report it)"}
    doc["item"] = name  # doc["source"]["fingerprint"] comes from the same function on the same input
    if isinstance(doc.get("warnings"), list):  # (options named as the batch's caller spells them)
        doc["warnings"] = [for_caller(w) if isinstance(w, str) else w for w in doc["warnings"]]
    return doc


def _worker_init(threads: int, parent: int | None = None, command_line: bool = False) -> None:
    """Worker initializer: ``threads`` BLAS threads (workers x threads <= cores), and death with the
    parent (Linux), so a killed batch leaves no workers running. ``parent``: the batch's process id; a
    worker whose parent died before it asked for the signal (it would never come) exits at once."""
    from spectra_cli.errors import command_line_run

    command_line_run(command_line)  # (a spawned worker does not inherit it)
    for var in ENV_VARS:
        os.environ[var] = str(threads)  # the worker's cap (threads.threads_for respects it)
    if sys.platform.startswith("linux"):
        import contextlib
        import ctypes
        import signal

        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
        if parent is not None and os.getppid() != parent:  # reparented already: the batch is gone
            os.kill(os.getpid(), signal.SIGKILL)  # what the signal asked for would have done
    from threadpoolctl import threadpool_limits

    threadpool_limits(threads)


def _pool(workers: int) -> ProcessPoolExecutor:
    import multiprocessing

    # fork starts workers in milliseconds (spawn re-imports numpy in each, ~0.5 s); it is the
    # default on Linux and safe here: the parent holds no locks or threads of its own.
    method = "fork" if sys.platform.startswith("linux") else "spawn"
    threads = worker_threads(workers)  # the cores shared out (not the machine's count: its affinity mask)
    return ProcessPoolExecutor(max_workers=workers, mp_context=multiprocessing.get_context(method),
                               initializer=_worker_init, initargs=(threads, os.getpid(), CLI_RUN[0]))


def run_batch(
    items: list[Item], options: dict[str, Any], *, workers: int = 1, engine: str = "local",
    scheduler: str | None = None, on_result: Callable[[dict[str, Any]], None] | None = None,
    connect_timeout: float = 5.0, verbose: bool = False,
) -> Iterator[dict[str, Any]]:
    """Yield each item's line as it completes (input order when ``workers == 1``). With
    ``engine="dask"`` the items are Dask tasks (a LocalCluster of ``workers`` processes, or the
    cluster at ``scheduler``); each item is analysed whole on one worker."""
    workers = check_int("workers", workers, minimum=1)
    if check_choice("engine", engine, ENGINES) != "local":
        yield from _run_on_dask(items, options, workers=workers, scheduler=scheduler, on_result=on_result,
                                connect_timeout=connect_timeout, verbose=verbose)
        return
    if workers == 1 or len(items) <= 1:  # (none left, after --resume: no pool to start)
        for it in items:
            doc = run_item(it.name, it.fingerprint, options, it.error, **_extra(it))
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
                pending[_submit(ex, it, options)] = it
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


def _extra(it: Item) -> dict[str, Any]:
    """The keywords of :func:`run_item` an item needs besides its name (none for a plain matrix)."""
    extra: dict[str, Any] = {k: v for k, v in (("base", it.base), ("adapter", it.adapter)) if v is not None}
    if it.shape is not None and len(it.shape) == 4 and it.adapter is None:
        extra["kernel"] = True
    return extra


def _submit(ex: ProcessPoolExecutor, it: Item, options: dict[str, Any]) -> Future[dict[str, Any]]:
    return ex.submit(run_item, it.name, it.fingerprint, options, it.error, **_extra(it))


def _run_on_dask(items: list[Item], options: dict[str, Any], *, workers: int, scheduler: str | None,
                 on_result: Callable[[dict[str, Any]], None] | None, connect_timeout: float,
                 verbose: bool) -> Iterator[dict[str, Any]]:
    from spectra_cli.stream import cluster as dask_engine

    with dask_engine.client(scheduler, workers if scheduler is None else None, connect_timeout=connect_timeout,
                            verbose=verbose) as c:
        distributed = dask_engine.require_distributed()
        futures = {c.submit(run_item, it.name, it.fingerprint, options, it.error, CLI_RUN[0], pure=False,
                            **_extra(it)): it for it in items}
        for fut in distributed.as_completed(futures):
            try:
                doc = fut.result()
            except Exception as exc:  # noqa: BLE001 - a worker lost for good: this item fails, the batch goes on
                it = futures[fut]
                doc = {"schema": ERROR_SCHEMA, "spectra_version": __version__, "item": it.name,
                       "fingerprint": it.fingerprint, "error": f"the Dask task failed: {type(exc).__name__}: {exc}"}
            if on_result:
                on_result(doc)
            yield doc


def _died(it: Item) -> dict[str, Any]:
    return {"schema": ERROR_SCHEMA, "spectra_version": __version__, "item": it.name, "fingerprint": it.fingerprint,
            "error": "a worker process died (out of memory, or killed) before this item finished"}
