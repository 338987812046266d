"""What :func:`spectra_cli.batch` returns: its lines, and the views of them (rows, a DataFrame, a
notebook table, the model-level summary), WeightWatcher's under its convention."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from spectra_cli import registry
from spectra_cli.options import Convention


@dataclass(frozen=True, slots=True)
class BatchResult:
    """What :func:`batch` did: one JSON line (a report, or a failed item's error) per item run, in
    the order they finished; the tensors skipped (not weight matrices), and why; what ``resume``
    kept; notes. Iterating gives every line: the reports and failed items, then the skipped tensors
    (``.failed``, ``.skipped``); ``summary()`` is the model-level summary of ``spectra batch --summary``;
    ``to_pandas()`` a DataFrame of one flat row per item (WeightWatcher's columns under its convention);
    in Jupyter, a table."""

    results: tuple[dict[str, Any], ...]
    skipped: tuple[dict[str, Any], ...] = ()
    items: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()
    resumed: int = 0
    option_mismatch: tuple[str, ...] = ()
    jsonl: str | None = None
    skip_note: str | None = None
    retried: int = 0
    convention: str = "spectra"

    @property
    def is_weightwatcher(self) -> bool:
        """Whether its lines follow WeightWatcher's convention (then its rows, table and summary are
        WeightWatcher's)."""
        return Convention.of(self.convention).is_weightwatcher

    def __iter__(self) -> Iterator[dict[str, Any]]:
        return iter((*self.results, *self.skipped))

    def __len__(self) -> int:
        return len(self.results) + len(self.skipped)

    def rows(self) -> list[dict[str, Any]]:
        """One flat dict per item: ``item``, ``status`` (ok, failed, skipped), ``why``, ``shape`` and the
        headline report fields by their dotted names; under ``convention="weightwatcher"``, WeightWatcher's
        ``analyze()`` columns, one row per layer it analyses (:mod:`spectra_cli.frames`)."""
        from spectra_cli.frames import batch_rows, ww_rows

        lines = [*self.results, *self.skipped]
        return ww_rows(lines) if self.is_weightwatcher else batch_rows(lines)

    def to_pandas(self, *, skipped: bool = False) -> Any:
        """:meth:`rows` as a pandas DataFrame (pandas is the optional extra ``pandas``): the items analysed
        (and failed), each reported number a numeric column; ``skipped=True`` adds the tensors that are
        not matrices (status ``skipped``, with ``why``)."""
        from spectra_cli.analysis.weightwatcher import ANALYZE_COLUMNS, EXTRA_COLUMNS
        from spectra_cli.frames import frame

        rows = self.rows()
        if not skipped:
            rows = [r for r in rows if r.get("status") != "skipped"]
        return frame(rows, (*ANALYZE_COLUMNS, *EXTRA_COLUMNS) if self.is_weightwatcher else None)

    def _repr_html_(self) -> str:
        from spectra_cli.frames import html_table

        rows = self.rows()
        from spectra_cli.analysis.weightwatcher import TABLE_COLUMNS

        cols = (["longname", "N", "M", *TABLE_COLUMNS, "warning"] if self.is_weightwatcher
                else ["item", "status", "shape", *(m.path for m in registry.view("row")  # (where an item holds it)
                                                   if any(r.get(m.path) is not None for r in rows)), "why"])
        return html_table(rows, cols, title=f"spectra batch: {len(self.results)} item(s), {len(self.failed)} "
                                            f"failed, {len(self.skipped)} skipped")

    @property
    def failed(self) -> list[dict[str, Any]]:
        """The lines of items that failed (each with its ``error``)."""
        return [r for r in self.results if "error" in r]

    def summary(self) -> dict[str, Any]:
        """Layers per verdict, the mean and median of each metric (plain and parameter-weighted), the
        worst layers: of every line in ``jsonl`` when there is one (resumed items included), else of
        this run's lines."""
        from spectra_cli.run.summary import read_results, summarize

        lines = read_results([self.jsonl]) if self.jsonl else [*self.skipped, *self.results]
        doc = summarize(lines).to_dict()
        ww = doc.get("weightwatcher_summary")
        if self.is_weightwatcher and ww:  # get_summary()'s keys, at the top as it has them
            doc.update({k: v for k, v in ww.items() if k != "layers"})
        return dict(doc)

    def to_dict(self) -> dict[str, Any]:
        return {"results": list(self.results), "skipped": list(self.skipped), "notes": list(self.notes),
                "resumed": self.resumed, "option_mismatch": list(self.option_mismatch), "jsonl": self.jsonl}
