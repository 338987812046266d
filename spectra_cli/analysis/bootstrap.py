"""Bootstrap over groups of row blocks, from moments kept during the one streaming pass.

Each group's moments are turned into sums about a common centre (``W``, ``sum w (x - s)``,
``sum w (x - s)(x - s)^T``); a replicate draws the groups with replacement (multinomial
counts), adds the sums, rebuilds the covariance, and refits every window on it. Nothing is
re-read. Cost per replicate: reading the drawn groups' ``d x d`` matrices once, one
``G x d`` by ``d x G`` product, and one decomposition (``eigvalsh``, or the leading eigenvalues
by block Lanczos when the main spectrum took the top-k route), shared by every fit.
Memory: the groups' own matrices plus the replicate's covariance and the eigensolver's copy;
the replicate is built a slab of rows at a time, so no stack of the groups' sums is made.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from spectra_cli.errors import FitError, param
from spectra_cli.stream.moments import Moments

_SLAB = 256  # rows of the replicate's covariance built at a time


@dataclass(frozen=True, slots=True)
class GroupSums:
    """Each group's sums about a common centre ``shift`` (in units of ``scale``).

    ``n``, ``W``: rows and weight of each group; ``S1[i] = W_i (mean_i - shift)``; the group's
    second moment about ``shift`` is ``r2[i] * m2[i] + S1[i] S1[i]^T / W_i`` (``m2[i]`` is the
    group's own matrix, not copied)."""

    n: np.ndarray
    W: np.ndarray
    S1: np.ndarray
    m2: tuple[np.ndarray, ...]
    r2: np.ndarray
    shift: np.ndarray
    scale: float


def group_sums(groups: Sequence[Moments]) -> GroupSums:
    """The groups' sums about their pooled mean, formed without merging their matrices."""
    scale = max(g.scale for g in groups)
    first = groups[0]
    origin = None if first.origin is None else first.origin * (first.scale / scale)
    rel = np.stack([g.relative_mean(origin, scale) for g in groups])  # through the origins: no large cancellation
    W = np.array([g.weight_sum for g in groups], dtype=np.float64)
    centre = (W @ rel) / W.sum()  # the pooled mean relative to `origin`
    shift = centre if origin is None else origin + centre
    n = np.array([g.n for g in groups], dtype=np.float64)
    r2 = np.array([(g.scale / scale) ** 2 for g in groups])
    S1 = W[:, None] * (rel - centre)
    return GroupSums(n, W, S1, tuple(g.m2 for g in groups), r2, shift, scale)


def replicate_covariance(out: np.ndarray, sums: GroupSums, counts: np.ndarray, *, centered: bool, ddof: int,
                         weighted: bool, lower: bool = False, total: np.ndarray | None = None) -> None:
    """The covariance (or second moment) of the rows drawn ``counts`` times each group, into ``out``, in units of
    ``scale**2``. ``lower``: its lower triangle alone (what a symmetric eigensolver reads), in slabs of rows up to
    their diagonal block, the rest of ``out`` untouched. ``total``: every group's ``r2 m2`` summed
    (:func:`_group_total`, its lower triangle at least), for counts of 0 and 1 that keep more groups than they leave
    out, and more of the trace: the kept groups' sum is the total less the left-out ones' (the same matrix to
    rounding, with a third of the additions at a quarter left out)."""
    d = out.shape[0]
    Wb = float(counts @ sums.W)
    s1 = counts @ sums.S1
    with np.errstate(divide="ignore", invalid="ignore"):
        coef = np.where(sums.W > 0, counts / sums.W, 0.0)
    Bt = np.ascontiguousarray((sums.S1 * coef[:, None]).T)  # d x G, made once: contiguous row slabs (np.dot
    # with out= and a transposed operand skips BLAS)
    left_out = np.flatnonzero(counts == 0)
    complement = (total is not None and bool(np.all((counts == 0) | (counts == 1)))
                  and left_out.size < counts.size - left_out.size)
    if complement:  # (and only where the left-out groups hold no more of the trace than the kept ones: a left-out
        # group far larger than the rest would leave its rounding in the kept rows' smallest eigenvalues, 100x a
        # direct sum's at a group of sd 10,000 among groups of sd 1)
        assert total is not None
        left_trace = sum(float(sums.r2[i]) * float(np.trace(sums.m2[i])) for i in left_out)
        complement = left_trace <= float(np.trace(total)) - left_trace
    if complement:
        drawn = [(sums.m2[i], -float(sums.r2[i])) for i in left_out]
    else:
        drawn = [(sums.m2[i], float(counts[i] * sums.r2[i])) for i in np.flatnonzero(counts)]
    denom = (Wb if weighted else float(counts @ sums.n) - ddof) if centered else Wb
    tmp = np.empty((min(_SLAB, d), d))
    for a in range(0, d, _SLAB):
        e = min(a + _SLAB, d)
        cols = e if lower else d
        o = out[a:e, :cols]
        t = tmp.reshape(-1)[:(e - a) * cols].reshape(e - a, cols)  # (contiguous, as np.dot's out= must be)
        if cols == d:
            np.dot(Bt[a:e], sums.S1, out=o)
        else:
            o[...] = np.dot(Bt[a:e], sums.S1[:, :cols], out=t)
        if complement:
            assert total is not None
            o += total[a:e, :cols]
        for m2, k in drawn:  # o += k m2, in place (scipy's daxpy would wake a second BLAS's threads)
            if k == 1.0:
                o += m2[a:e, :cols]
            elif k == -1.0:
                o -= m2[a:e, :cols]
            else:
                o += np.multiply(m2[a:e, :cols], k, out=t)
        if centered:
            o -= np.multiply.outer(s1[a:e], s1[:cols] / Wb, out=t)
        else:
            shift = sums.shift
            o += np.multiply.outer(s1[a:e], shift[:cols], out=t)
            o += np.multiply.outer(shift[a:e], s1[:cols], out=t)
            o += np.multiply.outer(shift[a:e], Wb * shift[:cols], out=t)
        o /= denom


def _group_total(sums: GroupSums) -> np.ndarray:
    """Every group's ``r2 m2`` summed, its lower triangle (the upper left zero)."""
    d = sums.S1.shape[1]
    total = np.zeros((d, d))
    for a in range(0, d, _SLAB):
        e = min(a + _SLAB, d)
        o = total[a:e, :e]
        for m2, r2 in zip(sums.m2, sums.r2, strict=True):
            if r2 == 1.0:
                o += m2[a:e, :e]
            else:
                o += m2[a:e, :e] * float(r2)
    return total


def _mirror_lower(C: np.ndarray) -> None:
    """Copy the lower triangle onto the upper in place: exactly symmetric, as Krylov products need."""
    d = C.shape[0]
    for a in range(0, d, _SLAB):
        e = min(a + _SLAB, d)
        blk = C[a:e, a:e]
        iu = np.triu_indices(e - a, 1)
        blk[iu] = blk.T[iu]
        C[a:e, e:] = C[e:, a:e].T


def leading_eigenvalues(C: np.ndarray, top: int | None) -> np.ndarray:
    """Descending eigenvalues of the symmetric ``C`` (its lower triangle): every one (the routine the spectrum's own
    decomposition takes: :func:`~spectra_cli.eigen.decomposition.eigvalsh_routed`, LAPACK's two-stage driver on one
    thread from 3,072 rows), or the leading ``top`` by block Lanczos when it converges within its cap (else every
    one)."""
    if top is not None:
        from spectra_cli.eigen.lanczos import top_eigenvalues

        _mirror_lower(C)
        found = top_eigenvalues(C, top)
        if found is not None:
            return found.values
    if not np.all(np.isfinite(C)):
        from spectra_cli.errors import InputError

        raise InputError("a bootstrap replicate's covariance overflows float64: the group moments hold values "
                         "beyond 1e154 (corrupt groups, or data to rescale).")
    from spectra_cli.eigen.decomposition import eigvalsh_checked

    return eigvalsh_checked(C, "a bootstrap replicate's covariance")[::-1]


def bootstrap_statistics(
    groups: Sequence[Moments],
    statistics: Sequence[Callable[[np.ndarray], float]],
    *,
    centered: bool,
    ddof: int,
    replicates: int,
    seed: int,
    top: int | None = None,
) -> np.ndarray:
    """Each of ``statistics(eigenvalues)`` on ``replicates`` resampled covariances, one
    decomposition per replicate shared by all: shape ``(len(statistics), replicates)``, nan where a
    statistic failed. ``top``: decompose for the leading ``top`` eigenvalues only."""
    if len(groups) < 2:
        raise FitError(f"a bootstrap needs at least 2 groups of rows; the input is too small for {param('ci')}.")
    weighted = any(g.weighted for g in groups)
    sums = group_sums(groups)
    d = sums.S1.shape[1]
    G = len(groups)
    rng = np.random.default_rng(seed)
    out = np.full((len(statistics), replicates), np.nan)
    C = np.empty((d, d))
    from spectra_cli.stages import stage

    tick = stage("bootstrap replicates", replicates)
    for b in range(replicates):
        counts = rng.multinomial(G, np.full(G, 1.0 / G)).astype(np.float64)
        replicate_covariance(C, sums, counts, centered=centered, ddof=ddof, weighted=weighted)
        lam = leading_eigenvalues(C, top) * (sums.scale * sums.scale)
        for s, statistic in enumerate(statistics):
            try:
                out[s, b] = statistic(lam)
            except FitError:
                continue
        tick(b + 1)
    return out


def subset_spectra(groups: Sequence[Moments], keep: np.ndarray, *, centered: bool,
                   ddof: int) -> tuple[np.ndarray, np.ndarray]:
    """The spectra (descending, shape ``(k, d)``) and degrees of freedom (``k``: rows of positive weight, less 1
    centred) of the rows of the groups each row of the boolean ``keep`` (shape ``(k, groups)``) keeps: every
    eigenvalue, one decomposition each, from the group sums (nothing re-read). A sub-sample of no weight or
    fewer than 4 such rows gets NaN and 0."""
    from functools import partial

    from spectra_cli.analysis.simulate import parallel_count, side_by_side

    weighted = any(g.weighted for g in groups)
    sums = group_sums(groups)
    d = sums.S1.shape[1]
    spectra = np.full((len(keep), d), np.nan)
    dof = np.empty(len(keep))
    positive = np.array([g.n_positive for g in groups], dtype=np.float64)
    todo = []
    for i, mask in enumerate(np.asarray(keep, dtype=bool)):
        counts = mask.astype(np.float64)
        dof[i] = float(counts @ positive) - (1.0 if centered else 0.0)
        if not (float(counts @ sums.W) > 0 and dof[i] >= 3):  # (a sub-sample without weight has no spectrum)
            dof[i] = 0.0
            continue
        todo.append((i, counts))
    # a few covariances at a time (within the side-by-side memory budget), each decomposed on its own thread where
    # the thread policy gives such a decomposition one (the same bits as one after another)
    at_once = parallel_count(d, d)
    # (the lower triangles alone, what the eigensolver reads: the upper ones stay zero, finite for its check; a
    # sub-sample's kept groups as the total less the groups it leaves out, where those are fewer)
    buffers = [np.zeros((d, d)) for _ in range(min(at_once, len(todo)))]
    total = _group_total(sums) if todo else None

    def decompose(C: np.ndarray) -> np.ndarray:
        return leading_eigenvalues(C, None) * (sums.scale * sums.scale)

    for a in range(0, len(todo), at_once):
        batch = todo[a:a + at_once]
        for C, (_, counts) in zip(buffers, batch, strict=False):  # (the last batch may be shorter)
            replicate_covariance(C, sums, counts, centered=centered, ddof=ddof, weighted=weighted, lower=True,
                                 total=total)
        done = side_by_side([partial(decompose, C) for C in buffers[:len(batch)]], d)
        for (i, _), values in zip(batch, done, strict=True):
            spectra[i] = values
    return spectra, dof


def intervals(values: np.ndarray, estimate: float, level: float = 0.95) -> tuple[float, float, float, float, float]:
    """Basic interval, percentile interval and bias of the replicates around ``estimate``."""
    v = values[np.isfinite(values)]
    if v.size < 2:
        raise FitError("too few bootstrap replicates gave a fit to form an interval.")
    tail = (1.0 - level) / 2 * 100
    q_lo, q_hi = (float(q) for q in np.percentile(v, [tail, 100 - tail]))
    return 2 * estimate - q_hi, 2 * estimate - q_lo, q_lo, q_hi, float(v.mean()) - estimate
