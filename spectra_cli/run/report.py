"""``spectra report``: reports and batch results as one self-contained HTML page.

What the page shows depends on what it is given:

- ``model``: one batch results file (``.jsonl``) of a checkpoint: the model-level summary and verdict
  counts, each metric per layer in the network's order, a sortable per-layer table, the ESD of
  the worst layers (or, without density fits, the spectra of the layers furthest from the median
  alpha), the tensors skipped and why;
- ``run``: several results files (the step is the last number in each file's path:
  ``runs/step_200/results.jsonl`` -> 200), or one whose item names carry a step (the rule of
  ``spectra trend``): every metric against the step with error bars, and the layers whose metrics
  moved most;
- ``report``: one or more JSON reports of ``spectra fit`` (or ``spectra sequence``): their
  figures and tables.

The page needs no network: figures are inline SVG images (``data:`` URIs), the style sheet and
the table-sorting script are inline. It is built with Jinja2 (autoescaping every value), the
optional extra ``report``.
"""

from __future__ import annotations

import os
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from spectra_cli import registry
from spectra_cli.documents import RESULT_SCHEMAS, SCHEMA_VERSION, finite
from spectra_cli.errors import InputError, Message, OptionError, param
from spectra_cli.run.page import (
    MOVED,
    WORST,
    Figures,
    Point,
    common_name,
    item_key,
    jinja,
    model_section,
    report_section,
    run_section,
)
from spectra_cli.sources import formats
from spectra_cli.validate import check_path, check_paths, check_regex

PAGE_SCHEMA = "spectra.page/1"
KINDS = ("auto", "model", "run", "report")


@dataclass(frozen=True, slots=True)
class ReportPage:
    """An HTML page of ``spectra report``: ``html`` (the whole document), what it shows (``kind``:
    model, run or report), its ``title``, how many ``figures`` it embeds, the ``sources`` read,
    ``notes`` (what was left out, and why) and ``path`` when it was written."""

    html: str
    kind: str
    title: str
    figures: int
    sources: tuple[str, ...]
    notes: tuple[str, ...] = ()
    path: str | None = None
    items: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {"schema": PAGE_SCHEMA, "kind": self.kind, "title": self.title, "path": self.path,
                "figures": self.figures, "items": self.items, "bytes": len(self.html.encode()),
                "sources": list(self.sources), "notes": list(self.notes)}

    def _repr_html_(self) -> str:  # Jupyter: the page in a frame of its own (its CSS stays inside)
        from html import escape

        return f'<iframe srcdoc="{escape(self.html)}" style="width:100%;height:720px;border:0"></iframe>'


# ---------------------------------------------------------------------------------------------------
# reading


@dataclass
class Source:
    path: str
    lines: list[dict[str, Any]] = field(default_factory=list)
    single: bool = False  # a .json report (not a results file)
    repeated: int = 0  # lines of an item already seen (the last one is kept)


def _read(path: str) -> Source:
    from spectra_cli.documents import check_report
    from spectra_cli.jsonio import loads
    from spectra_cli.run.summary import iter_results
    from spectra_cli.sources.base import open_regular

    if formats.JSONL.matches(path):
        lines: dict[str, dict[str, Any]] = {}
        repeated = 0
        for i, doc in iter_results(path):
            if doc.get("schema") == SCHEMA_VERSION:
                check_report(doc, f"{path} line {i}")
            key = item_key(doc)
            repeated += key in lines
            lines.pop(key, None)
            lines[key] = doc  # a repeated item: its last line, as a resumed batch keeps it
        src = Source(path, list(lines.values()))
        src.repeated = repeated
        return src
    if not formats.JSON.matches(path):
        raise InputError(f"{path}: spectra report reads reports (.json, from --json) and batch results (.jsonl); "
                         "to analyse a matrix, run spectra fit or spectra batch first.")
    with open_regular(path) as f:
        doc = loads(f.read(), path)
    schema = doc.get("schema") if isinstance(doc, dict) else None
    if schema != "spectra.sequence/1":
        from spectra_cli.documents import check_report_schema

        check_report_schema(doc, path)
    return Source(path, [check_report(doc, path)], single=True)


# ---------------------------------------------------------------------------------------------------
# figures


# ---------------------------------------------------------------------------------------------------
# page sections




def _run_points(sources: list[Source], step_regex: str | None, notes: list[str]) -> list[Point]:
    from spectra_cli.run.trend import run_steps

    pattern = check_regex("step_regex", step_regex) if step_regex else None
    return [Point(series, step, doc) for series, step, doc in
            run_steps([(s.path, list(s.lines)) for s in sources], pattern, notes)]


def _is_run(sources: list[Source], pts: list[Point]) -> bool:
    if len(sources) > 1:
        return True
    steps: dict[str, set[float]] = defaultdict(set)
    for p in pts:
        steps[p.series].add(p.step)
    return bool(steps) and any(len(s) >= 2 for s in steps.values())


# ---------------------------------------------------------------------------------------------------


