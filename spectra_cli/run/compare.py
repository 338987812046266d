"""``spectra compare``: two reports (or two inputs) side by side, every scalar metric aligned."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Unpack

from spectra_cli.analysis.suite import FitKeywords, check_fit_keywords
from spectra_cli.errors import InputError
from spectra_cli.results import check_report_schema, scalar_fields
from spectra_cli.validate import check_path

COMPARE_SCHEMA = "spectra.compare/1"
# Sections whose numbers describe the run, not the data.
SKIP_PREFIXES = ("timings.", "options.", "source.shape.", "fits.0.", "models.")


def load_report(path: str) -> dict[str, Any]:
    """A spectra report from a ``.json`` file (or a one-line ``.jsonl``)."""
    from spectra_cli.jsonio import loads
    from spectra_cli.sources.base import open_regular

    if path == "-":
        import sys

        text = sys.stdin.buffer.read()
    else:
        with open_regular(path) as f:
            text = f.read()
    if path.lower().endswith(".jsonl"):
        lines = [ln for ln in text.splitlines() if ln.strip()]
        if len(lines) != 1:
            raise InputError(f"{path} holds {len(lines)} reports; compare takes one report per side.")
        text = lines[0]
    doc = loads(text, path)
    check_report_schema(doc, path)
    return doc


def as_report(path: str, fit_options: dict[str, Any]) -> dict[str, Any]:
    """A report file as is, or the ``fit`` report of an input."""
    if path == "-" or path.lower().endswith((".json", ".jsonl")):
        return load_report(path)
    from spectra_cli.run import matrix as api

    return api.fit(path, **fit_options).to_dict()


@dataclass(frozen=True, slots=True)
class Row:
    field: str
    a: float | None
    b: float | None

    @property
    def diff(self) -> float | None:
        return None if self.a is None or self.b is None else self.b - self.a

    @property
    def rel(self) -> float | None:
        d = self.diff
        return None if d is None or not self.a else d / abs(self.a)

    def to_dict(self) -> dict[str, Any]:
        return {"field": self.field, "a": self.a, "b": self.b, "diff": self.diff, "rel_diff": self.rel}


def compare_rows(a: dict[str, Any], b: dict[str, Any]) -> list[Row]:
    """Every scalar metric of two reports aligned by dotted path (a's order, then b's own)."""
    fa, fb = scalar_fields(a), scalar_fields(b)
    keys = [k for k in fa if not k.startswith(SKIP_PREFIXES)]
    keys += [k for k in fb if k not in fa and not k.startswith(SKIP_PREFIXES)]
    return [Row(k, fa.get(k), fb.get(k)) for k in keys]


def compare_doc(a: dict[str, Any], b: dict[str, Any], rows: list[Row]) -> dict[str, Any]:
    from spectra_cli.results import json_safe

    def src(d: dict[str, Any]) -> dict[str, Any]:
        s = d.get("source", {})
        return {"path": s.get("path"), "item": d.get("item"), "fingerprint": s.get("fingerprint"),
                "command": d.get("command")}

    return json_safe({
        "schema": COMPARE_SCHEMA,
        "a": src(a),
        "b": src(b),
        "definition": "diff = b - a; rel_diff = (b - a) / |a|",
        "metrics": [r.to_dict() for r in rows],
    })


@dataclass(frozen=True, slots=True)
class CompareResult:
    """Two reports side by side: ``rows`` (field, a, b, diff, rel_diff), the option mismatches that
    were allowed, and the JSON document ``spectra compare --json`` prints (``to_dict()``)."""

    document: dict[str, Any]
    rows: tuple[Row, ...]
    option_mismatch: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return dict(self.document)


def compare(
    a: str | os.PathLike[str],
    b: str | os.PathLike[str],
    *,
    centered: bool = True,
    allow_option_mismatch: bool = False,
    **fitting: Unpack[FitKeywords],
) -> CompareResult:
    """Two reports (``.json``; ``-`` reads stdin) or two inputs (each fitted by ``fit`` with ``centered``
    and the fit keywords given, :class:`~spectra_cli.analysis.suite.FitKeywords`) side by side: every
    scalar metric, ``diff = b - a`` and ``rel_diff = (b - a) / |a|``. Reports made with different
    number-changing options are refused unless ``allow_option_mismatch`` (then the mismatches are stated
    in the result)."""
    from spectra_cli.provenance import check_same_options

    pa, pb = check_path("a", a), check_path("b", b)
    check_fit_keywords(dict(fitting))  # before either input is read
    opts: dict[str, Any] = {"centered": centered, **fitting}
    da, db = as_report(pa, opts), as_report(pb, opts)
    mismatch = check_same_options(da, db, what=f"{a} and {b}", allow=allow_option_mismatch)
    rows = compare_rows(da, db)
    doc = compare_doc(da, db, rows)
    doc["option_mismatch"] = mismatch
    return CompareResult(doc, tuple(rows), tuple(mismatch))
