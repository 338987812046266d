"""The Hugging Face ``Trainer`` adapter of :func:`spectra_cli.capture`: a snapshot of every matching module's
moments every ``every`` steps, written as ``folder/step_<N>/<module>.npz`` (a run that ``batch``, ``trend`` and
``report`` read by its step). Importing this module needs transformers (the ``capture`` extra); the Lightning one
is :mod:`spectra_cli.run.lightning_callback`."""

from __future__ import annotations

import os
from typing import Any

from transformers import TrainerCallback

from spectra_cli.stream.hooks import Snapshots


class SpectraTrainerCallback(TrainerCallback):  # type: ignore[misc]
    """A Hugging Face ``Trainer`` callback: ``Trainer(..., callbacks=[SpectraTrainerCallback("moments",
    modules="encoder.layer.*", every=500)])``.

    Parameters
    ----------
    folder : path
        Where the snapshots go (``folder/step_<global step>/<module>.npz``); rank 0 writes under
        ``torch.distributed``, every rank takes part.
    modules : str
        Which modules (as :func:`spectra_cli.capture`).
    every : int
        Steps between snapshots (and one at the end of training).
    reset : bool
        True (default): each snapshot holds the rows since the last one; False: every row since the start.
    **options
        Further keywords of :func:`spectra_cli.capture` (``groups``, ``precision``, ``positions``, ...).
    """

    def __init__(self, folder: str | os.PathLike[str], *, modules: str, every: int = 500, reset: bool = True,
                 **options: Any) -> None:
        self.schedule = Snapshots(folder, modules=modules, every=every, reset=reset, **options)

    @property
    def saved(self) -> list[str]:
        return self.schedule.saved

    def on_train_begin(self, args: Any, state: Any, control: Any, model: Any = None, **kwargs: Any) -> None:
        self.schedule.start(model)

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.schedule.step(int(state.global_step))

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.schedule.snapshot(int(state.global_step))
        self.schedule.stop()
