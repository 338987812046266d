"""``spectra sequence``: the geometry of a sequence dump."""

from __future__ import annotations

from typing import Annotated

import typer

from spectra_cli.cli.app import app, emit
from spectra_cli.cli.options import Column, Columns, Json, Key, Mask, MaxMemory, Path, PerWindow, Plot, Positions


@app.command()
def sequence(
    path: Path,
    positions: Positions = None,
    mask: Mask = None,
    positions_per_window: PerWindow = None,
    doc_column: Annotated[str | None, typer.Option("--doc-column", metavar="NAME", help="Parquet column of document "
                                                   "ids: windows of --positions-per-window tokens restart at each "
                                                   "document and never cross one.")] = None,
    mask_column: Annotated[str | None, typer.Option("--mask-column", metavar="NAME", help="Parquet column marking "
                                                    "real tokens (0/false = padding) of regrouped token rows.")] = None,
    project: Annotated[int | None, typer.Option("--project", metavar="K", help="Map each token to K features "
                                                "through one fixed random orthogonal map (--seed) before the "
                                                "context is formed.")] = None,
    seed: Annotated[int, typer.Option("--seed", metavar="S", help="Seed of --project and of the shuffled "
                                      "control.")] = 0,
    controls: Annotated[str, typer.Option("--controls", metavar="LIST", help="block-diagonal,shuffled (default), "
                                          "one of them, or none.")] = "block-diagonal,shuffled",
    window: Annotated[list[str] | None, typer.Option("--window", metavar="K1:K2", help="Fit window(s) of the "
                                                     "context spectrum and its controls, e.g. 50:500.")] = None,
    method: Annotated[str, typer.Option("--method", metavar="METHOD", help="ols | logspaced | inv-rank.")] = "ols",
    plot: Plot = None,
    key: Key = None, column: Column = None, columns: Columns = None, max_memory: MaxMemory = None,
    json: Json = False,
) -> None:
    """Per-position summary, pooled and context spectra, controls and lag energies of a sequence dump.

    \b
    Examples:
      spectra sequence ctx.npy --positions 1:
      spectra sequence ctx.npy --project 32 --seed 0 --window 50:500 --plot ctx.png
      spectra sequence tokens.parquet --positions-per-window 32 --doc-column doc_id --json
    """
    from spectra_cli.cli.options import split_columns
    from spectra_cli.render.progress import LazyProgress
    from spectra_cli.sequences import sequence as run

    if plot is not None:
        from spectra_cli.render.plot import check_plot_target

        check_plot_target(plot)
    with LazyProgress(f"reading {path}") as progress:
        report = run(path, positions=positions, mask=mask, positions_per_window=positions_per_window,
                     doc_column=doc_column, mask_column=mask_column,
                     project=project, seed=seed, controls=[c.strip() for c in controls.split(",") if c.strip()],
                     window=window, method=method, key=key, column=column, columns=split_columns(columns),
                     max_memory=max_memory, progress=progress)
    doc = report.to_dict()
    if plot is not None:
        from spectra_cli.render.sequence import plot_sequence

        plot_sequence(doc, plot)
    from spectra_cli.render.sequence import print_sequence

    emit(doc, json, print_sequence)
