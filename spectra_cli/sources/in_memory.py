"""Arrays from Python: :func:`as_array` (numpy, ``__dlpack__``, ``__array__``) and an in-memory array as a
source, for library use (``spectra_cli.fit(X)``)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import numpy as np

from spectra_cli.sources.base import Source, SourceInfo, check_numeric_dtype, matrix_shape

ACCEPTED = ("a path (str or os.PathLike), a numpy array, an object with __array__ or __dlpack__ "
            "(torch, jax, cupy tensors), or a spectra Accumulator")


def as_array(obj: Any, *, what: str = "X") -> np.ndarray:
    """A numpy view of an array-like: ndarray, ``__dlpack__`` (copied to host if needed) or ``__array__``.

    Lists, strings and other objects are a TypeError: spectra does not guess a matrix from them.
    """
    if isinstance(obj, np.ma.MaskedArray):
        if np.ma.getmaskarray(obj).any():
            raise TypeError(f"{what} is a masked array with masked entries; drop those rows, or pass the rows to keep "
                            "as mask= (Accumulator.update).")
        return np.asarray(obj.data)
    if isinstance(obj, np.ndarray):
        return obj
    if isinstance(obj, str | bytes | os.PathLike | list | tuple | dict | set) or obj is None:
        kind = type(obj).__name__
        hint = " (wrap it as np.asarray(...) if it is a list of rows)" if isinstance(obj, list | tuple) else ""
        raise TypeError(f"{what} must be an array: a numpy array or an object with __array__ or __dlpack__; "
                        f"got {kind}{hint}.")
    if hasattr(obj, "__dlpack__"):
        obj = _on_host(obj, what)
        bits = _bfloat16_bits(obj)
        if bits is not None:
            return bfloat16_to_float32(bits)
        try:
            return np.from_dlpack(obj, device="cpu")
        except (TypeError, BufferError, ValueError, RuntimeError, AttributeError) as first:
            if not hasattr(obj, "__array__"):
                raise TypeError(f"{what} could not be read through DLPack ({first}); move it to host memory "
                                "and a dtype numpy knows (e.g. tensor.float().cpu()).") from None
    if hasattr(obj, "__array__"):
        try:
            arr = np.asarray(obj)
        except (ValueError, TypeError, RuntimeError) as exc:
            raise TypeError(f"{what} could not be converted to an array: {exc}") from None
        if arr.dtype.name == "bfloat16" and arr.dtype.itemsize == 2:  # JAX's (ml_dtypes): the same 16 bits
            return bfloat16_to_float32(arr.view(np.uint16))
        if arr.dtype.hasobject:
            raise TypeError(f"{what} converts to an object array (ragged rows?); a numeric matrix is required.")
        return arr
    raise TypeError(f"{what} must be {ACCEPTED}; got {type(obj).__name__}.")


def bfloat16_to_float32(bits: np.ndarray) -> np.ndarray:
    """bfloat16 values, given as their 16 bits, as float32: exact (bfloat16 is float32's top half)."""
    return (np.asarray(bits).view(np.uint16).astype(np.uint32) << 16).view(np.float32)


def _on_host(obj: Any, what: str) -> Any:
    """A torch-like tensor detached from autograd and moved to host memory (one clear error if it cannot be)."""
    if getattr(obj, "requires_grad", False) and callable(getattr(obj, "detach", None)):
        obj = obj.detach()
    device = getattr(obj, "device", None)
    kind = getattr(device, "type", None)
    if isinstance(kind, str) and kind != "cpu" and callable(getattr(obj, "cpu", None)):
        try:
            obj = obj.cpu()
        except Exception as exc:  # noqa: BLE001 - the framework's own error, reported in one line
            raise TypeError(f"{what} is on {device} and could not be moved to host memory ({exc}); move it "
                            "with tensor.cpu() first.") from None
    return obj


def _bfloat16_bits(obj: Any) -> np.ndarray | None:
    """The 16 bits of a torch bfloat16 tensor (which numpy's DLPack cannot take), else None."""
    if str(getattr(obj, "dtype", "")) != "torch.bfloat16":
        return None
    import sys

    torch = sys.modules.get("torch")
    if torch is None or not callable(getattr(obj, "view", None)):
        return None
    return np.from_dlpack(obj.contiguous().view(torch.int16), device="cpu").view(np.uint16)


class ArraySource(Source):
    def __init__(self, X: np.ndarray, *, name: str = "<array>", weights: np.ndarray | None = None) -> None:
        X = np.asarray(X)
        check_numeric_dtype(X.dtype, name)
        n, d, layout = matrix_shape(X.shape, name)
        self._X = X.reshape(n, d)
        self._w = None if weights is None else np.asarray(weights, dtype=np.float64)
        self.has_weights = self._w is not None
        self.info = SourceInfo(path=name, format="array", shape=tuple(X.shape), dtype=str(X.dtype),
                               n_rows=n, n_features=d, layout=layout)

    def iter_blocks(
        self, start: int, stop: int, block_rows: int
    ) -> Iterator[tuple[np.ndarray, np.ndarray | None]]:
        for lo in range(start, stop, block_rows):
            hi = min(lo + block_rows, stop)
            yield self._X[lo:hi], None if self._w is None else self._w[lo:hi]
