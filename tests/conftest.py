from __future__ import annotations

import json
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
    # stdout a pipe without COLUMNS, as in a user's log (pytest-xdist's workers have COLUMNS=80 exported)
    runner = CliRunner(env={"COLUMNS": None})  # type: ignore[dict-item]

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


@pytest.fixture(autouse=True)
def _warnings_said_afresh() -> None:
    """Each test starts with no kind of SpectraWarning said yet (each kind is said once per process)."""
    from spectra_cli.run.assemble import SAID

    SAID.clear()


@pytest.fixture
def no_thread_caps(monkeypatch: pytest.MonkeyPatch) -> None:
    """The thread policy's own choices, whatever the environment the tests run in: a user's caps (OMP_NUM_THREADS,
    OPENBLAS_NUM_THREADS, ...) removed for the test, or a cap of one would keep every pool one at a time."""
    from spectra_cli import threads

    for var in threads.ENV_VARS:
        monkeypatch.delenv(var, raising=False)


@pytest.fixture
def npy(tmp_path: Path) -> Callable[..., Path]:
    def write(X: np.ndarray, name: str = "x.npy") -> Path:
        p = tmp_path / name
        np.save(p, X)
        return p

    return write


# The slow tests: system tests (real processes killed or interrupted, Dask clusters, torch's process groups,
# the docs' examples run as written, the site's build) and statistical studies, each marked on itself
# (@pytest.mark.slow, or a module's pytestmark). The default run leaves them out (-m "not slow" in pyproject.toml);
# CI runs them after it: python -m pytest -m slow. A module marked whole is not even imported by the default run
# (torch and distributed take seconds to import): its mark is read from its text.
SLOW_MARKER = ("slow: a system or statistical test, left out of the default run; "
               "python -m pytest -m slow runs them (CI does)")
SLOW_MODULE_MARK = "pytestmark = pytest.mark.slow"


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    marks = (config.option.markexpr or "").replace(" ", "")
    where = collection_path.resolve()
    if marks == "notslow" and where.is_file() and where.suffix == ".py" and where.name.startswith("test_"):
        return True if any(line.startswith(SLOW_MODULE_MARK) for line in where.read_text().splitlines()) else None
    return None


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", SLOW_MARKER)


# ruff and mypy, run once by the test command beside the tests (tests/test_lint.py reads their results)
pytest_plugins = ["tests.lint_plugin"]


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
