"""The CI-facing commands: ``check``, ``batch``, ``compare``, ``trend``.

Registered on the one Typer app of :mod:`spectra_cli.cli`; each parses its options, calls the
library and hands the result to a renderer.
"""

from __future__ import annotations

import sys
from typing import Annotated, Any

import typer

from spectra_cli.cli import (
    EXIT_CHECK,
    BlockRows,
    Column,
    Ddof,
    Json,
    Key,
    Precision,
    Rows,
    Sample,
    Seed,
    Uncentered,
    app,
)

FitWindow = Annotated[list[str] | None, typer.Option("--window", help="Fit window K1:K2 or auto (repeatable).")]
FitMethod = Annotated[str, typer.Option("--method", help="ols | logspaced | inv-rank.")]
FitModel = Annotated[str, typer.Option("--model", help="power-law | log-corrected | broken.")]


@app.command()
def check(
    path: Annotated[str, typer.Argument(help="Input matrix, or a spectra JSON report (.json).", show_default=False)],
    require: Annotated[list[str] | None, typer.Option("--require", help="'FIELD OP VALUE', 'FIELD between LO HI' "
                                                      "or 'FIELD == VALUE +- TOL' (repeatable).")] = None,
    config: Annotated[str | None, typer.Option("--config", help="spectra.toml with a [check] table (and [fit] "
                                               "options).")] = None,
    baseline: Annotated[str | None, typer.Option("--baseline", help="A previous JSON report to compare with.")
                        ] = None,
    max_change: Annotated[list[str] | None, typer.Option("--max-change", help="FIELD=LIMIT or FIELD=PCT% against "
                                                         "the baseline (repeatable).")] = None,
    window: FitWindow = None, method: FitMethod = "ols", model: FitModel = "power-law",
    uncentered: Uncentered = False, key: Key = None, column: Column = None, rows: Rows = None,
    sample: Sample = None, seed: Seed = 0, precision: Precision = "float64", json: Json = False,
) -> None:
    """Evaluate thresholds on a report: exit 0 when all pass, 1 when any fails, 2 on bad input or spec."""
    from spectra_cli.checks import evaluate, load_config, parse_max_change, parse_require
    from spectra_cli.compare import as_report, load_report

    cfg = load_config(config) if config else {"require": [], "baseline": None, "max_change": [], "fit": {}}
    checks = [parse_require(r) for r in [*cfg["require"], *(require or [])]]
    checks += [parse_max_change(m) for m in [*cfg["max_change"], *(max_change or [])]]
    if not checks:
        from spectra_cli.errors import OptionError

        raise OptionError("check needs at least one --require or --max-change (or a [check] table via --config).")
    base_path = baseline or cfg["baseline"]
    base = load_report(base_path) if base_path else None
    fit_opts = _fit_config(cfg["fit"], config)
    fit_opts.update({k: v for k, v in dict(window=window, key=key, column=column, rows=rows, sample=sample).items()
                     if v is not None})
    if method != "ols" or "method" not in fit_opts:
        fit_opts["method"] = method
    if model != "power-law" or "model" not in fit_opts:
        fit_opts["model"] = model
    fit_opts.setdefault("seed", seed)
    fit_opts.setdefault("precision", precision)
    if uncentered:
        fit_opts["centered"] = False
    doc = as_report(path, fit_opts)
    verdicts = evaluate(doc, checks, base)
    passed = all(v.passed for v in verdicts)
    doc["checks"] = {"passed": passed, "baseline": base_path, "results": [v.to_dict() for v in verdicts]}
    if json:
        from spectra_cli.render.json import dumps
        from spectra_cli.results import json_safe

        sys.stdout.write(dumps(json_safe(doc)) + "\n")
    else:
        from rich.console import Console

        from spectra_cli.render.summaries import print_checks

        print_checks(path, verdicts, Console())
    if not passed:
        raise typer.Exit(EXIT_CHECK)


_FIT_KEYS = {"window", "method", "model", "degree", "uncentered", "ddof", "precision", "density", "rows", "sample",
             "seed", "column", "key", "block_rows", "partition_isotropy", "isoscore"}


def _fit_config(table: dict[str, Any], path: str | None) -> dict[str, Any]:
    from spectra_cli.errors import OptionError

    unknown = sorted(set(table) - _FIT_KEYS)
    if unknown:
        raise OptionError(f"{path}: unknown key(s) in [fit]: {', '.join(unknown)} "
                          f"(allowed: {', '.join(sorted(_FIT_KEYS))}).")
    out = dict(table)
    if "uncentered" in out:
        out["centered"] = not out.pop("uncentered")
    return out


