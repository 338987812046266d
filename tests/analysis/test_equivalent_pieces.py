"""The expected spectrum's grid is solved in fixed pieces, side by side: the same bits on any number of cores."""

from __future__ import annotations

import numpy as np
import pytest

from spectra_cli import threads
from spectra_cli.analysis import equivalent
from spectra_cli.analysis.equivalent import CHUNK_POINTS, Grid, expected_eigenvalues, sample_density


@pytest.mark.parametrize("scales", [None, (np.array([0.5, 1.0, 2.0]), np.array([0.25, 0.5, 0.25]))])
def test_the_density_is_the_same_bits_on_one_two_or_three_cores(monkeypatch, scales):
    monkeypatch.setattr(equivalent, "PARALLEL_WORK", 0)  # (side by side even on this small grid)
    tau = np.arange(1, 121, dtype=np.float64) ** -1.0
    pi = np.full(tau.size, 1.0 / tau.size)
    x = np.geomspace(1e-4, 6.0, 3 * CHUNK_POINTS + 17)  # pieces of unequal length
    got = []
    for cores in (1, 2, 3):
        monkeypatch.setattr(threads, "usable_cores", lambda cores=cores: cores)
        with threads.call(None):
            f, e = sample_density(tau, pi, scales, 0.4, x)
            warm, _ = sample_density(tau * 1.01, pi, scales, 0.4, x, start=e)
        got.append((f, e, warm))
    for f, e, warm in got[1:]:
        assert np.array_equal(f, got[0][0]) and np.array_equal(e, got[0][1]) and np.array_equal(warm, got[0][2])
    # the pieces hold the density: its mass is the d non-zero eigenvalues' (c < 1), about
    lx = np.log(x)
    mass = float(np.sum((got[0][0] * x)[1:] * np.diff(lx)))
    assert mass == pytest.approx(1.0, abs=0.01)


def test_expected_eigenvalues_do_not_depend_on_the_cores(monkeypatch):
    tau = np.arange(1, 301, dtype=np.float64) ** -1.2
    out = []
    for cores in (1, 2):
        monkeypatch.setattr(threads, "usable_cores", lambda cores=cores: cores)
        with threads.call(None):
            out.append(expected_eigenvalues(tau, 0.02, 200, grid=Grid()))  # n/d = 50: a grid of thousands
    assert np.array_equal(out[0], out[1])


def test_side_by_side_only_where_each_task_gets_one_blas_thread_and_never_nested(monkeypatch, no_thread_caps):
    import threading

    monkeypatch.setattr(threads, "usable_cores", lambda: 2)
    main = threading.get_ident()

    def where(_: int) -> int:
        return threading.get_ident()

    with threads.call(None):  # the policy: small operations on one thread, two cores
        assert any(t != main for t in threads.map_side_by_side(where, [0, 1, 2, 3], wanted=True))
        assert set(threads.map_side_by_side(where, [0, 1], wanted=False)) == {main}
        # inside a task, a second map runs in that task's thread
        inner = threads.map_side_by_side(lambda _: (threading.get_ident(),
                                                       threads.map_side_by_side(where, [0, 1], wanted=True)),
                                            [0, 1], wanted=True)
        assert all(set(nested) == {outer} for outer, nested in inner)
    with threads.call(2):  # --threads 2: every BLAS call on two threads, so the tasks one after another
        assert set(threads.map_side_by_side(where, [0, 1, 2], wanted=True)) == {main}


def test_evaluations_run_side_by_side_only_between_the_two_floors():
    # a finite difference's evaluations side by side where each is too small to split its own grid but large
    # enough to pay for the threads; one after another below (the threads' cost) and above (the pieces' threads)
    from spectra_cli.analysis.equivalent import (
        EVALUATIONS_WORK,
        PARALLEL_WORK,
        evaluations_side_by_side,
        pieces_side_by_side,
    )

    assert not evaluations_side_by_side(1_148, 26)  # d = 32's grid at n = 4 d: points x atoms
    assert evaluations_side_by_side(EVALUATIONS_WORK, 1) and evaluations_side_by_side(PARALLEL_WORK - 1, 1)
    assert not evaluations_side_by_side(PARALLEL_WORK, 1) and pieces_side_by_side(PARALLEL_WORK, 1)
