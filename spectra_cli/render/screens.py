"""Rich tables for the commands whose result is not one report: info, check, batch, compare, trend."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from rich.console import Console
from rich.table import Table

from spectra_cli.options import Convention
from spectra_cli.registry import find, get, label
from spectra_cli.sources import formats


def shape_text(doc: dict[str, Any]) -> str:
    """A report's matrix shape as stored, rows first (``1536 × 384``), as every screen and page shows it."""
    shape = (doc.get("source") or {}).get("shape") if "error" not in doc else None
    return " × ".join(str(s) for s in shape) if isinstance(shape, list) else ""


def _num(x: float | None, fmt: str = ".6g") -> str:
    return "—" if x is None else format(x, fmt)


#: What ``info``'s table calls the fields of its document (the others: their name, with spaces).
INFO_LABELS = {"n_rows": "rows", "n_features": "features", "fortran_order": "Fortran order", "m2_shapes": "d"}


def print_info(path: str, doc: dict[str, Any], console: Console) -> None:
    t = Table(title=path, title_justify="left", show_header=False, box=None)
    t.add_column(style="bold cyan")
    t.add_column()
    for k, v in doc.items():
        if k not in ("columns_schema", "arrays", "tensors", "members", "m2_shapes", "warnings") and v is not None:
            t.add_row(INFO_LABELS.get(k, k.replace("_", " ")), str(v))
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
    rows: list[tuple[str, str, str, str]] = []
    for v in verdicts:
        value = "null" if v.value is None else f"{v.value:.6g}"
        if v.baseline is not None:
            value += f" (baseline {v.baseline:.6g})"
        bound = v.check.describe_bound()
        if getattr(v, "limit", None) is not None:
            bound = f"|change| <= {v.check.bound[0]:g} SE = {v.limit:.4g}"
        elif getattr(v.check, "in_se", False):
            bound += " (no standard error: FAIL)"
        rows.append((v.check.field, value, bound, "pass" if v.passed else "FAIL"))
    print_columns(console, f"Checks on {path}", "check", [r[0] for r in rows],
                  [(head, [r[i] for r in rows]) for i, head in ((1, "value"), (2, "bound"), (3, "verdict"))])


def wrap_name(name: str, width: int) -> str:
    """A long name broken into lines of at most ``width`` after its slashes (a path), else after its dots, colons
    and underscores (``encoder.layer.0.attention.`` / ``output.dense.weight``), not inside a word; a part longer
    than a line is left to the table, which folds it. A name that fits, or that has a line break of its own, is
    returned as it is."""
    import re

    if len(name) <= width or width < 8 or "\n" in name:
        return name
    seps = "/" if "/" in name else ".:_"
    lines, line = [], ""
    for part in re.findall(rf"[^{seps}]*[{seps}]+|[^{seps}]+$", name):
        if line and len(line) + len(part) > width:
            lines.append(line)
            line = ""
        line += part
    lines.append(line)
    return "\n".join(lines)


#: A column heading this short is never wrapped.
SHORT_HEADING = 8


