"""The ``spectra`` command: a Typer app whose commands parse options, call one library
function and render what comes back (``app`` and the error handling in :mod:`.app`, shared
options in :mod:`.flags`, commands in :mod:`.analyse` and :mod:`.ops`)."""

from spectra_cli.cli import analyse, ops  # noqa: F401  (register their commands on `app`)
from spectra_cli.cli.app import EXIT_BUG, EXIT_CHECK, EXIT_OK, EXIT_USAGE, app, main

__all__ = ["EXIT_BUG", "EXIT_CHECK", "EXIT_OK", "EXIT_USAGE", "app", "main"]
