"""The command line's allocator settings: freed memory is kept for reuse (fewer page faults), nothing else."""

from __future__ import annotations

import subprocess
import sys

import pytest

CHURN = """
import resource, sys, numpy as np
if sys.argv[1] == "keep":
    from spectra_cli.memory import keep_freed_memory
    if not keep_freed_memory():
        print(-1)
        sys.exit(0)
faults = lambda: resource.getrusage(resource.RUSAGE_SELF).ru_minflt
before = faults()
for _ in range(200):  # three 1 MiB arrays made and freed, as the expected spectrum's kernel does
    x = np.ones((512, 256)); y = x * 2.0; z = y + x; del x, y, z
print(faults() - before)
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt")
def test_freed_memory_is_reused_instead_of_faulted_in_again():
    def faults(mode: str) -> int:
        done = subprocess.run([sys.executable, "-c", CHURN, mode], capture_output=True, text=True, check=True,
                              timeout=120)
        return int(done.stdout)

    plain, kept = faults("plain"), faults("keep")
    if kept < 0:
        pytest.skip("the C library is not glibc")
    # glibc trims the heap after each round and faults every page in again (about 147,000 faults here); kept, the
    # pages are reused (under 1,000)
    assert kept * 10 < plain


def test_the_command_line_asks_for_it_first(monkeypatch):
    import spectra_cli.__main__ as entry
    import spectra_cli.memory as memory

    asked = []
    monkeypatch.setattr(memory, "keep_freed_memory", lambda: asked.append(True) or True)
    monkeypatch.setattr(sys, "argv", ["spectra", "--version"])
    with pytest.raises(SystemExit) as done:
        entry.main()
    assert asked == [True] and done.value.code in (0, None)
