"""The test command's static checks, a pytest plugin (tests/conftest.py loads it): ruff and mypy start in the
background when a session that collects tests/test_lint.py starts, beside the tests (mypy alone takes ~12 s
from a cold cache; the suite must stay fast on 2 cores), and tests/test_lint.py waits for their results."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent


# ruff and mypy run in the background while the other tests run (mypy alone takes ~12 s from a
# cold cache; the suite must stay fast on 2 cores); tests/test_lint.py waits for them. They are started
# once, by the process that starts the run (with -n, the controller: each worker starting its own ran
# them twice), with their output and exit code in files the test reads.
STATIC_CHECKS = {
    "ruff": ["-m", "ruff", "check", "spectra_cli", "tests", "bench"],
    "mypy": ["-m", "mypy", "spectra_cli"],
}
STATIC_ENV = "SPECTRA_TESTS_STATIC_CHECKS"  # the folder of their files, inherited by the workers
_RUNNING: dict[str, Any] = {}
# Runs a check, writes its process id beside argv[1] (``.pid``), then its exit code to argv[1] (its output goes
# where this process's goes). Both stay in pytest's process group: a signal to the group (a CI timeout) ends them.
_WRAPPER = ("import os, pathlib, subprocess, sys; rc = pathlib.Path(sys.argv[1]); p = subprocess.Popen(sys.argv[2:]); "
            "rc.with_suffix('.pid').write_text(str(p.pid)); code = p.wait(); part = rc.with_suffix('.part'); "
            "part.write_text(str(code)); os.replace(part, rc)")


def _runs_lint(config: pytest.Config) -> bool:
    """Whether this run may include tests/test_lint.py (by the paths and the -m it was given)."""
    marks = (config.option.markexpr or "").replace(" ", "")
    if marks and "notslow" not in marks:
        return False
    lint = ROOT / "tests" / "test_lint.py"
    args = [a.split("::")[0] for a in config.args] or ["tests"]
    return any(lint == Path(a).resolve() or Path(a).resolve() in lint.parents for a in args)


def pytest_configure(config: pytest.Config) -> None:
    import subprocess
    import sys
    import tempfile

    if hasattr(config, "workerinput") or os.environ.get(STATIC_ENV) or not _runs_lint(config):
        return
    for stale in Path(tempfile.gettempdir()).glob("spectra-static-*"):  # left by a run killed from outside
        if not any(_alive(pid) for pid in _pids(stale, "ruff") + _pids(stale, "mypy")):
            import shutil

            shutil.rmtree(stale, ignore_errors=True)
    where = Path(tempfile.mkdtemp(prefix="spectra-static-"))
    os.environ[STATIC_ENV] = str(where)
    for name, args in STATIC_CHECKS.items():
        with open(where / f"{name}.out", "w") as out:
            # At the lowest priority: most tests use one core, and mypy then fills the other instead
            # of taking CPU from them (a cold mypy is 12 s of CPU).
            _RUNNING[name] = subprocess.Popen(
                [sys.executable, "-c", _WRAPPER, str(where / f"{name}.rc"), sys.executable, *args], cwd=ROOT,
                stdout=out, stderr=subprocess.STDOUT, preexec_fn=_lowest_priority if os.name == "posix" else None)
        (where / f"{name}.wrapper").write_text(str(_RUNNING[name].pid))


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # (another user's process of that number)
        return True
    return True


def _lowest_priority() -> None:
    os.nice(19)


def _pids(folder: Path, name: str) -> list[int]:
    """The background check's wrapper and the check itself (the latter once it has started)."""
    out = []
    for suffix in ("wrapper", "pid"):
        try:
            out.append(int((folder / f"{name}.{suffix}").read_text()))
        except (OSError, ValueError):
            pass
    return out


def _foreground(name: str) -> tuple[int, str]:
    import subprocess
    import sys

    done = subprocess.run([sys.executable, *STATIC_CHECKS[name]], cwd=ROOT, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, timeout=600)
    return done.returncode, done.stdout


def static_check_result(name: str) -> tuple[int, str]:
    """Exit code and output of a background static check (run now, in the foreground, if it was not started)."""
    import signal
    import time

    folder = Path(os.environ.get(STATIC_ENV) or "/nonexistent")
    if not (folder / f"{name}.out").exists():
        return _foreground(name)
    rc = folder / f"{name}.rc"
    if not rc.exists() and os.name == "posix":
        # Still running when its result is wanted: back to the normal priority (on a busy machine a process
        # at the lowest priority gets almost no CPU while the busy ones run). Where that needs a privilege this
        # process lacks (or the check has not started yet), it is stopped and run again in the foreground.
        pids = _pids(folder, name)
        try:
            if len(pids) < 2:
                raise OSError("not started")
            for pid in pids:
                os.setpriority(os.PRIO_PROCESS, pid, 0)
        except OSError:
            for pid in reversed(pids):
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass
            if not rc.exists():
                return _foreground(name)
    deadline = time.monotonic() + 600
    while not rc.exists():
        if time.monotonic() > deadline:
            pytest.fail(f"{name} did not finish within 600 s")
        time.sleep(0.05)
    return int(rc.read_text()), (folder / f"{name}.out").read_text()


def pytest_unconfigure(config: pytest.Config) -> None:
    import shutil
    import signal

    folder = os.environ.get(STATIC_ENV)
    for name, proc in _RUNNING.items():
        if proc.poll() is None:
            for pid in reversed(_pids(Path(folder), name) if folder else [proc.pid]):
                try:
                    os.kill(pid, signal.SIGKILL)  # the check, then its wrapper
                except OSError:
                    pass
            proc.wait()
    if _RUNNING and folder:
        shutil.rmtree(os.environ.pop(STATIC_ENV), ignore_errors=True)
    _RUNNING.clear()


# Fixtures shared by the library and command-line tests.
