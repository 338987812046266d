"""Threshold specs on report fields and their verdicts, for CI (exit 1 when any fails).

A spec is ``FIELD OP VALUE`` with OP one of ``>= <= > < == !=``, ``FIELD between LO HI``, or
``FIELD == VALUE +- TOL`` (also ``±`` or ``tol``). FIELD is a dotted path into the JSON report
(``fit.alpha``, ``rank.participation_ratio``, ``fits.1.alpha``, ``spectrum.eigenvalues.0``).
A baseline comparison ``FIELD=LIMIT`` bounds ``|value - baseline|`` by LIMIT, or by LIMIT % of
``|baseline|`` when it ends in ``%``.
"""

from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass
from typing import Any, Unpack

from spectra_cli import registry
from spectra_cli.analysis.fit_options import FIT_CONSTRAINTS, FIT_KEYWORDS, FitKeywords
from spectra_cli.documents import MISSING, item_name, lookup
from spectra_cli.errors import OptionError, param
from spectra_cli.results import scalar_fields, standard_error
from spectra_cli.sources import formats
from spectra_cli.validate import check_path, check_strings

OPS = (">=", "<=", "==", "!=", ">", "<")
_NUM = r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?"


@dataclass(frozen=True, slots=True)
class Check:
    text: str
    field: str
    op: str  # one of OPS, "between", "max-change"
    bound: tuple[float, ...]
    relative: bool = False
    #: A max-change limit in standard errors of the change (``FIELD=3se``).
    in_se: bool = False

    def describe_bound(self) -> str:
        if self.op == "between":
            return f"between {self.bound[0]:g} and {self.bound[1]:g}"
        if self.op == "==" and len(self.bound) == 2:
            return f"== {self.bound[0]:g} ± {self.bound[1]:g}"
        if self.op == "max-change" and self.in_se:
            return f"|change| <= {self.bound[0]:g} standard errors of the change"
        if self.op == "max-change" and self.relative:
            return f"|change| <= {self.bound[0]:g}% of |baseline|"
        if self.op == "max-change":
            return f"|change from baseline| <= {self.bound[0]:g}"
        return f"{self.op} {self.bound[0]:g}"


@dataclass(frozen=True, slots=True)
class Verdict:
    check: Check
    value: float | None
    baseline: float | None
    passed: bool
    message: str
    #: A max-change limit in standard errors, resolved: K sqrt(se^2 + se_baseline^2).
    limit: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"spec": self.check.text, "field": self.check.field, "op": self.check.op,
                "bound": list(self.check.bound), "relative": self.check.relative, "value": self.value,
                "baseline": self.baseline, "passed": self.passed, "message": self.message,
                **({"in_se": True, "limit": self.limit} if self.check.in_se else {})}


def parse_require(text: str) -> Check:
    t = text.strip()
    m = re.fullmatch(rf"(\S+)\s+between\s+({_NUM})\s+(?:and\s+)?({_NUM})", t)
    if m:
        lo, hi = float(m.group(2)), float(m.group(3))
        if lo > hi:
            raise OptionError(f"{param('require', text)}: the lower bound {lo:g} is above the upper bound {hi:g}.")
        return Check(t, m.group(1), "between", (lo, hi))
    m = re.fullmatch(rf"(\S+)\s*==\s*({_NUM})\s*(?:\+-|±|tol)\s*({_NUM})", t)
    if m:
        tol = float(m.group(3))
        if tol < 0:
            raise OptionError(f"{param('require', text)}: the tolerance must be >= 0.")
        return Check(t, m.group(1), "==", (float(m.group(2)), tol))
    m = re.fullmatch(rf"(\S+?)\s*(>=|<=|==|!=|>|<)\s*({_NUM})", t)
    if m and not math.isfinite(float(m.group(3))):
        raise OptionError(f"{param('require', text)}: {m.group(3)} is not a finite number.")
    if m:
        return Check(t, m.group(1), m.group(2), (float(m.group(3)),))
    raise OptionError(
        f"{param('require', text)} is not FIELD OP NUMBER (OP one of {' '.join(OPS)}), "
        "FIELD between LO HI, or FIELD == VALUE +- TOL."
    )


