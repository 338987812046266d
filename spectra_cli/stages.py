"""Progress of the stages after the read: the bootstrap replicates, the population's simulated
spectra, the sequence's Gram matrices and controls, the Lanczos iterations.

A run's ``progress`` callable (``progress(done, total)``, the keyword every reading command takes) is
made current for the run with :func:`reporting`; a stage deep inside asks :func:`stage` for a
ticker and calls it as it goes, so no signature in between carries it. A plain callable gets each
stage's ``(done, total)`` in turn; one with a ``stage(label, total)`` method (the command line's
bar) is told the stage's name first.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

_current: ContextVar[Callable[[int, int], None] | None] = ContextVar("spectra_progress", default=None)


@contextmanager
def reporting(progress: Callable[[int, int], None] | None) -> Iterator[None]:
    """Make ``progress`` the current run's for the stages inside (nothing when None)."""
    token = _current.set(progress)
    try:
        yield
    finally:
        _current.reset(token)


def _noop(done: int) -> None:
    return None


def stage(label: str, total: int) -> Callable[[int], None]:
    """A ticker ``tick(done)`` for a stage of ``total`` steps named ``label`` (a no-op without a
    current progress)."""
    progress = _current.get()
    if progress is None:
        return _noop
    named: Any = getattr(progress, "stage", None)
    if callable(named):
        named(label, total)

    def tick(done: int) -> None:
        progress(done, total)

    tick(0)
    return tick


def expect(label: str, seconds: float, why: str) -> None:
    """Tell the current progress (when it has an ``expect(label, seconds, why)`` method: the command line's) that a
    stage named ``label`` is expected to take about ``seconds``, for the reason ``why``, before it starts."""
    progress = _current.get()
    told: Any = getattr(progress, "expect", None)
    if callable(told):
        told(label, seconds, why)


def reports_progress(func: Any) -> Any:
    """Decorate a library function whose keyword ``progress`` is the run's: current for its stages."""
    import functools

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        with reporting(kwargs.get("progress")):
            return func(*args, **kwargs)

    return wrapper
