"""Rich tables for the commands whose result is not one report: info, check, batch, compare, trend."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from rich.console import Console
from rich.table import Table

from spectra_cli.metrics import find, label


def _num(x: float | None, fmt: str = ".6g") -> str:
    return "—" if x is None else format(x, fmt)


def print_info(path: str, doc: dict[str, Any], console: Console) -> None:
    t = Table(title=path, title_justify="left", show_header=False, box=None)
    t.add_column(style="bold cyan")
    t.add_column()
    for k, v in doc.items():
        if k not in ("columns_schema", "arrays", "tensors", "members", "m2_shapes", "warnings") and v is not None:
            t.add_row(k, str(v))
    console.print(t)
    if doc.get("members"):
        mt = Table("member", "fingerprint", title="Files", title_justify="left", box=None)
        shapes = doc.get("m2_shapes") or []
        if shapes:
            mt.add_column("d")
        for i, m in enumerate(doc["members"]):
            mt.add_row(m["path"], m["fingerprint"], *([str(shapes[i][0]) if shapes[i] else "?"] if shapes else []))
        console.print(mt)
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
        bound = v.check.describe_bound()
        if getattr(v, "limit", None) is not None:
            bound = f"|change| <= {v.check.bound[0]:g} SE = {v.limit:.4g}"
        elif getattr(v.check, "in_se", False):
            bound += " (no standard error: FAIL)"
        t.add_row(v.check.field, value, bound, "[green]pass[/]" if v.passed else "[red]FAIL[/]")
    console.print(t)


def print_batch(results: list[dict[str, Any]], *, skipped: int, jsonl: str | None,
                console: Console, convention: str = "spectra") -> None:
    results = [r for r in results if "skipped" not in r]
    prefix, _ = common_part([str(r["item"]) for r in results])
    title = f"{len(results)} item(s)" + (f" of {prefix}" if prefix else "") + \
        (f", {skipped} skipped (--resume)" if skipped else "")
    from spectra_cli.drawable import natural_key

    rows = sorted(results, key=lambda r: natural_key(str(r["item"])))  # layer.2 before layer.10, step_200 before 1000
    names = shorten_names([str(r["item"]) for r in rows])
    ww_convention = convention == "weightwatcher" or any(
        (r.get("options") or {}).get("convention") == "weightwatcher" for r in rows)
    if ww_convention:  # WeightWatcher's analyze() columns, by its names
        t = Table(title=title + " (WeightWatcher's convention)" + (f" -> {jsonl}" if jsonl else ""),
                  title_justify="left")
        t.add_column("layer", overflow="fold")
        cols = ("alpha", "alpha_weighted", "log_norm", "log_spectral_norm", "stable_rank", "num_spikes",
                "mp_softrank", "warning")
        for col in ("N x M (N >= M)", *cols):
            t.add_column(label(f"weightwatcher.columns.{col}") if find(f"weightwatcher.columns.{col}") else col,
                         no_wrap=True)
        for name, r in zip(names, rows, strict=True):
            if "error" in r:
                t.add_row(name, "", *([""] * (len(cols) - 1)), f"[red]error: {r['error']}[/]")
                continue
            c = (r.get("weightwatcher") or {}).get("columns") or {}
            t.add_row(name, f"{c.get('N')}x{c.get('M')}", *(_num(c.get(k)) if k != "warning" else
                                                             str(c.get(k) or "") for k in cols))
        console.print(t)
        return
    with_ww = any(isinstance(r.get("weightwatcher"), dict) for r in results)
    t = Table(title=title + (f" -> {jsonl}" if jsonl else ""), title_justify="left")
    t.add_column("item", overflow="fold")  # a long name wraps; it is never cut
    for name in ("shape", label("fit.alpha"), label("fit.r2"), label("rank.participation_ratio"),
                 *((label("weightwatcher.alpha"), label("weightwatcher.verdict")) if with_ww else ())):
        t.add_column(name, no_wrap=True)
    t.add_column("status", overflow="fold")
    for name, r in zip(names, rows, strict=True):
        if "error" in r:
            t.add_row(name, "", "", "", "", *(("", "") if with_ww else ()), f"[red]error: {r['error']}[/]")
            continue
        f = r.get("fit") or {}
        ww = r.get("weightwatcher") or {}
        extra = (_num(ww.get("alpha")), str(ww.get("verdict") or "—")) if with_ww else ()
        t.add_row(name, "x".join(str(x) for x in r["source"]["shape"]),
                  f"{f['alpha']:.4f}" if f else "—", f"{f['r2']:.4f}" if f else "—",
                  f"{r['rank']['participation_ratio']:.2f}", *extra, "ok")
    console.print(t)
    if any(str(r["item"]).partition("::")[0].endswith(".safetensors") for r in rows) and not with_ww:
        console.print(f"[dim]{label('fit.alpha')} is the rank-window exponent of the centred rows; WeightWatcher's "
                      "alpha and its 2..6 guidance: --convention weightwatcher[/]")


HEADLINE = ("fit.", "rank.", "isotropy.", "density.", "spectrum.", "control.meets_at_rank")
LONG = ("spectrum.eigenvalues.", "spectrum.explained_variance_ratio.", "fit.window.")


def print_compare(a: str, b: str, rows: Sequence[Any], console: Console) -> None:
    """The headline figures; ``--json`` has every field."""
    t = Table(title=f"A = {a}\nB = {b}", title_justify="left")
    t.add_column("metric", no_wrap=True, min_width=24)
    for c in ("A", "B", "B - A", "rel", "z"):
        t.add_column(c, justify="right")
    marked = 0
    for r in rows:
        if r.field.startswith(HEADLINE) and not r.field.startswith(LONG):
            z = "—" if r.z is None else f"{r.z:+.1f}" + (" *" if r.significant else "")
            marked += bool(r.significant)
            t.add_row(r.field, _num(r.a), _num(r.b), _num(r.diff), "—" if r.rel is None else f"{r.rel * 100:+.2f}%", z)
    console.print(t)
    console.print("[dim]z: the change over its standard error (independent samples); * beyond sampling noise at the "
                  "false discovery rate (Benjamini-Hochberg over every field with a standard error; --json has each "
                  "row's se, z, p, significant)[/]")


def print_trend(jsonl: str, points: Sequence[Any], metrics: list[str], console: Console) -> None:
    t = Table("series", "step", *(label(m) for m in metrics), title=jsonl, title_justify="left")
    for p in points:
        t.add_row(p.series, f"{p.step:g}", *(_num(p.values[m]) for m in metrics))
    console.print(t)


def print_model_summary(doc: dict[str, Any], console: Console) -> None:
    """The model-level summary of a batch (``--summary``)."""
    title = f"Model: {doc['layers']} layer(s), {doc['failed']} failed, {doc['skipped']} skipped"
    ww = doc.get("weightwatcher_summary")
    if ww:
        t = Table("get_summary()", "mean", title=f"WeightWatcher's get_summary() of the {ww['layers']} layer(s)",
                  title_justify="left")
        for k, v in ww.items():
            if k != "layers":
                t.add_row(k, _num(v))
        console.print(t)
    if doc.get("verdicts"):
        lo, hi = doc["alpha_range"] or (None, None)
        t = Table("verdict", "layers", "rule", title=title, title_justify="left")
        rules = {"over-trained": f"alpha < {lo:g}" if lo is not None else "", "ok": "in range",
                 "under-trained": f"alpha > {hi:g}" if hi is not None else "", "no density fit": "too few eigenvalues"}
        for k, n in doc["verdicts"].items():
            t.add_row(k, str(n), rules.get(k, ""))
        console.print(t)
    else:
        console.print(title + " (no verdicts: run the batch with --density)")
    m = Table("metric", "layers", "mean", "median", "weighted mean", "weighted median",
              title="Metrics (plain, and weighted by parameters)", title_justify="left")
    for row in doc["metrics"]:
        entry = find(str(row["field"]))
        fmt = entry.fmt if entry is not None and entry.type != "integer" else ".4g"
        m.add_row(row["label"], str(row["layers"]), *(_num(row[k], fmt) for k in ("mean", "median", "weighted_mean",
                                                                                   "weighted_median")))
    console.print(m)
    if doc.get("worst"):
        w = Table("item", label("weightwatcher.alpha"), "verdict", "outside by",
                  title="Furthest outside the alpha range",
                  title_justify="left")
        names = shorten_names([str(x["item"]) for x in doc["worst"]])
        for name, row in zip(names, doc["worst"], strict=True):
            w.add_row(name, _num(row["alpha"]), str(row["verdict"]), _num(row["distance"]))
        console.print(w)
    skipped = doc.get("skipped_items") or []
    if skipped:
        kinds: dict[str, int] = {}
        for sk in skipped:
            kinds[str(sk.get("kind"))] = kinds.get(str(sk.get("kind")), 0) + 1
        console.print("Skipped: " + ", ".join(f"{n} {k}{'s' if n != 1 else ''}" for k, n in kinds.items()))
        for sk in skipped:  # the layers a reader may expect to see (vectors and buffers only counted)
            if sk.get("kind") not in ("vector", "scalar", "integer buffer", "boolean buffer"):
                console.print(f"  {sk.get('item')}: {sk.get('why')}")


_SHARD = re.compile(r"-\d{5}-of-\d{5}(?=\.safetensors$)")


def common_part(names: Sequence[str]) -> tuple[str | None, list[str]]:
    """What the names share, shown once, and the part of each that differs, whole: the tensors of one
    checkpoint under its file (a sharded folder's under the folder: the model, not the shard), else
    files under their common directory. ``(None, names)`` when they share nothing worth cutting."""
    import os

    names = list(names)
    if not names:
        return None, names
    files = [n.partition("::")[0] for n in names]
    if all("::" in n for n in names):
        sharded = [bool(_SHARD.search(f)) for f in files]
        models = {_SHARD.sub("", f) for f in files}
        if len(models) == 1:
            model = (os.path.dirname(files[0]) or ".") + "/" if all(sharded) else files[0]
            return model, [n.partition("::")[2] for n in names]
    if len(names) < 2:
        return None, names
    cut = os.path.commonprefix(names).rfind("/") + 1
    if cut <= 0:
        return None, names
    return names[0][:cut], [n[cut:] for n in names]


def shorten_names(names: Sequence[str]) -> list[str]:
    """Names without what they all share (see :func:`common_part`), so the part that differs shows."""
    prefix, rest = common_part(names)
    return rest if prefix is not None else list(names)


def print_item_checks(path: str, doc: dict[str, Any], console: Console) -> None:
    """``check`` on a results file: the failures, item by item, and the count."""
    items = doc["items"]
    failed = [i for i in items if not i["passed"]]
    t = Table(title=f"{path}: {len(items) - len(failed)} of {len(items)} item(s) pass", title_justify="left")
    t.add_column("item", overflow="fold")
    t.add_column("failed check", overflow="fold")
    t.add_column("value", no_wrap=True)
    names = shorten_names([str(i["item"]) for i in failed])
    for name, item in zip(names, failed, strict=True):
        if "error" in item:
            t.add_row(name, f"[red]the item failed: {item['error']}[/]", "")
        for r in item["results"]:
            if not r["passed"]:
                t.add_row(name, r["message"], "null" if r["value"] is None else f"{r['value']:.6g}")
    console.print(t)


def print_page(doc: dict[str, Any], console: Console) -> None:
    """What ``spectra report`` wrote, in one line."""
    console.print(f"{doc['kind']} page [bold]{doc['title']}[/]: {doc['items']} report(s), {doc['figures']} figures, "
                  f"{doc['bytes'] / 1e6:.2f} MB -> {doc['path']}")
