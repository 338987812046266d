"""The HTML page of ``spectra report``: its sections (the model, the run, the reports), their figures rendered to
inline SVG and their tables, for the template (``templates/report.html.j2``). :mod:`spectra_cli.run.report`
reads the inputs and decides the kind; this module builds what the page shows."""

from __future__ import annotations

import base64
import io
import math
import os
import statistics
from collections import defaultdict
from dataclasses import dataclass
from typing import Any

import numpy as np

from spectra_cli import registry
from spectra_cli.analysis.weightwatcher import DEFAULT_ALPHA_RANGE
from spectra_cli.documents import finite, item_name, lookup
from spectra_cli.errors import OptionError, SpectraError
from spectra_cli.results import se_dof, standard_error, uncertainty

#: (field, column heading, format) of the per-layer table and figures, in this order: the registry's
#: ``layer`` view.
LAYER_METRICS = tuple((m.path, m.label, "d" if m.type == "integer" else m.fmt) for m in registry.view("layer"))

WORST = 5

MOVED = 8

def jinja() -> Any:
    try:
        import jinja2
    except ImportError:
        raise OptionError("spectra report needs Jinja2, the optional extra 'report': pip install "
                          "'spectra-geometry[report]' (from a checkout: pip install '.[report]').") from None
    return jinja2

def item_key(doc: dict[str, Any]) -> str:
    return item_name(doc, "?")

class Figures:
    """Figures rendered to inline SVG, counted, with a progress callback."""

    def __init__(self, progress: Any = None) -> None:
        self.count = 0
        self.progress = progress
        self.total = 0

    def embed(self, fig: Any) -> str:
        import matplotlib

        from spectra_cli.plot import FONT

        buf = io.StringIO()
        with matplotlib.rc_context(FONT), np.errstate(over="ignore", under="ignore"):  # (1e300: tick arithmetic)
            fig.savefig(buf, format="svg", metadata={"Date": None})
        self.count += 1
        if self.progress is not None:
            self.progress(self.count, max(self.total, self.count))
        return "data:image/svg+xml;base64," + base64.b64encode(buf.getvalue().encode()).decode()

def _with_font(draw: Any) -> Any:
    import matplotlib

    from spectra_cli.plot import FONT

    with matplotlib.rc_context(FONT):
        return draw()

def _cell(value: Any, fmt: str) -> dict[str, Any]:
    v = finite(value)
    if v is None:
        return {"text": "—", "sort": ""}
    return {"text": registry.shown(v, fmt), "sort": repr(v)}

def _layer_rows(docs: list[dict[str, Any]], metrics: list[tuple[str, str, str]]) -> list[dict[str, Any]]:
    from spectra_cli.documents import layer_names, natural_key

    order = sorted(docs, key=lambda d: natural_key(item_key(d)))
    names = layer_names([item_key(d) for d in order])
    rows = []
    for k, (doc, name) in enumerate(zip(order, names, strict=True)):
        src = doc.get("source") or {}
        verdict = lookup(doc, "weightwatcher.verdict")
        shape = src.get("shape") if isinstance(src.get("shape"), list) else None
        cells = [_cell(lookup(doc, f), fmt) for f, _, fmt in metrics]
        warnings: list[Any] = doc["warnings"] if isinstance(doc.get("warnings"), list) else []
        rows.append({"order": k, "name": name, "item": item_key(doc),
                     "shape": " × ".join(str(s) for s in shape) if shape else "",
                     "params": (shape[0] * shape[1]) if shape and len(shape) == 2 else 0,
                     "cells": cells, "verdict": verdict or "", "warnings": len(warnings)})
    return rows

def _present(docs: list[dict[str, Any]]) -> list[tuple[str, str, str]]:
    return [m for m in LAYER_METRICS if any(finite(lookup(d, m[0])) is not None for d in docs)]

def _options_line(doc: dict[str, Any]) -> str:
    spec = doc.get("spectrum") or {}
    opts = doc.get("options") or {}
    parts = [str(spec.get("definition") or "")]
    if opts.get("precision"):
        parts.append(f"precision {opts['precision']}")
    fit = doc.get("fit") or {}
    if isinstance(fit, dict) and fit.get("window_reason"):
        parts.append(f"rank-fit window: {fit['window_reason']}")
    return "; ".join(p for p in parts if p)

