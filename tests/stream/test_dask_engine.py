"""The Dask engine against the local one: a real distributed LocalCluster (2 worker processes,
started once for the module), every spectrum equal to 1e-10 relative."""

from __future__ import annotations

import numpy as np
import pytest

import spectra_cli as spectra
from tests.conftest import powerlaw_matrix

pytestmark = pytest.mark.slow  # (the default run does not even import this module: tests/conftest.py)

X = powerlaw_matrix(6000, 24, 1.0, seed=11, offset=20.0).astype(np.float32)


@pytest.fixture(scope="module")
def scheduler():
    distributed = pytest.importorskip("distributed")  # imported here: collecting the suite stays fast
    cluster = distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None,
                                       scheduler_kwargs={"dashboard": False, "dashboard_address": ":0"})
    try:
        yield cluster.scheduler_address
    finally:
        cluster.close()


def _close(a, b, what):
    la, lb = np.asarray(a.spectrum.eigenvalues), np.asarray(b.spectrum.eigenvalues)
    np.testing.assert_allclose(la, lb, rtol=1e-10, atol=1e-10 * lb[0], err_msg=what)


def test_multi_file_parquet_with_ci_and_partition_isotropy(scheduler, tmp_path):
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    for i in range(3):
        part = X[i * 2000:(i + 1) * 2000]
        pq.write_table(pa.table({"emb": pa.FixedSizeListArray.from_arrays(pa.array(part.ravel()), 24)}),
                       tmp_path / f"part-{i}.parquet", row_group_size=500)
    kw = dict(window="3:12", ci=True, ci_replicates=50, partition_isotropy=True)
    a = spectra.fit(tmp_path, engine="dask", scheduler=scheduler, **kw)
    b = spectra.fit(tmp_path, **kw)
    _close(a, b, "parquet")
    assert a.isotropy.partition_isotropy_symmetric == pytest.approx(b.isotropy.partition_isotropy_symmetric,
                                                                    rel=1e-10)
    assert a.isotropy.mean_cosine == pytest.approx(b.isotropy.mean_cosine, rel=1e-10)
    assert a.fit.ci.groups == 32 and b.fit.ci.groups == 32


# (before the test that kills a worker: the cluster then waits for its nanny to bring one back)
def test_the_population_reads_its_sampling_curve_from_the_cluster_groups(scheduler, tmp_path):
    for i in range(3):
        np.save(tmp_path / f"s{i}.npy", X[i * 2000:(i + 1) * 2000])
    kw = dict(window="3:12", population=True)
    a = spectra.fit(tmp_path, engine="dask", scheduler=scheduler, **kw).fit.population
    b = spectra.fit(tmp_path, **kw).fit.population
    assert a.sampling_curve["groups"] == b.sampling_curve["groups"] == 32
    # (the tasks deal their blocks into the groups in their own order: other sub-samples, the same curve within
    # its error)
    change = a.sampling_curve["observed_change"] - b.sampling_curve["observed_change"]
    assert abs(change) < 3 * np.hypot(a.sampling_curve["observed_change_se"], b.sampling_curve["observed_change_se"])
    # (and the norms are about other blocks' means: the row model moves a little too)
    assert abs(a.model_alpha - b.model_alpha) < 0.2 * (b.high - b.low)
    assert abs(a.alpha - b.alpha) < 0.5 * (b.high - b.low)


def test_a_directory_of_npy_shards(scheduler, tmp_path):
    for i, (a, b) in enumerate(((0, 1700), (1700, 1701), (1701, 4200), (4200, 6000))):
        np.save(tmp_path / f"shard_{i:03d}.npy", X[a:b])
    a = spectra.fit(tmp_path, window="3:12", partition_isotropy=True, engine="dask", scheduler=scheduler)
    b = spectra.fit(tmp_path, window="3:12", partition_isotropy=True)
    _close(a, b, "npy shards")
    _close(b, spectra.fit(X, window="3:12"), "shards vs the whole matrix")
    assert b.source["layout"] == "matrix (4 .npy shards)"
    assert a.isotropy.partition_isotropy_symmetric == pytest.approx(b.isotropy.partition_isotropy_symmetric,
                                                                    rel=1e-10)


def test_weights_rows_and_dask_arrays(scheduler, tmp_path):
    np.save(tmp_path / "x.npy", X)
    w = np.random.default_rng(1).uniform(0, 2, len(X))
    np.save(tmp_path / "w.npy", w)
    a = spectra.spectrum(tmp_path / "x.npy", weights=str(tmp_path / "w.npy"), rows="100:5000", engine="dask",
                         scheduler=scheduler)
    b = spectra.spectrum(tmp_path / "x.npy", weights=str(tmp_path / "w.npy"), rows="100:5000")
    _close(a, b, "weighted rows")
    da = pytest.importorskip("dask.array")
    arr = da.from_array(X, chunks=(700, 24))
    c = spectra.fit(arr, engine="dask", scheduler=scheduler)
    _close(c, spectra.fit(X), "dask array")
    assert c.source["layout"] == "matrix (dask array, 9 row chunks)"


