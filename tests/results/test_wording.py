"""Words a reader meets on the screens: which alpha to quote when another law fits better, one orientation of a
matrix's shape, and axis labels that stay inside their panels."""

from __future__ import annotations

import numpy as np
import pytest

import spectra_cli as spectra
from tests.conftest import SAMPLE


def test_the_model_comparison_says_which_alpha_to_quote(cli):
    r = cli("fit", SAMPLE / "minilm_layer5_tokens_4k_f16.npy", "--window", "11:100")
    assert r.exit_code == 0
    text = " ".join(r.stdout.split())
    assert ("best by BIC: broken (the alpha above is the power law's; the broken law describes this window "
            "better: quote its alpha with its name, or fit with --model broken to make it the headline)") in text
    r = cli("fit", SAMPLE / "minilm_layer5_tokens_4k_f16.npy", "--window", "11:100", "--model", "broken")
    assert "best by BIC: broken (the alpha above)" in " ".join(r.stdout.split())


def test_a_batch_shows_shapes_as_stored_rows_first(cli, tmp_path):
    from safetensors.numpy import save_file

    rng = np.random.default_rng(0)
    save_file({"a.weight": rng.standard_normal((96, 32)).astype(np.float32),
               "b.weight": rng.standard_normal((32, 96)).astype(np.float32)}, str(tmp_path / "m.safetensors"))
    r = cli("batch", tmp_path / "m.safetensors", "--convention", "weightwatcher")
    assert r.exit_code == 0, r.stderr
    assert "96 × 32" in r.stdout and "32 × 96" in r.stdout and "96x32" not in r.stdout


def test_a_long_metric_name_is_wrapped_to_its_panel():
    pytest.importorskip("matplotlib")
    from matplotlib.figure import Figure

    docs = [spectra.fit(np.random.default_rng(i).standard_normal((300, 20)), window="2:10").to_dict()
            | {"item": f"l{i}"} for i in range(3)]
    ax = Figure(figsize=(7.2, 1.2)).add_subplot()
    spectra.plot.layers(docs, "rank.participation_ratio", ax=ax, label="spikes over the Marchenko-Pastur edge")
    lines = ax.get_ylabel().split("\n")
    assert len(lines) >= 2 and " ".join(lines) == "spikes over the Marchenko-Pastur edge"
