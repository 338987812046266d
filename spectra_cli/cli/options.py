"""Options shared by the commands that read a matrix (metavars as the README writes them)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any

import typer

Path = Annotated[str, typer.Argument(metavar="PATH", help="Input: .npy, .npz, .parquet, a directory or a glob of "
                                     "Parquet files, a file.safetensors::tensor, or a moment file.",
                                     show_default=False)]
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
Uncentered = Annotated[bool, typer.Option("--uncentered", help="Second moment X^T X / n instead of the covariance.")]
Ddof = Annotated[int, typer.Option("--ddof", metavar="K", help="Delta degrees of freedom of the unweighted "
                                   "covariance.")]
Precision = Annotated[str, typer.Option(
    "--precision", metavar="float64|float32",
    help="Arithmetic of the products: float64 (exact) or float32 (fast, higher floor).")]
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
Plot = Annotated[str | None, typer.Option("--plot", metavar="FILE", help="Write a plot (.png, .svg or .pdf; needs "
                                          "the 'plot' extra).")]


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


def split_columns(text: str | None) -> list[str] | None:
    return [c.strip() for c in text.split(",") if c.strip()] if text else None


def read_arguments(values: Mapping[str, Any]) -> dict[str, Any]:
    """The reading keywords of an API call from a command's parameters (its ``locals()``): those
    the command has, with ``--uncentered`` as ``centered`` and ``--columns a,b`` as a list."""
    from spectra_cli.options import ReadOptions

    out = {k: values[k] for k in ReadOptions.keywords() if k in values}
    if "uncentered" in values:
        out["centered"] = not values["uncentered"]
    if "columns" in out:
        out["columns"] = split_columns(out["columns"])
    return out
