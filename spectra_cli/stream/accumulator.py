"""An online accumulator: feed batches of rows as a model runs, no dump needed.

>>> acc = Accumulator(d=768)
>>> for batch in loader:
...     acc.update(hidden_states(batch))       # numpy, or torch/jax/cupy via DLPack
>>> acc.save("layer12.moments.npz")            # plain arrays, no pickle
>>> spectra_cli.fit(acc, window="auto")        # every analysis of fit that needs only moments

It holds the mergeable moments of :mod:`spectra_cli.stream.moments` (and the sums of the exact
mean cosine, and optionally group moments for the bootstrap), so any split of the rows into
batches, processes or machines, merged in any order, gives the same spectrum up to rounding.
"""

from __future__ import annotations

import json
import os
from typing import Any

import numpy as np

from spectra_cli import __version__, jsonio
from spectra_cli.analysis.isotropy import CosineAccumulator
from spectra_cli.errors import InputError, OptionError, param
from spectra_cli.options import DEFAULT_BLOCK_ROWS, memory_budget, parse_bytes, refuse_over_budget
from spectra_cli.stream.moments import Moments
from spectra_cli.stream.states import MomentsState, RowGuard
from spectra_cli.validate import check_int, product_dtype

#: The budget of an accumulator whose size was checked elsewhere (a loaded moment file).
UNBOUNDED = 1 << 62
#: The moment-file format; a file of another major version is refused.
FORMAT = "spectra.moments/1"


