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
# the docs' examples run as written, the site's build) and statistical studies. The default run leaves them
# out (-m "not slow" in pyproject.toml); CI runs them after it: python -m pytest -m slow. A whole module
# listed here is not even imported by the default run (torch and distributed take seconds to import).
SLOW_MARKER = ("slow: a system or statistical test, left out of the default run; "
               "python -m pytest -m slow runs them (CI does)")
SLOW_MODULES = (
    "tests/cli/test_hostile_dask.py",  # local clusters, refused and silent schedulers, killed workers
    "tests/stream/test_dask_engine.py",  # a real 2-process LocalCluster against the local engine
    "tests/stream/test_capture.py",  # torch models, gloo ranks, the Lightning callback
    "tests/stream/test_capture_safety.py",  # planted model folders run through the command in subprocesses
    "tests/run/test_dashboards.py",  # a Lightning and a Trainer run writing TensorBoard event files
)
SLOW_TESTS = (
    # the docs: every example run as written, and the site built strict
    "tests/docs/test_docs.py::test_the_examples_run_as_written",
    "tests/docs/test_docs.py::test_the_site_builds_strict",
    # processes killed, interrupted or cut off mid-run
    "tests/cli/test_hostile.py::test_a_killed_writer_not_yet_reaped",
    "tests/cli/test_hostile.py::test_after_sigkill",
    "tests/cli/test_hostile.py::test_sigterm_removes",
    "tests/cli/test_hostile.py::test_workers_die_with_a_killed_batch",
    "tests/cli/test_hostile.py::test_a_result_stdout_refuses",
    "tests/cli/test_hostile.py::test_an_ascii_terminal_gets_ascii",
    "tests/cli/test_report_cli.py::test_ctrl_c",
    "tests/cli/test_checkpoints.py::test_resume_after_a_killed_batch",
    "tests/cli/test_cli.py::test_entry_point_streams",
    "tests/run/test_report_page.py::test_page_in_a_real_browser",  # headless Chromium opens the page
    # every figure drawn many times over
    "tests/results/test_fuzz.py::test_every_figure_draws_or_refuses",
    "tests/results/test_fuzz.py::test_the_page_draws_or_refuses_edge_reports",
    "tests/results/test_plot.py::test_every_figure_keeps_its_text_on_the_canvas",
    "tests/results/test_plot.py::test_no_global_state_and_no_pyplot",
    "tests/cli/test_checkpoints.py::test_a_tensor_name_with_control_characters_and_dollars_draws",
    # statistical studies (many simulated samples each)
    "tests/analysis/test_spikes.py::test_the_bulk_has_every_direction_when_fewer_eigenvalues_are_known",
    "tests/analysis/test_spikes.py::test_planted_spikes_above_the_threshold_are_found",
    "tests/analysis/test_spikes.py::test_tracy_widom_has_its_mean_and_a_tail",
    "tests/analysis/test_fitting.py::test_synthetic_powerlaw_rows_recover_alpha_within_003",
    "tests/analysis/test_population.py::test_the_population_does_not_depend_on_the_units",
    "tests/analysis/test_population.py::test_a_population_that_bends_in_the_window_is_flagged",
    "tests/analysis/test_population.py::test_at_many_rows_per_feature_the_interval_is_first_order",
    "tests/analysis/test_population.py::test_fit_population_corrects_the_small_sample_bias",
    "tests/analysis/test_population.py::test_the_participation_ratio_estimate_removes_most_of_the_bias",
    "tests/stream/test_norms.py::test_the_coordinates_fourth_moments_are_unbiased",
)


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:  # before -m deselects
        if item.nodeid.startswith(SLOW_MODULES + SLOW_TESTS):
            item.add_marker(pytest.mark.slow)


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    marks = (config.option.markexpr or "").replace(" ", "")
    where = collection_path.resolve()
    if marks == "notslow" and where.is_file() and where.is_relative_to(ROOT):
        return True if where.relative_to(ROOT).as_posix() in SLOW_MODULES else None
    return None


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

    config.addinivalue_line("markers", SLOW_MARKER)
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
