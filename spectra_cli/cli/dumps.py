"""``spectra sequence``: the geometry of a sequence dump."""

from __future__ import annotations

from typing import Annotated

import typer

from spectra_cli.analysis.fit_options import FitKeywords
from spectra_cli.cli.app import app, emit
from spectra_cli.cli.flags import Json, Paths, Plot, Title, describe_paths, fit_options, reading_options
from spectra_cli.options import SEQUENCE_REFUSES, SOURCE_KEYWORDS, SourceKeywords
from spectra_cli.run.sequence import SEQUENCE_FIT


@app.command()
@reading_options(only=tuple(k for k in SOURCE_KEYWORDS if k not in SEQUENCE_REFUSES))
@fit_options(only=SEQUENCE_FIT)
def sequence(
    paths: Paths,
    project: Annotated[int | None, typer.Option("--project", metavar="K", help="Map each token to K features "
                                                "through one fixed random orthogonal map (--seed) before the "
                                                "context is formed.")] = None,
    seed: Annotated[int, typer.Option("--seed", metavar="S", help="Seed of --project and of the shuffled "
                                      "control.")] = 0,
    controls: Annotated[str, typer.Option("--controls", metavar="LIST", help="block-diagonal,shuffled (default), "
                                          "one of them, or none.")] = "block-diagonal,shuffled",
    plot: Plot = None,
    title: Title = None,
    json: Json = False,
    *,
    reading: SourceKeywords,
    fitting: FitKeywords,
) -> None:
    """Per-position summary, pooled and context spectra, controls and lag energies of a sequence dump.

    \b
    Examples:
      spectra sequence ctx.npy --positions 1:
      spectra sequence ctx.npy --project 32 --seed 0 --window 50:500 --plot ctx.png
      spectra sequence tokens.parquet --positions-per-window 32 --doc-column doc_id --json
    """
    from spectra_cli.render.progress import LazyProgress
    from spectra_cli.run.sequence import sequence as run

    if title is not None and plot is None:
        from spectra_cli.errors import OptionError

        raise OptionError("--title names the figure: give --plot FILE too.")
    if plot is not None:
        from spectra_cli.render.figures import check_plot_target

        check_plot_target(plot)
    with LazyProgress(f"reading {describe_paths(paths)}") as progress:
        report = run(paths, project=project, seed=seed, controls=[c.strip() for c in controls.split(",") if c.strip()],
                     progress=progress, **fitting, **reading)
    doc = report.to_dict()
    if plot is not None:
        from spectra_cli.render.figures import plot_sequence

        plot_sequence(doc, plot, title)
    from spectra_cli.render.context_view import print_sequence

    emit(doc, json, print_sequence, written=(plot,) if plot else ())
    if plot is not None:
        from spectra_cli.render.figures import wrote

        wrote(plot)
