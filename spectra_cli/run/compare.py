"""``spectra compare``: two reports (or two inputs) side by side, every scalar metric aligned."""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, replace
from typing import Any, Unpack

from spectra_cli import registry
from spectra_cli.analysis.fit_options import FitKeywords, FitOptions
from spectra_cli.documents import check_report_schema
from spectra_cli.errors import InputError, OptionError, param
from spectra_cli.results import scalar_fields
from spectra_cli.sources import formats
from spectra_cli.validate import check_number, check_path

COMPARE_SCHEMA = "spectra.compare/1"


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
    if formats.JSONL.matches(path):
        lines = [ln for ln in text.splitlines() if ln.strip()]
        if len(lines) != 1:
            raise InputError(f"{path} holds {len(lines)} reports; compare takes one report per side.")
        text = lines[0]
    doc = loads(text, path)
    check_report_schema(doc, path)
    return doc


def as_report(path: str, fit_options: dict[str, Any]) -> dict[str, Any]:
    """A report file as is, or the ``fit`` report of an input."""
    if path == "-" or formats.by_path(path, (formats.JSON, formats.JSONL)) is not None:
        return load_report(path)
    from spectra_cli.run import matrix as api

    return api.fit(path, **fit_options).to_dict()


@dataclass(frozen=True, slots=True)
class Row:
    """One field of two reports: its values, and where both give a standard error, the change's (``se``,
    independent samples), ``z``, its two-sided ``p`` and whether it is ``significant`` (Benjamini-Hochberg
    over every field tested; None where there is no standard error)."""

    field: str
    a: float | None
    b: float | None
    se_a: float | None = None
    se_b: float | None = None
    significant: bool | None = None
    #: each side's degrees of freedom (a standard error from G row groups has G - 1; None: first order, normal)
    dof_a: float | None = None
    dof_b: float | None = None
    #: whether this row is one of Benjamini-Hochberg's family (not a repeat of another, nor a function of one)
    tested: bool = False

    @property
    def diff(self) -> float | None:
        return None if self.a is None or self.b is None else self.b - self.a

    @property
    def rel(self) -> float | None:
        d = self.diff
        return None if d is None or not self.a else d / abs(self.a)

    @property
    def se(self) -> float | None:
        if self.se_a is None or self.se_b is None:
            return None
        return math.hypot(self.se_a, self.se_b)

    @property
    def z(self) -> float | None:
        d, se = self.diff, self.se
        return None if d is None or se is None or not se > 0 else d / se

    @property
    def dof(self) -> float | None:
        """The degrees of freedom of ``z`` (Welch and Satterthwaite's, from each side's; None: normal)."""
        if self.se_a is None or self.se_b is None or (self.dof_a is None and self.dof_b is None):
            return None
        parts = [(se**4 / dof if dof is not None else 0.0) for se, dof in ((self.se_a, self.dof_a),
                                                                           (self.se_b, self.dof_b))]
        total = sum(parts)
        return (self.se_a**2 + self.se_b**2) ** 2 / total if total > 0 else None

    @property
    def p(self) -> float | None:
        z = self.z
        if z is None:
            return None
        dof = self.dof
        if dof is None:
            return math.erfc(abs(z) / math.sqrt(2.0))
        from scipy.special import stdtr

        return float(2.0 * stdtr(dof, -abs(z)))

    def to_dict(self) -> dict[str, Any]:
        return {"field": self.field, "a": self.a, "b": self.b, "diff": self.diff, "rel_diff": self.rel,
                "se_a": self.se_a, "se_b": self.se_b, "se": self.se, "z": self.z, "dof": self.dof, "p": self.p,
                "significant": self.significant}


#: The false discovery rate of compare's tests (Benjamini & Hochberg 1995) unless asked otherwise.
FDR = 0.05
SIGNIFICANCE = ("z = (b - a) / sqrt(se_a^2 + se_b^2) (two independent samples; each se the report's own standard "
                "error of the field), p two-sided: Student's t with Welch and Satterthwaite's degrees of freedom where "
                "the errors come from row groups (G - 1 each), else normal; significant: Benjamini-Hochberg at the "
                "false discovery rate over the family of independent quantities with a standard error: a number "
                "repeated under two names, or a function of another (the stable rank is 1 / the top-PC share), is "
                "tested once; the density fit's alpha is not tested (its error leaves out the choice of x_min)")


def benjamini_hochberg(pvalues: list[float], fdr: float) -> list[bool]:
    """Which of ``pvalues`` are discoveries at false discovery rate ``fdr`` (Benjamini & Hochberg 1995):
    the ``k`` smallest, ``k`` the largest with ``p_(k) <= k fdr / m``."""
    m = len(pvalues)
    order = sorted(range(m), key=lambda i: pvalues[i])
    cut = 0
    for rank, i in enumerate(order, start=1):
        if pvalues[i] <= rank * fdr / m:
            cut = rank
    keep = set(order[:cut])
    return [i in keep for i in range(m)]


