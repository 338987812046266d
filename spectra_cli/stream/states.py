"""The mergeable states of a pass over the rows.

A pass feeds every block ``(X, w)`` to a set of states, each with ``update(X, w)``;
two states of the same kind built from different rows combine with ``merge``, so any
split of the rows (blocks, files, processes, cluster workers) gives the same result up to
rounding. States pickle small (O(d^2) at most, never rows or scratch buffers), so a worker
can return one. :class:`RowGuard` is the policy applied to each block before the states
see it (weights checked, non-finite rows refused or dropped).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any, Protocol

import numpy as np

from spectra_cli.errors import InputError, param
from spectra_cli.memory import fresh_array
from spectra_cli.stream.moments import Moments
from spectra_cli.validate import product_dtype

#: Row weights outside this range would overflow or underflow their squares or the squares of their sums (Kish's
#: effective sample (sum w)^2 / sum w^2, the weighted mean cosine): within it, a sum over up to 1e50 rows squares to
#: a finite number and a single weight to a normal one (1e-170 squared to 0); only ratios matter.
MAX_WEIGHT, MIN_WEIGHT = 1e100, 1e-100


class State(Protocol):
    def update(self, X: np.ndarray, w: np.ndarray | None) -> None: ...


class MomentsState:
    """Moments of the rows seen (the streaming fast path of :mod:`spectra_cli.stream.moments`), and
    optionally the moments of up to ``groups`` groups of blocks for the bootstrap.

    The first block with a finite, unscaled mean fixes the shift that later blocks are centred
    on in one product. Groups are contiguous runs of rows when ``n_blocks`` blocks of ``block_rows`` are
    planned (a file, a folder of files): a block goes to the group of the planned block its first row falls
    in (shards shorter than a block end their blocks early: counted in rows, they still share the groups
    out evenly), else blocks in turn (an online stream): block ``i`` goes to group ``i mod groups``.
    """

    def __init__(self, d: int, *, weighted: bool = False, precision: str = "float64", groups: int = 0,
                 n_blocks: int | None = None, block_rows: int | None = None) -> None:
        self.moments = Moments.empty(d, weighted=weighted)
        self.precision = precision
        self.n_groups = groups
        self.n_blocks = n_blocks
        self.block_rows = block_rows
        self.rows_seen = 0
        self.groups: list[Moments] = []  # grown as blocks reach them (a loaded file keeps its filled ones)
        self.blocks_seen = 0
        self.weight_sq_sum = 0.0  # sum w^2, for the effective sample size (sum w)^2 / sum w^2
        self._shift: np.ndarray | None = None
        self._scratch: np.ndarray | None = None
        self._product: np.ndarray | None = None  # (with groups: every later block's product in one buffer)

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_scratch"] = state["_product"] = None  # buffers (the groups pickle their own matrices)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)

    def update(self, X: np.ndarray, w: np.ndarray | None) -> None:
        g = self._group_of_block() if self.n_groups else -1
        slot: np.ndarray | None = None  # (a group's first block: its product written where the group keeps it)
        if self._shift is None:
            bm = Moments.from_block(X, w, precision=self.precision)
            if np.all(np.isfinite(bm.mean)) and bm.scale == 1.0 and bm.weight_sum > 0:
                self._shift = bm.mean
        else:
            d = X.shape[1]
            dt = product_dtype(self.precision)
            if self._scratch is None or self._scratch.shape[0] < len(X):
                self._scratch = np.empty((len(X), d + 1), dtype=dt)
            m = self.moments  # (the rows so far: the norms are taken about their mean and this block's)
            prior = (m.weight_sum, self.weight_sq_sum, m.mean) if m.weight_sum > 0 and m.scale == 1.0 else None
            if g >= 0 and dt == np.float64:
                if self.groups[g].weight_sum == 0.0:
                    # a group's first block: its product written into memory of the group's own, which the group
                    # keeps (no copy: at d = 4,096 eight 134 MB copies took 0.74 s; fresh_array's: without huge-page
                    # advice, populated at once; a block that takes another path leaves it, and it goes back)
                    slot = fresh_array((d + 1, d + 1))
                else:
                    # a later block's moments are added to its group before the next block: its product can be
                    # written into one buffer, paying its memory's page faults once
                    if self._product is None:
                        self._product = np.empty((d + 1, d + 1))
                    slot = self._product
            bm = Moments.from_block_shifted(X, self._shift, w, precision=self.precision, out=self._scratch,
                                            product=slot, prior=prior)
        if self.moments.weight_sum == 0.0:  # the first block: own a copy when groups share bm's buffer
            self.moments = self.moments.merge(bm)
            if self.n_groups:
                self.moments = replace(self.moments, m2=self.moments.m2.copy())
        else:
            self.moments = self.moments.merge(bm, reuse=True)
        self.weight_sq_sum += float(len(X)) if w is None else float(np.dot(w, w))
        if g >= 0:
            if self.groups[g].weight_sum == 0.0:
                # The group owns bm's matrix (the main moments copied theirs, or merged it into their own): a view
                # into its slot when the product was written there, else made contiguous when it is a view into
                # a product. It then takes each later block in place, and the bootstrap reads it a slab of rows at
                # a time.
                first = self.groups[g].merge(bm)
                in_slot = slot is not None and slot is not self._product and np.may_share_memory(first.m2, slot)
                self.groups[g] = first if in_slot else replace(first, m2=np.ascontiguousarray(first.m2))
            else:
                self.groups[g] = self.groups[g].merge(bm, reuse=True)
        self.blocks_seen += 1
        self.rows_seen += len(X)

    def _group_of_block(self) -> int:
        """The group the next block goes to (made empty where it is new)."""
        i = self.rows_seen // self.block_rows if self.block_rows and self.n_blocks else self.blocks_seen
        g = min(i * self.n_groups // self.n_blocks if self.n_blocks else i % self.n_groups, self.n_groups - 1)
        while len(self.groups) <= g:
            self.groups.append(Moments.empty(self.moments.d, weighted=self.moments.weighted))
        return g

    def skip(self, rows: int) -> None:
        """Rows of the input that were dropped (non-finite, with ``drop_nonfinite``): they keep their places, so
        that the row groups stay the runs of rows they were planned as."""
        self.rows_seen += int(rows)

    def merge(self, other: MomentsState) -> MomentsState:
        """Combine with the state of other rows (this one changes and is returned). The bootstrap groups
        must split every row: when one side has rows but no groups, the merged state keeps none (groups
        of a part of the rows would resample that part only)."""
        partial = any(st.moments.n > 0 and not st.filled_groups() for st in (self, other))
        self.moments = self.moments.merge(other.moments)
        self.weight_sq_sum += other.weight_sq_sum
        if self._shift is None:
            self._shift = other._shift
        groups = [] if partial else [g for g in (*self.groups, *other.groups) if g.n > 0]
        # Groups of different shards are different rows: keep them all (up to 32, the bootstrap's default).
        limit = max(self.n_groups, other.n_groups, min(len(groups), 32)) if groups else 0
        while limit and len(groups) > limit:  # pairwise, keeping neighbours together
            groups = [groups[i].merge(groups[i + 1]) if i + 1 < len(groups) else groups[i]
                      for i in range(0, len(groups), 2)]
        self.groups, self.n_groups = groups, limit
        self.blocks_seen += other.blocks_seen
        self.rows_seen += other.rows_seen
        return self

    def filled_groups(self) -> tuple[Moments, ...]:
        return tuple(g for g in self.groups if g.n > 0)


class RowsBuffer:
    """Selected rows copied into one preallocated float64 matrix (the ``n < d`` Gram route keeps its rows here, and
    the shuffled control gathers its own: one copy of the rows, never a list of blocks plus their concatenation,
    twice the rows' memory and 0.6 s at 4,096 x 11,008). ``n``: the most rows that will come."""

    def __init__(self, n: int, d: int, *, weighted: bool) -> None:
        self.X = np.empty((n, d))
        self.w = np.empty(n) if weighted else None
        self.filled = 0

    def update(self, X: np.ndarray, w: np.ndarray | None) -> None:
        a, b = self.filled, self.filled + len(X)
        self.X[a:b] = X
        if self.w is not None and w is not None:
            self.w[a:b] = w
        self.filled = b

    def matrix(self) -> tuple[np.ndarray, np.ndarray | None]:
        return self.X[: self.filled], None if self.w is None else self.w[: self.filled]


class RowGuard:
    """Checks each block before the states see it.

    Weights must be finite and >= 0. Rows with NaN or inf are dropped and counted
    (``drop_nonfinite``) or, by default, fail the pass: once one is seen, the remaining
    blocks are only counted so that :meth:`finish` can give the total and the first row.
    """

    def __init__(self, where: str, *, drop_nonfinite: bool, tiny_weights: bool = False) -> None:
        self.where = where
        self.drop = drop_nonfinite
        self.tiny_weights = tiny_weights
        self.dropped = 0
        self.bad = 0
        self.first_bad: int | None = None

    def filter(self, X: np.ndarray, w: np.ndarray | None, row_id: Any) -> tuple[np.ndarray, np.ndarray | None]:
        if w is not None:
            badw = ~(np.isfinite(w) & (w >= 0))
            if np.any(badw):
                i = int(np.flatnonzero(badw)[0])
                raise InputError(f"weight of row {row_id(i)} is {float(w[i])}; weights must be finite and >= 0.")
            big = w > MAX_WEIGHT
            tiny = (w > 0) & (w < MIN_WEIGHT) if not self.tiny_weights else np.zeros(0, dtype=bool)
            if np.any(big) or np.any(tiny):
                i = int(np.flatnonzero(big if np.any(big) else tiny)[0])
                raise InputError(f"weight of row {row_id(i)} is {float(w[i]):.3g}; positive weights must lie within "
                                 f"[{MIN_WEIGHT:g}, {MAX_WEIGHT:g}] (their sums and their squares' must stay finite "
                                 "and exact): rescale them, only their ratios matter.")
        ok = finite_rows(X)
        if ok is None:
            return (X[:0], None if w is None else w[:0]) if self.bad else (X, w)
        bad = np.flatnonzero(~ok)
        if self.drop:
            self.dropped += bad.size
            return X[ok], None if w is None else w[ok]
        if not self.bad:
            self.first_bad = row_id(int(bad[0]))
        self.bad += bad.size
        return X[:0], None if w is None else w[:0]

    def finish(self) -> None:
        if self.bad:
            raise InputError(
                f"{self.where} has {self.bad} row(s) with NaN or inf entries (first at row {self.first_bad}); "
                f"clean the data or pass {param('drop_nonfinite')} to skip those rows."
            )


def finite_rows(X: np.ndarray) -> np.ndarray | None:
    """None when every entry is finite, else a boolean mask of the finite rows.

    A product with a ones vector (1-2 % of the block's second-moment product) finds blocks
    without NaN/inf; only a block whose row sums are not finite is inspected entry by entry.
    """
    if X.dtype.kind in "iub" or not X.size:
        return None
    if X.dtype in (np.float32, np.float64):
        with np.errstate(over="ignore", invalid="ignore"):
            s = X @ np.ones(X.shape[1], dtype=X.dtype)
        if np.all(np.isfinite(s)):
            return None
    ok = np.all(np.isfinite(X), axis=1)
    return None if ok.all() else ok


class DistinctRows:
    """How many distinct rows the pass saw, estimated by HyperLogLog (Flajolet et al. 2007, with linear counting
    for small counts) over a hash of each row's bits on :data:`HASHED_COLUMNS` fixed columns (rows that agree
    there exactly and differ elsewhere are counted once: for real-valued rows, copies): 2^14 one-byte registers,
    a relative error of about 0.8 % (well below 1 % up to tens of thousands of rows, where linear counting
    holds). Mergeable: the registers' maximum. Exact copies of rows (a dump written twice, shuffled) are
    dependent rows the row groups cannot see."""

    BITS = 14
    HASHED_COLUMNS = 64

    def __init__(self, d: int) -> None:
        rng = np.random.default_rng(0x5EC7)
        k = min(d, self.HASHED_COLUMNS)
        self.columns = np.sort(rng.choice(d, size=k, replace=False)) if d > k else np.arange(d)
        self.multipliers = rng.integers(1, 2**63, size=k, dtype=np.uint64) * np.uint64(2) + np.uint64(1)
        self.registers = np.zeros(1 << self.BITS, dtype=np.uint8)
        self.rows = 0

    def update(self, X: np.ndarray, w: np.ndarray | None) -> None:
        bits = np.ascontiguousarray(X[:, self.columns], dtype=np.float64).view(np.uint64)
        with np.errstate(over="ignore"):
            h = (bits * self.multipliers).sum(axis=1, dtype=np.uint64)
            h ^= h >> np.uint64(31)  # (a finishing mix: every input bit reaches the top bits)
            h *= np.uint64(0x94D049BB133111EB)
            h ^= h >> np.uint64(29)
        index = (h >> np.uint64(64 - self.BITS)).astype(np.intp)
        rest = (h << np.uint64(self.BITS)) | np.uint64(1 << (self.BITS - 1))  # (never zero)
        # leading zeros + 1: 64 - bit length; the bit length from a float's exponent (rounding at the top of a power
        # of two may count one less: an error far below HyperLogLog's own)
        rank = (64 - np.floor(np.log2(rest.astype(np.float64))).astype(np.int64)).astype(np.uint8)
        np.maximum.at(self.registers, index, rank)
        self.rows += len(X)

    def estimate(self) -> float:
        m = float(self.registers.size)
        alpha = 0.7213 / (1.0 + 1.079 / m)
        raw = alpha * m * m / float(np.sum(np.ldexp(1.0, -self.registers.astype(np.int64))))
        zeros = int(np.count_nonzero(self.registers == 0))
        if raw <= 2.5 * m and zeros:
            raw = m * math.log(m / zeros)
        return min(raw, float(self.rows))


@dataclass(frozen=True, slots=True)
class ProjectionMoments:
    """Per run of consecutive rows (axis 0), the sums a pass keeps of the rows' projections on the leading
    eigenvectors (axis 1) and of their squared norms, all about the mean and in one unit (:class:`ProjectionSums`;
    read by :func:`spectra_cli.analysis.row_scales.coordinate_cumulant`): ``count`` rows, ``p2``, ``p4`` the
    projections' squares and fourth powers, ``h1``, ``h2`` the squared norms and their squares."""

    count: np.ndarray
    p2: np.ndarray
    p4: np.ndarray
    h1: np.ndarray
    h2: np.ndarray


class ProjectionSums:
    """Per run of consecutive rows, the sums that tell heavy-tailed coordinates from row scales: each row's
    projections ``p = (x - mean) . v`` on ``k`` directions (the columns of ``V``, the leading eigenvectors) and its
    squared norm ``h = |x - mean|^2``, summed as ``p^2``, ``p^4``, ``h`` and ``h^2`` (float64) with the row count.
    Rows go to ``groups`` runs by their position among ``rows`` (the selected rows, known before a second pass), so
    that a run left out in turn is a grouped jackknife's (:func:`spectra_cli.analysis.row_scales.coordinate_cumulant`).
    The rows about the mean are divided by ``unit`` (a typical row's norm, in the data's units) before any power is
    taken, so that inputs near 1e150 or 1e-150 neither overflow nor underflow (the reading is a ratio of moments:
    the unit cancels). Unweighted rows only."""

    def __init__(self, V: np.ndarray, mean: np.ndarray, *, rows: int, groups: int, unit: float = 1.0) -> None:
        self.V = np.asarray(V, dtype=np.float64)
        self.mean = np.asarray(mean, dtype=np.float64)
        self.unit = float(unit) if math.isfinite(unit) and unit > 0 else 1.0
        self.rows = max(int(rows), 1)
        self.groups = max(int(groups), 1)
        k = self.V.shape[1]
        self.count = np.zeros(self.groups)
        self.p2 = np.zeros((self.groups, k))
        self.p4 = np.zeros((self.groups, k))
        self.h1 = np.zeros(self.groups)
        self.h2 = np.zeros(self.groups)
        self.seen = 0

    def update(self, X: np.ndarray, w: np.ndarray | None) -> None:
        if not len(X):
            return
        Xc = np.asarray(X, dtype=np.float64) - self.mean
        Xc /= self.unit
        P = Xc @ self.V
        h = np.einsum("ij,ij->i", Xc, Xc)
        label = np.minimum((self.seen + np.arange(len(X))) * self.groups // self.rows, self.groups - 1)
        self.seen += len(X)
        P2 = P * P
        np.add.at(self.count, label, 1.0)
        np.add.at(self.p2, label, P2)
        np.add.at(self.p4, label, P2 * P2)
        np.add.at(self.h1, label, h)
        np.add.at(self.h2, label, h * h)

    def result(self) -> ProjectionMoments:
        """The sums, kept (:class:`ProjectionMoments`)."""
        return ProjectionMoments(self.count.copy(), self.p2.copy(), self.p4.copy(), self.h1.copy(), self.h2.copy())
