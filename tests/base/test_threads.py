"""The thread policy itself: which pool size each operation gets, the user's override, the
environment variables, and the workers' share (no timings: the machines are shared)."""

from __future__ import annotations

import importlib
import sys
import threading

import numpy as np
import pytest
from threadpoolctl import threadpool_info

import spectra_cli as spectra
from spectra_cli import threads
from tests.conftest import powerlaw_matrix


@pytest.fixture(autouse=True)
def _clean(monkeypatch, no_thread_caps):
    monkeypatch.setattr(threads, "usable_cores", lambda: 8)
    threads.set_threads(None)
    yield
    threads.set_threads(None)


def test_small_operations_run_on_one_thread_and_large_ones_on_every_core():
    assert threads.threads_for(threads.SMALL_FLOPS / 2) == 1
    assert threads.threads_for(4.0 * 384**3) == 1  # the 384 x 384 eigvalsh of a MiniLM layer
    assert threads.threads_for(8192 * 385**2) == 1  # one default block's product at d = 384
    assert threads.threads_for(4.0 * 1024**3) == 8
    assert threads.threads_for(threads.SMALL_FLOPS * 2) == 8
    assert threads.threads_for(200_000 * 768**2) == 8


def test_the_user_decides_first(monkeypatch):
    threads.set_threads(3)
    assert threads.threads_for(1.0) == threads.threads_for(1e15) == 3
    threads.set_threads(None)
    monkeypatch.setenv("OMP_NUM_THREADS", "2")
    monkeypatch.setenv("OPENBLAS_NUM_THREADS", "4")
    assert threads.env_threads() == 2
    assert threads.threads_for(1e15) == 2 and threads.threads_for(1.0) == 1  # a cap, never a floor
    monkeypatch.setenv("OMP_NUM_THREADS", "junk")
    assert threads.env_threads() == 4


def test_workers_share_the_cores(monkeypatch):
    assert threads.worker_threads(1) == 8 and threads.worker_threads(3) == 2 and threads.worker_threads(16) == 1
    monkeypatch.setenv("MKL_NUM_THREADS", "1")
    assert threads.worker_threads(2) == 1


def test_a_blas_block_gets_the_pool_size_of_its_operation():
    with threads.blas(1.0) as n:
        assert n == 1
        assert all(lib["num_threads"] == 1 for lib in threadpool_info() if lib["user_api"] == "blas")
    threads.set_threads(2)
    with threads.blas(1.0) as n:
        assert n == 2


def test_threads_keyword_holds_for_one_call_and_is_checked():
    X = powerlaw_matrix(500, 16, 1.0, seed=0)
    seen = []
    real = threads.threads_for

    def spy(flops, *small):
        seen.append(real(flops, *small))
        return seen[-1]

    threads.threads_for, saved = spy, threads.threads_for
    try:
        a = spectra.fit(X, window="2:8", threads=1).fit.alpha
    finally:
        threads.threads_for = saved
    assert seen and set(seen) == {1}
    assert threads._override is None  # restored after the call
    assert a == spectra.fit(X, window="2:8").fit.alpha  # the numbers do not depend on the pool size
    with pytest.raises(spectra.OptionError, match=r"^threads=0 must be a positive number of threads\.$"):
        spectra.fit(X, threads=0)


def test_the_cli_takes_threads(cli, tmp_path):
    np.save(tmp_path / "x.npy", powerlaw_matrix(500, 16, 1.0, seed=0))
    assert cli("fit", tmp_path / "x.npy", "--threads", "1", "--json").exit_code == 0
    r = cli("fit", tmp_path / "x.npy", "--threads", "0")
    assert r.exit_code == 2 and r.stderr == "error: --threads 0 must be a positive number of threads.\n"


def test_batch_takes_threads_for_itself_and_its_workers(tmp_path, monkeypatch, cli):
    import spectra_cli.run.batch_workers as batch_module

    for i in range(2):
        np.save(tmp_path / f"m{i}.npy", powerlaw_matrix(300, 12, 1.0, seed=i))
    shares = []
    real = batch_module.worker_threads

    def spy(workers):
        shares.append(real(workers))
        return shares[-1]

    monkeypatch.setattr(batch_module, "worker_threads", spy)
    res = spectra.batch(str(tmp_path / "m*.npy"), workers=2, threads=1)
    assert len(res.results) == 2 and shares == [1]
    assert threads._override is None
    r = cli("batch", tmp_path / "m0.npy", "--threads", "0")
    assert r.exit_code == 2 and r.stderr == "error: --threads 0 must be a positive number of threads.\n"


def test_eigensolvers_take_a_second_thread_only_from_d_2048(monkeypatch):
    monkeypatch.setattr(threads, "usable_cores", lambda: 2)
    eig = threads.SMALL_EIGEN_FLOPS
    assert threads.threads_for(4.0 * 768**3, eig) == 1  # a product of these flops would take two
    assert threads.threads_for(4.0 * 768**3) == 2
    assert threads.threads_for(4.0 * 1024**3, eig) == 1
    assert threads.threads_for(4.0 * 2048**3, eig) == 2


def test_import_in_background_imports_once_and_leaves_errors_to_the_later_import(tmp_path, monkeypatch):
    (tmp_path / "spectra_bg_ok.py").write_text("VALUE = 7\n")
    (tmp_path / "spectra_bg_bad.py").write_text("raise ImportError('broken on purpose')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    raised: list[object] = []
    monkeypatch.setattr(threading, "excepthook", raised.append)  # (an error escaping the thread would land here)
    try:
        thread = threads.import_in_background("spectra_bg_ok")
        assert thread is not None and not thread.daemon
        thread.join(10)
        assert sys.modules["spectra_bg_ok"].VALUE == 7
        assert threads.import_in_background("spectra_bg_ok") is None  # (imported already: nothing started)
        bad = threads.import_in_background("spectra_bg_bad")
        assert bad is not None
        threads._join_imports()  # (what a fork runs first: every started import finished)
        assert not bad.is_alive() and not threads._IMPORTING
        assert "spectra_bg_bad" not in sys.modules and not raised  # (swallowed: nothing half imported)
        with pytest.raises(ImportError, match="broken on purpose"):
            importlib.import_module("spectra_bg_bad")
    finally:
        for name in ("spectra_bg_ok", "spectra_bg_bad"):
            sys.modules.pop(name, None)
