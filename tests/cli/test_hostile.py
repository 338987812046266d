"""Hostile and careless inputs and outputs, grouped by cause. The contract for each: exit 2, empty
stdout, one `error:` line on stderr, no traceback, every input byte-identical afterwards, and an
answer within a time limit (FIFOs included). Cases that must succeed say what they must get right."""

from __future__ import annotations

import hashlib
import json
import os
import struct
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.conftest import ROOT, powerlaw_matrix

X = powerlaw_matrix(500, 12, 1.0, seed=1)


def _snapshot(root: Path) -> dict[str, str]:
    out = {}
    for p in sorted(root.rglob("*")):
        if p.is_file() and not p.is_symlink():
            out[str(p)] = hashlib.sha256(p.read_bytes()).hexdigest()
    return out


def refused(cli, tmp_path, *args, match: str | None = None):
    """Run the CLI and assert the contract for bad input; returns stderr's one line."""
    before = _snapshot(tmp_path)
    r = cli(*args)
    assert r.exit_code == 2, (r.exit_code, r.stderr)
    assert r.stdout == ""
    lines = r.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), r.stderr
    assert "Traceback" not in r.stderr
    assert _snapshot(tmp_path) == before, "an input changed"
    if match is not None:
        assert match in lines[0], lines[0]
    return lines[0]


def _npy_with_header(path: Path, header: str, payload: bytes = b"\0" * 64) -> None:
    h = header.encode("latin1")
    h += b" " * (-(len(h) + 11) % 64) + b"\n"
    path.write_bytes(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(h)) + h + payload)


def _safetensors(path: Path, header: object, data: bytes = b"") -> None:
    raw = json.dumps(header).encode() if not isinstance(header, bytes) else header
    path.write_bytes(struct.pack("<Q", len(raw)) + raw + data)


# -- outputs onto inputs: never lose data -------------------------------------------------------------

def test_batch_results_onto_an_input_are_refused_before_anything_is_written(cli, tmp_path, checkpoint):
    np.save(tmp_path / "a.npy", X)
    refused(cli, tmp_path, "batch", tmp_path / "a.npy", "--jsonl", tmp_path / "a.npy", match="is the input")
    ckpt = checkpoint[0]
    refused(cli, tmp_path, "batch", ckpt, "--jsonl", ckpt, match="is the input")


@pytest.mark.parametrize("target", ["same", "dot", "symlink"])
def test_whiten_output_onto_its_input_is_refused(cli, tmp_path, target):
    np.save(tmp_path / "a.npy", X)
    (tmp_path / "out").mkdir()
    out = {"same": tmp_path / "a.npy", "dot": tmp_path / "out" / ".." / "a.npy",
           "symlink": tmp_path / "out" / "link.npy"}[target]
    if target == "symlink":
        os.symlink(tmp_path / "a.npy", out)
    refused(cli, tmp_path, "whiten", tmp_path / "a.npy", "-o", out, match="is the input")


def test_whiten_onto_parquet_inputs_weights_and_archives_is_refused(cli, tmp_path):
    pq.write_table(pa.table({"emb": pa.FixedSizeListArray.from_arrays(pa.array(X.ravel()), 12)}),
                   tmp_path / "e.parquet")
    refused(cli, tmp_path, "whiten", tmp_path / "e.parquet", "-o", tmp_path / "e.parquet", match="is the input")
    (tmp_path / "ds").mkdir()
    pq.write_table(pq.read_table(tmp_path / "e.parquet"), tmp_path / "ds" / "part-0.parquet")
    refused(cli, tmp_path, "whiten", tmp_path / "ds", "-o", tmp_path / "ds" / "white.parquet",
            match="would join the Parquet dataset")
    np.save(tmp_path / "a.npy", X)
    np.save(tmp_path / "w.npy", np.ones(len(X)))
    refused(cli, tmp_path, "whiten", tmp_path / "a.npy", "--weights", tmp_path / "w.npy", "-o", tmp_path / "w.npy",
            match="is the input")
    np.savez(tmp_path / "m.npz", x=X)
    refused(cli, tmp_path, "whiten", tmp_path / "m.npz", "-o", tmp_path / "o.npy", "--save-transform",
            tmp_path / "m.npz", match="is the input")
    assert not (tmp_path / "o.npy").exists()


