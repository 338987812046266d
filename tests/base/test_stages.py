"""Progress of the stages after the read (spectra_cli.stages): which stages report, in order, to a
plain callable and to one that takes stage names; none without a progress."""

from __future__ import annotations

import numpy as np
import pytest

import spectra_cli as spectra
from spectra_cli import stages
from tests.conftest import SAMPLE, powerlaw_matrix


class Recorder:
    def __init__(self) -> None:
        self.events: list[tuple] = []

    def stage(self, label: str, total: int) -> None:
        self.events.append(("stage", label, total))

    def __call__(self, done: int, total: int) -> None:
        self.events.append((done, total))

    def stages(self) -> list[str]:
        return [e[1] for e in self.events if e[0] == "stage"]


def test_fit_reports_the_read_then_the_replicates_then_the_population():
    rec = Recorder()
    spectra.fit(powerlaw_matrix(200, 32, 1.0, seed=0), window="3:16", ci=True, ci_replicates=12, population=True,
                progress=rec)
    assert rec.stages() == ["bootstrap replicates", "population: sub-sample spectra",
                            "population: matching the expected spectrum (ranks 3..16)",
                            "population: simulated spectra (ranks 3..16)", "population: simulated sampling curves"]
    first = rec.events.index(("stage", "bootstrap replicates", 12))
    assert rec.events[first - 1] == (200, 200)  # the read ended before
    assert rec.events[first + 1:first + 14] == [(b, 12) for b in range(13)]
    # with n >= 10 d rows the population's interval is first order: nothing is simulated
    rec = Recorder()
    spectra.fit(powerlaw_matrix(320, 32, 1.0, seed=0), window="3:16", population=True, progress=rec)
    assert rec.stages() == ["population: sub-sample spectra",
                            "population: matching the expected spectrum (ranks 3..16)"]


def test_a_plain_callable_gets_every_stage_counts():
    seen: list[tuple[int, int]] = []
    spectra.fit(powerlaw_matrix(1000, 24, 1.0, seed=1), window="3:12", ci=True, ci_replicates=10,
                progress=lambda done, total: seen.append((done, total)))
    assert seen[-1] == (10, 10) and (1000, 1000) in seen


def test_sequence_reports_the_context_and_its_control():
    rec = Recorder()
    spectra.sequence(str(SAMPLE / "minilm_layer3_context32_128_f16.npy"), positions=":6", controls=["shuffled"],
                     window="3:30", progress=rec)
    assert rec.stages() == ["context: positions", "shuffled control: positions"]
    assert ("stage", "context: positions", 6) in rec.events and (6, 6) in rec.events


def test_lanczos_reports_its_basis():
    rng = np.random.default_rng(0)
    d = 600
    A = rng.standard_normal((d, d)) * (np.arange(1, d + 1) ** -0.8)
    C = A @ A.T
    rec = Recorder()
    from spectra_cli.eigen.lanczos import top_eigenvalues

    with stages.reporting(rec):
        top = top_eigenvalues(C, 20)
    assert top is not None
    assert rec.stages() and rec.stages()[0].startswith("Lanczos: leading 20 eigenvalues")
    counts = [e for e in rec.events if e[0] != "stage"]
    assert counts == sorted(counts)  # only forward


def test_no_progress_no_calls_and_the_context_is_restored():
    assert stages.stage("x", 3)(1) is None  # a no-op without a current progress
    rec = Recorder()
    with stages.reporting(rec):
        stages.stage("a", 2)(1)
    stages.stage("b", 2)(1)
    assert rec.events == [("stage", "a", 2), (0, 2), (1, 2)]


def test_the_bar_restarts_under_each_stage_name():
    from spectra_cli.render.progress import LazyProgress

    bar = LazyProgress("reading x", delay=0.0, enabled=True)
    bar(5, 10)
    bar.stage("bootstrap replicates", 20)
    bar(20, 20)
    task = bar._progress.tasks[0]
    assert task.description == "bootstrap replicates" and task.total == 20 and task.completed == 20
    bar.close()


def test_a_second_pass_is_a_stage_named_by_its_analysis(tmp_path):
    path = tmp_path / "x.npy"
    np.save(path, powerlaw_matrix(1500, 24, 1.0, seed=2))
    rec = Recorder()
    spectra.fit(str(path), window="3:12", partition_isotropy=True, progress=rec)
    assert rec.stages() == ["second pass: --partition-isotropy"]
    assert rec.events[-1] == (1500, 1500)


class Expecting(Recorder):
    def expect(self, label: str, seconds: float, why: str) -> None:
        self.events.append(("expect", label, seconds, why))


def test_the_population_tells_its_expected_time_before_it_starts():
    """Before the sub-samples: the data's 16 sub-sample decompositions and, below 10 d rows, each window's 40
    bootstrap samples and 8 sampling-curve samples of 5 spectra, at the spectrum's own pace."""
    from spectra_cli.analysis.population import simulated_decompositions

    for rows, windows, count in ((200, 1, 16 + 80), (200, 2, 16 + 2 * 80), (320, 1, 16)):
        rec = Expecting()
        rep = spectra.fit(powerlaw_matrix(rows, 32, 1.0, seed=0), window=["3:16", "3:12"][:windows], population=True,
                          progress=rec)
        told = [e for e in rec.events if e[0] == "expect"]
        assert len(told) == 1 and rec.events.index(told[0]) < rec.events.index(("stage", "population: sub-sample "
                                                                                "spectra", 16))
        _, label, seconds, why = told[0]
        assert label == "the population exponent"
        assert why.startswith(f"{count} eigendecompositions of 32 x 32 at the spectrum's ")
        assert seconds == pytest.approx(count * rep.timings["eigen_s"])
    assert simulated_decompositions(198, 20, replicates=40, curve_parts=4) == 80  # 199 centred rows: n/d 9.95
    assert simulated_decompositions(198, 20, replicates=40, curve_parts=None) == 40
    assert simulated_decompositions(199, 20, replicates=40, curve_parts=4) == 0  # 200 rows: first order


def test_a_long_expected_stage_is_one_note_before_it_on_stderr(capsys):
    from spectra_cli.render.progress import LazyProgress

    bar = LazyProgress("reading x", enabled=False)
    bar.expect("the population exponent", 20.0, "short")
    assert capsys.readouterr().err == ""
    bar.expect("the population exponent", 340.0, "96 eigendecompositions of 4,096 x 4,096 at the spectrum's 3.5 s each")
    assert capsys.readouterr().err == ("note: the population exponent will take about 6 min or more (96 "
                                       "eigendecompositions of 4,096 x 4,096 at the spectrum's 3.5 s each)\n")
