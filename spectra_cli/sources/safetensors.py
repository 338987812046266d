"""safetensors checkpoints, read without the safetensors package (the format is a JSON header
and raw little-endian tensors): each 2-D tensor is a matrix (rows = first axis), read in row
blocks with positioned reads; float16 and bfloat16 are converted exactly (bfloat16 is the top
half of a float32). Sharded checkpoints are found through ``*.safetensors.index.json``."""

from __future__ import annotations

import io
import math
import os
import struct
from collections.abc import Iterator
from typing import Any

import numpy as np

from spectra_cli.errors import InputError
from spectra_cli.sources import formats
from spectra_cli.sources.base import Source, SourceInfo

DTYPES: dict[str, np.dtype] = {
    "F64": np.dtype("<f8"), "F32": np.dtype("<f4"), "F16": np.dtype("<f2"), "BF16": np.dtype("<u2"),
    "I64": np.dtype("<i8"), "I32": np.dtype("<i4"), "I16": np.dtype("<i2"), "I8": np.dtype("i1"),
    "U8": np.dtype("u1"), "U16": np.dtype("<u2"), "U32": np.dtype("<u4"), "U64": np.dtype("<u8"),
}
_MAX_HEADER = 100 << 20
#: The name ending of a sharded checkpoint's index (``model.safetensors.index.json``).
INDEX_SUFFIX = formats.SAFETENSORS.extension + ".index.json"


def read_header(path: str) -> tuple[dict[str, Any], int]:
    """The tensors' descriptions and the byte offset where data starts.

    Every entry is checked against the format: ``dtype`` a string, ``shape`` a list of
    non-negative integers, ``data_offsets`` two integers inside the data section whose byte count
    matches shape and dtype; the tensors' byte ranges, in order, must tile the data section exactly
    (no overlap, no hole, nothing past the end), as the format requires. Sizes are Python integers.
    """
    from spectra_cli.jsonio import loads
    from spectra_cli.sources.base import open_regular

    with open_regular(path) as f:
        key = _file_key(f)
        if key is not None and key in _HEADERS:  # (a batch opens every tensor of a checkpoint: parse its header once)
            return _HEADERS[key]
        raw = f.read(8)
        if len(raw) != 8:
            raise InputError(f"{path} is not a safetensors file (shorter than 8 bytes).")
        (n,) = struct.unpack("<Q", raw)
        from spectra_cli.sources.remote import size as file_size

        size = file_size(f)
        if n > _MAX_HEADER or 8 + n > size:
            raise InputError(f"{path} is not a safetensors file (header length {n} is implausible for a file of "
                             f"{size} bytes).")
        header = loads(f.read(n), f"{path}'s safetensors header")
    if not isinstance(header, dict):
        raise InputError(f"{path} is not a safetensors file: its header is not a JSON object.")
    meta = header.pop("__metadata__", None)
    if meta is not None and not isinstance(meta, dict):
        raise InputError(f"{path}: __metadata__ must be a JSON object.")
    data_size = size - 8 - n
    spans: list[tuple[int, int, str]] = []
    for name, t in header.items():
        if not isinstance(t, dict):
            raise InputError(f"{path}: tensor {name!r} has a malformed header entry (not an object).")
        lo_hi, shape, dtype = t.get("data_offsets"), t.get("shape"), t.get("dtype")
        if not isinstance(dtype, str) or not isinstance(shape, list) or not isinstance(lo_hi, list) \
                or len(lo_hi) != 2 or not all(_count(v) for v in [*shape, *lo_hi]):
            raise InputError(f"{path}: tensor {name!r} has a malformed header entry (dtype must be a string, "
                             "shape and data_offsets lists of non-negative integers).")
        lo, hi = lo_hi
        if lo > hi or hi > data_size:
            raise InputError(f"{path}: tensor {name!r} has data_offsets [{lo}, {hi}] outside the data section "
                             f"of {data_size} bytes (truncated or corrupt file).")
        if dtype in DTYPES and hi - lo != math.prod(shape) * DTYPES[dtype].itemsize:
            raise InputError(f"{path}: tensor {name!r} has {hi - lo} bytes for shape {shape} {dtype}.")
        spans.append((lo, hi, name))
    end = 0
    for lo, hi, name in sorted(spans):
        if lo != end:
            what = "overlaps the previous tensor" if lo < end else f"leaves a hole at bytes {end}..{lo}"
            raise InputError(f"{path}: tensor {name!r} {what}; the data section must be tiled exactly.")
        end = hi
    if end != data_size:
        raise InputError(f"{path}: the tensors cover {end} of the {data_size} data bytes; the file has bytes no "
                         "tensor describes (corrupt, or not a safetensors file).")
    if key is not None and n <= _CACHED_HEADER:
        while len(_HEADERS) >= _CACHED_FILES:
            _HEADERS.pop(next(iter(_HEADERS)))
        _HEADERS[key] = (header, 8 + n)
    return header, 8 + n


