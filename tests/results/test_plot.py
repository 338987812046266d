"""The figures (spectra_cli.plot): what they draw, checked by their artists, limits and legend
texts, not by pixels; no global state; vector output."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

pytest.importorskip("matplotlib")

from matplotlib.container import ErrorbarContainer  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

import spectra_cli as spectra  # noqa: E402
from spectra_cli import documents, plot  # noqa: E402
from tests.conftest import powerlaw_matrix  # noqa: E402


@pytest.fixture(scope="module")
def layernorm_report():
    """A power law whose last direction is a near-null one (as LayerNorm leaves): 1e-8 below the rest."""
    rng = np.random.default_rng(0)
    lam = np.arange(1, 65, dtype=float) ** -1.0
    lam[-1] = 1e-9  # the near-null direction
    Q, _ = np.linalg.qr(rng.standard_normal((64, 64)))
    X = (rng.standard_normal((4000, 64)) * np.sqrt(lam)) @ Q.T
    return spectra.fit(X, window=["4:20", "10:40"], density=True)


def _new() -> object:
    return Figure().add_subplot()


def test_near_null_point_does_not_stretch_the_axis_and_is_marked_on_the_edge(layernorm_report):
    rep = layernorm_report
    spec = rep.to_dict()["spectrum"]
    lam = np.asarray(spec["eigenvalues"])
    assert spec["near_null"] == 1
    ax = plot.spectrum(rep, ax=_new())
    lo, hi = ax.get_ylim()
    usable = lam[: spec["usable_rank"]]
    assert lo > usable.min() / 10 and lo > lam[-1] * 1e3  # the near-null eigenvalue is far below the axis
    assert hi < usable.max() * 10
    texts = [t.get_text() for t in ax.get_legend().get_texts()]
    assert any("below the axis" in t and "near-null" in t for t in texts)
    marks = [ln for ln in ax.get_lines() if ln.get_marker() == "v"]
    assert len(marks) == 1 and len(marks[0].get_xdata()) == lam.size - spec["usable_rank"]


def test_each_fit_is_labelled_with_alpha_and_its_uncertainty_over_its_window(layernorm_report):
    ax = plot.spectrum(layernorm_report, ax=_new())
    texts = [t.get_text() for t in ax.get_legend().get_texts()]
    for f in layernorm_report.to_dict()["fits"]:
        k1, k2 = f["window"]
        label = next(t for t in texts if f"ranks {k1}–{k2}" in t)
        assert f"α = {f['alpha']:.3f} ± {f['se']:.3f} (SE)" in label  # the sampling standard error
    # the fitted lines span exactly their windows; the windows are brackets on the top edge
    fitted = [ln for ln in ax.get_lines() if ln.get_label().startswith("α")]
    assert [(ln.get_xdata()[0], ln.get_xdata()[-1]) for ln in fitted] == [(4, 20), (10, 40)]
    assert len({ln.get_color() for ln in fitted}) == 2 and len({str(ln.get_linestyle()) for ln in fitted}) == 2
    assert not [p for p in ax.patches]  # no shaded spans to overlap


def test_fit_line_is_the_fits_own_prediction(layernorm_report):
    from spectra_cli.analysis.powerlaw import Window, fit_model

    lam = np.asarray(layernorm_report.spectrum.eigenvalues)
    for model in ("power-law", "broken", "log-corrected"):
        f = fit_model(lam, Window(4, 40, "user", "test"), model=model, degree=2)
        j = np.geomspace(4, 40, 17)
        np.testing.assert_allclose(documents.predict(f.to_dict(), j), f.predict(j), rtol=1e-12)


def test_bootstrap_interval_and_broken_law_in_the_labels():
    X = powerlaw_matrix(3000, 60, 1.0, seed=4)
    rep = spectra.fit(X, window="5:30", ci=True, ci_replicates=40, model="broken")
    ax = plot.spectrum(rep, ax=_new())
    texts = [t.get_text() for t in ax.get_legend().get_texts()]
    f = rep.to_dict()["fits"][0]
    label = next(t for t in texts if "ranks 5–30" in t)
    assert (f"α₁ = {f['alpha']:.3f} ± {f['stderr']:.3f} (LS SE), α₂ = {f['alpha_2']:.3f},\n"
            f"crossover j = {f['crossover']:.0f}") in label
    diamonds = [ln for ln in ax.get_lines() if ln.get_marker() == "D"]
    assert len(diamonds) == 1 and diamonds[0].get_xdata()[0] == pytest.approx(f["crossover"])
    rep2 = spectra.fit(X, window="5:30", ci=True, ci_replicates=40)
    texts = [t.get_text() for t in plot.spectrum(rep2, ax=_new()).get_legend().get_texts()]
    ci = rep2.to_dict()["fit"]["ci"]
    assert any(f"95% CI {ci['low']:.3f}–{ci['high']:.3f}" in t for t in texts)


def test_shuffled_control_is_grey_and_solid_and_the_title_names_the_data(tmp_path):
    X = powerlaw_matrix(2000, 40, 1.0, seed=5)
    np.save(tmp_path / "acts.npy", X)
    rep = spectra.fit(str(tmp_path / "acts.npy"), shuffled_control=True)
    ax = plot.spectrum(rep, ax=_new(), title=True)
    control = next(ln for ln in ax.get_lines() if ln.get_label() == "shuffled control")
    assert control.get_color() == plot.CONTROL_COLOR and control.get_linestyle() == "-"
    assert ax.get_title(loc="left") == "acts.npy, 2,000 × 40"


def test_density_panel_histogram_xmin_and_tail(layernorm_report):
    rep = layernorm_report
    ax = plot.density(rep, ax=_new())
    (stairs,) = [p for p in ax.patches]
    values, edges, _ = stairs.get_data()
    area = np.nansum(values * np.diff(edges))
    assert area == pytest.approx(1.0, rel=1e-9)  # a density of the usable eigenvalues
    d = rep.to_dict()["density"]
    xmin_line = next(ln for ln in ax.get_lines() if ln.get_label().startswith("x_min"))
    assert xmin_line.get_xdata()[0] == pytest.approx(d["xmin"])
    tail = next(ln for ln in ax.get_lines() if ln.get_label() == "fitted tail")
    n = rep.to_dict()["spectrum"]["usable_rank"]
    assert tail.get_ydata()[0] == pytest.approx(d["n_tail"] / n * (d["alpha"] - 1) / d["xmin"])
    assert ax.get_xscale() == ax.get_yscale() == "log"
    text = " ".join(t.get_text() for t in ax.texts)
    assert f"KS distance = {d['ks_distance']:.3f}" in text and f"α = {d['alpha']:.2f}" in text


def test_density_without_a_density_fit_says_what_to_run():
    rep = spectra.fit(powerlaw_matrix(500, 20, 1.0, seed=6))
    with pytest.raises(spectra.OptionError, match="run it with --density"):
        plot.density(rep)


def test_report_and_its_dict_draw_the_same(layernorm_report):
    a = plot.spectrum(layernorm_report, ax=_new())
    b = plot.spectrum(layernorm_report.to_dict(), ax=_new())
    assert a.get_ylim() == b.get_ylim()
    assert [t.get_text() for t in a.get_legend().get_texts()] == [t.get_text() for t in b.get_legend().get_texts()]


def test_trend_has_error_bars_from_each_report(tmp_path):
    from spectra_cli.run.trend import trend

    for step in (1, 2, 3):
        np.save(tmp_path / f"step_{step}.npy", powerlaw_matrix(800, 30, 0.8 + 0.1 * step, seed=step))
    out = tmp_path / "r.jsonl"
    spectra.batch(str(tmp_path / "step_*.npy"), jsonl=str(out), window="3:20")
    res = trend(str(out), metric=["fit.alpha", "rank.participation_ratio"])
    ax = plot.trend(res, "fit.alpha", ax=_new())
    (bars,) = [c for c in ax.containers if isinstance(c, ErrorbarContainer)]
    p = res.points[0]
    lo, hi = p.intervals["fit.alpha"]
    assert hi - lo == pytest.approx(2 * next(iter(res.document["series"]))["points"][0]["intervals"]["fit.alpha"][1]
                                    - 2 * p.values["fit.alpha"])
    assert bars.has_yerr
    pr_lo, pr_hi = p.intervals["rank.participation_ratio"]  # ± the rank's standard error (rank.se)
    assert pr_hi - p.values["rank.participation_ratio"] == pytest.approx(p.values["rank.participation_ratio"] - pr_lo)
    k90 = trend(str(out), metric=["rank.k90"])
    assert not [c for c in plot.trend(k90, "rank.k90", ax=_new()).containers
                if isinstance(c, ErrorbarContainer)]  # no interval: no bars


def test_sequence_figure_has_one_legend_per_panel_and_the_window_fit(tmp_path):
    from tests.conftest import SAMPLE

    rep = spectra.sequence(str(SAMPLE / "minilm_layer3_context32_128_f16.npy"), window="11:100",
                           positions=":8", controls=["shuffled"])
    fig = plot.sequence_figure(rep)
    axes = fig.axes
    # the context panel's legend under the figure (inside, it covered the curves); the others' in their panels
    assert len(axes) == 4 and all(ax.get_legend() is not None for i, ax in enumerate(axes) if i != 1)
    assert axes[1].get_legend() is None and len(fig.legends) == 1
    assert fig.legends[0].get_title().get_text() == "context spectrum (upper right)"
    assert not any(getattr(ax, "_twinned_axes", None) and len(ax._twinned_axes.get_siblings(ax)) > 1 for ax in axes)
    context = axes[1]
    fitted = next(ln for ln in context.get_lines() if "ranks 11–100" in ln.get_label())
    assert fitted.get_xdata()[0] == 11 and fitted.get_xdata()[-1] == 100


@pytest.mark.slow
def test_no_global_state_and_no_pyplot(tmp_path):
    code = (
        "import numpy as np, matplotlib, sys\n"
        "before = dict(dict.items(matplotlib.rcParams))  # (reading 'backend' itself would import pyplot)\n"
        "import spectra_cli as s\n"
        "rng = np.random.default_rng(0)\n"
        "X = rng.standard_normal((500, 30)) * np.arange(1, 31) ** -0.5\n"
        "rep = s.fit(X, window='2:20', density=True)\n"
        f"s.plot.save(s.plot.report_figure(rep), {str(tmp_path / 'f.svg')!r})\n"
        "assert 'matplotlib.pyplot' not in sys.modules\n"
        "assert dict(dict.items(matplotlib.rcParams)) == before\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr


@pytest.mark.parametrize("ext,magic", [(".svg", b"<?xml"), (".pdf", b"%PDF"), (".png", b"\x89PNG")])
def test_save_writes_vector_formats(tmp_path, layernorm_report, ext, magic):
    path = tmp_path / f"fig{ext}"
    fig = Figure(figsize=(plot.COLUMN_WIDTH, 2.4))
    plot.spectrum(layernorm_report, ax=fig.add_subplot())
    assert plot.save(fig, path) == str(path)
    data = path.read_bytes()
    assert data.startswith(magic)
    if ext == ".svg":
        assert b"<path" in data and b"<image" not in data  # vector, not an embedded bitmap
    assert not [p for p in tmp_path.iterdir() if p.name != path.name]  # no temporary left


def test_figure_sizes_read_at_one_column(layernorm_report):
    fig = plot.report_figure(layernorm_report.to_dict() | {"density": None})
    assert fig.get_size_inches()[0] == pytest.approx(plot.COLUMN_WIDTH)
    assert len(plot.report_figure(layernorm_report).axes) == 3  # with the density panel beside


def test_layer_names_drop_the_common_prefix_and_sort_in_network_order():
    items = [f"m.safetensors::enc.layer.{i}.w" for i in (10, 2, 1)]
    assert sorted(items, key=documents.natural_key) == [items[2], items[1], items[0]]
    assert documents.layer_names(sorted(items, key=documents.natural_key)) == ["enc.layer.1.w", "enc.layer.2.w",
                                                                             "enc.layer.10.w"]


def test_layer_names_keep_the_modules_name_whole_and_the_page_says_what_was_dropped():
    from spectra_cli.documents import dropped_text

    items = [f"runs/moments/encoder.layer.{i}.npz" for i in range(6)]
    assert documents.layer_names(items) == [f"encoder.layer.{i}" for i in range(6)]
    assert dropped_text(items) == 'names without their common "runs/moments/" and ".npz"'
    assert documents.layer_names(["a.npz", "b.npz"]) == ["a", "b"] and dropped_text(["x_1", "x_2"]) == ""
    assert documents.layer_names(["m/.npz", "m/x.npz"]) == [".npz", "x.npz"]  # a name is never cut to nothing


def test_not_a_report_is_a_clear_error():
    with pytest.raises(spectra.OptionError, match="needs a spectra report"):
        plot.spectrum(42)
    with pytest.raises(spectra.InputError, match="^the report: source must be an object"):
        plot.spectrum({"schema": "spectra.report/1"})
    with pytest.raises(spectra.InputError, match="^the report: spectrum.eigenvalues must be a list of numbers"):
        plot.spectrum({"schema": "spectra.report/1", "source": {}, "spectrum": {}})


def test_a_trend_of_many_series_names_the_mean_and_those_that_moved_most():
    from spectra_cli.run.trend import Point

    pts = []
    for layer in range(20):
        for step in (1.0, 2.0, 3.0):
            moved = 0.5 * step if layer in (4, 9) else 0.01 * step
            pts.append(Point(f"layer{layer}", step, f"layer{layer}_{step}", {"fit.alpha": 1.0 + layer / 100 + moved}))
    ax = plot.trend(pts, "fit.alpha", ax=_new())
    names = [t.get_text() for t in ax.get_legend().get_texts()]
    assert names[0] == "mean of 20 series" and len(names) == 1 + plot.MOVERS_NAMED
    assert {"layer4", "layer9"} <= set(names[1:3])


def _inside(fig) -> list[str]:
    """What of ``fig``, as drawn, leaves the canvas: the figure's tight box (every drawn artist, the
    texts included; ticks outside the view are not drawn) against its size, with a pixel of slack."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    canvas = FigureCanvasAgg(fig)
    canvas.draw()
    tight = fig.get_tightbbox(canvas.get_renderer())  # inches
    w, h = fig.get_size_inches()
    slack = 1.0 / fig.dpi
    return [side for side, bad in (("left", tight.x0 < -slack), ("bottom", tight.y0 < -slack),
                                   ("right", tight.x1 > w + slack), ("top", tight.y1 > h + slack)) if bad]


