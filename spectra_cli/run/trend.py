"""``spectra trend``: metrics of a batch's JSON Lines against a step parsed from item names.

The step is the last run of digits in the item's file name (the part before ``::``, without
its directory and extension): ``runs/a/step_1500.npy`` -> 1500, ``ckpt-200.safetensors::w`` -> 200.
``--step-regex`` overrides it with a regular expression whose first group is the step, matched
against the whole item name. The series is the item with the step removed (a tensor name, or the
path pattern), so several tensors of a run of checkpoints give one line each.
"""

from __future__ import annotations

import math
import os
import re
from collections import defaultdict
from dataclasses import dataclass
from typing import Any

from spectra_cli.documents import LINEAR_LIMIT, MISSING, item_name, lookup
from spectra_cli.errors import InputError, Message, OptionError, param, raw
from spectra_cli.results import uncertainty
from spectra_cli.sources import formats
from spectra_cli.validate import MAX_STEP, Pattern, check_paths, check_regex, check_strings

TREND_SCHEMA = "spectra.trend/1"


@dataclass(frozen=True, slots=True)
class Point:
    series: str
    step: float
    item: str
    values: dict[str, float | None]
    #: each metric's interval in its report (``--ci``'s bootstrap interval, or ± the standard error)
    intervals: dict[str, tuple[float, float] | None] | None = None


#: A path part that names a step: ``step_100``, ``step-100`` or ``step100`` (a folder, or a file's stem).
STEP_PART = re.compile(r"(?:^|[/\\])step[_-]?(\d+)(?=[/\\.]|$)", re.IGNORECASE)


def step_number(text: str, where: str) -> float:
    """The step a number in a name stands for (``where``: which name, for the message): a finite number from 0 to
    :data:`~spectra_cli.validate.MAX_STEP`; a longer run of digits (a hash, a timestamp in nanoseconds, 400 digits)
    is refused, never read as infinity (which the JSON would print as null)."""
    shown = text if len(text) <= 40 else f"{text[:20]}...({len(text):,} characters)"
    try:
        step = float(text) if len(text) <= 40 else math.inf
    except ValueError:
        raise InputError(f"{where}: {shown!r} is not a number.") from None
    if not (math.isfinite(step) and 0 <= step <= MAX_STEP):
        raise InputError(f"{where}: {shown!r} is no training step (a step is a number from 0 to {MAX_STEP:,}); "
                         f"pass {param('step_regex')} to take the step from another part of the name.")
    return step


def step_of(item: str, pattern: Pattern | None) -> tuple[float, str]:
    if pattern is not None:
        m = pattern.search(item)
        if not m or not m.groups() or m.group(1) is None:
            raise InputError(f"{param('step_regex')} found no step in item {item!r}; give a regex whose group 1 "
                             "matches the step in every item's name.")
        step = step_number(m.group(1), f"{param('step_regex')} matched in item {item[:200]!r}")
        return step, item[: m.start(1)] + "*" + item[m.end(1):]
    file, sep, tensor = item.partition("::")
    named = list(STEP_PART.finditer(file))  # a path part step_N (a capture's snapshot folder, say) names the step
    if named:
        m = named[-1]
        series = file[: m.start(1)] + "*" + file[m.end(1):] + (sep + tensor if sep else "")
        return step_number(m.group(1), f"item {item[:200]!r}"), series
    stem = os.path.splitext(os.path.basename(file))[0]
    runs = list(re.finditer(r"\d+", stem))
    if not runs:
        raise InputError(
            f"item {item!r} has no number in its file name to use as the step; pass {param('step_regex')}."
        )
    last = runs[-1]
    series_file = os.path.join(os.path.dirname(file), stem[: last.start()] + "*" + stem[last.end():])
    return step_number(last.group(), f"item {item[:200]!r}"), series_file + (sep + tensor if sep else "")


