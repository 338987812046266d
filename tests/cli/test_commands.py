"""The commands end to end: JSON against the schema, tables, help, lazy imports, streams. (command line)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from spectra_cli.cli import app
from tests.cli.test_cli import NPY, PARQUET
from tests.conftest import ROOT, powerlaw_matrix


def test_fit_json_is_strict_and_valid(cli, validate):
    r = cli("fit", NPY, "--json")
    assert r.exit_code == 0, r.stderr
    doc = r.json()
    validate(doc)
    assert doc["command"] == "fit" and doc["schema"] == "spectra.report/1"
    assert doc["source"]["shape"] == [4096, 384] and doc["source"]["dtype"] == "float16"
    assert doc["options"] == {"centered": True, "ddof": 1, "weights": None, "precision": "float64",
                              "block_rows": 256, "drop_nonfinite": False, "window": ["default"],
                              "method": "ols", "model": "power-law", "degree": 2, "ci": None,
                              "population": None, "auto_tolerance": 0.05}
    assert doc["fit"]["window"] == [11, 38]
    json.loads(r.stdout, parse_constant=lambda c: pytest.fail(f"non-strict JSON constant {c}"))


def test_fit_on_parquet_with_window_and_column(cli, validate):
    r = cli("fit", PARQUET, "--column", "emb", "--window", "11:200", "--json")
    assert r.exit_code == 0, r.stderr
    doc = r.json()
    validate(doc)
    assert doc["fit"]["window"] == [11, 200] and doc["fit"]["window_source"] == "user"
    assert doc["source"]["column"] == "emb" and doc["options"]["window"] == ["11:200"]


def test_spectrum_json(cli, validate):
    r = cli("spectrum", NPY, "--json", "--rows", "0:2000", "--ddof", "0")
    doc = r.json()
    validate(doc)
    assert "fit" not in doc and "rank" not in doc
    X = np.load(NPY)[:2000].astype(np.float64)
    ref = np.linalg.eigvalsh(np.cov(X, rowvar=False, ddof=0))[::-1]
    np.testing.assert_allclose(doc["spectrum"]["eigenvalues"], ref, rtol=1e-9, atol=1e-12)
    assert doc["source"]["rows"] == "0:2000" and doc["source"]["rows_used"] == 2000


def test_sample_and_uncentered_and_weights(cli, tmp_path, validate):
    X = powerlaw_matrix(3000, 20, 1.0, offset=2.0)
    w = np.random.default_rng(1).random(3000)
    np.save(tmp_path / "x.npy", X)
    np.save(tmp_path / "w.npy", w)
    doc = cli("spectrum", tmp_path / "x.npy", "--sample", "500", "--seed", "7", "--json").json()
    validate(doc)
    idx = np.sort(np.random.default_rng(7).choice(3000, 500, replace=False))
    ref = np.linalg.eigvalsh(np.cov(X[idx], rowvar=False))[::-1]
    np.testing.assert_allclose(doc["spectrum"]["eigenvalues"], ref, rtol=1e-10)
    doc = cli("spectrum", tmp_path / "x.npy", "--uncentered", "--json").json()
    validate(doc)
    np.testing.assert_allclose(doc["spectrum"]["eigenvalues"], np.linalg.eigvalsh(X.T @ X / 3000)[::-1], rtol=1e-10)
    assert doc["options"]["centered"] is False
    doc = cli("spectrum", tmp_path / "x.npy", "--weights", tmp_path / "w.npy", "--json").json()
    validate(doc)
    p = w / w.sum()
    ref = np.linalg.eigvalsh(X.T @ (np.diag(p) - np.outer(p, p)) @ X)[::-1]
    np.testing.assert_allclose(doc["spectrum"]["eigenvalues"], ref, rtol=1e-9)
    assert doc["options"]["ddof"] is None and doc["options"]["weights"]["file"].endswith("w.npy")


def test_float32_precision_is_reported(cli, validate):
    doc = cli("fit", NPY, "--precision", "float32", "--json").json()
    validate(doc)
    assert doc["spectrum"]["precision"] == "float32" and doc["options"]["precision"] == "float32"
    ref = cli("fit", NPY, "--json").json()
    lam32, lam64 = np.array(doc["spectrum"]["eigenvalues"]), np.array(ref["spectrum"]["eigenvalues"])
    assert np.max(np.abs(lam32 - lam64)) <= doc["spectrum"]["numerical_floor"]


def test_fit_table_names_every_figure(cli):
    r = cli("fit", NPY)
    assert r.exit_code == 0, r.stderr
    from spectra_cli import registry
    for word in ("alpha", "window", "R^2", "numerical rank", "numerical floor", "k90", "float64",
                 "past it 1 direction(s) with almost no variance", *(m.label for m in registry.section("rank", "table")
                                                     if m.name != "participation_ratio_population")):
        assert word in r.stdout, word
    assert r.stderr == ""
    r = cli("fit", NPY, "--window", "11:384")  # a window that runs into the near-null direction says so
    assert "Warnings" in r.stdout and "spectra leaves them out of the fit over ranks 11..383" in r.stdout


def test_info_reads_metadata(cli):
    r = cli("info", PARQUET, "--json")
    doc = r.json()
    assert doc["n_rows"] == 4096 and doc["n_features"] == 384 and doc["row_groups"] == 4
    assert {"name": "emb", "type": "fixed_size_list<element: float>[384]"} in doc["columns_schema"]
    r = cli("info", NPY)
    assert r.exit_code == 0 and "4096" in r.stdout


def test_info_lists_npz_arrays(cli, tmp_path):
    np.savez(tmp_path / "a.npz", emb=np.zeros((3, 2)), ids=np.arange(3))
    doc = cli("info", tmp_path / "a.npz", "--json").json()
    assert [a["key"] for a in doc["arrays"]] == ["emb", "ids"]


def test_every_command_has_help_and_is_in_the_commands_page(cli):
    readme = (ROOT / "docs" / "commands.md").read_text()
    import typer.main

    group = typer.main.get_command(app)
    assert group.commands
    for name, cmd in group.commands.items():
        assert (cmd.help or "").strip(), name
        r = cli(name, "--help")
        assert r.exit_code == 0 and "Usage" in r.stdout
        assert f"spectra {name}" in readme, f"docs/commands.md does not show `spectra {name}`"


def test_version(cli):
    from spectra_cli import __version__

    r = cli("--version")
    assert r.stdout == f"spectra {__version__}\n"


@pytest.mark.parametrize(
    "args",
    [
        ["fit", NPY, "--rows", "0:1500", "--window", "11:38", "--window", "auto", "--ci", "--ci-replicates", "20",
         "--density",
         "--shuffled-control", "--partition-isotropy", "--isoscore", "--model", "broken"],
        ["fit", NPY, "--model", "log-corrected", "--method", "logspaced"],
        ["spectrum", PARQUET, "--sample", "1000"],
        ["isotropy", NPY, "--isoscore"],
        ["info", NPY],
    ],
    ids=["fit-everything", "fit-log-corrected", "spectrum", "isotropy", "info"],
)
def test_tables_render_for_every_command(cli, args):
    r = cli(*args)
    assert r.exit_code == 0, r.stderr
    assert r.stdout.strip() and "Traceback" not in r.stdout + r.stderr


def test_tables_for_eigenvalue_input_and_whitening(cli, tmp_path):
    np.save(tmp_path / "e.npy", np.arange(1, 500, dtype=float) ** -1.1)
    r = cli("fit", tmp_path / "e.npy", "--eigenvalues", "--density", "--model", "broken")
    assert r.exit_code == 0, r.stderr
    assert "499 eigenvalues given" in r.stdout and "Density exponent" in r.stdout
    r = cli("whiten", NPY, "-o", tmp_path / "w.npy", "--partition-isotropy")
    assert r.exit_code == 0, r.stderr
    assert "Whitening: zca" in r.stdout and "before" in r.stdout and "after" in r.stdout


def test_collapsed_spectrum_reports_without_a_fit(cli, tmp_path, validate):
    # Rank 2: no power law can be fitted on the default window, but the report (ranks, isotropy)
    # is what a CI check on a collapsed representation needs; fit is null and checks on it fail.
    rng = np.random.default_rng(0)
    X = rng.standard_normal((500, 2)) @ rng.standard_normal((2, 30))
    np.save(tmp_path / "c.npy", X)
    r = cli("fit", tmp_path / "c.npy", "--json")
    assert r.exit_code == 0, r.stderr
    doc = r.json()
    validate(doc)
    assert doc["fit"] is None and doc["fits"] == [] and doc["models"] is None
    assert doc["rank"]["numerical_rank"] == 2
    assert any(w.startswith("no power-law fit: only 2 rank(s)") for w in doc["warnings"])
    r = cli("check", tmp_path / "c.npy", "--require", "fit.alpha > 0.5", "--require", "rank.numerical_rank >= 10")
    assert r.exit_code == 1
    r = cli("fit", tmp_path / "c.npy", "--window", "1:10")
    assert r.exit_code == 2
    r = cli("fit", tmp_path / "c.npy")
    assert r.exit_code == 0 and "no power-law fit" in r.stdout


def test_identical_rows_keep_mean_cosine_at_most_one(cli, tmp_path, validate):
    np.save(tmp_path / "k.npy", np.ones((100, 5)) * 3.0)
    r = cli("isotropy", tmp_path / "k.npy", "--json")
    assert r.exit_code == 0
    doc = r.json()
    validate(doc)
    assert doc["isotropy"]["mean_cosine"] == 1.0


def test_top_k_from_the_command_line(cli, npy, validate):
    X = np.random.default_rng(3).standard_normal((1500, 400)) * np.arange(1, 401) ** -0.5
    path = npy(X)
    r = cli("fit", path, "--window", "11:40", "--top", "45", "--json")
    assert r.exit_code == 0, r.stderr
    doc = r.json()
    validate(doc)
    full = np.linalg.eigvalsh(np.cov(X, rowvar=False))[::-1]
    np.testing.assert_allclose(doc["spectrum"]["eigenvalues"], full[:45], rtol=1e-10)
    assert doc["spectrum"]["top_k"]["k"] == 45 and doc["rank"]["entropy_rank"] is None
    assert doc["rank"]["exactness"]["participation_ratio"] == "exact"
    lo, hi = doc["rank"]["bounds"]["entropy_rank"]
    q = full / full.sum()
    assert lo <= float(np.exp(-np.sum(q * np.log(q)))) <= hi
    table = cli("fit", path, "--window", "11:40", "--top", "45").stdout
    assert "the leading 45 of 400 (block Lanczos" in table and "(bounded)" in table and "> 45" in table
    spec = cli("spectrum", path, "--top", "10", "--json")
    assert spec.exit_code == 0 and len(spec.json()["spectrum"]["eigenvalues"]) == 10
    validate(spec.json())
    bad = cli("fit", path, "--window", "11:40", "--top", "45", "--density")
    assert bad.exit_code == 2 and bad.stdout == ""
    assert bad.stderr.strip() == ("error: --top 45 computes only the leading eigenvalues, but --density needs all "
                                  "of them; drop one or the other.")
    bad = cli("fit", path, "--top", "-3")
    assert bad.exit_code == 2 and "--top -3 must be 0 (every eigenvalue) or a positive number" in bad.stderr


def test_the_report_states_the_block_rows_used(cli, tmp_path):
    """The default of 8192 rows shrinks for wide rows (64 MiB of float64, never below d / 2): the
    report's options say what was used."""
    np.save(tmp_path / "w.npy", np.random.default_rng(0).standard_normal((300, 4096)).astype(np.float32))
    doc = cli("spectrum", tmp_path / "w.npy", "--json").json()
    assert doc["options"]["block_rows"] == 2048
    for asked in ("1000", "8192"):  # an explicit 8192 is honoured, not taken for the default
        doc = cli("spectrum", tmp_path / "w.npy", "--block-rows", asked, "--json").json()
        assert doc["options"]["block_rows"] == int(asked)


