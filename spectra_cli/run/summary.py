"""A model-level summary of a batch (``spectra batch ... --summary``): how many layers per verdict,
the mean and median of each metric — plain, and weighted by each layer's parameter count — and the
layers furthest outside the healthy ``alpha`` range. It reads the batch's JSON lines, so it works
on a results file as well as on a run in progress."""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from spectra_cli import registry
from spectra_cli.analysis.weightwatcher import SUMMARY_COLUMNS
from spectra_cli.documents import RESULT_SCHEMAS, check_report_schema, finite, lookup
from spectra_cli.errors import InputError

SUMMARY_SCHEMA = "spectra.batch-summary/1"
#: (report field, label) of the metrics summarised: the registry's ``layer`` view.
METRICS = tuple((m.path, m.label) for m in registry.view("layer"))
WORST = 5
#: WeightWatcher's get_summary(): the plain mean of these columns over the layers analysed
#: (weightwatcher.py 0.7.7 ``get_summary``; mp_softrank is there with ``mp_fit=True``).


def summary_format(field: str) -> str:
    """The format of a metric's mean and median in a summary (the terminal's and the page's, the same): the
    registry's, or 4 significant digits for a count's mean (and an unknown field)."""
    entry = registry.find(field)
    return entry.fmt if entry is not None and entry.type != "integer" else ".4g"


@dataclass(frozen=True, slots=True)
class MetricSummary:
    field: str
    label: str
    layers: int
    mean: float | None
    median: float | None
    weighted_mean: float | None
    weighted_median: float | None

    def to_dict(self) -> dict[str, Any]:
        return {"field": self.field, "label": self.label, "layers": self.layers, "mean": self.mean,
                "median": self.median, "weighted_mean": self.weighted_mean, "weighted_median": self.weighted_median}


@dataclass(frozen=True, slots=True)
class ModelSummary:
    layers: int
    failed: int
    skipped: int
    verdicts: dict[str, int]
    alpha_range: tuple[float, float] | None
    metrics: tuple[MetricSummary, ...]
    worst: tuple[dict[str, Any], ...]
    #: every item skipped, and why: ``{"item", "kind", "why"}``
    skipped_items: tuple[dict[str, Any], ...] = ()
    #: WeightWatcher's ``get_summary()`` of these layers (None when no layer has its columns)
    weightwatcher: dict[str, Any] | None = None
    #: the matrix the metrics are of: "centred" (the covariance of the rows), "uncentred" (X^T X / n, as
    #: WeightWatcher's convention), "mixed", "change" (each layer's change: batch --base, a LoRA adapter), or None
    matrix: str | None = None

    def to_dict(self) -> dict[str, Any]:
        from spectra_cli.results import json_safe

        return json_safe({
            "schema": SUMMARY_SCHEMA,
            "layers": self.layers,
            "failed": self.failed,
            "skipped": self.skipped,
            "verdicts": self.verdicts,
            "alpha_range": list(self.alpha_range) if self.alpha_range else None,
            "metrics": [m.to_dict() for m in self.metrics],
            "worst": list(self.worst),
            "skipped_items": list(self.skipped_items),
            "weightwatcher_summary": self.weightwatcher,
            "matrix": self.matrix,
            "definitions": {
                "matrix": "the matrix each layer's metrics are of: centred (the covariance of its rows, 1/n), "
                "uncentred (X^T X / n of its rows, WeightWatcher's convention), or mixed",
                "weighted": "each layer weighted by its parameter count (rows x columns)",
                "worst": "layers furthest outside the alpha range (distance 0 inside it), at most 5",
                "verdicts": "WeightWatcher's: over-trained alpha < lo, under-trained alpha > hi (needs --density)",
                "weightwatcher_summary": "WeightWatcher's get_summary(): the plain mean of each column over the "
                "layers analysed (its failed fits, alpha -1, would enter its mean; here a layer without a density "
                "fit is left out and counted in 'layers')",
            },
        })


def _weighted_median(values: list[float], weights: list[float]) -> float:
    pairs = sorted(zip(values, weights, strict=True))
    half = sum(weights) / 2.0
    acc = 0.0
    for v, w in pairs:
        acc += w
        if acc >= half:
            return v
    return pairs[-1][0]


def _parameters(doc: dict[str, Any]) -> float:
    src = doc.get("source")
    if not isinstance(src, dict):
        return 1.0
    n, d = finite(src.get("n_rows")), finite(src.get("n_features"))
    return n * d if n and d else 1.0


