"""The Dask engine is reached through untrusted addresses and careless counts: a scheduler that
accepts and never answers, a refused port, a thousand workers on two cores, and a task that fails on
a worker. Each is one error line and exit 2, with no Dask logs and no process left behind. Servers
here listen on the loopback address only and stop by themselves."""

from __future__ import annotations

import importlib.util
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import powerlaw_matrix

pytestmark = pytest.mark.slow  # (the default run does not even import this module: tests/conftest.py)
# distributed is not imported here: importing it into the test process slows every later test
pytestmark = [pytestmark, pytest.mark.skipif(importlib.util.find_spec("distributed") is None,
                                             reason="needs the dask extra")]
X = powerlaw_matrix(3000, 8, 1.0, seed=5)


def _spectra(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """The CLI in its own process group; afterwards, no process of that group may be left."""
    proc = subprocess.Popen([sys.executable, "-m", "spectra_cli", *map(str, args)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True,
                            env={**os.environ, "COLUMNS": "200"})
    out, err = proc.communicate(timeout=timeout)
    deadline = time.monotonic() + 60  # (its processes end with it; a busy machine may take its time to run the exits)
    while _group_left(proc.pid) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert _group_left(proc.pid) == [], "a process of the run was left behind"
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def _group_left(pid: int) -> list[int]:
    left = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == pid:  # the process group the CLI led
            left.append(int(stat.parent.name))
    return left


class _SilentServer:
    """Accepts connections and never answers, for at most ``seconds``."""

    def __init__(self, seconds: float = 30) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(8)
        self.sock.settimeout(0.2)
        self.port = self.sock.getsockname()[1]
        self.stop = time.time() + seconds
        self.conns: list[socket.socket] = []
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while time.time() < self.stop:
            try:
                conn, _ = self.sock.accept()
                self.conns.append(conn)
            except OSError:
                continue
        self.close()

    def close(self) -> None:
        self.stop = 0
        for c in self.conns:
            c.close()
        self.sock.close()


def _check_one_error_line(r: subprocess.CompletedProcess[str], match: str) -> None:
    assert r.returncode == 2, r.stderr
    assert r.stdout == ""
    lines = r.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), r.stderr
    assert match in lines[0], lines[0]


def test_a_scheduler_that_accepts_and_never_answers_is_refused_within_the_timeout(tmp_path):
    np.save(tmp_path / "x.npy", X)
    server = _SilentServer()
    try:
        r = _spectra("fit", tmp_path / "x.npy", "--engine", "dask", "--scheduler", f"tcp://127.0.0.1:{server.port}",
                     "--connect-timeout", "1")
    finally:
        server.close()
    _check_one_error_line(r, f"--scheduler 'tcp://127.0.0.1:{server.port}': no Dask scheduler answered within 1 s "
                             "(--connect-timeout sets the wait); check the address and that the scheduler runs.")


def test_a_refused_scheduler_port_is_refused_within_the_timeout(tmp_path):
    np.save(tmp_path / "x.npy", X)
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()  # nothing listens there now
    r = _spectra("batch", tmp_path / "x.npy", "--engine", "dask", "--scheduler", f"tcp://127.0.0.1:{port}",
                 "--connect-timeout", "1")
    _check_one_error_line(r, f"--scheduler 'tcp://127.0.0.1:{port}': ")


def test_more_workers_than_cores_is_refused_before_any_process_starts(cli, tmp_path):
    np.save(tmp_path / "x.npy", X)
    from spectra_cli.stream.cluster import usable_cores

    r = cli("fit", tmp_path / "x.npy", "--engine", "dask", "--workers", "1000")
    assert r.exit_code == 2 and r.stdout == ""
    assert r.stderr == (f"error: --workers 1000 is more than the {usable_cores()} core(s) this process may use: a "
                        f"LocalCluster runs one process per worker; use at most {usable_cores()}, or --scheduler for "
                        "a cluster of other machines.\n")
    r = cli("fit", tmp_path / "x.npy", "--engine", "dask", "--workers", "1", "--max-memory", "100MB")
    assert r.exit_code == 2 and r.stderr == ("error: --workers 1 worker processes need about 0.25 GiB (256 MiB each) "
                                             "beyond the data; the memory budget is 0.0931 GiB. Use fewer workers or "
                                             "raise --max-memory.\n")


def test_a_task_that_fails_on_a_worker_is_one_line_naming_its_rows_and_leaves_no_process(tmp_path):
    Y = X.copy()
    Y[2500, 3] = np.nan
    np.save(tmp_path / "nan.npy", Y)
    r = _spectra("fit", tmp_path / "nan.npy", "--engine", "dask", "--workers", "1", timeout=120)
    _check_one_error_line(r, "(first at row 2500); clean the data or pass --drop-nonfinite to skip those rows (in the "
                             "Dask task of rows ")
    assert "distributed" not in r.stderr


def test_no_process_is_left_behind_by_a_local_cluster(tmp_path):
    np.save(tmp_path / "x.npy", X)
    r = _spectra("fit", tmp_path / "x.npy", "--engine", "dask", "--workers", "1", "--json", timeout=120)
    assert r.returncode == 0, r.stderr