def test_the_table_says_the_effective_n_of_weighted_rows_and_the_top_route_bounds(cli, tmp_path):
    w = np.random.default_rng(0).random(4096)
    np.save(tmp_path / "w.npy", w)
    r = cli("fit", NPY, "--weights", tmp_path / "w.npy")
    assert r.exit_code == 0
    n_eff = w.sum() ** 2 / (w * w).sum()
    assert f"weighted: effective n={n_eff:.4g} (Kish), n/d={n_eff / 384:.3g}" in r.stdout
    r = cli("fit", NPY, "--window", "11:30", "--top", "40")
    assert r.exit_code == 0, r.stderr
    assert "at least 40 of 384 (only the leading eigenvalues computed)" in " ".join(r.stdout.split())


@pytest.mark.parametrize("width", [60, 80, 120])
def test_the_fit_report_never_cuts_a_number_at_any_width(width):
    """The fits table splits into further tables (the windows repeated) where the terminal is narrow."""
    import io

    from rich.console import Console

    import spectra_cli as spectra
    from spectra_cli.render.table import print_report

    X = np.load(ROOT / "sample_data" / "minilm_layer5_tokens_4k_f16.npy")
    doc = spectra.fit(X, window=["11:38", "39:100"], ci=True, ci_replicates=20, spikes=True).to_dict()
    out = io.StringIO()
    print_report(doc, Console(file=out, width=width))
    text = out.getvalue()
    assert "…" not in text and max(len(line) for line in text.splitlines()) <= width
    for f in doc["fits"]:
        for value in (f"{f['alpha']:.4f}", f"{f['r2']:.4f}", f"{f['ci']['low']:.4f}..{f['ci']['high']:.4f}",
                      str(f["n_points"])):
            assert value in text, value


