"""What a figure or the report page may take from a report document written elsewhere.

A report read from a file (``--json``, a batch's JSON Lines) may be hostile or corrupt: every field
a figure or a table of the page uses is checked here for its type and range before any drawing,
and a bad one is an :class:`~spectra_cli.errors.InputError` naming the file, the line and the field
(``r.jsonl line 3: fits.0.window must be two ranks [k1, k2], 1 <= k1 <= k2 (found [5])``). Numbers
drawn on a linear axis must lie within ``±LINEAR_LIMIT``, eigenvalues (drawn on log axes) within
``LOG_LIMIT``: beyond them matplotlib's tick and limit arithmetic overflows, and no real report
has such values.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Sequence
from typing import Any

import numpy as np

from spectra_cli.errors import InputError
from spectra_cli.registry import per_position
from spectra_cli.validate import MAX_STEP

#: Largest magnitude of a number drawn on a linear axis or printed in a table.
LINEAR_LIMIT = 1e100
#: Largest eigenvalue drawn on a log axis (float64's range, less headroom for the axis padding).
LOG_LIMIT = 1e300
MODELS = ("power-law", "log-corrected", "broken")
SCHEMA_VERSION = "spectra.report/1"
#: The other records of a batch's results file: an item that failed, a tensor that is not a matrix.
ERROR_SCHEMA = "spectra.batch-error/1"
SKIP_SCHEMA = "spectra.batch-skipped/1"
RESULT_SCHEMAS = (SCHEMA_VERSION, ERROR_SCHEMA, SKIP_SCHEMA)


class _Check:
    def __init__(self, where: str) -> None:
        self.where = where

    def fail(self, field: str, what: str, value: Any) -> InputError:
        shown = repr(value)
        if len(shown) > 60:
            shown = shown[:57] + "..."
        return InputError(f"{self.where}: {field} {what} (found {shown}).")

    def number(self, value: Any, field: str, *, none: bool = True, lo: float = -LINEAR_LIMIT,
               hi: float = LINEAR_LIMIT, integer: bool = False) -> float | None:
        if value is None and none:
            return None
        if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(float(value)):
            raise self.fail(field, "must be " + ("a whole number" if integer else "a number"), value)
        if integer and float(value) != int(value):
            raise self.fail(field, "must be a whole number", value)
        if not lo <= float(value) <= hi:
            raise self.fail(field, f"must lie in {lo:g}..{hi:g}", value)
        return float(value)

    def numbers(self, value: Any, field: str, *, lo: float = -LINEAR_LIMIT, hi: float = LINEAR_LIMIT,
                none_items: bool = True, limit: int = 50_000_000) -> list[float | None]:
        if not isinstance(value, list):
            raise self.fail(field, "must be a list of numbers", value)
        if len(value) > limit:
            raise self.fail(field, f"holds more than {limit:,} numbers", len(value))
        for i, v in enumerate(value):
            if v is None and none_items:
                continue
            if isinstance(v, bool) or not isinstance(v, int | float) or not (lo <= v <= hi):
                raise self.fail(f"{field}.{i}", f"must be a number in {lo:g}..{hi:g}", v)
        return value

    def section(self, doc: dict[str, Any], key: str, *, none: bool = True) -> dict[str, Any] | None:
        value = doc.get(key)
        if value is None and none:
            return None
        if not isinstance(value, dict):
            raise self.fail(key, "must be an object", value)
        return value

    def text(self, value: Any, field: str) -> None:
        if value is not None and not isinstance(value, str):
            raise self.fail(field, "must be text", value)


def _fit(c: _Check, f: Any, field: str) -> None:
    if not isinstance(f, dict):
        raise c.fail(field, "must be an object", f)
    model = f.get("model", "power-law")
    if model not in MODELS:
        raise c.fail(f"{field}.model", f"must be one of {', '.join(MODELS)}", model)
    c.number(f.get("alpha"), f"{field}.alpha", lo=-1e6, hi=1e6)
    c.number(f.get("intercept"), f"{field}.intercept", none=f.get("alpha") is None, lo=-1e4, hi=1e4)
    c.number(f.get("stderr"), f"{field}.stderr", lo=0)
    c.number(f.get("r2"), f"{field}.r2")
    w = f.get("window")
    if not (isinstance(w, list) and len(w) == 2 and all(isinstance(k, int) and not isinstance(k, bool) for k in w)
            and 1 <= w[0] <= w[1] <= 10**9):
        raise c.fail(f"{field}.window", "must be two ranks [k1, k2], 1 <= k1 <= k2", w)
    if model == "log-corrected":
        c.number(f.get("degree"), f"{field}.degree", lo=1, hi=100, integer=True)
    if model == "broken":
        c.number(f.get("crossover"), f"{field}.crossover", lo=1e-300, hi=1e12)
        c.number(f.get("alpha_2"), f"{field}.alpha_2", lo=-1e6, hi=1e6)
    ci = f.get("ci")
    if ci is not None:
        if not isinstance(ci, dict):
            raise c.fail(f"{field}.ci", "must be an object", ci)
        low = c.number(ci.get("low"), f"{field}.ci.low", none=False, lo=-1e6, hi=1e6)
        high = c.number(ci.get("high"), f"{field}.ci.high", none=False, lo=-1e6, hi=1e6)
        c.number(ci.get("level"), f"{field}.ci.level", lo=0, hi=1)
        c.number(ci.get("bias"), f"{field}.ci.bias")
        if low is not None and high is not None and low > high:
            raise c.fail(f"{field}.ci", "must have low <= high", [low, high])
    pop = f.get("population")
    if pop is not None:
        if not isinstance(pop, dict):
            raise c.fail(f"{field}.population", "must be an object", pop)
        for k in ("alpha", "naive_alpha", "n_over_d", "match_rms"):
            c.number(pop.get(k), f"{field}.population.{k}", lo=-1e6, hi=1e6)
        ci2 = pop.get("ci")
        if ci2 is not None:
            if not (isinstance(ci2, list) and len(ci2) == 2):
                raise c.fail(f"{field}.population.ci", "must be [low, high]", ci2)
            c.numbers(ci2, f"{field}.population.ci", lo=-1e6, hi=1e6)
        w2 = pop.get("window")
        if w2 is not None and not (isinstance(w2, list) and len(w2) == 2):
            raise c.fail(f"{field}.population.window", "must be two ranks", w2)


def _spectrum(c: _Check, spec: Any, field: str) -> None:
    if not isinstance(spec, dict):
        raise c.fail(field, "must be an object", spec)
    lam = c.numbers(spec.get("eigenvalues"), f"{field}.eigenvalues", lo=-LOG_LIMIT, hi=LOG_LIMIT)
    n = len(lam)
    for k in ("usable_rank", "numerical_rank", "sampling_rank", "near_null", "n_samples", "n_features",
              "structural_zeros"):
        c.number(spec.get(k), f"{field}.{k}", lo=0, hi=10**12, integer=True)
    usable = spec.get("usable_rank")
    if usable is not None and usable > n:
        raise c.fail(f"{field}.usable_rank", f"must be at most the {n} eigenvalues listed", usable)
    c.number(spec.get("numerical_floor"), f"{field}.numerical_floor", lo=0, hi=LOG_LIMIT)
    c.text(spec.get("definition"), f"{field}.definition")
    c.text(spec.get("method"), f"{field}.method")


def check_report(doc: Any, where: str) -> dict[str, Any]:
    """``doc`` if every field the figures and the page use has the type and range they need, else
    an :class:`InputError` naming the field (``where``: the file and line)."""
    c = _Check(where)
    if not isinstance(doc, dict):
        raise c.fail("the report", "must be an object", type(doc).__name__)
    if doc.get("schema") == "spectra.sequence/1":
        return _check_sequence(c, doc)
    src = c.section(doc, "source", none=False)
    assert src is not None
    c.text(src.get("path"), "source.path")
    shape = src.get("shape")
    if shape is not None and not (isinstance(shape, list) and all(isinstance(s, int) and not isinstance(s, bool)
                                                                  and s >= 0 for s in shape)):
        raise c.fail("source.shape", "must be a list of sizes", shape)
    for k in ("n_rows", "n_features"):
        c.number(src.get(k), f"source.{k}", lo=0, hi=10**15, integer=True)
    cap = src.get("capture")
    if cap is not None:  # (a snapshot's step makes it a point of a run: a step of another type is no step)
        if not isinstance(cap, dict):
            raise c.fail("source.capture", "must be an object", cap)
        if not isinstance(cap.get("module"), str):
            raise c.fail("source.capture.module", "must be text", cap.get("module"))
        c.number(cap.get("step"), "source.capture.step", lo=0, hi=MAX_STEP, integer=True)
        if cap.get("model") is not None:
            c.text(cap.get("model"), "source.capture.model")
    if doc.get("item") is not None:
        c.text(doc.get("item"), "item")
    _spectrum(c, doc.get("spectrum"), "spectrum")
    fits = doc.get("fits")
    if fits is not None:
        if not isinstance(fits, list):
            raise c.fail("fits", "must be a list of fits", fits)
        for i, f in enumerate(fits):
            _fit(c, f, f"fits.{i}")
    if doc.get("fit") is not None:
        _fit(c, doc["fit"], "fit")
    ls = c.section(doc, "local_slope")
    if ls is not None:
        ranks = c.numbers(ls.get("ranks") or [], "local_slope.ranks", lo=1e-300, hi=1e12, none_items=False)
        vals = c.numbers(ls.get("alpha_local") or [], "local_slope.alpha_local", lo=-1e6, hi=1e6)
        if len(ranks) != len(vals):
            raise c.fail("local_slope", "must have as many alpha_local values as ranks", [len(ranks), len(vals)])
        c.number(ls.get("width_decades"), "local_slope.width_decades", lo=0, hi=100)
    dens = c.section(doc, "density")
    if dens is not None and dens.get("alpha") is not None:
        c.number(dens.get("alpha"), "density.alpha", none=False, lo=1 + 1e-12, hi=1e6)
        c.number(dens.get("xmin"), "density.xmin", none=False, lo=1e-300, hi=LOG_LIMIT)
        c.number(dens.get("n_tail"), "density.n_tail", lo=0, hi=len(doc["spectrum"]["eigenvalues"]), integer=True)
        c.number(dens.get("ks_distance"), "density.ks_distance", lo=0, hi=1)
        c.number(dens.get("stderr"), "density.stderr", lo=0)
    control = c.section(doc, "control")
    if control is not None:
        c.numbers(control.get("eigenvalues") or [], "control.eigenvalues", lo=-LOG_LIMIT, hi=LOG_LIMIT)
    ww = c.section(doc, "weightwatcher")
    if ww is not None:
        c.text(ww.get("verdict"), "weightwatcher.verdict")
        ar = ww.get("alpha_range")
        if ar is not None and not (isinstance(ar, list) and len(ar) == 2):
            raise c.fail("weightwatcher.alpha_range", "must be [lo, hi]", ar)
        if ar is not None:
            c.numbers(ar, "weightwatcher.alpha_range", none_items=False)
    for key in ("rank", "isotropy", "weightwatcher", "density"):
        sec = c.section(doc, key)
        for k, v in (sec or {}).items():
            if isinstance(v, int | float) and not isinstance(v, bool):
                c.number(v, f"{key}.{k}")
    warnings = doc.get("warnings")
    if warnings is not None and not (isinstance(warnings, list) and all(isinstance(w, str) for w in warnings)):
        raise c.fail("warnings", "must be a list of sentences", warnings)
    return doc


def _check_sequence(c: _Check, doc: dict[str, Any]) -> dict[str, Any]:
    src = c.section(doc, "source", none=False)
    assert src is not None
    c.text(src.get("path"), "source.path")
    c.text(src.get("layout"), "source.layout")
    rows = doc.get("per_position")
    if not isinstance(rows, list):
        raise c.fail("per_position", "must be a list", rows)
    numbers = [m.name for m in per_position()]  # (read once, not per position)
    for i, r in enumerate(rows):
        if not isinstance(r, dict):
            raise c.fail(f"per_position.{i}", "must be an object", r)
        c.number(r.get("position"), f"per_position.{i}.position", none=False, lo=0, hi=10**12, integer=True)
        for name in numbers:
            c.number(r.get(name), f"per_position.{i}.{name}")
    parts = [("context", c.section(doc, "context", none=False))]
    controls = doc.get("controls")
    if not isinstance(controls, dict):
        raise c.fail("controls", "must be an object", controls)
    parts += [(f"controls.{k}", v) for k, v in controls.items()]
    for name, part in parts:
        if not isinstance(part, dict):
            raise c.fail(name, "must be an object", part)
        _spectrum(c, part.get("spectrum"), f"{name}.spectrum")
        if part.get("fit") is not None:
            _fit(c, part["fit"], f"{name}.fit")
    lag = c.section(doc, "lag_energy", none=False)
    assert lag is not None
    lags = c.numbers(lag.get("lags"), "lag_energy.lags", lo=0, hi=10**12, none_items=False)
    for k in ("data", "shuffled"):
        if k == "shuffled" and lag.get(k) is None:
            continue
        vals = c.numbers(lag.get(k), f"lag_energy.{k}")
        if len(vals) != len(lags):
            raise c.fail(f"lag_energy.{k}", f"must have one value per lag ({len(lags)})", len(vals))
    warnings = doc.get("warnings")
    if warnings is not None and not (isinstance(warnings, list) and all(isinstance(w, str) for w in warnings)):
        raise c.fail("warnings", "must be a list of sentences", warnings)
    return doc


def predict(fit: dict[str, Any], ranks: np.ndarray) -> np.ndarray:
    """A fit's model eigenvalues at (real) ranks, from its JSON: ``exp(intercept) j^-alpha``, the
    broken law's second slope past its crossover, or the log-corrected law."""
    x = np.log(ranks)
    a, b = float(fit["alpha"]), float(fit["intercept"])
    with np.errstate(over="ignore"):  # a line past float64 is inf: matplotlib leaves it out
        if fit.get("model") == "log-corrected":
            p = int(fit.get("degree") or 1)
            u = (p - 1) * np.log(np.log(ranks + 1.0)) - x if p > 1 else -x
            return np.asarray(np.exp(b + a * u))
        y = b - a * x
        if fit.get("model") == "broken" and finite(fit.get("crossover")) and finite(fit.get("alpha_2")) is not None:
            y = y - (float(fit["alpha_2"]) - a) * np.maximum(0.0, x - math.log(float(fit["crossover"])))
        return np.asarray(np.exp(y))