def model_section(docs: list[dict[str, Any]], lines: list[dict[str, Any]], figs: Figures,
                   worst: int) -> dict[str, Any]:
    from spectra_cli.documents import dropped_text, layer_names, natural_key
    from spectra_cli.plot import density, figure, layer_name_size, layers, spectrum
    from spectra_cli.run.summary import summarize

    summary = summarize(lines).to_dict()
    summary["verdicts"] = {v: n for v, n in (summary.get("verdicts") or {}).items() if n}
    ordered = sorted((item_key(d) for d in docs), key=natural_key)
    short = dict(zip(ordered, layer_names(ordered), strict=True))
    metrics = _present(docs)
    alpha_range = tuple(summary["alpha_range"]) if summary.get("alpha_range") else None
    has_density = any(finite(lookup(d, "weightwatcher.alpha")) is not None for d in docs)
    plots_of = [m for m in metrics if m[0] != "weightwatcher.mp_spikes" or has_density]
    figs.total = 1 + min(worst, len(docs))

    longest = max(len(n) for n in short.values())
    names_in = 0.15 + longest * layer_name_size(len(docs)) * 0.62 / 72  # the rotated names' height

    def draw() -> Any:  # one figure, a panel per metric, the layer names once along the bottom
        fig = figure(7.2, 0.15 + 1.2 * len(plots_of) + names_in,
                   margins={"left": 0.6, "right": 0.08, "bottom": names_in, "top": 0.08, "hspace": 0.12})
        axes = fig.subplots(len(plots_of), 1, sharex=True, squeeze=False)[:, 0]
        for i, (f, label, _) in enumerate(plots_of):
            layers(docs, f, ax=axes[i], healthy=alpha_range if f == "weightwatcher.alpha" else None, label=label,
                   names=i == len(plots_of) - 1)
            axes[i].yaxis.label.set_size(6.5)
        return fig

    per_layer = {"labels": [lb for _, lb, _ in plots_of], "src": figs.embed(_with_font(draw))} if plots_of else None
    # the worst layers: furthest outside the healthy density alpha range; without density fits, the
    # layers whose rank-fit alpha is furthest from the median
    chosen: list[tuple[dict[str, Any], str]] = []
    by_item = {item_key(d): d for d in docs}
    worst_heading = "furthest outside the healthy range"
    if has_density and summary.get("worst"):
        outside = [w for w in summary["worst"] if (finite(w.get("distance")) or 0.0) > 0]
        picked = [(w, f"α = {w['alpha']:.2f}, {w.get('verdict') or ''}, {w['distance']:.2f} outside the range")
                  for w in outside[:worst]]
        if len(picked) < worst:  # then the layers inside the range nearest its edges
            lo, hi = alpha_range or DEFAULT_ALPHA_RANGE
            taken = {str(w.get("item")) for w, _ in picked}
            scored = sorted(((min(a - lo, hi - a), d) for d in docs
                             if (a := finite(lookup(d, "weightwatcher.alpha"))) is not None and lo <= a <= hi
                             and item_key(d) not in taken), key=lambda t: t[0])
            picked += [({"item": item_key(d)}, f"α = {lookup(d, 'weightwatcher.alpha'):.2f}, {margin:.2f} inside the "
                        "range") for margin, d in scored[: worst - len(picked)]]
            worst_heading = ("outside the healthy range, then nearest its edges" if outside else
                             "nearest the edges of the healthy range (every layer is inside it)")
        for w, why in picked:
            doc = by_item.get(str(w.get("item")))
            if doc is not None:
                chosen.append((doc, why))
    else:
        scored = [(abs(a - statistics.median(vals)), d) for vals in
                  [[v for v in (finite(lookup(x, "fit.alpha")) for x in docs) if v is not None]] if vals
                  for d in docs if (a := finite(lookup(d, "fit.alpha"))) is not None]
        scored.sort(key=lambda t: -t[0])
        chosen = [(d, f"rank-fit α = {lookup(d, 'fit.alpha'):.3f}, {dist:.3f} from the median")
                  for dist, d in scored[:worst]]
    worst_figs = []
    for doc, why in chosen:
        def draw_one(doc: dict[str, Any] = doc) -> Any:
            fig = figure(3.4, 2.6, margins={"left": 0.55, "bottom": 0.42, "top": 0.1, "right": 0.1})
            ax = fig.add_subplot()
            if has_density and finite(lookup(doc, "density.alpha")) is not None:
                try:
                    density(doc, ax=ax, title=False)
                    return fig
                except SpectraError:  # (no positive usable eigenvalue to histogram: the spectrum instead)
                    ax.clear()
            spectrum(doc, ax=ax, title=False)
            return fig

        worst_figs.append({"item": item_key(doc), "name": short.get(item_key(doc), item_key(doc)), "why": why,
                           "src": figs.embed(_with_font(draw_one))})
    skipped = [{"item": item_key(d), "why": str(d.get("skipped"))} for d in lines if "skipped" in d]
    failed = [{"item": item_key(d), "why": str(d.get("error"))[:300]} for d in lines if "error" in d]
    rows = _layer_rows(docs, metrics)
    return {"summary": summary, "metrics": [{"field": f, "label": lb} for f, lb, _ in metrics],
            "rows": rows, "per_layer": per_layer, "worst": worst_figs, "dropped": dropped_text(ordered),
            "worst_kind": "ESD (density fit)" if has_density else "spectrum", "skipped": skipped,
            "worst_heading": worst_heading if has_density else "furthest from the median rank-fit α",
            "any_warnings": any(r["warnings"] for r in rows),
            "failed": failed, "options": _options_line(docs[0]) if docs else "", "has_density": has_density,
            # a checkpoint's tensors are layers in network order, weighed by their parameters; other
            # matrices (activation dumps, moment files) are items, in the order of their names
            **({"unit": "layer", "units": "layers", "order": "in network order", "weighted": True}
               if docs and all("::" in item_key(d) for d in docs)
               else {"unit": "item", "units": "items", "order": "in the order of their names", "weighted": False})}

