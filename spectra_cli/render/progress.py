"""A rich progress bar on stderr that shows itself only for work longer than ~1 s; where stderr is not a
terminal (a pipe, a CI log), one line for a stage that will take long."""

from __future__ import annotations

import sys
import time
from typing import Any

#: Without a terminal, a stage projected to last longer than this (seconds) gets one line on stderr, once it
#: has run NOTE_AFTER seconds (its pace measured, not guessed).
NOTE_PAST = 30.0
NOTE_AFTER = 5.0


def _duration(seconds: float) -> str:
    return f"about {seconds / 60:.0f} min" if seconds >= 90 else f"about {seconds:.0f} s"


class LazyProgress:
    """Callable ``(done, total)``; draws on stderr after ``delay`` seconds, on a terminal. Elsewhere it writes
    one line for a stage that will take longer than :data:`NOTE_PAST` seconds at its measured pace."""

    def __init__(self, label: str, *, delay: float = 1.0, enabled: bool | None = None) -> None:
        self._label = label
        self._delay = delay
        self._t0 = time.monotonic()
        self._stage_t0 = self._t0
        self._noted = False
        self._enabled = sys.stderr.isatty() if enabled is None else enabled
        self._progress: Any = None
        self._task: Any = None

    def stage(self, label: str, total: int) -> None:
        """A new stage (the bootstrap after the read, ...): the bar restarts under its name."""
        self._label = label
        self._stage_t0 = time.monotonic()
        self._noted = False
        if self._progress is not None:
            self._progress.update(self._task, description=label, completed=0, total=total)

    def expect(self, label: str, seconds: float, why: str) -> None:
        """Before a stage: one line on stderr (above the bar on a terminal) when it is expected to take longer than
        :data:`NOTE_PAST` seconds."""
        if not seconds > NOTE_PAST:
            return
        line = f"note: {label} will take {_duration(seconds)} ({why})"
        if self._progress is not None:
            from rich.text import Text

            # (a Text, not markup=False: the call re-renders the bar below it with the same options)
            self._progress.console.print(Text(line))
        else:
            sys.stderr.write(line + "\n")
            sys.stderr.flush()

    def _note_if_long(self, done: int, total: int) -> None:
        elapsed = time.monotonic() - self._stage_t0
        if self._noted or done <= 0 or total <= done or elapsed < NOTE_AFTER:
            return
        left = elapsed / done * (total - done)
        if left > NOTE_PAST:
            self._noted = True
            when = _duration(left)
            sys.stderr.write(f"note: {self._label}: {done} of {total} done in {elapsed:.0f} s, {when} more\n")
            sys.stderr.flush()

    def __call__(self, done: int, total: int) -> None:
        if not self._enabled:
            self._note_if_long(done, total)
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
