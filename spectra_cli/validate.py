"""The validators every argument of the library and every flag of the CLI goes through, at the
bottom floor (they import only :mod:`spectra_cli.errors` and numpy): one message style, modelled
on scikit-learn's ``check_scalar`` — the parameter (``ddof=-1`` in Python, ``--ddof -1`` on the
command line), then what it must be."""

from __future__ import annotations

import math
import re
from typing import Any

import numpy as np

from spectra_cli.errors import OptionError, describe_choices, param

#: The arithmetic of the products: float64 (exact) or float32 (fast, higher floor), accumulated in float64.
PRECISIONS = ("float64", "float32")


#: The most digits a whole number written in an option may have (int64's range; Python refuses to convert a
#: string of more than 4,300 digits, and no rank, row or position needs more than this).
MAX_DIGITS = 18


def int_of(name: str, digits: str, text: str) -> int:
    """The integer ``digits`` (a regex group of ``text``, the value of option ``name``), refused when longer than
    :data:`MAX_DIGITS` digits (the value shown cut to 40 characters)."""
    if len(digits.lstrip("+-")) > MAX_DIGITS:
        shown = text if len(text) <= 40 else text[:37] + "..."
        raise OptionError(f"{param(name, shown)} holds a number of {len(digits.lstrip('+-')):,} digits; at most "
                          f"{MAX_DIGITS} are allowed.")
    return int(digits)


def product_dtype(precision: str) -> np.dtype:
    """The dtype of the products for a precision: where ``precision`` becomes a dtype, the one place."""
    return np.dtype(np.float32 if check_choice("precision", precision, PRECISIONS) == "float32" else np.float64)


def check_int(name: str, value: Any, *, minimum: int | None = None, what: str | None = None) -> int:
    """``value`` as an int at least ``minimum``; a bool, float or string is refused (naming its type)."""
    if isinstance(value, bool) or not isinstance(value, int | np.integer):
        raise OptionError(f"{param(name, value, show=True)} must be an integer, not {type(value).__name__}.")
    if minimum is not None and value < minimum:
        text = what or ("0 or a positive integer" if minimum == 0 else "a positive integer" if minimum == 1
                        else f"at least {minimum}")
        raise OptionError(f"{param(name, value)} must be {text}.")
    return int(value)


def check_number(name: str, value: Any, *, positive: bool = False, minimum: float | None = None) -> float:
    """``value`` as a finite float (positive, or at least ``minimum``, when asked)."""
    if isinstance(value, bool) or not isinstance(value, int | float | np.integer | np.floating):
        raise OptionError(f"{param(name, value, show=True)} must be a number, not {type(value).__name__}.")
    v = float(value)
    if not math.isfinite(v):
        raise OptionError(f"{param(name, value)} must be a finite number.")
    if positive and not v > 0:
        raise OptionError(f"{param(name, value)} must be a positive number.")
    if minimum is not None and v < minimum:
        raise OptionError(f"{param(name, value)} must be at least {minimum:g}.")
    return v


def check_choice(name: str, value: Any, allowed: tuple[str, ...]) -> str:
    """``value`` if it is one of ``allowed`` (the message lists them)."""
    if not isinstance(value, str) or value not in allowed:
        raise OptionError(f"{param(name)} {describe_choices(value, allowed)}.")
    return value


def check_str(name: str, value: Any) -> str | None:
    """``value`` if it is a string or None."""
    if value is not None and not isinstance(value, str):
        raise OptionError(f"{param(name, value, show=True)} must be a string, not {type(value).__name__}.")
    return value


def check_path(name: str, value: Any) -> str:
    """``value`` as a path string: a ``str`` or ``os.PathLike`` naming something (not empty)."""
    import os

    if isinstance(value, bool) or not isinstance(value, str | os.PathLike):
        raise OptionError(f"{param(name, value, show=True)} must be a path (str or os.PathLike), not "
                          f"{type(value).__name__}.")
    path = os.fspath(value)
    if not isinstance(path, str) or not path:
        raise OptionError(f"{param(name, value, show=True)} must be a path that names something.")
    return path


