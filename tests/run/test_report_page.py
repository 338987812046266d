"""spectra_cli.report: one self-contained HTML page for a checkpoint, a run or a report; what it
holds, that it loads nothing from the network, and the page as a real browser draws it."""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
from html.parser import HTMLParser

import numpy as np
import pytest

pytest.importorskip("matplotlib")
pytest.importorskip("jinja2")

import spectra_cli as spectra  # noqa: E402
from tests.conftest import powerlaw_matrix  # noqa: E402


class Resources(HTMLParser):
    """Every tag, and every attribute that can make a browser fetch something."""

    FETCHING = {"src", "href", "srcset", "poster", "data", "action", "formaction", "background", "xlink:href"}

    def __init__(self) -> None:
        super().__init__()
        self.tags: list[str] = []
        self.urls: list[str] = []
        self.images: list[str] = []

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        for k, v in attrs:
            if k in self.FETCHING and v is not None:
                self.urls.append(v)
                if tag == "img":
                    self.images.append(v)


@pytest.fixture(scope="module")
def model_jsonl(tmp_path_factory):
    safetensors_numpy = pytest.importorskip("safetensors.numpy")
    d = tmp_path_factory.mktemp("ckpt")
    rng = np.random.default_rng(0)
    tensors = {f"encoder.layer.{i}.attention.{k}.weight": (rng.standard_normal((64, 48)) / (1 + i)).astype(np.float32)
               for i in (0, 1, 2, 10) for k in ("query", "value")}
    tensors["encoder.layer.0.attention.query.bias"] = np.zeros(64, np.float32)
    tensors["embeddings.<script>alert(1)</script>.weight"] = rng.standard_normal((70, 48)).astype(np.float32)
    safetensors_numpy.save_file(tensors, d / "model.safetensors")
    out = d / "w.jsonl"
    spectra.batch(str(d / "model.safetensors"), jsonl=str(out), density=True, centered=False, window="3:20")
    return out


@pytest.fixture(scope="module")
def model_page(model_jsonl):
    out = model_jsonl.parent / "model.html"
    return spectra.report(str(model_jsonl), out=str(out))


def test_model_page_has_summary_layers_in_order_table_and_worst_esd(model_jsonl, model_page):
    page = model_page
    assert page.kind == "model" and page.items == 9 and page.path == str(model_jsonl.parent / "model.html")
    html = open(page.path).read()
    assert html == page.html and html.startswith("<!DOCTYPE html>")
    assert "spectra's metrics below are of each layer's uncentred rows, X<sup>T</sup>X / n" in html  # centred=False
    summary = spectra.batch(str(model_jsonl)).summary()
    for verdict, n in summary["verdicts"].items():
        assert (f"<b>{n}</b>{verdict}" in html) == (n > 0)  # a badge for each verdict a layer has
    assert f"<b>{summary['skipped']}</b>skipped" in html
    # the sortable table: one row per layer, in network order (layer.2 before layer.10)
    body = html.split('<table class="sortable">')[1].split("</table>")[0]
    rows = body.split("<tbody>")[1].count("<tr>")
    assert rows == 9
    names = [line.split('title="')[1].split('"')[0] for line in body.splitlines() if 'class="name" title=' in line]
    assert names.index(next(n for n in names if "layer.2.attention.query" in n)) < \
        names.index(next(n for n in names if "layer.10.attention.query" in n))
    # one figure of the metrics per layer and the ESD of each worst layer
    parser = Resources()
    parser.feed(html)
    assert len(parser.images) == 1 + len(summary["worst"]) == page.figures
    for src in parser.images:
        assert src.startswith("data:image/svg+xml;base64,")
        svg = base64.b64decode(src.split(",", 1)[1])
        assert svg.startswith(b"<?xml") and b"<svg" in svg
    assert "ESD (density fit)" in html