@dataclass
class Point:
    series: str
    step: float
    doc: dict[str, Any]

def _largest_move(f: str, name: str, ps: list[Point], vals: list[tuple[float, float, Any]]) -> tuple[Any, ...]:
    """A layer's largest move of metric ``f`` over the run: between the steps of its lowest and highest value (a
    dip and a recovery count, not only the ends), with the standard error of that change and its p-value, which
    is multiplied by the number of step pairs (Bonferroni: the pair was chosen as the most apart of them). The
    tuple: ``(|change|, name, from value, to value, se, vals, p, (from step, to step))``."""
    from spectra_cli.run.compare import Row

    lo = min(range(len(vals)), key=lambda i: (vals[i][1], i))
    hi = max(range(len(vals)), key=lambda i: (vals[i][1], -i))
    i, j = sorted((lo, hi)) if lo != hi else (0, len(vals) - 1)
    ends_v = (vals[i], vals[j])
    ends = [next(q.doc for q in ps if q.step == e[0]) for e in ends_v]
    errors = [standard_error(doc, f) for doc in ends]  # the standard error, not a 95 % interval's half
    spread = [se_ if se_ is not None else abs(iv[1] - iv[0]) / 2 for se_, (_, _, iv) in zip(errors, ends_v, strict=True)
              if se_ is not None or iv is not None]
    se = math.sqrt(sum(s * s for s in spread)) if len(spread) == 2 else None
    a, b = ends_v[0][1], ends_v[1][1]
    p_value = None
    if se:  # (Student's t where both ends' errors come from row groups, as compare tests them)
        p_value = Row(f, a, b, se_a=spread[0], se_b=spread[1], dof_a=se_dof(ends[0]), dof_b=se_dof(ends[1])).p \
            if None not in errors else math.erfc(abs(b - a) / se / math.sqrt(2.0))
        if p_value is not None:
            p_value = min(1.0, p_value * len(vals) * (len(vals) - 1) / 2)
    return (abs(b - a), name, a, b, se, vals, p_value, (ends_v[0][0], ends_v[1][0]))

