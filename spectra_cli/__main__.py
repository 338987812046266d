"""``python -m spectra_cli`` and the ``spectra`` console script.

Ctrl-C while the command line is still being imported (a few hundred milliseconds; longer on a busy
machine) ends as Ctrl-C during the run does: one line on stderr and exit code 130, not a traceback
(nothing can have been written yet)."""

import sys


def main() -> None:
    try:
        from spectra_cli.memory import keep_freed_memory

        keep_freed_memory()  # (a process that ends with its result: freed memory kept for reuse)
        from spectra_cli.cli import main as run
    except KeyboardInterrupt:
        from spectra_cli.errors import NOTHING_HALF_WRITTEN

        sys.stderr.write(f"interrupted (Ctrl-C): {NOTHING_HALF_WRITTEN}\n")
        sys.exit(130)
    run()


if __name__ == "__main__":
    main()