def test_page_loads_nothing_from_the_network_and_escapes_names(model_page):
    page = model_page
    parser = Resources()
    parser.feed(page.html)
    assert parser.urls and all(u.startswith("data:") for u in parser.urls)
    assert not {"link", "iframe", "object", "embed", "base"} & set(parser.tags)
    assert "http://" not in page.html and "https://" not in page.html and "//cdn" not in page.html
    assert "default-src 'none'" in page.html  # the page's own policy forbids any fetch
    assert "<script>alert(1)</script>" not in page.html and "&lt;script&gt;alert(1)&lt;/script&gt;" in page.html
    assert page.html.count("<script>") == 1  # the table-sorting script, inline


def test_run_from_several_results_files_takes_the_step_from_their_paths(tmp_path):
    for step, a in ((100, 0.8), (200, 1.0), (300, 1.3)):
        d = tmp_path / f"step_{step}"
        d.mkdir()
        np.save(d / "acts.npy", powerlaw_matrix(1500, 40, a, seed=step))
        spectra.batch(str(d / "acts.npy"), jsonl=str(d / "results.jsonl"), window="3:30")
    files = sorted(str(p) for p in tmp_path.glob("step_*/results.jsonl"))
    page = spectra.report(files, out=str(tmp_path / "run.html"))
    # a figure per metric of the registry's layer view that the lines hold (fit.alpha, the ranks, ...)
    from spectra_cli import registry
    from spectra_cli.documents import lookup

    lines = [json.loads(open(f).readline()) for f in files]
    drawn = [m.path for m in registry.view("layer") if any(isinstance(lookup(d, m.path), int | float) for d in lines)]
    assert {"fit.alpha", "rank.participation_ratio", "rank.entropy_rank"} <= set(drawn)
    assert page.kind == "run" and page.figures == len(drawn)
    html = page.html
    assert "100, 200, 300" in html and "Layers whose metrics moved most" in html
    first, last = (json.loads(open(f).readline())["fit"]["alpha"] for f in (files[0], files[-1]))
    assert f"{last - first:+.4f}" in html  # the change of alpha (its largest move: here the first step to the last)
    # alpha moved from 0.8 to 1.3: far beyond sampling noise (Benjamini-Hochberg over the changes with an SE)
    row = next(r for r in html.split("<tr>") if f"{last - first:+.4f}" in r)
    assert '<td class="name">beyond</td>' in row


def test_run_in_one_results_file_of_checkpoints(tmp_path):
    for step in (1, 2):
        np.save(tmp_path / f"ckpt-{step}.npy", powerlaw_matrix(800, 30, 0.7 + 0.2 * step, seed=step))
    spectra.batch(str(tmp_path / "ckpt-*.npy"), jsonl=str(tmp_path / "r.jsonl"), window="3:20")
    assert spectra.report(str(tmp_path / "r.jsonl")).kind == "run"
    assert spectra.report(str(tmp_path / "r.jsonl"), kind="model").kind == "model"


def test_single_report_page_has_its_figure_and_labelled_uncertainties(tmp_path):
    rep = spectra.fit(powerlaw_matrix(3000, 60, 1.0, seed=1), window="5:30", ci=True, ci_replicates=30)
    (tmp_path / "fit.json").write_text(json.dumps(rep.to_dict()))
    page = spectra.report(str(tmp_path / "fit.json"))
    assert page.kind == "report" and page.figures == 1
    assert "standard error (least squares)" in page.html and "95 % interval (bootstrap)" in page.html
    ci = rep.to_dict()["fit"]["ci"]
    assert f"{ci['low']:.4f}–{ci['high']:.4f}" in page.html


