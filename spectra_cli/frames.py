"""Results as tables for notebooks: flat rows of a batch (``BatchResult.rows()`` / ``.to_pandas()``),
a report's spectrum and fits (``Report.to_pandas()``), and the small HTML tables Jupyter shows
(``_repr_html_``). pandas is an optional extra, imported only by ``to_pandas``.

Rows of a batch are flat: one per item (reports, failed items and skipped tensors alike), the
columns dotted report fields (``fit.alpha``, ``rank.participation_ratio``) beside ``item``,
``status`` (ok, failed, skipped) and ``why``. Under ``convention="weightwatcher"`` they are
WeightWatcher's ``analyze()`` columns by its names, one row per layer it analyses.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from html import escape
from typing import Any

from spectra_cli import registry
from spectra_cli.analysis.weightwatcher import ANALYZE_COLUMNS, EXTRA_COLUMNS
from spectra_cli.documents import alpha_error_text, finite, lookup
from spectra_cli.errors import OptionError

#: A batch row's report fields (dotted), in this order: the registry's ``batch`` view.
FIELDS = tuple(m.path.removesuffix(".*") for m in registry.view("batch"))
#: WeightWatcher's ``analyze()`` details columns (0.7.7, default and ``mp_fit=True``), in its order of interest.


def require_pandas() -> Any:
    try:
        import pandas
    except ImportError:
        raise OptionError("to_pandas() needs pandas, the optional extra 'pandas': pip install "
                          "'spectra-geometry[pandas]' "
                          "(from a checkout: pip install '.[pandas]').") from None
    return pandas


def _value(doc: Any, field: str) -> Any:
    from spectra_cli.documents import MISSING, lookup

    v = lookup(doc, field)
    if v is None or v is MISSING:
        return None
    if isinstance(v, list):
        return f"{v[0]}:{v[1]}" if field.endswith("window") and len(v) == 2 else str(v)
    return v


def _item(doc: dict[str, Any]) -> str:
    from spectra_cli.documents import item_name

    return item_name(doc)


def batch_rows(lines: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """One flat row per line of a batch: reports, failed items, skipped tensors."""
    rows = []
    for doc in lines:
        status = "skipped" if "skipped" in doc else "failed" if "error" in doc else "ok"
        why = doc.get("skipped") if status == "skipped" else doc.get("error") if status == "failed" else None
        row: dict[str, Any] = {"item": _item(doc), "status": status, "why": why,
                               "kind": doc.get("kind") if status == "skipped" else None}
        src: dict[str, Any] = doc["source"] if isinstance(doc.get("source"), dict) else {}
        shape = src.get("shape")
        row["shape"] = "x".join(str(s) for s in shape) if isinstance(shape, list) else None
        for f in FIELDS:
            row[f] = _value(doc, f) if status == "ok" else None
        rows.append(row)
    return rows


def ww_rows(lines: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """WeightWatcher's details rows: one per layer analysed, in the network's order (the natural order of
    the names; ``layer_id`` is that position, where WeightWatcher numbers every module), by its column names."""
    from spectra_cli.documents import natural_key

    docs = [d for d in lines if "skipped" not in d and "error" not in d]
    if docs and not any(isinstance((d.get("weightwatcher") or {}).get("columns"), dict) for d in docs
                        if isinstance(d.get("weightwatcher"), dict)):
        raise OptionError("these results hold no WeightWatcher columns (made without convention='weightwatcher'): "
                          "run spectra batch with --convention weightwatcher for them.")
    docs.sort(key=lambda d: natural_key(_item(d)))
    rows = []
    for k, doc in enumerate(docs):
        ww = doc.get("weightwatcher")
        cols = ww.get("columns") if isinstance(ww, dict) else None
        cols = cols if isinstance(cols, dict) else {}
        tensor = _item(doc).partition("::")[2] or os.path.basename(_item(doc))
        longname = tensor[: -len(".weight")] if tensor.endswith(".weight") else tensor
        row = {"layer_id": k, "name": longname.split(".")[-1], "longname": longname}
        row.update({c: cols.get(c) for c in ANALYZE_COLUMNS[3:]})
        density: dict[str, Any] = doc["density"] if isinstance(doc.get("density"), dict) else {}
        row.update({c: density.get(c) if c == "tail_law" else cols.get(c, 1 if c == "rf" else None)
                    for c in EXTRA_COLUMNS})
        rows.append(row)
    return rows


def frame(rows: Sequence[dict[str, Any]], columns: Sequence[str] | None = None) -> Any:
    """A DataFrame of rows; every column of a reported number (the registry's, or WeightWatcher's) is
    numeric, missing values NaN (a column with no value is float, not object)."""
    pandas = require_pandas()
    df = pandas.DataFrame(list(rows), columns=list(columns) if columns is not None else None)
    for c in df.columns:
        entry = registry.find(c) or registry.find(f"weightwatcher.columns.{c}")
        if entry is not None and entry.type in ("number", "integer") and not entry.path.endswith(".**") \
                and df[c].dtype == object:
            df[c] = pandas.to_numeric(df[c], errors="coerce")
    return df


def report_frame(doc: dict[str, Any]) -> Any:
    """One report's spectrum as a DataFrame: a row per rank (``rank``, ``eigenvalue``,
    ``explained_variance_ratio``, ``usable``), and one column per fit (``fit 11-38``: the fitted law over its
    window, empty outside it)."""
    import numpy as np

    from spectra_cli.documents import predict

    pandas = require_pandas()
    spec = doc["spectrum"]
    lam = np.asarray([np.nan if v is None else v for v in spec["eigenvalues"]], dtype=float)
    ranks = np.arange(1, lam.size + 1)
    evr = spec.get("explained_variance_ratio") or [None] * lam.size
    data: dict[str, Any] = {"rank": ranks, "eigenvalue": lam,
                            "explained_variance_ratio": np.asarray([np.nan if v is None else v for v in evr], float),
                            "usable": ranks <= (lam.size if spec.get("usable_rank") is None else spec["usable_rank"])}
    for f in doc.get("fits") or []:
        k1, k2 = f["window"]
        col = np.full(lam.size, np.nan)
        inside = (ranks >= k1) & (ranks <= k2)
        col[inside] = predict(f, ranks[inside].astype(float))
        data[f"fit {k1}-{k2}"] = col
    return pandas.DataFrame(data)


def _cell(v: Any) -> str:
    if v is None:
        return "—"
    if isinstance(v, float):
        return f"{v:.4g}"
    return escape(str(v))


def html_table(rows: Sequence[dict[str, Any]], columns: Sequence[str], *, limit: int = 60, title: str = "") -> str:
    """A small HTML table (escaped) of the first ``limit`` rows."""
    head = "".join(f"<th>{escape(c)}</th>" for c in columns)
    body = "".join("<tr>" + "".join(f"<td>{_cell(r.get(c))}</td>" for c in columns) + "</tr>" for r in rows[:limit])
    more = f"<p>… {len(rows) - limit} more rows (to_pandas() has them all)</p>" if len(rows) > limit else ""
    caption = f"<p><b>{escape(title)}</b></p>" if title else ""
    return f"{caption}<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>{more}"


def report_html(doc: dict[str, Any]) -> str:
    """A report's headline numbers, for Jupyter."""
    src, spec = doc.get("source") or {}, doc.get("spectrum") or {}
    fit = doc.get("fit") or {}
    ci = fit.get("ci") if isinstance(fit.get("ci"), dict) else None
    data = f"{src.get('path')} ({spec.get('n_samples')} x {spec.get('n_features')})"
    law = {"log-corrected": "log-corrected law, ", "broken": "broken law, "}.get(str(fit.get("model")), "")
    alpha = ([{"field": f"alpha ({law}ranks {fit['window'][0]}..{fit['window'][1]})",
               "value": f"{fit['alpha']:.4f}" + alpha_error_text(fit)
               + (f", 95% CI {ci['low']:.4f}..{ci['high']:.4f}" if ci else "")}] if fit.get("alpha") is not None
             else [{"field": "alpha", "value": "not fitted (the warnings say why)"}])
    # the headline metrics besides alpha, each in its registry format (a new one shows here without an edit)
    headline = [{"field": m.label, "value": registry.shown(float(v), "d" if m.type == "integer" else m.fmt)}
                for m in registry.view("headline") if m.path != "fit.alpha"
                and (v := finite(lookup(doc, m.path))) is not None]
    rows: list[dict[str, Any]] = [
            {"field": "data", "value": data},
            {"field": "spectrum", "value": spec.get("definition")},
            *alpha, *headline,
            {"field": "warnings", "value": len(doc.get("warnings") or [])}]
    return html_table(rows, ("field", "value"), title="spectra report")
