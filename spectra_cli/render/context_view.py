"""Tables and the plot of ``spectra sequence``."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table

from spectra_cli.metrics import label


def _num(x: Any, fmt: str = ".4g") -> str:
    return "—" if x is None else format(x, fmt)


def print_sequence(doc: dict[str, Any], console: Console) -> None:
    src = doc["source"]
    console.print(f"[bold]{src['path']}[/]: {src['layout']}; positions used {len(src['positions_used'])}, "
                  f"{src['windows_in_context']} windows in the context")
    t = Table("position", "tokens", label("fit.alpha"), label("rank.participation_ratio"),
              label("isotropy.mean_cosine"), title="Per position", title_justify="left")
    for row in doc["per_position"]:
        t.add_row(str(row["position"]), str(row["n"]), _num(row["alpha"], ".4f"), _num(row["participation_ratio"]),
                  _num(row["mean_cosine"], ".3f"))
    console.print(t)
    s = Table("spectrum", "n", "features", label("fit.alpha"), "window", label("rank.participation_ratio"),
              label("rank.entropy_rank"),
              title="Spectra", title_justify="left")
    parts = [("pooled tokens", doc["pooled"]), ("context", doc["context"])]
    parts += [(f"{name} control", c) for name, c in doc["controls"].items()]
    for name, part in parts:
        sp, fit, rank = part["spectrum"], part.get("fit"), part.get("rank") or {}
        s.add_row(name, str(sp["n_samples"]), str(sp["n_features"]), _num(fit["alpha"], ".4f") if fit else "—",
                  f"{fit['window'][0]}..{fit['window'][1]}" if fit else "—", _num(rank.get("participation_ratio")),
                  _num(rank.get("entropy_rank")))
    console.print(s)
    lag = doc["lag_energy"]
    lt = Table("lag", "energy", *(("shuffled",) if lag["shuffled"] else ()), title="Lag energy (cross-position "
               "blocks / diagonal blocks)", title_justify="left")
    for i, lg in enumerate(lag["lags"][:12]):
        lt.add_row(str(lg), _num(lag["data"][i]), *((_num(lag["shuffled"][i]),) if lag["shuffled"] else ()))
    console.print(lt)
    for w in doc["warnings"]:
        console.print(f"[yellow]warning:[/] {w}")
