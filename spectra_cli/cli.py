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
        except OSError as exc:
            # The file system refused (an unwritable output, a vanished input): the user's to fix.
            where = f" {exc.filename}" if exc.filename else ""
            _error(f"cannot access{where}: {exc.strerror or exc}")
            sys.exit(EXIT_USAGE)
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

    from spectra_cli.render.summaries import print_info

    print_info(path, doc, Console())


# The CI-facing commands (check, batch, compare, trend) live in their own module.
from spectra_cli import cli_ops  # noqa: E402,F401  (registers its commands on `app`)


def main() -> None:
    """Console-script entry point."""
    app()
