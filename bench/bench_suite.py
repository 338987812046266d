"""The test suite's wall time as a new user runs it (`python -m pytest`), quiet or with busy processes on the
same cores, alternating with another checkout's (issue 33, part 3).

    python bench/bench_suite.py --rounds 2 --before /path/to/a/worktree/of/an/earlier/commit
    python bench/bench_suite.py --rounds 2 --busy 2

Each run is ``python -m pytest -p no:randomly`` in the checkout's directory (its own conftest, its own
package on ``sys.path``); ``--busy 2`` runs :func:`busy.busy` (two spinning processes) around each.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from busy import busy  # noqa: E402

HERE = Path(__file__).resolve().parents[1]


def run(cwd: Path) -> tuple[float, str]:
    t = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:randomly"], capture_output=True, text=True,
                          cwd=cwd, check=False)
    last = done.stdout.strip().splitlines()[-1] if done.stdout.strip() else done.stderr.strip()[-200:]
    return time.perf_counter() - t, last


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--before", help="another checkout (a worktree of an earlier commit): its runs alternate")
    ap.add_argument("--busy", type=int, default=0, help="this many busy processes on the cores meanwhile")
    args = ap.parse_args()
    checkouts = ([("before", Path(args.before))] if args.before else []) + [("now", HERE)]
    for r in range(args.rounds):
        for name, cwd in checkouts:
            if args.busy:
                with busy(args.busy):
                    seconds, last = run(cwd)
            else:
                seconds, last = run(cwd)
            print(f"round {r + 1} {name}: {seconds:.1f} s ({last})", flush=True)


if __name__ == "__main__":
    main()