@pytest.mark.slow
def test_every_figure_keeps_its_text_on_the_canvas(tmp_path):
    """Every kind: the fit with a long --ci label (3.4 in wide), the broken law, the density panel, the
    sequence figure, a trend of many series with a title, a layers figure."""
    from spectra_cli.run.trend import Point

    X = np.load("sample_data/minilm_layer5_tokens_4k_f16.npy")
    ci = spectra.fit(X[:800], window=["11:256"], ci=True, ci_replicates=50)  # its interval excludes alpha: 2 lines
    broken = spectra.fit(X, window="11:100", model="broken", shuffled_control=True, density=True)
    seq = spectra.sequence("sample_data/minilm_layer3_context32_128_f16.npy", window="11:100")
    pts = [Point(f"encoder.layer.{i}.attention.output.dense", float(s), f"x{i}_{s}",
                 {"fit.alpha": 0.5 + i / 40 + s / 1000}) for i in range(24) for s in (100, 200, 300)]
    docs = [dict(broken.to_dict(), source={**broken.to_dict()["source"], "path": f"model.safetensors::layer.{i}.w"})
            for i in range(6)]
    figures = {
        "fit --ci": plot.report_figure(ci),
        "fit --ci --title": plot.report_figure(ci, title="a title much longer than the figure is wide, " * 2),
        "broken + density": plot.report_figure(broken),
        "density": plot.density_figure(broken),
        "sequence": plot.sequence_figure(seq),
        "trend": plot.trend_figure(pts, ["fit.alpha"], title="run 7"),
        "layers": plot.layers(docs, "fit.alpha").figure,
    }
    for name, fig in figures.items():
        assert not _inside(fig), (name, _inside(fig))
    assert figures["fit --ci"].get_figwidth() == pytest.approx(3.4, abs=0.05)


