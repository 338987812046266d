"""The report of one run: frozen, self-describing, JSON-safe through ``to_dict()``.

The JSON Schema of ``to_dict()`` is ``schema/report.schema.json`` beside this file.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from spectra_cli.documents import SCHEMA_VERSION, finite, lookup
from spectra_cli.eigen.decomposition import Spectrum
from spectra_cli.version import __version__

if TYPE_CHECKING:
    from spectra_cli.analysis.controls import ShuffledControl
    from spectra_cli.analysis.isotropy import Isotropy
    from spectra_cli.analysis.spikes import Spikes
    from spectra_cli.analysis.suite import FitSuite
    from spectra_cli.analysis.weightwatcher import WeightMetrics
    from spectra_cli.analysis.whitening import WhiteningResult



class Section(dict[str, Any]):
    """A section of a report as its JSON has it, read-only: ``rep.source.files`` is
    ``rep.source["files"]`` is ``.source.files`` of ``--json``. It is a dict (``json.dumps`` and
    ``dict(...)`` take it as one) that refuses every change."""

    __slots__ = ()

    def __getattr__(self, name: str) -> Any:
        try:
            return self[name]
        except KeyError:
            raise AttributeError(f"this report section has no field {name!r}; fields: {', '.join(self)}") from None

    def _frozen(self, *args: Any, **kwargs: Any) -> Any:
        raise TypeError("a report section is read-only; copy it with dict(section) to change it")

    __setitem__ = __delitem__ = __setattr__ = _frozen
    clear = pop = popitem = setdefault = update = __ior__ = _frozen  # type: ignore[assignment]


class SourceSection(Section):
    """``report.source``: what was read (the fields every report has; a sequence report adds its
    windows and positions)."""

    __slots__ = ()
    path: str
    format: str
    shape: list[int]
    dtype: str
    n_rows: int
    n_features: int
    layout: str
    files: int
    rows_used: int | None
    fingerprint: str | None
    members: list[dict[str, str]]


class OptionsSection(Section):
    """``report.options``: every option that changes a number (centring, ddof, weights, precision, the
    rows per block actually used, the windows and the fit method)."""

    __slots__ = ()
    centered: bool
    ddof: int | None
    weights: dict[str, Any] | None
    precision: str
    block_rows: int | None
    drop_nonfinite: bool


@dataclass(frozen=True, slots=True)
class Report:
    """Everything one ``spectra fit`` / ``spectra spectrum`` run found.

    Attributes:
        command: the command (or library function) that made it.
        source: path, format, stored shape, dtype, rows used and how they were selected.
        options: every option that changes a number (centering, ddof, weights, precision, window).
        spectrum: eigenvalues and floors.
        suite: fits, model comparison, local slope, ranks, density (None for ``spectrum``).
        control: the shuffled control, when asked for.
        warnings: suspect but computable findings, one sentence each.
        timings: wall-clock seconds of each stage.
    """

    command: str
    source: SourceSection
    options: OptionsSection
    spectrum: Spectrum
    suite: FitSuite | None = None
    control: ShuffledControl | None = None
    isotropy: Isotropy | None = None
    whitening: WhiteningResult | None = None
    weightwatcher: WeightMetrics | None = None
    spikes: Spikes | None = None
    warnings: tuple[str, ...] = ()
    timings: dict[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "source", SourceSection(self.source))
        object.__setattr__(self, "options", OptionsSection(self.options))

    @property
    def fit(self) -> Any:
        """The primary fit (first window), or None (``fit`` of the JSON)."""
        return self.suite.fits[0] if self.suite is not None and self.suite.fits else None

    @property
    def fits(self) -> tuple[Any, ...]:
        """One fit per window, in the order given (``fits`` of the JSON: ``rep.fits[1]`` is ``fits.1``)."""
        return tuple(self.suite.fits) if self.suite is not None else ()

    @property
    def models(self) -> Any:
        """The model comparison of the first window, or None."""
        return self.suite.models if self.suite is not None else None

    @property
    def local_slope(self) -> Any:
        return self.suite.local_slope if self.suite is not None else None

    @property
    def density(self) -> Any:
        """The density (WeightWatcher) exponent, or None."""
        return self.suite.density if self.suite is not None else None

    @property
    def capacity(self) -> Any:
        return self.suite.capacity if self.suite is not None else None

    @property
    def whitened(self) -> Any:
        """The whitened rows (an ndarray) when ``whiten`` was given no output file, else None."""
        return self.whitening.rows if self.whitening is not None else None

    @property
    def rank(self) -> Any:
        """The effective ranks, or None."""
        return self.suite.rank if self.suite is not None else None

    def to_pandas(self) -> Any:
        """The report's metrics as a one-row pandas DataFrame: the columns of a batch's row
        (``BatchResult.to_pandas()``: item, status, shape, then every metric of the registry's batch view,
        numeric), so that reports concatenate into one table. The spectrum is :meth:`spectrum_frame`.
        pandas is the optional extra ``pandas``."""
        from spectra_cli.frames import batch_rows, frame

        return frame(batch_rows([self.to_dict()]))

    def spectrum_frame(self) -> Any:
        """The spectrum as a pandas DataFrame: a row per rank (eigenvalue, explained variance ratio,
        usable), a column per fit (the fitted law over its window)."""
        from spectra_cli.frames import report_frame

        return report_frame(self.to_dict())

    def _repr_html_(self) -> str:
        from spectra_cli.frames import report_html

        return report_html(self.to_dict())

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "schema": SCHEMA_VERSION,
            "spectra_version": __version__,
            "command": self.command,
            "source": self.source,
            "options": self.options,
            "spectrum": self.spectrum.to_dict(),
        }
        if self.spikes is not None:
            out["spectrum"]["spikes"] = self.spikes.to_dict()
        if self.suite is not None:
            fits = [f.to_dict() for f in self.suite.fits]
            out["fit"] = fits[0] if fits else None
            out["fits"] = fits
            out["models"] = self.suite.models.to_dict() if self.suite.models is not None else None
            out["local_slope"] = self.suite.local_slope.to_dict()
            out["rank"] = self.suite.rank.to_dict()
            out["density"] = self.suite.density.to_dict() if self.suite.density is not None else None
            if self.suite.capacity is not None:
                out["capacity"] = self.suite.capacity.to_dict()
        if self.control is not None:
            out["control"] = self.control.to_dict()
        if self.isotropy is not None:
            out["isotropy"] = self.isotropy.to_dict()
        if self.whitening is not None:
            out["whitening"] = self.whitening.to_dict()
        if self.weightwatcher is not None:
            out["weightwatcher"] = self.weightwatcher.to_dict()
        out["warnings"] = list(self.warnings)
        out["timings"] = dict(self.timings)
        return json_safe(out)


def json_safe(obj: Any) -> Any:
    """Builtins only; non-finite floats become None (strict JSON has no NaN)."""
    if isinstance(obj, dict):
        return {str(k): json_safe(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [json_safe(v) for v in obj]
    if isinstance(obj, bool) or obj is None or isinstance(obj, str):
        return obj
    if isinstance(obj, int):
        return int(obj)
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if hasattr(obj, "item"):  # numpy scalar
        return json_safe(obj.item())
    if hasattr(obj, "tolist"):
        return json_safe(obj.tolist())
    raise TypeError(f"not JSON-serialisable: {type(obj).__name__}")


def report_schema(name: str = "report") -> dict[str, Any]:
    """The JSON Schema that every ``Report.to_dict()`` satisfies (``sequence``: ``SequenceReport``).

    Its structure is ``schema/<name>.schema.json``; each reported number's property (its type and its
    ``description``: label, definition, scale) is filled from the registry :mod:`spectra_cli.registry`,
    so a new metric needs no edit here."""
    import json
    from importlib.resources import files

    schema = json.loads(files("spectra_cli").joinpath(f"schema/{name}.schema.json").read_text())
    from spectra_cli import registry
    for m in registry.METRICS:
        if "*" not in m.path and m.document == name:
            _fill_property(schema, m)
    return schema


def schema_node(schema: dict[str, Any], path: str) -> dict[str, Any] | None:
    """The object schema that holds the last part of ``path`` (``$ref`` and ``oneOf`` with null followed);
    None where the schema has no such object."""
    node: Any = schema
    for part in path.split(".")[:-1]:
        node = _object_of(schema, node)
        props = node.get("properties") if node is not None else None
        if not isinstance(props, dict) or part not in props:
            return None
        node = props[part]
    return _object_of(schema, node)


def _object_of(schema: dict[str, Any], node: Any) -> dict[str, Any] | None:
    for _ in range(8):
        if not isinstance(node, dict):
            return None
        if "$ref" in node:
            node = schema["$defs"][node["$ref"].rsplit("/", 1)[-1]]
        elif "oneOf" in node or "anyOf" in node:
            options = node.get("oneOf") or node.get("anyOf") or []
            objects = [o for o in options if not (isinstance(o, dict) and o.get("type") == "null")]
            node = objects[0] if len(objects) == 1 else None
        else:
            return node if "properties" in node else None
    return None


def _fill_property(schema: dict[str, Any], m: Any) -> None:
    node = schema_node(schema, m.path)
    if node is None:
        return
    props = node["properties"]
    prop = props.get(m.name)
    if prop is None:
        kind = {"integer": "integer", "string": "string"}.get(m.type, "number")
        prop = props[m.name] = {"type": [kind, "null"] if m.nullable else kind}
    description = f"{m.label}: {m.definition}" + (f" (scale: {m.scale})" if m.scale else "")
    props[m.name] = {**prop, "description": description}


def scalar_fields(doc: Any, prefix: str = "") -> dict[str, float]:
    """Every numeric leaf of a report, by dotted path (lists longer than 16 are summarised by index 0)."""
    out: dict[str, float] = {}
    if isinstance(doc, dict):
        for k, v in doc.items():
            out.update(scalar_fields(v, f"{prefix}{k}."))
    elif isinstance(doc, list):
        for i, v in enumerate(doc[:16] if len(doc) <= 16 else doc[:1]):
            out.update(scalar_fields(v, f"{prefix}{i}."))
    elif isinstance(doc, bool) or doc is None or isinstance(doc, str):
        pass
    elif isinstance(doc, int | float):
        out[prefix[:-1]] = float(doc)
    return out




def standard_error(doc: dict[str, Any], field: str) -> float | None:
    """The standard error a report gives the number at ``field`` (where the registry says it keeps it:
    :func:`spectra_cli.registry.se_path`), or None."""
    from spectra_cli import registry
    path = registry.se_path(field)
    se = finite(lookup(doc, path)) if path is not None else None
    return se if se is not None and se >= 0 else None


def se_dof(doc: dict[str, Any]) -> float | None:
    """The degrees of freedom of a report's standard errors: ``G - 1`` where they come from ``G`` row groups
    (``rank.se_method.dof``), None where they are first order (normal)."""
    for section in ("rank", "isotropy"):
        dof = finite(lookup(doc, f"{section}.se_method.dof"))
        if dof is not None and dof >= 1:
            return dof
    return None


def uncertainty(doc: dict[str, Any], field: str) -> tuple[float, float] | None:
    """The interval a metric carries in a report: the bootstrap interval of an alpha fitted with
    ``--ci`` (``ci.low``..``ci.high``), else ± its standard error (:func:`standard_error`; WeightWatcher's
    alpha is the density fit's). None when it has neither."""
    if field == "weightwatcher.alpha":
        field = "density.alpha"
    value = finite(lookup(doc, field))
    head, _, leaf = field.rpartition(".")
    parent = lookup(doc, head) if head else doc
    if value is None or not isinstance(parent, dict):
        return None
    if leaf == "alpha":
        ci = parent.get("ci")
        if isinstance(ci, dict) and finite(ci.get("low")) is not None and finite(ci.get("high")) is not None:
            return float(ci["low"]), float(ci["high"])
    se = standard_error(doc, field)
    if se is None and leaf == "alpha" and "se" not in parent and field != "density.alpha":
        se = finite(parent.get("stderr"))  # (a report made before the sampling standard errors)
    if se is not None:
        return value - se, value + se
    if field == "fit.population.alpha" and isinstance(parent.get("ci"), list) and len(parent["ci"]) == 2:
        lo, hi = (finite(v) for v in parent["ci"])
        if lo is not None and hi is not None:
            return lo, hi
    return None
