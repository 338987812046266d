"""The documentation: a README that fits a screen, every page in the site's navigation, an API page that
covers the package's names, no project jargon, and the tutorial's and the home page's examples run as
written (console blocks through the installed ``spectra``, Python blocks in one namespace, in order)."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
#: The pages whose every example is executed here, in order, in one folder.
EXECUTED = ("index.md", "tutorial.md", "figures.md")
JARGON = ("SPEC.md", "seed 00", "shared/data", "the notebook's", "the seed's")


def _blocks(text: str) -> list[tuple[str, str]]:
    return [(m.group(1), m.group(2)) for m in re.finditer(r"^```(\w+)\n(.*?)^```", text, re.S | re.M)]


def test_the_readme_fits_a_screen_and_keeps_the_quick_start() -> None:
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) <= 200
    assert "python3 -m pip install . && spectra fit sample_data/minilm_layer5_tokens_4k_f16.npy" in readme
    assert "python3 -m pip install '.[test]' && python3 -m pytest" in readme
    for link in re.findall(r"\]\(((?:docs/)[^)#]+)\)", readme):
        assert (ROOT / link).is_file(), link


def test_no_page_speaks_project_jargon() -> None:
    for page in [ROOT / "README.md", *DOCS.rglob("*.md")]:
        text = page.read_text()
        for word in JARGON:
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


def _run_console(block: str, cwd: Path) -> None:
    spectra = Path(sys.executable).with_name("spectra")
    for line in block.splitlines():
        if not line.startswith("$ "):
            continue
        command = line[2:]
        assert command.startswith("spectra "), command
        out = None
        if " > " in command:
            command, target = command.rsplit(" > ", 1)
            out = cwd / target.strip()
        args = [str(spectra), *shlex.split(command)[1:]]
        env = {**os.environ, "COLUMNS": "100"}
        r = subprocess.run(args, cwd=cwd, capture_output=True, text=True, env=env, timeout=300)
        assert r.returncode == 0, f"{command}\n{r.stderr[-2000:]}"
        if out is not None:
            out.write_text(r.stdout)


@pytest.mark.parametrize("page", EXECUTED)
def test_the_examples_run_as_written(page: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "sample_data").symlink_to(ROOT / "sample_data")
    monkeypatch.chdir(tmp_path)
    scope: dict[str, object] = {"__name__": "docs"}
    ran = 0
    for lang, block in _blocks((DOCS / page).read_text()):
        if lang == "console":
            _run_console(block, tmp_path)
        elif lang == "python":
            exec(compile(block, f"docs/{page}", "exec"), scope)
        else:
            continue
        ran += 1
    assert ran
    if page == "tutorial.md":
        assert (tmp_path / "layers.html").stat().st_size > 10_000
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


def test_the_readmes_ten_jobs_run_on_files_of_the_names_they_use(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """Every `spectra` command of the README's jobs block, in order, on small files named as the README
    names them (the capture line needs a model folder: the tutorial runs capture instead)."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq
    from typer.testing import CliRunner

    safetensors_numpy = pytest.importorskip("safetensors.numpy")
    from spectra_cli.cli import app
    from tests.conftest import powerlaw_matrix

    monkeypatch.chdir(tmp_path)
    acts = powerlaw_matrix(3000, 64, 0.9, seed=1)
    np.save("acts.npy", acts)
    np.save("emb.npy", acts[:, :48])
    np.save("ctx.npy", powerlaw_matrix(64 * 16, 48, 0.9, seed=2).reshape(64, 16, 48))
    for step in (100, 200):
        Path(f"runs/step_{step}").mkdir(parents=True)
        np.save(f"runs/step_{step}/acts.npy", powerlaw_matrix(2000, 64, 0.8 + step / 1000, seed=step))
    pq.write_table(pa.table({f"f{i}": acts[:1000, i] for i in range(32)}), "shard_000.parquet")
    rng = np.random.default_rng(0)
    safetensors_numpy.save_file({f"layer.{i}.weight": rng.standard_normal((96, 64)).astype(np.float32)
                                 for i in range(3)}, "model.safetensors")
    runner = CliRunner()

    def spectra(*args: str) -> None:
        r = runner.invoke(app, list(args))
        assert r.exit_code in (0, 1), (args, r.exit_code, r.output[-1500:])  # 1: a check that fails is an answer

    for name, data in (("last_good.json", acts[:1500]), ("base.json", acts[:1500]), ("finetuned.json", acts[1500:])):
        np.save("tmp.npy", data)
        Path(name).write_text(runner.invoke(app, ["fit", "tmp.npy", "--json"]).stdout)
    readme = (ROOT / "README.md").read_text()
    block = readme.split("## The jobs, in ten commands")[1].split("```bash\n")[1].split("```")[0]
    ran = 0
    for line in block.splitlines():
        line = line.split("  #")[0].strip()
        if not line.startswith("spectra "):
            continue
        for command in line.split(" && "):
            command = command.split(" | ")[0]
            args = shlex.split(command)[1:]
            if args[0] == "capture":
                continue
            spectra(*args)
            ran += 1
    assert ran >= 12 and Path("run.html").stat().st_size > 10_000 and Path("white.npy").exists()
