"""Simulated samples decomposed side by side: the same numbers, in the same order, as one after another."""

from __future__ import annotations

from functools import partial

import numpy as np
import pytest

from spectra_cli import threads
from spectra_cli.analysis import simulate
from spectra_cli.analysis.simulate import (
    parallel_count,
    partition_spectra,
    side_by_side,
    simulated_rows,
    simulated_spectrum,
    simulated_stream,
)


@pytest.mark.parametrize("cores", [1, 2, 3])
def test_the_stream_is_the_samples_drawn_one_at_a_time(monkeypatch, cores, no_thread_caps):
    # side by side (two or three at a time, the next ones drawn meanwhile) or one after another: the same rows from
    # the same stream, the same bits, in order; 7 samples: a last batch shorter than the others
    monkeypatch.setattr(threads, "usable_cores", lambda: cores)
    monkeypatch.setattr(simulate, "SIDE_BY_SIDE_ORDER", 0)  # (side by side even at these small orders)
    tau = np.arange(1, 61, dtype=np.float64) ** -1.0
    scales = (np.array([0.5, 1.5]), np.array([0.5, 0.5]))
    for n in (40, 200):  # the n x n and the d x d Gram route
        with threads.call(None):
            together = list(simulated_stream(tau, n, np.random.default_rng(7), scales, 7))
        rng = np.random.default_rng(7)
        alone = [simulated_spectrum(tau, n, rng, scales) for _ in range(7)]
        assert len(together) == 7 and all(np.array_equal(a, b) for a, b in zip(together, alone, strict=True))


def test_side_by_side_keeps_the_order_and_the_bits_and_a_one_thread_call(monkeypatch, no_thread_caps):
    monkeypatch.setattr(simulate, "SIDE_BY_SIDE_ORDER", 0)  # (side by side even at this small order)
    rng = np.random.default_rng(0)
    mats = [(lambda A: A @ A.T)(rng.standard_normal((80, 80))) for _ in range(5)]
    seq = [np.linalg.eigvalsh(M) for M in mats]
    par = side_by_side([partial(np.linalg.eigvalsh, M) for M in mats], 80)
    assert all(np.array_equal(a, b) for a, b in zip(seq, par, strict=True))
    with threads.call(1):  # a caller that allows one thread: one sample at a time
        assert parallel_count(100, 10) == 1
    with threads.call(None):  # inside another pool's task: one at a time (no pool within a pool)
        inside = threads.in_pool(lambda _: parallel_count(100, 10))
        assert threads.pool_workers(4, wanted=True) == min(4, threads.usable_cores())
        assert inside(None) == 1 and threads.pool_workers(4, wanted=True) == min(4, threads.usable_cores())
        assert all(np.array_equal(a, b) for a, b in zip(seq, side_by_side([partial(np.linalg.eigvalsh, M)
                                                                           for M in mats], 80), strict=True))


def test_small_decompositions_run_one_after_another(monkeypatch, no_thread_caps):
    # below SIDE_BY_SIDE_ORDER rows the threads cost more than they save: one at a time, on the calling thread,
    # whatever the cores; from it, side by side on two
    import threading

    monkeypatch.setattr(threads, "usable_cores", lambda: 2)
    order = simulate.SIDE_BY_SIDE_ORDER
    with threads.call(None):
        assert parallel_count(10 * order, order - 1) == 1 and parallel_count(order - 1, 10 * order) == 1
        assert parallel_count(10 * order, order) == 2
        where = [lambda: threading.get_ident() for _ in range(4)]
        assert set(side_by_side(where, order - 1)) == {threading.get_ident()}
        assert threading.get_ident() not in set(side_by_side(where, order))