def doc_step(doc: dict[str, Any], item: str, pattern: Pattern | None) -> tuple[float, str]:
    """A result's step and series: a captured snapshot's own (``source.capture``: the step ``save(step=N)``
    recorded, the module as the series; a snapshot saved without a step is no point of a run), else
    :func:`step_of` of its item name (``--step-regex`` overrides both)."""
    source = doc.get("source")
    cap = source.get("capture") if isinstance(source, dict) else None
    if pattern is None and isinstance(cap, dict) and isinstance(cap.get("module"), str):
        step = cap.get("step")
        if step is None:
            raise InputError(f"item {item!r} is a capture of module {cap['module']!r} saved without a step; it is "
                             "no point of a run (capture.save(folder, step=N) records one).")
        if isinstance(step, bool) or not isinstance(step, int) or not 0 <= step <= MAX_STEP:
            shown = repr(step) if len(repr(step)) <= 40 else repr(step)[:37] + "..."
            raise InputError(f"item {item!r}: its source.capture.step {shown} is no training step (a whole number "
                             f"from 0 to {MAX_STEP:,}).")
        return float(step), cap["module"]
    return step_of(item, pattern)


#: A path part that names a checkpoint: ``step_100``, ``ckpt-200``, ``checkpoint-300``, ``epoch_4``, ``iter500``.
CHECKPOINT_PART = re.compile(
    r"(?:^|[/\\_.-])(?:step|ckpt|checkpoint|epoch|iter|iteration)[_=-]?(\d{1,18})(?=[/\\._-]|$)", re.IGNORECASE)


def refuse_repeated(paths: list[str], each: str) -> None:
    """Refuse a results file named twice (the same file by its real path): each is ``each``."""
    seen: dict[str, str] = {}
    for p in paths:
        real = os.path.realpath(p)
        if real in seen:
            raise OptionError(f"{p} is given twice ({seen[real]} is the same file): each results file is {each}.")
        seen[real] = p


def file_step(path: str, pattern: Pattern | None = None) -> float | None:
    """The step of a results file: group 1 of ``pattern`` (``--step-regex``) on its path; else the last path
    part that names a checkpoint (``runs/step_100/results_fp16.jsonl`` -> 100); else the last run of digits in
    its folders, then in its file name. None when there is none."""
    def number(text: str | None) -> float | None:  # (no step: step_number's refusal, or no group)
        try:
            return step_number(text, path) if text is not None else None
        except InputError:
            return None

    if pattern is not None:
        m = pattern.search(path)
        return number(m.group(1)) if m and m.groups() else None
    named = list(CHECKPOINT_PART.finditer(path))
    if named:
        return number(named[-1].group(1))
    folder, name = os.path.split(os.path.splitext(path)[0])
    runs = re.findall(r"\d+", folder) or re.findall(r"\d+", name)
    return number(runs[-1]) if runs else None


def run_steps(files: list[tuple[str, list[dict[str, Any]]]], pattern: Pattern | None,
              notes: list[str]) -> list[tuple[str, float, dict[str, Any]]]:
    """The (series, step, report) of a run, the one rule ``trend`` and ``report`` share: several results
    files are the steps of a run (each file's step from its path, the series its items' tensor or file
    names); in one file, each item's step (:func:`doc_step`; with ``pattern``, every item must match it).
    Skipped tensors are left out; failed items too, with a note."""
    out: list[tuple[str, float, dict[str, Any]]] = []
    usable = [[d for d in lines if _usable(d, notes)] for _, lines in files]
    notes += options_note([d for docs in usable for d in docs])
    if len(files) > 1:
        empty = [path for (path, _), docs in zip(files, usable, strict=True) if not docs]
        if empty:
            notes.append(Message(f"left out {', '.join(empty)}: no successful report in it (rerun its batch with "
                                 f"{param('resume', True)} to retry failed items)"))
            kept = [(f, docs) for f, docs in zip(files, usable, strict=True) if docs]
            files, usable = [f for f, _ in kept], [docs for _, docs in kept]
        steps = [file_step(path, pattern) for path, _ in files]
        if pattern is not None and any(s is None for s in steps):
            bad = next(path for (path, _), st in zip(files, steps, strict=True) if st is None)
            raise InputError(f"{param('step_regex')} found no step in the path {bad!r}; give a regex whose group 1 "
                             "matches the step in every results file's path.")
        if any(s is None for s in steps) or len(set(steps)) != len(steps):
            notes.append(Message("the results files' paths do not each carry a distinct step number: their order is "
                                 "the step; put the step in each path (runs/step_100/results.jsonl) or pass "
                                 f"{param('step_regex')}"))
            steps = [float(i) for i in range(len(files))]
        names = series_names([lines for _, lines in files])  # (one rule for the whole run, failed items counted)
        for docs, step in zip(usable, steps, strict=True):
            for doc in docs:
                out.append((names[id(doc)], float(step or 0.0), doc))
        return out
    for doc in usable[0]:
        try:
            step, series = doc_step(doc, item_name(doc, "?"), pattern)
        except InputError as exc:
            if pattern is not None:  # asked for: every item must match it
                raise
            notes.append(Message(f"left out {item_name(doc, '?')}: {raw(exc)}"))
            continue
        out.append((series, step, doc))
    return out


