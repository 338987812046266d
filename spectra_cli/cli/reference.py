"""The Click command behind the Typer app, for the documentation's CLI reference (mkdocs-click reads
``command``): every command and option of ``spectra`` as the program itself declares them.

mkdocs-click renders each help text as Markdown; the ``\\b`` paragraphs that Click prints unwrapped
(the commands' examples) become code blocks here, so that a glob such as ``runs/*/step_*.npy`` is shown
as typed, not as emphasis. The terminal's help is untouched."""

from __future__ import annotations

import re

import click
import typer

from spectra_cli.cli.app import app

_VERBATIM = re.compile(r"^[ \t]*\x08\n(?P<head>[^\n]*:)\n(?P<body>(?:[ \t]+\S[^\n]*\n?)+)", re.M)


def _as_markdown(help_text: str) -> str:
    def block(m: re.Match[str]) -> str:
        lines = [line.strip() for line in m.group("body").splitlines() if line.strip()]
        return m.group("head") + "\n\n```\n" + "\n".join(lines) + "\n```\n"

    return _VERBATIM.sub(block, help_text)


def _documented(cmd: click.Command) -> click.Command:
    if cmd.help:
        cmd.help = _as_markdown(cmd.help)
    for sub in getattr(cmd, "commands", {}).values():
        _documented(sub)
    return cmd


command = _documented(typer.main.get_command(app))
