"""Moments accumulated where the activations are: torch tensors on their own device (``spectra_cli.capture``).

One :class:`DeviceMoments` per captured module keeps, as torch tensors on the activations' device, what the
host's :class:`spectra_cli.stream.states.MomentsState` keeps for a stream of blocks: the rows' count, their
sum and the sum of their outer products about a fixed shift (the first block's mean, so that a large mean
costs nothing), the same per group of blocks (block ``i`` in group ``i mod groups``; under
``torch.distributed`` rank ``r``'s block ``i`` counts as block ``i world + r``), the histogram of squared
row norms about each block's own mean made unbiased (:func:`spectra_cli.stream.moments.unshrunk`, unweighted),
the features' fourth moments (:func:`spectra_cli.stream.norms.coordinate_fourth`) and the mean-cosine sums.
Only ``d x d`` matrices cross to the host, once per snapshot (:meth:`DeviceMoments.accumulator`).

Products run in float64 (``precision="float64"``) or in float32 with each block's product added in float64
(``"float32"``: faster on a GPU, a higher floor, as on the host). Under ``torch.distributed`` every rank's
state is gathered (fixed-size tensors, ``all_gather``) and merged on each rank by the exact pairwise update
(Chan et al.), in rank order: two ranks on two halves of the rows give what one process gives on all of them.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from spectra_cli.analysis.isotropy import CosineAccumulator
from spectra_cli.errors import InputError
from spectra_cli.stream.accumulator import Accumulator
from spectra_cli.stream.moments import Moments
from spectra_cli.stream.norms import BINS_PER_OCTAVE, HIGHEST, LOWEST, NormHistogram

#: Rows of a block whose norms and fourth moments are formed at a time (a temporary of this many rows x d).
_CHUNK = 4096


class DeviceMoments:
    """The mergeable moments of one module's rows, kept on the rows' device (see the module docstring).

    Args:
        d: the features (the module's output width).
        device: the torch device of the activations.
        groups: row groups kept (0: none), for ``fit(..., ci=True)`` and ``population=True``'s sampling curve.
        precision: ``float64`` or ``float32`` products.
        name: the module's qualified name, for messages.
    """

    def __init__(self, d: int, *, device: Any, groups: int, precision: str, name: str) -> None:
        import torch

        f64 = torch.float64
        self.d, self.groups, self.precision, self.name = int(d), int(groups), precision, name
        self.dtype = torch.float64 if precision == "float64" else torch.float32
        self.device = device
        self.rank, self.world = _rank_and_world()
        self.shift: Any = None
        self.n = 0
        self.blocks = 0
        self.block_rows = 0
        self.s = torch.zeros(d if not groups else 0, dtype=f64, device=device)  # (with groups: their sum)
        self.G = torch.zeros((d, d) if not groups else (0, 0), dtype=f64, device=device)
        self.gn = torch.zeros(groups, dtype=f64, device=device)
        self.gs = torch.zeros(groups, d, dtype=f64, device=device)
        self.gG = torch.zeros(groups, d, d, dtype=f64, device=device)
        self.hist = torch.zeros(HIGHEST - LOWEST + 1, dtype=f64, device=device)
        # [zero norms, fourth-moment sum, its rows, cosine: nonzero rows, norm sum, zero rows, rows]
        self.scalars = torch.zeros(7, dtype=f64, device=device)
        self.unit_sum = torch.zeros(d, dtype=f64, device=device)

    def update(self, X: Any) -> None:
        """Add a block of rows (a 2-D tensor on this state's device, already masked and finite)."""
        import torch

        b = int(X.shape[0])
        if b == 0:
            return
        f64 = torch.float64
        Xp = X.detach().to(self.dtype)
        if self.shift is None:
            self.shift = Xp.to(f64).mean(dim=0)
        A = Xp - self.shift.to(self.dtype)
        G_b = A.T @ A
        s_b = A.sum(dim=0, dtype=f64)
        if self.groups:  # (ranks interleave: rank r's block i is the (i world + r)-th block of the whole run)
            g = (self.blocks * self.world + self.rank) % self.groups
            self.gG[g] += G_b  # (the whole is the groups' sum: one d x d addition a block, not two)
            self.gs[g] += s_b
            self.gn[g] += b
        else:
            self.G += G_b
            self.s += s_b
        self.n += b
        self.blocks += 1
        self.block_rows = max(self.block_rows, b)
        self._norms(A, Xp, (s_b / b).to(self.dtype), b)

    def _norms(self, A: Any, X: Any, mean_rel: Any, b: int) -> None:
        """The block's share of the histogram of unbiased squared norms about its mean, of the features' fourth
        moments and of the mean-cosine sums: in chunks of rows, in the products' precision, summed in float64."""
        import torch

        f64 = torch.float64
        q_parts, s2, s4 = [], torch.zeros(self.d, dtype=f64, device=self.device), None
        for i in range(0, b, _CHUNK):
            y = A[i:i + _CHUNK] - mean_rel
            y2 = y * y
            q_parts.append(y2.sum(dim=1, dtype=f64))
            s2 += y2.sum(dim=0, dtype=f64)
            s4 = (y2 * y2).sum(dim=0, dtype=f64) if s4 is None else s4 + (y2 * y2).sum(dim=0, dtype=f64)
            x = X[i:i + _CHUNK]
            norms = torch.linalg.vector_norm(x, dim=1, dtype=f64)
            nz = norms > 0
            self.unit_sum += (x[nz] / norms[nz, None].to(x.dtype)).sum(dim=0, dtype=f64)
            self.scalars[3] += nz.sum()
            self.scalars[4] += norms.sum()
            self.scalars[5] += (~nz).sum()
            self.scalars[6] += len(x)
        u = torch.cat(q_parts)
        if b >= 3:  # (unshrunk, unweighted: the part K = mean u / (b - 1) that every row of the block shares)
            e = torch.clamp(u - u.mean() / (b - 1), min=0.0) / (1.0 - 2.0 / b)
        else:  # one or two rows: divided by the mean's shrink (a row alone has no norm about its own mean)
            e = u / (1.0 - 1.0 / b) if b > 1 else torch.zeros_like(u)
        pos = e > 0
        k = torch.floor(torch.log2(e[pos]) * BINS_PER_OCTAVE).to(torch.int64).clamp(LOWEST, HIGHEST) - LOWEST
        self.hist.index_add_(0, k, torch.ones(k.numel(), dtype=f64, device=self.device))
        self.scalars[0] += (~pos).sum().to(f64)
        if b >= 4:
            a1, a2 = (b - 1) * (b * b - 3 * b + 3) / b ** 2, 3 * (b - 1) * (2 * b - 3) / b ** 2
            c1, c2 = (b - 1) ** 2 / b, (b - 1) * (b * b - 2 * b + 3) / b
            assert s4 is not None
            self.scalars[1] += b * (c2 * s4 - a2 * s2 * s2).sum() / (a1 * c2 - a2 * c1)
            self.scalars[2] += b

    # -- to the host -----------------------------------------------------------------------------
    def packed(self) -> Any:
        """Every number of the state as one flat float64 tensor on its device (fixed size for a given d and
        groups: what ``all_gather`` sends)."""
        import torch

        shift = self.shift if self.shift is not None else torch.zeros(self.d, dtype=torch.float64, device=self.device)
        head = torch.tensor([float(self.n), float(self.blocks), float(self.block_rows)], dtype=torch.float64,
                            device=self.device)
        G, s = (self.gG.sum(dim=0), self.gs.sum(dim=0)) if self.groups else (self.G, self.s)
        return torch.cat([head, shift, s, G.reshape(-1), self.gn, self.gs.reshape(-1), self.gG.reshape(-1),
                          self.hist, self.scalars, self.unit_sum])

    def accumulator(self, *, sources: list[dict[str, Any]]) -> Accumulator:
        """The state as a host :class:`~spectra_cli.stream.accumulator.Accumulator` (every rank's, merged, under
        ``torch.distributed``): the only transfer of its matrices to the host."""
        parts = _gathered(self.packed())
        states = [_unpack(p, self.d, self.groups) for p in parts]
        moments = groups = cosine = None
        n_total = 0
        for st in states:
            if st["n"] == 0:
                continue
            n_total += st["n"]
            moments = st["moments"] if moments is None else moments.merge(st["moments"])
            groups = st["groups"] if groups is None else [a.merge(b) for a, b in zip(groups, st["groups"], strict=True)]
            cosine = st["cosine"] if cosine is None else cosine.merge(st["cosine"])
        if moments is None:
            raise InputError(f"module {self.name!r} saw no rows: nothing to save (no forward call reached it, or "
                             "every token was masked).")
        return Accumulator.of_pass(moments, groups=tuple(g for g in (groups or []) if g.n > 0), n_groups=self.groups,
                                   weight_sq_sum=float(n_total), cosine=cosine, weighted=False, n_dropped=0,
                                   precision=self.precision, drop_nonfinite=False,
                                   block_rows=max(st["block_rows"] for st in states), sources=sources)

    def reset(self) -> None:
        """Forget the rows (the window since the last snapshot starts again); the shift is kept."""
        for t in (self.s, self.G, self.gn, self.gs, self.gG, self.hist, self.scalars, self.unit_sum):
            t.zero_()
        self.n = self.blocks = self.block_rows = 0


def _rank_and_world() -> tuple[int, int]:
    import torch

    dist = torch.distributed
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def _gathered(flat: Any) -> list[np.ndarray]:
    """This rank's packed state and every other rank's (``torch.distributed`` initialised with more than one
    process), as host arrays in rank order; else this one alone."""
    import torch

    dist = torch.distributed
    if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
        out = [torch.empty_like(flat) for _ in range(dist.get_world_size())]
        dist.all_gather(out, flat)
        return [t.cpu().numpy() for t in out]
    return [flat.cpu().numpy()]


def _moments(n: float, shift: np.ndarray, s: np.ndarray, G: np.ndarray, block_rows: int,
             norms: NormHistogram | None) -> Moments:
    """Host moments of ``n`` unweighted rows from their sum ``s`` and outer-product sum ``G`` about ``shift``
    (as :meth:`Moments.from_block_shifted` makes them)."""
    delta = s / n
    m2 = G - np.outer(s, s) / n
    m2 = (m2 + m2.T) * 0.5  # (the two halves agree to rounding; the host's m2 is exactly symmetric)
    return Moments(int(n), float(n), int(n), delta, m2, 1.0, False, int(block_rows), shift.copy(), norms)


def _unpack(flat: np.ndarray, d: int, groups: int) -> dict[str, Any]:
    n, blocks, block_rows = (float(v) for v in flat[:3])
    pos = 3
    sizes = {"shift": d, "s": d, "G": d * d, "gn": groups, "gs": groups * d, "gG": groups * d * d,
             "hist": HIGHEST - LOWEST + 1, "scalars": 7, "unit_sum": d}
    v: dict[str, np.ndarray] = {}
    for key, size in sizes.items():
        v[key] = flat[pos:pos + size]
        pos += size
    out: dict[str, Any] = {"n": int(n), "block_rows": int(block_rows)}
    if n == 0:
        return out
    counts = v["hist"]
    nzb = np.flatnonzero(counts)
    sc = v["scalars"]
    hist = (NormHistogram(int(nzb[0]) + LOWEST, counts[nzb[0]:nzb[-1] + 1].copy(), float(sc[0])) if nzb.size else
            NormHistogram(0, np.zeros(0), float(sc[0])))
    hist = hist.with_fourth(float(sc[1]), float(sc[2]))
    shift = v["shift"]
    out["moments"] = _moments(n, shift, v["s"], v["G"].reshape(d, d), int(block_rows), hist)
    gs, gG = v["gs"].reshape(groups, d), v["gG"].reshape(groups, d, d)
    out["groups"] = [_moments(float(v["gn"][g]), shift, gs[g], gG[g], int(min(block_rows, v["gn"][g])), None)
                     if v["gn"][g] > 0 else
                     Moments.empty(d, weighted=False) for g in range(groups)]
    cos = CosineAccumulator(d)
    cos.unit_sum = v["unit_sum"].copy()
    cos.w_sum = cos.w2_sum = float(sc[3])
    cos.norm_sum, cos.zero_rows, cos.rows = float(sc[4]), int(sc[5]), int(sc[6])
    out["cosine"] = cos
    return out
