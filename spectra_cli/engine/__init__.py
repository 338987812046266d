"""Runners that turn a source into moments (local threads now; Dask later)."""

from spectra_cli.engine.local import Accumulated, accumulate

__all__ = ["Accumulated", "accumulate"]