@pytest.mark.parametrize("case,message", [
    ("out_is_input", "is the input"),
    ("not_html", "the page must end in .html"),
    ("mixed", "not both in one page"),
    ("matrix", "reads reports (.json, from --json) and batch results (.jsonl)"),
    ("not_report", "is not a spectra report"),
    ("only_skips", "holds no successful report"),
    ("bad_kind", "kind='x' must be one of auto, model, run, report"),
])
def test_bad_input_is_one_clear_error(model_jsonl, tmp_path, case, message):
    other = tmp_path / "x.json"
    other.write_text(json.dumps({"schema": "something/1"}))
    link = tmp_path / "link.html"
    link.symlink_to(model_jsonl)
    one = tmp_path / "one.json"
    one.write_text(next(line for line in open(model_jsonl) if "spectra.report/1" in line))
    skips = tmp_path / "s.jsonl"
    skips.write_text("".join(line for line in open(model_jsonl) if "batch-skipped" in line))
    calls = {
        "out_is_input": lambda: spectra.report(str(model_jsonl), out=str(link)),
        "not_html": lambda: spectra.report(str(model_jsonl), out=str(tmp_path / "p.txt")),
        "mixed": lambda: spectra.report([str(model_jsonl), str(one)]),
        "matrix": lambda: spectra.report(str(tmp_path / "a.npy")),
        "not_report": lambda: spectra.report(str(other)),
        "only_skips": lambda: spectra.report(str(skips)),
        "bad_kind": lambda: spectra.report(str(model_jsonl), kind="x"),
    }
    with pytest.raises(spectra.SpectraError, match=message.replace("(", r"\(").replace(")", r"\)")
                       .replace(".", r"\.")):
        calls[case]()
    assert not (tmp_path / "p.txt").exists()


def test_an_existing_page_is_replaced_but_not_another_file(model_jsonl, tmp_path):
    target = tmp_path / "page.html"
    spectra.report(str(model_jsonl), out=str(target), worst=0)
    spectra.report(str(model_jsonl), out=str(target), worst=0)  # an earlier page: replaced
    notes = tmp_path / "notes.html"
    notes.write_text("my notes")
    with pytest.raises(spectra.OutputError, match="is not a .html file"):
        spectra.report(str(model_jsonl), out=str(notes), worst=0)
    assert notes.read_text() == "my notes"


def _browser() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome", "chrome"):
        path = shutil.which(name)
        if path:
            return path
    return None


@pytest.mark.slow
def test_page_in_a_real_browser_draws_its_figures(model_page, tmp_path):
    browser = _browser()
    if browser is None:
        pytest.skip("no headless Chromium here (.ci/run installs Debian's chromium; apt-get install chromium)")
    PIL = pytest.importorskip("PIL.Image")
    from pathlib import Path

    page = Path(model_page.path)
    # the browser's own account of the images: every figure decoded, at its size
    probe = tmp_path / "probe.html"
    probe.write_text(page.read_text().replace(
        "</body>", "<script>addEventListener('load', function () { var i = document.images, ok = 0;"
        " for (var k = 0; k < i.length; k++) if (i[k].complete && i[k].naturalWidth > 100) ok++;"
        " document.body.setAttribute('data-figures', ok + '/' + i.length); });</script></body>"))
    # (the background-networking flags: this machine's closed network refuses Chromium's own connections)
    args = [browser, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run",
            "--disable-quic", "--disable-background-networking", "--disable-component-update", "--disable-sync",
            f"--user-data-dir={tmp_path / 'profile'}", "--virtual-time-budget=3000"]
    env = {**os.environ, "HOME": str(tmp_path)}
    dom = subprocess.run([*args, "--dump-dom", probe.as_uri()], capture_output=True, text=True, timeout=60, env=env)
    assert dom.returncode == 0, dom.stderr[-2000:]
    n = page.read_text().count("<img ")
    assert f'data-figures="{n}/{n}"' in dom.stdout
    shot = tmp_path / "shot.png"
    r = subprocess.run([*args, f"--screenshot={shot}", "--window-size=1280,1600", page.as_uri()],
                       capture_output=True, text=True, timeout=60, env=env)
    assert r.returncode == 0 and shot.exists(), r.stderr[-2000:]
    img = np.asarray(PIL.open(shot).convert("RGB"), dtype=int)
    assert img.shape[:2] == (1600, 1280)
    ink = (img.sum(axis=2) < 600).mean()
    blue = (np.abs(img - np.array([0, 114, 178])).sum(axis=2) < 60).mean()  # the figures' data colour
    assert 0.01 < ink < 0.6 and blue > 1e-4, (ink, blue)


