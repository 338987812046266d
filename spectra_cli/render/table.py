"""Rich tables of a report for a terminal (stdout carries only the result)."""

from __future__ import annotations

from typing import Any

from rich.console import Console, Group
from rich.table import Table
from rich.text import Text


def _fmt(x: Any, digits: int = 4) -> str:
    if x is None:
        return "—"
    if isinstance(x, float):
        return f"{x:.{digits}g}"
    return str(x)


def _kv(title: str, rows: list[tuple[str, Any]]) -> Table:
    t = Table(title=title, title_justify="left", show_header=False, box=None, pad_edge=False)
    t.add_column(style="bold cyan", no_wrap=True)
    t.add_column()
    for k, v in rows:
        t.add_row(k, _fmt(v))
    return t


def report_renderable(doc: dict[str, Any], *, top: int = 10) -> Group:
    src, opt, sp = doc["source"], doc["options"], doc["spectrum"]
    parts: list[Any] = []
    shape = "x".join(str(s) for s in src["shape"])
    used = src["rows_used"]
    sel = []
    if src.get("rows"):
        sel.append(f"rows {src['rows']}")
    if src.get("sample"):
        sel.append(f"sample {src['sample']} (seed {src['seed']})")
    parts.append(_kv("Source", [
        ("path", src["path"]),
        ("format", f"{src['format']} ({src['layout']}" + (f", column {src['column']}" if src.get("column") else "")
         + (f", key {src['key']}" if src.get("key") else "") + ")"),
        ("stored", f"{shape} {src['dtype']}"),
        ("used", f"n={used}, d={sp['n_features']}, n/d={sp['n_over_d']:.3g}" + (f" [{', '.join(sel)}]" if sel else "")),
        ("matrix", sp["definition"]),
        ("precision", f"{sp['precision']} products, float64 accumulation"),
    ]))
    eig = Table(title="Spectrum", title_justify="left", box=None, pad_edge=False)
    for c in ("rank", "eigenvalue", "explained", "cumulative"):
        eig.add_column(c, justify="right")
    cum = 0.0
    for i, (lam, r) in enumerate(zip(sp["eigenvalues"], sp["explained_variance_ratio"], strict=False)):
        cum += r or 0.0
        if i >= top:
            break
        eig.add_row(str(i + 1), _fmt(lam), f"{(r or 0) * 100:.2f}%", f"{cum * 100:.2f}%")
    parts.append(eig)
    parts.append(_kv("", [
        ("k90 / k95 / k99", f"{_fmt(sp['k90'])} / {_fmt(sp['k95'])} / {_fmt(sp['k99'])}"),
        ("numerical floor", f"{_fmt(sp['numerical_floor'])}  (d * eps * lambda_1)"),
        ("numerical rank", f"{sp['numerical_rank']} of {sp['n_features']}"),
        ("usable rank", f"{sp['usable_rank']} (sampling limit {sp['sampling_rank']})"),
    ]))
    fit = doc.get("fit")
    if fit:
        w = fit["window"]
        parts.append(_kv("Power-law fit (rank form, lambda_j ~ C j^-alpha)", [
            ("alpha", f"{fit['alpha']:.4f} ± {_fmt(fit['stderr'], 2)} (OLS s.e.)"),
            ("window", f"ranks {w[0]}..{w[1]} ({fit['window_source']}: {fit['window_reason']})"),
            ("R^2", f"{fit['r2']:.5f}"),
            ("residual RMS", _fmt(fit["residual_rms"])),
            ("method", f"{fit['method']}, {fit['n_points']} points"),
        ]))
    rank = doc.get("rank")
    if rank:
        parts.append(_kv("Effective rank", [
            ("participation_ratio", rank["participation_ratio"]),
            ("entropy_rank", rank["entropy_rank"]),
            ("rankme", rank["rankme"]),
            ("stable_rank", rank["stable_rank"]),
            ("numerical_rank", rank["numerical_rank"]),
        ]))
    if doc["warnings"]:
        warn = Text("Warnings\n", style="bold yellow")
        for line in doc["warnings"]:
            warn.append(f"  • {line}\n")
        parts.append(warn)
    parts.append(Text(f"total {doc['timings'].get('total_s', 0):.2f} s · {opt['precision']}", style="dim"))
    return Group(*parts)


def print_report(doc: dict[str, Any], console: Console) -> None:
    console.print(report_renderable(doc))