def compare_rows(a: dict[str, Any], b: dict[str, Any], *, fdr: float = FDR) -> list[Row]:
    """Every scalar metric of two reports aligned by dotted path (a's order, then b's own), each with its
    standard errors where both reports give one, and the significant changes marked."""
    from spectra_cli.results import se_dof, standard_error

    fa, fb = scalar_fields(a), scalar_fields(b)
    keys = [k for k in fa if _compared(k)]
    keys += [k for k in fb if k not in fa and _compared(k)]
    dof_a, dof_b = se_dof(a), se_dof(b)
    rows = [Row(k, fa.get(k), fb.get(k), standard_error(a, k), standard_error(b, k), dof_a=dof_a, dof_b=dof_b)
            for k in keys]
    # one test per quantity: a field that repeats another (WeightWatcher's alpha is the density alpha), or that is a
    # function of another (the stable rank of the top-PC share), shares its verdict
    index = {r.field: i for i, r in enumerate(rows)}
    first_of: dict[tuple[Any, ...], int] = {}
    same: dict[int, int] = {}
    tested = []
    for i, r in enumerate(rows):
        if r.p is None:
            continue
        base = registry.function_of(r.field)
        if base is not None and base in index and rows[index[base]].p is not None:
            same[i] = index[base]
        elif first_of.setdefault((r.a, r.b, r.se_a, r.se_b), i) == i:
            tested.append(i)
        else:
            same[i] = first_of[(r.a, r.b, r.se_a, r.se_b)]
    found = benjamini_hochberg([rows[i].p for i in tested], fdr)  # type: ignore[misc]
    marks = dict(zip(tested, found, strict=True))
    for i, j in same.items():
        while j in same:  # (a chain: a function of a field that repeats another)
            j = same[j]
        marks[i] = marks[j]
    chosen = set(tested)
    return [replace(r, significant=marks[i], tested=i in chosen) if i in marks else r for i, r in enumerate(rows)]


def _compared(field: str) -> bool:
    """A field compared: one the registry says compare subtracts (:func:`spectra_cli.registry.compared`: not the
    run's costs or options, not a number that names), and not a standard error travelling beside its field."""
    return registry.compared(field) and not _is_error(field)


def _is_error(field: str) -> bool:
    """The standard errors and their row model (they travel beside their fields, not as fields)."""
    parts = field.split(".")
    return "se" in parts[:-1] or "se_method" in parts or parts[-1] == "se"


def compare_doc(a: dict[str, Any], b: dict[str, Any], rows: list[Row], *, fdr: float = FDR) -> dict[str, Any]:
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
        "significance": {"method": SIGNIFICANCE, "fdr": fdr,
                         "tested": sum(r.tested for r in rows),
                         "significant": sum(bool(r.significant) for r in rows)},
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
    centered: bool | None = None,
    allow_option_mismatch: bool = False,
    fdr: float = FDR,
    **fitting: Unpack[FitKeywords],
) -> CompareResult:
    """Two reports (``.json``; ``-`` reads stdin) or two inputs (each fitted by ``fit`` with ``centered``
    and the fit keywords given, :class:`~spectra_cli.analysis.suite.FitKeywords`) side by side: every
    scalar metric, ``diff = b - a`` and ``rel_diff = (b - a) / |a|``. Reports made with different
    number-changing options are refused unless ``allow_option_mismatch`` (then the mismatches are stated
    in the result). Where both reports give a field's standard error, its row carries the change's ``se``
    (independent samples), ``z``, ``p`` and ``significant``: Benjamini-Hochberg at false discovery rate
    ``fdr`` over every field tested (None where there is no standard error)."""
    from spectra_cli.provenance import check_same_options

    pa, pb = check_path("a", a), check_path("b", b)
    options = FitOptions.create(centered=centered, **fitting)  # (once, before either input is read)
    fdr = check_number("fdr", fdr)
    if not 0 < fdr < 1:
        raise OptionError(f"{param('fdr', fdr)} must lie between 0 and 1 (e.g. 0.05).")
    opts: dict[str, Any] = {**({"centered": centered} if centered is not None else {}), "options": options}
    da, db = as_report(pa, opts), as_report(pb, opts)
    mismatch = check_same_options(da, db, what=f"{a} and {b}", allow=allow_option_mismatch)
    rows = compare_rows(da, db, fdr=fdr)
    doc = compare_doc(da, db, rows, fdr=fdr)
    doc["option_mismatch"] = mismatch
    return CompareResult(doc, tuple(rows), tuple(mismatch))
