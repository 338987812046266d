"""Options shared by the commands that read a matrix (metavars as the README writes them)."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Annotated, Any, TypeVar

import typer

from spectra_cli.analysis.fit_options import FIT_DEFAULTS

Paths = Annotated[list[str], typer.Argument(
    metavar="PATH...", help="Input: .npy, .npz, .parquet, a directory or a glob of .npy or Parquet files, a "
    "file.safetensors::tensor, or moment files. Several PATHs are one matrix: .npy shards, Parquet files or moment "
    "files, each named once.", show_default=False)]
Key = Annotated[str | None, typer.Option("--key", metavar="NAME", help="Array name inside a .npz archive.")]
Column = Annotated[str | None, typer.Option("--column", metavar="NAME",
                                            help="Parquet vector column (list or fixed-size list).")]
Columns = Annotated[str | None, typer.Option("--columns", metavar="A,B,C",
                                             help="Comma-separated numeric Parquet columns, one feature each.")]
Rows = Annotated[str | None, typer.Option("--rows", metavar="START:STOP",
                                          help="Row range (0-based, half-open).")]
Sample = Annotated[int | None, typer.Option("--sample", metavar="N",
                                            help="Use N rows drawn uniformly without replacement.")]
Seed = Annotated[int, typer.Option("--seed", metavar="S", help="Seed of --sample.")]
Weights = Annotated[str | None, typer.Option("--weights", metavar="FILE.npy",
                                             help="1-D .npy of row weights (counts or probabilities).")]
WeightCol = Annotated[str | None, typer.Option("--weight-column", metavar="NAME",
                                               help="Parquet column of row weights.")]
Uncentered = Annotated[bool | None, typer.Option("--uncentered", help="Second moment X^T X / n instead of the "
                                                 "covariance.", show_default=False)]
Ddof = Annotated[int, typer.Option("--ddof", metavar="K", help="Delta degrees of freedom of the unweighted "
                                   "covariance.")]
Precision = Annotated[str, typer.Option(
    "--precision", metavar="float64|float32",
    help="Arithmetic of the products (and of the eigensolver from d = 3,072): float64 (exact) or "
         "float32 (fast, higher floor).")]
BlockRows = Annotated[int | None, typer.Option("--block-rows", metavar="N", show_default=False,
                                               help="Rows per block (memory is O(d^2 + block)). Default: 8192, fewer "
                                               "for wide rows (64 MiB of float64 a block, never below d/2 rows).")]
DropNonfinite = Annotated[bool, typer.Option("--drop-nonfinite", help="Skip rows with NaN/inf instead of failing.")]
MaxMemory = Annotated[str | None, typer.Option("--max-memory", metavar="SIZE", help="Memory the run's matrices may "
                                               "take, e.g. 8GB (default: half the physical memory).")]
Json = Annotated[bool, typer.Option("--json", help="Print one strict JSON document instead of tables.")]
Logits = Annotated[str | None, typer.Option("--logits", metavar="FILE.npy",
                                            help="1-D .npy of scores z: row weights softmax(z / T).")]
Temperature = Annotated[float, typer.Option("--temperature", metavar="T", help="Temperature T of --logits.")]
Convention = Annotated[str, typer.Option("--convention", metavar="NAME", help="spectra (its own defaults) | "
                                          "weightwatcher (WeightWatcher's analyze(): uncentred W^T W, density "
                                          "alpha, its layers, columns and verdicts).")]
Plot = Annotated[str | None, typer.Option("--plot", metavar="FILE", help="Write a plot (.png, .svg or .pdf; needs "
                                          "the 'plot' extra).")]
Title = Annotated[str | None, typer.Option("--title", metavar="TEXT", help="The figure's title (with --plot), "
                                          "instead of the data's name.")]


Top = Annotated[int | None, typer.Option(
    "--top", metavar="K", help="Only the leading K eigenvalues (block Lanczos, each within 1e-12 relative of the full "
    "decomposition; the total variance stays exact); 0: all. Default: all; fit takes it automatically when "
    "d >= 4096, every --window ends at or below d/16 and the spectrum is not flat (participation ratio at most "
    "d/2).", show_default=False)]
Positions = Annotated[str | None, typer.Option("--positions", metavar="SLICE|LIST", help="Positions of a sequence "
                                               "dump to use: 1: (drop position 0), 0:16, or 0,2,5.")]
Pool = Annotated[str, typer.Option("--pool", metavar="tokens|mean|first|last", help="Rows of a sequence dump: every "
                                   "selected position (tokens), or one per window: mean, first, last.")]
Mask = Annotated[str | None, typer.Option("--mask", metavar="FILE.npy", help="(windows, positions) booleans of a "
                                          "sequence dump: False marks padding, left out of every statistic.")]
PerWindow = Annotated[int | None, typer.Option("--positions-per-window", metavar="L", help="Regroup token rows into "
                                               "consecutive windows of L positions (a sequence dump).")]


Engine = Annotated[str, typer.Option("--engine", metavar="local|dask", help="Run the passes here (local) or as "
                                     "Dask tasks (dask: the 'dask' extra).")]
Scheduler = Annotated[str | None, typer.Option("--scheduler", metavar="ADDRESS", help="An existing Dask "
                                               "scheduler, e.g. tcp://host:8786 (--engine dask).")]
DaskWorkers = Annotated[int | None, typer.Option("--workers", metavar="N", help="A LocalCluster of N worker "
                                                 "processes (--engine dask; default 2).")]


Threads = Annotated[int | None, typer.Option("--threads", metavar="N", show_default=False, help="BLAS threads of "
                                            "every operation (default: one for small ones, every core this process "
                                            "may use for large ones; OMP_NUM_THREADS and the like cap it).")]
ConnectTimeout = Annotated[float, typer.Option("--connect-timeout", metavar="SECONDS", help="How long to wait for "
                                               "the Dask scheduler of --scheduler to answer.")]
DocColumn = Annotated[str | None, typer.Option("--doc-column", metavar="NAME", help="Parquet column of document ids: "
                                              "windows of --positions-per-window tokens restart at each document and "
                                              "never cross one.")]
MaskColumn = Annotated[str | None, typer.Option("--mask-column", metavar="NAME", help="Parquet column marking real "
                                               "tokens (0/false = padding) of regrouped token rows.")]

#: Every reading option of the command line, declared once: its annotation (flag, metavar, help)
#: and default, under its library keyword (``uncentered`` is the flag of ``centered=False``). A
#: command takes them with :func:`reading_options`; the library's declaration is
#: :class:`~spectra_cli.options.ReadKeywords`, and a test holds the two to the same names.
READ_OPTIONS: dict[str, tuple[Any, Any]] = {
    "key": (Key, None), "column": (Column, None), "columns": (Columns, None), "rows": (Rows, None),
    "sample": (Sample, None), "seed": (Seed, 0), "weights": (Weights, None), "weight_column": (WeightCol, None),
    "logits": (Logits, None), "temperature": (Temperature, 1.0), "centered": (Uncentered, None),
    "ddof": (Ddof, 1), "precision": (Precision, "float64"), "block_rows": (BlockRows, None),
    "drop_nonfinite": (DropNonfinite, False), "max_memory": (MaxMemory, None), "positions": (Positions, None),
    "pool": (Pool, "tokens"), "mask": (Mask, None), "positions_per_window": (PerWindow, None),
    "doc_column": (DocColumn, None), "mask_column": (MaskColumn, None), "engine": (Engine, "local"),
    "scheduler": (Scheduler, None), "workers": (DaskWorkers, None), "connect_timeout": (ConnectTimeout, 5.0),
    "threads": (Threads, None),
}
_FLAG_NAME = {"centered": "uncentered"}  # the parameter name Typer sees where it differs from the keyword


def _opt(flag: str, help: str, metavar: str | None = None) -> Any:
    """A fit option: its default is None on the command line (not given: the library's default, or a
    config's value, applies); the help states the library's default (:data:`FIT_DEFAULTS`)."""
    default = FIT_DEFAULTS[flag.removeprefix("--").replace("-", "_")]
    if isinstance(default, tuple) and len(default) == 2 and all(isinstance(x, float) for x in default):
        default = f"{default[0]:g}:{default[1]:g}"  # the alpha range as the flag takes it
    shown = default not in (None, False, ()) and not isinstance(default, bool)
    return typer.Option(flag, metavar=metavar, help=help + (f" Default: {default}." if shown else ""),
                        show_default=False)


#: Every fit option of the command line, declared once, under its library keyword
#: (:class:`~spectra_cli.analysis.suite.FitKeywords`; a test holds the two to the same names and the
#: help to the library's defaults). A command takes them with :func:`fit_options`.
FIT_OPTIONS: dict[str, Any] = {
    "window": Annotated[list[str] | None, _opt("--window", "Fit ranks K1:K2 (1-based, inclusive) or 'auto'; repeat "
                                               "for several windows. Default 11:floor(d/10).", "K1:K2")],
    "method": Annotated[str | None, _opt("--method", "ols | logspaced | inv-rank.", "METHOD")],
    "model": Annotated[str | None, _opt("--model", "power-law | log-corrected | broken.", "MODEL")],
    "degree": Annotated[int | None, _opt("--degree", "p of the log-corrected model.", "P")],
    "density": Annotated[bool | None, _opt("--density", "Density exponent: Hill MLE with KS x_min (WeightWatcher's "
                                           "alpha; add --uncentered to compare).")],
    "auto_tolerance": Annotated[float | None, _opt("--auto-tolerance", "Residual RMS of log lambda allowed by "
                                                   "--window auto.", "T")],
    "counting": Annotated[list[float] | None, _opt("--counting", "N(eps) = #{lambda_j >= eps} (repeatable).",
                                                   "EPS")],
    "capacity": Annotated[list[float] | None, _opt("--capacity", "N(tau) = sum lambda/(lambda + tau) "
                                                   "(repeatable).", "TAU")],
    "alpha_range": Annotated[str | None, _opt("--alpha-range", "Density alpha of a healthy layer: below LO "
                                              "over-trained, above HI under-trained (WeightWatcher's).", "LO:HI")],
    "convention": Annotated[str | None, _opt("--convention", "spectra (its own defaults) | weightwatcher "
                                             "(WeightWatcher's analyze(): uncentred W^T W, density alpha, its "
                                             "layers, columns and verdicts).", "NAME")],
    "ci": Annotated[bool | None, _opt("--ci", "95% bootstrap interval of alpha over row-block groups.")],
    "ci_replicates": Annotated[int | None, _opt("--ci-replicates", "Bootstrap replicates.", "B")],
    "ci_seed": Annotated[int | None, _opt("--ci-seed", "Seed of the bootstrap (and of --population's).", "S")],
    "population": Annotated[bool | None, _opt("--population", "Also the population exponent behind each fit "
                                              "(corrects the finite-sample bias of the slope at small n/d, with a "
                                              "95% interval) and the bias-corrected participation ratio.")],
    "population_route": Annotated[str | None, _opt("--population-route", "analytic (below n/d = 10 the interval "
                                                   "from the CLT of linear spectral statistics, simulated only where "
                                                   "the theory does not hold, said in notes) | simulate (always "
                                                   "simulated samples: the check).", "ROUTE")],
    "spikes": Annotated[bool | None, _opt("--spikes", "Also the eigenvalues that stand above the power-law bulk "
                                          "at this n and d (Tracy-Widom test), each with the coordinates that load "
                                          "on it and a flag for a rogue dimension.")],
    "shuffled_control": Annotated[bool | None, _opt("--shuffled-control", "Also compute the spectrum with each "
                                                    "column permuted independently.")],
    "control_seed": Annotated[int | None, _opt("--control-seed", "Seed of --shuffled-control.", "S")],
    "partition_isotropy": Annotated[bool | None, _opt("--partition-isotropy", "Also partition isotropy (a second "
                                                      "streamed pass).")],
    "isoscore": Annotated[bool | None, _opt("--isoscore", "Also IsoScore (Rudman et al. 2022).")],
    "scale": Annotated[str | None, _opt("--scale", "seed | none: the scale s of partition isotropy's Z(c) (the "
                                        "std of all entries, or 1).", "NAME")],
    "rankme": Annotated[bool | None, typer.Option(
        "--rankme/--no-rankme", help="The entropy rank of the uncentred singular values (RankMe, Garrido et al. "
        "2023), which takes a second eigendecomposition: by default only when cheap (the matrix decomposed at most "
        "1024 wide).", show_default=False)],
    "top": Top,
}


def fit_options(*, only: tuple[str, ...] | None = None, exclude: tuple[str, ...] = ()) -> Callable[[F], F]:
    """Give a command the fit options (all of :data:`FIT_OPTIONS`, or ``only`` these, less ``exclude``):
    added to its signature after its own parameters; the command receives those given on the command
    line as one ``fitting`` dict of library keywords, ready for ``**fitting``."""
    names = [n for n in (only or tuple(FIT_OPTIONS)) if n not in exclude]
    unknown = [n for n in names if n not in FIT_OPTIONS]
    if unknown:
        raise ValueError(f"not a fit option: {unknown[0]}")
    added = [inspect.Parameter(n, inspect.Parameter.KEYWORD_ONLY, annotation=FIT_OPTIONS[n], default=None)
             for n in names]
    # a fit option not given is left out: the library's default (or a config's value) applies
    return _options(names, added, "fitting", lambda given: {n: v for n, v in given.items() if v is not None},
                    before_keyword_only=True)

F = TypeVar("F", bound=Callable[..., Any])


def _options(names: list[str], added: list[inspect.Parameter], into: str,
             collect: Callable[[dict[str, Any]], dict[str, Any]], *, before_keyword_only: bool) -> Callable[[F], F]:
    """The one way a group of declared options joins a command: ``added`` parameters go into its signature
    (after its own positional ones, and before or after its keyword-only ones), and the command receives
    the values of ``names`` as one dict ``into`` (``collect`` turns the flags' values into library
    keywords)."""

    def decorate(func: F) -> F:
        sig = inspect.signature(func, eval_str=True)
        own = [p for p in sig.parameters.values() if p.name != into]
        keyword_only = [p for p in own if p.kind is inspect.Parameter.KEYWORD_ONLY]
        positional = [p for p in own if p.kind is not inspect.Parameter.KEYWORD_ONLY]
        params = positional + added + keyword_only if before_keyword_only else own + added
        flags = [p.name for p in added]

        @functools.wraps(func)
        def command(**values: Any) -> Any:
            given = {n: values.pop(f) for n, f in zip(names, flags, strict=True)}
            return func(**values, **{into: collect(given)})

        command.__signature__ = sig.replace(parameters=params)  # type: ignore[attr-defined]
        command.__annotations__ = {p.name: p.annotation for p in params}
        return command  # type: ignore[return-value]

    return decorate


def reading_options(*, exclude: tuple[str, ...] = (), only: tuple[str, ...] | None = None) -> Callable[[F], F]:
    """Give a command the shared reading options (all of :data:`READ_OPTIONS`, or ``only`` these,
    less ``exclude``): they are added to its signature, after its own parameters, and the command
    receives them as one ``reading`` dict of library keywords (``--uncentered`` as ``centered``),
    ready for ``**reading`` into the library function of the same name."""
    names = [n for n in (only or tuple(READ_OPTIONS)) if n not in exclude]
    unknown = [n for n in names if n not in READ_OPTIONS]
    if unknown:
        raise ValueError(f"not a reading option: {unknown[0]}")

    def collect(reading: dict[str, Any]) -> dict[str, Any]:
        if "centered" in reading:  # the flag is --uncentered; not given (None), the library's default (or a preset's)
            uncentered = reading.pop("centered")
            if uncentered is not None:
                reading["centered"] = not uncentered
        return reading

    added = [inspect.Parameter(_FLAG_NAME.get(n, n), inspect.Parameter.KEYWORD_ONLY, annotation=READ_OPTIONS[n][0],
                               default=READ_OPTIONS[n][1]) for n in names]
    return _options(names, added, "reading", collect, before_keyword_only=False)


def describe_paths(paths: list[str]) -> str:
    """The paths as a progress line names them (the first few)."""
    return " ".join(paths[:3]) + (f" (+{len(paths) - 3} more)" if len(paths) > 3 else "")


def one_path(paths: list[str], flag: str) -> str:
    """The one PATH an option reads as something other than a matrix (e.g. ``--eigenvalues``)."""
    if len(paths) != 1:
        from spectra_cli.errors import OptionError, param

        raise OptionError(f"{param(flag)} reads one PATH; got {len(paths)}.")
    return paths[0]


def split_columns(text: str | None) -> list[str] | None:
    return [c.strip() for c in text.split(",") if c.strip()] if text else None
