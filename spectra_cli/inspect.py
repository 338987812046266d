"""``spectra info``: what an input holds, read from headers and metadata only."""

from __future__ import annotations

import os
from typing import Any

from spectra_cli.errors import SpectraError
from spectra_cli.results import json_safe
from spectra_cli.sources import open_source


def describe(path: str, *, key: str | None = None, column: str | None = None,
             columns: list[str] | None = None) -> dict[str, Any]:
    """Headers and metadata of ``path``; the matrix spectra would read from it, if any."""
    lower = path.lower()
    doc: dict[str, Any] = {"path": path}
    if lower.endswith(".safetensors") and "::" not in path:
        from spectra_cli.sources.safetensors import list_tensors

        if not os.path.exists(path):
            raise SpectraError(f"no such file or directory: {path}")
        tensors = list_tensors(path)
        doc.update({"format": "safetensors", "tensors": tensors,
                    "matrices": sum(1 for t in tensors if len(t["shape"]) == 2)})
        return json_safe(doc)
    if lower.endswith(".npz") and os.path.exists(path):
        from spectra_cli.sources.npy import npz_listing

        doc["format"] = "npz"
        doc["arrays"] = npz_listing(path)
    try:
        with open_source(path, key=key, column=column, columns=columns) as src:
            info = src.info
            doc.update(info.to_dict())
            doc.update({k: v for k, v in info.details.items() if v is not None and k != "arrays"})
            if hasattr(src, "describe_schema"):
                doc["columns_schema"] = src.describe_schema()
    except SpectraError as exc:
        if "arrays" not in doc:
            raise
        doc["note"] = str(exc)
    return json_safe(doc)
