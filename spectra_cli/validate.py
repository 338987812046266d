"""The validators every argument of the library and every flag of the CLI goes through, at the
bottom floor (they import only :mod:`spectra_cli.errors` and numpy): one message style, modelled
on scikit-learn's ``check_scalar`` — the parameter (``ddof=-1`` in Python, ``--ddof -1`` on the
command line), then what it must be."""

from __future__ import annotations

import math
import re
from typing import Any, Protocol

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


def check_int(name: str, value: Any, *, minimum: int | None = None, maximum: int | None = None,
              what: str | None = None) -> int:
    """``value`` as an int from ``minimum`` to ``maximum``; a bool, float or string is refused (naming its type)."""
    if isinstance(value, bool) or not isinstance(value, int | np.integer):
        raise OptionError(f"{param(name, value, show=True)} must be an integer, not {type(value).__name__}.")
    if minimum is not None and value < minimum:
        text = what or ("0 or a positive integer" if minimum == 0 else "a positive integer" if minimum == 1
                        else f"at least {minimum}")
        raise OptionError(f"{param(name, value)} must be {text}.")
    if maximum is not None and value > maximum:
        shown = value if len(str(value)) <= 20 else str(value)[:17] + "..."
        raise OptionError(f"{param(name, shown)} must be at most {maximum:,}.")
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


#: The longest pattern an option takes (a module, tensor or step pattern).
MAX_PATTERN = 1000
#: Memory RE2 may give one compiled pattern (its default is 8 MiB): a pattern that needs more is refused.
PATTERN_MEMORY = 8 << 20
#: The largest step a snapshot, a run's point or an item name's number may name (a training step, not a hash).
MAX_STEP = 10**15


class Pattern(Protocol):
    """A compiled pattern (:func:`check_regex`): ``search`` returns a match (``group``, ``groups``, ``start``,
    ``end``) or None."""

    def search(self, text: str) -> Any: ...


def check_regex(name: str, pattern: Any) -> Pattern:
    """``pattern`` compiled by RE2 (Google's linear-time engine, the ``google-re2`` bindings): a search runs in
    time linear in the name, whatever the pattern (Python's ``re`` backtracks: ``(.|\\w)*Z$`` or ``(.*.){1,100}``
    ran for hours on a name of 40 characters). The syntax is Python's without what needs backtracking:
    back-references (``\\1``) and look-around (``(?=...)``, ``(?<!...)``) are refused with one line naming
    ``name``, and so is a pattern over :data:`MAX_PATTERN` characters or one RE2 cannot compile within
    :data:`PATTERN_MEMORY` (a repetition count over 1,000, or nested counts whose product is). The result's
    ``search(text)`` returns a match with ``group``, ``groups``, ``start`` and ``end`` as ``re``'s does."""
    import re2

    if not isinstance(pattern, str):
        raise OptionError(f"{param(name, pattern, show=True)} must be a string (a regular expression).")
    if len(pattern) > MAX_PATTERN:
        raise OptionError(f"{param(name, pattern[:40] + '...')} is a pattern of {len(pattern):,} characters; at most "
                          f"{MAX_PATTERN:,} are allowed.")
    if "\x00" in pattern:
        raise OptionError(f"{param(name, pattern[:80])} holds a NUL character; no name has one.")
    options = re2.Options()
    options.log_errors = False  # (RE2 would print its own line on stderr)
    options.max_mem = PATTERN_MEMORY
    try:
        return re2.compile(pattern, options)
    except (re2.error, UnicodeError, TypeError, ValueError) as exc:
        why = exc.args[0].decode("utf-8", "replace") if exc.args and isinstance(exc.args[0], bytes) else str(exc)
        why = why[:200]
        if re.search(r"\\[1-9]|\(\?<?[=!]", pattern):
            raise OptionError(f"{param(name, pattern[:80])} uses a back-reference or look-around ({why}): spectra runs "
                              "patterns in time linear in the name (RE2), and these need backtracking, which can run "
                              "for hours on a long name; write the pattern without them.") from None
        if "repetition" in why:
            raise OptionError(f"{param(name, pattern[:80])} repeats too often ({why}): a count may be 1,000 at "
                              "most, and nested counts multiply.") from None
        raise OptionError(f"{param(name, pattern[:80])} is not a valid regular expression: {why}.") from None
