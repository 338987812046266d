"""A rich progress bar on stderr that shows itself only for work longer than ~1 s."""

from __future__ import annotations

import sys
import time
from typing import Any


class LazyProgress:
    """Callable ``(done, total)``; draws on stderr after ``delay`` seconds, on a terminal only."""

    def __init__(self, label: str, *, delay: float = 1.0, enabled: bool | None = None) -> None:
        self._label = label
        self._delay = delay
        self._t0 = time.monotonic()
        self._enabled = sys.stderr.isatty() if enabled is None else enabled
        self._progress: Any = None
        self._task: Any = None

    def stage(self, label: str, total: int) -> None:
        """A new stage (the bootstrap after the read, ...): the bar restarts under its name."""
        self._label = label
        if self._progress is not None:
            self._progress.update(self._task, description=label, completed=0, total=total)

    def __call__(self, done: int, total: int) -> None:
        if not self._enabled:
            return
        if self._progress is None:
            if time.monotonic() - self._t0 < self._delay:
                return
            from rich.console import Console
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeRemainingColumn

            self._progress = Progress(
                "[progress.description]{task.description}", BarColumn(), MofNCompleteColumn(),
                TimeRemainingColumn(), console=Console(stderr=True), transient=True,
            )
            self._progress.start()
            self._task = self._progress.add_task(self._label, total=total)
        self._progress.update(self._task, completed=done, total=total)

    def close(self) -> None:
        if self._progress is not None:
            self._progress.stop()
            self._progress = None

    def __enter__(self) -> LazyProgress:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