@app.command()
def batch(
    paths: Annotated[list[str], typer.Argument(help="Files, directories, globs; .safetensors give one item per "
                                               "2-D tensor.", show_default=False)],
    jsonl: Annotated[str | None, typer.Option("--jsonl", help="Write one JSON report per line to this file.")
                     ] = None,
    workers: Annotated[int, typer.Option("--workers", help="Worker processes.")] = 1,
    tensors: Annotated[str | None, typer.Option("--tensors", help="Regex on tensor names (re.search).")] = None,
    resume: Annotated[bool, typer.Option("--resume", help="Skip items already in --jsonl with the same "
                                         "fingerprint.")] = False,
    window: FitWindow = None, method: FitMethod = "ols", model: FitModel = "power-law",
    uncentered: Uncentered = False, ddof: Ddof = 1, precision: Precision = "float64",
    density: Annotated[bool, typer.Option("--density", help="Also the density exponent (WeightWatcher's alpha).")
                       ] = False,
    block_rows: BlockRows = 8192,
    json: Annotated[bool, typer.Option("--json", help="Print JSON Lines on stdout instead of the summary table.")
                    ] = False,
) -> None:
    """Analyse many matrices or checkpoint tensors in parallel: JSON Lines and a summary table."""
    from spectra_cli.batch import done_items, enumerate_items, run_batch
    from spectra_cli.errors import OptionError
    from spectra_cli.render.json import dumps

    if resume and not jsonl:
        raise OptionError("--resume needs --jsonl FILE (the results to resume from).")
    items, notes = enumerate_items(paths, tensors)
    previous = done_items(jsonl) if (jsonl and resume) else {}
    todo = [it for it in items if previous.get(it.name) != it.fingerprint]
    skipped = len(items) - len(todo)
    options = dict(window=window, method=method, model=model, centered=not uncentered, ddof=ddof,
                   precision=precision, density=density, block_rows=block_rows)
    for note in notes:
        sys.stderr.write(f"note: {note}\n")
    if skipped:
        sys.stderr.write(f"note: --resume skips {skipped} item(s) already in {jsonl}\n")
    out = open(jsonl, "a" if resume else "w", encoding="utf-8") if jsonl else None  # noqa: SIM115
    results: list[dict[str, Any]] = []
    try:
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn

        with Progress("[progress.description]{task.description}", BarColumn(), MofNCompleteColumn(),
                      TimeElapsedColumn(), console=Console(stderr=True), transient=True,
                      disable=not sys.stderr.isatty()) as progress:
            task = progress.add_task("batch", total=len(todo))
            for doc in run_batch(todo, options, workers=workers):
                line = dumps(doc, indent=None)
                if out is not None:
                    out.write(line + "\n")
                    out.flush()
                if json:
                    sys.stdout.write(line + "\n")
                    sys.stdout.flush()
                results.append(doc)
                progress.advance(task)
    finally:
        if out is not None:
            out.close()
    failed = [r for r in results if "error" in r]
    if not json:
        from rich.console import Console

        from spectra_cli.render.summaries import print_batch

        print_batch(results, [it.name for it in items], skipped=skipped, jsonl=jsonl, console=Console())
    for r in failed:
        sys.stderr.write(f"error: {r['item']}: {r['error']}\n")
    if failed:
        raise typer.Exit(EXIT_CHECK)


@app.command()
def compare(
    a: Annotated[str, typer.Argument(help="A report (.json) or an input.", show_default=False)],
    b: Annotated[str, typer.Argument(help="Another report (.json) or input.", show_default=False)],
    window: FitWindow = None, method: FitMethod = "ols", uncentered: Uncentered = False, json: Json = False,
) -> None:
    """Two reports (or inputs) side by side: each metric, the difference and the relative difference."""
    from spectra_cli.compare import as_report, compare_doc
    from spectra_cli.compare import compare as compare_reports

    opts: dict[str, Any] = {"method": method, "centered": not uncentered}
    if window:
        opts["window"] = window
    da, db = as_report(a, opts), as_report(b, opts)
    rows = compare_reports(da, db)
    if json:
        from spectra_cli.render.json import dumps

        sys.stdout.write(dumps(compare_doc(da, db, rows)) + "\n")
        return
    from rich.console import Console

    from spectra_cli.render.summaries import print_compare

    print_compare(a, b, rows, Console())


@app.command()
def trend(
    jsonl: Annotated[str, typer.Argument(help="JSON Lines from spectra batch.", show_default=False)],
    metric: Annotated[list[str] | None, typer.Option("--metric", help="Report field, e.g. fit.alpha (repeatable).")
                      ] = None,
    step_regex: Annotated[str | None, typer.Option("--step-regex", help="Regex whose group 1 is the step.")] = None,
    plot: Annotated[str | None, typer.Option("--plot", help="Write the metric(s) against step (.png/.svg/.pdf).")
                    ] = None,
    json: Json = False,
) -> None:
    """Metrics of a batch against the step number in the item names (table, JSON, plot)."""
    from spectra_cli.trend import load_points, plot_trend, trend_doc

    metrics = list(metric or [])
    if plot is not None:
        from spectra_cli.render.plot import check_plot_target

        check_plot_target(plot)
    points, notes = load_points(jsonl, metrics, step_regex)
    if plot is not None:
        plot_trend(points, metrics, plot)
    for note in notes:
        sys.stderr.write(f"note: {note}\n")
    if json:
        from spectra_cli.render.json import dumps

        sys.stdout.write(dumps(trend_doc(points, metrics, notes)) + "\n")
        return
    from rich.console import Console

    from spectra_cli.render.summaries import print_trend

    print_trend(jsonl, points, metrics, Console())
