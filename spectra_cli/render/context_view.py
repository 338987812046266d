"""Tables and the plot of ``spectra sequence``."""

from __future__ import annotations

from typing import Any

from rich.console import Console

from spectra_cli.registry import find, label, per_position, shown, view


def _num(x: Any, fmt: str = ".4g") -> str:
    return "—" if x is None else format(x, fmt)


def _report_field(name: str) -> str:
    """The report field whose format a per-position number takes (``alpha`` -> ``fit.alpha``): the registry's
    number of that name outside the sequence report."""
    entry = next((m for m in view("batch") if m.name == name), None)
    return entry.path if entry is not None else name


def _metric(x: Any, field: str) -> str:
    """A metric's value in its registry format, as every other screen shows it."""
    entry = find(field)
    return "—" if x is None else shown(float(x), entry.fmt if entry is not None else ".4g")


def print_sequence(doc: dict[str, Any], console: Console) -> None:
    from rich.text import Text

    from spectra_cli.errors import flag_text
    from spectra_cli.render.screens import print_columns

    src = doc["source"]
    console.print(Text(f"{src['path']}: {src['layout']}; positions used {len(src['positions_used'])}, "
                       f"{src['windows_in_context']} windows in the context"))
    rows = doc["per_position"]
    print_columns(console, "Per position", "position", [str(r["position"]) for r in rows], [
        ("tokens", [str(r["n"]) for r in rows]),
        *((m.label.removesuffix(" (position)"), [_metric(r.get(m.name), field) for r in rows])
          for m in per_position() for field in (_report_field(m.name),))])
    parts = [("pooled tokens", doc["pooled"]), ("context", doc["context"])]
    parts += [(f"{name} control", c) for name, c in doc["controls"].items()]
    fits = [p.get("fit") for _, p in parts]
    ranks = [p.get("rank") or {} for _, p in parts]
    print_columns(console, "Spectra", "spectrum", [name for name, _ in parts], [
        ("n", [str(p["spectrum"]["n_samples"]) for _, p in parts]),
        ("features", [str(p["spectrum"]["n_features"]) for _, p in parts]),
        (label("fit.alpha"), [_metric(f["alpha"], "fit.alpha") if f else "—" for f in fits]),
        ("window", [f"{f['window'][0]}..{f['window'][1]}" if f else "—" for f in fits]),
        *((m.label, [_metric(r.get(m.name), m.path) for r in ranks]) for m in view("headline")
          if m.path.startswith("rank."))])
    lag = doc["lag_energy"]
    lags = range(min(12, len(lag["lags"])))
    print_columns(console, "Lag energy (cross-position blocks / diagonal blocks)", "lag",
                  [str(lag["lags"][i]) for i in lags],
                  [("energy", [_num(lag["data"][i]) for i in lags]),
                   *([("shuffled", [_num(lag["shuffled"][i]) for i in lags])] if lag["shuffled"] else [])])
    for w in doc["warnings"]:
        console.print(Text.assemble(("warning:", "yellow"), " ", flag_text(w)))
