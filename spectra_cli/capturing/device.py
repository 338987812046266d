"""Moments accumulated where the activations are: torch tensors on their own device (``spectra_cli.capture``).

One :class:`DeviceMoments` per captured module keeps, as torch tensors on the activations' device, what the
host's :class:`spectra_cli.stream.states.MomentsState` keeps for a stream of blocks: the rows' count, their
sum and the sum of their outer products about a fixed shift (the first block's mean, so that a large mean
costs nothing), the same per group of blocks (block ``i`` in group ``i mod groups``; under
``torch.distributed`` rank ``r``'s block ``i`` counts as block ``i world + r``), the histogram of squared
row norms about the mean of every row so far made unbiased (as :func:`spectra_cli.stream.moments.unshrunk` does
for the first block's own mean),
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

from spectra_cli.errors import InputError
from spectra_cli.stream.accumulator import Accumulator
from spectra_cli.stream.isotropy_sums import CosineAccumulator
from spectra_cli.stream.moments import Moments
from spectra_cli.stream.norms import BINS_PER_OCTAVE, HIGHEST, LOWEST, NormHistogram, fourth_coefficients

#: Rows of a block whose norms and fourth moments are formed at a time (a temporary of this many rows x d).
_CHUNK = 4096
#: The state's scalars (see DeviceMoments.scalars).
SCALARS = 11


class DeviceMoments:
    """The mergeable moments of one module's rows, kept on the rows' device (see the module docstring).

    Args:
        d: the features (the module's output width).
        device: the torch device of the activations.
        groups: row groups kept (0: none), for ``fit(..., ci=True)`` and ``population=True``'s sampling curve.
        precision: ``float64`` or ``float32`` products.
        name: the module's qualified name, for messages.
    """

    def __init__(self, d: int, *, device: Any, groups: int, precision: str, name: str, weighted: bool = False) -> None:
        import torch

        f64 = torch.float64
        self.d, self.groups, self.precision, self.name = int(d), int(groups), precision, name
        self.weighted = bool(weighted)
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
        self.gw = torch.zeros(groups, 2, dtype=f64, device=device)  # each group's weight sum and rows of weight > 0
        self.gs = torch.zeros(groups, d, dtype=f64, device=device)
        self.gG = torch.zeros(groups, d, d, dtype=f64, device=device)
        self.hist = torch.zeros(HIGHEST - LOWEST + 1, dtype=f64, device=device)
        # [zero norms, fourth-moment sum, its rows, cosine: weight of nonzero rows, weighted norm sum, zero rows,
        #  rows, squared weights of nonzero rows; the rows' weight sum, squared weight sum, rows of weight > 0]
        self.scalars = torch.zeros(SCALARS, dtype=f64, device=device)
        self.unit_sum = torch.zeros(d, dtype=f64, device=device)

    def update(self, X: Any, w: Any = None) -> None:
        """Add a block of rows (a 2-D tensor on this state's device, already masked and finite), with their
        weights (1-D, finite, >= 0) when this state is weighted."""
        import torch

        b = int(X.shape[0])
        if b == 0:
            return
        f64 = torch.float64
        Xp = X.detach().to(self.dtype)
        w64 = None if w is None else w.detach().to(device=Xp.device, dtype=f64).reshape(-1)
        if self.shift is None:
            if w64 is not None and float(w64.sum()) > 0:
                self.shift = (w64 @ Xp.to(f64)) / w64.sum()
            else:
                self.shift = Xp.to(f64).mean(dim=0)
        A = Xp - self.shift.to(self.dtype)
        if w64 is None:
            Aw, s_b = A, A.sum(dim=0, dtype=f64)
            W_b, W2_b, pos_b = float(b), float(b), float(b)
        else:
            Aw = A * torch.sqrt(w64).to(self.dtype)[:, None]
            s_b = (A.to(f64) * w64[:, None]).sum(dim=0)
            W_b, W2_b, pos_b = float(w64.sum()), float(w64 @ w64), float((w64 > 0).sum())
        G_b = Aw.T @ Aw
        if self.groups:  # (ranks interleave: rank r's block i is the (i world + r)-th block of the whole run)
            g = (self.blocks * self.world + self.rank) % self.groups
            self.gG[g] += G_b  # (the whole is the groups' sum: one d x d addition a block, not two)
            self.gs[g] += s_b
            self.gn[g] += b
            self.gw[g, 0] += W_b
            self.gw[g, 1] += pos_b
        else:
            self.G += G_b
            self.s += s_b
        self.scalars[8] += W_b
        self.scalars[9] += W2_b
        self.scalars[10] += pos_b
        self.n += b
        self.blocks += 1
        self.block_rows = max(self.block_rows, b)
        if W_b > 0:
            # the norms about the mean of every row so far (this block's included), as the host's pass takes them
            total = float(self.scalars[8])
            running = None
            if total > W_b:
                s_all = self.gs.sum(dim=0) if self.groups else self.s
                running = ((s_all / total).to(self.dtype), total, float(self.scalars[9]))
            self._norms(A, Xp, (s_b / W_b).to(self.dtype), b, w64, running)

    def _norms(self, A: Any, X: Any, mean_rel: Any, b: int, w: Any = None,
               running: tuple[Any, float, float] | None = None) -> None:
        """The block's share of the histogram of unbiased squared norms about its (weighted) mean (``running``: the
        mean of every row so far, their weight sum and sum of squared weights: about that mean instead), of the
        features' fourth moments (unweighted rows, about the block's mean) and of the mean-cosine sums: in chunks
        of rows, in the products' precision, summed in float64 (:func:`spectra_cli.stream.moments.unshrunk` and
        its running-mean form, in torch)."""
        import torch

        f64 = torch.float64
        q_parts, s2, s4 = [], torch.zeros(self.d, dtype=f64, device=self.device), None
        for i in range(0, b, _CHUNK):
            y = A[i:i + _CHUNK] - mean_rel
            y2 = y * y
            if running is None:
                q_parts.append(y2.sum(dim=1, dtype=f64))
            else:
                r = A[i:i + _CHUNK] - running[0]
                q_parts.append((r * r).sum(dim=1, dtype=f64))
            if w is None:
                s2 += y2.sum(dim=0, dtype=f64)
                s4 = (y2 * y2).sum(dim=0, dtype=f64) if s4 is None else s4 + (y2 * y2).sum(dim=0, dtype=f64)
            x = X[i:i + _CHUNK]
            norms = torch.linalg.vector_norm(x, dim=1, dtype=f64)
            nz = norms > 0
            wt = torch.ones_like(norms) if w is None else w[i:i + _CHUNK]
            wn = torch.where(nz, wt, torch.zeros_like(wt))
            coef = torch.where(nz, wn / torch.where(nz, norms, torch.ones_like(norms)), torch.zeros_like(wn))
            self.unit_sum += (coef.to(x.dtype) @ x).to(f64)
            self.scalars[3] += wn.sum()
            self.scalars[4] += wn @ norms
            self.scalars[5] += (~nz).sum()
            self.scalars[6] += len(x)
            self.scalars[7] += wn @ wn
        u = torch.cat(q_parts)
        e = _unshrunk(u, w, b) if running is None else _unbiased_about_running_mean(u, w, b, running[1], running[2])
        keep = torch.ones_like(e, dtype=torch.bool) if w is None else w > 0
        pos = (e > 0) & keep
        k = torch.floor(torch.log2(e[pos]) * BINS_PER_OCTAVE).to(torch.int64).clamp(LOWEST, HIGHEST) - LOWEST
        self.hist.index_add_(0, k, torch.ones(k.numel(), dtype=f64, device=self.device))
        self.scalars[0] += (keep & ~pos).sum().to(f64)
        if b >= 4 and w is None:
            c2, a2, det = fourth_coefficients(b)
            assert s4 is not None
            self.scalars[1] += b * (c2 * s4 - a2 * s2 * s2).sum() / det
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
        return torch.cat([head, shift, s, G.reshape(-1), self.gn, self.gw.reshape(-1), self.gs.reshape(-1),
                          self.gG.reshape(-1), self.hist, self.scalars, self.unit_sum])

    def accumulator(self, *, sources: list[dict[str, Any]]) -> Accumulator:
        """The state as a host :class:`~spectra_cli.stream.accumulator.Accumulator` (every rank's, merged, under
        ``torch.distributed``): the only transfer of its matrices to the host."""
        parts = _gathered(self.packed())
        states = [_unpack(p, self.d, self.groups, self.weighted) for p in parts]
        moments = groups = cosine = None
        w2_total = 0.0
        for st in states:
            if st["n"] == 0:
                continue
            w2_total += st["weight_sq_sum"]
            moments = st["moments"] if moments is None else moments.merge(st["moments"])
            groups = st["groups"] if groups is None else [a.merge(b) for a, b in zip(groups, st["groups"], strict=True)]
            cosine = st["cosine"] if cosine is None else cosine.merge(st["cosine"])
        if moments is None:
            raise InputError(f"module {self.name!r} saw no rows: nothing to save (no forward call reached it, or "
                             "every token was masked).")
        return Accumulator.of_pass(moments, groups=tuple(g for g in (groups or []) if g.n > 0), n_groups=self.groups,
                                   weight_sq_sum=w2_total, cosine=cosine, weighted=self.weighted, n_dropped=0,
                                   precision=self.precision, drop_nonfinite=False,
                                   block_rows=max(st["block_rows"] for st in states), sources=sources)

    def reset(self) -> None:
        """Forget the rows (the window since the last snapshot starts again); the shift is kept."""
        for t in (self.s, self.G, self.gn, self.gw, self.gs, self.gG, self.hist, self.scalars, self.unit_sum):
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


def _moments(n: float, W: float, positive: float, weighted: bool, shift: np.ndarray, s: np.ndarray, G: np.ndarray,
             block_rows: int, norms: NormHistogram | None) -> Moments:
    """Host moments of ``n`` rows of weight sum ``W`` (``positive`` of them of weight > 0) from their weighted
    sum ``s`` and weighted outer-product sum ``G`` about ``shift`` (as :meth:`Moments.from_block_shifted` makes
    them)."""
    if not W > 0:
        return Moments(int(n), 0.0, 0, np.zeros_like(s), np.zeros_like(G), 1.0, weighted, int(block_rows),
                       shift.copy(), norms)
    delta = s / W
    m2 = G - np.outer(s, s) / W
    m2 = (m2 + m2.T) * 0.5  # (the two halves agree to rounding; the host's m2 is exactly symmetric)
    return Moments(int(n), float(W), int(round(positive)), delta, m2, 1.0, weighted, int(block_rows), shift.copy(),
                   norms)


def _unpack(flat: np.ndarray, d: int, groups: int, weighted: bool) -> dict[str, Any]:
    n, blocks, block_rows = (float(v) for v in flat[:3])
    pos = 3
    sizes = {"shift": d, "s": d, "G": d * d, "gn": groups, "gw": 2 * groups, "gs": groups * d, "gG": groups * d * d,
             "hist": HIGHEST - LOWEST + 1, "scalars": SCALARS, "unit_sum": d}
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
    hist = hist.with_fourth(None if weighted else float(sc[1]), 0.0 if weighted else float(sc[2]))
    shift = v["shift"]
    out["weight_sq_sum"] = float(sc[9])
    out["moments"] = _moments(n, float(sc[8]), float(sc[10]), weighted, shift, v["s"], v["G"].reshape(d, d),
                              int(block_rows), hist)
    gs, gG, gw = v["gs"].reshape(groups, d), v["gG"].reshape(groups, d, d), v["gw"].reshape(groups, 2)
    out["groups"] = [_moments(float(v["gn"][g]), float(gw[g, 0]), float(gw[g, 1]), weighted, shift, gs[g], gG[g],
                              int(min(block_rows, v["gn"][g])), None) if v["gn"][g] > 0 else
                     Moments.empty(d, weighted=weighted) for g in range(groups)]
    cos = CosineAccumulator(d)
    cos.unit_sum = v["unit_sum"].copy()
    cos.w_sum, cos.w2_sum = float(sc[3]), float(sc[7])
    cos.norm_sum, cos.zero_rows, cos.rows = float(sc[4]), int(sc[5]), int(sc[6])
    out["cosine"] = cos
    return out


def _unbiased_about_running_mean(u: Any, w: Any, b: int, total: float, sq_total: float) -> Any:
    """The running-mean form of :func:`_unshrunk` (:func:`spectra_cli.stream.moments._unbiased_about_running_mean`
    in torch): squared norms ``u`` about the mean of every row so far (weight sum ``total``, squared weights
    ``sq_total``) made unbiased for the norms about the true mean (times the weight, when weighted)."""
    import torch

    p = torch.full_like(u, 1.0 / total) if w is None else w / total
    s2 = sq_total / (total * total)
    g = 1.0 - 2.0 * p
    share = p / torch.clamp(p.sum(), min=1e-300)
    K = s2 * (share @ u) / torch.clamp(1.0 - 2.0 * (share @ p) + s2, min=1e-12)
    ok = g > 0.1
    e = torch.where(ok, torch.clamp(u - K, min=0.0) / torch.where(ok, g, torch.ones_like(g)),
                    u / torch.clamp(g + s2, min=1e-12))
    return e if w is None else e * w


def _unshrunk(u: Any, w: Any, b: int) -> Any:
    """:func:`spectra_cli.stream.moments.unshrunk` in torch: squared norms ``u`` about the block's (weighted)
    mean made unbiased for the norms about the true mean (times the weight, when weighted)."""
    import torch

    if w is None:
        if b >= 3:  # (the part K = mean u / (b - 1) that every row of the block shares)
            return torch.clamp(u - u.mean() / (b - 1), min=0.0) / (1.0 - 2.0 / b)
        return u / (1.0 - 1.0 / b) if b > 1 else torch.zeros_like(u)
    q = u * w
    p = w / torch.clamp(w.sum(), min=1e-300)
    shrink = 1.0 - 2.0 * p + (p @ p)
    mean_form = torch.where(shrink > 1e-12, q / torch.where(shrink > 1e-12, shrink, torch.ones_like(shrink)), q)
    g = 1.0 - 2.0 * p
    ok = (g > 0.1) & (p > 0) if b >= 3 else torch.zeros_like(p, dtype=torch.bool)
    if not bool(ok.any()):
        return mean_form
    po, go = p[ok], g[ok]
    K = (po * po * u[ok] / go).sum() / (1.0 + (po * po / go).sum())
    e = torch.clamp(u - K, min=0.0) / torch.where(ok, g, torch.ones_like(g))
    return torch.where(ok, e * w, mean_form)
