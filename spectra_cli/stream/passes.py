"""What an analysis reads, opened once and read in passes.

``data`` may be a path (``.npy``, ``.npz``, Parquet, safetensors, or a moment file written by
:meth:`Accumulator.save`), a numpy array, anything with ``__array__`` or ``__dlpack__`` (torch,
jax, cupy tensors move to host memory), or an :class:`~spectra_cli.stream.accumulator.Accumulator`.
The first pass builds the mergeable states the analyses need; a second pass (partition
isotropy, the shuffled control, whitening) reads the rows again through the same loop.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from spectra_cli.errors import InputError, OptionError, param
from spectra_cli.options import DEFAULT_BLOCK_ROWS, ReadOptions, refuse_over_budget
from spectra_cli.sources import LogitsWeights, Source, SourceInfo, WeightsFile, formats, iter_selected, open_dataset
from spectra_cli.sources.dataset import Dataset, moment_file_problem
from spectra_cli.sources.in_memory import as_array
from spectra_cli.sources.opening import open_input
from spectra_cli.sources.rows import RowSpec, WeightsArray
from spectra_cli.stream import moment_file
from spectra_cli.stream.accumulator import UNBOUNDED, Accumulator
from spectra_cli.stream.isotropy_sums import CosineAccumulator, LogZAccumulator
from spectra_cli.stream.local import Progress, run_pass
from spectra_cli.stream.moments import Moments
from spectra_cli.stream.norms import NormHistogram, coordinate_fourth
from spectra_cli.stream.states import DistinctRows, MomentsState, RowGuard, RowsBuffer, State

#: A block of the default size holds at most this many bytes as float64 (wide matrices get fewer rows).
BLOCK_BYTES = 64 << 20
#: Group moments kept for the bootstrap may use at most this much memory.
GROUP_MEMORY = 1 << 30
MIN_BLOCKS_FOR_GROUPS = 32

def input_paths(dataset: Dataset | None, read: ReadOptions, *others: str | None) -> list[str]:
    """Every file a run reads, for the checks that keep an output off them: the dataset's members
    (and directories), the weights, scores and mask files, and ``others`` (a transform)."""
    named = [read.weights if isinstance(read.weights, str) else None, read.logits,
             read.mask if isinstance(read.mask, str) else None, *others]
    return [*(dataset.guarded_paths() if dataset is not None else []), *(p for p in named if p is not None)]


def merge_moment_files(paths: list[str], *, budget: int | None = None) -> Accumulator:
    """The exact merge of moment files; files of other widths, options or formats are refused,
    naming the file and the difference. ``budget``: bytes the merge may take, checked against the
    files' array headers (the merged moments plus the next file's arrays) before anything is read."""
    acc: Accumulator | None = None
    seen_sources: dict[str, tuple[str, Any]] = {}  # fingerprint of a file's source -> (moment file, its rows)
    for p in paths:
        why = moment_file_problem(p)
        if why is not None:
            raise InputError(f"{p} is not a spectra moment file ({why}).")
        if budget is not None:
            moment_file.check_budget(p, budget, held=acc.held_bytes() if acc is not None else 0)
        one = Accumulator.load(p, max_memory=UNBOUNDED if budget is not None else None)  # checked just above
        if not one.sources:
            one.sources = [{"path": p}]
        for src in one.sources:
            fp = src.get("fingerprint") if isinstance(src, dict) else None
            if isinstance(fp, str) and fp and fp in seen_sources and src.get("rows") == seen_sources[fp][1]:
                raise InputError(f"{p} and {seen_sources[fp][0]} hold the moments of the same rows (source "
                                 f"{src.get('path')}, fingerprint {fp}): merging them would count those rows twice.")
            if isinstance(fp, str) and fp:
                seen_sources[fp] = (p, src.get("rows"))
        if acc is None:
            acc = one
            continue
        try:
            acc.merge(one)
        except OptionError as exc:
            raise InputError(f"{p} cannot be merged with {paths[0]}: {exc}") from None
    assert acc is not None
    return acc


@dataclass(frozen=True, slots=True)
class Accumulated:
    """What the first pass produced: ``moments`` (the d x d route) or ``rows``/``weights``
    (the Gram route, taken when fewer rows than features are selected)."""

    n_features: int
    n_rows: int
    n_dropped: int
    moments: Moments | None
    rows: np.ndarray | None
    weights: np.ndarray | None
    groups: tuple[Moments, ...] = ()
    cosine: CosineAccumulator | None = None
    precision: str = "float64"
    weight_sq_sum: float | None = None
    #: about how many distinct rows the pass saw (:class:`~spectra_cli.stream.states.DistinctRows`; None where no pass
    #: read the rows: moment files, Dask)
    distinct: float | None = None

    @property
    def n_effective(self) -> float | None:
        """Kish's effective sample size ``(sum w)^2 / sum w^2`` of weighted rows (None unweighted)."""
        if not self.weighted or not self.weight_sq_sum:
            return None
        return self.weight_sum * self.weight_sum / self.weight_sq_sum

    @property
    def weight_sum(self) -> float:
        """``sum w`` of the rows used (their count when unweighted)."""
        if self.moments is not None:
            return self.moments.weight_sum
        return float(np.sum(self.weights)) if self.weights is not None else float(self.n_rows)

    @property
    def positive_rows(self) -> int:
        """Rows of positive weight (every row when unweighted): the sample's degrees of freedom before centring."""
        if self.moments is not None:
            return self.moments.n_positive
        return int(np.count_nonzero(self.weights)) if self.weights is not None else self.n_rows

    def constant_columns(self) -> int:
        """Features with exactly zero spread among the used rows."""
        if self.moments is not None:
            return int(np.count_nonzero(np.diag(self.moments.m2) == 0.0))
        assert self.rows is not None
        return int(np.count_nonzero(np.ptp(self.rows, axis=0) == 0.0))

    def mean(self) -> np.ndarray:
        if self.moments is not None:
            return self.moments.mean * self.moments.scale
        assert self.rows is not None
        if self.weights is not None:
            return (self.weights @ self.rows) / self.weights.sum()
        return self.rows.mean(axis=0)

    @property
    def weighted(self) -> bool:
        return self.moments.weighted if self.moments is not None else self.weights is not None

    def norm_histogram(self) -> NormHistogram | None:
        """The histogram of the rows' weighted squared norms about the mean (:mod:`spectra_cli.stream.norms`):
        gathered block by block in the pass, or from the rows themselves on the n x n route. None for
        moments that were saved without it."""
        if self.moments is not None:
            return self.moments.norms  # (kept in the data's units, whatever the moments' scale)
        assert self.rows is not None
        y = self.rows - self.mean()
        q = np.einsum("ij,ij->i", y, y)
        if self.weights is not None:
            return NormHistogram.of((self.weights * q)[self.weights > 0])
        return NormHistogram.of(q).with_fourth(*coordinate_fourth(y))

    def centred_quadratic(self, v: np.ndarray) -> float:
        """``v^T C v`` with ``C = sum_i p_i (x_i - mean)(x_i - mean)^T`` (``p = w / sum w``)."""
        if self.moments is not None:
            m = self.moments
            return float(v @ (m.m2 @ v)) * m.scale * m.scale / m.weight_sum if m.weight_sum else 0.0
        assert self.rows is not None
        y = (self.rows - self.mean()) @ v
        p = np.full(len(y), 1.0 / len(y)) if self.weights is None else self.weights / self.weights.sum()
        return float(p @ (y * y))


