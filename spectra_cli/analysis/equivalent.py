"""The deterministic equivalent of the sample spectrum: the expected sample eigenvalues of a population.

With ``n`` rows ``x_i = sqrt(s_i) Sigma^(1/2) z_i`` (``z_i`` standard Gaussian, ``s_i`` a scale per row of
law ``(w, p)``; ``s_i = 1``: Gaussian rows) and ``c = d / n``, the sample covariance's spectrum converges to
a deterministic law given by Silverstein's equation (Marchenko & Pastur 1967; Silverstein & Bai 1995; with
row scales Paul & Silverstein 2009, Couillet & Hachem 2014). :func:`expected_eigenvalues` solves it on a
log-spaced grid (Newton's method from a continuation off the real axis, or from the last evaluation's
solution) and averages its quantile function over each rank's slice of mass ``1/d`` (Ledoit & Wolf 2017's
QuEST discretisation). Used by the population exponent (:mod:`spectra_cli.analysis.population`) and the
spikes' bulk (:mod:`spectra_cli.analysis.spikes`).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

#: Fewer ranks than this and no slope is read off them (the population exponent, the sampling curve).
MIN_RANKS = 5
#: Continuation of the imaginary part of z = x (1 + i eps): from far off the real axis (where the fixed
#: point is easy) down to 1e-5 (a Lorentzian leak of about d eps / pi ranks: negligible).
EPS_PATH = (1.0, 0.1, 1e-2, 1e-3, 1e-5)
#: The continuation again for the points :data:`EPS_PATH` leaves off the root, from a hundred times further off the
#: axis: with row scales near n = d (a third of the rows at 3 % of the others' scale) the path from 1 ended in another
#: basin below the bulk, and the expected spectrum lost its lower third (zero from rank 144 of 207); from 100 it
#: follows the branch (every rank, the simulated mean within 10 %). Only for those points: on every point it cost
#: 12 % of a fit at d = 1,024, n = 2 d.
FAR_PATH = (100.0, 10.0, *EPS_PATH)
#: A step halved to stay in the upper half plane (a point just off the real axis, where the density is about 0:
#: Newton then converges only linearly) ends the point's iteration below this relative size.
HALVED_TOL = 1e-7
#: A point whose relative residual is above this after the continuation is off the root (its path down from far off
#: the real axis crossed into another basin: with row scales and n near d, 0.3 where the root's is 1e-15) and is
#: solved again from its neighbours (:func:`_marched`).
FAILED_RESIDUAL = 1e-6
#: A marched point is taken only at a root this close (and in the upper half plane): Newton stalled on the real axis
#: by halved steps can stop at a residual of 6e-7 on no root at all (16,486 marched points checked against
#: the exact roots of few-atom populations: at 1e-6 five were such, at 1e-10 none, as many recovered).
MARCHED_RESIDUAL = 1e-10
#: Newton iterations from a warm start (the last solution, at nearby parameters) before a point takes the
#: continuation instead.
WARM_ITERATIONS = 12
#: A warm-started point whose relative residual ``|F(e)| / |e|`` is above this takes the continuation too.
WARM_RESIDUAL = 1e-9
#: Population atoms are merged while their log-span is below min(MERGE_SPAN, sqrt(MERGE_KAPPA c pi W))
#: (W the group's weight): well inside the sampling smoothing width ~ c pi W of that part of the spectrum.
MERGE_SPAN = 0.05
MERGE_KAPPA = 0.1
MAX_ATOMS = 1000
#: The grid's points a decade: sqrt(d / c) = sqrt(n), within these bounds. The count of eigenvalues above each point
#: is exact (:func:`_distribution_piece`), not a quadrature of the density, so the grid only has to place the ranks'
#: slices: at n = 51,200 the window's expected slope is the same to 5e-5 from 300 to 4,000 points a decade, where the
#: density's quadrature (7 sqrt(n) points a decade, at most 1,000, before issue 33's sixth round) moved it by 0.008
#: between 500 and 4,000 (the top eigenvalues' clusters, ~2 / sqrt(n) wide in log, fell between its points).
POINTS_PER_DECADE = (300, 1000)
#: An evaluation after the first on a :class:`Grid` starts its grid this many decades below where the last one's ranks
#: ended (relative to the population's eigenvalue of the last rank): the points below, a third of the grid in a
#: population fit, only count eigenvalues no rank asks for. Where the population moved the ranks' end past it, the
#: evaluation is made again on the whole grid.
FLOOR_MARGIN = 0.1


def grid_density(d: int, c: float) -> int:
    """The grid's density (points a decade) for ``d`` dimensions at ``c = d / n``: :data:`POINTS_PER_DECADE`."""
    return int(np.clip(math.sqrt(d / c), *POINTS_PER_DECADE))