class Accumulator:
    """Mergeable moments of rows with ``d`` features.

    Args:
        d: number of features of every batch.
        precision: arithmetic of the products (``float64``, or ``float32``: faster, higher floor).
        cosine: also keep the sums of the exact mean cosine and mean norm (O(n d), cheap).
        groups: keep the moments of this many groups of batches, for ``fit(..., ci=True)``;
            batch ``i`` goes to group ``i mod groups``.
        drop_nonfinite: skip rows with NaN/inf (counted in ``n_dropped``) instead of raising.
        block_rows: rows per product inside one large batch.
        max_memory: bytes (or ``"8GB"``) its matrices may take (default half the physical memory):
            ``(3 + groups)`` float64 matrices of d x d are checked against it before any is made.
    """

    def __init__(self, d: int, *, precision: str = "float64", cosine: bool = True, groups: int = 0,
                 drop_nonfinite: bool = False, block_rows: int = DEFAULT_BLOCK_ROWS,
                 max_memory: int | str | None = None) -> None:
        d = check_int("d", d, minimum=1, what="a positive number of features")
        dtype = product_dtype(precision)
        groups = check_int("groups", groups, minimum=0)
        block_rows = check_int("block_rows", block_rows, minimum=1)
        need = (3 + groups) * 8.0 * int(d) * int(d)
        refuse_over_budget("Accumulator", f"d = {int(d)}", need, f"{3 + groups} float64 matrices of {d} x {d}",
                           memory_budget(parse_bytes(max_memory)))
        self.d = int(d)
        self.precision = precision
        self.drop_nonfinite = bool(drop_nonfinite)
        self.block_rows = int(block_rows)
        self._state = MomentsState(self.d, precision=precision, groups=groups)
        self.cosine: CosineAccumulator | None = CosineAccumulator(self.d, dtype=dtype) if cosine else None
        self.weighted: bool | None = None
        self.n_dropped = 0
        self.sources: list[dict[str, Any]] = []

    # -- feeding -------------------------------------------------------------------------------
    def update(self, X: Any, weights: Any = None) -> None:
        """Add a batch of rows: an array ``(n, d)`` (or ``(..., d)``, flattened to rows), with
        optional row weights ``(n,)``. Anything with ``__array__`` or ``__dlpack__`` works."""
        from spectra_cli.sources.in_memory import as_array

        A = as_array(X, what="X")
        if A.ndim < 2 or A.shape[-1] != self.d:
            raise InputError(f"X has shape {A.shape}; this accumulator takes rows of d = {self.d} features.")
        from spectra_cli.sources.base import check_numeric_dtype

        check_numeric_dtype(A.dtype, "X")
        A = A.reshape(-1, self.d)
        w = None
        if weights is not None:
            w = np.asarray(as_array(weights, what="weights"), dtype=np.float64).reshape(-1)
            if w.shape[0] != A.shape[0]:
                raise InputError(f"weights has {w.shape[0]} values for {A.shape[0]} rows; one per row is required.")
        if self.weighted is None:
            self.weighted = w is not None
            self._state.moments = Moments.empty(self.d, weighted=self.weighted)
            self._state.groups = [Moments.empty(self.d, weighted=self.weighted) for _ in self._state.groups]
        elif self.weighted != (w is not None):
            kind = "with" if self.weighted else "without"
            raise OptionError(f"this accumulator was fed {kind} weights; give every batch weights or none.")
        seen = self.n
        guard = RowGuard("X", drop_nonfinite=self.drop_nonfinite)
        for lo in range(0, A.shape[0], self.block_rows):
            Xb = A[lo:lo + self.block_rows]
            wb = None if w is None else w[lo:lo + self.block_rows]
            Xk, wk = guard.filter(Xb, wb, lambda i, base=seen + lo: base + i)
            if len(Xk):
                self._add(Xk, wk)
        guard.finish()
        self.n_dropped += guard.dropped

    def _add(self, X: np.ndarray, w: np.ndarray | None) -> None:
        self._state.update(X, w)
        if self.cosine is not None:
            self.cosine.update(X, w)

    def merge(self, other: Accumulator) -> Accumulator:
        """Add the rows of another accumulator (this one changes and is returned)."""
        if not isinstance(other, Accumulator):
            raise TypeError(f"merge takes an Accumulator, not {type(other).__name__}.")
        diffs = [f"{k} {a!r} vs {b!r}" for k, a, b in (("d", self.d, other.d),
                                                     ("precision", self.precision, other.precision))
                 if a != b]
        if self.weighted is not None and other.weighted is not None and self.weighted != other.weighted:
            diffs.append(f"weighted {self.weighted} vs {other.weighted}")
        if (self.cosine is None) != (other.cosine is None):
            diffs.append("cosine sums kept by one only")
        if diffs:
            raise OptionError(f"cannot merge moments that differ: {'; '.join(diffs)}.")
        self._state.merge(other._state)
        if self.cosine is not None and other.cosine is not None:
            self.cosine.merge(other.cosine)
        if self.weighted is None:
            self.weighted = other.weighted
        self.n_dropped += other.n_dropped
        self.sources += other.sources
        return self

    # -- what it holds -------------------------------------------------------------------------
    @property
    def moments(self) -> Moments:
        return self._state.moments

    @property
    def n(self) -> int:
        """Rows accumulated (dropped rows not counted)."""
        return self._state.moments.n

    @property
    def groups(self) -> tuple[Moments, ...]:
        return self._state.filled_groups()

    @property
    def weight_sq_sum(self) -> float:
        """``sum w^2`` of the rows (their count when unweighted): Kish's effective sample size."""
        return self._state.weight_sq_sum

    @classmethod
    def of_pass(cls, moments: Moments, *, groups: tuple[Moments, ...], n_groups: int, weight_sq_sum: float,
                cosine: CosineAccumulator | None, weighted: bool, n_dropped: int, precision: str,
                drop_nonfinite: bool, block_rows: int, sources: list[dict[str, Any]]) -> Accumulator:
        """An accumulator holding what one pass over an input made (``spectra_cli.accumulate``)."""
        acc = cls(moments.d, precision=precision, groups=n_groups, drop_nonfinite=drop_nonfinite,
                  block_rows=block_rows, max_memory=UNBOUNDED)  # the pass checked the budget
        acc._state.moments = moments
        acc._state.groups = list(groups)
        acc._state.weight_sq_sum = float(weight_sq_sum)
        acc.cosine, acc.weighted, acc.n_dropped, acc.sources = cosine, weighted, n_dropped, sources
        return acc

    def options(self) -> dict[str, Any]:
        return {"d": self.d, "precision": self.precision, "weighted": bool(self.weighted),
                "drop_nonfinite": self.drop_nonfinite, "block_rows": self.block_rows,
                "cosine": self.cosine is not None, "groups": self._state.n_groups}

    def __repr__(self) -> str:
        return f"Accumulator(d={self.d}, n={self.n}, precision={self.precision!r}, weighted={bool(self.weighted)})"

    # -- files ---------------------------------------------------------------------------------
    def save(self, path: str | os.PathLike[str]) -> str:
        """Write an ``.npz`` of plain arrays (no pickle) atomically; returns the path."""
        from spectra_cli.sinks import atomic_file

        path = os.fspath(path)
        if not path.lower().endswith(".npz"):
            raise OptionError(f"{param('path', path)}: a moment file must end in .npz.")
        m = self.moments
        arrays: dict[str, np.ndarray] = {
            "format": np.array(FORMAT),
            "meta": np.array(json.dumps({"options": self.options(), "spectra_version": __version__,
                                         "sources": self.sources, "n_dropped": self.n_dropped,
                                         "weight_sq_sum": self._state.weight_sq_sum})),
            **_moments_arrays("", m),
        }
        groups = self.groups
        if groups:
            for i, g in enumerate(groups):
                arrays.update(_moments_arrays(f"g{i}_", g))
        if self.cosine is not None:
            c = self.cosine
            arrays.update({"cos_unit_sum": c.unit_sum, "cos_scalars": np.array(
                [c.w_sum, c.w2_sum, c.norm_sum, c.zero_rows, c.rows], dtype=np.float64)})
        with atomic_file(path, flag="path") as f:
            np.savez(f, **arrays)  # type: ignore[arg-type]
        return path

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> Accumulator:
        """Read a moment file written by :meth:`save` (or ``spectra moments``)."""
        from spectra_cli.sources.npy import read_npz_arrays

        path = os.fspath(path)
        arrays = read_npz_arrays(path)
        return _from_arrays(arrays, path)