#: Checked headers kept (read-only) by the file's identity: device, inode, size and modification time, taken from
#: the open file itself. Each of the 3,000 tensors of a checkpoint parsed the whole header again (quadratic).
_HEADERS: dict[tuple[int, int, int, int], tuple[dict[str, Any], int]] = {}
_CACHED_FILES = 4
_CACHED_HEADER = 16 << 20


def _file_key(f: Any) -> tuple[int, int, int, int] | None:
    try:
        st = os.fstat(f.fileno())
    except (AttributeError, OSError, ValueError, io.UnsupportedOperation):
        return None
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)


def _count(v: object) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v >= 0


def list_tensors(path: str) -> list[dict[str, Any]]:
    header, _ = read_header(path)
    return [{"name": k, "dtype": v["dtype"], "shape": v["shape"]} for k, v in sorted(header.items())]


def shard_files(directory: str) -> list[str]:
    """The shard files named by an index (``*.safetensors.index.json``), or every ``*.safetensors``.

    Shards must be plain file names inside the index's directory: a name with a path separator,
    ``..`` or an absolute path is refused (an index must not make spectra read other files)."""
    from spectra_cli.sources.base import read_json as read

    listing = _names_in(directory)
    shard = formats.SAFETENSORS.extension  # (matched as written: the names a checkpoint's index gives)
    index = sorted(f for f in listing if f.endswith(INDEX_SUFFIX))
    if index:
        maps = []
        for name in index:
            p = _inside(directory, name)
            doc = read(p, "safetensors index")
            weight_map = doc.get("weight_map") if isinstance(doc, dict) else None
            if not isinstance(weight_map, dict) or not all(isinstance(v, str) for v in weight_map.values()):
                raise InputError(f"{p} is not a valid safetensors index: 'weight_map' must map tensor names to "
                                 "shard file names.")
            maps.append((p, weight_map))
        p, weight_map = maps[0]
        for other, other_map in maps[1:]:  # (two indexes that disagree: which one is the checkpoint is unknown)
            if other_map != weight_map:
                raise InputError(f"{p} and {other} are two safetensors indexes that map the tensors differently; "
                                 "keep the checkpoint's one in the folder.")
        names = sorted(set(weight_map.values()))
        for name in names:
            if (not name or os.path.isabs(name) or "/" in name or "\\" in name or name in (".", "..")
                    or "\x00" in name or not name.endswith(shard)):
                raise InputError(f"{p} names shard {name!r}; shards must be plain .safetensors file names in the "
                                 "index's directory.")
        files = [_inside(directory, name) for name in names]
        missing = [f for f in files if not _is_file(f)]
        if missing:
            raise InputError(f"{p} names shard {missing[0]}, which does not exist.")
        for f in files:
            check_link_inside(f, directory)
        check_weight_map(p, weight_map, directory)
        beside = sorted(f for f in listing if f.endswith(shard) and f not in names
                        and not f.startswith((".", "_")))
        if beside:
            more = f" (and {len(beside) - 1} more)" if len(beside) > 1 else ""
            raise InputError(f"{p} does not name the shard {beside[0]} beside it{more}; its tensors would be left "
                             "out. Add them to the index, or move the file.")
        return files
    found = sorted(_inside(directory, f) for f in listing
                   if f.endswith(shard) and not f.startswith((".", "_")) and _is_file(_inside(directory, f)))
    for f in found:
        check_link_inside(f, directory)
    return found


def check_link_inside(path: str, directory: str) -> None:
    """A shard that is a symbolic link must lead inside the model folder, or, in a Hugging Face cache
    (``.../models--org--name/snapshots/<rev>/``), inside that repository's ``blobs`` folder: a folder must not
    make spectra read files elsewhere."""
    from spectra_cli.sources.remote import is_url

    if is_url(path) or not os.path.islink(path):
        return
    target = os.path.realpath(path)
    root = os.path.realpath(directory)
    allowed = [root]
    parts = root.split(os.sep)
    if len(parts) >= 3 and parts[-2] == "snapshots":
        allowed.append(os.path.join(os.sep.join(parts[:-2]), "blobs"))
    if not any(os.path.commonpath([target, a]) == a for a in allowed):
        raise InputError(f"shard {path} is a link to {target}, outside the model folder {directory}; copy the file "
                         "into the folder (a folder must not make spectra read files elsewhere).")


def _names_in(directory: str) -> list[str]:
    """The entries of a folder, local or a URL (``hf://org/model``, ``s3://bucket/ckpt/``): one code path."""
    from spectra_cli.sources.remote import filesystem, is_url

    if not is_url(directory):
        return os.listdir(directory)
    from spectra_cli.sources.remote import reaching

    fs, path = filesystem(directory)
    with reaching(directory, keep=()):
        entries = fs.ls(path, detail=False)
    return sorted(os.path.basename(str(e).rstrip("/")) for e in entries)


def _inside(directory: str, name: str) -> str:
    from spectra_cli.sources.remote import is_url

    return f"{directory.rstrip('/')}/{name}" if is_url(directory) else os.path.join(directory, name)


def _is_file(path: str) -> bool:
    from spectra_cli.sources.remote import exists, is_url, isdir

    return exists(path) and not isdir(path) if is_url(path) else os.path.isfile(path)


