"""Commands that analyse one input: fit, spectrum, isotropy, whiten, info, synth, sequence."""

from __future__ import annotations

import os
import sys
from typing import Annotated

import typer

from spectra_cli.analysis.fit_options import FitKeywords
from spectra_cli.cli.app import app, emit
from spectra_cli.cli.flags import (
    Column,
    Columns,
    Json,
    Key,
    MaxMemory,
    Paths,
    Plot,
    Title,
    Top,
    describe_paths,
    fit_options,
    one_path,
    reading_options,
    split_columns,
)
from spectra_cli.options import (
    ACCUMULATE_REFUSES,
    ISOTROPY_REFUSES,
    SEQUENCE_REFUSES,
    SOURCE_KEYWORDS,
    WHITEN_REFUSES,
    ReadKeywords,
    SourceKeywords,
)
from spectra_cli.run.sequence import SEQUENCE_FIT


@app.command()
@reading_options()
@fit_options()
def fit(
    paths: Paths,
    eigenvalues: Annotated[bool, typer.Option("--eigenvalues", help="PATH is a 1-D list of eigenvalues "
                                              "(.npy, .json, .csv/.txt), not a data matrix.")] = False,
    plot: Plot = None,
    title: Title = None,
    json: Json = False,
    *,
    reading: ReadKeywords,
    fitting: FitKeywords,
) -> None:
    """Spectrum, power-law fit and effective ranks of a matrix (the main job).

    \b
    Examples:
      spectra fit acts.npy --window 11:200 --json | jq .fit.alpha
      spectra fit emb.parquet --column emb --window auto --ci --plot spectrum.png
      spectra fit mlp_acts.npy --window 11:1049 --top 2000
    """
    from spectra_cli.render.figures import check_plot_options
    from spectra_cli.render.progress import LazyProgress
    from spectra_cli.run import matrix as api

    check_plot_options(plot, title)
    with LazyProgress(f"reading {describe_paths(paths)}") as progress:
        report = api.fit(one_path(paths, "eigenvalues") if eigenvalues else paths, eigenvalues=eigenvalues,
                         progress=progress, **fitting, **reading)
    if plot is not None:
        from spectra_cli.render.figures import plot_report

        plot_report(report, plot, title)
    emit(report.to_dict(), json, written=(plot,) if plot else ())
    if plot is not None:
        from spectra_cli.render.figures import wrote

        wrote(plot)


@app.command()
@reading_options()
def spectrum(
    paths: Paths,
    top: Top = None,
    json: Json = False,
    *,
    reading: ReadKeywords,
) -> None:
    """Eigenvalues (descending), explained variance, k90/k95/k99 and floors.

    \b
    Examples:
      spectra spectrum dump.npy --json > spectrum.json
      spectra spectrum 'shards/*.parquet' --precision float32
      spectra spectrum mlp_acts.npy --top 1000
    """
    from spectra_cli.render.progress import LazyProgress
    from spectra_cli.run import matrix as api

    with LazyProgress(f"reading {describe_paths(paths)}") as progress:
        report = api.spectrum(paths, top=top, progress=progress, **reading)
    emit(report.to_dict(), json)


@app.command()
@reading_options(exclude=tuple(ISOTROPY_REFUSES))
def isotropy(
    paths: Paths,
    scale: Annotated[str, typer.Option("--scale", metavar="seed|none",
                                       help="seed (divide by the std of all entries) | none.")] = "seed",
    isoscore: Annotated[bool, typer.Option("--isoscore", help="Also IsoScore (Rudman et al. 2022).")] = False,
    json: Json = False,
    *,
    reading: ReadKeywords,
) -> None:
    """Partition isotropy, exact mean cosine, top-PC share, mean-norm ratio (two streamed passes).

    \b
    Examples:
      spectra isotropy emb.npy
      spectra isotropy emb.parquet --isoscore --json
    """
    from spectra_cli.render.progress import LazyProgress
    from spectra_cli.run import matrix as api

    with LazyProgress(f"reading {describe_paths(paths)}") as progress:
        report = api.isotropy(paths, scale=scale, isoscore=isoscore, progress=progress, **reading)
    emit(report.to_dict(), json)


