"""The Lightning adapter of :func:`spectra_cli.capture`: a snapshot of every matching module's moments every
``every`` optimizer steps, written as ``folder/step_<N>/<module>.npz`` (a run that ``batch``, ``trend`` and
``report`` read by its step), and its headline metrics logged through the trainer's loggers (TensorBoard, W&B,
MLflow, CSV: whichever it has; :mod:`spectra_cli.run.dashboard`). Importing this module needs Lightning
(``pip install lightning``)."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

from lightning.pytorch.callbacks import Callback

from spectra_cli.run import dashboard
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
    log : bool or list of str
        What each snapshot logs through ``trainer.loggers`` at ``trainer.global_step``, per module as
        ``spectra/<module>/<name>`` with its standard error as ``<name>_se``: True (default) the headline
        metrics (alpha, participation ratio, entropy rank, top-PC share, spikes above the bulk), a list of report
        fields instead, False nothing. Lightning's own curves are at the batch index, one below.
    fit : dict
        Keywords of :func:`spectra_cli.fit` for the logged metrics (``{"window": "11:100"}``), checked at once;
        the option a logged field needs is turned on (``density`` for ``density.alpha``). While it logs, the
        moments keep 16 row groups (``groups=16``, the standard errors' own: ``modules x 17 x d^2 x 8`` bytes;
        ``groups=0``: first-order errors in a sixteenth of the memory).
    **options
        Further keywords of :func:`spectra_cli.capture` (``groups``, ``precision``, ``positions``, ...).
    """

    def __init__(self, folder: str | os.PathLike[str], *, modules: str, every: int = 500, reset: bool = True,
                 log: bool | str | Sequence[str] = True, fit: dict[str, Any] | None = None, **options: Any) -> None:
        super().__init__()
        self.fields = dashboard.logged_fields(log)
        self.fit_keywords = dashboard.fit_keywords(self.fields, fit)
        if self.fields:  # (the logged standard errors from row groups, as fit's: honest on tokens of one text)
            options.setdefault("groups", dashboard.GROUPS)
        self.schedule = Snapshots(folder, modules=modules, every=every, reset=reset, **options)
        #: what was logged, step by step (the numbers the loggers got)
        self.logged: dict[int, dict[str, float]] = {}
        self._failed: set[str] = set()

    @property
    def saved(self) -> list[str]:
        return self.schedule.saved

    def on_fit_start(self, trainer: Any, pl_module: Any) -> None:
        self.schedule.start(pl_module)

    def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        if self.schedule.step(int(trainer.global_step)):
            self._log(trainer)

    def on_exception(self, trainer: Any, pl_module: Any, exception: BaseException) -> None:
        self.schedule.stop()  # (the hooks never outlive the run)

    def on_fit_end(self, trainer: Any, pl_module: Any) -> None:
        try:
            if self.schedule.snapshot(int(trainer.global_step)):
                self._log(trainer)  # (the loggers close after on_fit_end: the last snapshot reaches them)
        finally:
            self.schedule.stop()

    def _log(self, trainer: Any) -> None:
        values = dashboard.snapshot_metrics(self.schedule.latest, self.fields, self.fit_keywords, self._failed)
        if values:
            step = int(trainer.global_step)
            self.logged[step] = values
            for logger in trainer.loggers:  # (each logger writes on rank 0 only; the files are rank 0's too)
                logger.log_metrics(values, step=step)
