"""The Hugging Face ``Trainer`` adapter of :func:`spectra_cli.capture`: a snapshot of every matching module's
moments every ``every`` steps, written as ``folder/step_<N>/<module>.npz`` (a run that ``batch``, ``trend`` and
``report`` read by its step), and its headline metrics logged through the Trainer's reporting integrations
(``report_to``: TensorBoard, W&B, MLflow; :mod:`spectra_cli.run.dashboard`). Importing this module needs
transformers and accelerate (the ``capture`` extra); the Lightning one is :mod:`spectra_cli.run.lightning_callback`."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

from transformers import TrainerCallback

from spectra_cli.errors import SpectraWarning
from spectra_cli.run import dashboard
from spectra_cli.stream.hooks import Snapshots


class SpectraTrainerCallback(TrainerCallback):  # type: ignore[misc]
    """A Hugging Face ``Trainer`` callback: ``SpectraTrainerCallback.add_to(trainer, "moments",
    modules="encoder.layer.*", every=500)`` (or ``Trainer(..., callbacks=[SpectraTrainerCallback(...)])``, which
    writes the snapshots but cannot log: a callback is never given its trainer).

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
    log : bool or list of str
        What each snapshot logs through ``trainer.log`` (every ``report_to`` integration) once the callback knows
        its trainer (:meth:`add_to`, or ``trainer`` here), per module as ``spectra/<module>/<name>`` with its
        standard error as ``<name>_se``: True (default) the headline metrics (alpha, participation ratio, entropy
        rank, top-PC share, spikes above the bulk), a list of report fields instead, False nothing. TensorBoard
        and W&B file them under ``train/``, as the Trainer does every logged value.
    fit : dict
        Keywords of :func:`spectra_cli.fit` for the logged metrics (``{"window": "11:100"}``), checked at once;
        the option a logged field needs is turned on (``density`` for ``density.alpha``). While it logs, the
        moments keep 16 row groups (``groups=16``, the standard errors' own: ``modules x 17 x d^2 x 8`` bytes;
        ``groups=0``: first-order errors in a sixteenth of the memory).
    trainer : transformers.Trainer
        The trainer whose ``log`` the metrics go through (:meth:`add_to` sets it and adds the callback).
    **options
        Further keywords of :func:`spectra_cli.capture` (``groups``, ``precision``, ``positions``, ...).
    """

    def __init__(self, folder: str | os.PathLike[str], *, modules: str, every: int = 500, reset: bool = True,
                 log: bool | str | Sequence[str] = True, fit: dict[str, Any] | None = None, trainer: Any = None,
                 **options: Any) -> None:
        self.fields = dashboard.logged_fields(log)
        self.fit_keywords = dashboard.fit_keywords(self.fields, fit)
        if self.fields and trainer is not None:  # (the logged errors from row groups, as fit's; none to log
            options.setdefault("groups", dashboard.GROUPS)  # without the trainer: the snapshots as asked)
        self.schedule = Snapshots(folder, modules=modules, every=every, reset=reset, **options)
        self.trainer = trainer
        #: what was logged, step by step (the numbers the integrations got)
        self.logged: dict[int, dict[str, float]] = {}
        self._failed: set[str] = set()

    @classmethod
    def add_to(cls, trainer: Any, folder: str | os.PathLike[str], **keywords: Any) -> SpectraTrainerCallback:
        """A callback added to ``trainer`` that logs through it: placed before the reporting integrations, so that
        the last snapshot (at the end of training) reaches them before they close their files and runs."""
        callback = cls(folder, trainer=trainer, **keywords)
        handler = trainer.callback_handler
        first = next((i for i, c in enumerate(handler.callbacks)
                      if type(c).__module__.startswith("transformers.integrations")), len(handler.callbacks))
        handler.callbacks.insert(first, callback)
        return callback

    @property
    def saved(self) -> list[str]:
        return self.schedule.saved

    def on_train_begin(self, args: Any, state: Any, control: Any, model: Any = None, **kwargs: Any) -> None:
        if self.fields and self.trainer is None:
            import warnings

            warnings.warn("SpectraTrainerCallback writes its snapshots but logs no metric: it was not given its "
                          "trainer (SpectraTrainerCallback.add_to(trainer, folder, ...), or log=False)",
                          SpectraWarning, stacklevel=2)
        self.schedule.start(model)

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self.schedule.step(int(state.global_step)):
            self._log(int(state.global_step))

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        try:
            if self.schedule.snapshot(int(state.global_step)):
                self._log(int(state.global_step))
        finally:
            self.schedule.stop()

    def _log(self, step: int) -> None:
        if self.trainer is None:
            return
        values = dashboard.snapshot_metrics(self.schedule.latest, self.fields, self.fit_keywords, self._failed)
        if values:
            self.logged[step] = values
            self.trainer.log(dict(values))