@app.command()
@reading_options(exclude=tuple(WHITEN_REFUSES))
def whiten(
    paths: Paths,
    out: Annotated[str, typer.Option("-o", "--output", metavar="FILE", help="Whitened rows: .npy or .parquet "
                                     "(written atomically).")] = "",
    method: Annotated[str, typer.Option("--method", metavar="zca|pca|abtt", help="zca | pca | abtt.")] = "zca",
    k: Annotated[int | None, typer.Option("--k", metavar="K", help="Directions kept (pca, default: the usable "
                                          "rank) or removed (abtt, default 2).")] = None,
    eps: Annotated[float, typer.Option("--eps", metavar="EPS", help="Added to each eigenvalue before 1/sqrt.")] = 0.0,
    save_transform: Annotated[str | None, typer.Option("--save-transform", metavar="FILE.npz",
                                                       help="Save the transform (.npz, no pickle).")] = None,
    transform: Annotated[str | None, typer.Option("--transform", metavar="FILE.npz",
                                                  help="Apply a saved transform instead of fitting one.")] = None,
    partition_isotropy: Annotated[bool, typer.Option("--partition-isotropy", help="Also partition isotropy before "
                                                     "and after (more arithmetic in the second pass).")] = False,
    scale: Annotated[str, typer.Option("--scale", metavar="seed|none",
                                       help="The scale s of partition isotropy's Z(c): seed (the std of all "
                                       "entries) | none (1).")] = "seed",
    json: Json = False,
    *,
    reading: ReadKeywords,
) -> None:
    """Whiten (zca, pca, abtt) to a file; report spectrum and isotropy before and after.

    \b
    Examples:
      spectra whiten emb.npy --method zca -o white.npy --save-transform t.npz
      spectra whiten new.parquet --transform t.npz -o new_white.parquet
    """
    from spectra_cli.errors import OptionError, param
    from spectra_cli.render.progress import LazyProgress
    from spectra_cli.run.whiten import whiten as run_whiten

    if not out:
        raise OptionError(f"whiten needs {param('out')} FILE (.npy or .parquet).")
    with LazyProgress(f"whitening {describe_paths(paths)}") as progress:
        report = run_whiten(
            paths, out=out, method=method, k=k, eps=eps, transform=transform, save_transform=save_transform,
            partition_isotropy=partition_isotropy, scale=scale, progress=progress, **reading)
    from spectra_cli.render.figures import wrote

    emit(report.to_dict(), json, written=(out, *((save_transform,) if save_transform else ())))
    wrote(out)
    if save_transform:
        wrote(save_transform)


