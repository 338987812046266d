"""The Lightning adapter of :func:`spectra_cli.capture`: a snapshot of every matching module's moments every
``every`` optimizer steps, written as ``folder/step_<N>/<module>.npz`` (a run that ``batch``, ``trend`` and
``report`` read by its step). Importing this module needs Lightning (``pip install lightning``)."""

from __future__ import annotations

import os
from typing import Any

from lightning.pytorch.callbacks import Callback

from spectra_cli.stream.hooks import Snapshots


class SpectraLightningCallback(Callback):  # type: ignore[misc]
    """``lightning.Trainer(callbacks=[SpectraLightningCallback("moments", modules="encoder.layer.*", every=500)])``.

    Parameters
    ----------
    folder : path
        Where the snapshots go (``folder/step_<global step>/<module>.npz``); rank 0 writes, every rank takes part.
    modules : str
        Which modules of the ``LightningModule`` (as :func:`spectra_cli.capture`).
    every : int
        Optimizer steps between snapshots (and one at the end of training).
    reset : bool
        True (default): each snapshot holds the rows since the last one; False: every row since the start.
    **options
        Further keywords of :func:`spectra_cli.capture` (``groups``, ``precision``, ``positions``, ...).
    """

    def __init__(self, folder: str | os.PathLike[str], *, modules: str, every: int = 500, reset: bool = True,
                 **options: Any) -> None:
        super().__init__()
        self.schedule = Snapshots(folder, modules=modules, every=every, reset=reset, **options)

    @property
    def saved(self) -> list[str]:
        return self.schedule.saved

    def on_fit_start(self, trainer: Any, pl_module: Any) -> None:
        self.schedule.start(pl_module)

    def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        self.schedule.step(int(trainer.global_step))

    def on_exception(self, trainer: Any, pl_module: Any, exception: BaseException) -> None:
        self.schedule.stop()  # (the hooks never outlive the run)

    def on_fit_end(self, trainer: Any, pl_module: Any) -> None:
        self.schedule.snapshot(int(trainer.global_step))
        self.schedule.stop()
