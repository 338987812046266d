"""``spectra info``: what an input holds, read from headers and metadata only."""

from __future__ import annotations

import os
from typing import Any

from spectra_cli.errors import SpectraError
from spectra_cli.results import json_safe
from spectra_cli.sources import formats, open_dataset, open_source
from spectra_cli.sources.dataset import Dataset, resolve


def info(paths: str | os.PathLike[str] | list[str], *, key: str | None = None, column: str | None = None,
         columns: list[str] | None = None) -> dict[str, Any]:
    """What an input holds, read from headers and metadata only (no row is read): format, stored
    shape, dtype and the matrix spectra would read from it (``n_rows`` x ``n_features``, its layout);
    the tensors of a ``.safetensors`` checkpoint, the arrays of an ``.npz``, the columns and row groups
    of Parquet. Several paths (or a glob) are described as the one dataset they make, with every
    member and its fingerprint listed. ``key``/``column``/``columns`` choose as for ``spectra_cli.fit``."""
    one = paths[0] if isinstance(paths, list | tuple) and len(paths) == 1 else paths
    if isinstance(one, str | os.PathLike) and os.path.isdir(one) and _is_checkpoint_dir(os.fspath(one)):
        return _describe_checkpoint(os.fspath(one))
    dataset = resolve(paths)
    if dataset.kind != "single":
        return _describe_dataset(dataset, key=key, column=column, columns=columns)
    path = dataset.arguments[0]
    doc: dict[str, Any] = {"path": path}
    if formats.SAFETENSORS.matches(path) and "::" not in path:
        from spectra_cli.sources.safetensors import list_tensors

        if not os.path.exists(path):
            raise SpectraError(f"no such file or directory: {path}")
        tensors = list_tensors(path)
        doc.update({"format": formats.SAFETENSORS.name, "tensors": tensors, "matrices": _matrices(tensors)})
        return json_safe(doc)
    if formats.NPZ.matches(path) and os.path.exists(path):
        from spectra_cli.sources.npy import npz_listing

        doc["format"] = formats.NPZ.name
        doc["arrays"] = npz_listing(path)
        bad = [a for a in doc["arrays"] if "error" in a]
        if bad:
            doc["warnings"] = [f"{a['error']}: this member cannot be read (an encrypted member, an unknown "
                               "compression method, or a corrupt one)" for a in bad]
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


def _describe_dataset(dataset: Dataset, *, key: str | None, column: str | None,
                      columns: list[str] | None) -> dict[str, Any]:
    doc: dict[str, Any] = {"path": dataset.name, "files": len(dataset.members),
                           "members": dataset.members_report(), "fingerprint": dataset.fingerprint()}
    if dataset.is_moments:
        from spectra_cli.sources.npy import npz_listing

        widths: dict[str, list[int]] = {p: next((a["shape"] for a in npz_listing(p) if a["key"] == "m2"), [])
                                       for p in dataset.member_paths()}
        files = f"{len(widths)} moment file{'s' if len(widths) != 1 else ''}"
        doc.update({"format": formats.MOMENTS.name, "layout": f"{files} (accumulated moments, no rows)",
                    "m2_shapes": [list(s) for s in widths.values()]})
        if len({tuple(s) for s in widths.values()}) > 1:
            doc["warnings"] = ["these moment files have different widths (" + ", ".join(
                f"{os.path.basename(p)}: d = {s[0] if s else '?'}" for p, s in widths.items()) + "); fit and spectrum "
                "refuse to merge them"]
        return json_safe(doc)
    with open_dataset(dataset, key=key, column=column, columns=columns) as src:
        info = src.info
        doc.update({k: v for k, v in info.to_dict().items() if k != "path"})
        doc.update({k: v for k, v in info.details.items() if v is not None and k != "arrays"})
        if hasattr(src, "describe_schema"):
            doc["columns_schema"] = src.describe_schema()
    return json_safe(doc)


def _is_checkpoint_dir(path: str) -> bool:
    """A folder of ``.safetensors`` shards (with or without an index) and no Parquet or ``.npy`` data (the
    shards' names matched as written, as the safetensors reader lists them)."""
    names = os.listdir(path)
    return any(n.endswith(formats.SAFETENSORS.extension) for n in names) and not any(
        formats.by_path(n, (formats.PARQUET, formats.NPY)) is not None for n in names)


def _describe_checkpoint(path: str) -> dict[str, Any]:
    """The tensors of every shard of a checkpoint folder (as ``spectra batch`` reads them)."""
    from spectra_cli.sources.safetensors import list_tensors, shard_files

    shards = shard_files(path)
    tensors = [{**t, "name": f"{os.path.basename(f)}::{t['name']}"} for f in shards for t in list_tensors(f)]
    return json_safe({"path": path, "format": formats.SAFETENSORS.name, "files": len(shards),
                      "layout": f"checkpoint of {len(shards)} shard{'s' if len(shards) != 1 else ''}",
                      "tensors": tensors, "matrices": _matrices(tensors)})


def _matrices(tensors: list[dict[str, Any]]) -> int:
    """The weight matrices among a checkpoint's tensors, by the rule of ``batch`` (an integer buffer, a
    vector or a kernel is not one)."""
    from spectra_cli.sources.safetensors import matrix_skip

    return sum(1 for t in tensors if matrix_skip(str(t["dtype"]), list(t["shape"])) is None)