class Input:
    """An opened input (use as a context manager)."""

    def __init__(self, data: Any, read: ReadOptions) -> None:
        """``data``: anything :func:`~spectra_cli.sources.opening.open_input` tells the kind of (or its
        :class:`~spectra_cli.sources.opening.Opening`): rows, moments or a Dask array."""
        self.read = read
        self.accumulator: Accumulator | None = None
        self.source: Source | None = None
        self.path: str | None = None
        self.weights: WeightsFile | LogitsWeights | WeightsArray | None = None
        self.dask_array: Any = None
        self.dataset: Dataset | None = None
        self.block_rows_used: int | None = None  # set by the first pass
        self.change: Any = None  # a Change (two checkpoints' tensors), when that is the input
        opening = open_input(data)
        if opening.kind == "eigenvalues":
            raise OptionError("eigenvalues computed elsewhere have no rows to read (fit and spectrum take them with "
                              f"{param('eigenvalues', True)}).")
        data = opening.data
        if opening.kind == "dask array":
            if data.ndim != 2:
                raise InputError(f"a dask array must be 2-D (rows, features) chunked by rows; got shape {data.shape}.")
            self.dask_array = data
            self.read = read = replace(read, engine="dask")
            self.info = SourceInfo(path="<dask array>", format="array", shape=tuple(data.shape), dtype=str(data.dtype),
                                   n_rows=int(data.shape[0]), n_features=int(data.shape[1]),
                                   layout=f"matrix (dask array, {len(data.chunks[0])} row chunks)")
            if read.weighted or read.rows.start is not None or read.rows.stop is not None or read.sequence:
                raise OptionError("a dask array is analysed whole and unweighted: rows, weights and sequence options "
                                  "apply to files.")
            return
        self.change = data if opening.kind == "change" else None
        if self.change is not None and read.engine != "local":
            raise OptionError(f"the change between two checkpoints' tensors is read here; {param('engine', 'dask')} "
                              "runs a batch's items as Dask tasks instead (spectra batch --engine dask).")
        if opening.kind == "accumulator":
            self.accumulator = data
        elif self.change is not None:
            self.source = self.change.open()
            self.path = self.change.name
        elif (ds := opening.dataset) is not None:
            self.dataset = ds
            self.path = ds.name
            if ds.is_moments:
                self.accumulator = merge_moment_files(ds.member_paths(), budget=read.memory_budget())
            else:
                self.source = open_dataset(ds, key=read.key, column=read.column,
                                           columns=list(read.columns) if read.columns else None,
                                           weight_column=read.weight_column or read.doc_column)
        else:
            from spectra_cli.sources.in_memory import ArraySource

            self.source = ArraySource(as_array(data, what="data"))
        if self.source is not None and (read.sequence or len(self.source.info.shape) == 3):
            from spectra_cli.sources.windows import SequenceSource

            try:
                self.source = SequenceSource(self.source, length=read.positions_per_window,
                                             positions=read.positions, pool=read.pool, mask=read.mask,
                                             doc_column=read.doc_column, mask_column=read.mask_column)
            except BaseException:
                self.source.close()
                raise
        if self.accumulator is not None:
            self._refuse_row_options()
            acc = self.accumulator
            self.info = SourceInfo(path=self.path or "<accumulator>", format=formats.MOMENTS.name, shape=(acc.n, acc.d),
                                   dtype=acc.precision, n_rows=acc.n, n_features=acc.d,
                                   layout="accumulated moments (no rows)",
                                   files=len(self.dataset.members) if self.dataset is not None else 1)
            return
        assert self.source is not None
        self.info = self.source.info
        try:
            self.weights = self._open_weights()
        except BaseException:
            self.source.close()
            raise

    def _open_weights(self) -> WeightsFile | LogitsWeights | WeightsArray | None:
        read, n = self.read, self.info.n_rows
        if isinstance(read.weights, str):
            return WeightsFile(read.weights, n)
        if isinstance(read.weights, np.ndarray):
            return WeightsArray(read.weights, n)
        if read.logits is not None:
            return LogitsWeights(read.logits, n, read.temperature)
        return None

    def _refuse_row_options(self) -> None:
        """Accumulated moments have no rows: every reading option that selects, weights, shapes or reads
        rows is refused by name (never silently ignored); ``centered``, ``ddof`` and ``max_memory`` apply."""
        r = self.read
        given = [name for name, v in (("rows", r.rows.start is not None or r.rows.stop is not None),
                                      ("sample", r.rows.sample is not None), ("weights", r.weights is not None),
                                      ("weight_column", r.weight_column is not None),
                                      ("logits", r.logits is not None), ("key", r.key is not None),
                                      ("column", r.column is not None), ("columns", r.columns is not None),
                                      ("positions", r.positions is not None), ("pool", r.pool != "tokens"),
                                      ("mask", r.mask is not None),
                                      ("positions_per_window", r.positions_per_window is not None),
                                      ("doc_column", r.doc_column is not None),
                                      ("mask_column", r.mask_column is not None)) if v]
        if given:
            raise OptionError(f"{', '.join(param(g) for g in given)} select(s) rows or weights of a data matrix; "
                              "accumulated moments have no rows to select.")
        made = [name for name, v in (("precision", r.precision != "float64"), ("block_rows", r.block_rows is not None),
                                     ("drop_nonfinite", r.drop_nonfinite), ("engine", r.engine != "local")) if v]
        if made:
            raise OptionError(f"{', '.join(param(g) for g in made)} choose(s) how rows are accumulated; these moments "
                              "were accumulated already (the report states how): leave it out.")

    def __enter__(self) -> Input:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        if self.source is not None:
            self.source.close()

    def description(self) -> str:
        """What a Dask worker opens: the path (the reading options travel beside it)."""
        if self.path is None:
            raise OptionError(f"{param('engine', 'dask')} reads paths and dask arrays; an in-memory array is "
                              "already on this machine: run it with the local engine.")
        return self.path

    def feed(self, states: list[State], guard: RowGuard, rows: RowSpec | None = None) -> None:
        """Every selected row (or ``rows``) through ``guard`` into ``states`` (the loop of a task)."""
        assert self.source is not None
        spec = rows or self.read.rows
        run_pass(iter_selected(self.source, spec, self.block_rows, self.weights), states, guard,
                 total=spec.n_selected(self.info.n_rows))

    @property
    def precision(self) -> str:
        return self.accumulator.precision if self.accumulator is not None else self.read.precision

    @property
    def block_rows(self) -> int:
        """Rows per block: as given, or by default 8192, shrunk for wide matrices so a
        block's float64 copy stays within BLOCK_BYTES (64 MiB: 2,048 rows at d = 4,096), but never
        below d / 2 rows: each block also costs a few passes over a d x d matrix, which must stay
        small next to its product (at d = 8,192, 1,024-row blocks took the accumulation from 37 s
        to 65 s; memory stays O(d^2): a block of d / 2 rows is a quarter of the d x d moments)."""
        rows = self.read.block_rows
        if rows is None:
            d = max(self.info.n_features, 1)
            rows = max(256, min(DEFAULT_BLOCK_ROWS, max(BLOCK_BYTES // (8 * d), d // 2)))
        return rows

    def first_pass_blocks(self, total: int, *, groups: int,
                          min_blocks: int = MIN_BLOCKS_FOR_GROUPS) -> tuple[int, int, int | None]:
        """Rows per block of the first pass, the groups and the block count: :attr:`block_rows`, or,
        when ``groups`` bootstrap groups are kept, small enough that the rows make at least
        ``min_blocks`` blocks (``MIN_BLOCKS_FOR_GROUPS``, 32, for the bootstrap: 3,000 rows make 94-row blocks; the
        standard errors' 16 groups ask for 16, and keep a block size the user gave). Decided here only; the report
        states the rows per block this returned (``options.block_rows``)."""
        block_rows = self.block_rows
        if groups <= 0:
            return block_rows, 0, None
        kept = self.read.block_rows is not None and min_blocks < MIN_BLOCKS_FOR_GROUPS  # (a user's, for the errors)
        if -(-total // block_rows) < min_blocks and not kept:
            block_rows = max(1, -(-total // min_blocks))
            # a sequence dump's tokens, every position of every window kept: blocks (so groups) of whole windows,
            # so that a window's tokens, which are not independent, never fall in two groups
            seq = self.info.details.get("sequence") or {}
            whole = len(seq.get("positions_used") or ())
            if seq.get("pool") == "tokens" and whole > 1 and not seq.get("masked_tokens") \
                    and self.read.rows == RowSpec():
                block_rows = whole * -(-block_rows // whole)
        return block_rows, groups, -(-total // block_rows)

    @property
    def n_selected(self) -> int:
        return self.read.rows.n_selected(self.info.n_rows) if self.source is not None else self.info.n_rows

    # -- passes --------------------------------------------------------------------------------
    def first_pass(self, *, groups: int = 0, min_blocks: int = MIN_BLOCKS_FOR_GROUPS, cosine: bool = False,
                   gram: bool = True,
                   progress: Progress | None = None, min_rows: int = 2) -> Accumulated:
        """One pass over the selected rows into the states the analyses asked for."""
        if self.accumulator is not None:
            return self._from_accumulator(groups=groups, cosine=cosine)
        if self.read.distributed:
            return self._first_pass_dask(groups=groups, cosine=cosine, min_rows=min_rows)
        assert self.source is not None
        info, read = self.info, self.read
        d, total = info.n_features, self.n_selected
        if d == 0:
            raise InputError(f"{info.path} has 0 columns (shape {info.shape}); at least 1 feature is required.")
        if total == 0:
            raise InputError(f"{info.path} has 0 rows (shape {info.shape}); at least 2 are required.")
        weighted = self.weights is not None or self.source.has_weights
        use_gram = gram and total < d
        # the groups' d x d matrices stay within GROUP_MEMORY: wide rows keep fewer groups than asked, and their blocks
        # are planned for the groups kept (each block costs passes over d x d matrices: at d = 4,096 with 8 groups,
        # 16 blocks of 512 rows took 1 s more than 8 of 1,024; the groups are the same rows), unless the user set
        # the block size
        kept = max(1, GROUP_MEMORY // (8 * d * d))
        block_rows, n_groups, n_blocks = self.first_pass_blocks(
            total, groups=0 if use_gram else groups,
            min_blocks=min(min_blocks, kept) if self.read.block_rows is None else min_blocks)
        if n_blocks is not None:
            n_groups = max(1, min(groups, n_blocks, kept))
        self.block_rows_used = block_rows
        self.check_memory(d, total, use_gram=use_gram, extra_matrices=n_groups)
        main: MomentsState | RowsBuffer = RowsBuffer(total, d, weighted=weighted) if use_gram else MomentsState(
            d, weighted=weighted, precision=read.precision, groups=n_groups, n_blocks=n_blocks, block_rows=block_rows)
        cos = CosineAccumulator(d, dtype=read.dtype) if cosine else None
        copies = DistinctRows(d)
        states: list[State] = [main, copies] + ([cos] if cos is not None else [])
        guard = RowGuard(info.path, drop_nonfinite=read.drop_nonfinite, tiny_weights=read.logits is not None)
        run_pass(iter_selected(self.source, read.rows, block_rows, self.weights), states, guard, total=total,
                 progress=progress)
        rows: np.ndarray | None = None
        wts: np.ndarray | None = None
        moments: Moments | None = None
        grp: tuple[Moments, ...] = ()
        if isinstance(main, RowsBuffer):
            rows, wts = main.matrix()
            n_used = len(rows)
            total_w = float(wts.sum()) if wts is not None else float(n_used)
        else:
            moments, grp = main.moments, main.filled_groups()
            n_used, total_w = moments.n, moments.weight_sum
        if n_used < min_rows:
            raise InputError(f"{info.path} has {n_used} usable row{'s' if n_used != 1 else ''} "
                             f"(shape ({n_used}, {d})); at least {min_rows} {'are' if min_rows > 1 else 'is'} "
                             "required.")
        if weighted and total_w == 0.0:
            raise InputError("all weights are zero; at least one row needs a positive weight.")
        w2 = float(np.dot(wts, wts)) if wts is not None else (main.weight_sq_sum if isinstance(main, MomentsState)
                                                              else None)
        return Accumulated(d, n_used, guard.dropped, moments, rows, wts, grp, cos, read.precision, w2,
                           distinct=copies.estimate())

    def _first_pass_dask(self, *, groups: int, cosine: bool, min_rows: int) -> Accumulated:
        from spectra_cli.stream import cluster as dask_engine

        d = self.info.n_features
        self.check_memory(d, self.n_selected, use_gram=False, extra_matrices=min(groups, 32))
        ms, cos, dropped = dask_engine.first_pass(self, groups=groups, cosine=cosine)
        m = ms.moments
        if m.n < min_rows:
            raise InputError(f"{self.info.path} has {m.n} usable row(s); at least {min_rows} are required.")
        if m.weighted and m.weight_sum == 0.0:
            raise InputError("all weights are zero; at least one row needs a positive weight.")
        return Accumulated(d, m.n, dropped, m, None, None, ms.filled_groups() if groups else (), cos,
                           self.read.precision, ms.weight_sq_sum)

    def _from_accumulator(self, *, groups: int, cosine: bool) -> Accumulated:
        acc = self.accumulator
        assert acc is not None
        if acc.n < 2:
            raise InputError(f"{self.info.path} holds {acc.n} row(s); at least 2 are required.")
        if acc.weighted and acc.moments.weight_sum == 0.0:
            raise InputError("all weights are zero; at least one row needs a positive weight.")
        self.check_memory(acc.d, acc.n, use_gram=False, extra_matrices=0)
        return Accumulated(acc.d, acc.n, acc.n_dropped, acc.moments, None, None, acc.groups if groups else (),
                           acc.cosine if cosine else None, acc.precision, acc.weight_sq_sum)

    def logz_pass(self, V: np.ndarray, s: float, dtype: np.dtype, *, need: str,
                  progress: Progress | None = None) -> LogZAccumulator:
        """log Z(c) of every direction (the columns of ``V``, scores divided by ``s``): a second pass,
        here or as Dask tasks."""
        if self.read.distributed:
            from spectra_cli.stream import cluster

            return cluster.logz_pass(self, V, s)
        logz = LogZAccumulator(V, s, dtype=dtype)
        self.second_pass([logz], need=need, progress=progress)
        return logz

    def second_pass(self, states: list[State], *, need: str, progress: Progress | None = None,
                    rows: RowSpec | None = None) -> None:
        """The selected rows (or ``rows``) once more, through the same loop (rows the first pass
        dropped are dropped again). ``need`` names the analysis, for the error an Accumulator gets."""
        if self.source is None:
            raise OptionError(f"{need} needs a second pass over the rows; accumulated moments (an Accumulator or "
                              "a moment file) cannot give it: pass the data itself, or leave that analysis out.")
        spec = rows or self.read.rows
        guard = RowGuard(self.info.path, drop_nonfinite=True)
        named = getattr(progress, "stage", None)
        if callable(named):  # the bar restarts under the second pass's name
            from spectra_cli.errors import flag_text

            named(f"second pass: {flag_text(need)}", spec.n_selected(self.info.n_rows))
        run_pass(iter_selected(self.source, spec, self.block_rows, self.weights), states, guard,
                 total=spec.n_selected(self.info.n_rows), progress=progress)

    def check_memory(self, d: int, n: int, *, use_gram: bool, extra_matrices: int = 0) -> None:
        """Refuse, before reading, a run whose matrices would not fit the memory budget."""
        if use_gram:
            need = 8.0 * n * d + 3 * 8.0 * n * n
            what = f"{n} rows of {d} features and {n} x {n} float64 Gram matrices"
        else:
            need = (3 + extra_matrices) * 8.0 * d * d
            what = f"{3 + extra_matrices} float64 matrices of {d} x {d}"
        refuse_over_budget(self.info.path, "the spectrum", need, what, self.read.memory_budget())

    # -- what the report says about the input ------------------------------------------------------
    def source_report(self, first: Accumulated | None) -> dict[str, Any]:
        out = self.info.to_dict()
        spec = self.read.rows if self.source is not None else RowSpec()
        out.update(spec.to_dict())
        out["rows_used"] = first.n_rows if first is not None else None
        out["rows_dropped"] = first.n_dropped if first is not None else 0
        out["n_effective"] = first.n_effective if first is not None else None
        out["fingerprint"] = self.fingerprint()
        if self.dataset is not None:
            out["members"] = self.dataset.members_report()
        if self.change is not None:
            relative = getattr(self.source, "relative_change", None)
            out[getattr(self.change, "section", "change")] = {
                **self.change.to_dict(), "relative_change": relative() if relative is not None else None,
                "relative_change_definition": "||Delta W||_F / ||W_base||_F"}
        captured = captured_from(self.accumulator.sources if self.accumulator is not None else [])
        if captured is not None:
            out["capture"] = captured
        return out

    def fingerprint(self) -> str | None:
        """The dataset's fingerprint, or a change's (both tensors); None for an in-memory array or Accumulator."""
        if self.change is not None:
            return self.change.fingerprint()
        return self.dataset.fingerprint() if self.dataset is not None else None

    def options_report(self) -> dict[str, Any]:
        out = self.read.to_report()
        if self.source is not None:
            # the rows per block of the products actually made (the default adapts to d; the bootstrap's groups
            # shrink it on short inputs)
            out["block_rows"] = self.block_rows_used or self.block_rows
        acc = self.accumulator
        if acc is not None:
            out["precision"] = acc.precision
            out["block_rows"] = acc.block_rows
            out["drop_nonfinite"] = acc.drop_nonfinite
            if acc.weighted:
                out["weights"] = {"accumulated": True, "normalised": "p = w / sum w"}
                out["ddof"] = None
        return out


def captured_from(sources: list[Any]) -> dict[str, Any] | None:
    """Where moments captured from a model came from (``spectra_cli.capture``'s snapshot: one module, its step),
    when every source says so with the same module and step; None otherwise (the sources of a file written
    elsewhere are taken only when they have the types a capture writes)."""
    caps = [s for s in sources if isinstance(s, dict) and isinstance(s.get("capture"), str)]
    if not caps or len(caps) != len(sources):
        return None
    modules = {s["capture"] for s in caps}
    steps = {s.get("step") for s in caps}
    models = {s.get("model") for s in caps}
    step = next(iter(steps)) if len(steps) == 1 else None
    if isinstance(step, bool) or not (step is None or isinstance(step, int)):
        step = None
    model = next(iter(models)) if len(models) == 1 else None
    if len(modules) != 1:
        return None
    return {"module": str(next(iter(modules)))[:1000], "step": step,
            "model": str(model)[:200] if isinstance(model, str) else None}
