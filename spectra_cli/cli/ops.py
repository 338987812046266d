"""The CI-facing commands: check, batch, compare, trend. Each parses its options, calls the
library and hands the result to a renderer."""

from __future__ import annotations

import sys
from typing import Annotated, Any

import typer

from spectra_cli.analysis.fit_options import FitKeywords
from spectra_cli.cli.app import EXIT_CHECK, app, emit
from spectra_cli.cli.flags import (
    BlockRows,
    Column,
    ConnectTimeout,
    Ddof,
    Json,
    Key,
    Plot,
    Pool,
    Positions,
    Rows,
    Sample,
    Threads,
    Title,
    Uncentered,
    fit_options,
)
from spectra_cli.errors import flag_text
from spectra_cli.sources import formats

AllowMismatch = Annotated[bool, typer.Option("--allow-option-mismatch", help="Compare reports made with different "
                                             "number-changing options (stated in the output).")]


@app.command()
@fit_options()
def check(
    path: Annotated[str, typer.Argument(metavar="PATH", help="Input matrix, a spectra JSON report (.json; - reads "
                                        "it from stdin), or a batch's results .jsonl (every item checked).",
                                        show_default=False)],
    require: Annotated[list[str] | None, typer.Option("--require", metavar="CHECK", help="'FIELD OP VALUE', "
                                                      "'FIELD between LO HI' or 'FIELD == VALUE +- TOL' "
                                                      "(repeatable).")] = None,
    config: Annotated[str | None, typer.Option("--config", metavar="FILE.toml", help="spectra.toml with a [check] "
                                               "table (and [fit] options).")] = None,
    baseline: Annotated[str | None, typer.Option("--baseline", metavar="REPORT.json",
                                                 help="A previous JSON report to compare with.")] = None,
    max_change: Annotated[list[str] | None, typer.Option("--max-change", metavar="FIELD=LIMIT", help="FIELD=LIMIT "
                                                         "or FIELD=PCT% against the baseline (repeatable).")] = None,
    uncentered: Annotated[bool | None, typer.Option("--uncentered", help="Second moment X^T X / n instead of the "
                                                    "covariance.", show_default=False)] = None,
    key: Key = None, column: Column = None, rows: Rows = None, sample: Sample = None,
    seed: Annotated[int | None, typer.Option("--seed", metavar="S", help="Seed of --sample.")] = None,
    precision: Annotated[str | None, typer.Option("--precision", metavar="float64|float32",
                                                  help="Arithmetic of the products (default float64).")] = None,
    allow_option_mismatch: AllowMismatch = False,
    only: Annotated[str | None, typer.Option("--only", metavar="REGEX", help="A batch's results: check only the "
                                             "items whose whole name this matches (searched, RE2).")] = None,
    exclude: Annotated[str | None, typer.Option("--exclude", metavar="REGEX", help="A batch's results: leave out "
                                                "the items whose whole name this matches (wins over --only).")] = None,
    json: Json = False,
    *,
    fitting: FitKeywords,
) -> None:
    """Evaluate thresholds on a report: exit 0 when all pass, 1 when any fails, 2 on bad input or a bad check.

    Flags win over the config's [fit] table, which wins over the defaults. A null value (not computed, or not
    finite) fails its check: leave such an item out with --exclude.

    \b
    Examples:
      spectra check acts.npy --require "fit.alpha between 0.3 1.5" --require "rank.participation_ratio >= 50"
      spectra check report.json --config spectra.toml --baseline last_good.json --max-change fit.alpha=0.05
      spectra check weights.jsonl --require "fit.alpha < 1" --exclude token_type_embeddings
    """
    from spectra_cli.render.screens import print_checks, print_item_checks
    from spectra_cli.run.check import check as run_check

    result = run_check(path, require=require, config=config, baseline=baseline, max_change=max_change,
                       centered=None if uncentered is None else not uncentered, key=key, column=column, rows=rows,
                       sample=sample, seed=seed, precision=precision, allow_option_mismatch=allow_option_mismatch,
                       only=only, exclude=exclude, **fitting)
    for m in result.option_mismatch:
        sys.stderr.write(f"warning: the baseline was made with other options ({m}); --allow-option-mismatch\n")
    for note in result.notes:
        sys.stderr.write(f"note: {flag_text(note)}\n")
    if result.items:
        emit(result.to_dict(), json, lambda d, console: print_item_checks(path, d, console))
    else:  # a saved report's warnings were said when it was made
        emit(result.to_dict(), json, lambda d, console: print_checks(path, list(result.verdicts), console),
             say_warnings=result.computed)
    if not result.passed:
        raise typer.Exit(EXIT_CHECK)