def test_resume_repairs_a_cut_last_line_and_never_duplicates(cli, tmp_path):
    for i in range(3):
        np.save(tmp_path / f"s_{i}.npy", powerlaw_matrix(300, 8, 1.0, seed=i))
    out = tmp_path / "r.jsonl"
    assert cli("batch", tmp_path, "--jsonl", out).exit_code == 0
    lines = out.read_bytes().splitlines(keepends=True)
    out.write_bytes(lines[0] + lines[1][: len(lines[1]) // 2])  # disk full in the middle of line 2
    r = cli("batch", tmp_path, "--jsonl", out, "--resume")
    assert r.exit_code == 0, r.stderr
    assert "dropped a cut last line" in r.stderr and "kept 1 item" in r.stderr
    items = [json.loads(x)["item"] for x in out.read_text().splitlines()]
    assert sorted(items) == sorted(str(tmp_path / f"s_{i}.npy") for i in range(3))
    assert cli("trend", out, "--metric", "fit.alpha").exit_code == 0


def test_resume_retries_failed_items_and_replaces_their_line(cli, tmp_path):
    np.save(tmp_path / "good.npy", X)
    np.save(tmp_path / "bad.npy", np.zeros((1, 4)))
    out = tmp_path / "r.jsonl"
    assert cli("batch", tmp_path, "--jsonl", out).exit_code == 1
    np.save(tmp_path / "bad.npy", X[:100])  # fixed
    assert cli("batch", tmp_path, "--jsonl", out, "--resume").exit_code == 0
    docs = [json.loads(x) for x in out.read_text().splitlines()]
    assert len(docs) == 2 and not any("error" in d for d in docs)


def test_a_second_batch_on_a_locked_results_file_fails_at_once(cli, tmp_path):
    fcntl = pytest.importorskip("fcntl")
    np.save(tmp_path / "a.npy", X)
    out = tmp_path / "r.jsonl"
    out.write_text("")
    with open(out, "rb") as held:
        fcntl.flock(held.fileno(), fcntl.LOCK_EX)
        refused(cli, tmp_path, "batch", tmp_path / "a.npy", "--jsonl", out, match="is being written by another")


def test_resume_from_another_directory_skips_what_is_done(cli, tmp_path, monkeypatch):
    (tmp_path / "runs").mkdir()
    np.save(tmp_path / "runs" / "a.npy", X)
    monkeypatch.chdir(tmp_path / "runs")
    assert cli("batch", "a.npy", "--jsonl", tmp_path / "r.jsonl").exit_code == 0
    monkeypatch.chdir(tmp_path)
    r = cli("batch", "runs/a.npy", "--jsonl", tmp_path / "r.jsonl", "--resume")
    assert r.exit_code == 0 and "kept 1 item" in r.stderr
    assert len((tmp_path / "r.jsonl").read_text().splitlines()) == 1


# -- silently wrong answers --------------------------------------------------------------------------

def test_an_existing_path_is_never_a_glob(cli, tmp_path):
    for name, seed in (("emb[1].parquet", 1), ("emb1.parquet", 2)):
        Y = powerlaw_matrix(400, 6, 1.0, seed=seed)
        pq.write_table(pa.table({"v": pa.FixedSizeListArray.from_arrays(pa.array(Y.ravel()), 6)}), tmp_path / name)
    doc = cli("spectrum", tmp_path / "emb[1].parquet", "--json").json()
    assert doc["source"]["files"] == 1
    ref = np.linalg.eigvalsh(np.cov(powerlaw_matrix(400, 6, 1.0, seed=1), rowvar=False))[::-1]
    np.testing.assert_allclose(doc["spectrum"]["eigenvalues"], ref, rtol=1e-10)


def test_parquet_directories_skip_what_spark_and_dask_skip(cli, tmp_path):
    table = pa.table({"v": pa.FixedSizeListArray.from_arrays(pa.array(X.ravel()), 12)})
    (tmp_path / "ds" / "_temporary" / "0").mkdir(parents=True)
    pq.write_table(table, tmp_path / "ds" / "part-0.parquet")
    pq.write_table(table, tmp_path / "ds" / "_temporary" / "0" / "part-1.parquet")
    pq.write_table(table, tmp_path / "ds" / ".part-2.parquet")
    (tmp_path / "ds" / "_SUCCESS").write_text("")
    doc = cli("spectrum", tmp_path / "ds", "--json").json()
    assert doc["source"]["files"] == 1 and doc["source"]["n_rows"] == len(X)


@pytest.mark.parametrize(
    ("header", "data", "match"),
    [
        ({"w": {"dtype": "F32", "shape": [4, 4], "data_offsets": [-64, 0]}}, b"", "malformed header entry"),
        ({"w": {"dtype": "F32", "shape": [4, 4], "data_offsets": [0, 64]}}, b"\0" * 32, "outside the data section"),
        ({"a": {"dtype": "F32", "shape": [2, 2], "data_offsets": [0, 16]},
          "b": {"dtype": "F32", "shape": [2, 2], "data_offsets": [8, 24]}}, b"\0" * 24, "overlaps"),
        ({"a": {"dtype": "F32", "shape": [2, 2], "data_offsets": [8, 24]}}, b"\0" * 24, "leaves a hole"),
        ({"a": {"dtype": "F32", "shape": [2, 2], "data_offsets": [0, 16]}}, b"\0" * 40, "cover 16 of the 40"),
        ({"a": {"dtype": "F32", "shape": [2 ** 40, 2 ** 40], "data_offsets": [0, 16]}}, b"\0" * 16, "has 16 bytes"),
        ({"a": {"dtype": 7, "shape": [2], "data_offsets": [0, 8]}}, b"\0" * 8, "malformed header entry"),
        ({"a": [1, 2]}, b"", "malformed header entry"),
        (["not", "an", "object"], b"", "not a JSON object"),
        (b"[" * 100000 + b"]" * 100000, b"", "nested too deeply"),
        (b'{"a": {"dtype": "F32", "shape": [1' + b"0" * 400 + b'], "data_offsets": [0, 0]}}', b"",
         "an integer of 401 digits"),
        (b"\xff\xfe not json", b"", "is not UTF-8"),
    ],
)
def test_safetensors_headers_are_checked(cli, tmp_path, header, data, match):
    _safetensors(tmp_path / "m.safetensors", header, data)
    refused(cli, tmp_path, "info", tmp_path / "m.safetensors", match=match)
    refused(cli, tmp_path, "spectrum", f"{tmp_path / 'm.safetensors'}::a", match=match)


@pytest.mark.parametrize("shard", ["../x.safetensors", "/etc/passwd.safetensors", "sub/x.safetensors", "x.npy"])
def test_a_shard_index_cannot_point_outside_its_directory(cli, tmp_path, shard):
    (tmp_path / "ckpt").mkdir()
    (tmp_path / "ckpt" / "model.safetensors.index.json").write_text(json.dumps({"weight_map": {"w": shard}}))
    refused(cli, tmp_path, "batch", tmp_path / "ckpt", match="shards must be plain .safetensors file names")


def test_ddof_at_or_past_the_row_count_is_refused(cli, tmp_path):
    np.save(tmp_path / "a.npy", X)
    refused(cli, tmp_path, "fit", tmp_path / "a.npy", "--ddof", "500",
            match="--ddof 500 must be less than the number of rows used (500)")


def test_magnitudes_at_both_ends_of_float64(cli, tmp_path):
    np.save(tmp_path / "tiny.npy", X * 1e-300)
    refused(cli, tmp_path, "fit", tmp_path / "tiny.npy", match="below the float64 range")
    ref = cli("fit", *_save(tmp_path, "one.npy", X), "--isoscore", "--json").json()
    for k in (1e150, 1e-150):
        doc = cli("fit", *_save(tmp_path, f"m{k}.npy", X * k), "--isoscore", "--json").json()
        for section, key in (("rank", "participation_ratio"), ("rank", "entropy_rank"), ("rank", "rankme"),
                             ("fit", "alpha"), ("isotropy", "isoscore"), ("isotropy", "mean_cosine")):
            assert doc[section][key] == pytest.approx(ref[section][key], rel=1e-9), (k, key)


def _save(tmp_path: Path, name: str, A: np.ndarray) -> list[Path]:
    np.save(tmp_path / name, A)
    return [tmp_path / name]


# -- hangs, crashes and runaway cost -------------------------------------------------------------------

def _run(*args: object, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", "from spectra_cli.cli import main; main()", *map(str, args)],
                          capture_output=True, text=True, timeout=timeout, cwd=ROOT)


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="FIFOs are POSIX")
def test_fifos_are_refused_without_blocking(cli, tmp_path):
    for name in ("p.npy", "p.parquet", "p.safetensors", "p.npz", "w.npy", "c.toml", "e.json"):
        os.mkfifo(tmp_path / name)
    np.save(tmp_path / "a.npy", X)
    cases = [
        ["spectrum", tmp_path / "p.npy"], ["info", tmp_path / "p.npy"], ["fit", tmp_path / "p.parquet"],
        ["info", tmp_path / "p.safetensors"], ["fit", tmp_path / "p.npz"],
        ["fit", tmp_path / "a.npy", "--weights", tmp_path / "w.npy"],
        ["check", tmp_path / "a.npy", "--config", tmp_path / "c.toml"],
        ["fit", tmp_path / "e.json", "--eigenvalues"],
    ]
    for args in cases:
        r = _within(cli, 30, *args)
        assert r.exit_code == 2 and r.stdout == "", (args, r.stderr)
        assert "FIFO" in r.stderr and len(r.stderr.splitlines()) == 1, (args, r.stderr)
    (tmp_path / "dir").mkdir()
    np.save(tmp_path / "dir" / "a.npy", X)
    os.mkfifo(tmp_path / "dir" / "q.npy")
    r = _within(cli, 30, "batch", tmp_path / "dir", "--json")
    assert r.exit_code == 0 and "skipped" in r.stderr and "not a regular file" in r.stderr, r.stderr


def _within(cli, seconds: float, *args: object):
    """The CLI run in a daemon thread: a run that blocks (on a FIFO) fails the test instead of hanging it."""
    import threading

    out: list = []
    t = threading.Thread(target=lambda: out.append(cli(*args)), daemon=True)
    t.start()
    t.join(seconds)
    assert out, f"spectra {' '.join(map(str, args))} did not return within {seconds} s"
    return out[0]


def test_a_weights_file_truncated_during_the_run_is_an_input_error(tmp_path):
    from spectra_cli.errors import InputError
    from spectra_cli.sources.rows import WeightsFile

    np.save(tmp_path / "w.npy", np.ones(1000))
    w = WeightsFile(str(tmp_path / "w.npy"), 1000)
    assert w.slice(0, 10).sum() == 10
    with open(tmp_path / "w.npy", "r+b") as f:
        f.truncate(200)
    with pytest.raises(InputError, match="ended early"):
        w.slice(500, 1000)


def test_fortran_order_is_read_in_column_stripes(cli, tmp_path):
    np.save(tmp_path / "f.npy", np.asfortranarray(X))
    np.save(tmp_path / "c.npy", X)
    a = cli("spectrum", tmp_path / "f.npy", "--block-rows", "64", "--json").json()
    b = cli("spectrum", tmp_path / "c.npy", "--block-rows", "64", "--json").json()
    assert a["spectrum"]["eigenvalues"] == b["spectrum"]["eigenvalues"]


def test_wide_short_inputs_never_build_d_by_d(cli, tmp_path):
    wide = np.random.default_rng(0).standard_normal((10, 100_000)).astype(np.float32)  # d x d would be 80 GB
    np.save(tmp_path / "wide.npy", wide)
    doc = cli("fit", tmp_path / "wide.npy", "--partition-isotropy", "--max-memory", "1GB", "--json").json()
    assert doc["spectrum"]["structural_zeros"] == 100_000 - 10
    Xc = wide.astype(np.float64) - wide.mean(axis=0, dtype=np.float64)
    ref = np.linalg.eigvalsh(Xc @ Xc.T / 9)[::-1]  # the non-zero eigenvalues, from the 10 x 10 Gram matrix
    np.testing.assert_allclose(doc["spectrum"]["eigenvalues"][:9], ref[:9], rtol=1e-9)
    np.save(tmp_path / "w8k.npy", np.random.default_rng(1).standard_normal((10, 8000)))
    assert cli("isotropy", tmp_path / "w8k.npy", "--json").exit_code == 0


def test_a_width_beyond_the_memory_budget_is_refused_before_reading(cli, tmp_path):
    np.save(tmp_path / "a.npy", np.zeros((3000, 2000), dtype=np.float32))
    line = refused(cli, tmp_path, "spectrum", tmp_path / "a.npy", "--max-memory", "50MB")
    assert "needs about 91.6 MiB (3 float64 matrices of 2000 x 2000)" in line and "--max-memory" in line
    refused(cli, tmp_path, "spectrum", tmp_path / "a.npy", "--max-memory", "lots", match="is not a size")


def test_an_archive_of_many_arrays_is_opened_once(tmp_path, monkeypatch):
    from spectra_cli.run import batch_items, batch_workers
    from spectra_cli.sources import npy

    rng = np.random.default_rng(0)
    np.savez(tmp_path / "many.npz", **{f"a{i}": rng.standard_normal((8, 3)) for i in range(120)})
    opened = []
    real = zipfile.ZipFile
    monkeypatch.setattr(npy.zipfile, "ZipFile", lambda *a, **k: opened.append(a) or real(*a, **k))
    npy._ZIP_CACHE.clear()
    items, _ = batch_items.enumerate_items([str(tmp_path / "many.npz")])
    docs = list(batch_workers.run_batch(items, {"window": "1:3"}))
    assert len(docs) == 120 and not any("error" in d for d in docs)
    assert len(opened) == 1


# The batch command whose pool workers each create the file READY/<pid> once their initializer (the one that asks
# for death with the parent) has returned.
_WORKERS_SAY_READY = """\
import os
import spectra_cli.run.batch_workers as workers

real = workers._worker_init

def init(*args):
    real(*args)
    open(os.path.join({ready!r}, str(os.getpid())), "w").close()

workers._worker_init = init
from spectra_cli.cli import main; main()
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_a_worker_whose_batch_died_before_it_started_exits():
    """The signal asked for on the parent's death never comes when the parent died first: the worker checks
    that its parent is still the batch, after asking."""
    code = "from spectra_cli.run.batch_workers import _worker_init as i; import os; i(1, os.getppid()); print('ok')"
    alive = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert alive.returncode == 0 and alive.stdout == "ok\n", alive.stderr
    code = "from spectra_cli.run.batch_workers import _worker_init as i; import os; i(1, os.getppid() + 1); print('x')"
    orphan = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert orphan.returncode == -9 and orphan.stdout == "", orphan.stderr


def _state(pid: int) -> str | None:
    """The process's state letter in /proc (Z: a zombie, dead but not reaped), or None when it is gone."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return None


def _parent(pid: int) -> int | None:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return None


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc and PR_SET_PDEATHSIG are Linux's")
def test_workers_die_with_a_killed_batch(tmp_path):
    import signal

    data, ready = tmp_path / "data", tmp_path / "ready"
    data.mkdir()
    ready.mkdir()
    for i in range(8):
        np.save(data / f"m{i}.npy", powerlaw_matrix(3000, 120, 1.0, seed=i))
    # every item a minute of CPU (20,000 bootstrap replicates of the broken law): still running at the kill
    with open(tmp_path / "stderr", "w") as err:
        proc = subprocess.Popen([sys.executable, "-c", _WORKERS_SAY_READY.format(ready=str(ready)), "batch",
                                 str(data), "--workers", "2", "--model", "broken", "--ci", "--ci-replicates", "20000",
                                 "--json"], stdout=subprocess.DEVNULL, stderr=err, cwd=ROOT)
    workers: list[int] = []
    try:
        deadline = time.monotonic() + 120  # (only a batch that never starts its workers takes this long)
        while len(workers) < 2:
            assert proc.poll() is None, f"the batch ended first (exit {proc.returncode}): " \
                                        f"{(tmp_path / 'stderr').read_text()}"
            assert time.monotonic() < deadline, "no two workers said they were ready within 120 s"
            time.sleep(0.01)
            workers = [int(p.name) for p in ready.iterdir()]
        assert [_parent(w) for w in workers] == [proc.pid, proc.pid]  # the batch's own pool workers
        proc.send_signal(signal.SIGKILL)
        assert proc.wait(timeout=120) == -signal.SIGKILL  # killed while its workers ran items
        deadline = time.monotonic() + 60  # (they die at once; a busy machine may take its time to run the exits)
        while any(_state(w) not in (None, "Z") for w in workers) and time.monotonic() < deadline:
            time.sleep(0.05)
        alive = [w for w in workers if _state(w) not in (None, "Z")]
        assert not alive, f"workers {alive} outlived their parent"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=60)
        for w in workers:  # (where the test failed: no orphan left spinning)
            try:
                if _state(w) not in (None, "Z") and str(ready) in Path(f"/proc/{w}/cmdline").read_text():
                    os.kill(w, signal.SIGKILL)
            except OSError:
                pass


