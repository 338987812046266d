"""The Lightning adapter of :func:`spectra_cli.capture`: a snapshot of every matching module's moments every
``every`` optimizer steps, written as ``folder/step_<N>/<module>.npz`` (a run that ``batch``, ``trend`` and
``report`` read by its step). Importing this module needs Lightning (``pip install lightning``)."""

from __future__ import annotations

import contextlib
import os
from typing import Any

from lightning.pytorch.callbacks import Callback

from spectra_cli.errors import InputError
from spectra_cli.stream.hooks import Capture, check_capture_options, module_matcher
from spectra_cli.validate import check_bool, check_int


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
        self.folder, self.modules, self.options = folder, modules, check_capture_options(options)
        self.reset = check_bool("reset", reset)
        self.every = check_int("every", every, minimum=1)
        module_matcher(modules)
        self.capture: Capture | None = None
        self.saved: list[str] = []
        self._last = -1

    def on_fit_start(self, trainer: Any, pl_module: Any) -> None:
        if self.capture is not None:
            self.capture.close()
        self.capture = Capture(pl_module, modules=self.modules, **self.options)

    def on_exception(self, trainer: Any, pl_module: Any, exception: BaseException) -> None:
        if self.capture is not None:  # (the hooks never outlive the run)
            self.capture.close()

    def _snapshot(self, step: int) -> None:
        if self.capture is not None and step != self._last:
            with contextlib.suppress(InputError):  # (no module saw a row since the last one: nothing to write)
                self.saved += self.capture.save(self.folder, step=step, reset=self.reset)
            self._last = step

    def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        step = int(trainer.global_step)
        if step and step % self.every == 0:
            self._snapshot(step)

    def on_fit_end(self, trainer: Any, pl_module: Any) -> None:
        self._snapshot(int(trainer.global_step))
        if self.capture is not None:
            self.capture.close()
