"""Rich tables for the commands whose result is not one report: info, check, batch, compare, trend."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rich.console import Console
from rich.table import Table


def _num(x: float | None) -> str:
    return "—" if x is None else f"{x:.6g}"


def print_info(path: str, doc: dict[str, Any], console: Console) -> None:
    t = Table(title=path, title_justify="left", show_header=False, box=None)
    t.add_column(style="bold cyan")
    t.add_column()
    for k, v in doc.items():
        if k not in ("columns_schema", "arrays", "tensors") and v is not None:
            t.add_row(k, str(v))
    console.print(t)
    if doc.get("columns_schema"):
        ct = Table("column", "type", title="Columns", title_justify="left", box=None)
        for c in doc["columns_schema"]:
            ct.add_row(c["name"], c["type"])
        console.print(ct)
    if doc.get("tensors"):
        tt = Table("tensor", "dtype", "shape", title="Tensors", title_justify="left", box=None)
        for tensor in doc["tensors"]:
            tt.add_row(tensor["name"], tensor["dtype"], str(tuple(tensor["shape"])))
        console.print(tt)
    if doc.get("arrays"):
        at = Table("key", "shape", "dtype", title="Arrays", title_justify="left", box=None)
        for a in doc["arrays"]:
            at.add_row(a["key"], str(tuple(a["shape"])), a["dtype"])
        console.print(at)


def print_checks(path: str, verdicts: Sequence[Any], console: Console) -> None:
    t = Table("check", "value", "bound", "verdict", title=f"Checks on {path}", title_justify="left")
    for v in verdicts:
        value = "null" if v.value is None else f"{v.value:.6g}"
        if v.baseline is not None:
            value += f" (baseline {v.baseline:.6g})"
        t.add_row(v.check.field, value, v.check.describe_bound(), "[green]pass[/]" if v.passed else "[red]FAIL[/]")
    console.print(t)


def print_batch(results: list[dict[str, Any]], order: list[str], *, skipped: int, jsonl: str | None,
                console: Console) -> None:
    title = f"{len(results)} item(s)" + (f", {skipped} skipped (--resume)" if skipped else "")
    t = Table("item", "shape", "alpha", "R^2", "part. ratio", "status",
              title=title + (f" -> {jsonl}" if jsonl else ""), title_justify="left")
    position = {name: i for i, name in enumerate(order)}
    for r in sorted(results, key=lambda r: position.get(r["item"], 0)):
        if "error" in r:
            t.add_row(r["item"], "", "", "", "", f"[red]error: {r['error']}[/]")
            continue
        f = r.get("fit") or {}
        t.add_row(r["item"], "x".join(str(x) for x in r["source"]["shape"]),
                  f"{f['alpha']:.4f}" if f else "—", f"{f['r2']:.4f}" if f else "—",
                  f"{r['rank']['participation_ratio']:.2f}", "ok")
    console.print(t)


HEADLINE = ("fit.", "rank.", "isotropy.", "density.", "spectrum.", "control.meets_at_rank")
LONG = ("spectrum.eigenvalues.", "spectrum.explained_variance_ratio.", "fit.window.")


def print_compare(a: str, b: str, rows: Sequence[Any], console: Console) -> None:
    """The headline figures; ``--json`` has every field."""
    t = Table(title=f"A = {a}\nB = {b}", title_justify="left")
    t.add_column("metric", no_wrap=True, min_width=24)
    for c in ("A", "B", "B - A", "rel"):
        t.add_column(c, justify="right")
    for r in rows:
        if r.field.startswith(HEADLINE) and not r.field.startswith(LONG):
            t.add_row(r.field, _num(r.a), _num(r.b), _num(r.diff), "—" if r.rel is None else f"{r.rel * 100:+.2f}%")
    console.print(t)


def print_trend(jsonl: str, points: Sequence[Any], metrics: list[str], console: Console) -> None:
    t = Table("series", "step", *metrics, title=jsonl, title_justify="left")
    for p in points:
        t.add_row(p.series, f"{p.step:g}", *(_num(p.values[m]) for m in metrics))
    console.print(t)
