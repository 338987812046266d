"""The documentation: a README that fits a screen, every page in the site's navigation, an API page that
covers the package's names, no project jargon, and every example of the README and of the site run as
written (console blocks through the installed ``spectra``, bash blocks in this process, Python blocks in one
namespace per page, in order), on small files of the names the pages use (tests/docs/examples.py)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.docs.examples import NOT_RUN, SETUP, SMALLER, WRITTEN, Folder, Shell, blocks, pages

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
JARGON = ("SPEC.md", "seed 00", "shared/data", "the notebook's", "the seed's", "SPEC's", "STYLE.md", "seeds/")
#: Blocks the tests execute; toml and yaml are the configuration and the workflow of guides/ci.md (run there);
#: a block without a language is text (a tree, an output).
RUN, CONFIG, TEXT = ("console", "bash", "python"), ("toml", "yaml"), ("",)
#: Every page with an example, README.md first.
EXECUTED = [p for p in pages() if any(b.lang in RUN + CONFIG for b in blocks(p))]


def test_the_readme_fits_a_screen_and_keeps_the_quick_start() -> None:
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) <= 200
    assert "python3 -m pip install . && spectra fit sample_data/minilm_layer5_tokens_4k_f16.npy" in readme
    assert "python3 -m pip install '.[test]' && python3 -m pytest" in readme
    for link in re.findall(r"\]\(((?:docs/)[^)#]+)\)", readme):
        assert (ROOT / link).is_file(), link


def test_no_page_speaks_project_jargon() -> None:
    """No page, module or test cites a document a reader does not have: the papers and the docs pages instead."""
    for page in [ROOT / "README.md", ROOT / "CHANGELOG.md", *DOCS.rglob("*.md"), *(ROOT / "spectra_cli").rglob("*.py"),
                 *(ROOT / "tests").rglob("*.py"), *(ROOT / "bench").rglob("*.py")]:
        if page == Path(__file__).resolve():
            continue
        text = page.read_text()
        # (the benchmarks read the shared data from its folder, which they name)
        for word in JARGON if page.parent.name != "bench" else [w for w in JARGON if w != "shared/data"]:
            assert word not in text, f"{page.relative_to(ROOT)} says {word!r}"


def test_every_page_is_in_the_navigation_and_every_entry_exists() -> None:
    nav = set(re.findall(r":\s*([\w/.-]+\.md)\s*$", (ROOT / "mkdocs.yml").read_text(), re.M))
    pages = {str(p.relative_to(DOCS)) for p in DOCS.rglob("*.md")}
    assert pages == nav


def test_the_api_page_documents_every_public_name() -> None:
    import spectra_cli

    api = (DOCS / "reference" / "api.md").read_text()
    shown = set(re.findall(r"^::: spectra_cli\.[\w.]*?\.?(\w+)$", api, re.M))
    assert set(spectra_cli.__all__) - {"__version__"} <= shown


def examples_text(page: str) -> str:
    return "\n".join(b.code for b in blocks(page))


def test_every_block_is_a_kind_that_runs_and_every_not_run_line_is_on_its_page() -> None:
    for page in pages():
        for b in blocks(page):
            assert b.lang in RUN + CONFIG + TEXT, f"{page}:{b.line}: a ```{b.lang} block the tests do not run"
            assert b.lang not in CONFIG or page == "guides/ci.md", f"{page}:{b.line}"
    assert set(SETUP) <= set(EXECUTED) and len(EXECUTED) >= 10
    for entry in NOT_RUN:
        assert entry.start in examples_text(entry.page) and entry.said in examples_text(entry.page), entry
    for page, written, _ in SMALLER:
        assert written in examples_text(page)


@pytest.fixture
def spectra_here(_command: Any) -> Any:
    """``spectra ARGS`` in this process (Click's runner): exit code, stdout, stderr."""
    from typer.testing import CliRunner

    from spectra_cli.cli import app

    runner = CliRunner()

    def invoke(argv: list[str], stdin: str | None) -> tuple[int, str, str]:
        r = runner.invoke(app, argv[1:], input=stdin)
        return r.exit_code, r.stdout, r.stderr

    return invoke


@pytest.mark.slow
@pytest.mark.parametrize("page", EXECUTED)
def test_the_examples_run_as_written(page: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                     spectra_here: Any) -> None:
    """Every line of every example, in order, in one scratch folder: the files a page names are made there
    first (small), and its Python starts from the names it takes as given (a reader's X, model, loader).
    What cannot run here is in NOT_RUN, each line with why, and must be met."""
    import yaml

    (tmp_path / "sample_data").symlink_to(ROOT / "sample_data")
    monkeypatch.chdir(tmp_path)
    scope: dict[str, object] = {"__name__": "docs"}
    if page in SETUP:
        scope.update(SETUP[page](Folder(tmp_path, spectra_here)))
    shell = Shell(page, tmp_path, spectra_here)
    for b in blocks(page):
        if b.lang == "console":
            for line in b.code.splitlines():
                if line.startswith("$ "):
                    shell.run(line[2:], b.code, installed=True)
        elif b.lang == "bash":
            for line in b.code.splitlines():
                shell.run(line, b.code)
        elif b.lang == "python":
            shell.python(b, scope)
        elif b.lang == "toml":
            (tmp_path / "spectra.toml").write_text(b.code)  # the configuration the workflow names
        elif b.lang == "yaml":  # a workflow: its run steps are command lines
            lines = re.findall(r"^\s*- run: (.*)$", b.code, re.M)
            steps = yaml.safe_load(b.code)["jobs"]["spectra"]["steps"]
            assert [s["run"] for s in steps if "run" in s] == [line.split("  #")[0].strip() for line in lines]
            for line in lines:
                shell.run(line, b.code)
    assert shell.ran or shell.met  # (development.md: every line is a maintainer's, none runs here)
    assert sorted(e.start for e in set(shell.met)) == sorted(e.start for e in NOT_RUN if e.page == page)
    assert set(shell.smaller) == {w for p, w, _ in SMALLER if p == page}
    for name in WRITTEN.get(page, ()):
        p = tmp_path / name
        assert p.exists() and (p.is_dir() and any(p.iterdir()) or p.stat().st_size > 0), name
    if page in ("tutorial.md", "README.md"):
        assert (tmp_path / ("layers.html" if page == "tutorial.md" else "run.html")).stat().st_size > 10_000
    if page == "tutorial.md":
        assert len((tmp_path / "layers.jsonl").read_text().splitlines()) == 2
        assert sorted(p.name for p in (tmp_path / "moments" / "step_0").iterdir()) == [
            "encoder.layer.0.npz", "encoder.layer.1.npz"]


def test_the_cli_reference_shows_the_examples_as_typed() -> None:
    """Click's unwrapped ``\\b`` paragraphs become code blocks for mkdocs-click (a glob is not emphasis);
    the terminal's help keeps them as they are."""
    import typer.main

    from spectra_cli.cli.app import app
    from spectra_cli.cli.reference import command

    assert "```\nspectra batch runs/*/step_*.npy" in (command.commands["batch"].help or "")
    for name, cmd in command.commands.items():
        assert "\x08" not in (cmd.help or ""), name
        assert not any("|" in (getattr(p, "help", None) or "") for p in cmd.params), name  # a table cell's end
    assert "\x08" in (typer.main.get_command(app).commands["batch"].help or "")


@pytest.mark.slow
def test_the_site_builds_strict_and_its_cli_reference_has_every_option(tmp_path: Path) -> None:
    """``mkdocs build --strict`` (warnings are errors; offline), and the generated command-line reference
    names every command and every option of the Typer app."""
    pytest.importorskip("mkdocs")
    import typer.main

    from spectra_cli.cli.app import app

    site = tmp_path / "site"
    r = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--quiet", "-d", str(site)], cwd=ROOT,
                       capture_output=True, text=True, env={**os.environ, "NO_MKDOCS_2_WARNING": "1"}, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    html = (site / "reference" / "cli" / "index.html").read_text()
    for name, cmd in typer.main.get_command(app).commands.items():
        assert f'id="{name}"' in html, name
        for p in cmd.params:
            for flag in p.opts:
                if flag.startswith("-"):
                    assert flag in html, f"{name} {flag}"
    api = (site / "reference" / "api" / "index.html").read_text()
    assert "spectra_cli.run.matrix.fit" in api and "spikes" in html
    from tests.docs.test_rendering import assert_the_built_site_renders

    assert_the_built_site_renders(site)