MUTATIONS = [
    ("spectrum.eigenvalues", ["a"], "spectrum.eigenvalues.0 must be a number"),
    ("spectrum.eigenvalues", [[1, 2], [3, 4]], "spectrum.eigenvalues.0 must be a number"),
    ("spectrum.eigenvalues", [1e308] * 5, "spectrum.eigenvalues.0 must be a number in -1e+300..1e+300"),
    ("spectrum.usable_rank", "x", "spectrum.usable_rank must be a whole number"),
    ("spectrum.usable_rank", 10**6, "spectrum.usable_rank must be at most the"),
    ("fits.0.window", [5], "fits.0.window must be two ranks [k1, k2], 1 <= k1 <= k2"),
    ("fits.0.window", [0, 10], "fits.0.window must be two ranks"),
    ("fits.0.intercept", "x", "fits.0.intercept must be a number"),
    ("fits.0.model", "cubic", "fits.0.model must be one of power-law, log-corrected, broken"),
    ("fits.0.ci", {"low": "a", "high": 1}, "fits.0.ci.low must be a number"),
    ("fits", ["x", 1], "fits.0 must be an object"),
    ("fit.alpha", 1e308, "fit.alpha must lie in -1e+06..1e+06"),
    ("density.xmin", 0, "density.xmin must lie in"),
    ("density.alpha", "x", "density.alpha must be a number"),
    ("local_slope.ranks", [1, 2], "local_slope must have as many alpha_local values as ranks"),
    ("source.shape", ["a", "b"], "source.shape must be a list of sizes"),
    ("weightwatcher.verdict", [1, 2], "weightwatcher.verdict must be text"),
    ("weightwatcher.log_norm", 1e308, "weightwatcher.log_norm must lie in -1e+100..1e+100"),
    ("warnings", "abc", "warnings must be a list of sentences"),
]


def _set(doc, field, value):
    *head, leaf = field.split(".")
    cur = doc
    for k in head:
        cur = cur[int(k)] if isinstance(cur, list) else cur[k]
    if isinstance(cur, list):
        cur[int(leaf)] = value
    else:
        cur[leaf] = value


@pytest.mark.parametrize("field,value,message", MUTATIONS)
def test_a_corrupt_field_is_one_error_naming_it(model_jsonl, tmp_path, field, value, message):
    lines = open(model_jsonl).read().splitlines()
    i = next(k for k, line in enumerate(lines) if "spectra.report/1" in line)
    doc = json.loads(lines[i])
    _set(doc, field, value)
    lines[i] = json.dumps(doc)
    bad = tmp_path / "bad.jsonl"
    bad.write_text("\n".join(lines) + "\n")
    with pytest.raises(spectra.InputError) as exc:
        spectra.report(str(bad), out=str(tmp_path / "p.html"))
    assert str(exc.value).startswith(f"{bad} line {i + 1}: {message}")
    assert not (tmp_path / "p.html").exists()
    from spectra_cli import plot

    with pytest.raises(spectra.InputError, match="^the report: "):
        plot.report_figure(doc)


def test_repeated_inputs_and_kinds_that_do_not_fit_are_refused(model_jsonl, tmp_path):
    with pytest.raises(spectra.OptionError, match="is given twice"):
        spectra.report([str(model_jsonl), str(model_jsonl)])
    one = tmp_path / "one.json"
    one.write_text(next(line for line in open(model_jsonl) if "spectra.report/1" in line))
    for kind in ("run", "model"):
        with pytest.raises(spectra.OptionError, match=f"kind='{kind}' shows batch results"):
            spectra.report(str(one), kind=kind)
    with pytest.raises(spectra.OptionError, match="kind='report' shows JSON reports"):
        spectra.report(str(model_jsonl), kind="report")
    with pytest.raises(spectra.InputError, match="holds no report with a step"):
        spectra.report(str(model_jsonl), kind="run")  # model.safetensors: no step in its name
    np.save(tmp_path / "ckpt-7.npy", powerlaw_matrix(300, 20, 1.0, seed=3))
    spectra.batch(str(tmp_path / "ckpt-7.npy"), jsonl=str(tmp_path / "c.jsonl"), window="3:10")
    with pytest.raises(spectra.InputError, match="a run needs reports of at least 2 steps; these have 1"):
        spectra.report(str(tmp_path / "c.jsonl"), kind="run")
    with pytest.raises(spectra.InputError, match="step_regex found no step"):
        spectra.report(str(model_jsonl), step_regex=r"step(\d+)")


