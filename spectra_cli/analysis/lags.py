"""Context covariance of sequence dumps (docs/numbers.md, "Sequence dumps").

Windows ``X`` of shape ``(n, P, k)`` (``n`` windows, ``P`` positions, ``k`` features per token) are
flattened to ``n x (P k)`` rows, centred per coordinate across windows, and
``Sigma_context = Xc^T Xc / (n - 1)`` (ddof 1, as the seed computes it). Its ``k x k`` blocks are
``Gamma_ab = Xc_a^T Xc_b / (n - 1)``.

- Route: when ``n < P k`` the ``n x n`` Gram matrices ``G_a = Xc_a Xc_a^T`` give everything:
  the context eigenvalues are those of ``sum_a G_a / (n - 1)``, and
  ``||Gamma_ab||_F^2 = <G_a, G_b>_F / (n - 1)^2``. Otherwise the ``P k x P k`` matrix is formed.
- ``lag_energy(l) = mean_a ||Gamma_{a,a+l}||_F^2 / mean_a ||Gamma_aa||_F^2`` for ``l = 1..P-1``.
- ``block-diagonal`` control: ``Gamma_ab = 0`` for ``a != b``; its spectrum is the union of the
  ``P`` positionwise spectra.
- ``shuffled`` control: every token of every window permuted across windows and positions
  (``numpy.random.default_rng(seed)``), windows rebuilt, then the same computation (the tokens are
  gathered one position at a time through the permutation: no shuffled copy of the windows).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from spectra_cli import threads
from spectra_cli.eigen.decomposition import eigvalsh_checked

CONTROLS = ("block-diagonal", "shuffled")


@dataclass(frozen=True, slots=True)
class ContextResult:
    eigenvalues: np.ndarray  # descending; min(n - 1, P k) non-trivial ones (the rest are not listed)
    block_diagonal: np.ndarray | None
    lag_energy: np.ndarray  # lags 1..P-1
    route: str


def projection(d: int, k: int, seed: int) -> np.ndarray:
    """A fixed random ``d x k`` map with orthonormal columns (QR of a seeded Gaussian matrix)."""
    rng = np.random.default_rng(seed)
    Q, R = np.linalg.qr(rng.standard_normal((d, k)))
    return Q * np.sign(np.diag(R))  # the unique QR with a positive diagonal: reproducible across LAPACKs


#: The P per-position n x n Gram matrices are kept at once up to this many bytes (and at most a quarter of
#: the memory budget, which spectra sequence passes); beyond it (many windows) the context is streamed: one
#: n x n sum, and the lag energies from one k x k cross block at a time (O(n P k) + O(n^2) memory).
GRAM_STACK_BYTES = 256 << 20


class Positions:
    """The windows' tokens one position at a time, centred per coordinate across windows, as float64.

    The windows are held once, in their own dtype (float32 holds float16 and bfloat16 dumps exactly);
    each position's ``n x k`` block is made when it is needed (``O(n k)``), so no centred copy of all
    the windows ever exists. ``order``: an ``(n, P)`` array of token indices into the flattened
    ``(n P, k)`` tokens (the shuffled control's permutation), or None for the windows as they are."""

    def __init__(self, X: np.ndarray, order: np.ndarray | None = None) -> None:
        self.X = X
        self.n, self.P, self.k = X.shape
        self.order = order
        self.tokens = X.reshape(self.n * self.P, self.k) if order is not None else None
        self.means = np.stack([self.raw(a).mean(axis=0, dtype=np.float64) for a in range(self.P)])

    def raw(self, a: int) -> np.ndarray:
        if self.order is None:
            return self.X[:, a, :]
        assert self.tokens is not None
        return self.tokens[self.order[:, a]]

    def __getitem__(self, a: int) -> np.ndarray:
        return np.subtract(self.raw(a), self.means[a], dtype=np.float64)


def context(X: np.ndarray, *, block_diagonal: bool, stack_bytes: float = GRAM_STACK_BYTES,
            order: np.ndarray | None = None, label: str = "context") -> ContextResult:
    """Context spectrum, lag energies and (optionally) the block-diagonal control of windows ``X``
    (``order``: the tokens rearranged by these indices first, see :class:`Positions`).

    Memory, besides ``X`` itself: one position's centred ``n x k`` block at a time, plus the ``n x n``
    Gram matrices of the P positions when they fit ``stack_bytes`` (else one ``n x n`` sum, and the lag
    energies from one ``k x k`` cross block at a time: ``O(n^2 + n k)``), or the ``P k x P k``
    covariance when ``P k <= n``."""
    from spectra_cli.stages import stage

    n, P, k = X.shape
    pos = Positions(X, order)
    denom = float(n - 1)
    tick = stage(f"{label}: positions", P)
    if n < P * k and 8.0 * P * n * n > min(stack_bytes, GRAM_STACK_BYTES):
        return _streamed_context(pos, block_diagonal=block_diagonal, tick=tick)
    if n < P * k:
        G = np.empty((P, n, n))
        for a in range(P):
            Y = pos[a]
            with threads.blas(2.0 * n * n * k):
                np.matmul(Y, Y.T, out=G[a])
            tick(a + 1)
        total = G.sum(axis=0)
        lam = eigvalsh_checked((total + total.T) * 0.5, "the context Gram matrix")[::-1] / denom
        flatG = G.reshape(P, n * n)
        with threads.blas(2.0 * P * P * n * n):
            inner = flatG @ flatG.T  # <G_a, G_b>_F = (n-1)^2 ||Gamma_ab||_F^2
        bd = None
        if block_diagonal:
            # each Gamma_aa from the smaller of its k x k and n x n forms (the same non-zero eigenvalues)
            parts = []
            for a in range(P):
                Y = pos[a]
                parts.append(np.linalg.eigvalsh(Y.T @ Y if k <= n else G[a])[-min(n, k):])
            bd = np.sort(np.concatenate(parts))[::-1] / denom
        route = f"n x n Gram matrices of the {P} positions (n = {n} < P k = {P * k})"
    else:
        S = np.empty((P * k, P * k))
        for a in range(P):  # the covariance a k-row slab at a time: each block Gamma_ab from two positions
            Ya = pos[a]
            for b in range(a, P):
                with threads.blas(2.0 * n * k * k):
                    blk = Ya.T @ (Ya if b == a else pos[b])
                S[a * k:(a + 1) * k, b * k:(b + 1) * k] = blk
                S[b * k:(b + 1) * k, a * k:(a + 1) * k] = blk.T
            tick(a + 1)
        S /= denom
        lam = eigvalsh_checked(S, "the context covariance")[::-1]
        blocks = S.reshape(P, k, P, k)
        inner = np.einsum("aibj,aibj->ab", blocks, blocks) * denom * denom
        bd = None
        if block_diagonal:
            bd = np.sort(np.concatenate([np.linalg.eigvalsh(blocks[a, :, a, :]) for a in range(P)]))[::-1]
        route = f"the P k x P k covariance (P k = {P * k} <= n = {n})"
    return _result(lam, bd, inner, n, P, k, route)


def _result(lam: np.ndarray, bd: np.ndarray | None, inner: np.ndarray, n: int, P: int, k: int,
            route: str) -> ContextResult:
    diag = np.diag(inner)
    lags = np.array([np.mean(np.diagonal(inner, offset=lag)) for lag in range(1, P)]) / np.mean(diag) \
        if P > 1 and np.mean(diag) > 0 else np.zeros(max(P - 1, 0))
    keep = min(n - 1, P * k)
    return ContextResult(np.clip(lam[:keep], 0.0, None), None if bd is None else np.clip(bd, 0.0, None), lags, route)


#: Positions whose centred tokens are gathered into one slab for the cross blocks of the lag energies
#: (one k x n by n x (g k) product instead of g small ones; a slab is n x g k float64).
SLAB_POSITIONS = 8


def _streamed_context(pos: Positions, *, block_diagonal: bool, tick: Any = None) -> ContextResult:
    """The Gram route without the P Gram matrices at once: their sum accumulated one position at a
    time (BLAS ``syrk``: the upper triangle only), and ``||Gamma_ab||_F^2`` from the ``k x k`` cross
    blocks ``Xc_a^T Xc_b`` of each pair, a slab of positions at a time (the same number as
    ``<G_a, G_b>_F``: ``||A^T B||_F^2 = tr(A A^T B B^T)``)."""
    from scipy.linalg.blas import dsyrk

    n, P, k = pos.n, pos.P, pos.k
    denom = float(n - 1)
    total = np.zeros((n, n), order="F")
    inner = np.empty((P, P))
    parts = []
    slab = np.empty((n, min(SLAB_POSITIONS, P) * k))
    for a in range(P):
        Ya = pos[a]
        with threads.blas(float(n) * n * k):
            total = dsyrk(1.0, Ya.T, beta=1.0, c=total, trans=1, lower=0, overwrite_c=1)  # += Ya Ya^T (upper)
        for b0 in range(a, P, SLAB_POSITIONS):
            bs = range(b0, min(b0 + SLAB_POSITIONS, P))
            for j, b in enumerate(bs):
                slab[:, j * k:(j + 1) * k] = Ya if b == a else pos[b]
            with threads.blas(2.0 * n * k * k * len(bs)):
                C = Ya.T @ slab[:, :len(bs) * k]
            for j, b in enumerate(bs):
                Cb = C[:, j * k:(j + 1) * k]
                inner[a, b] = inner[b, a] = float(np.vdot(Cb, Cb))
                if b == a and block_diagonal and k <= n:
                    parts.append(np.linalg.eigvalsh(Cb)[-min(n, k):])
        if block_diagonal and k > n:
            parts.append(np.linalg.eigvalsh(Ya @ Ya.T)[-min(n, k):])
        if tick is not None:
            tick(a + 1)
    lam = eigvalsh_checked(total, "the context Gram matrix", uplo="U")[::-1] / denom  # syrk wrote the upper triangle
    del total
    bd = np.sort(np.concatenate(parts))[::-1] / denom if block_diagonal else None
    route = (f"the n x n sum of the {P} positions' Gram matrices, streamed (n = {n} < P k = {P * k}), and the lag "
             "energies from each k x k cross block")
    return _result(lam, bd, inner, n, P, k, route)


def shuffled_order(n: int, P: int, seed: int) -> np.ndarray:
    """The shuffled control's token order: every token of every window permuted across windows and
    positions (``numpy.random.default_rng(seed)``), as an ``(n, P)`` array of indices into the flattened
    tokens (window ``i`` position ``a`` of the control is token ``order[i, a]``)."""
    return np.random.default_rng(seed).permutation(n * P).reshape(n, P)


def lag_definition() -> dict[str, Any]:
    return {"lag_energy": "mean_a ||Gamma_{a,a+l}||_F^2 / mean_a ||Gamma_aa||_F^2, Gamma_ab = Xc_a^T Xc_b / (n - 1)"}