def run_section(points: list[Point], figs: Figures, moved: int) -> dict[str, Any]:
    from spectra_cli.plot import COLUMN_WIDTH, LINESTYLES, PALETTE, errorbar, figure
    from spectra_cli.run.summary import summarize

    docs = [p.doc for p in points]
    metrics = _present(docs)
    series: dict[str, list[Point]] = defaultdict(list)
    for p in points:
        series[p.series].append(p)
    for ps in series.values():
        ps.sort(key=lambda p: p.step)
    steps = sorted({p.step for p in points})
    figs.total = len(metrics)
    panels, movers = [], []

    tested: list[tuple[tuple[str, str], float]] = []  # every change with a standard error, and its p-value
    for f, label, fmt in metrics:
        change = []
        for name, ps in series.items():
            vals: list[tuple[float, float, tuple[float, float] | None]] = []
            for p in ps:
                v = finite(lookup(p.doc, f))
                if v is not None:
                    vals.append((p.step, v, uncertainty(p.doc, f)))
            if len(vals) >= 2:
                change.append(_largest_move(f, name, ps, vals))
        change.sort(key=lambda t: -t[0])
        shown = change[:6]

        def draw(f: str = f, label: str = label, shown: list[Any] = shown) -> Any:
            fig = figure(2 * COLUMN_WIDTH, 2.4)
            ax = fig.add_subplot()
            if len(series) > 1:  # the layers' mean per step, behind the layers that moved most
                mean = []
                for st in steps:
                    vs = [finite(lookup(p.doc, f)) for p in points if p.step == st]
                    vs2 = [v for v in vs if v is not None]
                    mean.append(sum(vs2) / len(vs2) if vs2 else float("nan"))
                ax.plot(steps, mean, "-", color="#1a1a1a", lw=2.0, label=f"mean of {len(series)} layers")
            for i, (_, name, _a, _b, _se, vals, _p, _steps) in enumerate(shown):
                errorbar(ax, [v[0] for v in vals], [v[1] for v in vals], [v[2] for v in vals],
                          color=PALETTE[i % len(PALETTE)], ls="-" if i == 0 else LINESTYLES[(i - 1) % len(LINESTYLES)],
                          marker="os^vD<"[i],
                          ms=3, lw=1.0, label=name if len(name) <= 50 else "…" + name[-49:])
            ax.set_xlabel("step")
            ax.set_ylabel(label)
            ax.grid(True, alpha=0.25, lw=0.5)
            if ax.get_legend_handles_labels()[0]:  # beside the axes: never over the lines
                ax.legend(frameon=False, fontsize=6, loc="upper left", bbox_to_anchor=(1.01, 1.0))
            return fig

        panels.append({"label": label, "field": f, "src": figs.embed(_with_font(draw))})
        base = registry.function_of(f)  # (the stable rank is the top-PC share's function: one test of the two)
        if base is None or base not in {m[0] for m in metrics}:
            tested += [((f, name), p) for _, name, _, _, se, _, p, _ in change if se and p is not None]
        for _, name, a, b, se, _, _, (s_a, s_b) in change[:moved]:
            movers.append({"metric": label, "layer": name, "first": registry.shown(a, fmt),
                           "last": registry.shown(b, fmt),
                           "from_step": f"{s_a:g}", "to_step": f"{s_b:g}",
                           "change": ("+" if b >= a else "") + registry.shown(b - a, fmt),
                           "z": f"{abs(b - a) / se:.1f}" if se else "—", "sort": repr(abs(b - a)), "key": (f, name)})
    from spectra_cli.run.compare import FDR, benjamini_hochberg

    beyond = dict(zip((k for k, _ in tested), benjamini_hochberg([p for _, p in tested], FDR), strict=True))
    for m in movers:
        key = m.pop("key")
        m["noise"] = "—" if key not in beyond else "beyond" if beyond[key] else "within"
    per_step = []
    for st in steps:
        at = [p.doc for p in points if p.step == st]
        s = summarize(at).to_dict()
        per_step.append({"step": f"{st:g}", "layers": s["layers"], "verdicts": s.get("verdicts") or {},
                         "means": {m["field"]: m["mean"] for m in s["metrics"]}})
    return {"panels": panels, "movers": movers, "steps": [f"{s:g}" for s in steps], "series": len(series),
            "per_step": per_step, "metrics": [{"field": f, "label": lb, "fmt": fmt} for f, lb, fmt in metrics],
            "options": _options_line(docs[0]) if docs else ""}