def check_weight_map(index: str, weight_map: dict[str, str], directory: str) -> None:
    """The index and its shards must agree, tensor by tensor: a tensor the index places in a shard
    that does not hold it, or a shard tensor the index does not name, is an input error naming it
    (a checkpoint whose index and shards disagree is a half-copied or hand-edited one)."""
    held: dict[str, str] = {}
    for shard in sorted(set(weight_map.values())):
        for name in read_header(_inside(directory, shard))[0]:
            held[name] = shard
    for name, shard in sorted(weight_map.items()):
        if held.get(name) != shard:
            where = f"it is in {held[name]}" if name in held else "no shard the index names holds it"
            raise InputError(f"{index} places tensor {name!r} in {shard}, but {where}; the index and its shards "
                             "disagree.")
    extra = sorted(set(held) - set(weight_map))
    if extra:
        raise InputError(f"{index} does not name tensor {extra[0]!r}, which {held[extra[0]]} holds"
                         f"{f' (and {len(extra) - 1} more)' if len(extra) > 1 else ''}; the index and its shards "
                         "disagree.")


_INT_KINDS = {"I64", "I32", "I16", "I8", "U8", "U16", "U32", "U64"}


def matrix_skip(dtype: str, shape: list[int]) -> tuple[str, str] | None:
    """``(kind, reason)`` when a tensor is not a weight matrix, else None: the one rule by which
    ``info`` counts matrices, ``fit`` picks a checkpoint's only matrix and ``batch`` lists its items."""
    if dtype.upper() in _INT_KINDS or dtype.lower().startswith(("int", "uint")):
        return "integer buffer", f"{dtype} tensor of shape {shape} (an index or counter, not weights)"
    if dtype.upper() == "BOOL" or dtype == "bool":
        return "boolean buffer", f"bool tensor of shape {shape}"
    if dtype.upper() not in {"F64", "F32", "F16", "BF16"} and not dtype.startswith("float"):
        return "unsupported dtype", f"dtype {dtype} is not float64/32/16 or bfloat16"
    if len(shape) == 0:
        return "scalar", "a scalar"
    if len(shape) == 1:
        return "vector", f"a vector of {shape[0]} (biases, norms)"
    if len(shape) > 2:
        return "tensor of 3+ dimensions", (f"shape {shape} is not 2-D: spectra's convention analyses matrices (a "
                                           "4-D convolution kernel's slices are read with --convention weightwatcher, "
                                           "as WeightWatcher reads them)" if len(shape) == 4 else
                                           f"shape {shape} is not 2-D (WeightWatcher skips these too)")
    if min(shape) < 2:
        return "matrix with a side < 2", f"shape {shape}: a spectrum needs both sides >= 2"
    return None



def read_tensor(path: str, name: str) -> np.ndarray:
    """One tensor of a safetensors file, whole, as float64 (an adapter's factors, a convolution's kernel: small)."""
    from spectra_cli.sources.base import open_regular

    header, start = read_header(path)
    t = header[name]
    if t["dtype"] not in ("F64", "F32", "F16", "BF16"):
        raise InputError(f"{path}: tensor {name!r} has dtype {t['dtype']}; a weight is a float tensor.")
    raw_dtype = DTYPES[t["dtype"]]
    lo, hi = (int(x) for x in t["data_offsets"])
    with open_regular(path) as f:
        f.seek(start + lo)
        raw = np.frombuffer(f.read(hi - lo), dtype=raw_dtype)
    if raw.nbytes != hi - lo:
        raise InputError(f"{path} ended early in tensor {name!r}.")
    values = (raw.astype(np.uint32) << 16).view(np.float32) if t["dtype"] == "BF16" else raw
    return values.astype(np.float64).reshape([int(s) for s in t["shape"]])


class SafetensorsSource(Source):
    """One 2-D tensor of a checkpoint, addressed as ``file.safetensors::tensor.name``."""

    def __init__(self, path: str, tensor: str | None) -> None:
        header, start = read_header(path)
        names = sorted(header)
        if tensor is None:
            two_d = [n for n in names if matrix_skip(str(header[n]["dtype"]), list(header[n]["shape"])) is None]
            if len(two_d) != 1:
                raise InputError(
                    f"{path} holds {len(two_d)} weight matrices; name one as {path}::NAME "
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
            kernel = (" (a convolution kernel: spectra batch --convention weightwatcher reads its slices, as "
                      "WeightWatcher does)" if len(shape) == 4 else "")
            raise InputError(f"tensor {tensor!r} has shape {shape}; a 2-D matrix is required{kernel}.")
        self._path = path
        self._raw = DTYPES[t["dtype"]]
        self._bf16 = t["dtype"] == "BF16"
        self._offset = start + int(t["data_offsets"][0])
        from spectra_cli.sources.base import open_regular

        self._f: io.BufferedReader = open_regular(path)
        dtype = "bfloat16" if self._bf16 else str(self._raw.newbyteorder("="))
        self.info = SourceInfo(path=f"{path}::{tensor}", format=formats.SAFETENSORS.name, shape=shape, dtype=dtype,
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
