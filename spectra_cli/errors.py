"""One exception hierarchy and one warning class for the whole package.

The CLI turns :class:`SpectraError` subclasses into a one-line ``error: ...`` on
stderr and exit code 2; anything else is a bug (exit code 3, traceback shown).

Messages about an option name it the way the caller spelt it: a library caller reads
``ddof=-1 must be ...``, a command-line user ``--ddof -1 must be ...``. Messages mark
parameter names with :func:`param`; ``str(exc)`` renders them as Python keywords and
:meth:`SpectraError.for_cli` as command-line flags.
"""

from __future__ import annotations

import re

_MARK = re.compile("\x00([a-z_0-9]+(?:\\[[0-9]+\\])?)(?:\x01([^\x00]*))?\x00")

#: Parameters whose flag is not ``--`` + the name with dashes.
_FLAGS = {"centered": "--uncentered", "out": "-o", "n": "-n", "d": "-d"}


def param(name: str, value: object = None, *, show: bool | None = None) -> str:
    """A parameter (and its value) inside a message: ``ddof=-1`` in Python, ``--ddof -1`` on the command line.

    ``value`` is shown with ``repr`` for strings (``--precision 'float16'``) and ``str`` otherwise;
    ``show=False`` leaves it out. ``True`` names a switch: ``population=True`` in Python, ``--population``
    on the command line.
    """
    if show is None:
        show = value is not None
    if not show:
        return f"\x00{name}\x00"
    text = repr(value) if isinstance(value, str) else str(value)
    return f"\x00{name}\x01{text}\x00"


def flag_of(name: str) -> str:
    return _FLAGS.get(name, "--" + name.replace("_", "-"))


def _render(message: str, *, cli: bool) -> str:
    def sub(m: re.Match[str]) -> str:
        name, value = m.group(1), m.group(2)
        if cli:
            return flag_of(name) if value is None or value == "True" else f"{flag_of(name)} {value}"
        return name if value is None else f"{name}={value}"

    return _MARK.sub(sub, message)


def flag_text(message: str) -> str:
    """A message with its parameters named as command-line flags (for the command line's own lines); a
    :class:`Message` by its marked text."""
    return _render(getattr(message, "raw", message), cli=True)


class Message(str):
    """A note or warning that names parameters (:func:`param`): as a ``str`` it reads as the library's
    (``step_regex``), :func:`flag_text` renders it as the command line's (``--step-regex``); ``raw``
    keeps the marks, for a message built from it."""

    raw: str

    def __new__(cls, raw: str) -> Message:
        obj = super().__new__(cls, _render(raw, cli=False))
        obj.raw = getattr(raw, "raw", raw)
        return obj


#: Whether this process runs for the command line (set by it; inherited by a batch's workers): the reports its
#: batch workers write name options as flags, as the command line's own lines do.
CLI_RUN = [False]


def command_line_run(on: bool) -> None:
    """Mark this process as running for the command line (``on``) or for the library."""
    CLI_RUN[0] = bool(on)


def for_caller(message: object) -> str:
    """A message as its caller spells options: flags in a command-line run, keywords otherwise."""
    return _render(raw(message), cli=CLI_RUN[0])


def raw(message: object) -> str:
    """The marked text of a message, an exception or a note (to build another message from it)."""
    if isinstance(message, SpectraError):
        return message.raw_message
    return getattr(message, "raw", str(message))


class SpectraError(Exception):
    """Base class of every error spectra raises on purpose."""

    def __init__(self, message: str = "") -> None:
        self.raw_message = message
        super().__init__(_render(message, cli=False))

    def for_cli(self) -> str:
        """The message with parameters named as command-line flags."""
        return _render(self.raw_message, cli=True)


class InputError(SpectraError, ValueError):
    """The input data cannot be read or is not a valid matrix."""


class OptionError(SpectraError, ValueError):
    """An option value is invalid or the options contradict each other."""


class FitError(SpectraError, RuntimeError):
    """A fit cannot be made on this spectrum (too few usable ranks, ...)."""


class OutputError(SpectraError, OSError):
    """An output cannot be written where asked (it is an input, its directory is missing, ...)."""


class SpectraWarning(UserWarning):
    """Something computable but suspect; also recorded in a report's ``warnings``."""


def describe_choices(value: object, allowed: list[str] | tuple[str, ...]) -> str:
    """Render a bad option value with the allowed ones (scipy's style)."""
    return f"{value!r} is not one of {', '.join(repr(a) for a in allowed)}"


#: What an interrupted run leaves: nothing half-written (every output is written beside its target and
#: renamed into place; a signal removes the temporary file).
NOTHING_HALF_WRITTEN = "no output file was left half-written"