def check_paths(name: str, value: Any) -> list[str]:
    """One path or a non-empty list or tuple of them, as a list of strings (the element named when bad)."""
    if isinstance(value, list | tuple):
        if not value:
            raise OptionError(f"{param(name)} is an empty {type(value).__name__}; name at least one path.")
        return [check_path(f"{name}[{i}]", v) for i, v in enumerate(value)]
    return [check_path(name, value)]


def check_strings(name: str, value: Any) -> list[str]:
    """One string or a list or tuple of them (a string is one item, never its characters)."""
    if value is None:
        return []
    items = [value] if isinstance(value, str) else value
    if not isinstance(items, list | tuple):
        raise OptionError(f"{param(name, value, show=True)} must be a string or a list of strings, not "
                          f"{type(value).__name__}.")
    for i, v in enumerate(items):
        if not isinstance(v, str):
            raise OptionError(f"{param(f'{name}[{i}]', v, show=True)} must be a string, not {type(v).__name__}.")
    return list(items)


def check_bool(name: str, value: Any) -> bool:
    """``value`` if it is True or False (numpy's too); a string such as "no" is refused, never truthy."""
    if not isinstance(value, bool | np.bool_):
        raise OptionError(f"{param(name, value, show=True)} must be True or False, not {type(value).__name__}.")
    return bool(value)


def check_numbers(name: str, value: Any) -> tuple[float, ...]:
    """A number or a list or tuple of finite numbers (``counting``, ``capacity``)."""
    if value is None:
        return ()
    items = [value] if isinstance(value, int | float | np.integer | np.floating) and not isinstance(value, bool) \
        else value
    if not isinstance(items, list | tuple):
        raise OptionError(f"{param(name, value, show=True)} must be a number or a list of numbers, not "
                          f"{type(value).__name__}.")
    return tuple(check_number(f"{name}[{i}]", v) for i, v in enumerate(items))


def check_regex(name: str, pattern: str) -> re.Pattern[str]:
    """``pattern`` compiled, refused (naming ``name``) when it is not a regular expression, or when it nests an
    unbounded repetition inside another (``(a+)+``, ``(\\w*)*``) or repeats alternatives wider than one character
    (``(ab|a)*``): such patterns backtrack exponentially on a long name that almost matches, and Python's ``re``
    has no time limit."""
    import re._parser as sre

    if not isinstance(pattern, str):
        raise OptionError(f"{param(name, pattern, show=True)} must be a string (a regular expression).")
    try:
        compiled = re.compile(pattern)
        tree = sre.parse(pattern)
    except (re.error, RecursionError, OverflowError) as exc:
        raise OptionError(f"{param(name, pattern[:80])} is not a valid regular expression: {exc}.") from None
    repeats = (sre.MAX_REPEAT, sre.MIN_REPEAT, getattr(sre, "POSSESSIVE_REPEAT", None))

    def nested(items: Any, inside: bool) -> bool:
        for op, av in items:
            if op in repeats:
                lo, hi, sub = av
                unbounded = hi == sre.MAXREPEAT or hi > 100
                if inside and unbounded:
                    return True
                if nested(sub, inside or unbounded):
                    return True
            elif op is sre.SUBPATTERN:
                if nested(av[-1], inside):
                    return True
            elif op is sre.BRANCH:
                # alternatives inside a repetition that are not single characters can overlap ((ab|a)*): the same
                # exponential backtracking
                if inside and any(sre.SubPattern(sre.State(), b).getwidth() != (1, 1) for b in av[1]):
                    return True
                if any(nested(b, inside) for b in av[1]):
                    return True
            elif op in (sre.ASSERT, sre.ASSERT_NOT):
                if nested(av[1], inside):
                    return True
        return False

    if nested(tree, False):
        raise OptionError(f"{param(name, pattern[:80])} repeats a group that itself repeats, or alternatives of "
                          "more than one character (as in (a+)+ or (ab|a)*): on a long name that almost matches it "
                          "can run for hours; write it with one repetition (e.g. a+ for (a+)+).")
    return compiled