def test_a_repeated_item_shows_its_last_line_with_a_note(model_jsonl, tmp_path):
    lines = open(model_jsonl).read().splitlines()
    dup = tmp_path / "dup.jsonl"
    dup.write_text("\n".join(lines + [lines[-1]]) + "\n")
    page = spectra.report(str(dup), worst=0)
    assert page.notes == (f"{dup}: 1 item(s) appear on more than one line; the last line of each is shown (two "
                          "batches into one file? overwrite=True on the batch starts the file afresh)",)
    assert page.items == 9


def test_a_page_of_activation_dumps_speaks_of_items_and_a_checkpoint_of_layers(model_page, tmp_path):
    """Files are items in the order of their names (no weighting by parameters); a checkpoint's tensors are
    layers in network order."""
    for i, name in enumerate(("queries", "keys", "values")):  # no digits: not the steps of a run
        np.save(tmp_path / f"{name}.npy", powerlaw_matrix(400, 30, 0.8 + 0.1 * i, seed=i))
    spectra.batch(str(tmp_path), jsonl=str(tmp_path / "r.jsonl"), window="3:12")
    html = spectra.report(str(tmp_path / "r.jsonl"), out=str(tmp_path / "p.html")).html
    assert "<b>3</b>items analysed" in html and "Per item, in the order of their names" in html
    assert "weighted by parameters" not in html and "Item table" in html
    layers = model_page.html
    assert "layers analysed" in layers and "Per layer, in network order" in layers
    assert "weighted by parameters" in layers


def test_the_page_rounds_the_summary_as_the_terminal_does(model_jsonl, model_page):
    """Each metric's mean and median, the same text on the page as in `spectra batch --summary`."""
    import io
    import re

    from rich.console import Console

    from spectra_cli.render.screens import print_model_summary

    summary = spectra.batch(str(model_jsonl)).summary()
    out = io.StringIO()
    print_model_summary(summary, Console(file=out, width=200))
    terminal = out.getvalue()
    html = open(model_page.path).read()
    for m in summary["metrics"]:
        cells = r"</td><td>\d+</td><td>([^<]*)</td><td>([^<]*)</td>"
        row = re.search(rf'title="{re.escape(m["field"])}">[^<]*' + cells, html)
        assert row is not None, m["field"]
        mean, median = row.groups()
        line = next(x for x in terminal.splitlines() if x.strip().startswith(m["label"]))
        assert f" {mean} " in f"{line} " and f" {median} " in f"{line} ", (m["field"], mean, median, line)


def test_a_run_shows_each_layers_largest_move_not_only_its_ends(tmp_path):
    """alpha rises from 0.8 to 1.3 at step 300 and comes back: the ends agree, the move is still shown, from the
    step of one extreme to the other's, beyond noise (its p-value times the 10 step pairs)."""
    files = []
    for step, a in ((100, 0.8), (200, 0.8), (300, 1.3), (400, 0.8), (500, 0.8)):
        d = tmp_path / f"step_{step}"
        d.mkdir()
        np.save(d / "acts.npy", powerlaw_matrix(1500, 40, a, seed=step))
        spectra.batch(str(d / "acts.npy"), jsonl=str(d / "results.jsonl"), window="3:30")
        files.append(str(d / "results.jsonl"))
    html = spectra.report(files, out=str(tmp_path / "run.html")).html
    alphas = {s: json.loads(open(f).readline())["fit"]["alpha"] for s, f in zip((100, 200, 300, 400, 500), files,
                                                                                   strict=True)}
    top = max(alphas, key=alphas.get)
    low = min(alphas, key=alphas.get)
    assert top == 300
    table = html.split("Layers whose metrics moved most")[1].split("</table>")[0]
    row = next(r for r in table.split("<tr>") if ">alpha" in r)
    a, b = (low, top) if low < top else (top, low)
    assert f"(step {a})" in row and f"(step {b})" in row
    assert f"{alphas[b] - alphas[a]:+.4f}" in row and ">beyond<" in row
    assert "mean cosine" in html and "top-PC share" in html  # the signs of collapse, on the run page too