def parse_max_change(text: str) -> Check:
    m = re.fullmatch(rf"\s*(\S+?)\s*=\s*({_NUM})\s*(%|se|SE)?\s*", text)
    if m and not math.isfinite(float(m.group(2))):
        raise OptionError(f"{param('max_change', text)}: the limit {m.group(2)} is not a finite number.")
    if m and (m.group(3) or "").lower() == "se" and registry.se_path(m.group(1)) is None:
        raise OptionError(f"{param('max_change', text)}: {m.group(1)} has no standard error (the fields that do: "
                          f"{', '.join(x.path for x in registry.METRICS if x.se)}); give an absolute limit.")
    if not m or float(m.group(2)) < 0:
        raise OptionError(f"{param('max_change', text)} is not FIELD=LIMIT, FIELD=PERCENT% or FIELD=Kse (e.g. "
                          "fit.alpha=0.05, fit.alpha=3se).")
    unit = (m.group(3) or "").lower()
    return Check(text.strip(), m.group(1), "max-change", (float(m.group(2)),), relative=unit == "%",
                 in_se=unit == "se")


def _value(doc: dict[str, Any], field: str, what: str) -> float | None:
    v = lookup(doc, field)
    if v is MISSING or isinstance(v, dict | list | str | bool):
        names = sorted(k for k in scalar_fields(doc) if (m := registry.find(k)) is not None and k == m.path
                       and m.kind in ("metric", "diagnostic", "count") and not m.path.endswith(".**"))
        kind = "not a number" if v is not MISSING else "not a field"
        # a field that an option adds to a report (the registry's added_by): the check says which
        asked = " or ".join(param(name, value) for name, value in registry.added_by(field))
        hint = f" ({field} is in the report with {asked})" if v is MISSING and asked else ""
        raise OptionError(
            f"{what} field {field!r} is {kind} of the report{hint}; valid fields: {', '.join(names)} "
            "(and every other numeric leaf, e.g. fits.1.alpha, models.models.broken.alpha_2, spectrum.eigenvalues.0)"
        )
    if v is None:
        # null because the option that computes it was not given (the report's own options say so): the check
        # cannot pass or fail, it was asked of the wrong report
        made = doc.get("options")
        wanted = registry.added_by(field)
        if wanted and isinstance(made, dict) and all(_not_given(made, name, value) for name, value in wanted):
            asked = " or ".join(param(name, value) for name, value in wanted)
            raise OptionError(f"{what} field {field!r} is null: the report was made without {asked}, which computes "
                              f"it; ask for {asked} where the report is made, or check another field.")
    return None if v is None else float(v)


def _not_given(options: dict[str, Any], name: str, value: Any) -> bool:
    """Whether a report's options say it was made without ``name=value`` (a switch: without it set at all);
    False where they do not say (the option is not among them)."""
    if name not in options:
        return False
    return not options[name] if value is True else options[name] != value


def evaluate(doc: dict[str, Any], checks: list[Check], baseline: dict[str, Any] | None = None) -> list[Verdict]:
    """Verdicts in order; a missing (null) value fails its check. Raises OptionError for unknown fields."""
    out = []
    for c in checks:
        value = _value(doc, c.field, param("max_change") if c.op == "max-change" else param("require"))
        base = None
        if c.op == "max-change":
            if baseline is None:
                raise OptionError(f"{param('max_change')} needs {param('baseline')} REPORT.json.")
            base = _value(baseline, c.field, "baseline")
        if c.in_se:
            out.append(_judge_in_se(c, value, base, standard_error(doc, c.field),
                                    standard_error(baseline, c.field) if baseline is not None else None))
            continue
        out.append(_judge(c, value, base))
    return out


def _judge_in_se(c: Check, value: float | None, base: float | None, se: float | None,
                 se_base: float | None) -> Verdict:
    """``|value - base| <= K sqrt(se^2 + se_base^2)``: the change within K standard errors of a change
    between two independent samples."""
    if se is None or se_base is None:
        where = "the report" if se is None else "the baseline"
        return Verdict(c, value, base, False, f"{c.field} has no standard error in {where} (a report made before "
                       "spectra gave one, or a value the report could not give one: its se_missing says why)")
    limit = c.bound[0] * math.hypot(se, se_base)
    verdict = _judge(Check(c.text, c.field, "max-change", (limit,)), value, base)
    return Verdict(c, verdict.value, verdict.baseline, verdict.passed,
                   verdict.message.replace(f"|change from baseline| <= {limit:g}",
                                           f"|change| <= {c.bound[0]:g} SE = {limit:.4g} (SE of the change "
                                           f"sqrt({se:.3g}^2 + {se_base:.3g}^2))"), limit)