def options_note(docs: list[dict[str, Any]]) -> list[str]:
    """A word where a run's reports were made with different number-changing options (a window, the centring):
    a change between their steps may then be the options', not the model's."""
    from spectra_cli.provenance import differences

    said: list[str] = []
    for doc in docs[1:]:
        said += [d for d in differences(docs[0], doc) if d not in said]
    if not said:
        return []
    return [f"the reports were made with different options ({'; '.join(said[:3])}): a change between steps may be "
            "the options', not the model's; make every step with the same options"]


def series_names(steps: list[list[dict[str, Any]]]) -> dict[int, str]:
    """The series of every report of a run (``steps``: each results file's lines, failed and skipped ones
    included), by ``id`` of the line, one rule for the whole run: a checkpoint's tensor names; else the file
    names, or where two items of one step share a file name (``step_100/encoder.layer.0/acts.npy`` and
    ``step_100/encoder.layer.4/acts.npy``), their paths less the folder every item of their step shares."""
    from spectra_cli.documents import common_parts

    parts = [[item_name(doc, "?").partition("::") for doc in docs] for docs in steps]
    clash = any(len({os.path.basename(f) for f, sep, _ in ps if not sep}) < sum(1 for _, sep, _ in ps if not sep)
                for ps in parts)
    out: dict[int, str] = {}
    for docs, ps in zip(steps, parts, strict=True):
        prefix = common_parts([f for f, sep, _ in ps if not sep])[0] if clash else ""
        for doc, (file, sep, tensor) in zip(docs, ps, strict=True):
            out[id(doc)] = tensor if sep else file[len(prefix):] if clash else os.path.basename(file)
    return out


def _usable(doc: dict[str, Any], notes: list[str]) -> bool:
    if "skipped" in doc:
        return False  # not a weight matrix (spectra batch records why)
    if "error" in doc:
        notes.append(Message(f"{item_name(doc, '?')}: failed in the batch ({str(doc['error'])[:200]}); left out "
                             f"(rerun the batch with {param('resume', True)} to retry it)"))
        return False
    return True


def headline(docs: list[dict[str, Any]]) -> list[str]:
    """The registry's headline metrics (alpha, spikes, the effective ranks, the top-PC share) that some report of
    ``docs`` holds as a number: what ``trend`` shows without a ``metric``."""
    from spectra_cli import registry

    return [m.path for m in registry.view("headline")
            if any(isinstance(lookup(d, m.path), int | float) and not isinstance(lookup(d, m.path), bool)
                   for d in docs)]


def load_points(paths: list[str], metrics: list[str], step_regex: str | None) -> tuple[list[Point], list[str]]:
    """The points of ``metrics`` (the headline ones the reports hold where none is named: the list is filled in
    place) against the step."""
    pattern = check_regex("step_regex", step_regex) if step_regex else None
    from spectra_cli.run.summary import iter_results

    files: list[tuple[str, list[dict[str, Any]]]] = []
    for path in paths:
        lines = []
        for i, doc in iter_results(path):
            source = doc.get("source")
            item = doc.get("item") or (source.get("path") if isinstance(source, dict) else None)
            if not isinstance(item, str) or not item:
                raise InputError(f"{path} line {i} has no item name.")
            lines.append({**doc, "_line": i})
        files.append((path, lines))
    chosen = bool(metrics)  # (named: each must be a number where it is given; the headline ones may be absent)
    if not metrics:
        analysed = [d for _, lines in files for d in lines if "skipped" not in d and "error" not in d]
        if not analysed:
            raise InputError(f"{', '.join(paths)} hold(s) no successful report (every item failed or was skipped).")
        metrics += headline(analysed)
        if not metrics:
            raise OptionError(f"the reports hold none of the headline metrics (alpha, the effective ranks, the "
                              f"top-PC share): name a field they hold with {param('metric')}.")
    notes: list[str] = []
    points: list[Point] = []
    for series, step, doc in run_steps(files, pattern, notes):
        where = f"{paths[0] if len(paths) == 1 else item_name(doc, '?')} line {doc['_line']}"
        values: dict[str, float | None] = {}
        for m in metrics:
            v = lookup(doc, m)
            if v is MISSING and not chosen:
                v = None  # (a headline metric this report lacks: a dash)
            if isinstance(v, bool) or not (v is None or isinstance(v, int | float)):
                raise OptionError(f"{param('metric', m)} is not a number in the reports ({where}).")
            if v is not None and not abs(float(v)) <= LINEAR_LIMIT:  # (nan too) beyond what a figure can draw
                raise InputError(f"{where}: {m} is {v!r}, not a number a report holds (|x| <= {LINEAR_LIMIT:g}): the "
                                 "results file is corrupt.")
            values[m] = None if v is None else float(v)
        intervals = {m: uncertainty(doc, m) for m in metrics}
        intervals = {m: iv if iv is not None and all(abs(x) <= LINEAR_LIMIT for x in iv) else None
                     for m, iv in intervals.items()}
        points.append(Point(series, step, item_name(doc, "?"), values, intervals))
    if not points:
        why = f" ({raw(notes[0])})" if notes else ""
        raise InputError(f"{', '.join(paths)} hold(s) no successful report with a step{why}.")
    points.sort(key=lambda p: (p.series, p.step))
    return points, notes


