"""What the training callbacks log to the run's dashboard (TensorBoard, Weights & Biases, MLflow: whatever
loggers the framework has): each snapshot's headline metrics per module, each with its standard error, under
``spectra/<module>/<metric>`` (``alpha``, ``alpha_se``, ``participation_ratio``, ``participation_ratio_se``,
``entropy_rank``, ``entropy_rank_se``, ``top_pc_share``, ``top_pc_share_se``, ``spikes``). The numbers are those of
``spectra fit`` on the snapshot's moment file, with the fit keywords the callback was given."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from spectra_cli import metrics as registry
from spectra_cli.errors import OptionError, SpectraError, param
from spectra_cli.results import lookup

#: The prefix of every logged name.
PREFIX = "spectra"
#: A logged name's last part where it is not the field's last part.
NAMES = {"spectrum.spikes.count": "spikes", "fit.alpha": "alpha"}


def name_of(field: str) -> str:
    """The last part of a logged name: ``fit.alpha`` is ``alpha``, ``spectrum.spikes.count`` ``spikes``."""
    return NAMES.get(field, field.rsplit(".", 1)[-1])


def logged_fields(log: bool | str | Sequence[str]) -> tuple[str, ...]:
    """The report fields a callback logs: True, the registry's headline metrics; False, none; else the fields
    named (each a number of the registry, checked at once)."""
    if log is True:
        return tuple(m.path for m in registry.view("headline"))
    if log is False or log is None:
        return ()
    fields = (log,) if isinstance(log, str) else tuple(log)
    for f in fields:
        entry = registry.find(f) if isinstance(f, str) else None
        if entry is None or entry.type not in ("number", "integer") or "*" in entry.path:
            raise OptionError(f"{param('log', f)} is not a number of a report (e.g. fit.alpha, "
                              "rank.participation_ratio, isotropy.top_pc_share).")
    return fields


def fit_keywords(fields: Sequence[str], given: dict[str, Any] | None) -> dict[str, Any]:
    """The keywords of each snapshot's fit: ``given`` (checked at once), with ``spikes=True`` where a logged
    field needs it."""
    from spectra_cli.analysis.suite import FIT_DEFAULTS, check_fit_keywords
    from spectra_cli.run.matrix import FitReadKeywords

    if given is not None and not isinstance(given, dict):
        raise OptionError(f"{param('fit')} must be a dict of fit keywords (e.g. {{'window': '11:100'}}).")
    given = dict(given or {})
    unknown = [k for k in given if k not in FitReadKeywords.__annotations__]
    if unknown:
        raise OptionError(f"{param('fit')}: {unknown[0]!r} is not a keyword of spectra_cli.fit.")
    check_fit_keywords({k: v for k, v in given.items() if k in FIT_DEFAULTS})  # (the values, at once)
    if any(f.startswith("spectrum.spikes.") for f in fields):
        given["spikes"] = True
    return given


def snapshot_metrics(files: dict[str, str], fields: Sequence[str], keywords: dict[str, Any]) -> dict[str, float]:
    """``{"spectra/<module>/<name>": value}`` for each module's moment file of a snapshot: each field of
    ``fields`` its fit reports as a number, and beside it its standard error (``<name>_se``) where the report has
    one. A module whose fit fails (too few rows for the window, say) logs nothing; nothing is ever NaN."""
    from spectra_cli.drawable import finite
    from spectra_cli.run.matrix import fit

    out: dict[str, float] = {}
    if not fields:
        return out
    for module, path in files.items():
        try:
            doc = fit(path, **keywords).to_dict()
        except SpectraError:
            continue
        for f in fields:
            value = finite(lookup(doc, f))
            if value is None:
                continue
            out[f"{PREFIX}/{module}/{name_of(f)}"] = value
            entry = registry.find(f)
            se = finite(lookup(doc, entry.se)) if entry is not None and entry.se else None
            if se is not None:
                out[f"{PREFIX}/{module}/{name_of(f)}_se"] = se
    return out