def _judge(c: Check, value: float | None, base: float | None) -> Verdict:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return Verdict(c, value, base, False, f"{c.field} is null (not computed or not finite): a null value fails "
                       "its check")
    b = c.bound
    if c.op == "between":
        ok = b[0] <= value <= b[1]
    elif c.op == "max-change":
        if base is None:
            return Verdict(c, value, base, False, f"baseline {c.field} is null")
        limit = b[0] / 100 * abs(base) if c.relative else b[0]
        ok = abs(value - base) <= limit
    elif c.op == "==":
        ok = abs(value - b[0]) <= (b[1] if len(b) == 2 else 0.0)
    else:
        ok = {">=": value >= b[0], "<=": value <= b[0], ">": value > b[0], "<": value < b[0],
              "!=": value != b[0]}[c.op]
    msg = f"{c.field} = {value:.6g} {'satisfies' if ok else 'violates'} {c.describe_bound()}"
    if base is not None:
        msg += f" (baseline {base:.6g}, change {value - base:+.6g})"
    return Verdict(c, value, base, ok, msg)


#: The [fit] keys of a spectra.toml and the type each must have.
#: The reading keys of a config's ``[fit]`` table (with their TOML types); every fit keyword is allowed
#: too, checked by its own constraint (:data:`~spectra_cli.analysis.suite.FIT_CONSTRAINTS`).
FIT_CONFIG: dict[str, tuple[type, ...]] = {
    "uncentered": (bool,), "ddof": (int,), "precision": (str,), "rows": (str,), "sample": (int,), "seed": (int,),
    "column": (str,), "key": (str,), "block_rows": (int,),
}
_TYPE_NAMES = {str: "a string", list: "a list of strings", int: "an integer", bool: "true or false"}


def _typed(value: Any, types: tuple[type, ...], where: str) -> Any:
    ok = any(isinstance(value, t) and not (t is int and isinstance(value, bool)) for t in types)
    if ok and isinstance(value, list):
        ok = all(isinstance(v, str) for v in value)
    if not ok:
        want = " or ".join(_TYPE_NAMES[t] for t in types)
        raise OptionError(f"{where} must be {want} (got {type(value).__name__} {value!r:.60}).")
    return value


def load_config(path: str) -> dict[str, Any]:
    """The ``[check]`` table of a ``spectra.toml`` (and ``[fit]`` options), every value type-checked."""
    import tomllib

    from spectra_cli.sources.base import open_regular

    try:
        with open_regular(path, "config file") as f:
            doc = tomllib.load(f)
    except (tomllib.TOMLDecodeError, UnicodeDecodeError, RecursionError) as exc:
        raise OptionError(f"{path} is not valid TOML: {type(exc).__name__}: {str(exc)[:200]}") from None
    check = doc.get("check", {})
    if not isinstance(check, dict):
        raise OptionError(f"{path}: [check] must be a table.")
    unknown = sorted(set(check) - {"require", "baseline", "max_change"})
    if unknown:
        raise OptionError(f"{path}: unknown key(s) in [check]: {', '.join(unknown)} "
                          "(allowed: require, baseline, max_change).")
    require = check.get("require", [])
    if isinstance(require, str):
        require = [require]
    max_change = check.get("max_change", {})
    if not isinstance(require, list) or not all(isinstance(r, str) for r in require):
        raise OptionError(f"{path}: [check] require must be a list of strings.")
    if not isinstance(max_change, dict):
        raise OptionError(f"{path}: [check] max_change must be a table of FIELD = LIMIT.")
    for k, v in max_change.items():
        if isinstance(v, bool) or not isinstance(v, int | float | str):
            raise OptionError(f"{path}: [check] max_change.{k} must be a number or a string such as '10%'.")
    baseline = check.get("baseline")
    if baseline is not None:
        _typed(baseline, (str,), f"{path}: [check] baseline")
    fit = doc.get("fit", {})
    if not isinstance(fit, dict):
        raise OptionError(f"{path}: [fit] must be a table.")
    allowed = {*FIT_CONFIG, *FIT_KEYWORDS}
    unknown = sorted(set(fit) - allowed)
    if unknown:
        raise OptionError(f"{path}: unknown key(s) in [fit]: {', '.join(unknown)} "
                          f"(allowed: {', '.join(sorted(allowed))}).")
    for k, v in fit.items():
        if k in FIT_CONFIG:
            _typed(v, FIT_CONFIG[k], f"{path}: [fit] {k}")
        else:
            try:
                FIT_CONSTRAINTS[k](k, v)
            except OptionError as exc:
                raise OptionError(f"{path}: [fit] {exc}") from None
    return {
        "require": require,
        "baseline": baseline,
        "max_change": [f"{k}={v}" for k, v in max_change.items()],
        "fit": dict(fit),
    }


