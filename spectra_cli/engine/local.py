"""Single-machine accumulation: a reader thread fetches the next block while BLAS
multiplies the current one. Memory is O(d^2 + block), independent of n."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TypeVar

import numpy as np

from spectra_cli.analysis.isotropy import CosineAccumulator
from spectra_cli.errors import InputError, OptionError
from spectra_cli.moments import PRECISIONS, Moments
from spectra_cli.sources import Block, LogitsWeights, RowSpec, Source, WeightsFile, iter_selected

Progress = Callable[[int, int], None]
T = TypeVar("T")
_END = object()
#: Group moments kept for the bootstrap may use at most this much memory.
GROUP_MEMORY = 1 << 30
MIN_BLOCKS_FOR_GROUPS = 32


@dataclass(frozen=True, slots=True)
class Accumulated:
    """What one pass over the rows produced.

    Either ``moments`` (the d x d route) or ``rows``/``weights`` (the Gram route,
    taken when fewer rows than features are selected) is set.
    """

    n_features: int
    n_rows: int
    n_dropped: int
    moments: Moments | None
    rows: np.ndarray | None
    weights: np.ndarray | None
    groups: tuple[Moments, ...] = ()
    cosine: CosineAccumulator | None = None

    def constant_columns(self) -> int:
        """Features with exactly zero spread among the used rows."""
        if self.moments is not None:
            return int(np.count_nonzero(np.diag(self.moments.m2) == 0.0))
        assert self.rows is not None
        return int(np.count_nonzero(np.ptp(self.rows, axis=0) == 0.0))


def prefetch(it: Iterator[T]) -> Iterator[T]:
    """Run ``next(it)`` one item ahead in a thread (file reads release the GIL)."""
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="spectra-read") as ex:
        fut = ex.submit(next, it, _END)
        while True:
            item = fut.result()
            if item is _END:
                return
            fut = ex.submit(next, it, _END)
            yield item  # type: ignore[misc]


def second_pass(
    source: Source, spec: RowSpec, weights: WeightsFile | LogitsWeights | None, block_rows: int, *,
    drop_nonfinite: bool, progress: Progress | None = None,
) -> Iterator[tuple[np.ndarray, np.ndarray | None]]:
    """The selected rows once more, ``(X, w)`` per block, for passes that need the first pass's
    results (partition isotropy, the shuffled control, whitening). Rows with NaN or inf are skipped
    when the first pass dropped them. Blocks may share buffers: use each before asking for the next."""
    total = spec.n_selected(source.info.n_rows)
    done = 0
    for b in prefetch(iter_selected(source, spec, block_rows, weights)):
        X, w = b.X, b.w
        if drop_nonfinite:
            ok = np.all(np.isfinite(X), axis=1)
            if not ok.all():
                X, w = X[ok], (w[ok] if w is not None else None)
        done += len(b.X)
        if progress is not None:
            progress(done, total)
        if len(X):
            yield X, w


def _check_weights(block: Block) -> None:
    w = block.w
    if w is None:
        return
    bad = ~(np.isfinite(w) & (w >= 0))
    if np.any(bad):
        i = int(np.flatnonzero(bad)[0])
        raise InputError(
            f"weight of row {block.row_id(i)} is {float(w[i])}; weights must be finite and >= 0."
        )


def accumulate(
    source: Source,
    spec: RowSpec | None = None,
    *,
    weights: WeightsFile | LogitsWeights | None = None,
    block_rows: int = 8192,
    precision: str = "float64",
    drop_nonfinite: bool = False,
    gram_route: bool = True,
    groups: int = 0,
    cosine: bool = False,
    progress: Progress | None = None,
) -> Accumulated:
    """One pass over the selected rows of ``source``.

    Raises InputError for non-finite entries (after counting them all, so the
    message gives the count and the first row) unless ``drop_nonfinite``.

    With ``groups > 0`` the moments of contiguous groups of blocks are kept as well (for
    the bootstrap): at most ``groups``, at most ``GROUP_MEMORY`` bytes of them, and blocks
    are made smaller when there would be fewer than ``MIN_BLOCKS_FOR_GROUPS``.
    """
    if precision not in PRECISIONS:
        raise OptionError(f"--precision {precision!r} is not one of {', '.join(PRECISIONS)}.")
    if block_rows < 1:
        raise OptionError(f"--block-rows {block_rows} must be at least 1.")
    spec = spec or RowSpec()
    info = source.info
    d = info.n_features
    total = spec.n_selected(info.n_rows)
    if d == 0:
        raise InputError(f"{info.path} has 0 columns (shape {info.shape}); at least 1 feature is required.")
    if total == 0:
        raise InputError(f"{info.path} has 0 rows (shape {info.shape}); at least 2 are required.")
    weighted = weights is not None or source.has_weights
    use_gram = gram_route and total < d
    n_groups = 0
    if groups > 0 and not use_gram:
        if -(-total // block_rows) < MIN_BLOCKS_FOR_GROUPS:
            block_rows = max(1, -(-total // MIN_BLOCKS_FOR_GROUPS))
        n_blocks = -(-total // block_rows)
        n_groups = max(1, min(groups, n_blocks, GROUP_MEMORY // (8 * d * d)))
    group_m = [Moments.empty(d, weighted=weighted) for _ in range(n_groups)]
    cos = CosineAccumulator(d) if cosine else None
    block_index = 0
    m = Moments.empty(d, weighted=weighted)
    kept_rows: list[np.ndarray] = []
    kept_w: list[np.ndarray] = []
    scratch: np.ndarray | None = None
    shift: np.ndarray | None = None
    done = n_bad = dropped = 0
    first_bad: int | None = None
    for block in prefetch(iter_selected(source, spec, block_rows, weights)):
        _check_weights(block)
        X, w = block.X, block.w
        if n_bad:
            # Already failing: only count the remaining bad rows for the message.
            n_bad += int(np.count_nonzero(~np.all(np.isfinite(X), axis=1)))
            done += len(X)
            continue
        if not use_gram:
            if shift is None:
                bm = Moments.from_block(X, w, precision=precision)
                if np.all(np.isfinite(bm.mean)) and bm.scale == 1.0 and bm.weight_sum > 0:
                    shift = bm.mean
                    dt = np.float32 if precision == "float32" else np.float64
                    scratch = np.empty((min(block_rows, total), d + 1), dtype=dt)
            else:
                bm = Moments.from_block_shifted(X, shift, w, precision=precision, out=scratch)
            finite = bool(np.all(np.isfinite(bm.mean)))
        else:
            finite = bool(np.all(np.isfinite(X)))
        if not finite:
            ok = np.all(np.isfinite(X), axis=1)
            bad = np.flatnonzero(~ok)
            if drop_nonfinite:
                dropped += bad.size
                X = X[ok]
                w = w[ok] if w is not None else None
                if len(X) and not use_gram:
                    bm = Moments.from_block(X, w, precision=precision)
            else:
                n_bad, first_bad = bad.size, block.row_id(int(bad[0]))
                done += len(block.X)
                continue
        if cos is not None and len(X):
            cos.update(X, w)
        if use_gram:
            kept_rows.append(np.array(X, dtype=np.float64))
            if w is not None:
                kept_w.append(np.asarray(w, dtype=np.float64))
        elif len(X):
            m = m.merge(bm)
            if n_groups:
                g = block_index * n_groups // n_blocks
                group_m[g] = group_m[g].merge(bm)
        block_index += 1
        done += len(block.X)
        if progress is not None:
            progress(done, total)
    if n_bad:
        raise InputError(
            f"{info.path} has {n_bad} row(s) with NaN or inf entries (first at row {first_bad}); "
            "clean the data or pass --drop-nonfinite to skip those rows."
        )
    rows = np.concatenate(kept_rows) if use_gram and kept_rows else None
    wts = np.concatenate(kept_w) if kept_w else None
    n_used = len(rows) if rows is not None else m.n
    if n_used < 2:
        raise InputError(
            f"{info.path} has {n_used} usable row{'s' if n_used != 1 else ''} "
            f"(shape ({n_used}, {d})); at least 2 are required."
        )
    total_w = float(wts.sum()) if wts is not None else m.weight_sum
    if weighted and total_w == 0.0:
        raise InputError("all weights are zero; at least one row needs a positive weight.")
    return Accumulated(
        n_features=d,
        n_rows=n_used,
        n_dropped=dropped,
        moments=None if use_gram else m,
        rows=rows if use_gram else None,
        weights=wts,
        groups=tuple(g for g in group_m if g.n > 0),
        cosine=cos,
    )
