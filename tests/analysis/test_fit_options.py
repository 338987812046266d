"""A fit's options are checked once, by FitOptions.create: the values, the WeightWatcher preset and the keywords that
cannot go together; a batch makes them once for all its items, and each item's fit takes them as they are."""

from __future__ import annotations

import numpy as np
import pytest

import spectra_cli as spectra
from spectra_cli.analysis.fit_options import FitOptions
from spectra_cli.options import Convention
from tests.conftest import powerlaw_matrix


def test_a_batch_of_n_items_checks_its_fit_options_once(tmp_path, monkeypatch):
    for i in range(5):
        np.save(tmp_path / f"m_{i}.npy", powerlaw_matrix(300, 16, 1.0, seed=i))
    made = []
    create = FitOptions.create.__func__  # type: ignore[attr-defined]

    def counted(cls, **kw):
        made.append(kw)
        return create(cls, **kw)

    monkeypatch.setattr(FitOptions, "create", classmethod(counted))
    result = spectra.batch(str(tmp_path), window="2:12", jsonl=str(tmp_path / "r.jsonl"))
    assert len(result.rows()) == 5 and len(made) == 1
    made.clear()
    spectra.fit(str(tmp_path / "m_0.npy"), window="2:12")
    assert len(made) == 1  # (the library's one call)


def test_the_preset_and_the_conflicts_are_checked_in_create():
    ww = FitOptions.create(convention="weightwatcher")
    assert ww.convention is Convention.WEIGHTWATCHER and ww.density and ww.centered is False
    assert FitOptions.create().centered is None and FitOptions.create().convention is Convention.SPECTRA
    cases = [
        (dict(convention="weightwatcher", centered=True), "convention='weightwatcher' sets centered=False"),
        (dict(convention="weightwatcher", density=False), "convention='weightwatcher' sets density=True"),
        (dict(convention="weightwatcher", top=5), "needs the whole matrix and every eigenvalue"),
        (dict(top=5, density=True, isoscore=True), "top=5 computes only the leading eigenvalues, but density, "
                                                   "isoscore need all of them"),
        (dict(population=True, model="broken"), "^population estimates the exponent of a power-law population"),
        (dict(population=True, eigenvalues=True), "needs the number of rows behind the spectrum"),
        (dict(window="9:3"), "window"),
    ]
    for kw, message in cases:
        with pytest.raises(spectra.OptionError, match=message.replace("(", r"\(").replace(")", r"\)")):
            FitOptions.create(**kw)
    with pytest.raises(TypeError, match="unexpected fit keyword 'windw'"):
        FitOptions.create(windw="3:9")


def test_made_options_are_taken_as_they_are_and_never_beside_fit_keywords():
    X = powerlaw_matrix(400, 16, 1.0)
    opts = FitOptions.create(window="2:12", convention="weightwatcher")
    rep = spectra.fit(X, options=opts)
    assert rep.fit.window.k_min == 2 and rep.to_dict()["options"]["centered"] is False  # (the preset's centring)
    assert rep.to_dict() | {"timings": None} == spectra.fit(X, window="2:12", convention="weightwatcher").to_dict() \
        | {"timings": None}
    with pytest.raises(spectra.OptionError, match="^options is a FitOptions made by FitOptions.create, given "
                                                  "without fit keywords"):
        spectra.fit(X, options=opts, window="3:9")
    with pytest.raises(spectra.OptionError, match="^options is a FitOptions"):
        spectra.fit(X, options={"window": "3:9"})
    # what made options cannot go with in this call is checked against it
    with pytest.raises(spectra.OptionError, match=r"^convention='weightwatcher' sets centered=False"):
        spectra.fit(X, options=opts, centered=True)
    with pytest.raises(spectra.OptionError, match="^spikes needs the number of rows behind the spectrum"):
        spectra.fit(np.arange(1, 30.0)[::-1], eigenvalues=True, options=FitOptions.create(spikes=True))
