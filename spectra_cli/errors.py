"""One exception hierarchy and one warning class for the whole package.

The CLI turns :class:`SpectraError` subclasses into a one-line ``error: ...`` on
stderr and exit code 2; anything else is a bug (exit code 3, traceback shown).
"""

from __future__ import annotations


class SpectraError(Exception):
    """Base class of every error spectra raises on purpose."""


class InputError(SpectraError, ValueError):
    """The input data cannot be read or is not a valid matrix."""


class OptionError(SpectraError, ValueError):
    """An option value is invalid or the options contradict each other."""


class FitError(SpectraError, RuntimeError):
    """A fit cannot be made on this spectrum (too few usable ranks, ...)."""


class SpectraWarning(UserWarning):
    """Something computable but suspect; also recorded in a report's ``warnings``."""


def describe_choices(value: object, allowed: list[str] | tuple[str, ...]) -> str:
    """Render a bad option value with the allowed ones (scipy's style)."""
    return f"{value!r} is not one of {', '.join(repr(a) for a in allowed)}"
