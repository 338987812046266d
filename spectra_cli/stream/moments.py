"""Mergeable first and second moments of (optionally weighted) rows.

Each block of rows becomes a :class:`Moments` (count, weight sum, mean, centred
second moment); two are combined with the pairwise update of Chan, Golub & LeVeque
(1979), so any split of the rows into blocks, files or processes gives the same
result up to rounding. Blocks are centred on their own float64 mean before the
product, so a mean offset far larger than the spread costs no accuracy.

Values are stored divided by ``scale`` (a power of two, so the division is exact);
inputs near 1e150 or 1e-150 are rescaled instead of overflowing or underflowing.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from spectra_cli import threads
from spectra_cli.errors import InputError
from spectra_cli.stream.norms import NormHistogram, coordinate_fourth
from spectra_cli.validate import product_dtype

# A block whose largest centred second moment falls outside [2^-900, finite) is rescaled.
_TINY = 2.0**-900
# From this width the shifted path tests a block's drift before its product (an O(n d) pass that
# costs 14% of the product at d = 256 and 2% at 2,048); narrower blocks test after it, and a
# drifted one is recomputed, which at those widths costs less than testing every block first.
DRIFT_TEST_FIRST_D = 512



def _power_of_two_above(amax: float) -> float:
    """The power of two at or above ``amax`` that the rows are divided by; past 2^1023 (or an overflowed
    difference) there is none, and the covariance, their square, is beyond float64 at any scale."""
    if not amax <= 2.0 ** 1023:
        raise InputError("the covariance exceeds the float64 range (values or their differences from the mean "
                         "reach 1e308); rescale the input (e.g. divide by its largest magnitude).")
    return float(2.0 ** np.ceil(np.log2(amax)))

@dataclass(frozen=True, slots=True)
class Moments:
    """Sufficient statistics of a set of rows.

    Attributes:
        n: number of rows (zero-weight rows included).
        weight_sum: ``sum w`` (equals ``n`` when unweighted).
        n_positive: rows with positive weight (the sample's rank limit).
        mean_rel: the mean ``sum w x / sum w`` minus ``origin``, shape ``(d,)``, in units of ``scale``.
        m2: ``sum w (x - mean)(x - mean)^T``, shape ``(d, d)``, in units of ``scale**2``.
        scale: power of two that stored values are divided by.
        weighted: whether row weights were given.
        block_rows: the most rows summed in one product (it sets the rounding of the
            accumulated matrix, hence the numerical floor).
        origin: a point the mean is stored relative to (None: zero). Means of blocks far from
            zero (an embedding cone) are kept as small offsets from the block's own centre, so
            merging them never subtracts two large rounded numbers.
        norms: the histogram of the rows' squared norms ``w_i ||x_i - block mean||^2`` in the data's units
            (not divided by ``scale``; the row scales of :mod:`spectra_cli.stream.norms`); None where they were
            not gathered (moment files written before they were).
    """

    n: int
    weight_sum: float
    n_positive: int
    mean_rel: np.ndarray
    m2: np.ndarray
    scale: float = 1.0
    weighted: bool = False
    block_rows: int = 0
    origin: np.ndarray | None = None
    norms: NormHistogram | None = None

    @property
    def mean(self) -> np.ndarray:
        """The mean, in units of ``scale`` (rounded once, for reporting and uncentred moments)."""
        return self.mean_rel if self.origin is None else self.origin + self.mean_rel

    @property
    def d(self) -> int:
        return int(self.mean_rel.shape[0])

    def relative_mean(self, origin: np.ndarray | None, scale: float) -> np.ndarray:
        """``mean - origin`` in units of ``scale``, computed through the stored origin."""
        r = self.scale / scale
        own = np.zeros_like(self.mean_rel) if self.origin is None else self.origin * r
        base = np.zeros_like(self.mean_rel) if origin is None else origin
        return (own - base) + self.mean_rel * r

    @classmethod
    def empty(cls, d: int, *, weighted: bool = False) -> Moments:
        return cls(0, 0.0, 0, np.zeros(d), np.zeros((d, d)), 1.0, weighted, 0, None, NormHistogram.empty())

    @classmethod
    def from_block(
        cls,
        X: np.ndarray,
        w: np.ndarray | None = None,
        *,
        precision: str = "float64",
        out: np.ndarray | None = None,
        prior: tuple[float, float, np.ndarray] | None = None,
    ) -> Moments:
        """Moments of one block. ``out`` is an optional float64 scratch buffer of X's shape. ``prior``: the rows
        before it (weight sum, sum of squared weights, mean), about whose mean and the block's the rows' squared
        norms are taken (:func:`_block_norms`; where the block needs no rescaling)."""
        n, d = X.shape
        if w is None:
            W = float(n)
            npos = n
            mean = X.mean(axis=0, dtype=np.float64)
        else:
            w = np.asarray(w, dtype=np.float64)
            W = float(w.sum())
            npos = int(np.count_nonzero(w))
            if W == 0.0:
                return cls(n, 0.0, 0, np.zeros(d), np.zeros((d, d)), 1.0, True, n, None, NormHistogram.empty())
            mean = (w @ X.astype(np.float64, copy=False)) / W
        scale = 1.0
        if not np.all(np.isfinite(mean)):
            if not np.all(np.isfinite(X)):
                # Non-finite input: the caller inspects the rows; nothing to accumulate.
                return cls(n, W, npos, mean, np.zeros((d, d)), 1.0, w is not None, n, None, NormHistogram.empty())
            # Finite values whose sum overflows: divide by a power of two first.
            amax = float(np.max(np.abs(X)))
            scale = _power_of_two_above(amax)
            X = X.astype(np.float64) / scale
            mean = X.mean(axis=0) if w is None else (w @ X) / W
        if out is None or out.shape[0] < n:
            xc = np.subtract(X, mean, dtype=np.float64)
        else:
            xc = np.subtract(X, mean, out=out[:n], dtype=np.float64)
        if w is not None:
            xc *= np.sqrt(w)[:, None]
        m2 = _gram(xc, precision)
        top = float(np.max(np.diag(m2))) if d else 0.0
        if not np.isfinite(top) or (top < _TINY and (top > 0.0 or np.any(xc))):
            amax = float(np.max(np.abs(xc)))
            s = _power_of_two_above(amax) if amax > 0 else 1.0
            xc /= s
            mean = mean / s
            scale *= s
            m2 = _gram(xc, precision)
        # Centred on its own rounded mean, which becomes the origin. The true mean differs from it by
        # the rounding residual r (about eps * |mean|): keep r as the offset and centre m2 on it.
        # (xc carries sqrt(w) when weighted, so sum sqrt(w) xc = sum w (x - origin).)
        r = (xc.sum(axis=0) if w is None else np.sqrt(w) @ xc) / W
        root = r * np.sqrt(W)
        _sub_outer(m2, root, root)  # in place (m2 is ours), as u u^T: exactly symmetric, as the product is
        if prior is not None and prior[0] > 0 and scale == 1.0:  # (about the mean of every row so far)
            norms = _block_norms(xc, np.zeros(d), w, (prior[0], prior[1], np.asarray(prior[2]) - mean))
        else:
            q = unshrunk(np.einsum("ij,ij->i", xc, xc), w)
            norms = NormHistogram.of(q if w is None else q[w > 0], log2_scale=2 * int(np.log2(scale)))
            if w is None:  # (in the data's units, as the norms are; past float64's range it is not kept)
                f4, b4 = coordinate_fourth(xc)
                with np.errstate(over="ignore", invalid="ignore"):
                    norms = norms.with_fourth(float(np.float64(f4) * np.float64(scale) ** 4), b4)
        return cls(n, W, npos, r, m2, scale, w is not None, n, np.asarray(mean, dtype=np.float64), norms)

    @classmethod
    def from_block_shifted(
        cls,
        X: np.ndarray,
        shift: np.ndarray,
        w: np.ndarray | None = None,
        *,
        precision: str = "float64",
        out: np.ndarray | None = None,
        prior: tuple[float, float, np.ndarray] | None = None,
        product: np.ndarray | None = None,
    ) -> Moments:
        """Moments of one block in a single pass over the data (the streaming fast path).

        Rows are shifted by a fixed ``shift`` (the first block's mean) and multiplied with a
        column of ones appended, so one ``A^T A`` gives the shifted second moment, the
        column sums and the count together: ``m2 = A'^T A' - s s^T / W`` with ``s`` the
        shifted column sums. With the shift near the mean, ``s`` is small and the
        subtraction loses nothing; when a block's mean has drifted from the shift by more
        than its own spread in any feature, the block is centred on its own mean instead.
        ``out`` is an optional scratch buffer of shape ``(>= n, d + 1)`` in the precision. ``prior``: the rows
        before this block (their weight sum, their sum of squared weights, their mean less ``shift``): the rows'
        squared norms are then taken about the mean of every row so far (:func:`_block_norms`); its mean is in
        the data's units. ``product``: a ``(d + 1, d + 1)`` float64 buffer the product is written into (the same
        bits: BLAS's ``syrk`` either way), for a caller that keeps no view of the block's moments past the next
        block (its page faults, a 134 MB product a block at d = 4,096, are then paid once).
        """
        n, d = X.shape
        dt = product_dtype(precision)
        if out is None or out.shape[0] < n or out.shape[1] != d + 1 or out.dtype != dt:
            out = np.empty((n, d + 1), dtype=dt)
        A = out[:n]
        # The shift actually subtracted (rounded to the product precision) is the one the mean is
        # rebuilt from; a float64 shift with a float32 subtraction would misplace every block mean.
        shift_dt = shift.astype(dt)
        shift = shift_dt.astype(np.float64)
        np.subtract(X, shift_dt, out=A[:, :d], casting="same_kind")
        if w is None:
            A[:, d] = 1.0
            W, npos = float(n), n
        else:
            w = np.asarray(w, dtype=np.float64)
            W, npos = float(w.sum()), int(np.count_nonzero(w))
            if W == 0.0:
                return cls(n, 0.0, 0, np.zeros(d), np.zeros((d, d)), 1.0, True, n, None, NormHistogram.empty())
            root = np.sqrt(w).astype(dt)
            A[:, :d] *= root[:, None]
            A[:, d] = root
        scratch = out[:, :d] if dt == np.float64 else None

        def unshifted(sums: np.ndarray, diag: np.ndarray) -> Moments | None:
            """The block's moments by another path when the shifted product cannot give them: the
            exact path when the sums are non-finite, huge or tiny; centred on the block's own mean when
            a feature's offset from the shift holds over half its raw second moment (the subtraction
            ``- s s^T / W`` would lose more than one bit there). None: the shifted product is safe."""
            top = float(diag.max()) if d else 0.0
            if not np.all(np.isfinite(sums)) or not np.isfinite(top) or top < _TINY:
                return cls.from_block(X, w, precision=precision, prior=prior)
            if np.any(sums * (sums / W) > 0.5 * diag):
                return cls._from_drifted_block(X, w, precision, scratch, prior)
            return None

        if d >= DRIFT_TEST_FIRST_D:
            # Wide rows: the same test before the product, from the block's own sums (O(n d): a few % of
            # the product's O(n d^2) at these widths), so a drifted block costs one product, not two.
            with np.errstate(over="ignore", invalid="ignore"):
                pre_sums = np.asarray(A[:, d] @ A[:, :d], dtype=np.float64)
                pre_diag = np.einsum("ij,ij->j", A[:, :d], A[:, :d], dtype=np.float64)
            done = unshifted(pre_sums, pre_diag)
            if done is not None:
                return done
        with np.errstate(over="ignore", invalid="ignore"), threads.blas(float(n) * (d + 1) ** 2):
            if product is not None and dt == np.float64 and product.shape == (d + 1, d + 1):
                G = np.matmul(A.T, A, out=product)
            else:
                G = (A.T @ A).astype(np.float64, copy=False)
        raw = G[:d, :d]
        sums = G[:d, d].copy()
        done = unshifted(sums, np.diag(raw))
        if done is not None:
            return done
        delta = sums / W
        m2 = raw  # a view of G: corrected in place, so no d x d temporary is made
        # BLAS's syrk makes A^T A exactly symmetric; subtracting u u^T (u_i u_j == u_j u_i in floating
        # point) keeps it so, with no pass to symmetrise it afterwards
        root = sums / np.sqrt(W)
        _sub_outer(m2, root, root)
        in_frame = None if prior is None else (prior[0], prior[1], np.asarray(prior[2]) - shift)
        return cls(n, W, npos, delta, m2, 1.0, w is not None, n, shift, _block_norms(A[:, :d], delta, w, in_frame))

    @classmethod
    def _from_drifted_block(
        cls, X: np.ndarray, w: np.ndarray | None, precision: str, out: np.ndarray | None,
        prior: tuple[float, float, np.ndarray] | None = None,
    ) -> Moments:
        """A block whose mean has left the shift: centred on its own mean (one product), or, when
        every row is the same (zero padding, a constant feature map), no product at all: its
        centred second moment is exactly zero."""
        n, d = X.shape
        first = X[:1]
        constant = n and np.all(np.isfinite(first)) and all(bool(np.all(X[i:i + 256] == first))
                                                          for i in range(0, n, 256))
        if constant and (prior is None or not prior[0] > 0):  # (with rows before it: their mean, below)
            if w is None:
                W, npos = float(n), n
            else:
                w = np.asarray(w, dtype=np.float64)
                W, npos = float(w.sum()), int(np.count_nonzero(w))
            origin = np.asarray(first[0], dtype=np.float64)
            zeros = NormHistogram(0, np.zeros(0), float(n if w is None else np.count_nonzero(w)))
            if w is None:  # (every row its block's mean: every fourth moment is 0)
                zeros = zeros.with_fourth(0.0, n if n >= 4 else 0)
            return cls(n, W, npos, np.zeros(d), np.zeros((d, d)), 1.0, w is not None, n, origin, zeros)
        return cls.from_block(X, w, precision=precision, out=out, prior=prior)

    def merge(self, other: Moments, *, reuse: bool = False) -> Moments:
        """Pairwise combination (Chan et al.): exact up to rounding for any split.

        ``reuse=True`` lets the result take over this object's ``m2`` buffer (the caller owns it and
        drops this object): the streaming accumulation keeps one d x d matrix instead of three."""
        if self.d != other.d:
            raise InputError(f"cannot merge moments of {self.d} and {other.d} features.")
        weighted = self.weighted or other.weighted
        rows = max(self.block_rows, other.block_rows)
        norms = None if self.norms is None or other.norms is None else self.norms.merge(other.norms)
        if other.weight_sum == 0.0:
            return Moments(self.n + other.n, self.weight_sum, self.n_positive, self.mean_rel, self.m2,
                           self.scale, weighted, rows, self.origin, norms)
        if self.weight_sum == 0.0:
            return Moments(self.n + other.n, other.weight_sum, other.n_positive, other.mean_rel, other.m2,
                           other.scale, weighted, rows, other.origin, norms)
        scale = max(self.scale, other.scale)
        r = self.scale / scale
        origin = None if self.origin is None else self.origin * r
        ra, m2a = _rescale(self.mean_rel, self.m2, r)
        rb = other.relative_mean(origin, scale)  # other's mean in this origin's frame
        m2b = _rescale(other.mean_rel, other.m2, other.scale / scale)[1]
        Wa, Wb = self.weight_sum, other.weight_sum
        W = Wa + Wb
        delta = rb - ra
        mean_rel = ra + delta * (Wb / W)
        if reuse and m2a is self.m2:
            m2 = m2a
            m2 += m2b
        else:
            m2 = m2a + m2b
        root = delta * np.sqrt(Wa * Wb / W)
        _sub_outer(m2, -root, root)  # m2 += c delta delta^T as u u^T (exactly symmetric), in row blocks
        return Moments(self.n + other.n, W, self.n_positive + other.n_positive, mean_rel, m2, scale, weighted,
                       rows, origin, norms)

    def second_moment_matrix(self, *, centered: bool = True, ddof: int = 1) -> np.ndarray:
        """The covariance (or uncentred second moment) in units of ``scale**2``.

        Unweighted centred: ``m2 / (n - ddof)``. Weighted: the population covariance
        ``m2 / sum w`` of the normalised weights (SPEC: no ddof applies). Uncentred:
        ``sum w x x^T / sum w`` (``X^T X / n`` when unweighted).
        """
        if centered:
            denom = self.weight_sum if self.weighted else self.n - ddof
            return self.m2 / denom
        m = self.m2 + np.outer(self.mean, self.mean * self.weight_sum)
        return m / self.weight_sum


_ROWS = 256  # rows per in-place block (a 256 x d temporary instead of d x d)


#: The cross term ``2 a_i . delta`` of a shifted block's norms is computed (one more pass over the block:
#: 40 % of the norms' cost, 3 % of the whole pass at d = 768) only when the block's mean lies further from the
#: shift than this fraction of the rows' mean squared norm; below it, it moves each norm by at most about
#: 2 sqrt(fraction) of itself, in either direction.
SKIP_CROSS = 1e-3


def _block_norms(A: np.ndarray, delta: np.ndarray, w: np.ndarray | None,
                 prior: tuple[float, float, np.ndarray] | None = None) -> NormHistogram:
    """The squared norms about the block's mean from the shifted rows ``A = sqrt(w) (x - shift)`` and the
    block mean's offset ``delta`` from the shift: ``||A_i - sqrt(w_i) delta||^2`` expanded, O(n d).

    With ``prior`` (the rows before the block: weight sum, sum of squared weights, mean less the shift), about
    the mean of every row so far instead, made unbiased by :func:`_unbiased_about_running_mean`: a small block's
    own mean makes each norm a noisy estimate of its norm about the
    true mean (the cross terms with the block's other rows: Gaussian rows in blocks of 8 spread their norms 1.3x
    as much as they are spread, in blocks of 3 2.5x, read as row scales), a mean of many rows does not."""
    q = np.einsum("ij,ij->i", A, A).astype(np.float64)
    running: tuple[np.ndarray, float] | None = None
    ref = delta  # (the point the norms are taken about, in A's frame; the fourth moments keep the block's mean)
    if prior is not None and prior[0] > 0:
        w_prior, sq_prior, mean_prior = prior  # (the mean in A's frame)
        W = float(A.shape[0]) if w is None else float(w.sum())
        total = w_prior + W
        ref = (w_prior * np.asarray(mean_prior, dtype=np.float64) + W * delta) / total
        p = np.full(q.size, 1.0 / total) if w is None else w / total
        running = (p, (sq_prior + (float(q.size) if w is None else float(w @ w))) / (total * total))
    dd = float(ref @ ref)
    if dd > SKIP_CROSS * float(q.mean()) / max(float(np.mean(w)) if w is not None else 1.0, 1e-300):
        cross = (A @ ref.astype(A.dtype)).astype(np.float64)
    else:  # the block's mean is within 3 % of a row's spread from the shift: its cross term is a few % of each
        cross = np.zeros_like(q)  # norm either way (a 2.2 % bin's size), its mean term is kept below
    if w is None:
        q += dd - 2.0 * cross
    else:
        q += w * dd - 2.0 * np.sqrt(w) * cross
    q = np.clip(q, 0.0, None)
    q = unshrunk(q, w) if running is None else _unbiased_about_running_mean(q, w, *running)
    if w is not None:
        return NormHistogram.of(q[w > 0])
    f4, b4 = coordinate_fourth(A, delta)
    return NormHistogram.of(q).with_fourth(f4, b4)


def _unbiased_about_running_mean(q: np.ndarray, w: np.ndarray | None, p: np.ndarray, s2: float) -> np.ndarray:
    """Squared norms ``q_i = w_i u_i`` about the mean of every row so far (``p``: each of this block's rows' share
    of that mean, ``s2``: the sum of every row's squared share), each made an unbiased estimate of its norm about
    the true mean as :func:`unshrunk` does for a block's own mean: ``E u_i = (1 - 2 p_i) e_i + K``, ``K = sum_j
    p_j^2 e_j`` (the mean's own spread, which every row shares: an addition of ``e / N`` that doubled the norms of
    rows of small scale in early blocks), ``K`` taken as ``s2`` times the block's mean norm over ``1 - 2 pbar + s2``;
    ``e_i = (u_i - K) / (1 - 2 p_i)``, kept at 0 or above (rows with over 45 % of the mean's weight: divided by
    the shrink ``1 - 2 p_i + s2`` alone)."""
    u = q if w is None else np.where(w > 0, q / np.where(w > 0, w, 1.0), 0.0)
    g = 1.0 - 2.0 * p
    share = p / max(float(p.sum()), 1e-300)  # (the block's own weights)
    # the block's mean norm is about (1 - 2 pbar + s2) e: K = s2 e from it (1 - s2 where every row weighs the same;
    # a row that dominates the mean made 1 - s2 vanish, and K every other row's whole norm)
    K = s2 * float(share @ u) / max(1.0 - 2.0 * float(share @ p) + s2, 1e-12)
    e = np.where(g > 0.1, np.maximum(u - K, 0.0) / np.where(g > 0.1, g, 1.0), u / np.maximum(g + s2, 1e-12))
    return e if w is None else e * w


def unshrunk(q: np.ndarray, w: np.ndarray | None) -> np.ndarray:
    """Squared norms about the block's own (weighted) mean, each made an unbiased estimate of its norm about the
    true mean, so that small blocks neither bias the row scales nor narrow their spread.

    With ``p = w / sum w``, ``u_i = ||x_i - block mean||^2`` (``q_i = w_i u_i``) and ``e_i`` the squared norm
    about the true mean: ``E[u_i] = (1 - 2 p_i) e_i + K`` with ``K = sum_j p_j^2 e_j`` (rows independent, mean-zero
    about the true mean), so ``e_i = (u_i - K) / (1 - 2 p_i)``; summing ``p_i^2 u_i / (1 - 2 p_i)`` gives
    ``K = sum p_i^2 u_i / (1 - 2 p_i) / (1 + sum p_i^2 / (1 - 2 p_i))`` (unweighted: ``K = mean u / (b - 1)``). The
    block's mean norm is then ``b / (b - 1)`` times the observed one, as before, but the constant part ``K`` that
    every row shares (the block mean's own spread) no longer narrows the histogram (by ``1 - 2/b``: a fifth of the
    scales' variance in 16-row blocks). Negative estimates are kept at 0. Rows with more than 45 % of the block's
    weight, and blocks of fewer than 3 rows, divide by the shrink of the mean, ``1 - 2 p_i + sum p^2``, instead
    (a block of one row has none: its norm stays 0)."""
    n = q.size
    p = np.full(n, 1.0 / n) if w is None else w / max(float(w.sum()), 1e-300)
    shrink = 1.0 - 2.0 * p + float(p @ p)
    mean_form = np.where(shrink > 1e-12, q / np.where(shrink > 1e-12, shrink, 1.0), q)
    g = 1.0 - 2.0 * p
    ok = (g > 0.1) & (p > 0) if n >= 3 else np.zeros(n, dtype=bool)
    if not ok.any():
        return mean_form
    u = q if w is None else np.where(p > 0, q / np.where(w > 0, w, 1.0), 0.0)
    po, go = p[ok], g[ok]
    K = float(np.sum(po * po * u[ok] / go)) / (1.0 + float(np.sum(po * po / go)))
    e = np.maximum(u - K, 0.0) / np.where(ok, g, 1.0)
    return np.where(ok, e if w is None else e * w, mean_form)


def _sub_outer(m: np.ndarray, u: np.ndarray, v: np.ndarray) -> None:
    """``m -= outer(u, v)`` in place, a block of rows at a time."""
    for i in range(0, m.shape[0], _ROWS):
        m[i:i + _ROWS] -= np.outer(u[i:i + _ROWS], v)


def _rescale(mean: np.ndarray, m2: np.ndarray, r: float) -> tuple[np.ndarray, np.ndarray]:
    if r == 1.0:
        return mean, m2
    return mean * r, m2 * (r * r)


def _gram(xc: np.ndarray, precision: str) -> np.ndarray:
    """``xc^T xc`` in float64, or in float32 blocks accumulated into float64."""
    with np.errstate(over="ignore", invalid="ignore"), threads.blas(float(xc.shape[0]) * xc.shape[1] ** 2):
        # overflow is detected and rescaled
        if product_dtype(precision) != np.float64:
            x32 = xc.astype(np.float32)
            return (x32.T @ x32).astype(np.float64)
        return xc.T @ xc