@app.command()
def synth(
    kind: Annotated[str, typer.Argument(metavar="KIND", help="powerlaw | isotropic | cone | random-features",
                                        show_default=False)],
    n: Annotated[int, typer.Option("-n", metavar="N", help="Rows.")] = 10000,
    d: Annotated[int, typer.Option("-d", metavar="D", help="Features.")] = 256,
    out: Annotated[str, typer.Option("-o", "--output", metavar="FILE", help="Output .npy or .parquet (written "
                                     "atomically).")] = "",
    alpha: Annotated[float, typer.Option("--alpha", metavar="A", help="Eigenvalue exponent (powerlaw, "
                                         "random-features).")] = 1.0,
    seed: Annotated[int, typer.Option("--seed", metavar="S", help="Seed of numpy.random.default_rng.")] = 0,
    offset: Annotated[float, typer.Option("--offset", metavar="X", help="Mean offset along a random unit vector "
                                          "(powerlaw), in units of sqrt(lambda_1).")] = 0.0,
    activation: Annotated[str, typer.Option("--activation", metavar="NAME", help="linear | quadratic | relu | tanh "
                                            "(random-features).")] = "linear",
    input_dim: Annotated[int | None, typer.Option("--input-dim", metavar="V", help="Input width v of "
                                                  "random-features (default 4d).")] = None,
    dtype: Annotated[str, typer.Option("--dtype", metavar="DTYPE", help="float32 | float64 | float16.")] = "float32",
    max_memory: MaxMemory = None,
) -> None:
    """Write a seeded synthetic matrix with a known spectrum (for calibration and tests).

    \b
    What to expect from spectra fit on it:
      powerlaw          covariance eigenvalues j^-alpha exactly: fit gives alpha (at small n/d the
                        sample slope is biased upward: --population corrects it)
      isotropic, cone   a flat spectrum; a cone with one direction above it
      random-features   linear: about j^-alpha over the head (ranks << d); quadratic:
                        (log(j+1) / j)^alpha (Paquette, Xiao & Zhu 2026, Theorem 1), whose plain
                        power-law slope is lower (alpha 1.31 fits about 0.9): fit it with
                        --model log-corrected --degree 2; relu, tanh: about alpha, no closed form
    \b
    Examples:
      spectra synth powerlaw --alpha 1.3 -n 50000 -d 1024 --seed 0 -o x.npy
      spectra synth random-features --alpha 1.31 --activation quadratic -o rf.npy
    """
    from spectra_cli.run.synth import synth as run_synth

    done = run_synth(kind, out=out, n=n, d=d, seed=seed, alpha=alpha, offset=offset, activation=activation,
                     input_dim=input_dim, dtype=dtype, max_memory=max_memory)
    sys.stderr.write(f"wrote {done['path']}: {n} x {d} {dtype} ({kind}, seed {seed})\n")
    expect = {"powerlaw": f"covariance eigenvalues j^-{alpha:g}",
              "random-features": {"linear": f"about j^-{alpha:g} over the head",
                                  "quadratic": f"(log(j+1)/j)^{alpha:g}: fit it with --model log-corrected --degree 2 "
                                               "(a plain power-law fit gives a lower slope)"}.get(activation)}.get(kind)
    if expect:
        sys.stderr.write(f"expected spectrum: {expect}\n")


@app.command()
def info(
    paths: Paths, key: Key = None, column: Column = None, columns: Columns = None, json: Json = False,
) -> None:
    """Shape, dtype, layout, columns and row groups of an input, without reading its rows.

    \b
    Examples:
      spectra info model.safetensors
      spectra info dump.parquet --json
    """
    from spectra_cli.render.screens import print_info
    from spectra_cli.run.info import info as run_info

    doc = run_info(paths, key=key, column=column, columns=split_columns(columns))
    emit(doc, json, lambda d, console: print_info(doc["path"], d, console))
    if not json:  # with --json, emit writes them to stderr itself
        from spectra_cli.errors import flag_text

        for w in doc.get("warnings", []):
            sys.stderr.write(f"warning: {flag_text(w)}\n")


@app.command()
@reading_options(exclude=tuple(ACCUMULATE_REFUSES))
def moments(
    paths: Paths,
    out: Annotated[str, typer.Option("-o", "--output", metavar="FILE.npz", help="The moment file (plain arrays, "
                                     "no pickle; written atomically).")] = "",
    groups: Annotated[int, typer.Option("--groups", metavar="G", help="Also keep G row groups (for --ci's "
                                        "bootstrap and --population's sampling curve on the merged moments; 32 "
                                        "is their default).")] = 0,
    *,
    reading: ReadKeywords,
) -> None:
    """One pass over a shard into a moment file; moment files merge exactly in fit and spectrum.

    \b
    Examples:
      spectra moments shard_000.parquet -o m000.npz        # on any machine, a job array, cron
      spectra fit 'm*.npz' --json > report.json             # every analysis of fit from merged moments
    """
    from spectra_cli.render.progress import LazyProgress
    from spectra_cli.run import matrix as api

    with LazyProgress(f"reading {describe_paths(paths)}") as progress:
        acc = api.moments(paths, out=out, groups=groups, progress=progress, **reading)
    sys.stderr.write(f"wrote {out}: moments of {acc.n} rows x {acc.d} features ({acc.precision})\n")


