"""The `spectra` command: parse options, call one library function, render the result.

This is the one place where errors become exit codes: 0 success, 1 a check failed,
2 usage or input error (one ``error:`` line on stderr), 3 a bug (traceback shown).
"""

from __future__ import annotations

import sys
import traceback
from typing import Annotated, Any

import typer
from typer.core import TyperGroup

try:  # typer >= 0.20 vendors click as typer._click; older releases use click itself
    from typer._click import exceptions as _cx
except ImportError:  # pragma: no cover - depends on the installed typer
    from click import exceptions as _cx  # type: ignore[no-redef]

from spectra_cli import __version__
from spectra_cli.errors import SpectraError

EXIT_OK, EXIT_CHECK, EXIT_USAGE, EXIT_BUG = 0, 1, 2, 3


class _Never(Exception):
    pass


_NoArgsIsHelp: type[Exception] = getattr(_cx, "NoArgsIsHelpError", _Never)


class SpectraGroup(TyperGroup):
    """Maps exceptions to exit codes for the entry point and for CliRunner alike."""

    def main(self, *args: Any, **kwargs: Any) -> Any:
        kwargs["standalone_mode"] = False  # exceptions reach us; we choose the exit code
        import warnings

        from spectra_cli.errors import SpectraWarning

        # The reports carry their warnings; the CLI shows them itself (table, or stderr with --json).
        warnings.simplefilter("ignore", SpectraWarning)
        try:
            rv = super().main(*args, **kwargs)
        except SpectraError as exc:
            _error(str(exc))
            sys.exit(EXIT_USAGE)
        except _NoArgsIsHelp as exc:
            ctx = getattr(exc, "ctx", None)
            sys.stderr.write((ctx.get_help() if ctx is not None else str(exc)) + "\n")
            sys.exit(EXIT_USAGE)
        except _cx.UsageError as exc:
            hint = f" (see '{exc.ctx.command_path} --help')" if exc.ctx is not None else ""
            _error(exc.format_message().replace("\n", " ") + hint)
            sys.exit(EXIT_USAGE)
        except typer.Abort:
            _error("aborted")
            sys.exit(EXIT_USAGE)
        except _cx.ClickException as exc:
            _error(exc.format_message())
            sys.exit(EXIT_USAGE)
        except BrokenPipeError:
            sys.exit(EXIT_OK)
        except Exception:  # noqa: BLE001 - anything else is a bug: show it
            traceback.print_exc()
            sys.stderr.write("spectra: unexpected error (a bug): please report it with the traceback above\n")
            sys.exit(EXIT_BUG)
        sys.exit(rv if isinstance(rv, int) else EXIT_OK)


def _error(message: str) -> None:
    sys.stderr.write(f"error: {message.strip().splitlines()[0] if message.strip() else 'failed'}\n")


