"""Runners of passes over the rows: mergeable states fed block by block (local threads now)."""

from spectra_cli.engine.local import Progress, prefetch, run_pass
from spectra_cli.engine.states import MomentsState, RowGuard, RowsBuffer, RowsState, State

__all__ = ["MomentsState", "Progress", "RowGuard", "RowsBuffer", "RowsState", "State", "prefetch", "run_pass"]