def report(
    paths: str | os.PathLike[str] | list[str] | tuple[str, ...],
    *,
    out: str | os.PathLike[str] | None = None,
    kind: str = "auto",
    title: str | None = None,
    worst: int = WORST,
    step_regex: str | None = None,
    progress: Any = None,
) -> ReportPage:
    """One self-contained HTML page from reports (``.json`` of ``spectra fit --json``) or batch results
    (``.jsonl``): a checkpoint's layers (``kind="model"``), a training run's steps (``"run"``: several
    results files, or item names that carry a step), or reports (``"report"``); ``"auto"`` tells them
    apart. ``out``: write the page there (atomically; never one of the inputs). ``worst``: how many
    layers' ESD figures to show. ``progress(figures_done, figures_total)`` as figures are drawn."""
    from spectra_cli.sinks import atomic_file, check_directory, check_not_input, check_replaceable

    args = check_paths("paths", paths)
    if kind not in KINDS:
        raise OptionError(f"{param('kind', kind)} must be one of {', '.join(KINDS)}.")
    if isinstance(worst, bool) or not isinstance(worst, int) or not 0 <= worst <= 100:
        raise OptionError(f"{param('worst', worst, show=True)} must be a whole number from 0 to 100.")
    if step_regex is not None:
        check_regex("step_regex", step_regex)
    target = None
    if out is not None:
        target = check_path("out", out)
        if not formats.HTML.matches(target):
            raise OptionError(f"{param('out', target)}: the page must end in .html.")
        check_directory(target, "out")
        check_not_input(target, args, "out")
        check_replaceable(target, "out")
    jinja2 = jinja()
    from spectra_cli.plot import require_matplotlib

    require_matplotlib("the report page", extra="report")
    from spectra_cli.run.trend import refuse_repeated

    refuse_repeated(args, "one step of a run, or the whole of a model")
    sources = [_read(p) for p in args]
    if not any(s.lines for s in sources):
        raise InputError(f"{', '.join(args)} holds no reports.")
    singles = [s for s in sources if s.single]
    if singles and len(singles) != len(sources):
        raise OptionError("give JSON reports (.json) or batch results (.jsonl), not both in one page.")
    notes: list[str] = [Message(f"{s.path}: {s.repeated} item(s) appear on more than one line; the last line of each "
                                f"is shown (two batches into one file? {param('overwrite', True)} on the batch starts "
                                "the file afresh)")
                        for s in sources if s.repeated]
    reports_in = [d for s in sources for d in s.lines if d.get("schema") == SCHEMA_VERSION]
    run_notes: list[str] = []
    found: list[list[Point]] = []

    def run_points() -> list[Point]:  # the steps of a run, found once (telling a run apart needs them too)
        if not found:
            found.append(_run_points(sources, step_regex, run_notes))
        return found[0]

    if kind == "auto":
        if singles or (len(sources) == 1 and len(reports_in) == 1 and step_regex is None):
            kind = "report"
        else:
            kind = "run" if step_regex is not None or _is_run(sources, run_points()) else "model"
    if kind == "report" and not singles and len(reports_in) > 1:
        raise OptionError(f"{param('kind', 'report')} shows JSON reports (.json); {', '.join(args)} hold(s) "
                          f"{len(reports_in)} items: show them as a model ({param('kind', 'model')}) or the steps of "
                          f"a run ({param('kind', 'run')}).")
    if kind in ("model", "run") and singles:
        raise OptionError(f"{param('kind', kind)} shows batch results (.jsonl, from spectra batch --jsonl), not JSON "
                          f"reports: give the results files, or {param('kind', 'report')}.")
    if kind == "model" and len(sources) > 1:
        raise OptionError(f"{param('kind', 'model')} takes one results file; several are the steps of a run "
                          f"({param('kind', 'run')}).")
    figs = Figures(progress)
    lines = [d for s in sources for d in s.lines]
    docs = [d for d in lines if d.get("schema") == SCHEMA_VERSION or d.get("schema") == "spectra.sequence/1"]
    if not docs:
        raise InputError(f"{', '.join(args)} holds no successful report (only skipped or failed items).")
    context: dict[str, Any] = {"kind": kind, "notes": notes, "sources": args}
    if kind == "model":
        context["model"] = model_section(docs, lines, figs, worst)
        default_title = common_name(docs)
    elif kind == "run":
        points = run_points()
        notes += run_notes
        if not points:
            raise InputError(f"{', '.join(args)} holds no report with a step; name results files by step "
                             f"(runs/step_100/results.jsonl) or pass {param('step_regex')}.")
        n_steps = len({p.step for p in points})
        if n_steps < 2:
            raise InputError(f"{', '.join(args)}: a run needs reports of at least 2 steps; these have 1 (the step "
                             f"is the last number in each results file's path, or {param('step_regex')}'s group 1).")
        context["run"] = run_section(points, figs, MOVED)
        default_title = f"{common_name(docs)}: {n_steps} steps"
    else:
        figs.total = len(docs)
        context["reports"] = [report_section(d, figs) for d in docs]
        default_title = context["reports"][0]["title"] if len(docs) == 1 else f"{len(docs)} reports"
    from spectra_cli.run.summary import summary_format
    from spectra_cli.version import __version__

    page_title = title or default_title
    context.update(title=page_title, version=__version__,
                   schemas=", ".join(s for s in RESULT_SCHEMAS))
    env = jinja2.Environment(loader=jinja2.PackageLoader("spectra_cli", "templates"),
                             autoescape=True, undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True)
    env.filters["num"] = lambda v: "—" if finite(v) is None else registry.shown(float(v), ".4g")
    # a summary's mean or median as the terminal's summary shows it (run.summary.summary_format)
    env.filters["metric"] = lambda v, field: ("—" if finite(v) is None
                                              else registry.shown(float(v), summary_format(field)))
    html = env.get_template("report.html.j2").render(**context)
    if target is not None:
        with atomic_file(target, flag="out") as f:
            f.write(html.encode())
    return ReportPage(html, kind, page_title, figs.count, tuple(args), tuple(notes), target, len(docs))


