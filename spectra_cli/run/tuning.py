"""What fine-tuning changed, in a batch: a layer's change between two checkpoints (``batch --base``), and a PEFT LoRA
adapter's layers: each change ``s B A`` as a report (from the ``r x r`` problem, no dense ``out x in`` matrix), and
with a base checkpoint the base's and the adapted layer's own metrics side by side (read as rows: ``W + s B A`` block
by block). DoRA's change needs the base and is read as rows."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from spectra_cli.sources.adapter import AdaptedSource, AdapterLayer


@dataclass(frozen=True, slots=True)
class AdaptedRows:
    """The rows of an adapted layer (``change=False``: ``W + Delta W``) or of its change (``change=True``), for
    ``fit`` (an input of kind ``"change"``: opened by its :meth:`open`)."""

    layer: AdapterLayer
    change: bool
    #: the report's ``source`` section that describes it
    section: ClassVar[str] = "adapter"

    @property
    def name(self) -> str:
        return self.layer.name

    def fingerprint(self) -> str:
        """The change's is its item's (a DoRA line's, so that resume finds it); the adapted layer's differs."""
        return self.layer.fingerprint() + ("" if self.change else "a")

    def to_dict(self) -> dict[str, Any]:
        return self.layer.to_dict()

    def open(self) -> AdaptedSource:
        return AdaptedSource(self.layer, change=self.change)


def low_rank_report(layer: AdapterLayer, options: dict[str, Any]) -> dict[str, Any]:
    """The report of the change ``s B A`` of one adapted layer: its spectrum (``sigma_i^2 / n`` uncentred, ``n`` the
    rows as the base stores the layer; the rest zero) from the r x r problem, then every fit and rank of ``fit`` on
    it, and WeightWatcher's metrics where the convention or ``density`` asks for them."""
    from spectra_cli.eigen.decomposition import Spectrum, floor_for
    from spectra_cli.options import ReadOptions
    from spectra_cli.run.matrix import report_of_spectrum
    from spectra_cli.sources.base import SourceInfo

    started = time.perf_counter()
    opts = options["options"]
    centered = bool(options.get("change_centered", False))
    ddof = int(options.get("ddof", 1))
    read = ReadOptions.create(centered=centered, ddof=ddof, precision="float64")
    n, d = layer.shape
    sv = layer.singular_values(centered=centered)
    divisor = n - ddof if centered else n
    lam = np.zeros(d)
    lam[: sv.size] = sv[:d] ** 2 / max(divisor, 1)
    lam[::-1].sort()
    spec = Spectrum(eigenvalues=lam, n_samples=n, n_features=d,
                    definition=("eigenvalues of Delta W^T Delta W / n (uncentred)" if not centered else
                                f"eigenvalues of the change's covariance (rows about their mean, / (n - {ddof}))")
                    + f" of the LoRA change, rank at most r = {layer.rank}",
                    precision="float64", numerical_floor=floor_for(lam, d, 0, "float64"),
                    sampling_rank=min(n - 1 if centered else n, d), structural_zeros=max(d - n, 0),
                    method=f"the r x r problem: singular values of s R_B R_A^T (thin QR of B and A^T, r = {layer.rank})"
                           "; the other eigenvalues are exactly zero")
    matrix_opts, said = opts.for_matrix(n, d)
    info = SourceInfo(path=layer.name, format="peft adapter", shape=layer.shape, dtype="float64", n_rows=n,
                      n_features=d, layout=f"LoRA change s B A ({layer.kind}; rows = first axis, as the base stores "
                      "the layer)", key=layer.module)
    return report_of_spectrum(spec, matrix_opts, info=info, fingerprint=layer.fingerprint(), rows_used=n,
                              source_extra={"adapter": layer.to_dict()}, read=read, n_rows=n, factor=float(divisor),
                              said=said, started=started).to_dict()


def adapter_line(layer: AdapterLayer, options: dict[str, Any]) -> dict[str, Any]:
    """One adapted layer's line: the change's report (the r x r problem, or DoRA's rows), and with a base the base's
    and the adapted layer's own metrics side by side (``base_model``)."""
    from spectra_cli.run import matrix as api

    own = {k: v for k, v in options.items() if k != "change_centered"}
    if layer.dora:
        doc = api.fit(AdaptedRows(layer, change=True),
                      **{**own, "centered": options.get("change_centered", False)}).to_dict()
    else:
        doc = low_rank_report(layer, options)
    if layer.base is not None:
        a = api.fit(layer.base, **own).to_dict()
        b = api.fit(AdaptedRows(layer, change=False), **own).to_dict()
        doc["base_model"] = side_by_side(a, b, base=layer.base, fine_tune=f"{layer.name} (W + the adapter's change)",
                                         relative=(b["source"].get("adapter") or {}).get("relative_change"))
    return doc


#: The fields of the base's and the fine-tune's own reports set side by side in a change's line (the batch table's).
SIDE_VIEW = "batch"


def change_line(name: str, base: str, options: dict[str, Any]) -> dict[str, Any]:
    """The report of the change ``name - base`` (centred as ``options["change_centered"]`` says), with the base's and
    the fine-tune's own metrics side by side under ``base_model`` (:func:`side_by_side`)."""
    from spectra_cli.run import matrix as api
    from spectra_cli.sources.change import Change

    own = {k: v for k, v in options.items() if k != "change_centered"}
    doc = api.fit(Change(name, base), **{**own, "centered": options.get("change_centered", False)}).to_dict()
    a, b = api.fit(base, **own).to_dict(), api.fit(name, **own).to_dict()
    doc["base_model"] = side_by_side(a, b, base=base, fine_tune=name,
                                     relative=(doc["source"].get("change") or {}).get("relative_change"))
    return doc


def side_by_side(a: dict[str, Any], b: dict[str, Any], *, base: str, fine_tune: str,
                 relative: float | None = None) -> dict[str, Any]:
    """The base's report ``a`` and the fine-tune's ``b``: each field of the batch table, the change ``b - a`` and,
    where both give a standard error, compare's test (Benjamini-Hochberg over these fields); ``relative``: the
    change's size ``||Delta W||_F / ||W_base||_F``."""
    from spectra_cli import registry
    from spectra_cli.run.compare import FDR, compare_doc, compare_rows

    shown = {m.path for m in registry.view(SIDE_VIEW) if m.section not in ("source",)}
    rows = [r for r in compare_rows(a, b) if registry.canonical(r.field) in shown]
    side = compare_doc(a, b, rows, fdr=FDR)
    return {"base": base, "fine_tune": fine_tune, "relative_change": relative,
            "definition": "a = the base's layer, b = the fine-tuned one, each analysed alone as the batch's other "
                          "items; diff = b - a",
            "significance": {**side["significance"], "method": "spectra compare's, over these fields"},
            "metrics": side["metrics"]}
