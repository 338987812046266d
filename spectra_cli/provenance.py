"""Options travel with numbers: two reports are comparable only when the options that change
their numbers agree (centring, ddof, weights, window, method, model, degree, precision)."""

from __future__ import annotations

from typing import Any

from spectra_cli.errors import OptionError, param

#: Report ``options`` keys whose values change the numbers.
NUMBER_OPTIONS = ("centered", "ddof", "weights", "window", "method", "model", "degree", "auto_tolerance",
                  "precision")


def number_options(doc: dict[str, Any]) -> dict[str, Any]:
    """The number-changing options of a report (absent keys are left out)."""
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


def differences(a: dict[str, Any], b: dict[str, Any]) -> list[str]:
    """``name: A vs B`` for each number-changing option on which two reports differ."""
    oa, ob = number_options(a), number_options(b)
    return [f"{k} {oa.get(k)!r} vs {ob.get(k)!r}" for k in NUMBER_OPTIONS
            if k in oa and k in ob and oa[k] != ob[k]]


def check_same_options(a: dict[str, Any], b: dict[str, Any], *, what: str, allow: bool) -> list[str]:
    """Refuse (exit 2) two reports made with different number-changing options, unless ``allow``;
    returns the differences (to be stated in the output when allowed)."""
    diffs = differences(a, b)
    if diffs and not allow:
        raise OptionError(f"{what} were made with different options ({'; '.join(diffs)}); their numbers are not "
                          f"comparable. Use the same options, or pass {param('allow_option_mismatch')}.")
    return diffs
