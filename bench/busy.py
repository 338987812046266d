"""Busy processes on the same cores (a CI runner, a laptop running a build), for the loaded benches."""

from __future__ import annotations

import contextlib
import subprocess
import sys
import time
from collections.abc import Iterator

BUSY = "import time\nend = time.time() + {seconds}\nwhile time.time() < end:\n    pass\n"


@contextlib.contextmanager
def busy(count: int, seconds: float = 600) -> Iterator[None]:
    """``count`` processes spinning on the CPU for at most ``seconds`` (they stop by themselves), killed on exit."""
    procs = [subprocess.Popen([sys.executable, "-c", BUSY.format(seconds=seconds)]) for _ in range(count)]
    try:
        time.sleep(0.5)
        yield
    finally:
        for p in procs:
            p.kill()
