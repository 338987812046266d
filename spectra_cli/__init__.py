"""spectra: covariance spectra, power-law exponents, effective ranks and isotropy of embedding
and activation matrices.

>>> import spectra_cli as spectra
>>> rep = spectra.fit(X, window="11:200")      # ndarray, path, __array__/__dlpack__ object, Accumulator
>>> rep.fit.alpha, rep.rank.participation_ratio
>>> rep.to_dict()                              # the JSON report of `spectra fit --json`

The names below are imported on first use, so ``import spectra_cli`` stays cheap.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

from spectra_cli.version import __version__

_EXPORTS = {
    "fit": "spectra_cli.run.matrix",
    "spectrum": "spectra_cli.run.matrix",
    "isotropy": "spectra_cli.run.matrix",
    "whiten": "spectra_cli.run.whiten",
    "sequence": "spectra_cli.run.sequence",
    "accumulate": "spectra_cli.run.matrix",
    "moments": "spectra_cli.run.matrix",
    "batch": "spectra_cli.run.batch",
    "check": "spectra_cli.run.check",
    "compare": "spectra_cli.run.compare",
    "trend": "spectra_cli.run.trend",
    "plot": "spectra_cli.plot",
    "report": "spectra_cli.run.report",
    "info": "spectra_cli.run.info",
    "synth": "spectra_cli.run.synth",
    "capture": "spectra_cli.capturing.command",
    "Capture": "spectra_cli.capturing.hooks",
    "Dataset": "spectra_cli.sources.dataset",
    "resolve": "spectra_cli.sources.dataset",
    "Accumulator": "spectra_cli.stream.accumulator",
    "Report": "spectra_cli.results",
    "ReadOptions": "spectra_cli.options",
    "WhiteningTransform": "spectra_cli.analysis.whitening",
    "SpectraError": "spectra_cli.errors",
    "InputError": "spectra_cli.errors",
    "OptionError": "spectra_cli.errors",
    "FitError": "spectra_cli.errors",
    "OutputError": "spectra_cli.errors",
    "SpectraWarning": "spectra_cli.errors",
}

__all__ = [
    "Accumulator", "Capture", "Dataset", "FitError", "InputError", "OptionError", "OutputError", "ReadOptions",
    "Report", "SpectraError", "SpectraWarning", "WhiteningTransform", "__version__", "accumulate", "batch", "capture",
    "check", "compare", "fit", "info", "isotropy", "moments", "plot", "report", "resolve", "sequence", "spectrum",
    "synth", "trend", "whiten",
]

if TYPE_CHECKING:  # pragma: no cover - for type checkers and IDEs
    from spectra_cli import plot
    from spectra_cli.analysis.whitening import WhiteningTransform
    from spectra_cli.capturing.command import capture
    from spectra_cli.capturing.hooks import Capture
    from spectra_cli.errors import FitError, InputError, OptionError, OutputError, SpectraError, SpectraWarning
    from spectra_cli.options import ReadOptions
    from spectra_cli.results import Report
    from spectra_cli.run.batch import batch
    from spectra_cli.run.check import check
    from spectra_cli.run.compare import compare
    from spectra_cli.run.info import info
    from spectra_cli.run.matrix import accumulate, fit, isotropy, moments, spectrum
    from spectra_cli.run.report import report
    from spectra_cli.run.sequence import sequence
    from spectra_cli.run.synth import synth
    from spectra_cli.run.trend import trend
    from spectra_cli.run.whiten import whiten
    from spectra_cli.sources.dataset import Dataset, resolve
    from spectra_cli.stream.accumulator import Accumulator


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'spectra_cli' has no attribute {name!r}")
    value = import_module(module) if module == f"{__name__}.{name}" else getattr(import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
