"""Options travel with numbers: two reports are comparable only when the options that change
their numbers agree (centring, ddof, weights, window, method, model, degree, precision)."""

from __future__ import annotations

from typing import Any

from spectra_cli.errors import OptionError, param

#: Report ``options`` keys whose values change the numbers.
NUMBER_OPTIONS = ("centered", "ddof", "weights", "window", "method", "model", "degree", "auto_tolerance",
                  "precision")


def number_options(doc: dict[str, Any]) -> dict[str, Any]:
    """The number-changing options of a report (absent keys are left out); the weights as their source."""
    opts = doc.get("options") if isinstance(doc, dict) else None
    if not isinstance(opts, dict):
        return {}
    out = {k: opts[k] for k in NUMBER_OPTIONS if k in opts}
    if out.get("centered") is False:
        out.pop("ddof", None)  # the uncentred second moment has no ddof
    w = out.get("weights")
    if isinstance(w, dict):  # the weights' source is what matters, not how it is described
        out["weights"] = {k: v for k, v in w.items() if k != "normalised"}
    return out


def resolved_windows(doc: dict[str, Any]) -> list[list[int]] | None:
    """The rank windows a report's fits used (``[[11, 38]]``), where its window option was fixed (a default or a
    spelled window, not ``auto``): ``default`` and ``11:38`` at d = 384 are one window. None where it cannot tell
    (an automatic window, which the data choose, compares as spelled; a report without fits)."""
    spelled = (doc.get("options") or {}).get("window")
    if not isinstance(spelled, list) or any(isinstance(w, str) and "auto" in w for w in spelled):
        return None
    fits: list[Any] = doc["fits"] if isinstance(doc.get("fits"), list) else [doc.get("fit")]
    out = []
    for f in fits:
        w = f.get("window") if isinstance(f, dict) else None
        if not (isinstance(w, list) and len(w) == 2 and all(isinstance(k, int) and not isinstance(k, bool)
                                                             for k in w)):
            return None
        out.append(list(w))
    return out or None


def differences(a: dict[str, Any], b: dict[str, Any]) -> list[str]:
    """``name: A vs B`` for each number-changing option on which two reports differ. Windows agree when they are
    spelled alike (the default at two widths is the same option) or when both reports' fits used the same ranks
    (:func:`resolved_windows`: ``11:38`` and the default at d = 384); a difference names the ranks too."""
    oa, ob = number_options(a), number_options(b)
    out = []
    for k in NUMBER_OPTIONS:
        if k not in oa or k not in ob or oa[k] == ob[k]:
            continue
        if k == "window":
            wa, wb = resolved_windows(a), resolved_windows(b)
            if wa is not None and wa == wb:
                continue
            if wa is not None and wb is not None:
                out.append(f"window {oa[k]!r} (ranks {wa}) vs {ob[k]!r} (ranks {wb})")
                continue
        out.append(f"{k} {oa[k]!r} vs {ob[k]!r}")
    return out


def check_same_options(a: dict[str, Any], b: dict[str, Any], *, what: str, allow: bool) -> list[str]:
    """Refuse (exit 2) two reports made with different number-changing options, unless ``allow``;
    returns the differences (to be stated in the output when allowed)."""
    diffs = differences(a, b)
    if diffs and not allow:
        raise OptionError(f"{what} were made with different options ({'; '.join(diffs)}); their numbers are not "
                          f"comparable. Use the same options, or pass {param('allow_option_mismatch')}.")
    return diffs