def column_tables(width: int, title: str, key: str, keys: Sequence[str],
                  columns: Sequence[tuple[str, Sequence[str]]], *, box: Any = "simple") -> list[Table]:
    """A table of items (``keys``, under the heading ``key``) and columns of text, split into as many
    tables as ``width`` needs: each repeats the items, no value is ever cut (a value column is as wide as
    its widest value; headings wrap at their spaces), and long item names fold."""
    from rich import box as boxes

    columns = [(h, vals) for h, vals in columns if any(vals)]  # a column with nothing in it is left out
    # (a heading of a few characters, "B - A", stays on one line: wrapped at its spaces it stood one letter a line)
    widest_word = [len(h) if len(h) <= SHORT_HEADING else max((len(w) for w in h.split()), default=1)
                   for h, _ in columns]
    widths = [max([len(v) for v in vals] + [w]) for (_, vals), w in zip(columns, widest_word, strict=True)]
    key_min = min(max([len(k) for k in keys] + [len(key)]), max(16, width // 3))

    # a word longer than a line (a path) breaks after a slash or a dot; the rest wraps at its spaces
    title = "\n".join(" ".join(wrap_name(word, width - 2) for word in line.split(" ")) for line in title.split("\n"))

    def build(group: list[int], part: str) -> Table:
        t = Table(title=title + part, title_justify="left", box=boxes.SIMPLE_HEAD if box == "simple" else None,
                  pad_edge=False)
        t.add_column(key, overflow="fold", min_width=key_min, ratio=1 if box == "simple" else None)
        for i in group:  # exactly as wide as its widest value (a heading wraps at its spaces)
            t.add_column(columns[i][0], justify="right", width=widths[i], overflow="fold")
        room = max(key_min, width - 3 - sum(widths[i] + 3 for i in group))  # what the item column gets, at least
        for r, k in enumerate(keys):
            t.add_row(wrap_name(k, room), *(columns[i][1][r] for i in group))
        return t

    def fits(group: list[int]) -> bool:  # each column, its padding and the space between columns
        return key_min + 2 + sum(widths[i] + 3 for i in group) <= width

    groups: list[list[int]] = [[]]
    for i in range(len(columns)):
        if groups[-1] and not fits([*groups[-1], i]):
            groups.append([])
        groups[-1].append(i)
    return [build(group, f" ({n + 1} of {len(groups)})" if len(groups) > 1 else "") for n, group in enumerate(groups)]


def print_columns(console: Console, title: str, key: str, keys: Sequence[str],
                  columns: Sequence[tuple[str, Sequence[str]]]) -> None:
    """:func:`column_tables` at the console's width, printed."""
    for t in column_tables(console.width, title, key, keys, columns):
        console.print(t)


def print_batch(results: list[dict[str, Any]], *, skipped: int, jsonl: str | None,
                console: Console, convention: str = Convention.SPECTRA) -> None:
    results = [r for r in results if "skipped" not in r]
    prefix, _ = common_part([str(r["item"]) for r in results])
    title = f"{len(results)} item(s)" + (f" of {prefix}" if prefix else "") + \
        (f", {skipped} skipped (--resume)" if skipped else "")
    from spectra_cli.documents import natural_key

    rows = sorted(results, key=lambda r: natural_key(str(r["item"])))  # layer.2 before layer.10, step_200 before 1000
    names = shorten_names([str(r["item"]) for r in rows])
    ww_convention = Convention.of(convention).is_weightwatcher or any(
        Convention.of_report(r).is_weightwatcher for r in rows)
    failed = [r for r in rows if "error" in r]
    changes = any(isinstance(r.get("base_model"), dict) or isinstance((r.get("source") or {}).get("adapter"), dict)
                  for r in rows)
    if changes:
        _change_columns(console, title, rows, names, jsonl, weightwatcher=ww_convention)
    elif ww_convention:  # WeightWatcher's analyze() columns, by its names
        from spectra_cli.analysis.weightwatcher import TABLE_COLUMNS as cols

        def ww(r: dict[str, Any], k: str) -> str:
            c = (r.get("weightwatcher") or {}).get("columns") or {}
            entry = find(f"weightwatcher.columns.{k}")
            return "" if "error" in r else entry.format(c.get(k)) if entry is not None else _num(c.get(k))

        columns = [("shape", [shape_text(r) for r in rows])]  # (as stored, as the page shows it)
        columns += [(label(f"weightwatcher.columns.{k}"), [ww(r, k) for r in rows]) for k in cols]
        columns.append(("warning", ["error" if "error" in r else str((((r.get("weightwatcher") or {}).get("columns")
                                                                        or {}).get("warning")) or "") for r in rows]))
        print_columns(console, title + " (WeightWatcher's convention)" + (f" -> {jsonl}" if jsonl else ""), "layer",
                      names, columns)
    else:
        with_ww = any(isinstance(r.get("weightwatcher"), dict) for r in results)

        def cell(r: dict[str, Any], path: str) -> str:
            from spectra_cli.documents import lookup

            v = lookup(r, path)
            entry = find(path)
            return "" if "error" in r else entry.format(v if isinstance(v, int | float | str) else None) \
                if entry is not None else str(v)

        from spectra_cli.documents import MISSING, lookup
        from spectra_cli.registry import view

        # the registry's row view, each field where some item's report has it (WeightWatcher's with --density, spikes
        # with --spikes; a null value is a dash)
        paths = [m.path for m in view("row") if any(lookup(r, m.path) is not MISSING for r in rows)]
        columns = [("shape", ["" if "error" in r else "x".join(str(x) for x in r["source"]["shape"]) for r in rows])]
        columns += [(label(p), [cell(r, p) for r in rows]) for p in paths]
        if failed:  # a status column only where some item failed (each reason is printed below)
            columns.append(("status", ["error" if "error" in r else "ok" for r in rows]))
        print_columns(console, title + (f" -> {jsonl}" if jsonl else ""), "item", names, columns)
    for r in failed:  # the reason of a failed item, whole, below the table
        console.print(f"[red]error[/] {shorten_names([str(x['item']) for x in rows])[rows.index(r)]}: {r['error']}")
    with_ww = any(isinstance(r.get("weightwatcher"), dict) for r in results)
    if any(str(r["item"]).partition("::")[0].endswith(formats.SAFETENSORS.extension) for r in rows) and not with_ww \
            and not changes:
        console.print(f"[dim]{label('fit.alpha')} is the rank-window exponent of the centred rows; WeightWatcher's "
                      "alpha and its 2..6 guidance: --convention weightwatcher[/]")


def _change_columns(console: Console, title: str, rows: list[dict[str, Any]], names: list[str], jsonl: str | None,
                    *, weightwatcher: bool) -> None:
    """A batch of changes (``--base``): each layer's change (its numerical rank, stable rank and size ``||Delta
    W||_F / ||W_base||_F``) beside the base's and the fine-tune's own alpha, and the fields whose change is
    significant (compare's test)."""
    alpha = "weightwatcher.alpha" if weightwatcher else "fit.alpha"

    def side(r: dict[str, Any], which: str) -> str:
        for m in (r.get("base_model") or {}).get("metrics") or ():
            if m.get("field") == alpha:
                return get(alpha).format(m.get(which))
        return "—"

    def changed(r: dict[str, Any]) -> str:
        bm = r.get("base_model") or {}
        if not (bm.get("significance") or {}).get("tested"):
            return "not tested"
        hit = [label(m["field"]) for m in bm.get("metrics") or () if m.get("significant")]
        return ", ".join(hit) if hit else "none"

    def own(r: dict[str, Any], path: str) -> str:
        from spectra_cli.documents import lookup

        v = lookup(r, path)
        return "" if "error" in r else get(path).format(v if isinstance(v, int | float) else None)

    columns = [("shape", ["" if "error" in r else "x".join(str(x) for x in r["source"]["shape"]) for r in rows]),
               ("change: rank", [own(r, "rank.numerical_rank") for r in rows]),
               ("change: stable rank", [own(r, "rank.stable_rank") for r in rows])]
    base = next((r["base_model"]["base"] for r in rows if isinstance(r.get("base_model"), dict)), "")
    if base:
        def size(r: dict[str, Any]) -> str:
            v = (r.get("base_model") or {}).get("relative_change")
            return "—" if not isinstance(v, int | float) else f"{v:.3g}"

        columns += [("change: size", [size(r) for r in rows]),
                    (f"{label(alpha)}: base", [side(r, "a") for r in rows]),
                    (f"{label(alpha)}: tuned", [side(r, "b") for r in rows]),
                    ("significant changes", ["error" if "error" in r else changed(r) for r in rows])]
    adapter = any(isinstance((r.get("source") or {}).get("adapter"), dict) for r in rows)
    what = " LoRA change(s) s B A" if adapter else " change(s) W - W_base"
    print_columns(console, title.replace(" item(s)", what, 1) + (f"\nbase: {base.partition('::')[0]}" if base else "")
                  + (f" -> {jsonl}" if jsonl else ""), "layer", names, columns)
    if not base:
        console.print("[dim]the base's and the adapted layers' own metrics: --base BASE[/]")


HEADLINE = ("fit.", "rank.", "isotropy.", "density.", "spectrum.", "control.meets_at_rank")
LONG = ("spectrum.eigenvalues.", "spectrum.explained_variance_ratio.", "fit.window.")


#: Fields the table leaves to ``--json``: the rounding floor and bookkeeping, and the numbers shown
#: under another name (the spectrum's k90 is the rank's).
NOT_HEADLINE = ("spectrum.numerical_floor", "spectrum.structural_zeros", "spectrum.near_null", "spectrum.sampling_rank",
                "spectrum.n_features", "fit.intercept", "fit.stderr", "fit.n_points", "fit.bic", "rank.numerical_rank",
                "rank.k90", "rank.k95", "rank.k99", "isotropy.zero_rows")


def print_compare(a: str, b: str, rows: Sequence[Any], console: Console) -> None:
    """The headline figures, each in its own format, the change over its standard error beside it;
    ``--json`` has every field. Split into further tables on a narrow terminal."""
    shown = [r for r in rows if r.field.startswith(HEADLINE) and not r.field.startswith(LONG)
             and r.field not in NOT_HEADLINE]

    def value(r: Any, x: float | None) -> str:
        m = find(r.field)
        return "—" if x is None else m.format(x) if m is not None else _num(x, ".4g")

    print_columns(console, f"A = {a}\nB = {b}", "metric", [r.field for r in shown], [
        ("A", [value(r, r.a) for r in shown]), ("B", [value(r, r.b) for r in shown]),
        ("B - A", [f"{int(r.diff):+d}" if r.diff is not None and float(r.diff).is_integer() and abs(r.diff) < 1e12
                   else _num(r.diff, "+.3g") for r in shown]),
        ("z", ["—" if r.z is None else f"{r.z:+.1f}" + (" *" if r.significant else "") for r in shown]),
        ("rel", ["—" if r.rel is None else f"{r.rel * 100:+.1f}%" for r in shown])])
    console.print("[dim]z: the change over its standard error (independent samples; Student's t where the errors "
                  "come from row groups); * beyond sampling noise at the false discovery rate (Benjamini-Hochberg over "
                  "each independent quantity once: the stable rank takes the top-PC share's verdict; --json gives "
                  "each row's standard error, z, degrees of freedom, p-value and verdict)[/]")


#: Past this many points, trend's table shows each series at its first and last step.
TREND_ROWS = 40


def print_trend(jsonl: str, points: Sequence[Any], metrics: list[str], console: Console) -> None:
    """Each metric at each step, ± half its interval (the standard error, or half a --ci interval)."""

    from spectra_cli.registry import find, shown

    def fmt(m: str) -> str:
        entry = find(m)
        return ("d" if entry.type == "integer" else entry.fmt) if entry is not None else ".4g"

    def cell(p: Any, m: str) -> str:  # in the metric's own format, as every screen shows it
        v, iv = p.values[m], (p.intervals or {}).get(m)
        if v is None:
            return "—"
        if iv is None:
            return shown(v, fmt(m))
        return f"{shown(v, fmt(m))} ± {format(abs(iv[1] - iv[0]) / 2, '.2g')}"

    if len(points) > TREND_ROWS:  # a run of many series and steps: each series' first and last step
        series: dict[str, list[Any]] = {}
        for p in points:
            series.setdefault(p.series, []).append(p)
        ends = [(name, min(ps, key=lambda p: p.step), max(ps, key=lambda p: p.step)) for name, ps in series.items()]

        def change(a: Any, b: Any, m: str) -> str:
            va, vb = a.values[m], b.values[m]
            return "—" if va is None or vb is None else ("+" if vb >= va else "") + shown(vb - va, fmt(m))

        columns: list[tuple[str, list[str]]] = []
        for m in metrics:
            columns += [(f"{label(m)} first", [cell(a, m) for _, a, _ in ends]),
                        (f"{label(m)} last", [cell(b, m) for _, _, b in ends]),
                        ("change", [change(a, b, m) for _, a, b in ends])]
        print_columns(console, f"{jsonl}: {len(points)} points of {len(series)} series, each at its first and last "
                      "step (every point: --json or --plot)", "series, steps",
                      [f"{name}, {a.step:g}..{b.step:g}" for name, a, b in ends], columns)
    else:
        # (the step beside the series in the key column, which a table too wide for the terminal repeats)
        print_columns(console, jsonl, "series, step", [f"{p.series}, {p.step:g}" for p in points],
                      [(label(m), [cell(p, m) for p in points]) for m in metrics])
    if any((p.intervals or {}).get(m) for p in points for m in metrics):
        console.print("[dim]± the standard error of each report (half the 95% interval where --ci gave one)[/]")


def print_model_summary(doc: dict[str, Any], console: Console) -> None:
    """The model-level summary of a batch (``--summary``)."""
    title = f"Model: {doc['layers']} layer(s), {doc['failed']} failed, {doc['skipped']} skipped"
    ww = doc.get("weightwatcher_summary")
    if ww:
        t = Table("metric", "mean", title=f"WeightWatcher's summary of the {ww['layers']} layer(s) (its "
                  "get_summary(): the mean of each metric)", title_justify="left")
        for k, v in ww.items():
            if k != "layers":  # each in the format the tables above and below give it
                entry = find(f"weightwatcher.columns.{k}")
                t.add_row(label(f"weightwatcher.columns.{k}"), _num(v, entry.fmt if entry is not None else ".3f"))
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
    rows = doc["metrics"]
    from spectra_cli.registry import shown
    from spectra_cli.run.summary import summary_format

    of = {"centred": " of the centred rows, the covariance",
          "uncentred": " of the uncentred rows, X^T X / n (WeightWatcher's convention)",
          "mixed": ", centred rows for some layers and uncentred for others",
          "change": " of each layer's change (W - W_base, or an adapter's s B A): its squared singular values / rows"
          }.get(str(doc.get("matrix")), "")
    print_columns(console, f"Metrics{of}: plain, and weighted by parameters", "metric", [r["label"] for r in rows],
                  [("layers", [str(r["layers"]) for r in rows]),
                   *((head, ["—" if r[k] is None else shown(r[k], summary_format(str(r["field"]))) for r in rows])
                     for head, k in (("mean", "mean"), ("median", "median"), ("weighted mean", "weighted_mean"),
                                     ("weighted median", "weighted_median")))])
    if doc.get("worst"):
        worst = doc["worst"]
        print_columns(console, "Furthest outside the alpha range", "item",
                      shorten_names([str(x["item"]) for x in worst]),
                      [(label("weightwatcher.alpha"), [get("weightwatcher.alpha").format(r["alpha"]) for r in worst]),
                       ("verdict", [str(r["verdict"]) for r in worst]),
                       ("outside by", [get("weightwatcher.alpha").format(r["distance"]) for r in worst])])
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
    from spectra_cli.documents import common_parts

    prefix, _ = common_parts(names)  # (the pages' rule: the folder the names share, never inside a name)
    if not prefix:
        return None, names
    return prefix, [n[len(prefix):] for n in names]


def shorten_names(names: Sequence[str]) -> list[str]:
    """Names without what they all share (see :func:`common_part`), so the part that differs shows."""
    prefix, rest = common_part(names)
    return rest if prefix is not None else list(names)


def print_item_checks(path: str, doc: dict[str, Any], console: Console) -> None:
    """``check`` on a results file: the failures, item by item, and the count."""
    items = doc["items"]
    failed = [i for i in items if not i["passed"]]
    left_out = len(doc.get("excluded") or [])
    title = (f"{path}: {len(items) - len(failed)} of {len(items)} item(s) pass"
             + (f" ({left_out} left out by --only/--exclude)" if left_out else ""))
    if not failed:  # (no empty table of failures)
        console.print(title)
        return
    t = Table(title=title, title_justify="left")
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
    console.print(f"{doc['kind']} page [bold]{doc['title']}[/]: {doc['items']} report(s), {doc['figures']} "
                  f"figure{'' if doc['figures'] == 1 else 's'}, "
                  f"{doc['bytes'] / 1e6:.2f} MB -> {doc['path']}")
