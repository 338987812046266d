"""JSON read defensively: every JSON that spectra reads (safetensors headers and indexes,
``--eigenvalues``, reports, batch results, moment-file metadata) goes through :func:`loads`,
which turns what would crash or mislead a caller into one ``InputError``: nesting deeper than
Python's recursion allows, integers with more digits than any real count (``1`` followed by 400
zeros would overflow every later float conversion), and text that is not UTF-8."""

from __future__ import annotations

import json
import math
from typing import Any

from spectra_cli.errors import InputError

#: Integers longer than this are refused (2**64 has 20 digits).
MAX_INT_DIGITS = 40


class _TooLong(ValueError):
    pass


def _parse_int(text: str) -> int:
    if len(text.lstrip("-")) > MAX_INT_DIGITS:
        raise _TooLong(f"an integer of {len(text)} digits")
    return int(text)


class _NotStrict(ValueError):
    pass


def _constant(name: str) -> float:
    raise _NotStrict(f"{name}, which strict JSON does not have")


def _parse_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise _NotStrict(f"the number {text[:40]}, beyond float64's range")
    return value


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """An object whose keys are distinct (a repeated key would let its last value win unseen)."""
    out = dict(pairs)
    if len(out) != len(pairs):
        seen: set[str] = set()
        twice = next(k for k, _ in pairs if k in seen or seen.add(k))  # type: ignore[func-returns-value]
        raise _NotStrict(f"the key {twice[:40]!r} twice in one object")
    return out


def _has_lone_surrogate(doc: Any) -> bool:
    """Whether a string (or key) of ``doc`` holds a surrogate code point (JSON's ``\\ud800`` escape
    decodes to one; it cannot be written out as UTF-8)."""
    stack = [doc]
    while stack:
        x = stack.pop()
        if isinstance(x, str):
            if any("\ud800" <= ch <= "\udfff" for ch in x):
                return True
        elif isinstance(x, dict):
            stack.extend(x.keys())
            stack.extend(x.values())
        elif isinstance(x, list):
            stack.extend(x)
    return False


def loads(text: str | bytes, where: str) -> Any:
    """Strict ``json.loads`` that raises ``InputError`` naming ``where`` for anything unreadable: no
    NaN or Infinity (spectra writes strict JSON, and a non-finite number would compare as no number
    does), no number beyond float64's range, bounded integers and depth."""
    try:
        if isinstance(text, bytes):
            text = text.decode("utf-8")
        doc = json.loads(text, parse_int=_parse_int, parse_float=_parse_float, parse_constant=_constant,
                         object_pairs_hook=_unique_keys)
        if "\\ud" in text.lower() and _has_lone_surrogate(doc):
            raise _NotStrict("a lone surrogate escape (\\ud800-\\udfff), which is no character")
        return doc
    except RecursionError:
        raise InputError(f"{where} is JSON nested too deeply to read.") from None
    except UnicodeDecodeError as exc:
        raise InputError(f"{where} is not UTF-8 text ({exc.reason} at byte {exc.start}).") from None
    except _TooLong as exc:
        raise InputError(f"{where} holds {exc}, more than any count or size spectra reads.") from None
    except _NotStrict as exc:
        raise InputError(f"{where} is not strict JSON: it holds {exc}.") from None
    except ValueError as exc:
        raise InputError(f"{where} is not valid JSON: {exc}") from None


def dumps(doc: Any, *, indent: int | None = 2) -> str:
    """Strict JSON: one document, no NaN/Infinity (``to_dict`` made them null)."""
    return json.dumps(doc, allow_nan=False, indent=indent, ensure_ascii=False)