@pytest.mark.parametrize("width", [60, 80])
def test_the_check_and_summary_tables_never_cut_a_number(tmp_path, width):
    import io

    from rich.console import Console

    import spectra_cli as spectra
    from spectra_cli.render.screens import print_checks, print_model_summary

    for i in range(3):
        np.save(tmp_path / f"encoder.layer.{i}.attention.output.dense_weight_of_a_long_name.npy",
                powerlaw_matrix(300, 40, 0.6 + 0.2 * i, seed=i))
    res = spectra.batch(str(tmp_path), density=True)
    out = io.StringIO()
    console = Console(file=out, width=width)
    print_model_summary(res.summary(), console)
    chk = spectra.check(tmp_path / "encoder.layer.0.attention.output.dense_weight_of_a_long_name.npy",
                        require=["fit.alpha between 0.123456 9.87654", "rank.participation_ratio >= 1.5"])
    print_checks("x.npy", chk.verdicts, console)
    text = out.getvalue()
    assert "…" not in text and max(len(line) for line in text.splitlines()) <= width
    assert "0.123456" in text and "9.87654" in text
    for row in res.summary()["metrics"]:
        assert row["label"].split()[0] in text


def test_trend_summarises_a_run_of_many_points_and_lists_a_short_one():
    import io

    from rich.console import Console

    from spectra_cli.render.screens import TREND_ROWS, print_trend
    from spectra_cli.run.trend import Point

    many = [Point(f"layer.{i}", float(s), f"x{i}_{s}", {"fit.alpha": 0.5 + i / 40 + s / 1000})
            for i in range(20) for s in (100, 200, 300)]
    assert len(many) > TREND_ROWS
    out = io.StringIO()
    print_trend("run.jsonl", many, ["fit.alpha"], Console(file=out, width=100))
    text = out.getvalue()
    assert "60 points of 20 series" in text and text.count("100..300") == 20
    assert "+0.2" in text and "0.6" in text and "0.8" in text  # layer.0: first, last and the change
    out = io.StringIO()
    print_trend("run.jsonl", many[:6], ["fit.alpha"], Console(file=out, width=100))
    assert "first and last" not in out.getvalue() and out.getvalue().count("layer.") == 6


