"""The Hugging Face ``Trainer`` adapter of :func:`spectra_cli.capture`: a snapshot of every matching module's
moments every ``every`` steps, written as ``folder/step_<N>/<module>.npz`` (a run that ``batch``, ``trend`` and
``report`` read by its step). Importing this module needs transformers (the ``capture`` extra); the Lightning one
is :mod:`spectra_cli.run.lightning_callback`."""

from __future__ import annotations

import contextlib
import os
from typing import Any

from transformers import TrainerCallback

from spectra_cli.errors import InputError
from spectra_cli.stream.hooks import Capture, check_capture_options, module_matcher
from spectra_cli.validate import check_bool, check_int


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
        self.folder, self.modules, self.options = folder, modules, check_capture_options(options)
        self.reset = check_bool("reset", reset)
        self.every = check_int("every", every, minimum=1)
        module_matcher(modules)
        self.capture: Capture | None = None
        self.saved: list[str] = []
        self._last = -1

    def on_train_begin(self, args: Any, state: Any, control: Any, model: Any = None, **kwargs: Any) -> None:
        if self.capture is not None:  # (a train() run again after a failure: the old hooks go first)
            self.capture.close()
        self.capture = Capture(model, modules=self.modules, **self.options)

    def _snapshot(self, step: int) -> None:
        if self.capture is not None and step != self._last:
            with contextlib.suppress(InputError):  # (no module saw a row since the last one: nothing to write)
                self.saved += self.capture.save(self.folder, step=step, reset=self.reset)
            self._last = step

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if state.global_step % self.every == 0:
            self._snapshot(int(state.global_step))

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._snapshot(int(state.global_step))
        if self.capture is not None:
            self.capture.close()
