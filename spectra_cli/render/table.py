"""Rich tables of a report for a terminal (stdout carries only the result)."""

from __future__ import annotations

from typing import Any

from rich.console import Console, Group
from rich.table import Table
from rich.text import Text

from spectra_cli import registry
from spectra_cli.errors import flag_text
from spectra_cli.registry import Metric, label


def _fmt(x: Any, digits: int = 4) -> str:
    if x is None:
        return "—"
    if isinstance(x, float):
        return f"{x:.{digits}g}"
    return str(x)


def _se(section: dict[str, Any], m: Metric) -> str:
    """`` ± SE`` of a metric whose section carries its standard error (``se``), else nothing."""
    se = (section.get("se") or {}).get(m.name)
    return f" ± {format(se, '.2g')} (SE)" if isinstance(se, int | float) and not isinstance(se, bool) else ""


def _errors_from(doc: dict[str, Any]) -> str | None:
    """Where the report's standard errors come from, in a line: the row groups (how many, the design effect and
    the rows' worth) or the first-order row model."""
    method = (doc.get("rank") or {}).get("se_method") or (doc.get("isotropy") or {}).get("se_method")
    if not isinstance(method, dict):
        return None
    if method.get("route") == "row groups":
        deff, n_eff = method.get("design_effect"), method.get("n_effective")
        worth = (f"; design effect {deff:.2g}: about {n_eff:,.0f} independent rows' worth"
                 if isinstance(deff, int | float) and isinstance(n_eff, int | float) else "")
        return f"standard errors: the spread between {method.get('groups')} contiguous row groups{worth}"
    if method.get("route") == "first order":
        return "standard errors: first order (independent rows of one law assumed: no row groups were kept)"
    return None


def _kv(title: str, rows: list[tuple[str, Any]]) -> Table:
    t = Table(title=title, title_justify="left", show_header=False, box=None, pad_edge=False)
    t.add_column(style="bold cyan", overflow="fold")  # (a label wraps at its spaces on a narrow terminal)
    t.add_column(overflow="fold")  # (a path longer than the line folds: never cut)
    for k, v in rows:
        t.add_row(k, _fmt(v))
    return t


def _spikes(spk: dict[str, Any]) -> Any:
    """``spectrum.spikes``: a line when none (or none tested), else a row per spike."""
    bulk = spk.get("bulk") or {}
    if spk.get("reason"):
        return _kv("Spikes above the bulk", [("not tested", flag_text(spk["reason"]))])
    about = (f"bulk: power law alpha {_fmt(bulk.get('alpha'), 3)} over ranks {bulk['window'][0]}..{bulk['window'][1]}, "
             f"edge {_fmt(bulk.get('edge'))}; detection threshold {_fmt(bulk.get('bbp_threshold'))} (a population "
             f"eigenvalue below it cannot stand out of the bulk at this n and d); test level {spk['level']:g}"
             ) if bulk.get("window") else ""
    if not spk["spikes"]:
        nxt = spk.get("next") or {}
        return _kv("Spikes above the bulk", [("none", f"rank {nxt.get('rank')} is in the bulk (p = "
                                                      f"{_fmt(nxt.get('p_value'), 3)})"), ("", about)])
    t = Table(title="Spikes above the bulk", title_justify="left", box=None, pad_edge=False, caption=about,
              caption_justify="left")
    for c in ("rank", "eigenvalue", "share", "p-value", "top features (loading)", "rogue"):
        t.add_column(c, justify="left" if c.startswith("top") else "right")
    for s in spk["spikes"]:
        feats = ", ".join(f"{f} ({v:.2f})" for f, v in zip(s["features"][:3], s["loadings"][:3], strict=False))
        p = _fmt(s["p_value"], 2) if s["p_value"] > 0 else "< 1e-300"
        t.add_row(str(s["rank"]), _fmt(s["eigenvalue"]), f"{s['share'] * 100:.2f}%", p,
                  feats or "—", "yes" if s["rogue"] else "")
    return t


