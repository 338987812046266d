from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from typer.testing import CliRunner

from spectra_cli.cli import app

# The tests' own reference computations (numpy's svd, eigvalsh, cov written out) run on one BLAS thread:
# on a busy machine (a CI runner) two threads that spin for one core made a 0.3 s test take 30 s. spectra's
# own calls keep the thread policy (spectra_cli.threads sets the limit inside each of them).
try:
    from threadpoolctl import threadpool_limits

    _ONE_THREAD = threadpool_limits(limits=1, user_api="blas")
except Exception:  # pragma: no cover - no controllable BLAS
    _ONE_THREAD = None

ROOT = Path(__file__).resolve().parent.parent
SAMPLE = ROOT / "sample_data"


@dataclass
class Run:
    exit_code: int
    stdout: str
    stderr: str

    def json(self) -> Any:
        return json.loads(self.stdout)


@pytest.fixture(scope="session")
def _command() -> Any:
    """Typer's test runner rebuilds the click command from the app on every call (~60 ms; the tests
    make hundreds): build it once per session."""
    import typer.testing

    built = typer.testing._get_command(app)
    typer.testing._get_command = lambda _app: built  # type: ignore[attr-defined]
    return built


@pytest.fixture
def cli(_command: Any) -> Callable[..., Run]:
    runner = CliRunner()

    def run(*args: str) -> Run:
        r = runner.invoke(app, [str(a) for a in args], catch_exceptions=False)
        return Run(r.exit_code, r.stdout, r.stderr)

    return run


@pytest.fixture(scope="session")
def schema() -> dict[str, Any]:
    from spectra_cli.results import report_schema

    return report_schema()


@pytest.fixture(scope="session")
def _validator(schema: dict[str, Any]) -> Any:
    import jsonschema

    cls = jsonschema.validators.validator_for(schema)
    cls.check_schema(schema)  # once: jsonschema.validate would re-check the schema on every call
    return cls(schema)


def _shortened(doc: Any, keep: int = 64) -> Any:
    """The document with every long list cut to its first ``keep`` items: jsonschema builds a
    validator per item (0.3 s for a 5,000-eigenvalue report), and the items of a list share a type."""
    if isinstance(doc, dict):
        return {k: _shortened(v, keep) for k, v in doc.items()}
    if isinstance(doc, list):
        return [_shortened(v, keep) for v in doc[:keep]]
    return doc


@pytest.fixture
def validate(_validator: Any) -> Callable[[dict[str, Any]], None]:
    def check(doc: dict[str, Any]) -> None:
        _validator.validate(_shortened(doc))

    return check


def powerlaw_matrix(n: int, d: int, alpha: float, *, seed: int = 0, offset: float = 0.0) -> np.ndarray:
    """Rows with covariance eigenvalues j^-alpha in a random rotation, plus a mean offset."""
    rng = np.random.default_rng(seed)
    lam = np.arange(1, d + 1, dtype=np.float64) ** -alpha
    Q, _ = np.linalg.qr(rng.standard_normal((d, d)))
    Z = rng.standard_normal((n, d)) * np.sqrt(lam)
    return Z @ Q.T + offset * rng.standard_normal(d)


def reference_eigenvalues(X: np.ndarray, ddof: int = 1) -> np.ndarray:
    """Two-pass float64 covariance eigenvalues, descending (the independent reference)."""
    X = np.asarray(X, dtype=np.float64)
    Xc = X - X.mean(axis=0)
    return np.linalg.eigvalsh(Xc.T @ Xc / (len(X) - ddof))[::-1]


@pytest.fixture
def npy(tmp_path: Path) -> Callable[..., Path]:
    def write(X: np.ndarray, name: str = "x.npy") -> Path:
        p = tmp_path / name
        np.save(p, X)
        return p

    return write


# ruff and mypy run in the background while the other tests run (mypy alone takes ~12 s from a
# cold cache; the suite must stay under a minute on 2 cores); tests/test_lint.py waits for them.
STATIC_CHECKS = {
    "ruff": ["-m", "ruff", "check", "spectra_cli", "tests", "bench"],
    "mypy": ["-m", "mypy", "spectra_cli"],
}
_RUNNING: dict[str, Any] = {}


def pytest_collection_finish(session: pytest.Session) -> None:
    import subprocess
    import sys

    if any(item.nodeid.startswith("tests/test_lint.py") for item in session.items):
        for name, args in STATIC_CHECKS.items():
            # At the lowest priority: most tests use one core, and mypy then fills the other instead
            # of taking CPU from them (a cold mypy is 12 s of CPU).
            _RUNNING[name] = subprocess.Popen([sys.executable, *args], cwd=ROOT, stdout=subprocess.PIPE,
                                              stderr=subprocess.STDOUT, text=True,
                                              preexec_fn=_lowest_priority if os.name == "posix" else None)


def _lowest_priority() -> None:
    os.nice(19)


def static_check_result(name: str) -> tuple[int, str]:
    """Exit code and output of a background static check (started now if it was not)."""
    import subprocess
    import sys

    proc = _RUNNING.pop(name, None)
    if proc is not None and proc.poll() is None and os.name == "posix":
        # Still running when its result is wanted: back to the normal priority (on a busy machine a process
        # at the lowest priority gets almost no CPU while the busy ones run), or started again at it.
        try:
            os.setpriority(os.PRIO_PROCESS, proc.pid, 0)
        except OSError:
            proc.kill()
            proc.wait()
            proc = None
    if proc is None:
        proc = subprocess.Popen([sys.executable, *STATIC_CHECKS[name]], cwd=ROOT, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True)
    out, _ = proc.communicate(timeout=600)
    return proc.returncode, out


def pytest_unconfigure(config: pytest.Config) -> None:
    for proc in _RUNNING.values():
        proc.kill()


# Fixtures shared by the library and command-line tests.
@pytest.fixture
def checkpoint(tmp_path):
    safetensors_numpy = pytest.importorskip("safetensors.numpy")
    rng = np.random.default_rng(0)
    w32 = rng.standard_normal((96, 40)).astype(np.float32)
    w16 = rng.standard_normal((80, 40)).astype(np.float16)
    safetensors_numpy.save_file({"enc.layer0.attn.weight": w32, "enc.layer0.mlp.weight": w16,
                                 "enc.layer0.attn.bias": np.zeros(96, np.float32)}, tmp_path / "model.safetensors")
    return tmp_path / "model.safetensors", w32, w16


@pytest.fixture
def full_rank(tmp_path):
    X = powerlaw_matrix(20000, 24, 1.0, seed=3, offset=30.0)
    p = tmp_path / "x.npy"
    np.save(p, X)
    return p, X


@pytest.fixture
def without(monkeypatch):
    """``without("jinja2")``: importing these modules (and their submodules) fails for the test, as on a
    machine without the optional extra."""
    import builtins

    real = builtins.__import__

    def hide(*modules: str) -> None:
        def fake(name: str, *a: Any, **k: Any) -> Any:
            if any(name == m or name.startswith(m + ".") for m in modules):
                raise ImportError(name)
            return real(name, *a, **k)

        monkeypatch.setattr(builtins, "__import__", fake)

    return hide