def summarize(docs: Iterable[dict[str, Any]]) -> ModelSummary:
    """The summary of a batch's lines (reports, error lines and skip lines, in any order)."""
    layers: list[dict[str, Any]] = []
    failed = skipped = 0
    skipped_items: list[dict[str, Any]] = []
    for doc in docs:
        if "skipped" in doc:
            skipped += 1
            skipped_items.append({"item": doc.get("item"), "kind": doc.get("kind"), "why": doc.get("skipped")})
        elif "error" in doc:
            failed += 1
        else:
            layers.append(doc)
    verdicts = {"over-trained": 0, "ok": 0, "under-trained": 0, "no density fit": 0}
    alpha_range: tuple[float, float] | None = None
    for doc in layers:
        ww = doc.get("weightwatcher")
        if not isinstance(ww, dict):
            continue
        v = ww.get("verdict")
        verdicts[v if isinstance(v, str) and v in verdicts else "no density fit"] += 1
        ar = ww.get("alpha_range")
        if alpha_range is None and isinstance(ar, list) and len(ar) == 2 and all(finite(a) is not None for a in ar):
            alpha_range = (float(ar[0]), float(ar[1]))
    metrics = []
    for field, label in METRICS:
        vals, wts = [], []
        for doc in layers:
            v = finite(lookup(doc, field))
            if v is not None:
                vals.append(v)
                wts.append(_parameters(doc))
        if not vals:
            continue
        total = sum(wts)
        metrics.append(MetricSummary(field, label, len(vals), sum(vals) / len(vals), statistics.median(vals),
                                     sum(v * w for v, w in zip(vals, wts, strict=True)) / total,
                                     _weighted_median(vals, wts)))
    worst: list[dict[str, Any]] = []
    if alpha_range is not None:
        lo, hi = alpha_range
        scored = []
        for doc in layers:
            a = finite(lookup(doc, "weightwatcher.alpha"))
            if a is not None:
                dist = lo - a if a < lo else a - hi if a > hi else 0.0
                scored.append((dist, a, doc))
        scored.sort(key=lambda t: (-t[0], -t[1]))
        worst = [{"item": doc.get("item") or doc.get("source", {}).get("path"), "alpha": a,
                  "verdict": lookup(doc, "weightwatcher.verdict"), "distance": dist}
                 for dist, a, doc in scored[:WORST]]
    if not any(verdicts.values()):
        verdicts = {}
    ww_summary: dict[str, Any] | None = None
    cols = [c for c in (lookup(doc, "weightwatcher.columns") for doc in layers) if isinstance(c, dict)]
    if cols:
        ww_summary = {"layers": len(cols)}
        for name in SUMMARY_COLUMNS:
            vals = [v for v in (finite(c.get(name)) for c in cols) if v is not None]
            ww_summary[name] = sum(vals) / len(vals) if vals else None
    centring = {c for c in ((doc.get("options") or {}).get("centered") for doc in layers) if isinstance(c, bool)}
    matrix = None if not centring else "mixed" if len(centring) > 1 else "centred" if centring.pop() else "uncentred"
    if layers and all(isinstance(doc.get("source"), dict) and ("change" in doc["source"] or "adapter" in doc["source"])
                      for doc in layers):
        matrix = "change"  # (each layer's change between two checkpoints, or an adapter's)
    return ModelSummary(len(layers), failed, skipped, verdicts, alpha_range, tuple(metrics), tuple(worst),
                        tuple(skipped_items), ww_summary, matrix)


def iter_results(path: str) -> Iterator[tuple[int, dict[str, Any]]]:
    """``(line number, object)`` for every line of a batch results file (a line that is not a JSON
    object is an input error naming it)."""
    from spectra_cli.jsonio import loads
    from spectra_cli.sources.base import open_regular

    with open_regular(path) as f:
        for i, raw in enumerate(f, 1):
            if not raw.strip():
                continue
            doc = loads(raw, f"{path} line {i}")
            if not isinstance(doc, dict):
                raise InputError(f"{path} line {i} is not a JSON object (a {type(doc).__name__}); spectra batch "
                                 "writes one report object per line.")
            check_report_schema(doc, f"{path} line {i}", also=RESULT_SCHEMAS)
            yield i, doc


def read_results(paths: list[str]) -> list[dict[str, Any]]:
    """Every JSON object line of batch results files."""
    out = [doc for path in paths for _, doc in iter_results(path)]
    if not out:
        raise InputError(f"{', '.join(paths)} holds no batch results.")
    return out