def _source_and_spectrum(doc: dict[str, Any], top: int) -> list[Any]:
    """The report's source, its leading eigenvalues and the spectrum's ranks and floors (and its spikes)."""
    parts: list[Any] = []
    src, sp = doc["source"], doc["spectrum"]
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
        ("used", (f"n={used}, d={sp['n_features']}, n/d={sp['n_over_d']:.3g}" if sp["n_over_d"] is not None
                  else f"{sp['n_features']} eigenvalues given") + (f" [{', '.join(sel)}]" if sel else "")
         + (f"; weighted: effective n={src['n_effective']:.4g} (Kish), n/d={src['n_effective'] / sp['n_features']:.3g}"
            if isinstance(src.get("n_effective"), int | float) and sp.get("n_features") else "")),
        ("matrix", sp["definition"]),
        ("precision", "—" if src["format"] == "eigenvalues" else f"{sp['precision']} products, float64 accumulation"),
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
        ("k90 / k95 / k99", " / ".join(f"> {sp['top_k']['k']}" if sp[k] is None and sp.get("top_k") else _fmt(sp[k])
                                       for k in ("k90", "k95", "k99"))),
        ("numerical floor", f"{_fmt(sp['numerical_floor'])}  (eigenvalues at or below it are rounding error)"),
        ("numerical rank", (f"at least {sp['numerical_rank']}" if sp.get("top_k") else f"{sp['numerical_rank']}")
         + f" of {sp['n_features']}" + (" (only the leading eigenvalues computed)" if sp.get("top_k") else "")),
        ("usable rank", ("at least " if sp.get("top_k") else "")
         + f"{sp['usable_rank']} (sampling limit {sp['sampling_rank']}"
                        + (f"; past it {sp['near_null']} direction(s) with almost no variance, e.g. LayerNorm's"
                           if sp.get("near_null") else "") + ")"),
        *([("computed", f"the leading {tk['k']} of {sp['n_features']} (block Lanczos, Krylov dimension "
                        f"{tk['krylov_dimension']}, relative error bound {_fmt(tk['relative_error_bound'], 2)}); "
                        f"{flag_text(tk['requested'])}")] if (tk := sp.get("top_k")) else []),
    ]))
    if isinstance(spk := sp.get("spikes"), dict):
        parts.append(_spikes(spk))
    return parts


def _fit_tables(doc: dict[str, Any], width: int | None) -> list[Any]:
    """The power-law fits' table and its notes (errors, the bootstrap, the population, the model comparison)."""
    parts: list[Any] = []
    fits = doc.get("fits") or []
    if not fits:
        return parts
    from spectra_cli.render.screens import column_tables

    any_ci = any(f.get("ci") for f in fits)
    excluded = []
    cells: dict[str, list[str]] = {c: [] for c in ("model", "method", "alpha", "SE", "LS SE", "95% CI (bootstrap)",
                                                    "R^2", "resid RMS", "points")}
    for f in fits:
        alpha = f"{f['alpha']:.4f}"
        if f["model"] == "broken":
            alpha = f"{f['alpha']:.3f}/{f['alpha_2']:.3f} @{f['crossover']:.0f}"
        elif f["model"] == "log-corrected":
            alpha += f" (p={f['degree']})"
        ci = f["ci"]
        if ci and not ci["low"] <= f["alpha"] <= ci["high"]:
            excluded.append(f)
        for c, v in zip(cells, (f["model"], f["method"], alpha, _fmt(f.get("se"), 2), _fmt(f["stderr"], 2),
                                (f"{ci['low']:.4f}..{ci['high']:.4f}" if ci else "—") if any_ci else "",
                                f"{f['r2']:.4f}", _fmt(f["residual_rms"], 3), str(f["n_points"])), strict=True):
            cells[c].append(v)
    if all(f["n_points"] == f["window"][1] - f["window"][0] + 1 for f in fits):
        del cells["points"]  # every rank of each window was fitted: the window says how many (and 80 columns fit)
    shared = ""
    if len(set(cells["model"])) == 1 and len(set(cells["method"])) == 1:  # said once, in the title
        shared = f"; model {cells.pop('model')[0]}, method {cells.pop('method')[0]}"
    windows = [f"{f['window'][0]}..{f['window'][1]} {f['window_source']}" for f in fits]
    parts.extend(column_tables(width or 400, f"Power-law fits (lambda_j ~ j^-alpha over a window of ranks{shared})",
                               "window", windows, list(cells.items()), box=None))
    notes = [f"window: {fits[0]['window_reason']}", "SE: alpha's sampling standard error (its spread between "
             "samples of this size); LS SE: the least-squares scatter of the points about the line (no sampling "
             "error: it under-states it where the law follows the points, and measures the misfit where not)"]
    if (how := _errors_from(doc)) is not None:
        notes.append(how)
    for f in excluded:
        notes.append(f"ranks {f['window'][0]}..{f['window'][1]}: the bootstrap interval is bias-corrected (basic "
                     f"bootstrap) and excludes the fitted {f['alpha']:.4f}: the replicates put the sample slope "
                     f"{f['ci']['bias']:+.3g} off; " + ("the population exponent below accounts for the bias"
                                                         if f.get("population") else "for the population "
                                                         "exponent with an interval that accounts for the bias, "
                                                         "use --population"))
    for f in fits:
        pop = f.get("population")
        if pop:
            curve = pop.get("sampling_curve")
            said = (f"; the rows spread the spectrum {curve['spread_ratio']:.2f} times as much as the row model "
                    f"predicts (their sampling curve), which alone gives {pop['model_alpha']:.4f}" if curve
                    else "; from the row model alone (too few row groups for a sampling curve)")
            rows = pop.get("rows") or {}
            tails = rows.get("fourth_cumulant") or {}
            heavy = (f"; its interval counts the coordinates' heavy tails (excess kurtosis {rows['kappa']:.2f} "
                     f"± {tails['kappa_se']:.2g})" if rows.get("kappa") and tails.get("kappa_se") is not None
                     else "")
            notes.append(f"population exponent over {pop['window'][0]}..{pop['window'][1]}: {pop['alpha']:.4f} "
                         f"(95% {pop['ci'][0]:.4f}..{pop['ci'][1]:.4f}), against the sample slope "
                         f"{pop['naive_alpha']:.4f}{said}; the fitted population matches the spectrum to "
                         f"{pop['match_rms']:.2g} in log lambda (RMS){heavy}")
    models = doc.get("models")
    if models:
        # each alpha as the fit table shows it (the broken law's to 3 decimals, the others' to 4)
        cmp = ", ".join(f"{name} {m['alpha']:.{3 if name == 'broken' else 4}f} (BIC {m['bic']:.1f})"
                        for name, m in models["models"].items())
        best, headline = models["best"], fits[0].get("model") or "power-law"
        law = {"power-law": "power law", "log-corrected": "log-corrected law", "broken": "broken law"}
        quote = (f" (the alpha above is the {law.get(headline, headline)}'s; the {law.get(best, best)} describes "
                 f"this window better: quote its alpha with its name, or fit with --model {best} to make it the "
                 "headline)"
                 if best != headline else " (the alpha above)")
        notes.append(f"models on the first window: {cmp}; best by BIC: {best}{quote}")
    parts.append(Text("\n".join(notes), style="dim"))
    return parts