def _moments_arrays(prefix: str, m: Moments) -> dict[str, np.ndarray]:
    out = {f"{prefix}scalars": np.array([m.n, m.weight_sum, m.n_positive, m.scale, m.weighted, m.block_rows],
                                        dtype=np.float64),
           f"{prefix}mean_rel": m.mean_rel, f"{prefix}m2": m.m2}
    if m.origin is not None:
        out[f"{prefix}origin"] = m.origin
    return out


def _moments_from(arrays: dict[str, np.ndarray], prefix: str, d: int, path: str) -> Moments:
    try:
        s = np.asarray(arrays[f"{prefix}scalars"], dtype=np.float64)
        mean_rel = np.asarray(arrays[f"{prefix}mean_rel"], dtype=np.float64)
        m2 = np.asarray(arrays[f"{prefix}m2"], dtype=np.float64)
        origin = arrays.get(f"{prefix}origin")
    except (KeyError, ValueError, TypeError) as exc:
        raise InputError(f"{path} is not a spectra moment file (missing or bad {exc}).") from None
    if s.shape != (6,) or mean_rel.shape != (d,) or m2.shape != (d, d) or (origin is not None
                                                                            and origin.shape != (d,)):
        raise InputError(f"{path}: moment arrays do not match d = {d}.")
    values = [s, mean_rel, m2] + ([origin] if origin is not None else [])
    if not all(np.all(np.isfinite(np.asarray(v, dtype=np.float64))) for v in values) or s[0] < 0 or s[1] < 0:
        raise InputError(f"{path}: moment arrays hold non-finite or negative counts.")
    return Moments(int(s[0]), float(s[1]), int(s[2]), mean_rel, m2, float(s[3]), bool(s[4]), int(s[5]),
                   None if origin is None else np.asarray(origin, dtype=np.float64))


def _from_arrays(arrays: dict[str, np.ndarray], path: str) -> Accumulator:
    fmt = str(arrays.get("format", ""))
    if fmt.split("/")[0] != FORMAT.split("/")[0]:
        raise InputError(f"{path} is not a spectra moment file (format {fmt or 'missing'}; expected {FORMAT}).")
    if fmt != FORMAT:
        raise InputError(f"{path} has moment-file format {fmt}; this spectra reads {FORMAT}.")
    try:
        meta = jsonio.loads(str(arrays["meta"]), f"{path} metadata")
        opts = meta["options"]
        d = int(opts["d"])
        m2_shape = np.shape(arrays["m2"])
        if m2_shape != (d, d):  # checked before anything of size d is made: a header may lie
            raise InputError(f"{path}: its metadata says d = {d} but its m2 array has shape {list(m2_shape)}.")
        acc = cls_new(d, opts)
    except InputError:
        raise
    except (KeyError, ValueError, TypeError, OptionError) as exc:
        raise InputError(f"{path}: its metadata is malformed ({type(exc).__name__}: {exc}).") from None
    acc._state.moments = _moments_from(arrays, "", d, path)
    saved = sorted(int(k[1:-len("_scalars")]) for k in arrays
                   if k.startswith("g") and k.endswith("_scalars") and k[1:-len("_scalars")].isdigit())
    if len(saved) > acc._state.n_groups:
        raise InputError(f"{path}: it holds {len(saved)} groups but its metadata says {acc._state.n_groups}.")
    acc._state.groups = [_moments_from(arrays, f"g{i}_", d, path) for i in saved]
    acc.weighted = bool(opts.get("weighted", False)) if acc._state.moments.n else None
    acc.n_dropped = int(meta.get("n_dropped", 0))
    acc._state.weight_sq_sum = float(meta.get("weight_sq_sum", acc._state.moments.n))
    acc.sources = list(meta.get("sources", []))
    if acc.cosine is not None:
        try:
            c, sc = acc.cosine, np.asarray(arrays["cos_scalars"], dtype=np.float64)
            c.unit_sum = np.asarray(arrays["cos_unit_sum"], dtype=np.float64).reshape(d)
            c.w_sum, c.w2_sum, c.norm_sum = float(sc[0]), float(sc[1]), float(sc[2])
            c.zero_rows, c.rows = int(sc[3]), int(sc[4])
        except (KeyError, ValueError, IndexError) as exc:
            raise InputError(f"{path}: its cosine sums are malformed ({exc}).") from None
    return acc


def cls_new(d: int, opts: dict[str, Any]) -> Accumulator:
    precision = str(opts.get("precision", "float64"))
    # The budget of a loaded file is checked from its array headers (inputs.check_moment_file_budget), which
    # hold the groups it really has; its metadata's group count is only a number.
    return Accumulator(d, precision=precision, cosine=bool(opts.get("cosine", True)),
                       groups=int(opts.get("groups", 0)), drop_nonfinite=bool(opts.get("drop_nonfinite", False)),
                       block_rows=int(opts.get("block_rows", DEFAULT_BLOCK_ROWS)), max_memory=UNBOUNDED)