@app.command()
@fit_options()
def batch(
    paths: Annotated[list[str], typer.Argument(metavar="PATH...", help="Files, directories, globs; .safetensors "
                                               "give one item per 2-D tensor.", show_default=False)],
    jsonl: Annotated[str | None, typer.Option("--jsonl", metavar="FILE", help="Write one JSON report per line to "
                                              "this file (locked while the batch runs).")] = None,
    workers: Annotated[int | None, typer.Option("--workers", metavar="N", show_default=False, help="Worker "
                                                "processes (default: 1; every core on a checkpoint of matrices 3,072 "
                                                "wide or more).")] = None,
    tensors: Annotated[str | None, typer.Option("--tensors", metavar="REGEX",
                                                help="Regex on tensor names (re.search).")] = None,
    base: Annotated[str | None, typer.Option("--base", metavar="BASE", help="A base checkpoint: analyse each "
                                             "layer's change W - W_base (matched by name; uncentred: its "
                                             "squared singular values), with the base's and this checkpoint's own "
                                             "metrics side by side.")] = None,
    resume: Annotated[bool, typer.Option("--resume", help="Skip items already in --jsonl with the same "
                                         "fingerprint; repair a cut last line, retry failed items.")] = False,
    overwrite: Annotated[bool, typer.Option("--overwrite", help="Replace the results already in --jsonl (without "
                                            "it or --resume, an existing results file is refused).")] = False,
    uncentered: Uncentered = False, ddof: Ddof = 1,
    precision: Annotated[str | None, typer.Option("--precision", metavar="float64|float32", show_default=False,
                                                  help="Arithmetic of the products (and of the eigensolver from d = "
                                                  "3,072). Default: float64, but float32 on a checkpoint of bf16 or "
                                                  "float16 matrices 3,072 wide or more.")] = None,
    block_rows: BlockRows = None, positions: Positions = None, pool: Pool = "tokens",
    engine: Annotated[str, typer.Option("--engine", metavar="local|dask", help="Worker processes here (local) or "
                                        "Dask tasks: --workers N starts a LocalCluster, --scheduler uses a "
                                        "cluster (the 'dask' extra).")] = "local",
    scheduler: Annotated[str | None, typer.Option("--scheduler", metavar="ADDRESS", help="An existing Dask "
                                                  "scheduler (--engine dask).")] = None,
    connect_timeout: ConnectTimeout = 5.0,
    summary: Annotated[bool, typer.Option("--summary", help="A model-level summary: layers per verdict, mean and "
                                          "median of each metric (plain and parameter-weighted), the worst "
                                          "layers. PATH may be a results .jsonl.")] = False,
    verbose: Annotated[bool, typer.Option("--verbose", help="List every skipped tensor.")] = False,
    allow_option_mismatch: AllowMismatch = False,
    threads: Threads = None,
    json: Annotated[bool, typer.Option("--json", help="Print JSON Lines on stdout instead of the summary table.")
                    ] = False,
    *,
    fitting: FitKeywords,
) -> None:
    """Analyse many matrices or checkpoint tensors in parallel: JSON Lines and a summary table.

    \b
    Examples:
      spectra batch runs/*/step_*.npy --jsonl results.jsonl --workers 2
      spectra batch checkpoint.safetensors --tensors 'attn|mlp' --jsonl weights.jsonl --resume
      spectra batch finetuned/ --base base-model/ --tensors 'query|value' --jsonl changes.jsonl
    """
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn, TimeRemainingColumn

    from spectra_cli.errors import OptionError
    from spectra_cli.jsonio import dumps
    from spectra_cli.run.batch import batch as run_batch

    if any(formats.JSONL.matches(p) for p in paths) and not summary:
        raise OptionError("a .jsonl PATH is a results file: summarise it with --summary (and give only results "
                          "files).")
    with Progress("[progress.description]{task.description}", BarColumn(), MofNCompleteColumn(),
                  TimeElapsedColumn(), "left", TimeRemainingColumn(), console=Console(stderr=True), transient=True,
                  disable=not sys.stderr.isatty()) as bar:
        task = bar.add_task("batch", total=None)

        def on_result(doc: dict[str, Any]) -> None:
            if json:
                sys.stdout.write(dumps(doc, indent=None) + "\n")
                sys.stdout.flush()

        result = run_batch(paths, jsonl=jsonl, resume=resume, overwrite=overwrite, workers=workers, tensors=tensors,
                           base=base, centered=False if uncentered else None, ddof=ddof, precision=precision,
                           block_rows=block_rows, positions=positions, pool=pool, engine=engine, scheduler=scheduler,
                           connect_timeout=connect_timeout, verbose=verbose,
                           allow_option_mismatch=allow_option_mismatch, on_result=on_result,
                           progress=lambda done, total: bar.update(task, completed=done, total=total), threads=threads,
                           **fitting)
    if not result.items:  # results files, summarised
        _print_summary(result.summary(), json)
        return
    for note in result.notes:
        sys.stderr.write(f"note: {flag_text(note)}\n")
    if result.skip_note:
        sys.stderr.write(f"note: {result.skip_note}\n")
    if verbose:
        for sk in result.skipped:
            sys.stderr.write(f"note: skipped {sk['item']}: {sk['skipped']}\n")
    warned = [r for r in result.results if "skipped" not in r and "error" not in r and r.get("warnings")]
    if warned:  # each report keeps its warnings; the table has no room for them
        analysed = sum(1 for r in result.results if "skipped" not in r and "error" not in r)
        where = f"the lines of {jsonl}" if jsonl else "each report (--json prints them)"
        sys.stderr.write(f"note: {len(warned)} of {analysed} item(s) have warnings, kept in {where}"
                         + ("" if verbose else "; --verbose names the items") + "\n")
        if verbose:
            for r in warned:  # each warning whole, as fit prints them
                sys.stderr.write(f"note: {r['item']}:\n"
                                 + "".join(f"  warning: {flag_text(w)}\n" for w in r["warnings"]))
    if resume:
        added = sum(1 for r in result.results if "skipped" not in r)
        sys.stderr.write(f"note: --resume kept {result.resumed} item(s) already in {jsonl}, retried "
                         f"{result.retried} that had failed, added {added}\n")
    for m in result.option_mismatch[:1]:
        sys.stderr.write(f"warning: lines already in {jsonl} were made with other options ({m}); "
                         "--allow-option-mismatch\n")
    if jsonl:
        from spectra_cli.render.figures import wrote

        wrote(jsonl)
    if not json:
        from spectra_cli.render.screens import print_batch
        from spectra_cli.render.table import console_for

        print_batch(list(result.results), skipped=result.resumed, jsonl=jsonl,
                    console=console_for(), convention=result.convention)
    if summary:
        _print_summary(result.summary(), json)
    for r in result.failed:
        sys.stderr.write(f"error: {r['item']}: {r['error']}\n")
    if result.failed:
        raise typer.Exit(EXIT_CHECK)


