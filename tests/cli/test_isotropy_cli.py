"""Isotropy against published reference numbers (arrays rebuilt from the constructions that printed them)
and brute force. (command line)."""

from __future__ import annotations

import numpy as np
import pytest


def test_isotropy_cli_json(cli, validate):
    from tests.conftest import SAMPLE

    r = cli("isotropy", SAMPLE / "minilm_layer5_tokens_4k.parquet", "--isoscore", "--json")
    assert r.exit_code == 0, r.stderr
    doc = r.json()
    validate(doc)
    assert doc["command"] == "isotropy" and 0 <= doc["isotropy"]["partition_isotropy"] <= 1
    assert doc["isotropy"]["isoscore"] is not None
    r = cli("fit", SAMPLE / "minilm_layer5_tokens_4k_f16.npy", "--json")
    iso = r.json()["isotropy"]
    assert iso["mean_cosine"] is not None and iso["partition_isotropy"] is None  # summary only by default


def test_bad_scale(cli):
    from tests.conftest import SAMPLE

    r = cli("isotropy", SAMPLE / "minilm_layer5_tokens_4k_f16.npy", "--scale", "unit")
    assert r.exit_code == 2 and r.stderr == "error: --scale 'unit' is not one of 'seed', 'none'.\n"


def test_seed000_from_scores_at_t1(cli, tmp_path, validate):
    np.save(tmp_path / "E.npy", np.array([[0.0, 0.0], [4.0, 0.0], [0.0, 4.0]]))
    np.save(tmp_path / "z.npy", np.array([0.0, -np.log(2), -np.log(2)]))
    doc = cli("spectrum", tmp_path / "E.npy", "--logits", tmp_path / "z.npy", "--temperature", "1", "--json").json()
    validate(doc)
    np.testing.assert_allclose(doc["spectrum"]["eigenvalues"], [4.0, 2.0], rtol=1e-12)
    assert doc["options"]["weights"]["temperature"] == 1.0
    # the same points with weights 0.8 / 0.1 / 0.1 give [[1.44, -0.16], [-0.16, 1.44]]: eigenvalues 1.6, 1.28
    np.save(tmp_path / "w.npy", np.array([0.8, 0.1, 0.1]))
    doc = cli("spectrum", tmp_path / "E.npy", "--weights", tmp_path / "w.npy", "--json").json()
    np.testing.assert_allclose(doc["spectrum"]["eigenvalues"], [1.6, 1.28], rtol=1e-12)


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda p: np.save(p, np.zeros(5)), "error: logits file {p} has 5 scores but the input has 3 rows; "
         "one score per row is required.\n"),
        (lambda p: np.save(p, np.array([0.0, np.nan, 1.0])),
         "error: logits file {p} has a non-finite score at row 1.\n"),
    ],
)
def test_bad_logits(cli, tmp_path, make, message):
    np.save(tmp_path / "E.npy", np.eye(3))
    make(tmp_path / "z.npy")
    r = cli("spectrum", tmp_path / "E.npy", "--logits", tmp_path / "z.npy")
    assert r.exit_code == 2 and r.stderr == message.format(p=tmp_path / "z.npy")


def test_bad_temperature(cli, tmp_path):
    np.save(tmp_path / "E.npy", np.eye(3))
    np.save(tmp_path / "z.npy", np.zeros(3))
    r = cli("spectrum", tmp_path / "E.npy", "--logits", tmp_path / "z.npy", "--temperature", "0")
    assert r.exit_code == 2 and r.stderr == "error: --temperature 0.0 must be a positive number.\n"