app = typer.Typer(
    cls=SpectraGroup,
    name="spectra",
    help="Measure the geometry of embedding and activation matrices: covariance spectra, "
    "power-law exponents, effective ranks.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)


def _version(value: bool) -> None:
    if value:
        sys.stdout.write(f"spectra {__version__}\n")
        raise typer.Exit(0)


@app.callback()
def _root(
    version: Annotated[bool, typer.Option("--version", callback=_version, is_eager=True,
                                          help="Print the version and exit.")] = False,
) -> None:
    """spectra: covariance spectra, power laws and effective ranks of embedding matrices."""


# Options shared by the commands that read a matrix.
Path = Annotated[str, typer.Argument(help="Input: .npy, .npz, .parquet, a directory or a glob of Parquet files.",
                                     show_default=False)]
Key = Annotated[str | None, typer.Option("--key", help="Array name inside a .npz archive.")]
Column = Annotated[str | None, typer.Option("--column", help="Parquet vector column (list or fixed-size list).")]
Columns = Annotated[str | None, typer.Option("--columns",
                                             help="Comma-separated numeric Parquet columns, one feature each.")]
Rows = Annotated[str | None, typer.Option("--rows", help="Row range START:STOP (0-based, half-open).")]
Sample = Annotated[int | None, typer.Option("--sample", help="Use N rows drawn uniformly without replacement.")]
Seed = Annotated[int, typer.Option("--seed", help="Seed of --sample.")]
Weights = Annotated[str | None, typer.Option("--weights", help="1-D .npy of row weights (counts or probabilities).")]
WeightCol = Annotated[str | None, typer.Option("--weight-column", help="Parquet column of row weights.")]
Uncentered = Annotated[bool, typer.Option("--uncentered", help="Second moment X^T X / n instead of the covariance.")]
Ddof = Annotated[int, typer.Option("--ddof", help="Delta degrees of freedom of the unweighted covariance.")]
Precision = Annotated[str, typer.Option(
    "--precision", help="Arithmetic of the products: float64 (exact) or float32 (fast, higher floor).")]
BlockRows = Annotated[int, typer.Option("--block-rows", help="Rows per block (memory is O(d^2 + block)).")]
DropNonfinite = Annotated[bool, typer.Option("--drop-nonfinite", help="Skip rows with NaN/inf instead of failing.")]
Json = Annotated[bool, typer.Option("--json", help="Print one strict JSON document instead of tables.")]
Logits = Annotated[str | None, typer.Option("--logits", help="1-D .npy of scores z: row weights softmax(z / T).")]
Temperature = Annotated[float, typer.Option("--temperature", help="Temperature T of --logits.")]


def _columns(text: str | None) -> list[str] | None:
    return [c.strip() for c in text.split(",") if c.strip()] if text else None


def _emit(doc: dict[str, Any], as_json: bool) -> None:
    if as_json:
        from spectra_cli.render.json import dumps

        sys.stdout.write(dumps(doc) + "\n")
        # stdout stays one JSON document; a person watching the run still sees the warnings.
        for w in doc.get("warnings", []):
            sys.stderr.write(f"warning: {w}\n")
        return
    from rich.console import Console

    from spectra_cli.render.table import print_report

    print_report(doc, Console())


def _analyse(command: str, path: str, opts: dict[str, Any], as_json: bool) -> None:
    from spectra_cli import api
    from spectra_cli.render.progress import LazyProgress

    with LazyProgress(f"reading {path}") as progress:
        report = getattr(api, command)(path, progress=progress, **opts)
    _emit(report.to_dict(), as_json)


@app.command()
def fit(
    path: Path,
    window: Annotated[list[str] | None, typer.Option(
        "--window", help="Fit ranks K1:K2 (1-based, inclusive) or 'auto'; repeat for several windows. "
        "Default 11:floor(d/10).")] = None,
    method: Annotated[str, typer.Option("--method", help="ols | logspaced | inv-rank.")] = "ols",
    model: Annotated[str, typer.Option("--model", help="power-law | log-corrected | broken.")] = "power-law",
    degree: Annotated[int, typer.Option("--degree", help="p of the log-corrected model.")] = 2,
    ci: Annotated[bool, typer.Option("--ci", help="95% bootstrap interval of alpha over row-block groups.")] = False,
    ci_replicates: Annotated[int, typer.Option("--ci-replicates", help="Bootstrap replicates.")] = 200,
    ci_seed: Annotated[int, typer.Option("--ci-seed", help="Seed of the bootstrap.")] = 0,
    density: Annotated[bool, typer.Option("--density", help="Density exponent: Hill MLE with KS x_min "
                                          "(WeightWatcher convention; add --uncentered to compare).")] = False,
    eigenvalues: Annotated[bool, typer.Option("--eigenvalues", help="PATH is a 1-D list of eigenvalues "
                                              "(.npy, .json, .csv/.txt), not a data matrix.")] = False,
    shuffled_control: Annotated[bool, typer.Option("--shuffled-control", help="Also compute the spectrum with "
                                                   "each column permuted independently.")] = False,
    auto_tolerance: Annotated[float, typer.Option("--auto-tolerance", help="Residual RMS of log lambda allowed "
                                                  "by --window auto.")] = 0.05,
    plot: Annotated[str | None, typer.Option("--plot", help="Write a log-log plot (.png, .svg or .pdf).")] = None,
    partition_isotropy: Annotated[bool, typer.Option("--partition-isotropy", help="Also partition isotropy "
                                                     "(a second streamed pass).")] = False,
    isoscore: Annotated[bool, typer.Option("--isoscore", help="Also IsoScore (Rudman et al. 2022).")] = False,
    counting: Annotated[list[float] | None, typer.Option("--counting", help="N(eps) = #{lambda_j >= eps} "
                                                         "(repeatable).")] = None,
    capacity: Annotated[list[float] | None, typer.Option("--capacity", help="N(tau) = sum lambda/(lambda + tau) "
                                                         "(repeatable).")] = None,
    logits: Logits = None, temperature: Temperature = 1.0,
    key: Key = None, column: Column = None, columns: Columns = None, rows: Rows = None,
    sample: Sample = None, seed: Seed = 0, weights: Weights = None, weight_column: WeightCol = None,
    uncentered: Uncentered = False, ddof: Ddof = 1, precision: Precision = "float64",
    block_rows: BlockRows = 8192, drop_nonfinite: DropNonfinite = False, json: Json = False,
) -> None:
    """Spectrum, power-law fit and effective ranks of a matrix (the main job)."""
    from spectra_cli import api
    from spectra_cli.render.progress import LazyProgress

    if plot is not None:
        from spectra_cli.render.plot import check_plot_target

        check_plot_target(plot)
    with LazyProgress(f"reading {path}") as progress:
        report = api.fit(
            path, window=window, method=method, model=model, degree=degree, density=density,
            counting=counting or (), capacity=capacity or (),
            auto_tolerance=auto_tolerance, ci=ci, ci_replicates=ci_replicates, ci_seed=ci_seed,
            eigenvalues=eigenvalues, shuffled_control=shuffled_control, partition_isotropy=partition_isotropy,
            isoscore=isoscore, logits=logits, temperature=temperature, key=key, column=column,
            columns=_columns(columns), rows=rows, sample=sample, seed=seed, weights=weights,
            weight_column=weight_column, centered=not uncentered, ddof=ddof, precision=precision,
            block_rows=block_rows, drop_nonfinite=drop_nonfinite, progress=progress)
    if plot is not None:
        from spectra_cli.render.plot import plot_report

        plot_report(report, plot)
    _emit(report.to_dict(), json)


@app.command()
def spectrum(
    path: Path,
    key: Key = None, column: Column = None, columns: Columns = None, rows: Rows = None,
    sample: Sample = None, seed: Seed = 0, weights: Weights = None, weight_column: WeightCol = None,
    logits: Logits = None, temperature: Temperature = 1.0,
    uncentered: Uncentered = False, ddof: Ddof = 1, precision: Precision = "float64",
    block_rows: BlockRows = 8192, drop_nonfinite: DropNonfinite = False, json: Json = False,
) -> None:
    """Eigenvalues (descending), explained variance, k90/k95/k99 and floors."""
    _analyse("spectrum", path, dict(
        key=key, column=column, columns=_columns(columns), rows=rows, sample=sample, seed=seed,
        weights=weights, weight_column=weight_column, logits=logits, temperature=temperature,
        centered=not uncentered, ddof=ddof,
        precision=precision, block_rows=block_rows, drop_nonfinite=drop_nonfinite), json)


@app.command()
def isotropy(
    path: Path,
    scale: Annotated[str, typer.Option("--scale", help="seed (divide by the std of all entries) | none.")] = "seed",
    isoscore: Annotated[bool, typer.Option("--isoscore", help="Also IsoScore (Rudman et al. 2022).")] = False,
    key: Key = None, column: Column = None, columns: Columns = None, rows: Rows = None,
    sample: Sample = None, seed: Seed = 0, weights: Weights = None, weight_column: WeightCol = None,
    logits: Logits = None, temperature: Temperature = 1.0,
    precision: Precision = "float64", block_rows: BlockRows = 8192, drop_nonfinite: DropNonfinite = False,
    json: Json = False,
) -> None:
    """Partition isotropy, exact mean cosine, top-PC share, mean-norm ratio (two streamed passes)."""
    _analyse("isotropy", path, dict(
        scale=scale, isoscore=isoscore, key=key, column=column, columns=_columns(columns), rows=rows,
        sample=sample, seed=seed, weights=weights, weight_column=weight_column, logits=logits,
        temperature=temperature, precision=precision, block_rows=block_rows, drop_nonfinite=drop_nonfinite), json)


@app.command()
def whiten(
    path: Path,
    out: Annotated[str, typer.Option("-o", "--output", help="Whitened rows: .npy or .parquet (written atomically).")
                   ] = "",
    method: Annotated[str, typer.Option("--method", help="zca | pca | abtt.")] = "zca",
    k: Annotated[int | None, typer.Option("--k", help="Directions kept (pca, default: the usable rank) or "
                                          "removed (abtt, default 2).")] = None,
    eps: Annotated[float, typer.Option("--eps", help="Added to each eigenvalue before 1/sqrt.")] = 0.0,
    save_transform: Annotated[str | None, typer.Option("--save-transform", help="Save the transform (.npz, no "
                                                       "pickle).")] = None,
    transform: Annotated[str | None, typer.Option("--transform", help="Apply a saved transform instead of fitting "
                                                  "one.")] = None,
    partition_isotropy: Annotated[bool, typer.Option("--partition-isotropy", help="Also partition isotropy before "
                                                     "and after (more arithmetic in the second pass).")] = False,
    scale: Annotated[str, typer.Option("--scale", help="Partition-isotropy scaling: seed | none.")] = "seed",
    key: Key = None, column: Column = None, columns: Columns = None, rows: Rows = None,
    sample: Sample = None, seed: Seed = 0, weights: Weights = None, weight_column: WeightCol = None,
    logits: Logits = None, temperature: Temperature = 1.0, ddof: Ddof = 1,
    block_rows: BlockRows = 8192, drop_nonfinite: DropNonfinite = False, json: Json = False,
) -> None:
    """Whiten (zca, pca, abtt) to a file; report spectrum and isotropy before and after."""
    from spectra_cli.errors import OptionError
    from spectra_cli.render.progress import LazyProgress
    from spectra_cli.whiten import whiten as run_whiten

    if not out:
        raise OptionError("whiten needs -o FILE (.npy or .parquet).")
    with LazyProgress(f"whitening {path}") as progress:
        report = run_whiten(
            path, out=out, method=method, k=k, eps=eps, transform=transform, save_transform=save_transform,
            partition_isotropy=partition_isotropy, scale=scale, key=key, column=column, columns=_columns(columns),
            weights=weights, weight_column=weight_column, logits=logits, temperature=temperature, rows=rows,
            sample=sample, seed=seed, ddof=ddof, block_rows=block_rows, drop_nonfinite=drop_nonfinite,
            progress=progress)
    _emit(report.to_dict(), json)


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
        from rich.table import Table

        t = Table("check", "value", "bound", "verdict", title=f"Checks on {path}", title_justify="left")
        for v in verdicts:
            value = "null" if v.value is None else f"{v.value:.6g}"
            if v.baseline is not None:
                value += f" (baseline {v.baseline:.6g})"
            t.add_row(v.check.field, value, v.check.describe_bound(), "[green]pass[/]" if v.passed else "[red]FAIL[/]")
        Console().print(t)
    if not passed:
        raise typer.Exit(1)


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
        from rich.table import Table

        t = Table("item", "shape", "alpha", "R^2", "part. ratio", "status", title=f"{len(results)} item(s)"
                  + (f", {skipped} skipped (--resume)" if skipped else "") + (f" -> {jsonl}" if jsonl else ""),
                  title_justify="left")
        order = {it.name: i for i, it in enumerate(items)}
        for r in sorted(results, key=lambda r: order.get(r["item"], 0)):
            if "error" in r:
                t.add_row(r["item"], "", "", "", "", f"[red]error: {r['error']}[/]")
                continue
            f = r.get("fit") or {}
            t.add_row(r["item"], "x".join(str(x) for x in r["source"]["shape"]),
                      f"{f['alpha']:.4f}" if f else "—", f"{f['r2']:.4f}" if f else "—",
                      f"{r['rank']['participation_ratio']:.2f}", "ok")
        Console().print(t)
    for r in failed:
        sys.stderr.write(f"error: {r['item']}: {r['error']}\n")
    if failed:
        raise typer.Exit(1)


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
    from rich.table import Table

    t = Table(title=f"A = {a}\nB = {b}", title_justify="left")
    t.add_column("metric", no_wrap=True, min_width=24)
    for c in ("A", "B", "B - A", "rel"):
        t.add_column(c, justify="right")
    main_sections = ("fit.", "rank.", "isotropy.", "density.", "spectrum.", "control.meets_at_rank")
    for r in rows:
        if not r.field.startswith(main_sections) or r.field.startswith(
                ("spectrum.eigenvalues.", "spectrum.explained_variance_ratio.", "fit.window.")):
            continue  # the table shows the headline figures; --json has every field
        def f(x: float | None) -> str:
            return "—" if x is None else f"{x:.6g}"

        t.add_row(r.field, f(r.a), f(r.b), f(r.diff), "—" if r.rel is None else f"{r.rel * 100:+.2f}%")
    Console().print(t)


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
    from rich.table import Table

    t = Table("series", "step", *metrics, title=f"{jsonl}", title_justify="left")
    for p in points:
        t.add_row(p.series, f"{p.step:g}", *("—" if p.values[m] is None else f"{p.values[m]:.6g}" for m in metrics))
    Console().print(t)


@app.command()
def synth(
    kind: Annotated[str, typer.Argument(help="powerlaw | isotropic | cone | random-features", show_default=False)],
    n: Annotated[int, typer.Option("-n", help="Rows.")] = 10000,
    d: Annotated[int, typer.Option("-d", help="Features.")] = 256,
    out: Annotated[str, typer.Option("-o", "--output", help="Output .npy or .parquet (written atomically).")] = "",
    alpha: Annotated[float, typer.Option("--alpha", help="Eigenvalue exponent (powerlaw, random-features).")] = 1.0,
    seed: Annotated[int, typer.Option("--seed", help="Seed of numpy.random.default_rng.")] = 0,
    offset: Annotated[float, typer.Option("--offset", help="Mean offset along a random unit vector "
                                          "(powerlaw), in units of sqrt(lambda_1).")] = 0.0,
    activation: Annotated[str, typer.Option("--activation", help="linear | quadratic | relu | tanh "
                                            "(random-features).")] = "linear",
    input_dim: Annotated[int | None, typer.Option("--input-dim", help="Input width v of random-features "
                                                  "(default 4d).")] = None,
    dtype: Annotated[str, typer.Option("--dtype", help="float32 | float64 | float16.")] = "float32",
) -> None:
    """Write a seeded synthetic matrix with a known spectrum (for calibration and tests)."""
    from spectra_cli import synth as synthesis
    from spectra_cli.errors import OptionError

    if not out:
        raise OptionError("synth needs -o FILE (.npy or .parquet).")
    blocks = synthesis.generate(kind, n=n, d=d, seed=seed, alpha=alpha, offset=offset, activation=activation,
                                input_dim=input_dim)
    synthesis.write(out, blocks, n=n, d=d, dtype=dtype)
    sys.stderr.write(f"wrote {out}: {n} x {d} {dtype} ({kind}, seed {seed})\n")


@app.command()
def info(
    path: Path, key: Key = None, column: Column = None, columns: Columns = None, json: Json = False,
) -> None:
    """Shape, dtype, layout, columns and row groups of an input, without reading its rows."""
    from spectra_cli.inspect import describe

    doc = describe(path, key=key, column=column, columns=_columns(columns))
    if json:
        from spectra_cli.render.json import dumps

        sys.stdout.write(dumps(doc) + "\n")
        return
    from rich.console import Console
    from rich.table import Table

    t = Table(title=path, title_justify="left", show_header=False, box=None)
    t.add_column(style="bold cyan")
    t.add_column()
    for k, v in doc.items():
        if k in ("columns_schema", "arrays", "tensors"):
            continue
        if v is not None:
            t.add_row(k, str(v))
    console = Console()
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


def main() -> None:
    """Console-script entry point."""
    app()
