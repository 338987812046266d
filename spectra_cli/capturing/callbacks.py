"""The training callbacks of :func:`spectra_cli.capture`, one for each framework: a snapshot of every matching
module's moments every ``every`` steps, written as ``folder/step_<N>/<module>.npz`` (a run that ``batch``, ``trend``
and ``report`` read by its step), and each snapshot's headline metrics logged to the run's dashboard
(:mod:`spectra_cli.capturing.dashboard`).

- :class:`SpectraTrainerCallback`: the Hugging Face ``Trainer`` (needs transformers and accelerate, the ``capture``
  extra); it logs through ``trainer.log``, so every ``report_to`` integration (TensorBoard, W&B, MLflow) gets them.
- :class:`SpectraLightningCallback`: Lightning (``pip install lightning``); it logs through ``trainer.loggers``.

Each class is made when first asked for (``from spectra_cli.capturing.callbacks import SpectraTrainerCallback``), so
that this module needs neither framework until then."""

from __future__ import annotations

import functools
import os
from collections.abc import Sequence
from typing import Any

from spectra_cli.capturing import dashboard
from spectra_cli.capturing.hooks import Snapshots
from spectra_cli.errors import OptionError, SpectraWarning, param


def _frameworks() -> list[str]:
    """The callbacks whose framework is installed (each class needs its own)."""
    from importlib.util import find_spec

    return [name for name, module in (("SpectraTrainerCallback", "transformers"),
                                      ("SpectraLightningCallback", "lightning"))
            if find_spec(module) is not None]


__all__ = _frameworks()  # (each made when first asked for)


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})


def __getattr__(name: str) -> Any:
    if name == "SpectraTrainerCallback":
        return _trainer_callback()
    if name == "SpectraLightningCallback":
        return _lightning_callback()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


@functools.cache
def _trainer_callback() -> type:
    from transformers import TrainerCallback

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
            if trainer is not None and not callable(getattr(trainer, "log", None)):
                raise OptionError(f"{param('trainer', trainer, show=True)} must be the transformers Trainer the "
                                  "metrics are logged through (its log method).")
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

    SpectraTrainerCallback.__qualname__ = "SpectraTrainerCallback"  # (pickled by reference: this module's name)
    return SpectraTrainerCallback


@functools.cache
def _lightning_callback() -> type:
    from lightning.pytorch.callbacks import Callback

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

    SpectraLightningCallback.__qualname__ = "SpectraLightningCallback"
    return SpectraLightningCallback
