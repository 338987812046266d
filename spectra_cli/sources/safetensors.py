"""safetensors checkpoints, read without the safetensors package (the format is a JSON header
and raw little-endian tensors): each 2-D tensor is a matrix (rows = first axis), read in row
blocks with positioned reads; float16 and bfloat16 are converted exactly (bfloat16 is the top
half of a float32). Sharded checkpoints are found through ``*.safetensors.index.json``."""

from __future__ import annotations

import io
import json
import os
import struct
from collections.abc import Iterator
from typing import Any

import numpy as np

from spectra_cli.errors import InputError
from spectra_cli.sources.base import Source, SourceInfo

DTYPES: dict[str, np.dtype] = {
    "F64": np.dtype("<f8"), "F32": np.dtype("<f4"), "F16": np.dtype("<f2"), "BF16": np.dtype("<u2"),
    "I64": np.dtype("<i8"), "I32": np.dtype("<i4"), "I16": np.dtype("<i2"), "I8": np.dtype("i1"),
    "U8": np.dtype("u1"), "U16": np.dtype("<u2"), "U32": np.dtype("<u4"), "U64": np.dtype("<u8"),
}
_MAX_HEADER = 100 << 20


def read_header(path: str) -> tuple[dict[str, Any], int]:
    """The tensors' descriptions and the byte offset where data starts."""
    try:
        with open(path, "rb") as f:
            raw = f.read(8)
            if len(raw) != 8:
                raise InputError(f"{path} is not a safetensors file (shorter than 8 bytes).")
            (n,) = struct.unpack("<Q", raw)
            if n > _MAX_HEADER:
                raise InputError(f"{path} is not a safetensors file (header length {n} is implausible).")
            header = json.loads(f.read(n))
    except FileNotFoundError:
        raise InputError(f"no such file or directory: {path}") from None
    except (ValueError, UnicodeDecodeError) as exc:
        raise InputError(f"{path} is not a safetensors file: its header is not JSON ({exc}).") from None
    if not isinstance(header, dict):
        raise InputError(f"{path} is not a safetensors file: its header is not a JSON object.")
    header.pop("__metadata__", None)
    size = os.path.getsize(path)
    for name, t in header.items():
        try:
            lo, hi = t["data_offsets"]
            shape = [int(s) for s in t["shape"]]
            dtype = t["dtype"]
        except (KeyError, TypeError, ValueError):
            raise InputError(f"{path}: tensor {name!r} has a malformed header entry.") from None
        if 8 + n + hi > size:
            raise InputError(f"{path} is truncated: tensor {name!r} ends at byte {8 + n + hi} of {size}.")
        if dtype in DTYPES and hi - lo != int(np.prod(shape, dtype=np.int64)) * DTYPES[dtype].itemsize:
            raise InputError(f"{path}: tensor {name!r} has {hi - lo} bytes for shape {shape} {dtype}.")
    return header, 8 + n


def list_tensors(path: str) -> list[dict[str, Any]]:
    header, _ = read_header(path)
    return [{"name": k, "dtype": v["dtype"], "shape": v["shape"]} for k, v in sorted(header.items())]


def shard_files(directory: str) -> list[str]:
    """The shard files named by an index (``*.safetensors.index.json``), or every ``*.safetensors``."""
    index = sorted(f for f in os.listdir(directory) if f.endswith(".safetensors.index.json"))
    if index:
        p = os.path.join(directory, index[0])
        try:
            with open(p, encoding="utf-8") as f:
                weight_map = json.load(f)["weight_map"]
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise InputError(f"{p} is not a valid safetensors index: {exc}") from None
        files = sorted({os.path.join(directory, v) for v in weight_map.values()})
        missing = [f for f in files if not os.path.exists(f)]
        if missing:
            raise InputError(f"{p} names shard {missing[0]}, which does not exist.")
        return files
    return sorted(os.path.join(directory, f) for f in os.listdir(directory) if f.endswith(".safetensors"))


class SafetensorsSource(Source):
    """One 2-D tensor of a checkpoint, addressed as ``file.safetensors::tensor.name``."""

    def __init__(self, path: str, tensor: str | None) -> None:
        header, start = read_header(path)
        names = sorted(header)
        if tensor is None:
            two_d = [n for n in names if len(header[n]["shape"]) == 2]
            if len(two_d) != 1:
                raise InputError(
                    f"{path} holds {len(two_d)} 2-D tensors; name one as {path}::NAME "
                    "(spectra info lists them; spectra batch analyses them all)."
                )
            tensor = two_d[0]
        if tensor not in header:
            raise InputError(f"{path} has no tensor {tensor!r} (spectra info {path} lists them).")
        t = header[tensor]
        if t["dtype"] not in DTYPES:
            raise InputError(f"tensor {tensor!r} has dtype {t['dtype']}; spectra reads float and integer tensors.")
        shape = tuple(int(s) for s in t["shape"])
        if len(shape) != 2:
            raise InputError(f"tensor {tensor!r} has shape {shape}; a 2-D matrix is required.")
        self._path = path
        self._raw = DTYPES[t["dtype"]]
        self._bf16 = t["dtype"] == "BF16"
        self._offset = start + int(t["data_offsets"][0])
        self._f: io.BufferedReader = open(path, "rb")  # noqa: SIM115 - closed in close()
        dtype = "bfloat16" if self._bf16 else str(self._raw.newbyteorder("="))
        self.info = SourceInfo(path=f"{path}::{tensor}", format="safetensors", shape=shape, dtype=dtype,
                               n_rows=shape[0], n_features=shape[1], layout="2-D tensor (rows = first axis)",
                               key=tensor)

    def iter_blocks(
        self, start: int, stop: int, block_rows: int
    ) -> Iterator[tuple[np.ndarray, np.ndarray | None]]:
        d = self.info.n_features
        row_bytes = d * self._raw.itemsize
        for lo in range(start, stop, block_rows):
            hi = min(lo + block_rows, stop)
            self._f.seek(self._offset + lo * row_bytes)
            raw = np.frombuffer(self._f.read((hi - lo) * row_bytes), dtype=self._raw)
            if raw.size != (hi - lo) * d:
                raise InputError(f"{self._path} ended early in tensor {self.info.key!r}.")
            if self._bf16:
                block = (raw.astype(np.uint32) << 16).view(np.float32)
            else:
                block = raw.astype(self._raw.newbyteorder("="), copy=False)
            yield block.reshape(hi - lo, d), None

    def close(self) -> None:
        self._f.close()
