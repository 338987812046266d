"""spectra sequence on the command line: JSON validated by its schema, tables, plot, flags, errors."""

from __future__ import annotations

import numpy as np
import pytest

from tests.conftest import SAMPLE

CTX = SAMPLE / "minilm_layer3_context32_128_f16.npy"


@pytest.fixture(scope="module")
def sequence_schema():
    import jsonschema

    from spectra_cli.results import report_schema

    schema = report_schema("sequence")
    jsonschema.validators.validator_for(schema).check_schema(schema)
    return jsonschema.validators.validator_for(schema)(schema)


def test_sequence_json_is_valid_and_matches_the_library(cli, sequence_schema):
    import spectra_cli as spectra
    from tests.conftest import _shortened

    r = cli("sequence", CTX, "--positions", "1:9", "--window", "20:100", "--json")
    assert r.exit_code == 0, r.stderr
    doc = r.json()
    sequence_schema.validate(_shortened(doc))
    assert doc["source"]["positions_used"] == list(range(1, 9)) and doc["options"]["window"] == ["20:100"]
    lib = spectra.sequence(CTX, positions="1:9", window="20:100").to_dict()
    assert doc["lag_energy"] == lib["lag_energy"] and doc["context"]["fit"] == lib["context"]["fit"]
    assert doc["lag_energy"]["data"][0] > doc["lag_energy"]["shuffled"][0]


def test_sequence_tables_plot_and_regrouped_tokens(cli, tmp_path):
    pytest.importorskip("matplotlib")
    r = cli("sequence", CTX, "--positions", ":4", "--controls", "shuffled", "--project", "16", "--plot",
            tmp_path / "s.png")
    assert r.exit_code == 0, r.stderr
    assert "Per position" in r.stdout and "Lag energy" in r.stdout and "shuffled control" in r.stdout
    assert (tmp_path / "s.png").read_bytes()[:4] == b"\x89PNG"
    np.save(tmp_path / "tokens.npy", np.load(CTX).reshape(-1, 384))
    a = cli("sequence", tmp_path / "tokens.npy", "--positions-per-window", "32", "--positions", ":6", "--controls",
            "none", "--json")
    b = cli("sequence", CTX, "--positions", ":6", "--controls", "none", "--json")
    assert a.exit_code == 0, a.stderr
    assert a.json()["context"]["spectrum"]["eigenvalues"] == b.json()["context"]["spectrum"]["eigenvalues"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--controls", "fake"], "error: --controls 'fake' is not one of 'block-diagonal', 'shuffled'."),
        (["--positions", "5:1"], "error: --positions '5:1' selects no position of 32."),
        (["--project", "500"], "error: --project 500 exceeds the 384 features of a token."),
    ],
)
def test_sequence_errors(cli, args, message):
    r = cli("sequence", CTX, *args)
    assert r.exit_code == 2 and r.stdout == "" and r.stderr == message + "\n"


def test_a_matrix_is_not_a_sequence(cli, tmp_path):
    np.save(tmp_path / "m.npy", np.zeros((10, 4)))
    r = cli("sequence", tmp_path / "m.npy")
    assert r.exit_code == 2 and "apply to sequence dumps" in r.stderr or "is not a sequence dump" in r.stderr
    r = cli("fit", CTX, "--pool", "mean", "--json")
    assert r.exit_code == 0 and r.json()["spectrum"]["n_samples"] == 128