def test_large_decompositions_run_side_by_side_on_lapacks_two_stage_driver(monkeypatch, no_thread_caps):
    # from two_stage.min_order rows a decomposition on one thread is LAPACK's two-stage driver, which beats the
    # one-stage driver on all the cores: two at a time, one thread each (inside a pool's task the policy gives one),
    # and one core or two decompose by the same routine, the same bits (here at a small order, the thresholds moved)
    from spectra_cli.eigen import two_stage
    from spectra_cli.eigen.decomposition import eigvalsh_routed

    if not two_stage.available():
        pytest.skip("no OpenBLAS with LAPACK's two-stage driver here")
    monkeypatch.setattr(two_stage, "TWO_STAGE_MIN_ORDER", 200)
    monkeypatch.setattr(threads, "SMALL_EIGEN_FLOPS", 1.0)  # (the policy would give such a decomposition every core)
    tau = np.arange(1, 257, dtype=np.float64) ** -1.0
    got, routines = [], []
    for cores in (1, 2):
        monkeypatch.setattr(threads, "usable_cores", lambda cores=cores: cores)
        with threads.call(None):
            assert parallel_count(600, 256) == cores and parallel_count(600, 199) == 1
            got.append(list(simulated_stream(tau, 600, np.random.default_rng(5), None, 3)))
            M = np.diag(tau)
            routines.append([r for _, r in side_by_side([partial(eigvalsh_routed, M)] * 2, 256)])
    assert all(np.array_equal(a, b) for a, b in zip(*got, strict=True))
    assert routines == [["dsyevd_2stage"] * 2] * 2
    # the data's sub-samples (and the bootstrap's replicates) take the same routine as the spectrum's own
    from spectra_cli.analysis.bootstrap import leading_eigenvalues

    C = np.random.default_rng(1).standard_normal((256, 300))
    C = C @ C.T
    with threads.call(1):
        assert np.array_equal(leading_eigenvalues(C.copy(), None), two_stage.eigvalsh_two_stage(C, "float64")[::-1])
    with threads.call(None):  # (a task of a pool: one thread, and still one once a task inside it is done)
        inner = threads.in_pool(lambda _: threads.threads_for(float("inf")))
        assert threads.in_pool(lambda _: (inner(None), threads.threads_for(float("inf"))))(None) == (1, 1)
        assert threads.threads_for(float("inf")) == 2


def test_side_by_side_holds_no_more_at_once_than_the_memory_budget(monkeypatch, no_thread_caps):
    # the sampling curve's five partition spectra: as many at once as parallel_count allows (PARALLEL_BYTES of
    # 16 d^2 bytes each), never all five on five cores
    import threading
    import time

    monkeypatch.setattr(threads, "usable_cores", lambda: 5)
    monkeypatch.setattr(simulate, "SIDE_BY_SIDE_ORDER", 0)
    lock, running, most = threading.Lock(), [0], [0]

    def task() -> int:
        with lock:
            running[0] += 1
            most[0] = max(most[0], running[0])
        time.sleep(0.02)
        with lock:
            running[0] -= 1
        return threading.get_ident()

    for budget, expected in ((16 * 100 * 100 * 2, 2), (16 * 100 * 100, 1)):
        monkeypatch.setattr(simulate, "PARALLEL_BYTES", budget)
        most[0] = 0
        with threads.call(None):
            assert parallel_count(100, 100) == expected
            side_by_side([task] * 5, 100)
        assert most[0] == expected


def test_partition_spectra_are_the_same_bits_side_by_side(monkeypatch, no_thread_caps):
    # the sampling curve's simulated partitions (the d x d and the n x n route) decomposed side by side on two cores
    # or one after another on one: the same bits
    monkeypatch.setattr(simulate, "SIDE_BY_SIDE_ORDER", 0)
    tau = np.arange(1, 41, dtype=np.float64) ** -0.8
    for n in (200, 24):
        Z = simulated_rows(tau, n, np.random.default_rng(n), None)
        part = np.arange(n) % 4
        got = []
        for cores in (1, 2):
            monkeypatch.setattr(threads, "usable_cores", lambda cores=cores: cores)
            with threads.call(None):
                got.append(partition_spectra(Z, part, 4))
        assert all(np.array_equal(a, b) for a, b in zip(*got, strict=True))


def test_partition_spectra_are_each_sub_samples_covariance_spectrum():
    rng = np.random.default_rng(1)
    tau = np.arange(1, 21, dtype=np.float64) ** -0.8
    for n in (60, 12):  # more rows than features, and fewer
        Z = simulated_rows(tau, n, rng, None)
        part = np.arange(n) % 3
        got = partition_spectra(Z, part, 3)
        for q, v in zip((None, 0, 1, 2), got, strict=True):
            X = Z.astype(np.float64)[part != q] if q is not None else Z.astype(np.float64)
            ref = np.sort(np.linalg.eigvalsh(np.cov(X, rowvar=False)))[::-1]
            k = min(X.shape[0] - 1, X.shape[1])
            assert np.allclose(v[:k], ref[:k], rtol=1e-5, atol=1e-6 * ref[0])
