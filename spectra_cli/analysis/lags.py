"""Context covariance of sequence dumps (seed 001 §4.2.2–4.2.3, SPEC.md "Sequence dumps").

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
  (``numpy.random.default_rng(seed)``), windows rebuilt, then the same computation.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

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


#: The P per-position n x n Gram matrices are kept at once up to this many bytes by default (spectra
#: sequence passes a quarter of the memory budget); beyond it (many windows) the context is streamed: one
#: n x n sum, and the lag energies from one k x k cross block at a time (slower: at 2,592 x 32 x 384,
#: 19 s against 12 s, but O(n P k) + O(n^2) memory instead of O(P n^2)).
GRAM_STACK_BYTES = 1 << 30


def context(X: np.ndarray, *, block_diagonal: bool, stack_bytes: float = GRAM_STACK_BYTES) -> ContextResult:
    """Context spectrum, lag energies and (optionally) the block-diagonal control of windows ``X``.

    Memory: ``X`` centred once, plus the ``n x n`` Gram matrices of the P positions when they fit
    ``stack_bytes`` (else one ``n x n`` sum and one ``k x k`` cross block at a time: ``O(n P k) + O(n^2)``),
    or the ``P k x P k`` covariance when ``P k <= n``."""
    n, P, k = X.shape
    Xc = X - X.mean(axis=0)
    denom = float(n - 1)
    if n < P * k and 8.0 * P * n * n > stack_bytes:
        return _streamed_context(Xc, block_diagonal=block_diagonal)
    if n < P * k:
        G = np.empty((P, n, n))
        Xt = np.ascontiguousarray(Xc.transpose(1, 0, 2))  # (P, n, k): each position's rows contiguous for BLAS
        for a in range(P):
            np.matmul(Xt[a], Xt[a].T, out=G[a])
        total = G.sum(axis=0)
        lam = np.linalg.eigvalsh((total + total.T) * 0.5)[::-1] / denom
        flatG = G.reshape(P, n * n)
        inner = flatG @ flatG.T  # <G_a, G_b>_F = (n-1)^2 ||Gamma_ab||_F^2
        bd = None
        if block_diagonal:
            # each Gamma_aa from the smaller of its k x k and n x n forms (the same non-zero eigenvalues)
            parts = [np.linalg.eigvalsh(Xt[a].T @ Xt[a] if k <= n else G[a])[-min(n, k):] for a in range(P)]
            bd = np.sort(np.concatenate(parts))[::-1] / denom
        route = f"n x n Gram matrices of the {P} positions (n = {n} < P k = {P * k})"
    else:
        flat = Xc.reshape(n, P * k)
        S = flat.T @ flat / denom
        lam = np.linalg.eigvalsh((S + S.T) * 0.5)[::-1]
        blocks = S.reshape(P, k, P, k)
        inner = np.einsum("aibj,aibj->ab", blocks, blocks) * denom * denom
        bd = None
        if block_diagonal:
            bd = np.sort(np.concatenate([np.linalg.eigvalsh(blocks[a, :, a, :]) for a in range(P)]))[::-1]
        route = f"the P k x P k covariance (P k = {P * k} <= n = {n})"
    diag = np.diag(inner)
    lags = np.array([np.mean(np.diagonal(inner, offset=lag)) for lag in range(1, P)]) / np.mean(diag) \
        if P > 1 and np.mean(diag) > 0 else np.zeros(max(P - 1, 0))
    keep = min(n - 1, P * k)
    return ContextResult(np.clip(lam[:keep], 0.0, None), None if bd is None else np.clip(bd, 0.0, None), lags, route)


def _streamed_context(Xc: np.ndarray, *, block_diagonal: bool) -> ContextResult:
    """The Gram route without the P Gram matrices at once: their sum accumulated one position at a
    time, and ``||Gamma_ab||_F^2`` from the ``k x k`` cross block ``Xc_a^T Xc_b`` of each pair (the same
    number as ``<G_a, G_b>_F``: ``||A^T B||_F^2 = tr(A A^T B B^T)``)."""
    n, P, k = Xc.shape
    denom = float(n - 1)
    Xt = np.ascontiguousarray(Xc.transpose(1, 0, 2))  # (P, n, k)
    total = np.zeros((n, n))
    for a in range(P):
        total += Xt[a] @ Xt[a].T
    lam = np.linalg.eigvalsh((total + total.T) * 0.5)[::-1] / denom
    del total
    inner = np.empty((P, P))
    for a in range(P):
        for b in range(a, P):
            C = Xt[a].T @ Xt[b]
            inner[a, b] = inner[b, a] = float(np.vdot(C, C))
    bd = None
    if block_diagonal:
        parts = [np.linalg.eigvalsh(Xt[a].T @ Xt[a] if k <= n else Xt[a] @ Xt[a].T)[-min(n, k):] for a in range(P)]
        bd = np.sort(np.concatenate(parts))[::-1] / denom
    diag = np.diag(inner)
    lags = np.array([np.mean(np.diagonal(inner, offset=lag)) for lag in range(1, P)]) / np.mean(diag) \
        if P > 1 and np.mean(diag) > 0 else np.zeros(max(P - 1, 0))
    keep = min(n - 1, P * k)
    route = (f"the n x n sum of the {P} positions' Gram matrices, streamed (n = {n} < P k = {P * k}), and the lag "
             "energies from each k x k cross block")
    return ContextResult(np.clip(lam[:keep], 0.0, None), None if bd is None else np.clip(bd, 0.0, None), lags, route)


def shuffled_windows(X: np.ndarray, seed: int) -> np.ndarray:
    """All tokens permuted across windows and positions, windows rebuilt (seed 001's control)."""
    n, P, k = X.shape
    rng = np.random.default_rng(seed)
    return X.reshape(n * P, k)[rng.permutation(n * P)].reshape(n, P, k)


def lag_definition() -> dict[str, Any]:
    return {"lag_energy": "mean_a ||Gamma_{a,a+l}||_F^2 / mean_a ||Gamma_aa||_F^2, Gamma_ab = Xc_a^T Xc_b / (n - 1)"}