def _other_sections(doc: dict[str, Any]) -> list[Any]:
    """The density exponent, WeightWatcher's metrics, counting and capacity, and the shuffled control."""
    parts: list[Any] = []
    dens = doc.get("density")
    if dens:
        parts.append(_kv("Density exponent (p(lambda) ~ lambda^-a, Hill MLE, KS x_min)", [
            # alpha in the registry's format: WeightWatcher's alpha, shown below with --density, is this number
            (label("density.alpha"), f"{registry.get('density.alpha').format(dens['alpha'])} ± "
                                     f"{dens['stderr']:.2g} (SE at this x_min)"),
            (label("density.xmin"), f"{_fmt(dens['xmin'])} (on spectra's eigenvalue scale, 1/n)"),
            (label("density.n_tail"), dens["n_tail"]),
            (label("density.ks_distance"), dens["ks_distance"]),
            (label("density.rank_exponent_equivalent"), dens["rank_exponent_equivalent"]),
        ]))
    ww = doc.get("weightwatcher")
    if isinstance(ww, dict):
        cols: dict[str, Any] = ww["columns"] if isinstance(ww.get("columns"), dict) else {}
        entries = [m for m in registry.section("weightwatcher") if m.kind == "metric" and m.name in ww]
        rows_ww = [(m.label, m.format(ww.get(m.name))) for m in entries]
        rows_ww += [(label(f"weightwatcher.columns.{k}"), registry.get(f"weightwatcher.columns.{k}").format(cols[k]))
                    for k in ("num_spikes", "mp_softrank") if cols.get(k) is not None]
        lo, hi = ww.get("alpha_range") or (None, None)
        parts.append(_kv(f"WeightWatcher (its metrics on the eigenvalues of W^T W; healthy WW alpha {lo:g}..{hi:g})"
                         if lo is not None else "WeightWatcher (its metrics on the eigenvalues of W^T W)", rows_ww))
    cap = doc.get("capacity")
    if cap:
        rows_ = [(f"N(eps = {c['eps']:g})", c["N"]) for c in cap["counting"]]
        rows_ += [(f"N(tau = {c['tau']:g})", c["N"]) for c in cap["capacity"]]
        parts.append(_kv("Counting and capacity (N(eps) = #{lambda >= eps}, N(tau) = sum lambda/(lambda+tau))",
                         rows_))
    ctrl = doc.get("control")
    if ctrl:
        meets = ctrl["meets_at_rank"]
        parts.append(_kv("Shuffled control (each column permuted)", [
            ("meets the data at rank", meets if meets is not None else "never"),
            ("rows", f"{ctrl['rows']}" + (" (uniform sample)" if ctrl["subsampled"] else "")),
        ]))
    return parts


