"""Progress of the stages after the read (spectra_cli.stages): which stages report, in order, to a
plain callable and to one that takes stage names; none without a progress."""

from __future__ import annotations

import numpy as np

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
                population_route="simulate", progress=rec)
    assert rec.stages() == ["bootstrap replicates", "population: sub-sample spectra",
                            "population: matching the expected spectrum (ranks 3..16)",
                            "population: simulated spectra (ranks 3..16)", "population: simulated sampling curves"]
    first = rec.events.index(("stage", "bootstrap replicates", 12))
    assert rec.events[first - 1] == (200, 200)  # the read ended before
    assert rec.events[first + 1:first + 14] == [(b, 12) for b in range(13)]
    # by default, Gaussian rows below n = 10 d take their interval from theory: nothing is simulated either (a
    # second pass reads the coordinates' kurtosis)
    rec = Recorder()
    spectra.fit(powerlaw_matrix(200, 32, 1.0, seed=0), window="3:16", population=True, progress=rec)
    assert rec.stages() == ["second pass: --population", "population: sub-sample spectra",
                            "population: matching the expected spectrum (ranks 3..16)"]
    # from n = 10 d degrees of freedom the population's interval is first order: nothing is simulated
    rec = Recorder()
    spectra.fit(powerlaw_matrix(330, 32, 1.0, seed=0), window="3:16", population=True, progress=rec)
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
    def __init__(self, log: list[str]) -> None:
        super().__init__()
        self.log = log

    def expect(self, label: str, seconds: float, why: str) -> None:
        self.events.append(("expect", label, seconds, why))
        self.log.append("told")


def test_the_population_tells_its_expected_time_before_it_starts(monkeypatch):
    """Before its decompositions, as many as it then makes: the data's 16 sub-samples and, below n = 10 d, each
    window's 40 bootstrap samples and 8 sampling-curve samples of 5 spectra (none of the curve's without
    sub-samples), on the d x d route, the n x n route and moments without row groups."""
    from spectra_cli.analysis import bootstrap, simulate
    from spectra_cli.analysis.population import simulated_decompositions
    from spectra_cli.run import fit_steps

    made: list[str] = []
    def counting(real):
        def counted(*a, **k):
            made.append("decomposition")
            return real(*a, **k)

        return counted

    for module, name in ((simulate, "eigvalsh_checked"), (bootstrap, "leading_eigenvalues"),
                         (fit_steps, "spectrum_from_rows")):
        monkeypatch.setattr(module, name, counting(getattr(module, name)))
    bare = spectra.Accumulator(d=32)  # (no row groups: no sub-samples, no sampling curve)
    bare.update(powerlaw_matrix(200, 32, 1.0, seed=3))
    concentrated = np.where(np.arange(640) % 5 == 0, 1.0, 0.05)  # Kish 182.5 of 640 rows: 5.7 d
    cases = (  # data, weights, windows, decompositions, of up to (simulated samples: population_route="simulate")
        (powerlaw_matrix(200, 32, 1.0, seed=0), None, 1, 16 + 80, "32 x 32"),
        (powerlaw_matrix(200, 32, 1.0, seed=0), None, 2, 16 + 2 * 80, "32 x 32"),
        (powerlaw_matrix(321, 32, 1.0, seed=0), None, 1, 16, "32 x 32"),  # 10 d degrees of freedom: first order
        (powerlaw_matrix(321, 32, 1.0, seed=0), np.full(321, 0.3), 1, 16, "32 x 32"),  # equal weights: the same
        (powerlaw_matrix(640, 32, 1.0, seed=4), concentrated, 1, 16 + 80, "32 x 32"),  # by Kish's: simulated
        (powerlaw_matrix(36, 48, 1.0, seed=1), None, 1, 16 + 80, "35 x 35"),  # n < d: the n x n route
        (bare, None, 1, 40, "32 x 32"),
    )
    for data, weights, windows, count, size in cases:
        rec = Expecting(made)
        made.clear()
        rep = spectra.fit(data, weights=weights, window=["3:12", "3:10"][:windows], population=True, progress=rec,
                          population_route="simulate")
        assert all(f.population is not None for f in rep.fits)
        told = [e for e in rec.events if e[0] == "expect"]
        assert len(told) == 1 and made.count("told") == 1
        _, label, seconds, why = told[0]
        after = made[made.index("told") + 1:]  # (the spectrum's own decompositions came before)
        assert label == "the population exponent" and after.count("decomposition") == count
        assert why.startswith(f"{count} eigendecompositions of up to {size}, at the pace of the spectrum's own")
        assert seconds > 0
    # the analytic route (the default) simulates nothing for Gaussian rows: the sub-samples alone
    rec = Expecting(made)
    made.clear()
    rep = spectra.fit(powerlaw_matrix(200, 32, 1.0, seed=0), window="3:12", population=True, progress=rec)
    assert rep.fits[0].population.route == "analytic" and made[made.index("told") + 1:].count("decomposition") == 16
    assert [e for e in rec.events if e[0] == "expect"][0][3].startswith("16 eigendecompositions of up to 32 x 32")
    assert simulated_decompositions(199, 20, replicates=40, curve_parts=4, analytic=True) == 0
    assert simulated_decompositions(199, 20, replicates=40, curve_parts=4) == 80  # 200 centred rows: n/d 9.95
    assert simulated_decompositions(199, 20, replicates=40, curve_parts=None) == 40
    assert simulated_decompositions(200, 20, replicates=40, curve_parts=4) == 0  # 201 rows: first order


def test_a_long_expected_stage_is_one_note_before_it_on_stderr(capsys):
    from spectra_cli.render.progress import LazyProgress

    bar = LazyProgress("reading x", enabled=False)
    bar.expect("the population exponent", 20.0, "short")
    assert capsys.readouterr().err == ""
    bar.expect("the population exponent", 340.0, "96 eigendecompositions")
    assert capsys.readouterr().err == "note: the population exponent will take about 6 min (96 eigendecompositions)\n"



def test_on_a_terminal_the_note_is_printed_above_the_bar_and_the_bar_keeps_its_styles(monkeypatch):
    import io

    import rich.console

    screen = io.StringIO()
    real = rich.console.Console
    monkeypatch.setattr(rich.console, "Console", lambda **k: real(file=screen, force_terminal=True, width=100))
    from spectra_cli.render.progress import LazyProgress

    bar = LazyProgress("reading x", delay=0.0, enabled=True)
    bar(1, 10)
    bar.expect("the population exponent", 340.0, "96 eigendecompositions [of d x d]")
    bar(2, 10)
    bar.close()
    shown = screen.getvalue()
    assert "note: the population exponent will take about 6 min (96 eigendecompositions [of d x d])" in shown
    assert "[progress.description]" not in shown  # (the bar, re-rendered below the note, read as markup)