def test_the_command_list_is_never_cut_short():
    from typer.testing import CliRunner

    r = CliRunner().invoke(app, ["--help"], terminal_width=80, env={"COLUMNS": "80"})
    assert r.exit_code in (0, 2)
    text = r.stdout + (r.stderr if r.stderr_bytes is not None else "")
    assert "..." not in text.split("Commands:")[1]
    assert "exit 0 when all pass, 1 when any" in " ".join(text.split())


def test_long_item_names_break_after_a_dot_not_inside_a_word():
    import io

    from rich.console import Console

    from spectra_cli.render.screens import print_columns, wrap_name

    assert wrap_name("encoder.layer.0.attention.output.dense.weight", 30) == \
        "encoder.layer.0.attention.\noutput.dense.weight"
    assert wrap_name("short.name", 30) == "short.name"  # fits: as it is
    assert wrap_name("a" * 40, 30) == "a" * 40  # nowhere to break: the table folds it
    assert wrap_name("/tmp/models/run_7/model.safetensors", 20) == "/tmp/models/run_7/\nmodel.safetensors"
    names = [f"encoder.layer.{i}.attention.self.query.weight" for i in range(3)]
    out = io.StringIO()
    print_columns(Console(file=out, width=60), "3 items", "item", names,
                  [("alpha (rank fit)", ["0.474", "0.589", "0.662"]), ("participation ratio", ["122.0"] * 3),
                   ("shape", ["384x384"] * 3)])
    lines = out.getvalue().splitlines()
    assert max(len(line) for line in lines) <= 60 and "…" not in out.getvalue()
    for i in range(3):  # each name whole across its lines, broken only after a dot
        at = next(j for j, line in enumerate(lines) if f"encoder.layer.{i}." in line)
        first, second = lines[at].split()[0], lines[at + 1].split()[0]
        assert first.endswith(".") and (first + second).startswith(names[i][:len(first + second)])