def fit_options(config: dict[str, Any], flags: dict[str, Any]) -> dict[str, Any]:
    """Keywords of :func:`spectra_cli.fit` for ``check``: a flag given on the command line (not
    None) wins over the config's ``[fit]`` value, which wins over the default."""
    merged = dict(config)
    if "uncentered" in merged:  # the config's spelling of the flag
        merged["centered"] = not merged.pop("uncentered")
    merged.update({k: v for k, v in flags.items() if v is not None})
    return merged


RESULTS_SCHEMA = "spectra.check-results/1"


def evaluate_results(lines: list[dict[str, Any]], checks: list[Check], baseline: dict[str, Any] | None = None, *,
                     only: str | None = None, exclude: str | None = None) -> dict[str, Any]:
    """Every item of a batch's results checked: one verdict list per item; a failed item fails, a
    skipped tensor (not a weight matrix) is not checked. Unknown fields are refused as for one report.
    ``only`` / ``exclude``: regular expressions searched in the item names (RE2): only the items one matches, or
    all but them (``exclude`` wins); the items left out are listed in ``excluded``."""
    from spectra_cli.validate import check_regex

    keep = check_regex("only", only) if only is not None else None
    drop = check_regex("exclude", exclude) if exclude is not None else None
    items: list[dict[str, Any]] = []
    excluded: list[str] = []
    for doc in lines:
        source = doc.get("source")
        name = doc.get("item") or (source.get("path") if isinstance(source, dict) else None)
        if "skipped" in doc:
            continue
        text = str(name or "")
        if (keep is not None and not keep.search(text)) or (drop is not None and drop.search(text)):
            excluded.append(text)
            continue
        if "error" in doc:
            items.append({"item": name, "passed": False, "error": str(doc["error"]), "results": []})
            continue
        verdicts = evaluate(doc, checks, baseline)
        items.append({"item": name, "passed": all(v.passed for v in verdicts),
                      "results": [v.to_dict() for v in verdicts]})
    if not items:
        if excluded:
            which = " and ".join(param(k) for k, v in (("only", only), ("exclude", exclude)) if v is not None)
            raise OptionError(f"{which} left no item to check (of {len(excluded)}; the patterns are searched in "
                              "each item's whole name, as the JSON's item gives it).")
        raise OptionError("the results hold no analysed item to check (only skipped tensors).")
    return {"schema": RESULTS_SCHEMA, "passed": all(i["passed"] for i in items), "items": items,
            "failed": [i["item"] for i in items if not i["passed"]], "excluded": excluded}


@dataclass(frozen=True, slots=True)
class CheckResult:
    """What :func:`check` found: ``passed`` (the CLI exits 1 when False), the verdicts of one report
    (or, for a batch's results, one entry per item in ``document["items"]``), and the JSON document
    ``spectra check --json`` prints (``to_dict()``), whose ``passed`` is at the top for every input (a
    report also carries its verdicts in ``checks``)."""

    passed: bool
    document: dict[str, Any]
    verdicts: tuple[Verdict, ...] = ()
    option_mismatch: tuple[str, ...] = ()
    items: bool = False
    #: Whether the checked report was computed by this call (an input), not read (a saved report or results): a
    #: read report's warnings were said when it was made.
    computed: bool = False
    #: What the caller should know and the report does not say (a config's [fit] table that a saved report ignores)
    notes: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return dict(self.document)


