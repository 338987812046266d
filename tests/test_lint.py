"""The test command also runs ruff and mypy on the package (the house style: docs/development.md); they start in the
background when the session starts (tests/lint_plugin.py)."""

from __future__ import annotations

import importlib.util

import pytest

from tests.lint_plugin import static_check_result


@pytest.mark.parametrize("name", ["ruff", "mypy"])
def test_static_checks(name):
    if importlib.util.find_spec(name) is None:
        pytest.fail(f"{name} is not installed: install the test extras (pip install '.[test]')")
    code, out = static_check_result(name)
    assert code == 0, out