def merge_groups(values: np.ndarray, weights: np.ndarray | None = None, *, c: float | None = None,
                 span: float = MERGE_SPAN, max_atoms: int = MAX_ATOMS) -> np.ndarray:
    """Group labels (in the order of ``values``) merging neighbouring atoms, sorted by value: a group grows
    while its log-span stays below ``span`` and, given ``c``, below ``sqrt(MERGE_KAPPA c pi W)``; ``span`` is
    doubled until at most ``max_atoms`` groups remain."""
    order = np.argsort(values)
    lv = np.log(np.asarray(values, dtype=np.float64)[order])
    wt = np.full(lv.size, 1.0 / lv.size) if weights is None else np.asarray(weights, dtype=np.float64)[order]
    while True:
        gid = np.empty(lv.size, dtype=np.int64)
        g, g0, W = 0, lv[0], 0.0
        for i in range(lv.size):
            lim = span if c is None else min(span, math.sqrt(MERGE_KAPPA * c * math.pi * (W + wt[i])))
            if lv[i] - g0 > lim:
                g, g0, W = g + 1, lv[i], 0.0
            W += wt[i]
            gid[i] = g
        if g + 1 <= max_atoms:
            out = np.empty_like(gid)
            out[order] = gid
            return out
        span *= 2


def merged(values: np.ndarray, weights: np.ndarray | None, groups: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Atoms ``(value, weight)``: each group at its weighted mean, weights summing to the input's."""
    wt = np.full(values.size, 1.0 / values.size) if weights is None else np.asarray(weights, dtype=np.float64)
    wsum = np.bincount(groups, wt)
    return np.bincount(groups, wt * values) / wsum, wsum


def _halve_into_upper_half_plane(ea: np.ndarray, step: np.ndarray, new: np.ndarray, bad: np.ndarray) -> None:
    """Halve each step at ``bad`` the fewest times (1 to 30) that keeps ``ea - step`` in the upper half plane, in
    place: ``Im(ea) - Im(step) 2^-k`` grows with ``k``, so ``k`` is read off ``log2(Im step / Im ea)`` and then
    checked against the exact arithmetic either side (scaling by a power of two is exact: the same numbers as
    halving ``k`` times, without a Python loop over the halvings)."""
    eb, sb = ea[bad], step[bad]
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        k = np.ceil(np.log2(sb.imag / eb.imag))
    k = np.clip(np.nan_to_num(k, nan=30.0, posinf=30.0, neginf=1.0), 1.0, 30.0)
    for _ in range(4):  # (the logarithm's rounding corrected: once, nearly always; stopped when nothing moves)
        lower = np.maximum(k - 1.0, 1.0)
        moved = np.where((k > 1.0) & ((eb - sb * 2.0 ** -lower).imag >= 0), lower, k)
        moved = np.where(((eb - sb * 2.0 ** -moved).imag < 0) & (moved < 30.0), moved + 1.0, moved)
        if np.array_equal(moved, k):
            break
        k = moved
    step[bad] = sb * 2.0 ** -k
    new[bad] = eb - step[bad]


def _resolvent_sums(X: np.ndarray, z: np.ndarray, tau: np.ndarray, pt: np.ndarray, ptt: np.ndarray,
                    work: list[np.ndarray] | None = None) -> tuple[np.ndarray, np.ndarray]:
    """``sum_a pt_a / (tau_a X - z)`` and ``sum_a ptt_a / (tau_a X - z)^2`` at every point, in real arithmetic
    (``1 / D = conj(D) / |D|^2``: about three times numpy's complex division, the same numbers to ~1e-14;
    ``|D| >= Im z > 0``, as ``Im X <= 0`` on the Stieltjes branch; the first sum alone, on parts kept:
    :func:`_first_sums`, the same arithmetic). ``work``: four
    arrays of at least as many rows as points and ``tau.size`` columns to compute in (:func:`_workspace`; None: new
    ones), the same numbers."""
    k = X.size
    re, im, den, tmp = ([w[:k] for w in work] if work is not None
                        else [np.empty((k, tau.size)) for _ in range(4)])
    np.multiply.outer(X.real, tau, out=re)
    re -= z.real[:, None]
    np.multiply.outer(X.imag, tau, out=im)
    im -= z.imag[:, None]
    np.multiply(re, re, out=den)
    den += np.multiply(im, im, out=tmp)
    np.reciprocal(den, out=den)
    re *= den
    im *= den  # 1 / D = re - i im
    first = re @ pt - 1j * (im @ pt)
    np.multiply(re, re, out=den)
    den -= np.multiply(im, im, out=tmp)
    im *= re  # (re - i im)^2 = re^2 - im^2 - 2 i re im
    return first, den @ ptt - 2j * (im @ ptt)


def _workspace(points: int, atoms: int) -> list[np.ndarray]:
    """Four arrays of ``points x atoms`` for :func:`_resolvent_sums`, made once for a solve's iterations (arrays of
    a few MiB made and freed at every iteration are mapped and faulted afresh where the allocator hands them back to
    the system: a library caller's process)."""
    return [np.empty((points, atoms)) for _ in range(4)]


def x_of(e: np.ndarray, scales: tuple[np.ndarray, np.ndarray] | None, c: float) -> np.ndarray:
    """``X(e) = sum_k p_k w_k / (1 + c w_k e)`` (``1 / (1 + c e)`` for Gaussian rows)."""
    if scales is None:
        return 1.0 / (1.0 + c * e)
    w, p = scales
    return (1.0 / (1.0 + c * e[:, None] * w[None, :])) @ (p * w)


def _solve_e(z: np.ndarray, tau: np.ndarray, pi: np.ndarray, scales: tuple[np.ndarray, np.ndarray] | None,
             c: float, e0: np.ndarray, *, iters: int = 40, tol: float = 1e-10) -> tuple[np.ndarray, np.ndarray]:
    """Newton's method on ``F(e) = e - sum_a pi_a tau_a / (tau_a X(e) - z)`` at every grid point at once
    (``X(e) = sum_k p_k w_k / (1 + c w_k e)``; ``1 / (1 + c e)`` for Gaussian rows), iterating the points
    not yet converged; a step that would leave the upper half plane (the Stieltjes branch) is halved.
    Returns the solution and the indices of the points that did not converge within ``iters``."""
    e = e0.copy()
    act = np.arange(e.size)
    pt, ptt = pi * tau, pi * tau * tau
    work = _workspace(e.size, tau.size)
    for _ in range(iters):
        ea, za = e[act], z[act]
        if scales is None:
            den = 1.0 + c * ea
            X, dX = 1.0 / den, -c / den ** 2
        else:
            w, p = scales
            q = 1.0 / (1.0 + c * ea[:, None] * w[None, :])
            X = q @ (p * w)
            dX = -c * ((q * q) @ (p * w * w))
        s1, s2 = _resolvent_sums(X, za, tau, pt, ptt, work)
        step = (ea - s1) / (1.0 + dX * s2)
        new = ea - step
        bad = np.flatnonzero(new.imag < 0)
        limit = np.full(new.size, tol)
        if bad.size:
            _halve_into_upper_half_plane(ea, step, new, bad)
            limit[bad] = HALVED_TOL
        e[act] = new
        act = act[np.abs(step) > limit * (np.abs(new) + 1e-300)]
        if not act.size:
            break
    return e, act


def _continued(x: np.ndarray, tau: np.ndarray, pi: np.ndarray, scales: tuple[np.ndarray, np.ndarray] | None,
               c: float, path: tuple[float, ...] = EPS_PATH) -> np.ndarray:
    """The solution at ``x (1 + i path[-1])`` by continuation along ``path`` (:data:`EPS_PATH`) from ``X = 1``."""
    e: np.ndarray | None = None
    for eps in path:
        z = x * (1.0 + 1j * eps)
        if e is None:
            e = (pi * tau / (tau[None, :] - z[:, None])).sum(axis=1)  # the solution for X = 1
        e = _solve_e(z, tau, pi, scales, c, e)[0]
    assert e is not None
    return e


#: The expected spectrum's grid is solved in pieces of this many points, side by side on the cores this process
#: may use (the points are independent, and numpy's element-wise kernels run on one core). The pieces are the
#: same whatever the cores (numpy's vectorised loops can round a point differently by where it falls in an
#: array, in the last bit): the same bits on any machine.
CHUNK_POINTS = 512
#: Grid points times atoms from which the pieces are solved side by side.
PARALLEL_WORK = 1 << 20
#: Grid points times atoms from which several evaluations (a finite difference's) run side by side, each on one
#: core, where one evaluation does not solve its own pieces side by side. Below it the threads cost more than they
#: save (the match's time, in one process on 2 cores, evaluations side by side against one after another: 1,148 x
#: 26, d = 32, 0.234 against 0.206 s; 1,207 x 53, d = 128, 0.417 against 0.324 s; 1,220 x 83, d = 256, 0.46 against
#: 0.41 s). Above it they paid at d = 1,024, n = 2 d (2,095 x 133, with two busy processes on the cores: 1.37 against
#: 2.1 s) and were mixed at d = 384, n = 50 d (1,610 x 262: 10-25 % slower quiet in three runs of four, either way
#: loaded): a thread's cost is not only a size, so the pools are kept above it (bench/README.md).
EVALUATIONS_WORK = 1 << 17


def pieces_side_by_side(points: int, atoms: int) -> bool:
    """Whether an evaluation on ``points`` grid points of ``atoms`` atoms solves its pieces side by side
    (:data:`PARALLEL_WORK`); below, several evaluations may run side by side instead, each on one core."""
    return points * atoms >= PARALLEL_WORK


def evaluations_side_by_side(points: int, atoms: int) -> bool:
    """Whether several evaluations on ``points`` grid points of ``atoms`` atoms run side by side, each on one core:
    where each is too small to solve its own pieces side by side (:func:`pieces_side_by_side`) but large enough to
    pay for the threads (:data:`EVALUATIONS_WORK`)."""
    return EVALUATIONS_WORK <= points * atoms < PARALLEL_WORK


def sample_density(tau: np.ndarray, pi: np.ndarray, scales: tuple[np.ndarray, np.ndarray] | None, c: float,
                   x: np.ndarray, *, start: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """The limiting density of the sample spectrum's non-zero part on the grid ``x`` (``Im m(x + i0) / pi``,
    the point mass ``1 - 1/c`` at zero removed when ``c > 1``), by continuation along :data:`EPS_PATH`, and the
    solution ``e`` it came from.

    ``start``: a solution at nearby parameters on the same grid (a warm start). Newton then runs at the last
    ``eps`` alone, and the points it leaves unconverged in :data:`WARM_ITERATIONS` take the continuation: the
    solution in the upper half plane is unique (Silverstein & Bai 1995) and every step is kept there, so both
    routes give the same numbers to the solver's tolerance.

    Every point is solved on its own, in pieces of :data:`CHUNK_POINTS` points, solved side by side where the
    grid is large (:func:`spectra_cli.threads.map_side_by_side`)."""
    return _in_pieces(_density_piece, tau, pi, scales, c, x, start)


Piece = Callable[[np.ndarray, np.ndarray, "tuple[np.ndarray, np.ndarray] | None", float, np.ndarray,
                  "np.ndarray | None"], tuple[np.ndarray, np.ndarray]]


def _in_pieces(piece_of: Piece, tau: np.ndarray, pi: np.ndarray, scales: tuple[np.ndarray, np.ndarray] | None,
               c: float, x: np.ndarray, start: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
    """``piece_of`` (:func:`_density_piece`, :func:`_distribution_piece`) on the grid ``x`` in pieces of
    :data:`CHUNK_POINTS` points, side by side where the grid is large; its values and the solution, joined."""
    from spectra_cli import threads

    parts = [slice(a, min(a + CHUNK_POINTS, x.size)) for a in range(0, x.size, CHUNK_POINTS)]

    def piece(s: slice) -> tuple[np.ndarray, np.ndarray]:
        return piece_of(tau, pi, scales, c, x[s], None if start is None else start[s])

    # (side by side only where the pieces are long enough to pay for the threads: measured on 2 cores, 4,783 points
    # x 262 atoms took 0.148 s a warm evaluation on one thread and 0.105 s on two, 2,100 x 133 0.037 and 0.044 s)
    done = threads.map_side_by_side(piece, parts, wanted=pieces_side_by_side(x.size, tau.size))
    return np.concatenate([f for f, _ in done]), np.concatenate([e for _, e in done])


def _differences(X: np.ndarray, z: np.ndarray, tau: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The real and imaginary parts of ``tau_a X - z`` at every point and atom."""
    re = np.multiply.outer(X.real, tau)
    re -= z.real[:, None]
    im = np.multiply.outer(X.imag, tau)
    im -= z.imag[:, None]
    return re, im


def _first_sums(re: np.ndarray, im: np.ndarray, pt: np.ndarray) -> np.ndarray:
    """``sum_a pt_a / (tau_a X - z)`` from the parts of ``tau_a X - z`` (:func:`_differences`), which are kept: the
    arithmetic of :func:`_resolvent_sums`'s first sum, the same numbers."""
    den = re * re
    den += im * im
    np.reciprocal(den, out=den)
    real_part = np.multiply(re, den, out=np.empty_like(den)) @ pt
    return real_part - 1j * (np.multiply(im, den, out=den) @ pt)


def _relative_residuals(e: np.ndarray, z: np.ndarray, tau: np.ndarray, pi: np.ndarray,
                        scales: tuple[np.ndarray, np.ndarray] | None, c: float) -> np.ndarray:
    """``|F(e)| / |e|`` at each point (:func:`_solve_e`'s equation)."""
    s1 = _first_sums(*_differences(x_of(e, scales, c), z, tau), pi * tau)
    return np.abs(e - s1) / (np.abs(e) + 1e-300)


def _marched(e: np.ndarray, z: np.ndarray, tau: np.ndarray, pi: np.ndarray,
             scales: tuple[np.ndarray, np.ndarray] | None, c: float, failed: np.ndarray) -> None:
    """The points ``failed`` (indices; the continuation left them off the root) solved again, in place, by Newton
    from a converged neighbour's solution, up the grid and then down it (each point solved becomes the next one's
    start): the branch followed along the real axis, node to node, where the path down from far off the axis
    crossed into another basin. A point that does not reach a root so (:data:`MARCHED_RESIDUAL`, ``Im e >= 0``) is
    left as it was. Each piece of the grid (:data:`CHUNK_POINTS`) marches on its own, the same whatever the cores: a
    run of failed points without a converged neighbour in its piece (a whole piece below the support) is left too,
    and Newton from inside the support stalls at a spectral edge short of the roots beyond it."""
    ok = np.ones(e.size, dtype=bool)
    ok[failed] = False
    for step in (1, -1):
        for i in (failed if step == 1 else failed[::-1]):
            j = i - step
            if ok[i] or not (0 <= j < e.size and ok[j]):
                continue
            cand = _solve_e(z[i:i + 1], tau, pi, scales, c, e[j:j + 1])[0]
            if (cand[0].imag >= 0.0
                    and _relative_residuals(cand, z[i:i + 1], tau, pi, scales, c)[0] <= MARCHED_RESIDUAL):
                e[i], ok[i] = cand[0], True


def _recovered(e: np.ndarray, x: np.ndarray, z: np.ndarray, tau: np.ndarray, pi: np.ndarray,
               scales: tuple[np.ndarray, np.ndarray] | None, c: float, failed: np.ndarray) -> None:
    """The points ``failed`` (off the root after the continuation) solved again in place: by the continuation from
    further off the axis (:data:`FAR_PATH`), taken where it reaches a root (:data:`MARCHED_RESIDUAL`, ``Im e >= 0``),
    then, for the rest, from their converged neighbours (:func:`_marched`)."""
    if not failed.size:
        return
    far = _continued(x[failed], tau, pi, scales, c, FAR_PATH)
    good = (far.imag >= 0.0) & (_relative_residuals(far, z[failed], tau, pi, scales, c) <= MARCHED_RESIDUAL)
    e[failed[good]] = far[good]
    if not good.all():
        _marched(e, z, tau, pi, scales, c, failed[~good])


def _off_the_root(e: np.ndarray, z: np.ndarray, tau: np.ndarray, pi: np.ndarray,
                  scales: tuple[np.ndarray, np.ndarray] | None, c: float, among: np.ndarray) -> np.ndarray:
    """The points of ``among`` (indices) whose solution is off the root (:data:`FAILED_RESIDUAL`)."""
    if not among.size:
        return among
    return among[_relative_residuals(e[among], z[among], tau, pi, scales, c) > FAILED_RESIDUAL]


def _solved_parts(tau: np.ndarray, pi: np.ndarray, scales: tuple[np.ndarray, np.ndarray] | None, c: float,
                  x: np.ndarray, z: np.ndarray,
                  start: np.ndarray | None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The solution ``e`` at ``z = x (1 + i EPS_PATH[-1])`` (Newton from ``start``, the points it leaves unconverged
    or with a residual above :data:`WARM_RESIDUAL` by the continuation; else the continuation) and, at it, the parts
    of ``tau_a X(e) - z`` (:func:`_differences`): the warm start's residual check, the distribution function and
    the density read the same ones. The points the continuation leaves off the root are solved again
    (:func:`_recovered`)."""
    if start is None:
        e = _continued(x, tau, pi, scales, c)
        _recovered(e, x, z, tau, pi, scales, c, _off_the_root(e, z, tau, pi, scales, c, np.arange(e.size)))
        return (e, *_differences(x_of(e, scales, c), z, tau))
    e, left = _solve_e(z, tau, pi, scales, c, start, iters=WARM_ITERATIONS)
    # a point whose steps were halved at the axis can stop short of the root: the residual tells (sum_a pi_a tau_a /
    # (tau_a X - z), as :func:`_resolvent_sums` forms it: the same numbers)
    re, im = _differences(x_of(e, scales, c), z, tau)
    s1 = _first_sums(re, im, pi * tau)
    left = np.union1d(left, np.flatnonzero(np.abs(e - s1) > WARM_RESIDUAL * np.abs(e)))
    if left.size:
        e[left] = _continued(x[left], tau, pi, scales, c)
        _recovered(e, x, z, tau, pi, scales, c, _off_the_root(e, z, tau, pi, scales, c, left))
        re[left], im[left] = _differences(x_of(e[left], scales, c), z[left], tau)
    return e, re, im


def _density_piece(tau: np.ndarray, pi: np.ndarray, scales: tuple[np.ndarray, np.ndarray] | None, c: float,
                   x: np.ndarray, start: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
    """:func:`sample_density` on the points ``x``, in this thread."""
    z = x * (1.0 + 1j * EPS_PATH[-1])
    e, re, im = _solved_parts(tau, pi, scales, c, x, z, start)
    m = _first_sums(re, im, pi)  # sum_a pi_a / (tau_a X - z), on the parts the solve left
    if c > 1:
        m = m + (1.0 - 1.0 / c) / z
    return np.maximum(m.imag, 0.0) / np.pi, e


def _distribution_piece(tau: np.ndarray, pi: np.ndarray, scales: tuple[np.ndarray, np.ndarray] | None, c: float,
                        x: np.ndarray, start: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
    """The limiting distribution function ``F(x)`` of the whole sample spectrum (zeros included) on the points
    ``x``, in this thread, exactly from the solution ``e`` rather than by integrating the density: with ``X(e) = sum_k
    p_k w_k / (1 + c w_k e)``, ``m(z) = sum_a pi_a / (tau_a X - z)`` has the primitive ``Phi(z) = -(1/c) sum_k p_k
    (log(1 + c w_k e) + 1 / (1 + c w_k e)) - sum_a pi_a log(tau_a X - z)`` (differentiate, using Silverstein's
    equation ``e = sum_a pi_a tau_a / (tau_a X - z)``), so ``F(x) = Im Phi(x + i0) / pi``: each atom's log turns from
    0 to -pi as the sample spectrum passes it, its argument continuous in the upper half plane (``Im(tau X - z) <
    0``). In a gap of the spectrum it is the exact count of the atoms above (Bai & Silverstein 1998's exact
    separation); inside a cluster, the fraction the density's integral would give, without its quadrature error."""
    z = x * (1.0 + 1j * EPS_PATH[-1])
    # (arctan2 of the real arithmetic's parts: Im(tau X - z) < 0, so each argument lies in (-pi, 0))
    e, re, im = _solved_parts(tau, pi, scales, c, x, z, start)
    # (each argument kept on its side of the real axis: a solution whose imaginary part is a rounding below zero, as
    # Newton leaves some below the support when c > 1, would otherwise turn a -pi into +pi, or a pi into -pi)
    logs = np.arctan2(np.minimum(im, 0.0), re) @ pi
    if scales is None:
        u = 1.0 + c * e
        prim = np.arctan2(np.maximum(u.imag, 0.0), u.real) + (1.0 / u).imag
    else:
        w, p = scales
        u = 1.0 + c * e[:, None] * w[None, :]
        prim = (np.arctan2(np.maximum(u.imag, 0.0), u.real) + (1.0 / u).imag) @ p
    return (-prim / c - logs) / np.pi, e


def sample_distribution(tau: np.ndarray, pi: np.ndarray, scales: tuple[np.ndarray, np.ndarray] | None, c: float,
                        x: np.ndarray, *, start: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """The limiting distribution function of the sample spectrum (zeros included: ``1 - 1/c`` of it when ``c > 1``)
    on the grid ``x`` (:func:`_distribution_piece`), and the solution ``e`` it came from; solved like
    :func:`sample_density` (the warm start, the pieces side by side)."""
    return _in_pieces(_distribution_piece, tau, pi, scales, c, x, start)


@dataclass
class Grid:
    """What one evaluation of the expected spectrum used (reused so that theta -> spectrum is smooth), and its
    solution, the next evaluation's warm start (``warm`` False: none)."""

    groups: np.ndarray | None = None
    points: int = 0
    atoms: int = 0
    warm: bool = True
    last: tuple[np.ndarray, np.ndarray] | None = None  # log x, e
    #: The last evaluation's lowest grid point that the ranks needed (the highest one with at least ``ranks + 0.5``
    #: eigenvalues above it), over the population's eigenvalue of that rank: the next evaluation starts its grid
    #: :data:`FLOOR_MARGIN` below the same ratio (None: at the grid's own lower end).
    floor: float | None = None
    #: The last evaluation's lowest grid point below which its count had passed ``from_rank - 1``, over the
    #: population's eigenvalue of that rank: the next evaluation that reads from the same rank ends its grid
    #: :data:`FLOOR_MARGIN` above the same ratio, and its top point (None: the grid's own top).
    ceiling: float | None = None

    def start(self, x: np.ndarray) -> np.ndarray | None:
        """The last solution interpolated (in log x) onto ``x``: a start near the root wherever the population,
        the ratio or the scales moved little; the residual check of :func:`sample_density` sends the points where
        it is not to the continuation, so any start gives the same numbers."""
        if not self.warm or self.last is None:
            return None
        lx, e = self.last
        u = np.log(x)
        return np.interp(u, lx, e.real) + 1j * np.interp(u, lx, e.imag)


def expected_eigenvalues(tau: np.ndarray, c: float, ranks: int, *,
                         scales: tuple[np.ndarray, np.ndarray] | None = None,
                         grid: Grid | None = None, points_per_decade: int | None = None,
                         from_rank: int = 1) -> np.ndarray:
    """The expected sample eigenvalues of ranks ``1..ranks`` (descending) of the population ``tau``.

    Rank ``j``'s value is ``d`` times the integral of the quantile function of the limiting sample
    spectrum over the ``j``-th slice of mass ``1/d`` counted from the top (Ledoit & Wolf 2017's QuEST
    discretisation), from the distribution function on a log-spaced grid (:func:`grid_density` points a decade),
    exact at every point (:func:`_distribution_piece`) and linear between them, counted from the top so that the
    grid's lower end only has to pass the last rank asked for.

    ``from_rank``: the caller reads ranks from this one on (those above are NaN). On a ``grid`` that has seen an
    evaluation the grid then runs from a margin below where the last one's ranks ended (:attr:`Grid.floor`) to a
    margin above where its count passed ``from_rank - 1`` (:attr:`Grid.ceiling`), and its top point: the counts at
    those points are the whole grid's (each point is solved on its own; the count is normalised at the top), and the
    sums of the eigenvalues above them leave out the part above the last point kept below the top: one constant,
    which their differences, the ranks' values, cancel (and smaller sums, whose differences lose fewer digits to
    rounding where the ranks read are many decades below the top). A population that moved past a margin is
    evaluated again on the whole grid."""
    tau = np.asarray(tau, dtype=np.float64)
    d = tau.size
    grid = grid if grid is not None else Grid()
    if grid.groups is None:
        grid.groups = merge_groups(tau, c=c)
    atoms, pi = merged(tau, None, grid.groups)
    ppd = grid_density(d, c) if points_per_decade is None else points_per_decade
    wmax = 1.0 if scales is None else float(scales[0].max())
    wmin = 1.0 if scales is None else float(scales[0].min())
    top = float(tau.max())
    x_hi = top * (1.0 + math.sqrt(c)) ** 2 * max(wmax, 1.0) * 1.5
    ordered = np.sort(tau)[::-1]
    tau_r = float(ordered[min(ranks, d) - 1])
    x_lo = tau_r * wmin * (max(1e-3, 0.25 * (1 - math.sqrt(c)) ** 2) if c < 1 else 1e-3)
    above = from_rank - 1  # (the count the grid's upper part must pass: the ranks asked for start below it)
    tau_a = float(ordered[min(above, d) - 1]) if above >= 1 else top
    trim = grid.floor is not None
    ceiling = grid.ceiling if above >= 1 and ranks > above else None
    for _ in range(5):
        points = int(math.ceil(math.log10(x_hi / x_lo) * ppd)) + 1
        x = np.geomspace(x_lo, x_hi, points)
        cut = False
        if trim:  # (the same points from the first one the ranks can need: the counts above them are the same)
            assert grid.floor is not None
            x = x[max(int(np.searchsorted(x, tau_r * grid.floor * 10.0 ** -FLOOR_MARGIN)) - 1, 0):]
            if ceiling is not None:  # (and up to the first past from_rank's, with the top point kept)
                last = int(np.searchsorted(x, tau_a * ceiling * 10.0 ** FLOOR_MARGIN))
                if last < x.size - 2:
                    x = np.r_[x[:last + 1], x[-1]]
                    cut = True
        F, e = sample_distribution(atoms, pi, scales, c, x, start=grid.start(x))
        grid.last = (np.log(x), e)
        # N: the expected count above each point, 0 at the grid's top (where the last EPS_PATH's Lorentzian leaves
        # ~d eps of the spectrum's mass) and kept non-increasing (below the support, the zeros' leak moves it by
        # ~1e-8); M = x N + int_x^top N dt, the sum of the eigenvalues above (by parts: the piecewise-linear N's own)
        N = d * (1.0 - F)
        N -= N[-1]
        N = np.maximum.accumulate(N[::-1])[::-1]
        cells = (N[1:] + N[:-1]) * 0.5 * np.diff(x)
        if cut:  # (the cell up to the top point is left out of every sum: a constant the ranks cancel, and a large
            # one, ~ x_top (from_rank - 1) / 2, whose rounding the differences of the sums would read off)
            cells[-1] = 0.0
        M = x * N + np.concatenate([np.cumsum(cells[::-1])[::-1], [0.0]])
        if N[0] >= ranks + 0.5 and not (cut and N[-2] >= above):
            break
        if trim:  # (the population moved the ranks' ends past a margin: the whole grid again)
            trim = False
            continue
        x_lo *= 1e-2
    grid.points, grid.atoms = int(x.size), int(atoms.size)
    grid.floor = float(x[int(np.flatnonzero(N >= ranks + 0.5)[-1])]) / tau_r if N[0] >= ranks + 0.5 else None
    passed = np.flatnonzero(N < above)
    grid.ceiling = float(x[int(passed[0])]) / tau_a if above >= 1 and passed.size and passed[0] < x.size - 1 else None
    Mk = np.interp(np.arange(ranks + 1, dtype=np.float64), N[::-1], M[::-1])
    out = np.diff(Mk)
    if from_rank > 1:
        out[:from_rank - 1] = np.nan  # (not read: on a cut grid they would not be the whole grid's)
    return out


def _centred_log_ranks(k0: int, count: int) -> np.ndarray:
    x = np.log(np.arange(k0, k0 + count, dtype=np.float64))
    return x - x.mean()


def slope_of(log_lam: np.ndarray, k0: int) -> float:
    """The OLS exponent of log eigenvalues given from rank ``k0`` on."""
    xc = _centred_log_ranks(k0, log_lam.size)
    return float(-(xc @ (log_lam - log_lam.mean())) / (xc @ xc))


def slope_weights(k0: int, count: int) -> np.ndarray:
    """``w`` with ``slope_of(v, k0) = w . v`` for ``count`` log eigenvalues from rank ``k0`` (the exponent is linear
    in them)."""
    xc = _centred_log_ranks(k0, count)
    return -xc / float(xc @ xc)
