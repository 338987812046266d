"""Samples simulated from a population spectrum: the parametric bootstrap of the population exponent and the
sampling curve's scatter (:mod:`spectra_cli.analysis.population`). ``Sigma`` is taken diagonal: the
spectrum does not depend on the rotation.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from functools import partial
from typing import TypeVar

import numpy as np

from spectra_cli.eigen.decomposition import eigvalsh_checked

#: Simulated rows and their products are float32 (half the time of float64); their Gram matrices are decomposed
#: in float64. A float32 product's rounding is relative to each entry's scale (about 6e-8 sqrt(n)): far below the
#: scatter of a simulated sample, which is what the simulations measure.
SIMULATION_DTYPE = np.float32
#: Decompositions of fewer rows than this run one after another, never side by side (:func:`side_by_side`,
#: :func:`parallel_count`): the threads cost more than they save there (the 40 simulated samples and 16 sub-samples
#: of ``fit --population``, in one process on 2 cores, side by side against one after another: d = 128, n = 4 d,
#: 0.148 against 0.135 s; d = 256 0.436 against 0.472 s).
SIDE_BY_SIDE_ORDER = 192

#: The most bytes of simulated samples' Gram matrices (and their decompositions' copies) held at once to
#: decompose several side by side: 640 MiB, two at a time up to d = 4,579 (each 16 d^2 bytes), one from 4,580.
PARALLEL_BYTES = 5 << 27

T = TypeVar("T")


def side_by_side(tasks: Sequence[Callable[[], T]], order: int) -> list[T]:
    """The tasks' results in order. Each task decomposes matrices of ``order`` rows; where that pays
    (:func:`_side_by_side_pays`) the tasks run side by side on the cores this process may use, as many at once as
    :func:`parallel_count` allows (the memory budget), each task's BLAS and LAPACK calls on one thread (numpy
    releases the GIL inside them): a simulated sample's eigendecomposition at d = 1,024 leaves the second core idle.
    Otherwise one after another, as the policy sizes each (:func:`spectra_cli.threads.map_side_by_side`). The
    results are the same bits either way."""
    from spectra_cli import threads

    at_once = parallel_count(order, order)
    out: list[T] = []
    for a in range(0, len(tasks), at_once):
        out += threads.map_side_by_side(lambda task: task(), tasks[a:a + at_once], wanted=at_once > 1)
    return out


def _side_by_side_pays(order: int) -> bool:
    """Whether decompositions of ``order`` rows run side by side, one thread each: from :data:`SIDE_BY_SIDE_ORDER`
    rows, where the thread policy runs the calls it sizes as small on one thread (no caller fixed more), and either
    gives such a decomposition one thread anyway (below its small-eigensolver size, d < ~1,950) or on one thread it
    is LAPACK's two-stage driver (from :func:`~spectra_cli.eigen.two_stage.min_order` rows, where one thread each
    beats the one-stage driver on all the cores: d = 4,096 on 2 cores, 2.07 s a decomposition two at a time against
    3.37 s one after another). One thread each, one core or several decompose by the same routine: the same bits."""
    from spectra_cli import threads
    from spectra_cli.eigen import two_stage
    from spectra_cli.eigen.decomposition import EIGVALSH_FLOPS

    if order < SIDE_BY_SIDE_ORDER or threads.threads_for(0.0) != 1:
        return False
    if threads.threads_for(EIGVALSH_FLOPS * float(order) ** 3, threads.SMALL_EIGEN_FLOPS) == 1:
        return True
    return order >= two_stage.min_order("float64") and two_stage.available()


def simulated_rows(tau: np.ndarray, n: int, rng: np.random.Generator,
                   scales: tuple[np.ndarray, np.ndarray] | None) -> np.ndarray:
    """``n`` rows ``sqrt(w_i) tau^(1/2) z_i`` (``Sigma`` diagonal: the spectrum does not depend on the rotation), in
    float32 (:data:`SIMULATION_DTYPE`)."""
    Z = rng.standard_normal((n, tau.size), dtype=SIMULATION_DTYPE)
    Z *= np.sqrt(tau).astype(SIMULATION_DTYPE)
    if scales is not None:
        Z *= np.sqrt(rng.choice(scales[0], size=n, p=scales[1])).astype(SIMULATION_DTYPE)[:, None]
    return Z


def _gram(Z: np.ndarray, rows: np.ndarray | slice = slice(None)) -> np.ndarray:
    """``Z^T Z`` (``Z`` the rows ``rows``) in float64 from the rows' precision: a float32 product's rounding is
    relative to each entry's own scale (``~ 6e-8 sqrt(n)``), far below a simulated sample's own scatter."""
    from spectra_cli import threads

    A = Z[rows]
    with threads.blas(2.0 * A.shape[0] * A.shape[1] ** 2):
        return (A.T @ A).astype(np.float64)


def _small_gram(Z: np.ndarray) -> np.ndarray:
    """The smaller Gram matrix of the rows ``Z`` (``Z Z^T`` when n < d, else ``Z^T Z``), formed in ``Z``'s
    precision on the threads the policy gives the product, in float64."""
    from spectra_cli import threads

    n, d = Z.shape
    if n < d:
        with threads.blas(2.0 * n * n * d):
            return (Z @ Z.T).astype(np.float64)
    return _gram(Z)


def _spectrum_of_gram(G: np.ndarray, d: int, denom: float) -> np.ndarray:
    ev = eigvalsh_checked(G, "a simulated sample's Gram matrix")[::-1] / denom
    out = np.zeros(d)
    out[:ev.size] = ev
    return out


def _gram_spectrum(Z: np.ndarray, denom: float) -> np.ndarray:
    """The eigenvalues (descending, length d) of ``Z^T Z / denom``, by the smaller Gram matrix (formed in ``Z``'s
    precision, decomposed in float64)."""
    return _spectrum_of_gram(_small_gram(Z), Z.shape[1], denom)


def partition_spectra(Z: np.ndarray, part: np.ndarray, parts: int) -> list[np.ndarray]:
    """The covariance spectra (ddof 1, descending, length d) of the rows ``Z`` and of each sub-sample that leaves
    out the rows of one part (``part``: each row's part, ``0..parts-1``), from one Gram matrix: with more rows
    than features the parts' ``d x d`` products are summed (each sub-sample the total less its part), else each
    sub-sample's ``n x n`` Gram matrix is a principal block of the whole one; centred by the sums."""
    from spectra_cli import threads

    n, d = Z.shape
    if n >= d:
        P = [_gram(Z, part == q) for q in range(parts)]
        S = [Z[part == q].sum(axis=0, dtype=np.float64) for q in range(parts)]
        N = [int(np.count_nonzero(part == q)) for q in range(parts)]
        total, s_all = sum(P), sum(S)

        def covariance_spectrum(q: int | None) -> np.ndarray:
            M, s_, m = (total, s_all, n) if q is None else (total - P[q], s_all - S[q], n - N[q])
            C = (M - np.outer(s_, s_) / m) / (m - 1)
            return eigvalsh_checked(C, "a simulated sample's covariance")[::-1]

        return side_by_side([partial(covariance_spectrum, q) for q in (None, *range(parts))], d)
    with threads.blas(2.0 * n * n * d):
        K = (Z @ Z.T).astype(np.float64)

    def gram_spectrum(q: int | None) -> np.ndarray:
        idx = np.arange(n) if q is None else np.flatnonzero(part != q)
        Kq = K[np.ix_(idx, idx)]
        r = Kq.mean(axis=0)
        Kc = Kq - r[:, None] - r[None, :] + r.mean()  # H K H: the Gram matrix of the centred rows
        ev = eigvalsh_checked(Kc, "a simulated sample's Gram matrix")[::-1] / (idx.size - 1)
        v = np.zeros(d)
        v[:ev.size] = ev
        return v

    return side_by_side([partial(gram_spectrum, q) for q in (None, *range(parts))], n)


def simulated_stream(tau: np.ndarray, n: int, rng: np.random.Generator,
                     scales: tuple[np.ndarray, np.ndarray] | None, count: int) -> Iterator[np.ndarray]:
    """``count`` of :func:`simulated_spectrum` in order (the same stream, the same bits), a few at a time
    (:func:`parallel_count`): where their decompositions run side by side, the next few samples' rows are drawn
    meanwhile (the draw is one core's work; the products stay between the decompositions, on the policy's
    threads)."""
    from concurrent.futures import ThreadPoolExecutor

    from spectra_cli import threads

    at_once = parallel_count(n, tau.size)
    sizes = [min(at_once, count - a) for a in range(0, count, at_once)]
    if at_once <= 1:
        for _ in range(count):
            yield simulated_spectrum(tau, n, rng, scales)
        return
    rows = [simulated_rows(tau, n, rng, scales) for _ in range(sizes[0])]
    decompose = threads.in_pool(partial(_spectrum_of_gram, d=tau.size, denom=float(n)))
    with ThreadPoolExecutor(max_workers=at_once) as pool:
        for k in range(len(sizes)):
            grams = [_small_gram(Z) for Z in rows]
            rows = []  # (freed before the next ones are drawn)
            with threads.blas(0.0):  # (set once, by this thread: each decomposition on one thread)
                futures = [pool.submit(decompose, G) for G in grams]
                if k + 1 < len(sizes):
                    rows = [simulated_rows(tau, n, rng, scales) for _ in range(sizes[k + 1])]
                done = [f.result() for f in futures]
            yield from done


def parallel_count(n: int, d: int) -> int:
    """How many simulated samples of ``n`` x ``d`` rows to decompose at once: the cores, where they run side by
    side (:func:`side_by_side`; one inside another pool's task), within :data:`PARALLEL_BYTES` of their float64
    Gram matrices (each held, and copied by the decomposition); else one."""
    from spectra_cli import threads

    m = min(n, d)
    if not _side_by_side_pays(m):
        return 1
    return max(1, min(threads.pool_workers(1 << 30, wanted=True), PARALLEL_BYTES // max(1, 16 * m * m)))


def simulated_spectrum(tau: np.ndarray, n: int, rng: np.random.Generator,
                       scales: tuple[np.ndarray, np.ndarray] | None) -> np.ndarray:
    """The eigenvalues (descending, length d) of ``X^T X / n`` for ``n`` rows ``sqrt(w_i) tau^(1/2) z_i``
    (``Sigma`` diagonal: the spectrum does not depend on the rotation), by the smaller Gram matrix."""
    return _gram_spectrum(simulated_rows(tau, n, rng, scales), float(n))