def check(
    data: str | os.PathLike[str],
    *,
    require: str | list[str] | tuple[str, ...] | None = None,
    config: str | os.PathLike[str] | None = None,
    baseline: str | os.PathLike[str] | None = None,
    max_change: str | list[str] | tuple[str, ...] | None = None,
    centered: bool | None = None,
    key: str | None = None,
    column: str | None = None,
    rows: str | None = None,
    sample: int | None = None,
    seed: int | None = None,
    precision: str | None = None,
    allow_option_mismatch: bool = False,
    only: str | None = None,
    exclude: str | None = None,
    **fitting: Unpack[FitKeywords],
) -> CheckResult:
    """Evaluate thresholds on a report, an input (its ``fit`` report) or every item of a batch's
    results (``.jsonl``); ``data="-"`` reads a report from stdin.

    ``require``: specs ``"FIELD OP VALUE"`` (OP one of ``>= <= > < == !=``), ``"FIELD between LO HI"``
    or ``"FIELD == VALUE +- TOL"``, FIELD a dotted path of the JSON report (``fit.alpha``,
    ``fits.1.alpha``). ``baseline``: a previous report; ``max_change``: ``"FIELD=LIMIT"`` bounds
    ``|value - baseline|`` (``LIMIT%``: relative to ``|baseline|``). ``config``: a ``spectra.toml`` with
    a ``[check]`` table (require, baseline, max_change) and a ``[fit]`` table of fit options; an
    argument given here (not None) wins over ``[fit]``, which wins over fit's defaults. A baseline made
    with other number-changing options is refused unless ``allow_option_mismatch``. ``only`` / ``exclude``
    (a batch's results): regular expressions on the item names, the items to check or to leave out.

    A null value (not computed, or not finite: alpha of a 2 x 384 tensor) fails its check: leave such an item out
    with ``exclude``."""
    from spectra_cli.provenance import check_same_options
    from spectra_cli.results import json_safe
    from spectra_cli.run.compare import as_report, load_report
    from spectra_cli.run.summary import read_results

    data = check_path("data", data)
    require, max_change = check_strings("require", require), check_strings("max_change", max_change)
    config = check_path("config", config) if config is not None else None
    baseline = check_path("baseline", baseline) if baseline is not None else None
    cfg = load_config(config) if config else {"require": [], "baseline": None, "max_change": [], "fit": {}}
    checks = [parse_require(r) for r in [*cfg["require"], *require]]
    checks += [parse_max_change(m) for m in [*cfg["max_change"], *max_change]]
    if not checks:
        raise OptionError(f"check needs at least one {param('require')} or {param('max_change')} (or a [check] "
                          f"table via {param('config')}).")
    base_path = baseline or cfg["baseline"]
    base = load_report(base_path) if base_path else None
    flags = dict(centered=centered, key=key, column=column, rows=rows, sample=sample, seed=seed, precision=precision,
                 **fitting)
    saved = data == "-" or formats.JSON.matches(data) or formats.JSONL.matches(data)
    notes: list[str] = []
    if saved:  # saved reports are checked as they are: options that would make others are not silently dropped
        given = [k for k, v in flags.items() if v is not None]
        if given:
            raise OptionError(f"{param(given[0])} makes a report from an input; {data} holds saved reports, checked "
                              "as they were made (check the input itself to fit it with these options).")
        if cfg["fit"]:
            notes.append(f"the config's [fit] table ({', '.join(sorted(cfg['fit']))}) does not apply to {data}: saved "
                         "reports are checked as they were made")
    if formats.JSONL.matches(data):
        lines = read_results([data])
        doc = evaluate_results(lines, checks, base, only=only, exclude=exclude)
        mismatch: list[str] = []
        checked = {i["item"] for i in doc["items"] if "error" not in i}
        for line in lines:  # (each item checked against the baseline, as one report is)
            if base is not None and "skipped" not in line and "error" not in line and item_name(line) in checked:
                for m in check_same_options(line, base, what=f"{data} ({item_name(line)}) and the baseline "
                                            f"{base_path}", allow=allow_option_mismatch):
                    mismatch += [m] if m not in mismatch else []
        return CheckResult(bool(doc["passed"]), doc, option_mismatch=tuple(mismatch), items=True, notes=tuple(notes))
    if only is not None or exclude is not None:
        raise OptionError(f"{param('only') if only is not None else param('exclude')} chooses items of a batch's "
                          f"results (.jsonl); {data} is one input, checked as one report.")
    report = as_report(data, fit_options(cfg["fit"], flags))
    mismatch = check_same_options(report, base, what=f"{data} and the baseline {base_path}",
                                  allow=allow_option_mismatch) if base is not None else []
    verdicts = evaluate(report, checks, base)
    passed = all(v.passed for v in verdicts)
    report["checks"] = {"passed": passed, "baseline": base_path, "option_mismatch": mismatch,
                        "results": [v.to_dict() for v in verdicts]}
    # the verdict at the top, where a results file's check has it too (``jq -e .passed`` for every input)
    report = {"schema": report["schema"], "passed": passed, **{k: v for k, v in report.items() if k != "schema"}}
    return CheckResult(passed, json_safe(report), tuple(verdicts), tuple(mismatch), computed=not saved,
                       notes=tuple(notes))
