"""The Click command behind the Typer app, for the documentation's CLI reference (mkdocs-click reads
``command``): every command and option of ``spectra`` as the program itself declares them."""

from __future__ import annotations

import typer

from spectra_cli.cli.app import app

command = typer.main.get_command(app)
