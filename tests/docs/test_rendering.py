"""The site as a reader sees it: every list rendered as a list (a list with no blank line before it runs into
the paragraph above, with its "- " showing), no code span broken, no Python repr (Click's ``Sentinel.UNSET``)
in a page. Fast: every page and the README through the site's own Markdown extensions (the command-line
reference's mkdocs-click directive included); the slow site build checks its HTML with the same function."""

from __future__ import annotations

import re
from html.parser import HTMLParser
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"

#: A line of a paragraph that starts like a list item: the list had no blank line before it.
LIST_LINE = re.compile(r"\n[ \t]*(?:[-*+]|\d+[.)])[ \t]+\S")
#: A Python object's repr in a page (Click's UNSET default; a bare object()).
INTERNAL_REPR = ("Sentinel.", "&lt;object object", "<object object")


class _Text(HTMLParser):
    """Each <p>'s text (code included), and the text outside <code>/<pre> (where a ` is a broken span)."""

    def __init__(self) -> None:
        super().__init__()
        self.paragraphs: list[str] = []
        self.loose: list[str] = []
        self._p: list[list[str]] = []
        self._code = 0

    def handle_starttag(self, tag: str, attrs: list) -> None:
        if tag == "p":
            self._p.append([])
        elif tag in ("code", "pre", "script", "style"):
            self._code += 1

    def handle_endtag(self, tag: str) -> None:
        if tag == "p" and self._p:
            self.paragraphs.append("".join(self._p.pop()))
        elif tag in ("code", "pre", "script", "style"):
            self._code -= 1

    def handle_data(self, data: str) -> None:
        for buf in self._p:
            buf.append(data)
        if not self._code:
            self.loose.append(data)


def rendering_problems(html: str) -> list[str]:
    """A list run into a paragraph, a code span broken by a line that starts like a list item, a
    Python repr."""
    t = _Text()
    t.feed(html)
    found = [f"a list in a paragraph: {p[:100]!r}" for p in t.paragraphs if LIST_LINE.search(p)]
    found += [f"a stray backtick: {s.strip()[:100]!r}" for s in t.loose if "`" in s]
    return found + [f"a Python repr: {r}" for r in INTERNAL_REPR if r in html]


def _markdown(text: str) -> str:
    """A page as the site renders its Markdown (mkdocs.yml's extensions; no theme, no plugins)."""
    import markdown

    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text())
    names, options = [], {}
    for ext in config["markdown_extensions"]:
        name, opts = next(iter(ext.items())) if isinstance(ext, dict) else (ext, {})
        names.append(name)
        options[name] = opts or {}
    if "pymdownx.snippets" in options:
        options["pymdownx.snippets"]["base_path"] = [str(ROOT)]
    return markdown.markdown(text, extensions=names, extension_configs=options)


def test_every_page_renders_its_lists_code_and_defaults() -> None:
    pytest.importorskip("mkdocs")
    """Fast (no site build): every page and the README through the site's Markdown, the command-line
    reference included (mkdocs-click runs in process)."""
    problems = []
    for page in [ROOT / "README.md", *sorted(DOCS.rglob("*.md"))]:
        problems += [f"{page.relative_to(ROOT)}: {p}" for p in rendering_problems(_markdown(page.read_text()))]
    assert not problems, "\n".join(problems)


def assert_the_built_site_renders(site: Path) -> None:
    """Every page of a built site (:func:`rendering_problems`)."""
    problems = []
    for page in sorted(site.rglob("*.html")):
        problems += [f"{page.relative_to(site)}: {p}" for p in rendering_problems(page.read_text())]
    assert not problems, "\n".join(problems)


