"""`spectra synth` (known spectra, seeded, atomic) and `--plot` (valid image files). (command line)."""

from __future__ import annotations

import os
import xml.etree.ElementTree as ET

import numpy as np
import pyarrow.parquet as pq
import pytest

from tests.conftest import SAMPLE


def test_synth_powerlaw_npy_has_the_promised_spectrum_and_offset(cli, tmp_path):
    out = tmp_path / "x.npy"
    r = cli("synth", "powerlaw", "--alpha", "1.3", "-n", "40000", "-d", "64", "--seed", "0", "--offset", "50",
            "-o", out)
    assert r.exit_code == 0 and r.stdout == ""
    X = np.load(out)
    assert X.shape == (40000, 64) and X.dtype == np.float32
    lam = np.linalg.eigvalsh(np.cov(X.astype(np.float64), rowvar=False))[::-1]
    np.testing.assert_allclose(lam[:10], np.arange(1, 11) ** -1.3, rtol=0.05)
    assert np.linalg.norm(X.mean(axis=0)) == pytest.approx(50, rel=0.01)


def test_synth_parquet_and_float16(cli, tmp_path):
    out = tmp_path / "x.parquet"
    assert cli("synth", "isotropic", "-n", "3000", "-d", "5", "-o", out).exit_code == 0
    t = pq.read_table(out)
    assert t.num_rows == 3000 and t.schema.field("emb").type.list_size == 5
    out16 = tmp_path / "h.npy"
    assert cli("synth", "isotropic", "-n", "10", "-d", "5", "--dtype", "float16", "-o", out16).exit_code == 0
    assert np.load(out16).dtype == np.float16


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["triangle", "-o", "x.npy"], "error: synth kind 'triangle' is not one of 'powerlaw', 'isotropic', 'cone', "
         "'random-features'.\n"),
        (["powerlaw", "-o", "x.csv"], "error: -o 'x.csv': the output must end in .npy or .parquet.\n"),
        (["powerlaw"], "error: synth needs -o FILE (.npy or .parquet).\n"),
        (["powerlaw", "--alpha", "0", "-o", "x.npy"], "error: --alpha 0.0 must be positive.\n"),
        (["random-features", "--activation", "gelu", "-o", "x.npy"],
         "error: --activation 'gelu' is not one of 'linear', 'quadratic', 'relu', 'tanh'.\n"),
    ],
)
def test_synth_bad_options(cli, tmp_path, monkeypatch, args, message):
    monkeypatch.chdir(tmp_path)
    r = cli("synth", *args)
    assert r.exit_code == 2 and r.stdout == "" and r.stderr == message
    assert os.listdir(tmp_path) == []  # nothing half-written


def test_plot_png_and_svg_are_valid_images(cli, tmp_path):
    pytest.importorskip("matplotlib")
    png = tmp_path / "s.png"
    r = cli("fit", SAMPLE / "minilm_layer5_tokens_4k_f16.npy", "--plot", png, "--window", "11:38",
            "--window", "11:100", "--shuffled-control", "--json")
    assert r.exit_code == 0, r.stderr
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000
    svg = tmp_path / "s.svg"
    assert cli("fit", SAMPLE / "minilm_layer5_tokens_4k_f16.npy", "--plot", svg).exit_code == 0
    assert ET.parse(svg).getroot().tag.endswith("svg")
    assert sorted(os.listdir(tmp_path)) == ["s.png", "s.svg"]  # no temporary files left


def test_plot_bad_target_fails_before_any_work(cli, tmp_path):
    r = cli("fit", SAMPLE / "minilm_layer5_tokens_4k_f16.npy", "--plot", tmp_path / "s.gif")
    assert r.exit_code == 2
    assert r.stderr == f"error: --plot '{tmp_path / 's.gif'}': the file must end in .png, .svg, .pdf.\n"
    for command in ("fit", "sequence", "trend"):  # (one check of the pair, before any reading)
        r = cli(command, tmp_path / "none.npy", "--title", "t")
        assert r.exit_code == 2 and r.stderr == "error: --title names the figure: give --plot FILE too.\n"


def test_plot_without_matplotlib_names_the_extra(cli, tmp_path, without):
    without("matplotlib")
    r = cli("fit", SAMPLE / "minilm_layer5_tokens_4k_f16.npy", "--plot", tmp_path / "s.png")
    assert r.exit_code == 2
    assert r.stderr == ("error: --plot needs matplotlib, the optional extra 'plot': "
                        "pip install 'spectra-geometry[plot]' "
                        "(from a checkout: pip install '.[plot]').\n")


def test_synth_says_what_spectrum_to_expect(cli, tmp_path):
    r = cli("synth", "random-features", "--alpha", "1.31", "--activation", "quadratic", "-n", "500", "-d", "32",
            "-o", tmp_path / "rf.npy")
    assert r.exit_code == 0
    assert r.stderr.splitlines()[-1] == ("expected spectrum: (log(j+1)/j)^1.31: fit it with --model log-corrected "
                                         "--degree 2 (a plain power-law fit gives a lower slope)")
    assert "(log(j+1) / j)^alpha" in cli("synth", "--help").stdout


def test_report_without_matplotlib_names_the_page_and_its_extra(cli, tmp_path, without):
    # it named a --plot flag report does not have, and the 'plot' extra (the page needs 'report')
    r0 = cli("fit", SAMPLE / "minilm_sentence_embeddings_1k.npy", "--json")
    (tmp_path / "r.json").write_text(r0.stdout)
    without("matplotlib")
    r = cli("report", tmp_path / "r.json", "-o", tmp_path / "p.html")
    assert r.exit_code == 2 and not (tmp_path / "p.html").exists()
    assert r.stderr == ("error: the report page needs matplotlib, the optional extra 'report': pip install "
                        "'spectra-geometry[report]' (from a checkout: pip install '.[report]').\n")