def trend_doc(points: list[Point], metrics: list[str], notes: list[str]) -> dict[str, Any]:
    from spectra_cli.results import json_safe

    series: dict[str, list[Point]] = defaultdict(list)
    for p in points:
        series[p.series].append(p)
    return json_safe({
        "schema": TREND_SCHEMA,
        "metrics": metrics,
        "step_rule": "one results file: each item's step, the last path part step_N, else the last run of digits "
                     "in its file name (--step-regex: its group 1 on the item); several results files: each file's, "
                     "the last path part naming a checkpoint (step_N, ckpt-N, checkpoint-N, epoch_N, iter_N), else "
                     "the last number in its folders, then its name (--step-regex: its group 1 on the path)",
        "interval": "each metric's interval in its report: the bootstrap interval of an alpha fitted with --ci, "
                    "else the value +- its standard error; null when the report has neither",
        "series": [{"series": name, "points": [{"step": p.step, "item": p.item, **p.values,
                                                "intervals": {m: list(v) if v else None
                                                              for m, v in (p.intervals or {}).items()}}
                                               for p in pts]}
                   for name, pts in series.items()],
        "notes": notes,
    })


@dataclass(frozen=True, slots=True)
class TrendResult:
    """Metrics of a batch against the step in its item names: ``points`` (sorted by series and
    step), ``notes`` (items left out, and why) and the JSON document (``to_dict()``)."""

    document: dict[str, Any]
    points: tuple[Point, ...]
    metrics: tuple[str, ...]
    notes: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return dict(self.document)


def trend(paths: str | os.PathLike[str] | list[str] | tuple[str, ...], *,
          metric: str | list[str] | tuple[str, ...] = (), step_regex: str | None = None) -> TrendResult:
    """Each ``metric`` (a dotted report field, e.g. ``fit.alpha``) of a run's results against the step,
    by the rule :func:`spectra_cli.report` has: several results files (``paths``) are the steps of a run,
    each file's step the last number in its path; in one file, each item's step is the last run of
    digits in its file name, or group 1 of ``step_regex``. Items of different names
    (``run-a/step_100.npy``, ``run-b/step_100.npy``) are separate series; failed and skipped items are
    left out with a note. No ``metric``: the headline metrics the reports hold (alpha, the spikes' count, the
    participation ratio, the entropy rank, the top-PC share)."""
    files = check_paths("paths", paths)
    single = next((f for f in files if formats.JSON.matches(f)), None)
    if single is not None:
        raise InputError(f"{single} is a single report; trend reads a batch's results (.jsonl: one report a line, "
                         "the steps in the item names, or one results file per step).")
    metrics = list(check_strings("metric", metric))
    if step_regex is not None and not isinstance(step_regex, str):
        raise OptionError(f"{param('step_regex', step_regex, show=True)} must be a string.")
    refuse_repeated(files, "one step of a run")
    points, notes = load_points(files, metrics, step_regex)
    return TrendResult(trend_doc(points, metrics, notes), tuple(points), tuple(metrics), tuple(notes))
