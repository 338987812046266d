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


def test_the_fields_an_option_adds_are_the_registrys_and_check_names_the_option(tmp_path):
    """The registry's ``added_by`` is true (each option puts its fields in the report, which holds none of
    them without it), and a check on one of them in a report made without the option names it, as a
    keyword in Python and as a flag on the command line."""
    import warnings

    import numpy as np

    import spectra_cli as spectra
    from spectra_cli import registry
    from spectra_cli.errors import param
    from spectra_cli.results import scalar_fields
    from tests.conftest import powerlaw_matrix

    path = tmp_path / "x.npy"
    np.save(path, powerlaw_matrix(1200, 48, 1.0, seed=0))

    def entries(doc: dict) -> set[str]:
        return {m.path for k in scalar_fields(doc) if (m := registry.find(k)) is not None}

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        plain = entries(spectra.fit(path, window="3:30").to_dict())
        groups = {m.added_by for m in registry.METRICS if m.added_by}
        assert len(groups) >= 6
        said: set = set()
        for group in groups:
            added = {m.path for m in registry.METRICS if m.added_by == group}
            assert not plain & added, group
            for name, value in group:
                extra = {"ci_replicates": 20} if name == "ci" else {}
                assert entries(spectra.fit(path, window="3:30", **{name: value}, **extra).to_dict()) & added, name
            field = sorted(p for p in added if "*" not in p)[0]
            try:
                result = spectra.check(path, require=[f"{field} >= 0"], window="3:30")
            except OptionError as exc:  # not in the report, or null there: the check names what adds it
                wanted = OptionError(" or ".join(param(n, v) for n, v in group))
                if "is null" in str(exc):  # the report's options say it was made without it (population, ci)
                    said.add(group)
                    assert f"{field!r} is null: the report was made without {wanted}, which computes" in str(exc)
                    assert f"without {wanted.for_cli()}, which computes" in exc.for_cli()
                else:
                    assert f"({field} is in the report with {wanted})" in str(exc)
                    assert f"({field} is in the report with {wanted.for_cli()})" in exc.for_cli()
            else:  # a section present as null (density, weightwatcher): a failed check
                assert not result.passed, field
        assert (("population", True),) in said
