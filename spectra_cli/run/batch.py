"""``spectra batch``: many matrices (files, directories, globs, every 2-D tensor of safetensors
checkpoints), analysed in worker processes, one JSON line per item.

Each successful line is a ``fit`` report (the same schema) with ``item`` added; a failed item is
``{"schema": "spectra.batch-error/1", "item", "fingerprint", "error"}`` and does not stop the batch.
``resume`` skips items whose line is already in the output with the same fingerprint.

The orchestration only: the items are listed by :mod:`~spectra_cli.run.batch_items`, run by
:mod:`~spectra_cli.run.batch_workers`, appended to :mod:`~spectra_cli.run.results_file`, and returned
as a :class:`~spectra_cli.run.batch_result.BatchResult`.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Unpack

from spectra_cli.analysis.fit_options import FitKeywords, FitOptions
from spectra_cli.errors import InputError, OptionError, SpectraError, for_caller, param
from spectra_cli.options import Convention
from spectra_cli.run.batch_items import Item, Skip, adapter_items, enumerate_items, match_base
from spectra_cli.run.batch_result import BatchResult
from spectra_cli.run.batch_workers import run_batch
from spectra_cli.run.matrix import keywords_checked
from spectra_cli.run.results_file import ResultsFile
from spectra_cli.sources import formats
from spectra_cli.validate import check_number, check_path, check_paths


def expected_options(options: dict[str, Any]) -> dict[str, Any]:
    """The report ``options`` section a line made with ``options`` (the reading keywords of ``fit`` and its
    :class:`FitOptions` as ``options``, made once by the batch) carries."""
    from spectra_cli.options import ReadOptions

    fit = options["options"]
    reading = {k: v for k, v in options.items() if k not in ("options", "change_centered")}
    if "change_centered" in options:  # (a batch of changes: each line is the change's report)
        reading["centered"] = options["change_centered"]
    read = ReadOptions.create(**reading)
    return {"options": {**read.to_report(), **fit.to_report()}}


def _cost(it: Item) -> float:
    """An item's flops, roughly (its Gram product and its eigendecomposition; 0 where its shape is unknown): the
    order a pool of workers takes them in (Graham's longest processing time first)."""
    if it.shape is None or len(it.shape) != 2:
        return 0.0
    if it.adapter is not None and not it.adapter.dora and it.base is None and it.adapter.base is None:
        return float(it.adapter.rank) ** 3  # (the r x r problem)
    rows, cols = it.shape
    small = min(rows, cols)
    return float(max(rows, cols)) * small * small + 4.0 * small ** 3


@dataclass
class BatchRun:
    """What :func:`run_to_jsonl` did: the new lines, the items skipped by ``resume``, notes."""

    results: list[dict[str, Any]]
    skipped: int
    notes: list[str]
    option_mismatch: list[str]
    retried: int = 0


def run_to_jsonl(items: list[Item], options: dict[str, Any], *, jsonl: str | None, resume: bool = False,
                 workers: int = 1, engine: str = "local", scheduler: str | None = None,
                 allow_option_mismatch: bool = False, skipped: list[Skip] | None = None,
                 on_result: Callable[[dict[str, Any]], None] | None = None, overwrite: bool = False,
                 connect_timeout: float = 5.0, verbose: bool = False) -> BatchRun:
    """Run the items (skipping, with ``resume``, those already in ``jsonl`` with the same
    fingerprint and options) and append each finished line to ``jsonl`` as it comes. ``skipped``
    tensors get a ``spectra.batch-skipped/1`` line each (once, also across resumes)."""
    if resume and not jsonl:
        raise OptionError(f"{param('resume')} needs {param('jsonl')} FILE (the results to resume from).")
    expected = expected_options(options)
    results: list[dict[str, Any]] = []
    if resume and overwrite:
        raise OptionError(f"{param('resume')} keeps the results already in {param('jsonl')} and {param('overwrite')} "
                          "replaces them: give one.")
    read = [it.name for it in items] + [b for it in items for b in (it.base, it.adapter and it.adapter.base) if b]
    out = ResultsFile(jsonl, resume=resume, inputs=read, expected=expected,
                      allow_mismatch=allow_option_mismatch, overwrite=overwrite) if jsonl else None
    try:
        done = out.done if out is not None else {}
        todo = [it for it in items if it.fingerprint not in done]
        if workers > 1 and engine == "local":  # the longest first, so that no worker is left with one at the end
            todo.sort(key=_cost, reverse=True)
        from spectra_cli.jsonio import dumps

        for sk in skipped or ():
            if sk.fingerprint not in done:
                line = sk.to_dict()
                if out is not None:
                    out.write(dumps(line, indent=None))
                if on_result is not None:
                    on_result(line)
        for doc in run_batch(todo, options, workers=workers, engine=engine, scheduler=scheduler,
                             connect_timeout=connect_timeout, verbose=verbose):
            if out is not None:
                out.write(dumps(doc, indent=None))
            results.append(doc)
            if on_result is not None:
                on_result(doc)
    finally:
        if out is not None:
            out.close()
    notes = out.notes if out is not None else []
    return BatchRun(results, len(items) - len(todo), notes, out.mismatch if out is not None else [],
                    out.retried if out is not None else 0)


#: From this width (the smaller side, the Gram's order) a checkpoint's matrices are large: where float32 products and
#: LAPACK's float32 eigensolver win (:data:`~spectra_cli.eigen.decomposition.FLOAT32_SOLVER_MIN_ORDER`), and where two
#: workers on one thread each beat one on every core (LAPACK's two-stage driver; the performance page).
LARGE_WIDTH = 3072
#: The 16-bit floats a checkpoint stores: float32 products keep every bit of them.
HALF_DTYPES = ("BF16", "F16")
#: A worker's peak at 4,096 wide in float32 (the Gram, its eigendecomposition, the error groups; measured 0.8 GB).
WORKER_BYTES_PER_WIDTH2 = 50


def large_model_plan(items: list[Item], workers: int | None, precision: str | None, *, engine: str,
                     max_memory: int | None = None) -> tuple[int, str, str | None]:
    """The workers and precision of a batch where not given (None): on a checkpoint whose matrices are
    :data:`LARGE_WIDTH` wide or more, every core a worker (as memory allows), and float32 products where those
    matrices are stored in 16 bits; otherwise one worker and float64. Returns them and a note saying what was chosen,
    or None when nothing was."""
    from spectra_cli.options import memory_budget
    from spectra_cli.threads import usable_cores

    large = [it for it in items if it.shape is not None and len(it.shape) == 2 and min(it.shape) >= LARGE_WIDTH]
    chosen = []
    if workers is None:
        workers = 1
        if large and engine == "local" and len(items) >= 2:
            width = max(min(it.shape) for it in large if it.shape is not None)
            fit = max(1, memory_budget(max_memory) // (WORKER_BYTES_PER_WIDTH2 * width * width))
            workers = max(1, min(usable_cores(), len(items), fit))
            if workers > 1:
                chosen.append(param("workers", workers))
    if precision is None:
        precision = "float64"
        rowless = any(it.adapter is not None or (it.shape is not None and len(it.shape) == 4) for it in items)
        if large and not rowless and all(it.dtype in HALF_DTYPES for it in large):
            precision = "float32"
            chosen.append(param("precision", "float32"))
    if not chosen:
        return workers, precision, None
    width = max(min(it.shape) for it in large if it.shape is not None)
    why = (f"{len(large)} of the {len(items)} matrices are {width:,} wide or so"
           + (", stored in 16-bit floats (float32 products keep every bit of them; the reports state their floors)"
              if precision == "float32" else ""))
    return workers, precision, (f"chose {' '.join(chosen)}: {why}; give {param('workers')} / {param('precision')} to "
                                f"choose ({param('precision', 'float64')} for WeightWatcher's last digits)")


#: What a spectrum computed without rows (a LoRA change's r x r problem, a convolution's slices) cannot honour: each
#: needs the rows (or their moments) of a matrix.
NEEDS_ROWS = ("ci", "population", "spikes", "shuffled_control", "partition_isotropy", "isoscore", "top")


def check_spectrum_only(items: list[Item], fit_options: Any, given: dict[str, Any]) -> None:
    """A batch whose items are spectra computed without rows (LoRA changes without ``base``, whose change is the r x
    r problem; convolution kernels) refuses the options that need rows, by name, rather than dropping them."""
    low_rank = [it for it in items if it.adapter is not None and not it.adapter.dora]
    kernels = [it for it in items if it.adapter is None and it.shape is not None and len(it.shape) == 4]
    if not low_rank and not kernels:
        return
    what = ("a LoRA change's spectrum comes from its r x r problem" if low_rank else
            "a convolution's spectrum comes from its slices' singular values")
    asked = [k for k in NEEDS_ROWS if getattr(fit_options, k) not in (False, None, 0)]
    asked += [k for k, v in given.items()
              if v is not None and not (k == "pool" and v == "tokens") and not (k == "precision" and v == "float64")]
    if asked:
        raise OptionError(f"{', '.join(param(k) for k in asked)} need(s) the rows of a matrix; {what}, without rows "
                          f"(leave it out, or select the dense matrices with {param('tensors')}).")


def _precision_of(jsonl: str) -> str | None:
    """The precision the first report of a results file was made with (None: no such line, or no file)."""
    from spectra_cli.jsonio import loads
    from spectra_cli.sources.base import open_regular

    try:
        with open_regular(jsonl) as f:
            for raw, _ in zip(f, range(100), strict=False):  # (the first lines: a results file's lines agree)
                try:
                    doc = loads(raw, jsonl)
                except SpectraError:
                    continue
                precision = (doc.get("options") or {}).get("precision") if isinstance(doc, dict) else None
                if precision in ("float64", "float32"):
                    return str(precision)
    except (OSError, SpectraError):
        return None  # (the results file's own checks say what is wrong with it)
    return None


def _items(args: list[str], base: str | None, tensors: str | None, *,
           kernels: bool = False) -> tuple[list[Item], Any, bool]:
    """A batch's items, what was skipped, and whether they are LoRA adapters' layers."""
    from spectra_cli.sources.adapter import is_adapter

    adapters = [p for p in args if is_adapter(p)]
    if adapters and len(adapters) != len(args):
        raise OptionError(f"{adapters[0]} is a LoRA adapter folder: give only adapter folders (each analysed as its "
                          "layers' changes), or only matrices.")
    if adapters:
        return (*adapter_items(args, base, tensors), True)
    items, listing = enumerate_items(args, tensors, kernels=kernels or base is not None)
    if base is not None:
        items = match_base(items, base, tensors, listing)
    return items, listing, False


@keywords_checked  # (which also holds threads=N for the whole call: the workers take it as their share)
def batch(
    paths: str | os.PathLike[str] | list[str] | tuple[str, ...],
    *,
    jsonl: str | os.PathLike[str] | None = None,
    resume: bool = False,
    overwrite: bool = False,
    workers: int | None = None,
    tensors: str | None = None,
    base: str | os.PathLike[str] | None = None,
    centered: bool | None = None,
    ddof: int = 1,
    precision: str | None = None,
    block_rows: int | None = None,
    positions: str | None = None,
    pool: str = "tokens",
    engine: str = "local",
    scheduler: str | None = None,
    connect_timeout: float = 5.0,
    verbose: bool = False,
    allow_option_mismatch: bool = False,
    on_result: Callable[[dict[str, Any]], None] | None = None,
    progress: Callable[[int, int], None] | None = None,
    threads: int | None = None,
    **fitting: Unpack[FitKeywords],
) -> BatchResult:
    """Analyse many matrices with :func:`spectra_cli.fit`: files, directories and globs; a ``.safetensors`` checkpoint
    (or a sharded folder) gives one item per 2-D tensor (``tensors``: a regex on their names), and tensors that are
    not weight matrices are skipped with the reason. ``jsonl``: append each item's JSON line to this file as it
    finishes (locked while the batch runs; never an input, never a file that is not a spectra results file);
    ``resume``: keep the items already there with the same fingerprint and options (a cut last line repaired, failed
    items retried); an existing results file is never replaced silently: give ``resume`` or ``overwrite``.
    ``workers`` processes here, or Dask tasks with ``engine="dask"`` (``workers`` a LocalCluster, or ``scheduler``;
    ``connect_timeout``: seconds to wait for it; ``verbose``: Dask's own logs). Every fit keyword of ``fit``
    (``window``, ``method``, ``model``, ``density``, ``alpha_range``, ``top``, ``ci``, ``population``, ...:
    :class:`FitKeywords`) is taken as ``fit`` takes it, for every item; so are ``centered``, ``ddof``, ``precision``,
    ``block_rows``, ``positions`` and ``pool``. ``convention="weightwatcher"``: WeightWatcher's ``analyze()``: its
    layer selection (a checkpoint tensor with fewer than 8 or more than 15,000 eigenvalues, or a side above 50,000,
    is skipped with the reason), uncentred ``W^T W``, the density exponent, its columns by its names
    (``to_pandas()``) and ``summary()`` as its ``get_summary()``. ``on_result(line)`` is called with each line as it
    comes (skips included), ``progress(items_done, items_total)`` once the items are listed and after each. A failed
    item does not stop the batch: it is a line with ``error``. Paths that are all results files (``.jsonl``) are
    read, not run: the result holds their lines (for ``summary()``). ``threads``: BLAS threads of every product here
    and in each worker (default: the thread policy, each worker's share ``cores // workers``). ``workers`` and
    ``precision`` not given (None): one worker and float64, except on a checkpoint of matrices 3,072 wide or more (a
    7B-class model), where every core is a worker (as memory allows) and, when those matrices are stored in 16-bit
    floats, the products are float32 (:func:`large_model_plan`; a note says so). ``base``: a base checkpoint (a file,
    folder or glob, as PATHs): each item becomes the change ``W - W_base`` from the base's tensor of the same name
    (matched by name, or by a unique dotted ending; unmatched or reshaped layers skipped with the reason), analysed
    uncentred unless ``centered`` is given (the squared singular values of the change, over its rows), and its line
    holds the base's and the fine-tune's own metrics side by side (``base_model``: each field of the batch table, the
    change, and compare's test where both give a standard error)."""
    args = check_paths("paths", paths)
    base_path = check_path("base", base) if base is not None else None
    if jsonl is not None:
        jsonl = check_path("jsonl", jsonl)
    if tensors is not None and not isinstance(tensors, str):
        raise OptionError(f"{param('tensors', tensors, show=True)} must be a string (a regular expression).")
    if resume and not jsonl:
        raise OptionError(f"{param('resume')} needs {param('jsonl')} FILE (the results to resume from).")
    fit_options = FitOptions.create(centered=centered, **fitting)  # (once for every item: each is given them)
    given_centered = centered if fit_options.centered is None else fit_options.centered
    convention = fit_options.convention
    centered = fit_options.centered if fit_options.centered is not None else True if centered is None else centered
    results_files = [p for p in args if formats.JSONL.matches(p)]
    if results_files:
        if len(results_files) != len(args):
            raise OptionError("a .jsonl PATH is a results file: give only results files (to summarise them), or "
                              "only matrices.")
        from spectra_cli.run.summary import read_results

        lines = read_results(args)
        made = {Convention.of_report(d) for d in lines if "options" in d}
        return BatchResult(tuple(d for d in lines if "skipped" not in d), tuple(d for d in lines if "skipped" in d),
                           convention=(made.pop() if not convention.is_weightwatcher and len(made) == 1
                                       else convention).value)
    items, listing, adapters = _items(args, base_path, tensors, kernels=convention.is_weightwatcher)
    if convention.is_weightwatcher:  # its layer selection (FitOptions.skip)
        kept = []
        for it in items:
            why = fit_options.skip(it.shape) if it.shape is not None and len(it.shape) in (2, 4) else None
            if why is None:
                kept.append(it)
            else:
                listing.skipped.append(Skip(it.name, "WeightWatcher-skipped layer", why, it.fingerprint))
        if not kept:
            raise InputError(f"no matrices to analyse: WeightWatcher's rules skip all {len(items)} "
                             f"({listing.skipped[-1].reason}).")
        items = kept
    done = [0]

    def on_line(line: dict[str, Any]) -> None:
        if on_result is not None:
            on_result(line)
        if "skipped" not in line and progress is not None:
            done[0] += 1
            progress(done[0], len(items))

    if progress is not None:
        progress(0, len(items))
    check_spectrum_only(items, fit_options, {"precision": precision, "block_rows": block_rows, "positions": positions,
                                             "pool": pool})
    workers, precision, chose = large_model_plan(  # (resumed: the precision of the lines already there)
        items, workers, precision or (_precision_of(os.fspath(jsonl)) if resume and jsonl else None), engine=engine)
    listing.notes += [for_caller(chose)] if chose else []
    options = dict(centered=centered, ddof=ddof, precision=precision, block_rows=block_rows, options=fit_options,
                   **({"positions": positions} if positions is not None else {}),
                   **({"pool": pool} if pool != "tokens" else {}))
    if base_path is not None or adapters:  # (a change is no sample of rows: uncentred, unless asked)
        options["change_centered"] = given_centered if given_centered is not None else False
    out = os.fspath(jsonl) if jsonl is not None else None
    run = run_to_jsonl(items, options, jsonl=out, resume=resume, workers=workers, engine=engine,
                       scheduler=scheduler, allow_option_mismatch=allow_option_mismatch, skipped=listing.skipped,
                       on_result=on_line, overwrite=overwrite,
                       connect_timeout=check_number("connect_timeout", connect_timeout, positive=True), verbose=verbose)
    return BatchResult(tuple(run.results), tuple(s.to_dict() for s in listing.skipped),
                       tuple(it.name for it in items), tuple([*listing.notes, *run.notes]), run.skipped,
                       tuple(run.option_mismatch), out, listing.skip_summary(), run.retried, convention.value)