def test_dask_refuses_what_it_cannot_do(scheduler):
    with pytest.raises(spectra.OptionError, match="sample is not supported with engine='dask'"):
        spectra.fit("x.npy", engine="dask", sample=10)
    with pytest.raises(spectra.OptionError, match="engine='dask' reads paths and dask arrays"):
        spectra.fit(X, engine="dask", scheduler=scheduler)
    with pytest.raises(spectra.OptionError, match="scheduler and workers choose the Dask cluster"):
        spectra.fit(X, workers=2)


def test_without_the_extra_the_message_names_it(without):
    without("dask", "distributed")
    from spectra_cli.stream import cluster as engine

    with pytest.raises(spectra.OptionError, match=r"the optional extra 'dask': pip install 'spectra-geometry\[dask\]'"):
        engine.require_distributed()


def test_batch_fans_items_out_over_the_cluster(scheduler, tmp_path):
    from spectra_cli.run.batch_items import enumerate_items
    from spectra_cli.run.batch_workers import run_batch

    for i in range(4):
        np.save(tmp_path / f"m{i}.npy", powerlaw_matrix(800, 16, 1.0, seed=i))
    np.save(tmp_path / "bad.npy", np.zeros((1, 16)))
    items, _ = enumerate_items([str(tmp_path)])
    remote = {d["item"]: d for d in run_batch(items, {"window": "2:8"}, engine="dask", scheduler=scheduler)}
    local = {d["item"]: d for d in run_batch(items, {"window": "2:8"})}
    assert set(remote) == set(local) and len(remote) == 5
    for name, doc in local.items():
        if "error" in doc:
            assert remote[name]["error"] == doc["error"]  # the item's own error, not a cluster failure
        else:
            assert remote[name]["spectrum"]["eigenvalues"] == doc["spectrum"]["eigenvalues"]


def test_a_worker_killed_mid_run_gives_the_right_spectrum_or_a_clear_error(scheduler, tmp_path):
    import os
    import signal
    import threading
    import time

    distributed = pytest.importorskip("distributed")
    Y = powerlaw_matrix(120_000, 48, 1.0, seed=4).astype(np.float32)
    np.save(tmp_path / "y.npy", Y)
    reference = spectra.spectrum(tmp_path / "y.npy", block_rows=2000).spectrum.eigenvalues
    outcome: dict[str, object] = {}

    def run() -> None:
        try:
            outcome["spectrum"] = spectra.spectrum(tmp_path / "y.npy", block_rows=2000, engine="dask",
                                                   scheduler=scheduler).spectrum.eigenvalues
        except Exception as exc:  # noqa: BLE001 - the contract allows a clear error
            outcome["error"] = exc

    with distributed.Client(scheduler) as c:
        pids = c.run(os.getpid)
        t = threading.Thread(target=run)
        t.start()
        # the victim: a worker the scheduler has given tasks of the run (a fixed sleep could come before the
        # tasks, or after them on a busy machine)
        deadline = time.monotonic() + 120
        victim = None
        while victim is None:
            time.sleep(0.005)
            assert t.is_alive(), f"the run ended before any of its tasks was seen on a worker: {outcome}"
            assert time.monotonic() < deadline, "no task of the run reached a worker within 120 s"
            victim = next((w for w, keys in sorted(c.processing().items()) if keys), None)
        os.kill(pids[victim], signal.SIGKILL)  # the worker process dies, as when the OOM killer ends it
        mid_run = t.is_alive()
        t.join(300)
    print(f"killed worker: the run was {'still' if mid_run else 'no longer'} running when it died")
    assert not t.is_alive()
    if "error" in outcome:  # a clear error: a SpectraError or Dask's own account of the lost worker
        assert str(outcome["error"]), outcome
        print(f"killed worker: the run ended with an error: {outcome['error']}")
    else:  # Dask re-ran the lost tasks on the other worker (read again from the path): the right answer
        np.testing.assert_allclose(outcome["spectrum"], reference, rtol=1e-10)
        print("killed worker: Dask re-ran its tasks; the spectrum equals the local one to 1e-10")


def test_a_task_spreads_its_blocks_over_the_groups_at_the_rows_per_block_it_reads(monkeypatch):
    """Wide rows shrink the default block; a task must count the blocks it actually reads, or every
    block but the first lands in one bootstrap group (run here without a cluster)."""
    import spectra_cli.stream.passes as inputs
    from spectra_cli.options import ReadOptions
    from spectra_cli.stream.cluster import first_task

    monkeypatch.setattr(inputs, "BLOCK_BYTES", 64 << 10)  # 256-row blocks at d = 64, as 2,048 at d = 4,096
    Y = np.random.default_rng(0).standard_normal((4096, 64))
    ms, _, _ = first_task(inputs.Input, Y, ReadOptions.create(), 0, 4096, 64, False, 8, False)
    assert ms.n_blocks == 16
    assert [g.n for g in ms.filled_groups()] == [512] * 8