def _print_summary(doc: dict[str, Any], as_json: bool) -> None:
    if as_json:
        from spectra_cli.jsonio import dumps

        sys.stdout.write(dumps(doc, indent=None) + "\n")
        return
    from spectra_cli.render.screens import print_model_summary
    from spectra_cli.render.table import console_for

    print_model_summary(doc, console_for())


@app.command()
@fit_options()
def compare(
    a: Annotated[str, typer.Argument(metavar="A", help="A report (.json) or an input.", show_default=False)],
    b: Annotated[str, typer.Argument(metavar="B", help="Another report (.json) or input.", show_default=False)],
    uncentered: Uncentered = False, allow_option_mismatch: AllowMismatch = False,
    fdr: Annotated[float, typer.Option("--fdr", metavar="Q", help="False discovery rate of the changes marked "
                                       "significant (Benjamini-Hochberg over every field with a standard "
                                       "error).")] = 0.05,
    json: Json = False,
    *,
    fitting: FitKeywords,
) -> None:
    """Two reports (or inputs) side by side: each metric, the difference and the relative difference.

    \b
    Examples:
      spectra compare old.json new.json
      spectra compare step_100.npy step_200.npy --window 11:200 --json
    """
    from spectra_cli.render.screens import print_compare
    from spectra_cli.run.compare import compare as run_compare

    result = run_compare(a, b, centered=False if uncentered else None, allow_option_mismatch=allow_option_mismatch,
                         fdr=fdr,
                         **fitting)
    for m in result.option_mismatch:
        sys.stderr.write(f"warning: the reports were made with other options ({m}); --allow-option-mismatch\n")
    emit(result.to_dict(), json, lambda d, console: print_compare(a, b, list(result.rows), console))