def test_a_title_set_on_the_callers_axes_is_never_overwritten(layernorm_report):
    ax = _new()
    ax.set_title("mine")
    plot.spectrum(layernorm_report, ax=ax)  # the default titles only a figure of its own
    assert ax.get_title() == "mine" and ax.get_title(loc="left") == ""
    ax = _new()
    plot.spectrum(layernorm_report, ax=ax)
    ax.set_title("mine")  # afterwards: no collision with one of ours
    assert ax.get_title(loc="left") == ""
    ax = _new()
    ax.set_title("mine", loc="left")
    plot.spectrum(layernorm_report, ax=ax, title=True)  # True: still not over an existing one
    assert ax.get_title(loc="left") == "mine"
    assert plot.spectrum(layernorm_report, ax=_new(), title="given").get_title(loc="left") == "given"
    assert plot.spectrum(layernorm_report).get_title(loc="left")  # its own figure: titled


def test_reports_near_float64s_limits_build_their_figures_without_a_warning(layernorm_report):
    # a report written elsewhere may hold numbers near float64's limits: matplotlib's interim autoscaled log limits
    # overflowed while a figure was built (numpy's warning in a notebook's output), and a sequence's eigenvalue / sum
    # underflowed to a zero limit ("Attempt to set non-positive ylim", on the CLI's stderr too); drawing is
    # matplotlib's own, under the guard plot.save and the page use
    import json
    import warnings

    from tests.conftest import SAMPLE

    docs = []
    for eig in ([1e300, 1.0, 0.5, 0.25], [1.0, 0.5, 1e-300, 1e-310]):
        doc = layernorm_report.to_dict()
        doc["spectrum"]["eigenvalues"] = eig
        doc["spectrum"]["usable_rank"] = len(eig)
        doc["density"]["n_tail"] = min(doc["density"]["n_tail"], len(eig))
        docs.append(doc)
    seq = spectra.sequence(str(SAMPLE / "minilm_layer3_context32_128_f16.npy"), window="11:100",
                           positions=":8").to_dict()
    far_fit, far_values = json.loads(json.dumps(seq)), json.loads(json.dumps(seq))
    far_fit["context"]["fit"]["intercept"] = 700.0
    far_values["context"]["spectrum"]["eigenvalues"][:3] = [1e300, 1e-300, 1e-300]
    builds = [lambda d=d: plot.spectrum(d, ax=_new()) for d in docs] + [lambda d=d: plot.density(d, ax=_new())
                                                                      for d in docs]
    builds += [lambda d=d: plot.sequence_context(d, ax=_new()) for d in (far_fit, far_values)]
    for build in builds:
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            ax = build()
            low, high = ax.get_ylim()
            assert 0 < low < high < np.inf
            with np.errstate(over="ignore", under="ignore"):  # (as plot.save and the page draw)
                ax.figure.canvas.draw()