@app.command()
def capture(
    model: Annotated[str, typer.Argument(metavar="MODEL_DIR", help="A local Hugging Face model folder (config, "
                                          "weights, tokenizer); nothing is downloaded.")],
    texts: Annotated[str, typer.Option("--texts", metavar="FILE", help="The texts: .txt (one a line), .jsonl "
                                       "(--column field) or Parquet (--column column).")],
    modules: Annotated[str, typer.Option("--modules", metavar="PATTERN", help="Which modules: a glob of their "
                                         "names ('encoder.layer.*': * is one dotted part) or a regular "
                                         "expression.")],
    out: Annotated[str, typer.Option("-o", "--output", metavar="DIR", help="Folder of the moment files, one per "
                                     "module (made when missing).")],
    step: Annotated[int | None, typer.Option("--step", metavar="N", help="Write DIR/step_N/<module>.npz: a "
                                             "snapshot of a run.")] = None,
    groups: Annotated[int, typer.Option("--groups", metavar="G", help="Row groups kept for --ci and --population "
                                        "(32 serve both).")] = 32,
    precision: Annotated[str, typer.Option("--precision", metavar="P", help="float32 (each block's product added "
                                           "in float64) | float64 products.")] = "float32",
    positions: Annotated[str | None, typer.Option("--positions", metavar="K1:K2", help="Only these positions "
                                                  "('1:' leaves out CLS).")] = None,
    batch_size: Annotated[int, typer.Option("--batch-size", metavar="B", help="Texts per forward pass.")] = 32,
    max_length: Annotated[int, typer.Option("--max-length", metavar="L", help="Tokens per text at most.")] = 512,
    max_tokens: Annotated[int | None, typer.Option("--max-tokens", metavar="N", help="Stop after about N "
                                                   "tokens.")] = None,
    column: Annotated[str, typer.Option("--column", metavar="NAME", help="The text field or column.")] = "text",
    device: Annotated[str, typer.Option("--device", metavar="DEV", help="cpu, cuda, cuda:1, ...")] = "cpu",
    attention: Annotated[str, typer.Option("--attention", metavar="IMPL", help="The attention implementation the "
                                           "model is loaded with: sdpa (eager where the model has none) | eager; "
                                           "the folder's config is not followed.")] = "sdpa",
    max_memory: MaxMemory = None,
    json: Json = False,
) -> None:
    """Run a model over texts and keep every matching module's activations as moment files (padding left out).

    \b
    Examples:
      spectra capture ./my-model --texts corpus.txt --modules 'encoder.layer.*' -o moments/
      spectra batch moments/ --jsonl layers.jsonl && spectra report layers.jsonl -o layers.html
    """
    from spectra_cli.capturing.command import capture as run_capture
    from spectra_cli.render.progress import LazyProgress

    with LazyProgress(f"capturing {model}") as progress:
        cap = run_capture(model, modules=modules, texts=texts, out=out, step=step, groups=groups,
                          precision=precision, positions=positions, batch_size=batch_size, max_length=max_length,
                          max_tokens=max_tokens, column=column, device=device, attention=attention,
                          max_memory=max_memory, progress=progress)
    rows = [{"module": name, "rows": cap.rows(name), "file": path}
            for name, path in zip([n for n in cap.modules if cap.rows(n)], cap.saved, strict=True)]
    doc = {"model": model, "texts": cap.texts_read, "tokens": cap.tokens_read, "output": out, "step": step,
           "modules": rows}

    def render(d: dict, console: object) -> None:
        from rich.table import Table

        folder = os.path.dirname(d["modules"][0]["file"]) if d["modules"] else d["output"]
        console.print(f"{d['texts']:,} texts, {d['tokens']:,} tokens through {d['model']}", soft_wrap=True)  # type: ignore[attr-defined]
        console.print(f"moment files in {folder}", soft_wrap=True)  # type: ignore[attr-defined]
        t = Table()
        for c in ("module", "rows", "file"):
            t.add_column(c, justify="right" if c == "rows" else "left", overflow="fold")
        for r in d["modules"]:  # (the folder said once, in the title)
            t.add_row(r["module"], f"{r['rows']:,}", os.path.basename(r["file"]))
        console.print(t)  # type: ignore[attr-defined]

    emit(doc, json, render)


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
    from spectra_cli.render.figures import check_plot_options
    from spectra_cli.render.progress import LazyProgress
    from spectra_cli.run.sequence import sequence as run

    check_plot_options(plot, title)
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
