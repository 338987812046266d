"""Single-machine passes: a reader thread fetches the next block while BLAS multiplies the
current one, and every block goes through the guard to each state. Memory is
O(states + block), independent of the number of rows."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

from spectra_cli.sources.rows import Block
from spectra_cli.stream.states import RowGuard, State

Progress = Callable[[int, int], None]
T = TypeVar("T")
_END = object()


def prefetch(it: Iterator[T]) -> Iterator[T]:
    """Run ``next(it)`` one item ahead in a thread (file reads release the GIL)."""
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="spectra-read") as ex:
        fut = ex.submit(next, it, _END)
        while True:
            item = fut.result()
            if item is _END:
                return
            fut = ex.submit(next, it, _END)
            yield item  # type: ignore[misc]


def run_pass(blocks: Iterable[Block], states: Sequence[State], guard: RowGuard, *, total: int,
             progress: Progress | None = None) -> None:
    """Feed every block that passes the guard to every state (the one loop of every pass)."""
    done = 0
    for b in prefetch(iter(blocks)):
        X, w = guard.filter(b.X, b.w, b.row_id)
        if len(X):
            for s in states:
                s.update(X, w)
        if len(X) < len(b.X):  # (rows dropped: a state that places rows by position counts them too)
            for s in states:
                skip = getattr(s, "skip", None)
                if skip is not None:
                    skip(len(b.X) - len(X))
        done += len(b.X)
        if progress is not None:
            progress(done, total)
    guard.finish()