def _whiten_stopped_while_writing(tmp_path: Path) -> subprocess.Popen[str]:
    """``whiten -o w.npy`` in a process that sleeps after its first block, once it has said so."""
    np.save(tmp_path / "a.npy", powerlaw_matrix(20000, 16, 1.0))
    script = ("import time, spectra_cli.sinks as s\n"
              "real = s.MatrixWriter.write\n"
              "def slow(self, b):\n    real(self, b); print('writing', flush=True); time.sleep(30)\n"
              "s.MatrixWriter.write = slow\n"
              "from spectra_cli.cli import main; main()\n")
    proc = subprocess.Popen([sys.executable, "-c", script, "whiten", str(tmp_path / "a.npy"), "-o",
                             str(tmp_path / "w.npy"), "--block-rows", "1000"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, cwd=ROOT)
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "writing"
    return proc


@pytest.mark.slow
def test_sigterm_removes_the_temporary_output(tmp_path):
    proc = _whiten_stopped_while_writing(tmp_path)
    assert not (tmp_path / "w.npy").exists()  # the output appears only when complete
    proc.terminate()
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 128 + 15 and "Traceback" not in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.npy"]


# -- exit 3 with a traceback where the input is at fault ------------------------------------------------

@pytest.mark.parametrize(
    ("header", "match"),
    [
        ("{'descr': '<f8', 'fortran_order': False, 'shape': (4294967296, 4294967296), }", "is truncated"),
        ("{'descr': '<f8', 'fortran_order': False, 'shape': (1, 9223372036854775808), }", "is truncated"),
        ("{'descr': '<f8', 'fortran_order': False, 'shape': (4, -1), }", "sizes must be non-negative"),
        ("{'descr': '<f8', 'fortran_order': False, 'shape': ('a', 2), }", "is not a valid .npy file"),
        ("{'descr': 'O', 'fortran_order': False, 'shape': (2, 2), }", "never unpickles"),
        ("not a dict at all", "is not a valid .npy file"),
    ],
)
def test_npy_headers_that_lie(cli, tmp_path, header, match):
    _npy_with_header(tmp_path / "h.npy", header)
    refused(cli, tmp_path, "spectrum", tmp_path / "h.npy", match=match)


def test_broken_archive_members(cli, tmp_path):
    np.savez_compressed(tmp_path / "c.npz", x=X)
    raw = bytearray((tmp_path / "c.npz").read_bytes())
    start = raw.index(b"x.npy") + len(b"x.npy") + 200
    raw[start:start + 64] = b"\xff" * 64  # corrupt the deflate stream
    (tmp_path / "c.npz").write_bytes(bytes(raw))
    refused(cli, tmp_path, "spectrum", tmp_path / "c.npz")
    with zipfile.ZipFile(tmp_path / "e.npz", "w") as z:
        z.writestr("x.npy", b"\x93NUMPY" + b"\0" * 100)
    raw = bytearray((tmp_path / "e.npz").read_bytes())
    for sig in (b"PK\x03\x04", b"PK\x01\x02"):  # set the "encrypted" flag in both headers
        i = raw.index(sig)
        flag_at = i + (6 if sig == b"PK\x03\x04" else 8)
        raw[flag_at] |= 1
    (tmp_path / "e.npz").write_bytes(bytes(raw))
    refused(cli, tmp_path, "spectrum", tmp_path / "e.npz")


@pytest.mark.parametrize(
    ("content", "match"),
    [
        ("[" * 100000 + "]" * 100000, "nested too deeply"),
        ("[1" + "0" * 400 + ", 2, 3]", "an integer of 401 digits"),
        ('{"eigenvalues": "no"}', "must hold a JSON list"),
    ],
)
def test_eigenvalue_json_that_lies(cli, tmp_path, content, match):
    (tmp_path / "e.json").write_text(content)
    refused(cli, tmp_path, "fit", tmp_path / "e.json", "--eigenvalues", match=match)


def test_eigenvalue_csv_that_lies(cli, tmp_path):
    (tmp_path / "e.csv").write_bytes(b"1\n2\n\xff\xfe\n")
    refused(cli, tmp_path, "fit", tmp_path / "e.csv", "--eigenvalues", match="is not UTF-8")
    (tmp_path / "h.csv").write_text("1\n2\n3\n" + "x" * 200_000 + "\n")
    refused(cli, tmp_path, "fit", tmp_path / "h.csv", "--eigenvalues", match="is not a readable CSV column")


@pytest.mark.parametrize("command", ["check", "compare", "trend", "resume"])
def test_reports_and_results_that_lie(cli, tmp_path, command):
    np.save(tmp_path / "a.npy", X)
    deep = "[" * 100000 + "]" * 100000
    (tmp_path / "r.json").write_text(deep)
    (tmp_path / "r.jsonl").write_text('"a string"\n[1, 2]\n')
    if command == "check":
        refused(cli, tmp_path, "check", tmp_path / "r.json", "--require", "fit.alpha > 0", match="nested too deeply")
    elif command == "compare":
        refused(cli, tmp_path, "compare", tmp_path / "r.json", tmp_path / "r.json", match="nested too deeply")
    elif command == "trend":
        refused(cli, tmp_path, "trend", tmp_path / "r.jsonl", "--metric", "fit.alpha", match="not a JSON object")
    else:
        # a file of lines that lie is not a results file: refused, and left as it was
        (tmp_path / "r.jsonl").write_text(deep + "\n[1, 2]\n")
        refused(cli, tmp_path, "batch", tmp_path / "a.npy", "--jsonl", tmp_path / "r.jsonl", "--resume",
                match="exists and is not a spectra results file (its first line is longer than 64 KiB")
        # a results file with lines that lie after its first: repaired
        failed = '{"schema": "spectra.batch-error/1", "item": "x", "fingerprint": "f", "error": "e"}'
        (tmp_path / "r.jsonl").write_text(failed + "\n" + deep + "\n[1, 2]\n" + '{"item": 1' + "0" * 400 + "}\n")
        r = cli("batch", tmp_path / "a.npy", "--jsonl", tmp_path / "r.jsonl", "--resume")
        assert r.exit_code == 0 and "Traceback" not in r.stderr
        assert len((tmp_path / "r.jsonl").read_text().splitlines()) == 1


@pytest.mark.parametrize(
    ("args", "match"),
    [
        (["--seed", "-1", "--sample", "10"], "--seed -1 must be 0 or a positive integer."),
        (["--ci", "--ci-seed", "-1"], "--ci-seed -1 must be 0 or a positive integer."),
        (["--max-memory", "0"], "--max-memory '0' must be a positive number of bytes."),
    ],
)
def test_negative_seeds_and_sizes(cli, tmp_path, args, match):
    np.save(tmp_path / "a.npy", X)
    refused(cli, tmp_path, "fit", tmp_path / "a.npy", *args, match=match)


# (1e-170 squares to 0: Kish's n was 0 / 0; 20,000 rows of 1e150 overflowed the square of their sum)
@pytest.mark.parametrize("value", [1e308, 5e-324, 1e-170, 1e160, 1e150])
def test_weights_beyond_the_safe_range(cli, tmp_path, value):
    np.save(tmp_path / "a.npy", X)
    np.save(tmp_path / "w.npy", np.full(len(X), value))
    refused(cli, tmp_path, "fit", tmp_path / "a.npy", "--weights", tmp_path / "w.npy",
            match="positive weights must lie within")


def test_a_transform_with_nan_or_the_wrong_width(cli, tmp_path):
    np.save(tmp_path / "a.npy", X)
    assert cli("whiten", tmp_path / "a.npy", "-o", tmp_path / "w.npy", "--save-transform",
               tmp_path / "t.npz").exit_code == 0
    with np.load(tmp_path / "t.npz") as z:
        parts = {k: z[k] for k in z.files}
    parts["matrix"] = parts["matrix"].copy()
    parts["matrix"][0, 0] = np.nan
    np.savez(tmp_path / "nan.npz", **parts)
    refused(cli, tmp_path, "whiten", tmp_path / "a.npy", "-o", tmp_path / "x.npy", "--transform",
            tmp_path / "nan.npz", match="holds NaN or inf")
    np.save(tmp_path / "b.npy", X[:, :5])
    refused(cli, tmp_path, "whiten", tmp_path / "b.npy", "-o", tmp_path / "x.npy", "--transform",
            tmp_path / "t.npz", match="expects 12 features")


def test_a_file_name_that_is_not_utf8_does_not_stop_a_batch(cli, tmp_path):
    np.save(tmp_path / "a.npy", X)
    bad = os.path.join(os.fsencode(tmp_path), b"b\xff.npy")
    with open(bad, "wb") as f:
        np.save(f, X)
    r = cli("batch", tmp_path, "--json")
    assert r.exit_code == 0 and len(r.stdout.splitlines()) == 1
    assert "not valid UTF-8" in r.stderr


def test_no_numpy_runtime_warnings_reach_stderr(cli, tmp_path):
    Y = X.copy()
    Y[:, 3] = 0.0  # a constant column and zero rows: divisions by zero inside numpy
    Y[:10] = 0.0
    np.save(tmp_path / "a.npy", Y)
    r = cli("fit", tmp_path / "a.npy", "--isoscore", "--partition-isotropy", "--density", "--json")
    assert r.exit_code == 0 and "RuntimeWarning" not in r.stderr


@pytest.mark.slow
def test_after_sigkill_the_next_write_of_the_output_removes_what_was_left(tmp_path):
    """SIGKILL cannot be caught: where the file system allows, the output is written unnamed
    (O_TMPFILE) and nothing is left; elsewhere its temporary file is named for its writer, and the
    next write of the same output removes it, with a note."""
    proc = _whiten_stopped_while_writing(tmp_path)
    proc.kill()
    proc.communicate(timeout=30)
    left = [p.name for p in tmp_path.iterdir() if p.name.startswith(".spectra-")]
    assert not (tmp_path / "w.npy").exists()
    r = subprocess.run([sys.executable, "-m", "spectra_cli", "whiten", str(tmp_path / "a.npy"), "-o",
                        str(tmp_path / "w.npy")], capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert r.returncode == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.npy", "w.npy"]
    for name in left:
        assert f"note: removed {tmp_path / name}, a temporary file left by an interrupted run" in r.stderr


@pytest.mark.slow
@pytest.mark.parametrize("command", [["isotropy"], ["fit", "--population", "--window", "4:12"]])
def test_an_ascii_terminal_gets_ascii_not_a_traceback(tmp_path, command):
    # LANG=C with PYTHONIOENCODING=ascii: the bullet of a table note was a UnicodeEncodeError, exit 3
    import subprocess
    import sys

    np.save(tmp_path / "x.npy", np.random.default_rng(0).standard_normal((300, 40)))
    env = {**os.environ, "LANG": "C", "LC_ALL": "C", "PYTHONIOENCODING": "ascii", "COLUMNS": "100"}
    r = subprocess.run([sys.executable, "-m", "spectra_cli", command[0], str(tmp_path / "x.npy"), *command[1:]],
                       capture_output=True, env=env, timeout=120)
    assert r.returncode == 0, r.stderr.decode("ascii", "replace")
    assert r.stdout and all(b < 128 for b in r.stdout + r.stderr)
    assert b"alpha" in r.stdout or b"isotropy" in r.stdout


@pytest.mark.slow
@pytest.mark.parametrize("args", [
    ["whiten", "{a}", "-o", "{t}/w.npy", "--save-transform", "{t}/t.npz", "--block-rows", "1000"],
    ["whiten", "{a}", "-o", "{t}/w.parquet", "--block-rows", "1000"],
    ["synth", "powerlaw", "-n", "20000", "-d", "16", "-o", "{t}/s.npy"],
])
def test_a_killed_writer_not_yet_reaped_leaves_nothing_after_the_next_run(tmp_path, args):
    # SIGKILL, and the writer's parent has not reaped it (a zombie: a process of that id still "exists"): its
    # temporary file was kept as if it were still being written, and the rerun left it (86 MB once)
    np.save(tmp_path / "a.npy", powerlaw_matrix(20000, 16, 1.0))
    argv = [a.format(a=tmp_path / "a.npy", t=tmp_path) for a in args]
    script = ("import time, spectra_cli.sinks as s\n"
              "real = s.MatrixWriter.write\n"
              "def slow(self, b):\n    real(self, b); print('writing', flush=True); time.sleep(30)\n"
              "s.MatrixWriter.write = slow\n"
              "from spectra_cli.cli import main; main()\n")
    proc = subprocess.Popen([sys.executable, "-c", script, *argv], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, cwd=ROOT)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "writing"
    proc.kill()
    os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOWAIT)  # dead, and not reaped: a zombie until the end
    left = [p.name for p in tmp_path.iterdir() if p.name.startswith(".spectra-")]
    r = subprocess.run([sys.executable, "-m", "spectra_cli", *argv], capture_output=True, text=True, timeout=60,
                       cwd=ROOT)
    proc.communicate(timeout=30)
    assert r.returncode == 0, r.stderr
    assert not [p.name for p in tmp_path.iterdir() if p.name.startswith(".spectra-")]
    for name in left:
        assert f"note: removed {tmp_path / name}, a temporary file left by an interrupted run" in r.stderr


def test_a_temporary_file_whose_process_id_was_reused_is_stale(tmp_path):
    from spectra_cli import sinks

    reused = tmp_path / f".spectra-{os.getpid()}-abc-out.npy.tmp"  # this process's id, but written long before it
    reused.write_bytes(b"x")
    os.utime(reused, (0, 0))
    mine = tmp_path / f".spectra-{os.getpid()}-def-out.npy.tmp"  # written by this (running) process: kept
    mine.write_bytes(b"x")
    with sinks.atomic_file(str(tmp_path / "out.npy")) as f:
        f.write(b"done")
    names = sorted(p.name for p in tmp_path.iterdir())
    if sinks._unnamed(str(tmp_path)) is None:  # (with O_TMPFILE nothing is ever named, and nothing is swept)
        assert names == [mine.name, "out.npy"]


@pytest.mark.slow
@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
@pytest.mark.parametrize("command", [
    ["report", "{t}/r.json", "-o", "{t}/page.html", "--json"],
    ["whiten", "{t}/x.npy", "-o", "{t}/w.npy", "--save-transform", "{t}/t.npz"],
])
def test_a_result_stdout_refuses_leaves_no_file_and_one_line(tmp_path, command):
    # report -o page.html --json > /dev/full exited 2 but left the page and a 'wrote' line beside the error
    np.save(tmp_path / "x.npy", np.random.default_rng(0).standard_normal((300, 12)))
    r0 = subprocess.run([sys.executable, "-m", "spectra_cli", "fit", str(tmp_path / "x.npy"), "--json"],
                        capture_output=True, text=True, timeout=60, cwd=ROOT)
    (tmp_path / "r.json").write_text(r0.stdout)
    before = sorted(p.name for p in tmp_path.iterdir())
    with open("/dev/full", "w") as full:
        r = subprocess.run([sys.executable, "-m", "spectra_cli", *[a.format(t=tmp_path) for a in command]],
                           stdout=full, stderr=subprocess.PIPE, text=True, timeout=120, cwd=ROOT)
    assert r.returncode == 2, r.stderr
    assert r.stderr.startswith("error: cannot write the result to stdout (No space left on device)")
    assert len(r.stderr.splitlines()) == 1 and "wrote" not in r.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == before
