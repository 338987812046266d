"""One thread policy for every BLAS and LAPACK call of a run, in-process and in every worker.

A BLAS call gets its threads by the size of the operation: below :data:`SMALL_FLOPS` floating-point
operations it runs on one thread (a second thread costs more than it saves there, and on a loaded
machine — a CI runner, a laptop running a build — a second thread that spins waiting for a core
costs up to 300x: a 384 x 384 ``eigvalsh`` took 2.29 s on two contended threads against 0.0066 s on
one), above it on every core this process may run on (its affinity mask, not the machine's count).
``bench/bench_threads.py`` measures the table behind the threshold, quiet and loaded.

The user decides first: ``threads=N`` (``--threads N``) fixes every call at N threads, and an
environment variable the user set (``OMP_NUM_THREADS``, ``OPENBLAS_NUM_THREADS``, ``MKL_NUM_THREADS``,
``BLIS_NUM_THREADS``) caps them. Batch workers get ``cores // workers`` each
(:func:`worker_threads`), so workers never oversubscribe the cores.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import Any, TypeVar

T = TypeVar("T")
R = TypeVar("R")

#: The environment variables through which a user caps BLAS threads (respected, never overwritten).
ENV_VARS = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "BLIS_NUM_THREADS")
#: Below this many floating-point operations a call runs on one thread. Measured on 2 cores with
#: bench/bench_threads.py (median of 5, seconds, 1 thread / 2 threads, quiet | with 2 busy processes):
#: eigvalsh d = 384 (4 d^3 = 2.3e8): 0.0046 / 0.0044 | 0.0125 / 0.0318; d = 512 (5.4e8): 0.0103 / 0.0088
#: | 0.031 / 0.199; d = 1,024 (4.3e9): 0.080 / 0.048 | 0.21 / 0.52. X^T X of 8,192 x 384 (1.2e9):
#: 0.017 / 0.028 | 0.040 / 0.025; of 8,192 x 768 (4.8e9): 0.061 / 0.037 | 0.099 / 0.119. Below 1.3e9
#: a second thread gains nothing quiet (or loses) and costs up to 6x loaded; above it, it pays quiet.
SMALL_FLOPS = 1.3e9
#: The same threshold for LAPACK's symmetric eigensolver, whose threads synchronise far more often than a
#: product's: loaded, a second thread lost up to d = 1,024 (0.21 s on one thread against 0.52 s on two, above)
#: and a 768 x 768 eigvalsh took 4.6 s on two contended threads against 0.06 s on one (bench/README.md);
#: from d = 2,048 (4 d^3 = 3.4e10) two threads win quiet (0.49 s against 0.64) and loaded (1.04 against 1.18).
SMALL_EIGEN_FLOPS = 3.0e10

_override: int | None = None
_controller: Any = None
_in_pool = threading.local()  # (active: this thread runs a task of a pool)
#: The imports :func:`import_in_background` started. A fork waits for them (:func:`_join_imports`): a child forked
#: while one runs would hold that module's import lock with no thread to release it, and hang on importing it.
_IMPORTING: list[threading.Thread] = []


def import_in_background(name: str) -> threading.Thread | None:
    """Start importing the module ``name`` in a thread of its own, so that its start-up overlaps the caller's work
    (reading, products, decompositions: numpy releases the GIL inside them); a later ``import`` of it waits for
    that import to finish (Python's lock on the module) and finds it done. ``--population``'s ``scipy.special``
    is 0.3 s of start-up, a fifth of the whole run at d = 384. An error is left for the later import to raise. Not
    a daemon: a process that ends first waits for it (no module is left half imported). None when ``name`` is
    imported already."""
    if name in sys.modules:
        return None

    def load() -> None:
        import importlib

        with contextlib.suppress(Exception):
            importlib.import_module(name)

    thread = threading.Thread(target=load, name=f"spectra-import-{name}")
    thread.start()
    _IMPORTING.append(thread)
    return thread


def _join_imports() -> None:
    while _IMPORTING:
        _IMPORTING.pop().join()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(before=_join_imports)


def usable_cores() -> int:
    """The cores this process may run on."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # pragma: no cover - not Linux
        return max(1, os.cpu_count() or 1)


def env_threads() -> int | None:
    """The cap a user set through the environment (the smallest of the variables set), or None."""
    values = []
    for var in ENV_VARS:
        text = os.environ.get(var, "").strip()
        if text.isdigit() and int(text) > 0:
            values.append(int(text))
    return min(values) if values else None


#: The most BLAS threads a run may be given (no machine has more cores; the pools would refuse far fewer).
MAX_THREADS = 4096


def check_threads(threads: Any) -> int | None:
    """``threads`` as a count of BLAS threads (None: the policy's), or an OptionError naming it."""
    from spectra_cli.errors import OptionError, param

    if threads is not None and (isinstance(threads, bool) or not isinstance(threads, int) or threads < 1):
        raise OptionError(f"{param('threads', threads, show=True)} must be a positive number of threads.")
    if threads is not None and threads > MAX_THREADS:
        shown = str(threads) if len(str(threads)) <= 20 else f"{str(threads)[:17]}... ({len(str(threads))} digits)"
        raise OptionError(f"{param('threads', show=False)} {shown} is more than {MAX_THREADS} threads; give at most "
                          "the cores the run may use.")
    return threads


def set_threads(threads: int | None) -> None:
    """Fix every BLAS call at ``threads`` threads (None: the policy decides again)."""
    global _override
    _override = check_threads(threads)


@contextlib.contextmanager
def call(threads: int | None) -> Iterator[None]:
    """The pools of one library call: ``threads`` for every BLAS call inside (None: the policy), and
    every BLAS call the policy does not size itself (a matrix-vector product, a small product in an
    analysis) on the threads of a small operation, one by default; the previous setting after."""
    global _override
    before = _override
    if threads is not None:
        set_threads(threads)
    try:
        with blas(0.0):
            yield
    finally:
        _override = before


def threads_for(flops: float, small: float = SMALL_FLOPS) -> int:
    """The threads a BLAS call of ``flops`` floating-point operations gets (one below ``small``; one inside a task of
    a pool, :func:`map_side_by_side`'s: its tasks share the cores, one each)."""
    if getattr(_in_pool, "active", False):
        return 1
    if _override is not None:
        return _override
    cap = env_threads()
    want = 1 if flops < small else usable_cores()
    return min(want, cap) if cap is not None else want


def worker_threads(workers: int) -> int:
    """BLAS threads of each of ``workers`` processes: the cores shared out, at least one each."""
    if _override is not None:
        return _override
    share = max(1, usable_cores() // max(1, workers))
    cap = env_threads()
    return min(share, cap) if cap is not None else share


@contextlib.contextmanager
def blas(flops: float, small: float = SMALL_FLOPS) -> Iterator[int]:
    """Run the block on the threads the policy gives an operation of ``flops``; yields that count.
    ``small``: the threshold of the operation's kind (:data:`SMALL_EIGEN_FLOPS` for eigensolvers)."""
    global _controller
    n = threads_for(flops, small)
    try:
        # The BLAS libraries loaded (numpy's, scipy's own, ...) are scanned again whenever a module was
        # imported since the last scan (a scan costs 0.2 ms; a library loaded later would be left unlimited).
        if _controller is None or _controller[1] != len(sys.modules):
            from threadpoolctl import ThreadpoolController

            _controller = (ThreadpoolController(), len(sys.modules))
        limiter = _controller[0].limit(limits=n, user_api="blas")
    except Exception:  # noqa: BLE001 - no controllable BLAS (a stub build): run as it is
        yield n
        return
    with limiter:
        yield n


def pool_workers(items: int, *, wanted: bool) -> int:
    """How many threads run ``items`` tasks side by side (1: one after another): the cores this process may use
    when ``wanted`` and the thread policy runs small operations on one thread (no caller fixed more), never from
    inside such a task (no pool within a pool)."""
    workers = min(items, threads_for(float("inf")))
    if not wanted or workers <= 1 or threads_for(0.0) != 1 or getattr(_in_pool, "active", False):
        return 1
    return workers


def in_pool(fn: Callable[[T], R]) -> Callable[[T], R]:
    """``fn`` marked, while it runs, as a task of a pool: a :func:`pool_workers` inside it is 1, and so is every
    :func:`threads_for`."""
    def task(item: T) -> R:
        before = getattr(_in_pool, "active", False)
        _in_pool.active = True
        try:
            return fn(item)
        finally:
            _in_pool.active = before

    return task


def map_side_by_side(fn: Callable[[T], R], items: Sequence[T], *, wanted: bool) -> list[R]:
    """``[fn(item) for item in items]``, side by side on the cores this process may use when ``wanted`` and the
    thread policy runs small operations on one thread (no caller fixed more: each task's BLAS calls then on one
    thread, never two tasks of two threads each on two cores), else one after another; never from inside such a
    task (no pool within a pool). ``fn`` must not depend on the order: the results are the same either way."""
    workers = pool_workers(len(items), wanted=wanted)
    if workers <= 1:
        return [fn(item) for item in items]
    from concurrent.futures import ThreadPoolExecutor

    task = in_pool(fn)
    # (threadpoolctl's limit is global to the process: set here, once, by this thread)
    with blas(0.0), ThreadPoolExecutor(max_workers=workers) as pool:
        return list(pool.map(task, items))