def _report_tables(doc: dict[str, Any]) -> list[dict[str, Any]]:
    """The tables of one report: each a title, column headings and rows of text."""
    tables = []
    src, spec = doc.get("source") or {}, doc.get("spectrum") or {}
    tables.append({"title": "Data", "head": ["field", "value"], "rows": [
        ["source", str(src.get("path"))], ["format", str(src.get("format"))],
        ["shape", " × ".join(str(x) for x in src.get("shape") or [])], ["dtype", str(src.get("dtype"))],
        ["rows used", f"{spec.get('n_samples', '—'):,}" if isinstance(spec.get("n_samples"), int) else "—"],
        ["spectrum", str(spec.get("definition"))], ["method", str(spec.get("method"))],
        ["precision", str(spec.get("precision"))],
        ["numerical floor", f"{spec['numerical_floor']:.3g}" if finite(spec.get("numerical_floor")) else "—"],
        ["usable rank", f"{spec.get('usable_rank')} of {len(spec.get('eigenvalues') or [])}"]]})
    fits = doc.get("fits") if isinstance(doc.get("fits"), list) else []
    if fits:
        rows = []
        for f in fits:
            ci = f.get("ci") if isinstance(f.get("ci"), dict) else None
            rows.append([f"{f['window'][0]}–{f['window'][1]}", f"{f.get('model')} ({f.get('method')})",
                         _fmtv(f.get("alpha"), ".4f"), _fmtv(f.get("se"), ".4f"), _fmtv(f.get("stderr"), ".4f"),
                         f"{ci['low']:.4f}–{ci['high']:.4f}" if ci and finite(ci.get("low")) is not None
                         and finite(ci.get("high")) is not None else "—", _fmtv(f.get("r2"), ".4f"),
                         str(f.get("window_reason") or "")])
        tables.append({"title": "Rank fits", "head": ["ranks", "model", "α", "standard error (sampling)",
                                                      "standard error (least squares)",
                                                      "95 % interval (bootstrap)", "R²", "window"], "rows": rows})
    models = (doc.get("models") or {}).get("models") if isinstance(doc.get("models"), dict) else None
    if isinstance(models, dict):
        rows = [[name, _fmtv(m.get("alpha"), ".4f"), _fmtv(m.get("alpha_2"), ".4f"), _fmtv(m.get("crossover"), ".1f"),
                 _fmtv(m.get("bic"), ".1f")] for name, m in models.items() if isinstance(m, dict)]
        tables.append({"title": f"Models (lowest BIC: {doc['models'].get('best')})",
                       "head": ["model", "α", "α₂", "crossover", "BIC"], "rows": rows})
    pop = (doc.get("fit") or {}).get("population") if isinstance(doc.get("fit"), dict) else None
    if isinstance(pop, dict):
        ci = pop.get("ci") or [None, None]
        tables.append({"title": "Population exponent (finite-sample corrected)", "head": ["field", "value"], "rows": [
            ["population α", _fmtv(pop.get("alpha"), ".4f")],
            ["95 % interval", f"{ci[0]:.4f}–{ci[1]:.4f}" if finite(ci[0]) is not None and finite(ci[1]) is not None
             else "—"],
            ["sample α", _fmtv(pop.get("naive_alpha"), ".4f")], ["n/d", _fmtv(pop.get("n_over_d"), ".3g")],
            ["row model alone", _fmtv(pop.get("model_alpha"), ".4f")],
            ["spread ratio (the data's sampling curve / the row model's)",
             _fmtv(curve.get("spread_ratio"), ".3f") if isinstance(curve := pop.get("sampling_curve"), dict)
             else "— (not measured)"],
            ["method", str(pop.get("method"))]]})
    for key, title in (("rank", "Effective ranks"), ("isotropy", "Isotropy"),
                       ("weightwatcher", "WeightWatcher metrics"), ("density", "Density fit")):
        sec = doc.get(key)
        if isinstance(sec, dict):
            defs: dict[str, Any] = sec["definitions"] if isinstance(sec.get("definitions"), dict) else {}
            rows = [[_label(f"{key}.{k}", k), _fmtv(v, ".4g") if finite(v) is not None else str(v),
                     str(defs.get(k, ""))]
                    for k, v in sec.items() if not isinstance(v, dict | list) and v is not None
                    and k not in ("definition", "relation", "convention")]
            if rows:
                tables.append({"title": title, "head": ["metric", "value", "definition"], "rows": rows})
    return tables

def _label(path: str, name: str) -> str:
    """A field's label in the registry (its name where the registry has none)."""
    entry = registry.find(path)
    return entry.label if entry is not None else name


def _fmtv(v: Any, fmt: str) -> str:
    n = finite(v)
    return "—" if n is None else format(n, fmt)

def report_section(doc: dict[str, Any], figs: Figures) -> dict[str, Any]:
    from spectra_cli.plot import report_figure, sequence_figure, title_of

    if doc.get("schema") == "spectra.sequence/1":
        src = figs.embed(sequence_figure(doc))
        return {"title": title_of(doc), "figure": src, "tables": [], "warnings": doc.get("warnings") or []}
    return {"title": title_of(doc), "figure": figs.embed(report_figure(doc)), "tables": _report_tables(doc),
            "warnings": doc.get("warnings") or []}

def common_name(docs: list[dict[str, Any]]) -> str:
    items = [item_key(d).partition("::")[0] for d in docs]
    prefix = os.path.commonprefix(items)
    if len(set(items)) > 1:  # several files: their common folder
        prefix = os.path.dirname(prefix)
    if not prefix:
        return "spectra report"
    name = os.path.basename(prefix.rstrip("/")) or prefix
    return name.strip("-_.") or "spectra report"