def test_in_a_pipe_tables_have_no_trailing_spaces_and_follow_columns_where_set(_command):
    """A log gets lines without trailing spaces; COLUMNS, where exported, is the width (the tables split
    as on a terminal, nothing cut); without it the tables are as wide as they need."""
    from typer.testing import CliRunner

    runner = CliRunner(env={"COLUMNS": None})  # type: ignore[dict-item]
    wide = runner.invoke(app, ["fit", str(NPY)], catch_exceptions=False).stdout
    assert not [line for line in wide.splitlines() if line.endswith(" ")] and "…" not in wide
    assert max(len(line) for line in wide.splitlines()) > 80
    for width in (40, 60, 80):  # (at 40 a long label wraps at its spaces: it was cut)
        text = CliRunner(env={"COLUMNS": str(width)}).invoke(app, ["fit", str(NPY)], catch_exceptions=False).stdout
        lines = text.splitlines()
        assert max(len(line) for line in lines) <= width and not [line for line in lines if line.endswith(" ")]
        assert "…" not in text and "0.6547" in text  # the default fit's alpha, whole


def test_the_sequence_tables_never_cut_a_name_or_a_number_at_80_columns():
    import io

    from rich.console import Console

    import spectra_cli as spectra
    from spectra_cli.render.context_view import print_sequence

    doc = spectra.sequence(ROOT / "sample_data" / "minilm_layer3_context32_128_f16.npy").to_dict()
    out = io.StringIO()
    print_sequence(doc, Console(file=out, width=80))
    text = out.getvalue()
    assert "…" not in text and max(len(line) for line in text.splitlines()) <= 80
    for name in ("block-diagonal control", "shuffled control", "participation", "entropy"):
        assert name in text, name
    assert f"{doc['controls']['block-diagonal']['rank']['participation_ratio']:.4g}" in text