def natural_key(name: str) -> list[Any]:
    """Sort key that puts ``layer.2`` before ``layer.10`` (the network's order in its names): each run of digits
    by its length without leading zeros, then its digits (no ``int()``: a run of 5,000 digits is past Python's
    conversion limit)."""
    parts = re.split(r"(\d+)", name)
    return [(len(t.lstrip("0")), t.lstrip("0"), t) if i % 2 else t for i, t in enumerate(parts)]


#: A drawn label keeps at most this many characters (its middle cut to an ellipsis): a name of 20 MB in a results
#: file was drawn whole (minutes, gigabytes).
MAX_LABEL = 80


def short_label(name: str, limit: int = MAX_LABEL) -> str:
    """``name`` as a figure may draw it: its head and tail around an ellipsis when longer than ``limit``
    characters, control characters (a NUL in a tensor name) as ``?``, and ``$`` escaped (matplotlib would read
    the text between two as mathematics: warnings on stderr, or an error)."""
    if len(name) > limit:
        keep = limit - 1
        name = name[: keep - keep // 2] + "…" + name[len(name) - keep // 2:]
    name = "".join("?" if ord(ch) < 32 or ord(ch) == 127 else ch for ch in name)
    return name.replace("$", r"\$")


#: Extensions a common suffix of item names may drop (moment files and dumps: ``encoder.layer.4.npz``).
NAME_SUFFIXES = (".npz", ".npy", ".parquet", ".json", ".jsonl", ".safetensors")


def common_parts(items: Sequence[str]) -> tuple[str, str]:
    """What every item name shares and a page may leave out, as ``(prefix, suffix)``: the common folder or
    container (cut after the last ``/``, ``\\`` or ``::`` the names share, so ``moments/encoder.layer.4.npz`` keeps
    ``encoder.layer.4``: a module's name is never cut inside) and a common file extension. Nothing for fewer than
    two names."""
    if len(items) < 2:
        return "", ""
    prefix = os.path.commonprefix(list(items))
    cut = max(prefix.rfind("/") + 1, prefix.rfind("\\") + 1, prefix.rfind("::") + 2 if "::" in prefix else 0)
    suffix = next((x for x in NAME_SUFFIXES if all(i.endswith(x) and len(i) - len(x) > cut for i in items)), "")
    return prefix[:cut], suffix


def layer_names(items: Sequence[str]) -> list[str]:
    """The part of each item name that tells it apart: the common folder or container and file extension
    dropped (:func:`common_parts`, which a page states), the rest whole (up to :data:`MAX_LABEL` characters)."""
    items = [i if len(i) <= 4 * MAX_LABEL else short_label(i, 4 * MAX_LABEL) for i in items]  # (bounded work below)
    if len(items) < 2:
        return [short_label(i.partition("::")[2] or os.path.basename(i) or i) for i in items]
    prefix, suffix = common_parts(items)
    return [short_label(i[len(prefix): len(i) - len(suffix)] or i) for i in items]


def dropped_text(items: Sequence[str]) -> str:
    """What :func:`layer_names` left out of every name, said: ``names without their common "moments/" and
    ".npz"`` (empty when nothing was)."""
    items = [i if len(i) <= 4 * MAX_LABEL else short_label(i, 4 * MAX_LABEL) for i in items]
    parts = [f'"{short_label(p)}"' for p in common_parts(items) if p]
    return f"names without their common {' and '.join(parts)}" if parts else ""


#: A fit whose least-squares error of alpha is this many times its sampling error misses its points (or more than
#: it, with R² below MISFIT_R2): its sampling error (how alpha would move over samples) is then never shown alone.
MISFIT_RATIO = 3.0
MISFIT_R2 = 0.97


def law_misses(se: float | None, ls: float | None, r2: float | None) -> bool:
    """Whether a rank fit's law misses its points: its least-squares error of alpha ``ls`` over
    :data:`MISFIT_RATIO` times the sampling error ``se``, or over it with ``r2`` below :data:`MISFIT_R2`."""
    if se is None or ls is None or not se > 0:
        return False
    return ls > MISFIT_RATIO * se or (ls > se and r2 is not None and r2 < MISFIT_R2)


def alpha_error(fit: dict[str, Any]) -> tuple[float | None, str]:
    """The error to show beside a fit's alpha and its label: the sampling standard error (``SE``, the report's
    ``se``); a report made before the sampling errors: the least-squares one (``LS SE``). Where the law misses its
    points, :func:`alpha_error_text` says the least-squares error beside it."""
    se, ls = finite(fit.get("se")), finite(fit.get("stderr"))
    if se is not None:
        return se, "SE"
    return (ls, "LS SE") if ls is not None and "se" not in fit else (None, "")


def alpha_error_text(fit: dict[str, Any], digits: str = ".3g") -> str:
    """`` ± 0.00105 (SE)``, with ``; least-squares error 0.0173: the power law misses its points`` where it does
    (:func:`law_misses`): the sampling error alone would understate how well alpha is known. Empty without an
    error."""
    err, label = alpha_error(fit)
    if err is None:
        return ""
    text = f" ± {err:{digits}} ({label})"
    ls = finite(fit.get("stderr"))
    if label == "SE" and ls is not None and law_misses(err, ls, finite(fit.get("r2"))):
        text += f"; least-squares error {ls:{digits}}: the power law misses its points"
    return text


def finite(x: Any) -> float | None:
    """``x`` as a float when it is a finite number (not a bool), else None: how every figure, table and
    summary reads a number from a report written elsewhere."""
    if isinstance(x, bool) or not isinstance(x, int | float):
        return None
    f = float(x)
    return f if math.isfinite(f) else None


MISSING = object()


def lookup(doc: Any, field: str) -> Any:
    """The value at a dotted path of a report (``fits.1.alpha``); :data:`MISSING` when there is none."""
    cur = doc
    for part in field.split("."):
        if cur is None:
            return None  # a null section (e.g. no fit on a collapsed spectrum): its fields are null too
        if isinstance(cur, dict) and part in cur:
            cur = cur[part]
        elif isinstance(cur, list) and part.isdigit() and int(part) < len(cur):
            cur = cur[int(part)]
        else:
            return MISSING
    return cur


def item_name(doc: dict[str, Any], default: str = "") -> str:
    """What a batch line is called: its ``item``, else its source's path."""
    src = doc.get("source")
    item = doc.get("item") or (src.get("path") if isinstance(src, dict) else None)
    return str(item) if item else default


def check_report_schema(doc: Any, where: str, *, also: tuple[str, ...] = ()) -> None:
    """Refuse a document that is not a report of the schema this spectra reads (``spectra.report/1``),
    naming the schema it has; ``also``: other record schemas accepted there (a batch's error and skip
    lines)."""
    if not isinstance(doc, dict) or "schema" not in doc:
        raise InputError(f"{where} is not a spectra report (it has no 'schema'; this spectra reads {SCHEMA_VERSION}).")
    schema = doc["schema"]
    if schema != SCHEMA_VERSION and schema not in also:
        if isinstance(schema, str) and schema.startswith("spectra.report/"):
            raise InputError(f"{where} has schema {schema!r}; this spectra reads {SCHEMA_VERSION}.")
        raise InputError(f"{where} is not a spectra report (schema {schema!r}; this spectra reads {SCHEMA_VERSION}).")
    if schema == SCHEMA_VERSION:
        missing = [k for k in ("source", "options", "spectrum") if not isinstance(doc.get(k), dict)]
        if missing:
            raise InputError(f"{where} is a {SCHEMA_VERSION} report without its {', '.join(missing)} section"
                             f"{'s' if len(missing) > 1 else ''} (every report has them; the options say which "
                             "numbers are comparable).")
