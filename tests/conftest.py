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

ROOT = Path(__file__).resolve().parent.parent
SAMPLE = ROOT / "sample_data"


@dataclass
class Run:
    exit_code: int
    stdout: str
    stderr: str

    def json(self) -> Any:
        return json.loads(self.stdout)


@pytest.fixture
def cli() -> Callable[..., Run]:
    runner = CliRunner()

    def run(*args: str) -> Run:
        r = runner.invoke(app, [str(a) for a in args], catch_exceptions=False)
        return Run(r.exit_code, r.stdout, r.stderr)

    return run


@pytest.fixture(scope="session")
def schema() -> dict[str, Any]:
    from spectra_cli.results import report_schema

    return report_schema()


@pytest.fixture
def validate(schema: dict[str, Any]) -> Callable[[dict[str, Any]], None]:
    import jsonschema

    def check(doc: dict[str, Any]) -> None:
        jsonschema.validate(doc, schema)

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