@app.command()
def trend(
    paths: Annotated[list[str], typer.Argument(metavar="RESULTS.jsonl...", help="JSON Lines from spectra batch; "
                                               "several results files are the steps of a run (as for spectra "
                                               "report).", show_default=False)],
    metric: Annotated[list[str] | None, typer.Option("--metric", metavar="FIELD", help="Report field, e.g. "
                                                     "fit.alpha (repeatable; default: the headline metrics the "
                                                     "reports hold).")] = None,
    step_regex: Annotated[str | None, typer.Option("--step-regex", metavar="REGEX",
                                                   help="Regex whose group 1 is the step.")] = None,
    plot: Plot = None,
    title: Title = None,
    json: Json = False,
) -> None:
    """Metrics of a batch against the step number in the item names (table, JSON, plot).

    \b
    Examples:
      spectra trend results.jsonl
      spectra trend results.jsonl --metric fit.alpha --plot alpha.png
      spectra trend results.jsonl --metric rank.participation_ratio --step-regex 'ckpt-(\\d+)' --json
      spectra trend runs/step_*/results.jsonl --metric fit.alpha
    """
    from spectra_cli.render.figures import plot_trend
    from spectra_cli.run.trend import trend as run_trend

    metrics = list(metric or [])
    from spectra_cli.render.figures import check_plot_options

    check_plot_options(plot, title)
    result = run_trend(paths, metric=metrics, step_regex=step_regex)
    metrics = list(result.metrics)
    if plot is not None:
        plot_trend(list(result.points), metrics, plot, title)
    for note in result.notes:
        sys.stderr.write(f"note: {flag_text(note)}\n")
    from spectra_cli.render.screens import print_trend

    emit(result.to_dict(), json, lambda d, console: print_trend(", ".join(paths), list(result.points), metrics,
                                                               console),
         written=(plot,) if plot else ())
    if plot is not None:
        from spectra_cli.render.figures import wrote

        wrote(plot)


@app.command()
def report(
    paths: Annotated[list[str], typer.Argument(metavar="PATH...", help="Batch results (.jsonl) or JSON reports "
                                               "(.json from --json); several results files are the steps of a run.",
                                               show_default=False)],
    out: Annotated[str, typer.Option("--out", "-o", metavar="FILE.html", help="The page to write (one "
                                     "self-contained HTML file).", show_default=False)],
    kind: Annotated[str, typer.Option("--kind", metavar="KIND", help="auto | model (a checkpoint's layers) | run "
                                      "(steps of a training run) | report.")] = "auto",
    title: Annotated[str | None, typer.Option("--title", metavar="TEXT", help="The page's title (default: the "
                                              "data's name).")] = None,
    worst: Annotated[int, typer.Option("--worst", metavar="N", help="How many of the worst layers get their ESD "
                                       "figure.")] = 5,
    step_regex: Annotated[str | None, typer.Option("--step-regex", metavar="REGEX",
                                                   help="Regex whose group 1 is the step (runs in one file).")] = None,
    json: Json = False,
) -> None:
    """One self-contained HTML page (no network) for a checkpoint, a training run or a report.

    \b
    Examples:
      spectra batch model.safetensors --density --uncentered --jsonl w.jsonl
      spectra report w.jsonl -o model.html
      spectra report runs/*/results.jsonl -o run.html
      spectra fit acts.npy --json > fit.json && spectra report fit.json -o fit.html
    """
    from spectra_cli.render.figures import wrote
    from spectra_cli.render.progress import LazyProgress
    from spectra_cli.run.report import report as run_report

    with LazyProgress("drawing the figures") as progress:
        page = run_report(paths, out=out, kind=kind, title=title, worst=worst, step_regex=step_regex,
                          progress=progress)
    for note in page.notes:
        sys.stderr.write(f"note: {flag_text(note)}\n")
    from spectra_cli.render.screens import print_page

    emit(page.to_dict(), json, print_page, written=(out,))
    wrote(out)
