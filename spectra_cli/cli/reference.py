"""The command-line reference of the documentation (mkdocs-click reads ``command``): every command and
option of ``spectra`` as the program itself declares them.

Typer builds its commands on its own copy of Click, whose classes mkdocs-click does not recognise, so
the tree is restated here in Click's classes, parameter by parameter (names, flags, help, metavar,
default, choices): nothing is written by hand. mkdocs-click renders each help text as Markdown; the
``\\b`` paragraphs that Click prints unwrapped (the commands' examples) become code blocks, so that a
glob such as ``runs/*/step_*.npy`` is shown as typed. The terminal's help is untouched."""

from __future__ import annotations

import re
from typing import Any

import click
import typer

from spectra_cli.cli.app import app

_VERBATIM = re.compile(r"^[ \t]*\x08\n(?P<head>[^\n]*:)\n(?P<body>(?:[ \t]+\S[^\n]*\n?)+)", re.M)


def _as_markdown(help_text: str | None) -> str | None:
    if not help_text:
        return help_text

    def block(m: re.Match[str]) -> str:
        lines = [line.strip() for line in m.group("body").splitlines() if line.strip()]
        return m.group("head") + "\n\n```\n" + "\n".join(lines) + "\n```\n"

    return _VERBATIM.sub(block, help_text)


def _cell(text: str | None) -> str | None:
    """A help text for a Markdown table's cell: a ``|`` (``ols | logspaced``) would end the cell."""
    return text.replace("|", "&#x7C;") if text else text


def _param(p: Any) -> click.Parameter:
    choices = getattr(p.type, "choices", None)
    kind: Any = click.Choice(list(choices)) if choices else click.STRING
    if p.param_type_name == "argument":
        return click.Argument([p.name], required=p.required, nargs=p.nargs, metavar=p.metavar, type=kind)
    # (not a sentinel; nor "", which the reference would show as an empty code span)
    default = p.default if isinstance(p.default, bool | int | float | str | list | tuple) and p.default != "" else None
    if getattr(p, "is_flag", False):
        return click.Option([*p.opts, *p.secondary_opts] if not p.secondary_opts else
                            ["/".join([p.opts[0], p.secondary_opts[0]])], is_flag=True, help=_cell(p.help),
                            default=default if isinstance(default, bool) else None, show_default=p.show_default,
                            hidden=p.hidden)
    return click.Option(list(p.opts), help=_cell(p.help), metavar=p.metavar, type=kind, multiple=p.multiple,
                        required=p.required, default=default, show_default=p.show_default, hidden=p.hidden)


def _help(cmd: Any) -> click.Option:
    """The command's own ``--help``, with a default: Click's (8.3 and later) has its UNSET sentinel, which the
    reference would print as ``Sentinel.UNSET``."""
    own = cmd.get_help_option(cmd.context_class(cmd))
    return click.Option(list(own.opts), is_flag=True, default=False, expose_value=False, help=own.help)


def _command(cmd: Any, name: str) -> click.Command:
    params = [_param(p) for p in cmd.params] + [_help(cmd)]
    help_text = _as_markdown(cmd.help)
    subs = getattr(cmd, "commands", None)
    if subs:
        return click.Group(name, commands={n: _command(c, n) for n, c in subs.items()}, help=help_text,
                           params=params, add_help_option=False)
    return click.Command(name, params=params, help=help_text, hidden=cmd.hidden, add_help_option=False)


command = _command(typer.main.get_command(app), "spectra")