def _rank_and_isotropy(doc: dict[str, Any]) -> list[Any]:
    """The effective ranks (with their errors or bounds), and the isotropy, before and after a whitening."""
    parts: list[Any] = []
    rank = doc.get("rank")
    if rank:
        bounds, exact = rank.get("bounds") or {}, rank.get("exactness") or {}

        def shown(m: Metric) -> str:
            if m.name in bounds:
                lo, hi = bounds[m.name]
                return f"{m.format(lo)} .. {m.format(hi)} ({exact.get(m.name, 'bounded')})"
            status = exact.get(m.name, "exact")
            return m.format(rank[m.name]) + _se(rank, m) + ("" if status == "exact" else f" ({status})")

        parts.append(_kv("Effective rank", [(m.label, shown(m)) for m in registry.section("rank", "table")
                                            if rank.get(m.name) is not None or m.name in bounds or m.name in exact]))
    sp = doc["spectrum"]
    iso = doc.get("isotropy")
    wh = doc.get("whitening")
    if iso and wh:
        after = wh["isotropy_after"]
        it = Table(title=f"Whitening: {wh['method']} (k={wh['k']}, eps={wh['eps']:g}, {wh['d_in']} -> {wh['d_out']})",
                   title_justify="left", box=None, pad_edge=False)
        for c in ("", "before", "after"):
            it.add_column(c, justify="left" if not c else "right")
        for m in registry.section("isotropy", "table"):
            if iso.get(m.name) is not None or after.get(m.name) is not None:
                it.add_row(m.label, m.format(iso.get(m.name)), m.format(after.get(m.name)))
        sa = wh["spectrum_after"]
        it.add_row("lambda_1", _fmt(sp["eigenvalues"][0]), _fmt(sa["eigenvalues"][0]))
        it.add_row("lambda_min resolved", _fmt(sp["eigenvalues"][sp["numerical_rank"] - 1]),
                   _fmt(sa["eigenvalues"][max(sa["numerical_rank"] - 1, 0)]))
        parts.append(it)
        o = wh["output"]
        parts.append(Text(f"wrote {o['rows']} rows to {o['path']} ({o['format']}, {o['dtype']})"
                          + (f"; transform saved to {wh['saved_to']}" if wh["saved_to"] else ""), style="dim"))
    elif iso:
        rows_ = [(m.label, m.format(iso[m.name]) + _se(iso, m)) for m in registry.section("isotropy", "table")
                 if iso.get(m.name) is not None]
        if iso.get("zero_rows"):
            rows_.append(("zero rows (excluded)", iso["zero_rows"]))
        if iso.get("scale"):
            rows_.append(("scale of Z(c)", f"s = {_fmt(iso['scale_value'])} (--scale {iso['scale']}: "
                                            + ("the std of all entries)" if iso["scale"] == "seed" else "1)")))
        parts.append(_kv("Isotropy", rows_))
    return parts


def report_renderable(doc: dict[str, Any], *, top: int = 10, width: int | None = None) -> Group:
    """A report as the terminal shows it, section by section."""
    parts: list[Any] = [*_source_and_spectrum(doc, top), *_fit_tables(doc, width), *_other_sections(doc),
                        *_rank_and_isotropy(doc)]
    if doc["warnings"]:
        warn = Text("Warnings\n", style="bold yellow")
        for line in doc["warnings"]:
            warn.append(f"  • {flag_text(line)}\n")
        parts.append(warn)
    parts.append(Text(f"total {doc['timings'].get('total_s', 0):.2f} s · {doc['options']['precision']}", style="dim"))
    return Group(*parts)


def print_report(doc: dict[str, Any], console: Console) -> None:
    console.print(report_renderable(doc, width=console.width))


class _NoTrailingSpaces:
    """A text stream writing to ``out`` with each line's trailing spaces left out (a table's cells are padded
    to its width: in a log every line would end in spaces)."""

    def __init__(self, out: Any) -> None:
        self.out, self.pending = out, ""

    def write(self, text: str) -> int:
        lines = (self.pending + text).split("\n")
        self.pending = lines.pop()
        if lines:
            self.out.write("".join(line.rstrip(" ") + "\n" for line in lines))
        return len(text)

    def flush(self) -> None:
        if self.pending:
            self.out.write(self.pending)
            self.pending = ""
        self.out.flush()

    def isatty(self) -> bool:
        return False


class _Console(Console):
    """A console whose closed stdout is the command line's broken pipe (exit 141, quietly, as with ``--json``):
    rich's own answer is exit 1, which a CI reads as a failed check."""

    def on_broken_pipe(self) -> None:
        raise BrokenPipeError


def console_for() -> Console:
    """A console for stdout: the terminal's width on a terminal; in a log or a pipe, ``COLUMNS`` where set, else
    as wide as the tables need (nothing is cut), without colour codes or trailing spaces."""
    import os
    import sys

    if sys.stdout.isatty():
        return _Console()
    text = os.environ.get("COLUMNS", "").strip()
    width = int(text) if text.isdigit() and 40 <= int(text) <= 10_000 else 400
    return _Console(file=_NoTrailingSpaces(sys.stdout), width=width, no_color=True, highlight=False,
                   soft_wrap=width == 400)