def test_a_run_keeps_layers_apart_that_share_a_file_name(tmp_path):
    """runs/step_N/encoder.layer.K/acts.npy: each layer its own series at every step, not one series of both."""
    files = []
    for step in (100, 200):
        for layer, a in ((0, 0.8), (4, 1.3)):
            d = tmp_path / f"step_{step}" / f"encoder.layer.{layer}"
            d.mkdir(parents=True)
            np.save(d / "acts.npy", powerlaw_matrix(1500, 40, a, seed=step + layer))
        spectra.batch(str(tmp_path / f"step_{step}"), jsonl=str(tmp_path / f"step_{step}" / "r.jsonl"), window="3:30")
        files.append(str(tmp_path / f"step_{step}" / "r.jsonl"))
    result = spectra.trend(files, metric="fit.alpha")
    assert sorted({p.series for p in result.points}) == ["encoder.layer.0/acts.npy", "encoder.layer.4/acts.npy"]
    assert "2 layers over 2 steps" in spectra.report(files, out=str(tmp_path / "run.html")).html


def test_a_layer_keeps_its_series_at_a_step_where_its_sibling_failed(tmp_path):
    files = []
    for step in (100, 200):
        for layer in (0, 4):
            d = tmp_path / f"step_{step}" / f"encoder.layer.{layer}"
            d.mkdir(parents=True)
            np.save(d / "acts.npy", powerlaw_matrix(1500, 40, 1.0, seed=step + layer))
        out = tmp_path / f"step_{step}" / "r.jsonl"
        spectra.batch(str(tmp_path / f"step_{step}"), jsonl=str(out), window="3:30")
        if step == 200:  # layer 4 failed at this step
            lines = out.read_text().splitlines()
            bad = next(i for i, x in enumerate(lines) if "encoder.layer.4" in x)
            item = json.loads(lines[bad])["item"]
            lines[bad] = json.dumps({"schema": "spectra.batch-error/1", "item": item, "fingerprint": "0" * 16,
                                     "error": "boom"})
            out.write_text("\n".join(lines) + "\n")
        files.append(str(out))
    series = {(p.series, p.step) for p in spectra.trend(files, metric="fit.alpha").points}
    assert series == {("encoder.layer.0/acts.npy", 100), ("encoder.layer.4/acts.npy", 100),
                      ("encoder.layer.0/acts.npy", 200)}


def test_a_run_made_with_different_options_says_so(tmp_path):
    files = []
    for step, window in ((100, "3:30"), (200, "5:30")):
        d = tmp_path / f"step_{step}"
        d.mkdir()
        np.save(d / "acts.npy", powerlaw_matrix(1500, 40, 1.0, seed=step))
        spectra.batch(str(d / "acts.npy"), jsonl=str(d / "r.jsonl"), window=window)
        files.append(str(d / "r.jsonl"))
    notes = spectra.trend(files, metric="fit.alpha").notes
    assert any(n.startswith("the reports were made with different options (window ['3:30'] (ranks [[3, 30]]) vs "
                            "['5:30'] (ranks [[5, 30]])): a change between steps may be the options'") for n in notes)
    assert not any("different options" in n for n in spectra.trend(files[:1], metric="fit.alpha").notes)
