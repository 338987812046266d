"""check: exit codes, specs, baselines, config, JSON valid against the report schema."""

from __future__ import annotations

import pytest

from spectra_cli.errors import OptionError
from spectra_cli.run.check import parse_max_change, parse_require
from tests.conftest import SAMPLE

NPY = SAMPLE / "minilm_layer5_tokens_4k_f16.npy"














@pytest.mark.parametrize(
    ("text", "value", "passed"),
    [("a >= 1", 1.0, True), ("a > 1", 1.0, False), ("a <= 2", 3.0, False), ("a < 2", 1.0, True),
     ("a != 1", 1.0, False), ("a == 0.5 +- 0.1", 0.55, True), ("a == 0.5 ± 0.01", 0.55, False),
     ("a == 0.5 tol 0.1", 0.45, True), ("a between 1 2", 1.5, True), ("a between 1 and 2", 2.5, False),
     ("a >= 1e-3", 0.01, True)],
)
def test_every_operator(text, value, passed):
    from spectra_cli.run.check import evaluate

    assert evaluate({"a": value}, [parse_require(text)])[0].passed is passed


def test_null_value_fails_and_relative_change():
    from spectra_cli.run.check import evaluate

    assert evaluate({"a": None}, [parse_require("a > 0")])[0].passed is False
    v = evaluate({"a": 105.0}, [parse_max_change("a=5%")], {"a": 100.0})[0]
    assert v.passed is True and v.baseline == 100.0
    assert evaluate({"a": 106.0}, [parse_max_change("a=5%")], {"a": 100.0})[0].passed is False
    with pytest.raises(OptionError, match="lower bound 2 is above the upper bound 1"):
        parse_require("a between 2 1")
