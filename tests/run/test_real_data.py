"""sample_data (real MiniLM geometry) against golden values computed by plain numpy.

tests/golden/golden.json comes from tests/golden/make_golden.py (np.cov, eigvalsh,
polyfit, svd): an independent computation, compared with tolerances.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from spectra_cli.run import matrix as api
from tests.conftest import SAMPLE

GOLDEN = json.loads((Path(__file__).parents[1] / "golden" / "golden.json").read_text())


@pytest.mark.parametrize("name", sorted(GOLDEN))
def test_fit_matches_numpy_golden(name):
    g = GOLDEN[name]
    rep = api.fit(str(SAMPLE / name), block_rows=1000)
    np.testing.assert_allclose(rep.spectrum.eigenvalues[:5], g["eigenvalues_top5"], rtol=1e-9)
    assert rep.fit.alpha == pytest.approx(g["alpha"], rel=1e-7)
    assert rep.fit.intercept == pytest.approx(g["intercept"], rel=1e-7)
    for key in ("participation_ratio", "entropy_rank", "stable_rank", "rankme"):
        assert getattr(rep.rank, key) == pytest.approx(g[key], rel=1e-7), key
    assert rep.rank.k90 == g["k90"] and rep.rank.k99 == g["k99"]
    assert rep.spectrum.numerical_rank == g["numerical_rank"]


def test_parquet_copy_gives_the_same_report_as_npy():
    a = api.fit(str(SAMPLE / "minilm_layer5_tokens_4k_f16.npy")).to_dict()
    b = api.fit(str(SAMPLE / "minilm_layer5_tokens_4k.parquet")).to_dict()
    np.testing.assert_allclose(a["spectrum"]["eigenvalues"], b["spectrum"]["eigenvalues"], rtol=1e-12)
    assert a["fit"]["alpha"] == pytest.approx(b["fit"]["alpha"], rel=1e-12)


def test_layernorm_activations_report_cleanly():
    # Layer activations pass through LayerNorm: one near-null direction (float16 rounding keeps it
    # just above zero). The report must stay finite and count it; it warns only where the direction
    # changes a number (a window that reaches it, the density fit), once.
    path = str(SAMPLE / "minilm_layer5_tokens_4k_f16.npy")
    doc = api.fit(path).to_dict()
    text = json.dumps(doc, allow_nan=False)
    assert "Infinity" not in text and "NaN" not in text
    assert doc["spectrum"]["near_null"] == 1 and doc["spectrum"]["usable_rank"] == 383
    assert not any("almost no variance" in w for w in doc["warnings"])  # the default window 11..38 never reaches it
    assert not any("almost no variance" in w for w in api.spectrum(path).to_dict()["warnings"])
    reach = api.fit(path, window=["11:38", "100:384"], density=True).to_dict()["warnings"]
    near = [w for w in reach if "almost no variance" in w]
    assert near == ["the last 1 resolved eigenvalue(s) lie more than 10,000 times below rank 383: directions with "
                    "almost no variance (e.g. LayerNorm's, kept above zero by float16 rounding); spectra leaves them "
                    "out of the fit over ranks 100..383 and the density fit, so there is nothing to change"]


def test_sentence_embeddings_have_exactly_null_directions():
    doc = api.fit(str(SAMPLE / "minilm_sentence_embeddings_1k.npy")).to_dict()
    sp = doc["spectrum"]
    assert sp["numerical_rank"] < sp["n_features"]
    assert any("at or below the numerical floor" in w for w in doc["warnings"])
    assert doc["fit"]["window"][1] <= sp["usable_rank"]
