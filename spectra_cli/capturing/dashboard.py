"""What the training callbacks log to the run's dashboard (TensorBoard, Weights & Biases, MLflow: whatever
loggers the framework has): each snapshot's headline metrics per module, each with its standard error, under
``spectra/<module>/<metric>`` (``alpha``, ``alpha_se``, ``participation_ratio``, ``participation_ratio_se``,
``entropy_rank``, ``entropy_rank_se``, ``top_pc_share``, ``top_pc_share_se``, ``spikes``). The numbers are those of
``spectra fit`` on the snapshot's moment file, with the fit keywords the callback was given."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from spectra_cli import registry
from spectra_cli.documents import lookup
from spectra_cli.errors import OptionError, SpectraError, param
from spectra_cli.run.fit_steps import ERROR_GROUPS

#: The prefix of every logged name.
PREFIX = "spectra"
#: The row groups a logging callback's moments keep unless told otherwise (the standard errors' own, as fit's).
GROUPS = ERROR_GROUPS


def name_of(field: str) -> str:
    """The last part of a logged name: a headline metric's short name (``fit.alpha`` is ``alpha``; the registry's
    :attr:`~spectra_cli.registry.Metric.short`), else the field's whole path (``density.alpha``), so that no two
    fields share a name."""
    return next((m.short for m in registry.view("headline") if m.path == field), field)


def logged_fields(log: Any) -> tuple[str, ...]:
    """The report fields a callback logs: True, the registry's headline metrics; False, none; else the fields
    named (each a number of the registry, checked at once)."""
    if log is True:
        return tuple(m.path for m in registry.view("headline"))
    if log is False or log is None:
        return ()
    fields = (log,) if isinstance(log, str) else tuple(log) if isinstance(log, list | tuple) else None
    if fields is None:
        raise OptionError(f"{param('log', log, show=True)} must be True, False or a list of report fields "
                          "(e.g. ['fit.alpha', 'isotropy.mean_cosine']).")
    for f in fields:
        entry = registry.find(f) if isinstance(f, str) else None
        if entry is None or entry.type not in ("number", "integer") or "*" in entry.path:
            examples = ", ".join(m.path for m in registry.view("headline"))
            raise OptionError(f"{param('log', f)} is not a number of a report (e.g. {examples}).")
    return tuple(dict.fromkeys(fields))


#: The reading keywords a moment file's fit takes (the others select, weigh or read rows).
MOMENTS_KEYWORDS = ("centered", "ddof", "max_memory", "threads")


def fit_keywords(fields: Sequence[str], given: dict[str, Any] | None) -> dict[str, Any]:
    """The keywords of each snapshot's fit: ``given``, every one checked at once (the fit's and the reading ones),
    with the option that adds a logged field to a report turned on where it is not given (``spikes=True`` for
    ``spectrum.spikes.count``, ``density=True`` for ``density.alpha``)."""
    from spectra_cli.analysis.fit_options import FIT_DEFAULTS, FitOptions
    from spectra_cli.options import READ_DEFAULTS, ReadOptions

    if given is not None and not isinstance(given, dict):
        raise OptionError(f"{param('fit')} must be a dict of fit keywords (e.g. {{'window': '11:100'}}).")
    given = dict(given or {})
    unknown = [k for k in given if k not in FIT_DEFAULTS and k not in READ_DEFAULTS]
    if unknown:
        raise OptionError(f"{param('fit')}: {unknown[0]!r} is not a keyword of spectra_cli.fit.")
    rows = [k for k in given if k in READ_DEFAULTS and k not in MOMENTS_KEYWORDS]
    if rows:  # (a snapshot is a moment file: it has no rows to select, weigh or read)
        raise OptionError(f"{param('fit')}: {rows[0]!r} applies to rows; each snapshot is a moment file (its fit "
                          f"takes {', '.join(MOMENTS_KEYWORDS)}).")
    reading = {k: v for k, v in given.items() if k in READ_DEFAULTS}
    ReadOptions.create(**reading)  # type: ignore[arg-type]
    for f in fields:
        entry = registry.find(f)
        alternatives = entry.added_by if entry is not None else ()
        if alternatives and not any(given.get(k) == v for k, v in alternatives):
            key, value = alternatives[0]
            if key in given:  # (asked not to: the field cannot be logged)
                raise OptionError(f"{param('log', f)} needs {param(key, value)}, and {param('fit')} gives "
                                  f"{param(key, given[key])}.")
            given[key] = value
    # the fit's options made (and checked) once, here: each snapshot's fit takes them as they are
    options = FitOptions.create(centered=reading.get("centered"), **{k: v for k, v in given.items()
                                                                      if k in FIT_DEFAULTS})
    return {**reading, "options": options}


def snapshot_metrics(files: dict[str, str], fields: Sequence[str], keywords: dict[str, Any],
                     failed: set[str] | None = None) -> dict[str, float]:
    """``{"spectra/<module>/<name>": value}`` for each module's moment file of a snapshot: each field of
    ``fields`` its fit reports as a number, and beside it its standard error (``<name>_se``) where the report has
    one. A module whose fit fails (too few rows for the window, say) logs nothing, and a SpectraWarning says why,
    once per module (``failed`` holds the modules said); nothing is ever NaN."""
    import warnings

    from spectra_cli.documents import finite
    from spectra_cli.errors import SpectraWarning
    from spectra_cli.run.matrix import fit

    out: dict[str, float] = {}
    if not fields:
        return out
    for module, path in files.items():
        try:
            doc = fit(path, **keywords).to_dict()
        except SpectraError as exc:
            if failed is not None and module not in failed:
                failed.add(module)
                warnings.warn(f"the dashboard logs nothing for {module}: its snapshot's fit failed ({exc})",
                              SpectraWarning, stacklevel=2)
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
